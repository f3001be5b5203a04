//! What a constraint is asked to do — the preset, eddy, depth bound, fallback threshold and
//! prosody — checked in one place, and the crate's error type.

use crate::eddy::EddyConfig;
use crate::fold;
use crate::narrow::compile_schema;
use crate::schema::{Schema, SchemaError};

/// The structure a preset enforces.
#[derive(Debug, Clone, PartialEq)]
pub enum Preset {
    /// Brackets and quotes balance, depth ≤ `max_depth`, end-of-text only when every fold is
    /// closed. Soft: it falls back.
    Balanced,
    /// Exactly one JSON value (RFC 8259), then end-of-text. Hard.
    Json,
    /// One JSON value valid against this schema (the subset in `schema.rs`). Hard.
    JsonSchema(serde_json::Value),
}

/// Terminal prosody: as the token budget runs out, lean toward ending the sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProsodyMode {
    #[default]
    Off,
    /// Record what the bias would have done, without changing the logits.
    Observe,
    Bias,
}

impl ProsodyMode {
    pub fn parse(s: &str) -> Option<ProsodyMode> {
        match s {
            "off" => Some(ProsodyMode::Off),
            "observe" => Some(ProsodyMode::Observe),
            "bias" => Some(ProsodyMode::Bias),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColtraneConfig {
    pub preset: Option<Preset>,
    pub eddy: Option<EddyConfig>,
    /// Deepest bracket nesting `balanced` allows (1..=64).
    pub max_depth: usize,
    /// The soft tiers relax when the allowed tokens hold less than this share of the model's
    /// probability (0 disables the fallback; at most 1).
    pub fallback_mass: f64,
    pub prosody: ProsodyMode,
}

impl Default for ColtraneConfig {
    fn default() -> Self {
        ColtraneConfig {
            preset: None,
            eddy: None,
            max_depth: 16,
            fallback_mass: 0.05,
            prosody: ProsodyMode::Off,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ColtraneError {
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error("coltrane.maxDepth must be an integer in [1, 64], got {0}")]
    MaxDepth(usize),
    #[error("coltrane.fallbackMass must be a number in [0, 1], got {0}")]
    FallbackMass(f64),
    #[error("coltrane.eddy needs ngram and repeats of at least 1 (ngram at most 64), got ngram {ngram}, repeats {repeats}")]
    Eddy { ngram: usize, repeats: usize },
    #[error("token {0} breaks the constraint's hard rules")]
    Forbidden(u32),
    #[error("cannot roll back {requested} tokens: {available} can be undone")]
    Rollback { requested: usize, available: usize },
    #[error("invalid response_format: {0}")]
    ResponseFormat(String),
}

impl ColtraneConfig {
    pub fn validate(&self) -> Result<(), ColtraneError> {
        if !(1..=fold::MAX_DEPTH).contains(&self.max_depth) {
            return Err(ColtraneError::MaxDepth(self.max_depth));
        }
        if !(0.0..=1.0).contains(&self.fallback_mass) {
            return Err(ColtraneError::FallbackMass(self.fallback_mass));
        }
        if let Some(e) = &self.eddy {
            if e.ngram == 0 || e.ngram > 64 || e.repeats == 0 {
                return Err(ColtraneError::Eddy {
                    ngram: e.ngram,
                    repeats: e.repeats,
                });
            }
        }
        Ok(())
    }

    /// Compiles what the config needs before decoding: the schema, checked and turned into the
    /// matcher's graph.
    pub fn compile(&self) -> Result<Option<Schema>, ColtraneError> {
        self.validate()?;
        Ok(match &self.preset {
            Some(Preset::Json) => Some(Schema::any()),
            Some(Preset::JsonSchema(v)) => Some(compile_schema(v)?),
            _ => None,
        })
    }

    /// The canonical spelling of the JSON preset, which names its shared matcher.
    pub(crate) fn matcher_key(&self) -> Option<String> {
        match &self.preset {
            Some(Preset::Json) => Some("json".into()),
            Some(Preset::JsonSchema(v)) => Some(format!("schema:{v}")),
            _ => None,
        }
    }
}
