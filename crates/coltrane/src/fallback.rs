//! Tier 3 and what `apply` does after the mask: a step's tiers as a plan (hard rules, then the
//! soft ones in the order they relax), composed into one mask; the oracle fallback, which drops
//! soft tiers, last first, while the mask holds too little of the model's probability; and
//! terminal prosody, which leans toward a sentence end as the budget runs out.

use crate::bitset::TokenSet;
use crate::config::ProsodyMode;
use crate::fold::Quote;
use crate::vocab::{Pitch, Vocab};
use std::collections::HashMap;

/// Tokens before the end at which prosody starts leaning, and how hard (nats) at the end.
const PROSODY_WINDOW: usize = 16;
const PROSODY_BIAS: f32 = 6.0;

/// A cached fold mask's key: the open brackets a token could pop (the top 16 levels, two bits
/// each), the depth, the quote state.
pub type FoldKey = (u128, u8, Quote);

/// Where a tier's mask lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The JSON matcher's mask (from the matcher's cache).
    Json,
    /// The fold mask under a binding budget (`Tiers::fold_budget`).
    FoldBudget,
    /// A cached fold mask.
    Fold(FoldKey),
    /// A cached class-transition mask.
    Class(Option<Pitch>),
    /// The eddy bans (`Tiers::eddies`).
    Eddy,
}

/// A step's tiers.
#[derive(Default)]
pub struct Plan {
    pub hard: Vec<Source>,
    /// In the order they apply; relaxed from the last.
    pub soft: Vec<Source>,
    /// End-of-text is banned (a fold is open): hard.
    pub ban_eos: bool,
}

/// The masks a plan's sources point into, borrowed from the sequence for one step.
pub struct Tiers<'a> {
    pub json: Option<&'a TokenSet>,
    pub fold_budget: &'a TokenSet,
    pub folds: &'a HashMap<FoldKey, (TokenSet, u32)>,
    pub classes: &'a HashMap<Option<Pitch>, TokenSet>,
    /// The loops found at this step: (period, the token that would continue it).
    pub eddies: &'a [(usize, u32)],
    /// Every token (what a step with no tier allows).
    pub full: &'a TokenSet,
    pub eos_ids: &'a [u32],
}

impl Plan {
    /// Whether the plan is the JSON mask alone: then it is used as the matcher caches it, with
    /// no copy.
    pub fn json_only(&self) -> bool {
        self.hard == [Source::Json] && self.soft.is_empty() && !self.ban_eos
    }

    /// Whether the eddy bans are the last soft tier (the first to relax).
    pub fn eddy_last(&self) -> bool {
        self.soft.last() == Some(&Source::Eddy)
    }

    /// The hard tiers and the first `soft` soft ones, into `out`.
    pub fn compose(&self, soft: usize, tiers: &Tiers, out: &mut TokenSet) {
        let mut first = true;
        for src in self.hard.iter().chain(&self.soft[..soft]) {
            let set = match src {
                Source::Json => match tiers.json {
                    Some(m) => m,
                    None => continue,
                },
                Source::FoldBudget => tiers.fold_budget,
                Source::Fold(key) => match tiers.folds.get(key) {
                    Some((m, _)) => m,
                    None => continue,
                },
                Source::Class(p) => match tiers.classes.get(p) {
                    Some(m) => m,
                    None => continue,
                },
                Source::Eddy => {
                    if first {
                        out.copy_from(tiers.full);
                        first = false;
                    }
                    for &(_, id) in tiers.eddies {
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
            out.copy_from(tiers.full);
        }
        if self.ban_eos {
            for &id in tiers.eos_ids {
                out.remove(id);
            }
        }
    }
}

/// What the fallback left of a step's soft tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relaxed {
    /// Soft tiers still applied: the plan's first `kept`.
    pub kept: usize,
    /// Soft tiers relaxed because the mask held too little probability.
    pub relaxed: u8,
}

/// Tier 3, given `mask` composed from every tier of `plan`: drops the eddy bans if they empty
/// it (a loop is better than nothing), then relaxes the soft tiers, last first, while `keeps`
/// says the mask holds too little of the model's probability. Leaves the final mask in `mask`;
/// `keeps`' error (it cannot tell, from part of the logits) ends it.
pub fn relax<E>(
    plan: &Plan,
    tiers: &Tiers,
    mask: &mut TokenSet,
    mut keeps: impl FnMut(&TokenSet) -> Result<bool, E>,
) -> Result<Relaxed, E> {
    let mut kept = plan.soft.len();
    if plan.eddy_last() && mask.is_empty() {
        kept -= 1;
        plan.compose(kept, tiers, mask);
    }
    let mut relaxed = 0;
    while kept > 0 && !keeps(mask)? {
        kept -= 1;
        relaxed += 1;
        plan.compose(kept, tiers, mask);
    }
    Ok(Relaxed { kept, relaxed })
}

/// What prosody did at one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lean {
    /// The bias (nats) on sentence ends or end-of-text (what it would be, when observing).
    pub bias: f32,
    /// The step counts as a prosody step: it leaned, or, observing, the bias would have
    /// changed the top token.
    pub counts: bool,
}

/// Terminal prosody: within the last `PROSODY_WINDOW` of `remaining` tokens, adds a growing
/// bias to sentence-end tokens, or to end-of-text right after a sentence end, so text does not
/// stop mid-sentence. Observing, the logits are left as they were.
///
/// From part of the logits (the unknown ones −inf, each at most `bound`): `Ok` with what it did
/// and the most an unknown logit is after it (an unknown target rises by the bias), or `Err` when
/// observing needs the largest logit before or after the bias and it is not known.
pub fn prosody(
    logits: &mut [f32],
    remaining: Option<usize>,
    mode: ProsodyMode,
    after_sentence: bool,
    vocab: &Vocab,
    bound: f32,
) -> Result<(Lean, f32), ()> {
    let Some(r) = remaining else {
        return Ok((Lean::default(), bound));
    };
    if mode == ProsodyMode::Off || r > PROSODY_WINDOW {
        return Ok((Lean::default(), bound));
    }
    let bias = PROSODY_BIAS * (1.0 - (r.saturating_sub(1)) as f32 / PROSODY_WINDOW as f32);
    let targets = match after_sentence {
        true => vocab.eos(),
        false => vocab.class(Pitch::SentenceEnd),
    };
    // Whether the largest logit is known: above every unknown one, which is at most `most`.
    let known_top = |logits: &[f32], most: f32| {
        let top = argmax(logits);
        let known = bound == f32::NEG_INFINITY || top.is_some_and(|t| logits[t as usize] > most);
        known.then_some(top)
    };
    let observing = mode == ProsodyMode::Observe;
    let before = match observing {
        true => known_top(logits, bound).ok_or(())?,
        false => None,
    };
    let mut biased: Vec<(usize, f32)> = Vec::new();
    for id in targets.iter() {
        if let Some(l) = logits.get_mut(id as usize) {
            if l.is_finite() {
                biased.push((id as usize, *l));
                *l += bias;
            }
        }
    }
    if !observing {
        return Ok((Lean { bias, counts: true }, bound + bias));
    }
    let after = known_top(logits, bound + bias);
    for &(i, l) in &biased {
        logits[i] = l;
    }
    let changed = after.ok_or(())? != before;
    Ok((
        Lean {
            bias,
            counts: changed,
        },
        bound,
    ))
}

/// The tokens [`prosody`] raises at this step (biasing, within the window), if any.
pub fn prosody_targets(
    remaining: Option<usize>,
    mode: ProsodyMode,
    after_sentence: bool,
    vocab: &Vocab,
) -> Option<&TokenSet> {
    let r = remaining?;
    if mode != ProsodyMode::Bias || r > PROSODY_WINDOW {
        return None;
    }
    Some(match after_sentence {
        true => vocab.eos(),
        false => vocab.class(Pitch::SentenceEnd),
    })
}

/// The largest logit's index (NaN and −inf never win, lowest id on ties).
pub fn argmax(logits: &[f32]) -> Option<u32> {
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
