//! tir-opt: the optimizer. A verified [`Graph`] in; a verified [`FusedGraph`] out: the same
//! computation, simplified, with every computed node in exactly one kernel.
//!
//! First [`channels_last`] relays convolution chains out channels-last (a graph pass, checked by
//! its own verifier; after simplification it gives the other convolutions channels-last copies
//! of their inputs, where the backend asks); then two stages, each built on the `egg` e-graph library and each checked
//! by a verifier:
//! 1. [`simplify`]: algebraic and layout rewrite rules plus constant folding, saturated under
//!    [`Limits`], then extraction (least depth). Checked by [`Graph::verify`] and an unchanged
//!    signature.
//! 2. [`fusion`]: kernels are e-nodes that rules introduce and grow; extraction against the cost
//!    model of [`fusion::cost`] (bytes through device memory plus a fixed cost per launch, with
//!    limits a backend sets in [`FusionTarget`]) chooses what fuses. Checked by
//!    [`FusedGraph::verify`].
//!
//! Both stages stop at their bounds with a correct result; [`OptReport::bounds_hit`] says which
//! were hit. [`explain`] prints the result for people and as JSON.

pub mod channels_last;
pub mod explain;
pub mod fused;
pub mod fusion;
pub mod lang;
pub mod layout;
pub mod saturate;
pub mod shard;
pub mod simplify;

pub use fused::{FusedGraph, Kernel, KernelKind};
pub use fusion::cost::FusionTarget;
pub use saturate::{Bound, Limits, SaturationStats};

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use tir_graph::{Graph, GraphError, NodeId, TensorType};

/// Why optimization failed. Every variant is a bug in the optimizer, not in the user's graph
/// (which was verified before), and names what broke.
#[derive(Debug, thiserror::Error)]
pub enum OptError {
    #[error("optimizer produced an invalid graph: {0}")]
    Graph(#[from] GraphError),
    #[error("optimizer changed the type of {what} from {before} to {after}")]
    TypeChanged {
        what: String,
        before: TensorType,
        after: TensorType,
    },
    #[error("optimizer changed the set of state updates")]
    StateUpdatesChanged,
    #[error("no kernel can compute node {node} ({op})")]
    NoKernel { node: NodeId, op: &'static str },
    #[error("node {node} is computed by no kernel")]
    Unassigned { node: NodeId },
    #[error("the channels-last pass left node {node} wrong: {why}")]
    Layout { node: NodeId, why: String },
    #[error("a pass changed the graph's signature: {0}")]
    Signature(String),
    #[error("kernel {kernel} is malformed: {why}")]
    BadFusion { kernel: usize, why: String },
}

/// What the optimizer may do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OptOptions {
    /// Bounds on each stage's search.
    pub limits: Limits,
    /// What the backend allows in a kernel, and the cost model's constants.
    pub target: FusionTarget,
}

/// What the optimizer did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OptReport {
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub simplify: SaturationStats,
    pub fusion: SaturationStats,
    /// Each rule that fired, with how many times, over both stages.
    pub rules: BTreeMap<&'static str, usize>,
    /// The bounds that stopped a stage early, as `stage: bound`; empty when both saturated.
    pub bounds_hit: Vec<String>,
    pub seconds: f64,
}

/// Simplifies and fuses `graph`.
pub fn optimize(graph: &Graph, options: &OptOptions) -> Result<(FusedGraph, OptReport), OptError> {
    let start = Instant::now();
    let relaid = channels_last::channels_last(graph)?;
    let (mut simplified, simplify_stats) = simplify::simplify(&relaid, &options.limits)?;
    if options.target.conv_inputs_channels_last {
        simplified = channels_last::copy_conv_inputs(&simplified)?;
    }
    let (fused, fusion_stats) = fusion::fuse(&simplified, &options.target, &options.limits)?;
    let mut rules = simplify_stats.fired.clone();
    rules.extend(fusion_stats.fired.iter().map(|(k, v)| (*k, *v)));
    let bounds_hit = [("simplify", &simplify_stats), ("fusion", &fusion_stats)]
        .iter()
        .filter_map(|(stage, s)| s.bound_hit.map(|b| format!("{stage}: {b}")))
        .collect();
    let report = OptReport {
        nodes_before: graph.len(),
        nodes_after: fused.graph.len(),
        simplify: simplify_stats,
        fusion: fusion_stats,
        rules,
        bounds_hit,
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok((fused, report))
}
