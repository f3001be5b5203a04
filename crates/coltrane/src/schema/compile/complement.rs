//! The complement of a compiled schema (`not`, the `else` side of `if`, the exclusivity of
//! `oneOf`), exact on what each shape *means*: every value of another type, plus the values of
//! the same type that break one of its rules — a number below the lower bound, above the upper
//! one or off the multiple (an integer: any number with a fraction); a string shorter than the
//! minimum or longer than the maximum; an object missing a required key, holding a declared one whose
//! value the key's schema refuses, or with too few or too many members; an array too short, too long, or with a prefix
//! element its schema refuses; any value but the listed ones of an `enum`/`const` of scalars.
//! A union's complement is the intersection of its alternatives'.
//!
//! Built on meanings, not on what the matcher reads: a rule's number written with an exponent
//! is refused by the matcher but is still a value of the rule, so its complement does not
//! admit it either. What has no exact complement here is refused naming it (a `pattern`, an
//! object whose other keys are constrained, array items past a prefix, listed objects and
//! arrays, a schema that refers back to itself).

use super::Compiler;
use crate::number::{Bound, Decimal, NumberRule};
use crate::pattern::Pattern;
use crate::schema::{ByteTrie, NodeId, Prop, SchemaError, Shape};
use serde_json::Value;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// The seven JSON types as shapes go (`integer` is a number rule).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Boolean,
    Number,
    String,
    Object,
    Array,
}

const KINDS: [Kind; 6] = [
    Kind::Null,
    Kind::Boolean,
    Kind::Number,
    Kind::String,
    Kind::Object,
    Kind::Array,
];

impl Compiler<'_> {
    /// A node admitting exactly the values `a` refuses.
    pub(super) fn complement(&mut self, a: NodeId, path: &str) -> Result<NodeId, SchemaError> {
        if let Some(&n) = self.negations.get(&a) {
            return Ok(n);
        }
        if self.unfinished.contains(&a) || self.meeting.contains(&a) {
            return Err(refused(
                "not over a schema that refers back to itself",
                path,
            ));
        }
        let shape = self.nodes[a as usize].clone();
        let alts: Vec<NodeId> = match shape {
            Shape::Any => vec![],
            Shape::Never => vec![self.add(Shape::Any)?],
            Shape::Union(alts) => {
                let mut met = self.add(Shape::Any)?;
                for x in alts {
                    let not_x = self.complement(x, path)?;
                    met = self.intersect(met, not_x, path)?;
                }
                vec![met]
            }
            Shape::Literal(_) => return self.literal_complement(a, path),
            Shape::Null => self.others(Kind::Null)?,
            Shape::Boolean => self.others(Kind::Boolean)?,
            Shape::Number { integer, rule } => {
                let mut out = self.others(Kind::Number)?;
                let rule = match rule {
                    Some(r) => *r,
                    None => NumberRule::new(integer, None, None, None)
                        .map_err(|_| refused("not of this number", path))?,
                };
                for r in rule.complements() {
                    out.push(self.add(Shape::Number {
                        integer: false,
                        rule: Some(Box::new(r)),
                    })?);
                }
                out
            }
            Shape::String {
                pattern: Some(_), ..
            } => return Err(refused("not of a pattern or format", path)),
            Shape::String {
                min_len, max_len, ..
            } => {
                let mut out = self.others(Kind::String)?;
                if min_len > 0 {
                    out.push(self.add(string(0, min_len - 1))?);
                }
                if max_len < u32::MAX {
                    out.push(self.add(string(max_len + 1, u32::MAX))?);
                }
                out
            }
            Shape::Object {
                props,
                required,
                additional,
                min_props,
                max_props,
                ..
            } => {
                let mut out = self.others(Kind::Object)?;
                let any = self.add(Shape::Any)?;
                if min_props > 0 {
                    out.push(self.add(members(any, 0, min_props - 1))?);
                }
                if max_props < u32::MAX {
                    out.push(self.add(members(any, max_props + 1, u32::MAX))?);
                }
                match additional {
                    Some(x) if self.nodes[x as usize] == Shape::Any => {}
                    _ => {
                        return Err(refused(
                            "not of an object whose other keys are constrained",
                            path,
                        ))
                    }
                }
                for (i, p) in props.iter().enumerate() {
                    if required & (1 << i) != 0 {
                        // Without the key.
                        let never = self.add(Shape::Never)?;
                        out.push(self.object_with(&p.key, never, false)?);
                    }
                    if self.nodes[p.node as usize] != Shape::Any {
                        // With the key, its value refused.
                        let bad = self.complement(p.node, path)?;
                        out.push(self.object_with(&p.key, bad, true)?);
                    }
                }
                out
            }
            Shape::Array {
                contains: Some(_), ..
            } => return Err(refused("not of contains", path)),
            Shape::Array {
                prefix,
                items,
                min_items,
                max_items,
                contains: None,
            } => {
                let mut out = self.others(Kind::Array)?;
                let any = self.add(Shape::Any)?;
                if min_items > 0 {
                    out.push(self.add(array(vec![], Some(any), 0, min_items - 1))?);
                }
                if max_items < u32::MAX {
                    out.push(self.add(array(vec![], Some(any), max_items + 1, u32::MAX))?);
                }
                for (i, &p) in prefix.iter().enumerate() {
                    if self.nodes[p as usize] != Shape::Any {
                        let mut elems = vec![any; i];
                        elems.push(self.complement(p, path)?);
                        out.push(self.add(array(elems, Some(any), i as u32 + 1, u32::MAX))?);
                    }
                }
                match items {
                    // Longer than the prefix.
                    None => {
                        let n = prefix.len() as u32;
                        out.push(self.add(array(vec![], Some(any), n + 1, u32::MAX))?);
                    }
                    Some(x) if self.nodes[x as usize] == Shape::Any => {}
                    Some(_) => return Err(refused("not of array items", path)),
                }
                out
            }
        };
        let id = self.add(Shape::Union(alts))?;
        self.negations.insert(a, id);
        Ok(id)
    }

    /// Every value that is not an object.
    pub(super) fn non_objects(&mut self) -> Result<Vec<NodeId>, SchemaError> {
        self.others(Kind::Object)
    }

    /// Every value of a type other than `kind`.
    fn others(&mut self, kind: Kind) -> Result<Vec<NodeId>, SchemaError> {
        let mut out = Vec::new();
        for k in KINDS {
            if k != kind {
                out.push(self.any_of_kind(k)?);
            }
        }
        Ok(out)
    }

    fn any_of_kind(&mut self, kind: Kind) -> Result<NodeId, SchemaError> {
        let shape = match kind {
            Kind::Null => Shape::Null,
            Kind::Boolean => Shape::Boolean,
            Kind::Number => Shape::Number {
                integer: false,
                rule: None,
            },
            Kind::String => string(0, u32::MAX),
            Kind::Object => {
                let any = self.add(Shape::Any)?;
                object(vec![], 0, Some(any))
            }
            Kind::Array => {
                let any = self.add(Shape::Any)?;
                array(vec![], Some(any), 0, u32::MAX)
            }
        };
        self.add(shape)
    }

    /// An object whose key `key` (JSON-escaped) has the schema `node` (required or not), any
    /// other keys any values.
    pub(super) fn object_with(
        &mut self,
        key: &[u8],
        node: NodeId,
        required: bool,
    ) -> Result<NodeId, SchemaError> {
        let any = self.add(Shape::Any)?;
        let props = vec![Prop {
            key: key.to_vec(),
            node,
        }];
        self.add(object(props, u64::from(required), Some(any)))
    }

    /// The complement of the listed values at `lit` (scalars only), within what its own schema
    /// admits, plus everything that schema refuses.
    fn literal_complement(&mut self, lit: NodeId, path: &str) -> Result<NodeId, SchemaError> {
        let Some(listed) = self.listed.iter().find(|l| l.node == lit) else {
            return Err(refused("not of these values", path));
        };
        let (texts, base) = (listed.texts.clone(), listed.base);
        let values: Vec<Value> = texts
            .iter()
            .filter_map(|t| serde_json::from_slice(t).ok())
            .collect();
        let mut alts = Vec::new();
        // Values of each type but the listed ones.
        let has = |f: &dyn Fn(&Value) -> bool| values.iter().any(f);
        if !has(&|v| v.is_null()) {
            alts.push(self.any_of_kind(Kind::Null)?);
        }
        let bools: Vec<&[u8]> = [&b"true"[..], &b"false"[..]]
            .into_iter()
            .filter(|w| !texts.iter().any(|t| t == w))
            .collect();
        if bools.len() == 2 {
            alts.push(self.any_of_kind(Kind::Boolean)?);
        } else if let [w] = bools[..] {
            let any = self.add(Shape::Any)?;
            let id = self.add(Shape::Never)?;
            let shape = self.literal(id, any, vec![w.to_vec()]);
            self.nodes[id as usize] = shape;
            alts.push(id);
        }
        for r in number_gaps(&values) {
            alts.push(self.add(Shape::Number {
                integer: false,
                rule: Some(Box::new(r)),
            })?);
        }
        let strings: Vec<&str> = values.iter().filter_map(Value::as_str).collect();
        alts.push(match strings.is_empty() {
            true => self.any_of_kind(Kind::String)?,
            false => {
                let source = format!("^{}$", not_these(&strings));
                let p = Pattern::compile(&source, 0, u32::MAX).map_err(|e| {
                    SchemaError::TooLarge(format!("{path}: not of these strings: {e}"))
                })?;
                self.add(Shape::String {
                    min_len: 0,
                    max_len: u32::MAX,
                    pattern: Some(Box::new(p)),
                })?
            }
        });
        for (kind, listed) in [
            (Kind::Object, has(&|v| v.is_object())),
            (Kind::Array, has(&|v| v.is_array())),
        ] {
            if listed {
                return Err(refused("not of listed objects or arrays", path));
            }
            alts.push(self.any_of_kind(kind)?);
        }
        // Within the base: the other values; outside it: everything.
        let set = self.add(Shape::Union(alts))?;
        let inside = self.intersect(base, set, path)?;
        let outside = self.complement(base, path)?;
        let id = self.add(Shape::Union(vec![inside, outside]))?;
        self.negations.insert(lit, id);
        Ok(id)
    }
}

fn refused(what: &str, path: &str) -> SchemaError {
    SchemaError::Unsupported {
        keyword: what.to_string(),
        path: path.to_string(),
    }
}

fn string(min_len: u32, max_len: u32) -> Shape {
    Shape::String {
        min_len,
        max_len,
        pattern: None,
    }
}

fn object(props: Vec<Prop>, required: u64, additional: Option<NodeId>) -> Shape {
    let keys = ByteTrie::new(props.iter().map(|p| p.key.as_slice()));
    Shape::Object {
        props,
        required,
        additional,
        keys,
        min_props: 0,
        max_props: u32::MAX,
    }
}

/// Objects of `min_props..=max_props` members, any keys, any values.
fn members(any: NodeId, min_props: u32, max_props: u32) -> Shape {
    Shape::Object {
        props: Vec::new(),
        required: 0,
        additional: Some(any),
        keys: ByteTrie::new(std::iter::empty()),
        min_props,
        max_props,
    }
}

fn array(prefix: Vec<NodeId>, items: Option<NodeId>, min_items: u32, max_items: u32) -> Shape {
    Shape::Array {
        prefix,
        items,
        min_items,
        max_items,
        contains: None,
    }
}

/// Rules for every number but the listed ones: below the least, between each two, above the
/// greatest (none listed: every number).
fn number_gaps(values: &[Value]) -> Vec<NumberRule> {
    let mut listed: Vec<Decimal> = values
        .iter()
        .filter_map(|v| v.as_number().and_then(Decimal::of))
        .collect();
    listed.sort_by(|a, b| a.cmp_value(b));
    listed.dedup_by(|a, b| a.cmp_value(b) == Ordering::Equal);
    let bound = |d: &Decimal| {
        Some(Bound {
            value: d.clone(),
            exclusive: true,
        })
    };
    let mut lows = vec![None];
    lows.extend(listed.iter().map(bound));
    let mut highs: Vec<Option<Bound>> = listed.iter().map(bound).collect();
    highs.push(None);
    lows.into_iter()
        .zip(highs)
        .filter_map(|(lo, hi)| NumberRule::new(false, lo, hi, None).ok())
        .collect()
}

/// A regular expression (unanchored body) for every string but `words`: through a trie of
/// their characters, at each node the text may end (unless a word does), go on with a character
/// no word has next (then anything), or follow a word.
fn not_these(words: &[&str]) -> String {
    #[derive(Default)]
    struct Node {
        end: bool,
        next: BTreeMap<char, Node>,
    }
    let mut root = Node::default();
    for w in words {
        let mut n = &mut root;
        for c in w.chars() {
            n = n.next.entry(c).or_default();
        }
        n.end = true;
    }
    fn escape(c: char, in_class: bool) -> String {
        let special = if in_class {
            "\\]^-["
        } else {
            "\\^$.|?*+()[]{}/"
        };
        match c {
            c if special.contains(c) => format!("\\{c}"),
            c if (c as u32) < 0x20 => format!("\\x{:02x}", c as u32),
            c => c.to_string(),
        }
    }
    fn walk(n: &Node) -> String {
        let mut alts = Vec::new();
        if !n.end {
            alts.push(String::new());
        }
        if n.next.is_empty() {
            alts.push("[\\s\\S]+".into());
        } else {
            let class: String = n.next.keys().map(|&c| escape(c, true)).collect();
            alts.push(format!("[^{class}][\\s\\S]*"));
            for (&c, child) in &n.next {
                alts.push(format!("{}{}", escape(c, false), walk(child)));
            }
        }
        format!("(?:{})", alts.join("|"))
    }
    walk(&root)
}

#[cfg(test)]
mod tests {
    use super::not_these;
    use crate::pattern::Pattern;

    #[test]
    fn the_complement_of_a_few_strings() {
        let p = Pattern::compile(
            &format!("^{}$", not_these(&["foo", "fo", "a]b"])),
            0,
            u32::MAX,
        )
        .unwrap();
        for s in ["foo", "fo", "a]b"] {
            assert!(!p.matches(s), "{s}");
        }
        for s in ["", "f", "fop", "fooo", "x", "a]", "a]bc", "ab", "\n"] {
            assert!(p.matches(s), "{s:?}");
        }
    }
}
