//! Drafts for speculative decoding: tokens guessed cheaply, then checked all at once by one
//! batched forward pass of the real model (the host's verify pass). A draft never changes what
//! is generated, only how many forward passes it takes: the verifier keeps a draft token only
//! when it is the token the decode pipeline picks anyway.
//!
//! [`Drafter`] is the interface (a draft model sharing the tokenizer can implement it later);
//! [`PromptLookup`] needs no second model: it finds the most recent earlier occurrence of the
//! text's last few tokens in the conversation (prompt and generated text) and proposes what
//! followed it there. Copy-heavy work (summaries, edits, code that repeats names) drafts well;
//! open-ended prose rarely matches, and the adaptive length keeps misses from costing.

/// How drafts are made and how long they may be.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftConfig {
    /// The longest n-gram matched (shorter matches are tried when it finds none).
    pub ngram: usize,
    /// The most tokens one draft may hold.
    pub max_draft: usize,
    /// Size each draft from the acceptance measured so far (per match length), instead of
    /// always proposing `max_draft`.
    pub adaptive: bool,
    /// The margin rule: keep going past an accepted draft token only when the verifier's top-1
    /// minus top-2 logit margin γ satisfies `2τ ≤ γ`, τ bounding how far the verify pass's logits
    /// may be from step-by-step decoding's. `None` (the default) trusts the verify pass: its
    /// rows are bit-identical to step-by-step decoding's here, so τ = 0.
    pub margin: Option<f32>,
}

/// The most tokens a draft may hold (a verify pass is `1 + max_draft` positions).
pub const MAX_DRAFT: usize = 32;
/// The longest n-gram a lookup matches.
pub const MAX_NGRAM: usize = 8;

impl Default for DraftConfig {
    fn default() -> Self {
        DraftConfig {
            ngram: 3,
            max_draft: 8,
            adaptive: true,
            margin: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DraftError {
    #[error("draft {name} must be {rule}, got {got}")]
    Invalid {
        name: &'static str,
        rule: &'static str,
        got: String,
    },
    #[error("unknown drafter '{0}': the one available is 'lookup' (prompt lookup)")]
    UnknownDrafter(String),
    #[error("unknown draft setting '{0}': use n, k, adaptive or margin")]
    UnknownSetting(String),
}

impl DraftConfig {
    pub fn validate(&self) -> Result<(), DraftError> {
        let bad = |name, rule, got: String| Err(DraftError::Invalid { name, rule, got });
        if !(1..=MAX_NGRAM).contains(&self.ngram) {
            return bad("ngram", "an integer in [1, 8]", self.ngram.to_string());
        }
        if !(1..=MAX_DRAFT).contains(&self.max_draft) {
            return bad(
                "maxDraft",
                "an integer in [1, 32]",
                self.max_draft.to_string(),
            );
        }
        if let Some(t) = self.margin {
            if !(t.is_finite() && t >= 0.0) {
                return bad("margin", "a finite number >= 0", t.to_string());
            }
        }
        Ok(())
    }

    /// The CLI's spelling: `lookup`, or `lookup:n=3,k=8,adaptive=1,margin=0.5` (any subset).
    pub fn parse_spec(spec: &str) -> Result<DraftConfig, DraftError> {
        let (name, settings) = spec.split_once(':').unwrap_or((spec, ""));
        if name != "lookup" {
            return Err(DraftError::UnknownDrafter(name.to_string()));
        }
        let mut cfg = DraftConfig::default();
        for item in settings.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            let invalid = |name, rule| DraftError::Invalid {
                name,
                rule,
                got: value.to_string(),
            };
            match key {
                "n" => cfg.ngram = value.parse().map_err(|_| invalid("ngram", "an integer"))?,
                "k" => {
                    cfg.max_draft = value
                        .parse()
                        .map_err(|_| invalid("maxDraft", "an integer"))?
                }
                "adaptive" => {
                    cfg.adaptive = match value {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        _ => return Err(invalid("adaptive", "1 or 0")),
                    }
                }
                "margin" => {
                    cfg.margin = Some(value.parse().map_err(|_| invalid("margin", "a number"))?)
                }
                other => return Err(DraftError::UnknownSetting(other.to_string())),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Guesses the tokens that follow a context.
pub trait Drafter {
    /// Up to `max` tokens guessed to follow `context` (the whole conversation, ending with the
    /// token about to enter the KV cache), written into `out` (cleared first).
    fn draft(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>);

    /// How the last draft fared: its first `accepted` tokens were kept; `drafted` were proposed
    /// (after any trimming).
    fn observe(&mut self, _drafted: usize, _accepted: usize) {}

    /// What verify passes cost now (the host measures how much of a pass is I/O).
    fn set_cost(&mut self, _cost: PassCost) {}
}

/// What a verify pass of `b` positions costs, in single-token decode steps: as measured
/// (`measured[b]`, 0 when not yet), else `1 + per_row · (b − 1 + groups − 1)`. Each position past
/// the first adds its dot products (the weights are shared), and each further group of `group`
/// positions ([`crate::quant::TOKEN_GROUP`]) costs about one position more, since the kernels
/// unpack every weight block once per group. The host measures passes as it decodes; the model
/// is what native SmolLM2-135M Q4_1 measures with every layer resident (a pass of 4 costs ≈1.9
/// steps, of 5 ≈2.5), and stays optimistic for sizes not yet tried, so they get tried. Layers
/// streaming through a small LRU make passes relatively cheaper: their reads do not grow with
/// the batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassCost {
    pub per_row: f32,
    pub group: usize,
    pub measured: [f32; MAX_DRAFT + 2],
}

impl Default for PassCost {
    fn default() -> Self {
        PassCost {
            per_row: 0.3,
            group: crate::quant::TOKEN_GROUP,
            measured: [0.0; MAX_DRAFT + 2],
        }
    }
}

impl PassCost {
    /// Rows' worth of extra work in a pass of `b ≥ 1` positions.
    pub fn units(&self, b: usize) -> usize {
        let b = b.max(1);
        (b - 1) + (b.div_ceil(self.group.max(1)) - 1)
    }

    /// The cost of a pass of `b ≥ 1` positions.
    pub fn of(&self, b: usize) -> f32 {
        match self.measured.get(b) {
            Some(&c) if c > 0.0 => c,
            _ => 1.0 + self.per_row * self.units(b) as f32,
        }
    }
}

/// Prompt lookup: the continuation of the most recent earlier occurrence of the context's last
/// n tokens (n from `ngram` down to 1, longest first).
pub struct PromptLookup {
    cfg: DraftConfig,
    cost: PassCost,
    /// Per match length (index n − 1): a running estimate of the chance that a draft token is
    /// accepted given the ones before it were.
    rate: [f32; MAX_NGRAM],
    /// The match length of the last draft (0: none proposed).
    last_match: usize,
    /// Steps since a draft was last proposed for each match length (to probe again).
    idle: [u32; MAX_NGRAM],
}

/// Weight of the newest observation in the running acceptance rate.
const RATE_STEP: f32 = 0.25;
/// After this many steps without drafting after a one-token match, one short draft probes it
/// again; half as many for each token more in the match (a long match is rarer in text that
/// does not copy, and worth trying sooner in text that does).
const PROBE_EVERY: u32 = 32;

fn probe_every(n: usize) -> u32 {
    (PROBE_EVERY >> (n - 1).min(8)).max(4)
}

impl PromptLookup {
    pub fn new(cfg: DraftConfig) -> Self {
        PromptLookup {
            cfg,
            cost: PassCost::default(),
            // Before any evidence: a longer match predicts more (0.35 for one token, 0.55 for
            // three), and one failure at one token is enough to stop drafting there.
            rate: std::array::from_fn(|i| (0.25 + 0.1 * (i + 1) as f32).min(0.8)),
            last_match: 0,
            idle: [0; MAX_NGRAM],
        }
    }

    pub fn config(&self) -> &DraftConfig {
        &self.cfg
    }

    /// How many tokens (at most `max`) to draft after a match of length `n`: the length with the
    /// most tokens expected per unit of cost. With acceptance rate a, a draft of k gives
    /// 1 + a + … + a^k tokens for a pass of k + 1 positions. 0 when no draft beats a plain
    /// step, except for a one-token probe after a while, so the estimate can recover.
    fn length(&mut self, n: usize, max: usize) -> usize {
        if !self.cfg.adaptive {
            return max;
        }
        let a = self.rate[n - 1];
        let (mut best, mut best_k) = (1.0f32, 0);
        let (mut expected, mut reach) = (1.0f32, 1.0f32);
        for k in 1..=max {
            reach *= a;
            expected += reach;
            let gain = expected / self.cost.of(k + 1);
            if gain > best {
                (best, best_k) = (gain, k);
            }
        }
        if best_k == 0 && self.idle[n - 1] >= probe_every(n) {
            best_k = 1;
        }
        best_k.min(max)
    }
}

/// The start of the most recent earlier occurrence of `context`'s last `n` tokens, if one has a
/// continuation.
fn most_recent_match(context: &[u32], n: usize) -> Option<usize> {
    let len = context.len();
    if len <= n {
        return None;
    }
    let suffix = &context[len - n..];
    (0..len - n).rev().find(|&i| &context[i..i + n] == suffix)
}

impl Drafter for PromptLookup {
    fn draft(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) {
        out.clear();
        self.last_match = 0;
        let max = max.min(self.cfg.max_draft);
        if max == 0 {
            return;
        }
        for n in (1..=self.cfg.ngram).rev() {
            let Some(start) = most_recent_match(context, n) else {
                continue;
            };
            let k = self.length(n, max);
            if k == 0 {
                self.idle[n - 1] = self.idle[n - 1].saturating_add(1);
                return;
            }
            let from = start + n;
            out.extend_from_slice(&context[from..(from + k).min(context.len())]);
            self.idle[n - 1] = 0;
            self.last_match = n;
            return;
        }
    }

    fn set_cost(&mut self, cost: PassCost) {
        self.cost = cost;
    }

    fn observe(&mut self, drafted: usize, accepted: usize) {
        let n = self.last_match;
        if n == 0 || drafted == 0 {
            return;
        }
        // Each accepted token is a success; the first rejected one, if any, a failure; tokens
        // after it were never tried.
        let rate = &mut self.rate[n - 1];
        for _ in 0..accepted.min(drafted) {
            *rate += RATE_STEP * (1.0 - *rate);
        }
        if accepted < drafted {
            *rate -= RATE_STEP * *rate;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(k: usize) -> PromptLookup {
        PromptLookup::new(DraftConfig {
            adaptive: false,
            max_draft: k,
            ..DraftConfig::default()
        })
    }

    #[test]
    fn lookup_proposes_what_followed_the_most_recent_match() {
        let mut d = fixed(4);
        let mut out = Vec::new();
        // "1 2 3" occurs twice; the later occurrence continues with 7 8.
        d.draft(&[1, 2, 3, 4, 5, 1, 2, 3, 7, 8, 9, 1, 2, 3], 4, &mut out);
        assert_eq!(out, [7, 8, 9, 1]);
        // The caller's bound wins over max_draft.
        d.draft(&[1, 2, 3, 4, 5, 1, 2, 3], 2, &mut out);
        assert_eq!(out, [4, 5]);
        // No match at any length: nothing.
        d.draft(&[1, 2, 3, 4], 4, &mut out);
        assert!(out.is_empty());
        // A continuation running into the end of the context is cut there.
        d.draft(&[5, 6, 5], 4, &mut out);
        assert_eq!(out, [6, 5]);
        d.draft(&[], 4, &mut out);
        assert!(out.is_empty());
        d.draft(&[9], 4, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn longer_matches_win_over_shorter_recent_ones() {
        let mut d = fixed(2);
        let mut out = Vec::new();
        // The last 3 tokens (1 2 3) match at the start; "3" alone matches later (3 9).
        d.draft(&[1, 2, 3, 4, 4, 3, 9, 0, 1, 2, 3], 2, &mut out);
        assert_eq!(out, [4, 4]);
    }

    #[test]
    fn adaptive_length_follows_acceptance_and_probes_again() {
        let mut d = PromptLookup::new(DraftConfig::default());
        let ctx = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3];
        let mut out = Vec::new();
        d.draft(&ctx, 8, &mut out);
        let first = out.len();
        assert!((1..=8).contains(&first), "{first}");
        // Everything accepted, repeatedly: drafts grow to the longest that fills whole groups
        // of positions (a pass of 8 for at most 8 draft tokens).
        for _ in 0..8 {
            d.draft(&ctx, 8, &mut out);
            let n = out.len();
            d.observe(n, n);
        }
        d.draft(&ctx, 8, &mut out);
        assert_eq!(out.len(), 7);
        // Nothing accepted, repeatedly: drafting stops...
        for _ in 0..16 {
            d.draft(&ctx, 8, &mut out);
            let n = out.len();
            d.observe(n, 0);
        }
        d.draft(&ctx, 8, &mut out);
        assert!(out.is_empty());
        // ...until a probe of one token after a few idle steps (8 for a 3-token match).
        assert_eq!(
            (
                probe_every(1),
                probe_every(2),
                probe_every(3),
                probe_every(8)
            ),
            (32, 16, 8, 4)
        );
        let mut probes = 0;
        for _ in 0..probe_every(3) + 1 {
            d.draft(&ctx, 8, &mut out);
            probes += out.len();
            let n = out.len();
            d.observe(n, 0);
        }
        assert_eq!(probes, 1);
    }

    #[test]
    fn adaptive_lengths_fit_the_cost_of_a_pass() {
        let cost = PassCost::default();
        assert_eq!(cost.of(1), 1.0);
        assert_eq!((cost.units(4), cost.units(5), cost.units(8)), (3, 5, 8));
        assert!((cost.of(4) - 1.9).abs() < 1e-6);
        let mut d = PromptLookup::new(DraftConfig {
            max_draft: 16,
            ..DraftConfig::default()
        });
        let mut at = |a: f32| {
            d.rate[2] = a;
            d.length(3, 16)
        };
        // Unlikely drafts are not worth a pass; likely ones fill a group of positions; certain
        // ones fill several.
        assert_eq!(at(0.2), 0);
        assert_eq!(at(0.5), 1);
        assert_eq!(at(0.9), 3);
        assert_eq!(at(0.999), 15);
        // When positions are cheap (layers stream, their reads shared), longer drafts pay.
        d.set_cost(PassCost {
            per_row: 0.05,
            ..PassCost::default()
        });
        let mut at = |a: f32| {
            d.rate[2] = a;
            d.length(3, 16)
        };
        assert_eq!(at(0.2), 1);
        assert!(at(0.9) >= 7);
        // Measured costs win over the model: a pass of 8 found cheap is worth filling.
        let mut measured = [0.0; MAX_DRAFT + 2];
        measured[4] = 3.0;
        measured[8] = 2.5;
        d.set_cost(PassCost {
            measured,
            ..PassCost::default()
        });
        d.rate[2] = 0.9;
        assert_eq!(d.length(3, 7), 7);
    }

    #[test]
    fn specs_parse_and_bad_ones_are_named() {
        assert_eq!(
            DraftConfig::parse_spec("lookup").unwrap(),
            DraftConfig::default()
        );
        let c = DraftConfig::parse_spec("lookup:n=2,k=5,adaptive=0,margin=0.25").unwrap();
        assert_eq!(
            c,
            DraftConfig {
                ngram: 2,
                max_draft: 5,
                adaptive: false,
                margin: Some(0.25)
            }
        );
        for (spec, needle) in [
            ("model", "unknown drafter"),
            ("lookup:x=1", "unknown draft setting"),
            ("lookup:k=0", "maxDraft"),
            ("lookup:k=33", "maxDraft"),
            ("lookup:n=9", "ngram"),
            ("lookup:n=a", "ngram"),
            ("lookup:adaptive=yes", "adaptive"),
            ("lookup:margin=-1", "margin"),
            ("lookup:margin=inf", "margin"),
        ] {
            let e = DraftConfig::parse_spec(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }
}
