//! `RotaryEmbedding` (opset 23): each head's first `rotary_embedding_dim` channels rotated in
//! pairs by the angles whose cosines and sines the caches hold, the rest passed through.
//!
//! Takes a float input `[batch, heads, seq, head_size]`, or `[batch, seq, heads · head_size]`
//! with `num_heads`; caches `[max_pos, rot / 2]` indexed by int `position_ids [batch, seq]`
//! (negatives count from the end, as NumPy's indexing), or `[batch, seq, rot / 2]` without them.
//! Guarantees: pairs are the two halves of the rotated channels, or neighbours with
//! `interleaved`; 16-bit floats rotate in f32 and are rounded once. An odd rotary dim, one past
//! the head size, or a cache whose last dim is not half of it is refused as invalid.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Dim, ReshapeDim, Tensor};

pub(super) fn rotary_embedding(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 23 {
        return Err(invalid("RotaryEmbedding is an op of opset 23 on"));
    }
    let interleaved = cx.attrs.int("interleaved", 0)? != 0;
    let rot = cx.attrs.int("rotary_embedding_dim", 0)?;
    let num_heads = cx.attrs.int("num_heads", 0)?;
    let x = cx.tensor(0)?;
    let (cos, sin) = (cx.tensor(1)?, cx.tensor(2)?);
    let positions = cx.opt_tensor(3)?;
    let dtype = x.dtype();
    if !dtype.is_float() || cos.dtype() != dtype || sin.dtype() != dtype {
        return Err(unsupported(format!(
            "RotaryEmbedding of {dtype} with caches {} and {}",
            cos.dtype(),
            sin.dtype()
        )));
    }
    let heads = to_heads(&x, num_heads)?;
    let head_size = static_last(&heads, "the head size")?;
    let rot = match u64::try_from(rot) {
        Ok(0) => head_size,
        Ok(r) if r % 2 == 0 && r <= head_size => r,
        _ => {
            return Err(invalid(format!(
                "rotary_embedding_dim {rot} for heads of {head_size} (even, at most the head size)"
            )))
        }
    };
    let work = compute_dtype(dtype);
    let [cos, sin] = [cos, sin].map(|c| cache(&c, positions.as_ref(), rot / 2, work));
    let y = rotate(&cast_to(&heads, work)?, &cos?, &sin?, rot, interleaved)?;
    let y = cast_to(&y, dtype)?;
    let y = if x.rank() == 3 {
        y.permute(&[0, 2, 1, 3])?.reshape_to(&x.shape())?
    } else {
        y
    };
    Ok(vec![y.into()])
}

/// The input as `[batch, heads, seq, head_size]`.
fn to_heads(x: &Tensor, num_heads: i64) -> Res<Tensor> {
    match x.rank() {
        4 => Ok(x.clone()),
        3 => {
            let hidden = static_last(x, "the hidden size")?;
            let heads = u64::try_from(num_heads)
                .ok()
                .filter(|&h| h > 0 && hidden % h == 0)
                .ok_or_else(|| {
                    invalid(format!(
                        "num_heads {num_heads} for 3-D input {} (it must divide the hidden size)",
                        x.ty()
                    ))
                })?;
            let dims = x.shape().into_dims();
            let split = [
                ReshapeDim::Dim(dims[0].clone()),
                ReshapeDim::Dim(dims[1].clone()),
                ReshapeDim::Dim(Dim::Static(heads)),
                ReshapeDim::Dim(Dim::Static(hidden / heads)),
            ];
            Ok(x.reshape(&split)?.permute(&[0, 2, 1, 3])?)
        }
        _ => Err(invalid(format!(
            "RotaryEmbedding of {} (3-D or 4-D)",
            x.ty()
        ))),
    }
}

fn static_last(x: &Tensor, what: &str) -> Res<u64> {
    x.shape()
        .dims()
        .last()
        .and_then(Dim::as_static)
        .ok_or_else(|| unsupported(format!("{what} of {} is not static", x.ty())))
}

/// A cache as `[batch, 1, seq, half]` in `work`: rows picked by the position ids, if given.
fn cache(c: &Tensor, positions: Option<&Tensor>, half: u64, work: DType) -> Res<Tensor> {
    let picked = match positions {
        Some(p) if c.rank() == 2 && p.rank() == 2 && p.dtype().is_int() => {
            let n = c.shape().dims()[0].clone();
            let b = p.builder();
            let p = p.cast(DType::I64)?;
            let wrapped = p.add(&b.dim_value(n)?)?;
            let p = p.lt(&b.scalar(DType::I64, 0.0)?)?.select(&wrapped, &p)?;
            c.gather(&p, 0)?
        }
        None if c.rank() == 3 => c.clone(),
        _ => {
            return Err(invalid(format!(
                "cache {} with position_ids {:?} (`[max_pos, rot/2]` with int `[batch, seq]` ids, or `[batch, seq, rot/2]` without)",
                c.ty(),
                positions.map(Tensor::ty)
            )))
        }
    };
    if picked.shape().dims()[2].as_static() != Some(half) {
        return Err(invalid(format!(
            "cache {} for a rotary dim of {} (its last dim must be half)",
            c.ty(),
            2 * half
        )));
    }
    cast_to(&picked.unsqueeze(&[1])?, work)
}

/// Rotates the first `rot` channels of `x: [batch, heads, seq, head_size]` by `cos` and `sin`
/// (`[batch, 1, seq, rot / 2]`): `(x1, x2)` → `(cos·x1 − sin·x2, sin·x1 + cos·x2)`.
fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor, rot: u64, interleaved: bool) -> Res<Tensor> {
    let last = x.rank() - 1;
    let head_size = static_last(x, "the head size")?;
    let rotated = x.slice_axis(last, 0, rot)?;
    let half = rot / 2;
    // Interleaved pairs are neighbours: `[.., rot]` as `[.., rot / 2, 2]`.
    let pairs = if interleaved {
        let mut dims: Vec<ReshapeDim> = x.shape().dims()[..last]
            .iter()
            .cloned()
            .map(ReshapeDim::Dim)
            .collect();
        dims.extend([half, 2].map(|d| ReshapeDim::Dim(Dim::Static(d))));
        Some(rotated.reshape(&dims)?)
    } else {
        None
    };
    let (x1, x2) = match &pairs {
        Some(p) => (
            p.slice_axis(last + 1, 0, 1)?.squeeze(&[last + 1])?,
            p.slice_axis(last + 1, 1, 2)?.squeeze(&[last + 1])?,
        ),
        None => (
            rotated.slice_axis(last, 0, half)?,
            rotated.slice_axis(last, half, rot)?,
        ),
    };
    let real = cos.mul(&x1)?.sub(&sin.mul(&x2)?)?;
    let imag = sin.mul(&x1)?.add(&cos.mul(&x2)?)?;
    let b = x.builder();
    let rotated = if interleaved {
        let joined = b.concat(
            &[&real.unsqueeze(&[last + 1])?, &imag.unsqueeze(&[last + 1])?],
            last + 1,
        )?;
        joined.reshape_to(&rotated.shape())?
    } else {
        b.concat(&[&real, &imag], last)?
    };
    if rot == head_size {
        return Ok(rotated);
    }
    Ok(b.concat(&[&rotated, &x.slice_axis(last, rot, head_size)?], last)?)
}
