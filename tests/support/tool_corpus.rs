//! The corpus of real tool schemas (tests/fixtures/mcp-tools: public MCP servers' tools/list
//! answers) and documents the matcher accepts under a schema, for the tests and the mask bench.

use coltrane::machine::Thread;
use coltrane::schema::{Schema, INF};
use serde_json::Value;
use std::path::PathBuf;

/// A tool of the corpus.
pub struct Tool {
    pub server: String,
    pub name: String,
    pub description: String,
    pub schema: Value,
}

/// Every tool of every server, servers in name order.
pub fn tools() -> Vec<Tool> {
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
            out.push(Tool {
                server: server.clone(),
                name: t["name"].as_str().unwrap_or_default().to_string(),
                description: t["description"].as_str().unwrap_or_default().to_string(),
                schema: t["inputSchema"].clone(),
            });
        }
    }
    out
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

/// A document the matcher accepts: a walk that takes random admissible bytes (printable ASCII)
/// for up to `wander` bytes, then the cheapest way to the end. Panics where a live state has
/// no completion or no byte continues one that cannot end (the matcher's own guarantees).
pub fn walk(schema: &Schema, seed: u64, wander: usize) -> String {
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
        let text = || String::from_utf8_lossy(&out).into_owned();
        assert!(
            cost < INF,
            "a live state with no completion after {:?}",
            text()
        );
        let can_end = state.iter().any(|t| t.can_end(schema));
        if cost == 0 && can_end && (out.len() >= wander || next_rand() % 8 == 0) {
            return String::from_utf8(out).expect("UTF-8");
        }
        let options: Vec<(u8, Vec<Thread>)> = BYTES
            .iter()
            .map(|&b| (b, step(schema, &state, b)))
            .filter(|(_, n)| !n.is_empty())
            .collect();
        if options.is_empty() {
            // Only the end may come (the top level's padding is bounded).
            assert!(can_end, "a dead end after {:?}", text());
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
