//! `tir-conform`: runs the conformance corpus on a backend and compares with the f64 oracle.
//!
//! ```text
//! tir-conform --backend NAME [--filter PATTERN] [--list] [--json FILE] [--seed N] [--io host|device] [--devices N]
//! tir-conform --backend cuda --compile-only --arch sm_90[,sm_100]
//! tir-conform --onnx-node DIR --backend NAME [--filter PATTERN] [--min-passed N] [--compile-only --arch ARCHS]
//! ```
//!
//! `--onnx-node DIR` runs ONNX's backend node tests written into DIR by
//! `scripts/onnx-node-tests.sh` (or models in the same layout) instead of the corpus: one line
//! per failed (`FAIL`) test, `--verbose` also one per unsupported (`UNSUPPORTED`) test with the
//! reason, then the counts; `--json FILE` writes every result and the counts per op type;
//! `--min-passed N` fails the run when fewer than N tests pass.
//!
//! `--io device` passes every parameter and input as a device tensor and leaves the outputs on
//! the device (copied back to compare), instead of host tensors in and out. `--sessions` runs
//! the sessions of `testsuite::sessions` (the run API driven call after call) instead of the
//! corpus.
//!
//! `--devices N` runs the cases on meshes of at most N devices and skips those on larger ones
//! (by default a backend's meshes are as large as it declares: the GPUs here, any size on ref).
//!
//! `--compile-only` (CUDA only) lowers every case and compiles its kernels to cubins for the
//! named architectures without running anything, so it needs the Tile IR toolchain but no GPU.
//!
//! Prints one line per failed case (`FAIL`) and per skipped case (`SKIP`, with the capability it
//! lacks), then `N passed, N failed, N skipped`. Exits with 1 if any case failed; every error is
//! one line `error: ...` on stderr, also with exit code 1.

use clap::Parser;
use rayon::prelude::*;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use testsuite::{
    compile_case, corpus, matches_filter, registry, report, run_case, Case, CaseResult, Io, Summary,
};
use tirc::compile::{parse_archs, Archs};

#[derive(Parser)]
#[command(
    name = "tir-conform",
    version,
    about = "Run tir's conformance corpus on a backend and compare with the f64 oracle"
)]
struct Cli {
    /// The backend to run (see the list in an unknown-backend error).
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,
    /// Only cases whose name contains PATTERN (or matches it as a glob, with `*`).
    #[arg(long, value_name = "PATTERN")]
    filter: Option<String>,
    /// List the cases (with the backend, mark those it would skip) instead of running them.
    #[arg(long)]
    list: bool,
    /// Also write every result (cases, tolerances, checks, errors, skips) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The seed of the input values (the cases and graphs are the same for every seed).
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// Only compile each case's kernels (CUDA: to cubins for --arch), without running them.
    #[arg(long)]
    compile_only: bool,
    /// How the cuda backend executes: sync, graph (CUDA graph replay) or async (futures).
    #[arg(long, value_name = "MODE", value_parser = ["sync", "graph", "async"])]
    mode: Option<String>,
    /// The cuda backend's matmul paths: auto, generated or cublaslt, then KERNEL=PATH items
    /// (default: $TIR_MATMUL, else auto).
    #[arg(long, value_name = "POLICY")]
    matmul: Option<String>,
    /// The cuda backend's attention paths: auto, generated or cudnn, then KERNEL=PATH items
    /// (default: $TIR_ATTENTION, else auto).
    #[arg(long, value_name = "POLICY")]
    attention: Option<String>,
    /// The cuda backend's convolution paths: auto, generated or cudnn, then KERNEL=PATH items
    /// (default: $TIR_CONV, else auto).
    #[arg(long, value_name = "POLICY")]
    conv: Option<String>,
    /// Where the tensors of a run are: host (host tensors in and out) or device (parameters and
    /// inputs copied to the device first, outputs left there).
    #[arg(long, value_name = "WHERE", value_parser = ["host", "device"], default_value = "host")]
    io: String,
    /// Run the sessions (the run API driven call after call) instead of the corpus.
    #[arg(long, conflicts_with_all = ["list", "filter"])]
    sessions: bool,
    /// Run the ONNX node tests (or models) in the folders under DIR instead of the corpus.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["list", "sessions"])]
    onnx_node: Option<PathBuf>,
    /// With --onnx-node: also print a line per unsupported test.
    #[arg(long, requires = "onnx_node")]
    verbose: bool,
    /// With --onnx-node: fail unless at least N tests pass (so that a test which stops
    /// importing, refused as unsupported, does not go unnoticed).
    #[arg(long, value_name = "N", requires = "onnx_node")]
    min_passed: Option<usize>,
    /// Run meshes of at most N devices (cases on larger meshes are skipped); default: as many
    /// as the backend has (the GPUs here for cuda, any number for ref).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    devices: Option<u32>,
    /// The GPU architectures to compile for with --compile-only (comma-separated, e.g.
    /// sm_90,sm_100).
    #[arg(long, value_name = "ARCHS", value_parser = parse_archs, requires = "compile_only")]
    arch: Option<Archs>,
}

impl Cli {
    /// The architectures of `--arch`, none when it is not given.
    fn archs(&self) -> &[String] {
        self.arch.as_ref().map_or(&[], |archs| archs.0.as_slice())
    }
}

fn main() -> ExitCode {
    let cli = match tirc::parse_cli::<Cli>("tir-conform") {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match run(&cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; `Ok(false)` when a case failed.
fn run(cli: &Cli) -> Result<bool, String> {
    let registry = registry();
    let backend = match &cli.backend {
        Some(name) => Some(registry.get(name).ok_or_else(|| {
            format!(
                "unknown backend `{name}` (known: {})",
                registry.names().join(", ")
            )
        })?),
        None if cli.list => None,
        None => {
            return Err(format!(
                "--backend NAME is required (known: {})",
                registry.names().join(", ")
            ))
        }
    };
    let all = corpus(cli.seed);
    let cases: Vec<&Case> = all
        .iter()
        .filter(|c| {
            cli.filter
                .as_deref()
                .is_none_or(|p| matches_filter(&c.name, p))
        })
        .collect();
    // With --onnx-node the filter picks node tests (checked there).
    if cases.is_empty() && cli.onnx_node.is_none() {
        return Err(format!(
            "no case matches the filter `{}` ({} cases in the corpus)",
            cli.filter.as_deref().unwrap_or(""),
            all.len()
        ));
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let io = |e: std::io::Error| format!("writing to stdout: {e}");

    let capped;
    let backend = match (backend, cli.devices) {
        (Some(inner), Some(devices)) => {
            capped = AtMost { inner, devices };
            Some(&capped as &dyn tir_lower::Backend)
        }
        _ => backend,
    };
    if cli.list {
        let caps = backend.map(|b| b.capabilities());
        for case in &cases {
            let skip = caps.as_ref().and_then(|caps| case.skip_reason(caps));
            let runs = case.runs.len();
            let mut line = format!(
                "{}  [{}, {runs} run{}]",
                case.name,
                case.tolerance,
                plural(runs)
            );
            if let Some(reason) = skip {
                line += &format!("  skip: {reason}");
            }
            writeln!(out, "{line}").map_err(io)?;
        }
        writeln!(out, "{} cases", cases.len()).map_err(io)?;
        return Ok(true);
    }

    let backend = backend.ok_or("--backend NAME is required")?;
    let (cuda, configured);
    let cuda_only = [&cli.mode, &cli.matmul, &cli.attention, &cli.conv];
    let backend = if cuda_only.iter().all(|o| o.is_none()) {
        backend
    } else if backend.name() != "cuda" {
        return Err(format!(
            "--mode, --matmul, --attention and --conv apply to the cuda backend, not `{}`",
            backend.name()
        ));
    } else {
        cuda = cuda_backend(cli)?;
        configured = AtMost {
            inner: &cuda,
            devices: cli.devices.unwrap_or(u32::MAX),
        };
        &configured as &dyn tir_lower::Backend
    };
    if cli.sessions && cli.compile_only {
        return compile_sessions(cli, backend, &mut out);
    }
    if cli.sessions {
        return run_sessions(backend, &mut out);
    }
    if let Some(dir) = &cli.onnx_node {
        return run_onnx_node(cli, dir, backend, &mut out);
    }
    let start = Instant::now();
    let results = if cli.compile_only {
        compile_all(cli, backend, &cases, &mut out)?
    } else {
        let io = match cli.io.as_str() {
            "device" => Io::Device,
            _ => Io::Host,
        };
        let mut results = Vec::with_capacity(cases.len());
        for case in &cases {
            let result = run_case(backend, case, io);
            report_line(&mut out, &result)?;
            results.push(result);
        }
        results
    };
    let seconds = start.elapsed().as_secs_f64();
    let summary = Summary::of(&results);
    if let Some(path) = &cli.json {
        let value = report::json(
            backend.name(),
            cli.seed,
            cli.filter.as_deref(),
            &cases,
            &results,
            seconds,
        );
        write_json(path, &value)?;
    }
    writeln!(out, "{summary}").map_err(io)?;
    Ok(summary.failed == 0)
}

/// `--onnx-node DIR`: ONNX's node tests, in parallel.
fn run_onnx_node(
    cli: &Cli,
    dir: &std::path::Path,
    backend: &dyn tir_lower::Backend,
    out: &mut impl Write,
) -> Result<bool, String> {
    use testsuite::onnx_node::{self, NodeOutcome, NodeSummary};
    let tests: Vec<_> = onnx_node::discover(dir)?
        .into_iter()
        .filter(|t| {
            cli.filter
                .as_deref()
                .is_none_or(|p| matches_filter(&t.name, p))
        })
        .collect();
    if tests.is_empty() {
        return Err(format!(
            "no test in {} matches the filter `{}`",
            dir.display(),
            cli.filter.as_deref().unwrap_or("")
        ));
    }
    let start = Instant::now();
    let results: Vec<_> = if cli.compile_only {
        if backend.name() != "cuda" || cli.archs().is_empty() {
            return Err("--onnx-node --compile-only needs --backend cuda and --arch".into());
        }
        let cuda = cuda_backend(cli)?;
        let compiler = cuda.compiler().map_err(|e| e.to_string())?;
        let target = backend.target();
        tests
            .par_iter()
            .map(|t| onnx_node::compile_node_test(compiler, &target, t, cli.archs()))
            .collect()
    } else if backend.name() == "cuda" {
        // One GPU: tests one after another.
        tests
            .iter()
            .map(|t| onnx_node::run_node_test(backend, t))
            .collect()
    } else {
        // Each worker thread with a backend of its own (backends are not shared across threads).
        let name = backend.name();
        tests
            .par_iter()
            .map_init(registry, |registry, t| {
                let backend = registry
                    .get(name)
                    .expect("the backend was found by this name");
                onnx_node::run_node_test(backend, t)
            })
            .collect()
    };
    let io = |e: std::io::Error| format!("writing to stdout: {e}");
    for r in &results {
        match &r.outcome {
            NodeOutcome::Failed { stage, message } => {
                writeln!(out, "FAIL {} [{}]: {message}", r.name, stage.name()).map_err(io)?
            }
            NodeOutcome::Unsupported { reason } if cli.verbose => {
                writeln!(out, "UNSUPPORTED {}: {reason}", r.name).map_err(io)?
            }
            _ => {}
        }
    }
    let summary = NodeSummary::of(&results);
    if let Some(path) = &cli.json {
        let value = serde_json::json!({
            "backend": backend.name(),
            "dir": dir.display().to_string(),
            "seconds": start.elapsed().as_secs_f64(),
            "summary": summary,
            "results": results,
        });
        write_json(path, &value)?;
    }
    writeln!(out, "{summary}").map_err(io)?;
    let enough = cli.min_passed.is_none_or(|n| summary.passed >= n);
    if !enough {
        writeln!(
            out,
            "FAIL {} passed, fewer than --min-passed {}",
            summary.passed,
            cli.min_passed.unwrap_or(0)
        )
        .map_err(io)?;
    }
    Ok(summary.failed == 0 && enough)
}

/// Writes a report as pretty JSON.
fn write_json(path: &std::path::Path, value: &serde_json::Value) -> Result<(), String> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

/// `--sessions`: one line per failed session, then the counts.
fn run_sessions(backend: &dyn tir_lower::Backend, out: &mut impl Write) -> Result<bool, String> {
    let io = |e: std::io::Error| format!("writing to stdout: {e}");
    let all = testsuite::sessions::sessions();
    let mut failed = 0;
    for session in &all {
        if let Err(why) = (session.check)(backend) {
            failed += 1;
            writeln!(out, "FAIL session {}: {why}", session.name).map_err(io)?;
        }
    }
    writeln!(
        out,
        "{} sessions passed, {failed} failed",
        all.len() - failed
    )
    .map_err(io)?;
    Ok(failed == 0)
}

/// `--sessions --compile-only`: the kernels of every graph the sessions compile.
fn compile_sessions(
    cli: &Cli,
    backend: &dyn tir_lower::Backend,
    out: &mut impl Write,
) -> Result<bool, String> {
    let cuda = cuda_backend(cli)?;
    if backend.name() != "cuda" || cli.archs().is_empty() {
        return Err("--sessions --compile-only needs --backend cuda and --arch".into());
    }
    let graphs = testsuite::sessions::graphs()?;
    for graph in &graphs {
        let compiled = tir_lower::compile_graph(graph, &backend.target(), &Default::default())
            .map_err(|e| e.to_string())?;
        cuda.compile_for(&compiled.program, cli.archs())
            .map_err(|e| e.to_string())?;
    }
    let io = |e: std::io::Error| format!("writing to stdout: {e}");
    writeln!(out, "compiled the {} graphs of the sessions", graphs.len()).map_err(io)?;
    Ok(true)
}

/// The cuda backend with `--mode`, `--matmul` and `--attention`.
fn cuda_backend(cli: &Cli) -> Result<backend_cuda::CudaBackend, String> {
    let mode = match cli.mode.as_deref() {
        Some("graph") => backend_cuda::ExecMode::Graph,
        Some("async") => backend_cuda::ExecMode::Async,
        _ => backend_cuda::ExecMode::Sync,
    };
    let mut backend = backend_cuda::CudaBackend::with_mode(mode).poisoning();
    if let Some(text) = &cli.matmul {
        let policy =
            backend_cuda::MatmulPolicy::parse(text).map_err(|e| format!("--matmul: {e}"))?;
        backend = backend.with_matmul(policy);
    }
    if let Some(text) = &cli.attention {
        let policy =
            backend_cuda::AttentionPolicy::parse(text).map_err(|e| format!("--attention: {e}"))?;
        backend = backend.with_attention(policy);
    }
    if let Some(text) = &cli.conv {
        let policy = backend_cuda::ConvPolicy::parse(text).map_err(|e| format!("--conv: {e}"))?;
        backend = backend.with_conv(policy);
    }
    Ok(backend)
}

fn report_line(out: &mut impl Write, result: &CaseResult) -> Result<(), String> {
    if let Some(line) = report::line(result) {
        let io = |e: std::io::Error| format!("writing to stdout: {e}");
        writeln!(out, "{line}").map_err(io)?;
        out.flush().map_err(io)?;
    }
    Ok(())
}

/// `--compile-only`: every case's kernels compiled for `--arch`, cases in parallel.
fn compile_all(
    cli: &Cli,
    backend: &dyn tir_lower::Backend,
    cases: &[&Case],
    out: &mut impl Write,
) -> Result<Vec<CaseResult>, String> {
    if backend.name() != "cuda" {
        return Err(format!(
            "--compile-only needs a backend that compiles ahead of time (cuda), not `{}`",
            backend.name()
        ));
    }
    if cli.archs().is_empty() {
        return Err("--compile-only needs --arch (e.g. --arch sm_90,sm_100)".into());
    }
    let cuda = cuda_backend(cli)?;
    let compiler = cuda.compiler().map_err(|e| e.to_string())?;
    let target = backend.target();
    let results: Vec<CaseResult> = cases
        .par_iter()
        .map(|case| compile_case(compiler, &target, case, cli.archs()))
        .collect();
    for result in &results {
        report_line(out, result)?;
    }
    Ok(results)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A backend whose meshes are capped at `devices` (`--devices N`).
struct AtMost<'a> {
    inner: &'a dyn tir_lower::Backend,
    devices: u32,
}

impl tir_lower::Backend for AtMost<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn target(&self) -> tir_lower::Target {
        self.inner.target()
    }
    fn capabilities(&self) -> tir_lower::Capabilities {
        let mut caps = self.inner.capabilities();
        caps.devices = caps.devices.min(self.devices);
        caps
    }
    fn compile(
        &self,
        program: &tir_lower::Program,
    ) -> Result<Box<dyn tir_lower::Executable>, tir_lower::BackendError> {
        self.inner.compile(program)
    }
    fn compile_mesh(
        &self,
        program: &tir_lower::Program,
        world: u32,
    ) -> Result<Box<dyn tir_lower::MeshExecutable>, tir_lower::BackendError> {
        self.inner.compile_mesh(program, world)
    }
}
