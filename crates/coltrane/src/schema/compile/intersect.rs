//! The intersection of two compiled schemas (`allOf`, keywords beside a `$ref` or an `anyOf`),
//! exact on the shapes: a union meets each alternative; numbers take the tighter bounds and
//! the least common multiple; strings the tighter lengths; objects meet key by key (a key one
//! side does not declare meets that side's additional schema) with the required keys of both;
//! arrays meet element by element; listed values keep those the other side admits (narrowed
//! after compilation, like every `enum`); shapes of different types admit nothing. Each pair is
//! met once (a recursive schema meets itself through the node reserved for the pair).
//!
//! Whether a `oneOf`'s branches exclude each other is the same question: their pairwise
//! intersections are met here and checked for emptiness once `min_bytes` is known.

use super::{Compiler, OneOf, MAX_ONE_OF_CHECKED, MAX_ONE_OF_EXACT, MAX_PROPS};
use crate::number::{NumberRule, RuleError};
use crate::pattern::Pattern;
use crate::schema::{ByteTrie, Contains, NodeId, Prop, Schema, SchemaError, Shape, INF};

impl Compiler<'_> {
    /// A node admitting what both `a` and `b` admit.
    pub(super) fn intersect(
        &mut self,
        a: NodeId,
        b: NodeId,
        path: &str,
    ) -> Result<NodeId, SchemaError> {
        if a == b {
            return Ok(a);
        }
        // Nodes whose shape is still a placeholder: being compiled, or a meet in progress.
        let finished = |c: &Self, n: NodeId| !c.unfinished.contains(&n) && !c.meeting.contains(&n);
        if finished(self, a) && self.nodes[a as usize] == Shape::Any {
            return Ok(b);
        }
        if finished(self, b) && self.nodes[b as usize] == Shape::Any {
            return Ok(a);
        }
        if self.is_never(a) {
            return Ok(a);
        }
        if self.is_never(b) {
            return Ok(b);
        }
        let key = (a.min(b), a.max(b));
        if let Some(&n) = self.meets.get(&key) {
            return Ok(n);
        }
        if !finished(self, a) || !finished(self, b) {
            return Err(SchemaError::Unsupported {
                keyword: "allOf over a schema that refers back to itself".into(),
                path: path.to_string(),
            });
        }
        let id = self.add(Shape::Never)?;
        self.meets.insert(key, id);
        self.meeting.push(id);
        let shape = self.meet(id, a, b, path);
        self.meeting.pop();
        match shape {
            Ok(shape) => {
                self.nodes[id as usize] = shape;
                Ok(id)
            }
            Err(e) => {
                self.meets.remove(&key);
                Err(e)
            }
        }
    }

    /// The shape of node `id`, the intersection of `a` and `b`.
    fn meet(&mut self, id: NodeId, a: NodeId, b: NodeId, path: &str) -> Result<Shape, SchemaError> {
        let (sa, sb) = (
            self.nodes[a as usize].clone(),
            self.nodes[b as usize].clone(),
        );
        Ok(match (sa, sb) {
            (Shape::Never, _) | (_, Shape::Never) => Shape::Never,
            (Shape::Union(alts), _) => {
                let mut out = Vec::with_capacity(alts.len());
                for x in alts {
                    let m = self.intersect(x, b, path)?;
                    if !self.is_never(m) {
                        out.push(m);
                    }
                }
                Shape::Union(out)
            }
            (_, Shape::Union(alts)) => {
                let mut out = Vec::with_capacity(alts.len());
                for x in alts {
                    let m = self.intersect(a, x, path)?;
                    if !self.is_never(m) {
                        out.push(m);
                    }
                }
                Shape::Union(out)
            }
            (Shape::Literal(_), _) => self.literal_meet(id, a, b, path)?,
            (_, Shape::Literal(_)) => self.literal_meet(id, b, a, path)?,
            (Shape::Null, Shape::Null) => Shape::Null,
            (Shape::Boolean, Shape::Boolean) => Shape::Boolean,
            (
                Shape::Number {
                    integer: ia,
                    rule: ra,
                },
                Shape::Number {
                    integer: ib,
                    rule: rb,
                },
            ) => {
                let integer = ia || ib;
                let rule = NumberRule::meet(integer, ra.as_deref(), rb.as_deref()).map_err(
                    |e| match e {
                        RuleError::TooFine => SchemaError::TooLarge(format!(
                            "{path}: the multipleOf of allOf's branches together is too fine"
                        )),
                        RuleError::NegatedMultiple => SchemaError::Unsupported {
                            keyword: "not of a multipleOf beside another multipleOf".into(),
                            path: path.to_string(),
                        },
                        RuleError::NotPositive => SchemaError::Invalid {
                            path: path.to_string(),
                            reason: "multipleOf must be greater than 0".into(),
                        },
                    },
                )?;
                Shape::Number {
                    integer,
                    rule: (!rule.is_trivial()).then(|| Box::new(rule)),
                }
            }
            (
                Shape::String {
                    min_len: a0,
                    max_len: a1,
                    pattern: pa,
                },
                Shape::String {
                    min_len: b0,
                    max_len: b1,
                    pattern: pb,
                },
            ) => {
                // A pattern holds its lengths: the other side's are folded in by compiling it
                // again. Two patterns at once would need their product: refused.
                let lengths = |p: &Option<Box<Pattern>>, lo: u32, hi: u32| match p {
                    Some(p) => (p.min_len, p.max_len),
                    None => (lo, hi),
                };
                let ((x0, x1), (y0, y1)) = (lengths(&pa, a0, a1), lengths(&pb, b0, b1));
                let (min_len, max_len) = (x0.max(y0), x1.min(y1));
                match (pa, pb) {
                    (Some(_), Some(_)) => {
                        return Err(SchemaError::Unsupported {
                            keyword: "allOf with a pattern in more than one branch".into(),
                            path: path.to_string(),
                        })
                    }
                    (Some(p), None) | (None, Some(p)) => {
                        let p = Pattern::compile(&p.source, min_len, max_len)
                            .map_err(|e| SchemaError::TooLarge(format!("{path}: {e}")))?;
                        Shape::String {
                            min_len: 0,
                            max_len: u32::MAX,
                            pattern: Some(Box::new(p)),
                        }
                    }
                    (None, None) => Shape::String {
                        min_len,
                        max_len,
                        pattern: None,
                    },
                }
            }
            (
                Shape::Object {
                    props: pa,
                    required: ra,
                    additional: xa,
                    min_props: ma,
                    max_props: na,
                    ..
                },
                Shape::Object {
                    props: pb,
                    required: rb,
                    additional: xb,
                    min_props: mb,
                    max_props: nb,
                    ..
                },
            ) => {
                let mut keys: Vec<(Vec<u8>, bool)> = Vec::new();
                for (i, p) in pa.iter().enumerate() {
                    keys.push((p.key.clone(), ra & (1 << i) != 0));
                }
                for (i, p) in pb.iter().enumerate() {
                    let req = rb & (1 << i) != 0;
                    match keys.iter_mut().find(|(k, _)| *k == p.key) {
                        Some(k) => k.1 |= req,
                        None => keys.push((p.key.clone(), req)),
                    }
                }
                if keys.len() > MAX_PROPS {
                    return Err(SchemaError::TooLarge(format!(
                        "{path}: more than {MAX_PROPS} properties in allOf's branches together"
                    )));
                }
                // The schema a side gives a key: its declared one, else its additional one.
                let side = |props: &[Prop], extra: Option<NodeId>, key: &[u8]| {
                    props
                        .iter()
                        .find(|p| p.key == key)
                        .map(|p| p.node)
                        .or(extra)
                };
                let mut props = Vec::with_capacity(keys.len());
                let mut required = 0u64;
                for (i, (key, req)) in keys.into_iter().enumerate() {
                    let node = match (side(&pa, xa, &key), side(&pb, xb, &key)) {
                        (Some(x), Some(y)) => self.intersect(x, y, path)?,
                        _ => self.add(Shape::Never)?,
                    };
                    if req {
                        required |= 1 << i;
                    }
                    props.push(Prop { key, node });
                }
                let additional = match (xa, xb) {
                    (Some(x), Some(y)) => Some(self.intersect(x, y, path)?),
                    _ => None,
                };
                let keys = ByteTrie::new(props.iter().map(|p| p.key.as_slice()));
                Shape::Object {
                    props,
                    required,
                    additional,
                    keys,
                    min_props: ma.max(mb),
                    max_props: na.min(nb),
                }
            }
            (
                Shape::Array {
                    prefix: pa,
                    items: ia,
                    min_items: a0,
                    max_items: a1,
                    contains: ca,
                },
                Shape::Array {
                    prefix: pb,
                    items: ib,
                    min_items: b0,
                    max_items: b1,
                    contains: cb,
                },
            ) => {
                let n = pa.len().max(pb.len());
                let mut prefix = Vec::with_capacity(n);
                for i in 0..n {
                    let x = pa.get(i).copied().or(ia);
                    let y = pb.get(i).copied().or(ib);
                    prefix.push(match (x, y) {
                        (Some(x), Some(y)) => self.intersect(x, y, path)?,
                        _ => self.add(Shape::Never)?,
                    });
                }
                let items = match (ia, ib) {
                    (Some(x), Some(y)) => Some(self.intersect(x, y, path)?),
                    _ => None,
                };
                // One side's `contains`, its hits and misses met with the other's elements.
                let contains = match (ca, cb) {
                    (Some(_), Some(_)) => {
                        return Err(SchemaError::Unsupported {
                            keyword: "contains in more than one branch of allOf".into(),
                            path: path.to_string(),
                        })
                    }
                    (Some(c), None) => Some(self.contains_meet(&c, &pb, ib, n, path)?),
                    (None, Some(c)) => Some(self.contains_meet(&c, &pa, ia, n, path)?),
                    (None, None) => None,
                };
                Shape::Array {
                    prefix,
                    items,
                    min_items: a0.max(b0),
                    max_items: a1.min(b1),
                    contains,
                }
            }
            // `Any` met above; different types share no value.
            _ => Shape::Never,
        })
    }

    /// `c` with its hits and misses met with the elements of another array (`prefix`, then
    /// `items`), for `n` prefix positions and the rest.
    fn contains_meet(
        &mut self,
        c: &Contains,
        prefix: &[NodeId],
        items: Option<NodeId>,
        n: usize,
        path: &str,
    ) -> Result<Box<Contains>, SchemaError> {
        let (mut hit, mut miss) = (Vec::new(), Vec::new());
        for j in 0..=n as u32 {
            let (h, m) = c.at(j);
            let (h, m) = match prefix.get(j as usize).copied().or(items) {
                Some(y) => (self.intersect(h, y, path)?, self.intersect(m, y, path)?),
                None => (self.add(Shape::Never)?, self.add(Shape::Never)?),
            };
            hit.push(h);
            miss.push(m);
        }
        Ok(Box::new(Contains {
            hit,
            miss,
            min: c.min,
            max: c.max,
        }))
    }

    /// Node `id`: the values listed at `lit` that both its own schema and `other` admit
    /// (narrowed after compilation, against the two met).
    fn literal_meet(
        &mut self,
        id: NodeId,
        lit: NodeId,
        other: NodeId,
        path: &str,
    ) -> Result<Shape, SchemaError> {
        let (texts, base) = match self.listed.iter().find(|l| l.node == lit) {
            Some(l) => (l.texts.clone(), Some(l.base)),
            None => (Vec::new(), None),
        };
        let base = match base {
            Some(own) => self.intersect(own, other, path)?,
            None => other,
        };
        Ok(self.literal(id, base, texts))
    }

    /// Records a `oneOf` and meets its branches pair by pair, so that whether they exclude each
    /// other can be read once `min_bytes` is known (a pair that cannot be met counts as
    /// overlapping). Where a pair already shares a value here (literals not narrowed yet, so
    /// this may see an overlap narrowing removes, never miss one) and the branches are few, the
    /// exclusive form is built instead — each branch without the others, `B_i ∩ ¬B_j` — and
    /// returned; if it cannot be (a complement refused, too large), nothing of it stays.
    pub(super) fn one_of(&mut self, path: &str, branches: &[NodeId]) -> Option<NodeId> {
        let pairs = if branches.len() <= MAX_ONE_OF_CHECKED {
            let mut pairs = Vec::new();
            let mut ok = true;
            'outer: for i in 0..branches.len() {
                for j in i + 1..branches.len() {
                    match self.intersect(branches[i], branches[j], path) {
                        Ok(n) => pairs.push(n),
                        Err(_) => {
                            ok = false;
                            break 'outer;
                        }
                    }
                }
            }
            ok.then_some(pairs)
        } else {
            None
        };
        let overlap = pairs.as_ref().is_none_or(|p| self.some_admits(p));
        if overlap && branches.len() <= MAX_ONE_OF_EXACT {
            let mark = self.mark();
            match self.exclusive(branches, path) {
                Ok(node) => return Some(node),
                Err(_) => self.rollback(mark),
            }
        }
        self.one_ofs.push(OneOf {
            path: path.to_string(),
            pairs,
        });
        None
    }

    /// The union of each branch met with the others' complements.
    fn exclusive(&mut self, branches: &[NodeId], path: &str) -> Result<NodeId, SchemaError> {
        let mut alts = Vec::with_capacity(branches.len());
        for (i, &b) in branches.iter().enumerate() {
            let mut only = b;
            for (j, &other) in branches.iter().enumerate() {
                if i != j {
                    let not_other = self.complement(other, path)?;
                    only = self.intersect(only, not_other, path)?;
                }
            }
            alts.push(only);
        }
        self.add(Shape::Union(alts))
    }

    /// Whether any of `nodes` admits a value, on the graph as it stands (nodes still being
    /// compiled count as admitting any value: this may say yes wrongly, never no).
    fn some_admits(&self, nodes: &[NodeId]) -> bool {
        let mut graph = self.nodes.clone();
        for &u in &self.unfinished {
            graph[u as usize] = Shape::Any;
        }
        let mut schema = Schema::from_nodes(graph, 0);
        schema.compute_min_bytes();
        nodes.iter().any(|&n| schema.min_bytes(n) < INF)
    }

    /// Whether node `n` is finished and admits nothing.
    fn is_never(&self, n: NodeId) -> bool {
        self.nodes[n as usize] == Shape::Never
            && !self.unfinished.contains(&n)
            && !self.meeting.contains(&n)
    }

    /// Where the graph stands, to undo an attempt that fails.
    fn mark(&self) -> (usize, usize, usize) {
        (self.nodes.len(), self.listed.len(), self.one_ofs.len())
    }

    fn rollback(&mut self, (nodes, listed, one_ofs): (usize, usize, usize)) {
        self.nodes.truncate(nodes);
        self.listed.truncate(listed);
        self.one_ofs.truncate(one_ofs);
        let kept = |n: &NodeId| (*n as usize) < nodes;
        self.meets.retain(|(a, b), v| kept(a) && kept(b) && kept(v));
        self.negations.retain(|k, v| kept(k) && kept(v));
    }
}
