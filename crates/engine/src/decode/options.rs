//! What a generation may ask for: [`GenerateOptions`], parsed and validated here for every
//! surface (the JS package sends its options object as JSON; the CLI builds the same struct from
//! its flags).

use crate::draft::DraftConfig;
use crate::health::{HealthConfig, HealthPolicy, Thresholds};
use crate::options::{shown, to_usize, Fields, OptionsError};
use crate::pipeline::{DecodeConfig, PipelineError};
use crate::sampler::SamplerConfig;
use coltrane::{ColtraneConfig, EddyConfig, Preset, ProsodyMode};
use moa::{Merge, MoaConfig};
use serde_json::Value;

/// What one generation is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    pub decode: DecodeConfig,
    pub max_tokens: usize,
    /// Append to the conversation instead of starting afresh.
    pub continue_session: bool,
    /// The prompt is the whole conversation: a host that still holds a prefix of it (from an
    /// earlier generation) prefills only the rest.
    pub reuse_prefix: bool,
    /// The id of a host's explicit prefill window whose tokens start the prompt (the prompt is
    /// the whole conversation): its KV is copied in and only the rest is prefilled. Takes
    /// precedence over `reuse_prefix`.
    pub prefill_window: Option<String>,
    /// Keep going past end-of-text tokens (benchmarks need exactly `max_tokens`).
    pub ignore_eos: bool,
    /// Speculative decoding for this generation.
    pub draft: DraftChoice,
}

/// Whether a generation drafts: as the host was opened, not at all, or with these settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum DraftChoice {
    #[default]
    Inherit,
    Off,
    On(DraftConfig),
}

impl DraftChoice {
    /// The settings in force, given the host's default.
    pub fn resolve(&self, default: Option<&DraftConfig>) -> Option<DraftConfig> {
        match self {
            DraftChoice::Inherit => default.cloned(),
            DraftChoice::Off => None,
            DraftChoice::On(c) => Some(c.clone()),
        }
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            decode: DecodeConfig::default(),
            max_tokens: 256,
            continue_session: false,
            reuse_prefix: false,
            prefill_window: None,
            ignore_eos: false,
            draft: DraftChoice::Inherit,
        }
    }
}

impl GenerateOptions {
    /// Parses the options object every surface sends (camelCase keys, as in the JS API):
    /// `temperature`, `topK`, `topP`, `minP`, `repeatPenalty`, `repeatLastN`,
    /// `presencePenalty`, `frequencyPenalty`, `seed`,
    /// `moa` (true, or an object of `k`, `baseTemperature`, `temperatureSpread`,
    /// `minTemperature`, `topK`, `merge`, `useKl`, `sensitivity`, `target`), `maxTokens`,
    /// `continue`, `reusePrefix`, `prefillWindow`, `ignoreEos`, `draftMode`. Absent or null keys keep their
    /// defaults (greedy, 256 tokens).
    pub fn from_json(text: &str) -> Result<GenerateOptions, OptionsError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| OptionsError::NotAnObject(e.to_string()))?;
        Self::from_value(&v)
    }

    pub fn from_value(v: &Value) -> Result<GenerateOptions, OptionsError> {
        let f = Fields::new(v, "")?;
        let d = GenerateOptions::default();
        let s = SamplerConfig::default();
        let sampling = SamplerConfig {
            temperature: f
                .number("temperature", "a finite number >= 0 (0 is greedy)", |x| {
                    x.is_finite() && x >= 0.0
                })?
                .map_or(s.temperature, |x| x as f32),
            top_k: f
                .integer("topK", "an integer >= 0 (0 disables it)", 0, false)?
                .map_or(s.top_k, to_usize),
            top_p: f
                .number("topP", "a number in (0, 1]", |x| x > 0.0 && x <= 1.0)?
                .map_or(s.top_p, |x| x as f32),
            min_p: f
                .number("minP", "a number in [0, 1]", |x| (0.0..=1.0).contains(&x))?
                .map_or(s.min_p, |x| x as f32),
            repeat_penalty: f
                .number(
                    "repeatPenalty",
                    "a finite number > 0 (1 disables it)",
                    |x| x.is_finite() && x > 0.0 && (x as f32).is_finite(),
                )?
                .map_or(s.repeat_penalty, |x| x as f32),
            repeat_last_n: f
                .integer("repeatLastN", "an integer >= 0", 0, false)?
                .map_or(s.repeat_last_n, to_usize),
            presence_penalty: f
                .number("presencePenalty", "a number in [-2, 2]", |x| {
                    (-2.0..=2.0).contains(&x)
                })?
                .map_or(s.presence_penalty, |x| x as f32),
            frequency_penalty: f
                .number("frequencyPenalty", "a number in [-2, 2]", |x| {
                    (-2.0..=2.0).contains(&x)
                })?
                .map_or(s.frequency_penalty, |x| x as f32),
            seed: f
                .integer("seed", "an integer in [0, 2^64)", 0, true)?
                .unwrap_or(s.seed),
        };
        let moa = match f.get("moa") {
            None | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(MoaConfig::default()),
            Some(m @ Value::Object(_)) => Some(moa_from_value(m)?),
            Some(other) => return Err(f.invalid("moa", "true, false or an object", other)),
        };
        if moa.is_some() {
            for name in ["temperature", "topK", "topP", "minP"] {
                if f.get(name).is_some() {
                    return Err(OptionsError::MoaConflict(name));
                }
            }
        }
        let coltrane = match f.get("coltrane") {
            None | Some(Value::Bool(false)) => None,
            Some(c @ Value::Object(_)) => Some(coltrane_from_value(c)?),
            Some(other) => return Err(f.invalid("coltrane", "false or an object", other)),
        };
        let health = match f.get("health") {
            None | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(HealthConfig::default()),
            Some(h @ Value::Object(_)) => Some(health_from_value(h)?),
            Some(other) => return Err(f.invalid("health", "true, false or an object", other)),
        };
        let opts = GenerateOptions {
            decode: DecodeConfig {
                sampling,
                moa,
                coltrane,
                health,
            },
            max_tokens: f
                .integer("maxTokens", "an integer >= 0", 0, false)?
                .map_or(d.max_tokens, to_usize),
            continue_session: f.boolean("continue")?.unwrap_or(false),
            reuse_prefix: f.boolean("reusePrefix")?.unwrap_or(false),
            prefill_window: match f.get("prefillWindow") {
                None => None,
                Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
                Some(other) => {
                    return Err(f.invalid(
                        "prefillWindow",
                        "a window id (a non-empty string)",
                        other,
                    ))
                }
            },
            ignore_eos: f.boolean("ignoreEos")?.unwrap_or(false),
            draft: match f.get("draftMode") {
                None => DraftChoice::Inherit,
                Some(v) => match draft_from_value(v)? {
                    Some(c) => DraftChoice::On(c),
                    None => DraftChoice::Off,
                },
            },
        };
        f.finish()?;
        if opts.continue_session && opts.reuse_prefix {
            return Err(OptionsError::Invalid {
                name: "reusePrefix".into(),
                rule: "false with continue (reusePrefix takes the whole conversation as the prompt, continue appends to it)".into(),
                got: "true".into(),
            });
        }
        if opts.continue_session && opts.prefill_window.is_some() {
            return Err(OptionsError::Invalid {
                name: "prefillWindow".into(),
                rule: "absent with continue (a prefill window starts the whole conversation, continue appends to it)".into(),
                got: shown(&Value::String(opts.prefill_window.clone().unwrap_or_default())),
            });
        }
        opts.decode.validate()?;
        Ok(opts)
    }
}

/// `health`: `{ window, thresholds: { preAlpha, preEntropySlope, preRepetition,
/// collapseRepeats, collapseEntropy }, policy: { capDrafts, moaValve, eddy } }`, each key
/// optional (docs/health.md).
pub fn health_from_value(v: &Value) -> Result<HealthConfig, OptionsError> {
    let f = Fields::new(v, "health.")?;
    let d = HealthConfig::default();
    let window = f.integer_in("window", 16, 1024)?.map_or(d.window, to_usize);
    let thresholds = match f.get("thresholds") {
        None => d.thresholds,
        Some(t) => {
            let g = Fields::new(t, "health.thresholds.")?;
            let dt = Thresholds::default();
            let finite = |name, default: f64| -> Result<f64, OptionsError> {
                Ok(g.number(name, "a finite number", f64::is_finite)?
                    .unwrap_or(default))
            };
            let t = Thresholds {
                pre_alpha: finite("preAlpha", dt.pre_alpha)?,
                pre_entropy_slope: finite("preEntropySlope", dt.pre_entropy_slope)?,
                pre_repetition: finite("preRepetition", dt.pre_repetition)?,
                collapse_repeats: g
                    .integer_in("collapseRepeats", 2, 16)?
                    .map_or(dt.collapse_repeats, to_usize),
                collapse_entropy: finite("collapseEntropy", dt.collapse_entropy)?,
            };
            g.finish()?;
            t
        }
    };
    let policy = match f.get("policy") {
        None => d.policy,
        Some(p) => {
            let g = Fields::new(p, "health.policy.")?;
            let dp = HealthPolicy::default();
            let p = HealthPolicy {
                cap_drafts: g.boolean("capDrafts")?.unwrap_or(dp.cap_drafts),
                moa_valve: g.boolean("moaValve")?.unwrap_or(dp.moa_valve),
                eddy: g.boolean("eddy")?.unwrap_or(dp.eddy),
            };
            g.finish()?;
            p
        }
    };
    f.finish()?;
    Ok(HealthConfig {
        window,
        thresholds,
        policy,
    })
}

/// `draftMode`: `true` (the defaults), `false` (None), or `{ ngram, maxDraft, adaptive,
/// margin }` (keys not given keep their defaults).
pub fn draft_from_value(v: &Value) -> Result<Option<DraftConfig>, OptionsError> {
    let m = match v {
        Value::Bool(false) => return Ok(None),
        Value::Bool(true) => return Ok(Some(DraftConfig::default())),
        Value::Object(_) => v,
        other => {
            return Err(OptionsError::Invalid {
                name: "draftMode".into(),
                rule: "true, false or { ngram, maxDraft, adaptive, margin }".into(),
                got: shown(other),
            })
        }
    };
    let f = Fields::new(m, "draftMode.")?;
    let d = DraftConfig::default();
    let cfg = DraftConfig {
        ngram: f
            .integer("ngram", "an integer in [1, 8]", 1, false)?
            .map_or(d.ngram, to_usize),
        max_draft: f
            .integer("maxDraft", "an integer in [1, 32]", 1, false)?
            .map_or(d.max_draft, to_usize),
        adaptive: f.boolean("adaptive")?.unwrap_or(d.adaptive),
        margin: f
            .number("margin", "a finite number >= 0", |x| {
                x.is_finite() && x >= 0.0 && (x as f32).is_finite()
            })?
            .map(|x| x as f32),
    };
    f.finish()?;
    cfg.validate().map_err(|e| match e {
        crate::draft::DraftError::Invalid { name, rule, got } => OptionsError::Invalid {
            name: format!("draftMode.{name}"),
            rule: rule.into(),
            got,
        },
        other => other.into(),
    })?;
    Ok(Some(cfg))
}

/// `moa: { … }`: keys not given keep MOA's defaults.
pub fn moa_from_value(v: &Value) -> Result<MoaConfig, OptionsError> {
    let f = Fields::new(v, "moa.")?;
    let d = MoaConfig::default();
    let any = |_: f64| true;
    let number = "a number";
    let cfg = MoaConfig {
        k: f.integer("k", "an integer in [1, 32]", 1, false)?
            .map_or(d.k, to_usize),
        base_temperature: f
            .number("baseTemperature", number, any)?
            .unwrap_or(d.base_temperature),
        temperature_spread: f
            .number("temperatureSpread", number, any)?
            .unwrap_or(d.temperature_spread),
        min_temperature: f
            .number("minTemperature", number, any)?
            .unwrap_or(d.min_temperature),
        top_k: f
            .integer(
                "topK",
                "an integer >= 0 (0 is the whole vocabulary)",
                0,
                false,
            )?
            .map_or(d.top_k, to_usize),
        merge: match f.get("merge") {
            None => d.merge,
            Some(Value::String(s)) => Merge::parse(s).map_err(PipelineError::from)?,
            Some(other) => return Err(f.invalid("merge", "deficit, uniform or vote", other)),
        },
        use_kl: f.boolean("useKl")?.unwrap_or(d.use_kl),
        sensitivity: f
            .number("sensitivity", number, any)?
            .unwrap_or(d.sensitivity),
        target: f.number("target", number, any)?.unwrap_or(d.target),
    };
    f.finish()?;
    cfg.validate().map_err(PipelineError::from)?;
    Ok(cfg)
}

/// `coltrane: { preset, schema, eddy, maxDepth, fallbackMass, prosody }`: `preset` is `json`,
/// `balanced` or `json_schema` (`json` with a `schema` is `json_schema`); `eddy` is true or
/// `{ ngram, repeats }`; `prosody` is `off`, `observe` or `bias`.
pub fn coltrane_from_value(v: &Value) -> Result<ColtraneConfig, OptionsError> {
    let f = Fields::new(v, "coltrane.")?;
    let d = ColtraneConfig::default();
    let schema = f.get("schema");
    let name = match f.get("preset") {
        None => None,
        Some(Value::String(p)) => Some(p.as_str()),
        Some(other) => return Err(f.invalid("preset", "json, balanced or json_schema", other)),
    };
    let preset = match (name, schema) {
        (None, None) => None,
        (None | Some("json" | "json_schema"), Some(s)) => Some(Preset::JsonSchema(s.clone())),
        (Some("json"), None) => Some(Preset::Json),
        (Some("balanced"), None) => Some(Preset::Balanced),
        (Some("balanced"), Some(s)) => {
            return Err(f.invalid("schema", "absent with preset balanced (it is for JSON)", s))
        }
        (Some("json_schema"), None) => {
            return Err(f.invalid(
                "schema",
                "a JSON Schema when preset is json_schema",
                &Value::Null,
            ))
        }
        (Some(p), _) => {
            let got = Value::String(p.to_string());
            return Err(f.invalid("preset", "json, balanced or json_schema", &got));
        }
    };
    let eddy = match f.get("eddy") {
        None | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(EddyConfig::default()),
        Some(e @ Value::Object(_)) => {
            let g = Fields::new(e, "coltrane.eddy.")?;
            let de = EddyConfig::default();
            let eddy = Some(EddyConfig {
                ngram: g
                    .integer("ngram", "an integer in [1, 64]", 1, false)?
                    .map_or(de.ngram, to_usize),
                repeats: g
                    .integer("repeats", "an integer >= 1", 1, false)?
                    .map_or(de.repeats, to_usize),
            });
            g.finish()?;
            eddy
        }
        Some(other) => return Err(f.invalid("eddy", "true, false or { ngram, repeats }", other)),
    };
    let prosody = match f.get("prosody") {
        None => d.prosody,
        Some(p) => p
            .as_str()
            .and_then(ProsodyMode::parse)
            .ok_or_else(|| f.invalid("prosody", "off, observe or bias", p))?,
    };
    let cfg = ColtraneConfig {
        preset,
        eddy,
        max_depth: f
            .integer("maxDepth", "an integer in [1, 64]", 1, false)?
            .map_or(d.max_depth, to_usize),
        fallback_mass: f
            .number("fallbackMass", "a number in [0, 1]", |x| {
                (0.0..=1.0).contains(&x)
            })?
            .unwrap_or(d.fallback_mass),
        prosody,
    };
    f.finish()?;
    cfg.compile().map_err(PipelineError::from)?;
    Ok(cfg)
}
