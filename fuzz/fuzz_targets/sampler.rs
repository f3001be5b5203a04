//! The sampling pipeline on arbitrary settings and logits (NaN, ±inf, subnormals, huge): every
//! settings object that validates builds a pipeline, and every pick is a token of the vocabulary
//! or an error, never a panic; an error only when some logit is not finite. MOA settings
//! likewise.
#![no_main]

use arbitrary::Arbitrary;
use engine::pipeline::{DecodeConfig, Pipeline};
use engine::sampler::SamplerConfig;
use libfuzzer_sys::fuzz_target;
use moa::{Merge, MoaConfig};

#[derive(Arbitrary, Debug)]
struct Moa {
    k: u8,
    base_temperature: f64,
    temperature_spread: f64,
    min_temperature: f64,
    top_k: u16,
    merge: u8,
    use_kl: bool,
    sensitivity: f64,
    target: f64,
}

#[derive(Arbitrary, Debug)]
struct Input {
    temperature: f32,
    top_k: u16,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    repeat_last_n: u16,
    seed: u64,
    moa: Option<Moa>,
    /// Vocabulary size is this plus one.
    vocab: u8,
    context: Vec<u16>,
    logits: Vec<f32>,
    rollback: u8,
    // Last, so the committed seeds and regressions decode as before.
    presence_penalty: f32,
    frequency_penalty: f32,
}

fuzz_target!(|input: Input| {
    let sampling = SamplerConfig {
        temperature: input.temperature,
        top_k: input.top_k.into(),
        top_p: input.top_p,
        min_p: input.min_p,
        repeat_penalty: input.repeat_penalty,
        repeat_last_n: input.repeat_last_n.into(),
        presence_penalty: input.presence_penalty,
        frequency_penalty: input.frequency_penalty,
        seed: input.seed,
    };
    let moa = input.moa.map(|m| MoaConfig {
        k: m.k.into(),
        base_temperature: m.base_temperature,
        temperature_spread: m.temperature_spread,
        min_temperature: m.min_temperature,
        top_k: m.top_k.into(),
        merge: [
            Merge::DeficitWeighted,
            Merge::Uniform,
            Merge::ComplementVote,
        ][m.merge as usize % 3],
        use_kl: m.use_kl,
        sensitivity: m.sensitivity,
        target: m.target,
    });
    let cfg = DecodeConfig {
        sampling,
        moa,
        coltrane: None,
        health: None,
    };
    if cfg.validate().is_err() {
        return;
    }
    let mut pipeline = Pipeline::new(&cfg).expect("a validated config builds");
    let vocab = input.vocab as usize + 1;
    for &t in &input.context {
        pipeline.accept_context(u32::from(t) % vocab as u32);
    }
    let mut picked = 0;
    for row in input.logits.chunks_exact(vocab).take(16) {
        let mut logits = row.to_vec();
        match pipeline.sample(&mut logits) {
            Ok(step) => {
                assert!(
                    (step.token as usize) < vocab,
                    "token {} of {vocab}",
                    step.token
                );
                pipeline.accept(step.token);
                picked += 1;
            }
            // Finite logits always leave a token to pick, whatever the (valid) settings.
            Err(e) => assert!(!row.iter().all(|l| l.is_finite()), "{e} on finite logits"),
        }
    }
    let _ = pipeline.rollback((input.rollback as usize).min(picked + 1));
});
