//! No module cycles at file granularity in any workspace crate.
//!
//! Nodes are the source files of `crates/*/src` (reached through `mod` declarations from
//! `lib.rs` / `main.rs`, test modules left out); there is an edge A → B when A uses an item
//! *defined* in B — through `use crate::…`, `super::…`, `self::…` or a child module's name, or a
//! path of those in code (macro arguments included). A re-export (`pub use x::Foo` in a
//! `lib.rs`/`mod.rs` facade) resolves to the file defining `Foo` and is no edge by itself, nor is
//! a `mod` declaration; items defined in a `lib.rs`/`mod.rs` are that file's, so a child using
//! them while the parent uses the child's is a cycle. A failure lists every cycle with one
//! reference per edge. The checker: `module_cycles/items.rs` (a file's tokens → its items,
//! imports and references), `module_cycles/graph.rs` (module tree, name resolution, cycles).

mod module_cycles {
    pub mod graph;
    pub mod items;
}

use std::collections::BTreeMap;
use std::path::Path;

use module_cycles::graph::{cycles, report, Edges, Workspace};

/// Cycles listed in a report at most; there are far fewer in any real tree.
const MAX_CYCLES: usize = 1000;

#[test]
fn workspace_has_no_module_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = Vec::new();
    let mut crates: Vec<_> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| {
            e.expect("crates/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    crates.sort();
    for name in &crates {
        for file in ["lib.rs", "main.rs"] {
            let rel = format!("crates/{name}/src/{file}");
            if root.join(&rel).is_file() {
                roots.push(rel);
            }
        }
        if let Ok(bins) = std::fs::read_dir(root.join(format!("crates/{name}/src/bin"))) {
            let mut bins: Vec<String> = bins
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|f| f.ends_with(".rs"))
                .map(|f| format!("crates/{name}/src/bin/{f}"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
    }
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).ok();
    let ws = Workspace::load(&roots, &read);
    assert!(ws.problems.is_empty(), "{}", ws.problems.join("\n"));
    assert!(ws.files.len() > 50, "only {} files found", ws.files.len());
    let edges = ws.edges();
    let found = cycles(&edges, MAX_CYCLES);
    assert!(found.is_empty(), "{}", report(&ws, &edges, &found));
}

// ---- The checker on small synthetic crates ----

/// Loads an in-memory crate (`src/lib.rs` is the root) and returns it with its edges and cycles.
fn check(files: &[(&str, &str)]) -> (Workspace, Edges, Vec<Vec<usize>>) {
    let map: BTreeMap<String, String> = files
        .iter()
        .map(|(p, s)| (format!("crates/x/src/{p}"), s.to_string()))
        .collect();
    let read = |p: &str| map.get(p).cloned();
    let ws = Workspace::load(&["crates/x/src/lib.rs".to_string()], &read);
    assert!(ws.problems.is_empty(), "{:?}", ws.problems);
    let edges = ws.edges();
    let found = cycles(&edges, MAX_CYCLES);
    (ws, edges, found)
}

/// The cycles as short file names (`a.rs`), each in its reported order.
fn named(ws: &Workspace, found: &[Vec<usize>]) -> Vec<Vec<String>> {
    found
        .iter()
        .map(|c| {
            c.iter()
                .map(|&f| ws.files[f].trim_start_matches("crates/x/src/").to_string())
                .collect()
        })
        .collect()
}

fn edge<'a>(ws: &Workspace, edges: &'a Edges, from: &str, to: &str) -> Option<&'a str> {
    let id = |f: &str| {
        ws.files
            .iter()
            .position(|p| p == &format!("crates/x/src/{f}"))
    };
    edges.get(&(id(from)?, id(to)?)).map(|e| e.what.as_str())
}

#[test]
fn checker_finds_a_sibling_cycle_with_an_example_per_edge() {
    let (ws, edges, found) = check(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::Beta;\n\npub struct Alpha(Beta);\n"),
        (
            "b.rs",
            "pub struct Beta;\n\npub fn make() -> usize {\n    std::mem::size_of::<crate::a::Alpha>()\n}\n",
        ),
    ]);
    assert_eq!(named(&ws, &found), [["a.rs", "b.rs"]]);
    let text = report(&ws, &edges, &found);
    assert!(text.contains("crate x: 1 cycle(s)"), "{text}");
    assert!(
        text.contains("crates/x/src/a.rs uses crate::b::Beta (line 1), defined in b.rs"),
        "{text}"
    );
    assert!(
        text.contains("crates/x/src/b.rs uses crate::a::Alpha (line 4), defined in a.rs"),
        "{text}"
    );
}

#[test]
fn checker_finds_a_parent_child_cycle() {
    // The parent's own trait is used by the child, whose kernel the parent calls.
    let (ws, edges, found) = check(&[
        ("lib.rs", "pub mod quant;\n"),
        (
            "quant/mod.rs",
            "mod q4;\n\npub trait Block {}\n\npub fn dot() -> f32 {\n    q4::kernel()\n}\n",
        ),
        (
            "quant/q4.rs",
            "use super::Block;\n\npub struct B4;\nimpl Block for B4 {}\npub fn kernel() -> f32 { 0.0 }\n",
        ),
    ]);
    assert_eq!(named(&ws, &found), [["quant/mod.rs", "quant/q4.rs"]]);
    assert_eq!(
        edge(&ws, &edges, "quant/mod.rs", "quant/q4.rs"),
        Some("q4::kernel")
    );
    assert_eq!(
        edge(&ws, &edges, "quant/q4.rs", "quant/mod.rs"),
        Some("super::Block")
    );
    // lib.rs's `mod` declaration is no edge.
    assert_eq!(edge(&ws, &edges, "lib.rs", "quant/mod.rs"), None);
}

#[test]
fn checker_follows_facade_re_exports_to_the_defining_file() {
    // quant/mod.rs only re-exports; a.rs reaches b.rs's item through it and through lib.rs's
    // glob re-export: edges a → b, none to a facade, no cycle.
    let (ws, edges, found) = check(&[
        ("lib.rs", "mod quant;\npub use quant::*;\n"),
        (
            "quant/mod.rs",
            "mod a;\nmod b;\n\npub use a::Alpha;\npub use b::{Beta, Gamma as G};\n",
        ),
        (
            "quant/a.rs",
            "use super::Beta;\n\npub struct Alpha(Beta, crate::G);\n",
        ),
        ("quant/b.rs", "pub struct Beta;\npub struct Gamma;\n"),
    ]);
    assert!(found.is_empty(), "{}", report(&ws, &edges, &found));
    assert_eq!(
        edge(&ws, &edges, "quant/a.rs", "quant/b.rs"),
        Some("super::Beta")
    );
    let into_facades = edges
        .keys()
        .filter(|(_, to)| ws.files[*to].ends_with("mod.rs") || ws.files[*to].ends_with("lib.rs"));
    assert_eq!(into_facades.count(), 0, "{edges:?}");
    assert_eq!(edges.len(), 1, "{edges:?}");
}

#[test]
fn checker_counts_a_facade_using_its_own_re_export() {
    // Re-exporting is no use, but the facade's own code calling the item is.
    let (ws, _, found) = check(&[
        ("lib.rs", "mod a;\npub use a::helper;\n\npub const N: usize = 3;\npub fn twice() -> usize {\n    helper() * 2\n}\n"),
        ("a.rs", "pub fn helper() -> usize {\n    crate::N\n}\n"),
    ]);
    assert_eq!(named(&ws, &found), [["lib.rs", "a.rs"]]);
}

#[test]
fn checker_ignores_test_modules_comments_and_strings() {
    let (ws, edges, found) = check(&[
        ("lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"),
        (
            "a.rs",
            "use crate::b::Beta;\n\npub struct Alpha(Beta);\n\n#[cfg(test)]\nmod tests {\n    use crate::a::Alpha;\n}\n",
        ),
        (
            "b.rs",
            r#"//! Not a use: crate::a::Alpha.
/// Nor this: [`crate::a::Alpha`].
pub struct Beta;

pub fn name() -> &'static str {
    // crate::a::Alpha
    /* crate::a::Alpha */
    "crate::a::Alpha"
}

#[cfg(test)]
fn only_in_tests() -> crate::a::Alpha {
    crate::a::Alpha(Beta)
}

#[cfg(all(test, feature = "x"))]
use crate::a::Alpha;

#[cfg(test)]
mod tests;
"#,
        ),
        // Reached only through test modules: never read.
        ("tests.rs", "use crate::a::Alpha;\nuse crate::b::Beta;\n"),
        ("b/tests.rs", "use crate::a::Alpha;\n"),
    ]);
    assert!(found.is_empty(), "{}", report(&ws, &edges, &found));
    assert_eq!(edges.len(), 1, "{edges:?}");
    assert!(
        !ws.files.iter().any(|f| f.ends_with("tests.rs")),
        "{:?}",
        ws.files
    );
}

#[test]
fn checker_sees_macro_arguments_body_uses_and_globs() {
    let (ws, edges, found) = check(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n"),
        (
            "a.rs",
            "pub const LIMIT: usize = 4;\npub fn f() {\n    crate::b::g();\n}\n",
        ),
        (
            "b.rs",
            "pub fn g() {\n    assert!(1 < crate::a::LIMIT, \"limit\");\n}\n",
        ),
        (
            "c.rs",
            "pub fn h() {\n    use crate::d::{self, Delta};\n    let _ = (Delta, d::k());\n}\n",
        ),
        (
            "d.rs",
            "use crate::c::*;\n\npub struct Delta;\npub fn k() {\n    h();\n}\n",
        ),
    ]);
    assert_eq!(named(&ws, &found), [["a.rs", "b.rs"], ["c.rs", "d.rs"]]);
    assert_eq!(edge(&ws, &edges, "c.rs", "d.rs"), Some("crate::d::Delta"));
    assert_eq!(
        edge(&ws, &edges, "d.rs", "c.rs"),
        Some("h (from crate::c::*)")
    );
}

#[test]
fn checker_resolves_inline_modules_and_super_chains() {
    // The inline module is part of a.rs: its `super::super::b` path is a.rs's edge to b.rs.
    let (ws, edges, found) = check(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub mod inner {\n    pub fn f() -> usize {\n        super::super::b::ONE\n    }\n}\n",
        ),
        ("b.rs", "pub const ONE: usize = 1;\n"),
    ]);
    assert!(found.is_empty());
    assert_eq!(
        edge(&ws, &edges, "a.rs", "b.rs"),
        Some("super::super::b::ONE")
    );
}
