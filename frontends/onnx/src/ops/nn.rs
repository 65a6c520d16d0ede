//! Products, normalizations, softmax and reductions.

use super::{axes, axis, cast_to, float, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Tensor};

pub(super) fn matmul(cx: &mut Cx) -> Res<Vec<Value>> {
    let m = Matrices::new(cx.tensor(0)?, cx.tensor(1)?)?;
    Ok(vec![m.restore(m.a.matmul(&m.b)?)?.into()])
}

/// The operands of a NumPy-style matmul as matrices (or stacks): a 1-D `a` promoted to a row,
/// a 1-D `b` to a column; [`Matrices::restore`] removes those axes from the product again.
pub(super) struct Matrices {
    pub a: Tensor,
    pub b: Tensor,
    a1: bool,
    b1: bool,
}

impl Matrices {
    pub fn new(a: Tensor, b: Tensor) -> Res<Matrices> {
        if a.rank() == 0 || b.rank() == 0 {
            return Err(invalid("a matrix product of a scalar"));
        }
        let (a1, b1) = (a.rank() == 1, b.rank() == 1);
        let a = if a1 { a.unsqueeze(&[0])? } else { a };
        let b = if b1 { b.unsqueeze(&[1])? } else { b };
        Ok(Matrices { a, b, a1, b1 })
    }

    /// `y` (a product of the promoted operands) without the axes the promotion added.
    pub fn restore(&self, mut y: Tensor) -> Res<Tensor> {
        if self.b1 {
            y = y.squeeze(&[y.rank() - 1])?;
        }
        if self.a1 {
            y = y.squeeze(&[y.rank() - if self.b1 { 1 } else { 2 }])?;
        }
        Ok(y)
    }
}

pub(super) fn gemm(cx: &mut Cx) -> Res<Vec<Value>> {
    let alpha = f64::from(cx.attrs.float("alpha", 1.0)?);
    let beta = f64::from(cx.attrs.float("beta", 1.0)?);
    let trans_a = cx.attrs.int("transA", 0)? != 0;
    let trans_b = cx.attrs.int("transB", 0)? != 0;
    cx.attrs.ignore("broadcast"); // opsets before 7: C broadcasts either way here
    let (a, b, c) = (cx.tensor(0)?, cx.tensor(1)?, cx.opt_tensor(2)?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(invalid("Gemm operands must be matrices"));
    }
    let a = if trans_a { a.transpose()? } else { a };
    let b = if trans_b { b.transpose()? } else { b };
    let mut y = a.matmul(&b)?;
    if alpha != 1.0 {
        y = y.mul_scalar(alpha)?;
    }
    if let Some(c) = c {
        let c = if beta != 1.0 { c.mul_scalar(beta)? } else { c };
        y = y.add(&c)?;
    }
    Ok(vec![y.into()])
}

/// `(x - max) ` and its exp, over `axes` (kept).
pub(super) fn softmax(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let rank = x.rank();
    // Before opset 13 the input is coerced to 2-D at `axis` (default 1): all axes from it on.
    let list: Vec<usize> = if cx.opset < 13 {
        let a = cx.attrs.int("axis", 1)?;
        let a = if a < 0 { a + rank as i64 } else { a };
        if !(0..=rank as i64).contains(&a) {
            return Err(invalid(format!("axis {a} out of range for rank {rank}")));
        }
        (a as usize..rank).collect()
    } else {
        vec![axis(cx.attrs.int("axis", -1)?, rank)?]
    };
    if !x.dtype().is_float() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    if list.is_empty() {
        return Ok(vec![x.into()]);
    }
    let shifted = x.sub(&x.max(&list, true)?)?;
    let e = shifted.exp()?;
    let y = if cx.op() == "LogSoftmax" {
        shifted.sub(&e.sum(&list, true)?.log()?)?
    } else {
        e.div(&e.sum(&list, true)?)?
    };
    Ok(vec![y.into()])
}

/// The normalized axes `axis..rank` and the dtype statistics are computed in (`stash_type`).
fn norm_setup(cx: &mut Cx, x: &Tensor) -> Res<(Vec<usize>, DType)> {
    let rank = x.rank();
    let a = axis(cx.attrs.int("axis", -1)?, rank)?;
    let stash = match cx.attrs.int("stash_type", 1)? {
        1 => DType::F32,
        11 => DType::F64,
        other => return Err(unsupported(format!("stash_type {other}"))),
    };
    if !x.dtype().is_float() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    // Statistics are never computed in a narrower type than the input's.
    let stash = if x.dtype() == DType::F64 {
        DType::F64
    } else {
        stash
    };
    Ok(((a..rank).collect(), stash))
}

pub(super) fn layer_norm(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let (list, stash) = norm_setup(cx, &x)?;
    let eps = f64::from(cx.attrs.float("epsilon", 1e-5)?);
    let (scale, bias) = (cx.tensor(1)?, cx.opt_tensor(2)?);
    let xs = cast_to(&x, stash)?;
    let mean = xs.mean(&list, true)?;
    let centered = xs.sub(&mean)?;
    let var = centered.mul(&centered)?.mean(&list, true)?;
    let inv_std = var.add_scalar(eps)?.rsqrt()?;
    let normalized = cast_to(&centered.mul(&inv_std)?, x.dtype())?;
    let mut y = normalized.mul(&scale)?;
    if let Some(bias) = bias {
        y = y.add(&bias)?;
    }
    Ok(vec![y.into(), mean.into(), inv_std.into()])
}

pub(super) fn rms_norm(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let (list, stash) = norm_setup(cx, &x)?;
    let eps = f64::from(cx.attrs.float("epsilon", 1e-5)?);
    let scale = cx.tensor(1)?;
    let xs = cast_to(&x, stash)?;
    let inv_rms = xs.mul(&xs)?.mean(&list, true)?.add_scalar(eps)?.rsqrt()?;
    let normalized = cast_to(&xs.mul(&inv_rms)?, x.dtype())?;
    Ok(vec![normalized.mul(&scale)?.into()])
}

pub(super) fn reduce(cx: &mut Cx) -> Res<Vec<Value>> {
    let keepdims = cx.attrs.int("keepdims", 1)? != 0;
    let noop_empty = cx.attrs.int("noop_with_empty_axes", 0)? != 0;
    // Axes moved from an attribute to an input: ReduceSum at opset 13, the others at 18.
    let axes_input = cx.opset >= if cx.op() == "ReduceSum" { 13 } else { 18 };
    let list = if axes_input {
        cx.opt_ints(1)?
    } else {
        cx.attrs.ints("axes")?
    };
    let x = cx.tensor(0)?;
    let rank = x.rank();
    let list = match list {
        Some(l) if !l.is_empty() => axes(&l, rank)?,
        _ if noop_empty => return Ok(vec![x.into()]),
        _ => (0..rank).collect(),
    };
    // The max and min of bools are their `or` and `and`: computed on u8 (0 and 1) and cast back.
    if x.dtype() == DType::Bool && matches!(cx.op(), "ReduceMax" | "ReduceMin") {
        let bytes = x.cast(DType::U8)?;
        let y = if cx.op() == "ReduceMax" {
            bytes.max(&list, keepdims)?
        } else {
            bytes.min(&list, keepdims)?
        };
        return Ok(vec![y.cast(DType::Bool)?.into()]);
    }
    if !x.dtype().is_numeric() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    let y = match cx.op() {
        "ReduceSum" => x.sum(&list, keepdims)?,
        "ReduceMean" => x.mean(&list, keepdims)?,
        "ReduceMax" => x.max(&list, keepdims)?,
        "ReduceMin" => x.min(&list, keepdims)?,
        "ReduceProd" => x.prod(&list, keepdims)?,
        "ReduceSumSquare" => x.mul(&x)?.sum(&list, keepdims)?,
        "ReduceL1" => x.abs()?.sum(&list, keepdims)?,
        "ReduceL2" => float(&x, cx.op())?.mul(&x)?.sum(&list, keepdims)?.sqrt()?,
        "ReduceLogSum" => float(&x, cx.op())?.sum(&list, keepdims)?.log()?,
        "ReduceLogSumExp" => {
            let m = float(&x, cx.op())?.max(&list, true)?;
            let s = x.sub(&m)?.exp()?.sum(&list, true)?.log()?.add(&m)?;
            if keepdims {
                s
            } else {
                s.squeeze(&list)?
            }
        }
        other => unreachable!("{other} is not a reduction"),
    };
    Ok(vec![y.into()])
}

pub(super) fn arg_extreme(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let a = axis(cx.attrs.int("axis", 0)?, x.rank())?;
    let keepdims = cx.attrs.int("keepdims", 1)? != 0;
    let last = cx.attrs.int("select_last_index", 0)? != 0;
    let pick = |t: &Tensor| {
        if cx.op() == "ArgMax" {
            t.argmax(a, keepdims)
        } else {
            t.argmin(a, keepdims)
        }
    };
    if !last {
        return Ok(vec![pick(&x)?.into()]);
    }
    // The last extreme is `n - 1 -` the first extreme of the axis reversed.
    let Some(n) = x.shape().dims()[a].as_static() else {
        return Err(unsupported("select_last_index over a symbolic axis"));
    };
    let b = cx.b();
    let reversed: Vec<f64> = (0..n).rev().map(|i| i as f64).collect();
    let indices = b.constant(DType::I64, tir_graph::Shape::of(&[n]), &reversed)?;
    let first = pick(&x.gather(&indices, a)?)?;
    let y = b.scalar(DType::I64, n as f64 - 1.0)?.sub(&first)?;
    Ok(vec![y.into()])
}

pub(super) fn hardmax(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let a = axis(cx.attrs.int("axis", -1)?, x.rank())?;
    if cx.opset < 13 {
        return Err(unsupported("Hardmax before opset 13 (2-D coercion)"));
    }
    let Some(n) = x.shape().dims()[a].as_static() else {
        return Err(unsupported("Hardmax over a symbolic axis"));
    };
    let b = cx.b();
    let first = x.argmax(a, true)?;
    let mut positions = vec![1u64; x.rank()];
    positions[a] = n;
    let values: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let iota = b.constant(DType::I64, tir_graph::Shape::of(&positions), &values)?;
    let one = iota.eq(&first)?;
    let y = one.select(&b.scalar(x.dtype(), 1.0)?, &b.scalar(x.dtype(), 0.0)?)?;
    Ok(vec![y.into()])
}

pub(super) fn batch_norm(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.attrs.int("training_mode", 0)? != 0
        || cx.node.output.iter().skip(1).any(|o| !o.is_empty())
    {
        return Err(unsupported("BatchNormalization in training mode"));
    }
    let eps = f64::from(cx.attrs.float("epsilon", 1e-5)?);
    cx.attrs.ignore("momentum"); // only training updates the running statistics
    cx.attrs.ignore("spatial"); // opsets before 9; 1 (the default) is what this computes
    let x = cx.tensor(0)?;
    if x.rank() < 2 || !x.dtype().is_float() {
        return Err(unsupported(format!("BatchNormalization of {}", x.ty())));
    }
    // Per channel (axis 1): the parameters broadcast as [C, 1, ..., 1].
    let trailing: Vec<usize> = (1..x.rank() - 1).collect();
    let mut per_channel = |i: usize| -> Res<Tensor> {
        let t = cx.tensor(i)?;
        Ok(if trailing.is_empty() {
            t
        } else {
            t.unsqueeze(&trailing)?
        })
    };
    let (scale, bias, mean, var) = (
        per_channel(1)?,
        per_channel(2)?,
        per_channel(3)?,
        per_channel(4)?,
    );
    let inv_std = var.add_scalar(eps)?.rsqrt()?;
    let y = x.sub(&mean)?.mul(&inv_std.mul(&scale)?)?.add(&bias)?;
    Ok(vec![y.into()])
}

pub(super) fn global_pool(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    if x.rank() < 3 || !x.dtype().is_float() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.ty())));
    }
    let spatial: Vec<usize> = (2..x.rank()).collect();
    let y = if cx.op() == "GlobalAveragePool" {
        x.mean(&spatial, true)?
    } else {
        x.max(&spatial, true)?
    };
    Ok(vec![y.into()])
}

pub(super) fn lp_norm(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let a = axis(cx.attrs.int("axis", -1)?, x.rank())?;
    let p = cx.attrs.int("p", 2)?;
    float(&x, "LpNormalization")?;
    let norm = match p {
        1 => x.abs()?.sum(&[a], true)?,
        2 => x.mul(&x)?.sum(&[a], true)?.sqrt()?,
        other => return Err(invalid(format!("p = {other} (1 or 2)"))),
    };
    // A zero norm gives zeros (ONNX divides only where the norm is not 0).
    let zero = cx.b().scalar(x.dtype(), 0.0)?;
    let y = norm.eq(&zero)?.select(&zero, &x.div(&norm)?)?;
    Ok(vec![y.into()])
}
