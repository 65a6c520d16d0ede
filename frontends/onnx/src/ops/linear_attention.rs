//! ONNX `LinearAttention` (opset 27): recurrent linear attention over a state `S` of
//! `[B, H_kv, d_k, d_v]`, with the `linear`, `gated`, `delta` and `gated_delta` update rules and
//! grouped-query heads.
//!
//! Takes packed `[B, T, H · d]` query, key and value (and `decay` / `beta` as the rule needs),
//! an optional `past_state`, the sequence length `T` static and at most [`MAX_STEPS`]. Guarantees
//! the operator's sequential semantics exactly as its reference runs them: the recurrence is
//! unrolled over `T`, each step's state update written as IR ops in f32 (the reference
//! accumulates in f32 whatever the dtypes), each step's output `scale · q_tᵀ S_t` read with the
//! query heads grouped onto their key/value head; `output` is cast to the query's dtype and
//! `present_state` to `past_state`'s (the query's without one). The `chunk_size` hint changes
//! nothing. Cost: about eight small ops per step, so a long prefill is a long graph; beyond
//! [`MAX_STEPS`] the op is refused, naming the length.

use super::{cast_to, static_dim, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Dim, ReshapeDim, Shape, Tensor};

/// The longest sequence unrolled.
const MAX_STEPS: u64 = 256;

/// The attributes and the sizes they fix.
struct Heads {
    q: u64,
    kv: u64,
    d_k: u64,
    d_v: u64,
}

impl Heads {
    fn group(&self) -> u64 {
        self.q / self.kv
    }
}

pub(super) fn linear_attention(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 27 {
        return Err(invalid("LinearAttention is an op of opset 27 on"));
    }
    let rule = cx.attrs.string("update_rule", "gated_delta")?;
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => return Err(invalid(format!("update_rule `{other}`"))),
    };
    let scale = cx.attrs.float("scale", 0.0)?;
    cx.attrs.int("chunk_size", 64)?;
    let heads = (
        cx.attrs.opt_int("q_num_heads")?,
        cx.attrs.opt_int("kv_num_heads")?,
    );
    let (q, k, v) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    let past = cx.opt_tensor(3)?;
    let (decay, beta) = (cx.opt_tensor(4)?, cx.opt_tensor(5)?);
    if decay.is_some() != gated || beta.is_some() != delta {
        return Err(invalid(format!(
            "update_rule `{rule}` takes decay: {gated}, beta: {delta}"
        )));
    }
    let h = check(heads, &q, &k, &v, past.as_ref())?;
    let steps = static_dim(&q, 1, "the sequence length")?;
    if steps > MAX_STEPS {
        return Err(unsupported(format!(
            "LinearAttention over {steps} steps (unrolled up to {MAX_STEPS})"
        )));
    }
    let scale = if scale == 0.0 {
        1.0 / (h.d_k as f64).sqrt()
    } else {
        f64::from(scale)
    };
    let state_dtype = past.as_ref().map_or(q.dtype(), Tensor::dtype);
    let inputs = Steps {
        q: query_groups(&q, &h)?,
        k: split_heads(&k, h.kv, h.d_k)?,
        v: split_heads(&v, h.kv, h.d_v)?,
        decay: decay.map(|g| decay_factors(&g, &q, &h)).transpose()?,
        beta: beta.map(|b| beta_rates(&b, &q, h.kv)).transpose()?,
    };
    let state = match past {
        Some(p) => cast_to(&p, DType::F32)?,
        None => zero_state(&q, &h)?,
    };
    let (y, state) = inputs.run(state, steps)?;
    let y = merge_heads(&y.mul_scalar(scale)?, &h)?;
    Ok(vec![
        cast_to(&y, q.dtype())?.into(),
        cast_to(&state, state_dtype)?.into(),
    ])
}

/// The per-step inputs, in f32, each with the sequence on axis 2.
struct Steps {
    /// `[B, H_kv, T, G, d_k]`: query head `h` is group member `h % G` of key/value head `h / G`.
    q: Tensor,
    /// `[B, H_kv, T, d_k]`.
    k: Tensor,
    /// `[B, H_kv, T, d_v]`.
    v: Tensor,
    /// `exp(decay)` as `[B, H_kv, d_k or 1, T]` (a column per step).
    decay: Option<Tensor>,
    /// `[B, H_kv or 1, T, 1]`.
    beta: Option<Tensor>,
}

impl Steps {
    /// The unscaled outputs `[B, H_kv, T, G, d_v]` and the final state.
    fn run(&self, mut state: Tensor, steps: u64) -> Res<(Tensor, Tensor)> {
        let mut outputs = Vec::with_capacity(steps as usize);
        for t in 0..steps {
            state = self.update(&state, t)?;
            let q_t = self.q.slice_axis(2, t, t + 1)?.squeeze(&[2])?;
            outputs.push(q_t.matmul(&state)?.unsqueeze(&[2])?);
        }
        let b = state.builder();
        let y = b.concat(&outputs.iter().collect::<Vec<_>>(), 2)?;
        Ok((y, state))
    }

    /// `S_t` from `S_{t-1}`: decayed, then written with `k_t ⊗ v_t` or, under the delta rule,
    /// with `k_t ⊗ β_t (v_t - S'ᵀ k_t)` where `S'` is the decayed state.
    fn update(&self, state: &Tensor, t: u64) -> Res<Tensor> {
        let k_row = self.k.slice_axis(2, t, t + 1)?;
        let v_row = self.v.slice_axis(2, t, t + 1)?;
        let decayed = match &self.decay {
            Some(g) => state.mul(&g.slice_axis(3, t, t + 1)?)?,
            None => state.clone(),
        };
        let write = match &self.beta {
            Some(beta) => {
                let retrieved = k_row.matmul(&decayed)?;
                beta.slice_axis(2, t, t + 1)?.mul(&v_row.sub(&retrieved)?)?
            }
            None => v_row,
        };
        Ok(decayed.add(&k_row.transpose()?.mul(&write)?)?)
    }
}

/// The head counts and sizes, after checking every operand's dtype and shape.
fn check(
    heads: (Option<i64>, Option<i64>),
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    past: Option<&Tensor>,
) -> Res<Heads> {
    let (Some(hq), Some(hkv)) = heads else {
        return Err(invalid("q_num_heads and kv_num_heads are required"));
    };
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(invalid(format!(
            "q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}"
        )));
    }
    for t in [q, k, v].into_iter().chain(past) {
        if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(unsupported(format!("LinearAttention of {}", t.ty())));
        }
    }
    if k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        return Err(invalid(format!(
            "query {}, key {} and value {} of one dtype",
            q.ty(),
            k.ty(),
            v.ty()
        )));
    }
    let (hq, hkv) = (hq as u64, hkv as u64);
    let d_k = packed_size(q, hq, "query")?;
    let d_v = packed_size(v, hkv, "value")?;
    if packed_size(k, hkv, "key")? != d_k {
        return Err(invalid(format!(
            "key {} against query {}: another head size",
            k.ty(),
            q.ty()
        )));
    }
    let h = Heads {
        q: hq,
        kv: hkv,
        d_k,
        d_v,
    };
    if let Some(p) = past {
        let batch = q.shape().dims()[0].clone();
        let expected = [batch, hkv.into(), d_k.into(), d_v.into()];
        if p.shape().dims() != expected {
            return Err(invalid(format!(
                "past_state {} is not [batch, {hkv}, {d_k}, {d_v}]",
                p.ty()
            )));
        }
    }
    Ok(h)
}

/// The head size `d` of a packed `[B, T, heads · d]` operand of `q`'s batch and length.
fn packed_size(x: &Tensor, heads: u64, name: &str) -> Res<u64> {
    if x.rank() != 3 {
        return Err(invalid(format!("{name} {} is not [B, T, H · d]", x.ty())));
    }
    let packed = static_dim(x, 2, name)?;
    if packed % heads != 0 {
        return Err(invalid(format!(
            "{name} {} does not split into {heads} heads",
            x.ty()
        )));
    }
    Ok(packed / heads)
}

/// `[B, T, heads · d]` → `[B, heads, T, d]` in f32.
fn split_heads(x: &Tensor, heads: u64, d: u64) -> Res<Tensor> {
    let split = packed(x, &[heads, d])?;
    Ok(cast_to(&split, DType::F32)?.permute(&[0, 2, 1, 3])?)
}

/// `[B, T, H_q · d_k]` → `[B, H_kv, T, G, d_k]` in f32.
fn query_groups(q: &Tensor, h: &Heads) -> Res<Tensor> {
    let split = packed(q, &[h.kv, h.group(), h.d_k])?;
    Ok(cast_to(&split, DType::F32)?.permute(&[0, 2, 1, 3, 4])?)
}

/// `[B, H_kv, T, G, d_v]` → `[B, T, H_q · d_v]`.
fn merge_heads(y: &Tensor, h: &Heads) -> Res<Tensor> {
    let dims = y.shape().into_dims();
    let merged = [
        ReshapeDim::Dim(dims[0].clone()),
        ReshapeDim::Dim(dims[2].clone()),
        ReshapeDim::Dim(Dim::Static(h.q * h.d_v)),
    ];
    Ok(y.permute(&[0, 2, 1, 3, 4])?.reshape(&merged)?)
}

/// `[B, T, ∏ parts]` reshaped to `[B, T, parts...]`.
fn packed(x: &Tensor, parts: &[u64]) -> Res<Tensor> {
    let dims = x.shape().into_dims();
    let mut to = vec![
        ReshapeDim::Dim(dims[0].clone()),
        ReshapeDim::Dim(dims[1].clone()),
    ];
    to.extend(parts.iter().map(|&p| ReshapeDim::Dim(Dim::Static(p))));
    Ok(x.reshape(&to)?)
}

/// `exp(decay)` as `[B, H_kv, d_k or 1, T]`: a per-key-dim decay (`[B, T, H_kv · d_k]`) or one
/// per head (`[B, T, H_kv]`).
fn decay_factors(g: &Tensor, q: &Tensor, h: &Heads) -> Res<Tensor> {
    let last = same_steps(g, q, "decay")?;
    let per = if last == h.kv * h.d_k {
        h.d_k
    } else if last == h.kv {
        1
    } else {
        return Err(invalid(format!(
            "decay {} is neither [B, T, {}] nor [B, T, {}]",
            g.ty(),
            h.kv,
            h.kv * h.d_k
        )));
    };
    let g = cast_to(&packed(g, &[h.kv, per])?, DType::F32)?;
    Ok(g.exp()?.permute(&[0, 2, 3, 1])?)
}

/// `beta` (`[B, T, H_kv]` or `[B, T, 1]`) as `[B, H_kv or 1, T, 1]` in f32.
fn beta_rates(beta: &Tensor, q: &Tensor, kv: u64) -> Res<Tensor> {
    let last = same_steps(beta, q, "beta")?;
    if last != kv && last != 1 {
        return Err(invalid(format!(
            "beta {} is neither [B, T, {kv}] nor [B, T, 1]",
            beta.ty()
        )));
    }
    let b = cast_to(&packed(beta, &[last, 1])?, DType::F32)?;
    Ok(b.permute(&[0, 2, 1, 3])?)
}

/// The static last dim of a rank-3 gate of the query's batch and length.
fn same_steps(x: &Tensor, q: &Tensor, name: &str) -> Res<u64> {
    if x.rank() != 3 || x.shape().dims()[..2] != q.shape().dims()[..2] {
        return Err(invalid(format!(
            "{name} {} is not [B, T, _] for query {}",
            x.ty(),
            q.ty()
        )));
    }
    static_dim(x, 2, name)
}

/// The zero state `[B, H_kv, d_k, d_v]` (f32) of a call without `past_state`.
fn zero_state(q: &Tensor, h: &Heads) -> Res<Tensor> {
    let batch = q.shape().dims()[0].clone();
    let shape = Shape::new(vec![batch, h.kv.into(), h.d_k.into(), h.d_v.into()])
        .map_err(|e| invalid(e.to_string()))?;
    let zero = q
        .builder()
        .scalar(DType::F32, 0.0)?
        .reshape_to(&Shape::of(&[1, 1, 1, 1]))?;
    Ok(zero.broadcast_to(&shape)?)
}
