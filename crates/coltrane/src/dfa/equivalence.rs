//! The walk's shortcuts (a free string's safe tokens at once, at the root or below a token's
//! prefix) against the plain trie walk: the same masks, budget-bound or not, on every schema of
//! the real-tools corpus (tests/fixtures/mcp-tools), `json` and a schema of patterns, along
//! random walks over a vocabulary cut from those documents.

use super::*;
use crate::vocab::TokenKind;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::PathBuf;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as usize
    }
}

fn corpus() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/mcp-tools");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/mcp-tools")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for p in files {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).unwrap();
        for t in v["tools"].as_array().expect("tools") {
            out.push(t["inputSchema"].clone());
        }
    }
    out
}

/// Tokens cut from `texts` (every piece of 1 to 5 bytes at a few offsets, so keys, values and
/// punctuation come whole and split), with escapes, multi-byte characters, lone UTF-8 bytes
/// and whitespace runs; an end-of-text token last.
fn vocab(texts: &[String]) -> Vocab {
    let mut pieces: BTreeSet<Vec<u8>> = BTreeSet::new();
    for t in texts {
        let b = t.as_bytes();
        for i in (0..b.len()).step_by(3) {
            for n in 1..=5 {
                if i + n <= b.len() {
                    pieces.insert(b[i..i + n].to_vec());
                }
            }
        }
    }
    for extra in [
        "\"", "\",", "\":", "\":\"", "\\\"", "\\\\", "\\n", "\\u00e9", "\\ud83d", "\\ude00", "é",
        "日本", "😀", " \"", "\"}", "{\"", "\":[", "\":{\"", "a\"", "x\",\"", "  ", "\n", "\n  ",
        "0", "12", "-1", "1.5", "e+", "true", "null", ":", ",", "-", "_", "@", "/", "://", "T",
    ] {
        pieces.insert(extra.as_bytes().to_vec());
    }
    for b in 0x80..=0xffu8 {
        pieces.insert(vec![b]);
    }
    let mut tokens: Vec<(TokenKind, &[u8])> = pieces
        .iter()
        .map(|p| (TokenKind::Text, p.as_slice()))
        .collect();
    tokens.push((TokenKind::Special, b"<eos>"));
    let eos = tokens.len() as u32 - 1;
    Vocab::new(tokens, &[eos]).unwrap()
}

/// Walks `steps` random tokens from the start, comparing at each the masks of `fast` and
/// `plain` (no budget, and budgets around the closing cost).
fn compare(v: &Vocab, schema: &Schema, seed: u64, steps: usize) -> usize {
    let mut fast = Dfa::new(schema.clone());
    let mut plain = Dfa::new(schema.clone());
    plain.plain_walks();
    let (mut a, mut b) = (fast.start(), plain.start());
    let mut rng = Rng(seed);
    let mut checked = 0;
    for _ in 0..steps {
        let close = fast.close(a) as usize;
        assert_eq!(close, plain.close(b) as usize);
        for remaining in [None, Some(close / 2 + 1), Some(close + 2)] {
            let (m, info) = fast.mask_ref(v, a, remaining);
            let m = m.clone();
            let (r, rinfo) = plain.mask_ref(v, b, remaining);
            assert_eq!(&m, r, "{remaining:?}");
            assert_eq!(
                (info.budget_bound, info.over_budget),
                (rinfo.budget_bound, rinfo.over_budget)
            );
            checked += 1;
        }
        let (m, _) = fast.mask_ref(v, a, None);
        let allowed: Vec<u32> = m.iter().filter(|&id| !v.is_eos(id)).collect();
        if allowed.is_empty() {
            break;
        }
        let id = allowed[rng.next() % allowed.len()];
        a = fast.walk(a, v.token_bytes(id));
        b = plain.walk(b, v.token_bytes(id));
    }
    checked
}

#[test]
fn shortcuts_give_the_plain_walks_masks() {
    let mut schemas = corpus();
    assert!(schemas.len() > 200, "the corpus is there");
    schemas.push(json!({"type": "object", "properties": {
        "id": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{2,30}$"},
        "when": {"type": "string", "format": "date-time"},
        "site": {"type": "string", "format": "uri", "maxLength": 200},
        "mail": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}},
        "free": {"type": "string", "minLength": 3},
        "any": {}},
        "required": ["id", "site"]}));
    let texts: Vec<String> = schemas.iter().take(60).map(|s| s.to_string()).collect();
    let v = vocab(&texts);
    let mut checked = compare(&v, &Schema::any(), 1, 200);
    for (i, s) in schemas.iter().enumerate() {
        let Ok(schema) = crate::compile_schema(s) else {
            continue;
        };
        for seed in 0..2 {
            checked += compare(&v, &schema, (i * 2 + seed) as u64, 40);
        }
    }
    assert!(checked > 10_000, "{checked}");
}

#[test]
fn pattern_states_share_masks_only_where_alike() {
    // Runs of letters up to ten long: near a `maxLength` the long ones stop fitting, so states
    // a few characters apart differ only deep down.
    let mut pieces: Vec<String> = Vec::new();
    for c in ["a", "b", "z", "-", ".", "/", "0", "7", "é"] {
        for n in 1..=10 {
            pieces.push(c.repeat(n));
        }
    }
    for p in [
        "\"", "\",", "\"}", "ab\"", "://", "http", "https://", "x.y", "@", ":", "{", "}",
    ] {
        pieces.push(p.to_string());
    }
    let mut tokens: Vec<(TokenKind, &[u8])> = pieces
        .iter()
        .map(|p| (TokenKind::Text, p.as_bytes()))
        .collect();
    tokens.push((TokenKind::Special, b"<eos>"));
    let eos = tokens.len() as u32 - 1;
    let v = Vocab::new(tokens, &[eos]).unwrap();
    let schemas = [
        json!({"type": "string", "pattern": "^[a-z]+$", "maxLength": 12}),
        json!({"type": "string", "pattern": "^[a-z]+$", "minLength": 9, "maxLength": 30}),
        json!({"type": "string", "pattern": "^[a-z][a-z0-9.-]{2,14}$"}),
        json!({"type": "string", "format": "uri", "maxLength": 40}),
        json!({"type": "string", "pattern": "^(ab|b)+z?$", "maxLength": 25}),
        json!({"type": "array", "items": {"type": "string", "pattern": "^[a-z]*$", "maxLength": 11}}),
    ];
    let mut checked = 0;
    for s in &schemas {
        let schema = crate::compile_schema(s).unwrap();
        for seed in 0..40 {
            checked += compare(&v, &schema, seed, 30);
        }
    }
    assert!(checked > 3_000, "{checked}");
}
