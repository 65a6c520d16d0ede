//! Runs the guide's shell blocks: every ```sh block of README.md and docs/*.md that a
//! `<!-- run -->` line comes right before is run with bash from the repository root and must exit
//! 0. A ```text block right after it that an `<!-- output -->` line comes before is its output:
//! each of its lines must be a line of what the block printed (stdout and stderr), with times
//! (`795.115 ms`, `0.14 s`) compared as `<time>`; a line `...` stands for lines left out. `<!-- run, then remove: FILE... -->` also
//! removes the files the block wrote (paths from the repository root) afterwards. Each block
//! gets an empty kernel cache (`TIR_CACHE_DIR`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The blocks share the repository root and `tir-out/`: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Block {
    line: usize,
    script: String,
    remove: Vec<String>,
    expected: Vec<String>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The marked blocks of `page` (a path from the repository root).
fn blocks(page: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(page)).expect("the page exists");
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let fenced = |from: usize, lang: &str| -> Option<(Vec<String>, usize)> {
        if lines.get(from).map(|l| l.trim_end()) != Some(&*format!("```{lang}")) {
            return None;
        }
        let end = (from + 1..lines.len()).find(|&i| lines[i].trim_end() == "```")?;
        Some((
            lines[from + 1..end].iter().map(|l| l.to_string()).collect(),
            end,
        ))
    };
    for (i, line) in lines.iter().enumerate() {
        let Some(marker) = line
            .trim()
            .strip_prefix("<!-- run")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            continue;
        };
        let remove = match marker.trim().strip_prefix(", then remove:") {
            Some(files) => files.split_whitespace().map(String::from).collect(),
            None if marker.trim().is_empty() => Vec::new(),
            None => panic!("{page}:{}: unknown marker `{line}`", i + 1),
        };
        let (script, end) = fenced(i + 1, "sh")
            .unwrap_or_else(|| panic!("{page}:{}: `<!-- run -->` not before a ```sh block", i + 1));
        // An output block: after the script's closing fence, perhaps past blank lines and one
        // paragraph, a `<!-- output -->` line and a ```text block.
        let mut expected = Vec::new();
        let mut j = end + 1;
        while j < lines.len() && !lines[j].starts_with("```") && !lines[j].starts_with("<!-- run") {
            if lines[j].trim() == "<!-- output -->" {
                let (out, _) = fenced(j + 1, "text").unwrap_or_else(|| {
                    panic!(
                        "{page}:{}: `<!-- output -->` not before a ```text block",
                        j + 1
                    )
                });
                expected = out;
                break;
            }
            j += 1;
        }
        found.push(Block {
            line: i + 2,
            script: script.join("\n"),
            remove,
            expected,
        });
    }
    found
}

/// `s` with each time (a number followed by ` ms`, `ms`, ` s` or ` µs`) replaced by `<time>`.
fn mask_times(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_number =
            chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_alphanumeric());
        if starts_number {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.') {
                j += 1;
            }
            let rest: String = chars[j..].iter().collect();
            let unit = [" ms", "ms", " µs", " s"].into_iter().find(|u| {
                rest.starts_with(u) && !rest[u.len()..].starts_with(char::is_alphanumeric)
            });
            if let Some(unit) = unit {
                out.push_str("<time>");
                i = j + unit.chars().count();
                continue;
            }
            out.extend(&chars[i..j]);
            i = j;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

fn run_page(page: &str) {
    let blocks = blocks(page);
    assert!(!blocks.is_empty(), "{page}: no `<!-- run -->` blocks");
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for b in blocks {
        // A kernel cache of the block's own, so that `tirc compile` prints the same cache
        // misses wherever it runs.
        let cache = tempfile::tempdir().expect("a temporary directory");
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &b.script])
            .current_dir(root())
            .env("TIR_CACHE_DIR", cache.path())
            .output()
            .expect("bash runs");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for file in &b.remove {
            let path = root().join(file);
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(path);
            } else {
                let _ = std::fs::remove_file(path);
            }
        }
        assert!(
            out.status.success(),
            "{page}:{}: exit {:?}\n{}\n--- printed:\n{printed}",
            b.line,
            out.status.code(),
            b.script
        );
        let got: Vec<String> = printed.lines().map(|l| mask_times(l.trim_end())).collect();
        for want in b.expected.iter().filter(|l| l.trim() != "...") {
            let want = mask_times(want.trim_end());
            assert!(
                got.contains(&want),
                "{page}:{}: the output has no line\n  {want}\n--- printed:\n{printed}",
                b.line
            );
        }
    }
}

#[test]
fn masks_times() {
    assert_eq!(
        mask_times("run 795.115 ms (lowering 3.164 ms), 0.14 s, 12 kernels, sm_90"),
        "run <time> (lowering <time>), <time>, 12 kernels, sm_90"
    );
}

#[test]
fn readme() {
    run_page("README.md");
}

/// The main job of README.md's "The two commands", a section kept word for word (so it has no
/// marker): its first ```sh block.
#[test]
fn readme_main_job() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md exists");
    let section = &text[text.find("## The two commands").expect("the section")..];
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let script = &section[start..start + section[start..].find("```").expect("its end")];
    assert!(
        script.starts_with("cargo run -q -p tirc -- run examples/mlp.tir"),
        "{script}"
    );
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(root())
        .output()
        .expect("bash runs");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script}{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "print each output's shape and checksum"; the outputs and inputs are in tir-out/.
    assert!(
        printed.contains("output \"y\": f16[4, 1024] sum="),
        "{printed}"
    );
    for file in ["y", "x", "w1", "b1", "w2", "b2"] {
        assert!(
            root().join(format!("tir-out/{file}.npy")).is_file(),
            "tir-out/{file}.npy"
        );
    }
}

#[test]
fn files() {
    run_page("docs/files.md");
}

#[test]
fn tirc() {
    run_page("docs/tirc.md");
}

#[test]
fn onnx() {
    run_page("docs/onnx.md");
}

#[test]
fn run_api() {
    run_page("docs/run-api.md");
}

#[test]
fn cuda() {
    run_page("docs/cuda.md");
}

#[test]
fn optimizer() {
    run_page("docs/optimizer.md");
}

#[test]
fn backends() {
    run_page("docs/backends.md");
}

#[test]
fn mesh() {
    run_page("docs/mesh.md");
}

/// Every page with a runnable shell block has a test above; a page without one has none to run.
#[test]
fn every_marked_page_is_run() {
    let tested = [
        "README.md",
        "docs/files.md",
        "docs/tirc.md",
        "docs/onnx.md",
        "docs/run-api.md",
        "docs/cuda.md",
        "docs/optimizer.md",
        "docs/backends.md",
        "docs/mesh.md",
    ];
    let mut pages = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/ exists") {
        let name = entry
            .expect("a docs/ entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        if name.ends_with(".md") {
            pages.push(format!("docs/{name}"));
        }
    }
    for page in pages {
        if !blocks(&page).is_empty() {
            assert!(
                tested.contains(&page.as_str()),
                "{page} has `<!-- run -->` blocks but no test runs them"
            );
        }
    }
}
