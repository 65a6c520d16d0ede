//! ONNX's backend node tests (and models in the same layout) run on a backend.
//!
//! A test is a folder holding `model.onnx` and `test_data_set_N/input_K.pb` / `output_K.pb`
//! (written by `scripts/onnx-node-tests.sh` from the `onnx` package's generators), and optionally
//! `case.json` with its `rtol`/`atol`. Each test is imported with `tir-onnx` (an input that sets
//! a shape, axes or sizes is given its test value at import), compiled for the backend, run on
//! every data set, and each output compared with the expected one: the same dtype and dims, and
//! every element within `atol + rtol·|expected|` (ONNX's runner: rtol 1e-3, atol 1e-7 unless the
//! case says otherwise; for f16 and bf16 outputs rtol is at least 2^-9 and 2^-6, two ulps),
//! NaN only where NaN is expected. A model tir refuses at import is
//! `unsupported` with the reason; anything that goes wrong after a successful import is a
//! failure: a lowering, compile or run error, or a wrong value (with its first bad element).

use crate::runner::{panic_message, Stage};
use serde::Serialize;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tir_graph::{DType, HostTensor, Op};
use tir_lower::{compile_graph, Backend, Target, TensorRef};
use tir_onnx::model::decode_tensor;
use tir_onnx::{ImportOptions, Imported, Model, NodeErrorKind, OnnxError};
use tir_opt::Limits;

/// One test folder.
#[derive(Clone, Debug)]
pub struct NodeTest {
    pub name: String,
    pub dir: PathBuf,
}

/// How a test ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeOutcome {
    Passed,
    /// Refused at import: an op, dtype, attribute or type tir does not have.
    Unsupported {
        reason: String,
    },
    Failed {
        stage: Stage,
        message: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeResult {
    pub name: String,
    /// The op types of the model's nodes.
    pub ops: Vec<String>,
    #[serde(flatten)]
    pub outcome: NodeOutcome,
    pub seconds: f64,
}

/// The tests under `dir` (each subfolder with a `model.onnx`), by name.
pub fn discover(dir: &Path) -> Result<Vec<NodeTest>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut tests = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.join("model.onnx").is_file() {
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            tests.push(NodeTest { name, dir: path });
        }
    }
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    if tests.is_empty() {
        return Err(format!(
            "{} holds no test folders with a model.onnx (write them with scripts/onnx-node-tests.sh)",
            dir.display()
        ));
    }
    Ok(tests)
}

/// One data set: inputs by graph input name, expected outputs by graph output name.
struct DataSet {
    inputs: Vec<(String, HostTensor<'static>)>,
    outputs: Vec<(String, HostTensor<'static>)>,
}

/// Why a test cannot even be tried.
enum Refusal {
    Unsupported(String),
    Failed(Stage, String),
}

impl From<Refusal> for NodeOutcome {
    fn from(r: Refusal) -> NodeOutcome {
        match r {
            Refusal::Unsupported(reason) => NodeOutcome::Unsupported { reason },
            Refusal::Failed(stage, message) => NodeOutcome::Failed { stage, message },
        }
    }
}

/// Rtol and atol: ONNX's runner's defaults unless `case.json` gives others.
fn tolerances(dir: &Path) -> (f64, f64) {
    let mut tol = (1e-3, 1e-7);
    if let Ok(text) = std::fs::read_to_string(dir.join("case.json")) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            tol.0 = v["rtol"].as_f64().unwrap_or(tol.0);
            tol.1 = v["atol"].as_f64().unwrap_or(tol.1);
        }
    }
    tol
}

fn op_types(model: &Model) -> Vec<String> {
    let mut ops: Vec<String> = model
        .graph()
        .node
        .iter()
        .map(|n| n.op_type().to_string())
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

/// Reads the model and its data sets; non-tensor inputs and outputs are unsupported.
fn load(test: &NodeTest) -> Result<(Model, Vec<DataSet>), Refusal> {
    let model = Model::read(&test.dir.join("model.onnx"))
        .map_err(|e| Refusal::Failed(Stage::Import, e.to_string()))?;
    let graph = model.graph();
    let tensor_typed = |v: &tir_onnx::proto::ValueInfoProto| {
        matches!(
            v.r#type.as_ref().and_then(|t| t.value.as_ref()),
            Some(tir_onnx::proto::type_proto::Value::TensorType(_))
        )
    };
    if let Some(v) = graph
        .input
        .iter()
        .chain(&graph.output)
        .find(|v| !tensor_typed(v))
    {
        return Err(Refusal::Unsupported(format!(
            "`{}` is not a tensor (sequence, map and optional values are not supported)",
            v.name()
        )));
    }
    let input_names: Vec<String> = graph
        .input
        .iter()
        .filter(|i| !graph.initializer.iter().any(|t| t.name() == i.name()))
        .map(|i| i.name().to_string())
        .collect();
    let output_names: Vec<String> = graph.output.iter().map(|o| o.name().to_string()).collect();
    let mut sets = Vec::new();
    for n in 0.. {
        let dir = test.dir.join(format!("test_data_set_{n}"));
        if !dir.is_dir() {
            break;
        }
        let read =
            |kind: &str, names: &[String]| -> Result<Vec<(String, HostTensor<'static>)>, Refusal> {
                let mut out = Vec::new();
                for (k, name) in names.iter().enumerate() {
                    let path = dir.join(format!("{kind}_{k}.pb"));
                    let bytes = std::fs::read(&path).map_err(|e| {
                        Refusal::Failed(Stage::Import, format!("{}: {e}", path.display()))
                    })?;
                    let (_, t) = decode_tensor(&bytes)
                        .map_err(|e| Refusal::Unsupported(format!("{kind} `{name}`: {e}")))?;
                    out.push((name.clone(), t));
                }
                Ok(out)
            };
        sets.push(DataSet {
            inputs: read("input", &input_names)?,
            outputs: read("output", &output_names)?,
        });
    }
    if sets.is_empty() {
        return Err(Refusal::Failed(Stage::Import, "no test_data_set_0".into()));
    }
    Ok((model, sets))
}

/// Imports `model`, giving an input its first data set's value when the importer needs it known.
fn import(model: &Model, data: &DataSet) -> Result<Imported, Refusal> {
    let mut options = ImportOptions::default();
    loop {
        match tir_onnx::import(model, &options) {
            Ok(imported) => return Ok(imported),
            Err(OnnxError::Node { kind, .. }) if matches!(&*kind, NodeErrorKind::NeedsKnownInput(n) if !options.known_inputs.contains_key(n)) =>
            {
                let NodeErrorKind::NeedsKnownInput(name) = *kind else {
                    unreachable!("matched above")
                };
                let value = data.inputs.iter().find(|(n, _)| *n == name);
                let (_, value) = value.ok_or_else(|| {
                    Refusal::Failed(Stage::Import, format!("no test value for input `{name}`"))
                })?;
                options.known_inputs.insert(name, value.clone());
            }
            Err(e) if e.is_unsupported() => return Err(Refusal::Unsupported(e.to_string())),
            Err(e) => return Err(Refusal::Failed(Stage::Import, e.to_string())),
        }
    }
}

/// Runs `test` on `backend`. Never panics.
pub fn run_node_test(backend: &dyn Backend, test: &NodeTest) -> NodeResult {
    guarded(test, |ops| execute(backend, test, ops))
}

/// `body`'s outcome for `test`, a panic in it a failure, timed.
fn guarded(test: &NodeTest, body: impl FnOnce(&mut Vec<String>) -> NodeOutcome) -> NodeResult {
    let start = Instant::now();
    let mut ops = Vec::new();
    let outcome = catch_unwind(AssertUnwindSafe(|| body(&mut ops))).unwrap_or_else(|payload| {
        NodeOutcome::Failed {
            stage: Stage::Panic,
            message: panic_message(payload.as_ref()),
        }
    });
    NodeResult {
        name: test.name.clone(),
        ops,
        outcome,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// The test's model imported and lowered for `target`, with its data sets; `ops` gets the model's
/// op types.
fn prepare(
    test: &NodeTest,
    target: &Target,
    ops: &mut Vec<String>,
) -> Result<(Imported, tir_lower::Compiled, Vec<DataSet>), NodeOutcome> {
    let (model, sets) = load(test)?;
    *ops = op_types(&model);
    let imported = import(&model, &sets[0])?;
    let compiled = compile_graph(&imported.graph, target, &Limits::default())
        .map_err(|e| failed(Stage::Lower, e.to_string()))?;
    Ok((imported, compiled, sets))
}

fn execute(backend: &dyn Backend, test: &NodeTest, ops: &mut Vec<String>) -> NodeOutcome {
    let (imported, compiled, sets) = match prepare(test, &backend.target(), ops) {
        Ok(p) => p,
        Err(outcome) => return outcome,
    };
    let mut exe = match backend.compile(&compiled.program) {
        Ok(exe) => exe,
        Err(e) => return failed(Stage::Compile, e.to_string()),
    };
    for (name, value) in &imported.weights {
        if let Err(e) = exe.set_parameter(name, TensorRef::Host(value)) {
            return failed(Stage::Run, e.to_string());
        }
    }
    let graph_inputs: Vec<String> = imported
        .graph
        .node_ids()
        .filter_map(|id| match &imported.graph.node(id).op {
            Op::Input { name } => Some(name.clone()),
            _ => None,
        })
        .collect();
    let (rtol, atol) = tolerances(&test.dir);
    for (n, set) in sets.iter().enumerate() {
        let inputs: Vec<(&str, TensorRef<'_>)> = set
            .inputs
            .iter()
            .filter(|(name, _)| graph_inputs.contains(name))
            .map(|(name, t)| (name.as_str(), TensorRef::Host(t)))
            .collect();
        let got = match exe.run(&inputs) {
            Ok(g) => g,
            Err(e) => return failed(Stage::Run, format!("data set {n}: {e}")),
        };
        for (name, want) in &set.outputs {
            let Some(have) = got.get(name) else {
                return failed(Stage::Compare, format!("no output `{name}`"));
            };
            if let Err(why) = compare(have, want, rtol, atol) {
                return failed(
                    Stage::Compare,
                    format!("data set {n}, output `{name}`: {why}"),
                );
            }
        }
    }
    NodeOutcome::Passed
}

fn failed(stage: Stage, message: String) -> NodeOutcome {
    NodeOutcome::Failed { stage, message }
}

/// `have` matches `want`: dtype, dims, and every element within `atol + rtol·|want|` (exact for
/// integers and bools; NaN only where NaN is expected, infinities exactly).
pub fn compare(
    have: &HostTensor<'_>,
    want: &HostTensor<'_>,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    if have.dtype() != want.dtype() || have.dims() != want.dims() {
        return Err(format!(
            "got {}, expected {}",
            have.type_name(),
            want.type_name()
        ));
    }
    let exact = !want.dtype().is_float();
    // A 16-bit float output may be two ulps off (2^-9 relative is two f16 ulps anywhere in a
    // binade; 2^-6 is ONNX's runner's own bound for bf16): the expected value and tir's may each
    // be an ulp off the exact one, because ONNX's reference computes multi-step ops (attention,
    // norms) in the 16-bit dtype and an `_expanded` test's graph rounds each of its steps.
    let rtol = match want.dtype() {
        DType::F16 => rtol.max(2f64.powi(-9)),
        DType::BF16 => rtol.max(2f64.powi(-6)),
        _ => rtol,
    };
    for i in 0..want.numel() {
        let (h, w) = (
            have.element_f64(i).expect("in range"),
            want.element_f64(i).expect("in range"),
        );
        let ok = if w.is_nan() {
            h.is_nan()
        } else if exact || w.is_infinite() {
            h == w
        } else {
            (h - w).abs() <= atol + rtol * w.abs()
        };
        if !ok {
            return Err(format!("element {i}: got {h:e}, expected {w:e}"));
        }
    }
    Ok(())
}

/// Imports `test` and compiles its kernels for `archs` (CUDA, no GPU needed).
pub fn compile_node_test(
    compiler: &backend_cuda::KernelCompiler,
    target: &Target,
    test: &NodeTest,
    archs: &[String],
) -> NodeResult {
    guarded(test, |ops| match prepare(test, target, ops) {
        Ok((_, compiled, _)) => match compiler.compile(&compiled.program, archs) {
            Ok(_) => NodeOutcome::Passed,
            Err(e) => failed(Stage::Compile, e.to_string()),
        },
        Err(outcome) => outcome,
    })
}

/// Counts of passed, unsupported and failed tests, overall and per op type.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeSummary {
    pub passed: usize,
    pub unsupported: usize,
    pub failed: usize,
    /// Per op type (over the tests whose model uses it): passed, unsupported, failed.
    pub by_op: BTreeMap<String, [usize; 3]>,
}

impl NodeSummary {
    pub fn of(results: &[NodeResult]) -> NodeSummary {
        let mut s = NodeSummary::default();
        for r in results {
            let slot = match r.outcome {
                NodeOutcome::Passed => 0,
                NodeOutcome::Unsupported { .. } => 1,
                NodeOutcome::Failed { .. } => 2,
            };
            *[&mut s.passed, &mut s.unsupported, &mut s.failed][slot] += 1;
            for op in &r.ops {
                s.by_op.entry(op.clone()).or_default()[slot] += 1;
            }
        }
        s
    }
}

impl std::fmt::Display for NodeSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} unsupported",
            self.passed, self.failed, self.unsupported
        )
    }
}
