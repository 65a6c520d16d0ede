//! Sampling grids: `AffineGrid` (see [`affine_grid`]) and `GridSample` (opset 16: 2-D,
//! `bilinear`/`nearest`/`bicubic`; opset 20 on: any number of spatial dims,
//! `linear`/`nearest`/`cubic`) over `X: [N, C, D1..Dn]` and a run-time `grid: [N, O1..On, n]`
//! of static shapes, with `padding_mode` zeros/border/reflection and `align_corners`, following
//! ONNX's reference implementation step by step.
//!
//! Per spatial axis, each output position's coordinate is denormalized, rounded half to even
//! (`nearest`), moved inside the borders when outside them (clamped for `border`, reflected for
//! `reflection`), and split into taps: 1 (`nearest`), 2 (`linear`) or 4 (`cubic`, Keys' kernel
//! with a = −0.75), each an index and a weight; a tap outside the axis reads 0 (`zeros`), its
//! clamped index (`border`) or its reflected one (`reflection`). The taps of all axes combine
//! into `K^n` linear positions in `X` flattened per `(n, c)`, read with one gather (as
//! `GatherElements` is lowered), weighted and summed: `N·C·O·K^n` reads. Coordinates and
//! weights are computed in f32 for 16-bit floats.

use super::shape::take_along;
use super::{cast_to, compute_dtype, float, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// One spatial axis: its length and the borders beyond which a coordinate is moved.
#[derive(Clone, Copy, Debug)]
struct Axis {
    len: u64,
    lo: f64,
    hi: f64,
    align: bool,
}

fn mode(cx: &mut Cx) -> Res<Mode> {
    let old = cx.opset < 20;
    let m = cx
        .attrs
        .string("mode", if old { "bilinear" } else { "linear" })?;
    Ok(match (m.as_str(), old) {
        ("nearest", _) => Mode::Nearest,
        ("bilinear", true) | ("linear", false) => Mode::Linear,
        ("bicubic", true) | ("cubic", false) => Mode::Cubic,
        _ => return Err(invalid(format!("mode `{m}` at opset {}", cx.opset))),
    })
}

fn padding(cx: &mut Cx) -> Res<Padding> {
    Ok(match cx.attrs.string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(invalid(format!("padding_mode `{other}`"))),
    })
}

pub(super) fn grid_sample(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 16 {
        return Err(invalid("GridSample is an op of opset 16 on"));
    }
    let (mode, pad) = (mode(cx)?, padding(cx)?);
    let align = cx.attrs.int("align_corners", 0)? != 0;
    let (x, grid) = (cx.tensor(0)?, cx.tensor(1)?);
    let dtype = float(&x, "GridSample")?.dtype();
    let wide = compute_dtype(dtype);
    let (xd, gd) = match (x.shape().static_dims(), grid.shape().static_dims()) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Err(unsupported(format!(
                "GridSample of {} and {}",
                x.ty(),
                grid.ty()
            )))
        }
    };
    let n = xd.len().saturating_sub(2);
    let fits = n >= 1
        && gd.len() == n + 2
        && gd[0] == xd[0]
        && gd[n + 1] == n as u64
        && grid.dtype().is_float()
        && (cx.opset >= 20 || n == 2);
    if !fits {
        return Err(invalid(format!(
            "GridSample of {} on a grid {}",
            x.ty(),
            grid.ty()
        )));
    }
    let axes: Vec<Axis> = xd[2..]
        .iter()
        .map(|&len| {
            let (lo, hi) = if align {
                (0.0, len as f64 - 1.0)
            } else {
                (-0.5, len as f64 - 0.5)
            };
            Axis { len, lo, hi, align }
        })
        .collect();
    if pad == Padding::Reflection && axes.iter().any(|a| a.hi <= a.lo) {
        return Err(unsupported(
            "GridSample's reflection with align_corners over an axis of length 1 (an empty range)",
        ));
    }
    let (batch, channels) = (xd[0], xd[1]);
    let out: Vec<u64> = gd[1..=n].to_vec();
    let p: u64 = out.iter().product();
    let grid = cast_to(&grid, wide)?.reshape_to(&Shape::of(&[batch, p, n as u64]))?;
    let taps = mode.taps();
    // Per axis: indices, weights and validity, each [N, P, 1.., K at 2 + j, ..1].
    let mut linear: Option<Tensor> = None;
    let mut weight: Option<Tensor> = None;
    let mut ok: Option<Tensor> = None;
    let mut stride = 1;
    for j in (0..n).rev() {
        // The grid's last axis lists coordinates innermost axis first.
        let g = grid.slice_axis(2, (n - 1 - j) as u64, (n - j) as u64)?; // [N, P, 1]
        let (idx, w, inside) = axis_taps(&g, &axes[j], mode, pad)?;
        let mut at = vec![batch, p];
        at.extend((0..n).map(|i| if i == j { taps } else { 1 }));
        let shape = Shape::of(&at);
        let term = idx.mul_scalar(stride as f64)?.reshape_to(&shape)?;
        linear = Some(match linear {
            Some(l) => l.add(&term)?,
            None => term,
        });
        let w = w.reshape_to(&shape)?;
        weight = Some(match weight {
            Some(v) => v.mul(&w)?,
            None => w,
        });
        if let Some(inside) = inside {
            let inside = inside.reshape_to(&shape)?;
            ok = Some(match ok {
                Some(o) => o.and(&inside)?,
                None => inside,
            });
        }
        stride *= axes[j].len;
    }
    let t = taps.pow(n as u32);
    let s: u64 = xd[2..].iter().product();
    let mut full = vec![batch, p];
    full.extend(vec![taps; n]);
    let flat = |v: Tensor, to: &[u64]| -> Res<Tensor> {
        Ok(v.broadcast_to(&Shape::of(&full))?
            .reshape_to(&Shape::of(to))?)
    };
    let linear = flat(linear.expect("n ≥ 1"), &[batch, 1, p * t])?.broadcast_to(&Shape::of(&[
        batch,
        channels,
        p * t,
    ]))?;
    let values = take_along(
        &cast_to(&x, wide)?.reshape_to(&Shape::of(&[batch, channels, s]))?,
        &linear,
        2,
    )?
    .reshape_to(&Shape::of(&[batch, channels, p, t]))?;
    let values = match ok {
        Some(ok) => {
            let ok = flat(ok, &[batch, 1, p, t])?;
            ok.select(&values, &x.builder().scalar(wide, 0.0)?)?
        }
        None => values,
    };
    let weight = flat(weight.expect("n ≥ 1"), &[batch, 1, p, t])?;
    let y = values.mul(&weight)?.sum(&[3], false)?;
    let mut dims = vec![batch, channels];
    dims.extend(out);
    Ok(vec![
        cast_to(&y.reshape_to(&Shape::of(&dims))?, dtype)?.into()
    ])
}

impl Mode {
    fn taps(self) -> u64 {
        match self {
            Mode::Nearest => 1,
            Mode::Linear => 2,
            Mode::Cubic => 4,
        }
    }
}

/// One axis's taps for the normalized coordinates `g` (`[N, P, 1]`): their indices into the
/// axis (i64, in range), weights, and (for `zeros`) whether each lies inside the axis; each
/// `[N, P, K]`.
fn axis_taps(
    g: &Tensor,
    a: &Axis,
    mode: Mode,
    pad: Padding,
) -> Res<(Tensor, Tensor, Option<Tensor>)> {
    let b = g.builder();
    let c = |v: f64| b.scalar(g.dtype(), v);
    let len = a.len as f64;
    // Denormalize in the reference's order of f32 operations.
    let mut x = if a.align {
        g.add_scalar(1.0)?.mul_scalar(0.5)?.mul_scalar(len - 1.0)?
    } else {
        g.add_scalar(1.0)?
            .mul_scalar(len)?
            .add_scalar(-1.0)?
            .mul_scalar(0.5)?
    };
    if mode == Mode::Nearest {
        x = round_half_even(&x)?;
    }
    let outside = x.lt(&c(a.lo)?)?.or(&x.gt(&c(a.hi)?)?)?;
    x = match pad {
        Padding::Zeros => x,
        Padding::Border => outside.select(&x.maximum(&c(0.0)?)?.minimum(&c(len - 1.0)?)?, &x)?,
        Padding::Reflection => outside.select(&reflect(&x, a)?, &x)?,
    };
    let (base, weights) = match mode {
        Mode::Nearest => (
            x.cast(DType::I64)?.cast(g.dtype())?,
            c(1.0)?.broadcast_to(&x.shape())?,
        ),
        Mode::Linear => {
            let x0 = x.floor()?;
            let t = x.sub(&x0)?;
            let w = b.concat(&[&c(1.0)?.sub(&t)?, &t], 2)?;
            (x0, w)
        }
        Mode::Cubic => {
            let x0 = x.floor()?;
            let t = x.sub(&x0)?;
            (x0.add_scalar(-1.0)?, cubic_weights(&t)?)
        }
    };
    let offsets = b
        .arange(g.dtype(), mode.taps())?
        .reshape_to(&Shape::of(&[1, 1, mode.taps()]))?;
    let taps = base.add(&offsets)?; // [N, P, K], integral
    let (idx, inside) = match pad {
        Padding::Zeros => {
            let inside = taps.ge(&c(0.0)?)?.and(&taps.lt(&c(len)?)?)?;
            let clamped = taps.maximum(&c(0.0)?)?.minimum(&c(len - 1.0)?)?;
            (clamped, Some(inside))
        }
        Padding::Border => (taps.maximum(&c(0.0)?)?.minimum(&c(len - 1.0)?)?, None),
        Padding::Reflection => {
            let out = taps.lt(&c(a.lo)?)?.or(&taps.gt(&c(a.hi)?)?)?;
            (out.select(&reflect(&taps, a)?, &taps)?, None)
        }
    };
    // Truncation toward zero, as the reference's int().
    let idx = idx.cast(DType::I64)?;
    let weights = weights.broadcast_to(&taps.shape())?;
    Ok((idx, weights, inside))
}

/// `x` rounded to the nearest integer, ties to even (numpy's `rint`).
fn round_half_even(x: &Tensor) -> Res<Tensor> {
    let b = x.builder();
    let half = b.scalar(x.dtype(), 0.5)?;
    let f = x.floor()?;
    let r = x.sub(&f)?;
    let h = f.mul(&half)?;
    let odd = h.floor()?.ne(&h)?;
    let up = r.gt(&half)?.or(&r.eq(&half)?.and(&odd)?)?;
    Ok(up.select(&f.add_scalar(1.0)?, &f)?)
}

/// `x` reflected by the nearer border until inside `[lo, hi]` (the reference's `_gs_reflect`,
/// for `x` outside the range).
fn reflect(x: &Tensor, a: &Axis) -> Res<Tensor> {
    let b = x.builder();
    let c = |v: f64| b.scalar(x.dtype(), v);
    let range = a.hi - a.lo;
    let below = x.lt(&c(a.lo)?)?;
    // The distance past the nearer border, its whole number of ranges, and the rest.
    let dx = below.select(&c(a.lo)?.sub(x)?, &x.sub(&c(a.hi)?)?)?;
    let n = dx.div(&c(range)?)?.floor()?;
    let r = dx.sub(&n.mul_scalar(range)?)?;
    let even = n.mul_scalar(0.5)?.floor()?.mul_scalar(2.0)?.eq(&n)?;
    let from_lo = c(a.lo)?.add(&r)?;
    let from_hi = c(a.hi)?.sub(&r)?;
    // Below: even → lo + r, odd → hi − r; above: even → hi − r, odd → lo + r.
    Ok(below.eq(&even)?.select(&from_lo, &from_hi)?)
}

/// Keys' cubic weights (a = −0.75) of the taps at −1, 0, 1, 2 from `floor(x)`, for `t = x −
/// floor(x)` (`[N, P, 1]`), as `[N, P, 4]`.
fn cubic_weights(t: &Tensor) -> Res<Tensor> {
    const A: f64 = -0.75;
    let near = |s: &Tensor| -> Res<Tensor> {
        // ((A + 2)·s − (A + 3))·s² + 1
        Ok(s.mul_scalar(A + 2.0)?
            .add_scalar(-(A + 3.0))?
            .mul(s)?
            .mul(s)?
            .add_scalar(1.0)?)
    };
    let far = |s: &Tensor| -> Res<Tensor> {
        // ((A·s − 5A)·s + 8A)·s − 4A
        Ok(s.mul_scalar(A)?
            .add_scalar(-5.0 * A)?
            .mul(s)?
            .add_scalar(8.0 * A)?
            .mul(s)?
            .add_scalar(-4.0 * A)?)
    };
    let one_minus = t.neg()?.add_scalar(1.0)?;
    let w = [
        far(&t.add_scalar(1.0)?)?,
        near(t)?,
        near(&one_minus)?,
        far(&one_minus.add_scalar(1.0)?)?,
    ];
    Ok(t.builder().concat(&[&w[0], &w[1], &w[2], &w[3]], 2)?)
}

/// `AffineGrid` (opset 20): `theta: [N, n, n+1]` (n = 2 or 3) applied to the normalized
/// homogeneous coordinates `[x, y, (z), 1]` of an output of `size` (known at import), giving
/// `[N, spatial..., n]`. The coordinates are constants per axis (ONNX's reference: `−1 + i·2/(L−1)`
/// with `align_corners`, else `−1 + (2i + 1)/L`), broadcast and multiplied by `thetaᵀ` in one
/// matmul (in f32 for 16-bit floats).
pub(super) fn affine_grid(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 20 {
        return Err(invalid("AffineGrid is an op of opset 20 on"));
    }
    let align = cx.attrs.int("align_corners", 0)? != 0;
    let size = cx.ints(1)?;
    let theta = cx.tensor(0)?;
    let dtype = float(&theta, "AffineGrid")?.dtype();
    let n = size.len().saturating_sub(2);
    let td = theta.shape().static_dims();
    let batch = size.first().copied().unwrap_or(-1);
    let fits = (n == 2 || n == 3)
        && size.iter().all(|&d| d >= 1)
        && td == Some(vec![batch as u64, n as u64, n as u64 + 1]);
    if !fits {
        return Err(invalid(format!(
            "AffineGrid of theta {} for size {size:?}",
            theta.ty()
        )));
    }
    let wide = compute_dtype(dtype);
    let spatial: Vec<u64> = size[2..].iter().map(|&d| d as u64).collect();
    let b = theta.builder();
    let mut full = spatial.clone();
    full.push(1);
    // Homogeneous coordinates, innermost axis first, then the ones.
    let mut columns = Vec::with_capacity(n + 1);
    for j in (0..n).rev() {
        let len = spatial[j];
        let values: Vec<f64> = (0..len)
            .map(|i| {
                let (i, l) = (i as f64, len as f64);
                if !align {
                    -1.0 + (2.0 * i + 1.0) / l
                } else if len == 1 {
                    -1.0
                } else {
                    -1.0 + i * 2.0 / (l - 1.0)
                }
            })
            .collect();
        let mut at = vec![1; n + 1];
        at[j] = len;
        let axis = b.constant(wide, Shape::of(&at), &values)?;
        columns.push(axis.broadcast_to(&Shape::of(&full))?);
    }
    columns.push(b.scalar(wide, 1.0)?.broadcast_to(&Shape::of(&full))?);
    let refs: Vec<&Tensor> = columns.iter().collect();
    let p: u64 = spatial.iter().product();
    let k = n as u64 + 1;
    let base = b.concat(&refs, n)?.reshape_to(&Shape::of(&[1, p, k]))?;
    let theta_t = cast_to(&theta, wide)?.permute(&[0, 2, 1])?; // [N, n+1, n]
    let grid = base.matmul(&theta_t)?; // [N, P, n]
    let mut out = vec![batch as u64];
    out.extend(&spatial);
    out.push(n as u64);
    Ok(vec![
        cast_to(&grid.reshape_to(&Shape::of(&out))?, dtype)?.into()
    ])
}
