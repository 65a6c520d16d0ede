//! backend-cuda: tir's CUDA backend. Tile kernels become NVIDIA Tile IR (module `codegen`,
//! through `cutile-ir`), `tileiras` assembles them into cubins (modules `toolchain`, `compile`),
//! a disk cache keeps the cubins (module `cache`), and AOT packages carry a program with its
//! cubins (module `package`).

#![warn(missing_docs)]

pub mod cache;
pub mod codegen;
pub mod compile;
pub mod package;
pub mod runtime;
pub mod toolchain;
pub mod tuning;

pub use compile::{CacheUse, CompileProgress, CompiledKernels, KernelCompiler};
pub use runtime::{
    block_on, AttentionPath, AttentionPolicy, ConvPath, ConvPolicy, CudaExecutable,
    CudaMeshExecutable, ExecMode, Gpu, KernelWork, MatmulPath, MatmulPolicy, RunFuture, RunTrace,
    Span, SpanKind,
};
pub use toolchain::{Toolchain, ToolchainError};

use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;
use tir_graph::DType;
use tir_lower::{Backend, BackendError, Capabilities, Executable, MeshExecutable, Program, Target};
use tuning::Tuning;

/// What lowering aims at for NVIDIA GPUs with `tuning`'s tile shapes when matmuls take the
/// paths of `matmul`: elementwise epilogues fused into float matmuls only when matmuls run on
/// the generated kernel by default. Where cuBLASLt may run them (`auto`, `cublaslt`), an
/// epilogue would tie the product to the generated kernel, and cuBLASLt with the epilogue as a
/// separate pass is faster: mlp's first product took 0.477 ms with its gelu fused, against
/// 0.348 ms on cuBLASLt plus an estimated 0.045 ms for the gelu over its output (H100,
/// `bench/RESULTS.md`).
pub fn gpu_target(tuning: &Tuning, matmul: &MatmulPolicy) -> Target {
    let mut target = Target {
        tiles: tuning.tiles.clone(),
        ..Target::default()
    };
    target.fusion.fuse_matmul_epilogue = matmul.default == MatmulPath::Generated;
    target
}

/// The CUDA backend (`"cuda"`): compiles kernels for one GPU of this machine (through the
/// kernel cache) and runs them there, or for a mesh of this machine's GPUs
/// ([`CudaBackend::compile_cuda_mesh`], collectives through NCCL).
///
/// Its settings are read once, when it is made: the tuning (`$TIR_TUNE` over the defaults), the
/// matmul paths (`$TIR_MATMUL`), the attention paths (`$TIR_ATTENTION`) and the convolution
/// paths (`$TIR_CONV`); a setting that cannot be read is reported by `compile`,
/// and lowering meanwhile aims at the defaults. The GPU and the toolchain are looked for on
/// first use, so making the backend never fails; a missing driver, GPU or toolchain makes
/// `compile` report the backend unavailable, with the reason.
pub struct CudaBackend {
    mode: ExecMode,
    ordinal: u32,
    tuning: Result<Tuning, String>,
    matmul: Result<MatmulPolicy, String>,
    attention: Result<AttentionPolicy, String>,
    conv: Result<ConvPolicy, String>,
    poison: bool,
    gpu: OnceCell<Result<Rc<Gpu>, String>>,
    /// How many GPUs the driver sees, counted on first use.
    gpus: OnceCell<u32>,
    compiler: OnceCell<Result<KernelCompiler, String>>,
    progress: Arc<dyn CompileProgress>,
}

impl Default for CudaBackend {
    fn default() -> CudaBackend {
        CudaBackend {
            mode: ExecMode::default(),
            ordinal: 0,
            tuning: Tuning::from_env(),
            matmul: MatmulPolicy::from_env(),
            attention: AttentionPolicy::from_env(),
            conv: ConvPolicy::from_env(),
            poison: false,
            gpu: OnceCell::new(),
            gpus: OnceCell::new(),
            compiler: OnceCell::new(),
            progress: Arc::new(compile::Silent),
        }
    }
}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: "cuda".into(),
        reason,
    }
}

impl CudaBackend {
    /// The backend for GPU 0, with the settings of the environment.
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

    /// A backend on GPU `ordinal` of this machine.
    pub fn on_gpu(mut self, ordinal: u32) -> CudaBackend {
        self.ordinal = ordinal;
        self.gpu = OnceCell::new();
        self
    }

    /// A backend whose executables fill the arena and outputs with NaN bytes before each run
    /// ([`CudaExecutable::set_poison`]): what conformance tests use.
    pub fn poisoning(mut self) -> CudaBackend {
        self.poison = true;
        self
    }

    /// A backend whose executables run matmuls by `policy`.
    pub fn with_matmul(mut self, policy: MatmulPolicy) -> CudaBackend {
        self.matmul = Ok(policy);
        self
    }

    /// A backend whose executables run fused attentions by `policy`.
    pub fn with_attention(mut self, policy: AttentionPolicy) -> CudaBackend {
        self.attention = Ok(policy);
        self
    }

    /// A backend whose executables run convolutions by `policy`.
    pub fn with_conv(mut self, policy: ConvPolicy) -> CudaBackend {
        self.conv = Ok(policy);
        self
    }

    /// A backend that lowers and compiles with `tuning`.
    pub fn with_tuning(mut self, tuning: Tuning) -> CudaBackend {
        self.tuning = Ok(tuning);
        self.compiler = OnceCell::new();
        self
    }

    /// A backend that tells `progress` about the kernels it assembles with `tileiras` when it
    /// compiles (see [`CompileProgress`]).
    pub fn with_progress(mut self, progress: Arc<dyn CompileProgress>) -> CudaBackend {
        self.progress = progress;
        self
    }

    /// The tuning: the one set with `with_tuning`, else the environment's.
    pub fn tuning(&self) -> Result<&Tuning, BackendError> {
        self.tuning
            .as_ref()
            .map_err(|e| BackendError::BadInput(e.clone()))
    }

    /// The matmul paths: those set with `with_matmul`, else the environment's.
    pub fn matmul_policy(&self) -> Result<&MatmulPolicy, BackendError> {
        self.matmul
            .as_ref()
            .map_err(|e| BackendError::BadInput(e.clone()))
    }

    /// The attention paths: those set with `with_attention`, else the environment's.
    pub fn attention_policy(&self) -> Result<&AttentionPolicy, BackendError> {
        self.attention
            .as_ref()
            .map_err(|e| BackendError::BadInput(e.clone()))
    }

    /// The convolution paths: those set with `with_conv`, else the environment's.
    pub fn conv_policy(&self) -> Result<&ConvPolicy, BackendError> {
        self.conv
            .as_ref()
            .map_err(|e| BackendError::BadInput(e.clone()))
    }

    /// The GPU, opened on first use.
    pub fn gpu(&self) -> Result<Rc<Gpu>, BackendError> {
        self.gpu
            .get_or_init(|| Gpu::open(self.ordinal))
            .clone()
            .map_err(unavailable)
    }

    /// The toolchain and kernel cache, located on first use ([`KernelCompiler::locate`]).
    pub fn compiler(&self) -> Result<&KernelCompiler, BackendError> {
        let tuning = self.tuning()?.clone();
        self.compiler
            .get_or_init(|| KernelCompiler::locate(tuning))
            .as_ref()
            .map_err(|e| unavailable(e.clone()))
    }

    /// Compiles `program`'s kernels for `archs` without a GPU (for packages and CI); a
    /// program cut for a mesh compiles too (its collectives have no kernel to compile).
    pub fn compile_for(
        &self,
        program: &Program,
        archs: &[String],
    ) -> Result<(CompiledKernels, CacheUse), BackendError> {
        self.compiler()?
            .compile_reporting(program, archs, self.progress.as_ref())
    }

    /// [`Backend::compile_mesh`] with the concrete executable type: `program` (cut for one
    /// device, with collectives over `world` devices) on GPUs `0..world` of this machine, its
    /// collectives through NCCL; in graph mode each device's run is captured and replayed as a
    /// CUDA graph (see `runtime::mesh`). Refused, with one line, where a
    /// collective's dtype or op is one NCCL lacks, where the machine has fewer GPUs, or where
    /// NCCL is missing.
    pub fn compile_cuda_mesh(
        &self,
        program: &Program,
        world: u32,
    ) -> Result<CudaMeshExecutable, BackendError> {
        self.check_mesh(program, world)?;
        self.matmul_policy()?;
        self.attention_policy()?;
        self.conv_policy()?;
        let arch = Gpu::open(0).map_err(unavailable)?.arch.clone();
        let (compiled, _) = self.compiler()?.compile_reporting(
            program,
            std::slice::from_ref(&arch),
            self.progress.as_ref(),
        )?;
        let cubins = compiled.cubins.get(&arch).cloned().unwrap_or_default();
        self.load_mesh(program, &compiled.abis, &cubins, &arch, world)
    }

    /// Loads an AOT package cut for a mesh ([`package::Package::mesh`]) on GPUs `0..world` of
    /// this machine, refused as [`CudaBackend::compile_cuda_mesh`] refuses; whole tensors over
    /// it come from [`tir_lower::mesh::ShardedExecutable::from_plan`] with the package's plan.
    pub fn load_package_mesh(
        &self,
        pkg: &package::Package,
    ) -> Result<CudaMeshExecutable, BackendError> {
        let Some(mesh) = &pkg.mesh else {
            return Err(BackendError::BadInput(
                "the package is for one GPU, not a mesh".into(),
            ));
        };
        self.check_mesh(&pkg.program, mesh.plan.world)?;
        let arch = Gpu::open(0).map_err(unavailable)?.arch.clone();
        let cubins = package_cubins(pkg, &arch)?;
        self.load_mesh(&pkg.program, &pkg.abis, cubins, &arch, mesh.plan.world)
    }

    /// Refuses, in one line, a mesh this backend cannot run here (see
    /// [`CudaBackend::compile_cuda_mesh`]).
    fn check_mesh(&self, program: &Program, world: u32) -> Result<(), BackendError> {
        let refuse = |reason: String| BackendError::Unsupported {
            backend: "cuda".into(),
            reason,
        };
        check_collectives(program, world).map_err(refuse)?;
        let gpus = self.gpu_count();
        if world > gpus {
            return Err(refuse(format!(
                "a mesh of {world} GPUs, but this machine has {gpus}"
            )));
        }
        runtime::nccl_present().map_err(unavailable)
    }

    /// `program` loaded from `cubins` (for `arch`) on GPUs `0..world`, with their NCCL
    /// communicators.
    fn load_mesh(
        &self,
        program: &Program,
        abis: &[codegen::KernelAbi],
        cubins: &[compile::Cubin],
        arch: &str,
        world: u32,
    ) -> Result<CudaMeshExecutable, BackendError> {
        let refuse = |reason: String| BackendError::Unsupported {
            backend: "cuda".into(),
            reason,
        };
        let mut devices = Vec::with_capacity(world as usize);
        for ordinal in 0..world {
            let gpu = Gpu::open(ordinal).map_err(unavailable)?;
            if gpu.arch != arch {
                return Err(refuse(format!(
                    "GPU {ordinal} is {} but GPU 0 is {arch}: a mesh needs GPUs of one architecture",
                    gpu.arch
                )));
            }
            devices.push(self.load(gpu, program, abis.to_vec(), cubins)?);
        }
        if devices[0].checks_wait() {
            return Err(refuse(
                "its launch checks read positions the run computes, which a mesh of GPUs does \
                 not check yet"
                    .into(),
            ));
        }
        let ordinals: Vec<u32> = (0..world).collect();
        let comms = runtime::Comms::init(&ordinals).map_err(unavailable)?;
        Ok(CudaMeshExecutable::new(devices, comms))
    }

    /// How many GPUs the driver sees (0 without a driver).
    pub fn gpu_count(&self) -> u32 {
        *self.gpus.get_or_init(runtime::device_count)
    }

    /// [`Backend::compile`] with the concrete executable type.
    pub fn compile_cuda(&self, program: &Program) -> Result<CudaExecutable, BackendError> {
        if let Some(k) = program.kernels.iter().find(|k| k.collective().is_some()) {
            return Err(BackendError::Unsupported {
                backend: "cuda".into(),
                reason: format!(
                    "kernel {} is a collective: compile the program for a mesh of GPUs \
                     (compile_mesh)",
                    k.name
                ),
            });
        }
        let gpu = self.gpu()?;
        let (compiled, _) = self.compile_for(program, std::slice::from_ref(&gpu.arch))?;
        let cubins = compiled.cubins.get(&gpu.arch).cloned().unwrap_or_default();
        self.load(gpu, program, compiled.abis, &cubins)
    }

    /// Loads an AOT package's program and its cubins for this machine's GPU (no toolchain
    /// needed).
    pub fn load_package(&self, pkg: &package::Package) -> Result<CudaExecutable, BackendError> {
        if let Some(mesh) = &pkg.mesh {
            return Err(BackendError::BadInput(format!(
                "the package is cut for a mesh of {} GPUs; load it as a mesh",
                mesh.plan.world
            )));
        }
        let gpu = self.gpu()?;
        let cubins = package_cubins(pkg, &gpu.arch)?;
        self.load(gpu, &pkg.program, pkg.abis.clone(), cubins)
    }

    fn load(
        &self,
        gpu: Rc<Gpu>,
        program: &Program,
        abis: Vec<codegen::KernelAbi>,
        cubins: &[compile::Cubin],
    ) -> Result<CudaExecutable, BackendError> {
        let mut exe = runtime::Loaded::load(gpu, program, abis, cubins).map_err(|reason| {
            BackendError::Kernel {
                kernel: "(loading)".into(),
                reason,
            }
        })?;
        exe.set_mode(self.mode);
        exe.set_matmul_policy(self.matmul_policy()?.clone());
        exe.set_attention_policy(self.attention_policy()?.clone());
        exe.set_conv_policy(self.conv_policy()?.clone());
        exe.set_poison(self.poison);
        Ok(exe)
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    /// [`gpu_target`] for this backend's tuning and matmul policy (the defaults where a
    /// setting cannot be read; compiling then reports it); convolutions read channels-last
    /// copies of their inputs unless every one takes the generated kernel by policy (its NCHW
    /// gather beats its NHWC loop on most shapes: `tir_opt::channels_last`).
    fn target(&self) -> Target {
        let default_tuning = Tuning::default();
        let default_policy = MatmulPolicy::default();
        let mut target = gpu_target(
            self.tuning().unwrap_or(&default_tuning),
            self.matmul_policy().unwrap_or(&default_policy),
        );
        let all_generated = self.conv_policy().is_ok_and(|p| {
            p.default == ConvPath::Generated
                && p.per_kernel.values().all(|&k| k == ConvPath::Generated)
        });
        target.fusion.conv_inputs_channels_last = !all_generated;
        target
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            dtypes: DType::ALL.to_vec(),
            symbolic_dims: true,
            persistent_state: true,
            devices: self.gpu_count().max(1),
            reduce_dtypes: nccl_reduce_dtypes(),
        }
    }

    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError> {
        self.matmul_policy()?;
        self.attention_policy()?;
        self.conv_policy()?;
        Ok(Box::new(self.compile_cuda(program)?))
    }

    fn compile_mesh(
        &self,
        program: &Program,
        world: u32,
    ) -> Result<Box<dyn MeshExecutable>, BackendError> {
        Ok(Box::new(self.compile_cuda_mesh(program, world)?))
    }
}

/// Why `program`'s collectives cannot run on a mesh of `world` GPUs through NCCL, naming the
/// kernel, if they cannot.
fn check_collectives(program: &Program, world: u32) -> Result<(), String> {
    tir_lower::mesh::check_world(program, world)?;
    for k in &program.kernels {
        let Some((op, input, _)) = k.collective() else {
            continue;
        };
        let dtype = program.buffers[k.params[input].buffer].ty.dtype;
        runtime::collective_of(op, dtype).map_err(|e| format!("kernel {}: {e}", k.name))?;
    }
    Ok(())
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
    match Gpu::open(0) {
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
    out.push_str(&runtime::libraries());
    out.push('\n');
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

/// `pkg`'s cubins for `arch`, or why it has none.
fn package_cubins<'a>(
    pkg: &'a package::Package,
    arch: &str,
) -> Result<&'a [compile::Cubin], BackendError> {
    pkg.cubins.get(arch).map(Vec::as_slice).ok_or_else(|| {
        let archs: Vec<&str> = pkg.cubins.keys().map(String::as_str).collect();
        BackendError::BadInput(format!(
            "the package has no cubins for this GPU's {arch} (it has: {}); compile it with \
             --arch {arch}",
            archs.join(", "),
        ))
    })
}

/// The element types NCCL reduces (all-reduce and reduce-scatter take the same ones).
fn nccl_reduce_dtypes() -> Vec<DType> {
    let sum = tir_graph::Op::AllReduce {
        op: tir_graph::ReduceOp::Sum,
        world: 2,
    };
    DType::ALL
        .into_iter()
        .filter(|&d| runtime::collective_of(&sum, d).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epilogues_fuse_into_matmuls_only_on_the_generated_path() {
        let fuses = |text: &str| {
            let policy = MatmulPolicy::parse(text).unwrap();
            gpu_target(&Tuning::default(), &policy)
                .fusion
                .fuse_matmul_epilogue
        };
        assert!(fuses("generated"));
        assert!(
            fuses("generated,k1_matmul=cublaslt"),
            "the default path decides"
        );
        assert!(!fuses("auto"));
        assert!(!fuses("cublaslt"));
    }
    #[test]
    fn meshes_reduce_what_nccl_reduces() {
        let reduced = CudaBackend::new().capabilities().reduce_dtypes;
        for d in [DType::F16, DType::BF16, DType::F32, DType::I32, DType::I8] {
            assert!(reduced.contains(&d), "{d}");
        }
        for d in [
            DType::I16,
            DType::U16,
            DType::F8E4M3,
            DType::F8E5M2,
            DType::Bool,
        ] {
            assert!(!reduced.contains(&d), "{d}");
        }
    }
}
