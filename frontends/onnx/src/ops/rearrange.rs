//! Data movement between axes: `DepthToSpace` and `SpaceToDepth` (both modes), as one reshape,
//! one permutation and one reshape.
//!
//! Takes a rank-4 tensor of any dtype whose channel, height and width are static (the batch may
//! be symbolic). Guarantees: the element order of ONNX's reference (`DCR`: blocks outer, depth
//! inner; `CRD`: depth outer), values copied bit for bit.

use super::{Cx, Res};
use crate::import::Value;
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
