//! Prompt lookup: drafts copied from the conversation itself.

use super::{DraftConfig, Drafter, PassCost, MAX_NGRAM};

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
    use crate::draft::MAX_DRAFT;

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
}
