//! What building or running a decode pipeline can refuse.

use crate::health::HealthError;
use crate::sampler::SamplerError;
use coltrane::{ColtraneError, VocabError};
use moa::MoaError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Moa(#[from] MoaError),
    #[error("no token can be picked: every logit is -inf or NaN")]
    NoCandidates,
    #[error(transparent)]
    Coltrane(#[from] ColtraneError),
    #[error("the constraint cannot index this vocabulary: {0}")]
    Vocab(#[from] VocabError),
    #[error(transparent)]
    Health(#[from] HealthError),
    #[error("cannot roll back {requested} tokens: {available} can be undone")]
    Rollback { requested: usize, available: usize },
}
