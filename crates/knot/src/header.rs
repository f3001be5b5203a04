//! The fixed 10-byte header and the arithmetic that places the payload.

use crate::KnotError;

pub const MAGIC: [u8; 4] = *b"KNOT";
/// The format version this crate reads and writes.
pub const VERSION: u16 = 1;
/// Magic (4) + version (2) + metadata length (4).
pub const FIXED_HEADER_LEN: usize = 10;
/// The only codec defined so far: the payload is stored as is.
pub const CODEC_RAW: u8 = 0;
/// Every tensor's absolute file offset is a multiple of this, so hosts can view tensor bytes
/// as aligned arrays straight out of a read buffer.
pub const TENSOR_ALIGNMENT: u64 = 64;
/// Default cap on the metadata length, checked before anything is allocated for it.
pub const DEFAULT_MAX_META_LEN: u32 = 16 << 20;

/// Offset of the codec byte: the end of the metadata rounded up to 4 bytes.
pub const fn codec_offset(meta_len: u32) -> u64 {
    (FIXED_HEADER_LEN as u64 + meta_len as u64 + 3) & !3
}

/// Offset of the first payload byte (one past the codec byte).
pub const fn payload_offset(meta_len: u32) -> u64 {
    codec_offset(meta_len) + 1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Largest metadata length accepted.
    pub max_meta_len: u32,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_meta_len: DEFAULT_MAX_META_LEN,
        }
    }
}

/// The first [`FIXED_HEADER_LEN`] bytes, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedHeader {
    pub version: u16,
    pub meta_len: u32,
}

impl FixedHeader {
    /// Decodes and checks the fixed header from at least its first 10 bytes.
    pub fn parse(bytes: &[u8], opts: &ReadOptions) -> Result<Self, KnotError> {
        if bytes.len() < FIXED_HEADER_LEN {
            return Err(KnotError::Truncated {
                what: "fixed header",
                needed: FIXED_HEADER_LEN as u64,
                available: bytes.len() as u64,
            });
        }
        let magic: [u8; 4] = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != MAGIC {
            return Err(KnotError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != VERSION {
            return Err(KnotError::UnsupportedVersion(version));
        }
        let meta_len = u32::from_le_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
        if meta_len == 0 {
            return Err(KnotError::EmptyMetadata);
        }
        if meta_len > opts.max_meta_len {
            return Err(KnotError::MetadataTooLong {
                len: meta_len,
                max: opts.max_meta_len,
            });
        }
        Ok(FixedHeader { version, meta_len })
    }

    /// Bytes a reader needs from the start of the file to parse the metadata and codec byte;
    /// equal to the payload offset.
    pub fn prefix_len(&self) -> u64 {
        payload_offset(self.meta_len)
    }

    pub fn payload_offset(&self) -> u64 {
        payload_offset(self.meta_len)
    }

    pub fn to_bytes(&self) -> [u8; FIXED_HEADER_LEN] {
        let mut out = [0u8; FIXED_HEADER_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6..10].copy_from_slice(&self.meta_len.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn worked_payload_offsets() {
        assert_eq!(payload_offset(1), 13);
        assert_eq!(payload_offset(2), 13);
        assert_eq!(payload_offset(3), 17);
        assert_eq!(payload_offset(100), 113);
    }

    fn header(version: u16, meta_len: u32) -> Vec<u8> {
        let mut b = b"KNOT".to_vec();
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&meta_len.to_le_bytes());
        b
    }

    #[test]
    fn parses_valid_header() {
        let h = FixedHeader::parse(&header(1, 100), &ReadOptions::default()).unwrap();
        assert_eq!(h.meta_len, 100);
        assert_eq!(h.prefix_len(), 113);
        assert_eq!(h.to_bytes().to_vec(), header(1, 100));
    }

    #[test]
    fn rejects_bad_magic() {
        let mut b = header(1, 5);
        b[0] = b'G';
        assert_eq!(
            FixedHeader::parse(&b, &ReadOptions::default()),
            Err(KnotError::BadMagic(*b"GNOT"))
        );
    }

    #[test]
    fn rejects_other_versions() {
        for v in [0u16, 2, 0xffff] {
            assert_eq!(
                FixedHeader::parse(&header(v, 5), &ReadOptions::default()),
                Err(KnotError::UnsupportedVersion(v))
            );
        }
    }

    #[test]
    fn rejects_zero_and_oversized_meta_len() {
        let opts = ReadOptions { max_meta_len: 1000 };
        assert_eq!(
            FixedHeader::parse(&header(1, 0), &opts),
            Err(KnotError::EmptyMetadata)
        );
        assert_eq!(
            FixedHeader::parse(&header(1, 1001), &opts),
            Err(KnotError::MetadataTooLong {
                len: 1001,
                max: 1000
            })
        );
        assert!(FixedHeader::parse(&header(1, 1000), &opts).is_ok());
        // The default cap holds even for the largest representable length.
        assert!(matches!(
            FixedHeader::parse(&header(1, u32::MAX), &ReadOptions::default()),
            Err(KnotError::MetadataTooLong { .. })
        ));
    }

    #[test]
    fn rejects_short_header() {
        assert_eq!(
            FixedHeader::parse(b"KNOT\x01\x00", &ReadOptions::default()),
            Err(KnotError::Truncated {
                what: "fixed header",
                needed: 10,
                available: 6
            })
        );
    }

    proptest! {
        #[test]
        fn payload_offset_properties(meta_len in 1u32..=u32::MAX) {
            let p = payload_offset(meta_len);
            let a = codec_offset(meta_len);
            prop_assert_eq!(a % 4, 0);
            prop_assert_eq!(p, a + 1);
            // Padding is 0..=3 bytes after the metadata.
            let end = FIXED_HEADER_LEN as u64 + meta_len as u64;
            prop_assert!(a >= end && a - end < 4);
        }
    }
}
