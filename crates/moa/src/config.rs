//! What a MOA run is configured with, its validation, and the `k=3,base=0.7,…` spec the CLI takes.

/// The golden ratio: INTERFERE's default target for the agents' entropy gap (see `interfere`).
pub const PHI: f64 = 1.618_033_988_749_895;

/// Most agents a step may fork: each costs a softmax over the candidates.
pub const MAX_AGENTS: usize = 32;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MoaError {
    #[error("moa.k must be an integer in [1, {MAX_AGENTS}], got {0}")]
    Agents(usize),
    #[error("moa.{name} must be {rule}, got {value}")]
    Value {
        name: &'static str,
        rule: &'static str,
        value: f64,
    },
    #[error("moa.merge must be deficit, uniform or vote, got {0:?}")]
    Merge(String),
    #[error("bad --moa spec {spec:?}: {reason}")]
    Spec { spec: String, reason: String },
    #[error("no token can be picked: every logit is -inf or NaN")]
    NoCandidates,
    #[error("the distributions to merge must be {0}")]
    Distributions(&'static str),
}

/// How the agents' views are folded into one distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Merge {
    /// Weights proportional to each agent's distance from the mean view: the agent that
    /// disagrees most weighs most.
    #[default]
    DeficitWeighted,
    /// Plain mean of the views.
    Uniform,
    /// Per candidate, the share of agents that rate it above their own mean scales its mean
    /// logit (see `fold::complement_vote`).
    ComplementVote,
}

impl Merge {
    pub fn parse(name: &str) -> Result<Merge, MoaError> {
        match name {
            "deficit" | "deficit_weighted" | "deficitWeighted" => Ok(Merge::DeficitWeighted),
            "uniform" => Ok(Merge::Uniform),
            "vote" | "complement_vote" | "complementVote" => Ok(Merge::ComplementVote),
            other => Err(MoaError::Merge(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct MoaConfig {
    /// Number of agents (temperature views).
    pub k: usize,
    pub base_temperature: f64,
    /// Width of the temperature fan: agent i of k runs at `base + spread·(i/(k−1) − ½)`.
    pub temperature_spread: f64,
    /// Floor of every agent's temperature.
    pub min_temperature: f64,
    /// Candidates every agent sees: the `top_k` largest logits (0 = the whole vocabulary).
    pub top_k: usize,
    pub merge: Merge,
    /// Deficit-weighted merge: measure distance by KL(p_i ‖ p̄) instead of the L2 norm.
    pub use_kl: bool,
    /// INTERFERE gain (0 disables adaptation: the spread stays as configured).
    pub sensitivity: f64,
    /// INTERFERE target for the measured ratio (≥ 1).
    pub target: f64,
}

impl Default for MoaConfig {
    fn default() -> Self {
        MoaConfig {
            k: 3,
            base_temperature: 0.7,
            temperature_spread: 0.4,
            min_temperature: 0.01,
            top_k: 40,
            merge: Merge::DeficitWeighted,
            use_kl: false,
            sensitivity: 0.1,
            target: PHI,
        }
    }
}

fn check(name: &'static str, value: f64, rule: &'static str, ok: bool) -> Result<(), MoaError> {
    match ok && value.is_finite() {
        true => Ok(()),
        false => Err(MoaError::Value { name, rule, value }),
    }
}

impl MoaConfig {
    pub fn validate(&self) -> Result<(), MoaError> {
        if !(1..=MAX_AGENTS).contains(&self.k) {
            return Err(MoaError::Agents(self.k));
        }
        let (t, s, m) = (
            self.base_temperature,
            self.temperature_spread,
            self.min_temperature,
        );
        check("baseTemperature", t, "a finite number > 0", t > 0.0)?;
        check("temperatureSpread", s, "a finite number >= 0", s >= 0.0)?;
        check("minTemperature", m, "a finite number > 0", m > 0.0)?;
        let g = self.sensitivity;
        check(
            "sensitivity",
            g,
            "a finite number in [0, 1]",
            (0.0..=1.0).contains(&g),
        )?;
        let r = self.target;
        check("target", r, "a finite number >= 1", r >= 1.0)?;
        Ok(())
    }

    /// Parses the CLI's `k=3,base=0.7,spread=0.4,merge=deficit|uniform|vote,top-k=40,
    /// sensitivity=0.1` (also `min-temperature=`, `kl=true|false`, `target=`); an empty spec
    /// is the defaults, and keys not given keep theirs.
    pub fn parse_spec(spec: &str) -> Result<MoaConfig, MoaError> {
        let fail = |reason: String| MoaError::Spec {
            spec: spec.to_string(),
            reason,
        };
        let mut cfg = MoaConfig::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| fail(format!("{part:?} is not key=value")))?;
            let number = || {
                value
                    .parse::<f64>()
                    .map_err(|_| fail(format!("{key} needs a number, got {value:?}")))
            };
            let count = || {
                value
                    .parse::<usize>()
                    .map_err(|_| fail(format!("{key} needs a whole number, got {value:?}")))
            };
            match key {
                "k" => cfg.k = count()?,
                "base" | "temperature" => cfg.base_temperature = number()?,
                "spread" => cfg.temperature_spread = number()?,
                "min-temperature" | "min-t" => cfg.min_temperature = number()?,
                "top-k" | "top_k" => cfg.top_k = count()?,
                "merge" => cfg.merge = Merge::parse(value)?,
                "kl" => {
                    cfg.use_kl = value
                        .parse()
                        .map_err(|_| fail(format!("kl needs true or false, got {value:?}")))?
                }
                "sensitivity" => cfg.sensitivity = number()?,
                "target" => cfg.target = number()?,
                other => return Err(fail(format!("unknown key {other:?}"))),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_overrides_the_defaults() {
        assert_eq!(MoaConfig::parse_spec("").unwrap(), MoaConfig::default());
        let c = MoaConfig::parse_spec("k=5, base=0.8,spread=0.6,merge=vote,top-k=0,sensitivity=0")
            .unwrap();
        assert_eq!((c.k, c.top_k, c.merge), (5, 0, Merge::ComplementVote));
        assert_eq!((c.base_temperature, c.temperature_spread), (0.8, 0.6));
        assert_eq!(c.sensitivity, 0.0);
        let c =
            MoaConfig::parse_spec("kl=true,merge=uniform,target=2,min-temperature=0.1").unwrap();
        assert!(c.use_kl && c.merge == Merge::Uniform && c.target == 2.0);
    }

    #[test]
    fn bad_specs_and_values_are_named() {
        let err = |s: &str| MoaConfig::parse_spec(s).unwrap_err().to_string();
        assert!(err("k=0").contains("moa.k must be an integer in [1, 32], got 0"));
        assert!(err("k=three").contains("k needs a whole number"));
        assert!(err("base=0").contains("moa.baseTemperature must be a finite number > 0"));
        assert!(err("spread=-1").contains("temperatureSpread"));
        assert!(err("base=inf").contains("baseTemperature"));
        assert!(err("sensitivity=2").contains("sensitivity must be a finite number in [0, 1]"));
        assert!(err("target=0.5").contains("target must be a finite number >= 1"));
        assert!(err("merge=max").contains("deficit, uniform or vote"));
        assert!(err("frob=1").contains("unknown key"));
        assert!(err("k").contains("not key=value"));
        assert!(err("kl=maybe").contains("true or false"));
    }
}
