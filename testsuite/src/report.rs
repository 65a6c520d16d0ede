//! What `tir-conform` prints and writes: one line per failed or skipped case, the summary line,
//! and the JSON record of everything.

use crate::case::{Case, Feature};
use crate::runner::{CaseResult, Outcome, Summary};
use crate::tolerance::Tolerance;
use serde::{Serialize, Serializer};
use tir_graph::DType;

/// Serializes an `f64` as a JSON number, or as `"NaN"`, `"inf"`, `"-inf"` (JSON has none).
pub fn float<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else if v.is_nan() {
        s.serialize_str("NaN")
    } else if *v > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

/// Serializes a dtype by its name (`f16`, `i64`, ...).
pub fn dtype<S: Serializer>(d: &DType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

/// The line printed for a failed or skipped case, `None` for a passed one.
pub fn line(result: &CaseResult) -> Option<String> {
    match &result.outcome {
        Outcome::Passed => None,
        Outcome::Failed { stage, message } => Some(format!(
            "FAIL {} [{}]: {message}",
            result.name,
            stage.name()
        )),
        Outcome::Skipped { reason } => Some(format!("SKIP {}: {reason}", result.name)),
    }
}

/// One case in the JSON record: what it is and how it went.
#[derive(Serialize)]
struct CaseRecord<'a> {
    group: &'a str,
    tolerance: Tolerance,
    tolerance_text: String,
    needs: &'a [Feature],
    runs: usize,
    #[serde(flatten)]
    result: &'a CaseResult,
}

/// The whole JSON record of a conformance run.
#[derive(Serialize)]
struct Record<'a> {
    backend: &'a str,
    seed: u64,
    filter: Option<&'a str>,
    summary: Summary,
    seconds: f64,
    cases: Vec<CaseRecord<'a>>,
}

/// The JSON record: the backend, seed and filter, the summary, and for each case (in `cases`
/// order, paired with `results`) its group, tolerance, needs, outcome and every tensor check.
pub fn json(
    backend: &str,
    seed: u64,
    filter: Option<&str>,
    cases: &[&Case],
    results: &[CaseResult],
    seconds: f64,
) -> serde_json::Value {
    let record = Record {
        backend,
        seed,
        filter,
        summary: Summary::of(results),
        seconds,
        cases: cases
            .iter()
            .zip(results)
            .map(|(case, result)| CaseRecord {
                group: case.group(),
                tolerance: case.tolerance,
                tolerance_text: case.tolerance.to_string(),
                needs: &case.needs,
                runs: case.runs.len(),
                result,
            })
            .collect(),
    };
    serde_json::to_value(&record).unwrap_or_else(|e| {
        // Every field serializes; keep the message rather than panic if that ever changes.
        serde_json::json!({ "error": e.to_string() })
    })
}
