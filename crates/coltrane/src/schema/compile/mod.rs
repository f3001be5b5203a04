//! Compiling a JSON Schema document into the shape graph: keywords to shapes, `$ref`s resolved
//! (every JSON pointer compiled once, so recursion shares nodes), the limits that keep the graph
//! small, and the refusal of cycles that enter no container.

mod complement;
mod dependent;
mod intersect;

/// Branches of one `oneOf` checked pair by pair (`intersect.rs`); more are not checked (and so
/// not known to exclude each other).
const MAX_ONE_OF_CHECKED: usize = 16;

/// Branches of an overlapping `oneOf` made exclusive (each branch without the others); more
/// are matched as a union and the overlap is said.
const MAX_ONE_OF_EXACT: usize = 4;

/// A `oneOf`, and the intersection of each pair of its branches (`None`: not built).
#[derive(Debug, Clone)]
pub(crate) struct OneOf {
    pub path: String,
    pub pairs: Option<Vec<NodeId>>,
}

use super::resources::{ref_overrides, Resources};
use super::{ByteTrie, Contains, NodeId, Prop, Schema, SchemaError, Shape};
use crate::format::{format_pattern, Formats};
use crate::number::{Bound, Decimal, NumberRule, RuleError, MAX_MULTIPLE};
use crate::pattern::{Pattern, PatternError};
use serde_json::{Map, Value};
use std::collections::HashMap;

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
    "$anchor",
    "$vocabulary",
    "example",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
];

/// Limits that keep a compiled schema small enough for the matcher's state.
const MAX_NODES: usize = 4096;
/// Declared properties of one object (tracked as bits of a u64).
const MAX_PROPS: usize = 64;
/// Schemas being compiled inside one another (every `$ref` followed is a level): compilation
/// recurses once per level, so this bounds its stack. A parsed document nests at most 128 JSON
/// levels (serde_json's limit), so without refs a schema stays well under it; a chain of refs
/// through `$defs` nests no JSON at all, and would otherwise recurse once per ref.
pub(super) const MAX_DEPTH: usize = 256;

/// An `enum` or `const` as compiled: every value it lists, before narrowing.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// The literal's node.
    pub node: NodeId,
    /// The rest of the schema where the values are listed (its types, lengths, properties…): a
    /// value is kept only if this node admits it too.
    pub base: NodeId,
    /// Each value's compact serialization, in the order listed.
    pub texts: Vec<Vec<u8>>,
    /// Nodes still being compiled when the values were listed (the literal's own, and any
    /// enclosing schema a `$ref` may lead back to): they admit nothing when it is narrowed, as
    /// they did when narrowing ran during compilation.
    pub unfinished: Vec<NodeId>,
}

/// A compiled schema whose literals still hold every listed value.
pub(crate) struct Draft {
    /// The graph; `min_bytes` is not computed yet.
    pub schema: Schema,
    /// The literals, in the order their compilation finished (inner ones first, so narrowing
    /// one sees the literals inside its base already narrowed).
    pub listed: Vec<Listed>,
    /// Every `oneOf`, with its branches' pairwise intersections.
    pub one_ofs: Vec<OneOf>,
    /// Formats kept as annotations, one line each.
    pub annotations: Vec<String>,
}

impl Draft {
    /// Compiles a JSON Schema, every `enum`/`const` value kept.
    pub fn compile(schema: &Value, formats: Formats) -> Result<Draft, SchemaError> {
        let mut c = Compiler {
            doc: schema,
            formats,
            resources: Resources::of(schema),
            nodes: Vec::new(),
            by_pointer: HashMap::new(),
            unfinished: Vec::new(),
            listed: Vec::new(),
            meets: HashMap::new(),
            negations: HashMap::new(),
            meeting: Vec::new(),
            annotations: Vec::new(),
            ref_overrides: schema
                .get("$schema")
                .and_then(Value::as_str)
                .is_some_and(ref_overrides),
            one_ofs: Vec::new(),
        };
        let root = c.compile_at("#", schema)?;
        c.refuse_loops()?;
        Ok(Draft {
            schema: Schema::from_nodes(c.nodes, root),
            listed: c.listed,
            one_ofs: c.one_ofs,
            annotations: c.annotations,
        })
    }
}

struct Compiler<'a> {
    doc: &'a Value,
    /// Whether the known formats are enforced (`format.rs`).
    formats: Formats,
    /// The document's `$id`s and `$anchor`s, which `$ref`s resolve against.
    resources: Resources,
    nodes: Vec<Shape>,
    /// Nodes already compiled for a JSON pointer (refs and recursion share them).
    by_pointer: HashMap<String, NodeId>,
    /// Nodes reserved by `compile_at` whose shape is not filled in yet, outermost first.
    unfinished: Vec<NodeId>,
    listed: Vec<Listed>,
    /// The node met for each pair of nodes (`intersect.rs`), smaller id first.
    meets: HashMap<(NodeId, NodeId), NodeId>,
    /// The complement built for each node (`complement.rs`).
    negations: HashMap<NodeId, NodeId>,
    /// Meets in progress (their nodes are placeholders until done).
    meeting: Vec<NodeId>,
    /// The document is draft 4, 6 or 7: a `$ref` overrides the keywords beside it.
    ref_overrides: bool,
    /// Formats kept as annotations (`Draft::annotations`).
    annotations: Vec<String>,
    one_ofs: Vec<OneOf>,
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

    /// Refuses a cycle of unions (`$ref`, `anyOf`). The matcher expands a union before it reads
    /// a byte, so such a cycle (`{"$defs": {"d": {"$ref": "#/$defs/d"}}}`, `a` → `b` → `a`, or
    /// one through an `anyOf` with other alternatives) would be expanded forever. A cycle
    /// through an object property or an array item is ordinary recursion and stays: each turn
    /// opens a container, which takes a byte and a nesting level (`MAX_NESTING`). Every node is
    /// checked, literals' bases included (narrowing matches against them). Iterative: a long
    /// chain of refs costs no stack.
    fn refuse_loops(&self) -> Result<(), SchemaError> {
        const NEW: u8 = 0;
        const ON_PATH: u8 = 1;
        const DONE: u8 = 2;
        let mut mark = vec![NEW; self.nodes.len()];
        // A depth-first walk over union edges from each node not yet walked: (node, next alt).
        let mut path: Vec<(usize, usize)> = Vec::new();
        for start in 0..self.nodes.len() {
            if mark[start] != NEW {
                continue;
            }
            mark[start] = ON_PATH;
            path.push((start, 0));
            while let Some(&(node, next)) = path.last() {
                let alts: &[NodeId] = match &self.nodes[node] {
                    Shape::Union(alts) => alts,
                    _ => &[],
                };
                let Some(&alt) = alts.get(next) else {
                    mark[node] = DONE;
                    path.pop();
                    continue;
                };
                if let Some(top) = path.last_mut() {
                    top.1 += 1;
                }
                match mark[alt as usize] {
                    NEW => {
                        mark[alt as usize] = ON_PATH;
                        path.push((alt as usize, 0));
                    }
                    // Back on the walk's own path: a cycle, named where it was entered.
                    ON_PATH => {
                        return Err(SchemaError::Loop {
                            path: self.pointer_of(alt),
                        })
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The JSON pointer node `id` was compiled for. Every node on a cycle of unions has one:
    /// the nodes made without one (a type list's types, a literal's base) are never on such a
    /// cycle, as the types are not unions and no union leads to a base.
    fn pointer_of(&self, id: NodeId) -> String {
        self.by_pointer
            .iter()
            .find(|&(_, &n)| n == id)
            .map_or_else(|| format!("node {id}"), |(p, _)| p.clone())
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
        if self.unfinished.len() >= MAX_DEPTH {
            return Err(SchemaError::TooLarge(format!(
                "{path}: schemas nest more than {MAX_DEPTH} deep (counting every $ref followed)"
            )));
        }
        // Reserve the node first: a recursive `$ref` back here finds it.
        let id = self.add(Shape::Never)?;
        self.by_pointer.insert(path.to_string(), id);
        self.unfinished.push(id);
        let shape = self.compile_value(id, path, v)?;
        self.unfinished.pop();
        self.nodes[id as usize] = shape;
        Ok(id)
    }

    /// The shape of the schema `v` at `path`, which will be node `id`. OpenAPI's
    /// `nullable: true` admits `null` besides (where no `enum`/`const` lists the values: there
    /// OpenAPI has `null` listed).
    fn compile_value(
        &mut self,
        id: NodeId,
        path: &str,
        v: &'a Value,
    ) -> Result<Shape, SchemaError> {
        let shape = self.compile_schema_value(id, path, v)?;
        let nullable = v.get("nullable") == Some(&Value::Bool(true))
            && v.get("enum").is_none()
            && v.get("const").is_none();
        if !nullable {
            return Ok(shape);
        }
        let inner = self.add(shape)?;
        let null = self.add(Shape::Null)?;
        Ok(Shape::Union(vec![inner, null]))
    }

    fn compile_schema_value(
        &mut self,
        id: NodeId,
        path: &str,
        v: &'a Value,
    ) -> Result<Shape, SchemaError> {
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
        if let Some(meta) = obj.get("$schema") {
            // A metaschema of its own may switch vocabularies off or on: what its keywords
            // mean cannot be known here.
            if !meta.as_str().is_some_and(is_known_metaschema) {
                return Err(SchemaError::Unsupported {
                    keyword: "$schema (a metaschema other than a published draft's)".into(),
                    path: path.to_string(),
                });
            }
        }
        for (key, value) in obj {
            let known = is_annotation(key, value)
                || key == "nullable"
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
                        | "minProperties"
                        | "maxProperties"
                        | "contains"
                        | "minContains"
                        | "maxContains"
                        | "minLength"
                        | "maxLength"
                        | "pattern"
                        | "propertyNames"
                        | "minimum"
                        | "maximum"
                        | "exclusiveMinimum"
                        | "exclusiveMaximum"
                        | "multipleOf"
                        | "anyOf"
                        | "oneOf"
                        | "allOf"
                        | "not"
                        | "if"
                        | "then"
                        | "else"
                        | "dependentRequired"
                        | "dependentSchemas"
                        | "dependencies"
                        | "$ref"
                )
                // Uniqueness is not enforced: only its absence is accepted.
                || (key == "uniqueItems" && value == &Value::Bool(false));
            if !known {
                return Err(SchemaError::Unsupported {
                    keyword: key.clone(),
                    path: path.to_string(),
                });
            }
        }
        // The applicators: each is a schema the value must also satisfy (`$ref`, `allOf`'s
        // branches) or a union it must fall in (`anyOf`, `oneOf`); the keywords beside them
        // are one more such schema. More than one: their intersection (`intersect.rs`).
        let mut parts: Vec<NodeId> = Vec::new();
        // Before 2019-09, `$ref` stands for the whole schema: the keywords beside it are
        // ignored.
        let ref_alone = self.ref_overrides && obj.contains_key("$ref");
        if let Some(r) = obj.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| Self::invalid(path, "$ref must be a string"))?;
            // Against the nearest enclosing resource (`$id`), as a JSON pointer in the document.
            let pointer = self
                .resources
                .resolve(path, r)
                .ok_or_else(|| SchemaError::Ref(r.into()))?;
            let target =
                resolve_pointer(self.doc, &pointer).ok_or_else(|| SchemaError::Ref(r.into()))?;
            parts.push(self.compile_at(&pointer, target)?);
        }
        if ref_alone {
            return Ok(Shape::Union(parts));
        }
        for key in ["anyOf", "oneOf"] {
            let Some(alts) = obj.get(key) else { continue };
            let alts = alts
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| Self::invalid(path, format!("{key} must be a non-empty array")))?;
            let mut ids = Vec::new();
            for (i, a) in alts.iter().enumerate() {
                ids.push(self.compile_at(&format!("{path}/{key}/{i}"), a)?);
            }
            let exact = match key {
                "oneOf" => self.one_of(path, &ids),
                _ => None,
            };
            parts.push(match exact {
                Some(node) => node,
                None => self.add(Shape::Union(ids))?,
            });
        }
        if let Some(not) = obj.get("not") {
            let inner = self.compile_at(&format!("{path}/not"), not)?;
            parts.push(self.complement(inner, path)?);
        }
        // `if`: the value meets `then` where it matches, `else` where it does not (either
        // missing: any value); without both, `if` decides nothing.
        if let Some(cond) = obj.get("if") {
            if obj.contains_key("then") || obj.contains_key("else") {
                let cond = self.compile_at(&format!("{path}/if"), cond)?;
                let branch = |c: &mut Self, key: &str| match obj.get(key) {
                    Some(v) => c.compile_at(&format!("{path}/{key}"), v),
                    None => c.add(Shape::Any),
                };
                let (then, otherwise) = (branch(self, "then")?, branch(self, "else")?);
                let yes = self.intersect(cond, then, path)?;
                let not_cond = self.complement(cond, path)?;
                let no = self.intersect(not_cond, otherwise, path)?;
                parts.push(self.add(Shape::Union(vec![yes, no]))?);
            }
        }
        self.dependents(path, obj, &mut parts)?;
        if let Some(all) = obj.get("allOf") {
            let all = all
                .as_array()
                .filter(|a| !a.is_empty())
                .ok_or_else(|| Self::invalid(path, "allOf must be a non-empty array"))?;
            for (i, a) in all.iter().enumerate() {
                parts.push(self.compile_at(&format!("{path}/allOf/{i}"), a)?);
            }
        }
        if !parts.is_empty() {
            let rest = obj.iter().any(|(k, v)| {
                !matches!(
                    k.as_str(),
                    "$ref"
                        | "anyOf"
                        | "oneOf"
                        | "allOf"
                        | "nullable"
                        | "not"
                        | "if"
                        | "then"
                        | "else"
                        | "dependentRequired"
                        | "dependentSchemas"
                        | "dependencies"
                        | "uniqueItems"
                ) && !is_annotation(k, v)
            });
            if rest {
                // The keywords beside the applicators, as a node of their own.
                let node = self.add(Shape::Never)?;
                let shape = self.typed(node, path, obj)?;
                self.nodes[node as usize] = shape;
                parts.push(node);
            }
            let mut met = parts[0];
            for &p in &parts[1..] {
                met = self.intersect(met, p, path)?;
            }
            return Ok(Shape::Union(vec![met]));
        }
        self.typed(id, path, obj)
    }

    /// The shape of the type keywords and what constrains each type (no applicators), which
    /// will be node `id`.
    fn typed(
        &mut self,
        id: NodeId,
        path: &str,
        obj: &'a Map<String, Value>,
    ) -> Result<Shape, SchemaError> {
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
                "number" => Self::number(path, obj, false)?,
                "integer" if has_number => continue,
                "integer" => Self::number(path, obj, true)?,
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
        // enum / const: the listed values (narrowed later to those the rest of the schema admits).
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
            let texts: Vec<Vec<u8>> = values
                .into_iter()
                .map(|v| serde_json::to_vec(v).unwrap_or_default())
                .collect();
            shape = self.literal(id, base, texts);
        }
        Ok(shape)
    }

    /// Node `id` as the values `texts`, recorded to be narrowed to those `base` admits once the
    /// graph is compiled (`narrow.rs`).
    fn literal(&mut self, id: NodeId, base: NodeId, texts: Vec<Vec<u8>>) -> Shape {
        let shape = Shape::Literal(ByteTrie::new(texts.iter().map(Vec::as_slice)));
        self.listed.push(Listed {
            node: id,
            base,
            texts,
            unfinished: self.unfinished.clone(),
        });
        shape
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

    /// A number (`integer`: only whole ones) with its bounds and `multipleOf`. Draft 4 spells an
    /// exclusive bound as `exclusiveMinimum: true` beside `minimum`; later drafts give the
    /// exclusive bound its own value. Both may appear; the tighter bound counts.
    fn number(path: &str, obj: &Map<String, Value>, integer: bool) -> Result<Shape, SchemaError> {
        let value = |key: &str| -> Result<Option<Decimal>, SchemaError> {
            match obj.get(key) {
                None | Some(Value::Bool(_)) => Ok(None),
                Some(Value::Number(n)) => Decimal::of(n)
                    .map(Some)
                    .ok_or_else(|| Self::invalid(path, format!("{key} is out of range"))),
                Some(_) => Err(Self::invalid(path, format!("{key} must be a number"))),
            }
        };
        let flag = |key: &str| matches!(obj.get(key), Some(Value::Bool(true)));
        let bound = |key: &str, flag_key: &str| -> Result<Option<Bound>, SchemaError> {
            Ok(value(key)?.map(|value| Bound {
                value,
                exclusive: flag(flag_key),
            }))
        };
        let exclusive = |key: &str| -> Result<Option<Bound>, SchemaError> {
            Ok(value(key)?.map(|value| Bound {
                value,
                exclusive: true,
            }))
        };
        let lo = NumberRule::tighter_lo(
            bound("minimum", "exclusiveMinimum")?,
            exclusive("exclusiveMinimum")?,
        );
        let hi = NumberRule::tighter_hi(
            bound("maximum", "exclusiveMaximum")?,
            exclusive("exclusiveMaximum")?,
        );
        let multiple = value("multipleOf")?;
        let rule = NumberRule::new(integer, lo, hi, multiple.as_ref()).map_err(|e| match e {
            RuleError::NotPositive => Self::invalid(path, "multipleOf must be greater than 0"),
            RuleError::NegatedMultiple => SchemaError::Unsupported {
                keyword: "not of a multipleOf beside another multipleOf".into(),
                path: path.to_string(),
            },
            RuleError::TooFine => SchemaError::TooLarge(format!(
                "{path}: multipleOf has more than {MAX_MULTIPLE} steps per unit of its last place"
            )),
        })?;
        Ok(Shape::Number {
            integer,
            rule: (!rule.is_trivial()).then(|| Box::new(rule)),
        })
    }

    fn string(&mut self, path: &str, obj: &Map<String, Value>) -> Result<Shape, SchemaError> {
        let min_len = Self::count(path, obj, "minLength")?.unwrap_or(0);
        let max_len = Self::count(path, obj, "maxLength")?.unwrap_or(u32::MAX);
        // A known format is a pattern of its own (`format.rs`); beside a `pattern`, it stays an
        // annotation (two patterns on one string are not compiled together).
        let named = obj.get("format").and_then(Value::as_str);
        let format = match (self.formats, named) {
            (Formats::Assert, Some(f)) if !obj.contains_key("pattern") => format_pattern(f),
            _ => None,
        };
        if let (Formats::Assert, Some(f), None) = (self.formats, named, &format) {
            let why = match obj.contains_key("pattern") {
                true => "beside a pattern, which rules",
                false => "not a format COLTRANE enforces",
            };
            self.annotations
                .push(format!("format {f:?} at {path}: an annotation ({why})"));
        }
        let (source, max_len) = match (obj.get("pattern"), &format) {
            (Some(p), _) => (
                p.as_str()
                    .ok_or_else(|| Self::invalid(path, "pattern must be a string"))?
                    .to_string(),
                max_len,
            ),
            (None, Some((p, cap))) => (p.clone(), max_len.min(*cap)),
            (None, None) => {
                return Ok(Shape::String {
                    min_len,
                    max_len,
                    pattern: None,
                })
            }
        };
        // The lengths go into the pattern's automaton, which counts characters as they come.
        let pattern = Pattern::compile(&source, min_len, max_len).map_err(|e| match e {
            PatternError::Unsupported(what) => SchemaError::Unsupported {
                keyword: format!("pattern with {what}"),
                path: path.to_string(),
            },
            PatternError::Syntax(why) => Self::invalid(path, format!("pattern: {why}")),
            PatternError::TooLarge(n) => {
                SchemaError::TooLarge(format!("{path}: the pattern needs more than {n} states"))
            }
        })?;
        Ok(Shape::String {
            min_len: 0,
            max_len: u32::MAX,
            pattern: Some(Box::new(pattern)),
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
        // `propertyNames`: every key is a string already; a schema for them that admits every
        // string (zod's records say `{"type": "string"}`) adds nothing. Others are refused.
        if let Some(names) = obj.get("propertyNames") {
            let node = self.compile_at(&format!("{path}/propertyNames"), names)?;
            let any_string = matches!(
                &self.nodes[node as usize],
                Shape::Any
                    | Shape::String {
                        min_len: 0,
                        max_len: u32::MAX,
                        pattern: None,
                    }
            );
            if !any_string {
                return Err(SchemaError::Unsupported {
                    keyword: "propertyNames (other than any string)".into(),
                    path: path.to_string(),
                });
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
            min_props: Self::count(path, obj, "minProperties")?.unwrap_or(0),
            max_props: Self::count(path, obj, "maxProperties")?.unwrap_or(u32::MAX),
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
        let contains = self.contains(path, obj, &prefix, items)?;
        Ok(Shape::Array {
            prefix,
            items,
            min_items,
            max_items,
            contains,
        })
    }

    /// `contains` (`minContains` and `maxContains` only beside it): each element position's
    /// hit (its schema met with `contains`') and miss (met with the complement; without
    /// `maxContains`, the element's own schema). `None` where it asks nothing (`minContains: 0`
    /// and no maximum).
    fn contains(
        &mut self,
        path: &str,
        obj: &'a Map<String, Value>,
        prefix: &[NodeId],
        items: Option<NodeId>,
    ) -> Result<Option<Box<Contains>>, SchemaError> {
        let Some(schema) = obj.get("contains") else {
            return Ok(None);
        };
        let min = Self::count(path, obj, "minContains")?.unwrap_or(1);
        let max = Self::count(path, obj, "maxContains")?.unwrap_or(u32::MAX);
        if min == 0 && max == u32::MAX {
            return Ok(None);
        }
        let s = self.compile_at(&format!("{path}/contains"), schema)?;
        let not_s = match max {
            u32::MAX => None,
            _ => Some(self.complement(s, path)?),
        };
        let (mut hit, mut miss) = (Vec::new(), Vec::new());
        for j in 0..=prefix.len() {
            let (h, m) = match prefix.get(j).copied().or(items) {
                Some(e) => (
                    self.intersect(e, s, path)?,
                    match not_s {
                        Some(n) => self.intersect(e, n, path)?,
                        None => e,
                    },
                ),
                None => (self.add(Shape::Never)?, self.add(Shape::Never)?),
            };
            hit.push(h);
            miss.push(m);
        }
        Ok(Some(Box::new(Contains {
            hit,
            miss,
            min,
            max,
        })))
    }
}

/// Whether a keyword only annotates: the listed ones, extensions (`x-…`, OpenAPI's and
/// vendors'), and draft 4's `id`.
fn is_annotation(key: &str, value: &Value) -> bool {
    ANNOTATIONS.contains(&key) || key.starts_with("x-") || (key == "id" && value.is_string())
}

/// The published drafts' metaschemas (4, 6, 7, 2019-09, 2020-12), as `$schema` names them.
fn is_known_metaschema(uri: &str) -> bool {
    let uri = uri.trim_end_matches('#');
    let uri = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"))
        .unwrap_or("");
    matches!(
        uri,
        "json-schema.org/draft-04/schema"
            | "json-schema.org/draft-06/schema"
            | "json-schema.org/draft-07/schema"
            | "json-schema.org/draft/2019-09/schema"
            | "json-schema.org/draft/2020-12/schema"
            | "json-schema.org/schema"
    )
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
