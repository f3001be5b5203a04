//! The `knot` command as a user runs it: output formats, exit codes, error messages.

use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(rel: &str) -> String {
    root()
        .join("tests/fixtures")
        .join(rel)
        .display()
        .to_string()
}

fn knot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_knot"))
        .args(args)
        .output()
        .expect("run knot")
}

fn ok_stdout(args: &[&str]) -> String {
    let out = knot(args);
    assert!(
        out.status.success(),
        "knot {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok_stdout(args)).unwrap()
}

/// A failing command exits 1 with one `error: ...` line and no panic or backtrace.
fn fails_with(args: &[&str], needle: &str) {
    let out = knot(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "knot {args:?}: {err}");
    assert!(err.starts_with("error: "), "knot {args:?}: {err}");
    assert!(
        err.contains(needle),
        "knot {args:?}: {err:?} lacks {needle:?}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn reference_case(i: usize) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture("tiny/llama-f32.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["cases"][i].clone()
}

#[test]
fn inspect_shows_config_and_tensors() {
    let f = fixture("tiny/llama-f32.knot");
    let text = ok_stdout(&["inspect", &f]);
    assert!(
        text.contains("knot v1") && text.contains("blk.1.ffn_down.weight"),
        "{text}"
    );
    let v = json(&["inspect", &f, "--json"]);
    assert_eq!(v["header"]["version"], 1);
    assert_eq!(v["metadata"]["config"]["n_layers"], 2);
    assert_eq!(v["metadata"]["config"]["dim"], 64);
    assert_eq!(v["metadata"]["layers"].as_array().unwrap().len(), 2);
}

#[test]
fn greedy_generate_json_matches_the_reference() {
    let case = reference_case(1);
    let prompt: Vec<String> = ids(&case["prompt_ids"])
        .iter()
        .map(u64::to_string)
        .collect();
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&[
        "generate",
        &f,
        "--tokens",
        &prompt.join(","),
        "-n",
        "12",
        "--temperature",
        "0",
        "--json",
    ]);
    assert_eq!(ids(&v["prompt_ids"]), ids(&case["prompt_ids"]));
    assert_eq!(ids(&v["ids"]), ids(&case["greedy_ids"])[..12]);
    assert!(v["text"].is_string());
    assert!(v["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(v["decode_tok_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let f = fixture("tiny/llama-f32.knot");
    let args = [
        "generate",
        &f,
        "--tokens",
        "1,2,3",
        "-n",
        "16",
        "--temperature",
        "1.0",
        "--seed",
        "5",
        "--json",
    ];
    assert_eq!(json(&args)["ids"], json(&args)["ids"]);
    let other = json(&[
        "generate",
        &f,
        "--tokens",
        "1,2,3",
        "-n",
        "16",
        "--temperature",
        "1.0",
        "--seed",
        "6",
        "--json",
    ]);
    assert_ne!(json(&args)["ids"], other["ids"]);
}

#[test]
fn generation_stops_when_the_context_is_full() {
    let f = fixture("tiny/llama-f32.knot");
    let out = knot(&[
        "generate",
        &f,
        "--tokens",
        "1,2",
        "-n",
        "1000",
        "--temperature",
        "0",
        "--json",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Context 128 minus the 2 prompt tokens (fewer if the model emits its end-of-text id).
    assert!(ids(&v["ids"]).len() <= 126);
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most 126 tokens"));
}

#[test]
fn zero_tokens_requested_generates_nothing() {
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&["generate", &f, "--tokens", "1,2", "-n", "0", "--json"]);
    assert_eq!(ids(&v["ids"]), Vec::<u64>::new());
    assert_eq!(v["text"], "");
}

#[test]
fn logits_lists_top_k_at_every_position() {
    let case = reference_case(1);
    let all: Vec<String> = ids(&case["teacher_forced"]["ids"])
        .iter()
        .map(u64::to_string)
        .collect();
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&[
        "logits",
        &f,
        "--tokens",
        &all.join(","),
        "--top",
        "8",
        "--json",
    ]);
    let positions = v["positions"].as_array().unwrap();
    assert_eq!(positions.len(), all.len());
    for (ours, theirs) in positions
        .iter()
        .zip(case["teacher_forced"]["positions"].as_array().unwrap())
    {
        assert_eq!(ids(&ours["ids"]), ids(&theirs["ids"]));
        for (a, b) in ours["logits"]
            .as_array()
            .unwrap()
            .iter()
            .zip(theirs["logits"].as_array().unwrap())
        {
            assert!((a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-4);
        }
    }
}

#[test]
fn tokenize_and_detokenize_round_trip() {
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&["tokenize", &f, "--text", "The cat", "--json"]);
    let got = ids(&v["ids"]);
    assert_eq!(got.len(), 7); // the tiny vocabulary is one token per byte
    let list: Vec<String> = got.iter().map(u64::to_string).collect();
    assert_eq!(
        ok_stdout(&["detokenize", &f, "--ids", &list.join(",")]),
        "The cat\n"
    );
}

#[test]
fn bench_reports_speed_and_memory() {
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&[
        "bench",
        &f,
        "-n",
        "4",
        "--prompt-len",
        "8",
        "--runs",
        "1",
        "--json",
    ]);
    assert!(v["prefill_tok_s"].as_f64().unwrap() > 0.0);
    assert!(v["decode_tok_s"].as_f64().unwrap() > 0.0);
    assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn health_reports_each_step_and_the_generation_and_bench_measures_its_cost() {
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&[
        "generate",
        &f,
        "--tokens",
        "1,2,3",
        "-n",
        "20",
        "--temperature",
        "0",
        "--health",
        "observe",
        "--json",
    ]);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), ids(&v["ids"]).len());
    for s in steps {
        let h = &s["health"];
        assert!(h["entropy"].as_f64().unwrap() >= 0.0);
        assert!(
            ["normal", "pre-collapse", "boundary-collapse"].contains(&h["state"].as_str().unwrap())
        );
    }
    // The window (64) is not full in 20 steps: no slope yet.
    assert!(steps[19]["health"].get("alpha").is_none());
    assert_eq!(v["health"]["steps"].as_u64().unwrap(), steps.len() as u64);
    // Without --health, nothing about it.
    let plain = json(&[
        "generate",
        &f,
        "--tokens",
        "1,2,3",
        "-n",
        "20",
        "--temperature",
        "0",
        "--json",
    ]);
    assert!(plain["steps"][0].get("health").is_none() && plain["health"].is_null());
    assert_eq!(ids(&plain["ids"]), ids(&v["ids"]));

    let b = json(&[
        "bench",
        &f,
        "--health",
        "-n",
        "8",
        "--prompt-len",
        "8",
        "--runs",
        "1",
        "--json",
    ]);
    assert!(b["decode_tok_s_with_monitor"].as_f64().unwrap() > 0.0);
    let share = b["monitor_share_of_step"].as_f64().unwrap();
    assert!(share > 0.0 && share.is_finite(), "{share}");
}

#[test]
fn bench_scaling_reports_each_thread_count_and_generate_is_the_same_at_every_count() {
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&[
        "bench",
        &f,
        "--scaling",
        "1,2",
        "-n",
        "4",
        "--prompt-len",
        "8",
        "--runs",
        "1",
        "--json",
    ]);
    let rows = v["scaling"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["threads"], 2);
    assert_eq!(rows[0]["decode_ratio"].as_f64(), Some(1.0));
    assert!(rows[1]["prefill_tok_s"].as_f64().unwrap() > 0.0);
    let at = |t: &str| {
        ok_stdout(&[
            "generate",
            &f,
            "--threads",
            t,
            "--tokens",
            "1,2,3",
            "-n",
            "12",
            "--temperature",
            "0",
        ])
    };
    let one = at("1");
    assert_eq!(at("2"), one);
    assert_eq!(at("3"), one);
}

#[test]
fn convert_reproduces_the_committed_fixtures_byte_for_byte() {
    // Also keeps tests/fixtures/tiny/*.knot (read by the wasm parity tests) in sync with the converter.
    let dir = std::env::temp_dir().join(format!("knot-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (input, committed) in [
        ("tiny/llama-f32.gguf", "tiny/llama-f32.knot"),
        ("tiny/llama-f16.gguf", "tiny/llama-f16.knot"),
        ("tiny/llama-tied-f32.gguf", "tiny/llama-tied-f32.knot"),
        ("tiny/llama-f32-hf", "tiny/llama-f32-hf.knot"),
        ("tiny/llama-f16-hf", "tiny/llama-f16-hf.knot"),
        ("tiny/llama-tied-f32-hf", "tiny/llama-tied-f32-hf.knot"),
        ("tiny/qwen2-f32.gguf", "tiny/qwen2-f32.knot"),
        ("tiny/qwen2-f32-hf", "tiny/qwen2-f32-hf.knot"),
        ("tiny/qwen3-f32.gguf", "tiny/qwen3-f32.knot"),
        ("tiny/qwen3-f32-hf", "tiny/qwen3-f32-hf.knot"),
        ("tiny/gemma3-f32.gguf", "tiny/gemma3-f32.knot"),
        ("tiny/gemma3-f32-hf", "tiny/gemma3-f32-hf.knot"),
    ] {
        let out = dir.join(committed.replace('/', "_"));
        ok_stdout(&["convert", &fixture(input), out.to_str().unwrap()]);
        let fresh = std::fs::read(&out).unwrap();
        let want = std::fs::read(fixture(committed)).unwrap();
        assert!(
            fresh == want,
            "{committed} is stale: regenerate with `knot convert {input} {committed}`"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Converts the tiny GGUF with `--dtype dtype`, checks it generates 4 greedy tokens, and returns
/// the stored dtype of each tensor by name.
fn requantize_and_generate(dtype: &str) -> std::collections::HashMap<String, String> {
    let dir = std::env::temp_dir().join(format!("knot-cli-{dtype}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{dtype}.knot"));
    let out_s = out.to_str().unwrap();
    ok_stdout(&[
        "convert",
        &fixture("tiny/llama-f32.gguf"),
        out_s,
        "--dtype",
        dtype,
    ]);
    let v = json(&["inspect", out_s, "--json"]);
    let dtypes = v["metadata"]["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["dtype"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let case = reference_case(1);
    let prompt: Vec<String> = ids(&case["prompt_ids"])
        .iter()
        .map(u64::to_string)
        .collect();
    let g = json(&[
        "generate",
        out_s,
        "--tokens",
        &prompt.join(","),
        "-n",
        "4",
        "--temperature",
        "0",
        "--json",
    ]);
    assert_eq!(ids(&g["ids"]).len(), 4);
    std::fs::remove_dir_all(&dir).ok();
    dtypes
}

#[test]
fn requantized_conversion_still_generates() {
    assert_eq!(
        requantize_and_generate("q8_0")["blk.0.attn_q.weight"],
        "q8_0"
    );
}

#[test]
fn bad_input_exits_with_a_readable_error() {
    let tiny = fixture("tiny/llama-f32.knot");
    let gguf = fixture("tiny/llama-f32.gguf");
    fails_with(&["inspect", "/nonexistent/model.knot"], "cannot open");
    fails_with(
        &["generate", "/nonexistent/model.knot", "--tokens", "1"],
        "cannot read",
    );
    fails_with(&["generate", &gguf, "--tokens", "1"], "magic");
    fails_with(&["inspect", &gguf], "magic");
    fails_with(
        &["generate", &tiny, "--tokens", "1,256"],
        "token id 256 is out of range",
    );
    fails_with(
        &["logits", &tiny, "--tokens", "99999", "--json"],
        "out of range",
    );
    fails_with(&["detokenize", &tiny, "--ids", "4000"], "4000");
    fails_with(
        &["generate", &tiny, "--tokens", "1", "--temperature=-1"],
        "temperature",
    );
    fails_with(
        &["generate", &tiny, "--tokens", "1", "--top-p", "0"],
        "top_p",
    );
    let long: Vec<String> = (0..129).map(|i| (i % 256).to_string()).collect();
    fails_with(
        &["generate", &tiny, "--tokens", &long.join(",")],
        "exceeds the context length 128",
    );
    fails_with(
        &["generate", &tiny, "--prompt", "", "-n", "1"],
        "prompt is empty",
    );
    fails_with(
        &["generate", &tiny, "--prompt", "hi", "--chat"],
        "chat template",
    );
    let dir = std::env::temp_dir().join(format!("knot-cli-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let never = dir.join("never-written.knot");
    fails_with(&["convert", &tiny, never.to_str().unwrap()], "magic");
    assert!(
        !never.exists(),
        "a failed conversion left {}",
        never.display()
    );
    fails_with(&["bench", &tiny, "-n", "0"], "at least 1");
    for (spec, says) in [
        ("window=8", "health.window must be in"),
        ("eddy=maybe", "--health eddy must be 0 or 1"),
        ("loud", "--health takes on, observe"),
    ] {
        fails_with(
            &["generate", &tiny, "--tokens", "1", "--health", spec],
            says,
        );
    }
    fails_with(
        &["--threads", "0", "inspect", &tiny],
        "threads must be in 1..=256",
    );
    fails_with(
        &["inspect", &tiny, "--threads", "999"],
        "threads must be in 1..=256",
    );
    fails_with(
        &[
            "bench",
            &tiny,
            "--scaling",
            "1,0",
            "-n",
            "1",
            "--prompt-len",
            "4",
        ],
        "threads must be in",
    );
    // A truncated knot file.
    let cut = dir.join("cut.knot");
    std::fs::write(&cut, &std::fs::read(&tiny).unwrap()[..5000]).unwrap();
    fails_with(&["generate", cut.to_str().unwrap(), "--tokens", "1"], "");
    fails_with(&["inspect", cut.to_str().unwrap()], "");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn usage_errors_exit_non_zero() {
    for args in [
        vec!["generate"],
        vec!["generate", "x.knot"],
        vec!["convert", "a.gguf", "b.knot", "--dtype", "q3_k"],
        vec!["logits", "x.knot", "--tokens", "a,b"],
        vec!["frobnicate"],
    ] {
        let out = knot(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn q4_k_conversion_falls_back_to_q5_0_on_narrow_rows_and_generates() {
    let dtypes = requantize_and_generate("q4_k");
    // The tiny model's rows (64, 128 values) are not whole 256-value super-blocks.
    assert_eq!(dtypes["blk.0.attn_q.weight"], "q5_0");
    assert_eq!(dtypes["blk.0.attn_norm.weight"], "f32");
}

#[test]
fn moa_generation_reports_every_step_and_is_seeded() {
    let f = fixture("tiny/llama-f32.knot");
    let run = |seed: &str| {
        json(&[
            "generate", &f, "--tokens", "1,2,3", "-n", "12", "--moa", "--seed", seed, "--json",
        ])
    };
    let v = run("3");
    assert_eq!(v["ids"], run("3")["ids"]);
    let n = ids(&v["ids"]).len();
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), n);
    for (step, id) in steps.iter().zip(ids(&v["ids"])) {
        assert_eq!(step["token"].as_u64(), Some(id));
        assert_eq!(step["picker"], "moa");
        for key in [
            "temperatures",
            "survivors",
            "weights",
            "deficit",
            "entropy",
            "spread",
            "fallback",
        ] {
            assert!(step.get(key).is_some(), "{key} missing: {step}");
        }
        assert_eq!(step["temperatures"].as_array().unwrap().len(), 3);
    }
    assert_eq!(steps[0]["temperatures"], serde_json::json!([0.5, 0.7, 0.9]));
    // A spec overrides the defaults.
    let v = json(&[
        "generate",
        &f,
        "--tokens",
        "1,2,3",
        "-n",
        "2",
        "--moa",
        "k=2,spread=0.6,merge=vote",
        "--json",
    ]);
    assert_eq!(v["steps"][0]["temperatures"], serde_json::json!([0.4, 1.0]));
    // Plain sampling reports its steps too.
    let v = json(&[
        "generate",
        &f,
        "--tokens",
        "1,2",
        "-n",
        "2",
        "--temperature",
        "0",
        "--json",
    ]);
    assert_eq!(v["steps"][0]["picker"], "greedy");
    assert_eq!(v["finish_reason"], "length");
}

#[test]
fn bad_moa_flags_are_errors() {
    let f = fixture("tiny/llama-f32.knot");
    fails_with(
        &["generate", &f, "--tokens", "1", "--moa", "k=0"],
        "moa.k must be an integer in [1, 32], got 0",
    );
    fails_with(
        &["generate", &f, "--tokens", "1", "--moa", "frob=1"],
        "unknown key",
    );
    // A usage error (clap's exit status 2): MOA sets its own temperatures.
    let out = knot(&[
        "generate",
        &f,
        "--tokens",
        "1",
        "--moa",
        "--temperature",
        "0.5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
    fails_with(
        &["bench", &f, "--moa", "merge=max"],
        "deficit, uniform or vote",
    );
}

#[test]
fn bench_compares_moa_with_plain_sampling() {
    let f = fixture("tiny/llama-f32.knot");
    let v = json(&[
        "bench",
        &f,
        "-n",
        "4",
        "--prompt-len",
        "8",
        "--runs",
        "2",
        "--moa",
        "--json",
    ]);
    let (plain, moa) = (
        v["plain_decode_tok_s"].as_f64().unwrap(),
        v["moa_decode_tok_s"].as_f64().unwrap(),
    );
    assert!(plain > 0.0 && moa > 0.0);
    assert!((v["moa_over_plain"].as_f64().unwrap() - moa / plain).abs() < 1e-9);
    assert_eq!(v["k"], 3);
}

#[test]
fn constrained_generation_parses_and_reports_metrics() {
    let f = fixture("tiny/llama-f32.knot");
    for n in ["3", "9", "30"] {
        let v = json(&[
            "generate",
            &f,
            "--tokens",
            "1,2,3",
            "-n",
            n,
            "--constraint",
            "json",
            "--json",
        ]);
        let text = v["text"].as_str().unwrap();
        serde_json::from_str::<serde_json::Value>(text)
            .unwrap_or_else(|e| panic!("-n {n}: {text:?}: {e}"));
        assert_eq!(v["constraint"]["closed"], true);
        let stage = &v["steps"][0]["stages"][0];
        assert_eq!(stage["stage"], "coltrane");
        assert!(stage["allowed"].as_u64().unwrap() > 0);
    }
    let dir = std::env::temp_dir().join(format!("knot-cli-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(
        &schema,
        r#"{"type": "array", "items": {"type": "integer"}, "minItems": 2}"#,
    )
    .unwrap();
    let spec = format!("schema:{}", schema.display());
    let v = json(&[
        "generate",
        &f,
        "--tokens",
        "1",
        "-n",
        "12",
        "--constraint",
        &spec,
        "--json",
    ]);
    // Integers, possibly written with a fraction of zeros (JSON Schema: 1.0 is an integer).
    let arr: Vec<f64> = serde_json::from_str(v["text"].as_str().unwrap()).unwrap();
    assert!(
        arr.len() >= 2 && arr.iter().all(|x| x.fract() == 0.0),
        "{arr:?}"
    );
    std::fs::write(&schema, r#"{"type": "string", "pattern": "(?=a)"}"#).unwrap();
    fails_with(
        &["generate", &f, "--tokens", "1", "--constraint", &spec],
        "unsupported JSON Schema keyword \"pattern with a lookahead\"",
    );
    std::fs::remove_dir_all(&dir).ok();
    let v = json(&[
        "generate",
        &f,
        "--tokens",
        "1",
        "-n",
        "8",
        "--constraint",
        "balanced",
        "--eddy",
        "--prosody",
        "observe",
        "--json",
    ]);
    assert_eq!(v["constraint"]["closed"], true);
    fails_with(
        &["generate", &f, "--tokens", "1", "--constraint", "xml"],
        "--constraint must be json, balanced or schema:FILE.json",
    );
    fails_with(
        &["generate", &f, "--tokens", "1", "--prosody", "loud"],
        "--prosody must be off, observe or bias",
    );
    fails_with(
        &["generate", &f, "--tokens", "1", "--max-depth", "0"],
        "maxDepth",
    );
    fails_with(
        &[
            "generate",
            &f,
            "--tokens",
            "1",
            "--constraint",
            "schema:/nonexistent.json",
        ],
        "cannot read the schema",
    );
    let v = json(&[
        "bench",
        &f,
        "-n",
        "4",
        "--prompt-len",
        "8",
        "--runs",
        "1",
        "--constraint",
        "json",
        "--json",
    ]);
    assert!(v["constrained_decode_tok_s"].as_f64().unwrap() > 0.0);
    assert!(v["mask_us_p50"].as_f64().is_some());
}

#[test]
fn a_messages_file_is_a_whole_conversation_through_the_template() {
    let dir = std::env::temp_dir().join(format!("knot-cli-messages-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = dir.join("one.json");
    std::fs::write(&one, r#"[{"role": "user", "content": "hello there"}]"#).unwrap();
    // The tiny fixtures have no chat template: the default model has one.
    let model = root().join("models/SmolLM2-135M-Instruct.Q4_1.knot");
    if std::env::var_os("KNOT_SKIP_MODELS").is_some() {
        eprintln!("skipping: {} (KNOT_SKIP_MODELS)", model.display());
        return;
    }
    if !model.exists() {
        assert!(
            std::env::var_os("KNOT_REQUIRE_MODELS").is_none(),
            "{} is missing: run scripts/prepare-model.sh",
            model.display()
        );
        eprintln!("skipping: {} not present", model.display());
        return;
    }
    let f = model.display().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["generate", &f, "-n", "6", "--temperature", "0", "--json"];
        args.extend_from_slice(extra);
        json(&args)
    };
    let chat = run(&["--prompt", "hello there", "--chat"]);
    let file = run(&["--messages", one.to_str().unwrap()]);
    assert_eq!(ids(&chat["prompt_ids"]), ids(&file["prompt_ids"]));
    assert_eq!(ids(&chat["ids"]), ids(&file["ids"]));
    // A longer conversation renders to a longer prompt that starts the same way.
    let two = dir.join("two.json");
    std::fs::write(
        &two,
        r#"[{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "again"}]"#,
    )
    .unwrap();
    let longer = run(&["--messages", two.to_str().unwrap()]);
    assert!(ids(&longer["prompt_ids"]).len() > ids(&file["prompt_ids"]).len());
    // The OpenAI penalties are accepted, and out of range they are errors.
    run(&[
        "--messages",
        one.to_str().unwrap(),
        "--frequency-penalty",
        "-1.5",
    ]);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"[{"role": "user"}]"#).unwrap();
    fails_with(
        &["generate", &f, "--messages", bad.to_str().unwrap()],
        "messages must be",
    );
    fails_with(
        &["generate", &f, "--prompt", "x", "--presence-penalty", "3"],
        "presence_penalty must be a number in [-2, 2], got 3",
    );
    std::fs::remove_dir_all(&dir).ok();
}
