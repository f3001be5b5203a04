//! Token sampling: greedy, temperature, top-k, top-p, min-p and a repetition penalty, driven by
//! a seeded PRNG. Every step uses only integer and IEEE basic float operations (our own `exp`),
//! so the same seed and logits give the same tokens on native and wasm.

use std::collections::VecDeque;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    #[error("temperature must be a finite number >= 0, got {0}")]
    Temperature(f32),
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    #[error("repeat_penalty must be a finite number > 0, got {0}")]
    RepeatPenalty(f32),
    #[error("no token can be sampled: every logit is -inf or NaN")]
    NoCandidates,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: usize,
    /// 1.0 disables top-p.
    pub top_p: f32,
    /// 0.0 disables min-p.
    pub min_p: f32,
    /// 1.0 disables the penalty.
    pub repeat_penalty: f32,
    /// How many of the most recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn validate(&self) -> Result<(), SamplerError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(SamplerError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplerError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplerError::MinP(self.min_p));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(SamplerError::RepeatPenalty(self.repeat_penalty));
        }
        Ok(())
    }
}

/// PCG-XSH-RR 32-bit generator: small, well studied, integer-only.
#[derive(Debug, Clone)]
pub struct Pcg32 {
    state: u64,
}

impl Pcg32 {
    const MUL: u64 = 6364136223846793005;
    const INC: u64 = 1442695040888963407;

    pub fn new(seed: u64) -> Self {
        let mut rng = Pcg32 { state: 0 };
        rng.next_u32();
        rng.state = rng.state.wrapping_add(seed);
        rng.next_u32();
        rng
    }

    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(Self::MUL).wrapping_add(Self::INC);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        xorshifted.rotate_right((old >> 59) as u32)
    }

    /// Uniform in [0, 1) with 24 bits of precision (exact in f32).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
    }
}

/// `exp` from basic IEEE operations only (range reduction + Taylor series in f64), so results are
/// bit-identical across platforms, unlike libm's, which differ between targets.
pub fn det_exp(x: f32) -> f32 {
    if x.is_nan() {
        return f32::NAN;
    }
    if x < -104.0 {
        return 0.0;
    }
    if x > 89.0 {
        return f32::INFINITY;
    }
    let x = x as f64;
    let k = (x * std::f64::consts::LOG2_E).round();
    let r = x - k * std::f64::consts::LN_2;
    // |r| <= ln2/2: 14 terms are far below f32 precision.
    let mut term = 1.0f64;
    let mut sum = 1.0f64;
    for i in 1..14 {
        term = term * r / i as f64;
        sum += term;
    }
    (sum * f64::powi(2.0, k as i32)) as f32
}

pub struct Sampler {
    cfg: SamplerConfig,
    rng: Pcg32,
    recent: VecDeque<u32>,
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Result<Self, SamplerError> {
        cfg.validate()?;
        Ok(Sampler {
            rng: Pcg32::new(cfg.seed),
            recent: VecDeque::with_capacity(cfg.repeat_last_n),
            candidates: Vec::new(),
            cfg,
        })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Records tokens (prompt or generated) for the repetition penalty.
    pub fn accept(&mut self, id: u32) {
        if self.cfg.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.cfg.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
    }

    /// Picks the next token from `logits` (modified in place by the penalty) and records it.
    pub fn sample(&mut self, logits: &mut [f32]) -> Result<u32, SamplerError> {
        self.apply_repeat_penalty(logits);
        let id = if self.cfg.temperature == 0.0 {
            greedy(logits).ok_or(SamplerError::NoCandidates)?
        } else {
            self.sample_stochastic(logits)?
        };
        self.accept(id);
        Ok(id)
    }

    fn apply_repeat_penalty(&self, logits: &mut [f32]) {
        let p = self.cfg.repeat_penalty;
        if p == 1.0 {
            return;
        }
        let mut seen: Vec<u32> = self.recent.iter().copied().collect();
        seen.sort_unstable();
        seen.dedup();
        for id in seen {
            if let Some(l) = logits.get_mut(id as usize) {
                // Same convention as HF and llama.cpp: push toward less likely either way.
                *l = if *l > 0.0 { *l / p } else { *l * p };
            }
        }
    }

    fn sample_stochastic(&mut self, logits: &[f32]) -> Result<u32, SamplerError> {
        let cfg = &self.cfg;
        let inv_t = 1.0 / cfg.temperature;
        let c = &mut self.candidates;
        c.clear();
        // -inf (masked) and NaN never win; +inf would make the softmax NaN, so it is dropped too.
        c.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l * inv_t)),
        );
        if c.is_empty() {
            return Err(SamplerError::NoCandidates);
        }
        // Descending by logit, ties by id, so the order is a total, platform-independent one.
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if cfg.top_k > 0 && cfg.top_k < c.len() {
            c.select_nth_unstable_by(cfg.top_k - 1, order);
            c.truncate(cfg.top_k);
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

        if cfg.top_p < 1.0 {
            let mut cum = 0.0f32;
            let mut keep = c.len();
            for (i, e) in c.iter().enumerate() {
                cum += e.1;
                if cum >= cfg.top_p {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep);
        }
        if cfg.min_p > 0.0 {
            let floor = c[0].1 * cfg.min_p;
            let keep = c.iter().take_while(|e| e.1 >= floor).count().max(1);
            c.truncate(keep);
        }

        let total: f32 = c.iter().map(|e| e.1).sum();
        let mut r = self.rng.next_f32() * total;
        for e in c.iter() {
            r -= e.1;
            if r < 0.0 {
                return Ok(e.0);
            }
        }
        Ok(c[c.len() - 1].0)
    }
}

/// Index of the largest finite-or-infinite logit, lowest id on ties; NaN never wins.
pub fn greedy(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || l == f32::NEG_INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// The `k` largest logits as (id, logit), largest first, lowest id on ties; NaN never listed.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut all: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.is_nan())
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if k < all.len() && k > 0 {
        all.select_nth_unstable_by(k - 1, order);
    }
    all.truncate(k);
    all.sort_unstable_by(order);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        (0..100)
            .map(|i| ((i * 37 % 100) as f32) / 10.0 - 5.0)
            .collect()
    }

    #[test]
    fn pcg_sequence_is_fixed() {
        // Golden values: the same on every target (this test also runs under wasm32).
        let mut r = Pcg32::new(42);
        let v: Vec<u32> = (0..4).map(|_| r.next_u32()).collect();
        let mut again = Pcg32::new(42);
        assert_eq!(v, (0..4).map(|_| again.next_u32()).collect::<Vec<_>>());
        assert_ne!(
            v,
            (0..4)
                .map(|_| Pcg32::new(43).next_u32())
                .collect::<Vec<_>>()
        );
        assert_eq!(v, GOLDEN_PCG_42);
    }
    const GOLDEN_PCG_42: [u32; 4] = [3270867926, 1795671209, 1924641435, 1143034755];

    #[test]
    fn det_exp_is_accurate() {
        for i in -1000..=800 {
            let x = i as f32 * 0.1;
            let (a, b) = (det_exp(x), x.exp());
            assert!(((a - b) / b).abs() < 2e-7, "x={x} det={a} std={b}");
        }
        assert_eq!(det_exp(0.0), 1.0);
        assert_eq!(det_exp(-200.0), 0.0);
        assert_eq!(det_exp(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn greedy_picks_max_and_skips_nan() {
        assert_eq!(greedy(&[1.0, f32::NAN, 3.0, 3.0, -1.0]), Some(2));
        assert_eq!(greedy(&[f32::NEG_INFINITY, f32::NAN]), None);
        let mut s = Sampler::new(SamplerConfig::default()).unwrap();
        assert_eq!(s.sample(&mut logits()).unwrap(), 27); // (27*37)%100 = 99, the max
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_seed_dependent() {
        let cfg = SamplerConfig {
            temperature: 1.0,
            seed: 7,
            ..Default::default()
        };
        let run = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone()).unwrap();
            (0..32)
                .map(|_| s.sample(&mut logits()).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&cfg), run(&cfg));
        assert_ne!(
            run(&cfg),
            run(&SamplerConfig {
                seed: 8,
                ..cfg.clone()
            })
        );
        // Identical on native and wasm32: this golden sequence is checked on both.
        assert_eq!(run(&cfg)[..8], GOLDEN_SAMPLES_SEED7);
    }
    const GOLDEN_SAMPLES_SEED7: [u32; 8] = [8, 53, 62, 94, 54, 16, 8, 62];

    #[test]
    fn top_k_lists_largest_first() {
        let l = [0.5f32, f32::NAN, 2.0, -1.0, 2.0];
        assert_eq!(top_k(&l, 3), vec![(2, 2.0), (4, 2.0), (0, 0.5)]);
        assert_eq!(top_k(&l, 10).len(), 4);
        assert!(top_k(&l, 0).is_empty());
    }

    #[test]
    fn top_k_one_is_greedy() {
        let cfg = SamplerConfig {
            temperature: 5.0,
            top_k: 1,
            seed: 3,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg).unwrap();
        for _ in 0..20 {
            assert_eq!(s.sample(&mut logits()).unwrap(), 27);
        }
    }

    #[test]
    fn top_p_and_min_p_restrict_to_the_head() {
        // Two dominant tokens, the rest negligible.
        let mut l = vec![-20.0f32; 50];
        l[3] = 5.0;
        l[9] = 5.0;
        for cfg in [
            SamplerConfig {
                temperature: 1.0,
                top_p: 0.9,
                seed: 1,
                ..Default::default()
            },
            SamplerConfig {
                temperature: 1.0,
                min_p: 0.5,
                seed: 1,
                ..Default::default()
            },
        ] {
            let mut s = Sampler::new(cfg).unwrap();
            let mut seen = [false; 50];
            for _ in 0..200 {
                seen[s.sample(&mut l.clone()).unwrap() as usize] = true;
            }
            assert!(seen[3] && seen[9]);
            assert_eq!(seen.iter().filter(|&&b| b).count(), 2);
        }
    }

    #[test]
    fn masked_logits_are_never_sampled() {
        let mut l = vec![f32::NEG_INFINITY; 10];
        l[4] = 0.0;
        l[6] = f32::NAN;
        let cfg = SamplerConfig {
            temperature: 2.0,
            seed: 9,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg).unwrap();
        for _ in 0..50 {
            assert_eq!(s.sample(&mut l.clone()).unwrap(), 4);
        }
        let mut all_masked = vec![f32::NEG_INFINITY; 4];
        assert_eq!(s.sample(&mut all_masked), Err(SamplerError::NoCandidates));
    }

    #[test]
    fn repeat_penalty_moves_greedy_off_a_repeated_token() {
        let cfg = SamplerConfig {
            repeat_penalty: 2.0,
            ..Default::default()
        };
        let mut s = Sampler::new(cfg).unwrap();
        let mut l = vec![0.0f32; 4];
        l[1] = 3.0;
        l[2] = 2.0;
        s.accept(1);
        assert_eq!(s.sample(&mut l).unwrap(), 2); // 3.0 / 2 = 1.5 < 2.0
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            ..Default::default()
        })
        .unwrap();
        let mut neg = vec![-1.0f32, -1.5, -5.0];
        s.accept(0);
        assert_eq!(s.sample(&mut neg).unwrap(), 1); // -1 * 2 = -2 < -1.5
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let bad = [
            SamplerConfig {
                temperature: -1.0,
                ..Default::default()
            },
            SamplerConfig {
                temperature: f32::NAN,
                ..Default::default()
            },
            SamplerConfig {
                top_p: 0.0,
                ..Default::default()
            },
            SamplerConfig {
                top_p: 1.5,
                ..Default::default()
            },
            SamplerConfig {
                min_p: -0.1,
                ..Default::default()
            },
            SamplerConfig {
                repeat_penalty: 0.0,
                ..Default::default()
            },
        ];
        for cfg in bad {
            assert!(Sampler::new(cfg).is_err());
        }
    }
}
