//! Exact closing costs: the fewest bytes that finish a document from a thread, which every
//! budget-aware mask is built on (see `Thread::close_bytes`).

use super::lex::Chars;
use super::step::member_count;
use super::{number_rule, ArrPhase, Frame, ObjPhase, Thread, DIVERGED, WORDS};
use crate::schema::{NodeId, Schema, Shape, INF};

impl Thread {
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
                Frame::Number {
                    at, rule, digits, ..
                } => match number_rule(schema, rule) {
                    Some(r) => r.close_bytes(at, digits),
                    None => u32::from(!at.complete()),
                },
                Frame::Word { word, at } => (WORDS[word as usize].len() - at as usize) as u32,
                Frame::Literal { node, at } => match schema.shape(node) {
                    Shape::Literal(t) => match t.to_end(at) {
                        u32::MAX => INF,
                        d => d,
                    },
                    _ => INF,
                },
                Frame::Str {
                    node,
                    len,
                    chars,
                    re,
                    acc,
                } => {
                    let (min_len, _, pattern) = schema.string_rules(node);
                    if let Some(p) = pattern {
                        // The character in progress, whichever it becomes, then the pattern's
                        // rest, then the quote.
                        let rest = if chars == Chars::Plain {
                            p.close(re)
                        } else {
                            chars
                                .pending(acc)
                                .into_iter()
                                .map(|(first, last, bytes)| {
                                    bytes.saturating_add(p.close_through(re, first, last, |_, _| 0))
                                })
                                .min()
                                .unwrap_or(INF)
                        };
                        total = add(total, add(rest, 1));
                        continue;
                    }
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
                    let (seen, members) = match self.frames.get(self.frames.len() - depth - 2) {
                        Some(Frame::Object { seen, members, .. }) => (*seen, *members),
                        _ => (0, 0),
                    };
                    add(chars.to_finish(), key_rest(schema, obj, at, seen, members))
                }
                Frame::Object { .. } if key_pending => {
                    key_pending = false;
                    0
                }
                Frame::Object {
                    node,
                    seen,
                    members,
                    phase,
                } => object_rest(schema, node, seen, members, phase, innermost),
                Frame::Array {
                    node,
                    count,
                    found,
                    phase,
                } => array_rest(schema, node, count, found, phase),
            };
            total = add(total, part);
        }
        total
    }
}

/// Bytes after the current position of a key (at key-trie node `at`) to the end of its object:
/// the rest of the key, `":`, the value, then the object's missing members and `}`. The
/// cheapest admissible way: a declared key not yet seen, or (if allowed) an additional key.
fn key_rest(schema: &Schema, obj: NodeId, at: u32, seen: u64, members: u16) -> u32 {
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
    // The key makes one more member.
    let (min_props, max_props) = schema.member_bounds(obj);
    if members as u32 >= max_props {
        return INF;
    }
    let members = member_count(members, min_props, max_props);
    let mut best = INF;
    if let Some(a) = additional {
        // Close the key here, unless the text so far spells a declared key: then one more byte
        // makes it an additional key.
        let extra = u32::from(at != DIVERGED && keys.end(at).is_some());
        let rest = object_rest(schema, obj, seen, members, ObjPhase::Value, false);
        best = add(add(extra + 2, schema.min_bytes(*a)), rest);
    }
    if at != DIVERGED {
        // Declared keys below `at` (a small trie): walk it.
        let mut stack = vec![(at, 0u32)];
        while let Some((node, dist)) = stack.pop() {
            if let Some(p) = keys.end(node) {
                if seen & (1 << p) == 0 {
                    let value = schema.min_bytes(props[p as usize].node);
                    let rest = object_rest(
                        schema,
                        obj,
                        seen | (1 << p),
                        members,
                        ObjPhase::Value,
                        false,
                    );
                    best = best.min(add(add(dist + 2, value), rest));
                }
            }
            stack.extend(keys.children(node).map(|c| (c, dist + 1)));
        }
    }
    best
}

/// Bytes that finish an object in `phase` once its current member (if any) is complete.
fn object_rest(
    schema: &Schema,
    node: NodeId,
    seen: u64,
    members: u16,
    phase: ObjPhase,
    innermost: bool,
) -> u32 {
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
    let missing_keys = (required & !seen).count_ones();
    let missing: u32 = props
        .iter()
        .enumerate()
        .filter(|(i, _)| required & (1 << i) != 0 && seen & (1 << i) == 0)
        .map(|(_, p)| add(p.key.len() as u32 + 4, schema.min_bytes(p.node)))
        .fold(0, add);
    // `minProperties` may need members past the required ones; `maxProperties` must leave
    // room for the required ones still missing.
    let (min_props, max_props) = schema.member_bounds(node);
    let total = members as u32 + missing_keys;
    if total > max_props {
        return INF;
    }
    let extra = min_props.saturating_sub(total);
    let missing = add(missing, schema.extra_members(node, seen, extra));
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

fn array_rest(schema: &Schema, node: NodeId, count: u32, found: u16, phase: ArrPhase) -> u32 {
    let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
    // Elements still required after the one in progress (if any), each with a comma.
    let done = match phase {
        ArrPhase::Value => count + 1,
        _ => count,
    };
    let (needed, k) = match schema.shape(node) {
        Shape::Array { .. } => schema.elements_needed(node, done, found as u32),
        // `Any` arrays hold any values.
        _ => (0, 0),
    };
    let rest = add(1, needed); // and `]`
    match phase {
        ArrPhase::Open if k > 0 => rest - 1,
        ArrPhase::NextValue => {
            if k > 0 {
                rest - 1
            } else {
                // A comma was written: one more element must follow (a hit only where
                // `maxContains` has room).
                let cheapest = match schema.shape(node) {
                    Shape::Array {
                        prefix,
                        items,
                        contains,
                        ..
                    } => match contains {
                        Some(c) => {
                            let (hit, miss) = c.at(done);
                            let hit = match (found as u32) < c.max {
                                true => schema.min_bytes(hit),
                                false => INF,
                            };
                            hit.min(schema.min_bytes(miss))
                        }
                        None => prefix
                            .get(done as usize)
                            .copied()
                            .or(*items)
                            .map_or(INF, |n| schema.min_bytes(n)),
                    },
                    _ => 1,
                };
                add(rest, cheapest)
            }
        }
        _ => rest,
    }
}
