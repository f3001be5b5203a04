//! The knot container: a fixed header, JSON metadata, a codec byte, then a payload laid out so
//! that the resident tensors and each layer can be fetched with one range read.
//! This crate does no I/O: callers hand it byte slices (the writer takes any `std::io::Write`).
//! The format is specified in `docs/knot-format.md`.

mod dtype;
mod error;
mod header;
mod meta;
mod names;
mod reader;
mod writer;

pub use dtype::DType;
pub use error::KnotError;
pub use header::{
    codec_offset, payload_offset, FixedHeader, ReadOptions, CODEC_RAW, DEFAULT_MAX_META_LEN,
    FIXED_HEADER_LEN, MAGIC, TENSOR_ALIGNMENT, VERSION,
};
pub use meta::{
    FfnActivation, Metadata, ModelConfig, RopeStyle, Span, TensorEntry, TokenizerData,
    TokenizerEntry,
};
pub use names::{
    layer_of, layer_tensor_name, CANONICAL_LAYER_TENSORS, OUTPUT, OUTPUT_NORM, TOKEN_EMBD,
};
pub use reader::{Knot, TensorInfo};
pub use writer::{KnotBuilder, KnotPlan, KnotWriter, TensorSpec, WriteError};

#[cfg(test)]
mod tests;
