//! Activations that select or gate: `Shrink` (a select between shifted copies) and `SwiGLU`
//! (`A * sigmoid(alpha * A) * B`).
//!
//! Takes: `Shrink` of a float tensor, or of an signed integer one when `lambd` and `bias` are integers
//! (then exact in the integer dtype; a fractional threshold or bias would need NumPy's float
//! round trip, refused); `SwiGLU` of two float tensors of one shape and dtype. Guarantees: the
//! thresholds and bias rounded to the input's dtype as NumPy does with a Python float;
//! 16-bit floats gated in f32 and rounded once.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::DType;

/// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
pub(super) fn shrink(cx: &mut Cx) -> Res<Vec<Value>> {
    let lambd = f64::from(cx.attrs.float("lambd", 0.5)?);
    let bias = f64::from(cx.attrs.float("bias", 0.0)?);
    let x = cx.tensor(0)?;
    let dtype = x.dtype();
    // Only u8 is unsigned: NumPy compares it with a negative `-lambd` as a Python int.
    if !dtype.is_numeric() || dtype == DType::U8 {
        return Err(unsupported(format!("Shrink of {dtype}")));
    }
    if !dtype.is_float() && (lambd.fract() != 0.0 || bias.fract() != 0.0) {
        return Err(unsupported(format!(
            "Shrink of {dtype} with a fractional lambd ({lambd}) or bias ({bias})"
        )));
    }
    let b = cx.b();
    let c = |v: f64| b.scalar(dtype, v);
    let below = x.lt(&c(-lambd)?)?;
    let above = x.gt(&c(lambd)?)?;
    let bias_t = c(bias)?;
    let y = below.select(&x.add(&bias_t)?, &above.select(&x.sub(&bias_t)?, &c(0.0)?)?)?;
    Ok(vec![y.into()])
}

pub(super) fn swiglu(cx: &mut Cx) -> Res<Vec<Value>> {
    let alpha = f64::from(cx.attrs.float("alpha", 1.0)?);
    let (a, b) = (cx.tensor(0)?, cx.tensor(1)?);
    let dtype = a.dtype();
    if !dtype.is_float() {
        return Err(unsupported(format!("SwiGLU of {dtype}")));
    }
    if b.ty() != a.ty() {
        return Err(invalid(format!(
            "SwiGLU of {} and {} (no broadcasting)",
            a.ty(),
            b.ty()
        )));
    }
    let work = compute_dtype(dtype);
    let (a, b) = (cast_to(&a, work)?, cast_to(&b, work)?);
    let gate = a.mul(&a.mul_scalar(alpha)?.sigmoid()?)?;
    Ok(vec![cast_to(&gate.mul(&b)?, dtype)?.into()])
}
