//! Memory lent to tensors: page-locked host memory for the host tensors a run returns (and
//! `alloc_host` makes), device memory for device tensors, both from the GPU's pools
//! ([`super::pool`]). Each block goes back to its GPU's pool when its tensor is dropped, so a
//! loop of runs stops allocating after its first iterations.
//!
//! A block taken from a pool is reused only by work enqueued after it was given back, on the
//! GPU's shared streams ([`Gpu`]), so work still reading it has been enqueued before and runs
//! first.

use super::driver::{self, DeviceMemory, DriverResult};
use super::gpu::Gpu;
use std::any::Any;
use std::rc::Rc;
use tir_graph::{DType, HostMemory, HostTensor};
use tir_lower::{Device, DeviceStorage};

/// What a new page-locked tensor holds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Zeros.
    Zeros,
    /// Whatever its block held before (for a copy from the device to overwrite; bool tensors
    /// are zeroed, so they hold bools until then).
    Stale,
}

/// A host tensor of `dtype` and `dims` in page-locked memory from `gpu`'s pool.
pub fn pinned_tensor(
    gpu: &Gpu,
    dtype: DType,
    dims: &[u64],
    fill: Fill,
) -> Result<HostTensor<'static>, String> {
    let bytes = tir_graph::tensor::numel(dims)
        .and_then(|n| n.checked_mul(dtype.size_bytes()))
        .ok_or_else(|| {
            format!(
                "{} has too many elements",
                tir_graph::tensor::type_name(dtype, dims)
            )
        })?;
    let mut block = gpu.pinned_pool.take(bytes)?;
    if fill == Fill::Zeros || dtype == DType::Bool {
        block.bytes_mut().fill(0);
    }
    HostTensor::from_memory(dtype, dims, Box::new(block)).map_err(|e| e.to_string())
}

/// Device memory lent to a device tensor, on its GPU.
pub struct TensorMemory {
    memory: Option<DeviceMemory>,
    gpu: Rc<Gpu>,
}

impl TensorMemory {
    /// At least `bytes` from `gpu`'s pool.
    pub fn take(gpu: &Rc<Gpu>, bytes: usize) -> DriverResult<TensorMemory> {
        Ok(TensorMemory {
            memory: Some(gpu.device_pool.take(bytes)?),
            gpu: gpu.clone(),
        })
    }

    pub fn ptr(&self) -> u64 {
        self.memory.as_ref().map_or(0, |m| m.ptr)
    }

    /// Whether this memory is on `gpu` (the same open GPU, so ordered by its streams).
    pub fn is_on(&self, gpu: &Rc<Gpu>) -> bool {
        Rc::ptr_eq(&self.gpu, gpu)
    }
}

impl DeviceStorage for TensorMemory {
    fn device(&self) -> Device {
        Device {
            backend: "cuda",
            ordinal: self.gpu.ordinal,
        }
    }

    fn to_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, String> {
        self.gpu.bind()?;
        let mut out = pinned_tensor(&self.gpu, dtype, dims, Fill::Stale)?;
        let stream = &self.gpu.streams()[0];
        let bytes = out.bytes_mut().map_err(|e| e.to_string())?;
        driver::download_async(bytes, self.ptr(), stream)?;
        stream.synchronize()?;
        Ok(out)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for TensorMemory {
    fn drop(&mut self) {
        let Some(m) = self.memory.take() else { return };
        if let Some(freed) = self.gpu.device_pool.give_back(m) {
            // Work already queued may still use it; and frees need this GPU's context.
            let _ = self.gpu.context().with_current(|| {
                let _ = self.gpu.streams()[0].synchronize();
                drop(freed);
            });
        }
    }
}
