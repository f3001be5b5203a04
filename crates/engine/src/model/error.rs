//! The engine's one error type: everything a caller can get wrong (ids, shapes, order,
//! sizes) comes back as an [`EngineError`], never a panic.

use crate::buffer::TooLarge;
use crate::quant::QuantError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("token id {id} is out of range for a vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("the context is full: {needed} positions needed, the session holds {max}")]
    ContextFull { needed: usize, max: usize },
    #[error("empty batch: at least one token is needed")]
    EmptyBatch,
    #[error("missing tensor {0}")]
    MissingTensor(String),
    #[error("tensor {name} has shape {got:?}, expected {expected:?}")]
    BadShape {
        name: String,
        got: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("layers must run in order: expected layer {expected}, got {got}")]
    LayerOrder { expected: usize, got: usize },
    #[error("unsupported architecture {0:?}")]
    UnsupportedArchitecture(String),
    #[error("invalid config: {0}")]
    BadConfig(String),
    #[error("cannot rewind to position {to}: the session holds {held} and can go back to {earliest} (rewinds go back, between batches)")]
    Rewind {
        to: usize,
        held: usize,
        earliest: usize,
    },
    #[error("a batch is in progress")]
    Busy,
    #[error("this session runs layers {start}..{end}: {what}")]
    LayerRange {
        start: usize,
        end: usize,
        what: &'static str,
    },
    #[error("hidden states of {got} values are not whole rows of {dim}")]
    HiddenShape { got: usize, dim: usize },
    #[error("{what} needs {bytes} bytes, more than this platform can address")]
    TooLarge { what: &'static str, bytes: u128 },
    #[error("a span of {got} bytes is too short: its tensors need {needed}")]
    SpanTooShort { needed: usize, got: usize },
    #[error(transparent)]
    Quant(#[from] QuantError),
}

impl From<TooLarge> for EngineError {
    fn from(e: TooLarge) -> Self {
        EngineError::TooLarge {
            what: e.what,
            bytes: e.bytes,
        }
    }
}
