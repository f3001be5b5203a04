//! Converting GGUF files and HuggingFace directories to knot files.
//!
//! Both converters reduce their input to a [`ModelSource`] (config, tokenizer, tensor list and a
//! way to fetch one tensor's bytes), and [`write_knot`] does the rest: choose output dtypes, plan
//! the layout, stream tensors one at a time into `<output>.partial`, then rename it into place.

mod arch;
mod from_gguf;
mod from_hf;
mod requant;
mod tokenizer;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use knot::{DType, KnotBuilder, KnotError, ModelConfig, TokenizerData, WriteError};
use thiserror::Error;

use crate::gguf::GgufError;

pub use from_gguf::gguf_to_knot;
pub use from_hf::hf_to_knot;

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

/// Plans and writes the knot file; `fetch` returns a tensor's bytes in its source dtype.
pub(crate) fn write_knot(
    source: ModelSource,
    output: &Path,
    opts: &ConvertOptions,
    progress: Progress<'_>,
    mut fetch: impl FnMut(&SourceTensor) -> Result<Vec<u8>, ConvertError>,
) -> Result<Summary, ConvertError> {
    // The engine's bounds (layer count, sizes, finite floats) before anything is planned or
    // allocated from the source's numbers: a file the engine would refuse is not written.
    if let Err(e) = engine::model::ConfigExt::validate(&source.config) {
        return Err(ConvertError::InvalidConfig(match e {
            engine::EngineError::BadConfig(m) => m,
            other => other.to_string(),
        }));
    }
    let mut builder = KnotBuilder::new(
        opts.name.clone().unwrap_or(source.name),
        source.architecture,
        source.config,
        source.tokenizer,
    );
    builder.chat_template = source.chat_template;
    let by_name: std::collections::HashMap<&str, &SourceTensor> = source
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    for t in &source.tensors {
        builder.add_tensor(
            t.name.clone(),
            requant::output_dtype(t, opts.dtype),
            t.shape.clone(),
        );
    }
    let plan = builder.plan()?;
    let total: u64 = plan.tensors().iter().map(|t| t.size).sum();

    let partial = partial_path(output);
    let file = File::create(&partial).map_err(io_err(&partial))?;
    let result = (|| {
        let mut writer = plan.writer(BufWriter::with_capacity(1 << 20, file))?;
        let mut done = 0u64;
        let mut converted = 0usize;
        progress(0, total);
        for entry in plan.tensors() {
            // The plan was built from `source.tensors`, so every entry has a source.
            let src = by_name[entry.name.as_str()];
            let bytes = fetch(src)?;
            let out_dtype = DType::from_name(&entry.dtype).expect("plan dtypes are valid");
            let bytes = if out_dtype == src.dtype {
                bytes
            } else {
                converted += 1;
                requant::convert(src, &bytes, out_dtype)?
            };
            writer.write_tensor(&entry.name, &bytes)?;
            done += entry.size;
            progress(done, total);
        }
        let mut out = writer.finish()?;
        out.flush().map_err(io_err(&partial))?;
        out.into_inner()
            .map_err(|e| ConvertError::Io {
                path: partial.clone(),
                source: e.into_error(),
            })?
            .sync_all()
            .map_err(io_err(&partial))?;
        Ok(converted)
    })();
    let converted = match result {
        Ok(c) => c,
        Err(e) => {
            // Best effort: the partial file is garbage, the original error matters more.
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, output).map_err(io_err(output))?;
    Ok(Summary {
        name: plan.meta.name.clone(),
        architecture: plan.meta.architecture.clone(),
        n_layers: plan.meta.layers.len(),
        n_tensors: plan.tensors().len(),
        converted_tensors: converted,
        payload_offset: plan.payload_offset(),
        file_len: plan.file_len(),
    })
}

fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}

#[cfg(test)]
mod tests;
