//! Decode health: a spectral monitor of the generation (docs/health.md). Each step's surprisal,
//! entropy and top-1 margin go into a sliding window; the slope α of each series' log–log
//! periodogram names its colour (white 0, pink 1, brown 2, blue −1, violet −2), and with the
//! entropy's trend and the tokens' repetition it names the state: `normal`, `pre-collapse`
//! (brown drift toward a degenerate distribution) or `boundary-collapse` (near-zero entropy in a
//! loop). Three faces come with it — waste, opportunity, diversity — and a policy acts on the
//! state (drafts capped, MOA's valve, COLTRANE's eddy breaker).
//!
//! Files, each using only those listed before it: `spectrum.rs` (the periodogram's slope and the
//! colours), `config.rs` ([`HealthConfig`]: window, thresholds, policy switches), `monitor.rs`
//! ([`HealthMonitor`], its per-step [`HealthReport`] and the generation's [`HealthMetrics`]).

mod config;
mod monitor;
mod spectrum;
mod sums;

pub use config::{HealthConfig, HealthError, HealthPolicy, Thresholds};
pub use monitor::{
    Alphas, Faces, HealthActions, HealthMetrics, HealthMonitor, HealthReport, HealthState,
    CANDIDATE_NATS, PRE_COLLAPSE_DRAFT_CAP,
};
pub use spectrum::{NoiseColour, Spectrum, MAX_WINDOW, MIN_WINDOW};
pub use sums::{HealthSums, LevelSum, HEALTH_LEVELS};

#[cfg(test)]
mod tests;
