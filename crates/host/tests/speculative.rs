//! Speculative decoding through the host: the same tokens as plain decoding (greedy on every
//! reference prompt, seeded sampling, MOA, constraints), the sampled distribution checked
//! against the model's own, and the conversation parked where plain decoding leaves it (a next
//! turn with `continue` gives plain decoding's tokens) at every boundary: all of a draft kept,
//! none, end-of-text inside it, the context filling inside it, a caller stopping mid-pass; a
//! failed read during the verify pass ends the sequence, and `continue` resumes it exactly.

mod common;

use common::Instrumented;
use engine::chat::ChatMessage;
use engine::decode::{DraftChoice, FinishReason, GenerateOptions};
use engine::draft::{DraftConfig, Drafter};
use futures::executor::block_on;
use host::host::SequenceReport;
use host::{Host, HostError, HostOptions, PrefixStatus, SequenceId};
use knot_suite::{fixture, load_reference, require_model};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.knot";
const GEMMA: &str = "gemma-3-270m.knot";

fn open(bytes: Vec<u8>, lru: usize, max_context: usize) -> (Host, Rc<Instrumented>) {
    let src = Instrumented::new(bytes);
    let opts = HostOptions {
        lru_capacity: lru,
        max_context,
        ..HostOptions::default()
    };
    (block_on(Host::open(src.clone(), opts)).unwrap(), src)
}

fn options(json: &str) -> GenerateOptions {
    GenerateOptions::from_json(json).unwrap()
}

/// Runs a generation to its end: ids, finish reason, its report.
fn run(
    host: &mut Host,
    prompt: &[u32],
    opts: &GenerateOptions,
) -> (Vec<u32>, Option<FinishReason>, SequenceReport) {
    let out = block_on(host.generate(prompt, opts, &mut |_| true)).unwrap();
    (out.ids, out.finish_reason, out.report)
}

fn with_draft(opts: &GenerateOptions, cfg: DraftConfig) -> GenerateOptions {
    GenerateOptions {
        draft: DraftChoice::On(cfg),
        ..opts.clone()
    }
}

/// Drafts of whatever the lookup finds (up to 8): adaptive lengths follow measured pass times,
/// so a test that counts passes must not depend on them.
fn fixed_length() -> DraftConfig {
    DraftConfig {
        adaptive: false,
        ..DraftConfig::default()
    }
}

/// The reference prompts of a real model, or None when the model is absent (and not required).
fn model(name: &str) -> Option<Vec<u8>> {
    require_model(name).map(|p| std::fs::read(p).unwrap())
}

/// Greedy with drafts gives the reference's tokens on every reference prompt (up to 32, or to an
/// end-of-text token): the tokens plain decoding gives, as tests/parity.rs checks it does.
fn drafts_give_the_reference_on_every_prompt(name: &str, fixture_name: &str) {
    let Some(bytes) = model(name) else {
        return;
    };
    let reference = load_reference(fixture_name);
    let (mut host, _) = open(bytes, usize::MAX, 4096);
    let eos = host.config().eos_ids.clone();
    let plain = options(r#"{"maxTokens": 32}"#);
    let mut verified = 0;
    for case in &reference.cases {
        let end = case.greedy_ids[..32]
            .iter()
            .position(|id| eos.contains(id))
            .map_or(32, |i| i + 1);
        let want = &case.greedy_ids[..end];
        for cfg in [
            DraftConfig::default(),
            DraftConfig {
                adaptive: false,
                max_draft: 5,
                ngram: 1,
                margin: None,
            },
        ] {
            let (got, _, report) = run(&mut host, &case.prompt_ids, &with_draft(&plain, cfg));
            assert_eq!(got, want, "{name} {}", case.name);
            assert_eq!(report.decode.decode_tokens, end as u64);
            // The first token comes from the prompt's pass; each later pass makes the
            // drafts it kept plus one (fewer when a kept draft token ends the text).
            let d = &report.decode;
            assert!(
                d.decode_tokens <= 1 + d.forward_passes + d.accepted,
                "{d:?}"
            );
            verified += d.verify_passes;
        }
    }
    assert!(verified > 0, "{name}: no draft was ever verified");
}

#[test]
fn smollm2_greedy_ids_are_the_reference_with_drafts_on_every_prompt() {
    drafts_give_the_reference_on_every_prompt(SMOL, "smollm2.json");
}

#[test]
fn gemma3_greedy_ids_are_the_reference_with_drafts_on_every_prompt() {
    drafts_give_the_reference_on_every_prompt(GEMMA, "gemma3-270m.json");
}

#[test]
fn seeded_sampling_moa_and_constraints_give_the_same_tokens_with_drafts() {
    let Some(bytes) = model(SMOL) else {
        return;
    };
    let (mut host, _) = open(bytes, usize::MAX, 4096);
    let text =
        "Repeat this list exactly: apples, pears, plums, apples, pears, plums, apples, pears";
    let prompt = host.tokenizer().encode_with_bos(text).unwrap();
    let mut drafted = 0;
    for json in [
        r#"{"maxTokens": 40, "temperature": 0.8, "topK": 40, "topP": 0.95, "minP": 0.05, "seed": 42}"#,
        r#"{"maxTokens": 40, "temperature": 0.3, "seed": 7, "repeatPenalty": 1.1}"#,
        r#"{"maxTokens": 40, "moa": true, "seed": 3}"#,
        r#"{"maxTokens": 40, "coltrane": {"preset": "json"}}"#,
        r#"{"maxTokens": 40, "temperature": 0.7, "seed": 11, "coltrane": {"preset": "balanced", "eddy": true}}"#,
    ] {
        let plain = options(json);
        let (want, why, _) = run(&mut host, &prompt, &plain);
        let (got, why2, report) = run(&mut host, &prompt, &with_draft(&plain, fixed_length()));
        assert_eq!(got, want, "{json}");
        assert_eq!(why, why2);
        drafted += report.decode.drafted;
    }
    assert!(drafted > 0);
}

/// Proposes the continuation a plain run produced (`right` leading tokens of each draft, the
/// rest wrong), so a test decides how much of every draft is kept.
struct Scripted {
    prompt_len: usize,
    continuation: Vec<u32>,
    right: usize,
    vocab: u32,
    max: usize,
    log: Rc<RefCell<Vec<(usize, usize)>>>,
}

impl Drafter for Scripted {
    fn draft(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) {
        out.clear();
        let at = context.len() - self.prompt_len;
        let next = self.continuation.iter().skip(at).take(max.min(self.max));
        for (i, &t) in next.enumerate() {
            out.push(if i < self.right {
                t
            } else {
                (t + 1) % self.vocab
            });
        }
    }
    fn observe(&mut self, drafted: usize, accepted: usize) {
        self.log.borrow_mut().push((drafted, accepted));
    }
}

impl Scripted {
    /// Drafts of at most `max` tokens of the tiny model's `continuation`, `right` of each correct.
    fn tiny(prompt_len: usize, continuation: Vec<u32>, right: usize, max: usize) -> Self {
        Scripted {
            prompt_len,
            continuation,
            right,
            vocab: 256,
            max,
            log: Rc::default(),
        }
    }
}

/// Admits a generation and swaps in a scripted drafter before its first step.
fn start_scripted(
    host: &mut Host,
    prompt: &[u32],
    opts: &GenerateOptions,
    script: Scripted,
    margin: Option<f32>,
) -> SequenceId {
    let id = host.admit(prompt, opts).unwrap().id;
    assert!(host.set_drafter(id, Box::new(script), margin));
    id
}

/// Steps sequence `id` until it ends or made `limit` tokens: its tokens and finish reason (it
/// must not fail).
fn drain(host: &mut Host, id: SequenceId, limit: usize) -> (Vec<u32>, Option<FinishReason>) {
    let out = common::drain(host, id, limit);
    if let Some(e) = out.error {
        panic!("sequence {id} failed: {e}");
    }
    (out.ids, out.finish_reason)
}

/// Ends the sequence (when it still runs) and returns the report of the one that ended last.
fn finish(host: &mut Host, id: SequenceId) -> SequenceReport {
    host.cancel(id);
    host.stats().generation.expect("a sequence ended")
}

/// A `continue` turn's tokens on `host`, after checking that it continues the `conversation`
/// (the tokens parked): its whole prompt is that and `more`, and everything but the
/// conversation's last token (perhaps run already, in a verify pass) came from its window.
fn continue_turn(
    host: &mut Host,
    conversation: &[u32],
    more: &[u32],
    opts: &GenerateOptions,
) -> Vec<u32> {
    let a = host.admit(more, opts).unwrap();
    assert_eq!(a.prompt_tokens, conversation.len() + more.len());
    let p = a.prefix.unwrap();
    assert_eq!(p.status, PrefixStatus::Hit, "{p:?}");
    let n = conversation.len() as u64;
    assert!(p.reused == n - 1 || p.reused == n, "{p:?}");
    drain(host, a.id, usize::MAX).0
}

fn tiny() -> Vec<u8> {
    std::fs::read(fixture("tiny/llama-f32.knot")).unwrap()
}

#[test]
fn every_draft_kept_none_kept_and_part_kept_leave_plain_decodings_state() {
    let prompt = [1u32, 7, 42, 99, 3, 17];
    let plain = options(r#"{"maxTokens": 24, "ignoreEos": true}"#);
    let (mut reference, _) = open(tiny(), usize::MAX, 128);
    let (want, _, _) = run(&mut reference, &prompt, &plain);
    // A second turn after the first: the KV cache must hold exactly the first turn.
    let turn2 = options(r#"{"maxTokens": 8, "continue": true, "ignoreEos": true}"#);
    let (want2, _, _) = run(&mut reference, &[5, 6], &turn2);
    for (right, max) in [(8, 8), (0, 8), (2, 4), (1, 1), (3, 3)] {
        let (mut host, _) = open(tiny(), usize::MAX, 128);
        let log = Rc::new(RefCell::new(Vec::new()));
        let script = Scripted {
            prompt_len: prompt.len(),
            continuation: want.clone(),
            right,
            vocab: 256,
            max,
            log: log.clone(),
        };
        let id = start_scripted(&mut host, &prompt, &plain, script, None);
        let (got, why) = drain(&mut host, id, 100);
        assert_eq!(got, want, "right {right} of {max}");
        assert_eq!(why, Some(FinishReason::Length));
        let report = finish(&mut host, id);
        let log = log.borrow().clone();
        assert!(!log.is_empty());
        for &(drafted, accepted) in &log {
            assert_eq!(accepted, right.min(drafted), "right {right}: {log:?}");
        }
        let d = &report.decode;
        assert_eq!(d.accepted, log.iter().map(|l| l.1 as u64).sum::<u64>());
        // The first token comes from the prompt's pass; every later pass makes one token more
        // than the drafts it kept.
        assert_eq!(d.decode_tokens, 1 + d.forward_passes + d.accepted, "{d:?}");
        if right >= max {
            assert!(d.tokens_per_pass > max as f64 * 0.7, "{d:?}");
        }
        // The conversation parked is the prompt and every token, as plain decoding's.
        let conversation = [&prompt[..], &want].concat();
        let got2 = continue_turn(&mut host, &conversation, &[5, 6], &turn2);
        assert_eq!(got2, want2, "second turn after right {right} of {max}");
    }
}

#[test]
fn the_margin_rule_only_ever_keeps_fewer_drafts() {
    let prompt = [1u32, 7, 42, 99, 3, 17];
    let plain = options(r#"{"maxTokens": 20, "ignoreEos": true}"#);
    let (mut reference, _) = open(tiny(), usize::MAX, 128);
    let (want, _, _) = run(&mut reference, &prompt, &plain);
    let mut passes = Vec::new();
    for tau in [None, Some(0.0), Some(0.05), Some(1e6)] {
        let (mut host, _) = open(tiny(), usize::MAX, 128);
        let script = Scripted::tiny(prompt.len(), want.clone(), 8, 8);
        let id = start_scripted(&mut host, &prompt, &plain, script, tau);
        assert_eq!(drain(&mut host, id, 100).0, want, "tau {tau:?}");
        passes.push(finish(&mut host, id).decode.forward_passes);
    }
    // τ = 0 is no rule at all; an unreachable margin makes every pass give one token.
    assert_eq!(passes[0], passes[1]);
    assert!(passes[2] >= passes[1], "{passes:?}");
    assert_eq!(passes[3], want.len() as u64 - 1, "{passes:?}");
    assert!(passes[0] < passes[3]);
}

#[test]
fn the_context_filling_inside_a_draft_trims_it() {
    let prompt = [1u32, 7, 42, 99, 3, 17];
    let plain = options(r#"{"maxTokens": 100, "ignoreEos": true}"#);
    // Room for 10 positions after the prompt.
    let ctx = prompt.len() + 10;
    let (mut reference, _) = open(tiny(), usize::MAX, ctx);
    let (want, why, _) = run(&mut reference, &prompt, &plain);
    assert_eq!(why, Some(FinishReason::Length));
    let (mut long, _) = open(tiny(), usize::MAX, 128);
    let (longer, _, _) = run(&mut long, &prompt, &plain);
    let (mut host, _) = open(tiny(), usize::MAX, ctx);
    let log = Rc::new(RefCell::new(Vec::new()));
    let script = Scripted {
        prompt_len: prompt.len(),
        continuation: longer,
        right: 32,
        vocab: 256,
        max: 32,
        log: log.clone(),
    };
    let id = start_scripted(&mut host, &prompt, &plain, script, None);
    let (got, why) = drain(&mut host, id, 200);
    assert_eq!((got, why), (want, Some(FinishReason::Length)));
    // The first draft already stops where the context does.
    assert!(
        log.borrow().iter().all(|&(d, _)| d <= 9),
        "{:?}",
        log.borrow()
    );
    let report = finish(&mut host, id);
    assert_eq!(report.decode.decode_tokens, 10);
    assert!(report.prompt_tokens + report.decode.decode_tokens <= ctx as u64);
    // Not a position left: a continuation is refused.
    let more = options(r#"{"maxTokens": 1, "continue": true}"#);
    let err = host.admit(&[5], &more).unwrap_err();
    assert!(matches!(err, HostError::PromptTooLong { .. }), "{err}");
}

#[test]
fn end_of_text_inside_a_draft_ends_the_turn_and_the_next_turn_matches() {
    let Some(bytes) = model(SMOL) else {
        return;
    };
    let (mut reference, _) = open(bytes.clone(), usize::MAX, 4096);
    let ask = |h: &Host, text: &str| {
        let chat = h.chat_prompt(&[ChatMessage::new("user", text)]).unwrap();
        h.tokenizer().encode(&chat).unwrap()
    };
    let prompt = ask(&reference, "Say hello.");
    let plain = options(r#"{"maxTokens": 160}"#);
    let (want, why, _) = run(&mut reference, &prompt, &plain);
    assert_eq!(why, Some(FinishReason::Stop), "the answer ends itself");
    let follow = ask(&reference, "Again, please.");
    let next_turn = options(r#"{"maxTokens": 24, "continue": true}"#);
    let (want2, _, _) = run(&mut reference, &follow, &next_turn);

    let (mut host, _) = open(bytes, usize::MAX, 4096);
    // Drafts run past the end-of-text token (into made-up text): the verifier stops at it.
    let mut continuation = want.clone();
    continuation.extend([504, 2988, 314, 42]);
    let script = Scripted {
        prompt_len: prompt.len(),
        continuation,
        right: 64,
        vocab: 49152,
        max: 8,
        log: Rc::default(),
    };
    let id = start_scripted(&mut host, &prompt, &plain, script, None);
    assert_eq!(
        drain(&mut host, id, 100),
        (want.clone(), Some(FinishReason::Stop))
    );
    let conversation = [&prompt[..], &want].concat();
    assert_eq!(
        continue_turn(&mut host, &conversation, &follow, &next_turn),
        want2
    );
}

#[test]
fn a_failed_read_during_a_verify_pass_ends_the_sequence_and_continue_resumes_it() {
    let prompt = [1u32, 7, 42, 99, 3, 17];
    let plain = options(r#"{"maxTokens": 16, "ignoreEos": true}"#);
    let (mut reference, _) = open(tiny(), 1, 128);
    let (want, _, _) = run(&mut reference, &prompt, &plain);
    // Capacity 1: every pass reads both layers, so a read fails inside a verify pass.
    let (mut host, src) = open(tiny(), 1, 128);
    let knot = host.knot().clone();
    let log = Rc::new(RefCell::new(Vec::new()));
    let script = Scripted {
        log: log.clone(),
        ..Scripted::tiny(prompt.len(), want.clone(), 2, 4)
    };
    let id = start_scripted(&mut host, &prompt, &plain, script, None);
    let mut got = drain(&mut host, id, 1).0;
    let layer1 = knot.layer_range(1).unwrap().start;
    // Twice: the prefetch of layer 1 and the read the pass then makes itself.
    src.fail_times.set(2);
    src.fail_at.set(Some(layer1));
    let failed = common::drain(&mut host, id, 100);
    assert!(failed.ids.is_empty(), "{:?}", failed.ids);
    let err = failed.error.expect("the failure");
    assert!(matches!(err, HostError::Source(_)), "{err}");
    assert!(log.borrow().is_empty(), "the verify pass never finished");
    let report = failed.report.expect("its report");
    assert_eq!(report.decode.decode_tokens, 1);
    assert_eq!(host.active_sequences(), 0);
    // Its conversation was parked as it was before the failed pass: `continue` resumes it (its
    // drafts checked again) with the tokens the generation would have made.
    let resume = options(r#"{"maxTokens": 15, "continue": true, "ignoreEos": true}"#);
    let a = host.admit(&[], &resume).unwrap();
    assert_eq!(a.prompt_tokens, prompt.len() + 1);
    let p = a.prefix.unwrap();
    assert_eq!(
        (p.status, p.reused as usize),
        (PrefixStatus::Hit, prompt.len())
    );
    let script = Scripted::tiny(prompt.len() + 1, want[1..].to_vec(), 2, 4);
    assert!(host.set_drafter(a.id, Box::new(script), None));
    got.extend(drain(&mut host, a.id, 100).0);
    assert_eq!(got, want);
    assert!(finish(&mut host, a.id).decode.verify_passes > 0);
    // And the next generation is a fresh host's.
    assert_eq!(run(&mut host, &prompt, &plain).0, want);
}

#[test]
fn a_caller_stopping_mid_pass_leaves_the_conversation_at_what_it_saw() {
    let prompt = [1u32, 7, 42, 99, 3, 17];
    let plain = options(r#"{"maxTokens": 24, "ignoreEos": true}"#);
    let turn2 = options(r#"{"maxTokens": 8, "continue": true, "ignoreEos": true}"#);
    let (mut reference, _) = open(tiny(), usize::MAX, 128);
    let (want, _, _) = run(&mut reference, &prompt, &plain);
    for stop_after in [1, 2, 5] {
        // Plain: stop (cancel) after `stop_after` tokens, then a second turn.
        let (mut plain_host, _) = open(tiny(), usize::MAX, 128);
        let id = plain_host.admit(&prompt, &plain).unwrap().id;
        let seen = drain(&mut plain_host, id, stop_after).0;
        assert!(plain_host.cancel(id));
        let conversation = [&prompt[..], &seen].concat();
        let want2 = continue_turn(&mut plain_host, &conversation, &[5, 6], &turn2);
        // The same as a fresh host given the whole conversation.
        let whole = [&conversation[..], &[5, 6]].concat();
        let cold = options(r#"{"maxTokens": 8, "ignoreEos": true}"#);
        let (mut fresh, _) = open(tiny(), usize::MAX, 128);
        assert_eq!(run(&mut fresh, &whole, &cold).0, want2);
        // Speculative: every draft kept, so tokens wait in the queue when the caller stops.
        let (mut host, _) = open(tiny(), usize::MAX, 128);
        let script = Scripted::tiny(prompt.len(), want.clone(), 8, 8);
        let id = start_scripted(&mut host, &prompt, &plain, script, None);
        assert_eq!(drain(&mut host, id, stop_after).0, seen);
        assert!(host.cancel(id));
        // The conversation parked is what the caller saw, not the tokens queued.
        assert_eq!(
            continue_turn(&mut host, &conversation, &[5, 6], &turn2),
            want2,
            "stop after {stop_after}"
        );
    }
}

#[test]
fn streaming_verify_passes_read_each_layer_once_for_many_tokens() {
    let Some(bytes) = model(SMOL) else {
        return;
    };
    let (mut host, _) = open(bytes, 2, 4096);
    let layers = host.config().n_layers as f64;
    // `knot bench --draft`'s "repeat" prompt.
    let text = "Repeat the following text exactly, word for word:\n\nThe lighthouse stood on a \
        rocky point at the edge of the bay. Every evening the keeper climbed the spiral stairs, \
        trimmed the wick, and lit the great lamp.";
    let chat = host.chat_prompt(&[ChatMessage::new("user", text)]).unwrap();
    let prompt = host.tokenizer().encode(&chat).unwrap();
    let plain = options(r#"{"maxTokens": 48}"#);
    let (want, _, base) = run(&mut host, &prompt, &plain);
    let (got, _, spec) = run(&mut host, &prompt, &with_draft(&plain, fixed_length()));
    assert_eq!(got, want);
    // Plain streaming reads every layer for every token.
    assert!(base.layer_reads_per_token >= layers * 0.9, "{base:?}");
    assert!(spec.decode.tokens_per_pass > 3.0, "{spec:?}");
    assert!(
        spec.layer_reads_per_token < base.layer_reads_per_token / 3.0,
        "{spec:?} vs {base:?}"
    );
}

/// Softmax of the `k` largest logits at temperature `t` (what the Sample picker draws from,
/// top-p and min-p off), as (id, p).
fn top_k_softmax(logits: &[f32], k: usize, t: f64) -> Vec<(u32, f64)> {
    let mut v: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    let max = v[0].1 as f64;
    let e: Vec<f64> = v.iter().map(|x| ((x.1 as f64 - max) / t).exp()).collect();
    let z: f64 = e.iter().sum();
    v.iter().zip(e).map(|(x, e)| (x.0, e / z)).collect()
}

/// Pearson's chi-square of `counts` (by id) against `p`.
fn chi_square(counts: &HashMap<u32, u64>, p: &[(u32, f64)]) -> f64 {
    let n: u64 = counts.values().sum();
    assert!(
        counts.keys().all(|id| p.iter().any(|e| e.0 == *id)),
        "a token outside top-k"
    );
    p.iter()
        .map(|&(id, p)| {
            let e = n as f64 * p;
            (*counts.get(&id).unwrap_or(&0) as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn speculative_sampling_draws_the_models_next_token_distribution_on_a_tiny_model() {
    // Temperature 1, top-k 6: token 2 comes from row 0 of a verify pass, token 3 (when the
    // first draft token was kept) from row 1. Over many seeds both follow the model's own
    // distribution, and every run gives plain decoding's tokens for its seed.
    let prompt = [1u32, 7, 42, 99, 3, 17];
    let file = knot_suite::KnotFile::read(&fixture("tiny/llama-f32.knot"));
    let model = file.model();
    let next_dist = |ctx: &[u32]| {
        let mut s = engine::Session::new(&model.config, 64).unwrap();
        top_k_softmax(model.forward(&mut s, ctx, false).unwrap(), 6, 1.0)
    };
    let p1 = next_dist(&prompt);
    let g1 = p1[0].0;
    let p2 = next_dist(&[&prompt[..], &[g1]].concat());
    let g2 = p2[0].0;
    let p3 = next_dist(&[&prompt[..], &[g1, g2]].concat());
    let g3 = p3[0].0;

    let (mut host, _) = open(tiny(), usize::MAX, 128);
    let (mut plain_host, _) = open(tiny(), usize::MAX, 128);
    let (mut second, mut third) = (HashMap::new(), HashMap::new());
    let (mut conditioned, mut kept) = (0u64, 0u64);
    for seed in 0..6000u64 {
        let json = format!(
            r#"{{"maxTokens": 3, "temperature": 1, "topK": 6, "seed": {seed}, "ignoreEos": true}}"#
        );
        let opts = options(&json);
        let (want, _, _) = run(&mut plain_host, &prompt, &opts);
        let script = Scripted {
            prompt_len: prompt.len(),
            continuation: vec![g1, g2, g3],
            right: 8,
            vocab: 256,
            max: 2,
            log: Rc::default(),
        };
        let id = start_scripted(&mut host, &prompt, &opts, script, None);
        let got = drain(&mut host, id, 10).0;
        assert_eq!(got, want, "seed {seed}");
        if got[0] != g1 {
            continue; // the draft [g2, g3] only fits after g1
        }
        conditioned += 1;
        *second.entry(got[1]).or_default() += 1;
        if got[1] == g2 {
            kept += 1;
            *third.entry(got[2]).or_default() += 1;
        }
    }
    assert!(conditioned > 1000 && kept > 300, "{conditioned} {kept}");
    // Critical chi-square at p = 0.001 with 5 degrees of freedom: 20.52.
    assert!(chi_square(&second, &p2) < 20.52, "{second:?} vs {p2:?}");
    assert!(chi_square(&third, &p3) < 20.52, "{third:?} vs {p3:?}");
    // The draft token was kept with the model's probability of it.
    let pd = p2[0].1;
    let sd = (pd * (1.0 - pd) / conditioned as f64).sqrt();
    assert!((kept as f64 / conditioned as f64 - pd).abs() < 4.0 * sd);
}
