//! Linear quantization: `QuantizeLinear`, `DequantizeLinear`, `DynamicQuantizeLinear`, and the
//! integer products `MatMulInteger` and `QLinearMatMul`, as elementwise composites around an
//! i32 matmul.
//!
//! Takes: quantized tensors of i8, u8, i16 or u16 (and i32 for `DequantizeLinear`), float
//! scales, zero points of the quantized tensor's dtype; a scale or zero point per tensor (a
//! scalar or one element), per axis (1-D along `axis`) or per block (`block_size` along
//! `axis`, over a static axis); float8 (E4M3FN, E5M2) tensors with zero points of their dtype.
//! The 2- and 4-bit, float4 and FNUZ float8 dtypes have no tir dtype and are refused, by name,
//! where their tensors or `output_dtype` appear. Guarantees:
//! - `QuantizeLinear` divides in `precision` (else the scale's dtype), rounds half to even,
//!   adds the zero point and saturates to the target's range (NaN gives its lowest value). To
//!   float8 it adds the zero point to the quotient and casts with ONNX's `saturate` rule
//!   (`Cast`'s).
//! - `DequantizeLinear` subtracts the zero point in integers (exact; float8 in f32, exact too),
//!   multiplies by the scale in f32 and rounds once to `output_dtype` (else the scale's dtype).
//! - The products subtract zero points in i32 and accumulate an i32 matmul (wrapping as the
//!   spec allows); `QLinearMatMul` requantizes in f32 as `QuantizeLinear` does.
//!
//! The oracle that folds known inputs keeps floats unrounded, so each quotient that a rounding
//! decision reads is cast to its dtype first: folded and run-time results agree.
//! `ConvInteger` and `QLinearConv` stay refused: tir's `conv` takes float operands only.

use super::elementwise::cast_float8_or_plain;
use super::nn::Matrices;
use super::scan::round_half_even;
use super::{cast_to, Cx, Res};
use crate::model::dtype_of;
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// The integer range of a quantized dtype tir has.
fn range(d: DType) -> Option<(f64, f64)> {
    Some(match d {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U16 => (0.0, 65535.0),
        _ => return None,
    })
}

/// How a scale or zero point maps onto the elements of `x`.
#[derive(Clone, Copy)]
struct Granularity {
    axis: i64,
    /// 0 for per-tensor or per-axis parameters.
    block: u64,
}

fn granularity(cx: &mut Cx) -> Res<Granularity> {
    let axis = cx.attrs.int("axis", 1)?;
    let block = cx.attrs.int("block_size", 0)?;
    if block < 0 {
        return Err(invalid(format!("block_size {block}")));
    }
    Ok(Granularity {
        axis,
        block: block as u64,
    })
}

/// Scale or zero point `p` in a form that broadcasts against `x`: a scalar, a 1-D tensor
/// along the axis, or blocks repeated `block` times along the axis (a gather of `i / block`).
fn granular(cx: &Cx, p: &Tensor, x: &Tensor, g: Granularity) -> Res<Tensor> {
    if p.rank() == 0 {
        return Ok(p.clone());
    }
    if p.shape().static_numel() == Some(1) {
        return Ok(p.reshape_to(&Shape::scalar())?);
    }
    // Before opset 13 scales and zero points are scalars.
    if cx.opset < 13 {
        return Err(invalid(format!("a scale or zero point of {}", p.ty())));
    }
    let axis = super::axis(g.axis, x.rank())?;
    let (pd, xd) = (p.shape(), x.shape());
    if g.block == 0 {
        if p.rank() != 1 || pd.dims()[0] != xd.dims()[axis] {
            return Err(invalid(format!(
                "a per-axis scale or zero point of {} for {} along axis {axis}",
                p.ty(),
                x.ty()
            )));
        }
        let others: Vec<usize> = (0..x.rank()).filter(|&i| i != axis).collect();
        return Ok(p.unsqueeze(&others)?);
    }
    let (Some(n), Some(blocks)) = (xd.dims()[axis].as_static(), pd.dims().get(axis)) else {
        return Err(unsupported(format!(
            "blocked quantization of {} along a symbolic axis {axis}",
            x.ty()
        )));
    };
    let fits = p.rank() == x.rank()
        && blocks.as_static() == Some(n.div_ceil(g.block))
        && (0..x.rank()).all(|i| i == axis || pd.dims()[i] == xd.dims()[i]);
    if !fits {
        return Err(invalid(format!(
            "blocks of {} along axis {axis} of {} with a scale or zero point of {}",
            g.block,
            x.ty(),
            p.ty()
        )));
    }
    let index: Vec<f64> = (0..n).map(|i| (i / g.block) as f64).collect();
    let index = x.builder().constant(DType::I64, Shape::of(&[n]), &index)?;
    Ok(p.gather(&index, axis)?)
}

/// `saturate(round(q) + zero_point)` in `target`, from a float `q`, rounded half to even in
/// f32; a NaN gives the range's low end.
fn saturate(q: &Tensor, zero_point: Option<&Tensor>, target: DType) -> Res<Tensor> {
    let (lo, hi) = range(target).ok_or_else(|| invalid(format!("quantization to {target}")))?;
    let q = cast_to(q, DType::F32)?;
    let mut r = round_half_even(&q)?;
    if let Some(z) = zero_point {
        r = r.add(&cast_to(z, DType::F32)?)?;
    }
    let b = q.builder();
    let (lo, hi) = (b.scalar(DType::F32, lo)?, b.scalar(DType::F32, hi)?);
    let clamped = r.maximum(&lo)?.minimum(&hi)?;
    Ok(r.ne(&r)?.select(&lo, &clamped)?.cast(target)?)
}

/// A float dtype from an ONNX dtype attribute value.
fn float_attr(cx: &Cx, name: &str, value: i64) -> Res<DType> {
    let d = dtype_of(value as i32).map_err(unsupported)?;
    if d.is_float() {
        Ok(d)
    } else {
        Err(unsupported(format!("{} with {name} {d}", cx.op())))
    }
}

/// The quantized dtype: the zero point's, else `output_dtype`, else u8.
fn quantize_target(cx: &mut Cx, zero_point: Option<&Tensor>) -> Res<DType> {
    let attr = match cx.attrs.int("output_dtype", 0)? {
        0 => None,
        t => Some(dtype_of(t as i32).map_err(unsupported)?),
    };
    match (zero_point.map(Tensor::dtype), attr) {
        (Some(z), Some(a)) if z != a => Err(invalid(format!(
            "output_dtype {a} with a zero point of {z}"
        ))),
        (Some(d), _) | (None, Some(d)) => Ok(d),
        (None, None) => Ok(DType::U8),
    }
}

pub(super) fn quantize(cx: &mut Cx) -> Res<Vec<Value>> {
    let (x, scale, zero_point) = (cx.tensor(0)?, cx.tensor(1)?, cx.opt_tensor(2)?);
    let g = granularity(cx)?;
    // Saturation to the integer range is unconditional; `saturate` only concerns float8.
    let saturate_f8 = cx.attrs.int("saturate", 1)? != 0;
    let target = quantize_target(cx, zero_point.as_ref())?;
    if range(target).is_none() && target.float8().is_none() {
        return Err(invalid(format!("QuantizeLinear to {target}")));
    }
    let precision = match cx.attrs.int("precision", 0)? {
        0 if scale.dtype().is_float() => scale.dtype(),
        0 => {
            return Err(unsupported(format!(
                "QuantizeLinear by a {} scale",
                scale.dtype()
            )))
        }
        p => float_attr(cx, "precision", p)?,
    };
    if !x.dtype().is_float() && x.dtype() != DType::I32 {
        return Err(unsupported(format!("QuantizeLinear of {}", x.dtype())));
    }
    let s = cast_to(&granular(cx, &scale, &x, g)?, precision)?;
    // Cast to its own dtype: the rounding below must see the quotient the dtype holds.
    let q = cast_to(&x, precision)?.div(&s)?.cast(precision)?;
    let z = zero_point.map(|z| granular(cx, &z, &x, g)).transpose()?;
    if target.float8().is_some() {
        let q = match &z {
            Some(z) => q.add(&cast_to(z, precision)?)?,
            None => q,
        };
        return Ok(vec![cast_float8_or_plain(&q, target, saturate_f8)?.into()]);
    }
    Ok(vec![saturate(&q, z.as_ref(), target)?.into()])
}

/// `x - zero_point` in i32 (i64 for an i32 `x`, f32 for float8): exact.
fn centered(x: &Tensor, zero_point: Option<&Tensor>) -> Res<Tensor> {
    let wide = match x.dtype() {
        DType::I32 => DType::I64,
        d if d.float8().is_some() => DType::F32,
        _ => DType::I32,
    };
    let x = cast_to(x, wide)?;
    Ok(match zero_point {
        Some(z) => x.sub(&cast_to(z, wide)?)?,
        None => x,
    })
}

/// Zero point `z`, if given, of the same dtype as `x` (input `i` of the node).
fn zero_point_of(cx: &mut Cx, i: usize, x: &Tensor) -> Res<Option<Tensor>> {
    let z = cx.opt_tensor(i)?;
    if let Some(z) = &z {
        if z.dtype() != x.dtype() {
            return Err(invalid(format!(
                "a zero point of {} for {}",
                z.dtype(),
                x.dtype()
            )));
        }
    }
    Ok(z)
}

pub(super) fn dequantize(cx: &mut Cx) -> Res<Vec<Value>> {
    let (x, scale) = (cx.tensor(0)?, cx.tensor(1)?);
    let zero_point = zero_point_of(cx, 2, &x)?;
    let g = granularity(cx)?;
    if range(x.dtype()).is_none() && x.dtype() != DType::I32 && x.dtype().float8().is_none() {
        return Err(unsupported(format!("DequantizeLinear of {}", x.dtype())));
    }
    if !scale.dtype().is_float() {
        return Err(unsupported(format!(
            "DequantizeLinear by a {} scale",
            scale.dtype()
        )));
    }
    let out = match cx.attrs.int("output_dtype", 0)? {
        0 => scale.dtype(),
        t => float_attr(cx, "output_dtype", t)?,
    };
    let z = zero_point.map(|z| granular(cx, &z, &x, g)).transpose()?;
    let s = cast_to(&granular(cx, &scale, &x, g)?, DType::F32)?;
    let y = centered(&x, z.as_ref())?.cast(DType::F32)?.mul(&s)?;
    Ok(vec![cast_to(&y, out)?.into()])
}

/// `DynamicQuantizeLinear` (u8): the range of `x` widened to hold 0 gives the scale
/// (`range / 255`, or `1 / 255` for an empty range) and the zero point, rounded and saturated.
pub(super) fn dynamic_quantize(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    if x.dtype() != DType::F32 {
        return Err(unsupported(format!(
            "DynamicQuantizeLinear of {}",
            x.dtype()
        )));
    }
    let b = cx.b();
    let c = |v: f64| b.scalar(DType::F32, v);
    let all: Vec<usize> = (0..x.rank()).collect();
    let (hi, lo) = if all.is_empty() {
        (x.clone(), x.clone())
    } else {
        (x.max(&all, false)?, x.min(&all, false)?)
    };
    let (hi, lo) = (hi.maximum(&c(0.0)?)?, lo.minimum(&c(0.0)?)?);
    let span = hi.eq(&lo)?.select(&c(1.0)?, &hi.sub(&lo)?)?;
    let scale = span.div(&c(255.0)?)?.cast(DType::F32)?;
    let initial = c(0.0)?.sub(&lo.div(&scale)?)?.cast(DType::F32)?;
    let zero_point = round_half_even(&initial.maximum(&c(0.0)?)?.minimum(&c(255.0)?)?)?;
    let q = x.div(&scale)?.cast(DType::F32)?;
    let y = saturate(&q, Some(&zero_point), DType::U8)?;
    Ok(vec![
        y.into(),
        scale.into(),
        zero_point.cast(DType::U8)?.into(),
    ])
}

/// An operand of an integer product: i8 or u8.
fn int8_operand(cx: &mut Cx, i: usize) -> Res<Tensor> {
    let x = cx.tensor(i)?;
    if matches!(x.dtype(), DType::I8 | DType::U8) {
        Ok(x)
    } else {
        Err(unsupported(format!("{} of {}", cx.op(), x.dtype())))
    }
}

/// Which axis of a matrix operand a 1-D quantization parameter runs along.
#[derive(Clone, Copy, PartialEq)]
enum Along {
    /// Per row of `a` (`[.., M, K]`): a 1-D parameter of M elements becomes `[M, 1]`.
    Rows,
    /// Per column of `b` (`[.., K, N]`): a 1-D parameter broadcasts as it is.
    Columns,
}

/// A product operand's scale or zero point in a form that broadcasts against the operand (a
/// matrix or a stack, see [`Matrices`]) and the product alike.
fn along(p: Tensor, along: Along) -> Res<Tensor> {
    Ok(if p.rank() == 1 && along == Along::Rows {
        p.unsqueeze(&[1])?
    } else {
        p
    })
}

/// `(a - a_zero_point) @ (b - b_zero_point)` in i32, on operands already promoted to
/// matrices.
fn integer_product(m: &Matrices, za: Option<Tensor>, zb: Option<Tensor>) -> Res<Tensor> {
    let za = za.map(|z| along(z, Along::Rows)).transpose()?;
    let zb = zb.map(|z| along(z, Along::Columns)).transpose()?;
    let a = same_shape(centered(&m.a, za.as_ref())?, &m.a)?;
    let b = same_shape(centered(&m.b, zb.as_ref())?, &m.b)?;
    Ok(a.matmul(&b)?)
}

/// `y`, if a parameter broadcast into it left the shape of `like`: one that widened it does
/// not fit the operand it quantizes.
fn same_shape(y: Tensor, like: &Tensor) -> Res<Tensor> {
    if y.shape() == like.shape() {
        Ok(y)
    } else {
        Err(invalid(format!(
            "a scale or zero point that broadcasts {} to {}",
            like.ty(),
            y.ty()
        )))
    }
}

pub(super) fn matmul_integer(cx: &mut Cx) -> Res<Vec<Value>> {
    let (a, b) = (int8_operand(cx, 0)?, int8_operand(cx, 1)?);
    let (za, zb) = (zero_point_of(cx, 2, &a)?, zero_point_of(cx, 3, &b)?);
    let m = Matrices::new(a, b)?;
    Ok(vec![m.restore(integer_product(&m, za, zb)?)?.into()])
}

/// `saturate(round(((a - za) @ (b - zb)) · sa · sb / sy) + zy)`, the factor and the product
/// in f32.
pub(super) fn qlinear_matmul(cx: &mut Cx) -> Res<Vec<Value>> {
    let (a, b) = (int8_operand(cx, 0)?, int8_operand(cx, 3)?);
    let (za, zb) = (zero_point_of(cx, 2, &a)?, zero_point_of(cx, 5, &b)?);
    let zy = cx.tensor(7)?;
    let mut scales = Vec::with_capacity(3);
    for i in [1, 4, 6] {
        let s = cx.tensor(i)?;
        if !s.dtype().is_float() {
            return Err(unsupported(format!(
                "QLinearMatMul by a {} scale",
                s.dtype()
            )));
        }
        scales.push(cast_to(&s, DType::F32)?);
    }
    let m = Matrices::new(a, b)?;
    let product = integer_product(&m, za, zb)?.cast(DType::F32)?;
    let sa = along(scales[0].clone(), Along::Rows)?;
    let sb = along(scales[1].clone(), Along::Columns)?;
    let factor = sa.mul(&sb)?.div(&scales[2])?;
    let q = same_shape(product.mul(&factor)?, &product)?.cast(DType::F32)?;
    let y = saturate(&q, Some(&zy), zy.dtype())?;
    Ok(vec![m.restore(y)?.into()])
}
