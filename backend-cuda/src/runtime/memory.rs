//! Memory lent to tensors: page-locked host memory for the host tensors a run returns (and
//! `alloc_host` makes), device memory for device tensors. Each block goes back to its GPU's pool
//! when its tensor is dropped, so a loop of runs stops allocating after its first iterations.
//!
//! A block taken from a pool is reused only by work enqueued after it was given back, on the
//! GPU's shared streams ([`Gpu`]), so work still reading it has been enqueued before and runs
//! first.

use super::driver::{self, DeviceMemory, DriverResult, Gpu, PinnedMemory, PrimaryContext};
use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use tir_graph::{DType, HostMemory, HostTensor};
use tir_lower::{Device, DeviceStorage};

/// The most free bytes a pool keeps; blocks given back beyond it are freed.
const POOL_BYTES: usize = 1 << 30;

/// The smallest block of `free` that holds `bytes` and is at most twice as large.
fn best_fit(sizes: impl Iterator<Item = usize>, bytes: usize) -> Option<usize> {
    sizes
        .enumerate()
        .filter(|&(_, size)| size >= bytes && size / 2 <= bytes.max(4096))
        .min_by_key(|&(_, size)| size)
        .map(|(i, _)| i)
}

/// Free page-locked blocks of one GPU's context.
pub struct PinnedPool {
    context: Arc<PrimaryContext>,
    free: Mutex<Vec<PinnedMemory>>,
}

impl PinnedPool {
    pub fn new(context: Arc<PrimaryContext>) -> Arc<PinnedPool> {
        Arc::new(PinnedPool {
            context,
            free: Mutex::new(Vec::new()),
        })
    }

    /// `bytes` of page-locked memory: a free block that fits, or a new one.
    pub fn take(self: &Arc<Self>, bytes: usize) -> DriverResult<PinnedBlock> {
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            best_fit(free.iter().map(|m| m.bytes), bytes).map(|i| free.swap_remove(i))
        };
        let memory = match reused {
            Some(m) => m,
            None => PinnedMemory::alloc(&self.context, bytes)?,
        };
        Ok(PinnedBlock {
            memory: Some(memory),
            len: bytes,
            pool: self.clone(),
        })
    }

    fn give_back(&self, memory: PinnedMemory) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let kept: usize = free.iter().map(|m| m.bytes).sum();
        if kept + memory.bytes <= POOL_BYTES {
            free.push(memory);
        }
    }
}

/// Page-locked memory lent to a host tensor: the first `len` bytes of a pooled block.
pub struct PinnedBlock {
    memory: Option<PinnedMemory>,
    len: usize,
    pool: Arc<PinnedPool>,
}

impl PinnedBlock {
    fn memory(&self) -> &PinnedMemory {
        self.memory.as_ref().expect("held until dropped")
    }
}

impl HostMemory for PinnedBlock {
    fn bytes(&self) -> &[u8] {
        &self.memory().as_slice()[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self
            .memory
            .as_mut()
            .expect("held until dropped")
            .as_mut_slice()[..len]
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        if let Some(m) = self.memory.take() {
            self.pool.give_back(m);
        }
    }
}

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

/// Free device blocks of one GPU.
#[derive(Default)]
pub struct DevicePool {
    free: RefCell<Vec<DeviceMemory>>,
}

impl DevicePool {
    /// `bytes` of device memory: a free block that fits, or a new one.
    pub fn take(&self, bytes: usize) -> DriverResult<DeviceMemory> {
        let reused = {
            let mut free = self.free.borrow_mut();
            best_fit(free.iter().map(|m| m.bytes), bytes).map(|i| free.swap_remove(i))
        };
        match reused {
            Some(m) => Ok(m),
            None => DeviceMemory::alloc(bytes),
        }
    }

    /// Keeps `memory` for reuse, or hands it back when the pool is full.
    fn give_back(&self, memory: DeviceMemory) -> Option<DeviceMemory> {
        let mut free = self.free.borrow_mut();
        let kept: usize = free.iter().map(|m| m.bytes).sum();
        if kept + memory.bytes <= POOL_BYTES {
            free.push(memory);
            return None;
        }
        Some(memory)
    }
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

#[cfg(test)]
mod tests {
    use super::best_fit;

    #[test]
    fn best_fit_takes_the_smallest_block_at_most_twice_the_size() {
        let sizes = [1 << 20, 8 << 20, 3 << 20];
        assert_eq!(best_fit(sizes.into_iter(), 2 << 20), Some(2));
        assert_eq!(best_fit(sizes.into_iter(), 1 << 20), Some(0));
        assert_eq!(best_fit(sizes.into_iter(), 1 << 19), Some(0));
        assert_eq!(
            best_fit(sizes.into_iter(), 1 << 18),
            None,
            "too large a block"
        );
        assert_eq!(best_fit(sizes.into_iter(), 9 << 20), None);
        assert_eq!(
            best_fit([4096].into_iter(), 8),
            Some(0),
            "a page serves any small tensor"
        );
    }
}
