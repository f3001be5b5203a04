use super::step::accepts;
use super::*;
use crate::schema::INF;
use serde_json::json;

fn any() -> Schema {
    Schema::any()
}

fn schema(v: serde_json::Value) -> Schema {
    crate::compile_schema(&v).unwrap()
}

/// The state (live threads) after `text`, or None once every thread died.
fn run(s: &Schema, text: &[u8]) -> Option<Vec<Thread>> {
    let mut threads = vec![Thread::start(s)];
    for &b in text {
        let mut next = Vec::new();
        for t in threads {
            t.step(s, b, &mut next);
        }
        next.sort();
        next.dedup();
        if next.is_empty() {
            return None;
        }
        threads = next;
    }
    Some(threads)
}

fn close(s: &Schema, threads: &[Thread]) -> u32 {
    threads
        .iter()
        .map(|t| t.close_bytes(s))
        .min()
        .unwrap_or(INF)
}

#[test]
fn any_json_accepts_rfc_8259_values() {
    let s = any();
    for ok in [
        "0",
        "-0",
        "12.5e-3",
        "1E+2",
        "-7",
        "true",
        "false",
        "null",
        "\"\"",
        "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\"",
        "\"\\u00e9 \\uD83D\\uDE00\"",
        "\"é€😀\"",
        "[]",
        "{}",
        "[1, [2, {\"a\": []}], \"x\"]",
        " {\n  \"k\" : { \"n\" : null } ,\"z\":[ ]\n} ",
        "\"\\u0000\"",
    ] {
        assert!(accepts(&s, ok.as_bytes()), "{ok}");
    }
    for bad in [
        "",
        "01",
        "1.",
        ".5",
        "-",
        "1e",
        "+1",
        "tru",
        "nul",
        "True",
        "[1,]",
        "[,1]",
        "{,}",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "{a:1}",
        "\"abc",
        "\"\\x\"",
        "\"\\u12G4\"",
        "\"\u{1}\"",
        "[1 2]",
        "{} {}",
        "1 2",
        "[",
        "{\"a\":1",
        "\"\\\"",
    ] {
        assert!(!accepts(&s, bad.as_bytes()), "{bad:?}");
    }
}

#[test]
fn utf8_is_checked_byte_by_byte() {
    let s = any();
    assert!(accepts(&s, "\"ü\"".as_bytes()));
    // Overlong, surrogate, truncated, stray continuation.
    for bad in [
        &b"\"\xc0\xaf\""[..],
        b"\"\xed\xa0\x80\"",
        b"\"\xe2\x82\"",
        b"\"\x80\"",
        b"\"\xf5\x80\x80\x80\"",
    ] {
        assert!(!accepts(&s, bad), "{bad:?}");
    }
}

#[test]
fn whitespace_runs_are_bounded() {
    let s = any();
    let pad = " ".repeat(MAX_WS as usize);
    assert!(accepts(&s, format!("[{pad}1]").as_bytes()));
    assert!(!accepts(&s, format!("[{pad} 1]").as_bytes()));
    // Around the top-level value, at most MAX_TOP_WS.
    assert!(accepts(
        &s, b" 
[1]
 "
    ));
    assert!(!accepts(
        &s, b"[1]


"
    ));
    assert!(!accepts(&s, b"   1"));
}

#[test]
fn objects_follow_their_schema() {
    let s = schema(json!({
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 3},
                       "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
        "required": ["name"],
        "additionalProperties": false
    }));
    for ok in [
        r#"{"name":"Al"}"#,
        r#"{"age":30,"name":"x"}"#,
        r#"{"name":"é€😀","tags":["a","b"]}"#,
        r#"{ "name" : "abc" , "age" : -1.0 }"#,
        r#"{"name":"a","tags":[]}"#,
    ] {
        assert!(accepts(&s, ok.as_bytes()), "{ok}");
    }
    for bad in [
        r#"{}"#,
        r#"{"age":3}"#,
        r#"{"name":""}"#,
        r#"{"name":"abcd"}"#,
        r#"{"name":"a","x":1}"#,
        r#"{"name":"a","name":"b"}"#,
        r#"{"name":"a","age":1.5}"#,
        r#"{"name":"a","tags":["c"]}"#,
        r#"{"name":"a","tags":["a","a","a"]}"#,
        r#"{"name":1}"#,
        r#"[]"#,
    ] {
        assert!(!accepts(&s, bad.as_bytes()), "{bad}");
    }
}

#[test]
fn unions_tuples_literals_and_refs() {
    let s = schema(
        json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1},
        {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"], "additionalProperties": false},
        {"type": "object", "properties": {"b": {"type": "null"}}, "required": ["b"], "additionalProperties": false}]}),
    );
    for ok in ["3", "\"x\"", r#"{"a":1}"#, r#"{"b":null}"#] {
        assert!(accepts(&s, ok.as_bytes()), "{ok}");
    }
    for bad in ["3.5", "\"xy\"", r#"{"a":2}"#, r#"{"a":1,"b":null}"#, "null"] {
        assert!(!accepts(&s, bad.as_bytes()), "{bad}");
    }
    let t = schema(
        json!({"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "number"}], "items": false, "minItems": 1}),
    );
    assert!(accepts(&t, b"[true]") && accepts(&t, b"[false, 2]"));
    assert!(!accepts(&t, b"[]") && !accepts(&t, b"[true,1,2]") && !accepts(&t, b"[1]"));
    let e = schema(json!({"enum": [12, "a\"b", [1, {"x": null}], 123]}));
    for ok in ["12", "123", r#""a\"b""#, r#"[1,{"x":null}]"#] {
        assert!(accepts(&e, ok.as_bytes()), "{ok}");
    }
    assert!(!accepts(&e, b"1") && !accepts(&e, b"1234") && !accepts(&e, b"[1, {\"x\":null}]"));
    let filtered = schema(json!({"type": "string", "enum": ["a", 1, null]}));
    assert!(accepts(&filtered, b"\"a\"") && !accepts(&filtered, b"1"));
    let tree = schema(json!({"$defs": {"t": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "additionalProperties": false}},
        "$ref": "#/$defs/t"}));
    assert!(accepts(&tree, br#"{"kids":[{"kids":[{}]},{}]}"#));
    assert!(!accepts(&tree, br#"{"kids":[{"kid":[]}]}"#));
}

/// Closing costs are exact: from every prefix, some byte lowers the cost by one and none by
/// more, and the cost is 0 exactly where the document may end.
fn check_close_is_exact(s: &Schema, doc: &str) {
    for cut in 0..=doc.len() {
        let Some(state) = run(s, &doc.as_bytes()[..cut]) else {
            panic!("{doc:?} rejected at {cut}");
        };
        let c = close(s, &state);
        assert_eq!(
            c == 0,
            state.iter().any(|t| t.can_end(s)),
            "{doc:?}[..{cut}] cost {c}"
        );
        if c == 0 {
            continue;
        }
        let best = (0..=255u8)
            .filter_map(|b| {
                let mut next = Vec::new();
                for t in state.iter().cloned() {
                    t.step(s, b, &mut next);
                }
                (!next.is_empty()).then(|| close(s, &next))
            })
            .min()
            .unwrap_or(INF);
        assert_eq!(best, c - 1, "{doc:?}[..{cut}]: cost {c}, best next {best}");
    }
}

#[test]
fn closing_costs_are_exact() {
    check_close_is_exact(
        &any(),
        r#"{"a": [1, -2.5e3, "x\u00e9", {"b": true}], "c": null}"#,
    );
    check_close_is_exact(&any(), "\"é\"");
    let s = schema(json!({
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 2}, "ab": {"type": "integer"},
                       "abc": {"type": "array", "items": {"type": "boolean"}, "minItems": 2},
                       "e": {"enum": ["xyz", 10]}},
        "required": ["name", "abc"],
        "additionalProperties": false
    }));
    check_close_is_exact(&s, r#"{"ab":1,"abc":[true,false,true],"e":10,"name":"Bo"}"#);
    check_close_is_exact(&s, r#"{ "name" : "Bob" , "abc" : [false,true] }"#);
    let open = schema(
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
    );
    check_close_is_exact(&open, r#"{"ab":[1],"a":"x","a2":{}}"#);
}

#[test]
fn escaped_keys_cannot_dodge_their_property() {
    // `\u0066oo` is the key `foo`: off the declared keys' compact spelling it would pass for
    // an additional key, and its value would escape `foo`'s schema.
    let s = schema(json!({"properties": {"foo": {"type": "integer"}, "a/b": {"type": "null"}}}));
    for bad in [
        r#"{"\u0066oo":"x"}"#,
        r#"{"fo\u006F":"x"}"#,
        r#"{"a\/b":1}"#,
        r#"{"\u0061/b":1}"#,
    ] {
        assert!(!accepts(&s, bad.as_bytes()), "{bad}");
    }
    for ok in [
        r#"{"foo":1}"#,
        r#"{"a/b":null}"#,
        r#"{"bar":"x"}"#,
        r#"{"b\nr":"x"}"#,
    ] {
        assert!(accepts(&s, ok.as_bytes()), "{ok}");
    }
    // Declared keys spelled as serde_json spells them still match, escapes included.
    let e = schema(
        json!({"properties": {"a\nb": {"type": "integer"}, "\u{1}": {"type": "null"}},
        "additionalProperties": false}),
    );
    assert!(accepts(&e, br#"{"a\nb":1,"\u0001":null}"#));
    // Objects without declared keys take keys in any spelling.
    assert!(accepts(&any(), br#"{"\u0066o\/o":"x"}"#));
    check_close_is_exact(&s, r#"{"bar":1,"foo":2}"#);
}

#[test]
fn surrogate_pairs_are_one_character() {
    let pair = r#""\uD83D\uDE00""#;
    let min2 = schema(json!({"type": "string", "minLength": 2}));
    assert!(!accepts(&min2, pair.as_bytes()));
    assert!(accepts(&min2, br#""\ud83d\ude00x""#));
    let max1 = schema(json!({"type": "string", "maxLength": 1}));
    assert!(accepts(&max1, pair.as_bytes()));
    assert!(accepts(&max1, "\"😀\"".as_bytes()));
    assert!(!accepts(&max1, br#""\uD83D\uDE00\uD83D\uDE00""#));
    // Lone surrogates are no characters (as raw UTF-8 surrogates are refused).
    let s = any();
    for bad in [
        r#""\uD83D""#,
        r#""\uDE00""#,
        r#""\uD83Dx""#,
        r#""\uD83D\u0041""#,
        r#""\uD83D\uD83D""#,
        r#""\uD83D\n""#,
    ] {
        assert!(!accepts(&s, bad.as_bytes()), "{bad}");
    }
    for ok in [
        r#""\uD7FF""#,
        r#""\uE000""#,
        r#""\ud800\udfff""#,
        r#""\uDBFF\uDC00""#,
    ] {
        assert!(accepts(&s, ok.as_bytes()), "{ok}");
    }
    check_close_is_exact(&any(), r#"["\uD83D\uDE00",{"\udbff\udfff":"\u0041"}]"#);
}

#[test]
fn closing_costs_count_the_character_in_progress() {
    // Finishing an escape or a UTF-8 character also counts towards minLength.
    let min3 = schema(json!({"type": "string", "minLength": 3}));
    check_close_is_exact(&min3, r#""\n\u0041é""#);
    check_close_is_exact(&min3, r#""\uD83D\uDE00€x""#);
}

#[test]
fn strings_at_max_length_start_no_character() {
    // A character begun at maxLength could never be finished: the document would be stuck.
    let max1 = schema(json!({"type": "string", "maxLength": 1}));
    for dead_end in [&br#""a\"#[..], b"\"a\xc3", br#""\n\u00"#] {
        assert!(run(&max1, dead_end).is_none(), "{dead_end:?}");
    }
    assert!(accepts(&max1, br#""\u00e9""#) && accepts(&max1, "\"é\"".as_bytes()));
}

#[test]
fn no_thread_outlives_its_last_completion() {
    // A prefix no document can complete is refused at once: a mask built from it would offer
    // tokens that lead nowhere (not even to end-of-text).
    let closed = schema(json!({"properties": {"foo": true, "bar": false},
        "additionalProperties": false}));
    for dead_end in [r#"{"foo":1,"#, r#"{"b"#, r#"{ "foo" : 1 , "#] {
        assert!(run(&closed, dead_end.as_bytes()).is_none(), "{dead_end}");
    }
    assert!(accepts(&closed, br#"{"foo":1}"#) && accepts(&closed, b"{}"));
    let never_more = schema(json!({"properties": {"a": true},
        "additionalProperties": {"$ref": "#/$defs/no"}, "$defs": {"no": false}}));
    assert!(run(&never_more, br#"{"b"#).is_none() && run(&never_more, br#"{"a":1,"#).is_none());
    assert!(accepts(&never_more, br#"{"a":[]}"#));
    let pair = schema(json!({"prefixItems": [true, false]}));
    assert!(run(&pair, b"[1,").is_none() && run(&pair, b"[[],").is_none());
    assert!(accepts(&pair, b"[1]") && accepts(&pair, b"{}"));
    check_close_is_exact(&closed, r#"{ "foo" : [1] }"#);
}

#[test]
fn nesting_is_bounded_at_max_nesting() {
    let s = any();
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(accepts(&s, deep(MAX_NESTING).as_bytes()));
    assert!(!accepts(&s, deep(MAX_NESTING + 1).as_bytes()));
    let objects = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
    assert!(accepts(&s, objects(MAX_NESTING).as_bytes()));
    assert!(!accepts(&s, objects(MAX_NESTING + 1).as_bytes()));
}

/// Unions inside unions (refs to refs, an anyOf in an anyOf) are flattened with a stack of the
/// matcher's own, each node once: a chain of thousands of refs costs no call stack, and a
/// diamond of them (each level two refs to the next) does not double its work per level.
#[test]
fn nested_unions_cost_no_stack_and_no_repeated_work() {
    // A chain of 3000 refs, entered in segments of 200 so that compiling it never nests more
    // than the compiler allows: the matcher expands all of it before reading the first byte.
    let n = 3000;
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        defs.insert(
            format!("a{i}"),
            json!({"$ref": format!("#/$defs/a{}", i + 1)}),
        );
    }
    defs.insert(format!("a{n}"), json!({"type": "null"}));
    let entries: Vec<_> = (0..n)
        .step_by(200)
        .rev()
        .map(|i| json!({"$ref": format!("#/$defs/a{i}")}))
        .collect();
    let chain = schema(json!({"anyOf": entries, "$defs": defs}));
    assert!(accepts(&chain, b"null") && !accepts(&chain, b"1"));
    // 2^64 ways down to `null`, one thread.
    let mut defs = serde_json::Map::new();
    for i in 0..64 {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        defs.insert(format!("d{i}"), json!({"anyOf": [next, next]}));
    }
    defs.insert("d64".into(), json!({"type": "null"}));
    let diamond = schema(json!({"$ref": "#/$defs/d0", "$defs": defs}));
    assert_eq!(run(&diamond, b"n").map(|t| t.len()), Some(1));
    assert!(accepts(&diamond, b"null") && !accepts(&diamond, b"[]"));
}

#[test]
fn numbers_keep_their_bounds_inside_documents() {
    let s = schema(json!({
        "type": "object",
        "properties": {
            "month": {"type": "integer", "minimum": 1, "maximum": 12},
            "price": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01},
            "old": {"type": "number", "minimum": -1.5, "exclusiveMinimum": true},
            "id": {"type": "integer", "minimum": -9007199254740991i64, "maximum": 9007199254740991i64}
        },
        "additionalProperties": false
    }));
    let ok = |doc: &str| run(&s, doc.as_bytes()).is_some_and(|t| t.iter().any(|t| t.can_end(&s)));
    for doc in [
        r#"{"month":1}"#,
        r#"{"month":12}"#,
        r#"{"month":7.0}"#,
        r#"{"price":0.01}"#,
        r#"{"price":19.99}"#,
        r#"{"price":5}"#,
        r#"{"old":-1.49}"#,
        r#"{"old":0}"#,
        r#"{"id":-9007199254740991}"#,
        r#"{"id":9007199254740991,"month":3}"#,
    ] {
        assert!(ok(doc), "{doc}");
        check_close_is_exact(&s, doc);
    }
    for doc in [
        r#"{"month":0}"#,
        r#"{"month":13}"#,
        r#"{"month":-1}"#,
        r#"{"month":1.5}"#,
        r#"{"month":1e1}"#,
        r#"{"price":0}"#,
        r#"{"price":-0}"#,
        r#"{"price":1.001}"#,
        r#"{"old":-1.5}"#,
        r#"{"id":9007199254740992}"#,
    ] {
        assert!(!ok(doc), "{doc}");
    }
    // A dead end is seen at once: after `13` no byte can continue the month.
    assert!(run(&s, br#"{"month":13"#).is_none());
    assert!(run(&s, br#"{"month":-"#).is_none());
    // Bounds with no integer between them admit nothing.
    assert!(matches!(
        crate::compile_schema(
            &json!({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2})
        ),
        Err(crate::SchemaError::NoInstance)
    ));
    assert!(matches!(
        crate::compile_schema(&json!({"type": "number", "multipleOf": 0})),
        Err(crate::SchemaError::Invalid { .. })
    ));
}

#[test]
fn all_of_and_applicators_with_siblings_are_intersections() {
    let cases = [
        (
            json!({"allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}),
            vec![r#"{"a":1,"b":"x"}"#, r#"{"b":"","a":-2,"c":null}"#],
            vec![r#"{"a":1}"#, r#"{"a":"x","b":"y"}"#, r#"{"a":1,"b":2}"#],
        ),
        (
            // A key one side does not declare meets that side's additional schema.
            json!({"allOf": [
                {"properties": {"a": {}}, "additionalProperties": false},
                {"properties": {"b": {}}}]}),
            vec![r#"{"a":1}"#, "{}"],
            vec![r#"{"b":1}"#, r#"{"a":1,"c":2}"#],
        ),
        (
            json!({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "minimum": 3}),
            vec!["3", "40"],
            vec!["2", "3.5", "\"3\""],
        ),
        (
            json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 2}),
            vec!["2", "\"x\""],
            vec!["1", "null"],
        ),
        (
            json!({"allOf": [{"enum": [1, "a", 2, 2.5]}, {"type": "integer", "minimum": 2}]}),
            vec!["2", "2.0"],
            vec!["1", "\"a\"", "2.5"],
        ),
        (
            json!({"allOf": [
                {"type": "array", "prefixItems": [{"type": "integer"}], "maxItems": 3},
                {"type": "array", "items": {"minimum": 0}, "minItems": 2}]}),
            vec!["[0,1]", "[5,2.5,3]"],
            vec!["[1]", "[-1,2]", "[1,2,3,4]"],
        ),
        (
            json!({"allOf": [{"type": "number", "multipleOf": 2}, {"multipleOf": 3}]}),
            vec!["0", "6", "-12", "18.0"],
            vec!["2", "3", "9"],
        ),
    ];
    for (v, good, bad) in cases {
        let s = schema(v.clone());
        let ok =
            |doc: &str| run(&s, doc.as_bytes()).is_some_and(|t| t.iter().any(|t| t.can_end(&s)));
        for doc in good {
            assert!(ok(doc), "{v}: {doc}");
            check_close_is_exact(&s, doc);
        }
        for doc in bad {
            assert!(!ok(doc), "{v}: {doc}");
        }
    }
    // Contradicting branches admit nothing.
    assert!(matches!(
        crate::compile_schema(&json!({"allOf": [{"type": "string"}, {"type": "integer"}]})),
        Err(crate::SchemaError::NoInstance)
    ));
}

#[test]
fn one_of_is_exact_where_its_branches_exclude_each_other() {
    let exclusive = schema(json!({"oneOf": [
        {"type": "integer"},
        {"type": "string"},
        {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}));
    assert!(
        exclusive.relaxations().is_empty(),
        "{:?}",
        exclusive.relaxations()
    );
    // Overlapping branches, few: each branch without the others, exactly.
    let overlapping = schema(json!({"oneOf": [{"type": "integer"}, {"minimum": 2}]}));
    assert!(overlapping.relaxations().is_empty());
    let ok = |s: &Schema, doc: &str| {
        run(s, doc.as_bytes()).is_some_and(|t| t.iter().any(|t| t.can_end(s)))
    };
    for doc in ["1", "-7", "2.5", "1.0", "\"x\""] {
        assert!(ok(&overlapping, doc), "{doc}");
        check_close_is_exact(&overlapping, doc);
    }
    for doc in ["2", "3", "2.0", "1.5"] {
        assert!(!ok(&overlapping, doc), "{doc}");
    }
    // Many overlapping branches: a union, and the overlap said.
    let many = schema(
        json!({"oneOf": [{"minimum": 1}, {"minimum": 2}, {"minimum": 3},
        {"minimum": 4}, {"minimum": 5}]}),
    );
    assert_eq!(many.relaxations().len(), 1);
    assert!(many.relaxations()[0].starts_with("oneOf at #:"));
}

/// `not`, `if`/`then`/`else`, the dependencies and the member counts, on documents each side of
/// every rule, with exact closing costs.
#[test]
fn negations_conditions_dependencies_and_member_counts() {
    let cases = [
        (
            json!({"not": {"type": "integer"}}),
            vec!["1.5", "-0.25", "\"1\"", "null", "[]", "{}", "true"],
            vec!["1", "0", "-3", "1.0", "10.00"],
        ),
        (
            json!({"not": {"minimum": 3, "maximum": 5}}),
            vec!["2.99", "5.01", "-1"],
            // Bounds say nothing of other types: the complement refuses them.
            vec!["3", "4.5", "5", "5.0", "\"a\"", "{}"],
        ),
        (
            json!({"not": {"multipleOf": 0.5}}),
            vec!["0.25", "1.1", "7.75"],
            vec!["0", "1", "1.5", "2.50"],
        ),
        (
            json!({"not": {"enum": ["a", "ab", 1, true, null]}}),
            vec![
                "\"\"", "\"b\"", "\"abc\"", "\"aa\"", "2", "0.5", "false", "[]",
            ],
            vec!["\"a\"", "\"ab\"", "1", "1.0", "true", "null"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"not": {}}}}),
            vec!["{}", "{\"b\":1}"],
            vec!["{\"a\":1}"],
        ),
        (
            json!({"not": {"type": "object", "properties": {"foo": {"type": "string"}},
                "required": ["foo"]}}),
            vec!["{}", "{\"foo\":1}", "{\"bar\":\"x\"}", "1"],
            vec!["{\"foo\":\"x\"}", "{\"foo\":\"\",\"bar\":2}"],
        ),
        (
            json!({"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10},
                "else": {"multipleOf": 2}}),
            vec!["-1", "-10", "0", "4", "\"x\""],
            vec!["-11", "3", "0.5"],
        ),
        (
            json!({"type": "object", "if": {"properties": {"kind": {"const": "a"}},
                "required": ["kind"]}, "then": {"required": ["x"]}, "else": {"required": ["y"]}}),
            vec![
                "{\"kind\":\"a\",\"x\":1}",
                "{\"kind\":\"b\",\"y\":1}",
                "{\"y\":1}",
            ],
            vec!["{\"kind\":\"a\",\"y\":1}", "{\"kind\":\"b\",\"x\":1}", "{}"],
        ),
        (
            json!({"dependentRequired": {"a": ["b", "c"]}}),
            vec!["{}", "{\"b\":1}", "{\"a\":1,\"b\":2,\"c\":3}", "[1]"],
            vec!["{\"a\":1}", "{\"a\":1,\"b\":2}"],
        ),
        (
            json!({"dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}}}),
            vec!["{\"b\":\"x\"}", "{\"a\":0,\"b\":2}", "{\"a\":0}"],
            vec!["{\"a\":0,\"b\":\"x\"}"],
        ),
        (
            json!({"dependencies": {"a": ["b"], "c": {"required": ["d"]}}}),
            vec!["{\"a\":1,\"b\":1}", "{\"c\":1,\"d\":1}", "{}"],
            vec!["{\"a\":1}", "{\"c\":1}"],
        ),
        (
            json!({"type": "object", "minProperties": 2, "maxProperties": 3,
                "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
            vec!["{\"a\":1,\"b\":2}", "{\"a\":1,\"b\":2,\"c\":3}"],
            vec![
                "{\"a\":1}",
                "{\"b\":1,\"c\":2}",
                "{\"a\":1,\"b\":2,\"c\":3,\"d\":4}",
            ],
        ),
        (
            json!({"type": "object", "maxProperties": 1,
                "properties": {"a": {}, "b": {}}, "required": ["b"]}),
            vec!["{\"b\":1}"],
            vec!["{\"a\":1,\"b\":1}", "{\"a\":1}", "{}"],
        ),
        (
            json!({"type": "array", "contains": {"type": "integer", "minimum": 5}}),
            vec!["[5]", "[1,\"a\",7]", "[9,9]"],
            vec!["[]", "[1,2]", "[\"5\"]"],
        ),
        (
            json!({"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 3,
                "maxItems": 4}),
            vec!["[1,1]", "[1,0,1,1]", "[1,1,1]"],
            vec!["[1]", "[1,1,1,1]", "[0,0,0,1]", "[1,1,0,0,0]"],
        ),
        (
            json!({"prefixItems": [{"type": "string"}], "items": {"type": "integer"},
                "contains": {"type": "string"}, "maxContains": 1}),
            vec!["[\"a\"]", "[\"a\",1,2]"],
            vec!["[1]", "[]"],
        ),
        (
            json!({"not": {"minProperties": 1}}),
            vec!["{}"],
            vec!["{\"a\":1}", "1"],
        ),
    ];
    for (v, good, bad) in cases {
        let s = schema(v.clone());
        assert!(s.relaxations().is_empty(), "{v}");
        let ok =
            |doc: &str| run(&s, doc.as_bytes()).is_some_and(|t| t.iter().any(|t| t.can_end(&s)));
        for doc in good {
            assert!(ok(doc), "{v}: {doc}");
            check_close_is_exact(&s, doc);
        }
        for doc in bad {
            assert!(!ok(doc), "{v}: {doc}");
        }
    }
}

#[test]
fn patterns_read_whole_characters_escaped_or_not() {
    let s = schema(json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$", "maxLength": 8},
            "date": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
            "word": {"type": "string", "pattern": "é|😀", "minLength": 2},
            "q": {"type": "string", "pattern": "^\"[^\"]*\"$"}
        },
        "additionalProperties": false
    }));
    let ok = |doc: &str| run(&s, doc.as_bytes()).is_some_and(|t| t.iter().any(|t| t.can_end(&s)));
    for doc in [
        r#"{"id":"get_x1"}"#,
        r#"{"id":"a"}"#,
        r#"{"date":"2024-05-03"}"#,
        r#"{"date":"2024-05\u002d03"}"#,
        r#"{"word":"café"}"#,
        r#"{"word":"caf\u00e9"}"#,
        r#"{"word":"x😀"}"#,
        r#"{"word":"x\ud83d\ude00"}"#,
        r#"{"q":"\"hi\""}"#,
        r#"{"q":"\u0022\u0022"}"#,
    ] {
        assert!(ok(doc), "{doc}");
        check_close_is_exact(&s, doc);
    }
    for doc in [
        r#"{"id":"Get"}"#,
        r#"{"id":"abcdefghi"}"#,
        r#"{"id":""}"#,
        r#"{"date":"2024-5-03"}"#,
        r#"{"word":"é"}"#,
        r#"{"word":"cafe"}"#,
        r#"{"q":"hi"}"#,
    ] {
        assert!(!ok(doc), "{doc}");
    }
    // A dead end is seen at the character that makes it: `G` cannot start an id.
    assert!(run(&s, br#"{"id":"G"#).is_none());
    assert!(run(&s, br#"{"date":"20x"#).is_none());
}
