//! `MaxUnpool`: each value of `X` written at its flat index into a zero tensor of the shape the
//! pooling inverts, then padded with zeros at the ends to `output_shape` if given.
//!
//! Takes `X` and int `I` of one static shape `[N, C, S...]`, `kernel_shape`, `pads`, `strides`,
//! and an `output_shape` known at import. Guarantees: ONNX's reference exactly, where a later
//! element of `X` wins an index two share and a negative index counts from the end of the flat
//! tensor; an index still out of range writes nothing (the reference raises). The write is the
//! output-side scatter of [`super::scatter`]: `numel(Y) · numel(X)` compares, refused above its
//! limit.

use super::scatter::{scatter_rows, Reduction};
use super::{Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape};

pub(super) fn max_unpool(cx: &mut Cx) -> Res<Vec<Value>> {
    let kernel = cx
        .attrs
        .ints("kernel_shape")?
        .ok_or_else(|| invalid("kernel_shape is required"))?;
    let n = kernel.len();
    let pads = cx.attrs.ints("pads")?.unwrap_or(vec![0; 2 * n]);
    let strides = cx.attrs.ints("strides")?.unwrap_or(vec![1; n]);
    let output_shape = cx.opt_ints(2)?;
    let (x, index) = (cx.tensor(0)?, cx.tensor(1)?);
    let dims = x
        .shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("MaxUnpool of symbolic shape {}", x.ty())))?;
    if dims.len() != n + 2 || pads.len() != 2 * n || strides.len() != n {
        return Err(invalid(format!(
            "MaxUnpool of {} with kernel {kernel:?}, pads {pads:?}, strides {strides:?}",
            x.ty()
        )));
    }
    if index.shape() != x.shape() || !index.dtype().is_int() {
        return Err(invalid(format!("indices {} for X {}", index.ty(), x.ty())));
    }
    let mut inferred = dims[..2].to_vec();
    for i in 0..n {
        let d = (dims[i + 2] as i64 - 1) * strides[i] - (pads[i] + pads[i + n]) + kernel[i];
        inferred.push(u64::try_from(d).map_err(|_| invalid(format!("output dim {d}")))?);
    }
    let total: u64 = inferred.iter().product();
    let k: u64 = dims.iter().product();
    let b = x.builder();
    let idx = index.cast(DType::I64)?.reshape_to(&Shape::of(&[1, k]))?;
    let idx = idx
        .lt(&b.scalar(DType::I64, 0.0)?)?
        .select(&idx.add_scalar(total as f64)?, &idx)?;
    let zeros = b
        .scalar(x.dtype(), 0.0)?
        .broadcast_to(&Shape::of(&[1, total, 1]))?;
    let updates = x.reshape_to(&Shape::of(&[1, k, 1]))?;
    let y =
        scatter_rows(&zeros, &idx, &updates, Reduction::None)?.reshape_to(&Shape::of(&inferred))?;
    let Some(shape) = output_shape else {
        return Ok(vec![y.into()]);
    };
    let grow: Option<Vec<(u64, u64)>> = (shape.len() == inferred.len())
        .then(|| {
            shape
                .iter()
                .zip(&inferred)
                .map(|(&s, &d)| {
                    u64::try_from(s)
                        .ok()
                        .and_then(|s| s.checked_sub(d))
                        .map(|e| (0, e))
                })
                .collect()
        })
        .flatten();
    let grow = grow.ok_or_else(|| {
        invalid(format!(
            "output_shape {shape:?} (at least the inferred {inferred:?} on every axis)"
        ))
    })?;
    Ok(vec![y.pad(&grow, 0.0)?.into()])
}
