//! What the `tirc` command tests share: running the binary, the example graphs, and the checks
//! on how a command ends (each test file uses some of these).
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `tirc ARGS` with `env` set.
pub fn tirc_os(args: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tirc"));
    cmd.args(args);
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.output().expect("tirc runs")
}

/// `tirc ARGS`.
pub fn tirc(args: &[&str]) -> Output {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    tirc_os(&args, &[])
}

/// The path of `examples/NAME`.
pub fn example(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    root.join(name).display().to_string()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Exit 0; returns stdout.
pub fn assert_ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(out));
    stdout(out)
}

/// Exit 0 and nothing on stderr; returns stdout.
pub fn assert_quiet_ok(out: &Output) -> String {
    let text = assert_ok(out);
    assert!(stderr(out).is_empty(), "{}", stderr(out));
    text
}

/// A refusal: exit 1, nothing on stdout, one `error: ` line on stderr containing each needle.
pub fn assert_refused(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line expected, got: {err}");
    assert!(err.starts_with("error: "), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
    assert!(stdout(out).is_empty(), "{}", stdout(out));
}

/// `run(ARGS --output-dir DIR/out)` is refused with `needles` and creates no output directory.
pub fn assert_refused_without_output(
    dir: &Path,
    args: &[&str],
    needles: &[&str],
    run: impl FnOnce(&[&str]) -> Output,
) {
    let out_dir = dir.join("out");
    let out_dir_s = out_dir.display().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--output-dir", &out_dir_s]);
    assert_refused(&run(&all), needles);
    assert!(!out_dir.exists(), "a refused run created {out_dir_s}");
}
