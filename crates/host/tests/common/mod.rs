//! What the host's test files share: an instrumented source.

use host::{ByteSource, MemorySource, ReadFuture, SourceError};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Wraps a source: logs every read; can fail or shorten reads on demand. An injected failure is
/// permanent, so the host's retries do not hide it.
pub struct Instrumented {
    pub inner: MemorySource,
    pub len: u64,
    pub log: RefCell<Vec<(u64, u64)>>,
    pub fail_at: Cell<Option<u64>>,
    /// How many reads at `fail_at` fail (default 1): 2 fails a prefetch and the read again that
    /// the host then makes itself.
    pub fail_times: Cell<u32>,
    pub short: Cell<bool>,
}

impl Instrumented {
    pub fn new(bytes: Vec<u8>) -> Rc<Self> {
        Rc::new(Instrumented {
            len: bytes.len() as u64,
            inner: MemorySource::new(bytes),
            log: RefCell::new(Vec::new()),
            fail_at: Cell::new(None),
            fail_times: Cell::new(1),
            short: Cell::new(false),
        })
    }
    #[allow(dead_code)] // not every test file counts reads
    pub fn reads(&self) -> usize {
        self.log.borrow().len()
    }
}

impl ByteSource for Instrumented {
    fn len(&self) -> Option<u64> {
        Some(self.len)
    }
    fn read(&self, start: u64, end: u64) -> ReadFuture {
        self.log.borrow_mut().push((start, end));
        if self.fail_at.get() == Some(start) {
            let left = self.fail_times.get().saturating_sub(1);
            self.fail_times.set(left.max(1));
            if left == 0 {
                self.fail_at.set(None);
            }
            return Box::pin(futures::future::ready(Err(SourceError::Permanent {
                start,
                end,
                message: "injected failure".into(),
            })));
        }
        if self.short.get() {
            return self.inner.read(start, end - 1);
        }
        self.inner.read(start, end)
    }
}

/// What a sequence made over the steps [`drain`] ran.
#[allow(dead_code)] // not every test file reads every field
pub struct Drained {
    pub ids: Vec<u32>,
    pub finish_reason: Option<engine::decode::FinishReason>,
    /// The failure it ended with, if any.
    pub error: Option<host::HostError>,
    /// Its report, once it ended (None: it made `limit` tokens and is still running).
    pub report: Option<host::host::SequenceReport>,
}

/// Steps `host` until sequence `id` ends or has made `limit` tokens (the other sequences step
/// along; their events are dropped). One step makes at most one token of a sequence, so a
/// sequence stopped at `limit` has handed out exactly `limit`.
#[allow(dead_code)] // not every test file steps sequences itself
pub fn drain(host: &mut host::Host, id: host::SequenceId, limit: usize) -> Drained {
    let mut out = Drained {
        ids: Vec::new(),
        finish_reason: None,
        error: None,
        report: None,
    };
    let mut steps = 0;
    while out.ids.len() < limit {
        assert!(host.active_sequences() > 0, "sequence {id} is not running");
        for e in futures::executor::block_on(host.step()) {
            if e.id != id {
                continue;
            }
            match e.token {
                Ok(Some(t)) => out.ids.push(t.id),
                Ok(None) => {}
                Err(err) => out.error = Some(err),
            }
            if e.done {
                out.finish_reason = e.finish_reason;
                out.report = e.report.map(|r| *r);
                return out;
            }
        }
        steps += 1;
        assert!(steps < 100_000, "sequence {id} never ended");
    }
    out
}
