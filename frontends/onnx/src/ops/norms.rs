//! Normalizations over groups of axes: `MeanVarianceNormalization`, `InstanceNormalization`,
//! `GroupNormalization` and `LRN`, each as reductions and elementwise ops.
//!
//! Takes a float tensor `[N, C, D...]` (MVN: any rank and `axes`), with the channel count static
//! where groups or windows are cut from it. Guarantees: ONNX's formulas, statistics computed in
//! f32 for 16-bit floats (GroupNormalization: in `stash_type`) and rounded once; the variance
//! as the mean of squared deviations (ONNX's function bodies use `E[x^2] - E[x]^2`, which
//! differs only by rounding and can go negative); LRN's window sums as `size` shifted slices of
//! the zero-padded squares, so an infinity stays in its own windows.

use super::{axes, cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Dim, Shape, Tensor};

/// `x` as a float tensor of rank at least `min_rank`, and the dtype it is computed in.
fn float_input(cx: &mut Cx, min_rank: usize) -> Res<(Tensor, DType)> {
    let x = cx.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    if x.rank() < min_rank {
        return Err(invalid(format!("{} of rank {}", cx.op(), x.rank())));
    }
    let work = compute_dtype(x.dtype());
    Ok((x, work))
}

/// `(x - mean) * rsqrt(var + eps)` over `list`.
fn standardize(x: &Tensor, list: &[usize], eps: f64) -> Res<Tensor> {
    let centered = x.sub(&x.mean(list, true)?)?;
    let var = centered.mul(&centered)?.mean(list, true)?;
    Ok(centered.mul(&var.add_scalar(eps)?.rsqrt()?)?)
}

/// ONNX's function body: `(x - E[x]) / (sqrt(Var[x]) + 1e-9)` over `axes` (default `[0, 2, 3]`).
pub(super) fn mean_variance(cx: &mut Cx) -> Res<Vec<Value>> {
    let list = cx.attrs.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let (x, work) = float_input(cx, 0)?;
    let list = axes(&list, x.rank())?;
    let w = cast_to(&x, work)?;
    let centered = w.sub(&w.mean(&list, true)?)?;
    let std = centered.mul(&centered)?.mean(&list, true)?.sqrt()?;
    let y = centered.div(&std.add_scalar(1e-9)?)?;
    Ok(vec![cast_to(&y, x.dtype())?.into()])
}

/// `v` (one value per channel, `[C]`) shaped to broadcast against `[N, C, D...]` of `rank`.
fn per_channel(v: &Tensor, rank: usize) -> Res<Tensor> {
    let trailing: Vec<usize> = (1..rank - 1).collect();
    Ok(if trailing.is_empty() {
        v.clone()
    } else {
        v.unsqueeze(&trailing)?
    })
}

pub(super) fn instance_norm(cx: &mut Cx) -> Res<Vec<Value>> {
    let eps = f64::from(cx.attrs.float("epsilon", 1e-5)?);
    let (x, work) = float_input(cx, 3)?;
    let (scale, bias) = (cx.tensor(1)?, cx.tensor(2)?);
    let spatial: Vec<usize> = (2..x.rank()).collect();
    let normalized = standardize(&cast_to(&x, work)?, &spatial, eps)?;
    let rank = x.rank();
    let y = normalized
        .mul(&per_channel(&cast_to(&scale, work)?, rank)?)?
        .add(&per_channel(&cast_to(&bias, work)?, rank)?)?;
    Ok(vec![cast_to(&y, x.dtype())?.into()])
}

/// Statistics per instance and group of `C / num_groups` channels, computed on `x` reshaped to
/// `[N, G, C/G, S]`; scale and bias per channel (opset 21) or per group (opset 18).
pub(super) fn group_norm(cx: &mut Cx) -> Res<Vec<Value>> {
    let eps = f64::from(cx.attrs.float("epsilon", 1e-5)?);
    let groups = cx.attrs.int("num_groups", 0)?;
    let stash = match cx.attrs.int("stash_type", 1)? {
        1 => DType::F32,
        11 => DType::F64,
        other => return Err(unsupported(format!("stash_type {other}"))),
    };
    let (x, _) = float_input(cx, 2)?;
    let stash = if x.dtype() == DType::F64 {
        DType::F64
    } else {
        stash
    };
    let dims = x.shape().into_dims();
    let Some(c) = dims[1].as_static() else {
        return Err(unsupported(
            "GroupNormalization over a symbolic channel count",
        ));
    };
    let g = u64::try_from(groups).ok().filter(|&g| g > 0 && c % g == 0);
    let Some(g) = g else {
        return Err(invalid(format!(
            "num_groups {groups} does not divide {c} channels"
        )));
    };
    let grouped = Shape::new(vec![dims[0].clone(), Dim::Static(g), Dim::Static(c / g)])
        .map_err(|e| unsupported(e.to_string()))?;
    let mut to_groups = grouped.dims().to_vec();
    to_groups.push(Dim::Static(1));
    let xg = x.reshape(&reshape_dims(&to_groups, true))?;
    let normalized = cast_to(
        &standardize(&cast_to(&xg, stash)?, &[2, 3], eps)?,
        x.dtype(),
    )?;
    // Scale and bias as [G, C/G, 1]: per channel, or per group repeated over its channels.
    let per = if cx.opset >= 21 {
        Shape::of(&[g, c / g, 1])
    } else {
        Shape::of(&[g, 1, 1])
    };
    let scale = cx.tensor(1)?.reshape_to(&per)?;
    let bias = cx.tensor(2)?.reshape_to(&per)?;
    let y = normalized.mul(&scale)?.add(&bias)?;
    Ok(vec![y.reshape_to(&x.shape())?.into()])
}

/// Reshape dims with the last one inferred when `infer_last`.
fn reshape_dims(dims: &[Dim], infer_last: bool) -> Vec<tir_graph::ReshapeDim> {
    let mut out: Vec<tir_graph::ReshapeDim> = dims
        .iter()
        .cloned()
        .map(tir_graph::ReshapeDim::Dim)
        .collect();
    if infer_last {
        if let Some(last) = out.last_mut() {
            *last = tir_graph::ReshapeDim::Infer;
        }
    }
    out
}

/// The most shifted slices LRN sums for one window.
const LRN_MAX_WINDOW: u64 = 64;

/// `x / (bias + alpha / size * sum of x^2 over the channel window)^beta`, the window of channel
/// `c` being `c - floor((size-1)/2) ..= c + ceil((size-1)/2)` clipped to the channels.
pub(super) fn lrn(cx: &mut Cx) -> Res<Vec<Value>> {
    let alpha = f64::from(cx.attrs.float("alpha", 1e-4)?);
    let beta = f64::from(cx.attrs.float("beta", 0.75)?);
    let bias = f64::from(cx.attrs.float("bias", 1.0)?);
    let size = cx.attrs.int("size", 0)?;
    let (x, work) = float_input(cx, 3)?;
    let Some(c) = x.shape().dims()[1].as_static() else {
        return Err(unsupported("LRN over a symbolic channel count"));
    };
    let size = u64::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| invalid(format!("LRN size {size}")))?;
    // Offsets past the channel count only add padding: cap them.
    let (lo, hi) = (
        ((size - 1) / 2).min(c.saturating_sub(1)),
        (size / 2).min(c.saturating_sub(1)),
    );
    if lo + hi + 1 > LRN_MAX_WINDOW {
        return Err(unsupported(format!(
            "LRN window of {} channels (at most {LRN_MAX_WINDOW})",
            lo + hi + 1
        )));
    }
    let w = cast_to(&x, work)?;
    let mut pads = vec![(0, 0); x.rank()];
    pads[1] = (lo, hi);
    let padded = w.mul(&w)?.pad(&pads, 0.0)?;
    let mut sum = padded.slice_axis(1, 0, c)?;
    for j in 1..=lo + hi {
        sum = sum.add(&padded.slice_axis(1, j, j + c)?)?;
    }
    let base = sum.mul_scalar(alpha / size as f64)?.add_scalar(bias)?;
    let y = w.div(&base.pow(&w.builder().scalar(work, beta)?)?)?;
    Ok(vec![cast_to(&y, x.dtype())?.into()])
}
