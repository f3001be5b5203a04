//! Forward-pass speed of the engine on the default model, the same code natively and in wasm:
//!   cargo bench --bench forward                         # native
//!   cargo bench --bench forward --target wasm32-wasip1  # wasm32 + SIMD128, in Node (WASI)
//! Prints prefill and decode tokens/s (median of runs) as one JSON line, so a script can put the
//! two side by side as a ratio measured in the same run. It also decodes with plain sampling
//! (T 0.7, top-k 40) and with MOA (k 3, top-k 40) interleaved, and reports MOA's cost: the
//! decode tok/s ratio and the time of the pick itself per token.
//!
//! `KNOT_PROMPT_LEN` (scripts/bench.sh --prompt-lens): the prompt's length in tokens, prefilled
//! as one batch (default 128); decode then runs 64 steps after it. Above 128 the MOA part is
//! skipped (its fields are null) and above 1024 a single run is timed; `runs` says how many.

use engine::sampler::greedy;
use engine::{DecodeConfig, Model, Pipeline, SamplerConfig, Session};
use knot_suite::{bench_model_arg, KnotFile};
use moa::MoaConfig;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let path = bench_model_arg();
    // `KNOT_THREADS` (scripts/bench.sh --threads N): the matmuls' threads; 1 unless asked.
    let threads = std::env::var("KNOT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    engine::quant::set_threads(threads).expect("KNOT_THREADS");
    // `KNOT_PROMPT_LEN`: the prefill's length (std::env works natively and under wasm32-wasip1).
    let prompt_len: usize = std::env::var("KNOT_PROMPT_LEN")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&l| l > 0)
        .unwrap_or(128);
    let n = 64usize;
    // A prefill of thousands of tokens takes long, in wasm most of all: the median of three runs
    // up to 1024 tokens, a single run above.
    let runs = if prompt_len > 1024 { 1 } else { 3 };
    let file = KnotFile::read(&path);
    let model = file.model();
    let vocab = model.config.vocab_size as u32;
    // Deterministic, in-vocabulary prompt ids; the speed does not depend on which ids they are.
    let prompt: Vec<u32> = (0..prompt_len as u32)
        .map(|i| (i * 7919 + 13) % vocab)
        .collect();
    let mut session = Session::new(&model.config, prompt_len + n).unwrap();
    let (mut prefill, mut decode, mut head_share) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        session.reset();
        let t0 = Instant::now();
        // In chunks of the host's default (`host::memory::RESIDENT_PREFILL_CHUNK`, 512), as a
        // long prompt runs in the package and the CLI: one batch of thousands of rows would
        // measure its activations' memory traffic, not what users get.
        let mut chunks = prompt.chunks(512).peekable();
        while let Some(c) = chunks.next() {
            if chunks.peek().is_some() {
                model.forward(&mut session, c, false).unwrap();
            }
        }
        let last = prompt.chunks(512).last().unwrap();
        let mut next = greedy(model.forward(&mut session, last, false).unwrap()).unwrap();
        prefill.push(prompt_len as f64 / t0.elapsed().as_secs_f64());
        // Decode step by step through the streaming API, timing the layers and the final
        // norm + LM head separately: where the time goes.
        let (mut layers_s, mut head_s) = (0.0f64, 0.0f64);
        let t1 = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            session.begin(&[next], &model.resident).unwrap();
            for (l, w) in model.layers.iter().enumerate() {
                session.run_layer(l, w).unwrap();
            }
            let t_head = Instant::now();
            layers_s += (t_head - t).as_secs_f64();
            next = greedy(session.finish(&model.resident, false).unwrap()).unwrap();
            head_s += t_head.elapsed().as_secs_f64();
        }
        decode.push(n as f64 / t1.elapsed().as_secs_f64());
        head_share.push(head_s / (head_s + layers_s));
    }
    // MOA's cost is about sampling, not prompt length: measured at the default length only,
    // its fields null otherwise so the line keeps the same fields.
    let moa = if prompt_len <= 128 {
        moa_cost(&model, &mut session, &prompt, n, 2 * runs + 1)
    } else {
        MOA_FIELDS
            .iter()
            .map(|f| format!("\"{f}\":null"))
            .collect::<Vec<_>>()
            .join(",")
    };
    println!(
        "{{\"target\":\"{}\",\"threads\":{threads},\"model\":{:?},\"prefill_tok_s\":{:.2},\"decode_tok_s\":{:.2},\"lm_head_share\":{:.3},\"prompt_len\":{prompt_len},\"n\":{n},\"runs\":{runs},{moa}}}",
        std::env::consts::ARCH,
        file.knot.meta.name,
        median(prefill),
        median(decode),
        median(head_share)
    );
}

/// The JSON fields [`moa_cost`] reports.
const MOA_FIELDS: [&str; 5] = [
    "plain_decode_tok_s",
    "moa_decode_tok_s",
    "moa_over_plain",
    "plain_pick_ms",
    "moa_pick_ms",
];

/// Decode with plain sampling and with MOA over the same top-k, runs interleaved (alternating
/// which goes first). Returns JSON fields: both decode rates, their ratio, and the pick's own
/// time per token (stages + picker + draw), the part MOA changes.
fn moa_cost(model: &Model, session: &mut Session, prompt: &[u32], n: usize, runs: usize) -> String {
    let plain = DecodeConfig {
        sampling: SamplerConfig {
            temperature: 0.7,
            top_k: 40,
            seed: 1,
            ..SamplerConfig::default()
        },
        ..DecodeConfig::default()
    };
    let with_moa = DecodeConfig {
        sampling: SamplerConfig {
            seed: 1,
            ..SamplerConfig::default()
        },
        moa: Some(MoaConfig::default()),
        ..DecodeConfig::default()
    };
    let mut run = |cfg: &DecodeConfig| {
        let mut pipeline = Pipeline::new(cfg).unwrap();
        session.reset();
        let mut logits = model.forward(session, prompt, false).unwrap().to_vec();
        let (mut pick_s, t0) = (0.0f64, Instant::now());
        for _ in 0..n {
            let t = Instant::now();
            let next = pipeline.sample(&mut logits).unwrap().token;
            pick_s += t.elapsed().as_secs_f64();
            logits.copy_from_slice(model.forward(session, &[next], false).unwrap());
        }
        (
            n as f64 / t0.elapsed().as_secs_f64(),
            pick_s * 1e3 / n as f64,
        )
    };
    let (mut p_rate, mut m_rate, mut p_pick, mut m_pick) = (vec![], vec![], vec![], vec![]);
    for r in 0..runs {
        for use_moa in [r % 2 == 1, r % 2 == 0] {
            let (rate, pick) = run(if use_moa { &with_moa } else { &plain });
            let (rates, picks) = match use_moa {
                true => (&mut m_rate, &mut m_pick),
                false => (&mut p_rate, &mut p_pick),
            };
            rates.push(rate);
            picks.push(pick);
        }
    }
    let (p, m) = (median(p_rate), median(m_rate));
    format!(
        "\"plain_decode_tok_s\":{p:.2},\"moa_decode_tok_s\":{m:.2},\"moa_over_plain\":{:.4},\"plain_pick_ms\":{:.4},\"moa_pick_ms\":{:.4}",
        m / p,
        median(p_pick),
        median(m_pick)
    )
}
