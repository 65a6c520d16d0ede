//! `tir-differential`: random graphs run on the CUDA backend and on the reference with the same
//! inputs, every output and state compared element by element (`testsuite::differential`).
//!
//! ```text
//! tir-differential --seed S --count N [--first F] [--mode sync|graph|async] [--json FILE]
//! tir-differential --seed S --index I          # one graph, to reproduce a failure
//! tir-differential --kept                      # the graphs kept after failures
//! tir-differential --seed S --count N --compile-only --arch sm_90
//! ```
//!
//! Graphs `F..F+N` of seed `S` (each drawn from `(S, i)` alone). `--compile-only` lowers each
//! for the CUDA target and compiles its kernels to cubins for `--arch` through the kernel cache
//! (`$TIR_CACHE_DIR`), graphs in parallel, without a GPU: on a machine without the Tile IR
//! toolchain the same binary then runs from that cache.
//!
//! Prints one line per failed graph (`FAIL (seed S, index I) [stage]: ...`, with the tensor and
//! its worst element for a wrong value), then `N graphs: P passed, R refused (both), F failed`.
//! Exits with 1 if any graph failed; every error is one line `error: ...` on stderr, also with
//! exit code 1.

use backend_cuda::{CudaBackend, ExecMode};
use backend_ref::RefBackend;
use clap::Parser;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Instant;
use testsuite::differential::{self, GraphResult, Summary};
use tir_lower::Backend;

#[derive(Parser)]
#[command(
    name = "tir-differential",
    version,
    about = "Run random graphs on the CUDA backend and the reference and compare them"
)]
struct Cli {
    /// The seed the graphs are drawn from.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// How many graphs.
    #[arg(long, value_name = "N", default_value_t = 100)]
    count: u64,
    /// The index of the first graph.
    #[arg(long, value_name = "F", default_value_t = 0)]
    first: u64,
    /// Only graph I (as `--first I --count 1`), to reproduce a failure.
    #[arg(long, value_name = "I", conflicts_with_all = ["count", "first"])]
    index: Option<u64>,
    /// The graphs kept after failures (`differential::KEPT` and `KEPT_PAST_THE_ORACLE`) instead
    /// of a range.
    #[arg(long, conflicts_with_all = ["count", "first", "index", "seed"])]
    kept: bool,
    /// Only compile each graph's kernels for --arch, without running anything.
    #[arg(long)]
    compile_only: bool,
    /// The GPU architectures to compile for with --compile-only (comma-separated).
    #[arg(
        long,
        value_name = "ARCHS",
        value_delimiter = ',',
        requires = "compile_only"
    )]
    arch: Vec<String>,
    /// How the CUDA backend executes: sync, graph (CUDA graph replay) or async (futures).
    #[arg(long, value_name = "MODE", value_parser = ["sync", "graph", "async"], default_value = "sync")]
    mode: String,
    /// The backend checked against the reference: cuda, or the reference in checking mode
    /// (ref-checking, to try the tool without a GPU).
    #[arg(long, value_name = "NAME", value_parser = ["cuda", "ref-checking"], default_value = "cuda")]
    subject: String,
    /// Also write every result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = match tirc::parse_cli::<Cli>("tir-differential") {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let result = if cli.compile_only {
        compile_only(&cli)
    } else {
        run(&cli)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The `(seed, index)` of every graph to run.
fn graphs(cli: &Cli) -> Vec<(u64, u64)> {
    if cli.kept {
        return [differential::KEPT, differential::KEPT_PAST_THE_ORACLE].concat();
    }
    let (first, count) = match cli.index {
        Some(i) => (i, 1),
        None => (cli.first, cli.count),
    };
    (first..first.saturating_add(count))
        .map(|i| (cli.seed, i))
        .collect()
}

fn io(e: std::io::Error) -> String {
    format!("writing to stdout: {e}")
}

/// `--compile-only`: every graph's kernels compiled for `--arch`, graphs in parallel.
fn compile_only(cli: &Cli) -> Result<bool, String> {
    if cli.arch.is_empty() {
        return Err("--compile-only needs --arch (e.g. --arch sm_90)".into());
    }
    let cuda = CudaBackend::new();
    let compiler = cuda.compiler().map_err(|e| e.to_string())?;
    let target = cuda.target();
    let graphs = graphs(cli);
    let start = Instant::now();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<differential::CompileResult> = graphs
        .par_iter()
        .map(|&(seed, index)| {
            let r = differential::compile_graph_for(compiler, &target, seed, index, &cli.arch);
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            if n.is_multiple_of(100) {
                eprintln!(
                    "compiled {n} of {} graphs ({:.0} s)",
                    graphs.len(),
                    start.elapsed().as_secs_f64()
                );
            }
            r
        })
        .collect();
    let seconds = start.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    let mut failed = 0;
    for r in &results {
        if let Some((stage, message)) = &r.failure {
            failed += 1;
            writeln!(
                out,
                "FAIL (seed {}, index {}) [{}]: {message}",
                r.seed,
                r.index,
                stage.name()
            )
            .map_err(io)?;
        }
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for r in &results {
        if let Some((stage, message)) = &r.failure {
            let kind = differential::failure_kind(*stage, message, &[]);
            *kinds.entry(kind).or_default() += 1;
        }
    }
    print_kinds(&mut out, &kinds)?;
    let kernels: usize = results.iter().map(|r| r.kernels).sum();
    let assembled: usize = results.iter().map(|r| r.assembled).sum();
    let cached: usize = results.iter().map(|r| r.cached).sum();
    writeln!(
        out,
        "{} graphs: {kernels} kernels, {assembled} cubins assembled, {cached} from the cache or \
         shared, {failed} failed to compile, in {seconds:.1} s",
        results.len()
    )
    .map_err(io)?;
    if let Some(path) = &cli.json {
        let value = serde_json::json!({
            "seed": cli.seed,
            "archs": cli.arch,
            "seconds": seconds,
            "graphs": results.len(),
            "kernels": kernels,
            "assembled": assembled,
            "cached": cached,
            "failed": failed,
            "failure_kinds": kinds,
            "failures": results.iter().filter(|r| r.failure.is_some()).collect::<Vec<_>>(),
        });
        write_json(path, &value)?;
    }
    Ok(failed == 0)
}

/// A drawn graph with the reference's runs of it.
type Prepared = (differential::Drawn, differential::Ran, f64);

/// The run: the reference runs graphs ahead on every core (rayon, a chunk at a time) while the
/// subject (the CUDA backend is bound to this thread) runs them one after another.
fn run(cli: &Cli) -> Result<bool, String> {
    let mode = match cli.mode.as_str() {
        "graph" => ExecMode::Graph,
        "async" => ExecMode::Async,
        _ => ExecMode::Sync,
    };
    let subject: Box<dyn Backend> = if cli.subject == "cuda" {
        // Poisoning: arena and outputs start as NaN bytes, so an element no kernel writes fails.
        let cuda = CudaBackend::with_mode(mode).poisoning();
        cuda.gpu().map_err(|e| e.to_string())?;
        Box::new(cuda)
    } else {
        Box::new(RefBackend::checking())
    };
    let graphs = graphs(cli);
    let start = Instant::now();
    let mut results: Vec<GraphResult> = Vec::with_capacity(graphs.len());
    let mut out = std::io::stdout().lock();
    const CHUNK: usize = 64;
    std::thread::scope(|scope| -> Result<(), String> {
        let (send, receive) = mpsc::sync_channel::<Vec<Prepared>>(2);
        let work = &graphs;
        scope.spawn(move || {
            for chunk in work.chunks(CHUNK) {
                let prepared: Vec<Prepared> = chunk
                    .par_iter()
                    .map(|&(seed, index)| {
                        let t = Instant::now();
                        let drawn = differential::draw(seed, index);
                        let ran = differential::run_on(&RefBackend::new(), &drawn);
                        (drawn, ran, t.elapsed().as_secs_f64())
                    })
                    .collect();
                if send.send(prepared).is_err() {
                    return;
                }
            }
        });
        for prepared in receive {
            for (drawn, reference, ref_seconds) in prepared {
                let t = Instant::now();
                let ran = differential::run_on(subject.as_ref(), &drawn);
                let seconds = ref_seconds + t.elapsed().as_secs_f64();
                let mut result = differential::judge(&drawn, &reference, &ran, seconds);
                if let Some(line) = result.line() {
                    writeln!(out, "{line}").map_err(io)?;
                    out.flush().map_err(io)?;
                }
                // Passed graphs keep their tensors only where the oracle excused something.
                if !result.failed() && result.excused == 0 {
                    result.tensors.clear();
                }
                results.push(result);
                if results.len().is_multiple_of(500) {
                    eprintln!(
                        "{} of {} graphs ({:.0} s)",
                        results.len(),
                        graphs.len(),
                        start.elapsed().as_secs_f64()
                    );
                }
            }
        }
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let summary = Summary::of(&results);
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    for r in &results {
        if let differential::Outcome::Refused { reason } = &r.outcome {
            *refusals.entry(reason.clone()).or_default() += 1;
        }
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for kind in results.iter().filter_map(GraphResult::failure_kind) {
        *kinds.entry(kind).or_default() += 1;
    }
    print_kinds(&mut out, &kinds)?;
    let excused: usize = results.iter().map(|r| r.excused).sum();
    writeln!(
        out,
        "excused by the oracle (ill-conditioned): {excused} elements in {} passed graphs; \
         refused: {refusals:?}; {seconds:.1} s",
        summary.passed_with_excused
    )
    .map_err(io)?;
    if let Some(path) = &cli.json {
        let value = serde_json::json!({
            "seed": cli.seed,
            "kept": cli.kept,
            "mode": cli.mode,
            "reference": "ref",
            "subject": cli.subject,
            "seconds": seconds,
            "summary": summary,
            "refusals": refusals,
            "failure_kinds": kinds,
            "excused_elements": excused,
            "results": results,
        });
        write_json(path, &value)?;
    }
    writeln!(out, "{summary}").map_err(io)?;
    Ok(summary.failed == 0)
}

/// One line per kind of failure, the most frequent first: `N failed: KIND`.
fn print_kinds(out: &mut impl Write, kinds: &BTreeMap<String, usize>) -> Result<(), String> {
    let mut by_count: Vec<(&String, &usize)> = kinds.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1));
    for (kind, n) in by_count {
        writeln!(out, "{n} failed: {kind}").map_err(io)?;
    }
    Ok(())
}

/// Writes a report as pretty JSON.
fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), String> {
    let text =
        serde_json::to_string_pretty(value).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}
