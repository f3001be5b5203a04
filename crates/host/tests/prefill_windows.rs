//! Explicit prefill windows on the tiny models: a generation served from a window gives the
//! tokens a cold prefill gives, bit for bit, and leaves the window as it was; the statuses
//! (hit, miss, mismatch, expired, disabled), the limits, replacement of the least recently used,
//! extension, deletion, and the memory plan (with one sequence or several).

mod common;

use common::Instrumented;
use engine::decode::GenerateOptions;
use engine::kv::KvType;
use futures::executor::block_on;
use host::options::SequenceCount;
use host::{ErrorCode, Host, HostOptions, PrefixKind, PrefixStatus};
use knot_suite::fixture;

const MODELS: [&str; 4] = [
    "tiny/llama-f32.knot",
    "tiny/llama-f16.knot",
    "tiny/gemma3-f32.knot",
    "tiny/qwen3-f32.knot",
];

fn open_with(model: &str, opts: HostOptions) -> Host {
    let bytes = std::fs::read(fixture(model)).unwrap();
    block_on(Host::open(Instrumented::new(bytes), opts)).unwrap()
}

fn open(model: &str) -> Host {
    open_with(model, HostOptions::default())
}

fn greedy(host: &mut Host, prompt: &[u32], window: Option<&str>) -> Vec<u32> {
    let opts = GenerateOptions {
        max_tokens: 12,
        ignore_eos: true,
        prefill_window: window.map(String::from),
        ..GenerateOptions::default()
    };
    block_on(host.generate(prompt, &opts, &mut |_| true))
        .unwrap()
        .ids
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 37 + 11) % 200 + 3).collect()
}

/// The last generation's prefix report.
fn prefix(host: &Host) -> Option<host::PrefixReport> {
    host.stats().generation.expect("a generation ended").prefix
}

fn status(host: &Host) -> (PrefixStatus, u64) {
    let p = prefix(host).expect("a prefix report");
    assert_eq!(p.kind, PrefixKind::Explicit);
    (p.status, p.reused)
}

#[test]
fn a_hit_gives_the_cold_prefill_tokens_and_keeps_the_window() {
    for model in MODELS {
        for (kv_type, max_batch) in [(KvType::F32, None), (KvType::F16, Some(5))] {
            let opts = HostOptions {
                kv_type,
                max_batch,
                ..HostOptions::default()
            };
            let p = prompt(30);
            let mut cold = open_with(model, opts.clone());
            let want = greedy(&mut cold, &p, None);
            assert_eq!(prefix(&cold), None);

            let mut host = open_with(model, opts);
            let w = block_on(host.create_prefill_window(&p[..17], None)).unwrap();
            assert_eq!((w.window.tokens, w.replaced.as_deref()), (17, None));
            assert!(w.window.id.starts_with("pw-1-"), "{}", w.window.id);
            let id = w.window.id;
            for _ in 0..2 {
                let got = greedy(&mut host, &p, Some(&id));
                assert_eq!(got, want, "{model} {kv_type:?} {max_batch:?}");
                assert_eq!(status(&host), (PrefixStatus::Hit, 17));
                assert_eq!(prefix(&host).unwrap().prefilled, 13);
            }
            // A window as long as the prompt less one still runs the last token.
            let w = block_on(host.create_prefill_window(&p[..29], None)).unwrap();
            assert_eq!(w.replaced, Some(id), "the one window is replaced");
            assert_eq!(greedy(&mut host, &p, Some(&w.window.id)), want);
            assert_eq!(status(&host), (PrefixStatus::Hit, 29));
        }
    }
}

#[test]
fn creating_a_window_leaves_the_parked_conversation_as_it_was() {
    let model = "tiny/gemma3-f32.knot";
    let p = prompt(20);
    let run = |with_window: bool| {
        let mut host = open(model);
        let first = greedy(&mut host, &p, None);
        if with_window {
            block_on(host.create_prefill_window(&prompt(40), None)).unwrap();
        }
        let more = GenerateOptions {
            max_tokens: 8,
            ignore_eos: true,
            continue_session: true,
            ..GenerateOptions::default()
        };
        let next = block_on(host.generate(&[5, 6], &more, &mut |_| true)).unwrap();
        (first, next.ids)
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn statuses_miss_mismatch_expired_and_disabled_prefill_cold() {
    let model = "tiny/llama-f32.knot";
    let p = prompt(24);
    let want = greedy(&mut open(model), &p, None);
    let mut host = open_with(
        model,
        HostOptions {
            prefill_windows: 3,
            ..HostOptions::default()
        },
    );
    assert_eq!(greedy(&mut host, &p, Some("pw-9-nothing")), want);
    assert_eq!(status(&host), (PrefixStatus::Miss, 0));

    let other = block_on(host.create_prefill_window(&[9, 9, 9], None)).unwrap();
    assert_eq!(greedy(&mut host, &p, Some(&other.window.id)), want);
    assert_eq!(status(&host), (PrefixStatus::Mismatch, 0));
    // The whole prompt is no prefix that leaves a token to run.
    let whole = block_on(host.create_prefill_window(&p, None)).unwrap();
    assert_eq!(greedy(&mut host, &p, Some(&whole.window.id)), want);
    assert_eq!(status(&host), (PrefixStatus::Mismatch, 0));

    let gone = block_on(host.create_prefill_window(&p[..10], Some(0.0))).unwrap();
    assert_eq!(greedy(&mut host, &p, Some(&gone.window.id)), want);
    assert_eq!(status(&host), (PrefixStatus::Expired, 0));
    // Dropped once seen expired.
    let err = host.prefill_window(&gone.window.id).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);
    // The implicit reuse is not asked for alongside.
    let opts = GenerateOptions::from_json(
        r#"{"reusePrefix": true, "prefillWindow": "x", "maxTokens": 12, "ignoreEos": true}"#,
    );
    let out = block_on(host.generate(&p, &opts.unwrap(), &mut |_| true)).unwrap();
    assert_eq!(out.ids, want);
    assert_eq!(status(&host), (PrefixStatus::Miss, 0));

    let mut off = open_with(
        model,
        HostOptions {
            prefill_windows: 0,
            ..HostOptions::default()
        },
    );
    assert_eq!(greedy(&mut off, &p, Some("pw-1-x")), want);
    assert_eq!(status(&off), (PrefixStatus::Disabled, 0));
    let err = block_on(off.create_prefill_window(&p, None)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Disabled);
    assert_eq!(
        off.prefill_window("x").unwrap_err().code(),
        ErrorCode::Disabled
    );
    assert_eq!(
        off.delete_prefill_window("x").unwrap_err().code(),
        ErrorCode::Disabled
    );
    assert_eq!(
        off.prefill_window_list().unwrap_err().code(),
        ErrorCode::Disabled
    );
}

#[test]
fn get_update_delete_and_the_least_recently_used_is_replaced() {
    let model = "tiny/qwen3-f32.knot";
    let mut host = open_with(
        model,
        HostOptions {
            prefill_windows: 2,
            prefill_window_max_tokens: 20,
            ..HostOptions::default()
        },
    );
    let p = prompt(30);
    let a = block_on(host.create_prefill_window(&p[..5], Some(60_000.0)))
        .unwrap()
        .window;
    let b = block_on(host.create_prefill_window(&[1, 2], None))
        .unwrap()
        .window;
    assert_ne!(a.id, b.id);
    assert_eq!(host.prefill_window(&a.id).unwrap(), a);
    let listed: Vec<String> = host
        .prefill_window_list()
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(listed, [a.id.clone(), b.id.clone()]);
    let s = host.stats().prefill_windows;
    assert_eq!((s.count, s.max, s.tokens), (2, 2, 7));
    assert!(s.kv_bytes > 0);

    // Using `a` makes `b` the least recently used.
    greedy(&mut host, &p, Some(&a.id));
    let c = block_on(host.create_prefill_window(&[3, 4], None)).unwrap();
    assert_eq!(c.replaced.as_deref(), Some(b.id.as_str()));
    assert_eq!(
        host.prefill_window(&b.id).unwrap_err().code(),
        ErrorCode::NotFound
    );

    // Limits and prefixes.
    let err = block_on(host.create_prefill_window(&p[..21], None)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert!(
        err.to_string().contains("prefillWindowMaxTokens = 20"),
        "{err}"
    );
    let err =
        block_on(host.update_prefill_window(&a.id, Some(&[7, 7, 7, 7, 7, 7]), None)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    assert_eq!(
        host.prefill_window(&a.id).unwrap(),
        a,
        "a refused update changes nothing"
    );

    // Extended: only the new tokens are prefilled, and the hit is the cold prefill's.
    let longer = block_on(host.update_prefill_window(&a.id, Some(&p[..12]), None)).unwrap();
    assert_eq!((longer.id.as_str(), longer.tokens), (a.id.as_str(), 12));
    assert_eq!(
        longer.expires_at, a.expires_at,
        "an extension keeps the expiry"
    );
    let want = greedy(&mut open(model), &p, None);
    assert_eq!(greedy(&mut host, &p, Some(&a.id)), want);
    assert_eq!(status(&host), (PrefixStatus::Hit, 12));
    let refreshed = block_on(host.update_prefill_window(&a.id, None, Some(1_000.0))).unwrap();
    assert!(refreshed.expires_at < a.expires_at);
    let err = block_on(host.update_prefill_window("pw-0-none", None, Some(1.0))).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound);

    assert!(host.delete_prefill_window(&a.id).unwrap());
    assert!(!host.delete_prefill_window(&a.id).unwrap());
    assert_eq!(host.stats().prefill_windows.count, 1);
    host.reset();
    assert_eq!(host.stats().prefill_windows.count, 0);
}

#[test]
fn the_memory_plan_counts_the_windows() {
    let model = "tiny/llama-f32.knot";
    let plan = |windows: usize| {
        let host = open_with(
            model,
            HostOptions {
                memory_budget: Some(64 << 20),
                prefill_windows: windows,
                prefill_window_max_tokens: 64,
                ..HostOptions::default()
            },
        );
        host.stats().memory_plan.unwrap()
    };
    let (none, two) = (plan(0), plan(2));
    assert_eq!(none.prefill_windows, 0);
    assert!(two.prefill_windows > 0);
    // The windows' caches, and the residual rows of the session that prefills them.
    let dim = open(model).config().dim;
    let residual = (two.max_batch * dim * 4) as u64;
    assert_eq!(two.activations - none.activations, residual);
    assert_eq!(two.total - none.total, two.prefill_windows + residual);
    // Counted the same with several sequences (their windows work as well).
    let several = open_with(
        model,
        HostOptions {
            memory_budget: Some(64 << 20),
            prefill_windows: 2,
            prefill_window_max_tokens: 64,
            max_sequences: SequenceCount::Fixed(3),
            ..HostOptions::default()
        },
    );
    let s = several.stats();
    assert_eq!(s.memory_plan.unwrap().prefill_windows, two.prefill_windows);
    assert_eq!(s.prefill_windows.max, 2);
    // A window's KV stays within what the plan counted for it.
    let mut host = open_with(
        model,
        HostOptions {
            memory_budget: Some(64 << 20),
            prefill_windows: 1,
            prefill_window_max_tokens: 64,
            ..HostOptions::default()
        },
    );
    block_on(host.create_prefill_window(&prompt(64), None)).unwrap();
    let s = host.stats();
    assert!(s.prefill_windows.kv_bytes <= s.memory_plan.unwrap().prefill_windows);
    assert!(s.prefill_windows.kv_bytes > 0);
}
