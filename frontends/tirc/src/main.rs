//! `tirc`: the tir compiler driver.
//!
//! Every failure prints one line, `error: ...`, to stderr and exits with code 1; a refused
//! command leaves no output file behind.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tir_graph::file::{self, FileError};
use tir_graph::text::{self, ParseError};
use tir_graph::{Graph, GraphError};
use tir_lower::mesh::MeshSpec;
use tirc::{compile, run};

#[derive(Parser)]
#[command(name = "tirc", version, about = "The tir tensor compiler")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Sharding a graph over a mesh of devices (`tirc run`, `tirc explain`, `tirc compile`).
#[derive(clap::Args, Clone, Debug, Default)]
struct MeshFlags {
    /// Shard the graph over a mesh of N devices (the reference backend simulates them in one
    /// process); the sources not given with --shard are propagated.
    #[arg(long, value_name = "N")]
    devices: Option<u32>,
    /// Split input, parameter or state NAME along AXIS over the devices (repeatable).
    #[arg(long = "shard", value_name = "NAME=AXIS", value_parser = parse_shard)]
    shards: Vec<(String, usize)>,
    /// Shard over N devices by Megatron's rule: a weight multiplied by a whole activation is
    /// split by output column, the next product by input row (q/k/v and gate/up by output, o
    /// and down by input, attention by heads); no names needed.
    #[arg(long, value_name = "N")]
    tensor_parallel: Option<u32>,
}

impl MeshFlags {
    /// The mesh asked for, if any.
    fn mesh(&self) -> Result<Option<MeshSpec>, CliError> {
        let usage = |why: &str| CliError::Usage(why.to_string());
        let world = match (self.devices, self.tensor_parallel) {
            (Some(d), Some(t)) if d != t => {
                return Err(usage(&format!(
                    "--devices {d} and --tensor-parallel {t} disagree on the mesh's size"
                )))
            }
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) if self.shards.is_empty() => return Ok(None),
            (None, None) => return Err(usage("--shard needs --devices N or --tensor-parallel N")),
        };
        if world == 0 {
            return Err(usage("a mesh needs at least one device"));
        }
        let mut shardings = std::collections::BTreeMap::new();
        for (name, axis) in &self.shards {
            let split = tir_graph::collective::Sharding::Split(*axis);
            if shardings.insert(name.clone(), split).is_some() {
                return Err(usage(&format!("--shard {name} is given twice")));
            }
        }
        Ok(Some(MeshSpec {
            world,
            shardings,
            tensor_parallel: self.tensor_parallel.is_some(),
        }))
    }
}

fn parse_shard(arg: &str) -> Result<(String, usize), String> {
    match arg.split_once('=') {
        Some((name, axis)) if !name.is_empty() => axis
            .parse::<usize>()
            .map(|a| (name.to_string(), a))
            .map_err(|_| format!("`{axis}` is not an axis (a non-negative integer)")),
        _ => Err(format!("`{arg}` is not NAME=AXIS")),
    }
}

#[derive(Subcommand)]
enum Command {
    /// Verify a graph (.tir, .onnx or text form) and print its inputs, outputs and op counts.
    Check { file: PathBuf },
    /// Print a graph (.tir or text form) in the text form.
    Dump { file: PathBuf },
    /// Optimize a graph and print its kernels (ops, inputs, outputs, bytes) and the rules that fired.
    Explain {
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long, conflicts_with_all = ["tile", "dot"])]
        json: bool,
        /// Also lower the graph (for the ref backend's target) and print the tile program and
        /// each kernel's legality certificate.
        #[arg(long, conflicts_with = "dot")]
        tile: bool,
        /// Lower the graph (for the ref backend's target) and print the program as a Graphviz
        /// graph: kernels, buffers, reads and writes, schedule waves as ranks, and on a mesh one
        /// lane per device (render it with `dot -Tsvg`).
        #[arg(long)]
        dot: bool,
        /// Fix a symbolic dim to a size before compiling (repeatable): the program is static in
        /// it.
        #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
        dims: Vec<(String, u64)>,
        #[command(flatten)]
        mesh: MeshFlags,
    },
    /// Compile a graph for a backend (or load a package made by `tirc compile`), run it once,
    /// write each output as DIR/NAME.npy and print a summary (shapes, checksums, times).
    Run {
        /// A graph (.tir, .onnx or text form) or a package (told by its magic bytes or a .tirpkg
        /// extension).
        file: PathBuf,
        /// The backend to run on [default: ref for a graph; a package runs only on cuda].
        #[arg(long, value_name = "NAME")]
        backend: Option<String>,
        /// A tensor for an input or parameter, from a .npy file (repeatable).
        #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = parse_input)]
        inputs: Vec<(String, PathBuf)>,
        /// Parameters from a .safetensors file, by name (memory-mapped; --input overrides one).
        #[arg(long, value_name = "FILE.safetensors")]
        weights: Option<PathBuf>,
        /// Generate every input and parameter not given (also written to DIR): inputs uniform in
        /// [-1, 1), parameters scaled by 1/sqrt(fan-in).
        #[arg(long)]
        random_inputs: bool,
        /// The seed of --random-inputs: the i-th of the inputs, then the parameters (each in graph
        /// order), gets seed + i.
        #[arg(long, value_name = "N", default_value_t = 0)]
        seed: u64,
        /// The value of a symbolic dim (repeatable); else bound from the inputs, else 2. An
        /// ONNX model is imported with the dim fixed to it.
        #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
        dims: Vec<(String, u64)>,
        /// Where the .npy files go (created if missing).
        #[arg(long, value_name = "DIR", default_value = run::DEFAULT_OUTPUT_DIR)]
        output_dir: PathBuf,
        /// Run the reference backend in its checking mode: every kernel must write each element
        /// of its write regions exactly once, from one program, and nothing else.
        #[arg(long)]
        check: bool,
        /// After the run, run it 10 more times with every copy and kernel timed on the GPU, and
        /// print each kernel's median time, how it ran, its GB/s and TFLOP/s and its share of
        /// the run (backend cuda only).
        #[arg(long)]
        profile: bool,
        /// Write the last of those timed runs as a Chrome trace (JSON for Perfetto or
        /// chrome://tracing): one track per stream, one slice per copy and kernel (backend cuda
        /// only).
        #[arg(long, value_name = "FILE.json")]
        trace: Option<PathBuf>,
        #[command(flatten)]
        mesh: MeshFlags,
    },
    /// Parse a text-form graph and write it as a .tir file.
    Parse {
        text: PathBuf,
        #[arg(short, long, value_name = "FILE.tir")]
        output: PathBuf,
    },
    /// Import an ONNX model as a .tir graph; its initializers too large to embed become
    /// parameters, written with --weights-out.
    Import {
        model: PathBuf,
        #[arg(short, long, value_name = "OUT.tir", required = true)]
        output: PathBuf,
        /// Where the parameters' values go (a .safetensors file `tirc run --weights` reads).
        #[arg(long, value_name = "W.safetensors")]
        weights_out: Option<PathBuf>,
        /// Fix a symbolic dim to a size before compiling (repeatable): the program is static in
        /// it.
        #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
        dims: Vec<(String, u64)>,
    },
    /// Compile a graph ahead of time for GPU architectures (no GPU needed) and write the program
    /// with its cubins as a package that `tirc run` runs on a machine with a GPU.
    Compile {
        file: PathBuf,
        /// The backend to compile for (only cuda makes packages).
        #[arg(long, value_name = "NAME", default_value = run::PACKAGE_BACKEND)]
        backend: String,
        /// The GPU architectures, comma-separated (e.g. sm_90,sm_100).
        #[arg(long = "arch", value_name = "sm_NN[,...]", required = true, value_parser = compile::parse_archs)]
        archs: compile::Archs,
        #[arg(short, long, value_name = "OUT.tirpkg", required = true)]
        output: PathBuf,
        /// Fix a symbolic dim to a size before compiling (repeatable): the program is static in
        /// it.
        #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
        dims: Vec<(String, u64)>,
        #[command(flatten)]
        mesh: MeshFlags,
    },
    /// Quantize a weights file's 2-D weights (`[K, N]`, f16/bf16/f32; 1-D tensors are copied)
    /// into a checkpoint layout: int8 per output channel, FP8 e4m3 per row or 128x128 block, or
    /// int4 per group in AWQ's or GPTQ's packing, under the formats' tensor names.
    #[command(group(clap::ArgGroup::new("scheme").required(true).args(["int8", "fp8", "int4"])))]
    Quantize {
        weights: PathBuf,
        /// Symmetric int8, an f16 scale per output channel (NAME.qweight, NAME.scales).
        #[arg(long)]
        int8: bool,
        /// FP8 e4m3, an f32 scale per output row (NAME.weight, NAME.weight_scale), or per block
        /// with --block.
        #[arg(long)]
        fp8: bool,
        /// FP8 scales per SIDE x SIDE block (NAME.weight_scale_inv); 128 only (DeepSeek-V3's).
        #[arg(long, value_name = "SIDE", requires = "fp8")]
        block: Option<u64>,
        /// Asymmetric int4, a scale and a zero per group of rows (NAME.qweight, NAME.qzeros,
        /// NAME.scales, and NAME.g_idx for GPTQ).
        #[arg(long)]
        int4: bool,
        /// The int4 packing.
        #[arg(long, value_name = "awq|gptq", default_value = "awq", value_parser = ["awq", "gptq"], requires = "int4")]
        format: String,
        /// Rows of K per int4 group.
        #[arg(long, value_name = "G", default_value_t = 128, requires = "int4")]
        group: u64,
        #[arg(short, long, value_name = "Q.safetensors", required = true)]
        output: PathBuf,
    },
    /// Check what the CUDA backend needs here (toolchain, driver and GPU, kernel cache); exit 1
    /// if something is missing.
    Doctor,
}

/// Why a command failed; each message names the file.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{path}: {source}")]
    File { path: String, source: FileError },
    #[error("{path}: {source}")]
    Parse { path: String, source: ParseError },
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a .tir file and not UTF-8 text")]
    NotText { path: String },
    #[error("{path}: a tir package, not a graph (tirc run runs it)")]
    IsPackage { path: String },
    #[error("{0}")]
    Package(#[from] backend_cuda::package::PackageError),
    #[error("{path}: {source}")]
    Optimize {
        path: String,
        source: tir_opt::OptError,
    },
    #[error("{path}: {source}")]
    Lower {
        path: String,
        source: Box<tir_lower::LowerError>,
    },
    #[error(transparent)]
    Run(#[from] run::RunError),
    #[error(transparent)]
    Compile(#[from] compile::CompileError),
    #[error("the CUDA backend is not usable here (see above)")]
    NotUsable,
    #[error("{0}")]
    Usage(String),
    #[error("writing to stdout: {0}")]
    Stdout(std::io::Error),
    #[error("{}", onnx_message(path, source))]
    Onnx {
        path: String,
        source: tir_onnx::OnnxError,
    },
    #[error("{path}: --dim {name}: the graph has no symbolic dim `{name}` (its symbolic dims: {})", if .dims.is_empty() { "none".to_string() } else { .dims.join(", ") })]
    UnknownDim {
        path: String,
        name: String,
        dims: Vec<String>,
    },
    #[error("{path}: {source}")]
    Specialize { path: String, source: GraphError },
    #[error("{path}: the model has {count} initializers too large to embed (parameters); give --weights-out W.safetensors to write them")]
    WeightsOutNeeded { path: String, count: usize },
    #[error("{0}")]
    Weights(#[from] tir_graph::weights::WeightsError),
    #[error(transparent)]
    Quantize(#[from] tirc::quantize::QuantizeError),
}

/// An import error with the file named once (reading and decoding errors name it already).
fn onnx_message(path: &str, e: &tir_onnx::OnnxError) -> String {
    match e {
        tir_onnx::OnnxError::Io { .. } | tir_onnx::OnnxError::Decode { .. } => e.to_string(),
        _ => format!("{path}: {e}"),
    }
}

/// `NAME=FILE.npy` of `--input`.
fn parse_input(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!("`{arg}` is not NAME=FILE.npy")),
    }
}

/// `NAME=N` of `--dim`, with N a positive integer.
fn parse_dim(arg: &str) -> Result<(String, u64), String> {
    let Some((name, value)) = arg.split_once('=') else {
        return Err(format!("`{arg}` is not NAME=N"));
    };
    match value.parse::<u64>() {
        Ok(n) if n > 0 && !name.is_empty() => Ok((name.to_string(), n)),
        _ if name.is_empty() => Err(format!("`{arg}` is not NAME=N")),
        _ => Err(format!("`{value}` is not a positive integer")),
    }
}

fn main() -> ExitCode {
    let cli = match tirc::parse_cli::<Cli>("tirc") {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`tirc dump f | head`) is the reader's choice, not a failure.
        Err(CliError::Stdout(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Check { file } => {
            let graph = load(&file, &[])?;
            print_stdout(&summary(&file, &graph))
        }
        Command::Dump { file } => print_stdout(&text::print(&load(&file, &[])?)),
        Command::Explain {
            file,
            json,
            tile,
            dot,
            dims,
            mesh,
        } => {
            let whole = load(&file, &dims)?;
            let mesh = mesh.mesh()?;
            let (graph, plan) = match &mesh {
                Some(mesh) => {
                    let (local, plan) = shard_for_explain(&file, &whole, mesh)?;
                    (local, Some(plan))
                }
                None => (whole, None),
            };
            if let Some(plan) = plan.as_ref().filter(|_| !json && !dot) {
                print_stdout(plan)?;
            }
            if tile {
                return print_stdout(&explain_tile(&file, &graph)?);
            }
            if dot {
                let compiled = lower_for_ref(&file, &graph)?;
                let title = format!("{} (ref target)", file.display());
                return print_stdout(&match &mesh {
                    Some(mesh) => tirc::dot::to_mesh_dot(&compiled, &title, mesh.world),
                    None => tirc::dot::to_dot(&compiled, &title),
                });
            }
            let (fused, report) = tir_opt::optimize(&graph, &tir_opt::OptOptions::default())
                .map_err(|source| CliError::Optimize {
                    path: file.display().to_string(),
                    source,
                })?;
            let shown = if json {
                tir_opt::explain::to_json(&fused, &report) + "\n"
            } else {
                tir_opt::explain::to_text(&fused, &report)
            };
            print_stdout(&shown)
        }
        Command::Run {
            file,
            backend,
            inputs,
            weights,
            random_inputs,
            seed,
            dims,
            output_dir,
            check,
            profile,
            trace,
            mesh,
        } => {
            let mesh = mesh.mesh()?;
            let (loaded, model_parameters, dims) = if is_onnx(&file) {
                // The dims are fixed at import: nothing is left to bind.
                let imported = import_onnx(&file, &dims)?;
                (
                    Runnable::Graph(imported.graph),
                    imported.weights,
                    Vec::new(),
                )
            } else {
                (load_runnable(&file)?, Vec::new(), dims)
            };
            let args = run::RunArgs {
                model_parameters,
                file,
                backend,
                inputs,
                weights,
                random_inputs,
                seed,
                dims,
                output_dir,
                check,
                profile,
                trace,
                mesh,
            };
            let subject = match &loaded {
                Runnable::Graph(graph) => run::Subject::Graph(graph),
                Runnable::Package(package) => run::Subject::Package(package),
            };
            print_stdout(&run::run(subject, &args)?)
        }
        Command::Import {
            model,
            output,
            weights_out,
            dims,
        } => {
            let imported = import_onnx(&model, &dims)?;
            let count = imported.weights.len();
            if count > 0 && weights_out.is_none() {
                return Err(CliError::WeightsOutNeeded {
                    path: model.display().to_string(),
                    count,
                });
            }
            if let Some(w) = &weights_out {
                let tensors: Vec<(&str, &tir_graph::HostTensor)> = imported
                    .weights
                    .iter()
                    .map(|(n, t)| (n.as_str(), t))
                    .collect();
                tir_graph::weights::write_safetensors(w, &tensors)?;
            }
            file::write(&output, &imported.graph).map_err(|source| CliError::File {
                path: output.display().to_string(),
                source,
            })?;
            print_stdout(&format!(
                "imported {} (opset {}): {} nodes, {count} parameters\n",
                model.display(),
                imported.opset,
                imported.graph.len()
            ))
        }
        Command::Parse { text, output } => {
            let graph = parse_text(&text, &read_bytes(&text)?)?;
            file::write(&output, &graph).map_err(|source| CliError::File {
                path: output.display().to_string(),
                source,
            })
        }
        Command::Compile {
            file,
            backend,
            archs,
            output,
            dims,
            mesh,
        } => {
            let mut args = compile::CompileArgs::new(file.clone(), &backend, archs, output)?;
            args.mesh = mesh.mesh()?;
            let graph = load(&file, &dims)?;
            print_stdout(&compile::compile(&graph, &args)?)
        }
        Command::Quantize {
            weights,
            int8,
            fp8,
            block,
            int4,
            format,
            group,
            output,
        } => {
            let scheme = quantize_scheme(int8, fp8, block, int4, &format, group)?;
            let done = tirc::quantize::quantize_file(&weights, &output, scheme)?;
            print_stdout(&format!(
                "{}: {} weights quantized ({scheme:?}), {} tensors copied, {} bytes (from {})\n",
                output.display(),
                done.weights,
                done.copied,
                done.bytes.1,
                done.bytes.0
            ))
        }
        Command::Doctor => {
            let (report, usable) = backend_cuda::doctor();
            print_stdout(&report)?;
            if usable {
                Ok(())
            } else {
                Err(CliError::NotUsable)
            }
        }
    }
}

/// The layout `tirc quantize`'s flags ask for (clap makes exactly one of the three flags set).
fn quantize_scheme(
    int8: bool,
    fp8: bool,
    block: Option<u64>,
    int4: bool,
    format: &str,
    group: u64,
) -> Result<tir_graph::quant::WeightFormat, CliError> {
    use tir_graph::quant::{Fp8Scale, WeightFormat, FP8_BLOCK};
    Ok(match (int8, fp8, int4, block) {
        (true, ..) => WeightFormat::Int8,
        (_, true, _, None) => WeightFormat::Fp8(Fp8Scale::Row),
        (_, true, _, Some(FP8_BLOCK)) => WeightFormat::Fp8(Fp8Scale::Block),
        (_, true, _, Some(side)) => {
            return Err(CliError::Usage(format!(
                "--block {side}: FP8 blocks are {FP8_BLOCK}x{FP8_BLOCK} (DeepSeek-V3's layout)"
            )))
        }
        _ if group == 0 => return Err(CliError::Usage("--group 0: a group needs rows".into())),
        _ if format == "gptq" => WeightFormat::Gptq { group },
        _ => WeightFormat::Awq { group },
    })
}

/// `graph` (read from `path`) through the whole pipeline for the ref backend's target.
/// The graph each device of `mesh` runs, and the plan in words: the mesh's size and each
/// source's sharding.
fn shard_for_explain(
    path: &Path,
    whole: &Graph,
    mesh: &MeshSpec,
) -> Result<(Graph, String), CliError> {
    let sharded = mesh.shard(whole).map_err(|source| CliError::Lower {
        path: path.display().to_string(),
        source: Box::new(source.into()),
    })?;
    let mut plan = format!(
        "mesh of {} devices; each runs the graph below on its shards
",
        mesh.world
    );
    for (name, sharding) in &sharded.plan.sources {
        plan.push_str(&format!("  {name}: {sharding}\n"));
    }
    plan.push('\n');
    Ok((sharded.local, plan))
}

fn lower_for_ref(path: &Path, graph: &Graph) -> Result<tir_lower::Compiled, CliError> {
    use tir_lower::Backend;
    let target = backend_ref::RefBackend::new().target();
    tir_lower::compile_graph(graph, &target, &tir_opt::Limits::default()).map_err(|source| {
        CliError::Lower {
            path: path.display().to_string(),
            source: Box::new(source),
        }
    })
}

/// `tirc explain --tile`: the kernel report of the graph as lowered for the ref backend, the
/// tile program, and each kernel's certificate in plain words.
fn explain_tile(path: &Path, graph: &Graph) -> Result<String, CliError> {
    use tir_lower::legality::LaunchCheck;
    let compiled = lower_for_ref(path, graph)?;
    let program = &compiled.program;
    let mut s = tir_opt::explain::to_text(&compiled.fused, &compiled.report);
    s.push_str("\ntile program (ref target):\n");
    s.push_str(&tir_lower::program::print_program(program));
    s.push_str("\ncertificates:\n");
    for c in &program.certificates {
        s.push_str(&format!("kernel {}:\n", c.kernel));
        if c.facts.is_empty() && c.checks.is_empty() {
            s.push_str("  (no facts)\n");
        }
        for fact in &c.facts {
            s.push_str(&format!("  - {fact}\n"));
        }
        for check in &c.checks {
            let LaunchCheck::SliceInBounds {
                offset_buffer,
                len,
                size,
                what,
            } = check;
            let buffer = program
                .buffers
                .get(*offset_buffer)
                .map_or("?", |b| b.name.as_str());
            s.push_str(&format!(
                "  - checked at launch: {what}: the offset in buffer {offset_buffer} ({buffer:?}) is at least 0 and offset + {len} <= {size}\n"
            ));
        }
    }
    Ok(s)
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// What `tirc run` runs: a graph, or a package.
enum Runnable {
    Graph(Graph),
    Package(Box<backend_cuda::package::Package>),
}

/// A package (told by its magic bytes, whatever the extension, or by a `.tirpkg` extension, so
/// that a package cut inside its magic or with a damaged one is refused as a package, not parsed
/// as the text form), else a graph (see [`load`]).
fn load_runnable(path: &Path) -> Result<Runnable, CliError> {
    let bytes = read_bytes(path)?;
    let named_package = path.extension().is_some_and(|e| e == "tirpkg");
    if bytes.starts_with(&backend_cuda::package::MAGIC) || named_package {
        let package = backend_cuda::package::from_bytes(&bytes, path)?;
        return Ok(Runnable::Package(Box::new(package)));
    }
    decode_graph(path, &bytes).map(Runnable::Graph)
}

/// Whether `path` names an ONNX model (by its extension).
fn is_onnx(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "onnx")
}

/// Imports the ONNX model at `path` with the symbolic dims of `fixed` fixed to their sizes.
fn import_onnx(path: &Path, fixed: &[(String, u64)]) -> Result<tir_onnx::Imported, CliError> {
    let options = tir_onnx::ImportOptions {
        fixed_dims: fixed.iter().cloned().collect(),
        ..Default::default()
    };
    tir_onnx::import_file(path, &options).map_err(|source| CliError::Onnx {
        path: path.display().to_string(),
        source,
    })
}

/// A graph from an ONNX model (its parameters' values dropped), a `.tir` file (told by its magic
/// bytes or its extension) or the text form, with the symbolic dims of `fixed` fixed to their
/// sizes.
fn load(path: &Path, fixed: &[(String, u64)]) -> Result<Graph, CliError> {
    if is_onnx(path) {
        return import_onnx(path, fixed).map(|imported| imported.graph);
    }
    let bytes = read_bytes(path)?;
    if bytes.starts_with(&backend_cuda::package::MAGIC) {
        return Err(CliError::IsPackage {
            path: path.display().to_string(),
        });
    }
    let graph = decode_graph(path, &bytes)?;
    specialize(path, graph, fixed)
}

/// `graph` with the dims of `fixed` fixed; each must be a symbolic dim of the graph.
fn specialize(path: &Path, graph: Graph, fixed: &[(String, u64)]) -> Result<Graph, CliError> {
    if fixed.is_empty() {
        return Ok(graph);
    }
    let symbols: std::collections::BTreeSet<String> = graph
        .node_ids()
        .flat_map(|id| graph.ty(id).shape.dims().to_vec())
        .flat_map(|d| d.symbols())
        .collect();
    if let Some((name, _)) = fixed.iter().find(|(n, _)| !symbols.contains(n)) {
        return Err(CliError::UnknownDim {
            path: path.display().to_string(),
            name: name.clone(),
            dims: symbols.into_iter().collect(),
        });
    }
    graph
        .specialize(&fixed.iter().cloned().collect())
        .map_err(|source| CliError::Specialize {
            path: path.display().to_string(),
            source,
        })
}

fn decode_graph(path: &Path, bytes: &[u8]) -> Result<Graph, CliError> {
    let is_binary = file::has_magic(bytes) || path.extension().is_some_and(|e| e == "tir");
    if is_binary {
        file::decode(bytes).map_err(|source| CliError::File {
            path: path.display().to_string(),
            source,
        })
    } else {
        parse_text(path, bytes)
    }
}

fn parse_text(path: &Path, bytes: &[u8]) -> Result<Graph, CliError> {
    let path = path.display().to_string();
    let Ok(source) = std::str::from_utf8(bytes) else {
        return Err(CliError::NotText { path });
    };
    text::parse(source).map_err(|source| CliError::Parse { path, source })
}

fn print_stdout(s: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::Stdout)
}

/// What `tirc check` prints: the run-time interface and the op counts.
fn summary(path: &Path, graph: &Graph) -> String {
    let mut s = format!("{}: ok, {} nodes\n", path.display(), graph.len());
    let mut section = |title: &str, items: Vec<(String, tir_graph::NodeId)>| {
        if items.is_empty() {
            return;
        }
        s.push_str(&format!("{title}:\n"));
        for (name, id) in items {
            s.push_str(&format!("  {name:?}: {}\n", graph.ty(id)));
        }
    };
    section("inputs", graph.inputs());
    section("parameters", graph.parameters());
    section("states", graph.states());
    section("outputs", graph.outputs().to_vec());
    if !graph.state_updates().is_empty() {
        s.push_str("state updates:\n");
    }
    for update in graph.state_updates() {
        let target = graph.operands(update)[0];
        let state = graph.node(target).op.source_name().unwrap_or_default();
        let op = &graph.node(update).op;
        s.push_str(&format!("  {state:?} <- {op} ({update})\n"));
    }
    let counts: Vec<String> = graph
        .op_counts()
        .into_iter()
        .map(|(op, n)| format!("{op} {n}"))
        .collect();
    s.push_str(&format!("ops: {}\n", counts.join(", ")));
    s
}
