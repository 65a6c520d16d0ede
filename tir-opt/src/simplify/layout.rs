//! Layout chains: reshapes, permutes, broadcasts and slices collapsed or cancelled. Every rule
//! composes index maps exactly, so values never change. A reshape never cancels across a permute
//! (that would be a real change of layout): only directly nested ops of one family combine.

use super::{node_type, unary_child};
use crate::lang::{TirEGraph, TirNode};
use crate::saturate::{Rhs, Rule};
use egg::Id;
use tir_graph::{Op, ReshapeDim, SliceRange};

pub fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "reshape-noop",
            why: "a reshape, squeeze or unsqueeze to the operand's own shape is the identity",
            rewrite: reshape_noop,
        },
        Rule {
            name: "reshape-chain",
            why: "row-major reshapes compose: reshape(reshape(x, s1), s2) = reshape(x, s2)",
            rewrite: reshape_chain,
        },
        Rule {
            name: "permute-identity",
            why: "permute by the identity permutation is the identity",
            rewrite: permute_identity,
        },
        Rule {
            name: "permute-chain",
            why: "permute(permute(x, p), q) = permute(x, p∘q): result dim i is x dim p[q[i]]",
            rewrite: permute_chain,
        },
        Rule {
            name: "broadcast-noop",
            why: "broadcast_to the operand's own shape is the identity",
            rewrite: |eg, n| noop_of(eg, n, |op| matches!(op, Op::BroadcastTo { .. })),
        },
        Rule {
            name: "broadcast-chain",
            why: "broadcast_to(broadcast_to(x, s1), s2) = broadcast_to(x, s2): both repeat x",
            rewrite: broadcast_chain,
        },
        Rule {
            name: "slice-full",
            why: "a slice that takes every element of every axis in order is the identity",
            rewrite: slice_full,
        },
    ]
}

/// Ops that only reinterpret the row-major element order: reshape and its special cases.
fn is_reshape_like(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
    )
}

/// `op(x) -> x` when `op` matches `family` and the result has x's type.
fn noop_of(eg: &TirEGraph, node: &TirNode, family: impl Fn(&Op) -> bool) -> Option<Rhs> {
    let x = unary_child(node, &family)?;
    (node_type(eg, node)? == eg[x].data.ty).then_some(Rhs::Class(x))
}

fn reshape_noop(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    noop_of(eg, node, is_reshape_like)
}

/// The reshape of `x` to the shape of `node`'s result.
fn reshape_to_result(eg: &TirEGraph, node: &TirNode, x: Id) -> Option<Rhs> {
    let dims = node_type(eg, node)?
        .shape
        .dims()
        .iter()
        .cloned()
        .map(ReshapeDim::Dim)
        .collect();
    Some(Rhs::Node(Op::Reshape { dims }, vec![Rhs::Class(x)]))
}

fn reshape_chain(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let inner = unary_child(node, is_reshape_like)?;
    eg[inner].nodes.iter().find_map(|n| {
        let x = unary_child(n, is_reshape_like)?;
        reshape_to_result(eg, node, x)
    })
}

fn permutation(node: &TirNode) -> Option<(&[usize], Id)> {
    match node {
        TirNode::Op {
            op: Op::Permute { perm },
            children,
        } => Some((perm, children[0])),
        _ => None,
    }
}

fn permute_identity(_eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let (perm, x) = permutation(node)?;
    perm.iter()
        .enumerate()
        .all(|(i, &p)| i == p)
        .then_some(Rhs::Class(x))
}

fn permute_chain(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let (outer, inner_class) = permutation(node)?;
    eg[inner_class].nodes.iter().find_map(|n| {
        let (inner, x) = permutation(n)?;
        let perm = outer
            .iter()
            .map(|&q| inner.get(q).copied())
            .collect::<Option<Vec<_>>>()?;
        Some(Rhs::Node(Op::Permute { perm }, vec![Rhs::Class(x)]))
    })
}

fn broadcast_chain(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let TirNode::Op {
        op: Op::BroadcastTo { dims },
        children,
    } = node
    else {
        return None;
    };
    eg[children[0]].nodes.iter().find_map(|n| {
        let x = unary_child(n, |op| matches!(op, Op::BroadcastTo { .. }))?;
        let op = Op::BroadcastTo { dims: dims.clone() };
        Some(Rhs::Node(op, vec![Rhs::Class(x)]))
    })
}

fn slice_full(eg: &TirEGraph, node: &TirNode) -> Option<Rhs> {
    let TirNode::Op {
        op: Op::Slice { ranges },
        children,
    } = node
    else {
        return None;
    };
    let x = children[0];
    let dims = eg[x].data.ty.shape.dims();
    let whole = |(r, d): (&SliceRange, &tir_graph::Dim)| {
        r.start == 0 && r.step == 1 && (r.stop.is_none() || r.stop.as_ref() == Some(d))
    };
    ranges.iter().zip(dims).all(whole).then_some(Rhs::Class(x))
}
