//! Small numeric kernels of the forward pass that are not matrix products.

use knot::RopeStyle;

/// Dot product of two f32 slices with several accumulators, so the compiler can vectorise it
/// without reassociating (which it may not do for floats on its own).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for i in chunks * 8..a.len() {
        sum += a[i] * b[i];
    }
    sum
}

/// `y += a * x`
#[inline]
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// RMSNorm of each `weight.len()`-wide row of `x` into `out`: `out = x / rms(x) * weight`.
pub fn rmsnorm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let dim = weight.len();
    for (o, xr) in out.chunks_exact_mut(dim).zip(x.chunks_exact(dim)) {
        let ss = xr.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let scale = 1.0 / (ss + eps).sqrt();
        for ((oi, xi), wi) in o.iter_mut().zip(xr).zip(weight) {
            *oi = xi * scale * wi;
        }
    }
}

/// RMSNorm of every `weight.len()`-wide row of `x`, in place (per-head q/k norms, where a row
/// is one head, and gemma's post-attention/post-FFN norms).
pub fn rmsnorm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    for r in x.chunks_exact_mut(weight.len()) {
        let ss = r.iter().map(|v| v * v).sum::<f32>() / r.len() as f32;
        let scale = 1.0 / (ss + eps).sqrt();
        for (v, w) in r.iter_mut().zip(weight) {
            *v = *v * scale * w;
        }
    }
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// SiLU(gate) * up, in place in `gate`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// A gated activation (`swiglu`, `gelu_tanh_gated`) over a batch's rows, cut across the
/// matmul threads when long (a prompt's): each element is one thread's, so the same bits.
pub fn gated(f: fn(&mut [f32], &[f32]), gate: &mut [f32], up: &[f32]) {
    let len = gate.len().min(up.len());
    let at = crate::quant::threads::Shared::new(gate.as_mut_ptr());
    let ran = crate::quant::threads::parts(len, len * 16, &|part, parts| {
        let per = len.div_ceil(parts);
        let r = (part * per).min(len)..((part + 1) * per).min(len);
        // SAFETY: the parts' ranges are disjoint and inside `gate`, which outlives the run.
        let mine = unsafe { std::slice::from_raw_parts_mut(at.get().add(r.start), r.len()) };
        f(mine, &up[r]);
    });
    if !ran {
        f(gate, up);
    }
}

/// GELU(gate) * up, in place in `gate`, with GELU's tanh approximation (PyTorch's
/// `gelu(approximate="tanh")`, Gemma's `gelu_pytorch_tanh`).
pub fn gelu_tanh_gated(gate: &mut [f32], up: &[f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        let inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
        *g = 0.5 * x * (1.0 + inner.tanh()) * u;
    }
}

/// Rotary position embedding tables: one (cos, sin) pair per rotated pair of dims.
pub struct Rope {
    style: RopeStyle,
    rope_dim: usize,
    inv_freq: Vec<f32>,
    /// (cos, sin) per rotated pair for `table_pos`: computed once per position instead of once
    /// per head and layer.
    table: Vec<(f32, f32)>,
    table_pos: Option<usize>,
}

impl Rope {
    pub fn new(style: RopeStyle, rope_dim: usize, theta: f32) -> Self {
        // Same formula and precision as HF: inv_freq computed once in f32.
        let inv_freq: Vec<f32> = (0..rope_dim / 2)
            .map(|i| 1.0 / theta.powf((2 * i) as f32 / rope_dim as f32))
            .collect();
        Rope {
            style,
            rope_dim,
            table: vec![(1.0, 0.0); inv_freq.len()],
            inv_freq,
            table_pos: None,
        }
    }

    /// Rotates every head of `x` (`n_heads * head_dim` values) for position `pos`.
    pub fn apply(&mut self, x: &mut [f32], head_dim: usize, pos: usize) {
        if self.table_pos != Some(pos) {
            for (t, &f) in self.table.iter_mut().zip(&self.inv_freq) {
                let (sin, cos) = (pos as f32 * f).sin_cos();
                *t = (cos, sin);
            }
            self.table_pos = Some(pos);
        }
        let half = self.rope_dim / 2;
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(cos, sin)) in self.table.iter().enumerate() {
                let (a, b) = match self.style {
                    RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_for_odd_lengths() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32).sin()).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-4);
    }

    #[test]
    fn rmsnorm_unit_weight_gives_unit_rms() {
        let x = [3.0f32, -4.0, 0.0, 5.0];
        let mut out = [0.0; 4];
        rmsnorm(&mut out, &x, &[1.0; 4], 0.0);
        let rms = (out.iter().map(|v| v * v).sum::<f32>() / 4.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-6);
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut x = [1.0f32, 2.0, 3.0, f32::NEG_INFINITY];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[0] < x[1] && x[1] < x[2] && x[3] == 0.0);
    }

    #[test]
    fn rope_styles_agree_up_to_a_permutation() {
        // Interleaved pairs (2i, 2i+1) on a permuted vector equal rotate-half pairs (i, i+d/2).
        let d = 8;
        let x: Vec<f32> = (0..d).map(|i| i as f32 + 1.0).collect();
        let perm: Vec<usize> = (0..d / 2).flat_map(|i| [i, i + d / 2]).collect();
        let mut neox = x.clone();
        Rope::new(RopeStyle::Neox, d, 10000.0).apply(&mut neox, d, 7);
        let mut inter: Vec<f32> = perm.iter().map(|&p| x[p]).collect();
        Rope::new(RopeStyle::Interleaved, d, 10000.0).apply(&mut inter, d, 7);
        for (j, &p) in perm.iter().enumerate() {
            assert!((inter[j] - neox[p]).abs() < 1e-5);
        }
    }

    #[test]
    fn gelu_tanh_matches_known_values() {
        // PyTorch: gelu(x, approximate="tanh") at -1, 0, 0.5, 2.
        let mut g = [-1.0f32, 0.0, 0.5, 2.0];
        gelu_tanh_gated(&mut g, &[1.0, 1.0, 2.0, 1.0]);
        let want = [-0.158_808, 0.0, 2.0 * 0.345_714, 1.954_598];
        for (a, b) in g.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn rope_at_position_zero_is_identity() {
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        Rope::new(RopeStyle::Neox, 4, 10000.0).apply(&mut x, 4, 0);
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
    }
}
