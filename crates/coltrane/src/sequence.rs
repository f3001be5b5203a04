//! Tier 2: the per-sequence state machine. Each step it composes the tiers' masks — the JSON
//! matcher's, the folds', the class rules', the eddy bans — then `apply` hands them to the
//! fallback (`fallback.rs`); `accept` and `rollback` move the state, which is small and copied
//! per token so a rejected draft can be undone.

use crate::bitset::TokenSet;
use crate::config::{ColtraneConfig, ColtraneError, Preset};
use crate::dfa::{lock, Dfa, SharedDfa, StateId, DEAD};
use crate::eddy;
use crate::fallback::{self, argmax, FoldKey, Lean, Plan, Source, Tiers};
use crate::fold::{self, FoldState};
use crate::index::Index;
use crate::mass;
use crate::metrics::{Metrics, StepReport};
use crate::schema::Schema;
use crate::vocab::{Pitch, TokenKind, PITCHES};
use std::collections::HashMap;
use std::sync::Arc;

/// What an accepted token changes: copied onto `undo` before each accept, so rollback is a pop.
#[derive(Clone, Copy)]
struct Snapshot {
    dfa: StateId,
    fold: FoldState,
    last_pitch: Option<Pitch>,
    last_text_pitch: Option<Pitch>,
    ended: bool,
    generated: usize,
}

/// What a step counted, to take back ([`Coltrane::mark`], [`Coltrane::rewind`]).
#[derive(Debug, Clone)]
pub struct StepMark {
    metrics: Metrics,
    mask_times: usize,
}

/// The per-sequence state machine.
pub struct Coltrane {
    index: Arc<Index>,
    cfg: ColtraneConfig,
    /// The JSON matcher, shared with other sequences of the same preset and vocabulary.
    dfa: Option<SharedDfa>,
    state: Snapshot,
    /// The state before each accepted token, for rollback.
    undo: Vec<Snapshot>,
    /// Generated tokens (prompt tokens excluded), for eddy detection.
    history: Vec<u32>,
    /// Fold masks by (open brackets that a token could pop, depth, quote).
    fold_masks: HashMap<FoldKey, (TokenSet, u32)>,
    /// Class-transition masks by the previous token's class.
    class_masks: HashMap<Option<Pitch>, TokenSet>,
    /// The loops found at this step: (period, the token that would continue it).
    eddies: Vec<(usize, u32)>,
    /// Recent bans: (generated count when banned, period).
    recent_bans: Vec<(usize, usize)>,
    /// The step's mask, and the buffers it is composed from (reused, never reallocated).
    mask: TokenSet,
    fold_buf: TokenSet,
    full: TokenSet,
    metrics: Metrics,
    mask_times: Vec<f32>,
}

impl Coltrane {
    pub fn new(index: Arc<Index>, cfg: ColtraneConfig) -> Result<Coltrane, ColtraneError> {
        cfg.validate()?;
        let n = index.vocab.len();
        let dfa = match cfg.matcher_key() {
            Some(key) => Some(index.matchers.get_or_make(&key, || {
                cfg.compile()
                    .map(|s| Dfa::new(s.unwrap_or_else(Schema::any)))
            })?),
            None => None,
        };
        let start = dfa.as_ref().map_or(DEAD, |d| lock(d).start());
        Ok(Coltrane {
            state: Snapshot {
                dfa: start,
                fold: FoldState::default(),
                last_pitch: None,
                last_text_pitch: None,
                ended: false,
                generated: 0,
            },
            dfa,
            index,
            cfg,
            undo: Vec::new(),
            history: Vec::new(),
            fold_masks: HashMap::new(),
            class_masks: HashMap::new(),
            eddies: Vec::new(),
            recent_bans: Vec::new(),
            mask: TokenSet::empty(n),
            fold_buf: TokenSet::empty(n),
            full: TokenSet::full(n),
            metrics: Metrics {
                closed: true,
                ..Metrics::default()
            },
            mask_times: Vec::new(),
        })
    }

    pub fn config(&self) -> &ColtraneConfig {
        &self.cfg
    }

    fn balanced(&self) -> bool {
        self.cfg.preset == Some(Preset::Balanced)
    }

    /// Names the tokens the next step may change: in `removed`, what its mask removes before
    /// any fallback gives some back; in `changed`, what prosody raises — when those are at most
    /// `max_changed` and no JSON matcher decides (its masks remove most of a vocabulary, and it
    /// reads the logits); `false` otherwise, adding nothing. Nothing is counted.
    pub fn touched(
        &mut self,
        remaining: Option<usize>,
        changed: &mut Vec<u32>,
        max_changed: usize,
        removed: &mut Vec<u32>,
    ) -> bool {
        if self.dfa.is_some() {
            return false;
        }
        let after_sentence = self.state.last_text_pitch == Some(Pitch::SentenceEnd);
        let vocab = &self.index.vocab;
        let raised = fallback::prosody_targets(remaining, self.cfg.prosody, after_sentence, vocab);
        if raised.is_some_and(|t| t.count() > max_changed) {
            return false;
        }
        changed.extend(raised.into_iter().flat_map(|t| t.iter()));
        let mark = self.mark();
        let plan = self.plan(remaining);
        let mut mask = std::mem::take(&mut self.mask);
        plan.compose(plan.soft.len(), &self.tiers(None), &mut mask);
        self.rewind(mark);
        removed.extend(mask.iter_missing());
        self.mask = mask;
        true
    }

    /// What [`Coltrane::apply`] counts, as it is now: [`Coltrane::rewind`] puts it back (a step
    /// run again on more of the logits counts once).
    pub fn mark(&self) -> StepMark {
        StepMark {
            metrics: self.metrics.clone(),
            mask_times: self.mask_times.len(),
        }
    }

    /// Puts back what `apply` counted since `mark`.
    pub fn rewind(&mut self, mark: StepMark) {
        self.metrics = mark.metrics;
        self.mask_times.truncate(mark.mask_times);
    }

    /// Whether the text may end here: the JSON value is complete, the folds are closed.
    pub fn can_end(&self) -> bool {
        let json_ok = match &self.dfa {
            Some(d) => lock(d).can_end(self.state.dfa),
            None => true,
        };
        json_ok && (!self.balanced() || self.state.fold.closed())
    }

    /// The mask with every tier applied (no fallback), given `remaining` tokens in the budget
    /// (this one included).
    pub fn compute_mask(&mut self, remaining: Option<usize>) -> &TokenSet {
        let plan = self.plan(remaining);
        let dfa = self.dfa.clone();
        let mut guard = dfa.as_ref().map(lock);
        let json = self.json_mask(guard.as_deref_mut(), remaining);
        let mut out = std::mem::take(&mut self.mask);
        plan.compose(plan.soft.len(), &self.tiers(json), &mut out);
        drop(guard);
        self.mask = out;
        &self.mask
    }

    /// Which masks make this step's tiers (computing and caching what is missing): the hard
    /// rules, then the soft ones in the order they relax last-first (folds, class rules, eddy
    /// bans). The JSON mask comes from the matcher itself (`json_mask`).
    fn plan(&mut self, remaining: Option<usize>) -> Plan {
        let mut plan = Plan::default();
        if self.dfa.is_some() {
            plan.hard.push(Source::Json);
        }
        if self.balanced() {
            match self.fold_mask(remaining) {
                // Closing in time is never relaxed.
                FoldMask::Binding => plan.hard.push(Source::FoldBudget),
                FoldMask::Cached(key) => {
                    plan.soft.push(Source::Fold(key));
                    // End-of-text only at closure, always.
                    plan.ban_eos = !self.state.fold.closed();
                }
            }
        }
        // A JSON matcher already keeps special tokens out.
        if self.dfa.is_none() {
            self.class_mask();
            plan.soft.push(Source::Class(self.state.last_pitch));
        }
        if self.eddy_bans() {
            plan.soft.push(Source::Eddy);
        }
        plan
    }

    /// The masks this step's plan points into (`json`: the matcher's, if any).
    fn tiers<'a>(&'a self, json: Option<&'a TokenSet>) -> Tiers<'a> {
        Tiers {
            json,
            fold_budget: &self.fold_buf,
            folds: &self.fold_masks,
            classes: &self.class_masks,
            eddies: &self.eddies,
            full: &self.full,
            eos_ids: self.index.vocab.eos_ids(),
        }
    }

    /// The JSON matcher's mask for the current state (a reference into the matcher's cache),
    /// counting budget steps.
    fn json_mask<'d>(
        &mut self,
        dfa: Option<&'d mut Dfa>,
        remaining: Option<usize>,
    ) -> Option<&'d TokenSet> {
        let dfa = dfa?;
        if self.state.dfa == DEAD {
            // A matcher that died (a refused token was forced) allows only end-of-text.
            return Some(dfa.eos_only(&self.index.vocab));
        }
        let (set, info) = dfa.mask_ref(&self.index.vocab, self.state.dfa, remaining);
        if info.budget_bound {
            self.metrics.budget_steps += 1;
        }
        if info.over_budget {
            self.metrics.over_budget = true;
        }
        Some(set)
    }

    /// Tokens that keep the folds well formed: the cached mask of the current fold state, or,
    /// when the budget binds, the tokens that still close in time (in `fold_buf`).
    fn fold_mask(&mut self, remaining: Option<usize>) -> FoldMask {
        let s = self.state.fold;
        let levels = (s.depth as usize).min(16);
        let key_bits = if levels == 0 {
            0
        } else {
            s.stack & ((1u128 << (2 * levels)) - 1)
        };
        let key = (key_bits, s.depth, s.quote);
        let limit = remaining.map(|r| r.saturating_sub(1));
        let max_close = match self.fold_masks.get(&key) {
            Some((_, max_close)) => *max_close,
            None => {
                let (m, max_close) = self.fold_mask_with(s, None);
                if self.fold_masks.len() > 4096 {
                    self.fold_masks.clear();
                }
                self.fold_masks.insert(key, (m, max_close));
                max_close
            }
        };
        if limit.is_none_or(|l| max_close as usize <= l) {
            return FoldMask::Cached(key);
        }
        self.metrics.budget_steps += 1;
        let (m, _) = self.fold_mask_with(s, limit);
        if m.iter().any(|id| !self.index.vocab.is_eos(id)) || s.closed() {
            self.fold_buf = m;
            return FoldMask::Binding;
        }
        // Cannot close in time: the tokens that close the most.
        let best = self
            .index
            .vocab
            .structural()
            .iter()
            .filter_map(|&id| s.after(&self.index.vocab.fold(id), self.cfg.max_depth))
            .map(|a| a.close_cost())
            .min()
            .unwrap_or(s.close_cost());
        self.fold_buf = self.fold_mask_with(s, Some(best.min(s.close_cost()))).0;
        FoldMask::Binding
    }

    /// The fold mask from `s`, keeping tokens whose end state closes within `limit`; returns
    /// it and the largest closing cost among its tokens. End-of-text only at closure.
    fn fold_mask_with(&self, s: FoldState, limit: Option<usize>) -> (TokenSet, u32) {
        let v = &self.index.vocab;
        let max_depth = self.cfg.max_depth;
        let fits = |cost: usize| limit.is_none_or(|l| cost <= l);
        let mut m = TokenSet::empty(v.len());
        // Neutral tokens keep the folds (an escape aside), so they fit iff the state does.
        let neutral_cost = s
            .after(&fold::FoldCost::NEUTRAL, max_depth)
            .map_or(0, |a| a.close_cost());
        if fits(neutral_cost) {
            m.copy_from(v.neutral());
        }
        let mut max_close = neutral_cost as u32;
        for &id in v.structural() {
            if let Some(a) = s.after(&v.fold(id), max_depth) {
                if fits(a.close_cost()) {
                    m.insert(id);
                    max_close = max_close.max(a.close_cost() as u32);
                }
            }
        }
        for &id in v.eos_ids() {
            if s.closed() {
                m.insert(id);
            } else {
                m.remove(id);
            }
        }
        (m, max_close)
    }

    /// Class transitions: every class may follow every other, except that special tokens
    /// (`<|im_start|>`, …) never appear inside constrained text; end-of-text is the other
    /// tiers' business. Cached by the previous token's class.
    fn class_mask(&mut self) {
        let prev = self.state.last_pitch;
        let v = &self.index.vocab;
        self.class_masks.entry(prev).or_insert_with(|| {
            let mut m = TokenSet::empty(v.len());
            for p in PITCHES {
                if p != Pitch::Special {
                    m.union_with(v.class(p));
                }
            }
            m.union_with(v.eos());
            m
        });
    }

    /// Finds the loops the recent tokens are in (their continuations go in `eddies`).
    fn eddy_bans(&mut self) -> bool {
        let Some(cfg) = self.cfg.eddy else {
            self.eddies.clear();
            return false;
        };
        eddy::detect(&self.history, &cfg, &mut self.eddies);
        !self.eddies.is_empty()
    }

    /// One decode step: computes the mask, relaxes the soft tiers while the allowed tokens hold
    /// too little probability, writes −inf into the rest, and applies prosody. `clock` (ms), if
    /// given, times the mask.
    pub fn apply(
        &mut self,
        logits: &mut [f32],
        remaining: Option<usize>,
        clock: Option<fn() -> f64>,
    ) -> StepReport {
        // Every logit known: each decision is made, so the step never stops short.
        match self.step(logits, remaining, clock, f32::NEG_INFINITY) {
            Ok((report, _)) => report,
            Err(_) => StepReport::default(),
        }
    }

    /// [`Coltrane::apply`] on part of the logits: the unknown ones are −inf in `logits`, each at
    /// most `bound`. `Ok` with the step's report, as every logit gives it, and the most an
    /// unknown logit is after the step; or `Err(t)`, counting nothing: the step needs every
    /// logit at least `t` (−inf: all of them). What it decides from part:
    /// - the mask itself reads no logit; it only lowers them;
    /// - the token it prevented is the largest logit: that one must be known;
    /// - the fallback's mass test, from the known masses and the bound's term for each unknown
    ///   token ([`mass::keeps_mass_part`]);
    /// - prosody's bias raises its unknown targets by the bias at most; observing, it needs the
    ///   largest logit before and after.
    pub fn apply_part(
        &mut self,
        logits: &mut [f32],
        bound: f32,
        remaining: Option<usize>,
        clock: Option<fn() -> f64>,
    ) -> Result<(StepReport, f32), f32> {
        self.step(logits, remaining, clock, bound)
    }

    fn step(
        &mut self,
        logits: &mut [f32],
        remaining: Option<usize>,
        clock: Option<fn() -> f64>,
        bound: f32,
    ) -> Result<(StepReport, f32), f32> {
        let t0 = clock.map(|c| c());
        let mark = self.mark();
        let top = argmax(logits);
        if bound != f32::NEG_INFINITY && !top.is_some_and(|t| logits[t as usize] > bound) {
            // The largest logit names the token the mask prevented: it must be known. Every
            // logit at least the known largest tells.
            let known = top.map_or(f32::NEG_INFINITY, |t| logits[t as usize]);
            return Err(if known.is_finite() {
                known
            } else {
                f32::NEG_INFINITY
            });
        }
        let plan = self.plan(remaining);
        let dfa = self.dfa.clone();
        let mut guard = dfa.as_ref().map(lock);
        let json = self.json_mask(guard.as_deref_mut(), remaining);
        if plan.json_only() {
            // The common JSON step: the matcher's cached mask as it is, no copy.
            let mask = json.unwrap_or(&self.full);
            let mask_us = elapsed_us(clock, t0);
            mask.mask_logits(logits);
            let report = StepReport {
                mask_us,
                prevented: top.is_some_and(|t| !mask.contains(t)),
                allowed: mask.count(),
                ..StepReport::default()
            };
            drop(guard);
            self.metrics.violations_prevented += u64::from(report.prevented);
            self.metrics.steps += 1;
            self.mask_times.push(report.mask_us);
            return Ok((report, bound));
        }
        let mut mask = std::mem::take(&mut self.mask);
        let tiers = self.tiers(json);
        plan.compose(plan.soft.len(), &tiers, &mut mask);
        let mask_us = elapsed_us(clock, t0);
        let threshold = self.cfg.fallback_mass;
        let relaxation = fallback::relax(&plan, &tiers, &mut mask, |m| match threshold > 0.0 {
            true => mass::keeps_mass_part(logits, m, threshold, bound),
            false => Ok(true),
        });
        drop(guard);
        mask.mask_logits(logits);
        // Where a JSON matcher decides how the text ends, prosody stays out.
        let lean = match (&relaxation, self.dfa.is_none()) {
            (Ok(_), true) => {
                let after_sentence = self.state.last_text_pitch == Some(Pitch::SentenceEnd);
                let cfg = self.cfg.prosody;
                fallback::prosody(
                    logits,
                    remaining,
                    cfg,
                    after_sentence,
                    &self.index.vocab,
                    bound,
                )
                .map_err(|()| f32::NEG_INFINITY)
            }
            _ => Ok((Lean::default(), bound)),
        };
        let (relaxation, (lean, after)) = match (relaxation, lean) {
            (Ok(r), Ok(l)) => (r, l),
            (Err(t), _) | (_, Err(t)) => {
                self.mask = mask;
                self.rewind(mark);
                return Err(t);
            }
        };
        let mut report = StepReport {
            mask_us,
            relaxed: relaxation.relaxed,
            // The bans count only if no fallback dropped them.
            eddy_bans: match plan.eddy_last() && relaxation.kept == plan.soft.len() {
                true => self.eddies.len() as u32,
                false => 0,
            },
            prevented: top.is_some_and(|t| !mask.contains(t)),
            allowed: mask.count(),
            prosody_bias: lean.bias,
            ..StepReport::default()
        };
        if report.relaxed > 0 {
            self.metrics.fallbacks += 1;
            report.fallback = relaxation.kept == 0 && plan.hard.is_empty();
            self.metrics.unmasked += u64::from(report.fallback);
        }
        if report.eddy_bans > 0 {
            self.metrics.eddies_broken += 1;
            let at = self.state.generated;
            for &(p, _) in &self.eddies {
                self.recent_bans.push((at, p));
            }
        }
        self.metrics.violations_prevented += u64::from(report.prevented);
        self.metrics.steps += 1;
        self.mask_times.push(report.mask_us);
        self.metrics.prosody_steps += u64::from(lean.counts);
        self.mask = mask;
        Ok((report, after))
    }

    /// A generated token was accepted. A token that breaks a hard rule is an error (the
    /// matcher then allows only end-of-text); one that breaks a fold is counted.
    pub fn accept(&mut self, token: u32) -> Result<(), ColtraneError> {
        self.undo.push(self.state);
        let index = self.index.clone();
        let v = &index.vocab;
        let mut result = Ok(());
        if v.is_eos(token) {
            self.state.ended = true;
        } else {
            let bytes = v.token_bytes(token);
            if let Some(dfa) = &self.dfa {
                let kind_ok = v.kind(token) != Some(TokenKind::Special);
                let next = match kind_ok {
                    true => lock(dfa).walk(self.state.dfa, bytes),
                    false => DEAD,
                };
                if next == DEAD {
                    result = Err(ColtraneError::Forbidden(token));
                }
                self.state.dfa = next;
            }
            if self.balanced() {
                match self.state.fold.after(&v.fold(token), self.cfg.max_depth) {
                    Some(s) => self.state.fold = s,
                    None => {
                        let bad = self.state.fold.force(bytes, self.cfg.max_depth);
                        self.metrics.fold_violations += u64::from(bad.max(1));
                    }
                }
                self.metrics.max_depth = self.metrics.max_depth.max(self.state.fold.depth);
            }
            let pitch = v.pitch(token);
            self.state.last_pitch = pitch;
            if !matches!(pitch, Some(Pitch::Space | Pitch::Newline)) {
                self.state.last_text_pitch = pitch;
            }
            self.history.push(token);
            self.state.generated += 1;
            self.check_returned_eddies();
        }
        self.metrics.closed = self.can_end();
        self.metrics.sentence_end = self.state.last_text_pitch == Some(Pitch::SentenceEnd);
        result
    }

    /// A loop detected again within two periods of a ban on it came back.
    fn check_returned_eddies(&mut self) {
        let Some(cfg) = self.cfg.eddy else {
            return;
        };
        let now = self.state.generated;
        self.recent_bans.retain(|&(at, p)| now <= at + 2 * p);
        if self.recent_bans.is_empty() {
            return;
        }
        let mut found = Vec::new();
        eddy::detect(&self.history, &cfg, &mut found);
        for (p, _) in found {
            if let Some(i) = self.recent_bans.iter().position(|&(_, bp)| bp == p) {
                self.recent_bans.swap_remove(i);
                self.metrics.eddies_returned += 1;
            }
        }
    }

    /// How many leading tokens of `draft` the mask allows, each after the ones before it (every
    /// tier applied, no fallback), given `remaining` tokens in the budget. Leaves no trace:
    /// the state and metrics are as before (cached masks stay, they are pure).
    pub fn allowed_prefix(&mut self, draft: &[u32], remaining: Option<usize>) -> usize {
        let (metrics, bans) = (self.metrics.clone(), self.recent_bans.clone());
        let (mut allowed, mut accepts) = (0, 0);
        for (i, &t) in draft.iter().enumerate() {
            let left = remaining.map(|r| r.saturating_sub(i));
            if self.state.ended || !self.compute_mask(left).contains(t) {
                break;
            }
            accepts += 1; // an accept pushes an undo entry, a refused one too
            if self.accept(t).is_err() {
                break;
            }
            allowed += 1;
        }
        let _ = self.rollback(accepts);
        self.metrics = metrics;
        self.recent_bans = bans;
        allowed
    }

    /// Back to the start: no token accepted, metrics cleared (cached masks stay).
    pub fn reset(&mut self) {
        if let Some(first) = self.undo.first() {
            self.state = *first;
        }
        self.undo.clear();
        self.history.clear();
        self.recent_bans.clear();
        self.mask_times.clear();
        self.metrics = Metrics {
            closed: self.can_end(),
            ..Metrics::default()
        };
    }

    /// A prompt token: not part of the constrained text; recorded so rollback stays aligned.
    pub fn accept_context(&mut self) {
        self.undo.push(self.state);
    }

    /// Undoes the last `n` accepts.
    pub fn rollback(&mut self, n: usize) -> Result<(), ColtraneError> {
        if n > self.undo.len() {
            return Err(ColtraneError::Rollback {
                requested: n,
                available: self.undo.len(),
            });
        }
        for _ in 0..n {
            if let Some(s) = self.undo.pop() {
                if s.generated < self.state.generated {
                    self.history.truncate(s.generated);
                }
                self.state = s;
            }
        }
        self.metrics.closed = self.can_end();
        Ok(())
    }

    /// The generation's metrics so far.
    pub fn metrics(&self) -> Metrics {
        let mut m = self.metrics.clone();
        if let Some(d) = &self.dfa {
            let d = lock(d);
            m.relaxations = d.schema().relaxations().to_vec();
            m.annotations = d.schema().annotations().to_vec();
        }
        if !self.mask_times.is_empty() {
            let mut t = self.mask_times.clone();
            t.sort_by(f32::total_cmp);
            let at = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
            m.mask_us_p50 = at(0.5);
            m.mask_us_p99 = at(0.99);
        }
        m
    }

    /// States of the JSON matcher built so far (0 without one).
    pub fn matcher_states(&self) -> usize {
        self.dfa.as_ref().map_or(0, |d| lock(d).states())
    }
}

/// The fold tier of a step.
enum FoldMask {
    /// The cached mask of the fold state (soft).
    Cached(FoldKey),
    /// The budget binds: the tokens that still close in time, in `fold_buf` (hard).
    Binding,
}

fn elapsed_us(clock: Option<fn() -> f64>, t0: Option<f64>) -> f32 {
    match (clock, t0) {
        (Some(c), Some(t0)) => ((c() - t0) * 1000.0) as f32,
        _ => 0.0,
    }
}
