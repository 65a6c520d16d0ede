//! Computations on tiles: the value semantics of the tile IR's tile operations.
//!
//! A tile is a [`F64Tensor`] (dtype, static dims, row-major `f64` values). Every function here
//! returns a tile whose values are exact in its dtype: floats are rounded to their precision,
//! integers wrap, bool is 0/1 ("the reference computes in the tensor's dtype"). Elementwise ops
//! take the graph's typing rules ([`tir_graph::infer`]) and the oracle's value semantics
//! ([`unary_values`], [`binary_values`]) and round the result; reductions and `mma` accumulate
//! in `f32` like the GPU does (in `f64` for `f64` tiles).
//!
//! Each operation picks its op and dtype once per tile and then runs one loop over the tile's
//! contiguous values: no per-element dispatch.
//!
//! Errors are one-line reasons (`String`); the interpreter adds the kernel, program and statement.

use tir_graph::eval::{
    binary_values, first_extreme, for_each_offset, maximum, minimum, unary_values, wrap, F64Tensor,
};
use tir_graph::infer::{binary_dtype, select_dtype, unary_dtype};
use tir_graph::{BinaryOp, DType, ReduceOp, UnaryOp};
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

/// Elementwise operands have one shape: broadcasts are explicit in the tile IR.
fn same_dims(xs: &[&F64Tensor]) -> Result<(), String> {
    match xs.iter().find(|x| x.dims != xs[0].dims) {
        None => Ok(()),
        Some(x) => Err(format!(
            "operand shapes differ: {} and {} (broadcasts are explicit in the tile IR)",
            type_name(xs[0].dtype, &xs[0].dims),
            type_name(x.dtype, &x.dims)
        )),
    }
}

/// A tile of `dtype` and `dims` holding `data` rounded to `dtype`.
fn rounded(dtype: DType, dims: &[u64], mut data: Vec<f64>) -> F64Tensor {
    dtype.round_values(&mut data);
    F64Tensor {
        dtype,
        dims: dims.to_vec(),
        data,
    }
}

/// `op` of each element of `x`: the graph's typing and the oracle's values, rounded to `x`'s
/// dtype.
pub fn unary(op: UnaryOp, x: &F64Tensor) -> Result<F64Tensor, String> {
    let dtype = unary_dtype(op, x.dtype)?;
    Ok(rounded(dtype, &x.dims, unary_values(op, dtype, &x.data)))
}

/// `a op b` elementwise on tiles of one shape: the graph's typing and the oracle's values,
/// rounded to the result dtype (bool for comparisons).
pub fn binary(op: BinaryOp, a: &F64Tensor, b: &F64Tensor) -> Result<F64Tensor, String> {
    same_dims(&[a, b])?;
    let dtype = binary_dtype(op, a.dtype, b.dtype)?;
    Ok(rounded(
        dtype,
        &a.dims,
        binary_values(op, a.dtype, &a.data, &b.data),
    ))
}

/// `e^(factor · (x − shift))` of an `f32` tile, `shift` repeated along its size-1 dims,
/// computed in `f64` and rounded once: the exact value that `approx_exp` approaches.
pub fn scaled_exp(x: &F64Tensor, shift: &F64Tensor, factor: f64) -> Result<F64Tensor, String> {
    let shift = broadcast(shift, &x.dims)?;
    let data = x
        .data
        .iter()
        .zip(&shift.data)
        .map(|(&v, &s)| (factor * (v - s)).exp())
        .collect();
    Ok(rounded(x.dtype, &x.dims, data))
}

/// `cond ? a : b` elementwise; all three of one shape, `cond` bool, `a` and `b` of one dtype.
pub fn select(cond: &F64Tensor, a: &F64Tensor, b: &F64Tensor) -> Result<F64Tensor, String> {
    same_dims(&[cond, a, b])?;
    let dtype = select_dtype(cond.dtype, a.dtype, b.dtype)?;
    let data = cond
        .data
        .iter()
        .zip(a.data.iter().zip(&b.data))
        .map(|(&c, (&x, &y))| if c != 0.0 { x } else { y })
        .collect();
    Ok(F64Tensor {
        dtype,
        dims: a.dims.clone(),
        data,
    })
}

/// `x` converted to `to` ([`DType::round_value`]: round to nearest for floats, toward zero and
/// wrapping for integers, `x != 0` for bool).
pub fn cast(x: &F64Tensor, to: DType) -> F64Tensor {
    rounded(to, &x.dims, x.data.clone())
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
    let lanes = Lanes {
        outer: x.dims[..axis].iter().map(|&d| d as usize).product(),
        len,
        inner: x.dims[axis + 1..].iter().map(|&d| d as usize).product(),
    };
    let dtype = match op {
        ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
        _ => x.dtype,
    };
    let (int, wide) = (
        x.dtype.is_int() || x.dtype == DType::Bool,
        x.dtype == DType::F64,
    );
    let mean = op == ReduceOp::Mean;
    let data = match op {
        ReduceOp::Sum | ReduceOp::Mean if int => lanes.map(&x.data, |lane| {
            let s = lane.iter().fold(0i64, |a, &v| a.wrapping_add(v as i64));
            wrap(dtype, if mean { s.wrapping_div(len as i64) } else { s })
        }),
        ReduceOp::Prod if int => lanes.map(&x.data, |lane| {
            wrap(
                dtype,
                lane.iter().fold(1i64, |a, &v| a.wrapping_mul(v as i64)),
            )
        }),
        ReduceOp::Sum | ReduceOp::Mean if wide => lanes.map(&x.data, |lane| {
            let s: f64 = lane.iter().sum();
            if mean {
                s / len as f64
            } else {
                s
            }
        }),
        ReduceOp::Prod if wide => lanes.map(&x.data, |lane| lane.iter().product()),
        ReduceOp::Sum | ReduceOp::Mean => lanes.map(&x.data, |lane| {
            let s = lane.iter().fold(0f32, |a, &v| a + v as f32);
            f64::from(if mean { s / len as f32 } else { s })
        }),
        ReduceOp::Prod => lanes.map(&x.data, |lane| {
            f64::from(lane.iter().fold(1f32, |a, &v| a * v as f32))
        }),
        ReduceOp::Max => lanes.map(&x.data, |lane| lane.iter().copied().fold(lane[0], maximum)),
        ReduceOp::Min => lanes.map(&x.data, |lane| lane.iter().copied().fold(lane[0], minimum)),
        ReduceOp::ArgMax => lanes.map(&x.data, |lane| first_extreme(lane, |v, best| v > best)),
        ReduceOp::ArgMin => lanes.map(&x.data, |lane| first_extreme(lane, |v, best| v < best)),
    };
    let mut dims = x.dims.clone();
    dims[axis] = 1;
    Ok(rounded(dtype, &dims, data))
}

/// The lanes of a tile along one axis: `outer` groups of `inner` lanes of `len` (> 0) elements;
/// lane `(o, i)` holds elements `(o * len + r) * inner + i`, `r` in `0..len`.
struct Lanes {
    outer: usize,
    len: usize,
    inner: usize,
}

impl Lanes {
    /// `f` of each lane's values (in order along the axis), lanes in row-major order.
    fn map(&self, data: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
        if self.outer == 0 || self.inner == 0 {
            return Vec::new();
        }
        if self.inner == 1 {
            return data.chunks_exact(self.len).map(f).collect();
        }
        let mut out = Vec::with_capacity(self.outer * self.inner);
        let mut lane = vec![0.0; self.len];
        for block in data.chunks_exact(self.len * self.inner) {
            for i in 0..self.inner {
                for (r, v) in lane.iter_mut().enumerate() {
                    *v = block[r * self.inner + i];
                }
                out.push(f(&lane));
            }
        }
        out
    }
}

/// `acc + a @ b` over the last two dims (`a: [.., m, k]`, `b: [.., k, n]`, `acc: [.., m, n]`,
/// equal leading dims), by [`matrixmultiply`] for float accumulators.
///
/// With an `f32` accumulator, `a` and `b` are converted to `f32` (exact for `f16`, `bf16` and
/// `f32` tiles) and the products are summed in `f32`: each `[m, n]` block is `sgemm`'s
/// `1 * a @ b + 1 * acc`, so the `k` products of an element are summed from zero in the
/// kernel's order and added to `acc` once (with fused multiply-adds where the CPU has them).
/// With an `f64` accumulator the same in `f64` (`dgemm`). With an integer accumulator, wrapping
/// `i64` arithmetic in order of `k`, wrapped to the dtype at the end.
pub fn mma(a: &F64Tensor, b: &F64Tensor, acc: &F64Tensor) -> Result<F64Tensor, String> {
    let shape = MmaShape::of(a, b, acc)?;
    let data = match acc.dtype {
        DType::F32 => {
            let af: Vec<f32> = a.data.iter().map(|&v| v as f32).collect();
            let bf: Vec<f32> = b.data.iter().map(|&v| v as f32).collect();
            let mut cf: Vec<f32> = acc.data.iter().map(|&v| v as f32).collect();
            shape.each_batch(&af, &bf, &mut cf, |mnk, a, b, c| {
                gemm(matrixmultiply::sgemm, 1.0, mnk, a, b, c)
            });
            cf.into_iter().map(f64::from).collect()
        }
        DType::F64 => {
            let mut c = acc.data.clone();
            shape.each_batch(&a.data, &b.data, &mut c, |mnk, a, b, c| {
                gemm(matrixmultiply::dgemm, 1.0, mnk, a, b, c)
            });
            c
        }
        d if d.is_int() => {
            let mut c = acc.data.clone();
            shape.each_batch(&a.data, &b.data, &mut c, |mnk, a, b, c| {
                gemm_wrapping(d, mnk, a, b, c)
            });
            c
        }
        d => {
            return Err(format!(
                "mma accumulates in f32, f64 or an integer dtype, not {d}: {}",
                mma_operands(a, b, acc)
            ))
        }
    };
    Ok(F64Tensor {
        dtype: acc.dtype,
        dims: acc.dims.clone(),
        data,
    })
}

/// The sizes of an `mma`: `batches` products of `[m, k] @ [k, n]`.
struct MmaShape {
    batches: usize,
    m: usize,
    k: usize,
    n: usize,
}

impl MmaShape {
    /// The sizes of `acc + a @ b`, or why the operands do not fit.
    fn of(a: &F64Tensor, b: &F64Tensor, acc: &F64Tensor) -> Result<MmaShape, String> {
        let rank = acc.dims.len();
        if rank < 2 || a.dims.len() != rank || b.dims.len() != rank {
            return Err(format!(
                "mma needs operands of one rank of at least 2: {}",
                mma_operands(a, b, acc)
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
                mma_operands(a, b, acc)
            ));
        }
        if a.dtype != b.dtype {
            return Err(format!(
                "mma operands differ in dtype: {}",
                mma_operands(a, b, acc)
            ));
        }
        Ok(MmaShape {
            batches: batch.iter().map(|&d| d as usize).product(),
            m: m as usize,
            k: k as usize,
            n: n as usize,
        })
    }

    /// Calls `gemm((m, k, n), a, b, c)` on each batch's row-major blocks.
    fn each_batch<T>(
        &self,
        a: &[T],
        b: &[T],
        c: &mut [T],
        mut gemm: impl FnMut(Mnk, &[T], &[T], &mut [T]),
    ) {
        let (m, k, n) = (self.m, self.k, self.n);
        if m == 0 || n == 0 {
            return;
        }
        for bt in 0..self.batches {
            gemm(
                (m, k, n),
                &a[bt * m * k..(bt + 1) * m * k],
                &b[bt * k * n..(bt + 1) * k * n],
                &mut c[bt * m * n..(bt + 1) * m * n],
            );
        }
    }
}

/// The sizes `(m, k, n)` of one `[m, k] @ [k, n]` product.
type Mnk = (usize, usize, usize);

fn mma_operands(a: &F64Tensor, b: &F64Tensor, acc: &F64Tensor) -> String {
    format!(
        "a {}, b {}, acc {}",
        type_name(a.dtype, &a.dims),
        type_name(b.dtype, &b.dims),
        type_name(acc.dtype, &acc.dims)
    )
}

/// A [`matrixmultiply`] routine: `c = alpha * a @ b + beta * c` on strided matrices.
type GemmFn<T> = unsafe fn(
    usize,
    usize,
    usize,
    T,
    *const T,
    isize,
    isize,
    *const T,
    isize,
    isize,
    T,
    *mut T,
    isize,
    isize,
);

/// `c += a @ b` on row-major `[m, k]`, `[k, n]` and `[m, n]` blocks through `routine` (`sgemm`
/// or `dgemm`), `one` being 1 in its type.
fn gemm<T: Copy>(routine: GemmFn<T>, one: T, (m, k, n): Mnk, a: &[T], b: &[T], c: &mut [T]) {
    assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n);
    let (k_, n_) = (k as isize, n as isize);
    // SAFETY: the asserted lengths hold the row-major blocks the strides describe, and `c`
    // (exclusively borrowed) overlaps neither `a` nor `b`.
    unsafe {
        routine(
            m,
            k,
            n,
            one,
            a.as_ptr(),
            k_,
            1,
            b.as_ptr(),
            n_,
            1,
            one,
            c.as_mut_ptr(),
            n_,
            1,
        )
    }
}

/// `c += a @ b` on row-major blocks of integer values: wrapping `i64` sums in order of `k`,
/// wrapped to `dtype`.
fn gemm_wrapping(dtype: DType, (m, k, n): Mnk, a: &[f64], b: &[f64], c: &mut [f64]) {
    for i in 0..m {
        for (j, o) in c[i * n..(i + 1) * n].iter_mut().enumerate() {
            let s = (0..k).fold(*o as i64, |s, p| {
                s.wrapping_add((a[i * k + p] as i64).wrapping_mul(b[p * n + j] as i64))
            });
            *o = dtype.round_value(s as f64);
        }
    }
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
        let y = unary(UnaryOp::Exp, &x).unwrap();
        assert_eq!(y.data[0], DType::F16.round_value(1f64.exp()));
        let i = t(DType::I8, &[1], &[100.0]);
        let s = binary(BinaryOp::Add, &i, &i).unwrap();
        assert_eq!(s.data, vec![-56.0]);
        let c = binary(BinaryOp::Lt, &x, &x).unwrap();
        assert_eq!((c.dtype, c.data), (DType::Bool, vec![0.0, 0.0]));
        let j = t(DType::I8, &[2], &[1.0, 2.0]);
        assert!(binary(BinaryOp::Lt, &x, &j).is_err(), "dtypes differ");
        assert!(binary(BinaryOp::Add, &x, &i).is_err(), "shapes differ");
        assert!(unary(UnaryOp::Exp, &i).is_err(), "exp takes floats");
        let b = t(DType::Bool, &[2], &[1.0, 0.0]);
        assert_eq!(select(&b, &x, &x.clone()).unwrap().data, vec![1.0, 2.0]);
        assert!(select(&x, &x, &x).is_err(), "the condition is bool");
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
    fn mma_adds_the_f32_product_to_the_accumulator() {
        let a = t(DType::F16, &[1, 2], &[1.0, 2.0]);
        let b = t(DType::F16, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let acc = t(DType::F32, &[1, 2], &[0.5, 0.0]);
        assert_eq!(mma(&a, &b, &acc).unwrap().data, vec![7.5, 10.0]);
        assert!(mma(&a, &a, &acc).is_err());
    }

    /// Batched products of every accumulator kind against a plain loop: integers exactly,
    /// floats within their accumulation's rounding.
    #[test]
    fn mma_matches_a_loop_for_every_accumulator() {
        let (batches, m, k, n) = (2usize, 3usize, 40usize, 5usize);
        let value = |i: usize| ((i * 7919) % 23) as f64 - 11.0;
        for (operand, accumulator, tolerance) in [
            (DType::BF16, DType::F32, 1e-4),
            (DType::F64, DType::F64, 1e-12),
            (DType::I8, DType::I64, 0.0),
        ] {
            let dims = |r: usize, c: usize| vec![batches as u64, r as u64, c as u64];
            let a = t(
                operand,
                &dims(m, k),
                &(0..batches * m * k).map(value).collect::<Vec<_>>(),
            );
            let b = t(
                operand,
                &dims(k, n),
                &(0..batches * k * n)
                    .map(|i| value(i + 5))
                    .collect::<Vec<_>>(),
            );
            let scale = if accumulator.is_int() { 1.0 } else { 0.25 };
            let acc = t(
                accumulator,
                &dims(m, n),
                &(0..batches * m * n)
                    .map(|i| value(i + 9) * scale)
                    .collect::<Vec<_>>(),
            );
            let got = mma(&a, &b, &acc).unwrap();
            assert_eq!((got.dtype, &got.dims), (accumulator, &acc.dims));
            for bt in 0..batches {
                for i in 0..m {
                    for j in 0..n {
                        let o = (bt * m + i) * n + j;
                        let want = (0..k).fold(acc.data[o], |s, p| {
                            s + a.data[(bt * m + i) * k + p] * b.data[(bt * k + p) * n + j]
                        });
                        let diff = (got.data[o] - want).abs();
                        assert!(
                            diff <= tolerance * want.abs().max(1.0),
                            "{accumulator}: {} vs {want}",
                            got.data[o]
                        );
                    }
                }
            }
        }
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
