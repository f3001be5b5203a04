//! Activation quantization for block-format matmuls: x is cut into 32-element blocks, each
//! stored as 32 signed 16-bit integers with an f32 scale and the scaled block sum. Formats with
//! a per-block offset (q4_1's `m`, q4_0's implicit −8) need the sum:
//! Σ (q·d + m)·x = d·Σ q·x + m·Σ x.
//!
//! Why 16 bits: 8-bit blocks (llama.cpp's Q8_1 idea) round each value to amax/127 of its block,
//! and residual streams with outlier dimensions (SmolLM2) make that step coarse enough to flip
//! greedy tokens. At amax/32767 the activation error is ~256× smaller, below the weights' own
//! rounding, and the integer dot products still fit i32 for every weight format up to 8 bits:
//! |w| ≤ 128 and |x| ≤ 32767 give pair sums ≤ 2^23 and block sums ≤ 2^27.

use super::threads::Shared;
use crate::buffer::{fit, reserve_exactly};

/// Elements per activation block; every block format of this module has rows of whole 32-blocks.
pub(crate) const ACT_BLOCK: usize = 32;

/// Largest quantized activation magnitude.
pub(crate) const ACT_MAX: f32 = 32767.0;

/// Quantized activations of `n` tokens, token-major, block-major within a token.
#[derive(Default, Debug)]
pub(crate) struct BlockActs {
    /// Quantized values, `n * cols`.
    pub qs: Vec<i16>,
    /// Per-block scale: x ≈ q · d.
    pub d: Vec<f32>,
    /// Per-block `d · Σ q`.
    pub s: Vec<f32>,
}

impl BlockActs {
    /// Capacity for `values` inputs (their lengths unchanged).
    pub(crate) fn reserve(&mut self, values: usize) {
        let blocks = values.div_ceil(ACT_BLOCK);
        reserve_exactly(&mut self.qs, values);
        reserve_exactly(&mut self.d, blocks);
        reserve_exactly(&mut self.s, blocks);
    }

    /// Quantizes `x` (a whole number of 32-blocks). Buffers only grow, so a session that reuses
    /// one scratch allocates on its first calls and never again. A long `x` (a prompt's rows) is
    /// cut across the matmul threads, each block one thread's.
    pub(crate) fn quantize(&mut self, x: &[f32]) {
        debug_assert_eq!(x.len() % ACT_BLOCK, 0);
        let blocks = x.len() / ACT_BLOCK;
        fit(&mut self.qs, x.len());
        fit(&mut self.d, blocks);
        fit(&mut self.s, blocks);
        let (qs, d, s) = (
            Shared::new(self.qs.as_mut_ptr()),
            Shared::new(self.d.as_mut_ptr()),
            Shared::new(self.s.as_mut_ptr()),
        );
        let quantize_range = |range: std::ops::Range<usize>| {
            // SAFETY: the ranges of a run are disjoint and inside the buffers sized above.
            let (qs, d, s) = unsafe {
                (
                    std::slice::from_raw_parts_mut(
                        qs.get().add(range.start * ACT_BLOCK),
                        range.len() * ACT_BLOCK,
                    ),
                    std::slice::from_raw_parts_mut(d.get().add(range.start), range.len()),
                    std::slice::from_raw_parts_mut(s.get().add(range.start), range.len()),
                )
            };
            let xs = &x[range.start * ACT_BLOCK..range.end * ACT_BLOCK];
            for (b, xb) in xs.chunks_exact(ACT_BLOCK).enumerate() {
                (d[b], s[b]) = quantize_block(xb, &mut qs[b * ACT_BLOCK..][..ACT_BLOCK]);
            }
        };
        let ran = super::threads::parts(blocks, x.len() * 4, &|part, parts| {
            let per = blocks.div_ceil(parts);
            quantize_range((part * per).min(blocks)..((part + 1) * per).min(blocks));
        });
        if !ran {
            quantize_range(0..blocks);
        }
    }

    /// The blocks of token `t` when every token has `blocks_per_token` blocks.
    #[inline]
    pub(crate) fn token(&self, t: usize, blocks_per_token: usize) -> ActRow<'_> {
        let b0 = t * blocks_per_token;
        ActRow {
            qs: &self.qs[b0 * ACT_BLOCK..(b0 + blocks_per_token) * ACT_BLOCK],
            d: &self.d[b0..b0 + blocks_per_token],
            s: &self.s[b0..b0 + blocks_per_token],
        }
    }
}

/// One block: its 16-bit values into `q`, its scale and `d · Σ q`.
#[inline]
fn quantize_block(xb: &[f32], q: &mut [i16]) -> (f32, f32) {
    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / ACT_MAX;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in q.iter_mut().zip(xb) {
        *q = round_to_i16(v * id);
        sum += i32::from(*q);
    }
    (d, d * sum as f32)
}

/// `x.round() as i16` (ties away from zero, saturating, NaN to 0) without a call to `roundf`:
/// the truncation and its remainder are exact for every |x| below 2^23, and beyond that the
/// value saturates either way.
#[inline]
fn round_to_i16(x: f32) -> i16 {
    let t = x as i32;
    let rest = x - t as f32;
    let r = if rest >= 0.5 {
        t.saturating_add(1)
    } else if rest <= -0.5 {
        t.saturating_sub(1)
    } else {
        t
    };
    r.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

/// One token's quantized activation blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActRow<'a> {
    pub qs: &'a [i16],
    pub d: &'a [f32],
    pub s: &'a [f32],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_equals_round_then_cast() {
        let mut cases = vec![
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999997,
            -0.49999997,
            32766.5,
            32767.0,
            32767.5,
            -32767.5,
            -32768.5,
            40000.0,
            -40000.0,
            1e9,
            -1e9,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            8388607.5,
            8388608.0,
        ];
        let mut seed = 0x9e37_79b9u32;
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            cases.push((seed as i32 as f32) / 65536.0);
            cases.push(f32::from_bits(seed));
        }
        for x in cases {
            assert_eq!(
                round_to_i16(x),
                x.round() as i16,
                "{x} ({:#x})",
                x.to_bits()
            );
        }
    }

    #[test]
    fn activation_blocks_reconstruct_within_half_a_step() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.3)
            .collect();
        let mut acts = BlockActs::default();
        acts.quantize(&x);
        for b in 0..2 {
            let d = acts.d[b];
            let amax = x[b * 32..][..32].iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert_eq!(d, amax / 32767.0);
            let mut sum = 0i32;
            for j in 0..32 {
                let i = b * 32 + j;
                let step_err = (f32::from(acts.qs[i]) * d - x[i]).abs();
                assert!(step_err <= d * 0.5 + amax * 1e-7, "{i}: {step_err}");
                sum += i32::from(acts.qs[i]);
            }
            assert_eq!(acts.s[b], d * sum as f32);
            // The extreme uses the whole range.
            assert!(acts.qs[b * 32..][..32]
                .iter()
                .any(|q| q.unsigned_abs() == 32767));
        }
    }

    #[test]
    fn zero_block_has_zero_scale() {
        let mut acts = BlockActs::default();
        acts.quantize(&[0.0; 32]);
        assert_eq!(acts.d[0], 0.0);
        assert!(acts.qs.iter().all(|&q| q == 0));
    }

    #[test]
    fn nan_and_infinite_blocks_stay_inside_i16() {
        let mut x = [1.0f32; 32];
        x[3] = f32::INFINITY;
        let mut acts = BlockActs::default();
        acts.quantize(&x);
        // d = inf, id = 0: every finite value maps to 0, inf·0 = NaN saturates to 0.
        assert!(acts.qs.iter().all(|&q| q == 0));
        x[3] = f32::NAN;
        acts.quantize(&x);
        assert!(acts.qs.iter().all(|q| q.unsigned_abs() <= 32767));
    }
}
