//! MOA: ensemble sampling over one forward pass. Each decode step **forks** k agents — temperature
//! views of the same logits over the same candidates (the `top_k` largest) — **races** out the
//! views that hold NaN or +inf, **folds** the survivors into one distribution (deficit-weighted,
//! uniform, or a complement vote), and **INTERFERE** sets the next step's temperature spread from
//! what the views measured. The caller draws the token from the merged distribution.
//!
//! Pure Rust, no I/O, deterministic: the arithmetic uses only basic IEEE operations (our own
//! `exp` and `ln`), so a seeded run picks the same tokens natively and in wasm. The engine's
//! decode pipeline runs it as its last stage (docs/moa.md).

pub mod agents;
pub mod config;
pub mod fold;
pub mod interfere;
pub mod math;

pub use agents::agent_temperatures;
pub use config::{Merge, MoaConfig, MoaError, MAX_AGENTS, PHI};
pub use fold::{merge_distributions, Merged};
pub use interfere::{Control, Interfere};

use std::collections::VecDeque;

/// Accepted steps whose controller update can be rolled back.
pub const HISTORY: usize = 64;

/// A step below this merged entropy (nats) is near-certain and says nothing about the spread:
/// INTERFERE does not measure it.
pub const MIN_MEASURED_ENTROPY: f64 = 0.05;

/// What one step did, for the step metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MoaReport {
    /// Every agent's temperature this step.
    pub temperatures: Vec<f64>,
    /// Indices of the agents whose view was finite.
    pub survivors: Vec<usize>,
    /// Fold weight of each agent (0 for one raced out); the survivors' sum to 1.
    pub weights: Vec<f64>,
    /// (survivors − 1), plus (vocabulary − candidates) when `top_k` > 0.
    pub deficit: u64,
    /// Entropy of the merged distribution, in nats.
    pub entropy: f64,
    /// The spread this step ran with.
    pub spread: f64,
    /// INTERFERE's measured ratio exp(H_hot − H_cold); null when the step was not measured.
    pub ratio: Option<f64>,
    /// No agent survived: the token is the raw logits' argmax.
    pub fallback: bool,
    /// INTERFERE's valve fired after this step.
    pub valve: bool,
}

/// One step's merged distribution: `probs[j]` is the probability of token `ids[j]`; the ids are
/// in descending order of logit (ties by id), the order a seeded draw walks them in.
pub struct MoaStep<'a> {
    pub ids: &'a [u32],
    pub probs: &'a [f64],
    pub report: MoaReport,
}

/// A MOA sampler: its configuration, INTERFERE's state, and buffers reused across steps.
pub struct Moa {
    cfg: MoaConfig,
    control: Control,
    state: Interfere,
    /// The update computed by the last step, committed when its token is accepted.
    pending: Option<Interfere>,
    /// The state before each accepted token (most recent last), for rollback.
    history: VecDeque<Interfere>,
    candidates: Vec<(u32, f32)>,
    ids: Vec<u32>,
    logits: Vec<f32>,
    views: Vec<f64>,
    scaled: Vec<f64>,
    weights: Vec<f64>,
    merged: Vec<f64>,
}

impl Moa {
    pub fn new(cfg: MoaConfig) -> Result<Moa, MoaError> {
        cfg.validate()?;
        Ok(Moa {
            control: Control {
                target: cfg.target,
                sensitivity: cfg.sensitivity,
                max_spread: 2.0 * cfg.base_temperature,
            },
            state: Interfere::new(cfg.temperature_spread),
            pending: None,
            history: VecDeque::new(),
            candidates: Vec::new(),
            ids: Vec::new(),
            logits: Vec::new(),
            views: Vec::new(),
            scaled: Vec::new(),
            weights: Vec::new(),
            merged: Vec::new(),
            cfg,
        })
    }

    pub fn config(&self) -> &MoaConfig {
        &self.cfg
    }

    /// The spread the next step will run with.
    pub fn spread(&self) -> f64 {
        self.state.spread
    }

    /// Forks, races and folds one step's logits (−inf marks a masked token: it never becomes a
    /// candidate). Fails only when no token can be picked at all.
    pub fn step(&mut self, logits: &[f32]) -> Result<MoaStep<'_>, MoaError> {
        self.select_candidates(logits)?;
        let n = self.ids.len();
        let temperatures = agent_temperatures(
            self.cfg.k,
            self.cfg.base_temperature,
            self.state.spread,
            self.cfg.min_temperature,
        );
        // Fork and race.
        self.views.resize(temperatures.len() * n, 0.0);
        let survivors: Vec<usize> = (0..temperatures.len())
            .filter(|&i| {
                let view = &mut self.views[i * n..(i + 1) * n];
                agents::view(&self.logits, temperatures[i], view)
            })
            .collect();
        let top_k_deficit = match self.cfg.top_k {
            0 => 0,
            _ => (logits.len() - n) as u64,
        };
        if survivors.is_empty() {
            return self.fallback(logits, temperatures, top_k_deficit);
        }

        // Fold.
        let views: Vec<&[f64]> = survivors
            .iter()
            .map(|&i| &self.views[i * n..(i + 1) * n])
            .collect();
        match self.cfg.merge {
            Merge::DeficitWeighted => {
                fold::deficit_weighted(&views, self.cfg.use_kl, &mut self.weights, &mut self.merged)
            }
            Merge::Uniform => fold::uniform(&views, &mut self.weights, &mut self.merged),
            Merge::ComplementVote => {
                self.scaled.resize(survivors.len() * n, 0.0);
                for (row, &i) in self.scaled.chunks_exact_mut(n).zip(&survivors) {
                    agents::scaled(&self.logits, temperatures[i], row);
                }
                let scaled: Vec<&[f64]> = self.scaled.chunks_exact(n).collect();
                fold::complement_vote(&scaled, &mut self.merged);
                softmax_in_place(&mut self.merged);
                self.weights.clear();
                self.weights
                    .resize(survivors.len(), 1.0 / survivors.len() as f64);
            }
        }
        let entropy = fold::entropy(&self.merged);

        // Measure for INTERFERE: the coldest and the hottest survivors' entropy gap.
        let ratio = (survivors.len() >= 2 && entropy >= MIN_MEASURED_ENTROPY).then(|| {
            let by_t = |a: &&usize, b: &&usize| temperatures[**a].total_cmp(&temperatures[**b]);
            let cold = *survivors.iter().min_by(by_t).unwrap_or(&survivors[0]);
            let hot = *survivors.iter().max_by(by_t).unwrap_or(&survivors[0]);
            let h = |i: usize| fold::entropy(&self.views[i * n..(i + 1) * n]);
            interfere::ratio(h(cold), h(hot))
        });
        let (next, valve) = self.state.next(ratio, &self.control);
        self.pending = Some(next);

        let mut weights = vec![0.0; temperatures.len()];
        for (&i, &w) in survivors.iter().zip(&self.weights) {
            weights[i] = w;
        }
        let report = MoaReport {
            deficit: (survivors.len() - 1) as u64 + top_k_deficit,
            temperatures,
            survivors,
            weights,
            entropy,
            spread: self.state.spread,
            ratio,
            fallback: false,
            valve,
        };
        Ok(MoaStep {
            ids: &self.ids,
            probs: &self.merged,
            report,
        })
    }

    /// The candidate set every agent sees: tokens not masked (−inf), the `top_k` largest by
    /// logit, in descending order with ties by id (a total order, the same on every target).
    fn select_candidates(&mut self, logits: &[f32]) -> Result<(), MoaError> {
        let c = &mut self.candidates;
        c.clear();
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, &l)| l != f32::NEG_INFINITY)
                .map(|(i, &l)| (i as u32, l)),
        );
        if c.is_empty() {
            return Err(MoaError::NoCandidates);
        }
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let k = self.cfg.top_k;
        if k > 0 && k < c.len() {
            c.select_nth_unstable_by(k - 1, order);
            c.truncate(k);
        }
        c.sort_unstable_by(order);
        self.ids.clear();
        self.ids.extend(c.iter().map(|e| e.0));
        self.logits.clear();
        self.logits.extend(c.iter().map(|e| e.1));
        Ok(())
    }

    /// No view survived: the raw logits' argmax (NaN and −inf never win, lowest id on ties).
    fn fallback(
        &mut self,
        logits: &[f32],
        temperatures: Vec<f64>,
        top_k_deficit: u64,
    ) -> Result<MoaStep<'_>, MoaError> {
        let mut best: Option<(u32, f32)> = None;
        for (i, &l) in logits.iter().enumerate() {
            if l.is_nan() || l == f32::NEG_INFINITY {
                continue;
            }
            if best.is_none_or(|(_, b)| l > b) {
                best = Some((i as u32, l));
            }
        }
        let (id, _) = best.ok_or(MoaError::NoCandidates)?;
        self.ids.clear();
        self.ids.push(id);
        self.merged.clear();
        self.merged.push(1.0);
        self.pending = Some(self.state);
        let report = MoaReport {
            weights: vec![0.0; temperatures.len()],
            temperatures,
            survivors: Vec::new(),
            deficit: top_k_deficit,
            entropy: 0.0,
            spread: self.state.spread,
            ratio: None,
            fallback: true,
            valve: false,
        };
        Ok(MoaStep {
            ids: &self.ids,
            probs: &self.merged,
            report,
        })
    }

    /// A token was accepted: commits the last step's controller update (a token that no step
    /// picked, such as a prompt token, leaves the state as it is).
    pub fn accept(&mut self) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(self.state);
        if let Some(next) = self.pending.take() {
            self.state = next;
        }
    }

    /// Undoes the last `n` accepts (at most [`HISTORY`]).
    pub fn rollback(&mut self, n: usize) {
        self.pending = None;
        for _ in 0..n {
            match self.history.pop_back() {
                Some(s) => self.state = s,
                None => break,
            }
        }
    }

    /// Opens INTERFERE's valve now: the spread the next step runs with widens by
    /// [`interfere::VALVE_FACTOR`] (within the controller's bounds), as when the valve fires on
    /// its own. For a monitor that sees a collapse coming before the agents agree on it.
    pub fn open_valve(&mut self) {
        self.state = self.state.opened(&self.control);
    }

    /// Back to the configured spread, with no history.
    pub fn reset(&mut self) {
        self.state = Interfere::new(self.cfg.temperature_spread);
        self.pending = None;
        self.history.clear();
    }
}

fn softmax_in_place(x: &mut [f64]) {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    for v in x.iter_mut() {
        *v = math::exp(*v - max);
    }
    fold::normalize(x);
}

#[cfg(test)]
mod tests;
