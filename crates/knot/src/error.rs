//! Every way a knot file can be malformed, each with enough context to say where.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum KnotError {
    #[error("not a knot file: magic is {0:02x?}, expected \"KNOT\"")]
    BadMagic([u8; 4]),
    #[error("unsupported knot format version {0} (this reader knows version 1)")]
    UnsupportedVersion(u16),
    #[error("metadata length is 0")]
    EmptyMetadata,
    #[error("metadata length {len} exceeds the cap of {max} bytes")]
    MetadataTooLong { len: u32, max: u32 },
    #[error("truncated: {what} needs {needed} bytes, only {available} available")]
    Truncated {
        what: &'static str,
        needed: u64,
        available: u64,
    },
    #[error("metadata is not valid UTF-8")]
    MetadataNotUtf8,
    #[error("metadata is not valid JSON: {0}")]
    MetadataInvalidJson(String),
    #[error("metadata JSON is not an object")]
    MetadataNotObject,
    #[error("metadata does not match the knot schema: {0}")]
    MetadataSchema(String),
    #[error("header padding byte at offset {0} is not zero")]
    NonZeroPadding(u64),
    #[error("unsupported payload codec {0} (only 0 = raw is defined)")]
    UnsupportedCodec(u8),
    #[error("tensor {tensor}: unknown dtype {dtype:?}")]
    UnknownDType { tensor: String, dtype: String },
    #[error("tensor {tensor}: invalid shape {shape:?}: {reason}")]
    InvalidShape {
        tensor: String,
        shape: Vec<u64>,
        reason: &'static str,
    },
    #[error(
        "tensor {tensor}: size {actual} does not match {expected} bytes implied by dtype and shape"
    )]
    SizeMismatch {
        tensor: String,
        expected: u64,
        actual: u64,
    },
    #[error("tensor {0} appears twice")]
    DuplicateTensor(String),
    #[error("{what} ends at byte {end} but the file has {file_len} bytes")]
    OutOfBounds {
        what: String,
        end: u64,
        file_len: u64,
    },
    #[error("offset or size of {0} overflows")]
    OffsetOverflow(String),
    #[error("{first} overlaps {second}")]
    Overlap { first: String, second: String },
    #[error("tensor {tensor} starts at absolute offset {absolute}, not a multiple of {alignment}")]
    Misaligned {
        tensor: String,
        absolute: u64,
        alignment: u64,
    },
    #[error("tensor {tensor} lies outside the span of {span}")]
    OutsideSpan { tensor: String, span: String },
    #[error("the {span} span is not tight around its tensors: {reason}")]
    LooseSpan { span: String, reason: String },
    #[error("{spans} layer spans but config.n_layers is {n_layers}")]
    LayerCount { spans: usize, n_layers: usize },
    #[error("tensor {tensor} names layer {layer}, but the model has {n_layers} layers")]
    LayerOutOfRange {
        tensor: String,
        layer: usize,
        n_layers: usize,
    },
    #[error("required tensor {0} is missing")]
    MissingTensor(String),
    #[error("tokenizer blob {offset}+{size} lies outside the payload ({payload_len} bytes)")]
    TokenizerOutOfRange {
        offset: u64,
        size: u64,
        payload_len: u64,
    },
    #[error("tokenizer blob is not valid tokenizer JSON: {0}")]
    TokenizerBlob(String),
    #[error("cannot serialize metadata: {0}")]
    Serialize(String),
}
