//! INTERFERE: feedback that sets the next step's temperature spread from what the agents'
//! views measured at this step.
//!
//! **What is measured.** The entropy gap between the hottest and the coldest surviving agent, as
//! a ratio of effective candidate counts: `ρ = exp(H_hot − H_cold) = N_eff(hot) / N_eff(cold)`,
//! where `N_eff = exp(H)` is the perplexity of a view. A softmax's entropy grows with its
//! temperature, so ρ ≥ 1, ρ = 1 when the agents see the same thing, and for fixed logits ρ
//! grows with the spread: the spread is the actuator, ρ the measurement, and how ρ answers the
//! spread depends on the logits of the step — a flat or a peaked distribution barely separates
//! the agents, an uncertain one separates them a lot.
//!
//! **The law.** Like Mirostat v2's update of μ, in the log domain: `e = ln ρ − ln target`
//! (clamped to ±1), `spread ← spread · exp(−sensitivity · e)`, bounded to
//! `[MIN_SPREAD, max_spread]`. Too much disagreement narrows the fan, too little widens it;
//! sensitivity 0 disables adaptation. The default target is φ: the hottest agent weighs φ times
//! as many candidates as the coldest.
//!
//! **The valve.** When ρ stays below `target^VALVE_SHARE` (the agents have collapsed onto each
//! other, as in a repetition loop) for `VALVE_STEPS` measured steps running, the proportional
//! law is too slow to help, and the spread is widened at once by `VALVE_FACTOR`. On the other
//! side (too much disagreement) narrowing is itself the safe direction, so no valve is needed.
//!
//! Steps that carry no information about the spread are not measured (fewer than two
//! survivors, or a near-certain step): the state then stays as it was.

use crate::math;

/// Smallest spread adaptation can reach (a multiplicative law could never leave 0).
pub const MIN_SPREAD: f64 = 0.01;
/// Largest |ln ρ − ln target| one step acts on: one wild step moves the spread by at most a
/// factor e^±sensitivity.
pub const MAX_ERROR: f64 = 1.0;
/// The valve watches for ρ < target^VALVE_SHARE …
pub const VALVE_SHARE: f64 = 0.25;
/// … for this many measured steps running …
pub const VALVE_STEPS: u32 = 8;
/// … and then multiplies the spread by this.
pub const VALVE_FACTOR: f64 = 1.5;

/// The measured ratio from the coldest and hottest surviving views' entropies (nats).
pub fn ratio(entropy_cold: f64, entropy_hot: f64) -> f64 {
    math::exp(entropy_hot - entropy_cold)
}

/// The controller's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Control {
    pub target: f64,
    pub sensitivity: f64,
    pub max_spread: f64,
}

/// The controller's state between steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interfere {
    pub spread: f64,
    /// Measured steps in a row with ρ below the valve's threshold.
    pub shortfall_steps: u32,
}

impl Interfere {
    pub fn new(spread: f64) -> Self {
        Interfere {
            spread,
            shortfall_steps: 0,
        }
    }

    /// The state with the valve opened at once: the spread widened by VALVE_FACTOR within the
    /// bounds, the shortfall count cleared (as when the valve fires).
    pub fn opened(self, c: &Control) -> Interfere {
        Interfere {
            spread: (self.spread * VALVE_FACTOR).clamp(MIN_SPREAD, c.max_spread.max(MIN_SPREAD)),
            shortfall_steps: 0,
        }
    }

    /// The state after a step that measured `ratio` (None: nothing measured), and whether the
    /// valve fired. Pure: same inputs, same result.
    pub fn next(self, ratio: Option<f64>, c: &Control) -> (Interfere, bool) {
        let Some(rho) = ratio.filter(|r| r.is_finite() && *r > 0.0) else {
            return (self, false);
        };
        if c.sensitivity == 0.0 {
            return (self, false);
        }
        let ln_target = math::ln(c.target);
        let error = (math::ln(rho) - ln_target).clamp(-MAX_ERROR, MAX_ERROR);
        let mut spread = self.spread * math::exp(-c.sensitivity * error);
        let collapsed = math::ln(rho) < VALVE_SHARE * ln_target;
        let mut shortfall_steps = if collapsed {
            self.shortfall_steps + 1
        } else {
            0
        };
        let valve = shortfall_steps >= VALVE_STEPS;
        if valve {
            spread *= VALVE_FACTOR;
            shortfall_steps = 0;
        }
        let max = c.max_spread.max(MIN_SPREAD);
        let state = Interfere {
            spread: spread.clamp(MIN_SPREAD, max),
            shortfall_steps,
        };
        (state, valve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PHI;

    const C: Control = Control {
        target: PHI,
        sensitivity: 0.1,
        max_spread: 1.4,
    };

    #[test]
    fn too_little_disagreement_widens_too_much_narrows() {
        let s = Interfere::new(0.4);
        assert!(s.next(Some(1.2), &C).0.spread > 0.4);
        assert!(s.next(Some(2.5), &C).0.spread < 0.4);
        assert_eq!(s.next(Some(PHI), &C).0.spread, 0.4);
        // No measurement, or no gain: no change.
        assert_eq!(s.next(None, &C), (s, false));
        let off = Control {
            sensitivity: 0.0,
            ..C
        };
        assert_eq!(s.next(Some(1.0), &off), (s, false));
    }

    #[test]
    fn an_opened_valve_widens_within_bounds() {
        let s = Interfere {
            spread: 0.4,
            shortfall_steps: 5,
        };
        let o = s.opened(&C);
        assert!((o.spread - 0.4 * VALVE_FACTOR).abs() < 1e-12);
        assert_eq!(o.shortfall_steps, 0);
        assert_eq!(Interfere::new(1.3).opened(&C).spread, C.max_spread);
    }

    #[test]
    fn steps_are_bounded() {
        let s = Interfere::new(0.4);
        let huge = s.next(Some(1e30), &C).0.spread;
        assert!((huge - 0.4 * (-0.1f64).exp()).abs() < 1e-12);
        let mut s = Interfere::new(1.0);
        for _ in 0..1000 {
            s = s.next(Some(1e9), &C).0;
        }
        assert_eq!(s.spread, MIN_SPREAD);
        for _ in 0..1000 {
            s = s.next(Some(1.0), &C).0;
        }
        assert_eq!(s.spread, C.max_spread);
    }

    #[test]
    fn the_valve_fires_after_a_run_of_collapsed_steps() {
        let mut s = Interfere::new(0.2);
        let mut fired = Vec::new();
        for step in 0..20 {
            let (next, valve) = s.next(Some(1.01), &C);
            if valve {
                fired.push(step);
                // The valve's jump is on top of the proportional step.
                assert!(next.spread > s.spread * VALVE_FACTOR);
            }
            s = next;
        }
        assert_eq!(
            fired,
            [VALVE_STEPS as usize - 1, 2 * VALVE_STEPS as usize - 1]
        );
        // A measured step that is not collapsed restarts the count.
        let mut s = Interfere::new(0.2);
        for step in 0..30 {
            let rho = if step % 5 == 4 { PHI } else { 1.01 };
            let (next, valve) = s.next(Some(rho), &C);
            assert!(!valve, "step {step}");
            s = next;
        }
    }

    #[test]
    fn the_update_is_pure() {
        let s = Interfere {
            spread: 0.37,
            shortfall_steps: 3,
        };
        for rho in [None, Some(1.0), Some(1.3), Some(PHI), Some(7.0)] {
            assert_eq!(s.next(rho, &C), s.next(rho, &C));
        }
    }
}
