//! Embedding rows from a head station to the coordinator, and the logits they ride with, as
//! compact little-endian binary. A head station answers `/rows` with rows alone (no logits) and
//! `/logits` with its slice's logits plus the rows of its top-scoring ids, so that the token the
//! coordinator picks is almost always embedded without another round trip.
//!
//! | bytes            | field                                                         |
//! |------------------|---------------------------------------------------------------|
//! | 0..4             | magic `KNRW`                                                  |
//! | 4                | version, 1                                                    |
//! | 5..8             | reserved, 0                                                   |
//! | 8..12            | logits m (u32; 0 in an answer of rows alone)                  |
//! | 12..16           | rows n (u32)                                                  |
//! | 16..20           | bytes per row b (u32, ≥ 1)                                    |
//! | 20..20+4m        | the logits (f32)                                              |
//! | then 4n          | the rows' token ids (u32)                                     |
//! | then n·b         | the rows, as the file stores them (the embedding's own dtype) |
//! | last 4           | CRC-32 (IEEE) of every byte before it                         |
//!
//! Rows travel as the file's bytes, not as floats: the coordinator embeds them exactly as a
//! whole model embeds its own table, bit for bit.

const MAGIC: &[u8; 4] = b"KNRW";
const VERSION: u8 = 1;
/// Bytes before the logits.
pub const HEADER_BYTES: usize = 20;
const CHECKSUM_BYTES: usize = 4;

/// Logits and rows, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct RowsMessage {
    pub logits: Vec<f32>,
    pub ids: Vec<u32>,
    pub row_bytes: usize,
    /// `ids.len() · row_bytes` bytes, row `i` for `ids[i]`.
    pub rows: Vec<u8>,
}

impl RowsMessage {
    /// `(id, row)` pairs in order.
    pub fn rows(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.ids
            .iter()
            .copied()
            .zip(self.rows.chunks_exact(self.row_bytes.max(1)))
    }
}

/// What a reader accepts: the most logits and rows, and the one row size it expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_logits: usize,
    pub max_rows: usize,
    pub row_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowsError {
    #[error("rows: {got} bytes are fewer than a header and checksum ({need})")]
    TooShort { got: usize, need: usize },
    #[error("rows: bad magic (not a KNRW message)")]
    BadMagic,
    #[error("rows: version {0} is not supported (this build reads 1)")]
    Version(u8),
    #[error("rows: reserved bytes are not zero")]
    Reserved,
    #[error("rows: {got} {what} are more than the {max} taken here")]
    TooMany {
        what: &'static str,
        got: u64,
        max: usize,
    },
    #[error("rows: rows of {got} bytes, expected {want}")]
    RowBytes { got: u64, want: usize },
    #[error("rows: the header promises {expected} bytes, the message has {got}")]
    Length { expected: u128, got: usize },
    #[error("rows: checksum {got:#010x} does not match the contents ({want:#010x})")]
    Checksum { want: u32, got: u32 },
}

/// The message for `logits` and `rows` (`(id, row)` pairs, each row `row_bytes` long).
pub fn encode<'r>(
    logits: &[f32],
    rows: impl ExactSizeIterator<Item = (u32, &'r [u8])> + Clone,
    row_bytes: usize,
) -> Result<Vec<u8>, RowsError> {
    let count = |what, n: usize| {
        u32::try_from(n).map_err(|_| RowsError::TooMany {
            what,
            got: n as u64,
            max: u32::MAX as usize,
        })
    };
    let (m, n, b) = (
        count("logits", logits.len())?,
        count("rows", rows.len())?,
        count("bytes per row", row_bytes)?,
    );
    if b == 0 {
        return Err(RowsError::RowBytes { got: 0, want: 1 });
    }
    if let Some((_, row)) = rows.clone().find(|(_, r)| r.len() != row_bytes) {
        return Err(RowsError::RowBytes {
            got: row.len() as u64,
            want: row_bytes,
        });
    }
    let len = HEADER_BYTES + logits.len() * 4 + rows.len() * (4 + row_bytes) + CHECKSUM_BYTES;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, 0, 0, 0]);
    for v in [m, n, b] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    logits
        .iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    rows.clone()
        .for_each(|(id, _)| out.extend_from_slice(&id.to_le_bytes()));
    rows.for_each(|(_, row)| out.extend_from_slice(row));
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Reads a message, refusing it before allocating when it holds more than `limits` allow.
pub fn decode(bytes: &[u8], limits: Limits) -> Result<RowsMessage, RowsError> {
    let need = HEADER_BYTES + CHECKSUM_BYTES;
    if bytes.len() < need {
        return Err(RowsError::TooShort {
            got: bytes.len(),
            need,
        });
    }
    if &bytes[..4] != MAGIC {
        return Err(RowsError::BadMagic);
    }
    if bytes[4] != VERSION {
        return Err(RowsError::Version(bytes[4]));
    }
    if bytes[5..8] != [0, 0, 0] {
        return Err(RowsError::Reserved);
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let (m, n, b) = (u32_at(8), u32_at(12), u32_at(16));
    let capped = |what, got: u32, max: usize| match got as usize <= max {
        true => Ok(got as usize),
        false => Err(RowsError::TooMany {
            what,
            got: u64::from(got),
            max,
        }),
    };
    let m = capped("logits", m, limits.max_logits)?;
    let n = capped("rows", n, limits.max_rows)?;
    if b as usize != limits.row_bytes {
        return Err(RowsError::RowBytes {
            got: u64::from(b),
            want: limits.row_bytes,
        });
    }
    // In u128: three u32 counts cannot overflow it.
    let expected = need as u128 + 4 * m as u128 + n as u128 * (4 + u128::from(b));
    if bytes.len() as u128 != expected {
        return Err(RowsError::Length {
            expected,
            got: bytes.len(),
        });
    }
    let (body, tail) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    let want = crc32fast::hash(body);
    let got = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if want != got {
        return Err(RowsError::Checksum { want, got });
    }
    let (logits, rest) = body[HEADER_BYTES..].split_at(4 * m);
    let (ids, rows) = rest.split_at(4 * n);
    let le = |c: &[u8]| [c[0], c[1], c[2], c[3]];
    Ok(RowsMessage {
        logits: logits
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(le(c)))
            .collect(),
        ids: ids
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(le(c)))
            .collect(),
        row_bytes: limits.row_bytes,
        rows: rows.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_logits: 3,
        max_rows: 2,
        row_bytes: 5,
    };

    fn sample() -> Vec<u8> {
        let rows: [(u32, &[u8]); 2] = [(7, &[1, 2, 3, 4, 5]), (40_000, &[9, 8, 7, 6, 5])];
        encode(&[1.5, f32::NEG_INFINITY, -0.0], rows.into_iter(), 5).unwrap()
    }

    #[test]
    fn logits_and_rows_round_trip_bit_for_bit() {
        let bytes = sample();
        assert_eq!(bytes.len(), HEADER_BYTES + 12 + 2 * (4 + 5) + 4);
        let m = decode(&bytes, LIMITS).unwrap();
        let bits: Vec<u32> = m.logits.iter().map(|x| x.to_bits()).collect();
        assert_eq!(
            bits,
            [1.5f32.to_bits(), f32::NEG_INFINITY.to_bits(), 0x8000_0000]
        );
        let rows: Vec<(u32, Vec<u8>)> = m.rows().map(|(i, r)| (i, r.to_vec())).collect();
        assert_eq!(
            rows,
            [(7, vec![1, 2, 3, 4, 5]), (40_000, vec![9, 8, 7, 6, 5])]
        );
        // Rows alone, and nothing at all, are messages too.
        let alone = encode(&[], [(3u32, &[0u8; 5][..])].into_iter(), 5).unwrap();
        let m = decode(&alone, LIMITS).unwrap();
        assert!(m.logits.is_empty());
        assert_eq!(m.ids, [3]);
        let empty = encode(&[], std::iter::empty::<(u32, &[u8])>(), 5).unwrap();
        assert_eq!(decode(&empty, LIMITS).unwrap().ids, Vec::<u32>::new());
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = sample();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                decode(&bad, LIMITS).is_err(),
                "byte {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn each_bad_header_gets_its_error() {
        let good = sample();
        assert_eq!(
            decode(&good[..10], LIMITS),
            Err(RowsError::TooShort { got: 10, need: 24 })
        );
        let with = |i: usize, b: &[u8]| {
            let mut m = good.clone();
            m[i..i + b.len()].copy_from_slice(b);
            // Re-seal, so that the field itself is what gets refused.
            let n = m.len() - 4;
            let crc = crc32fast::hash(&m[..n]);
            m[n..].copy_from_slice(&crc.to_le_bytes());
            m
        };
        assert_eq!(decode(&with(0, b"KNHS"), LIMITS), Err(RowsError::BadMagic));
        assert_eq!(decode(&with(4, &[2]), LIMITS), Err(RowsError::Version(2)));
        assert_eq!(decode(&with(7, &[1]), LIMITS), Err(RowsError::Reserved));
        // Counts past the caps are refused before anything is allocated.
        assert_eq!(
            decode(&with(8, &u32::MAX.to_le_bytes()), LIMITS),
            Err(RowsError::TooMany {
                what: "logits",
                got: u32::MAX as u64,
                max: 3
            })
        );
        assert!(matches!(
            decode(&with(12, &3u32.to_le_bytes()), LIMITS),
            Err(RowsError::TooMany { what: "rows", .. })
        ));
        assert_eq!(
            decode(&with(16, &6u32.to_le_bytes()), LIMITS),
            Err(RowsError::RowBytes { got: 6, want: 5 })
        );
        // One logit fewer than the message carries.
        assert_eq!(
            decode(&with(8, &2u32.to_le_bytes()), LIMITS),
            Err(RowsError::Length {
                expected: good.len() as u128 - 4,
                got: good.len()
            })
        );
        let mut trunc = good.clone();
        trunc.pop();
        assert!(matches!(
            decode(&trunc, LIMITS),
            Err(RowsError::Length { .. })
        ));
        let mut sealed_wrong = good.clone();
        let n = sealed_wrong.len();
        sealed_wrong[n - 1] ^= 1;
        assert!(matches!(
            decode(&sealed_wrong, LIMITS),
            Err(RowsError::Checksum { .. })
        ));
        // Huge counts on a short message: the caps answer, not an allocation.
        let huge = Limits {
            max_logits: usize::MAX,
            max_rows: usize::MAX,
            row_bytes: u32::MAX as usize,
        };
        let mut h = with(8, &u32::MAX.to_le_bytes());
        h[12..20].copy_from_slice(&[0xff; 8]);
        assert!(matches!(decode(&h, huge), Err(RowsError::Length { .. })));
    }

    #[test]
    fn rows_of_the_wrong_size_are_not_encoded() {
        let rows: [(u32, &[u8]); 1] = [(1, &[1, 2, 3])];
        assert_eq!(
            encode(&[], rows.into_iter(), 4),
            Err(RowsError::RowBytes { got: 3, want: 4 })
        );
        assert!(encode(&[], std::iter::empty::<(u32, &[u8])>(), 0).is_err());
    }
}
