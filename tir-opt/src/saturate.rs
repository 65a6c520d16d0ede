//! Equality saturation of the simplifier's e-graph under explicit bounds.
//!
//! A [`Rule`] is data: a name, why it holds, and a function that looks at one e-node and, when
//! the rule applies, returns the equivalent expression ([`Rhs`]). Each iteration searches every
//! e-node with every rule, then adds each replacement to the e-graph and unions it with the
//! matched class. A replacement is type-checked before it is added: one whose type differs from
//! the class's is dropped (a rule bug, caught in debug builds). The loop stops when an iteration
//! learns nothing (saturated) or a bound is hit; the e-graph is sound after any iteration, so a
//! bound only means fewer simplifications, never a wrong result.

use crate::lang::{infer_in, TirEGraph, TirNode};
use egg::Id;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tir_graph::{Op, TensorType};

/// The expression a rule rewrites to, over existing e-classes.
#[derive(Clone, Debug)]
pub enum Rhs {
    /// An existing e-class (e.g. `x` for `x * 1`).
    Class(Id),
    /// An op applied to sub-expressions.
    Node(Op, Vec<Rhs>),
    /// A new source, in practice a constant.
    Leaf(Op, TensorType),
}

/// A rewrite: `rewrite(egraph, node)` is `Some(rhs)` when `node` equals `rhs`.
pub struct Rule {
    pub name: &'static str,
    /// Why the rewrite preserves every value, NaN, infinities and integer wrap included.
    pub why: &'static str,
    pub rewrite: fn(&TirEGraph, &TirNode) -> Option<Rhs>,
}

/// Bounds on one saturation (or on the fusion search, which uses the same bounds).
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub max_nodes: usize,
    pub max_iterations: usize,
    pub max_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_nodes: 500_000,
            max_iterations: 32,
            max_time: Duration::from_secs(10),
        }
    }
}

/// Which bound stopped a search, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Nodes,
    Iterations,
    Time,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bound::Nodes => "node limit",
            Bound::Iterations => "iteration limit",
            Bound::Time => "time limit",
        })
    }
}

/// What one saturation did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SaturationStats {
    pub iterations: usize,
    pub enodes: usize,
    /// How many times each rule added a new equality.
    pub fired: BTreeMap<&'static str, usize>,
    pub bound_hit: Option<Bound>,
}

/// Runs `rules` on `egraph` until saturation or a bound.
pub fn saturate(egraph: &mut TirEGraph, rules: &[Rule], limits: &Limits) -> SaturationStats {
    let start = Instant::now();
    let mut stats = SaturationStats::default();
    egraph.rebuild();
    loop {
        if stats.iterations >= limits.max_iterations {
            stats.bound_hit = Some(Bound::Iterations);
            break;
        }
        stats.iterations += 1;
        let matches = search(egraph, rules);
        let mut changed = false;
        for (rule, class, rhs) in matches {
            let ty = egraph[class].data.ty.clone();
            if type_of(egraph, &rhs).as_ref() != Some(&ty) {
                debug_assert!(
                    false,
                    "rule {} gave an ill-typed replacement",
                    rules[rule].name
                );
                continue;
            }
            let new = add(egraph, &rhs);
            if egraph.union(class, new) {
                changed = true;
                *stats.fired.entry(rules[rule].name).or_insert(0) += 1;
            }
        }
        egraph.rebuild();
        if !changed {
            break;
        }
        if egraph.total_number_of_nodes() > limits.max_nodes {
            stats.bound_hit = Some(Bound::Nodes);
            break;
        }
        if start.elapsed() > limits.max_time {
            stats.bound_hit = Some(Bound::Time);
            break;
        }
    }
    stats.enodes = egraph.total_number_of_nodes();
    stats
}

fn search(egraph: &TirEGraph, rules: &[Rule]) -> Vec<(usize, Id, Rhs)> {
    let mut matches = Vec::new();
    for class in egraph.classes() {
        for node in &class.nodes {
            for (i, rule) in rules.iter().enumerate() {
                if let Some(rhs) = (rule.rewrite)(egraph, node) {
                    matches.push((i, class.id, rhs));
                }
            }
        }
    }
    matches
}

/// The type of `rhs`, or `None` if some op of it does not type-check.
pub fn type_of(egraph: &TirEGraph, rhs: &Rhs) -> Option<TensorType> {
    match rhs {
        Rhs::Class(id) => Some(egraph[*id].data.ty.clone()),
        Rhs::Leaf(_, ty) => Some(ty.clone()),
        Rhs::Node(op, args) => {
            let types = args
                .iter()
                .map(|a| type_of(egraph, a))
                .collect::<Option<Vec<_>>>()?;
            let refs: Vec<&TensorType> = types.iter().collect();
            tir_graph::infer::infer(op, &refs).ok()
        }
    }
}

fn add(egraph: &mut TirEGraph, rhs: &Rhs) -> Id {
    match rhs {
        Rhs::Class(id) => *id,
        Rhs::Leaf(op, ty) => egraph.add(TirNode::Leaf {
            op: op.clone(),
            ty: ty.clone(),
        }),
        Rhs::Node(op, args) => {
            let children: Vec<Id> = args.iter().map(|a| add(egraph, a)).collect();
            debug_assert!(infer_in(egraph, op, &children).is_some());
            egraph.add(TirNode::Op {
                op: op.clone(),
                children,
            })
        }
    }
}
