//! The CUDA driver, loaded at run time through `cudarc`: a device's primary context,
//! device memory, loaded cubins, kernel launches, streams, events and graphs. Every call returns
//! a one-line error naming what failed; nothing here panics when the driver or a GPU is missing.

use cudarc::driver::{result, sys};
use std::ffi::c_void;

/// A failed driver call, as one line.
pub type DriverResult<T> = Result<T, String>;

pub(super) fn call<T>(what: &str, r: Result<T, result::DriverError>) -> DriverResult<T> {
    r.map_err(|e| {
        let name = e
            .error_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{:?}", e.0));
        format!("{what} failed: {name}")
    })
}

/// A device's primary context, retained while this lives (by the [`super::gpu::Gpu`] and by every block of
/// page-locked memory, which host tensors may hold after the GPU is dropped).
pub struct PrimaryContext {
    device: sys::CUdevice,
    pub(super) context: sys::CUcontext,
}

// SAFETY: a primary context is a process-wide handle; retain and release are thread-safe, and
// it is only made current through the driver.
unsafe impl Send for PrimaryContext {}
unsafe impl Sync for PrimaryContext {}

impl PrimaryContext {
    pub(super) fn retain(device: sys::CUdevice) -> DriverResult<PrimaryContext> {
        // SAFETY: `device` came from cuDeviceGet.
        let context = call("cuDevicePrimaryCtxRetain", unsafe {
            result::primary_ctx::retain(device)
        })?;
        Ok(PrimaryContext { device, context })
    }

    /// Runs `f` with this context current on the calling thread, then restores the previous.
    pub fn with_current<T>(&self, f: impl FnOnce() -> T) -> DriverResult<T> {
        // SAFETY: the context is live; the push is popped below.
        call("cuCtxPushCurrent", unsafe {
            sys::cuCtxPushCurrent_v2(self.context).result()
        })?;
        let out = f();
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops what was pushed above.
        let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
        Ok(out)
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain.
        let _ = unsafe { result::primary_ctx::release(self.device) };
    }
}

/// The most streams one wave's kernels are spread over.
pub const MAX_STREAMS: usize = 4;

/// Device memory, freed on drop.
pub struct DeviceMemory {
    pub ptr: u64,
    pub bytes: usize,
}

impl DeviceMemory {
    /// `bytes` of device memory (at least 256, so that even empty buffers have an address).
    pub fn alloc(bytes: usize) -> DriverResult<DeviceMemory> {
        let bytes = bytes.max(256);
        // SAFETY: plain allocation in the current context.
        let ptr = call("cuMemAlloc", unsafe { result::malloc_sync(bytes) })?;
        let memory = DeviceMemory { ptr, bytes };
        // Zeroed once, so that no kernel ever reads bytes nothing wrote: a load of a row whose
        // end is not a multiple of the vector width reads the bytes past it (and discards
        // them), which compute-sanitizer's initcheck would report in the allocation's padding.
        // On the legacy stream, which our non-blocking streams do not wait for: it must have
        // run before this returns.
        // SAFETY: the `bytes` bytes at `ptr` were just allocated; the null stream is the
        // context's legacy stream.
        call("cuMemsetD8", unsafe {
            result::memset_d8_sync(ptr, 0, bytes)
        })?;
        call("cuStreamSynchronize", unsafe {
            result::stream::synchronize(std::ptr::null_mut())
        })?;
        Ok(memory)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemAlloc and is freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// The scratch memory of a library (cuBLASLt, cuDNN), a block per lane: the library calls of
/// one schedule wave run at once, each on a lane (stream or graph branch) of its own, and a
/// block serves one call at a time.
pub struct LaneWorkspaces {
    bytes: usize,
    /// By lane, made on first use.
    blocks: Vec<Option<DeviceMemory>>,
}

impl LaneWorkspaces {
    /// Blocks of `bytes` each.
    pub fn new(bytes: usize) -> LaneWorkspaces {
        LaneWorkspaces {
            bytes,
            blocks: Vec::new(),
        }
    }

    /// Makes the blocks of lanes `0..lanes` now (a graph capture may not allocate).
    pub fn reserve(&mut self, lanes: usize) -> DriverResult<()> {
        for lane in 0..lanes {
            self.get(lane)?;
        }
        Ok(())
    }

    /// The address of `lane`'s block.
    pub fn get(&mut self, lane: usize) -> DriverResult<u64> {
        if self.blocks.len() <= lane {
            self.blocks.resize_with(lane + 1, || None);
        }
        if self.blocks[lane].is_none() {
            self.blocks[lane] = Some(DeviceMemory::alloc(self.bytes)?);
        }
        Ok(self.blocks[lane].as_ref().map_or(0, |m| m.ptr))
    }
}

/// Page-locked host memory (`cuMemHostAlloc`): the GPU copies from and to it at full speed, and
/// copies can be asynchronous. Freed on drop.
pub struct PinnedMemory {
    ptr: std::ptr::NonNull<u8>,
    pub bytes: usize,
    context: std::sync::Arc<PrimaryContext>,
}

// SAFETY: plain host memory owned by this value; the driver handle it came from is thread-safe.
unsafe impl Send for PinnedMemory {}
unsafe impl Sync for PinnedMemory {}

impl PinnedMemory {
    /// `bytes` of page-locked memory (at least one page) in `context`.
    pub fn alloc(
        context: &std::sync::Arc<PrimaryContext>,
        bytes: usize,
    ) -> DriverResult<PinnedMemory> {
        let bytes = bytes.max(4096);
        // SAFETY: plain allocation in the pushed context; the memory is uninitialized bytes,
        // which `u8` may hold; it is zeroed below before anything reads it.
        let ptr = context
            .with_current(|| call("cuMemHostAlloc", unsafe { result::malloc_host(bytes, 0) }))??;
        let ptr = std::ptr::NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| "cuMemHostAlloc returned null".to_string())?;
        // SAFETY: `bytes` bytes were just allocated at `ptr`.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        Ok(PinnedMemory {
            ptr,
            bytes,
            context: context.clone(),
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `bytes` initialized bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.bytes) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `bytes` initialized bytes owned exclusively by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.bytes) }
    }
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        let ptr = self.ptr.as_ptr().cast();
        // SAFETY: `ptr` came from cuMemHostAlloc and is freed once, in its context.
        let _ = self
            .context
            .with_current(|| unsafe { result::free_host(ptr) });
    }
}

/// Whether `bytes` lie in page-locked host memory the driver knows (so a copy can read them
/// asynchronously at full speed, without staging).
pub fn is_pinned(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return false;
    }
    let mut kind = 0u32;
    let mut attribute = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    let mut data = [(&mut kind as *mut u32).cast::<std::ffi::c_void>()];
    // The plural query: for memory the driver does not know it succeeds and leaves the type 0,
    // where the singular one fails (an API error compute-sanitizer reports on every upload).
    // SAFETY: one attribute, whose value (a u32) is written to `kind`.
    let r = unsafe {
        sys::cuPointerGetAttributes(
            1,
            &mut attribute,
            data.as_mut_ptr(),
            bytes.as_ptr() as sys::CUdeviceptr,
        )
    };
    r == sys::CUresult::CUDA_SUCCESS && kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
}

/// A loaded cubin, through the library API (context-independent `CUkernel`s, which is also
/// what CUDA-graph capture of tile kernels needs); unloaded when its last [`Kernel`] goes.
pub struct Library(sys::CUlibrary);

impl Library {
    pub fn load(cubin: &[u8]) -> DriverResult<std::rc::Rc<Library>> {
        // The driver reads the image from a pointer; keep a copy that outlives the call.
        let image = cubin.to_vec();
        let mut library = std::mem::MaybeUninit::uninit();
        // SAFETY: `image` is a complete cubin held for the duration of the call; no options.
        call("cuLibraryLoadData", unsafe {
            sys::cuLibraryLoadData(
                library.as_mut_ptr(),
                image.as_ptr() as *const c_void,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
            .result()
        })?;
        // SAFETY: initialized by the successful call above.
        Ok(std::rc::Rc::new(Library(unsafe { library.assume_init() })))
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the library was loaded once and is unloaded once.
        let _ = unsafe { sys::cuLibraryUnload(self.0) };
    }
}

/// One entry of a loaded cubin.
pub struct Kernel {
    _library: std::rc::Rc<Library>,
    kernel: sys::CUkernel,
}

impl Kernel {
    /// The entry named `entry` of `library`.
    pub fn get(library: &std::rc::Rc<Library>, entry: &str) -> DriverResult<Kernel> {
        let name = std::ffi::CString::new(entry).map_err(|e| e.to_string())?;
        let mut kernel = std::mem::MaybeUninit::uninit();
        // SAFETY: `library` is loaded; `name` is NUL-terminated.
        call(&format!("cuLibraryGetKernel({entry})"), unsafe {
            sys::cuLibraryGetKernel(kernel.as_mut_ptr(), library.0, name.as_ptr()).result()
        })?;
        Ok(Kernel {
            _library: library.clone(),
            // SAFETY: initialized by the successful call.
            kernel: unsafe { kernel.assume_init() },
        })
    }

    /// Launches `blocks` tile blocks (block dim 1x1x1: the driver expands each tile block) on
    /// `stream` with `args`, each a `u64` pointer or an `i64` scalar.
    pub fn launch(&self, blocks: u32, args: &[u64], stream: sys::CUstream) -> DriverResult<()> {
        let mut values: Vec<u64> = args.to_vec();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: a CUkernel may stand for a CUfunction in launches (of the current context);
        // `params` points at one 8-byte value per entry argument, as the ABI says.
        call("cuLaunchKernel", unsafe {
            result::launch_kernel(
                self.kernel as sys::CUfunction,
                (blocks, 1, 1),
                (1, 1, 1),
                0,
                stream,
                &mut params,
            )
        })
    }
}

/// A stream of this context.
pub struct Stream(pub sys::CUstream);

impl Stream {
    pub fn new() -> DriverResult<Stream> {
        call(
            "cuStreamCreate",
            result::stream::create(result::stream::StreamKind::NonBlocking),
        )
        .map(Stream)
    }

    pub fn synchronize(&self) -> DriverResult<()> {
        // SAFETY: the stream is live.
        call("cuStreamSynchronize", unsafe {
            result::stream::synchronize(self.0)
        })
    }

    pub fn wait(&self, event: &Event) -> DriverResult<()> {
        // SAFETY: both are live.
        call("cuStreamWaitEvent", unsafe {
            result::stream::wait_event(
                self.0,
                event.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: destroyed once.
        let _ = unsafe { result::stream::destroy(self.0) };
    }
}

/// An event (no timing).
pub struct Event(pub sys::CUevent);

// SAFETY: CUDA events may be queried and synchronized from any thread of the process.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    pub fn new() -> DriverResult<Event> {
        call(
            "cuEventCreate",
            result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING),
        )
        .map(Event)
    }

    /// An event that records time, for [`Event::elapsed_ms`].
    pub fn timed() -> DriverResult<Event> {
        call(
            "cuEventCreate",
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
        )
        .map(Event)
    }

    /// Milliseconds from `self` to `end` (both timed and complete).
    pub fn elapsed_ms(&self, end: &Event) -> DriverResult<f32> {
        // SAFETY: both events are live.
        call("cuEventElapsedTime", unsafe {
            result::event::elapsed(self.0, end.0)
        })
    }

    pub fn record(&self, stream: &Stream) -> DriverResult<()> {
        // SAFETY: both are live.
        call("cuEventRecord", unsafe {
            result::event::record(self.0, stream.0)
        })
    }

    /// Whether the work before the record has finished.
    pub fn done(&self) -> DriverResult<bool> {
        // SAFETY: the event is live.
        match unsafe { result::event::query(self.0) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => call("cuEventQuery", Err(e)),
        }
    }

    pub fn synchronize(&self) -> DriverResult<()> {
        // SAFETY: the event is live.
        call("cuEventSynchronize", unsafe {
            result::event::synchronize(self.0)
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroyed once.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// A graph of kernel launches, built node by node: tile kernels as kernel nodes (the driver
/// expands their tile blocks on replay), other work (cuBLASLt) as captured child graphs.
/// A graph refers to the kernels' libraries: it must be destroyed before they are unloaded.
pub struct GraphBuilder {
    graph: sys::CUgraph,
    context: sys::CUcontext,
    nodes: Vec<sys::CUgraphNode>,
}

/// One node's work.
pub enum Node<'a> {
    /// Nothing (a kernel with an empty grid): keeps the dependency chain.
    Empty,
    Kernel {
        kernel: &'a Kernel,
        blocks: u32,
        args: &'a [u64],
    },
    /// What `record` enqueues on `stream`, captured.
    Captured {
        stream: &'a Stream,
        record: Box<dyn FnOnce() -> DriverResult<()> + 'a>,
    },
}

impl GraphBuilder {
    pub fn new() -> DriverResult<GraphBuilder> {
        let context = call("cuCtxGetCurrent", result::ctx::get_current())?
            .ok_or_else(|| "no current CUDA context".to_string())?;
        let mut graph = std::mem::MaybeUninit::uninit();
        // SAFETY: writes one graph handle.
        call("cuGraphCreate", unsafe {
            sys::cuGraphCreate(graph.as_mut_ptr(), 0).result()
        })?;
        Ok(GraphBuilder {
            // SAFETY: initialized by the successful call.
            graph: unsafe { graph.assume_init() },
            context,
            nodes: Vec::new(),
        })
    }

    /// Adds `node` after the nodes numbered `deps` (in the order they were added); returns its
    /// number.
    pub fn add(&mut self, node: Node<'_>, deps: &[usize]) -> DriverResult<usize> {
        let deps: Vec<sys::CUgraphNode> = deps.iter().map(|&d| self.nodes[d]).collect();
        let mut handle = std::mem::MaybeUninit::uninit();
        match node {
            // SAFETY (all arms): `deps` are nodes of this graph; outputs are one node handle.
            Node::Empty => call("cuGraphAddEmptyNode", unsafe {
                sys::cuGraphAddEmptyNode(handle.as_mut_ptr(), self.graph, deps.as_ptr(), deps.len())
                    .result()
            })?,
            Node::Kernel {
                kernel,
                blocks,
                args,
            } => {
                let mut values: Vec<u64> = args.to_vec();
                let mut params: Vec<*mut c_void> = values
                    .iter_mut()
                    .map(|v| v as *mut u64 as *mut c_void)
                    .collect();
                let node = sys::CUDA_KERNEL_NODE_PARAMS {
                    func: std::ptr::null_mut(),
                    gridDimX: blocks,
                    gridDimY: 1,
                    gridDimZ: 1,
                    blockDimX: 1,
                    blockDimY: 1,
                    blockDimZ: 1,
                    sharedMemBytes: 0,
                    kernelParams: params.as_mut_ptr(),
                    extra: std::ptr::null_mut(),
                    kern: kernel.kernel,
                    ctx: self.context,
                };
                // The driver copies the argument values when the node is added.
                call("cuGraphAddKernelNode", unsafe {
                    sys::cuGraphAddKernelNode_v2(
                        handle.as_mut_ptr(),
                        self.graph,
                        deps.as_ptr(),
                        deps.len(),
                        &node,
                    )
                    .result()
                })?
            }
            Node::Captured { stream, record } => {
                let child = capture(stream, record)?;
                let added = call("cuGraphAddChildGraphNode", unsafe {
                    sys::cuGraphAddChildGraphNode(
                        handle.as_mut_ptr(),
                        self.graph,
                        deps.as_ptr(),
                        deps.len(),
                        child,
                    )
                    .result()
                });
                // The node holds a copy of the child graph.
                let _ = unsafe { result::graph::destroy(child) };
                added?
            }
        }
        // SAFETY: initialized by the successful call of the arm.
        self.nodes.push(unsafe { handle.assume_init() });
        Ok(self.nodes.len() - 1)
    }

    /// The graph, ready to launch.
    pub fn instantiate(self) -> DriverResult<Graph> {
        // SAFETY: the graph is complete.
        let exec = call("cuGraphInstantiate", unsafe {
            result::graph::instantiate(self.graph, sys::CUgraphInstantiate_flags(0))
        })?;
        let graph = Graph {
            graph: self.graph,
            exec,
        };
        std::mem::forget(self);
        Ok(graph)
    }
}

impl Drop for GraphBuilder {
    fn drop(&mut self) {
        // SAFETY: a graph never instantiated, destroyed once.
        let _ = unsafe { result::graph::destroy(self.graph) };
    }
}

/// The graph of what `record` enqueues on `stream` (not instantiated; the caller destroys it).
fn capture(
    stream: &Stream,
    record: impl FnOnce() -> DriverResult<()>,
) -> DriverResult<sys::CUgraph> {
    // SAFETY: the stream is live; the capture ends below on every path.
    call("cuStreamBeginCapture", unsafe {
        result::stream::begin_capture(
            stream.0,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    })?;
    let recorded = record();
    // SAFETY: ends the capture begun above.
    let graph = call("cuStreamEndCapture", unsafe {
        result::stream::end_capture(stream.0)
    })?;
    if let Err(e) = recorded {
        // SAFETY: destroyed once.
        let _ = unsafe { result::graph::destroy(graph) };
        return Err(e);
    }
    Ok(graph)
}

/// Starts capturing what is enqueued on `stream` into a graph ([`end_capture`] ends it). Used
/// where several GPUs' streams are captured at once from one thread (a mesh's run, whose NCCL
/// group calls enqueue on every device's stream inside one call).
pub fn begin_capture(stream: &Stream) -> DriverResult<()> {
    // SAFETY: the stream is live; the caller ends the capture.
    call("cuStreamBeginCapture", unsafe {
        result::stream::begin_capture(
            stream.0,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
    })
}

/// Ends the capture [`begin_capture`] started on `stream`: its graph, not instantiated yet
/// (instantiating may allocate, which a thread may not do while any stream it captures is
/// capturing: end every capture first).
pub fn end_capture(stream: &Stream) -> DriverResult<CapturedGraph> {
    // SAFETY: ends a capture begun on this stream.
    let graph = call("cuStreamEndCapture", unsafe {
        result::stream::end_capture(stream.0)
    })?;
    Ok(CapturedGraph(graph))
}

/// A graph [`end_capture`] gave, destroyed on drop unless instantiated.
pub struct CapturedGraph(sys::CUgraph);

impl CapturedGraph {
    /// The graph, ready to launch.
    pub fn instantiate(self) -> DriverResult<Graph> {
        // SAFETY: the graph is complete.
        let exec = call("cuGraphInstantiate", unsafe {
            result::graph::instantiate(self.0, sys::CUgraphInstantiate_flags(0))
        })?;
        let graph = Graph {
            graph: self.0,
            exec,
        };
        std::mem::forget(self);
        Ok(graph)
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a graph never instantiated, destroyed once.
            let _ = unsafe { result::graph::destroy(self.0) };
        }
    }
}

/// An instantiated CUDA graph.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Graph {
    pub fn launch(&self, stream: &Stream) -> DriverResult<()> {
        // SAFETY: both are live.
        call("cuGraphLaunch", unsafe {
            result::graph::launch(self.exec, stream.0)
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: each destroyed once.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

/// Copies host bytes to device memory asynchronously on `stream`. The bytes must stay alive
/// and unchanged until the stream reaches this copy.
pub fn upload_async(dst: u64, data: &[u8], stream: &Stream) -> DriverResult<()> {
    // SAFETY: the caller keeps `data` alive until the stream passes this point.
    call("cuMemcpyHtoDAsync", unsafe {
        result::memcpy_htod_async(dst, data, stream.0)
    })
}

/// Fills `bytes` of device memory at `dst` with `value` on `stream`.
pub fn fill_async(dst: u64, value: u8, bytes: usize, stream: &Stream) -> DriverResult<()> {
    // SAFETY: the range is device memory of at least `bytes`.
    call("cuMemsetD8Async", unsafe {
        result::memset_d8_async(dst, value, bytes, stream.0)
    })
}

/// Copies device memory to host bytes asynchronously on `stream`; `out` must stay alive until
/// the stream reaches this copy.
pub fn download_async(out: &mut [u8], src: u64, stream: &Stream) -> DriverResult<()> {
    // SAFETY: the caller keeps `out` alive until the stream passes this point.
    call("cuMemcpyDtoHAsync", unsafe {
        result::memcpy_dtoh_async(out, src, stream.0)
    })
}

/// Copies `bytes` of device memory from `src` to `dst` on `stream`.
pub fn copy_async(dst: u64, src: u64, bytes: usize, stream: &Stream) -> DriverResult<()> {
    // SAFETY: both ranges are device memory of at least `bytes`, ordered by the stream.
    call("cuMemcpyDtoDAsync", unsafe {
        result::memcpy_dtod_async(dst, src, bytes, stream.0)
    })
}

/// Rows of a 2D region: `rows` rows of `width` bytes each, `pitch` bytes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub address: u64,
    pub pitch: usize,
}

/// Copies `rows` rows of `width` bytes from `src` to `dst` (device memory both) on `stream`.
pub fn copy_rows_async(
    dst: Rows,
    src: Rows,
    width: usize,
    rows: usize,
    stream: &Stream,
) -> DriverResult<()> {
    let copy = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src.address,
        srcArray: std::ptr::null_mut(),
        srcPitch: src.pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst.address,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst.pitch,
        WidthInBytes: width,
        Height: rows,
    };
    // SAFETY: both regions are device memory holding `rows` rows of `width` bytes at their
    // pitches, ordered by the stream; the descriptor is read during the call.
    call("cuMemcpy2DAsync", unsafe {
        sys::cuMemcpy2DAsync_v2(&copy, stream.0).result()
    })
}

/// How many GPUs the driver sees; 0 where there is no driver.
pub fn device_count() -> u32 {
    // SAFETY: only probes whether the library can be loaded.
    if !unsafe { sys::is_culib_present() } || result::init().is_err() {
        return 0;
    }
    result::device::get_count().map_or(0, |n| n.max(0) as u32)
}

/// Calls `notify` on a driver thread once the work enqueued on `stream` so far has finished
/// (or the stream has failed), with the stream's status: no thread of ours waits for it.
/// `notify` must not call the CUDA API.
pub fn on_done(stream: &Stream, notify: Box<dyn FnOnce(bool) + Send>) -> DriverResult<()> {
    unsafe extern "C" fn trampoline(
        _stream: sys::CUstream,
        status: sys::CUresult,
        data: *mut c_void,
    ) {
        // SAFETY: `data` is the box leaked below, taken back exactly once.
        let notify = unsafe { Box::from_raw(data.cast::<Box<dyn FnOnce(bool) + Send>>()) };
        notify(status == sys::CUresult::CUDA_SUCCESS);
    }
    let data = Box::into_raw(Box::new(notify));
    // SAFETY: the driver calls `trampoline` once with `data`, on success and on error alike.
    let added =
        unsafe { sys::cuStreamAddCallback(stream.0, Some(trampoline), data.cast(), 0).result() };
    if let Err(e) = added {
        // SAFETY: the driver did not take `data`.
        drop(unsafe { Box::from_raw(data) });
        return call("cuStreamAddCallback", Err(e));
    }
    Ok(())
}
