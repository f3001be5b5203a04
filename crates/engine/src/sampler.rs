//! Sampling settings (greedy, temperature, top-k, top-p, min-p, repetition, presence and
//! frequency penalties) and the
//! pieces every pick is built from: the seeded PCG32 generator and our own `exp`, so the same
//! seed and logits give the same tokens on native and wasm. The stages and pickers that use
//! them are in [`crate::pipeline`].

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
    #[error("{name} must be a number in [-2, 2], got {value}")]
    CountPenalty { name: &'static str, value: f32 },
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
    /// OpenAI's penalties on generated tokens: subtracted once from the logit of every token
    /// generated so far (presence), and once per time it was generated (frequency). 0 disables.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
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
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
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
        for (name, value) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&value) {
                return Err(SamplerError::CountPenalty { name, value });
            }
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

/// `exp` of an f32 from basic IEEE operations only (computed in f64 by [`moa::math::exp`]), so
/// results are bit-identical across platforms, unlike libm's, which differ between targets.
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
    moa::math::exp(x as f64) as f32
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
    }

    #[test]
    fn top_k_lists_largest_first() {
        let l = [0.5f32, f32::NAN, 2.0, -1.0, 2.0];
        assert_eq!(top_k(&l, 3), vec![(2, 2.0), (4, 2.0), (0, 0.5)]);
        assert_eq!(top_k(&l, 10).len(), 4);
        assert!(top_k(&l, 0).is_empty());
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
            assert!(cfg.validate().is_err(), "{cfg:?}");
        }
    }
}
