//! The decode loop's rules, apart from how a forward pass runs: what a request may ask for
//! ([`GenerateOptions`], parsed and validated here for every surface: CLI, host, JS), and the
//! cursor that turns each step's logits into the next token and decides when generation ends
//! ([`Generation`]). The host drives it (prefill, then forward the last token, then `next`);
//! the CLI, the benchmarks and the JS package all go through the host, so there is one loop.
//!
//! The end rules: a token in the model's end-of-text set ends generation with `stop` (it is in
//! the ids, its text is not emitted); `max_tokens`, or the context filling up, ends it with
//! `length`.

use crate::draft::DraftConfig;
use crate::pipeline::{
    ColtraneStage, DecodeConfig, Pipeline, PipelineError, StepContext, StepInfo,
};
use crate::sampler::SamplerConfig;
use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};
use coltrane::{ColtraneConfig, EddyConfig, Preset, ProsodyMode};
use moa::{Merge, MoaConfig};
use serde_json::{Map, Value};
use std::rc::Rc;

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// An end-of-text token.
    Stop,
    /// `max_tokens`, or the context is full.
    Length,
}

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
            ignore_eos: false,
            draft: DraftChoice::Inherit,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptionsError {
    #[error("options must be a JSON object: {0}")]
    NotAnObject(String),
    #[error("unknown option '{0}'")]
    Unknown(String),
    #[error("{name} must be {rule}, got {got}")]
    Invalid {
        name: String,
        rule: &'static str,
        got: String,
    },
    #[error("{0} does not apply with moa: MOA sets its own temperatures and candidates (moa.baseTemperature, moa.topK)")]
    MoaConflict(&'static str),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Draft(#[from] crate::draft::DraftError),
}

const OPTIONS: &[&str] = &[
    "temperature",
    "topK",
    "topP",
    "minP",
    "repeatPenalty",
    "repeatLastN",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
    "moa",
    "coltrane",
    "maxTokens",
    "continue",
    "reusePrefix",
    "ignoreEos",
    "draftMode",
];

const DRAFT_OPTIONS: &[&str] = &["ngram", "maxDraft", "adaptive", "margin"];

const COLTRANE_OPTIONS: &[&str] = &[
    "preset",
    "schema",
    "eddy",
    "maxDepth",
    "fallbackMass",
    "prosody",
];

const MOA_OPTIONS: &[&str] = &[
    "k",
    "baseTemperature",
    "temperatureSpread",
    "minTemperature",
    "topK",
    "merge",
    "useKl",
    "sensitivity",
    "target",
];

/// A value as an error message shows it. JS sends NaN and ±Infinity (which JSON cannot hold)
/// as the strings "NaN", "Infinity", "-Infinity"; they are shown bare.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => s.clone(),
        other => other.to_string(),
    }
}

/// Reads the fields of one JSON object, each checked once, with errors that name the field.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: &'static str,
}

impl<'a> Fields<'a> {
    fn new(v: &'a Value, prefix: &'static str, known: &[&str]) -> Result<Self, OptionsError> {
        let map = v
            .as_object()
            .ok_or_else(|| OptionsError::NotAnObject(shown(v)))?;
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(OptionsError::Unknown(format!("{prefix}{k}")));
        }
        Ok(Fields { map, prefix })
    }

    fn invalid(&self, name: &str, rule: &'static str, v: &Value) -> OptionsError {
        OptionsError::Invalid {
            name: format!("{}{name}", self.prefix),
            rule,
            got: shown(v),
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn number(
        &self,
        name: &str,
        rule: &'static str,
        ok: impl Fn(f64) -> bool,
    ) -> Result<Option<f64>, OptionsError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        match v.as_f64() {
            Some(x) if ok(x) => Ok(Some(x)),
            _ => Err(self.invalid(name, rule, v)),
        }
    }

    /// A whole number ≥ `min`; a decimal string too when `strings` (JS BigInts arrive so).
    fn integer(
        &self,
        name: &str,
        rule: &'static str,
        min: u64,
        strings: bool,
    ) -> Result<Option<u64>, OptionsError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < u64::MAX as f64)
                    .map(|x| x as u64)
            }),
            Value::String(s) if strings => s.parse::<u64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n >= min => Ok(Some(n)),
            _ => Err(self.invalid(name, rule, v)),
        }
    }

    fn boolean(&self, name: &str) -> Result<Option<bool>, OptionsError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.invalid(name, "true or false", v)),
        }
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl GenerateOptions {
    /// Parses the options object every surface sends (camelCase keys, as in the JS API):
    /// `temperature`, `topK`, `topP`, `minP`, `repeatPenalty`, `repeatLastN`,
    /// `presencePenalty`, `frequencyPenalty`, `seed`,
    /// `moa` (true, or an object of `k`, `baseTemperature`, `temperatureSpread`,
    /// `minTemperature`, `topK`, `merge`, `useKl`, `sensitivity`, `target`), `maxTokens`,
    /// `continue`, `reusePrefix`, `ignoreEos`, `draftMode`. Absent or null keys keep their
    /// defaults (greedy, 256 tokens).
    pub fn from_json(text: &str) -> Result<GenerateOptions, OptionsError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| OptionsError::NotAnObject(e.to_string()))?;
        Self::from_value(&v)
    }

    pub fn from_value(v: &Value) -> Result<GenerateOptions, OptionsError> {
        let f = Fields::new(v, "", OPTIONS)?;
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
        let opts = GenerateOptions {
            decode: DecodeConfig {
                sampling,
                moa,
                coltrane,
            },
            max_tokens: f
                .integer("maxTokens", "an integer >= 0", 0, false)?
                .map_or(d.max_tokens, to_usize),
            continue_session: f.boolean("continue")?.unwrap_or(false),
            reuse_prefix: f.boolean("reusePrefix")?.unwrap_or(false),
            ignore_eos: f.boolean("ignoreEos")?.unwrap_or(false),
            draft: match f.get("draftMode") {
                None => DraftChoice::Inherit,
                Some(v) => match draft_from_value(v)? {
                    Some(c) => DraftChoice::On(c),
                    None => DraftChoice::Off,
                },
            },
        };
        if opts.continue_session && opts.reuse_prefix {
            return Err(OptionsError::Invalid {
                name: "reusePrefix".into(),
                rule: "false with continue (reusePrefix takes the whole conversation as the prompt, continue appends to it)",
                got: "true".into(),
            });
        }
        opts.decode.validate()?;
        Ok(opts)
    }
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
                rule: "true, false or { ngram, maxDraft, adaptive, margin }",
                got: shown(other),
            })
        }
    };
    let f = Fields::new(m, "draftMode.", DRAFT_OPTIONS)?;
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
    cfg.validate().map_err(|e| match e {
        crate::draft::DraftError::Invalid { name, rule, got } => OptionsError::Invalid {
            name: format!("draftMode.{name}"),
            rule,
            got,
        },
        other => other.into(),
    })?;
    Ok(Some(cfg))
}

/// `moa: { … }`: keys not given keep MOA's defaults.
pub fn moa_from_value(v: &Value) -> Result<MoaConfig, OptionsError> {
    let f = Fields::new(v, "moa.", MOA_OPTIONS)?;
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
    cfg.validate().map_err(PipelineError::from)?;
    Ok(cfg)
}

/// `coltrane: { preset, schema, eddy, maxDepth, fallbackMass, prosody }`: `preset` is `json`,
/// `balanced` or `json_schema` (`json` with a `schema` is `json_schema`); `eddy` is true or
/// `{ ngram, repeats }`; `prosody` is `off`, `observe` or `bias`.
pub fn coltrane_from_value(v: &Value) -> Result<ColtraneConfig, OptionsError> {
    let f = Fields::new(v, "coltrane.", COLTRANE_OPTIONS)?;
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
            let g = Fields::new(e, "coltrane.eddy.", &["ngram", "repeats"])?;
            let de = EddyConfig::default();
            Some(EddyConfig {
                ngram: g
                    .integer("ngram", "an integer in [1, 64]", 1, false)?
                    .map_or(de.ngram, to_usize),
                repeats: g
                    .integer("repeats", "an integer >= 1", 1, false)?
                    .map_or(de.repeats, to_usize),
            })
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
    cfg.compile().map_err(PipelineError::from)?;
    Ok(cfg)
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the generation has finished: start a new one")]
    Finished,
}

/// One generated token as a caller sees it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Emitted {
    pub id: u32,
    /// The text this token completes: '' while a UTF-8 character is incomplete and for an
    /// end-of-text token; on the last token, also whatever was held back.
    pub text: String,
    pub step: StepInfo,
    /// Set on the last token of the generation.
    pub finish_reason: Option<FinishReason>,
    /// On the last token, when a constraint ran: what it did over the generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<coltrane::Metrics>,
}

/// A generation in progress: the pipeline that picks each token, the streaming text decoder,
/// and the end rules.
pub struct Generation {
    pipeline: Pipeline,
    clock: Option<fn() -> f64>,
    stream: StreamDecoder<Rc<Tokenizer>>,
    eos_ids: Vec<u32>,
    ignore_eos: bool,
    budget: usize,
    produced: usize,
    finished: Option<FinishReason>,
}

impl Generation {
    /// A generation of at most `min(max_tokens, context_room)` tokens; `context_room` is how
    /// many positions the KV cache has left once the prompt is in.
    pub fn new(
        opts: &GenerateOptions,
        tokenizer: Rc<Tokenizer>,
        eos_ids: &[u32],
        context_room: usize,
    ) -> Result<Generation, PipelineError> {
        let budget = opts.max_tokens.min(context_room);
        let mut pipeline = Pipeline::new(&opts.decode)?;
        if let Some(c) = &opts.decode.coltrane {
            // Last before the pick, so the fallback weighs the logits the picker will see.
            let vocab = tokenizer.constraint_vocab(eos_ids)?;
            pipeline.push_stage(Box::new(ColtraneStage::new(vocab, c.clone())?));
        }
        Ok(Generation {
            pipeline,
            clock: None,
            stream: StreamDecoder::new(tokenizer),
            eos_ids: eos_ids.to_vec(),
            ignore_eos: opts.ignore_eos,
            budget,
            produced: 0,
            finished: (budget == 0).then_some(FinishReason::Length),
        })
    }

    /// Tells the pipeline about tokens already in the context (the prompt, earlier turns), so
    /// stages such as the repetition penalty see them.
    pub fn accept_context(&mut self, tokens: &[u32]) {
        for &t in tokens {
            self.pipeline.accept_context(t);
        }
    }

    /// A millisecond clock for the stages that time themselves (the constraint's mask time).
    pub fn set_clock(&mut self, clock: fn() -> f64) {
        self.clock = Some(clock);
    }

    /// The constraint's metrics so far, when one is set.
    pub fn constraint_metrics(&self) -> Option<coltrane::Metrics> {
        self.pipeline.constraint_metrics()
    }

    pub fn pipeline(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// The most tokens this generation will produce.
    pub fn budget(&self) -> usize {
        self.budget
    }

    pub fn produced(&self) -> usize {
        self.produced
    }

    pub fn finished(&self) -> Option<FinishReason> {
        self.finished
    }

    /// Whether, after the forward pass about to run and the pick from its logits, another
    /// forward pass will follow (unless an end-of-text token comes): the host prefetches for it.
    pub fn more_follows(&self) -> bool {
        self.produced + 2 <= self.budget
    }

    /// Tokens this generation may still produce.
    pub fn remaining(&self) -> usize {
        self.budget - self.produced
    }

    /// Cuts a speculative draft to what could be kept: at most `remaining() - 1` tokens (the
    /// pick after the last draft token needs a step of the budget too), nothing past an
    /// end-of-text token, and only what every pipeline stage allows (a constraint's mask).
    pub fn trim_draft(&mut self, draft: &mut Vec<u32>) {
        draft.truncate(self.remaining().saturating_sub(1));
        if !self.ignore_eos {
            if let Some(i) = draft.iter().position(|t| self.eos_ids.contains(t)) {
                draft.truncate(i + 1);
            }
        }
        let allowed = self.pipeline.allowed_prefix(draft, Some(self.remaining()));
        draft.truncate(allowed);
    }

    /// Picks tokens from a verify pass. `rows` holds one row of logits per position of
    /// `[pending, draft…]`: row j is what the model predicts after `draft[..j]`. Row 0 is
    /// picked from exactly as [`Generation::next`] would; while the pick equals the draft token
    /// at that place (and `margin` τ, when given, is met by the row: top-1 − top-2 ≥ 2τ) and
    /// the generation goes on, the next row is picked from too. Every token but the last equals
    /// its draft token.
    ///
    /// This is the speculative-sampling rule for a deterministic draft d, run on the same random
    /// numbers as plain decoding: each pick is one draw from the row's distribution p, so d is
    /// kept with probability p(d), and a token that is not d is a draw from p with d removed
    /// and renormalized. The tokens, and their distribution, are those of plain decoding with
    /// the same seed (the rows being bit-identical to step-by-step ones); the pipeline never
    /// sees a rejected token, so there is nothing to roll back.
    ///
    /// A row whose pick fails (no candidates) ends the list early; on row 0 it is the error.
    pub fn verify(
        &mut self,
        rows: &mut [f32],
        draft: &[u32],
        margin: Option<f32>,
    ) -> Result<Vec<Emitted>, GenerateError> {
        let vocab = rows.len() / (draft.len() + 1);
        let mut out: Vec<Emitted> = Vec::with_capacity(draft.len() + 1);
        for (j, row) in rows.chunks_exact_mut(vocab).enumerate() {
            let e = match self.next(row) {
                Ok(e) => e,
                Err(e) if out.is_empty() => return Err(e),
                // Plain decoding meets the same failure at this row on the next step.
                Err(_) => break,
            };
            let go_on = e.finish_reason.is_none()
                && draft.get(j) == Some(&e.id)
                && margin.is_none_or(|tau| top_margin(row) >= 2.0 * tau);
            out.push(e);
            if !go_on {
                break;
            }
        }
        Ok(out)
    }

    /// Picks the next token from `logits` (the stages may change them) and applies the end
    /// rules.
    pub fn next(&mut self, logits: &mut [f32]) -> Result<Emitted, GenerateError> {
        if self.finished.is_some() {
            return Err(GenerateError::Finished);
        }
        let ctx = StepContext {
            remaining: Some(self.budget - self.produced),
            clock: self.clock,
        };
        let step = self.pipeline.sample_in(logits, &ctx)?;
        let id = step.token;
        self.produced += 1;
        let stop = !self.ignore_eos && self.eos_ids.contains(&id);
        let mut text = match stop {
            true => String::new(),
            false => self.stream.push(id)?,
        };
        self.finished = match (stop, self.produced >= self.budget) {
            (true, _) => Some(FinishReason::Stop),
            (false, true) => Some(FinishReason::Length),
            (false, false) => None,
        };
        if self.finished.is_some() {
            text.push_str(&self.stream.finish());
        }
        Ok(Emitted {
            id,
            text,
            step,
            finish_reason: self.finished,
            constraint: self
                .finished
                .and_then(|_| self.pipeline.constraint_metrics()),
        })
    }
}

/// The largest finite logit minus the second largest (infinite with fewer than two).
fn top_margin(logits: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &l in logits.iter().filter(|l| l.is_finite()) {
        if l > a {
            b = a;
            a = l;
        } else if l > b {
            b = l;
        }
    }
    a - b
}

#[cfg(test)]
mod tests;
