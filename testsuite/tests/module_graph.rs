//! The module import graph of every workspace crate has no cycles.
//!
//! Takes each crate's source, following `mod` declarations from its roots (`src/lib.rs`,
//! `src/main.rs`, `src/bin/*.rs`). Every path a module names through `crate::`, `super::` or
//! `self::` (in a `use` or in code; comments and strings are skipped) is an edge from that
//! module to the module the path lands in. An edge between two modules of different subtrees is
//! lifted to the two sibling subtrees that hold them (`ops::dims` -> `import` is `ops` ->
//! `import`), since a subtree is one unit to whoever uses it; a module using its own ancestor, or
//! an ancestor declaring its own children, is no edge. Guarantees: among the children of any
//! module, these edges form no cycle; a cycle fails the test naming every edge of it by file and
//! line, so the shared item can be given a home below both sides.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from its crate root (`[]` is the root).
type ModPath = Vec<String>;

/// One reference from a module to another, where it is written.
#[derive(Clone, Debug)]
struct Edge {
    from: ModPath,
    to: ModPath,
    file: PathBuf,
    line: usize,
    path: String,
}

/// The modules of one crate root and the references between them.
#[derive(Default)]
struct Crate {
    files: BTreeMap<ModPath, PathBuf>,
    edges: Vec<Edge>,
}

/// `text` with comments, string and char literals blanked (newlines kept, so lines still count).
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&c, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            while j < c.len()
                && !(c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')))
            {
                j += 1;
            }
            let end = (j + 1 + hashes).min(c.len());
            out.extend(c[i..end].iter().map(|&ch| blank(ch)));
            i = end;
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && is_char_literal(&c, i) {
            let end = c[i + 1..]
                .iter()
                .position(|&ch| ch == '\'')
                .map_or(c.len(), |p| i + 2 + p);
            let end = if c.get(i + 1) == Some(&'\\') {
                c[i + 3..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map_or(c.len(), |p| i + 4 + p)
            } else {
                end
            };
            out.extend(c[i..end.min(c.len())].iter().map(|&ch| blank(ch)));
            i = end;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn ident_before(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

/// Whether the `'` at `i` opens a char literal (not a lifetime or a label).
fn is_char_literal(c: &[char], i: usize) -> bool {
    matches!(
        (c.get(i + 1), c.get(i + 2)),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The file of module `name` declared (as `mod name;`) in `file`.
fn child_file(file: &Path, name: &str) -> Option<PathBuf> {
    let stem = file.file_stem()?.to_str()?;
    let dir = file.parent()?;
    let base = if matches!(stem, "lib" | "main" | "mod") || dir.ends_with("bin") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    [
        base.join(format!("{name}.rs")),
        base.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn is_ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The word at `i` and the index after it.
fn word_at(c: &[char], i: usize) -> (String, usize) {
    let mut j = i;
    while j < c.len() && is_ident(c[j]) {
        j += 1;
    }
    (c[i..j].iter().collect(), j)
}

fn skip_space(c: &[char], mut i: usize) -> usize {
    while i < c.len() && c[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The paths of a `use` tree (`a::{b, c::{d as e}, f::*}` -> `a::b`, `a::c::d`, `a::f`).
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn walk(c: &[char], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let mut path = prefix.to_vec();
        loop {
            i = skip_space(c, i);
            if i >= c.len() {
                out.push(path);
                return i;
            }
            if c[i] == '{' {
                i += 1;
                loop {
                    i = skip_space(c, i);
                    if i >= c.len() {
                        return i;
                    }
                    if c[i] == '}' {
                        return i + 1;
                    }
                    if c[i] == ',' {
                        i += 1;
                        continue;
                    }
                    i = walk(c, i, &path, out);
                }
            }
            if c[i] == '*' {
                out.push(path);
                return i + 1;
            }
            let (w, j) = word_at(c, i);
            if w.is_empty() {
                out.push(path);
                return i;
            }
            i = skip_space(c, j);
            if w == "as" {
                let (_, j) = word_at(c, i);
                out.push(path);
                return j;
            }
            path.push(w);
            if c.get(i) == Some(&':') && c.get(i + 1) == Some(&':') {
                i += 2;
            } else {
                out.push(path);
                return i;
            }
        }
    }
    let c: Vec<char> = tree.chars().collect();
    let mut out = Vec::new();
    walk(&c, 0, &[], &mut out);
    for p in &mut out {
        // `a::{self, b}`: `self` is `a` itself.
        if p.len() > 1 && p.last().map(String::as_str) == Some("self") {
            p.pop();
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// Every path written in `code` as `crate::…`, `super::…` or `self::…` (outside `use`
/// statements, which [`use_paths`] reads), with its byte offset.
fn inline_paths(c: &[char]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if !is_ident(c[i]) || ident_before(c, i) || (i >= 2 && c[i - 1] == ':' && c[i - 2] == ':') {
            i += 1;
            continue;
        }
        let (w, j) = word_at(c, i);
        if !matches!(w.as_str(), "crate" | "super" | "self") || c.get(j) != Some(&':') {
            i = j.max(i + 1);
            continue;
        }
        let mut path = vec![w];
        let mut k = j;
        while c.get(k) == Some(&':')
            && c.get(k + 1) == Some(&':')
            && c.get(k + 2).is_some_and(|&ch| is_ident(ch))
        {
            let (w, e) = word_at(c, k + 2);
            path.push(w);
            k = e;
        }
        out.push((i, path));
        i = k.max(i + 1);
    }
    out
}

/// Resolves `path`, written in module `at`, to the module it lands in, given the crate's
/// modules; `None` for a path outside the crate (std, another crate).
fn resolve(
    at: &[String],
    path: &[String],
    modules: &BTreeSet<ModPath>,
) -> Option<(ModPath, String)> {
    let mut base: ModPath;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            base = at.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = at.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        // A child module of `at` (2018 relative paths); anything else is another crate's.
        Some(first) if modules.contains(&[at, &[first.to_string()]].concat()) => {
            base = at.to_vec();
        }
        _ => return None,
    }
    for seg in rest {
        let mut next = base.clone();
        next.push(seg.clone());
        if modules.contains(&next) {
            base = next;
        } else {
            break;
        }
    }
    Some((base, path.join("::")))
}

/// Line number (1-based) of char offset `i`.
fn line_of(c: &[char], i: usize) -> usize {
    c[..i.min(c.len())].iter().filter(|&&ch| ch == '\n').count() + 1
}

/// The modules of the crate rooted at `root`, each with its file.
fn modules_of(root: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut files = BTreeMap::new();
    let mut todo = vec![(Vec::new(), root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let text = std::fs::read_to_string(&file).expect("a module file reads");
        let code: Vec<char> = code_only(&text).chars().collect();
        let mut i = 0;
        while i < code.len() {
            let (w, j) = word_at(&code, i);
            if w == "mod" && !ident_before(&code, i) {
                let k = skip_space(&code, j);
                let (name, e) = word_at(&code, k);
                if !name.is_empty() && code.get(skip_space(&code, e)) == Some(&';') {
                    if let Some(child) = child_file(&file, &name) {
                        let mut p = path.clone();
                        p.push(name);
                        todo.push((p, child));
                    }
                }
            }
            i = j.max(i + 1);
        }
        files.insert(path, file);
    }
    files
}

/// The inline `mod name { … }` a char offset is in, as the path below the file's module.
fn inline_module_at(c: &[char], spans: &[(usize, usize, String)], i: usize) -> Vec<String> {
    let _ = c;
    spans
        .iter()
        .filter(|(s, e, _)| *s <= i && i < *e)
        .map(|(_, _, n)| n.clone())
        .collect()
}

/// The inline modules of a file: (start, end, name), outermost first.
fn inline_modules(c: &[char]) -> Vec<(usize, usize, String)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let (w, j) = word_at(c, i);
        if w == "mod" && !ident_before(c, i) {
            let k = skip_space(c, j);
            let (name, e) = word_at(c, k);
            let open = skip_space(c, e);
            if !name.is_empty() && c.get(open) == Some(&'{') {
                let mut depth = 0;
                let mut end = c.len();
                for (n, &ch) in c.iter().enumerate().skip(open) {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = n + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                spans.push((open, end, name));
            }
        }
        i = j.max(i + 1);
    }
    spans
}

/// The modules of the crate rooted at `root` and every reference between them.
fn read_crate(root: &Path) -> Crate {
    let files = modules_of(root);
    let mut modules: BTreeSet<ModPath> = files.keys().cloned().collect();
    let mut krate = Crate::default();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).expect("a module file reads");
        let c: Vec<char> = code_only(&text).chars().collect();
        let spans = inline_modules(&c);
        for (_, _, name) in &spans {
            modules.insert([module.clone(), vec![name.clone()]].concat());
        }
        let mut found = Vec::new();
        let mut in_use = vec![false; c.len()];
        let mut i = 0;
        while i < c.len() {
            let (w, j) = word_at(&c, i);
            if w == "use" && !ident_before(&c, i) && c.get(j).is_some_and(|ch| ch.is_whitespace()) {
                let end = c[j..]
                    .iter()
                    .position(|&ch| ch == ';')
                    .map_or(c.len(), |p| j + p);
                let tree: String = c[j..end].iter().collect();
                for p in use_paths(&tree) {
                    found.push((i, p));
                }
                in_use[i..end].iter_mut().for_each(|u| *u = true);
                i = end;
                continue;
            }
            i = j.max(i + 1);
        }
        found.extend(inline_paths(&c).into_iter().filter(|(at, _)| !in_use[*at]));
        for (at, path) in found {
            let scope = [module.clone(), inline_module_at(&c, &spans, at)].concat();
            if let Some((to, text)) = resolve(&scope, &path, &modules) {
                // References into the file's own inline modules belong to the file's module.
                let to = if to.starts_with(module) && !files.contains_key(&to) {
                    module.clone()
                } else {
                    to
                };
                krate.edges.push(Edge {
                    from: module.clone(),
                    to,
                    file: file.clone(),
                    line: line_of(&c, at),
                    path: text,
                });
            }
        }
    }
    krate.files = files;
    krate
}

/// The roots of the crate in directory `dir`.
fn roots(dir: &Path) -> Vec<PathBuf> {
    let src = dir.join("src");
    let mut out: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        let mut bins: Vec<PathBuf> = bins
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        bins.sort();
        out.extend(bins);
    }
    out
}

/// Strongly connected components of more than one node, of a graph on `nodes`.
fn cycles(
    nodes: &BTreeSet<String>,
    next: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<BTreeSet<String>> {
    // Two nodes are in one component when each reaches the other.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in next.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in nodes {
        if done.contains(n) || !reaches[n].contains(n) {
            continue;
        }
        let comp: BTreeSet<String> = reaches[n]
            .iter()
            .filter(|m| reaches[*m].contains(n))
            .cloned()
            .collect();
        done.extend(comp.iter().cloned());
        out.push(comp);
    }
    out
}

/// One cycle among sibling subtrees: its crate root, its modules, and one line per edge in it.
struct Cycle {
    root: String,
    modules: Vec<String>,
    edges: Vec<String>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: modules {} import each other:",
            self.root,
            self.modules.join(", ")
        )?;
        for e in &self.edges {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// Every cycle among sibling subtrees of the crate rooted at `root`.
fn crate_cycles(root: &Path, workspace: &Path) -> Vec<Cycle> {
    let krate = read_crate(root);
    // Per parent module: edges between its children, with where each is written.
    let mut groups: BTreeMap<ModPath, Vec<(String, String, &Edge)>> = BTreeMap::new();
    for e in &krate.edges {
        let common = e.from.iter().zip(&e.to).take_while(|(a, b)| a == b).count();
        if common == e.from.len() || common == e.to.len() {
            continue; // Within one subtree: an ancestor or a descendant.
        }
        groups.entry(e.from[..common].to_vec()).or_default().push((
            e.from[common].clone(),
            e.to[common].clone(),
            e,
        ));
    }
    let mut out = Vec::new();
    for (parent, edges) in groups {
        let nodes: BTreeSet<String> = edges
            .iter()
            .flat_map(|(a, b, _)| [a.clone(), b.clone()])
            .collect();
        let mut next: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b, _) in &edges {
            next.entry(a.clone()).or_default().insert(b.clone());
        }
        for comp in cycles(&nodes, &next) {
            let name = |m: &str| [parent.clone(), vec![m.to_string()]].concat().join("::");
            let lines = edges
                .iter()
                .filter(|(a, b, _)| comp.contains(a) && comp.contains(b))
                .map(|(a, b, e)| {
                    format!(
                        "{}:{}: `{}` ({} -> {})",
                        e.file.strip_prefix(workspace).unwrap_or(&e.file).display(),
                        e.line,
                        e.path,
                        name(a),
                        name(b)
                    )
                });
            out.push(Cycle {
                root: root
                    .strip_prefix(workspace)
                    .unwrap_or(root)
                    .display()
                    .to_string(),
                modules: comp.iter().map(|m| name(m)).collect(),
                edges: lines.collect(),
            });
        }
    }
    out
}

/// The workspace's member directories, from its `Cargo.toml`.
fn members(workspace: &Path) -> Vec<PathBuf> {
    let toml = std::fs::read_to_string(workspace.join("Cargo.toml"))
        .expect("the workspace Cargo.toml reads");
    let list = toml
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('['))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace lists its members");
    list.split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| workspace.join(m))
        .collect()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testsuite is in the workspace")
        .to_path_buf()
}

#[test]
fn no_crate_has_an_import_cycle() {
    let ws = workspace();
    let members = members(&ws);
    assert!(
        members.len() > 5,
        "the workspace's members are read: {members:?}"
    );
    let found: Vec<Cycle> = members
        .iter()
        .flat_map(|m| roots(m))
        .flat_map(|r| crate_cycles(&r, &ws))
        .collect();
    let cycles: Vec<String> = found.iter().map(Cycle::to_string).collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join(""));
}

/// The check itself finds what it must: a cycle through a subtree, `super::` and a `use`
/// group, and nothing in comments, strings or a child's use of its parent.
#[test]
fn the_check_finds_a_cycle_and_only_real_ones() {
    let dir = std::env::temp_dir().join(format!("tir-module-graph-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("ops")).expect("a temp dir");
    let write = |path: &str, text: &str| std::fs::write(src.join(path), text).expect("a temp file");
    write(
        "lib.rs",
        "mod import;\nmod ops;\nmod value;\npub use import::Thing;\n",
    );
    write(
        "import.rs",
        "use crate::ops;\n// use crate::value; in a comment\npub struct Thing;\n",
    );
    write(
        "ops/mod.rs",
        "mod conv;\nfn f() -> &'static str { \"crate::import::Thing\" }\n",
    );
    write(
        "ops/conv.rs",
        "use super::super::{value::V, import::{self, Thing}};\nuse super::f;\n",
    );
    write("value.rs", "pub struct V;\n");
    let cycles = crate_cycles(&src.join("lib.rs"), &dir);
    std::fs::remove_dir_all(&dir).expect("the temp dir is removed");
    assert_eq!(
        cycles.len(),
        1,
        "{}",
        cycles.iter().map(Cycle::to_string).collect::<String>()
    );
    assert_eq!(cycles[0].modules, ["import", "ops"]);
    let text = cycles[0].to_string();
    assert!(
        text.contains("src/import.rs:1: `crate::ops` (import -> ops)"),
        "{text}"
    );
    assert!(
        text.contains("src/ops/conv.rs:1: `super::super::import` (ops -> import)"),
        "{text}"
    );
    assert!(!text.contains("value"), "{text}");
}
