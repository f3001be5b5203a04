//! Logits stages that ship with the engine.

use super::error::PipelineError;
use super::partial::Settled;
use super::report::StageReport;
use super::stage::{LogitsStage, StagePart, StepContext, Touched, MAX_ROLLBACK};
use coltrane::{Coltrane, ColtraneConfig, Index};
use std::sync::Arc;

/// Pushes the logits of recently seen tokens toward "less likely", the HF / llama.cpp
/// convention: a positive logit is divided by the penalty, a negative one multiplied.
pub struct RepeatPenalty {
    penalty: f32,
    /// How many of the most recent tokens it looks at.
    last_n: usize,
    /// Accepted tokens, oldest first; at least `last_n + MAX_ROLLBACK` are kept.
    history: Vec<u32>,
    seen: Vec<u32>,
}

impl RepeatPenalty {
    pub fn new(penalty: f32, last_n: usize) -> Self {
        RepeatPenalty {
            penalty,
            last_n,
            history: Vec::new(),
            seen: Vec::new(),
        }
    }
}

impl RepeatPenalty {
    fn penalized(&self, l: f32) -> f32 {
        let penalized = if l > 0.0 {
            l / self.penalty
        } else {
            l * self.penalty
        };
        // An extreme (valid) penalty may overflow: a finite logit stays finite, since the
        // picker drops +inf and -inf means masked.
        match l.is_finite() {
            true => penalized.clamp(f32::MIN, f32::MAX),
            false => penalized,
        }
    }
}

impl LogitsStage for RepeatPenalty {
    fn name(&self) -> &'static str {
        "repeat_penalty"
    }

    fn apply(
        &mut self,
        logits: &mut [f32],
        _ctx: &StepContext,
    ) -> Result<StageReport, PipelineError> {
        let recent = &self.history[self.history.len().saturating_sub(self.last_n)..];
        self.seen.clear();
        self.seen.extend_from_slice(recent);
        self.seen.sort_unstable();
        self.seen.dedup();
        let mut changed = 0;
        for &id in &self.seen {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = self.penalized(*l);
                changed += 1;
            }
        }
        Ok(StageReport::changed(self.name(), changed))
    }

    fn bounds_part(&mut self) -> bool {
        true
    }

    fn touches(&mut self, _ctx: &StepContext, out: &mut Touched) -> bool {
        let recent = &self.history[self.history.len().saturating_sub(self.last_n)..];
        out.changed.extend_from_slice(recent);
        true
    }

    fn apply_part(
        &mut self,
        logits: &mut [f32],
        bound: f32,
        ctx: &StepContext,
    ) -> Result<StagePart, PipelineError> {
        // Monotone in the logit: an unknown one at most `bound` ends at most at its image.
        let after = match !self.history.is_empty() && self.last_n > 0 {
            true => bound.max(self.penalized(bound)),
            false => bound,
        };
        Ok(StagePart::Applied(self.apply(logits, ctx)?, after))
    }

    fn accept(&mut self, token: u32) {
        if self.last_n == 0 {
            return;
        }
        self.history.push(token);
        // Trim in batches, so accepting stays O(1) amortized.
        let keep = self.last_n.saturating_add(MAX_ROLLBACK);
        if self.history.len() >= keep.saturating_mul(2) {
            self.history.drain(..self.history.len() - keep);
        }
    }

    fn rollback(&mut self, n: usize) {
        if self.last_n == 0 {
            return;
        }
        let len = self.history.len();
        self.history.truncate(len.saturating_sub(n));
    }

    fn reset(&mut self) {
        self.history.clear();
    }
}

/// OpenAI's presence and frequency penalties: `logit -= presence·[count > 0] + frequency·count`,
/// where `count` is how often the token was generated so far in this generation (the prompt and
/// earlier turns do not count, as in OpenAI's and vLLM's definition).
pub struct CountPenalty {
    presence: f32,
    frequency: f32,
    /// Generated tokens in order (for rollback) and how often each came.
    history: Vec<u32>,
    counts: std::collections::HashMap<u32, u32>,
}

impl CountPenalty {
    pub fn new(presence: f32, frequency: f32) -> Self {
        CountPenalty {
            presence,
            frequency,
            history: Vec::new(),
            counts: std::collections::HashMap::new(),
        }
    }
}

impl CountPenalty {
    fn penalty(&self, count: u32) -> f32 {
        self.presence + self.frequency * count as f32
    }
}

impl LogitsStage for CountPenalty {
    fn name(&self) -> &'static str {
        "count_penalty"
    }

    fn apply(
        &mut self,
        logits: &mut [f32],
        _ctx: &StepContext,
    ) -> Result<StageReport, PipelineError> {
        // Counted: every generated token in the vocabulary (a masked or unknown one too, so a
        // pick from part of the logits reports what the whole logits' does).
        let mut changed = 0;
        for (&id, &count) in &self.counts {
            if let Some(l) = logits.get_mut(id as usize) {
                if l.is_finite() {
                    // Finite stays finite: -inf means masked, and the picker drops +inf.
                    *l = (*l - self.penalty(count)).clamp(f32::MIN, f32::MAX);
                }
                changed += 1;
            }
        }
        Ok(StageReport::changed(self.name(), changed))
    }

    fn bounds_part(&mut self) -> bool {
        true
    }

    fn touches(&mut self, _ctx: &StepContext, out: &mut Touched) -> bool {
        out.changed.extend(self.counts.keys());
        true
    }

    fn apply_part(
        &mut self,
        logits: &mut [f32],
        bound: f32,
        ctx: &StepContext,
    ) -> Result<StagePart, PipelineError> {
        // `l - penalty` is monotone in `l`; a negative penalty raises.
        let after = self.counts.values().fold(bound, |b, &count| {
            b.max((bound - self.penalty(count)).clamp(f32::MIN, f32::MAX))
        });
        Ok(StagePart::Applied(self.apply(logits, ctx)?, after))
    }

    fn accept(&mut self, token: u32) {
        self.history.push(token);
        *self.counts.entry(token).or_insert(0) += 1;
    }

    fn accept_context(&mut self, _token: u32) {}

    fn rollback(&mut self, n: usize) {
        for _ in 0..n {
            let Some(id) = self.history.pop() else { return };
            if let Some(c) = self.counts.get_mut(&id) {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(&id);
                }
            }
        }
    }

    fn reset(&mut self) {
        self.history.clear();
        self.counts.clear();
    }
}

/// The most tokens a COLTRANE step may name as changed (prosody's targets: the head shards send
/// their logits back beside the candidates).
const MAX_CHANGED: usize = 1024;

/// COLTRANE's token mask as the last logits stage: it masks only the generated text, so
/// context tokens are recorded but not matched.
pub struct ColtraneStage {
    fsm: Coltrane,
    /// What the last `apply` found counted, for `unapply`.
    mark: Option<coltrane::StepMark>,
    /// Soft tiers the last `apply` relaxed.
    relaxed: u8,
}

impl ColtraneStage {
    pub fn new(index: Arc<Index>, cfg: ColtraneConfig) -> Result<Self, PipelineError> {
        Ok(ColtraneStage {
            fsm: Coltrane::new(index, cfg)?,
            mark: None,
            relaxed: 0,
        })
    }
}

impl LogitsStage for ColtraneStage {
    fn name(&self) -> &'static str {
        "coltrane"
    }

    fn apply(
        &mut self,
        logits: &mut [f32],
        ctx: &StepContext,
    ) -> Result<StageReport, PipelineError> {
        self.mark = Some(self.fsm.mark());
        let report = self.fsm.apply(logits, ctx.remaining, ctx.clock);
        self.relaxed = report.relaxed;
        Ok(StageReport {
            stage: self.name(),
            changed: logits.len().saturating_sub(report.allowed),
            coltrane: Some(report),
        })
    }

    fn bounds_part(&mut self) -> bool {
        true
    }

    fn apply_part(
        &mut self,
        logits: &mut [f32],
        bound: f32,
        ctx: &StepContext,
    ) -> Result<StagePart, PipelineError> {
        self.mark = Some(self.fsm.mark());
        Ok(
            match self.fsm.apply_part(logits, bound, ctx.remaining, ctx.clock) {
                Ok((report, after)) => StagePart::Applied(
                    {
                        self.relaxed = report.relaxed;
                        StageReport {
                            stage: self.name(),
                            changed: logits.len().saturating_sub(report.allowed),
                            coltrane: Some(report),
                        }
                    },
                    after,
                ),
                Err(t) => {
                    self.mark = None;
                    StagePart::Needs(match t > f32::NEG_INFINITY {
                        true => Settled::Above(t),
                        false => Settled::Whole,
                    })
                }
            },
        )
    }

    fn touches(&mut self, ctx: &StepContext, out: &mut Touched) -> bool {
        let (changed, removed) = (&mut out.changed, &mut out.removed);
        self.fsm
            .touched(ctx.remaining, changed, MAX_CHANGED, removed)
    }

    fn removed_as_named(&self) -> bool {
        self.relaxed == 0
    }

    fn unapply(&mut self) {
        if let Some(mark) = self.mark.take() {
            self.fsm.rewind(mark);
        }
    }

    fn accept(&mut self, token: u32) {
        // A token the mask refused can only come from outside the pipeline's own picks; the
        // matcher then allows nothing but end-of-text, which is the safe way on.
        let _ = self.fsm.accept(token);
    }

    fn accept_context(&mut self, _token: u32) {
        self.fsm.accept_context();
    }

    fn allowed_prefix(&mut self, draft: &[u32], remaining: Option<usize>) -> usize {
        self.fsm.allowed_prefix(draft, remaining)
    }

    fn rollback(&mut self, n: usize) {
        // The pipeline checked `n` against what was accepted.
        let _ = self.fsm.rollback(n);
    }

    fn reset(&mut self) {
        self.fsm.reset();
    }

    fn metrics(&self) -> Option<coltrane::Metrics> {
        Some(self.fsm.metrics())
    }
}
