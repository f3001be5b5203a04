//! Parsing and validating a knot file from its prefix (header + metadata + codec byte).
//! Tensor bytes are never needed to validate: every check uses the metadata and the file length,
//! so a host can validate after one small range read.

use std::collections::HashMap;
use std::ops::Range;

use crate::header::{
    codec_offset, FixedHeader, ReadOptions, CODEC_RAW, FIXED_HEADER_LEN, TENSOR_ALIGNMENT,
};
use crate::names::{
    layer_of, layer_tensor_name, CANONICAL_LAYER_TENSORS, OUTPUT, OUTPUT_NORM, TOKEN_EMBD,
};
use crate::{DType, KnotError, Metadata, Span, TokenizerData};

/// One tensor with its dtype decoded. `offset` is relative to whatever the producing call says
/// (payload, layer span or resident span).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Outermost dimension first.
    pub shape: Vec<u64>,
    pub offset: u64,
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        // Validation proved the product fits in u64.
        self.shape.iter().product()
    }

    /// The byte range inside the buffer `offset` is relative to; an error when it does not fit
    /// in this platform's `usize` (a file of more than 4 GiB on wasm32).
    pub fn range(&self) -> Result<Range<usize>, KnotError> {
        let overflow = || KnotError::OffsetOverflow(self.name.clone());
        let end = self.offset.checked_add(self.size).ok_or_else(overflow)?;
        let start = usize::try_from(self.offset).map_err(|_| overflow())?;
        let end = usize::try_from(end).map_err(|_| overflow())?;
        Ok(start..end)
    }
}

/// A parsed, validated knot file.
#[derive(Debug, Clone)]
pub struct Knot {
    pub header: FixedHeader,
    pub meta: Metadata,
    pub payload_offset: u64,
    pub file_len: u64,
    dtypes: Vec<DType>,
    index: HashMap<String, usize>,
}

impl Knot {
    /// Parses from the first `header.prefix_len()` bytes (more is fine) of a file of `file_len` bytes.
    pub fn parse_prefix(
        prefix: &[u8],
        file_len: u64,
        opts: &ReadOptions,
    ) -> Result<Knot, KnotError> {
        let header = FixedHeader::parse(prefix, opts)?;
        let payload_offset = header.prefix_len();
        if file_len < payload_offset {
            return Err(KnotError::Truncated {
                what: "header and metadata",
                needed: payload_offset,
                available: file_len,
            });
        }
        if (prefix.len() as u64) < payload_offset {
            return Err(KnotError::Truncated {
                what: "prefix",
                needed: payload_offset,
                available: prefix.len() as u64,
            });
        }
        let meta_end = FIXED_HEADER_LEN + header.meta_len as usize;
        let codec_at = codec_offset(header.meta_len) as usize;
        for (i, &b) in prefix[meta_end..codec_at].iter().enumerate() {
            if b != 0 {
                return Err(KnotError::NonZeroPadding((meta_end + i) as u64));
            }
        }
        if prefix[codec_at] != CODEC_RAW {
            return Err(KnotError::UnsupportedCodec(prefix[codec_at]));
        }
        let meta = parse_metadata(&prefix[FIXED_HEADER_LEN..meta_end])?;
        let dtypes = validate(&meta, payload_offset, file_len)?;
        let index = meta
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Knot {
            header,
            meta,
            payload_offset,
            file_len,
            dtypes,
            index,
        })
    }

    /// Parses a whole file held in memory.
    pub fn from_bytes(file: &[u8]) -> Result<Knot, KnotError> {
        Knot::parse_prefix(file, file.len() as u64, &ReadOptions::default())
    }

    /// Number of bytes a reader must fetch before calling [`Knot::parse_prefix`], given the
    /// first [`FIXED_HEADER_LEN`] bytes.
    pub fn prefix_len(fixed_header: &[u8], opts: &ReadOptions) -> Result<u64, KnotError> {
        Ok(FixedHeader::parse(fixed_header, opts)?.prefix_len())
    }

    fn info(&self, i: usize, base: u64) -> TensorInfo {
        let t = &self.meta.tensors[i];
        TensorInfo {
            name: t.name.clone(),
            dtype: self.dtypes[i],
            shape: t.shape.clone(),
            offset: t.offset - base,
            size: t.size,
        }
    }

    /// A tensor by name, offset relative to the payload start.
    pub fn tensor(&self, name: &str) -> Option<TensorInfo> {
        self.index.get(name).map(|&i| self.info(i, 0))
    }

    /// Tensors of `blk.{layer}.*` in file order, offsets relative to the layer span start.
    pub fn layer_tensors(&self, layer: usize) -> Option<Vec<TensorInfo>> {
        let span = *self.meta.layers.get(layer)?;
        Some(
            (0..self.meta.tensors.len())
                .filter(|&i| layer_of(&self.meta.tensors[i].name) == Some(layer))
                .map(|i| self.info(i, span.offset))
                .collect(),
        )
    }

    /// Non-layer tensors in file order, offsets relative to the resident span start.
    pub fn resident_tensors(&self) -> Vec<TensorInfo> {
        let base = self.meta.resident.offset;
        (0..self.meta.tensors.len())
            .filter(|&i| layer_of(&self.meta.tensors[i].name).is_none())
            .map(|i| self.info(i, base))
            .collect()
    }

    /// The absolute file byte range of a payload-relative span.
    pub fn absolute(&self, span: Span) -> Result<Range<u64>, KnotError> {
        let start = self
            .payload_offset
            .checked_add(span.offset)
            .ok_or_else(|| KnotError::OffsetOverflow("span".into()))?;
        let end = start
            .checked_add(span.size)
            .ok_or_else(|| KnotError::OffsetOverflow("span".into()))?;
        if end > self.file_len {
            return Err(KnotError::OutOfBounds {
                what: "span".into(),
                end,
                file_len: self.file_len,
            });
        }
        Ok(start..end)
    }

    pub fn n_layers(&self) -> usize {
        self.meta.layers.len()
    }

    /// Absolute file range of layer `layer`.
    pub fn layer_range(&self, layer: usize) -> Option<Range<u64>> {
        self.meta
            .layers
            .get(layer)
            .and_then(|&s| self.absolute(s).ok())
    }

    /// Absolute file range of the resident tensors.
    pub fn resident_range(&self) -> Range<u64> {
        // Validation proved the resident span lies inside the file.
        self.payload_offset + self.meta.resident.offset
            ..self.payload_offset + self.meta.resident.offset + self.meta.resident.size
    }

    /// Absolute file range of the tokenizer blob.
    pub fn tokenizer_range(&self) -> Range<u64> {
        let b = self.meta.tokenizer.blob;
        // Validation proved the blob lies inside the file.
        self.payload_offset + b.offset..self.payload_offset + b.offset + b.size
    }

    /// Decodes the tokenizer blob (the bytes of [`Knot::tokenizer_range`]).
    pub fn parse_tokenizer(blob: &[u8]) -> Result<TokenizerData, KnotError> {
        serde_json::from_slice(blob).map_err(|e| KnotError::TokenizerBlob(e.to_string()))
    }

    /// For a file held in memory: the bytes of tensor `name`.
    pub fn tensor_bytes<'a>(&self, file: &'a [u8], name: &str) -> Option<&'a [u8]> {
        let t = self.tensor(name)?;
        let start = usize::try_from(self.payload_offset + t.offset).ok()?;
        file.get(start..start.checked_add(usize::try_from(t.size).ok()?)?)
    }
}

fn parse_metadata(json: &[u8]) -> Result<Metadata, KnotError> {
    let text = std::str::from_utf8(json).map_err(|_| KnotError::MetadataNotUtf8)?;
    match text.trim_start().as_bytes().first() {
        Some(b'{') => {}
        Some(_) => {
            // Distinguish "valid JSON, wrong kind" from garbage.
            return Err(match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                Ok(_) => KnotError::MetadataNotObject,
                Err(e) => KnotError::MetadataInvalidJson(e.to_string()),
            });
        }
        None => return Err(KnotError::MetadataInvalidJson("empty".into())),
    }
    serde_json::from_str(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => KnotError::MetadataSchema(e.to_string()),
        _ => KnotError::MetadataInvalidJson(e.to_string()),
    })
}

/// Checks every structural rule of the format; returns the decoded dtypes in table order.
pub(crate) fn validate(
    meta: &Metadata,
    payload_offset: u64,
    file_len: u64,
) -> Result<Vec<DType>, KnotError> {
    let payload_len = file_len
        .checked_sub(payload_offset)
        .ok_or(KnotError::Truncated {
            what: "header and metadata",
            needed: payload_offset,
            available: file_len,
        })?;
    let n_layers = meta.config.n_layers;
    if meta.layers.len() != n_layers {
        return Err(KnotError::LayerCount {
            spans: meta.layers.len(),
            n_layers,
        });
    }

    let blob = meta.tokenizer.blob;
    if blob.end().is_none_or(|end| end > payload_len) {
        return Err(KnotError::TokenizerOutOfRange {
            offset: blob.offset,
            size: blob.size,
            payload_len,
        });
    }
    check_span("resident span", meta.resident, payload_offset, file_len)?;
    for (i, span) in meta.layers.iter().enumerate() {
        check_span(&format!("layer {i} span"), *span, payload_offset, file_len)?;
    }

    let mut dtypes = Vec::with_capacity(meta.tensors.len());
    let mut seen: HashMap<&str, ()> = HashMap::with_capacity(meta.tensors.len());
    for t in &meta.tensors {
        if seen.insert(&t.name, ()).is_some() {
            return Err(KnotError::DuplicateTensor(t.name.clone()));
        }
        let dtype = DType::from_name(&t.dtype).ok_or_else(|| KnotError::UnknownDType {
            tensor: t.name.clone(),
            dtype: t.dtype.clone(),
        })?;
        let expected = expected_size(&t.name, dtype, &t.shape)?;
        if expected != t.size {
            return Err(KnotError::SizeMismatch {
                tensor: t.name.clone(),
                expected,
                actual: t.size,
            });
        }
        let absolute = payload_offset
            .checked_add(t.offset)
            .ok_or_else(|| KnotError::OffsetOverflow(t.name.clone()))?;
        let end = absolute
            .checked_add(t.size)
            .ok_or_else(|| KnotError::OffsetOverflow(t.name.clone()))?;
        if end > file_len {
            return Err(KnotError::OutOfBounds {
                what: format!("tensor {}", t.name),
                end,
                file_len,
            });
        }
        if absolute % TENSOR_ALIGNMENT != 0 {
            return Err(KnotError::Misaligned {
                tensor: t.name.clone(),
                absolute,
                alignment: TENSOR_ALIGNMENT,
            });
        }
        let tensor_span = Span {
            offset: t.offset,
            size: t.size,
        };
        match layer_of(&t.name) {
            Some(layer) => {
                let span = meta.layers.get(layer).ok_or(KnotError::LayerOutOfRange {
                    tensor: t.name.clone(),
                    layer,
                    n_layers,
                })?;
                if !contains(*span, tensor_span) {
                    return Err(KnotError::OutsideSpan {
                        tensor: t.name.clone(),
                        span: format!("layer {layer}"),
                    });
                }
            }
            None => {
                if !contains(meta.resident, tensor_span) {
                    return Err(KnotError::OutsideSpan {
                        tensor: t.name.clone(),
                        span: "resident tensors".into(),
                    });
                }
            }
        }
        dtypes.push(dtype);
    }

    // Overlap: sort extents (tensors plus the tokenizer blob) by start and compare neighbours.
    let mut extents: Vec<(u64, u64, &str)> = meta
        .tensors
        .iter()
        .map(|t| (t.offset, t.offset + t.size, t.name.as_str()))
        .collect();
    extents.push((blob.offset, blob.offset + blob.size, "tokenizer blob"));
    extents.sort_unstable();
    for w in extents.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(KnotError::Overlap {
                first: w[0].2.to_string(),
                second: w[1].2.to_string(),
            });
        }
    }

    for required in [TOKEN_EMBD, OUTPUT_NORM] {
        if !seen.contains_key(required) {
            return Err(KnotError::MissingTensor(required.into()));
        }
    }
    if !meta.config.tie_word_embeddings && !seen.contains_key(OUTPUT) {
        return Err(KnotError::MissingTensor(OUTPUT.into()));
    }
    for layer in 0..n_layers {
        for c in CANONICAL_LAYER_TENSORS {
            let name = layer_tensor_name(layer, c);
            if !seen.contains_key(name.as_str()) {
                return Err(KnotError::MissingTensor(name));
            }
        }
    }

    // Spans are tight, so a host that fetches a span fetches its tensors and nothing else.
    let mut members: Vec<Vec<(u64, u64, &str)>> = vec![Vec::new(); n_layers + 1];
    for t in &meta.tensors {
        let slot = layer_of(&t.name).map_or(n_layers, |l| l);
        members[slot].push((t.offset, t.offset + t.size, t.name.as_str()));
    }
    for (slot, tensors) in members.iter_mut().enumerate() {
        let (name, span) = match meta.layers.get(slot) {
            Some(&span) => (format!("layer {slot}"), span),
            None => ("resident tensors".to_string(), meta.resident),
        };
        check_tight(&name, span, tensors)?;
    }
    Ok(dtypes)
}

/// A span must start at its first tensor, end at its last, and hold nothing between them but
/// the alignment padding a writer inserts (less than [`TENSOR_ALIGNMENT`] bytes per gap).
/// `tensors` are (start, end, name), all inside the span (checked before).
fn check_tight(
    span_name: &str,
    span: Span,
    tensors: &mut [(u64, u64, &str)],
) -> Result<(), KnotError> {
    tensors.sort_unstable();
    let loose = |reason: String| KnotError::LooseSpan {
        span: span_name.to_string(),
        reason,
    };
    let (Some(first), Some(last)) = (tensors.first(), tensors.last()) else {
        return Err(loose("it holds no tensors".into()));
    };
    if span.offset != first.0 {
        return Err(loose(format!(
            "it starts {} bytes before its first tensor {}",
            first.0 - span.offset,
            first.2
        )));
    }
    // Both were checked not to overflow.
    let span_end = span.offset + span.size;
    if span_end != last.1 {
        return Err(loose(format!(
            "it ends {} bytes after its last tensor {}",
            span_end - last.1,
            last.2
        )));
    }
    for w in tensors.windows(2) {
        // Tensors do not overlap (checked before), so the gap is not negative.
        let gap = w[1].0 - w[0].1;
        if gap >= TENSOR_ALIGNMENT {
            return Err(loose(format!(
                "{gap} bytes between {} and {}, more than alignment padding",
                w[0].2, w[1].2
            )));
        }
    }
    Ok(())
}

/// Bytes implied by dtype and shape, with every multiplication checked.
pub(crate) fn expected_size(name: &str, dtype: DType, shape: &[u64]) -> Result<u64, KnotError> {
    let invalid = |reason| KnotError::InvalidShape {
        tensor: name.to_string(),
        shape: shape.to_vec(),
        reason,
    };
    let (&row, _) = shape.split_last().ok_or_else(|| invalid("no dimensions"))?;
    if shape.contains(&0) {
        return Err(invalid("a dimension is zero"));
    }
    // Quantized blocks never straddle rows.
    if row % dtype.block_len() as u64 != 0 {
        return Err(invalid("row length is not a whole number of blocks"));
    }
    let n = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| invalid("element count overflows"))?;
    dtype
        .bytes_for(n)
        .ok_or_else(|| invalid("byte size overflows"))
}

fn check_span(what: &str, span: Span, payload_offset: u64, file_len: u64) -> Result<(), KnotError> {
    let end = span
        .end()
        .and_then(|e| e.checked_add(payload_offset))
        .ok_or_else(|| KnotError::OffsetOverflow(what.to_string()))?;
    if end > file_len {
        return Err(KnotError::OutOfBounds {
            what: what.to_string(),
            end,
            file_len,
        });
    }
    Ok(())
}

fn contains(outer: Span, inner: Span) -> bool {
    // Both spans were already checked not to overflow.
    inner.offset >= outer.offset && inner.offset + inner.size <= outer.offset + outer.size
}
