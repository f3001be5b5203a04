//! Picking from part of the logits: a model split across stations, whose head shards each send
//! their largest logits and a bound on the ones they kept back. [`Pipeline::sample_partial`]
//! (in `chain.rs`) picks the token the whole logits give, with the same draw and report — or
//! picks nothing, leaves the pipeline as it was, and says what would settle the step.
//!
//! Why the pick is the whole logits' (the unknown logits are −inf in the vector, each at most
//! the bound):
//! - The stages move a logit by what they know, monotonically (a penalty), or only lower it
//!   (COLTRANE's masks), or raise a set of tokens by a known amount (COLTRANE's prosody): after
//!   them every unknown logit is at most the bound each stage carries along
//!   ([`super::LogitsStage::apply_part`]). What COLTRANE decides from the logits — the token its
//!   mask prevented (the largest logit, which must be known), its fallback's mass test (from the
//!   known masses and the bound's term for each unknown token), prosody's observed change of the
//!   largest — it decides only when the known ones settle it, else it asks as a picker does.
//! - Greedy: a known logit above that bound is above every unknown one.
//! - Sampling: the picker sorts its candidates by logit, so the known ones above the bound (the
//!   head) come first, in the same order, with the same values. Its sums (the softmax's, top-p's
//!   running one, the draw's total) are added in that order, and after the head every other term
//!   is at most the bound's; a term below half the gap from the sum to the next float leaves the
//!   sum as it is (round to nearest), and so does every term after it, since they only shrink
//!   while the sum does not. So when the bound's term is below that half gap, the sums are the
//!   head's; top-p and min-p cut inside the head or keep the rest whole; and the draw, from the
//!   same number over the same entries, stops at the same token when it stops inside the head.
//!   Anything else is not settled: the caller asks for every logit above a threshold
//!   ([`Settled::Above`], from which the sums would settle) or for all of them.
//! - MOA and the health monitor read every logit: their steps take the whole logits
//!   ([`Settled::Whole`]).
//!
//! One number of the report is not the whole logits': a sampled step whose kept list runs past
//! the head counts, in `candidates`, only the tokens it knows.

use super::report::StepInfo;
use crate::sampler::det_exp;

/// Whether a distribution made from part of the logits is the whole logits' (a picker's
/// [`super::Picker::settles`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Settled {
    /// It is, and a draw that stops within its first `n` entries stops where the whole logits'
    /// draw would.
    Head(usize),
    /// Not yet: every logit at least this large (after the stages) would settle it.
    Above(f32),
    /// Only every logit settles it.
    Whole,
}

/// What a pick from part of the logits came to.
#[derive(Debug, Clone, PartialEq)]
pub enum PartialPick {
    /// The token and the step's report, as the whole logits give them.
    Decided(Box<StepInfo>),
    /// Not settled: every logit at least this large, as the model gave it, would settle it
    /// (unless the next logits settle it only with more).
    Above(f32),
    /// Not settled: only every logit does.
    Whole,
}

/// Whether adding any value in `[0, small]` to `sum` (positive and finite) leaves it as it is.
pub(crate) fn absorbs(sum: f32, small: f32) -> bool {
    let gap = f32::from_bits(sum.to_bits() + 1) - sum;
    small < gap / 2.0
}

/// Half the gap from `sum` to the next float: a term must stay below it to change nothing.
fn half_gap(sum: f32) -> f32 {
    (f32::from_bits(sum.to_bits() + 1) - sum) / 2.0
}

/// The picker's sampling settings, as [`super::Sample`] holds them.
pub(crate) struct SampleSettings {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
}

/// [`Settled`] for sampling: see the module's notes. `logits` are after the stages, `bound`
/// the most an unknown one can be.
pub(crate) fn sample_settles(s: &SampleSettings, logits: &[f32], bound: f32) -> Settled {
    if bound == f32::NEG_INFINITY || logits.contains(&f32::INFINITY) {
        // Nothing unknown, or +inf logits win outright (the unknown ones are finite).
        return Settled::Head(usize::MAX);
    }
    let max = logits
        .iter()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    // NaN never: `bound` is a number, and `max` at least −inf.
    if max <= bound {
        return Settled::Whole;
    }
    let t = s.temperature;
    // The candidates as the picker scales and sorts them; the head is what is above the bound.
    let scaled_bound = (bound - max) / t;
    let mut head: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| (i as u32, (l - max) / t))
        .filter(|&(_, x)| x > scaled_bound)
        .collect();
    head.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if s.top_k > 0 && s.top_k <= head.len() {
        return Settled::Head(s.top_k);
    }
    let first = head[0].1;
    let terms: Vec<f32> = head.iter().map(|e| det_exp(e.1 - first)).collect();
    let tail_term = det_exp(scaled_bound - first);
    let sum = terms.iter().fold(0.0f32, |a, &e| a + e);
    // The threshold to ask for when the bound's term is not small enough: where the terms fall
    // under what the failed condition needs, and under what the later ones (the running sums
    // of probabilities, at least a quarter) will, so that one more round settles the step.
    let above = |term: f32| {
        let term = term.min(sum * 2f32.powi(-27));
        let needed = max as f64 + t as f64 * ((term as f64).ln() - 0.05);
        Settled::Above(needed as f32)
    };
    if !absorbs(sum, tail_term) {
        return above(half_gap(sum));
    }
    let probs: Vec<f32> = terms.iter().map(|e| e / sum).collect();
    let tail_prob = tail_term / sum;
    let mut kept = probs.len();
    let mut tail = true;
    if s.top_p < 1.0 {
        let mut cum = 0.0f32;
        for (i, p) in probs.iter().enumerate() {
            cum += p;
            if cum >= s.top_p {
                kept = i + 1;
                tail = false;
                break;
            }
        }
        if tail && !absorbs(cum, tail_prob) {
            return above(half_gap(cum) * sum);
        }
    }
    if s.min_p > 0.0 {
        let floor = probs[0] * s.min_p;
        let n = probs[..kept]
            .iter()
            .take_while(|&&p| p >= floor)
            .count()
            .max(1);
        if n < kept {
            (kept, tail) = (n, false);
        } else if tail && tail_prob >= floor {
            return above(floor * sum);
        } else {
            tail = false;
        }
    }
    if tail {
        // The draw's total: the kept head's, if the rest is absorbed.
        let total = probs[..kept].iter().fold(0.0f32, |a, &p| a + p);
        if !absorbs(total, tail_prob) {
            return above(half_gap(total) * sum);
        }
    }
    Settled::Head(kept)
}

/// [`Settled`] for greedy: the largest logit, when it is above every unknown one.
pub(crate) fn greedy_settles(logits: &[f32], bound: f32) -> Settled {
    match crate::sampler::greedy(logits).map(|id| logits[id as usize]) {
        Some(top) if top > bound => Settled::Head(1),
        // Every logit at least the known largest: the rest stay below it.
        Some(top) if top.is_finite() => Settled::Above(top),
        _ => Settled::Whole,
    }
}
