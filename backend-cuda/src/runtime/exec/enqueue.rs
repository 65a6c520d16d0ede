//! Step 5 of a run (see [`super`]'s module doc): the launches enqueued on the GPU's streams by
//! wave, replayed from a CUDA graph captured for the run's addresses, or one after another
//! where a launch check reads a position the run computes.
//!
//! Takes a placed run. Guarantees: every kernel starts after all kernels of the previous wave
//! (the order the memory plan's reuse assumes), and all work joins back into stream 0.

use super::{kernel_error, CudaExecutable, Launch, Placed, GRAPHS};
use crate::runtime::blas::Blas;
use crate::runtime::dnn::Dnn;
use crate::runtime::driver::{self, DeviceMemory, Graph, GraphBuilder, Node, Stream};
use crate::runtime::policy::ExecMode;
use crate::runtime::trace::SpanKind;
use tir_lower::run::{self};
use tir_lower::{BackendError, Storage};

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

impl CudaExecutable {
    /// Enqueues kernel `k`'s `launch` on `stream`, as the `lane`th of the kernels that may run
    /// at the same time (a library call takes that lane's workspace); an error names the kernel.
    pub(in crate::runtime) fn enqueue_one(
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
    pub(super) fn blas(&mut self) -> Result<&mut Blas, String> {
        loaded(&mut self.blas, Blas::new)
    }

    /// cuDNN, loaded on first use.
    pub(super) fn dnn(&mut self) -> Result<&mut Dnn, String> {
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
    pub(in crate::runtime) fn enqueue_spanned(
        &mut self,
        k: usize,
        launch: &Launch,
        stream: &Stream,
        lane: usize,
    ) -> Result<(), String> {
        let start = self.trace.start(stream)?;
        self.enqueue_one(k, launch, stream, lane)?;
        let how = SpanKind::Kernel {
            index: k,
            how: launch.how(),
        };
        self.trace
            .end(start, (&self.program.kernels[k].name, how, 0), lane, stream)
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
    pub(in crate::runtime) fn reserve_capture(&mut self) -> Result<(), String> {
        if let Some(blas) = self.blas.as_mut() {
            blas.reserve_lanes(1)?;
        }
        if let Some(dnn) = self.dnn.as_mut() {
            dnn.reserve_lanes(1)?;
        }
        Ok(())
    }

    /// Fills the arena and every output buffer with all-ones bytes.
    pub(in crate::runtime) fn fill_scratch(
        &self,
        placed: &Placed,
        stream: &Stream,
    ) -> Result<(), String> {
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
    pub(in crate::runtime) fn enqueue(&mut self, placed: &Placed) -> Result<(), BackendError> {
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
}
