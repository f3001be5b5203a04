//! Where the bytes of a knot file come from: anything that can read a byte range.

use futures::future::LocalBoxFuture;
use std::rc::Rc;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceError {
    /// The source itself failed (I/O error, rejected promise, HTTP error, ...).
    #[error("reading bytes {start}..{end} failed: {message}")]
    Read {
        start: u64,
        end: u64,
        message: String,
    },
    /// The source answered with the wrong number of bytes.
    #[error("reading bytes {start}..{end}: the source returned {got} bytes, expected {expected}")]
    Length {
        start: u64,
        end: u64,
        got: u64,
        expected: u64,
    },
}

/// The bytes of one read; the future resolves once they have all arrived.
pub type ReadFuture = LocalBoxFuture<'static, Result<Vec<u8>, SourceError>>;

/// An async random-access byte source.
///
/// `read` must START the transfer when it is called, not when the future is first polled: the
/// host calls `read` for layer L+1 before computing layer L and awaits it afterwards, which is
/// what makes transfer and compute overlap on a single thread.
#[allow(clippy::len_without_is_empty)] // a knot file is never empty; `len` is its size
pub trait ByteSource {
    /// Total length in bytes, when the source knows it.
    fn len(&self) -> Option<u64>;
    /// Bytes `[start, end)`.
    fn read(&self, start: u64, end: u64) -> ReadFuture;
}

/// A source over bytes already in memory.
pub struct MemorySource {
    bytes: Rc<[u8]>,
}

impl MemorySource {
    pub fn new(bytes: impl Into<Rc<[u8]>>) -> Self {
        MemorySource {
            bytes: bytes.into(),
        }
    }
}

impl ByteSource for MemorySource {
    fn len(&self) -> Option<u64> {
        Some(self.bytes.len() as u64)
    }

    fn read(&self, start: u64, end: u64) -> ReadFuture {
        let result = usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| self.bytes.get(s..e))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| SourceError::Read {
                start,
                end,
                message: format!("out of range for {} bytes", self.bytes.len()),
            });
        Box::pin(futures::future::ready(result))
    }
}

/// A file read with positional reads (no shared cursor, so reads never interfere).
#[cfg(unix)]
pub struct FileSource {
    file: std::fs::File,
    len: u64,
}

#[cfg(unix)]
impl FileSource {
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        Ok(FileSource { file, len })
    }
}

#[cfg(unix)]
impl ByteSource for FileSource {
    fn len(&self) -> Option<u64> {
        Some(self.len)
    }

    fn read(&self, start: u64, end: u64) -> ReadFuture {
        use std::os::unix::fs::FileExt;
        let result = (|| {
            let len = end
                .checked_sub(start)
                .filter(|_| end <= self.len)
                .ok_or_else(|| format!("range out of bounds for a file of {} bytes", self.len))?;
            let mut buf = vec![0u8; len as usize];
            self.file
                .read_exact_at(&mut buf, start)
                .map_err(|e| e.to_string())?;
            Ok(buf)
        })()
        .map_err(|message| SourceError::Read {
            start,
            end,
            message,
        });
        Box::pin(futures::future::ready(result))
    }
}
