use super::compile::MAX_DEPTH;
use super::*;
use serde_json::{json, Map};

#[test]
fn unsupported_keywords_are_named() {
    for (schema, keyword) in [
        (json!({"type": "array", "uniqueItems": true}), "uniqueItems"),
        (
            json!({"properties": {"a": {"pattern": "(?=x)"}}}),
            "pattern with a lookahead",
        ),
        (
            json!({"not": {"type": "array", "contains": {"type": "null"}}}),
            "not of contains",
        ),
        (
            json!({"type": "array", "contains": {"pattern": "a"}, "maxContains": 2}),
            "not of a pattern or format",
        ),
        (
            json!({"not": {"type": "string", "pattern": "a"}}),
            "not of a pattern or format",
        ),
        (
            json!({"not": {"type": "object", "additionalProperties": false}}),
            "not of an object whose other keys are constrained",
        ),
    ] {
        match crate::compile_schema(&schema) {
            Err(SchemaError::Unsupported { keyword: k, .. }) => assert_eq!(k, keyword),
            other => panic!("{schema}: {other:?}"),
        }
    }
}

#[test]
fn refs_resolve_and_recursion_terminates() {
    let s = crate::compile_schema(&json!({
        "$defs": {"node": {"type": "object", "properties": {
            "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}}}},
        "$ref": "#/$defs/node"
    }))
    .unwrap();
    assert_eq!(s.min_bytes(s.root()), 2);
    assert!(matches!(
        crate::compile_schema(&json!({"$ref": "#/$defs/missing"})),
        Err(SchemaError::Ref(_))
    ));
    // A required recursion has no finite instance.
    assert_eq!(
        crate::compile_schema(&json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}, "required": ["x"]}}, "$ref": "#/$defs/a"}))
            .unwrap_err(),
        SchemaError::NoInstance
    );
}

/// Cycles of `$ref`s and `anyOf`s that enter no object or array: the matcher would expand
/// each forever before reading a byte (a stack overflow natively, a trap in wasm).
#[test]
fn cycles_that_enter_no_container_are_refused() {
    for (schema, path) in [
        // The report: a ref to itself, behind an anyOf with a plain alternative.
        (
            json!({"anyOf": [{"$ref": "#/$defs/d"}, {"type": "null"}],
                "$defs": {"d": {"$ref": "#/$defs/d"}}}),
            "#/$defs/d",
        ),
        // The root refers to itself, alone or beside a plain alternative.
        (json!({"$ref": "#"}), "#"),
        (json!({"anyOf": [{"type": "null"}, {"$ref": "#"}]}), "#"),
        // Mutual refs a → b → a.
        (
            json!({"$ref": "#/$defs/a",
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}),
            "#/$defs/a",
        ),
        // Through anyOfs, each with a non-recursive alternative.
        (
            json!({"$ref": "#/$defs/a", "$defs": {
                "a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/b"}]},
                "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}}),
            "#/$defs/a",
        ),
        // Spelled another way (a %-escape) on the way in.
        (
            json!({"$ref": "#/%24defs/d", "$defs": {"d": {"$ref": "#/$defs/d"}}}),
            "#/$defs/d",
        ),
        // Behind an object property: entering the object first does not end the loop.
        (
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/d"}},
                "$defs": {"d": {"anyOf": [{"$ref": "#/$defs/d"}]}}}),
            "#/$defs/d",
        ),
        // Only in the schema an enum is narrowed against (narrowing runs the matcher).
        (
            json!({"type": "array", "items": {"$ref": "#/$defs/d"}, "enum": [[1], []],
                "$defs": {"d": {"$ref": "#/$defs/d"}}}),
            "#/$defs/d",
        ),
    ] {
        assert_eq!(
            crate::compile_schema(&schema).unwrap_err(),
            SchemaError::Loop { path: path.into() },
            "{schema}"
        );
    }
    assert_eq!(
        crate::compile_schema(&json!({"$defs": {"d": {"$ref": "#/$defs/d"}}, "$ref": "#/$defs/d"}))
            .unwrap_err()
            .to_string(),
        "the schema refers to itself at #/$defs/d without entering an object or array"
    );
    // Through allOf and oneOf as through anyOf.
    for keyword in ["allOf", "oneOf", "anyOf"] {
        assert!(
            matches!(
                crate::compile_schema(&json!({keyword: [{"$ref": "#"}]})).unwrap_err(),
                SchemaError::Loop { .. }
            ),
            "{keyword}"
        );
    }
}

/// Recursion through an object property or an array item is ordinary (a tree, a list): each
/// turn opens a container, and the matcher caps how deep containers nest.
#[test]
fn cycles_through_containers_compile_and_match() {
    use crate::machine::step::accepts;
    let tree = crate::compile_schema(&json!({"$ref": "#/$defs/tree", "$defs": {"tree": {
        "type": "object", "additionalProperties": false, "required": ["value"],
        "properties": {"value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/tree"}}}}}}))
    .unwrap();
    assert!(accepts(
        &tree,
        br#"{"value":1,"children":[{"value":2},{"children":[],"value":3}]}"#
    ));
    assert!(!accepts(&tree, br#"{"value":1,"children":[{}]}"#));
    assert_eq!(tree.min_bytes(tree.root()), r#"{"value":0}"#.len() as u32);
    // Through an anyOf with a plain alternative, the cycle entering an array.
    let lists = crate::compile_schema(
        &json!({"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#"}}]}),
    )
    .unwrap();
    for (text, ok) in [("null", true), ("[[null],[],null]", true), ("[[1]]", false)] {
        assert_eq!(accepts(&lists, text.as_bytes()), ok, "{text}");
    }
    // Mutual refs a → b → a through an object's additional properties.
    let ab = crate::compile_schema(&json!({"$ref": "#/$defs/a", "$defs": {
        "a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/b"}]},
        "b": {"type": "object", "additionalProperties": {"$ref": "#/$defs/a"}}}}))
    .unwrap();
    assert!(accepts(&ab, br#"{"x":{"y":"z"},"w":"v"}"#));
    assert!(!accepts(&ab, br#"{"x":{"y":1}}"#));
}

/// Compilation recurses once per schema inside another, a `$ref` followed included: a
/// chain of refs (no JSON nesting at all) is capped before it can exhaust the stack.
#[test]
fn ref_chains_are_capped() {
    let chain = |n: usize| {
        let mut defs = Map::new();
        for i in 0..n {
            defs.insert(
                format!("a{i}"),
                json!({"$ref": format!("#/$defs/a{}", i + 1)}),
            );
        }
        defs.insert(format!("a{n}"), json!({"type": "null"}));
        json!({"$ref": "#/$defs/a0", "$defs": defs})
    };
    let s = crate::compile_schema(&chain(MAX_DEPTH - 2)).unwrap();
    assert!(crate::machine::step::accepts(&s, b"null"));
    assert!(matches!(
        crate::compile_schema(&chain(MAX_DEPTH - 1)),
        Err(SchemaError::TooLarge(m))
            if m == "#/$defs/a255: schemas nest more than 256 deep (counting every $ref followed)"
    ));
    // Nesting without refs: items in items, as deep as serde_json parses (128 levels).
    let mut deep = json!({"type": "null"});
    for _ in 0..126 {
        deep = json!({"items": deep});
    }
    let text = serde_json::to_string(&deep).unwrap();
    let s = crate::compile_schema(&serde_json::from_str(&text).unwrap()).unwrap();
    assert!(crate::machine::step::accepts(&s, b"[[[null]]]"));
}

#[test]
fn minimal_sizes() {
    let s = crate::compile_schema(&json!({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 2}, "age": {"type": "integer"}},
        "required": ["name", "age"]}))
    .unwrap();
    // {"name":"xx","age":0}
    assert_eq!(
        s.min_bytes(s.root()),
        r#"{"name":"xx","age":0}"#.len() as u32
    );
    let s = crate::compile_schema(&json!({"enum": ["abc", 12, null]})).unwrap();
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
