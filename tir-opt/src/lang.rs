//! The e-graph language of the simplifier and its analysis.
//!
//! An e-node is a graph op applied to e-classes ([`TirNode::Op`]) or a source with its declared
//! type ([`TirNode::Leaf`]: inputs, parameters, states, constants). Every e-class has one
//! [`TensorType`] (rewrites preserve types; [`crate::saturate`] checks each replacement before it
//! is added), and, when its value is known at compile time and small, that value: the analysis
//! folds constants by evaluating the op with the f64 oracle ([`tir_graph::eval::eval_op`]) and
//! adds the folded constant as a leaf of the class. An `i64` value of 2^53 or more in magnitude
//! is never folded nor folded from: past 2^53 an `f64` does not hold every integer, so the
//! oracle's value may be rounded where the backends compute exactly.

use egg::{Analysis, DidMerge, EGraph, Id, Language};
use std::collections::BTreeMap;
use tir_graph::eval::{eval_op, F64Tensor};
use tir_graph::infer::infer;
use tir_graph::op::ConstData;
use tir_graph::{DType, Op, TensorType};

/// The most elements a folded constant may have; larger values stay computed at run time.
pub const FOLD_LIMIT: u64 = 4096;

/// One e-node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TirNode {
    /// A source (input, parameter, state or constant) with its type.
    Leaf { op: Op, ty: TensorType },
    /// A computed op; its type is inferred from its children's.
    Op { op: Op, children: Vec<Id> },
}

impl TirNode {
    pub fn op(&self) -> &Op {
        match self {
            TirNode::Leaf { op, .. } | TirNode::Op { op, .. } => op,
        }
    }
}

impl Language for TirNode {
    type Discriminant = Op;

    fn discriminant(&self) -> Op {
        self.op().clone()
    }

    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (TirNode::Leaf { .. }, TirNode::Leaf { .. }) => self == other,
            _ => self.op() == other.op() && self.len() == other.len(),
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            TirNode::Leaf { .. } => &[],
            TirNode::Op { children, .. } => children,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            TirNode::Leaf { .. } => &mut [],
            TirNode::Op { children, .. } => children,
        }
    }
}

/// What is known of an e-class: its type, and its value when folded.
#[derive(Clone, Debug)]
pub struct ClassData {
    pub ty: TensorType,
    pub constant: Option<F64Tensor>,
}

/// The simplifier's analysis: types and constant folding. Counts the folds it made.
#[derive(Default)]
pub struct TirAnalysis {
    pub folds: usize,
}

pub type TirEGraph = EGraph<TirNode, TirAnalysis>;

/// The type `op` gives when applied to these classes, if inference accepts it.
pub fn infer_in(egraph: &TirEGraph, op: &Op, children: &[Id]) -> Option<TensorType> {
    let types: Vec<&TensorType> = children.iter().map(|&c| &egraph[c].data.ty).collect();
    infer(op, &types).ok()
}

/// Whether the value of `op` may be computed at compile time: pure ops of constants.
fn foldable(op: &Op) -> bool {
    !op.is_source() && !op.is_state_update()
}

fn fold(egraph: &TirEGraph, op: &Op, children: &[Id], ty: &TensorType) -> Option<F64Tensor> {
    if !foldable(op) || ty.shape.static_numel()? > FOLD_LIMIT {
        return None;
    }
    let operands: Option<Vec<&F64Tensor>> = children
        .iter()
        .map(|&c| egraph[c].data.constant.as_ref())
        .collect();
    eval_op(op, &operands?, ty, &BTreeMap::new())
        .ok()
        .filter(exact)
}

/// Whether the oracle's `f64` values of `t` are exact: all but `i64` values of 2^53 or more in
/// magnitude (the oracle's integer arithmetic wraps in `i64`, so a result below 2^53 is exact).
fn exact(t: &F64Tensor) -> bool {
    const FIRST_INEXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    t.dtype != DType::I64 || t.data.iter().all(|v| v.abs() < FIRST_INEXACT)
}

/// The value of a constant leaf.
pub fn constant_value(data: &ConstData, ty: &TensorType) -> Option<F64Tensor> {
    let dims = ty.shape.static_dims()?;
    let values = (0..data.len())
        .map(|i| data.get_f64(i))
        .collect::<Option<Vec<f64>>>()?;
    F64Tensor::new(ty.dtype, dims, values).ok().filter(exact)
}

impl Analysis<TirNode> for TirAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut TirEGraph, enode: &TirNode, _id: Id) -> ClassData {
        match enode {
            TirNode::Leaf { op, ty } => ClassData {
                ty: ty.clone(),
                constant: match op {
                    Op::Constant { data } => constant_value(data, ty),
                    _ => None,
                },
            },
            TirNode::Op { op, children } => {
                // Replacements are type-checked before they are added (see `saturate`), and the
                // initial e-graph comes from a verified graph, so inference cannot fail here.
                let ty = infer_in(egraph, op, children)
                    .unwrap_or_else(|| panic!("tir-opt: an ill-typed {op} reached the e-graph"));
                let constant = fold(egraph, op, children, &ty);
                ClassData { ty, constant }
            }
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        debug_assert_eq!(a.ty, b.ty, "merged classes of different types");
        match (&a.constant, b.constant) {
            (None, Some(c)) => {
                a.constant = Some(c);
                DidMerge(true, false)
            }
            (Some(_), None) => DidMerge(false, true),
            _ => DidMerge(false, false),
        }
    }

    fn modify(egraph: &mut TirEGraph, id: Id) {
        let Some(value) = egraph[id].data.constant.clone() else {
            return;
        };
        let has_leaf = egraph[id]
            .nodes
            .iter()
            .any(|n| matches!(n, TirNode::Leaf { .. }));
        if has_leaf {
            return;
        }
        let ty = egraph[id].data.ty.clone();
        let data = ConstData::from_f64(ty.dtype, &value.data);
        let leaf = egraph.add(TirNode::Leaf {
            op: Op::Constant { data },
            ty,
        });
        egraph.union(id, leaf);
        egraph.analysis.folds += 1;
    }
}
