//! ONNX `Attention` (opsets 23 to 25) as tir's primitive attention pattern: `softmax(scale · Q Kᵀ
//! + bias) V`, with the heads of 3-D inputs split and merged by reshapes, grouped-query heads
//! shared by a broadcast, the KV cache appended by a concat, and every mask (`attn_mask`,
//! `is_causal`, the sliding window, `nonpad_kv_seqlen`) folded into one additive bias.
//!
//! Semantics as the operator spec states them, including its corner cases: causal masks are
//! bottom-right aligned by the cache offset; a query row whose bias masks every key gives zeros
//! (in `Y` and in the mode-3 `qk_matmul_output`), never NaN; a float mask shorter than the keys
//! is padded with `-inf`, a bool one with `false`.

use super::{cast_to, compute_dtype, static_dim, Cx, Res};
use crate::model::dtype_of;
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Dim, ReshapeDim, Shape, Tensor};

/// The attributes, read once.
struct Attrs {
    is_causal: bool,
    scale: Option<f64>,
    softcap: f64,
    heads: Option<(u64, u64)>,
    softmax_dtype: Option<DType>,
    qk_output_mode: i64,
    /// `(left, right)`; -1 leaves a side unbounded.
    window: (i64, i64),
}

impl Attrs {
    fn read(cx: &mut Cx) -> Res<Attrs> {
        let a = &cx.attrs;
        let heads = match (a.opt_int("q_num_heads")?, a.opt_int("kv_num_heads")?) {
            (None, None) => None,
            (Some(q), Some(kv)) if q > 0 && kv > 0 => Some((q as u64, kv as u64)),
            (q, kv) => {
                return Err(invalid(format!(
                    "q_num_heads {q:?} and kv_num_heads {kv:?} must both be given and positive"
                )))
            }
        };
        let softmax_dtype = match a.opt_int("softmax_precision")? {
            None => None,
            Some(t @ (1 | 10 | 11 | 16)) => Some(dtype_of(t as i32).map_err(invalid)?),
            Some(t) => return Err(invalid(format!("softmax_precision {t} (1, 10, 11 or 16)"))),
        };
        let window = (
            a.int("left_window_size", -1)?,
            a.int("right_window_size", -1)?,
        );
        if window.0 < -1 || window.1 < -1 {
            return Err(invalid(format!("window sizes {window:?} (-1 or more)")));
        }
        let qk_output_mode = a.int("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&qk_output_mode) {
            return Err(invalid(format!(
                "qk_matmul_output_mode {qk_output_mode} (0 to 3)"
            )));
        }
        Ok(Attrs {
            is_causal: a.int("is_causal", 0)? != 0,
            scale: a.opt_float("scale")?.map(f64::from),
            softcap: f64::from(a.float("softcap", 0.0)?),
            heads,
            softmax_dtype,
            qk_output_mode,
            window,
        })
    }

    fn has_window(&self) -> bool {
        self.window != (-1, -1)
    }
}

/// Where the queries sit among the keys: query `i` is at absolute position `i + offset`.
enum Offset {
    /// The same for every batch: the past length of an internal cache, else 0.
    Fixed(u64),
    /// Per batch (`[batch, 1, 1]`, i64): `nonpad_kv_seqlen - q_len` of an external cache.
    PerBatch(Tensor),
}

pub(super) fn attention(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 23 {
        return Err(invalid("Attention is an op of opset 23 on"));
    }
    let attrs = Attrs::read(cx)?;
    let (q, k, v) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    let mask = cx.opt_tensor(3)?;
    let past = match (cx.opt_tensor(4)?, cx.opt_tensor(5)?) {
        (Some(pk), Some(pv)) => Some((pk, pv)),
        (None, None) => None,
        _ => return Err(invalid("past_key and past_value must be given together")),
    };
    let nonpad = cx.opt_tensor(6)?;
    if past.is_some() && nonpad.is_some() {
        return Err(invalid("nonpad_kv_seqlen cannot be combined with past_key"));
    }
    check_dtypes(&q, &k, &v, mask.as_ref())?;
    let three_d = q.rank() == 3;
    let [q, k, v] = to_4d(&q, &k, &v, attrs.heads)?;
    // The cache: `present = concat(past, new)` along the sequence axis.
    let (k, v, past_len) = match &past {
        Some((pk, pv)) => {
            let past_len = static_dim(pk, 2, "past_key's sequence length")?;
            (concat_seq(pk, &k)?, concat_seq(pv, &v)?, past_len)
        }
        None => (k, v, 0),
    };
    let offset = match &nonpad {
        Some(n) => Offset::PerBatch(batch_offsets(n, &q)?),
        None => Offset::Fixed(past_len),
    };
    let bias = bias(&attrs, &q, &k, mask.as_ref(), &offset, nonpad.as_ref())?;
    let scores = Scores::compute(&attrs, &q, &k, bias.as_ref())?;
    let mut y = scores
        .probs
        .matmul(&share_heads(&v, q.shape().dims()[1].clone())?)?;
    if three_d {
        y = merge_heads(&y)?;
    }
    let qk_output = match attrs.qk_output_mode {
        0 => scores.raw,
        1 => scores.capped,
        2 => scores.biased,
        _ => scores.probs,
    };
    let mut outputs = vec![y.into(), k.into(), v.into()];
    if cx.node.output.get(3).is_some_and(|n| !n.is_empty()) {
        outputs.push(qk_output.into());
    }
    Ok(outputs)
}

/// Q, K and V of one float dtype; a float mask of the same one.
fn check_dtypes(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Res<()> {
    let d = q.dtype();
    if !d.is_float() {
        return Err(unsupported(format!("Attention of {d}")));
    }
    if k.dtype() != d || v.dtype() != d {
        return Err(unsupported(format!(
            "Attention of Q {d}, K {}, V {} (one dtype)",
            k.dtype(),
            v.dtype()
        )));
    }
    match mask.map(Tensor::dtype) {
        Some(m) if m != DType::Bool && m != d => Err(unsupported(format!(
            "a {m} attn_mask for {d} attention (bool or the query's dtype)"
        ))),
        _ => Ok(()),
    }
}

/// `[batch, heads, seq, head_size]` operands: 3-D ones (`[batch, seq, heads · head_size]`) have
/// their heads split out; 4-D ones must agree with the head counts if these are given.
fn to_4d(q: &Tensor, k: &Tensor, v: &Tensor, heads: Option<(u64, u64)>) -> Res<[Tensor; 3]> {
    let ranks = [q.rank(), k.rank(), v.rank()];
    match (ranks, heads) {
        ([3, 3, 3], Some((hq, hkv))) => Ok([
            split_heads(q, hq, "Q")?,
            split_heads(k, hkv, "K")?,
            split_heads(v, hkv, "V")?,
        ]),
        ([3, 3, 3], None) => Err(invalid(
            "3-D inputs need the q_num_heads and kv_num_heads attributes",
        )),
        ([4, 4, 4], heads) => {
            if let Some((hq, hkv)) = heads {
                let given = [Dim::Static(hq), Dim::Static(hkv)];
                if [&q.shape().dims()[1], &k.shape().dims()[1]] != [&given[0], &given[1]] {
                    return Err(invalid(format!(
                        "q_num_heads {hq} and kv_num_heads {hkv} disagree with Q {} and K {}",
                        q.ty(),
                        k.ty()
                    )));
                }
            }
            Ok([q.clone(), k.clone(), v.clone()])
        }
        _ => Err(invalid(format!(
            "Q, K and V must all be 3-D or all 4-D, not of ranks {ranks:?}"
        ))),
    }
}

/// `[b, s, h · d]` → `[b, h, s, d]`.
fn split_heads(x: &Tensor, heads: u64, name: &str) -> Res<Tensor> {
    let hidden = static_dim(x, 2, name)?;
    if hidden % heads != 0 {
        return Err(invalid(format!(
            "{name} {} does not split into {heads} heads",
            x.ty()
        )));
    }
    let dims = x.shape().into_dims();
    let split = [
        ReshapeDim::Dim(dims[0].clone()),
        ReshapeDim::Dim(dims[1].clone()),
        ReshapeDim::Dim(Dim::Static(heads)),
        ReshapeDim::Dim(Dim::Static(hidden / heads)),
    ];
    Ok(x.reshape(&split)?.permute(&[0, 2, 1, 3])?)
}

/// `[b, h, s, d]` → `[b, s, h · d]`.
fn merge_heads(y: &Tensor) -> Res<Tensor> {
    let dims = y.shape().into_dims();
    let hidden = static_dim(y, 1, "the output's heads")? * static_dim(y, 3, "the head size")?;
    let merged = [
        ReshapeDim::Dim(dims[0].clone()),
        ReshapeDim::Dim(dims[2].clone()),
        ReshapeDim::Dim(Dim::Static(hidden)),
    ];
    Ok(y.permute(&[0, 2, 1, 3])?.reshape(&merged)?)
}

fn concat_seq(past: &Tensor, new: &Tensor) -> Res<Tensor> {
    if past.rank() != 4 {
        return Err(invalid(format!(
            "the past cache {} must be 4-D [batch, heads, seq, head_size]",
            past.ty()
        )));
    }
    Ok(past.builder().concat(&[past, new], 2)?)
}

/// A KV operand with one head per query head: grouped-query heads are shared by `q_heads /
/// kv_heads` consecutive query heads (as `repeat_interleave`), through a broadcast.
pub(super) fn share_heads(x: &Tensor, q_heads: Dim) -> Res<Tensor> {
    let kv_heads = x.shape().dims()[1].clone();
    if kv_heads == q_heads {
        return Ok(x.clone());
    }
    let (Some(hq), Some(hkv)) = (q_heads.as_static(), kv_heads.as_static()) else {
        return Err(unsupported(format!(
            "grouped-query attention over symbolic head counts ({q_heads} and {kv_heads})"
        )));
    };
    if hq % hkv != 0 {
        return Err(invalid(format!(
            "{hq} query heads are not a multiple of {hkv} key/value heads"
        )));
    }
    let dims = x.shape().into_dims();
    let mut repeated = dims.clone();
    repeated.insert(2, Dim::Static(hq / hkv));
    let mut merged: Vec<ReshapeDim> = dims.into_iter().map(ReshapeDim::Dim).collect();
    merged[1] = ReshapeDim::Dim(Dim::Static(hq));
    let shared = x
        .unsqueeze(&[2])?
        .broadcast_to(&Shape::new(repeated).map_err(|e| invalid(e.to_string()))?)?;
    Ok(shared.reshape(&merged)?)
}

/// `nonpad_kv_seqlen - q_len` as `[batch, 1, 1]` i64.
fn batch_offsets(nonpad: &Tensor, q: &Tensor) -> Res<Tensor> {
    if nonpad.rank() != 1 || !nonpad.dtype().is_int() {
        return Err(invalid(format!(
            "nonpad_kv_seqlen {} must be a vector of integers",
            nonpad.ty()
        )));
    }
    let q_len = static_dim(q, 2, "the query length")?;
    let n = cast_to(nonpad, DType::I64)?;
    Ok(n.unsqueeze(&[1, 2])?.add_scalar(-(q_len as f64))?)
}

/// The additive bias over `[.., q_len, kv_len]` (0 where a key is attended, `-inf` or the float
/// mask's value elsewhere), or `None` when nothing is masked.
fn bias(
    attrs: &Attrs,
    q: &Tensor,
    k: &Tensor,
    mask: Option<&Tensor>,
    offset: &Offset,
    nonpad: Option<&Tensor>,
) -> Res<Option<Tensor>> {
    let dtype = q.dtype();
    let mask = mask.map(|m| pad_mask(m, k)).transpose()?;
    let (float_mask, mut allowed) = match mask {
        Some(m) if m.dtype() == DType::Bool => (None, Some(m)),
        m => (m, None),
    };
    let mut and = |a: Tensor| -> Res<()> {
        allowed = Some(match allowed.take() {
            Some(b) => b.and(&a)?,
            None => a,
        });
        Ok(())
    };
    if attrs.is_causal || attrs.has_window() || nonpad.is_some() {
        let positions = Positions::new(q, k, offset)?;
        if attrs.is_causal {
            and(positions.keys.le(&positions.query)?)?;
        }
        let (left, right) = attrs.window;
        if left >= 0 {
            and(positions
                .keys
                .ge(&positions.query.add_scalar(-(left as f64))?)?)?;
        }
        if right >= 0 {
            and(positions
                .keys
                .le(&positions.query.add_scalar(right as f64)?)?)?;
        }
        if let Some(n) = nonpad {
            // `[batch, 1, 1, 1]` against the keys' positions.
            let valid = cast_to(n, DType::I64)?.unsqueeze(&[1, 2, 3])?;
            and(positions.keys.lt(&valid)?)?;
        }
    }
    let b = q.builder();
    let neg_inf = b.scalar(dtype, f64::NEG_INFINITY)?;
    Ok(match (float_mask, allowed) {
        (Some(m), Some(a)) => Some(a.select(&m, &neg_inf)?),
        (Some(m), None) => Some(m),
        (None, Some(a)) => Some(a.select(&b.scalar(dtype, 0.0)?, &neg_inf)?),
        (None, None) => None,
    })
}

/// The mask padded along its last axis to the keys' length: with `-inf`, or `false` for bool.
fn pad_mask(mask: &Tensor, k: &Tensor) -> Res<Tensor> {
    let kv_len = k.shape().dims()[2].clone();
    let Some(last) = mask.shape().dims().last().cloned() else {
        return Err(invalid("attn_mask is a scalar"));
    };
    if last == kv_len {
        return Ok(mask.clone());
    }
    let (Some(have), Some(want)) = (last.as_static(), kv_len.as_static()) else {
        return Err(unsupported(format!(
            "an attn_mask {} against {kv_len} keys of symbolic length",
            mask.ty()
        )));
    };
    if have > want {
        return Err(invalid(format!(
            "attn_mask {} is longer than the {want} keys",
            mask.ty()
        )));
    }
    let mut pads = vec![(0, 0); mask.rank()];
    *pads.last_mut().expect("rank checked above") = (0, want - have);
    let value = if mask.dtype() == DType::Bool {
        0.0
    } else {
        f64::NEG_INFINITY
    };
    Ok(mask.pad(&pads, value)?)
}

/// Absolute positions, i64, broadcastable against `[batch, heads, q_len, kv_len]`.
struct Positions {
    /// Each query's position `i + offset`: `[q_len, 1]`, or `[batch, 1, q_len, 1]` per batch.
    query: Tensor,
    /// Each key's position `j`: `[1, kv_len]`.
    keys: Tensor,
}

impl Positions {
    fn new(q: &Tensor, k: &Tensor, offset: &Offset) -> Res<Positions> {
        let b = q.builder();
        let q_len = static_dim(
            q,
            2,
            "the query length of a causal, windowed or padded mask",
        )?;
        let kv_len = static_dim(k, 2, "the key length of a causal, windowed or padded mask")?;
        let rows = b.arange(DType::I64, q_len)?.unsqueeze(&[1])?;
        let query = match offset {
            Offset::Fixed(n) => rows.add_scalar(*n as f64)?,
            Offset::PerBatch(per_batch) => rows.add(per_batch)?.unsqueeze(&[1])?,
        };
        let keys = b.arange(DType::I64, kv_len)?.unsqueeze(&[0])?;
        Ok(Positions { query, keys })
    }
}

/// The scores at each stage the 4th output can show.
struct Scores {
    /// `scale · Q Kᵀ`.
    raw: Tensor,
    /// After the soft cap.
    capped: Tensor,
    /// After the bias.
    biased: Tensor,
    /// After softmax and the fully-masked-row guard, in the query's dtype.
    probs: Tensor,
}

impl Scores {
    fn compute(attrs: &Attrs, q: &Tensor, k: &Tensor, bias: Option<&Tensor>) -> Res<Scores> {
        let scale = match attrs.scale {
            Some(s) => s,
            None => 1.0 / (static_dim(q, 3, "the head size (it sets the scale)")? as f64).sqrt(),
        };
        let k = share_heads(k, q.shape().dims()[1].clone())?;
        let raw = q.matmul(&k.transpose()?)?.mul_scalar(scale)?;
        let capped = if attrs.softcap > 0.0 {
            let c = attrs.softcap;
            raw.mul_scalar(1.0 / c)?.tanh()?.mul_scalar(c)?
        } else {
            raw.clone()
        };
        let biased = match bias {
            Some(b) => capped.add(b)?,
            None => capped.clone(),
        };
        let dtype = q.dtype();
        // Half-precision scores are normalized in f32 (as a fused kernel does): each step of a
        // softmax rounded to f16 puts the result an ulp or two off the exact one.
        let softmax_dtype = attrs.softmax_dtype.unwrap_or(compute_dtype(dtype));
        let logits = cast_to(&biased, softmax_dtype)?;
        let mut probs = cast_to(&logits.softmax(logits.rank() - 1)?, dtype)?;
        if let Some(b) = bias {
            // A row whose bias masks every key has no attended key: zeros, not NaN.
            let neg_inf = b.builder().scalar(dtype, f64::NEG_INFINITY)?;
            let fully_masked = b.max(&[b.rank() - 1], true)?.eq(&neg_inf)?;
            probs = fully_masked.select(&b.builder().scalar(dtype, 0.0)?, &probs)?;
        }
        Ok(Scores {
            raw,
            capped,
            biased,
            probs,
        })
    }
}
