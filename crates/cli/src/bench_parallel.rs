//! `knot bench --parallel 1,2,4,8`: decode speed of several conversations at once on one host
//! (`maxSequences`: each step one joint pass over every sequence's row), against two baselines
//! measured in the same run — one conversation alone through the same host, and the engine's own
//! N-row batched rate (passes of N positions of one conversation, every row's logits computed:
//! about the most a step of N rows could give, since a decode step of N sequences is such a
//! batch with N attentions instead of one).

use crate::bench::{median, peak_rss_bytes, BENCH_TEXT};
use crate::generate::rate;
use crate::loaded::LoadedKnot;
use engine::decode::GenerateOptions;
use engine::Model;
use futures::executor::block_on;
use host::options::SequenceCount;
use host::{FileSource, Host, HostOptions};
use std::path::Path;
use std::rc::Rc;

/// What one row of the table measured (medians over the runs).
#[derive(Debug, serde::Serialize)]
struct Row {
    streams: usize,
    /// Tokens per second over all streams, and per stream.
    aggregate_tok_s: f64,
    per_stream_tok_s: f64,
    /// Milliseconds between a stream's tokens.
    per_stream_ms_per_token: f64,
    /// The engine's rate on one conversation in passes of `streams` positions.
    batched_rows_tok_s: f64,
    /// aggregate / one stream's aggregate, and aggregate / the batched rate.
    over_one_stream: f64,
    over_batched_rows: f64,
}

fn open(path: &Path, max_sequences: usize, max_batch: Option<usize>) -> Result<Host> {
    let source =
        FileSource::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let opts = HostOptions {
        max_sequences: SequenceCount::Fixed(max_sequences),
        max_batch,
        max_context: 4096,
        ..HostOptions::default()
    };
    let mut host = block_on(Host::open(Rc::new(source), opts))?;
    // Every layer in memory first: the runs measure compute, not the first reads.
    for l in 0..host.config().n_layers {
        block_on(host.load_layer(l))?;
    }
    Ok(host)
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `streams` conversations (different prompts) admitted together; once every one has its first
/// token (prompts are prefilled one per step), `n` steps with all of them decoding are timed.
/// Returns the milliseconds of those steps.
fn decode_together(host: &mut Host, prompts: &[Vec<u32>], n: usize) -> Result<f64> {
    let opts = GenerateOptions {
        max_tokens: n + prompts.len() + 1,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let ids = prompts
        .iter()
        .map(|p| host.admit(p, &opts).map(|a| a.id))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mut started = std::collections::HashSet::new();
    while started.len() < prompts.len() {
        for e in block_on(host.step()) {
            if e.token?.is_some() {
                started.insert(e.id);
            }
        }
    }
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        let events = block_on(host.step());
        let made = events
            .into_iter()
            .map(|e| e.token)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if made.iter().flatten().count() != prompts.len() {
            return Err("a stream made no token in a timed step".into());
        }
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    for id in ids {
        host.cancel(id);
    }
    Ok(ms)
}

/// The engine's own rate over passes of `rows` positions with every row's logits (a decode step
/// of that many sequences is such a pass, plus their separate attentions): one conversation at
/// the streams' position (`prompt` in), each pass rewound after it so the position stays.
fn batched_rate(model: &Model, rows: usize, prompt: &[u32], n: usize) -> Result<f64> {
    let mut session = engine::Session::new(&model.config, prompt.len() + rows + 1)?;
    model.forward(&mut session, prompt, false)?;
    let at = session.position();
    let batch: Vec<u32> = prompt.iter().cycle().take(rows).copied().collect();
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        model.forward(&mut session, &batch, true)?;
        session.rewind(at)?;
    }
    Ok(rate(rows * n, t0.elapsed().as_secs_f64() * 1000.0))
}

pub fn run(
    path: &Path,
    streams: &[usize],
    n: usize,
    prompt_len: usize,
    runs: usize,
    json: bool,
) -> Result<()> {
    if n == 0 || prompt_len == 0 || runs == 0 || streams.is_empty() || streams.contains(&0) {
        return Err(
            "-n, --prompt-len, --runs and every --parallel count must be at least 1".into(),
        );
    }
    let most = *streams.iter().max().unwrap_or(&1);
    let mut host = open(path, most, None)?;
    let tok = host.tokenizer().clone();
    let text = BENCH_TEXT.repeat(prompt_len.div_ceil(16) * most + 1);
    let all = tok.encode(&text)?;
    // Each stream its own prompt: a different slice of the text.
    let prompts: Vec<Vec<u32>> = (0..most)
        .map(|i| all[i * 7..i * 7 + prompt_len].to_vec())
        .collect();
    let kv_per_sequence = engine::Session::memory(
        host.config(),
        prompt_len + n + 1,
        engine::kv::KvType::F32,
        1,
        1,
    )
    .kv_cache;

    // Interleaved rounds, so drift on a shared machine hits every count and both baselines
    // alike.
    let loaded = LoadedKnot::open(path)?;
    let model = loaded.model()?;
    let mut ms: Vec<Vec<f64>> = vec![Vec::new(); streams.len()];
    let mut batched: Vec<Vec<f64>> = vec![Vec::new(); streams.len()];
    for _ in 0..runs {
        for (i, &s) in streams.iter().enumerate() {
            ms[i].push(decode_together(&mut host, &prompts[..s], n)?);
            batched[i].push(batched_rate(&model, s, &prompts[0], n)?);
        }
    }
    let one = streams
        .iter()
        .position(|&s| s == 1)
        .map(|i| rate(n, median(ms[i].clone())));
    let mut rows = Vec::new();
    for (i, &s) in streams.iter().enumerate() {
        let t = median(ms[i].clone());
        let aggregate = rate(s * n, t);
        let batched = median(batched[i].clone());
        rows.push(Row {
            streams: s,
            aggregate_tok_s: aggregate,
            per_stream_tok_s: aggregate / s as f64,
            per_stream_ms_per_token: t / n as f64,
            batched_rows_tok_s: batched,
            over_one_stream: one.map_or(f64::NAN, |o| aggregate / o),
            over_batched_rows: aggregate / batched,
        });
    }
    if json {
        let v = serde_json::json!({
            "rows": rows, "n": n, "prompt_len": prompt_len, "runs": runs,
            "kv_bytes_per_sequence": kv_per_sequence, "peak_rss_bytes": peak_rss_bytes(),
        });
        println!("{v}");
        return Ok(());
    }
    println!(
        "{n} tokens per stream after a {prompt_len}-token prompt each, median of {runs} interleaved runs"
    );
    println!("streams  aggregate tok/s  per stream tok/s  ms/token  ×1 stream  N-row batch tok/s  aggregate/batch");
    for r in &rows {
        println!(
            "{:>7}  {:>15.1}  {:>16.1}  {:>8.2}  {:>9.2}  {:>17.1}  {:>15.2}",
            r.streams,
            r.aggregate_tok_s,
            r.per_stream_tok_s,
            r.per_stream_ms_per_token,
            r.over_one_stream,
            r.batched_rows_tok_s,
            r.over_batched_rows
        );
    }
    println!(
        "KV cache per sequence at {} positions: {:.2} MiB",
        prompt_len + n + 1,
        kv_per_sequence as f64 / (1 << 20) as f64
    );
    Ok(())
}
