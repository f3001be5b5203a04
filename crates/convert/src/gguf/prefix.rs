//! [`PrefixReader`]: the GGUF header, metadata and tensor table from the file's first bytes,
//! fed by a driver that does the reading. The reader asks for more until the table parses.

use super::reader::{GgufError, GgufLimits};
use super::GgufFile;

/// The first read a driver makes: enough for the whole prefix of small files.
const FIRST_READ: u64 = 1 << 20;

/// Accumulates a GGUF's first bytes until its header, metadata and tensor table parse.
///
/// A driver reads [`wanted`](Self::wanted) (the byte range to fetch next), hands the bytes to
/// [`feed`](Self::feed), and repeats until `feed` returns the parsed file. Each request doubles
/// what is held, so a read is never longer than the prefix itself (or the first 1 MiB), and the
/// prefix is parsed O(log n) times.
#[derive(Debug)]
pub struct PrefixReader {
    buf: Vec<u8>,
    file_len: u64,
    limits: GgufLimits,
}

impl PrefixReader {
    /// A reader for a file of `file_len` bytes.
    pub fn new(file_len: u64) -> PrefixReader {
        PrefixReader::with_limits(file_len, GgufLimits::default())
    }

    pub fn with_limits(file_len: u64, limits: GgufLimits) -> PrefixReader {
        PrefixReader {
            buf: Vec::new(),
            file_len,
            limits,
        }
    }

    /// Bytes held so far (the next read starts here).
    pub fn held(&self) -> u64 {
        self.buf.len() as u64
    }

    /// The byte range `[start, end)` to read next.
    pub fn wanted(&self) -> (u64, u64) {
        let held = self.held();
        let end = held
            .saturating_mul(2)
            .max(FIRST_READ)
            .min(self.limits.max_prefix_len)
            .min(self.file_len);
        (held, end.max(held))
    }

    /// Appends the bytes that follow those held; returns the parsed file once the prefix is
    /// complete, `None` while more is needed. A file that cannot be a GGUF is an error as soon
    /// as the bytes show it; one that ends early is [`GgufError::Truncated`].
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<GgufFile>, GgufError> {
        let room = self.file_len.saturating_sub(self.held());
        if bytes.len() as u64 > room {
            return Err(GgufError::TensorBeyondEof {
                tensor: "(prefix bytes)".into(),
                end: self.held().saturating_add(bytes.len() as u64),
                file_len: self.file_len,
            });
        }
        self.buf.extend_from_slice(bytes);
        match GgufFile::parse(self.buf.as_slice(), self.file_len, &self.limits) {
            Ok(file) => {
                self.buf = Vec::new();
                Ok(Some(file))
            }
            Err(GgufError::Truncated(_)) if self.held() < self.file_len => {
                if self.held() >= self.limits.max_prefix_len {
                    return Err(GgufError::PrefixTooLong {
                        max: self.limits.max_prefix_len,
                    });
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::write::{file, RawTensor};
    use crate::gguf::GgufValue;

    fn sample() -> Vec<u8> {
        let kv = vec![
            ("general.architecture", GgufValue::String("llama".into())),
            ("general.name", GgufValue::String("x".repeat(3000))),
        ];
        let tensors = [RawTensor {
            name: "t".into(),
            dims: vec![4],
            type_id: 0,
            data: vec![1; 16],
        }];
        file(&kv, &tensors)
    }

    /// Feeds `bytes` in the reads the reader asks for, `step` bytes at a time at most.
    fn drive(bytes: &[u8], limits: GgufLimits, step: usize) -> Result<GgufFile, GgufError> {
        let mut r = PrefixReader::with_limits(bytes.len() as u64, limits);
        loop {
            let (start, end) = r.wanted();
            let end = end.min(start + step as u64);
            if let Some(g) = r.feed(&bytes[start as usize..end as usize])? {
                return Ok(g);
            }
            assert!(end > start, "the reader asked for nothing but needs more");
        }
    }

    #[test]
    fn parses_whatever_the_read_sizes() {
        let bytes = sample();
        let whole = GgufFile::read(&mut std::io::Cursor::new(&bytes)).unwrap();
        for step in [1, 7, 100, 1 << 20] {
            let g = drive(&bytes, GgufLimits::default(), step).unwrap();
            assert_eq!(g.data_offset, whole.data_offset);
            assert_eq!(g.tensors, whole.tensors);
            assert_eq!(g.metadata, whole.metadata);
        }
    }

    #[test]
    fn bad_and_short_files_are_errors() {
        let bytes = sample();
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(matches!(
            drive(&bad, GgufLimits::default(), 2),
            Err(GgufError::BadMagic(_))
        ));
        // Cut inside the metadata: the file's end is the prefix's end.
        assert!(matches!(
            drive(&bytes[..1000], GgufLimits::default(), 100),
            Err(GgufError::Truncated(_))
        ));
        assert!(matches!(
            drive(&[], GgufLimits::default(), 1),
            Err(GgufError::Truncated(_))
        ));
        let small = GgufLimits {
            max_prefix_len: 64,
            ..GgufLimits::default()
        };
        assert!(matches!(
            drive(&bytes, small, 1 << 20),
            Err(GgufError::PrefixTooLong { max: 64 })
        ));
        // More bytes than the file holds.
        let mut r = PrefixReader::new(4);
        assert!(r.feed(&[0; 5]).is_err());
    }
}
