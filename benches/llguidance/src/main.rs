//! JSON-mode mask time: COLTRANE against the llguidance crate, side by side, on the same
//! tokenizer and the same JSON documents.
//!
//! What is measured: for each model given (its tokenizer and end-of-text ids, read from the
//! `.knot` file), each document in `docs::DOCS` is encoded with the model's own tokenizer and
//! forced through a fresh matcher of each library, one token at a time. At every position, and
//! once more after the last token (where end-of-text must be allowed), one mask is timed with
//! `std::time::Instant`:
//!
//! - COLTRANE: `Coltrane::compute_mask(None)` with `Preset::Json` (every tier composed);
//! - llguidance: `Matcher::compute_mask_or_eos()` for a JSON schema `{}` whose options make it
//!   accept the same documents (`llg.rs`).
//!
//! The forced token is then checked against both masks (a token either refuses is reported with
//! the text before it) and each matcher consumes it. Nothing is pre-warmed: the per-tokenizer
//! indexes (COLTRANE's `Index`; llguidance's `TokTrie` and `ParserFactory`) are built once, as
//! a server builds them, and timed apart; every document gets new matchers, so each first visit
//! of a state (lazy DFA states, cached masks) is inside the numbers. The libraries run in
//! separate passes over a document, alternating which goes first, so neither evicts the other's
//! caches between steps. In the first run the two whole masks are also compared at every
//! position, and every difference is put down to a known difference of the two JSON languages
//! or reported as unexplained.
//!
//! Byte-level probes (`docs::probes`) then feed edge cases to both, one single-byte token per
//! byte, and show where the two languages differ from each other and from RFC 8259.
//!
//! Usage: `json-mask-bench [--json] [--runs N] MODEL.knot...` (see scripts/bench-json-mask.sh).
//! `--runs N` repeats the whole document set N times (fresh matchers each time) for more samples.

mod docs;
mod llg;
mod measure;

use measure::{Model, Report, Summary, Verdict, Why};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

struct Args {
    models: Vec<PathBuf>,
    json: bool,
    runs: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        models: Vec::new(),
        json: false,
        runs: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => args.json = true,
            "--runs" => {
                args.runs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| usage("--runs needs a positive integer"));
            }
            "-h" | "--help" => usage(""),
            _ if a.starts_with('-') => usage(&format!("unknown flag {a}")),
            _ => args.models.push(PathBuf::from(a)),
        }
    }
    if args.models.is_empty() {
        usage("give at least one .knot model");
    }
    args
}

fn usage(err: &str) -> ! {
    if !err.is_empty() {
        eprintln!("error: {err}");
    }
    eprintln!("usage: json-mask-bench [--json] [--runs N] MODEL.knot...");
    std::process::exit(if err.is_empty() { 0 } else { 2 })
}

fn load(path: &Path) -> Result<Model, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let knot = knot::Knot::from_bytes(&bytes).map_err(|e| e.to_string())?;
    let span = knot.meta.tokenizer.blob;
    let start = (knot.payload_offset + span.offset) as usize;
    let blob = bytes
        .get(start..start + span.size as usize)
        .ok_or("the tokenizer blob is outside the file")?;
    let data: knot::TokenizerData = serde_json::from_slice(blob).map_err(|e| e.to_string())?;
    let tokenizer = engine::tokenizer::Tokenizer::from_data(&data).map_err(|e| e.to_string())?;
    let mut eos_ids = knot.meta.config.eos_ids.clone();
    if eos_ids.is_empty() {
        eos_ids.extend(tokenizer.eos_id());
    }
    if eos_ids.is_empty() {
        return Err("the model names no end-of-text id".into());
    }
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    Ok(Model {
        name,
        tokenizer,
        eos_ids,
    })
}

fn verdict(v: Verdict, len: usize) -> String {
    match v {
        Verdict::Accepts => "accepts".to_string(),
        Verdict::RefusesAt(i) if i == len => "refuses (incomplete)".to_string(),
        Verdict::RefusesAt(i) => format!("refuses byte {i}"),
    }
}

fn load_average() -> Option<String> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn summary_json(s: &Summary) -> Value {
    json!({ "n": s.n, "p50_us": s.p50, "p90_us": s.p90, "p99_us": s.p99,
            "mean_us": s.mean, "max_us": s.max })
}

impl Report {
    /// llguidance's p50 over COLTRANE's: at least 1 means COLTRANE is not slower.
    fn ratio(&self) -> f64 {
        self.llguidance.p50 / self.coltrane.p50
    }

    /// Probes where the libraries disagree with each other or with RFC 8259.
    fn odd_probes(&self) -> impl Iterator<Item = &measure::ProbeResult> {
        self.probes.iter().filter(|p| {
            let valid = p.rfc == docs::Rfc::Valid;
            let ok = |v: Verdict| (v == Verdict::Accepts) == valid;
            p.coltrane != p.llguidance || !ok(p.coltrane) || !ok(p.llguidance)
        })
    }

    fn print(&self) {
        println!(
            "\n== {} (vocab {}, end-of-text {:?}) ==",
            self.model, self.vocab, self.eos_ids
        );
        println!(
            "{} documents x {} run(s): {} masks per library (one per token, plus end-of-text)",
            self.docs, self.runs, self.coltrane.n
        );
        if !self.respelled.is_empty() {
            let list: Vec<String> = self
                .respelled
                .iter()
                .map(|(t, n)| format!("{t} x{n}"))
                .collect();
            println!(
                "special-kind tokens in the tokenizer's encodings, respelled without them: {}",
                list.join(", ")
            );
        }
        println!(
            "\n{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
            "mask (µs)", "p50", "p90", "p99", "mean", "max", "first mean"
        );
        for (name, s, f) in [
            ("COLTRANE", &self.coltrane, &self.coltrane_first),
            ("llguidance", &self.llguidance, &self.llguidance_first),
        ] {
            println!(
                "{name:<12} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>11.1}",
                s.p50, s.p90, s.p99, s.mean, s.max, f.mean
            );
        }
        println!(
            "p50 ratio llguidance/COLTRANE: {:.2} ({})",
            self.ratio(),
            match self.ratio() >= 1.0 {
                true => "COLTRANE not slower",
                false => "COLTRANE slower",
            }
        );
        println!(
            "consuming the token (µs, not part of the mask): COLTRANE accept p50 {:.2} p99 {:.2}, \
             llguidance consume_token p50 {:.2} p99 {:.2}",
            self.coltrane_advance.p50,
            self.coltrane_advance.p99,
            self.llguidance_advance.p50,
            self.llguidance_advance.p99
        );
        println!(
            "set-up: COLTRANE vocab {:.1} ms, matcher {:.1} µs p50; llguidance trie {:.1} ms, \
             factory {:.1} ms, grammar + matcher {:.1} µs p50",
            self.coltrane_vocab_ms,
            self.coltrane_new.p50,
            self.llguidance_trie_ms,
            self.llguidance_factory_ms,
            self.llguidance_new.p50
        );

        println!("\nforced tokens refused: {}", self.refusals.len());
        for r in &self.refusals {
            println!(
                "  {} refuses {} in {} @{} after {}",
                r.library,
                r.token,
                r.doc,
                r.position,
                measure::show(&r.prefix)
            );
        }
        let d = &self.diffs;
        println!(
            "whole masks identical at {} of {} positions; where they differ:",
            d.compared - d.positions,
            d.compared
        );
        for (why, (positions, slots)) in Why::ALL.iter().zip(d.by_why) {
            if slots > 0 || *why == Why::Other {
                println!(
                    "  {:<40} {positions:>5} positions, {slots:>7} tokens",
                    why.label()
                );
            }
        }
        if d.only_llguidance > 0 {
            println!("  (of which only llguidance allows {})", d.only_llguidance);
        }
        for (at, what) in &d.examples {
            println!("    {at}: {what}");
        }

        let odd: Vec<_> = self.odd_probes().collect();
        println!(
            "\nprobes, one byte per token: {} of {} agree with RFC 8259 in both; the others:",
            self.probes.len() - odd.len(),
            self.probes.len()
        );
        for p in odd {
            let rfc = match p.rfc {
                docs::Rfc::Valid => "valid",
                docs::Rfc::Invalid => "invalid",
            };
            println!(
                "  {:<28} RFC {rfc:<8} COLTRANE {:<22} llguidance {}",
                p.name,
                verdict(p.coltrane, p.bytes.len()),
                verdict(p.llguidance, p.bytes.len())
            );
        }
        if !self.probes_skipped.is_empty() {
            println!(
                "  (no single-byte tokens to spell: {})",
                self.probes_skipped.join(", ")
            );
        }
    }

    fn to_json(&self) -> Value {
        let d = &self.diffs;
        json!({
            "model": self.model,
            "vocab": self.vocab,
            "eos_ids": self.eos_ids,
            "documents": self.docs,
            "runs": self.runs,
            "masks_per_library": self.coltrane.n,
            "respelled_special_tokens": self.respelled.iter()
                .map(|(t, n)| json!({ "token": t, "count": n })).collect::<Vec<_>>(),
            "coltrane": summary_json(&self.coltrane),
            "llguidance": summary_json(&self.llguidance),
            "p50_ratio_llguidance_over_coltrane": self.ratio(),
            "advance": {
                "coltrane_accept": summary_json(&self.coltrane_advance),
                "llguidance_consume_token": summary_json(&self.llguidance_advance),
            },
            "first_mask": {
                "coltrane": summary_json(&self.coltrane_first),
                "llguidance": summary_json(&self.llguidance_first),
            },
            "setup": {
                "coltrane_vocab_ms": self.coltrane_vocab_ms,
                "coltrane_matcher": summary_json(&self.coltrane_new),
                "llguidance_trie_ms": self.llguidance_trie_ms,
                "llguidance_factory_ms": self.llguidance_factory_ms,
                "llguidance_matcher": summary_json(&self.llguidance_new),
            },
            "refusals": self.refusals.iter().map(|r| json!({
                "library": r.library, "doc": r.doc, "position": r.position,
                "token": r.token, "prefix": r.prefix,
            })).collect::<Vec<_>>(),
            "mask_diffs": {
                "compared": d.compared,
                "positions": d.positions,
                "by_reason": Why::ALL.iter().zip(d.by_why).map(|(w, (p, s))| json!({
                    "reason": w.label(), "positions": p, "tokens": s,
                })).collect::<Vec<_>>(),
                "only_llguidance": d.only_llguidance,
                "unexplained_examples": d.examples.iter()
                    .map(|(a, w)| json!({ "at": a, "what": w })).collect::<Vec<_>>(),
            },
            "probes": self.probes.iter().map(|p| json!({
                "name": p.name,
                "input": String::from_utf8_lossy(&p.bytes),
                "rfc_valid": p.rfc == docs::Rfc::Valid,
                "coltrane": verdict(p.coltrane, p.bytes.len()),
                "llguidance": verdict(p.llguidance, p.bytes.len()),
            })).collect::<Vec<_>>(),
            "probes_skipped": self.probes_skipped,
        })
    }
}

fn main() {
    let args = parse_args();
    let mut reports = Vec::new();
    for path in &args.models {
        let report = load(path).and_then(|model| {
            eprintln!("{}: measuring…", model.name);
            measure::run(&model, args.runs)
        });
        let report = report.unwrap_or_else(|e| {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1)
        });
        if !args.json {
            report.print();
        }
        reports.push(report);
    }
    let load = load_average();
    if args.json {
        let out = json!({
            "bench": "json-mask",
            "llguidance_version": "1.9.1",
            "load_average": load,
            "models": reports.iter().map(Report::to_json).collect::<Vec<_>>(),
        });
        println!("{out}");
    } else if let Some(l) = load {
        println!("\n(load average at the end: {l})");
    }
}
