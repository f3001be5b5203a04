//! The metadata JSON schema. Offsets are relative to the payload start unless noted.

use serde::{Deserialize, Serialize};

/// The whole metadata object stored after the fixed header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: String,
    /// `llama`, `qwen2`, `qwen3`, `gemma3`.
    pub architecture: String,
    pub config: ModelConfig,
    /// Every tensor, resident ones first, then layer by layer, in file order.
    pub tensors: Vec<TensorEntry>,
    /// The span holding every tensor that is not part of a layer (token_embd, output_norm, output).
    pub resident: Span,
    /// `layers[i]` covers exactly the tensors named `blk.{i}.*`.
    pub layers: Vec<Span>,
    pub tokenizer: TokenizerEntry,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<String>,
}

/// Every hyperparameter the engine needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub n_layers: usize,
    /// Hidden size (embedding length).
    pub dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Feed-forward inner size.
    pub ffn_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rope_theta: f32,
    pub rope_style: RopeStyle,
    /// Number of leading dims of each head that are rotated (usually `head_dim`).
    pub rope_dim: usize,
    pub norm_eps: f32,
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub bos_id: Option<u32>,
    /// Ids that end generation (eos, and e.g. `<|im_end|>` / `<end_of_turn>`).
    #[serde(default)]
    pub eos_ids: Vec<u32>,
    #[serde(default)]
    pub pad_id: Option<u32>,
    /// Whether a BOS token is prepended when encoding a prompt.
    #[serde(default)]
    pub add_bos: bool,

    // Architecture variations. Every default is llama's and is left out when written, so llama
    // files read and write exactly as before these fields existed.
    /// Q, K and V projections carry biases (`blk.N.attn_{q,k,v}.bias`; qwen2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (`attn_q_norm`, `attn_k_norm`; qwen3, gemma3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub qk_norm: bool,
    /// RMSNorm of the attention and FFN outputs before each residual add (`post_attention_norm`,
    /// `post_ffw_norm`; gemma3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandwich_norms: bool,
    /// Multiply the token embedding by √dim (gemma3).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scale_embeddings: bool,
    /// Activation of the gated FFN.
    #[serde(default, skip_serializing_if = "is_default")]
    pub ffn_activation: FfnActivation,
    /// Attention scores are scaled by `1/√query_pre_attn_scalar`; `None` means `head_dim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_pre_attn_scalar: Option<f32>,
    /// Local layers see only the last `sliding_window` positions (the current one included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// With a sliding window: every `sliding_window_pattern`-th layer (1-based) is global, the
    /// others local. 0 makes every layer local.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sliding_window_pattern: usize,
    /// RoPE base of local (sliding-window) layers; `None` means `rope_theta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta_local: Option<f32>,
}

impl ModelConfig {
    /// Whether `layer` attends through the sliding window.
    pub fn is_local_layer(&self, layer: usize) -> bool {
        self.sliding_window.is_some()
            && (self.sliding_window_pattern == 0
                || !(layer + 1).is_multiple_of(self.sliding_window_pattern))
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The nonlinearity of the gated feed-forward block: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FfnActivation {
    /// SiLU (llama, qwen2, qwen3).
    #[default]
    Silu,
    /// GELU with the tanh approximation (gemma3's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// Which dims RoPE pairs together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): GGUF llama files, whose Q/K rows llama.cpp's converter permuted.
    Interleaved,
    /// Pairs (i, i + d/2) ("rotate half"): HF checkpoints, qwen2/qwen3/gemma3 GGUFs.
    Neox,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// GGUF name, e.g. `blk.3.attn_q.weight`.
    pub name: String,
    /// DType name (`f32`, `q4_1`, …); kept as text so an unknown value is a typed error.
    pub dtype: String,
    /// Outermost dimension first (numpy/PyTorch order): a linear weight is `[out, in]`.
    pub shape: Vec<u64>,
    pub offset: u64,
    pub size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Span {
    pub offset: u64,
    pub size: u64,
}

impl Span {
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }
}

/// Where the tokenizer blob (a JSON [`TokenizerData`]) sits in the payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerEntry {
    /// GGUF `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub model: String,
    /// GGUF `tokenizer.ggml.pre`: pre-tokenizer family (`smollm`, `gpt2`, `llama-bpe`, `qwen2`, …).
    #[serde(default)]
    pub pre: Option<String>,
    pub blob: Span,
}

/// The tokenizer blob's contents: everything needed to encode and decode text.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TokenizerData {
    pub model: String,
    #[serde(default)]
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    #[serde(default)]
    pub token_types: Vec<i32>,
    /// BPE merges, `"a b"` in rank order (gpt2 model).
    #[serde(default)]
    pub merges: Vec<String>,
    /// SentencePiece scores (llama model).
    #[serde(default)]
    pub scores: Vec<f32>,
    #[serde(default)]
    pub bos_id: Option<u32>,
    #[serde(default)]
    pub eos_id: Option<u32>,
    #[serde(default)]
    pub unk_id: Option<u32>,
    #[serde(default)]
    pub pad_id: Option<u32>,
    #[serde(default)]
    pub add_bos: bool,
    #[serde(default)]
    pub add_eos: bool,
    /// GGUF `tokenizer.ggml.add_space_prefix` (llama model): whether SentencePiece prepends `▁`
    /// to the text. `None` when the file does not say (llama.cpp then prepends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_space_prefix: Option<bool>,
}
