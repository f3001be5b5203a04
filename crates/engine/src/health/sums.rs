//! The monitor's sums of the model's distribution as integers by level, as sampling's weights
//! are (`pipeline::weights`), so that a vocabulary split across head shards adds up to exactly
//! what one process reads. At temperature 1 a logit `l` has exponent `z = l·log2 e`, level
//! `⌊z⌋`, mantissa `round(2^(z−⌊z⌋)·2^23)` and fraction `round((z−⌊z⌋)·2^16)`; per level below
//! the top a slice sums its tokens' mantissas, mantissas × fractions (the entropy's `Σ p·ln p`),
//! and the mantissas of the tokens a mask removes (the waste). Integer sums are the same
//! whoever adds them and in whatever order; the scalars are then computed once, from them, in a
//! fixed order of levels.

use moa::math::ln;

/// Levels of the distribution the monitor reads below its top: ⌈12 nats / ln 2⌉. A token further
/// down weighs less than 2^-17 of the top one.
pub const HEALTH_LEVELS: usize = 18;
/// Bits of each token's fraction of a level in the entropy's sums.
const FRAC_BITS: u32 = 16;
/// The mantissas' scale: a token at the top level weighs `mantissa / 2^23` of a power of two.
const MANTISSA_BITS: i32 = 23;
/// Logits per chunk of the scan (chunks whose max is out of reach are skipped).
pub(super) const CHUNK: usize = 64;

/// One level's sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LevelSum {
    /// Σ mantissa.
    pub mantissas: u64,
    /// Σ mantissa × fraction (fractions in 2^-16).
    pub weighted: u64,
    /// Σ mantissa of the tokens a mask removes.
    pub masked: u64,
}

/// A slice's (or the whole vocabulary's) sums.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthSums {
    /// The level of the largest finite logit; `None` when none is finite.
    pub top: Option<i64>,
    /// `levels[d]`: level `top − d`, at most [`HEALTH_LEVELS`]; trailing empty levels left off.
    pub levels: Vec<LevelSum>,
    /// NaN and +inf logits (never weighed).
    pub nonfinite: u64,
    /// Logits read.
    pub vocab: u64,
}

/// A finite logit's level, mantissa and fraction at temperature 1, from IEEE operations only
/// (`exp_neg`: multiplications and additions), so every platform computes the same three.
pub fn weigh(l: f32) -> (i64, u32, u32) {
    let z = exponent(l);
    let (mantissa, fraction) = mantissa(z);
    (z.floor() as i64, mantissa, fraction)
}

/// `z` of a logit: `l·log2 e`.
fn exponent(l: f32) -> f64 {
    l as f64 * std::f64::consts::LOG2_E
}

/// The mantissa and fraction of an exponent (its level is `⌊z⌋`).
fn mantissa(z: f64) -> (u32, u32) {
    let frac = z - z.floor();
    // 2^frac = 2·e^((frac − 1)·ln 2), the exponent in [−ln 2, 0).
    let pow = 2.0 * exp_neg((frac - 1.0) * std::f64::consts::LN_2);
    let mantissa = (pow * (1u32 << MANTISSA_BITS) as f64).round() as u32;
    let fraction = (frac * (1u32 << FRAC_BITS) as f64).round() as u32;
    (mantissa, fraction)
}

/// Whether `l` is weighed: finite (NaN and ±inf are not).
fn weighed(l: f32) -> bool {
    l.is_finite()
}

impl HealthSums {
    /// The sums of `logits` (token `first + i` at `logits[i]`), the tokens in `removed`
    /// (`[start, end)` ranges of ids, in order) also summed as masked.
    pub fn of(logits: &[f32], first: usize, removed: &[(u32, u32)]) -> HealthSums {
        Self::scan(logits, first, removed, &mut Vec::new(), |_, _, _| {})
    }

    /// [`HealthSums::of`], telling `read` each token it reads (index in `logits`, levels below
    /// the top, mantissa) in order; `chunk_max` is scratch. Two passes: each chunk's max and
    /// the non-finite count (vectorized), then the chunks that reach the levels read, token by
    /// token — most of a large vocabulary is skipped a chunk at a time.
    pub fn scan(
        logits: &[f32],
        first: usize,
        removed: &[(u32, u32)],
        chunk_max: &mut Vec<f32>,
        mut read: impl FnMut(usize, usize, u32),
    ) -> HealthSums {
        let (top, nonfinite) = chunk_maxima(logits, chunk_max);
        let vocab = logits.len() as u64;
        if top == f32::NEG_INFINITY {
            return HealthSums {
                top: None,
                levels: Vec::new(),
                nonfinite,
                vocab,
            };
        }
        let top = weigh(top).0;
        let floor = top - (HEALTH_LEVELS as i64 - 1);
        let mut levels = vec![LevelSum::default(); HEALTH_LEVELS];
        let mut ranges = removed.iter().peekable();
        for (c, &m) in chunk_max.iter().enumerate() {
            if m == f32::NEG_INFINITY || (exponent(m).floor() as i64) < floor {
                continue;
            }
            let at = c * CHUNK;
            for (i, &l) in logits[at..(at + CHUNK).min(logits.len())]
                .iter()
                .enumerate()
            {
                if !weighed(l) {
                    continue;
                }
                // The level alone says whether the token is read; its `exp` only then.
                let z = exponent(l);
                let d = top.saturating_sub(z.floor() as i64);
                let Some(e) = usize::try_from(d).ok().and_then(|d| levels.get_mut(d)) else {
                    continue;
                };
                let (mantissa, fraction) = mantissa(z);
                let id = (first + at + i) as u64;
                while ranges.next_if(|r| (r.1 as u64) <= id).is_some() {}
                let masked = ranges.peek().is_some_and(|r| r.0 as u64 <= id);
                e.mantissas += mantissa as u64;
                e.weighted += mantissa as u64 * fraction as u64;
                e.masked += if masked { mantissa as u64 } else { 0 };
                read(at + i, d as usize, mantissa);
            }
        }
        while levels.last() == Some(&LevelSum::default()) {
            levels.pop();
        }
        HealthSums {
            top: Some(top),
            levels,
            nonfinite,
            vocab,
        }
    }

    /// The sums of the whole from its slices' (in any order): levels shifted to the largest
    /// top, those past [`HEALTH_LEVELS`] below it left off.
    pub fn merge(parts: &[HealthSums]) -> HealthSums {
        let top = parts.iter().filter_map(|p| p.top).max();
        let mut levels = vec![LevelSum::default(); if top.is_some() { HEALTH_LEVELS } else { 0 }];
        for p in parts {
            let (Some(top), Some(own)) = (top, p.top) else {
                continue;
            };
            for (d, s) in p.levels.iter().enumerate() {
                let at = (top - own).saturating_add(d as i64);
                if let Some(e) = usize::try_from(at).ok().and_then(|at| levels.get_mut(at)) {
                    e.mantissas += s.mantissas;
                    e.weighted += s.weighted;
                    e.masked += s.masked;
                }
            }
        }
        while levels.last() == Some(&LevelSum::default()) {
            levels.pop();
        }
        HealthSums {
            top,
            levels,
            nonfinite: parts.iter().map(|p| p.nonfinite).sum(),
            vocab: parts.iter().map(|p| p.vocab).sum(),
        }
    }

    /// A token's level below the top and mantissa, when it is within the levels read.
    pub fn place(&self, l: f32) -> Option<(usize, u32)> {
        let top = self.top?;
        if !weighed(l) {
            return None;
        }
        let (level, mantissa, _) = weigh(l);
        let d = top.checked_sub(level)?;
        (0..HEALTH_LEVELS as i64)
            .contains(&d)
            .then_some((d as usize, mantissa))
    }

    /// The weight of a token at `d` levels below the top with `mantissa`, in mantissa units.
    pub fn weight(d: usize, mantissa: u32) -> f64 {
        mantissa as f64 * scale(d)
    }

    /// Σ weights of the tokens read, in mantissa units.
    pub fn total(&self) -> f64 {
        (self.levels.iter().enumerate()).fold(0.0, |z, (d, s)| z + s.mantissas as f64 * scale(d))
    }

    /// Σ weights of the tokens a mask removed, in mantissa units, with `more` (level below the
    /// top, mantissa) masked too: added as integers level by level first.
    pub fn masked(&self, more: impl Iterator<Item = (usize, u32)>) -> f64 {
        let mut m: Vec<u64> = self.levels.iter().map(|s| s.masked).collect();
        for (d, mantissa) in more {
            if d >= m.len() {
                m.resize(d + 1, 0);
            }
            m[d] += mantissa as u64;
        }
        (m.iter().enumerate()).fold(0.0, |z, (d, &s)| z + s as f64 * scale(d))
    }

    /// ln Z, the log of the sum of e^(logit − top level's logit), nats.
    pub fn ln_z(&self) -> f64 {
        ln(self.total()) - MANTISSA_BITS as f64 * std::f64::consts::LN_2
    }

    /// The entropy of the distribution read, nats: ln Z − Σ p·ln w.
    pub fn entropy(&self) -> f64 {
        let z = self.total();
        if z == 0.0 {
            return 0.0;
        }
        // Σ w·log2 w (against the top level) = Σ_d 2^-d (Σ m·fraction − d·Σ m), in mantissa units.
        let frac = (1u64 << FRAC_BITS) as f64;
        let wlw = (self.levels.iter().enumerate()).fold(0.0, |acc, (d, s)| {
            acc + scale(d) * (s.weighted as f64 / frac - d as f64 * s.mantissas as f64)
        });
        (self.ln_z() - std::f64::consts::LN_2 * wlw / z).max(0.0)
    }
}

/// e^x for x in [−CANDIDATE_NATS, 0]: x = k·ln2 + r with |r| ≤ ln2/2, then a degree-9 Taylor
/// polynomial of e^r (relative error below 1e-11) in Horner form — multiplications and additions
/// only, so the same bits on every platform, and far cheaper than `moa::math::exp`'s general
/// series (a step exponentiates thousands of candidates).
pub(super) fn exp_neg(x: f64) -> f64 {
    const LN2: f64 = std::f64::consts::LN_2;
    const C: [f64; 10] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362880.0,
    ];
    let k = (x * std::f64::consts::LOG2_E).round();
    let r = x - k * LN2;
    let mut p = C[9];
    for c in C[..9].iter().rev() {
        p = p * r + c;
    }
    // k is in [−30, 0]: 2^k is a normal number, built from its bits.
    p * f64::from_bits(((k as i64 + 1023) as u64) << 52)
}

/// Each CHUNK's largest finite logit (−inf when none) into `out`, and the largest of all with
/// the count of NaN and +inf logits.
pub(super) fn chunk_maxima(logits: &[f32], out: &mut Vec<f32>) -> (f32, u64) {
    out.clear();
    let (mut top, mut nonfinite) = (f32::NEG_INFINITY, 0u64);
    for chunk in logits.chunks(CHUNK) {
        // Infinities and NaN have every exponent bit set; a chunk without them (nearly all)
        // takes its max as an integer max of order-preserving keys, which vectorizes where a
        // float max under IEEE rules does not.
        let special: u32 = chunk
            .iter()
            .map(|l| u32::from(l.to_bits() & 0x7f80_0000 == 0x7f80_0000))
            .sum();
        let m = if special == 0 {
            chunk
                .iter()
                .map(|&l| order_key(l))
                .max()
                .map_or(f32::NEG_INFINITY, from_order_key)
        } else {
            let mut m = f32::NEG_INFINITY;
            for &l in chunk {
                // NaN and +inf never win: they are counted instead.
                m = if l > m && l < f32::INFINITY { l } else { m };
                nonfinite += u64::from(l.is_nan() || l == f32::INFINITY);
            }
            m
        };
        top = top.max(m);
        out.push(m);
    }
    (top, nonfinite)
}

/// A finite float as an i32 that orders the same (negative floats' magnitude bits flipped).
pub(super) fn order_key(l: f32) -> i32 {
    let b = l.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// The float of an [`order_key`] (the map is its own inverse).
pub(super) fn from_order_key(k: i32) -> f32 {
    f32::from_bits((k ^ (((k >> 31) as u32) >> 1) as i32) as u32)
}

/// 2^-d, exactly.
fn scale(d: usize) -> f64 {
    f64::from_bits((1023 - d as u64) << 52)
}
