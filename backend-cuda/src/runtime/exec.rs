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

use super::blas::{Blas, MatmulOperands, MatmulShape};
use super::block::block_on;
use super::dnn::{self, AttentionOperands, AttentionShape, ConvOperands, ConvShape, Dnn};
use super::driver::{
    self, DeviceMemory, Event, Graph, GraphBuilder, Kernel, Library, Node, PinnedMemory, Stream,
};
use super::gpu::Gpu;
use super::memory::{pinned_tensor, Fill, TensorMemory};
use super::nccl::{Call, Collective};
use super::policy::{
    AttentionPath, AttentionPolicy, ConvPath, ConvPolicy, ExecMode, MatmulPath, MatmulPolicy,
};
use super::staging::{self, Source};
use super::timing::ColdTimer;
use super::trace::{SpanKind, Tracer};
use crate::codegen::{KernelAbi, PARAM_ALIGN};
use crate::compile::Cubin;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use tir_graph::{DType, HostTensor, Op};
use tir_lower::legality::LaunchCheck;
use tir_lower::run::{self, type_name};
use tir_lower::tile::{AttentionOperand, LibraryAttention, LibraryCall, TileKernel};
use tir_lower::{
    BackendError, Device, DeviceTensor, Executable, HostTensors, Program, Signature, Storage,
    TensorRef,
};

/// The CUDA graphs an executable keeps, by the addresses they were captured for.
const GRAPHS: usize = 8;

/// One kernel's work in a run.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Launch {
    /// The generated kernel: tile blocks (0: nothing to do) and arguments.
    /// `divisible`: the entry for dims that [`crate::codegen::DIM_DIVISOR`] divides (and
    /// [`crate::codegen::DIM_BOUND`] bounds).
    Tiles {
        blocks: u32,
        args: Vec<u64>,
        divisible: bool,
    },
    /// cuBLASLt on the addresses of its operands.
    Blas {
        shape: MatmulShape,
        buffers: MatmulOperands,
    },
    /// cuDNN's fused attention on the addresses of its operands.
    Dnn {
        shape: AttentionShape,
        buffers: AttentionOperands,
    },
    /// One cuDNN plan of a convolution with its bias and activation.
    DnnConv {
        shape: ConvShape,
        buffers: ConvOperands,
    },
    /// A collective through NCCL, which only a mesh runs ([`super::mesh`]).
    Collective(CollectiveLaunch),
}

/// One device's part of a collective kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CollectiveLaunch {
    /// The NCCL call on this device's own input and output buffers.
    pub(super) call: Call,
    /// The devices of the mesh.
    pub(super) world: usize,
    /// For a gather (or scatter) along an axis with dims before it: the rows (the product of
    /// those dims) and the bytes of one device's part of a row. NCCL gathers (scatters) whole
    /// per-device blocks, so the parts go through a staging buffer, rank by rank.
    pub(super) strided: Option<(usize, usize)>,
}

impl Launch {
    /// How it runs: `tiles xN` (the generated kernel on N tile blocks), `cublaslt` or `cudnn`.
    pub(super) fn how(&self) -> String {
        match self {
            Launch::Tiles { blocks, .. } => format!("tiles x{blocks}"),
            Launch::Blas { .. } => "cublaslt".to_string(),
            Launch::Dnn { .. } | Launch::DnnConv { .. } => "cudnn".to_string(),
            Launch::Collective(_) => "nccl".to_string(),
        }
    }
}

/// The shape of a library call, which auto's choice is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum LibraryShape {
    Matmul(MatmulShape),
    Attention(AttentionShape),
    Conv(ConvShape),
}

/// Whether a library call runs: never, always, or when it measures faster.
enum LibraryUse {
    Never,
    Always,
    Timed,
}

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
    pub(super) tracer: RefCell<Option<Tracer>>,
    /// Last: fields drop in order, and everything above needs the GPU's context.
    pub(super) gpu: Rc<Gpu>,
}

fn kernel_error(kernel: &TileKernel, reason: String) -> BackendError {
    BackendError::Kernel {
        kernel: kernel.name.clone(),
        reason,
    }
}

/// The library launch of `kernel` under `dims`, with buffer `addresses`, if it has a library
/// call.
fn library_launch(
    kernel: &TileKernel,
    dims: &BTreeMap<String, u64>,
    addresses: &[u64],
) -> Option<Launch> {
    let address = |p: &usize| kernel.params.get(*p).map(|tp| addresses[tp.buffer]);
    match kernel.library.as_ref()? {
        LibraryCall::MatMul {
            a,
            b,
            c,
            residual,
            dtype,
            batch,
            m,
            k,
            n,
            b_batched,
            b_transposed,
        } => {
            let value = |d: &tir_graph::Dim| run::dim_value(d, dims).ok();
            let mut count = 1u64;
            for d in batch {
                count = count.checked_mul(value(d)?)?;
            }
            Some(Launch::Blas {
                shape: MatmulShape {
                    dtype: *dtype,
                    batch: count,
                    m: value(m)?,
                    k: value(k)?,
                    n: value(n)?,
                    b_batched: *b_batched,
                    b_transposed: *b_transposed,
                },
                buffers: MatmulOperands {
                    a: address(a)?,
                    b: address(b)?,
                    c: address(c)?,
                    residual: match residual {
                        Some(r) => Some(address(r)?),
                        None => None,
                    },
                },
            })
        }
        // Not an alternative to the body: `collective_launch` makes it.
        LibraryCall::Collective { .. } => None,
        LibraryCall::Attention(call) => Some(Launch::Dnn {
            shape: attention_shape(call, dims)?,
            buffers: AttentionOperands {
                q: address(&call.q.param)?,
                k: address(&call.k.param)?,
                v: address(&call.v.param)?,
                o: address(&call.o.param)?,
            },
        }),
        LibraryCall::Conv(call) => Some(Launch::DnnConv {
            shape: dnn::conv_shape(call, run::dim_value(&call.batch, dims).ok()?)?,
            buffers: ConvOperands {
                x: address(&call.x)?,
                w: address(&call.w)?,
                bias: call.bias.as_ref().map_or(Some(0), address)?,
                y: address(&call.y)?,
            },
        }),
    }
}

/// Collective `kernel`'s launch with buffers of `shaped`'s shapes at `addresses`, if it is one.
fn collective_launch(
    program: &Program,
    kernel: &TileKernel,
    shaped: &Shaped,
    addresses: &[u64],
) -> Result<Option<Launch>, String> {
    let Some((op, input, output)) = kernel.collective() else {
        return Ok(None);
    };
    let (from, to) = (kernel.params[input].buffer, kernel.params[output].buffer);
    let dtype = program.buffers[from].ty.dtype;
    let collective = Collective::of(op, dtype)?;
    let elements = |b: usize| shaped.shapes[b].iter().product::<u64>() as usize;
    // The split axis and the buffer holding one device's part along it.
    let (world, split) = match op {
        Op::AllReduce { world, .. } => (*world, None),
        Op::AllGather { axis, world } => (*world, Some((*axis, from))),
        Op::ReduceScatter { axis, world } => (*world, Some((*axis, to))),
        other => return Err(format!("{other} is not a collective")),
    };
    let strided = match split {
        Some((axis, part)) => {
            let rows = shaped.shapes[part][..axis].iter().product::<u64>() as usize;
            let bytes = shaped.bytes[part];
            if rows > 1 && !bytes.is_multiple_of(rows) {
                return Err(format!("{bytes} bytes do not split into {rows} rows"));
            }
            (rows > 1).then(|| (rows, bytes / rows))
        }
        None => None,
    };
    let count = match collective {
        Collective::AllReduce(..) => elements(from),
        Collective::AllGather => shaped.bytes[from],
        Collective::ReduceScatter(_) => elements(to),
    };
    Ok(Some(Launch::Collective(CollectiveLaunch {
        call: Call {
            collective,
            input: addresses[from],
            output: addresses[to],
            count,
        },
        world: world as usize,
        strided,
    })))
}

/// The shape of a library attention under `dims`; `None` where an extent is 0 (the generated
/// kernel then runs: cuDNN takes no empty tensor).
fn attention_shape(
    call: &LibraryAttention,
    dims: &BTreeMap<String, u64>,
) -> Option<AttentionShape> {
    let value = |d: &tir_graph::Dim| run::dim_value(d, dims).ok();
    let [b, h, sq, sk] = &call.dims;
    let extents = [value(b)?, value(h)?, value(sq)?, value(sk)?];
    if extents.contains(&0) {
        return None;
    }
    let strides = |op: &AttentionOperand, seq: u64, head: u64| {
        let mut s = [0u64; 4];
        for (i, p) in op.strides.iter().enumerate() {
            s[i] = p.value(dims).ok()?;
        }
        // A dim of extent 1 may have any stride: give it the row-major one.
        let shape = [extents[0], extents[1], seq, head];
        for i in (0..3).rev() {
            if shape[i] == 1 {
                s[i] = s[i + 1].checked_mul(shape[i + 1])?;
            }
        }
        Some(s)
    };
    let (d, d_v) = (call.d, call.d_v);
    Some(AttentionShape {
        dtype: call.dtype,
        dims: extents,
        d,
        d_v,
        strides: [
            strides(&call.q, extents[2], d)?,
            strides(&call.k, extents[3], d)?,
            strides(&call.v, extents[3], d_v)?,
            strides(&call.o, extents[2], d_v)?,
        ],
        causal: call.causal,
        scale: (call.scale.0 as f32).to_bits(),
    })
}

/// What `slot` holds, made by `load` when it holds nothing yet.
fn loaded<T>(
    slot: &mut Option<T>,
    load: impl FnOnce() -> Result<T, String>,
) -> Result<&mut T, String> {
    match slot {
        Some(library) => Ok(library),
        None => Ok(slot.insert(load()?)),
    }
}

/// Makes sure `slot` holds at least `bytes`, reallocating (and so moving) when it does not.
fn ensure(slot: &mut Option<DeviceMemory>, bytes: usize) -> Result<u64, String> {
    if slot.as_ref().is_none_or(|m| m.bytes < bytes) {
        *slot = None;
        *slot = Some(DeviceMemory::alloc(bytes)?);
    }
    Ok(slot.as_ref().map_or(0, |m| m.ptr))
}

/// The input named `name` of a run.
fn input<'a>(inputs: &'a [(&str, TensorRef<'a>)], name: &str) -> Option<TensorRef<'a>> {
    inputs.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
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
            tracer: RefCell::new(None),
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

    /// Steps 1 and 2 of a run (see the module doc).
    fn bind(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<(), BackendError> {
        let dims = run::bind_dims(
            &self.program,
            inputs,
            &self.parameter_dims,
            &self.state_dims,
        )?;
        if self.shaped.as_ref().is_some_and(|s| s.dims == dims) {
            return Ok(());
        }
        run::check_kernel_dims(&self.program, &dims)?;
        self.reshape(dims)
    }

    /// Shapes every buffer for `dims` and makes room for them.
    fn reshape(&mut self, dims: BTreeMap<String, u64>) -> Result<(), BackendError> {
        let shapes = run::buffer_shapes(&self.program, &dims)?;
        let layout = run::checked_layout(&self.program, &dims, "cuda")?;
        let bytes = self
            .program
            .buffers
            .iter()
            .map(|b| {
                tir_lower::plan::buffer_bytes(b, &dims)
                    .map(|n| n as usize)
                    .map_err(|e| BackendError::BadInput(format!("buffer {}: {e}", b.name)))
            })
            .collect::<Result<Vec<usize>, _>>()?;
        // Larger buffers replace smaller ones, which runs still in flight may use.
        self.wait().map_err(|e| self.device_error(e))?;
        ensure(&mut self.arena, layout.size as usize).map_err(|e| self.device_error(e))?;
        let mut states = Vec::new();
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            match &buffer.storage {
                Storage::Input(_) | Storage::Output => {
                    ensure(&mut self.staged[b], bytes[b]).map_err(|e| BackendError::Device {
                        device: self.device_of(),
                        reason: e,
                    })?;
                }
                Storage::State(name) => states.push((name.clone(), b)),
                _ => {}
            }
        }
        for (name, b) in states {
            self.bind_state(&name, &shapes[b], bytes[b])?;
        }
        let mut grids = Vec::with_capacity(self.kernels.len());
        for (kernel, abi) in self.program.kernels.iter().zip(&self.abis) {
            let extents = kernel
                .grid_extents(&dims)
                .map_err(|e| kernel_error(kernel, e))?;
            let blocks = extents
                .iter()
                .try_fold(1i64, |a, &e| a.checked_mul(e.max(0)))
                .filter(|&n| n <= i64::from(i32::MAX))
                .ok_or_else(|| {
                    kernel_error(
                        kernel,
                        format!("the grid {extents:?} has too many tile blocks"),
                    )
                })?;
            let mut scalars: Vec<u64> = abi
                .dims
                .iter()
                .map(|d| dims.get(d).copied().unwrap_or(0))
                .collect();
            if abi.grid_extents {
                scalars.extend(extents.iter().map(|&e| e as u64));
            }
            // A persistent entry loops over the grid's tiles, so fills the GPU once at most.
            let blocks = match abi.blocks_per_sm {
                Some(per_sm) => blocks.min(i64::from(self.gpu.sms) * i64::from(per_sm)),
                None => blocks,
            };
            // The entry for divisible dims where the binding's dims are, and its buffers are
            // no larger than the bound that entry's views are clamped to.
            let bound = crate::codegen::DIM_BOUND as u64;
            let divisible = abi.divisible_entry.is_some()
                && abi.dims.iter().all(|d| {
                    dims.get(d)
                        .is_some_and(|&n| n % crate::codegen::DIM_DIVISOR as u64 == 0 && n <= bound)
                })
                && kernel
                    .params
                    .iter()
                    .all(|p| (bytes[p.buffer] / p.dtype.size_bytes().max(1)) as u64 <= bound);
            grids.push((blocks as u32, scalars, divisible));
        }
        self.graphs.clear();
        self.shaped = Some(Shaped {
            dims,
            shapes,
            bytes,
            offsets: layout.offsets,
            grids,
        });
        Ok(())
    }

    /// Binds state `name` to `dims` (zeros when first bound); refuses other dims later.
    fn bind_state(&mut self, name: &str, dims: &[u64], bytes: usize) -> Result<(), BackendError> {
        if let Some((held, _)) = self.states.get(name) {
            if held.as_slice() == dims {
                return Ok(());
            }
            let dtype = self
                .program
                .state_buffer(name)
                .map_or(DType::F32, |b| self.program.buffers[b].ty.dtype);
            return Err(BackendError::BadInput(format!(
                "state {name:?}: this run binds {}, but earlier runs bound {}",
                type_name(dtype, dims),
                type_name(dtype, held)
            )));
        }
        let mem = DeviceMemory::alloc(bytes).map_err(|e| self.device_error(e))?;
        // On stream 0, so that the zeros land before this run's kernels read the state.
        driver::fill_async(mem.ptr, 0, mem.bytes, &self.gpu.streams()[0])
            .map_err(|e| self.device_error(e))?;
        self.states.insert(name.to_string(), (dims.to_vec(), mem));
        self.state_dims.insert(name.to_string(), dims.to_vec());
        Ok(())
    }

    fn shaped(&self) -> Result<&Shaped, BackendError> {
        self.shaped
            .as_ref()
            .ok_or_else(|| BackendError::BadInput("no run has bound the program's dims".into()))
    }

    /// Step 3: every buffer's address for a run with `inputs` whose outputs go to `outputs`.
    fn place(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        outputs: Outputs,
    ) -> Result<Placed, BackendError> {
        let shaped = self.shaped()?;
        let n = self.program.buffers.len();
        let (mut addresses, mut lent) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            let staged = || self.staged[b].as_ref().map_or(0, |m| m.ptr);
            let mut lend = None;
            let address = match &buffer.storage {
                Storage::Arena => {
                    self.arena.as_ref().map_or(0, |m| m.ptr)
                        + shaped.offsets.get(&b).copied().unwrap_or(0)
                }
                Storage::Constant(_) => self.constants[b].as_ref().map_or(0, |m| m.ptr),
                Storage::State(name) => self.states.get(name).map_or(0, |(_, m)| m.ptr),
                Storage::Parameter(name) => self
                    .parameters
                    .get(name)
                    .map(Parameter::ptr)
                    .ok_or_else(|| {
                        BackendError::BadInput(format!("parameter {name:?} is not set"))
                    })?,
                Storage::Input(name) => match input(inputs, name) {
                    Some(TensorRef::Device(t)) => self.device_address(name, t)?,
                    _ => staged(),
                },
                Storage::Output => match outputs {
                    Outputs::Host => staged(),
                    Outputs::Device => {
                        let memory = TensorMemory::take(&self.gpu, shaped.bytes[b])
                            .map_err(|e| self.device_error(e))?;
                        let ptr = memory.ptr();
                        lend = Some(Rc::new(memory));
                        ptr
                    }
                },
            };
            addresses.push(address);
            lent.push(lend);
        }
        Ok(Placed { addresses, lent })
    }

    /// The address of device tensor `t`, which must be on this executable's GPU.
    fn device_address(&self, name: &str, t: &DeviceTensor) -> Result<u64, BackendError> {
        match tensor_memory(t) {
            Some(m) if m.is_on(&self.gpu) => Ok(m.ptr()),
            _ => Err(BackendError::BadInput(format!(
                "{name:?} is a tensor on {} (or another thread's), not on {}: copy it to the host \
                 first",
                t.device(),
                self.device()
            ))),
        }
    }

    /// Step 4: the certificates' launch checks, but those of positions the run computes
    /// ([`Self::enqueue_checked`] makes those).
    fn check_launches(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        addresses: &[u64],
    ) -> Result<(), BackendError> {
        let dims = &self.shaped()?.dims;
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            for check in &self.program.certificates[k].checks {
                if self.computed_in_run(check) {
                    continue; // checked by enqueue_checked, when the run has computed it
                }
                run::check_launch(
                    &self.program,
                    check,
                    |b| self.first_element(b, inputs, addresses),
                    dims,
                )
                .map_err(|e| kernel_error(kernel, e))?;
            }
        }
        Ok(())
    }

    /// Whether the position `check` reads is computed by the run: a kernel writes its buffer
    /// (an intermediate, an output, or a state updated before it is read).
    fn computed_in_run(&self, check: &LaunchCheck) -> bool {
        let LaunchCheck::SliceInBounds { offset_buffer, .. } = check;
        self.program.kernels.iter().any(|k| {
            k.writes.iter().any(|w| {
                k.params
                    .get(w.param)
                    .is_some_and(|p| p.buffer == *offset_buffer)
            })
        })
    }

    /// Whether a launch check of the program reads a position the run computes, so that its
    /// runs go through [`Self::enqueue_checked`].
    pub(crate) fn checks_wait(&self) -> bool {
        let certificates = &self.program.certificates;
        certificates
            .iter()
            .any(|c| c.checks.iter().any(|check| self.computed_in_run(check)))
    }

    /// Element 0 of buffer `b` for a launch check: from the host where it is there, else read
    /// from the device (after the work before it).
    fn first_element(
        &self,
        b: usize,
        inputs: &[(&str, TensorRef<'_>)],
        addresses: &[u64],
    ) -> Option<f64> {
        let buffer = &self.program.buffers[b];
        if self.shaped.as_ref()?.bytes[b] == 0 {
            // Nothing to read: the allocation's padding is not an element.
            return None;
        }
        match &buffer.storage {
            Storage::Input(n) => match input(inputs, n)? {
                TensorRef::Host(t) => t.element_f64(0),
                TensorRef::Device(_) => self.read_first(buffer.ty.dtype, addresses[b]),
            },
            Storage::Parameter(n) => {
                let p = self.parameters.get(n)?;
                p.first
                    .or_else(|| self.read_first(buffer.ty.dtype, addresses[b]))
            }
            Storage::Constant(data) => data.get_f64(0),
            Storage::State(_) => self.read_first(buffer.ty.dtype, addresses[b]),
            Storage::Output | Storage::Arena => None,
        }
    }

    /// The first element of a `dtype` tensor at device `address`, once the GPU is idle.
    fn read_first(&self, dtype: DType, address: u64) -> Option<f64> {
        let mut bytes = vec![0u8; dtype.size_bytes()];
        let stream = &self.gpu.streams()[0];
        driver::download_async(&mut bytes, address, stream).ok()?;
        stream.synchronize().ok()?;
        HostTensor::from_bytes(dtype, &[1], &bytes)
            .ok()?
            .element_f64(0)
    }

    /// Step 5, the copies: enqueues each host input's copy into its staging device memory.
    fn upload_inputs(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        source: Source,
    ) -> Result<(), BackendError> {
        let gpu = self.gpu.clone();
        let stream = &gpu.streams()[0];
        // The staging of the last run's copies is rewritten only once they have run.
        self.uploaded
            .synchronize()
            .map_err(|e| self.device_error(e))?;
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            let Storage::Input(name) = &buffer.storage else {
                continue;
            };
            let Some(TensorRef::Host(t)) = input(inputs, name) else {
                continue;
            };
            // Read once: the memory behind a tensor is the user's to implement.
            let bytes = t.bytes();
            let room = self.staged[b].as_ref().map_or(0, |m| m.bytes);
            if bytes.len() > room {
                return Err(BackendError::BadInput(format!(
                    "input {name:?}: its memory holds {} bytes, more than the {room} of {}",
                    bytes.len(),
                    t.type_name()
                )));
            }
            let dst = self.staged[b].as_ref().map_or(0, |m| m.ptr);
            let span = (name.as_str(), SpanKind::Upload, bytes.len() as u64);
            let device = self.device_of();
            let failed = |e: String| BackendError::Device {
                device,
                reason: format!("input {name:?}: {e}"),
            };
            let start = self.span_start(stream).map_err(failed)?;
            let host_staging = &mut self.host_staging[b];
            staging::upload(bytes, dst, host_staging, gpu.context(), source, stream)
                .map_err(failed)?;
            self.span_end(start, span, 0, stream).map_err(failed)?;
        }
        self.uploaded
            .record(stream)
            .map_err(|e| self.device_error(e))
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

    /// Kernel `k`'s entry: for dims that [`crate::codegen::DIM_DIVISOR`] divides, when
    /// `divisible` (set only where it has one).
    fn entry(&self, k: usize, divisible: bool) -> &Kernel {
        match &self.kernels[k] {
            (_, Some(twin)) if divisible => twin,
            (whole, _) => whole,
        }
    }

    /// Every kernel's launch with buffers at `addresses` (auto's choice timed on first use).
    pub(super) fn launches(&mut self, addresses: &[u64]) -> Result<Vec<Launch>, BackendError> {
        let mut launches = Vec::with_capacity(self.kernels.len());
        let mut timer = None;
        for k in 0..self.kernels.len() {
            let shaped = self.shaped()?;
            let kernel = &self.program.kernels[k];
            let (blocks, scalars, divisible) = &shaped.grids[k];
            let mut args: Vec<u64> = kernel.params.iter().map(|p| addresses[p.buffer]).collect();
            if let Some(p) = args.iter().position(|a| a % PARAM_ALIGN != 0) {
                return Err(kernel_error(
                    kernel,
                    format!("parameter {p} is not {PARAM_ALIGN}-byte aligned"),
                ));
            }
            args.extend(scalars);
            if let Some(collective) = collective_launch(&self.program, kernel, shaped, addresses)
                .map_err(|e| kernel_error(kernel, e))?
            {
                launches.push(collective);
                continue;
            }
            let tiles = Launch::Tiles {
                blocks: *blocks,
                args,
                divisible: *divisible,
            };
            let launch = match library_launch(kernel, &shaped.dims, addresses) {
                Some(library) => {
                    let use_library = self
                        .use_library(k, &tiles, &library, &mut timer)
                        .map_err(|e| kernel_error(&self.program.kernels[k], e))?;
                    if use_library {
                        library
                    } else {
                        tiles
                    }
                }
                None => tiles,
            };
            launches.push(launch);
        }
        Ok(launches)
    }

    /// Whether kernel `k` runs as `library` (cuBLASLt or cuDNN) rather than as `tiles`, by
    /// the policies; `Auto` times both once per shape, from a cold L2 (`timer`, made on first
    /// use).
    fn use_library(
        &mut self,
        k: usize,
        tiles: &Launch,
        library: &Launch,
        timer: &mut Option<ColdTimer>,
    ) -> Result<bool, String> {
        let name = &self.program.kernels[k].name;
        let (shape, by_policy) = match library {
            Launch::Tiles { .. } | Launch::Collective(_) => return Ok(false),
            Launch::Blas { shape, .. } => (
                LibraryShape::Matmul(*shape),
                match self.matmul.of(name) {
                    MatmulPath::Generated => LibraryUse::Never,
                    MatmulPath::Cublas => LibraryUse::Always,
                    MatmulPath::Auto => LibraryUse::Timed,
                },
            ),
            Launch::Dnn { shape, .. } => (
                LibraryShape::Attention(*shape),
                match self.attention.of(name) {
                    AttentionPath::Generated => LibraryUse::Never,
                    AttentionPath::Cudnn => LibraryUse::Always,
                    // cuDNN compiles its kernels at run time: a plan takes 45-70 ms to build,
                    // up to 1.2 s where it compiles a kernel (the first of a dtype, head dim and
                    // mask, and some lengths), so a kernel whose shape changes with its dims
                    // keeps the generated kernel unless cuDNN is asked for.
                    AttentionPath::Auto => match &self.program.kernels[k].library {
                        Some(LibraryCall::Attention(call)) if call.is_static() => LibraryUse::Timed,
                        _ => LibraryUse::Never,
                    },
                },
            ),
            // As attention's: cuDNN builds a plan per batch size.
            Launch::DnnConv { shape, .. } => (
                LibraryShape::Conv(*shape),
                match self.conv.of(name) {
                    ConvPath::Generated => LibraryUse::Never,
                    ConvPath::Cudnn => LibraryUse::Always,
                    ConvPath::Auto => match &self.program.kernels[k].library {
                        Some(LibraryCall::Conv(call)) if call.is_static() => LibraryUse::Timed,
                        _ => LibraryUse::Never,
                    },
                },
            ),
        };
        match by_policy {
            LibraryUse::Never => Ok(false),
            LibraryUse::Always => {
                match shape {
                    LibraryShape::Matmul(s) => self.blas()?.prepare(s)?,
                    LibraryShape::Attention(s) => self.dnn()?.prepare(s)?,
                    LibraryShape::Conv(s) => self.dnn()?.prepare_conv(s)?,
                }
                Ok(true)
            }
            LibraryUse::Timed => {
                if let Some(&choice) = self.chosen.get(&(k, shape)) {
                    return Ok(choice);
                }
                let timer = match timer {
                    Some(timer) => timer,
                    None => timer.insert(ColdTimer::new()?),
                };
                let choice = match (self.time(k, tiles, timer), self.time(k, library, timer)) {
                    (Ok(t), Ok(l)) => l < t,
                    (Ok(_), Err(_)) => false,
                    (Err(e), _) => return Err(e),
                };
                self.chosen.insert((k, shape), choice);
                Ok(choice)
            }
        }
    }

    /// The best of a few timed runs of `launch` as kernel `k`, in milliseconds, each after an L2
    /// flush: a decode step's matrices do not stay in L2 between steps, and timed from L2 its
    /// 4096x11008 matrix-vector product chose the generated kernel (0.054 ms from memory)
    /// over cuBLASLt (0.044). Its output is scratch until the run proper writes it.
    fn time(&mut self, k: usize, launch: &Launch, timer: &ColdTimer) -> Result<f32, String> {
        let gpu = self.gpu.clone();
        let stream = &gpu.streams()[0];
        let mut best = f32::INFINITY;
        for rep in 0..4 {
            timer.start(rep, stream)?;
            self.enqueue_one(k, launch, stream, 0)?;
            let ms = timer.stop(stream)?;
            if rep > 0 {
                best = best.min(ms);
            }
        }
        Ok(best)
    }

    /// Enqueues kernel `k`'s `launch` on `stream`, as the `lane`th of the kernels that may run
    /// at the same time (a library call takes that lane's workspace); an error names the kernel.
    pub(super) fn enqueue_one(
        &mut self,
        k: usize,
        launch: &Launch,
        stream: &Stream,
        lane: usize,
    ) -> Result<(), String> {
        self.enqueue_launch(k, launch, stream, lane)
            .map_err(|e| format!("kernel {}: {e}", self.program.kernels[k].name))
    }

    /// [`Self::enqueue_one`] with the error as the launch gives it.
    fn enqueue_launch(
        &mut self,
        k: usize,
        launch: &Launch,
        stream: &Stream,
        lane: usize,
    ) -> Result<(), String> {
        match launch {
            Launch::Tiles { blocks: 0, .. } => Ok(()),
            Launch::Tiles {
                blocks,
                args,
                divisible,
            } => self.entry(k, *divisible).launch(*blocks, args, stream.0),
            Launch::Blas { shape, buffers } => self
                .blas()
                .and_then(|blas| blas.matmul(*shape, *buffers, stream, lane)),
            Launch::Dnn { shape, buffers } => self
                .dnn()
                .and_then(|dnn| dnn.attention(*shape, *buffers, stream, lane)),
            Launch::DnnConv { shape, buffers } => self
                .dnn()
                .and_then(|dnn| dnn.conv(*shape, *buffers, stream, lane)),
            Launch::Collective(_) => {
                Err("a collective runs only on a mesh of GPUs (CudaBackend::compile_mesh)".into())
            }
        }
    }

    /// cuBLASLt, loaded on first use.
    fn blas(&mut self) -> Result<&mut Blas, String> {
        loaded(&mut self.blas, Blas::new)
    }

    /// cuDNN, loaded on first use.
    fn dnn(&mut self) -> Result<&mut Dnn, String> {
        loaded(&mut self.dnn, Dnn::new)
    }

    /// Enqueues `launches`, spread over the streams by wave (see the module doc); everything
    /// joins back into stream 0.
    fn enqueue_launches(&mut self, launches: &[Launch]) -> Result<(), String> {
        let gpu = self.gpu.clone();
        let streams = gpu.streams();
        let waves = self.program.schedule.waves.clone();
        let main = &streams[0];
        self.start.record(main)?;
        let mut forked = vec![false; streams.len()];
        forked[0] = true;
        let mut previous: Vec<usize> = Vec::new();
        for wave in &waves {
            for (i, &k) in wave.iter().enumerate() {
                let s = i % streams.len();
                let stream = &streams[s];
                if !forked[s] {
                    stream.wait(&self.start)?;
                    forked[s] = true;
                }
                for &p in &previous {
                    stream.wait(&self.done[p])?;
                }
                self.enqueue_spanned(k, &launches[k], stream, s)?;
                self.done[k].record(stream)?;
            }
            previous = wave.clone();
        }
        for &p in &previous {
            main.wait(&self.done[p])?;
        }
        Ok(())
    }

    /// [`Self::enqueue_one`] inside a span of the traced run, if one is being traced.
    pub(super) fn enqueue_spanned(
        &mut self,
        k: usize,
        launch: &Launch,
        stream: &Stream,
        lane: usize,
    ) -> Result<(), String> {
        let start = self.span_start(stream)?;
        self.enqueue_one(k, launch, stream, lane)?;
        let how = SpanKind::Kernel {
            index: k,
            how: launch.how(),
        };
        self.span_end(start, (&self.program.kernels[k].name, how, 0), lane, stream)
    }

    /// Step 5 for a program with a write position the run computes (see the module doc): the
    /// kernels one after another on stream 0, the stream waited for before each kernel with
    /// such a launch check, the position read and checked as the reference checks it; on a
    /// failed check the states are copied back from their copies of the run's start.
    fn enqueue_checked(&mut self, placed: &Placed) -> Result<(), BackendError> {
        let launches = self.launches(&placed.addresses)?;
        let gpu = self.gpu.clone();
        let main = &gpu.streams()[0];
        self.copy_states(main, true)
            .map_err(|e| self.device_error(e))?;
        let dims = self.shaped()?.dims.clone();
        for k in self.program.schedule.waves.concat() {
            for check in self.program.certificates[k].checks.clone() {
                if !self.computed_in_run(&check) {
                    continue;
                }
                let first = |b: usize| {
                    let bytes = self.shaped.as_ref()?.bytes[b];
                    let dtype = self.program.buffers[b].ty.dtype;
                    (bytes > 0).then(|| self.read_first(dtype, placed.addresses[b]))?
                };
                if let Err(reason) = run::check_launch(&self.program, &check, first, &dims) {
                    self.copy_states(main, false)
                        .and_then(|()| main.synchronize())
                        .map_err(|e| self.device_error(e))?;
                    return Err(kernel_error(&self.program.kernels[k], reason));
                }
            }
            self.enqueue_spanned(k, &launches[k], main, 0)
                .map_err(|e| self.device_error(e))?;
        }
        Ok(())
    }

    /// Enqueues copies of every state into its copy (`save`), or back (`!save`), on `stream`.
    fn copy_states(&mut self, stream: &Stream, save: bool) -> Result<(), String> {
        for (name, (_, memory)) in &self.states {
            let copy = match self.state_copies.get(name) {
                Some(copy) if copy.bytes == memory.bytes => copy,
                _ => {
                    let fresh = DeviceMemory::alloc(memory.bytes)?;
                    self.state_copies.insert(name.clone(), fresh);
                    &self.state_copies[name]
                }
            };
            let (dst, src) = if save {
                (copy.ptr, memory.ptr)
            } else {
                (memory.ptr, copy.ptr)
            };
            driver::copy_async(dst, src, memory.bytes, stream)?;
        }
        Ok(())
    }

    /// The CUDA graph of `launches`: one node per kernel, each after every node of the previous
    /// wave.
    fn build_graph(&mut self, launches: &[Launch]) -> Result<Graph, String> {
        let gpu = self.gpu.clone();
        let lanes = self.program.schedule.waves.iter().map(Vec::len).max();
        // Allocated now: the capture of a library call may not allocate.
        if let (Some(blas), Some(lanes)) = (self.blas.as_mut(), lanes) {
            blas.reserve_lanes(lanes.min(driver::MAX_STREAMS))?;
        }
        if let (Some(dnn), Some(lanes)) = (self.dnn.as_mut(), lanes) {
            dnn.reserve_lanes(lanes.min(driver::MAX_STREAMS))?;
        }
        let stream = &gpu.streams()[0];
        let mut builder = GraphBuilder::new()?;
        let mut previous: Vec<usize> = Vec::new();
        let waves = self.program.schedule.waves.clone();
        for wave in &waves {
            let mut this = Vec::with_capacity(wave.len());
            for (lane, &k) in wave.iter().enumerate() {
                // Graph branches of one wave run at once, like the streams of a plain run.
                let lane = lane % driver::MAX_STREAMS;
                let node = match &launches[k] {
                    Launch::Tiles { blocks: 0, .. } => Node::Empty,
                    Launch::Tiles {
                        blocks,
                        args,
                        divisible,
                    } => Node::Kernel {
                        kernel: self.entry(k, *divisible),
                        blocks: *blocks,
                        args,
                    },
                    library => Node::Captured {
                        stream,
                        // Named by `add`'s error below.
                        record: Box::new(|| self.enqueue_launch(k, library, stream, lane)),
                    },
                };
                let added = builder
                    .add(node, &previous)
                    .map_err(|e| format!("kernel {}: {e}", self.program.kernels[k].name))?;
                this.push(added);
            }
            previous = this;
        }
        builder.instantiate()
    }

    /// Allocates what a stream capture of this executable's launches on stream 0 needs and may
    /// not allocate itself: the libraries' workspaces of lane 0 (for a mesh's capture).
    pub(super) fn reserve_capture(&mut self) -> Result<(), String> {
        if let Some(blas) = self.blas.as_mut() {
            blas.reserve_lanes(1)?;
        }
        if let Some(dnn) = self.dnn.as_mut() {
            dnn.reserve_lanes(1)?;
        }
        Ok(())
    }

    /// Fills the arena and every output buffer with all-ones bytes.
    pub(super) fn fill_scratch(&self, placed: &Placed, stream: &Stream) -> Result<(), String> {
        if let Some(arena) = &self.arena {
            driver::fill_async(arena.ptr, 0xff, arena.bytes, stream)?;
        }
        let bytes = &self.shaped.as_ref().map_or(&[][..], |s| &s.bytes[..]);
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            if buffer.storage == Storage::Output {
                driver::fill_async(placed.addresses[b], 0xff, bytes[b], stream)?;
            }
        }
        Ok(())
    }

    /// Step 5, the launches: enqueues them (replaying the graph of these addresses in graph
    /// mode, captured on first use).
    pub(super) fn enqueue(&mut self, placed: &Placed) -> Result<(), BackendError> {
        let gpu = self.gpu.clone();
        let main = &gpu.streams()[0];
        if self.poison {
            self.fill_scratch(placed, main)
                .map_err(|e| self.device_error(e))?;
        }
        if self.checks_wait() {
            return self.enqueue_checked(placed);
        }
        if self.mode != ExecMode::Graph {
            let launches = self.launches(&placed.addresses)?;
            return self
                .enqueue_launches(&launches)
                .map_err(|e| self.device_error(e));
        }
        let cached = self
            .graphs
            .iter()
            .position(|(addresses, _)| *addresses == placed.addresses);
        let graph = match cached {
            Some(i) => self.graphs.remove(i).1,
            None => {
                let launches = self.launches(&placed.addresses)?;
                self.build_graph(&launches)
                    .map_err(|e| self.device_error(e))?
            }
        };
        let launched = graph.launch(main).map_err(|e| self.device_error(e));
        if self.graphs.len() == GRAPHS {
            self.graphs.remove(0);
        }
        self.graphs.push((placed.addresses.clone(), graph));
        launched
    }

    /// Step 6 for host outputs: enqueues each output's copy into page-locked memory lent to
    /// the tensor returned; the tensors may be read once the copies have run.
    pub(super) fn download_outputs(
        &self,
        placed: &Placed,
    ) -> Result<Vec<(String, HostTensor<'static>)>, BackendError> {
        let shaped = self.shaped()?;
        let stream = &self.gpu.streams()[0];
        // Every tensor first: once a copy is queued, no error may drop its destination.
        let mut outputs = Vec::with_capacity(self.program.signature.outputs.len());
        for (name, b) in &self.program.signature.outputs {
            let dtype = self.program.buffers[*b].ty.dtype;
            let t = pinned_tensor(&self.gpu, dtype, &shaped.shapes[*b], Fill::Stale)
                .map_err(|e| self.device_error(e))?;
            outputs.push((name.clone(), t));
        }
        for ((name, t), (_, b)) in outputs.iter_mut().zip(&self.program.signature.outputs) {
            let span = (name.as_str(), SpanKind::Download, shaped.bytes[*b] as u64);
            let queued = self.span_start(stream).and_then(|start| {
                let bytes = t.bytes_mut().map_err(|e| e.to_string())?;
                driver::download_async(bytes, placed.addresses[*b], stream)?;
                self.span_end(start, span, 0, stream)
            });
            if let Err(e) = queued {
                let _ = self.wait();
                return Err(self.device_error(e));
            }
        }
        Ok(outputs)
    }

    /// Step 6 for device outputs: the lent memory of each output written by a kernel, or a
    /// copy (an output that is a state changes with the next run).
    pub(super) fn device_outputs(
        &self,
        placed: &Placed,
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError> {
        let shaped = self.shaped()?;
        let stream = &self.gpu.streams()[0];
        let mut outputs = BTreeMap::new();
        for (name, b) in &self.program.signature.outputs {
            let memory = match &placed.lent[*b] {
                Some(m) => m.clone(),
                None => {
                    let copy = TensorMemory::take(&self.gpu, shaped.bytes[*b])
                        .map_err(|e| self.device_error(e))?;
                    driver::copy_async(copy.ptr(), placed.addresses[*b], shaped.bytes[*b], stream)
                        .map_err(|e| self.device_error(e))?;
                    Rc::new(copy)
                }
            };
            let dtype = self.program.buffers[*b].ty.dtype;
            let tensor = DeviceTensor::new(dtype, shaped.shapes[*b].clone(), memory);
            outputs.insert(name.clone(), tensor);
        }
        Ok(outputs)
    }

    /// A run in the current mode (sync or graph) with its outputs copied to the host, once the
    /// GPU has finished it.
    pub(super) fn run_to_host(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<HostTensors, BackendError> {
        let ran = self
            .prepare(inputs, Outputs::Host, Source::InPlace)
            .and_then(|placed| {
                self.enqueue(&placed)?;
                self.download_outputs(&placed)
            });
        // Also on an error: copies queued from the caller's memory must have run before it
        // gets its memory back.
        let waited = self.wait().map_err(|e| self.device_error(e));
        let outputs = ran?;
        waited?;
        Ok(outputs.into_iter().collect())
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

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::{Dim, ExactF64};
    use tir_lower::tile::DimPolynomial;

    /// `[b, h, s, d]` over a `[b, s, h·d]` buffer: strides `[s·h·d, d, h·d, 1]`.
    fn split_heads(param: usize) -> AttentionOperand {
        let stride = |factor: u64, dims: Vec<Dim>| DimPolynomial {
            terms: vec![(factor, dims)],
        };
        let s = || Dim::Symbolic("s".into());
        AttentionOperand {
            param,
            strides: [
                stride(256, vec![s()]),
                stride(64, vec![]),
                stride(256, vec![]),
                stride(1, vec![]),
            ],
        }
    }

    #[test]
    fn an_attention_shape_evaluates_symbolic_strides_and_gives_unit_dims_row_major_ones() {
        let call = LibraryAttention {
            q: split_heads(0),
            k: split_heads(1),
            v: split_heads(2),
            o: split_heads(3),
            dtype: DType::F16,
            dims: [
                Dim::Symbolic("b".into()),
                4.into(),
                Dim::Symbolic("s".into()),
                Dim::Symbolic("s".into()),
            ],
            d: 64,
            d_v: 64,
            scale: ExactF64(0.125),
            causal: true,
        };
        let dims = |b: u64, s: u64| BTreeMap::from([("b".to_string(), b), ("s".to_string(), s)]);
        let shape = attention_shape(&call, &dims(2, 77)).unwrap();
        assert_eq!(shape.dims, [2, 4, 77, 77]);
        assert_eq!(shape.strides, [[77 * 256, 64, 256, 1]; 4]);
        assert_eq!(f32::from_bits(shape.scale), 0.125);
        // One token: the sequence's stride is the head dim's extent, the batch's the rest.
        let shape = attention_shape(&call, &dims(1, 1)).unwrap();
        assert_eq!(shape.strides[0], [256, 64, 64, 1]);
        assert!(
            attention_shape(&call, &BTreeMap::new()).is_none(),
            "unbound dims"
        );
        assert!(
            attention_shape(&call, &dims(0, 77)).is_none(),
            "an empty batch"
        );
    }
}
