//! Timing for benchmarks: a program's launches alone ([`CudaExecutable::time_runs`]) and each
//! kernel alone ([`CudaExecutable::profile_kernels`]), each repetition from a cold L2 cache.
//!
//! Takes an executable and inputs for it. Guarantees: inputs are placed and uploaded once, out
//! of the times; each time covers only the launches (or the one kernel) it names.

use super::exec::{CudaExecutable, Outputs};
use super::staging::Source;
use super::timing::ColdTimer;
use tir_lower::{BackendError, HostTensors, TensorRef};

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
