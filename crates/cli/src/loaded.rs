//! A knot file read whole into memory, with the views the commands need.

use engine::tokenizer::Tokenizer;
use engine::Model;
use knot::{Knot, TokenizerData};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid knot file: {source}")]
    Knot {
        path: String,
        source: knot::KnotError,
    },
    #[error("the tokenizer blob is not valid: {0}")]
    TokenizerBlob(String),
    #[error(transparent)]
    Tokenizer(#[from] engine::tokenizer::TokenizerError),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
}

pub struct LoadedKnot {
    pub bytes: Vec<u8>,
    pub knot: Knot,
}

impl LoadedKnot {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: p.clone(),
            source,
        })?;
        let knot =
            Knot::from_bytes(&bytes).map_err(|source| LoadError::Knot { path: p, source })?;
        Ok(LoadedKnot { bytes, knot })
    }

    /// Borrowed views of every tensor; nothing is copied or dequantized.
    pub fn model(&self) -> Result<Model<'_>, LoadError> {
        engine::model::check_architecture(&self.knot.meta.architecture)?;
        let source = engine::model::knot_tensors(&self.knot, &self.bytes);
        Ok(Model::load(&self.knot.meta.config, &source)?)
    }

    pub fn tokenizer_data(&self) -> Result<TokenizerData, LoadError> {
        let span = self.knot.meta.tokenizer.blob;
        let start = self.knot.payload_offset as usize + span.offset as usize;
        let blob = &self.bytes[start..start + span.size as usize];
        serde_json::from_slice(blob).map_err(|e| LoadError::TokenizerBlob(e.to_string()))
    }

    pub fn tokenizer(&self) -> Result<Tokenizer, LoadError> {
        Ok(Tokenizer::from_data(&self.tokenizer_data()?)?)
    }
}
