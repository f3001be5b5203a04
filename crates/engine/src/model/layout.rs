//! Where a model's tensors are: a caller's [`TensorSource`] (a whole file in memory, by name) or
//! a span's tensor table located once ([`TensorSlot`]), and the two structs that hold them per
//! layer ([`LayerTensors`]) and for the whole session ([`ResidentTensors`]) either as matrix
//! views (`*Weights`) or as places in a span (`*Layout`). Every tensor's shape is checked
//! against the config when it is found.

use super::config::ConfigExt;
use super::error::EngineError;
use crate::quant::{QMatrix, QuantError};
use knot::{DType, ModelConfig, TensorInfo};
use std::ops::Range;

/// A tensor as a caller found it in a knot file: its format, shape (outermost first) and bytes.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub dtype: DType,
    pub shape: &'a [u64],
    pub data: &'a [u8],
}

/// Fetches a tensor by its GGUF name (`blk.3.attn_q.weight`).
pub trait TensorSource<'a> {
    fn tensor(&self, name: &str) -> Option<TensorRef<'a>>;
}

impl<'a, F: Fn(&str) -> Option<TensorRef<'a>>> TensorSource<'a> for F {
    fn tensor(&self, name: &str) -> Option<TensorRef<'a>> {
        self(name)
    }
}

/// Tensors of a whole knot file held in memory (`file` is every byte of it).
pub fn knot_tensors<'a>(
    knot: &'a knot::Knot,
    file: &'a [u8],
) -> impl Fn(&str) -> Option<TensorRef<'a>> + 'a {
    move |name: &str| {
        let entry = knot.meta.tensors.iter().find(|t| t.name == name)?;
        let start = usize::try_from(knot.payload_offset.checked_add(entry.offset)?).ok()?;
        let data = file.get(start..start.checked_add(usize::try_from(entry.size).ok()?)?)?;
        Some(TensorRef {
            dtype: DType::from_name(&entry.dtype)?,
            shape: &entry.shape,
            data,
        })
    }
}

/// The shape a tensor must have to be a `[rows, cols]` matrix: vectors are stored 1-D, matrices
/// `[out, in]`.
fn check_shape(name: &str, shape: &[u64], rows: usize, cols: usize) -> Result<(), EngineError> {
    let expected: Vec<u64> = if rows == 1 {
        vec![cols as u64]
    } else {
        vec![rows as u64, cols as u64]
    };
    if shape != expected.as_slice() {
        return Err(EngineError::BadShape {
            name: name.to_string(),
            got: shape.to_vec(),
            expected,
        });
    }
    Ok(())
}

/// Looks a tensor up and checks its shape, giving a matrix view `[rows, cols]`.
fn matrix<'a>(
    src: &impl TensorSource<'a>,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<QMatrix<'a>, EngineError> {
    let t = src
        .tensor(name)
        .ok_or_else(|| EngineError::MissingTensor(name.to_string()))?;
    check_shape(name, t.shape, rows, cols)?;
    Ok(QMatrix::new(t.dtype, rows, cols, t.data)?)
}

/// A tensor located inside a span of the file but not loaded: where its bytes are and what they
/// hold. A host locates every tensor once at open; a view of a fetched span is then a slice, not
/// a search by name.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSlot {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    /// Byte range within the span.
    pub bytes: Range<usize>,
}

impl TensorSlot {
    /// Finds `name` in a span's tensor table (offsets relative to the span) and checks its shape
    /// and byte size against `[rows, cols]`.
    fn locate(
        tensors: &[TensorInfo],
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<TensorSlot, EngineError> {
        let t = tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| EngineError::MissingTensor(name.to_string()))?;
        check_shape(name, &t.shape, rows, cols)?;
        let expected = QMatrix::byte_len(t.dtype, rows, cols)?;
        let start = usize::try_from(t.offset).ok();
        let bytes = start
            .and_then(|s| Some(s..s.checked_add(expected)?))
            .filter(|_| t.size == expected as u64)
            .ok_or(QuantError::MatrixSize {
                dtype: t.dtype,
                rows,
                cols,
                expected,
                actual: usize::try_from(t.size).unwrap_or(usize::MAX),
            })?;
        Ok(TensorSlot {
            dtype: t.dtype,
            rows,
            cols,
            bytes,
        })
    }

    /// The matrix view of this tensor in `span` (the bytes of the span it was located in).
    pub fn view<'a>(&self, span: &'a [u8]) -> Result<QMatrix<'a>, EngineError> {
        let data = span
            .get(self.bytes.clone())
            .ok_or(EngineError::SpanTooShort {
                needed: self.bytes.end,
                got: span.len(),
            })?;
        Ok(QMatrix::new(self.dtype, self.rows, self.cols, data)?)
    }
}

/// Tensors that stay resident for the whole session: matrix views (`ResidentWeights`) or their
/// locations (`ResidentLayout`).
#[derive(Clone)]
pub struct ResidentTensors<M> {
    pub token_embd: M,
    pub output_norm: M,
    /// The LM head; the token embedding itself when embeddings are tied.
    pub output: M,
}

pub type ResidentWeights<'a> = ResidentTensors<QMatrix<'a>>;
pub type ResidentLayout = ResidentTensors<TensorSlot>;

impl<M: Clone> ResidentTensors<M> {
    fn find(
        cfg: &ModelConfig,
        mut get: impl FnMut(&str, usize, usize) -> Result<M, EngineError>,
    ) -> Result<Self, EngineError> {
        let token_embd = get("token_embd.weight", cfg.vocab_size, cfg.dim)?;
        let output = match cfg.tie_word_embeddings {
            true => token_embd.clone(),
            false => get("output.weight", cfg.vocab_size, cfg.dim)?,
        };
        Ok(ResidentTensors {
            token_embd,
            output_norm: get("output_norm.weight", 1, cfg.dim)?,
            output,
        })
    }
}

impl<'a> ResidentWeights<'a> {
    pub fn load(cfg: &ModelConfig, src: &impl TensorSource<'a>) -> Result<Self, EngineError> {
        Self::find(cfg, |name, rows, cols| matrix(src, name, rows, cols))
    }
}

impl ResidentLayout {
    /// Locates the resident tensors in the resident span's table (offsets relative to it).
    pub fn locate(cfg: &ModelConfig, tensors: &[TensorInfo]) -> Result<Self, EngineError> {
        Self::find(cfg, |name, rows, cols| {
            TensorSlot::locate(tensors, name, rows, cols)
        })
    }

    pub fn view<'a>(&self, span: &'a [u8]) -> Result<ResidentWeights<'a>, EngineError> {
        Ok(ResidentTensors {
            token_embd: self.token_embd.view(span)?,
            output_norm: self.output_norm.view(span)?,
            output: self.output.view(span)?,
        })
    }
}

/// One transformer block's tensors: matrix views (`LayerWeights`) or their locations in the
/// layer's span (`LayerLayout`).
#[derive(Clone)]
pub struct LayerTensors<M> {
    pub attn_norm: M,
    pub attn_q: M,
    pub attn_k: M,
    pub attn_v: M,
    pub attn_output: M,
    pub ffn_norm: M,
    pub ffn_gate: M,
    pub ffn_up: M,
    pub ffn_down: M,
    /// Present when `cfg.qkv_bias`.
    pub attn_qkv_bias: Option<[M; 3]>,
    /// Per-head norms of q and k (`[head_dim]` each), present when `cfg.qk_norm`.
    pub attn_qk_norm: Option<[M; 2]>,
    /// Norms of the attention and FFN outputs, present when `cfg.sandwich_norms`.
    pub post_attention_norm: Option<M>,
    pub post_ffw_norm: Option<M>,
}

pub type LayerWeights<'a> = LayerTensors<QMatrix<'a>>;
pub type LayerLayout = LayerTensors<TensorSlot>;

impl<M> LayerTensors<M> {
    /// Asks `get(name, rows, cols)` for every tensor this config's layer `layer` needs.
    fn find(
        cfg: &ModelConfig,
        layer: usize,
        mut get: impl FnMut(&str, usize, usize) -> Result<M, EngineError>,
    ) -> Result<Self, EngineError> {
        let (dim, q_dim, kv_dim, ffn) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let hd = cfg.head_dim;
        let mut m = |role: &str, rows, cols| get(&format!("blk.{layer}.{role}"), rows, cols);
        Ok(LayerTensors {
            attn_norm: m("attn_norm.weight", 1, dim)?,
            attn_q: m("attn_q.weight", q_dim, dim)?,
            attn_k: m("attn_k.weight", kv_dim, dim)?,
            attn_v: m("attn_v.weight", kv_dim, dim)?,
            attn_output: m("attn_output.weight", dim, q_dim)?,
            ffn_norm: m("ffn_norm.weight", 1, dim)?,
            ffn_gate: m("ffn_gate.weight", ffn, dim)?,
            ffn_up: m("ffn_up.weight", ffn, dim)?,
            ffn_down: m("ffn_down.weight", dim, ffn)?,
            attn_qkv_bias: match cfg.qkv_bias {
                true => Some([
                    m("attn_q.bias", 1, q_dim)?,
                    m("attn_k.bias", 1, kv_dim)?,
                    m("attn_v.bias", 1, kv_dim)?,
                ]),
                false => None,
            },
            attn_qk_norm: match cfg.qk_norm {
                true => Some([
                    m("attn_q_norm.weight", 1, hd)?,
                    m("attn_k_norm.weight", 1, hd)?,
                ]),
                false => None,
            },
            post_attention_norm: match cfg.sandwich_norms {
                true => Some(m("post_attention_norm.weight", 1, dim)?),
                false => None,
            },
            post_ffw_norm: match cfg.sandwich_norms {
                true => Some(m("post_ffw_norm.weight", 1, dim)?),
                false => None,
            },
        })
    }
}

impl<'a> LayerWeights<'a> {
    pub fn load(
        cfg: &ModelConfig,
        layer: usize,
        src: &impl TensorSource<'a>,
    ) -> Result<Self, EngineError> {
        Self::find(cfg, layer, |name, rows, cols| matrix(src, name, rows, cols))
    }
}

impl LayerLayout {
    /// Locates layer `layer`'s tensors in its span's table (offsets relative to the span).
    pub fn locate(
        cfg: &ModelConfig,
        layer: usize,
        tensors: &[TensorInfo],
    ) -> Result<Self, EngineError> {
        Self::find(cfg, layer, |name, rows, cols| {
            TensorSlot::locate(tensors, name, rows, cols)
        })
    }

    /// Matrix views into the layer's fetched span: slices, no search.
    pub fn view<'a>(&self, span: &'a [u8]) -> Result<LayerWeights<'a>, EngineError> {
        let v = |slot: &TensorSlot| slot.view(span);
        let pair = |p: &Option<[TensorSlot; 2]>| match p {
            Some([a, b]) => Ok(Some([v(a)?, v(b)?])),
            None => Ok::<_, EngineError>(None),
        };
        Ok(LayerTensors {
            attn_norm: v(&self.attn_norm)?,
            attn_q: v(&self.attn_q)?,
            attn_k: v(&self.attn_k)?,
            attn_v: v(&self.attn_v)?,
            attn_output: v(&self.attn_output)?,
            ffn_norm: v(&self.ffn_norm)?,
            ffn_gate: v(&self.ffn_gate)?,
            ffn_up: v(&self.ffn_up)?,
            ffn_down: v(&self.ffn_down)?,
            attn_qkv_bias: match &self.attn_qkv_bias {
                Some([q, k, b]) => Some([v(q)?, v(k)?, v(b)?]),
                None => None,
            },
            attn_qk_norm: pair(&self.attn_qk_norm)?,
            post_attention_norm: self.post_attention_norm.as_ref().map(v).transpose()?,
            post_ffw_norm: self.post_ffw_norm.as_ref().map(v).transpose()?,
        })
    }
}
