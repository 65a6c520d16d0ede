//! Step 6 of a run (see [`super`]'s module doc): the outputs returned, as host tensors copied into
//! page-locked memory or as device tensors on memory lent to them.
//!
//! Takes an enqueued run. Guarantees: a host output's memory is never dropped while a copy into
//! it is queued.

use super::{CudaExecutable, Outputs, Placed};
use crate::runtime::driver::{self};
use crate::runtime::memory::{pinned_tensor, Fill, TensorMemory};
use crate::runtime::staging::Source;
use crate::runtime::trace::SpanKind;
use std::collections::BTreeMap;
use std::rc::Rc;
use tir_graph::HostTensor;
use tir_lower::{BackendError, DeviceTensor, HostTensors, TensorRef};

impl CudaExecutable {
    /// Step 6 for host outputs: enqueues each output's copy into page-locked memory lent to
    /// the tensor returned; the tensors may be read once the copies have run.
    pub(in crate::runtime) fn download_outputs(
        &self,
        placed: &Placed,
    ) -> Result<Vec<(String, HostTensor<'static>)>, BackendError> {
        let shaped = self.shaped()?;
        let stream = &self.gpu.streams()[0];
        // Every tensor first: once a copy is queued, no error may drop its destination.
        let mut outputs = Vec::with_capacity(self.program.signature.outputs.len());
        for (name, b) in &self.program.signature.outputs {
            let dtype = self.program.buffers[*b].ty.dtype;
            let t = pinned_tensor(&self.gpu, dtype, &shaped.shapes[*b], Fill::Stale)
                .map_err(|e| self.device_error(e))?;
            outputs.push((name.clone(), t));
        }
        for ((name, t), (_, b)) in outputs.iter_mut().zip(&self.program.signature.outputs) {
            let span = (name.as_str(), SpanKind::Download, shaped.bytes[*b] as u64);
            let queued = self.trace.start(stream).and_then(|start| {
                let bytes = t.bytes_mut().map_err(|e| e.to_string())?;
                driver::download_async(bytes, placed.addresses[*b], stream)?;
                self.trace.end(start, span, 0, stream)
            });
            if let Err(e) = queued {
                let _ = self.wait();
                return Err(self.device_error(e));
            }
        }
        Ok(outputs)
    }

    /// Step 6 for device outputs: the lent memory of each output written by a kernel, or a
    /// copy (an output that is a state changes with the next run).
    pub(in crate::runtime) fn device_outputs(
        &self,
        placed: &Placed,
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError> {
        let shaped = self.shaped()?;
        let stream = &self.gpu.streams()[0];
        let mut outputs = BTreeMap::new();
        for (name, b) in &self.program.signature.outputs {
            let memory = match &placed.lent[*b] {
                Some(m) => m.clone(),
                None => {
                    let copy = TensorMemory::take(&self.gpu, shaped.bytes[*b])
                        .map_err(|e| self.device_error(e))?;
                    driver::copy_async(copy.ptr(), placed.addresses[*b], shaped.bytes[*b], stream)
                        .map_err(|e| self.device_error(e))?;
                    Rc::new(copy)
                }
            };
            let dtype = self.program.buffers[*b].ty.dtype;
            let tensor = DeviceTensor::new(dtype, shaped.shapes[*b].clone(), memory);
            outputs.insert(name.clone(), tensor);
        }
        Ok(outputs)
    }

    /// A run in the current mode (sync or graph) with its outputs copied to the host, once the
    /// GPU has finished it.
    pub(in crate::runtime) fn run_to_host(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<HostTensors, BackendError> {
        let ran = self
            .prepare(inputs, Outputs::Host, Source::InPlace)
            .and_then(|placed| {
                self.enqueue(&placed)?;
                self.download_outputs(&placed)
            });
        // Also on an error: copies queued from the caller's memory must have run before it
        // gets its memory back.
        let waited = self.wait().map_err(|e| self.device_error(e));
        let outputs = ran?;
        waited?;
        Ok(outputs.into_iter().collect())
    }
}
