//! [`CudaMeshExecutable`]: one program on several GPUs of this host, its collectives through
//! NCCL.
//!
//! It holds one [`CudaExecutable`] per GPU (rank `r` on GPU `r`), each loaded from the same
//! cubins, and drives them all from the calling thread (GPU state in this crate is per thread:
//! every GPU of a mesh is opened, and bound before each call, on it). A run:
//! 1. prepares every device (inputs bound and checked, buffers placed, launch checks made,
//!    host inputs uploaded): a refusal here enqueues no kernel anywhere;
//! 2. enqueues each device's kernels on its stream 0 in schedule order, cut into segments at
//!    the collectives: each device's segment, then the collective on every device inside one
//!    NCCL group (staging copies before a scatter and after a gather, for an axis with dims
//!    before it). In graph mode (`ExecMode::Graph`) step 2 is captured instead, into one CUDA
//!    graph per device (every device's stream 0 captured at once, the NCCL group calls inside
//!    the captures), and replayed: one `cuGraphLaunch` per device and run. The graphs are kept
//!    by the addresses and dims of the run they were captured for (a few, like a single GPU's),
//!    so a decode loop captures once;
//! 3. enqueues the outputs' copies and waits for every device by polling, so that a device that
//!    fails cannot leave another waiting in a collective for it: the communicators are aborted,
//!    every device drains, and the error names the device (and the kernel, where a kernel
//!    failed to enqueue). A run that has not finished after [`hang_limit`] (a collective whose
//!    peer never came) is aborted the same way and named as such, rather than waited for ever.
//!
//! Runs are synchronous (`ExecMode::Sync`, and `Async` waits like it; graph mode waits too). A
//! program whose launch checks read positions the run computes (they wait mid-run) is refused.
//! A run that fails after its kernels were enqueued may leave states partly updated, in every
//! mode.

use super::driver::{self, DeviceMemory, Event, Graph, Rows, Stream};
use super::exec::{CollectiveLaunch, CudaExecutable, Launch, Outputs, Placed};
use super::nccl::{Call, Collective, Comms};
use super::policy::ExecMode;
use super::staging::Source;
use super::timing::ColdTimer;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tir_graph::HostTensor;
use tir_lower::program::MeshStep;
use tir_lower::{
    BackendError, Device, DeviceTensor, Executable, HostTensors, MeshExecutable, Signature,
    TensorRef,
};

/// The CUDA graphs a mesh keeps, by the runs they were captured for.
const GRAPHS: usize = 8;

/// What a mesh's captured graphs are valid for: every device's buffer addresses, and the dims
/// (which fix the grids).
type GraphKey = (Vec<Vec<u64>>, BTreeMap<String, u64>);

/// How long a run may take before the mesh gives up on it (see the module doc):
/// `$TIR_MESH_TIMEOUT_S` seconds, 120 by default (a decode step takes milliseconds, an
/// all-reduce of 1 GiB a few).
pub fn hang_limit() -> Duration {
    let seconds = std::env::var("TIR_MESH_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(120.0);
    Duration::from_secs_f64(seconds)
}

/// A program compiled for a mesh of this host's GPUs (see the module doc).
pub struct CudaMeshExecutable {
    /// Graph mode's captured runs, one graph per device, most recently used last. First:
    /// destroyed before the communicators (NCCL frees a captured collective's resources with
    /// its graph) and the executables' libraries.
    graphs: Vec<(GraphKey, Vec<Graph>)>,
    /// Destroyed while the executables (and their GPUs' contexts) are alive.
    comms: Comms,
    /// Per device: the staging buffer of strided gathers and scatters (freed by `drop`, each
    /// in its GPU's context).
    staging: Vec<Option<DeviceMemory>>,
    devices: Vec<CudaExecutable>,
}

impl Drop for CudaMeshExecutable {
    fn drop(&mut self) {
        self.drop_graphs();
        for (exe, slot) in self.devices.iter().zip(&mut self.staging) {
            if exe.gpu().bind().is_ok() {
                *slot = None;
            }
        }
    }
}

impl CudaMeshExecutable {
    /// The mesh of `devices` (rank by rank, on the GPUs `comms` was made for).
    pub(crate) fn new(devices: Vec<CudaExecutable>, comms: Comms) -> CudaMeshExecutable {
        let staging = devices.iter().map(|_| None).collect();
        CudaMeshExecutable {
            graphs: Vec::new(),
            comms,
            staging,
            devices,
        }
    }

    /// Sets how later runs execute on every device (sync, or graph: see the module doc); the
    /// graphs captured so far are dropped.
    pub fn set_mode(&mut self, mode: ExecMode) {
        self.drop_graphs();
        for exe in &mut self.devices {
            exe.set_mode(mode);
        }
    }

    /// How runs execute.
    pub fn mode(&self) -> ExecMode {
        self.devices[0].mode()
    }

    fn device_mut(&mut self, rank: usize) -> Result<&mut CudaExecutable, BackendError> {
        let world = self.devices.len();
        let exe = self.devices.get_mut(rank).ok_or_else(|| {
            BackendError::BadInput(format!("no device {rank} in a mesh of {world}"))
        })?;
        exe.gpu().bind().map_err(|e| exe.device_error(e))?;
        Ok(exe)
    }

    /// Steps 1 and 2 of a run (see the module doc), then `finish` on each device; waits for
    /// every device, also after an error.
    fn run_all<T>(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
        outputs: Outputs,
        finish: impl Fn(&CudaExecutable, &Placed) -> Result<T, BackendError>,
    ) -> Result<Vec<T>, BackendError> {
        if inputs.len() != self.devices.len() {
            return Err(BackendError::BadInput(format!(
                "{} devices' inputs for a mesh of {}",
                inputs.len(),
                self.devices.len()
            )));
        }
        if self.comms.aborted() {
            return Err(BackendError::Unsupported {
                backend: "cuda".into(),
                reason: "the mesh's NCCL communicators were aborted after an error in an \
                         earlier run: compile it again"
                    .into(),
            });
        }
        let ran = self.enqueue_all(inputs, outputs, &finish);
        // Also on an error: copies queued from the caller's memory must have run before it
        // gets its memory back, and no device may be left in a collective.
        let waited = self.wait_all();
        let ran = ran?;
        waited?;
        Ok(ran)
    }

    fn enqueue_all<T>(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
        outputs: Outputs,
        finish: &impl Fn(&CudaExecutable, &Placed) -> Result<T, BackendError>,
    ) -> Result<Vec<T>, BackendError> {
        let placed = self.prepare_all(inputs, outputs)?;
        self.enqueue_run(&placed)?;
        self.devices
            .iter()
            .zip(&placed)
            .map(|(exe, placed)| {
                exe.gpu().bind().map_err(|e| exe.device_error(e))?;
                finish(exe, placed)
            })
            .collect()
    }

    /// Step 1 on every device.
    fn prepare_all(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
        outputs: Outputs,
    ) -> Result<Vec<Placed>, BackendError> {
        let mut placed = Vec::with_capacity(self.devices.len());
        for (exe, inputs) in self.devices.iter_mut().zip(inputs) {
            placed.push(exe.prepare(inputs, outputs, Source::InPlace)?);
        }
        Ok(placed)
    }

    /// Step 2 on every device, for buffers at `placed`: the launches, or the replay of their
    /// graphs in graph mode (captured on first use).
    fn enqueue_run(&mut self, placed: &[Placed]) -> Result<(), BackendError> {
        for (exe, placed) in self.devices.iter_mut().zip(placed) {
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            if exe.poisons() {
                let gpu = exe.gpu().clone();
                exe.fill_scratch(placed, &gpu.streams()[0])
                    .map_err(|e| exe.device_error(e))?;
            }
        }
        if self.devices[0].mode() != ExecMode::Graph {
            let launches = self.launches_all(placed)?;
            return self.enqueue_steps(&launches);
        }
        let dims = self.devices[0]
            .shaped
            .as_ref()
            .map(|s| s.dims.clone())
            .unwrap_or_default();
        let key: GraphKey = (placed.iter().map(|p| p.addresses.clone()).collect(), dims);
        let graphs = match self.graphs.iter().position(|(k, _)| *k == key) {
            Some(i) => self.graphs.remove(i).1,
            None => {
                let launches = self.launches_all(placed)?;
                self.capture(&launches)?
            }
        };
        let launched = self.launch_graphs(&graphs);
        if self.graphs.len() == GRAPHS {
            self.drop_oldest_graphs();
        }
        self.graphs.push((key, graphs));
        launched
    }

    /// Every device's launches with its buffers at `placed`.
    fn launches_all(&mut self, placed: &[Placed]) -> Result<Vec<Vec<Launch>>, BackendError> {
        let mut launches = Vec::with_capacity(self.devices.len());
        for (exe, placed) in self.devices.iter_mut().zip(placed) {
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            launches.push(exe.launches(&placed.addresses)?);
        }
        Ok(launches)
    }

    /// Enqueues `launches` on every device's stream 0 (step 2 of the module doc).
    fn enqueue_steps(&mut self, launches: &[Vec<Launch>]) -> Result<(), BackendError> {
        for step in self.devices[0].program.mesh_steps() {
            match step {
                MeshStep::Kernels(segment) => self.enqueue_segment(&segment, launches)?,
                MeshStep::Collective(k) => self.enqueue_collective(k, launches)?,
            }
        }
        Ok(())
    }

    /// One graph per device of [`Self::enqueue_steps`]: every device's stream 0 captured at
    /// once (the NCCL group calls enqueue on all of them). Whatever a capture may not do (an
    /// allocation) is done first: the staging buffers, the libraries' workspaces.
    fn capture(&mut self, launches: &[Vec<Launch>]) -> Result<Vec<Graph>, BackendError> {
        self.reserve_staging(launches)?;
        for exe in &mut self.devices {
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            exe.reserve_capture().map_err(|e| exe.device_error(e))?;
        }
        let mut begun = 0;
        let mut failed = None;
        for exe in &self.devices {
            let started = exe
                .gpu()
                .bind()
                .and_then(|()| driver::begin_capture(&exe.gpu().streams()[0]));
            if let Err(e) = started {
                failed = Some(exe.device_error(format!("capturing the run: {e}")));
                break;
            }
            begun += 1;
        }
        if failed.is_none() {
            failed = self.enqueue_steps(launches).err();
        }
        // Every capture begun is ended, also after an error: a stream left capturing refuses
        // all later work. Instantiated only once every capture has ended (see `end_capture`).
        let mut captured = Vec::with_capacity(begun);
        for exe in &self.devices[..begun] {
            let ended = exe
                .gpu()
                .bind()
                .and_then(|()| driver::end_capture(&exe.gpu().streams()[0]));
            match ended {
                Ok(graph) => captured.push(graph),
                Err(e) => {
                    failed.get_or_insert(exe.device_error(format!("capturing the run: {e}")));
                }
            }
        }
        if let Some(e) = failed {
            for (exe, graph) in self.devices.iter().zip(captured) {
                let _ = exe.gpu().bind();
                drop(graph);
            }
            return Err(e);
        }
        let mut graphs = Vec::with_capacity(begun);
        for (exe, graph) in self.devices.iter().zip(captured) {
            let made = exe.gpu().bind().and_then(|()| graph.instantiate());
            match made {
                Ok(graph) => graphs.push(graph),
                Err(e) => {
                    self.drop_captured(graphs);
                    return Err(exe.device_error(format!("instantiating the run's graph: {e}")));
                }
            }
        }
        Ok(graphs)
    }

    /// Allocates, before a capture, every staging buffer `launches`' collectives need; the
    /// graphs captured on an old buffer go when one moves.
    fn reserve_staging(&mut self, launches: &[Vec<Launch>]) -> Result<(), BackendError> {
        let mut moved = false;
        for (rank, launches) in launches.iter().enumerate() {
            let exe = &self.devices[rank];
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            for launch in launches {
                let Launch::Collective(c) = launch else {
                    continue;
                };
                let old = self.staging[rank].as_ref().map(|m| m.ptr);
                if c.strided.is_some() && old.is_some() {
                    let need = c.strided.map_or(0, |(rows, part)| c.world * rows * part);
                    moved |= self.staging[rank].as_ref().is_some_and(|m| m.bytes < need);
                }
                staging_for(&mut self.staging[rank], c).map_err(|e| exe.device_error(e))?;
            }
        }
        if moved {
            self.drop_graphs();
        }
        Ok(())
    }

    /// Launches one graph per device, rank by rank; a launch that fails aborts the
    /// communicators, so that no device launched before it waits for its peer.
    fn launch_graphs(&mut self, graphs: &[Graph]) -> Result<(), BackendError> {
        for (exe, graph) in self.devices.iter().zip(graphs) {
            let launched = exe
                .gpu()
                .bind()
                .and_then(|()| graph.launch(&exe.gpu().streams()[0]));
            if let Err(e) = launched {
                self.comms.abort();
                return Err(exe.device_error(format!("replaying the run's CUDA graph: {e}")));
            }
        }
        Ok(())
    }

    /// Destroys graphs captured for the devices, rank by rank, each in its GPU's context.
    fn drop_captured(&self, graphs: Vec<Graph>) {
        for (exe, graph) in self.devices.iter().zip(graphs) {
            let _ = exe.gpu().bind();
            drop(graph);
        }
    }

    fn drop_oldest_graphs(&mut self) {
        if !self.graphs.is_empty() {
            let (_, graphs) = self.graphs.remove(0);
            self.drop_captured(graphs);
        }
    }

    /// Destroys every kept graph (no run is in flight: runs are waited for).
    fn drop_graphs(&mut self) {
        while !self.graphs.is_empty() {
            self.drop_oldest_graphs();
        }
    }

    /// Times whole runs, for benchmarks: places and uploads each device's `inputs` once, then
    /// enqueues the run `warmup + reps` times in the current mode (a replay of the graphs in
    /// graph mode), each from a cold L2 on every device; a run's time is the longest of the
    /// devices' times between events around it, in milliseconds. Returns the `reps` times and
    /// every device's outputs of the last run.
    pub fn time_runs(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
        warmup: usize,
        reps: usize,
    ) -> Result<(Vec<f64>, Vec<HostTensors>), BackendError> {
        let mut timers = Vec::with_capacity(self.devices.len());
        for exe in &self.devices {
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            timers.push(ColdTimer::new().map_err(|e| exe.device_error(e))?);
        }
        let placed = self.prepare_all(inputs, Outputs::Host)?;
        let mut times = Vec::with_capacity(reps);
        for rep in 0..warmup + reps {
            for (exe, timer) in self.devices.iter().zip(&timers) {
                exe.gpu()
                    .bind()
                    .and_then(|()| timer.start(rep, &exe.gpu().streams()[0]))
                    .map_err(|e| exe.device_error(e))?;
            }
            let enqueued = self.enqueue_run(&placed).and_then(|()| {
                for (exe, timer) in self.devices.iter().zip(&timers) {
                    exe.gpu()
                        .bind()
                        .and_then(|()| timer.mark_end(&exe.gpu().streams()[0]))
                        .map_err(|e| exe.device_error(e))?;
                }
                Ok(())
            });
            let waited = self.wait_all();
            enqueued?;
            waited?;
            let mut longest = 0f32;
            for (exe, timer) in self.devices.iter().zip(&timers) {
                let ms = exe
                    .gpu()
                    .bind()
                    .and_then(|()| timer.elapsed())
                    .map_err(|e| exe.device_error(e))?;
                longest = longest.max(ms);
            }
            if rep >= warmup {
                times.push(f64::from(longest));
            }
        }
        let mut outputs = Vec::with_capacity(self.devices.len());
        for (exe, placed) in self.devices.iter().zip(&placed) {
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            outputs.push(exe.download_outputs(placed)?.into_iter().collect());
        }
        self.wait_all()?;
        Ok((times, outputs))
    }

    /// Kernels `segment` (none a collective) on every device's stream 0.
    fn enqueue_segment(
        &mut self,
        segment: &[usize],
        launches: &[Vec<Launch>],
    ) -> Result<(), BackendError> {
        for (exe, launches) in self.devices.iter_mut().zip(launches) {
            let gpu = exe.gpu().clone();
            gpu.bind().map_err(|e| exe.device_error(e))?;
            for &k in segment {
                exe.enqueue_spanned(k, &launches[k], &gpu.streams()[0], 0)
                    .map_err(|e| exe.device_error(e))?;
            }
        }
        Ok(())
    }

    /// Collective kernel `k` on every device: the staging copies before it, the NCCL calls in
    /// one group, the staging copies after it.
    fn enqueue_collective(
        &mut self,
        k: usize,
        launches: &[Vec<Launch>],
    ) -> Result<(), BackendError> {
        let kernel = self.devices[0].program.kernels[k].name.clone();
        let failed = |rank: usize, reason: String| BackendError::Kernel {
            kernel: kernel.clone(),
            reason: format!("on cuda:{rank}: {reason}"),
        };
        let mut calls = Vec::with_capacity(self.devices.len());
        let mut streams = Vec::with_capacity(self.devices.len());
        for (rank, launches) in launches.iter().enumerate() {
            let Launch::Collective(c) = &launches[k] else {
                return Err(failed(rank, "not a collective on every device".into()));
            };
            let exe = &self.devices[rank];
            exe.gpu().bind().map_err(|e| failed(rank, e))?;
            let stream = &exe.gpu().streams()[0];
            let staging = staging_for(&mut self.staging[rank], c).map_err(|e| failed(rank, e))?;
            calls.push(before(c, staging, stream).map_err(|e| failed(rank, e))?);
            streams.push(stream.0 as cudarc::nccl::sys::cudaStream_t);
        }
        if let Err(e) = self.comms.group(&calls, &streams) {
            // A group that failed may have enqueued some devices' calls: abort, so that none
            // waits for a peer.
            self.comms.abort();
            return Err(BackendError::Kernel {
                kernel: kernel.clone(),
                reason: e,
            });
        }
        for (rank, launches) in launches.iter().enumerate() {
            let Launch::Collective(c) = &launches[k] else {
                continue;
            };
            let exe = &self.devices[rank];
            exe.gpu().bind().map_err(|e| failed(rank, e))?;
            let staging = self.staging[rank].as_ref().map_or(0, |m| m.ptr);
            after(c, staging, &exe.gpu().streams()[0]).map_err(|e| failed(rank, e))?;
        }
        Ok(())
    }

    /// Waits for every device (see the module doc): polls each device's stream 0; on the first
    /// failure aborts the communicators, then waits for the rest.
    fn wait_all(&mut self) -> Result<(), BackendError> {
        let mut pending = Vec::with_capacity(self.devices.len());
        let mut first: Option<BackendError> = None;
        for exe in &self.devices {
            let recorded = exe.gpu().bind().and_then(|()| {
                let event = Event::new()?;
                event.record(&exe.gpu().streams()[0])?;
                Ok(event)
            });
            match recorded {
                Ok(event) => pending.push((exe, event)),
                Err(e) => {
                    first.get_or_insert(exe.device_error(e));
                }
            }
        }
        if first.is_some() {
            self.comms.abort();
        }
        let mut sleep = Duration::from_micros(5);
        let (started, limit) = (Instant::now(), hang_limit());
        let mut hung = false;
        while !pending.is_empty() {
            if !hung && started.elapsed() > limit {
                // A collective whose peer never came: aborted, NCCL's kernels return, and the
                // devices drain.
                hung = true;
                let late: Vec<String> = pending
                    .iter()
                    .map(|(exe, _)| exe.device().to_string())
                    .collect();
                first.get_or_insert(BackendError::Device {
                    device: pending[0].0.device(),
                    reason: format!(
                        "the run had not finished on {} after {:.0} s (a collective waiting for \
                         a peer?): the mesh's NCCL communicators were aborted",
                        late.join(", "),
                        limit.as_secs_f64()
                    ),
                });
                self.comms.abort();
            }
            let mut still = Vec::with_capacity(pending.len());
            for (exe, event) in pending {
                match exe.gpu().bind().and_then(|()| event.done()) {
                    Ok(true) => {}
                    Ok(false) => still.push((exe, event)),
                    Err(e) => {
                        first.get_or_insert(exe.device_error(e));
                        self.comms.abort();
                    }
                }
            }
            pending = still;
            if let Err(e) = self.comms.async_error() {
                // Which of the run's collectives failed, NCCL does not say.
                let program = &self.devices[0].program;
                let names: Vec<&str> = program
                    .kernels
                    .iter()
                    .filter(|k| k.collective().is_some())
                    .map(|k| k.name.as_str())
                    .collect();
                first.get_or_insert(BackendError::Kernel {
                    kernel: names.join(" or "),
                    reason: e,
                });
                self.comms.abort();
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_micros(200));
        }
        first.map_or(Ok(()), Err)
    }
}

/// The staging buffer `c` needs on its device (0 where it needs none): every device's parts,
/// rank by rank.
fn staging_for(slot: &mut Option<DeviceMemory>, c: &CollectiveLaunch) -> Result<u64, String> {
    let Some((rows, part)) = c.strided else {
        return Ok(0);
    };
    let bytes = c.world * rows * part;
    if slot.as_ref().is_none_or(|m| m.bytes < bytes) {
        // The last run's collectives are done (runs are waited for), so the old one is free.
        *slot = None;
        *slot = Some(DeviceMemory::alloc(bytes)?);
    }
    Ok(slot.as_ref().map_or(0, |m| m.ptr))
}

/// The row copies between `strided`'s rows (`world` parts a row, one per rank) and the
/// staging buffer (each rank's parts together): `(dst, src)` pairs of `rows` rows of `part`
/// bytes, into the staging when `pack`, out of it otherwise.
fn restage_copies(
    c: &CollectiveLaunch,
    strided: u64,
    staging: u64,
    pack: bool,
) -> Vec<(Rows, Rows)> {
    let Some((rows, part)) = c.strided else {
        return Vec::new();
    };
    (0..c.world)
        .map(|rank| {
            let row = Rows {
                address: strided + (rank * part) as u64,
                pitch: c.world * part,
            };
            let block = Rows {
                address: staging + (rank * rows * part) as u64,
                pitch: part,
            };
            if pack {
                (block, row)
            } else {
                (row, block)
            }
        })
        .collect()
}

/// Enqueues [`restage_copies`] on `stream`.
fn restage(
    c: &CollectiveLaunch,
    strided: u64,
    staging: u64,
    pack: bool,
    stream: &Stream,
) -> Result<(), String> {
    let Some((rows, part)) = c.strided else {
        return Ok(());
    };
    for (dst, src) in restage_copies(c, strided, staging, pack) {
        driver::copy_rows_async(dst, src, part, rows, stream)?;
    }
    Ok(())
}

/// The staging before `c` (a strided scatter's input packed by rank) and its NCCL call, which
/// reads or writes the staging where `c` is strided.
fn before(c: &CollectiveLaunch, staging: u64, stream: &Stream) -> Result<Call, String> {
    let mut call = c.call;
    if c.strided.is_some() {
        match call.collective {
            Collective::ReduceScatter(_) => {
                restage(c, call.input, staging, true, stream)?;
                call.input = staging;
            }
            Collective::AllGather => call.output = staging,
            Collective::AllReduce(..) => {}
        }
    }
    Ok(call)
}

/// The staging after `c`: a strided gather's parts unpacked into its output.
fn after(c: &CollectiveLaunch, staging: u64, stream: &Stream) -> Result<(), String> {
    match c.call.collective {
        Collective::AllGather => restage(c, c.call.output, staging, false, stream),
        _ => Ok(()),
    }
}

impl MeshExecutable for CudaMeshExecutable {
    fn signature(&self) -> &Signature {
        &self.devices[0].program.signature
    }

    fn devices(&self) -> Vec<Device> {
        self.devices.iter().map(|d| d.device()).collect()
    }

    fn set_parameter(
        &mut self,
        rank: usize,
        name: &str,
        value: TensorRef<'_>,
    ) -> Result<(), BackendError> {
        self.device_mut(rank)?.set_parameter(name, value)
    }

    fn run(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<HostTensors>, BackendError> {
        self.run_all(inputs, Outputs::Host, |exe, placed| {
            Ok(exe.download_outputs(placed)?.into_iter().collect())
        })
    }

    fn run_on_device(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<BTreeMap<String, DeviceTensor>>, BackendError> {
        self.run_all(inputs, Outputs::Device, |exe, placed| {
            exe.device_outputs(placed)
        })
    }

    fn to_device(
        &mut self,
        rank: usize,
        tensor: &HostTensor<'_>,
    ) -> Result<DeviceTensor, BackendError> {
        self.device_mut(rank)?.to_device(tensor)
    }

    fn states(&self) -> Result<Vec<HostTensors>, BackendError> {
        self.devices
            .iter()
            .map(|exe| {
                exe.gpu().bind().map_err(|e| exe.device_error(e))?;
                exe.states()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::collective::{join_shards, take_shard};

    /// Runs `copies` of `rows` rows of `part` bytes on `memory`, addresses being offsets.
    fn copy(memory: &mut [u8], copies: &[(Rows, Rows)], rows: usize, part: usize) {
        for (dst, src) in copies {
            for r in 0..rows {
                for i in 0..part {
                    let from = src.address as usize + r * src.pitch + i;
                    let to = dst.address as usize + r * dst.pitch + i;
                    memory[to] = memory[from];
                }
            }
        }
    }

    fn strided(call: Collective, world: usize, rows: usize, part: usize) -> CollectiveLaunch {
        CollectiveLaunch {
            call: Call {
                collective: call,
                input: 0,
                output: 0,
                count: 0,
            },
            world,
            strided: Some((rows, part)),
        }
    }

    #[test]
    fn a_gather_along_an_inner_axis_unpacks_each_ranks_block_into_its_columns() {
        // Parts of [3, 2] bytes from 3 ranks gathered along axis 1 into [3, 6].
        let (world, rows, part) = (3usize, 3usize, 2usize);
        let parts: Vec<Vec<u8>> = (0..world as u8)
            .map(|r| (0..(rows * part) as u8).map(|i| 16 * r + i).collect())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let want = join_shards(&refs, &[rows as u64, part as u64], 1);
        // NCCL's all-gather leaves the blocks rank by rank in the staging (at 0); the output
        // follows it.
        let total = world * rows * part;
        let mut memory: Vec<u8> = parts.concat();
        memory.resize(2 * total, 0);
        let c = strided(Collective::AllGather, world, rows, part);
        copy(
            &mut memory,
            &restage_copies(&c, total as u64, 0, false),
            rows,
            part,
        );
        assert_eq!(memory[total..], want[..]);
    }

    #[test]
    fn a_scatter_along_an_inner_axis_packs_each_ranks_columns_into_its_block() {
        // [2, 8] bytes scattered along axis 1 over 4 ranks: each rank's [2, 2] block in turn,
        // which NCCL's reduce-scatter hands to that rank.
        let (world, rows, part) = (4usize, 2usize, 2usize);
        let total = world * rows * part;
        let whole: Vec<u8> = (0..total as u8).collect();
        let mut memory = whole.clone();
        memory.resize(2 * total, 0);
        let c = strided(
            Collective::ReduceScatter(cudarc::nccl::sys::ncclDataType_t::ncclUint8),
            world,
            rows,
            part,
        );
        copy(
            &mut memory,
            &restage_copies(&c, 0, total as u64, true),
            rows,
            part,
        );
        let dims = [rows as u64, (world * part) as u64];
        for rank in 0..world {
            let block = &memory[total + rank * rows * part..][..rows * part];
            assert_eq!(
                block,
                take_shard(&whole, &dims, 1, world as u32, rank as u32)
            );
        }
    }
}
