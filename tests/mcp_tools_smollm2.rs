//! SmolLM2-135M-Instruct calling real tools: for tools of the corpus in
//! tests/fixtures/mcp-tools (public MCP servers' tools/list answers), the model is asked to call
//! the tool by name and writes its arguments under the tool's input schema (COLTRANE's
//! `json_schema` preset, greedy, at most 64 tokens); the arguments must parse and validate under
//! the `jsonschema` crate with formats asserted. CI runs the first tool of each server; the whole
//! corpus (212 tools) is `cargo test --release --test mcp_tools_smollm2 -- --ignored --nocapture`.
//! Skips without the model unless KNOT_REQUIRE_MODELS is set.

#[path = "../benches/coltrane_eval.rs"]
#[allow(dead_code)]
mod eval;

use eval::{options, parse, Lm, MODEL};
use knot_suite::KnotFile;
use serde_json::{json, Value};
use std::path::PathBuf;

/// (server, tool name, description, input schema), every tool of every server.
fn corpus() -> Vec<(String, String, String, Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-tools");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/mcp-tools")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for p in files {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
        let server = v["server"].as_str().unwrap_or_default().to_string();
        for t in v["tools"].as_array().expect("tools") {
            out.push((
                server.clone(),
                t["name"].as_str().unwrap_or_default().to_string(),
                t["description"].as_str().unwrap_or_default().to_string(),
                t["inputSchema"].clone(),
            ));
        }
    }
    out
}

/// Calls each tool once; every argument object validates. Returns how many were called.
fn call_all(tools: &[(String, String, String, Value)]) -> usize {
    let Some(path) = knot_suite::require_model(MODEL) else {
        return 0;
    };
    let file = KnotFile::read(&path);
    let mut lm = Lm::new(&file);
    for (server, name, description, schema) in tools {
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .unwrap_or_else(|e| panic!("{server}/{name}: jsonschema: {e}"));
        let short: String = description.chars().take(120).collect();
        let prompt =
            format!("Call the tool `{name}` ({short}). Write its arguments as a JSON object.");
        let c = json!({ "preset": "json_schema", "schema": schema });
        let o = lm.generate(&prompt, &options(None, 64, Some(c)));
        let what = format!("{server}/{name}: {:?}", o.text);
        let value = parse(&o.text).unwrap_or_else(|| panic!("does not parse: {what}"));
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "invalid ({errors:?}): {what}");
    }
    tools.len()
}

#[test]
fn the_first_tool_of_each_server() {
    let all = corpus();
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<_> = all
        .into_iter()
        .filter(|t| seen.insert(t.0.clone()))
        .collect();
    let n = call_all(&firsts);
    eprintln!("{n} tools called, every argument object valid");
}

#[test]
#[ignore = "the whole corpus: minutes; run by hand with --release"]
fn every_tool_of_the_corpus() {
    let n = call_all(&corpus());
    eprintln!("{n} tools called, every argument object valid");
}
