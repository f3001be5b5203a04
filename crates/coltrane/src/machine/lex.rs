//! The byte lexers inside JSON values: string characters (escapes, `\uXXXX` with surrogate
//! pairs, UTF-8 checked byte by byte) and numbers. Each is a small state stepped one byte at a
//! time; the pushdown frames above them (`step.rs`) decide what a value may be.

/// Where a string is inside an escape or a multi-byte UTF-8 character.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Chars {
    /// Between characters.
    Plain,
    /// After a backslash.
    Escape,
    /// Inside `\uXXXX`, with this many hex digits read.
    Unicode(u8),
    /// `\uD` read: the next digit tells a surrogate (`\uD800`–`\uDFFF`) from a character.
    UnicodeD,
    /// Inside a high surrogate `\uD800`–`\uDBFF`, with this many hex digits read (2 or 3).
    High(u8),
    /// After a high surrogate: the low one (`\uDC00`–`\uDFFF`) that completes the pair, with
    /// this many of its first four bytes (`\`, `u`, `D`, `C`–`F`) read. A surrogate pair is
    /// one character; a lone surrogate is none, and is refused (like a raw UTF-8 surrogate).
    Low(u8),
    /// Inside a UTF-8 character: continuation bytes still needed, and the range the next one
    /// must fall in (to reject overlong forms and surrogates).
    Utf8 { left: u8, lo: u8, hi: u8 },
}

impl Chars {
    /// Steps the string lexer over a byte (not a closing quote). `None`: invalid. The bool says
    /// whether a character was completed.
    pub(super) fn step(self, b: u8) -> Option<(Chars, bool)> {
        match self {
            Chars::Plain => match b {
                b'\\' => Some((Chars::Escape, false)),
                0x00..=0x1f | b'"' => None,
                0x20..=0x7f => Some((Chars::Plain, true)),
                0xc2..=0xdf => Some((
                    Chars::Utf8 {
                        left: 1,
                        lo: 0x80,
                        hi: 0xbf,
                    },
                    false,
                )),
                0xe0 => Some((
                    Chars::Utf8 {
                        left: 2,
                        lo: 0xa0,
                        hi: 0xbf,
                    },
                    false,
                )),
                0xed => Some((
                    Chars::Utf8 {
                        left: 2,
                        lo: 0x80,
                        hi: 0x9f,
                    },
                    false,
                )),
                0xe1..=0xef => Some((
                    Chars::Utf8 {
                        left: 2,
                        lo: 0x80,
                        hi: 0xbf,
                    },
                    false,
                )),
                0xf0 => Some((
                    Chars::Utf8 {
                        left: 3,
                        lo: 0x90,
                        hi: 0xbf,
                    },
                    false,
                )),
                0xf4 => Some((
                    Chars::Utf8 {
                        left: 3,
                        lo: 0x80,
                        hi: 0x8f,
                    },
                    false,
                )),
                0xf1..=0xf3 => Some((
                    Chars::Utf8 {
                        left: 3,
                        lo: 0x80,
                        hi: 0xbf,
                    },
                    false,
                )),
                _ => None,
            },
            Chars::Escape => match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    Some((Chars::Plain, true))
                }
                b'u' => Some((Chars::Unicode(0), false)),
                _ => None,
            },
            Chars::Unicode(n) => {
                if !b.is_ascii_hexdigit() {
                    return None;
                }
                match (n, b) {
                    (3, _) => Some((Chars::Plain, true)),
                    (0, b'd' | b'D') => Some((Chars::UnicodeD, false)),
                    (n, _) => Some((Chars::Unicode(n + 1), false)),
                }
            }
            Chars::UnicodeD => match b {
                b'0'..=b'7' => Some((Chars::Unicode(2), false)),
                b'8' | b'9' | b'a' | b'b' | b'A' | b'B' => Some((Chars::High(2), false)),
                // A low surrogate without a high one.
                _ => None,
            },
            Chars::High(n) => {
                if !b.is_ascii_hexdigit() {
                    return None;
                }
                match n {
                    3 => Some((Chars::Low(0), false)),
                    n => Some((Chars::High(n + 1), false)),
                }
            }
            Chars::Low(k) => match (k, b) {
                (0, b'\\') | (1, b'u') | (2, b'd' | b'D') => Some((Chars::Low(k + 1), false)),
                (3, b'c'..=b'f' | b'C'..=b'F') => Some((Chars::Unicode(2), false)),
                _ => None,
            },
            Chars::Utf8 { left, lo, hi } => {
                if b < lo || b > hi {
                    return None;
                }
                match left {
                    1 => Some((Chars::Plain, true)),
                    l => Some((
                        Chars::Utf8 {
                            left: l - 1,
                            lo: 0x80,
                            hi: 0xbf,
                        },
                        false,
                    )),
                }
            }
        }
    }

    /// Bytes needed to finish the current character.
    pub(super) fn to_finish(self) -> u32 {
        match self {
            Chars::Plain => 0,
            Chars::Escape => 1,
            Chars::Unicode(n) => 4 - n as u32,
            Chars::UnicodeD => 3,
            // The rest of the high surrogate, then `\uDC00`.
            Chars::High(n) => 4 - n as u32 + 6,
            Chars::Low(k) => 6 - k as u32,
            Chars::Utf8 { left, .. } => left as u32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    /// Integer schemas accept a fraction of zeros only (1.0 is an integer).
    FracZeros,
    Exp,
    ExpSign,
    ExpDigits,
}

impl Num {
    pub(crate) fn complete(self) -> bool {
        matches!(
            self,
            Num::Zero | Num::Int | Num::Frac | Num::FracZeros | Num::ExpDigits
        )
    }

    pub(crate) fn step(self, b: u8, integer: bool) -> Option<Num> {
        match (self, b) {
            (Num::Minus, b'0') => Some(Num::Zero),
            (Num::Minus, b'1'..=b'9') => Some(Num::Int),
            (Num::Int, b'0'..=b'9') => Some(Num::Int),
            (Num::Zero | Num::Int, b'.') => Some(Num::Dot),
            (Num::Dot, b'0') if integer => Some(Num::FracZeros),
            (Num::FracZeros, b'0') => Some(Num::FracZeros),
            (Num::Dot, b'0'..=b'9') if !integer => Some(Num::Frac),
            (Num::Frac, b'0'..=b'9') => Some(Num::Frac),
            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') if !integer => Some(Num::Exp),
            (Num::Exp, b'+' | b'-') => Some(Num::ExpSign),
            (Num::Exp | Num::ExpSign | Num::ExpDigits, b'0'..=b'9') => Some(Num::ExpDigits),
            _ => None,
        }
    }
}

/// The code point being read, alongside `Chars` (only where a `pattern` needs it): the bits so
/// far of a UTF-8 character or a `\uXXXX` escape; inside a surrogate pair the high half sits in
/// the upper 16 bits and the low one's digits in the lower.
impl Chars {
    /// The accumulator after byte `b` (which `step` accepted); the code point itself when the
    /// character completes.
    pub(crate) fn value(self, acc: u32, b: u8) -> u32 {
        let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0);
        let digit = |acc: u32| (acc & 0xFFFF_0000) | ((acc & 0xFFFF) << 4 | hex(b));
        match self {
            Chars::Plain => match b {
                0xC2..=0xDF => (b & 0x1F) as u32,
                0xE0..=0xEF => (b & 0x0F) as u32,
                0xF0..=0xF4 => (b & 0x07) as u32,
                b'\\' => 0,
                b => b as u32,
            },
            Chars::Utf8 { .. } => (acc << 6) | (b & 0x3F) as u32,
            Chars::Escape => match b {
                b'b' => 8,
                b'f' => 0xC,
                b'n' => 0xA,
                b'r' => 0xD,
                b't' => 9,
                b'u' => 0,
                b => b as u32,
            },
            // The high half complete: it moves up, the low half's digits come below.
            Chars::High(3) => digit(acc) << 16,
            Chars::Unicode(3) if acc >> 16 != 0 => {
                let (hi, lo) = (acc >> 16, digit(acc) & 0xFFFF);
                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
            }
            Chars::Unicode(_) | Chars::UnicodeD | Chars::High(_) => digit(acc),
            // `\`, `u`, `D`, then the first hex digit of the low half (read as digits).
            Chars::Low(0) | Chars::Low(1) => acc,
            Chars::Low(_) => digit(acc),
        }
    }

    /// The characters this partial one may still become, as (first, last, bytes to finish):
    /// what a pattern's closing cost ranges over. `Plain`: none pending.
    pub(crate) fn pending(self, acc: u32) -> Vec<(u32, u32, u32)> {
        let span = |prefix: u32, free_bits: u32| {
            (
                prefix << free_bits,
                (prefix << free_bits) | ((1 << free_bits) - 1),
            )
        };
        let pair = |hi_first: u32, hi_last: u32| {
            (
                0x10000 + ((hi_first - 0xD800) << 10),
                0x10000 + ((hi_last - 0xD800) << 10) + 0x3FF,
            )
        };
        // Four hex digits after `\u` with `n` read: the BMP outside the surrogates, or a pair.
        let unicode = |n: u32, prefix: u32| {
            let free = 4 * (4 - n);
            let (first, last) = span(prefix, free);
            let mut out = Vec::new();
            for (a, b) in [(0, 0xD7FF), (0xE000, 0xFFFF)] {
                let (lo, hi) = (first.max(a), last.min(b));
                if lo <= hi {
                    out.push((lo, hi, 4 - n));
                }
            }
            let (lo, hi) = (first.max(0xD800), last.min(0xDBFF));
            if lo <= hi {
                let (a, b) = pair(lo, hi);
                out.push((a, b, 4 - n + 6));
            }
            out
        };
        match self {
            Chars::Plain => Vec::new(),
            Chars::Utf8 { left, lo, hi } => {
                let free = 6 * (left as u32 - 1);
                let first = ((acc << 6) | (lo & 0x3F) as u32) << free;
                let last = (((acc << 6) | (hi & 0x3F) as u32) << free) | ((1 << free) - 1);
                vec![(first, last, left as u32)]
            }
            Chars::Escape => {
                let mut out: Vec<(u32, u32, u32)> = [0x22, 0x5C, 0x2F, 8, 0xC, 0xA, 0xD, 9]
                    .iter()
                    .map(|&c| (c, c, 1))
                    .collect();
                out.extend(unicode(0, 0).into_iter().map(|(a, b, n)| (a, b, n + 1)));
                out
            }
            Chars::Unicode(n) if acc >> 16 == 0 => unicode(n as u32, acc & 0xFFFF),
            Chars::Unicode(n) => {
                // The low half's digits of a pair: its first two are read (`DC`–`DF`).
                let hi = acc >> 16;
                let (lo_first, lo_last) = span(acc & 0xFFFF, 4 * (4 - n as u32));
                let base = 0x10000 + ((hi - 0xD800) << 10);
                vec![(
                    base + (lo_first - 0xDC00),
                    base + (lo_last - 0xDC00),
                    4 - n as u32,
                )]
            }
            Chars::UnicodeD => unicode(1, 0xD),
            Chars::High(n) => {
                let (first, last) = span(acc & 0xFFFF, 4 * (4 - n as u32));
                let (a, b) = pair(first.max(0xD800), last.min(0xDBFF));
                vec![(a, b, 4 - n as u32 + 6)]
            }
            Chars::Low(k) => {
                let (a, b) = pair(acc >> 16, acc >> 16);
                vec![(a, b, 6 - k as u32)]
            }
        }
    }
}
