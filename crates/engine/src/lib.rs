//! The transformer runtime. No I/O, no async: callers hand it weight bytes and token ids.
//!
//! Read [`model`] first: the whole forward pass of one layer fits on a screen.

pub mod chat;
pub mod model;
pub mod ops;
pub mod quant;
pub mod sampler;
pub mod tokenizer;

pub use model::{
    EngineError, LayerWeights, Model, ResidentWeights, Session, TensorRef, TensorSource,
};
pub use sampler::{Sampler, SamplerConfig, SamplerError};
