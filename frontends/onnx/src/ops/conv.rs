//! Convolution and pooling over 1 to 3 spatial dims (`Conv`, `MaxPool`, `AveragePool`,
//! `LpPool`) on `[N, C, spatial...]` tensors of static channels and spatial dims (the batch may
//! be symbolic).
//!
//! A convolution is one IR `conv` (an implicit-GEMM kernel: the windows are read from the input
//! inside the matmul's K loop, never materialized), plus the bias. A pool gathers the input's
//! windows: the input padded (with 0, or the dtype's lowest value for a max), then one gather
//! per spatial axis at `stride · o + dilation · k`, giving `[N, C, out..., kernel...]`, whose
//! kernel axes it reduces. Output sizes, `auto_pad`, `ceil_mode` and `count_include_pad` follow
//! the operator spec: a window that `ceil_mode` lets run past the padded input reads nothing
//! there (it is padded with the neutral value and never counted in an average).

use super::{float, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// One spatial axis of a convolution or pool.
#[derive(Clone, Copy, Debug)]
struct Axis {
    size: u64,
    kernel: u64,
    stride: u64,
    dilation: u64,
    pad_begin: u64,
    pad_end: u64,
    out: u64,
}

impl Axis {
    /// The padded extent windows may read: the input and its pads, without `ceil_mode`'s tail.
    fn extent(&self) -> u64 {
        self.pad_begin + self.size + self.pad_end
    }

    /// Padding after the input that every window fits in, `ceil_mode`'s tail included.
    fn pad_after(&self) -> u64 {
        let span = (self.out - 1) * self.stride + self.dilation * (self.kernel - 1) + 1;
        span.saturating_sub(self.pad_begin + self.size)
    }

    /// How many taps of output `o`'s window fall in the extent, or in the input alone.
    fn taps(&self, o: u64, count_pads: bool) -> u64 {
        let (lo, hi) = if count_pads {
            (0, self.extent())
        } else {
            (self.pad_begin, self.pad_begin + self.size)
        };
        (0..self.kernel)
            .map(|k| o * self.stride + k * self.dilation)
            .filter(|p| (lo..hi).contains(p))
            .count() as u64
    }
}

/// The spatial axes of `x` for a kernel of `kernel` taps per axis, from the node's attributes.
/// The batch may be symbolic; channels and spatial dims must be static.
fn axes(cx: &mut Cx, x: &Tensor, kernel: &[u64], ceil_mode: bool) -> Res<Vec<Axis>> {
    let dims: Vec<u64> = x.shape().dims()[1.min(x.rank())..]
        .iter()
        .map(|d| d.as_static())
        .collect::<Option<_>>()
        .ok_or_else(|| unsupported(format!("{} of symbolic shape {}", cx.op(), x.ty())))?;
    let n = kernel.len();
    if dims.len() != n + 1 || !(1..=3).contains(&n) {
        return Err(invalid(format!(
            "{} of {} with a kernel of {n} spatial dims (1 to 3)",
            cx.op(),
            x.ty()
        )));
    }
    let positive = |name: &str| -> Res<Vec<u64>> {
        let v = cx.attrs.ints(name)?.unwrap_or_else(|| vec![1; n]);
        if v.len() != n || v.iter().any(|&s| s < 1) {
            return Err(invalid(format!("{name} {v:?} for {n} spatial dims")));
        }
        Ok(v.into_iter().map(|s| s as u64).collect())
    };
    let (strides, dilations) = (positive("strides")?, positive("dilations")?);
    let auto_pad = cx.attrs.string("auto_pad", "NOTSET")?;
    let pads = cx.attrs.ints("pads")?;
    if auto_pad != "NOTSET" && (pads.is_some() || ceil_mode) {
        return Err(invalid(format!(
            "auto_pad {auto_pad} together with explicit pads or ceil_mode"
        )));
    }
    let pads = pads.unwrap_or_else(|| vec![0; 2 * n]);
    if pads.len() != 2 * n || pads.iter().any(|&p| p < 0) {
        return Err(invalid(format!("pads {pads:?} for {n} spatial dims")));
    }
    (0..n)
        .map(|i| {
            let mut a = Axis {
                size: dims[i + 1],
                kernel: kernel[i],
                stride: strides[i],
                dilation: dilations[i],
                pad_begin: pads[i] as u64,
                pad_end: pads[i + n] as u64,
                out: 0,
            };
            let span = a.dilation * (a.kernel - 1) + 1;
            match auto_pad.as_str() {
                "NOTSET" => {}
                "VALID" => (a.pad_begin, a.pad_end) = (0, 0),
                "SAME_UPPER" | "SAME_LOWER" => {
                    let out = a.size.div_ceil(a.stride);
                    let total = ((out - 1) * a.stride + span).saturating_sub(a.size);
                    let small = total / 2;
                    let upper = auto_pad == "SAME_UPPER";
                    a.pad_begin = if upper { small } else { total - small };
                    a.pad_end = total - a.pad_begin;
                }
                other => return Err(invalid(format!("auto_pad `{other}`"))),
            }
            if a.extent() < span {
                return Err(unsupported(format!(
                    "a window of {span} over an axis of {} padded to {} (an empty output)",
                    a.size,
                    a.extent()
                )));
            }
            let room = a.extent() - span;
            a.out = if ceil_mode {
                let out = room.div_ceil(a.stride) + 1;
                // The last window must start inside the input or its leading pad.
                if (out - 1) * a.stride >= a.size + a.pad_begin {
                    out - 1
                } else {
                    out
                }
            } else {
                room / a.stride + 1
            };
            Ok(a)
        })
        .collect()
}

/// `[N, C, out..., kernel...]`: each output position's window of `x`, read through padding of
/// `pad_value`.
fn windows(x: &Tensor, axes: &[Axis], pad_value: f64) -> Res<Tensor> {
    let mut pads = vec![(0, 0), (0, 0)];
    pads.extend(axes.iter().map(|a| (a.pad_begin, a.pad_after())));
    let mut w = if pads.iter().all(|&p| p == (0, 0)) {
        x.clone()
    } else {
        x.pad(&pads, pad_value)?
    };
    let b = x.builder();
    for (i, a) in axes.iter().enumerate() {
        // Axis 2 + 2i becomes [out, kernel]: position `stride · o + dilation · k`.
        let starts = b
            .arange(DType::I64, a.out)?
            .mul_scalar(a.stride as f64)?
            .unsqueeze(&[1])?;
        let taps = b
            .arange(DType::I64, a.kernel)?
            .mul_scalar(a.dilation as f64)?
            .unsqueeze(&[0])?;
        w = w.gather(&starts.add(&taps)?, 2 + 2 * i)?;
    }
    let n = axes.len();
    let mut perm = vec![0, 1];
    perm.extend((0..n).map(|i| 2 + 2 * i));
    perm.extend((0..n).map(|i| 3 + 2 * i));
    Ok(w.permute(&perm)?)
}

/// The kernel axes of `windows`' result.
fn kernel_axes(n: usize) -> Vec<usize> {
    (2 + n..2 + 2 * n).collect()
}

/// The lowest value of `dtype`: a max pool's padding.
fn lowest(dtype: DType) -> f64 {
    match dtype {
        DType::I8 => f64::from(i8::MIN),
        DType::I16 => f64::from(i16::MIN),
        d if d.is_unsigned_int() || d == DType::Bool => 0.0,
        DType::I32 => f64::from(i32::MIN),
        DType::I64 => i64::MIN as f64,
        _ => f64::NEG_INFINITY,
    }
}

fn kernel_shape(cx: &mut Cx) -> Res<Vec<u64>> {
    let k = cx
        .attrs
        .ints("kernel_shape")?
        .ok_or_else(|| invalid("no kernel_shape"))?;
    if k.iter().any(|&k| k < 1) {
        return Err(invalid(format!("kernel_shape {k:?}")));
    }
    Ok(k.into_iter().map(|k| k as u64).collect())
}

pub(super) fn pool(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let kernel = kernel_shape(cx)?;
    let ceil_mode = cx.attrs.int("ceil_mode", 0)? != 0;
    let axes = axes(cx, &x, &kernel, ceil_mode)?;
    let reduced = kernel_axes(axes.len());
    let op = cx.op().to_string();
    let y = match op.as_str() {
        "MaxPool" => {
            let column_major = match cx.attrs.int("storage_order", 0)? {
                0 => false,
                1 => true,
                other => return Err(invalid(format!("storage_order {other}"))),
            };
            if !x.dtype().is_numeric() {
                return Err(unsupported(format!("MaxPool of {}", x.dtype())));
            }
            if cx.node.output.get(1).is_some_and(|o| !o.is_empty()) {
                if cx.opset < 8 {
                    return Err(invalid("MaxPool has an Indices output from opset 8 on"));
                }
                if x.shape().static_dims().is_none() {
                    return Err(unsupported(format!(
                        "MaxPool's Indices of {} (a symbolic batch)",
                        x.ty()
                    )));
                }
                let (y, indices) = max_with_indices(&x, &axes, column_major)?;
                return Ok(vec![y.into(), indices.into()]);
            }
            windows(&x, &axes, lowest(x.dtype()))?.max(&reduced, false)?
        }
        "AveragePool" => {
            let count_pads = cx.attrs.int("count_include_pad", 0)? != 0;
            float(&x, &op)?;
            let sum = windows(&x, &axes, 0.0)?.sum(&reduced, false)?;
            sum.div(&tap_counts(&x, &axes, count_pads)?)?
        }
        _ => {
            let p = cx.attrs.int("p", 2)?;
            float(&x, &op)?;
            if p < 1 {
                return Err(invalid(format!("p = {p}")));
            }
            let w = windows(&x, &axes, 0.0)?.abs()?;
            let powered = if p == 1 {
                w
            } else {
                w.pow(&scalar(&x, p as f64)?)?
            };
            let sum = powered.sum(&reduced, false)?;
            if p == 1 {
                sum
            } else {
                sum.pow(&scalar(&x, 1.0 / p as f64)?)?
            }
        }
    };
    Ok(vec![y.into()])
}

/// MaxPool's two outputs: each window's max and, as ONNX's Indices, the flat position in `x`
/// (`[N, C, spatial...]`, the spatial part row- or column-major) of the window's first element
/// (in window order) equal to that max. A NaN in a window makes its max NaN (tir's max
/// propagates NaN), and its index that of the first NaN. Padding is never picked, even where it
/// ties with the max (the dtype's lowest value).
fn max_with_indices(x: &Tensor, axes: &[Axis], column_major: bool) -> Res<(Tensor, Tensor)> {
    if axes
        .iter()
        .any(|a| (0..a.out).any(|o| a.taps(o, false) == 0))
    {
        return Err(unsupported(
            "MaxPool's Indices of a window wholly in the padding (it picks no element)",
        ));
    }
    let reduced = kernel_axes(axes.len());
    let w = windows(x, axes, lowest(x.dtype()))?;
    let top = w.max(&reduced, true)?;
    let mut hit = w.eq(&top)?;
    if x.dtype().is_float() {
        hit = hit.or(&w.ne(&w)?)?;
    }
    // Within a window the row-major spatial position grows in window order, so the first hit
    // is the one at the least position; the padding is at position -1.
    let b = x.builder();
    let spatial: Vec<u64> = axes.iter().map(|a| a.size).collect();
    let count: u64 = spatial.iter().product();
    let places = windows(&spatial_positions(x, &spatial)?, axes, -1.0)?;
    let hit = hit.and(&places.ge(&b.scalar(DType::I64, 0.0)?)?)?;
    let none = b.scalar(DType::I64, count as f64)?;
    let mut first = hit.select(&places, &none)?.min(&reduced, false)?;
    if column_major && spatial.len() > 1 {
        first = column_major_of(x, &spatial)?.gather(&first, 0)?;
    }
    let y = top.squeeze(&reduced)?;
    Ok((y, first.add(&plane_offsets(x, count)?)?))
}

/// `[1, 1, spatial...]` (i64): each spatial element's row-major position.
fn spatial_positions(x: &Tensor, spatial: &[u64]) -> Res<Tensor> {
    let mut dims = vec![1, 1];
    dims.extend_from_slice(spatial);
    let count = spatial.iter().product();
    Ok(x.builder()
        .arange(DType::I64, count)?
        .reshape_to(&Shape::of(&dims))?)
}

/// `[count]` (i64): at each row-major spatial position, the column-major one.
fn column_major_of(x: &Tensor, spatial: &[u64]) -> Res<Tensor> {
    let count: u64 = spatial.iter().product();
    let values: Vec<f64> = (0..count)
        .map(|mut p| {
            let (mut column, mut stride) = (0, 1);
            let mut coords = vec![0; spatial.len()];
            for (c, &d) in coords.iter_mut().zip(spatial).rev() {
                *c = p % d;
                p /= d;
            }
            for (&c, &d) in coords.iter().zip(spatial) {
                column += c * stride;
                stride *= d;
            }
            column as f64
        })
        .collect();
    Ok(x.builder()
        .constant(DType::I64, Shape::of(&[count]), &values)?)
}

/// `[N, C, 1...]` (i64): where each `(n, c)` plane of `count` elements starts in `x` flattened.
fn plane_offsets(x: &Tensor, count: u64) -> Res<Tensor> {
    let dims = x.shape().static_dims().expect("static: axes checked it");
    let b = x.builder();
    let along = |axis: usize, stride: u64| -> Res<Tensor> {
        let mut at = vec![1; dims.len()];
        at[axis] = dims[axis];
        Ok(b.arange(DType::I64, dims[axis])?
            .reshape_to(&Shape::of(&at))?
            .mul_scalar(stride as f64)?)
    };
    Ok(along(0, dims[1] * count)?.add(&along(1, count)?)?)
}

fn scalar(like: &Tensor, value: f64) -> Res<Tensor> {
    Ok(like.builder().scalar(like.dtype(), value)?)
}

/// The number of taps each output position averages, `[1, 1, out...]` in `x`'s dtype: the
/// product over axes of the taps inside the input (and its pads, with `count_pads`).
fn tap_counts(x: &Tensor, axes: &[Axis], count_pads: bool) -> Res<Tensor> {
    let b = x.builder();
    let mut counts: Option<Tensor> = None;
    for (i, a) in axes.iter().enumerate() {
        let values: Vec<f64> = (0..a.out).map(|o| a.taps(o, count_pads) as f64).collect();
        let mut at = vec![1; axes.len() + 2];
        at[i + 2] = a.out;
        let c = b.constant(x.dtype(), Shape::of(&at), &values)?;
        counts = Some(match counts {
            Some(prev) => prev.mul(&c)?,
            None => c,
        });
    }
    Ok(counts.expect("at least one spatial axis"))
}

pub(super) fn conv(cx: &mut Cx) -> Res<Vec<Value>> {
    let (x, w, bias) = (cx.tensor(0)?, cx.tensor(1)?, cx.opt_tensor(2)?);
    float(&x, "Conv")?;
    let wdims = w
        .shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("Conv weights of symbolic shape {}", w.ty())))?;
    let groups = cx.attrs.int("group", 1)?;
    if wdims.len() < 3 || groups < 1 || w.dtype() != x.dtype() {
        return Err(invalid(format!(
            "Conv of {} with weights {} in {groups} groups",
            x.ty(),
            w.ty()
        )));
    }
    let kernel = wdims[2..].to_vec();
    if let Some(k) = cx.attrs.ints("kernel_shape")? {
        if k.iter().map(|&k| k as u64).ne(kernel.iter().copied()) {
            return Err(invalid(format!(
                "kernel_shape {k:?} for weights {}",
                w.ty()
            )));
        }
    }
    let axes = axes(cx, &x, &kernel, false)?;
    let channels = x.shape().dims()[1]
        .as_static()
        .expect("static: axes checked it");
    let (g, m) = (groups as u64, wdims[0]);
    if channels % g != 0 || m % g != 0 || wdims[1] * g != channels {
        return Err(invalid(format!(
            "{channels} input channels and weights {} do not split into {g} groups",
            w.ty()
        )));
    }
    let strides: Vec<u64> = axes.iter().map(|a| a.stride).collect();
    let dilations: Vec<u64> = axes.iter().map(|a| a.dilation).collect();
    let pads: Vec<(u64, u64)> = axes.iter().map(|a| (a.pad_begin, a.pad_end)).collect();
    let n = axes.len();
    let mut y = x.conv(&w, &strides, &dilations, &pads, g)?;
    if let Some(bias) = bias {
        y = y.add(&bias.unsqueeze(&(1..=n).collect::<Vec<_>>())?)?;
    }
    Ok(vec![y.into()])
}
