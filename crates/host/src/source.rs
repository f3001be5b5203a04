//! Where the bytes of a knot file come from: anything that can read a byte range.

use futures::future::LocalBoxFuture;
use std::rc::Rc;

/// Why a read failed. [`SourceError::is_transient`] says which failures another attempt may
/// cure: the host's read path retries those (`HostOptions::read_retries`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceError {
    /// The source itself failed (I/O error, rejected promise, HTTP error, ...); worth retrying.
    #[error("reading bytes {start}..{end} failed: {message}")]
    Read {
        start: u64,
        end: u64,
        message: String,
    },
    /// The source failed in a way another attempt cannot cure: a range outside the file, an
    /// HTTP 4xx, a JS error marked `permanent = true`, a value that is not bytes.
    #[error("reading bytes {start}..{end} failed for good: {message}")]
    Permanent {
        start: u64,
        end: u64,
        message: String,
    },
    /// The source answered with the wrong number of bytes (a truncated or padded transfer).
    #[error("reading bytes {start}..{end}: the source returned {got} bytes, expected {expected}")]
    Length {
        start: u64,
        end: u64,
        got: u64,
        expected: u64,
    },
    /// The read did not settle within `HostOptions::read_timeout_ms`; whatever it brings later
    /// is dropped.
    #[error("reading bytes {start}..{end} timed out after {ms} ms")]
    Timeout { start: u64, end: u64, ms: u64 },
    /// The caller aborted the call the read belonged to.
    #[error("reading bytes {start}..{end} was aborted")]
    Aborted { start: u64, end: u64 },
    /// Every attempt failed; `cause` is the last failure.
    #[error("{cause} (gave up after {attempts} attempts)")]
    Exhausted {
        attempts: u32,
        cause: Box<SourceError>,
    },
}

impl SourceError {
    /// Whether another attempt may succeed: a failed or timed-out transfer or one of the wrong
    /// length may; a permanent failure, an abort, or a read that already gave up may not.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            SourceError::Read { .. } | SourceError::Length { .. } | SourceError::Timeout { .. }
        )
    }
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
    /// Bytes `[start, end)` written into `buf` (exactly `end - start` long), which the future
    /// hands back filled. A source that can write into caller memory (a positional file read,
    /// JS `rangeGetInto` into wasm memory) overrides this: a streamed layer then lands in the
    /// buffer of the layer it replaces, with no span allocated, zeroed and copied per read. The
    /// default ignores `buf` and reads.
    fn read_into(&self, start: u64, end: u64, buf: Vec<u8>) -> ReadFuture {
        drop(buf);
        self.read(start, end)
    }
    /// Whether `read_into` fills the buffer it is handed. When false (the default) the host
    /// hands it none and recycles nothing.
    fn fills_buffers(&self) -> bool {
        false
    }
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
            .ok_or_else(|| self.out_of_range(start, end));
        Box::pin(futures::future::ready(result))
    }

    fn read_into(&self, start: u64, end: u64, mut buf: Vec<u8>) -> ReadFuture {
        let span = usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| self.bytes.get(s..e));
        let result = match span {
            Some(span) if span.len() == buf.len() => {
                buf.copy_from_slice(span);
                Ok(buf)
            }
            Some(span) => Ok(span.to_vec()),
            None => Err(self.out_of_range(start, end)),
        };
        Box::pin(futures::future::ready(result))
    }

    fn fills_buffers(&self) -> bool {
        true
    }
}

impl MemorySource {
    fn out_of_range(&self, start: u64, end: u64) -> SourceError {
        SourceError::Permanent {
            start,
            end,
            message: format!("out of range for {} bytes", self.bytes.len()),
        }
    }
}

/// A file read with positional reads (no shared cursor, so reads never interfere).
pub struct FileSource {
    file: std::fs::File,
    len: u64,
}

impl FileSource {
    pub fn open(path: &std::path::Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        Ok(FileSource { file, len })
    }

    #[cfg(unix)]
    fn read_at(&self, buf: &mut [u8], start: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, start)
    }

    #[cfg(windows)]
    fn read_at(&self, mut buf: &mut [u8], mut start: u64) -> std::io::Result<()> {
        use std::os::windows::fs::FileExt;
        while !buf.is_empty() {
            match self.file.seek_read(buf, start)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    start += n as u64;
                }
            }
        }
        Ok(())
    }

    #[cfg(not(any(unix, windows)))]
    fn read_at(&self, buf: &mut [u8], start: u64) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = &self.file;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(buf)
    }
}

impl ByteSource for FileSource {
    fn len(&self) -> Option<u64> {
        Some(self.len)
    }

    fn read(&self, start: u64, end: u64) -> ReadFuture {
        self.read_into(start, end, Vec::new())
    }

    fn read_into(&self, start: u64, end: u64, mut buf: Vec<u8>) -> ReadFuture {
        let permanent = |message: String| SourceError::Permanent {
            start,
            end,
            message,
        };
        let result = (|| {
            let len = end
                .checked_sub(start)
                .filter(|_| end <= self.len)
                .ok_or_else(|| {
                    permanent(format!(
                        "range out of bounds for a file of {} bytes",
                        self.len
                    ))
                })?;
            let len = usize::try_from(len).map_err(|_| permanent("range too large".into()))?;
            // A recycled buffer of the right length is read into as it is: no zeroing.
            buf.resize(len, 0);
            // An I/O error may pass (a network file system, a file being replaced): retried.
            self.read_at(&mut buf, start)
                .map_err(|e| SourceError::Read {
                    start,
                    end,
                    message: e.to_string(),
                })?;
            Ok(buf)
        })();
        Box::pin(futures::future::ready(result))
    }

    fn fills_buffers(&self) -> bool {
        true
    }
}
