//! The CUDA backend's mesh, as far as a machine without GPUs (or NCCL) can see it: what it
//! refuses, each in one line, before any GPU is touched. Runs on GPUs are the conformance
//! corpus's sharded cases (`tir-conform --backend cuda --filter '*sharded*'`, in sync and
//! graph mode).

use backend_cuda::{CudaBackend, ExecMode};
use std::collections::BTreeMap;
use tir_graph::collective::Sharding;
use tir_graph::op::ReduceOp;
use tir_graph::{shape, DType, Graph, GraphBuilder, Op, TensorType};
use tir_lower::mesh::{compile_sharded, MeshSpec};
use tir_lower::{compile_graph, Backend, BackendError, Program};
use tir_opt::Limits;

/// `y = sum(x, axis 1)` with `x` split along axis 1 over `world` devices: one all-reduce.
fn summed(dtype: DType, world: u32) -> Program {
    let g = GraphBuilder::new();
    let x = g.input("x", dtype, shape![4, 6]).unwrap();
    let y = x.sum(&[1], false).unwrap();
    g.output("y", &y).unwrap();
    let graph = g.finish().unwrap();
    let mesh = MeshSpec {
        world,
        shardings: BTreeMap::from([("x".to_string(), Sharding::Split(1))]),
        tensor_parallel: false,
    };
    let target = CudaBackend::new().target();
    compile_sharded(&graph, &mesh, &target, &Limits::default())
        .unwrap()
        .compiled
        .program
}

/// Each device's program for a graph that holds an `all_reduce_sum` of `dtype` as written
/// (sharding would widen one NCCL has no type for).
fn all_reduced(dtype: DType, world: u32) -> Program {
    let mut graph = Graph::new();
    let ty = TensorType::new(dtype, shape![4, 6]);
    let x = graph
        .add_node(Op::Input { name: "x".into() }, &[], Some(ty))
        .unwrap();
    let op = Op::AllReduce {
        op: ReduceOp::Sum,
        world,
    };
    let y = graph.add_node(op, &[x], None).unwrap();
    graph.add_output("y", y).unwrap();
    let target = CudaBackend::new().target();
    compile_graph(&graph, &target, &Limits::default())
        .unwrap()
        .program
}

fn refusal(result: Result<impl Sized, BackendError>) -> String {
    match result {
        Ok(_) => panic!("the mesh was compiled"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_mesh_in_graph_mode_is_refused_only_for_what_refuses_it_in_sync_mode() {
    // Graph mode captures each device's run (`runtime::mesh`): it adds no refusal of its own.
    for (program, world) in [(summed(DType::F32, 2), 3), (all_reduced(DType::I16, 2), 2)] {
        let graph =
            refusal(CudaBackend::with_mode(ExecMode::Graph).compile_cuda_mesh(&program, world));
        let sync =
            refusal(CudaBackend::with_mode(ExecMode::Sync).compile_cuda_mesh(&program, world));
        assert_eq!(graph, sync);
        assert!(!graph.contains("sync mode only"), "{graph}");
    }
}

#[test]
fn a_collective_nccl_cannot_reduce_is_refused_naming_its_kernel() {
    let program = all_reduced(DType::I16, 2);
    let kernel = program
        .kernels
        .iter()
        .find(|k| k.collective().is_some())
        .unwrap()
        .name
        .clone();
    let why = refusal(CudaBackend::new().compile_cuda_mesh(&program, 2));
    assert!(why.contains(&format!("kernel {kernel}")), "{why}");
    assert!(why.contains("NCCL cannot all-reduce i16"), "{why}");
}

#[test]
fn a_mesh_of_another_size_than_the_collectives_is_refused() {
    let why = refusal(CudaBackend::new().compile_cuda_mesh(&summed(DType::F32, 2), 3));
    assert!(why.contains("over 2 devices, but the mesh has 3"), "{why}");
}

#[test]
fn a_mesh_needs_as_many_gpus_and_a_single_gpu_compile_still_refuses_collectives() {
    let backend = CudaBackend::new();
    let gpus = backend.gpu_count();
    assert_eq!(backend.capabilities().devices, gpus.max(1));
    let program = summed(DType::F32, 2);
    if gpus < 2 {
        let why = refusal(backend.compile_cuda_mesh(&program, 2));
        assert!(
            why.contains(&format!("a mesh of 2 GPUs, but this machine has {gpus}")),
            "{why}"
        );
    }
    let why = refusal(backend.compile_cuda(&program));
    assert!(why.contains("is a collective"), "{why}");
}
