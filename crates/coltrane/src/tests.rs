use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;

mod part;

/// Every single byte as a token, a few hundred multi-byte fragments like a BPE vocabulary's,
/// special tokens, and end-of-text (the last id).
fn test_vocab() -> Vocab {
    let mut tokens: Vec<(TokenKind, Vec<u8>)> =
        (0..=255u8).map(|b| (TokenKind::Text, vec![b])).collect();
    let fragments = [
        "{\"", "\":", "\",", "\"}", "\":\"", "\", \"", "\": ", "},", "}]", "]}", "[{", "{}", "[]",
        "true", "false", "null", "\n  ", "\n    ", "  ", ", ", " \"", "name", "age", "the", " the",
        " cat", "ing", "12", "00", "0.", "e-", "\\n", "\\\"", "\\u00", "é", "€", "😀", " (", ")",
        "))", "((", " [", "].", ".\n", ". ", "!", "?\"", "Once", " upon", " a", " time", "\"a",
        "b\"", ":[", "],", "1,", "2]", "\"\"", "{\"a\":", "\n}", "\n]",
    ];
    for f in fragments {
        tokens.push((TokenKind::Text, f.as_bytes().to_vec()));
    }
    tokens.push((TokenKind::Special, b"<|im_start|>".to_vec()));
    tokens.push((TokenKind::Special, b"<|end|>".to_vec()));
    let eos = tokens.len() as u32 - 1;
    Vocab::new(tokens.iter().map(|(k, b)| (*k, b.as_slice())), &[eos]).unwrap()
}

fn test_index() -> Arc<Index> {
    Arc::new(Index::new(test_vocab()))
}

fn eos(v: &Vocab) -> u32 {
    v.eos_ids()[0]
}

/// Greedy longest-match tokenization with the test vocabulary.
fn tokenize(v: &Vocab, text: &[u8]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let (mut best, mut len) = (text[i] as u32, 1);
        for id in 256..v.len() as u32 {
            let b = v.token_bytes(id);
            if v.kind(id) == Some(TokenKind::Text) && b.len() > len && text[i..].starts_with(b) {
                best = id;
                len = b.len();
            }
        }
        out.push(best);
        i += len;
    }
    out
}

fn coltrane(cfg: ColtraneConfig) -> Coltrane {
    Coltrane::new(test_index(), cfg).unwrap()
}

fn preset(p: Preset) -> ColtraneConfig {
    ColtraneConfig {
        preset: Some(p),
        ..ColtraneConfig::default()
    }
}

/// Forces `ids` one by one: each must be in the mask, then is accepted. Returns the index of
/// the first token the mask refused.
fn force(c: &mut Coltrane, ids: &[u32], budget: Option<usize>) -> Option<usize> {
    for (i, &id) in ids.iter().enumerate() {
        let remaining = budget.map(|b| b - i);
        if !c.compute_mask(remaining).contains(id) {
            return Some(i);
        }
        c.accept(id).unwrap();
    }
    None
}

#[test]
fn json_mask_allows_the_document_and_then_only_end_of_text() {
    let mut c = coltrane(preset(Preset::Json));
    let v = test_vocab();
    let doc = br#"{"name": "Ann", "age": 12, "tags": ["a", {"b": null}], "ok": true}"#;
    assert_eq!(force(&mut c, &tokenize(&v, doc), None), None);
    assert!(c.can_end());
    let m = c.compute_mask(None).clone();
    assert!(m.contains(eos(&v)));
    // Only whitespace could still come.
    assert!(m
        .iter()
        .all(|id| id == eos(&v) || v.token_bytes(id).iter().all(|b| b.is_ascii_whitespace())));
    // Special tokens never, even inside strings.
    let mut c = coltrane(preset(Preset::Json));
    force(&mut c, &tokenize(&v, b"\"abc"), None);
    let special = v.len() as u32 - 2;
    assert!(!c.compute_mask(None).contains(special));
    assert!(!c.compute_mask(None).contains(eos(&v)));
    assert_eq!(c.accept(special), Err(ColtraneError::Forbidden(special)));
}

#[test]
fn json_within_a_budget_always_closes() {
    let v = test_vocab();
    for budget in [2usize, 3, 5, 8, 13] {
        let mut c = coltrane(preset(Preset::Json));
        // A model that always wants to open more arrays and objects: take the allowed token
        // that opens the most.
        let mut text = Vec::new();
        for step in 0..budget {
            let m = c.compute_mask(Some(budget - step)).clone();
            let pick = m
                .iter()
                .filter(|&id| id != eos(&v))
                .max_by_key(|&id| {
                    v.token_bytes(id)
                        .iter()
                        .filter(|&&b| b == b'[' || b == b'{')
                        .count()
                })
                .unwrap_or(eos(&v));
            if pick == eos(&v) {
                break;
            }
            text.extend_from_slice(v.token_bytes(pick));
            c.accept(pick).unwrap();
        }
        assert!(
            c.can_end(),
            "budget {budget}: {:?}",
            String::from_utf8_lossy(&text)
        );
        serde_json::from_slice::<Value>(&text).unwrap();
    }
}

#[test]
fn schema_documents_validate() {
    let v = test_vocab();
    let schema = json!({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": false});
    let mut c = coltrane(preset(Preset::JsonSchema(schema.clone())));
    assert_eq!(
        force(
            &mut c,
            &tokenize(&v, r#"{"name":"é","age":-3}"#.as_bytes()),
            None
        ),
        None
    );
    assert!(c.can_end());
    let mut c = coltrane(preset(Preset::JsonSchema(schema)));
    // `{"age":1}` misses the name: `}` is refused.
    assert_eq!(force(&mut c, &tokenize(&v, br#"{"age":1}"#), None), Some(4));
    let err = Coltrane::new(
        test_index(),
        preset(Preset::JsonSchema(
            json!({"type": "string", "pattern": "(a)\\1"}),
        )),
    )
    .err();
    assert!(matches!(
        err,
        Some(ColtraneError::Schema(SchemaError::Unsupported { .. }))
    ));
    // A ref loop that enters no object or array: an error, not a matcher recursing forever.
    let err = Coltrane::new(
        test_index(),
        preset(Preset::JsonSchema(
            json!({"anyOf": [{"$ref": "#/$defs/d"}, {"type": "null"}],
            "$defs": {"d": {"$ref": "#/$defs/d"}}}),
        )),
    )
    .err();
    assert!(matches!(
        err,
        Some(ColtraneError::Schema(SchemaError::Loop { .. }))
    ));
}

#[test]
fn the_report_names_relaxations_and_formats_kept_as_annotations() {
    let c = coltrane(preset(Preset::JsonSchema(json!({
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "x-calendar"},
            "id": {"type": "string", "format": "uuid", "pattern": "^[a-f0-9-]+$"},
            "n": {"oneOf": [{"minimum": 1}, {"minimum": 2}, {"minimum": 3}, {"minimum": 4},
                {"minimum": 5}]}
        }
    }))));
    let m = c.metrics();
    assert_eq!(
        m.annotations,
        [
            "format \"uuid\" at #/properties/id: an annotation (beside a pattern, which rules)",
            "format \"x-calendar\" at #/properties/when: an annotation (not a format COLTRANE \
             enforces)"
        ]
    );
    assert_eq!(m.relaxations.len(), 1);
    assert!(m.relaxations[0].starts_with("oneOf at #/properties/n:"));
    let plain = coltrane(preset(Preset::JsonSchema(
        json!({"type": "string", "format": "date"}),
    )));
    assert!(plain.metrics().annotations.is_empty() && plain.metrics().relaxations.is_empty());
}

#[test]
fn balanced_closes_folds_and_ends_only_at_closure() {
    let v = test_vocab();
    let mut c = coltrane(preset(Preset::Balanced));
    let ids = tokenize(&v, b"f((x) [y");
    assert_eq!(force(&mut c, &ids, None), None);
    let m = c.compute_mask(None).clone();
    assert!(!m.contains(eos(&v)) && !m.contains(b')' as u32) && m.contains(b']' as u32));
    assert!(
        !m.contains(v.len() as u32 - 2),
        "special tokens are never allowed"
    );
    // Two tokens left: only what closes `[` and `(` in time.
    let m = c.compute_mask(Some(2)).clone();
    assert!(m.contains(b']' as u32) && !m.contains(b'a' as u32) && !m.contains(b'[' as u32));
    for id in tokenize(&v, b"])") {
        c.accept(id).unwrap();
    }
    assert!(c.can_end() && c.compute_mask(None).contains(eos(&v)));
    // Depth bound.
    let mut c = coltrane(ColtraneConfig {
        max_depth: 2,
        ..preset(Preset::Balanced)
    });
    force(&mut c, &tokenize(&v, b"(("), None);
    assert!(!c.compute_mask(None).contains(b'(' as u32));
    // Quotes hide brackets.
    let mut c = coltrane(preset(Preset::Balanced));
    force(&mut c, &tokenize(&v, b"say \"(\""), None);
    assert!(c.can_end());
}

#[test]
fn the_fallback_relaxes_soft_tiers_but_never_hard_ones() {
    let v = test_vocab();
    let n = v.len();
    let mut c = coltrane(preset(Preset::Balanced));
    // The model is sure of `)` at depth 0: the fold tier relaxes, the token goes through.
    let mut logits = vec![0.0f32; n];
    logits[b')' as usize] = 20.0;
    let r = c.apply(&mut logits, None, None);
    assert!(r.fallback && r.relaxed >= 1);
    assert!(logits[b')' as usize].is_finite());
    c.accept(b')' as u32).unwrap();
    assert_eq!(c.metrics().fold_violations, 1);
    assert_eq!(c.metrics().fallbacks, 1);
    // With mass to spare the mask holds.
    let mut logits = vec![0.0f32; n];
    logits[b')' as usize] = 1.0;
    let r = c.apply(&mut logits, None, None);
    assert!(!r.fallback && r.prevented, "{r:?}");
    assert_eq!(logits[b')' as usize], f32::NEG_INFINITY);
    // JSON never falls back.
    let mut c = coltrane(preset(Preset::Json));
    let mut logits = vec![0.0f32; n];
    logits[b'x' as usize] = 50.0;
    let r = c.apply(&mut logits, None, None);
    assert!(!r.fallback && r.prevented);
    assert_eq!(logits[b'x' as usize], f32::NEG_INFINITY);
}

#[test]
fn balanced_closure_is_never_relaxed() {
    let v = test_vocab();
    let n = v.len();
    let mut c = coltrane(preset(Preset::Balanced));
    c.accept(b'(' as u32).unwrap();
    // The model is sure it wants to stop: end-of-text stays banned until `(` is closed.
    let mut logits = vec![0.0f32; n];
    logits[eos(&v) as usize] = 30.0;
    let r = c.apply(&mut logits, None, None);
    assert_eq!(logits[eos(&v) as usize], f32::NEG_INFINITY, "{r:?}");
    // Two tokens left and the model wants `x`: closing in time wins over the fallback.
    let mut logits = vec![0.0f32; n];
    logits[b'x' as usize] = 30.0;
    c.apply(&mut logits, Some(1), None);
    let finite: Vec<u32> = (0..n as u32)
        .filter(|&i| logits[i as usize].is_finite())
        .collect();
    assert!(
        finite.iter().all(|&i| v.token_bytes(i).contains(&b')')),
        "{finite:?}"
    );
}

#[test]
fn eddies_are_banned_and_bans_never_empty_the_mask() {
    let v = test_vocab();
    let cfg = ColtraneConfig {
        eddy: Some(EddyConfig::default()),
        fallback_mass: 0.0,
        ..ColtraneConfig::default()
    };
    let mut c = coltrane(cfg.clone());
    let story = tokenize(&v, b"Once upon a time");
    for _ in 0..2 {
        for &id in &story {
            c.accept(id).unwrap();
        }
    }
    let m = c.compute_mask(None).clone();
    assert!(!m.contains(story[0]), "the loop's next token is banned");
    assert!(m.contains(b'x' as u32));
    let mut logits = vec![0.0f32; v.len()];
    logits[story[0] as usize] = 9.0;
    let r = c.apply(&mut logits, None, None);
    assert_eq!((r.eddy_bans, r.prevented), (1, true));
    assert_eq!(c.metrics().eddies_broken, 1);
    // JSON that allows only the looping token keeps it.
    let mut c = coltrane(ColtraneConfig {
        preset: Some(Preset::JsonSchema(json!({"enum": ["aaaaaaaa"]}))),
        ..cfg
    });
    force(&mut c, &tokenize(&v, b"\"aaaaa"), None);
    let mut logits = vec![0.0f32; v.len()];
    let r = c.apply(&mut logits, None, None);
    assert!(logits[b'a' as usize].is_finite() && r.eddy_bans == 0);
}

#[test]
fn prosody_leans_toward_a_sentence_end() {
    let v = test_vocab();
    let n = v.len();
    for (mode, changes) in [(ProsodyMode::Bias, true), (ProsodyMode::Observe, false)] {
        let mut c = coltrane(ColtraneConfig {
            prosody: mode,
            ..ColtraneConfig::default()
        });
        c.accept(tokenize(&v, b" cat")[0]).unwrap();
        let mut logits = vec![0.0f32; n];
        logits[b'x' as usize] = 3.0;
        let r = c.apply(&mut logits, Some(1), None);
        assert!(r.prosody_bias > 5.0);
        assert_eq!(logits[b'.' as usize] > 3.0, changes, "{mode:?}");
        assert_eq!(c.metrics().prosody_steps, 1);
        // Far from the end: nothing.
        let mut logits = vec![0.0f32; n];
        assert_eq!(c.apply(&mut logits, Some(100), None).prosody_bias, 0.0);
    }
    // After a sentence end, end-of-text.
    let mut c = coltrane(ColtraneConfig {
        prosody: ProsodyMode::Bias,
        ..ColtraneConfig::default()
    });
    c.accept(b'.' as u32).unwrap();
    let mut logits = vec![0.0f32; n];
    c.apply(&mut logits, Some(2), None);
    assert!(logits[eos(&v) as usize] > 0.0);
    assert!(c.metrics().sentence_end);
}

#[test]
fn rollback_restores_every_tier() {
    let v = test_vocab();
    let cfg = ColtraneConfig {
        preset: Some(Preset::Json),
        eddy: Some(EddyConfig::default()),
        ..ColtraneConfig::default()
    };
    let mut c = coltrane(cfg);
    c.accept_context();
    let ids = tokenize(&v, br#"{"a": [1, 2"#);
    force(&mut c, &ids[..3], None);
    let before = c.compute_mask(None).clone();
    force(&mut c, &ids[3..], None);
    assert_ne!(c.compute_mask(None), &before);
    c.rollback(ids.len() - 3).unwrap();
    assert_eq!(c.compute_mask(None), &before);
    c.rollback(4).unwrap();
    assert_eq!(
        c.rollback(1),
        Err(ColtraneError::Rollback {
            requested: 1,
            available: 0
        })
    );
}

#[test]
fn bad_configs_are_named() {
    for (cfg, msg) in [
        (
            ColtraneConfig {
                max_depth: 0,
                ..ColtraneConfig::default()
            },
            "maxDepth",
        ),
        (
            ColtraneConfig {
                fallback_mass: 1.5,
                ..ColtraneConfig::default()
            },
            "fallbackMass",
        ),
        (
            ColtraneConfig {
                eddy: Some(EddyConfig {
                    ngram: 0,
                    repeats: 2,
                }),
                ..ColtraneConfig::default()
            },
            "eddy",
        ),
    ] {
        let err = Coltrane::new(test_index(), cfg).err().unwrap().to_string();
        assert!(err.contains(msg), "{err}");
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z é€😀\"\\\\\n]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,4}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn valid_documents_are_always_accepted(doc in arb_json(), pretty in any::<bool>()) {
        let v = test_vocab();
        let text = match pretty {
            true => serde_json::to_string_pretty(&doc).unwrap(),
            false => serde_json::to_string(&doc).unwrap(),
        };
        let mut c = coltrane(preset(Preset::Json));
        prop_assert_eq!(force(&mut c, &tokenize(&v, text.as_bytes()), None), None, "{}", text);
        prop_assert!(c.can_end());
    }

    #[test]
    fn broken_documents_are_rejected_at_the_first_bad_token(doc in arb_json(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let v = test_vocab();
        let mut text = serde_json::to_string(&doc).unwrap().into_bytes();
        let i = at.index(text.len());
        text[i] = byte;
        // serde_json is the judge of validity; lone surrogates are where RFC 8259 leaves room.
        prop_assume!(!text.windows(2).any(|w| w == b"\\u"));
        match serde_json::from_slice::<Value>(&text) {
            Ok(_) => prop_assume!(false),
            // RFC 8259 numbers have no range; serde_json's f64 does.
            Err(e) => prop_assume!(!e.to_string().contains("number out of range")),
        }
        // The first byte no valid document can have at that point.
        let schema = Schema::any();
        let dead_at = (0..=text.len()).find(|&k| {
            let mut t = vec![machine::Thread::start(&schema)];
            for &b in &text[..k] {
                let mut next = Vec::new();
                for th in t { th.step(&schema, b, &mut next); }
                t = next;
            }
            t.is_empty()
        });
        let ids = tokenize(&v, &text);
        let mut c = coltrane(preset(Preset::Json));
        let refused = force(&mut c, &ids, None);
        match dead_at {
            Some(k) => {
                // The refused token is the one holding byte k − 1.
                let starts: Vec<usize> = ids.iter().scan(0, |pos, &id| { let s = *pos; *pos += v.token_bytes(id).len(); Some(s) }).collect();
                let holder = starts.iter().rposition(|&s| s < k).unwrap_or(0);
                prop_assert_eq!(refused, Some(holder), "{:?}", String::from_utf8_lossy(&text));
            }
            // Every byte was viable but the text stops early: never complete.
            None => prop_assert!(refused.is_none() && !c.can_end()),
        }
    }
}
