//! `Resize` (opsets 11 to 19) and `Upsample` (opsets 7 and 9, nearest with integer scales) on
//! tensors of static shape, with `roi`, `scales` and `sizes` known at import.
//!
//! Resampling is separable: for each resized axis a table of source indices and weights,
//! `[out, taps]`, is computed at import in f64 exactly as ONNX's reference evaluator does
//! (coordinate transformation, nearest rounding, linear and cubic kernels with `antialias` and
//! `exclude_outside`, `axes`, `keep_aspect_ratio_policy`, `tf_crop_and_resize`'s `roi` and
//! extrapolation). The axis is then gathered at the indices (becoming `[out, taps]`),
//! multiplied by the weights and summed over the taps; nearest gathers its single tap, so it
//! moves values exactly in any dtype. Positions `tf_crop_and_resize` extrapolates are replaced
//! by `extrapolation_value` with a select. Linear and cubic take float inputs; f16 and bf16 are
//! computed in f32 and rounded back once. Tables past the constant limit, empty tensors, and
//! the corners where the reference and the spec disagree (`pytorch_half_pixel` onto one
//! element) are refused.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::op::MAX_CONSTANT_ELEMENTS;
use tir_graph::{DType, Shape};

/// How output positions map to input coordinates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Transform {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

/// The resampling kernel.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kernel {
    /// `nearest_mode`: round_prefer_floor, round_prefer_ceil, floor, ceil.
    Nearest(Rounding),
    Linear {
        antialias: bool,
    },
    Cubic {
        a: f64,
        antialias: bool,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Rounding {
    PreferFloor,
    PreferCeil,
    Floor,
    Ceil,
}

impl Kernel {
    /// The reference's coefficients for a fractional position `ratio` in `(0, 1]`.
    fn coeffs(self, ratio: f64, scale: f64) -> Vec<f64> {
        match self {
            Kernel::Nearest(r) => {
                let b = |c: bool| if c { 1.0 } else { 0.0 };
                if ratio == 1.0 {
                    return vec![0.0, 1.0];
                }
                match r {
                    Rounding::PreferFloor => vec![b(ratio <= 0.5), b(ratio > 0.5)],
                    Rounding::PreferCeil => vec![b(ratio < 0.5), b(ratio >= 0.5)],
                    Rounding::Floor => vec![1.0, 0.0],
                    Rounding::Ceil => vec![0.0, 1.0],
                }
            }
            Kernel::Linear { antialias: false } => vec![1.0 - ratio, ratio],
            Kernel::Linear { antialias: true } => {
                let scale = scale.min(1.0);
                let start = ((-1.0 / scale).floor() + 1.0) as i64;
                let footprint = 2 - 2 * start;
                let c: Vec<f64> = (start..start + footprint)
                    .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
                    .collect();
                normalized(c)
            }
            Kernel::Cubic {
                a,
                antialias: false,
            } => {
                let (r, s) = (ratio, 1.0 - ratio);
                vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
                    ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a,
                ]
            }
            Kernel::Cubic { a, antialias: true } => {
                let scale = scale.min(1.0);
                let f = |x: f64| {
                    let x = x.abs();
                    let x2 = x * x;
                    let x3 = x * x2;
                    if x <= 1.0 {
                        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
                    } else if x < 2.0 {
                        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = ((-2.0 / scale).floor() + 1.0) as i64;
                let end = 2 - start;
                normalized(
                    (start..end)
                        .map(|i| f(scale * (i as f64 - ratio)))
                        .collect(),
                )
            }
        }
    }
}

/// `c / sum(c)`, summed left to right as the reference does.
fn normalized(c: Vec<f64>) -> Vec<f64> {
    let sum: f64 = c.iter().fold(0.0, |s, &v| s + v);
    c.into_iter().map(|v| v / sum).collect()
}

/// Python's `math.isclose` with its default tolerances.
fn isclose(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// One axis' resampling: output position `o` is `Σ_k weights[o·taps + k] · x[index[o·taps + k]]`,
/// or the extrapolation value where `outside[o]`.
struct Table {
    out: u64,
    taps: u64,
    index: Vec<i64>,
    weights: Vec<f64>,
    outside: Vec<bool>,
}

/// The reference's `_interpolate_1d_along_axis` as a table.
#[allow(clippy::too_many_arguments)]
fn table(
    input: u64,
    out: u64,
    scale: f64,
    transform: Transform,
    roi: Option<(f64, f64)>,
    kernel: Kernel,
    exclude_outside: bool,
) -> Res<Table> {
    let in_f = input as f64;
    let width = scale * in_f;
    let out_f = out as f64;
    // Onto one element the reference reads at -0.5 where `width` is 1, the spec at 0 where
    // `out` is 1: both read element 0 alone with nearest or plain linear, else they disagree.
    let plain = matches!(
        kernel,
        Kernel::Nearest(_) | Kernel::Linear { antialias: false }
    );
    if transform == Transform::PytorchHalfPixel
        && (out == 1 || width == 1.0)
        && !(out == 1 && width == 1.0 && plain)
    {
        return Err(unsupported(
            "pytorch_half_pixel onto one element with this kernel (the reference and the spec \
             disagree)",
        ));
    }
    let mut t = Table {
        out,
        taps: 0,
        index: Vec::new(),
        weights: Vec::new(),
        outside: Vec::new(),
    };
    for o in 0..out {
        let y = o as f64;
        let mut outside = false;
        let x = match transform {
            Transform::AlignCorners => {
                if width == 1.0 {
                    0.0
                } else {
                    y * (in_f - 1.0) / (width - 1.0)
                }
            }
            Transform::Asymmetric => y / scale,
            Transform::TfCropAndResize => {
                let (r0, r1) = roi.ok_or_else(|| invalid("tf_crop_and_resize without roi"))?;
                let x = if width == 1.0 {
                    (r1 - r0) * (in_f - 1.0) / 2.0
                } else {
                    y * (r1 - r0) * (in_f - 1.0) / (width - 1.0)
                };
                let x = x + r0 * (in_f - 1.0);
                outside = x < 0.0 || x > in_f - 1.0;
                x
            }
            Transform::PytorchHalfPixel if width == 1.0 => -0.5,
            Transform::PytorchHalfPixel | Transform::HalfPixel => (y + 0.5) / scale - 0.5,
            Transform::HalfPixelSymmetric => {
                let adjustment = out_f / width;
                let center = in_f / 2.0;
                let offset = center * (1.0 - adjustment);
                offset + (y + 0.5) / scale - 0.5
            }
        };
        if !x.is_finite() {
            return Err(unsupported(format!(
                "a source coordinate of {x} (scale {scale})"
            )));
        }
        let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
        let mut coeffs = kernel.coeffs(ratio, scale);
        let n = coeffs.len() as i64;
        if o == 0 {
            t.taps = n as u64;
        } else if t.taps != n as u64 {
            return Err(unsupported("a kernel whose width changes along the axis"));
        }
        let pad = (n + 1) / 2;
        let xp = x + pad as f64;
        let p = xp.floor();
        let frac = xp - p;
        let p = p as i64;
        let offset = if n % 2 == 0 {
            if frac == 0.0 {
                -(n / 2)
            } else {
                -(n / 2) + 1
            }
        } else {
            let base = -((n - 1) / 2);
            if frac <= 0.5 {
                base
            } else {
                base + 1
            }
        };
        let start = p + offset - pad;
        let idx: Vec<i64> = (0..n).map(|k| start + k).collect();
        if exclude_outside {
            for (c, &i) in coeffs.iter_mut().zip(&idx) {
                if i < 0 || i >= input as i64 {
                    *c = 0.0;
                }
            }
            let sum = coeffs.iter().fold(0.0, |s, &v| s + v);
            let sum = if sum == 0.0 { 1.0 } else { sum };
            coeffs.iter_mut().for_each(|c| *c /= sum);
        }
        t.index
            .extend(idx.iter().map(|&i| i.clamp(0, input as i64 - 1)));
        t.weights.extend(coeffs);
        t.outside.push(outside);
    }
    Ok(t)
}

impl Table {
    /// The single tap of each position with weight 1 when every other weight is 0 (nearest).
    fn single_taps(&self) -> Option<Vec<i64>> {
        let n = self.taps as usize;
        self.weights
            .chunks(n)
            .zip(self.index.chunks(n))
            .map(|(w, i)| {
                let ones: Vec<usize> = (0..n).filter(|&k| w[k] == 1.0).collect();
                let zeros = w.iter().filter(|&&v| v == 0.0).count();
                (ones.len() == 1 && zeros == n - 1).then(|| i[ones[0]])
            })
            .collect()
    }
}

/// The attributes and known inputs of a `Resize` node.
struct Params {
    axes: Vec<usize>,
    /// Per entry of `axes`: scale, output size, roi.
    scales: Vec<f64>,
    outs: Vec<u64>,
    roi: Option<Vec<(f64, f64)>>,
}

fn params(cx: &mut Cx, dims: &[u64], axes_attr: Option<Vec<i64>>, policy: &str) -> Res<Params> {
    let rank = dims.len();
    let axes: Vec<usize> = match axes_attr {
        Some(list) => {
            let normalized = list
                .iter()
                .map(|&a| super::axis(a, rank))
                .collect::<Res<Vec<_>>>()?;
            super::axes(&list, rank)?; // refuses repeats
            normalized
        }
        None => (0..rank).collect(),
    };
    let n = axes.len();
    let roi = cx.opt_known(1)?.map(|k| k.f64s()).transpose()?;
    let roi = match roi {
        Some(r) if !r.is_empty() => {
            if r.len() != 2 * n {
                return Err(invalid(format!("roi of {} values for {n} axes", r.len())));
            }
            Some((0..n).map(|i| (r[i], r[n + i])).collect())
        }
        _ => None,
    };
    let scales = cx
        .opt_known(2)?
        .map(|k| k.f64s())
        .transpose()?
        .filter(|s| !s.is_empty());
    let sizes = cx.opt_ints(3)?.filter(|s| !s.is_empty());
    let ins: Vec<u64> = axes.iter().map(|&a| dims[a]).collect();
    if ins.contains(&0) {
        return Err(unsupported("Resize of an empty tensor"));
    }
    let (scales, outs) = match (scales, sizes) {
        (Some(s), None) => {
            if s.len() != n || s.iter().any(|&v| !(v > 0.0 && v.is_finite())) {
                return Err(invalid(format!("scales {s:?} for {n} axes")));
            }
            let outs = s
                .iter()
                .zip(&ins)
                .map(|(&s, &i)| (s * i as f64) as u64)
                .collect();
            (s, outs)
        }
        (None, Some(sz)) => {
            if sz.len() != n || sz.iter().any(|&v| v < 0) {
                return Err(invalid(format!("sizes {sz:?} for {n} axes")));
            }
            let mut scales: Vec<f64> = sz
                .iter()
                .zip(&ins)
                .map(|(&s, &i)| s as f64 / i as f64)
                .collect();
            let mut outs: Vec<u64> = sz.iter().map(|&s| s as u64).collect();
            if policy != "stretch" {
                let s = if policy == "not_larger" {
                    scales.iter().copied().fold(f64::INFINITY, f64::min)
                } else {
                    scales.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                };
                scales = vec![s; n];
                outs = ins.iter().map(|&i| (s * i as f64 + 0.5) as u64).collect();
            }
            (scales, outs)
        }
        (Some(_), Some(_)) => return Err(invalid("both scales and sizes")),
        (None, None) => return Err(invalid("neither scales nor sizes")),
    };
    if outs.contains(&0) {
        return Err(unsupported(format!(
            "Resize to an empty tensor ({outs:?} along axes {axes:?})"
        )));
    }
    Ok(Params {
        axes,
        scales,
        outs,
        roi,
    })
}

pub(super) fn resize(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.op() == "Upsample" {
        return upsample(cx);
    }
    if cx.opset < 11 {
        return Err(unsupported(format!("Resize-{}", cx.opset.min(10))));
    }
    let x = cx.tensor(0)?;
    let dims = x
        .shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("Resize of symbolic shape {}", x.ty())))?;
    let antialias = cx.attrs.int("antialias", 0)?;
    let axes_attr = cx.attrs.ints("axes")?;
    let transform = cx
        .attrs
        .string("coordinate_transformation_mode", "half_pixel")?;
    let a = f64::from(cx.attrs.float("cubic_coeff_a", -0.75)?);
    let exclude_outside = cx.attrs.int("exclude_outside", 0)?;
    let extrapolation = f64::from(cx.attrs.float("extrapolation_value", 0.0)?);
    let policy = cx.attrs.string("keep_aspect_ratio_policy", "stretch")?;
    let mode = cx.attrs.string("mode", "nearest")?;
    let nearest_mode = cx.attrs.string("nearest_mode", "round_prefer_floor")?;
    if cx.opset < 18 && (antialias != 0 || axes_attr.is_some() || policy != "stretch") {
        return Err(invalid(format!(
            "antialias, axes or keep_aspect_ratio_policy in Resize-{}",
            cx.opset
        )));
    }
    let transform = match transform.as_str() {
        "half_pixel" => Transform::HalfPixel,
        "half_pixel_symmetric" if cx.opset >= 19 => Transform::HalfPixelSymmetric,
        "pytorch_half_pixel" => Transform::PytorchHalfPixel,
        "align_corners" => Transform::AlignCorners,
        "asymmetric" => Transform::Asymmetric,
        "tf_crop_and_resize" => Transform::TfCropAndResize,
        "tf_half_pixel_for_nn" if cx.opset == 11 => {
            return Err(unsupported(
                "coordinate_transformation_mode tf_half_pixel_for_nn",
            ))
        }
        other => {
            return Err(invalid(format!(
                "coordinate_transformation_mode `{other}` in Resize-{}",
                cx.opset
            )))
        }
    };
    if !matches!(antialias, 0 | 1) || !matches!(exclude_outside, 0 | 1) {
        return Err(invalid(format!(
            "antialias {antialias}, exclude_outside {exclude_outside}"
        )));
    }
    if !matches!(policy.as_str(), "stretch" | "not_larger" | "not_smaller") {
        return Err(invalid(format!("keep_aspect_ratio_policy `{policy}`")));
    }
    let antialias = antialias == 1;
    let kernel = match mode.as_str() {
        "nearest" => {
            if antialias {
                return Err(unsupported("antialias with mode nearest"));
            }
            Kernel::Nearest(match nearest_mode.as_str() {
                "round_prefer_floor" => Rounding::PreferFloor,
                "round_prefer_ceil" => Rounding::PreferCeil,
                "floor" => Rounding::Floor,
                "ceil" => Rounding::Ceil,
                other => return Err(invalid(format!("nearest_mode `{other}`"))),
            })
        }
        "linear" => Kernel::Linear { antialias },
        "cubic" => Kernel::Cubic { a, antialias },
        other => return Err(invalid(format!("mode `{other}`"))),
    };
    let p = params(cx, &dims, axes_attr, &policy)?;
    let mut tables = Vec::new();
    for (i, &axis) in p.axes.iter().enumerate() {
        let roi = p.roi.as_ref().map(|r| r[i]);
        let (scale, out) = (p.scales[i], p.outs[i]);
        let identity_roi = roi.is_none_or(|(lo, hi)| lo == 0.0 && isclose(hi, 1.0));
        if isclose(scale, 1.0) && out == dims[axis] && identity_roi {
            continue; // the reference skips the axis
        }
        if out > MAX_CONSTANT_ELEMENTS {
            return Err(unsupported(format!(
                "a resize to {out} along one axis (more than {MAX_CONSTANT_ELEMENTS} constants)"
            )));
        }
        let t = table(
            dims[axis],
            out,
            scale,
            transform,
            roi,
            kernel,
            exclude_outside == 1,
        )?;
        if t.out * t.taps > MAX_CONSTANT_ELEMENTS {
            return Err(unsupported(format!(
                "a resize table of {} × {} taps (more than {MAX_CONSTANT_ELEMENTS} constants)",
                t.out, t.taps
            )));
        }
        tables.push((axis, t));
    }
    let dtype = x.dtype();
    let any_outside = tables.iter().any(|(_, t)| t.outside.contains(&true));
    if any_outside && !dtype.is_float() && dtype.round_value(extrapolation) != extrapolation {
        return Err(unsupported(format!(
            "extrapolation_value {extrapolation} in {dtype}"
        )));
    }
    let nearest = matches!(kernel, Kernel::Nearest(_));
    let weighted = !nearest || tables.iter().any(|(_, t)| t.single_taps().is_none());
    if weighted && !dtype.is_float() {
        return Err(unsupported(format!("Resize mode {mode} of {dtype}")));
    }
    let compute = if weighted {
        compute_dtype(dtype)
    } else {
        dtype
    };
    let b = cx.b();
    let mut y = cast_to(&x, compute)?;
    let rank = dims.len();
    for (axis, t) in &tables {
        let (out, taps) = (t.out, t.taps);
        y = match t.single_taps().filter(|_| nearest) {
            Some(index) => {
                let idx = b.constant(DType::I64, Shape::of(&[out]), &as_f64(&index))?;
                y.gather(&idx, *axis)?
            }
            None => {
                let idx = b.constant(DType::I64, Shape::of(&[out, taps]), &as_f64(&t.index))?;
                let mut at = vec![1; rank + 1];
                (at[*axis], at[axis + 1]) = (out, taps);
                let w = b.constant(compute, Shape::of(&at), &t.weights)?;
                y.gather(&idx, *axis)?.mul(&w)?.sum(&[axis + 1], false)?
            }
        };
        if t.outside.contains(&true) {
            let mut at = vec![1; rank];
            at[*axis] = out;
            let mask: Vec<f64> = t.outside.iter().map(|&o| f64::from(u8::from(o))).collect();
            let mask = b.constant(DType::Bool, Shape::of(&at), &mask)?;
            y = mask.select(&b.scalar(compute, extrapolation)?, &y)?;
        }
    }
    Ok(vec![cast_to(&y, dtype)?.into()])
}

/// Indices as constant values (tables are small, far below 2^53).
fn as_f64(v: &[i64]) -> Vec<f64> {
    v.iter().map(|&i| i as f64).collect()
}

/// `Upsample` (deprecated since opset 10): nearest with integer scales only, each input element
/// repeated `scale` times along its axis (the reference implements nothing else).
fn upsample(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let dims = x
        .shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("Upsample of symbolic shape {}", x.ty())))?;
    let mode = cx.attrs.string("mode", "nearest")?;
    let scales: Vec<f64> = if cx.opset < 9 {
        cx.attrs
            .floats("scales")?
            .ok_or_else(|| invalid("Upsample without scales"))?
            .into_iter()
            .map(f64::from)
            .collect()
    } else {
        cx.known(1)?.f64s()?
    };
    if mode != "nearest" {
        return Err(unsupported(format!("Upsample mode `{mode}`")));
    }
    if scales.len() != dims.len() || scales.iter().any(|&s| s.is_nan() || s < 1.0) {
        return Err(invalid(format!(
            "Upsample scales {scales:?} for {}",
            x.ty()
        )));
    }
    if scales.iter().any(|&s| s.fract() != 0.0) {
        return Err(unsupported(format!(
            "Upsample of non-integer scales {scales:?}"
        )));
    }
    let b = cx.b();
    let mut y = x;
    for (axis, (&s, &d)) in scales.iter().zip(&dims).enumerate() {
        if s == 1.0 || d == 0 {
            continue;
        }
        let out = (s as u64)
            .checked_mul(d)
            .filter(|&o| o <= MAX_CONSTANT_ELEMENTS)
            .ok_or_else(|| {
                unsupported(format!(
                    "Upsample of axis {d} by {s} (more than {MAX_CONSTANT_ELEMENTS} constants)"
                ))
            })?;
        let idx: Vec<f64> = (0..out).map(|o| (o / s as u64) as f64).collect();
        let idx = b.constant(DType::I64, Shape::of(&[out]), &idx)?;
        y = y.gather(&idx, axis)?;
    }
    Ok(vec![y.into()])
}
