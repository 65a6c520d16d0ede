//! backend-cuda: tir's CUDA backend. Tile kernels become NVIDIA Tile IR (module `codegen`,
//! through `cutile-ir`), `tileiras` assembles them into cubins (modules `toolchain`, `compile`),
//! a disk cache keeps the cubins (module `cache`), and AOT packages carry a program with its
//! cubins (module `package`).

pub mod cache;
pub mod codegen;
pub mod compile;
pub mod package;
pub mod runtime;
pub mod toolchain;
pub mod tuning;

pub use compile::{CacheUse, CompiledKernels, KernelCompiler};
pub use runtime::{block_on, CudaExecutable, ExecMode, Gpu, MatmulPath, MatmulPolicy, RunFuture};
pub use toolchain::{Toolchain, ToolchainError};

use std::cell::OnceCell;
use std::rc::Rc;
use tir_graph::DType;
use tir_lower::{Backend, BackendError, Capabilities, Executable, Program, Target};

/// What lowering aims at for NVIDIA GPUs when matmuls take the paths of `matmul`: the tile
/// shapes of [`tuning::Tuning`] (the defaults, or `$TIR_TUNE`'s; a `$TIR_TUNE` that cannot be
/// read is reported when kernels are compiled, and lowering meanwhile uses the defaults), and
/// elementwise epilogues fused into float matmuls only when matmuls run on the generated kernel
/// by default. Where cuBLASLt may run them (`auto`, `cublaslt`), an epilogue would tie the
/// product to the generated kernel, and cuBLASLt with the epilogue as a separate pass is faster:
/// mlp's first product took 0.477 ms with its gelu fused, against 0.348 ms on cuBLASLt plus an
/// estimated 0.045 ms for the gelu over its output (H100, `bench/RESULTS.md`).
pub fn gpu_target(matmul: &MatmulPolicy) -> Target {
    let mut target = Target {
        tiles: tuning::Tuning::from_env().unwrap_or_default().tiles,
        ..Target::default()
    };
    target.fusion.fuse_matmul_epilogue = matmul.default == MatmulPath::Generated;
    target
}

/// The CUDA backend (`"cuda"`): compiles kernels for the GPU of this machine (through the
/// kernel cache) and runs them there. The GPU and the toolchain are looked for on first use, so
/// constructing the backend never fails; a missing driver, GPU or toolchain makes `compile`
/// report the backend unavailable, with the reason.
#[derive(Default)]
pub struct CudaBackend {
    mode: ExecMode,
    /// The matmul paths; from `$TIR_MATMUL` when not set ([`MatmulPolicy::from_env`]).
    matmul: Option<MatmulPolicy>,
    poison: bool,
    gpu: OnceCell<Result<Rc<Gpu>, String>>,
    compiler: OnceCell<Result<KernelCompiler, String>>,
}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: "cuda".into(),
        reason,
    }
}

impl CudaBackend {
    pub fn new() -> CudaBackend {
        CudaBackend::default()
    }

    /// A backend whose executables run in `mode`.
    pub fn with_mode(mode: ExecMode) -> CudaBackend {
        CudaBackend {
            mode,
            ..CudaBackend::default()
        }
    }

    /// A backend whose executables fill the arena and outputs with NaN bytes before each run
    /// ([`CudaExecutable::set_poison`]): what conformance tests use.
    pub fn poisoning(mut self) -> CudaBackend {
        self.poison = true;
        self
    }

    /// A backend whose executables run matmuls by `policy`.
    pub fn with_matmul(mut self, policy: MatmulPolicy) -> CudaBackend {
        self.matmul = Some(policy);
        self
    }

    /// The GPU, opened on first use.
    pub fn gpu(&self) -> Result<Rc<Gpu>, BackendError> {
        self.gpu
            .get_or_init(|| Gpu::open().map(Rc::new))
            .clone()
            .map_err(unavailable)
    }

    /// The toolchain and kernel cache, located on first use ([`KernelCompiler::from_env`]).
    pub fn compiler(&self) -> Result<&KernelCompiler, BackendError> {
        self.compiler
            .get_or_init(KernelCompiler::from_env)
            .as_ref()
            .map_err(|e| unavailable(e.clone()))
    }

    /// Compiles `program`'s kernels for `archs` without a GPU (for packages and CI).
    pub fn compile_for(
        &self,
        program: &Program,
        archs: &[String],
    ) -> Result<(CompiledKernels, CacheUse), BackendError> {
        self.compiler()?.compile(program, archs)
    }

    /// The matmul paths: those set with `with_matmul`, else `$TIR_MATMUL`'s.
    fn matmul_policy(&self) -> Result<MatmulPolicy, BackendError> {
        match &self.matmul {
            Some(p) => Ok(p.clone()),
            None => MatmulPolicy::from_env().map_err(BackendError::BadInput),
        }
    }

    /// [`Backend::compile`] with the concrete executable type.
    pub fn compile_cuda(&self, program: &Program) -> Result<CudaExecutable, BackendError> {
        let gpu = self.gpu()?;
        let (compiled, _) = self.compile_for(program, std::slice::from_ref(&gpu.arch))?;
        let cubins = compiled.cubins.get(&gpu.arch).cloned().unwrap_or_default();
        self.load(gpu, program, compiled.abis, &cubins)
    }

    /// Loads an AOT package's program and its cubins for this machine's GPU (no toolchain
    /// needed).
    pub fn load_package(&self, pkg: &package::Package) -> Result<CudaExecutable, BackendError> {
        let gpu = self.gpu()?;
        let cubins = pkg.cubins.get(&gpu.arch).ok_or_else(|| {
            let archs: Vec<&str> = pkg.cubins.keys().map(String::as_str).collect();
            BackendError::BadInput(format!(
                "the package has no cubins for this GPU's {} (it has: {}); compile it with \
                 --arch {}",
                gpu.arch,
                archs.join(", "),
                gpu.arch
            ))
        })?;
        self.load(gpu, &pkg.program, pkg.abis.clone(), cubins)
    }

    fn load(
        &self,
        gpu: Rc<Gpu>,
        program: &Program,
        abis: Vec<codegen::KernelAbi>,
        cubins: &[Vec<u8>],
    ) -> Result<CudaExecutable, BackendError> {
        let mut exe = runtime::Loaded::load(gpu, program, abis, cubins).map_err(|reason| {
            BackendError::Kernel {
                kernel: "(loading)".into(),
                reason,
            }
        })?;
        exe.set_mode(self.mode);
        exe.set_matmul_policy(self.matmul_policy()?);
        exe.set_poison(self.poison);
        Ok(exe)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    /// [`gpu_target`] for this backend's matmul policy (the default policy when `$TIR_MATMUL`
    /// cannot be read; running then reports it).
    fn target(&self) -> Target {
        gpu_target(&self.matmul_policy().unwrap_or_default())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            dtypes: DType::ALL.to_vec(),
            symbolic_dims: true,
            persistent_state: true,
        }
    }

    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError> {
        Ok(Box::new(self.compile_cuda(program)?))
    }
}

/// What `tirc doctor` prints: the toolchain, the driver and GPU, and the kernel cache, one
/// line each, saying what is missing and how to fix it. The second value is whether everything
/// needed to compile and run here was found.
pub fn doctor() -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    match Toolchain::locate() {
        Ok(t) => out.push_str(&format!(
            "toolchain: tileiras {} at {} (Tile IR bytecode {}.{})\n",
            t.version,
            t.tileiras.display(),
            t.bytecode.major,
            t.bytecode.minor
        )),
        Err(e) => {
            ok = false;
            out.push_str(&format!("toolchain: {e}\n"));
        }
    }
    match Gpu::open() {
        Ok(gpu) => {
            let memory = gpu
                .memory()
                .map(|(free, total)| format!("{} of {} MiB free", free >> 20, total >> 20))
                .unwrap_or_else(|e| e);
            out.push_str(&format!(
                "driver: CUDA {}\ngpu: {} ({}), {memory}\n",
                gpu.driver, gpu.name, gpu.arch
            ));
        }
        Err(e) => {
            ok = false;
            out.push_str(&format!("gpu: unavailable: {e}\n"));
        }
    }
    match cache::CacheConfig::from_env() {
        Ok(config) => {
            let stats = cache::KernelCache::new(config.clone()).stats();
            out.push_str(&format!(
                "kernel cache: {} ({} entries, {} of {} MiB used)\n",
                config.dir.display(),
                stats.entries,
                stats.bytes >> 20,
                config.max_bytes >> 20
            ));
        }
        Err(e) => {
            ok = false;
            out.push_str(&format!("kernel cache: {e}\n"));
        }
    }
    (out, ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epilogues_fuse_into_matmuls_only_on_the_generated_path() {
        let fuses = |text: &str| {
            let policy = MatmulPolicy::parse(text).unwrap();
            gpu_target(&policy).fusion.fuse_matmul_epilogue
        };
        assert!(fuses("generated"));
        assert!(
            fuses("generated,k1_matmul=cublaslt"),
            "the default path decides"
        );
        assert!(!fuses("auto"));
        assert!(!fuses("cublaslt"));
    }
}
