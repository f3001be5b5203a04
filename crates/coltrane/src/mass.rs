//! How much of the model's probability a mask keeps, for the oracle fallback. Deterministic
//! (basic IEEE operations only, our own `exp`), so a seeded run makes the same fallback
//! decisions natively and in wasm.

use crate::bitset::TokenSet;

/// e^x for x ≤ 0: x = k·ln2 + r, then a degree-7 series in r (relative error below 1e-7,
/// plenty for comparing masses against a threshold).
fn exp_neg(x: f64) -> f64 {
    if x.is_nan() || x < -700.0 {
        return 0.0;
    }
    let k = (x * std::f64::consts::LOG2_E).round();
    let r = x - k * std::f64::consts::LN_2;
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..8 {
        term = term * r / i as f64;
        sum += term;
    }
    sum * f64::from_bits(((k as i64 + 1023).clamp(1, 2046) as u64) << 52)
}

/// Whether the tokens in `allowed` hold at least `threshold` of softmax(`logits`) (T = 1).
pub fn keeps_mass(logits: &[f32], allowed: &TokenSet, threshold: f64) -> bool {
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return true;
    }
    if max == f32::INFINITY {
        // Some logit dominates everything: the mass is where the +inf ones are.
        return logits
            .iter()
            .enumerate()
            .any(|(i, &l)| l == f32::INFINITY && allowed.contains(i as u32));
    }
    let max = max as f64;
    let e = |l: f32| exp_neg(l as f64 - max);
    // The banned tokens are usually few: their mass first.
    let banned: f64 = allowed
        .iter_missing()
        .filter_map(|i| logits.get(i as usize))
        .map(|&l| e(l))
        .sum();
    if banned == 0.0 {
        return true;
    }
    // A lower bound on the kept mass is the best allowed token's.
    let best = allowed
        .iter()
        .filter_map(|i| logits.get(i as usize))
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let ratio = threshold / (1.0 - threshold).max(1e-12);
    if e(best) >= ratio * banned {
        return true;
    }
    let kept: f64 = allowed
        .iter()
        .filter_map(|i| logits.get(i as usize))
        .map(|&l| e(l))
        .sum();
    kept >= threshold * (kept + banned)
}

/// [`keeps_mass`] from part of the logits: the unknown ones are −inf in `logits`, each at most
/// `bound`. `Ok` with the answer every logit gives, when the known ones and the bound decide it
/// whatever the rest are; otherwise `Err(t)`: every logit at least `t` would likely decide it
/// (−inf: only all of them).
///
/// The kept and banned masses lie between the known tokens' sums and those plus the bound's term
/// for each unknown token; an answer is given only when it holds across that whole range, with
/// room (`SLACK`) for sums added in another order and our `exp`'s error.
pub fn keeps_mass_part(
    logits: &[f32],
    allowed: &TokenSet,
    threshold: f64,
    bound: f32,
) -> Result<bool, f32> {
    const SLACK: f64 = 1e-6;
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    // Nothing unknown, or +inf logits (all known: the unknown are finite) decide it.
    if bound == f32::NEG_INFINITY || max == f32::INFINITY {
        return Ok(keeps_mass(logits, allowed, threshold));
    }
    if max <= bound {
        // The largest logit, which every term is relative to, is not known.
        return Err(f32::NEG_INFINITY);
    }
    let m = max as f64;
    let e = |l: f32| exp_neg(l as f64 - m);
    // An unknown token's term is at most the bound's (our exp is monotone within its error).
    let unknown_term = e(bound) * (1.0 + SLACK);
    let sums = |ids: &mut dyn Iterator<Item = u32>| {
        let (mut known, mut unknown, mut best) = (0.0f64, 0usize, f32::NEG_INFINITY);
        for i in ids {
            match logits.get(i as usize) {
                Some(&l) if l == f32::NEG_INFINITY => unknown += 1,
                Some(&l) => {
                    known += e(l);
                    if l > best {
                        best = l;
                    }
                }
                None => {}
            }
        }
        (known, unknown as f64, best)
    };
    let (banned, banned_unknown, _) = sums(&mut allowed.iter_missing());
    let (kept, kept_unknown, best) = sums(&mut allowed.iter());
    let banned_hi = banned + banned_unknown * unknown_term;
    let kept_hi = kept + kept_unknown * unknown_term;
    let best_lo = e(best);
    let best_hi = match kept_unknown > 0.0 {
        true => best_lo.max(unknown_term),
        false => best_lo,
    };
    let ratio = threshold / (1.0 - threshold).max(1e-12);
    // Keeps, whatever the unknown are: each of `keeps_mass`'s ways to say so.
    if banned_hi == 0.0
        || best_lo >= ratio * banned_hi * (1.0 + SLACK)
        || kept >= threshold * (kept + banned_hi) * (1.0 + SLACK)
    {
        return Ok(true);
    }
    // Falls short, whatever the unknown are.
    if banned > 0.0
        && best_hi < ratio * banned * (1.0 - SLACK)
        && kept_hi < threshold * (kept_hi + banned) * (1.0 - SLACK)
    {
        return Ok(false);
    }
    // The usual way to settle it: the unknown banned tokens' terms small enough that the best
    // kept token outweighs them (a little lower, for the slack).
    let room = best_lo / (ratio * (1.0 + SLACK) * (1.0 + SLACK)) - banned;
    if room > 0.0 && banned_unknown > 0.0 {
        let t = m + (room / banned_unknown).ln() - 0.05;
        if t < bound as f64 {
            return Err(t as f32);
        }
    }
    Err(f32::NEG_INFINITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_close() {
        for i in 0..2000 {
            let x = -(i as f64) * 0.05;
            assert!(
                (exp_neg(x) - x.exp()).abs() <= 1e-7 * x.exp() + 1e-300,
                "{x}"
            );
        }
    }

    #[test]
    fn mass_against_a_threshold() {
        let logits = [5.0f32, 0.0, 0.0, 0.0];
        let mut allowed = TokenSet::empty(4);
        allowed.insert(1);
        allowed.insert(2);
        // e^0·2 / (e^5 + 3) ≈ 0.0132
        assert!(!keeps_mass(&logits, &allowed, 0.05));
        assert!(keeps_mass(&logits, &allowed, 0.01));
        allowed.insert(0);
        assert!(keeps_mass(&logits, &allowed, 0.99));
        let all_masked = [f32::NEG_INFINITY; 4];
        assert!(keeps_mass(&all_masked, &allowed, 0.5));
    }
}
