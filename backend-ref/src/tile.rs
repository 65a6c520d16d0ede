//! Computations on tiles: the value semantics of the tile IR's tile operations.
//!
//! A tile is a [`F64Tensor`] (dtype, static dims, row-major `f64` values). Every function here
//! returns a tile whose values are exact in its dtype: floats are rounded to their precision,
//! integers wrap, bool is 0/1 ("the reference computes in the tensor's dtype"). Elementwise ops
//! reuse the oracle's per-op semantics ([`tir_graph::eval::eval_op`]) and round the result;
//! reductions and `mma` accumulate in `f32` like the GPU does (in `f64` for `f64` tiles).
//!
//! Errors are one-line reasons (`String`); the interpreter adds the kernel, program and statement.

use std::collections::BTreeMap;
use tir_graph::eval::{eval_op, first_extreme, for_each_offset, maximum, minimum, wrap, F64Tensor};
use tir_graph::{BinaryOp, DType, Op, ReduceOp, Shape, TensorType, UnaryOp, MAX_RANK};
pub use tir_lower::run::type_name;
use tir_lower::tile::{CmpOp, IndexOp};

/// The most elements one tile may have (a guard against a malformed tile type exhausting memory;
/// real tiles are a few thousand elements).
pub const MAX_TILE_ELEMENTS: u64 = 1 << 24;

/// The element count of a tile of `shape`, refusing more than [`MAX_TILE_ELEMENTS`].
pub fn tile_numel(shape: &[u64]) -> Result<usize, String> {
    shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_TILE_ELEMENTS)
        .map(|n| n as usize)
        .ok_or_else(|| {
            format!(
                "a tile of shape {shape:?} has more than {MAX_TILE_ELEMENTS} elements, more than the \
                 reference backend holds"
            )
        })
}

pub use tir_graph::eval::row_major_strides;

/// The multi-index of row-major element `flat` of `dims`.
pub fn unravel(mut flat: usize, dims: &[u64]) -> Vec<u64> {
    let mut index = vec![0u64; dims.len()];
    for (i, &d) in dims.iter().enumerate().rev() {
        if d > 0 {
            index[i] = (flat as u64) % d;
            flat /= d as usize;
        }
    }
    index
}

/// A tile of `dtype` and `shape` with every element `value` (rounded to the dtype).
pub fn filled(dtype: DType, shape: &[u64], value: f64) -> Result<F64Tensor, String> {
    let n = tile_numel(shape)?;
    Ok(F64Tensor {
        dtype,
        dims: shape.to_vec(),
        data: vec![dtype.round_value(value); n],
    })
}

/// A tile whose element `t` is `t[axis]` (rounded to `dtype`).
pub fn iota(dtype: DType, shape: &[u64], axis: usize) -> Result<F64Tensor, String> {
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for a tile of rank {}",
            shape.len()
        ));
    }
    let n = tile_numel(shape)?;
    let inner: usize = shape[axis + 1..].iter().map(|&d| d as usize).product();
    let size = shape[axis] as usize;
    let data = (0..n)
        .map(|i| dtype.round_value(((i / inner) % size) as f64))
        .collect();
    Ok(F64Tensor {
        dtype,
        dims: shape.to_vec(),
        data,
    })
}

/// The graph op `op` on same-shape tiles `xs`, with the oracle's semantics, rounded to the result
/// dtype. `result` is the declared result dtype; a disagreement with the op's typing is an error.
fn through_oracle(op: &Op, xs: &[&F64Tensor], result: DType) -> Result<F64Tensor, String> {
    let dims = &xs[0].dims;
    if dims.len() > MAX_RANK {
        return Err(format!(
            "tile rank {} is more than the supported {MAX_RANK}",
            dims.len()
        ));
    }
    if let Some(x) = xs.iter().find(|x| x.dims != *dims) {
        return Err(format!(
            "operand shapes differ: {} and {} (broadcasts are explicit in the tile IR)",
            type_name(xs[0].dtype, dims),
            type_name(x.dtype, &x.dims)
        ));
    }
    let ty = TensorType::new(result, Shape::of(dims));
    let mut t = eval_op(op, xs, &ty, &BTreeMap::new()).map_err(|e| e.to_string())?;
    for v in &mut t.data {
        *v = t.dtype.round_value(*v);
    }
    Ok(t)
}

pub fn unary(op: UnaryOp, x: &F64Tensor, result: DType) -> Result<F64Tensor, String> {
    through_oracle(&Op::Unary(op), &[x], result)
}

pub fn binary(
    op: BinaryOp,
    a: &F64Tensor,
    b: &F64Tensor,
    result: DType,
) -> Result<F64Tensor, String> {
    through_oracle(&Op::Binary(op), &[a, b], result)
}

/// `cond ? a : b` elementwise; all three of one shape, `cond` bool, `a` and `b` of one dtype.
pub fn select(cond: &F64Tensor, a: &F64Tensor, b: &F64Tensor) -> Result<F64Tensor, String> {
    if cond.dtype != DType::Bool {
        return Err(format!(
            "the condition is {}, not bool",
            type_name(cond.dtype, &cond.dims)
        ));
    }
    if a.dtype != b.dtype || a.dims != b.dims || cond.dims != a.dims {
        return Err(format!(
            "operands {}, {} and {} do not have one shape (and the branches one dtype)",
            type_name(cond.dtype, &cond.dims),
            type_name(a.dtype, &a.dims),
            type_name(b.dtype, &b.dims)
        ));
    }
    let data = cond
        .data
        .iter()
        .zip(a.data.iter().zip(&b.data))
        .map(|(&c, (&x, &y))| if c != 0.0 { x } else { y })
        .collect();
    Ok(F64Tensor {
        dtype: a.dtype,
        dims: a.dims.clone(),
        data,
    })
}

/// `x` converted to `to` ([`DType::round_value`]: round to nearest for floats, toward zero and
/// wrapping for integers, `x != 0` for bool).
pub fn cast(x: &F64Tensor, to: DType) -> F64Tensor {
    F64Tensor {
        dtype: to,
        dims: x.dims.clone(),
        data: x.data.iter().map(|&v| to.round_value(v)).collect(),
    }
}

/// `x` with its size-1 dims repeated to `shape` (same rank).
pub fn broadcast(x: &F64Tensor, shape: &[u64]) -> Result<F64Tensor, String> {
    let fits =
        x.dims.len() == shape.len() && x.dims.iter().zip(shape).all(|(&d, &s)| d == s || d == 1);
    if !fits {
        return Err(format!(
            "cannot broadcast {} to {:?} (same rank, size-1 dims repeat)",
            type_name(x.dtype, &x.dims),
            shape
        ));
    }
    let n = tile_numel(shape)?;
    let src = row_major_strides(&x.dims);
    let strides: Vec<usize> = x
        .dims
        .iter()
        .zip(&src)
        .map(|(&d, &s)| if d == 1 { 0 } else { s })
        .collect();
    let mut data = Vec::with_capacity(n);
    for_each_offset(shape, 0, &strides, |o| data.push(x.data[o]));
    Ok(F64Tensor {
        dtype: x.dtype,
        dims: shape.to_vec(),
        data,
    })
}

/// The same elements in row-major order with another shape.
pub fn reshape(x: &F64Tensor, shape: &[u64]) -> Result<F64Tensor, String> {
    let n = tile_numel(shape)?;
    if n != x.data.len() {
        return Err(format!(
            "cannot reshape {} ({} elements) to {:?} ({n} elements)",
            type_name(x.dtype, &x.dims),
            x.data.len(),
            shape
        ));
    }
    Ok(F64Tensor {
        dtype: x.dtype,
        dims: shape.to_vec(),
        data: x.data.clone(),
    })
}

/// Result dim `i` is dim `perm[i]` of `x`.
pub fn permute(x: &F64Tensor, perm: &[usize]) -> Result<F64Tensor, String> {
    let rank = x.dims.len();
    let mut seen = vec![false; rank];
    let valid = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if !valid {
        return Err(format!(
            "{perm:?} is not a permutation of the {rank} axes of {}",
            type_name(x.dtype, &x.dims)
        ));
    }
    let src = row_major_strides(&x.dims);
    let dims: Vec<u64> = perm.iter().map(|&p| x.dims[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| src[p]).collect();
    let mut data = Vec::with_capacity(x.data.len());
    for_each_offset(&dims, 0, &strides, |o| data.push(x.data[o]));
    Ok(F64Tensor {
        dtype: x.dtype,
        dims,
        data,
    })
}

/// Reduces `x` along `axis`, keeping it as a dim of size 1, in order along the axis.
///
/// Float `Sum`/`Prod`/`Mean` accumulate in `f32` (each partial result rounded to `f32`) for
/// `f16`, `bf16` and `f32` tiles and in `f64` for `f64` tiles; integer ones wrap in `i64`; the
/// result is rounded to the dtype. `Max`/`Min` propagate NaN; `ArgMax`/`ArgMin` give the `i64`
/// position of the first extreme, a NaN winning at its first position (as the oracle).
pub fn reduce(op: ReduceOp, x: &F64Tensor, axis: usize) -> Result<F64Tensor, String> {
    let rank = x.dims.len();
    if axis >= rank {
        return Err(format!(
            "axis {axis} is out of range for {}",
            type_name(x.dtype, &x.dims)
        ));
    }
    let len = x.dims[axis] as usize;
    if len == 0 {
        return Err(format!(
            "reduces an empty axis of {}",
            type_name(x.dtype, &x.dims)
        ));
    }
    let inner: usize = x.dims[axis + 1..].iter().map(|&d| d as usize).product();
    let outer: usize = x.dims[..axis].iter().map(|&d| d as usize).product();
    let dtype = match op {
        ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
        _ => x.dtype,
    };
    let (int, wide) = (
        x.dtype.is_int() || x.dtype == DType::Bool,
        x.dtype == DType::F64,
    );
    let mut data = Vec::with_capacity(outer * inner);
    let mut lane = Vec::with_capacity(len);
    for o in 0..outer {
        for i in 0..inner {
            lane.clear();
            lane.extend((0..len).map(|r| x.data[(o * len + r) * inner + i]));
            let v = match op {
                ReduceOp::Sum | ReduceOp::Mean if int => {
                    let s = lane.iter().fold(0i64, |a, &v| a.wrapping_add(v as i64));
                    if op == ReduceOp::Mean {
                        wrap(dtype, s.wrapping_div(len as i64))
                    } else {
                        wrap(dtype, s)
                    }
                }
                ReduceOp::Prod if int => wrap(
                    dtype,
                    lane.iter().fold(1i64, |a, &v| a.wrapping_mul(v as i64)),
                ),
                ReduceOp::Sum | ReduceOp::Mean if wide => {
                    let s: f64 = lane.iter().sum();
                    if op == ReduceOp::Mean {
                        s / len as f64
                    } else {
                        s
                    }
                }
                ReduceOp::Prod if wide => lane.iter().product(),
                ReduceOp::Sum | ReduceOp::Mean => {
                    let s = lane.iter().fold(0f32, |a, &v| a + v as f32);
                    if op == ReduceOp::Mean {
                        f64::from(s / len as f32)
                    } else {
                        f64::from(s)
                    }
                }
                ReduceOp::Prod => f64::from(lane.iter().fold(1f32, |a, &v| a * v as f32)),
                ReduceOp::Max => lane.iter().copied().fold(lane[0], maximum),
                ReduceOp::Min => lane.iter().copied().fold(lane[0], minimum),
                ReduceOp::ArgMax => first_extreme(&lane, |v, best| v > best),
                ReduceOp::ArgMin => first_extreme(&lane, |v, best| v < best),
            };
            data.push(dtype.round_value(v));
        }
    }
    let mut dims = x.dims.clone();
    dims[axis] = 1;
    Ok(F64Tensor { dtype, dims, data })
}

/// `acc + a @ b` over the last two dims (`a: [.., m, k]`, `b: [.., k, n]`, `acc: [.., m, n]`,
/// equal leading dims). With an `f32` accumulator every step is one `f32` fused multiply-add
/// (`a` and `b` converted to `f32`), in order of `k`; with `f64` the same in `f64`; with an
/// integer accumulator wrapping `i64` arithmetic, wrapped to the dtype at the end.
pub fn mma(a: &F64Tensor, b: &F64Tensor, acc: &F64Tensor) -> Result<F64Tensor, String> {
    let rank = acc.dims.len();
    let shapes = || {
        format!(
            "a {}, b {}, acc {}",
            type_name(a.dtype, &a.dims),
            type_name(b.dtype, &b.dims),
            type_name(acc.dtype, &acc.dims)
        )
    };
    if rank < 2 || a.dims.len() != rank || b.dims.len() != rank {
        return Err(format!(
            "mma needs operands of one rank of at least 2: {}",
            shapes()
        ));
    }
    let (m, k, n) = (a.dims[rank - 2], a.dims[rank - 1], b.dims[rank - 1]);
    let batch = &acc.dims[..rank - 2];
    if b.dims[rank - 2] != k
        || acc.dims[rank - 2] != m
        || acc.dims[rank - 1] != n
        || a.dims[..rank - 2] != *batch
        || b.dims[..rank - 2] != *batch
    {
        return Err(format!(
            "mma shapes do not fit [.., m, k] @ [.., k, n] + [.., m, n]: {}",
            shapes()
        ));
    }
    if a.dtype != b.dtype {
        return Err(format!("mma operands differ in dtype: {}", shapes()));
    }
    let (m, k, n) = (m as usize, k as usize, n as usize);
    let batches: usize = batch.iter().map(|&d| d as usize).product();
    let mut data = acc.data.clone();
    match acc.dtype {
        DType::F32 => {
            let af: Vec<f32> = a.data.iter().map(|&v| v as f32).collect();
            let bf: Vec<f32> = b.data.iter().map(|&v| v as f32).collect();
            let mut row = vec![0f32; n];
            for bt in 0..batches {
                let (am, bm) = (&af[bt * m * k..], &bf[bt * k * n..]);
                for i in 0..m {
                    let out = &mut data[(bt * m + i) * n..(bt * m + i + 1) * n];
                    for (r, &c) in row.iter_mut().zip(out.iter()) {
                        *r = c as f32;
                    }
                    for p in 0..k {
                        let x = am[i * k + p];
                        for (r, &y) in row.iter_mut().zip(&bm[p * n..(p + 1) * n]) {
                            *r = x.mul_add(y, *r);
                        }
                    }
                    for (o, &r) in out.iter_mut().zip(&row) {
                        *o = f64::from(r);
                    }
                }
            }
        }
        DType::F64 => {
            for bt in 0..batches {
                let (am, bm) = (&a.data[bt * m * k..], &b.data[bt * k * n..]);
                for i in 0..m {
                    let out = &mut data[(bt * m + i) * n..(bt * m + i + 1) * n];
                    for p in 0..k {
                        let x = am[i * k + p];
                        for (r, &y) in out.iter_mut().zip(&bm[p * n..(p + 1) * n]) {
                            *r = x.mul_add(y, *r);
                        }
                    }
                }
            }
        }
        d if d.is_int() => {
            for bt in 0..batches {
                let (am, bm) = (&a.data[bt * m * k..], &b.data[bt * k * n..]);
                for i in 0..m {
                    let out = &mut data[(bt * m + i) * n..(bt * m + i + 1) * n];
                    for (j, o) in out.iter_mut().enumerate() {
                        let s = (0..k).fold(*o as i64, |s, p| {
                            s.wrapping_add(
                                (am[i * k + p] as i64).wrapping_mul(bm[p * n + j] as i64),
                            )
                        });
                        *o = d.round_value(s as f64);
                    }
                }
            }
        }
        d => {
            return Err(format!(
                "mma accumulates in f32, f64 or an integer dtype, not {d}: {}",
                shapes()
            ))
        }
    }
    Ok(F64Tensor {
        dtype: acc.dtype,
        dims: acc.dims.clone(),
        data,
    })
}

/// `a op b` on index values; division and remainder truncate toward zero, and a zero divisor is
/// an error (index arithmetic never divides by zero in a correct kernel).
pub fn index_arith(op: IndexOp, a: i64, b: i64) -> Result<i64, String> {
    Ok(match op {
        IndexOp::Add => a.wrapping_add(b),
        IndexOp::Sub => a.wrapping_sub(b),
        IndexOp::Mul => a.wrapping_mul(b),
        IndexOp::Div | IndexOp::Rem if b == 0 => {
            return Err(format!(
                "index {} by zero ({a} / 0)",
                if op == IndexOp::Div {
                    "division"
                } else {
                    "remainder"
                }
            ))
        }
        IndexOp::Div => a.wrapping_div(b),
        IndexOp::Rem => a.wrapping_rem(b),
        IndexOp::Min => a.min(b),
        IndexOp::Max => a.max(b),
    })
}

pub fn index_cmp(op: CmpOp, a: i64, b: i64) -> bool {
    match op {
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Ge => a >= b,
        CmpOp::Eq => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dtype: DType, dims: &[u64], data: &[f64]) -> F64Tensor {
        F64Tensor {
            dtype,
            dims: dims.to_vec(),
            data: data.to_vec(),
        }
    }

    #[test]
    fn elementwise_rounds_to_the_dtype() {
        let x = t(DType::F16, &[2], &[1.0, 2.0]);
        let y = unary(UnaryOp::Exp, &x, DType::F16).unwrap();
        assert_eq!(y.data[0], DType::F16.round_value(1f64.exp()));
        let i = t(DType::I8, &[1], &[100.0]);
        let s = binary(BinaryOp::Add, &i, &i, DType::I8).unwrap();
        assert_eq!(s.data, vec![-56.0]);
        let c = binary(BinaryOp::Lt, &x, &x, DType::Bool).unwrap();
        assert_eq!((c.dtype, c.data), (DType::Bool, vec![0.0, 0.0]));
        assert!(binary(BinaryOp::Lt, &x, &x, DType::F16).is_err());
    }

    #[test]
    fn reduce_accumulates_in_f32_and_keeps_the_axis() {
        // 2049 ones in f16: an f16 accumulator would stall at 2048; f32 gives 2049 → f16 2048.
        let x = t(DType::F16, &[1, 2049], &[1.0; 2049]);
        let s = reduce(ReduceOp::Sum, &x, 1).unwrap();
        assert_eq!(s.dims, vec![1, 1]);
        assert_eq!(s.data, vec![DType::F16.round_value(2049.0)]);
        let x = t(DType::F32, &[2, 3], &[1.0, f64::NAN, 3.0, 4.0, 6.0, 6.0]);
        let m = reduce(ReduceOp::ArgMax, &x, 1).unwrap();
        assert_eq!((m.dtype, m.data), (DType::I64, vec![1.0, 1.0]));
        let m = reduce(ReduceOp::Max, &x, 0).unwrap();
        assert!(m.data[1].is_nan() && m.data[0] == 4.0);
    }

    #[test]
    fn mma_uses_fused_f32_steps() {
        let a = t(DType::F16, &[1, 2], &[1.0, 2.0]);
        let b = t(DType::F16, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let acc = t(DType::F32, &[1, 2], &[0.5, 0.0]);
        assert_eq!(mma(&a, &b, &acc).unwrap().data, vec![7.5, 10.0]);
        assert!(mma(&a, &a, &acc).is_err());
    }

    #[test]
    fn layout_ops_move_values() {
        let x = t(DType::I32, &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let p = permute(&x, &[1, 0]).unwrap();
        assert_eq!(p.dims, vec![3, 2]);
        assert_eq!(p.data, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let r = t(DType::I32, &[1, 3], &[7.0, 8.0, 9.0]);
        let b = broadcast(&r, &[2, 3]).unwrap();
        assert_eq!(b.data, vec![7.0, 8.0, 9.0, 7.0, 8.0, 9.0]);
        assert!(broadcast(&x, &[4, 3]).is_err());
        assert_eq!(
            iota(DType::I64, &[2, 2], 1).unwrap().data,
            vec![0.0, 1.0, 0.0, 1.0]
        );
        assert_eq!(unravel(5, &[2, 3]), vec![1, 2]);
    }
}
