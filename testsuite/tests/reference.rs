//! The runner on the reference backend: a subset of the corpus (one case per op of the IR and
//! per pattern and numerics kind; CI runs the whole corpus in release with `tir-conform`), with
//! host tensors and with device tensors,
//! skipping by capabilities, and backends that return wrong values failing as they should.

use backend_ref::RefBackend;
use std::collections::{BTreeMap, BTreeSet};
use testsuite::{corpus, registry, report, run_case, Case, Io, Outcome, Stage};
use tir_graph::{DType, HostTensor};
use tir_lower::{
    compile_graph, Backend, BackendError, Capabilities, Device, DeviceTensor, Executable,
    HostTensors, MeshExecutable, Program, Signature, Target, TensorRef,
};
use tir_opt::Limits;

/// The first case of the corpus containing each op, then the first of each pattern and
/// numerics kind (`group/kind/...`).
fn subset(cases: &[Case]) -> Vec<&Case> {
    let mut ops_seen = BTreeSet::new();
    let mut kinds_seen = BTreeSet::new();
    let mut picked = Vec::new();
    for case in cases {
        let new_op = case
            .graph
            .node_ids()
            .any(|id| ops_seen.insert(case.graph.node(id).op.name()));
        let kind: String = case.name.split('/').take(2).collect::<Vec<_>>().join("/");
        let new_kind = case.group() != "op" && kinds_seen.insert(kind);
        if new_op || new_kind {
            picked.push(case);
        }
    }
    picked
}

#[test]
fn one_case_per_op_and_kind_passes_on_the_reference() {
    let cases = corpus(0);
    let picked = subset(&cases);
    assert!(picked.len() >= 60, "{} cases picked", picked.len());
    let registry = registry();
    let backend = registry.get("ref").expect("the reference is registered");
    for io in [Io::Host, Io::Device] {
        let failures: Vec<String> = picked
            .iter()
            .map(|c| run_case(backend, c, io))
            .filter_map(|r| report::line(&r))
            .collect();
        assert!(failures.is_empty(), "{io:?}: {}", failures.join("\n"));
    }
}

fn case<'a>(cases: &'a [Case], name: &str) -> &'a Case {
    cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"))
}

/// The reference with fewer capabilities declared.
struct Limited(RefBackend);

impl Backend for Limited {
    fn name(&self) -> &'static str {
        "limited"
    }
    fn target(&self) -> Target {
        self.0.target()
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            dtypes: vec![DType::Bool, DType::I64, DType::F32],
            symbolic_dims: false,
            persistent_state: false,
            devices: 2,
            reduce_dtypes: vec![DType::F32],
        }
    }
    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError> {
        self.0.compile(program)
    }
    fn compile_mesh(
        &self,
        program: &Program,
        world: u32,
    ) -> Result<Box<dyn MeshExecutable>, BackendError> {
        self.0.compile_mesh(program, world)
    }
}

#[test]
fn cases_are_skipped_only_for_what_the_capabilities_lack() {
    let cases = corpus(0);
    let backend = Limited(RefBackend::checking());
    let outcome = |name: &str| run_case(&backend, case(&cases, name), Io::Host).outcome;
    assert_eq!(outcome("op/exp/f32/len1000"), Outcome::Passed);
    let skip = |name: &str| match outcome(name) {
        Outcome::Skipped { reason } => reason,
        other => panic!("{name}: {other:?}"),
    };
    assert!(skip("op/exp/f16/len1000").contains("dtype f16"));
    assert!(skip("op/exp/f32/symbolic").contains("symbolic dims"));
    assert!(skip("op/state_assign/f32/three_runs").contains("persistent state"));
    // Meshes up to its size, collectives of the dtypes it reduces.
    assert_eq!(
        outcome("op/all_reduce_sum/f32/4x6_split1_tp2"),
        Outcome::Passed
    );
    assert!(skip("op/all_reduce_sum/i64/4x6_split1_tp2").contains("collectives reducing i64"));
    assert!(
        skip("pattern/sharded/gathered/f32/slice_mean_softmax_tp3").contains("a mesh of 3 devices")
    );
    let both = skip("pattern/attention/f16/symbolic_batch");
    assert!(
        both.contains("dtype f16") && both.contains("symbolic dims"),
        "{both}"
    );
    // The full reference skips nothing.
    let full = RefBackend::checking();
    for c in &cases {
        assert_eq!(c.skip_reason(&full.capabilities()), None, "{}", c.name);
    }
}

/// How a broken backend breaks its outputs.
#[derive(Clone, Copy)]
enum Breakage {
    /// The first element of every output becomes NaN (as if never written).
    Unwritten,
    /// Every float output is scaled by 1 + 1e-3.
    Inaccurate,
    /// Every output is dropped.
    Missing,
    /// The run panics.
    Panics,
}

struct Broken(RefBackend, Breakage);

struct BrokenExecutable(Box<dyn Executable>, Breakage);

impl Backend for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn target(&self) -> Target {
        self.0.target()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError> {
        Ok(Box::new(BrokenExecutable(self.0.compile(program)?, self.1)))
    }
}

impl BrokenExecutable {
    fn break_value(&self, t: HostTensor<'static>) -> HostTensor<'static> {
        let mut v = t.to_f64();
        match self.1 {
            Breakage::Unwritten => v.data[0] = f64::NAN,
            Breakage::Inaccurate => {
                for x in &mut v.data {
                    *x = v.dtype.round_value(*x * (1.0 + 1e-3));
                }
            }
            Breakage::Missing | Breakage::Panics => {}
        }
        HostTensor::from_f64_rounded(&v).unwrap()
    }
}

impl Executable for BrokenExecutable {
    fn signature(&self) -> &Signature {
        self.0.signature()
    }

    fn device(&self) -> Device {
        self.0.device()
    }

    fn set_parameter(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), BackendError> {
        self.0.set_parameter(name, value)
    }

    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<HostTensors, BackendError> {
        let out = self.0.run(inputs)?;
        match self.1 {
            Breakage::Missing => Ok(BTreeMap::new()),
            Breakage::Panics => panic!("the device fell over"),
            _ => Ok(out
                .into_iter()
                .map(|(n, t)| (n, self.break_value(t)))
                .collect()),
        }
    }

    fn run_on_device(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError> {
        self.0.run_on_device(inputs)
    }

    fn to_device(&mut self, tensor: &HostTensor<'_>) -> Result<DeviceTensor, BackendError> {
        self.0.to_device(tensor)
    }

    fn alloc_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, BackendError> {
        self.0.alloc_host(dtype, dims)
    }

    fn states(&self) -> Result<HostTensors, BackendError> {
        self.0.states()
    }
}

#[test]
fn wrong_values_never_pass() {
    let cases = corpus(0);
    let add = case(&cases, "op/add/f32/len1000");
    let run = |b: Breakage| run_case(&Broken(RefBackend::checking(), b), add, Io::Host);

    let r = run(Breakage::Unwritten);
    let Outcome::Failed { stage, message } = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(*stage, Stage::Compare);
    assert!(
        message.contains("unexpected NaN") && message.contains("[0]"),
        "{message}"
    );
    assert_eq!(r.checks[0].first_bad.as_ref().map(|m| m.index), Some(0));

    let r = run(Breakage::Inaccurate);
    assert!(
        matches!(&r.outcome, Outcome::Failed { message, .. } if message.contains("outside tolerance")),
        "{:?}",
        r.outcome
    );
    assert!(r.checks[0].max_rel > 5e-4 && r.checks[0].max_rel < 2e-3);

    let r = run(Breakage::Missing);
    assert!(
        matches!(&r.outcome, Outcome::Failed { message, .. } if message.contains("no output `y`")),
        "{:?}",
        r.outcome
    );

    let r = run(Breakage::Panics);
    assert!(
        matches!(&r.outcome, Outcome::Failed { stage: Stage::Panic, message } if message.contains("fell over")),
        "{:?}",
        r.outcome
    );

    // An integer output off by one fails whatever the class.
    let wrapped = case(&cases, "numerics/int_wrap/i8/add");
    let r = run_case(
        &Broken(RefBackend::checking(), Breakage::Inaccurate),
        wrapped,
        Io::Host,
    );
    assert!(
        r.passed(),
        "scaling by 1 + 1e-3 rounds back to the same i8 values"
    );
    let r = run_case(
        &Broken(RefBackend::checking(), Breakage::Unwritten),
        wrapped,
        Io::Host,
    );
    assert!(r.failed());
}

#[test]
fn plan_reuse_cases_share_arena_bytes() {
    let cases = corpus(0);
    let backend = RefBackend::checking();
    let reuse: Vec<&Case> = cases
        .iter()
        .filter(|c| c.name.starts_with("pattern/plan_reuse/"))
        .collect();
    assert!(reuse.len() >= 3);
    for case in reuse {
        let compiled = compile_graph(&case.graph, &backend.target(), &Limits::default())
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let program = &compiled.program;
        let dims = tir_graph::eval::bind_dims(&case.graph, &case.runs[0]).unwrap();
        let layout = program.plan.layout(&program.buffers, &dims).unwrap();
        let total: u64 = program
            .plan
            .live
            .iter()
            .map(|r| tir_lower::plan::buffer_bytes(&program.buffers[r.buffer], &dims).unwrap())
            .sum();
        assert!(
            layout.size < total,
            "{}: arena of {} bytes holds {} bytes of buffers without reuse",
            case.name,
            layout.size,
            total
        );
    }
}

#[test]
fn the_json_record_has_every_case_and_check() {
    let cases = corpus(3);
    let chosen: Vec<&Case> = ["op/exp/f16/symbolic", "numerics/special/div/f32"]
        .iter()
        .map(|n| case(&cases, n))
        .collect();
    let backend = RefBackend::checking();
    let results: Vec<_> = chosen
        .iter()
        .map(|c| run_case(&backend, c, Io::Host))
        .collect();
    let json = report::json("ref", 3, Some("x"), &chosen, &results, 1.5);
    assert_eq!(json["backend"], "ref");
    assert_eq!(json["seed"], 3);
    assert_eq!(json["summary"]["passed"], 2);
    let first = &json["cases"][0];
    assert_eq!(first["name"], "op/exp/f16/symbolic");
    assert_eq!(first["group"], "op");
    assert_eq!(first["outcome"], "passed");
    assert_eq!(first["tolerance"]["class"], "transcendental");
    assert_eq!(first["runs"], 3);
    assert_eq!(first["checks"].as_array().map(Vec::len), Some(3));
    assert!(first["needs"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("symbolic dims")));
    assert_eq!(first["checks"][0]["dtype"], "f16");
    // Expected NaN and infinities are written as strings, the JSON stays valid.
    let text = serde_json::to_string(&json).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok());
}
