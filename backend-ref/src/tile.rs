//! Computations on tiles: the value semantics of the tile IR's tile operations.
//!
//! A tile is a [`Tile`] (dtype, static dims, row-major [`Word`]s: floats as `f64`, integers and
//! bool as `i64`). Every function here returns a tile whose values are exact in its dtype:
//! floats are rounded to their precision, integers wrap (computed in the integers, so `i64` is
//! exact over its whole range), bool is 0/1 ("the reference computes in the tensor's dtype").
//! Elementwise ops take the graph's typing rules ([`tir_graph::infer`]) and the oracle's value
//! semantics ([`unary_values`], [`binary_values`] for floats; [`int_unary`], [`int_binary`] and
//! [`reduce_ints`] in `i64` for integers and bool) and round the result; reductions and `mma`
//! accumulate in `f32` like the GPU does (in `f64` for `f64` tiles, in wrapping `i64` for
//! integers).
//!
//! Each operation picks its op and dtype once per tile and then runs one loop over the tile's
//! contiguous values: no per-element dispatch.
//!
//! Errors are one-line reasons (`String`); the interpreter adds the kernel, program and statement.

use crate::word::{int_lane, Tile, Word};
use tir_graph::eval::{
    binary_values, first_extreme, for_each_offset, int_binary, int_unary, maximum, minimum,
    reduce_ints, unary_values,
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

/// A tile of `dtype` and `shape` with every element `value` (a value of `dtype`).
pub fn filled(dtype: DType, shape: &[u64], value: Word) -> Result<Tile, String> {
    let n = tile_numel(shape)?;
    Ok(Tile {
        dtype,
        dims: shape.to_vec(),
        data: vec![value; n],
    })
}

/// A tile whose element `t` is `t[axis]` (stored in `dtype`).
pub fn iota(dtype: DType, shape: &[u64], axis: usize) -> Result<Tile, String> {
    if axis >= shape.len() {
        return Err(format!(
            "axis {axis} is out of range for a tile of rank {}",
            shape.len()
        ));
    }
    let n = tile_numel(shape)?;
    let inner: usize = shape[axis + 1..].iter().map(|&d| d as usize).product();
    let size = shape[axis] as usize;
    Ok(Tile::from_i64s(
        dtype,
        shape,
        (0..n).map(|i| ((i / inner) % size) as i64),
    ))
}

/// Elementwise operands have one shape: broadcasts are explicit in the tile IR.
fn same_dims(xs: &[&Tile]) -> Result<(), String> {
    match xs.iter().find(|x| x.dims != xs[0].dims) {
        None => Ok(()),
        Some(x) => Err(format!(
            "operand shapes differ: {} and {} (broadcasts are explicit in the tile IR)",
            type_name(xs[0].dtype, &xs[0].dims),
            type_name(x.dtype, &x.dims)
        )),
    }
}

/// `op` of each element of `x`: the graph's typing and the oracle's values, rounded to `x`'s
/// dtype (integers exactly, wrapping).
pub fn unary(op: UnaryOp, x: &Tile) -> Result<Tile, String> {
    let dtype = unary_dtype(op, x.dtype)?;
    if !int_lane(dtype) {
        return Ok(Tile::from_f64s(
            dtype,
            &x.dims,
            unary_values(op, dtype, &x.floats()),
        ));
    }
    let f =
        int_unary(op, dtype).ok_or_else(|| format!("{} takes floats, not {dtype}", op.name()))?;
    Ok(Tile::from_i64s(dtype, &x.dims, x.ints().map(f)))
}

/// `a op b` elementwise on tiles of one shape: the graph's typing and the oracle's values,
/// rounded to the result dtype (bool for comparisons; integers exactly, wrapping).
pub fn binary(op: BinaryOp, a: &Tile, b: &Tile) -> Result<Tile, String> {
    same_dims(&[a, b])?;
    let dtype = binary_dtype(op, a.dtype, b.dtype)?;
    if !int_lane(a.dtype) {
        let values = binary_values(op, a.dtype, &a.floats(), &b.floats());
        return Ok(Tile::from_f64s(dtype, &a.dims, values));
    }
    let f = int_binary(op, a.dtype);
    Ok(Tile::from_i64s(
        dtype,
        &a.dims,
        a.ints().zip(b.ints()).map(|(x, y)| f(x, y)),
    ))
}

/// `e^(factor · (x − shift))` of an `f32` tile, `shift` repeated along its size-1 dims,
/// computed in `f64` and rounded once: the exact value that `approx_exp` approaches.
pub fn scaled_exp(x: &Tile, shift: &Tile, factor: f64) -> Result<Tile, String> {
    let shift = broadcast(shift, &x.dims)?.floats();
    let values = x
        .floats()
        .into_iter()
        .zip(shift)
        .map(|(v, s)| (factor * (v - s)).exp());
    Ok(Tile::from_f64s(x.dtype, &x.dims, values))
}

/// `cond ? a : b` elementwise; all three of one shape, `cond` bool, `a` and `b` of one dtype.
pub fn select(cond: &Tile, a: &Tile, b: &Tile) -> Result<Tile, String> {
    same_dims(&[cond, a, b])?;
    let dtype = select_dtype(cond.dtype, a.dtype, b.dtype)?;
    let data = cond
        .ints()
        .zip(a.data.iter().zip(&b.data))
        .map(|(c, (&x, &y))| if c != 0 { x } else { y })
        .collect();
    Ok(Tile {
        dtype,
        dims: a.dims.clone(),
        data,
    })
}

/// `x` converted to `to` ([`Word::cast`]: round to nearest for floats, toward zero and wrapping
/// for integers, `x != 0` for bool).
pub fn cast(x: &Tile, to: DType) -> Tile {
    Tile {
        dtype: to,
        dims: x.dims.clone(),
        data: x.data.iter().map(|w| w.cast(x.dtype, to)).collect(),
    }
}

/// `x` with its size-1 dims repeated to `shape` (same rank).
pub fn broadcast(x: &Tile, shape: &[u64]) -> Result<Tile, String> {
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
    Ok(Tile {
        dtype: x.dtype,
        dims: shape.to_vec(),
        data,
    })
}

/// The same elements in row-major order with another shape.
pub fn reshape(x: &Tile, shape: &[u64]) -> Result<Tile, String> {
    let n = tile_numel(shape)?;
    if n != x.data.len() {
        return Err(format!(
            "cannot reshape {} ({} elements) to {:?} ({n} elements)",
            type_name(x.dtype, &x.dims),
            x.data.len(),
            shape
        ));
    }
    Ok(Tile {
        dtype: x.dtype,
        dims: shape.to_vec(),
        data: x.data.clone(),
    })
}

/// Result dim `i` is dim `perm[i]` of `x`.
pub fn permute(x: &Tile, perm: &[usize]) -> Result<Tile, String> {
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
    Ok(Tile {
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
pub fn reduce(op: ReduceOp, x: &Tile, axis: usize) -> Result<Tile, String> {
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
    let data = if int_lane(x.dtype) {
        let values: Vec<i64> = x.ints().collect();
        lanes.map(&values, |lane| {
            Word::from_i64(dtype, reduce_ints(op, x.dtype, lane))
        })
    } else {
        let values = x.floats();
        let wide = x.dtype == DType::F64;
        lanes.map(&values, |lane| {
            Word::from_f64(dtype, reduce_floats(op, wide, lane))
        })
    };
    let mut dims = x.dims.clone();
    dims[axis] = 1;
    Ok(Tile { dtype, dims, data })
}

/// `op` over one lane of floats, accumulated in `f64` when `wide`, else in `f32`.
fn reduce_floats(op: ReduceOp, wide: bool, lane: &[f64]) -> f64 {
    let len = lane.len();
    match op {
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
            f64::from(if op == ReduceOp::Mean {
                s / len as f32
            } else {
                s
            })
        }
        ReduceOp::Prod => f64::from(lane.iter().fold(1f32, |a, &v| a * v as f32)),
        ReduceOp::Max => lane.iter().copied().fold(lane[0], maximum),
        ReduceOp::Min => lane.iter().copied().fold(lane[0], minimum),
        ReduceOp::ArgMax => first_extreme(lane, |v, best| v > best),
        ReduceOp::ArgMin => first_extreme(lane, |v, best| v < best),
    }
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
    fn map<T: Copy + Default>(&self, data: &[T], f: impl Fn(&[T]) -> Word) -> Vec<Word> {
        if self.outer == 0 || self.inner == 0 {
            return Vec::new();
        }
        if self.inner == 1 {
            return data.chunks_exact(self.len).map(f).collect();
        }
        let mut out = Vec::with_capacity(self.outer * self.inner);
        let mut lane = vec![T::default(); self.len];
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
pub fn mma(a: &Tile, b: &Tile, acc: &Tile) -> Result<Tile, String> {
    let shape = MmaShape::of(a, b, acc)?;
    let data = match acc.dtype {
        DType::F32 => {
            let to_f32 =
                |t: &Tile| -> Vec<f32> { t.data.iter().map(|w| w.as_float() as f32).collect() };
            let (af, bf, mut cf) = (to_f32(a), to_f32(b), to_f32(acc));
            shape.each_batch(&af, &bf, &mut cf, |mnk, a, b, c| {
                gemm(matrixmultiply::sgemm, 1.0, mnk, a, b, c)
            });
            cf.into_iter().map(|v| Word::float(f64::from(v))).collect()
        }
        DType::F64 => {
            let mut c = acc.floats();
            shape.each_batch(&a.floats(), &b.floats(), &mut c, |mnk, a, b, c| {
                gemm(matrixmultiply::dgemm, 1.0, mnk, a, b, c)
            });
            c.into_iter().map(Word::float).collect()
        }
        d if d.is_int() => {
            let ints = |t: &Tile| -> Vec<i64> { t.ints().collect() };
            let mut c = ints(acc);
            shape.each_batch(&ints(a), &ints(b), &mut c, gemm_wrapping);
            return Ok(Tile::from_i64s(d, &acc.dims, c));
        }
        d => {
            return Err(format!(
                "mma accumulates in f32, f64 or an integer dtype, not {d}: {}",
                mma_operands(a, b, acc)
            ))
        }
    };
    Ok(Tile {
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
    fn of(a: &Tile, b: &Tile, acc: &Tile) -> Result<MmaShape, String> {
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

fn mma_operands(a: &Tile, b: &Tile, acc: &Tile) -> String {
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

/// `c += a @ b` on row-major blocks of integer values: wrapping `i64` sums in order of `k` (the
/// caller wraps them to the accumulator's dtype).
fn gemm_wrapping((m, k, n): Mnk, a: &[i64], b: &[i64], c: &mut [i64]) {
    for i in 0..m {
        for (j, o) in c[i * n..(i + 1) * n].iter_mut().enumerate() {
            *o = (0..k).fold(*o, |s, p| {
                s.wrapping_add(a[i * k + p].wrapping_mul(b[p * n + j]))
            });
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

    fn t(dtype: DType, dims: &[u64], data: &[f64]) -> Tile {
        Tile::from_f64s(dtype, dims, data.iter().copied())
    }

    #[test]
    fn elementwise_rounds_to_the_dtype() {
        let x = t(DType::F16, &[2], &[1.0, 2.0]);
        let y = unary(UnaryOp::Exp, &x).unwrap();
        assert_eq!(y.floats()[0], DType::F16.round_value(1f64.exp()));
        let i = t(DType::I8, &[1], &[100.0]);
        let s = binary(BinaryOp::Add, &i, &i).unwrap();
        assert_eq!(s.floats(), vec![-56.0]);
        let c = binary(BinaryOp::Lt, &x, &x).unwrap();
        assert_eq!((c.dtype, c.floats()), (DType::Bool, vec![0.0, 0.0]));
        let j = t(DType::I8, &[2], &[1.0, 2.0]);
        assert!(binary(BinaryOp::Lt, &x, &j).is_err(), "dtypes differ");
        assert!(binary(BinaryOp::Add, &x, &i).is_err(), "shapes differ");
        assert!(unary(UnaryOp::Exp, &i).is_err(), "exp takes floats");
        let b = t(DType::Bool, &[2], &[1.0, 0.0]);
        assert_eq!(select(&b, &x, &x.clone()).unwrap().floats(), vec![1.0, 2.0]);
        assert!(select(&x, &x, &x).is_err(), "the condition is bool");
    }

    #[test]
    fn reduce_accumulates_in_f32_and_keeps_the_axis() {
        // 2049 ones in f16: an f16 accumulator would stall at 2048; f32 gives 2049 → f16 2048.
        let x = t(DType::F16, &[1, 2049], &[1.0; 2049]);
        let s = reduce(ReduceOp::Sum, &x, 1).unwrap();
        assert_eq!(s.dims, vec![1, 1]);
        assert_eq!(s.floats(), vec![DType::F16.round_value(2049.0)]);
        let x = t(DType::F32, &[2, 3], &[1.0, f64::NAN, 3.0, 4.0, 6.0, 6.0]);
        let m = reduce(ReduceOp::ArgMax, &x, 1).unwrap();
        assert_eq!((m.dtype, m.floats()), (DType::I64, vec![1.0, 1.0]));
        let m = reduce(ReduceOp::Max, &x, 0).unwrap();
        assert!(m.floats()[1].is_nan() && m.floats()[0] == 4.0);
    }

    #[test]
    fn mma_adds_the_f32_product_to_the_accumulator() {
        let a = t(DType::F16, &[1, 2], &[1.0, 2.0]);
        let b = t(DType::F16, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let acc = t(DType::F32, &[1, 2], &[0.5, 0.0]);
        assert_eq!(mma(&a, &b, &acc).unwrap().floats(), vec![7.5, 10.0]);
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
            let (got, a, b, acc) = (got.floats(), a.floats(), b.floats(), acc.floats());
            for bt in 0..batches {
                for i in 0..m {
                    for j in 0..n {
                        let o = (bt * m + i) * n + j;
                        let want = (0..k).fold(acc[o], |s, p| {
                            s + a[(bt * m + i) * k + p] * b[(bt * k + p) * n + j]
                        });
                        let diff = (got[o] - want).abs();
                        assert!(
                            diff <= tolerance * want.abs().max(1.0),
                            "{accumulator}: {} vs {want}",
                            got[o]
                        );
                    }
                }
            }
        }
    }

    /// `i64` stays exact over its whole range: arithmetic wraps in the integers, casts from
    /// floats truncate and wrap through `i128`, reductions and `mma` accumulate in `i64`.
    #[test]
    fn i64_is_exact_past_2_pow_53() {
        let ints = |v: &[i64]| Tile::from_i64s(DType::I64, &[v.len() as u64], v.iter().copied());
        let big = ints(&[i64::MAX - 1, (1 << 53) + 1, i64::MIN]);
        let one = ints(&[1, 1, -1]);
        let got = |t: Tile| t.ints().collect::<Vec<_>>();
        assert_eq!(
            got(binary(BinaryOp::Add, &big, &one).unwrap()),
            vec![i64::MAX, (1 << 53) + 2, i64::MAX]
        );
        assert_eq!(
            got(binary(BinaryOp::Mul, &big, &one).unwrap()),
            vec![i64::MAX - 1, (1 << 53) + 1, i64::MIN]
        );
        assert_eq!(
            got(binary(BinaryOp::Lt, &one, &big).unwrap()),
            vec![1, 1, 0]
        );
        assert_eq!(
            got(unary(UnaryOp::Neg, &big).unwrap()),
            vec![i64::MIN + 2, -(1 << 53) - 1, i64::MIN]
        );
        let floats = t(
            DType::F64,
            &[3],
            &[2f64.powi(63), -2f64.powi(63), 2f64.powi(60) + 2048.0],
        );
        assert_eq!(
            got(cast(&floats, DType::I64)),
            vec![i64::MIN, i64::MIN, (1 << 60) + 2048]
        );
        let rows = Tile::from_i64s(DType::I64, &[1, 2], [i64::MAX - 5, 7]);
        assert_eq!(
            got(reduce(ReduceOp::Sum, &rows, 1).unwrap()),
            vec![i64::MIN + 1]
        );
        assert_eq!(got(reduce(ReduceOp::ArgMax, &rows, 1).unwrap()), vec![0]);
        let a = Tile::from_i64s(DType::I64, &[1, 1], [(1 << 53) + 1]);
        let acc = Tile::from_i64s(DType::I64, &[1, 1], [1]);
        assert_eq!(
            got(mma(&a, &a.clone(), &acc).unwrap()),
            vec![((1i64 << 53) + 1).wrapping_mul((1 << 53) + 1) + 1]
        );
    }

    #[test]
    fn layout_ops_move_values() {
        let x = t(DType::I32, &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let p = permute(&x, &[1, 0]).unwrap();
        assert_eq!(p.dims, vec![3, 2]);
        assert_eq!(p.floats(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let r = t(DType::I32, &[1, 3], &[7.0, 8.0, 9.0]);
        let b = broadcast(&r, &[2, 3]).unwrap();
        assert_eq!(b.floats(), vec![7.0, 8.0, 9.0, 7.0, 8.0, 9.0]);
        assert!(broadcast(&x, &[4, 3]).is_err());
        assert_eq!(
            iota(DType::I64, &[2, 2], 1).unwrap().floats(),
            vec![0.0, 1.0, 0.0, 1.0]
        );
        assert_eq!(unravel(5, &[2, 3]), vec![1, 2]);
    }
}
