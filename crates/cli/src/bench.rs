//! `knot bench`: prefill and decode speed through the host's decode loop, median of several
//! runs; with `--moa`, decode with and without MOA interleaved in the same run, as a ratio.

use crate::generate::{open_host, rate, ConstraintArgs};
use engine::decode::GenerateOptions;
use engine::{DecodeConfig, SamplerConfig};
use futures::executor::block_on;
use host::{Generated, Host};
use moa::MoaConfig;
use std::path::Path;

pub(crate) const BENCH_TEXT: &str =
    "The quick brown fox jumps over the lazy dog. In the beginning the \
    universe was created. This has made a lot of people very angry and been widely regarded as \
    a bad move. It was the best of times, it was the worst of times, it was the age of wisdom. ";

/// Peak resident set size in bytes (Linux), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Whether the measured configuration (B) runs second or first in run `r` of an A/B bench: the
/// two alternate, so a shared machine's drift hits both alike.
pub(crate) fn ab_order(r: usize) -> [bool; 2] {
    let b_first = !r.is_multiple_of(2);
    [b_first, !b_first]
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One run: the prompt, then exactly `n` decode steps (end-of-text ignored). Returns prefill and
/// decode tokens/s.
pub(crate) fn run_once(
    host: &mut Host,
    prompt: &[u32],
    n: usize,
    decode: &DecodeConfig,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    run_measured(host, prompt, n, decode).map(|(p, d, _)| (p, d))
}

/// [`run_once`], also returning what the generation made.
pub(crate) fn run_measured(
    host: &mut Host,
    prompt: &[u32],
    n: usize,
    decode: &DecodeConfig,
) -> Result<(f64, f64, Generated), Box<dyn std::error::Error>> {
    let opts = GenerateOptions {
        decode: decode.clone(),
        max_tokens: n + 1,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let out = block_on(host.generate(prompt, &opts, &mut |_| true))?;
    let s = &out.report;
    // The first token comes from the prefill's logits; the n after it each run a forward pass.
    let decode_ms: f64 = s.token_ms.iter().sum();
    Ok((
        rate(s.prefill_tokens as usize, s.prefill_ms),
        rate(n, decode_ms),
        out,
    ))
}

/// Greedy decode with and without the constraint, interleaved; mask time percentiles.
fn constraint_run(
    host: &mut Host,
    prompt: &[u32],
    n: usize,
    runs: usize,
    json: bool,
    cfg: coltrane::ColtraneConfig,
) -> Result<(), Box<dyn std::error::Error>> {
    let plain = DecodeConfig::default();
    let constrained = DecodeConfig {
        coltrane: Some(cfg),
        ..DecodeConfig::default()
    };
    let (mut plain_tok_s, mut constrained_tok_s, mut p50, mut p99) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..runs {
        for use_it in ab_order(r) {
            if use_it {
                let (_, d, out) = run_measured(host, prompt, n, &constrained)?;
                constrained_tok_s.push(d);
                if let Some(m) = out.constraint {
                    p50.push(m.mask_us_p50 as f64);
                    p99.push(m.mask_us_p99 as f64);
                }
            } else {
                plain_tok_s.push(run_once(host, prompt, n, &plain)?.1);
            }
        }
    }
    let (p, c) = (median(plain_tok_s), median(constrained_tok_s));
    let (p50, p99) = (median(p50), median(p99));
    if json {
        let v = serde_json::json!({
            "plain_decode_tok_s": p, "constrained_decode_tok_s": c, "constrained_over_plain": c / p,
            "mask_us_p50": p50, "mask_us_p99": p99, "n": n, "runs": runs,
        });
        println!("{v}");
    } else {
        println!("greedy:             {p:.1} tok/s decode (median of {runs})");
        println!("with the constraint: {c:.1} tok/s decode (median of {runs})");
        println!(
            "constrained / plain: {:.3} ({:+.1}% per token)",
            c / p,
            (p / c - 1.0) * 100.0
        );
        println!("mask time: p50 {p50:.1} µs, p99 {p99:.1} µs");
    }
    Ok(())
}

/// `--scaling 1,2`: prefill and decode at each thread count, the counts interleaved in every
/// run (the machine's drift hits them alike), medians and ratios against the first count.
pub fn scaling(
    path: &Path,
    counts: &[usize],
    n: usize,
    prompt_len: usize,
    runs: usize,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    if n == 0 || prompt_len == 0 || runs == 0 || counts.is_empty() {
        return Err("-n, --prompt-len, --runs and --scaling must be at least 1".into());
    }
    let mut host = open_host(path)?;
    let prompt = bench_prompt(&host, prompt_len, n)?;
    for l in 0..host.config().n_layers {
        block_on(host.load_layer(l))?;
    }
    let greedy = DecodeConfig::default();
    let mut by: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); counts.len()];
    for r in 0..runs {
        for i in 0..counts.len() {
            // Each run starts from another count, so none always runs first.
            let i = (i + r) % counts.len();
            engine::quant::set_threads(counts[i])?;
            let (p, d) = run_once(&mut host, &prompt, n, &greedy)?;
            by[i].0.push(p);
            by[i].1.push(d);
        }
    }
    let rows: Vec<(usize, f64, f64)> = counts
        .iter()
        .zip(by)
        .map(|(&t, (p, d))| (t, median(p), median(d)))
        .collect();
    let (p0, d0) = (rows[0].1, rows[0].2);
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|&(t, p, d)| {
                serde_json::json!({
                    "threads": t, "prefill_tok_s": p, "decode_tok_s": d,
                    "prefill_ratio": p / p0, "decode_ratio": d / d0,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "scaling": v, "prompt_len": prompt_len, "n": n, "runs": runs })
        );
    } else {
        println!("threads  prefill tok/s (×)   decode tok/s (×)   ({prompt_len}-token prompt, {n} tokens, medians of {runs})");
        for (t, p, d) in rows {
            println!(
                "{t:>7}  {p:>8.1} ({:.2})     {d:>7.1} ({:.2})",
                p / p0,
                d / d0
            );
        }
    }
    Ok(())
}

/// The bench's prompt: `BENCH_TEXT` repeated to `prompt_len` ids, checked against the context.
pub(crate) fn bench_prompt(
    host: &Host,
    prompt_len: usize,
    n: usize,
) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let mut prompt: Vec<u32> = Vec::new();
    while prompt.len() < prompt_len {
        prompt.extend(host.tokenizer().encode(BENCH_TEXT)?);
    }
    prompt.truncate(prompt_len);
    let ctx = prompt_len + n + 1;
    if ctx > host.config().context_length {
        return Err(format!("prompt + n = {ctx} exceeds the context length").into());
    }
    Ok(prompt)
}

pub fn run(
    path: &Path,
    n: usize,
    prompt_len: usize,
    runs: usize,
    json: bool,
    moa_spec: Option<&str>,
    constraint: &ConstraintArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    if n == 0 || prompt_len == 0 || runs == 0 {
        return Err("-n, --prompt-len and --runs must be at least 1".into());
    }
    let moa = moa_spec.map(MoaConfig::parse_spec).transpose()?;
    let coltrane = constraint.config()?;
    if moa.is_some() && coltrane.is_some() {
        return Err("bench compares one thing at a time: --moa or a constraint".into());
    }
    let mut host = open_host(path)?;
    let prompt = bench_prompt(&host, prompt_len, n)?;
    // Every layer in memory first: the runs measure compute, not the first reads.
    for l in 0..host.config().n_layers {
        block_on(host.load_layer(l))?;
    }
    let rss = peak_rss_bytes;
    if let Some(c) = coltrane {
        return constraint_run(&mut host, &prompt, n, runs, json, c);
    }
    let Some(moa) = moa else {
        let greedy = DecodeConfig::default();
        let (mut prefill, mut decode) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let (p, d) = run_once(&mut host, &prompt, n, &greedy)?;
            prefill.push(p);
            decode.push(d);
        }
        let (p, d) = (median(prefill), median(decode));
        if json {
            let v = serde_json::json!({
                "prefill_tok_s": p, "decode_tok_s": d, "prompt_len": prompt_len, "n": n,
                "runs": runs, "peak_rss_bytes": rss(),
            });
            println!("{v}");
        } else {
            println!("prefill: {p:.1} tok/s ({prompt_len}-token prompt, median of {runs})");
            println!("decode:  {d:.1} tok/s ({n} tokens, median of {runs})");
            print_rss(rss());
        }
        return Ok(());
    };

    // Plain sampling over the same candidates at MOA's base temperature: what MOA adds is
    // the agents, the race and the fold.
    let plain = DecodeConfig {
        sampling: SamplerConfig {
            temperature: moa.base_temperature as f32,
            top_k: moa.top_k,
            ..SamplerConfig::default()
        },
        ..DecodeConfig::default()
    };
    let with_moa = DecodeConfig {
        moa: Some(moa.clone()),
        ..DecodeConfig::default()
    };
    let (mut plain_tok_s, mut moa_tok_s) = (Vec::new(), Vec::new());
    for r in 0..runs {
        for use_moa in ab_order(r) {
            let cfg = if use_moa { &with_moa } else { &plain };
            let (_, d) = run_once(&mut host, &prompt, n, cfg)?;
            match use_moa {
                true => moa_tok_s.push(d),
                false => plain_tok_s.push(d),
            }
        }
    }
    let (p, m) = (median(plain_tok_s), median(moa_tok_s));
    let ratio = m / p;
    if json {
        let v = serde_json::json!({
            "plain_decode_tok_s": p, "moa_decode_tok_s": m, "moa_over_plain": ratio,
            "k": moa.k, "top_k": moa.top_k, "prompt_len": prompt_len, "n": n, "runs": runs,
            "peak_rss_bytes": rss(),
        });
        println!("{v}");
    } else {
        println!(
            "plain sampling (T {}, top-k {}): {p:.1} tok/s decode (median of {runs})",
            moa.base_temperature, moa.top_k
        );
        println!(
            "MOA k={} (top-k {}):             {m:.1} tok/s decode (median of {runs})",
            moa.k, moa.top_k
        );
        println!(
            "MOA / plain: {ratio:.3} ({:+.1}% per token)",
            (1.0 / ratio - 1.0) * 100.0
        );
        print_rss(rss());
    }
    Ok(())
}

fn print_rss(rss: Option<u64>) {
    match rss {
        Some(b) => println!("peak RSS: {:.1} MiB", b as f64 / (1024.0 * 1024.0)),
        None => println!("peak RSS: unknown on this platform"),
    }
}
