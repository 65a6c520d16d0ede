//! `Det`: the determinant of each matrix of `[..., n, n]`, by cofactor expansion.
//!
//! Takes a float tensor whose last two dims are static and equal, `n` at most [`MAX_ORDER`].
//! Guarantees: `[...]` determinants, computed in the compute dtype (f32 for 16-bit floats) by
//! expanding along the first row, `n!` products of `n` entries; larger matrices would need the
//! pivoting of an LU factorization, which a fixed composite cannot choose well, and are refused.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::Tensor;

/// The largest order expanded (3! = 6 products of 3).
const MAX_ORDER: u64 = 3;

pub(super) fn det(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(unsupported(format!("Det of {dtype}")));
    }
    let r = x.rank();
    let dims = x.shape().into_dims();
    let n = match (r >= 2).then(|| (dims[r - 2].as_static(), dims[r - 1].as_static())) {
        Some((Some(a), Some(b))) if a == b => a,
        Some((Some(_), Some(_))) | None => {
            return Err(invalid(format!("Det of {} (square matrices)", x.ty())))
        }
        Some(_) => return Err(unsupported(format!("Det of {} (symbolic order)", x.ty()))),
    };
    if n == 0 || n > MAX_ORDER {
        return Err(unsupported(format!(
            "Det of {n}x{n} matrices (cofactor expansion up to {MAX_ORDER}x{MAX_ORDER})"
        )));
    }
    let x = cast_to(&x, compute_dtype(dtype))?;
    let mut entries = Vec::with_capacity((n * n) as usize);
    for i in 0..n {
        let row = x.slice_axis(r - 2, i, i + 1)?;
        for j in 0..n {
            entries.push(row.slice_axis(r - 1, j, j + 1)?.squeeze(&[r - 2, r - 1])?);
        }
    }
    let cols: Vec<usize> = (0..n as usize).collect();
    let y = minor(&entries, n as usize, 0, &cols)?;
    Ok(vec![cast_to(&y, dtype)?.into()])
}

/// The determinant of rows `row..n` and columns `cols`, expanded along row `row`.
fn minor(entries: &[Tensor], n: usize, row: usize, cols: &[usize]) -> Res<Tensor> {
    let at = |c: usize| &entries[row * n + c];
    if let [c] = cols {
        return Ok(at(*c).clone());
    }
    let mut acc: Option<Tensor> = None;
    for (k, &c) in cols.iter().enumerate() {
        let rest: Vec<usize> = cols.iter().copied().filter(|&d| d != c).collect();
        let term = at(c).mul(&minor(entries, n, row + 1, &rest)?)?;
        acc = Some(match acc {
            None => term,
            Some(a) if k % 2 == 1 => a.sub(&term)?,
            Some(a) => a.add(&term)?,
        });
    }
    acc.ok_or_else(|| invalid("Det of an empty matrix"))
}
