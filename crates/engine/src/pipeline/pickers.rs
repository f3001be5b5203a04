//! Pickers: the last stage of a step, turning processed logits into a distribution.

use super::distribution::Distribution;
use super::error::PipelineError;
use super::partial::{greedy_settles, sample_settles, SampleSettings, Settled};
use super::report::PickReport;
use super::stage::Picker;
use crate::sampler::{det_exp, greedy, SamplerConfig};
use moa::{Moa, MoaConfig, MoaError};

/// The largest logit, lowest id on ties; drawn without randomness.
pub struct Greedy;

impl Picker for Greedy {
    fn distribution(
        &mut self,
        logits: &[f32],
        out: &mut Distribution,
    ) -> Result<PickReport, PipelineError> {
        out.set_certain(greedy(logits).ok_or(PipelineError::NoCandidates)?);
        Ok(PickReport::Greedy)
    }

    fn settles(&self, logits: &[f32], bound: f32, _dist: &Distribution) -> Settled {
        greedy_settles(logits, bound)
    }

    fn settles_part(&self) -> bool {
        true
    }

    fn takes_largest(&self) -> bool {
        true
    }
}

/// Temperature, then top-k, top-p and min-p truncation of the softmax.
pub struct Sample {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
}

impl Sample {
    pub fn new(cfg: &SamplerConfig) -> Self {
        Sample {
            temperature: cfg.temperature,
            top_k: cfg.top_k,
            top_p: cfg.top_p,
            min_p: cfg.min_p,
        }
    }
}

impl Picker for Sample {
    fn distribution(
        &mut self,
        logits: &[f32],
        out: &mut Distribution,
    ) -> Result<PickReport, PipelineError> {
        let c = out.weighted();
        c.clear();
        // -inf (masked) and NaN never win. +inf logits win outright, as under greedy: the mass
        // is theirs, split evenly.
        if logits.contains(&f32::INFINITY) {
            c.extend(
                logits
                    .iter()
                    .enumerate()
                    .filter(|(_, &l)| l == f32::INFINITY)
                    .map(|(i, _)| (i as u32, 0.0)),
            );
        } else {
            // `(l - max) / t` is at most 0 and never NaN, however small `t` is: `l / t` would
            // overflow to inf (and inf - inf to NaN) for a tiny temperature, where this
            // underflows to greedy instead.
            let max = logits
                .iter()
                .filter(|l| l.is_finite())
                .fold(f32::NEG_INFINITY, |m, &l| m.max(l));
            c.extend(
                logits
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.is_finite())
                    .map(|(i, &l)| (i as u32, (l - max) / self.temperature)),
            );
        }
        if c.is_empty() {
            return Err(PipelineError::NoCandidates);
        }
        // Descending by logit, ties by id, so the order is a total, platform-independent one.
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if self.top_k > 0 && self.top_k < c.len() {
            c.select_nth_unstable_by(self.top_k - 1, order);
            c.truncate(self.top_k);
        }
        c.sort_unstable_by(order);

        // Softmax in place: logits become probabilities.
        let max = c[0].1;
        let mut sum = 0.0f32;
        for e in c.iter_mut() {
            e.1 = det_exp(e.1 - max);
            sum += e.1;
        }
        for e in c.iter_mut() {
            e.1 /= sum;
        }

        if self.top_p < 1.0 {
            let mut cum = 0.0f32;
            let mut keep = c.len();
            for (i, e) in c.iter().enumerate() {
                cum += e.1;
                if cum >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep);
        }
        if self.min_p > 0.0 {
            let floor = c[0].1 * self.min_p;
            let keep = c.iter().take_while(|e| e.1 >= floor).count().max(1);
            c.truncate(keep);
        }
        Ok(PickReport::Sample)
    }

    fn settles(&self, logits: &[f32], bound: f32, _dist: &Distribution) -> Settled {
        let settings = SampleSettings {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
        };
        sample_settles(&settings, logits, bound)
    }

    fn settles_part(&self) -> bool {
        true
    }
}

/// MOA (the `moa` crate) as the picker: the merged distribution of its agents.
pub struct MoaPicker {
    moa: Moa,
}

impl MoaPicker {
    pub fn new(cfg: MoaConfig) -> Result<Self, PipelineError> {
        Ok(MoaPicker {
            moa: Moa::new(cfg)?,
        })
    }
}

impl Picker for MoaPicker {
    fn distribution(
        &mut self,
        logits: &[f32],
        out: &mut Distribution,
    ) -> Result<PickReport, PipelineError> {
        let step = self.moa.step(logits).map_err(|e| match e {
            MoaError::NoCandidates => PipelineError::NoCandidates,
            e => e.into(),
        })?;
        let c = out.weighted();
        c.clear();
        c.extend(
            step.ids
                .iter()
                .zip(step.probs)
                .map(|(&id, &p)| (id, p as f32)),
        );
        Ok(PickReport::Moa(step.report))
    }

    fn accept(&mut self, _token: u32) {
        self.moa.accept();
    }

    fn rollback(&mut self, n: usize) {
        self.moa.rollback(n);
    }

    fn reset(&mut self) {
        self.moa.reset();
    }

    fn open_valve(&mut self) -> bool {
        self.moa.open_valve();
        true
    }
}
