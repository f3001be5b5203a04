//! `knot`: convert models to knot files, inspect them, and run them.

use clap::{Parser, Subcommand};
use engine::Session;
use knot_cli::convert::{ConvertOptions, TargetDType};
use knot_cli::generate::GenerateArgs;
use knot_cli::loaded::LoadedKnot;
use std::path::PathBuf;
use std::process::ExitCode;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(name = "knot", version, about = "LLM inference from knot files")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Threads the matmuls split their rows across (default: every core). Output is identical
    /// at every count.
    #[arg(long, global = true, value_name = "N")]
    threads: Option<usize>,
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
    /// Prefill and decode speed (median of runs) and peak memory; with --moa, decode with and
    /// without MOA in the same run.
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
        /// Compare MOA (defaults, or a spec as for `generate --moa`) with plain sampling at its
        /// base temperature and top-k.
        #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "")]
        moa: Option<String>,
        /// What the decode-health monitor costs: greedy decode with it (observing) and without,
        /// interleaved, and its own time as a share of a step.
        #[arg(long)]
        health: bool,
        /// Compare greedy decode with and without a constraint (flags as for `generate`).
        #[command(flatten)]
        constraint: knot_cli::generate::ConstraintArgs,
        /// Compare greedy decode with and without speculative decoding (a spec as for
        /// `generate --draft`) on a copy-heavy and an open-ended chat prompt, all layers resident
        /// and streaming through an LRU of --lru layers.
        #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "lookup",
              conflicts_with_all = ["moa", "constraint"])]
        draft: Option<String>,
        /// LRU capacity of the streamed case of --draft.
        #[arg(long, default_value_t = 2, requires = "draft")]
        lru: usize,
        /// Decode several conversations at once on one host (a list of stream counts), against
        /// one stream and the engine's batched rate at as many rows, in the same run.
        #[arg(long, value_name = "COUNTS", value_delimiter = ',',
              conflicts_with_all = ["moa", "constraint", "draft"])]
        parallel: Option<Vec<usize>>,
        /// Prefill and decode at each of these thread counts, interleaved in the same run, as
        /// ratios against the first.
        #[arg(long, value_name = "COUNTS", value_delimiter = ',',
              conflicts_with_all = ["moa", "constraint", "draft", "parallel"])]
        scaling: Option<Vec<usize>>,
    },
}

fn main() -> ExitCode {
    // A panic is a bug, but the user still gets one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error: {info}");
    }));
    let cli = Cli::parse();
    let threads = cli.threads.unwrap_or_else(engine::quant::available_threads);
    if let Err(e) = engine::quant::set_threads(threads) {
        eprintln!("error: --threads: {e}");
        return ExitCode::FAILURE;
    }
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
        Command::Generate(args) => knot_cli::generate::run(&args),
        Command::Logits {
            file,
            tokens,
            top,
            json,
        } => logits(file, tokens, top, json),
        Command::Tokenize { file, text, json } => {
            let ids = LoadedKnot::open(&file)?.tokenizer()?.encode(&text)?;
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
            runs,
            json,
            draft: Some(spec),
            lru,
            ..
        } => knot_cli::bench_draft::run(&file, &spec, n, runs, lru, json),
        Command::Bench {
            file,
            n,
            prompt_len,
            runs,
            json,
            parallel: Some(streams),
            ..
        } => knot_cli::bench_parallel::run(&file, &streams, n, prompt_len, runs, json),
        Command::Bench {
            file,
            n,
            prompt_len,
            runs,
            json,
            scaling: Some(counts),
            ..
        } => knot_cli::bench::scaling(&file, &counts, n, prompt_len, runs, json),
        Command::Bench {
            file,
            n,
            prompt_len,
            runs,
            json,
            health: true,
            ..
        } => knot_cli::bench_health::run(&file, n, prompt_len, runs, json),
        Command::Bench {
            file,
            n,
            prompt_len,
            runs,
            json,
            moa,
            constraint,
            ..
        } => knot_cli::bench::run(
            &file,
            n,
            prompt_len,
            runs,
            json,
            moa.as_deref(),
            &constraint,
        ),
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
