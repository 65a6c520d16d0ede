//! Scans and index contractions: `CumSum`, `CumProd`, `Round` and `Einsum`, each composed from
//! tir's elementwise, layout, reduction and matmul ops.
//!
//! Takes: `CumSum` and `CumProd` of a numeric tensor along an axis known at import
//! (`exclusive`, `reverse`; a log-step scan over a static length, a masked reduction over a
//! symbolic one); `Round` of a float tensor; `Einsum` of any number of numeric operands of one
//! dtype, with explicit or implicit output, `...` broadcasting, size-1 broadcasting of a label,
//! and repeated labels in one operand (diagonals) of a static size. Guarantees: integer results
//! exact (products wrap as NumPy's do); `Round` exact (half to even, `-0`, NaN and infinities
//! kept); float sums and products in another order than ONNX's reference (a log-step scan,
//! matmul and reduction order), with 16-bit floats computed in f32 and rounded once. Symbolic
//! lengths a composition needs static are refused, never approximated.

use super::{axis, cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::{invalid, unsupported};
use std::collections::{BTreeMap, HashSet};
use tir_graph::{DType, Dim, Shape, SliceRange, Tensor, MAX_RANK};

/// What a prefix scan combines: sums (`CumSum`) or products (`CumProd`).
#[derive(Clone, Copy)]
enum Combine {
    Sum,
    Prod,
}

impl Combine {
    /// The value that changes nothing: what is shifted in from outside the axis.
    fn identity(self) -> f64 {
        match self {
            Combine::Sum => 0.0,
            Combine::Prod => 1.0,
        }
    }

    fn apply(self, a: &Tensor, b: &Tensor) -> Res<Tensor> {
        Ok(match self {
            Combine::Sum => a.add(b)?,
            Combine::Prod => a.mul(b)?,
        })
    }

    fn reduce(self, t: &Tensor, axis: usize) -> Res<Tensor> {
        Ok(match self {
            Combine::Sum => t.sum(&[axis], false)?,
            Combine::Prod => t.prod(&[axis], false)?,
        })
    }
}

pub(super) fn cumsum(cx: &mut Cx) -> Res<Vec<Value>> {
    scan(cx, Combine::Sum)
}

pub(super) fn cumprod(cx: &mut Cx) -> Res<Vec<Value>> {
    scan(cx, Combine::Prod)
}

/// Inclusive prefix sums (products) as a Hillis-Steele scan: after the step of distance `d`,
/// element `i` combines the `2d` elements ending at `i`, so ceil(log2 n) shifted steps cover the
/// axis. An element shifted in from outside the axis is the identity (a pad, never a product
/// with 0, so NaN and infinities stay where they are).
fn scan(cx: &mut Cx, combine: Combine) -> Res<Vec<Value>> {
    let exclusive = cx.attrs.int("exclusive", 0)? != 0;
    let reverse = cx.attrs.int("reverse", 0)? != 0;
    let a = match cx.ints(1)?[..] {
        [a] => a,
        _ => return Err(invalid("axis must be a scalar")),
    };
    let x = cx.tensor(0)?;
    if !x.dtype().is_numeric() {
        return Err(unsupported(format!("{} of {}", cx.op(), x.dtype())));
    }
    let rank = x.rank();
    let a = axis(a, rank)?;
    let work = cast_to(&x, compute_dtype(x.dtype()))?;
    let Some(n) = x.shape().dims()[a].as_static() else {
        let y = masked_prefix_scan(&work, a, exclusive, reverse, combine)?;
        return Ok(vec![cast_to(&y, x.dtype())?.into()]);
    };
    let b = cx.b();
    let fill = combine.identity();
    // `t` moved `d` places along the scan's direction, the identity shifted in.
    let shift = |t: &Tensor, d: u64| -> Res<Tensor> {
        if d >= n {
            let pad = b.scalar(t.dtype(), fill)?;
            return Ok(pad.broadcast_to(&t.shape())?);
        }
        let mut pads = vec![(0, 0); rank];
        Ok(if reverse {
            pads[a] = (0, d);
            t.slice_axis(a, d, n)?.pad(&pads, fill)?
        } else {
            pads[a] = (d, 0);
            t.slice_axis(a, 0, n - d)?.pad(&pads, fill)?
        })
    };
    let mut y = if exclusive { shift(&work, 1)? } else { work };
    let mut d = 1;
    while d < n {
        y = combine.apply(&y, &shift(&y, d)?)?;
        d *= 2;
    }
    Ok(vec![cast_to(&y, x.dtype())?.into()])
}

/// Prefix sums (products) along an axis of symbolic length, where the number of scan steps is
/// not known at import: `y[j]` combines the `x[i]` where `i <= j` (`<` when `exclusive`, `>=`
/// or `>` when `reverse`), as a selection from `x` spread over a new axis `j` and a reduction
/// over `i`, innermost, so that fusion makes it one row reduction that never stores the square.
/// Unselected elements are the identity by selection, never by a product, so NaN and infinities
/// stay where they are.
fn masked_prefix_scan(
    x: &Tensor,
    a: usize,
    exclusive: bool,
    reverse: bool,
    combine: Combine,
) -> Res<Tensor> {
    let rank = x.rank();
    let last = rank - 1;
    // The scanned axis moved last, and back at the end.
    let mut perm: Vec<usize> = (0..rank).filter(|&d| d != a).collect();
    perm.push(a);
    let moved = if a == last {
        x.clone()
    } else {
        x.permute(&perm)?
    };
    let len = x.shape().dims()[a].clone();
    let b = x.builder();
    let along = |at: usize| -> Res<Tensor> {
        let mut dims = vec![Dim::Static(1); rank + 1];
        dims[at] = len.clone();
        let shape = Shape::new(dims).map_err(|e| unsupported(e.to_string()))?;
        Ok(b.iota(len.clone())?.reshape_to(&shape)?)
    };
    // Dims [.., j, i].
    let (j, i) = (along(last)?, along(rank)?);
    let keep = match (exclusive, reverse) {
        (false, false) => i.le(&j)?,
        (true, false) => i.lt(&j)?,
        (false, true) => i.ge(&j)?,
        (true, true) => i.gt(&j)?,
    };
    let fill = b.scalar(x.dtype(), combine.identity())?;
    let sums = combine.reduce(&keep.select(&moved.unsqueeze(&[last])?, &fill)?, rank)?;
    if a == last {
        return Ok(sums);
    }
    let mut back = vec![0; rank];
    for (to, &from) in perm.iter().enumerate() {
        back[from] = to;
    }
    Ok(sums.permute(&back)?)
}

pub(super) fn round(cx: &mut Cx) -> Res<Vec<Value>> {
    Ok(vec![round_half_even(&cx.tensor(0)?)?.into()])
}

/// `x` rounded to the nearest integer, ties to even (ONNX's `Round`, NumPy's `rint`), in its
/// float dtype. Round half to even on the magnitude: `f = floor(|x|)` and `r = |x| - f` are
/// exact, so the choice between `f` and `f + 1` (`r > 1/2`, or `r = 1/2` and `f` odd) is exact
/// too; the sign is put back with a negation. Integral values (±0 included), magnitudes from the
/// dtype's first all-integer binade on, infinities and NaN are passed through as they are.
pub(super) fn round_half_even(x: &Tensor) -> Res<Tensor> {
    let dtype = x.dtype();
    // From 2^(mantissa bits) on every value of the dtype is an integer.
    let integral_from = match dtype {
        DType::F16 => 1024.0,
        DType::BF16 => 128.0,
        DType::F32 => 8_388_608.0,
        DType::F64 => 4_503_599_627_370_496.0,
        other => return Err(unsupported(format!("Round of {other}"))),
    };
    let b = x.builder();
    let scalar = |v: f64| b.scalar(dtype, v);
    let (zero, half) = (scalar(0.0)?, scalar(0.5)?);
    let mag = x.abs()?;
    let f = mag.floor()?;
    let r = mag.sub(&f)?;
    let h = f.mul(&half)?;
    let odd = h.floor()?.ne(&h)?;
    let up = r.gt(&half)?.or(&r.eq(&half)?.and(&odd)?)?;
    let m = up.select(&f.add_scalar(1.0)?, &f)?;
    let signed = x.lt(&zero)?.select(&m.neg()?, &m)?;
    let fractional = mag.lt(&scalar(integral_from)?)?.and(&r.ne(&zero)?)?;
    Ok(fractional.select(&signed, x)?)
}

/// A subscript: a letter, or dim `i` of the broadcast ellipsis dims (numbered from the first of
/// the widest ellipsis). Ellipsis dims order before letters, letters by ASCII (numpy's order for
/// an implicit output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Label {
    Ellipsis(usize),
    Letter(u8),
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Label::Ellipsis(i) => write!(f, "`...` dim {i}"),
            Label::Letter(c) => write!(f, "`{}`", *c as char),
        }
    }
}

/// One term of the equation: its letters, and where its `...` stands among them.
struct Term {
    letters: Vec<u8>,
    ellipsis: Option<usize>,
}

fn parse_term(s: &str) -> Result<Term, String> {
    let bytes = s.as_bytes();
    let mut term = Term {
        letters: Vec::new(),
        ellipsis: None,
    };
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            c if c.is_ascii_alphabetic() => term.letters.push(c),
            c if c.is_ascii_whitespace() => {}
            b'.' if bytes[i..].starts_with(b"...") => {
                if term.ellipsis.is_some() {
                    return Err(format!("`{s}` has two ellipses"));
                }
                term.ellipsis = Some(term.letters.len());
                i += 2;
            }
            _ => return Err(format!("`{s}` is not a term of letters and one `...`")),
        }
        i += 1;
    }
    Ok(term)
}

/// A tensor with one label per axis.
struct Labeled {
    t: Tensor,
    labels: Vec<Label>,
}

impl Labeled {
    /// The tensor with its axes in `order` (a permutation of its labels).
    fn arranged(&self, order: &[Label]) -> Res<Tensor> {
        let perm: Vec<usize> = order
            .iter()
            .map(|l| self.labels.iter().position(|m| m == l).expect("a label"))
            .collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            Ok(self.t.clone())
        } else {
            Ok(self.t.permute(&perm)?)
        }
    }

    /// Summed over the labels `needed` rejects.
    fn keeping(self, needed: impl Fn(Label) -> bool) -> Res<Labeled> {
        let axes: Vec<usize> = (0..self.labels.len())
            .filter(|&i| !needed(self.labels[i]))
            .collect();
        if axes.is_empty() {
            return Ok(self);
        }
        let labels = self.labels.into_iter().filter(|&l| needed(l)).collect();
        Ok(Labeled {
            t: self.t.sum(&axes, false)?,
            labels,
        })
    }

    fn dims(&self, of: &[Label]) -> Vec<Dim> {
        let dims = self.t.shape().into_dims();
        of.iter()
            .map(|l| dims[self.labels.iter().position(|m| m == l).expect("a label")].clone())
            .collect()
    }
}

/// The size of several axes merged into one, if one dim can say it.
fn merged(dims: &[Dim]) -> Option<Dim> {
    if let Some(sizes) = dims
        .iter()
        .map(Dim::as_static)
        .collect::<Option<Vec<u64>>>()
    {
        return sizes
            .iter()
            .try_fold(1u64, |p, &s| p.checked_mul(s))
            .map(Dim::Static);
    }
    let mut rest = dims.iter().filter(|d| **d != Dim::Static(1));
    match (rest.next(), rest.next()) {
        (Some(d), None) => Some(d.clone()),
        _ => None,
    }
}

fn shape(dims: Vec<Dim>, eq: &str) -> Res<Shape> {
    Shape::new(dims).map_err(|e| unsupported(format!("Einsum `{eq}`: {e}")))
}

/// Parses the equation and contracts the operands left to right, two at a time; each product is
/// one batched matmul over the labels both operands share and no later one needs.
pub(super) fn einsum(cx: &mut Cx) -> Res<Vec<Value>> {
    let eq = cx.attrs.string("equation", "")?;
    let bad = |why: String| invalid(format!("Einsum `{eq}`: {why}"));
    if eq.trim().is_empty() {
        return Err(invalid("Einsum without an equation"));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(parse_term(r).map_err(bad)?)),
        None => (eq.as_str(), None),
    };
    let terms = lhs
        .split(',')
        .map(parse_term)
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    let n = cx.num_inputs();
    if terms.len() != n {
        return Err(bad(format!("{} terms for {n} inputs", terms.len())));
    }
    let mut inputs = Vec::with_capacity(n);
    for i in 0..n {
        inputs.push(cx.tensor(i)?);
    }
    let dtype = inputs[0].dtype();
    if let Some(t) = inputs.iter().find(|t| t.dtype() != dtype) {
        return Err(bad(format!("operands of {dtype} and {}", t.dtype())));
    }
    if !dtype.is_numeric() {
        return Err(unsupported(format!("Einsum of {dtype}")));
    }

    // Each operand's labels, its `...` standing for the trailing dims of the broadcast ones.
    let mut ellipsis_ranks = Vec::with_capacity(n);
    for (k, (term, t)) in terms.iter().zip(&inputs).enumerate() {
        let (rank, letters) = (t.rank(), term.letters.len());
        match term.ellipsis {
            Some(_) if rank >= letters => ellipsis_ranks.push(rank - letters),
            None if rank == letters => ellipsis_ranks.push(0),
            _ => {
                return Err(bad(format!(
                    "operand {k} of rank {rank} has {letters} subscripts"
                )))
            }
        }
    }
    let widest = ellipsis_ranks.iter().copied().max().unwrap_or(0);
    let expand = |term: &Term, e: usize| -> Vec<Label> {
        let mut labels: Vec<Label> = term.letters.iter().map(|&c| Label::Letter(c)).collect();
        if let Some(at) = term.ellipsis {
            let dims = (widest - e..widest).map(Label::Ellipsis);
            labels.splice(at..at, dims);
        }
        labels
    };
    let mut operands: Vec<Labeled> = terms
        .iter()
        .zip(&ellipsis_ranks)
        .zip(&inputs)
        .map(|((term, &e), t)| {
            Ok(Labeled {
                t: cast_to(t, compute_dtype(t.dtype()))?,
                labels: expand(term, e),
            })
        })
        .collect::<Res<_>>()?;

    let output: Vec<Label> = match &rhs {
        Some(term) => {
            if term.ellipsis.is_none() && widest > 0 {
                return Err(bad("the output has no `...` for the broadcast dims".into()));
            }
            let out = expand(term, widest);
            for (i, l) in out.iter().enumerate() {
                if out[..i].contains(l) {
                    return Err(bad(format!("output subscript {l} is repeated")));
                }
                if !operands.iter().any(|o| o.labels.contains(l)) {
                    return Err(bad(format!("output subscript {l} is in no operand")));
                }
            }
            out
        }
        None => {
            let mut counts = BTreeMap::new();
            for &c in terms.iter().flat_map(|t| &t.letters) {
                *counts.entry(c).or_insert(0) += 1;
            }
            let once = counts.into_iter().filter(|&(_, k)| k == 1);
            (0..widest)
                .map(Label::Ellipsis)
                .chain(once.map(|(c, _)| Label::Letter(c)))
                .collect()
        }
    };

    // Repeated labels within an operand: its diagonal.
    for (k, o) in operands.iter_mut().enumerate() {
        while let Some((p, q)) = repeated(&o.labels) {
            let dims = o.t.shape().into_dims();
            let size = match (&dims[p], &dims[q]) {
                (Dim::Static(a), Dim::Static(b)) if a == b => *a,
                (Dim::Static(a), Dim::Static(b)) => {
                    return Err(bad(format!(
                        "operand {k} repeats {} over dims of {a} and {b}",
                        o.labels[p]
                    )))
                }
                _ => {
                    return Err(unsupported(format!(
                        "Einsum `{eq}`: the diagonal of a symbolic dim"
                    )))
                }
            };
            let rest: Vec<usize> = (0..dims.len()).filter(|&i| i != p && i != q).collect();
            let mut perm = rest.clone();
            perm.extend([p, q]);
            let mut flat: Vec<Dim> = rest.iter().map(|&i| dims[i].clone()).collect();
            flat.push(Dim::Static(size * size));
            let t = o.t.permute(&perm)?.reshape_to(&shape(flat, &eq)?)?;
            let mut ranges = vec![SliceRange::FULL; rest.len() + 1];
            ranges[rest.len()] = SliceRange::new(0, size * size, size + 1);
            let mut labels: Vec<Label> = rest.iter().map(|&i| o.labels[i]).collect();
            labels.push(o.labels[p]);
            *o = Labeled {
                t: t.slice(&ranges)?,
                labels,
            };
        }
    }

    // Each label's size: equal wherever it appears, or 1 where it broadcasts.
    let mut sizes: BTreeMap<Label, Dim> = BTreeMap::new();
    for o in &operands {
        for (l, d) in o.labels.iter().zip(o.t.shape().into_dims()) {
            let size = sizes.entry(*l).or_insert_with(|| d.clone());
            if *size == Dim::Static(1) {
                *size = d;
            } else if d != *size && d != Dim::Static(1) {
                let why = format!("subscript {l} has sizes {size} and {d}");
                return Err(match (size.as_static(), d.as_static()) {
                    (Some(_), Some(_)) => bad(why),
                    _ => unsupported(format!("Einsum `{eq}`: {why}")),
                });
            }
        }
    }
    for o in &mut operands {
        let want: Vec<Dim> = o.labels.iter().map(|l| sizes[l].clone()).collect();
        if o.t.shape().dims() != want.as_slice() {
            o.t = o.t.broadcast_to(&shape(want, &eq)?)?;
        }
    }

    // What each product must keep: the output's labels and those of the operands after it.
    let keeps: Vec<HashSet<Label>> = (1..operands.len())
        .map(|i| {
            let later = operands[i + 1..].iter().flat_map(|o| &o.labels);
            output.iter().chain(later).copied().collect()
        })
        .collect();
    let mut rest = operands.into_iter();
    let mut acc = rest.next().ok_or_else(|| bad("no operands".into()))?;
    for (b, keep) in rest.zip(&keeps) {
        acc = contract(acc, b, keep, &eq)?;
    }
    let acc = acc.keeping(|l| output.contains(&l))?;
    let y = acc.arranged(&output)?;
    Ok(vec![cast_to(&y, dtype)?.into()])
}

/// The first two positions holding one label, if any.
fn repeated(labels: &[Label]) -> Option<(usize, usize)> {
    (0..labels.len()).find_map(|q| {
        labels[..q]
            .iter()
            .position(|l| *l == labels[q])
            .map(|p| (p, q))
    })
}

/// `a` times `b`, summed over the labels they share that `keep` lacks; labels only one of them
/// has and `keep` lacks are summed out first. Result labels: the shared kept ones, then `a`'s
/// own, then `b`'s own.
fn contract(a: Labeled, b: Labeled, keep: &HashSet<Label>, eq: &str) -> Res<Labeled> {
    let a = a.keeping(|l| keep.contains(&l) || b.labels.contains(&l))?;
    let b = b.keeping(|l| keep.contains(&l) || a.labels.contains(&l))?;
    let shared = |l: &&Label| b.labels.contains(l);
    let batch: Vec<Label> = a
        .labels
        .iter()
        .filter(shared)
        .filter(|l| keep.contains(l))
        .copied()
        .collect();
    let summed: Vec<Label> = a
        .labels
        .iter()
        .filter(shared)
        .filter(|l| !keep.contains(l))
        .copied()
        .collect();
    let only_in = |x: &[Label], other: &[Label]| -> Vec<Label> {
        x.iter().filter(|l| !other.contains(l)).copied().collect()
    };
    let (own_a, own_b) = (only_in(&a.labels, &b.labels), only_in(&b.labels, &a.labels));
    let (nb, na, nn, nk) = (batch.len(), own_a.len(), own_b.len(), summed.len());
    let labels: Vec<Label> = [&batch[..], &own_a, &own_b].concat();
    let order = |parts: &[&[Label]]| parts.concat();
    let unsqueezed = |t: Tensor, at: usize, count: usize| -> Res<Tensor> {
        if count == 0 {
            return Ok(t);
        }
        let axes: Vec<usize> = (at..at + count).collect();
        Ok(t.unsqueeze(&axes)?)
    };

    // One batched matmul: [batch, M, K] @ [batch, K, N], each group of axes merged into one.
    let groups = (
        merged(&a.dims(&own_a)),
        merged(&a.dims(&summed)),
        merged(&b.dims(&own_b)),
    );
    if let (false, (Some(m), Some(k), Some(n))) = (summed.is_empty(), groups) {
        if nb + 2 <= MAX_RANK {
            let batch_dims = a.dims(&batch);
            let with = |x: Dim, y: Dim| -> Res<Shape> {
                let mut d = batch_dims.clone();
                d.extend([x, y]);
                shape(d, eq)
            };
            let ta = a
                .arranged(&order(&[&batch, &own_a, &summed]))?
                .reshape_to(&with(m, k.clone())?)?;
            let tb = b
                .arranged(&order(&[&batch, &summed, &own_b]))?
                .reshape_to(&with(k, n)?)?;
            let mut dims = batch_dims;
            dims.extend(a.dims(&own_a));
            dims.extend(b.dims(&own_b));
            let t = ta.matmul(&tb)?.reshape_to(&shape(dims, eq)?)?;
            return Ok(Labeled { t, labels });
        }
    }

    // Otherwise a broadcast product [batch, A, B, K], summed over K.
    if nb + na + nn + nk > MAX_RANK {
        return Err(unsupported(format!(
            "Einsum `{eq}`: a product of rank {} (at most {MAX_RANK})",
            nb + na + nn + nk
        )));
    }
    let ta = unsqueezed(a.arranged(&order(&[&batch, &own_a, &summed]))?, nb + na, nn)?;
    let tb = unsqueezed(b.arranged(&order(&[&batch, &own_b, &summed]))?, nb, na)?;
    let mut t = ta.mul(&tb)?;
    if nk > 0 {
        let axes: Vec<usize> = (nb + na + nn..nb + na + nn + nk).collect();
        t = t.sum(&axes, false)?;
    }
    Ok(Labeled { t, labels })
}
