//! Sources that do not fit the signature are refused with a one-line `BadInput` naming the
//! tensor, the expected and the supplied types.

mod common;

use backend_ref::RefBackend;
use common::{random, sources, tensor, KernelBuilder, ProgramBuilder};
use tir_graph::eval::HostTensor;
use tir_graph::{shape, DType, TensorType};
use tir_lower::tile::Region;
use tir_lower::{Backend, BackendError, Capabilities, Program};

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

fn bad_input(items: Vec<(&str, HostTensor)>) -> String {
    let mut exe = RefBackend::new().compile(&copy()).unwrap();
    match exe.run(&sources(items)) {
        Err(BackendError::BadInput(message)) => {
            assert!(!message.contains('\n'), "one line: {message}");
            message
        }
        other => panic!("expected BadInput, got {other:?}"),
    }
}

#[test]
fn good_sources_run() {
    let mut exe = RefBackend::new().compile(&copy()).unwrap();
    let x = random(DType::F16, &[3, 64], 1);
    let out = exe
        .run(&sources(vec![
            ("x", x.clone()),
            ("w", random(DType::F16, &[3], 2)),
        ]))
        .unwrap();
    assert_eq!(out.outputs["z"], x);
}

#[test]
fn missing_unknown_and_mistyped_sources_are_refused() {
    let x = || random(DType::F16, &[2, 64], 1);
    let w = || random(DType::F16, &[2], 2);
    assert_eq!(
        bad_input(vec![("x", x())]),
        "missing parameter \"w\": expected f16[batch]"
    );
    assert_eq!(
        bad_input(vec![("w", w())]),
        "missing input \"x\": expected f16[batch, 64]"
    );
    assert_eq!(
        bad_input(vec![("x", x()), ("w", w()), ("y", x())]),
        "unknown tensor \"y\": the program has no input or parameter of that name"
    );
    assert_eq!(
        bad_input(vec![("x", random(DType::F32, &[2, 64], 1)), ("w", w())]),
        "input \"x\": expected f16[batch, 64], got f32[2, 64]"
    );
    assert_eq!(
        bad_input(vec![("x", random(DType::F16, &[2, 32], 1)), ("w", w())]),
        "input \"x\": expected f16[batch, 64], got f16[2, 32]"
    );
    assert_eq!(
        bad_input(vec![("x", random(DType::F16, &[128], 1)), ("w", w())]),
        "input \"x\": expected f16[batch, 64], got f16[128]"
    );
    assert_eq!(
        bad_input(vec![("x", x()), ("w", random(DType::F16, &[3], 2))]),
        "symbolic dim `batch` is 2 in input \"x\" but 3 in parameter \"w\""
    );
}

#[test]
fn malformed_tensors_are_refused() {
    let w = random(DType::F16, &[2], 2);
    let short = HostTensor {
        dtype: DType::F16,
        dims: vec![2, 64],
        data: vec![0.0; 100],
    };
    assert_eq!(
        bad_input(vec![("x", short), ("w", w.clone())]),
        "input \"x\": f16[2, 64] needs 128 values, got 100"
    );
    let mut inexact = random(DType::F16, &[2, 64], 1);
    inexact.data[5] = 0.1;
    assert_eq!(
        bad_input(vec![("x", inexact), ("w", w)]),
        "input \"x\": element 5 (0.1) is not an exact f16 value"
    );
    let odd = "a\nb";
    let message = bad_input(vec![(odd, tensor(DType::F16, &[1], vec![1.0]))]);
    assert_eq!(
        message,
        "unknown tensor \"a\\nb\": the program has no input or parameter of that name"
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
