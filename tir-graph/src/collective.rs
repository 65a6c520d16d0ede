//! The collectives' values and the cutting of tensors into shards.
//!
//! A mesh of `world` devices runs one graph per device on its shard of the data (SPMD). A tensor
//! split along `axis` is cut into `world` equal, contiguous parts along that axis, part `r` on
//! device `r` ([`take_shard`]); [`join_shards`] puts the parts back. The collectives
//! ([`Op::AllReduce`], [`Op::AllGather`], [`Op::ReduceScatter`]) are computed here on the
//! oracle's f64 values, combining the devices in rank order: a float sum accumulates device 0,
//! then 1, ... in `f64`; integers wrap in their dtype as `reduce_sum` does; max and min
//! propagate NaN.

use crate::eval::{int_word, maximum, minimum, reduce_ints, wrap, F64Tensor};
use crate::op::{Op, ReduceOp};
use crate::tensor::HostTensor;
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

/// The collective `op`'s value on each device, from each device's operand (`xs[r]` on device
/// `r`); an error when the devices are not `op`'s world or their operands disagree in type.
pub fn apply(op: &Op, xs: &[F64Tensor]) -> Result<Vec<F64Tensor>, String> {
    let (world, dims, dtype) = match (op, xs.first()) {
        (
            Op::AllReduce { world, .. }
            | Op::AllGather { world, .. }
            | Op::ReduceScatter { world, .. },
            Some(x),
        ) => (*world, &x.dims, x.dtype),
        _ => return Err(format!("{op} is not a collective of at least one device")),
    };
    if xs.len() != world as usize {
        return Err(format!(
            "{op} over a world of {world} devices is evaluated on {} devices",
            xs.len()
        ));
    }
    if let Some((r, x)) = xs
        .iter()
        .enumerate()
        .find(|(_, x)| (&x.dims, x.dtype) != (dims, dtype))
    {
        return Err(format!(
            "device {r}'s operand is {}{:?}, device 0's {dtype}{dims:?}",
            x.dtype, x.dims
        ));
    }
    let tensor = |dims: Vec<u64>, data: Vec<f64>| F64Tensor { dtype, dims, data };
    Ok(match op {
        Op::AllReduce { op, .. } => {
            let sum = reduce(*op, xs);
            vec![tensor(dims.clone(), sum); xs.len()]
        }
        Op::AllGather { axis, .. } => {
            let parts: Vec<&[f64]> = xs.iter().map(|x| x.data.as_slice()).collect();
            let mut whole = dims.clone();
            whole[*axis] *= u64::from(world);
            vec![tensor(whole, join_shards(&parts, dims, *axis)); xs.len()]
        }
        Op::ReduceScatter { axis, .. } => {
            let sum = reduce(ReduceOp::Sum, xs);
            let part = shard_dims(dims, *axis, world)
                .ok_or_else(|| format!("axis {axis} of {dims:?} is not divisible by {world}"))?;
            (0..world)
                .map(|r| tensor(part.clone(), take_shard(&sum, dims, *axis, world, r)))
                .collect()
        }
        _ => unreachable!("matched above"),
    })
}

/// The elementwise `op` (sum, max or min) of the devices' values, in rank order.
fn reduce(op: ReduceOp, xs: &[F64Tensor]) -> Vec<f64> {
    let dtype = xs[0].dtype;
    (0..xs[0].data.len())
        .map(|i| {
            let lane = xs.iter().map(|x| x.data[i]);
            if dtype.is_int() {
                let words: Vec<i64> = lane.map(|v| int_word(dtype, v)).collect();
                return wrap(dtype, reduce_ints(op, dtype, &words));
            }
            match op {
                ReduceOp::Max => lane.reduce(maximum),
                ReduceOp::Min => lane.reduce(minimum),
                _ => lane.reduce(|a, b| a + b),
            }
            .unwrap_or(0.0)
        })
        .collect()
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

    /// Device `rank`'s part of source `name`'s whole value `t`; an error when the plan's axis
    /// is not an axis of `t` that the world divides.
    pub fn shard_f64(&self, name: &str, t: &F64Tensor, rank: u32) -> Result<F64Tensor, String> {
        match self.sharding(name) {
            Sharding::Replicated => Ok(t.clone()),
            Sharding::Split(axis) => {
                let dims = shard_dims(&t.dims, axis, self.world).ok_or_else(|| {
                    format!(
                        "`{name}` ({}{:?}) cannot be split {} ways along axis {axis}",
                        t.dtype, t.dims, self.world
                    )
                })?;
                let data = take_shard(&t.data, &t.dims, axis, self.world, rank);
                Ok(F64Tensor {
                    dtype: t.dtype,
                    dims,
                    data,
                })
            }
        }
    }

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

    /// Each device's sources cut from the whole graph's `sources` (for [`evaluate_mesh`]).
    ///
    /// [`evaluate_mesh`]: crate::eval::evaluate_mesh
    pub fn shard_sources(
        &self,
        sources: &BTreeMap<String, F64Tensor>,
    ) -> Result<Vec<BTreeMap<String, F64Tensor>>, String> {
        (0..self.world)
            .map(|rank| {
                sources
                    .iter()
                    .map(|(name, t)| Ok((name.clone(), self.shard_f64(name, t, rank)?)))
                    .collect()
            })
            .collect()
    }
}
