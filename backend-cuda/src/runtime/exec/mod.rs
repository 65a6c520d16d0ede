//! [`CudaExecutable`]: a program's kernels loaded on a GPU, its parameters (uploaded once, when
//! set, and resident), its states and memory, and the ways to run it.
//!
//! A run:
//! 1. binds the inputs: checks them against the signature and binds the symbolic dims
//!    (`tir_lower::run`);
//! 2. when the dims differ from the last run's, shapes every buffer, lays out and checks the
//!    memory plan, sizes the arena and the staging memory and computes each kernel's grid
//!    ([`Shaped`]); otherwise reuses all of it;
//! 3. places every buffer: host inputs in staging device memory (module `staging` copies them
//!    in), device inputs where they are, outputs in staging memory (for host outputs) or in
//!    memory lent to the returned device tensors;
//! 4. evaluates the certificates' launch checks of positions the run does not compute;
//! 5. enqueues the copies and the launches, spread over the GPU's streams by wave
//!    ([`ExecMode::Sync`], [`ExecMode::Async`]), or replays the CUDA graph captured for these
//!    addresses ([`ExecMode::Graph`]; a few graphs are kept, so a loop that alternates between
//!    buffers replays without capturing again). A program with a write position that a kernel
//!    of the run computes (an intermediate, or a state written earlier in the run) runs its
//!    kernels one after another instead, in every mode, waiting before each such kernel to
//!    check the position it will read; a failed check puts the states back as they were
//!    before the run (from a copy made at its start), so a refused run changes nothing;
//! 6. copies host outputs into page-locked memory lent to the returned tensors.
//!
//! Kernels of one schedule wave may run on separate streams; every kernel waits (by events) for
//! the kernels of the previous wave, which is the order the memory plan's reuse assumes. All
//! work joins back into the GPU's stream 0, which orders runs of every executable on the GPU.
//!
//! This module holds the executable and what a user sets on it; its submodules hold the steps:
//! `bind` (1 to 4 and the uploads), `launch` (what each kernel launches, and auto's choice of a
//! library), `enqueue` (5) and `outputs` (6).

mod bind;
mod enqueue;
mod launch;
mod outputs;

use launch::LibraryShape;
pub(super) use launch::{CollectiveLaunch, Launch};

use super::blas::Blas;
use super::block::block_on;
use super::dnn::Dnn;
use super::driver::{self, DeviceMemory, Event, Graph, Kernel, Library, PinnedMemory};
use super::gpu::Gpu;
use super::memory::{pinned_tensor, Fill, TensorMemory};
use super::policy::{AttentionPolicy, ConvPolicy, ExecMode, MatmulPolicy};
use super::staging::Source;
use super::trace::TraceSlot;
use crate::codegen::KernelAbi;
use crate::compile::Cubin;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use tir_graph::{DType, HostTensor};
use tir_lower::run;
use tir_lower::tile::TileKernel;
use tir_lower::{
    BackendError, Device, DeviceTensor, Executable, HostTensors, Program, Signature, Storage,
    TensorRef,
};

/// The CUDA graphs an executable keeps, by the addresses they were captured for.
const GRAPHS: usize = 8;

/// Where a parameter's value is.
enum ParameterMemory {
    /// Uploaded from the host when set.
    Owned(DeviceMemory),
    /// A device tensor of this GPU, used in place.
    Shared(DeviceTensor),
}

struct Parameter {
    memory: ParameterMemory,
    /// Element 0, for launch checks that read it (set from the host).
    first: Option<f64>,
}

impl Parameter {
    fn ptr(&self) -> u64 {
        match &self.memory {
            ParameterMemory::Owned(m) => m.ptr,
            ParameterMemory::Shared(t) => tensor_memory(t).map_or(0, TensorMemory::ptr),
        }
    }
}

/// The CUDA memory behind a device tensor, if it is one of this backend's.
fn tensor_memory(t: &DeviceTensor) -> Option<&TensorMemory> {
    t.storage().as_any().downcast_ref::<TensorMemory>()
}

/// What a run's dims fix: every buffer's shape and size, the arena's layout, each kernel's grid.
pub(super) struct Shaped {
    pub(super) dims: BTreeMap<String, u64>,
    pub(super) shapes: Vec<Vec<u64>>,
    pub(super) bytes: Vec<usize>,
    /// Arena buffers' offsets.
    offsets: BTreeMap<usize, u64>,
    /// Per kernel: its tile blocks, the scalar arguments after its pointers, and whether it
    /// runs its entry for divisible dims.
    grids: Vec<(u32, Vec<u64>, bool)>,
}

/// Where a run's outputs go.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Outputs {
    /// Staging device memory, then page-locked host memory.
    Host,
    /// Device memory lent to the returned tensors.
    Device,
}

/// One run's placement: every buffer's address, and the memory lent to device outputs.
pub(super) struct Placed {
    pub(super) addresses: Vec<u64>,
    lent: Vec<Option<Rc<TensorMemory>>>,
}

/// A program compiled for and loaded on one GPU (see the module doc).
pub struct CudaExecutable {
    pub(super) program: Program,
    /// Each kernel's entry, and its entry for divisible dims when it has one.
    kernels: Vec<(Kernel, Option<Kernel>)>,
    abis: Vec<KernelAbi>,
    /// One per kernel, recorded after its launch.
    done: Vec<Event>,
    /// Recorded on stream 0 before the launches: the other streams start after it (after the
    /// uploads, and inside a graph capture).
    start: Event,
    /// Recorded after a run's uploads: the host staging is free again once it has passed.
    uploaded: Event,
    constants: Vec<Option<DeviceMemory>>,
    parameters: BTreeMap<String, Parameter>,
    parameter_dims: BTreeMap<String, Vec<u64>>,
    /// Device memory of input and output buffers, by buffer.
    staged: Vec<Option<DeviceMemory>>,
    /// Page-locked staging of host inputs, by buffer.
    host_staging: Vec<Option<PinnedMemory>>,
    arena: Option<DeviceMemory>,
    /// Each state's dims and memory, once a run has bound it.
    states: BTreeMap<String, (Vec<u64>, DeviceMemory)>,
    /// Copies of the states made at the start of a run whose launch checks wait for the run
    /// ([`CudaExecutable::enqueue_checked`]), to undo a run that fails one.
    state_copies: BTreeMap<String, DeviceMemory>,
    state_dims: BTreeMap<String, Vec<u64>>,
    pub(super) shaped: Option<Shaped>,
    mode: ExecMode,
    /// Captured graphs by the addresses of their run, most recently used last.
    graphs: Vec<(Vec<u64>, Graph)>,
    matmul: MatmulPolicy,
    attention: AttentionPolicy,
    conv: ConvPolicy,
    /// Fill the arena and outputs with all-ones bytes (NaN in floats) before each run, so that
    /// an element no kernel writes cannot pass a comparison.
    poison: bool,
    blas: Option<Blas>,
    dnn: Option<Dnn>,
    /// Auto's choices: whether the library was faster for a kernel at a shape.
    chosen: HashMap<(usize, LibraryShape), bool>,
    /// The events of a traced run ([`CudaExecutable::trace_run`]) while it is enqueued.
    pub(super) trace: TraceSlot,
    /// Last: fields drop in order, and everything above needs the GPU's context.
    pub(super) gpu: Rc<Gpu>,
}

fn kernel_error(kernel: &TileKernel, reason: String) -> BackendError {
    BackendError::Kernel {
        kernel: kernel.name.clone(),
        reason,
    }
}

impl CudaExecutable {
    /// Loads `cubins` (one per kernel of `program`, for `gpu`'s architecture; each distinct
    /// one once) and uploads the constants.
    pub(crate) fn load(
        gpu: Rc<Gpu>,
        program: &Program,
        abis: Vec<KernelAbi>,
        cubins: &[Cubin],
    ) -> Result<CudaExecutable, String> {
        gpu.bind()?;
        let mut libraries: HashMap<&[u8], Rc<Library>> = HashMap::new();
        let mut kernels = Vec::with_capacity(abis.len());
        for (abi, cubin) in abis.iter().zip(cubins) {
            let library = match libraries.get(&cubin[..]) {
                Some(l) => l.clone(),
                None => {
                    let l = Library::load(cubin)?;
                    libraries.insert(cubin, l.clone());
                    l
                }
            };
            let divisible = abi.divisible_entry.as_ref();
            kernels.push((
                Kernel::get(&library, &abi.entry)?,
                divisible.map(|e| Kernel::get(&library, e)).transpose()?,
            ));
        }
        let done = (0..kernels.len())
            .map(|_| Event::new())
            .collect::<Result<Vec<_>, _>>()?;
        // Uploaded on stream 0, which orders them before every run (the other streams are
        // non-blocking: a synchronous copy would not be).
        let stream = &gpu.streams()[0];
        let mut constants = Vec::with_capacity(program.buffers.len());
        for b in &program.buffers {
            constants.push(match &b.storage {
                Storage::Constant(data) => {
                    let host = HostTensor::from_const(b.ty.dtype, &[data.len() as u64], data)
                        .map_err(|e| format!("constant {}: {e}", b.name))?;
                    let mem = DeviceMemory::alloc(host.bytes().len())?;
                    driver::upload_async(mem.ptr, host.bytes(), stream)?;
                    stream.synchronize()?;
                    Some(mem)
                }
                _ => None,
            });
        }
        let none = || (0..program.buffers.len()).map(|_| None).collect();
        Ok(CudaExecutable {
            program: program.clone(),
            kernels,
            abis,
            done,
            start: Event::new()?,
            uploaded: Event::new()?,
            constants,
            parameters: BTreeMap::new(),
            parameter_dims: BTreeMap::new(),
            staged: none(),
            host_staging: (0..program.buffers.len()).map(|_| None).collect(),
            arena: None,
            states: BTreeMap::new(),
            state_copies: BTreeMap::new(),
            state_dims: BTreeMap::new(),
            shaped: None,
            mode: ExecMode::Sync,
            graphs: Vec::new(),
            matmul: MatmulPolicy::default(),
            attention: AttentionPolicy::default(),
            conv: ConvPolicy::default(),
            poison: false,
            blas: None,
            dnn: None,
            chosen: HashMap::new(),
            trace: TraceSlot::default(),
            gpu,
        })
    }

    /// The program this executable runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Sets how later runs execute (see [`ExecMode`]).
    pub fn set_mode(&mut self, mode: ExecMode) {
        self.mode = mode;
    }

    /// How runs execute.
    pub fn mode(&self) -> ExecMode {
        self.mode
    }

    /// Sets the matmul paths; the choices and graphs made under the old ones are forgotten.
    pub fn set_matmul_policy(&mut self, policy: MatmulPolicy) {
        self.matmul = policy;
        self.chosen.clear();
        self.graphs.clear();
    }

    /// Sets the attention paths; the choices and graphs made under the old ones are forgotten.
    pub fn set_attention_policy(&mut self, policy: AttentionPolicy) {
        self.attention = policy;
        self.chosen.clear();
        self.graphs.clear();
    }

    /// Sets the convolution paths; the choices and graphs made under the old ones are forgotten.
    pub fn set_conv_policy(&mut self, policy: ConvPolicy) {
        self.conv = policy;
        self.chosen.clear();
        self.graphs.clear();
    }

    /// Whether each run first fills the arena and the outputs with all-ones bytes (NaN in
    /// floats), for tests: an element no kernel writes then never passes a comparison.
    pub fn set_poison(&mut self, poison: bool) {
        self.poison = poison;
    }

    /// The GPU this executable runs on.
    pub fn gpu(&self) -> &Rc<Gpu> {
        &self.gpu
    }

    /// Whether each run fills scratch with all-ones bytes first ([`Self::set_poison`]).
    pub(super) fn poisons(&self) -> bool {
        self.poison
    }

    pub(super) fn device_error(&self, reason: String) -> BackendError {
        BackendError::Device {
            device: self.device_of(),
            reason,
        }
    }

    /// Waits until the GPU has finished everything enqueued on its streams so far.
    pub(super) fn wait(&self) -> Result<(), String> {
        self.gpu.streams()[0].synchronize()
    }

    fn device_of(&self) -> Device {
        Device {
            backend: "cuda",
            ordinal: self.gpu.ordinal,
        }
    }

    /// Steps 1 to 5 up to the launches, for every kind of run.
    pub(super) fn prepare(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        outputs: Outputs,
        source: Source,
    ) -> Result<Placed, BackendError> {
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        self.bind(inputs)?;
        let placed = self.place(inputs, outputs)?;
        self.check_launches(inputs, &placed.addresses)?;
        self.upload_inputs(inputs, source)?;
        Ok(placed)
    }
}

impl Drop for CudaExecutable {
    fn drop(&mut self) {
        // Memory is freed below while the GPU may still run work that uses it.
        let _ = self.gpu.bind();
        let _ = self.wait();
        // The graph's kernel nodes refer to the loaded libraries: destroying it after they are
        // unloaded crashes the driver.
        self.graphs.clear();
    }
}

impl Executable for CudaExecutable {
    fn signature(&self) -> &Signature {
        &self.program.signature
    }

    fn device(&self) -> Device {
        self.device_of()
    }

    fn set_parameter(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), BackendError> {
        run::check_parameter(&self.program, name, value.dtype(), value.dims())?;
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        if let TensorRef::Device(t) = value {
            self.device_address(name, t)?;
        }
        // Runs still in flight may read the value this one replaces (or its memory, freed).
        self.wait().map_err(|e| self.device_error(e))?;
        // Unset until the new value is in place: a failure below leaves it unset, not stale.
        let old = self.parameters.remove(name);
        self.parameter_dims.remove(name);
        let (memory, first) = match value {
            TensorRef::Device(t) => (ParameterMemory::Shared(t.clone()), None),
            TensorRef::Host(t) => {
                let bytes = t.bytes();
                let reused = match old {
                    Some(Parameter {
                        memory: ParameterMemory::Owned(m),
                        ..
                    }) if m.bytes >= bytes.len() => Some(m),
                    _ => None,
                };
                let m = match reused {
                    Some(m) => m,
                    None => DeviceMemory::alloc(bytes.len()).map_err(|e| self.device_error(e))?,
                };
                let stream = &self.gpu.streams()[0];
                driver::upload_async(m.ptr, bytes, stream)
                    .and_then(|()| stream.synchronize())
                    .map_err(|e| self.device_error(format!("parameter {name:?}: {e}")))?;
                (ParameterMemory::Owned(m), t.element_f64(0))
            }
        };
        self.parameter_dims
            .insert(name.to_string(), value.dims().to_vec());
        self.parameters
            .insert(name.to_string(), Parameter { memory, first });
        Ok(())
    }

    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<HostTensors, BackendError> {
        if self.mode == ExecMode::Async {
            return block_on(self.run_async(inputs)?);
        }
        self.run_to_host(inputs)
    }

    fn run_on_device(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError> {
        let placed = self.prepare(inputs, Outputs::Device, Source::Staged)?;
        self.enqueue(&placed)?;
        self.device_outputs(&placed)
    }

    fn to_device(&mut self, tensor: &HostTensor<'_>) -> Result<DeviceTensor, BackendError> {
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        let bytes = tensor.bytes();
        let memory =
            TensorMemory::take(&self.gpu, bytes.len()).map_err(|e| self.device_error(e))?;
        let stream = &self.gpu.streams()[0];
        driver::upload_async(memory.ptr(), bytes, stream)
            .and_then(|()| stream.synchronize())
            .map_err(|e| self.device_error(e))?;
        Ok(DeviceTensor::new(
            tensor.dtype(),
            tensor.dims().to_vec(),
            Rc::new(memory),
        ))
    }

    fn alloc_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, BackendError> {
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        pinned_tensor(&self.gpu, dtype, dims, Fill::Zeros).map_err(|e| self.device_error(e))
    }

    /// Every state bound by a run; before the first run, zeros for the states of static shape.
    fn states(&self) -> Result<HostTensors, BackendError> {
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        self.wait().map_err(|e| self.device_error(e))?;
        let mut out = BTreeMap::new();
        for (name, ty) in &self.program.signature.states {
            let value = match self.states.get(name) {
                Some((dims, mem)) => {
                    let mut t = HostTensor::zeros(ty.dtype, dims)
                        .map_err(|e| BackendError::BadInput(e.to_string()))?;
                    let bytes = t
                        .bytes_mut()
                        .map_err(|e| self.device_error(e.to_string()))?;
                    let stream = &self.gpu.streams()[0];
                    driver::download_async(bytes, mem.ptr, stream)
                        .and_then(|()| stream.synchronize())
                        .map_err(|e| self.device_error(e))?;
                    t
                }
                None => match ty.shape.static_dims() {
                    Some(dims) => HostTensor::zeros(ty.dtype, &dims)
                        .map_err(|e| BackendError::BadInput(e.to_string()))?,
                    None => continue,
                },
            };
            out.insert(name.clone(), value);
        }
        Ok(out)
    }
}
