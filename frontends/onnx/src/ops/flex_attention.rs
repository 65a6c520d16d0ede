//! `FlexAttention` of the `ai.onnx.preview` domain (version 1): attention over rank-4 Q, K, V
//! whose scores and probabilities pass through optional modifier subgraphs.
//!
//! Takes `Q [B, Hq, L, E]`, `K [B, Hkv, S, E]`, `V [B, Hkv, S, Ev]` of one float dtype and the
//! `scale`, `softmax_precision`, `score_mod` and `prob_mod` attributes. Guarantees the
//! operator's reference semantics: Q and K are each pre-scaled by `√scale` (taken in f32, then
//! rounded to the inputs' dtype) before `Q Kᵀ`; the scores are cast to the softmax precision
//! (f32, or f64 for f64 inputs, unless given); `score_mod` and `prob_mod` are inlined as the
//! importer lowers any graph (their nodes become IR ops; see [`super::subgraph::inline_graph`]);
//! the probabilities multiply V cast to that precision, and the result is cast back. K/V heads
//! are shared by contiguous groups of query heads. A modifier whose output is known at import
//! (it ignores its input) is refused.

use super::attention::share_heads;
use super::subgraph::inline_graph;
use super::{cast_to, static_dim, Cx, Res};
use crate::model::dtype_of;
use crate::proto::GraphProto;
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Tensor};

pub(super) fn flex_attention(cx: &mut Cx) -> Res<Vec<Value>> {
    let scale = cx.attrs.opt_float("scale")?;
    let precision = cx.attrs.opt_int("softmax_precision")?;
    let (score_mod, prob_mod) = (cx.attrs.graph("score_mod")?, cx.attrs.graph("prob_mod")?);
    let (q, k, v) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    check(&q, &k, &v)?;
    let d = q.dtype();
    let softmax_dtype = match precision {
        None if d == DType::F64 => DType::F64,
        None => DType::F32,
        Some(t @ (1 | 10 | 11 | 16)) => dtype_of(t as i32).map_err(invalid)?,
        Some(t) => return Err(invalid(format!("softmax_precision {t} (1, 10, 11 or 16)"))),
    };
    let scale = match scale {
        Some(s) => s,
        None => {
            let e = static_dim(&q, 3, "the head size (it sets the scale)")?;
            (1.0 / (e as f64).sqrt()) as f32
        }
    };
    let root = f64::from(scale.sqrt());
    let q_heads = q.shape().dims()[1].clone();
    let k = share_heads(&k, q_heads.clone())?.mul_scalar(root)?;
    let scores = q.mul_scalar(root)?.matmul(&k.transpose()?)?;
    let mut scores = cast_to(&scores, softmax_dtype)?;
    if let Some(g) = score_mod {
        scores = modify(cx, g, &scores, "score_mod")?;
    }
    let mut probs = scores.softmax(3)?;
    if let Some(g) = prob_mod {
        probs = modify(cx, g, &probs, "prob_mod")?;
    }
    let v = cast_to(&share_heads(&v, q_heads)?, softmax_dtype)?;
    Ok(vec![cast_to(&probs.matmul(&v)?, d)?.into()])
}

/// Q, K and V of rank 4 and one float dtype, with agreeing head counts, lengths and sizes.
fn check(q: &Tensor, k: &Tensor, v: &Tensor) -> Res<()> {
    let d = q.dtype();
    if !d.is_float() {
        return Err(unsupported(format!("FlexAttention of {d}")));
    }
    if k.dtype() != d || v.dtype() != d || [q.rank(), k.rank(), v.rank()] != [4, 4, 4] {
        return Err(invalid(format!(
            "Q {}, K {} and V {} must be rank 4 and of one dtype",
            q.ty(),
            k.ty(),
            v.ty()
        )));
    }
    let (qd, kd, vd) = (
        q.shape().into_dims(),
        k.shape().into_dims(),
        v.shape().into_dims(),
    );
    if kd[1] != vd[1] || kd[2] != vd[2] || kd[3] != qd[3] || qd[0] != kd[0] || kd[0] != vd[0] {
        return Err(invalid(format!(
            "K {} and V {} do not match Q {} (batch, heads, length, head size)",
            k.ty(),
            v.ty(),
            q.ty()
        )));
    }
    Ok(())
}

/// `x` through the modifier subgraph `g`, which must give a run-time tensor of `x`'s type.
fn modify(cx: &mut Cx, g: &GraphProto, x: &Tensor, what: &str) -> Res<Tensor> {
    let opset = cx.opset;
    let outputs = inline_graph(cx.st, g, vec![x.clone().into()], opset)?;
    match &outputs[..] {
        [Value::Tensor(t)] if t.ty() == x.ty() => Ok(t.clone()),
        [Value::Tensor(t)] => Err(invalid(format!(
            "{what} turns {} into {} (the same type)",
            x.ty(),
            t.ty()
        ))),
        [_] => Err(unsupported(format!(
            "a {what} whose output is known at import (it ignores its input)"
        ))),
        _ => Err(invalid(format!(
            "{what} has {} outputs (one)",
            outputs.len()
        ))),
    }
}
