//! What a station reads of the knot file, and nothing more: the index (header and metadata),
//! then its layer range in one read, or its slice of the LM head (with the same slice of the
//! embedding table). A 262144-row embedding (Gemma-3) is larger than an isolate; no station ever
//! holds all of it (the coordinator holds it whole only when it fits its budget, see
//! [`super::embedding`]).

use std::ops::Range;

use engine::model::ConfigExt;
use engine::quant::QMatrix;
use engine::{EngineError, LayerLayout, LayerWeights, ResidentLayout, TensorSlot};
use knot::{Knot, ReadOptions};

use super::head::EmbeddingSlice;

use crate::error::HostError;
use crate::index::read_index;
use crate::reader::Reader;

/// The knot file's index, read and checked: what every station reads first.
pub async fn open_index(reader: &Reader, opts: &ReadOptions) -> Result<Knot, HostError> {
    let knot = read_index(reader, opts).await?;
    knot.meta.config.validate()?;
    Ok(knot)
}

/// The resident tensors' places, absolute in the file.
pub(crate) fn resident(knot: &Knot) -> Result<(u64, ResidentLayout), HostError> {
    let layout = ResidentLayout::locate(&knot.meta.config, &knot.resident_tensors())?;
    Ok((knot.resident_range().start, layout))
}

pub(crate) fn absolute(base: u64, slot: &TensorSlot) -> Range<u64> {
    base + slot.bytes.start as u64..base + slot.bytes.end as u64
}

/// A layer station's weights: layers `layers`, fetched in one read of the file from the first
/// one's start to the last one's end (layers are stored in order, so nothing else lies between).
pub struct LayerShard {
    layers: Range<usize>,
    span: Vec<u8>,
    /// Each layer's place in `span`, and its tensors' places in that.
    parts: Vec<(Range<usize>, LayerLayout)>,
}

impl LayerShard {
    pub async fn read(
        reader: &Reader,
        knot: &Knot,
        layers: Range<usize>,
        piece: Option<u64>,
    ) -> Result<Self, HostError> {
        let cfg = &knot.meta.config;
        if layers.is_empty() || layers.end > knot.n_layers() || knot.n_layers() != cfg.n_layers {
            return Err(HostError::NoSuchLayer(layers.end.saturating_sub(1)));
        }
        let range = |l: usize| knot.layer_range(l).ok_or(HostError::NoSuchLayer(l));
        let (first, last) = (range(layers.start)?, range(layers.end - 1)?);
        let (start, end) = (first.start, last.end);
        if end < start || end - start > isize::MAX as u64 {
            return Err(HostError::TooLarge {
                what: format!("layers {}..{}", layers.start, layers.end),
                bytes: end.saturating_sub(start),
                max: isize::MAX as u64,
            });
        }
        let mut parts = Vec::with_capacity(layers.len());
        for l in layers.clone() {
            let r = range(l)?;
            if r.start < start || r.end > end {
                return Err(HostError::TooLarge {
                    what: format!("layer {l} outside its station's span"),
                    bytes: r.end - r.start,
                    max: end - start,
                });
            }
            let tensors = knot.layer_tensors(l).ok_or(HostError::NoSuchLayer(l))?;
            let layout = LayerLayout::locate(cfg, l, &tensors)?;
            parts.push(((r.start - start) as usize..(r.end - start) as usize, layout));
        }
        let span = reader.read_span(start, end, piece).await?;
        let shard = LayerShard {
            layers,
            span,
            parts,
        };
        // Every view is checked once here, so a station never fails on a bad tensor mid-request.
        shard.weights()?;
        Ok(shard)
    }

    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// Bytes of weights held.
    pub fn bytes(&self) -> usize {
        self.span.len()
    }

    /// Views of the layers, in order (slices of the one span).
    pub fn weights(&self) -> Result<Vec<LayerWeights<'_>>, EngineError> {
        self.parts
            .iter()
            .map(|(r, layout)| layout.view(&self.span[r.clone()]))
            .collect()
    }
}

/// A head station's weights: the output norm and rows `slice` of the LM head, and the same rows
/// of the embedding table — when embeddings are tied these are one and the same (read once);
/// otherwise the embedding's rows are a third range of the file.
pub struct HeadShard {
    slice: Range<usize>,
    norm: Vec<u8>,
    norm_slot: TensorSlot,
    rows: Vec<u8>,
    rows_slot: TensorSlot,
    /// The embedding's rows of the slice when they are not the LM head's (untied embeddings).
    embedding: Option<Vec<u8>>,
    embedding_row_bytes: usize,
}

/// Bytes per row of a matrix tensor.
fn row_bytes(slot: &TensorSlot) -> usize {
    (slot.bytes.end - slot.bytes.start) / slot.rows.max(1)
}

impl HeadShard {
    pub async fn read(
        reader: &Reader,
        knot: &Knot,
        slice: Range<usize>,
        piece: Option<u64>,
    ) -> Result<Self, HostError> {
        let (base, layout) = resident(knot)?;
        let out = &layout.output;
        if slice.is_empty() || slice.end > out.rows || layout.token_embd.rows != out.rows {
            return Err(HostError::InvalidArgument(format!(
                "vocabulary slice {}..{} is not a non-empty part of 0..{}",
                slice.start, slice.end, out.rows
            )));
        }
        let rows_of = |slot: &TensorSlot| {
            let (at, n) = (absolute(base, slot).start, row_bytes(slot) as u64);
            at + slice.start as u64 * n..at + slice.end as u64 * n
        };
        // The norm's one small read is under way while the long spans come in pieces.
        let norm_range = absolute(base, &layout.output_norm);
        let norm = reader.read(norm_range.start, norm_range.end);
        let head = rows_of(out);
        let rows = reader.read_span(head.start, head.end, piece).await?;
        let tied = absolute(base, &layout.token_embd) == absolute(base, out);
        let embedding = match tied {
            true => None,
            false => {
                let e = rows_of(&layout.token_embd);
                Some(reader.read_span(e.start, e.end, piece).await?)
            }
        };
        let norm = norm.await?;
        let norm_slot = TensorSlot {
            bytes: 0..norm.len(),
            ..layout.output_norm.clone()
        };
        let rows_slot = TensorSlot {
            rows: slice.len(),
            bytes: 0..rows.len(),
            ..out.clone()
        };
        let shard = HeadShard {
            slice,
            norm,
            norm_slot,
            rows,
            rows_slot,
            embedding,
            embedding_row_bytes: row_bytes(&layout.token_embd),
        };
        shard.matrices()?;
        Ok(shard)
    }

    pub fn slice(&self) -> Range<usize> {
        self.slice.clone()
    }

    /// Bytes of weights held.
    pub fn bytes(&self) -> usize {
        self.norm.len() + self.rows.len() + self.embedding.as_ref().map_or(0, Vec::len)
    }

    /// The output norm and this slice's rows of the LM head.
    pub fn matrices(&self) -> Result<(QMatrix<'_>, QMatrix<'_>), EngineError> {
        Ok((
            self.norm_slot.view(&self.norm)?,
            self.rows_slot.view(&self.rows)?,
        ))
    }

    /// This slice's rows of the embedding table, as the file stores them.
    pub fn embedding(&self) -> EmbeddingSlice<'_> {
        EmbeddingSlice {
            first: self.slice.start,
            row_bytes: self.embedding_row_bytes,
            bytes: self.embedding.as_deref().unwrap_or(&self.rows),
        }
    }
}
