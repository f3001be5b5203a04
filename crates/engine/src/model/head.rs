//! The two ends of a forward pass that stations share with a session: [`embed`] (one row of
//! the embedding table, before layer 0) and [`LmHead`] (the final norm and the LM head over
//! whichever rows of the vocabulary its `output` holds).

use super::error::EngineError;
use crate::buffer::{addressable, fit};
use crate::ops::rmsnorm;
use crate::quant::{matmul, MatmulScratch, QMatrix};
use knot::ModelConfig;

/// Row `id` of the embedding table, scaled as the architecture wants: one position's residual
/// stream before layer 0.
pub fn embed(cfg: &ModelConfig, table: &QMatrix, id: usize, out: &mut [f32]) {
    table.dequantize_row(id, out);
    if cfg.scale_embeddings {
        // HF computes Gemma's scale as a Python float cast to the weights' dtype.
        let scale = (cfg.dim as f64).sqrt() as f32;
        out[..cfg.dim].iter_mut().for_each(|v| *v *= scale);
    }
}

/// The final norm and the LM head, over all of the vocabulary or (a head station's shard) the
/// contiguous rows `output` holds.
pub struct LmHead<'w, 'a> {
    pub output_norm: &'w QMatrix<'a>,
    pub output: &'w QMatrix<'a>,
}

/// The buffers [`LmHead::logits`] works in (a session's own, or a head station's).
pub struct HeadBuffers<'b> {
    pub norm_w: &'b mut Vec<f32>,
    pub xb: &'b mut Vec<f32>,
    pub logits: &'b mut Vec<f32>,
    pub scratch: &'b mut MatmulScratch,
}

impl LmHead<'_, '_> {
    /// Logits (`[m, output rows]`) of the `m` positions in `hidden` (`[m, dim]`) into
    /// `bufs.logits`. Rows of a matmul do not depend on each other, so a shard's logits are
    /// bit-identical to the same rows of the whole head's.
    pub fn logits(
        &self,
        eps: f32,
        hidden: &[f32],
        bufs: HeadBuffers<'_>,
    ) -> Result<(), EngineError> {
        let dim = self.output.cols();
        if hidden.is_empty() {
            return Err(EngineError::EmptyBatch);
        }
        if !hidden.len().is_multiple_of(dim) || self.output_norm.cols() != dim {
            return Err(EngineError::HiddenShape {
                got: hidden.len(),
                dim,
            });
        }
        let (m, rows) = (hidden.len() / dim, self.output.rows());
        addressable("the logits", &[m, rows, std::mem::size_of::<f32>()])?;
        load_vector(self.output_norm, bufs.norm_w);
        fit(bufs.xb, bufs.xb.len().max(m * dim));
        rmsnorm(&mut bufs.xb[..m * dim], hidden, bufs.norm_w, eps);
        fit(bufs.logits, m * rows);
        matmul(
            self.output,
            &bufs.xb[..m * dim],
            m,
            bufs.logits,
            bufs.scratch,
        );
        Ok(())
    }
}

/// Dequantizes a 1-row tensor (a norm weight) into `out`.
pub(super) fn load_vector(w: &QMatrix, out: &mut Vec<f32>) {
    out.resize(w.cols(), 0.0);
    w.dequantize_row(0, out);
}
