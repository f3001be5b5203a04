//! COLTRANE: a finite-state token mask inside every decode step. Three tiers:
//!
//! 1. [`Vocab`] — built once per tokenizer from the tokens' bytes: a byte trie, each token's
//!    pitch class (`pitch_class_table`) and fold cost (`fold_cost_table`), a bitset per class.
//! 2. [`Coltrane`] — the per-sequence state machine (`compute_mask`, `accept`, `rollback`,
//!    `can_end`): folds (brackets and quotes, string-aware, with a depth bound and harmonic
//!    closure), the JSON / JSON Schema matcher (`machine.rs`, as a lazy DFA in `dfa.rs`), class
//!    transitions, eddy (loop) detection, budget-aware closing and terminal prosody.
//! 3. The oracle fallback — when the allowed tokens hold less than `fallback_mass` of the model's
//!    probability, the soft tiers relax one at a time (eddy bans, then class rules, then folds),
//!    down to the unmasked distribution; hard rules (JSON, a schema) never relax.
//!
//! Pure Rust, no I/O, deterministic (no clock unless the caller passes one). docs/coltrane.md.

pub mod bitset;
pub mod dfa;
pub mod eddy;
pub mod fold;
pub mod machine;
mod mass;
pub mod openai;
pub mod schema;
pub mod vocab;

pub use bitset::TokenSet;
pub use eddy::EddyConfig;
pub use schema::{Schema, SchemaError};
pub use vocab::{Pitch, TokenKind, Vocab, VocabError};

use dfa::{lock, Dfa, SharedDfa, StateId, DEAD};
use fold::{FoldState, Quote};
use std::collections::HashMap;
use std::sync::Arc;
use vocab::PITCHES;

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

/// Tokens before the end at which prosody starts leaning, and how hard (nats) at the end.
const PROSODY_WINDOW: usize = 16;
const PROSODY_BIAS: f32 = 6.0;

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
            Some(Preset::JsonSchema(v)) => Some(Schema::compile(v)?),
            _ => None,
        })
    }

    /// The canonical spelling of the JSON preset, which names its shared matcher.
    fn matcher_key(&self) -> Option<String> {
        match &self.preset {
            Some(Preset::Json) => Some("json".into()),
            Some(Preset::JsonSchema(v)) => Some(format!("schema:{v}")),
            _ => None,
        }
    }
}

/// What the constraint did at one step.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// Tokens the final mask allows.
    pub allowed: usize,
    /// Soft tiers relaxed because the mask held too little probability.
    pub relaxed: u8,
    /// The step used the unmasked distribution (every soft tier relaxed).
    pub fallback: bool,
    /// The model's top token was masked out.
    pub prevented: bool,
    /// Tokens banned to break a loop.
    pub eddy_bans: u32,
    /// Prosody's bias (nats) on sentence ends or end-of-text this step (what it would be, when
    /// observing).
    pub prosody_bias: f32,
    /// Time to compute the mask, microseconds (0 without a clock).
    pub mask_us: f32,
}

/// What the constraint did over a generation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    pub steps: u64,
    /// Steps where the model's top token was masked out.
    pub violations_prevented: u64,
    /// Steps where a soft tier was relaxed.
    pub fallbacks: u64,
    /// Steps decoded unmasked (every soft tier relaxed).
    pub unmasked: u64,
    /// Loops broken: steps where an eddy ban was applied.
    pub eddies_broken: u64,
    /// Loops that came back within two periods of a ban.
    pub eddies_returned: u64,
    /// Tokens accepted that broke a fold (let through by a fallback).
    pub fold_violations: u64,
    /// Deepest bracket nesting reached.
    pub max_depth: u8,
    /// Steps where the token budget bound the mask (closing in time).
    pub budget_steps: u64,
    /// At some step the shortest completion had more bytes than tokens were left (closing costs
    /// count a token per byte, the worst case), so the mask kept to the tokens that close
    /// fastest. The output may still have fitted: tokens usually hold several bytes.
    pub over_budget: bool,
    /// Steps where prosody leaned (or, observing, would have changed the top token).
    pub prosody_steps: u64,
    /// The structure is closed now: folds balanced, the JSON value complete.
    pub closed: bool,
    /// The text ends with a sentence end (before any end-of-text).
    pub sentence_end: bool,
    /// Mask time per step, microseconds: median and 99th percentile (0 without a clock).
    pub mask_us_p50: f32,
    pub mask_us_p99: f32,
}

#[derive(Clone, Copy)]
struct Snapshot {
    dfa: StateId,
    fold: FoldState,
    last_pitch: Option<Pitch>,
    last_text_pitch: Option<Pitch>,
    ended: bool,
    generated: usize,
}

/// The per-sequence state machine.
pub struct Coltrane {
    vocab: Arc<Vocab>,
    cfg: ColtraneConfig,
    /// The JSON matcher, shared with other sequences of the same preset and vocabulary.
    dfa: Option<SharedDfa>,
    state: Snapshot,
    /// The state before each accepted token, for rollback.
    undo: Vec<Snapshot>,
    /// Generated tokens (prompt tokens excluded), for eddy detection.
    history: Vec<u32>,
    /// Fold masks by (open brackets that a token could pop, depth, quote).
    fold_masks: HashMap<(u128, u8, Quote), (TokenSet, u32)>,
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
    pub fn new(vocab: Arc<Vocab>, cfg: ColtraneConfig) -> Result<Coltrane, ColtraneError> {
        cfg.validate()?;
        let n = vocab.len();
        let dfa = match cfg.matcher_key() {
            Some(key) => Some(vocab.matchers().get_or_make(&key, || {
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
            vocab,
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
        self.compose(&plan, plan.soft.len(), json, &mut out);
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

    /// Whether the plan is the JSON mask alone: then it is used as the matcher caches it, with
    /// no copy.
    fn json_only(plan: &Plan) -> bool {
        plan.hard == [Source::Json] && plan.soft.is_empty() && !plan.ban_eos
    }

    /// The hard tiers and the first `soft` soft ones, into `out`.
    fn compose(&self, plan: &Plan, soft: usize, json: Option<&TokenSet>, out: &mut TokenSet) {
        let mut first = true;
        for src in plan.hard.iter().chain(&plan.soft[..soft]) {
            let set = match src {
                Source::Json => match json {
                    Some(m) => m,
                    None => continue,
                },
                Source::FoldBudget => &self.fold_buf,
                Source::Fold(key) => match self.fold_masks.get(key) {
                    Some((m, _)) => m,
                    None => continue,
                },
                Source::Class(p) => match self.class_masks.get(p) {
                    Some(m) => m,
                    None => continue,
                },
                Source::Eddy => {
                    if first {
                        out.copy_from(&self.full);
                        first = false;
                    }
                    for &(_, id) in &self.eddies {
                        out.remove(id);
                    }
                    continue;
                }
            };
            if first {
                out.copy_from(set);
                first = false;
            } else {
                out.intersect_with(set);
            }
        }
        if first {
            out.copy_from(&self.full);
        }
        if plan.ban_eos {
            for &id in self.vocab.eos_ids() {
                out.remove(id);
            }
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
            return Some(dfa.eos_only(&self.vocab));
        }
        let (set, info) = dfa.mask_ref(&self.vocab, self.state.dfa, remaining);
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
        if m.iter().any(|id| !self.vocab.is_eos(id)) || s.closed() {
            self.fold_buf = m;
            return FoldMask::Binding;
        }
        // Cannot close in time: the tokens that close the most.
        let best = self
            .vocab
            .structural()
            .iter()
            .filter_map(|&id| s.after(&self.vocab.fold(id), self.cfg.max_depth))
            .map(|a| a.close_cost())
            .min()
            .unwrap_or(s.close_cost());
        self.fold_buf = self.fold_mask_with(s, Some(best.min(s.close_cost()))).0;
        FoldMask::Binding
    }

    /// The fold mask from `s`, keeping tokens whose end state closes within `limit`; returns
    /// it and the largest closing cost among its tokens. End-of-text only at closure.
    fn fold_mask_with(&self, s: FoldState, limit: Option<usize>) -> (TokenSet, u32) {
        let v = &self.vocab;
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
        let v = &self.vocab;
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
        let t0 = clock.map(|c| c());
        let plan = self.plan(remaining);
        let dfa = self.dfa.clone();
        let mut guard = dfa.as_ref().map(lock);
        let json = self.json_mask(guard.as_deref_mut(), remaining);
        if Self::json_only(&plan) {
            // The common JSON step: the matcher's cached mask as it is, no copy.
            let mask = json.unwrap_or(&self.full);
            let mask_us = elapsed_us(clock, t0);
            let top = argmax(logits);
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
            return report;
        }
        let mut mask = std::mem::take(&mut self.mask);
        let mut upto = plan.soft.len();
        self.compose(&plan, upto, json, &mut mask);
        let mask_us = elapsed_us(clock, t0);
        let eddy_last = plan.soft.last() == Some(&Source::Eddy);
        let mut report = StepReport {
            mask_us,
            eddy_bans: if eddy_last {
                self.eddies.len() as u32
            } else {
                0
            },
            ..StepReport::default()
        };
        // A ban never empties the mask: a loop is better than nothing.
        if eddy_last && mask.is_empty() {
            upto -= 1;
            self.compose(&plan, upto, json, &mut mask);
            report.eddy_bans = 0;
        }
        // Tier 3: relax the soft tiers, last first, while the mask holds too little.
        let threshold = self.cfg.fallback_mass;
        if threshold > 0.0 && upto > 0 {
            while upto > 0 && !mass::keeps_mass(logits, &mask, threshold) {
                upto -= 1;
                report.relaxed += 1;
                self.compose(&plan, upto, json, &mut mask);
            }
        }
        drop(guard);
        if report.relaxed > 0 {
            self.metrics.fallbacks += 1;
            report.fallback = upto == 0 && plan.hard.is_empty();
            self.metrics.unmasked += u64::from(report.fallback);
            if eddy_last && upto < plan.soft.len() {
                report.eddy_bans = 0;
            }
        }
        if report.eddy_bans > 0 {
            self.metrics.eddies_broken += 1;
            let at = self.state.generated;
            for &(p, _) in &self.eddies {
                self.recent_bans.push((at, p));
            }
        }
        let top = argmax(logits);
        mask.mask_logits(logits);
        report.prevented = top.is_some_and(|t| !mask.contains(t));
        report.allowed = mask.count();
        self.metrics.violations_prevented += u64::from(report.prevented);
        self.metrics.steps += 1;
        self.mask_times.push(report.mask_us);
        report.prosody_bias = self.prosody(logits, remaining);
        self.mask = mask;
        report
    }

    /// Leans toward a sentence end (then end-of-text) as the budget runs out.
    fn prosody(&mut self, logits: &mut [f32], remaining: Option<usize>) -> f32 {
        let (Some(r), mode) = (remaining, self.cfg.prosody) else {
            return 0.0;
        };
        if mode == ProsodyMode::Off || r > PROSODY_WINDOW || self.dfa.is_some() {
            return 0.0;
        }
        let bias = PROSODY_BIAS * (1.0 - (r.saturating_sub(1)) as f32 / PROSODY_WINDOW as f32);
        let after_sentence = self.state.last_text_pitch == Some(Pitch::SentenceEnd);
        let targets = match after_sentence {
            true => self.vocab.eos(),
            false => self.vocab.class(Pitch::SentenceEnd),
        };
        let before = argmax(logits);
        let mut biased: Vec<(usize, f32)> = Vec::new();
        for id in targets.iter() {
            if let Some(l) = logits.get_mut(id as usize) {
                if l.is_finite() {
                    biased.push((id as usize, *l));
                    *l += bias;
                }
            }
        }
        let changed = argmax(logits) != before;
        if mode == ProsodyMode::Observe {
            for (i, l) in biased {
                logits[i] = l;
            }
            self.metrics.prosody_steps += u64::from(changed);
        } else {
            self.metrics.prosody_steps += 1;
        }
        bias
    }

    /// A generated token was accepted. A token that breaks a hard rule is an error (the
    /// matcher then allows only end-of-text); one that breaks a fold is counted.
    pub fn accept(&mut self, token: u32) -> Result<(), ColtraneError> {
        self.undo.push(self.state);
        let v = self.vocab.clone();
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

/// Where a tier's mask lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The JSON matcher's mask (from the matcher's cache).
    Json,
    /// The fold mask under a binding budget (`fold_buf`).
    FoldBudget,
    /// A cached fold mask.
    Fold((u128, u8, Quote)),
    /// A cached class-transition mask.
    Class(Option<Pitch>),
    /// The eddy bans (`eddies`).
    Eddy,
}

/// A step's tiers.
#[derive(Default)]
struct Plan {
    hard: Vec<Source>,
    /// In the order they apply; relaxed from the last.
    soft: Vec<Source>,
    /// End-of-text is banned (a fold is open): hard.
    ban_eos: bool,
}

enum FoldMask {
    Cached((u128, u8, Quote)),
    Binding,
}

fn elapsed_us(clock: Option<fn() -> f64>, t0: Option<f64>) -> f32 {
    match (clock, t0) {
        (Some(c), Some(t0)) => ((c() - t0) * 1000.0) as f32,
        _ => 0.0,
    }
}

/// The largest logit's index (NaN and −inf never win, lowest id on ties).
fn argmax(logits: &[f32]) -> Option<u32> {
    let (mut best, mut at) = (f32::NEG_INFINITY, None);
    for (i, &l) in logits.iter().enumerate() {
        // NaN compares false, so it never wins.
        if l > best {
            best = l;
            at = Some(i as u32);
        }
    }
    at
}

#[cfg(test)]
mod tests;
