//! The two roles in a step: [`LogitsStage`] (any number, in order) and [`Picker`] (the last),
//! with what a stage may know of the step and how far back every stage can roll.

use super::distribution::Distribution;
use super::error::PipelineError;
use super::partial::Settled;
use super::report::{PickReport, StageReport};
use super::weights::LevelSums;

/// Accepted tokens any pipeline can roll back (the stages keep that much history).
pub const MAX_ROLLBACK: usize = 64;
const _: () = assert!(MAX_ROLLBACK <= moa::HISTORY);

/// What a stage may know about the step besides its logits.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepContext {
    /// Tokens the generation may still produce, this one included (`None`: no limit known).
    pub remaining: Option<usize>,
    /// Tokens the generation may produce in all (`None`: no limit known).
    pub budget: Option<usize>,
    /// A clock in milliseconds, for stages that time themselves (none in plain engine use:
    /// `Instant` is unavailable on wasm32-unknown-unknown, the host passes the JS clock).
    pub clock: Option<fn() -> f64>,
}

/// What [`LogitsStage::apply_part`] came to.
#[derive(Debug, Clone, PartialEq)]
pub enum StagePart {
    /// Applied: the report, and the most an unknown logit is now.
    Applied(StageReport, f32),
    /// Not applied: every logit at least this large (as the stage sees them), or all of them
    /// ([`Settled::Above`] or [`Settled::Whole`]), would settle it.
    Needs(Settled),
}

/// The head shards' sums for a sampled pick from part of the logits: each shard's
/// [`LevelSums`] and the known tokens' logits as the shards sent them (before the stages).
#[derive(Debug, Clone, Copy)]
pub struct PartSums<'a> {
    pub sums: &'a [LevelSums],
    pub raw: &'a [f32],
}

/// The tokens a step's stages may change, as [`LogitsStage::touches`] names them: `changed`
/// by a known amount (a penalty, a bias: the pick must know their logits), or `removed` (set
/// to −inf, unless a fallback gives them back: the head shards leave them out of their sums).
/// Sorted, no repeats, once [`super::Pipeline::touched`] returns them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    pub changed: Vec<u32>,
    pub removed: Vec<u32>,
}

impl Touched {
    /// `removed` as ranges of consecutive ids, `[start, end)`.
    pub fn removed_ranges(&self) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = Vec::new();
        for &id in &self.removed {
            match out.last_mut() {
                Some(r) if r.1 == id => r.1 = id + 1,
                _ => out.push((id, id + 1)),
            }
        }
        out
    }
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
    /// Whether the next step may try [`LogitsStage::apply_part`]; the default: no.
    fn bounds_part(&mut self) -> bool {
        false
    }
    /// [`LogitsStage::apply`] on part of the logits: the unknown ones are −inf in `logits`, each
    /// at most `bound`. The report as every logit gives it and the most an unknown logit is
    /// after the stage; or, having counted nothing, what would settle the step. The default:
    /// every logit.
    fn apply_part(
        &mut self,
        _logits: &mut [f32],
        _bound: f32,
        _ctx: &StepContext,
    ) -> Result<StagePart, PipelineError> {
        Ok(StagePart::Needs(Settled::Whole))
    }
    /// Adds to `out` every token whose logit the next `apply` may change, when the stage can
    /// name them all (a pick that knows them adds up the rest from the shards' sums); `false`
    /// when it cannot. The default: it cannot.
    fn touches(&mut self, _ctx: &StepContext, _out: &mut Touched) -> bool {
        false
    }
    /// Whether the last `apply` removed every token its `touches` named as removed (a fallback
    /// may have given some back). The default: yes.
    fn removed_as_named(&self) -> bool {
        true
    }
    /// Takes back what the last `apply` counted (a partial pick that did not settle runs the
    /// step again on more of the logits). The default: nothing to take back.
    fn unapply(&mut self) {}
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
    /// Whether `dist`, made by this picker from `logits` of which the unknown ones are −inf
    /// and each at most `bound` (after the stages), is what every logit would give, and how far
    /// a draw may walk it (see [`super::partial`]). The default: only every logit settles it.
    fn settles(&self, _logits: &[f32], _bound: f32, _dist: &Distribution) -> Settled {
        Settled::Whole
    }
    /// [`Picker::distribution`] from part of the logits (the unknown ones −inf, each at most
    /// `bound`), with the shards' sums when they can be used, and whether it settles the pick
    /// and how far a draw may walk it. The default: [`Picker::settles`].
    fn distribution_part(
        &mut self,
        logits: &[f32],
        bound: f32,
        _sums: Option<PartSums>,
        out: &mut Distribution,
    ) -> Result<(PickReport, Settled), PipelineError> {
        let pick = self.distribution(logits, out)?;
        Ok((pick, self.settles(logits, bound, out)))
    }
    /// What settles a pick whose draw, at `point`, walked past the head
    /// [`Picker::distribution_part`] settled. The default: every logit.
    fn past_head(&self, _point: u128) -> Settled {
        Settled::Whole
    }
    /// The temperature whose level sums settle the pick from part of the logits (sampling);
    /// the default: none.
    fn sums_temperature(&self) -> Option<f32> {
        None
    }
    /// Whether the pick is the largest logit (greedy); the default: no.
    fn takes_largest(&self) -> bool {
        false
    }
    /// Whether `settles` can settle anything short of every logit; the default: no.
    fn settles_part(&self) -> bool {
        false
    }
    fn accept(&mut self, _token: u32) {}
    fn rollback(&mut self, _n: usize) {}
    fn reset(&mut self) {}
    /// Widens the picker's spread at once (MOA's INTERFERE valve; the health policy asks under
    /// pre-collapse). Returns whether the picker has such a valve.
    fn open_valve(&mut self) -> bool {
        false
    }
}
