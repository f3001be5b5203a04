//! The host's one read path, whatever the source: every read is length-checked, bounded by a
//! timeout, retried with exponential backoff while its failures are transient, and abandoned at
//! once when the caller aborts.

use crate::clock::sleep;
use crate::pool::{BufferPool, PooledBytes};
use crate::source::{ByteSource, SourceError};
use futures::future::{FutureExt, LocalBoxFuture};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// How reads are bounded and retried (`HostOptions` fields of the same names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadPolicy {
    /// Longest wait for one attempt, counted from when the host first waits for it; 0 waits
    /// forever.
    pub timeout_ms: u64,
    /// Further attempts after a transient failure.
    pub retries: u32,
    /// Wait before the first retry, doubled for each later one (capped at [`MAX_BACKOFF_MS`]).
    pub backoff_ms: u64,
    /// Pieces of one span in flight at once ([`Reader::read_span`]).
    pub concurrency: ReadConcurrency,
}

/// How many pieces of one span [`Reader::read_span`] keeps in flight: 1 to
/// [`ReadConcurrency::MAX`] (a Worker keeps at most 6 connections open per invocation; a 7th
/// request waits for one of them). The default, 4, leaves room for a read outside the span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadConcurrency(u8);

/// A read concurrency outside `1..=6`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("readConcurrency must be an integer in [1, {max}], got {got}", max = ReadConcurrency::MAX)]
pub struct ConcurrencyError {
    pub got: u64,
}

impl ReadConcurrency {
    pub const MAX: u8 = 6;
    pub const DEFAULT: ReadConcurrency = ReadConcurrency(4);
    /// One piece at a time.
    pub const ONE: ReadConcurrency = ReadConcurrency(1);

    pub fn new(n: u64) -> Result<Self, ConcurrencyError> {
        match u8::try_from(n) {
            Ok(n @ 1..=Self::MAX) => Ok(ReadConcurrency(n)),
            _ => Err(ConcurrencyError { got: n }),
        }
    }

    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

impl Default for ReadConcurrency {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The longest wait between two attempts.
pub const MAX_BACKOFF_MS: u64 = 5_000;

impl Default for ReadPolicy {
    fn default() -> Self {
        ReadPolicy {
            timeout_ms: 30_000,
            retries: 2,
            backoff_ms: 100,
            concurrency: ReadConcurrency::DEFAULT,
        }
    }
}

impl ReadPolicy {
    fn backoff(&self, retry: u32) -> u64 {
        self.backoff_ms
            .saturating_mul(1u64 << retry.min(20))
            .min(MAX_BACKOFF_MS)
    }
}

/// A cancellation flag shared by a call and its reads: [`Abort::abort`] makes every read in
/// flight fail with [`SourceError::Aborted`] at once and stops the layer loop before the next
/// layer. Each host call clears it when it begins.
#[derive(Clone, Default)]
pub struct Abort(Rc<AbortState>);

#[derive(Default)]
struct AbortState {
    aborted: Cell<bool>,
    /// The tasks waiting on reads; cleared with the flag, so it holds the current call's only.
    wakers: RefCell<Vec<Waker>>,
}

impl Abort {
    pub fn abort(&self) {
        self.0.aborted.set(true);
        for w in self.0.wakers.take() {
            w.wake();
        }
    }

    pub fn is_aborted(&self) -> bool {
        self.0.aborted.get()
    }

    pub(crate) fn clear(&self) {
        self.0.aborted.set(false);
        self.0.wakers.borrow_mut().clear();
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_aborted() {
            return Poll::Ready(());
        }
        let mut wakers = self.0.wakers.borrow_mut();
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Reads issued and bytes delivered, for `stats()`.
#[derive(Default)]
pub struct IoCounters {
    /// Attempts, retries included.
    pub reads: Cell<u64>,
    pub bytes: Cell<u64>,
    pub retries: Cell<u64>,
    pub timeouts: Cell<u64>,
}

pub struct Reader {
    source: Rc<dyn ByteSource>,
    policy: ReadPolicy,
    abort: Abort,
    pub io: Rc<IoCounters>,
}

impl Reader {
    pub fn new(source: Rc<dyn ByteSource>, policy: ReadPolicy) -> Self {
        Reader {
            source,
            policy,
            abort: Abort::default(),
            io: Rc::default(),
        }
    }

    pub fn abort_handle(&self) -> &Abort {
        &self.abort
    }

    /// Whether the source reads into buffers it is handed (see [`Reader::read_pooled`]).
    pub fn fills_buffers(&self) -> bool {
        self.source.fills_buffers()
    }

    /// The source's size, when it knows it.
    pub fn source_len(&self) -> Option<u64> {
        self.source.len()
    }

    /// Reads `[start, end)`. The first attempt starts now (the source begins its transfer when
    /// asked, which is what lets prefetch overlap compute); its timeout and any retry run once
    /// the future is polled.
    pub fn read(
        &self,
        start: u64,
        end: u64,
    ) -> LocalBoxFuture<'static, Result<Vec<u8>, SourceError>> {
        self.read_with(start, end, |source, start, end| source.read(start, end))
    }

    /// Reads `[start, end)` in pieces of at most `piece` bytes (all at once for `None`),
    /// appended in order into one buffer, so that what the source hands over at once stays small
    /// (in a Worker each piece is a JS buffer that counts against the isolate until collected).
    /// Up to the policy's `concurrency` pieces are in flight at once (a span of n pieces costs
    /// about n / concurrency latencies instead of n), and a piece that arrived early waits its
    /// turn: memory peaks at the span plus `concurrency` pieces. The first failure ends the
    /// span (the pieces still in flight are dropped).
    pub async fn read_span(
        &self,
        start: u64,
        end: u64,
        piece: Option<u64>,
    ) -> Result<Vec<u8>, SourceError> {
        match piece.filter(|&m| m > 0 && end.saturating_sub(start) > m) {
            None => self.read(start, end).await,
            Some(piece) => {
                use futures::stream::{self, StreamExt, TryStreamExt};
                let mut all = Vec::with_capacity(usize::try_from(end - start).unwrap_or(0));
                let next = |&at: &u64| Some(at.saturating_add(piece)).filter(|&n| n < end);
                let pieces = std::iter::successors(Some(start), next)
                    .map(|at| (at, end.min(at.saturating_add(piece))));
                // `buffered` starts a read only when one of its `concurrency` places is free
                // (a finished piece holds its place until it is appended), in order.
                let mut arriving = stream::iter(pieces)
                    .map(|(at, to)| self.read(at, to))
                    .buffered(self.policy.concurrency.get());
                while let Some(bytes) = arriving.try_next().await? {
                    all.extend_from_slice(&bytes);
                }
                Ok(all)
            }
        }
    }

    /// Reads `[start, end)` like [`Reader::read`], into a buffer from `pool` (each attempt takes
    /// its own: one that timed out may still be written to); the bytes go back to the pool when
    /// the last reference is dropped.
    pub fn read_pooled(
        &self,
        start: u64,
        end: u64,
        pool: &Rc<BufferPool>,
    ) -> LocalBoxFuture<'static, Result<PooledBytes, SourceError>> {
        if !self.source.fills_buffers() {
            let read = self.read(start, end);
            return read.map(|r| r.map(PooledBytes::unpooled)).boxed_local();
        }
        let (take_from, keep_in) = (pool.clone(), pool.clone());
        let read = self.read_with(start, end, move |source, start, end| {
            // A range too large for memory fails in the source, not here.
            let len = usize::try_from(end.saturating_sub(start)).unwrap_or(0);
            source.read_into(start, end, take_from.take(len))
        });
        read.map(move |r| r.map(|bytes| PooledBytes::new(bytes, &keep_in)))
            .boxed_local()
    }

    fn read_with(
        &self,
        start: u64,
        end: u64,
        read: impl Fn(&dyn ByteSource, u64, u64) -> crate::source::ReadFuture + 'static,
    ) -> LocalBoxFuture<'static, Result<Vec<u8>, SourceError>> {
        let (source, policy, abort, io) = (
            self.source.clone(),
            self.policy,
            self.abort.clone(),
            self.io.clone(),
        );
        let attempt = move |source: &dyn ByteSource, io: &IoCounters| {
            io.reads.set(io.reads.get() + 1);
            read(source, start, end)
        };
        let mut pending = attempt(&*source, &io);
        async move {
            let mut attempts = 1u32;
            loop {
                let result = bounded(pending, policy.timeout_ms, &abort, start, end).await;
                let error = match result {
                    Ok(bytes) => match length_error(start, end, bytes.len() as u64) {
                        None => {
                            io.bytes.set(io.bytes.get() + bytes.len() as u64);
                            return Ok(bytes);
                        }
                        Some(e) => e,
                    },
                    Err(e) => e,
                };
                if matches!(error, SourceError::Timeout { .. }) {
                    io.timeouts.set(io.timeouts.get() + 1);
                }
                if !error.is_transient() || attempts > policy.retries {
                    return Err(match attempts {
                        1 => error,
                        _ => SourceError::Exhausted {
                            attempts,
                            cause: Box::new(error),
                        },
                    });
                }
                let waited = Abortable {
                    inner: sleep(policy.backoff(attempts - 1)),
                    abort: &abort,
                }
                .await;
                if waited.is_none() {
                    return Err(SourceError::Aborted { start, end });
                }
                attempts += 1;
                io.retries.set(io.retries.get() + 1);
                pending = attempt(&*source, &io);
            }
        }
        .boxed_local()
    }
}

fn length_error(start: u64, end: u64, got: u64) -> Option<SourceError> {
    let expected = end - start;
    (got != expected).then_some(SourceError::Length {
        start,
        end,
        got,
        expected,
    })
}

/// One attempt, raced against its timeout and the abort flag. A read that loses the race is
/// dropped: whatever it delivers later goes nowhere.
async fn bounded(
    read: crate::source::ReadFuture,
    timeout_ms: u64,
    abort: &Abort,
    start: u64,
    end: u64,
) -> Result<Vec<u8>, SourceError> {
    let mut read = read;
    // Armed only if the read is not ready at once (in-memory and file reads always are).
    let mut timer = (timeout_ms > 0).then(|| sleep(timeout_ms));
    futures::future::poll_fn(move |cx| {
        if let Poll::Ready(r) = read.poll_unpin(cx) {
            return Poll::Ready(r);
        }
        if abort.poll(cx).is_ready() {
            return Poll::Ready(Err(SourceError::Aborted { start, end }));
        }
        if let Some(t) = &mut timer {
            if t.poll_unpin(cx).is_ready() {
                return Poll::Ready(Err(SourceError::Timeout {
                    start,
                    end,
                    ms: timeout_ms,
                }));
            }
        }
        Poll::Pending
    })
    .await
}

/// A future that gives up (None) when the abort flag is raised.
struct Abortable<'a, F> {
    inner: F,
    abort: &'a Abort,
}

impl<F: Future + Unpin> Future for Abortable<'_, F> {
    type Output = Option<F::Output>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(v) = self.inner.poll_unpin(cx) {
            return Poll::Ready(Some(v));
        }
        match self.abort.poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = ReadPolicy {
            backoff_ms: 100,
            ..ReadPolicy::default()
        };
        assert_eq!([p.backoff(0), p.backoff(1), p.backoff(2)], [100, 200, 400]);
        assert_eq!(p.backoff(10), MAX_BACKOFF_MS);
        assert_eq!(p.backoff(u32::MAX), MAX_BACKOFF_MS);
    }

    /// A source answering from memory after a few polls (fewer for some pieces than others, so
    /// they finish out of order), counting the reads in flight.
    struct Slow {
        bytes: Vec<u8>,
        in_flight: Rc<Cell<usize>>,
        most: Cell<usize>,
        reads: Cell<usize>,
        fail_at: Option<u64>,
    }

    struct Delayed {
        polls: usize,
        result: Option<Result<Vec<u8>, SourceError>>,
        in_flight: Rc<Cell<usize>>,
    }

    impl Future for Delayed {
        type Output = Result<Vec<u8>, SourceError>;
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            if self.polls > 0 {
                self.polls -= 1;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(self.result.take().expect("polled after it was ready"))
        }
    }

    impl Drop for Delayed {
        fn drop(&mut self) {
            self.in_flight.set(self.in_flight.get() - 1);
        }
    }

    impl ByteSource for Slow {
        fn len(&self) -> Option<u64> {
            Some(self.bytes.len() as u64)
        }
        fn read(&self, start: u64, end: u64) -> crate::source::ReadFuture {
            self.in_flight.set(self.in_flight.get() + 1);
            self.most.set(self.most.get().max(self.in_flight.get()));
            self.reads.set(self.reads.get() + 1);
            let result = match self.fail_at {
                Some(at) if (start..end).contains(&at) => Err(SourceError::Permanent {
                    start,
                    end,
                    message: "no".into(),
                }),
                _ => Ok(self.bytes[start as usize..end as usize].to_vec()),
            };
            Box::pin(Delayed {
                polls: 1 + (start as usize * 7) % 5,
                result: Some(result),
                in_flight: self.in_flight.clone(),
            })
        }
    }

    fn slow(len: usize, fail_at: Option<u64>) -> Rc<Slow> {
        Rc::new(Slow {
            bytes: (0..len).map(|i| (i * 31 % 251) as u8).collect(),
            in_flight: Rc::default(),
            most: Cell::new(0),
            reads: Cell::new(0),
            fail_at,
        })
    }

    fn reader(source: Rc<Slow>, concurrency: u64) -> Reader {
        let policy = ReadPolicy {
            timeout_ms: 0,
            concurrency: ReadConcurrency::new(concurrency).unwrap(),
            ..ReadPolicy::default()
        };
        Reader::new(source, policy)
    }

    #[test]
    fn a_span_reads_its_pieces_at_most_concurrency_at_once_in_order() {
        use futures::executor::block_on;
        for (concurrency, piece, start, end) in [
            (1, 7, 0, 100),
            (3, 7, 5, 100),
            (4, 10, 0, 100),
            (6, 9, 3, 97),
            (6, 50, 0, 300),
            (4, 64, 0, 64),
        ] {
            let src = slow(300, None);
            let r = reader(src.clone(), concurrency);
            let got = block_on(r.read_span(start, end, Some(piece))).unwrap();
            assert_eq!(
                got,
                src.bytes[start as usize..end as usize],
                "{concurrency} {piece}"
            );
            let pieces = (end - start).div_ceil(piece) as usize;
            assert_eq!(src.reads.get(), pieces);
            // Never more than the bound, and as many as the bound when there are pieces enough.
            assert_eq!(
                src.most.get(),
                pieces.min(concurrency as usize),
                "{concurrency} {piece}"
            );
            assert_eq!(src.in_flight.get(), 0);
        }
        // A failed piece fails the span, and the pieces in flight are dropped.
        let src = slow(300, Some(150));
        let r = reader(src.clone(), 4);
        assert!(matches!(
            block_on(r.read_span(0, 300, Some(20))),
            Err(SourceError::Permanent { start: 140, .. })
        ));
        assert_eq!(src.in_flight.get(), 0);
        assert!(src.reads.get() < 15, "reads stop at the failure");
    }

    #[test]
    fn read_concurrency_is_one_to_six() {
        assert_eq!(ReadConcurrency::default().get(), 4);
        assert_eq!(ReadConcurrency::new(1).unwrap().get(), 1);
        assert_eq!(ReadConcurrency::new(6).unwrap().get(), 6);
        for bad in [0, 7, 256, u64::MAX] {
            let e = ReadConcurrency::new(bad).unwrap_err();
            assert_eq!(e, ConcurrencyError { got: bad });
            assert_eq!(
                e.to_string(),
                format!("readConcurrency must be an integer in [1, 6], got {bad}")
            );
        }
    }
}
