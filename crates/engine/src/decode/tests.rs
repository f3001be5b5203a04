use super::*;
use crate::tokenizer::bpe::byte_to_char;
use knot::TokenizerData;

/// 256 byte tokens plus an end-of-text token, id 256.
fn bytes_tokenizer() -> Rc<Tokenizer> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    tokens.push("<|end|>".into());
    let mut token_types = vec![1; 256];
    token_types.push(3);
    let data = TokenizerData {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types,
        eos_id: Some(256),
        ..Default::default()
    };
    Rc::new(Tokenizer::from_data(&data).unwrap())
}

/// Logits that make greedy pick `id`.
fn pointing_at(id: u32) -> Vec<f32> {
    let mut l = vec![0.0f32; 257];
    l[id as usize] = 10.0;
    l
}

fn generation(max_tokens: usize, room: usize, ignore_eos: bool) -> Generation {
    let opts = GenerateOptions {
        max_tokens,
        ignore_eos,
        ..GenerateOptions::default()
    };
    Generation::new(&opts, bytes_tokenizer(), &[256], room).unwrap()
}

#[test]
fn text_streams_whole_characters_and_end_of_text_stops() {
    let mut g = generation(10, 100, false);
    let mut pieces = Vec::new();
    for id in [0x68, 0xc3, 0xa9, 256] {
        assert!(g.finished().is_none());
        let e = g.next(&mut pointing_at(id)).unwrap();
        assert_eq!(e.id, id);
        assert_eq!(e.step.token, id);
        pieces.push((e.text, e.finish_reason));
    }
    assert_eq!(
        pieces,
        [
            ("h".to_string(), None),
            (String::new(), None),
            ("é".to_string(), None),
            (String::new(), Some(FinishReason::Stop)),
        ]
    );
    assert!(matches!(
        g.next(&mut pointing_at(1)),
        Err(GenerateError::Finished)
    ));
}

#[test]
fn max_tokens_and_context_room_end_with_length() {
    for (max, room, want) in [(3, 100, 3), (100, 2, 2), (0, 100, 0), (5, 0, 0)] {
        let mut g = generation(max, room, false);
        assert_eq!(g.budget(), want);
        let mut n = 0;
        while g.finished().is_none() {
            let e = g.next(&mut pointing_at(0x61)).unwrap();
            n += 1;
            assert_eq!(e.finish_reason.is_some(), n == want);
        }
        assert_eq!((n, g.finished()), (want, Some(FinishReason::Length)));
    }
}

#[test]
fn the_last_piece_flushes_a_held_back_character() {
    let mut g = generation(2, 100, false);
    assert_eq!(g.next(&mut pointing_at(0x61)).unwrap().text, "a");
    let last = g.next(&mut pointing_at(0xc3)).unwrap();
    assert_eq!(
        (last.text.as_str(), last.finish_reason),
        ("\u{fffd}", Some(FinishReason::Length))
    );
}

#[test]
fn ignore_eos_runs_the_whole_budget() {
    let mut g = generation(3, 100, true);
    let ids: Vec<u32> = (0..3)
        .map(|_| g.next(&mut pointing_at(256)).unwrap().id)
        .collect();
    assert_eq!(ids, [256; 3]);
    assert_eq!(g.finished(), Some(FinishReason::Length));
}

#[test]
fn more_follows_says_whether_another_forward_pass_comes() {
    let mut g = generation(3, 100, false);
    // Prefill, then picks 1, 2, 3: forward passes follow the prefill and picks 1 and 2.
    let mut follows = vec![g.more_follows()];
    for _ in 0..3 {
        g.next(&mut pointing_at(0x61)).unwrap();
        follows.push(g.more_follows());
    }
    assert_eq!(follows, [true, true, false, false]);
    assert!(!generation(1, 100, false).more_follows());
}

#[test]
fn context_tokens_reach_the_pipeline() {
    let opts = GenerateOptions::from_json(r#"{"repeatPenalty": 100}"#).unwrap();
    let mut g = Generation::new(&opts, bytes_tokenizer(), &[256], 100).unwrap();
    g.accept_context(&[0x61]);
    let mut l = pointing_at(0x61);
    l[0x62] = 9.0;
    assert_eq!(g.next(&mut l).unwrap().id, 0x62);
}

#[test]
fn huge_sizes_are_capped_not_overflowed() {
    let opts = GenerateOptions::from_json(
        r#"{"repeatPenalty": 1.5, "repeatLastN": 18446744073709551615, "topK": 18446744073709551615,
            "temperature": 1, "maxTokens": 18446744073709551615}"#,
    )
    .unwrap();
    let mut g = Generation::new(&opts, bytes_tokenizer(), &[256], 3).unwrap();
    assert_eq!(g.budget(), 3);
    g.accept_context(&[1, 2, 3]);
    for _ in 0..3 {
        g.next(&mut pointing_at(0x61)).unwrap();
    }
    g.pipeline().rollback(2).unwrap();
}

#[test]
fn options_defaults_and_every_field() {
    let d = GenerateOptions::from_json("{}").unwrap();
    assert_eq!(d, GenerateOptions::default());
    assert_eq!(
        GenerateOptions::from_json(r#"{"temperature": null}"#).unwrap(),
        d
    );
    let o = GenerateOptions::from_json(
        r#"{"temperature": 0.8, "topK": 40, "topP": 0.95, "minP": 0.05, "repeatPenalty": 1.1,
            "repeatLastN": 32, "seed": "18446744073709551615", "maxTokens": 7, "continue": true,
            "ignoreEos": true}"#,
    )
    .unwrap();
    let s = &o.decode.sampling;
    assert_eq!(
        (s.temperature, s.top_k, s.top_p, s.min_p),
        (0.8, 40, 0.95, 0.05)
    );
    assert_eq!(
        (s.repeat_penalty, s.repeat_last_n, s.seed),
        (1.1, 32, u64::MAX)
    );
    assert_eq!(
        (o.max_tokens, o.continue_session, o.ignore_eos),
        (7, true, true)
    );
    assert!(o.decode.moa.is_none());
    assert_eq!(
        GenerateOptions::from_json(r#"{"seed": 42}"#)
            .unwrap()
            .decode
            .sampling
            .seed,
        42
    );
}

#[test]
fn moa_options() {
    let on = GenerateOptions::from_json(r#"{"moa": true, "seed": 3}"#).unwrap();
    assert_eq!(on.decode.moa, Some(MoaConfig::default()));
    assert_eq!(
        GenerateOptions::from_json(r#"{"moa": {}}"#)
            .unwrap()
            .decode
            .moa,
        on.decode.moa
    );
    assert_eq!(
        GenerateOptions::from_json(r#"{"moa": false}"#)
            .unwrap()
            .decode
            .moa,
        None
    );
    let m = GenerateOptions::from_json(
        r#"{"moa": {"k": 5, "baseTemperature": 0.9, "temperatureSpread": 0.6, "minTemperature": 0.05,
            "topK": 0, "merge": "vote", "useKl": true, "sensitivity": 0, "target": 2}}"#,
    )
    .unwrap()
    .decode
    .moa
    .unwrap();
    assert_eq!(
        (m.k, m.top_k, m.merge, m.use_kl),
        (5, 0, Merge::ComplementVote, true)
    );
    assert_eq!(
        (m.base_temperature, m.temperature_spread, m.min_temperature),
        (0.9, 0.6, 0.05)
    );
    assert_eq!((m.sensitivity, m.target), (0.0, 2.0));
}

#[test]
fn bad_options_are_named() {
    let err = |json: &str| GenerateOptions::from_json(json).unwrap_err().to_string();
    let cases = [
        (r#"[1]"#, "options must be a JSON object"),
        ("{", "options must be a JSON object"),
        (r#"{"topk": 3}"#, "unknown option 'topk'"),
        (
            r#"{"temperature": -1}"#,
            "temperature must be a finite number >= 0 (0 is greedy), got -1",
        ),
        (
            r#"{"temperature": "NaN"}"#,
            "temperature must be a finite number >= 0 (0 is greedy), got NaN",
        ),
        (r#"{"temperature": "0.5"}"#, r#"got "0.5""#),
        (
            r#"{"topK": 2.5}"#,
            "topK must be an integer >= 0 (0 disables it), got 2.5",
        ),
        (r#"{"topP": 0}"#, "topP must be a number in (0, 1], got 0"),
        (
            r#"{"minP": 1.5}"#,
            "minP must be a number in [0, 1], got 1.5",
        ),
        (
            r#"{"repeatPenalty": 0}"#,
            "repeatPenalty must be a finite number > 0 (1 disables it), got 0",
        ),
        (r#"{"repeatPenalty": "Infinity"}"#, "got Infinity"),
        (
            r#"{"seed": -1}"#,
            "seed must be an integer in [0, 2^64), got -1",
        ),
        (
            r#"{"seed": "18446744073709551616"}"#,
            "seed must be an integer in [0, 2^64)",
        ),
        (r#"{"seed": 1e30}"#, "seed must be an integer in [0, 2^64)"),
        (
            r#"{"maxTokens": -3}"#,
            "maxTokens must be an integer >= 0, got -3",
        ),
        (
            r#"{"continue": 1}"#,
            "continue must be true or false, got 1",
        ),
        (
            r#"{"moa": 3}"#,
            "moa must be true, false or an object, got 3",
        ),
        (
            r#"{"moa": {"k": 0}}"#,
            "moa.k must be an integer in [1, 32], got 0",
        ),
        (
            r#"{"moa": {"k": 99}}"#,
            "moa.k must be an integer in [1, 32], got 99",
        ),
        (
            r#"{"moa": {"baseTemperature": 0}}"#,
            "moa.baseTemperature must be a finite number > 0, got 0",
        ),
        (
            r#"{"moa": {"baseTemperature": "x"}}"#,
            r#"moa.baseTemperature must be a number, got "x""#,
        ),
        (
            r#"{"moa": {"merge": "max"}}"#,
            "moa.merge must be deficit, uniform or vote",
        ),
        (
            r#"{"moa": {"sensitivity": 3}}"#,
            "moa.sensitivity must be a finite number in [0, 1], got 3",
        ),
        (r#"{"moa": {"kk": 3}}"#, "unknown option 'moa.kk'"),
        (
            r#"{"moa": true, "temperature": 0.7}"#,
            "temperature does not apply with moa",
        ),
        (r#"{"moa": {}, "topK": 10}"#, "topK does not apply with moa"),
    ];
    for (json, want) in cases {
        let got = err(json);
        assert!(got.contains(want), "{json}: {got}");
    }
}

#[test]
fn coltrane_options() {
    let o = |json: &str| GenerateOptions::from_json(json).map(|o| o.decode.coltrane);
    let c = o(r#"{"coltrane": {"preset": "json"}}"#).unwrap().unwrap();
    assert_eq!(c.preset, Some(Preset::Json));
    let c = o(r#"{"coltrane": {"preset": "json", "schema": {"type": "integer"}, "eddy": true, "prosody": "observe", "maxDepth": 4, "fallbackMass": 0.1}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(
        c.preset,
        Some(Preset::JsonSchema(serde_json::json!({"type": "integer"})))
    );
    assert_eq!(c.eddy, Some(EddyConfig::default()));
    assert_eq!(
        (c.prosody, c.max_depth, c.fallback_mass),
        (ProsodyMode::Observe, 4, 0.1)
    );
    let c = o(r#"{"coltrane": {"preset": "balanced", "eddy": {"ngram": 6, "repeats": 3}}}"#)
        .unwrap()
        .unwrap();
    assert_eq!(
        c.eddy,
        Some(EddyConfig {
            ngram: 6,
            repeats: 3
        })
    );
    assert_eq!(o(r#"{"coltrane": false}"#).unwrap(), None);
    let err = |json: &str| GenerateOptions::from_json(json).unwrap_err().to_string();
    for (json, want) in [
        (
            r#"{"coltrane": {"preset": "xml"}}"#,
            "coltrane.preset must be json, balanced or json_schema",
        ),
        (
            r#"{"coltrane": {"preset": "json_schema"}}"#,
            "coltrane.schema must be a JSON Schema",
        ),
        (
            r#"{"coltrane": {"preset": "balanced", "schema": {}}}"#,
            "coltrane.schema must be absent with preset balanced",
        ),
        (
            r#"{"coltrane": {"schema": {"type": "string", "pattern": "a"}}}"#,
            "unsupported JSON Schema keyword \"pattern\"",
        ),
        (
            r#"{"coltrane": {"maxDepth": 0}}"#,
            "coltrane.maxDepth must be an integer in [1, 64], got 0",
        ),
        (
            r#"{"coltrane": {"maxDepth": 99}}"#,
            "coltrane.maxDepth must be an integer in [1, 64], got 99",
        ),
        (
            r#"{"coltrane": {"fallbackMass": 2}}"#,
            "coltrane.fallbackMass must be a number in [0, 1], got 2",
        ),
        (
            r#"{"coltrane": {"prosody": "loud"}}"#,
            "coltrane.prosody must be off, observe or bias",
        ),
        (
            r#"{"coltrane": {"eddy": 3}}"#,
            "coltrane.eddy must be true, false or { ngram, repeats }",
        ),
        (
            r#"{"coltrane": {"eddy": {"ngram": 0}}}"#,
            "coltrane.eddy.ngram must be an integer in [1, 64]",
        ),
        (
            r#"{"coltrane": {"frob": 1}}"#,
            "unknown option 'coltrane.frob'",
        ),
        (
            r#"{"coltrane": true}"#,
            "coltrane must be false or an object",
        ),
    ] {
        let got = err(json);
        assert!(got.contains(want), "{json}: {got}");
    }
}

#[test]
fn a_json_constraint_shapes_what_the_model_wants_into_a_complete_document() {
    // The "model" always wants `x`; the mask only lets JSON through, and the budget makes it
    // close in time.
    for max_tokens in [3usize, 6, 12] {
        let opts = GenerateOptions::from_json(&format!(
            r#"{{"maxTokens": {max_tokens}, "coltrane": {{"preset": "json"}}}}"#
        ))
        .unwrap();
        let mut g = Generation::new(&opts, bytes_tokenizer(), &[256], 100).unwrap();
        let mut text = String::new();
        let mut prevented = 0;
        while g.finished().is_none() {
            let e = g.next(&mut pointing_at(b'x' as u32)).unwrap();
            text.push_str(&e.text);
            let report = e
                .step
                .stages
                .last()
                .and_then(|s| s.coltrane.clone())
                .unwrap();
            assert!(report.allowed > 0);
            // `x` is refused outside strings (and allowed inside one).
            prevented += usize::from(report.prevented);
        }
        assert!(prevented > 0);
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        let m = g.constraint_metrics().unwrap();
        assert!(m.closed && m.violations_prevented > 0);
    }
}
