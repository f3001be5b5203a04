//! COLTRANE's mask time on real vocabularies, natively and in wasm (the same code):
//!   cargo bench --bench coltrane_mask [-- model.knot ...]
//!   cargo bench --bench coltrane_mask --target wasm32-wasip1 -- "$PWD/models/…knot"
//! For each model (SmolLM2's 49152-token and Gemma-3's 262144-token vocabularies by default)
//! and each constraint (balanced + eddy; json; the three largest tool schemas of the real-tools
//! corpus, tests/fixtures/mcp-tools; a schema of patterns and formats), a text is forced token
//! by token through a fresh constraint, timing `compute_mask` at every step: p50, p90, p99 and
//! mean in microseconds, as one JSON line per (model, constraint). The first steps include
//! building cold caches. Then the compile time of every corpus schema: p50 and max.

use coltrane::{compile_schema, Coltrane, ColtraneConfig, EddyConfig, Preset};
use knot_suite::tool_corpus::{tools, walk};
use knot_suite::{model_path, KnotFile};
use serde_json::json;
use std::time::Instant;

const PROSE: &str = "Once upon a time (in a land far away) there lived a cat named \"Mittens\". \
    She liked [fish] and {naps}. Once upon a time there lived a cat. Once upon a time there lived \
    a cat. The end (really, the end: \"finally\").";

const DOCUMENT: &str = r#"{"name": "Mittens", "age": 3, "tags": ["cat", "orange", "naps"],
  "owner": {"first": "Zoë", "last": "Müller", "phones": [5551234, 5559876]},
  "bio": "Likes fish \"a lot\" and sleeps 14h a day.\nNever misses dinner.", "score": -12.5e-1,
  "vaccinated": true, "chip": null, "history": [{"year": 2021, "event": "adopted"},
  {"year": 2023, "event": "moved house"}]}"#;

/// Compile time of every corpus schema, milliseconds: p50 and the slowest.
fn compile_times() {
    let mut times: Vec<(f64, String)> = tools()
        .iter()
        .map(|t| {
            let start = Instant::now();
            compile_schema(&t.schema).expect("compiles");
            (
                start.elapsed().as_secs_f64() * 1e3,
                format!("{}/{}", t.server, t.name),
            )
        })
        .collect();
    times.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (slowest, which) = times.last().cloned().unwrap_or_default();
    println!(
        "{{\"target\":\"{}\",\"compile\":\"corpus\",\"schemas\":{},\"p50_ms\":{:.3},\"max_ms\":{slowest:.3},\"slowest\":\"{which}\"}}",
        std::env::consts::ARCH,
        times.len(),
        times[times.len() / 2].0
    );
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let paths: Vec<std::path::PathBuf> = if args.is_empty() {
        ["SmolLM2-135M-Instruct.Q4_1.knot", "gemma-3-270m.knot"]
            .iter()
            .map(|m| model_path(m))
            .filter(|p| p.exists())
            .collect()
    } else {
        args.iter().map(std::path::PathBuf::from).collect()
    };
    if paths.is_empty() {
        eprintln!("no model found: run scripts/prepare-model.sh --all");
        std::process::exit(1);
    }
    for path in paths {
        let file = KnotFile::read(&path);
        let tokenizer = file.tokenizer();
        let eos = file.knot.meta.config.eos_ids.clone();
        let t = Instant::now();
        let index = tokenizer.constraint_index(&eos).expect("vocab");
        let index_ms = t.elapsed().as_secs_f64() * 1e3;
        // Schema cases: the corpus' three largest schemas and one of patterns and formats, each
        // with a document its matcher accepts (a random walk, then the cheapest close).
        let mut corpus = tools();
        corpus.sort_by_key(|t| std::cmp::Reverse(t.schema.to_string().len()));
        let patterned = json!({"type": "object", "properties": {
            "id": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{2,30}$"},
            "when": {"type": "string", "format": "date-time"},
            "site": {"type": "string", "format": "uri", "maxLength": 200},
            "mail": {"type": "string", "format": "email"},
            "ip": {"type": "string", "format": "ipv4"},
            "key": {"type": "string", "format": "uuid"},
            "n": {"type": "integer", "minimum": 1, "maximum": 500}},
            "required": ["id", "when", "site", "mail", "ip", "key", "n"], "additionalProperties": false});
        let mut schema_cases: Vec<(String, serde_json::Value)> = corpus[..3]
            .iter()
            .map(|t| (format!("tool {}/{}", t.server, t.name), t.schema.clone()))
            .collect();
        schema_cases.push(("patterns and formats".into(), patterned));
        let schema_docs: Vec<(String, ColtraneConfig, String)> = schema_cases
            .into_iter()
            .map(|(name, schema)| {
                let doc = walk(&compile_schema(&schema).expect("compiles"), 7, 200);
                let cfg = ColtraneConfig {
                    preset: Some(Preset::JsonSchema(schema)),
                    ..ColtraneConfig::default()
                };
                (name, cfg, doc)
            })
            .collect();
        let cases = [
            (
                "balanced+eddy",
                ColtraneConfig {
                    preset: Some(Preset::Balanced),
                    eddy: Some(EddyConfig::default()),
                    ..ColtraneConfig::default()
                },
                PROSE,
            ),
            (
                "json",
                ColtraneConfig {
                    preset: Some(Preset::Json),
                    ..ColtraneConfig::default()
                },
                DOCUMENT,
            ),
        ];
        let cases = cases
            .into_iter()
            .map(|(n, c, t)| (n.to_string(), c, t.to_string()))
            .chain(schema_docs);
        for (name, cfg, text) in cases {
            let ids = tokenizer.encode(&text).unwrap();
            let mut times = Vec::new();
            // Three passes over fresh constraints: the first of each pays the cold caches.
            for _ in 0..3 {
                let mut c = Coltrane::new(index.clone(), cfg.clone()).expect("constraint");
                for (at, &id) in ids.iter().enumerate() {
                    let t = Instant::now();
                    let allowed = c.compute_mask(None).contains(id);
                    times.push(t.elapsed().as_secs_f64() * 1e6);
                    if !allowed {
                        eprintln!(
                            "before: {:?}",
                            tokenizer.decode(&ids[..at]).unwrap_or_default()
                        );
                    }
                    assert!(
                        allowed,
                        "{name}: token {id} {:?} refused",
                        String::from_utf8_lossy(index.vocab.token_bytes(id))
                    );
                    c.accept(id).expect("accept");
                }
            }
            let mean = times.iter().sum::<f64>() / times.len() as f64;
            times.sort_by(f64::total_cmp);
            println!(
                "{{\"target\":\"{}\",\"vocab\":{},\"constraint\":\"{name}\",\"steps\":{},\"p50_us\":{:.2},\"p90_us\":{:.2},\"p99_us\":{:.2},\"mean_us\":{:.2},\"index_ms\":{index_ms:.1}}}",
                std::env::consts::ARCH,
                index.vocab.len(),
                times.len(),
                percentile(&times, 0.5),
                percentile(&times, 0.9),
                percentile(&times, 0.99),
                mean
            );
        }
    }
    compile_times();
}
