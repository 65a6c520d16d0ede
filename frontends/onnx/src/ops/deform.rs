//! `DeformConv` (opset 19 on) in 2-D: a convolution whose kernel taps read `X` at positions
//! moved by run-time offsets, bilinearly interpolated, optionally scaled by a mask.
//!
//! Takes `X: [N, C, H, W]`, `W: [oC, C / group, kH, kW]`, `offset: [N, offset_group · 2 · kH ·
//! kW, oH, oW]` (`(dy, dx)` per tap), optional `B: [oC]` and `mask: [N, offset_group · kH · kW,
//! oH, oW]`, all static. Guarantees: ONNX's reference, which samples with `GridSample`
//! (bilinear, aligned corners, zeros outside): each tap the weighted sum of its four
//! neighbouring pixels, a neighbour outside the image contributing 0. Lowered as one gather of
//! the four neighbours of every (tap, output position) from `X` as `[N·G·H·W, C / G]`, then the
//! grouped product with `W` as a matmul: `N·C·kH·kW·oH·oW` samples of 4 reads each.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// The static geometry.
struct Geometry {
    n: u64,
    c: u64,
    h: u64,
    w: u64,
    oc: u64,
    k: [u64; 2],
    out: [u64; 2],
    strides: [u64; 2],
    dilations: [u64; 2],
    pads: [u64; 2],
    group: u64,
    offset_group: u64,
}

pub(super) fn deform_conv(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 19 {
        return Err(invalid("DeformConv is an op of opset 19 on"));
    }
    let pair = |v: Option<Vec<i64>>, len: usize, default: u64, what: &str| -> Res<Vec<u64>> {
        match v {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len && v.iter().all(|&d| d >= 0) => {
                Ok(v.into_iter().map(|d| d as u64).collect())
            }
            Some(v) => Err(invalid(format!("{what} {v:?}"))),
        }
    };
    let strides = pair(cx.attrs.ints("strides")?, 2, 1, "strides")?;
    let dilations = pair(cx.attrs.ints("dilations")?, 2, 1, "dilations")?;
    let pads = pair(cx.attrs.ints("pads")?, 4, 0, "pads")?;
    let kernel = cx.attrs.ints("kernel_shape")?;
    let group = cx.attrs.int("group", 1)?;
    let offset_group = cx.attrs.int("offset_group", 1)?;
    let (x, wt, offset) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    let (bias, mask) = (cx.opt_tensor(3)?, cx.opt_tensor(4)?);
    let dims = |t: &Tensor| t.shape().static_dims().filter(|d| d.len() == 4);
    let (Some(xd), Some(wd), Some(od)) = (dims(&x), dims(&wt), dims(&offset)) else {
        return Err(unsupported(format!(
            "DeformConv of X {}, W {}, offset {} (2-D, static)",
            x.ty(),
            wt.ty(),
            offset.ty()
        )));
    };
    let k = [wd[2], wd[3]];
    if kernel.is_some_and(|kv| kv != [k[0] as i64, k[1] as i64]) {
        return Err(invalid(format!(
            "kernel_shape disagrees with W {}",
            wt.ty()
        )));
    }
    let g = Geometry {
        n: xd[0],
        c: xd[1],
        h: xd[2],
        w: xd[3],
        oc: wd[0],
        k,
        out: [od[2], od[3]],
        strides: [strides[0], strides[1]],
        dilations: [dilations[0], dilations[1]],
        pads: [pads[0], pads[1]],
        group: u64::try_from(group).map_err(|_| invalid(format!("group {group}")))?,
        offset_group: u64::try_from(offset_group)
            .map_err(|_| invalid(format!("offset_group {offset_group}")))?,
    };
    check(&g, &wd, &od, &pads, &x, &wt)?;
    let dtype = x.dtype();
    let work = compute_dtype(dtype);
    let [x, wt, offset] = [&x, &wt, &offset].map(|t| cast_to(t, work));
    let mask = mask.map(|m| cast_to(&m, work)).transpose()?;
    let cols = sample(&g, &x?, &offset?, mask.as_ref())?;
    let mut y = product(&g, &wt?, &cols)?;
    if let Some(b) = bias {
        y = y.add(&cast_to(&b, work)?.reshape_to(&Shape::of(&[1, g.oc, 1, 1]))?)?;
    }
    Ok(vec![cast_to(&y, dtype)?.into()])
}

fn check(g: &Geometry, wd: &[u64], od: &[u64], pads: &[u64], x: &Tensor, w: &Tensor) -> Res<()> {
    let ok = g.group > 0
        && g.offset_group > 0
        && g.c == wd[1] * g.group
        && g.oc.is_multiple_of(g.group)
        && g.c.is_multiple_of(g.offset_group)
        && od[0] == g.n
        && od[1] == g.offset_group * 2 * g.k[0] * g.k[1]
        && g.strides.iter().all(|&s| s > 0)
        && g.dilations.iter().all(|&d| d > 0)
        && g.h > 1
        && g.w > 1
        && x.dtype().is_float()
        && w.dtype() == x.dtype();
    let expect = |i: usize, size: u64| {
        let span = (g.k[i] - 1) * g.dilations[i] + 1;
        (size + pads[i] + pads[i + 2])
            .checked_sub(span)
            .map(|d| d / g.strides[i] + 1)
    };
    if !ok || expect(0, g.h) != Some(g.out[0]) || expect(1, g.w) != Some(g.out[1]) {
        return Err(invalid(format!(
            "DeformConv of X {}, W {}, offset dims {od:?} (group {}, offset_group {})",
            x.ty(),
            w.ty(),
            g.group,
            g.offset_group
        )));
    }
    Ok(())
}

/// The sampled taps `[N, C·kH·kW, oH·oW]` (channel-major, as im2col lays them out).
fn sample(g: &Geometry, x: &Tensor, offset: &Tensor, mask: Option<&Tensor>) -> Res<Tensor> {
    let b = x.builder();
    let d = x.dtype();
    let (gs, cg) = (g.offset_group, g.c / g.offset_group);
    let [kh, kw] = g.k;
    let [oh, ow] = g.out;
    // [N, G, kH, kW, 2, oH, oW]: the tap positions, base grid plus offsets.
    let off = offset.reshape_to(&Shape::of(&[g.n, gs, kh, kw, 2, oh, ow]))?;
    let axis_pos = |i: usize, k: u64, o: u64, kshape: [u64; 7], oshape: [u64; 7]| -> Res<Tensor> {
        let tap = b
            .arange(d, k)?
            .mul_scalar(g.dilations[i] as f64)?
            .reshape_to(&Shape::of(&kshape))?;
        let at = b
            .arange(d, o)?
            .mul_scalar(g.strides[i] as f64)?
            .add_scalar(-(g.pads[i] as f64))?
            .reshape_to(&Shape::of(&oshape))?;
        let part = off.slice_axis(4, i as u64, i as u64 + 1)?;
        Ok(at.add(&part)?.add(&tap)?)
    };
    let py = axis_pos(0, kh, oh, [1, 1, kh, 1, 1, 1, 1], [1, 1, 1, 1, 1, oh, 1])?;
    let px = axis_pos(1, kw, ow, [1, 1, 1, kw, 1, 1, 1], [1, 1, 1, 1, 1, 1, ow])?;
    // X as rows of a group's channels: [N·G·H·W, C/G]; each (n, g)'s first row.
    let table = x
        .reshape_to(&Shape::of(&[g.n, gs, cg, g.h * g.w]))?
        .permute(&[0, 1, 3, 2])?
        .reshape_to(&Shape::of(&[g.n * gs * g.h * g.w, cg]))?;
    let base = b
        .arange(DType::I64, g.n * gs)?
        .mul_scalar((g.h * g.w) as f64)?
        .reshape_to(&Shape::of(&[g.n, gs, 1, 1, 1, 1, 1]))?;
    let (y0, x0) = (py.floor()?, px.floor()?);
    let mut acc: Option<Tensor> = None;
    for dy in [0.0, 1.0] {
        for dx in [0.0, 1.0] {
            let (cy, cx) = (y0.add_scalar(dy)?, x0.add_scalar(dx)?);
            // Bilinear weights: 1 - |p - corner| on each axis.
            let wy = b.scalar(d, 1.0)?.sub(&py.sub(&cy)?.abs()?)?;
            let wx = b.scalar(d, 1.0)?.sub(&px.sub(&cx)?.abs()?)?;
            let inside = within(&cy, g.h)?.and(&within(&cx, g.w)?)?;
            let weight = inside.select(&wy.mul(&wx)?, &b.scalar(d, 0.0)?)?;
            let pos = cy.mul_scalar(g.w as f64)?.add(&cx)?;
            let pos = inside
                .select(&pos, &b.scalar(d, 0.0)?)?
                .cast(DType::I64)?
                .add(&base)?;
            let v = table.gather(&pos, 0)?.mul(&weight.unsqueeze(&[7])?)?;
            acc = Some(match acc {
                Some(a) => a.add(&v)?,
                None => v,
            });
        }
    }
    let acc = acc.ok_or_else(|| invalid("no corners"))?; // [N, G, kH, kW, 1, oH, oW, C/G]
    let acc = match mask {
        Some(m) => acc.mul(&m.reshape_to(&Shape::of(&[g.n, gs, kh, kw, 1, oh, ow, 1]))?)?,
        None => acc,
    };
    Ok(acc
        .permute(&[0, 1, 7, 2, 3, 4, 5, 6])?
        .reshape_to(&Shape::of(&[g.n, g.c * kh * kw, oh * ow]))?)
}

/// `0 <= p < size` of a whole-number position `p`.
fn within(p: &Tensor, size: u64) -> Res<Tensor> {
    let b = p.builder();
    Ok(p.ge(&b.scalar(p.dtype(), 0.0)?)?
        .and(&p.lt(&b.scalar(p.dtype(), size as f64)?)?)?)
}

/// `W` over the taps, group by group: `[group, oC/group, C/group·kH·kW] @ [N, group, ·, oH·oW]`.
fn product(g: &Geometry, w: &Tensor, cols: &Tensor) -> Res<Tensor> {
    let taps = g.c / g.group * g.k[0] * g.k[1];
    let [oh, ow] = g.out;
    let w = w.reshape_to(&Shape::of(&[g.group, g.oc / g.group, taps]))?;
    let cols = cols.reshape_to(&Shape::of(&[g.n, g.group, taps, oh * ow]))?;
    Ok(w.matmul(&cols)?
        .reshape_to(&Shape::of(&[g.n, g.oc, oh, ow]))?)
}
