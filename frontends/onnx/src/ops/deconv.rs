//! Transposed convolution (`ConvTranspose`) over 1 to 3 spatial dims of `[N, C, spatial...]`
//! tensors with static channels, spatial dims and weights (the batch may be symbolic).
//!
//! Along each spatial axis the output is `y[o] = Σ x[i]·w[k]` over `s·i + d·k − pad_begin = o`,
//! `o` in `0..out`. That is one IR `conv` (stride 1, dilation `d`) of the input with `s − 1`
//! zeros inserted between elements (unsqueeze, pad, reshape) against the weights flipped along
//! each spatial axis (a reversed gather) and regrouped from `[C, M/g, k...]` to
//! `[M, C/g, k...]`, padded by `d·(k−1) − pad_begin` before (a negative pad slices the input
//! instead). The zeros cost `s` times the multiply-adds per strided axis; the weights' flip and
//! regroup is a copy of the weights.
//!
//! Output size and pads follow ONNX's reference implementation, which made the node tests:
//! explicit `pads` give `out = s·(n−1) + output_padding + d·(k−1) + 1 − pads`; `auto_pad`
//! SAME_UPPER/SAME_LOWER take `out` from `output_shape` (else `n·s`) and split the total
//! padding, the extra one at the end (UPPER) or the start (LOWER); NOTSET or VALID with
//! `output_shape` keep `pad_begin = 0` and cut or zero-extend the end. Where the spec's text
//! and the reference disagree (`output_shape` with explicit pads, or cropping under NOTSET),
//! the node is refused.

use super::{float, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Dim, ReshapeDim, Shape, Tensor};

/// One spatial axis: the input size, kernel, stride, dilation, and the resolved output size
/// and leading pad (which may be negative: the output starts inside the full result).
#[derive(Clone, Copy, Debug)]
struct Axis {
    size: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
    pad_begin: i64,
    out: i64,
}

impl Axis {
    /// The span of one kernel window, `d·(k−1) + 1`.
    fn span(&self) -> i64 {
        self.dilation * (self.kernel - 1) + 1
    }

    /// The length of the input once zeros are inserted, `s·(n−1) + 1`.
    fn dilated(&self) -> i64 {
        self.stride * (self.size - 1) + 1
    }
}

/// An attribute of one positive value per spatial axis (default 1).
fn per_axis(cx: &mut Cx, name: &str, n: usize, min: i64) -> Res<Vec<i64>> {
    let v = cx.attrs.ints(name)?.unwrap_or_else(|| vec![min.max(1); n]);
    if v.len() != n || v.iter().any(|&s| s < min) {
        return Err(invalid(format!("{name} {v:?} for {n} spatial dims")));
    }
    Ok(v)
}

/// The spatial axes of a transposed convolution of `sizes` by a kernel of `kernel`.
fn axes(cx: &mut Cx, sizes: &[i64], kernel: &[i64]) -> Res<Vec<Axis>> {
    let n = sizes.len();
    let strides = per_axis(cx, "strides", n, 1)?;
    let dilations = per_axis(cx, "dilations", n, 1)?;
    let extra = match cx.attrs.ints("output_padding")? {
        Some(v) if v.len() == n && v.iter().all(|&p| p >= 0) => v,
        Some(v) => {
            return Err(invalid(format!(
                "output_padding {v:?} for {n} spatial dims"
            )))
        }
        None => vec![0; n],
    };
    let auto_pad = cx.attrs.string("auto_pad", "NOTSET")?;
    let pads = cx.attrs.ints("pads")?;
    let output_shape = cx.attrs.ints("output_shape")?;
    if let Some(p) = &pads {
        if p.len() != 2 * n || p.iter().any(|&p| p < 0) || auto_pad != "NOTSET" {
            return Err(invalid(format!("pads {p:?} with auto_pad {auto_pad}")));
        }
        if output_shape.is_some() {
            return Err(unsupported(
                "ConvTranspose with both pads and output_shape (the spec ignores the pads, \
                 ONNX's reference keeps them)",
            ));
        }
    }
    if let Some(o) = &output_shape {
        if o.len() != n || o.iter().any(|&o| o < 1) {
            return Err(invalid(format!("output_shape {o:?} for {n} spatial dims")));
        }
    }
    (0..n)
        .map(|i| {
            let mut a = Axis {
                size: sizes[i],
                kernel: kernel[i],
                stride: strides[i],
                dilation: dilations[i],
                pad_begin: 0,
                out: 0,
            };
            let full = a.dilated() - 1 + extra[i] + a.span();
            let given = output_shape.as_ref().map(|o| o[i]);
            match (auto_pad.as_str(), &pads) {
                (_, Some(p)) => {
                    a.pad_begin = p[i];
                    a.out = full - p[i] - p[i + n];
                }
                ("SAME_UPPER" | "SAME_LOWER", None) => {
                    a.out = given.unwrap_or(a.size * a.stride);
                    let total = full - a.out;
                    let half = total.div_euclid(2);
                    a.pad_begin = if auto_pad == "SAME_UPPER" {
                        half
                    } else {
                        total - half
                    };
                }
                ("NOTSET" | "VALID", None) => {
                    a.out = given.unwrap_or(full);
                    if a.out < full {
                        return Err(unsupported(format!(
                            "ConvTranspose's output_shape {} below the full {full} under auto_pad \
                             {auto_pad} (the spec and ONNX's reference crop different ends)",
                            a.out
                        )));
                    }
                }
                (other, None) => return Err(invalid(format!("auto_pad `{other}`"))),
            }
            if a.out < 1 {
                return Err(invalid(format!(
                    "an output of {} along spatial axis {i}",
                    a.out
                )));
            }
            Ok(a)
        })
        .collect()
}

/// Static dims of `t` from `from` on, or `what` of a symbolic shape is unsupported.
fn static_dims(t: &Tensor, from: usize, what: &str) -> Res<Vec<i64>> {
    t.shape().dims()[from.min(t.rank())..]
        .iter()
        .map(|d| d.as_static().map(|d| d as i64))
        .collect::<Option<_>>()
        .ok_or_else(|| unsupported(format!("{what} of symbolic shape {}", t.ty())))
}

pub(super) fn conv_transpose(cx: &mut Cx) -> Res<Vec<Value>> {
    let (x, w, bias) = (cx.tensor(0)?, cx.tensor(1)?, cx.opt_tensor(2)?);
    float(&x, "ConvTranspose")?;
    let xdims = static_dims(&x, 1, "ConvTranspose")?;
    let wdims = static_dims(&w, 0, "ConvTranspose weights")?;
    let n = wdims.len().saturating_sub(2);
    let groups = cx.attrs.int("group", 1)?;
    if !(1..=3).contains(&n) || xdims.len() != n + 1 || w.dtype() != x.dtype() || groups < 1 {
        return Err(invalid(format!(
            "ConvTranspose of {} with weights {} in {groups} groups",
            x.ty(),
            w.ty()
        )));
    }
    if xdims[0] != wdims[0] || wdims[0] % groups != 0 {
        return Err(invalid(format!(
            "{} input channels and weights {} do not split into {groups} groups",
            xdims[0],
            w.ty()
        )));
    }
    let kernel = wdims[2..].to_vec();
    if let Some(k) = cx.attrs.ints("kernel_shape")? {
        if k != kernel {
            return Err(invalid(format!(
                "kernel_shape {k:?} for weights {}",
                w.ty()
            )));
        }
    }
    let axes = axes(cx, &xdims[1..], &kernel)?;
    let (input, pads) = zero_inserted(&x, &axes)?;
    let weights = flipped(&w, &wdims, groups)?;
    let dilations: Vec<u64> = axes.iter().map(|a| a.dilation as u64).collect();
    let mut y = input.conv(&weights, &vec![1; n], &dilations, &pads, groups as u64)?;
    if let Some(bias) = bias {
        y = y.add(&bias.unsqueeze(&(1..=n).collect::<Vec<_>>())?)?;
    }
    Ok(vec![y.into()])
}

/// `x` with `s − 1` zeros between elements along each strided axis, cut to the part the
/// output's windows read, and the conv pads (before, after) that complete those windows.
fn zero_inserted(x: &Tensor, axes: &[Axis]) -> Res<(Tensor, Vec<(u64, u64)>)> {
    let mut t = x.clone();
    let mut pads = Vec::with_capacity(axes.len());
    for (i, a) in axes.iter().enumerate() {
        let at = 2 + i;
        if a.stride > 1 {
            t = t.unsqueeze(&[at + 1])?;
            let mut p = vec![(0, 0); t.rank()];
            p[at + 1] = (0, a.stride as u64 - 1);
            t = t.pad(&p, 0.0)?;
            let mut dims: Vec<ReshapeDim> = t.shape().dims()[..at]
                .iter()
                .cloned()
                .map(ReshapeDim::Dim)
                .collect();
            dims[0] = ReshapeDim::Infer;
            dims.push(ReshapeDim::Dim(Dim::Static((a.size * a.stride) as u64)));
            dims.extend(
                t.shape().dims()[at + 2..]
                    .iter()
                    .cloned()
                    .map(ReshapeDim::Dim),
            );
            t = t.reshape(&dims)?;
        }
        // The windows read [start, start + out + d·(k−1)) of the zero-inserted input.
        let start = a.pad_begin - a.dilation * (a.kernel - 1);
        let stop = start + a.out + a.span() - 1;
        let (lo, hi) = (start.max(0), stop.min(a.dilated()));
        if lo >= hi {
            return Err(unsupported(format!(
                "a ConvTranspose output window along spatial axis {i} that misses the input"
            )));
        }
        if (lo, hi) != (0, a.size * a.stride) {
            t = t.slice_axis(at, lo as u64, hi as u64)?;
        }
        pads.push(((lo - start) as u64, (stop - hi) as u64));
    }
    Ok((t, pads))
}

/// ONNX's `[C, M/g, k...]` weights as a conv's `[M, C/g, k...]`, each kernel flipped.
fn flipped(w: &Tensor, wdims: &[i64], groups: i64) -> Res<Tensor> {
    let b = w.builder();
    let mut t = w.clone();
    for (i, &k) in wdims[2..].iter().enumerate() {
        if k > 1 {
            let reversed: Vec<f64> = (0..k).rev().map(|j| j as f64).collect();
            let idx = b.constant(DType::I64, Shape::of(&[k as u64]), &reversed)?;
            t = t.gather(&idx, 2 + i)?;
        }
    }
    let (c, m) = (wdims[0] as u64, wdims[1] as u64);
    let g = groups as u64;
    let kernel: Vec<u64> = wdims[2..].iter().map(|&k| k as u64).collect();
    let mut grouped = vec![g, c / g, m];
    grouped.extend(&kernel);
    let mut perm = vec![0, 2, 1];
    perm.extend(3..3 + kernel.len());
    let mut out = vec![g * m, c / g];
    out.extend(&kernel);
    Ok(t.reshape_to(&Shape::of(&grouped))?
        .permute(&perm)?
        .reshape_to(&Shape::of(&out))?)
}
