//! Sharded graphs on a mesh of reference devices against the oracle on the whole graph: the
//! whole tensors go in and come out ([`ShardedExecutable`]), each device runs its shard, and
//! collectives combine them.

use backend_ref::RefBackend;
use std::collections::BTreeMap;
use tir_graph::collective::Sharding;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::models::{self, DecoderConfig};
use tir_graph::{DType, Graph};
use tir_lower::mesh::{compile_sharded, MeshSpec, ShardedCompiled, ShardedExecutable};
use tir_lower::testing::RunF64;
use tir_lower::{Backend, Executable};
use tir_opt::Limits;

fn random_sources(graph: &Graph, fixed: &[(&str, F64Tensor)]) -> BTreeMap<String, F64Tensor> {
    let mut out: BTreeMap<String, F64Tensor> = graph
        .inputs()
        .into_iter()
        .chain(graph.parameters())
        .enumerate()
        .map(|(i, (name, id))| {
            let ty = graph.ty(id);
            let dims = ty.shape.static_dims().unwrap();
            let mut t = F64Tensor::random(ty.dtype, dims, 11 + i as u64);
            // Scaled down so that f16 models stay well conditioned.
            if ty.dtype.is_float() {
                t.data
                    .iter_mut()
                    .for_each(|v| *v = ty.dtype.round_value(*v * 0.25));
            }
            (name, t)
        })
        .collect();
    for (name, t) in fixed {
        out.insert(name.to_string(), t.clone());
    }
    out
}

fn assert_close(got: &F64Tensor, want: &F64Tensor, what: &str) {
    assert_eq!((got.dtype, &got.dims), (want.dtype, &want.dims), "{what}");
    let tol = match got.dtype {
        DType::F16 | DType::BF16 => 2e-2,
        DType::F32 => 1e-4,
        _ => 0.0,
    };
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        assert!(
            !g.is_nan() && (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, oracle {w}"
        );
    }
}

fn compile(
    graph: &Graph,
    world: u32,
    shardings: &[(&str, usize)],
    tensor_parallel: bool,
) -> (ShardedCompiled, ShardedExecutable) {
    let backend = RefBackend::checking();
    let mesh = MeshSpec {
        world,
        shardings: shardings
            .iter()
            .map(|(n, a)| (n.to_string(), Sharding::Split(*a)))
            .collect(),
        tensor_parallel,
    };
    let sharded = compile_sharded(graph, &mesh, &backend.target(), &Limits::default()).unwrap();
    let mesh = backend
        .compile_mesh(&sharded.compiled.program, world)
        .unwrap();
    let exe = ShardedExecutable::new(mesh, &sharded);
    (sharded, exe)
}

fn fixed_batch(graph: Graph, batch: u64) -> Graph {
    graph
        .specialize(&BTreeMap::from([("batch".to_string(), batch)]))
        .unwrap()
}

#[test]
fn a_split_mlp_matches_the_oracle_on_2_3_and_4_devices() {
    for (world, hidden, ffn) in [(2, 16, 32), (3, 12, 24), (4, 16, 64)] {
        let graph = fixed_batch(models::mlp(hidden, ffn).unwrap(), 5);
        let (sharded, mut exe) = compile(&graph, world, &[("w1", 1)], false);
        let kinds: Vec<&str> = sharded
            .compiled
            .fused
            .kernels
            .iter()
            .map(|k| k.kind.name())
            .collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "collective").count(),
            1,
            "{kinds:?}"
        );
        let sources = random_sources(&graph, &[]);
        let got = exe.run_f64(&sources).unwrap();
        let want = evaluate(&graph, &sources).unwrap();
        assert_close(
            &got.outputs["y"],
            &want.outputs["y"],
            &format!("y on {world} devices"),
        );
    }
}

#[test]
fn a_tensor_parallel_decoder_keeps_its_kv_cache_split_across_steps() {
    let cfg = DecoderConfig {
        hidden: 32,
        heads: 4,
        context: 8,
        ffn: 48,
    };
    let graph = models::decoder(&cfg, 2).unwrap();
    let (sharded, mut exe) = compile(&graph, 2, &[], true);
    assert_eq!(sharded.plan.sharding("l1.v_cache"), Sharding::Split(1));
    let mut sources = random_sources(&graph, &[]);
    let target = RefBackend::new().target();
    let program = tir_lower::compile_graph(&graph, &target, &Limits::default())
        .unwrap()
        .program;
    let mut one_device = RefBackend::new().compile(&program).unwrap();
    // The oracle takes the states as sources; the executables keep their own.
    let mut states: BTreeMap<String, F64Tensor> = BTreeMap::new();
    for (step, pos) in [0.0, 1.0, 2.0].into_iter().enumerate() {
        let x = F64Tensor::random(DType::F16, vec![1, 1, 32], 100 + step as u64);
        sources.insert("x".into(), x);
        sources.insert(
            "pos".into(),
            F64Tensor::new(DType::I64, vec![], vec![pos]).unwrap(),
        );
        let mut oracle = sources.clone();
        oracle.extend(states.clone());
        let want = evaluate(&graph, &oracle).unwrap();
        let got = exe.run_f64(&sources).unwrap();
        let alone = one_device.run_f64(&sources).unwrap();
        assert_close(
            &alone.outputs["y"],
            &want.outputs["y"],
            &format!("one device, step {step}"),
        );
        assert_close(
            &got.outputs["y"],
            &want.outputs["y"],
            &format!("y at step {step}"),
        );
        let held = exe.states_f64();
        for (name, w) in &want.states {
            assert_close(&held[name], w, &format!("{name} after step {step}"));
            // The next step's oracle reads this one's states, in their dtype.
            let mut next = w.clone();
            next.data
                .iter_mut()
                .for_each(|v| *v = w.dtype.round_value(*v));
            states.insert(name.clone(), next);
        }
    }
}

#[test]
fn a_program_with_collectives_needs_its_mesh() {
    let graph = fixed_batch(models::mlp(16, 32).unwrap(), 2);
    let (sharded, _) = compile(&graph, 2, &[("w1", 1)], false);
    let program = &sharded.compiled.program;
    let one = RefBackend::new().compile(program).err().unwrap();
    assert!(
        one.to_string()
            .contains("is a collective: compile the program for a mesh"),
        "{one}"
    );
    let four = RefBackend::new().compile_mesh(program, 4).err().unwrap();
    assert!(
        four.to_string()
            .contains("a collective over 2 devices, but the mesh has 4"),
        "{four}"
    );
}

#[test]
fn whole_tensors_of_the_wrong_type_are_refused_by_name() {
    let graph = fixed_batch(models::mlp(16, 32).unwrap(), 2);
    let (_, mut exe) = compile(&graph, 2, &[("w1", 1)], false);
    let w = tir_graph::HostTensor::zeros(DType::F16, &[16, 30]).unwrap();
    let err = exe.set_parameter("w1", (&w).into()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a parameter \"w1\": expected f16[16, 32], got f16[16, 30]"
    );
}
