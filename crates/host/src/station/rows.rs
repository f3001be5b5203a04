//! Embedding rows from a head station to the coordinator, and the logits they ride with, as
//! compact little-endian binary. A head station answers `/rows` with rows alone (no logits) and
//! `/logits` with its slice's logits — every one, or its largest as candidates (ids, values and
//! the largest of the others: what a pick needs, [`engine::pipeline::PartialPick`]) — plus the
//! rows of its top-scoring ids, so that the token the coordinator picks is almost always
//! embedded without another round trip.
//!
//! | bytes            | field                                                         |
//! |------------------|---------------------------------------------------------------|
//! | 0..4             | magic `KNRW`                                                  |
//! | 4                | version, 2                                                    |
//! | 5                | kind: 0 every logit of the slice, 1 candidates, 2 candidates  |
//! |                  | with level sums                                               |
//! | 6                | level sums L (kind 2, at most `LEVELS`; else 0)               |
//! | 7                | 1 when the health sums follow the rows, else 0                |
//! | 8..12            | logits m (u32; 0 in an answer of rows alone)                  |
//! | 12..16           | rows n (u32)                                                  |
//! | 16..20           | bytes per row b (u32, ≥ 1)                                    |
//! | candidates: 4    | the largest logit not sent (f32; −inf when none is left)      |
//! | candidates: 4m   | the logits' token ids (u32)                                   |
//! | kind 2: 8        | the sums' top level (i64)                                     |
//! | kind 2: 2        | the levels' bytes s (u16, at most 15L)                        |
//! | kind 2: s        | each level's mantissa sum and count as LEB128 varints (u64,   |
//! |                  | u32), top first: ~7 bytes a level where fixed widths take 12  |
//! | kind 2: 4        | watched values w (u32, at most `MAX_WATCHED`)                 |
//! | kind 2: 4w       | the logits (f32) of the watched ids the ask named in this     |
//! |                  | slice, in the ask's order (their ids are the asker's: not sent) |
//! | 4m               | the logits (f32)                                              |
//! | then 4n          | the rows' token ids (u32)                                     |
//! | then n·b         | the rows, as the file stores them (the embedding's own dtype) |
//! | health: h        | the health monitor's sums, as varints (below)                 |
//! | health: 2        | h (u16, at most `MAX_HEALTH_BYTES`)                           |
//! | last 4           | CRC-32 (IEEE) of every byte before it                         |
//!
//! The health sums (`engine::health::HealthSums`, a head shard's slice of the vocabulary): a
//! byte, 1 when a logit is finite (then its top level follows, zigzag), the non-finite count,
//! the logits read, the levels' count (at most `HEALTH_LEVELS`), and per level its mantissas'
//! sum, mantissas × fractions and masked mantissas: every number an LEB128 varint.
//!
//! Level sums ([`engine::pipeline::LevelSums`]) let a sampled pick add up the tokens it was not
//! sent, exactly; the watched ids' logits (the tokens the pick's stages change) travel as values
//! alone, four bytes each, since the asker holds the ids ([`Candidates::watch`]). Rows travel as the file's bytes, not as floats: the coordinator embeds them exactly as a
//! whole model embeds its own table, bit for bit.

use std::ops::Range;

use engine::health::{HealthSums, LevelSum, HEALTH_LEVELS};
use engine::pipeline::{LevelSums, LEVELS};

use super::bundle::MAX_WATCHED;

const MAGIC: &[u8; 4] = b"KNRW";
const VERSION: u8 = 2;
/// The most bytes a health block takes (its levels' three varints at most 30 bytes each).
pub const MAX_HEALTH_BYTES: usize = 1024;
/// The most bytes a level's two varints take (a u64's ten and a u32's five).
const LEVEL_BYTES_MAX: usize = 15;
/// Bytes before the logits.
pub const HEADER_BYTES: usize = 20;
const CHECKSUM_BYTES: usize = 4;

/// Logits and rows, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct RowsMessage {
    pub logits: Vec<f32>,
    /// Candidates: the token id of each logit, and the largest logit of the slice not sent
    /// (`None`: `logits` is the whole slice).
    pub candidates: Option<Candidates>,
    pub ids: Vec<u32>,
    pub row_bytes: usize,
    /// `ids.len() · row_bytes` bytes, row `i` for `ids[i]`.
    pub rows: Vec<u8>,
    /// The health monitor's sums of the slice, when the pick asked for them.
    pub health: Option<HealthSums>,
}

/// What makes a logits message candidates: their ids, and a bound on the rest.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidates {
    pub ids: Vec<u32>,
    /// The largest logit not sent; −inf when none is left.
    pub bound: f32,
    /// The slice's level sums at the sampling temperature, when the pick asked for them.
    pub sums: Option<LevelSums>,
    /// With the sums: the logits of the watched ids in the slice, in the ask's order.
    pub watched: Vec<f32>,
}

impl Candidates {
    /// Adds the watched ids' logits (`watched`: the ids the ask named, `slice` this answer's)
    /// to `ids`/`logits` as candidates, those not sent already. `Err(n)` when the answer carries
    /// `n` values for another count of ids in the slice.
    pub fn watch(
        &mut self,
        logits: &mut Vec<f32>,
        watched: &[u32],
        slice: &Range<usize>,
    ) -> Result<(), usize> {
        let values = std::mem::take(&mut self.watched);
        let ids = watched.iter().filter(|&&id| slice.contains(&(id as usize)));
        if ids.clone().count() != values.len() {
            return Err(values.len());
        }
        for (&id, l) in ids.zip(values) {
            if !self.ids.contains(&id) {
                self.ids.push(id);
                logits.push(l);
            }
        }
        Ok(())
    }
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
    #[error("rows: version {0} is not supported (this build reads 2)")]
    Version(u8),
    #[error("rows: reserved bytes are not zero")]
    Reserved,
    #[error("rows: kind {0} is not a kind of logits (0 every logit, 1 candidates, 2 with sums)")]
    Kind(u8),
    #[error("rows: the candidates' bound is NaN")]
    Bound,
    #[error("rows: the level sums are malformed (not {0} pairs of varints filling their bytes)")]
    Levels(usize),
    #[error("rows: the health sums are malformed")]
    Health,
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

/// The message for `logits` (the whole slice) and `rows` (`(id, row)` pairs, each row
/// `row_bytes` long).
pub fn encode<'r>(
    logits: &[f32],
    rows: impl ExactSizeIterator<Item = (u32, &'r [u8])> + Clone,
    row_bytes: usize,
) -> Result<Vec<u8>, RowsError> {
    encode_with(logits, None, None, rows, row_bytes)
}

/// The message for candidates (`values[i]` the logit of `ids[i]`; every other logit of the
/// slice at most `bound`), the slice's level sums with the watched ids' logits if given, and
/// `rows`.
pub fn encode_candidates<'r>(
    ids: &[u32],
    values: &[f32],
    bound: f32,
    sums: Option<(&LevelSums, &[f32])>,
    rows: impl ExactSizeIterator<Item = (u32, &'r [u8])> + Clone,
    row_bytes: usize,
) -> Result<Vec<u8>, RowsError> {
    if ids.len() != values.len() {
        return Err(RowsError::Length {
            expected: ids.len() as u128,
            got: values.len(),
        });
    }
    if bound.is_nan() {
        return Err(RowsError::Bound);
    }
    if let Some((s, w)) = sums {
        if s.levels.len() > LEVELS {
            let got = s.levels.len() as u64;
            let max = LEVELS;
            return Err(RowsError::TooMany {
                what: "levels",
                got,
                max,
            });
        }
        if w.len() > MAX_WATCHED {
            let (got, max) = (w.len() as u64, MAX_WATCHED);
            return Err(RowsError::TooMany {
                what: "watched values",
                got,
                max,
            });
        }
    }
    encode_with(values, Some((ids, bound)), sums, rows, row_bytes)
}

fn encode_with<'r>(
    logits: &[f32],
    candidates: Option<(&[u32], f32)>,
    sums: Option<(&LevelSums, &[f32])>,
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
    let extra = candidates.map_or(0, |(ids, _)| 4 + 4 * ids.len());
    let levels = sums.map_or(0, |s| s.0.levels.len());
    let mut level_bytes = Vec::with_capacity(levels * LEVEL_BYTES_MAX);
    for &(m, n) in sums.map_or(&[][..], |s| &s.0.levels) {
        put_varint(&mut level_bytes, m);
        put_varint(&mut level_bytes, u64::from(n));
    }
    let len = HEADER_BYTES
        + extra
        + sums.map_or(0, |(_, w)| 8 + 2 + level_bytes.len() + 4 + 4 * w.len())
        + logits.len() * 4
        + rows.len() * (4 + row_bytes)
        + CHECKSUM_BYTES;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(MAGIC);
    let kind = match (candidates.is_some(), sums.is_some()) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    };
    out.extend_from_slice(&[VERSION, kind, levels as u8, 0]);
    for v in [m, n, b] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    if let Some((ids, bound)) = candidates {
        out.extend_from_slice(&bound.to_le_bytes());
        ids.iter()
            .for_each(|id| out.extend_from_slice(&id.to_le_bytes()));
        if let Some((s, watched)) = sums {
            out.extend_from_slice(&s.top.to_le_bytes());
            // At most LEVELS · LEVEL_BYTES_MAX = 720 bytes: a u16.
            out.extend_from_slice(&(level_bytes.len() as u16).to_le_bytes());
            out.extend_from_slice(&level_bytes);
            out.extend_from_slice(&(watched.len() as u32).to_le_bytes());
            watched
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
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

/// Appends `v` as an LEB128 varint: seven bits a byte, low first, the high bit set on every
/// byte but the last.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The varint at the start of `bytes` and the bytes after it; `None` when it runs off the end
/// or past 64 bits.
fn get_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        let low = u64::from(b & 0x7f);
        // The tenth byte holds the 64th bit alone.
        if i == 9 && low > 1 {
            return None;
        }
        v |= low << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, &bytes[i + 1..]));
        }
    }
    None
}

/// `n` levels' (mantissa sum, count) varint pairs that fill `bytes` exactly.
fn read_levels(mut bytes: &[u8], n: usize) -> Result<Vec<(u64, u32)>, RowsError> {
    let mut levels = Vec::with_capacity(n);
    for _ in 0..n {
        let (m, rest) = get_varint(bytes).ok_or(RowsError::Levels(n))?;
        let (c, rest) = get_varint(rest).ok_or(RowsError::Levels(n))?;
        levels.push((m, u32::try_from(c).map_err(|_| RowsError::Levels(n))?));
        bytes = rest;
    }
    match bytes.is_empty() {
        true => Ok(levels),
        false => Err(RowsError::Levels(n)),
    }
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
    let (candidates, with_sums) = match bytes[5] {
        0 => (false, false),
        1 => (true, false),
        2 => (true, true),
        k => return Err(RowsError::Kind(k)),
    };
    let levels = bytes[6] as usize;
    if bytes[7] > 1 || (!with_sums && levels != 0) {
        return Err(RowsError::Reserved);
    }
    // The health block sits before the checksum, its length last.
    let health_bytes = match bytes[7] {
        0 => 0,
        _ if bytes.len() < need + 2 => return Err(RowsError::Health),
        _ => {
            let at = bytes.len() - CHECKSUM_BYTES - 2;
            let h = u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
            match h <= MAX_HEALTH_BYTES && h + 2 + need <= bytes.len() {
                true => h + 2,
                false => return Err(RowsError::Health),
            }
        }
    };
    if levels > LEVELS {
        return Err(RowsError::TooMany {
            what: "levels",
            got: levels as u64,
            max: LEVELS,
        });
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
    // The levels' byte count, then the watched values' count after them: each read once the
    // message is known to reach it.
    let reach = |at: u128| match bytes.len() as u128 >= at + CHECKSUM_BYTES as u128 {
        true => Ok(at as usize),
        false => Err(RowsError::Length {
            expected: at + CHECKSUM_BYTES as u128,
            got: bytes.len(),
        }),
    };
    let (s, w) = match with_sums {
        false => (0, 0),
        true => {
            let at = reach(HEADER_BYTES as u128 + 4 + 4 * m as u128 + 8 + 2)? - 2;
            let s = u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
            let s = capped("level bytes", s as u32, levels * LEVEL_BYTES_MAX)?;
            let at = reach(at as u128 + 2 + s as u128 + 4)? - 4;
            (s, capped("watched values", u32_at(at), MAX_WATCHED)?)
        }
    };
    // In u128: three u32 counts cannot overflow it.
    let extra = match candidates {
        true => 4 + 4 * m as u128,
        false => 0,
    } + match with_sums {
        true => 8 + 2 + s as u128 + 4 + 4 * w as u128,
        false => 0,
    };
    let expected = need as u128
        + extra
        + 4 * m as u128
        + n as u128 * (4 + u128::from(b))
        + health_bytes as u128;
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
    let le = |c: &[u8]| [c[0], c[1], c[2], c[3]];
    let u32s = |b: &[u8]| -> Vec<u32> {
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(le(c)))
            .collect()
    };
    let (body, health) = body.split_at(body.len() - health_bytes);
    let health = match health_bytes {
        0 => None,
        _ => Some(read_health(&health[..health.len() - 2])?),
    };
    let mut body = &body[HEADER_BYTES..];
    let mut watched = Vec::new();
    let candidates = match candidates {
        false => None,
        true => {
            let bound = f32::from_le_bytes(le(&body[..4]));
            if bound.is_nan() {
                return Err(RowsError::Bound);
            }
            let (ids, rest) = body[4..].split_at(4 * m);
            body = rest;
            let sums = match with_sums {
                false => None,
                true => {
                    let (block, rest) = body.split_at(8 + 2 + s);
                    let (values, rest) = rest[4..].split_at(4 * w);
                    body = rest;
                    watched = values
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes(le(c)))
                        .collect();
                    let top = i64::from_le_bytes(block[..8].try_into().unwrap_or_default());
                    let levels = read_levels(&block[10..], levels)?;
                    Some(LevelSums { top, levels })
                }
            };
            Some(Candidates {
                ids: u32s(ids),
                bound,
                sums,
                watched,
            })
        }
    };
    let (logits, rest) = body.split_at(4 * m);
    let (ids, rows) = rest.split_at(4 * n);
    Ok(RowsMessage {
        candidates,
        logits: logits
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(le(c)))
            .collect(),
        ids: u32s(ids),
        row_bytes: limits.row_bytes,
        rows: rows.to_vec(),
        health,
    })
}

/// `msg` (an encoded message) with `health` after its rows.
pub fn with_health(mut msg: Vec<u8>, health: &HealthSums) -> Result<Vec<u8>, RowsError> {
    if msg.len() < HEADER_BYTES + CHECKSUM_BYTES || msg[7] != 0 {
        return Err(RowsError::Health);
    }
    let mut block = vec![u8::from(health.top.is_some())];
    if let Some(top) = health.top {
        put_varint(&mut block, ((top << 1) ^ (top >> 63)) as u64);
    }
    put_varint(&mut block, health.nonfinite);
    put_varint(&mut block, health.vocab);
    put_varint(&mut block, health.levels.len() as u64);
    for l in &health.levels {
        put_varint(&mut block, l.mantissas);
        put_varint(&mut block, l.weighted);
        put_varint(&mut block, l.masked);
    }
    if block.len() > MAX_HEALTH_BYTES || health.levels.len() > HEALTH_LEVELS {
        return Err(RowsError::Health);
    }
    msg.truncate(msg.len() - CHECKSUM_BYTES);
    msg[7] = 1;
    msg.extend_from_slice(&block);
    msg.extend_from_slice(&(block.len() as u16).to_le_bytes());
    let crc = crc32fast::hash(&msg);
    msg.extend_from_slice(&crc.to_le_bytes());
    Ok(msg)
}

/// A health block's sums: every varint in place, the levels at most `HEALTH_LEVELS`, nothing
/// left over.
fn read_health(block: &[u8]) -> Result<HealthSums, RowsError> {
    let (&has_top, mut rest) = block.split_first().ok_or(RowsError::Health)?;
    let mut next = || -> Result<u64, RowsError> {
        let (v, r) = get_varint(rest).ok_or(RowsError::Health)?;
        rest = r;
        Ok(v)
    };
    let top = match has_top {
        0 => None,
        1 => {
            let z = next()?;
            Some((z >> 1) as i64 ^ -((z & 1) as i64))
        }
        _ => return Err(RowsError::Health),
    };
    let (nonfinite, vocab, n) = (next()?, next()?, next()?);
    if n as usize > HEALTH_LEVELS || (top.is_none() && n > 0) {
        return Err(RowsError::Health);
    }
    let levels = (0..n)
        .map(|_| {
            Ok(LevelSum {
                mantissas: next()?,
                weighted: next()?,
                masked: next()?,
            })
        })
        .collect::<Result<Vec<_>, RowsError>>()?;
    match rest.is_empty() {
        true => Ok(HealthSums {
            top,
            levels,
            nonfinite,
            vocab,
        }),
        false => Err(RowsError::Health),
    }
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

    /// `b` with its checksum made right again (a bad field that is not a flipped byte).
    fn resealed(mut b: Vec<u8>) -> Vec<u8> {
        let n = b.len() - 4;
        let crc = crc32fast::hash(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn refuses_every_flip(bytes: &[u8]) {
        for i in 0..bytes.len() {
            let mut bad = bytes.to_vec();
            bad[i] ^= 0x10;
            assert!(
                decode(&bad, LIMITS).is_err(),
                "byte {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn candidates_round_trip_bit_for_bit() {
        let rows: [(u32, &[u8]); 1] = [(7, &[1, 2, 3, 4, 5])];
        let bytes =
            encode_candidates(&[7, 2], &[3.5, -0.0], 1.25, None, rows.into_iter(), 5).unwrap();
        assert_eq!(bytes.len(), HEADER_BYTES + 4 + 2 * 8 + (4 + 5) + 4);
        let m = decode(&bytes, LIMITS).unwrap();
        let c = m.candidates.as_ref().unwrap();
        assert_eq!((c.ids.as_slice(), c.bound), (&[7u32, 2][..], 1.25));
        assert_eq!(m.logits[1].to_bits(), 0x8000_0000);
        assert_eq!(m.ids, [7]);
        // None left: the bound is −inf; every flipped byte is refused here too.
        let none = encode_candidates(&[1], &[0.5], f32::NEG_INFINITY, None, std::iter::empty(), 5);
        let none = none.unwrap();
        assert_eq!(
            decode(&none, LIMITS).unwrap().candidates.unwrap().bound,
            f32::NEG_INFINITY
        );
        refuses_every_flip(&bytes);
        // A NaN bound, or ids and values that disagree, are not encoded.
        assert_eq!(
            encode_candidates(&[1], &[0.5], f32::NAN, None, std::iter::empty(), 5),
            Err(RowsError::Bound)
        );
        assert!(encode_candidates(&[1, 2], &[0.5], 0.0, None, std::iter::empty(), 5).is_err());
    }

    #[test]
    fn health_sums_ride_after_the_rows_and_bad_ones_are_refused() {
        let logits = [1.0, 3.0, f32::NAN, -2.0, 0.5, f32::NEG_INFINITY];
        let sums = HealthSums::of(&logits, 10, &[(11, 12)]);
        assert!(sums.top.is_some() && sums.levels.iter().any(|l| l.masked > 0));
        let rows: [(u32, &[u8]); 1] = [(7, &[1, 2, 3, 4, 5])];
        let plain = encode_candidates(&[11], &[3.0], 1.0, None, rows.into_iter(), 5).unwrap();
        let bytes = with_health(plain.clone(), &sums).unwrap();
        let m = decode(&bytes, LIMITS).unwrap();
        assert_eq!(m.health.as_ref(), Some(&sums));
        assert_eq!(
            (m.ids.as_slice(), m.logits.as_slice()),
            (&[7u32][..], &[3.0f32][..])
        );
        refuses_every_flip(&bytes);
        // None finite, and a message that has them already.
        let none = HealthSums::of(&[f32::NAN], 0, &[]);
        let m = decode(&with_health(plain.clone(), &none).unwrap(), LIMITS).unwrap();
        assert_eq!(m.health, Some(none));
        assert_eq!(with_health(bytes.clone(), &sums), Err(RowsError::Health));
        // A block that does not read as health sums, resealed: refused by name.
        let mut bad = bytes.clone();
        let at = bytes.len() - 4 - 2;
        bad[at..at + 2].copy_from_slice(&(MAX_HEALTH_BYTES as u16 + 1).to_le_bytes());
        assert_eq!(decode(&resealed(bad), LIMITS), Err(RowsError::Health));
        assert_eq!(read_health(&[2]), Err(RowsError::Health));
        assert_eq!(read_health(&[0, 0, 1, 1]), Err(RowsError::Health));
        assert_eq!(read_health(&[1, 2, 0, 1, 0, 9]), Err(RowsError::Health));
    }

    #[test]
    fn level_sums_round_trip_and_are_capped() {
        let sums = LevelSums {
            top: -7,
            levels: vec![(1 << 40, 3), (0, 0), (12345, 1)],
        };
        let watched = [0.5, f32::NEG_INFINITY];
        let bytes = encode_candidates(
            &[4],
            &[2.5],
            1.0,
            Some((&sums, &watched)),
            std::iter::empty(),
            5,
        );
        let bytes = bytes.unwrap();
        // Levels as varints: 2^40 in six bytes, 3 in one, 0 and 0 in one each, 12345 in two.
        let level_bytes = 6 + 1 + 1 + 1 + 2 + 1;
        assert_eq!(
            bytes.len(),
            HEADER_BYTES + 4 + 8 + 8 + 2 + level_bytes + 4 + 8 + 4
        );
        let m = decode(&bytes, LIMITS).unwrap();
        let c = m.candidates.clone().unwrap();
        assert_eq!((c.sums, c.watched), (Some(sums.clone()), watched.to_vec()));
        refuses_every_flip(&bytes);
        // The values join the candidates under the ask's ids in this slice (4 is sent already).
        let mut c = m.candidates.unwrap();
        let mut logits = m.logits.clone();
        c.watch(&mut logits, &[900, 7, 4], &(0..10)).unwrap();
        assert_eq!((c.ids, logits), (vec![4, 7], vec![2.5, 0.5]));
        let mut c = decode(&bytes, LIMITS).unwrap().candidates.unwrap();
        assert_eq!(c.watch(&mut vec![2.5], &[7], &(0..10)), Err(2));
        // More watched values than an ask may name: refused when written, and when read.
        let many = vec![0.0; MAX_WATCHED + 1];
        let e = encode_candidates(
            &[4],
            &[2.5],
            1.0,
            Some((&sums, &many)),
            std::iter::empty(),
            5,
        );
        assert!(matches!(
            e,
            Err(RowsError::TooMany {
                what: "watched values",
                ..
            })
        ));
        let mut bad = bytes.clone();
        let at = HEADER_BYTES + 4 + 4 + 8 + 2 + level_bytes;
        bad[at..at + 4].copy_from_slice(&(MAX_WATCHED as u32 + 1).to_le_bytes());
        assert!(matches!(
            decode(&bad, LIMITS),
            Err(RowsError::TooMany {
                what: "watched values",
                ..
            })
        ));
        // Cut short before the count: a length error, not a read past the end.
        let short = [&bytes[..at + 2], &bytes[bytes.len() - 4..]].concat();
        assert!(matches!(
            decode(&short, LIMITS),
            Err(RowsError::Length { .. })
        ));
        // More levels than a pick reads: refused when written, and when read.
        let many = LevelSums {
            top: 0,
            levels: vec![(1, 1); LEVELS + 1],
        };
        let e = encode_candidates(&[4], &[2.5], 1.0, Some((&many, &[])), std::iter::empty(), 5);
        assert!(matches!(e, Err(RowsError::TooMany { what: "levels", .. })));
        let mut bad = bytes.clone();
        bad[6] = LEVELS as u8 + 1;
        assert!(matches!(
            decode(&bad, LIMITS),
            Err(RowsError::TooMany { .. })
        ));
        // Varints that do not make the levels the header names, with a good checksum: refused.
        let mut fewer = bytes.clone();
        fewer[6] = 2;
        assert_eq!(decode(&resealed(fewer), LIMITS), Err(RowsError::Levels(2)));
        let mut more = bytes.clone();
        more[6] = 4;
        assert_eq!(decode(&resealed(more), LIMITS), Err(RowsError::Levels(4)));
        // A count past u32, and a varint past 64 bits.
        let mut level = Vec::new();
        put_varint(&mut level, 1);
        put_varint(&mut level, u64::from(u32::MAX) + 1);
        assert_eq!(read_levels(&level, 1), Err(RowsError::Levels(1)));
        assert_eq!(
            get_varint(&[0xff; 9].iter().chain(&[0x02]).copied().collect::<Vec<_>>()),
            None
        );
        assert_eq!(get_varint(&[0x80]), None);
        for v in [0, 1, 127, 128, 1 << 40, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(get_varint(&b), Some((v, &[][..])));
        }
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = sample();
        refuses_every_flip(&bytes);
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
        assert_eq!(decode(&with(4, &[3]), LIMITS), Err(RowsError::Version(3)));
        assert_eq!(decode(&with(7, &[2]), LIMITS), Err(RowsError::Reserved));
        // A health flag without a health block that fits.
        assert_eq!(decode(&with(7, &[1]), LIMITS), Err(RowsError::Health));
        assert_eq!(decode(&with(5, &[3]), LIMITS), Err(RowsError::Kind(3)));
        // Levels in a message without sums.
        assert_eq!(decode(&with(6, &[1]), LIMITS), Err(RowsError::Reserved));
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
