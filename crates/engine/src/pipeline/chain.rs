//! [`Pipeline`]: builds the chain a config describes, runs a step through it (stages, picker,
//! draw, accept) and keeps count of what a rollback may undo.

use super::config::DecodeConfig;
use super::distribution::Distribution;
use super::error::PipelineError;
use super::partial::{PartialPick, Settled};
use super::pickers::{Greedy, MoaPicker, Sample};
use super::report::{PickReport, StageReport, StepInfo};
use super::stage::{LogitsStage, PartSums, Picker, StagePart, StepContext, Touched, MAX_ROLLBACK};
use super::stages::{CountPenalty, RepeatPenalty};
use super::weights::{draw_point, LevelSums};
use crate::health::{HealthConfig, HealthMetrics, HealthMonitor, HealthState, HealthSums};
use crate::sampler::Pcg32;

/// Stages, a picker, and the seeded generator every draw uses.
pub struct Pipeline {
    stages: Vec<Box<dyn LogitsStage>>,
    picker: Box<dyn Picker>,
    rng: Pcg32,
    dist: Distribution,
    /// Tokens accepted since the last reset, up to MAX_ROLLBACK (what rollback may undo).
    undoable: usize,
    /// Watches every step when the config asks.
    health: Option<HealthMonitor>,
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
        let mut pipeline = Pipeline::from_parts(stages, picker, s.seed);
        if let Some(h) = cfg.health {
            pipeline.watch(h);
        }
        Ok(pipeline)
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
            health: None,
        }
    }

    /// Watches every step with the health monitor, its policy acting (a config that
    /// `validate`s).
    pub fn watch(&mut self, cfg: HealthConfig) {
        self.health = Some(HealthMonitor::new(cfg));
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

    /// The health monitor's metrics over the generation, when one watches.
    pub fn health_metrics(&self) -> Option<HealthMetrics> {
        self.health.as_ref().map(|h| h.metrics())
    }

    /// How many draft tokens the health policy lets a verify pass check now, if it caps them;
    /// a draft cut to it is counted.
    pub fn cap_draft(&mut self, draft: &mut Vec<u32>) {
        if let Some(h) = &mut self.health {
            if let Some(cap) = h.draft_cap().filter(|&c| draft.len() > c) {
                draft.truncate(cap);
                h.note_capped_draft();
            }
        }
    }

    /// The health monitor's state after the last step, when one watches.
    pub fn health_state(&self) -> Option<HealthState> {
        self.health.as_ref().map(|h| h.state())
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
        let now = || ctx.clock.map_or(0.0, |c| c());
        let started = now();
        let eddy_bans = match &mut self.health {
            Some(h) => {
                h.before_stages(logits);
                h.break_loop(logits)
            }
            None => 0,
        };
        let before_ms = now() - started;
        let stages = self.apply(logits, ctx)?;
        let pick = self.distribution(logits)?;
        let token = self.dist.draw(&mut self.rng)?;
        self.accept(token);
        let health = match &mut self.health {
            Some(h) => {
                let started = now();
                let mut r = h.after_pick(logits, token, ctx.remaining, ctx.budget);
                r.actions.eddy_bans = eddy_bans;
                r.actions.valve = h.valve_due() && self.picker.open_valve();
                h.record_actions(r.actions);
                r.us = (before_ms + now() - started) * 1000.0;
                h.record_time(r.us);
                Some(r)
            }
            None => None,
        };
        Ok(StepInfo {
            token,
            stages,
            candidates: self.dist.candidates(),
            pick,
            health,
        })
    }

    /// Whether the next step must see every logit: the health monitor watches, or the picker
    /// (MOA) or a stage reads them all. Otherwise a pick from part of them may settle it
    /// ([`Pipeline::sample_partial`]).
    pub fn reads_every_logit(&mut self) -> bool {
        self.health.as_ref().is_some_and(|h| h.may_break_loop())
            || !self.picker.settles_part()
            || self.stages.iter_mut().any(|s| !s.bounds_part())
    }

    /// What the head shards' level sums should be taken for at the next step — the sampling
    /// temperature, and the tokens whose logits they must send too ([`Pipeline::touched`]) —
    /// when a pick from part of the logits can use them.
    pub fn sums_ask(&mut self, ctx: &StepContext) -> Option<(f32, Touched)> {
        if self.reads_every_logit() {
            return None;
        }
        // A pick that does not sample asks with temperature 0 when the health monitor watches:
        // the shards' health sums need the ranges the stages remove.
        let t = match self.picker.sums_temperature() {
            Some(t) => t,
            None if self.health.is_some() => 0.0,
            None => return None,
        };
        Some((t, self.touched(ctx)?))
    }

    /// Whether the pick is the largest logit after the stages (greedy, no health policy).
    pub fn takes_largest(&self) -> bool {
        self.health.is_none() && self.picker.takes_largest()
    }

    /// The tokens whose logits the stages may change at the next step, when every stage can
    /// name them: a pick from part of the logits uses the shards' sums only when it knows
    /// these (the coordinator asks the shards for them).
    pub fn touched(&mut self, ctx: &StepContext) -> Option<Touched> {
        let mut t = Touched::default();
        let named = self.stages.iter_mut().all(|s| s.touches(ctx, &mut t));
        for ids in [&mut t.changed, &mut t.removed] {
            ids.sort_unstable();
            ids.dedup();
        }
        named.then_some(t)
    }

    /// [`Pipeline::sample_in`] from part of the logits: `logits` holds the known ones and −inf
    /// for the rest, each of which is at most `bound`; `sums`, if given, each head shard's
    /// [`LevelSums`] of its logits at the sampling temperature. The step, as the whole logits
    /// give it, or what would settle it, with nothing of the pipeline changed
    /// ([`super::partial`]).
    pub fn sample_partial(
        &mut self,
        logits: &mut [f32],
        bound: f32,
        sums: Option<&[LevelSums]>,
        health: Option<&HealthSums>,
        ctx: &StepContext,
    ) -> Result<PartialPick, PipelineError> {
        if bound.is_nan() || bound == f32::INFINITY {
            return Ok(PartialPick::Whole);
        }
        // The health monitor reads the shards' sums and the known logits, when it has the sums
        // and its eddy breaker (which bans among every logit) is not due.
        let watching = match (&self.health, health) {
            (None, _) => None,
            (Some(h), Some(s)) if !h.may_break_loop() => Some(s),
            (Some(_), _) => return Ok(PartialPick::Whole),
        };
        // The sums add up the unknown tokens only when the stages change none of them.
        let touched = match sums.is_some() || watching.is_some() {
            true => self.touched(ctx),
            false => None,
        };
        if let Some(s) = watching {
            // The monitor's masked sums are the stages' removed ranges': each one must be named.
            let Some(t) = touched.as_ref() else {
                return Ok(PartialPick::Whole);
            };
            let known = |id: &u32| logits.get(*id as usize).is_some_and(|l| l.is_finite());
            if !t.changed.iter().all(known) {
                return Ok(PartialPick::Whole);
            }
            let removed = t.removed_ranges();
            if let Some(h) = &mut self.health {
                h.before_stages_part(logits, s.clone(), &removed);
                if let Err(t) = h.knows_enough(logits, bound) {
                    return Ok(match t < bound {
                        true => PartialPick::Above(t),
                        false => PartialPick::Whole,
                    });
                }
            }
        }
        // The known tokens as the shards summed them (leaving out the removed ones), when every
        // token a stage changes is known.
        let known = |id: &u32| logits.get(*id as usize).is_some_and(|l| l.is_finite());
        let raw: Option<Vec<f32>> = match touched {
            Some(t) if t.changed.iter().all(known) => Some(
                (logits.iter().enumerate())
                    .filter(|&(i, l)| {
                        l.is_finite() && t.removed.binary_search(&(i as u32)).is_err()
                    })
                    .map(|(_, &l)| l)
                    .collect(),
            ),
            _ => None,
        };
        // A threshold after the first `n` stages, before them: lower by what they may raise.
        let before_stages = |p: &mut Pipeline, n: usize, after: f32, settled: Settled| {
            p.unapply(n);
            Ok(match settled {
                Settled::Above(t) if t - (after - bound) < bound => {
                    PartialPick::Above(t - (after - bound))
                }
                _ => PartialPick::Whole,
            })
        };
        let mut after = bound;
        let mut stages = Vec::with_capacity(self.stages.len());
        for i in 0..self.stages.len() {
            match self.stages[i].apply_part(logits, after, ctx) {
                Ok(StagePart::Applied(report, b)) => {
                    stages.push(report);
                    after = b;
                }
                Ok(StagePart::Needs(settled)) => return before_stages(self, i, after, settled),
                Err(e) => {
                    self.unapply(i + 1);
                    return Err(e);
                }
            }
        }
        let n = self.stages.len();
        let unsettled = |p: &mut Pipeline, settled: Settled| before_stages(p, n, after, settled);
        // The sums hold when every stage removed what it named (no fallback gave some back).
        let whole_removal = self.stages.iter().all(|s| s.removed_as_named());
        if watching.is_some() && !whole_removal {
            return unsettled(self, Settled::Whole);
        }
        let part_sums = (sums.zip(raw.as_deref()))
            .filter(|_| whole_removal)
            .map(|(sums, raw)| PartSums { sums, raw });
        // With the sums, the unknown tokens are as the shards gave them: at most `bound`.
        let most = match part_sums {
            Some(_) => bound,
            None => after,
        };
        let parted = self
            .picker
            .distribution_part(logits, most, part_sums, &mut self.dist);
        let (pick, settled) = match parted {
            Ok(p) => p,
            // Every known logit masked: the unknown ones may hold the candidates.
            Err(PipelineError::NoCandidates) => return unsettled(self, Settled::Whole),
            Err(e) => {
                self.unapply(self.stages.len());
                return Err(e);
            }
        };
        let head = match settled {
            Settled::Head(n) => n,
            other => return unsettled(self, other),
        };
        let mut rng = self.rng.clone();
        let (token, at) = self.dist.draw_at(&mut rng)?;
        if at >= head {
            // The draw walked past what is known to come first: the picker says what settles it.
            let point = draw_point(&mut self.rng.clone(), self.dist.total());
            let settled = self.picker.past_head(point);
            return unsettled(self, settled);
        }
        self.rng = rng;
        self.accept(token);
        let health = match (&mut self.health, watching) {
            (Some(h), Some(_)) => {
                let now = || ctx.clock.map_or(0.0, |c| c());
                let started = now();
                let mut r = h.after_pick(logits, token, ctx.remaining, ctx.budget);
                r.actions.valve = h.valve_due() && self.picker.open_valve();
                h.record_actions(r.actions);
                r.us = (now() - started) * 1000.0;
                h.record_time(r.us);
                Some(r)
            }
            _ => None,
        };
        Ok(PartialPick::Decided(Box::new(StepInfo {
            token,
            stages,
            candidates: self.dist.candidates(),
            pick,
            health,
        })))
    }

    /// Takes back what the first `n` stages' last `apply` counted.
    fn unapply(&mut self, n: usize) {
        for s in &mut self.stages[..n] {
            s.unapply();
        }
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
        if let Some(h) = &mut self.health {
            h.accept_context();
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
        if let Some(h) = &mut self.health {
            h.rollback(n);
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
        if let Some(h) = &mut self.health {
            h.reset();
        }
        self.picker.reset();
        self.undoable = 0;
    }
}
