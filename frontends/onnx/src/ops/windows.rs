//! Window functions: `HannWindow`, `HammingWindow` and `BlackmanWindow`, computed at import.
//!
//! Takes a window length known at import (a scalar), `periodic` and a float `output_datatype`.
//! Guarantees: a constant of the window's values computed in f64 and rounded once to the
//! output dtype (ONNX's reference computes in the output dtype, so its f32 values may differ
//! by an ulp); a symmetric window of length 1 is NaN, as the reference's `0 / 0`. Integer
//! output dtypes (the reference's float-to-int truncation of values that round near 1) are
//! refused.

use super::{Cx, Res};
use crate::known::Known;
use crate::model::dtype_of;
use crate::state::Value;
use crate::{invalid, unsupported};
use std::f64::consts::PI;
use tir_graph::{op::MAX_CONSTANT_ELEMENTS, F64Tensor, HostTensor};

pub(super) fn window(cx: &mut Cx) -> Res<Vec<Value>> {
    let periodic = cx.attrs.int("periodic", 1)? != 0;
    let to = cx.attrs.int("output_datatype", 1)?;
    let dtype = i32::try_from(to)
        .map_err(|_| invalid(format!("output_datatype {to}")))
        .and_then(|t| dtype_of(t).map_err(unsupported))?;
    if !dtype.is_float() {
        return Err(unsupported(format!("{} of {dtype}", cx.op())));
    }
    let size = match cx.ints(0)?[..] {
        [n] => n,
        _ => return Err(invalid("size must be a scalar")),
    };
    let n = u64::try_from(size)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| unsupported(format!("a window of {size} elements")))?;
    if n > MAX_CONSTANT_ELEMENTS {
        return Err(unsupported(format!("a window of {n} elements")));
    }
    // The period: the length for a periodic window, one less for a symmetric one.
    let period = if periodic { n as f64 } else { n as f64 - 1.0 };
    let f: fn(f64) -> f64 = match cx.op() {
        "HannWindow" => |t| (PI * t).sin().powi(2),
        "HammingWindow" => |t| 25.0 / 46.0 - (21.0 / 46.0) * (2.0 * PI * t).cos(),
        "BlackmanWindow" => |t| 0.42 - 0.5 * (2.0 * PI * t).cos() + 0.08 * (4.0 * PI * t).cos(),
        other => unreachable!("{other} is not a window"),
    };
    let values: Vec<f64> = (0..n)
        .map(|i| dtype.round_value(f(i as f64 / period)))
        .collect();
    let t = F64Tensor::new(dtype, vec![n], values).map_err(|e| invalid(e.to_string()))?;
    Ok(vec![Known::data(HostTensor::from_f64(&t)?).into()])
}
