//! wasm32 SIMD128 kernels (compiled in when the build enables `simd128`).
//!
//! Baseline SIMD128 has no FMA; its one integer dot product is `i32x4.dot_i16x8_s`, which suits
//! the 16-bit activations. Each weight block is widened to i16 once per group of tokens; a block
//! then costs four dot products per token, plus one float multiply and add for its scales.
//!
//! All loads go through `read_unaligned`: weight bytes come straight from files.

// Token and accumulator indices walk several per-token arrays in step.
#![allow(clippy::needless_range_loop)]

use std::arch::wasm32::*;

use super::act::{BlockActs, ACT_BLOCK};
use super::float::{f16_to_f32, FloatFormat};
use super::{tiled_matmul, QMatrix};

#[inline]
fn load(p: *const u8) -> v128 {
    // SAFETY: every caller passes a pointer with 16 readable bytes (checked by its slicing).
    unsafe { p.cast::<v128>().read_unaligned() }
}

#[inline]
fn hsum(v: v128) -> f32 {
    let pair = f32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let one = f32x4_add(pair, i32x4_shuffle::<1, 0, 3, 2>(pair, pair));
    f32x4_extract_lane::<0>(one)
}

/// Σ_k dot(w[k], x[k]) over the 32 i16 activations of block `ab`.
#[inline]
fn dot_block(w: &[v128; 4], qs16: &[i16], ab: usize) -> v128 {
    let x = &qs16[ab * ACT_BLOCK..(ab + 1) * ACT_BLOCK];
    let p = x.as_ptr().cast::<u8>();
    // SAFETY: x holds 32 i16 = 64 bytes, four 16-byte loads.
    let (x0, x1, x2, x3) = unsafe { (load(p), load(p.add(16)), load(p.add(32)), load(p.add(48))) };
    i32x4_add(
        i32x4_add(i32x4_dot_i16x8(w[0], x0), i32x4_dot_i16x8(w[1], x1)),
        i32x4_add(i32x4_dot_i16x8(w[2], x2), i32x4_dot_i16x8(w[3], x3)),
    )
}

/// Adds one unpacked weight block (i16 lanes `w`, scales `d` and `m`) times activation blocks
/// `ab0 + t·stride`, t < NT, into `acc` and `min_acc`.
#[inline]
fn block_step<const NT: usize>(
    (w, d, m): &([v128; 4], f32, f32),
    acts: &BlockActs,
    ab0: usize,
    stride: usize,
    acc: &mut [v128; NT],
    min_acc: &mut [f32; NT],
) {
    for t in 0..NT {
        let ab = ab0 + t * stride;
        let dot = dot_block(w, &acts.qs, ab);
        let scaled = f32x4_mul(f32x4_convert_i32x4(dot), f32x4_splat(*d * acts.d[ab]));
        acc[t] = f32x4_add(acc[t], scaled);
        min_acc[t] += *m * acts.s[ab];
    }
}

/// Unpacks a q4_0 (`HAS_MIN` false: f16 d, m = −8·d) or q4_1 (f16 d, f16 m) block to i16 lanes.
#[inline]
fn q4_block<const HAS_MIN: bool>(blk: &[u8]) -> ([v128; 4], f32, f32) {
    let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
    let m = if HAS_MIN {
        f16_to_f32(u16::from_le_bytes([blk[2], blk[3]]))
    } else {
        -8.0 * d
    };
    let raw = load(blk[blk.len() - 16..].as_ptr());
    let lo = v128_and(raw, u8x16_splat(0x0f));
    let hi = u8x16_shr(raw, 4);
    let w = [
        u16x8_extend_low_u8x16(lo),
        u16x8_extend_high_u8x16(lo),
        u16x8_extend_low_u8x16(hi),
        u16x8_extend_high_u8x16(hi),
    ];
    (w, d, m)
}

/// Unpacks a q8_0 block (f16 d, 32 × i8) to i16 lanes.
#[inline]
fn q8_0_block(blk: &[u8]) -> ([v128; 4], f32, f32) {
    let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
    let (q0, q1) = (load(blk[2..18].as_ptr()), load(blk[18..34].as_ptr()));
    let w = [
        i16x8_extend_low_i8x16(q0),
        i16x8_extend_high_i8x16(q0),
        i16x8_extend_low_i8x16(q1),
        i16x8_extend_high_i8x16(q1),
    ];
    (w, d, 0.0)
}

/// A row of `blocks` blocks of `block_bytes` against `NT` tokens starting at `t0`.
#[inline]
fn dot_row<const NT: usize>(
    row: &[u8],
    block_bytes: usize,
    unpack: impl Fn(&[u8]) -> ([v128; 4], f32, f32),
    acts: &BlockActs,
    t0: usize,
    blocks: usize,
) -> [f32; NT] {
    assert_eq!(row.len(), blocks * block_bytes);
    // Two accumulator sets (even/odd blocks) keep the float adds from serializing; named
    // separately so they stay in registers.
    let (mut acc0, mut acc1) = ([f32x4_splat(0.0); NT], [f32x4_splat(0.0); NT]);
    let (mut min0, mut min1) = ([0.0f32; NT], [0.0f32; NT]);
    let mut pairs = row.chunks_exact(2 * block_bytes);
    let mut ab = t0 * blocks;
    for pair in &mut pairs {
        let even = unpack(&pair[..block_bytes]);
        block_step(&even, acts, ab, blocks, &mut acc0, &mut min0);
        let odd = unpack(&pair[block_bytes..]);
        block_step(&odd, acts, ab + 1, blocks, &mut acc1, &mut min1);
        ab += 2;
    }
    if !pairs.remainder().is_empty() {
        let last = unpack(pairs.remainder());
        block_step(&last, acts, ab, blocks, &mut acc0, &mut min0);
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(f32x4_add(acc0[t], acc1[t])) + (min0[t] + min1[t]);
    }
    out
}

pub(super) fn matmul_q4<const HAS_MIN: bool>(
    w: &QMatrix,
    acts: &BlockActs,
    n: usize,
    out: &mut [f32],
) {
    let blocks = w.cols() / ACT_BLOCK;
    assert!(acts.qs.len() >= n * w.cols(), "activations hold n tokens");
    let block_bytes = if HAS_MIN { 20 } else { 18 };
    let unpack = q4_block::<HAS_MIN>;
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
        dot_row::<NT>(w.row(r), block_bytes, unpack, acts, t0, blocks)
    });
}

pub(super) fn matmul_q8_0(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    let blocks = w.cols() / ACT_BLOCK;
    assert!(acts.qs.len() >= n * w.cols(), "activations hold n tokens");
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
        dot_row::<NT>(w.row(r), 34, q8_0_block, acts, t0, blocks)
    });
}

/// Four f16 values (in the low 64 bits of `h`) to f32, exactly: the lane-wise form of
/// `float::f16_to_f32`.
#[inline]
fn f16x4_to_f32x4(h: v128) -> v128 {
    let h = u32x4_extend_low_u16x8(h);
    let magnitude = u32x4_shl(v128_and(h, u32x4_splat(0x7fff)), 13);
    let scaled = f32x4_mul(magnitude, f32x4_splat(f32::from_bits(0x7780_0000))); // × 2^112
    let exponent = v128_and(h, u32x4_splat(0x7c00));
    let inf_nan = v128_and(
        u32x4_eq(exponent, u32x4_splat(0x7c00)),
        u32x4_splat(0x7f80_0000),
    );
    let sign = u32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    v128_or(v128_or(scaled, inf_nan), sign)
}

/// 4 weights of a float row starting at element `i`, as f32; `i + 4` must not pass the row end.
#[inline]
fn load4(format: FloatFormat, row: &[u8], i: usize) -> v128 {
    match format {
        FloatFormat::F32 => load(row[4 * i..4 * i + 16].as_ptr()),
        FloatFormat::F16 | FloatFormat::Bf16 => {
            let bytes = &row[2 * i..2 * i + 8];
            // SAFETY: 8 readable bytes.
            let bits = unsafe { bytes.as_ptr().cast::<u64>().read_unaligned() };
            let h = u64x2_splat(bits);
            if format == FloatFormat::F16 {
                f16x4_to_f32x4(h)
            } else {
                u32x4_shl(u32x4_extend_low_u16x8(h), 16)
            }
        }
    }
}

#[inline]
fn dot_float<const NT: usize>(
    format: FloatFormat,
    row: &[u8],
    x: &[f32],
    t0: usize,
    cols: usize,
) -> [f32; NT] {
    assert!(x.len() >= (t0 + NT) * cols);
    let mut acc = [[f32x4_splat(0.0); NT]; 2];
    let body = cols / 8 * 8;
    let mut i = 0;
    while i < body {
        for k in 0..2 {
            let wv = load4(format, row, i + 4 * k);
            for t in 0..NT {
                let at = (t0 + t) * cols + i + 4 * k;
                let xv = load(x[at..at + 4].as_ptr().cast());
                acc[k][t] = f32x4_add(acc[k][t], f32x4_mul(wv, xv));
            }
        }
        i += 8;
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        let mut s = hsum(f32x4_add(acc[0][t], acc[1][t]));
        let xt = &x[(t0 + t) * cols..(t0 + t + 1) * cols];
        for (c, &xv) in xt.iter().enumerate().skip(body) {
            s += format.element(row, c) * xv;
        }
        out[t] = s;
    }
    out
}

pub(super) fn matmul_float(format: FloatFormat, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    let cols = w.cols();
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| dot_float::<NT>(
        format,
        w.row(r),
        x,
        t0,
        cols
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_wise_f16_conversion_matches_scalar_for_every_bit_pattern() {
        for base in (0..=u16::MAX).step_by(4) {
            let bits = [base, base + 1, base + 2, base + 3];
            let v = f16x4_to_f32x4(u16x8(bits[0], bits[1], bits[2], bits[3], 0, 0, 0, 0));
            let lanes = [
                f32x4_extract_lane::<0>(v),
                f32x4_extract_lane::<1>(v),
                f32x4_extract_lane::<2>(v),
                f32x4_extract_lane::<3>(v),
            ];
            for (h, got) in bits.into_iter().zip(lanes) {
                let want = f16_to_f32(h);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{h:#06x}"
                );
            }
        }
    }
}
