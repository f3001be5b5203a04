//! What a constraint reports: per step (`StepReport`) and over a generation (`Metrics`).

/// What the constraint did at one step.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// Tokens the final mask allows.
    pub allowed: usize,
    /// Soft tiers relaxed because the mask held too little probability.
    pub relaxed: u8,
    /// The step used the unmasked distribution (every soft tier relaxed).
    pub fallback: bool,
    /// The model's top token was masked out.
    pub prevented: bool,
    /// Tokens banned to break a loop.
    pub eddy_bans: u32,
    /// Prosody's bias (nats) on sentence ends or end-of-text this step (what it would be, when
    /// observing).
    pub prosody_bias: f32,
    /// Time to compute the mask, microseconds (0 without a clock).
    pub mask_us: f32,
}

/// What the constraint did over a generation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metrics {
    pub steps: u64,
    /// Steps where the model's top token was masked out.
    pub violations_prevented: u64,
    /// Steps where a soft tier was relaxed.
    pub fallbacks: u64,
    /// Steps decoded unmasked (every soft tier relaxed).
    pub unmasked: u64,
    /// Loops broken: steps where an eddy ban was applied.
    pub eddies_broken: u64,
    /// Loops that came back within two periods of a ban.
    pub eddies_returned: u64,
    /// Tokens accepted that broke a fold (let through by a fallback).
    pub fold_violations: u64,
    /// Deepest bracket nesting reached.
    pub max_depth: u8,
    /// Steps where the token budget bound the mask (closing in time).
    pub budget_steps: u64,
    /// At some step the shortest completion had more bytes than tokens were left (closing costs
    /// count a token per byte, the worst case), so the mask kept to the tokens that close
    /// fastest. The output may still have fitted: tokens usually hold several bytes.
    pub over_budget: bool,
    /// Steps where prosody leaned (or, observing, would have changed the top token).
    pub prosody_steps: u64,
    /// The structure is closed now: folds balanced, the JSON value complete.
    pub closed: bool,
    /// The text ends with a sentence end (before any end-of-text).
    pub sentence_end: bool,
    /// Mask time per step, microseconds: median and 99th percentile (0 without a clock).
    pub mask_us_p50: f32,
    pub mask_us_p99: f32,
    /// What the schema's matcher admits beyond the schema (`Schema::relaxations`).
    pub relaxations: Vec<String>,
    /// Keywords kept as annotations that a validator may assert (`Schema::annotations`).
    pub annotations: Vec<String>,
}
