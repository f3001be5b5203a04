//! What a step reports: each stage's numbers, the picker's, and the token drawn.

use crate::health::HealthReport;
use moa::MoaReport;

/// What one logits stage did at a step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StageReport {
    pub stage: &'static str,
    /// Logits it changed.
    pub changed: usize,
    /// COLTRANE's numbers (mask size, fallback, eddy bans, prosody, mask time).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub coltrane: Option<coltrane::StepReport>,
}

impl StageReport {
    pub fn changed(stage: &'static str, changed: usize) -> StageReport {
        StageReport {
            stage,
            changed,
            coltrane: None,
        }
    }
}

/// What the picker did at a step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "picker", rename_all = "snake_case")]
pub enum PickReport {
    Greedy,
    Sample,
    Moa(MoaReport),
}

/// Per-step metadata: the token, which stages ran and what they did, and the picker's numbers
/// (for MOA: temperatures, survivors, weights, deficit, entropy, spread, ratio, fallback, valve,
/// flattened into the object).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepInfo {
    pub token: u32,
    pub stages: Vec<StageReport>,
    /// Tokens the pick could have drawn.
    pub candidates: usize,
    #[serde(flatten)]
    pub pick: PickReport,
    /// The health monitor's report, when one watches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthReport>,
}

impl StepInfo {
    pub fn moa(&self) -> Option<&MoaReport> {
        match &self.pick {
            PickReport::Moa(r) => Some(r),
            _ => None,
        }
    }
}
