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
