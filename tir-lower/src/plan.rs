//! The memory plan: every intermediate value gets a region of one arena, reused once the value
//! is dead. Liveness is counted in schedule waves (a value is live from the wave of the kernel
//! that writes it to the wave of its last reader), so values live in one wave never share bytes
//! even when that wave's kernels run concurrently. Offsets depend on the symbolic dims, so
//! [`MemoryPlan::layout`] computes them for each binding; legality checks the result.

use crate::buffer::{Buffer, Storage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every arena region starts at a multiple of this many bytes.
pub const ALIGN: u64 = 256;

/// When an arena buffer is live, in schedule waves (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRange {
    /// The arena buffer (index into [`crate::Program::buffers`]).
    pub buffer: usize,
    /// The first wave it is live in (its writer's).
    pub first: usize,
    /// The last wave it is live in (its last reader's).
    pub last: usize,
}

/// The arena buffers and their live ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// One live range per arena buffer.
    pub live: Vec<LiveRange>,
}

/// Byte offsets of the arena buffers for one binding of the dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArenaLayout {
    /// Each arena buffer's offset in the arena, in bytes, by buffer index.
    pub offsets: BTreeMap<usize, u64>,
    /// Bytes the arena needs: the peak of live bytes, aligned.
    pub size: u64,
}

/// A buffer whose size cannot be computed for a binding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A symbolic dim of the buffer's type has no value in the binding.
    #[error("buffer {buffer}: symbolic dim `{dim}` is not bound")]
    UnboundDim {
        /// The buffer's name.
        buffer: String,
        /// The dim.
        dim: String,
    },
    /// A dim of the buffer's type cannot be evaluated (negative, overflowing).
    #[error("buffer {buffer}: {reason}")]
    BadDim {
        /// The buffer's name.
        buffer: String,
        /// What is wrong.
        reason: String,
    },
    /// The buffer's size in bytes exceeds `u64`.
    #[error("buffer {buffer} of {ty} does not fit in memory (more than 2^64 bytes)")]
    TooLarge {
        /// The buffer's name.
        buffer: String,
        /// Its type.
        ty: String,
    },
}

/// The bytes of `buffer` under `dims`.
pub fn buffer_bytes(buffer: &Buffer, dims: &BTreeMap<String, u64>) -> Result<u64, PlanError> {
    let too_large = || PlanError::TooLarge {
        buffer: buffer.name.clone(),
        ty: buffer.ty.to_string(),
    };
    let mut elements: u64 = 1;
    for d in buffer.ty.shape.dims() {
        let n = d.value(dims).map_err(|e| match e {
            tir_graph::DimError::Unbound(name) => PlanError::UnboundDim {
                buffer: buffer.name.clone(),
                dim: name,
            },
            other => PlanError::BadDim {
                buffer: buffer.name.clone(),
                reason: other.to_string(),
            },
        })?;
        elements = elements.checked_mul(n).ok_or_else(too_large)?;
    }
    elements
        .checked_mul(buffer.ty.dtype.size_bytes() as u64)
        .ok_or_else(too_large)
}

impl MemoryPlan {
    /// The plan for the arena buffers of `buffers`, given the wave each kernel runs in and, per
    /// kernel, the buffers it reads and writes.
    pub fn new(buffers: &[Buffer], wave_of: &[usize], uses: &[Vec<usize>]) -> MemoryPlan {
        let mut ranges: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
        for (k, used) in uses.iter().enumerate() {
            for &b in used {
                if buffers[b].storage == Storage::Arena {
                    let w = wave_of[k];
                    let range = ranges.entry(b).or_insert((w, w));
                    range.0 = range.0.min(w);
                    range.1 = range.1.max(w);
                }
            }
        }
        let live = ranges
            .into_iter()
            .map(|(buffer, (first, last))| LiveRange {
                buffer,
                first,
                last,
            })
            .collect();
        MemoryPlan { live }
    }

    /// Offsets for `dims`: greedy first fit in order of first use, reusing regions of buffers
    /// whose live ranges do not overlap.
    pub fn layout(
        &self,
        buffers: &[Buffer],
        dims: &BTreeMap<String, u64>,
    ) -> Result<ArenaLayout, PlanError> {
        let mut placed: Vec<(LiveRange, u64, u64)> = Vec::new();
        let mut offsets = BTreeMap::new();
        let mut size = 0u64;
        let mut order = self.live.clone();
        order.sort_by_key(|r| (r.first, r.buffer));
        for range in order {
            let bytes = buffer_bytes(&buffers[range.buffer], dims)?.div_ceil(ALIGN) * ALIGN;
            let mut busy: Vec<(u64, u64)> = placed
                .iter()
                .filter(|(other, _, _)| other.first <= range.last && range.first <= other.last)
                .map(|&(_, start, len)| (start, start + len))
                .collect();
            busy.sort_unstable();
            let mut offset = 0u64;
            for (start, end) in busy {
                if offset + bytes <= start {
                    break;
                }
                offset = offset.max(end);
            }
            size = size.max(offset + bytes);
            offsets.insert(range.buffer, offset);
            placed.push((range, offset, bytes));
        }
        Ok(ArenaLayout { offsets, size })
    }
}
