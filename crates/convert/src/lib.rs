//! GGUF → knot conversion without I/O, for the `knot` command and the wasm package alike.
//!
//! ```text
//! bytes ──PrefixReader::feed*──▶ GgufFile ──ConversionPlan::from_gguf──▶ header + [Piece]
//! ```
//! A driver feeds the GGUF's first bytes to a [`gguf::PrefixReader`] until it holds the header,
//! metadata and tensor table; [`ConversionPlan`] then gives the knot file's header bytes and its
//! payload as an ordered list of [`Piece`]s: literal bytes (tokenizer blob, alignment padding) or
//! a source tensor's byte range, which the driver reads and passes through
//! [`ConversionPlan::transform`] (a requantization, or nothing). So a driver holds at most one
//! tensor at a time, never the file. The HF-safetensors converter (in the CLI) builds the same
//! plan from its own [`ModelSource`].
//!
//! `gguf/` is the GGUF reader; `arch.rs` the per-architecture facts; `tokenizer.rs` the
//! tokenizer extraction (GGUF metadata and HF `tokenizer.json`); `from_gguf.rs` GGUF metadata →
//! [`ModelSource`]; `requant.rs` the `--dtype` choices and re-encoding; `plan.rs` the plan.

pub mod arch;
mod from_gguf;
pub mod gguf;
mod plan;
pub mod requant;
pub mod tokenizer;

use std::path::PathBuf;
use std::str::FromStr;

use knot::{DType, KnotError, ModelConfig, TokenizerData, WriteError};
use thiserror::Error;

pub use from_gguf::model_source as gguf_model_source;
pub use gguf::GgufError;
pub use plan::{ConversionPlan, Piece, TensorPiece};

/// Output element format for weights (`--dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetDType {
    /// Copy tensor bytes unchanged.
    #[default]
    Keep,
    F32,
    F16,
    Q8_0,
    Q4_0,
    /// Q4_K where rows are whole 256-value super-blocks, Q5_0 for other rows (as llama.cpp).
    Q4K,
}

impl TargetDType {
    pub const NAMES: [&'static str; 6] = ["keep", "f32", "f16", "q8_0", "q4_0", "q4_k"];

    fn dtype(self) -> Option<DType> {
        match self {
            TargetDType::Keep => None,
            TargetDType::F32 => Some(DType::F32),
            TargetDType::F16 => Some(DType::F16),
            TargetDType::Q8_0 => Some(DType::Q8_0),
            TargetDType::Q4_0 => Some(DType::Q4_0),
            TargetDType::Q4K => Some(DType::Q4K),
        }
    }
}

impl FromStr for TargetDType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "keep" => TargetDType::Keep,
            "f32" => TargetDType::F32,
            "f16" => TargetDType::F16,
            "q8_0" => TargetDType::Q8_0,
            "q4_0" => TargetDType::Q4_0,
            "q4_k" => TargetDType::Q4K,
            other => {
                return Err(format!(
                    "unknown dtype {other:?} (expected one of {})",
                    TargetDType::NAMES.join(", ")
                ))
            }
        })
    }
}

#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    pub dtype: TargetDType,
    /// Model name stored in the metadata; defaults to the source's own name.
    pub name: Option<String>,
}

/// What a conversion produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub name: String,
    pub architecture: String,
    pub n_layers: usize,
    pub n_tensors: usize,
    /// Tensors whose dtype changed.
    pub converted_tensors: usize,
    pub payload_offset: u64,
    pub file_len: u64,
}

/// Why a conversion failed. `Io`, `Json` and `Safetensors` are the file drivers' (the CLI's
/// HF reader); this crate itself reads no files.
#[derive(Debug, Error)]
pub enum ConvertError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("GGUF: {0}")]
    Gguf(#[from] GgufError),
    #[error("knot layout: {0}")]
    Knot(#[from] KnotError),
    #[error("writing knot: {0}")]
    Write(#[from] WriteError),
    #[error("unsupported architecture {0:?} (supported: {supported})", supported = arch::SUPPORTED.join(", "))]
    UnsupportedArchitecture(String),
    #[error("missing metadata key {0}")]
    MissingKey(String),
    #[error("metadata key {key}: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("tensor {0} not found")]
    MissingTensor(String),
    #[error("tensor {tensor}: {message}")]
    Tensor { tensor: String, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// [`ConversionPlan::transform`] was asked for a piece that is not a tensor.
    #[error("piece {0} is not a tensor of this plan")]
    NotATensor(usize),
    #[error("{path}: invalid JSON: {message}")]
    Json { path: PathBuf, message: String },
    #[error("{path}: invalid safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
}

/// Where a source tensor's bytes sit in the source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceRange {
    /// Absolute byte offset.
    pub offset: u64,
    pub len: u64,
}

/// A tensor as the source stores it, under its knot (GGUF) name.
#[derive(Debug, Clone)]
pub struct SourceTensor {
    pub name: String,
    pub dtype: DType,
    /// Outermost dimension first.
    pub shape: Vec<u64>,
    /// Its bytes in the source file, when the driver reads them as they are (GGUF); `None` when
    /// the driver produces them itself (HF: several shards, some tensors re-encoded on reading).
    pub range: Option<SourceRange>,
}

/// Everything a converter extracts before tensor bytes are copied.
pub struct ModelSource {
    pub name: String,
    pub architecture: String,
    pub config: ModelConfig,
    pub tokenizer: TokenizerData,
    pub chat_template: Option<String>,
    pub tensors: Vec<SourceTensor>,
}
