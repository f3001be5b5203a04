//! Compiling a JSON Schema for the matcher: `schema.rs` builds the graph with every `enum` and
//! `const` value it lists, then this pass keeps the values the rest of their schema admits
//! (`{"type": "string", "enum": ["a", 1]}` keeps `"a"`), by running the matcher over each.
//! A pass of its own, after compilation, so the schema compiler needs nothing of the matcher.

use crate::format::Formats;
use crate::machine::step::accepts;
use crate::number::{Bound, Decimal, NumberRule};
use crate::schema::{ByteTrie, Draft, Listed, OneOf, Schema, SchemaError, Shape, INF};
use serde_json::Value;

/// Compiles a JSON Schema (the subset in `schema.rs`) into the matcher's graph. An error names
/// an unsupported keyword or an invalid part, or says the schema admits no finite value (which
/// narrowing can cause: an `enum` none of whose values has the declared type).
pub fn compile_schema(schema: &Value) -> Result<Schema, SchemaError> {
    compile_schema_with(schema, Formats::Assert)
}

/// [`compile_schema`], with `format` enforced or only annotating.
pub fn compile_schema_with(schema: &Value, formats: Formats) -> Result<Schema, SchemaError> {
    let Draft {
        schema: mut graph,
        listed,
        one_ofs,
        annotations,
    } = Draft::compile(schema, formats)?;
    let root = graph.root();
    // In the order compiled: a literal inside another's base is narrowed before it.
    for lit in &listed {
        let kept = narrow(&mut graph, lit);
        // A number is compared by value (`1.0` is `1`, `-0` is `0`): each one kept becomes a
        // number node whose bounds are both the value; the other values stay text.
        let (numbers, texts): (Vec<&[u8]>, Vec<&[u8]>) = kept
            .iter()
            .map(Vec::as_slice)
            .partition(|t| matches!(t.first(), Some(b'-' | b'0'..=b'9')));
        let literal = Shape::Literal(ByteTrie::new(texts));
        if numbers.is_empty() {
            graph.replace_shape(lit.node, literal);
            continue;
        }
        let mut alts = vec![graph.push_shape(literal)];
        for text in numbers {
            let value = std::str::from_utf8(text).ok().and_then(Decimal::parse);
            let rule = value.map(|v| {
                let bound = Some(Bound {
                    value: v,
                    exclusive: false,
                });
                NumberRule::new(false, bound.clone(), bound, None)
            });
            let Some(Ok(rule)) = rule else {
                continue;
            };
            alts.push(graph.push_shape(Shape::Number {
                integer: false,
                rule: Some(Box::new(rule)),
            }));
        }
        graph.replace_shape(lit.node, Shape::Union(alts));
    }
    graph.reroot(root);
    if graph.min_bytes(root) >= INF {
        return Err(SchemaError::NoInstance);
    }
    // A `oneOf` is matched as a union: exact when no two branches share a value (their
    // intersection admits none), said otherwise.
    for OneOf { path, pairs } in one_ofs {
        let exclusive = pairs.is_some_and(|p| p.iter().all(|&n| graph.min_bytes(n) >= INF));
        if !exclusive {
            graph.relax(format!(
                "oneOf at {path}: its branches may share a value, and a value matching more than one is not refused"
            ));
        }
    }
    for a in annotations {
        graph.annotate(a);
    }
    Ok(graph)
}

/// The values of `lit` its base admits, matched against the graph as it stood when they were
/// listed: the nodes then still being compiled admit nothing. Leaves the graph's shapes as they
/// were (its root and `min_bytes` are the caller's to restore).
fn narrow(graph: &mut Schema, lit: &Listed) -> Vec<Vec<u8>> {
    let saved: Vec<Shape> = lit
        .unfinished
        .iter()
        .map(|&n| graph.replace_shape(n, Shape::Never))
        .collect();
    graph.reroot(lit.base);
    let kept: Vec<Vec<u8>> = lit
        .texts
        .iter()
        .filter(|text| accepts(graph, text))
        .cloned()
        .collect();
    for (&n, shape) in lit.unfinished.iter().zip(saved) {
        graph.replace_shape(n, shape);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accepted(schema: &Schema, texts: &[&str]) -> Vec<bool> {
        texts
            .iter()
            .map(|t| accepts(schema, t.as_bytes()))
            .collect()
    }

    #[test]
    fn literals_keep_what_the_rest_of_their_schema_admits() {
        let s = compile_schema(&json!({"type": "string", "enum": ["a", 1, "bc"], "maxLength": 1}))
            .unwrap();
        assert_eq!(
            accepted(&s, &["\"a\"", "1", "\"bc\""]),
            [true, false, false]
        );
        // An inner literal is narrowed before the one whose base holds it.
        let s = compile_schema(
            &json!({"type": "array", "items": {"type": "integer", "enum": [1, "a"]},
            "enum": [[1], ["a"], []]}),
        )
        .unwrap();
        assert_eq!(accepted(&s, &["[1]", "[\"a\"]", "[]"]), [true, false, true]);
        assert_eq!(
            compile_schema(&json!({"type": "string", "enum": [1, null]})).unwrap_err(),
            SchemaError::NoInstance
        );
    }

    #[test]
    fn listed_numbers_compare_by_value() {
        let s = compile_schema(&json!({"enum": [1, "a", -2.5, 0]})).unwrap();
        assert_eq!(
            accepted(
                &s,
                &["1", "1.0", "1.00", "\"a\"", "-2.5", "-2.50", "0", "-0", "0.0", "2", "10", "-2"]
            ),
            [true, true, true, true, true, true, true, true, true, false, false, false]
        );
        // Narrowed first: 1.5 is no integer; 2 stays, in any spelling of its value.
        let s = compile_schema(&json!({"type": "integer", "enum": [1.5, 2]})).unwrap();
        assert_eq!(accepted(&s, &["2", "2.0", "1.5"]), [true, true, false]);
        let s = compile_schema(&json!({"const": 9007199254740993u64})).unwrap();
        assert_eq!(
            accepted(
                &s,
                &["9007199254740993", "9007199254740993.0", "9007199254740992"]
            ),
            [true, true, false]
        );
    }

    #[test]
    fn a_schema_still_being_compiled_admits_nothing() {
        // While `a` was compiled its own node was a placeholder, so `{"x":{}}` (whose `x` is an
        // `a`) was dropped; the pass after compilation keeps that result.
        let s = compile_schema(&json!({"$defs": {"a": {"type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}}, "enum": [{"x": {}}, {}]}},
            "$ref": "#/$defs/a"}))
        .unwrap();
        assert_eq!(accepted(&s, &["{}", "{\"x\":{}}"]), [true, false]);
    }
}
