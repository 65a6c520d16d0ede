//! Traced runs, for `tirc run --profile` and `--trace`: a run whose every copy and kernel is
//! timed by a pair of events recorded around it on its stream, all measured from one event
//! recorded on stream 0 before the run's first copy; and what each kernel moves and computes at
//! the run's dims, to turn its time into bandwidth and FLOP/s.
//!
//! A traced run enqueues its launches on the streams even in graph mode: the nodes of a graph
//! replay cannot be timed one by one, and the launches are the same.

use super::driver::{Event, Stream};
use super::exec::CudaExecutable;
use super::policy::ExecMode;
use tir_lower::tile::{Access, Region};
use tir_lower::{BackendError, HostTensors, TensorRef};

/// What a span of a traced run did.
#[derive(Clone, Debug, PartialEq)]
pub enum SpanKind {
    /// A host input copied to the device.
    Upload,
    /// An output copied back to the host.
    Download,
    /// Kernel `index` of the program, run as `how` (`tiles xN` or `cublaslt`).
    Kernel {
        /// The kernel's index in the program.
        index: usize,
        /// How it ran.
        how: String,
    },
}

/// One copy or kernel of a traced run.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The kernel's name, or the tensor copied.
    pub name: String,
    /// What it did.
    pub kind: SpanKind,
    /// The GPU stream it ran on (0 orders the runs).
    pub stream: usize,
    /// Milliseconds since the run began on the GPU.
    pub start_ms: f64,
    /// Milliseconds since the run began on the GPU, at its end.
    pub end_ms: f64,
    /// Bytes copied (zero for a kernel: see [`KernelWork`]).
    pub bytes: u64,
}

/// Every copy and kernel of a traced run, in the order they were enqueued.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunTrace {
    /// The spans, in enqueue order.
    pub spans: Vec<Span>,
}

/// What a kernel does at a run's dims.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelWork {
    /// The kernel's name.
    pub name: String,
    /// Its products' floating-point operations (0 without products).
    pub flops: f64,
    /// The bytes of its buffers: each buffer it reads in full, the region it writes of one it
    /// only writes. An upper bound on its memory traffic where it reads part of a buffer.
    pub bytes: f64,
}

/// A span enqueued, not yet timed.
struct OpenSpan {
    name: String,
    kind: SpanKind,
    stream: usize,
    bytes: u64,
    start: Event,
    end: Event,
}

/// The events of a traced run in flight.
pub(super) struct Tracer {
    base: Event,
    spans: Vec<OpenSpan>,
}

impl Tracer {
    /// Starts a trace at the point `stream` (the GPU's stream 0) has reached.
    fn new(stream: &Stream) -> Result<Tracer, String> {
        let base = Event::timed()?;
        base.record(stream)?;
        Ok(Tracer {
            base,
            spans: Vec::new(),
        })
    }

    /// The times of every span, once the GPU has run them.
    fn finish(self) -> Result<RunTrace, String> {
        let mut spans = Vec::with_capacity(self.spans.len());
        for open in self.spans {
            open.end.synchronize()?;
            spans.push(Span {
                start_ms: f64::from(self.base.elapsed_ms(&open.start)?),
                end_ms: f64::from(self.base.elapsed_ms(&open.end)?),
                name: open.name,
                kind: open.kind,
                stream: open.stream,
                bytes: open.bytes,
            });
        }
        Ok(RunTrace { spans })
    }
}

/// The start of a span on a stream, when a trace is on.
pub(super) struct SpanStart(Event);

impl CudaExecutable {
    /// Runs once like [`tir_lower::Executable::run`], timing every copy and kernel (see the
    /// module doc); returns the outputs and the trace.
    pub fn trace_run(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<(HostTensors, RunTrace), BackendError> {
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        let gpu = self.gpu.clone();
        let tracer = Tracer::new(&gpu.streams()[0]).map_err(|e| self.device_error(e))?;
        *self.tracer.borrow_mut() = Some(tracer);
        let mode = self.mode();
        if mode == ExecMode::Graph {
            self.set_mode(ExecMode::Sync);
        }
        let ran = self.run_to_host(inputs);
        self.set_mode(mode);
        let tracer = self.tracer.borrow_mut().take();
        let outputs = ran?;
        let trace = match tracer {
            Some(t) => t.finish().map_err(|e| self.device_error(e))?,
            None => RunTrace::default(),
        };
        Ok((outputs, trace))
    }

    /// Starts a span on `stream` when a trace is on.
    pub(super) fn span_start(&self, stream: &Stream) -> Result<Option<SpanStart>, String> {
        if self.tracer.borrow().is_none() {
            return Ok(None);
        }
        let start = Event::timed()?;
        start.record(stream)?;
        Ok(Some(SpanStart(start)))
    }

    /// Ends the span begun with `start` (on stream number `lane`, `stream`).
    pub(super) fn span_end(
        &self,
        start: Option<SpanStart>,
        (name, kind, bytes): (&str, SpanKind, u64),
        lane: usize,
        stream: &Stream,
    ) -> Result<(), String> {
        let mut tracer = self.tracer.borrow_mut();
        let (Some(SpanStart(start)), Some(tracer)) = (start, tracer.as_mut()) else {
            return Ok(());
        };
        let end = Event::timed()?;
        end.record(stream)?;
        tracer.spans.push(OpenSpan {
            name: name.to_string(),
            kind,
            stream: lane,
            bytes,
            start,
            end,
        });
        Ok(())
    }

    /// What each kernel moves and computes at the dims of the last run, in program order.
    pub fn kernel_work(&self) -> Result<Vec<KernelWork>, BackendError> {
        let shaped = self
            .shaped
            .as_ref()
            .ok_or_else(|| BackendError::BadInput("no run has bound the program's dims".into()))?;
        let mut work = Vec::with_capacity(self.program.kernels.len());
        for kernel in &self.program.kernels {
            let flops = kernel
                .flops
                .eval(&shaped.dims)
                .map_err(|e| BackendError::BadInput(format!("kernel {}: {e}", kernel.name)))?;
            let mut buffers: Vec<(usize, f64)> = Vec::new();
            for (p, param) in kernel.params.iter().enumerate() {
                let whole = shaped.bytes[param.buffer] as f64;
                let written = kernel.writes.iter().find(|w| w.param == p);
                let bytes = match (param.access, written.map(|w| &w.region)) {
                    (Access::Mutable, Some(Region::Slice { axis, len, .. })) => {
                        let len = tir_lower::run::dim_value(len, &shaped.dims).unwrap_or(0);
                        let size = shaped.shapes[param.buffer].get(*axis).copied().unwrap_or(1);
                        whole * len as f64 / size.max(1) as f64
                    }
                    _ => whole,
                };
                match buffers.iter_mut().find(|(b, _)| *b == param.buffer) {
                    Some((_, seen)) => *seen = seen.max(bytes),
                    None => buffers.push((param.buffer, bytes)),
                }
            }
            work.push(KernelWork {
                name: kernel.name.clone(),
                flops,
                bytes: buffers.iter().map(|(_, b)| b).sum(),
            });
        }
        Ok(work)
    }
}
