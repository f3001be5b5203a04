//! `knot`: convert models to knot files, inspect them, and run them.

use clap::{Args, Parser, Subcommand};
use engine::sampler::{Sampler, SamplerConfig};
use engine::tokenizer::StreamDecoder;
use engine::Session;
use knot_cli::convert::{ConvertOptions, TargetDType};
use knot_cli::loaded::LoadedKnot;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(name = "knot", version, about = "LLM inference from knot files")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a GGUF file or a HuggingFace directory to a knot file.
    Convert {
        input: PathBuf,
        output: PathBuf,
        /// Storage format of the weight matrices (`keep` copies them unchanged).
        /// keep, f32, f16, q8_0, q4_0 or q4_k.
        #[arg(long, default_value = "keep")]
        dtype: TargetDType,
    },
    /// Show the header, config, tensor table and spans of a knot file.
    Inspect {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Generate text.
    Generate(GenerateArgs),
    /// Teacher-forced logits: the top-K ids and logits at every position.
    Logits {
        file: PathBuf,
        #[arg(long, value_delimiter = ',', required = true)]
        tokens: Vec<u32>,
        #[arg(long, default_value_t = 8)]
        top: usize,
        #[arg(long)]
        json: bool,
    },
    /// Text to token ids (no special tokens added).
    Tokenize {
        file: PathBuf,
        #[arg(long)]
        text: String,
        #[arg(long)]
        json: bool,
    },
    /// Token ids to text.
    Detokenize {
        file: PathBuf,
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<u32>,
    },
    /// Carrier readings of an image: per-observer resolution/evolution and copy-index heatmaps.
    Carrier(knot_cli::carrier_cmd::CarrierArgs),
    /// Prefill and decode speed (median of runs) and peak memory.
    Bench {
        file: PathBuf,
        /// Tokens to decode per run.
        #[arg(short = 'n', default_value_t = 64)]
        n: usize,
        /// Prompt length for the prefill measurement.
        #[arg(long, default_value_t = 128)]
        prompt_len: usize,
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct GenerateArgs {
    file: PathBuf,
    #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
    prompt: Option<String>,
    #[arg(long, value_delimiter = ',')]
    tokens: Option<Vec<u32>>,
    /// Tokens to generate.
    #[arg(short = 'n', default_value_t = 128)]
    n: usize,
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
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // A panic is a bug, but the user still gets one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error: {info}");
    }));
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&*e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping causes already quoted by their parent.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !msg.contains(&text) {
            msg = format!("{msg}: {text}");
        }
        cause = c.source();
    }
    msg
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Convert {
            input,
            output,
            dtype,
        } => convert(input, output, dtype),
        Command::Inspect { file, json } => knot_cli::inspect::run(&file, json),
        Command::Generate(args) => generate(args),
        Command::Logits {
            file,
            tokens,
            top,
            json,
        } => logits(file, tokens, top, json),
        Command::Tokenize { file, text, json } => {
            let ids = LoadedKnot::open(&file)?.tokenizer()?.encode(&text);
            if json {
                println!("{}", serde_json::json!({ "ids": ids }));
            } else {
                println!(
                    "{}",
                    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                );
            }
            Ok(())
        }
        Command::Detokenize { file, ids } => {
            println!("{}", LoadedKnot::open(&file)?.tokenizer()?.decode(&ids)?);
            Ok(())
        }
        Command::Carrier(args) => knot_cli::carrier_cmd::run(&args),
        Command::Bench {
            file,
            n,
            prompt_len,
            runs,
            json,
        } => knot_cli::bench::run(&file, n, prompt_len, runs, json),
    }
}

fn convert(input: PathBuf, output: PathBuf, dtype: TargetDType) -> Result<()> {
    let opts = ConvertOptions { dtype, name: None };
    let bar = knot_cli::progress::bar_if_terminal();
    let progress = knot_cli::progress::callback(bar.as_ref());
    let summary = if input.is_dir() {
        knot_cli::convert::hf_to_knot(&input, &output, &opts, &progress)?
    } else {
        knot_cli::convert::gguf_to_knot(&input, &output, &opts, &progress)?
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    eprintln!(
        "wrote {}: {} ({}), {} layers, {} tensors ({} re-encoded), {:.1} MiB",
        output.display(),
        summary.name,
        summary.architecture,
        summary.n_layers,
        summary.n_tensors,
        summary.converted_tensors,
        summary.file_len as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}

fn generate(a: GenerateArgs) -> Result<()> {
    let loaded = LoadedKnot::open(&a.file)?;
    let model = loaded.model()?;
    let tok = loaded.tokenizer()?;
    let prompt_ids = match (&a.tokens, &a.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) if a.chat => tok.encode(&loaded.chat_prompt(&tok, text)?),
        (None, Some(text)) => tok.encode_with_bos(text),
        (None, None) => unreachable!("clap requires --prompt or --tokens"),
    };
    if prompt_ids.is_empty() {
        return Err("the prompt is empty: give at least one token".into());
    }
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        repeat_penalty: a.repeat_penalty,
        repeat_last_n: 64,
        seed: a.seed,
    })?;
    let cfg = &model.config;
    if let Some(&id) = prompt_ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
        return Err(engine::EngineError::TokenOutOfRange {
            id,
            vocab: cfg.vocab_size,
        }
        .into());
    }
    if prompt_ids.len() > cfg.context_length {
        return Err(format!(
            "the prompt ({} tokens) exceeds the model's context length {}",
            prompt_ids.len(),
            cfg.context_length
        )
        .into());
    }
    // Generation stops when the context is full.
    let n = a.n.min(cfg.context_length - prompt_ids.len());
    if n < a.n {
        eprintln!(
            "note: generating at most {n} tokens: the context holds {}",
            cfg.context_length
        );
    }
    let needed = prompt_ids.len() + n;
    let mut session = Session::new(cfg, needed)?;
    for &id in &prompt_ids {
        sampler.accept(id);
    }

    let mut out = std::io::stdout().lock();
    let mut stream = StreamDecoder::new(&tok);
    let mut ids = Vec::with_capacity(n);
    let (mut prefill_s, mut decode_s) = (0.0f64, 0.0f64);
    if n > 0 {
        let t0 = Instant::now();
        let mut logits = model.forward(&mut session, &prompt_ids, false)?.to_vec();
        prefill_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        loop {
            let id = sampler.sample(&mut logits)?;
            ids.push(id);
            // The end-of-text token ends the answer; it is not part of the text.
            if cfg.eos_ids.contains(&id) {
                break;
            }
            if !a.json {
                write!(out, "{}", stream.push(id)?)?;
                out.flush()?;
            }
            if ids.len() == n {
                break;
            }
            logits.copy_from_slice(model.forward(&mut session, &[id], false)?);
        }
        decode_s = t1.elapsed().as_secs_f64();
    }
    let decode_steps = ids.len().saturating_sub(1);
    let rate = |n: usize, s: f64| if s > 0.0 && n > 0 { n as f64 / s } else { 0.0 };
    if a.json {
        let text_ids = match ids.last() {
            Some(last) if cfg.eos_ids.contains(last) => &ids[..ids.len() - 1],
            _ => &ids[..],
        };
        let text = tok.decode(text_ids)?;
        let v = serde_json::json!({
            "prompt_ids": prompt_ids,
            "ids": ids,
            "text": text,
            "prefill_tok_s": rate(prompt_ids.len(), prefill_s),
            "decode_tok_s": rate(decode_steps, decode_s),
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out, "{}", stream.finish())?;
        eprintln!(
            "[{} prompt tokens, {:.1} tok/s prefill; {} generated, {:.1} tok/s decode]",
            prompt_ids.len(),
            rate(prompt_ids.len(), prefill_s),
            ids.len(),
            rate(decode_steps, decode_s)
        );
    }
    Ok(())
}

fn logits(file: PathBuf, tokens: Vec<u32>, top: usize, json: bool) -> Result<()> {
    let loaded = LoadedKnot::open(&file)?;
    let model = loaded.model()?;
    if tokens.is_empty() {
        return Err("--tokens is empty".into());
    }
    let mut session = Session::new(&model.config, tokens.len())?;
    let all = model.forward(&mut session, &tokens, true)?;
    let vocab = model.config.vocab_size;
    let positions: Vec<_> = all
        .chunks_exact(vocab)
        .map(|row| {
            let best = engine::sampler::top_k(row, top);
            serde_json::json!({
                "ids": best.iter().map(|&(i, _)| i).collect::<Vec<_>>(),
                "logits": best.iter().map(|&(_, l)| l).collect::<Vec<_>>(),
            })
        })
        .collect();
    let v = serde_json::json!({ "positions": positions });
    if json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}
