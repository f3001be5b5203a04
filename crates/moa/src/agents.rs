//! Fork: the k agents are temperature views of the same logits over the same candidates.

use crate::math;

/// Agent i of k runs at `max(min_t, base + spread·(i/(k−1) − ½))`; one agent runs at `base`.
/// Rounded to 9 decimals, so a decimal configuration gives a decimal fan (0.5, 0.7, 0.9 rather
/// than 0.49999999999999994 …) on every target.
pub fn agent_temperatures(k: usize, base: f64, spread: f64, min_t: f64) -> Vec<f64> {
    let round = |t: f64| (t * 1e9).round() / 1e9;
    if k <= 1 {
        return vec![round(base.max(min_t))];
    }
    (0..k)
        .map(|i| {
            let offset = i as f64 / (k - 1) as f64 - 0.5;
            round((base + spread * offset).max(min_t))
        })
        .collect()
}

/// One agent's view: `out = softmax(logits / t)`, max-subtracted, with the deterministic exp.
/// Returns false when the view holds NaN or +inf (the agent is raced out).
pub fn view(logits: &[f32], t: f64, out: &mut [f64]) -> bool {
    let inv_t = 1.0 / t;
    let mut max = f64::NEG_INFINITY;
    for (o, &l) in out.iter_mut().zip(logits) {
        *o = l as f64 * inv_t;
        // NaN never becomes the max; it poisons its own term below.
        if *o > max {
            max = *o;
        }
    }
    let mut sum = 0.0f64;
    for o in out.iter_mut() {
        *o = math::exp(*o - max);
        sum += *o;
    }
    for o in out.iter_mut() {
        *o /= sum;
    }
    out.iter().all(|p| p.is_finite())
}

/// Scaled logits `logits / t` (the complement vote works on them).
pub fn scaled(logits: &[f32], t: f64, out: &mut [f64]) {
    let inv_t = 1.0 / t;
    for (o, &l) in out.iter_mut().zip(logits) {
        *o = l as f64 * inv_t;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fan_of_the_issue() {
        assert_eq!(agent_temperatures(3, 0.7, 0.4, 0.01), [0.5, 0.7, 0.9]);
        assert_eq!(agent_temperatures(3, 0.7, 0.6, 0.01), [0.4, 0.7, 1.0]);
        assert_eq!(agent_temperatures(1, 0.7, 0.6, 0.01), [0.7]);
        assert_eq!(agent_temperatures(2, 0.7, 0.4, 0.01), [0.5, 0.9]);
        assert_eq!(
            agent_temperatures(5, 1.0, 1.0, 0.01),
            [0.5, 0.75, 1.0, 1.25, 1.5]
        );
        // The floor holds.
        assert_eq!(agent_temperatures(3, 0.1, 1.0, 0.05), [0.05, 0.1, 0.6]);
    }

    #[test]
    fn views_race_out_non_finite_values() {
        let mut out = [0.0; 3];
        assert!(view(&[1.0, 2.0, 3.0], 1.0, &mut out));
        assert!((out.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(!view(&[1.0, f32::NAN, 3.0], 1.0, &mut out));
        assert!(!view(&[1.0, f32::INFINITY, 3.0], 1.0, &mut out));
        // A logit that overflows only at a cold temperature fails only that agent (in f64 this
        // takes an extreme temperature: f32 logits over 0.01 stay finite).
        assert!(!view(&[3e38, 1.0, 0.0], 1e-300, &mut out));
        assert!(view(&[3e38, 1.0, 0.0], 0.01, &mut out));
    }
}
