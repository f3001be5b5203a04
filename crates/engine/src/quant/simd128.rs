//! wasm32 SIMD128 kernels (compiled in when the build enables `simd128`).
//!
//! Baseline SIMD128 has no FMA; its one integer dot product is `i32x4.dot_i16x8_s`, which suits
//! the 16-bit activations. Each weight block is widened to i16 once per group of tokens; a block
//! then costs four dot products per token. Scales are handled four blocks at a time (see
//! `dot_row`; q5_0 and q5_1 take this path too), and a K-quant super-block's sub-block dots
//! four pieces at a time with the sub-block scales applied in f32 (see `dot_k`), so the
//! per-block float and scalar work stays out of the inner loop.
//!
//! Rows arrive as typed blocks (`&[BlockQ4_1]`, fields read by name); all loads go through
//! `read_unaligned`, since weight bytes come straight from files.

// Token and accumulator indices walk several per-token arrays in step.
#![allow(clippy::needless_range_loop)]

use std::arch::wasm32::*;

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

/// The block formats with a SIMD128 kernel (every one the engine reads).
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

/// A legacy 32-value block format as these kernels see it.
pub(super) trait SimdBlock: LegacyScales {
    /// The per-block offset: none (q8_0, q5_0), a stored f16 `m` (q4_1, q5_1), or −8·d
    /// (q4_0).
    const OFFSET: Offset;
    /// The block's 32 integer weights as i16 lanes in element order.
    fn weights(&self) -> [v128; 4];
}

#[derive(PartialEq, Eq)]
pub(super) enum Offset {
    None,
    Stored,
    MinusEightD,
}

/// Nibbles (byte j: element j low, j + 16 high) as 32 u16 lanes.
#[inline]
fn nibbles(qs: &[u8; 16]) -> [v128; 4] {
    let raw = load(qs.as_ptr());
    let lo = v128_and(raw, u8x16_splat(0x0f));
    let hi = u8x16_shr(raw, 4);
    [
        u16x8_extend_low_u8x16(lo),
        u16x8_extend_high_u8x16(lo),
        u16x8_extend_low_u8x16(hi),
        u16x8_extend_high_u8x16(hi),
    ]
}

/// A block's f16 `d` in the low half of a u32 and its stored `m` (or 0) in the high half.
#[inline]
fn packed_scales<B: LegacyScales>(blk: &B) -> u32 {
    let (d, m) = blk.scale_bits();
    u32::from(d) | (u32::from(m) << 16)
}

impl SimdBlock for BlockQ4_0 {
    const OFFSET: Offset = Offset::MinusEightD;
    #[inline]
    fn weights(&self) -> [v128; 4] {
        nibbles(&self.qs)
    }
}

impl SimdBlock for BlockQ4_1 {
    const OFFSET: Offset = Offset::Stored;
    #[inline]
    fn weights(&self) -> [v128; 4] {
        nibbles(&self.qs)
    }
}

impl SimdBlock for BlockQ8_0 {
    const OFFSET: Offset = Offset::None;
    #[inline]
    fn weights(&self) -> [v128; 4] {
        let (q0, q1) = (load(self.qs.as_ptr()), load(self.qs[16..].as_ptr()));
        [
            i16x8_extend_low_i8x16(q0),
            i16x8_extend_high_i8x16(q0),
            i16x8_extend_low_i8x16(q1),
            i16x8_extend_high_i8x16(q1),
        ]
    }
}

impl SimdBlock for BlockQ5_0 {
    const OFFSET: Offset = Offset::None;
    #[inline]
    fn weights(&self) -> [v128; 4] {
        q5_values(self.qh, &self.qs).map(|v| i16x8_sub(v, i16x8_splat(16)))
    }
}

impl SimdBlock for BlockQ5_1 {
    const OFFSET: Offset = Offset::Stored;
    #[inline]
    fn weights(&self) -> [v128; 4] {
        q5_values(self.qh, &self.qs)
    }
}

/// Σ over one block of i16 weights `w` times the 32 activations at `x`, as four i32 lanes.
///
/// # Safety
/// `x` points at 32 readable i16.
#[inline]
unsafe fn dot_block(w: &[v128; 4], x: *const i16) -> v128 {
    let p = x.cast::<u8>();
    // SAFETY: 64 bytes, four 16-byte loads.
    let (x0, x1, x2, x3) = unsafe { (load(p), load(p.add(16)), load(p.add(32)), load(p.add(48))) };
    i32x4_add(
        i32x4_add(i32x4_dot_i16x8(w[0], x0), i32x4_dot_i16x8(w[1], x1)),
        i32x4_add(i32x4_dot_i16x8(w[2], x2), i32x4_dot_i16x8(w[3], x3)),
    )
}

/// [Σa, Σb, Σc, Σd] of four i32x4 vectors (a 4×4 transpose folded into the adds).
#[inline]
fn sum4([a, b, c, d]: [v128; 4]) -> v128 {
    let ab = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(a, b),
        i32x4_shuffle::<2, 6, 3, 7>(a, b),
    );
    let cd = i32x4_add(
        i32x4_shuffle::<0, 4, 1, 5>(c, d),
        i32x4_shuffle::<2, 6, 3, 7>(c, d),
    );
    i32x4_add(
        i32x4_shuffle::<0, 1, 4, 5>(ab, cd),
        i32x4_shuffle::<2, 3, 6, 7>(ab, cd),
    )
}

/// A row of `blocks` blocks of `F` against `NT` tokens starting at `t0`.
///
/// Blocks go in groups of four so that their scales are converted, multiplied and accumulated
/// as one f32x4 each: four blocks' integer dot products are reduced to one vector (lane k =
/// block k), and the activation scales and sums of four consecutive blocks are contiguous.
/// The accumulators are reduced once per row.
#[inline]
fn dot_row<F: SimdBlock, const NT: usize>(row: &[F], acts: &BlockActs, t0: usize) -> [f32; NT] {
    let blocks = row.len();
    let act_blocks = (t0 + NT) * blocks;
    assert!(
        acts.d.len() >= act_blocks
            && acts.s.len() >= act_blocks
            && acts.qs.len() >= act_blocks * ACT_BLOCK
    );
    let (xq, xd, xs) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    let mut acc = [f32x4_splat(0.0); NT];
    let mut offset_acc = [f32x4_splat(0.0); NT];
    let mut b = 0;
    // SAFETY (loop bodies): activation block (t0 + t)·blocks + b + k, t < NT, b + k < blocks,
    // exists by the assert above.
    // Every token takes this path whatever NT is, so a token's sum is rounded the same way in a
    // batch as alone: speculative decoding's verify rows are bit-identical to decode steps.
    while b + 4 <= blocks {
        let group = &row[b..b + 4];
        let bits = u32x4(
            packed_scales(&group[0]),
            packed_scales(&group[1]),
            packed_scales(&group[2]),
            packed_scales(&group[3]),
        );
        let d = f16_lanes_to_f32(v128_and(bits, u32x4_splat(0xffff)));
        let m = match F::OFFSET {
            Offset::None => f32x4_splat(0.0),
            Offset::Stored => f16_lanes_to_f32(u32x4_shr(bits, 16)),
            Offset::MinusEightD => f32x4_mul(d, f32x4_splat(-8.0)),
        };
        let mut dots = [[i32x4_splat(0); 4]; NT];
        for (k, blk) in group.iter().enumerate() {
            let w = blk.weights();
            for t in 0..NT {
                let ab = (t0 + t) * blocks + b + k;
                dots[t][k] = unsafe { dot_block(&w, xq.add(ab * ACT_BLOCK)) };
            }
        }
        for t in 0..NT {
            let ab = (t0 + t) * blocks + b;
            let (act_d, act_s) = unsafe { (load(xd.add(ab).cast()), load(xs.add(ab).cast())) };
            let scale = f32x4_mul(d, act_d);
            acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(sum4(dots[t])), scale));
            if F::OFFSET != Offset::None {
                offset_acc[t] = f32x4_add(offset_acc[t], f32x4_mul(m, act_s));
            }
        }
        b += 4;
    }
    // The remaining blocks one at a time.
    let mut offset_tail = [0.0f32; NT];
    while b < blocks {
        let bits = packed_scales(&row[b]);
        let d = f16_to_f32(bits as u16);
        let m = match F::OFFSET {
            Offset::None => 0.0,
            Offset::Stored => f16_to_f32((bits >> 16) as u16),
            Offset::MinusEightD => -8.0 * d,
        };
        let w = row[b].weights();
        for t in 0..NT {
            let ab = (t0 + t) * blocks + b;
            let (dot, act_d, act_s) = unsafe {
                (
                    dot_block(&w, xq.add(ab * ACT_BLOCK)),
                    *xd.add(ab),
                    *xs.add(ab),
                )
            };
            let scaled = f32x4_mul(f32x4_convert_i32x4(dot), f32x4_splat(d * act_d));
            acc[t] = f32x4_add(acc[t], scaled);
            offset_tail[t] += m * act_s;
        }
        b += 1;
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(f32x4_add(acc[t], offset_acc[t])) + offset_tail[t];
    }
    out
}

pub(super) fn matmul_legacy<B: SimdBlock>(
    w: &QMatrix,
    acts: &BlockActs,
    n: usize,
    out: &mut [f32],
) {
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
        dot_row::<B, NT>(as_blocks::<B>(w.row(r)), acts, t0)
    });
}

/// Bits 0..8 (lanes 0..8) and 8..16 of `bits` as 0 or 16 per i16 lane.
#[inline]
fn fifth_bits(bits: u16) -> [v128; 2] {
    let lo = i16x8(1, 2, 4, 8, 16, 32, 64, 128);
    let hi = i16x8(256, 512, 1024, 2048, 4096, 8192, 16384, i16::MIN);
    let b = i16x8_splat(bits as i16);
    let sixteen = i16x8_splat(16);
    [
        v128_and(i16x8_eq(v128_and(b, lo), lo), sixteen),
        v128_and(i16x8_eq(v128_and(b, hi), hi), sixteen),
    ]
}

/// Unsigned 5-bit values as u16 lanes: nibbles plus bit j of `qh` as the fifth bit of
/// element j.
#[inline]
fn q5_values(qh: [u8; 4], qs: &[u8; 16]) -> [v128; 4] {
    let qh = u32::from_le_bytes(qh);
    let q = nibbles(qs);
    let [a, b] = fifth_bits(qh as u16);
    let [c, d] = fifth_bits((qh >> 16) as u16);
    [
        v128_or(q[0], a),
        v128_or(q[1], b),
        v128_or(q[2], c),
        v128_or(q[3], d),
    ]
}

/// A K-quant super-block as the K kernel sees it: eight 32-value sub-blocks of small unsigned
/// (Q4_K, Q5_K) or signed (Q6_K) integers, with a float scale per `32 / PIECE_LEN`-value piece.
pub(super) trait KBlock: QuantBlock {
    /// Scaled pieces per 32-value sub-block: 1 (Q4_K, Q5_K) or 2 (Q6_K's 16-value scales).
    const PIECES: usize;
    const HAS_OFFSET: bool;
    /// d·sc of every piece, four per vector, and −dmin·m of every sub-block, four per vector.
    fn header(&self) -> KHeader;
    /// The unscaled integers of sub-block `s` as i16 lanes in element order.
    fn values(&self, s: usize) -> [v128; 4];
}

pub(super) struct KHeader {
    scales: [v128; 4],
    offsets: [v128; 2],
}

/// `[a·b0, a·b1, a·b2, a·b3]` for u8 `b`.
#[inline]
fn scaled_u8x4(a: f32, b: &[u8]) -> v128 {
    let lanes = u32x4(b[0].into(), b[1].into(), b[2].into(), b[3].into());
    f32x4_mul(f32x4_splat(a), f32x4_convert_u32x4(lanes))
}

/// The (d·sc, −dmin·m) header shared by Q4_K and Q5_K.
#[inline]
fn k_header(d: [u8; 2], dmin: [u8; 2], scales: &[u8; 12]) -> KHeader {
    let (sc, m) = super::kquant::scales_mins(scales);
    let d = f16_to_f32(u16::from_le_bytes(d));
    let minus_dmin = -f16_to_f32(u16::from_le_bytes(dmin));
    let zero = f32x4_splat(0.0);
    KHeader {
        scales: [
            scaled_u8x4(d, &sc[..4]),
            scaled_u8x4(d, &sc[4..]),
            zero,
            zero,
        ],
        offsets: [
            scaled_u8x4(minus_dmin, &m[..4]),
            scaled_u8x4(minus_dmin, &m[4..]),
        ],
    }
}

/// The nibbles of sub-block `s` (< 8) of a Q4_K/Q5_K block as two u8x16.
#[inline]
fn k_nibbles(qs: &[u8; 128], s: usize) -> [v128; 2] {
    let c = &qs[32 * (s / 2)..][..32];
    let (b0, b1) = (load(c.as_ptr()), load(c[16..].as_ptr()));
    if s.is_multiple_of(2) {
        let low4 = u8x16_splat(0x0f);
        [v128_and(b0, low4), v128_and(b1, low4)]
    } else {
        [u8x16_shr(b0, 4), u8x16_shr(b1, 4)]
    }
}

/// 32 u8 lanes (two vectors) widened to four u16x8.
#[inline]
fn widen_u8([a, b]: [v128; 2]) -> [v128; 4] {
    [
        u16x8_extend_low_u8x16(a),
        u16x8_extend_high_u8x16(a),
        u16x8_extend_low_u8x16(b),
        u16x8_extend_high_u8x16(b),
    ]
}

impl KBlock for BlockQ4K {
    const PIECES: usize = 1;
    const HAS_OFFSET: bool = true;
    #[inline]
    fn header(&self) -> KHeader {
        k_header(self.d, self.dmin, &self.scales)
    }
    #[inline]
    fn values(&self, s: usize) -> [v128; 4] {
        widen_u8(k_nibbles(&self.qs, s))
    }
}

impl KBlock for BlockQ5K {
    const PIECES: usize = 1;
    const HAS_OFFSET: bool = true;
    #[inline]
    fn header(&self) -> KHeader {
        k_header(self.d, self.dmin, &self.scales)
    }
    /// Bit `s` of `qh[l]` is the fifth bit of element l.
    #[inline]
    fn values(&self, s: usize) -> [v128; 4] {
        let [lo, hi] = k_nibbles(&self.qs, s);
        let (qh0, qh1) = (load(self.qh.as_ptr()), load(self.qh[16..].as_ptr()));
        let bit = u8x16_splat(1 << s);
        let sixteen = u8x16_splat(16);
        let high = |qh| v128_and(i8x16_eq(v128_and(qh, bit), bit), sixteen);
        widen_u8([v128_or(lo, high(qh0)), v128_or(hi, high(qh1))])
    }
}

impl KBlock for BlockQ6K {
    const PIECES: usize = 2;
    const HAS_OFFSET: bool = false;
    #[inline]
    fn header(&self) -> KHeader {
        let d = f16_to_f32(u16::from_le_bytes(self.d));
        let sc = |k: usize| {
            let s = &self.scales[4 * k..][..4];
            let lanes = i32x4(
                i32::from(s[0] as i8),
                i32::from(s[1] as i8),
                i32::from(s[2] as i8),
                i32::from(s[3] as i8),
            );
            f32x4_mul(f32x4_splat(d), f32x4_convert_i32x4(lanes))
        };
        let zero = f32x4_splat(0.0);
        KHeader {
            scales: [sc(0), sc(1), sc(2), sc(3)],
            offsets: [zero, zero],
        }
    }
    /// Sub-block s = 4h + k: low (k < 2) or high nibbles of ql[64h + 32(k % 2)..][..32] and
    /// bits 2k, 2k+1 of qh[32h..][..32] (see `kquant::q6_values`), minus 32.
    #[inline]
    fn values(&self, s: usize) -> [v128; 4] {
        let (half, k) = (s / 4, s % 4);
        let ql = &self.ql[64 * half + 32 * (k % 2)..][..32];
        let qh = &self.qh[32 * half..][..32];
        let (l0, l1) = (load(ql.as_ptr()), load(ql[16..].as_ptr()));
        let (h0, h1) = (load(qh.as_ptr()), load(qh[16..].as_ptr()));
        let nibble_shift = 4 * (k / 2) as u32;
        let high_shift = 2 * k as u32;
        let value = |l, hb| {
            let low = v128_and(u8x16_shr(l, nibble_shift), u8x16_splat(0x0f));
            let high = v128_and(u8x16_shr(hb, high_shift), u8x16_splat(3));
            // 6-bit values minus 32, still exact in i8.
            i8x16_sub(v128_or(low, u8x16_shl(high, 4)), i8x16_splat(32))
        };
        let (v0, v1) = (value(l0, h0), value(l1, h1));
        [
            i16x8_extend_low_i8x16(v0),
            i16x8_extend_high_i8x16(v0),
            i16x8_extend_low_i8x16(v1),
            i16x8_extend_high_i8x16(v1),
        ]
    }
}

/// The dots of the 16-value halves of one sub-block's weights `w` with the 32 activations at `x`.
///
/// # Safety
/// `x` points at 32 readable i16.
#[inline]
unsafe fn dot_halves(w: &[v128; 4], x: *const i16) -> [v128; 2] {
    let p = x.cast::<u8>();
    // SAFETY: 64 bytes, four 16-byte loads.
    let (x0, x1, x2, x3) = unsafe { (load(p), load(p.add(16)), load(p.add(32)), load(p.add(48))) };
    [
        i32x4_add(i32x4_dot_i16x8(w[0], x0), i32x4_dot_i16x8(w[1], x1)),
        i32x4_add(i32x4_dot_i16x8(w[2], x2), i32x4_dot_i16x8(w[3], x3)),
    ]
}

/// A row of K-quant blocks against `NT` tokens starting at `t0`; activation block `8b + s` of
/// each token lines up with sub-block `s` of weight block `b`.
///
/// The integer dots stay unscaled (|dot| ≤ 32·32·32767, far inside i32) and are taken four
/// pieces at a time: reduced to one vector (lane k = piece k), converted once and scaled by
/// (d·sc) · activation scale as an f32x4, so no per-piece scalar work is left in the loop.
#[inline]
fn dot_k<B: KBlock, const NT: usize>(row: &[B], acts: &BlockActs, t0: usize) -> [f32; NT] {
    let per_token = row.len() * 8;
    let act_blocks = (t0 + NT) * per_token;
    assert!(
        acts.d.len() >= act_blocks
            && acts.s.len() >= act_blocks
            && acts.qs.len() >= act_blocks * ACT_BLOCK
    );
    let (xq, xd, xs) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    let subs_per_group = 4 / B::PIECES;
    let mut acc = [f32x4_splat(0.0); NT];
    let mut offset_acc = [f32x4_splat(0.0); NT];
    for (b, blk) in row.iter().enumerate() {
        let h = blk.header();
        for g in 0..8 / subs_per_group {
            let mut dots = [[i32x4_splat(0); 4]; NT];
            for k in 0..subs_per_group {
                let s = g * subs_per_group + k;
                let w = blk.values(s);
                for t in 0..NT {
                    let ab = (t0 + t) * per_token + 8 * b + s;
                    // SAFETY: activation block ab exists by the assert above.
                    let x = unsafe { xq.add(ab * ACT_BLOCK) };
                    if B::PIECES == 1 {
                        dots[t][k] = unsafe { dot_block(&w, x) };
                    } else {
                        [dots[t][2 * k], dots[t][2 * k + 1]] = unsafe { dot_halves(&w, x) };
                    }
                }
            }
            for t in 0..NT {
                let ab = (t0 + t) * per_token + 8 * b + g * subs_per_group;
                // SAFETY: blocks ab..ab + subs_per_group of this token exist (assert above).
                let act_d = unsafe {
                    if B::PIECES == 1 {
                        load(xd.add(ab).cast())
                    } else {
                        // Two sub-blocks' scales, each serving its two pieces.
                        let pair = u64x2_splat(xd.add(ab).cast::<u64>().read_unaligned());
                        i32x4_shuffle::<0, 0, 1, 1>(pair, pair)
                    }
                };
                let scale = f32x4_mul(h.scales[g], act_d);
                acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(sum4(dots[t])), scale));
            }
        }
        if B::HAS_OFFSET {
            for t in 0..NT {
                let ab = (t0 + t) * per_token + 8 * b;
                // SAFETY: the block's eight activation sums exist (assert above).
                let (s0, s1) = unsafe { (load(xs.add(ab).cast()), load(xs.add(ab + 4).cast())) };
                let off = f32x4_add(f32x4_mul(h.offsets[0], s0), f32x4_mul(h.offsets[1], s1));
                offset_acc[t] = f32x4_add(offset_acc[t], off);
            }
        }
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(f32x4_add(acc[t], offset_acc[t]));
    }
    out
}

pub(super) fn matmul_k<B: KBlock>(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
        dot_k::<B, NT>(as_blocks::<B>(w.row(r)), acts, t0)
    });
}

/// f16 values (the low 16 bits of each u32 lane, high bits zero) to f32, exactly: the
/// lane-wise form of `float::f16_to_f32`.
#[inline]
fn f16_lanes_to_f32(h: v128) -> v128 {
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

/// Four f16 values (in the low 64 bits of `h`) to f32, exactly.
#[inline]
fn f16x4_to_f32x4(h: v128) -> v128 {
    f16_lanes_to_f32(u32x4_extend_low_u16x8(h))
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
