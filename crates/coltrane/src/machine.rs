//! The byte-level matcher of a compiled schema: a pushdown automaton over JSON text (RFC 8259:
//! objects, arrays, strings with escapes including \uXXXX (a surrogate pair is one character, a
//! lone surrogate is refused) and UTF-8 checked byte by byte, numbers, true/false/null,
//! whitespace), its stack a list of frames. A union (`anyOf`, a list of types) forks the matcher
//! into threads; a state is the set of live threads, so the matcher is deterministic over states
//! and can be turned into a lazily built DFA (`dfa.rs`). A thread that can no longer finish the
//! document dies at once, so every live state has a completion.
//!
//! Whitespace between tokens is allowed up to `MAX_WS` bytes in a row, so a model cannot pad a
//! document forever.

use crate::schema::{NodeId, Schema, Shape, INF};

/// Longest run of whitespace bytes between JSON tokens.
pub const MAX_WS: u8 = 24;
/// Longest run before the top-level value and after it: a model that has finished its document
/// pads with newlines rather than stop, so the padding is cut short and end-of-text comes.
pub const MAX_TOP_WS: u8 = 2;
/// Deepest nesting of arrays and objects.
pub const MAX_NESTING: usize = 64;

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
    fn step(self, b: u8) -> Option<(Chars, bool)> {
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
    fn to_finish(self) -> u32 {
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
    fn complete(self) -> bool {
        matches!(
            self,
            Num::Zero | Num::Int | Num::Frac | Num::FracZeros | Num::ExpDigits
        )
    }

    fn step(self, b: u8, integer: bool) -> Option<Num> {
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

/// Where an object is between its members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjPhase {
    /// After `{`: a key or `}`.
    Open,
    /// After `,`: a key.
    NextKey,
    /// After a key: `:`. The property it named (`None`: an additional key).
    Colon(Option<u8>),
    /// Inside a member's value.
    Value,
    /// After a member: `,` or `}`.
    AfterMember,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ArrPhase {
    Open,
    NextValue,
    Value,
    AfterValue,
}

/// Key-trie position inside a key; `DIVERGED`: no declared key has this prefix.
pub const DIVERGED: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A value of this node is expected (whitespace may come first).
    Value(NodeId),
    Object {
        node: NodeId,
        seen: u64,
        phase: ObjPhase,
    },
    Key {
        obj: NodeId,
        at: u32,
        chars: Chars,
    },
    Array {
        node: NodeId,
        /// Elements completed (saturating where no bound needs more).
        count: u32,
        phase: ArrPhase,
    },
    Str {
        node: NodeId,
        len: u32,
        chars: Chars,
    },
    Number {
        integer: bool,
        at: Num,
    },
    /// `true`, `false` or `null`, by index into `WORDS`, with this many bytes matched.
    Word {
        word: u8,
        at: u8,
    },
    Literal {
        node: NodeId,
        at: u32,
    },
    /// The top-level value is complete.
    Done,
}

const WORDS: [&[u8]; 3] = [b"true", b"false", b"null"];

/// One way the input may be matching the schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Thread {
    pub frames: Vec<Frame>,
    pub ws: u8,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Thread {
    pub fn start(schema: &Schema) -> Thread {
        Thread {
            frames: vec![Frame::Value(schema.root())],
            ws: 0,
        }
    }

    pub fn can_end(&self, schema: &Schema) -> bool {
        match self.frames.as_slice() {
            [Frame::Done] => true,
            [Frame::Number { at, .. }] => at.complete(),
            [Frame::Literal { node, at }] => match schema.shape(*node) {
                Shape::Literal(t) => t.end(*at).is_some(),
                _ => false,
            },
            _ => false,
        }
    }

    fn ws(mut self) -> Option<Thread> {
        let limit = match self.frames.as_slice() {
            [Frame::Value(_) | Frame::Done] => MAX_TOP_WS,
            _ => MAX_WS,
        };
        if self.ws >= limit {
            return None;
        }
        self.ws += 1;
        Some(self)
    }

    /// Every thread this one becomes after byte `b` (none if it dies).
    pub fn step(self, schema: &Schema, b: u8, out: &mut Vec<Thread>) {
        let Some(&top) = self.frames.last() else {
            return;
        };
        if let Frame::Value(node) = top {
            // A union forks before the byte is read.
            if let Shape::Union(alts) = schema.shape(node) {
                for &a in alts {
                    let mut t = self.clone();
                    t.set_top(Frame::Value(a));
                    t.step(schema, b, out);
                }
                return;
            }
        }
        if let Frame::Array {
            node,
            count,
            phase: phase @ (ArrPhase::Open | ArrPhase::NextValue),
        } = top
        {
            // `]` right after `[` closes the array; anything but whitespace starts an element.
            let closes = b == b']' && phase == ArrPhase::Open;
            if !is_ws(b) && !closes {
                // An element starts: its value frame reads the byte (and may fork).
                let Some(elem) = element(schema, node, count) else {
                    return;
                };
                let mut t = self;
                t.set_top(Frame::Array {
                    node,
                    count,
                    phase: ArrPhase::Value,
                });
                t.frames.push(Frame::Value(elem));
                return t.step(schema, b, out);
            }
        }
        if let Some(t) = self.step_one(schema, top, b) {
            // A thread no document can complete is dead now, not at some later byte: masks
            // built from it would offer tokens that lead nowhere (a property or an element
            // whose schema is `false`, an additional key that may not have a value, …).
            if t.close_bytes(schema) < INF {
                out.push(t);
            }
        }
    }

    fn step_one(mut self, schema: &Schema, top: Frame, b: u8) -> Option<Thread> {
        let ws = is_ws(b);
        if !ws {
            self.ws = 0;
        }
        match top {
            Frame::Done => ws.then_some(()).and_then(|_| self.ws()),
            Frame::Value(node) => {
                if ws {
                    return self.ws();
                }
                self.start_value(schema, node, b)
            }
            Frame::Object { node, seen, phase } => {
                let Shape::Object {
                    props,
                    required,
                    additional,
                    ..
                } = schema.shape(node)
                else {
                    // `Any` objects: any keys, any values.
                    return self.any_object(schema, node, seen, phase, b);
                };
                match (phase, b) {
                    (
                        ObjPhase::Open
                        | ObjPhase::NextKey
                        | ObjPhase::Colon(_)
                        | ObjPhase::AfterMember,
                        _,
                    ) if ws => self.ws(),
                    (ObjPhase::Open | ObjPhase::NextKey, b'"') => {
                        self.set_top(Frame::Object {
                            node,
                            seen,
                            phase: ObjPhase::Colon(None),
                        });
                        self.push(Frame::Key {
                            obj: node,
                            at: 0,
                            chars: Chars::Plain,
                        })
                    }
                    (ObjPhase::Open | ObjPhase::AfterMember, b'}')
                        if seen & required == *required =>
                    {
                        self.complete(schema)
                    }
                    (ObjPhase::Colon(p), b':') => {
                        let value = match p {
                            Some(i) => props[i as usize].node,
                            None => (*additional)?,
                        };
                        self.set_top(Frame::Object {
                            node,
                            seen,
                            phase: ObjPhase::Value,
                        });
                        self.push(Frame::Value(value))
                    }
                    (ObjPhase::AfterMember, b',') => {
                        let more =
                            additional.is_some() || (0..props.len()).any(|i| seen & (1 << i) == 0);
                        more.then_some(())?;
                        self.set_top(Frame::Object {
                            node,
                            seen,
                            phase: ObjPhase::NextKey,
                        });
                        Some(self)
                    }
                    _ => None,
                }
            }
            Frame::Key { obj, at, chars } => {
                if b == b'"' && chars == Chars::Plain {
                    self.frames.pop();
                    return self.key_done(schema, obj, at);
                }
                let before = chars;
                let (chars, _) = before.step(b)?;
                let at = match (schema.shape(obj), at) {
                    (_, DIVERGED) => DIVERGED,
                    (Shape::Object { keys, .. }, at) => keys.child(at, b).unwrap_or(DIVERGED),
                    _ => DIVERGED,
                };
                if at == DIVERGED && !allows_additional(schema, obj) {
                    return None;
                }
                // Declared keys are matched as serde_json spells them. `\/` and `\u` escapes
                // spell characters another way, so off that spelling a key might still name a
                // declared property (`\u0066oo` is `foo`) and must not pass for an additional
                // one: such a key is refused where properties are declared.
                let respelled = matches!((before, b), (Chars::Escape, b'u' | b'/'))
                    || matches!(
                        before,
                        Chars::Unicode(_) | Chars::UnicodeD | Chars::High(_) | Chars::Low(_)
                    );
                if at == DIVERGED && respelled && declares_keys(schema, obj) {
                    return None;
                }
                self.set_top(Frame::Key { obj, at, chars });
                Some(self)
            }
            Frame::Array { node, count, phase } => {
                let min_items = match schema.shape(node) {
                    Shape::Array { min_items, .. } => *min_items,
                    _ => 0,
                };
                match (phase, b) {
                    (_, _) if ws && phase != ArrPhase::Value => self.ws(),
                    (ArrPhase::Open | ArrPhase::AfterValue, b']') if count >= min_items => {
                        self.complete(schema)
                    }
                    (ArrPhase::AfterValue, b',') => {
                        element(schema, node, count)?;
                        self.set_top(Frame::Array {
                            node,
                            count,
                            phase: ArrPhase::NextValue,
                        });
                        Some(self)
                    }
                    _ => None,
                }
            }
            Frame::Str { node, len, chars } => {
                let (min_len, max_len) = match schema.shape(node) {
                    Shape::String { min_len, max_len } => (*min_len, *max_len),
                    _ => (0, u32::MAX),
                };
                if b == b'"' && chars == Chars::Plain {
                    return (len >= min_len)
                        .then_some(())
                        .and_then(|_| self.complete(schema));
                }
                // At maxLength no character may begin: it could never be finished.
                if chars == Chars::Plain && len >= max_len {
                    return None;
                }
                let (chars, completed) = chars.step(b)?;
                let mut len = len;
                if completed {
                    if len >= max_len {
                        return None;
                    }
                    // Count only as far as a bound needs, so long strings share one state.
                    let cap = if max_len == u32::MAX {
                        min_len
                    } else {
                        max_len
                    };
                    len = (len + 1).min(cap);
                }
                self.set_top(Frame::Str { node, len, chars });
                Some(self)
            }
            Frame::Number { integer, at } => match at.step(b, integer) {
                Some(at) => {
                    self.set_top(Frame::Number { integer, at });
                    Some(self)
                }
                // The number ends at the first byte that cannot continue it; that byte belongs
                // to the enclosing value.
                None if at.complete() => {
                    let t = self.complete(schema)?;
                    let mut out = Vec::new();
                    t.step(schema, b, &mut out);
                    out.into_iter().next()
                }
                None => None,
            },
            Frame::Word { word, at } => {
                let w = WORDS[word as usize];
                (w.get(at as usize) == Some(&b)).then_some(())?;
                if at as usize + 1 == w.len() {
                    self.complete(schema)
                } else {
                    self.set_top(Frame::Word { word, at: at + 1 });
                    Some(self)
                }
            }
            Frame::Literal { node, at } => {
                let Shape::Literal(trie) = schema.shape(node) else {
                    return None;
                };
                match trie.child(at, b) {
                    Some(next) => {
                        self.set_top(Frame::Literal { node, at: next });
                        Some(self)
                    }
                    // A literal ending in a number ends at the next byte, like a number.
                    None if trie.end(at).is_some() => {
                        let t = self.complete(schema)?;
                        let mut out = Vec::new();
                        t.step(schema, b, &mut out);
                        out.into_iter().next()
                    }
                    None => None,
                }
            }
        }
    }

    /// Objects of an `Any` value: any string keys, any values.
    fn any_object(
        mut self,
        schema: &Schema,
        node: NodeId,
        seen: u64,
        phase: ObjPhase,
        b: u8,
    ) -> Option<Thread> {
        let ws = is_ws(b);
        match (phase, b) {
            (
                ObjPhase::Open | ObjPhase::NextKey | ObjPhase::Colon(_) | ObjPhase::AfterMember,
                _,
            ) if ws => self.ws(),
            (ObjPhase::Open | ObjPhase::NextKey, b'"') => {
                self.set_top(Frame::Object {
                    node,
                    seen,
                    phase: ObjPhase::Colon(None),
                });
                self.push(Frame::Key {
                    obj: node,
                    at: DIVERGED,
                    chars: Chars::Plain,
                })
            }
            (ObjPhase::Open | ObjPhase::AfterMember, b'}') => self.complete(schema),
            (ObjPhase::Colon(_), b':') => {
                self.set_top(Frame::Object {
                    node,
                    seen,
                    phase: ObjPhase::Value,
                });
                self.push(Frame::Value(node_any(schema, node)))
            }
            (ObjPhase::AfterMember, b',') => {
                self.set_top(Frame::Object {
                    node,
                    seen,
                    phase: ObjPhase::NextKey,
                });
                Some(self)
            }
            _ => None,
        }
    }

    /// A key's closing quote: which property it names, if it may appear.
    fn key_done(mut self, schema: &Schema, obj: NodeId, at: u32) -> Option<Thread> {
        let Some(Frame::Object { node, seen, .. }) = self.frames.last().copied() else {
            return None;
        };
        let prop = match schema.shape(obj) {
            Shape::Object { keys, .. } if at != DIVERGED => keys.end(at).map(|p| p as u8),
            _ => None,
        };
        match prop {
            Some(p) => {
                // A declared key may appear once.
                (seen & (1 << p) == 0).then_some(())?;
                self.set_top(Frame::Object {
                    node,
                    seen: seen | (1 << p),
                    phase: ObjPhase::Colon(Some(p)),
                });
            }
            None => {
                allows_additional(schema, obj).then_some(())?;
                self.set_top(Frame::Object {
                    node,
                    seen,
                    phase: ObjPhase::Colon(None),
                });
            }
        }
        Some(self)
    }

    fn start_value(mut self, schema: &Schema, node: NodeId, b: u8) -> Option<Thread> {
        let frame = match (schema.shape(node), b) {
            (Shape::Never, _) => return None,
            (Shape::Any | Shape::Object { .. }, b'{') => Frame::Object {
                node,
                seen: 0,
                phase: ObjPhase::Open,
            },
            (Shape::Any | Shape::Array { .. }, b'[') => Frame::Array {
                node,
                count: 0,
                phase: ArrPhase::Open,
            },
            (Shape::Any | Shape::String { .. }, b'"') => Frame::Str {
                node,
                len: 0,
                chars: Chars::Plain,
            },
            (Shape::Any | Shape::Number { .. }, b'-' | b'0'..=b'9') => {
                let integer = matches!(schema.shape(node), Shape::Number { integer: true });
                let at = match b {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int,
                };
                Frame::Number { integer, at }
            }
            (Shape::Any | Shape::Boolean, b't') => Frame::Word { word: 0, at: 1 },
            (Shape::Any | Shape::Boolean, b'f') => Frame::Word { word: 1, at: 1 },
            (Shape::Any | Shape::Null, b'n') => Frame::Word { word: 2, at: 1 },
            (Shape::Literal(trie), b) => Frame::Literal {
                node,
                at: trie.child(0, b)?,
            },
            _ => return None,
        };
        let opens = matches!(frame, Frame::Object { .. } | Frame::Array { .. });
        if opens && self.nesting() >= MAX_NESTING {
            return None;
        }
        self.set_top(frame);
        Some(self)
    }

    /// Arrays and objects open.
    fn nesting(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| matches!(f, Frame::Object { .. } | Frame::Array { .. }))
            .count()
    }

    fn set_top(&mut self, f: Frame) {
        if let Some(top) = self.frames.last_mut() {
            *top = f;
        }
    }

    fn push(mut self, f: Frame) -> Option<Thread> {
        self.frames.push(f);
        Some(self)
    }

    /// The top value is complete: pop it and tell the frame below.
    fn complete(mut self, schema: &Schema) -> Option<Thread> {
        self.frames.pop();
        match self.frames.last().copied() {
            None => self.frames.push(Frame::Done),
            Some(Frame::Object { node, seen, .. }) => self.set_top(Frame::Object {
                node,
                seen,
                phase: ObjPhase::AfterMember,
            }),
            Some(Frame::Array { node, count, .. }) => self.set_top(Frame::Array {
                node,
                count: count.saturating_add(1).min(count_cap(schema, node)),
                phase: ArrPhase::AfterValue,
            }),
            Some(_) => return None,
        }
        Some(self)
    }

    /// Fewest bytes that complete the document from this thread: what finishes the innermost
    /// value, then what each enclosing container still needs. Exact (a shortest completion
    /// exists that spends exactly this), so budget-aware closing never paints itself into a
    /// corner.
    pub fn close_bytes(&self, schema: &Schema) -> u32 {
        let mb = |n: NodeId| schema.min_bytes(n);
        let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
        let mut total = 0u32;
        let mut key_pending = false;
        for (depth, f) in self.frames.iter().rev().enumerate() {
            let innermost = depth == 0;
            let part = match *f {
                Frame::Done => 0,
                Frame::Value(n) => mb(n),
                Frame::Number { at, .. } => u32::from(!at.complete()),
                Frame::Word { word, at } => (WORDS[word as usize].len() - at as usize) as u32,
                Frame::Literal { node, at } => match schema.shape(node) {
                    Shape::Literal(t) => match t.to_end(at) {
                        u32::MAX => INF,
                        d => d,
                    },
                    _ => INF,
                },
                Frame::Str { node, len, chars } => {
                    let min_len = match schema.shape(node) {
                        Shape::String { min_len, .. } => *min_len,
                        _ => 0,
                    };
                    // Finishing the character in progress counts towards minLength too.
                    let started = u32::from(chars != Chars::Plain);
                    add(
                        chars.to_finish() + 1,
                        min_len.saturating_sub(len.saturating_add(started)),
                    )
                }
                Frame::Key { obj, at, chars } => {
                    // The key, `:`, its value and the rest of its object, together: which
                    // key is finished decides the rest. The object frame below adds nothing.
                    key_pending = true;
                    let seen = match self.frames.get(self.frames.len() - depth - 2) {
                        Some(Frame::Object { seen, .. }) => *seen,
                        _ => 0,
                    };
                    add(chars.to_finish(), key_rest(schema, obj, at, seen))
                }
                Frame::Object { .. } if key_pending => {
                    key_pending = false;
                    0
                }
                Frame::Object { node, seen, phase } => {
                    object_rest(schema, node, seen, phase, innermost)
                }
                Frame::Array { node, count, phase } => array_rest(schema, node, count, phase),
            };
            total = add(total, part);
        }
        total
    }
}

/// Bytes after the current position of a key (at key-trie node `at`) to the end of its object:
/// the rest of the key, `":`, the value, then the object's missing members and `}`. The
/// cheapest admissible way: a declared key not yet seen, or (if allowed) an additional key.
fn key_rest(schema: &Schema, obj: NodeId, at: u32, seen: u64) -> u32 {
    let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
    let Shape::Object {
        props,
        keys,
        additional,
        ..
    } = schema.shape(obj)
    else {
        // An `Any` object: `":0}`.
        return 4;
    };
    let mut best = INF;
    if let Some(a) = additional {
        // Close the key here, unless the text so far spells a declared key: then one more byte
        // makes it an additional key.
        let extra = u32::from(at != DIVERGED && keys.end(at).is_some());
        let rest = object_rest(schema, obj, seen, ObjPhase::Value, false);
        best = add(add(extra + 2, schema.min_bytes(*a)), rest);
    }
    if at != DIVERGED {
        // Declared keys below `at` (a small trie): walk it.
        let mut stack = vec![(at, 0u32)];
        while let Some((node, dist)) = stack.pop() {
            if let Some(p) = keys.end(node) {
                if seen & (1 << p) == 0 {
                    let value = schema.min_bytes(props[p as usize].node);
                    let rest = object_rest(schema, obj, seen | (1 << p), ObjPhase::Value, false);
                    best = best.min(add(add(dist + 2, value), rest));
                }
            }
            for b in 0..=255u8 {
                if let Some(c) = keys.child(node, b) {
                    stack.push((c, dist + 1));
                }
            }
        }
    }
    best
}

/// A fresh `Any` node for the members of an `Any` container: the same node (any value).
fn node_any(_schema: &Schema, node: NodeId) -> NodeId {
    node
}

/// The schema of element `index` (0-based) of array `node`, if one may be there.
fn element(schema: &Schema, node: NodeId, index: u32) -> Option<NodeId> {
    match schema.shape(node) {
        Shape::Array {
            prefix,
            items,
            max_items,
            ..
        } => {
            if index >= *max_items {
                return None;
            }
            prefix.get(index as usize).copied().or(*items)
        }
        // `Any` arrays hold any values.
        _ => Some(node),
    }
}

/// Whether object `obj` declares properties (an `Any` object declares none).
fn declares_keys(schema: &Schema, obj: NodeId) -> bool {
    matches!(schema.shape(obj), Shape::Object { props, .. } if !props.is_empty())
}

fn allows_additional(schema: &Schema, obj: NodeId) -> bool {
    match schema.shape(obj) {
        Shape::Object { additional, .. } => additional.is_some(),
        _ => true,
    }
}

/// Counting elements beyond what any bound needs only multiplies states.
fn count_cap(schema: &Schema, node: NodeId) -> u32 {
    match schema.shape(node) {
        Shape::Array {
            prefix,
            min_items,
            max_items,
            ..
        } => {
            let bound = if *max_items == u32::MAX {
                0
            } else {
                *max_items
            };
            (prefix.len() as u32).max(*min_items).max(bound)
        }
        _ => 0,
    }
}

/// Bytes that finish an object in `phase` once its current member (if any) is complete.
fn object_rest(schema: &Schema, node: NodeId, seen: u64, phase: ObjPhase, innermost: bool) -> u32 {
    let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
    let Shape::Object {
        props,
        required,
        additional,
        ..
    } = schema.shape(node)
    else {
        // An `Any` object.
        return match phase {
            // `"":0}`: the shortest member after a comma.
            ObjPhase::NextKey => 5,
            ObjPhase::Colon(_) if innermost => 3,
            _ => 1,
        };
    };
    let missing: u32 = props
        .iter()
        .enumerate()
        .filter(|(i, _)| required & (1 << i) != 0 && seen & (1 << i) == 0)
        .map(|(_, p)| add(p.key.len() as u32 + 4, schema.min_bytes(p.node)))
        .fold(0, add);
    // Every missing member costs `,"key":value`; `}` ends it.
    let base = add(missing, 1);
    match phase {
        ObjPhase::Open => {
            // No comma before the first member.
            if missing > 0 {
                base - 1
            } else {
                base
            }
        }
        ObjPhase::AfterMember | ObjPhase::Value => base,
        ObjPhase::NextKey => {
            if missing > 0 {
                base - 1
            } else {
                // A comma was written: some member must follow.
                let cheapest = props
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| seen & (1 << i) == 0)
                    .map(|(_, p)| add(p.key.len() as u32 + 3, schema.min_bytes(p.node)))
                    .chain(additional.map(|a| add(3, schema.min_bytes(a))))
                    .min()
                    .unwrap_or(INF);
                add(cheapest, 1)
            }
        }
        ObjPhase::Colon(p) => {
            let value = match p {
                Some(i) => schema.min_bytes(props[i as usize].node),
                None => additional.map_or(INF, |a| schema.min_bytes(a)),
            };
            // The key frame above (if any) already counted the colon and the value.
            if innermost {
                add(add(1, value), base)
            } else {
                base
            }
        }
    }
}

fn array_rest(schema: &Schema, node: NodeId, count: u32, phase: ArrPhase) -> u32 {
    let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
    let (prefix, items, min_items) = match schema.shape(node) {
        Shape::Array {
            prefix,
            items,
            min_items,
            ..
        } => (prefix.as_slice(), *items, *min_items),
        // `Any` arrays hold any values.
        _ => (&[][..], Some(node), 0),
    };
    let elem = |i: u32| {
        prefix
            .get(i as usize)
            .copied()
            .or(items)
            .map_or(INF, |n| schema.min_bytes(n))
    };
    // Elements still required after the one in progress (if any).
    let done = match phase {
        ArrPhase::Value => count + 1,
        _ => count,
    };
    let mut rest = 1u32; // `]`
    for i in done..min_items.max(done) {
        rest = add(rest, add(elem(i), 1));
    }
    match phase {
        ArrPhase::Open if done < min_items => rest - 1,
        ArrPhase::NextValue => {
            if done < min_items {
                rest - 1
            } else {
                // A comma was written: one more element must follow.
                add(rest, elem(done))
            }
        }
        _ => rest,
    }
}

/// Whether `schema` accepts exactly `text` (as a whole document).
pub fn accepts(schema: &Schema, text: &[u8]) -> bool {
    let mut threads = vec![Thread::start(schema)];
    for &b in text {
        let mut next = Vec::new();
        for t in threads {
            t.step(schema, b, &mut next);
        }
        next.sort();
        next.dedup();
        if next.is_empty() {
            return false;
        }
        threads = next;
    }
    threads.iter().any(|t| t.can_end(schema))
}

#[cfg(test)]
mod tests;
