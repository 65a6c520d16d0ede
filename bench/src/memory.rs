//! Memory, reported beside the times: the host memory of loading the decoder block's weights
//! from a `.safetensors` file (memory-mapped, so no more than the file), the device memory its
//! executable holds (the weights, the memory plan's arena, the states and fixed staging buffers),
//! and that device memory does not grow over many runs.

use backend_cuda::{CudaBackend, CudaExecutable, ExecMode};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;
use tir_graph::models::{decoder_block, DecoderConfig};
use tir_graph::weights::{write_safetensors, WeightsFile};
use tir_graph::{Graph, HostTensor, Op};
use tir_lower::{compile_graph, Backend, Executable, Storage, TensorRef};
use tir_opt::Limits;

/// The decode step the benchmarks time (`workloads.rs`).
fn decoder() -> Result<Graph, String> {
    decoder_block(&DecoderConfig {
        hidden: 4096,
        heads: 32,
        context: 2048,
        ffn: 11008,
    })
    .map_err(|e| e.to_string())
}

/// The parameters of `graph` with their types.
fn parameters(graph: &Graph) -> Vec<(String, tir_graph::TensorType)> {
    graph
        .node_ids()
        .filter_map(|id| match &graph.node(id).op {
            Op::Parameter { name } => Some((name.clone(), graph.ty(id).clone())),
            _ => None,
        })
        .collect()
}

/// Writes the decoder block's parameters (random, of the benchmark's scale) to `file`.
pub fn write_weights(file: &Path) -> Result<(), String> {
    let graph = decoder()?;
    let mut tensors = Vec::new();
    for (i, (name, ty)) in parameters(&graph).into_iter().enumerate() {
        let dims = ty
            .shape
            .static_dims()
            .ok_or("the decoder's parameters are static")?;
        let t = HostTensor::random(ty.dtype, &dims, i as u64, 0.04).map_err(|e| e.to_string())?;
        tensors.push((name, t));
    }
    let named: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(file, &named).map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::json!({"wrote": file.display().to_string()})
    );
    Ok(())
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
fn resident() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb << 10)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets `VmHWM` to the current resident set (Linux 4.0 and later); whether it could.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Device memory in use on the executable's GPU, in bytes.
fn used(exe: &CudaExecutable) -> Result<u64, String> {
    let (free, total) = exe.gpu().memory()?;
    Ok((total - free) as u64)
}

/// The bytes a run of `exe` needs on the device by the program: its parameters, the arena of
/// the memory plan, its states, and the staging of its inputs and outputs.
pub fn needed(exe: &CudaExecutable) -> Result<BTreeMap<&'static str, u64>, String> {
    let program = exe.program();
    let dims = BTreeMap::new();
    let mut needed = BTreeMap::from([
        ("parameters", 0),
        ("states", 0),
        ("staging", 0),
        ("constants", 0),
    ]);
    for b in &program.buffers {
        let bytes = tir_lower::plan::buffer_bytes(b, &dims).map_err(|e| e.to_string())?;
        let key = match b.storage {
            Storage::Parameter(_) => "parameters",
            Storage::State(_) => "states",
            Storage::Input(_) | Storage::Output => "staging",
            Storage::Constant(_) => "constants",
            Storage::Arena => continue,
        };
        *needed.entry(key).or_default() += bytes;
    }
    let arena = program
        .plan
        .layout(&program.buffers, &dims)
        .map_err(|e| e.to_string())?;
    needed.insert("arena", arena.size);
    Ok(needed)
}

/// Loads `file` into the decoder block's executable, runs it once, and prints the memory it
/// took (see the module doc) as one JSON line.
pub fn load_weights(file: &Path) -> Result<(), String> {
    let graph = decoder()?;
    let backend = CudaBackend::with_mode(ExecMode::Graph);
    let compiled =
        compile_graph(&graph, &backend.target(), &Limits::default()).map_err(|e| e.to_string())?;
    let before_device = {
        let gpu = backend.gpu().map_err(|e| e.to_string())?;
        let (free, total) = gpu.memory()?;
        (total - free) as u64
    };
    let mut exe = backend
        .compile_cuda(&compiled.program)
        .map_err(|e| e.to_string())?;
    let peak_reset = reset_peak();
    let (rss_before, _) = resident();
    let start = Instant::now();
    let weights = WeightsFile::open(file).map_err(|e| e.to_string())?;
    let bound = exe.load_weights(&weights).map_err(|e| e.to_string())?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let (rss_loaded, peak) = resident();
    let file_bytes = weights.size() as u64;
    drop(weights);
    let (rss_after, _) = resident();
    if !bound.missing.is_empty() {
        return Err(format!("{}: missing {:?}", file.display(), bound.missing));
    }
    let x = HostTensor::random(tir_graph::DType::F16, &[1, 1, 4096], 1, 1.0)
        .map_err(|e| e.to_string())?;
    let pos = HostTensor::scalar(1000i64);
    exe.run(&[("x", (&x).into()), ("pos", (&pos).into())])
        .map_err(|e| e.to_string())?;
    let needed = needed(&exe)?;
    let line = serde_json::json!({
        "file_bytes": file_bytes,
        "load_ms": load_ms,
        "host_peak_growth_bytes": peak_reset.then(|| peak.saturating_sub(rss_before)),
        "host_rss_growth_loaded_bytes": rss_loaded.saturating_sub(rss_before),
        "host_rss_growth_after_bytes": rss_after.saturating_sub(rss_before),
        "device_used_by_executable_bytes": used(&exe)?.saturating_sub(before_device),
        "device_needed_bytes": needed,
    });
    println!("{line}");
    Ok(())
}

/// Device memory in use after a warm-up of 100 runs and after `runs` more, with the inputs
/// `inputs`, as JSON.
pub fn device_memory_over_runs(
    exe: &mut CudaExecutable,
    inputs: &[(&str, TensorRef<'_>)],
    runs: usize,
) -> Result<serde_json::Value, String> {
    for _ in 0..100 {
        exe.run(inputs).map_err(|e| e.to_string())?;
    }
    let warm = used(exe)?;
    for _ in 0..runs {
        exe.run(inputs).map_err(|e| e.to_string())?;
    }
    Ok(serde_json::json!({
        "runs": runs,
        "used_after_warmup_bytes": warm,
        "used_after_runs_bytes": used(exe)?,
    }))
}
