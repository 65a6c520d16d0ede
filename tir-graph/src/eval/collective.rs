//! The collectives' values on the oracle's f64 tensors ([`Op::AllReduce`], [`Op::AllGather`],
//! [`Op::ReduceScatter`]), combining the devices in rank order: a float sum accumulates device
//! 0, then 1, ... in `f64`; integers wrap in their dtype as `reduce_sum` does; max and min
//! propagate NaN. Tensors are cut and joined as [`crate::collective`] cuts them.

use super::{int_word, maximum, minimum, reduce_ints, wrap, F64Tensor};
use crate::collective::{join_shards, shard_dims, take_shard, ShardPlan, Sharding};
use crate::op::{Op, ReduceOp};
use std::collections::BTreeMap;

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

/// The oracle's side of a shard plan: sources cut for [`super::evaluate_mesh`].
impl ShardPlan {
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
