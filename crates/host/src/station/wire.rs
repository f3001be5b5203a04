//! Hidden states between stations, as compact little-endian binary:
//!
//! | bytes        | field                                                              |
//! |--------------|--------------------------------------------------------------------|
//! | 0..4         | magic `KNHS`                                                       |
//! | 4            | version, 1                                                         |
//! | 5            | element type: 0 = f32, 1 = f16                                     |
//! | 6..8         | reserved, 0                                                        |
//! | 8..16        | conversation id (u64)                                              |
//! | 16..20       | position of the first row (u32)                                    |
//! | 20..24       | rows n (u32, ≥ 1)                                                  |
//! | 24..28       | row width dim (u32, ≥ 1)                                           |
//! | 28..28+n·dim·e | the rows, position-major (e = 4 or 2 bytes)                      |
//! | last 4       | CRC-32 (IEEE) of every byte before it                              |
//!
//! f32 is exact: a model split across stations computes what one process computes, bit for
//! bit. f16 halves the bytes per hop but rounds the residual stream at every hop, so its output
//! can leave the single-process one; it is there for links where bytes cost more than fidelity.

use half::f16;

const MAGIC: &[u8; 4] = b"KNHS";
const VERSION: u8 = 1;
/// Bytes before the rows.
pub const HEADER_BYTES: usize = 28;
const CHECKSUM_BYTES: usize = 4;

/// How the rows are stored on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F32,
    F16,
}

impl Elem {
    fn bytes(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F16 => 2,
        }
    }
}

/// A batch of hidden states with where it belongs.
#[derive(Debug, Clone, PartialEq)]
pub struct Hidden {
    pub conversation: u64,
    /// Position of the first row in the conversation.
    pub pos: u32,
    pub dim: u32,
    /// `n · dim` values, position-major.
    pub values: Vec<f32>,
}

impl Hidden {
    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.values.len() / self.dim.max(1) as usize
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("hidden states: {got} bytes are fewer than a header and checksum ({need})")]
    TooShort { got: usize, need: usize },
    #[error("hidden states: bad magic (not a KNHS message)")]
    BadMagic,
    #[error("hidden states: version {0} is not supported (this build reads 1)")]
    Version(u8),
    #[error("hidden states: element type {0} is unknown (0 = f32, 1 = f16)")]
    ElemType(u8),
    #[error("hidden states: reserved bytes are not zero")]
    Reserved,
    #[error("hidden states: {rows} rows of width {dim}: both must be at least 1")]
    EmptyShape { rows: u32, dim: u32 },
    #[error("hidden states: {rows} × {dim} values are more than the {max} this station takes")]
    TooLarge { rows: u32, dim: u32, max: usize },
    #[error("hidden states: the header promises {expected} bytes, the message has {got}")]
    Length { expected: usize, got: usize },
    #[error("hidden states: checksum {got:#010x} does not match the contents ({want:#010x})")]
    Checksum { want: u32, got: u32 },
    #[error("hidden states: {values} values are not whole rows of {dim}")]
    Shape { values: usize, dim: u32 },
}

/// The message for `h`, its rows stored as `elem`.
pub fn encode(h: &Hidden, elem: Elem) -> Result<Vec<u8>, WireError> {
    let dim = h.dim as usize;
    if dim == 0 || h.values.is_empty() || !h.values.len().is_multiple_of(dim) {
        return Err(WireError::Shape {
            values: h.values.len(),
            dim: h.dim,
        });
    }
    let rows = u32::try_from(h.values.len() / dim).map_err(|_| WireError::TooLarge {
        rows: u32::MAX,
        dim: h.dim,
        max: u32::MAX as usize,
    })?;
    let mut out = Vec::with_capacity(HEADER_BYTES + h.values.len() * elem.bytes() + CHECKSUM_BYTES);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(match elem {
        Elem::F32 => 0,
        Elem::F16 => 1,
    });
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&h.conversation.to_le_bytes());
    out.extend_from_slice(&h.pos.to_le_bytes());
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(&h.dim.to_le_bytes());
    match elem {
        Elem::F32 => h
            .values
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        Elem::F16 => h
            .values
            .iter()
            .for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The element type a message's rows are stored in (its header checked no further).
pub fn elem_of(bytes: &[u8]) -> Result<Elem, WireError> {
    match bytes.get(5) {
        None => Err(WireError::TooShort {
            got: bytes.len(),
            need: HEADER_BYTES + CHECKSUM_BYTES,
        }),
        Some(0) => Ok(Elem::F32),
        Some(1) => Ok(Elem::F16),
        Some(&other) => Err(WireError::ElemType(other)),
    }
}

/// Reads a message, refusing it before allocating when it holds more than `max_values` values
/// (a station passes its widest batch times its width).
pub fn decode(bytes: &[u8], max_values: usize) -> Result<Hidden, WireError> {
    let need = HEADER_BYTES + CHECKSUM_BYTES;
    if bytes.len() < need {
        return Err(WireError::TooShort {
            got: bytes.len(),
            need,
        });
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    if &bytes[..4] != MAGIC {
        return Err(WireError::BadMagic);
    }
    if bytes[4] != VERSION {
        return Err(WireError::Version(bytes[4]));
    }
    let elem = match bytes[5] {
        0 => Elem::F32,
        1 => Elem::F16,
        other => return Err(WireError::ElemType(other)),
    };
    if bytes[6..8] != [0, 0] {
        return Err(WireError::Reserved);
    }
    let conversation = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let (pos, rows, dim) = (u32_at(16), u32_at(20), u32_at(24));
    if rows == 0 || dim == 0 {
        return Err(WireError::EmptyShape { rows, dim });
    }
    let values = (rows as usize)
        .checked_mul(dim as usize)
        .filter(|&v| v <= max_values)
        .ok_or(WireError::TooLarge {
            rows,
            dim,
            max: max_values,
        })?;
    let expected = values
        .checked_mul(elem.bytes())
        .and_then(|b| b.checked_add(need))
        .ok_or(WireError::TooLarge {
            rows,
            dim,
            max: max_values,
        })?;
    if bytes.len() != expected {
        return Err(WireError::Length {
            expected,
            got: bytes.len(),
        });
    }
    let (body, tail) = bytes.split_at(expected - CHECKSUM_BYTES);
    let (want, got) = (
        crc32fast::hash(body),
        u32::from_le_bytes(tail.try_into().unwrap()),
    );
    if want != got {
        return Err(WireError::Checksum { want, got });
    }
    let payload = &body[HEADER_BYTES..];
    let values = match elem {
        Elem::F32 => payload
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        Elem::F16 => payload
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes(c.try_into().unwrap()).to_f32())
            .collect(),
    };
    Ok(Hidden {
        conversation,
        pos,
        dim,
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Hidden {
        Hidden {
            conversation: 0x0123_4567_89ab_cdef,
            pos: 17,
            dim: 4,
            values: vec![1.5, -2.25, 1e-8, f32::MAX, 0.0, -0.0, 3.0, 7.75],
        }
    }

    #[test]
    fn f32_round_trips_bit_for_bit() {
        let h = sample();
        let bytes = encode(&h, Elem::F32).unwrap();
        assert_eq!(bytes.len(), HEADER_BYTES + 8 * 4 + 4);
        let back = decode(&bytes, 8).unwrap();
        assert_eq!(back.rows(), 2);
        assert_eq!(back.conversation, h.conversation);
        assert_eq!(back.pos, 17);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.values), bits(&h.values));
    }

    #[test]
    fn f16_halves_the_rows_and_rounds_them() {
        let h = sample();
        let bytes = encode(&h, Elem::F16).unwrap();
        assert_eq!(bytes.len(), HEADER_BYTES + 8 * 2 + 4);
        let back = decode(&bytes, 8).unwrap();
        assert_eq!(back.values[0], 1.5);
        assert_eq!(
            back.values[3],
            f32::INFINITY,
            "f32::MAX is past f16's range"
        );
        assert_eq!(back.values[7], 7.75);
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = encode(&sample(), Elem::F32).unwrap();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                decode(&bad, 1 << 20).is_err(),
                "byte {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn each_bad_header_gets_its_error() {
        let good = encode(&sample(), Elem::F32).unwrap();
        assert_eq!(
            decode(&good[..10], 8),
            Err(WireError::TooShort { got: 10, need: 32 })
        );
        let with = |i: usize, b: u8| {
            let mut m = good.clone();
            m[i] = b;
            // Re-seal, so that the field itself is what gets refused.
            let n = m.len() - 4;
            let crc = crc32fast::hash(&m[..n]);
            m[n..].copy_from_slice(&crc.to_le_bytes());
            m
        };
        assert_eq!(decode(&with(0, b'X'), 8), Err(WireError::BadMagic));
        assert_eq!(decode(&with(4, 2), 8), Err(WireError::Version(2)));
        assert_eq!(decode(&with(5, 7), 8), Err(WireError::ElemType(7)));
        assert_eq!(decode(&with(6, 1), 8), Err(WireError::Reserved));
        assert_eq!(
            decode(&with(20, 0), 8),
            Err(WireError::EmptyShape { rows: 0, dim: 4 })
        );
        // One row more than the message carries.
        assert_eq!(
            decode(&with(20, 3), 64),
            Err(WireError::Length {
                expected: 28 + 48 + 4,
                got: good.len()
            })
        );
        // The cap is checked before anything is allocated.
        assert!(matches!(decode(&good, 7), Err(WireError::TooLarge { .. })));
        let mut huge = with(20, 0xff);
        huge[21..24].copy_from_slice(&[0xff; 3]);
        huge[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(&huge, usize::MAX),
            Err(WireError::TooLarge { .. })
        ));
        let mut trunc = good.clone();
        trunc.pop();
        assert!(matches!(decode(&trunc, 8), Err(WireError::Length { .. })));
    }

    #[test]
    fn ragged_or_empty_batches_are_not_encoded() {
        let mut h = sample();
        h.values.pop();
        assert!(matches!(
            encode(&h, Elem::F32),
            Err(WireError::Shape { values: 7, dim: 4 })
        ));
        h.values.clear();
        assert!(encode(&h, Elem::F32).is_err());
        h.dim = 0;
        assert!(encode(&h, Elem::F32).is_err());
    }
}
