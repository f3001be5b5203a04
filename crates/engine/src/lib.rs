//! The transformer runtime. No I/O, no async: callers hand it weight bytes and token ids.
//!
//! Read [`model`] first: the whole forward pass of one layer fits on a screen.

pub mod chat;
pub mod decode;
pub mod draft;
pub mod kv;
pub mod model;
pub mod ops;
pub mod pipeline;
pub mod quant;
pub mod sampler;
pub mod tokenizer;

pub use kv::{KvCache, KvType};
pub use model::{
    embed, EngineError, HeadBuffers, LayerLayout, LayerWeights, LmHead, Model, ResidentLayout,
    ResidentWeights, Session, SessionMemory, TensorRef, TensorSlot, TensorSource,
};
pub use pipeline::{DecodeConfig, Pipeline, PipelineError, StepInfo};
pub use sampler::{SamplerConfig, SamplerError};
