//! `tirc` as a user meets it: exit codes, one-line errors, no output file left by a refusal.

mod common;

use common::{assert_refused, example, stderr, stdout, tirc, tirc_os};
use std::path::Path;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn check_prints_the_interface_of_every_example() {
    for name in ["mlp", "ln_gelu", "softmax", "attention", "decoder_block"] {
        for ext in ["tir", "tirt"] {
            let out = tirc(&["check", &example(&format!("{name}.{ext}"))]);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            let text = stdout(&out);
            assert!(text.contains(": ok, "), "{text}");
            assert!(text.contains("outputs:\n  \"y\": f16["), "{text}");
            assert!(text.contains("\nops: "), "{text}");
        }
    }
    let out = stdout(&tirc(&["check", &example("decoder_block.tir")]));
    assert!(
        out.contains("states:\n  \"k_cache\": f16[1, 32, 2048, 128]"),
        "{out}"
    );
    assert!(out.contains("state_write_slice 2"), "{out}");
}

#[test]
fn dump_prints_the_committed_text_form() {
    for name in ["mlp", "decoder_block"] {
        let out = tirc(&["dump", &example(&format!("{name}.tir"))]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let committed = std::fs::read_to_string(example(&format!("{name}.tirt"))).unwrap();
        assert_eq!(stdout(&out), committed);
    }
}

#[test]
fn parse_then_dump_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("mlp.tir").display().to_string();
    let out = tirc(&["parse", &example("mlp.tirt"), "-o", &out_path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written = std::fs::read(&out_path).unwrap();
    assert_eq!(written, std::fs::read(example("mlp.tir")).unwrap());
}

#[test]
fn bad_files_are_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = std::fs::read(example("mlp.tir")).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (write(d, "empty.tir", b""), "the file is empty"),
        (write(d, "short.tir", &good[..20]), "truncated"),
        (write(d, "cut.tir", &good[..good.len() - 5]), "truncated"),
        (
            write(d, "junk.tir", b"hello world, not a graph"),
            "bad magic",
        ),
        (
            write(d, "binary.tirt", &[0xff, 0xfe, 0x00]),
            "not UTF-8 text",
        ),
        (
            write(d, "bad.tirt", b"%0 = frobnicate : f32[2]\n"),
            "line 1",
        ),
        (d.join("missing.tir").display().to_string(), "missing.tir"),
    ];
    let mut corrupt = good.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x40;
    let corrupt = write(d, "corrupt.tir", &corrupt);
    let mut future = good.clone();
    future[8] = 9;
    let future = write(d, "future.tir", &future);
    for (path, needle) in cases
        .iter()
        .map(|(p, n)| (p.as_str(), *n))
        .chain([(corrupt.as_str(), "checksum"), (future.as_str(), "newer")])
    {
        for cmd in ["check", "dump"] {
            let out = tirc(&[cmd, path]);
            assert_refused(&out, &[needle]);
            assert!(stdout(&out).is_empty());
        }
    }
}

#[test]
fn a_refused_parse_leaves_no_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bad = write(d, "bad.tirt", b"%0 = input \"x\" : f32[2]\n%1 = exp %9\n");
    let target = d.join("out.tir");
    let out = tirc(&["parse", &bad, "-o", &target.display().to_string()]);
    assert_refused(&out, &["line 2"]);
    assert!(!target.exists());
    // An existing output survives a refused parse untouched.
    std::fs::write(&target, b"keep me").unwrap();
    let out = tirc(&["parse", &bad, "-o", &target.display().to_string()]);
    assert_refused(&out, &["line 2"]);
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    let leftovers: Vec<_> = std::fs::read_dir(d).unwrap().collect();
    assert_eq!(leftovers.len(), 2, "only bad.tirt and out.tir remain");
}

#[test]
fn parse_into_a_missing_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("no/such/dir/out.tir").display().to_string();
    let out = tirc(&["parse", &example("mlp.tirt"), "-o", &target]);
    assert_refused(&out, &["out.tir"]);
}

#[test]
fn usage_errors_exit_1_with_one_line() {
    for args in [
        &[][..],
        &["frobnicate"][..],
        &["check"][..],
        &["parse", "x.tirt"][..],
        &["check", "a", "b"][..],
    ] {
        assert_refused(&tirc(args), &[]);
    }
    let help = tirc(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("check"));
}

#[test]
fn non_utf8_paths_do_not_panic() {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(b"/tmp/\xff\xfe-missing.tir");
    let out = tirc_os(&[std::ffi::OsStr::new("check"), name], &[]);
    assert_refused(&out, &["missing.tir"]);
}

/// `tirc explain --json` on an example: the parsed object.
fn explain_json(name: &str) -> serde_json::Value {
    let out = tirc(&["explain", "--json", &example(&format!("{name}.tir"))]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("explain --json prints one JSON object")
}

fn kernel_ops(kernel: &serde_json::Value) -> Vec<&str> {
    let ops = kernel["ops"].as_array().expect("ops is an array");
    ops.iter().map(|o| o.as_str().unwrap()).collect()
}

#[test]
fn explain_fuses_the_examples_as_documented() {
    for name in ["ln_gelu", "softmax"] {
        let json = explain_json(name);
        let kernels = json["kernels"].as_array().unwrap();
        assert_eq!(kernels.len(), 1, "{name}: {json}");
        assert_eq!(kernels[0]["kind"], "row_reduction", "{name}");
    }
    let json = explain_json("mlp");
    let kernels = json["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2, "{json}");
    assert_eq!(kernel_ops(&kernels[0]), ["matmul", "add", "gelu_erf"]);
    assert_eq!(kernel_ops(&kernels[1]), ["matmul", "add"]);
    for k in kernels {
        assert_eq!(k["kind"], "matmul");
        assert_eq!(k["outputs"].as_array().unwrap().len(), 1);
        assert!(k["bytes"].as_u64().unwrap() > 0);
        assert!(!k["inputs"].as_array().unwrap().is_empty());
    }
    assert!(json["rules"].is_object());
    assert_eq!(json["bounds_hit"], serde_json::json!([]));
}

#[test]
fn explain_prints_kernels_and_rules_as_text() {
    let out = tirc(&["explain", &example("ln_gelu.tirt")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("1 kernels, "), "{text}");
    assert!(text.contains("kernel 0: row_reduction (11 ops)"), "{text}");
    assert!(
        text.contains("  input:  %0 \"x\": f16[tokens, 4096]"),
        "{text}"
    );
    assert!(text.contains("rules fired: "), "{text}");
    assert!(text.contains("bounds hit: none"), "{text}");
    for name in ["attention", "decoder_block"] {
        let json = explain_json(name);
        assert!(json["kernels"].as_array().unwrap().len() > 1, "{name}");
    }
}

#[test]
fn explain_refuses_bad_input_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.tir", b"TIRGRAPH garbage");
    assert_refused(&tirc(&["explain", &bad]), &["bad.tir"]);
    assert_refused(
        &tirc(&["explain", "--json", "/no/such/file.tir"]),
        &["file.tir"],
    );
}
