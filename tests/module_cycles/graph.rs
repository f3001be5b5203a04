//! From crate roots to a graph of source files: the module tree is followed through `mod`
//! declarations (test modules left out), every path is resolved to the file that *defines* the
//! item it names (re-exports and globs followed), and the file graph's cycles are listed with one
//! example reference per edge.

use std::collections::{BTreeMap, BTreeSet};

use super::items::{parse_file, ChildSource, Import, ParsedModule, PathRef};

/// Reads a file by its path relative to the workspace root (`/`-separated); `None` if absent.
pub type Read<'a> = &'a dyn Fn(&str) -> Option<String>;

struct Module {
    file: usize,
    parent: Option<usize>,
    root: usize,
    children: BTreeMap<String, usize>,
    items: BTreeSet<String>,
    imports: Vec<Import>,
    body_uses: Vec<Import>,
    paths: Vec<PathRef>,
    idents: BTreeMap<String, usize>,
}

/// Every module of some crates, and the files they live in.
pub struct Workspace {
    /// Source files, `/`-separated paths relative to the workspace root.
    pub files: Vec<String>,
    modules: Vec<Module>,
    /// Declared modules whose file was not found, files that did not lex.
    pub problems: Vec<String>,
}

/// What a path names.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    Module(usize),
    /// An item defined in this file.
    Item(usize),
    /// Another crate, the prelude, a generic parameter: not ours.
    Elsewhere,
}

/// One reference that makes a file depend on another: `line` of the user, and what it wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    pub line: usize,
    pub what: String,
}

/// File → file, with the first reference (by line) that makes the edge.
pub type Edges = BTreeMap<(usize, usize), Example>;

/// Nesting of imports and globs followed while resolving one name.
const MAX_DEPTH: usize = 32;

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

impl Workspace {
    /// Loads the crates whose root files (`crates/x/src/lib.rs`, `…/main.rs`) are given.
    pub fn load(roots: &[String], read: Read) -> Workspace {
        let mut ws = Workspace {
            files: Vec::new(),
            modules: Vec::new(),
            problems: Vec::new(),
        };
        for root in roots {
            if let Some(parsed) = ws.parse(root, read) {
                let file = ws.file_id(root);
                ws.add_module(parsed, file, None, dir_of(root).to_string(), read);
            }
        }
        ws
    }

    fn file_id(&mut self, path: &str) -> usize {
        match self.files.iter().position(|f| f == path) {
            Some(id) => id,
            None => {
                self.files.push(path.to_string());
                self.files.len() - 1
            }
        }
    }

    fn parse(&mut self, path: &str, read: Read) -> Option<ParsedModule> {
        let src = read(path)?;
        match parse_file(&src) {
            Ok(parsed) if parsed.test_only => None,
            Ok(parsed) => Some(parsed),
            Err(e) => {
                self.problems.push(format!("{path}: {e}"));
                None
            }
        }
    }

    /// Adds a module and, recursively, its children; `dir` is where `mod x;` finds `x.rs`.
    fn add_module(
        &mut self,
        parsed: ParsedModule,
        file: usize,
        parent: Option<usize>,
        dir: String,
        read: Read,
    ) -> usize {
        let id = self.modules.len();
        let root = parent.map_or(id, |p| self.modules[p].root);
        self.modules.push(Module {
            file,
            parent,
            root,
            children: BTreeMap::new(),
            items: parsed.items,
            imports: parsed.imports,
            body_uses: parsed.body_uses,
            paths: parsed.paths,
            idents: parsed.idents,
        });
        for child in parsed.children {
            let child_dir = join(&dir, &child.name);
            let loaded = match child.source {
                ChildSource::Inline(inner) => Some((*inner, file, child_dir)),
                ChildSource::File { path_attr } => {
                    let candidates = match path_attr {
                        Some(p) => vec![join(dir_of(&self.files[file]), &p)],
                        None => vec![
                            join(&dir, &format!("{}.rs", child.name)),
                            join(&child_dir, "mod.rs"),
                        ],
                    };
                    match candidates.iter().find(|c| read(c).is_some()) {
                        Some(path) => self.parse(path, read).map(|p| {
                            let dir = if path.ends_with("/mod.rs") {
                                dir_of(path).to_string()
                            } else {
                                path.trim_end_matches(".rs").to_string()
                            };
                            (p, self.file_id(path), dir)
                        }),
                        None => {
                            self.problems.push(format!(
                                "{}: `mod {}` has no file (looked for {})",
                                self.files[file],
                                child.name,
                                candidates.join(", ")
                            ));
                            None
                        }
                    }
                }
            };
            if let Some((parsed, child_file, child_dir)) = loaded {
                let child_id = self.add_module(parsed, child_file, Some(id), child_dir, read);
                self.modules[id].children.insert(child.name, child_id);
            }
        }
        id
    }

    /// What `name` means in module `m`: a child module, an item defined there, an import
    /// (followed), or a name a glob import brings in.
    fn lookup(&self, m: usize, name: &str, depth: usize) -> Option<Target> {
        if depth > MAX_DEPTH {
            return None;
        }
        let module = &self.modules[m];
        if let Some(&child) = module.children.get(name) {
            return Some(Target::Module(child));
        }
        if module.items.contains(name) {
            return Some(Target::Item(module.file));
        }
        if let Some(import) = module
            .imports
            .iter()
            .find(|i| !i.glob && i.name.as_deref() == Some(name))
        {
            return Some(self.resolve(m, &import.path, depth + 1));
        }
        module.imports.iter().filter(|i| i.glob).find_map(|glob| {
            match self.resolve(m, &glob.path, depth + 1) {
                Target::Module(g) if g != m => self.lookup(g, name, depth + 1),
                _ => None,
            }
        })
    }

    /// Resolves a path written in module `m` as far as modules go: the first item it reaches
    /// is the target (`crate::a::B::new` is `B`).
    fn resolve(&self, m: usize, path: &[String], depth: usize) -> Target {
        let Some((first, mut rest)) = path.split_first() else {
            return Target::Elsewhere;
        };
        let mut target = match first.as_str() {
            "crate" => Target::Module(self.modules[m].root),
            "self" => Target::Module(m),
            "super" => match self.modules[m].parent {
                Some(p) => Target::Module(p),
                None => return Target::Elsewhere,
            },
            "::" => return Target::Elsewhere,
            name => match self.lookup(m, name, depth) {
                Some(t) => t,
                None => return Target::Elsewhere,
            },
        };
        while let (Target::Module(at), Some((segment, tail))) = (&target, rest.split_first()) {
            target = match segment.as_str() {
                "super" => match self.modules[*at].parent {
                    Some(p) => Target::Module(p),
                    None => return Target::Elsewhere,
                },
                "self" => Target::Module(*at),
                name => match self.lookup(*at, name, depth) {
                    Some(t) => t,
                    // Made by a macro, or not ours: no edge.
                    None => return Target::Elsewhere,
                },
            };
            rest = tail;
        }
        target
    }

    /// The file graph: an edge A → B for each file A that uses an item defined in file B.
    pub fn edges(&self) -> Edges {
        let mut edges = Edges::new();
        let mut add = |from: usize, to: Target, line: usize, what: String| {
            if let Target::Item(to) = to {
                if to != from {
                    let example = Example { line, what };
                    edges
                        .entry((from, to))
                        .and_modify(|e| {
                            if line < e.line {
                                *e = example.clone();
                            }
                        })
                        .or_insert(example);
                }
            }
        };
        for (m, module) in self.modules.iter().enumerate() {
            let file = module.file;
            let local = |name: &str| {
                module.children.contains_key(name)
                    || module.items.contains(name)
                    || module
                        .imports
                        .iter()
                        .any(|i| !i.glob && i.name.as_deref() == Some(name))
            };
            for import in module.imports.iter().chain(&module.body_uses) {
                let target = self.resolve(m, &import.path, 0);
                let written = import.path.join("::");
                if import.glob {
                    match target {
                        // A glob uses what the code names from it.
                        Target::Module(g) if g != m => {
                            for (name, &line) in &module.idents {
                                if !local(name) {
                                    if let Some(t) = self.lookup(g, name, 0) {
                                        add(file, t, line, format!("{name} (from {written}::*)"));
                                    }
                                }
                            }
                        }
                        Target::Item(_) if !import.public => {
                            add(file, target, import.line, format!("{written}::*"))
                        }
                        _ => {}
                    }
                } else if !import.public {
                    add(file, target, import.line, written);
                } else if let Some(&line) = import.name.as_ref().and_then(|n| module.idents.get(n))
                {
                    // A re-export is no use; the re-exporting file's own code using it is.
                    let name = import.name.as_deref().unwrap_or_default();
                    add(
                        file,
                        target,
                        line,
                        format!("{name} (re-exported from {written})"),
                    );
                }
            }
            for path in &module.paths {
                let target = self.resolve(m, &path.segments, 0);
                add(file, target, path.line, path.segments.join("::"));
            }
        }
        edges
    }
}

/// Every elementary cycle of the graph (at most `limit`), each starting at its smallest file.
pub fn cycles(edges: &Edges, limit: usize) -> Vec<Vec<usize>> {
    let mut next: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    let mut found = Vec::new();
    for component in components(&next) {
        for &start in &component {
            // Cycles through `start` and larger nodes of its component only: each found once.
            let allowed = |n: usize| n >= start && component.contains(&n);
            let mut path = vec![start];
            let mut stack = vec![next.get(&start).cloned().unwrap_or_default().into_iter()];
            while let Some(successors) = stack.last_mut() {
                if found.len() >= limit {
                    return found;
                }
                match successors.next() {
                    Some(n) if n == start => found.push(path.clone()),
                    Some(n) if allowed(n) && !path.contains(&n) => {
                        path.push(n);
                        stack.push(next.get(&n).cloned().unwrap_or_default().into_iter());
                    }
                    Some(_) => {}
                    None => {
                        stack.pop();
                        path.pop();
                    }
                }
            }
        }
    }
    found
}

/// Strongly connected components of more than one node (Tarjan's algorithm).
fn components(next: &BTreeMap<usize, Vec<usize>>) -> Vec<BTreeSet<usize>> {
    struct Tarjan<'a> {
        next: &'a BTreeMap<usize, Vec<usize>>,
        index: BTreeMap<usize, usize>,
        low: BTreeMap<usize, usize>,
        stack: Vec<usize>,
        out: Vec<BTreeSet<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for &w in self.next.get(&v).into_iter().flatten() {
                if !self.index.contains_key(&w) {
                    self.visit(w);
                    let low = self.low[&v].min(self.low[&w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[&v].min(self.index[&w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[&v] == self.index[&v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    component.insert(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for &v in next.keys() {
        if !t.index.contains_key(&v) {
            t.visit(v);
        }
    }
    t.out
}

/// The crate a file belongs to: `crates/<name>/…`, else its first directory.
fn crate_of(file: &str) -> &str {
    let mut parts = file.split('/');
    match (parts.next(), parts.next()) {
        (Some("crates"), Some(name)) => name,
        (Some(first), _) => first,
        _ => file,
    }
}

/// The cycles, grouped per crate and per tangle (files that all reach each other), each with
/// one reference per edge.
pub fn report(ws: &Workspace, edges: &Edges, cycles: &[Vec<usize>]) -> String {
    let mut next: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
    }
    let tangles = components(&next);
    // Crate → tangle → its cycles.
    let mut per_crate: BTreeMap<&str, BTreeMap<usize, Vec<&Vec<usize>>>> = BTreeMap::new();
    for cycle in cycles {
        let tangle = tangles.iter().position(|t| t.contains(&cycle[0]));
        per_crate
            .entry(crate_of(&ws.files[cycle[0]]))
            .or_default()
            .entry(tangle.unwrap_or(usize::MAX))
            .or_default()
            .push(cycle);
    }
    let mut out = format!(
        "{} module cycle(s) at file granularity. Break each at one edge: move the item used across \
         it into the file that uses it, or into a new file both sides can use (for a parent and \
         child: move the parent's own items the child uses out of lib.rs/mod.rs into a sibling).\n",
        cycles.len()
    );
    for (krate, by_tangle) in per_crate {
        let short = |f: usize| {
            let path = &ws.files[f];
            let src = format!("crates/{krate}/src/");
            path.strip_prefix(&src).unwrap_or(path).to_string()
        };
        let count: usize = by_tangle.values().map(Vec::len).sum();
        out += &format!("\ncrate {krate}: {count} cycle(s)\n");
        for (tangle, list) in by_tangle {
            if let Some(files) = tangles.get(tangle) {
                let names: Vec<String> = files.iter().map(|&f| short(f)).collect();
                out += &format!(
                    " tangle of {} files ({}), {} cycle(s):\n",
                    files.len(),
                    names.join(", "),
                    list.len()
                );
            }
            for cycle in list {
                let names: Vec<String> =
                    cycle.iter().chain(&cycle[..1]).map(|&f| short(f)).collect();
                out += &format!("  {}\n", names.join(" → "));
                for (k, &from) in cycle.iter().enumerate() {
                    let to = cycle[(k + 1) % cycle.len()];
                    let e = &edges[&(from, to)];
                    out += &format!(
                        "    {} uses {} (line {}), defined in {}\n",
                        ws.files[from],
                        e.what,
                        e.line,
                        short(to)
                    );
                }
            }
        }
    }
    out
}
