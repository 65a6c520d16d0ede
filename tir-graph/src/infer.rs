//! Type inference: the dtype and shape each op produces from its operands, or why it cannot.
//!
//! The rules, in one place:
//! - No implicit promotion: binary ops, select branches, matmul and concat need one dtype.
//! - Float-only: exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, sigmoid, gelu, silu, floor,
//!   ceil, pow, mean. Numeric (int or float): neg, abs, relu, add, sub, mul, div, rem, maximum,
//!   minimum, sum, prod, max, min, argmax, argmin, matmul, ordering comparisons. Bool-only: not,
//!   and, or, select's condition. Integer-only: bit_not, bit_and, bit_or, bit_xor, shift_left,
//!   shift_right. `eq`/`ne` take any dtype. `cast` takes any dtype to any other.
//! - Broadcasting follows NumPy (see [`Shape::broadcast`]).
//! - Ops that need sizes (slice, pad, concat along an axis, squeeze) need that axis static, except
//!   where the op leaves the axis whole.

use crate::op::{ConstData, Op, ReduceOp, ReshapeDim, SliceRange, UnaryOp, MAX_CONSTANT_ELEMENTS};
use crate::{BinaryOp, DType, Dim, DimExpr, Shape, TensorType, MAX_RANK};
use std::fmt;

/// Inference failed: names the op, its operand types and what was expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InferError {
    /// The op's name.
    pub op: &'static str,
    /// The types of its operands, in order.
    pub operands: Vec<TensorType>,
    /// What was expected of them.
    pub reason: String,
}

impl fmt::Display for InferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.op)?;
        for (i, t) in self.operands.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{t}")?;
        }
        write!(f, "): {}", self.reason)
    }
}

type Res<T> = Result<T, String>;

/// The result type of a non-source op applied to `operands`.
pub fn infer(op: &Op, operands: &[&TensorType]) -> Result<TensorType, InferError> {
    let fail = |reason: String| InferError {
        op: op.name(),
        operands: operands.iter().map(|t| (*t).clone()).collect(),
        reason,
    };
    if !op.arity().accepts(operands.len()) {
        return Err(fail(format!(
            "takes {} operand(s), got {}",
            op.arity(),
            operands.len()
        )));
    }
    infer_checked(op, operands).map_err(fail)
}

/// Checks a source's declared type: a well-formed shape, and a constant's data matching it.
pub fn check_source(op: &Op, declared: &TensorType) -> Result<(), InferError> {
    let fail = |reason: String| InferError {
        op: op.name(),
        operands: Vec::new(),
        reason: format!("declared {declared}: {reason}"),
    };
    check_shape(&declared.shape).map_err(fail)?;
    match op {
        Op::Input { name } | Op::Parameter { name } | Op::State { name } if name.is_empty() => {
            Err(fail("the name is empty".into()))
        }
        Op::Constant { data } => check_constant(data, declared).map_err(fail),
        _ if op.is_source() => Ok(()),
        _ => Err(fail("is not a source op".into())),
    }
}

fn check_constant(data: &ConstData, declared: &TensorType) -> Res<()> {
    let numel = declared
        .shape
        .static_numel()
        .ok_or("a constant needs a static shape")?;
    if numel > MAX_CONSTANT_ELEMENTS {
        return Err(format!(
            "{numel} elements exceed the constant limit {MAX_CONSTANT_ELEMENTS}; use a parameter"
        ));
    }
    if data.len() as u64 != numel {
        return Err(format!("has {} values for {numel} elements", data.len()));
    }
    if !data.fits(declared.dtype) {
        return Err(format!(
            "values are not all exact {} values",
            declared.dtype
        ));
    }
    Ok(())
}

/// A shape that came from outside (a file, a parser) may break [`Shape::new`]'s rules.
fn check_shape(shape: &Shape) -> Res<()> {
    Shape::new(shape.dims().to_vec())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn infer_checked(op: &Op, xs: &[&TensorType]) -> Res<TensorType> {
    for x in xs {
        check_shape(&x.shape)?;
    }
    match op {
        Op::Input { .. } | Op::Parameter { .. } | Op::Constant { .. } | Op::State { .. } => {
            Err("a source has a declared type, not an inferred one".into())
        }
        Op::Unary(u) => unary(*u, xs[0]),
        Op::Cast { to } => Ok(TensorType::new(*to, xs[0].shape.clone())),
        Op::Binary(b) => binary(*b, xs[0], xs[1]),
        Op::Select => select(xs[0], xs[1], xs[2]),
        Op::Reduce { op, axes, keepdims } => reduce(*op, axes, *keepdims, xs[0]),
        Op::MatMul => matmul(xs[0], xs[1]),
        Op::Conv {
            strides,
            dilations,
            pads,
            groups,
        } => conv(strides, dilations, pads, *groups, xs[0], xs[1]),
        Op::Reshape { dims } => reshape(dims, xs[0]),
        Op::Permute { perm } => permute(perm, xs[0]),
        Op::BroadcastTo { dims } => broadcast_to(dims, xs[0]),
        Op::Slice { ranges } => slice(ranges, xs[0]),
        Op::Concat { axis } => concat(*axis, xs),
        Op::Pad { pads, value } => pad(pads, value.0, xs[0]),
        Op::Squeeze { axes } => squeeze(axes, xs[0]),
        Op::Unsqueeze { axes } => unsqueeze(axes, xs[0]),
        Op::Gather { axis } => gather(*axis, xs[0], xs[1]),
        Op::StateAssign => state_assign(xs[0], xs[1]),
        Op::StateWriteSlice { axis, start } => state_write_slice(*axis, *start, xs),
        Op::Custom { kernel, output } => {
            let k = kernel.kernel();
            let bound = k.bind(xs).map_err(|e| e.to_string())?;
            k.output_type(*output, &bound).map_err(|e| e.to_string())
        }
        Op::Iota { len } => Ok(TensorType::new(
            DType::I64,
            Shape::new(vec![len.clone()]).map_err(|e| e.to_string())?,
        )),
        Op::DimValue { dim } => {
            // Through a shape, so that the dim is checked as a shape's dims are.
            Shape::new(vec![dim.clone()]).map_err(|e| e.to_string())?;
            Ok(TensorType::new(DType::I64, Shape::scalar()))
        }
        Op::AllReduce { op, world } => all_reduce(*op, *world, xs[0]),
        Op::AllGather { axis, world } => collective_axis(*axis, *world, xs[0], true),
        Op::ReduceScatter { axis, world } => collective_axis(*axis, *world, xs[0], false),
    }
}

fn need_world(world: u32) -> Res<()> {
    if world == 0 {
        return Err("a collective needs a world of at least one device".into());
    }
    Ok(())
}

fn all_reduce(op: ReduceOp, world: u32, x: &TensorType) -> Res<TensorType> {
    need_world(world)?;
    if !matches!(op, ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min) {
        return Err(format!(
            "all_reduce combines by sum, max or min, not {}",
            op.name()
        ));
    }
    need_numeric(x.dtype)?;
    Ok(x.clone())
}

/// `all_gather` (`gather`: the axis grows `world` times) and `reduce_scatter` (it shrinks
/// `world` times, which must divide it).
fn collective_axis(axis: usize, world: u32, x: &TensorType, gather: bool) -> Res<TensorType> {
    need_world(world)?;
    if axis >= x.rank() {
        return Err(format!("axis {axis} is out of range for rank {}", x.rank()));
    }
    if !gather {
        need_numeric(x.dtype)?;
    }
    let n = DimExpr::constant(i64::from(world));
    let d = &x.shape.dims()[axis];
    let resized = if gather {
        d.to_expr().mul(&n).map_err(|e| e.to_string())?
    } else {
        d.to_expr().exact_div(&n).ok_or_else(|| {
            format!("axis {axis} ({d}) is not divisible by the world of {world} devices")
        })?
    };
    let mut dims = x.shape.dims().to_vec();
    dims[axis] = Dim::from_expr(resized).map_err(|e| e.to_string())?;
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn need_float(dtype: DType) -> Res<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(format!("needs a float dtype, got {dtype}"))
    }
}

fn need_numeric(dtype: DType) -> Res<()> {
    if dtype.is_numeric() {
        Ok(())
    } else {
        Err(format!("needs a numeric dtype, got {dtype}"))
    }
}

fn need_int(dtype: DType) -> Res<()> {
    if dtype.is_int() {
        Ok(())
    } else {
        Err(format!("needs an integer dtype, got {dtype}"))
    }
}

fn need_bool(dtype: DType, what: &str) -> Res<()> {
    if dtype == DType::Bool {
        Ok(())
    } else {
        Err(format!("{what} must be bool, got {dtype}"))
    }
}

fn need_same_dtype(a: DType, b: DType) -> Res<()> {
    if a == b {
        Ok(())
    } else {
        Err(format!("dtypes {a} and {b} differ (cast one first)"))
    }
}

fn unary(u: UnaryOp, x: &TensorType) -> Res<TensorType> {
    unary_dtype(u, x.dtype)?;
    Ok(x.clone())
}

/// The dtype of `u` on a tensor of `x` (which it keeps), or why `u` does not take `x`.
pub fn unary_dtype(u: UnaryOp, x: DType) -> Result<DType, String> {
    match u {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => need_numeric(x)?,
        UnaryOp::Not => need_bool(x, "the operand")?,
        UnaryOp::BitNot => need_int(x)?,
        _ => need_float(x)?,
    }
    Ok(x)
}

fn binary(b: BinaryOp, x: &TensorType, y: &TensorType) -> Res<TensorType> {
    let dtype = binary_dtype(b, x.dtype, y.dtype)?;
    let shape = x.shape.broadcast(&y.shape).map_err(|e| e.to_string())?;
    Ok(TensorType::new(dtype, shape))
}

/// The result dtype of `b` on operands of `x` and `y`, or why `b` does not take them.
pub fn binary_dtype(b: BinaryOp, x: DType, y: DType) -> Result<DType, String> {
    need_same_dtype(x, y)?;
    Ok(match b {
        BinaryOp::And | BinaryOp::Or => {
            need_bool(x, "operands")?;
            DType::Bool
        }
        BinaryOp::Eq | BinaryOp::Ne => DType::Bool,
        b if b.is_comparison() => {
            need_numeric(x)?;
            DType::Bool
        }
        BinaryOp::Pow => {
            need_float(x)?;
            x
        }
        b if b.is_bitwise() => {
            need_int(x)?;
            x
        }
        _ => {
            need_numeric(x)?;
            x
        }
    })
}

fn select(cond: &TensorType, a: &TensorType, b: &TensorType) -> Res<TensorType> {
    let dtype = select_dtype(cond.dtype, a.dtype, b.dtype)?;
    let shape = cond
        .shape
        .broadcast(&a.shape)
        .and_then(|s| s.broadcast(&b.shape))
        .map_err(|e| e.to_string())?;
    Ok(TensorType::new(dtype, shape))
}

/// The result dtype of `select` with a condition of `cond` and branches of `a` and `b`, or why
/// it does not take them.
pub fn select_dtype(cond: DType, a: DType, b: DType) -> Result<DType, String> {
    need_bool(cond, "the condition")?;
    need_same_dtype(a, b)?;
    Ok(a)
}

/// Checks that `axes` are distinct and below `rank`.
fn check_axes(axes: &[usize], rank: usize) -> Res<()> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= rank {
            return Err(format!("axis {a} is out of range for rank {rank}"));
        }
        if axes[..i].contains(&a) {
            return Err(format!("axis {a} is repeated"));
        }
    }
    Ok(())
}

fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool, x: &TensorType) -> Res<TensorType> {
    if axes.is_empty() {
        return Err("reduces over no axes".into());
    }
    check_axes(axes, x.rank())?;
    let dtype = match op {
        ReduceOp::Mean => {
            need_float(x.dtype)?;
            x.dtype
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            need_numeric(x.dtype)?;
            if axes.len() != 1 {
                return Err(format!("reduces over exactly one axis, got {}", axes.len()));
            }
            DType::I64
        }
        _ => {
            need_numeric(x.dtype)?;
            x.dtype
        }
    };
    let dims = x
        .shape
        .dims()
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Static(1)),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(
        dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn matmul(a: &TensorType, b: &TensorType) -> Res<TensorType> {
    need_same_dtype(a.dtype, b.dtype)?;
    need_numeric(a.dtype)?;
    if a.rank() < 2 || b.rank() < 2 {
        return Err("both operands need rank 2 or more ([..., m, k] @ [..., k, n])".into());
    }
    let (ad, bd) = (a.shape.dims(), b.shape.dims());
    let (m, k) = (&ad[ad.len() - 2], &ad[ad.len() - 1]);
    let (k2, n) = (&bd[bd.len() - 2], &bd[bd.len() - 1]);
    if k != k2 {
        return Err(format!("inner dims {k} and {k2} differ"));
    }
    let batch_a = Shape::new(ad[..ad.len() - 2].to_vec()).map_err(|e| e.to_string())?;
    let batch_b = Shape::new(bd[..bd.len() - 2].to_vec()).map_err(|e| e.to_string())?;
    let batch = batch_a
        .broadcast(&batch_b)
        .map_err(|e| format!("batch dims: {e}"))?;
    let mut dims = batch.into_dims();
    dims.extend([m.clone(), n.clone()]);
    Ok(TensorType::new(
        a.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

/// `conv(x, w)`: `x: [N, C, S..]`, `w: [O, C / groups, K..]`, all but `N` static.
fn conv(
    strides: &[u64],
    dilations: &[u64],
    pads: &[(u64, u64)],
    groups: u64,
    x: &TensorType,
    w: &TensorType,
) -> Res<TensorType> {
    need_same_dtype(x.dtype, w.dtype)?;
    need_float(x.dtype)?;
    let spatial = x.rank().saturating_sub(2);
    if !(1..=3).contains(&spatial) || w.rank() != x.rank() {
        return Err(
            "needs x: [N, C, S..] and w: [O, C / groups, K..] with 1 to 3 spatial axes".into(),
        );
    }
    if strides.len() != spatial || dilations.len() != spatial || pads.len() != spatial {
        return Err(format!(
            "needs {spatial} strides, dilations and pads, got {}, {} and {}",
            strides.len(),
            dilations.len(),
            pads.len()
        ));
    }
    if strides.contains(&0) || dilations.contains(&0) || groups == 0 {
        return Err("strides, dilations and groups must be at least 1".into());
    }
    let channels = static_axis(x, 1, "conv")?;
    let kernel = (0..w.rank())
        .map(|a| static_axis(w, a, "conv"))
        .collect::<Res<Vec<u64>>>()?;
    let out_channels = kernel[0];
    if channels % groups != 0 || out_channels % groups != 0 || kernel[1] * groups != channels {
        return Err(format!(
            "{channels} input and {out_channels} output channels in {groups} groups need weights \
             of {} channels per group, got {}",
            channels / groups,
            kernel[1]
        ));
    }
    let mut out = vec![x.shape.dims()[0].clone(), Dim::Static(out_channels)];
    for i in 0..spatial {
        let (before, after) = pads[i];
        let span = dilations[i]
            .checked_mul(kernel[2 + i].saturating_sub(1))
            .and_then(|d| d.checked_add(1))
            .ok_or("the kernel's span overflows u64")?;
        let size = &x.shape.dims()[2 + i];
        let padded = before
            .checked_add(after)
            .and_then(|p| i64::try_from(p).ok())
            .ok_or("the padded size overflows u64")
            .and_then(|p| size.offset(p).map_err(|_| "the padded size overflows u64"))?;
        let too_small = padded.as_static().is_some_and(|p| span > p);
        if kernel[2 + i] == 0 || too_small {
            return Err(format!(
                "spatial axis {i}: a kernel of {} (dilation {}) does not fit {size} padded to {padded}",
                kernel[2 + i],
                dilations[i],
            ));
        }
        out.push(window_count(&padded, span, strides[i])?);
    }
    Ok(TensorType::new(
        x.dtype,
        Shape::new(out).map_err(|e| e.to_string())?,
    ))
}

/// How many windows of `span` elements, `stride` apart, fit in `size` elements:
/// `⌊(size − span) / stride⌋ + 1` (a run-time error where a binding makes `size < span`).
pub fn window_count(size: &Dim, span: u64, stride: u64) -> Res<Dim> {
    let to_i64 = |n: u64| i64::try_from(n).map_err(|_| "a window overflows i64".to_string());
    let (span, stride) = (to_i64(span)?, to_i64(stride)?);
    size.to_expr()
        .sub(&DimExpr::constant(span))
        .and_then(|e| e.floor_div(&DimExpr::constant(stride)))
        .and_then(|e| e.add(&DimExpr::constant(1)))
        .map_err(|e| e.to_string())
        .and_then(|e| Dim::from_expr(e).map_err(|e| e.to_string()))
}

/// The product of `dims` as an expression (a static dim past `i64::MAX` overflows it).
fn element_count<'a>(mut dims: impl Iterator<Item = &'a Dim>) -> Res<DimExpr> {
    let overflow = || "the element count overflows u64".to_string();
    dims.try_fold(DimExpr::constant(1), |acc, d| {
        if d.as_static().is_some_and(|n| i64::try_from(n).is_err()) {
            return Err(overflow());
        }
        acc.mul(&d.to_expr()).map_err(|_| overflow())
    })
}

fn reshape(target: &[ReshapeDim], x: &TensorType) -> Res<TensorType> {
    let infer_count = target.iter().filter(|d| **d == ReshapeDim::Infer).count();
    if infer_count > 1 {
        return Err("at most one dim may be inferred".into());
    }
    let known = target.iter().filter_map(|d| match d {
        ReshapeDim::Dim(d) => Some(d),
        ReshapeDim::Infer => None,
    });
    let in_count = element_count(x.shape.dims().iter())?;
    let t_count = element_count(known)?;
    let mismatch = || {
        let dims: Vec<String> = target
            .iter()
            .map(|d| match d {
                ReshapeDim::Dim(d) => d.to_string(),
                ReshapeDim::Infer => "?".into(),
            })
            .collect();
        format!(
            "cannot reshape {} to [{}]: element counts differ",
            x.shape,
            dims.join(", ")
        )
    };
    let inferred = if infer_count == 0 {
        if in_count != t_count {
            return Err(mismatch());
        }
        None
    } else {
        // Zero elements leave the inferred dim open.
        if t_count.as_constant() == Some(0) {
            return Err(mismatch());
        }
        let quotient = in_count.exact_div(&t_count).ok_or_else(mismatch)?;
        Some(Dim::from_expr(quotient).map_err(|_| mismatch())?)
    };
    let dims = target
        .iter()
        .map(|d| match d {
            ReshapeDim::Dim(d) => d.clone(),
            ReshapeDim::Infer => inferred.clone().expect("inferred when a dim is Infer"),
        })
        .collect();
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn permute(perm: &[usize], x: &TensorType) -> Res<TensorType> {
    if perm.len() != x.rank() {
        return Err(format!(
            "permutation {perm:?} has {} entries for rank {}",
            perm.len(),
            x.rank()
        ));
    }
    check_axes(perm, x.rank()).map_err(|e| format!("{perm:?} is not a permutation: {e}"))?;
    let dims = perm.iter().map(|&p| x.shape.dims()[p].clone()).collect();
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn broadcast_to(dims: &[Dim], x: &TensorType) -> Res<TensorType> {
    let target = Shape::new(dims.to_vec()).map_err(|e| e.to_string())?;
    let joined = x.shape.broadcast(&target).map_err(|e| e.to_string())?;
    if joined != target {
        return Err(format!("{} does not broadcast to {target}", x.shape));
    }
    Ok(TensorType::new(x.dtype, target))
}

/// The static size of `axis`, or an error naming `what` needs it.
fn static_axis(x: &TensorType, axis: usize, what: &str) -> Res<u64> {
    x.shape.dims()[axis].as_static().ok_or_else(|| {
        format!(
            "{what} needs axis {axis} to be static, got {}",
            x.shape.dims()[axis]
        )
    })
}

fn slice(ranges: &[SliceRange], x: &TensorType) -> Res<TensorType> {
    if ranges.len() != x.rank() {
        return Err(format!("has {} ranges for rank {}", ranges.len(), x.rank()));
    }
    let mut dims = Vec::with_capacity(ranges.len());
    for (axis, (r, d)) in ranges.iter().zip(x.shape.dims()).enumerate() {
        if r.step == 0 {
            return Err(format!("axis {axis}: step is 0"));
        }
        if *r == SliceRange::FULL {
            dims.push(d.clone());
            continue;
        }
        let stop = r.stop.clone().unwrap_or_else(|| d.clone());
        let (Some(len), Some(stop)) = (d.as_static(), stop.as_static()) else {
            // Symbolic: `ceil((stop - start) / step)` elements, the stop checked against the
            // axis when a run binds the dims (`Graph::dim_bounds`).
            let start = i64::try_from(r.start).map_err(|_| "a slice start overflows i64")?;
            let step = i64::try_from(r.step).map_err(|_| "a slice step overflows i64")?;
            let count = stop
                .offset(-start)
                .map_err(|_| format!("axis {axis}: range {}..{stop} is empty backwards", r.start))?
                .to_expr()
                .ceil_div(&DimExpr::constant(step))
                .map_err(|e| e.to_string())?;
            dims.push(Dim::from_expr(count).map_err(|e| e.to_string())?);
            continue;
        };
        if r.start > stop || stop > len {
            return Err(format!(
                "axis {axis}: range {}..{stop} is not within 0..{len}",
                r.start
            ));
        }
        dims.push(Dim::Static((stop - r.start).div_ceil(r.step)));
    }
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn concat(axis: usize, xs: &[&TensorType]) -> Res<TensorType> {
    let first = xs[0];
    if axis >= first.rank() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            first.rank()
        ));
    }
    for (i, x) in xs.iter().enumerate() {
        need_same_dtype(first.dtype, x.dtype)?;
        if x.rank() != first.rank() {
            return Err(format!(
                "operand {i} has rank {}, expected {}",
                x.rank(),
                first.rank()
            ));
        }
        for (a, (d, d0)) in x.shape.dims().iter().zip(first.shape.dims()).enumerate() {
            if a != axis && d != d0 {
                return Err(format!("operand {i} has {d} at axis {a}, expected {d0}"));
            }
        }
    }
    let mut dims = first.shape.dims().to_vec();
    // Static sizes add as u64 (past i64's range too); others as an expression.
    let lengths: Option<Vec<u64>> = xs
        .iter()
        .map(|x| x.shape.dims()[axis].as_static())
        .collect();
    let static_total = lengths.map(|l| l.iter().try_fold(0u64, |sum, &n| sum.checked_add(n)));
    dims[axis] = match static_total {
        Some(Some(n)) => Dim::Static(n),
        Some(None) => return Err("the concatenated size overflows u64".into()),
        None => {
            let total = xs
                .iter()
                .try_fold(DimExpr::constant(0), |t, x| {
                    t.add(&x.shape.dims()[axis].to_expr())
                })
                .map_err(|_| "the concatenated size overflows")?;
            Dim::from_expr(total).map_err(|e| e.to_string())?
        }
    };
    Ok(TensorType::new(
        first.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn pad(pads: &[(u64, u64)], value: f64, x: &TensorType) -> Res<TensorType> {
    if pads.len() != x.rank() {
        return Err(format!("has {} pads for rank {}", pads.len(), x.rank()));
    }
    if !x.dtype.holds(value) {
        return Err(format!(
            "pad value {value:?} is not an exact {} value",
            x.dtype
        ));
    }
    let mut dims = Vec::with_capacity(pads.len());
    for (&(before, after), d) in pads.iter().zip(x.shape.dims()) {
        if before == 0 && after == 0 {
            dims.push(d.clone());
            continue;
        }
        let padded = match d.as_static() {
            Some(len) => len
                .checked_add(before)
                .and_then(|n| n.checked_add(after))
                .map(Dim::Static),
            None => before
                .checked_add(after)
                .and_then(|p| i64::try_from(p).ok())
                .and_then(|p| d.offset(p).ok()),
        }
        .ok_or("the padded size overflows u64")?;
        dims.push(padded);
    }
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn squeeze(axes: &[usize], x: &TensorType) -> Res<TensorType> {
    check_axes(axes, x.rank())?;
    for &a in axes {
        if x.shape.dims()[a] != Dim::Static(1) {
            return Err(format!("axis {a} has size {}, not 1", x.shape.dims()[a]));
        }
    }
    let dims = x
        .shape
        .dims()
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn unsqueeze(axes: &[usize], x: &TensorType) -> Res<TensorType> {
    let rank = x.rank() + axes.len();
    if rank > MAX_RANK {
        return Err(format!("the result rank {rank} exceeds {MAX_RANK}"));
    }
    check_axes(axes, rank)?;
    let mut rest = x.shape.dims().iter();
    let dims = (0..rank)
        .map(|i| {
            if axes.contains(&i) {
                Dim::Static(1)
            } else {
                rest.next().expect("rank counts the operand's dims").clone()
            }
        })
        .collect();
    Ok(TensorType::new(
        x.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn gather(axis: usize, data: &TensorType, indices: &TensorType) -> Res<TensorType> {
    if axis >= data.rank() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            data.rank()
        ));
    }
    if !matches!(indices.dtype, DType::I32 | DType::I64) {
        return Err(format!("indices must be i32 or i64, got {}", indices.dtype));
    }
    let d = data.shape.dims();
    let dims: Vec<Dim> = d[..axis]
        .iter()
        .chain(indices.shape.dims())
        .chain(&d[axis + 1..])
        .cloned()
        .collect();
    Ok(TensorType::new(
        data.dtype,
        Shape::new(dims).map_err(|e| e.to_string())?,
    ))
}

fn state_assign(state: &TensorType, value: &TensorType) -> Res<TensorType> {
    if state != value {
        return Err(format!("the value must have the state's type {state}"));
    }
    Ok(state.clone())
}

fn state_write_slice(axis: usize, start: Option<u64>, xs: &[&TensorType]) -> Res<TensorType> {
    let (state, value) = (xs[0], xs[1]);
    need_same_dtype(state.dtype, value.dtype)?;
    if value.rank() != state.rank() {
        return Err(format!(
            "the value has rank {}, the state {}",
            value.rank(),
            state.rank()
        ));
    }
    if axis >= state.rank() {
        return Err(format!(
            "axis {axis} is out of range for rank {}",
            state.rank()
        ));
    }
    for (a, (v, s)) in value
        .shape
        .dims()
        .iter()
        .zip(state.shape.dims())
        .enumerate()
    {
        if a != axis && v != s {
            return Err(format!("the value has {v} at axis {a}, the state {s}"));
        }
    }
    let capacity = static_axis(state, axis, "a slice write")?;
    let len = static_axis(value, axis, "a slice write")?;
    let end = start.unwrap_or(0).checked_add(len);
    if end.is_none_or(|e| e > capacity) {
        let at = start.map_or("some offset".to_string(), |s| format!("offset {s}"));
        return Err(format!(
            "writing {len} elements at {at} overruns axis {axis} of size {capacity}"
        ));
    }
    if let Some(offset) = xs.get(2) {
        if offset.rank() != 0 || !matches!(offset.dtype, DType::I32 | DType::I64) {
            return Err(format!(
                "the offset must be a scalar i32 or i64, got {offset}"
            ));
        }
    }
    Ok(state.clone())
}
