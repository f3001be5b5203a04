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
//!
//! Files, in the order they depend on each other (each uses only those above it):
//! - `error.rs` — [`EngineError`].
//! - `config.rs` — the architectures this engine runs, [`ConfigExt`] (derived sizes and
//!   `validate`) and the `MAX_*` bounds on a config's sizes.
//! - `layout.rs` — where tensors are: [`TensorSource`], [`TensorSlot`], and
//!   [`LayerTensors`] / [`ResidentTensors`] as views (`*Weights`) or places in a span
//!   (`*Layout`).
//! - `head.rs` — both ends of a pass: [`embed`] and [`LmHead`].
//! - `session.rs` — [`Session`]: read this first; it opens with `run_block`, one transformer
//!   block on one screen, over the rows of one sequence or ([`Joint`]) several.
//! - `whole.rs` — [`Model`]: a whole file in memory, every layer at once.
//!
//! This file only declares and re-exports.
//!
//! [`ModelConfig`]: knot::ModelConfig

mod config;
mod error;
mod head;
mod layout;
mod session;
mod whole;

pub use config::{
    check_architecture, ConfigExt, MAX_DIM, MAX_FFN_DIM, MAX_HEADS, MAX_HEAD_DIM, MAX_LAYERS,
    MAX_NORM_EPS, MAX_QUERY_PRE_ATTN_SCALAR, MAX_VOCAB, SUPPORTED_ARCHITECTURES,
};
pub use error::EngineError;
pub use head::{embed, HeadBuffers, LmHead};
pub use layout::{
    knot_tensors, LayerLayout, LayerTensors, LayerWeights, ResidentLayout, ResidentTensors,
    ResidentWeights, TensorRef, TensorSlot, TensorSource,
};
pub use session::{Joint, LogitRows, Session, SessionMemory};
pub use whole::Model;

#[cfg(test)]
mod tests;
