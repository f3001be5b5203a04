//! Output quality of MOA against plain temperature sampling on the default model, reported
//! without a target (docs/moa.md): for each of 24 chat prompts and 2 fixed seeds, 96 tokens with
//!   plain T 0.7 (whole vocabulary), plain T 0.7 with top-k 40 (MOA's candidate set), MOA defaults
//! and the metrics
//!   distinct-2      unique token bigrams / bigrams, per output, averaged
//!   repeated 4-gram share of an output's 4-grams seen earlier in the same output, averaged
//!   perplexity      exp(mean NLL) of the generated tokens under the model itself (T 1), pooled
//!   length, stops   mean tokens generated, outputs ended by end-of-text
//!   cargo bench --bench moa_quality [model.knot] [--json]

use engine::chat::{chat_prompt, ChatMessage};
use engine::decode::{GenerateOptions, Generation};
use engine::{DecodeConfig, Model, SamplerConfig, Session};
use knot_suite::{bench_model_arg, KnotFile};
use moa::MoaConfig;
use std::collections::HashSet;
use std::rc::Rc;

const PROMPTS: [&str; 24] = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how photosynthesis works to a ten-year-old.",
    "Give me five ideas for a weekend trip near the mountains.",
    "Write a poem about autumn leaves.",
    "What are the main causes of the French Revolution?",
    "Describe your ideal breakfast in detail.",
    "How do I make a cup of tea?",
    "Write a letter to a friend you have not seen in years.",
    "Explain what a black hole is.",
    "List some tips for learning a new language.",
    "Tell me a story about a dragon who is afraid of fire.",
    "Why is the sky blue?",
    "Write a product description for a reusable water bottle.",
    "What should I consider when adopting a dog?",
    "Describe a busy market in a small town.",
    "Explain the rules of chess briefly.",
    "Write a motivational speech for a sports team.",
    "How does a computer store information?",
    "Invent a new holiday and describe how people celebrate it.",
    "What are the benefits of regular exercise?",
    "Write a dialogue between a cat and a mouse.",
    "Summarize the plot of a heist movie you make up.",
    "Describe the ocean to someone who has never seen it.",
    "Give advice to someone starting their first job.",
];
const SEEDS: [u64; 2] = [11, 29];
const N: usize = 96;

struct Sample {
    ids: Vec<u32>,
    stopped: bool,
    nll: f64,
}

fn generate(
    model: &Model,
    session: &mut Session,
    tokenizer: &Rc<engine::tokenizer::Tokenizer>,
    prompt: &[u32],
    decode: &DecodeConfig,
) -> Sample {
    let opts = GenerateOptions {
        decode: decode.clone(),
        max_tokens: N,
        ..GenerateOptions::default()
    };
    let eos = &model.config.eos_ids;
    let room = session.max_context() - prompt.len();
    let mut g = Generation::new(&opts, tokenizer.clone(), eos, room).unwrap();
    g.accept_context(prompt);
    session.reset();
    let mut logits = model.forward(session, prompt, false).unwrap().to_vec();
    let mut ids = Vec::new();
    loop {
        let e = g.next(&mut logits).unwrap();
        ids.push(e.id);
        if e.finish_reason.is_some() {
            break;
        }
        logits.copy_from_slice(model.forward(session, &[e.id], false).unwrap());
    }
    let stopped = ids.last().is_some_and(|id| eos.contains(id));
    // The model's own NLL of what it generated (T 1, whole vocabulary), teacher-forced.
    session.reset();
    let all: Vec<u32> = prompt.iter().chain(&ids).copied().collect();
    let rows = model.forward(session, &all, true).unwrap();
    let vocab = model.config.vocab_size;
    let mut nll = 0.0f64;
    for (i, &id) in ids.iter().enumerate() {
        let row = &rows[(prompt.len() - 1 + i) * vocab..][..vocab];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let lse = max
            + row
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        nll += lse - row[id as usize] as f64;
    }
    Sample { ids, stopped, nll }
}

fn distinct_2(ids: &[u32]) -> f64 {
    let pairs: Vec<(u32, u32)> = ids.windows(2).map(|w| (w[0], w[1])).collect();
    if pairs.is_empty() {
        return 1.0;
    }
    pairs.iter().collect::<HashSet<_>>().len() as f64 / pairs.len() as f64
}

fn repeated_4grams(ids: &[u32]) -> f64 {
    let grams: Vec<&[u32]> = ids.windows(4).collect();
    if grams.is_empty() {
        return 0.0;
    }
    let mut seen = HashSet::new();
    let repeats = grams.iter().filter(|g| !seen.insert(**g)).count();
    repeats as f64 / grams.len() as f64
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let path = bench_model_arg();
    let file = KnotFile::read(&path);
    let model = file.model();
    let tokenizer = Rc::new(file.tokenizer());
    let template = file.knot.meta.chat_template.as_deref();
    let mut session = Session::new(&model.config, 512).unwrap();
    let plain = |top_k| SamplerConfig {
        temperature: 0.7,
        top_k,
        ..SamplerConfig::default()
    };
    let methods: [(&str, DecodeConfig); 3] = [
        (
            "plain T0.7",
            DecodeConfig {
                sampling: plain(0),
                ..DecodeConfig::default()
            },
        ),
        (
            "plain T0.7 top-k 40",
            DecodeConfig {
                sampling: plain(40),
                ..DecodeConfig::default()
            },
        ),
        (
            "MOA defaults",
            DecodeConfig {
                moa: Some(MoaConfig::default()),
                ..DecodeConfig::default()
            },
        ),
    ];
    let mut rows = Vec::new();
    for (name, decode) in &methods {
        let (mut d2, mut r4, mut nll, mut tokens, mut stops, mut outputs) =
            (0.0, 0.0, 0.0, 0usize, 0usize, 0usize);
        for prompt in PROMPTS {
            let text = chat_prompt(template, &tokenizer, &[ChatMessage::new("user", prompt)])
                .expect("chat template");
            let ids = tokenizer.encode(&text).unwrap();
            for seed in SEEDS {
                let mut cfg = decode.clone();
                cfg.sampling.seed = seed;
                let s = generate(&model, &mut session, &tokenizer, &ids, &cfg);
                d2 += distinct_2(&s.ids);
                r4 += repeated_4grams(&s.ids);
                nll += s.nll;
                tokens += s.ids.len();
                stops += s.stopped as usize;
                outputs += 1;
            }
        }
        let k = outputs as f64;
        rows.push(serde_json::json!({
            "method": name, "outputs": outputs, "distinct_2": d2 / k,
            "repeated_4gram_share": r4 / k, "perplexity": (nll / tokens as f64).exp(),
            "mean_tokens": tokens as f64 / k, "stopped": stops,
        }));
    }
    if json {
        println!(
            "{}",
            serde_json::json!({ "model": file.knot.meta.name, "n": N, "rows": rows })
        );
        return;
    }
    println!(
        "{} prompts x {} seeds, up to {N} tokens each ({})",
        PROMPTS.len(),
        SEEDS.len(),
        file.knot.meta.name
    );
    println!(
        "{:<22} {:>10} {:>12} {:>11} {:>11} {:>8}",
        "", "distinct-2", "rep. 4-gram", "perplexity", "mean tok", "stopped"
    );
    for r in &rows {
        println!(
            "{:<22} {:>10.4} {:>12.4} {:>11.3} {:>11.1} {:>5}/{}",
            r["method"].as_str().unwrap_or(""),
            r["distinct_2"].as_f64().unwrap_or(0.0),
            r["repeated_4gram_share"].as_f64().unwrap_or(0.0),
            r["perplexity"].as_f64().unwrap_or(0.0),
            r["mean_tokens"].as_f64().unwrap_or(0.0),
            r["stopped"],
            r["outputs"]
        );
    }
}
