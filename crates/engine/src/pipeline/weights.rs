//! Sampling weights as integers, so that a softmax's sums are the same whatever order they are
//! added in — and however the vocabulary is split into shards, each adding its own part.
//!
//! A logit `l` at temperature `t` weighs `2^z`, `z = l·log2(e)/t`: its *level* `⌊z⌋` and its
//! 24-bit *mantissa* `round(2^(z−⌊z⌋)·2^23)` depend on that logit alone. Against the largest
//! level `top` a token weighs `mantissa·2^(SPAN − (top − level))`, an integer, and nothing
//! below `SPAN` levels (2^-24 of the largest: where an f32 softmax's sum stops noticing a term).
//! A shard sums the mantissas of its tokens level by level ([`LevelSums`]); any sum of weights
//! is then a sum over levels, the same integer whoever added it.

use crate::sampler::Pcg32;

/// Levels a weight reaches below the largest (a token further down weighs nothing).
pub const SPAN: i64 = 24;
/// Levels a shard's sums reach below its own largest: a stage that lowers the largest logit by
/// up to `LEVELS − SPAN` levels still leaves every token that weighs anything counted (past
/// that, [`Rest::of`] says so and the pick asks for the logits above a threshold). Each level
/// deeper holds more of the vocabulary, and each token in reach costs its shard an `exp`: at
/// 48, Gemma-3's head shards weighed most of their 65k tokens a step and sampled decode ran
/// 0.93× of every-logit's in workerd; at 32, 1.01×, with the same `/again` rounds.
pub const LEVELS: usize = 32;
/// Temperatures below this sample as this one does: the levels of any finite logit stay
/// exact integers (it is greedy for logits more than ~1e-4·SPAN apart already).
pub const MIN_TEMPERATURE: f32 = 1e-4;

/// A finite logit's level and mantissa at temperature `t` (> 0), from IEEE operations only, so
/// every platform computes the same two numbers.
pub fn weigh(logit: f32, t: f32) -> (i64, u32) {
    split(exponent(logit, t))
}

/// `z` of a logit at temperature `t`: its weight is `2^z`.
pub fn exponent(logit: f32, t: f32) -> f64 {
    logit as f64 / t.max(MIN_TEMPERATURE) as f64 * std::f64::consts::LOG2_E
}

/// The level of an [`exponent`].
pub fn level(z: f64) -> i64 {
    z.floor() as i64
}

/// An [`exponent`]'s level and mantissa.
pub fn split(z: f64) -> (i64, u32) {
    let level = z.floor();
    let frac = z - level;
    let mantissa = moa::math::exp(frac * std::f64::consts::LN_2) * (1u32 << 23) as f64;
    // `as` saturates: the levels of finite logits over the least temperature fit in an i64.
    (level as i64, mantissa.round() as u32)
}

/// The weight of a token at `level` with `mantissa`, against the largest level `top`.
pub fn weight(top: i64, level: i64, mantissa: u32) -> u128 {
    shifted(top, level, mantissa as u128)
}

/// A mantissa (or a sum of mantissas) at `level`, against the largest level `top`.
fn shifted(top: i64, level: i64, m: u128) -> u128 {
    match top.saturating_sub(level) {
        d @ 0..=SPAN => m << (SPAN - d),
        _ => 0,
    }
}

/// What a shard adds to a step's sums: its largest level and, for each of the [`LEVELS`] levels
/// from it down, the sum of its tokens' mantissas there and how many they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelSums {
    pub top: i64,
    /// `levels[d]`: level `top − d`. Trailing empty levels may be left off.
    pub levels: Vec<(u64, u32)>,
}

impl LevelSums {
    /// The sums of `logits`' finite values at temperature `t`; `None` when none is finite.
    pub fn of(logits: &[f32], t: f32) -> Option<LevelSums> {
        Self::of_except(logits, 0, t, &[])
    }

    /// [`LevelSums::of`] of a slice whose first token is `first`, leaving out the tokens in
    /// `excluded` (ranges `[start, end)` of ids, in order: what the pick's stages remove).
    pub fn of_except(
        logits: &[f32],
        first: usize,
        t: f32,
        excluded: &[(u32, u32)],
    ) -> Option<LevelSums> {
        // The finite logits outside `excluded` (walked twice: for the top, then the sums).
        let kept = || {
            let mut ranges = excluded.iter().peekable();
            (logits.iter().enumerate()).filter_map(move |(i, &l)| {
                let id = (first + i) as u64;
                while ranges.next_if(|r| (r.1 as u64) <= id).is_some() {}
                let out = ranges.peek().is_some_and(|r| r.0 as u64 <= id);
                (l.is_finite() && !out).then_some(l)
            })
        };
        let top = kept().fold(f32::NEG_INFINITY, f32::max);
        if top == f32::NEG_INFINITY {
            return None;
        }
        let top = weigh(top, t).0;
        let mut levels = vec![(0u64, 0u32); LEVELS];
        for l in kept() {
            // The level alone says whether the token is counted; the mantissa's `exp` only then.
            let z = exponent(l, t);
            if let Some(e) = levels.get_mut(top.saturating_sub(level(z)) as usize) {
                e.0 += split(z).1 as u64;
                e.1 += 1;
            }
        }
        while levels.last() == Some(&(0, 0)) {
            levels.pop();
        }
        Some(LevelSums { top, levels })
    }
}

/// The tokens a pick does not know, level by level: every shard's sums less the known tokens'.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rest {
    /// `(level, mantissas' sum, count)`, highest level first, no empty level.
    levels: Vec<(i64, u128, u64)>,
}

/// Sums that do not add up: a shard's sums leave out a token it sent, or count fewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inconsistent;

impl Rest {
    /// Every shard's sums less the tokens known (`known`: their logits as the shards gave them),
    /// down to level `floor`; below it nothing is kept. `Ok(None)` when a shard's sums do not
    /// reach `floor` (a level of its below `floor` may weigh something: only every logit says).
    pub fn of(
        sums: &[LevelSums],
        known: impl Iterator<Item = f32>,
        t: f32,
        floor: i64,
    ) -> Result<Option<Rest>, Inconsistent> {
        let mut levels = std::collections::BTreeMap::<i64, (u128, u64)>::new();
        for s in sums {
            if s.top.saturating_sub(LEVELS as i64 - 1) > floor {
                return Ok(None);
            }
            for (d, &(m, n)) in s.levels.iter().enumerate() {
                let level = s.top.saturating_sub(d as i64);
                if n > 0 && level >= floor {
                    let e = levels.entry(level).or_default();
                    (e.0, e.1) = (e.0 + m as u128, e.1 + n as u64);
                }
            }
        }
        for l in known.filter(|l| l.is_finite()) {
            let (level, mantissa) = weigh(l, t);
            if level >= floor {
                let e = levels.get_mut(&level).ok_or(Inconsistent)?;
                e.0 = e.0.checked_sub(mantissa as u128).ok_or(Inconsistent)?;
                e.1 = e.1.checked_sub(1).ok_or(Inconsistent)?;
            }
        }
        let levels = (levels.into_iter().rev())
            .filter(|&(_, (_, n))| n > 0)
            .map(|(level, (m, n))| (level, m, n))
            .collect();
        Ok(Some(Rest { levels }))
    }

    /// The highest level an unknown token is at.
    pub fn top(&self) -> Option<i64> {
        self.levels.first().map(|e| e.0)
    }

    /// `(level, weight, count)` of each level against `top`, highest first.
    pub fn weights(&self, top: i64) -> impl Iterator<Item = (i64, u128, u64)> + '_ {
        (self.levels.iter()).map(move |&(level, m, n)| (level, shifted(top, level, m), n))
    }
}

/// A logit below every token at `level` and the level under it, at temperature `t`: asking
/// for every logit above it leaves every token at `level` known, and above what is not.
pub fn logit_below(level: i64, t: f32) -> f32 {
    let z = (level as f64 - 1.5) * t.max(MIN_TEMPERATURE) as f64 / std::f64::consts::LOG2_E;
    z as f32
}

/// Where a draw stops: `u·total / 2^32` for the generator's next `u`, below `total` (> 0).
pub fn draw_point(rng: &mut Pcg32, total: u128) -> u128 {
    // `total` < 2^96 (at most 2^32 tokens of at most 2^64 each): the product fits.
    (rng.next_u32() as u128 * total) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_follow_the_softmax() {
        let t = 0.7f32;
        let (top, m0) = weigh(3.0, t);
        let w0 = weight(top, top, m0) as f64;
        for l in [3.0f32, 2.5, 1.0, -4.0, -8.0] {
            let (level, m) = weigh(l, t);
            assert!((1 << 23..=1 << 24).contains(&m), "{l}: {m}");
            let want = ((l - 3.0) as f64 / t as f64).exp();
            let got = weight(top, level, m) as f64 / w0;
            assert!(
                (got - want).abs() <= want * 1e-6 + 2f64.powi(-24),
                "{l}: {got} {want}"
            );
        }
        // Nothing more than SPAN levels down.
        assert_eq!(weight(10, 10 - SPAN - 1, 1 << 23), 0);
        // The least temperature still orders by logit, and never overflows.
        let (a, _) = weigh(f32::MAX, 0.0);
        let (b, _) = weigh(-f32::MAX, 0.0);
        assert!(a > 0 && b < 0);
    }

    #[test]
    fn weights_never_fall_as_logits_rise() {
        // A bound on the logits is a bound on the weights: what a partial pick relies on.
        let mut rng = Pcg32::new(3);
        for t in [0.05f32, 0.7, 1.0, 1.9] {
            let mut l: Vec<f32> = (0..4000).map(|_| rng.next_f32() * 40.0 - 20.0).collect();
            l.sort_by(f32::total_cmp);
            let top = weigh(l[l.len() - 1], t).0;
            let w: Vec<u128> = (l.iter().map(|&x| weigh(x, t)))
                .map(|(level, m)| weight(top, level, m))
                .collect();
            assert!(w.windows(2).all(|p| p[0] <= p[1]), "t = {t}");
        }
    }

    #[test]
    fn sums_split_any_way_add_up_to_the_same() {
        let mut rng = Pcg32::new(9);
        let logits: Vec<f32> = (0..500).map(|_| rng.next_f32() * 20.0 - 10.0).collect();
        let t = 0.9;
        let whole = LevelSums::of(&logits, t).unwrap();
        let parts: Vec<LevelSums> = logits
            .chunks(77)
            .filter_map(|c| LevelSums::of(c, t))
            .collect();
        let floor = whole.top - SPAN;
        let a = Rest::of(std::slice::from_ref(&whole), std::iter::empty(), t, floor);
        let b = Rest::of(&parts, std::iter::empty(), t, floor);
        assert_eq!(a, b);
        let total: u128 = a.unwrap().unwrap().weights(whole.top).map(|e| e.1).sum();
        let direct: u128 = (logits.iter().map(|&l| weigh(l, t)))
            .map(|(level, m)| weight(whole.top, level, m))
            .sum();
        assert_eq!(total, direct);
        // Leaving tokens out is summing without them.
        let except = LevelSums::of_except(&logits, 1000, t, &[(990, 1003), (1010, 1011)]);
        let mut without = logits.clone();
        without.remove(10);
        without.drain(..3);
        assert_eq!(except, LevelSums::of(&without, t));
        // Known tokens come off; a token no shard counted is an inconsistency.
        let known = logits[..10].iter().copied();
        let rest = Rest::of(&parts, known, t, floor).unwrap().unwrap();
        let less: u128 = rest.weights(whole.top).map(|e| e.1).sum();
        let ten: u128 = (logits[..10].iter().map(|&l| weigh(l, t)))
            .map(|(level, m)| weight(whole.top, level, m))
            .sum();
        assert_eq!(less + ten, direct);
        let stranger = [logits[0], logits[0]];
        let one = Rest::of(&parts[..0], stranger.into_iter(), t, floor);
        assert_eq!(one, Err(Inconsistent));
    }
}
