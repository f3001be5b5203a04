//! What a long-lived host (a Worker isolate) relies on: prompts prefilled in chunks, prefix reuse
//! across generations through a few KV windows, the f16 KV cache, and the memory budget checked
//! at open: a KV cache per sequence and per extra window, and `maxSequences: 'auto'` taking as
//! many sequences as the budget holds at the whole context.

mod common;

use common::Instrumented;
use engine::decode::GenerateOptions;
use engine::kv::KvType;
use futures::executor::block_on;
use host::options::SequenceCount;
use host::{Generated, Host, HostError, HostOptions, MemoryPlan, PrefixStatus};
use knot_suite::{fixture, require_model};
use std::rc::Rc;

fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap()
}

fn open_with(bytes: Vec<u8>, opts: HostOptions) -> Result<Host, HostError> {
    block_on(Host::open(Instrumented::new(bytes), opts))
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens: n,
        ignore_eos: true,
        ..GenerateOptions::default()
    }
}

fn reuse(n: usize) -> GenerateOptions {
    GenerateOptions {
        reuse_prefix: true,
        ..greedy(n)
    }
}

fn run(host: &mut Host, prompt: &[u32], o: &GenerateOptions) -> Vec<u32> {
    generate(host, prompt, o).ids
}

fn generate(host: &mut Host, prompt: &[u32], o: &GenerateOptions) -> Generated {
    block_on(host.generate(prompt, o, &mut |_| true)).unwrap()
}

/// How the last generation's prompt used the windows.
fn prefix(host: &Host) -> host::PrefixReport {
    let report = host.stats().generation.expect("a generation ended");
    report.prefix.expect("a prefix report")
}

/// The tiny gemma3 has sliding-window layers (window 4), so rings and rewinds are exercised.
const TINY: [&str; 2] = ["tiny/llama-f32.knot", "tiny/gemma3-f32.knot"];

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| (i * 7 + salt) % 200 + 3).collect()
}

#[test]
fn a_prompt_prefilled_in_chunks_gives_the_tokens_of_one_batch() {
    for rel in TINY {
        let p = prompt(100, 1);
        let whole = run(
            &mut open_with(bytes(rel), HostOptions::default()).unwrap(),
            &p,
            &greedy(12),
        );
        for (max_batch, kv_type) in [(1, KvType::F32), (7, KvType::F32), (64, KvType::F16)] {
            let opts = HostOptions {
                max_batch: Some(max_batch),
                kv_type,
                lru_capacity: 2,
                ..HostOptions::default()
            };
            let mut host = open_with(bytes(rel), opts).unwrap();
            let chunked = generate(&mut host, &p, &greedy(12));
            if kv_type == KvType::F32 {
                assert_eq!(chunked.ids, whole, "{rel} max_batch {max_batch}");
            }
            assert_eq!(chunked.report.prefill_tokens, 100);
            assert_eq!(chunked.report.prompt_tokens, 100);
        }
    }
}

#[test]
fn a_second_turn_reuses_the_first_and_equals_a_cold_run() {
    for rel in TINY {
        let mut host = open_with(bytes(rel), HostOptions::default()).unwrap();
        let turn1 = prompt(20, 2);
        let out1 = run(&mut host, &turn1, &reuse(10));
        assert_eq!(prefix(&host).status, PrefixStatus::Miss);
        // The next prompt is the conversation so far plus a new message.
        let mut turn2 = turn1.clone();
        turn2.extend(&out1);
        turn2.extend(prompt(9, 5));
        let out = generate(&mut host, &turn2, &reuse(10));
        let p = out.report.prefix.clone().unwrap();
        assert_eq!(p.status, PrefixStatus::Hit, "{rel}");
        // Everything but the last generated token (never run) came from the cache.
        assert_eq!(p.reused as usize, turn1.len() + out1.len() - 1);
        assert_eq!(p.prefilled as usize, turn2.len() - p.reused as usize);
        assert_eq!(out.report.prefill_tokens, p.prefilled);
        assert_eq!(host.stats().generation, Some(out.report));
        let cold = run(
            &mut open_with(bytes(rel), HostOptions::default()).unwrap(),
            &turn2,
            &greedy(10),
        );
        assert_eq!(out.ids, cold, "{rel}");
        // The conversation parked is the second turn's prompt and answer.
        let r = host.stats().prefix_reuse;
        assert_eq!((r.hits, r.misses, r.windows_held), (1, 1, 1));
        let more = GenerateOptions {
            continue_session: true,
            ..greedy(1)
        };
        let next = host.admit(&[], &more).unwrap();
        assert_eq!(next.prompt_tokens, turn2.len() + out.ids.len());
        host.cancel(next.id);
    }
}

#[test]
fn a_different_conversation_is_a_mismatch_that_keeps_what_it_shares() {
    let mut host = open_with(bytes(TINY[0]), HostOptions::default()).unwrap();
    let a = prompt(30, 1);
    run(&mut host, &a, &reuse(5));
    // Shares the first 12 tokens.
    let mut b = a[..12].to_vec();
    b.extend(prompt(10, 9));
    let warm = run(&mut host, &b, &reuse(6));
    let p = prefix(&host);
    assert_eq!((p.status, p.reused), (PrefixStatus::Mismatch, 12));
    let cold = run(
        &mut open_with(bytes(TINY[0]), HostOptions::default()).unwrap(),
        &b,
        &greedy(6),
    );
    assert_eq!(warm, cold);
}

#[test]
fn a_window_past_its_time_to_live_is_forgotten() {
    let opts = HostOptions {
        prefix_ttl_ms: Some(0.0),
        ..HostOptions::default()
    };
    let mut host = open_with(bytes(TINY[0]), opts).unwrap();
    let a = prompt(20, 1);
    let out = run(&mut host, &a, &reuse(4));
    std::thread::sleep(std::time::Duration::from_millis(5));
    let next = [a, out, prompt(3, 4)].concat();
    run(&mut host, &next, &reuse(4));
    let p = prefix(&host);
    assert_eq!((p.status, p.reused), (PrefixStatus::Expired, 0));
    assert_eq!(host.stats().prefix_reuse.expired, 1);
}

#[test]
fn several_windows_keep_several_conversations() {
    for rel in TINY {
        // One sequence at a time, and one window more: two caches.
        let opts = HostOptions {
            prefix_windows: 1,
            ..HostOptions::default()
        };
        let mut host = open_with(bytes(rel), opts).unwrap();
        let (a, b) = (prompt(25, 1), prompt(25, 100));
        let out_a = run(&mut host, &a, &reuse(6));
        let out_b = run(&mut host, &b, &reuse(6));
        // b shares no token with a: nothing to reuse, and a's window is kept.
        assert_eq!(prefix(&host).status, PrefixStatus::Miss);
        assert_eq!(host.stats().prefix_reuse.windows_held, 2);
        // Each conversation goes on from its own window, alternately.
        let a2 = [a.clone(), out_a, prompt(4, 7)].concat();
        let warm_a = run(&mut host, &a2, &reuse(6));
        let p = prefix(&host);
        assert_eq!((p.status, p.window), (PrefixStatus::Hit, 1), "{rel}");
        let b2 = [b.clone(), out_b, prompt(4, 8)].concat();
        let warm_b = run(&mut host, &b2, &reuse(6));
        let p = prefix(&host);
        assert_eq!((p.status, p.window), (PrefixStatus::Hit, 2), "{rel}");
        for (turn, warm) in [(&a2, warm_a), (&b2, warm_b)] {
            let cold = run(
                &mut open_with(bytes(rel), HostOptions::default()).unwrap(),
                turn,
                &greedy(6),
            );
            assert_eq!(warm, cold, "{rel}");
        }
        // One cache only: the two conversations take turns and miss each other.
        let mut one = open_with(bytes(rel), HostOptions::default()).unwrap();
        run(&mut one, &a, &reuse(6));
        run(&mut one, &b, &reuse(6));
        run(&mut one, &a2, &reuse(6));
        assert_eq!(prefix(&one).status, PrefixStatus::Miss);
        // reset forgets every window.
        host.reset();
        assert_eq!(host.stats().prefix_reuse.windows_held, 0);
        run(&mut host, &a2, &reuse(2));
        assert_eq!(prefix(&host).status, PrefixStatus::Miss);
    }
}

#[test]
fn a_failed_chunk_ends_the_sequence_and_keeps_what_was_prefilled() {
    let data = bytes(TINY[0]);
    let knot = knot::Knot::from_bytes(&data).unwrap();
    let layer1 = knot.layer_range(1).unwrap().start;
    let src = Instrumented::new(data.clone());
    let opts = HostOptions {
        max_batch: Some(4),
        lru_capacity: 1,
        ..HostOptions::default()
    };
    let mut host = block_on(Host::open(src.clone(), opts.clone())).unwrap();
    let a = prompt(10, 1);
    let out = run(&mut host, &a, &reuse(3));
    // The first chunk of the next prompt's suffix fails at layer 1.
    let next = [a.clone(), out.clone(), prompt(12, 3)].concat();
    src.fail_at.set(Some(layer1));
    src.fail_times.set(30);
    let failed = block_on(host.generate(&next, &reuse(3), &mut |_| true));
    assert!(matches!(failed, Err(HostError::Source(_))), "{failed:?}");
    src.fail_at.set(None);
    let s = host.stats();
    assert_eq!((s.sequences.active, s.sequences.ended), (0, 2));
    let failed = s.generation.unwrap();
    assert_eq!(failed.decode.decode_tokens, 0);
    // The window keeps what the prompt shared with it (the last generated token was never run,
    // so it is not in the cache), and none of the failed prefill: the conversation goes on
    // from there exactly as a fresh host's would.
    let kept = a.len() + out.len() - 1;
    assert_eq!(failed.prefix.unwrap().reused as usize, kept);
    let warm = run(&mut host, &next, &reuse(3));
    let p = prefix(&host);
    assert_eq!((p.status, p.reused as usize), (PrefixStatus::Hit, kept));
    let cold = run(
        &mut block_on(Host::open(Instrumented::new(data), opts)).unwrap(),
        &next,
        &greedy(3),
    );
    assert_eq!(warm, cold);
}

#[test]
fn reuse_and_continue_do_not_mix() {
    let mut host = open_with(bytes(TINY[0]), HostOptions::default()).unwrap();
    // A prompt longer than the context is refused before anything is forgotten.
    let opts = HostOptions {
        max_context: 16,
        ..HostOptions::default()
    };
    let mut small = open_with(bytes(TINY[0]), opts).unwrap();
    assert!(matches!(
        block_on(small.generate(&prompt(17, 0), &reuse(1), &mut |_| true)),
        Err(HostError::PromptTooLong { .. })
    ));
    let err = GenerateOptions::from_json(r#"{"continue": true, "reusePrefix": true}"#);
    assert!(err.is_err());
    run(&mut host, &prompt(5, 0), &reuse(2));
}

#[test]
fn the_f16_kv_cache_takes_half_the_memory() {
    let p = prompt(100, 3);
    let mut bytes_by_type = Vec::new();
    for kv_type in [KvType::F32, KvType::F16] {
        let opts = HostOptions {
            kv_type,
            ..HostOptions::default()
        };
        let mut host = open_with(bytes(TINY[0]), opts).unwrap();
        run(&mut host, &p, &greedy(4));
        bytes_by_type.push(host.stats().kv_cache_bytes);
    }
    assert_eq!(bytes_by_type[0], 2 * bytes_by_type[1]);
}

/// SmolLM2 under budgets a Worker isolate would give it.
#[test]
fn a_budget_sizes_the_context_and_refuses_what_cannot_fit() {
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let data = std::fs::read(path).unwrap();
    let budgeted_with = |budget: u64, kv_type: KvType, prefill_windows: usize| {
        let opts = HostOptions {
            memory_budget: Some(budget),
            lru_capacity: 4,
            kv_type,
            max_context: 8192,
            prefill_windows,
            ..HostOptions::default()
        };
        block_on(Host::open(
            Rc::new(host::MemorySource::new(data.clone())),
            opts,
        ))
    };
    let budgeted = |budget: u64, kv_type: KvType| budgeted_with(budget, kv_type, 0);
    let mib = 1u64 << 20;
    let host = budgeted(96 * mib, KvType::F16).unwrap();
    let s = host.stats();
    let plan = s.memory_plan.clone().unwrap();
    assert!(plan.total <= 96 * mib, "{plan:?}");
    assert_eq!(s.context_length, plan.context);
    // f16 rows: 30 layers × 2 × 192 × 2 bytes per position.
    assert!(plan.context >= 1024, "{plan:?}");
    // Allocated up front: what the plan counted, pages rounded.
    assert_eq!(s.kv_cache_bytes, plan.kv_cache);
    // An f32 cache gets half the context in the same budget, give or take the fixed parts.
    let f32_plan = budgeted(96 * mib, KvType::F32)
        .unwrap()
        .stats()
        .memory_plan
        .unwrap();
    assert!(f32_plan.context < plan.context * 6 / 10, "{f32_plan:?}");
    // The default explicit prefill window (512 positions) is counted, and costs context.
    let windowed = budgeted_with(96 * mib, KvType::F16, 1).unwrap().stats();
    let w_plan = windowed.memory_plan.unwrap();
    assert_eq!(w_plan.prefill_windows, 512 * 30 * 2 * 192 * 2, "{w_plan:?}");
    assert!(w_plan.total <= 96 * mib && w_plan.context < plan.context);
    // Two sequences and a window more: three KV caches, of the (smaller) context that fits.
    let three = block_on(Host::open(
        Rc::new(host::MemorySource::new(data.clone())),
        HostOptions {
            memory_budget: Some(96 * mib),
            lru_capacity: 4,
            kv_type: KvType::F16,
            max_context: 8192,
            prefill_windows: 0,
            max_sequences: SequenceCount::Fixed(2),
            prefix_windows: 1,
            ..HostOptions::default()
        },
    ))
    .unwrap();
    let s3 = three.stats();
    let plan3 = s3.memory_plan.unwrap();
    let per = engine::Session::memory(three.config(), plan3.context, KvType::F16, 1, 1).kv_cache;
    assert_eq!(plan3.kv_cache, 3 * per, "{plan3:?}");
    assert!(
        plan3.total <= 96 * mib && plan3.context < plan.context,
        "{plan3:?}"
    );
    assert_eq!(s3.kv_cache_bytes, plan3.kv_cache);
    assert_eq!((s3.sequences.max, s3.prefix_reuse.windows), (2, 3));
    // 'auto' takes as many sequences as the budget holds at the whole context: more with more.
    let auto = |budget: u64| {
        let opts = HostOptions {
            memory_budget: Some(budget),
            lru_capacity: 4,
            kv_type: KvType::F16,
            max_context: 1024,
            prefill_windows: 0,
            max_sequences: SequenceCount::Auto,
            ..HostOptions::default()
        };
        let src = Rc::new(host::MemorySource::new(data.clone()));
        let host = block_on(Host::open(src, opts)).unwrap();
        let plan = host.stats().memory_plan.unwrap();
        assert!(plan.total <= budget, "{plan:?}");
        (host.max_sequences(), plan)
    };
    let (few, few_plan) = auto(96 * mib);
    let (more, more_plan) = auto(160 * mib);
    assert!(more > few, "{few} {more}");
    assert_eq!(more_plan.context, 1024);
    assert!(few > 1 || few_plan.context <= 1024);
    // Too small for the resident tensors: refused with the numbers, before they are read.
    let err = budgeted(32 * mib, KvType::F16).err().unwrap().to_string();
    assert!(
        err.contains("does not fit the memory budget of 33554432 bytes (32.0 MiB)")
            && err.contains("resident tensors 29.8 MiB")
            && err.contains("KV cache"),
        "{err}"
    );
}

#[test]
fn gemma3_270m_does_not_fit_an_isolate() {
    let Some(path) = require_model("gemma-3-270m.knot") else {
        return;
    };
    let src = Instrumented::new(std::fs::read(path).unwrap());
    let opts = HostOptions {
        memory_budget: Some(128 << 20),
        lru_capacity: 2,
        kv_type: KvType::F16,
        ..HostOptions::default()
    };
    let err = block_on(Host::open(src.clone(), opts)).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, HostError::OverBudget { .. }), "{msg}");
    assert!(
        msg.contains("128.0 MiB") && msg.contains("resident tensors"),
        "{msg}"
    );
    // Refused after the header and metadata, before the tensors: two reads.
    assert_eq!(src.reads(), 2);
}

#[test]
fn the_resident_span_can_come_in_pieces() {
    let data = bytes(TINY[0]);
    let knot = knot::Knot::from_bytes(&data).unwrap();
    let (tok, res) = (knot.tokenizer_range(), knot.resident_range());
    let src = Instrumented::new(data.clone());
    let opts = HostOptions {
        max_read_bytes: Some(1000),
        ..HostOptions::default()
    };
    let mut host = block_on(Host::open(src.clone(), opts)).unwrap();
    let log = src.log.borrow().clone();
    let pieces = &log[2..];
    assert_eq!(pieces.len() as u64, (res.end - tok.start).div_ceil(1000));
    assert!(pieces.iter().all(|(s, e)| e - s <= 1000));
    assert_eq!(
        (pieces[0].0, pieces.last().unwrap().1),
        (tok.start, res.end)
    );
    assert!(pieces.windows(2).all(|w| w[0].1 == w[1].0), "contiguous");
    let whole = run(
        &mut open_with(data, HostOptions::default()).unwrap(),
        &prompt(10, 1),
        &greedy(8),
    );
    assert_eq!(run(&mut host, &prompt(10, 1), &greedy(8)), whole);
}

/// Opens the tiny llama with `sequences` and `budget` (layers: two cached; `max_batch`
/// positions per pass, None: the default).
fn sized_with(sequences: SequenceCount, budget: Option<u64>, max_batch: Option<usize>) -> Host {
    let opts = HostOptions {
        max_sequences: sequences,
        memory_budget: budget,
        lru_capacity: 2,
        max_batch,
        ..HostOptions::default()
    };
    open_with(bytes(TINY[0]), opts).unwrap()
}

/// The same with batches of 64 positions: within the tiny llama's context of 128.
fn sized(sequences: SequenceCount, budget: Option<u64>) -> Host {
    sized_with(sequences, budget, Some(64))
}

fn plan_of(host: &Host) -> MemoryPlan {
    host.stats().memory_plan.expect("a memory plan")
}

#[test]
fn the_plan_counts_a_kv_cache_per_sequence_and_per_extra_window() {
    let knot = knot::Knot::from_bytes(&bytes(TINY[0])).unwrap();
    // The tiny llama's whole context: 128 positions.
    let per = engine::Session::memory(&knot.meta.config, 128, KvType::F32, 1, 1).kv_cache;
    for (sequences, extra) in [(1, 0), (1, 2), (3, 0), (3, 1)] {
        let opts = HostOptions {
            max_sequences: SequenceCount::Fixed(sequences),
            prefix_windows: extra,
            memory_budget: Some(1 << 30),
            lru_capacity: 2,
            ..HostOptions::default()
        };
        let mut host = open_with(bytes(TINY[0]), opts).unwrap();
        let plan = plan_of(&host);
        let caches = sequences + extra;
        assert_eq!(plan.kv_cache, caches as u64 * per, "{sequences} {extra}");
        let s = host.stats();
        assert_eq!(
            (s.sequences.max, s.prefix_reuse.windows),
            (sequences, caches)
        );
        // Taken at open, and never more however the sequences run.
        assert_eq!(s.kv_cache_bytes, plan.kv_cache);
        for round in 0..2 {
            let ids: Vec<_> = (0..sequences)
                .map(|i| {
                    let p = prompt(20 + 7 * i, i as u32 + round);
                    host.admit(&p, &reuse(30)).unwrap().id
                })
                .collect();
            while host.active_sequences() > 0 {
                block_on(host.step());
                let bytes = host.stats().kv_cache_bytes;
                assert!(
                    bytes <= plan.kv_cache + plan.prefill_windows,
                    "{bytes} {plan:?}"
                );
            }
            assert_eq!(ids.len(), sequences);
        }
    }
}

#[test]
fn auto_sequences_are_as_many_as_the_budget_holds_at_the_whole_context() {
    // Without a budget: four, with a cache each.
    let host = sized(SequenceCount::Auto, None);
    assert_eq!(host.max_sequences(), 4);
    assert_eq!(host.stats().prefix_reuse.windows, 4);
    assert_eq!(host.stats().memory_plan, None);
    // What n sequences take at the whole context.
    let totals: Vec<u64> = (1..=17)
        .map(|n| plan_of(&sized(SequenceCount::Fixed(n), Some(1 << 40))).total)
        .collect();
    assert!(totals.windows(2).all(|t| t[0] < t[1]), "{totals:?}");
    let budgets = [
        totals[0],
        totals[1] - 1,
        totals[1],
        totals[4] + 1,
        totals[9],
        totals[15] - 1,
        totals[15],
        totals[16],
        1 << 40,
    ];
    let mut counts = Vec::new();
    for budget in budgets {
        let host = sized(SequenceCount::Auto, Some(budget));
        let n = host.max_sequences();
        let plan = plan_of(&host);
        // Never over the budget, the whole context, and the most that fit (up to 16).
        assert!(plan.total <= budget, "{n}: {plan:?}");
        assert_eq!((plan.context, plan.total), (128, totals[n - 1]), "{n}");
        assert!(
            n == 16 || totals[n] > budget,
            "{n} sequences: one more fits in {budget}: {totals:?}"
        );
        assert_eq!(host.stats().prefix_reuse.windows, n);
        counts.push(n);
    }
    assert_eq!(counts, [1, 1, 2, 5, 10, 15, 16, 16, 16]);
}

#[test]
fn auto_sequences_count_the_plan_the_host_keeps_whatever_the_batch() {
    // The tiny llama's context (128 positions) is below the default batch under a budget.
    let two = plan_of(&sized_with(SequenceCount::Fixed(2), Some(1 << 40), None));
    let host = sized_with(SequenceCount::Auto, Some(two.total), None);
    assert_eq!(host.max_sequences(), 2, "{two:?}");
}
