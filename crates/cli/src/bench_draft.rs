//! `knot bench --draft SPEC`: greedy decode with and without speculative decoding, interleaved in
//! the same run, on copy-heavy prompts (repeat, edit, summarize a given text) and an open-ended
//! one, with every layer resident and with layers streaming through a small LRU. Prints tok/s, tokens per forward pass and layer
//! reads per token for both, and checks that both produced the same tokens.

use crate::bench::median;
use crate::generate::open_host_with;
use engine::chat::ChatMessage;
use engine::decode::{DraftChoice, GenerateOptions};
use engine::draft::DraftConfig;
use futures::executor::block_on;
use host::Host;
use std::path::Path;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PASSAGE: &str = "The lighthouse stood on a rocky point at the edge of the bay. Every \
    evening the keeper climbed the spiral stairs, trimmed the wick, and lit the great lamp. Ships \
    far out at sea watched for its beam, and the fishermen of the village said that as long as \
    the light turned, no boat would be lost on the rocks.";

/// (name, what the answer does with the prompt's text, user message): the copy-heavy tasks the
/// lookup drafter is for (repeat, edit, summarize a given text), and an open-ended one where
/// drafts mostly miss and speculation must not cost.
pub fn prompts() -> Vec<(&'static str, &'static str, String)> {
    vec![
        (
            "repeat",
            "copy-heavy",
            format!("Repeat the following text exactly, word for word:\n\n{PASSAGE}"),
        ),
        (
            "edit",
            "copy-heavy",
            "Fix the spelling mistakes in this text and return the corrected text:\n\n\
             The lighthouse stood on a rocky point at the edge of the bay. Every evening the \
             keper climbed the spiral stairs, trimmed the wick, and lit the grate lamp. Ships \
             far out at sea watched for its beam."
                .to_string(),
        ),
        (
            "summarize",
            "copy-heavy",
            format!("Summarize this text in one sentence:\n\n{PASSAGE}"),
        ),
        (
            "story",
            "open-ended",
            "Write a short story about a lighthouse keeper who finds a message in a bottle."
                .to_string(),
        ),
    ]
}

/// One measured generation.
#[derive(Debug, Clone, serde::Serialize)]
struct Measured {
    ids: Vec<u32>,
    tok_s: f64,
    tokens_per_pass: f64,
    layer_reads_per_token: f64,
    accepted: u64,
    drafted: u64,
}

fn measure(host: &mut Host, prompt: &[u32], n: usize, draft: DraftChoice) -> Result<Measured> {
    let opts = GenerateOptions {
        max_tokens: n + 1,
        draft,
        ..GenerateOptions::default()
    };
    let out = block_on(host.generate(prompt, &opts, &mut |_| true))?;
    let s = &out.report;
    // The first token comes from the prompt's pass; the rest each cost part of a forward pass.
    let ms: f64 = s.token_ms.iter().sum();
    Ok(Measured {
        tok_s: crate::generate::rate(out.ids.len().saturating_sub(1), ms),
        tokens_per_pass: s.decode.tokens_per_pass,
        layer_reads_per_token: s.layer_reads_per_token,
        accepted: s.decode.accepted,
        drafted: s.decode.drafted,
        ids: out.ids,
    })
}

/// Runs the comparison; `streaming_lru` is the LRU capacity of the streamed case.
pub fn run(
    path: &Path,
    spec: &str,
    n: usize,
    runs: usize,
    streaming_lru: usize,
    json: bool,
) -> Result<()> {
    if n == 0 || runs == 0 || streaming_lru == 0 {
        return Err("-n, --runs and --lru must be at least 1".into());
    }
    let cfg = DraftConfig::parse_spec(spec)?;
    let mut rows = Vec::new();
    for (mode, lru) in [("resident", usize::MAX), ("streaming", streaming_lru)] {
        let mut host = open_host_with(path, lru)?;
        if lru == usize::MAX {
            for l in 0..host.config().n_layers {
                block_on(host.load_layer(l))?;
            }
        }
        for (name, kind, text) in prompts() {
            // Base models without a chat template get the request as plain text.
            let prompt = match host.knot().meta.chat_template {
                Some(_) => {
                    let chat = host.chat_prompt(&[ChatMessage::new("user", text.as_str())])?;
                    host.tokenizer().encode(&chat)?
                }
                None => host.tokenizer().encode_with_bos(&format!("{text}\n\n"))?,
            };
            let (mut plain, mut spec_runs) = (Vec::new(), Vec::new());
            for r in 0..runs {
                for with in crate::bench::ab_order(r) {
                    let choice = match with {
                        true => DraftChoice::On(cfg.clone()),
                        false => DraftChoice::Off,
                    };
                    let m = measure(&mut host, &prompt, n, choice)?;
                    match with {
                        true => spec_runs.push(m),
                        false => plain.push(m),
                    }
                }
            }
            if let Some(bad) = spec_runs.iter().find(|m| m.ids != plain[0].ids) {
                return Err(format!(
                    "{mode} {name}: speculative tokens differ from plain ones: {:?} vs {:?}",
                    bad.ids, plain[0].ids
                )
                .into());
            }
            let med = |v: &[Measured], f: fn(&Measured) -> f64| median(v.iter().map(f).collect());
            let (p, s) = (med(&plain, |m| m.tok_s), med(&spec_runs, |m| m.tok_s));
            let kept = |f: fn(&Measured) -> u64| spec_runs.iter().map(f).sum::<u64>();
            rows.push(serde_json::json!({
                "mode": mode, "lru": if lru == usize::MAX { None } else { Some(lru) },
                "prompt": name, "kind": kind, "tokens": plain[0].ids.len(),
                "plain_tok_s": p, "draft_tok_s": s, "speedup": s / p,
                "plain_tokens_per_pass": med(&plain, |m| m.tokens_per_pass),
                "draft_tokens_per_pass": med(&spec_runs, |m| m.tokens_per_pass),
                "plain_layer_reads_per_token": med(&plain, |m| m.layer_reads_per_token),
                "draft_layer_reads_per_token": med(&spec_runs, |m| m.layer_reads_per_token),
                "accepted": kept(|m| m.accepted), "drafted": kept(|m| m.drafted),
            }));
        }
    }
    if json {
        let v = serde_json::json!({ "draft": spec, "n": n, "runs": runs, "results": rows });
        println!("{v}");
        return Ok(());
    }
    println!("speculative decoding ({spec}) vs plain greedy, same tokens, medians of {runs} interleaved runs (kept: draft tokens over all runs)");
    println!(
        "{:<10} {:<21} {:>6} {:>9} {:>9} {:>7} {:>13} {:>17} {:>9}",
        "mode",
        "prompt",
        "tokens",
        "plain/s",
        "draft/s",
        "ratio",
        "tok/pass",
        "layer reads/tok",
        "kept"
    );
    for r in &rows {
        let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
        println!(
            "{:<10} {:<21} {:>6} {:>9.1} {:>9.1} {:>6.2}x {:>5.2} → {:<5.2} {:>7.1} → {:<7.1} {:>4}/{:<4}",
            r["mode"].as_str().unwrap_or(""),
            format!(
                "{} ({})",
                r["prompt"].as_str().unwrap_or(""),
                r["kind"].as_str().unwrap_or("")
            ),
            r["tokens"],
            f("plain_tok_s"),
            f("draft_tok_s"),
            f("speedup"),
            f("plain_tokens_per_pass"),
            f("draft_tokens_per_pass"),
            f("plain_layer_reads_per_token"),
            f("draft_layer_reads_per_token"),
            r["accepted"],
            r["drafted"],
        );
    }
    Ok(())
}
