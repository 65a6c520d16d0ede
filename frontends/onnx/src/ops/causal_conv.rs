//! ONNX `CausalConvWithState` (opset 27): a causal depthwise 1-D convolution over `[B, C, L]`
//! that prepends a carried state of the last `k - 1` positions and returns the new one.
//!
//! Takes `input` `[B, C, L]`, `weight` `[C, 1, k]` (static), an optional `bias` `[C]` and an
//! optional `past_state` `[B, C, k - 1]`, all of one float dtype. Guarantees the operator's
//! reference semantics: the input is prefixed with `past_state` (zeros without it), one IR
//! `conv` with `C` groups and no padding gives `output` (of `L` positions), the optional
//! `silu`/`swish` activation is computed in f32 from the rounded convolution and cast back, and
//! `present_state` is the prefixed input's last `k - 1` positions. A `k = 1` kernel's
//! `present_state` is an empty `[B, C, 0]` tensor, which tir does not have: that output is
//! refused (the `output` alone imports).

use super::{cast_to, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Tensor};

pub(super) fn causal_conv_with_state(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 27 {
        return Err(invalid("CausalConvWithState is an op of opset 27 on"));
    }
    let silu = match cx.attrs.string("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(invalid(format!(
                "activation `{other}` (none, silu or swish)"
            )))
        }
    };
    let (x, w) = (cx.tensor(0)?, cx.tensor(1)?);
    let (bias, past) = (cx.opt_tensor(2)?, cx.opt_tensor(3)?);
    let (channels, k) = check(&x, &w, bias.as_ref(), past.as_ref())?;
    let wants_state = cx.node.output.get(1).is_some_and(|n| !n.is_empty());
    let prefixed = match &past {
        Some(p) => x.builder().concat(&[p, &x], 2)?,
        None => x.pad(&[(0, 0), (0, 0), (k - 1, 0)], 0.0)?,
    };
    let mut y = prefixed.conv(&w, &[1], &[1], &[(0, 0)], channels)?;
    if let Some(bias) = bias {
        y = y.add(&bias.unsqueeze(&[1])?)?;
    }
    if silu {
        // The reference rounds the convolution to the input's dtype, then applies SiLU in f32.
        let f = cast_to(&y, DType::F32)?;
        y = cast_to(&f.mul(&f.sigmoid()?)?, x.dtype())?;
    }
    let mut outputs = vec![y.into()];
    if wants_state {
        let len = static_len(&prefixed)?;
        outputs.push(prefixed.slice_axis(2, len - (k - 1), len)?.into());
    }
    Ok(outputs)
}

/// The channel count and kernel size, after checking the operands' ranks, dtypes and shapes
/// against each other.
fn check(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, past: Option<&Tensor>) -> Res<(u64, u64)> {
    let d = x.dtype();
    if !matches!(d, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported(format!("CausalConvWithState of {d}")));
    }
    let others = [Some(w), bias, past];
    if others.iter().flatten().any(|t| t.dtype() != d) {
        return Err(invalid(format!(
            "CausalConvWithState of input {} with operands of another dtype",
            x.ty()
        )));
    }
    let wdims = w
        .shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("a weight of symbolic shape {}", w.ty())))?;
    let [channels, 1, k] = wdims[..] else {
        return Err(invalid(format!(
            "weight {} is not [channels, 1, k]",
            w.ty()
        )));
    };
    if x.rank() != 3 || x.shape().dims()[1].as_static() != Some(channels) || k < 1 {
        return Err(invalid(format!(
            "input {} against a weight {} (input [batch, channels, length])",
            x.ty(),
            w.ty()
        )));
    }
    if let Some(b) = bias {
        if b.shape().static_dims().as_deref() != Some(&[channels][..]) {
            return Err(invalid(format!("bias {} is not [{channels}]", b.ty())));
        }
    }
    if let Some(p) = past {
        let dims = p.shape().into_dims();
        let expected = [x.shape().dims()[0].clone(), channels.into(), (k - 1).into()];
        if dims[..] != expected[..] {
            return Err(invalid(format!(
                "past_state {} is not [batch, {channels}, {}]",
                p.ty(),
                k - 1
            )));
        }
    }
    Ok((channels, k))
}

/// The static length (axis 2) of the prefixed input.
fn static_len(t: &Tensor) -> Res<u64> {
    t.shape().dims()[2]
        .as_static()
        .ok_or_else(|| unsupported(format!("a symbolic length in {}", t.ty())))
}
