//! Host tensors cut into the shards of a mesh and joined back, by the cuts of
//! [`crate::collective`]: only a shard's bytes are read, so a memory-mapped tensor gives each
//! device its part without reading the rest.

use super::HostTensor;
use crate::collective::{join_shards, shard_dims, take_shard, ShardPlan, Sharding};

/// Device `rank`'s part of host tensor `t` split `world` ways along `axis` (only those bytes are
/// read: a memory-mapped tensor gives each device its shard without reading the rest).
pub fn shard_host(
    t: &HostTensor<'_>,
    axis: usize,
    world: u32,
    rank: u32,
) -> Result<HostTensor<'static>, String> {
    let dims = shard_dims(t.dims(), axis, world).ok_or_else(|| {
        format!(
            "{} cannot be split {world} ways along axis {axis}",
            t.type_name()
        )
    })?;
    let mut with_bytes = t.dims().to_vec();
    with_bytes.push(t.dtype().size_bytes() as u64);
    let bytes = take_shard(t.bytes(), &with_bytes, axis, world, rank);
    HostTensor::from_bytes(t.dtype(), &dims, &bytes)
        .map(HostTensor::into_owned)
        .map_err(|e| e.to_string())
}

/// The host tensors `parts` (one per device, in rank order, of one type) joined along `axis`.
pub fn join_host(parts: &[HostTensor<'_>], axis: usize) -> Result<HostTensor<'static>, String> {
    let first = parts.first().ok_or("no parts to join")?;
    if let Some(odd) = parts
        .iter()
        .find(|p| (p.dtype(), p.dims()) != (first.dtype(), first.dims()))
    {
        return Err(format!(
            "parts {} and {} differ",
            first.type_name(),
            odd.type_name()
        ));
    }
    if axis >= first.dims().len() {
        return Err(format!("{} has no axis {axis}", first.type_name()));
    }
    let mut with_bytes = first.dims().to_vec();
    with_bytes.push(first.dtype().size_bytes() as u64);
    let bytes: Vec<&[u8]> = parts.iter().map(|p| p.bytes()).collect();
    let mut dims = first.dims().to_vec();
    dims[axis] *= parts.len() as u64;
    let joined = join_shards(&bytes, &with_bytes, axis);
    HostTensor::from_bytes(first.dtype(), &dims, &joined)
        .map(HostTensor::into_owned)
        .map_err(|e| e.to_string())
}

/// The host tensors' side of a shard plan.
impl ShardPlan {
    /// Device `rank`'s part of source `name`'s whole host tensor `t` (a copy of it where the
    /// source is replicated).
    pub fn shard_host(
        &self,
        name: &str,
        t: &HostTensor<'_>,
        rank: u32,
    ) -> Result<HostTensor<'static>, String> {
        match self.sharding(name) {
            Sharding::Replicated => Ok(t.view().into_owned()),
            Sharding::Split(axis) => {
                shard_host(t, axis, self.world, rank).map_err(|e| format!("`{name}`: {e}"))
            }
        }
    }
}
