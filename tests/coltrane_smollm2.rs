//! COLTRANE on SmolLM2-135M-Instruct: the CI subset of benches/coltrane_eval.rs (same loop,
//! checks and fixtures, tests/fixtures/coltrane/), asserting the hard guarantees at short
//! budgets: constrained JSON always parses (greedy, sampled, and at a budget too small for what
//! the model wants to write), schema outputs validate under the independent `jsonschema`
//! crate, `balanced` outputs close with no fold violation (by the metrics and by our own scan),
//! and eddy breaks the loops plain greedy falls into. Skips without the model unless
//! KNOT_REQUIRE_MODELS is set. The four tests run in parallel (one model each).

#[path = "../benches/coltrane_eval.rs"]
#[allow(dead_code)]
mod eval;

use eval::{
    duplicate_keys, fold_check, options, parse, prompts, repeated_4grams, schemas, Lm, Output,
    MAX_DEPTH, MODEL,
};
use knot_suite::KnotFile;
use serde_json::json;

fn model() -> Option<KnotFile> {
    knot_suite::require_model(MODEL).map(|p| KnotFile::read(&p))
}

fn metrics(o: &Output) -> &coltrane::Metrics {
    o.metrics
        .as_ref()
        .expect("the constraint's metrics on the last token")
}

#[test]
fn json_outputs_always_parse() {
    let Some(file) = model() else { return };
    let mut lm = Lm::new(&file);
    let prompts = prompts("json_prompts.json");
    let runs = prompts[..8]
        .iter()
        .map(|p| (p, None, 48))
        .chain(prompts[8..12].iter().map(|p| (p, Some(11), 48)))
        .chain(prompts[..4].iter().map(|p| (p, Some(29), 12)));
    for (p, seed, n) in runs {
        let o = lm.generate(p, &options(seed, n, Some(json!({ "preset": "json" }))));
        let what = format!("{p:?} (seed {seed:?}, {n} tokens): {:?}", o.text);
        assert!(parse(&o.text).is_some(), "does not parse: {what}");
        let m = metrics(&o);
        assert!(m.closed, "not closed: {what}");
        assert_eq!(m.fallbacks, 0, "a hard preset fell back: {what}");
        assert!(o.ids.len() <= n);
    }
}

#[test]
fn schema_outputs_validate() {
    let Some(file) = model() else { return };
    let mut lm = Lm::new(&file);
    let cases = schemas();
    // Nested objects, $ref/$defs, prefixItems, a recursive $ref (the model nests until the
    // budget closes it).
    for name in [
        "02_nested_address",
        "06_refs_defs",
        "07_prefix_items",
        "08_recursive_tree",
    ] {
        let case = cases.iter().find(|c| c.name == name).expect("schema");
        let validator = jsonschema::validator_for(&case.schema).expect("jsonschema compiles it");
        let c = json!({ "preset": "json_schema", "schema": case.schema });
        for n in [64, 24] {
            let o = lm.generate(&case.prompt, &options(None, n, Some(c.clone())));
            let what = format!("{name} at {n} tokens: {:?}", o.text);
            let value = parse(&o.text).unwrap_or_else(|| panic!("does not parse: {what}"));
            let m = metrics(&o);
            assert!(m.closed, "not closed: {what}");
            // Each of these fits in 24 tokens, though the constraint may flag `over_budget` (its
            // closing cost counts bytes, one token each).
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "invalid ({errors:?}): {what}");
            assert_eq!(duplicate_keys(&o.text), 0, "duplicate key: {what}");
        }
    }
}

#[test]
fn balanced_outputs_close() {
    let Some(file) = model() else { return };
    let mut lm = Lm::new(&file);
    for p in &prompts("balanced_prompts.json")[..4] {
        let o = lm.generate(p, &options(None, 48, Some(json!({ "preset": "balanced" }))));
        let what = format!("{p:?}: {:?}", o.text);
        let m = metrics(&o);
        let scan = fold_check(&o.text, MAX_DEPTH);
        assert!(
            m.closed && scan.closed,
            "not closed ({m:?}, {scan:?}): {what}"
        );
        assert_eq!(m.fold_violations, 0, "fold violations: {what}");
        assert_eq!(scan.violations, 0, "our scan finds violations: {what}");
        assert!(scan.max_depth <= MAX_DEPTH);
    }
}

#[test]
fn eddy_breaks_greedy_loops() {
    let Some(file) = model() else { return };
    let mut lm = Lm::new(&file);
    let (mut plain, mut eddy) = (0.0, 0.0);
    let (mut broken, mut returned) = (0, 0);
    for p in &prompts("story_prompts.json")[..3] {
        let a = lm.generate(p, &options(None, 64, None));
        let b = lm.generate(p, &options(None, 64, Some(json!({ "eddy": true }))));
        let m = metrics(&b);
        assert!(m.eddies_broken > 0, "no loop broken on {p:?}: {:?}", b.text);
        broken += m.eddies_broken;
        returned += m.eddies_returned;
        plain += repeated_4grams(&a.ids);
        eddy += repeated_4grams(&b.ids);
    }
    eprintln!(
        "repeated 4-grams (sum over prompts): plain {plain:.3}, eddy {eddy:.3}; \
         eddies broken {broken}, returned {returned}"
    );
    assert!(
        eddy < plain,
        "repeated 4-grams: eddy {eddy:.3}, plain {plain:.3}"
    );
    assert!(
        returned * 10 < broken,
        "eddies returned {returned} of {broken}"
    );
}
