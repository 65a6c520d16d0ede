//! Shape ops: reshapes, permutations, slices, joins and splits, gathers, and the ops that make
//! known values (`Shape`, `Constant`, `Range`, ...), which stay known so that the shapes they
//! compute are fixed at import.

use super::{axes, axis, Cx, Res};
use crate::known::{Entry, Known};
use crate::model::read_tensor;
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{
    ConstData, DType, Dim, DimExpr, HostTensor, ReshapeDim, Shape, SliceRange, Tensor,
};

/// The dims of input `i` without making it part of the graph (a `Shape` of an input reads no data).
fn input_dims(cx: &mut Cx, i: usize) -> Res<Vec<Dim>> {
    let name = cx
        .input_name(i)
        .ok_or_else(|| invalid(format!("input {i} is missing")))?;
    Ok(
        match cx.st.value(&name).cloned().expect("inputs are defined") {
            Value::Tensor(t) => t.shape().dims().to_vec(),
            Value::Input { shape, .. } => shape.dims().to_vec(),
            Value::Known(k) => k.dims_of().into_iter().map(Dim::Static).collect(),
        },
    )
}

/// Input `i` as shape entries (known at import, symbolic ones included).
fn entries(cx: &mut Cx, i: usize) -> Res<(Vec<Entry>, bool)> {
    let k = cx.known(i)?;
    k.entries()
        .ok_or_else(|| invalid("expected an integer scalar or vector"))
}

pub(super) fn shape(cx: &mut Cx) -> Res<Vec<Value>> {
    let dims = input_dims(cx, 0)?;
    let rank = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let start = clamp(cx.attrs.int("start", 0)?);
    let end = clamp(cx.attrs.int("end", rank)?);
    let picked = if start < end { &dims[start..end] } else { &[] };
    Ok(vec![Known::shape_of(picked).into()])
}

pub(super) fn size(cx: &mut Cx) -> Res<Vec<Value>> {
    let dims = input_dims(cx, 0)?;
    let mut n = DimExpr::constant(1);
    for d in &dims {
        n = n.mul(&d.to_expr()).map_err(|e| invalid(e.to_string()))?;
    }
    Ok(vec![Known::dims(vec![n], true).into()])
}

pub(super) fn constant(cx: &mut Cx) -> Res<Vec<Value>> {
    let a = &cx.attrs;
    let t = if let Some(t) = a.tensor("value")? {
        read_tensor(t, None).map_err(invalid)?
    } else if let Some(v) = a.opt_float("value_float")? {
        HostTensor::scalar(v)
    } else if let Some(v) = a.floats("value_floats")? {
        let n = v.len() as u64;
        HostTensor::from_vec(v, &[n])?
    } else if let Some(v) = a.opt_int("value_int")? {
        HostTensor::scalar(v)
    } else if let Some(v) = a.ints("value_ints")? {
        let n = v.len() as u64;
        HostTensor::from_vec(v, &[n])?
    } else {
        return Err(unsupported(
            "a Constant without a tensor, float or int value",
        ));
    };
    Ok(vec![Known::data(t).into()])
}

/// Static dims from shape entries (no symbols, none negative).
fn static_dims(entries: &[Entry]) -> Res<Option<Vec<u64>>> {
    let mut dims = Vec::with_capacity(entries.len());
    for e in entries {
        match e.as_constant() {
            Some(v) if v >= 0 => dims.push(v as u64),
            Some(v) => return Err(invalid(format!("negative dim {v}"))),
            None => return Ok(None),
        }
    }
    Ok(Some(dims))
}

/// An entry as a dim (a negative constant is invalid).
fn entry_dim(e: &Entry) -> Res<Dim> {
    Dim::from_expr(e.clone()).map_err(|_| invalid(format!("negative dim {e}")))
}

fn shape_from_entries(entries: &[Entry]) -> Res<Shape> {
    let dims = entries.iter().map(entry_dim).collect::<Res<Vec<_>>>()?;
    Shape::new(dims).map_err(|e| unsupported(e.to_string()))
}

pub(super) fn constant_of_shape(cx: &mut Cx) -> Res<Vec<Value>> {
    let (entries, _) = entries(cx, 0)?;
    let fill = match cx.attrs.tensor("value")? {
        Some(t) => read_tensor(t, None).map_err(invalid)?,
        None => HostTensor::scalar(0f32),
    };
    if fill.numel() != 1 {
        return Err(invalid("the value must have one element"));
    }
    let value = fill.element_f64(0).expect("one element");
    if let Some(dims) = static_dims(&entries)? {
        if dims.iter().product::<u64>() <= 64 {
            let n = dims.iter().product::<u64>() as usize;
            let t = HostTensor::from_f64(
                &tir_graph::F64Tensor::new(fill.dtype(), dims, vec![value; n])
                    .map_err(|e| invalid(e.to_string()))?,
            )?;
            return Ok(vec![Known::data(t).into()]);
        }
    }
    let shape = shape_from_entries(&entries)?;
    let y = cx.b().scalar(fill.dtype(), value)?.broadcast_to(&shape)?;
    Ok(vec![y.into()])
}

pub(super) fn range(cx: &mut Cx) -> Res<Vec<Value>> {
    let (start, limit, delta) = (cx.known(0)?, cx.known(1)?, cx.known(2)?);
    let dtype = start.dtype();
    if [&start, &limit, &delta]
        .iter()
        .any(|k| matches!(k, Known::Dims { .. }))
    {
        return symbolic_range_values(cx, &start, &limit, &delta);
    }
    let scalar = |k: &Known| -> Res<f64> {
        let v = k.f64s()?;
        match v.as_slice() {
            [x] => Ok(*x),
            _ => Err(invalid("start, limit and delta must be scalars")),
        }
    };
    let (s, l, d) = (scalar(&start)?, scalar(&limit)?, scalar(&delta)?);
    if d == 0.0 {
        return Err(invalid("delta is 0"));
    }
    let n = ((l - s) / d).ceil().max(0.0);
    if n > tir_graph::op::MAX_CONSTANT_ELEMENTS as f64 {
        return Err(unsupported(format!("a Range of {n} elements")));
    }
    let values: Vec<f64> = (0..n as u64)
        .map(|i| dtype.round_value(s + i as f64 * d))
        .collect();
    let t = tir_graph::F64Tensor::new(dtype, vec![n as u64], values)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(vec![Known::data(HostTensor::from_f64(&t)?).into()])
}

/// `Range` of a symbolic length (`Range(0, seq, 1)`): `start + delta · iota(n)` with
/// `n = ⌈(limit − start) / delta⌉` elements, for a constant start and a constant positive delta.
fn symbolic_range_values(
    cx: &mut Cx,
    start: &Known,
    limit: &Known,
    delta: &Known,
) -> Res<Vec<Value>> {
    let one = |k: &Known, what: &str| -> Res<Entry> {
        match k.entries() {
            Some((e, _)) if e.len() == 1 => Ok(e[0].clone()),
            _ => Err(invalid(format!("{what} must be an integer scalar"))),
        }
    };
    let (s, l, d) = (
        one(start, "start")?,
        one(limit, "limit")?,
        one(delta, "delta")?,
    );
    let (Some(s), Some(d)) = (s.as_constant(), d.as_constant()) else {
        return Err(unsupported(format!(
            "Range from {s} by {d}: a symbolic start or delta"
        )));
    };
    if d <= 0 {
        return Err(unsupported(format!(
            "Range to `{l}` by {d} (a symbolic length needs a positive delta)"
        )));
    }
    let n = l
        .sub(&DimExpr::constant(s))
        .and_then(|e| e.ceil_div(&DimExpr::constant(d)))
        .map_err(|e| invalid(e.to_string()))?;
    let mut y = cx.b().iota(entry_dim(&n)?)?;
    if d != 1 {
        y = y.mul_scalar(d as f64)?;
    }
    if s != 0 {
        y = y.add_scalar(s as f64)?;
    }
    let dtype = start.dtype();
    if dtype != DType::I64 {
        y = y.cast(dtype)?;
    }
    Ok(vec![y.into()])
}

pub(super) fn reshape(cx: &mut Cx) -> Res<Vec<Value>> {
    let (target, _) = entries(cx, 1)?;
    let allow_zero = cx.attrs.int("allowzero", 0)? != 0;
    let x = cx.tensor(0)?;
    let in_dims = x.shape().dims().to_vec();
    let mut dims = Vec::with_capacity(target.len());
    for (i, e) in target.iter().enumerate() {
        dims.push(match e.as_constant() {
            Some(-1) => ReshapeDim::Infer,
            Some(0) if !allow_zero => {
                ReshapeDim::Dim(in_dims.get(i).cloned().ok_or_else(|| {
                    invalid(format!("dim {i} copies an input dim that does not exist"))
                })?)
            }
            Some(v) if v < 0 => return Err(invalid(format!("dim {v} in the target shape"))),
            _ => ReshapeDim::Dim(entry_dim(e)?),
        });
    }
    Ok(vec![x.reshape(&dims)?.into()])
}

pub(super) fn transpose(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let rank = x.rank();
    let perm = match cx.attrs.ints("perm")? {
        Some(p) => p.iter().map(|&a| axis(a, rank)).collect::<Res<Vec<_>>>()?,
        None => (0..rank).rev().collect(),
    };
    Ok(vec![x.permute(&perm)?.into()])
}

/// The axes of Squeeze/Unsqueeze: an attribute before opset 13, an input since.
fn squeeze_axes(cx: &mut Cx) -> Res<Option<Vec<i64>>> {
    if cx.opset < 13 {
        cx.attrs.ints("axes")
    } else {
        cx.opt_ints(1)
    }
}

pub(super) fn squeeze(cx: &mut Cx) -> Res<Vec<Value>> {
    let list = squeeze_axes(cx)?;
    if cx.is_symbolic_dims(0) {
        let (e, scalar) = entries(cx, 0)?;
        if !scalar && e.len() == 1 && list.as_ref().is_none_or(|l| matches!(l[..], [0] | [-1])) {
            return Ok(vec![Known::dims(e, true).into()]);
        }
        return Err(unsupported("Squeeze of a symbolic shape vector"));
    }
    let x = cx.tensor(0)?;
    let dims = x.shape().dims().to_vec();
    let picked = match list {
        Some(l) => axes(&l, dims.len())?,
        None => (0..dims.len())
            .filter(|&i| dims[i] == Dim::Static(1))
            .collect(),
    };
    Ok(vec![x.squeeze(&picked)?.into()])
}

pub(super) fn unsqueeze(cx: &mut Cx) -> Res<Vec<Value>> {
    let list = squeeze_axes(cx)?.ok_or_else(|| invalid("no axes"))?;
    if cx.is_symbolic_dims(0) {
        let (e, scalar) = entries(cx, 0)?;
        if scalar && matches!(list[..], [0] | [-1]) {
            return Ok(vec![Known::dims(e, false).into()]);
        }
        return Err(unsupported("Unsqueeze of a symbolic shape vector"));
    }
    let x = cx.tensor(0)?;
    let picked = axes(&list, x.rank() + list.len())?;
    Ok(vec![x.unsqueeze(&picked)?.into()])
}

pub(super) fn flatten(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let dims = x.shape().dims().to_vec();
    let rank = dims.len() as i64;
    let a = cx.attrs.int("axis", 1)?;
    let a = if a < 0 { a + rank } else { a };
    if !(0..=rank).contains(&a) {
        return Err(invalid(format!("axis {a} out of range for rank {rank}")));
    }
    let product = |ds: &[Dim]| -> Option<u64> { ds.iter().map(Dim::as_static).product() };
    let (outer, inner) = (&dims[..a as usize], &dims[a as usize..]);
    let target = match (product(outer), product(inner)) {
        (Some(o), Some(i)) => [
            ReshapeDim::Dim(Dim::Static(o)),
            ReshapeDim::Dim(Dim::Static(i)),
        ],
        (None, Some(i)) if outer.len() == 1 => [
            ReshapeDim::Dim(outer[0].clone()),
            ReshapeDim::Dim(Dim::Static(i)),
        ],
        (None, Some(i)) => [ReshapeDim::Infer, ReshapeDim::Dim(Dim::Static(i))],
        (Some(o), None) => [ReshapeDim::Dim(Dim::Static(o)), ReshapeDim::Infer],
        (None, None) => return Err(unsupported("Flatten with symbolic dims on both sides")),
    };
    Ok(vec![x.reshape(&target)?.into()])
}

pub(super) fn concat(cx: &mut Cx) -> Res<Vec<Value>> {
    let a = cx
        .attrs
        .opt_int("axis")?
        .ok_or_else(|| invalid("no axis"))?;
    let n = cx.num_inputs();
    let known_vectors = (0..n).all(|i| {
        let v = cx
            .input_name(i)
            .and_then(|name| cx.st.value(&name).cloned());
        matches!(v, Some(Value::Known(k)) if k.entries().is_some_and(|(_, scalar)| !scalar))
    });
    if known_vectors || (0..n).any(|i| cx.is_symbolic_dims(i)) {
        let mut all = Vec::new();
        for i in 0..n {
            let (e, scalar) = entries(cx, i)?;
            if scalar || !matches!(a, 0 | -1) {
                return Err(invalid("shape vectors join along axis 0"));
            }
            all.extend(e);
        }
        return Ok(vec![Known::dims(all, false).into()]);
    }
    let xs = (0..n).map(|i| cx.tensor(i)).collect::<Res<Vec<_>>>()?;
    let rank = xs.first().ok_or_else(|| invalid("no inputs"))?.rank();
    let refs: Vec<&Tensor> = xs.iter().collect();
    Ok(vec![cx.b().concat(&refs, axis(a, rank)?)?.into()])
}

/// What ONNX's Slice takes of one axis.
enum AxisSlice {
    /// A positive step.
    Range(SliceRange),
    /// The positions a negative step visits, in order (at least one).
    Descending(Vec<u64>),
    /// On a symbolic axis, where a range cannot say it (a start counted from the end, a
    /// symbolic start, a negative step): `count` positions `first + i * step`.
    Strided { first: Dim, count: Dim, step: i64 },
}

impl AxisSlice {
    /// The positions taken of an axis of `len`.
    fn positions(&self, len: u64) -> Res<Vec<u64>> {
        Ok(match self {
            AxisSlice::Range(r) => (r.start
                ..r.stop
                    .as_ref()
                    .and_then(Dim::as_static)
                    .unwrap_or(len)
                    .min(len))
                .step_by(r.step as usize)
                .collect(),
            AxisSlice::Descending(p) => p.clone(),
            AxisSlice::Strided { .. } => {
                return Err(unsupported("Slice of a shape vector at symbolic positions"))
            }
        })
    }

    /// `x` sliced along `axis` by a [`AxisSlice::Strided`]: a gather at the positions.
    fn gather_strided(x: &Tensor, axis: usize, first: &Dim, count: &Dim, step: i64) -> Res<Tensor> {
        let b = x.builder();
        let positions = b
            .iota(count.clone())?
            .mul_scalar(step as f64)?
            .add(&b.dim_value(first.clone())?)?;
        Ok(x.gather(&positions, axis)?)
    }
}

/// What ONNX's Slice takes of an axis of size `d`: `start` and `end` are clamped to `[0, d]`
/// for a positive step, and to `[0, d - 1]` and `[-1, d - 1]` for a negative one.
fn axis_slice(start: i64, end: i64, step: i64, d: &Dim) -> Res<AxisSlice> {
    if step == 0 {
        return Err(invalid("Slice with step 0"));
    }
    if step > 0 {
        return slice_range(start, end, step, d);
    }
    let Dim::Static(n) = d else {
        return symbolic_range(&DimExpr::constant(start), &DimExpr::constant(end), step, d);
    };
    let n = *n as i64;
    let resolve = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
    if n > 0 && resolve(start) < 0 {
        // The spec clamps such a start to 0 (taking element 0), NumPy and ONNX's reference
        // take nothing.
        return Err(unsupported(format!(
            "Slice with step {step} from start {start}, before an axis of {n} (the spec and ONNX's reference disagree)"
        )));
    }
    let (s, e) = (resolve(start).min(n - 1), resolve(end).clamp(-1, n - 1));
    let stride = step.unsigned_abs();
    let count = if s > e {
        (s - e - 1) as u64 / stride + 1
    } else {
        0
    };
    if count > tir_graph::op::MAX_CONSTANT_ELEMENTS {
        return Err(too_long("Slice with a negative step", count));
    }
    let positions: Vec<u64> = (e + 1..=s)
        .rev()
        .step_by(usize::try_from(stride).unwrap_or(usize::MAX))
        .map(|p| p as u64)
        .collect();
    Ok(if positions.is_empty() {
        AxisSlice::Range(SliceRange::new(0, 0, 1))
    } else {
        AxisSlice::Descending(positions)
    })
}

/// The range of one axis of size `d` that ONNX's Slice takes (`start`, `end` clamped; step > 0).
fn slice_range(start: i64, end: i64, step: i64, d: &Dim) -> Res<AxisSlice> {
    let Dim::Static(n) = d else {
        return symbolic_range(&DimExpr::constant(start), &DimExpr::constant(end), step, d);
    };
    let n = *n as i64;
    let clamp = |v: i64| (if v < 0 { v.saturating_add(n) } else { v }).clamp(0, n);
    let (s, e) = (clamp(start), clamp(end));
    Ok(AxisSlice::Range(SliceRange::new(
        s as u64,
        e.max(s) as u64,
        step as u64,
    )))
}

/// What one axis of non-static size `d` (or with a symbolic `start` or `end`) takes. With a
/// constant start ≥ 0 and a positive step, a range: an end past the axis clamped to it
/// (`min(end, d)`), a negative one counted from the end, a symbolic one taken as it is, with the
/// run checking it is within the axis (as the exporter's model assumes: a table of positions
/// sliced to the sequence's length). Otherwise ([`strided`]) the positions, gathered.
fn symbolic_range(start: &Entry, end: &Entry, step: i64, d: &Dim) -> Res<AxisSlice> {
    if step == 0 {
        return Err(invalid("Slice with step 0"));
    }
    let start = match start.as_constant() {
        Some(s) if s >= 0 && step > 0 => s as u64,
        _ => return strided(start, end, step, d),
    };
    let stop = match end.as_constant() {
        Some(e) if e >= i64::from(i32::MAX) => None,
        Some(e) if e < 0 => Some(d.offset(e).map_err(|e| invalid(e.to_string()))?),
        Some(e) => Some(
            Dim::from_expr(
                DimExpr::min(&[DimExpr::constant(e), d.to_expr()])
                    .map_err(|e| invalid(e.to_string()))?,
            )
            .map_err(|e| invalid(e.to_string()))?,
        ),
        None if end == &d.to_expr() => None,
        None => Some(entry_dim(end)?),
    };
    Ok(AxisSlice::Range(SliceRange {
        start,
        stop,
        step: step as u64,
    }))
}

/// ONNX's Slice of an axis of symbolic size `d` as positions `first + i * step`, `i` below
/// `count`, all expressions of the dims: a negative constant `start` or `end` counts from the
/// end; with a positive step both are clamped to `[0, d]`, with a negative one `start` to at most
/// `d - 1` and `end` to `[-1, d - 1]` (a constant end at or below `-d - 1` runs through
/// position 0). A symbolic bound is taken as the position it names.
fn strided(start: &Entry, end: &Entry, step: i64, d: &Dim) -> Res<AxisSlice> {
    let fail = |e: tir_graph::DimError| invalid(e.to_string());
    let n = d.to_expr();
    let resolve = |v: &Entry| -> Res<DimExpr> {
        match v.as_constant() {
            // Far past either end: the clamps below bring it back.
            Some(c) if c >= i64::from(i32::MAX) => Ok(n.clone()),
            Some(c) if c <= -i64::from(i32::MAX) => Ok(DimExpr::constant(-1)),
            Some(c) if c < 0 => n.add(&DimExpr::constant(c)).map_err(fail),
            _ => Ok(v.clone()),
        }
    };
    let clamp = |v: DimExpr, lo: i64, hi: &DimExpr| -> Res<DimExpr> {
        let v = DimExpr::max(&[v, DimExpr::constant(lo)]).map_err(fail)?;
        DimExpr::min(&[v, hi.clone()]).map_err(fail)
    };
    let last = n.add(&DimExpr::constant(-1)).map_err(fail)?;
    let (first, span) = if step > 0 {
        let (s, e) = (clamp(resolve(start)?, 0, &n)?, clamp(resolve(end)?, 0, &n)?);
        let span = e.sub(&s).map_err(fail)?;
        (s, span)
    } else {
        // A start before position 0 takes nothing, as NumPy and ONNX's reference have it (the
        // spec would clamp it to 0; the static case refuses the disagreement, which a symbolic
        // size can only meet at run time).
        let s = DimExpr::min(&[resolve(start)?, last.clone()]).map_err(fail)?;
        let e = clamp(resolve(end)?, -1, &last)?;
        let span = s.sub(&e).map_err(fail)?;
        (
            DimExpr::max(&[s, DimExpr::constant(0)]).map_err(fail)?,
            span,
        )
    };
    let count = span
        .ceil_div(&DimExpr::constant(step.abs()))
        .map_err(fail)?;
    let count = DimExpr::max(&[count, DimExpr::constant(0)]).map_err(fail)?;
    let as_dim = |e: DimExpr| {
        Dim::from_expr(e).map_err(|e| unsupported(format!("Slice of an axis of size {d}: {e}")))
    };
    Ok(AxisSlice::Strided {
        first: as_dim(first)?,
        count: as_dim(count)?,
        step,
    })
}

pub(super) fn slice(cx: &mut Cx) -> Res<Vec<Value>> {
    let constants = |v: Vec<i64>| v.into_iter().map(DimExpr::constant).collect::<Vec<_>>();
    let (starts, ends, list, steps) = if cx.opset < 10 {
        let starts = cx
            .attrs
            .ints("starts")?
            .ok_or_else(|| invalid("no starts"))?;
        let ends = cx.attrs.ints("ends")?.ok_or_else(|| invalid("no ends"))?;
        (
            constants(starts),
            constants(ends),
            cx.attrs.ints("axes")?,
            None,
        )
    } else {
        (
            entries(cx, 1)?.0,
            entries(cx, 2)?.0,
            cx.opt_ints(3)?,
            cx.opt_ints(4)?,
        )
    };
    let count = starts.len();
    let list = list.unwrap_or_else(|| (0..count as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; count]);
    if ends.len() != count || list.len() != count || steps.len() != count {
        return Err(invalid("starts, ends, axes and steps differ in length"));
    }
    if cx.is_symbolic_dims(0) {
        let (e, _) = entries(cx, 0)?;
        let len = e.len() as u64;
        let constant = |x: &Entry| {
            x.as_constant()
                .ok_or_else(|| unsupported("Slice of a shape vector at symbolic positions"))
        };
        let taken = match (count, list.first()) {
            (1, Some(0 | -1)) => axis_slice(
                constant(&starts[0])?,
                constant(&ends[0])?,
                steps[0],
                &Dim::Static(len),
            )?,
            _ => return Err(unsupported("Slice of a symbolic shape vector")),
        };
        let picked = taken
            .positions(len)?
            .into_iter()
            .map(|p| e[p as usize].clone())
            .collect();
        return Ok(vec![Known::dims(picked, false).into()]);
    }
    let x = cx.tensor(0)?;
    let dims = x.shape().dims().to_vec();
    let mut ranges = vec![SliceRange::FULL; dims.len()];
    let mut gathered = Vec::new();
    let mut seen = vec![false; dims.len()];
    for i in 0..count {
        let a = axis(list[i], dims.len())?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(invalid(format!("axis {a} is sliced twice")));
        }
        let range = match (starts[i].as_constant(), ends[i].as_constant()) {
            (Some(s), Some(e)) => axis_slice(s, e, steps[i], &dims[a])?,
            _ => symbolic_range(&starts[i], &ends[i], steps[i], &dims[a])?,
        };
        match range {
            AxisSlice::Range(r) => ranges[a] = r,
            other => gathered.push((a, other)),
        }
    }
    let whole = ranges.iter().all(|r| *r == SliceRange::FULL);
    let mut y = if whole && !gathered.is_empty() {
        x
    } else {
        x.slice(&ranges)?
    };
    // A negative step or a strided slice gathers its positions (its axis is whole in `y`).
    for (a, taken) in gathered {
        y = match taken {
            AxisSlice::Descending(positions) => {
                let values = positions.into_iter().map(|p| p as i64).collect();
                y.gather(&index_table(&y, values, "Slice with a negative step")?, a)?
            }
            AxisSlice::Strided { first, count, step } => {
                AxisSlice::gather_strided(&y, a, &first, &count, step)?
            }
            AxisSlice::Range(_) => unreachable!("ranges are sliced above"),
        };
    }
    Ok(vec![y.into()])
}

pub(super) fn split(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let a = axis(cx.attrs.int("axis", 0)?, x.rank())?;
    let Dim::Static(d) = x.shape().dims()[a].clone() else {
        return Err(unsupported("Split of a symbolic dim"));
    };
    let sizes = if cx.opset < 13 {
        cx.attrs.ints("split")?
    } else {
        cx.opt_ints(1)?
    };
    let outputs = cx.node.output.len() as u64;
    let sizes: Vec<u64> = match (sizes, cx.attrs.opt_int("num_outputs")?) {
        (Some(s), None) => s
            .iter()
            .map(|&v| u64::try_from(v).map_err(|_| invalid(format!("split size {v}"))))
            .collect::<Res<_>>()?,
        (None, Some(n)) if n > 0 => {
            let chunk = d.div_ceil(n as u64);
            (0..n as u64)
                .map(|i| chunk.min(d.saturating_sub(i * chunk)))
                .collect()
        }
        (None, None) if outputs > 0 && d % outputs == 0 => vec![d / outputs; outputs as usize],
        (None, None) => {
            return Err(invalid(format!(
                "{d} does not split into {outputs} equal parts"
            )))
        }
        _ => return Err(invalid("both split sizes and num_outputs")),
    };
    if sizes.iter().sum::<u64>() != d || sizes.len() as u64 != outputs {
        return Err(invalid(format!(
            "split sizes {sizes:?} for dim {d} into {outputs} outputs"
        )));
    }
    let mut start = 0;
    let mut parts = Vec::with_capacity(sizes.len());
    for s in sizes {
        parts.push(x.slice_axis(a, start, start + s)?.into());
        start += s;
    }
    Ok(parts)
}

pub(super) fn expand(cx: &mut Cx) -> Res<Vec<Value>> {
    let (target, _) = entries(cx, 1)?;
    let target = shape_from_entries(&target)?;
    let x = cx.tensor(0)?;
    let shape = x.shape();
    let (xd, td) = (shape.dims(), target.dims());
    let rank = xd.len().max(td.len());
    let one = Dim::Static(1);
    let at = |ds: &[Dim], i: usize| -> Dim {
        let pad = rank - ds.len();
        if i < pad {
            one.clone()
        } else {
            ds[i - pad].clone()
        }
    };
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let (a, b) = (at(xd, i), at(td, i));
        out.push(if b == one {
            a
        } else if a == one || a == b {
            b
        } else {
            return Err(invalid(format!("{shape} does not expand to {target}")));
        });
    }
    let out = Shape::new(out).map_err(|e| unsupported(e.to_string()))?;
    if out == shape {
        return Ok(vec![x.into()]);
    }
    Ok(vec![x.broadcast_to(&out)?.into()])
}

pub(super) fn gather(cx: &mut Cx) -> Res<Vec<Value>> {
    let a = cx.attrs.int("axis", 0)?;
    if cx.is_symbolic_dims(0) {
        let (e, _) = entries(cx, 0)?;
        let idx = cx.known(1)?;
        let scalar = idx.dims_of().is_empty();
        let n = e.len() as i64;
        let picked = idx
            .ints()?
            .into_iter()
            .map(|i| {
                let j = if i < 0 { i + n } else { i };
                e.get(
                    usize::try_from(j)
                        .ok()
                        .filter(|&j| (j as i64) < n)
                        .unwrap_or(usize::MAX),
                )
                .cloned()
                .ok_or_else(|| invalid(format!("index {i} out of range for {n}")))
            })
            .collect::<Res<Vec<_>>>()?;
        return Ok(vec![Known::dims(picked, scalar).into()]);
    }
    let x = cx.tensor(0)?;
    let a = axis(a, x.rank())?;
    let size = x.shape().dims()[a].clone();
    let indices = match cx.st.value(&cx.input_name(1).unwrap_or_default()) {
        Some(Value::Known(Known::Data(_))) => known_indices(cx, size.as_static())?,
        _ => runtime_indices(cx.tensor(1)?, &size)?,
    };
    Ok(vec![x.gather(&indices, a)?.into()])
}

pub(super) fn gather_elements(cx: &mut Cx) -> Res<Vec<Value>> {
    let a = cx.attrs.int("axis", 0)?;
    let (x, index) = (cx.tensor(0)?, cx.tensor(1)?);
    let a = axis(a, x.rank())?;
    Ok(vec![take_along(&x, &index, a)?.into()])
}

/// ONNX's `GatherElements`: at each position `p` of `index`, `x` at `p` with coordinate `axis`
/// replaced by `index[p]` (negative counts from the end). Off the axis, `index`'s dims are at
/// most `x`'s. Lowered as one gather from `x` flattened, at linear positions computed from the
/// index, so the work is one read per output; an index out of range is out of range for that
/// gather too (never wrapped into another row). Symbolic dims enter the positions as their
/// run-time values.
pub(super) fn take_along(x: &Tensor, index: &Tensor, axis: usize) -> Res<Tensor> {
    let (shape, ishape) = (x.shape(), index.shape());
    let (dims, idims) = (shape.dims(), ishape.dims());
    if idims.len() != dims.len() || !index.dtype().is_int() {
        return Err(invalid(format!(
            "indices {} do not fit data {} off axis {axis}",
            index.ty(),
            x.ty()
        )));
    }
    for i in (0..dims.len()).filter(|&i| i != axis) {
        match (idims[i].as_static(), dims[i].as_static()) {
            (Some(a), Some(b)) if a > b => {
                return Err(invalid(format!(
                    "indices {} do not fit data {} off axis {axis}",
                    index.ty(),
                    x.ty()
                )))
            }
            (Some(_), Some(_)) => {}
            _ if idims[i] == dims[i] => {}
            _ => {
                return Err(unsupported(format!(
                    "GatherElements of indices {} into data {}: dim {i} of the indices is not known to fit the data's",
                    index.ty(),
                    x.ty()
                )))
            }
        }
    }
    let strides = row_major_strides(dims)?;
    let idx = runtime_indices(index.cast(DType::I64)?, &dims[axis])?;
    let mut linear = scaled(&idx, &strides[axis])?;
    for (i, (len, stride)) in idims.iter().zip(&strides).enumerate() {
        if i == axis || len.as_static() == Some(1) {
            continue;
        }
        linear = linear.add(&scaled(&coordinate(x, len, i, idims.len())?, stride)?)?;
    }
    let linear = out_of_range_to(&idx, &dims[axis], &linear)?;
    let flat = x.reshape_to(&shape_of(vec![product(dims)?])?)?;
    Ok(flat.gather(&linear, 0)?)
}

pub(super) fn gather_nd(cx: &mut Cx) -> Res<Vec<Value>> {
    if cx.opset < 11 {
        return Err(invalid("GatherND is an op of opset 11 on"));
    }
    // Opset 11 has no `batch_dims`: left unread there, it is refused as an unknown attribute.
    let batch = if cx.opset >= 12 {
        cx.attrs.int("batch_dims", 0)?
    } else {
        0
    };
    let (x, index) = (cx.tensor(0)?, cx.tensor(1)?);
    Ok(vec![take_nd(&x, &index, batch)?.into()])
}

/// ONNX's `GatherND`: `index` is `[B.., Q.., m]` over `x: [B.., D1..Dm, T..]` (`B..` the
/// `batch` shared dims); each `m`-tuple (negatives count from the end) picks the slice `[T..]`.
/// Lowered like [`take_along`]: `x` as `[B·D1···Dm, T..]`, one gather at the linear position of
/// each tuple; a tuple with an entry out of range reads out of range (never another slice).
fn take_nd(x: &Tensor, index: &Tensor, batch: i64) -> Res<Tensor> {
    let (shape, ishape) = (x.shape(), index.shape());
    let (dims, idims) = (shape.dims(), ishape.dims());
    let (r, q) = (dims.len(), idims.len());
    let b = usize::try_from(batch)
        .ok()
        .filter(|&b| b < r.min(q))
        .ok_or_else(|| {
            invalid(format!(
                "batch_dims {batch} for data {} and indices {} (it must be below both ranks)",
                x.ty(),
                index.ty()
            ))
        })?;
    let Some(m) = idims[q - 1].as_static() else {
        return Err(unsupported(format!(
            "GatherND with tuples of a symbolic length ({})",
            index.ty()
        )));
    };
    let m = m as usize;
    if b + m > r || idims[..b] != dims[..b] || !index.dtype().is_int() {
        return Err(invalid(format!(
            "indices {} do not index data {} past {b} batch dims",
            index.ty(),
            x.ty()
        )));
    }
    let lead = &idims[..q - 1];
    let strides = row_major_strides(&dims[..b + m])?;
    let idx = index.cast(DType::I64)?;
    let mut linear: Option<Tensor> = None;
    let mut add = |t: Tensor| -> Res<()> {
        linear = Some(match linear.take() {
            Some(l) => l.add(&t)?,
            None => t,
        });
        Ok(())
    };
    for i in 0..b {
        add(scaled(
            &coordinate(x, &dims[i], i, lead.len())?,
            &strides[i],
        )?)?;
    }
    let mut tuple = Vec::with_capacity(m);
    for j in 0..m {
        let n = &dims[b + j];
        let entry = idx
            .slice_axis(q - 1, j as u64, j as u64 + 1)?
            .squeeze(&[q - 1])?;
        let entry = runtime_indices(entry, n)?;
        add(scaled(&entry, &strides[b + j])?)?;
        tuple.push((entry, n));
    }
    let lead_shape = shape_of(lead.to_vec())?;
    let mut linear = match linear {
        Some(l) if l.shape() == lead_shape => l,
        Some(l) => l.broadcast_to(&lead_shape)?,
        None => x
            .builder()
            .scalar(DType::I64, 0.0)?
            .broadcast_to(&lead_shape)?,
    };
    for (entry, n) in &tuple {
        linear = out_of_range_to(entry, n, &linear)?;
    }
    let mut slices = vec![product(&dims[..b + m])?];
    slices.extend_from_slice(&dims[b + m..]);
    Ok(x.reshape_to(&shape_of(slices)?)?.gather(&linear, 0)?)
}

/// `dims` as a shape; an expression tir cannot keep is refused.
fn shape_of(dims: Vec<Dim>) -> Res<Shape> {
    Shape::new(dims).map_err(|e| unsupported(e.to_string()))
}

/// The product of `dims`.
fn product(dims: &[Dim]) -> Res<Dim> {
    dims.iter().try_fold(Dim::Static(1), |acc, d| {
        acc.combine(d, DimExpr::mul)
            .map_err(|e| unsupported(e.to_string()))
    })
}

/// The row-major strides of `dims`, in elements.
fn row_major_strides(dims: &[Dim]) -> Res<Vec<Dim>> {
    (0..dims.len()).map(|i| product(&dims[i + 1..])).collect()
}

/// The `i64` tensor `t` times `d`'s value.
fn scaled(t: &Tensor, d: &Dim) -> Res<Tensor> {
    Ok(match d.as_static() {
        Some(1) => t.clone(),
        Some(n) => t.mul_scalar(n as f64)?,
        None => t.mul(&t.builder().dim_value(d.clone())?)?,
    })
}

/// `0..len` (i64) along axis `axis` of a rank-`rank` tensor, 1 on every other axis.
fn coordinate(like: &Tensor, len: &Dim, axis: usize, rank: usize) -> Res<Tensor> {
    let mut at = vec![Dim::Static(1); rank];
    at[axis] = len.clone();
    Ok(like
        .builder()
        .iota(len.clone())?
        .reshape_to(&shape_of(at)?)?)
}

/// `linear`, or -1 (out of range for any gather) where `idx` is outside `0..n`.
fn out_of_range_to(idx: &Tensor, n: &Dim, linear: &Tensor) -> Res<Tensor> {
    let b = idx.builder();
    let in_range = idx
        .ge(&b.scalar(DType::I64, 0.0)?)?
        .and(&idx.lt(&b.dim_value(n.clone())?)?)?;
    Ok(in_range.select(linear, &b.scalar(DType::I64, -1.0)?)?)
}

/// Known indices with negatives resolved, as a constant; each checked against `size`.
fn known_indices(cx: &mut Cx, size: Option<u64>) -> Res<Tensor> {
    let k = cx.known(1)?;
    let t = k.to_tensor()?;
    let dims = t.dims().to_vec();
    let mut values = Vec::with_capacity(t.numel());
    for i in 0..t.numel() {
        let v = t.element_f64(i).expect("in range") as i64;
        let resolved = match size {
            Some(n) if v < -(n as i64) || v >= n as i64 => {
                return Err(invalid(format!("index {v} out of range for dim {n}")))
            }
            Some(n) if v < 0 => v + n as i64,
            None if v < 0 => return Err(unsupported("a negative index into a symbolic dim")),
            _ => v,
        };
        values.push(resolved);
    }
    Ok(cx
        .b()
        .constant_data(DType::I64, Shape::of(&dims), ConstData::Int(values))?)
}

/// Run-time indices with negatives counted from the end of an axis of `size`.
fn runtime_indices(indices: Tensor, size: &Dim) -> Res<Tensor> {
    let b = indices.builder();
    let zero = b.scalar(indices.dtype(), 0.0)?;
    let n = b.dim_value(size.clone())?.cast(indices.dtype())?;
    let wrapped = indices.add(&n)?;
    Ok(indices.lt(&zero)?.select(&wrapped, &indices)?)
}

pub(super) fn tile(cx: &mut Cx) -> Res<Vec<Value>> {
    let repeats = cx.ints(1)?;
    let x = cx.tensor(0)?;
    let dims = x.shape().dims().to_vec();
    if repeats.len() != dims.len() || repeats.iter().any(|&r| r < 0) {
        return Err(invalid(format!(
            "repeats {repeats:?} for rank {}",
            dims.len()
        )));
    }
    if repeats.iter().all(|&r| r == 1) {
        return Ok(vec![x.into()]);
    }
    // [d0, d1, ...] -> [1, d0, 1, d1, ...] -> [r0, d0, r1, d1, ...] -> [r0*d0, r1*d1, ...]
    let interleaved: Vec<usize> = (0..dims.len()).map(|i| 2 * i).collect();
    let mut wide = Vec::with_capacity(2 * dims.len());
    let mut merged = Vec::with_capacity(dims.len());
    for (d, &r) in dims.iter().zip(&repeats) {
        let Dim::Static(n) = d else {
            return Err(unsupported("Tile of a symbolic dim"));
        };
        wide.extend([Dim::Static(r as u64), d.clone()]);
        merged.push(ReshapeDim::Dim(Dim::Static(r as u64 * n)));
    }
    let wide = Shape::new(wide).map_err(|e| unsupported(e.to_string()))?;
    let y = x
        .unsqueeze(&interleaved)?
        .broadcast_to(&wide)?
        .reshape(&merged)?;
    Ok(vec![y.into()])
}

pub(super) fn pad(cx: &mut Cx) -> Res<Vec<Value>> {
    let mode = cx.attrs.string("mode", "constant")?;
    match mode.as_str() {
        "constant" | "edge" | "reflect" => {}
        "wrap" if cx.opset >= 19 => {}
        other => return Err(invalid(format!("Pad mode `{other}`"))),
    }
    let constant = mode == "constant";
    let (pads, value, list) = if cx.opset < 11 {
        let pads = cx.attrs.ints("pads")?.ok_or_else(|| invalid("no pads"))?;
        (pads, f64::from(cx.attrs.float("value", 0.0)?), None)
    } else {
        // Only `constant` reads the value: other modes need not know it.
        let known = if constant { cx.opt_known(2)? } else { None };
        let value = match known {
            Some(k) => *k
                .f64s()?
                .first()
                .ok_or_else(|| invalid("empty constant_value"))?,
            None => 0.0,
        };
        (cx.ints(1)?, value, cx.opt_ints(3)?)
    };
    let x = cx.tensor(0)?;
    let rank = x.rank();
    let list: Vec<usize> = match list {
        Some(l) => l.iter().map(|&a| axis(a, rank)).collect::<Res<_>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * list.len() {
        return Err(invalid(format!(
            "{} pads for {} axes",
            pads.len(),
            list.len()
        )));
    }
    let mut per_axis = vec![(0u64, 0u64); rank];
    for (i, &a) in list.iter().enumerate() {
        let (before, after) = (pads[i], pads[i + list.len()]);
        if before < 0 || after < 0 {
            return Err(unsupported("negative pads (cropping)"));
        }
        per_axis[a] = (before as u64, after as u64);
    }
    if constant {
        return Ok(vec![x.pad(&per_axis, value)?.into()]);
    }
    let mut y = x;
    for (a, &(before, after)) in per_axis.iter().enumerate() {
        if (before, after) != (0, 0) {
            y = pad_axis(&y, a, before, after, &mode)?;
        }
    }
    Ok(vec![y.into()])
}

/// `x` padded along `axis` in `mode` (`edge`, `reflect` or `wrap`): one gather of the source
/// position of every padded position.
fn pad_axis(x: &Tensor, axis: usize, before: u64, after: u64, mode: &str) -> Res<Tensor> {
    let d = x.shape().dims()[axis].clone();
    let Dim::Static(n) = d else {
        return Err(unsupported(format!(
            "Pad mode `{mode}` of symbolic dim `{d}`"
        )));
    };
    if n == 0 {
        return Err(invalid(format!(
            "Pad mode `{mode}` extends axis {axis}, which is empty"
        )));
    }
    let len = before.saturating_add(n).saturating_add(after);
    if len > tir_graph::op::MAX_CONSTANT_ELEMENTS {
        return Err(too_long(&format!("Pad mode `{mode}`"), len));
    }
    let n = n as i64;
    let sources = (-(before as i64)..n + after as i64)
        .map(|p| pad_source(mode, p, n))
        .collect();
    let what = format!("Pad mode `{mode}`");
    Ok(x.gather(&index_table(x, sources, &what)?, axis)?)
}

/// A constant `[len]` of positions to gather (an i64 constant: at most
/// [`tir_graph::op::MAX_CONSTANT_ELEMENTS`], else `what` is refused).
fn index_table(like: &Tensor, positions: Vec<i64>, what: &str) -> Res<Tensor> {
    let len = positions.len() as u64;
    if len > tir_graph::op::MAX_CONSTANT_ELEMENTS {
        return Err(too_long(what, len));
    }
    Ok(like
        .builder()
        .constant_data(DType::I64, Shape::of(&[len]), ConstData::Int(positions))?)
}

fn too_long(what: &str, len: u64) -> crate::NodeErrorKind {
    unsupported(format!(
        "{what} of {len} positions (tir's index tables hold at most {})",
        tir_graph::op::MAX_CONSTANT_ELEMENTS
    ))
}

/// The position of an axis of `n` (> 0) that position `p` of the padded axis copies, as NumPy's
/// `pad` (ONNX's reference) defines it, for pads of any size: `edge` repeats the end values,
/// `wrap` is periodic in `n`, `reflect` mirrors about the ends (periodic in `2(n - 1)`).
fn pad_source(mode: &str, p: i64, n: i64) -> i64 {
    match mode {
        "edge" => p.clamp(0, n - 1),
        "wrap" => p.rem_euclid(n),
        _ if n == 1 => 0,
        _ => {
            let period = 2 * (n - 1);
            let m = p.rem_euclid(period);
            if m < n {
                m
            } else {
                period - m
            }
        }
    }
}

pub(super) fn trilu(cx: &mut Cx) -> Res<Vec<Value>> {
    let upper = cx.attrs.int("upper", 1)? != 0;
    let k = match cx.opt_ints(1)? {
        Some(v) => *v.first().ok_or_else(|| invalid("empty k"))?,
        None => 0,
    };
    let x = cx.tensor(0)?;
    let dims = x.shape().dims().to_vec();
    let [.., n, m] = &dims[..] else {
        return Err(invalid(format!("Trilu of {} (rank < 2)", x.ty())));
    };
    let b = cx.b();
    // Positions as constants where the dims are static, else as iotas of their (symbolic) sizes.
    let positions = |d: &Dim| match d {
        Dim::Static(n) => b.arange(DType::I64, *n),
        d => b.iota(d.clone()),
    };
    let rows = positions(n)?.unsqueeze(&[1])?;
    let cols = positions(m)?.unsqueeze(&[0])?;
    let diag = cols.sub(&rows)?;
    let k = b.scalar(DType::I64, k as f64)?;
    let keep = if upper { diag.ge(&k)? } else { diag.le(&k)? };
    let zero = b.scalar(x.dtype(), 0.0)?;
    Ok(vec![keep.select(&x, &zero)?.into()])
}

pub(super) fn one_hot(cx: &mut Cx) -> Res<Vec<Value>> {
    let depth = cx.known(1)?.f64s()?;
    let [depth] = depth[..] else {
        return Err(invalid("depth must have one element"));
    };
    let values = cx.tensor(2)?;
    let indices = cx.tensor(0)?;
    if depth < 1.0 || depth > tir_graph::op::MAX_CONSTANT_ELEMENTS as f64 {
        return Err(unsupported(format!("OneHot of depth {depth}")));
    }
    let depth = depth as u64;
    let rank = indices.rank() + 1;
    let a = axis(cx.attrs.int("axis", -1)?, rank)?;
    let b = cx.b();
    // Indices in [-depth, depth) count from the end when negative; others match nothing.
    let idx = indices.cast(DType::I64)?;
    let zero = b.scalar(DType::I64, 0.0)?;
    let idx = idx
        .lt(&zero)?
        .select(&idx.add(&b.scalar(DType::I64, depth as f64)?)?, &idx)?;
    let mut positions = vec![1u64; rank];
    positions[a] = depth;
    let range: Vec<f64> = (0..depth).map(|i| i as f64).collect();
    let iota = b.constant(DType::I64, Shape::of(&positions), &range)?;
    let hit = iota.eq(&idx.unsqueeze(&[a])?)?;
    let (off, on) = (
        values.slice_axis(0, 0, 1)?.squeeze(&[0])?,
        values.slice_axis(0, 1, 2)?.squeeze(&[0])?,
    );
    Ok(vec![hit.select(&on, &off)?.into()])
}

pub(super) fn eye_like(cx: &mut Cx) -> Res<Vec<Value>> {
    let dims = input_dims(cx, 0)?;
    let [Dim::Static(n), Dim::Static(m)] = dims[..] else {
        return Err(unsupported("EyeLike of a symbolic or non-2-D input"));
    };
    let dtype = match cx.attrs.opt_int("dtype")? {
        Some(t) => crate::model::dtype_of(t as i32).map_err(unsupported)?,
        None => super::input_dtype(cx, 0)?,
    };
    let k = cx.attrs.int("k", 0)?;
    let b = cx.b();
    let rows = b.arange(DType::I64, n)?.unsqueeze(&[1])?;
    let cols = b.arange(DType::I64, m)?.unsqueeze(&[0])?;
    let diag = cols.sub(&rows)?.eq(&b.scalar(DType::I64, k as f64)?)?;
    let y = diag.select(&b.scalar(dtype, 1.0)?, &b.scalar(dtype, 0.0)?)?;
    Ok(vec![y.into()])
}
