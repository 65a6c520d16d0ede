//! Work timed from a cold L2 cache ([`ColdTimer`]), for the `auto` matmul choice and for
//! benchmarks ([`super::profile`]).
//!
//! Takes work enqueued on a stream between [`ColdTimer::start`] and [`ColdTimer::stop`].
//! Guarantees: the work reads its operands from memory, L2 holding only scratch when it starts.

use super::driver::{self, DeviceMemory, Event, Stream};

/// Times work on a stream from a cold L2: a scratch buffer five times the size of an H100's L2
/// cache, overwritten before each timing, so the work reads its operands from memory as it
/// does in a program whose working set exceeds L2; and two events around the work.
pub(super) struct ColdTimer {
    scratch: DeviceMemory,
    start: Event,
    end: Event,
}

impl ColdTimer {
    const SCRATCH_BYTES: usize = 256 << 20;

    pub(super) fn new() -> Result<ColdTimer, String> {
        Ok(ColdTimer {
            scratch: DeviceMemory::alloc(Self::SCRATCH_BYTES)?,
            start: Event::timed()?,
            end: Event::timed()?,
        })
    }

    /// Evicts L2 (with a byte that changes with `rep`) and starts timing, on `stream`.
    pub(super) fn start(&self, rep: usize, stream: &Stream) -> Result<(), String> {
        driver::fill_async(self.scratch.ptr, rep as u8, Self::SCRATCH_BYTES, stream)?;
        self.start.record(stream)
    }

    /// Milliseconds since [`ColdTimer::start`], once the work enqueued since has finished.
    pub(super) fn stop(&self, stream: &Stream) -> Result<f32, String> {
        self.mark_end(stream)?;
        self.elapsed()
    }

    /// Ends the timing on `stream` without waiting ([`ColdTimer::elapsed`] reads it).
    pub(super) fn mark_end(&self, stream: &Stream) -> Result<(), String> {
        self.end.record(stream)
    }

    /// Milliseconds between [`ColdTimer::start`] and [`ColdTimer::mark_end`], once the work
    /// between them has finished.
    pub(super) fn elapsed(&self) -> Result<f32, String> {
        self.end.synchronize()?;
        self.start.elapsed_ms(&self.end)
    }
}
