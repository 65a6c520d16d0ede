//! Timing for benchmarks and the `auto` matmul choice: work timed from a cold L2 cache, a
//! program's launches alone, and each kernel alone.

use super::driver::{self, DeviceMemory, Event, Stream};
use super::exec::{CudaExecutable, Outputs};
use super::staging::Source;
use tir_lower::{BackendError, HostTensors, TensorRef};

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

/// One kernel's times from [`CudaExecutable::profile_kernels`].
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTimes {
    /// The kernel's name.
    pub name: String,
    /// `tiles xN` (the generated kernel on N tile blocks) or `cublaslt`.
    pub how: String,
    /// One time per repetition, in milliseconds.
    pub times_ms: Vec<f64>,
}

impl CudaExecutable {
    /// Times the launches alone, for benchmarks: places and uploads `inputs` once, then runs
    /// the program's launches `warmup + reps` times in the current mode (a graph replay in graph
    /// mode), each from a cold L2 (`ColdTimer`); returns the `reps` times in milliseconds and
    /// the outputs of the last run.
    pub fn time_runs(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        warmup: usize,
        reps: usize,
    ) -> Result<(Vec<f64>, HostTensors), BackendError> {
        let placed = self.prepare(inputs, Outputs::Host, Source::InPlace)?;
        let gpu = self.gpu.clone();
        let main = &gpu.streams()[0];
        let timer = ColdTimer::new().map_err(|e| self.device_error(e))?;
        let mut times = Vec::with_capacity(reps);
        for rep in 0..warmup + reps {
            timer.start(rep, main).map_err(|e| self.device_error(e))?;
            self.enqueue(&placed)?;
            let ms = timer.stop(main).map_err(|e| self.device_error(e))?;
            if rep >= warmup {
                times.push(f64::from(ms));
            }
        }
        let outputs = self.download_outputs(&placed)?;
        self.wait().map_err(|e| self.device_error(e))?;
        Ok((times, outputs.into_iter().collect()))
    }

    /// Times each kernel alone, for finding where a program's time goes: places and uploads
    /// `inputs`, runs the program once, then times each kernel `reps` times on one stream from
    /// a cold L2 (`ColdTimer`). Returns, in schedule order, every kernel's name, how it ran
    /// (`tiles` with its block count, or `cublaslt`) and its times in milliseconds. Refused for
    /// a program that writes a state at a position the run computes: launched alone, its
    /// kernels would write at positions no check has seen (time whole runs instead).
    pub fn profile_kernels(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        reps: usize,
    ) -> Result<Vec<KernelTimes>, BackendError> {
        if self.checks_wait() {
            return Err(BackendError::BadInput(
                "profile_kernels: this program writes a state at a position its run computes; \
                 timed one by one, its kernels would write where no check has looked (time \
                 whole runs instead)"
                    .into(),
            ));
        }
        let placed = self.prepare(inputs, Outputs::Host, Source::InPlace)?;
        self.enqueue(&placed)?;
        let launches = self.launches(&placed.addresses)?;
        let gpu = self.gpu.clone();
        let main = &gpu.streams()[0];
        let timer = ColdTimer::new().map_err(|e| self.device_error(e))?;
        let order: Vec<usize> = self.program.schedule.waves.concat();
        let mut profile = Vec::with_capacity(order.len());
        for k in order {
            let launch = &launches[k];
            let mut times_ms = Vec::with_capacity(reps);
            for rep in 0..reps {
                let timed = timer
                    .start(rep, main)
                    .and_then(|()| self.enqueue_one(k, launch, main, 0))
                    .and_then(|()| timer.stop(main));
                times_ms.push(f64::from(timed.map_err(|e| self.device_error(e))?));
            }
            profile.push(KernelTimes {
                name: self.program.kernels[k].name.clone(),
                how: launch.how(),
                times_ms,
            });
        }
        Ok(profile)
    }
}
