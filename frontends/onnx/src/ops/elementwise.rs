//! Elementwise ops: unary math, broadcasting binary ops, variadic Max/Min/Sum/Mean, Where, Cast,
//! Clip and the activations, each as tir's elementwise ops.

use super::{cast_to, Cx, Res};
use crate::model::dtype_of;
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Tensor, UnaryOp};

pub(super) fn unary(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let op = match cx.op() {
        "Abs" => UnaryOp::Abs,
        "Neg" => UnaryOp::Neg,
        "Exp" => UnaryOp::Exp,
        "Log" => UnaryOp::Log,
        "Sqrt" => UnaryOp::Sqrt,
        "Reciprocal" => UnaryOp::Reciprocal,
        "Sin" => UnaryOp::Sin,
        "Cos" => UnaryOp::Cos,
        "Tanh" => UnaryOp::Tanh,
        "Sigmoid" => UnaryOp::Sigmoid,
        "Relu" => UnaryOp::Relu,
        "Floor" => UnaryOp::Floor,
        "Ceil" => UnaryOp::Ceil,
        "Not" => UnaryOp::Not,
        "Erf" => UnaryOp::Erf,
        other => unreachable!("{other} is not unary"),
    };
    if op != UnaryOp::Not && !x.dtype().is_numeric() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    Ok(vec![x.unary(op)?.into()])
}

pub(super) fn binary(cx: &mut Cx) -> Res<Vec<Value>> {
    let (a, b) = (cx.tensor(0)?, cx.tensor(1)?);
    if cx.op() == "Pow" && a.dtype().is_int() {
        return Ok(vec![int_pow(&a, &b)?.into()]);
    }
    let b = if cx.op() == "Pow" {
        pow_exponent(&a, b)?
    } else {
        b
    };
    let y = match cx.op() {
        "Add" => a.add(&b)?,
        "Sub" => a.sub(&b)?,
        "Mul" => a.mul(&b)?,
        "Div" => a.div(&b)?,
        "Pow" => a.pow(&b)?,
        "Equal" => a.eq(&b)?,
        "Less" => a.lt(&b)?,
        "LessOrEqual" => a.le(&b)?,
        "Greater" => a.gt(&b)?,
        "GreaterOrEqual" => a.ge(&b)?,
        "And" => a.and(&b)?,
        "Or" => a.or(&b)?,
        "Xor" if a.dtype() == DType::Bool => a.ne(&b)?,
        "Xor" => return Err(invalid(format!("Xor of {}", a.dtype()))),
        other => unreachable!("{other} is not binary"),
    };
    Ok(vec![y.into()])
}

/// `BitShift` (`direction` LEFT or RIGHT) and `BitwiseAnd`, `BitwiseOr`, `BitwiseXor`,
/// `BitwiseNot`: tir's bit ops, on integers of one dtype.
pub(super) fn bitwise(cx: &mut Cx) -> Res<Vec<Value>> {
    let a = cx.tensor(0)?;
    if !a.dtype().is_int() {
        return Err(unsupported(format!("{} of {}", cx.op(), a.dtype())));
    }
    if cx.op() == "BitwiseNot" {
        return Ok(vec![a.bit_not()?.into()]);
    }
    let b = cx.tensor(1)?;
    let y = match cx.op() {
        "BitwiseAnd" => a.bit_and(&b)?,
        "BitwiseOr" => a.bit_or(&b)?,
        "BitwiseXor" => a.bit_xor(&b)?,
        _ => match cx.attrs.string("direction", "")?.as_str() {
            "LEFT" => a.shift_left(&b)?,
            "RIGHT" => a.shift_right(&b)?,
            other => return Err(invalid(format!("BitShift direction `{other}`"))),
        },
    };
    Ok(vec![y.into()])
}

/// Pow of an integer base as NumPy computes it, in the dtype base and exponent promote to, then
/// truncated back to the base's dtype. An integer exponent promotes to an integer there, which
/// tir's `pow` does not take: it computes in f64, exact while the power's magnitude is below
/// 2^53 (NumPy's wrap-around of larger ones, and its refusal of negative exponents, are not
/// reproduced).
fn int_pow(base: &Tensor, exponent: &Tensor) -> Res<Tensor> {
    use DType::*;
    let (bt, et) = (base.dtype(), exponent.dtype());
    let small = matches!(bt, I8 | U8);
    let work = match et {
        F16 if small => F16,
        F16 | F32 if small || matches!(bt, I16 | U16) => F32,
        F16 | F32 | F64 => F64,
        _ if et.is_int() => F64,
        _ => {
            return Err(unsupported(format!(
                "Pow of a {bt} base with a {et} exponent"
            )))
        }
    };
    let y = base.cast(work)?.pow(&cast_to(exponent, work)?)?;
    Ok(y.cast(bt)?)
}

/// Pow's exponent in the base's dtype: ONNX lets them differ, tir's binary ops do not.
fn pow_exponent(base: &Tensor, exponent: Tensor) -> Res<Tensor> {
    let (bt, et) = (base.dtype(), exponent.dtype());
    if !bt.is_float() {
        Err(unsupported(format!("Pow of a {bt} base")))
    } else if bt == et {
        Ok(exponent)
    } else if et.is_numeric() {
        Ok(exponent.cast(bt)?)
    } else {
        Err(unsupported(format!(
            "Pow of a {bt} base with a {et} exponent"
        )))
    }
}

pub(super) fn variadic(cx: &mut Cx) -> Res<Vec<Value>> {
    let n = cx.num_inputs();
    if n == 0 {
        return Err(invalid("no inputs"));
    }
    let mut acc = cx.tensor(0)?;
    for i in 1..n {
        let x = cx.tensor(i)?;
        acc = match cx.op() {
            "Max" => acc.maximum(&x)?,
            "Min" => acc.minimum(&x)?,
            _ => acc.add(&x)?,
        };
    }
    if cx.op() == "Mean" {
        acc = acc.div(&cx.b().scalar(acc.dtype(), n as f64)?)?;
    }
    Ok(vec![acc.into()])
}

pub(super) fn identity(cx: &mut Cx) -> Res<Vec<Value>> {
    let name = cx
        .input_name(0)
        .ok_or_else(|| invalid("input 0 is missing"))?;
    let value = cx.st.value(&name).cloned().expect("inputs are defined");
    Ok(vec![value])
}

pub(super) fn where_(cx: &mut Cx) -> Res<Vec<Value>> {
    let (c, a, b) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    Ok(vec![c.select(&a, &b)?.into()])
}

pub(super) fn cast(cx: &mut Cx) -> Res<Vec<Value>> {
    let to = if cx.op() == "CastLike" {
        super::input_dtype(cx, 1)?
    } else {
        let to = cx
            .attrs
            .opt_int("to")?
            .ok_or_else(|| invalid("no `to` attribute"))?;
        dtype_of(to as i32).map_err(unsupported)?
    };
    // `saturate` only changes casts to float8 types.
    let saturate = cx.attrs.int("saturate", 1)? != 0;
    if cx.is_symbolic_dims(0) && to.is_int() {
        return identity(cx);
    }
    let x = cx.tensor(0)?;
    if x.dtype() == to {
        return Ok(vec![x.into()]);
    }
    Ok(vec![cast_float8_or_plain(&x, to, saturate)?.into()])
}

/// `x` cast to `to`; to a float8 dtype with ONNX's `saturate` rule ([`float8_overflow`]).
pub(super) fn cast_float8_or_plain(x: &Tensor, to: DType, saturate: bool) -> Res<Tensor> {
    let y = x.cast(to)?;
    if saturate || to.float8().is_none() {
        return Ok(y);
    }
    float8_overflow(x, y)
}

/// ONNX's `saturate=0` cast of `x` to float8 from `y`, the IR's cast of `x` (which is ONNX's
/// `saturate=1`: nearest even, saturating to the largest finite value, infinities included).
/// Where the rounded value would be past the largest finite one, infinities included, E4M3FN
/// gives NaN and E5M2 an infinity of `x`'s sign. Rounding to nearest even overflows from the
/// midpoint to the next power of two up: 464 (a tie, which stays at 448, whose mantissa is
/// even) for E4M3FN, 61440 (a tie that goes up, 57344's mantissa being odd) for E5M2.
fn float8_overflow(x: &Tensor, y: Tensor) -> Res<Tensor> {
    let to = y.dtype();
    let b = x.builder();
    // Compared in f32, which holds the thresholds and orders every narrower float exactly; f64
    // for f64 and the integers.
    let wide = match x.dtype() {
        d if d.is_float() && d != DType::F64 => DType::F32,
        _ => DType::F64,
    };
    let xw = super::cast_to(x, wide)?;
    let ax = xw.abs()?;
    let over = if to == DType::F8E4M3 {
        ax.gt(&b.scalar(wide, 464.0)?)?
    } else {
        ax.ge(&b.scalar(wide, 61440.0)?)?
    };
    let past = if to == DType::F8E4M3 {
        b.scalar(to, f64::NAN)?
    } else {
        let negative = xw.lt(&b.scalar(wide, 0.0)?)?;
        negative.select(
            &b.scalar(to, f64::NEG_INFINITY)?,
            &b.scalar(to, f64::INFINITY)?,
        )?
    };
    Ok(over.select(&past, &y)?)
}

pub(super) fn clip(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let b = cx.b();
    let (lo, hi) = if cx.opset < 11 {
        let lo = cx.attrs.opt_float("min")?;
        let hi = cx.attrs.opt_float("max")?;
        let scalar = |v: Option<f32>| v.map(|v| b.scalar(x.dtype(), v.into())).transpose();
        (scalar(lo)?, scalar(hi)?)
    } else {
        (cx.opt_tensor(1)?, cx.opt_tensor(2)?)
    };
    let mut y = x;
    if let Some(lo) = lo {
        y = y.maximum(&lo)?;
    }
    if let Some(hi) = hi {
        y = y.minimum(&hi)?;
    }
    Ok(vec![y.into()])
}

pub(super) fn activation(cx: &mut Cx) -> Res<Vec<Value>> {
    let input = cx.tensor(0)?;
    let dtype = input.dtype();
    if !dtype.is_float() {
        return Err(unsupported(format!("{} of {dtype}", cx.op())));
    }
    // The composition is computed in f32 and rounded once, as ONNX's reference does for the
    // 16-bit floats (rounding after each step would miss by more than a 16-bit float's ulp).
    let narrow = dtype.is_narrow_float();
    let x = if narrow {
        input.cast(DType::F32)?
    } else {
        input
    };
    let b = cx.b();
    let c = |v: f64| b.scalar(x.dtype(), v);
    let zero = c(0.0)?;
    let attr = |name, default| cx.attrs.float(name, default).map(f64::from);
    let y = match cx.op() {
        "LeakyRelu" => {
            let alpha = attr("alpha", 0.01)?;
            x.lt(&zero)?.select(&x.mul_scalar(alpha)?, &x)?
        }
        "PRelu" => {
            let slope = cx.tensor(1)?;
            let slope = if narrow {
                slope.cast(DType::F32)?
            } else {
                slope
            };
            x.lt(&zero)?.select(&x.mul(&slope)?, &x)?
        }
        "Elu" => {
            let alpha = attr("alpha", 1.0)?;
            let neg = x.exp()?.add_scalar(-1.0)?.mul_scalar(alpha)?;
            x.lt(&zero)?.select(&neg, &x)?
        }
        "Selu" => {
            let alpha = attr("alpha", 1.673_263_2)?;
            let gamma = attr("gamma", 1.050_701)?;
            let neg = x.exp()?.add_scalar(-1.0)?.mul_scalar(alpha)?;
            x.le(&zero)?.select(&neg, &x)?.mul_scalar(gamma)?
        }
        "Celu" => {
            let alpha = attr("alpha", 1.0)?;
            let neg = x
                .mul_scalar(1.0 / alpha)?
                .exp()?
                .add_scalar(-1.0)?
                .mul_scalar(alpha)?;
            x.maximum(&zero)?.add(&neg.minimum(&zero)?)?
        }
        "ThresholdedRelu" => {
            let alpha = attr("alpha", 1.0)?;
            x.gt(&c(alpha)?)?.select(&x, &zero)?
        }
        "HardSigmoid" => {
            let (alpha, beta) = (attr("alpha", 0.2)?, attr("beta", 0.5)?);
            hard_sigmoid(&x, alpha, beta)?
        }
        "HardSwish" => x.mul(&hard_sigmoid(&x, 1.0 / 6.0, 0.5)?)?,
        "Softplus" => softplus(&x)?,
        "Softsign" => x.div(&x.abs()?.add_scalar(1.0)?)?,
        "Mish" => x.mul(&softplus(&x)?.tanh()?)?,
        "Swish" => {
            let alpha = attr("alpha", 1.0)?;
            x.mul(&x.mul_scalar(alpha)?.sigmoid()?)?
        }
        "Gelu" => match cx.attrs.string("approximate", "none")?.as_str() {
            "none" => x.gelu()?,
            "tanh" => x.gelu_tanh()?,
            other => return Err(invalid(format!("approximate `{other}`"))),
        },
        other => unreachable!("{other} is not an activation"),
    };
    let y = if narrow { y.cast(dtype)? } else { y };
    Ok(vec![y.into()])
}

/// `max(0, min(1, alpha * x + beta))`.
pub(super) fn hard_sigmoid(x: &Tensor, alpha: f64, beta: f64) -> Res<Tensor> {
    let b = x.builder();
    let lin = x.mul_scalar(alpha)?.add_scalar(beta)?;
    let (zero, one) = (b.scalar(x.dtype(), 0.0)?, b.scalar(x.dtype(), 1.0)?);
    Ok(lin.minimum(&one)?.maximum(&zero)?)
}

/// `log(exp(x) + 1)`, as ONNX defines it.
pub(super) fn softplus(x: &Tensor) -> Res<Tensor> {
    Ok(x.exp()?.add_scalar(1.0)?.log()?)
}

pub(super) fn dropout(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let training = if cx.opset >= 12 {
        cx.opt_known(2)?.map(|k| k.f64s()).transpose()?
    } else {
        None
    };
    if training.is_some_and(|t| t.iter().any(|&v| v != 0.0)) {
        return Err(unsupported("dropout in training mode (random)"));
    }
    // The ratio does not matter at inference; opsets before 12 name it and `is_test` as attributes.
    cx.attrs.ignore("ratio");
    cx.attrs.ignore("seed");
    cx.attrs.ignore("is_test");
    let mask = cx.b().scalar(DType::Bool, 1.0)?.broadcast_to(&x.shape())?;
    Ok(vec![x.into(), mask.into()])
}

pub(super) fn modulo(cx: &mut Cx) -> Res<Vec<Value>> {
    let fmod = cx.attrs.int("fmod", 0)? != 0;
    let (a, b) = (cx.tensor(0)?, cx.tensor(1)?);
    let dtype = a.dtype();
    if !dtype.is_numeric() {
        return Err(unsupported(format!("Mod of {dtype}")));
    }
    // tir's `rem` is C's fmod: the dividend's sign, exact.
    let r = a.rem(&b)?;
    if fmod {
        return Ok(vec![r.into()]);
    }
    // Python's mod takes the divisor's sign: add the divisor to a remainder of the other (for
    // floats, one rounding, as NumPy's).
    let zero = cx.b().scalar(dtype, 0.0)?;
    let differ = r.lt(&zero)?.ne(&b.lt(&zero)?)?;
    Ok(vec![r
        .ne(&zero)?
        .and(&differ)?
        .select(&r.add(&b)?, &r)?
        .into()])
}

pub(super) fn sign(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    if !x.dtype().is_numeric() {
        return Err(unsupported(format!("Sign of {}", x.dtype())));
    }
    let b = cx.b();
    let c = |v| b.scalar(x.dtype(), v);
    let zero = c(0.0)?;
    // NaN (and 0) fall through both comparisons and are returned as they are.
    let negative = x.lt(&zero)?.select(&c(-1.0)?, &x)?;
    Ok(vec![x.gt(&zero)?.select(&c(1.0)?, &negative)?.into()])
}

pub(super) fn classify(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    if !x.dtype().is_float() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    let y = if cx.op() == "IsNaN" {
        x.ne(&x)?
    } else {
        let positive = cx.attrs.int("detect_positive", 1)? != 0;
        let negative = cx.attrs.int("detect_negative", 1)? != 0;
        let b = cx.b();
        let pos = x.eq(&b.scalar(x.dtype(), f64::INFINITY)?)?;
        let neg = x.eq(&b.scalar(x.dtype(), f64::NEG_INFINITY)?)?;
        match (positive, negative) {
            (true, true) => pos.or(&neg)?,
            (true, false) => pos,
            (false, true) => neg,
            (false, false) => b.scalar(DType::Bool, 0.0)?.broadcast_to(&x.shape())?,
        }
    };
    Ok(vec![y.into()])
}
