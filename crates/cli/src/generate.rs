//! `knot generate`: text from a prompt, through the host's decode loop (the same one the wasm
//! package runs), reading the file with positional reads.

use clap::Args;
use coltrane::{ColtraneConfig, EddyConfig, Preset, ProsodyMode};
use engine::chat::ChatMessage;
use engine::decode::{DraftChoice, GenerateOptions};
use engine::draft::DraftConfig;
use engine::health::{HealthConfig, HealthPolicy};
use engine::{DecodeConfig, SamplerConfig};
use futures::executor::block_on;
use host::{FileSource, Host, HostOptions};
use moa::MoaConfig;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Args)]
pub struct GenerateArgs {
    file: PathBuf,
    #[arg(
        long,
        conflicts_with_all = ["tokens", "messages"],
        required_unless_present_any = ["tokens", "messages"]
    )]
    prompt: Option<String>,
    /// A JSON file holding chat messages `[{ "role": …, "content": … }, …]`, rendered with the
    /// model's chat template (a whole conversation, where --chat takes one user message).
    #[arg(long, value_name = "FILE.json", conflicts_with = "tokens")]
    messages: Option<PathBuf>,
    #[arg(long, value_delimiter = ',')]
    tokens: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(short = 'n', default_value_t = 128)]
    n: usize,
    #[command(flatten)]
    decode: DecodeArgs,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// Print one JSON object (ids, text, speeds, per-step metadata) instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Speculative decoding (docs/speculative.md): drafts by prompt lookup, verified k at a
    /// time. `lookup` or `lookup:n=3,k=8,adaptive=1,margin=0` (n-gram size, most draft tokens,
    /// adaptive draft length, margin rule τ). The tokens are the same as without it.
    #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "lookup")]
    draft: Option<String>,
}

/// How tokens are picked: sampling flags, or MOA.
#[derive(Args)]
pub struct DecodeArgs {
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// OpenAI's presence penalty in [-2, 2]: subtracted once from every token generated so far.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    presence_penalty: f32,
    /// OpenAI's frequency penalty in [-2, 2]: subtracted once per time a token was generated.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    frequency_penalty: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// MOA ensemble sampling (docs/moa.md), with its defaults or a spec such as
    /// k=3,base=0.7,spread=0.4,merge=deficit|uniform|vote,top-k=40,sensitivity=0.1
    /// (also min-temperature=, kl=true, target=). Replaces --temperature/--top-k/--top-p/--min-p.
    #[arg(
        long,
        value_name = "SPEC",
        num_args = 0..=1,
        default_missing_value = "",
        conflicts_with_all = ["temperature", "top_k", "top_p", "min_p"],
    )]
    moa: Option<String>,
    #[command(flatten)]
    constraint: ConstraintArgs,
    /// The decode-health monitor (docs/health.md): `on` (its policy acting), `observe` (no
    /// actions), or a spec such as window=64,cap-drafts=0,moa-valve=1,eddy=1. Each step's
    /// report and the generation's metrics go into --json.
    #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "on")]
    health: Option<String>,
}

/// `--health`'s spec.
fn health_spec(spec: &str) -> Result<HealthConfig> {
    let mut cfg = HealthConfig::default();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        let flag = || match value {
            "1" | "true" | "on" => Ok(true),
            "0" | "false" | "off" => Ok(false),
            v => Err(format!("--health {key} must be 0 or 1, got {v:?}")),
        };
        match key {
            "on" if value.is_empty() => {}
            "observe" if value.is_empty() => cfg.policy = HealthPolicy::OFF,
            "window" => {
                cfg.window = value
                    .parse()
                    .map_err(|_| format!("--health window must be an integer, got {value:?}"))?
            }
            "cap-drafts" => cfg.policy.cap_drafts = flag()?,
            "moa-valve" => cfg.policy.moa_valve = flag()?,
            "eddy" => cfg.policy.eddy = flag()?,
            _ => {
                return Err(format!(
                    "--health takes on, observe, window=N, cap-drafts=0|1, moa-valve=0|1, eddy=0|1; got {part:?}"
                )
                .into())
            }
        }
    }
    cfg.validate()?;
    Ok(cfg)
}

/// COLTRANE's token mask (docs/coltrane.md).
#[derive(Args, Clone, Default)]
pub struct ConstraintArgs {
    /// json (one JSON value), balanced (brackets and quotes), or schema:FILE.json (a JSON
    /// Schema).
    #[arg(long, value_name = "PRESET")]
    pub constraint: Option<String>,
    /// Break repetition loops: ban the token that would continue one.
    #[arg(long)]
    pub eddy: bool,
    /// Deepest bracket nesting `balanced` allows.
    #[arg(long, value_name = "N")]
    pub max_depth: Option<usize>,
    /// Relax the soft rules when the allowed tokens hold less of the model's probability.
    #[arg(long, value_name = "MASS")]
    pub fallback_mass: Option<f64>,
    /// Near the token limit, lean toward ending the sentence: off, observe or bias.
    #[arg(long, value_name = "MODE")]
    pub prosody: Option<String>,
}

impl ConstraintArgs {
    /// The constraint these flags ask for (None when none is set).
    pub fn config(&self) -> Result<Option<ColtraneConfig>> {
        let any = self.constraint.is_some()
            || self.eddy
            || self.prosody.is_some()
            || self.max_depth.is_some()
            || self.fallback_mass.is_some();
        if !any {
            return Ok(None);
        }
        let d = ColtraneConfig::default();
        let preset = match self.constraint.as_deref() {
            None => None,
            Some("json") => Some(Preset::Json),
            Some("balanced") => Some(Preset::Balanced),
            Some(spec) => match spec.strip_prefix("schema:") {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .map_err(|e| format!("cannot read the schema {path}: {e}"))?;
                    let schema: serde_json::Value = serde_json::from_str(&text)
                        .map_err(|e| format!("the schema {path} is not JSON: {e}"))?;
                    Some(Preset::JsonSchema(schema))
                }
                None => {
                    return Err(format!(
                        "--constraint must be json, balanced or schema:FILE.json, got {spec:?}"
                    )
                    .into())
                }
            },
        };
        let prosody = match self.prosody.as_deref() {
            None => d.prosody,
            Some(p) => ProsodyMode::parse(p)
                .ok_or_else(|| format!("--prosody must be off, observe or bias, got {p:?}"))?,
        };
        let cfg = ColtraneConfig {
            preset,
            eddy: self.eddy.then(EddyConfig::default),
            max_depth: self.max_depth.unwrap_or(d.max_depth),
            fallback_mass: self.fallback_mass.unwrap_or(d.fallback_mass),
            prosody,
        };
        cfg.compile()?;
        Ok(Some(cfg))
    }
}

impl DecodeArgs {
    pub fn config(&self) -> Result<DecodeConfig> {
        let cfg = DecodeConfig {
            sampling: SamplerConfig {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repeat_penalty: self.repeat_penalty,
                presence_penalty: self.presence_penalty,
                frequency_penalty: self.frequency_penalty,
                seed: self.seed,
                ..SamplerConfig::default()
            },
            moa: self.moa.as_deref().map(MoaConfig::parse_spec).transpose()?,
            coltrane: self.constraint.config()?,
            health: self.health.as_deref().map(health_spec).transpose()?,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Opens a knot file through the host, every layer kept once read, the whole context allowed.
pub fn open_host(path: &Path) -> Result<Host> {
    open_host_with(path, usize::MAX)
}

/// [`open_host`] with at most `lru_capacity` layers cached.
pub fn open_host_with(path: &Path, lru_capacity: usize) -> Result<Host> {
    let source =
        FileSource::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let opts = HostOptions {
        lru_capacity,
        max_context: usize::MAX,
        ..HostOptions::default()
    };
    block_on(Host::open(Rc::new(source), opts))
        .map_err(|e| format!("{}: {e}", path.display()).into())
}

pub fn run(a: &GenerateArgs) -> Result<()> {
    let decode = a.decode.config()?;
    let mut host = open_host(&a.file)?;
    let tok = host.tokenizer().clone();
    let prompt_ids = match (&a.tokens, &a.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, None) if a.messages.is_some() => {
            let path = a.messages.as_deref().unwrap_or(Path::new(""));
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let messages: Vec<ChatMessage> = serde_json::from_str(&text).map_err(|e| {
                format!(
                    "{}: messages must be [{{ \"role\", \"content\" }}]: {e}",
                    path.display()
                )
            })?;
            tok.encode(&host.chat_prompt(&messages)?)?
        }
        (None, Some(text)) if a.chat => {
            tok.encode(&host.chat_prompt(&[ChatMessage::new("user", text.as_str())])?)?
        }
        (None, Some(text)) => tok.encode_with_bos(text)?,
        (None, None) => return Err("give --prompt, --messages or --tokens".into()),
    };
    let draft = a
        .draft
        .as_deref()
        .map(DraftConfig::parse_spec)
        .transpose()?;
    let opts = GenerateOptions {
        decode,
        max_tokens: a.n,
        draft: draft.map_or(DraftChoice::Off, DraftChoice::On),
        ..GenerateOptions::default()
    };
    let (context, context_room) = (
        host.context_length(),
        host.context_length().saturating_sub(prompt_ids.len()),
    );
    let mut out = std::io::stdout().lock();
    let mut written = Ok(());
    let (json, mut first) = (a.json, true);
    let generated = block_on(host.generate(&prompt_ids, &opts, &mut |e| {
        // Said once the prompt was taken (a prompt refused gets its error alone).
        if std::mem::take(&mut first) && context_room < a.n {
            eprintln!(
                "note: generating at most {context_room} tokens: the context holds {context}"
            );
        }
        if !json {
            written = write!(out, "{}", e.text).and_then(|()| out.flush());
        }
        written.is_ok()
    }))?;
    written?;
    let r = &generated.report;
    let prefill_tok_s = rate(r.prefill_tokens as usize, r.prefill_ms);
    // The first token comes from the prefill's logits; each later one costs a forward pass.
    let decode_tok_s = rate(
        generated.ids.len().saturating_sub(1),
        r.token_ms.iter().sum::<f64>(),
    );
    let (ids, text, steps, finish) = (
        &generated.ids,
        &generated.text,
        &generated.steps,
        generated.finish_reason,
    );
    if a.json {
        let v = serde_json::json!({
            "prompt_ids": prompt_ids,
            "ids": ids,
            "text": text,
            "finish_reason": finish,
            "prefill_tok_s": prefill_tok_s,
            "decode_tok_s": decode_tok_s,
            "steps": steps,
            "constraint": generated.constraint,
            "health": generated.health,
            "decode": r.decode,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out)?;
        eprintln!(
            "[{} prompt tokens, {prefill_tok_s:.1} tok/s prefill; {} generated, {decode_tok_s:.1} tok/s decode]",
            prompt_ids.len(),
            ids.len(),
        );
        let d = &r.decode;
        if a.draft.is_some() {
            eprintln!(
                "[speculation: {} verify passes, {} of {} draft tokens kept, {:.2} tokens per forward pass]",
                d.verify_passes, d.accepted, d.drafted, d.tokens_per_pass
            );
        }
    }
    Ok(())
}

/// Tokens per second, 0 when nothing was timed.
pub fn rate(tokens: usize, ms: f64) -> f64 {
    if ms > 0.0 && tokens > 0 {
        tokens as f64 / (ms / 1000.0)
    } else {
        0.0
    }
}
