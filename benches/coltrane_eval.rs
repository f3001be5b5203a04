//! What COLTRANE's masks do on the real model (SmolLM2-135M-Instruct), against the same decoding
//! without them, on the prompts and schemas in tests/fixtures/coltrane/:
//!   json        32 prompts asking for JSON, greedy and T 0.7 (seeds 11, 29), up to 96 tokens:
//!               share of outputs that are one JSON value (constrained, and unconstrained strict
//!               and lenient: the first JSON value found in the text)
//!   json_schema 13 schemas (nested objects, min/maxItems, enum, const, required,
//!               additionalProperties false or a schema, anyOf, $ref/$defs with recursion,
//!               min/maxLength, prefixItems, type lists): share valid under the `jsonschema`
//!               crate (an independent validator)
//!   budgets     the same at 24 tokens (and JSON at 8, greedy): outputs must still parse, and
//!               validate; `over_budget` counts the outputs the constraint flagged
//! Notes list valid outputs with a repeated object key (serde_json keeps the last, so no
//! validator sees it) and the rows count trailing whitespace (the matcher allows 24 bytes).
//!   balanced    12 code-ish prompts: closure = the constraint's `closed` at the end and our own
//!               bracket/quote scan of the text; fold violations from metrics and the scan
//!   eddy        13 story/poem prompts on which plain greedy loops: repeated 4-gram share,
//!               distinct-2, loops broken and returned, plain greedy against greedy + eddy
//!               (defaults, periods up to 12 tokens only, no fallback)
//!   prosody     the story prompts at 40 tokens: outputs ending a sentence (or stopping)
//! with each row's mean tokens, mask time p50/p99 (pooled over the steps' reports) and fallback
//! rate (steps where a soft tier relaxed / steps), then the rollout gates:
//!   fold violations < 5% of balanced outputs, harmonic closure > 95% of balanced outputs,
//!   eddy avoidance (1 − eddiesReturned / eddiesBroken, default eddy runs) > 90%,
//!   fallbacks < 5% of the steps of the soft-tier runs (balanced, default eddy).
//!   cargo bench --bench coltrane_eval [model.knot] [--json] [--quick: 3 of each, a smoke run]
//!
//! The loop and the checks are shared with tests/coltrane_smollm2.rs (the CI subset).

use coltrane::Metrics;
use engine::chat::{chat_prompt, ChatMessage};
use engine::decode::{FinishReason, GenerateOptions, Generation};
use engine::tokenizer::Tokenizer;
use engine::{Model, Session};
use knot_suite::{fixture, KnotFile};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Instant;

pub const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.knot";
pub const SEEDS: [u64; 2] = [11, 29];
pub const TEMPERATURE: f64 = 0.7;
/// `balanced`'s default depth bound (the constraint's `maxDepth`).
pub const MAX_DEPTH: usize = 16;
/// An output loops when at least this share of its 4-grams repeat an earlier one.
pub const LOOPING: f64 = 0.25;

// ---- fixtures ---------------------------------------------------------------------------------

/// The `prompts` array of a fixture file under tests/fixtures/coltrane/.
pub fn prompts(file: &str) -> Vec<String> {
    let v = read_fixture(&format!("coltrane/{file}"));
    serde_json::from_value(v["prompts"].clone()).expect("a prompts array")
}

pub struct SchemaCase {
    pub name: String,
    pub prompt: String,
    pub schema: Value,
}

/// tests/fixtures/coltrane/schemas/*.json, by file name.
pub fn schemas() -> Vec<SchemaCase> {
    let dir = fixture("coltrane/schemas");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let v = read_fixture(&format!("coltrane/schemas/{n}"));
            SchemaCase {
                name: n.trim_end_matches(".json").to_string(),
                prompt: v["prompt"].as_str().expect("a prompt").to_string(),
                schema: v["schema"].clone(),
            }
        })
        .collect()
}

fn read_fixture(rel: &str) -> Value {
    let p = fixture(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The options object the JS API takes: greedy (`seed` None) or T 0.7 with the seed.
pub fn options(seed: Option<u64>, max_tokens: usize, coltrane: Option<Value>) -> Value {
    let mut o = json!({ "maxTokens": max_tokens, "temperature": 0 });
    if let Some(s) = seed {
        o["temperature"] = json!(TEMPERATURE);
        o["seed"] = json!(s);
    }
    if let Some(c) = coltrane {
        o["coltrane"] = c;
    }
    o
}

// ---- the decode loop --------------------------------------------------------------------------

/// One model and a session, generating from chat prompts through `Generation`.
pub struct Lm<'a> {
    model: Model<'a>,
    session: Session,
    tokenizer: Rc<Tokenizer>,
    template: Option<String>,
}

/// One generation.
#[derive(Debug, Default)]
pub struct Output {
    /// Generated ids, end-of-text excluded.
    pub ids: Vec<u32>,
    pub text: String,
    /// Ended by end-of-text (else by the token budget).
    pub stopped: bool,
    /// The constraint's metrics, from the last token.
    pub metrics: Option<Metrics>,
    /// The mask time of every step (µs), from the steps' coltrane reports.
    pub mask_us: Vec<f32>,
    /// Steps whose coltrane report relaxed a soft tier.
    pub relaxed_steps: u64,
}

fn clock_ms() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
}

impl<'a> Lm<'a> {
    pub fn new(file: &'a KnotFile) -> Lm<'a> {
        let model = file.model();
        let session = Session::new(&model.config, 1024).expect("session");
        Lm {
            model,
            session,
            tokenizer: Rc::new(file.tokenizer()),
            template: file.knot.meta.chat_template.clone(),
        }
    }

    /// `user` as a one-message chat, tokenized.
    pub fn prompt(&self, user: &str) -> Vec<u32> {
        let text = chat_prompt(
            self.template.as_deref(),
            &self.tokenizer,
            &[ChatMessage::new("user", user)],
        )
        .expect("chat template");
        self.tokenizer.encode(&text).unwrap()
    }

    /// Generates for `user` with `options` (the JS API's options object).
    pub fn generate(&mut self, user: &str, options: &Value) -> Output {
        let opts = GenerateOptions::from_value(options)
            .unwrap_or_else(|e| panic!("options {options}: {e}"));
        let prompt = self.prompt(user);
        let eos = self.model.config.eos_ids.clone();
        let room = self.session.max_context() - prompt.len();
        let mut g = Generation::new(&opts, self.tokenizer.clone(), &eos, room).expect("generation");
        g.set_clock(clock_ms);
        g.accept_context(&prompt);
        self.session.reset();
        let mut logits = self
            .model
            .forward(&mut self.session, &prompt, false)
            .expect("prefill")
            .to_vec();
        let mut out = Output::default();
        loop {
            let e = g.next(&mut logits).expect("decode step");
            for r in e.step.stages.iter().filter_map(|s| s.coltrane.as_ref()) {
                out.mask_us.push(r.mask_us);
                out.relaxed_steps += u64::from(r.relaxed > 0);
            }
            out.text.push_str(&e.text);
            let stop = e.finish_reason == Some(FinishReason::Stop);
            if !stop {
                out.ids.push(e.id);
            }
            if e.finish_reason.is_some() {
                out.stopped = stop;
                out.metrics = e.constraint;
                assert_eq!(
                    out.metrics,
                    g.constraint_metrics(),
                    "metrics on the last token"
                );
                break;
            }
            logits.copy_from_slice(
                self.model
                    .forward(&mut self.session, &[e.id], false)
                    .expect("decode"),
            );
        }
        out
    }
}

// ---- independent checks -----------------------------------------------------------------------

/// The whole text is one JSON value (whitespace around it allowed).
pub fn parse(text: &str) -> Option<Value> {
    serde_json::from_str(text).ok()
}

/// The first JSON object or array found in the text (in a code fence or not).
pub fn parse_lenient(text: &str) -> Option<Value> {
    text.char_indices()
        .filter(|&(_, c)| c == '{' || c == '[')
        .find_map(|(i, _)| {
            let mut it = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
            it.next()?.ok()
        })
}

/// Object keys that repeat an earlier key of the same object, in text that is one JSON value
/// (serde_json keeps the last of duplicates, so a validator never sees them).
pub fn duplicate_keys(text: &str) -> usize {
    let b = text.as_bytes();
    // One entry per open container: the keys of an object, None for an array.
    let mut stack: Vec<Option<HashSet<String>>> = Vec::new();
    let mut key_next = false;
    let mut dups = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                stack.push(Some(HashSet::new()));
                key_next = true;
            }
            b'[' => stack.push(None),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => key_next = matches!(stack.last(), Some(Some(_))),
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if key_next {
                    let key: String =
                        serde_json::from_str(&text[start..=i.min(b.len() - 1)]).unwrap_or_default();
                    if let Some(Some(keys)) = stack.last_mut() {
                        dups += usize::from(!keys.insert(key));
                    }
                    key_next = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    dups
}

/// Brackets `()`, `[]`, `{}` and `"` quotes (backslash escapes inside quotes), as `balanced`
/// defines them, scanned from the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folds {
    /// Nothing left open at the end.
    pub closed: bool,
    /// Closers with no opener or of the wrong kind, and openers past `max_depth`.
    pub violations: usize,
    pub max_depth: usize,
}

pub fn fold_check(text: &str, max_depth: usize) -> Folds {
    let mut open: Vec<char> = Vec::new();
    let (mut quoted, mut escaped) = (false, false);
    let (mut violations, mut deepest) = (0, 0);
    for c in text.chars() {
        if quoted {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '(' | '[' | '{' => {
                open.push(c);
                deepest = deepest.max(open.len());
                violations += usize::from(open.len() > max_depth);
            }
            ')' | ']' | '}' => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                violations += usize::from(open.pop() != Some(want));
            }
            _ => {}
        }
    }
    Folds {
        closed: open.is_empty() && !quoted,
        violations,
        max_depth: deepest,
    }
}

/// Share of an output's 4-grams seen earlier in the same output.
pub fn repeated_4grams(ids: &[u32]) -> f64 {
    let grams: Vec<&[u32]> = ids.windows(4).collect();
    if grams.is_empty() {
        return 0.0;
    }
    let mut seen = HashSet::new();
    let repeats = grams.iter().filter(|g| !seen.insert(**g)).count();
    repeats as f64 / grams.len() as f64
}

/// Unique token bigrams / bigrams.
pub fn distinct_2(ids: &[u32]) -> f64 {
    let pairs: Vec<(u32, u32)> = ids.windows(2).map(|w| (w[0], w[1])).collect();
    if pairs.is_empty() {
        return 1.0;
    }
    pairs.iter().collect::<HashSet<_>>().len() as f64 / pairs.len() as f64
}

/// Whitespace bytes after the last visible character.
pub fn trailing_whitespace(text: &str) -> usize {
    text.len() - text.trim_end().len()
}

/// The text's last visible character ends a sentence.
pub fn ends_sentence(text: &str) -> bool {
    text.trim_end()
        .trim_end_matches(['"', '\'', ')', '*'])
        .ends_with(['.', '!', '?'])
}

// ---- the benchmark ----------------------------------------------------------------------------

/// Totals over a set of outputs.
#[derive(Default)]
struct Tally {
    outputs: usize,
    ok: usize,
    tokens: usize,
    stopped: usize,
    steps: u64,
    fallbacks: u64,
    mask_us: Vec<f32>,
}

impl Tally {
    fn add(&mut self, o: &Output, ok: bool) {
        self.outputs += 1;
        self.ok += usize::from(ok);
        self.tokens += o.ids.len() + usize::from(o.stopped);
        self.stopped += usize::from(o.stopped);
        if let Some(m) = &o.metrics {
            self.steps += m.steps;
            self.fallbacks += m.fallbacks;
            assert_eq!(
                m.fallbacks, o.relaxed_steps,
                "metrics.fallbacks = relaxed steps"
            );
        }
        self.mask_us.extend(&o.mask_us);
    }

    fn rate(&self) -> f64 {
        ratio(self.ok as f64, self.outputs as f64)
    }

    fn mean_tokens(&self) -> f64 {
        ratio(self.tokens as f64, self.outputs as f64)
    }

    fn fallback_rate(&self) -> f64 {
        ratio(self.fallbacks as f64, self.steps as f64)
    }

    fn mask_percentile(&self, q: f64) -> f64 {
        if self.mask_us.is_empty() {
            return 0.0;
        }
        let mut t = self.mask_us.clone();
        t.sort_by(f32::total_cmp);
        t[((t.len() - 1) as f64 * q).round() as usize] as f64
    }

    fn constrained(&self) -> Value {
        json!({
            "outputs": self.outputs, "ok": self.ok, "rate": self.rate(),
            "mean_tokens": self.mean_tokens(), "stopped": self.stopped,
            "mask_us_p50": self.mask_percentile(0.5), "mask_us_p99": self.mask_percentile(0.99),
            "steps": self.steps, "fallbacks": self.fallbacks, "fallback_rate": self.fallback_rate(),
        })
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// One table row: a preset in a mode, constrained against unconstrained.
struct Row {
    preset: &'static str,
    mode: String,
    constrained: Tally,
    /// Unconstrained: strict and lenient (JSON found somewhere in the text).
    plain: Option<(Tally, Tally)>,
    extra: Value,
}

impl Row {
    fn new(preset: &'static str, mode: &str, baseline: bool) -> Row {
        Row {
            preset,
            mode: mode.to_string(),
            constrained: Tally::default(),
            plain: baseline.then(|| (Tally::default(), Tally::default())),
            extra: json!({}),
        }
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "preset": self.preset, "mode": self.mode,
            "constrained": self.constrained.constrained(), "extra": self.extra,
        });
        if let Some((strict, lenient)) = &self.plain {
            v["unconstrained"] = json!({
                "outputs": strict.outputs, "ok": strict.ok, "rate": strict.rate(),
                "ok_lenient": lenient.ok, "rate_lenient": lenient.rate(),
                "mean_tokens": strict.mean_tokens(), "stopped": strict.stopped,
            });
        }
        v
    }
}

/// The modes every preset runs in: greedy, and T 0.7 with each seed.
fn modes() -> Vec<(String, Option<u64>)> {
    let mut m = vec![("greedy".to_string(), None)];
    m.extend(SEEDS.map(|s| (format!("T{TEMPERATURE} seed {s}"), Some(s))));
    m
}

/// Everything measured on the story prompts for one eddy configuration.
#[derive(Default)]
struct EddyTally {
    outputs: usize,
    looping: usize,
    rep4: f64,
    distinct2: f64,
    tokens: usize,
    broken: u64,
    returned: u64,
    steps: u64,
    fallbacks: u64,
}

impl EddyTally {
    fn add(&mut self, o: &Output) {
        let r = repeated_4grams(&o.ids);
        self.outputs += 1;
        self.looping += usize::from(r >= LOOPING);
        self.rep4 += r;
        self.distinct2 += distinct_2(&o.ids);
        self.tokens += o.ids.len();
        if let Some(m) = &o.metrics {
            self.broken += m.eddies_broken;
            self.returned += m.eddies_returned;
            self.steps += m.steps;
            self.fallbacks += m.fallbacks;
        }
    }

    fn avoidance(&self) -> f64 {
        match self.broken {
            0 => 1.0,
            b => 1.0 - self.returned as f64 / b as f64,
        }
    }

    fn json(&self, name: &str) -> Value {
        let k = self.outputs.max(1) as f64;
        json!({
            "config": name, "outputs": self.outputs, "looping": self.looping,
            "repeated_4gram_share": self.rep4 / k, "distinct_2": self.distinct2 / k,
            "mean_tokens": self.tokens as f64 / k, "eddies_broken": self.broken,
            "eddies_returned": self.returned, "avoidance": self.avoidance(),
            "steps": self.steps, "fallbacks": self.fallbacks,
            "fallback_rate": ratio(self.fallbacks as f64, self.steps as f64),
        })
    }
}

fn progress(what: &str, started: Instant) {
    eprintln!("[{:>6.1}s] {what}", started.elapsed().as_secs_f64());
}

fn main() {
    let as_json = std::env::args().any(|a| a == "--json");
    let path = knot_suite::bench_model_arg();
    let file = KnotFile::read(&path);
    let mut lm = Lm::new(&file);
    let started = Instant::now();
    let mut json_prompts = prompts("json_prompts.json");
    let mut schema_cases = schemas();
    let mut balanced_prompts = prompts("balanced_prompts.json");
    let mut stories = prompts("story_prompts.json");
    if std::env::args().any(|a| a == "--quick") {
        json_prompts.truncate(3);
        schema_cases.truncate(3);
        balanced_prompts.truncate(3);
        stories.truncate(3);
    }
    let validators: Vec<jsonschema::Validator> = schema_cases
        .iter()
        .map(|c| {
            jsonschema::validator_for(&c.schema)
                .unwrap_or_else(|e| panic!("{}: jsonschema refuses the schema: {e}", c.name))
        })
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();

    // JSON and JSON Schema at 96 tokens, constrained and not.
    const N: usize = 96;
    for (mode, seed) in modes() {
        let mut row = Row::new("json", &mode, true);
        let (mut dups, mut pad) = (0, 0);
        for p in &json_prompts {
            let o = lm.generate(p, &options(seed, N, Some(json!({ "preset": "json" }))));
            let ok = parse(&o.text).is_some();
            if !ok {
                failures.push(format!("json {mode} {p:?}: {:?}", o.text));
            }
            if ok && duplicate_keys(&o.text) > 0 {
                dups += 1;
                notes.push(format!("json {mode} {p:?}: duplicate key: {:?}", o.text));
            }
            pad += trailing_whitespace(&o.text);
            row.constrained.add(&o, ok);
            let u = lm.generate(p, &options(seed, N, None));
            let (strict, lenient) = row.plain.as_mut().expect("baseline");
            strict.add(&u, parse(&u.text).is_some());
            lenient.add(&u, parse_lenient(&u.text).is_some());
        }
        row.extra = json!({
            "duplicate_key_outputs": dups,
            "trailing_whitespace_bytes_mean": pad as f64 / json_prompts.len() as f64,
        });
        progress(&format!("json {mode}"), started);
        rows.push(row);
    }
    for (mode, seed) in modes() {
        let mut row = Row::new("json_schema", &mode, true);
        let (mut dups, mut over_budget, mut pad) = (0, 0, 0);
        for (case, v) in schema_cases.iter().zip(&validators) {
            let c = json!({ "preset": "json_schema", "schema": case.schema });
            let o = lm.generate(&case.prompt, &options(seed, N, Some(c)));
            let ok = parse(&o.text).is_some_and(|x| v.is_valid(&x));
            if !ok {
                failures.push(format!("schema {} {mode}: {:?}", case.name, o.text));
            }
            if ok && duplicate_keys(&o.text) > 0 {
                dups += 1;
                notes.push(format!(
                    "schema {} {mode}: duplicate key: {:?}",
                    case.name, o.text
                ));
            }
            pad += trailing_whitespace(&o.text);
            over_budget += usize::from(o.metrics.as_ref().is_some_and(|m| m.over_budget));
            row.constrained.add(&o, ok);
            let u = lm.generate(&case.prompt, &options(seed, N, None));
            let (strict, lenient) = row.plain.as_mut().expect("baseline");
            strict.add(&u, parse(&u.text).is_some_and(|x| v.is_valid(&x)));
            lenient.add(&u, parse_lenient(&u.text).is_some_and(|x| v.is_valid(&x)));
        }
        row.extra = json!({
            "duplicate_key_outputs": dups, "over_budget": over_budget,
            "trailing_whitespace_bytes_mean": pad as f64 / schema_cases.len() as f64,
        });
        progress(&format!("json_schema {mode}"), started);
        rows.push(row);
    }

    // Small budgets: the value must still close in time.
    let mut budget_modes: Vec<(String, Option<u64>, usize)> = modes()
        .into_iter()
        .map(|(m, s)| (format!("{m}, 24 tok"), s, 24))
        .collect();
    budget_modes.push(("greedy, 8 tok".to_string(), None, 8));
    for (mode, seed, n) in &budget_modes {
        let mut row = Row::new("json", mode, false);
        for p in &json_prompts {
            let o = lm.generate(p, &options(*seed, *n, Some(json!({ "preset": "json" }))));
            let ok = parse(&o.text).is_some();
            if !ok {
                failures.push(format!("json {mode} {p:?}: {:?}", o.text));
            }
            row.constrained.add(&o, ok);
        }
        rows.push(row);
        if *n < 24 {
            continue;
        }
        let mut row = Row::new("json_schema", mode, false);
        let (mut parsed, mut over_budget, mut over_but_valid) = (0, 0, 0);
        for (case, v) in schema_cases.iter().zip(&validators) {
            let c = json!({ "preset": "json_schema", "schema": case.schema });
            let o = lm.generate(&case.prompt, &options(*seed, *n, Some(c)));
            let value = parse(&o.text);
            parsed += usize::from(value.is_some());
            let ok = value.is_some_and(|x| v.is_valid(&x));
            let over = o.metrics.as_ref().is_some_and(|m| m.over_budget);
            over_budget += usize::from(over);
            over_but_valid += usize::from(over && ok);
            if !ok {
                failures.push(format!(
                    "schema {} {mode} (over budget: {over}): {:?}",
                    case.name, o.text
                ));
            }
            row.constrained.add(&o, ok);
        }
        row.extra = json!({
            "parsed": parsed, "over_budget": over_budget,
            "over_budget_yet_valid": over_but_valid,
        });
        rows.push(row);
        progress(&format!("budgets {mode}"), started);
    }

    // balanced: closure and fold violations.
    let (mut balanced_outputs, mut fold_violating, mut closed_outputs) = (0, 0, 0);
    let mut soft = Tally::default();
    for (mode, seed) in modes() {
        let mut row = Row::new("balanced", &mode, true);
        let (mut violating, mut metric_closed, mut scan_closed, mut deepest) = (0, 0, 0, 0);
        for p in &balanced_prompts {
            let o = lm.generate(p, &options(seed, N, Some(json!({ "preset": "balanced" }))));
            let m = o.metrics.clone().expect("metrics");
            let f = fold_check(&o.text, MAX_DEPTH);
            let closed = m.closed && f.closed;
            let bad = m.fold_violations > 0 || f.violations > 0;
            if !closed || bad {
                failures.push(format!(
                    "balanced {mode} {p:?}: closed {}/{}, violations {}/{}: {:?}",
                    m.closed, f.closed, m.fold_violations, f.violations, o.text
                ));
            }
            metric_closed += usize::from(m.closed);
            scan_closed += usize::from(f.closed);
            violating += usize::from(bad);
            deepest = deepest.max(f.max_depth);
            row.constrained.add(&o, closed);
            soft.add(&o, true);
            let u = lm.generate(p, &options(seed, N, None));
            let fu = fold_check(&u.text, MAX_DEPTH);
            let (strict, lenient) = row.plain.as_mut().expect("baseline");
            strict.add(&u, fu.closed);
            lenient.add(&u, fu.closed && fu.violations == 0);
        }
        balanced_outputs += row.constrained.outputs;
        fold_violating += violating;
        closed_outputs += row.constrained.ok;
        row.extra = json!({
            "closed_metric": metric_closed, "closed_scan": scan_closed,
            "fold_violation_outputs": violating, "deepest": deepest,
        });
        progress(&format!("balanced {mode}"), started);
        rows.push(row);
    }

    // eddy: greedy on prompts where it loops.
    const EDDY_N: usize = 128;
    let eddy_configs: [(&str, Option<Value>); 4] = [
        ("plain greedy", None),
        ("greedy + eddy", Some(json!({ "eddy": true }))),
        (
            "greedy + eddy ngram 12",
            Some(json!({ "eddy": { "ngram": 12 } })),
        ),
        (
            "greedy + eddy, fallbackMass 0",
            Some(json!({ "eddy": true, "fallbackMass": 0 })),
        ),
    ];
    let mut eddy_rows = Vec::new();
    let mut eddy_default = EddyTally::default();
    for (name, c) in &eddy_configs {
        let mut t = EddyTally::default();
        for p in &stories {
            let o = lm.generate(p, &options(None, EDDY_N, c.clone()));
            t.add(&o);
            if *name == "greedy + eddy" {
                eddy_default.add(&o);
                soft.add(&o, true);
            }
        }
        progress(name, started);
        eddy_rows.push(t.json(name));
    }

    // Terminal prosody at a short budget.
    const PROSODY_N: usize = 40;
    let mut prosody_rows = Vec::new();
    for (name, c) in [
        ("plain greedy", None),
        ("greedy + prosody bias", Some(json!({ "prosody": "bias" }))),
    ] {
        let (mut ends, mut stops, mut metric_ends, mut tokens) = (0, 0, 0, 0);
        for p in &stories {
            let o = lm.generate(p, &options(None, PROSODY_N, c.clone()));
            ends += usize::from(o.stopped || ends_sentence(&o.text));
            stops += usize::from(o.stopped);
            metric_ends += usize::from(o.metrics.as_ref().is_some_and(|m| m.sentence_end));
            tokens += o.ids.len();
        }
        prosody_rows.push(json!({
            "config": name, "outputs": stories.len(), "ends_sentence_or_stops": ends,
            "stopped": stops, "sentence_end_metric": metric_ends,
            "mean_tokens": tokens as f64 / stories.len() as f64,
        }));
    }
    progress("prosody", started);

    let gates = [
        (
            "fold-depth violations (share of balanced outputs)",
            ratio(fold_violating as f64, balanced_outputs as f64),
            "< 0.05",
            ratio(fold_violating as f64, balanced_outputs as f64) < 0.05,
        ),
        (
            "harmonic closure (share of balanced outputs)",
            ratio(closed_outputs as f64, balanced_outputs as f64),
            "> 0.95",
            ratio(closed_outputs as f64, balanced_outputs as f64) > 0.95,
        ),
        (
            "eddy avoidance (1 - returned / broken)",
            eddy_default.avoidance(),
            "> 0.90",
            eddy_default.avoidance() > 0.90,
        ),
        (
            "fallback rate (fallbacks / steps, balanced + eddy)",
            soft.fallback_rate(),
            "< 0.05",
            soft.fallback_rate() < 0.05,
        ),
    ];

    if as_json {
        let gates: Vec<Value> = gates
            .iter()
            .map(|(name, value, target, pass)| {
                json!({ "gate": name, "value": value, "target": target, "pass": pass })
            })
            .collect();
        let doc = json!({
            "model": file.knot.meta.name,
            "prompts": {
                "json": json_prompts.len(), "schemas": schema_cases.len(),
                "balanced": balanced_prompts.len(), "stories": stories.len(),
            },
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
            "eddy": eddy_rows, "prosody": prosody_rows, "gates": gates,
            "failures": failures, "notes": notes,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!("{doc}");
        return;
    }

    println!(
        "COLTRANE on {}: {} JSON prompts, {} schemas, {} balanced prompts, {} story prompts; \
         greedy and T{TEMPERATURE} seeds {SEEDS:?}",
        file.knot.meta.name,
        json_prompts.len(),
        schema_cases.len(),
        balanced_prompts.len(),
        stories.len()
    );
    println!("ok = parses (json), validates (json_schema), closed (balanced); unconstrained strict / lenient (json found in the text; balanced: closed and no violation)");
    println!(
        "{:<12} {:<22} {:>4} {:>8} {:>15} {:>11} {:>9} {:>9} {:>9}",
        "preset", "mode", "n", "ok", "ok unconstr.", "mean tok", "mask p50", "mask p99", "fallback"
    );
    for r in &rows {
        let c = &r.constrained;
        let (plain, plain_tokens) = match &r.plain {
            Some((s, l)) => (
                format!("{:.3} / {:.3}", s.rate(), l.rate()),
                format!("{:>5.1}", s.mean_tokens()),
            ),
            None => ("-".to_string(), "    -".to_string()),
        };
        println!(
            "{:<12} {:<22} {:>4} {:>8.3} {:>15} {:>5.1}/{} {:>7.0}us {:>7.0}us {:>9.4}",
            r.preset,
            r.mode,
            c.outputs,
            c.rate(),
            plain,
            c.mean_tokens(),
            plain_tokens,
            c.mask_percentile(0.5),
            c.mask_percentile(0.99),
            c.fallback_rate()
        );
        if r.extra.as_object().is_some_and(|o| !o.is_empty()) {
            println!("{:<35} {}", "", r.extra);
        }
    }
    println!("\neddy: {} story prompts, greedy, {EDDY_N} tokens (looping = repeated 4-gram share >= {LOOPING})", stories.len());
    println!(
        "{:<30} {:>8} {:>12} {:>10} {:>9} {:>7} {:>9} {:>10} {:>9}",
        "",
        "looping",
        "rep. 4-gram",
        "distinct-2",
        "mean tok",
        "broken",
        "returned",
        "avoidance",
        "fallback"
    );
    for e in &eddy_rows {
        println!(
            "{:<30} {:>5}/{:<2} {:>12.4} {:>10.4} {:>9.1} {:>7} {:>9} {:>10.3} {:>9.4}",
            e["config"].as_str().unwrap_or(""),
            e["looping"],
            e["outputs"],
            e["repeated_4gram_share"].as_f64().unwrap_or(0.0),
            e["distinct_2"].as_f64().unwrap_or(0.0),
            e["mean_tokens"].as_f64().unwrap_or(0.0),
            e["eddies_broken"],
            e["eddies_returned"],
            e["avoidance"].as_f64().unwrap_or(0.0),
            e["fallback_rate"].as_f64().unwrap_or(0.0),
        );
    }
    println!("\nprosody: story prompts, greedy, {PROSODY_N} tokens");
    for p in &prosody_rows {
        println!(
            "{:<30} ends a sentence or stops {}/{}, stopped {}, metrics.sentenceEnd {}, mean tok {:.1}",
            p["config"].as_str().unwrap_or(""),
            p["ends_sentence_or_stops"],
            p["outputs"],
            p["stopped"],
            p["sentence_end_metric"],
            p["mean_tokens"].as_f64().unwrap_or(0.0)
        );
    }
    println!("\nrollout gates");
    for (name, value, target, pass) in &gates {
        println!(
            "  {name:<52} {value:>7.4} {target:<7} {}",
            if *pass { "PASS" } else { "FAIL" }
        );
    }
    println!("\nconstrained outputs that missed: {}", failures.len());
    if !failures.is_empty() {
        for f in &failures {
            println!("  {f}");
        }
    }
    if !notes.is_empty() {
        println!("\nnotes ({}):", notes.len());
        for n in &notes {
            println!("  {n}");
        }
    }
    println!("\n{:.0} s", started.elapsed().as_secs_f64());
}
