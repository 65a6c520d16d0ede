//! Differential testing: random graphs run on two backends with the same inputs, every output
//! and state compared element by element (`tir-differential` runs the CUDA backend against the
//! reference).
//!
//! Graph `index` of seed `seed` is drawn by [`draw`] from `(seed, index)` alone: the graph from
//! the property tests' generator (`tir_graph::testing::arb_graph`, every op, dtype and attribute
//! form, states, NaN and infinite constants), the symbolic dims (`batch`, `seq`, `n`, `_k9`, each
//! 1, 2, 3, 5 or 7) and the values of every input and parameter for each run (random, with three
//! in four run-time write positions of a state moved inside it). A graph with states runs twice
//! on one executable, so that the second run reads what the first wrote.
//!
//! [`run_on`] runs a drawn graph on a backend ([`Ran`]); [`judge`] compares two of them, the
//! reference and the subject:
//!
//! - A graph the reference refuses for one of the [`EXPECTED_REFUSALS`] (a random write position
//!   outside a state, a dim only a state has) is *refused*; the subject must refuse the same run
//!   for the same reason. Any other error on either side fails the graph.
//! - Integer and bool elements must be equal; float elements must satisfy [`Bound`]: NaN only
//!   where the reference has NaN, infinities equal, and otherwise
//!   `|subject - ref| <= rtol * (|ref| + typical) + min_normal` with the bound of [`bound_for`].
//! - An element outside the bound is *excused* only when the f64 oracle (`tir_graph::eval`)
//!   shows it ill-conditioned: the reference itself is off the oracle by more than the bound (or,
//!   for an integer or bool computed from floats, differs from it), or the subject agrees with
//!   the oracle. A NaN of the subject where the oracle has a number is never excused, so an
//!   element the subject did not write (poisoned to NaN) never passes.

use crate::case::Case;
use crate::compare::{coords, typical, value_mismatch};
use crate::runner::{panic_message, Stage};
use crate::tolerance::{coarsest_float, min_normal, Bound, Tolerance};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::Serialize;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;
use tir_graph::eval::{concrete_dims, evaluate, F64Tensor};
use tir_graph::testing::arb_graph;
use tir_graph::{DType, Graph, HostTensor, NodeId, Op};
use tir_lower::{compile_graph, Backend, Executable, HostTensors, Target, TensorRef};
use tir_opt::Limits;

/// The symbolic dims of the generator's graphs.
pub const SYMBOLS: [&str; 4] = ["batch", "seq", "n", "_k9"];
/// The values a symbolic dim is bound to: size 1, odd sizes, no power of two beyond 2.
pub const DIM_VALUES: [u64; 5] = [1, 2, 3, 5, 7];
/// The refusals both backends owe a random graph, as a substring of the error: a random write
/// position outside a state (checked before the kernel), a symbolic dim only a state has.
pub const EXPECTED_REFUSALS: [&str; 2] = [
    "launch check failed",
    "is not bound by any input or parameter",
];

/// Graphs kept after a failure, as `(seed, index)`: each runs in `tests/differential.rs` as a
/// conformance case on the reference, and with `tir-differential --kept` on the GPU.
pub const KEPT: &[(u64, u64)] = &[
    // A state written at a position an earlier kernel of the run computes (an intermediate,
    // an output): the CUDA backend refused the run, having checked the position before it.
    (1, 119),
    (1, 4979),
    (1, 8767),
];

/// Graphs kept after a failure that the oracle cannot judge: their `i64` results lie past 2^53,
/// where the oracle's `f64` values are not exact. The reference, which held them as `f64` too,
/// differed from the CUDA backend's exact values (a constant near `i64::MAX`, float-to-`i64`
/// casts past 2^63, overflowing arithmetic). They run with `tir-differential --kept` on the GPU,
/// and in `tests/differential.rs` on the reference against its checking mode.
pub const KEPT_PAST_THE_ORACLE: &[(u64, u64)] = &[(1, 164), (1, 6492), (1, 6796)];

/// A graph drawn from `(seed, index)`, with its dims and the sources of each run.
#[derive(Clone, Debug)]
pub struct Drawn {
    pub seed: u64,
    pub index: u64,
    pub graph: Graph,
    pub dims: BTreeMap<String, u64>,
    /// The inputs and parameters of each run (two when the graph has a state, else one).
    pub runs: Vec<BTreeMap<String, F64Tensor>>,
}

/// splitmix64's finalizer over `parts`: distinct streams for graph, dims and each source.
fn mix(parts: &[u64]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for &p in parts {
        h = (h ^ p).wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

/// The 32 bytes of proptest's ChaCha seed for graph `index` of `seed`.
fn seed_bytes(seed: u64, index: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&index.to_le_bytes());
    bytes[16..24].copy_from_slice(b"tir-diff");
    bytes
}

/// The graph of `(seed, index)` from `arb_graph`, its dims and its sources (see the module
/// doc). Deterministic on every machine: proptest promises the same ChaCha stream for the same
/// seed bytes in every version.
pub fn draw(seed: u64, index: u64) -> Drawn {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed, index));
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let graph = arb_graph()
        .new_tree(&mut runner)
        // arb_graph's strategies (vectors, weighted unions, any::<u64>) never reject.
        .expect("arb_graph never rejects a value")
        .current();
    let dims: BTreeMap<String, u64> = SYMBOLS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pick = mix(&[seed, index, 1, i as u64]) % DIM_VALUES.len() as u64;
            (s.to_string(), DIM_VALUES[pick as usize])
        })
        .collect();
    let run_count = if graph.states().is_empty() { 1 } else { 2 };
    let runs = (0..run_count)
        .map(|run| {
            let mut sources: BTreeMap<String, F64Tensor> = graph
                .inputs()
                .into_iter()
                .chain(graph.parameters())
                .enumerate()
                .map(|(j, (name, id))| {
                    let ty = graph.ty(id);
                    // Every symbol a source can have is bound above.
                    let shape = concrete_dims(&ty.shape, &dims)
                        .expect("the generator's symbols are all bound");
                    let s = mix(&[seed, index, 2, run, j as u64]);
                    (name, F64Tensor::random(ty.dtype, shape, s))
                })
                .collect();
            place_write_positions(&graph, &dims, &mut sources, mix(&[seed, index, 3, run]));
            sources
        })
        .collect();
    Drawn {
        seed,
        index,
        graph,
        dims,
        runs,
    }
}

/// Moves three in four run-time write positions of `state_write_slice` that come straight from
/// an input or parameter inside the state, so that most such graphs run instead of being
/// refused (random integers in [-8, 8) mostly fall outside a state of a few elements); the
/// rest stay as drawn, to keep the refusal tested.
fn place_write_positions(
    graph: &Graph,
    dims: &BTreeMap<String, u64>,
    sources: &mut BTreeMap<String, F64Tensor>,
    seed: u64,
) {
    for (k, id) in graph.node_ids().enumerate() {
        let Op::StateWriteSlice { axis, start: None } = graph.node(id).op else {
            continue;
        };
        let operands = graph.operands(id);
        let [state, value, offset] = operands[..] else {
            continue;
        };
        let Some(name) = graph.node(offset).op.source_name() else {
            continue;
        };
        let along = |n: NodeId| {
            concrete_dims(&graph.ty(n).shape, dims)
                .ok()
                .and_then(|d| d.get(axis).copied())
        };
        let (Some(size), Some(len)) = (along(state), along(value)) else {
            continue;
        };
        let r = mix(&[seed, k as u64]);
        if r % 4 == 3 || len > size {
            continue;
        }
        if let Some(t) = sources.get_mut(name) {
            let position = (r >> 2) % (size - len + 1);
            t.data.iter_mut().for_each(|v| *v = position as f64);
        }
    }
}

/// What one run of an executable left: its outputs, and the states before and after it.
pub struct RunValues {
    pub outputs: HostTensors,
    /// The states the run started from (what the oracle is given).
    pub states_before: HostTensors,
    pub states: HostTensors,
}

/// Why a backend stopped before the last run.
#[derive(Clone, Debug, PartialEq)]
pub struct Stop {
    pub stage: Stage,
    /// The run that failed, for [`Stage::Run`].
    pub run: Option<usize>,
    pub message: String,
}

impl Stop {
    /// The expected refusal this is, if it is one.
    pub fn expected_refusal(&self) -> Option<&'static str> {
        if self.stage != Stage::Run {
            return None;
        }
        EXPECTED_REFUSALS
            .into_iter()
            .find(|r| self.message.contains(r))
    }
}

/// A drawn graph run on one backend: the runs that completed, and why it stopped if it did.
pub struct Ran {
    pub backend: &'static str,
    pub runs: Vec<RunValues>,
    pub stop: Option<Stop>,
}

/// Lowers `drawn.graph` for `backend`, compiles it, and runs each of `drawn.runs` on the one
/// executable. Never panics: a panic is a [`Stop`] at [`Stage::Panic`].
pub fn run_on(backend: &dyn Backend, drawn: &Drawn) -> Ran {
    let mut runs = Vec::new();
    let stop = catch_unwind(AssertUnwindSafe(|| execute(backend, drawn, &mut runs)))
        .unwrap_or_else(|payload| {
            Some(Stop {
                stage: Stage::Panic,
                run: None,
                message: panic_message(payload.as_ref()),
            })
        });
    Ran {
        backend: backend.name(),
        runs,
        stop,
    }
}

fn execute(backend: &dyn Backend, drawn: &Drawn, runs: &mut Vec<RunValues>) -> Option<Stop> {
    let stop = |stage, run, message: String| {
        Some(Stop {
            stage,
            run,
            message,
        })
    };
    let compiled = match compile_graph(&drawn.graph, &backend.target(), &Limits::default()) {
        Ok(c) => c,
        Err(e) => return stop(Stage::Lower, None, e.to_string()),
    };
    let mut exe = match backend.compile(&compiled.program) {
        Ok(exe) => exe,
        Err(e) => return stop(Stage::Compile, None, e.to_string()),
    };
    for (run, sources) in drawn.runs.iter().enumerate() {
        match run_once(exe.as_mut(), sources) {
            Ok(values) => runs.push(values),
            Err(message) => return stop(Stage::Run, Some(run), message),
        }
    }
    None
}

/// Sets the parameters among `sources`, runs with the rest as inputs, reads the states.
fn run_once(
    exe: &mut dyn Executable,
    sources: &BTreeMap<String, F64Tensor>,
) -> Result<RunValues, String> {
    let states_before = exe.states().map_err(|e| e.to_string())?;
    let mut inputs = Vec::new();
    for (name, t) in sources {
        let host = HostTensor::from_f64(t).map_err(|e| format!("source `{name}`: {e}"))?;
        if exe.signature().parameters.iter().any(|(n, _)| n == name) {
            exe.set_parameter(name, TensorRef::Host(&host))
                .map_err(|e| e.to_string())?;
        } else {
            inputs.push((name.as_str(), host));
        }
    }
    let refs: Vec<(&str, TensorRef<'_>)> = inputs
        .iter()
        .map(|(n, t)| (*n, TensorRef::Host(t)))
        .collect();
    let outputs = exe.run(&refs).map_err(|e| e.to_string())?;
    let states = exe.states().map_err(|e| e.to_string())?;
    Ok(RunValues {
        outputs,
        states_before,
        states,
    })
}

/// The bound for `node`'s values in run `run` of `drawn`: the [`Tolerance::composite`] bound of
/// the graph's longest reduction, its `rtol` times the number of rounding steps on the longest
/// path to the node (times `run + 1` in a graph with states, whose values go round again).
///
/// Why: each step (one unary, binary, cast, reduction, matmul or convolution) of either backend
/// lies within a few ulps of the step's exact result on the same operands (transcendentals
/// within `8u`, accumulations within `4 sqrt(len) u_acc`; see [`crate::tolerance`]), so the two
/// backends differ by at most twice that per step, which is the composite class (`16u + 4 sqrt(len)
/// u_acc`); along a chain of well-conditioned steps the differences add up. `u` is that of the
/// graph's coarsest float dtype. Ill-conditioned steps (cancellation, a large argument to exp)
/// amplify more than this; the oracle arbitrates those (see the module doc).
pub fn bound_for(
    drawn: &Drawn,
    facts: &NodeFacts,
    node: NodeId,
    dtype: DType,
    run: usize,
) -> Bound {
    let computed_in = coarsest_float(drawn.graph.node_ids().map(|id| drawn.graph.ty(id).dtype));
    let mut bound =
        Tolerance::composite(facts.longest_reduction).bound(dtype, computed_in.unwrap_or(dtype));
    if !bound.is_exact() {
        let rounds = if drawn.graph.states().is_empty() {
            1
        } else {
            run as u64 + 1
        };
        bound.rtol *= (facts.depth[node.index()].max(1) * rounds) as f64;
        bound.floor = min_normal(dtype);
    }
    bound
}

/// What the bound and the arbitration need to know of each node of a graph.
pub struct NodeFacts {
    /// The rounding steps on the longest path from a source to the node.
    pub depth: Vec<u64>,
    /// Whether a float value feeds the node (for integer and bool nodes: whether a rounding
    /// difference upstream can flip them).
    pub fed_by_float: Vec<bool>,
    /// The longest reduced length in the graph under the drawn dims (1 if none).
    pub longest_reduction: u64,
}

impl NodeFacts {
    pub fn of(drawn: &Drawn) -> NodeFacts {
        let g = &drawn.graph;
        let mut depth = vec![0u64; g.len()];
        let mut fed_by_float = vec![false; g.len()];
        let mut longest_reduction = 1u64;
        let numel = |id: NodeId| -> Option<u64> {
            concrete_dims(&g.ty(id).shape, &drawn.dims)
                .ok()
                .map(|d| d.iter().product())
        };
        // Operands come before their users in node order.
        for id in g.node_ids() {
            let operands = g.operands(id);
            let op = &g.node(id).op;
            let rounds = matches!(
                op,
                Op::Unary(_)
                    | Op::Binary(_)
                    | Op::Cast { .. }
                    | Op::Reduce { .. }
                    | Op::MatMul
                    | Op::Conv { .. }
            );
            depth[id.index()] =
                operands.iter().map(|o| depth[o.index()]).max().unwrap_or(0) + u64::from(rounds);
            fed_by_float[id.index()] = operands
                .iter()
                .any(|o| g.ty(*o).dtype.is_float() || fed_by_float[o.index()]);
            let reduced = match op {
                Op::Reduce { .. } => match (numel(operands[0]), numel(id)) {
                    (Some(a), Some(r)) if r > 0 => a / r,
                    _ => 1,
                },
                Op::MatMul => concrete_dims(&g.ty(operands[0]).shape, &drawn.dims)
                    .ok()
                    .and_then(|d| d.last().copied())
                    .unwrap_or(1),
                Op::Conv { .. } => concrete_dims(&g.ty(operands[1]).shape, &drawn.dims)
                    .ok()
                    .map(|d| d.iter().skip(1).product())
                    .unwrap_or(1),
                _ => 1,
            };
            longest_reduction = longest_reduction.max(reduced);
        }
        NodeFacts {
            depth,
            fed_by_float,
            longest_reduction,
        }
    }
}

/// One element of a tensor that differs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ElementDiff {
    /// Row-major position.
    pub index: usize,
    pub coords: Vec<u64>,
    #[serde(serialize_with = "crate::report::float")]
    pub reference: f64,
    #[serde(serialize_with = "crate::report::float")]
    pub subject: f64,
    /// The oracle's value rounded to the dtype, where it was asked.
    #[serde(serialize_with = "option_float")]
    pub oracle: Option<f64>,
    pub why: &'static str,
    /// The difference as a multiple of what the bound allows there (infinite for NaN,
    /// infinities and integers).
    #[serde(serialize_with = "crate::report::float")]
    pub ratio: f64,
}

fn option_float<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => crate::report::float(v, s),
        None => s.serialize_none(),
    }
}

/// The comparison of one tensor of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorDiff {
    pub run: usize,
    /// `output NAME` or `state NAME`.
    pub tensor: String,
    #[serde(serialize_with = "crate::report::dtype")]
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub bound: Bound,
    /// The root-mean-square of the reference's finite values.
    #[serde(serialize_with = "crate::report::float")]
    pub typical: f64,
    /// Elements that differ beyond the bound and are not excused.
    pub bad: usize,
    /// Elements beyond the bound that the oracle excused (see the module doc).
    pub excused: usize,
    /// The bad element with the largest ratio (the first of those with an infinite one).
    pub worst: Option<ElementDiff>,
    /// Why the tensors cannot be compared at all (dtype, dims, a missing tensor).
    pub malformed: Option<String>,
}

impl TensorDiff {
    pub fn passed(&self) -> bool {
        self.bad == 0 && self.malformed.is_none()
    }
}

/// Why `subject` does not pass for `reference` at one element under `bound`, and the ratio of
/// the difference to what is allowed; `None` when it passes.
fn element_error(
    dtype: DType,
    reference: f64,
    subject: f64,
    bound: Bound,
    typical: f64,
) -> Option<(&'static str, f64)> {
    let bound = dtype.is_float().then_some(bound);
    value_mismatch(reference, subject, bound, typical)
}

/// Compares `subject` with `reference` element by element under `bound`. With `oracle` (the
/// f64 oracle's unrounded values) elements beyond the bound may be excused, as the module doc
/// says; `ints_may_drift` says whether an integer or bool tensor is computed from floats.
pub fn compare_tensors(
    run: usize,
    tensor: &str,
    reference: &HostTensor<'_>,
    subject: &HostTensor<'_>,
    bound: Bound,
    oracle: Option<&F64Tensor>,
    ints_may_drift: bool,
) -> TensorDiff {
    let dtype = reference.dtype();
    let mut diff = TensorDiff {
        run,
        tensor: tensor.to_string(),
        dtype,
        dims: reference.dims().to_vec(),
        bound,
        typical: 0.0,
        bad: 0,
        excused: 0,
        worst: None,
        malformed: None,
    };
    if subject.dtype() != dtype || subject.dims() != reference.dims() {
        diff.malformed = Some(format!(
            "the reference has {}, the subject {}",
            reference.type_name(),
            subject.type_name()
        ));
        return diff;
    }
    let (r, s) = (reference.to_f64().data, subject.to_f64().data);
    diff.typical = typical(&r);
    let oracle = oracle.filter(|o| o.data.len() == r.len()).map(|o| {
        o.data
            .iter()
            .map(|&v| dtype.round_value(v))
            .collect::<Vec<f64>>()
    });
    let size = dtype.size_bytes();
    let (rb, sb) = (reference.bytes(), subject.bytes());
    for i in 0..r.len() {
        // Integers by their bytes: i64 values beyond 2^53 do not survive f64.
        let error = if dtype.is_float() {
            element_error(dtype, r[i], s[i], bound, diff.typical)
        } else {
            let (a, b) = (&rb[i * size..(i + 1) * size], &sb[i * size..(i + 1) * size]);
            (a != b).then_some(("not equal", f64::INFINITY))
        };
        let Some((why, ratio)) = error else {
            continue;
        };
        let o = oracle.as_ref().map(|o| o[i]);
        if let Some(o) = o {
            if excused(dtype, r[i], s[i], o, bound, diff.typical, ints_may_drift) {
                diff.excused += 1;
                continue;
            }
        }
        diff.bad += 1;
        let worse = diff.worst.as_ref().is_none_or(|w| ratio > w.ratio);
        if worse {
            diff.worst = Some(ElementDiff {
                index: i,
                coords: coords(i, reference.dims()),
                reference: r[i],
                subject: s[i],
                oracle: o,
                why,
                ratio,
            });
        }
    }
    diff
}

/// Whether a difference at one element is explained by ill-conditioning (see the module doc):
/// `oracle` is the oracle's value rounded to the dtype.
fn excused(
    dtype: DType,
    reference: f64,
    subject: f64,
    oracle: f64,
    bound: Bound,
    typical: f64,
    ints_may_drift: bool,
) -> bool {
    if !dtype.is_float() {
        return ints_may_drift && (subject == oracle || reference != oracle);
    }
    // A NaN only where the exact result is NaN: a poisoned element never passes.
    if subject.is_nan() && !oracle.is_nan() {
        return false;
    }
    let subject_exact = element_error(dtype, oracle, subject, bound, typical).is_none();
    let reference_off = element_error(dtype, oracle, reference, bound, typical).is_some();
    subject_exact || reference_off
}

/// How a graph ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    /// Both backends refused it for this expected reason.
    Refused {
        reason: String,
    },
    Failed {
        stage: Stage,
        message: String,
    },
}

/// The result of one graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GraphResult {
    pub seed: u64,
    pub index: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Every tensor compared, in run order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tensors: Vec<TensorDiff>,
    /// Elements excused by the oracle, over all tensors.
    pub excused: usize,
    /// Node count of the graph and whether it has a state.
    pub nodes: usize,
    pub states: bool,
    pub seconds: f64,
}

impl GraphResult {
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Outcome::Failed { .. })
    }

    /// [`failure_kind`] of a failed graph.
    pub fn failure_kind(&self) -> Option<String> {
        match &self.outcome {
            Outcome::Failed { stage, message } => {
                Some(failure_kind(*stage, message, &self.tensors))
            }
            _ => None,
        }
    }

    /// The line printed for a failed graph (`None` otherwise): the graph, the stage, the
    /// message, and how to run it alone.
    pub fn line(&self) -> Option<String> {
        let Outcome::Failed { stage, message } = &self.outcome else {
            return None;
        };
        Some(format!(
            "FAIL (seed {}, index {}) [{}]: {}  (again: tir-differential --seed {} --index {})",
            self.seed,
            self.index,
            stage.name(),
            message.replace('\n', "\\n"),
            self.seed,
            self.index
        ))
    }
}

/// What kind of failure this is, for grouping many failures of one cause: for a wrong value,
/// the reason of the worst element and the dtype (from `tensors`); otherwise the stage and the
/// message with numbers and quoted names blanked.
pub fn failure_kind(stage: Stage, message: &str, tensors: &[TensorDiff]) -> String {
    if let Some(bad) = tensors.iter().find(|t| !t.passed()) {
        let why = match (&bad.malformed, &bad.worst) {
            (Some(_), _) => "malformed",
            (None, Some(w)) => w.why,
            (None, None) => "bad",
        };
        return format!("[{}] {why} ({})", stage.name(), bad.dtype);
    }
    let mut kind = String::new();
    let mut quoted = false;
    for c in message.chars() {
        match c {
            '`' => {
                quoted = !quoted;
                if quoted {
                    kind.push_str("`_`");
                }
            }
            _ if quoted => {}
            c if c.is_ascii_digit() => {
                if !kind.ends_with('#') {
                    kind.push('#');
                }
            }
            c => kind.push(c),
        }
    }
    let kind: String = kind.chars().take(160).collect();
    format!("[{}] {kind}", stage.name())
}

/// One line about a tensor that failed: the tensor, its bad elements, and the worst of them.
pub fn describe(d: &TensorDiff, subject: &str) -> String {
    let at = if d.run > 0 || d.tensor.starts_with("state") {
        format!("run {}: ", d.run)
    } else {
        String::new()
    };
    if let Some(why) = &d.malformed {
        return format!("{at}{}: {why}", d.tensor);
    }
    let total: u64 = d.dims.iter().product();
    let mut line = format!(
        "{at}{} ({}{:?}): {} of {total} bad",
        d.tensor, d.dtype, d.dims, d.bad
    );
    if d.excused > 0 {
        line += &format!(" ({} more excused)", d.excused);
    }
    if let Some(w) = &d.worst {
        line += &format!(
            ", worst {:?} (flat {}): ref {:e}, {subject} {:e}",
            w.coords, w.index, w.reference, w.subject
        );
        if let Some(o) = w.oracle {
            line += &format!(", oracle {o:e}");
        }
        line += &format!(" ({}", w.why);
        if w.ratio.is_finite() {
            line += &format!(", {:.3}x the bound", w.ratio);
        }
        line += ")";
    }
    if !d.bound.is_exact() {
        line += &format!(
            "; bound {:.2e} x (|ref| + {:.3e}) + {:.1e}",
            d.bound.rtol, d.typical, d.bound.floor
        );
    }
    line
}

/// Judges `subject` against `reference` for `drawn` (see the module doc).
pub fn judge(drawn: &Drawn, reference: &Ran, subject: &Ran, seconds: f64) -> GraphResult {
    let mut result = GraphResult {
        seed: drawn.seed,
        index: drawn.index,
        outcome: Outcome::Passed,
        tensors: Vec::new(),
        excused: 0,
        nodes: drawn.graph.len(),
        states: !drawn.graph.states().is_empty(),
        seconds,
    };
    result.outcome = verdict(drawn, reference, subject, &mut result.tensors);
    result.excused = result.tensors.iter().map(|t| t.excused).sum();
    result
}

fn failed(stage: Stage, message: String) -> Outcome {
    Outcome::Failed { stage, message }
}

fn verdict(drawn: &Drawn, reference: &Ran, subject: &Ran, diffs: &mut Vec<TensorDiff>) -> Outcome {
    let facts = NodeFacts::of(drawn);
    // The runs both completed, compared in order: a wrong state shows before what it causes.
    for (run, (r, s)) in reference.runs.iter().zip(&subject.runs).enumerate() {
        let first = diffs.len();
        compare_run(drawn, &facts, run, r, s, None, diffs);
        if diffs[first..].iter().all(TensorDiff::passed) {
            continue;
        }
        // Beyond the bound somewhere: ask the oracle, with the states the reference started from.
        let mut sources = drawn.runs[run].clone();
        sources.extend(r.states_before.iter().map(|(n, t)| (n.clone(), t.to_f64())));
        let oracle = evaluate(&drawn.graph, &sources).ok();
        diffs.truncate(first);
        compare_run(drawn, &facts, run, r, s, oracle.as_ref(), diffs);
        if let Some(bad) = diffs[first..].iter().find(|d| !d.passed()) {
            return failed(Stage::Compare, describe(bad, subject.backend));
        }
    }
    let (rn, sn) = (reference.backend, subject.backend);
    let stopped = |ran: &Ran, stop: &Stop| {
        let run = stop.run.map(|r| format!(" run {r}")).unwrap_or_default();
        format!("{} failed{run}: {}", ran.backend, stop.message)
    };
    match (&reference.stop, &subject.stop) {
        (None, None) => Outcome::Passed,
        (Some(rs), ss) => match rs.expected_refusal() {
            Some(reason) => match ss {
                Some(ss) if ss.run == rs.run && ss.expected_refusal() == Some(reason) => {
                    Outcome::Refused {
                        reason: reason.to_string(),
                    }
                }
                Some(ss) => failed(
                    Stage::Run,
                    format!(
                        "{rn} refused run {} ({reason}), but {}",
                        rs.run.unwrap_or(0),
                        stopped(subject, ss)
                    ),
                ),
                None => failed(
                    Stage::Run,
                    format!(
                        "{rn} refused run {} ({}), {sn} ran it",
                        rs.run.unwrap_or(0),
                        rs.message
                    ),
                ),
            },
            None => failed(rs.stage, stopped(reference, rs)),
        },
        (None, Some(ss)) => failed(ss.stage, stopped(subject, ss)),
    }
}

/// Compares every output and state of one run, appending to `diffs`.
fn compare_run(
    drawn: &Drawn,
    facts: &NodeFacts,
    run: usize,
    reference: &RunValues,
    subject: &RunValues,
    oracle: Option<&tir_graph::eval::Evaluation>,
    diffs: &mut Vec<TensorDiff>,
) {
    let g = &drawn.graph;
    let mut tensors: Vec<(&str, String, NodeId)> = g
        .outputs()
        .iter()
        .map(|(n, id)| ("output", n.clone(), *id))
        .collect();
    // A state's values are its writer's (or its own, when nothing writes it).
    tensors.extend(
        g.states()
            .into_iter()
            .map(|(n, id)| ("state", n, g.state_writer(id).unwrap_or(id))),
    );
    for (kind, name, node) in tensors {
        let (r, s) = match kind {
            "output" => (&reference.outputs, &subject.outputs),
            _ => (&reference.states, &subject.states),
        };
        // Names may hold newlines and quotes: escaped, so that a report stays one line.
        let tensor = format!("{kind} {}", name.escape_debug());
        let dtype = g.ty(node).dtype;
        let bound = bound_for(drawn, facts, node, dtype, run);
        let o = oracle.and_then(|o| match kind {
            "output" => o.outputs.get(&name),
            _ => o.states.get(&name),
        });
        let missing = |who: &str| TensorDiff {
            run,
            tensor: tensor.clone(),
            dtype,
            dims: Vec::new(),
            bound,
            typical: 0.0,
            bad: 0,
            excused: 0,
            worst: None,
            malformed: Some(format!(
                "the {who} returned no {kind} `{}`",
                name.escape_debug()
            )),
        };
        let diff = match (r.get(&name), s.get(&name)) {
            (Some(rt), Some(st)) => compare_tensors(
                run,
                &tensor,
                rt,
                st,
                bound,
                o,
                facts.fed_by_float[node.index()],
            ),
            (None, _) => missing("reference"),
            (_, None) => missing("subject"),
        };
        diffs.push(diff);
    }
}

/// Graph `index` of `seed` as a conformance case named `differential/S/I`, judged against the
/// oracle (`run_case`) under the model tolerance of its longest reduction: how a graph kept in
/// [`KEPT`] runs on any backend.
pub fn conformance_case(seed: u64, index: u64) -> Case {
    let drawn = draw(seed, index);
    let len = NodeFacts::of(&drawn).longest_reduction;
    Case::new(
        format!("differential/{seed}/{index}"),
        drawn.graph,
        drawn.runs,
        Tolerance::model(len),
    )
}

/// Draws graph `index` of `seed`, runs it on both backends and judges it.
pub fn check(seed: u64, index: u64, reference: &dyn Backend, subject: &dyn Backend) -> GraphResult {
    let start = Instant::now();
    let drawn = draw(seed, index);
    let r = run_on(reference, &drawn);
    let s = run_on(subject, &drawn);
    judge(&drawn, &r, &s, start.elapsed().as_secs_f64())
}

/// The counts of a differential run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub graphs: usize,
    pub passed: usize,
    pub refused: usize,
    pub failed: usize,
    /// Passed graphs with at least one element the oracle excused.
    pub passed_with_excused: usize,
}

impl Summary {
    pub fn of(results: &[GraphResult]) -> Summary {
        let mut s = Summary {
            graphs: results.len(),
            ..Summary::default()
        };
        for r in results {
            match r.outcome {
                Outcome::Passed => {
                    s.passed += 1;
                    s.passed_with_excused += usize::from(r.excused > 0);
                }
                Outcome::Refused { .. } => s.refused += 1,
                Outcome::Failed { .. } => s.failed += 1,
            }
        }
        s
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} graphs: {} passed, {} refused (both), {} failed",
            self.graphs, self.passed, self.refused, self.failed
        )
    }
}

/// What compiling one graph's kernels for the GPU did (`--compile-only`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompileResult {
    pub seed: u64,
    pub index: u64,
    /// `None` when every kernel compiled.
    pub failure: Option<(Stage, String)>,
    pub kernels: usize,
    /// Cubins assembled now, and those the cache (or an identical kernel) already had.
    pub assembled: usize,
    pub cached: usize,
    pub seconds: f64,
}

/// Lowers graph `index` of `seed` for `target` (the CUDA backend's) and compiles its kernels to
/// cubins for `archs` through the kernel cache, without a GPU. Never panics.
pub fn compile_graph_for(
    compiler: &backend_cuda::KernelCompiler,
    target: &Target,
    seed: u64,
    index: u64,
    archs: &[String],
) -> CompileResult {
    let start = Instant::now();
    let mut result = CompileResult {
        seed,
        index,
        failure: None,
        kernels: 0,
        assembled: 0,
        cached: 0,
        seconds: 0.0,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let drawn = draw(seed, index);
        let compiled = compile_graph(&drawn.graph, target, &Limits::default())
            .map_err(|e| (Stage::Lower, e.to_string()))?;
        let kernels = compiled.program.kernels.len();
        let (_, used) = compiler
            .compile(&compiled.program, archs)
            .map_err(|e| (Stage::Compile, e.to_string()))?;
        Ok::<_, (Stage, String)>((kernels, used))
    }))
    .unwrap_or_else(|payload| Err((Stage::Panic, panic_message(payload.as_ref()))));
    match outcome {
        Ok((kernels, used)) => {
            result.kernels = kernels;
            result.assembled = used.misses;
            result.cached = used.hits;
        }
        Err(failure) => result.failure = Some(failure),
    }
    result.seconds = start.elapsed().as_secs_f64();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_is_drawn_from_its_seed_and_index_alone() {
        let a = draw(7, 3);
        let b = draw(7, 3);
        assert_eq!(a.graph, b.graph);
        assert_eq!(a.dims, b.dims);
        assert_eq!(a.runs, b.runs);
        let others: Vec<Graph> = (0..4).map(|i| draw(7, 10 + i).graph).collect();
        assert!(others.iter().any(|g| *g != a.graph));
        assert_ne!(draw(8, 3).graph, a.graph);
    }

    #[test]
    fn integers_must_be_equal_and_nan_only_where_the_reference_has_it() {
        let bound = Tolerance::composite(4).bound(DType::F32, DType::F32);
        assert_eq!(element_error(DType::I32, 3.0, 3.0, Bound::EXACT, 0.0), None);
        assert!(element_error(DType::I32, 3.0, 4.0, Bound::EXACT, 0.0).is_some());
        assert_eq!(
            element_error(DType::F32, f64::NAN, f64::NAN, bound, 1.0),
            None
        );
        let why = |r, s| element_error(DType::F32, r, s, bound, 1.0).map(|(w, _)| w);
        assert_eq!(why(1.0, f64::NAN), Some("unexpected NaN"));
        assert_eq!(why(f64::NAN, 1.0), Some("expected NaN"));
        assert_eq!(why(f64::INFINITY, 3e38), Some("infinity differs"));
        assert_eq!(why(1.0, 1.0 + 1e-7), None);
        assert_eq!(why(1.0, 1.01), Some("outside tolerance"));
    }

    #[test]
    fn the_oracle_excuses_ill_conditioned_elements_but_never_a_stray_nan() {
        let bound = Tolerance::composite(1).bound(DType::F32, DType::F32);
        // The reference is off the exact value too: rounding was amplified here.
        assert!(excused(DType::F32, 1.0, 1.1, 1.2, bound, 1.0, false));
        // The subject agrees with the exact value.
        assert!(excused(DType::F32, 1.2, 1.0, 1.0, bound, 1.0, false));
        // The reference agrees with the exact value, the subject does not.
        assert!(!excused(DType::F32, 1.0, 1.1, 1.0, bound, 1.0, false));
        // An unwritten (NaN) element where the exact value is a number.
        assert!(!excused(DType::F32, 1.0, f64::NAN, 1.2, bound, 1.0, false));
        // Integers drift only when floats feed them.
        assert!(excused(DType::I32, 3.0, 4.0, 4.0, Bound::EXACT, 0.0, true));
        assert!(!excused(
            DType::I32,
            3.0,
            4.0,
            4.0,
            Bound::EXACT,
            0.0,
            false
        ));
        assert!(!excused(DType::I32, 3.0, 4.0, 3.0, Bound::EXACT, 0.0, true));
    }
}
