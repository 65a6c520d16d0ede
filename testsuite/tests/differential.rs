//! The differential test's library half without a GPU: random graphs on the reference against
//! the reference in checking mode, a planted difference that must fail, and the kept graphs as
//! conformance cases.

use backend_ref::RefBackend;
use testsuite::differential::{self, Outcome, Summary};
use testsuite::{report, run_case, Io};
use tir_graph::{DType, HostTensor};

#[test]
fn random_graphs_agree_on_the_reference_and_its_checking_mode() {
    let (plain, checking) = (RefBackend::new(), RefBackend::checking());
    let results: Vec<_> = (0..24)
        .map(|i| differential::check(3, i, &plain, &checking))
        .collect();
    let failures: Vec<String> = results.iter().filter_map(|r| r.line()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let summary = Summary::of(&results);
    // Most random graphs run; a few are refused for a write position outside a state.
    assert!(summary.passed >= 12, "{summary}");
    assert_eq!(summary.graphs, 24);
    assert!(results.iter().any(|r| !r.tensors.is_empty()));
}

/// The index of a graph of seed 3 that passes with a float output of at least two elements.
fn a_graph_with_a_float_output() -> (differential::Drawn, differential::Ran, String) {
    for i in 0..200 {
        let drawn = differential::draw(3, i);
        let ran = differential::run_on(&RefBackend::new(), &drawn);
        if ran.stop.is_some() {
            continue;
        }
        let output = drawn.graph.outputs().iter().find_map(|(name, _)| {
            let t = &ran.runs[0].outputs[name];
            let finite = t.to_f64().data.iter().filter(|v| v.is_finite()).count();
            (t.dtype() == DType::F32 && finite >= 2).then(|| name.clone())
        });
        if let Some(name) = output {
            return (drawn, ran, name);
        }
    }
    panic!("no graph of seed 3 below 200 has an f32 output with two finite elements");
}

/// `t` with element `at` set to `value`.
fn planted(t: &HostTensor<'_>, at: usize, value: f32) -> HostTensor<'static> {
    let mut data = t.to_vec::<f32>().unwrap();
    data[at] = value;
    HostTensor::from_vec(data, t.dims()).unwrap()
}

#[test]
fn a_planted_difference_fails_the_comparison() {
    let (drawn, reference, name) = a_graph_with_a_float_output();
    let values = reference.runs[0].outputs[&name].to_f64().data;
    let at = values.iter().position(|v| v.is_finite()).unwrap();
    let again = || differential::run_on(&RefBackend::new(), &drawn);
    assert!(!differential::judge(&drawn, &reference, &again(), 0.0).failed());
    // Far outside any tolerance whatever the sign of the value.
    let bigger = (values[at] as f32).abs() * 4.0 + 16.0;
    for (value, why) in [
        // An element no kernel wrote reads as the poison NaN.
        (f32::NAN, "unexpected NaN"),
        (f32::INFINITY, "infinity differs"),
        (bigger, "outside tolerance"),
    ] {
        let mut subject = again();
        let t = &subject.runs[0].outputs[&name];
        let changed = planted(t, at, value);
        subject.runs[0].outputs.insert(name.clone(), changed);
        let result = differential::judge(&drawn, &reference, &subject, 0.0);
        let line = result.line().unwrap_or_default();
        assert!(result.failed(), "{value} passed: {result:?}");
        assert!(
            line.contains(why) && line.contains(&format!("output {}", name.escape_debug())),
            "{line}"
        );
        assert!(line.contains("tir-differential --seed 3 --index"), "{line}");
    }
    // A missing output fails too.
    let mut subject = again();
    subject.runs[0].outputs.remove(&name);
    let result = differential::judge(&drawn, &reference, &subject, 0.0);
    assert!(
        matches!(result.outcome, Outcome::Failed { .. }),
        "{result:?}"
    );
}

#[test]
fn a_refusal_must_be_shared() {
    let refused = (0..200)
        .map(|i| differential::draw(3, i))
        .find_map(|drawn| {
            let ran = differential::run_on(&RefBackend::new(), &drawn);
            let expected = ran.stop.as_ref().and_then(|s| s.expected_refusal());
            expected.map(|_| (drawn, ran))
        });
    let (drawn, reference) = refused.expect("seed 3 has a refused graph below index 200");
    let both = differential::run_on(&RefBackend::checking(), &drawn);
    let result = differential::judge(&drawn, &reference, &both, 0.0);
    assert!(
        matches!(result.outcome, Outcome::Refused { .. }),
        "{result:?}"
    );
    // A subject that ran what the reference refused fails.
    let mut ran_it = differential::run_on(&RefBackend::new(), &drawn);
    ran_it.stop = None;
    let result = differential::judge(&drawn, &reference, &ran_it, 0.0);
    assert!(result.failed(), "{result:?}");
}

#[test]
fn kept_graphs_pass_as_conformance_cases_on_the_reference() {
    let backend = RefBackend::checking();
    for &(seed, index) in differential::KEPT {
        let case = differential::conformance_case(seed, index);
        let result = run_case(&backend, &case, Io::Host);
        assert!(result.passed(), "{:?}", report::line(&result));
    }
}

/// The kept graphs the oracle cannot judge agree with the reference's checking mode, and still
/// hold `i64` results past 2^53 (what they were kept for).
#[test]
fn kept_graphs_past_the_oracle_hold_i64_past_2_pow_53() {
    let (plain, checking) = (RefBackend::new(), RefBackend::checking());
    for &(seed, index) in differential::KEPT_PAST_THE_ORACLE {
        let result = differential::check(seed, index, &plain, &checking);
        assert!(result.line().is_none(), "{:?}", result.line());
        let ran = differential::run_on(&plain, &differential::draw(seed, index));
        let past = ran.runs.iter().any(|run| {
            run.outputs.values().chain(run.states.values()).any(|t| {
                t.dtype() == DType::I64
                    && t.to_vec::<i64>()
                        .unwrap()
                        .iter()
                        .any(|v| v.unsigned_abs() > 1 << 53)
            })
        });
        assert!(past, "graph ({seed}, {index}) has no i64 result past 2^53");
    }
}

#[test]
fn the_command_prints_the_summary_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("diff.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tir-differential"))
        .args(["--subject", "ref-checking", "--seed", "3", "--count", "12"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("12 graphs: ") && last.ends_with(" 0 failed"),
        "{last}"
    );
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(value["summary"]["graphs"], 12);
    assert_eq!(value["results"].as_array().map(Vec::len), Some(12));
}
