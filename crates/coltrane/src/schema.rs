//! A JSON Schema subset compiled to a graph of shapes the byte matcher walks. Supported: `type`
//! (one or a list), `properties`, `required`, `additionalProperties` (boolean or schema),
//! `items`, `prefixItems` (and draft-4 `items: [...]` with `additionalItems`), `enum`, `const`,
//! `minItems`/`maxItems`, `minLength`/`maxLength`, `anyOf`, `$ref` to `$defs`/`definitions`
//! (or any JSON pointer into the document, recursion included), boolean schemas, and the
//! annotations (`title`, `description`, `default`, `examples`, `format`, `$schema`, `$id`,
//! `$comment`, `deprecated`, `readOnly`, `writeOnly`). Any other keyword is an error naming it.
//!
//! `json` (any JSON value) is the schema `true`.

use serde_json::{Map, Value};
use std::collections::HashMap;

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
    },
    String {
        min_len: u32,
        max_len: u32,
    },
    Object {
        props: Vec<Prop>,
        /// Bit i set: `props[i]` is required.
        required: u64,
        /// The schema of other keys; `None`: no other keys.
        additional: Option<NodeId>,
        keys: KeyTrie,
    },
    Array {
        prefix: Vec<NodeId>,
        /// The schema of elements past the prefix; `None`: no more elements.
        items: Option<NodeId>,
        min_items: u32,
        max_items: u32,
    },
    /// One of these exact values (`enum`, `const`), matched in their compact serialization.
    Literal(LiteralTrie),
    /// Any of these shapes (`anyOf`, a list of types).
    Union(Vec<NodeId>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Prop {
    /// The key as it appears between the quotes (JSON-escaped, compact).
    pub key: Vec<u8>,
    pub node: NodeId,
}

/// A byte trie over a set of strings; node 0 is the root.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ByteTrie {
    children: Vec<Vec<(u8, u32)>>,
    /// The string index ending at each node, if any.
    end: Vec<Option<u32>>,
    /// Fewest bytes from each node to the end of some string.
    to_end: Vec<u32>,
}

impl ByteTrie {
    pub fn new<'a>(strings: impl IntoIterator<Item = &'a [u8]>) -> ByteTrie {
        let mut t = ByteTrie {
            children: vec![Vec::new()],
            end: vec![None],
            to_end: Vec::new(),
        };
        for (i, s) in strings.into_iter().enumerate() {
            let mut node = 0usize;
            for &b in s {
                node = match t.children[node].iter().find(|c| c.0 == b) {
                    Some(&(_, next)) => next as usize,
                    None => {
                        t.children.push(Vec::new());
                        t.end.push(None);
                        let next = t.children.len() - 1;
                        t.children[node].push((b, next as u32));
                        next
                    }
                };
            }
            t.end[node].get_or_insert(i as u32);
        }
        // Children are created after their parents: one backward pass finds the distances.
        t.to_end = vec![u32::MAX; t.children.len()];
        for n in (0..t.children.len()).rev() {
            let below = t.children[n]
                .iter()
                .map(|&(_, c)| t.to_end[c as usize].saturating_add(1))
                .min()
                .unwrap_or(u32::MAX);
            t.to_end[n] = if t.end[n].is_some() { 0 } else { below };
        }
        t
    }

    pub fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.children[node as usize]
            .iter()
            .find(|c| c.0 == b)
            .map(|c| c.1)
    }

    pub fn end(&self, node: u32) -> Option<u32> {
        self.end[node as usize]
    }

    pub fn to_end(&self, node: u32) -> u32 {
        self.to_end[node as usize]
    }
}

pub type KeyTrie = ByteTrie;
pub type LiteralTrie = ByteTrie;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("unsupported JSON Schema keyword {keyword:?} at {path}")]
    Unsupported { keyword: String, path: String },
    #[error("invalid schema at {path}: {reason}")]
    Invalid { path: String, reason: String },
    #[error("$ref {0:?} does not resolve in this document (only local refs: \"#\", \"#/$defs/…\", \"#/definitions/…\")")]
    Ref(String),
    #[error("the schema admits no finite JSON value")]
    NoInstance,
    #[error("the schema is too large: {0}")]
    TooLarge(String),
}

/// Keywords that only annotate.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "format",
    "$schema",
    "$id",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
    "contentMediaType",
    "contentEncoding",
];

/// Limits that keep a compiled schema small enough for the matcher's state.
const MAX_NODES: usize = 4096;
/// Declared properties of one object (tracked as bits of a u64).
const MAX_PROPS: usize = 64;

/// A compiled schema.
#[derive(Debug, Clone)]
pub struct Schema {
    nodes: Vec<Shape>,
    root: NodeId,
    /// Fewest bytes of any value of each node.
    min_bytes: Vec<u32>,
}

/// "Unreachable" for byte counts.
pub const INF: u32 = u32::MAX / 4;

impl Schema {
    /// Any JSON value (the `json` preset).
    pub fn any() -> Schema {
        let mut s = Schema {
            nodes: vec![Shape::Any],
            root: 0,
            min_bytes: Vec::new(),
        };
        s.compute_min_bytes();
        s
    }

    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
        let mut c = Compiler {
            doc: schema,
            nodes: Vec::new(),
            by_pointer: HashMap::new(),
        };
        let root = c.compile_at("#", schema)?;
        let mut s = Schema {
            nodes: c.nodes,
            root,
            min_bytes: Vec::new(),
        };
        s.compute_min_bytes();
        if s.min_bytes[root as usize] >= INF {
            return Err(SchemaError::NoInstance);
        }
        Ok(s)
    }

    pub fn root(&self) -> NodeId {
        self.root
    }

    pub fn shape(&self, id: NodeId) -> &Shape {
        &self.nodes[id as usize]
    }

    pub fn min_bytes(&self, id: NodeId) -> u32 {
        self.min_bytes[id as usize]
    }

    /// Fewest bytes of each node's values, by fixed-point iteration (refs may recurse).
    fn compute_min_bytes(&mut self) {
        let n = self.nodes.len();
        self.min_bytes = vec![INF; n];
        for _ in 0..n + 2 {
            let mut changed = false;
            for i in 0..n {
                let m = self.min_of(&self.nodes[i]);
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

    fn min_of(&self, shape: &Shape) -> u32 {
        let mb = |id: NodeId| self.min_bytes[id as usize];
        let add = |a: u32, b: u32| a.saturating_add(b).min(INF);
        match shape {
            Shape::Any | Shape::Number { .. } => 1,
            Shape::Never => INF,
            Shape::Null | Shape::Boolean => 4,
            Shape::String { min_len, .. } => add(2, *min_len),
            Shape::Literal(t) => match t.to_end(0) {
                u32::MAX => INF,
                d => d,
            },
            Shape::Union(alts) => alts.iter().map(|&a| mb(a)).min().unwrap_or(INF),
            Shape::Object {
                props, required, ..
            } => {
                let mut total = 2u32;
                let mut k = 0;
                for (i, p) in props.iter().enumerate() {
                    if required & (1 << i) != 0 {
                        total = add(total, add(p.key.len() as u32 + 3, mb(p.node)));
                        k += 1;
                    }
                }
                add(total, k.max(1) - 1)
            }
            Shape::Array {
                prefix,
                items,
                min_items,
                ..
            } => {
                let mut total = 2u32;
                for i in 0..*min_items as usize {
                    let elem = prefix.get(i).copied().or(*items);
                    total = add(total, elem.map_or(INF, mb));
                }
                add(total, min_items.saturating_sub(1))
            }
        }
    }
}

struct Compiler<'a> {
    doc: &'a Value,
    nodes: Vec<Shape>,
    /// Nodes already compiled for a JSON pointer (refs and recursion share them).
    by_pointer: HashMap<String, NodeId>,
}

impl<'a> Compiler<'a> {
    fn add(&mut self, shape: Shape) -> Result<NodeId, SchemaError> {
        if self.nodes.len() >= MAX_NODES {
            return Err(SchemaError::TooLarge(format!(
                "more than {MAX_NODES} nodes"
            )));
        }
        self.nodes.push(shape);
        Ok((self.nodes.len() - 1) as NodeId)
    }

    fn invalid(path: &str, reason: impl Into<String>) -> SchemaError {
        SchemaError::Invalid {
            path: path.to_string(),
            reason: reason.into(),
        }
    }

    /// Compiles the schema at JSON pointer `path` (memoized, so `$ref` cycles terminate).
    fn compile_at(&mut self, path: &str, v: &'a Value) -> Result<NodeId, SchemaError> {
        if let Some(&id) = self.by_pointer.get(path) {
            return Ok(id);
        }
        // Reserve the node first: a recursive `$ref` back here finds it.
        let id = self.add(Shape::Never)?;
        self.by_pointer.insert(path.to_string(), id);
        let shape = self.compile_value(path, v)?;
        self.nodes[id as usize] = shape;
        Ok(id)
    }

    fn compile_value(&mut self, path: &str, v: &'a Value) -> Result<Shape, SchemaError> {
        let obj = match v {
            Value::Bool(true) => return Ok(Shape::Any),
            Value::Bool(false) => return Ok(Shape::Never),
            Value::Object(o) => o,
            _ => {
                return Err(Self::invalid(
                    path,
                    "a schema must be an object or a boolean",
                ))
            }
        };
        for key in obj.keys() {
            let known = ANNOTATIONS.contains(&key.as_str())
                || matches!(
                    key.as_str(),
                    "type"
                        | "properties"
                        | "required"
                        | "additionalProperties"
                        | "items"
                        | "prefixItems"
                        | "additionalItems"
                        | "enum"
                        | "const"
                        | "minItems"
                        | "maxItems"
                        | "minLength"
                        | "maxLength"
                        | "anyOf"
                        | "$ref"
                );
            if !known {
                return Err(SchemaError::Unsupported {
                    keyword: key.clone(),
                    path: path.to_string(),
                });
            }
        }
        if let Some(r) = obj.get("$ref") {
            let constraints = obj
                .keys()
                .filter(|k| *k != "$ref" && !ANNOTATIONS.contains(&k.as_str()))
                .count();
            if constraints > 0 {
                return Err(SchemaError::Unsupported {
                    keyword: "$ref with sibling constraints".into(),
                    path: path.to_string(),
                });
            }
            let r = r
                .as_str()
                .ok_or_else(|| Self::invalid(path, "$ref must be a string"))?;
            let target = resolve_pointer(self.doc, r).ok_or_else(|| SchemaError::Ref(r.into()))?;
            let pointer = if r == "#" {
                "#".to_string()
            } else {
                r.to_string()
            };
            let id = self.compile_at(&pointer, target)?;
            return Ok(Shape::Union(vec![id]));
        }
        if let Some(alts) = obj.get("anyOf") {
            let alts = alts
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| Self::invalid(path, "anyOf must be a non-empty array"))?;
            let siblings = obj
                .keys()
                .filter(|k| *k != "anyOf" && !ANNOTATIONS.contains(&k.as_str()))
                .count();
            if siblings > 0 {
                return Err(SchemaError::Unsupported {
                    keyword: "anyOf with sibling constraints".into(),
                    path: path.to_string(),
                });
            }
            let mut ids = Vec::new();
            for (i, a) in alts.iter().enumerate() {
                ids.push(self.compile_at(&format!("{path}/anyOf/{i}"), a)?);
            }
            return Ok(Shape::Union(ids));
        }

        // The types the instance may have; every other keyword constrains its own type only.
        let all = [
            "null", "boolean", "number", "integer", "string", "object", "array",
        ];
        let types: Vec<&str> = match obj.get("type") {
            None => all.iter().filter(|t| **t != "integer").copied().collect(),
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(list)) => list
                .iter()
                .map(|t| {
                    t.as_str()
                        .ok_or_else(|| Self::invalid(path, "type list entries must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(Self::invalid(path, "type must be a string or an array")),
        };
        for t in &types {
            if !all.contains(t) {
                return Err(Self::invalid(path, format!("unknown type {t:?}")));
            }
        }
        let has_number = types.contains(&"number");
        let mut alts = Vec::new();
        for t in &types {
            let shape = match *t {
                "null" => Shape::Null,
                "boolean" => Shape::Boolean,
                "number" => Shape::Number { integer: false },
                "integer" if has_number => continue,
                "integer" => Shape::Number { integer: true },
                "string" => self.string(path, obj)?,
                "object" => self.object(path, obj)?,
                "array" => self.array(path, obj)?,
                _ => continue,
            };
            alts.push(shape);
        }
        let mut shape = match alts.len() {
            0 => Shape::Never,
            1 => alts.pop().unwrap_or(Shape::Never),
            _ => {
                let mut ids = Vec::new();
                for s in alts {
                    ids.push(self.add(s)?);
                }
                Shape::Union(ids)
            }
        };
        // enum / const: the listed values that the rest of the schema admits.
        let listed: Option<Vec<&Value>> = match (obj.get("enum"), obj.get("const")) {
            (Some(_), Some(_)) => {
                return Err(SchemaError::Unsupported {
                    keyword: "enum with const".into(),
                    path: path.to_string(),
                })
            }
            (Some(Value::Array(values)), None) => Some(values.iter().collect()),
            (Some(_), None) => return Err(Self::invalid(path, "enum must be an array")),
            (None, Some(c)) => Some(vec![c]),
            (None, None) => None,
        };
        if let Some(values) = listed {
            let base = self.add(shape)?;
            let admitted: Vec<Vec<u8>> = values
                .into_iter()
                .map(|v| serde_json::to_vec(v).unwrap_or_default())
                .filter(|text| self.admits(base, text))
                .collect();
            shape = Shape::Literal(ByteTrie::new(admitted.iter().map(Vec::as_slice)));
        }
        Ok(shape)
    }

    /// Whether node `id` (as compiled so far) accepts `text` exactly.
    fn admits(&self, id: NodeId, text: &[u8]) -> bool {
        let mut schema = Schema {
            nodes: self.nodes.clone(),
            root: id,
            min_bytes: Vec::new(),
        };
        schema.compute_min_bytes();
        crate::machine::accepts(&schema, text)
    }

    fn count(path: &str, obj: &Map<String, Value>, key: &str) -> Result<Option<u32>, SchemaError> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                })
                .map(|n| Some(n.min(u32::MAX as u64 / 2) as u32))
                .ok_or_else(|| {
                    Self::invalid(path, format!("{key} must be a non-negative integer"))
                }),
        }
    }

    fn string(&mut self, path: &str, obj: &Map<String, Value>) -> Result<Shape, SchemaError> {
        Ok(Shape::String {
            min_len: Self::count(path, obj, "minLength")?.unwrap_or(0),
            max_len: Self::count(path, obj, "maxLength")?.unwrap_or(u32::MAX),
        })
    }

    fn object(&mut self, path: &str, obj: &'a Map<String, Value>) -> Result<Shape, SchemaError> {
        let mut props = Vec::new();
        if let Some(p) = obj.get("properties") {
            let p = p
                .as_object()
                .ok_or_else(|| Self::invalid(path, "properties must be an object"))?;
            if p.len() > MAX_PROPS {
                return Err(SchemaError::TooLarge(format!(
                    "{path}: more than {MAX_PROPS} properties"
                )));
            }
            for (name, sub) in p {
                let key = serde_json::to_vec(&Value::String(name.clone())).unwrap_or_default();
                let node =
                    self.compile_at(&format!("{path}/properties/{}", escape_pointer(name)), sub)?;
                props.push(Prop {
                    key: key[1..key.len() - 1].to_vec(),
                    node,
                });
            }
        }
        let mut required = 0u64;
        if let Some(r) = obj.get("required") {
            let r = r
                .as_array()
                .ok_or_else(|| Self::invalid(path, "required must be an array"))?;
            for name in r {
                let name = name
                    .as_str()
                    .ok_or_else(|| Self::invalid(path, "required entries must be strings"))?;
                match obj
                    .get("properties")
                    .and_then(Value::as_object)
                    .and_then(|p| p.keys().position(|k| k == name))
                {
                    Some(i) => required |= 1 << i,
                    None => {
                        // A required key without a declared schema: declare it as any value
                        // (or as the additional schema, which decides whether it may exist).
                        if props.len() >= MAX_PROPS {
                            return Err(SchemaError::TooLarge(format!(
                                "{path}: more than {MAX_PROPS} properties"
                            )));
                        }
                        let node = match obj.get("additionalProperties") {
                            Some(a) => {
                                self.compile_at(&format!("{path}/additionalProperties"), a)?
                            }
                            None => self.add(Shape::Any)?,
                        };
                        let key = serde_json::to_vec(&Value::String(name.to_string()))
                            .unwrap_or_default();
                        props.push(Prop {
                            key: key[1..key.len() - 1].to_vec(),
                            node,
                        });
                        required |= 1 << (props.len() - 1);
                    }
                }
            }
        }
        let additional = match obj.get("additionalProperties") {
            None | Some(Value::Bool(true)) => Some(self.add(Shape::Any)?),
            Some(Value::Bool(false)) => None,
            Some(a) => Some(self.compile_at(&format!("{path}/additionalProperties"), a)?),
        };
        let keys = ByteTrie::new(props.iter().map(|p| p.key.as_slice()));
        Ok(Shape::Object {
            props,
            required,
            additional,
            keys,
        })
    }

    fn array(&mut self, path: &str, obj: &'a Map<String, Value>) -> Result<Shape, SchemaError> {
        let mut prefix = Vec::new();
        let mut items = None;
        let mut items_set = false;
        if let Some(p) = obj.get("prefixItems") {
            let p = p
                .as_array()
                .ok_or_else(|| Self::invalid(path, "prefixItems must be an array"))?;
            for (i, s) in p.iter().enumerate() {
                prefix.push(self.compile_at(&format!("{path}/prefixItems/{i}"), s)?);
            }
        }
        match obj.get("items") {
            Some(Value::Array(list)) => {
                // Draft 4–2019: a tuple, with `additionalItems` after it.
                if !prefix.is_empty() {
                    return Err(Self::invalid(path, "items as an array with prefixItems"));
                }
                for (i, s) in list.iter().enumerate() {
                    prefix.push(self.compile_at(&format!("{path}/items/{i}"), s)?);
                }
                items = match obj.get("additionalItems") {
                    None | Some(Value::Bool(true)) => Some(self.add(Shape::Any)?),
                    Some(Value::Bool(false)) => None,
                    Some(a) => Some(self.compile_at(&format!("{path}/additionalItems"), a)?),
                };
                items_set = true;
            }
            Some(s) => {
                items = match s {
                    Value::Bool(false) => None,
                    s => Some(self.compile_at(&format!("{path}/items"), s)?),
                };
                items_set = true;
            }
            None => {
                if obj.contains_key("additionalItems") {
                    // Without a tuple `items`, additionalItems has no effect.
                }
            }
        }
        if !items_set {
            items = Some(self.add(Shape::Any)?);
        }
        let min_items = Self::count(path, obj, "minItems")?.unwrap_or(0);
        let max_items = Self::count(path, obj, "maxItems")?.unwrap_or(u32::MAX);
        Ok(Shape::Array {
            prefix,
            items,
            min_items,
            max_items,
        })
    }
}

fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The value at a local `$ref` ("#", "#/a/b/0", with ~0/~1 and %-escapes) in `doc`.
fn resolve_pointer<'v>(doc: &'v Value, r: &str) -> Option<&'v Value> {
    let rest = r.strip_prefix('#')?;
    if rest.is_empty() {
        return Some(doc);
    }
    let rest = rest.strip_prefix('/')?;
    let mut v = doc;
    for raw in rest.split('/') {
        let part = percent_decode(raw)?.replace("~1", "/").replace("~0", "~");
        v = match v {
            Value::Object(o) => o.get(&part)?,
            Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unsupported_keywords_are_named() {
        for (schema, keyword) in [
            (json!({"type": "integer", "minimum": 3}), "minimum"),
            (json!({"properties": {"a": {"pattern": "x"}}}), "pattern"),
            (json!({"allOf": [true]}), "allOf"),
            (json!({"oneOf": [true]}), "oneOf"),
            (json!({"not": true}), "not"),
            (
                json!({"anyOf": [true], "type": "string"}),
                "anyOf with sibling constraints",
            ),
        ] {
            match Schema::compile(&schema) {
                Err(SchemaError::Unsupported { keyword: k, .. }) => assert_eq!(k, keyword),
                other => panic!("{schema}: {other:?}"),
            }
        }
    }

    #[test]
    fn refs_resolve_and_recursion_terminates() {
        let s = Schema::compile(&json!({
            "$defs": {"node": {"type": "object", "properties": {
                "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}}}},
            "$ref": "#/$defs/node"
        }))
        .unwrap();
        assert_eq!(s.min_bytes(s.root()), 2);
        assert!(matches!(
            Schema::compile(&json!({"$ref": "#/$defs/missing"})),
            Err(SchemaError::Ref(_))
        ));
        // A required recursion has no finite instance.
        assert_eq!(
            Schema::compile(&json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}}, "$ref": "#/$defs/a"}))
                .unwrap_err(),
            SchemaError::NoInstance
        );
    }

    #[test]
    fn minimal_sizes() {
        let s = Schema::compile(&json!({"type": "object", "properties": {
            "name": {"type": "string", "minLength": 2}, "age": {"type": "integer"}},
            "required": ["name", "age"]}))
        .unwrap();
        // {"name":"xx","age":0}
        assert_eq!(
            s.min_bytes(s.root()),
            r#"{"name":"xx","age":0}"#.len() as u32
        );
        let s = Schema::compile(&json!({"enum": ["abc", 12, null]})).unwrap();
        assert_eq!(s.min_bytes(s.root()), 2);
    }

    #[test]
    fn byte_trie_distances() {
        let t = ByteTrie::new([&b"abc"[..], b"ab", b"x"]);
        assert_eq!(t.to_end(0), 1);
        let a = t.child(0, b'a').unwrap();
        assert_eq!(t.to_end(a), 1);
        let ab = t.child(a, b'b').unwrap();
        assert_eq!((t.to_end(ab), t.end(ab)), (0, Some(1)));
    }
}
