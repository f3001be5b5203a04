//! The llama-family forward pass, llama2.c-style: weights are borrowed views into the file's
//! bytes, the run state (activations, KV cache) is allocated by the session and reused.
//!
//! qwen2, qwen3 and gemma3 are the same block with a few switches from [`ModelConfig`]:
//! Q/K/V biases (`qkv_bias`), per-head q/k RMSNorm before RoPE (`qk_norm`), norms on the
//! attention and FFN outputs (`sandwich_norms`), a √dim embedding scale, GELU-tanh instead of
//! SiLU, a query scale other than `1/√head_dim`, and sliding-window layers with their own RoPE
//! base. Gemma's `(1 + w)` norms need no switch: converters store `1 + w` (as llama.cpp does).
//!
//! A forward pass over a batch of tokens is split so a caller can stream layers:
//! [`Session::begin`] embeds the batch, [`Session::run_layer`] runs it through one layer (all
//! positions at once: matrix-matrix in prefill, matrix-vector in decode), and
//! [`Session::finish`] applies the final norm and the LM head.

use crate::kv::{Attention, AttentionBuffers, KvCache, KvShape, KvType};
use crate::ops::{gelu_tanh_gated, rmsnorm, rmsnorm_in_place, swiglu, Rope};
use crate::quant::{matmul, MatmulScratch, QMatrix, QuantError};
use knot::{DType, FfnActivation, ModelConfig, TensorInfo};
use std::ops::Range;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("token id {id} is out of range for a vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("the context is full: {needed} positions needed, the session holds {max}")]
    ContextFull { needed: usize, max: usize },
    #[error("empty batch: at least one token is needed")]
    EmptyBatch,
    #[error("missing tensor {0}")]
    MissingTensor(String),
    #[error("tensor {name} has shape {got:?}, expected {expected:?}")]
    BadShape {
        name: String,
        got: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("layers must run in order: expected layer {expected}, got {got}")]
    LayerOrder { expected: usize, got: usize },
    #[error("unsupported architecture {0:?}")]
    UnsupportedArchitecture(String),
    #[error("invalid config: {0}")]
    BadConfig(String),
    #[error("cannot rewind to position {to}: the session holds {held} and can go back to {earliest} (rewinds go back, between batches)")]
    Rewind {
        to: usize,
        held: usize,
        earliest: usize,
    },
    #[error("a batch is in progress")]
    Busy,
    #[error("this session runs layers {start}..{end}: {what}")]
    LayerRange {
        start: usize,
        end: usize,
        what: &'static str,
    },
    #[error("hidden states of {got} values are not whole rows of {dim}")]
    HiddenShape { got: usize, dim: usize },
    #[error("{what} needs {bytes} bytes, more than this platform can address")]
    TooLarge { what: &'static str, bytes: u128 },
    #[error("a span of {got} bytes is too short: its tensors need {needed}")]
    SpanTooShort { needed: usize, got: usize },
    #[error(transparent)]
    Quant(#[from] QuantError),
}

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

/// Architectures this engine runs.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3", "gemma3"];

/// Rejects architectures the forward pass does not implement, naming them.
pub fn check_architecture(name: &str) -> Result<(), EngineError> {
    if SUPPORTED_ARCHITECTURES.contains(&name) {
        Ok(())
    } else {
        Err(EngineError::UnsupportedArchitecture(name.to_string()))
    }
}

/// Derived sizes the config does not store.
pub trait ConfigExt {
    fn q_dim(&self) -> usize;
    fn kv_dim(&self) -> usize;
    fn validate(&self) -> Result<(), EngineError>;
}

/// Bounds on the sizes a config may declare, checked before anything is allocated from them
/// (they come from the file): far above every model this engine is for, far below what would
/// overflow a product or exhaust a wasm32 address space by themselves.
pub const MAX_DIM: usize = 1 << 16;
pub const MAX_FFN_DIM: usize = 1 << 18;
pub const MAX_HEADS: usize = 1 << 10;
pub const MAX_HEAD_DIM: usize = 1 << 12;
pub const MAX_VOCAB: usize = 1 << 22;
pub const MAX_LAYERS: usize = 1 << 12;
/// RMSNorm epsilons are 1e-5 or 1e-6; one near 1 already swamps typical activations.
pub const MAX_NORM_EPS: f32 = 1.0;
/// The attention scale's divisor is about `head_dim`; this is `MAX_HEAD_DIM²`.
pub const MAX_QUERY_PRE_ATTN_SCALAR: f32 = (1u32 << 24) as f32;

impl ConfigExt for ModelConfig {
    // `validate` bounds heads and head_dim, so these products cannot overflow once it passed;
    // before that, they saturate instead of wrapping.
    fn q_dim(&self) -> usize {
        self.n_heads.saturating_mul(self.head_dim)
    }
    fn kv_dim(&self) -> usize {
        self.n_kv_heads.saturating_mul(self.head_dim)
    }
    fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: &str| Err(EngineError::BadConfig(m.to_string()));
        if self.dim == 0 || self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return bad("dim, heads and head_dim must be positive");
        }
        for (name, value, max) in [
            ("dim", self.dim, MAX_DIM),
            ("ffn_dim", self.ffn_dim, MAX_FFN_DIM),
            ("n_heads", self.n_heads, MAX_HEADS),
            ("n_kv_heads", self.n_kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEAD_DIM),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("n_layers", self.n_layers, MAX_LAYERS),
        ] {
            if value > max {
                return Err(EngineError::BadConfig(format!(
                    "{name} {value} is above the supported maximum {max}"
                )));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("n_heads must be a multiple of n_kv_heads");
        }
        if self.rope_dim > self.head_dim || !self.rope_dim.is_multiple_of(2) {
            return bad("rope_dim must be even and at most head_dim");
        }
        if self.vocab_size == 0 || self.ffn_dim == 0 || self.n_layers == 0 {
            return bad("vocab_size, ffn_dim and n_layers must be positive");
        }
        if self.sliding_window == Some(0) {
            return bad("sliding_window must be positive");
        }
        // Floats from the file: out of these ranges they are infinite or NaN (a JSON 1e300 reads
        // as inf) or make every activation vanish or overflow, so the model would quietly emit
        // nonsense instead of failing.
        let floats = [
            ("rope_theta", Some(self.rope_theta), 1.0, f32::MAX),
            ("rope_theta_local", self.rope_theta_local, 1.0, f32::MAX),
            ("norm_eps", Some(self.norm_eps), 0.0, MAX_NORM_EPS),
            (
                "query_pre_attn_scalar",
                self.query_pre_attn_scalar,
                1.0,
                MAX_QUERY_PRE_ATTN_SCALAR,
            ),
        ];
        for (name, value, min, max) in floats {
            if let Some(v) = value.filter(|v| !(*v >= min && *v <= max)) {
                return Err(EngineError::BadConfig(format!(
                    "{name} {v} is outside [{min}, {max:e}]"
                )));
            }
        }
        Ok(())
    }
}

/// The run state of one sequence: activations for the current batch and the KV cache.
pub struct Session {
    cfg: ModelConfig,
    rope: Rope,
    /// RoPE of sliding-window layers (their base can differ from the global layers').
    rope_local: Rope,
    max_ctx: usize,
    /// The layers this session runs and keeps KV for (all of them, or a station's range).
    layers: Range<usize>,
    /// Tokens in the current batch, and the next layer it must go through.
    n: usize,
    next_layer: usize,
    kv: KvCache,
    // Batch activations, row-major [n, width].
    x: Vec<f32>,
    xb: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    attn: AttentionBuffers,
    norm_w: Vec<f32>,
    logits: Vec<f32>,
    scratch: MatmulScratch,
}

/// Each layer's sliding window (`None`: a global layer).
fn layer_windows(cfg: &ModelConfig) -> Vec<Option<usize>> {
    (0..cfg.n_layers)
        .map(|l| cfg.sliding_window.filter(|_| cfg.is_local_layer(l)))
        .collect()
}

/// Resizes a buffer to `len`, growing its allocation to exactly that (not the doubling a `Vec`
/// does), so a session's memory is what its largest batch needs and no more.
pub(crate) fn fit<T: Copy + Default>(buf: &mut Vec<T>, len: usize) {
    if len > buf.capacity() {
        buf.reserve_exact(len - buf.len());
    }
    buf.resize(len, T::default());
}

/// What a session's buffers take at most, in bytes (see [`Session::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMemory {
    /// The KV cache once it holds the whole context.
    pub kv_cache: u64,
    /// Activations and scratch of the largest batch.
    pub activations: u64,
    /// Logits of the most rows one pass keeps.
    pub logits: u64,
}

impl SessionMemory {
    pub fn total(&self) -> u64 {
        self.kv_cache + self.activations + self.logits
    }
}

impl Session {
    /// A session holding at most `max_ctx` positions (capped by the model's context length),
    /// with an f32 KV cache.
    pub fn new(cfg: &ModelConfig, max_ctx: usize) -> Result<Self, EngineError> {
        Self::with_kv(cfg, max_ctx, KvType::F32)
    }

    /// A session whose KV cache stores `kv_type`.
    pub fn with_kv(
        cfg: &ModelConfig,
        max_ctx: usize,
        kv_type: KvType,
    ) -> Result<Self, EngineError> {
        Self::for_layers(cfg, 0..cfg.n_layers, max_ctx, kv_type)
    }

    /// A session that runs only `layers` and keeps KV for those alone: a station's share of a
    /// model split across processes. Batches enter as hidden states ([`Session::begin_hidden`])
    /// unless the range starts at layer 0, and leave as hidden states
    /// ([`Session::finish_hidden`]) unless it ends at the last layer.
    pub fn for_layers(
        cfg: &ModelConfig,
        layers: Range<usize>,
        max_ctx: usize,
        kv_type: KvType,
    ) -> Result<Self, EngineError> {
        cfg.validate()?;
        if layers.is_empty() || layers.end > cfg.n_layers {
            return Err(EngineError::BadConfig(format!(
                "layer range {}..{} is not a non-empty part of 0..{}",
                layers.start, layers.end, cfg.n_layers
            )));
        }
        let max_ctx = max_ctx.min(cfg.context_length.max(1));
        // The KV cache grows with positions up to `max_ctx`: K and V, every layer it runs.
        addressable(
            "the KV cache",
            &[max_ctx, layers.len(), cfg.kv_dim(), 2, kv_type.bytes()],
        )?;
        let windows = &layer_windows(cfg)[layers.clone()];
        Ok(Session {
            rope: Rope::new(cfg.rope_style, cfg.rope_dim, cfg.rope_theta),
            rope_local: Rope::new(
                cfg.rope_style,
                cfg.rope_dim,
                cfg.rope_theta_local.unwrap_or(cfg.rope_theta),
            ),
            kv: KvCache::new(Self::kv_shape(layers.len(), cfg, max_ctx, kv_type), windows),
            cfg: cfg.clone(),
            max_ctx,
            next_layer: layers.start,
            layers,
            n: 0,
            x: Vec::new(),
            xb: Vec::new(),
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            att: Vec::new(),
            hb: Vec::new(),
            hb2: Vec::new(),
            attn: AttentionBuffers::default(),
            norm_w: Vec::new(),
            logits: Vec::new(),
            scratch: MatmulScratch::default(),
        })
    }

    fn kv_shape(n_layers: usize, cfg: &ModelConfig, max_ctx: usize, kv_type: KvType) -> KvShape {
        KvShape {
            n_layers,
            kv_dim: cfg.kv_dim(),
            max_positions: max_ctx,
            kv_type,
        }
    }

    /// The most memory a session takes: its KV cache holding `max_ctx` positions (capped by the
    /// model's context length; sliding-window layers keep only their window), batches of up to
    /// `max_batch` positions, and passes keeping `logits_rows` rows of logits. `None` when it
    /// cannot be addressed.
    pub fn memory(
        cfg: &ModelConfig,
        max_ctx: usize,
        kv_type: KvType,
        max_batch: usize,
        logits_rows: usize,
    ) -> SessionMemory {
        let max_ctx = max_ctx.min(cfg.context_length.max(1));
        let kv = Self::kv_shape(cfg.n_layers, cfg, max_ctx, kv_type)
            .bytes_at(max_ctx, &layer_windows(cfg));
        let (dim, q_dim, kv_dim, ffn) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let widest = dim.max(q_dim).max(ffn) as u128;
        let n = max_batch.clamp(1, max_ctx) as u128;
        let f32s = |k: u128| k.saturating_mul(4);
        // x, xb; q, att; k, v; hb, hb2 — then the quantized activations (i16 + two f32 per 32)
        // of the widest input, the norm weights, and attention's scores over the context.
        let rows = 2 * (dim + q_dim + kv_dim + ffn) as u128;
        let group = (cfg.n_heads / cfg.n_kv_heads.max(1)) as u128;
        let activations = f32s(n.saturating_mul(rows))
            .saturating_add(n.saturating_mul(widest).saturating_mul(9) / 4)
            .saturating_add(f32s(widest))
            .saturating_add(f32s(
                group.saturating_mul(max_ctx as u128) + cfg.head_dim as u128,
            ));
        let logits = f32s((logits_rows.max(1) as u128).saturating_mul(cfg.vocab_size as u128));
        let clamp = |b: u128| u64::try_from(b).unwrap_or(u64::MAX);
        SessionMemory {
            kv_cache: clamp(kv),
            activations: clamp(activations),
            logits: clamp(logits),
        }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Positions already processed (the KV cache length).
    pub fn position(&self) -> usize {
        self.kv.len()
    }

    pub fn max_context(&self) -> usize {
        self.max_ctx
    }

    /// The layers this session runs.
    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    pub fn kv_type(&self) -> KvType {
        self.kv.kv_type()
    }

    /// Bytes the KV cache has allocated.
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// Allocates the KV cache for the whole context now.
    pub fn reserve_kv(&mut self) {
        self.kv.reserve(self.max_ctx);
    }

    /// An empty KV cache of this session's shape, for [`Session::swap_kv`].
    pub fn new_kv(&self) -> KvCache {
        KvCache::new(
            Self::kv_shape(
                self.layers.len(),
                &self.cfg,
                self.max_ctx,
                self.kv.kv_type(),
            ),
            &layer_windows(&self.cfg)[self.layers.clone()],
        )
    }

    /// Exchanges the session's KV cache (its conversation) with `other`, between batches; the
    /// caches must come from [`Session::new_kv`] of a session like this one.
    pub fn swap_kv(&mut self, other: &mut KvCache) -> Result<(), EngineError> {
        if self.n != 0 {
            return Err(EngineError::Busy);
        }
        if other.kv_type() != self.kv.kv_type()
            || other.max_positions() != self.max_ctx
            || other.layers() != self.layers.len()
        {
            return Err(EngineError::BadConfig(
                "a KV cache of another shape cannot be swapped in".into(),
            ));
        }
        std::mem::swap(&mut self.kv, other);
        Ok(())
    }

    /// Forgets the sequence; buffers are kept for reuse.
    pub fn reset(&mut self) {
        self.kv.clear();
        self.n = 0;
        self.next_layer = self.layers.start;
    }

    /// The earliest position [`Session::rewind`] can go back to (sliding-window layers keep
    /// only their window and a little more).
    pub fn earliest_rewind(&self) -> usize {
        self.kv.earliest_rewind()
    }

    /// Forgets every position from `pos` on, keeping the first `pos` (a verifier drops the
    /// positions of rejected draft tokens). Only between batches, only backwards, and no
    /// further back than [`Session::earliest_rewind`].
    pub fn rewind(&mut self, pos: usize) -> Result<(), EngineError> {
        if self.n != 0 || !self.kv.truncate(pos) {
            return Err(EngineError::Rewind {
                to: pos,
                held: self.kv.len(),
                earliest: self.kv.earliest_rewind(),
            });
        }
        Ok(())
    }

    /// Abandons the current batch (e.g. a layer could not be fetched): the KV cache goes back to
    /// where it was before `begin`, so the session can carry on. Returns false when that is
    /// impossible (a long batch overwrote a sliding window's ring): the conversation is then
    /// forgotten.
    pub fn abort_batch(&mut self) -> bool {
        self.n = 0;
        self.next_layer = self.layers.start;
        self.kv.abandon()
    }

    /// Starts a batch: checks the ids and embeds them into the residual stream.
    pub fn begin(&mut self, tokens: &[u32], w: &ResidentWeights) -> Result<(), EngineError> {
        let vocab = self.cfg.vocab_size;
        if self.layers.start != 0 {
            return Err(self.range_error("token ids enter at layer 0; pass hidden states"));
        }
        if tokens.is_empty() {
            return Err(EngineError::EmptyBatch);
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(EngineError::TokenOutOfRange { id, vocab });
        }
        self.start_batch(tokens.len())?;
        let dim = self.cfg.dim;
        for (row, &id) in self.x.chunks_exact_mut(dim).zip(tokens) {
            embed(&self.cfg, &w.token_embd, id as usize, row);
        }
        Ok(())
    }

    /// Starts a batch from hidden states (`[n, dim]`, the residual stream before this session's
    /// first layer): what a station receives from the one before it.
    pub fn begin_hidden(&mut self, hidden: &[f32]) -> Result<(), EngineError> {
        let dim = self.cfg.dim;
        if hidden.is_empty() {
            return Err(EngineError::EmptyBatch);
        }
        if !hidden.len().is_multiple_of(dim) {
            return Err(EngineError::HiddenShape {
                got: hidden.len(),
                dim,
            });
        }
        self.start_batch(hidden.len() / dim)?;
        self.x.copy_from_slice(hidden);
        Ok(())
    }

    fn range_error(&self, what: &'static str) -> EngineError {
        EngineError::LayerRange {
            start: self.layers.start,
            end: self.layers.end,
            what,
        }
    }

    /// Sizes the buffers for a batch of `n` positions and takes everything its layers will grow.
    fn start_batch(&mut self, n: usize) -> Result<(), EngineError> {
        let needed = self.position() + n;
        if needed > self.max_ctx {
            return Err(EngineError::ContextFull {
                needed,
                max: self.max_ctx,
            });
        }
        let c = &self.cfg;
        let (dim, q_dim, kv_dim, ffn) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim);
        let widest = dim.max(q_dim).max(ffn);
        addressable(
            "the batch's activations",
            &[n, widest, std::mem::size_of::<f32>()],
        )?;
        for (buf, width) in [
            (&mut self.x, dim),
            (&mut self.xb, dim),
            (&mut self.q, q_dim),
            (&mut self.k, kv_dim),
            (&mut self.v, kv_dim),
            (&mut self.att, q_dim),
            (&mut self.hb, ffn),
            (&mut self.hb2, ffn),
        ] {
            fit(buf, n * width);
        }
        // Everything the layers will grow is taken here, before the host starts reading layers:
        // an allocation while a read writes into wasm memory would detach its view.
        self.kv.reserve(needed);
        self.scratch.reserve(n * widest);
        self.attn
            .reserve(c.n_heads / c.n_kv_heads.max(1) * needed, c.head_dim);
        self.n = n;
        self.next_layer = self.layers.start;
        Ok(())
    }

    /// Runs the current batch through layer `layer` (layers must come in order).
    pub fn run_layer(&mut self, layer: usize, w: &LayerWeights) -> Result<(), EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if layer != self.next_layer || layer >= self.layers.end {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: layer,
            });
        }
        let (n, pos, eps) = (self.n, self.position(), self.cfg.norm_eps);
        let (hd, q_dim, kv_dim) = (self.cfg.head_dim, self.cfg.q_dim(), self.cfg.kv_dim());

        // Attention: x += [post_norm] Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
        load_vector(&w.attn_norm, &mut self.norm_w);
        rmsnorm(&mut self.xb, &self.x, &self.norm_w, eps);
        matmul(&w.attn_q, &self.xb, n, &mut self.q, &mut self.scratch);
        matmul(&w.attn_k, &self.xb, n, &mut self.k, &mut self.scratch);
        matmul(&w.attn_v, &self.xb, n, &mut self.v, &mut self.scratch);
        if let Some([bq, bk, bv]) = &w.attn_qkv_bias {
            // qwen2
            for (b, out) in [(bq, &mut self.q), (bk, &mut self.k), (bv, &mut self.v)] {
                load_vector(b, &mut self.norm_w);
                add_rows(out, &self.norm_w);
            }
        }
        if let Some([q_norm, k_norm]) = &w.attn_qk_norm {
            // qwen3, gemma3: each head normalised on its own, before RoPE.
            for (nw, buf) in [(q_norm, &mut self.q), (k_norm, &mut self.k)] {
                load_vector(nw, &mut self.norm_w);
                rmsnorm_in_place(buf, &self.norm_w, eps);
            }
        }
        let rope = match self.cfg.is_local_layer(layer) {
            true => &mut self.rope_local,
            false => &mut self.rope,
        };
        for t in 0..n {
            rope.apply(&mut self.q[t * q_dim..(t + 1) * q_dim], hd, pos + t);
            rope.apply(&mut self.k[t * kv_dim..(t + 1) * kv_dim], hd, pos + t);
        }
        // The batch sees its own keys and values as the cache will store them.
        self.kv.round(&mut self.k);
        self.kv.round(&mut self.v);
        let c = &self.cfg;
        let attention = Attention {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            out: &mut self.att,
            n,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: hd,
            scale: 1.0 / c.query_pre_attn_scalar.unwrap_or(hd as f32).sqrt(),
        };
        let kv_layer = layer - self.layers.start;
        self.kv.attend(kv_layer, attention, &mut self.attn);
        self.kv.append(kv_layer, &self.k, &self.v);
        matmul(
            &w.attn_output,
            &self.att,
            n,
            &mut self.xb,
            &mut self.scratch,
        );
        if let Some(post) = &w.post_attention_norm {
            // gemma3's sandwich norm
            load_vector(post, &mut self.norm_w);
            rmsnorm_in_place(&mut self.xb, &self.norm_w, eps);
        }
        add(&mut self.x, &self.xb);

        // Feed-forward: x += [post_norm] Wdown · (act(Wgate·norm(x)) * Wup·norm(x))
        load_vector(&w.ffn_norm, &mut self.norm_w);
        rmsnorm(&mut self.xb, &self.x, &self.norm_w, eps);
        matmul(&w.ffn_gate, &self.xb, n, &mut self.hb, &mut self.scratch);
        matmul(&w.ffn_up, &self.xb, n, &mut self.hb2, &mut self.scratch);
        match self.cfg.ffn_activation {
            FfnActivation::Silu => swiglu(&mut self.hb, &self.hb2),
            FfnActivation::GeluTanh => gelu_tanh_gated(&mut self.hb, &self.hb2),
        }
        matmul(&w.ffn_down, &self.hb, n, &mut self.xb, &mut self.scratch);
        if let Some(post) = &w.post_ffw_norm {
            load_vector(post, &mut self.norm_w);
            rmsnorm_in_place(&mut self.xb, &self.norm_w, eps);
        }
        add(&mut self.x, &self.xb);

        self.next_layer += 1;
        Ok(())
    }

    /// Ends the batch: final norm and LM head. Returns the logits of the last position, or of
    /// every position (`[n, vocab]`) when `all_positions`.
    pub fn finish(
        &mut self,
        w: &ResidentWeights,
        all_positions: bool,
    ) -> Result<&[f32], EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if self.next_layer != self.cfg.n_layers {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: self.cfg.n_layers,
            });
        }
        let (n, dim) = (self.n, self.cfg.dim);
        let rows = if all_positions { 0..n } else { n - 1..n };
        let head = LmHead {
            output_norm: &w.output_norm,
            output: &w.output,
        };
        head.logits(
            self.cfg.norm_eps,
            &self.x[rows.start * dim..rows.end * dim],
            HeadBuffers {
                norm_w: &mut self.norm_w,
                xb: &mut self.xb,
                logits: &mut self.logits,
                scratch: &mut self.scratch,
            },
        )?;
        self.kv.commit(n);
        self.n = 0;
        Ok(&self.logits)
    }

    /// Ends the batch without the LM head: its positions enter the KV cache and no logits are
    /// computed (a prompt's earlier chunks, whose logits nobody reads).
    pub fn finish_without_logits(&mut self) -> Result<(), EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if self.next_layer != self.cfg.n_layers {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: self.cfg.n_layers,
            });
        }
        self.kv.commit(self.n);
        self.n = 0;
        Ok(())
    }

    /// Ends the batch at the end of this session's layer range: its positions enter the KV
    /// cache and the residual stream (`[n, dim]`) is returned for the next station.
    pub fn finish_hidden(&mut self) -> Result<&[f32], EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if self.next_layer != self.layers.end {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: self.layers.end,
            });
        }
        let n = self.n;
        self.kv.commit(n);
        self.n = 0;
        Ok(&self.x[..n * self.cfg.dim])
    }

    /// The logits the last [`Session::finish`] returned, for a caller to process in place (a
    /// decode pipeline masks and penalizes them); they stay until the next `finish`.
    pub fn logits_mut(&mut self) -> &mut [f32] {
        &mut self.logits
    }
}

/// Checks that a buffer of `factors`' product bytes can exist here (at most `isize::MAX`
/// bytes: 2 GiB on wasm32), so sizes from the file and the request cannot wrap or abort.
fn addressable(what: &'static str, factors: &[usize]) -> Result<(), EngineError> {
    let fits = factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .filter(|&b| b <= isize::MAX as usize);
    match fits {
        Some(_) => Ok(()),
        None => Err(EngineError::TooLarge {
            what,
            bytes: factors
                .iter()
                .fold(1u128, |acc, &f| acc.saturating_mul(f as u128)),
        }),
    }
}

/// A whole model held in memory: resident tensors plus every layer.
pub struct Model<'a> {
    pub config: ModelConfig,
    pub resident: ResidentWeights<'a>,
    pub layers: Vec<LayerWeights<'a>>,
}

impl<'a> Model<'a> {
    pub fn load(config: &ModelConfig, src: &impl TensorSource<'a>) -> Result<Self, EngineError> {
        config.validate()?;
        Ok(Model {
            config: config.clone(),
            resident: ResidentWeights::load(config, src)?,
            layers: (0..config.n_layers)
                .map(|l| LayerWeights::load(config, l, src))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Runs `tokens` through every layer; returns the last position's logits (or all of them).
    pub fn forward<'s>(
        &self,
        session: &'s mut Session,
        tokens: &[u32],
        all_positions: bool,
    ) -> Result<&'s [f32], EngineError> {
        session.begin(tokens, &self.resident)?;
        for (l, layer) in self.layers.iter().enumerate() {
            session.run_layer(l, layer)?;
        }
        session.finish(&self.resident, all_positions)
    }
}

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

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Adds `row` to every `row.len()`-wide row of `x`.
fn add_rows(x: &mut [f32], row: &[f32]) {
    for r in x.chunks_exact_mut(row.len()) {
        add(r, row);
    }
}

/// Dequantizes a 1-row tensor (a norm weight) into `out`.
fn load_vector(w: &QMatrix, out: &mut Vec<f32>) {
    out.resize(w.cols(), 0.0);
    w.dequantize_row(0, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use knot::RopeStyle;

    fn gemma_like() -> ModelConfig {
        ModelConfig {
            n_layers: 1,
            dim: 8,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 4,
            ffn_dim: 8,
            vocab_size: 4,
            context_length: 16,
            rope_theta: 1e6,
            rope_style: RopeStyle::Neox,
            rope_dim: 4,
            norm_eps: 1e-6,
            tie_word_embeddings: true,
            bos_id: None,
            eos_ids: vec![],
            pad_id: None,
            add_bos: false,
            qkv_bias: true,
            qk_norm: true,
            sandwich_norms: true,
            scale_embeddings: true,
            ffn_activation: FfnActivation::GeluTanh,
            query_pre_attn_scalar: Some(4.0),
            sliding_window: Some(2),
            sliding_window_pattern: 6,
            rope_theta_local: Some(1e4),
        }
    }

    #[test]
    fn a_layer_range_session_checks_its_range_and_its_input() {
        let cfg = ModelConfig {
            n_layers: 3,
            ..gemma_like()
        };
        for bad in [0..0, 2..4, 3..3] {
            assert!(matches!(
                Session::for_layers(&cfg, bad, 8, KvType::F32),
                Err(EngineError::BadConfig(_))
            ));
        }
        let mut s = Session::for_layers(&cfg, 1..2, 8, KvType::F32).unwrap();
        assert_eq!(s.layers(), 1..2);
        assert!(matches!(s.begin_hidden(&[]), Err(EngineError::EmptyBatch)));
        assert!(matches!(
            s.begin_hidden(&[0.0; 12]),
            Err(EngineError::HiddenShape { got: 12, dim: 8 })
        ));
        assert!(matches!(s.finish_hidden(), Err(EngineError::EmptyBatch)));
        s.begin_hidden(&[0.5; 16]).unwrap();
        // Layer 1 has not run: the batch cannot leave yet, nor could it end the model.
        assert!(matches!(
            s.finish_hidden(),
            Err(EngineError::LayerOrder {
                expected: 1,
                got: 2
            })
        ));
        assert!(s.abort_batch());
        assert_eq!(s.position(), 0);
        // A cache of another range's shape is refused.
        let mut other = Session::for_layers(&cfg, 0..2, 8, KvType::F32)
            .unwrap()
            .new_kv();
        assert!(matches!(
            s.swap_kv(&mut other),
            Err(EngineError::BadConfig(_))
        ));
    }

    #[test]
    fn bad_window_and_query_scale_are_config_errors() {
        for bad in [
            ModelConfig {
                sliding_window: Some(0),
                ..gemma_like()
            },
            ModelConfig {
                query_pre_attn_scalar: Some(0.0),
                ..gemma_like()
            },
            ModelConfig {
                query_pre_attn_scalar: Some(f32::NAN),
                ..gemma_like()
            },
        ] {
            assert!(matches!(bad.validate(), Err(EngineError::BadConfig(_))));
            assert!(Session::new(&bad, 8).is_err());
        }
        gemma_like().validate().unwrap();
    }

    #[test]
    fn non_finite_and_out_of_range_floats_are_config_errors() {
        let inf = f32::INFINITY;
        for (bad, field) in [
            // JSON `1e300` reads as an f32 infinity.
            (
                ModelConfig {
                    norm_eps: inf,
                    ..gemma_like()
                },
                "norm_eps",
            ),
            (
                ModelConfig {
                    norm_eps: 1e30,
                    ..gemma_like()
                },
                "norm_eps",
            ),
            (
                ModelConfig {
                    norm_eps: -1e-6,
                    ..gemma_like()
                },
                "norm_eps",
            ),
            (
                ModelConfig {
                    norm_eps: f32::NAN,
                    ..gemma_like()
                },
                "norm_eps",
            ),
            (
                ModelConfig {
                    rope_theta: inf,
                    ..gemma_like()
                },
                "rope_theta",
            ),
            (
                ModelConfig {
                    rope_theta: f32::NAN,
                    ..gemma_like()
                },
                "rope_theta",
            ),
            (
                ModelConfig {
                    rope_theta: 0.0,
                    ..gemma_like()
                },
                "rope_theta",
            ),
            (
                ModelConfig {
                    rope_theta: -1e4,
                    ..gemma_like()
                },
                "rope_theta",
            ),
            (
                ModelConfig {
                    rope_theta_local: Some(inf),
                    ..gemma_like()
                },
                "rope_theta_local",
            ),
            (
                ModelConfig {
                    rope_theta_local: Some(0.5),
                    ..gemma_like()
                },
                "rope_theta_local",
            ),
            (
                ModelConfig {
                    query_pre_attn_scalar: Some(inf),
                    ..gemma_like()
                },
                "query_pre_attn_scalar",
            ),
            (
                ModelConfig {
                    query_pre_attn_scalar: Some(1e-30),
                    ..gemma_like()
                },
                "query_pre_attn_scalar",
            ),
        ] {
            match bad.validate() {
                Err(EngineError::BadConfig(m)) => assert!(m.starts_with(field), "{m}"),
                other => panic!("{field}: {other:?}"),
            }
            assert!(Session::new(&bad, 8).is_err());
        }
        // The edges of the ranges are fine.
        ModelConfig {
            norm_eps: 0.0,
            rope_theta: 1.0,
            ..gemma_like()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn a_kv_cache_beyond_the_address_space_is_refused_up_front() {
        // Every size within its cap, but the context the file claims (and the caller asks for)
        // times the per-position KV bytes cannot be addressed.
        let cfg = ModelConfig {
            n_layers: MAX_LAYERS,
            n_heads: 16,
            n_kv_heads: 16,
            head_dim: MAX_HEAD_DIM,
            rope_dim: MAX_HEAD_DIM,
            context_length: usize::MAX,
            ..gemma_like()
        };
        cfg.validate().unwrap();
        match Session::new(&cfg, usize::MAX) {
            Err(EngineError::TooLarge { what, bytes }) => {
                assert_eq!(what, "the KV cache");
                assert!(bytes > usize::MAX as u128);
            }
            other => panic!("{:?}", other.err()),
        }
        // A context the platform can hold opens (wasm32 included: 4 × 64 Ki × 8 bytes).
        Session::new(&ModelConfig { n_layers: 1, ..cfg }, 4).unwrap();
    }

    #[test]
    fn huge_sizes_are_config_errors_not_overflows() {
        for bad in [
            // × head_dim 4 wraps to 4 (2^62 + 1 on 64 bits, 2^30 + 1 on wasm32).
            ModelConfig {
                n_heads: usize::MAX / 4 + 1,
                ..gemma_like()
            },
            ModelConfig {
                n_heads: (1 << 30) + 1,
                ..gemma_like()
            },
            ModelConfig {
                head_dim: usize::MAX / 2,
                rope_dim: usize::MAX / 2 - 1,
                ..gemma_like()
            },
            ModelConfig {
                ffn_dim: 1 << 30,
                ..gemma_like()
            },
            ModelConfig {
                vocab_size: usize::MAX,
                ..gemma_like()
            },
            ModelConfig {
                n_layers: usize::MAX / 2,
                ..gemma_like()
            },
            ModelConfig {
                dim: 1 << 31,
                ..gemma_like()
            },
        ] {
            match bad.validate() {
                Err(EngineError::BadConfig(m)) => assert!(m.contains("supported maximum"), "{m}"),
                other => panic!("{other:?}"),
            }
            assert!(Session::new(&bad, 8).is_err());
            // The derived sizes saturate rather than wrap before validation.
            assert!(bad.q_dim() >= bad.n_heads.min(bad.head_dim));
        }
    }

    #[test]
    fn every_switched_on_tensor_is_required() {
        let cfg = gemma_like();
        let (dim, q, kv, hd, ffn) = (8u64, 8u64, 4u64, 4u64, 8u64);
        let shapes: Vec<(&str, Vec<u64>)> = vec![
            ("attn_norm.weight", vec![dim]),
            ("attn_q.weight", vec![q, dim]),
            ("attn_k.weight", vec![kv, dim]),
            ("attn_v.weight", vec![kv, dim]),
            ("attn_output.weight", vec![dim, q]),
            ("ffn_norm.weight", vec![dim]),
            ("ffn_gate.weight", vec![ffn, dim]),
            ("ffn_up.weight", vec![ffn, dim]),
            ("ffn_down.weight", vec![dim, ffn]),
            ("attn_q.bias", vec![q]),
            ("attn_k.bias", vec![kv]),
            ("attn_v.bias", vec![kv]),
            ("attn_q_norm.weight", vec![hd]),
            ("attn_k_norm.weight", vec![hd]),
            ("post_attention_norm.weight", vec![dim]),
            ("post_ffw_norm.weight", vec![dim]),
        ];
        let data = vec![0u8; 4 * 64];
        let names: Vec<String> = shapes.iter().map(|(n, _)| format!("blk.0.{n}")).collect();
        let lookup = |skip: Option<String>| {
            let (names, shapes, data) = (&names, &shapes, &data);
            move |name: &str| {
                if skip.as_deref() == Some(name) {
                    return None;
                }
                let i = names.iter().position(|n| n == name)?;
                let shape = &shapes[i].1;
                let n = shape.iter().product::<u64>() as usize;
                Some(TensorRef {
                    dtype: DType::F32,
                    shape: shape.as_slice(),
                    data: &data[..4 * n],
                })
            }
        };
        LayerWeights::load(&cfg, 0, &lookup(None)).unwrap();
        for name in &names[9..] {
            match LayerWeights::load(&cfg, 0, &lookup(Some(name.clone()))) {
                Err(EngineError::MissingTensor(n)) => assert_eq!(&n, name),
                other => panic!("{name}: {:?}", other.err()),
            }
        }
        // A llama config does not ask for them.
        let llama = ModelConfig {
            qkv_bias: false,
            qk_norm: false,
            sandwich_norms: false,
            ..cfg
        };
        let w = LayerWeights::load(&llama, 0, &lookup(Some("blk.0.attn_q_norm.weight".into())))
            .unwrap();
        assert!(w.attn_qk_norm.is_none() && w.attn_qkv_bias.is_none());
    }
}
