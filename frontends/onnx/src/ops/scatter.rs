//! Scatters (`ScatterElements`, its old name `Scatter`, `ScatterND`, `TensorScatter`) over
//! tensors of static shape, written from the output's side: the IR has no scatter (a
//! data-dependent write the legality prover cannot check), so each output element reads what
//! lands on it.
//!
//! `ScatterElements` and `ScatterND` become `data: [G, P, T]` (G independent rows, P target
//! positions, T elements moved together), `index: [G, K]` (the position each of K updates
//! targets, -1 for none) and `updates: [G, K, T]`. Each output position compares itself with
//! every index of its row (a one-hot `[G, P, K]` from iota and Eq) and combines the updates that
//! hit it: a sum (`add`), a product of `select(hit, u, 1)` (`mul`), a max or min over
//! `select(hit, u, ∓∞)` (`max`, `min`), combined with the data; with no reduction the last
//! hitting update (ONNX's reference order) is gathered, else the data is kept. That costs
//! `G·P·K·T` compares: for `ScatterElements` the data's size times the indices' length along
//! the axis, for `ScatterND` the data's size times the number of index tuples; a node above
//! [`MAX_COMPARES`] is refused. Negative indices wrap; an index still out of range hits
//! nothing (ONNX makes it an error; tir cannot raise one at run time).
//!
//! `TensorScatter` (a KV-cache write) needs no one-hot: output position `j` of batch `b` along
//! the axis reads `update` at `j − write_indices[b]` (mod the cache length in `circular` mode)
//! when that falls inside the update, else the cache: one gather.

use super::shape::take_along;
use super::{axis, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use tir_graph::{DType, Shape, Tensor};

/// The most one-hot compares (`G·P·K·T`) one scatter may build.
const MAX_COMPARES: u64 = 1 << 24;

/// How the updates that hit one element combine with it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

/// The node's `reduction` for its opset: none before 16, add/mul from 16, max/min from 18.
fn reduction(cx: &mut Cx) -> Res<Reduction> {
    if cx.op() == "Scatter" || cx.opset < 16 {
        return Ok(Reduction::None);
    }
    let r = cx.attrs.string("reduction", "none")?;
    Ok(match r.as_str() {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" | "min" if cx.opset < 18 => {
            return Err(invalid(format!("reduction `{r}` before opset 18")))
        }
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        other => return Err(invalid(format!("reduction `{other}`"))),
    })
}

/// Static dims of `t`, or `op` of a symbolic shape is unsupported.
fn static_dims(t: &Tensor, op: &str) -> Res<Vec<u64>> {
    t.shape()
        .static_dims()
        .ok_or_else(|| unsupported(format!("{op} of symbolic shape {}", t.ty())))
}

/// `idx` (i64) with negatives counted from the end of an axis of `n`.
fn wrapped(idx: &Tensor, n: u64) -> Res<Tensor> {
    let b = idx.builder();
    let negative = idx.lt(&b.scalar(DType::I64, 0.0)?)?;
    Ok(negative.select(&idx.add_scalar(n as f64)?, idx)?)
}

pub(super) fn scatter_elements(cx: &mut Cx) -> Res<Vec<Value>> {
    let op = cx.op().to_string();
    let reduction = reduction(cx)?;
    let a = cx.attrs.int("axis", 0)?;
    let (data, index, updates) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    let (dims, idims) = (static_dims(&data, &op)?, static_dims(&index, &op)?);
    let a = axis(a, dims.len())?;
    let fits = idims.len() == dims.len()
        && (0..dims.len()).all(|i| i == a || idims[i] <= dims[i])
        && index.dtype().is_int()
        && updates.shape() == index.shape()
        && updates.dtype() == data.dtype();
    if !fits {
        return Err(invalid(format!(
            "{op} of data {}, indices {}, updates {} along axis {a}",
            data.ty(),
            index.ty(),
            updates.ty()
        )));
    }
    // Off the axis, indices may be shorter than the data: pad them with -1 (hitting nothing).
    let pads: Vec<(u64, u64)> = (0..dims.len())
        .map(|i| (0, if i == a { 0 } else { dims[i] - idims[i] }))
        .collect();
    let idx = wrapped(&index.cast(DType::I64)?, dims[a])?.pad(&pads, -1.0)?;
    let upd = updates.pad(&pads, 0.0)?;
    // The axis goes last: rows of G = data.len / dims[a] positions each.
    let mut perm: Vec<usize> = (0..dims.len()).filter(|&i| i != a).collect();
    perm.push(a);
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    let g: u64 = dims.iter().product::<u64>() / dims[a].max(1);
    let (p, k) = (dims[a], idims[a]);
    let moved = data.permute(&perm)?;
    let moved_shape = moved.shape();
    let y = scatter_rows(
        &moved.reshape_to(&Shape::of(&[g, p, 1]))?,
        &idx.permute(&perm)?.reshape_to(&Shape::of(&[g, k]))?,
        &upd.permute(&perm)?.reshape_to(&Shape::of(&[g, k, 1]))?,
        reduction,
    )?;
    let y = y.reshape_to(&moved_shape)?.permute(&inverse)?;
    Ok(vec![y.into()])
}

pub(super) fn scatter_nd(cx: &mut Cx) -> Res<Vec<Value>> {
    let reduction = reduction(cx)?;
    let (data, index, updates) = (cx.tensor(0)?, cx.tensor(1)?, cx.tensor(2)?);
    let (dims, idims) = (
        static_dims(&data, "ScatterND")?,
        static_dims(&index, "ScatterND")?,
    );
    let m = idims.last().copied().unwrap_or(0) as usize;
    let q = &idims[..idims.len().saturating_sub(1)];
    let mut expected: Vec<u64> = q.to_vec();
    expected.extend(dims.get(m..).unwrap_or(&[]));
    if idims.is_empty() || m > dims.len() || !index.dtype().is_int() {
        return Err(invalid(format!(
            "ScatterND indices {} into data {}",
            index.ty(),
            data.ty()
        )));
    }
    if updates.shape() != Shape::of(&expected) || updates.dtype() != data.dtype() {
        return Err(invalid(format!(
            "ScatterND updates {} for data {} and indices {}",
            updates.ty(),
            data.ty(),
            index.ty()
        )));
    }
    let p: u64 = dims[..m].iter().product();
    let t: u64 = dims[m..].iter().product();
    let k: u64 = q.iter().product();
    let linear = tuple_positions(&index, &dims[..m], k)?;
    let y = scatter_rows(
        &data.reshape_to(&Shape::of(&[1, p, t]))?,
        &linear.reshape_to(&Shape::of(&[1, k]))?,
        &updates.reshape_to(&Shape::of(&[1, k, t]))?,
        reduction,
    )?;
    Ok(vec![y.reshape_to(&data.shape())?.into()])
}

/// `[k]` (i64): the row-major position in `dims` of each index tuple (the last axis of
/// `index`), negatives wrapped, -1 for a tuple with an entry out of range.
fn tuple_positions(index: &Tensor, dims: &[u64], k: u64) -> Res<Tensor> {
    let m = dims.len();
    let b = index.builder();
    let tuples = index
        .cast(DType::I64)?
        .reshape_to(&Shape::of(&[k, m as u64]))?;
    let mut linear = b.scalar(DType::I64, 0.0)?.broadcast_to(&Shape::of(&[k]))?;
    let mut ok = b.scalar(DType::Bool, 1.0)?.broadcast_to(&Shape::of(&[k]))?;
    let mut stride = 1;
    for j in (0..m).rev() {
        let e = wrapped(
            &tuples
                .slice_axis(1, j as u64, j as u64 + 1)?
                .squeeze(&[1])?,
            dims[j],
        )?;
        let inside = e
            .ge(&b.scalar(DType::I64, 0.0)?)?
            .and(&e.lt(&b.scalar(DType::I64, dims[j] as f64)?)?)?;
        ok = ok.and(&inside)?;
        linear = linear.add(&e.mul_scalar(stride as f64)?)?;
        stride *= dims[j];
    }
    Ok(ok.select(&linear, &b.scalar(DType::I64, -1.0)?)?)
}

/// The scatter core: `data [G, P, T]` with each of the K `updates [G, K, T]` combined into the
/// position `index [G, K]` of its row.
pub(super) fn scatter_rows(
    data: &Tensor,
    index: &Tensor,
    updates: &Tensor,
    r: Reduction,
) -> Res<Tensor> {
    let dims = static_dims(data, "a scatter")?;
    let k = static_dims(index, "a scatter")?[1];
    let (g, p, t) = (dims[0], dims[1], dims[2]);
    let compares = g.saturating_mul(p).saturating_mul(k).saturating_mul(t);
    if compares > MAX_COMPARES {
        return Err(unsupported(format!(
            "a scatter of {k} updates into {g}×{p}×{t} elements ({compares} compares, above \
             {MAX_COMPARES})"
        )));
    }
    let b = data.builder();
    let positions = b
        .arange(DType::I64, p)?
        .reshape_to(&Shape::of(&[1, p, 1]))?;
    let hit = index.unsqueeze(&[1])?.eq(&positions)?; // [G, P, K]
    if r == Reduction::None {
        return last_hit(data, updates, &hit, k);
    }
    if !data.dtype().is_numeric() || data.dtype() == DType::Bool {
        return Err(unsupported(format!(
            "a scatter's {r:?} of {}",
            data.dtype()
        )));
    }
    let d = data.dtype();
    let wide = compute_dtype(d);
    let (x, u) = (super::cast_to(data, wide)?, super::cast_to(updates, wide)?);
    let hit = hit.unsqueeze(&[3])?; // [G, P, K, 1]
    let u = u.unsqueeze(&[1])?; // [G, 1, K, T]
    let masked = |fill: f64| -> Res<Tensor> { Ok(hit.select(&u, &b.scalar(wide, fill)?)?) };
    let y = match r {
        Reduction::Add => x.add(&masked(0.0)?.sum(&[2], false)?)?,
        Reduction::Mul => x.mul(&masked(1.0)?.prod(&[2], false)?)?,
        Reduction::Max => x.maximum(&masked(extreme(wide, false))?.max(&[2], false)?)?,
        Reduction::Min => x.minimum(&masked(extreme(wide, true))?.min(&[2], false)?)?,
        Reduction::None => unreachable!("handled above"),
    };
    super::cast_to(&y, d)
}

/// The largest (`high`) or lowest value of `d`: what an untouched max or min sees.
fn extreme(d: DType, high: bool) -> f64 {
    let (lo, hi) = match d {
        DType::I8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
        DType::U8 => (0.0, 255.0),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    if high {
        hi
    } else {
        lo
    }
}

/// No reduction: each position takes the last update that hits it, else keeps the data.
fn last_hit(data: &Tensor, updates: &Tensor, hit: &Tensor, k: u64) -> Res<Tensor> {
    let b = data.builder();
    let g = static_dims(data, "a scatter")?[0];
    let order = b
        .arange(DType::I64, k)?
        .reshape_to(&Shape::of(&[1, 1, k]))?;
    let last = hit
        .select(&order, &b.scalar(DType::I64, -1.0)?)?
        .max(&[2], false)?; // [G, P]
    let any = last.ge(&b.scalar(DType::I64, 0.0)?)?;
    // Gather from the updates as [G·K, T] at g·K + last.
    let rows = b
        .arange(DType::I64, g)?
        .mul_scalar(k as f64)?
        .unsqueeze(&[1])?;
    let at = rows.add(&last.maximum(&b.scalar(DType::I64, 0.0)?)?)?;
    let t = updates.shape().dims()[2].clone();
    let flat = updates.reshape(&[tir_graph::ReshapeDim::Infer, tir_graph::ReshapeDim::Dim(t)])?;
    let taken = flat.gather(&at, 0)?; // [G, P, T]
    Ok(any.unsqueeze(&[2])?.select(&taken, data)?)
}

pub(super) fn tensor_scatter(cx: &mut Cx) -> Res<Vec<Value>> {
    let mode = cx.attrs.string("mode", "linear")?;
    let a = cx.attrs.int("axis", -2)?;
    let (past, update) = (cx.tensor(0)?, cx.tensor(1)?);
    let write = cx.opt_tensor(2)?;
    let (dims, udims) = (
        static_dims(&past, "TensorScatter")?,
        static_dims(&update, "TensorScatter")?,
    );
    let a = axis(a, dims.len())?;
    let fits = a > 0
        && udims.len() == dims.len()
        && (0..dims.len()).all(|i| {
            if i == a {
                udims[i] <= dims[i]
            } else {
                udims[i] == dims[i]
            }
        })
        && update.dtype() == past.dtype();
    if !fits || !matches!(mode.as_str(), "linear" | "circular") {
        return Err(invalid(format!(
            "TensorScatter of {} into {} along axis {a} in mode `{mode}`",
            update.ty(),
            past.ty()
        )));
    }
    let b = past.builder();
    let (len, seq) = (dims[a], udims[a]);
    let mut at = vec![1; dims.len()];
    at[a] = len;
    let j = b.arange(DType::I64, len)?.reshape_to(&Shape::of(&at))?;
    let rel = match write {
        Some(w) => {
            let mut wat = vec![1; dims.len()];
            wat[0] = dims[0];
            j.sub(&w.cast(DType::I64)?.reshape_to(&Shape::of(&wat))?)?
        }
        None => j,
    };
    let rel = if mode == "circular" {
        let n = b.scalar(DType::I64, len as f64)?;
        rel.rem(&n)?.add(&n)?.rem(&n)?
    } else {
        rel
    };
    let zero = b.scalar(DType::I64, 0.0)?;
    let inside = rel
        .ge(&zero)?
        .and(&rel.lt(&b.scalar(DType::I64, seq as f64)?)?)?;
    let mut full = dims.clone();
    full[a] = len;
    let rel = inside
        .select(&rel, &zero)?
        .broadcast_to(&Shape::of(&full))?;
    let taken = take_along(&update, &rel, a)?;
    Ok(vec![inside.select(&taken, &past)?.into()])
}
