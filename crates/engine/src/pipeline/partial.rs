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
//! - Sampling: weights are integers ([`super::weights`]), sorted heaviest first; the known ones
//!   heavier than the bound's weight (the head) come first, in the same order, with the same
//!   values. Every sum the picker takes (the total, top-p's running one, the draw's) is an
//!   integer sum, so it is the same added in any order: the head's part is known, and the rest
//!   is the head shards' [`super::LevelSums`] less the known tokens' — exact when the stages
//!   change only tokens the pick knows ([`super::LogitsStage::touches`]; the coordinator asks
//!   the shards for those). Top-k, top-p and min-p then cut where the whole logits' pick cuts
//!   when the cut falls in the head, and the draw, from the same number over the same total,
//!   stops where it does when it stops in the head. Otherwise the sums say at which level the
//!   cut or the draw falls: every logit above that level ([`Settled::Above`]) settles the step
//!   in one more round. Without the sums, only a cut within the head settles at once; the rest
//!   needs every token that weighs anything (within [`super::weights::SPAN`] levels).
//! - MOA and the health monitor read every logit: their steps take the whole logits
//!   ([`Settled::Whole`]).

use super::report::StepInfo;

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

/// The picker's sampling settings, as [`super::Sample`] holds them.
pub(crate) struct SampleSettings {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
}

/// What follows a sampled pick's head (its known tokens, each weighing more than any after).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tail<'a> {
    /// Nothing weighs anything after the head.
    Nothing,
    /// The tokens after the head, by level: `(level, weight, count)`, highest first.
    Levels(&'a [(i64, u128, u64)]),
    /// Unknown tokens down to this level may weigh something; how much is not known.
    Unknown(i64),
}

/// Which of a sampled pick's candidates its truncations keep: the first `kept` of the head and,
/// after them, `beyond` weight in `beyond_count` tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cut {
    pub kept: usize,
    pub beyond: u128,
    pub beyond_count: u64,
}

/// Sampling's truncations over `head` (weights of the largest level `top`, in the draw's order,
/// never empty) and `tail`: top-k, then top-p against the total, then min-p against the
/// largest weight. `Err(level)`: every token at `level` and above would settle them. The whole
/// logits' pick is this with [`Tail::Nothing`]; from part of them every decision made here is
/// that one, since the head and every sum are the same integers ([`super::weights`]).
pub(crate) fn cut(
    s: &SampleSettings,
    head: &[(u32, u128)],
    tail: Tail,
    top: i64,
) -> Result<Cut, i64> {
    let mut head = head;
    let mut levels: &[(i64, u128, u64)] = &[];
    match tail {
        Tail::Nothing => {}
        Tail::Levels(l) => levels = l,
        Tail::Unknown(floor) => {
            // Only a cut within the head settles: top-k or min-p there, with no top-p (which
            // needs the total).
            if s.top_k > 0 && s.top_k <= head.len() {
                return cut(s, &head[..s.top_k], Tail::Nothing, top);
            }
            let floor_w = s.min_p as f64 * head[0].1 as f64;
            let n = head.iter().take_while(|e| e.1 as f64 >= floor_w).count();
            if s.top_p >= 1.0 && s.min_p > 0.0 && n < head.len() {
                let kept = n.max(1);
                return Ok(Cut {
                    kept,
                    beyond: 0,
                    beyond_count: 0,
                });
            }
            return Err(floor);
        }
    }
    if s.top_k > 0 {
        let after: u64 = levels.iter().map(|e| e.2).sum();
        if s.top_k <= head.len() {
            (head, levels) = (&head[..s.top_k], &[]);
        } else if head.len() as u64 + after > s.top_k as u64 {
            // The k-th token is after the head: where it is.
            let mut n = head.len() as u64;
            for &(level, _, count) in levels {
                n += count;
                if n >= s.top_k as u64 {
                    return Err(level);
                }
            }
        }
    }
    let head_sum: u128 = head.iter().map(|e| e.1).sum();
    let mut kept = head.len();
    let mut beyond: u128 = levels.iter().map(|e| e.1).sum();
    let mut beyond_count: u64 = levels.iter().map(|e| e.2).sum();
    if s.top_p < 1.0 {
        let target = s.top_p as f64 * (head_sum + beyond) as f64;
        let mut cum = 0u128;
        let at = head.iter().position(|e| {
            cum += e.1;
            cum as f64 >= target
        });
        match at {
            Some(i) => (kept, beyond, beyond_count) = (i + 1, 0, 0),
            None => {
                for &(level, w, _) in levels {
                    cum += w;
                    if cum as f64 >= target {
                        return Err(level);
                    }
                }
                // Rounding kept the cut from being reached: everything stays.
            }
        }
    }
    if s.min_p > 0.0 {
        let floor = s.min_p as f64 * head[0].1 as f64;
        let n = head[..kept]
            .iter()
            .take_while(|e| e.1 as f64 >= floor)
            .count();
        if n < kept {
            (kept, beyond, beyond_count) = (n.max(1), 0, 0);
        } else if beyond > 0 {
            // The head passes; the lowest level whose heaviest token could pass decides.
            let heaviest = |level: i64| super::weights::weight(top, level, 1 << 24) as f64;
            match levels.iter().rev().find(|e| heaviest(e.0) >= floor) {
                Some(&(level, _, _)) => return Err(level),
                None => (beyond, beyond_count) = (0, 0),
            }
        }
    }
    Ok(Cut {
        kept,
        beyond,
        beyond_count,
    })
}

/// Where a draw that walked past `walked` (the kept head's weight) stops among `levels`: every
/// token at that level and above settles it.
pub(crate) fn past_head(walked: u128, levels: &[(i64, u128, u64)], point: u128) -> Option<i64> {
    let mut cum = walked;
    levels.iter().find_map(|&(level, w, _)| {
        cum += w;
        (point < cum).then_some(level)
    })
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
