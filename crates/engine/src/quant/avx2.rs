//! x86_64 kernels: AVX2 + FMA + F16C, chosen at run time.
//!
//! Block formats: each weight block (or K-quant sub-block) is widened to 32 i16 lanes (two
//! registers) and multiplied with the 16-bit activations by `vpmaddwd` into i32 lanes (no
//! overflow: |w| ≤ 128 and |x| ≤ 32767, see `act`). Legacy blocks get one float multiply-add
//! per block applying both scales; a K-quant super-block's eight sub-block dots (sixteen
//! half-dots for Q6_K) are reduced into one register, lane k = piece k, converted once and
//! scaled by eight weight scales times eight activation scales in one multiply-add. Each weight
//! row is unpacked once per group of up to four tokens.
//!
//! All loads are unaligned: weight bytes come straight from files.

// Token and accumulator indices walk several per-token arrays in step.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::act::{BlockActs, ACT_BLOCK};
use super::block::{as_blocks, LegacyScales, QuantBlock};
use super::float::{f16_to_f32, FloatFormat};
use super::format::BlockMatmul;
use super::kquant::{BlockQ4K, BlockQ5K, BlockQ6K};
use super::matrix::QMatrix;
use super::q4::{BlockQ4_0, BlockQ4_1};
use super::q5::{BlockQ5_0, BlockQ5_1};
use super::q8_0::BlockQ8_0;
use super::tile::tiled_matmul;
use knot::DType;

/// The block formats with an AVX2 kernel (every one the engine reads).
pub(super) const KERNELS: &[(DType, BlockMatmul)] = &[
    (DType::Q8_0, matmul_legacy::<BlockQ8_0>),
    (DType::Q4_0, matmul_legacy::<BlockQ4_0>),
    (DType::Q4_1, matmul_legacy::<BlockQ4_1>),
    (DType::Q5_0, matmul_legacy::<BlockQ5_0>),
    (DType::Q5_1, matmul_legacy::<BlockQ5_1>),
    (DType::Q4K, matmul_k::<BlockQ4K>),
    (DType::Q5K, matmul_k::<BlockQ5K>),
    (DType::Q6K, matmul_k::<BlockQ6K>),
];

pub(super) fn detected() -> bool {
    // std caches the CPUID answers, so this is cheap after the first call.
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// [Σa, Σb, …] of eight i32x8 vectors: lane k of the result is the sum of the lanes of `v[k]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn sum8(v: &[__m256i; 8]) -> __m256i {
    // Pairwise adds within each 128-bit half: after two rounds, half h of `lo4` holds the sums
    // of half h of v[0..4], and of `hi4` those of v[4..8].
    let lo4 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    let hi4 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(lo4, hi4),
        _mm256_permute2x128_si256::<0x31>(lo4, hi4),
    )
}

/// Σ w·x over one 32-value block: `w` holds elements 0..16 and 16..32 as i16, `x` points at 32
/// activations. Eight i32 lanes, each the sum of four products.
///
/// # Safety
/// 32 readable i16 at `x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot32(w: &[__m256i; 2], x: *const i16) -> __m256i {
    // SAFETY: 64 readable bytes at x, per the contract.
    let (x0, x1) = unsafe {
        (
            _mm256_loadu_si256(x.cast()),
            _mm256_loadu_si256(x.add(16).cast()),
        )
    };
    _mm256_add_epi32(_mm256_madd_epi16(w[0], x0), _mm256_madd_epi16(w[1], x1))
}

/// Eight contiguous f32 at `p`.
///
/// # Safety
/// 8 readable f32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8f(p: *const f32) -> __m256 {
    // SAFETY: per the contract.
    unsafe { _mm256_loadu_ps(p) }
}

/// The per-block offset of a legacy format: none (q8_0, q5_0), a stored f16 `m` (q4_1,
/// q5_1), or −8·d (q4_0).
#[derive(PartialEq, Eq)]
pub(super) enum Offset {
    None,
    Stored,
    MinusEightD,
}

/// A legacy 32-value block format as these kernels see it.
pub(super) trait LegacyBlock: LegacyScales {
    const OFFSET: Offset;
    /// The block's integer weights: elements 0..16 and 16..32 as i16 lanes.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available.
    unsafe fn weights(&self) -> [__m256i; 2];
}

/// Nibbles (element j the low nibble of byte j, j + 16 the high nibble) as i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn nibbles(qs: &[u8; 16]) -> [__m256i; 2] {
    // SAFETY: 16 readable bytes.
    let bytes = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(qs.as_ptr().cast()) });
    [
        _mm256_and_si256(bytes, _mm256_set1_epi16(0x0f)),
        _mm256_srli_epi16::<4>(bytes),
    ]
}

/// The 16 bits of `bits` as 0 or 16 per i16 lane (lane j ← bit j): the fifth bit of 5-bit
/// values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fifth_bits(bits: u16) -> __m256i {
    let lane_bit = _mm256_setr_epi16(
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        512,
        1024,
        2048,
        4096,
        8192,
        16384,
        i16::MIN,
    );
    let set = _mm256_and_si256(_mm256_set1_epi16(bits as i16), lane_bit);
    _mm256_and_si256(_mm256_cmpeq_epi16(set, lane_bit), _mm256_set1_epi16(16))
}

/// Unsigned 5-bit values: nibbles plus bit j of `qh` as the fifth bit of element j.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_values(qh: [u8; 4], qs: &[u8; 16]) -> [__m256i; 2] {
    let qh = u32::from_le_bytes(qh);
    let [lo, hi] = nibbles(qs);
    [
        _mm256_or_si256(lo, fifth_bits(qh as u16)),
        _mm256_or_si256(hi, fifth_bits((qh >> 16) as u16)),
    ]
}

impl LegacyBlock for BlockQ4_0 {
    const OFFSET: Offset = Offset::MinusEightD;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(&self) -> [__m256i; 2] {
        nibbles(&self.qs)
    }
}

impl LegacyBlock for BlockQ4_1 {
    const OFFSET: Offset = Offset::Stored;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(&self) -> [__m256i; 2] {
        nibbles(&self.qs)
    }
}

impl LegacyBlock for BlockQ5_0 {
    const OFFSET: Offset = Offset::None;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(&self) -> [__m256i; 2] {
        let sixteen = _mm256_set1_epi16(16);
        q5_values(self.qh, &self.qs).map(|v| _mm256_sub_epi16(v, sixteen))
    }
}

impl LegacyBlock for BlockQ5_1 {
    const OFFSET: Offset = Offset::Stored;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(&self) -> [__m256i; 2] {
        q5_values(self.qh, &self.qs)
    }
}

impl LegacyBlock for BlockQ8_0 {
    const OFFSET: Offset = Offset::None;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(&self) -> [__m256i; 2] {
        // SAFETY: 32 readable bytes, two 16-byte loads.
        unsafe {
            [
                _mm256_cvtepi8_epi16(_mm_loadu_si128(self.qs.as_ptr().cast())),
                _mm256_cvtepi8_epi16(_mm_loadu_si128(self.qs[16..].as_ptr().cast())),
            ]
        }
    }
}

/// Checks that `acts` holds `tokens` tokens of `per_token` activation blocks.
#[inline]
fn assert_acts(acts: &BlockActs, tokens: usize, per_token: usize) {
    let blocks = tokens * per_token;
    assert!(
        acts.d.len() >= blocks && acts.s.len() >= blocks && acts.qs.len() >= blocks * ACT_BLOCK
    );
}

/// d and m (see `Offset`) of a legacy block as f32, both converted by one instruction.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn legacy_scales<B: LegacyBlock>(blk: &B) -> (f32, f32) {
    let (d_bits, m_bits) = blk.scale_bits();
    let pair = _mm_cvtph_ps(_mm_cvtsi32_si128(
        (u32::from(d_bits) | (u32::from(m_bits) << 16)) as i32,
    ));
    let d = _mm_cvtss_f32(pair);
    let m = match B::OFFSET {
        Offset::None => 0.0,
        Offset::Stored => _mm_cvtss_f32(_mm_movehdup_ps(pair)),
        Offset::MinusEightD => -8.0 * d,
    };
    (d, m)
}

/// One legacy block against `NT` tokens: activation block `ab0 + t·stride` of each.
///
/// # Safety
/// Those activation blocks exist behind the pointers `(qs, d, s)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn legacy_block<B: LegacyBlock, const NT: usize>(
    blk: &B,
    (xq, xd, xs): (*const i16, *const f32, *const f32),
    (ab0, stride): (usize, usize),
    acc: &mut [__m256; NT],
    off: &mut [f32; NT],
) {
    let (d, m) = legacy_scales(blk);
    // SAFETY: the features are enabled here.
    let w = unsafe { blk.weights() };
    for t in 0..NT {
        let ab = ab0 + t * stride;
        // SAFETY: activation block ab exists, per the contract.
        let (dot, act_d, act_s) =
            unsafe { (dot32(&w, xq.add(ab * ACT_BLOCK)), *xd.add(ab), *xs.add(ab)) };
        let scale = _mm256_set1_ps(d * act_d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[t]);
        if B::OFFSET != Offset::None {
            off[t] += m * act_s;
        }
    }
}

/// A row of legacy blocks against `NT` tokens starting at `t0`: one multiply-add per block
/// and token applies both scales to the integer dot; two accumulator sets (even and odd
/// blocks) hide its latency. Measured slower here (AVX2 EPYC without AVX-VNNI): reducing
/// groups of eight dots first as the K kernel does, with lanes = blocks, rows or tokens (one
/// 32-value block has too little work to pay for the horizontal adds and gathers), and groups
/// of eight tokens (sixteen accumulators spill); broadcasting the activation scale from memory
/// instead of `set1(d·act_d)` measured within noise.
/// Every token takes this path whatever NT is, so a token's sum is rounded the same way in a
/// batch as alone: speculative decoding's verify rows are bit-identical to decode steps.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_legacy<B: LegacyBlock, const NT: usize>(
    row: &[B],
    acts: &BlockActs,
    t0: usize,
) -> [f32; NT] {
    let blocks = row.len();
    assert_acts(acts, t0 + NT, blocks);
    let (xq, xd, xs) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    // Two accumulator sets, named apart so that they stay in registers.
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); NT], [_mm256_setzero_ps(); NT]);
    let (mut off0, mut off1) = ([0.0f32; NT], [0.0f32; NT]);
    let ptrs = (xq, xd, xs);
    // The body is a #[target_feature] function of its own: a closure does not inherit this
    // function's features, and with the body inlined into it the kernel measured 25% slower.
    let block = |b: usize, acc: &mut [__m256; NT], off: &mut [f32; NT]| {
        // SAFETY: the features are enabled in this function; block b and its activations exist.
        unsafe { legacy_block(&row[b], ptrs, (t0 * blocks + b, blocks), acc, off) }
    };
    let mut b = 0;
    while b + 2 <= blocks {
        block(b, &mut acc0, &mut off0);
        block(b + 1, &mut acc1, &mut off1);
        b += 2;
    }
    if b < blocks {
        block(b, &mut acc0, &mut off0);
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(_mm256_add_ps(acc0[t], acc1[t])) + (off0[t] + off1[t]);
    }
    out
}

/// # Safety
/// AVX2, FMA and F16C must be available; `acts` must hold `n` tokens of `w`'s row length.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_legacy<B: LegacyBlock>(
    w: &QMatrix,
    acts: &BlockActs,
    n: usize,
    out: &mut [f32],
) {
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| dot_legacy::<B, NT>(
        as_blocks::<B>(w.row(r)),
        acts,
        t0
    ));
}

/// 8 weights of a float row starting at element `i`, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8(format: FloatFormat, row: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller guarantees elements i..i+8 are inside the row.
    unsafe {
        match format {
            FloatFormat::F32 => _mm256_loadu_ps(row.add(4 * i).cast()),
            FloatFormat::F16 => _mm256_cvtph_ps(_mm_loadu_si128(row.add(2 * i).cast())),
            FloatFormat::Bf16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(
                _mm256_cvtepu16_epi32(_mm_loadu_si128(row.add(2 * i).cast())),
            )),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_float<const NT: usize>(
    format: FloatFormat,
    row: &[u8],
    x: &[f32],
    t0: usize,
    cols: usize,
) -> [f32; NT] {
    debug_assert!(x.len() >= (t0 + NT) * cols);
    let mut acc = [[_mm256_setzero_ps(); NT]; 2];
    let body = cols / 16 * 16;
    let mut i = 0;
    while i < body {
        for k in 0..2 {
            // SAFETY: i + 8k + 8 ≤ body ≤ cols, inside the row and every token's x.
            let wv = unsafe { load8(format, row.as_ptr(), i + 8 * k) };
            for t in 0..NT {
                let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add((t0 + t) * cols + i + 8 * k)) };
                acc[k][t] = _mm256_fmadd_ps(wv, xv, acc[k][t]);
            }
        }
        i += 16;
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        let mut s = hsum(_mm256_add_ps(acc[0][t], acc[1][t]));
        let xt = &x[(t0 + t) * cols..(t0 + t + 1) * cols];
        for (c, &xv) in xt.iter().enumerate().skip(body) {
            s += format.element(row, c) * xv;
        }
        out[t] = s;
    }
    out
}

/// # Safety
/// AVX2, FMA and F16C must be available; `x` must hold `n` tokens of `w.cols()` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_float(
    format: FloatFormat,
    w: &QMatrix,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    let cols = w.cols();
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| unsafe {
        dot_float::<NT>(format, w.row(r), x, t0, cols)
    });
}

/// A K-quant super-block as the K kernel sees it: eight 32-value sub-blocks of small unsigned
/// (Q4_K, Q5_K) or signed (Q6_K) integers, with a float scale per piece of `32 / PIECES`
/// values.
pub(super) trait KBlock: QuantBlock {
    /// Scaled pieces per 32-value sub-block: 1 (Q4_K, Q5_K) or 2 (Q6_K's 16-value scales).
    const PIECES: usize;
    const HAS_OFFSET: bool;
    /// d·sc of every piece, eight per vector, and −dmin·m of every sub-block.
    ///
    /// # Safety
    /// AVX2, FMA and F16C are available.
    unsafe fn header(&self) -> KHeader;
    /// The unscaled integers of sub-block `s` (< 8): elements 0..16 and 16..32 as i16 lanes.
    ///
    /// # Safety
    /// As `header`.
    unsafe fn values(&self, s: usize) -> [__m256i; 2];
}

#[derive(Clone, Copy)]
pub(super) struct KHeader {
    scales: [__m256; 2],
    offsets: __m256,
}

/// `a · b` lane-wise for eight u8 `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scaled_u8x8(a: f32, b: [u8; 8]) -> __m256 {
    let lanes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(b)));
    _mm256_mul_ps(_mm256_set1_ps(a), _mm256_cvtepi32_ps(lanes))
}

/// The (d·sc, −dmin·m) header shared by Q4_K and Q5_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_header(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12]) -> KHeader {
    let (sc, m) = super::kquant::scales_mins(scales);
    let d = f16_to_f32(u16::from_le_bytes(d));
    let minus_dmin = -f16_to_f32(u16::from_le_bytes(dmin));
    KHeader {
        scales: [scaled_u8x8(d, sc), _mm256_setzero_ps()],
        offsets: scaled_u8x8(minus_dmin, m),
    }
}

/// The nibbles of sub-block `s` (< 8) of a Q4_K/Q5_K block as i16 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn k_nibbles(qs: &[u8; 128], s: usize) -> [__m256i; 2] {
    let c = &qs[32 * (s / 2)..][..32];
    // SAFETY: 32 readable bytes, two 16-byte loads.
    let (b0, b1) = unsafe {
        (
            _mm256_cvtepu8_epi16(_mm_loadu_si128(c.as_ptr().cast())),
            _mm256_cvtepu8_epi16(_mm_loadu_si128(c[16..].as_ptr().cast())),
        )
    };
    if s.is_multiple_of(2) {
        let low4 = _mm256_set1_epi16(0x0f);
        [_mm256_and_si256(b0, low4), _mm256_and_si256(b1, low4)]
    } else {
        [_mm256_srli_epi16::<4>(b0), _mm256_srli_epi16::<4>(b1)]
    }
}

impl KBlock for BlockQ4K {
    const PIECES: usize = 1;
    const HAS_OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(&self) -> KHeader {
        k_header(self.d, self.dmin, &self.scales)
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, s: usize) -> [__m256i; 2] {
        k_nibbles(&self.qs, s)
    }
}

impl KBlock for BlockQ5K {
    const PIECES: usize = 1;
    const HAS_OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(&self) -> KHeader {
        k_header(self.d, self.dmin, &self.scales)
    }
    /// Bit `s` of `qh[l]` is the fifth bit of element l.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, s: usize) -> [__m256i; 2] {
        let [lo, hi] = k_nibbles(&self.qs, s);
        // SAFETY: 32 readable bytes, two 16-byte loads.
        let (qh0, qh1) = unsafe {
            (
                _mm256_cvtepu8_epi16(_mm_loadu_si128(self.qh.as_ptr().cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(self.qh[16..].as_ptr().cast())),
            )
        };
        let bit = _mm256_set1_epi16(1 << s);
        let sixteen = _mm256_set1_epi16(16);
        let high =
            |qh| _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(qh, bit), bit), sixteen);
        [
            _mm256_or_si256(lo, high(qh0)),
            _mm256_or_si256(hi, high(qh1)),
        ]
    }
}

impl KBlock for BlockQ6K {
    const PIECES: usize = 2;
    const HAS_OFFSET: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(&self) -> KHeader {
        let d = _mm256_set1_ps(f16_to_f32(u16::from_le_bytes(self.d)));
        let sc = |k: usize| {
            let bytes: [u8; 8] = self.scales[8 * k..][..8].try_into().expect("8 scales");
            let lanes = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(i64::from_le_bytes(bytes)));
            _mm256_mul_ps(d, _mm256_cvtepi32_ps(lanes))
        };
        KHeader {
            scales: [sc(0), sc(1)],
            offsets: _mm256_setzero_ps(),
        }
    }
    /// Sub-block s = 4h + k: low (k < 2) or high nibbles of `ql[64h + 32(k % 2)..][..32]` and
    /// bits 2k, 2k+1 of `qh[32h..][..32]` (see `kquant::q6_values`), minus 32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values(&self, s: usize) -> [__m256i; 2] {
        let (half, k) = (s / 4, s % 4);
        let ql = &self.ql[64 * half + 32 * (k % 2)..][..32];
        let qh = &self.qh[32 * half..][..32];
        // SAFETY: 32 readable bytes each, two 16-byte loads.
        let (l0, l1, h0, h1) = unsafe {
            (
                _mm256_cvtepu8_epi16(_mm_loadu_si128(ql.as_ptr().cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(ql[16..].as_ptr().cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(qh.as_ptr().cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(qh[16..].as_ptr().cast())),
            )
        };
        let nibble_shift = _mm_cvtsi32_si128(4 * (k / 2) as i32);
        let high_shift = _mm_cvtsi32_si128(2 * k as i32);
        let value = |l, hb| {
            let low = _mm256_and_si256(_mm256_srl_epi16(l, nibble_shift), _mm256_set1_epi16(0x0f));
            let high = _mm256_and_si256(_mm256_srl_epi16(hb, high_shift), _mm256_set1_epi16(3));
            let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
            _mm256_sub_epi16(q, _mm256_set1_epi16(32))
        };
        [value(l0, h0), value(l1, h1)]
    }
}

/// A row of K-quant blocks against `NT` tokens starting at `t0`; activation block `8b + s` of
/// each token lines up with sub-block `s` of weight block `b`. The integer dots stay unscaled
/// (|dot| ≤ 32·32·32767, far inside i32) and go eight pieces at a time through `sum8`, then
/// one multiply-add by (d·sc) × activation scale.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_k<B: KBlock, const NT: usize>(row: &[B], acts: &BlockActs, t0: usize) -> [f32; NT] {
    let per_token = row.len() * 8;
    assert_acts(acts, t0 + NT, per_token);
    let (xq, xd, xs) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    let subs_per_group = 8 / B::PIECES;
    // Q6_K: pieces 2j and 2j + 1 are the halves of sub-block j of the group.
    let pair_lanes = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    let mut acc = [_mm256_setzero_ps(); NT];
    let mut offset_acc = [_mm256_setzero_ps(); NT];
    for (b, blk) in row.iter().enumerate() {
        // SAFETY (calls into the block): the features are enabled here.
        let h = unsafe { blk.header() };
        for g in 0..B::PIECES {
            let mut dots = [[_mm256_setzero_si256(); 8]; NT];
            for k in 0..subs_per_group {
                let s = g * subs_per_group + k;
                let w = unsafe { blk.values(s) };
                for t in 0..NT {
                    let ab = (t0 + t) * per_token + 8 * b + s;
                    // SAFETY: activation block ab exists (assert_acts).
                    let x = unsafe { xq.add(ab * ACT_BLOCK) };
                    if B::PIECES == 1 {
                        dots[t][k] = unsafe { dot32(&w, x) };
                    } else {
                        // SAFETY: as above; 32 i16 at x.
                        let (x0, x1) = unsafe {
                            (
                                _mm256_loadu_si256(x.cast()),
                                _mm256_loadu_si256(x.add(16).cast()),
                            )
                        };
                        dots[t][2 * k] = _mm256_madd_epi16(w[0], x0);
                        dots[t][2 * k + 1] = _mm256_madd_epi16(w[1], x1);
                    }
                }
            }
            for t in 0..NT {
                let ab = (t0 + t) * per_token + 8 * b + g * subs_per_group;
                let act_d = if B::PIECES == 1 {
                    // SAFETY: the block's eight activation scales exist (assert_acts).
                    unsafe { load8f(xd.add(ab)) }
                } else {
                    // SAFETY: four activation scales of this group exist (assert_acts).
                    let four = unsafe { _mm_loadu_ps(xd.add(ab)) };
                    _mm256_permutevar8x32_ps(_mm256_castps128_ps256(four), pair_lanes)
                };
                let dot = _mm256_cvtepi32_ps(sum8(&dots[t]));
                acc[t] = _mm256_fmadd_ps(dot, _mm256_mul_ps(h.scales[g], act_d), acc[t]);
            }
        }
        if B::HAS_OFFSET {
            for t in 0..NT {
                let ab = (t0 + t) * per_token + 8 * b;
                // SAFETY: the block's eight activation sums exist (assert_acts).
                let act_s = unsafe { load8f(xs.add(ab)) };
                offset_acc[t] = _mm256_fmadd_ps(h.offsets, act_s, offset_acc[t]);
            }
        }
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(_mm256_add_ps(acc[t], offset_acc[t]));
    }
    out
}

/// # Safety
/// As `matmul_legacy`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_k<B: KBlock>(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| dot_k::<B, NT>(
        as_blocks::<B>(w.row(r)),
        acts,
        t0
    ));
}
