//! Where a `$ref` points: the schema resources of one document (each subschema with an `$id`,
//! draft 4's `id`, is a resource of its own, and `#…` inside it means that resource, not the
//! document), their `$anchor`s, and reference resolution against the nearest enclosing
//! resource's base URI (RFC 3986 §5.2, without dot segments). A tool's parameters embedded in a
//! larger schema carry an `$id` of their own, so their `#/$defs/…` keep meaning their own defs.
//! Nothing is fetched: a reference to a resource the document does not hold is an error.

use serde_json::Value;
use std::collections::HashMap;

/// Keywords whose values are data, not schemas: never searched for `$id`s.
const DATA: &[&str] = &["enum", "const", "default", "examples", "example"];

/// The resources of a document.
#[derive(Debug, Default)]
pub struct Resources {
    /// (JSON pointer, absolute base URI) of each resource, the document's root first.
    bases: Vec<(String, String)>,
    /// A resource's URI (without fragment) to its pointer.
    by_uri: HashMap<String, String>,
    /// (resource URI, anchor name) to the anchor's pointer.
    anchors: HashMap<(String, String), String>,
    /// A draft before 2019-09: an `$id` beside a `$ref` is ignored, like every sibling.
    ref_overrides: bool,
}

/// Whether the metaschema `uri` is a draft before 2019-09, where `$ref` overrides the keywords
/// beside it.
pub(super) fn ref_overrides(uri: &str) -> bool {
    ["draft-04/schema", "draft-06/schema", "draft-07/schema"]
        .iter()
        .any(|d| uri.trim_end_matches('#').ends_with(d))
}

impl Resources {
    /// Every `$id` and `$anchor` of `doc`.
    pub fn of(doc: &Value) -> Resources {
        let mut r = Resources {
            ref_overrides: doc
                .get("$schema")
                .and_then(Value::as_str)
                .is_some_and(ref_overrides),
            ..Resources::default()
        };
        r.walk(doc, "#", "");
        if !r.by_uri.contains_key("") {
            r.bases.insert(0, ("#".into(), String::new()));
            r.by_uri.insert(String::new(), "#".into());
        }
        r
    }

    fn walk(&mut self, v: &Value, pointer: &str, base: &str) {
        let Value::Object(obj) = v else {
            if let Value::Array(items) = v {
                for (i, item) in items.iter().enumerate() {
                    self.walk(item, &format!("{pointer}/{i}"), base);
                }
            }
            return;
        };
        let mut base = base.to_string();
        let id = obj
            .get("$id")
            .or_else(|| obj.get("id"))
            .and_then(Value::as_str)
            .filter(|_| !(self.ref_overrides && obj.contains_key("$ref")));
        if let Some(id) = id {
            let (uri, fragment) = split(id);
            // A draft-4 `id` that is only a fragment is an anchor; otherwise a new base.
            if uri.is_empty() && !fragment.is_empty() {
                self.anchors
                    .insert((base.clone(), fragment.to_string()), pointer.to_string());
            } else {
                base = join(&base, uri);
                self.bases.push((pointer.to_string(), base.clone()));
                self.by_uri.insert(base.clone(), pointer.to_string());
                if pointer == "#" && !base.is_empty() {
                    // The root is also what "" (the document itself) means.
                    self.by_uri.insert(String::new(), "#".into());
                }
            }
        }
        if let Some(a) = obj.get("$anchor").and_then(Value::as_str) {
            self.anchors
                .insert((base.clone(), a.to_string()), pointer.to_string());
        }
        for (k, child) in obj {
            if DATA.contains(&k.as_str()) {
                continue;
            }
            let p = format!("{pointer}/{}", escape(k));
            self.walk(child, &p, &base);
        }
    }

    /// The base URI in force at `pointer`: its nearest enclosing resource's.
    fn base_at(&self, pointer: &str) -> (&str, &str) {
        let mut best: (&str, &str) = ("#", "");
        for (p, uri) in &self.bases {
            let inside = pointer == p
                || p == "#"
                || pointer
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('/'));
            if inside && p.len() >= best.0.len() {
                best = (p, uri);
            }
        }
        best
    }

    /// The JSON pointer (`#/…`, escaped) a `$ref` written at `pointer` refers to, or `None`
    /// when it leaves the document or names an anchor it does not hold.
    pub fn resolve(&self, pointer: &str, reference: &str) -> Option<String> {
        let (base_pointer, base_uri) = self.base_at(pointer);
        let (uri, fragment) = split(reference);
        let (resource, uri) = if uri.is_empty() {
            (base_pointer.to_string(), base_uri.to_string())
        } else {
            let target = join(base_uri, uri);
            (self.by_uri.get(&target)?.clone(), target)
        };
        if fragment.is_empty() {
            return Some(resource);
        }
        if fragment.starts_with('/') {
            let at = if resource == "#" {
                "#"
            } else {
                resource.as_str()
            };
            return Some(format!("{at}{fragment}"));
        }
        self.anchors.get(&(uri, fragment.to_string())).cloned()
    }
}

/// A reference split at its `#`: the URI part and the fragment.
fn split(r: &str) -> (&str, &str) {
    match r.split_once('#') {
        Some((u, f)) => (u, f),
        None => (r, ""),
    }
}

/// `reference` resolved against `base` (RFC 3986 §5.2, without removing dot segments).
fn join(base: &str, reference: &str) -> String {
    if reference.is_empty() {
        return base.to_string();
    }
    let has_scheme = |s: &str| {
        s.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        })
    };
    if has_scheme(reference) || base.is_empty() {
        return reference.to_string();
    }
    if let Some(rest) = reference.strip_prefix("//") {
        let scheme = base.split_once(':').map_or("", |(s, _)| s);
        return format!("{scheme}://{rest}");
    }
    // The base's scheme and authority (`http://host`), and its path.
    let (origin, path) = match base.find("://") {
        Some(i) => {
            let after = &base[i + 3..];
            let end = after.find('/').map_or(base.len(), |j| i + 3 + j);
            (&base[..end], &base[end..])
        }
        None => match base.split_once(':') {
            Some((scheme, p)) => (&base[..scheme.len() + 1], p),
            None => ("", base),
        },
    };
    if reference.starts_with('/') {
        return format!("{origin}{reference}");
    }
    // A base with an authority and no path merges as if its path were "/".
    let dir = match path.rfind('/') {
        Some(i) => &path[..=i],
        None if base.contains("://") => "/",
        None => "",
    };
    format!("{origin}{dir}{reference}")
}

fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refs_resolve_in_their_own_resource() {
        let doc = json!({
            "$defs": {"a": {"type": "integer"}},
            "properties": {
                "tool": {
                    "$id": "urn:knot:tool:f",
                    "$defs": {"a": {"type": "string"}, "b": {"$anchor": "bee"}},
                    "properties": {"x": {"$ref": "#/$defs/a"}}
                },
                "remote": {"$id": "http://example.com/root.json", "$defs": {
                    "item": {"$id": "item.json", "type": "null"}
                }}
            }
        });
        let r = Resources::of(&doc);
        assert_eq!(
            r.resolve("#/properties/a", "#/$defs/a").unwrap(),
            "#/$defs/a"
        );
        let inner = "#/properties/tool/properties/x";
        assert_eq!(
            r.resolve(inner, "#/$defs/a").unwrap(),
            "#/properties/tool/$defs/a"
        );
        assert_eq!(r.resolve(inner, "#").unwrap(), "#/properties/tool");
        assert_eq!(
            r.resolve(inner, "#bee").unwrap(),
            "#/properties/tool/$defs/b"
        );
        assert_eq!(
            r.resolve("#", "urn:knot:tool:f#/$defs/a").unwrap(),
            "#/properties/tool/$defs/a"
        );
        assert_eq!(
            r.resolve("#/properties/remote", "item.json").unwrap(),
            "#/properties/remote/$defs/item"
        );
        assert_eq!(
            r.resolve("#", "http://example.com/item.json").unwrap(),
            "#/properties/remote/$defs/item"
        );
        assert_eq!(r.resolve("#", "http://elsewhere.org/x.json"), None);
        assert_eq!(r.resolve(inner, "#nope"), None);
    }

    #[test]
    fn uris_join_like_rfc_3986() {
        assert_eq!(join("http://a/b/c.json", "d.json"), "http://a/b/d.json");
        assert_eq!(join("http://a/b/c.json", "/d.json"), "http://a/d.json");
        assert_eq!(join("http://a/b/c.json", "//x/y"), "http://x/y");
        assert_eq!(join("http://a/b/c.json", "urn:z"), "urn:z");
        assert_eq!(join("", "d.json"), "d.json");
        assert_eq!(join("http://a", "d.json"), "http://a/d.json");
    }
}
