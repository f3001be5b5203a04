//! Many sequences at once (`maxSequences`, `Host::admit` / `Host::step`): every sequence's tokens
//! equal the same generation run alone — prompts of different lengths, staggered starts, one
//! canceled mid-way, prompts prefilled in chunks beside decoding sequences — greedy, seeded
//! sampling, MOA, COLTRANE and drafts, on the tiny models and on SmolLM2 and Gemma-3-270M. Then
//! fairness (a long prompt costs the running sequences one chunk per step, never a token), the
//! refusals and the memory plan. And prefix reuse per sequence: conversations interleaved on one
//! host (or taking turns) each go on from their own window and equal a cold run; with fewer
//! KV caches than conversations the least recently used is evicted, never one a running
//! sequence holds; a window sharing a prefix with several prompts serves them all at once
//! (copied, the window stays); a canceled sequence is parked; `continue` needs a conversation
//! that ended; explicit prefill windows serve sequences running together.

mod common;

use common::{drain, Instrumented};
use engine::decode::GenerateOptions;
use futures::executor::block_on;
use host::host::{Admitted, PrefixReport};
use host::options::SequenceCount;
use host::{ErrorCode, Host, HostOptions, PrefixKind, PrefixStatus, SequenceEvent};
use knot_suite::{fixture, require_model};

/// One conversation of a scenario: its prompt, options, the step it is admitted at, and the
/// number of tokens after which it is canceled (None: it runs to its end).
struct Job {
    prompt: Vec<u32>,
    opts: GenerateOptions,
    admit_at: usize,
    cancel_after: Option<usize>,
}

fn open(bytes: &[u8], opts: HostOptions) -> Host {
    block_on(Host::open(Instrumented::new(bytes.to_vec()), opts)).unwrap()
}

fn options(json: &str) -> GenerateOptions {
    GenerateOptions::from_json(json).unwrap()
}

/// Each job alone: a host of its own, `generate`, cut where the job is canceled.
fn alone(bytes: &[u8], jobs: &[Job], max_batch: Option<usize>) -> Vec<Vec<u32>> {
    jobs.iter()
        .map(|j| {
            let opts = HostOptions {
                max_batch,
                ..HostOptions::default()
            };
            let mut host = open(bytes, opts);
            let out = block_on(host.generate(&j.prompt, &j.opts, &mut |_| true)).unwrap();
            let mut ids = out.ids;
            if let Some(n) = j.cancel_after {
                ids.truncate(n);
            }
            ids
        })
        .collect()
}

/// What [`together`] saw: each job's tokens and admission, and every step's events.
struct Together {
    tokens: Vec<Vec<u32>>,
    admitted: Vec<Admitted>,
    log: Vec<Vec<SequenceEvent>>,
}

/// The jobs together on one host: admitted at their steps, stepped until every one ended.
fn together(host: &mut Host, jobs: &[Job]) -> Together {
    let mut ids = vec![None; jobs.len()];
    let mut admitted = vec![None; jobs.len()];
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
    let mut done = vec![false; jobs.len()];
    let mut log = Vec::new();
    for step in 0.. {
        for (i, j) in jobs.iter().enumerate() {
            if j.admit_at == step {
                let a = host.admit(&j.prompt, &j.opts).unwrap();
                ids[i] = Some(a.id);
                admitted[i] = Some(a);
            }
        }
        if done.iter().all(|&d| d) {
            break;
        }
        let events = block_on(host.step());
        for e in &events {
            let i = ids.iter().position(|&id| id == Some(e.id)).unwrap();
            let emitted = e.token.as_ref().unwrap();
            tokens[i].extend(emitted.as_ref().map(|t| t.id));
            done[i] |= e.done;
            if e.done {
                // Its report says how its prompt was served, as admit did.
                let report = e.report.as_ref().expect("a done event's report");
                let a = admitted[i].as_ref().unwrap();
                assert_eq!(report.prefix, a.prefix);
                assert_eq!(report.prompt_tokens as usize, a.prompt_tokens);
            }
            if jobs[i].cancel_after == Some(tokens[i].len()) && !e.done {
                assert!(host.cancel(e.id));
                assert!(!host.cancel(e.id), "a canceled sequence is gone");
                done[i] = true;
            }
        }
        log.push(events);
        assert!(step < 10_000, "the sequences never ended");
    }
    assert_eq!(host.active_sequences(), 0);
    Together {
        tokens,
        admitted: admitted.into_iter().map(Option::unwrap).collect(),
        log,
    }
}

/// Four conversations of different prompt lengths, admitted at steps 0, 0, 3 and 7, the second
/// canceled after 5 tokens, with `opts[i]` each.
fn scenario(prompts: [Vec<u32>; 4], opts: [GenerateOptions; 4]) -> Vec<Job> {
    let admit = [0, 0, 3, 7];
    let cancel = [None, Some(5), None, None];
    prompts
        .into_iter()
        .zip(opts)
        .enumerate()
        .map(|(i, (prompt, opts))| Job {
            prompt,
            opts,
            admit_at: admit[i],
            cancel_after: cancel[i],
        })
        .collect()
}

/// `jobs` together equal each alone; `twice`: and a second round on the same host too (its
/// sessions reused).
fn check(bytes: &[u8], jobs: &[Job], max_batch: Option<usize>, twice: bool, what: &str) {
    let want = alone(bytes, jobs, max_batch);
    let mut host = open(
        bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(4),
            max_batch,
            ..HostOptions::default()
        },
    );
    let got = together(&mut host, jobs).tokens;
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert!(!w.is_empty(), "{what}: job {i} made no token");
        assert_eq!(g, w, "{what}: job {i}'s tokens differ from its run alone");
    }
    if twice {
        let again = together(&mut host, jobs).tokens;
        assert_eq!(again, got, "{what}: a second round differs");
    }
}

fn synthetic(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + salt) % 200 + 3).collect()
}

#[test]
fn tiny_models_together_equal_alone() {
    for model in [
        "tiny/llama-f32.knot",
        "tiny/llama-f16.knot",
        "tiny/gemma3-f32.knot",
        "tiny/qwen3-f32.knot",
    ] {
        let bytes = std::fs::read(fixture(model)).unwrap();
        let prompts = || [3, 17, 1, 40].map(|n| synthetic(n, n as u32));
        let greedy = r#"{"maxTokens": 12, "ignoreEos": true}"#;
        let seeded = r#"{"maxTokens": 12, "ignoreEos": true, "temperature": 0.9, "seed": 7}"#;
        let moa = r#"{"maxTokens": 12, "ignoreEos": true, "moa": true, "seed": 3}"#;
        let draft = r#"{"maxTokens": 12, "ignoreEos": true, "draftMode": true}"#;
        // The same options for all four, and a mix; whole prompts and 5-position chunks.
        for (what, opts) in [
            ("greedy", [greedy; 4]),
            ("seeded", [seeded; 4]),
            ("moa", [moa; 4]),
            ("mixed", [greedy, seeded, moa, draft]),
        ] {
            for max_batch in [None, Some(5)] {
                let jobs = scenario(prompts(), opts.map(options));
                check(
                    &bytes,
                    &jobs,
                    max_batch,
                    true,
                    &format!("{model} {what} {max_batch:?}"),
                );
            }
        }
    }
}

#[test]
fn real_models_together_equal_alone() {
    for name in ["SmolLM2-135M-Instruct.Q4_1.knot", "gemma-3-270m.knot"] {
        let Some(path) = require_model(name) else {
            continue;
        };
        let bytes = std::fs::read(path).unwrap();
        let host = open(&bytes, HostOptions::default());
        let tok = host.tokenizer().clone();
        let prompts = [
            "The capital of France is",
            "Write a haiku about the sea.",
            "List three colours:",
            "Once upon a time, in a small village at the edge of a great forest, there lived a \
             woodcutter and his two children. One morning",
        ]
        .map(|p| tok.encode_with_bos(p).unwrap());
        let greedy = r#"{"maxTokens": 10}"#;
        let seeded = r#"{"maxTokens": 10, "temperature": 0.8, "topP": 0.95, "seed": 11}"#;
        let moa = r#"{"maxTokens": 10, "moa": true, "seed": 5}"#;
        let json = r#"{"maxTokens": 16, "coltrane": {"preset": "json"}}"#;
        for (what, opts) in [
            ("greedy", [greedy; 4]),
            ("mixed", [seeded, moa, json, greedy]),
        ] {
            let jobs = scenario(prompts.clone(), opts.map(options));
            check(&bytes, &jobs, Some(16), false, &format!("{name} {what}"));
        }
    }
}

#[test]
fn a_long_prompt_costs_the_running_sequences_one_chunk_per_step() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let opts = r#"{"maxTokens": 30, "ignoreEos": true}"#;
    let jobs = vec![
        Job {
            prompt: synthetic(4, 1),
            opts: options(opts),
            admit_at: 0,
            cancel_after: None,
        },
        Job {
            prompt: synthetic(4, 2),
            opts: options(opts),
            admit_at: 0,
            cancel_after: None,
        },
        // 60 positions in chunks of 8: eight steps of prefill beside the two running.
        Job {
            prompt: synthetic(60, 3),
            opts: options(r#"{"maxTokens": 4, "ignoreEos": true}"#),
            admit_at: 5,
            cancel_after: None,
        },
    ];
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(3),
            max_batch: Some(8),
            ..HostOptions::default()
        },
    );
    let Together { tokens, log, .. } = together(&mut host, &jobs);
    assert_eq!(tokens.iter().map(Vec::len).collect::<Vec<_>>(), [30, 30, 4]);
    // From its second step on (the first prefills both prompts one after the other: the second
    // waits a step), every step hands each running sequence a token, the long prompt's eight
    // chunks included.
    let (a, b) = (1, 2);
    for (step, events) in log.iter().enumerate().skip(2).take(25) {
        for id in [a, b] {
            let got = events
                .iter()
                .any(|e| e.id == id && matches!(e.token, Ok(Some(_))));
            assert!(got, "step {step}: sequence {id} got no token");
        }
    }
}

#[test]
fn refusals_and_the_memory_plan() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let opts = options(r#"{"maxTokens": 4}"#);
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            max_context: 32,
            ..HostOptions::default()
        },
    );
    assert_eq!(host.max_sequences(), 2);
    assert!(!host.cancel(1), "nothing runs yet");
    let refused = [
        (vec![], opts.clone(), ErrorCode::EmptyPrompt),
        (vec![1; 33], opts.clone(), ErrorCode::ContextLengthExceeded),
        (vec![1, 1_000_000], opts.clone(), ErrorCode::TokenOutOfRange),
        // No conversation ended yet: nothing to continue.
        (
            vec![1],
            options(r#"{"continue": true}"#),
            ErrorCode::NoContext,
        ),
    ];
    for (prompt, o, code) in refused {
        let err = host.admit(&prompt, &o).unwrap_err();
        assert_eq!(err.code(), code, "{prompt:?}: {err}");
    }
    let a = host.admit(&[1, 2], &opts).unwrap().id;
    host.admit(&[3], &opts).unwrap();
    let err = host.admit(&[4], &opts).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Busy, "{err}");
    // `generate` needs the host to itself.
    let err = block_on(host.generate(&[4], &opts, &mut |_| true)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Busy, "{err}");
    assert!(host.cancel(a));
    assert!(!host.cancel(a), "a canceled sequence is gone");
    host.admit(&[4], &opts).unwrap();
    // The sequence admitted in the canceled one's slot runs.
    let events = block_on(host.step());
    assert!(events.iter().any(|e| matches!(e.token, Ok(Some(_)))));
    let s = host.stats().sequences;
    assert_eq!((s.max, s.active, s.admitted, s.ended), (2, 2, 3, 1));

    // The plan counts a KV cache per sequence and per extra prefix window, the explicit prefill
    // window whatever the number of sequences, and only the joint's logits rows.
    let knot = knot::Knot::from_bytes(&bytes).unwrap();
    let plan = |sequences: usize, extra: usize| {
        let opts = HostOptions {
            max_sequences: SequenceCount::Fixed(sequences),
            prefix_windows: extra,
            memory_budget: Some(1 << 30),
            max_context: 64,
            ..HostOptions::default()
        };
        let host = open(&bytes, opts);
        let s = host.stats();
        let plan = s.memory_plan.unwrap();
        // The caches are taken at open: what the plan counted.
        assert_eq!(s.kv_cache_bytes, plan.kv_cache, "{sequences} {extra}");
        assert_eq!(s.prefix_reuse.windows, sequences + extra);
        plan
    };
    let per =
        engine::Session::memory(&knot.meta.config, 64, engine::kv::KvType::F32, 1, 1).kv_cache;
    let (solo, four) = (plan(1, 0), plan(4, 0));
    assert_eq!((solo.kv_cache, four.kv_cache), (per, 4 * per));
    assert_eq!(plan(4, 2).kv_cache, 6 * per);
    assert_eq!(plan(1, 3).kv_cache, 4 * per);
    // One prefill window of min(512, 64) positions.
    assert_eq!((solo.prefill_windows, four.prefill_windows), (per, per));
    assert!(four.activations > solo.activations && four.logits > solo.logits);
}

fn greedy_json(max_tokens: usize, extra: &str) -> GenerateOptions {
    options(&format!(
        r#"{{"maxTokens": {max_tokens}, "ignoreEos": true{extra}}}"#
    ))
}

fn reuse(max_tokens: usize) -> GenerateOptions {
    greedy_json(max_tokens, r#", "reusePrefix": true"#)
}

/// `prompt` on a fresh host of its own, cold (no prefix reuse): the tokens every warm run must
/// give, bit for bit.
fn cold(bytes: &[u8], prompt: &[u32], opts: &GenerateOptions) -> Vec<u32> {
    let opts = GenerateOptions {
        reuse_prefix: false,
        continue_session: false,
        prefill_window: None,
        ..opts.clone()
    };
    let mut host = open(bytes, HostOptions::default());
    block_on(host.generate(prompt, &opts, &mut |_| true))
        .unwrap()
        .ids
}

/// A conversation's next prompt: the last one, the tokens it made, and new ones.
fn next_turn(prompt: &[u32], made: &[u32], more: &[u32]) -> Vec<u32> {
    [prompt, made, more].concat()
}

/// Runs `prompt` alone through `generate`: its tokens and how its prompt used the windows.
fn turn(host: &mut Host, prompt: &[u32], opts: &GenerateOptions) -> (Vec<u32>, PrefixReport) {
    let out = block_on(host.generate(prompt, opts, &mut |_| true)).unwrap();
    (out.ids, out.report.prefix.expect("a prefix report"))
}

/// Four conversations of three turns each on `host`, each turn's prompt the one before, its
/// tokens and a few new ones, with `reusePrefix`. `interleaved`: each turn's four sequences run
/// together (admitted at staggered steps, in an order that changes every turn); else one after
/// another through `generate`. Every turn after the first is served from its own conversation's
/// window (a hit that reuses all of it but the last token, never run), and every turn's tokens
/// equal the same prompt run cold.
fn four_conversations(bytes: &[u8], host: &mut Host, interleaved: bool, what: &str) {
    let opts = [
        reuse(6),
        greedy_json(9, r#", "reusePrefix": true, "temperature": 0.9, "seed": 7"#),
        reuse(4),
        greedy_json(7, r#", "reusePrefix": true, "moa": true, "seed": 3"#),
    ];
    // Different first tokens: no conversation shares a prefix with another.
    let mut prompts: Vec<Vec<u32>> = [5, 12, 3, 20]
        .iter()
        .enumerate()
        .map(|(i, &n)| synthetic(n, i as u32 + 1))
        .collect();
    let mut before: Vec<Option<(usize, usize)>> = vec![None; 4];
    for t in 0..3 {
        let made: Vec<(Vec<u32>, PrefixReport)> = match interleaved {
            true => {
                let admit = [0, 1, 1, 4];
                let jobs: Vec<Job> = (0..4)
                    .map(|i| Job {
                        prompt: prompts[i].clone(),
                        opts: opts[i].clone(),
                        admit_at: admit[(i + t) % 4],
                        cancel_after: None,
                    })
                    .collect();
                let together = together(host, &jobs);
                let prefixes = together.admitted.into_iter().map(|a| a.prefix.unwrap());
                together.tokens.into_iter().zip(prefixes).collect()
            }
            false => (0..4).map(|i| turn(host, &prompts[i], &opts[i])).collect(),
        };
        for (i, (ids, p)) in made.iter().enumerate() {
            assert_eq!(p.kind, PrefixKind::Implicit);
            match before[i] {
                None => assert_eq!((p.status, p.reused), (PrefixStatus::Miss, 0), "{what}"),
                Some((prompt, made)) => {
                    assert_eq!(p.status, PrefixStatus::Hit, "{what}: turn {t} of {i}");
                    assert!(p.reused as usize >= prompt, "{what}: {p:?}");
                    assert_eq!(p.reused as usize, prompt + made - 1, "{what}: {p:?}");
                }
            }
            let prefilled = prompts[i].len() - p.reused as usize;
            assert_eq!(p.prefilled as usize, prefilled, "{what}");
            let want = cold(bytes, &prompts[i], &opts[i]);
            assert_eq!(ids, &want, "{what}: turn {t} of conversation {i}");
        }
        for (i, (ids, _)) in made.iter().enumerate() {
            before[i] = Some((prompts[i].len(), ids.len()));
            let more = synthetic(2 + i, 50 + 4 * t as u32 + i as u32);
            prompts[i] = next_turn(&prompts[i], ids, &more);
        }
    }
    let s = host.stats();
    let r = &s.prefix_reuse;
    assert_eq!((r.hits, r.misses, r.mismatches), (8, 4, 0), "{what}: {r:?}");
    assert_eq!((r.windows, r.windows_held), (4, 4), "{what}");
    assert_eq!(s.sequences.ended, 12);
}

#[test]
fn conversations_interleaved_on_one_host_each_go_on_from_their_own_window() {
    for model in ["tiny/llama-f32.knot", "tiny/gemma3-f32.knot"] {
        let bytes = std::fs::read(fixture(model)).unwrap();
        let four = HostOptions {
            max_sequences: SequenceCount::Fixed(4),
            ..HostOptions::default()
        };
        let mut host = open(&bytes, four);
        four_conversations(&bytes, &mut host, true, &format!("{model} together"));
        let steps = host.stats().steps;
        assert!(steps.tokens_per_step > 1.0, "steps shared: {steps:?}");
        // One sequence at a time and three windows more: the conversations take turns.
        let one = HostOptions {
            max_sequences: SequenceCount::Fixed(1),
            prefix_windows: 3,
            ..HostOptions::default()
        };
        let mut host = open(&bytes, one);
        four_conversations(&bytes, &mut host, false, &format!("{model} in turn"));
    }
}

#[test]
fn with_fewer_caches_than_conversations_the_least_recently_used_is_evicted() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let check = |host: &mut Host, prompt: &[u32], n: usize, status, reused: usize| {
        let (got, p) = turn(host, prompt, &reuse(n));
        assert_eq!((p.status, p.reused as usize), (status, reused), "{p:?}");
        assert_eq!(got, cold(&bytes, prompt, &reuse(n)));
        got
    };
    // Two caches, three conversations one after another: C takes A's, the least recently used.
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            ..HostOptions::default()
        },
    );
    let (a1, b1, c1) = (synthetic(8, 1), synthetic(9, 2), synthetic(7, 3));
    let out_a1 = check(&mut host, &a1, 5, PrefixStatus::Miss, 0);
    let out_b1 = check(&mut host, &b1, 5, PrefixStatus::Miss, 0);
    let out_c1 = check(&mut host, &c1, 5, PrefixStatus::Miss, 0);
    let more = synthetic(3, 40);
    let b2 = next_turn(&b1, &out_b1, &more);
    check(&mut host, &b2, 4, PrefixStatus::Hit, b1.len() + 4);
    let c2 = next_turn(&c1, &out_c1, &more);
    check(&mut host, &c2, 4, PrefixStatus::Hit, c1.len() + 4);
    let a2 = next_turn(&a1, &out_a1, &more);
    check(&mut host, &a2, 4, PrefixStatus::Miss, 0);

    // Three caches, one lent to a sequence that runs while three others come and go beside it:
    // when the third needs a cache, the running one's is the least recently used, and it takes
    // the next (E's) instead.
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            prefix_windows: 1,
            ..HostOptions::default()
        },
    );
    let out_b1 = check(&mut host, &b1, 5, PrefixStatus::Miss, 0);
    let b2 = next_turn(&b1, &out_b1, &more);
    let x = host.admit(&b2, &reuse(24)).unwrap();
    let p = x.prefix.unwrap();
    assert_eq!(
        (p.status, p.reused as usize),
        (PrefixStatus::Hit, b1.len() + 4)
    );
    let mut out_b2 = Vec::new();
    let mut beside = Vec::new();
    for salt in [5, 6, 7] {
        let prompt = synthetic(6, salt);
        let y = host.admit(&prompt, &reuse(2)).unwrap();
        assert_eq!(y.prefix.unwrap().status, PrefixStatus::Miss);
        let mut ids = Vec::new();
        loop {
            let events = block_on(host.step());
            for e in &events {
                let t = e.token.as_ref().unwrap().as_ref().map(|t| t.id);
                match e.id == x.id {
                    true => out_b2.extend(t),
                    false => ids.extend(t),
                }
                assert!(!(e.done && e.id == x.id), "x outlasts the others");
            }
            if events.iter().any(|e| e.done && e.id == y.id) {
                break;
            }
        }
        assert_eq!(ids, cold(&bytes, &prompt, &reuse(2)));
        beside.push((prompt, ids));
    }
    out_b2.extend(drain(&mut host, x.id, 100).ids);
    assert_eq!(out_b2, cold(&bytes, &b2, &reuse(24)));
    // B went on in its own cache; E (the first beside it) was evicted, F and G kept.
    let [(e1, out_e1), (f1, out_f1), (g1, out_g1)] = beside.try_into().unwrap();
    check(
        &mut host,
        &next_turn(&f1, &out_f1, &more),
        3,
        PrefixStatus::Hit,
        f1.len() + 1,
    );
    check(
        &mut host,
        &next_turn(&b2, &out_b2, &more),
        3,
        PrefixStatus::Hit,
        b2.len() + 23,
    );
    check(
        &mut host,
        &next_turn(&g1, &out_g1, &more),
        3,
        PrefixStatus::Hit,
        g1.len() + 1,
    );
    check(
        &mut host,
        &next_turn(&e1, &out_e1, &more),
        3,
        PrefixStatus::Miss,
        0,
    );
}

#[test]
fn a_window_sharing_a_prefix_with_several_prompts_serves_them_all_at_once() {
    let bytes = std::fs::read(fixture("tiny/gemma3-f32.knot")).unwrap();
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(3),
            ..HostOptions::default()
        },
    );
    // A system prompt and a question: the window holds them and the answer.
    let system = synthetic(10, 1);
    let w1 = next_turn(&system, &[], &synthetic(4, 20));
    let (out, _) = turn(&mut host, &w1, &reuse(4));
    // Two other questions after the same system prompt, and the first conversation going on,
    // admitted before any of them runs: the first two get the system prompt copied from the
    // window (it went another way after it: a mismatch), which stays for the third.
    let x = next_turn(&system, &[], &synthetic(3, 70));
    let y = next_turn(&system, &[], &synthetic(5, 90));
    let w2 = next_turn(&w1, &out, &[7, 7]);
    let jobs = [(x, 6), (y, 9), (w2, 5)].map(|(prompt, n)| Job {
        prompt,
        opts: reuse(n),
        admit_at: 0,
        cancel_after: None,
    });
    let t = together(&mut host, &jobs);
    let got: Vec<(PrefixStatus, u64, usize)> = t
        .admitted
        .iter()
        .map(|a| a.prefix.as_ref().unwrap())
        .map(|p| (p.status, p.reused, p.window))
        .collect();
    let (shared, whole) = (system.len() as u64, (w1.len() + out.len() - 1) as u64);
    assert_eq!(
        got,
        [
            (PrefixStatus::Mismatch, shared, 1),
            (PrefixStatus::Mismatch, shared, 1),
            (PrefixStatus::Hit, whole, 1),
        ]
    );
    for (job, tokens) in jobs.iter().zip(&t.tokens) {
        assert_eq!(tokens, &cold(&bytes, &job.prompt, &job.opts));
    }
    // Each conversation was parked in the cache it ran in, and goes on from it.
    assert_eq!(host.stats().prefix_reuse.windows_held, 3);
    for (job, tokens) in jobs.iter().zip(&t.tokens) {
        let next = next_turn(&job.prompt, tokens, &[8]);
        let (ids, p) = turn(&mut host, &next, &reuse(3));
        let reused = job.prompt.len() + tokens.len() - 1;
        assert_eq!((p.status, p.reused as usize), (PrefixStatus::Hit, reused));
        assert_eq!(ids, cold(&bytes, &next, &reuse(3)));
    }
}

#[test]
fn a_canceled_sequence_is_parked_for_the_next() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            ..HostOptions::default()
        },
    );
    let p = synthetic(9, 1);
    let id = host.admit(&p, &greedy_json(20, "")).unwrap().id;
    let seen = drain(&mut host, id, 5).ids;
    assert_eq!(seen.len(), 5);
    assert!(host.cancel(id));
    let s = host.stats();
    let report = s.generation.unwrap();
    assert_eq!(report.decode.decode_tokens, 5);
    assert_eq!(s.sequences.ended, 1);
    // `continue` appends to it: everything but the last token seen comes from its window.
    let more = [5, 6];
    let cont = greedy_json(6, r#", "continue": true"#);
    let c = host.admit(&more, &cont).unwrap();
    assert_eq!(c.prompt_tokens, p.len() + 5 + 2);
    let prefix = c.prefix.unwrap();
    assert_eq!(
        (prefix.status, prefix.reused as usize),
        (PrefixStatus::Hit, p.len() + 4)
    );
    let got = drain(&mut host, c.id, 100).ids;
    let whole = [&p[..], &seen, &more].concat();
    assert_eq!(got, cold(&bytes, &whole, &cont));
    // `reusePrefix` too, after a cancel in the middle of the prompt: what was prefilled is kept.
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            max_batch: Some(4),
            ..HostOptions::default()
        },
    );
    let q = synthetic(30, 2);
    let id = host.admit(&q, &reuse(5)).unwrap().id;
    for _ in 0..2 {
        assert!(block_on(host.step()).is_empty(), "a prefill chunk");
    }
    assert!(host.cancel(id));
    let out = block_on(host.generate(&q, &reuse(5), &mut |_| true)).unwrap();
    let prefix = out.report.prefix.unwrap();
    assert_eq!((prefix.status, prefix.reused), (PrefixStatus::Hit, 8));
    assert_eq!(out.report.prefill_tokens, 22);
    assert_eq!(out.ids, cold(&bytes, &q, &reuse(5)));
}

#[test]
fn a_continue_canceled_before_it_ran_keeps_the_conversation_it_continued() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let mut host = open(&bytes, HostOptions::default());
    let p = synthetic(9, 1);
    let out = block_on(host.generate(&p, &greedy_json(4, ""), &mut |_| true))
        .unwrap()
        .ids;
    let cont = greedy_json(4, r#", "continue": true"#);
    let c = host.admit(&[5, 6], &cont).unwrap();
    assert_eq!(c.prompt_tokens, p.len() + out.len() + 2);
    assert!(host.cancel(c.id));
    // The next `continue` still appends to the whole conversation.
    let c = host.admit(&[7], &cont).unwrap();
    assert_eq!(c.prompt_tokens, p.len() + out.len() + 1);
    let got = drain(&mut host, c.id, 100).ids;
    assert_eq!(got, cold(&bytes, &[&p[..], &out, &[7]].concat(), &cont));
}

#[test]
fn continue_needs_a_conversation_that_ended() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            ..HostOptions::default()
        },
    );
    let cont = greedy_json(3, r#", "continue": true"#);
    let no_context = |host: &mut Host| {
        let err = host.admit(&[5], &cont).unwrap_err();
        assert_eq!(err.code(), ErrorCode::NoContext, "{err}");
    };
    no_context(&mut host);
    let err = block_on(host.generate(&[5], &cont, &mut |_| true)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoContext, "{err}");
    // A sequence running is no conversation that ended.
    let id = host.admit(&[1, 2, 3], &greedy_json(3, "")).unwrap().id;
    no_context(&mut host);
    let ids = drain(&mut host, id, 100).ids;
    // Once it ended, `continue` appends to it (an empty prompt goes on from its last token).
    let c = host.admit(&[], &cont).unwrap();
    assert_eq!(c.prompt_tokens, 6);
    let got = drain(&mut host, c.id, 100).ids;
    assert_eq!(got, cold(&bytes, &[&[1, 2, 3][..], &ids].concat(), &cont));
    // reset forgets every conversation.
    host.reset();
    no_context(&mut host);
    assert_eq!(host.stats().prefix_reuse.windows_held, 0);
}

#[test]
fn prefill_windows_serve_sequences_running_together() {
    for model in ["tiny/llama-f32.knot", "tiny/qwen3-f32.knot"] {
        let bytes = std::fs::read(fixture(model)).unwrap();
        let mut host = open(
            &bytes,
            HostOptions {
                max_sequences: SequenceCount::Fixed(3),
                prefill_windows: 2,
                max_batch: Some(6),
                ..HostOptions::default()
            },
        );
        let p = synthetic(30, 1);
        let w = block_on(host.create_prefill_window(&p[..17], None))
            .unwrap()
            .window
            .id;
        let named = |id: &str, n: usize| greedy_json(n, &format!(r#", "prefillWindow": "{id}""#));
        let p2 = next_turn(&p[..17], &[], &synthetic(6, 9));
        let q = synthetic(12, 3);
        let q2 = synthetic(25, 4);
        // Two sequences from the window and one cold, together.
        let a = host.admit(&p, &named(&w, 8)).unwrap();
        let b = host.admit(&p2, &named(&w, 12)).unwrap();
        let c = host.admit(&q, &greedy_json(10, "")).unwrap();
        for x in [&a, &b] {
            let r = x.prefix.as_ref().unwrap();
            assert_eq!(
                (r.kind, r.status, r.reused),
                (PrefixKind::Explicit, PrefixStatus::Hit, 17)
            );
        }
        let mut tokens = vec![Vec::new(); 4];
        let mut ids = [a.id, b.id, c.id, 0];
        let mut v = None;
        for step in 0.. {
            if host.active_sequences() == 0 {
                break;
            }
            if step == 2 {
                // A window made between steps, while the three run.
                let made = block_on(host.create_prefill_window(&q2[..10], None)).unwrap();
                v = Some(made.window.id);
            }
            for e in block_on(host.step()) {
                let i = ids.iter().position(|&id| id == e.id).unwrap();
                tokens[i].extend(e.token.unwrap().map(|t| t.id));
                if e.done && i == 0 {
                    // In the slot `a` leaves: a sequence from the new window.
                    let id = v.as_ref().expect("made before a ended");
                    let d = host.admit(&q2, &named(id, 7)).unwrap();
                    let r = d.prefix.unwrap();
                    assert_eq!((r.status, r.reused), (PrefixStatus::Hit, 10));
                    ids[3] = d.id;
                }
            }
            assert!(step < 1000);
        }
        let want = [
            cold(&bytes, &p, &named(&w, 8)),
            cold(&bytes, &p2, &named(&w, 12)),
            cold(&bytes, &q, &greedy_json(10, "")),
            cold(&bytes, &q2, &greedy_json(7, "")),
        ];
        assert_eq!(tokens, want, "{model}");
        assert_eq!(host.stats().prefill_windows.count, 2);
    }
}

#[test]
fn continue_appends_to_the_conversation_that_ended_last() {
    let bytes = std::fs::read(fixture("tiny/llama-f32.knot")).unwrap();
    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: SequenceCount::Fixed(2),
            prefix_windows: 1,
            ..HostOptions::default()
        },
    );
    let system = synthetic(8, 1);
    let a = next_turn(&system, &[], &synthetic(3, 20));
    let b = synthetic(6, 2);
    let (out_a, _) = turn(&mut host, &a, &reuse(3));
    let (out_b, _) = turn(&mut host, &b, &reuse(3));
    // A new conversation after A's system prompt: A's prefix copied, while B ended last.
    let c = next_turn(&system, &[], &synthetic(4, 30));
    let running = host.admit(&c, &reuse(20)).unwrap();
    let p = running.prefix.unwrap();
    assert_eq!((p.status, p.reused), (PrefixStatus::Mismatch, 8));
    let cont = greedy_json(3, r#", "continue": true"#);
    let next = host.admit(&[9], &cont).unwrap();
    assert_eq!(next.prompt_tokens, b.len() + out_b.len() + 1, "continues B");
    assert_ne!(next.prompt_tokens, a.len() + out_a.len() + 1);
}
