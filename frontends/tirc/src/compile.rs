//! `tirc compile`: lower a graph for the GPU target, compile its kernels for one or more GPU
//! architectures (no GPU needed, only `tileiras` or a kernel cache that holds them) and write
//! the program with its cubins as an AOT package (`.tirpkg`, see [`backend_cuda::package`]).
//!
//! The backend and the architectures are checked before the graph is read ([`CompileArgs::new`],
//! [`parse_archs`]); the package is written last, atomically, so a failed compile leaves no file
//! (and an existing file at the output path untouched). With a mesh the package holds the program
//! each device runs and the plan that cut it, so `tirc run` runs it on the mesh's GPUs.

use crate::run::PACKAGE_BACKEND;
use backend_cuda::package::{self, Package, PackageError, PackageMesh};
use std::path::{Path, PathBuf};
use tir_graph::Graph;
use tir_lower::mesh::{compile_sharded, MeshSpec};
use tir_lower::{Backend, BackendError, LowerError};

/// What `tirc compile` was asked to do, checked (see [`CompileArgs::new`]).
pub struct CompileArgs {
    file: PathBuf,
    archs: Vec<String>,
    output: PathBuf,
    /// The mesh to cut the graph for (`--tensor-parallel`, `--devices`, `--shard`), if any.
    pub mesh: Option<MeshSpec>,
}

/// Why `tirc compile` refused or failed. One line each.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("tirc compile: backend `{name}` has no ahead-of-time packages; use --backend {PACKAGE_BACKEND}")]
    NoPackages { name: String },
    #[error("tirc compile: unknown backend `{name}` (known: {}); use --backend {PACKAGE_BACKEND}", .known.join(", "))]
    UnknownBackend { name: String, known: Vec<String> },
    #[error("-o {path}: that is the graph being compiled; choose another output file")]
    OutputIsInput { path: String },
    #[error("-o {path}: {reason}")]
    BadOutput { path: String, reason: &'static str },
    #[error("{path}: {source}")]
    Lower {
        path: String,
        source: Box<LowerError>,
    },
    #[error("{path}: {source}")]
    Backend { path: String, source: BackendError },
    #[error(transparent)]
    Package(#[from] PackageError),
}

/// GPU architectures (`sm_90`, `sm_100`, ...), each once, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Archs(pub Vec<String>);

/// The architectures of `--arch`: comma-separated `sm_NN` or `sm_NNN` names (`sm_90,sm_100`),
/// each once. `Err` says what is wrong with the argument.
pub fn parse_archs(arg: &str) -> Result<Archs, String> {
    let mut archs: Vec<String> = Vec::new();
    for part in arg.split(',') {
        let arch = part.trim();
        if arch.is_empty() {
            return Err(format!(
                "`{arg}` has an empty architecture (write e.g. sm_90,sm_100)"
            ));
        }
        let digits = arch.strip_prefix("sm_").unwrap_or("");
        let well_formed = (2..=3).contains(&digits.len())
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0');
        if !well_formed {
            return Err(format!(
                "`{arch}` is not a GPU architecture (expected sm_NN or sm_NNN, e.g. sm_90 or sm_100)"
            ));
        }
        if archs.iter().any(|a| a == arch) {
            return Err(format!("`{arch}` is given twice"));
        }
        archs.push(arch.to_string());
    }
    Ok(Archs(archs))
}

impl CompileArgs {
    /// Checks what can be checked before the graph is read (so a bad argument does not cost a
    /// compile): the backend must be [`PACKAGE_BACKEND`], and the output must be a file in an
    /// existing directory and not the input file.
    pub fn new(
        file: PathBuf,
        backend: &str,
        archs: Archs,
        output: PathBuf,
    ) -> Result<CompileArgs, CompileError> {
        if backend != PACKAGE_BACKEND {
            let known = crate::run::registry(false).names();
            if known.contains(&backend) {
                return Err(CompileError::NoPackages {
                    name: backend.to_string(),
                });
            }
            return Err(CompileError::UnknownBackend {
                name: backend.to_string(),
                known: known.iter().map(|s| s.to_string()).collect(),
            });
        }
        let bad_output = |reason| CompileError::BadOutput {
            path: output.display().to_string(),
            reason,
        };
        let dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if output.is_dir() {
            return Err(bad_output("it is a directory"));
        }
        if !dir.is_dir() {
            return Err(bad_output("its directory does not exist"));
        }
        if same_file(&file, &output) {
            return Err(CompileError::OutputIsInput {
                path: output.display().to_string(),
            });
        }
        Ok(CompileArgs {
            file,
            archs: archs.0,
            output,
            mesh: None,
        })
    }
}

/// Whether `a` and `b` name one existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Runs `tirc compile` on `graph` (read from `args`' file); returns the summary line.
pub fn compile(graph: &Graph, args: &CompileArgs) -> Result<String, CompileError> {
    let path = args.file.display().to_string();
    // Lowered for the tuning and the matmul paths a run will take by default (`$TIR_TUNE`,
    // `$TIR_MATMUL`, else `auto`).
    let backend = crate::run::cuda_backend();
    let backend_error = |source| CompileError::Backend {
        path: path.clone(),
        source,
    };
    backend.tuning().map_err(backend_error)?;
    backend.matmul_policy().map_err(backend_error)?;
    let lower_error = |source| CompileError::Lower {
        path: path.clone(),
        source: Box::new(source),
    };
    let (target, limits) = (backend.target(), tir_opt::Limits::default());
    let (program, mesh) = match &args.mesh {
        Some(mesh) => {
            let sharded = compile_sharded(graph, mesh, &target, &limits).map_err(lower_error)?;
            let plan = PackageMesh {
                plan: sharded.plan,
                whole: sharded.whole,
            };
            (sharded.compiled.program, Some(plan))
        }
        None => {
            let compiled =
                tir_lower::compile_graph(graph, &target, &limits).map_err(lower_error)?;
            (compiled.program, None)
        }
    };
    let (kernels, used) = backend
        .compile_for(&program, &args.archs)
        .map_err(|source| CompileError::Backend {
            path: path.clone(),
            source,
        })?;
    let pkg = Package {
        program,
        abis: kernels.abis,
        cubins: kernels.cubins,
        toolchain: kernels.toolchain,
        mesh,
    };
    // The encoded size, for the summary (write encodes again; a failure there is reported).
    let bytes = package::to_bytes(&pkg).map_or(0, |b| b.len());
    package::write(&pkg, &args.output)?;
    let mut cache = format!("{} hits, {} misses", used.hits, used.misses);
    if used.corrupt > 0 {
        cache.push_str(&format!(", {} corrupt entries rebuilt", used.corrupt));
    }
    let on = pkg.mesh.as_ref().map_or(String::new(), |m| {
        format!(" on each of a mesh of {} devices", m.plan.world)
    });
    Ok(format!(
        "{}: {} kernels{on} for {} from {path}, {bytes} bytes (tileiras {}; kernel cache: {cache})\n",
        args.output.display(),
        pkg.program.kernels.len(),
        args.archs.join(", "),
        pkg.toolchain,
    ))
}
