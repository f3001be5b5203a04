//! A head station: the final norm and the LM head over one contiguous slice of the vocabulary.

use std::ops::Range;

use engine::quant::MatmulScratch;
use engine::{HeadBuffers, LmHead};

use super::layers::StationError;
use super::wire;

/// The buffers of a head station; the weights (the output norm and its slice of the output
/// matrix) are passed in, borrowed from wherever the station keeps them.
pub struct HeadStation {
    slice: Range<usize>,
    dim: usize,
    eps: f32,
    max_batch: usize,
    norm_w: Vec<f32>,
    xb: Vec<f32>,
    logits: Vec<f32>,
    scratch: MatmulScratch,
}

impl HeadStation {
    pub fn new(slice: Range<usize>, dim: usize, eps: f32, max_batch: usize) -> Self {
        HeadStation {
            slice,
            dim,
            eps,
            max_batch: max_batch.max(1),
            norm_w: Vec::new(),
            xb: Vec::new(),
            logits: Vec::new(),
            scratch: MatmulScratch::default(),
        }
    }

    pub fn slice(&self) -> Range<usize> {
        self.slice.clone()
    }

    /// The logits of this slice for the last position of the batch in `msg` (what decoding
    /// samples from); `head.output` must hold exactly the slice's rows.
    pub fn logits(&mut self, msg: &[u8], head: &LmHead) -> Result<&[f32], StationError> {
        let h = wire::decode(msg, self.max_batch.saturating_mul(self.dim))?;
        if h.dim as usize != self.dim || head.output.cols() != self.dim {
            return Err(StationError::Width {
                got: h.dim,
                want: self.dim,
            });
        }
        if head.output.rows() != self.slice.len() {
            return Err(StationError::Weights {
                got: head.output.rows(),
                start: self.slice.start,
                end: self.slice.end,
            });
        }
        let last = &h.values[h.values.len() - self.dim..];
        head.logits(
            self.eps,
            last,
            HeadBuffers {
                norm_w: &mut self.norm_w,
                xb: &mut self.xb,
                logits: &mut self.logits,
                scratch: &mut self.scratch,
            },
        )?;
        Ok(&self.logits)
    }
}
