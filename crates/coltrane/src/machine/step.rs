//! The pushdown transitions: how a thread (a stack of frames) steps over one byte of JSON text,
//! forking at unions and dying where no document can go on, and `accepts`, which runs them over
//! a whole text.

use super::lex::{Chars, Num};
use super::{
    number_ends, number_rule, ArrPhase, Frame, ObjPhase, Thread, DIVERGED, MAX_NESTING, MAX_TOP_WS,
    MAX_WS, NO_RULE, WORDS,
};
use crate::number::Digits;
use crate::schema::{Contains, NodeId, Schema, Shape, INF};
use std::collections::HashSet;

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Thread {
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
        self.step_closing(schema, b, out, &mut None);
    }

    /// [`step`](Thread::step), and the fewest closing bytes of the threads it adds, where the
    /// caller keeps them (computed anyway to drop dead threads; the DFA needs their minimum).
    pub fn step_closing(
        self,
        schema: &Schema,
        b: u8,
        out: &mut Vec<Thread>,
        close: &mut Option<u32>,
    ) {
        let Some(&top) = self.frames.last() else {
            return;
        };
        if let Frame::Value(node) = top {
            // A union forks before the byte is read, into the shapes it stands for (none of
            // them a union, so each step below reads the byte without forking again).
            if let Shape::Union(alts) = schema.shape(node) {
                let nested = alts
                    .iter()
                    .any(|&a| matches!(schema.shape(a), Shape::Union(_)));
                let flat;
                let leaves: &[NodeId] = if nested {
                    flat = union_leaves(schema, node);
                    &flat
                } else {
                    alts
                };
                for &a in leaves {
                    let mut t = self.clone();
                    t.set_top(Frame::Value(a));
                    t.step_closing(schema, b, out, close);
                }
                return;
            }
        }
        if let Frame::Array {
            node,
            count,
            found,
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
                let start = |mut t: Thread,
                             found: u16,
                             elem: NodeId,
                             out: &mut Vec<Thread>,
                             close: &mut Option<u32>| {
                    t.set_top(Frame::Array {
                        node,
                        count,
                        found,
                        phase: ArrPhase::Value,
                    });
                    t.frames.push(Frame::Value(elem));
                    t.step_closing(schema, b, out, close);
                };
                // Under `contains`, the element is a hit (counted) or a miss: two threads.
                match contains_of(schema, node) {
                    None => start(self, found, elem, out, close),
                    Some(c) => {
                        let (hit, miss) = c.at(count);
                        if (found as u32) < c.max {
                            let more = (found as u32 + 1).min(c.cap()).min(u16::MAX as u32);
                            start(self.clone(), more as u16, hit, out, close);
                        }
                        start(self, found, miss, out, close);
                    }
                }
                return;
            }
        }
        if let Some(t) = self.step_one(schema, top, b) {
            // A thread no document can complete is dead now, not at some later byte: masks
            // built from it would offer tokens that lead nowhere (a property or an element
            // whose schema is `false`, an additional key that may not have a value, …).
            let c = t.close_bytes(schema);
            if c < INF {
                out.push(t);
                *close = Some(close.map_or(c, |m| m.min(c)));
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
            Frame::Object {
                node,
                seen,
                members,
                phase,
            } => {
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
                let (min_props, max_props) = schema.member_bounds(node);
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
                            members,
                            phase: ObjPhase::Colon(None),
                        });
                        self.push(Frame::Key {
                            obj: node,
                            at: 0,
                            chars: Chars::Plain,
                        })
                    }
                    (ObjPhase::Open | ObjPhase::AfterMember, b'}')
                        if seen & required == *required && members as u32 >= min_props =>
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
                            members,
                            phase: ObjPhase::Value,
                        });
                        self.push(Frame::Value(value))
                    }
                    (ObjPhase::AfterMember, b',') => {
                        let more = (members as u32) < max_props
                            && (additional.is_some()
                                || (0..props.len()).any(|i| seen & (1 << i) == 0));
                        more.then_some(())?;
                        self.set_top(Frame::Object {
                            node,
                            seen,
                            members,
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
            Frame::Array {
                node,
                count,
                found,
                phase,
            } => {
                let min_items = match schema.shape(node) {
                    Shape::Array { min_items, .. } => *min_items,
                    _ => 0,
                };
                let enough = contains_of(schema, node).is_none_or(|c| found as u32 >= c.min);
                match (phase, b) {
                    (_, _) if ws && phase != ArrPhase::Value => self.ws(),
                    (ArrPhase::Open | ArrPhase::AfterValue, b']')
                        if count >= min_items && enough =>
                    {
                        self.complete(schema)
                    }
                    (ArrPhase::AfterValue, b',') => {
                        element(schema, node, count)?;
                        self.set_top(Frame::Array {
                            node,
                            count,
                            found,
                            phase: ArrPhase::NextValue,
                        });
                        Some(self)
                    }
                    _ => None,
                }
            }
            Frame::Str {
                node,
                len,
                chars,
                re,
                acc,
            } => {
                let (min_len, max_len, pattern) = schema.string_rules(node);
                if b == b'"' && chars == Chars::Plain {
                    let matched = pattern.is_none_or(|p| p.accepts(re));
                    return (len >= min_len && matched)
                        .then_some(())
                        .and_then(|_| self.complete(schema));
                }
                // At maxLength no character may begin: it could never be finished.
                if chars == Chars::Plain && len >= max_len {
                    return None;
                }
                let (next, completed) = chars.step(b)?;
                // A pattern reads whole characters: the code point, once complete.
                let (re, acc) = match pattern {
                    None => (0, 0),
                    Some(p) => {
                        let value = chars.value(acc, b);
                        if completed {
                            (p.step(re, value)?, 0)
                        } else {
                            (re, value)
                        }
                    }
                };
                let chars = next;
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
                self.set_top(Frame::Str {
                    node,
                    len,
                    chars,
                    re,
                    acc,
                });
                Some(self)
            }
            Frame::Number {
                integer,
                at,
                rule,
                digits,
            } => match match number_rule(schema, rule) {
                Some(r) => r.step(at, digits, b),
                None => at.step(b, integer).map(|at| (at, digits)),
            } {
                Some((at, digits)) => {
                    self.set_top(Frame::Number {
                        integer,
                        at,
                        rule,
                        digits,
                    });
                    Some(self)
                }
                // The number ends at the first byte that cannot continue it; that byte belongs
                // to the enclosing value.
                None if number_ends(schema, rule, at, digits) => {
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
        let members = 0;
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
                    members,
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
                    members,
                    phase: ObjPhase::Value,
                });
                self.push(Frame::Value(node_any(schema, node)))
            }
            (ObjPhase::AfterMember, b',') => {
                self.set_top(Frame::Object {
                    node,
                    seen,
                    members,
                    phase: ObjPhase::NextKey,
                });
                Some(self)
            }
            _ => None,
        }
    }

    /// A key's closing quote: which property it names, if it may appear.
    fn key_done(mut self, schema: &Schema, obj: NodeId, at: u32) -> Option<Thread> {
        let Some(Frame::Object {
            node,
            seen,
            members,
            ..
        }) = self.frames.last().copied()
        else {
            return None;
        };
        let prop = match schema.shape(obj) {
            Shape::Object { keys, .. } if at != DIVERGED => keys.end(at).map(|p| p as u8),
            _ => None,
        };
        // One more member: within `maxProperties`, counted as far as a bound needs.
        let (min_props, max_props) = schema.member_bounds(obj);
        if members as u32 >= max_props {
            return None;
        }
        let members = member_count(members, min_props, max_props);
        match prop {
            Some(p) => {
                // A declared key may appear once.
                (seen & (1 << p) == 0).then_some(())?;
                self.set_top(Frame::Object {
                    node,
                    seen: seen | (1 << p),
                    members,
                    phase: ObjPhase::Colon(Some(p)),
                });
            }
            None => {
                allows_additional(schema, obj).then_some(())?;
                self.set_top(Frame::Object {
                    node,
                    seen,
                    members,
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
                members: 0,
                phase: ObjPhase::Open,
            },
            (Shape::Any | Shape::Array { .. }, b'[') => Frame::Array {
                node,
                count: 0,
                found: 0,
                phase: ArrPhase::Open,
            },
            (Shape::Any | Shape::String { .. }, b'"') => Frame::Str {
                node,
                len: 0,
                chars: Chars::Plain,
                re: match schema.shape(node) {
                    Shape::String {
                        pattern: Some(p), ..
                    } => p.start(),
                    _ => 0,
                },
                acc: 0,
            },
            (Shape::Number { rule: Some(r), .. }, b'-' | b'0'..=b'9') => {
                let (at, digits) = r.start(b)?;
                Frame::Number {
                    integer: r.integer,
                    at,
                    rule: node,
                    digits,
                }
            }
            (Shape::Any | Shape::Number { .. }, b'-' | b'0'..=b'9') => {
                let integer = matches!(schema.shape(node), Shape::Number { integer: true, .. });
                let at = match b {
                    b'-' => Num::Minus,
                    b'0' => Num::Zero,
                    _ => Num::Int,
                };
                Frame::Number {
                    integer,
                    at,
                    rule: NO_RULE,
                    digits: Digits::default(),
                }
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
            Some(Frame::Object {
                node,
                seen,
                members,
                ..
            }) => self.set_top(Frame::Object {
                node,
                seen,
                members,
                phase: ObjPhase::AfterMember,
            }),
            Some(Frame::Array {
                node, count, found, ..
            }) => self.set_top(Frame::Array {
                node,
                count: count.saturating_add(1).min(count_cap(schema, node)),
                found,
                phase: ArrPhase::AfterValue,
            }),
            Some(_) => return None,
        }
        Some(self)
    }
}

/// A member more, counted up to what `minProperties`/`maxProperties` can tell apart (none:
/// never counted, so objects share states).
pub(crate) fn member_count(members: u16, min_props: u32, max_props: u32) -> u16 {
    let cap = match max_props {
        u32::MAX => min_props,
        max => max.saturating_add(1),
    };
    (members as u32 + 1).min(cap).min(u16::MAX as u32) as u16
}

/// A fresh `Any` node for the members of an `Any` container: the same node (any value).
fn node_any(_schema: &Schema, node: NodeId) -> NodeId {
    node
}

/// The shapes union `node` stands for: its alternatives, with the unions among them (a `$ref`,
/// an `anyOf` inside another) replaced by theirs, each node once. A walk with its own stack
/// that skips nodes it has seen: a long chain of refs costs no call stack, a diamond of them no
/// repeated work, and even a cycle of unions (which the compiler refuses, `SchemaError::Loop`)
/// would end.
fn union_leaves(schema: &Schema, node: NodeId) -> Vec<NodeId> {
    let mut leaves = Vec::new();
    let mut seen = HashSet::from([node]);
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        match schema.shape(n) {
            Shape::Union(alts) => {
                stack.extend(alts.iter().rev().copied().filter(|&a| seen.insert(a)));
            }
            _ => leaves.push(n),
        }
    }
    leaves
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

/// Array `node`'s `contains`, if it has one.
pub(crate) fn contains_of(schema: &Schema, node: NodeId) -> Option<&Contains> {
    match schema.shape(node) {
        Shape::Array {
            contains: Some(c), ..
        } => Some(c),
        _ => None,
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
