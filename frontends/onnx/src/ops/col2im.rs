//! `Col2Im` (opset 18): sliding blocks `[N, C · ∏block, L]` summed back into an image
//! `[N, C, image...]`, the inverse layout of im2col.
//!
//! Takes `image_shape` and `block_shape` known at import, and static channel and block axes.
//! Guarantees: each image element is the sum of the block entries that land on it (of each
//! block offset, at most one block does), with ONNX's `dilations`, `pads` (begins then ends) and
//! `strides`. Lowered as one gather from the input with a zero column appended, at positions
//! tabled at import (`[pixels · ∏block]`, at most [`MAX_CONSTANT_ELEMENTS`]), and a sum over
//! the block offsets: one read per (pixel, offset) pair, no scatter.

use super::{Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::op::{ConstData, MAX_CONSTANT_ELEMENTS};
use tir_graph::{DType, Dim, ReshapeDim, Shape};

/// The geometry of the blocks, one entry per spatial axis.
struct Blocks {
    image: Vec<u64>,
    block: Vec<u64>,
    dilations: Vec<u64>,
    pads_begin: Vec<u64>,
    strides: Vec<u64>,
    /// Blocks along each axis.
    counts: Vec<u64>,
}

pub(super) fn col2im(cx: &mut Cx) -> Res<Vec<Value>> {
    let image = positive(cx.ints(1)?, "image_shape")?;
    let block = positive(cx.ints(2)?, "block_shape")?;
    let n = image.len();
    if block.len() != n || n == 0 {
        return Err(invalid(format!(
            "image_shape {image:?} and block_shape {block:?} (one entry per spatial axis)"
        )));
    }
    let attr = |cx: &mut Cx, name: &str, len: usize, default: u64| -> Res<Vec<u64>> {
        match cx.attrs.ints(name)? {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => positive_or_zero(v, name),
            Some(v) => Err(invalid(format!("{name} {v:?} ({len} entries)"))),
        }
    };
    let dilations = attr(cx, "dilations", n, 1)?;
    let pads = attr(cx, "pads", 2 * n, 0)?;
    let strides = attr(cx, "strides", n, 1)?;
    if dilations.contains(&0) || strides.contains(&0) {
        return Err(invalid("dilations and strides must be positive"));
    }
    let mut counts = Vec::with_capacity(n);
    for i in 0..n {
        let span = dilations[i] * (block[i] - 1) + 1;
        let padded = image[i] + pads[i] + pads[i + n];
        if padded < span {
            return Err(invalid(format!(
                "no block fits axis {i} of image {image:?}"
            )));
        }
        counts.push((padded - span) / strides[i] + 1);
    }
    let blocks = Blocks {
        image,
        block,
        dilations,
        pads_begin: pads[..n].to_vec(),
        strides,
        counts,
    };
    let x = cx.tensor(0)?;
    let y = fold(&x, &blocks)?;
    Ok(vec![y.into()])
}

fn positive(v: Vec<i64>, what: &str) -> Res<Vec<u64>> {
    if v.iter().any(|&d| d <= 0) {
        return Err(unsupported(format!("{what} {v:?} (all positive)")));
    }
    Ok(v.into_iter().map(|d| d as u64).collect())
}

fn positive_or_zero(v: Vec<i64>, what: &str) -> Res<Vec<u64>> {
    v.iter()
        .map(|&d| u64::try_from(d).map_err(|_| invalid(format!("{what} {v:?} (non-negative)"))))
        .collect()
}

/// The image from the blocks of `x: [N, C·K, L]`.
fn fold(x: &tir_graph::Tensor, g: &Blocks) -> Res<tir_graph::Tensor> {
    let k: u64 = g.block.iter().product();
    let l: u64 = g.counts.iter().product();
    let pixels: u64 = g.image.iter().product();
    let dims = x.shape().into_dims();
    let (rows, cols) = match (x.rank(), dims.get(1).and_then(Dim::as_static), dims.get(2)) {
        (3, Some(r), Some(c)) => (r, c.as_static()),
        _ => {
            return Err(invalid(format!(
                "Col2Im of {} (`[N, C·K, L]`, C·K static)",
                x.ty()
            )))
        }
    };
    if rows % k != 0 || cols != Some(l) {
        return Err(invalid(format!(
            "input {} for blocks of {k} elements at {l} places",
            x.ty()
        )));
    }
    let c = rows / k;
    let len = pixels * k;
    if len > MAX_CONSTANT_ELEMENTS {
        return Err(unsupported(format!(
            "Col2Im of {len} (pixel, block offset) pairs (tir's index tables hold at most {MAX_CONSTANT_ELEMENTS})"
        )));
    }
    let table = x.builder().constant_data(
        DType::I64,
        Shape::of(&[len]),
        ConstData::Int(positions(g, k, l, pixels)),
    )?;
    let batch = ReshapeDim::Dim(dims[0].clone());
    let of = |d: &[u64]| -> Vec<ReshapeDim> {
        let mut v = vec![batch.clone()];
        v.extend(d.iter().map(|&n| ReshapeDim::Dim(Dim::Static(n))));
        v
    };
    let mut image = vec![c];
    image.extend(&g.image);
    let y = x
        .pad(&[(0, 0), (0, 0), (0, 1)], 0.0)?
        .reshape(&of(&[c, k * (l + 1)]))?
        .gather(&table, 2)?
        .reshape(&of(&[c, pixels, k]))?
        .sum(&[3], false)?
        .reshape(&of(&image))?;
    Ok(y)
}

/// For each pixel (row-major) and block offset, its place in a channel's `[K, L + 1]` entries:
/// the block covering the pixel at that offset, else the appended zero (`L`).
fn positions(g: &Blocks, k: u64, l: u64, pixels: u64) -> Vec<i64> {
    let n = g.image.len();
    let mut out = Vec::with_capacity((pixels * k) as usize);
    for p in 0..pixels {
        let pixel = unravel(p, &g.image);
        for o in 0..k {
            let offset = unravel(o, &g.block);
            let mut place = Some(0u64);
            for i in 0..n {
                // pixel = place · stride − pad + offset · dilation, solved for place.
                let at = (pixel[i] + g.pads_begin[i]).checked_sub(offset[i] * g.dilations[i]);
                place = match (place, at) {
                    (Some(acc), Some(at))
                        if at % g.strides[i] == 0 && at / g.strides[i] < g.counts[i] =>
                    {
                        Some(acc * g.counts[i] + at / g.strides[i])
                    }
                    _ => None,
                };
            }
            out.push((o * (l + 1) + place.unwrap_or(l)) as i64);
        }
    }
    out
}

/// The row-major coordinates of flat index `i` in `dims`.
fn unravel(mut i: u64, dims: &[u64]) -> Vec<u64> {
    let mut c = vec![0; dims.len()];
    for (slot, &d) in c.iter_mut().zip(dims).rev() {
        *slot = i % d;
        i /= d;
    }
    c
}
