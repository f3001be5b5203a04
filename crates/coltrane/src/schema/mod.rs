//! A JSON Schema subset compiled to a graph of shapes the byte matcher walks. Supported: `type`
//! (one or a list), `properties`, `required`, `additionalProperties` (boolean or schema),
//! `items`, `prefixItems` (and draft-4 `items: [...]` with `additionalItems`), `enum`, `const`,
//! `minItems`/`maxItems`, `contains` and its counts, `minLength`/`maxLength`,
//! `minProperties`/`maxProperties`, `pattern`
//! and the known `format`s, the numeric bounds and `multipleOf` (enforced on the digits:
//! `number.rs`), `anyOf`, `allOf`, `oneOf`, `not`, `if`/`then`/`else`, the dependencies
//! (`compile/`: intersections, complements and the unions they build), `$ref` to
//! `$defs`/`definitions` (or any JSON pointer, `$anchor` or `$id` of the document, recursion
//! included, as long as every cycle enters an object or an array: a cycle of `$ref`s and
//! `anyOf`s alone is `SchemaError::Loop`), boolean schemas, and the annotations (`title`,
//! `description`, `default`, `examples`, `format`, `$schema`, `$id`, `$comment`, `deprecated`,
//! `readOnly`, `writeOnly`, …). Any other keyword is an error naming it.
//!
//! `json` (any JSON value) is the schema `true`.
//!
//! `enum` and `const` compile to every value they list; keeping only the values the rest of
//! their schema admits takes the matcher, which is built on this module, so that narrowing is a
//! pass of its own run after compilation (`compile_schema` in `narrow.rs`).

mod byte_trie;
mod compile;
mod resources;

use crate::number::NumberRule;
use crate::pattern::Pattern;

pub use byte_trie::ByteTrie;
pub(crate) use compile::{Draft, Listed, OneOf};

pub type NodeId = u32;

/// A value's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Any JSON value.
    Any,
    /// No value (the schema `false`).
    Never,
    Null,
    Boolean,
    Number {
        integer: bool,
        /// Bounds and `multipleOf`, enforced on the digits (`number.rs`); `None`: any number.
        rule: Option<Box<NumberRule>>,
    },
    String {
        min_len: u32,
        max_len: u32,
        /// `pattern` (with the lengths inside it, then 0 and `u32::MAX` here).
        pattern: Option<Box<Pattern>>,
    },
    Object {
        props: Vec<Prop>,
        /// Bit i set: `props[i]` is required.
        required: u64,
        /// The schema of other keys; `None`: no other keys.
        additional: Option<NodeId>,
        keys: KeyTrie,
        /// `minProperties`, `maxProperties` (0 and `u32::MAX`: none).
        min_props: u32,
        max_props: u32,
    },
    Array {
        prefix: Vec<NodeId>,
        /// The schema of elements past the prefix; `None`: no more elements.
        items: Option<NodeId>,
        min_items: u32,
        max_items: u32,
        /// `contains` with its counts (`None`: none).
        contains: Option<Box<Contains>>,
    },
    /// One of these exact values (`enum`, `const`), matched in their compact serialization.
    Literal(LiteralTrie),
    /// Any of these shapes (`anyOf`, a list of types, a `$ref`'s target). No cycle runs through
    /// unions alone: the compiler refuses one (`SchemaError::Loop`).
    Union(Vec<NodeId>),
}

/// `contains`, `minContains`, `maxContains`: each element is a hit (its schema met with
/// `contains`') or a miss (met with the complement; without `maxContains`, the element's own
/// schema, so a hit not counted only undercounts), and the array counts its hits.
#[derive(Debug, Clone, PartialEq)]
pub struct Contains {
    /// Per position: the prefix's, then one for every later element.
    pub hit: Vec<NodeId>,
    pub miss: Vec<NodeId>,
    pub min: u32,
    pub max: u32,
}

impl Contains {
    /// The (hit, miss) nodes of element `index`.
    pub fn at(&self, index: u32) -> (NodeId, NodeId) {
        let i = (index as usize).min(self.hit.len() - 1);
        (self.hit[i], self.miss[i])
    }

    /// Hits counted as far as the counts tell them apart.
    pub fn cap(&self) -> u32 {
        match self.max {
            u32::MAX => self.min,
            max => max,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Prop {
    /// The key as it appears between the quotes (JSON-escaped, compact).
    pub key: Vec<u8>,
    pub node: NodeId,
}

pub type KeyTrie = ByteTrie;
pub type LiteralTrie = ByteTrie;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("unsupported JSON Schema keyword {keyword:?} at {path}")]
    Unsupported { keyword: String, path: String },
    #[error("invalid schema at {path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("$ref {0:?} does not resolve in this document (nothing is fetched: a ref must point into the document, through its own resource's `$id`, `$anchor` or a JSON pointer)")]
    Ref(String),
    #[error("the schema admits no finite JSON value")]
    NoInstance,
    #[error("the schema is too large: {0}")]
    TooLarge(String),
    /// A cycle of `$ref`s and `anyOf`s that never enters an object or an array: the matcher
    /// would expand it forever without reading a byte.
    #[error("the schema refers to itself at {path} without entering an object or array")]
    Loop { path: String },
}

/// A compiled schema.
#[derive(Debug, Clone)]
pub struct Schema {
    nodes: Vec<Shape>,
    root: NodeId,
    /// Fewest bytes of any value of each node.
    min_bytes: Vec<u32>,
    /// What the matcher admits beyond the schema, one line each (a `oneOf` whose branches may
    /// overlap: a value matching two of them is not refused).
    relaxations: Vec<String>,
    /// Keywords kept as annotations that a validator may assert, one line each (a `format`
    /// COLTRANE does not know, or one beside a `pattern`).
    annotations: Vec<String>,
}

pub use crate::cost::INF;

impl Schema {
    /// The graph as compiled (`min_bytes` is computed once literals are narrowed).
    fn from_nodes(nodes: Vec<Shape>, root: NodeId) -> Schema {
        Schema {
            nodes,
            root,
            min_bytes: Vec::new(),
            relaxations: Vec::new(),
            annotations: Vec::new(),
        }
    }

    /// Any JSON value (the `json` preset).
    pub fn any() -> Schema {
        let mut s = Schema {
            nodes: vec![Shape::Any],
            root: 0,
            min_bytes: Vec::new(),
            relaxations: Vec::new(),
            annotations: Vec::new(),
        };
        s.compute_min_bytes();
        s
    }

    pub fn root(&self) -> NodeId {
        self.root
    }

    pub fn shape(&self, id: NodeId) -> &Shape {
        &self.nodes[id as usize]
    }

    /// A string node's `minLength`, `maxLength` and `pattern` (any string for other nodes).
    pub fn string_rules(&self, id: NodeId) -> (u32, u32, Option<&Pattern>) {
        match self.shape(id) {
            Shape::String {
                min_len,
                max_len,
                pattern,
            } => (*min_len, *max_len, pattern.as_deref()),
            _ => (0, u32::MAX, None),
        }
    }

    /// An object node's `minProperties` and `maxProperties` (none for other nodes).
    pub fn member_bounds(&self, id: NodeId) -> (u32, u32) {
        match self.shape(id) {
            Shape::Object {
                min_props,
                max_props,
                ..
            } => (*min_props, *max_props),
            _ => (0, u32::MAX),
        }
    }

    /// Fewest bytes of `extra` more members of object `id` beyond its required ones, each with
    /// its comma: the cheapest declared keys not in `seen` and not required (each once), or
    /// additional ones (`"":value`, as often as needed); `INF` if there are not enough.
    pub fn extra_members(&self, id: NodeId, seen: u64, extra: u32) -> u32 {
        let Shape::Object {
            props,
            required,
            additional,
            keys,
            ..
        } = self.shape(id)
        else {
            return 0;
        };
        if extra == 0 {
            return 0;
        }
        let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
        let mut costs: Vec<u32> = props
            .iter()
            .enumerate()
            .filter(|(i, _)| (seen | required) & (1 << i) == 0)
            .map(|(_, p)| add(p.key.len() as u32 + 4, self.min_bytes(p.node)))
            .collect();
        costs.sort_unstable();
        // The empty key, unless it is declared (then one character more).
        let other = additional.map(|a| {
            let key = u32::from(keys.end(0).is_some());
            add(key + 4, self.min_bytes(a))
        });
        let mut total = 0u32;
        let mut declared = costs.into_iter().peekable();
        for _ in 0..extra {
            let next = match (declared.peek().copied(), other) {
                (Some(d), Some(o)) if o < d => o,
                (Some(d), _) => {
                    declared.next();
                    d
                }
                (None, Some(o)) => o,
                (None, None) => return INF,
            };
            total = add(total, next);
        }
        total
    }

    /// Fewest bytes of the elements array `id` still needs after `done` of them with `found`
    /// hits of its `contains` — each element with one comma — and how many: enough for
    /// `minItems` and `minContains`, within `maxItems` and `maxContains` (`INF` if none fit).
    /// With `contains`, each position is a miss or a hit; the count that costs least is found
    /// by trying each up to the prefix's end (a hit may be cheaper further on).
    pub fn elements_needed(&self, id: NodeId, done: u32, found: u32) -> (u32, u32) {
        let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
        let Shape::Array {
            prefix,
            items,
            min_items,
            max_items,
            contains,
        } = self.shape(id)
        else {
            return (0, 0);
        };
        let elem = |i: u32| {
            prefix
                .get(i as usize)
                .copied()
                .or(*items)
                .map_or(INF, |n| self.min_bytes(n))
        };
        let Some(c) = contains else {
            let k = min_items.saturating_sub(done);
            let bytes = (done..done + k).fold(0, |t, i| add(t, add(elem(i), 1)));
            return (bytes, k);
        };
        let need = c.min.saturating_sub(found);
        let room = c.max.saturating_sub(found);
        let k0 = need.max(min_items.saturating_sub(done));
        let mut best = (INF, k0);
        for k in k0..=k0 + prefix.len() as u32 {
            if done.saturating_add(k) > *max_items {
                break;
            }
            // Misses everywhere, then the cheapest switches to hits: the needed ones, and more
            // while they save bytes and `maxContains` has room.
            let mut base = k;
            let mut forced = 0u32;
            let mut gains: Vec<i64> = Vec::new();
            for i in done..done + k {
                let (h, m) = c.at(i);
                let (h, m) = (self.min_bytes(h), self.min_bytes(m));
                if m >= INF {
                    forced += 1;
                    base = add(base, h);
                } else {
                    base = add(base, m);
                    if h < INF {
                        gains.push(h as i64 - m as i64);
                    }
                }
            }
            if forced > room || (forced + gains.len() as u32) < need {
                continue;
            }
            gains.sort_unstable();
            let mut total = base as i64;
            let mut hits = forced;
            for g in gains {
                if hits < need || (g < 0 && hits < room) {
                    total += g;
                    hits += 1;
                }
            }
            let total = (total.max(0) as u64).min(INF as u64) as u32;
            if base < INF && total < best.0 {
                best = (total, k);
            }
        }
        best
    }

    pub fn min_bytes(&self, id: NodeId) -> u32 {
        self.min_bytes[id as usize]
    }

    /// Sets node `id`'s shape, returning the old one; `min_bytes` is stale until [`reroot`].
    /// For the narrowing pass, which edits a draft's graph in place.
    ///
    /// [`reroot`]: Schema::reroot
    pub(crate) fn replace_shape(&mut self, id: NodeId, shape: Shape) -> Shape {
        std::mem::replace(&mut self.nodes[id as usize], shape)
    }

    /// What the matcher admits beyond the schema (empty: exactly the schema).
    pub fn relaxations(&self) -> &[String] {
        &self.relaxations
    }

    pub(crate) fn relax(&mut self, why: String) {
        self.relaxations.push(why);
    }

    /// What is kept as an annotation though a validator may assert it (formats not enforced).
    pub fn annotations(&self) -> &[String] {
        &self.annotations
    }

    pub(crate) fn annotate(&mut self, what: String) {
        self.annotations.push(what);
    }

    /// Adds a node (for the narrowing pass: a literal's numbers become number nodes).
    pub(crate) fn push_shape(&mut self, shape: Shape) -> NodeId {
        self.nodes.push(shape);
        (self.nodes.len() - 1) as NodeId
    }

    /// Roots the schema at node `root` and recomputes `min_bytes`.
    pub(crate) fn reroot(&mut self, root: NodeId) {
        self.root = root;
        self.compute_min_bytes();
    }

    /// Fewest bytes of each node's values, by fixed-point iteration (refs may recurse).
    fn compute_min_bytes(&mut self) {
        let n = self.nodes.len();
        self.min_bytes = vec![INF; n];
        for _ in 0..n + 2 {
            let mut changed = false;
            for i in 0..n {
                let m = self.min_of(i as NodeId);
                if m < self.min_bytes[i] {
                    self.min_bytes[i] = m;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    }

    fn min_of(&self, id: NodeId) -> u32 {
        let shape = &self.nodes[id as usize];
        let mb = |id: NodeId| self.min_bytes[id as usize];
        let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
        match shape {
            Shape::Number { rule: Some(r), .. } => r.min_bytes(),
            Shape::Any | Shape::Number { .. } => 1,
            Shape::Never => INF,
            Shape::Null | Shape::Boolean => 4,
            Shape::String {
                pattern: Some(p), ..
            } => add(2, p.close(p.start())),
            Shape::String { min_len, .. } => add(2, *min_len),
            Shape::Literal(t) => match t.to_end(0) {
                u32::MAX => INF,
                d => d,
            },
            Shape::Union(alts) => alts.iter().map(|&a| mb(a)).min().unwrap_or(INF),
            Shape::Object {
                props,
                required,
                min_props,
                max_props,
                ..
            } => {
                let mut total = 2u32;
                let mut k = 0;
                for (i, p) in props.iter().enumerate() {
                    if required & (1 << i) != 0 {
                        total = add(total, add(p.key.len() as u32 + 3, mb(p.node)));
                        k += 1;
                    }
                }
                if k > *max_props {
                    return INF;
                }
                // Members past the required ones (each counted with a comma): then every
                // member but one has a comma.
                let extra = min_props.saturating_sub(k);
                if extra == 0 {
                    return add(total, k.max(1) - 1);
                }
                match add(add(total, k), self.extra_members(id, 0, extra)) {
                    INF => INF,
                    t => t - 1,
                }
            }
            Shape::Array { .. } => {
                // Every element but the first after a comma.
                let (bytes, k) = self.elements_needed(id, 0, 0);
                match (bytes, k) {
                    (INF, _) => INF,
                    (b, 0) => add(2, b),
                    (b, _) => add(2, b - 1),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
