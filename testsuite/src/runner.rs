//! Running one case on a backend and judging it against the oracle.
//!
//! A case is compiled once (`tir_lower::compile_graph` for the backend's target, then
//! `Backend::compile`) and run once per entry of [`Case::runs`] on the same executable: each
//! run sets the parameters it has and passes its inputs, from the host or, with [`Io::Device`],
//! as device tensors with the outputs left on the device and copied back after. Before each
//! run the oracle is given that run's sources plus the states the backend holds
//! (`Executable::states`), so a state update is judged on the state the backend actually carried
//! over; after the run every output and every state is compared ([`crate::compare`]). A case the
//! backend's capabilities cannot run is skipped; anything else that goes wrong (lowering,
//! compiling, running, a panic) fails it.

use crate::case::Case;
use crate::compare::{compare, TensorCheck};
use crate::tolerance::coarsest_float;
use serde::Serialize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_lower::mesh::{compile_sharded, ShardedExecutable};
use tir_lower::testing::RunF64;
use tir_lower::{compile_graph, Backend, Executable, Target};
use tir_opt::Limits;

/// Where a case's tensors are when a run takes and returns them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Io {
    /// Host tensors in, host tensors out (`Executable::run`).
    #[default]
    Host,
    /// Parameters and inputs copied to the device first, outputs left there and copied back
    /// after (`Executable::run_on_device`).
    Device,
}

/// Where a failed case went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Importing a model (ONNX tests): a model or data file that cannot be read.
    Import,
    /// Optimizing and lowering the graph for the backend's target.
    Lower,
    /// The backend compiling the program.
    Compile,
    /// The oracle refused a run's sources (a bug in the corpus, reported as a failure).
    Oracle,
    /// The backend's run returned an error.
    Run,
    /// An output or state differs from the oracle's.
    Compare,
    /// Something panicked.
    Panic,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Import => "import",
            Stage::Lower => "lower",
            Stage::Compile => "compile",
            Stage::Oracle => "oracle",
            Stage::Run => "run",
            Stage::Compare => "compare",
            Stage::Panic => "panic",
        }
    }
}

/// How a case ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Failed { stage: Stage, message: String },
    Skipped { reason: String },
}

/// The result of one case: its outcome and every tensor comparison made.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaseResult {
    pub name: String,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// One per output and state per run, in run order (up to the run that failed).
    pub checks: Vec<TensorCheck>,
    /// Wall time, compile included.
    pub seconds: f64,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Passed
    }

    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }

    pub fn skipped(&self) -> bool {
        matches!(self.outcome, Outcome::Skipped { .. })
    }
}

/// Runs `case` on `backend` with its tensors as `io` says (see the module doc). Never panics:
/// a panic in the backend or the pipeline fails the case.
pub fn run_case(backend: &dyn Backend, case: &Case, io: Io) -> CaseResult {
    let start = Instant::now();
    let mut checks = Vec::new();
    let outcome = match case.skip_reason(&backend.capabilities()) {
        Some(reason) => Outcome::Skipped { reason },
        None => catch_unwind(AssertUnwindSafe(|| execute(backend, case, io, &mut checks)))
            .unwrap_or_else(|payload| Outcome::Failed {
                stage: Stage::Panic,
                message: panic_message(payload.as_ref()),
            }),
    };
    CaseResult {
        name: case.name.clone(),
        outcome,
        checks,
        seconds: start.elapsed().as_secs_f64(),
    }
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

fn fail(stage: Stage, message: impl Into<String>) -> Outcome {
    Outcome::Failed {
        stage,
        message: message.into(),
    }
}

/// The case's executable: its graph compiled for one device, or cut for its mesh and compiled
/// for the backend's devices (then run with whole tensors).
fn executable(backend: &dyn Backend, case: &Case) -> Result<Box<dyn Executable>, Outcome> {
    let target = backend.target();
    let limits = Limits::default();
    let Some(mesh) = &case.mesh else {
        let compiled = compile_graph(&case.graph, &target, &limits)
            .map_err(|e| fail(Stage::Lower, e.to_string()))?;
        return backend
            .compile(&compiled.program)
            .map_err(|e| fail(Stage::Compile, e.to_string()));
    };
    let sharded = compile_sharded(&case.graph, mesh, &target, &limits)
        .map_err(|e| fail(Stage::Lower, e.to_string()))?;
    let devices = backend
        .compile_mesh(&sharded.compiled.program, mesh.world)
        .map_err(|e| fail(Stage::Compile, e.to_string()))?;
    Ok(Box::new(ShardedExecutable::new(devices, &sharded)))
}

fn execute(backend: &dyn Backend, case: &Case, io: Io, checks: &mut Vec<TensorCheck>) -> Outcome {
    let mut exe = match executable(backend, case) {
        Ok(exe) => exe,
        Err(outcome) => return outcome,
    };
    let runs = case.runs.len();
    // What the graph computes in: its ops' result types, not its sources' (an f8 weight that is
    // only cast up rounds nothing at run time, and its dtype would loosen every bound).
    let computed_in = coarsest_float(
        (case.graph.node_ids())
            .filter(|&id| !case.graph.node(id).op.is_source())
            .map(|id| case.graph.ty(id).dtype),
    );
    for (run, sources) in case.runs.iter().enumerate() {
        let at = |what: String| {
            if runs > 1 {
                format!("run {run}: {what}")
            } else {
                what
            }
        };
        let mut oracle_sources = sources.clone();
        oracle_sources.extend(exe.states_f64());
        let want = match evaluate(&case.graph, &oracle_sources) {
            Ok(w) => w,
            Err(e) => return fail(Stage::Oracle, at(e.to_string())),
        };
        let ran = match io {
            Io::Host => exe.run_f64(sources),
            Io::Device => exe.run_f64_on_device(sources),
        };
        let got = match ran {
            Ok(g) => g,
            Err(e) => return fail(Stage::Run, at(e.to_string())),
        };
        let states = exe.states_f64();
        let missing = |kind: &str, name: &str| {
            fail(
                Stage::Compare,
                at(format!("the backend returned no {kind} `{name}`")),
            )
        };
        let mut pairs: Vec<(String, &F64Tensor, &F64Tensor)> = Vec::new();
        for (name, w) in &want.outputs {
            match got.outputs.get(name) {
                Some(g) => pairs.push((format!("output {name}"), w, g)),
                None => return missing("output", name),
            }
        }
        for (name, w) in &want.states {
            match states.get(name) {
                Some(g) => pairs.push((format!("state {name}"), w, g)),
                None => return missing("state", name),
            }
        }
        if let Some(extra) = got.outputs.keys().find(|n| !want.outputs.contains_key(*n)) {
            return fail(
                Stage::Compare,
                at(format!("the backend returned an unknown output `{extra}`")),
            );
        }
        let first = checks.len();
        for (tensor, w, g) in pairs {
            let bound = case
                .tolerance
                .bound(w.dtype, computed_in.unwrap_or(w.dtype));
            checks.push(compare(run, &tensor, w, g, bound));
        }
        if let Some(bad) = checks[first..].iter().find(|c| !c.passed()) {
            return fail(Stage::Compare, at(describe(bad)));
        }
    }
    Outcome::Passed
}

/// The program `case` runs: its graph lowered for one device, or cut for one device of its
/// mesh.
fn lowered(case: &Case, target: &Target) -> Result<tir_lower::Program, String> {
    let limits = Limits::default();
    let Some(mesh) = &case.mesh else {
        return compile_graph(&case.graph, target, &limits)
            .map(|c| c.program)
            .map_err(|e| e.to_string());
    };
    compile_sharded(&case.graph, mesh, target, &limits)
        .map(|s| s.compiled.program)
        .map_err(|e| e.to_string())
}

/// Lowers `case` for `target` (the CUDA backend's; cut for one device of its mesh, if it has
/// one) and compiles every kernel to a cubin for each of `archs`, without a GPU: passed when
/// `tileiras` accepts them all. Never panics.
pub fn compile_case(
    compiler: &backend_cuda::KernelCompiler,
    target: &Target,
    case: &Case,
    archs: &[String],
) -> CaseResult {
    let start = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let program = match lowered(case, target) {
            Ok(p) => p,
            Err(e) => return fail(Stage::Lower, e),
        };
        match compiler.compile(&program, archs) {
            Ok(_) => Outcome::Passed,
            Err(e) => fail(Stage::Compile, e.to_string()),
        }
    }))
    .unwrap_or_else(|payload| Outcome::Failed {
        stage: Stage::Panic,
        message: panic_message(payload.as_ref()),
    });
    CaseResult {
        name: case.name.clone(),
        outcome,
        checks: Vec::new(),
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// One line about a failed tensor check: the tensor, the errors, the first bad element.
pub fn describe(c: &TensorCheck) -> String {
    if let Some(why) = &c.malformed {
        return format!("{}: {why}", c.tensor);
    }
    let mut line = format!(
        "{}: max abs {:.3e}, max rel {:.3e}",
        c.tensor, c.max_abs, c.max_rel
    );
    if !c.bound.is_exact() {
        line += &format!(
            " (allowed {:.2e} x (|expected| + {:.3e}) + {:.1e})",
            c.bound.rtol, c.typical, c.bound.floor
        );
    }
    let total = c.dims.iter().product::<u64>();
    line += &format!(", {} of {total} bad", c.bad);
    if let Some(m) = &c.first_bad {
        line += &format!(
            ", first bad {:?} (flat {}): expected {}, got {} ({})",
            m.coords,
            m.index,
            show(m.expected),
            show(m.got),
            m.why
        );
    }
    line
}

/// A value as it reads best: integers without a fraction, others with enough digits.
fn show(v: f64) -> String {
    if v.is_finite() && v == v.trunc() && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:e}")
    }
}

/// Whether `name` matches the `--filter` pattern: a substring, or with `*` a glob over the whole
/// name (`*` matches any run of characters).
pub fn matches_filter(name: &str, pattern: &str) -> bool {
    if !pattern.contains('*') {
        return name.contains(pattern);
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Counts of results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Summary {
    pub fn of(results: &[CaseResult]) -> Summary {
        let mut s = Summary::default();
        for r in results {
            match r.outcome {
                Outcome::Passed => s.passed += 1,
                Outcome::Failed { .. } => s.failed += 1,
                Outcome::Skipped { .. } => s.skipped += 1,
            }
        }
        s
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_substrings_or_globs() {
        assert!(matches_filter("op/exp/f16/vec", "exp"));
        assert!(!matches_filter("op/exp/f16/vec", "log"));
        assert!(matches_filter("op/exp/f16/vec", "op/*/f16/*"));
        assert!(matches_filter("op/exp/f16/vec", "*vec"));
        assert!(!matches_filter("op/exp/f16/vec", "*f32*"));
        assert!(matches_filter("op/exp/f16/vec", "*"));
        assert!(!matches_filter("ab", "a*b*b"));
    }
}
