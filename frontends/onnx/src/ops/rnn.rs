//! Recurrent layers (`RNN`, `GRU`, `LSTM`, opset 7 on) unrolled over a sequence length known at
//! import (at most [`MAX_STEPS`] steps per direction).
//!
//! Takes `X` (`[seq, batch, input]`, or `[batch, seq, input]` with `layout` 1), the weights `W`,
//! `R` and optional `B`, `sequence_lens`, `initial_h`, `initial_c` and `P` (peepholes) as
//! run-time tensors of static shape. Guarantees ONNX's equations per direction (forward,
//! reverse, bidirectional) with the gate orders `zrh` (GRU) and `iofc` (LSTM), GRU's
//! `linear_before_reset`, `clip` applied to every activation's input, and the `activations`
//! that take no parameters or use their ONNX defaults. The input projection `X·Wᵀ + Wb` is one
//! matmul over all steps; each step adds one `h·Rᵀ` matmul and elementwise gates. With
//! `sequence_lens`, a step at `t ≥ len[b]` leaves batch `b`'s state as it was and writes zeros
//! to `Y`, so a reverse direction starts at `len[b] − 1`. 16-bit floats compute in f32.
//! Refused: `activation_alpha`/`activation_beta` (their consumption order is not specified
//! precisely enough), `Affine`/`ScaledTanh` (no defaults), LSTM's `input_forget` = 1.

use super::elementwise::{hard_sigmoid, softplus};
use super::{cast_to, compute_dtype, float, Cx, Res};
use crate::proto::attribute_proto::AttributeType;
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// The most time steps one direction is unrolled over.
const MAX_STEPS: u64 = 512;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    fn gates(self) -> u64 {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Kind::Rnn => &["Tanh"],
            Kind::Gru => &["Sigmoid", "Tanh"],
            Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation of a recurrent cell, with its ONNX op's default parameters.
#[derive(Clone, Copy, Debug)]
enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Softsign,
    Softplus,
    LeakyRelu,
    HardSigmoid,
    Elu,
    ThresholdedRelu,
}

impl Act {
    fn parse(name: &str) -> Res<Act> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            "leakyrelu" => Act::LeakyRelu,
            "hardsigmoid" => Act::HardSigmoid,
            "elu" => Act::Elu,
            "thresholdedrelu" => Act::ThresholdedRelu,
            "affine" | "scaledtanh" => {
                return Err(unsupported(format!(
                    "the activation `{name}` (it has no default parameters)"
                )))
            }
            _ => return Err(invalid(format!("activation `{name}`"))),
        })
    }

    fn apply(self, x: &Tensor) -> Res<Tensor> {
        let zero = x.builder().scalar(x.dtype(), 0.0)?;
        Ok(match self {
            Act::Relu => x.relu()?,
            Act::Tanh => x.tanh()?,
            Act::Sigmoid => x.sigmoid()?,
            Act::Softsign => x.div(&x.abs()?.add_scalar(1.0)?)?,
            Act::Softplus => softplus(x)?,
            Act::LeakyRelu => x.lt(&zero)?.select(&x.mul_scalar(0.01)?, x)?,
            Act::HardSigmoid => hard_sigmoid(x, 0.2, 0.5)?,
            Act::Elu => x.lt(&zero)?.select(&x.exp()?.add_scalar(-1.0)?, x)?,
            Act::ThresholdedRelu => x
                .gt(&x.builder().scalar(x.dtype(), 1.0)?)?
                .select(x, &zero)?,
        })
    }
}

/// The node's attributes that shape the computation.
struct Config {
    kind: Kind,
    hidden: u64,
    directions: Vec<bool>,
    /// Per direction, the cell's activations (f, g[, h]).
    acts: Vec<Vec<Act>>,
    clip: Option<f64>,
    linear_before_reset: bool,
    batch_first: bool,
}

/// One direction's weights, transposed for `x·Wᵀ`, and its state inputs.
struct Weights {
    w: Tensor,
    r: Tensor,
    wb: Option<Tensor>,
    rb: Option<Tensor>,
    p: Option<Tensor>,
    h0: Option<Tensor>,
    c0: Option<Tensor>,
}

pub(super) fn recurrent(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 7 {
        return Err(unsupported(format!("{} before opset 7", cx.op())));
    }
    let kind = match cx.op() {
        "RNN" => Kind::Rnn,
        "GRU" => Kind::Gru,
        _ => Kind::Lstm,
    };
    let x = cx.tensor(0)?;
    if x.rank() != 3 {
        return Err(invalid(format!(
            "{}'s X is {}, not of rank 3",
            cx.op(),
            x.ty()
        )));
    }
    let dtype = float(&x, cx.op())?.dtype();
    let wide = compute_dtype(dtype);
    let cfg = config(cx, kind)?;
    let x = cast_to(&x, wide)?;
    let x = if cfg.batch_first {
        x.permute(&[1, 0, 2])?
    } else {
        x
    };
    let dims = x
        .shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("{} of symbolic shape {}", cx.op(), x.ty())))?;
    let (steps, batch) = (dims[0], dims[1]);
    if steps > MAX_STEPS || steps == 0 {
        return Err(unsupported(format!(
            "{} over {steps} steps (1 to {MAX_STEPS} are unrolled)",
            cx.op()
        )));
    }
    let valid = sequence_mask(cx, steps, batch)?;
    let mut ys = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &reverse) in cfg.directions.iter().enumerate() {
        let wts = weights(cx, &cfg, d, wide, batch)?;
        let (y, h, c) = unroll(&cfg, &cfg.acts[d], &x, &wts, &valid, reverse)?;
        ys.push(y);
        hs.push(h);
        cs.push(c);
    }
    outputs(&cfg, ys, hs, cs, dtype)
}

/// Attribute `name` as strings, if present.
fn strings(cx: &Cx, name: &str) -> Res<Option<Vec<String>>> {
    let Some(a) = cx.node.attribute.iter().find(|a| a.name() == name) else {
        return Ok(None);
    };
    cx.attrs.ignore(name);
    if a.r#type.is_some() && a.r#type() != AttributeType::Strings {
        return Err(invalid(format!(
            "attribute `{name}` is not a list of strings"
        )));
    }
    a.strings
        .iter()
        .map(|s| {
            String::from_utf8(s.clone()).map_err(|_| invalid(format!("`{name}` is not UTF-8")))
        })
        .collect::<Res<Vec<_>>>()
        .map(Some)
}

fn config(cx: &mut Cx, kind: Kind) -> Res<Config> {
    for refused in ["activation_alpha", "activation_beta"] {
        if cx.attrs.floats(refused)?.is_some() {
            return Err(unsupported(format!("{}'s `{refused}`", cx.op())));
        }
    }
    let directions = match cx.attrs.string("direction", "forward")?.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return Err(invalid(format!("direction `{other}`"))),
    };
    let per = kind.default_activations().len();
    let names = strings(cx, "activations")?.unwrap_or_else(|| {
        let defaults = kind.default_activations().iter().map(|s| s.to_string());
        defaults.cycle().take(per * directions.len()).collect()
    });
    if names.len() != per * directions.len() {
        return Err(invalid(format!(
            "{} activations for {} direction(s) of {per}",
            names.len(),
            directions.len()
        )));
    }
    let acts = names
        .chunks(per)
        .map(|c| c.iter().map(|n| Act::parse(n)).collect())
        .collect::<Res<Vec<Vec<Act>>>>()?;
    let clip = cx.attrs.opt_float("clip")?.map(f64::from);
    if clip.is_some_and(|c| c.is_nan() || c < 0.0) {
        return Err(invalid(format!("clip {clip:?}")));
    }
    let linear_before_reset = kind == Kind::Gru && cx.attrs.int("linear_before_reset", 0)? != 0;
    if kind == Kind::Lstm && cx.attrs.int("input_forget", 0)? != 0 {
        return Err(unsupported("LSTM's input_forget = 1"));
    }
    let batch_first = match if cx.opset >= 14 {
        cx.attrs.int("layout", 0)?
    } else {
        0
    } {
        0 => false,
        1 => true,
        other => return Err(invalid(format!("layout {other}"))),
    };
    let hidden = cx.attrs.opt_int("hidden_size")?;
    let r = cx.tensor(2)?;
    let r_hidden = r
        .shape()
        .dims()
        .get(2)
        .and_then(|d| d.as_static())
        .ok_or_else(|| {
            invalid(format!(
                "R {} is not [directions, gates·hidden, hidden]",
                r.ty()
            ))
        })?;
    if hidden.is_some_and(|h| h != r_hidden as i64) {
        return Err(invalid(format!(
            "hidden_size {hidden:?} for R of hidden size {r_hidden}"
        )));
    }
    Ok(Config {
        kind,
        hidden: r_hidden,
        directions,
        acts,
        clip,
        linear_before_reset,
        batch_first,
    })
}

/// `[steps]` of `[batch, 1]` bools: whether step `t` is inside batch `b`'s sequence (`None`
/// without `sequence_lens`).
fn sequence_mask(cx: &mut Cx, steps: u64, batch: u64) -> Res<Option<Vec<Tensor>>> {
    let Some(lens) = cx.opt_tensor(4)? else {
        return Ok(None);
    };
    if !lens.dtype().is_int() || lens.shape() != Shape::of(&[batch]) {
        return Err(invalid(format!(
            "sequence_lens {} for batch {batch}",
            lens.ty()
        )));
    }
    let lens = lens.cast(DType::I64)?.reshape_to(&Shape::of(&[batch, 1]))?;
    let b = lens.builder();
    (0..steps)
        .map(|t| Ok(b.scalar(DType::I64, t as f64)?.lt(&lens)?))
        .collect::<Res<Vec<_>>>()
        .map(Some)
}

/// Row `d` of input `i` (`[directions, ...]`), checked against `dims`, in `wide`.
fn row(cx: &mut Cx, i: usize, d: usize, dims: &[u64], wide: DType) -> Res<Option<Tensor>> {
    let Some(t) = cx.opt_tensor(i)? else {
        return Ok(None);
    };
    if t.shape()
        .static_dims()
        .is_none_or(|s| s.len() != dims.len() + 1 || s[1..] != *dims)
    {
        return Err(invalid(format!("input {i} of {} is {}", cx.op(), t.ty())));
    }
    let r = t.slice_axis(0, d as u64, d as u64 + 1)?.squeeze(&[0])?;
    Ok(Some(cast_to(&r, wide)?))
}

fn weights(cx: &mut Cx, cfg: &Config, d: usize, wide: DType, batch: u64) -> Res<Weights> {
    let (h, gh) = (cfg.hidden, cfg.hidden * cfg.kind.gates());
    let input = match cx
        .tensor(1)?
        .shape()
        .dims()
        .get(2)
        .and_then(|d| d.as_static())
    {
        Some(i) => i,
        None => return Err(invalid("W is not [directions, gates·hidden, input]")),
    };
    let need =
        |t: Option<Tensor>, what: &str| t.ok_or_else(|| invalid(format!("{what} is missing")));
    let w = need(row(cx, 1, d, &[gh, input], wide)?, "W")?.transpose()?;
    let r = need(row(cx, 2, d, &[gh, h], wide)?, "R")?.transpose()?;
    let bias = row(cx, 3, d, &[2 * gh], wide)?;
    let (wb, rb) = match bias {
        Some(b) => (
            Some(b.slice_axis(0, 0, gh)?),
            Some(b.slice_axis(0, gh, 2 * gh)?),
        ),
        None => (None, None),
    };
    let state = |cx: &mut Cx, i: usize| -> Res<Option<Tensor>> {
        let Some(t) = cx.opt_tensor(i)? else {
            return Ok(None);
        };
        let t = if cfg.batch_first {
            t.permute(&[1, 0, 2])?
        } else {
            t
        };
        let dirs = cfg.directions.len() as u64;
        if t.shape() != Shape::of(&[dirs, batch, h]) {
            return Err(invalid(format!("input {i} of {} is {}", cx.op(), t.ty())));
        }
        Ok(Some(cast_to(
            &t.slice_axis(0, d as u64, d as u64 + 1)?.squeeze(&[0])?,
            wide,
        )?))
    };
    let h0 = state(cx, 5)?;
    let (c0, p) = if cfg.kind == Kind::Lstm {
        (state(cx, 6)?, row(cx, 7, d, &[3 * h], wide)?)
    } else {
        (None, None)
    };
    Ok(Weights {
        w,
        r,
        wb,
        rb,
        p,
        h0,
        c0,
    })
}

/// `x` clipped to `±clip` (when set), through `act`.
fn activate(cfg: &Config, act: Act, x: &Tensor) -> Res<Tensor> {
    let x = match cfg.clip {
        Some(c) => {
            let b = x.builder();
            x.maximum(&b.scalar(x.dtype(), -c)?)?
                .minimum(&b.scalar(x.dtype(), c)?)?
        }
        None => x.clone(),
    };
    act.apply(&x)
}

/// Columns `[i·h, (i+1)·h)` of the last axis: gate `i`.
fn gate(t: &Tensor, i: u64, h: u64) -> Res<Tensor> {
    Ok(t.slice_axis(t.rank() - 1, i * h, (i + 1) * h)?)
}

fn plus(t: Tensor, b: &Option<Tensor>) -> Res<Tensor> {
    Ok(match b {
        Some(b) => t.add(b)?,
        None => t,
    })
}

/// One direction over all steps: `Y` per step (in time order, `[batch, hidden]` each), and the
/// final hidden and cell states.
fn unroll(
    cfg: &Config,
    acts: &[Act],
    x: &Tensor,
    wts: &Weights,
    valid: &Option<Vec<Tensor>>,
    reverse: bool,
) -> Res<(Vec<Tensor>, Tensor, Option<Tensor>)> {
    let dims = x
        .shape()
        .static_dims()
        .expect("static: checked by the caller");
    let (steps, batch, input) = (dims[0], dims[1], dims[2]);
    let (h, gh) = (cfg.hidden, cfg.hidden * cfg.kind.gates());
    let b = x.builder();
    // X·Wᵀ + Wb for every step at once.
    let projected = x
        .reshape_to(&Shape::of(&[steps * batch, input]))?
        .matmul(&wts.w)?
        .reshape_to(&Shape::of(&[steps, batch, gh]))?;
    let projected = plus(projected, &wts.wb)?;
    let zeros = b
        .scalar(x.dtype(), 0.0)?
        .broadcast_to(&Shape::of(&[batch, h]))?;
    let mut state = wts.h0.clone().unwrap_or_else(|| zeros.clone());
    let mut cell =
        (cfg.kind == Kind::Lstm).then(|| wts.c0.clone().unwrap_or_else(|| zeros.clone()));
    let mut ys = vec![zeros.clone(); steps as usize];
    let order: Vec<u64> = if reverse {
        (0..steps).rev().collect()
    } else {
        (0..steps).collect()
    };
    for t in order {
        let xw = projected.slice_axis(0, t, t + 1)?.squeeze(&[0])?;
        let (new_h, new_c) = step(cfg, acts, wts, &xw, &state, cell.as_ref())?;
        let (y, next_h, next_c) = match valid {
            Some(v) => {
                let m = &v[t as usize];
                let c = match (&new_c, &cell) {
                    (Some(n), Some(old)) => Some(m.select(n, old)?),
                    _ => new_c,
                };
                (m.select(&new_h, &zeros)?, m.select(&new_h, &state)?, c)
            }
            None => (new_h.clone(), new_h, new_c),
        };
        ys[t as usize] = y;
        state = next_h;
        cell = next_c;
    }
    Ok((ys, state, cell))
}

/// One step of the cell: the new hidden state (and cell state for an LSTM).
fn step(
    cfg: &Config,
    acts: &[Act],
    wts: &Weights,
    xw: &Tensor,
    h_prev: &Tensor,
    c_prev: Option<&Tensor>,
) -> Res<(Tensor, Option<Tensor>)> {
    let h = cfg.hidden;
    let act = |i: usize, t: &Tensor| activate(cfg, acts[i], t);
    match cfg.kind {
        Kind::Rnn => {
            let pre = plus(xw.add(&h_prev.matmul(&wts.r)?)?, &wts.rb)?;
            Ok((act(0, &pre)?, None))
        }
        Kind::Gru => Ok((gru_step(cfg, acts, wts, xw, h_prev)?, None)),
        Kind::Lstm => {
            let c_prev = c_prev.expect("an LSTM carries a cell state");
            let gates = plus(xw.add(&h_prev.matmul(&wts.r)?)?, &wts.rb)?;
            let peep = |i: u64, c: &Tensor| -> Res<Tensor> {
                Ok(match &wts.p {
                    Some(p) => gate(p, i, h)?.mul(c)?,
                    None => c.builder().scalar(c.dtype(), 0.0)?,
                })
            };
            let i = act(0, &gate(&gates, 0, h)?.add(&peep(0, c_prev)?)?)?;
            let f = act(0, &gate(&gates, 2, h)?.add(&peep(2, c_prev)?)?)?;
            let c = act(1, &gate(&gates, 3, h)?)?;
            let cell = f.mul(c_prev)?.add(&i.mul(&c)?)?;
            let o = act(0, &gate(&gates, 1, h)?.add(&peep(1, &cell)?)?)?;
            Ok((o.mul(&act(2, &cell)?)?, Some(cell)))
        }
    }
}

/// A GRU step: gates z and r, then the candidate with the reset applied before or after the
/// recurrent product (`linear_before_reset`).
fn gru_step(
    cfg: &Config,
    acts: &[Act],
    wts: &Weights,
    xw: &Tensor,
    h_prev: &Tensor,
) -> Res<Tensor> {
    let h = cfg.hidden;
    let act = |i: usize, t: &Tensor| activate(cfg, acts[i], t);
    let rb = |i: u64| wts.rb.as_ref().map(|b| gate(b, i, h)).transpose();
    let r_cols = |i: u64| gate(&wts.r, i, h);
    let hr = h_prev.matmul(&gate_pair(&wts.r, h)?)?; // [B, 2h]: z and r
    let z = act(0, &plus(gate(xw, 0, h)?.add(&gate(&hr, 0, h)?)?, &rb(0)?)?)?;
    let r = act(0, &plus(gate(xw, 1, h)?.add(&gate(&hr, 1, h)?)?, &rb(1)?)?)?;
    let recurrent = if cfg.linear_before_reset {
        r.mul(&plus(h_prev.matmul(&r_cols(2)?)?, &rb(2)?)?)?
    } else {
        plus(r.mul(h_prev)?.matmul(&r_cols(2)?)?, &rb(2)?)?
    };
    let candidate = act(1, &gate(xw, 2, h)?.add(&recurrent)?)?;
    // (1 − z)·candidate + z·h_prev
    Ok(candidate.add(&z.mul(&h_prev.sub(&candidate)?)?)?)
}

/// The first two gates' columns of `Rᵀ` (`[hidden, 3·hidden]`).
fn gate_pair(rt: &Tensor, h: u64) -> Res<Tensor> {
    Ok(rt.slice_axis(1, 0, 2 * h)?)
}

/// `Y` (`[seq, dirs, batch, hidden]`), `Y_h` and, for an LSTM, `Y_c` (`[dirs, batch, hidden]`),
/// in the node's layout and dtype.
fn outputs(
    cfg: &Config,
    ys: Vec<Vec<Tensor>>,
    hs: Vec<Tensor>,
    cs: Vec<Option<Tensor>>,
    dtype: DType,
) -> Res<Vec<Value>> {
    let b = hs[0].builder();
    let stack = |ts: &[Tensor]| -> Res<Tensor> {
        let parts = ts
            .iter()
            .map(|t| t.unsqueeze(&[0]))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        Ok(b.concat(&refs, 0)?)
    };
    let steps = ys[0].len();
    let per_step = (0..steps)
        .map(|t| stack(&ys.iter().map(|y| y[t].clone()).collect::<Vec<_>>()))
        .collect::<Res<Vec<_>>>()?;
    let mut y = stack(&per_step)?;
    let mut y_h = stack(&hs)?;
    if cfg.batch_first {
        y = y.permute(&[2, 0, 1, 3])?;
        y_h = y_h.permute(&[1, 0, 2])?;
    }
    let mut out = vec![cast_to(&y, dtype)?.into(), cast_to(&y_h, dtype)?.into()];
    if cfg.kind == Kind::Lstm {
        let cs: Vec<Tensor> = cs.into_iter().flatten().collect();
        let mut y_c = stack(&cs)?;
        if cfg.batch_first {
            y_c = y_c.permute(&[1, 0, 2])?;
        }
        out.push(cast_to(&y_c, dtype)?.into());
    }
    Ok(out)
}
