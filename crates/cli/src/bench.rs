//! `knot bench`: prefill and decode speed of the native engine, median of several runs.

use crate::loaded::LoadedKnot;
use engine::sampler::greedy;
use engine::Session;
use std::path::Path;
use std::time::Instant;

const BENCH_TEXT: &str = "The quick brown fox jumps over the lazy dog. In the beginning the \
    universe was created. This has made a lot of people very angry and been widely regarded as \
    a bad move. It was the best of times, it was the worst of times, it was the age of wisdom. ";

/// Peak resident set size in bytes (Linux), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(
    path: &Path,
    n: usize,
    prompt_len: usize,
    runs: usize,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    if n == 0 || prompt_len == 0 || runs == 0 {
        return Err("-n, --prompt-len and --runs must be at least 1".into());
    }
    let loaded = LoadedKnot::open(path)?;
    let model = loaded.model()?;
    let tok = loaded.tokenizer()?;
    let mut prompt: Vec<u32> = Vec::new();
    while prompt.len() < prompt_len {
        prompt.extend(tok.encode(BENCH_TEXT));
    }
    prompt.truncate(prompt_len);
    let ctx = prompt_len + n;
    if ctx > model.config.context_length {
        return Err(format!("prompt + n = {ctx} exceeds the context length").into());
    }
    let mut session = Session::new(&model.config, ctx)?;
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        session.reset();
        let t0 = Instant::now();
        let mut next = greedy(model.forward(&mut session, &prompt, false)?).unwrap_or(0);
        prefill.push(prompt_len as f64 / t0.elapsed().as_secs_f64());
        let t1 = Instant::now();
        for _ in 0..n {
            next = greedy(model.forward(&mut session, &[next], false)?).unwrap_or(0);
        }
        decode.push(n as f64 / t1.elapsed().as_secs_f64());
    }
    let (p, d) = (median(prefill), median(decode));
    let rss = peak_rss_bytes();
    if json {
        let v = serde_json::json!({
            "prefill_tok_s": p, "decode_tok_s": d, "prompt_len": prompt_len, "n": n,
            "runs": runs, "peak_rss_bytes": rss,
        });
        println!("{v}");
    } else {
        println!("prefill: {p:.1} tok/s ({prompt_len}-token prompt, median of {runs})");
        println!("decode:  {d:.1} tok/s ({n} tokens, median of {runs})");
        match rss {
            Some(b) => println!("peak RSS: {:.1} MiB", b as f64 / (1024.0 * 1024.0)),
            None => println!("peak RSS: unknown on this platform"),
        }
    }
    Ok(())
}
