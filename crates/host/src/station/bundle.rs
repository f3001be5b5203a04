//! Several conversations' messages in one hop: a layer station's step carries every active
//! conversation's hidden states at once (one message per conversation, [`super::wire`]), and a
//! head shard answers each of them in one reply. A bundle frames the messages:
//!
//! | bytes          | field                                                           |
//! |----------------|-----------------------------------------------------------------|
//! | 0..4           | magic: `KNHM` (hidden states) or `KNRM` (head answers)          |
//! | 4              | version, 1                                                      |
//! | 5..8           | reserved, 0                                                     |
//! | 8..12          | parts n (u32, ≥ 1)                                              |
//! | per part       | flags (u8, below), length (u32), bytes                          |
//! | last 4         | CRC-32 (IEEE) of every byte before it                           |
//!
//! A part's flags: bit 0, it wants logits; bit 1, every one of them (its pick reads them all,
//! [`EVERY_LOGIT`]); bit 2, its pick samples from candidates and the level sums
//! ([`WITH_SUMS`]): the part's bytes then start with what the head shards need for them —
//! the temperature (f32), n (u32) and the n ids whose logits the pick's stages change (u32
//! each, at most [`MAX_WATCHED`]), r (u32) and the r ranges of ids the stages remove, left
//! out of the sums (start and end, u32 each, in order, at most [`MAX_RANGES`]) — which layer
//! stations carry along unread. A temperature of 0: the pick does not sample (no level sums),
//! but the block is there for bit 3, [`WITH_HEALTH`]: the head shards answer the health
//! monitor's sums too, the ranges' tokens summed as masked (`engine::health::HealthSums`); bit
//! 3 comes only with bit 2. Bit 4, [`EVERY_ROW`] (with bit 0): the head shards answer every
//! position of the part, one answer each, not only its last — a draft's verify pass. Bit 5,
//! [`REWIND`]: the layer stations hold positions of the conversation past the part's first (a
//! rejected draft's) and drop them before running it. Each part keeps its own checksum; the
//! bundle's covers the framing (a flipped flag).

/// Hidden states of several conversations (parts are `KNHS` messages).
pub const HIDDEN: [u8; 4] = *b"KNHM";
/// A head shard's answers to a `KNHM` bundle, one per part that wants logits, in order (parts
/// are `KNRW` rows messages).
pub const ANSWERS: [u8; 4] = *b"KNRM";
const VERSION: u8 = 1;
const HEADER_BYTES: usize = 12;
const PART_BYTES: usize = 5;
const CHECKSUM_BYTES: usize = 4;
/// Flag bit: the head shards compute this part's logits (the last position's).
pub const WANTS_LOGITS: u8 = 1;
/// Flag bit: the head shards answer every logit of this part, not candidates (its pick reads
/// them all: MOA, the health monitor).
pub const EVERY_LOGIT: u8 = 2;
/// Flag bit: the head shards answer this part's candidates with their level sums at the
/// temperature its bytes start with, and the logits of the ids listed after it.
pub const WITH_SUMS: u8 = 4;
/// Flag bit (with [`WITH_SUMS`]): the head shards answer the health monitor's sums of this
/// part's logits too.
pub const WITH_HEALTH: u8 = 8;
/// Flag bit (with [`WANTS_LOGITS`]): the head shards answer each position of this part, in
/// order, each as the flags and sums block ask (a draft's verify pass: the pick walks its rows).
pub const EVERY_ROW: u8 = 16;
/// Flag bit: the layer stations hold positions of this conversation past the part's first (a
/// rejected draft's): they drop them before running the part.
pub const REWIND: u8 = 32;
/// The most ids a part's sums block names (a penalty's history, at most).
pub const MAX_WATCHED: usize = 1 << 12;
/// The most ranges of removed ids a part's sums block names.
pub const MAX_RANGES: usize = 1 << 12;

/// What a [`WITH_SUMS`] part asks of the head shards.
#[derive(Debug, Clone, PartialEq)]
pub struct SumsAsk {
    pub temperature: f32,
    pub watched: Vec<u32>,
    /// `[start, end)` ranges of ids left out of the sums, in order.
    pub excluded: Vec<(u32, u32)>,
    /// The health monitor's sums are asked too ([`WITH_HEALTH`]: a flag, not in the block).
    pub health: bool,
}

impl SumsAsk {
    /// The block a part's bytes start with.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 4 * self.watched.len());
        out.extend_from_slice(&self.temperature.to_le_bytes());
        out.extend_from_slice(&(self.watched.len() as u32).to_le_bytes());
        for id in &self.watched {
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.extend_from_slice(&(self.excluded.len() as u32).to_le_bytes());
        for &(start, end) in &self.excluded {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&end.to_le_bytes());
        }
        out
    }

    /// The flags the block rides under and the block, as hex: how an `/again` body names a
    /// part's new sums.
    pub fn to_hex(&self) -> String {
        let flags = WITH_SUMS | if self.health { WITH_HEALTH } else { 0 };
        let bytes = [&[flags][..], &self.encode()].concat();
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// [`SumsAsk::to_hex`] read back, checked as a part's block is (and no longer than the
    /// longest block).
    pub fn from_hex(hex: &str) -> Result<SumsAsk, BundleError> {
        let most = 2 * (1 + 12 + 4 * MAX_WATCHED + 8 * MAX_RANGES);
        if !hex.len().is_multiple_of(2) || hex.len() > most {
            return Err(BundleError::SumsBlock);
        }
        let bytes = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()
            .ok_or(BundleError::SumsBlock)?;
        let (&flags, block) = bytes.split_first().ok_or(BundleError::SumsBlock)?;
        if flags & !(WITH_SUMS | WITH_HEALTH) != 0 || flags & WITH_SUMS == 0 {
            return Err(BundleError::SumsBlock);
        }
        match SumsAsk::split(flags, block)? {
            (Some(s), []) => Ok(s),
            _ => Err(BundleError::SumsBlock),
        }
    }

    /// A part's sums block (when its flags say it has one) and the message after it.
    pub fn split(flags: u8, bytes: &[u8]) -> Result<(Option<SumsAsk>, &[u8]), BundleError> {
        if flags & WITH_SUMS == 0 {
            return Ok((None, bytes));
        }
        let word = |i: usize| -> Result<[u8; 4], BundleError> {
            let b = bytes.get(i..i + 4).ok_or(BundleError::SumsBlock)?;
            Ok([b[0], b[1], b[2], b[3]])
        };
        let temperature = f32::from_le_bytes(word(0)?);
        let n = u32::from_le_bytes(word(4)?) as usize;
        if !(temperature.is_finite() && temperature >= 0.0) || n > MAX_WATCHED {
            return Err(BundleError::SumsBlock);
        }
        let watched = (0..n)
            .map(|i| word(8 + 4 * i).map(u32::from_le_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        let at = 8 + 4 * n;
        let r = u32::from_le_bytes(word(at)?) as usize;
        if r > MAX_RANGES {
            return Err(BundleError::SumsBlock);
        }
        let mut excluded = Vec::with_capacity(r);
        for i in 0..r {
            let start = u32::from_le_bytes(word(at + 4 + 8 * i)?);
            let end = u32::from_le_bytes(word(at + 8 + 8 * i)?);
            // In order and not empty: a shard walks them once.
            if start >= end || excluded.last().is_some_and(|&(_, e)| start < e) {
                return Err(BundleError::SumsBlock);
            }
            excluded.push((start, end));
        }
        Ok((
            Some(SumsAsk {
                temperature,
                watched,
                excluded,
                health: flags & WITH_HEALTH != 0,
            }),
            &bytes[at + 4 + 8 * r..],
        ))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("bundle: {got} bytes are fewer than a header and checksum ({need})")]
    TooShort { got: usize, need: usize },
    #[error("bundle: magic {got:?}, expected {want:?}")]
    BadMagic { got: [u8; 4], want: [u8; 4] },
    #[error("bundle: version {0} is not supported (this build reads 1)")]
    Version(u8),
    #[error("bundle: reserved bytes or flag bits are not zero")]
    Reserved,
    #[error("bundle: {got} parts, at most {max} and at least 1")]
    Parts { got: u32, max: usize },
    #[error("bundle: part {part} runs past the end")]
    Truncated { part: usize },
    #[error("bundle: a part's sums block is cut short, or names a temperature that is not ≥ 0, more than {MAX_WATCHED} ids or {MAX_RANGES} ranges, or ranges out of order")]
    SumsBlock,
    #[error("bundle: {0} bytes after the last part")]
    Trailing(usize),
    #[error("bundle: checksum {got:#010x} does not match the contents ({want:#010x})")]
    Checksum { want: u32, got: u32 },
}

/// Whether `bytes` start as a bundle of kind `magic` (else a single message).
pub fn is(bytes: &[u8], magic: [u8; 4]) -> bool {
    bytes.get(..4) == Some(&magic[..])
}

/// Frames `parts` (flags, message) under `magic`.
pub fn encode<'a>(magic: [u8; 4], parts: impl IntoIterator<Item = (u8, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&magic);
    out.extend_from_slice(&[VERSION, 0, 0, 0]);
    out.extend_from_slice(&[0; 4]);
    let mut n = 0u32;
    for (flags, bytes) in parts {
        out.push(flags);
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
        n += 1;
    }
    out[8..12].copy_from_slice(&n.to_le_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The parts of a bundle of kind `magic` (each its flags and bytes, borrowed), refusing more
/// than `max_parts` before reading any.
pub fn decode(
    bytes: &[u8],
    magic: [u8; 4],
    max_parts: usize,
) -> Result<Vec<(u8, &[u8])>, BundleError> {
    let need = HEADER_BYTES + CHECKSUM_BYTES;
    if bytes.len() < need {
        return Err(BundleError::TooShort {
            got: bytes.len(),
            need,
        });
    }
    let got: [u8; 4] = bytes[..4].try_into().unwrap();
    if got != magic {
        return Err(BundleError::BadMagic { got, want: magic });
    }
    if bytes[4] != VERSION {
        return Err(BundleError::Version(bytes[4]));
    }
    if bytes[5..8] != [0, 0, 0] {
        return Err(BundleError::Reserved);
    }
    let (body, tail) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    let (want, sum) = (
        crc32fast::hash(body),
        u32::from_le_bytes(tail.try_into().unwrap()),
    );
    if want != sum {
        return Err(BundleError::Checksum { want, got: sum });
    }
    let n = u32::from_le_bytes(body[8..12].try_into().unwrap());
    if n == 0 || n as usize > max_parts {
        return Err(BundleError::Parts {
            got: n,
            max: max_parts,
        });
    }
    let mut parts = Vec::with_capacity(n as usize);
    let mut at = HEADER_BYTES;
    for part in 0..n as usize {
        let head = body
            .get(at..at + PART_BYTES)
            .ok_or(BundleError::Truncated { part })?;
        let flags = head[0];
        let health_alone = flags & WITH_HEALTH != 0 && flags & WITH_SUMS == 0;
        let rows_alone = flags & EVERY_ROW != 0 && flags & WANTS_LOGITS == 0;
        let known = WANTS_LOGITS | EVERY_LOGIT | WITH_SUMS | WITH_HEALTH | EVERY_ROW | REWIND;
        if flags & !known != 0 || health_alone || rows_alone {
            return Err(BundleError::Reserved);
        }
        let len = u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize;
        let start = at + PART_BYTES;
        let part_bytes = start
            .checked_add(len)
            .and_then(|end| body.get(start..end))
            .ok_or(BundleError::Truncated { part })?;
        parts.push((flags, part_bytes));
        at = start + len;
    }
    if at != body.len() {
        return Err(BundleError::Trailing(body.len() - at));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        encode(
            HIDDEN,
            [
                (WANTS_LOGITS, &b"first"[..]),
                (0, &b""[..]),
                (0, &b"third!"[..]),
            ],
        )
    }

    #[test]
    fn a_sums_block_round_trips_and_bad_ones_are_refused() {
        let ask = SumsAsk {
            temperature: 0.7,
            watched: vec![3, 70_000],
            excluded: vec![(0, 2), (5, 9)],
            health: false,
        };
        let mut bytes = ask.encode();
        bytes.extend_from_slice(b"KNHS...");
        let (got, rest) = SumsAsk::split(WITH_SUMS, &bytes).unwrap();
        assert_eq!((got, rest), (Some(ask.clone()), &b"KNHS..."[..]));
        // The health flag is the part's, not the block's.
        let (got, _) = SumsAsk::split(WITH_SUMS | WITH_HEALTH, &bytes).unwrap();
        assert!(got.unwrap().health);
        assert_eq!(SumsAsk::split(0, &bytes).unwrap(), (None, &bytes[..]));
        for cut in [0, 4, 7, 15, 19, 27] {
            let e = SumsAsk::split(WITH_SUMS, &bytes[..cut]);
            assert_eq!(e, Err(BundleError::SumsBlock), "cut at {cut}");
        }
        // 0 is a pick that does not sample (the block carries the health sums' ranges).
        for t in [-1.0f32, f32::NAN, f32::INFINITY] {
            let mut bad = bytes.clone();
            bad[..4].copy_from_slice(&t.to_le_bytes());
            assert_eq!(SumsAsk::split(WITH_SUMS, &bad), Err(BundleError::SumsBlock));
        }
        let mut many = bytes.clone();
        many[4..8].copy_from_slice(&(MAX_WATCHED as u32 + 1).to_le_bytes());
        assert_eq!(
            SumsAsk::split(WITH_SUMS, &many),
            Err(BundleError::SumsBlock)
        );
        // Ranges empty, or out of order.
        for (at, v) in [(24, 0u32), (28, 1)] {
            let mut bad = bytes.clone();
            bad[at..at + 4].copy_from_slice(&v.to_le_bytes());
            let e = SumsAsk::split(WITH_SUMS, &bad);
            assert_eq!(e, Err(BundleError::SumsBlock), "{at}");
        }
        // As hex (an `/again` body's new sums), the health flag with it.
        let healthy = SumsAsk {
            health: true,
            ..ask.clone()
        };
        for a in [&ask, &healthy] {
            assert_eq!(SumsAsk::from_hex(&a.to_hex()).as_ref(), Ok(a));
        }
        let hex = ask.to_hex();
        let unknown_flag = format!("4c{}", &hex[2..]);
        for bad in [
            "",
            "zz",
            "040",
            &hex[..hex.len() - 2],
            &format!("{hex}00"),
            &unknown_flag,
        ] {
            assert_eq!(SumsAsk::from_hex(bad), Err(BundleError::SumsBlock), "{bad}");
        }
        assert_eq!(
            SumsAsk::from_hex(&"0".repeat(1 << 20)),
            Err(BundleError::SumsBlock)
        );
    }

    #[test]
    fn parts_round_trip_with_their_flags() {
        let bytes = sample();
        assert!(is(&bytes, HIDDEN) && !is(&bytes, ANSWERS) && !is(b"KN", HIDDEN));
        let parts = decode(&bytes, HIDDEN, 3).unwrap();
        assert_eq!(
            parts,
            [
                (WANTS_LOGITS, &b"first"[..]),
                (0, &b""[..]),
                (0, &b"third!"[..])
            ]
        );
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = sample();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                decode(&bad, HIDDEN, 8).is_err(),
                "byte {i} flipped was accepted"
            );
        }
    }

    #[test]
    fn each_bad_frame_gets_its_error() {
        let good = sample();
        let reseal = |mut m: Vec<u8>| {
            let n = m.len() - 4;
            let crc = crc32fast::hash(&m[..n]);
            m[n..].copy_from_slice(&crc.to_le_bytes());
            m
        };
        let with = |i: usize, b: u8| {
            let mut m = good.clone();
            m[i] = b;
            reseal(m)
        };
        assert!(matches!(
            decode(&good[..8], HIDDEN, 8),
            Err(BundleError::TooShort { .. })
        ));
        assert!(matches!(
            decode(&good, ANSWERS, 8),
            Err(BundleError::BadMagic { .. })
        ));
        assert_eq!(decode(&with(4, 2), HIDDEN, 8), Err(BundleError::Version(2)));
        assert_eq!(decode(&with(6, 1), HIDDEN, 8), Err(BundleError::Reserved));
        // Flag bits past the six known; "with health" without "with sums", "every row" without
        // "wants logits".
        assert_eq!(decode(&with(12, 64), HIDDEN, 8), Err(BundleError::Reserved));
        assert_eq!(decode(&with(12, 8), HIDDEN, 8), Err(BundleError::Reserved));
        assert_eq!(decode(&with(12, 16), HIDDEN, 8), Err(BundleError::Reserved));
        assert_eq!(decode(&with(12, 3), HIDDEN, 8).unwrap()[0].0, 3);
        assert_eq!(decode(&with(12, 49), HIDDEN, 8).unwrap()[0].0, 49);
        // The count is capped before any part is read; zero parts are refused.
        assert_eq!(
            decode(&good, HIDDEN, 2),
            Err(BundleError::Parts { got: 3, max: 2 })
        );
        assert!(matches!(
            decode(&with(8, 0), HIDDEN, 8),
            Err(BundleError::Parts { got: 0, .. })
        ));
        // A length past the end, and bytes after the last part.
        let mut long = good.clone();
        long[13..17].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&reseal(long), HIDDEN, 8),
            Err(BundleError::Truncated { part: 0 })
        );
        assert_eq!(
            decode(&with(8, 2), HIDDEN, 8),
            Err(BundleError::Trailing(11))
        );
    }
}
