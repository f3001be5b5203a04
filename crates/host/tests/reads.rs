//! The host's read path against a scripted source: timeouts, retries of transient failures,
//! permanent failures surfaced at once, late reads ignored, aborts, failed prefetches. A failed
//! or aborted step ends its sequence; its conversation is parked, and `continue` or
//! `reusePrefix` resumes it. Every recovery is checked against the tokens of a host whose reads
//! never fail.

use engine::decode::GenerateOptions;
use futures::channel::oneshot;
use futures::executor::block_on;
use futures::FutureExt;
use host::{
    Abort, ByteSource, Host, HostError, HostOptions, MemorySource, PrefixStatus, ReadFuture,
    ReadPolicy, SequenceId, SourceError,
};
use knot::Knot;
use knot_suite::fixture;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

fn tiny_bytes() -> Vec<u8> {
    std::fs::read(fixture("tiny/llama-f32.knot")).unwrap()
}

/// What the script does with one read.
enum Act {
    Pass,
    /// A read that never settles.
    Hang,
    /// Settles after `ms` with bytes of the right length but wrong content.
    LateGarbage(u64),
    /// Raises the abort flag when first polled, then never settles: an abort arriving while the
    /// read is in flight.
    AbortThenHang,
    Fail,
    FailForGood,
    Short,
    Long,
}

type Script = Box<dyn FnMut(usize, u64, u64) -> Act>;

/// A source that asks `script(index, start, end)` what to do with each read.
struct Scripted {
    inner: MemorySource,
    len: u64,
    script: RefCell<Script>,
    reads: Cell<usize>,
    abort: RefCell<Option<Abort>>,
}

impl Scripted {
    fn new(script: impl FnMut(usize, u64, u64) -> Act + 'static) -> Rc<Self> {
        let bytes = tiny_bytes();
        Rc::new(Scripted {
            len: bytes.len() as u64,
            inner: MemorySource::new(bytes),
            script: RefCell::new(Box::new(script)),
            reads: Cell::new(0),
            abort: RefCell::new(None),
        })
    }

    fn set_script(&self, script: impl FnMut(usize, u64, u64) -> Act + 'static) {
        *self.script.borrow_mut() = Box::new(script);
    }
}

impl ByteSource for Scripted {
    fn len(&self) -> Option<u64> {
        Some(self.len)
    }

    fn read(&self, start: u64, end: u64) -> ReadFuture {
        let index = self.reads.get();
        self.reads.set(index + 1);
        let act = (self.script.borrow_mut())(index, start, end);
        let error = move |message: &str| SourceError::Read {
            start,
            end,
            message: message.into(),
        };
        match act {
            Act::Pass => self.inner.read(start, end),
            Act::Hang => futures::future::pending().boxed_local(),
            Act::LateGarbage(ms) => {
                let (tx, rx) = oneshot::channel();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    let _ = tx.send(vec![0x7f; (end - start) as usize]);
                });
                rx.map(move |r| r.map_err(|_| error("sender gone")))
                    .boxed_local()
            }
            Act::AbortThenHang => {
                let abort = self.abort.borrow().clone().expect("abort handle set");
                let mut raised = false;
                futures::future::poll_fn(move |_| {
                    if !raised {
                        raised = true;
                        abort.abort();
                    }
                    std::task::Poll::Pending
                })
                .boxed_local()
            }
            Act::Fail => {
                futures::future::ready(Err(error("injected transient failure"))).boxed_local()
            }
            Act::FailForGood => futures::future::ready(Err(SourceError::Permanent {
                start,
                end,
                message: "injected permanent failure".into(),
            }))
            .boxed_local(),
            Act::Short => self.inner.read(start, end - 1),
            Act::Long => self
                .inner
                .read(start, end)
                .map(|r| {
                    r.map(|mut v| {
                        v.push(0);
                        v
                    })
                })
                .boxed_local(),
        }
    }
}

fn policy(timeout_ms: u64, retries: u32) -> ReadPolicy {
    ReadPolicy {
        timeout_ms,
        retries,
        backoff_ms: 1,
        ..ReadPolicy::default()
    }
}

fn open(src: Rc<Scripted>, lru: usize, policy: ReadPolicy) -> Result<Host, HostError> {
    let opts = HostOptions {
        lru_capacity: lru,
        read_policy: policy,
        ..HostOptions::default()
    };
    let host = block_on(Host::open(src.clone(), opts))?;
    *src.abort.borrow_mut() = Some(host.abort_handle());
    Ok(host)
}

const PROMPT: [u32; 3] = [7, 8, 9];

fn greedy_options(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens: n,
        ignore_eos: true,
        ..GenerateOptions::default()
    }
}

fn greedy(host: &mut Host, n: usize) -> Result<Vec<u32>, HostError> {
    let opts = greedy_options(n);
    Ok(block_on(host.generate(&PROMPT, &opts, &mut |_| true))?.ids)
}

/// Steps sequence `id` until it made `n` more tokens or ended: its tokens, and the failure it
/// ended with.
fn tokens_of(host: &mut Host, id: SequenceId, n: usize) -> (Vec<u32>, Option<HostError>) {
    let mut ids = Vec::new();
    while ids.len() < n {
        for e in block_on(host.step()) {
            assert_eq!(e.id, id, "one sequence runs");
            match e.token {
                Ok(t) => ids.extend(t.map(|t| t.id)),
                Err(err) => return (ids, Some(err)),
            }
            if e.done {
                return (ids, None);
            }
        }
    }
    (ids, None)
}

/// A script that does `act` to the next `times` reads of `start`, and passes the rest.
fn fail_reads_of(
    start: u64,
    times: u32,
    act: fn() -> Act,
) -> (impl FnMut(usize, u64, u64) -> Act, Rc<Cell<u32>>) {
    let left = Rc::new(Cell::new(times));
    let counter = left.clone();
    let script = move |_, s, _| match s == start && counter.get() > 0 {
        true => {
            counter.set(counter.get() - 1);
            act()
        }
        false => Act::Pass,
    };
    (script, left)
}

fn reference(n: usize) -> Vec<u32> {
    let mut host = open(Scripted::new(|_, _, _| Act::Pass), usize::MAX, policy(0, 0)).unwrap();
    greedy(&mut host, n).unwrap()
}

fn layer_start(layer: usize) -> u64 {
    let knot = Knot::from_bytes(&tiny_bytes()).unwrap();
    knot.layer_range(layer).unwrap().start
}

#[test]
fn a_read_that_never_settles_times_out() {
    // The metadata read (the second) hangs: without a timeout, open would wait forever.
    let src = Scripted::new(|i, _, _| if i == 1 { Act::Hang } else { Act::Pass });
    let err = open(src, 1, policy(50, 0)).err().unwrap();
    assert!(
        matches!(err, HostError::Source(SourceError::Timeout { ms: 50, .. })),
        "{err}"
    );
    assert!(err.to_string().contains("timed out after 50 ms"), "{err}");

    // With a retry, the second attempt succeeds; so does every layer read that hangs once.
    let hung = Rc::new(RefCell::new(std::collections::HashSet::new()));
    let seen = hung.clone();
    let src = Scripted::new(move |_, start, _| {
        if seen.borrow_mut().insert(start) {
            Act::Hang
        } else {
            Act::Pass
        }
    });
    let mut host = open(src, 1, policy(20, 1)).unwrap();
    assert_eq!(greedy(&mut host, 6).unwrap(), reference(6));
    let s = host.stats();
    assert!(s.read_timeouts >= 4, "{s:?}");
    assert_eq!(s.read_retries, s.read_timeouts);
}

#[test]
fn transient_failures_short_and_long_reads_are_retried_and_change_nothing() {
    let want = reference(8);
    for act in [|| Act::Fail, || Act::Short, || Act::Long] {
        let src = Scripted::new(|_, _, _| Act::Pass);
        let mut host = open(src.clone(), 1, policy(0, 2)).unwrap();
        // Every third read fails once (its retry is a later read, which passes).
        src.set_script(move |i, _, _| if i % 3 == 0 { act() } else { Act::Pass });
        assert_eq!(greedy(&mut host, 8).unwrap(), want);
        assert!(host.stats().read_retries > 0);
    }
}

#[test]
fn retries_give_up_naming_the_cause_and_the_attempts() {
    let src = Scripted::new(|_, _, _| Act::Pass);
    let mut host = open(src.clone(), 1, policy(0, 2)).unwrap();
    let layer1 = layer_start(1);
    src.set_script(move |_, start, _| {
        if start == layer1 {
            Act::Fail
        } else {
            Act::Pass
        }
    });
    let err = greedy(&mut host, 4).unwrap_err();
    let HostError::Source(SourceError::Exhausted { attempts: 3, cause }) = &err else {
        panic!("{err}")
    };
    assert!(matches!(**cause, SourceError::Read { .. }), "{err}");
    assert!(
        err.to_string()
            .ends_with("injected transient failure (gave up after 3 attempts)"),
        "{err}"
    );
    // The source heals: the same host goes on.
    src.set_script(|_, _, _| Act::Pass);
    assert_eq!(greedy(&mut host, 4).unwrap(), reference(4));
}

#[test]
fn a_permanent_failure_is_not_retried() {
    let src = Scripted::new(|_, _, _| Act::Pass);
    let mut host = open(src.clone(), 1, policy(0, 5)).unwrap();
    let layer0 = layer_start(0);
    src.set_script(move |_, start, _| {
        if start == layer0 {
            Act::FailForGood
        } else {
            Act::Pass
        }
    });
    let before = src.reads.get();
    let err = greedy(&mut host, 2).unwrap_err();
    assert!(
        matches!(err, HostError::Source(SourceError::Permanent { .. })),
        "{err}"
    );
    assert_eq!(src.reads.get() - before, 1, "one attempt, no retry");
    assert_eq!(host.stats().read_retries, 0);
}

#[test]
fn a_read_settling_after_its_timeout_is_ignored() {
    // The first read of each layer times out and later delivers garbage; the retry is good.
    let late = Rc::new(RefCell::new(std::collections::HashSet::new()));
    let seen = late.clone();
    let (l0, l1) = (layer_start(0), layer_start(1));
    let src = Scripted::new(move |_, start, _| {
        if (start == l0 || start == l1) && seen.borrow_mut().insert(start) {
            Act::LateGarbage(150)
        } else {
            Act::Pass
        }
    });
    let mut host = open(src, 2, policy(20, 1)).unwrap();
    assert_eq!(greedy(&mut host, 6).unwrap(), reference(6));
    assert_eq!(host.stats().read_timeouts, 2);
    // The late deliveries arrive meanwhile and go nowhere.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(greedy(&mut host, 6).unwrap(), reference(6));
}

#[test]
fn abort_abandons_a_read_in_flight_and_the_host_stays_consistent() {
    let want = reference(8);
    let src = Scripted::new(|_, _, _| Act::Pass);
    // No timeout: only the abort can end the hanging read.
    let mut host = open(src.clone(), 1, policy(0, 2)).unwrap();
    let id = host.admit(&PROMPT, &greedy_options(8)).unwrap().id;
    let (mut got, none) = tokens_of(&mut host, id, 2);
    assert!(none.is_none());
    // The next step's second layer read is in flight when the abort comes.
    let layer1 = layer_start(1);
    let armed = Rc::new(Cell::new(true));
    let arm = armed.clone();
    src.set_script(move |_, start, _| {
        if start == layer1 && arm.replace(false) {
            Act::AbortThenHang
        } else {
            Act::Pass
        }
    });
    let (none, err) = tokens_of(&mut host, id, 1);
    assert!(none.is_empty());
    let err = err.expect("the step was aborted");
    assert!(
        matches!(
            err,
            HostError::Aborted | HostError::Source(SourceError::Aborted { .. })
        ),
        "{err}"
    );
    assert!(!armed.get());
    assert_eq!(host.active_sequences(), 0, "the abort ended the sequence");
    // Its conversation was parked as it was before the step: `continue` goes on where it was,
    // with the tokens it would have made, and a new generation matches a fresh host.
    let resume = GenerateOptions {
        continue_session: true,
        ..greedy_options(6)
    };
    let a = host.admit(&[], &resume).unwrap();
    let p = a.prefix.unwrap();
    assert_eq!(
        (p.status, p.reused as usize),
        (PrefixStatus::Hit, PROMPT.len() + 1)
    );
    let (rest, none) = tokens_of(&mut host, a.id, 100);
    assert!(none.is_none());
    got.extend(rest);
    assert_eq!(got, want);
    assert_eq!(greedy(&mut host, 8).unwrap(), want);
}

#[test]
fn a_read_failing_mid_generation_ends_it_and_continue_or_reuse_prefix_resumes_it() {
    let want = reference(8);
    let layer1 = layer_start(1);
    for resume_with_continue in [true, false] {
        let src = Scripted::new(|_, _, _| Act::Pass);
        // No retries, capacity 1: every step reads both layers.
        let mut host = open(src.clone(), 1, policy(0, 0)).unwrap();
        let id = host.admit(&PROMPT, &greedy_options(8)).unwrap().id;
        let (mut got, none) = tokens_of(&mut host, id, 3);
        assert!(none.is_none());
        // Twice: a prefetch of layer 1, and the read the step then makes itself.
        let (script, left) = fail_reads_of(layer1, 2, || Act::FailForGood);
        src.set_script(script);
        let (none, err) = tokens_of(&mut host, id, 1);
        assert!(none.is_empty());
        let err = err.expect("the read failed");
        assert!(
            matches!(err, HostError::Source(SourceError::Permanent { .. })),
            "{err}"
        );
        assert_eq!(left.get(), 0);
        let s = host.stats();
        assert_eq!((s.sequences.active, s.sequences.ended), (0, 1));
        assert_eq!(s.generation.unwrap().decode.decode_tokens, 3);
        // Resumed: everything but the last token made comes from the window.
        let (prompt, opts) = match resume_with_continue {
            true => (
                Vec::new(),
                GenerateOptions {
                    continue_session: true,
                    ..greedy_options(5)
                },
            ),
            false => (
                [&PROMPT[..], &got].concat(),
                GenerateOptions {
                    reuse_prefix: true,
                    ..greedy_options(5)
                },
            ),
        };
        let a = host.admit(&prompt, &opts).unwrap();
        assert_eq!(a.prompt_tokens, PROMPT.len() + 3);
        let p = a.prefix.unwrap();
        assert_eq!(
            (p.status, p.reused as usize),
            (PrefixStatus::Hit, PROMPT.len() + 2)
        );
        let (rest, none) = tokens_of(&mut host, a.id, 100);
        assert!(none.is_none());
        got.extend(rest);
        assert_eq!(got, want, "continue: {resume_with_continue}");
        assert_eq!(greedy(&mut host, 8).unwrap(), want);
    }
}

#[test]
fn a_read_failing_in_a_continues_prefill_leaves_the_conversation_for_a_retry() {
    let layer1 = layer_start(1);
    let src = Scripted::new(|_, _, _| Act::Pass);
    let mut host = open(src.clone(), 1, policy(0, 0)).unwrap();
    let first = greedy(&mut host, 4).unwrap();
    let turn = GenerateOptions {
        continue_session: true,
        ..greedy_options(6)
    };
    let (script, _) = fail_reads_of(layer1, 2, || Act::FailForGood);
    src.set_script(script);
    let err = block_on(host.generate(&[5, 6], &turn, &mut |_| true)).unwrap_err();
    assert!(matches!(err, HostError::Source(_)), "{err}");
    // The retry appends the same turn to the same conversation, as a host that never failed.
    let a = host.admit(&[5, 6], &turn).unwrap();
    assert_eq!(a.prompt_tokens, PROMPT.len() + first.len() + 2);
    let (got, none) = tokens_of(&mut host, a.id, 100);
    assert!(none.is_none());
    let mut clean = open(Scripted::new(|_, _, _| Act::Pass), 1, policy(0, 0)).unwrap();
    greedy(&mut clean, 4).unwrap();
    let want = block_on(clean.generate(&[5, 6], &turn, &mut |_| true)).unwrap();
    assert_eq!(got, want.ids);
}

#[test]
fn a_failed_prefetch_does_not_fail_the_next_token() {
    let want = reference(6);
    let src = Scripted::new(|_, _, _| Act::Pass);
    // No retries: the prefetch's one failure would be the token's error.
    let mut host = open(src.clone(), 1, policy(0, 0)).unwrap();
    let opened = src.reads.get();
    // Capacity 1, two layers: the prompt reads layer 0, layer 1 (prefetched while layer 0
    // computes), then layer 0 again, prefetched for the next token while layer 1 computes.
    src.set_script(move |i, _, _| {
        if i == opened + 2 {
            Act::Fail
        } else {
            Act::Pass
        }
    });
    assert_eq!(greedy(&mut host, 6).unwrap(), want);
    assert!(src.reads.get() > opened + 2);
}
