//! `tir-bench`: tir's GPU benchmarks.
//!
//! ```text
//! tir-bench compile --out DIR   # here (no GPU): fill the kernel cache for every workload, and
//!                               # time compiling (cold and warm cache, the optimizer)
//! tir-bench run --out DIR       # on the GPU: time every workload with CUDA events
//! tir-bench profile --filter F   # on the GPU: time each kernel of the matching workloads alone
//! ```
//!
//! `run` binds each workload's inputs (deterministic random values), times the kernels alone
//! (`CudaExecutable::time_runs`: warm-up, then repetitions each after flushing the L2 cache) and
//! writes, per workload, its inputs and outputs as `.npy` files under `DIR/NAME/` and its times to
//! `DIR/tir.json`. `bench/peers.py` then times PyTorch on the same inputs, checks tir's outputs
//! against PyTorch's, and writes the table and `bench/RESULTS.md`. Errors are one line on stderr
//! and exit code 1.

mod workloads;

use backend_cuda::{CudaBackend, ExecMode, MatmulPolicy};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tir_graph::eval::{concrete_dims, HostTensor};
use tir_graph::{DType, Graph, Op};
use tir_lower::{compile_graph, Backend, Executable};
use tir_opt::Limits;
use workloads::{Bound, Workload};

#[derive(Parser)]
#[command(name = "tir-bench", about = "tir's GPU benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile every workload's kernels into the kernel cache and time compiling.
    Compile {
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Only workloads whose name contains this (and no compile-time measurements).
        #[arg(long)]
        filter: Option<String>,
    },
    /// Time every workload on the GPU.
    Run {
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Only workloads whose name contains this.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Time each kernel of the workloads whose name contains FILTER alone (one JSON line per
    /// kernel: how it ran, median milliseconds).
    Profile {
        #[arg(long)]
        filter: String,
    },
    /// Print the Tile IR (MLIR text) of each kernel of the workloads whose name contains FILTER.
    Mlir {
        #[arg(long)]
        filter: String,
        /// Also write each kernel's bytecode as DIR/WORKLOAD.KERNEL.tileirbc.
        #[arg(long, value_name = "DIR")]
        bytecode: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.command {
        Command::Compile { out, arch, filter } => compile(&out, &arch, filter.as_deref()),
        Command::Run { out, filter } => run(&out, filter.as_deref()),
        Command::Profile { filter } => profile(&filter),
        Command::Mlir { filter, bytecode } => print_mlir(&filter, bytecode.as_deref()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

/// Lowers and compiles `graph`'s kernels for `arch` with `backend`; returns the seconds taken.
fn compile_one(backend: &CudaBackend, graph: &Graph, arch: &str) -> Result<f64, String> {
    let start = Instant::now();
    let compiled =
        compile_graph(graph, &backend.target(), &Limits::default()).map_err(|e| e.to_string())?;
    backend
        .compile_for(&compiled.program, &[arch.to_string()])
        .map_err(|e| e.to_string())?;
    Ok(start.elapsed().as_secs_f64())
}

fn compile(out: &Path, arch: &str, filter: Option<&str>) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for w in matching(filter)? {
        let backend = CudaBackend::new().with_matmul(MatmulPolicy::parse(w.matmul)?);
        let seconds = compile_one(&backend, &w.graph, arch)?;
        println!("{:<40} compiled in {seconds:.2} s", w.name);
    }
    if filter.is_some() {
        return Ok(());
    }
    // Compile time of the decoder block: cold (an empty cache of its own) and warm (hits).
    let decoder = tir_graph::models::decoder_block(&tir_graph::models::DecoderConfig {
        hidden: 4096,
        heads: 32,
        context: 2048,
        ffn: 11008,
    })
    .map_err(|e| e.to_string())?;
    let cold_dir = out.join("cold-cache");
    let _ = std::fs::remove_dir_all(&cold_dir);
    std::env::set_var("TIR_CACHE_DIR", &cold_dir);
    let cold = compile_one(&CudaBackend::new(), &decoder, arch)?;
    let warm: Vec<f64> = (0..5)
        .map(|_| compile_one(&CudaBackend::new(), &decoder, arch))
        .collect::<Result<_, _>>()?;
    let _ = std::fs::remove_dir_all(&cold_dir);
    // The optimizer alone on a 10,000-node graph (a 134-layer transformer).
    let big = tir_graph::models::transformer(&tir_graph::models::TransformerConfig {
        layers: 134,
        seq: 128,
        hidden: 256,
        heads: 4,
        ffn: 1024,
    })
    .map_err(|e| e.to_string())?;
    let start = Instant::now();
    tir_opt::optimize(&big, &tir_opt::OptOptions::default()).map_err(|e| e.to_string())?;
    let optimize = start.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "decoder_cold_s": cold,
        "decoder_warm_s": median(&warm),
        "optimizer_nodes": big.node_ids().count(),
        "optimizer_s": optimize,
    });
    println!("{report}");
    write_json(&out.join("compile.json"), &report)
}

fn print_mlir(filter: &str, bytecode: Option<&Path>) -> Result<(), String> {
    let tuning = backend_cuda::tuning::Tuning::from_env()?;
    // The bytecode version comes from the toolchain, needed only when writing bytecode.
    let compiler = bytecode
        .map(|_| backend_cuda::KernelCompiler::from_env())
        .transpose()?;
    for w in matching(Some(filter))? {
        let target = backend_cuda::gpu_target(&MatmulPolicy::parse(w.matmul)?);
        let compiled =
            compile_graph(&w.graph, &target, &Limits::default()).map_err(|e| e.to_string())?;
        for kernel in &compiled.program.kernels {
            let hints = tuning.hints_for(&compiled.program, kernel);
            let generated =
                backend_cuda::codegen::generate(kernel, &hints).map_err(|e| e.to_string())?;
            println!("// {} kernel {}", w.name, kernel.name);
            println!("{}", generated.module.to_mlir_text());
            if let (Some(dir), Some(compiler)) = (bytecode, &compiler) {
                let (bytes, _) =
                    backend_cuda::compile::kernel_bytecode(kernel, &hints, compiler.stamp.bytecode)
                        .map_err(|e| e.to_string())?;
                let path = dir.join(format!("{}.{}.tileirbc", w.name, kernel.name));
                std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// The workloads whose name contains `filter` (all of them without one).
fn matching(filter: Option<&str>) -> Result<Vec<Workload>, String> {
    let mut all = workloads::all().map_err(|e| e.to_string())?;
    all.retain(|w| filter.is_none_or(|f| w.name.contains(f)));
    Ok(all)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The workload's inputs and parameters: deterministic random values times its scale, and
/// KV-cache positions in the middle of the cache.
fn sources(w: &Workload) -> Result<BTreeMap<String, HostTensor>, String> {
    let mut out = BTreeMap::new();
    for (i, id) in w.graph.node_ids().enumerate() {
        let name = match &w.graph.node(id).op {
            Op::Input { name } | Op::Parameter { name } => name.clone(),
            _ => continue,
        };
        let ty = w.graph.ty(id);
        let dims = concrete_dims(&ty.shape, &w.dims).map_err(|e| e.to_string())?;
        let mut t = HostTensor::random(ty.dtype, dims, i as u64);
        if ty.dtype == DType::I64 && t.data.len() == 1 {
            t.data[0] = 1000.0;
        } else if ty.dtype.is_float() {
            for v in &mut t.data {
                *v = ty.dtype.round_value(*v * w.scale);
            }
        }
        out.insert(name, t);
    }
    Ok(out)
}

fn write_npy(path: &Path, t: &HostTensor) -> Result<(), String> {
    let bytes = tirc::npy::encode(t).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(out: &Path, filter: Option<&str>) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut results = Vec::new();
    for w in matching(filter)? {
        let result =
            run_one(out, &w).unwrap_or_else(|e| serde_json::json!({"name": w.name, "error": e}));
        println!("{result}");
        results.push(result);
    }
    write_json(&out.join("tir.json"), &serde_json::Value::Array(results))
}

/// `w` compiled for this GPU in its mode and with its matmul policy.
fn executable(w: &Workload) -> Result<backend_cuda::CudaExecutable, String> {
    let mode = if w.graph_replay {
        ExecMode::Graph
    } else {
        ExecMode::Sync
    };
    let policy = MatmulPolicy::parse(w.matmul)?;
    let backend = CudaBackend::with_mode(mode).with_matmul(policy);
    let compiled = compile_graph(&w.graph, &backend.target(), &Limits::default())
        .map_err(|e| e.to_string())?;
    backend
        .compile_cuda(&compiled.program)
        .map_err(|e| e.to_string())
}

/// Prints one JSON line per kernel of each workload whose name contains `filter`.
fn profile(filter: &str) -> Result<(), String> {
    for w in matching(Some(filter))? {
        let mut exe = executable(&w)?;
        let kernels = exe
            .profile_kernels(&sources(&w)?, 10)
            .map_err(|e| format!("{}: {e}", w.name))?;
        for k in kernels {
            let line = serde_json::json!({
                "workload": w.name,
                "kernel": k.name,
                "how": k.how,
                "median_ms": median(&k.times_ms),
            });
            println!("{line}");
        }
    }
    Ok(())
}

fn run_one(out: &Path, w: &Workload) -> Result<serde_json::Value, String> {
    let mut exe = executable(w)?;
    let kernels = exe.program().kernels.len();
    let sources = sources(w)?;
    let reps = if matches!(w.bound, Bound::Compute { flops } if flops > 1e12) {
        10
    } else {
        30
    };
    let (times, outputs) = exe
        .time_runs(&sources, 3, reps)
        .map_err(|e| e.to_string())?;
    let dir = out.join(&w.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if w.peer {
        for (name, t) in &sources {
            write_npy(&dir.join(format!("in_{name}.npy")), t)?;
        }
        for (name, t) in &outputs.outputs {
            write_npy(&dir.join(format!("out_{name}.npy")), t)?;
        }
    }
    let finite = outputs
        .outputs
        .values()
        .all(|t| t.data.iter().all(|v| v.is_finite()));
    let _ = exe.states();
    Ok(serde_json::json!({
        "name": w.name,
        "kernels": kernels,
        "mode": if w.graph_replay { "graph" } else { "stream" },
        "matmul": w.matmul,
        "median_ms": median(&times),
        "min_ms": times.iter().copied().fold(f64::INFINITY, f64::min),
        "reps": times.len(),
        "bound": w.bound,
        "outputs_finite": finite,
        "peer": w.peer,
    }))
}
