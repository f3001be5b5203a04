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

mod pickers;
mod stages;

pub use pickers::{Greedy, MoaPicker, Sample};
pub use stages::{ColtraneStage, CountPenalty, RepeatPenalty};

use crate::sampler::{Pcg32, SamplerConfig, SamplerError};
use coltrane::{ColtraneConfig, ColtraneError, VocabError};
use moa::{MoaConfig, MoaError, MoaReport};

/// Accepted tokens any pipeline can roll back (the stages keep that much history).
pub const MAX_ROLLBACK: usize = 64;
const _: () = assert!(MAX_ROLLBACK <= moa::HISTORY);

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
    #[error("cannot roll back {requested} tokens: {available} can be undone")]
    Rollback { requested: usize, available: usize },
}

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
        Ok(())
    }
}

/// What a stage may know about the step besides its logits.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepContext {
    /// Tokens the generation may still produce, this one included (`None`: no limit known).
    pub remaining: Option<usize>,
    /// A clock in milliseconds, for stages that time themselves (none in plain engine use:
    /// `Instant` is unavailable on wasm32-unknown-unknown, the host passes the JS clock).
    pub clock: Option<fn() -> f64>,
}

/// A stage that reads or changes a step's logits before the pick.
pub trait LogitsStage {
    fn name(&self) -> &'static str;
    /// Changes `logits` in place (masking writes −inf) and says what it did.
    fn apply(
        &mut self,
        logits: &mut [f32],
        ctx: &StepContext,
    ) -> Result<StageReport, PipelineError>;
    /// A picked token was accepted.
    fn accept(&mut self, token: u32);
    /// A token of the context (prompt, earlier turns) was accepted: by default the same as a
    /// picked one; a constraint on the output ignores it.
    fn accept_context(&mut self, token: u32) {
        self.accept(token);
    }
    /// How many leading tokens of a speculative draft this stage could let through, each after
    /// the ones before it, leaving no trace (a mask answers; others allow all). `remaining` is
    /// the budget at the draft's first token.
    fn allowed_prefix(&mut self, draft: &[u32], _remaining: Option<usize>) -> usize {
        draft.len()
    }
    /// What the stage measured over the generation, if it keeps such numbers.
    fn metrics(&self) -> Option<coltrane::Metrics> {
        None
    }
    /// Undoes the last `n` accepts; the pipeline guarantees `n` ≤ [`MAX_ROLLBACK`] and ≤ the
    /// tokens accepted since the last reset.
    fn rollback(&mut self, n: usize);
    fn reset(&mut self);
}

/// The last stage: the distribution a token is drawn from, given the processed logits.
pub trait Picker {
    fn distribution(
        &mut self,
        logits: &[f32],
        out: &mut Distribution,
    ) -> Result<PickReport, PipelineError>;
    fn accept(&mut self, _token: u32) {}
    fn rollback(&mut self, _n: usize) {}
    fn reset(&mut self) {}
}

/// The tokens a pick can draw and their weights, in the order a draw walks them.
#[derive(Debug, Clone, Default)]
pub struct Distribution {
    entries: Vec<(u32, f32)>,
    /// One token, chosen without randomness (greedy): drawing it uses no random number.
    certain: bool,
}

impl Distribution {
    /// A single token picked without randomness.
    pub fn set_certain(&mut self, id: u32) {
        self.entries.clear();
        self.entries.push((id, 1.0));
        self.certain = true;
    }

    /// Weighted entries to fill (weights need not sum to 1).
    pub fn weighted(&mut self) -> &mut Vec<(u32, f32)> {
        self.certain = false;
        &mut self.entries
    }

    pub fn entries(&self) -> &[(u32, f32)] {
        &self.entries
    }

    /// Tokens with a nonzero chance.
    pub fn candidates(&self) -> usize {
        self.entries.iter().filter(|e| e.1 > 0.0).count()
    }

    /// Normalized probability of `id` (0 if it cannot be drawn).
    pub fn probability(&self, id: u32) -> f32 {
        let total: f32 = self.entries.iter().map(|e| e.1).sum();
        match self.entries.iter().find(|e| e.0 == id) {
            Some(e) if total > 0.0 => e.1 / total,
            _ => 0.0,
        }
    }

    /// Draws a token: one uniform number scaled by the total weight, walked down the entries.
    pub fn draw(&self, rng: &mut Pcg32) -> Result<u32, PipelineError> {
        let last = self.entries.last().ok_or(PipelineError::NoCandidates)?.0;
        if self.certain {
            return Ok(last);
        }
        let total: f32 = self.entries.iter().map(|e| e.1).sum();
        let mut r = rng.next_f32() * total;
        for e in &self.entries {
            r -= e.1;
            if r < 0.0 {
                return Ok(e.0);
            }
        }
        // Rounding left a sliver: the last entry takes it.
        Ok(last)
    }
}

/// What one logits stage did at a step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StageReport {
    pub stage: &'static str,
    /// Logits it changed.
    pub changed: usize,
    /// COLTRANE's numbers (mask size, fallback, eddy bans, prosody, mask time).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub coltrane: Option<coltrane::StepReport>,
}

impl StageReport {
    pub fn changed(stage: &'static str, changed: usize) -> StageReport {
        StageReport {
            stage,
            changed,
            coltrane: None,
        }
    }
}

/// What the picker did at a step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "picker", rename_all = "snake_case")]
pub enum PickReport {
    Greedy,
    Sample,
    Moa(MoaReport),
}

/// Per-step metadata: the token, which stages ran and what they did, and the picker's numbers
/// (for MOA: temperatures, survivors, weights, deficit, entropy, spread, ratio, fallback, valve,
/// flattened into the object).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepInfo {
    pub token: u32,
    pub stages: Vec<StageReport>,
    /// Tokens the pick could have drawn.
    pub candidates: usize,
    #[serde(flatten)]
    pub pick: PickReport,
}

impl StepInfo {
    pub fn moa(&self) -> Option<&MoaReport> {
        match &self.pick {
            PickReport::Moa(r) => Some(r),
            _ => None,
        }
    }
}

/// Stages, a picker, and the seeded generator every draw uses.
pub struct Pipeline {
    stages: Vec<Box<dyn LogitsStage>>,
    picker: Box<dyn Picker>,
    rng: Pcg32,
    dist: Distribution,
    /// Tokens accepted since the last reset, up to MAX_ROLLBACK (what rollback may undo).
    undoable: usize,
}

impl Pipeline {
    /// The pipeline a config describes: a repetition penalty stage when the penalty is not 1,
    /// a presence/frequency penalty stage when either is not 0,
    /// then MOA, sampling or greedy as the picker.
    pub fn new(cfg: &DecodeConfig) -> Result<Pipeline, PipelineError> {
        cfg.validate()?;
        let s = &cfg.sampling;
        let mut stages: Vec<Box<dyn LogitsStage>> = Vec::new();
        if s.repeat_penalty != 1.0 {
            stages.push(Box::new(RepeatPenalty::new(
                s.repeat_penalty,
                s.repeat_last_n,
            )));
        }
        if s.presence_penalty != 0.0 || s.frequency_penalty != 0.0 {
            stages.push(Box::new(CountPenalty::new(
                s.presence_penalty,
                s.frequency_penalty,
            )));
        }
        let picker: Box<dyn Picker> = match (&cfg.moa, s.temperature) {
            (Some(m), _) => Box::new(MoaPicker::new(m.clone())?),
            (None, 0.0) => Box::new(Greedy),
            (None, _) => Box::new(Sample::new(s)),
        };
        Ok(Pipeline::from_parts(stages, picker, s.seed))
    }

    pub fn from_parts(
        stages: Vec<Box<dyn LogitsStage>>,
        picker: Box<dyn Picker>,
        seed: u64,
    ) -> Pipeline {
        Pipeline {
            stages,
            picker,
            rng: Pcg32::new(seed),
            dist: Distribution::default(),
            undoable: 0,
        }
    }

    /// Adds a stage after the existing ones (before the picker).
    pub fn push_stage(&mut self, stage: Box<dyn LogitsStage>) {
        self.stages.push(stage);
    }

    /// Runs the stages over `logits`, in order.
    pub fn apply(
        &mut self,
        logits: &mut [f32],
        ctx: &StepContext,
    ) -> Result<Vec<StageReport>, PipelineError> {
        self.stages
            .iter_mut()
            .map(|s| s.apply(logits, ctx))
            .collect()
    }

    /// How many leading tokens of `draft` every stage could let through (drafts are trimmed to
    /// it before a verify pass, so no position is spent on a token a mask forbids).
    pub fn allowed_prefix(&mut self, draft: &[u32], remaining: Option<usize>) -> usize {
        self.stages
            .iter_mut()
            .fold(draft.len(), |n, s| s.allowed_prefix(&draft[..n], remaining))
    }

    /// The constraint's metrics over the generation, if a stage keeps them.
    pub fn constraint_metrics(&self) -> Option<coltrane::Metrics> {
        self.stages.iter().find_map(|s| s.metrics())
    }

    /// The picker's distribution for logits the stages have processed.
    pub fn distribution(&mut self, logits: &[f32]) -> Result<PickReport, PipelineError> {
        self.picker.distribution(logits, &mut self.dist)
    }

    /// The distribution computed by the last [`Pipeline::distribution`].
    pub fn last_distribution(&self) -> &Distribution {
        &self.dist
    }

    /// The generator draws come from (speculative acceptance tests draw from it too).
    pub fn rng(&mut self) -> &mut Pcg32 {
        &mut self.rng
    }

    /// One decode decision: stages, picker, draw, accept.
    pub fn sample(&mut self, logits: &mut [f32]) -> Result<StepInfo, PipelineError> {
        self.sample_in(logits, &StepContext::default())
    }

    /// [`Pipeline::sample`] with what the stages may know about the step.
    pub fn sample_in(
        &mut self,
        logits: &mut [f32],
        ctx: &StepContext,
    ) -> Result<StepInfo, PipelineError> {
        let stages = self.apply(logits, ctx)?;
        let pick = self.distribution(logits)?;
        let token = self.dist.draw(&mut self.rng)?;
        self.accept(token);
        Ok(StepInfo {
            token,
            stages,
            candidates: self.dist.candidates(),
            pick,
        })
    }

    /// Tells every stage a picked token was accepted.
    pub fn accept(&mut self, token: u32) {
        for s in &mut self.stages {
            s.accept(token);
        }
        self.picker.accept(token);
        self.undoable = (self.undoable + 1).min(MAX_ROLLBACK);
    }

    /// Tells every stage a context token (prompt, earlier turns) was accepted.
    pub fn accept_context(&mut self, token: u32) {
        for s in &mut self.stages {
            s.accept_context(token);
        }
        self.picker.accept(token);
        self.undoable = (self.undoable + 1).min(MAX_ROLLBACK);
    }

    /// Undoes the last `n` accepts in every stage.
    pub fn rollback(&mut self, n: usize) -> Result<(), PipelineError> {
        if n > self.undoable {
            return Err(PipelineError::Rollback {
                requested: n,
                available: self.undoable,
            });
        }
        for s in &mut self.stages {
            s.rollback(n);
        }
        self.picker.rollback(n);
        self.undoable -= n;
        Ok(())
    }

    /// Forgets every accepted token (the generator keeps its place).
    pub fn reset(&mut self) {
        for s in &mut self.stages {
            s.reset();
        }
        self.picker.reset();
        self.undoable = 0;
    }
}

#[cfg(test)]
mod tests;
