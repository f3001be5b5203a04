//! The tools real MCP servers list (tests/fixtures/mcp-tools: tools/list answers of 17 public
//! servers, collected by scripts/collect-tool-schemas.mjs with their package and version): every
//! tool's input schema compiles for COLTRANE, and a value generated under it validates against
//! the schema with an independent validator (the `jsonschema` crate): the shortest value the
//! matcher can close, and the values its closing path writes. `-- --nocapture` prints the table.

use coltrane::compile_schema;
use coltrane::machine::Thread;
use coltrane::schema::{Schema, INF};
use serde_json::Value;
use std::path::PathBuf;

fn corpus() -> Vec<(String, Vec<(String, Value)>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-tools");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/mcp-tools")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
            let tools = v["tools"]
                .as_array()
                .expect("tools")
                .iter()
                .map(|t| {
                    (
                        t["name"].as_str().unwrap_or_default().to_string(),
                        t["inputSchema"].clone(),
                    )
                })
                .collect();
            (v["server"].as_str().unwrap_or_default().to_string(), tools)
        })
        .collect()
}

#[test]
fn every_listed_tool_schema_compiles() {
    let mut total = 0;
    let mut failed = Vec::new();
    println!("{:<22} {:>6} {:>9}", "server", "tools", "compiled");
    for (server, tools) in corpus() {
        let mut ok = 0;
        for (name, schema) in &tools {
            match compile_schema(schema) {
                Ok(_) => ok += 1,
                Err(e) => failed.push(format!("{server}/{name}: {e}")),
            }
        }
        total += tools.len();
        println!("{server:<22} {:>6} {ok:>9}", tools.len());
    }
    println!("{} tools, {} refused", total, failed.len());
    for f in &failed {
        println!("  {f}");
    }
    assert!(total >= 30);
    assert!(failed.is_empty(), "{} of {total} refused", failed.len());
}

/// The live threads after byte `b` (empty: the byte is refused).
fn step(schema: &Schema, state: &[Thread], b: u8) -> Vec<Thread> {
    let mut next = Vec::new();
    for t in state.iter().cloned() {
        t.step(schema, b, &mut next);
    }
    next.sort();
    next.dedup();
    next
}

fn close(schema: &Schema, state: &[Thread]) -> u32 {
    state
        .iter()
        .map(|t| t.close_bytes(schema))
        .min()
        .unwrap_or(INF)
}

/// A document the matcher accepts: a walk that takes random admissible bytes (of printable
/// ASCII and a few UTF-8 ones) for up to `wander` bytes, then the cheapest way to the end.
fn walk(schema: &Schema, seed: u64, wander: usize) -> String {
    const BYTES: &[u8] = b" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";
    let mut rng = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next_rand = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as usize
    };
    let mut state = vec![Thread::start(schema)];
    let mut out = Vec::new();
    loop {
        let cost = close(schema, &state);
        assert!(
            cost < INF,
            "a live state with no completion after {:?}",
            String::from_utf8_lossy(&out)
        );
        if cost == 0
            && state.iter().any(|t| t.can_end(schema))
            && (out.len() >= wander || next_rand() % 8 == 0)
        {
            return String::from_utf8(out).expect("UTF-8");
        }
        let options: Vec<(u8, Vec<Thread>)> = BYTES
            .iter()
            .map(|&b| (b, step(schema, &state, b)))
            .filter(|(_, n)| !n.is_empty())
            .collect();
        if options.is_empty() {
            // Only the end may come (the top level's padding is bounded).
            assert!(
                state.iter().any(|t| t.can_end(schema)),
                "a dead end after {:?}",
                String::from_utf8_lossy(&out)
            );
            return String::from_utf8(out).expect("UTF-8");
        }
        let pick = if out.len() < wander {
            next_rand() % options.len()
        } else {
            // Closing: the byte that brings the end nearest.
            let best = options
                .iter()
                .map(|(_, n)| close(schema, n))
                .min()
                .unwrap_or(INF);
            options
                .iter()
                .position(|(_, n)| close(schema, n) == best)
                .unwrap_or(0)
        };
        let (b, next) = options.into_iter().nth(pick).expect("a choice");
        out.push(b);
        state = next;
        assert!(out.len() < 20_000, "no end in sight");
    }
}

#[test]
fn values_the_matcher_admits_validate_against_the_real_schemas() {
    let mut checked = 0;
    for (server, tools) in corpus() {
        for (name, schema) in &tools {
            let compiled =
                compile_schema(schema).unwrap_or_else(|e| panic!("{server}/{name}: {e}"));
            // Formats asserted, whatever the draft's default: COLTRANE enforces those it knows.
            let validator = jsonschema::options()
                .should_validate_formats(true)
                .build(schema)
                .unwrap_or_else(|e| panic!("{server}/{name}: jsonschema: {e}"));
            for (seed, wander) in [(1, 0), (2, 40), (3, 160)] {
                // A random exponent can leave f64's range (RFC 8259 allows it; serde_json cannot
                // hold it): such a walk is replaced by the next seed's.
                let (doc, value) = (0..8)
                    .find_map(|k| {
                        let doc = walk(&compiled, seed + 1000 * k, wander);
                        match serde_json::from_str::<Value>(&doc) {
                            Ok(v) => Some((doc, v)),
                            Err(e) if e.to_string().contains("number out of range") => None,
                            Err(e) => panic!("{server}/{name}: {doc}: {e}"),
                        }
                    })
                    .unwrap_or_else(|| panic!("{server}/{name}: every walk overflowed"));
                assert!(
                    validator.is_valid(&value),
                    "{server}/{name}: {doc} does not validate: {:?}",
                    validator
                        .iter_errors(&value)
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                );
                checked += 1;
            }
        }
    }
    println!("{checked} documents generated under real tool schemas, every one valid");
}
