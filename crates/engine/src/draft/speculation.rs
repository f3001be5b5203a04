//! Where decoding stands between forward passes, and what the next pass runs: the bookkeeping of
//! speculative decoding, apart from the passes themselves (sans I/O — the host runs each pass
//! and reports back).
//!
//! The protocol: a picked token is `pending` until the next pass runs it (so the last token of a
//! generation costs no pass). [`Speculation::next`] says what the next token needs — a token a
//! verify pass already made ([`NextPass::Ahead`]), a pass of the pending token and perhaps a
//! draft ([`NextPass::Run`]), or a pick from logits already computed ([`NextPass::Pick`]). After
//! a pass the host calls [`Speculation::pass_done`] (or [`Speculation::pass_failed`]), then
//! [`Speculation::pick`] for a plain pass or [`Speculation::verify`] for a verify pass, which
//! keeps the draft tokens the pipeline picks anyway and says how many positions the KV cache
//! keeps. Tokens made ahead are in the KV cache but not yet handed out; a new prompt first
//! [`Speculation::settle`]s them away.

use super::{DraftConfig, Drafter, PassCost, PassTimes, PromptLookup, MAX_DRAFT};
use crate::decode::{Emitted, GenerateError, Generation};
use std::collections::VecDeque;

/// How long the next draft may be, besides what the generation may still produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftLimits {
    /// Positions the KV cache has left once the pending token is in.
    pub room: usize,
    /// The most draft tokens one verify pass checks (each row keeps a vocabulary of logits).
    pub max_verify: usize,
    /// The most positions one forward pass runs (the pending token included).
    pub max_batch: usize,
}

/// What the next token needs.
// Returned once per token and matched at once, never stored: boxing `Ahead` would allocate for
// every token a verify pass made ahead, to save stack space nothing keeps.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum NextPass<'a> {
    /// A token an earlier verify pass made: hand it out, no pass.
    Ahead(Emitted),
    /// Run `batch` (the pending token, then the draft) through the model; with a draft
    /// (`verify`), every position's logits are needed.
    Run { batch: &'a [u32], verify: bool },
    /// Logits no token was picked from are waiting (a prompt's): pick from them.
    Pick,
    /// No generation is running, or it has finished.
    Finished,
    /// Nothing is pending and no logits wait: there is nothing to continue from.
    NoContext,
}

/// What a verify pass kept.
#[derive(Debug)]
pub struct Verified {
    /// The token to hand out now; the others picked wait for the next calls (as
    /// [`NextPass::Ahead`]).
    pub first: Emitted,
    /// Positions of the pass whose KV entries stay: those of the rows picked from.
    pub keep: usize,
    /// Draft tokens verified, and how many of them were kept.
    pub drafted: usize,
    pub accepted: usize,
}

/// The speculation state of one conversation (see the module documentation).
pub struct Speculation {
    /// The last picked token: it enters the KV cache with the next pass.
    pending: Option<u32>,
    /// Whether logits nobody picked from yet are waiting (they stay in the session's buffer).
    logits_ready: bool,
    /// Tokens a verify pass made beyond the one it handed out: in the KV cache (the last one
    /// pending), not yet in the conversation.
    ahead: VecDeque<Emitted>,
    /// The current generation's drafter; a prompt-lookup drafter built here is kept (with
    /// `lookup`, its settings) for later generations with the same settings, so what it learned
    /// about acceptance carries over.
    drafter: Option<Box<dyn Drafter>>,
    lookup: Option<DraftConfig>,
    drafting: bool,
    /// The margin rule's τ for the current generation.
    margin: Option<f32>,
    /// The positions of the pass about to run: `[pending, draft…]`.
    batch: Vec<u32>,
    /// The drafter's output before it is trimmed (kept to reuse its allocation).
    draft: Vec<u32>,
    /// What passes of each size took here, on this source and cache, which sizes drafts.
    pass_ms: PassTimes,
}

impl Default for Speculation {
    fn default() -> Self {
        Speculation {
            pending: None,
            logits_ready: false,
            ahead: VecDeque::new(),
            drafter: None,
            lookup: None,
            drafting: false,
            margin: None,
            batch: Vec::with_capacity(MAX_DRAFT + 1),
            draft: Vec::with_capacity(MAX_DRAFT),
            pass_ms: PassTimes::default(),
        }
    }
}

impl Speculation {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new generation drafting with `cfg` (None: it does not draft). A lookup drafter with the
    /// same settings is kept.
    pub fn start(&mut self, cfg: Option<DraftConfig>) {
        self.margin = cfg.as_ref().and_then(|c| c.margin);
        self.drafting = cfg.is_some();
        if let Some(cfg) = cfg {
            if self.lookup.as_ref() != Some(&cfg) || self.drafter.is_none() {
                self.drafter = Some(Box::new(PromptLookup::new(cfg.clone())));
                self.lookup = Some(cfg);
            }
        }
    }

    /// Replaces the current generation's drafter (a draft model, a test's scripted drafts);
    /// `margin` is the margin rule's τ.
    pub fn set_drafter(&mut self, drafter: Box<dyn Drafter>, margin: Option<f32>) {
        self.drafter = Some(drafter);
        self.lookup = None;
        self.drafting = true;
        self.margin = margin;
    }

    /// The conversation was forgotten (or swapped for another): nothing pending or ahead.
    pub fn forget(&mut self) {
        self.pending = None;
        self.logits_ready = false;
        self.ahead.clear();
    }

    /// The picked token not yet run, which a prompt's pass runs first.
    pub fn pending(&self) -> Option<u32> {
        self.pending
    }

    /// A prompt's pass ran (the pending token with it): its logits wait for a pick.
    pub fn prefilled(&mut self) {
        self.pending = None;
        self.logits_ready = true;
    }

    /// Whether a generation can continue without a prompt.
    pub fn can_continue(&self) -> bool {
        self.pending.is_some() || self.logits_ready
    }

    /// Positions in the conversation, given `cached` in the KV cache: the pending token counts,
    /// tokens made ahead do not (a caller that stops early never sees them).
    pub fn position(&self, cached: usize) -> usize {
        (cached + self.pending.is_some() as usize).saturating_sub(self.ahead.len())
    }

    /// Drops the tokens made ahead that were never handed out. Returns the position the KV
    /// cache must be rewound to (where plain decoding would be after `conversation`, its last
    /// token pending again), or None when nothing was ahead.
    pub fn settle(&mut self, conversation: &[u32]) -> Option<usize> {
        if self.ahead.is_empty() {
            return None;
        }
        self.ahead.clear();
        self.pending = conversation.last().copied();
        self.logits_ready = false;
        Some(conversation.len().saturating_sub(1))
    }

    /// What the next token of `generation` needs. A pending token is taken into the pass (with
    /// a draft after it when drafting: asked of the drafter over `conversation`, trimmed to
    /// `limits`, what the generation could keep, and what its constraint allows).
    pub fn next(
        &mut self,
        generation: Option<&mut Generation>,
        conversation: &[u32],
        limits: DraftLimits,
    ) -> NextPass<'_> {
        if let Some(e) = self.ahead.pop_front() {
            return NextPass::Ahead(e);
        }
        let Some(generation) = generation.filter(|g| g.finished().is_none()) else {
            return NextPass::Finished;
        };
        let Some(id) = self.pending.take() else {
            return match self.logits_ready {
                true => NextPass::Pick,
                false => NextPass::NoContext,
            };
        };
        self.batch.clear();
        self.batch.push(id);
        self.draft(generation, conversation, limits);
        NextPass::Run {
            batch: &self.batch,
            verify: self.batch.len() > 1,
        }
    }

    /// Appends a draft to `batch` (after its pending token).
    fn draft(&mut self, generation: &mut Generation, conversation: &[u32], limits: DraftLimits) {
        if !self.drafting {
            return;
        }
        let cost = self.pass_cost();
        let Some(drafter) = &mut self.drafter else {
            return;
        };
        // The pick after the last draft token takes a step of the budget too.
        let most = limits
            .room
            .min(generation.remaining().saturating_sub(1))
            .min(limits.max_verify)
            .min(limits.max_batch.saturating_sub(1));
        drafter.set_cost(cost);
        drafter.draft(conversation, most, &mut self.draft);
        self.draft.truncate(most);
        generation.trim_draft(&mut self.draft);
        self.batch.extend_from_slice(&self.draft);
    }

    /// The pass [`Speculation::next`] asked for failed: its pending token waits again.
    pub fn pass_failed(&mut self) {
        if let Some(&id) = self.batch.first() {
            self.pending = Some(id);
        }
        self.batch.clear();
    }

    /// The pass ran in `ms`: its logits are waiting.
    pub fn pass_done(&mut self, ms: f64) {
        self.pass_ms.record(self.batch.len(), ms);
        self.logits_ready = true;
    }

    /// Picks the next token from one row of logits (a plain pass's, or a prompt's); it becomes
    /// the pending token.
    pub fn pick(
        &mut self,
        generation: &mut Generation,
        logits: &mut [f32],
    ) -> Result<Emitted, GenerateError> {
        let e = generation.next(logits)?;
        self.logits_ready = false;
        self.pending = Some(e.id);
        Ok(e)
    }

    /// Picks from a verify pass's rows (one per position of the batch) while the picks equal
    /// the draft; the last pick becomes the pending token and the ones after the first wait
    /// ahead. On failure the pass's pending token waits again and the caller rewinds the KV
    /// cache to where the pass began.
    pub fn verify(
        &mut self,
        generation: &mut Generation,
        rows: &mut [f32],
    ) -> Result<Verified, GenerateError> {
        self.logits_ready = false;
        let draft = self.batch.get(1..).unwrap_or_default();
        let picked = generation.verify(rows, draft, self.margin);
        let mut picked = match picked {
            Ok(p) if !p.is_empty() => VecDeque::from(p),
            failed => {
                self.pass_failed();
                return Err(failed.err().unwrap_or(GenerateError::Finished));
            }
        };
        let draft = &self.batch[1..];
        let accepted = picked
            .iter()
            .zip(draft)
            .take_while(|(e, &d)| e.id == d)
            .count();
        if let Some(d) = &mut self.drafter {
            d.observe(draft.len(), accepted);
        }
        let (drafted, keep) = (draft.len(), picked.len());
        self.pending = picked.back().map(|e| e.id);
        let first = picked.pop_front().ok_or(GenerateError::Finished)?;
        self.ahead = picked;
        Ok(Verified {
            first,
            keep,
            drafted,
            accepted,
        })
    }

    /// What verify passes cost as measured so far, relative to a one-position pass (the cost
    /// model's guess for sizes not timed yet).
    fn pass_cost(&self) -> PassCost {
        self.pass_ms.cost()
    }
}

#[cfg(test)]
mod tests;
