//! The decode pipeline: what turns one step's logits into a token. A chain of logits stages
//! (each may change the logits — a mask writes −inf, a penalty scales) and, last, a picker that
//! turns the processed logits into the distribution the token is drawn from (greedy, sampled,
//! MOA). Shaped after llama.cpp's `llama_sampler` chain (apply / accept / reset) and HF's
//! `LogitsProcessorList`, plus `rollback(n)` so speculative decoding can undo what a rejected
//! draft advanced.
//!
//! Every step goes: stages in order → picker → draw (seeded PCG32) → accept. The pieces are
//! public so a verifier can run them apart: `apply` the stages, look at the `distribution`,
//! `accept` or `rollback`. Built from a [`DecodeConfig`] by [`Pipeline::new`].

//!
//! Files, each using only those listed before it:
//! - `weights.rs`: sampling weights as integers, and the shards' [`LevelSums`] of them;
//! - `error.rs` ([`PipelineError`]), `distribution.rs` ([`Distribution`] and the draw),
//!   `report.rs` ([`StageReport`], [`PickReport`], [`StepInfo`]);
//! - `partial.rs`: when a pick from part of the logits is the whole logits' ([`Settled`],
//!   [`PartialPick`]);
//! - `stage.rs`: the interfaces, [`LogitsStage`] and [`Picker`], with [`StepContext`] and
//!   [`MAX_ROLLBACK`];
//! - `config.rs` ([`DecodeConfig`]), `stages.rs` (the logits stages that ship: penalties, the
//!   COLTRANE mask), `pickers.rs` (greedy, sampling, MOA);
//! - `chain.rs`: [`Pipeline`], which builds the chain a config describes and runs it, on every
//!   logit or on part of them.
//!
//! This file only declares and re-exports.

mod chain;
mod config;
mod distribution;
mod error;
mod partial;
mod pickers;
mod report;
mod stage;
mod stages;
mod weights;

pub use chain::Pipeline;
pub use config::DecodeConfig;
pub use distribution::Distribution;
pub use error::PipelineError;
pub use partial::{PartialPick, Settled};
pub use pickers::{Greedy, MoaPicker, Sample};
pub use report::{PickReport, StageReport, StepInfo};
pub use stage::{LogitsStage, PartSums, Picker, StagePart, StepContext, Touched, MAX_ROLLBACK};
pub use stages::{ColtraneStage, CountPenalty, RepeatPenalty};
pub use weights::{exponent, LevelSums, LEVELS};

#[cfg(test)]
mod partial_tests;
#[cfg(test)]
mod tests;
