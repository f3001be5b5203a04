//! What the host's test files share: an instrumented source.

use host::{ByteSource, MemorySource, ReadFuture, SourceError};
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// Wraps a source: logs every read; can fail or shorten reads on demand.
pub struct Instrumented {
    pub inner: MemorySource,
    pub len: u64,
    pub log: RefCell<Vec<(u64, u64)>>,
    pub fail_at: Cell<Option<u64>>,
    pub short: Cell<bool>,
}

impl Instrumented {
    pub fn new(bytes: Vec<u8>) -> Rc<Self> {
        Rc::new(Instrumented {
            len: bytes.len() as u64,
            inner: MemorySource::new(bytes),
            log: RefCell::new(Vec::new()),
            fail_at: Cell::new(None),
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
            self.fail_at.set(None);
            return Box::pin(futures::future::ready(Err(SourceError::Read {
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
