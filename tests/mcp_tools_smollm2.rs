//! SmolLM2-135M-Instruct calling real tools: for tools of the corpus in
//! tests/fixtures/mcp-tools (public MCP servers' tools/list answers), the model is asked to call
//! the tool by name and writes its arguments under the tool's input schema (COLTRANE's
//! `json_schema` preset, greedy, at most 64 tokens); the arguments must parse and validate under
//! the `jsonschema` crate with formats asserted. CI runs the first tool of six servers; the whole
//! corpus (212 tools) is `cargo test --release --test mcp_tools_smollm2 -- --ignored --nocapture`.
//! Skips without the model unless KNOT_REQUIRE_MODELS is set.

#[path = "../benches/coltrane_eval.rs"]
#[allow(dead_code)]
mod eval;

use eval::{options, parse, Lm, MODEL};
use knot_suite::tool_corpus::{tools, Tool};
use knot_suite::KnotFile;
use serde_json::json;

/// Calls each tool once; every argument object validates. Returns how many were called.
fn call_all(tools: &[Tool]) -> usize {
    let Some(path) = knot_suite::require_model(MODEL) else {
        return 0;
    };
    let file = KnotFile::read(&path);
    let mut lm = Lm::new(&file);
    for Tool {
        server,
        name,
        description,
        schema,
    } in tools
    {
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
fn the_first_tool_of_six_servers() {
    // Servers whose first tools take bounds, enums, nested objects and arrays (minutes add up:
    // the whole corpus is the ignored test below).
    const SERVERS: &[&str] = &[
        "everything",
        "filesystem",
        "github",
        "mongodb",
        "notion",
        "playwright",
    ];
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<Tool> = tools()
        .into_iter()
        .filter(|t| SERVERS.contains(&t.server.as_str()) && seen.insert(t.server.clone()))
        .collect();
    assert_eq!(firsts.len(), SERVERS.len());
    let n = call_all(&firsts);
    eprintln!("{n} tools called, every argument object valid");
}

#[test]
#[ignore = "the whole corpus: minutes; run by hand with --release"]
fn every_tool_of_the_corpus() {
    let n = call_all(&tools());
    eprintln!("{n} tools called, every argument object valid");
}
