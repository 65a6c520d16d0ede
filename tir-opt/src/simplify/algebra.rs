//! Algebraic identities and cast chains. Each rule keeps every value bit-for-bit on every input
//! (NaN, infinities, signed zeros and integer wrap included), except where its `why` says
//! otherwise; rules that would not (`x * 0 -> 0`, float `x - x -> 0`) are deliberately absent.

use super::{binary, class_const, is_all, node_type, same_type, unary_child};
use crate::lang::{TirEGraph, TirNode};
use crate::saturate::{Rhs, Rule};
use egg::Id;
use tir_graph::op::ConstData;
use tir_graph::{BinaryOp, DType, Op, TensorType, UnaryOp};

pub fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "mul-one",
            why: "x * 1 is x for every x, NaN and -0.0 included",
            rewrite: mul_one,
        },
        Rule {
            name: "div-one",
            why: "x / 1 is x for every x",
            rewrite: div_one,
        },
        Rule {
            name: "add-zero",
            why: "x + 0 is x for integers; for floats only x + (-0.0) is (-0.0 + 0.0 = +0.0)",
            rewrite: add_zero,
        },
        Rule {
            name: "sub-zero",
            why: "x - 0 is x for integers; for floats only x - (+0.0) is",
            rewrite: sub_zero,
        },
        Rule {
            name: "sub-self",
            why: "x - x is 0 for integers (wrapping); not for floats, where inf - inf is NaN",
            rewrite: sub_self,
        },
        Rule {
            name: "neg-neg",
            why: "negation is an involution, for floats (sign bit) and wrapping integers",
            rewrite: |eg, n| involution(eg, n, UnaryOp::Neg),
        },
        Rule {
            name: "not-not",
            why: "logical not is an involution",
            rewrite: |eg, n| involution(eg, n, UnaryOp::Not),
        },
        Rule {
            name: "select-constant",
            why: "select with an all-true (all-false) condition is its first (second) branch",
            rewrite: select_constant,
        },
        Rule {
            name: "cast-same",
            why: "a cast to the operand's own dtype changes nothing",
            rewrite: cast_same,
        },
        Rule {
            name: "cast-chain",
            why: "cast(cast(x, t1), t2) = cast(x, t2) when every value of x's dtype is exact in t1",
            rewrite: cast_chain,
        },
    ]
}

/// `x op c -> x` when `c` is all `value` and the result has x's type (no broadcast widening).
fn right_identity(
    eg: &TirEGraph,
    node: &TirNode,
    op: BinaryOp,
    ok: impl Fn(f64) -> bool,
) -> Option<Rhs> {
    let [x, c] = binary(node, op)?;
    let value = class_const(eg, c)?;
    (is_all(value, &ok) && same_type(eg, node, x)).then_some(Rhs::Class(x))
}

fn mul_one(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let one = |v: f64| v == 1.0;
    right_identity(eg, node, BinaryOp::Mul, one).or_else(|| {
        let [c, x] = binary(node, BinaryOp::Mul)?;
        (is_all(class_const(eg, c)?, one) && same_type(eg, node, x)).then_some(Rhs::Class(x))
    })
}

fn div_one(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    right_identity(eg, node, BinaryOp::Div, |v| v == 1.0)
}

/// The zero that is an identity of `+` for `dtype` (`-0.0` for floats).
fn additive_identity(dtype: DType, v: f64) -> bool {
    if dtype.is_float() {
        v == 0.0 && v.is_sign_negative()
    } else {
        v == 0.0
    }
}

fn add_zero(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let dtype = node_type(eg, node)?.dtype;
    let zero = |v: f64| additive_identity(dtype, v);
    right_identity(eg, node, BinaryOp::Add, zero).or_else(|| {
        let [c, x] = binary(node, BinaryOp::Add)?;
        (is_all(class_const(eg, c)?, zero) && same_type(eg, node, x)).then_some(Rhs::Class(x))
    })
}

fn sub_zero(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    // x - (+0.0) = x + (-0.0) = x for every float x.
    right_identity(eg, node, BinaryOp::Sub, |v| {
        v == 0.0 && v.is_sign_positive()
    })
}

fn sub_self(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let [a, b] = binary(node, BinaryOp::Sub)?;
    let ty = node_type(eg, node)?;
    if eg.find(a) != eg.find(b) || !ty.dtype.is_int() {
        return None;
    }
    let zero = Rhs::Leaf(
        Op::Constant {
            data: ConstData::Int(vec![0]),
        },
        TensorType::new(ty.dtype, tir_graph::Shape::scalar()),
    );
    let dims = ty.shape.dims().to_vec();
    Some(Rhs::Node(Op::BroadcastTo { dims }, vec![zero]))
}

fn involution(eg: &TirEGraph, node: &TirNode, op: UnaryOp) -> Option<Rhs> {
    let is_op = |o: &Op| *o == Op::Unary(op);
    let inner = unary_child(node, is_op)?;
    eg[inner]
        .nodes
        .iter()
        .find_map(|n| Some(Rhs::Class(unary_child(n, is_op)?)))
}

fn select_constant(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let TirNode::Op {
        op: Op::Select,
        children,
    } = node
    else {
        return None;
    };
    let cond = class_const(eg, children[0])?;
    let branch = if is_all(cond, |v| v != 0.0) {
        children[1]
    } else if is_all(cond, |v| v == 0.0) {
        children[2]
    } else {
        return None;
    };
    let ty = node_type(eg, node)?;
    if eg[branch].data.ty == ty {
        return Some(Rhs::Class(branch));
    }
    let dims = ty.shape.dims().to_vec();
    Some(Rhs::Node(
        Op::BroadcastTo { dims },
        vec![Rhs::Class(branch)],
    ))
}

/// The target dtype and operand of a cast.
fn cast_of(node: &TirNode) -> Option<(DType, Id)> {
    match node {
        TirNode::Op {
            op: Op::Cast { to },
            children,
        } => Some((*to, children[0])),
        _ => None,
    }
}

fn cast_same(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let (to, x) = cast_of(node)?;
    (eg[x].data.ty.dtype == to).then_some(Rhs::Class(x))
}

fn cast_chain(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let (to, inner) = cast_of(node)?;
    let via = eg[inner].data.ty.dtype;
    eg[inner].nodes.iter().find_map(|n| {
        let (_, x) = cast_of(n)?;
        let from = eg[x].data.ty.dtype;
        lossless(from, via).then(|| Rhs::Node(Op::Cast { to }, vec![Rhs::Class(x)]))
    })
}

/// Whether every value of `from` is exactly a value of `to`, so a cast through `to` is the
/// identity on values.
pub fn lossless(from: DType, to: DType) -> bool {
    use DType::*;
    if from == to || from == Bool {
        return true;
    }
    match from {
        I8 => matches!(to, I16 | I32 | I64 | F16 | BF16 | F32 | F64),
        U8 => matches!(
            to,
            I16 | U16 | I32 | U32 | I64 | U64 | F16 | BF16 | F32 | F64
        ),
        I16 => matches!(to, I32 | I64 | F32 | F64),
        U16 => matches!(to, I32 | U32 | I64 | U64 | F32 | F64),
        I32 => matches!(to, I64 | F64),
        U32 => matches!(to, I64 | U64 | F64),
        F16 | BF16 => matches!(to, F32 | F64),
        F32 => to == F64,
        _ => false,
    }
}
