//! `tirc explain --dot` as a user meets it: Graphviz text that parses, names every kernel of
//! the program and every buffer it touches, ranks each kernel in one wave, and renders with
//! `dot` where Graphviz is installed.

mod common;

use common::{assert_quiet_ok, assert_refused, example, stderr, tirc};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Id(String),
    /// A quoted string, unescaped as Graphviz reads it (`\"` a quote, `\\` a backslash, `\n`
    /// a line break).
    Quoted(String),
    Punct(&'static str),
}

/// The tokens of a DOT text; `Err` on an unterminated string or a character DOT does not have.
fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated string".into()),
                        Some('"') => break,
                        Some('\\') => {
                            match chars.get(i + 1) {
                                Some('n') => s.push('\n'),
                                Some(&c) => s.push(c),
                                None => return Err("a backslash ends the text".into()),
                            }
                            i += 2;
                        }
                        Some(&c) => {
                            s.push(c);
                            i += 1;
                        }
                    }
                }
                i += 1;
                out.push(Token::Quoted(s));
            }
            '-' if chars.get(i + 1) == Some(&'>') => {
                out.push(Token::Punct("->"));
                i += 2;
            }
            '{' | '}' | '[' | ']' | ';' | ',' | '=' => {
                let p = ["{", "}", "[", "]", ";", ",", "="]
                    .into_iter()
                    .find(|p| p.starts_with(c))
                    .unwrap_or("?");
                out.push(Token::Punct(p));
                i += 1;
            }
            c if c.is_alphanumeric() || c == '_' || c == '.' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || "_.".contains(chars[i])) {
                    i += 1;
                }
                out.push(Token::Id(chars[start..i].iter().collect()));
            }
            c => return Err(format!("unexpected character {c:?}")),
        }
    }
    Ok(out)
}

/// What the structural parse finds.
#[derive(Debug, Default)]
struct Dot {
    /// Declared nodes with their labels.
    nodes: BTreeMap<String, String>,
    edges: Vec<(String, String)>,
    /// The node ids of each `{ rank=same; ... }` group.
    ranks: Vec<Vec<String>>,
    /// Each `subgraph NAME { ... }`: its name and the nodes declared in it.
    clusters: Vec<(String, Vec<String>)>,
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// The cluster whose statements are being read, if any.
    cluster: Option<usize>,
}

impl Parser {
    fn next(&mut self) -> Result<Token, String> {
        let t = self.tokens.get(self.at).cloned().ok_or("unexpected end")?;
        self.at += 1;
        Ok(t)
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        match self.next()? {
            Token::Punct(q) if q == p => Ok(()),
            t => Err(format!("expected `{p}`, found {t:?}")),
        }
    }

    fn id(&mut self) -> Result<String, String> {
        match self.next()? {
            Token::Id(s) => Ok(s),
            t => Err(format!("expected an id, found {t:?}")),
        }
    }

    /// `[k=v, ...]`: the attributes.
    fn attrs(&mut self) -> Result<BTreeMap<String, String>, String> {
        self.expect("[")?;
        let mut attrs = BTreeMap::new();
        loop {
            match self.next()? {
                Token::Punct("]") => return Ok(attrs),
                Token::Punct(",") => {}
                Token::Id(key) => {
                    self.expect("=")?;
                    let value = match self.next()? {
                        Token::Id(v) | Token::Quoted(v) => v,
                        t => return Err(format!("attribute {key}: bad value {t:?}")),
                    };
                    attrs.insert(key, value);
                }
                t => return Err(format!("unexpected {t:?} in attributes")),
            }
        }
    }

    /// Statements up to the closing `}` (consumed).
    fn statements(&mut self, dot: &mut Dot, in_rank: Option<usize>) -> Result<(), String> {
        loop {
            match self.next()? {
                Token::Punct("}") => return Ok(()),
                Token::Punct(";") => {}
                Token::Punct("{") => {
                    dot.ranks.push(Vec::new());
                    let group = dot.ranks.len() - 1;
                    self.statements(dot, Some(group))?;
                }
                Token::Id(id) if ["graph", "node", "edge"].contains(&id.as_str()) => {
                    self.attrs()?;
                }
                Token::Id(id) if id == "subgraph" => {
                    let name = self.id()?;
                    self.expect("{")?;
                    dot.clusters.push((name, Vec::new()));
                    let outer = self.cluster.replace(dot.clusters.len() - 1);
                    self.statements(dot, in_rank)?;
                    self.cluster = outer;
                }
                Token::Id(id) => match self.peek() {
                    Some(Token::Punct("=")) => {
                        self.at += 1;
                        let value = self.id()?;
                        if id != "rank" || value != "same" {
                            return Err(format!("unexpected {id}={value}"));
                        }
                    }
                    Some(Token::Punct("->")) => {
                        self.at += 1;
                        let to = self.id()?;
                        if let Some(Token::Punct("[")) = self.peek() {
                            self.attrs()?;
                        }
                        dot.edges.push((id, to));
                    }
                    Some(Token::Punct("[")) => {
                        let attrs = self.attrs()?;
                        let label = attrs.get("label").cloned().ok_or("a node without label")?;
                        if dot.nodes.insert(id.clone(), label).is_some() {
                            return Err(format!("{id} declared twice"));
                        }
                        if let Some(c) = self.cluster {
                            dot.clusters[c].1.push(id);
                        }
                    }
                    _ => match in_rank {
                        Some(group) => dot.ranks[group].push(id),
                        None => return Err(format!("{id} without attributes outside a rank")),
                    },
                },
                t => return Err(format!("unexpected {t:?}")),
            }
        }
    }
}

/// `text` parsed as `digraph NAME { ... }` with nothing after it.
fn parse(text: &str) -> Result<Dot, String> {
    let mut p = Parser {
        tokens: tokens(text)?,
        at: 0,
        cluster: None,
    };
    if p.id()? != "digraph" {
        return Err("not a digraph".into());
    }
    p.id()?;
    p.expect("{")?;
    let mut dot = Dot::default();
    p.statements(&mut dot, None)?;
    if p.at != p.tokens.len() {
        return Err("text after the graph".into());
    }
    Ok(dot)
}

/// Braces and brackets balance outside quoted strings.
fn balanced(text: &str) -> bool {
    let (mut depth, mut quoted, mut escaped) = (0i64, false, false);
    for c in text.chars() {
        match (quoted, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => quoted = !quoted,
            (false, _, '{' | '[') => depth += 1,
            (false, _, '}' | ']') => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0 && !quoted
}

/// The kernel names `tirc explain --tile` certifies, in program order.
fn kernel_names(file: &str) -> Vec<String> {
    let text = assert_quiet_ok(&tirc(&["explain", "--tile", file]));
    let certificates = text
        .split("\ncertificates:\n")
        .nth(1)
        .expect("certificates");
    certificates
        .lines()
        .filter_map(|l| l.strip_prefix("kernel ")?.strip_suffix(':'))
        .map(str::to_string)
        .collect()
}

/// `tirc explain --dot FILE`, checked: it parses, every edge joins declared nodes, every
/// kernel of the program is a node labelled with its name and in exactly one rank, every buffer
/// drawn is used, and edges join kernels to buffers only. Returns the text and the parse.
fn explain_dot(file: &str) -> (String, Dot) {
    let text = assert_quiet_ok(&tirc(&["explain", "--dot", file]));
    assert!(balanced(&text), "{text}");
    let dot = parse(&text).unwrap_or_else(|e| panic!("{file}: {e}\n{text}"));
    for (from, to) in &dot.edges {
        assert!(dot.nodes.contains_key(from), "{from} undeclared in {file}");
        assert!(dot.nodes.contains_key(to), "{to} undeclared in {file}");
        let kinds = (&from[..1], &to[..1]);
        assert!(kinds == ("b", "k") || kinds == ("k", "b"), "{from} -> {to}");
    }
    let names = kernel_names(file);
    assert!(!names.is_empty());
    let ranked: Vec<&String> = dot.ranks.iter().flatten().collect();
    for (i, name) in names.iter().enumerate() {
        let id = format!("k{i}");
        let label = &dot.nodes[&id];
        assert_eq!(label.lines().next(), Some(name.as_str()), "{label}");
        assert_eq!(ranked.iter().filter(|r| ***r == id).count(), 1, "{id}");
        assert!(
            dot.edges.iter().any(|(f, _)| *f == id),
            "{id} writes nothing"
        );
    }
    for buffer in dot.nodes.keys().filter(|n| n.starts_with('b')) {
        let touched = dot.edges.iter().any(|(f, t)| f == buffer || t == buffer);
        assert!(touched, "{buffer} is drawn but no kernel uses it");
    }
    let kernels = dot.nodes.keys().filter(|n| n.starts_with('k')).count();
    assert_eq!(kernels, names.len(), "one node per kernel");
    assert_eq!(ranked.len(), names.len());
    (text, dot)
}

#[test]
fn explain_dot_draws_every_kernel_buffer_and_wave() {
    for name in ["mlp", "ln_gelu", "softmax", "attention", "decoder_block"] {
        explain_dot(&example(&format!("{name}.tir")));
    }
    // The decoder block: parameters, states written in place, an output, several waves.
    let (text, dot) = explain_dot(&example("decoder_block.tir"));
    let label_of = |needle: &str| {
        dot.nodes
            .iter()
            .find(|(id, l)| id.starts_with('b') && l.lines().next() == Some(needle))
            .map(|(id, l)| (id.clone(), l.clone()))
            .unwrap_or_else(|| panic!("no buffer {needle} in\n{text}"))
    };
    let (x, x_label) = label_of("x");
    assert_eq!(x_label, "x\ninput f16[1, 1, 4096]\n8.2 KB");
    assert!(dot.edges.iter().any(|(f, _)| *f == x), "x is read");
    let (cache, cache_label) = label_of("k_cache");
    assert!(cache_label.starts_with("k_cache\nstate f16[1, 32, 2048, 128]\n16.8 MB"));
    assert!(
        dot.edges.iter().any(|(_, t)| *t == cache),
        "the cache is written"
    );
    let (_, wq) = label_of("wq");
    assert!(
        wq.starts_with("wq\nparameter f16[4096, 4096]\n33.6 MB"),
        "{wq}"
    );
    let (_, y) = label_of("output \"y\"");
    assert!(y.starts_with("output \"y\"\noutput f16[1, 1, 4096]"), "{y}");
    assert!(dot.ranks.len() > 1, "several waves");
    // Symbolic sizes, intermediates with the waves they live in.
    let (_, dot) = explain_dot(&example("mlp.tir"));
    let labels: Vec<&String> = dot.nodes.values().collect();
    assert!(labels
        .iter()
        .any(|l| l.starts_with("x\ninput f16[batch, 1024]\n2.0 KB × batch")));
    assert!(
        labels
            .iter()
            .any(|l| l.contains("intermediate f16[batch, 4096]") && l.contains("\nlive in wave")),
        "{labels:?}"
    );
    assert!(
        labels.iter().any(|l| l.contains("\nmatmul · wave 0\n")),
        "{labels:?}"
    );
}

/// Names with quotes, backslashes and braces survive as written.
#[test]
fn explain_dot_escapes_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.tirt");
    let graph = "# tir graph, text form v1\n\
        %0 = input \"a \\\"q\\\" \\\\n {b}\" : f32[4]\n\
        %1 = parameter \"w;x->y\" : f32[4]\n\
        %2 = add %0, %1 : f32[4]\n\
        output \"out \\\"1\\\"\" = %2\n";
    std::fs::write(&path, graph).unwrap();
    let file = path.display().to_string();
    assert_quiet_ok(&tirc(&["check", &file]));
    let (text, dot) = explain_dot(&file);
    let firsts: BTreeSet<&str> = dot
        .nodes
        .values()
        .filter_map(|l| l.lines().next())
        .collect();
    for name in ["a \"q\" \\n {b}", "w;x->y", "output \"out \"1\"\""] {
        assert!(firsts.contains(name), "{name} in {firsts:?}\n{text}");
    }
    render(&text, dir.path());
}

/// `dot -Tsvg` accepts the text, where Graphviz is installed (scripts/test.sh installs it).
fn render(text: &str, dir: &Path) {
    let Ok(version) = std::process::Command::new("dot").arg("-V").output() else {
        eprintln!("dot is not installed; rendering not checked");
        return;
    };
    assert!(version.status.success());
    let input = dir.join("program.dot");
    std::fs::write(&input, text).unwrap();
    let out = std::process::Command::new("dot")
        .arg("-Tsvg")
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("<svg"));
}

#[test]
fn explain_dot_renders_with_graphviz() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["mlp", "decoder_block"] {
        let (text, _) = explain_dot(&example(&format!("{name}.tir")));
        render(&text, dir.path());
    }
}

#[test]
fn explain_dot_refuses_bad_input_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.tir");
    std::fs::write(&bad, b"not a graph").unwrap();
    let bad = bad.display().to_string();
    assert_refused(&tirc(&["explain", "--dot", &bad]), &["bad.tir"]);
    for other in ["--json", "--tile"] {
        let out = tirc(&["explain", "--dot", other, &example("mlp.tir")]);
        assert_refused(&out, &["cannot be used with"]);
        assert!(stderr(&out).contains("--dot"), "{}", stderr(&out));
    }
}

/// On a mesh: one lane per device, each with every kernel of the program each device runs, the
/// waves side by side across lanes, and each collective joined to its twin on the next device.
#[test]
fn explain_dot_on_a_mesh_draws_a_lane_per_device() {
    let args = [
        "explain",
        "--dot",
        "--tensor-parallel",
        "2",
        "--dim",
        "batch=4",
    ];
    let file = example("mlp.tir");
    let text = assert_quiet_ok(&tirc(&[&args[..], &[file.as_str()]].concat()));
    assert!(balanced(&text), "{text}");
    let dot = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let names: Vec<&str> = dot.clusters.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(names, ["cluster_d0", "cluster_d1"]);
    let kernels = |lane: &[String]| lane.iter().filter(|n| n.contains('k')).count();
    let (lane0, lane1) = (&dot.clusters[0].1, &dot.clusters[1].1);
    assert!(kernels(lane0) >= 3, "{lane0:?}");
    assert_eq!(kernels(lane0), kernels(lane1));
    assert!(lane0.iter().all(|n| n.starts_with("d0")));
    for (from, to) in &dot.edges {
        assert!(
            dot.nodes.contains_key(from) && dot.nodes.contains_key(to),
            "{from} -> {to}"
        );
    }
    let collectives: Vec<&(String, String)> = dot
        .edges
        .iter()
        .filter(|(f, t)| f.starts_with("d0k") && t.starts_with("d1k"))
        .collect();
    assert_eq!(
        collectives.len(),
        1,
        "the MLP's one all-reduce: {collectives:?}"
    );
    let all_reduce = &dot.nodes[&collectives[0].0];
    assert!(all_reduce.contains("all_reduce_sum"), "{all_reduce}");
    // Every kernel of each lane is ranked once, beside its twin.
    for rank in &dot.ranks {
        let d0 = rank.iter().filter(|n| n.starts_with("d0")).count();
        assert_eq!(d0 * 2, rank.len(), "{rank:?}");
    }
    assert!(text.contains("on each of 2 devices"), "{text}");
}
