use super::*;
use crate::draft::DraftConfig;
use crate::test_support::{bytes_tokenizer, pointing_at};
use coltrane::{EddyConfig, Preset, ProsodyMode};
use moa::{Merge, MoaConfig};

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
            "ignoreEos": true, "presencePenalty": -0.5, "frequencyPenalty": 2}"#,
    )
    .unwrap();
    let s = &o.decode.sampling;
    assert_eq!((s.presence_penalty, s.frequency_penalty), (-0.5, 2.0));
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
            r#"{"presencePenalty": 2.5}"#,
            "presencePenalty must be a number in [-2, 2], got 2.5",
        ),
        (
            r#"{"frequencyPenalty": "NaN"}"#,
            "frequencyPenalty must be a number in [-2, 2], got NaN",
        ),
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
            r#"{"continue": true, "reusePrefix": true}"#,
            "reusePrefix must be false with continue",
        ),
        (
            r#"{"continue": true, "prefillWindow": "pw-1"}"#,
            "prefillWindow must be absent with continue",
        ),
        (
            r#"{"prefillWindow": 3}"#,
            "prefillWindow must be a window id (a non-empty string), got 3",
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
            r#"{"coltrane": {"schema": {"type": "string", "pattern": "(?=a)"}}}"#,
            "unsupported JSON Schema keyword \"pattern with a lookahead\"",
        ),
        (
            r##"{"coltrane": {"schema": {"anyOf": [{"$ref": "#/$defs/d"}, {"type": "null"}],
                "$defs": {"d": {"$ref": "#/$defs/d"}}}}}"##,
            "the schema refers to itself at #/$defs/d without entering an object or array",
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

/// Rows of a verify pass, one per position, each pointing greedy at a token.
fn rows_pointing_at(ids: &[u32]) -> Vec<f32> {
    ids.iter().flat_map(|&id| pointing_at(id)).collect()
}

fn ids(list: &[Emitted]) -> Vec<u32> {
    list.iter().map(|e| e.id).collect()
}

#[test]
fn greedy_verify_keeps_the_matching_prefix_and_the_first_mismatch() {
    let (a, b, c, x) = (b'a' as u32, b'b' as u32, b'c' as u32, b'x' as u32);
    // The draft's third token is wrong: a, b kept, then the model's c.
    let mut g = generation(10, 100, false);
    let out = g.verify(&mut rows_pointing_at(&[a, b, c, x]), &[a, b, x], None);
    assert_eq!(ids(&out.unwrap()), [a, b, c]);
    assert_eq!(g.produced(), 3);
    // All accepted: the row after the last draft token gives one more.
    let mut g = generation(10, 100, false);
    let out = g.verify(&mut rows_pointing_at(&[a, b, c, x]), &[a, b, c], None);
    assert_eq!(ids(&out.unwrap()), [a, b, c, x]);
    // None accepted: the first row's pick alone.
    let mut g = generation(10, 100, false);
    let out = g.verify(&mut rows_pointing_at(&[a, b, c]), &[x, x], None);
    assert_eq!(ids(&out.unwrap()), [a]);
    assert_eq!(g.produced(), 1);
}

#[test]
fn verify_stops_at_end_of_text_and_at_the_budget() {
    let (a, eos) = (b'a' as u32, 256);
    // End-of-text inside the draft: the draft is cut after it, and picking it ends the run.
    let mut g = generation(10, 100, false);
    let mut draft = vec![a, eos, a, a];
    g.trim_draft(&mut draft);
    assert_eq!(draft, [a, eos]);
    let out = g
        .verify(&mut rows_pointing_at(&[a, eos, a]), &draft, None)
        .unwrap();
    assert_eq!(ids(&out), [a, eos]);
    assert_eq!(out[1].finish_reason, Some(FinishReason::Stop));
    assert_eq!(g.finished(), Some(FinishReason::Stop));
    // With ignoreEos the end-of-text token is just a token.
    let mut g = generation(10, 100, true);
    let mut draft = vec![a, eos, a];
    g.trim_draft(&mut draft);
    assert_eq!(draft, [a, eos, a]);
    // Three tokens left: at most two drafted, and the third pick ends with `length`.
    let mut g = generation(3, 100, false);
    let mut draft = vec![a; 8];
    g.trim_draft(&mut draft);
    assert_eq!(draft.len(), 2);
    let out = g
        .verify(&mut rows_pointing_at(&[a, a, a]), &draft, None)
        .unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[2].finish_reason, Some(FinishReason::Length));
    // One token left: nothing to draft.
    let mut g = generation(1, 100, false);
    let mut draft = vec![a; 8];
    g.trim_draft(&mut draft);
    assert!(draft.is_empty());
}

#[test]
fn the_margin_rule_stops_at_a_row_the_verifier_is_unsure_of() {
    let a = b'a' as u32;
    let mut rows = rows_pointing_at(&[a, a, a]);
    // Row 1: top-1 10, top-2 9.5 → margin 0.5.
    rows[257 + b'b' as usize] = 9.5;
    let run = |tau: Option<f32>, rows: &[f32]| {
        let mut g = generation(10, 100, false);
        ids(&g.verify(&mut rows.to_vec(), &[a, a], tau).unwrap())
    };
    assert_eq!(run(None, &rows), [a, a, a]);
    assert_eq!(run(Some(0.25), &rows), [a, a, a]); // 2τ = 0.5 ≤ γ
    assert_eq!(run(Some(0.3), &rows), [a, a]); // 2τ = 0.6 > γ: row 1's pick is the last
    assert_eq!(run(Some(6.0), &rows), [a]); // row 0's margin is 10
}

#[test]
fn a_failed_pick_ends_the_run_and_on_the_first_row_is_the_error() {
    let a = b'a' as u32;
    let mut rows = rows_pointing_at(&[a, a, a]);
    rows[257..2 * 257].fill(f32::NAN);
    let mut g = generation(10, 100, false);
    assert_eq!(ids(&g.verify(&mut rows, &[a, a], None).unwrap()), [a]);
    let mut rows = vec![f32::NEG_INFINITY; 2 * 257];
    let mut g = generation(10, 100, false);
    assert!(g.verify(&mut rows, &[a], None).is_err());
}

/// Logits with five live tokens (ids 97..102) and a known softmax.
fn five_way(logits: [f32; 5]) -> (Vec<f32>, Vec<f64>) {
    let mut row = vec![f32::NEG_INFINITY; 257];
    row[97..102].copy_from_slice(&logits);
    let max = logits.iter().cloned().fold(f32::MIN, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    (row, e.iter().map(|x| x / sum).collect())
}

/// Pearson's chi-square of observed counts against expected probabilities.
fn chi_square(counts: &[u64], p: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(p)
        .map(|(&c, &p)| {
            let e = n as f64 * p;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn sampled_verify_follows_the_speculative_sampling_rule() {
    // Row 0 and row 1 distributions; the draft is token 98 then 97.
    let (row0, p0) = five_way([1.0, 0.5, 0.0, -0.5, 0.3]);
    let (row1, p1) = five_way([0.2, -1.0, 0.9, 0.0, 0.4]);
    let draft = [98u32, 97];
    let opts = GenerateOptions::from_json(r#"{"temperature": 1, "maxTokens": 10}"#).unwrap();
    let make = |seed: u64| {
        let mut o = opts.clone();
        o.decode.sampling.seed = seed;
        Generation::new(&o, bytes_tokenizer(), &[256], 100).unwrap()
    };
    const N: u64 = 20_000;
    let (mut first, mut second, mut residual) = ([0u64; 5], [0u64; 5], [0u64; 5]);
    let mut accepted = 0u64;
    for seed in 0..N {
        let mut rows = [row0.clone(), row1.clone(), row0.clone()].concat();
        let out = make(seed).verify(&mut rows, &draft, None).unwrap();
        // The same tokens as plain decoding with this seed.
        let mut plain = make(seed);
        for (e, row) in out.iter().zip([&row0, &row1, &row0]) {
            assert_eq!(
                plain.next(&mut row.clone()).unwrap().id,
                e.id,
                "seed {seed}"
            );
        }
        let t0 = (out[0].id - 97) as usize;
        first[t0] += 1;
        if out[0].id == draft[0] {
            accepted += 1;
            second[(out[1].id - 97) as usize] += 1;
        } else {
            residual[t0] += 1;
            assert_eq!(out.len(), 1);
        }
    }
    // The first token is distributed as p0; the draft kept with probability p0(d).
    // Critical chi-square values at p = 0.001: 18.47 (4 dof), 16.27 (3 dof).
    assert!(chi_square(&first, &p0) < 18.47, "{first:?}");
    let pd = p0[1];
    let sd = (pd * (1.0 - pd) / N as f64).sqrt();
    assert!((accepted as f64 / N as f64 - pd).abs() < 4.0 * sd);
    // A rejected draft token is replaced by a draw from p0 without it, renormalized.
    let mut rest: Vec<f64> = p0.clone();
    rest[1] = 0.0;
    let z: f64 = rest.iter().sum();
    rest.iter_mut().for_each(|x| *x /= z);
    let (obs, exp): (Vec<u64>, Vec<f64>) = residual
        .iter()
        .zip(&rest)
        .filter(|(_, &p)| p > 0.0)
        .map(|(&c, &p)| (c, p))
        .unzip();
    assert_eq!(residual[1], 0);
    assert!(chi_square(&obs, &exp) < 16.27, "{residual:?}");
    // After an accepted draft token, the next token is distributed as row 1's p.
    assert!(chi_square(&second, &p1) < 18.47, "{second:?}");
}

#[test]
fn a_constraint_trims_drafts_and_leaves_no_trace() {
    let opts =
        GenerateOptions::from_json(r#"{"maxTokens": 20, "coltrane": {"preset": "json"}}"#).unwrap();
    let mut g = Generation::new(&opts, bytes_tokenizer(), &[256], 100).unwrap();
    g.next(&mut pointing_at(b'{' as u32)).unwrap();
    let before = g.constraint_metrics();
    // `}` closes the document; `x` cannot follow it.
    let mut draft: Vec<u32> = b"}x}".iter().map(|&b| b as u32).collect();
    g.trim_draft(&mut draft);
    assert_eq!(draft, [b'}' as u32]);
    assert_eq!(g.constraint_metrics(), before);
    // The matcher is where it was: `x` is still refused right after `{`, `}` still allowed.
    let mut d = vec![b'x' as u32];
    g.trim_draft(&mut d);
    assert!(d.is_empty());
    let e = g.next(&mut pointing_at(b'}' as u32)).unwrap();
    assert_eq!(e.id, b'}' as u32);
}

#[test]
fn draft_mode_options() {
    let d = |json: &str| GenerateOptions::from_json(json).map(|o| o.draft);
    assert_eq!(d("{}").unwrap(), DraftChoice::Inherit);
    assert_eq!(d(r#"{"draftMode": null}"#).unwrap(), DraftChoice::Inherit);
    assert_eq!(d(r#"{"draftMode": false}"#).unwrap(), DraftChoice::Off);
    assert_eq!(
        d(r#"{"draftMode": true}"#).unwrap(),
        DraftChoice::On(DraftConfig::default())
    );
    assert_eq!(
        d(r#"{"draftMode": {"ngram": 2, "maxDraft": 4, "adaptive": false, "margin": 0.5}}"#)
            .unwrap(),
        DraftChoice::On(DraftConfig {
            ngram: 2,
            max_draft: 4,
            adaptive: false,
            margin: Some(0.5)
        })
    );
    for (json, want) in [
        (r#"{"draftMode": 1}"#, "draftMode must be true, false or"),
        (r#"{"draftMode": {"k": 1}}"#, "unknown option 'draftMode.k'"),
        (
            r#"{"draftMode": {"maxDraft": 0}}"#,
            "draftMode.maxDraft must be",
        ),
        (
            r#"{"draftMode": {"maxDraft": 33}}"#,
            "maxDraft must be an integer in [1, 32]",
        ),
        (
            r#"{"draftMode": {"ngram": 9}}"#,
            "ngram must be an integer in [1, 8]",
        ),
        (
            r#"{"draftMode": {"margin": -1}}"#,
            "draftMode.margin must be",
        ),
        (
            r#"{"draftMode": {"margin": "NaN"}}"#,
            "draftMode.margin must be",
        ),
        (
            r#"{"draftMode": {"adaptive": 1}}"#,
            "draftMode.adaptive must be true or false",
        ),
    ] {
        let got = d(json).unwrap_err().to_string();
        assert!(got.contains(want), "{json}: {got}");
    }
    assert_eq!(
        DraftChoice::Off.resolve(Some(&DraftConfig::default())),
        None
    );
    assert_eq!(
        DraftChoice::Inherit.resolve(Some(&DraftConfig::default())),
        Some(DraftConfig::default())
    );
}
