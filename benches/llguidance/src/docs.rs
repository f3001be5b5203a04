//! The documents both matchers are forced through, and the byte-level probes that compare the
//! two JSON languages at their edges.
//!
//! Every document is valid JSON (RFC 8259) inside what both libraries accept as configured: no
//! whitespace before or after the top-level value, no `\/` escape, no raw DEL, no unpaired
//! surrogate escape, whitespace runs of at most 24 bytes (the probes show where the languages
//! differ).

/// `(name, text)` of each timed document.
pub const DOCS: &[(&str, &str)] = &[
    (
        "compact-object",
        r#"{"id":1842,"name":"Ada Lovelace","active":true,"score":97.5,"tags":["math","poetry"],"manager":null}"#,
    ),
    (
        "pretty-config",
        r#"{
  "server": {
    "host": "0.0.0.0",
    "port": 8080,
    "tls": {
      "enabled": false,
      "cert": null
    }
  },
  "database": {
    "url": "postgres://db.internal:5432/app",
    "pool": {
      "min": 2,
      "max": 32,
      "idle_timeout_ms": 30000
    }
  },
  "features": ["search", "export", "beta-ui"]
}"#,
    ),
    (
        "int-array",
        "[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5, 0, 2, 8, 8, 4, 1, 9, 7, 1, 6, 9, 3, 9, 9, 3, 7, 5, 1, 0, 5, 8, 2, 0, 9, 7, 4, 9, 4, 4]",
    ),
    (
        "float-array",
        "[0.5,-1.25,3.14159,2.718281828,6.02e23,-1.6E-19,1e-7,299792458,0,-0.0,42.0,1.0e+3,-273.15,0.001,123456.789]",
    ),
    (
        "long-english",
        r#"{"title":"On the Analytical Engine","body":"The Analytical Engine has no pretensions whatever to originate anything. It can do whatever we know how to order it to perform. It can follow analysis; but it has no power of anticipating any analytical relations or truths. Its province is to assist us in making available what we are already acquainted with. This it is calculated to effect primarily and chiefly of course, through its executive faculties; but it is likely to exert an indirect and reciprocal influence on science itself in another manner."}"#,
    ),
    (
        "multilingual",
        r#"{"ja":"吾輩は猫である。名前はまだ無い。","zh":"学而时习之，不亦说乎？","ru":"Счастливые семьи похожи друг на друга.","ar":"العلم نور والجهل ظلام","el":"Γνῶθι σεαυτόν","hi":"सत्यमेव जयते","ko":"안녕하세요, 세계!","emoji":"🚀🌍✨ launch 🎉","accents":"crème brûlée, naïve café, Zürich, São Paulo, Øresund"}"#,
    ),
    (
        "escapes",
        r#"{"path":"C:\\Users\\ada\\notes.txt","quote":"She said \"hello\" and left.","lines":"one\ntwo\n\tindented\r\nthree","unicode":"caf\u00e9 \u00fcber \u4e2d\u6587","pair":"\ud83d\ude00 smile","control":"bell\u0007 form\f back\b","mixed":"tab:\t quote:\" slash:\\ end"}"#,
    ),
    (
        "nested-arrays",
        "[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]],[[[]]],[[1,[2,[3,[4,[5]]]]]]]",
    ),
    (
        "records",
        r#"[
  {"id": 1, "user": "alice", "email": "alice@example.com", "roles": ["admin", "dev"], "last_login": "2024-03-01T12:00:00Z"},
  {"id": 2, "user": "bob", "email": "bob@example.org", "roles": ["dev"], "last_login": null},
  {"id": 3, "user": "carol", "email": "carol@example.net", "roles": [], "last_login": "2024-02-14T08:30:15Z"},
  {"id": 4, "user": "dave", "email": "dave@example.com", "roles": ["ops", "oncall"], "last_login": "2023-12-31T23:59:59Z"}
]"#,
    ),
    (
        "geojson",
        r#"{"type":"FeatureCollection","features":[{"type":"Feature","geometry":{"type":"Point","coordinates":[-122.4194,37.7749]},"properties":{"name":"San Francisco","population":808437}},{"type":"Feature","geometry":{"type":"LineString","coordinates":[[2.3522,48.8566],[4.8357,45.764],[5.3698,43.2965]]},"properties":{"name":"Paris–Lyon–Marseille","length_km":775.2}}]}"#,
    ),
    (
        "package-json",
        r#"{
    "name": "@acme/widget",
    "version": "2.13.0-beta.4",
    "private": false,
    "main": "dist/index.js",
    "scripts": {
        "build": "tsc -p tsconfig.json && node scripts/bundle.mjs",
        "test": "vitest run --coverage",
        "lint": "eslint . --ext .ts,.tsx"
    },
    "dependencies": {
        "react": "^18.2.0",
        "zod": "~3.22.4"
    },
    "engines": {"node": ">=18"}
}"#,
    ),
    (
        "tool-call",
        r#"{"name":"get_weather","arguments":{"location":"Reykjavík, IS","unit":"celsius","days":5,"include":["wind","precipitation","uv_index"],"hourly":false}}"#,
    ),
    ("top-level-string", r#""just a string, with a comma, and “curly quotes”""#),
    ("top-level-number", "-12345.6789e-10"),
    ("top-level-literal", "true"),
    (
        "empty-structures",
        r#"{"a":{},"b":[],"c":[{}],"d":[[],[[]]],"e":"","f":{"g":{"h":{}}}}"#,
    ),
    (
        "tab-indented",
        "{\n\t\"matrix\": [\n\t\t[1, 0, 0],\n\t\t[0, 1, 0],\n\t\t[0, 0, 1]\n\t],\n\t\"det\": 1,\n\t\"label\": \"identity\"\n}",
    ),
    (
        "crlf-pretty",
        "{\r\n  \"event\": \"deploy\",\r\n  \"ok\": true,\r\n  \"steps\": [\r\n    \"build\",\r\n    \"test\",\r\n    \"ship\"\r\n  ]\r\n}",
    ),
    (
        "number-edges",
        "[0,-0,1,-1,10,1e0,1E1,1e+1,1e-1,0.0,-0.5e-3,9007199254740993,123456789012345678901234567890,1.7976931348623157e308,5e-324]",
    ),
    (
        "base64",
        r#"{"mime":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==","sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}"#,
    ),
    (
        "markdown-string",
        r##"{"role":"assistant","content":"# Summary\n\n- **Fast**: masks in microseconds\n- *Exact*: byte-level matching\n\n```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\n> Quote: \"less is more\"\n\n1. first\n2. second"}"##,
    ),
    (
        "code-string",
        r#"{"language":"python","source":"def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nprint(f\"fib(10) = {fib(10)}\")\n"}"#,
    ),
    (
        "matrix",
        "[[0.12,0.88,-0.33,1.5],[2.25,-3.75,0.0,4.125],[9.99,-9.99,1e-3,-1e3],[0.5,0.25,0.125,0.0625]]",
    ),
    (
        "unicode-keys",
        r#"{"prénom":"Zoë","名前":"太郎","ключ":"значение","emoji🔑":"🔒","a\"b":"quoted key","tab\tkey":1,"":"empty key"}"#,
    ),
    (
        "log-entries",
        r#"[{"ts":"2024-05-17T09:14:03.120Z","level":"info","msg":"server started","port":443},{"ts":"2024-05-17T09:14:07.551Z","level":"warn","msg":"slow query","ms":1834,"sql":"SELECT * FROM orders WHERE status = 'open'"},{"ts":"2024-05-17T09:15:00.000Z","level":"error","msg":"upstream timeout","retry":true,"attempt":3}]"#,
    ),
    (
        "spacey",
        "{ \"a\" : 1 , \"b\" :   [ 1 ,  2 ,   3 ] ,\n\n  \"c\"    :    { \"d\" :   null }   ,  \"e\" : \"  padded  \"  }",
    ),
    (
        "json-schema",
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"name":{"type":"string","minLength":1},"age":{"type":"integer","minimum":0},"email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"uniqueItems":true}},"required":["name","age"],"additionalProperties":false}"#,
    ),
    (
        "html-string",
        r#"{"template":"<div class=\"card\"><h2>{{title}}</h2><p>Price: &euro;9.99 &amp; free shipping</p><a href=\"https://example.com/buy?id=42&ref=mail\">Buy now</a></div>"}"#,
    ),
    (
        "urls",
        r#"{"links":["https://en.wikipedia.org/wiki/JSON","http://localhost:3000/api/v1/users?page=2&per_page=50","ftp://files.example.com/pub/README.txt","mailto:someone@example.com"]}"#,
    ),
    (
        "chat-transcript",
        r#"{"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What's the capital of Australia?"},{"role":"assistant","content":"The capital of Australia is Canberra, not Sydney — a common mix-up."},{"role":"user","content":"Thanks! And New Zealand?"},{"role":"assistant","content":"Wellington."}]}"#,
    ),
    (
        "deep-pretty",
        r#"{
  "a": {
    "b": {
      "c": {
        "d": {
          "e": {
            "f": {
              "g": {
                "h": {
                  "i": {
                    "j": "deep"
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}"#,
    ),
    (
        "booleans-nulls",
        "[true,false,null,true,true,false,null,null,false,true,{\"t\":true,\"f\":false,\"n\":null}]",
    ),
    (
        "invoice",
        r#"{"invoice":"INV-2024-0042","date":"2024-06-30","currency":"EUR","customer":{"name":"Müller & Söhne GmbH","vat":"DE123456789","address":{"street":"Königstraße 12","city":"Stuttgart","zip":"70173"}},"lines":[{"sku":"A-100","qty":3,"unit_price":19.99,"discount":0},{"sku":"B-220","qty":1,"unit_price":249.0,"discount":0.1},{"sku":"C-007","qty":12,"unit_price":0.75,"discount":0}],"total":480.12,"paid":false}"#,
    ),
];

/// What RFC 8259 says about a probe.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Rfc {
    /// A complete JSON text.
    Valid,
    /// Not JSON (or not complete).
    Invalid,
}

/// `(name, bytes, verdict)`: inputs fed one byte per token, to see where the two languages
/// differ. Some are valid JSON that one side leaves out by design (COLTRANE's whitespace and
/// nesting bounds; llguidance's escape set).
pub fn probes() -> Vec<(&'static str, Vec<u8>, Rfc)> {
    use Rfc::{Invalid, Valid};
    let deep = |n: usize| {
        let mut v = vec![b'['; n];
        v.extend(std::iter::repeat_n(b']', n));
        v
    };
    let spaced = |n: usize| {
        let mut v = vec![b'['];
        v.extend(std::iter::repeat_n(b' ', n));
        v.extend(b"1]");
        v
    };
    let b = |s: &str| s.as_bytes().to_vec();
    vec![
        ("escaped slash \"\\/\"", b(r#""a\/b""#), Valid),
        ("escape \\u0000", b(r#""\u0000""#), Valid),
        ("escape \\u00e9", b(r#""\u00e9""#), Valid),
        ("surrogate pair escape", b(r#""\uD83D\uDE00""#), Valid),
        ("lone high surrogate escape", b(r#""\ud800""#), Valid),
        ("lone low surrogate escape", b(r#""\udc00x""#), Valid),
        ("raw DEL (0x7f) in string", b"\"a\x7fb\"".to_vec(), Valid),
        ("raw tab in string", b"\"a\tb\"".to_vec(), Invalid),
        ("raw NUL in string", b"\"a\x00b\"".to_vec(), Invalid),
        ("escape \\U0041", b(r#""\U0041""#), Invalid),
        ("escape \\x41", b(r#""\x41""#), Invalid),
        ("bad hex \\u00G0", b(r#""\u00G0""#), Invalid),
        ("invalid UTF-8 C3 28", b"\"\xc3\x28\"".to_vec(), Invalid),
        ("overlong UTF-8 C0 AF", b"\"\xc0\xaf\"".to_vec(), Invalid),
        (
            "UTF-8 surrogate ED A0 80",
            b"\"\xed\xa0\x80\"".to_vec(),
            Invalid,
        ),
        (
            "4-byte UTF-8 F0 9F 98 80",
            b"\"\xf0\x9f\x98\x80\"".to_vec(),
            Valid,
        ),
        ("-0", b("-0"), Valid),
        ("-0.0e-0", b("-0.0e-0"), Valid),
        ("1E+2", b("1E+2"), Valid),
        ("leading zero 01", b("01"), Invalid),
        ("1.", b("1."), Invalid),
        (".5", b(".5"), Invalid),
        ("1e", b("1e"), Invalid),
        ("+1", b("+1"), Invalid),
        ("NaN", b("NaN"), Invalid),
        ("trailing comma [1,]", b("[1,]"), Invalid),
        ("trailing comma {\"a\":1,}", b(r#"{"a":1,}"#), Invalid),
        ("single quotes", b("{'a':1}"), Invalid),
        ("two values 1 2", b("1 2"), Invalid),
        ("two values {}{}", b("{}{}"), Invalid),
        ("incomplete tru", b("tru"), Invalid),
        ("leading whitespace", b(" \n1"), Valid),
        ("trailing whitespace", b("{}\t\r\n "), Valid),
        ("24 spaces inside an array", spaced(24), Valid),
        ("25 spaces inside an array", spaced(25), Valid),
        ("64-deep arrays", deep(64), Valid),
        ("65-deep arrays", deep(65), Valid),
        ("200-deep arrays", deep(200), Valid),
        ("empty text", Vec::new(), Invalid),
    ]
}
