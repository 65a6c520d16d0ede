//! Traced runs of an executable, for `tirc run --profile` and `--trace`
//! ([`CudaExecutable::trace_run`]), the spans the executor opens and closes around each copy and
//! kernel, and what each kernel moves and computes ([`CudaExecutable::kernel_work`]).
//!
//! Takes an executable and inputs for it. Guarantees: the traced run computes what an untraced
//! one does (in sync mode even in graph mode, see [`super::trace`]); with no trace on, opening
//! and closing a span records nothing.

use super::exec::CudaExecutable;
use super::policy::ExecMode;
use super::trace::{KernelWork, RunTrace, Tracer};
use tir_lower::tile::{Access, Region};
use tir_lower::{BackendError, HostTensors, TensorRef};

impl CudaExecutable {
    /// Runs once like [`tir_lower::Executable::run`], timing every copy and kernel by a pair
    /// of events around it on its stream, measured from one event recorded before the run's
    /// first copy; returns the outputs and the trace.
    pub fn trace_run(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<(HostTensors, RunTrace), BackendError> {
        self.gpu.bind().map_err(|e| self.device_error(e))?;
        let gpu = self.gpu.clone();
        let tracer = Tracer::new(&gpu.streams()[0]).map_err(|e| self.device_error(e))?;
        self.trace.begin(tracer);
        let mode = self.mode();
        if mode == ExecMode::Graph {
            self.set_mode(ExecMode::Sync);
        }
        let ran = self.run_to_host(inputs);
        self.set_mode(mode);
        let tracer = self.trace.take();
        let outputs = ran?;
        let trace = match tracer {
            Some(t) => t.finish().map_err(|e| self.device_error(e))?,
            None => RunTrace::default(),
        };
        Ok((outputs, trace))
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
