//! [`DecodeConfig`]: what a request asks of the pipeline, checked before one is built.

use super::error::PipelineError;
use crate::health::HealthConfig;
use crate::sampler::SamplerConfig;
use coltrane::ColtraneConfig;
use moa::MoaConfig;

/// How a step is decoded: the sampling settings, optionally MOA as the picker, optionally a
/// COLTRANE constraint as the last logits stage.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DecodeConfig {
    pub sampling: SamplerConfig,
    /// When set, MOA picks the token: `sampling.temperature`, `top_k`, `top_p` and `min_p` do
    /// not apply (MOA has its own temperatures and candidate set); the penalty and seed do.
    pub moa: Option<MoaConfig>,
    /// When set, the token mask (it needs the tokenizer, so `Generation` adds the stage).
    pub coltrane: Option<ColtraneConfig>,
    /// When set, the health monitor watches every step (docs/health.md).
    pub health: Option<HealthConfig>,
}

impl DecodeConfig {
    pub fn validate(&self) -> Result<(), PipelineError> {
        self.sampling.validate()?;
        if let Some(m) = &self.moa {
            m.validate()?;
        }
        if let Some(c) = &self.coltrane {
            c.compile()?;
        }
        if let Some(h) = &self.health {
            h.validate()?;
        }
        Ok(())
    }
}
