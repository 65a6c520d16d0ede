//! Spectral ops: `DFT` (opsets 17 and 20) and `STFT` as one product with a matrix of cosines
//! and sines built at import, and `MelWeightMatrix` as a constant.
//!
//! Takes a float signal `[..., 1]` (real) or `[..., 2]` (complex) whose transformed axis is
//! static, a `dft_length` and `axis` known at import, `STFT`'s `frame_step` and `frame_length`
//! known at import and its window at run time. Guarantees: NumPy's `fft`, `ifft` and `irfft`
//! along the axis (the input cropped or zero-padded to `dft_length`; a one-sided inverse reads
//! the first `dft_length / 2 + 1` bins as the half of a Hermitian spectrum); the matrix computed
//! in f64 and rounded once to the compute dtype (f32 for 16-bit floats, which are rounded once
//! at the end). The cost is one matmul of `[rows, m·c] × [m·c, out·c']`; a matrix past
//! [`MAX_CONSTANT_ELEMENTS`] entries is refused.

use super::{axis, cast_to, compute_dtype, Cx, Res};
use crate::known::Known;
use crate::model::dtype_of;
use crate::state::Value;
use crate::{invalid, unsupported};
use std::f64::consts::PI;
use tir_graph::op::{ConstData, MAX_CONSTANT_ELEMENTS};
use tir_graph::{DType, Dim, F64Tensor, HostTensor, ReshapeDim, Shape, Tensor};

/// Which transform, of how many points.
#[derive(Clone, Copy)]
struct Transform {
    n: u64,
    inverse: bool,
    onesided: bool,
}

impl Transform {
    /// The length of the transformed axis in the output.
    fn out_len(self) -> u64 {
        match (self.inverse, self.onesided) {
            (false, true) => self.n / 2 + 1,
            _ => self.n,
        }
    }

    /// The parts (1: real, 2: complex) of each output element.
    fn out_parts(self) -> u64 {
        if self.inverse && self.onesided {
            1
        } else {
            2
        }
    }

    /// The weight of input part `p` of bin `k` in output part `q` of element `j`.
    fn weight(self, j: u64, q: u64, k: u64, p: u64) -> f64 {
        let n = self.n;
        // A one-sided inverse reads only the first half; the rest of the input is cropped.
        let read = if self.inverse && self.onesided {
            n / 2 + 1
        } else {
            n
        };
        if k >= read {
            return 0.0;
        }
        // The angle reduced mod n first, so large products lose no precision.
        let theta = 2.0 * PI * ((j * k) % n) as f64 / n as f64;
        let (c, s) = (theta.cos(), theta.sin());
        if !self.inverse {
            // (R + iI)(cos - i sin)
            return [[c, s], [-s, c]][q as usize][p as usize];
        }
        // (R + iI)(cos + i sin) / n; a one-sided spectrum counts each bin but DC and Nyquist twice.
        let twice = self.onesided && k != 0 && !(n.is_multiple_of(2) && k == n / 2);
        let scale = if twice { 2.0 } else { 1.0 } / n as f64;
        scale * [[c, -s], [s, c]][q as usize][p as usize]
    }

    /// The `[m·parts, out_len·out_parts]` matrix for an input of `m` bins of `parts` each.
    fn matrix(self, m: u64, parts: u64) -> Res<Vec<f64>> {
        let (o, qs) = (self.out_len(), self.out_parts());
        let len = m * parts * o * qs;
        if len > MAX_CONSTANT_ELEMENTS {
            return Err(unsupported(format!(
                "a DFT matrix of {len} entries ({m} bins in, {o} out; tir's constants hold at most {MAX_CONSTANT_ELEMENTS})"
            )));
        }
        let mut w = Vec::with_capacity(len as usize);
        for k in 0..m {
            for p in 0..parts {
                for j in 0..o {
                    for q in 0..qs {
                        w.push(self.weight(j, q, k, p));
                    }
                }
            }
        }
        Ok(w)
    }
}

pub(super) fn dft(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 17 {
        return Err(invalid("DFT is an op of opset 17 on"));
    }
    let inverse = cx.attrs.int("inverse", 0)? != 0;
    let onesided = cx.attrs.int("onesided", 0)? != 0;
    let a = if cx.opset >= 20 {
        match cx.opt_ints(2)?.as_deref() {
            None => -2,
            Some([a]) => *a,
            Some(other) => return Err(invalid(format!("axis {other:?} must be a scalar"))),
        }
    } else {
        cx.attrs.int("axis", 1)?
    };
    let length = match cx.opt_ints(1)?.as_deref() {
        None => None,
        Some([n]) if *n > 0 => Some(*n as u64),
        Some(other) => return Err(invalid(format!("dft_length {other:?} (a positive scalar)"))),
    };
    if inverse && !onesided {
        // The product below computes it (the one-sided inverse shares its code), but ONNX's
        // node tests expect NumPy's float32 rounding noise (2e-7 where the exact value is 0,
        // above their atol of 1e-7): enabling it needs a looser atol for those tests.
        return Err(unsupported(
            "DFT's two-sided inverse (pending the node tests' tolerance for NumPy's f32 noise)",
        ));
    }
    let x = cx.tensor(0)?;
    let a = axis(a, x.rank())?;
    if a + 1 == x.rank() {
        return Err(invalid(
            "DFT along the last axis (that of the real and imaginary parts)",
        ));
    }
    let m = static_dim(&x, a, "the transformed axis")?;
    let n = length.unwrap_or(if inverse && onesided {
        2 * (m.max(1) - 1)
    } else {
        m
    });
    if n == 0 {
        return Err(invalid(format!(
            "a DFT of 0 points ({} along axis {a})",
            x.ty()
        )));
    }
    let t = Transform {
        n,
        inverse,
        onesided,
    };
    let dtype = x.dtype();
    Ok(vec![transform(&x, a, t, dtype)?.into()])
}

fn static_dim(x: &Tensor, a: usize, what: &str) -> Res<u64> {
    x.shape().dims()[a]
        .as_static()
        .ok_or_else(|| unsupported(format!("{what} of {} is not static", x.ty())))
}

/// `t` of `x: [..., m at axis, ..., parts]` along `axis`: moved next to the parts, flattened
/// with them, multiplied by the matrix, and moved back; rounded to `out` at the end.
fn transform(x: &Tensor, axis: usize, t: Transform, out: DType) -> Res<Tensor> {
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(unsupported(format!("DFT of {dtype}")));
    }
    let r = x.rank();
    let parts = static_dim(x, r - 1, "the last axis")?;
    if parts != 1 && parts != 2 {
        return Err(invalid(format!(
            "signal {} (its last axis holds 1 or 2 parts)",
            x.ty()
        )));
    }
    let m = static_dim(x, axis, "the transformed axis")?;
    let work = compute_dtype(dtype);
    let (o, qs) = (t.out_len(), t.out_parts());
    let w = x
        .builder()
        .constant(work, Shape::of(&[m * parts, o * qs]), &t.matrix(m, parts)?)?;
    // The other axes in order, then the transformed one, then the parts.
    let mut perm: Vec<usize> = (0..r - 1).filter(|&i| i != axis).collect();
    perm.extend([axis, r - 1]);
    let moved = cast_to(x, work)?.permute(&perm)?;
    let rest: Vec<Dim> = perm[..r - 2]
        .iter()
        .map(|&i| x.shape().dims()[i].clone())
        .collect();
    let with = |tail: &[u64]| -> Vec<ReshapeDim> {
        let mut d: Vec<ReshapeDim> = rest.iter().cloned().map(ReshapeDim::Dim).collect();
        d.extend(tail.iter().map(|&n| ReshapeDim::Dim(Dim::Static(n))));
        d
    };
    let y = moved
        .reshape(&with(&[1, m * parts]))?
        .matmul(&w)?
        .reshape(&with(&[o, qs]))?;
    let mut back = vec![0; r];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    cast_to(&y.permute(&back)?, out)
}

pub(super) fn stft(cx: &mut Cx) -> Res<Vec<Value>> {
    let onesided = cx.attrs.int("onesided", 1)? != 0;
    let step = scalar(cx.ints(1)?, "frame_step")?;
    let frame_length = cx
        .opt_ints(3)?
        .map(|v| scalar(v, "frame_length"))
        .transpose()?;
    let x = cx.tensor(0)?;
    let window = cx.opt_tensor(2)?;
    if x.rank() != 3 {
        return Err(invalid(format!(
            "signal {} (`[batch, length, 1 or 2]`)",
            x.ty()
        )));
    }
    let len = static_dim(&x, 1, "the signal length")?;
    let window_len = match &window {
        Some(w) if w.rank() == 1 => Some(static_dim(w, 0, "the window length")?),
        Some(w) => return Err(invalid(format!("window {} (1-D)", w.ty()))),
        None => None,
    };
    let fl = match (frame_length, window_len) {
        (Some(f), Some(w)) if f != w => {
            return Err(invalid(format!("frame_length {f} and a window of {w}")))
        }
        (Some(f), _) | (None, Some(f)) => f,
        (None, None) => len,
    };
    if step == 0 || fl == 0 || fl > len {
        return Err(invalid(format!(
            "frames of {fl} every {step} over a signal of {len}"
        )));
    }
    let frames = 1 + (len - fl) / step;
    let positions: Vec<i64> = (0..frames)
        .flat_map(|f| (0..fl).map(move |i| (f * step + i) as i64))
        .collect();
    if positions.len() as u64 > MAX_CONSTANT_ELEMENTS {
        return Err(unsupported(format!(
            "STFT of {} frame positions",
            positions.len()
        )));
    }
    let b = x.builder();
    let table = b.constant_data(
        DType::I64,
        Shape::of(&[positions.len() as u64]),
        ConstData::Int(positions),
    )?;
    let dims = x.shape().into_dims();
    let framed = x.gather(&table, 1)?.reshape(&[
        ReshapeDim::Dim(dims[0].clone()),
        ReshapeDim::Dim(Dim::Static(frames)),
        ReshapeDim::Dim(Dim::Static(fl)),
        ReshapeDim::Dim(dims[2].clone()),
    ])?;
    let (dtype, work) = (x.dtype(), compute_dtype(x.dtype()));
    let framed = match window {
        Some(w) if w.dtype() != dtype => {
            return Err(unsupported(format!(
                "STFT of a {} signal with a {} window",
                x.dtype(),
                w.dtype()
            )))
        }
        Some(w) => cast_to(&framed, work)?.mul(&cast_to(&w, work)?.unsqueeze(&[1])?)?,
        None => framed,
    };
    let t = Transform {
        n: fl,
        inverse: false,
        onesided,
    };
    Ok(vec![transform(&framed, 2, t, dtype)?.into()])
}

fn scalar(v: Vec<i64>, what: &str) -> Res<u64> {
    match v[..] {
        [n] if n >= 0 => Ok(n as u64),
        _ => Err(invalid(format!("{what} {v:?} (a non-negative scalar)"))),
    }
}

/// `MelWeightMatrix`: `[dft_length / 2 + 1, num_mel_bins]` triangles over mel-spaced bins,
/// computed as ONNX's reference does (its edge frequencies' `log1p` in the input's precision,
/// the rest in f64) and rounded once to `output_datatype`.
pub(super) fn mel_weight_matrix(cx: &mut Cx) -> Res<Vec<Value>> {
    let to = cx.attrs.int("output_datatype", 1)?;
    let dtype = i32::try_from(to)
        .map_err(|_| invalid(format!("output_datatype {to}")))
        .and_then(|t| dtype_of(t).map_err(unsupported))?;
    if !dtype.is_float() {
        return Err(unsupported(format!("MelWeightMatrix of {dtype}")));
    }
    let bins = scalar(cx.ints(0)?, "num_mel_bins")?;
    let dft_length = scalar(cx.ints(1)?, "dft_length")?;
    let rate = scalar(cx.ints(2)?, "sample_rate")?;
    let (low, high) = (cx.known(3)?, cx.known(4)?);
    let mel = |k: &Known| -> Res<f64> {
        let v = match k.f64s()?[..] {
            [v] => v,
            _ => return Err(invalid("the edge frequencies must be scalars")),
        };
        // NumPy computes `2595 * log1p(f / 700)` in the scalar's own float type.
        Ok(match k.dtype() {
            DType::F32 => f64::from(2595.0f32 * (v as f32 / 700.0f32).ln_1p()),
            DType::F64 => 2595.0 * (v / 700.0).ln_1p(),
            other => return Err(unsupported(format!("MelWeightMatrix of {other} edges"))),
        } / 10f64.ln())
    };
    let (low_mel, high_mel) = (mel(&low)?, mel(&high)?);
    if rate == 0 || bins == 0 || dft_length == 0 {
        return Err(invalid(
            "num_mel_bins, dft_length and sample_rate must be positive",
        ));
    }
    let step = (high_mel - low_mel) / (bins + 2) as f64;
    let points: Vec<i64> = (0..bins + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + low_mel) / 2595.0 * 10f64.ln()).exp_m1();
            floor_div((dft_length + 1) as f64 * hz, rate as f64) as i64
        })
        .collect();
    let rows = dft_length / 2 + 1;
    let values = triangles(&points, rows, bins)?;
    let values: Vec<f64> = values.into_iter().map(|v| dtype.round_value(v)).collect();
    let t = F64Tensor::new(dtype, vec![rows, bins], values).map_err(|e| invalid(e.to_string()))?;
    Ok(vec![Known::data(HostTensor::from_f64(&t)?).into()])
}

/// NumPy's float `a // b` (from `fmod`, which can differ from `floor(a / b)` where the quotient
/// rounds up to an integer).
fn floor_div(a: f64, b: f64) -> f64 {
    let rem = a % b;
    let mut div = (a - rem) / b;
    if rem != 0.0 && (b < 0.0) != (rem < 0.0) {
        div -= 1.0;
    }
    let floor = div.floor();
    if div - floor > 0.5 {
        floor + 1.0
    } else {
        floor
    }
}

/// The `[rows, bins]` triangles with corners at `points` (bin `i` rises from `points[i]` to
/// `points[i + 1]` and falls to `points[i + 2]`), written in the reference's order.
fn triangles(points: &[i64], rows: u64, bins: u64) -> Res<Vec<f64>> {
    if rows * bins > MAX_CONSTANT_ELEMENTS {
        return Err(unsupported(format!("a mel matrix of {rows} x {bins}")));
    }
    let mut out = vec![0.0; (rows * bins) as usize];
    let mut set = |j: i64, i: u64, v: f64| -> Res<()> {
        // The reference's NumPy indexing would wrap a negative row or fail past the end.
        let row = u64::try_from(j)
            .ok()
            .filter(|&r| r < rows)
            .ok_or_else(|| unsupported(format!("a mel bin at spectrogram row {j} (of {rows})")))?;
        out[(row * bins + i) as usize] = v;
        Ok(())
    };
    for i in 0..bins {
        let [lo, mid, hi] = [0, 1, 2].map(|d| points[(i + d) as usize]);
        if mid == lo {
            set(mid, i, 1.0)?;
        } else {
            for j in lo..=mid {
                set(j, i, (j - lo) as f64 / (mid - lo) as f64)?;
            }
        }
        for j in mid..hi {
            set(j, i, (hi - j) as f64 / (hi - mid) as f64)?;
        }
    }
    Ok(out)
}
