//! `Graph`: a verified dataflow graph of tensor ops on petgraph, and its verifier.
//!
//! A `Graph` is valid by construction: [`Graph::add_node`] infers each node's type and refuses
//! what would break an invariant, so every `Graph` value holds these (which [`Graph::verify`]
//! re-checks from scratch, for tests and for later stages that build graphs):
//! - acyclic, with operands defined before their users (node order is a topological order);
//! - every node's type is the one inference gives for its operands (sources: a valid declared type);
//! - source names (inputs, parameters, states) are unique, and so are output names;
//! - every output names a node of the graph;
//! - each state update writes a `state` node, and each state is written at most once per run.

use crate::infer::{check_source, infer, InferError};
use crate::{Dim, Op, ReshapeDim, Shape, SliceRange, TensorType};
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A node of a graph; prints as `%N`, its position in topological order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The node's position in topological order, as an index.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    fn graph_index(self) -> NodeIndex {
        NodeIndex::new(self.index())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// An op with the type of the value it produces.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// The type of its result (declared for sources, inferred otherwise).
    pub ty: TensorType,
}

/// What is wrong with a graph, naming the node, op and types involved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// A node's type cannot be inferred from its operands and attributes.
    #[error("node {node}: {source}")]
    Infer {
        /// The node.
        node: NodeId,
        /// Why inference refused it.
        source: InferError,
    },
    /// A node uses an operand that is not an earlier node of the graph.
    #[error("node {node} ({op}) uses {operand}, which is not defined before it")]
    UndefinedOperand {
        /// The user.
        node: NodeId,
        /// The user's op name.
        op: &'static str,
        /// The operand it names.
        operand: NodeId,
    },
    /// A source (input, parameter, constant, state) was added without its type.
    #[error("node {node}: a source needs a declared type")]
    MissingDeclaredType {
        /// The source.
        node: NodeId,
    },
    /// A node's stored type differs from what its operands give (a graph built from data).
    #[error("node {node} ({op}) is stored as {stored} but its operands give {inferred}")]
    TypeMismatch {
        /// The node.
        node: NodeId,
        /// Its op name.
        op: &'static str,
        /// The type the data gave it.
        stored: TensorType,
        /// The type inference gives.
        inferred: TensorType,
    },
    /// Two sources (inputs, parameters and states share one namespace), or two outputs, share a
    /// name.
    #[error("{kind} name `{name}` is used by {first} and {second}")]
    DuplicateName {
        /// What is named: `source` or `output`.
        kind: &'static str,
        /// The shared name.
        name: String,
        /// The first holder (a node, with its op for a source).
        first: String,
        /// The second holder.
        second: String,
    },
    /// A state update writes a node that is not a `state`.
    #[error("node {node} ({op}) writes {target}, which is a {target_op}, not a state")]
    NotAState {
        /// The update.
        node: NodeId,
        /// The update's op name.
        op: &'static str,
        /// The node it writes.
        target: NodeId,
        /// That node's op name.
        target_op: &'static str,
    },
    /// Two updates write the same state.
    #[error("state `{name}` is written by {first} and {second}; a state is written at most once per run")]
    StateWrittenTwice {
        /// The state's name.
        name: String,
        /// The first update.
        first: NodeId,
        /// The second update.
        second: NodeId,
    },
    /// The edges form a cycle (a graph built from data).
    #[error("the graph has a cycle through {node}")]
    Cycle {
        /// A node on the cycle.
        node: NodeId,
    },
    /// An output refers to a node the graph does not have.
    #[error("output `{name}` refers to {node}, which is not in the graph")]
    UnknownOutput {
        /// The output's name.
        name: String,
        /// The missing node.
        node: NodeId,
    },
    /// An output was given the empty name.
    #[error("output name is empty")]
    EmptyOutputName,
    /// The graph has neither outputs nor state updates.
    #[error("the graph computes nothing: it has no outputs and no state updates")]
    NoResults,
    /// Causal attention was asked of an operand without a sequence axis.
    #[error("node {node}: causal attention needs a sequence axis (rank 2 or more), got {ty}")]
    AttentionNeedsSequence {
        /// The query node.
        node: NodeId,
        /// Its type.
        ty: TensorType,
    },
    /// Attention was asked of a query whose head dim (last axis) is symbolic.
    #[error("node {node}: attention needs a static head dim (last axis of q) to set its scale, got {ty}")]
    AttentionNeedsStaticHeadDim {
        /// The query node.
        node: NodeId,
        /// Its type.
        ty: TensorType,
    },
    /// A builder was given a [`crate::Tensor`] made by another builder.
    #[error("a tensor from another graph builder was used with this one")]
    ForeignTensor,
    /// [`Graph::specialize`]: fixing symbolic dims to sizes made a node's shape invalid.
    #[error("node {node} ({op}): fixing the dims: {source}")]
    Specialize {
        /// The node.
        node: NodeId,
        /// Its op name.
        op: &'static str,
        /// What went wrong with its shape.
        source: Box<crate::ShapeError>,
    },
    /// The graph would have more nodes than a [`NodeId`] can number (2^32 - 1).
    #[error("the graph has {0} nodes, more than a graph may hold (2^32 - 1)")]
    TooManyNodes(usize),
}

/// A dataflow graph of tensor ops. Edges run from operand to user; an edge's weight is the
/// operand position.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    g: DiGraph<Node, u32>,
    outputs: Vec<(String, NodeId)>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Adds `op` applied to `operands`. Sources take their type from `declared`; other ops
    /// infer it (and `declared`, if given, must match). Nothing is added on error.
    pub fn add_node(
        &mut self,
        op: Op,
        operands: &[NodeId],
        declared: Option<TensorType>,
    ) -> Result<NodeId, GraphError> {
        let node = NodeId(
            u32::try_from(self.g.node_count()).map_err(|_| GraphError::TooManyNodes(usize::MAX))?,
        );
        if let Some(&operand) = operands.iter().find(|o| o.index() >= self.g.node_count()) {
            let op = op.name();
            return Err(GraphError::UndefinedOperand { node, op, operand });
        }
        let ty = self.node_type(node, &op, operands, declared)?;
        self.check_source_name(node, &op)?;
        self.check_state_update(node, &op, operands)?;
        let index = self.g.add_node(Node { op, ty });
        for (pos, o) in operands.iter().enumerate() {
            self.g.add_edge(o.graph_index(), index, pos as u32);
        }
        Ok(node)
    }

    fn node_type(
        &self,
        node: NodeId,
        op: &Op,
        operands: &[NodeId],
        declared: Option<TensorType>,
    ) -> Result<TensorType, GraphError> {
        if op.is_source() {
            let ty = declared.ok_or(GraphError::MissingDeclaredType { node })?;
            check_source(op, &ty).map_err(|source| GraphError::Infer { node, source })?;
            if !operands.is_empty() {
                return Err(GraphError::Infer {
                    node,
                    source: InferError {
                        op: op.name(),
                        operands: operands.iter().map(|&o| self.ty(o).clone()).collect(),
                        reason: "a source takes no operands".into(),
                    },
                });
            }
            return Ok(ty);
        }
        let types: Vec<&TensorType> = operands.iter().map(|&o| self.ty(o)).collect();
        let inferred = infer(op, &types).map_err(|source| GraphError::Infer { node, source })?;
        match declared {
            Some(stored) if stored != inferred => Err(GraphError::TypeMismatch {
                node,
                op: op.name(),
                stored,
                inferred,
            }),
            _ => Ok(inferred),
        }
    }

    fn check_source_name(&self, node: NodeId, op: &Op) -> Result<(), GraphError> {
        let Some(name) = op.source_name() else {
            return Ok(());
        };
        match self.source(name) {
            Some(first) => Err(GraphError::DuplicateName {
                kind: "source",
                name: name.to_string(),
                first: format!("{first} ({})", self.node(first).op),
                second: format!("{node} ({op})"),
            }),
            None => Ok(()),
        }
    }

    fn check_state_update(
        &self,
        node: NodeId,
        op: &Op,
        operands: &[NodeId],
    ) -> Result<(), GraphError> {
        if !op.is_state_update() {
            return Ok(());
        }
        let target = operands[0];
        let Op::State { name } = &self.node(target).op else {
            return Err(GraphError::NotAState {
                node,
                op: op.name(),
                target,
                target_op: self.node(target).op.name(),
            });
        };
        match self.state_writer(target) {
            Some(first) => Err(GraphError::StateWrittenTwice {
                name: name.clone(),
                first,
                second: node,
            }),
            None => Ok(()),
        }
    }

    /// Names `node` as the output `name`.
    pub fn add_output(&mut self, name: &str, node: NodeId) -> Result<(), GraphError> {
        if name.is_empty() {
            return Err(GraphError::EmptyOutputName);
        }
        if node.index() >= self.g.node_count() {
            let name = name.to_string();
            return Err(GraphError::UnknownOutput { name, node });
        }
        if let Some((_, first)) = self.outputs.iter().find(|(n, _)| n == name) {
            return Err(GraphError::DuplicateName {
                kind: "output",
                name: name.to_string(),
                first: first.to_string(),
                second: node.to_string(),
            });
        }
        self.outputs.push((name.to_string(), node));
        Ok(())
    }

    /// Removes the nodes from `len` on (the newest), with their edges. Outputs must not refer
    /// to them; the builder uses this to undo a failed composite.
    pub(crate) fn truncate(&mut self, len: usize) {
        while self.g.node_count() > len {
            let last = NodeIndex::new(self.g.node_count() - 1);
            self.g.remove_node(last);
        }
        debug_assert!(self.outputs.iter().all(|(_, n)| n.index() < len));
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.g.node_count()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.g.node_count() == 0
    }

    /// The node `id`. Panics if `id` is not of this graph (ids come from this graph's methods).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id.graph_index()]
    }

    /// The type of node `id`'s value. Panics if `id` is not of this graph.
    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.node(id).ty
    }

    /// All node ids in topological order (operands before users).
    pub fn node_ids(&self) -> impl ExactSizeIterator<Item = NodeId> + '_ {
        (0..self.g.node_count() as u32).map(NodeId)
    }

    /// The operands of `id`, in operand order.
    pub fn operands(&self, id: NodeId) -> Vec<NodeId> {
        let mut edges: Vec<(u32, NodeId)> = self
            .g
            .edges_directed(id.graph_index(), Direction::Incoming)
            .map(|e| (*e.weight(), NodeId(e.source().index() as u32)))
            .collect();
        edges.sort_unstable();
        edges.into_iter().map(|(_, n)| n).collect()
    }

    /// The nodes that use `id`, each once, in id order.
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        let mut users: Vec<NodeId> = self
            .g
            .neighbors_directed(id.graph_index(), Direction::Outgoing)
            .map(|n| NodeId(n.index() as u32))
            .collect();
        users.sort_unstable();
        users.dedup();
        users
    }

    /// The named outputs, in the order they were added.
    pub fn outputs(&self) -> &[(String, NodeId)] {
        &self.outputs
    }

    /// The underlying petgraph graph, for graph algorithms.
    pub fn petgraph(&self) -> &DiGraph<Node, u32> {
        &self.g
    }

    /// The source (input, parameter or state) named `name`.
    pub fn source(&self, name: &str) -> Option<NodeId> {
        self.node_ids()
            .find(|&id| self.node(id).op.source_name() == Some(name))
    }

    /// Nodes whose op satisfies `pred`, with their source names.
    fn named_sources(&self, pred: impl Fn(&Op) -> bool) -> Vec<(String, NodeId)> {
        self.node_ids()
            .filter(|&id| pred(&self.node(id).op))
            .filter_map(|id| Some((self.node(id).op.source_name()?.to_string(), id)))
            .collect()
    }

    /// The inputs, named, in node order.
    pub fn inputs(&self) -> Vec<(String, NodeId)> {
        self.named_sources(|op| matches!(op, Op::Input { .. }))
    }

    /// The parameters, named, in node order.
    pub fn parameters(&self) -> Vec<(String, NodeId)> {
        self.named_sources(|op| matches!(op, Op::Parameter { .. }))
    }

    /// The states, named, in node order.
    pub fn states(&self) -> Vec<(String, NodeId)> {
        self.named_sources(|op| matches!(op, Op::State { .. }))
    }

    /// The state updates (the graph's mutable outputs), in order.
    pub fn state_updates(&self) -> Vec<NodeId> {
        self.node_ids()
            .filter(|&id| self.node(id).op.is_state_update())
            .collect()
    }

    /// The update that writes the state node `state`, if any.
    pub fn state_writer(&self, state: NodeId) -> Option<NodeId> {
        self.users(state).into_iter().find(|&u| {
            self.node(u).op.is_state_update() && self.operands(u).first() == Some(&state)
        })
    }

    /// How many nodes each op has, by op name.
    pub fn op_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for id in self.node_ids() {
            *counts.entry(self.node(id).op.name()).or_insert(0) += 1;
        }
        counts
    }

    /// Re-checks every invariant in the module doc from scratch.
    pub fn verify(&self) -> Result<(), GraphError> {
        if let Err(cycle) = petgraph::algo::toposort(&self.g, None) {
            let node = NodeId(cycle.node_id().index() as u32);
            return Err(GraphError::Cycle { node });
        }
        let mut rebuilt = Graph::new();
        for id in self.node_ids() {
            let node = self.node(id);
            let operands = self.operands(id);
            if let Some(&operand) = operands.iter().find(|o| **o >= id) {
                let op = node.op.name();
                return Err(GraphError::UndefinedOperand {
                    node: id,
                    op,
                    operand,
                });
            }
            rebuilt.add_node(node.op.clone(), &operands, Some(node.ty.clone()))?;
        }
        for (name, node) in &self.outputs {
            rebuilt.add_output(name, *node)?;
        }
        if self.outputs.is_empty() && self.state_updates().is_empty() {
            return Err(GraphError::NoResults);
        }
        Ok(())
    }

    /// The graph as plain data (what the `.tir` file stores).
    pub fn to_data(&self) -> GraphData {
        GraphData {
            nodes: self
                .node_ids()
                .map(|id| NodeData {
                    op: self.node(id).op.clone(),
                    ty: self.node(id).ty.clone(),
                    operands: self.operands(id),
                })
                .collect(),
            outputs: self.outputs.clone(),
        }
    }

    /// Rebuilds a graph from plain data, checking every invariant; no partial graph on error.
    pub fn from_data(data: GraphData) -> Result<Graph, GraphError> {
        let mut graph = Graph::new();
        for (i, n) in data.nodes.into_iter().enumerate() {
            let id = NodeId(u32::try_from(i).map_err(|_| GraphError::TooManyNodes(i))?);
            if let Some(&operand) = n.operands.iter().find(|o| **o >= id) {
                let op = n.op.name();
                return Err(GraphError::UndefinedOperand {
                    node: id,
                    op,
                    operand,
                });
            }
            graph.add_node(n.op, &n.operands, Some(n.ty))?;
        }
        for (name, node) in data.outputs {
            graph.add_output(&name, node)?;
        }
        if graph.outputs.is_empty() && graph.state_updates().is_empty() {
            return Err(GraphError::NoResults);
        }
        Ok(graph)
    }
}

impl Graph {
    /// What the ops need of the dims beyond their shape rules (see [`crate::shape::DimBound`]),
    /// for a run to check once it binds them.
    pub fn dim_bounds(&self) -> Vec<crate::shape::DimBound> {
        let mut bounds = Vec::new();
        for id in self.node_ids() {
            let Op::Slice { ranges } = &self.node(id).op else {
                continue;
            };
            let x = self.ty(self.operands(id)[0]);
            for (axis, (r, d)) in ranges.iter().zip(x.shape.dims()).enumerate() {
                let Some(stop) = &r.stop else { continue };
                let what = format!("node {id} (slice) axis {axis}: the stop");
                bounds.extend(crate::shape::DimBound::needed(stop, d, what));
            }
        }
        bounds
    }

    /// The graph with the symbolic dims of `values` fixed to those sizes (a static program for
    /// one binding): sources' types and dim attributes are substituted, every other type is
    /// inferred again, so the result passes every check of the verifier.
    pub fn specialize(&self, values: &BTreeMap<String, u64>) -> Result<Graph, GraphError> {
        let mut graph = Graph::new();
        for id in self.node_ids() {
            let node = self.node(id);
            let fail = |source| GraphError::Specialize {
                node: id,
                op: node.op.name(),
                source: Box::new(source),
            };
            let dims = |ds: &[Dim]| -> Result<Vec<Dim>, GraphError> {
                ds.iter()
                    .map(|d| d.substitute(values).map_err(fail))
                    .collect()
            };
            let op = match &node.op {
                Op::Reshape { dims: target } => Op::Reshape {
                    dims: target
                        .iter()
                        .map(|d| match d {
                            ReshapeDim::Dim(d) => {
                                d.substitute(values).map(ReshapeDim::Dim).map_err(fail)
                            }
                            ReshapeDim::Infer => Ok(ReshapeDim::Infer),
                        })
                        .collect::<Result<_, _>>()?,
                },
                Op::BroadcastTo { dims: target } => Op::BroadcastTo {
                    dims: dims(target)?,
                },
                Op::Iota { len } => Op::Iota {
                    len: len.substitute(values).map_err(fail)?,
                },
                Op::DimValue { dim } => Op::DimValue {
                    dim: dim.substitute(values).map_err(fail)?,
                },
                Op::Slice { ranges } => Op::Slice {
                    ranges: ranges
                        .iter()
                        .map(|r| {
                            let stop = r.stop.as_ref().map(|d| d.substitute(values)).transpose();
                            Ok(SliceRange {
                                stop: stop.map_err(fail)?,
                                ..r.clone()
                            })
                        })
                        .collect::<Result<_, GraphError>>()?,
                },
                op => op.clone(),
            };
            let declared = if op.is_source() {
                let shape = Shape::new(dims(node.ty.shape.dims())?).map_err(fail)?;
                Some(TensorType::new(node.ty.dtype, shape))
            } else {
                None
            };
            graph.add_node(op, &self.operands(id), declared)?;
        }
        for (name, node) in &self.outputs {
            graph.add_output(name, *node)?;
        }
        Ok(graph)
    }
}

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.to_data() == other.to_data()
    }
}

impl Eq for Graph {}

/// One node as plain data: its operands are indices of earlier nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeData {
    /// The operation.
    pub op: Op,
    /// The type of its result.
    pub ty: TensorType,
    /// Its operands, each an earlier node.
    pub operands: Vec<NodeId>,
}

/// A graph as plain data, nodes in topological order: the body of a `.tir` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphData {
    /// The nodes, operands before users.
    pub nodes: Vec<NodeData>,
    /// The named outputs, in order.
    pub outputs: Vec<(String, NodeId)>,
}
