//! [`HealthMonitor`]: per-step scalars of the model's distribution, their spectral colour over a
//! sliding window, the state of the generation, and the three faces.
//!
//! Each step it reads the logits twice: before the stages (the model's own distribution — what
//! the health is about) and after them (what a mask threw away). Only tokens within
//! [`HEALTH_LEVELS`](super::HEALTH_LEVELS) powers of two of the top (≈ [`CANDIDATE_NATS`]) enter the sums: each token
//! left out is less than 2^-17 times as probable as the top one. Small models keep tens of
//! thousands of tokens within 20 nats (SmolLM2: 22k at the median step), which cost 4–5% of a
//! decode step to exponentiate; at 12 nats the monitor costs about 1%, and on SmolLM2 the
//! entropy moves by 0.02 nats on average (0.08 at most) and no state changes (120 steps
//! compared). The sums are integers by level ([`HealthSums`]: the same whoever adds them, so a
//! vocabulary split across head shards sums to what one process reads), and the rest is basic
//! IEEE in a fixed order (`exp_neg`, `moa::math::ln`), so the same logits give the same state on
//! every platform — the logits themselves differ in their last bits between the native and wasm
//! kernels.

use super::config::{HealthConfig, Thresholds};
use super::spectrum::{NoiseColour, Spectrum};
use super::sums::{chunk_maxima, HealthSums, CHUNK};
#[cfg(test)]
use super::sums::{from_order_key, order_key};
use moa::math::ln;
use std::collections::HashSet;

/// About how far below the top logit tokens are left out of the sums ([`HEALTH_LEVELS`](super::HEALTH_LEVELS) powers
/// of two: 12.5 nats); a chosen token past them counts as this much more surprising than ln Z.
pub const CANDIDATE_NATS: f32 = 12.0;
/// A token at least this probable counts as a real option for the opportunity face.
const PLAUSIBLE: f64 = 0.05;
/// The n of the n-grams repetition counts.
const NGRAM: usize = 4;
/// The longest loop period the collapse check looks for.
const LOOP_PERIOD: usize = 32;
/// The most draft tokens the policy lets through under pre-collapse.
pub const PRE_COLLAPSE_DRAFT_CAP: usize = 2;

/// The generation's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthState {
    Normal,
    /// Drifting toward a degenerate distribution: brown entropy, falling, repetition rising.
    PreCollapse,
    /// Near-zero entropy in a repeating loop.
    BoundaryCollapse,
}

/// The slope α of each scalar's log–log periodogram over the window.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Alphas {
    pub surprisal: f64,
    pub entropy: f64,
    pub margin: f64,
}

/// The three faces (each in 0..1) and their sum.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Faces {
    /// Non-finite logits and the probability a mask threw away (window mean).
    pub waste: f64,
    /// Plausible tokens (p ≥ 0.05 at some step of the window) never chosen, scaled by the share
    /// of the token budget still left.
    pub opportunity: f64,
    /// Distinct tokens over tokens in the window.
    pub diversity: f64,
    pub score: f64,
}

/// What the policy did at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthActions {
    /// Loop continuations banned before the stages (the eddy breaker, under boundary collapse).
    pub eddy_bans: u32,
    /// MOA's spread valve opened after this step (under pre-collapse).
    pub valve: bool,
}

/// What the monitor says at one step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    /// −ln p of the chosen token, nats (ln Z + CANDIDATE_NATS for a token the sums left out).
    pub surprisal: f64,
    /// Entropy of the model's distribution, nats.
    pub entropy: f64,
    /// p(top) − p(second).
    pub margin: f64,
    /// Once the window is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alpha: Option<Alphas>,
    /// The entropy series' colour, once the window is full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colour: Option<NoiseColour>,
    /// Least-squares slope of entropy over the window, nats per step.
    pub entropy_slope: f64,
    /// Share of the window's 4-grams that repeat an earlier one in it.
    pub repetition: f64,
    /// Repetition in the window's second half minus its first.
    pub repetition_trend: f64,
    /// The loop the tokens are in (period), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_period: Option<usize>,
    pub state: HealthState,
    pub faces: Faces,
    pub actions: HealthActions,
    /// The monitor's own time this step, microseconds (0 without a clock).
    pub us: f64,
}

/// What the monitor saw over a generation.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthMetrics {
    pub steps: u64,
    pub pre_collapse_steps: u64,
    pub boundary_collapse_steps: u64,
    /// First step (0-based) in each state, if reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_pre_collapse: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_boundary_collapse: Option<u64>,
    /// Means of the faces over the steps.
    pub faces: Faces,
    /// The policy's actions: steps with eddy bans, valves opened, drafts capped.
    pub eddy_steps: u64,
    pub valves: u64,
    pub capped_drafts: u64,
    /// The monitor's mean time per step, microseconds (0 without a clock).
    pub us_per_step: f64,
}

/// One generated step, as the window keeps it.
#[derive(Debug, Clone)]
struct Step {
    token: u32,
    surprisal: f64,
    entropy: f64,
    margin: f64,
    waste: f64,
    plausible: Vec<u32>,
    state: HealthState,
    faces: Faces,
    actions: HealthActions,
}

/// The model's distribution before the stages: its sums, and the tokens within their levels.
#[derive(Debug, Default)]
struct Before {
    sums: HealthSums,
    /// The ranges of ids the sums count as masked (none from whole logits).
    removed: Vec<(u32, u32)>,
    /// (token, levels below the top, mantissa), in token order, for the tokens within the sums'
    /// levels whose logits are known (every one, from whole logits).
    candidates: Vec<(u32, usize, u32)>,
    /// The max of each CHUNK of the logits.
    chunk_max: Vec<f32>,
    /// Σ weights (mantissa units).
    z: f64,
    ln_z: f64,
    entropy: f64,
    margin: f64,
}

/// Watches a generation (see the module doc).
#[derive(Debug)]
pub struct HealthMonitor {
    cfg: HealthConfig,
    spectrum: Spectrum,
    steps: Vec<Step>,
    /// Accepts since the last reset, newest last: true for a generated step (what rollback
    /// undoes), at most `moa::HISTORY`.
    accepts: Vec<bool>,
    before: Before,
    metrics: HealthMetrics,
    /// Loop continuations found for the coming step (reused buffer).
    loops: Vec<(usize, u32)>,
}

impl HealthMonitor {
    /// A monitor for a valid config (`HealthConfig::validate`).
    pub fn new(cfg: HealthConfig) -> HealthMonitor {
        HealthMonitor {
            spectrum: Spectrum::new(cfg.window),
            cfg,
            steps: Vec::new(),
            accepts: Vec::new(),
            before: Before::default(),
            metrics: HealthMetrics::default(),
            loops: Vec::new(),
        }
    }

    /// The eddy breaker (policy `eddy`, under boundary collapse): bans in `logits` the tokens
    /// that would continue the loop the generation is in, unless that would ban every token.
    /// Call after [`HealthMonitor::before_stages`] (the model's own distribution is read first,
    /// so the banned mass counts as waste). Returns the tokens banned.
    pub fn break_loop(&mut self, logits: &mut [f32]) -> u32 {
        if !self.cfg.policy.eddy || self.state() != HealthState::BoundaryCollapse {
            return 0;
        }
        let cfg = coltrane::EddyConfig {
            ngram: LOOP_PERIOD,
            repeats: self.cfg.thresholds.collapse_repeats,
        };
        let tail = &self.steps[self
            .steps
            .len()
            .saturating_sub(LOOP_PERIOD * cfg.repeats.max(4))..];
        let tokens: Vec<u32> = tail.iter().map(|s| s.token).collect();
        coltrane::eddy::detect(&tokens, &cfg, &mut self.loops);
        let open = logits.iter().filter(|l| **l > f32::NEG_INFINITY).count();
        let mut banned = 0u32;
        for &(_, t) in &self.loops {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if *l > f32::NEG_INFINITY && (banned as usize) + 1 < open {
                *l = f32::NEG_INFINITY;
                banned += 1;
            }
        }
        banned
    }

    /// Whether the eddy breaker acts at the next step ([`HealthMonitor::break_loop`]): it bans
    /// among every logit, so a pick from part of them cannot watch that step.
    pub fn may_break_loop(&self) -> bool {
        self.cfg.policy.eddy && self.state() == HealthState::BoundaryCollapse
    }

    /// Whether MOA's valve should open after the step just recorded (policy `moaValve`, under
    /// pre-collapse, at most once in the valve's own span of steps; [`record_actions`] records
    /// that it did).
    ///
    /// [`record_actions`]: HealthMonitor::record_actions
    pub fn valve_due(&self) -> bool {
        if !self.cfg.policy.moa_valve || self.state() != HealthState::PreCollapse {
            return false;
        }
        let span = moa::interfere::VALVE_STEPS as usize;
        let recent = &self.steps[self.steps.len().saturating_sub(span)..];
        !recent.iter().any(|s| s.actions.valve)
    }

    /// Adds the monitor's own time on the step just recorded (microseconds).
    pub fn record_time(&mut self, us: f64) {
        self.metrics.us_per_step += us;
    }

    /// Records the policy's actions on the step just recorded.
    pub fn record_actions(&mut self, actions: HealthActions) {
        if let Some(last) = self.steps.last_mut() {
            last.actions = actions;
        }
        self.metrics.eddy_steps += u64::from(actions.eddy_bans > 0);
        self.metrics.valves += u64::from(actions.valve);
    }

    /// The most draft tokens to verify now (policy `capDrafts`, under pre-collapse), if capped.
    pub fn draft_cap(&self) -> Option<usize> {
        (self.cfg.policy.cap_drafts && self.state() == HealthState::PreCollapse)
            .then_some(PRE_COLLAPSE_DRAFT_CAP)
    }

    /// A draft was cut to [`HealthMonitor::draft_cap`].
    pub fn note_capped_draft(&mut self) {
        self.metrics.capped_drafts += 1;
    }

    pub fn config(&self) -> &HealthConfig {
        &self.cfg
    }

    /// The state after the last step (normal before any).
    pub fn state(&self) -> HealthState {
        self.steps.last().map_or(HealthState::Normal, |s| s.state)
    }

    /// Reads the logits before the stages run.
    pub fn before_stages(&mut self, logits: &[f32]) {
        let b = &mut self.before;
        b.removed.clear();
        b.candidates.clear();
        let candidates = &mut b.candidates;
        b.sums = HealthSums::scan(logits, 0, &[], &mut b.chunk_max, |i, d, m| {
            candidates.push((i as u32, d, m))
        });
        self.settle();
    }

    /// [`HealthMonitor::before_stages`] from part of the logits (the unknown ones −inf) and the
    /// sums of every logit (each head shard's, [`HealthSums::merge`]d, the masked ones those in
    /// `removed`: the ranges of ids the pick's stages remove): the same report as from every
    /// logit whenever the tokens among the top two, the plausible ones (p ≥ 0.05) and the chosen
    /// one are known, and every token the stages mask is known or in `removed`.
    pub fn before_stages_part(&mut self, logits: &[f32], sums: HealthSums, removed: &[(u32, u32)]) {
        let b = &mut self.before;
        b.removed = removed.to_vec();
        b.candidates.clear();
        let candidates = &mut b.candidates;
        // The known logits' chunks that reach the levels read hold the candidates.
        chunk_maxima(logits, &mut b.chunk_max);
        for (c, &m) in b.chunk_max.iter().enumerate() {
            if sums.place(m).is_none() {
                continue;
            }
            let at = c * CHUNK;
            for (i, &l) in logits[at..(at + CHUNK).min(logits.len())]
                .iter()
                .enumerate()
            {
                if let Some((d, mantissa)) = sums.place(l) {
                    candidates.push(((at + i) as u32, d, mantissa));
                }
            }
        }
        b.sums = sums;
        self.settle();
    }

    /// After [`HealthMonitor::before_stages_part`]: whether the known logits hold every token the
    /// report reads one by one — the top two and the plausible ones (p ≥ 0.05) — when every
    /// unknown logit is at most `bound`; else `Err` with a threshold: every logit at least it
    /// known, they are.
    pub fn knows_enough(&self, logits: &[f32], bound: f32) -> Result<(), f32> {
        let b = &self.before;
        let (Some(top), Some((d, m))) = (b.sums.top, b.sums.place(bound)) else {
            // No finite logit, or none unknown within the levels read.
            return Ok(());
        };
        let unknown = HealthSums::weight(d, m);
        let mut known: Vec<(f64, f32)> = (b.candidates.iter())
            .map(|&(t, d, m)| (HealthSums::weight(d, m), logits[t as usize]))
            .collect();
        known.sort_by(|a, b| b.0.total_cmp(&a.0));
        let second = known.get(1).map_or(f64::NEG_INFINITY, |k| k.0);
        if unknown < PLAUSIBLE * b.z && unknown <= second {
            return Ok(());
        }
        // The logit whose weight is PLAUSIBLE·Z (a hair lower, against rounding), and the
        // second known one: above both, every token the report reads.
        let z = top as f64 + (PLAUSIBLE * b.z).log2() - 23.0;
        let plausible = (z / std::f64::consts::LOG2_E) as f32 - 1e-3;
        let second = known.get(1).map_or(f32::NEG_INFINITY, |k| k.1);
        Err(plausible.min(second))
    }

    /// The scalars from the sums and the candidates.
    fn settle(&mut self) {
        let b = &mut self.before;
        if b.sums.top.is_none() {
            (b.z, b.ln_z, b.entropy, b.margin) = (0.0, 0.0, 0.0, 0.0);
            return;
        }
        let (mut p1, mut p2) = (0.0f64, 0.0f64);
        for &(_, d, mantissa) in &b.candidates {
            let w = HealthSums::weight(d, mantissa);
            if w > p1 {
                p2 = p1;
                p1 = w;
            } else if w > p2 {
                p2 = w;
            }
        }
        b.z = b.sums.total();
        b.ln_z = b.sums.ln_z();
        b.entropy = b.sums.entropy();
        b.margin = (p1 - p2) / b.z;
    }

    /// Records the step whose token was `token` (`logits` as the stages left them;
    /// `remaining`: tokens the budget still allows, this one included) and reports it. The
    /// tokens the stages masked are the sums' masked ones and any known candidate the stages
    /// left −inf or NaN (from whole logits, every masked one is such a candidate).
    pub fn after_pick(
        &mut self,
        logits: &[f32],
        token: u32,
        remaining: Option<usize>,
        budget: Option<usize>,
    ) -> HealthReport {
        let b = &self.before;
        let masked_after = |t: u32| {
            logits
                .get(t as usize)
                .is_some_and(|l| l.is_nan() || *l == f32::NEG_INFINITY)
        };
        let surprisal = match b.candidates.iter().find(|c| c.0 == token) {
            Some(&(_, d, mantissa)) => ln(b.z / HealthSums::weight(d, mantissa)),
            None => b.ln_z + CANDIDATE_NATS as f64,
        };
        // The candidates masked now, but those the sums counted already.
        let removed = |t: u32| {
            let i = b.removed.partition_point(|r| r.1 <= t);
            b.removed.get(i).is_some_and(|r| r.0 <= t)
        };
        let more = (b.candidates.iter())
            .filter(|&&(t, _, _)| masked_after(t) && !removed(t))
            .map(|&(_, d, mantissa)| (d, mantissa));
        let masked = b.sums.masked(more) / b.z.max(f64::MIN_POSITIVE);
        let nonfinite = b.sums.nonfinite as f64 / b.sums.vocab.max(1) as f64;
        let waste = (nonfinite + masked).min(1.0);
        let plausible = b
            .candidates
            .iter()
            .filter(|&&(_, d, mantissa)| HealthSums::weight(d, mantissa) / b.z >= PLAUSIBLE)
            .map(|c| c.0)
            .collect();
        let (entropy, margin) = (b.entropy, b.margin);
        self.steps.push(Step {
            token,
            surprisal,
            entropy,
            margin,
            waste,
            plausible,
            state: HealthState::Normal,
            faces: Faces::default(),
            actions: HealthActions::default(),
        });
        self.push_accept(true);
        let report = self.assess(remaining, budget);
        let last = self.steps.last_mut().expect("pushed above");
        (last.state, last.faces) = (report.state, report.faces);
        self.count(report.state, report.faces);
        report
    }

    /// A context token was accepted (only rollback needs to know).
    pub fn accept_context(&mut self) {
        self.push_accept(false);
    }

    fn push_accept(&mut self, generated: bool) {
        if self.accepts.len() == moa::HISTORY {
            self.accepts.remove(0);
        }
        self.accepts.push(generated);
    }

    /// Undoes the last `n` accepts (the pipeline checks `n`).
    pub fn rollback(&mut self, n: usize) {
        for _ in 0..n.min(self.accepts.len()) {
            if self.accepts.pop() == Some(true) {
                self.steps.pop();
            }
        }
        self.recount();
    }

    pub fn reset(&mut self) {
        self.steps.clear();
        self.accepts.clear();
        self.metrics = HealthMetrics::default();
    }

    /// Over the generation so far.
    pub fn metrics(&self) -> HealthMetrics {
        let mut m = self.metrics.clone();
        if m.steps > 0 {
            let n = m.steps as f64;
            m.faces.waste /= n;
            m.faces.opportunity /= n;
            m.faces.diversity /= n;
            m.faces.score /= n;
            m.us_per_step /= n;
        }
        m
    }

    fn count(&mut self, state: HealthState, faces: Faces) {
        let m = &mut self.metrics;
        let step = m.steps;
        m.steps += 1;
        match state {
            HealthState::Normal => {}
            HealthState::PreCollapse => {
                m.pre_collapse_steps += 1;
                m.first_pre_collapse.get_or_insert(step);
            }
            HealthState::BoundaryCollapse => {
                m.boundary_collapse_steps += 1;
                m.first_boundary_collapse.get_or_insert(step);
            }
        }
        m.faces.waste += faces.waste;
        m.faces.opportunity += faces.opportunity;
        m.faces.diversity += faces.diversity;
        m.faces.score += faces.score;
    }

    /// The metrics from the steps kept (after a rollback; capped drafts are not undone).
    fn recount(&mut self) {
        self.metrics = HealthMetrics {
            capped_drafts: self.metrics.capped_drafts,
            ..HealthMetrics::default()
        };
        let kept: Vec<(HealthState, Faces, HealthActions)> = self
            .steps
            .iter()
            .map(|s| (s.state, s.faces, s.actions))
            .collect();
        for (state, faces, actions) in kept {
            self.count(state, faces);
            self.metrics.eddy_steps += u64::from(actions.eddy_bans > 0);
            self.metrics.valves += u64::from(actions.valve);
        }
    }

    /// The report for the newest step, from the window ending at it.
    fn assess(&self, remaining: Option<usize>, budget: Option<usize>) -> HealthReport {
        let w = self.cfg.window;
        let all = &self.steps;
        let window = &all[all.len().saturating_sub(w)..];
        let last = window.last().expect("a step was pushed");
        let series = |f: fn(&Step) -> f64| window.iter().map(f).collect::<Vec<f64>>();
        let entropy = series(|s| s.entropy);
        let alpha = (window.len() == w).then(|| Alphas {
            surprisal: self.spectrum.alpha(&series(|s| s.surprisal)),
            entropy: self.spectrum.alpha(&entropy),
            margin: self.spectrum.alpha(&series(|s| s.margin)),
        });
        let colour = alpha.map(|a| NoiseColour::nearest(a.entropy));
        let entropy_slope = slope(&entropy);
        let tokens: Vec<u32> = window.iter().map(|s| s.token).collect();
        let (repetition, repetition_trend) = repetition(&tokens);
        let loop_period = loop_period(all, self.cfg.thresholds.collapse_repeats);
        let state = classify(
            &self.cfg.thresholds,
            alpha.as_ref(),
            entropy_slope,
            repetition,
            repetition_trend,
            loop_period.map(|p| {
                let span = (p * self.cfg.thresholds.collapse_repeats).min(all.len());
                mean(all[all.len() - span..].iter().map(|s| s.entropy))
            }),
        );
        let faces = faces(window, remaining, budget);
        HealthReport {
            surprisal: last.surprisal,
            entropy: last.entropy,
            margin: last.margin,
            alpha,
            colour,
            entropy_slope,
            repetition,
            repetition_trend,
            loop_period,
            state,
            faces,
            actions: HealthActions::default(),
            us: 0.0,
        }
    }
}

/// The state from the window's features (`loop_entropy`: mean entropy over the loop the tokens
/// are in, if any).
fn classify(
    t: &Thresholds,
    alpha: Option<&Alphas>,
    entropy_slope: f64,
    repetition: f64,
    repetition_trend: f64,
    loop_entropy: Option<f64>,
) -> HealthState {
    if loop_entropy.is_some_and(|h| h <= t.collapse_entropy) {
        return HealthState::BoundaryCollapse;
    }
    let drifting = alpha.is_some_and(|a| a.entropy >= t.pre_alpha)
        && entropy_slope <= t.pre_entropy_slope
        && repetition >= t.pre_repetition
        && repetition_trend >= 0.0;
    match drifting {
        true => HealthState::PreCollapse,
        false => HealthState::Normal,
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for v in values {
        sum += v;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Least-squares slope of `y` against 0, 1, 2, … (0 for fewer than two values).
fn slope(y: &[f64]) -> f64 {
    let n = y.len();
    if n < 2 {
        return 0.0;
    }
    let mx = (n - 1) as f64 / 2.0;
    let my = mean(y.iter().copied());
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, v) in y.iter().enumerate() {
        let dx = i as f64 - mx;
        sxy += dx * (v - my);
        sxx += dx * dx;
    }
    sxy / sxx
}

/// The share of `tokens`' 4-grams that repeat an earlier one among them, and that share in the
/// second half minus the first.
fn repetition(tokens: &[u32]) -> (f64, f64) {
    if tokens.len() < NGRAM + 1 {
        return (0.0, 0.0);
    }
    let mut seen = HashSet::new();
    let repeated: Vec<bool> = tokens
        .windows(NGRAM)
        .map(|g| !seen.insert([g[0], g[1], g[2], g[3]]))
        .collect();
    let share = |r: &[bool]| match r.len() {
        0 => 0.0,
        n => r.iter().filter(|&&x| x).count() as f64 / n as f64,
    };
    let half = repeated.len() / 2;
    (
        share(&repeated),
        share(&repeated[half..]) - share(&repeated[..half]),
    )
}

/// The shortest period p ≤ LOOP_PERIOD such that the last `repeats`·p tokens repeat with
/// period p (a single token needs at least 4 in a row).
fn loop_period(steps: &[Step], repeats: usize) -> Option<usize> {
    let cfg = coltrane::EddyConfig {
        ngram: LOOP_PERIOD,
        repeats,
    };
    let tail = &steps[steps.len().saturating_sub(LOOP_PERIOD * repeats.max(4))..];
    let tokens: Vec<u32> = tail.iter().map(|s| s.token).collect();
    let mut found = Vec::new();
    coltrane::eddy::detect(&tokens, &cfg, &mut found);
    found.first().map(|&(p, _)| p)
}

/// The faces over the window.
fn faces(window: &[Step], remaining: Option<usize>, budget: Option<usize>) -> Faces {
    let waste = mean(window.iter().map(|s| s.waste));
    let chosen: HashSet<u32> = window.iter().map(|s| s.token).collect();
    let plausible: HashSet<u32> = window
        .iter()
        .flat_map(|s| s.plausible.iter().copied())
        .collect();
    let unexplored = match plausible.len() {
        0 => 0.0,
        n => plausible.iter().filter(|t| !chosen.contains(t)).count() as f64 / n as f64,
    };
    let left = match (remaining, budget) {
        (Some(r), Some(b)) if b > 0 => (r.saturating_sub(1)) as f64 / b as f64,
        _ => 1.0,
    };
    let opportunity = unexplored * left;
    let diversity = chosen.len() as f64 / window.len().max(1) as f64;
    Faces {
        waste,
        opportunity,
        diversity,
        score: waste + opportunity + diversity,
    }
}

#[cfg(test)]
pub(super) fn order_key_for_tests(l: f32) -> (i32, f32) {
    (order_key(l), from_order_key(order_key(l)))
}
