//! `FusedGraph`: a graph with every computed node assigned to exactly one kernel, and its verifier.

use crate::OptError;
use serde::Serialize;
use std::collections::BTreeSet;
use tir_graph::{Graph, NodeId, Op};

/// What a kernel computes, which decides how it is lowered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelKind {
    /// Elementwise ops (with broadcasting) and layout ops as index maps, one pass over the output.
    Elementwise,
    /// Reductions over the innermost axis with their elementwise producers and consumers: one
    /// tile program per block of rows (softmax, layer_norm, rms_norm).
    RowReduction,
    /// One reduction over other axes, alone.
    Reduction,
    /// One matmul (K loop), layout ops on its operands as load index maps, and an elementwise
    /// epilogue (bias, activation, residual, cast) applied to the output tile.
    MatMul,
    /// One convolution as an implicit GEMM (weights times the input's windows, gathered tile
    /// by tile in the K loop, never materialized) and an elementwise epilogue.
    Conv,
    /// `softmax(f(Q Kᵀ)) V` as flash attention: the scores of a block of queries are computed
    /// tile by tile over the keys with an online softmax and never written; `f` is the score
    /// epilogue (scale, mask); the operands' layout and elementwise producers are index maps of
    /// the loads, and a chain of layout ops after the product composes into the store.
    Attention,
    /// A gather with elementwise and layout members; the gathered data is read from memory.
    Gather,
    /// Layout ops only: a copy through an index map.
    Layout,
    /// A state update (the kernel's root) with the elementwise producers of its value.
    StateUpdate,
    /// One collective (`all_reduce_*`, `all_gather`, `reduce_scatter`), alone: it reads its
    /// operand and writes its result on every device of the mesh.
    Collective,
    /// A user's kernel ([`tir_graph::Op::Custom`]): its sibling nodes (one per output it
    /// writes, over the same operands), alone, since its tile program is the author's. It is the
    /// one kind that writes every member ([`Kernel::outputs`]): one launch for all its outputs.
    Custom,
}

impl KernelKind {
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Elementwise => "elementwise",
            KernelKind::RowReduction => "row_reduction",
            KernelKind::Reduction => "reduction",
            KernelKind::MatMul => "matmul",
            KernelKind::Conv => "conv",
            KernelKind::Attention => "attention",
            KernelKind::Gather => "gather",
            KernelKind::Layout => "layout",
            KernelKind::StateUpdate => "state_update",
            KernelKind::Collective => "collective",
            KernelKind::Custom => "custom",
        }
    }
}

/// One launch: a connected set of nodes whose only value written to memory is `root`'s, or a
/// custom kernel writing each of its members (one per output of the user's kernel).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Kernel {
    pub kind: KernelKind,
    /// The node whose value the kernel writes (its one output; a custom kernel's last output).
    pub root: NodeId,
    /// Every node the kernel computes, in topological order; the last is `root`.
    pub members: Vec<NodeId>,
    /// The values the kernel reads from memory: sources and other kernels' roots, in id order.
    pub inputs: Vec<NodeId>,
    /// Estimated bytes read (each input once) and written, with the cost model's sizes.
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Kernel {
    /// The nodes whose values the kernel writes to memory: every member of a custom kernel,
    /// the root of any other.
    pub fn outputs(&self) -> &[NodeId] {
        if self.kind == KernelKind::Custom {
            &self.members
        } else {
            std::slice::from_ref(&self.root)
        }
    }
}

/// The optimized graph and its kernels, in an order where each kernel follows those it reads.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedGraph {
    pub graph: Graph,
    pub kernels: Vec<Kernel>,
}

impl FusedGraph {
    /// Checks: every computed node is in exactly one kernel; a kernel's inputs are exactly the
    /// operands of its members that it does not compute, each a source or an earlier kernel's
    /// output (so the kernel graph is acyclic); a member other than an output
    /// ([`Kernel::outputs`]) is used only inside its kernel and is not a graph output; every
    /// output and state update is a source or a kernel's output; a custom kernel's members are
    /// custom nodes of one kernel over the same operands, each a different output of it.
    pub fn verify(&self) -> Result<(), OptError> {
        self.graph.verify()?;
        let g = &self.graph;
        let mut owner: Vec<Option<usize>> = vec![None; g.len()];
        let mut materialized: BTreeSet<NodeId> = BTreeSet::new();
        let fail = |k: usize, why: String| Err(OptError::BadFusion { kernel: k, why });
        for (k, kernel) in self.kernels.iter().enumerate() {
            let members: BTreeSet<NodeId> = kernel.members.iter().copied().collect();
            if kernel.members.last() != Some(&kernel.root) || members.len() != kernel.members.len()
            {
                return fail(k, "members must be distinct and end with the root".into());
            }
            if kernel.kind == KernelKind::Custom {
                if let Err(why) = check_custom_siblings(g, kernel) {
                    return fail(k, why);
                }
            }
            let written = kernel.outputs();
            for &m in &kernel.members {
                if g.node(m).op.is_source() {
                    return fail(k, format!("{m} is a source, not a computed node"));
                }
                if let Some(other) = owner[m.index()].replace(k) {
                    return fail(k, format!("{m} is also in kernel {other}"));
                }
                let inner = !written.contains(&m);
                if inner && g.users(m).iter().any(|u| !members.contains(u)) {
                    return fail(k, format!("{m} is used outside the kernel but not written"));
                }
                if inner && g.outputs().iter().any(|(_, o)| *o == m) {
                    return fail(k, format!("{m} is an output but not the kernel's root"));
                }
            }
            let needed: BTreeSet<NodeId> = kernel
                .members
                .iter()
                .flat_map(|&m| g.operands(m))
                .filter(|o| !members.contains(o))
                .collect();
            if needed.iter().copied().collect::<Vec<_>>() != kernel.inputs {
                return fail(k, "inputs differ from the members' outside operands".into());
            }
            if let Some(i) = needed
                .iter()
                .find(|i| !g.node(**i).op.is_source() && !materialized.contains(i))
            {
                return fail(k, format!("reads {i} before any kernel writes it"));
            }
            materialized.extend(written.iter().copied());
        }
        let results = g.outputs().iter().map(|(_, o)| *o).chain(g.state_updates());
        for r in results {
            if !g.node(r).op.is_source() && !materialized.contains(&r) {
                return Err(OptError::Unassigned { node: r });
            }
        }
        if let Some(n) = g
            .node_ids()
            .find(|n| !g.node(*n).op.is_source() && owner[n.index()].is_none())
        {
            return Err(OptError::Unassigned { node: n });
        }
        Ok(())
    }
}

/// A custom kernel's members are nodes of one custom kernel over the same operands, each a
/// different output of it (so one launch of its program writes them all).
fn check_custom_siblings(g: &Graph, kernel: &Kernel) -> Result<(), String> {
    let first = kernel.members[0];
    let Op::Custom { kernel: shared, .. } = &g.node(first).op else {
        return Err(format!("{first} is not a custom op"));
    };
    let mut seen = BTreeSet::new();
    for &m in &kernel.members {
        let same = matches!(&g.node(m).op, Op::Custom { kernel: k, output }
            if k == shared && seen.insert(*output));
        if !same || g.operands(m) != g.operands(first) {
            return Err(format!(
                "{m} is not another output of {first}'s custom kernel over the same operands"
            ));
        }
    }
    Ok(())
}
