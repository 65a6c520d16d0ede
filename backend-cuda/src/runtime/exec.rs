//! [`CudaExecutable`]: a program's kernels loaded on the GPU, its memory, and the three ways to
//! run it.
//!
//! Each run binds the sources and checks what every backend checks (`tir_lower::run`), places
//! every buffer (the arena in one allocation laid out by the memory plan; inputs, parameters and
//! outputs in staging buffers reused while they are large enough; states at stable addresses
//! for the executable's life; constants uploaded once), evaluates the launch checks, and then:
//! - [`ExecMode::Sync`] enqueues the copies and launches and waits for them;
//! - [`ExecMode::Graph`] captures the launches into a CUDA graph once per placement (dims and
//!   buffer addresses) and replays it, with inputs copied into the stable staging buffers;
//! - [`CudaExecutable::run_async`] enqueues and returns a future that does not block the thread.
//!
//! Kernels of one schedule wave may run on separate streams; every kernel waits (by events) for
//! the kernels of the previous wave, which is the order the memory plan's reuse assumes.

use super::blas::{Blas, MatmulShape};
use super::driver::{self, DeviceMemory, Event, Gpu, Graph, GraphBuilder, Kernel, Node, Stream};
use crate::codegen::{KernelAbi, PARAM_ALIGN};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use tir_graph::eval::HostTensor;
use tir_lower::run::{self, type_name};
use tir_lower::tile::{LibraryCall, TileKernel};
use tir_lower::{BackendError, Executable, Program, RunOutputs, Storage};

/// How [`Executable::run`] executes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// Enqueue copies and launches, then wait.
    #[default]
    Sync,
    /// Replay a CUDA graph of the launches (captured again when dims or addresses change).
    Graph,
    /// [`CudaExecutable::run_async`], waited for.
    Async,
}

/// How a kernel that is a plain matmul ([`LibraryCall::MatMul`]) runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulPath {
    /// The generated Tile IR kernel.
    Generated,
    /// cuBLASLt.
    Cublas,
    /// Whichever measures faster for the shape, timed on the GPU at the first run that binds
    /// it (the generated kernel where cuBLASLt cannot run it).
    #[default]
    Auto,
}

/// The matmul path of every kernel, and of named kernels (`k3_matmul`, as `tirc explain
/// --tile` names them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatmulPolicy {
    pub default: MatmulPath,
    pub per_kernel: BTreeMap<String, MatmulPath>,
}

impl MatmulPolicy {
    /// `auto`, `generated` or `cublaslt`, then optionally `KERNEL=PATH` items, comma-separated
    /// (`generated,k3_matmul=cublaslt`).
    pub fn parse(text: &str) -> Result<MatmulPolicy, String> {
        let path = |word: &str| match word.trim() {
            "auto" => Ok(MatmulPath::Auto),
            "generated" => Ok(MatmulPath::Generated),
            "cublaslt" => Ok(MatmulPath::Cublas),
            other => Err(format!(
                "unknown matmul path `{other}` (expected auto, generated or cublaslt)"
            )),
        };
        let mut policy = MatmulPolicy::default();
        for item in text.split(',').filter(|i| !i.trim().is_empty()) {
            match item.split_once('=') {
                Some((kernel, p)) => {
                    policy
                        .per_kernel
                        .insert(kernel.trim().to_string(), path(p)?);
                }
                None => policy.default = path(item)?,
            }
        }
        Ok(policy)
    }

    /// `$TIR_MATMUL` parsed, or the default (auto) when it is unset.
    pub fn from_env() -> Result<MatmulPolicy, String> {
        match std::env::var("TIR_MATMUL") {
            Ok(text) => MatmulPolicy::parse(&text).map_err(|e| format!("TIR_MATMUL: {e}")),
            Err(_) => Ok(MatmulPolicy::default()),
        }
    }

    fn of(&self, kernel: &str) -> MatmulPath {
        self.per_kernel.get(kernel).copied().unwrap_or(self.default)
    }
}

/// One kernel's work in a run.
#[derive(Clone, Debug, PartialEq)]
enum Launch {
    /// The generated kernel: tile blocks (0: nothing to do) and arguments.
    Tiles { blocks: u32, args: Vec<u64> },
    /// cuBLASLt on the addresses of `a`, `b` and `c`.
    Blas {
        shape: MatmulShape,
        buffers: [u64; 3],
    },
}

/// Times work on a stream from a cold L2: a scratch buffer five times the size of an H100's L2
/// cache, overwritten before each timing, so the work reads its operands from memory as it
/// does in a program whose working set exceeds L2; and two events around the work.
struct ColdTimer {
    scratch: DeviceMemory,
    start: Event,
    end: Event,
}

impl ColdTimer {
    const SCRATCH_BYTES: usize = 256 << 20;

    fn new() -> Result<ColdTimer, String> {
        Ok(ColdTimer {
            scratch: DeviceMemory::alloc(Self::SCRATCH_BYTES)?,
            start: Event::timed()?,
            end: Event::timed()?,
        })
    }

    /// Evicts L2 (with a byte that changes with `rep`) and starts timing, on `stream`.
    fn start(&self, rep: usize, stream: &Stream) -> Result<(), String> {
        driver::fill_async(self.scratch.ptr, rep as u8, Self::SCRATCH_BYTES, stream)?;
        self.start.record(stream)
    }

    /// Milliseconds since [`ColdTimer::start`], once the work enqueued since has finished.
    fn stop(&self, stream: &Stream) -> Result<f32, String> {
        self.end.record(stream)?;
        self.end.synchronize()?;
        self.start.elapsed_ms(&self.end)
    }
}

/// One kernel's times from [`CudaExecutable::profile_kernels`].
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTimes {
    pub name: String,
    /// `tiles xN` (the generated kernel on N tile blocks) or `cublaslt`.
    pub how: String,
    pub times_ms: Vec<f64>,
}

/// The most streams one wave's kernels are spread over.
const MAX_STREAMS: usize = 4;

/// A program compiled for and loaded on one GPU (see the module doc).
pub struct CudaExecutable {
    program: Program,
    kernels: Vec<Kernel>,
    abis: Vec<KernelAbi>,
    /// Shared so that enqueueing (which needs `&mut self` for cuBLASLt) can hold them.
    streams: Rc<Vec<Stream>>,
    /// One per kernel, recorded after its launch.
    done: Vec<Event>,
    /// Recorded on stream 0 before the launches: the other streams start after it (after the
    /// uploads, and inside a graph capture).
    start: Event,
    constants: Vec<Option<DeviceMemory>>,
    /// Staging memory of input, parameter and output buffers, by buffer.
    staged: Vec<Option<DeviceMemory>>,
    arena: Option<DeviceMemory>,
    /// Each state's dims and memory, once a run has bound it.
    states: BTreeMap<String, (Vec<u64>, DeviceMemory)>,
    mode: ExecMode,
    graph: Option<(Placement, Graph)>,
    matmul: MatmulPolicy,
    /// Fill the arena and outputs with all-ones bytes (NaN in floats) before each run, so that
    /// an element no kernel writes cannot pass a comparison.
    poison: bool,
    blas: Option<Blas>,
    /// Auto's choices: whether cuBLASLt was faster for a kernel at a shape.
    chosen: HashMap<(usize, MatmulShape), bool>,
    /// Last: fields drop in order, and everything above needs the GPU's context.
    gpu: Rc<Gpu>,
}

/// Where every buffer lives for one run, and the launches it needs.
#[derive(Clone, Debug, PartialEq)]
struct Placement {
    dims: BTreeMap<String, u64>,
    shapes: Vec<Vec<u64>>,
    addresses: Vec<u64>,
    /// Per kernel, what to run.
    launches: Vec<Launch>,
}

fn kernel_error(kernel: &TileKernel, reason: String) -> BackendError {
    BackendError::Kernel {
        kernel: kernel.name.clone(),
        reason,
    }
}

fn device_error(reason: String) -> BackendError {
    BackendError::Kernel {
        kernel: "(device)".into(),
        reason,
    }
}

/// The shape and buffers of kernel's library matmul under `dims`, with buffer `addresses`.
fn library_shape(
    kernel: &TileKernel,
    dims: &BTreeMap<String, u64>,
    addresses: &[u64],
) -> Option<(MatmulShape, [u64; 3])> {
    let Some(LibraryCall::MatMul {
        a,
        b,
        c,
        dtype,
        batch,
        m,
        k,
        n,
        b_batched,
    }) = &kernel.library
    else {
        return None;
    };
    let value = |d: &tir_graph::Dim| run::dim_value(d, dims).ok();
    let mut count = 1u64;
    for d in batch {
        count = count.checked_mul(value(d)?)?;
    }
    let address = |p: &usize| kernel.params.get(*p).map(|tp| addresses[tp.buffer]);
    Some((
        MatmulShape {
            dtype: *dtype,
            batch: count,
            m: value(m)?,
            k: value(k)?,
            n: value(n)?,
            b_batched: *b_batched,
        },
        [address(a)?, address(b)?, address(c)?],
    ))
}

/// Makes sure `slot` holds at least `bytes`, reallocating (and so moving) when it does not.
fn ensure(slot: &mut Option<DeviceMemory>, bytes: usize) -> Result<u64, String> {
    if slot.as_ref().is_none_or(|m| m.bytes < bytes) {
        *slot = None;
        *slot = Some(DeviceMemory::alloc(bytes)?);
    }
    Ok(slot.as_ref().map_or(0, |m| m.ptr))
}

impl CudaExecutable {
    /// Loads `cubins` (one per kernel of `program`, for `gpu`'s architecture) and uploads the
    /// constants.
    pub(crate) fn load(
        gpu: Rc<Gpu>,
        program: &Program,
        abis: Vec<KernelAbi>,
        cubins: &[Vec<u8>],
    ) -> Result<CudaExecutable, String> {
        gpu.bind()?;
        let kernels = abis
            .iter()
            .zip(cubins)
            .map(|(abi, cubin)| Kernel::load(cubin, &abi.entry))
            .collect::<Result<Vec<_>, _>>()?;
        let widest = program
            .schedule
            .waves
            .iter()
            .map(Vec::len)
            .max()
            .unwrap_or(1);
        let streams = Rc::new(
            (0..widest.clamp(1, MAX_STREAMS))
                .map(|_| Stream::new())
                .collect::<Result<Vec<_>, _>>()?,
        );
        let done = (0..kernels.len())
            .map(|_| Event::new())
            .collect::<Result<Vec<_>, _>>()?;
        let start = Event::new()?;
        let mut constants = Vec::with_capacity(program.buffers.len());
        for b in &program.buffers {
            constants.push(match &b.storage {
                Storage::Constant(data) => {
                    let values = HostTensor {
                        dtype: b.ty.dtype,
                        dims: vec![data.len() as u64],
                        data: (0..data.len()).filter_map(|i| data.get_f64(i)).collect(),
                    };
                    let bytes = values.to_le_bytes();
                    let mem = DeviceMemory::alloc(bytes.len())?;
                    mem.upload(0, &bytes)?;
                    Some(mem)
                }
                _ => None,
            });
        }
        Ok(CudaExecutable {
            gpu,
            program: program.clone(),
            kernels,
            abis,
            streams,
            done,
            start,
            constants,
            staged: (0..program.buffers.len()).map(|_| None).collect(),
            arena: None,
            states: BTreeMap::new(),
            mode: ExecMode::Sync,
            graph: None,
            matmul: MatmulPolicy::default(),
            poison: false,
            blas: None,
            chosen: HashMap::new(),
        })
    }

    /// The program this executable runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    pub fn set_mode(&mut self, mode: ExecMode) {
        self.mode = mode;
    }

    pub fn mode(&self) -> ExecMode {
        self.mode
    }

    pub fn set_matmul_policy(&mut self, policy: MatmulPolicy) {
        self.matmul = policy;
    }

    /// Whether each run first fills the arena and the outputs with all-ones bytes (NaN in
    /// floats), for tests: an element no kernel writes then never passes a comparison.
    pub fn set_poison(&mut self, poison: bool) {
        self.poison = poison;
    }

    /// The state tensors bound so far, as each run's dims; used to bind state-only dims.
    fn held_state_dims(&self) -> BTreeMap<String, Vec<u64>> {
        self.states
            .iter()
            .map(|(n, (d, _))| (n.clone(), d.clone()))
            .collect()
    }

    /// Element 0 of buffer `b` for a launch check, from the sources or the device.
    fn first_element(&self, b: usize, sources: &BTreeMap<String, HostTensor>) -> Option<f64> {
        let buffer = &self.program.buffers[b];
        match &buffer.storage {
            Storage::Input(n) | Storage::Parameter(n) => sources.get(n)?.data.first().copied(),
            Storage::Constant(data) => data.get_f64(0),
            Storage::State(n) => {
                let (_, mem) = self.states.get(n)?;
                let mut bytes = vec![0u8; buffer.ty.dtype.size_bytes()];
                mem.download(0, &mut bytes).ok()?;
                HostTensor::from_le_bytes(buffer.ty.dtype, vec![1], &bytes)
                    .data
                    .first()
                    .copied()
            }
            Storage::Output | Storage::Arena => None,
        }
    }

    /// Binds and checks `sources`, places every buffer and computes every launch.
    fn place(&mut self, sources: &BTreeMap<String, HostTensor>) -> Result<Placement, BackendError> {
        self.gpu.bind().map_err(device_error)?;
        let dims = run::bind_dims(&self.program, sources, &self.held_state_dims())?;
        let shapes = run::buffer_shapes(&self.program, &dims)?;
        let layout = run::checked_layout(&self.program, &dims, "cuda")?;
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            for check in &self.program.certificates[k].checks {
                run::check_launch(
                    &self.program,
                    check,
                    |b| self.first_element(b, sources),
                    &dims,
                )
                .map_err(|e| kernel_error(kernel, e))?;
            }
        }
        let arena = ensure(&mut self.arena, layout.size as usize).map_err(device_error)?;
        let mut addresses = Vec::with_capacity(shapes.len());
        for (b, shape) in shapes.iter().enumerate() {
            let buffer = &self.program.buffers[b];
            let bytes = shape.iter().product::<u64>() as usize * buffer.ty.dtype.size_bytes();
            let address = match buffer.storage.clone() {
                Storage::Arena => arena + layout.offsets.get(&b).copied().unwrap_or(0),
                Storage::Constant(_) => self.constants[b].as_ref().map_or(0, |m| m.ptr),
                Storage::State(name) => self.state_memory(&name, shape, bytes)?,
                Storage::Input(_) | Storage::Parameter(_) | Storage::Output => {
                    ensure(&mut self.staged[b], bytes).map_err(device_error)?
                }
            };
            addresses.push(address);
        }
        let mut launches = Vec::with_capacity(self.kernels.len());
        let mut timer = None;
        for k in 0..self.kernels.len() {
            let (kernel, abi) = (&self.program.kernels[k], &self.abis[k]);
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
            let mut args: Vec<u64> = kernel.params.iter().map(|p| addresses[p.buffer]).collect();
            if let Some(p) = args.iter().position(|a| a % PARAM_ALIGN != 0) {
                return Err(kernel_error(
                    kernel,
                    format!("parameter {p} is not {PARAM_ALIGN}-byte aligned"),
                ));
            }
            args.extend(abi.dims.iter().map(|d| dims.get(d).copied().unwrap_or(0)));
            if abi.grid_extents {
                args.extend(extents.iter().map(|&e| e as u64));
            }
            // A persistent entry loops over the grid's tiles, so fills the GPU once at most.
            let blocks = match abi.blocks_per_sm {
                Some(per_sm) => blocks.min(i64::from(self.gpu.sms) * i64::from(per_sm)),
                None => blocks,
            };
            let tiles = Launch::Tiles {
                blocks: blocks as u32,
                args,
            };
            let launch = match library_shape(kernel, &dims, &addresses) {
                Some((shape, buffers)) => {
                    let blas = Launch::Blas { shape, buffers };
                    let use_blas = self
                        .use_blas(k, &tiles, &blas, &mut timer)
                        .map_err(|e| kernel_error(&self.program.kernels[k], e))?;
                    if use_blas {
                        blas
                    } else {
                        tiles
                    }
                }
                None => tiles,
            };
            launches.push(launch);
        }
        Ok(Placement {
            dims,
            shapes,
            addresses,
            launches,
        })
    }

    /// Whether kernel `k` runs on cuBLASLt (`blas`) rather than as `tiles`, by the policy;
    /// `Auto` times both once per shape, from a cold L2 (`timer`, made on first use).
    fn use_blas(
        &mut self,
        k: usize,
        tiles: &Launch,
        blas: &Launch,
        timer: &mut Option<ColdTimer>,
    ) -> Result<bool, String> {
        let Launch::Blas { shape, .. } = blas else {
            return Ok(false);
        };
        match self.matmul.of(&self.program.kernels[k].name) {
            MatmulPath::Generated => Ok(false),
            MatmulPath::Cublas => {
                self.blas()?.prepare(*shape)?;
                Ok(true)
            }
            MatmulPath::Auto => {
                if let Some(&choice) = self.chosen.get(&(k, *shape)) {
                    return Ok(choice);
                }
                let timer = match timer {
                    Some(timer) => timer,
                    None => timer.insert(ColdTimer::new()?),
                };
                let choice = match (self.time(k, tiles, timer), self.time(k, blas, timer)) {
                    (Ok(t), Ok(b)) => b < t,
                    (Ok(_), Err(_)) => false,
                    (Err(e), _) => return Err(e),
                };
                self.chosen.insert((k, *shape), choice);
                Ok(choice)
            }
        }
    }

    /// The best of a few timed runs of `launch` as kernel `k`, in milliseconds, each after an L2
    /// flush: a decode step's matrices do not stay in L2 between steps, and timed from L2 its
    /// 4096x11008 matrix-vector product chose the generated kernel (0.054 ms from memory)
    /// over cuBLASLt (0.044). Its output is scratch until the run proper writes it.
    fn time(&mut self, k: usize, launch: &Launch, timer: &ColdTimer) -> Result<f32, String> {
        let streams = self.streams.clone();
        let mut best = f32::INFINITY;
        for rep in 0..4 {
            timer.start(rep, &streams[0])?;
            self.enqueue_one(k, launch, &streams[0])?;
            let ms = timer.stop(&streams[0])?;
            if rep > 0 {
                best = best.min(ms);
            }
        }
        Ok(best)
    }

    /// Enqueues kernel `k`'s `launch` on `stream`.
    fn enqueue_one(&mut self, k: usize, launch: &Launch, stream: &Stream) -> Result<(), String> {
        let done = match launch {
            Launch::Tiles { blocks: 0, .. } => Ok(()),
            Launch::Tiles { blocks, args } => self.kernels[k].launch(*blocks, args, stream.0),
            Launch::Blas { shape, buffers } => self
                .blas()
                .and_then(|blas| blas.matmul(*shape, *buffers, stream)),
        };
        done.map_err(|e| format!("kernel {}: {e}", self.program.kernels[k].name))
    }

    /// cuBLASLt, loaded on first use.
    fn blas(&mut self) -> Result<&mut Blas, String> {
        if self.blas.is_none() {
            self.blas = Some(Blas::new()?);
        }
        self.blas
            .as_mut()
            .ok_or_else(|| "cuBLASLt is not loaded".to_string())
    }

    /// The memory of state `name` with `dims` (zeros when first bound).
    fn state_memory(
        &mut self,
        name: &str,
        dims: &[u64],
        bytes: usize,
    ) -> Result<u64, BackendError> {
        if let Some((held, mem)) = self.states.get(name) {
            if held.as_slice() != dims {
                let dtype = self
                    .program
                    .state_buffer(name)
                    .map(|b| self.program.buffers[b].ty.dtype)
                    .unwrap_or(tir_graph::DType::F32);
                return Err(BackendError::BadInput(format!(
                    "state {name:?}: this run binds {}, but earlier runs bound {}",
                    type_name(dtype, dims),
                    type_name(dtype, held)
                )));
            }
            return Ok(mem.ptr);
        }
        let mem = DeviceMemory::alloc(bytes).map_err(device_error)?;
        mem.zero().map_err(device_error)?;
        let ptr = mem.ptr;
        self.states.insert(name.to_string(), (dims.to_vec(), mem));
        Ok(ptr)
    }

    /// The host bytes of every input and parameter buffer, with its device address.
    fn source_bytes(
        &self,
        sources: &BTreeMap<String, HostTensor>,
        placement: &Placement,
    ) -> Vec<(u64, Vec<u8>)> {
        self.program
            .buffers
            .iter()
            .enumerate()
            .filter_map(|(b, buffer)| match &buffer.storage {
                Storage::Input(n) | Storage::Parameter(n) => sources
                    .get(n)
                    .map(|t| (placement.addresses[b], t.to_le_bytes())),
                _ => None,
            })
            .collect()
    }

    /// Enqueues every launch of `placement`, spread over the streams by wave (see the module
    /// doc); everything joins back into stream 0.
    fn enqueue_launches(&mut self, placement: &Placement) -> Result<(), String> {
        let streams = self.streams.clone();
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
                self.enqueue_one(k, &placement.launches[k], stream)?;
                self.done[k].record(stream)?;
            }
            previous = wave.clone();
        }
        for &p in &previous {
            main.wait(&self.done[p])?;
        }
        Ok(())
    }

    /// The CUDA graph of `placement`'s launches: one node per kernel, each after every node of
    /// the previous wave.
    fn build_graph(&mut self, placement: &Placement) -> Result<Graph, String> {
        let streams = self.streams.clone();
        let mut builder = GraphBuilder::new()?;
        let mut previous: Vec<usize> = Vec::new();
        for wave in &self.program.schedule.waves {
            let mut this = Vec::with_capacity(wave.len());
            for &k in wave {
                let node = match &placement.launches[k] {
                    Launch::Tiles { blocks: 0, .. } => Node::Empty,
                    Launch::Tiles { blocks, args } => Node::Kernel {
                        kernel: &self.kernels[k],
                        blocks: *blocks,
                        args,
                    },
                    Launch::Blas { shape, buffers } => {
                        let blas = self
                            .blas
                            .as_mut()
                            .ok_or_else(|| "cuBLASLt is not loaded".to_string())?;
                        let stream = &streams[0];
                        Node::Captured {
                            stream,
                            record: Box::new(move || blas.matmul(*shape, *buffers, stream)),
                        }
                    }
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

    /// Fills the arena and every output buffer with all-ones bytes.
    fn fill_scratch(&self, placement: &Placement, stream: &Stream) -> Result<(), String> {
        if let Some(arena) = &self.arena {
            driver::fill_async(arena.ptr, 0xff, arena.bytes, stream)?;
        }
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            if buffer.storage == Storage::Output {
                let bytes = placement.shapes[b].iter().product::<u64>() as usize
                    * buffer.ty.dtype.size_bytes();
                driver::fill_async(placement.addresses[b], 0xff, bytes, stream)?;
            }
        }
        Ok(())
    }

    /// Enqueues uploads, the launches (replaying the graph in graph mode) and nothing else.
    fn enqueue(
        &mut self,
        placement: &Placement,
        uploads: &[(u64, Vec<u8>)],
    ) -> Result<(), BackendError> {
        let streams = self.streams.clone();
        if self.poison {
            self.fill_scratch(placement, &streams[0])
                .map_err(device_error)?;
        }
        for (address, bytes) in uploads {
            driver::upload_async(*address, bytes, &streams[0]).map_err(device_error)?;
        }
        match self.mode {
            ExecMode::Sync | ExecMode::Async => {
                self.enqueue_launches(placement).map_err(device_error)
            }
            ExecMode::Graph => {
                let fresh = self.graph.as_ref().is_none_or(|(p, _)| p != placement);
                if fresh {
                    self.graph = None;
                    let graph = self.build_graph(placement).map_err(device_error)?;
                    self.graph = Some((placement.clone(), graph));
                }
                match &self.graph {
                    Some((_, graph)) => graph.launch(&streams[0]).map_err(device_error),
                    None => Err(device_error("no graph was captured".into())),
                }
            }
        }
    }

    /// The outputs of a finished run.
    fn outputs(&self, placement: &Placement) -> Result<RunOutputs, BackendError> {
        let mut outputs = BTreeMap::new();
        for (name, b) in &self.program.signature.outputs {
            let dtype = self.program.buffers[*b].ty.dtype;
            let dims = placement.shapes[*b].clone();
            let mut bytes = vec![0u8; dims.iter().product::<u64>() as usize * dtype.size_bytes()];
            driver::download_async(&mut bytes, placement.addresses[*b], &self.streams[0])
                .and_then(|()| self.streams[0].synchronize())
                .map_err(device_error)?;
            outputs.insert(name.clone(), HostTensor::from_le_bytes(dtype, dims, &bytes));
        }
        Ok(RunOutputs { outputs })
    }

    /// Times the kernels alone, for benchmarks: binds and uploads `sources` once, then runs the
    /// program's launches `warmup + reps` times in the current mode (a graph replay in graph
    /// mode), each after overwriting a 256 MiB scratch buffer (so that the L2 cache holds none of
    /// the inputs) and between two events; returns the `reps` times in milliseconds. The outputs
    /// of the last run are then returned as [`Executable::run`] would.
    pub fn time_runs(
        &mut self,
        sources: &BTreeMap<String, HostTensor>,
        warmup: usize,
        reps: usize,
    ) -> Result<(Vec<f64>, RunOutputs), BackendError> {
        let placement = self.place(sources)?;
        let uploads = self.source_bytes(sources, &placement);
        let streams = self.streams.clone();
        let main = &streams[0];
        for (address, bytes) in &uploads {
            driver::upload_async(*address, bytes, main).map_err(device_error)?;
        }
        let timer = ColdTimer::new().map_err(device_error)?;
        let mut times = Vec::with_capacity(reps);
        for rep in 0..warmup + reps {
            timer.start(rep, main).map_err(device_error)?;
            self.enqueue(&placement, &[])?;
            let ms = timer.stop(main).map_err(device_error)?;
            if rep >= warmup {
                times.push(f64::from(ms));
            }
        }
        main.synchronize().map_err(device_error)?;
        Ok((times, self.outputs(&placement)?))
    }

    /// Times each kernel alone, for finding where a program's time goes: binds and uploads
    /// `sources`, runs the program once, then times each kernel `reps` times on one stream from
    /// a cold L2 ([`ColdTimer`]). Returns, in schedule order, every kernel's name, how it ran
    /// (`tiles` with its block count, or `cublaslt`) and its times in milliseconds.
    pub fn profile_kernels(
        &mut self,
        sources: &BTreeMap<String, HostTensor>,
        reps: usize,
    ) -> Result<Vec<KernelTimes>, BackendError> {
        let placement = self.place(sources)?;
        let uploads = self.source_bytes(sources, &placement);
        self.enqueue(&placement, &uploads)?;
        let streams = self.streams.clone();
        let main = &streams[0];
        let timer = ColdTimer::new().map_err(device_error)?;
        let order: Vec<usize> = self.program.schedule.waves.concat();
        let mut profile = Vec::with_capacity(order.len());
        for k in order {
            let launch = placement.launches[k].clone();
            let mut times_ms = Vec::with_capacity(reps);
            for rep in 0..reps {
                timer.start(rep, main).map_err(device_error)?;
                self.enqueue_one(k, &launch, main).map_err(device_error)?;
                times_ms.push(f64::from(timer.stop(main).map_err(device_error)?));
            }
            let how = match &launch {
                Launch::Tiles { blocks, .. } => format!("tiles x{blocks}"),
                Launch::Blas { .. } => "cublaslt".to_string(),
            };
            profile.push(KernelTimes {
                name: self.program.kernels[k].name.clone(),
                how,
                times_ms,
            });
        }
        Ok(profile)
    }

    /// Runs like [`Executable::run`] in the current mode, but returns at once: the future
    /// completes when the GPU has finished, and waiting for it does not block the thread (a
    /// helper thread waits on the GPU and wakes the task).
    pub fn run_async<'a>(
        &'a mut self,
        sources: &BTreeMap<String, HostTensor>,
    ) -> Result<RunFuture<'a>, BackendError> {
        let placement = self.place(sources)?;
        let uploads = self.source_bytes(sources, &placement);
        self.enqueue(&placement, &uploads)?;
        let finished = Event::new().map_err(device_error)?;
        finished.record(&self.streams[0]).map_err(device_error)?;
        Ok(RunFuture {
            exe: self,
            placement,
            _uploads: uploads,
            finished: std::sync::Arc::new(finished),
            waiter: None,
        })
    }
}

/// The result of [`CudaExecutable::run_async`].
pub struct RunFuture<'a> {
    exe: &'a mut CudaExecutable,
    placement: Placement,
    /// Host bytes of the uploads, alive until the GPU has read them.
    _uploads: Vec<(u64, Vec<u8>)>,
    finished: std::sync::Arc<Event>,
    waiter: Option<std::thread::JoinHandle<()>>,
}

impl Future for RunFuture<'_> {
    type Output = Result<RunOutputs, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.finished.done() {
            Ok(true) => {
                let this = &mut *self;
                this.exe.gpu.bind().map_err(device_error)?;
                Poll::Ready(this.exe.outputs(&this.placement))
            }
            Ok(false) => {
                if self.waiter.is_none() {
                    let event = self.finished.clone();
                    let waker = cx.waker().clone();
                    self.waiter = Some(std::thread::spawn(move || {
                        let _ = event.synchronize();
                        waker.wake();
                    }));
                }
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(device_error(e))),
        }
    }
}

impl Drop for CudaExecutable {
    fn drop(&mut self) {
        // The graph's kernel nodes refer to the loaded libraries: destroying it after they are
        // unloaded crashes the driver.
        self.graph = None;
    }
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread, parking while it is pending.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

impl Executable for CudaExecutable {
    fn run(&mut self, sources: &BTreeMap<String, HostTensor>) -> Result<RunOutputs, BackendError> {
        if self.mode == ExecMode::Async {
            return block_on(self.run_async(sources)?);
        }
        let placement = self.place(sources)?;
        let uploads = self.source_bytes(sources, &placement);
        self.enqueue(&placement, &uploads)?;
        self.streams[0].synchronize().map_err(device_error)?;
        self.outputs(&placement)
    }

    /// Every state bound by a run; before the first run, zeros for the states of static shape.
    fn states(&self) -> BTreeMap<String, HostTensor> {
        let mut out = BTreeMap::new();
        if self.gpu.bind().is_err() {
            return out;
        }
        for (name, ty) in &self.program.signature.states {
            match self.states.get(name) {
                Some((dims, mem)) => {
                    let mut bytes =
                        vec![0u8; dims.iter().product::<u64>() as usize * ty.dtype.size_bytes()];
                    if mem.download(0, &mut bytes).is_ok() {
                        let t = HostTensor::from_le_bytes(ty.dtype, dims.clone(), &bytes);
                        out.insert(name.clone(), t);
                    }
                }
                None => {
                    if let Some(dims) = ty.shape.static_dims() {
                        out.insert(name.clone(), HostTensor::zeros(ty.dtype, dims));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_policies_parse_with_per_kernel_overrides() {
        let p = MatmulPolicy::parse("generated,k3_matmul=cublaslt, k5_matmul = auto").unwrap();
        assert_eq!(p.default, MatmulPath::Generated);
        assert_eq!(p.of("k3_matmul"), MatmulPath::Cublas);
        assert_eq!(p.of("k5_matmul"), MatmulPath::Auto);
        assert_eq!(p.of("k0_matmul"), MatmulPath::Generated);
        assert_eq!(MatmulPolicy::parse("").unwrap(), MatmulPolicy::default());
        let e = MatmulPolicy::parse("k1=fast").unwrap_err();
        assert!(e.contains("`fast`"), "{e}");
    }
}
