//! x86_64 kernels: AVX2 + FMA + F16C, chosen at run time.
//!
//! Block formats: each weight block is widened to 32 i16 lanes (two registers) and multiplied
//! with the 16-bit activations by `vpmaddwd` into i32 lanes (no overflow: |w| ≤ 128 and
//! |x| ≤ 32767, see `act`); one float multiply-add per block applies the two scales. Each
//! weight row is unpacked once per group of up to four tokens.
//!
//! All loads are unaligned: weight bytes come straight from files.

// Token and accumulator indices walk several per-token arrays in step.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::act::{BlockActs, ACT_BLOCK};
use super::float::FloatFormat;
use super::{tiled_matmul, QMatrix};

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

/// Two adjacent little-endian f16 values at `p` as f32 (lanes 0 and 1).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16_pair(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees 4 readable bytes at p; read_unaligned allows any address.
    let bits = unsafe { p.cast::<i32>().read_unaligned() };
    _mm_cvtph_ps(_mm_cvtsi32_si128(bits))
}

/// Activation pointers of one matmul call; block `ab` of the activations is at `qs + 32·ab`,
/// `d + ab`, `s + ab`.
#[derive(Clone, Copy)]
struct ActPtrs {
    qs: *const i16,
    d: *const f32,
    s: *const f32,
}

impl ActPtrs {
    fn new(acts: &BlockActs) -> Self {
        ActPtrs {
            qs: acts.qs.as_ptr(),
            d: acts.d.as_ptr(),
            s: acts.s.as_ptr(),
        }
    }
}

/// One q4_0/q4_1 block at `p` against activation blocks `ab0 + t·stride`, t < NT.
/// `HAS_MIN`: q4_1 (f16 d, f16 m); otherwise q4_0 (f16 d, implicit m = −8·d).
///
/// # Safety
/// `p` points at a whole block and every activation block named exists.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_block<const HAS_MIN: bool, const NT: usize>(
    p: *const u8,
    act: ActPtrs,
    ab0: usize,
    stride: usize,
    acc: &mut [__m256; NT],
    min_acc: &mut [f32; NT],
) {
    let low4 = _mm256_set1_epi16(0x0f);
    // SAFETY (whole body): pointers inside the block and the activations, per the contract.
    unsafe {
        let (d, m, nibbles) = if HAS_MIN {
            let dm = load_f16_pair(p);
            (
                _mm_cvtss_f32(dm),
                _mm_cvtss_f32(_mm_movehdup_ps(dm)),
                p.add(4),
            )
        } else {
            let d = _mm_cvtss_f32(load_f16_pair(p));
            (d, -8.0 * d, p.add(2))
        };
        // Byte j holds element j (low nibble) and j + 16 (high nibble); widened to one i16 lane
        // per byte, the mask gives elements 0..16 and the shift elements 16..32.
        let bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(nibbles.cast()));
        let w_lo = _mm256_and_si256(bytes, low4);
        let w_hi = _mm256_srli_epi16::<4>(bytes);
        for t in 0..NT {
            let ab = ab0 + t * stride;
            let x = act.qs.add(ab * ACT_BLOCK);
            let x_lo = _mm256_loadu_si256(x.cast());
            let x_hi = _mm256_loadu_si256(x.add(16).cast());
            let dot =
                _mm256_add_epi32(_mm256_madd_epi16(w_lo, x_lo), _mm256_madd_epi16(w_hi, x_hi));
            let scale = _mm256_set1_ps(d * *act.d.add(ab));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[t]);
            min_acc[t] += m * *act.s.add(ab);
        }
    }
}

/// A q4_0/q4_1 row against `NT` tokens starting at `t0`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4<const HAS_MIN: bool, const NT: usize>(
    row: &[u8],
    acts: &BlockActs,
    t0: usize,
    blocks: usize,
) -> [f32; NT] {
    let block_bytes = if HAS_MIN { 20 } else { 18 };
    assert_eq!(row.len(), blocks * block_bytes);
    assert!(acts.d.len() >= (t0 + NT) * blocks && acts.qs.len() >= (t0 + NT) * blocks * 32);
    let act = ActPtrs::new(acts);
    // Two accumulator sets (even/odd blocks) hide the FMA latency when NT is small; named
    // separately so they stay in registers.
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); NT], [_mm256_setzero_ps(); NT]);
    let (mut min0, mut min1) = ([0.0f32; NT], [0.0f32; NT]);
    let p = row.as_ptr();
    let mut b = 0;
    // SAFETY: b < blocks keeps every block inside `row`; activation blocks (t0 + t)·blocks + b
    // exist by the assert above.
    unsafe {
        while b + 2 <= blocks {
            let ab = t0 * blocks + b;
            q4_block::<HAS_MIN, NT>(
                p.add(b * block_bytes),
                act,
                ab,
                blocks,
                &mut acc0,
                &mut min0,
            );
            let (p1, ab1) = (p.add((b + 1) * block_bytes), ab + 1);
            q4_block::<HAS_MIN, NT>(p1, act, ab1, blocks, &mut acc1, &mut min1);
            b += 2;
        }
        if b < blocks {
            let ab = t0 * blocks + b;
            q4_block::<HAS_MIN, NT>(
                p.add(b * block_bytes),
                act,
                ab,
                blocks,
                &mut acc0,
                &mut min0,
            );
        }
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(_mm256_add_ps(acc0[t], acc1[t])) + (min0[t] + min1[t]);
    }
    out
}

/// One q8_0 block (f16 d, 32 × i8) at `p` against activation blocks `ab0 + t·stride`.
///
/// # Safety
/// As `q4_block`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_block<const NT: usize>(
    p: *const u8,
    act: ActPtrs,
    ab0: usize,
    stride: usize,
    acc: &mut [__m256; NT],
) {
    // SAFETY (whole body): per the contract. The scale read takes 4 bytes, still inside the
    // 34-byte block.
    unsafe {
        let d = _mm_cvtss_f32(load_f16_pair(p));
        let w_lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(2).cast()));
        let w_hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(18).cast()));
        for t in 0..NT {
            let ab = ab0 + t * stride;
            let x = act.qs.add(ab * ACT_BLOCK);
            let x_lo = _mm256_loadu_si256(x.cast());
            let x_hi = _mm256_loadu_si256(x.add(16).cast());
            let dot =
                _mm256_add_epi32(_mm256_madd_epi16(w_lo, x_lo), _mm256_madd_epi16(w_hi, x_hi));
            let scale = _mm256_set1_ps(d * *act.d.add(ab));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[t]);
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q8_0<const NT: usize>(row: &[u8], acts: &BlockActs, t0: usize, blocks: usize) -> [f32; NT] {
    assert_eq!(row.len(), blocks * 34);
    assert!(acts.d.len() >= (t0 + NT) * blocks && acts.qs.len() >= (t0 + NT) * blocks * 32);
    let act = ActPtrs::new(acts);
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); NT], [_mm256_setzero_ps(); NT]);
    let p = row.as_ptr();
    let mut b = 0;
    // SAFETY: as in dot_q4.
    unsafe {
        while b + 2 <= blocks {
            let ab = t0 * blocks + b;
            q8_0_block::<NT>(p.add(b * 34), act, ab, blocks, &mut acc0);
            q8_0_block::<NT>(p.add((b + 1) * 34), act, ab + 1, blocks, &mut acc1);
            b += 2;
        }
        if b < blocks {
            q8_0_block::<NT>(p.add(b * 34), act, t0 * blocks + b, blocks, &mut acc0);
        }
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(_mm256_add_ps(acc0[t], acc1[t]));
    }
    out
}

/// # Safety
/// AVX2, FMA and F16C must be available; `acts` must hold `n` tokens of `w`'s row length.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_q4<const HAS_MIN: bool>(
    w: &QMatrix,
    acts: &BlockActs,
    n: usize,
    out: &mut [f32],
) {
    let blocks = w.cols() / ACT_BLOCK;
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| dot_q4::<HAS_MIN, NT>(
        w.row(r),
        acts,
        t0,
        blocks
    ));
}

/// # Safety
/// As `matmul_q4`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_q8_0(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    let blocks = w.cols() / ACT_BLOCK;
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| dot_q8_0::<NT>(
        w.row(r),
        acts,
        t0,
        blocks
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

/// What the sub-block kernels need from a block before unpacking its sub-blocks.
#[derive(Clone, Copy)]
pub(super) struct SubHeader {
    /// Scale applied to every sub-block's integer dot.
    d: f32,
    /// Per-sub-block offsets (q5_1's m, the K-quants' −dmin·m).
    offsets: [f32; 8],
    /// Integer sub-block scales (K-quants): Q4_K/Q5_K use 8, Q6_K 16.
    sc: [i16; 16],
}

/// A `SubBlocks` format as the AVX2 kernel sees it.
pub(super) trait SubFormat {
    const BYTES: usize;
    const SUBS: usize;
    const HAS_OFFSET: bool;
    /// # Safety
    /// `p` points at a whole block; AVX2, FMA and F16C are available.
    unsafe fn header(p: *const u8) -> SubHeader;
    /// Integer weights of sub-block `s` as i16 lanes: (elements 0..16, elements 16..32).
    ///
    /// # Safety
    /// As `header`, and `s < SUBS`.
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> (__m256i, __m256i);
}

pub(super) struct Q5_0;
pub(super) struct Q5_1;
pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

#[inline]
fn f16_at(p: *const u8) -> f32 {
    // SAFETY: callers pass a pointer to 2 readable bytes inside a block.
    super::float::f16_to_f32(unsafe { p.cast::<u16>().read_unaligned() })
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

/// 5-bit legacy values at `p` (4 bytes qh, then 16 bytes of nibbles).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_values(p: *const u8) -> (__m256i, __m256i) {
    // SAFETY: 20 readable bytes at p, per the caller.
    let (qh, bytes) = unsafe {
        (
            p.cast::<u32>().read_unaligned(),
            _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(4).cast())),
        )
    };
    let lo = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0f));
    let hi = _mm256_srli_epi16::<4>(bytes);
    (
        _mm256_or_si256(lo, fifth_bits(qh as u16)),
        _mm256_or_si256(hi, fifth_bits((qh >> 16) as u16)),
    )
}

impl SubFormat for Q5_0 {
    const BYTES: usize = 22;
    const SUBS: usize = 1;
    const HAS_OFFSET: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(p: *const u8) -> SubHeader {
        SubHeader {
            d: f16_at(p),
            offsets: [0.0; 8],
            sc: [0; 16],
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(p: *const u8, _: &SubHeader, _: usize) -> (__m256i, __m256i) {
        // SAFETY: qh and nibbles follow the 2-byte scale.
        let (lo, hi) = unsafe { q5_values(p.add(2)) };
        let sixteen = _mm256_set1_epi16(16);
        (_mm256_sub_epi16(lo, sixteen), _mm256_sub_epi16(hi, sixteen))
    }
}

impl SubFormat for Q5_1 {
    const BYTES: usize = 24;
    const SUBS: usize = 1;
    const HAS_OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(p: *const u8) -> SubHeader {
        let mut offsets = [0.0; 8];
        // SAFETY: m is bytes 2..4.
        offsets[0] = f16_at(unsafe { p.add(2) });
        SubHeader {
            d: f16_at(p),
            offsets,
            sc: [0; 16],
        }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(p: *const u8, _: &SubHeader, _: usize) -> (__m256i, __m256i) {
        // SAFETY: qh and nibbles follow d and m.
        unsafe { q5_values(p.add(4)) }
    }
}

/// d, −dmin·m and the scales of a Q4_K/Q5_K block.
#[inline]
unsafe fn k_header(p: *const u8) -> SubHeader {
    // SAFETY: a Q4_K/Q5_K block starts with d, dmin and 12 scale bytes.
    let scales: &[u8; 12] = unsafe { &*p.add(4).cast::<[u8; 12]>() };
    let (sc, m) = super::kquant::scales_mins(scales);
    // SAFETY: dmin is bytes 2..4.
    let dmin = f16_at(unsafe { p.add(2) });
    let mut h = SubHeader {
        d: f16_at(p),
        offsets: [0.0; 8],
        sc: [0; 16],
    };
    for i in 0..8 {
        h.offsets[i] = -(dmin * f32::from(m[i]));
        h.sc[i] = i16::from(sc[i]);
    }
    h
}

/// The nibbles of sub-block `s` of a Q4_K/Q5_K block whose nibble bytes start at `qs`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k_nibbles(qs: *const u8, s: usize) -> (__m256i, __m256i) {
    // SAFETY: 128 nibble bytes at qs, s < 8.
    let (b0, b1) = unsafe {
        let c = qs.add(32 * (s / 2));
        (
            _mm256_cvtepu8_epi16(_mm_loadu_si128(c.cast())),
            _mm256_cvtepu8_epi16(_mm_loadu_si128(c.add(16).cast())),
        )
    };
    if s.is_multiple_of(2) {
        let low4 = _mm256_set1_epi16(0x0f);
        (_mm256_and_si256(b0, low4), _mm256_and_si256(b1, low4))
    } else {
        (_mm256_srli_epi16::<4>(b0), _mm256_srli_epi16::<4>(b1))
    }
}

impl SubFormat for Q4K {
    const BYTES: usize = 144;
    const SUBS: usize = 8;
    const HAS_OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(p: *const u8) -> SubHeader {
        // SAFETY: per the contract.
        unsafe { k_header(p) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> (__m256i, __m256i) {
        // SAFETY: nibbles start after the 16 header bytes.
        let (lo, hi) = unsafe { k_nibbles(p.add(16), s) };
        let sc = _mm256_set1_epi16(h.sc[s]);
        (_mm256_mullo_epi16(lo, sc), _mm256_mullo_epi16(hi, sc))
    }
}

impl SubFormat for Q5K {
    const BYTES: usize = 176;
    const SUBS: usize = 8;
    const HAS_OFFSET: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(p: *const u8) -> SubHeader {
        // SAFETY: per the contract.
        unsafe { k_header(p) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> (__m256i, __m256i) {
        // SAFETY: qh is bytes 16..48, the nibbles 48..176.
        let (lo, hi, qh0, qh1) = unsafe {
            let (lo, hi) = k_nibbles(p.add(48), s);
            (
                lo,
                hi,
                _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(16).cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(32).cast())),
            )
        };
        let bit = _mm256_set1_epi16(1 << s);
        let sixteen = _mm256_set1_epi16(16);
        let high =
            |qh| _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(qh, bit), bit), sixteen);
        let sc = _mm256_set1_epi16(h.sc[s]);
        (
            _mm256_mullo_epi16(_mm256_or_si256(lo, high(qh0)), sc),
            _mm256_mullo_epi16(_mm256_or_si256(hi, high(qh1)), sc),
        )
    }
}

impl SubFormat for Q6K {
    const BYTES: usize = 210;
    const SUBS: usize = 8;
    const HAS_OFFSET: bool = false;
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn header(p: *const u8) -> SubHeader {
        let mut sc = [0i16; 16];
        for (i, sc) in sc.iter_mut().enumerate() {
            // SAFETY: the i8 scales are bytes 192..208.
            *sc = i16::from(unsafe { *p.add(192 + i) } as i8);
        }
        SubHeader {
            // SAFETY: d is bytes 208..210.
            d: f16_at(unsafe { p.add(208) }),
            offsets: [0.0; 8],
            sc,
        }
    }
    /// Sub-block s = 4h + k: low (k < 2) or high nibbles of ql[64h + 32(k % 2)..][..32] and
    /// bits 2k, 2k+1 of qh[32h..][..32] (see `kquant::q6_values`).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> (__m256i, __m256i) {
        let (half, k) = (s / 4, s % 4);
        // SAFETY: ql is bytes 0..128, qh 128..192.
        let (l0, l1, h0, h1) = unsafe {
            let ql = p.add(64 * half + 32 * (k % 2));
            let qh = p.add(128 + 32 * half);
            (
                _mm256_cvtepu8_epi16(_mm_loadu_si128(ql.cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(ql.add(16).cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(qh.cast())),
                _mm256_cvtepu8_epi16(_mm_loadu_si128(qh.add(16).cast())),
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
        (
            _mm256_mullo_epi16(value(l0, h0), _mm256_set1_epi16(h.sc[2 * s])),
            _mm256_mullo_epi16(value(l1, h1), _mm256_set1_epi16(h.sc[2 * s + 1])),
        )
    }
}

/// A row of `blocks` blocks of `F` against `NT` tokens starting at `t0`; activation block
/// `b·SUBS + s` of each token lines up with sub-block `s` of weight block `b`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_sub<F: SubFormat, const NT: usize>(
    row: &[u8],
    acts: &BlockActs,
    t0: usize,
    blocks: usize,
) -> [f32; NT] {
    assert_eq!(row.len(), blocks * F::BYTES);
    let per_token = blocks * F::SUBS;
    assert!(
        acts.d.len() >= (t0 + NT) * per_token
            && acts.s.len() >= (t0 + NT) * per_token
            && acts.qs.len() >= (t0 + NT) * per_token * ACT_BLOCK
    );
    let act = ActPtrs::new(acts);
    let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); NT], [_mm256_setzero_ps(); NT]);
    let mut offset_acc = [0.0f32; NT];
    let p = row.as_ptr();
    for b in 0..blocks {
        // SAFETY: b < blocks keeps the block inside `row`; activation blocks
        // (t0 + t)·per_token + b·SUBS + s exist by the assert above.
        unsafe {
            let q = p.add(b * F::BYTES);
            let h = F::header(q);
            for s in 0..F::SUBS {
                let (w_lo, w_hi) = F::weights(q, &h, s);
                for t in 0..NT {
                    let ab = (t0 + t) * per_token + b * F::SUBS + s;
                    let x = act.qs.add(ab * ACT_BLOCK);
                    let x_lo = _mm256_loadu_si256(x.cast());
                    let x_hi = _mm256_loadu_si256(x.add(16).cast());
                    let dot = _mm256_add_epi32(
                        _mm256_madd_epi16(w_lo, x_lo),
                        _mm256_madd_epi16(w_hi, x_hi),
                    );
                    let scale = _mm256_set1_ps(h.d * *act.d.add(ab));
                    // Alternate accumulators so consecutive sub-blocks do not wait on one FMA.
                    if s.is_multiple_of(2) {
                        acc0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc0[t]);
                    } else {
                        acc1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc1[t]);
                    }
                    if F::HAS_OFFSET {
                        offset_acc[t] += h.offsets[s] * *act.s.add(ab);
                    }
                }
            }
        }
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(_mm256_add_ps(acc0[t], acc1[t])) + offset_acc[t];
    }
    out
}

/// # Safety
/// As `matmul_q4`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_sub<F: SubFormat>(
    w: &QMatrix,
    acts: &BlockActs,
    n: usize,
    out: &mut [f32],
) {
    let blocks = w.cols() / w.dtype().block_len();
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| dot_sub::<F, NT>(
        w.row(r),
        acts,
        t0,
        blocks
    ));
}
