//! Data movement: `DepthToSpace` and `SpaceToDepth` (both modes) as one reshape, one
//! permutation and one reshape; `ReverseSequence` as one gather; `CenterCropPad` as one slice
//! and one pad.
//!
//! Takes: for the block moves, a rank-4 tensor of any dtype whose channel, height and width are
//! static (the batch may be symbolic); for `ReverseSequence`, run-time lengths; for
//! `CenterCropPad`, sizes known at import and static dims on the listed axes. Guarantees: the
//! element order of ONNX's reference (`DCR`: blocks outer, depth inner; `CRD`: depth outer),
//! values copied bit for bit, zeros where `CenterCropPad` pads.

use super::{Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{Dim, Shape, Tensor};

/// The input, its batch dim, its static `[C, H, W]`, the block size and whether the mode is
/// `CRD`.
struct Blocks {
    x: Tensor,
    batch: Dim,
    chw: [u64; 3],
    bs: u64,
    crd: bool,
}

fn blocks(cx: &mut Cx) -> Res<Blocks> {
    let bs = cx.attrs.int("blocksize", 0)?;
    let mode = cx.attrs.string("mode", "DCR")?;
    let crd = match mode.as_str() {
        "DCR" => false,
        "CRD" => true,
        other => return Err(invalid(format!("mode `{other}`"))),
    };
    let x = cx.tensor(0)?;
    let dims = x.shape().into_dims();
    if dims.len() != 4 {
        return Err(invalid(format!("{} of rank {}", cx.op(), dims.len())));
    }
    let static_dims: Option<Vec<u64>> = dims[1..].iter().map(Dim::as_static).collect();
    let Some([c, h, w]) = static_dims.as_deref().map(|d| [d[0], d[1], d[2]]) else {
        return Err(unsupported(format!("{} of symbolic [C, H, W]", cx.op())));
    };
    let bs = u64::try_from(bs)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| invalid(format!("blocksize {bs}")))?;
    Ok(Blocks {
        x,
        batch: dims[0].clone(),
        chw: [c, h, w],
        bs,
        crd,
    })
}

/// `x` reshaped to `[batch, rest...]`.
fn with_batch(x: &Tensor, batch: &Dim, rest: &[u64]) -> Res<Tensor> {
    let mut dims = vec![batch.clone()];
    dims.extend(rest.iter().map(|&d| Dim::Static(d)));
    let shape = Shape::new(dims).map_err(|e| unsupported(e.to_string()))?;
    Ok(x.reshape_to(&shape)?)
}

pub(super) fn depth_to_space(cx: &mut Cx) -> Res<Vec<Value>> {
    let Blocks {
        x,
        batch,
        chw: [c, h, w],
        bs,
        crd,
    } = blocks(cx)?;
    if c % (bs * bs) != 0 {
        return Err(invalid(format!(
            "{c} channels are not a multiple of {bs}^2"
        )));
    }
    let d = c / (bs * bs);
    let (split, perm) = if crd {
        ([d, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([bs, bs, d, h, w], [0, 3, 4, 1, 5, 2])
    };
    let t = with_batch(&x, &batch, &split)?.permute(&perm)?;
    Ok(vec![with_batch(&t, &batch, &[d, h * bs, w * bs])?.into()])
}

pub(super) fn space_to_depth(cx: &mut Cx) -> Res<Vec<Value>> {
    let Blocks {
        x,
        batch,
        chw: [c, h, w],
        bs,
        crd,
    } = blocks(cx)?;
    if h % bs != 0 || w % bs != 0 {
        return Err(invalid(format!(
            "[{h}, {w}] is not a multiple of blocksize {bs}"
        )));
    }
    let t = with_batch(&x, &batch, &[c, h / bs, bs, w / bs, bs])?;
    let perm = if crd {
        [0, 1, 3, 5, 2, 4]
    } else {
        [0, 3, 5, 1, 2, 4]
    };
    let y = with_batch(&t.permute(&perm)?, &batch, &[c * bs * bs, h / bs, w / bs])?;
    Ok(vec![y.into()])
}

/// `x` with the first `sequence_lens[b]` steps of each batch entry `b` reversed along the time
/// axis: one gather at `t < len ? len - 1 - t : t` (ONNX's `take_along`, so a length past the
/// axis is out of range for the gather, never wrapped).
pub(super) fn reverse_sequence(cx: &mut Cx) -> Res<Vec<Value>> {
    let batch_axis = cx.attrs.int("batch_axis", 1)?;
    let time_axis = cx.attrs.int("time_axis", 0)?;
    let (ba, ta) = match (batch_axis, time_axis) {
        (1, 0) => (1, 0),
        (0, 1) => (0, 1),
        _ => {
            return Err(invalid(format!(
                "batch_axis {batch_axis} and time_axis {time_axis} (one is 0, the other 1)"
            )))
        }
    };
    let (x, lens) = (cx.tensor(0)?, cx.tensor(1)?);
    if x.rank() < 2 || !lens.dtype().is_int() || lens.rank() != 1 {
        return Err(invalid(format!(
            "ReverseSequence of {} by lengths {}",
            x.ty(),
            lens.ty()
        )));
    }
    let rank = x.rank();
    // A vector laid along `at` of a rank-`rank` tensor.
    let along = |v: Tensor, at: usize| -> Res<Tensor> {
        let others: Vec<usize> = (0..rank).filter(|&i| i != at).collect();
        Ok(v.unsqueeze(&others)?)
    };
    let t = along(cx.b().iota(x.shape().dims()[ta].clone())?, ta)?;
    let len = along(lens.cast(tir_graph::DType::I64)?, ba)?;
    let reversed = len.add_scalar(-1.0)?.sub(&t)?;
    let index = t
        .lt(&len)?
        .select(&reversed, &t)?
        .broadcast_to(&x.shape())?;
    Ok(vec![super::shape::take_along(&x, &index, ta)?.into()])
}

/// Each listed axis cropped to its centered window or zero-padded around its middle (the odd
/// element of a crop on the left, of a pad on the right), as one slice and one pad.
pub(super) fn center_crop_pad(cx: &mut Cx) -> Res<Vec<Value>> {
    let listed = cx.attrs.ints("axes")?;
    let sizes = cx.ints(1)?;
    let x = cx.tensor(0)?;
    let rank = x.rank();
    // In the listed order (sizes pair with it); `axes` refuses a repeated axis.
    let list: Vec<usize> = match listed {
        Some(l) => {
            super::axes(&l, rank)?;
            l.iter()
                .map(|&a| super::axis(a, rank))
                .collect::<Res<_>>()?
        }
        None => (0..rank).collect(),
    };
    if list.len() != sizes.len() {
        return Err(invalid(format!(
            "{} sizes for {} axes",
            sizes.len(),
            list.len()
        )));
    }
    let dims = x.shape().into_dims();
    let mut ranges = vec![tir_graph::SliceRange::FULL; rank];
    let mut pads = vec![(0, 0); rank];
    for (&a, &size) in list.iter().zip(&sizes) {
        let Some(have) = dims[a].as_static() else {
            return Err(unsupported(format!("CenterCropPad of symbolic dim {a}")));
        };
        let want = u64::try_from(size)
            .ok()
            .filter(|&w| w > 0)
            .ok_or_else(|| unsupported(format!("CenterCropPad to size {size}")))?;
        if want < have {
            let start = (have - want) / 2;
            ranges[a] = tir_graph::SliceRange::new(start, start + want, 1);
        } else {
            let before = (want - have) / 2;
            pads[a] = (before, want - have - before);
        }
    }
    let mut y = x;
    if ranges.iter().any(|r| *r != tir_graph::SliceRange::FULL) {
        y = y.slice(&ranges)?;
    }
    if pads.iter().any(|&p| p != (0, 0)) {
        y = y.pad(&pads, 0.0)?;
    }
    Ok(vec![y.into()])
}
