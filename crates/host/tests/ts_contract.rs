//! The contract between the Rust types the package reports as JSON (host `Stats`, `MemoryPlan`,
//! `PrefixReport`, a sequence's `SequenceReport` and `Admitted`, engine `StepInfo`, COLTRANE's
//! step report and metrics, MOA's report, `planStations`' `StationLayout`) and their TypeScript
//! declarations (pkg/src/types/reports.d.ts,
//! helpers.d.ts). Real values of each are serialized — numbers zeroed and arrays cut to one
//! element, so the file depends on the shapes only — into pkg/test/contract.generated.ts, which
//! `npm run typecheck` compiles against the declarations: a field Rust adds, renames or drops,
//! or one the declarations add, fails one side or the other.

mod common;

use common::Instrumented;
use engine::decode::GenerateOptions;
use futures::executor::block_on;
use host::{ErrorCode, Host, HostOptions};
use knot_suite::fixture;
use serde_json::{json, Value};
use std::path::PathBuf;

const GENERATED: &str = "pkg/test/contract.generated.ts";

/// The shape of a value: numbers 0, arrays of their first element, prefill window ids one fixed
/// id, objects and the rest as they are (strings name discriminants such as `picker`).
fn shape(v: &Value) -> Value {
    match v {
        Value::Number(_) => json!(0),
        Value::Array(a) => Value::Array(a.iter().take(1).map(shape).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        // A prefill window's id carries a random part.
        Value::String(s) if s.starts_with("pw-") => json!("pw-1-00000000"),
        other => other.clone(),
    }
}

fn options(json: Value) -> GenerateOptions {
    GenerateOptions::from_value(&json).unwrap()
}

/// The steps and metrics of one generation on the tiny model.
fn run(host: &mut Host, options: Value) -> (Vec<Value>, Option<Value>) {
    let out = block_on(host.generate(&[1, 2, 3], &self::options(options), &mut |_| true)).unwrap();
    let steps = out.steps.iter().map(|s| serde_json::to_value(s).unwrap());
    let metrics = out.constraint.map(|m| serde_json::to_value(m).unwrap());
    (steps.collect(), metrics)
}

fn bytes_of_tiny() -> Vec<u8> {
    std::fs::read(fixture("tiny/llama-f32.knot")).unwrap()
}

/// A split model's coordinator (the embedding sharded, so every field has a value) during a
/// generation.
fn coordinator_stats(bytes: Vec<u8>) -> Value {
    use host::station::coordinator::{Model, ModelOptions};
    use host::station::embedding::EmbeddingOptions;
    use host::station::sequences::Sequences;
    use host::{MemorySource, ReadPolicy, Reader};
    let policy = ReadPolicy {
        timeout_ms: 0,
        ..ReadPolicy::default()
    };
    let reader = Reader::new(std::rc::Rc::new(MemorySource::new(bytes)), policy);
    let o = ModelOptions {
        context: 64,
        embedding: EmbeddingOptions {
            budget: 0,
            ..EmbeddingOptions::default()
        },
        ..ModelOptions::default()
    };
    let model = block_on(Model::open(reader, &Default::default(), o)).unwrap();
    let mut sequences = Sequences::new(1, 0, 1);
    sequences
        .admit(&model, &[1, 2, 3], &options(json!({})))
        .unwrap();
    sequences.plan(&model).unwrap();
    serde_json::to_value(model.stats()).unwrap()
}

fn contract() -> String {
    let bytes = bytes_of_tiny();
    let opts = HostOptions {
        lru_capacity: 2,
        memory_budget: Some(64 << 20),
        prefix_windows: 1,
        ..HostOptions::default()
    };
    let mut host = block_on(Host::open(Instrumented::new(bytes.clone()), opts)).unwrap();
    let (greedy, _) = run(&mut host, json!({ "maxTokens": 2, "repeatPenalty": 1.1 }));
    let (sample, _) = run(
        &mut host,
        json!({ "maxTokens": 2, "temperature": 0.8, "seed": 1 }),
    );
    let (moa, _) = run(&mut host, json!({ "maxTokens": 2, "moa": true }));
    let (constrained, metrics) = run(
        &mut host,
        json!({ "maxTokens": 4, "coltrane": { "preset": "balanced", "eddy": true } }),
    );
    // A second turn of a conversation, so the prefix reuse counts are there.
    run(&mut host, json!({ "maxTokens": 1, "reusePrefix": true }));
    // And a sequence served from an explicit prefill window (which stays for the stats to
    // list), admitted and stepped to its end: what admit answers, and the report its last event
    // carries (the stats keep it as the last generation's).
    let created = block_on(host.create_prefill_window(&[1, 2], None)).unwrap();
    let opts = options(json!({ "maxTokens": 3, "prefillWindow": created.window.id }));
    let admitted = host.admit(&[1, 2, 3], &opts).unwrap();
    let mut report = None;
    while report.is_none() {
        for e in block_on(host.step()) {
            e.token.unwrap();
            report = report.or(e.report);
        }
    }
    let report = serde_json::to_value(report.unwrap()).unwrap();
    let admitted = serde_json::to_value(&admitted).unwrap();
    let created = serde_json::to_value(&created).unwrap();
    let stats = serde_json::to_value(host.stats()).unwrap();
    assert_eq!(stats["generation"], report);
    // planStations' answer on the same file (its first station is a layer station).
    let knot = knot::Knot::from_bytes(&bytes).unwrap();
    let input = host::station::plan::StationInput::new(64 << 20);
    let layout =
        serde_json::to_value(host::station::plan::plan_stations(&knot, &input).unwrap()).unwrap();
    let coordinator = coordinator_stats(bytes_of_tiny());

    let coltrane_stage = constrained[0]["stages"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["stage"] == "coltrane"))
        .expect("a coltrane stage report")
        .clone();
    let entries = [
        (
            "hostStats",
            "Required<Omit<HostStats, 'wasmMemoryBytes' | 'queue'>>",
            &stats,
        ),
        (
            "sequenceReport",
            "Required<SequenceReport>",
            &stats["generation"],
        ),
        ("admitted", "Required<Admitted>", &admitted),
        (
            "prefixReport",
            "Required<PrefixReport>",
            &stats["generation"]["prefix"],
        ),
        ("memoryPlan", "Required<MemoryPlan>", &stats["memoryPlan"]),
        (
            "prefillWindowCreated",
            "Required<PrefillWindowCreated>",
            &created,
        ),
        ("greedyStep", "StepInfo", &greedy[0]),
        ("sampleStep", "StepInfo", &sample[0]),
        ("moaStep", "StepInfo & { picker: 'moa' }", &moa[0]),
        ("moaReport", "Required<MoaStepReport>", &moa[0]),
        (
            "coltraneStage",
            "Required<StepInfo['stages'][number]>",
            &coltrane_stage,
        ),
        (
            "coltraneMetrics",
            "Required<ColtraneMetrics>",
            metrics.as_ref().expect("constraint metrics"),
        ),
        ("stationLayout", "StationLayout", &layout),
        (
            "coordinatorStats",
            "Required<CoordinatorStats>",
            &coordinator,
        ),
    ];
    let mut out = String::from(
        "// Generated by `cargo test -p host --test ts_contract` from real values of the Rust types the\n\
         // package reports (numbers zeroed, arrays cut to one element); `npm run typecheck` checks\n\
         // them against src/types/reports.d.ts. Do not edit: rerun the test with KNOT_BLESS=1.\n",
    );
    out.push_str("import type {\n");
    out.push_str(
        "  Admitted, ColtraneMetrics, CoordinatorStats, HostStats, KnotErrorCode, MemoryPlan,\n  MoaStepReport, PrefillWindowCreated, PrefixReport, SequenceReport,\n",
    );
    out.push_str("  StationLayout, StepInfo,\n} from '../src/index.js';\n");
    // The error codes (ErrorCode::ALL) and the declared KnotErrorCode must be the same set.
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    out.push_str(&format!(
        "\nexport const errorCodes = {} as const;\n\
         type RustCode = (typeof errorCodes)[number];\n\
         export const sameErrorCodes: [RustCode] extends [KnotErrorCode]\n  \
         ? ([KnotErrorCode] extends [RustCode] ? true : never)\n  : never = true;\n",
        serde_json::to_string(&codes).unwrap()
    ));
    for (name, ty, value) in entries {
        let mut v = shape(value);
        if name == "moaReport" {
            // The MOA fields of a step, alone.
            if let Value::Object(m) = &mut v {
                for k in ["token", "stages", "candidates", "picker"] {
                    m.remove(k);
                }
            }
        }
        if name == "stationLayout" {
            // A station's part is a `[start, end)` pair: both ends kept.
            if let Some(part) = v["stations"][0].get_mut("layers") {
                *part = json!([0, 0]);
            }
        }
        let literal = serde_json::to_string_pretty(&v).unwrap();
        out.push_str(&format!("\nexport const {name}: {ty} = {literal};\n"));
    }
    out
}

#[test]
fn the_typescript_declarations_match_the_rust_types() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join(GENERATED);
    let want = contract();
    if std::env::var_os("KNOT_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{GENERATED} no longer matches what the Rust types serialize: rerun with KNOT_BLESS=1 \
         (`KNOT_BLESS=1 cargo test -p host --test ts_contract`), then make pkg/src/types/*.d.ts \
         agree (`cd pkg && npm run typecheck`). New contents:\n{want}"
    );
}
