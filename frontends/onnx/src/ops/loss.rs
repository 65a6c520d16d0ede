//! The class losses: `NegativeLogLikelihoodLoss` over log-probabilities `[N, C, d...]` and class
//! indices `[N, d...]`, and `SoftmaxCrossEntropyLoss`, the same loss over `log_softmax` of scores
//! along the class axis (whose log-probabilities are its optional second output).
//!
//! A position whose target is `ignore_index` contributes 0 and weighs 0 in the mean; it may lie
//! outside the classes. Any other target out of range is out of range for the gathers it drives.

use super::shape::take_along;
use super::{Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Tensor};

pub(super) fn class_loss(cx: &mut Cx) -> Res<Vec<Value>> {
    let reduction = cx.attrs.string("reduction", "mean")?;
    let ignore_index = cx.attrs.opt_int("ignore_index")?;
    let (x, target, weight) = (cx.tensor(0)?, cx.tensor(1)?, cx.opt_tensor(2)?);
    if !x.dtype().is_float() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    if x.rank() < 2 || target.rank() + 1 != x.rank() || !target.dtype().is_int() {
        return Err(invalid(format!(
            "scores {} and targets {} (`[N, C, d...]` and integers `[N, d...]`)",
            x.ty(),
            target.ty()
        )));
    }
    let log_prob = (cx.op() == "SoftmaxCrossEntropyLoss")
        .then(|| x.log_softmax(1))
        .transpose()?;
    let b = x.builder();
    let zero = b.scalar(x.dtype(), 0.0)?;
    let target = target.cast(DType::I64)?;
    // Ignored positions read class 0 (their value is dropped): `ignore_index` may be no class.
    let attended = match ignore_index {
        Some(i) => Some(target.ne(&b.scalar(DType::I64, i as f64)?)?),
        None => None,
    };
    let class = match &attended {
        Some(a) => a.select(&target, &b.scalar(DType::I64, 0.0)?)?,
        None => target,
    };
    let picked = take_along(log_prob.as_ref().unwrap_or(&x), &class.unsqueeze(&[1])?, 1)?;
    let mut loss = picked.squeeze(&[1])?.neg()?;
    if let Some(a) = &attended {
        loss = a.select(&loss, &zero)?;
    }
    // Each position's weight: its class's, 0 where ignored; `None` when all weigh 1.
    let weights = match (weight, &attended) {
        (Some(w), a) => {
            let w = w.gather(&class, 0)?;
            Some(match a {
                Some(a) => a.select(&w, &zero)?,
                None => w,
            })
        }
        (None, Some(a)) => Some(a.select(&b.scalar(x.dtype(), 1.0)?, &zero)?),
        (None, None) => None,
    };
    if let Some(w) = &weights {
        loss = loss.mul(w)?;
    }
    let y = reduce(&loss, weights.as_ref(), &reduction)?;
    let mut outputs = vec![y.into()];
    outputs.extend(log_prob.map(Value::from));
    Ok(outputs)
}

/// `none`, `sum`, or `mean` (divided by the sum of the weights, each 1 when there are none).
fn reduce(loss: &Tensor, weights: Option<&Tensor>, reduction: &str) -> Res<Tensor> {
    let all: Vec<usize> = (0..loss.rank()).collect();
    Ok(match (reduction, weights) {
        ("none", _) => loss.clone(),
        ("sum", _) => loss.sum(&all, false)?,
        ("mean", Some(w)) => loss.sum(&all, false)?.div(&w.sum(&all, false)?)?,
        ("mean", None) => loss.mean(&all, false)?,
        (other, _) => return Err(invalid(format!("reduction `{other}` (none, sum or mean)"))),
    })
}
