//! Converting GGUF files and HuggingFace directories to knot files.
//!
//! Both converters reduce their input to a [`ModelSource`] (config, tokenizer, tensor list and a
//! way to fetch one tensor's bytes), and [`write_knot`] (`write.rs`) does the rest: choose output
//! dtypes, plan the layout, stream tensors one at a time into `<output>.partial`, then rename it
//! into place. This file holds the options, the summary and the error type the others share.

mod arch;
mod from_gguf;
mod from_hf;
mod requant;
mod tokenizer;
mod write;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use knot::{DType, KnotError, ModelConfig, TokenizerData, WriteError};
use thiserror::Error;

use crate::gguf::GgufError;

pub use from_gguf::gguf_to_knot;
pub use from_hf::hf_to_knot;
pub(crate) use write::write_knot;

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

/// Called with (bytes of tensor data done, total bytes of tensor data).
pub type Progress<'a> = &'a dyn Fn(u64, u64);

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
    #[error("{path}: invalid JSON: {message}")]
    Json { path: PathBuf, message: String },
    #[error("{path}: invalid safetensors file: {message}")]
    Safetensors { path: PathBuf, message: String },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A tensor as the source stores it, under its knot (GGUF) name.
#[derive(Debug, Clone)]
pub(crate) struct SourceTensor {
    pub name: String,
    pub dtype: DType,
    /// Outermost dimension first.
    pub shape: Vec<u64>,
}

/// Everything a converter extracts before tensor bytes are copied.
pub(crate) struct ModelSource {
    pub name: String,
    pub architecture: String,
    pub config: ModelConfig,
    pub tokenizer: TokenizerData,
    pub chat_template: Option<String>,
    pub tensors: Vec<SourceTensor>,
}

#[cfg(test)]
mod tests;
