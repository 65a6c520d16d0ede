//! A GPU's pools of free memory: page-locked host blocks ([`PinnedPool`]) and device blocks
//! ([`DevicePool`]), each reused by the smallest fitting request.
//!
//! Takes blocks given back by the tensors that held them. Guarantees: a request gets a free
//! block at least as large and at most twice as large (a page serves any small one), or a new
//! one; a pool keeps at most [`POOL_BYTES`] free, handing back or freeing the rest. Ordering of
//! reuse against work still reading a block is the GPU's shared streams' ([`super::gpu::Gpu`]).

use super::driver::{DeviceMemory, DriverResult, PinnedMemory, PrimaryContext};
use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use tir_graph::HostMemory;

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
    pub fn give_back(&self, memory: DeviceMemory) -> Option<DeviceMemory> {
        let mut free = self.free.borrow_mut();
        let kept: usize = free.iter().map(|m| m.bytes).sum();
        if kept + memory.bytes <= POOL_BYTES {
            free.push(memory);
            return None;
        }
        Some(memory)
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
