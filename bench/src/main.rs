//! `tir-bench`: tir's GPU benchmarks.
//!
//! ```text
//! tir-bench compile --out DIR   # here (no GPU): fill the kernel cache for every workload, and
//!                               # time compiling (cold and warm cache, the optimizer)
//! tir-bench run --out DIR       # on the GPU: time every workload with CUDA events
//! tir-bench profile --filter F   # on the GPU: time each kernel of the matching workloads alone
//!                                # (F: a name part, or parts as `A|B`; also for compile and run)
//! tir-bench write-weights FILE   # the decoder block's weights (random) as a .safetensors file
//! tir-bench load-weights FILE    # on the GPU, in a fresh process: host and device memory of
//!                                # loading them
//! tir-bench soak --steps N       # on the GPU: the decode step N times (module `soak`)
//! tir-bench quant-error          # anywhere: each weight format's error against fp16
//! tir-bench plot RESULTS --out DIR  # anywhere: draw results.json as three SVG charts
//! tir-bench mesh --devices N --out DIR  # on N GPUs: 1 GPU against tensor-parallel N, and the
//!                                # all-reduce alone (module `mesh`; --compile-only here)
//! ```
//!
//! `run` sets each workload's parameters once and makes its inputs (deterministic random
//! values) in page-locked memory from the executable (`Executable::alloc_host`, what the README
//! recommends), then measures:
//! - the kernels alone (`CudaExecutable::time_runs`: warm-up, then repetitions each after
//!   flushing the L2 cache, CUDA events);
//! - what a user pays: the wall time of the public `Executable::run` per call in a loop,
//!   copies included (`api`), and the same with the inputs in ordinary `Vec` memory
//!   (`api_vec`);
//! - the copies alone at page-locked speed: the inputs to the device and the outputs back
//!   (`Executable::to_device`, `DeviceTensor::to_host`), what the `api` time is held against;
//! - for the decode step, device memory before and after 10,000 more runs.
//!
//! With `$TIR_BENCH_PACKAGES=DIR`, `compile` also writes each workload's program and cubins as
//! `DIR/NAME.tirpkg` and `run`/`profile` load a workload from there when its package exists,
//! so a device call optimizes and lowers nothing (the 32-layer quantized decoders' graphs took
//! the whole of one call to compile there).
//!
//! It writes, per workload, its inputs and outputs as `.npy` files under `DIR/NAME/` and its
//! times to `DIR/tir.json`. `bench/peers.py` then times PyTorch on the same inputs, checks tir's
//! outputs against PyTorch's, and writes the table and `bench/RESULTS.md` with `results.json`
//! beside it, which `plot` draws (`plot.rs`). Errors are one line on stderr and exit code 1.

mod memory;
mod mesh;
mod plot;
mod quant_error;
mod results;
mod soak;
mod workloads;

use backend_cuda::{CudaBackend, ExecMode, MatmulPolicy};
use clap::{Parser, Subcommand};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tir_graph::eval::{concrete_dims, F64Tensor};
use tir_graph::{DType, Graph, HostTensor, Op};
use tir_lower::{compile_graph, Backend, Executable, TensorRef};
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
    /// Write the decoder block's parameters (deterministic random values) to FILE.safetensors.
    WriteWeights { file: PathBuf },
    /// Load FILE.safetensors into the decoder block's executable and print, as JSON, the host
    /// memory that took (peak resident set against the file's size), the time, and the device
    /// memory the executable holds after a run against what it needs.
    LoadWeights { file: PathBuf },
    /// Run the decode step STEPS times (default 100,000) with its KV-cache states: no error,
    /// device memory flat, a replay's outputs identical to a fresh executable's (one JSON line;
    /// exit 1 when a check fails).
    Soak {
        #[arg(long, default_value_t = 100_000)]
        steps: usize,
    },
    /// Print the Tile IR (MLIR text) of each kernel of the workloads whose name contains FILTER.
    Mlir {
        #[arg(long)]
        filter: String,
        /// Also write each kernel's bytecode as DIR/WORKLOAD.KERNEL.tileirbc.
        #[arg(long, value_name = "DIR")]
        bytecode: Option<PathBuf>,
    },
    /// Time tir on one GPU against tir at tensor-parallel DEVICES on that many GPUs, and the
    /// all-reduce alone (module `mesh`); with --compile-only, fill the kernel cache for it here.
    Mesh {
        #[arg(long, default_value_t = 2)]
        devices: u32,
        #[arg(long, value_name = "DIR", default_value = "tir-mesh")]
        out: PathBuf,
        #[arg(long)]
        compile_only: bool,
        #[arg(long, default_value = "sm_90")]
        arch: String,
    },
    /// Each quantized format's error against the fp16 decoder, one layer at the bench's size,
    /// on the f64 oracle (no GPU; one JSON line per format, module `quant_error`).
    QuantError,
    /// Draw a run's results.json (from peers.py, or bench/results.json) as SVG charts in DIR:
    /// ratios to each peer, share of the roofline, launch overhead. Needs no GPU.
    Plot {
        results: PathBuf,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.command {
        Command::Compile { out, arch, filter } => compile(&out, &arch, filter.as_deref()),
        Command::Run { out, filter } => run(&out, filter.as_deref()),
        Command::Profile { filter } => profile(&filter),
        Command::WriteWeights { file } => memory::write_weights(&file),
        Command::LoadWeights { file } => memory::load_weights(&file),
        Command::Soak { steps } => soak::soak(steps),
        Command::Mlir { filter, bytecode } => print_mlir(&filter, bytecode.as_deref()),
        Command::Plot { results, out } => draw_plots(&results, &out),
        Command::QuantError => quant_error::run(),
        Command::Mesh {
            devices,
            compile_only: true,
            arch,
            ..
        } => mesh::compile(devices, &arch),
        Command::Mesh { devices, out, .. } => mesh::run(devices, &out),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn draw_plots(results: &Path, out: &Path) -> Result<(), String> {
    let run = results::Run::load(results).map_err(|e| e.to_string())?;
    for outcome in plot::draw_all(&run, out).map_err(|e| e.to_string())? {
        match outcome {
            plot::Outcome::Wrote(path) => println!("wrote {}", path.display()),
            plot::Outcome::Skipped { file, why } => println!("{file}: not drawn ({why})"),
        }
    }
    Ok(())
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

/// Lowers and compiles `graph`'s kernels for `arch` with `backend`; returns the seconds taken.
/// The variable naming the folder of the workloads' AOT packages (see the module doc).
const PACKAGES_ENV: &str = "TIR_BENCH_PACKAGES";

/// Where workload `name`'s package is, when `$TIR_BENCH_PACKAGES` is set.
fn package_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(PACKAGES_ENV).map(|dir| PathBuf::from(dir).join(format!("{name}.tirpkg")))
}

/// Compiles `graph` for `arch` into the kernel cache and, when `package` is given, writes its
/// program and cubins there; returns the seconds it took (the package's write excluded).
fn compile_one(
    backend: &CudaBackend,
    graph: &Graph,
    arch: &str,
    package: Option<&Path>,
) -> Result<f64, String> {
    let start = Instant::now();
    let compiled =
        compile_graph(graph, &backend.target(), &Limits::default()).map_err(|e| e.to_string())?;
    let (kernels, _) = backend
        .compile_for(&compiled.program, &[arch.to_string()])
        .map_err(|e| e.to_string())?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(path) = package {
        let pkg = backend_cuda::package::Package {
            program: compiled.program,
            abis: kernels.abis,
            cubins: kernels.cubins,
            toolchain: kernels.toolchain,
            mesh: None,
        };
        backend_cuda::package::write(&pkg, path).map_err(|e| e.to_string())?;
    }
    Ok(seconds)
}

fn compile(out: &Path, arch: &str, filter: Option<&str>) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for w in matching(filter)? {
        let backend = CudaBackend::new().with_matmul(matmul_policy(&w)?);
        let package = package_path(&w.name);
        if let Some(dir) = package.as_deref().and_then(Path::parent) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let seconds = compile_one(&backend, &w.graph, arch, package.as_deref())?;
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
    let cold = compile_one(&CudaBackend::new(), &decoder, arch, None)?;
    let warm: Vec<f64> = (0..5)
        .map(|_| compile_one(&CudaBackend::new(), &decoder, arch, None))
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
    let plain = CudaBackend::new();
    let tuning = plain.tuning().map_err(|e| e.to_string())?;
    // The bytecode version comes from the toolchain, needed only when writing bytecode.
    let compiler = bytecode
        .map(|_| plain.compiler().map_err(|e| e.to_string()))
        .transpose()?;
    for w in matching(Some(filter))? {
        let target = backend_cuda::gpu_target(tuning, &MatmulPolicy::parse(w.matmul)?);
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

/// The workloads whose name contains `filter`, or one of its `|`-separated alternatives (all
/// of them without one); an alternative ending in `$` matches the end of the name (the fp16
/// `decode_32_layers_h4096_ctx2048$` without its quantized and RoPE variants).
fn matching(filter: Option<&str>) -> Result<Vec<Workload>, String> {
    let mut all = workloads::all().map_err(|e| e.to_string())?;
    let hit = |name: &str, f: &str| match f.strip_suffix('$') {
        Some(end) => name.ends_with(end),
        None => name.contains(f),
    };
    all.retain(|w| filter.is_none_or(|f| f.split('|').any(|f| hit(&w.name, f))));
    Ok(all)
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A workload's tensors: its parameters, and its inputs in page-locked memory from the
/// executable; deterministic random values times its scale, and KV-cache positions in the
/// middle of the cache.
struct Tensors {
    parameters: Vec<(String, HostTensor<'static>)>,
    inputs: Vec<(String, HostTensor<'static>)>,
}

impl Tensors {
    fn inputs(&self) -> Vec<(&str, TensorRef<'_>)> {
        self.inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.into()))
            .collect()
    }

    /// Sets every parameter on `exe`.
    fn set_parameters(&self, exe: &mut dyn Executable) -> Result<(), String> {
        for (name, t) in &self.parameters {
            exe.set_parameter(name, t.into())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

fn tensors(w: &Workload, exe: &dyn Executable) -> Result<Tensors, String> {
    let mut out = Tensors {
        parameters: Vec::new(),
        inputs: Vec::new(),
    };
    let mut seen: HashMap<(String, DType, Vec<u64>), HostTensor<'static>> = HashMap::new();
    for (i, id) in w.graph.node_ids().enumerate() {
        let (name, input) = match &w.graph.node(id).op {
            Op::Input { name } => (name.clone(), true),
            Op::Parameter { name } => (name.clone(), false),
            _ => continue,
        };
        let ty = w.graph.ty(id);
        let dims = concrete_dims(&ty.shape, &w.dims).map_err(|e| e.to_string())?;
        // Layer `lN.`'s parameters repeat layer 0's values: drawing a 32-layer model's 13 GB
        // element by element took a device call's whole time, and values change no timing.
        let layer_free = layer_free_name(&name);
        if let Some(value) = (!input)
            .then(|| seen.get(&(layer_free.clone(), ty.dtype, dims.clone())))
            .flatten()
        {
            out.parameters.push((name, value.clone()));
            continue;
        }
        let mut values = F64Tensor::random(ty.dtype, dims.clone(), i as u64);
        if let Some(fixed) = (w.fixed)(&name, &dims) {
            values.data = fixed;
        } else if ty.dtype == DType::I64 && values.data.len() == 1 {
            values.data[0] = 1000.0;
        } else if ty.dtype.is_float() {
            for v in &mut values.data {
                *v = ty.dtype.round_value(*v * w.scale);
            }
        }
        let value = HostTensor::from_f64(&values).map_err(|e| e.to_string())?;
        if input {
            let mut pinned = exe.alloc_host(ty.dtype, &dims).map_err(|e| e.to_string())?;
            pinned
                .bytes_mut()
                .map_err(|e| e.to_string())?
                .copy_from_slice(value.bytes());
            out.inputs.push((name, pinned));
        } else {
            seen.insert((layer_free, ty.dtype, dims), value.clone());
            out.parameters.push((name, value));
        }
    }
    Ok(out)
}

/// `name` without a leading layer prefix `lN.` (the decoders' per-layer parameter names).
fn layer_free_name(name: &str) -> String {
    name.strip_prefix('l')
        .and_then(|rest| rest.split_once('.'))
        .filter(|(layer, _)| !layer.is_empty() && layer.bytes().all(|b| b.is_ascii_digit()))
        .map_or_else(|| name.to_string(), |(_, rest)| rest.to_string())
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

/// `w` compiled for this GPU in its mode and with its matmul policy, or loaded from its
/// package where `$TIR_BENCH_PACKAGES` holds one.
fn executable(w: &Workload) -> Result<backend_cuda::CudaExecutable, String> {
    let mode = if w.graph_replay {
        ExecMode::Graph
    } else {
        ExecMode::Sync
    };
    let backend = CudaBackend::with_mode(mode).with_matmul(matmul_policy(w)?);
    if let Some(path) = package_path(&w.name).filter(|p| p.exists()) {
        let pkg = backend_cuda::package::read(&path).map_err(|e| e.to_string())?;
        return backend.load_package(&pkg).map_err(|e| e.to_string());
    }
    let compiled = compile_graph(&w.graph, &backend.target(), &Limits::default())
        .map_err(|e| e.to_string())?;
    backend
        .compile_cuda(&compiled.program)
        .map_err(|e| e.to_string())
}

/// The workload's matmul path, or `$TIR_MATMUL`'s where it is set (for a search).
fn matmul_policy(w: &Workload) -> Result<MatmulPolicy, String> {
    match std::env::var("TIR_MATMUL") {
        Ok(_) => MatmulPolicy::from_env(),
        Err(_) => MatmulPolicy::parse(w.matmul),
    }
}

/// Prints one JSON line per kernel of each workload whose name contains `filter`.
fn profile(filter: &str) -> Result<(), String> {
    for w in matching(Some(filter))? {
        let mut exe = executable(&w)?;
        let t = tensors(&w, &exe)?;
        t.set_parameters(&mut exe)?;
        let kernels = exe
            .profile_kernels(&t.inputs(), 10)
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

/// The median wall milliseconds of `exe.run(inputs)`, the public call with its copies, over
/// `reps` calls after 3 warm-up calls.
fn api_ms(
    exe: &mut dyn Executable,
    inputs: &[(&str, TensorRef<'_>)],
    reps: usize,
) -> Result<f64, String> {
    let mut times = Vec::with_capacity(reps);
    for rep in 0..3 + reps {
        let start = Instant::now();
        let outputs = exe.run(inputs).map_err(|e| e.to_string())?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        drop(outputs);
        if rep >= 3 {
            times.push(ms);
        }
    }
    Ok(median(&times))
}

/// The median wall milliseconds of the copies alone at page-locked speed: every input to the
/// device, then every output of a run back to the host.
fn transfer_ms(exe: &mut dyn Executable, tensors: &Tensors, reps: usize) -> Result<f64, String> {
    let outputs = exe
        .run_on_device(&tensors.inputs())
        .map_err(|e| e.to_string())?;
    let mut times = Vec::with_capacity(reps);
    for rep in 0..3 + reps {
        let start = Instant::now();
        for (_, t) in &tensors.inputs {
            exe.to_device(t).map_err(|e| e.to_string())?;
        }
        for t in outputs.values() {
            t.to_host().map_err(|e| e.to_string())?;
        }
        if rep >= 3 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(median(&times))
}

fn run_one(out: &Path, w: &Workload) -> Result<serde_json::Value, String> {
    let mut exe = executable(w)?;
    let kernels = exe.program().kernels.len();
    let t = tensors(w, &exe)?;
    t.set_parameters(&mut exe)?;
    let inputs = t.inputs();
    let reps = if matches!(w.bound, Bound::Compute { flops } if flops > 1e12) {
        10
    } else {
        30
    };
    let (times, outputs) = exe.time_runs(&inputs, 3, reps).map_err(|e| e.to_string())?;
    let api = api_ms(&mut exe, &inputs, reps)?;
    let in_vecs: Vec<(String, HostTensor)> = t
        .inputs
        .iter()
        .map(|(n, h)| (n.clone(), h.clone()))
        .collect();
    let vec_inputs: Vec<(&str, TensorRef)> = in_vecs
        .iter()
        .map(|(n, h)| (n.as_str(), h.into()))
        .collect();
    let api_vec = api_ms(&mut exe, &vec_inputs, reps)?;
    let transfer = transfer_ms(&mut exe, &t, reps)?;
    let memory = if w.name.starts_with("decoder") {
        Some(memory::device_memory_over_runs(&mut exe, &inputs, 10_000)?)
    } else {
        None
    };
    // What the decode loops' programs hold on the device, by kind (weights as stored).
    let needed = if w.name.starts_with("decode_") {
        Some(memory::needed(&exe)?)
    } else {
        None
    };
    let dir = out.join(&w.name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if w.peer {
        for (name, t) in t.parameters.iter().chain(&t.inputs) {
            write_npy(&dir.join(format!("in_{name}.npy")), t)?;
        }
        for (name, t) in &outputs {
            write_npy(&dir.join(format!("out_{name}.npy")), t)?;
        }
    }
    let finite = outputs
        .values()
        .all(|t| t.to_f64().data.iter().all(|v| v.is_finite()));
    Ok(serde_json::json!({
        "name": w.name,
        "kernels": kernels,
        "mode": if w.graph_replay { "graph" } else { "stream" },
        "matmul": w.matmul,
        "median_ms": median(&times),
        "min_ms": times.iter().copied().fold(f64::INFINITY, f64::min),
        "api_ms": api,
        "api_vec_ms": api_vec,
        "transfer_ms": transfer,
        "device_memory": memory,
        "device_needed_bytes": needed,
        "reps": times.len(),
        "items": w.items,
        "bound": w.bound,
        "outputs_finite": finite,
        "peer": w.peer,
    }))
}
