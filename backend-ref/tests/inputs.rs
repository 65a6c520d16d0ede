//! Inputs and parameters that do not fit the signature are refused with a one-line `BadInput`
//! naming the tensor, the expected and the supplied types.

mod common;

use backend_ref::RefBackend;
use common::{random, sources, KernelBuilder, ProgramBuilder};
use tir_graph::{shape, DType, HostTensor, TensorType};
use tir_lower::testing::RunF64;
use tir_lower::tile::Region;
use tir_lower::{Backend, BackendError, Capabilities, Program, TensorRef};

/// `z = x` (a copy) with `x: f16[batch, 64]`, and an unused parameter `w: f16[batch]`.
fn copy() -> Program {
    let mut p = ProgramBuilder::new();
    let x = p.input("x", TensorType::new(DType::F16, shape!["batch", 64]));
    p.parameter("w", TensorType::new(DType::F16, shape!["batch"]));
    let z = p.output("z", TensorType::new(DType::F16, shape!["batch", 64]));
    let mut k = KernelBuilder::new("k0_copy");
    let px = k.shared(x, DType::F16);
    let pz = k.mutable(z, DType::F16, Region::Whole);
    k.grid(|k| vec![k.dim("batch")]);
    let (i, zero) = (k.pid(0), k.index(0));
    let (b, w) = (k.dim("batch"), k.index(64));
    let (vx, vz) = (k.row_major_view(px, &[b, w]), k.row_major_view(pz, &[b, w]));
    let v = k.load(vx, &[i, zero], 0.0, DType::F16, &[1, 64]);
    let t = k.token();
    k.store(vz, &[i, zero], v, t);
    p.kernel(k.finish(), vec![]);
    p.finish()
}

/// A random host tensor.
fn host(dtype: DType, dims: &[u64], seed: u64) -> HostTensor<'static> {
    HostTensor::random(dtype, dims, seed, 1.0).unwrap()
}

/// The one-line `BadInput` message of `result`.
fn bad_input<T: std::fmt::Debug>(result: Result<T, BackendError>) -> String {
    match result {
        Err(BackendError::BadInput(message)) => {
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
        other => panic!("expected BadInput, got {other:?}"),
    }
}

/// The message of running `copy()` with parameter `w` set to `w` (if given) and `inputs`.
fn refused(w: Option<&HostTensor>, inputs: &[(&str, &HostTensor)]) -> String {
    let mut exe = RefBackend::new().compile(&copy()).unwrap();
    if let Some(w) = w {
        exe.set_parameter("w", w.into()).unwrap();
    }
    let inputs: Vec<(&str, TensorRef)> = inputs.iter().map(|(n, t)| (*n, (*t).into())).collect();
    bad_input(exe.run(&inputs))
}

#[test]
fn good_inputs_run_and_parameters_stay_set() {
    let mut exe = RefBackend::new().compile(&copy()).unwrap();
    exe.set_parameter("w", (&host(DType::F16, &[3], 2)).into())
        .unwrap();
    for seed in 0..2 {
        let x = host(DType::F16, &[3, 64], seed);
        let out = exe.run(&[("x", (&x).into())]).unwrap();
        assert_eq!(out["z"], x);
    }
    let old = exe.run_f64(&sources(vec![
        ("x", random(DType::F16, &[3, 64], 1)),
        ("w", random(DType::F16, &[3], 2)),
    ]));
    assert_eq!(old.unwrap().outputs["z"], random(DType::F16, &[3, 64], 1));
}

#[test]
fn missing_unknown_and_mistyped_inputs_are_refused() {
    let x = host(DType::F16, &[2, 64], 1);
    let w = host(DType::F16, &[2], 2);
    assert_eq!(
        refused(None, &[("x", &x)]),
        "parameter \"w\" is not set: expected f16[batch] (set it with set_parameter, \
         load_weights or tirc run --weights)"
    );
    assert_eq!(
        refused(Some(&w), &[]),
        "missing input \"x\": expected f16[batch, 64]"
    );
    assert_eq!(
        refused(Some(&w), &[("x", &x), ("y", &x)]),
        "unknown input \"y\": the program has no input of that name"
    );
    assert_eq!(
        refused(Some(&w), &[("x", &x), ("x", &x)]),
        "input \"x\" is given twice"
    );
    assert_eq!(
        refused(Some(&w), &[("x", &x), ("w", &w)]),
        "\"w\" is a parameter: set it once with set_parameter or load_weights, not at each run"
    );
    assert_eq!(
        refused(Some(&w), &[("x", &host(DType::F32, &[2, 64], 1))]),
        "input \"x\": expected f16[batch, 64], got f32[2, 64]"
    );
    assert_eq!(
        refused(Some(&w), &[("x", &host(DType::F16, &[2, 32], 1))]),
        "input \"x\": expected f16[batch, 64], got f16[2, 32]"
    );
    assert_eq!(
        refused(Some(&w), &[("x", &host(DType::F16, &[128], 1))]),
        "input \"x\": expected f16[batch, 64], got f16[128]"
    );
    assert_eq!(
        refused(Some(&host(DType::F16, &[3], 2)), &[("x", &x)]),
        "symbolic dim `batch` is 2 in input \"x\" but 3 in parameter \"w\""
    );
    let odd = "a\nb";
    assert_eq!(
        refused(Some(&w), &[("x", &x), (odd, &x)]),
        "unknown input \"a\\nb\": the program has no input of that name"
    );
}

#[test]
fn parameters_that_do_not_fit_are_refused_when_set() {
    let mut exe = RefBackend::new().compile(&copy()).unwrap();
    let w = host(DType::F16, &[2], 2);
    assert_eq!(
        bad_input(exe.set_parameter("w", (&host(DType::F32, &[2], 2)).into())),
        "parameter \"w\": expected f16[batch], got f32[2]"
    );
    assert_eq!(
        bad_input(exe.set_parameter("w", (&host(DType::F16, &[2, 2], 2)).into())),
        "parameter \"w\": expected f16[batch], got f16[2, 2]"
    );
    assert_eq!(
        bad_input(exe.set_parameter("x", (&w).into())),
        "\"x\" is an input, passed to each run, not a parameter"
    );
    assert_eq!(
        bad_input(exe.set_parameter("v", (&w).into())),
        "\"v\" is not a parameter of the program"
    );
}

#[test]
fn the_backend_describes_itself() {
    let backend = RefBackend::new();
    assert_eq!(backend.name(), "ref");
    assert!(!backend.is_checking() && RefBackend::checking().is_checking());
    assert_eq!(
        backend.capabilities(),
        Capabilities {
            dtypes: DType::ALL.to_vec(),
            symbolic_dims: true,
            persistent_state: true,
            // A mesh of any size, simulated.
            devices: u32::MAX,
            reduce_dtypes: DType::ALL.to_vec(),
        }
    );
    let tiles = backend.target().tiles;
    for t in [
        tiles.elementwise,
        tiles.row_elements,
        tiles.matmul_m,
        tiles.matmul_n,
        tiles.matmul_k,
        tiles.reduction_out,
        tiles.reduction_chunk,
    ] {
        assert!(t.is_power_of_two(), "{t}");
    }
    let mut registry = tir_lower::Registry::new();
    registry.register(Box::new(backend));
    assert!(registry.get("ref").is_some());
}
