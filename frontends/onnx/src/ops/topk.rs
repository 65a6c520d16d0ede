//! `TopK` as a ranking: each element's rank along the axis is the number of elements that come
//! before it (a better value, or an equal one at a lower index), and output `r` is the element
//! of rank `r`.
//!
//! Takes a numeric tensor, `K` known at import (an attribute before opset 10), `axis`,
//! `largest` and `sorted`, over a static axis of at most [`TOPK_MAX_AXIS`] elements: the ranks
//! compare every pair along the axis (`n^2` comparisons per row, then `k n` to place them).
//! Guarantees: ONNX's reference's order exactly — sorted, ties by lower index, NaN ranked
//! above every number (as NumPy's sort does) — values gathered bit for bit, indices in i64.
//! `sorted = 0` leaves the order open, so the sorted order is returned for it too.

use super::{axis, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// The longest axis ranked: the ranking compares every pair of its elements.
const TOPK_MAX_AXIS: u64 = 4096;

pub(super) fn topk(cx: &mut Cx) -> Res<Vec<Value>> {
    let a = cx.attrs.int("axis", -1)?;
    let largest = cx.opset < 11 || cx.attrs.int("largest", 1)? != 0;
    if cx.opset >= 11 {
        cx.attrs.int("sorted", 1)?;
    }
    let k = if cx.opset < 10 {
        cx.attrs.int("k", -1)?
    } else {
        match cx.ints(1)?[..] {
            [k] => k,
            _ => return Err(invalid("K must hold one value")),
        }
    };
    let x = cx.tensor(0)?;
    if !x.dtype().is_numeric() {
        return Err(unsupported(format!("TopK of {}", x.dtype())));
    }
    let rank = x.rank();
    let a = axis(a, rank)?;
    let Some(n) = x.shape().dims()[a].as_static() else {
        return Err(unsupported("TopK along a symbolic axis"));
    };
    if n > TOPK_MAX_AXIS {
        return Err(unsupported(format!(
            "TopK along an axis of {n} elements (at most {TOPK_MAX_AXIS})"
        )));
    }
    let k = match u64::try_from(k) {
        Ok(0) => {
            let none = x.slice_axis(a, 0, 0)?;
            let index = none.cast(DType::I64)?;
            return Ok(vec![none.into(), index.into()]);
        }
        Ok(k) if k <= n => k,
        _ => return Err(invalid(format!("K = {k} for an axis of {n}"))),
    };
    // The axis moved last (a swap, its own inverse).
    let last = rank - 1;
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(a, last);
    let moved = if a == last { x } else { x.permute(&perm)? };
    let index = of_rank(&ranks(&moved, largest)?, k)?;
    let values = super::shape::take_along(&moved, &index, last)?;
    let back =
        |t: Tensor| -> Res<Value> { Ok(if a == last { t } else { t.permute(&perm)? }.into()) };
    Ok(vec![back(values)?, back(index)?])
}

/// `0, 1, .., n - 1` (i64) laid along axis `at` of a rank-`rank` tensor.
fn iota_along(x: &Tensor, n: u64, at: usize, rank: usize) -> Res<Tensor> {
    let mut dims = vec![1; rank];
    dims[at] = n;
    Ok(x.builder()
        .arange(DType::I64, n)?
        .reshape_to(&Shape::of(&dims))?)
}

/// Whether `p` ranks strictly before `q` by value alone, NaN counting as the largest value.
fn better(p: &Tensor, q: &Tensor, largest: bool) -> Res<Tensor> {
    let by_value = if largest { p.gt(q)? } else { p.lt(q)? };
    if !p.dtype().is_float() {
        return Ok(by_value);
    }
    let (p_nan, q_nan) = (p.ne(p)?, q.ne(q)?);
    let by_nan = if largest {
        p_nan.and(&q_nan.not()?)?
    } else {
        q_nan.and(&p_nan.not()?)?
    };
    Ok(by_value.or(&by_nan)?)
}

/// Whether `p` and `q` are equal values (two NaNs are).
fn same(p: &Tensor, q: &Tensor) -> Res<Tensor> {
    let eq = p.eq(q)?;
    if !p.dtype().is_float() {
        return Ok(eq);
    }
    Ok(eq.or(&p.ne(p)?.and(&q.ne(q)?)?)?)
}

/// Each element's rank along the last axis (i64, a permutation of `0..n` per row).
fn ranks(x: &Tensor, largest: bool) -> Res<Tensor> {
    let rank = x.rank();
    let n = x.shape().dims()[rank - 1].as_static().unwrap_or(1);
    // Dims [.., i, j]: element `i` of the row against element `j`.
    let (xi, xj) = (x.unsqueeze(&[rank])?, x.unsqueeze(&[rank - 1])?);
    let (i, j) = (
        iota_along(x, n, rank - 1, rank + 1)?,
        iota_along(x, n, rank, rank + 1)?,
    );
    let tie_first = same(&xj, &xi)?.and(&j.lt(&i)?)?;
    let before = better(&xj, &xi, largest)?.or(&tie_first)?;
    let b = x.builder();
    let (one, zero) = (b.scalar(DType::I64, 1.0)?, b.scalar(DType::I64, 0.0)?);
    Ok(before.select(&one, &zero)?.sum(&[rank], false)?)
}

/// For each `r < k`, the position along the last axis of the element of rank `r`.
fn of_rank(ranks: &Tensor, k: u64) -> Res<Tensor> {
    let rank = ranks.rank();
    let n = ranks.shape().dims()[rank - 1].as_static().unwrap_or(1);
    // Dims [.., r, i].
    let r = iota_along(ranks, k, rank - 1, rank + 1)?;
    let i = iota_along(ranks, n, rank, rank + 1)?;
    let zero = ranks.builder().scalar(DType::I64, 0.0)?;
    let hit = ranks.unsqueeze(&[rank - 1])?.eq(&r)?;
    Ok(hit.select(&i, &zero)?.sum(&[rank], false)?)
}
