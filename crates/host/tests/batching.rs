//! Many sequences at once (`maxSequences`, `Host::admit` / `Host::step`): every sequence's tokens
//! equal the same generation run alone — prompts of different lengths, staggered starts, one
//! canceled mid-way, prompts prefilled in chunks beside decoding sequences — greedy, seeded
//! sampling, MOA, COLTRANE and drafts, on the tiny models and on SmolLM2 and Gemma-3-270M. Then
//! fairness (a long prompt costs the running sequences one chunk per step, never a token), the
//! memory plan, and every refusal.

mod common;

use common::Instrumented;
use engine::decode::GenerateOptions;
use futures::executor::block_on;
use host::{ErrorCode, Host, HostOptions, SequenceEvent};
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

/// The jobs together on one host: admitted at their steps, stepped until every one ended.
/// Returns each job's tokens and every step's events.
fn together(host: &mut Host, jobs: &[Job]) -> (Vec<Vec<u32>>, Vec<Vec<SequenceEvent>>) {
    let mut ids = vec![None; jobs.len()];
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); jobs.len()];
    let mut done = vec![false; jobs.len()];
    let mut log = Vec::new();
    for step in 0.. {
        for (i, j) in jobs.iter().enumerate() {
            if j.admit_at == step {
                ids[i] = Some(host.admit(&j.prompt, &j.opts).unwrap());
            }
        }
        if done.iter().all(|&d| d) {
            break;
        }
        let events = block_on(host.step()).unwrap();
        for e in &events {
            let i = ids.iter().position(|&id| id == Some(e.id)).unwrap();
            let emitted = e.token.as_ref().unwrap();
            tokens[i].extend(emitted.as_ref().map(|t| t.id));
            done[i] |= e.done;
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
    (tokens, log)
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
            max_sequences: Some(4),
            max_batch,
            ..HostOptions::default()
        },
    );
    let (got, _) = together(&mut host, jobs);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert!(!w.is_empty(), "{what}: job {i} made no token");
        assert_eq!(g, w, "{what}: job {i}'s tokens differ from its run alone");
    }
    if twice {
        let (again, _) = together(&mut host, jobs);
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
            max_sequences: Some(3),
            max_batch: Some(8),
            ..HostOptions::default()
        },
    );
    let (tokens, log) = together(&mut host, &jobs);
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
    // Without maxSequences the host runs one conversation at a time.
    let mut one = open(&bytes, HostOptions::default());
    let err = one.admit(&[1, 2], &opts).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Disabled, "{err}");
    assert_eq!(
        block_on(one.step()).unwrap_err().code(),
        ErrorCode::Disabled
    );
    assert!(!one.cancel(1));

    let mut host = open(
        &bytes,
        HostOptions {
            max_sequences: Some(2),
            max_context: 32,
            ..HostOptions::default()
        },
    );
    assert_eq!(host.max_sequences(), Some(2));
    // A host running sequences runs no conversation of its own.
    let err = block_on(host.start(&[1, 2], &opts)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Disabled, "{err}");
    let refused = [
        (vec![], opts.clone(), ErrorCode::EmptyPrompt),
        (vec![1; 33], opts.clone(), ErrorCode::ContextLengthExceeded),
        (vec![1, 1_000_000], opts.clone(), ErrorCode::TokenOutOfRange),
        (
            vec![1],
            options(r#"{"continue": true}"#),
            ErrorCode::InvalidOption,
        ),
    ];
    for (prompt, o, code) in refused {
        let err = host.admit(&prompt, &o).unwrap_err();
        assert_eq!(err.code(), code, "{prompt:?}: {err}");
    }
    let a = host.admit(&[1, 2], &opts).unwrap();
    host.admit(&[3], &opts).unwrap();
    let err = host.admit(&[4], &opts).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Busy, "{err}");
    assert!(host.cancel(a));
    host.admit(&[4], &opts).unwrap();
    // The sequence admitted in the canceled one's slot runs.
    let events = block_on(host.step()).unwrap();
    assert!(events.iter().any(|e| matches!(e.token, Ok(Some(_)))));

    // The plan counts each sequence's KV cache (and no conversation of the host's own), and
    // only the joint's logits rows.
    let knot = knot::Knot::from_bytes(&bytes).unwrap();
    let plan = |sequences| {
        let opts = HostOptions {
            max_sequences: sequences,
            memory_budget: Some(1 << 30),
            max_context: 64,
            ..HostOptions::default()
        };
        let host = open(&bytes, opts);
        host.stats().memory_plan.unwrap()
    };
    let (solo, four) = (plan(None), plan(Some(4)));
    let per =
        engine::Session::memory(&knot.meta.config, 64, engine::kv::KvType::F32, 1, 1).kv_cache;
    assert_eq!((solo.kv_cache, four.kv_cache), (per, 4 * per));
    assert_eq!(four.prefill_windows, 0);
    assert!(four.activations > solo.activations && four.logits > solo.logits);
}
