//! Activation quantization for block-format matmuls: x is cut into 32-element blocks, each
//! stored as 32 signed bytes with an f32 scale and the scaled block sum (llama.cpp's Q8_1 idea,
//! but with f32 scales). Formats with a per-block offset (q4_1's `m`, q4_0's implicit −8)
//! need the sum: Σ (q·d + m)·x = d·Σ q·x + m·Σ x.

/// Elements per activation block; every block format of this module has rows of whole 32-blocks.
pub(crate) const ACT_BLOCK: usize = 32;

/// Quantized activations of `n` tokens, token-major, block-major within a token.
#[derive(Default, Debug)]
pub(crate) struct Q8Acts {
    /// Quantized values, `n * cols`.
    pub qs: Vec<i8>,
    /// The same values widened to i16 (filled only when a kernel asks; SIMD128 has an
    /// i16 dot product but no i8 one, so widening once per call beats widening per row).
    pub qs16: Vec<i16>,
    /// Per-block scale: x ≈ q · d.
    pub d: Vec<f32>,
    /// Per-block `d · Σ q`.
    pub s: Vec<f32>,
}

impl Q8Acts {
    /// Quantizes `x` (a whole number of 32-blocks). Buffers only grow, so a session that reuses
    /// one scratch allocates on its first calls and never again.
    pub(crate) fn quantize(&mut self, x: &[f32], widen_to_i16: bool) {
        debug_assert_eq!(x.len() % ACT_BLOCK, 0);
        let blocks = x.len() / ACT_BLOCK;
        self.qs.resize(x.len(), 0);
        self.d.resize(blocks, 0.0);
        self.s.resize(blocks, 0.0);
        for (b, xb) in x.chunks_exact(ACT_BLOCK).enumerate() {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in self.qs[b * ACT_BLOCK..][..ACT_BLOCK].iter_mut().zip(xb) {
                // |v·id| ≤ 127 up to rounding; `as` saturates, so a NaN block cannot escape i8.
                *q = (v * id).round() as i8;
                sum += i32::from(*q);
            }
            self.d[b] = d;
            self.s[b] = d * sum as f32;
        }
        if widen_to_i16 {
            self.qs16.resize(x.len(), 0);
            for (w, &q) in self.qs16.iter_mut().zip(&self.qs) {
                *w = i16::from(q);
            }
        }
    }

    /// The blocks of token `t` when every token has `blocks_per_token` blocks.
    #[inline]
    pub(crate) fn token(&self, t: usize, blocks_per_token: usize) -> Q8Row<'_> {
        let b0 = t * blocks_per_token;
        Q8Row {
            qs: &self.qs[b0 * ACT_BLOCK..(b0 + blocks_per_token) * ACT_BLOCK],
            d: &self.d[b0..b0 + blocks_per_token],
            s: &self.s[b0..b0 + blocks_per_token],
        }
    }
}

/// One token's quantized activation blocks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Q8Row<'a> {
    pub qs: &'a [i8],
    pub d: &'a [f32],
    pub s: &'a [f32],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_blocks_reconstruct_within_half_a_step() {
        let x: Vec<f32> = (0..64).map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.3).collect();
        let mut acts = Q8Acts::default();
        acts.quantize(&x, true);
        for b in 0..2 {
            let d = acts.d[b];
            let mut sum = 0i32;
            for j in 0..32 {
                let i = b * 32 + j;
                assert!((f32::from(acts.qs[i]) * d - x[i]).abs() <= d * 0.5 + 1e-6);
                assert_eq!(i16::from(acts.qs[i]), acts.qs16[i]);
                sum += i32::from(acts.qs[i]);
            }
            assert_eq!(acts.s[b], d * sum as f32);
        }
    }

    #[test]
    fn zero_block_has_zero_scale() {
        let mut acts = Q8Acts::default();
        acts.quantize(&[0.0; 32], false);
        assert_eq!(acts.d[0], 0.0);
        assert!(acts.qs.iter().all(|&q| q == 0));
    }
}
