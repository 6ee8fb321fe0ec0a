//! No import cycle inside a crate: the rule CONTRIBUTING.md states, checked
//! here over every workspace crate's sources.
//!
//! A module's imports are what its code names through `crate::` (grouped
//! `crate::{a, b::c}` included) and through `super::` chains that climb
//! out of its top-level module. Comments and `#[cfg(test)]` modules are
//! left out: a test may reach anywhere. Modules are compared at two
//! granularities: the crate's top-level modules (the layers), and the
//! files inside one top-level module (its parts). A cycle at either is a
//! failure naming the modules and one reference of each edge.

use std::collections::{BTreeMap, BTreeSet};

/// One reference from a file to a module: where, and what it names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: Vec<String>,
    pub to: Vec<String>,
    pub line: usize,
}

/// The code of a file without comments, string contents and test modules,
/// line numbers kept.
pub fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes: Vec<char> = text.chars().collect();
    let (mut i, mut block) = (0, 0usize);
    let mut in_str = false;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if block > 0 {
            if c == '*' && next == Some('/') {
                block -= 1;
                i += 2;
                continue;
            }
            if c == '/' && next == Some('*') {
                block += 1;
                i += 2;
                continue;
            }
            if c == '\n' {
                out.push('\n');
            }
            i += 1;
            continue;
        }
        if in_str {
            if c == '\\' {
                i += 2;
                continue;
            }
            if c == '"' {
                in_str = false;
                out.push('"');
            } else if c == '\n' {
                out.push('\n');
            }
            i += 1;
            continue;
        }
        match (c, next) {
            ('/', Some('/')) => {
                while i < bytes.len() && bytes[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                block = 1;
                i += 2;
            }
            ('"', _) => {
                in_str = true;
                out.push('"');
                i += 1;
            }
            // A char literal that is a quote: not a string's start.
            ('\'', Some('"')) => {
                out.push_str("'\"");
                i += 2;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    strip_test_modules(&out)
}

/// Blanks `#[cfg(test)] mod x { ... }` blocks, keeping their newlines.
fn strip_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(start) = out.find("#[cfg(test)]") {
        let rest = &out[start..];
        let Some(brace) = rest.find('{') else { break };
        // Only a module: `#[cfg(test)] mod name {`.
        let head = &rest[..brace];
        let end = if head.contains("mod ") && !head.contains(';') {
            let mut depth = 0;
            let mut end = rest.len();
            for (k, ch) in rest.char_indices().skip(brace) {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        } else {
            "#[cfg(test)]".len()
        };
        let blank: String = rest[..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(start..start + end, &blank);
    }
    out
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The module paths `code` (of the file at module path `from`) names.
pub fn references(from: &[String], code: &str) -> Vec<Edge> {
    let mut edges = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(k) = rest.find("crate::") {
            let before = rest[..k].chars().last();
            let after = &rest[k + "crate::".len()..];
            rest = after;
            if matches!(before, Some(c) if c == '$' || c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = after.strip_prefix('{') {
                // `crate::{a, b::c}`: each first segment at depth one.
                let mut depth = 0;
                let mut start = true;
                for (k, ch) in group.char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        c if start && (c.is_ascii_alphabetic() || c == '_') => {
                            if let Some(id) = ident_at(&group[k..]) {
                                edges.push(Edge {
                                    from: from.to_vec(),
                                    to: vec![id.to_string()],
                                    line: n + 1,
                                });
                            }
                            start = false;
                        }
                        _ => {}
                    }
                }
            } else if let Some(id) = ident_at(after) {
                let mut to = vec![id.to_string()];
                if let Some(second) = after[id.len()..].strip_prefix("::").and_then(ident_at) {
                    to.push(second.to_string());
                }
                edges.push(Edge {
                    from: from.to_vec(),
                    to,
                    line: n + 1,
                });
            }
        }
        // `super::super::x` from a file at depth d names `from[..d-k]::x`.
        let mut at = 0;
        while let Some(k) = line[at..].find("super::") {
            let start = at + k;
            let before = line[..start].chars().last();
            let mut after = &line[start..];
            let mut ups = 0;
            while let Some(a) = after.strip_prefix("super::") {
                ups += 1;
                after = a;
            }
            at = line.len() - after.len();
            if matches!(before, Some(c) if c == ':' || c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let Some(id) = ident_at(after) else { continue };
            if ups > from.len() {
                continue;
            }
            let mut to: Vec<String> = from[..from.len() - ups].to_vec();
            to.push(id.to_string());
            edges.push(Edge {
                from: from.to_vec(),
                to,
                line: n + 1,
            });
        }
    }
    edges
}

/// A cycle: its modules, and one edge of each step as `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub modules: Vec<String>,
    pub edges: Vec<String>,
}

/// Strongly connected components with more than one node (Tarjan).
fn components(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T, v: &str) {
        let i = t.index.len();
        t.index.insert(v.into(), i);
        t.low.insert(v.into(), i);
        t.stack.push(v.into());
        t.on.insert(v.into());
        for w in t.graph.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The cycles among a crate's files: `(module path, file name, text)`.
/// Top-level modules form one graph; the files under each top-level module
/// another each.
pub fn cycles(files: &[(Vec<String>, String, String)]) -> Vec<Cycle> {
    let known: BTreeSet<&[String]> = files.iter().map(|(p, ..)| p.as_slice()).collect();
    let mut graphs: BTreeMap<Option<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut examples: BTreeMap<(String, String), String> = BTreeMap::new();
    for (path, name, text) in files {
        let Some(top) = path.first() else { continue };
        for e in references(path, &code_only(text)) {
            let (group, from, to) = if e.to[0] != *top {
                // Between layers: top-level modules.
                (None, top.clone(), e.to[0].clone())
            } else {
                // Inside a layer: the files, by their second segment (the
                // longest known module path the reference starts with).
                let to = (1..=e.to.len())
                    .rev()
                    .map(|n| &e.to[..n])
                    .find(|p| known.contains(p))
                    .map(|p| p.join("::"));
                let Some(to) = to else { continue };
                let from = path.join("::");
                if to == from || path.len() < 2 || to == *top {
                    continue;
                }
                (Some(top.clone()), from, to)
            };
            if from == to {
                continue;
            }
            graphs
                .entry(group)
                .or_default()
                .entry(from.clone())
                .or_default()
                .insert(to.clone());
            examples
                .entry((from, to))
                .or_insert_with(|| format!("{name}:{}", e.line));
        }
    }
    let mut out = Vec::new();
    for graph in graphs.values() {
        for comp in components(graph) {
            let set: BTreeSet<&String> = comp.iter().collect();
            let edges = examples
                .iter()
                .filter(|((a, b), _)| set.contains(a) && set.contains(b))
                .map(|((a, b), at)| format!("{a} -> {b} ({at})"))
                .collect();
            out.push(Cycle {
                modules: comp,
                edges,
            });
        }
    }
    out
}

/// The module path of `file` under a crate's `src`: `a/b.rs` and
/// `a/b/mod.rs` are `a::b`; `lib.rs`, `main.rs` the root (empty).
pub fn module_path(rel: &std::path::Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{metadata, root};

    fn file(path: &str, text: &str) -> (Vec<String>, String, String) {
        (
            module_path(std::path::Path::new(path)),
            path.into(),
            text.into(),
        )
    }

    #[test]
    fn references_are_read_from_code_only() {
        let code = code_only(
            "use crate::a::B; // crate::c\nuse crate::{d, e::F};\n/* crate::g */ let s = \"crate::h\";\nfn x() { super::super::i::j(); $crate::k; }\n#[cfg(test)]\nmod tests {\n use crate::l;\n}\n",
        );
        let to: Vec<String> = references(&["m".into(), "n".into()], &code)
            .into_iter()
            .map(|e| e.to.join("::"))
            .collect();
        assert_eq!(to, ["a::B", "d", "e", "i"]);
    }

    #[test]
    fn a_cycle_between_layers_or_inside_one_is_found_and_a_chain_is_not() {
        let chain = [
            file("a.rs", "use crate::b::X;"),
            file("b.rs", "use crate::c::Y;"),
            file("c.rs", ""),
        ];
        assert_eq!(cycles(&chain), vec![]);
        let layers = [
            file("a.rs", "use crate::b::X;"),
            file("b/mod.rs", "mod inner;"),
            file("b/inner.rs", "fn f() { crate::a::g() }"),
        ];
        let found = cycles(&layers);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].modules, ["a", "b"]);
        assert_eq!(found[0].edges, ["a -> b (a.rs:1)", "b -> a (b/inner.rs:1)"]);
        let parts = [
            file("p/mod.rs", ""),
            file("p/x.rs", "use super::y::Y;"),
            file("p/y.rs", "use crate::p::x::X;"),
        ];
        assert_eq!(cycles(&parts)[0].modules, ["p::x", "p::y"]);
    }

    /// The rule itself, over every crate of the workspace.
    #[test]
    fn no_crate_has_an_import_cycle() {
        let metadata = metadata("Cargo.toml").unwrap();
        let mut dirs = BTreeSet::new();
        for package in metadata["packages"].as_array().unwrap() {
            for target in package["targets"].as_array().unwrap() {
                let kinds = target["kind"].as_array().unwrap();
                if kinds.iter().any(|k| k == "lib" || k == "bin") {
                    let src = std::path::PathBuf::from(target["src_path"].as_str().unwrap());
                    dirs.insert(src.parent().unwrap().to_path_buf());
                }
            }
        }
        assert!(dirs.len() >= 10, "{dirs:?}");
        let mut found = Vec::new();
        for dir in &dirs {
            let mut files = Vec::new();
            let mut stack = vec![dir.clone()];
            while let Some(d) = stack.pop() {
                for entry in std::fs::read_dir(&d).unwrap() {
                    let p = entry.unwrap().path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|e| e == "rs") {
                        let rel = p.strip_prefix(dir).unwrap();
                        let name = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
                        files.push((module_path(rel), name, std::fs::read_to_string(&p).unwrap()));
                    }
                }
            }
            for c in cycles(&files) {
                found.push(format!("{}: {}", dir.display(), c.edges.join(", ")));
            }
        }
        assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
    }
}
