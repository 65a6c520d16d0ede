//! `tirc run`: compile a graph for a backend (or load an AOT package on the CUDA backend), run it
//! once on given or random inputs, write every output as a `.npy` file and print a summary.
//!
//! A graph and a package differ only in where the run's `Interface` comes from (the graph, or
//! the package program's signature) and in how the executable is made (lowering and the
//! backend's compile, or [`CudaBackend::load_package`]); everything else is one code path.
//!
//! Tensors stay in their dtypes from the files to the backend and back ([`HostTensor`]); a
//! `--weights` file is memory-mapped and its tensors are set as parameters without a copy on
//! the host. Parameters are set on the executable once, then it runs with the inputs.
//!
//! Everything that can be refused is checked before anything is written: the backend, the
//! `--dim`, `--input` and `--weights` arguments, every input file and weight (its element type
//! and shape against the interface's), the missing inputs and parameters, the output file
//! names, lowering and the run itself. The files are written last, each atomically; if one
//! cannot be written, those already written by this run are removed again (and the output
//! directory, if this run created it; a file of an earlier run that this run had already
//! replaced stays replaced).

use crate::{npy, profile};
use backend_cuda::package::Package;
use backend_cuda::CudaBackend;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tir_graph::eval::concrete_dims;
use tir_graph::file::{self, FileError};
use tir_graph::weights::{WeightsError, WeightsFile};
use tir_graph::{DType, Dim, Graph, HostTensor, TensorType};
use tir_lower::mesh::{compile_sharded, MeshSpec, ShardedExecutable};
use tir_lower::{Backend, BackendError, Executable, LowerError, Registry, Signature, TensorRef};

/// Where outputs go without `--output-dir`.
pub const DEFAULT_OUTPUT_DIR: &str = "tir-out";

/// The value of a symbolic dim that neither `--dim` nor a given input binds.
pub const DEFAULT_DIM: u64 = 2;

/// The backend of a graph without `--backend`.
pub const DEFAULT_BACKEND: &str = "ref";

/// The only backend a package runs on (and its default).
pub const PACKAGE_BACKEND: &str = "cuda";

/// What `tirc run` runs.
#[derive(Clone, Copy)]
pub enum Subject<'a> {
    /// A graph, lowered and compiled here for the chosen backend.
    Graph(&'a Graph),
    /// An AOT package, loaded on [`PACKAGE_BACKEND`].
    Package(&'a Package),
}

/// What `tirc run` was asked to do.
pub struct RunArgs {
    /// Parameters that come with the model (an ONNX file's initializers), set unless given
    /// with --input or found in --weights.
    pub model_parameters: Vec<(String, HostTensor<'static>)>,
    pub file: PathBuf,
    /// `None`: [`DEFAULT_BACKEND`] for a graph, [`PACKAGE_BACKEND`] for a package.
    pub backend: Option<String>,
    pub inputs: Vec<(String, PathBuf)>,
    /// A `.safetensors` file of parameters.
    pub weights: Option<PathBuf>,
    pub random_inputs: bool,
    pub seed: u64,
    pub dims: Vec<(String, u64)>,
    pub output_dir: PathBuf,
    pub check: bool,
    /// Print each kernel's time on the GPU (CUDA only; see [`crate::profile`]).
    pub profile: bool,
    /// Write a Chrome trace of the run's copies and kernels here (CUDA only).
    pub trace: Option<PathBuf>,
    /// Run sharded over a mesh of devices (`--devices`, `--shard`, `--tensor-parallel`).
    pub mesh: Option<MeshSpec>,
}

/// Why `tirc run` refused or failed. One line each, naming the argument or file.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("unknown backend `{name}` (known: {})", .known.join(", "))]
    UnknownBackend { name: String, known: Vec<String> },
    #[error("{path}: a package runs only on backend `{PACKAGE_BACKEND}`, not `{name}`")]
    PackageBackend { path: String, name: String },
    #[error(
        "--check is the checking mode of backend `ref`; it does not apply to backend `{backend}`"
    )]
    CheckNeedsRef { backend: String },
    #[error("{path}: a package's mesh is set when it is compiled (`tirc compile --tensor-parallel N`); run it without --devices, --shard or --tensor-parallel")]
    PackageMesh { path: String },
    #[error("{flag} times kernels on the GPU of backend `cuda`, not on backend `{backend}`")]
    ProfileNeedsCuda { flag: &'static str, backend: String },
    #[error("--dim {name}: the {what} has no symbolic dim `{name}` ({})", names_or(.known, "it has none"))]
    UnknownDim {
        what: &'static str,
        name: String,
        known: Vec<String>,
    },
    #[error("--dim {name} is given twice")]
    DuplicateDim { name: String },
    #[error(
        "--input {name}: the {what} has no input or parameter `{name}` ({})",
        names_or(.known, "it has none")
    )]
    UnknownInput {
        what: &'static str,
        name: String,
        known: Vec<String>,
    },
    #[error("--input {name} is given twice")]
    DuplicateInput { name: String },
    #[error("{path}: {source}")]
    ReadNpy {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Npy { path: String, source: npy::NpyError },
    #[error("{given}: expected {expected}, got {got}")]
    WrongType {
        given: String,
        expected: String,
        got: String,
    },
    #[error("{given}: dim `{dim}` is {value} here, but {bound_by} makes it {bound}")]
    DimConflict {
        given: String,
        dim: String,
        value: u64,
        bound: u64,
        bound_by: String,
    },
    #[error(
        "no tensor for {} (give --input NAME=FILE.npy or --weights FILE.safetensors, or --random-inputs to generate them)",
        .missing.join(", ")
    )]
    Missing { missing: Vec<String> },
    #[error("{0}")]
    Weights(#[from] WeightsError),
    #[error(
        "{path}: tensor {name:?} is an input of the {what}, not a parameter: give it with --input"
    )]
    WeightIsInput {
        path: String,
        name: String,
        what: &'static str,
    },
    #[error("{what} `{name}` cannot be written as a file: its name is not a plain file name")]
    BadFileName { what: &'static str, name: String },
    #[error("output `{name}` and the generated {what} `{name}` would both be written to {path}")]
    NameClash {
        name: String,
        what: &'static str,
        path: String,
    },
    #[error("{name}: {source}")]
    Shape {
        name: String,
        source: Box<tir_graph::EvalError>,
    },
    #[error("{path}: {source}")]
    Lower {
        path: String,
        source: Box<LowerError>,
    },
    #[error("{path}: {source}")]
    Backend { path: String, source: BackendError },
    #[error("{path}: the run returned no output `{name}`")]
    MissingOutput { path: String, name: String },
    #[error("{path}: {source}")]
    CreateDir {
        path: String,
        source: std::io::Error,
    },
    #[error("--trace {path}: the run writes an output or generated input there")]
    TraceClash { path: String },
    #[error("{0}")]
    Write(FileError),
}

fn names_or(names: &[String], none: &str) -> String {
    if names.is_empty() {
        none.to_string()
    } else {
        format!("it has: {}", names.join(", "))
    }
}

/// The CUDA backend as `tirc` uses it: the environment's settings, compile progress on stderr.
pub fn cuda_backend() -> CudaBackend {
    CudaBackend::new().with_progress(std::sync::Arc::new(crate::progress::StderrProgress::new()))
}

/// The backends compiled into `tirc`. `check` selects each backend's checking variant.
pub fn registry(check: bool) -> Registry {
    let mut registry = Registry::new();
    let reference = if check {
        backend_ref::RefBackend::checking()
    } else {
        backend_ref::RefBackend::new()
    };
    registry.register(Box::new(reference));
    registry.register(Box::new(cuda_backend()));
    registry
}

/// One tensor a run binds.
struct Source {
    name: String,
    ty: TensorType,
    /// `"input"` or `"parameter"`.
    kind: &'static str,
}

/// What a run binds and returns, from a graph or from a package program's signature.
struct Interface {
    /// `"graph"` or `"package"`, for messages.
    what: &'static str,
    /// The inputs, then the parameters, each in graph order (as a lowered program's
    /// signature lists them, so a graph and its package get the same random inputs).
    sources: Vec<Source>,
    outputs: Vec<String>,
    dims: BTreeSet<String>,
}

impl Interface {
    fn of_graph(graph: &Graph) -> Interface {
        let typed = |list: Vec<(String, tir_graph::NodeId)>, kind| {
            list.into_iter().map(move |(name, id)| Source {
                name,
                ty: graph.ty(id).clone(),
                kind,
            })
        };
        let mut dims = BTreeSet::new();
        for id in graph.node_ids() {
            for d in graph.ty(id).shape.dims() {
                dims.extend(d.symbols());
            }
        }
        Interface {
            what: "graph",
            sources: typed(graph.inputs(), "input")
                .chain(typed(graph.parameters(), "parameter"))
                .collect(),
            outputs: graph.outputs().iter().map(|(n, _)| n.clone()).collect(),
            dims,
        }
    }

    fn of_signature(signature: &Signature) -> Interface {
        let inputs = signature.inputs.iter().map(|s| (s, "input"));
        let parameters = signature.parameters.iter().map(|s| (s, "parameter"));
        Interface {
            what: "package",
            sources: inputs
                .chain(parameters)
                .map(|((name, ty), kind)| Source {
                    name: name.clone(),
                    ty: ty.clone(),
                    kind,
                })
                .collect(),
            outputs: signature.outputs.iter().map(|(n, _)| n.clone()).collect(),
            dims: signature.dims.iter().cloned().collect(),
        }
    }
}

/// How the executable of a run is made.
enum Maker<'a> {
    /// Lower the graph for `backend`'s target (not CUDA's), then compile it there.
    Lower {
        graph: &'a Graph,
        backend: &'a dyn Backend,
    },
    /// On the CUDA backend: lower the graph and compile it, or load the package's cubins.
    Cuda {
        subject: Subject<'a>,
        /// Holds the GPU (opened on first use) for as long as the maker lives, so that an
        /// executable made here (declared after the maker) is dropped while its context is alive.
        backend: Box<CudaBackend>,
    },
}

/// A run's executable: CUDA's as itself, for the profile and the trace.
enum Made {
    Cuda(Box<backend_cuda::CudaExecutable>),
    Other(Box<dyn Executable>),
}

impl Made {
    fn executable(&mut self) -> &mut dyn Executable {
        match self {
            Made::Cuda(exe) => exe.as_mut(),
            Made::Other(exe) => exe.as_mut(),
        }
    }
}

impl Maker<'_> {
    fn backend(&self) -> &'static str {
        match self {
            Maker::Lower { backend, .. } => backend.name(),
            Maker::Cuda { .. } => PACKAGE_BACKEND,
        }
    }

    fn interface(&self) -> Interface {
        match self {
            Maker::Lower { graph, .. }
            | Maker::Cuda {
                subject: Subject::Graph(graph),
                ..
            } => Interface::of_graph(graph),
            Maker::Cuda {
                subject: Subject::Package(package),
                ..
            } => Interface::of_signature(
                package
                    .mesh
                    .as_ref()
                    .map_or(&package.program.signature, |m| &m.whole),
            ),
        }
    }

    /// A graph cut for `mesh` and compiled for the backend's devices, run with whole tensors.
    fn make_sharded(&self, mesh: &MeshSpec, path: &str) -> Result<(Made, usize, String), RunError> {
        let (graph, backend): (&Graph, &dyn Backend) = match self {
            Maker::Lower { graph, backend } => (graph, *backend),
            Maker::Cuda {
                subject: Subject::Graph(graph),
                backend,
            } => (graph, backend.as_ref()),
            Maker::Cuda {
                subject: Subject::Package(_),
                ..
            } => return Err(RunError::PackageMesh { path: path.into() }),
        };
        let started = Instant::now();
        let sharded = compile_sharded(graph, mesh, &backend.target(), &tir_opt::Limits::default())
            .map_err(|source| RunError::Lower {
                path: path.into(),
                source: Box::new(source),
            })?;
        let lowered_in = started.elapsed();
        let started = Instant::now();
        let devices = backend
            .compile_mesh(&sharded.compiled.program, mesh.world)
            .map_err(|source| RunError::Backend {
                path: path.into(),
                source,
            })?;
        let how = format!(
            "{}, on a mesh of {} devices",
            lowered_and_compiled(lowered_in, started.elapsed()),
            mesh.world
        );
        let kernels = sharded.compiled.program.kernels.len();
        let exe = ShardedExecutable::new(devices, &sharded);
        Ok((Made::Other(Box::new(exe)), kernels, how))
    }

    /// The executable, its kernel count, and how it was made (with times) for the summary.
    fn make(
        &self,
        file: &Path,
        mesh: Option<&MeshSpec>,
    ) -> Result<(Made, usize, String), RunError> {
        let path = file.display().to_string();
        let backend_error = |source| RunError::Backend {
            path: path.clone(),
            source,
        };
        let lower = |graph: &Graph, backend: &dyn Backend| {
            let started = Instant::now();
            tir_lower::compile_graph(graph, &backend.target(), &tir_opt::Limits::default())
                .map(|compiled| (compiled.program, started.elapsed()))
                .map_err(|source| RunError::Lower {
                    path: path.clone(),
                    source: Box::new(source),
                })
        };
        let started = Instant::now();
        if let Some(mesh) = mesh {
            return self.make_sharded(mesh, &path);
        }
        let (made, program, how) = match self {
            Maker::Lower { graph, backend } => {
                let (program, lowered_in) = lower(graph, *backend)?;
                let started = Instant::now();
                let executable = backend.compile(&program).map_err(backend_error)?;
                let how = lowered_and_compiled(lowered_in, started.elapsed());
                (Made::Other(executable), program, how)
            }
            Maker::Cuda {
                subject: Subject::Graph(graph),
                backend,
            } => {
                let (program, lowered_in) = lower(graph, backend.as_ref())?;
                let started = Instant::now();
                backend.matmul_policy().map_err(backend_error)?;
                let executable = backend.compile_cuda(&program).map_err(backend_error)?;
                let how = lowered_and_compiled(lowered_in, started.elapsed());
                (Made::Cuda(Box::new(executable)), program, how)
            }
            Maker::Cuda {
                subject:
                    Subject::Package(
                        package @ Package {
                            mesh: Some(mesh), ..
                        },
                    ),
                backend,
            } => {
                let devices = backend.load_package_mesh(package).map_err(backend_error)?;
                let how = format!(
                    "package, backend load {}, on a mesh of {} devices",
                    millis(started.elapsed()),
                    mesh.plan.world
                );
                let (plan, whole) = (mesh.plan.clone(), mesh.whole.clone());
                let exe = ShardedExecutable::from_plan(Box::new(devices), plan, whole);
                let kernels = package.program.kernels.len();
                return Ok((Made::Other(Box::new(exe)), kernels, how));
            }
            Maker::Cuda {
                subject: Subject::Package(package),
                backend,
            } => {
                let executable = backend.load_package(package).map_err(backend_error)?;
                let how = format!("package, backend load {}", millis(started.elapsed()));
                (
                    Made::Cuda(Box::new(executable)),
                    package.program.clone(),
                    how,
                )
            }
        };
        Ok((made, program.kernels.len(), how))
    }
}

fn lowered_and_compiled(lowered_in: Duration, compiled_in: Duration) -> String {
    format!(
        "lowering {}, backend compile {}",
        millis(lowered_in),
        millis(compiled_in)
    )
}

/// Picks the backend (`--backend`, else the subject's default) and how to make the executable.
fn maker<'a>(
    subject: Subject<'a>,
    args: &RunArgs,
    registry: &'a Registry,
) -> Result<Maker<'a>, RunError> {
    let maker = match subject {
        Subject::Graph(_) if args.backend.as_deref() == Some(PACKAGE_BACKEND) => Maker::Cuda {
            subject,
            backend: Box::new(cuda_backend()),
        },
        Subject::Graph(graph) => {
            let name = args.backend.as_deref().unwrap_or(DEFAULT_BACKEND);
            let Some(backend) = registry.get(name) else {
                return Err(RunError::UnknownBackend {
                    name: name.to_string(),
                    known: registry.names().iter().map(|s| s.to_string()).collect(),
                });
            };
            Maker::Lower { graph, backend }
        }
        Subject::Package(_) => match args.backend.as_deref() {
            None | Some(PACKAGE_BACKEND) => Maker::Cuda {
                subject,
                backend: Box::new(CudaBackend::new()),
            },
            Some(name) => {
                return Err(RunError::PackageBackend {
                    path: args.file.display().to_string(),
                    name: name.to_string(),
                })
            }
        },
    };
    if args.check && maker.backend() != "ref" {
        return Err(RunError::CheckNeedsRef {
            backend: maker.backend().to_string(),
        });
    }
    let timed = [
        ("--profile", args.profile),
        ("--trace", args.trace.is_some()),
    ];
    if let Some((flag, _)) = timed.iter().find(|(_, on)| *on) {
        if maker.backend() != PACKAGE_BACKEND {
            return Err(RunError::ProfileNeedsCuda {
                flag,
                backend: maker.backend().to_string(),
            });
        }
    }
    Ok(maker)
}

/// Where a source's tensor came from.
enum Origin {
    File(PathBuf),
    Weights,
    Random,
}

/// A random tensor of what a model would see: an input of unit scale (uniform in [-1, 1)); a
/// parameter scaled by the inverse square root of its fan-in, the second-to-last dim (the rows
/// of a `[in, out]` weight that an activation is multiplied by), so that products keep unit
/// scale through deep graphs. A parameter of rank 0 or 1 (a bias, a norm's scale) is of unit
/// scale.
fn random_tensor(
    source: &Source,
    dims: &[u64],
    seed: u64,
) -> Result<HostTensor<'static>, tir_graph::TensorError> {
    let fan_in = match dims {
        [.., rows, _] if source.kind == "parameter" => (*rows).max(1),
        _ => 1,
    };
    HostTensor::random(source.ty.dtype, dims, seed, 1.0 / (fan_in as f64).sqrt())
}

/// Where a dim's value came from, for the summary and for messages.
fn describe_binding(by: &Binding) -> String {
    match by {
        Binding::Flag => "--dim".to_string(),
        Binding::Input(name) => format!("input `{name}`"),
        Binding::Default => "the default".to_string(),
    }
}

#[derive(Clone)]
enum Binding {
    Flag,
    Input(String),
    Default,
}

/// Whether `name` can be a file name inside the output directory as it is.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).file_name() == Some(std::ffi::OsStr::new(name))
}

/// A summary line's checksum of `t`: the sum of its values and FNV-1a 64 of its element bytes.
fn checksum(t: &HostTensor) -> String {
    let sum: f64 = t.to_f64().data.iter().sum();
    let fnv = file::checksum(t.bytes());
    format!("sum={sum:.6} fnv1a={fnv:016x}")
}

fn millis(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Runs `tirc run`; returns the summary to print.
pub fn run(subject: Subject, args: &RunArgs) -> Result<String, RunError> {
    let path = args.file.display().to_string();
    let registry = registry(args.check);
    let maker = maker(subject, args, &registry)?;
    let interface = maker.interface();

    // Dims given on the command line.
    let mut dims: BTreeMap<String, (u64, Binding)> = BTreeMap::new();
    for (name, value) in &args.dims {
        if !interface.dims.contains(name) {
            return Err(RunError::UnknownDim {
                what: interface.what,
                name: name.clone(),
                known: interface.dims.iter().cloned().collect(),
            });
        }
        if dims.insert(name.clone(), (*value, Binding::Flag)).is_some() {
            return Err(RunError::DuplicateDim { name: name.clone() });
        }
    }

    // Inputs given as files.
    let sources = &interface.sources;
    let mut given: BTreeMap<String, (HostTensor<'static>, PathBuf)> = BTreeMap::new();
    for (name, file_path) in &args.inputs {
        let Some(source) = sources.iter().find(|s| &s.name == name) else {
            return Err(RunError::UnknownInput {
                what: interface.what,
                name: name.clone(),
                known: sources.iter().map(|s| s.name.clone()).collect(),
            });
        };
        if given.contains_key(name) {
            return Err(RunError::DuplicateInput { name: name.clone() });
        }
        let tensor = read_input(name, file_path, &source.ty, &mut dims)?;
        given.insert(name.clone(), (tensor, file_path.clone()));
    }

    // Parameters that come with the model (those not given with --input).
    for (name, tensor) in &args.model_parameters {
        if !given.contains_key(name) {
            given.insert(name.clone(), (tensor.clone(), args.file.clone()));
        }
    }

    // Parameters from the weights file (those not given with --input).
    let weights = args.weights.as_ref().map(WeightsFile::open).transpose()?;
    let mut from_weights: BTreeSet<String> = BTreeSet::new();
    if let Some(w) = &weights {
        let path = w.path().display().to_string();
        for (name, tensor) in w.iter() {
            match sources.iter().find(|s| s.name == name) {
                Some(s) if s.kind == "input" => {
                    return Err(RunError::WeightIsInput {
                        path,
                        name: name.to_string(),
                        what: interface.what,
                    })
                }
                Some(s) if !given.contains_key(name) => {
                    let origin = format!("{path}: tensor {name:?}");
                    fit(&origin, name, &s.ty, &tensor, &mut dims)?;
                    from_weights.insert(name.to_string());
                }
                _ => {}
            }
        }
    }

    let missing: Vec<&Source> = sources
        .iter()
        .filter(|s| !given.contains_key(&s.name) && !from_weights.contains(&s.name))
        .collect();
    if !missing.is_empty() && !args.random_inputs {
        return Err(RunError::Missing {
            missing: missing
                .iter()
                .map(|s| format!("{} `{}` ({})", s.kind, s.name, s.ty))
                .collect(),
        });
    }

    // Every dim still unbound takes the default.
    for d in &interface.dims {
        dims.entry(d.clone())
            .or_insert((DEFAULT_DIM, Binding::Default));
    }
    let values: BTreeMap<String, u64> = dims.iter().map(|(k, (v, _))| (k.clone(), *v)).collect();

    // The tensors of the run that are not in the weights file, and where each came from.
    let mut tensors: BTreeMap<String, HostTensor<'static>> = BTreeMap::new();
    let mut origins: Vec<(&Source, Origin)> = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        let name = &source.name;
        if let Some((t, p)) = given.remove(name) {
            tensors.insert(name.clone(), t);
            origins.push((source, Origin::File(p)));
            continue;
        }
        if from_weights.contains(name) {
            origins.push((source, Origin::Weights));
            continue;
        }
        let ty = &source.ty;
        let concrete = concrete_dims(&ty.shape, &values).map_err(|e| RunError::Shape {
            name: name.clone(),
            source: Box::new(e),
        })?;
        let seed = args.seed.wrapping_add(index as u64);
        let t = random_tensor(source, &concrete, seed).map_err(|e| RunError::Shape {
            name: name.clone(),
            source: Box::new(tir_graph::EvalError::BadTensor {
                reason: e.to_string(),
            }),
        })?;
        tensors.insert(name.clone(), t);
        origins.push((source, Origin::Random));
    }

    // Every file this run writes: outputs, then generated inputs; names must be plain and apart.
    let dir = &args.output_dir;
    let generated: Vec<&String> = origins
        .iter()
        .filter(|(_, o)| matches!(o, Origin::Random))
        .map(|(s, _)| &s.name)
        .collect();
    for name in &interface.outputs {
        if !plain_file_name(name) {
            return Err(RunError::BadFileName {
                what: "output",
                name: name.clone(),
            });
        }
        if generated.contains(&name) {
            return Err(RunError::NameClash {
                name: name.clone(),
                what: "input",
                path: dir.join(format!("{name}.npy")).display().to_string(),
            });
        }
    }
    for name in &generated {
        if !plain_file_name(name) {
            return Err(RunError::BadFileName {
                what: "generated input",
                name: name.to_string(),
            });
        }
    }

    // Compile (or load) and run. The executable is declared after `registry` and `maker`, which
    // hold the backends, so it is dropped first: a CUDA executable must go while its backend
    // still holds the GPU's context.
    let (mut made_exe, kernels, made) = maker.make(&args.file, args.mesh.as_ref())?;
    let executable = made_exe.executable();
    let backend_error = |source| RunError::Backend {
        path: path.clone(),
        source,
    };
    let started = Instant::now();
    let mut inputs: Vec<(&str, TensorRef)> = Vec::new();
    for (source, _) in &origins {
        let name = source.name.as_str();
        match (source.kind, tensors.get(name)) {
            ("input", Some(t)) => inputs.push((name, t.into())),
            (_, Some(t)) => executable
                .set_parameter(name, t.into())
                .map_err(backend_error)?,
            (_, None) => {}
        }
    }
    if let Some(w) = &weights {
        for (name, t) in w.iter().filter(|(n, _)| from_weights.contains(*n)) {
            executable
                .set_parameter(name, (&t).into())
                .map_err(backend_error)?;
        }
    }
    let set_in = started.elapsed();
    let started = Instant::now();
    let outputs = executable.run(&inputs).map_err(backend_error)?;
    let ran_in = started.elapsed();
    let (profile, trace_file) = match &mut made_exe {
        Made::Cuda(exe) if args.profile || args.trace.is_some() => {
            profile_runs(exe, &inputs, args).map_err(backend_error)?
        }
        _ => (String::new(), None),
    };

    // The files, in memory first.
    let mut files: Vec<OutputFile> = Vec::new();
    let mut summary = format!(
        "{path}: {kernels} kernels on backend `{}`: run {} ({made}, parameters set {})\n",
        maker.backend(),
        millis(ran_in),
        millis(set_in),
    );
    if !dims.is_empty() {
        let shown: Vec<String> = dims
            .iter()
            .map(|(k, (v, by))| format!("{k}={v} ({})", describe_binding(by)))
            .collect();
        summary.push_str(&format!("dims: {}\n", shown.join(", ")));
    }
    if let Some(w) = &weights {
        let unused = w.len() - from_weights.len();
        summary.push_str(&format!(
            "weights: {} of {} tensors from {} ({} bytes, memory-mapped){}\n",
            from_weights.len(),
            w.len(),
            w.path().display(),
            w.size(),
            if unused > 0 {
                format!("; {unused} not parameters of the {}", interface.what)
            } else {
                String::new()
            }
        ));
    }
    for (source, origin) in &origins {
        let (name, kind) = (&source.name, source.kind);
        let Some(t) = tensors.get(name) else {
            continue;
        };
        let ty = t.type_name();
        match origin {
            Origin::Weights => {}
            Origin::File(p) => {
                summary.push_str(&format!("{kind} {name:?}: {ty} from {}\n", p.display()));
            }
            Origin::Random => {
                let target = dir.join(format!("{name}.npy"));
                summary.push_str(&format!(
                    "{kind} {name:?}: {ty} random -> {}\n",
                    target.display()
                ));
                let bytes = encode(t, &target)?;
                files.push((target, bytes));
            }
        }
    }
    for name in &interface.outputs {
        let Some(t) = outputs.get(name) else {
            return Err(RunError::MissingOutput {
                path: path.clone(),
                name: name.clone(),
            });
        };
        let target = dir.join(format!("{name}.npy"));
        summary.push_str(&format!(
            "output {name:?}: {} {} -> {}\n",
            t.type_name(),
            checksum(t),
            target.display()
        ));
        let bytes = encode(t, &target)?;
        files.push((target, bytes));
    }
    summary.push_str(&profile);
    if let Some((path, bytes)) = trace_file {
        if files.iter().any(|(p, _)| *p == path) {
            return Err(RunError::TraceClash {
                path: path.display().to_string(),
            });
        }
        files.push((path, bytes));
    }
    write_all(dir, &files)?;
    Ok(summary)
}

/// A file this run writes: where, and its bytes.
type OutputFile = (PathBuf, Vec<u8>);

/// The traced runs of `--profile` and `--trace` ([`crate::profile`]): the profile's table (and
/// the trace file's line), and the trace file.
fn profile_runs(
    exe: &mut backend_cuda::CudaExecutable,
    inputs: &[(&str, TensorRef<'_>)],
    args: &RunArgs,
) -> Result<(String, Option<OutputFile>), BackendError> {
    let traces = profile::traced_runs(exe, inputs)?;
    let work = exe.kernel_work()?;
    let device = exe.gpu().name.clone();
    let mut out = String::new();
    if args.profile {
        out = profile::profile_table(&traces, &work, &device);
    }
    let mut file = None;
    if let (Some(path), Some(last)) = (&args.trace, traces.last()) {
        out.push_str(&format!(
            "trace: {} copies and kernels -> {}\n",
            last.spans.len(),
            path.display()
        ));
        file = Some((path.clone(), profile::chrome_trace(last, &work, &device)));
    }
    Ok((out, file))
}

fn encode(t: &HostTensor, target: &Path) -> Result<Vec<u8>, RunError> {
    npy::encode(t).map_err(|source| RunError::Npy {
        path: target.display().to_string(),
        source,
    })
}

/// Reads `--input name=file_path` as the interface's `ty`, binding its symbolic dims into `dims`.
fn read_input(
    name: &str,
    file_path: &Path,
    ty: &TensorType,
    dims: &mut BTreeMap<String, (u64, Binding)>,
) -> Result<HostTensor<'static>, RunError> {
    let shown = file_path.display().to_string();
    let bytes = std::fs::read(file_path).map_err(|source| RunError::ReadNpy {
        path: shown.clone(),
        source,
    })?;
    let read = npy::decode(&bytes).map_err(|source| RunError::Npy {
        path: shown.clone(),
        source,
    })?;
    let origin = format!("--input {name}={shown}");
    let wrong = |got: String| RunError::WrongType {
        given: origin.clone(),
        expected: ty.to_string(),
        got,
    };
    let got = read.type_name();
    let file_dtype = read.dtype();
    let dims_read = read.dims().to_vec();
    let Some(tensor) = npy::into_dtype(read, ty.dtype) else {
        if file_dtype == DType::F32 && ty.dtype == DType::BF16 && ty.shape.admits(&dims_read) {
            return Err(wrong(format!(
                "{got} with values that are not exact bf16 values"
            )));
        }
        return Err(wrong(got));
    };
    fit(&origin, name, ty, &tensor, dims)?;
    Ok(tensor)
}

/// Checks that `tensor` (given as `origin`) is of type `ty` and binds its symbolic dims into
/// `dims`.
fn fit(
    origin: &str,
    name: &str,
    ty: &TensorType,
    tensor: &HostTensor,
    dims: &mut BTreeMap<String, (u64, Binding)>,
) -> Result<(), RunError> {
    if tensor.dtype() != ty.dtype || !ty.shape.admits(tensor.dims()) {
        return Err(RunError::WrongType {
            given: origin.to_string(),
            expected: ty.to_string(),
            got: tensor.type_name(),
        });
    }
    for (d, &n) in ty.shape.dims().iter().zip(tensor.dims()) {
        let Dim::Symbolic(s) = d else { continue };
        match dims.get(s) {
            Some((bound, by)) if *bound != n => {
                return Err(RunError::DimConflict {
                    given: origin.to_string(),
                    dim: s.clone(),
                    value: n,
                    bound: *bound,
                    bound_by: match by {
                        Binding::Flag => format!("--dim {s}={bound}"),
                        other => describe_binding(other),
                    },
                });
            }
            Some(_) => {}
            None => {
                dims.insert(s.clone(), (n, Binding::Input(name.to_string())));
            }
        }
    }
    Ok(())
}

/// Writes every file, each atomically; on a failure removes what this call wrote (and `dir` if
/// it created it), so a failed run leaves no partial set of outputs.
fn write_all(dir: &Path, files: &[OutputFile]) -> Result<(), RunError> {
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|source| RunError::CreateDir {
        path: dir.display().to_string(),
        source,
    })?;
    let mut written: Vec<&Path> = Vec::new();
    for (target, bytes) in files {
        if let Err(e) = file::write_atomically(target, bytes) {
            for w in written {
                let _ = std::fs::remove_file(w);
            }
            if created {
                let _ = std::fs::remove_dir(dir);
            }
            return Err(RunError::Write(e));
        }
        written.push(target);
    }
    Ok(())
}
