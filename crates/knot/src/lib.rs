//! The knot container: a fixed header, JSON metadata, a codec byte, then a payload laid out so
//! that the resident tensors and each layer can be fetched with one range read.
//! This crate does no I/O: callers hand it byte slices.

mod dtype;
mod meta;

pub use dtype::DType;
pub use meta::{
    Metadata, ModelConfig, RopeStyle, Span, TensorEntry, TokenizerData, TokenizerEntry,
};
