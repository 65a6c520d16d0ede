//! `tir-conform` as a user runs it: listing, filtering, JSON, the summary line, exit codes, and
//! one-line errors.

use std::process::{Command, Output};

fn conform(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tir-conform"))
        .args(args)
        .output()
        .expect("tir-conform runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_filtered_run_prints_the_summary_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let o = conform(&[
        "--backend",
        "ref",
        "--filter",
        "op/exp/f32/*",
        "--json",
        json.to_str().unwrap(),
        "--seed",
        "5",
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        stdout(&o).lines().last(),
        Some("6 passed, 0 failed, 0 skipped")
    );
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(value["seed"], 5);
    assert_eq!(value["filter"], "op/exp/f32/*");
    assert_eq!(value["cases"].as_array().map(Vec::len), Some(6));
    assert!(value["cases"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["outcome"] == "passed" && !c["checks"].as_array().unwrap().is_empty()));
}

#[test]
fn list_names_the_cases_with_their_tolerance() {
    let o = conform(&["--list", "--filter", "numerics/special/exp/"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("numerics/special/exp/f16  [transcendental, 1 run]"),
        "{out}"
    );
    assert_eq!(out.lines().last(), Some("4 cases"));
    let all = conform(&["--list"]);
    let count: usize = stdout(&all)
        .lines()
        .last()
        .and_then(|l| l.strip_suffix(" cases"))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(count >= 500);
}

#[test]
fn devices_caps_the_meshes_cases_run_on() {
    let o = conform(&[
        "--backend",
        "ref",
        "--filter",
        "pattern/sharded/gathered/f32/",
        "--devices",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("lack a mesh of 3 devices"), "{out}");
    assert_eq!(
        out.lines().last(),
        Some("0 passed, 0 failed, 1 skipped"),
        "{out}"
    );
    let o = conform(&[
        "--backend",
        "ref",
        "--filter",
        "pattern/sharded/gathered/f32/",
        "--devices",
        "3",
    ]);
    assert_eq!(
        stdout(&o).lines().last(),
        Some("1 passed, 0 failed, 0 skipped")
    );
    let o = conform(&["--backend", "ref", "--devices", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn errors_are_one_line_with_exit_code_1() {
    let o = conform(&["--backend", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: unknown backend `nope` (known: ref, cuda)\n"
    );
    let o = conform(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: --backend NAME is required"));
    let o = conform(&["--backend", "ref", "--filter", "no/such/case"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("error: no case matches the filter `no/such/case`"));
    let o = conform(&["--backend", "ref", "--seed", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: "));
}

/// `--arch` is checked as `tirc compile` checks it, before anything is compiled.
#[test]
fn a_bad_architecture_list_is_one_line_naming_the_architecture() {
    for (archs, why) in [
        ("sm90", "`sm90` is not a GPU architecture"),
        ("sm_90,sm_90", "`sm_90` is given twice"),
        ("sm_90,", "has an empty architecture"),
    ] {
        let o = conform(&["--backend", "cuda", "--compile-only", "--arch", archs]);
        assert_eq!(o.status.code(), Some(1), "{archs}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{archs}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(why),
            "{archs}: {err}"
        );
    }
}
