//! The cursor of one generation: the pipeline that picks each token, the streaming text
//! decoder, and the end rules.

use super::options::GenerateOptions;
use crate::pipeline::{ColtraneStage, PartialPick, Pipeline, PipelineError, StepContext, StepInfo};
use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};
use std::rc::Rc;

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// An end-of-text token.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the generation has finished: start a new one")]
    Finished,
}

/// One generated token as a caller sees it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Emitted {
    pub id: u32,
    /// The text this token completes: '' while a UTF-8 character is incomplete and for an
    /// end-of-text token; on the last token, also whatever was held back.
    pub text: String,
    pub step: StepInfo,
    /// Set on the last token of the generation.
    pub finish_reason: Option<FinishReason>,
    /// On the last token, when a constraint ran: what it did over the generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<coltrane::Metrics>,
    /// On the last token, when the health monitor watched: what it saw over the generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::health::HealthMetrics>,
}

/// What [`Generation::next_partial`] came to.
#[derive(Debug)]
pub enum PartialNext {
    /// The token the whole logits give.
    Token(Box<Emitted>),
    /// Every logit at least this large would settle the step.
    Above(f32),
    /// Only every logit does.
    Whole,
}

/// A generation in progress: the pipeline that picks each token, the streaming text decoder,
/// and the end rules.
pub struct Generation {
    pipeline: Pipeline,
    clock: Option<fn() -> f64>,
    stream: StreamDecoder<Rc<Tokenizer>>,
    eos_ids: Vec<u32>,
    ignore_eos: bool,
    budget: usize,
    produced: usize,
    finished: Option<FinishReason>,
}

impl Generation {
    /// A generation of at most `min(max_tokens, context_room)` tokens; `context_room` is how
    /// many positions the KV cache has left once the prompt is in.
    pub fn new(
        opts: &GenerateOptions,
        tokenizer: Rc<Tokenizer>,
        eos_ids: &[u32],
        context_room: usize,
    ) -> Result<Generation, PipelineError> {
        let budget = opts.max_tokens.min(context_room);
        let mut pipeline = Pipeline::new(&opts.decode)?;
        if let Some(c) = &opts.decode.coltrane {
            // Last before the pick, so the fallback weighs the logits the picker will see.
            let index = tokenizer.constraint_index(eos_ids)?;
            pipeline.push_stage(Box::new(ColtraneStage::new(index, c.clone())?));
        }
        Ok(Generation {
            pipeline,
            clock: None,
            stream: StreamDecoder::new(tokenizer),
            eos_ids: eos_ids.to_vec(),
            ignore_eos: opts.ignore_eos,
            budget,
            produced: 0,
            finished: (budget == 0).then_some(FinishReason::Length),
        })
    }

    /// Tells the pipeline about tokens already in the context (the prompt, earlier turns), so
    /// stages such as the repetition penalty see them.
    pub fn accept_context(&mut self, tokens: &[u32]) {
        for &t in tokens {
            self.pipeline.accept_context(t);
        }
    }

    /// A millisecond clock for the stages that time themselves (the constraint's mask time).
    pub fn set_clock(&mut self, clock: fn() -> f64) {
        self.clock = Some(clock);
    }

    /// The constraint's metrics so far, when one is set.
    pub fn constraint_metrics(&self) -> Option<coltrane::Metrics> {
        self.pipeline.constraint_metrics()
    }

    /// The health monitor's metrics so far, when one watches.
    pub fn health_metrics(&self) -> Option<crate::health::HealthMetrics> {
        self.pipeline.health_metrics()
    }

    pub fn pipeline(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// The most tokens this generation will produce.
    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn produced(&self) -> usize {
        self.produced
    }

    pub fn finished(&self) -> Option<FinishReason> {
        self.finished
    }

    /// Whether, after the forward pass about to run and the pick from its logits, another
    /// forward pass will follow (unless an end-of-text token comes): the host prefetches for it.
    pub fn more_follows(&self) -> bool {
        self.produced + 2 <= self.budget
    }

    /// Tokens this generation may still produce.
    pub fn remaining(&self) -> usize {
        self.budget - self.produced
    }

    /// Cuts a speculative draft to what could be kept: at most `remaining() - 1` tokens (the
    /// pick after the last draft token needs a step of the budget too), nothing past an
    /// end-of-text token, and only what every pipeline stage allows (a constraint's mask).
    pub fn trim_draft(&mut self, draft: &mut Vec<u32>) {
        draft.truncate(self.remaining().saturating_sub(1));
        if !self.ignore_eos {
            if let Some(i) = draft.iter().position(|t| self.eos_ids.contains(t)) {
                draft.truncate(i + 1);
            }
        }
        let allowed = self.pipeline.allowed_prefix(draft, Some(self.remaining()));
        draft.truncate(allowed);
        self.pipeline.cap_draft(draft);
    }

    /// Picks tokens from a verify pass. `rows` holds one row of logits per position of
    /// `[pending, draft…]`: row j is what the model predicts after `draft[..j]`. Row 0 is
    /// picked from exactly as [`Generation::next`] would; while the pick equals the draft token
    /// at that place (and `margin` τ, when given, is met by the row: top-1 − top-2 ≥ 2τ) and
    /// the generation goes on, the next row is picked from too. Every token but the last equals
    /// its draft token.
    ///
    /// This is the speculative-sampling rule for a deterministic draft d, run on the same random
    /// numbers as plain decoding: each pick is one draw from the row's distribution p, so d is
    /// kept with probability p(d), and a token that is not d is a draw from p with d removed
    /// and renormalized. The tokens, and their distribution, are those of plain decoding with
    /// the same seed (the rows being bit-identical to step-by-step ones); the pipeline never
    /// sees a rejected token, so there is nothing to roll back.
    ///
    /// A row whose pick fails (no candidates) ends the list early; on row 0 it is the error.
    pub fn verify(
        &mut self,
        rows: &mut [f32],
        draft: &[u32],
        margin: Option<f32>,
    ) -> Result<Vec<Emitted>, GenerateError> {
        let vocab = rows.len() / (draft.len() + 1);
        let mut out: Vec<Emitted> = Vec::with_capacity(draft.len() + 1);
        for (j, row) in rows.chunks_exact_mut(vocab).enumerate() {
            let e = match self.next(row) {
                Ok(e) => e,
                Err(e) if out.is_empty() => return Err(e),
                // Plain decoding meets the same failure at this row on the next step.
                Err(_) => break,
            };
            let go_on = e.finish_reason.is_none()
                && draft.get(j) == Some(&e.id)
                && margin.is_none_or(|tau| top_margin(row) >= 2.0 * tau);
            out.push(e);
            if !go_on {
                break;
            }
        }
        Ok(out)
    }

    /// Picks the next token from `logits` (the stages may change them) and applies the end
    /// rules.
    pub fn next(&mut self, logits: &mut [f32]) -> Result<Emitted, GenerateError> {
        let ctx = self.context()?;
        let step = self.pipeline.sample_in(logits, &ctx)?;
        self.emit(step)
    }

    /// Whether the pick is the largest logit after the stages ([`Pipeline::takes_largest`]).
    pub fn takes_largest(&mut self) -> bool {
        self.pipeline.takes_largest()
    }

    /// Whether the next pick must see every logit ([`Pipeline::reads_every_logit`]).
    pub fn reads_every_logit(&mut self) -> bool {
        self.pipeline.reads_every_logit()
    }

    /// Whether the health monitor watches (a pick from part of the logits then wants the head
    /// shards' health sums).
    pub fn watches_health(&self) -> bool {
        self.pipeline.health_state().is_some()
    }

    /// The temperature and watched ids the head shards' level sums are asked for at the next
    /// step, when the pick can use them ([`crate::pipeline::Pipeline::sums_ask`]).
    pub fn sums_ask(&mut self) -> Option<(f32, crate::pipeline::Touched)> {
        let ctx = self.context().ok()?;
        self.pipeline.sums_ask(&ctx)
    }

    /// [`Generation::next`] from part of the logits (the rest −inf in `logits`, each at most
    /// `bound`; `sums` the head shards' level sums at the sampling temperature, `health` their
    /// health sums merged, when a monitor watches): the token the whole logits give, or what would settle the step, with nothing
    /// changed ([`crate::pipeline::Pipeline::sample_partial`]).
    pub fn next_partial(
        &mut self,
        logits: &mut [f32],
        bound: f32,
        sums: Option<&[crate::pipeline::LevelSums]>,
        health: Option<&crate::health::HealthSums>,
    ) -> Result<PartialNext, GenerateError> {
        let ctx = self.context()?;
        Ok(
            match self
                .pipeline
                .sample_partial(logits, bound, sums, health, &ctx)?
            {
                PartialPick::Decided(step) => PartialNext::Token(Box::new(self.emit(*step)?)),
                PartialPick::Above(t) => PartialNext::Above(t),
                PartialPick::Whole => PartialNext::Whole,
            },
        )
    }

    fn context(&self) -> Result<StepContext, GenerateError> {
        if self.finished.is_some() {
            return Err(GenerateError::Finished);
        }
        Ok(StepContext {
            remaining: Some(self.budget - self.produced),
            budget: Some(self.budget),
            clock: self.clock,
        })
    }

    /// The end rules and the text of a picked step.
    fn emit(&mut self, step: StepInfo) -> Result<Emitted, GenerateError> {
        let id = step.token;
        self.produced += 1;
        let stop = !self.ignore_eos && self.eos_ids.contains(&id);
        let mut text = match stop {
            true => String::new(),
            false => self.stream.push(id)?,
        };
        self.finished = match (stop, self.produced >= self.budget) {
            (true, _) => Some(FinishReason::Stop),
            (false, true) => Some(FinishReason::Length),
            (false, false) => None,
        };
        if self.finished.is_some() {
            text.push_str(&self.stream.finish());
        }
        Ok(Emitted {
            id,
            text,
            step,
            finish_reason: self.finished,
            constraint: self
                .finished
                .and_then(|_| self.pipeline.constraint_metrics()),
            health: self.finished.and_then(|_| self.pipeline.health_metrics()),
        })
    }
}

/// The largest finite logit minus the second largest (infinite with fewer than two).
fn top_margin(logits: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &l in logits.iter().filter(|l| l.is_finite()) {
        if l > a {
            b = a;
            a = l;
        } else if l > b {
            b = l;
        }
    }
    a - b
}
