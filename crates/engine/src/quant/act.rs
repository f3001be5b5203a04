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
    /// one scratch allocates on its first calls and never again.
    pub(crate) fn quantize(&mut self, x: &[f32]) {
        debug_assert_eq!(x.len() % ACT_BLOCK, 0);
        let blocks = x.len() / ACT_BLOCK;
        fit(&mut self.qs, x.len());
        fit(&mut self.d, blocks);
        fit(&mut self.s, blocks);
        for (b, xb) in x.chunks_exact(ACT_BLOCK).enumerate() {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / ACT_MAX;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in self.qs[b * ACT_BLOCK..][..ACT_BLOCK].iter_mut().zip(xb) {
                // |v·id| ≤ 32767 up to rounding; `as` saturates, so neither that rounding nor a
                // NaN block can escape i16.
                *q = (v * id).round() as i16;
                sum += i32::from(*q);
            }
            self.d[b] = d;
            self.s[b] = d * sum as f32;
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
