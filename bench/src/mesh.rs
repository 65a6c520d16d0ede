//! `tir-bench mesh`: tir on one GPU against tir at tensor-parallel N on N GPUs of this host, in
//! one process, and NCCL's all-reduce alone through tir.
//!
//! - `compile` (here, no GPU): fills the kernel cache with what `run` needs: each workload's
//!   program for one GPU and its program cut for one device of the mesh (Megatron's rule,
//!   `MeshSpec::tensor_parallel`), whose kernels differ (half the heads and columns at 2).
//! - `run` (on the GPU machine): for each workload, the 1-GPU executable and the mesh, each
//!   timed in sync and graph mode (`time_runs`: warm-up, then CUDA events around each run from
//!   a cold L2, medians; a mesh run's time is its slowest device's), the mesh's outputs against
//!   the 1-GPU outputs, and device memory held per GPU; for the decoder, several steps with the
//!   KV cache from zero compared step by step; then one all-reduce (fp16) of 8 KB to 1 GiB:
//!   latency and bus bandwidth. One JSON line per result, all of them in `DIR/tir-mesh.json`.
//!
//! The mesh runs sync mode first: a graph-mode failure (or a hang, aborted after
//! `TIR_MESH_TIMEOUT_S`) leaves the sync numbers standing and is reported as that workload's
//! `graph_error`.

use crate::workloads::Workload;
use crate::{matching, matmul_policy, median, tensors, write_json};
use backend_cuda::compile::Silent;
use backend_cuda::{CudaBackend, CudaMeshExecutable, ExecMode, Gpu};
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use tir_graph::collective::{ShardPlan, Sharding};
use tir_graph::{DType, Graph, HostTensor, Op, ReduceOp, Shape, TensorType};
use tir_lower::mesh::{compile_sharded, MeshSpec, ShardedCompiled};
use tir_lower::{
    compile_graph, Backend, Executable, HostTensors, MeshExecutable, Program, TensorRef,
};
use tir_opt::Limits;

/// The workloads compared, by name (`workloads.rs`).
const WORKLOADS: &str =
    "decode_32_layers_h4096_ctx2048|mlp_2048x4096x16384|attention_b4_h32_s2048_d128_causal";

/// The all-reduce's message sizes in bytes: 8 KB to 1 GiB by factors of 8.
const ALL_REDUCE_BYTES: [u64; 7] = [
    8 << 10,
    64 << 10,
    512 << 10,
    4 << 20,
    32 << 20,
    256 << 20,
    1 << 30,
];

/// Decode steps compared between one GPU and the mesh, from an empty KV cache.
const STEPS: u64 = 8;

/// `y = all_reduce_sum(x)` over `world` devices, `x` of `bytes` fp16 bytes: the program each
/// device runs (one collective kernel).
fn all_reduce(bytes: u64, world: u32) -> Result<Graph, String> {
    let mut g = Graph::new();
    let ty = TensorType::new(DType::F16, Shape::of(&[bytes / 2]));
    let x = g
        .add_node(Op::Input { name: "x".into() }, &[], Some(ty))
        .map_err(|e| e.to_string())?;
    let op = Op::AllReduce {
        op: ReduceOp::Sum,
        world,
    };
    let y = g.add_node(op, &[x], None).map_err(|e| e.to_string())?;
    g.add_output("y", y).map_err(|e| e.to_string())?;
    Ok(g)
}

/// The mesh `w` runs on: Megatron's rule for the weights; attention alone (no weights, so the
/// rule splits nothing) split by heads, as attention is inside a tensor-parallel layer.
fn mesh_spec(w: &Workload, world: u32) -> MeshSpec {
    let shardings = if w.name.starts_with("attention") {
        ["q", "k", "v"]
            .iter()
            .map(|n| (n.to_string(), Sharding::Split(1)))
            .collect()
    } else {
        BTreeMap::new()
    };
    MeshSpec {
        world,
        shardings,
        tensor_parallel: true,
    }
}

/// `w`'s graph with its dims bound.
fn specialized(w: &Workload) -> Result<Graph, String> {
    w.graph.specialize(&w.dims).map_err(|e| e.to_string())
}

fn backend(w: &Workload, mode: ExecMode) -> Result<CudaBackend, String> {
    Ok(CudaBackend::with_mode(mode).with_matmul(matmul_policy(w)?))
}

fn sharded(w: &Workload, world: u32, backend: &CudaBackend) -> Result<ShardedCompiled, String> {
    compile_sharded(
        &specialized(w)?,
        &mesh_spec(w, world),
        &backend.target(),
        &Limits::default(),
    )
    .map_err(|e| format!("{}: {e}", w.name))
}

/// Compiles the kernels of a mesh program (collectives have none) into the cache.
fn compile_mesh_program(
    backend: &CudaBackend,
    program: &Program,
    arch: &str,
) -> Result<(), String> {
    backend
        .compiler()
        .and_then(|c| c.compile_reporting(program, &[arch.to_string()], &Silent))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `tir-bench mesh --compile-only`: every kernel `run` needs, for `arch`.
pub fn compile(world: u32, arch: &str) -> Result<(), String> {
    for w in matching(Some(WORKLOADS))? {
        let backend = backend(&w, ExecMode::Graph)?;
        let one = compile_graph(&specialized(&w)?, &backend.target(), &Limits::default())
            .map_err(|e| e.to_string())?;
        backend
            .compile_for(&one.program, &[arch.to_string()])
            .map_err(|e| e.to_string())?;
        let mesh = sharded(&w, world, &backend)?;
        compile_mesh_program(&backend, &mesh.compiled.program, arch)?;
        println!(
            "{}: 1 GPU {} kernels, TP{world} {} kernels ({} collectives)",
            w.name,
            one.program.kernels.len(),
            mesh.compiled.program.kernels.len(),
            mesh.compiled
                .program
                .kernels
                .iter()
                .filter(|k| k.collective().is_some())
                .count()
        );
    }
    let backend = CudaBackend::new();
    for bytes in ALL_REDUCE_BYTES {
        let program = all_reduce_program(&backend, bytes, world)?;
        compile_mesh_program(&backend, &program, arch)?;
    }
    Ok(())
}

/// Device memory in use on each GPU, in bytes.
fn used(gpus: &[Rc<Gpu>]) -> Result<Vec<u64>, String> {
    gpus.iter()
        .map(|g| g.memory().map(|(free, total)| (total - free) as u64))
        .collect()
}

/// `t`'s shards over `plan`'s devices, by rank.
fn shard_all(
    plan: &ShardPlan,
    named: &[(String, HostTensor<'static>)],
) -> Result<Vec<Vec<(String, HostTensor<'static>)>>, String> {
    (0..plan.world)
        .map(|rank| {
            named
                .iter()
                .map(|(n, t)| Ok((n.clone(), plan.shard_host(n, t, rank)?)))
                .collect()
        })
        .collect()
}

fn refs<'a>(
    per_device: &'a [Vec<(String, HostTensor<'static>)>],
) -> Vec<Vec<(&'a str, TensorRef<'a>)>> {
    per_device
        .iter()
        .map(|d| d.iter().map(|(n, t)| (n.as_str(), t.into())).collect())
        .collect()
}

/// `‖got − want‖ / ‖want‖` over every output of `want` (NaN where one is missing or not
/// finite, so it never passes).
fn rel_error(got: &HostTensors, want: &HostTensors) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (name, w) in want {
        let Some(g) = got.get(name) else {
            return f64::NAN;
        };
        let (g, w) = (g.to_f64().data, w.to_f64().data);
        if g.len() != w.len() {
            return f64::NAN;
        }
        for (a, b) in g.iter().zip(&w) {
            num += (a - b) * (a - b);
            den += b * b;
        }
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The median of `exe`'s timed runs in `mode`, or the error.
fn timed<T>(run: impl FnOnce() -> Result<(Vec<f64>, T), String>) -> (serde_json::Value, Option<T>) {
    match run() {
        Ok((times, out)) => (serde_json::json!(median(&times)), Some(out)),
        Err(e) => (serde_json::json!({ "error": e }), None),
    }
}

/// The decoder's inputs at step `step`: a random token state and the position.
fn decode_inputs(step: u64) -> Result<Vec<(String, HostTensor<'static>)>, String> {
    let x = HostTensor::random(DType::F16, &[1, 1, 4096], 1000 + step, 1.0)
        .map_err(|e| e.to_string())?;
    let pos = HostTensor::from_f64(&tir_graph::eval::F64Tensor {
        dtype: DType::I64,
        dims: vec![],
        data: vec![step as f64],
    })
    .map_err(|e| e.to_string())?;
    Ok(vec![("x".into(), x), ("pos".into(), pos)])
}

/// One workload on one GPU and on the mesh (see the module doc).
fn run_workload(
    w: &Workload,
    world: u32,
    gpus: &[Rc<Gpu>],
    reps: usize,
) -> Result<serde_json::Value, String> {
    let decode = w.name.starts_with("decode");
    let before_one = used(gpus)?;
    let one_backend = backend(w, ExecMode::Graph)?;
    let compiled = compile_graph(&specialized(w)?, &one_backend.target(), &Limits::default())
        .map_err(|e| e.to_string())?;
    let mut one = one_backend
        .compile_cuda(&compiled.program)
        .map_err(|e| e.to_string())?;
    let t = tensors(w, &one)?;
    t.set_parameters(&mut one)?;
    // The decoder's steps from an empty cache first, while the states are zeros.
    let mut one_steps = Vec::new();
    if decode {
        for step in 0..STEPS {
            let inputs = decode_inputs(step)?;
            let r: Vec<(&str, TensorRef)> =
                inputs.iter().map(|(n, t)| (n.as_str(), t.into())).collect();
            one_steps.push(one.run(&r).map_err(|e| e.to_string())?);
        }
    }
    let inputs = t.inputs();
    one.set_mode(ExecMode::Sync);
    let (one_sync, _) = timed(|| one.time_runs(&inputs, 3, reps).map_err(|e| e.to_string()));
    one.set_mode(ExecMode::Graph);
    let (one_graph, one_out) = timed(|| one.time_runs(&inputs, 3, reps).map_err(|e| e.to_string()));
    let one_memory: Vec<i64> = used(gpus)?
        .iter()
        .zip(&before_one)
        .map(|(a, b)| *a as i64 - *b as i64)
        .collect();
    drop(one);

    let before_mesh = used(gpus)?;
    let mesh_backend = backend(w, ExecMode::Sync)?;
    let sharded = sharded(w, world, &mesh_backend)?;
    let collectives = sharded
        .compiled
        .program
        .kernels
        .iter()
        .filter(|k| k.collective().is_some())
        .count();
    let make_mesh = || -> Result<CudaMeshExecutable, String> {
        let mut mesh = mesh_backend
            .compile_cuda_mesh(&sharded.compiled.program, world)
            .map_err(|e| e.to_string())?;
        for (name, value) in &t.parameters {
            for rank in 0..world {
                let part = sharded.plan.shard_host(name, value, rank)?;
                mesh.set_parameter(rank as usize, name, (&part).into())
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(mesh)
    };
    let mut mesh = make_mesh()?;
    let mut step_errors = Vec::new();
    // The first half of the steps in sync mode, the rest replayed as graphs on the cache they
    // left: both modes against one GPU.
    for (step, want) in one_steps.iter().enumerate() {
        if step as u64 == STEPS / 2 {
            mesh.set_mode(ExecMode::Graph);
        }
        let inputs = decode_inputs(step as u64)?;
        let per_device = shard_all(&sharded.plan, &inputs)?;
        match mesh.run(&refs(&per_device)) {
            Ok(got) => step_errors.push(serde_json::json!(rel_error(&got[0], want))),
            Err(e) => {
                step_errors.push(serde_json::json!({ "error": e.to_string() }));
                // The communicators may have been aborted: a fresh mesh for the timings.
                drop(mesh);
                mesh = make_mesh()?;
                break;
            }
        }
    }
    mesh.set_mode(ExecMode::Sync);
    let per_device = shard_all(&sharded.plan, &t.inputs)?;
    let mesh_inputs = refs(&per_device);
    let (tp_sync, _) = timed(|| {
        mesh.time_runs(&mesh_inputs, 3, reps)
            .map_err(|e| e.to_string())
    });
    mesh.set_mode(ExecMode::Graph);
    let (tp_graph, tp_out) = timed(|| {
        mesh.time_runs(&mesh_inputs, 3, reps)
            .map_err(|e| e.to_string())
    });
    let mesh_memory: Vec<i64> = used(gpus)?
        .iter()
        .zip(&before_mesh)
        .map(|(a, b)| *a as i64 - *b as i64)
        .collect();
    let tp_error = match (&tp_out, &one_out) {
        (Some(tp), Some(one)) => rel_error(&tp[0], one),
        _ => f64::NAN,
    };
    Ok(serde_json::json!({
        "name": w.name,
        "devices": world,
        "collectives": collectives,
        "one_gpu_sync_ms": one_sync,
        "one_gpu_graph_ms": one_graph,
        "tp_sync_ms": tp_sync,
        "tp_graph_ms": tp_graph,
        "tp_vs_one_gpu_rel_error": tp_error,
        "decode_steps_rel_error": step_errors,
        "one_gpu_memory_bytes": one_memory,
        "tp_memory_bytes": mesh_memory,
        "reps": reps,
    }))
}

/// The program each device runs for the all-reduce of `bytes` alone over `world` devices.
fn all_reduce_program(backend: &CudaBackend, bytes: u64, world: u32) -> Result<Program, String> {
    let graph = all_reduce(bytes, world)?;
    compile_graph(&graph, &backend.target(), &Limits::default())
        .map(|compiled| compiled.program)
        .map_err(|e| e.to_string())
}

/// The all-reduce of `bytes` alone on the mesh, in sync and graph mode: median milliseconds,
/// bus bandwidth, and whether device 0's sum is right (every element against the f64 sum of
/// the two fp16 inputs, rounded to fp16, within one ulp).
fn run_all_reduce(bytes: u64, world: u32, reps: usize) -> Result<serde_json::Value, String> {
    let backend = CudaBackend::with_mode(ExecMode::Sync);
    let program = all_reduce_program(&backend, bytes, world)?;
    let mut mesh = backend
        .compile_cuda_mesh(&program, world)
        .map_err(|e| e.to_string())?;
    let n = bytes / 2;
    let per_device: Vec<Vec<(String, HostTensor<'static>)>> = (0..world)
        .map(|rank| {
            HostTensor::random(DType::F16, &[n], 77 + u64::from(rank), 1.0)
                .map(|t| vec![("x".to_string(), t)])
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let inputs = refs(&per_device);
    let (sync, _) = timed(|| mesh.time_runs(&inputs, 5, reps).map_err(|e| e.to_string()));
    mesh.set_mode(ExecMode::Graph);
    let (graph, out) = timed(|| mesh.time_runs(&inputs, 5, reps).map_err(|e| e.to_string()));
    let correct = out.map(|outs| summed_right(&per_device, &outs[0]));
    let busbw = |ms: &serde_json::Value| {
        ms.as_f64().map(|ms| {
            2.0 * f64::from(world - 1) / f64::from(world) * bytes as f64 / (ms * 1e-3) / 1e9
        })
    };
    Ok(serde_json::json!({
        "all_reduce_bytes": bytes,
        "devices": world,
        "sync_ms": sync,
        "graph_ms": graph,
        "sync_busbw_gbs": busbw(&sync),
        "graph_busbw_gbs": busbw(&graph),
        "graph_sum_right": correct,
    }))
}

/// Whether `out["y"]` is the sum of every device's `x` (at most 2^20 elements looked at, spread
/// over the tensor).
fn summed_right(inputs: &[Vec<(String, HostTensor<'static>)>], out: &HostTensors) -> bool {
    let Some(y) = out.get("y") else {
        return false;
    };
    let n = y.dims().iter().product::<u64>() as usize;
    let stride = (n / (1 << 20)).max(1);
    (0..n).step_by(stride).all(|i| {
        let want: f64 = inputs
            .iter()
            .map(|d| d[0].1.element_f64(i).unwrap_or(f64::NAN))
            .sum();
        let got = y.element_f64(i).unwrap_or(f64::NAN);
        let want = DType::F16.round_value(want);
        // One fp16 ulp at the value's magnitude: the sum may round once more in NCCL.
        (got - want).abs() <= want.abs() * 2f64.powi(-10) + 2f64.powi(-24)
    })
}

/// `tir-bench mesh --devices N`: see the module doc.
pub fn run(world: u32, out: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let gpus: Vec<Rc<Gpu>> = (0..world)
        .map(|o| Gpu::open(o).map_err(|e| format!("GPU {o}: {e}")))
        .collect::<Result<_, _>>()?;
    let mut results = Vec::new();
    for w in matching(Some(WORKLOADS))? {
        let reps = if w.name.starts_with("decode") { 30 } else { 10 };
        let r = run_workload(&w, world, &gpus, reps)
            .unwrap_or_else(|e| serde_json::json!({"name": w.name, "error": e}));
        println!("{r}");
        results.push(r);
    }
    for bytes in ALL_REDUCE_BYTES {
        let reps = if bytes >= 256 << 20 { 10 } else { 30 };
        let r = run_all_reduce(bytes, world, reps)
            .unwrap_or_else(|e| serde_json::json!({"all_reduce_bytes": bytes, "error": e}));
        println!("{r}");
        results.push(r);
    }
    write_json(
        &out.join("tir-mesh.json"),
        &serde_json::Value::Array(results),
    )
}
