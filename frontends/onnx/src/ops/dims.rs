//! Arithmetic on shape values with symbolic entries: what exporters compute from `Shape` before
//! a `Reshape`, `Expand` or `ConstantOfShape` (`batch · seq`, `seq − 1`, `hidden / heads`, a
//! `Where(Equal(shape, -1), 1, shape)`), kept symbolic as [`DimExpr`]s instead of refused.
//!
//! Takes a node whose inputs are all known at import, at least one a shape vector with a
//! symbolic entry ([`Known::Dims`]), the others integer scalars or vectors (or, for `Where`,
//! a known bool condition). Guarantees: the result is what the op computes for every binding
//! of the symbols that keeps dims non-negative (integer `Div` truncates, which is floor division
//! there), or the node is left to the ordinary lowering, which refuses it with the reason.

use super::Res;
use crate::known::{Entry, Known};
use crate::proto::NodeProto;
use crate::state::{State, Value};
use crate::{invalid, unsupported};
use tir_graph::{DType, DimExpr, HostTensor};

/// The node's outputs when it is shape arithmetic on symbolic values, else `None`.
pub(crate) fn fold(st: &State, node: &NodeProto) -> Option<Res<Vec<Value>>> {
    let names: Vec<&String> = node.input.iter().filter(|n| !n.is_empty()).collect();
    let known: Vec<&Known> = names
        .iter()
        .map(|n| match st.value(n) {
            Some(Value::Known(k)) => Some(k),
            _ => None,
        })
        .collect::<Option<_>>()?;
    if !known.iter().any(|k| matches!(k, Known::Dims { .. })) {
        return None;
    }
    let entries = || -> Res<Vec<(Vec<Entry>, bool)>> {
        known
            .iter()
            .map(|k| {
                k.entries()
                    .ok_or_else(|| invalid("shape arithmetic on a non-integer value"))
            })
            .collect()
    };
    let op = node.op_type();
    let result = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Max" | "Min" | "Mod" => {
            if op == "Mod" && fmod(node) {
                return Some(Err(unsupported("Mod with fmod=1 of symbolic dims")));
            }
            entries().and_then(|xs| fold_binary(op, xs))
        }
        "Neg" => entries().and_then(|xs| {
            let (e, scalar) = &xs[0];
            let negated = e.iter().map(|x| arith(x.scale(-1))).collect::<Res<_>>()?;
            Ok(vec![Known::dims(negated, *scalar).into()])
        }),
        "Equal" => entries().and_then(|xs| equal(&xs)),
        // A shape vector reshaped to a vector or a scalar keeps its entries.
        "Reshape" if matches!(known[0], Known::Dims { .. }) => entries().and_then(|xs| {
            let (e, _) = &xs[0];
            let target = known[1].ints()?;
            let scalar = match target.as_slice() {
                [] if e.len() == 1 => true,
                [n] if *n == -1 || *n == e.len() as i64 => false,
                _ => {
                    return Err(unsupported(format!(
                        "Reshape of a shape vector to {target:?}"
                    )))
                }
            };
            Ok(vec![Known::dims(e.clone(), scalar).into()])
        }),
        "Where" => where_(&known),
        "Cast" | "CastLike" if casts_to_int(st, node) => known
            .first()
            .map(|k| Ok(vec![Value::Known((*k).clone())]))?,
        _ => return None,
    };
    Some(result)
}

fn arith(r: Result<DimExpr, tir_graph::DimError>) -> Res<DimExpr> {
    r.map_err(|e| invalid(e.to_string()))
}

/// Whether a Mod node takes C's remainder (`fmod = 1`).
fn fmod(node: &NodeProto) -> bool {
    node.attribute
        .iter()
        .any(|a| a.name() == "fmod" && a.i() != 0)
}

/// Whether a Cast (CastLike) node casts to an integer dtype (the entries stay as they are).
fn casts_to_int(st: &State, node: &NodeProto) -> bool {
    let to = match node.op_type() {
        "Cast" => node
            .attribute
            .iter()
            .find(|a| a.name() == "to")
            .and_then(|a| crate::model::dtype_of(a.i() as i32).ok()),
        _ => node
            .input
            .get(1)
            .and_then(|n| st.value(n))
            .map(Value::dtype),
    };
    matches!(to, Some(DType::I64 | DType::I32)) && node.attribute.iter().all(|a| a.name() == "to")
}

/// Pairs of entries under broadcasting of scalars and vectors of one element.
fn broadcast(a: &(Vec<Entry>, bool), b: &(Vec<Entry>, bool)) -> Res<Vec<(Entry, Entry)>> {
    let (n, m) = (a.0.len(), b.0.len());
    let len = match (n, m) {
        _ if n == m => n,
        (1, _) => m,
        (_, 1) => n,
        _ => return Err(invalid(format!("shape vectors of {n} and {m} entries"))),
    };
    Ok((0..len)
        .map(|i| (a.0[i.min(n - 1)].clone(), b.0[i.min(m - 1)].clone()))
        .collect())
}

fn fold_binary(op: &str, xs: Vec<(Vec<Entry>, bool)>) -> Res<Vec<Value>> {
    let mut acc = xs[0].clone();
    for x in &xs[1..] {
        let pairs = broadcast(&acc, x)?;
        let entries = pairs
            .iter()
            .map(|(a, b)| {
                arith(match op {
                    "Add" => a.add(b),
                    "Sub" => a.sub(b),
                    "Mul" => a.mul(b),
                    "Div" => a.floor_div(b),
                    "Mod" => a.rem(b),
                    "Max" => DimExpr::max(&[a.clone(), b.clone()]),
                    _ => DimExpr::min(&[a.clone(), b.clone()]),
                })
            })
            .collect::<Res<Vec<_>>>()?;
        acc = (entries, acc.1 && x.1);
    }
    Ok(vec![Known::dims(acc.0, acc.1).into()])
}

/// Equality of entries: decided where the two differ by a constant, refused elsewhere.
fn equal(xs: &[(Vec<Entry>, bool)]) -> Res<Vec<Value>> {
    let [a, b] = xs else {
        return Err(invalid("Equal takes two inputs"));
    };
    let flags = broadcast(a, b)?
        .iter()
        .map(|(x, y)| match arith(x.sub(y))?.as_constant() {
            Some(d) => Ok(d == 0),
            // A dim is never a negative constant (the `-1` of a `Where(Equal(shape, -1), ..)`).
            None if is_negative(x) && non_negative(y) || is_negative(y) && non_negative(x) => {
                Ok(false)
            }
            None => Err(unsupported(format!(
                "Equal of `{x}` and `{y}`, which differ by a binding"
            ))),
        })
        .collect::<Res<Vec<bool>>>()?;
    let dims = if a.1 && b.1 {
        vec![]
    } else {
        vec![flags.len() as u64]
    };
    let values = flags.iter().map(|&f| f64::from(u8::from(f))).collect();
    let t =
        tir_graph::F64Tensor::new(DType::Bool, dims, values).map_err(|e| invalid(e.to_string()))?;
    let t = HostTensor::from_f64(&t)?;
    Ok(vec![Known::data(t).into()])
}

fn is_negative(e: &Entry) -> bool {
    e.as_constant().is_some_and(|c| c < 0)
}

/// Whether `e` is non-negative for every binding of its symbols to sizes: a sum of terms with
/// non-negative coefficients over symbols and canonical divisions by constants (whose numerators
/// have such coefficients too).
fn non_negative(e: &Entry) -> bool {
    use tir_graph::dim::Atom;
    e.terms().iter().all(|(mono, k)| {
        *k >= 0
            && mono.iter().all(|a| match a {
                Atom::Sym(_) => true,
                Atom::FloorDiv(n, d) => non_negative(n) && d.as_constant().is_some_and(|c| c > 0),
                Atom::Min(args) | Atom::Max(args) => args.iter().all(non_negative),
            })
    })
}

/// `Where(cond, a, b)` with a known condition: each entry from `a` or `b`.
fn where_(known: &[&Known]) -> Res<Vec<Value>> {
    let [cond, a, b] = known else {
        return Err(invalid("Where takes three inputs"));
    };
    let Known::Data(c) = cond else {
        return Err(unsupported("Where on a symbolic condition"));
    };
    if c.dtype() != DType::Bool || c.dims().len() > 1 {
        return Err(invalid(format!("the condition is {}", c.type_name())));
    }
    let flags = (0..c.numel())
        .map(|i| DimExpr::constant(i64::from(c.element_f64(i).expect("in range") != 0.0)))
        .collect();
    let cond_entries = (flags, c.dims().is_empty());
    let (a, b) = (
        a.entries()
            .ok_or_else(|| invalid("Where of non-integer values"))?,
        b.entries()
            .ok_or_else(|| invalid("Where of non-integer values"))?,
    );
    let picks = broadcast(&cond_entries, &a)?;
    let ab = broadcast(&a, &b)?;
    if picks.is_empty() || ab.is_empty() {
        return Ok(vec![Known::dims(Vec::new(), false).into()]);
    }
    if picks.len() != ab.len() && picks.len() != 1 && ab.len() != 1 {
        return Err(invalid("Where's inputs do not broadcast"));
    }
    let len = picks.len().max(ab.len());
    let entries = (0..len)
        .map(|i| {
            let on = picks[i.min(picks.len() - 1)].0.as_constant() == Some(1);
            let (x, y) = &ab[i.min(ab.len() - 1)];
            if on {
                x.clone()
            } else {
                y.clone()
            }
        })
        .collect();
    Ok(vec![
        Known::dims(entries, cond_entries.1 && a.1 && b.1).into()
    ])
}
