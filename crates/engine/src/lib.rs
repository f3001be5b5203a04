//! The transformer runtime. No I/O, no async: callers hand it weight bytes and token ids.
//!
//! Read [`model`] first, and in it [`Session::run_layer`]: the whole forward pass of one layer
//! fits on a screen.

// The threaded wasm build (nightly, shared memory) parks idle workers on a futex.
#![cfg_attr(
    all(target_arch = "wasm32", target_feature = "atomics"),
    feature(stdarch_wasm_atomic_wait)
)]

pub mod attention;
mod buffer;
pub mod chat;
pub mod decode;
pub mod draft;
pub mod health;
pub mod kv;
pub mod model;
pub mod ops;
pub mod options;
pub mod pipeline;
pub mod quant;
pub mod sampler;
pub mod tokenizer;

#[cfg(test)]
mod test_support;

pub use kv::{KvCache, KvType};
pub use model::{
    embed, EngineError, HeadBuffers, Joint, LayerLayout, LayerWeights, LmHead, LogitRows, Model,
    ResidentLayout, ResidentWeights, Session, SessionMemory, TensorRef, TensorSlot, TensorSource,
};
pub use pipeline::{DecodeConfig, Pipeline, PipelineError, StepInfo};
pub use sampler::{SamplerConfig, SamplerError};
