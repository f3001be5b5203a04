//! wasm32 SIMD128 kernels (compiled in when the build enables `simd128`).
//!
//! Baseline SIMD128 has no FMA; its one integer dot product is `i32x4.dot_i16x8_s`, which suits
//! the 16-bit activations. Each weight block is widened to i16 once per group of tokens; a block
//! then costs four dot products per token. Scales are handled four blocks at a time (see
//! `dot_row`), so the per-block float and scalar work stays out of the inner loop.
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

/// A block format as these kernels see it.
trait SimdBlock {
    /// Stored bytes per block.
    const BYTES: usize;
    /// The per-block offset: none (q8_0), stored as an f16 after `d` (q4_1), or −8·d (q4_0).
    const OFFSET: Offset;
    /// The 32 weights of the block at `p` as i16 lanes in element order.
    ///
    /// # Safety
    /// `p` points at a whole block.
    unsafe fn weights(p: *const u8) -> [v128; 4];
}

#[derive(PartialEq, Eq)]
enum Offset {
    None,
    Stored,
    MinusEightD,
}

struct Q4_0;
struct Q4_1;
struct Q8_0;

/// Nibbles at `p` (byte j: element j low, j + 16 high) as 32 u16 lanes.
#[inline]
fn nibbles(p: *const u8) -> [v128; 4] {
    let raw = load(p);
    let lo = v128_and(raw, u8x16_splat(0x0f));
    let hi = u8x16_shr(raw, 4);
    [
        u16x8_extend_low_u8x16(lo),
        u16x8_extend_high_u8x16(lo),
        u16x8_extend_low_u8x16(hi),
        u16x8_extend_high_u8x16(hi),
    ]
}

impl SimdBlock for Q4_0 {
    const BYTES: usize = 18;
    const OFFSET: Offset = Offset::MinusEightD;
    unsafe fn weights(p: *const u8) -> [v128; 4] {
        // SAFETY: the nibbles are the block's last 16 bytes.
        nibbles(unsafe { p.add(2) })
    }
}

impl SimdBlock for Q4_1 {
    const BYTES: usize = 20;
    const OFFSET: Offset = Offset::Stored;
    unsafe fn weights(p: *const u8) -> [v128; 4] {
        // SAFETY: as for Q4_0.
        nibbles(unsafe { p.add(4) })
    }
}

impl SimdBlock for Q8_0 {
    const BYTES: usize = 34;
    const OFFSET: Offset = Offset::None;
    unsafe fn weights(p: *const u8) -> [v128; 4] {
        // SAFETY: 32 weight bytes follow the 2-byte scale.
        let (q0, q1) = unsafe { (load(p.add(2)), load(p.add(18))) };
        [
            i16x8_extend_low_i8x16(q0),
            i16x8_extend_high_i8x16(q0),
            i16x8_extend_low_i8x16(q1),
            i16x8_extend_high_i8x16(q1),
        ]
    }
}

/// The f16 scale bits of the block at `p`: `d` in the low half, a stored `m` in the high half.
///
/// # Safety
/// `p` points at a whole block.
#[inline]
unsafe fn scale_bits<F: SimdBlock>(p: *const u8) -> u32 {
    // SAFETY: every block starts with its 2 (or, with a stored offset, 4) scale bytes.
    unsafe {
        if F::OFFSET == Offset::Stored {
            p.cast::<u32>().read_unaligned()
        } else {
            u32::from(p.cast::<u16>().read_unaligned())
        }
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
fn dot_row<F: SimdBlock, const NT: usize>(
    row: &[u8],
    acts: &BlockActs,
    t0: usize,
    blocks: usize,
) -> [f32; NT] {
    assert_eq!(row.len(), blocks * F::BYTES);
    let act_blocks = (t0 + NT) * blocks;
    assert!(
        acts.d.len() >= act_blocks
            && acts.s.len() >= act_blocks
            && acts.qs.len() >= act_blocks * ACT_BLOCK
    );
    let p = row.as_ptr();
    let (xq, xd, xs) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    let mut acc = [f32x4_splat(0.0); NT];
    let mut offset_acc = [f32x4_splat(0.0); NT];
    let mut b = 0;
    // SAFETY (loop bodies): b + k < blocks keeps every block inside `row`, and activation block
    // (t0 + t)·blocks + b + k, t < NT, exists by the assert above.
    // Every token takes this path whatever NT is, so a token's sum is rounded the same way in a
    // batch as alone: speculative decoding's verify rows are bit-identical to decode steps.
    while b + 4 <= blocks {
        let q = |k: usize| unsafe { p.add((b + k) * F::BYTES) };
        let bits = unsafe {
            u32x4(
                scale_bits::<F>(q(0)),
                scale_bits::<F>(q(1)),
                scale_bits::<F>(q(2)),
                scale_bits::<F>(q(3)),
            )
        };
        let d = f16_lanes_to_f32(v128_and(bits, u32x4_splat(0xffff)));
        let m = match F::OFFSET {
            Offset::None => f32x4_splat(0.0),
            Offset::Stored => f16_lanes_to_f32(u32x4_shr(bits, 16)),
            Offset::MinusEightD => f32x4_mul(d, f32x4_splat(-8.0)),
        };
        let mut dots = [[i32x4_splat(0); 4]; NT];
        for k in 0..4 {
            let w = unsafe { F::weights(q(k)) };
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
        let q = unsafe { p.add(b * F::BYTES) };
        let bits = unsafe { scale_bits::<F>(q) };
        let d = f16_to_f32(bits as u16);
        let m = match F::OFFSET {
            Offset::None => 0.0,
            Offset::Stored => f16_to_f32((bits >> 16) as u16),
            Offset::MinusEightD => -8.0 * d,
        };
        let w = unsafe { F::weights(q) };
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

pub(super) fn matmul_q4<const HAS_MIN: bool>(
    w: &QMatrix,
    acts: &BlockActs,
    n: usize,
    out: &mut [f32],
) {
    let blocks = w.cols() / ACT_BLOCK;
    if HAS_MIN {
        tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
            dot_row::<Q4_1, NT>(w.row(r), acts, t0, blocks)
        });
    } else {
        tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
            dot_row::<Q4_0, NT>(w.row(r), acts, t0, blocks)
        });
    }
}

pub(super) fn matmul_q8_0(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    let blocks = w.cols() / ACT_BLOCK;
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
        dot_row::<Q8_0, NT>(w.row(r), acts, t0, blocks)
    });
}

/// What the sub-block kernel needs from a block before unpacking its sub-blocks.
pub(super) struct SubHeader {
    d: f32,
    /// Per-sub-block offsets (q5_1's m, the K-quants' −dmin·m).
    offsets: [f32; 8],
    /// Integer sub-block scales (K-quants): Q4_K/Q5_K use 8, Q6_K 16.
    sc: [i16; 16],
}

/// A `SubBlocks` format as this kernel sees it.
pub(super) trait SubFormat {
    const BYTES: usize;
    const SUBS: usize;
    const HAS_OFFSET: bool;
    /// # Safety
    /// `p` points at a whole block.
    unsafe fn header(p: *const u8) -> SubHeader;
    /// Integer weights of sub-block `s` as i16 lanes in element order.
    ///
    /// # Safety
    /// As `header`, and `s < SUBS`.
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> [v128; 4];
}

pub(super) struct Q5_0;
pub(super) struct Q5_1;
pub(super) struct Q4K;
pub(super) struct Q5K;
pub(super) struct Q6K;

/// # Safety
/// 2 readable bytes at `p`.
#[inline]
unsafe fn f16_at(p: *const u8) -> f32 {
    f16_to_f32(unsafe { p.cast::<u16>().read_unaligned() })
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

/// 5-bit legacy values at `p` (4 bytes qh, then 16 bytes of nibbles), as u16 lanes.
///
/// # Safety
/// 20 readable bytes at `p`.
#[inline]
unsafe fn q5_values(p: *const u8) -> [v128; 4] {
    let qh = unsafe { p.cast::<u32>().read_unaligned() };
    let q = nibbles(unsafe { p.add(4) });
    let [a, b] = fifth_bits(qh as u16);
    let [c, d] = fifth_bits((qh >> 16) as u16);
    [
        v128_or(q[0], a),
        v128_or(q[1], b),
        v128_or(q[2], c),
        v128_or(q[3], d),
    ]
}

impl SubFormat for Q5_0 {
    const BYTES: usize = 22;
    const SUBS: usize = 1;
    const HAS_OFFSET: bool = false;
    #[inline]
    unsafe fn header(p: *const u8) -> SubHeader {
        SubHeader {
            // SAFETY: d is the first 2 bytes.
            d: unsafe { f16_at(p) },
            offsets: [0.0; 8],
            sc: [0; 16],
        }
    }
    #[inline]
    unsafe fn weights(p: *const u8, _: &SubHeader, _: usize) -> [v128; 4] {
        // SAFETY: qh and nibbles follow d.
        unsafe { q5_values(p.add(2)) }.map(|v| i16x8_sub(v, i16x8_splat(16)))
    }
}

impl SubFormat for Q5_1 {
    const BYTES: usize = 24;
    const SUBS: usize = 1;
    const HAS_OFFSET: bool = true;
    #[inline]
    unsafe fn header(p: *const u8) -> SubHeader {
        let mut offsets = [0.0; 8];
        // SAFETY: d and m are the first 4 bytes.
        let (d, m) = unsafe { (f16_at(p), f16_at(p.add(2))) };
        offsets[0] = m;
        SubHeader {
            d,
            offsets,
            sc: [0; 16],
        }
    }
    #[inline]
    unsafe fn weights(p: *const u8, _: &SubHeader, _: usize) -> [v128; 4] {
        // SAFETY: qh and nibbles follow d and m.
        unsafe { q5_values(p.add(4)) }
    }
}

/// d, −dmin·m and the scales of a Q4_K/Q5_K block.
///
/// # Safety
/// `p` points at a whole Q4_K/Q5_K block.
#[inline]
unsafe fn k_header(p: *const u8) -> SubHeader {
    let scales: &[u8; 12] = unsafe { &*p.add(4).cast::<[u8; 12]>() };
    let (sc, m) = super::kquant::scales_mins(scales);
    let (d, dmin) = unsafe { (f16_at(p), f16_at(p.add(2))) };
    let mut h = SubHeader {
        d,
        offsets: [0.0; 8],
        sc: [0; 16],
    };
    for i in 0..8 {
        h.offsets[i] = -(dmin * f32::from(m[i]));
        h.sc[i] = i16::from(sc[i]);
    }
    h
}

/// Nibbles of sub-block `s` of a Q4_K/Q5_K block whose nibble bytes start at `qs`, as u16 lanes.
///
/// # Safety
/// 128 readable bytes at `qs`, s < 8.
#[inline]
unsafe fn k_nibbles(qs: *const u8, s: usize) -> [v128; 2] {
    let c = unsafe { qs.add(32 * (s / 2)) };
    let (b0, b1) = (load(c), load(unsafe { c.add(16) }));
    if s.is_multiple_of(2) {
        let low4 = u8x16_splat(0x0f);
        [v128_and(b0, low4), v128_and(b1, low4)]
    } else {
        [u8x16_shr(b0, 4), u8x16_shr(b1, 4)]
    }
}

/// 32 u8 lanes (two vectors) widened to four u16x8 and multiplied by `sc`.
#[inline]
fn widen_scaled([a, b]: [v128; 2], sc: i16) -> [v128; 4] {
    let sc = i16x8_splat(sc);
    [
        i16x8_mul(u16x8_extend_low_u8x16(a), sc),
        i16x8_mul(u16x8_extend_high_u8x16(a), sc),
        i16x8_mul(u16x8_extend_low_u8x16(b), sc),
        i16x8_mul(u16x8_extend_high_u8x16(b), sc),
    ]
}

impl SubFormat for Q4K {
    const BYTES: usize = 144;
    const SUBS: usize = 8;
    const HAS_OFFSET: bool = true;
    #[inline]
    unsafe fn header(p: *const u8) -> SubHeader {
        unsafe { k_header(p) }
    }
    #[inline]
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> [v128; 4] {
        // SAFETY: nibbles start after the 16 header bytes.
        widen_scaled(unsafe { k_nibbles(p.add(16), s) }, h.sc[s])
    }
}

impl SubFormat for Q5K {
    const BYTES: usize = 176;
    const SUBS: usize = 8;
    const HAS_OFFSET: bool = true;
    #[inline]
    unsafe fn header(p: *const u8) -> SubHeader {
        unsafe { k_header(p) }
    }
    #[inline]
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> [v128; 4] {
        // SAFETY: qh is bytes 16..48, the nibbles 48..176.
        let ([lo, hi], qh0, qh1) =
            unsafe { (k_nibbles(p.add(48), s), load(p.add(16)), load(p.add(32))) };
        let bit = u8x16_splat(1 << s);
        let sixteen = u8x16_splat(16);
        let high = |qh| v128_and(i8x16_eq(v128_and(qh, bit), bit), sixteen);
        widen_scaled([v128_or(lo, high(qh0)), v128_or(hi, high(qh1))], h.sc[s])
    }
}

impl SubFormat for Q6K {
    const BYTES: usize = 210;
    const SUBS: usize = 8;
    const HAS_OFFSET: bool = false;
    #[inline]
    unsafe fn header(p: *const u8) -> SubHeader {
        let mut sc = [0i16; 16];
        for (i, sc) in sc.iter_mut().enumerate() {
            // SAFETY: the i8 scales are bytes 192..208.
            *sc = i16::from(unsafe { *p.add(192 + i) } as i8);
        }
        SubHeader {
            // SAFETY: d is bytes 208..210.
            d: unsafe { f16_at(p.add(208)) },
            offsets: [0.0; 8],
            sc,
        }
    }
    /// Sub-block s = 4h + k: low (k < 2) or high nibbles of ql[64h + 32(k % 2)..][..32] and
    /// bits 2k, 2k+1 of qh[32h..][..32] (see `kquant::q6_values`).
    #[inline]
    unsafe fn weights(p: *const u8, h: &SubHeader, s: usize) -> [v128; 4] {
        let (half, k) = (s / 4, s % 4);
        // SAFETY: ql is bytes 0..128, qh 128..192.
        let (l0, l1, h0, h1) = unsafe {
            let ql = p.add(64 * half + 32 * (k % 2));
            let qh = p.add(128 + 32 * half);
            (load(ql), load(ql.add(16)), load(qh), load(qh.add(16)))
        };
        let nibble_shift = 4 * (k / 2) as u32;
        let high_shift = 2 * k as u32;
        let value = |l, hb| {
            let low = v128_and(u8x16_shr(l, nibble_shift), u8x16_splat(0x0f));
            let high = v128_and(u8x16_shr(hb, high_shift), u8x16_splat(3));
            // 6-bit values minus 32, still exact in i8.
            i8x16_sub(v128_or(low, u8x16_shl(high, 4)), i8x16_splat(32))
        };
        let (v0, v1) = (value(l0, h0), value(l1, h1));
        let (s0, s1) = (i16x8_splat(h.sc[2 * s]), i16x8_splat(h.sc[2 * s + 1]));
        [
            i16x8_mul(i16x8_extend_low_i8x16(v0), s0),
            i16x8_mul(i16x8_extend_high_i8x16(v0), s0),
            i16x8_mul(i16x8_extend_low_i8x16(v1), s1),
            i16x8_mul(i16x8_extend_high_i8x16(v1), s1),
        ]
    }
}

/// A row of `blocks` blocks of `F` against `NT` tokens starting at `t0`; activation block
/// `b·SUBS + s` of each token lines up with sub-block `s` of weight block `b`. Each sub-block's
/// integer dot goes to f32 at once: Q6_K's scaled weights would overflow a 32-value i32 sum.
#[inline]
fn dot_sub<F: SubFormat, const NT: usize>(
    row: &[u8],
    acts: &BlockActs,
    t0: usize,
    blocks: usize,
) -> [f32; NT] {
    assert_eq!(row.len(), blocks * F::BYTES);
    let per_token = blocks * F::SUBS;
    let act_blocks = (t0 + NT) * per_token;
    assert!(
        acts.d.len() >= act_blocks
            && acts.s.len() >= act_blocks
            && acts.qs.len() >= act_blocks * ACT_BLOCK
    );
    let p = row.as_ptr();
    let (xq, xd, xs) = (acts.qs.as_ptr(), acts.d.as_ptr(), acts.s.as_ptr());
    let mut acc = [f32x4_splat(0.0); NT];
    let mut offset_acc = [0.0f32; NT];
    for b in 0..blocks {
        // SAFETY: b < blocks keeps the block inside `row`; activation blocks
        // (t0 + t)·per_token + b·SUBS + s exist by the assert above.
        unsafe {
            let q = p.add(b * F::BYTES);
            let h = F::header(q);
            for s in 0..F::SUBS {
                let w = F::weights(q, &h, s);
                for t in 0..NT {
                    let ab = (t0 + t) * per_token + b * F::SUBS + s;
                    let dot = dot_block(&w, xq.add(ab * ACT_BLOCK));
                    let scale = f32x4_splat(h.d * *xd.add(ab));
                    acc[t] = f32x4_add(acc[t], f32x4_mul(f32x4_convert_i32x4(dot), scale));
                    if F::HAS_OFFSET {
                        offset_acc[t] += h.offsets[s] * *xs.add(ab);
                    }
                }
            }
        }
    }
    let mut out = [0.0f32; NT];
    for t in 0..NT {
        out[t] = hsum(acc[t]) + offset_acc[t];
    }
    out
}

pub(super) fn matmul_sub<F: SubFormat>(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    let blocks = w.cols() / w.dtype().block_len();
    tiled_matmul!(w.rows(), n, out, |r, t0, NT| {
        dot_sub::<F, NT>(w.row(r), acts, t0, blocks)
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
