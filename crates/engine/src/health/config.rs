//! What the health monitor is asked to do: its window, the thresholds of its states, and which
//! actions its policy takes.

use super::spectrum::{MAX_WINDOW, MIN_WINDOW};

/// The thresholds that name a state. The defaults are calibrated on real generations by
/// `scripts/health/calibrate.mjs` (docs/health.md: the calibration set, its confusion tables,
/// and what the spectral condition adds — little, on these models).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Thresholds {
    /// Pre-collapse: the entropy series' α at least this (brown-ward drift) …
    pub pre_alpha: f64,
    /// … entropy falling at least this fast (nats per step, a negative number) …
    pub pre_entropy_slope: f64,
    /// … and this share of the window's 4-grams repeating, not falling.
    pub pre_repetition: f64,
    /// Boundary collapse: in a loop repeated this many times …
    pub collapse_repeats: usize,
    /// … with mean entropy over it at most this (nats).
    pub collapse_entropy: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            pre_alpha: 0.0,
            pre_entropy_slope: 0.0,
            pre_repetition: 0.3,
            collapse_repeats: 3,
            collapse_entropy: 2.0,
        }
    }
}

/// The actions taken on the monitor's state; each can be switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// Under pre-collapse, speculative drafts are capped (speculation pays least there).
    pub cap_drafts: bool,
    /// Under pre-collapse, MOA's spread valve engages.
    pub moa_valve: bool,
    /// Under boundary collapse, COLTRANE's eddy breaker engages.
    pub eddy: bool,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            cap_drafts: true,
            moa_valve: true,
            eddy: true,
        }
    }
}

impl HealthPolicy {
    /// Observe only: no action.
    pub const OFF: HealthPolicy = HealthPolicy {
        cap_drafts: false,
        moa_valve: false,
        eddy: false,
    };
}

/// The monitor's settings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthConfig {
    /// Steps in the sliding window the slopes are fitted over.
    pub window: usize,
    pub thresholds: Thresholds,
    pub policy: HealthPolicy,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            window: 64,
            thresholds: Thresholds::default(),
            policy: HealthPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HealthError {
    #[error("health.window must be in {MIN_WINDOW}..={MAX_WINDOW}, got {0}")]
    Window(usize),
    #[error("health.thresholds.{0} must be a finite number, got {1}")]
    Threshold(&'static str, f64),
    #[error("health.thresholds.collapseRepeats must be in 2..=16, got {0}")]
    Repeats(usize),
}

impl HealthConfig {
    pub fn validate(&self) -> Result<(), HealthError> {
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(HealthError::Window(self.window));
        }
        let t = &self.thresholds;
        for (name, v) in [
            ("preAlpha", t.pre_alpha),
            ("preEntropySlope", t.pre_entropy_slope),
            ("preRepetition", t.pre_repetition),
            ("collapseEntropy", t.collapse_entropy),
        ] {
            if !v.is_finite() {
                return Err(HealthError::Threshold(name, v));
            }
        }
        if !(2..=16).contains(&t.collapse_repeats) {
            return Err(HealthError::Repeats(t.collapse_repeats));
        }
        Ok(())
    }
}
