//! What one source file says about its module, read from its tokens (proc-macro2's lexer, so
//! comments, doc comments and string literals never look like code): the items it defines, the
//! modules it declares, its `use` declarations, and the paths and names its code mentions.
//! Everything under `#[cfg(test)]` is left out, and so are files only a test module declares.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// One name brought in by a `use` (a leaf of its tree).
#[derive(Debug, Clone)]
pub struct Import {
    /// The name it binds: `None` for a glob and for `as _`.
    pub name: Option<String>,
    /// The path as written, `crate`, `super`, `self` included; `::` first for `::name` paths.
    pub path: Vec<String>,
    pub glob: bool,
    /// `pub`, `pub(crate)`, …: a re-export, which is no use by itself.
    pub public: bool,
    pub line: usize,
}

/// A path of two or more segments in code (`crate::a::B`, `super::f`, `child::g`).
#[derive(Debug, Clone)]
pub struct PathRef {
    pub segments: Vec<String>,
    pub line: usize,
}

#[derive(Debug)]
pub enum ChildSource {
    /// `mod x;`, with its `#[path = "…"]` if any.
    File { path_attr: Option<String> },
    /// `mod x { … }`.
    Inline(Box<ParsedModule>),
}

#[derive(Debug)]
pub struct ChildModule {
    pub name: String,
    pub source: ChildSource,
}

/// One module's contents, test-only parts left out.
#[derive(Debug, Default)]
pub struct ParsedModule {
    /// Names of the items defined here (functions, types, traits, constants, statics, macros).
    pub items: BTreeSet<String>,
    pub children: Vec<ChildModule>,
    /// Module-level `use` declarations, which put names in the module's scope.
    pub imports: Vec<Import>,
    /// `use` declarations inside function bodies and blocks: references only.
    pub body_uses: Vec<Import>,
    pub paths: Vec<PathRef>,
    /// Every name the code mentions on its own or as a path's first segment (not a method or
    /// field after `.`, not a field or binding before `:`), with the first line it is on.
    pub idents: BTreeMap<String, usize>,
    /// `#![cfg(test)]`: the whole module is test code.
    pub test_only: bool,
}

pub fn parse_file(src: &str) -> Result<ParsedModule, String> {
    let stream: TokenStream = src.parse().map_err(|e| format!("{e}"))?;
    Ok(parse_items(&trees(stream)))
}

fn trees(stream: TokenStream) -> Vec<TokenTree> {
    stream.into_iter().collect()
}

fn line(t: &TokenTree) -> usize {
    t.span().start().line
}

fn is_punct(t: Option<&TokenTree>, c: char) -> bool {
    matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

fn ident(t: Option<&TokenTree>) -> Option<String> {
    match t {
        Some(TokenTree::Ident(i)) => Some(i.to_string()),
        _ => None,
    }
}

fn is_ident(t: Option<&TokenTree>, word: &str) -> bool {
    ident(t).is_some_and(|i| i == word)
}

/// `#[…]` or `#![…]` at `i`: the attribute's tokens, whether it is inner, and where it ends.
fn attribute(tokens: &[TokenTree], i: usize) -> Option<(Vec<TokenTree>, bool, usize)> {
    if !is_punct(tokens.get(i), '#') {
        return None;
    }
    let inner = is_punct(tokens.get(i + 1), '!');
    let at = if inner { i + 2 } else { i + 1 };
    match tokens.get(at) {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket => {
            Some((trees(g.stream()), inner, at + 1))
        }
        _ => None,
    }
}

/// `cfg(test)`, `cfg(all(test, …))`: code that exists only in test builds.
fn is_cfg_test(attr: &[TokenTree]) -> bool {
    match attr {
        [TokenTree::Ident(cfg), TokenTree::Group(pred)] if cfg == "cfg" => requires_test(pred),
        _ => false,
    }
}

fn requires_test(pred: &proc_macro2::Group) -> bool {
    let tokens = trees(pred.stream());
    match tokens.as_slice() {
        [TokenTree::Ident(t)] => t == "test",
        [TokenTree::Ident(all), TokenTree::Group(list)] if all == "all" => {
            split_commas(&trees(list.stream())).iter().any(|part| {
                matches!(part.as_slice(), [TokenTree::Ident(t)] if t == "test")
                    || matches!(part.as_slice(), [TokenTree::Ident(all), TokenTree::Group(g)]
                        if all == "all" && requires_test(g))
            })
        }
        _ => false,
    }
}

/// Whether an attribute's arguments are code that may name items (`#[error("…", arch::NAMES)]`,
/// `#[derive(…)]`); `doc`, `cfg` and `path` hold none.
fn attribute_is_code(attr: &[TokenTree]) -> bool {
    !matches!(
        ident(attr.first()).as_deref(),
        Some("doc" | "cfg" | "cfg_attr" | "path")
    )
}

/// `path = "…"`: the file a `mod` declaration names.
fn path_attribute(attr: &[TokenTree]) -> Option<String> {
    match attr {
        [TokenTree::Ident(p), TokenTree::Punct(eq), TokenTree::Literal(lit)]
            if p == "path" && eq.as_char() == '=' =>
        {
            Some(lit.to_string().trim_matches('"').to_string())
        }
        _ => None,
    }
}

fn split_commas(tokens: &[TokenTree]) -> Vec<Vec<TokenTree>> {
    tokens
        .split(|t| is_punct(Some(t), ','))
        .filter(|part| !part.is_empty())
        .map(<[TokenTree]>::to_vec)
        .collect()
}

/// Past the qualifiers of an item (`pub(crate) unsafe extern "C" const async …`): the index of
/// its keyword, and whether it is `pub` in any form.
fn item_keyword(tokens: &[TokenTree]) -> (usize, bool) {
    let (mut j, mut public) = (0, false);
    loop {
        match ident(tokens.get(j)).as_deref() {
            Some("pub") => {
                public = true;
                j += 1;
                if matches!(tokens.get(j), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
                {
                    j += 1;
                }
            }
            Some("unsafe" | "async" | "default" | "auto") => j += 1,
            Some("extern") if !is_ident(tokens.get(j + 1), "crate") => {
                j += 1;
                if matches!(tokens.get(j), Some(TokenTree::Literal(_))) {
                    j += 1;
                }
            }
            Some("const")
                if ident(tokens.get(j + 1)).is_some_and(|w| {
                    matches!(w.as_str(), "fn" | "unsafe" | "async" | "extern")
                }) =>
            {
                j += 1
            }
            _ => return (j, public),
        }
    }
}

/// The end (exclusive) of the item starting at `i`: its `;`, or its `{ … }` body.
fn item_end(tokens: &[TokenTree], i: usize) -> usize {
    let (k, _) = item_keyword(&tokens[i..]);
    let kw = ident(tokens.get(i + k)).unwrap_or_default();
    // These may hold braces before their `;` (`use a::{b, c};`, `const X: T = T { … };`).
    let to_semicolon = matches!(kw.as_str(), "use" | "type" | "const" | "static" | "extern");
    let mut j = i + k;
    while j < tokens.len() {
        match &tokens[j] {
            TokenTree::Punct(p) if p.as_char() == ';' => return j + 1,
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace && !to_semicolon => {
                // `macro_rules! m { … };` and `m! { … };` may be followed by a `;`.
                return if is_punct(tokens.get(j + 1), ';') {
                    j + 2
                } else {
                    j + 1
                };
            }
            _ => j += 1,
        }
    }
    j
}

/// After a `#[cfg(test)]` inside a body: the end of what it applies to (a statement, a field,
/// a nested item).
fn element_end(tokens: &[TokenTree], i: usize) -> usize {
    let mut j = i;
    while j < tokens.len() {
        match &tokens[j] {
            TokenTree::Punct(p) if matches!(p.as_char(), ';' | ',') => return j + 1,
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => return j + 1,
            _ => j += 1,
        }
    }
    j
}

fn parse_items(tokens: &[TokenTree]) -> ParsedModule {
    let mut m = ParsedModule::default();
    let mut i = 0;
    while i < tokens.len() {
        let (mut test, mut path_attr, mut code_attrs) = (false, None, Vec::new());
        while let Some((attr, inner, next)) = attribute(tokens, i) {
            if attribute_is_code(&attr) {
                code_attrs.push(attr.clone());
            }
            if is_cfg_test(&attr) {
                if inner {
                    m.test_only = true;
                } else {
                    test = true;
                }
            }
            path_attr = path_attr.or_else(|| path_attribute(&attr));
            i = next;
        }
        if i >= tokens.len() {
            break;
        }
        let end = item_end(tokens, i);
        if !test {
            code_attrs.iter().for_each(|attr| m.scan(attr));
            m.item(&tokens[i..end], path_attr);
        }
        i = end;
    }
    m
}

impl ParsedModule {
    fn item(&mut self, tokens: &[TokenTree], path_attr: Option<String>) {
        let (k, public) = item_keyword(tokens);
        let kw = ident(tokens.get(k)).unwrap_or_default();
        match kw.as_str() {
            "use" => {
                let end = tokens.len() - usize::from(is_punct(tokens.last(), ';'));
                use_tree(&tokens[k + 1..end], &[], public, &mut self.imports);
            }
            "mod" => {
                let Some(name) = ident(tokens.get(k + 1)) else {
                    return;
                };
                let source = match tokens.get(k + 2) {
                    Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                        ChildSource::Inline(Box::new(parse_items(&trees(g.stream()))))
                    }
                    _ => ChildSource::File { path_attr },
                };
                if matches!(&source, ChildSource::Inline(m) if m.test_only) {
                    return;
                }
                self.children.push(ChildModule { name, source });
            }
            "enum" => {
                if let Some(name) = ident(tokens.get(k + 1)) {
                    self.items.insert(name);
                }
                match tokens.split_last() {
                    Some((TokenTree::Group(body), head))
                        if body.delimiter() == Delimiter::Brace =>
                    {
                        self.scan(head);
                        self.variants(&trees(body.stream()));
                    }
                    _ => self.scan(tokens),
                }
            }
            "fn" | "struct" | "union" | "trait" | "type" | "const" | "static" => {
                let at = if is_ident(tokens.get(k + 1), "mut") {
                    k + 2
                } else {
                    k + 1
                };
                if let Some(name) = ident(tokens.get(at)).filter(|n| n != "_") {
                    self.items.insert(name);
                }
                self.scan(tokens);
            }
            "macro_rules" => {
                if let Some(name) = ident(tokens.get(k + 2)) {
                    self.items.insert(name);
                }
                self.scan(tokens);
            }
            // `impl` blocks, `extern` blocks, `extern crate`, item-level macro invocations.
            _ => self.scan(tokens),
        }
    }

    /// An enum's variants: each name is a definition, not a use (`Greedy` the variant is not
    /// `Greedy` the imported type); their fields and discriminants are code.
    fn variants(&mut self, body: &[TokenTree]) {
        for variant in split_commas(body) {
            let mut i = 0;
            while let Some((attr, _, next)) = attribute(&variant, i) {
                if is_cfg_test(&attr) {
                    i = variant.len();
                    break;
                }
                if attribute_is_code(&attr) {
                    self.scan(&attr);
                }
                i = next;
            }
            self.scan(variant.get(i + 1..).unwrap_or_default());
        }
    }

    /// Collects the paths, names and body-level `use`s of some code.
    fn scan(&mut self, tokens: &[TokenTree]) {
        let mut i = 0;
        while i < tokens.len() {
            if let Some((attr, _, next)) = attribute(tokens, i) {
                if is_cfg_test(&attr) {
                    i = element_end(tokens, next);
                    continue;
                }
                if attribute_is_code(&attr) {
                    self.scan(&attr);
                }
                i = next;
                continue;
            }
            let after_dot = i > 0 && is_punct(tokens.get(i - 1), '.');
            let after_sep =
                i > 1 && is_punct(tokens.get(i - 1), ':') && is_punct(tokens.get(i - 2), ':');
            let after_dollar = i > 0 && is_punct(tokens.get(i - 1), '$');
            match &tokens[i] {
                TokenTree::Group(g) => self.scan(&trees(g.stream())),
                // `use` in a body; not `impl Trait + use<'a>`.
                TokenTree::Ident(id) if id == "use" && !is_punct(tokens.get(i + 1), '<') => {
                    let end = (i..tokens.len())
                        .find(|&j| is_punct(tokens.get(j), ';'))
                        .unwrap_or(tokens.len());
                    use_tree(&tokens[i + 1..end], &[], false, &mut self.body_uses);
                    i = end + 1;
                    continue;
                }
                // A macro's metavariable (`$x`), except `$crate`.
                TokenTree::Ident(id) if after_dollar && id != "crate" => {}
                TokenTree::Ident(id) if !after_dot && !after_sep => {
                    let mut segments = vec![id.to_string()];
                    let mut j = i + 1;
                    while is_punct(tokens.get(j), ':') && is_punct(tokens.get(j + 1), ':') {
                        let Some(next) = ident(tokens.get(j + 2)) else {
                            break;
                        };
                        segments.push(next);
                        j += 3;
                    }
                    let at = line(&tokens[i]);
                    let field_or_binding = segments.len() == 1
                        && matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Alone);
                    if !field_or_binding {
                        self.idents.entry(segments[0].clone()).or_insert(at);
                    }
                    if segments.len() >= 2 {
                        self.paths.push(PathRef { segments, line: at });
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// Flattens a use tree (`a::{b, c::d as e, f::*}`) into its leaves, each with its whole path.
fn use_tree(tokens: &[TokenTree], prefix: &[String], public: bool, out: &mut Vec<Import>) {
    let mut path = prefix.to_vec();
    let mut alias: Option<Option<String>> = None;
    let mut at = tokens.first().map(line).unwrap_or(0);
    let mut i = 0;
    if prefix.is_empty() && is_punct(tokens.first(), ':') && is_punct(tokens.get(1), ':') {
        path.push("::".to_string());
        i = 2;
    }
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Punct(p) if p.as_char() == '*' => {
                let line = line(&tokens[i]);
                out.push(Import {
                    name: None,
                    path,
                    glob: true,
                    public,
                    line,
                });
                return;
            }
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
                for part in split_commas(&trees(g.stream())) {
                    use_tree(&part, &path, public, out);
                }
                return;
            }
            TokenTree::Ident(id) if id == "as" => {
                alias = Some(ident(tokens.get(i + 1)).filter(|a| a != "_"));
                i += 1;
            }
            TokenTree::Ident(id) => {
                path.push(id.to_string());
                at = line(&tokens[i]);
            }
            _ => {}
        }
        i += 1;
    }
    if path.last().is_some_and(|s| s == "self") {
        path.pop();
    }
    let Some(last) = path.last().cloned() else {
        return;
    };
    out.push(Import {
        name: alias.unwrap_or(Some(last)),
        path,
        glob: false,
        public,
        line: at,
    });
}
