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
//!
//! `lex.rs` holds the byte lexers (string characters, numbers), `step.rs` the pushdown
//! transitions (`Thread::step`) and `accepts`, `close.rs` the exact closing costs
//! (`Thread::close_bytes`); this file the frames and threads they share.

mod close;
pub mod lex;
pub mod step;

pub use lex::{Chars, Num};

use crate::number::{Digits, NumberRule};
use crate::schema::{NodeId, Schema, Shape};

/// `Frame::Number`'s rule when the number has none.
pub const NO_RULE: NodeId = NodeId::MAX;

/// The rule of node `rule` (`NO_RULE`: none).
pub(crate) fn number_rule(schema: &Schema, rule: NodeId) -> Option<&NumberRule> {
    if rule == NO_RULE {
        return None;
    }
    match schema.shape(rule) {
        Shape::Number { rule: Some(r), .. } => Some(r),
        _ => None,
    }
}

/// Whether a number's text so far is a whole value its rule admits.
pub(crate) fn number_ends(schema: &Schema, rule: NodeId, at: Num, digits: Digits) -> bool {
    match number_rule(schema, rule) {
        Some(r) => r.accepts(at, digits),
        None => at.complete(),
    }
}

/// Longest run of whitespace bytes between JSON tokens.
pub const MAX_WS: u8 = 24;
/// Longest run before the top-level value and after it: a model that has finished its document
/// pads with newlines rather than stop, so the padding is cut short and end-of-text comes.
pub const MAX_TOP_WS: u8 = 2;
/// Deepest nesting of arrays and objects.
pub const MAX_NESTING: usize = 64;

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
        /// Members so far, counted only as far as `minProperties`/`maxProperties` need.
        members: u16,
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
        /// Elements that are hits of `contains` (the one in progress included), counted as far
        /// as its counts need.
        found: u16,
        phase: ArrPhase,
    },
    Str {
        node: NodeId,
        len: u32,
        chars: Chars,
        /// The `pattern`'s state and the character being read (`Chars::value`); both 0
        /// without a pattern.
        re: u32,
        acc: u32,
    },
    Number {
        integer: bool,
        at: Num,
        /// The node whose `NumberRule` the digits answer to; `NO_RULE`: any number (`digits`
        /// stays at its default, so plain numbers share states).
        rule: NodeId,
        digits: Digits,
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
            [Frame::Number {
                at, rule, digits, ..
            }] => number_ends(schema, *rule, *at, *digits),
            [Frame::Literal { node, at }] => match schema.shape(*node) {
                Shape::Literal(t) => t.end(*at).is_some(),
                _ => false,
            },
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
