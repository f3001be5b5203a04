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
