//! Pickers: the last stage of a step, turning processed logits into a distribution.

use super::distribution::Distribution;
use super::error::PipelineError;
use super::partial::{cut, greedy_settles, past_head, SampleSettings, Settled, Tail};
use super::report::PickReport;
use super::stage::{PartSums, Picker};
use super::weights;
use crate::sampler::{greedy, SamplerConfig};
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

/// Temperature, then top-k, top-p and min-p truncation of the softmax, over integer weights
/// ([`super::weights`]) so that a pick from part of the logits and the shards' sums is the
/// same pick.
pub struct Sample {
    settings: SampleSettings,
    /// The last partial pick's kept head weight and the levels after it, for
    /// [`Picker::past_head`].
    after: (u128, Vec<(i64, u128, u64)>),
}

impl Sample {
    pub fn new(cfg: &SamplerConfig) -> Self {
        Sample {
            settings: SampleSettings {
                temperature: cfg.temperature,
                top_k: cfg.top_k,
                top_p: cfg.top_p,
                min_p: cfg.min_p,
            },
            after: (0, Vec::new()),
        }
    }

    /// The finite logits' exponents, and the largest one's level.
    fn exponents(&self, logits: &[f32]) -> (Vec<(u32, f64)>, Option<i64>) {
        let t = self.settings.temperature;
        let z: Vec<(u32, f64)> = (logits.iter().enumerate())
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as u32, weights::exponent(l, t)))
            .collect();
        let top = z.iter().map(|e| e.1).fold(f64::NEG_INFINITY, f64::max);
        (z, (top > f64::NEG_INFINITY).then(|| weights::level(top)))
    }

    /// The tokens of `z` that weigh more than `above` against `top`, in the draw's order:
    /// heaviest first, lowest id on ties.
    fn weighed(z: &[(u32, f64)], top: i64, above: u128) -> Vec<(u32, u128)> {
        let mut w: Vec<(u32, u128)> = (z.iter())
            .filter(|e| weights::level(e.1) >= top.saturating_sub(weights::SPAN))
            .map(|&(id, z)| {
                let (level, mantissa) = weights::split(z);
                (id, weights::weight(top, level, mantissa))
            })
            .filter(|e| e.1 > above)
            .collect();
        w.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        w
    }
}

/// +inf logits win outright, as under greedy: the mass is theirs, split evenly.
fn infinite(logits: &[f32], out: &mut Distribution) -> bool {
    let inf = |(_, &l): &(usize, &f32)| l == f32::INFINITY;
    if !logits.contains(&f32::INFINITY) {
        return false;
    }
    let ids = logits
        .iter()
        .enumerate()
        .filter(inf)
        .map(|(i, _)| (i as u32, 1));
    out.set_exact(ids, 0, 0);
    true
}

impl Picker for Sample {
    fn distribution(
        &mut self,
        logits: &[f32],
        out: &mut Distribution,
    ) -> Result<PickReport, PipelineError> {
        // -inf (masked) and NaN never win.
        if infinite(logits, out) {
            return Ok(PickReport::Sample);
        }
        let (z, top) = self.exponents(logits);
        let top = top.ok_or(PipelineError::NoCandidates)?;
        let head = Self::weighed(&z, top, 0);
        let c = cut(&self.settings, &head, Tail::Nothing, top)
            .map_err(|_| PipelineError::NoCandidates)?;
        out.set_exact(head[..c.kept].iter().copied(), 0, 0);
        Ok(PickReport::Sample)
    }

    fn distribution_part(
        &mut self,
        logits: &[f32],
        bound: f32,
        sums: Option<PartSums>,
        out: &mut Distribution,
    ) -> Result<(PickReport, Settled), PipelineError> {
        if bound == f32::NEG_INFINITY || infinite(logits, out) {
            // Nothing unknown, or +inf logits win outright (the unknown ones are finite).
            let pick = self.distribution(logits, out)?;
            return Ok((pick, Settled::Head(usize::MAX)));
        }
        let t = self.settings.temperature;
        let (z, top) = self.exponents(logits);
        let max = logits
            .iter()
            .filter(|l| l.is_finite())
            .fold(f32::NEG_INFINITY, |m, &l| m.max(l));
        let Some(top) = top.filter(|_| max > bound) else {
            return Ok((PickReport::Sample, Settled::Whole));
        };
        // Every unknown token weighs at most what the bound does.
        let (bound_level, bound_mantissa) = weights::weigh(bound, t);
        let most = weights::weight(top, bound_level, bound_mantissa);
        let head = Self::weighed(&z, top, most);
        if head.is_empty() {
            // The largest known logit weighs what the bound does: an unknown one may tie it.
            return Ok((PickReport::Sample, Settled::Whole));
        }
        let floor = top.saturating_sub(weights::SPAN);
        let rest = match sums {
            None => None,
            Some(s) => match weights::Rest::of(s.sums, s.raw.iter().copied(), t, floor) {
                Ok(rest) => rest,
                Err(weights::Inconsistent) => return Ok((PickReport::Sample, Settled::Whole)),
            },
        };
        let tail = match rest {
            _ if most == 0 => Tail::Nothing,
            None => Tail::Unknown(floor),
            Some(rest) => {
                if rest.top().is_some_and(|l| l > bound_level) {
                    // A shard counts a token above the bound it sent: its sums are not its
                    // logits'.
                    return Ok((PickReport::Sample, Settled::Whole));
                }
                // The known tokens after the head join the unknown ones, level by level.
                let mut levels = std::collections::BTreeMap::<i64, (u128, u64)>::new();
                for (level, w, n) in rest.weights(top) {
                    levels.insert(level, (w, n));
                }
                for &(_, z) in z.iter().filter(|e| weights::level(e.1) >= floor) {
                    let (level, mantissa) = weights::split(z);
                    let w = weights::weight(top, level, mantissa);
                    if w <= most && w > 0 {
                        let e = levels.entry(level).or_default();
                        (e.0, e.1) = (e.0 + w, e.1 + 1);
                    }
                }
                self.after.1.clear();
                (self.after.1).extend(levels.into_iter().rev().map(|(l, (w, n))| (l, w, n)));
                Tail::Levels(&self.after.1)
            }
        };
        let settled = match cut(&self.settings, &head, tail, top) {
            Ok(c) => {
                let kept = &head[..c.kept];
                self.after.0 = kept.iter().map(|e| e.1).sum();
                out.set_exact(kept.iter().copied(), c.beyond, c.beyond_count as usize);
                if c.beyond == 0 {
                    self.after.1.clear();
                }
                Settled::Head(c.kept)
            }
            Err(level) => Settled::Above(weights::logit_below(level, t)),
        };
        Ok((PickReport::Sample, settled))
    }

    fn sums_temperature(&self) -> Option<f32> {
        Some(self.settings.temperature).filter(|&t| t > 0.0)
    }

    fn past_head(&self, point: u128) -> Settled {
        match past_head(self.after.0, &self.after.1, point) {
            Some(level) => Settled::Above(weights::logit_below(level, self.settings.temperature)),
            None => Settled::Whole,
        }
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

    /// Every agent sees the `top_k` largest logits (the config's, MOA's default 40): when the
    /// known ones above the bound number at least that many, they are the whole logits' largest
    /// — the same candidates, views, merge and report; else every logit at least the k-th
    /// largest known settles it. `top_k` 0 (the whole vocabulary): only every logit does.
    fn settles(&self, logits: &[f32], bound: f32, _dist: &Distribution) -> Settled {
        let k = self.moa.config().top_k;
        let above = logits.iter().filter(|&&l| l > bound).count();
        if bound == f32::NEG_INFINITY || (k > 0 && above >= k) {
            return Settled::Head(usize::MAX);
        }
        let known = crate::sampler::top_k(logits, k);
        match known.get(k.wrapping_sub(1)) {
            Some(&(_, l)) if k > 0 && l.is_finite() => Settled::Above(l),
            _ => Settled::Whole,
        }
    }

    fn settles_part(&self) -> bool {
        self.moa.config().top_k > 0
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
