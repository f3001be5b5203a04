//! Forward-pass speed of the engine on the default model, the same code natively and in wasm:
//!   cargo bench --bench forward                         # native
//!   cargo bench --bench forward --target wasm32-wasip1  # wasm32 + SIMD128, in Node (WASI)
//! Prints prefill and decode tokens/s (median of runs) as one JSON line, so a script can put the
//! two side by side as a ratio measured in the same run.

use engine::sampler::greedy;
use engine::Session;
use knot_suite::{model_path, KnotFile};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a file argument overrides the default model.
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| model_path("SmolLM2-135M-Instruct.Q4_1.knot"));
    if !path.exists() {
        eprintln!(
            "{} is missing: run scripts/prepare-model.sh",
            path.display()
        );
        std::process::exit(1);
    }
    let (prompt_len, n, runs) = (128usize, 64usize, 3usize);
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
        let mut next = greedy(model.forward(&mut session, &prompt, false).unwrap()).unwrap();
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
    println!(
        "{{\"target\":\"{}\",\"model\":{:?},\"prefill_tok_s\":{:.2},\"decode_tok_s\":{:.2},\"lm_head_share\":{:.3},\"prompt_len\":{prompt_len},\"n\":{n},\"runs\":{runs}}}",
        std::env::consts::ARCH,
        file.knot.meta.name,
        median(prefill),
        median(decode),
        median(head_share)
    );
}
