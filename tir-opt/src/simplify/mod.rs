//! Simplification: a verified [`Graph`] in, an equivalent verified [`Graph`] out.
//!
//! The graph becomes an e-graph ([`crate::lang`]); the rules of [`algebra`] and [`layout`] and the
//! analysis's constant folding saturate it under [`Limits`]; extraction picks, for every e-class,
//! the e-node of least depth (ops on the longest path to a source, ties going to fewer operands),
//! which prefers `x` to `x * 1`,
//! a folded constant to its computation, and one reshape to a chain. Depth, unlike tree size,
//! stays exact on DAGs with heavy sharing (a residual stream used twice per layer would make tree
//! size grow as 2^layers). Common subexpressions merge for free in the e-graph.
//!
//! Guarantees: the result has the same inputs, parameters and states (in the same order, so the
//! run-time signature is unchanged), the same outputs and state updates with the same types, and
//! computes the same values up to the rounding of folded constants to their dtype. The result is
//! checked with [`Graph::verify`].

pub mod algebra;
pub mod layout;

use crate::lang::{TirAnalysis, TirEGraph, TirNode};
use crate::saturate::{saturate, Limits, Rule, SaturationStats};
use crate::OptError;
use egg::{CostFunction, Extractor, Id, Language};
use std::collections::HashMap;
use tir_graph::eval::F64Tensor;
use tir_graph::{Graph, NodeId, Op, TensorType};

/// Every simplification rule, by topic.
pub fn rules() -> Vec<Rule> {
    let mut rules = algebra::rules();
    rules.extend(layout::rules());
    rules
}

/// Simplifies `graph` under `limits`.
pub fn simplify(graph: &Graph, limits: &Limits) -> Result<(Graph, SaturationStats), OptError> {
    let (mut egraph, roots) = to_egraph(graph);
    let mut stats = saturate(&mut egraph, &rules(), limits);
    if egraph.analysis.folds > 0 {
        stats.fired.insert("fold-constant", egraph.analysis.folds);
    }
    let simplified = extract(graph, &egraph, &roots)?;
    Ok((simplified, stats))
}

/// The e-graph of `graph`, and the e-class of every node.
fn to_egraph(graph: &Graph) -> (TirEGraph, Vec<Id>) {
    let mut egraph = TirEGraph::new(TirAnalysis::default());
    let mut class = Vec::with_capacity(graph.len());
    for id in graph.node_ids() {
        let node = graph.node(id);
        let enode = if node.op.is_source() {
            TirNode::Leaf {
                op: node.op.clone(),
                ty: node.ty.clone(),
            }
        } else {
            let children = graph
                .operands(id)
                .iter()
                .map(|o| class[o.index()])
                .collect();
            TirNode::Op {
                op: node.op.clone(),
                children,
            }
        };
        class.push(egraph.add(enode));
    }
    (egraph, class)
}

/// Depth (ops on the longest path down to a source; sources 0), then, between nodes of equal
/// depth, fewer operands (`broadcast_to(0)` over `x - x`).
struct Depth;

impl CostFunction<TirNode> for Depth {
    type Cost = (u32, usize);
    fn cost<C: FnMut(Id) -> (u32, usize)>(
        &mut self,
        enode: &TirNode,
        mut costs: C,
    ) -> (u32, usize) {
        match enode {
            TirNode::Leaf { .. } => (0, 0),
            TirNode::Op { children, .. } => {
                let depth = enode.fold(0, |max, id| max.max(costs(id).0));
                (1 + depth, children.len())
            }
        }
    }
}

/// Rebuilds a graph from the best e-node of each class reachable from the original's results.
fn extract(original: &Graph, egraph: &TirEGraph, class: &[Id]) -> Result<Graph, OptError> {
    let extractor = Extractor::new(egraph, Depth);
    let mut out = Graph::new();
    let mut built: HashMap<Id, NodeId> = HashMap::new();
    // Every source first, in the original order: the run-time signature does not change.
    for id in original.node_ids() {
        let node = original.node(id);
        if node.op.source_name().is_some() {
            let new = out.add_node(node.op.clone(), &[], Some(node.ty.clone()))?;
            built.insert(egraph.find(class[id.index()]), new);
        }
    }
    let mut results = Vec::new();
    for id in original.node_ids() {
        if original.node(id).op.is_state_update() {
            results.push(build(
                &extractor,
                egraph,
                &mut out,
                &mut built,
                class[id.index()],
            )?);
        }
    }
    for (name, id) in original.outputs() {
        let new = build(&extractor, egraph, &mut out, &mut built, class[id.index()])?;
        out.add_output(name, new)?;
    }
    debug_assert!(results.iter().all(|r| out.node(*r).op.is_state_update()));
    out.verify()?;
    check_signature(original, &out)?;
    Ok(out)
}

/// Adds the best e-node of `root` and everything it needs, operands first (no recursion: the
/// graphs are deep).
fn build(
    extractor: &Extractor<Depth, TirNode, TirAnalysis>,
    egraph: &TirEGraph,
    out: &mut Graph,
    built: &mut HashMap<Id, NodeId>,
    root: Id,
) -> Result<NodeId, OptError> {
    let mut stack = vec![egraph.find(root)];
    while let Some(&class) = stack.last() {
        if built.contains_key(&class) {
            stack.pop();
            continue;
        }
        let node = extractor.find_best_node(class);
        let pending: Vec<Id> = node
            .children()
            .iter()
            .map(|&c| egraph.find(c))
            .filter(|c| !built.contains_key(c))
            .collect();
        if !pending.is_empty() {
            stack.extend(pending);
            continue;
        }
        let new = match node {
            TirNode::Leaf { op, ty } => out.add_node(op.clone(), &[], Some(ty.clone()))?,
            TirNode::Op { op, children } => {
                let operands: Vec<NodeId> =
                    children.iter().map(|c| built[&egraph.find(*c)]).collect();
                out.add_node(op.clone(), &operands, None)?
            }
        };
        built.insert(class, new);
        stack.pop();
    }
    Ok(built[&egraph.find(root)])
}

/// The simplified graph must keep the original's outputs (names, types) and state updates.
fn check_signature(original: &Graph, simplified: &Graph) -> Result<(), OptError> {
    for ((name, a), (_, b)) in original.outputs().iter().zip(simplified.outputs()) {
        if original.ty(*a) != simplified.ty(*b) {
            return Err(OptError::TypeChanged {
                what: format!("output `{name}`"),
                before: original.ty(*a).clone(),
                after: simplified.ty(*b).clone(),
            });
        }
    }
    let updates = |g: &Graph| g.state_updates().len();
    if updates(original) != updates(simplified) {
        return Err(OptError::StateUpdatesChanged);
    }
    Ok(())
}

// Helpers shared by the rule modules.

/// The children of `node` if it is the binary op `op`.
pub(crate) fn binary(node: &TirNode, op: tir_graph::BinaryOp) -> Option<[Id; 2]> {
    match node {
        TirNode::Op {
            op: Op::Binary(b),
            children,
        } if *b == op => Some([children[0], children[1]]),
        _ => None,
    }
}

/// The operand of `node` if it has one and its op is in `family`.
pub(crate) fn unary_child(node: &TirNode, family: impl Fn(&Op) -> bool) -> Option<Id> {
    match node {
        TirNode::Op { op, children } if children.len() == 1 && family(op) => Some(children[0]),
        _ => None,
    }
}

/// The folded value of a class, if known.
pub(crate) fn class_const(eg: &TirEGraph, id: Id) -> Option<&F64Tensor> {
    eg[id].data.constant.as_ref()
}

/// Whether every element satisfies `pred` (false for an empty tensor: nothing to rely on).
pub(crate) fn is_all(value: &F64Tensor, pred: impl Fn(f64) -> bool) -> bool {
    !value.data.is_empty() && value.data.iter().all(|&v| pred(v))
}

/// The type of `node`'s result.
pub(crate) fn node_type(eg: &TirEGraph, node: &TirNode) -> Option<TensorType> {
    match node {
        TirNode::Leaf { ty, .. } => Some(ty.clone()),
        TirNode::Op { op, children } => crate::lang::infer_in(eg, op, children),
    }
}

/// Whether `node`'s result has the type of class `x`.
pub(crate) fn same_type(eg: &TirEGraph, node: &TirNode, x: Id) -> bool {
    node_type(eg, node).as_ref() == Some(&eg[x].data.ty)
}
