//! Building knot files: plan the layout from tensor sizes alone, then stream the bytes.
//!
//! ```text
//! KnotBuilder --plan()--> KnotPlan --writer(out)--> KnotWriter --write_tensor()*--> finish()
//! ```
//! The plan fixes every offset before any tensor byte exists, so a converter can copy one tensor
//! at a time to any `std::io::Write` without holding the model in memory.

use std::io::Write;

use thiserror::Error;

use crate::header::{
    payload_offset, FixedHeader, CODEC_RAW, DEFAULT_MAX_META_LEN, FIXED_HEADER_LEN,
    TENSOR_ALIGNMENT, VERSION,
};
use crate::names::{layer_of, layer_tensor_name, order_key, CANONICAL_LAYER_TENSORS};
use crate::reader::{expected_size, validate};
use crate::{
    DType, KnotError, Metadata, ModelConfig, Span, TensorEntry, TokenizerData, TokenizerEntry,
};

/// A tensor to be stored: everything but its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DType,
    /// Outermost dimension first.
    pub shape: Vec<u64>,
}

/// Collects what goes into a knot file. Tensor order does not matter: the plan sorts them.
#[derive(Debug, Clone)]
pub struct KnotBuilder {
    pub name: String,
    pub architecture: String,
    pub config: ModelConfig,
    pub tokenizer: TokenizerData,
    pub chat_template: Option<String>,
    pub tensors: Vec<TensorSpec>,
}

impl KnotBuilder {
    pub fn new(
        name: impl Into<String>,
        architecture: impl Into<String>,
        config: ModelConfig,
        tokenizer: TokenizerData,
    ) -> Self {
        KnotBuilder {
            name: name.into(),
            architecture: architecture.into(),
            config,
            tokenizer,
            chat_template: None,
            tensors: Vec::new(),
        }
    }

    pub fn add_tensor(&mut self, name: impl Into<String>, dtype: DType, shape: Vec<u64>) {
        self.tensors.push(TensorSpec {
            name: name.into(),
            dtype,
            shape,
        });
    }

    /// Lays the file out and validates the result exactly as a reader would.
    ///
    /// Order: tokenizer blob, resident tensors (token_embd, output_norm, output, then others by
    /// name), then layer 0, 1, … (canonical tensors in fixed order, then extras by name).
    /// The metadata JSON is padded with trailing spaces so the codec byte sits on a 64-byte
    /// boundary; tensor offsets then never depend on the metadata's length.
    pub fn plan(self) -> Result<KnotPlan, KnotError> {
        let n_layers = self.config.n_layers;
        // Every layer holds tensors, so a count above the tensors' is a missing layer, named
        // before anything is allocated per layer.
        if n_layers > self.tensors.len() {
            let present: std::collections::HashSet<usize> = self
                .tensors
                .iter()
                .filter_map(|t| layer_of(&t.name))
                .collect();
            // Among the first len + 1 layers, one has no tensor.
            let missing = (0..=self.tensors.len())
                .find(|l| !present.contains(l))
                .unwrap_or(0);
            return Err(KnotError::MissingTensor(layer_tensor_name(
                missing,
                CANONICAL_LAYER_TENSORS[0],
            )));
        }
        let mut resident: Vec<TensorSpec> = Vec::new();
        let mut layers: Vec<Vec<TensorSpec>> = vec![Vec::new(); n_layers];
        for t in self.tensors {
            match layer_of(&t.name) {
                Some(layer) if layer < n_layers => layers[layer].push(t),
                Some(layer) => {
                    return Err(KnotError::LayerOutOfRange {
                        tensor: t.name,
                        layer,
                        n_layers,
                    })
                }
                None => resident.push(t),
            }
        }
        resident.sort_by(|a, b| order_key(&a.name).cmp(&order_key(&b.name)));
        for layer in &mut layers {
            layer.sort_by(|a, b| order_key(&a.name).cmp(&order_key(&b.name)));
        }

        let tokenizer_blob =
            serde_json::to_vec(&self.tokenizer).map_err(|e| KnotError::Serialize(e.to_string()))?;
        // The payload starts one byte past a 64-byte boundary (see the JSON padding below).
        let payload_mod = 1u64;
        let mut pos = tokenizer_blob.len() as u64;
        let mut place = |spec: &TensorSpec| -> Result<TensorEntry, KnotError> {
            let size = expected_size(&spec.name, spec.dtype, &spec.shape)?;
            let offset = align_up(pos + payload_mod, TENSOR_ALIGNMENT)
                .ok_or_else(|| KnotError::OffsetOverflow(spec.name.clone()))?
                - payload_mod;
            pos = offset
                .checked_add(size)
                .ok_or_else(|| KnotError::OffsetOverflow(spec.name.clone()))?;
            Ok(TensorEntry {
                name: spec.name.clone(),
                dtype: spec.dtype.name().to_string(),
                shape: spec.shape.clone(),
                offset,
                size,
            })
        };

        let mut tensors = Vec::new();
        let resident_entries = resident
            .iter()
            .map(&mut place)
            .collect::<Result<Vec<_>, _>>()?;
        let resident_span = covering(&resident_entries);
        tensors.extend(resident_entries);
        let mut layer_spans = Vec::with_capacity(n_layers);
        for layer in &layers {
            let entries = layer
                .iter()
                .map(&mut place)
                .collect::<Result<Vec<_>, _>>()?;
            layer_spans.push(covering(&entries));
            tensors.extend(entries);
        }
        let payload_len = pos;

        let meta = Metadata {
            name: self.name,
            architecture: self.architecture,
            config: self.config,
            tensors,
            resident: resident_span,
            layers: layer_spans,
            tokenizer: TokenizerEntry {
                model: self.tokenizer.model.clone(),
                pre: self.tokenizer.pre.clone(),
                blob: Span {
                    offset: 0,
                    size: tokenizer_blob.len() as u64,
                },
            },
            chat_template: self.chat_template,
        };
        let mut json =
            serde_json::to_vec(&meta).map_err(|e| KnotError::Serialize(e.to_string()))?;
        let codec_at = align_up((FIXED_HEADER_LEN + json.len()) as u64, TENSOR_ALIGNMENT)
            .ok_or_else(|| KnotError::OffsetOverflow("metadata".into()))?;
        json.resize(codec_at as usize - FIXED_HEADER_LEN, b' ');
        let meta_len = u32::try_from(json.len())
            .ok()
            .filter(|&l| l <= DEFAULT_MAX_META_LEN)
            .ok_or(KnotError::MetadataTooLong {
                len: u32::try_from(json.len()).unwrap_or(u32::MAX),
                max: DEFAULT_MAX_META_LEN,
            })?;
        let payload_start = payload_offset(meta_len);
        debug_assert_eq!(payload_start % TENSOR_ALIGNMENT, payload_mod);
        let file_len = payload_start
            .checked_add(payload_len)
            .ok_or_else(|| KnotError::OffsetOverflow("file".into()))?;
        validate(&meta, payload_start, file_len)?;

        let header = FixedHeader {
            version: VERSION,
            meta_len,
        };
        let mut prefix = Vec::with_capacity(payload_start as usize);
        prefix.extend_from_slice(&header.to_bytes());
        prefix.extend_from_slice(&json);
        prefix.push(CODEC_RAW);
        debug_assert_eq!(prefix.len() as u64, payload_start);
        Ok(KnotPlan {
            meta,
            prefix,
            tokenizer_blob,
            file_len,
        })
    }
}

/// A fully laid-out file waiting for its tensor bytes.
#[derive(Debug, Clone)]
pub struct KnotPlan {
    pub meta: Metadata,
    prefix: Vec<u8>,
    tokenizer_blob: Vec<u8>,
    file_len: u64,
}

impl KnotPlan {
    /// Header, metadata, padding and codec byte: everything before the payload.
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    pub fn payload_offset(&self) -> u64 {
        self.prefix.len() as u64
    }

    /// The tokenizer blob: the payload's first bytes, before the first tensor's padding.
    pub fn tokenizer_blob(&self) -> &[u8] {
        &self.tokenizer_blob
    }

    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Tensors in the order [`KnotWriter::write_tensor`] expects them.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.meta.tensors
    }

    /// Starts writing: emits the prefix and tokenizer blob.
    pub fn writer<W: Write>(&self, out: W) -> Result<KnotWriter<'_, W>, WriteError> {
        KnotWriter::new(self, out)
    }

    /// Builds the whole file in memory, asking `data` for each tensor's bytes.
    pub fn to_bytes<'d>(
        &self,
        mut data: impl FnMut(&str) -> Option<&'d [u8]>,
    ) -> Result<Vec<u8>, WriteError> {
        let mut w = self.writer(Vec::with_capacity(self.file_len as usize))?;
        for t in self.tensors() {
            let bytes = data(&t.name).ok_or_else(|| WriteError::MissingData(t.name.clone()))?;
            w.write_tensor(&t.name, bytes)?;
        }
        w.finish()
    }
}

#[derive(Debug, Error)]
pub enum WriteError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("expected tensor {expected:?} next, got {got}")]
    UnexpectedTensor {
        expected: Option<String>,
        got: String,
    },
    #[error("tensor {tensor}: got {actual} bytes, the plan says {expected}")]
    WrongSize {
        tensor: String,
        expected: u64,
        actual: u64,
    },
    #[error("no bytes supplied for tensor {0}")]
    MissingData(String),
    #[error("only {written} of {total} tensors were written")]
    Incomplete { written: usize, total: usize },
}

/// Streams tensor bytes in plan order, inserting alignment padding.
pub struct KnotWriter<'p, W: Write> {
    plan: &'p KnotPlan,
    out: W,
    next: usize,
    /// Bytes of payload written so far.
    pos: u64,
}

impl<'p, W: Write> KnotWriter<'p, W> {
    pub fn new(plan: &'p KnotPlan, mut out: W) -> Result<Self, WriteError> {
        out.write_all(&plan.prefix)?;
        out.write_all(&plan.tokenizer_blob)?;
        Ok(KnotWriter {
            plan,
            out,
            next: 0,
            pos: plan.tokenizer_blob.len() as u64,
        })
    }

    /// The tensor the writer expects next.
    pub fn next_tensor(&self) -> Option<&'p TensorEntry> {
        self.plan.meta.tensors.get(self.next)
    }

    pub fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> Result<(), WriteError> {
        let entry = self
            .next_tensor()
            .filter(|e| e.name == name)
            .ok_or_else(|| WriteError::UnexpectedTensor {
                expected: self.next_tensor().map(|e| e.name.clone()),
                got: name.to_string(),
            })?;
        if bytes.len() as u64 != entry.size {
            return Err(WriteError::WrongSize {
                tensor: name.to_string(),
                expected: entry.size,
                actual: bytes.len() as u64,
            });
        }
        const ZEROS: [u8; TENSOR_ALIGNMENT as usize] = [0; TENSOR_ALIGNMENT as usize];
        // The plan guarantees offset >= pos and a gap below the alignment.
        let pad = (entry.offset - self.pos) as usize;
        self.out.write_all(&ZEROS[..pad])?;
        self.out.write_all(bytes)?;
        self.pos = entry.offset + entry.size;
        self.next += 1;
        Ok(())
    }

    /// Checks every tensor was written and flushes.
    pub fn finish(mut self) -> Result<W, WriteError> {
        let total = self.plan.meta.tensors.len();
        if self.next != total {
            return Err(WriteError::Incomplete {
                written: self.next,
                total,
            });
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

fn align_up(x: u64, alignment: u64) -> Option<u64> {
    Some(x.checked_add(alignment - 1)? / alignment * alignment)
}

/// The span from the first entry's start to the last entry's end (entries are in file order).
fn covering(entries: &[TensorEntry]) -> Span {
    match (entries.first(), entries.last()) {
        (Some(first), Some(last)) => Span {
            offset: first.offset,
            size: last.offset + last.size - first.offset,
        },
        _ => Span::default(),
    }
}
