//! `RoiAlign` (opsets 10, 16, 22) with a fixed `sampling_ratio`: each output bin the average
//! (or ONNX's max) of `ratio × ratio` bilinear samples of its region of interest.
//!
//! Takes `X: [N, C, H, W]` (H, W static), float `rois: [R, 4]` (`x1, y1, x2, y2`) and int
//! `batch_indices: [R]`. Guarantees: the reference's sample points (computed in the compute dtype,
//! in its order of operations), its clamping at the border and its zero weight for a sample
//! more than one pixel outside; `max` is its max over samples of the largest of the four
//! weighted corners. The sample positions depend on the run-time rois, so they are computed as
//! tensors: per axis `[R, out · ratio]` corners and weights, then one gather of the four corners
//! from `X` as `[N·H·W, C]`. `sampling_ratio = 0` (a grid sized by each roi at run time) is
//! refused.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// One axis's samples: the two neighbouring pixels of each and their weights, `[R, S]`.
struct Samples {
    low: Tensor,
    high: Tensor,
    w_low: Tensor,
    w_high: Tensor,
}

pub(super) fn roi_align(cx: &mut Cx) -> Res<Vec<Value>> {
    let half_pixel = if cx.opset >= 16 {
        match cx
            .attrs
            .string("coordinate_transformation_mode", "half_pixel")?
            .as_str()
        {
            "half_pixel" => true,
            "output_half_pixel" => false,
            other => return Err(invalid(format!("coordinate_transformation_mode `{other}`"))),
        }
    } else {
        false
    };
    let max = match cx.attrs.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(invalid(format!("mode `{other}`"))),
    };
    let out_h = positive(cx.attrs.int("output_height", 1)?, "output_height")?;
    let out_w = positive(cx.attrs.int("output_width", 1)?, "output_width")?;
    let ratio = match cx.attrs.int("sampling_ratio", 0)? {
        0 => {
            return Err(unsupported(
                "RoiAlign with sampling_ratio 0 (a grid sized at run time)",
            ))
        }
        r => positive(r, "sampling_ratio")?,
    };
    let scale = f64::from(cx.attrs.float("spatial_scale", 1.0)?);
    let (x, rois, batch) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    let dtype = x.dtype();
    let dims = x.shape().static_dims().filter(|d| d.len() == 4);
    let Some(&[_, c, h, w]) = dims.as_deref() else {
        return Err(unsupported(format!(
            "RoiAlign of {} (static [N, C, H, W])",
            x.ty()
        )));
    };
    if !dtype.is_float() || rois.dtype() != dtype || !batch.dtype().is_int() || rois.rank() != 2 {
        return Err(unsupported(format!(
            "RoiAlign of X {}, rois {}, batch_indices {}",
            x.ty(),
            rois.ty(),
            batch.ty()
        )));
    }
    let work = compute_dtype(dtype);
    let rois = cast_to(&rois, work)?.mul_scalar(scale)?;
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let coord = |i: u64| -> Res<Tensor> { Ok(rois.slice_axis(1, i, i + 1)?.add_scalar(-offset)?) };
    let [x1, y1, x2, y2] = [coord(0)?, coord(1)?, coord(2)?, coord(3)?];
    let extent = |a: &Tensor, b: &Tensor| -> Res<Tensor> {
        let len = b.sub(a)?;
        // Without the half-pixel shift a roi is at least one pixel wide.
        Ok(if half_pixel {
            len
        } else {
            len.maximum(&len.builder().scalar(work, 1.0)?)?
        })
    };
    let ys = samples(&y1, &extent(&y1, &y2)?, out_h, ratio, h)?;
    let xs = samples(&x1, &extent(&x1, &x2)?, out_w, ratio, w)?;
    // X as rows of channels, `[N·H·W, C]`, and each roi's first row.
    let table = cast_to(&x, work)?.permute(&[0, 2, 3, 1])?.reshape(&[
        tir_graph::ReshapeDim::Infer,
        tir_graph::ReshapeDim::Dim(tir_graph::Dim::Static(c)),
    ])?;
    let base = batch
        .cast(DType::I64)?
        .mul_scalar((h * w) as f64)?
        .reshape_to(&Shape::of(&[batch_len(&batch)?, 1, 1]))?;
    let mut corners = Vec::with_capacity(4);
    for (py, wy) in [(&ys.low, &ys.w_low), (&ys.high, &ys.w_high)] {
        for (px, wx) in [(&xs.low, &xs.w_low), (&xs.high, &xs.w_high)] {
            let weight = wy.unsqueeze(&[2])?.mul(&wx.unsqueeze(&[1])?)?;
            let pos = base
                .add(&py.mul_scalar(w as f64)?.unsqueeze(&[2])?)?
                .add(&px.unsqueeze(&[1])?)?;
            corners.push(weight.unsqueeze(&[3])?.mul(&table.gather(&pos, 0)?)?);
        }
    }
    let y = pool(&corners, max, [out_h, ratio, out_w, ratio, c])?;
    Ok(vec![cast_to(&y.permute(&[0, 3, 1, 2])?, dtype)?.into()])
}

fn positive(v: i64, what: &str) -> Res<u64> {
    u64::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| invalid(format!("{what} {v} (positive)")))
}

fn batch_len(batch: &Tensor) -> Res<u64> {
    match batch.shape().static_dims().as_deref() {
        Some(&[r]) => Ok(r),
        _ => Err(unsupported(format!(
            "batch_indices {} (static [R])",
            batch.ty()
        ))),
    }
}

/// The samples of one axis of `size` pixels: bin `p`'s sample `i` at
/// `start + p·bin + (i + 0.5)·bin / ratio`, `bin = len / out` (`start`, `len`: `[R, 1]`).
fn samples(start: &Tensor, len: &Tensor, out: u64, ratio: u64, size: u64) -> Res<Samples> {
    let b = start.builder();
    let d = start.dtype();
    let n = out * ratio;
    let bin = len.div(&b.scalar(d, out as f64)?)?;
    let which: Vec<f64> = (0..n).map(|k| (k / ratio) as f64).collect();
    let within: Vec<f64> = (0..n).map(|k| (k % ratio) as f64 + 0.5).collect();
    let row = |v: &[f64]| b.constant(d, Shape::of(&[1, n]), v);
    let pos = start
        .add(&row(&which)?.mul(&bin)?)?
        .add(&row(&within)?.mul(&bin)?.div(&b.scalar(d, ratio as f64)?)?)?;
    let valid = pos
        .ge(&b.scalar(d, -1.0)?)?
        .and(&pos.le(&b.scalar(d, size as f64)?)?)?;
    let pos = pos.maximum(&b.scalar(d, 0.0)?)?;
    let last = b.scalar(d, (size - 1) as f64)?;
    let edge = pos.floor()?.ge(&last)?;
    let low = edge.select(&last, &pos.floor()?)?;
    let pos = edge.select(&low, &pos)?;
    let high = edge.select(&low, &low.add_scalar(1.0)?)?;
    let l = pos.sub(&low)?;
    let h = b.scalar(d, 1.0)?.sub(&l)?;
    let zero = b.scalar(d, 0.0)?;
    Ok(Samples {
        low: low.cast(DType::I64)?,
        high: high.cast(DType::I64)?,
        w_low: valid.select(&h, &zero)?,
        w_high: valid.select(&l, &zero)?,
    })
}

/// The bins from the four weighted corners `[R, out_h·ratio, out_w·ratio, C]`: their sum
/// averaged over each bin's samples, or the max of the largest corner.
fn pool(corners: &[Tensor], max: bool, [oh, gh, ow, gw, c]: [u64; 5]) -> Res<Tensor> {
    let combine = |a: &Tensor, b: &Tensor| if max { a.maximum(b) } else { a.add(b) };
    let mut v = corners[0].clone();
    for t in &corners[1..] {
        v = combine(&v, t)?;
    }
    let r = v.shape().dims()[0].clone();
    let mut dims = vec![tir_graph::ReshapeDim::Dim(r)];
    dims.extend([oh, gh, ow, gw, c].map(|n| tir_graph::ReshapeDim::Dim(tir_graph::Dim::Static(n))));
    let v = v.reshape(&dims)?;
    Ok(if max {
        v.max(&[2, 4], false)?
    } else {
        let count = v.builder().scalar(v.dtype(), (gh * gw) as f64)?;
        v.sum(&[2, 4], false)?.div(&count)?
    })
}
