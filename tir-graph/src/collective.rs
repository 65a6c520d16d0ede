//! The collectives' values and the cutting of tensors into shards.
//!
//! A mesh of `world` devices runs one graph per device on its shard of the data (SPMD). A tensor
//! split along `axis` is cut into `world` equal, contiguous parts along that axis, part `r` on
//! device `r` ([`take_shard`]); [`join_shards`] puts the parts back. The oracle computes the
//! collectives' values from these cuts (`eval`'s `collective` module), and host tensors are cut
//! and joined by the same functions (`tensor`'s `shard` module).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The elements before and after `axis` of `dims` (outer count, inner count).
fn around(dims: &[u64], axis: usize) -> (usize, usize) {
    let product = |ds: &[u64]| ds.iter().map(|&d| d as usize).product::<usize>();
    (product(&dims[..axis]), product(&dims[axis + 1..]))
}

/// Part `rank` of `world` equal parts of row-major `data` (of shape `dims`) along `axis`;
/// `world` must divide `dims[axis]`.
pub fn take_shard<T: Copy>(data: &[T], dims: &[u64], axis: usize, world: u32, rank: u32) -> Vec<T> {
    let (outer, inner) = around(dims, axis);
    let part = dims[axis] as usize / world as usize;
    let (chunk, skip) = (part * inner, rank as usize * part * inner);
    let whole = dims[axis] as usize * inner;
    let mut out = Vec::with_capacity(outer * chunk);
    for o in 0..outer {
        let at = o * whole + skip;
        out.extend_from_slice(&data[at..at + chunk]);
    }
    out
}

/// The parts (each of shape `part_dims`, in rank order) joined along `axis`.
pub fn join_shards<T: Copy>(parts: &[&[T]], part_dims: &[u64], axis: usize) -> Vec<T> {
    let (outer, inner) = around(part_dims, axis);
    let chunk = part_dims[axis] as usize * inner;
    let mut out = Vec::with_capacity(outer * chunk * parts.len());
    for o in 0..outer {
        for p in parts {
            out.extend_from_slice(&p[o * chunk..(o + 1) * chunk]);
        }
    }
    out
}

/// The shape of one part of `dims` split `world` ways along `axis`, if `world` divides it.
pub fn shard_dims(dims: &[u64], axis: usize, world: u32) -> Option<Vec<u64>> {
    let d = *dims.get(axis)?;
    if world == 0 || d % u64::from(world) != 0 {
        return None;
    }
    let mut out = dims.to_vec();
    out[axis] = d / u64::from(world);
    Some(out)
}

/// How a tensor of a whole graph lies over the devices of a mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Sharding {
    /// Every device holds the whole tensor.
    Replicated,
    /// Device `r` holds part `r` of the tensor cut into equal parts along this axis.
    Split(usize),
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharding::Replicated => f.write_str("replicated"),
            Sharding::Split(axis) => write!(f, "split along axis {axis}"),
        }
    }
}

/// How the graph each device of a mesh runs relates to the whole graph it was cut from: the
/// mesh's size and the sharding of every input, parameter and state by name. Outputs are
/// replicated: every device ends with the whole output.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPlan {
    /// The number of devices in the mesh.
    pub world: u32,
    /// The sharding of each input, parameter and state, by name.
    pub sources: BTreeMap<String, Sharding>,
}

impl ShardPlan {
    /// The sharding of source `name` (replicated when the plan does not name it).
    pub fn sharding(&self, name: &str) -> Sharding {
        self.sources
            .get(name)
            .copied()
            .unwrap_or(Sharding::Replicated)
    }
}
