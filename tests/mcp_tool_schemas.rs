//! The tools real MCP servers list (tests/fixtures/mcp-tools: tools/list answers of 17 public
//! servers, collected by scripts/collect-tool-schemas.mjs with their package and version): every
//! tool's input schema compiles for COLTRANE, and documents the matcher accepts under it — its
//! shortest, and two random walks of admissible bytes — validate under an independent validator
//! (the `jsonschema` crate, formats asserted). `-- --nocapture` prints the table.

use coltrane::compile_schema;
use knot_suite::tool_corpus::{tools, walk};
use serde_json::Value;
use std::collections::BTreeMap;

#[test]
fn every_listed_tool_schema_compiles() {
    let all = tools();
    let mut per_server: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut failed = Vec::new();
    for t in &all {
        let e = per_server.entry(&t.server).or_default();
        e.0 += 1;
        match compile_schema(&t.schema) {
            Ok(_) => e.1 += 1,
            Err(err) => failed.push(format!("{}/{}: {err}", t.server, t.name)),
        }
    }
    println!("{:<22} {:>6} {:>9}", "server", "tools", "compiled");
    for (server, (n, ok)) in &per_server {
        println!("{server:<22} {n:>6} {ok:>9}");
    }
    println!("{} tools, {} refused", all.len(), failed.len());
    for f in &failed {
        println!("  {f}");
    }
    assert!(all.len() >= 30 && per_server.len() >= 8);
    assert!(
        failed.is_empty(),
        "{} of {} refused",
        failed.len(),
        all.len()
    );
}

#[test]
fn values_the_matcher_admits_validate_against_the_real_schemas() {
    let mut checked = 0;
    for t in tools() {
        let what = format!("{}/{}", t.server, t.name);
        let compiled = compile_schema(&t.schema).unwrap_or_else(|e| panic!("{what}: {e}"));
        // Formats asserted, whatever the draft's default: COLTRANE enforces those it knows.
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&t.schema)
            .unwrap_or_else(|e| panic!("{what}: jsonschema: {e}"));
        for (seed, wander) in [(1, 0), (2, 40), (3, 160)] {
            // A random exponent can leave f64's range (RFC 8259 allows it; serde_json cannot
            // hold it): such a walk is replaced by the next seed's.
            let (doc, value) = (0..8)
                .find_map(|k| {
                    let doc = walk(&compiled, seed + 1000 * k, wander);
                    match serde_json::from_str::<Value>(&doc) {
                        Ok(v) => Some((doc, v)),
                        Err(e) if e.to_string().contains("number out of range") => None,
                        Err(e) => panic!("{what}: {doc}: {e}"),
                    }
                })
                .unwrap_or_else(|| panic!("{what}: every walk overflowed"));
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{what}: {doc} does not validate: {errors:?}"
            );
            checked += 1;
        }
    }
    println!("{checked} documents generated under real tool schemas, every one valid");
}
