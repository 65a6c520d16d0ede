//! The trace of a run, for `tirc run --profile` and `--trace` ([`super::traced`]): its spans
//! ([`Span`], [`RunTrace`]), what each kernel moves and computes ([`KernelWork`]), and the
//! [`Tracer`] that records them while the run is in flight.
//!
//! Takes a pair of events recorded around each copy and kernel on its stream, all measured
//! from one event recorded on stream 0 before the run's first copy. Guarantees: every span's
//! times are relative to that event and read only once the GPU has run it.
//!
//! A traced run enqueues its launches on the streams even in graph mode: the nodes of a graph
//! replay cannot be timed one by one, and the launches are the same.

use super::driver::{Event, Stream};
use std::cell::RefCell;

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
    pub(super) fn new(stream: &Stream) -> Result<Tracer, String> {
        let base = Event::timed()?;
        base.record(stream)?;
        Ok(Tracer {
            base,
            spans: Vec::new(),
        })
    }

    /// The times of every span, once the GPU has run them.
    pub(super) fn finish(self) -> Result<RunTrace, String> {
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

/// Where an executable keeps the trace of the run it is enqueueing, if that run is traced: the
/// executor opens and closes a span around each copy and kernel, which records nothing when no
/// trace is on.
#[derive(Default)]
pub(super) struct TraceSlot(RefCell<Option<Tracer>>);

impl TraceSlot {
    /// Traces the runs enqueued from now on into `tracer`.
    pub(super) fn begin(&self, tracer: Tracer) {
        *self.0.borrow_mut() = Some(tracer);
    }

    /// The trace begun with [`Self::begin`], which ends.
    pub(super) fn take(&self) -> Option<Tracer> {
        self.0.borrow_mut().take()
    }

    /// Starts a span on `stream` when a trace is on.
    pub(super) fn start(&self, stream: &Stream) -> Result<Option<SpanStart>, String> {
        if self.0.borrow().is_none() {
            return Ok(None);
        }
        let start = Event::timed()?;
        start.record(stream)?;
        Ok(Some(SpanStart(start)))
    }

    /// Ends the span begun with `start` (on stream number `lane`, `stream`).
    pub(super) fn end(
        &self,
        start: Option<SpanStart>,
        (name, kind, bytes): (&str, SpanKind, u64),
        lane: usize,
        stream: &Stream,
    ) -> Result<(), String> {
        let mut slot = self.0.borrow_mut();
        let (Some(SpanStart(start)), Some(tracer)) = (start, slot.as_mut()) else {
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
}
