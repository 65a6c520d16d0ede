//! Fusion: a simplified [`Graph`] in, a verified [`FusedGraph`] out.
//!
//! Fusion runs in its own e-graph over the simplified graph: one e-class per node, holding the
//! node itself ([`FusionNode::Value`]) and every kernel that could compute it
//! ([`FusionNode::Kernel`], whose children are the kernel's inputs). Rules introduce kernels: every
//! computed node seeds a one-node kernel, and `absorb` grows a kernel by one producer of one of
//! its inputs when every user of that producer is already in the kernel, the producer is not an
//! output, and the grown set still forms a kernel of some kind ([`kinds::classify`]) within the
//! target's limits. An attention pattern (`softmax(f(Q Kᵀ)) V`, [`kinds::attention_pattern`]) is
//! seeded whole, with each chain of layout ops above it, since its parts form no kernel one
//! producer at a time, and grows only into the kernel that absorbs every producer it can
//! (not into each combination of them). Extraction with the cost of [`cost`] then chooses one kernel per needed
//! class, which decides what fuses.
//!
//! Why a second e-graph rather than kernels in the simplifier's: fusing over every algebraic
//! alternative multiplies the kernels to consider, and "every user is in the kernel" needs the
//! users of one concrete graph. Why "every user": a value read by another kernel must be written
//! anyway, so fusing its computation as well would compute it twice (never done: a matmul used
//! by two kernels stays its own kernel); and it makes each node belong to exactly one kernel.
//! The kernel graph cannot have a cycle: every member of a kernel is an ancestor of its root.
//! The one exception to "one root": after extraction, the custom nodes of one user's kernel over
//! the same operands (one per output) are merged into one kernel writing them all.

pub mod cost;
pub mod kinds;

use crate::fused::{FusedGraph, Kernel, KernelKind};
use crate::saturate::{Bound, Limits, SaturationStats};
use crate::OptError;
use cost::FusionTarget;
use egg::{CostFunction, EGraph, Extractor, Id, Language};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;
use tir_graph::{CustomRef, Graph, NodeId, Op};

/// An e-node of the fusion e-graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FusionNode {
    /// A node of the graph, over its operands' classes. Extractable only for sources.
    Value { node: NodeId, operands: Vec<Id> },
    /// A kernel computing `root` from `inputs` (the classes of the values it reads).
    Kernel {
        root: NodeId,
        kind: KernelKind,
        members: Vec<NodeId>,
        inputs: Vec<Id>,
    },
}

impl Language for FusionNode {
    type Discriminant = std::mem::Discriminant<FusionNode>;

    fn discriminant(&self) -> Self::Discriminant {
        std::mem::discriminant(self)
    }

    fn matches(&self, other: &Self) -> bool {
        self == other
    }

    fn children(&self) -> &[Id] {
        match self {
            FusionNode::Value { operands, .. } => operands,
            FusionNode::Kernel { inputs, .. } => inputs,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            FusionNode::Value { operands, .. } => operands,
            FusionNode::Kernel { inputs, .. } => inputs,
        }
    }
}

/// A candidate kernel while the search grows it.
#[derive(Clone)]
struct Candidate {
    root: NodeId,
    members: BTreeSet<NodeId>,
}

struct Search<'a> {
    graph: &'a Graph,
    target: &'a FusionTarget,
    egraph: EGraph<FusionNode, ()>,
    /// The class of each graph node.
    class: Vec<Id>,
    /// Nodes that must be written: outputs and state updates.
    results: HashSet<NodeId>,
    absorbed: usize,
}

impl Search<'_> {
    /// The values `members` read from outside, in id order.
    fn inputs(&self, members: &BTreeSet<NodeId>) -> Vec<NodeId> {
        let outside: BTreeSet<NodeId> = members
            .iter()
            .flat_map(|&m| self.graph.operands(m))
            .filter(|o| !members.contains(o))
            .collect();
        outside.into_iter().collect()
    }

    /// Adds `candidate` as a kernel of its root's class; `false` if it is no kernel or known.
    fn add(&mut self, candidate: &Candidate) -> bool {
        let Some(kind) = self.kind(&candidate.members, candidate.root) else {
            return false;
        };
        let inputs = self.inputs(&candidate.members);
        let node = FusionNode::Kernel {
            root: candidate.root,
            kind,
            members: candidate.members.iter().copied().collect(),
            inputs: inputs.iter().map(|i| self.class[i.index()]).collect(),
        };
        if self.egraph.lookup(node.clone()).is_some() {
            return false;
        }
        let id = self.egraph.add(node);
        self.egraph.union(self.class[candidate.root.index()], id);
        true
    }

    /// The attention kernels whose last product is `output`: the pattern alone, and with each
    /// longer chain of bijective layout ops above it (the layout of a head merge) — when every
    /// value inside is used only inside and is no result.
    fn attention_seeds(&self, output: NodeId) -> Vec<Candidate> {
        let g = self.graph;
        let Some(pattern) = kinds::attention_pattern(g, output) else {
            return Vec::new();
        };
        let mut members = pattern.nodes();
        let inside_only = |n: &NodeId, members: &BTreeSet<NodeId>| {
            !self.results.contains(n) && g.users(*n).iter().all(|u| members.contains(u))
        };
        if !members
            .iter()
            .filter(|&&n| n != output)
            .all(|n| inside_only(n, &members))
        {
            return Vec::new();
        }
        let mut seeds = vec![Candidate {
            root: output,
            members: members.clone(),
        }];
        let mut root = output;
        while let [user] = g.users(root).as_slice() {
            let bijective = matches!(
                g.node(*user).op,
                Op::Reshape { .. } | Op::Permute { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
            );
            if !bijective || self.results.contains(&root) {
                break;
            }
            members.insert(*user);
            root = *user;
            seeds.push(Candidate {
                root,
                members: members.clone(),
            });
        }
        seeds
    }

    /// The producers `candidate` may absorb: computed values it reads, not results, whose
    /// every user is a member.
    fn absorbable(&self, candidate: &Candidate) -> Vec<NodeId> {
        let g = self.graph;
        self.inputs(&candidate.members)
            .into_iter()
            .filter(|&p| {
                let op = &g.node(p).op;
                !op.is_source()
                    && !op.is_state_update()
                    && !self.results.contains(&p)
                    && g.users(p).iter().all(|u| candidate.members.contains(u))
            })
            .collect()
    }

    /// The kernels `candidate` grows into by absorbing one producer; an attention kernel
    /// grows into one only ([`Search::grow_attention`]), and a kernel that can absorb
    /// elementwise producers without changing its kind into one only, with all of them
    /// ([`Search::absorb_elementwise`]).
    fn grow(&self, candidate: &Candidate) -> Vec<Candidate> {
        let kind = self.kind(&candidate.members, candidate.root);
        if kind == Some(KernelKind::Attention) {
            return self.grow_attention(candidate).into_iter().collect();
        }
        if let Some(whole) = self.absorb_elementwise(candidate, kind) {
            return vec![whole];
        }
        let mut grown: Vec<Candidate> = self
            .absorbable(candidate)
            .into_iter()
            .map(|p| {
                let mut members = candidate.members.clone();
                members.insert(p);
                Candidate {
                    root: candidate.root,
                    members,
                }
            })
            .collect();
        if kind == Some(KernelKind::MatMul) {
            grown.extend(self.grow_prologues(candidate));
        }
        grown
    }

    /// The product kernels `candidate` grows into by absorbing, for one operand, every producer
    /// of it that may join a prologue ([`kinds::may_join_prologue`]), to a fixed point: a
    /// dequantized weight's ops are each too costly to read alone from a product (an f16
    /// weight-sized intermediate each, so [`kinds::classify`] refuses them one at a time), while
    /// the whole dequantization reads only the packed weight and its scales.
    fn grow_prologues(&self, candidate: &Candidate) -> Vec<Candidate> {
        let g = self.graph;
        let Some(&mm) = candidate
            .members
            .iter()
            .find(|&&m| g.node(m).op == Op::MatMul)
        else {
            return Vec::new();
        };
        let mut grown = Vec::new();
        for operand in g.operands(mm) {
            let mut whole = candidate.clone();
            loop {
                let side = kinds::prologue_of(g, &whole.members, operand);
                let next: BTreeSet<NodeId> = side
                    .iter()
                    .flat_map(|&m| g.operands(m))
                    .chain([operand])
                    .filter(|p| !whole.members.contains(p) && self.prologue_absorbable(*p, &whole))
                    .collect();
                if next.is_empty() {
                    break;
                }
                whole.members.extend(next);
            }
            if whole.members.len() > candidate.members.len() {
                grown.push(whole);
            }
        }
        grown
    }

    /// Whether `p` may join `candidate`'s operand prologue: an op that may
    /// ([`kinds::may_join_prologue`]), no result, every user a member.
    fn prologue_absorbable(&self, p: NodeId, candidate: &Candidate) -> bool {
        let g = self.graph;
        kinds::may_join_prologue(&g.node(p).op)
            && !self.results.contains(&p)
            && g.users(p).iter().all(|u| candidate.members.contains(u))
    }

    /// The attention kernel `candidate` grows into by absorbing every producer it can, one at
    /// a time, or `None` when it absorbs none. Its producers are chains above Q, K, V and the
    /// mask, and every combination of their prefixes is an attention kernel (2280 for a layer
    /// with rotary embeddings, so that a 134-layer transformer ran out of fusion's time), each
    /// reading more than the one with all of them, whose absorbed producers have no other user.
    fn grow_attention(&self, candidate: &Candidate) -> Option<Candidate> {
        let mut whole = candidate.clone();
        loop {
            let before = whole.members.len();
            for p in self.absorbable(&whole) {
                let mut members = whole.members.clone();
                members.insert(p);
                if self.kind(&members, whole.root) == Some(KernelKind::Attention) {
                    whole.members = members;
                }
            }
            if whole.members.len() == before {
                break;
            }
        }
        (whole.members.len() > candidate.members.len()).then_some(whole)
    }

    /// `candidate` with every elementwise producer it can absorb keeping its kind `kind`
    /// absorbed, one at a time to a fixed point, or `None` when it absorbs none. Such a producer
    /// has no user outside, so absorbing it saves its write and read and recomputes nothing:
    /// the cheapest kernels contain all of them, and growing by each subset of an elementwise
    /// tree (exponentially many: the mask computations of an exported decoder ran out of
    /// fusion's time, and what a time bound cut off differed from run to run) finds nothing
    /// better. Products, convolutions and attention choose their operand prologues by search.
    fn absorb_elementwise(
        &self,
        candidate: &Candidate,
        kind: Option<KernelKind>,
    ) -> Option<Candidate> {
        use KernelKind::*;
        if !matches!(
            kind,
            Some(Elementwise | RowReduction | Gather | Layout | StateUpdate)
        ) {
            return None;
        }
        let mut whole = candidate.clone();
        loop {
            let before = whole.members.len();
            for p in self.absorbable(&whole) {
                if !kinds::is_elementwise(&self.graph.node(p).op) {
                    continue;
                }
                let mut members = whole.members.clone();
                members.insert(p);
                if self.kind(&members, whole.root) == kind {
                    whole.members = members;
                }
            }
            if whole.members.len() == before {
                break;
            }
        }
        (whole.members.len() > candidate.members.len()).then_some(whole)
    }

    /// The kind of kernel `members` form with root `root`, if any.
    fn kind(&self, members: &BTreeSet<NodeId>, root: NodeId) -> Option<KernelKind> {
        let inputs = self.inputs(members).len();
        kinds::classify(self.graph, members, root, inputs, self.target)
    }
}

/// Fuses `graph` (simplified, verified) into kernels for `target`, under `limits`.
pub fn fuse(
    graph: &Graph,
    target: &FusionTarget,
    limits: &Limits,
) -> Result<(FusedGraph, SaturationStats), OptError> {
    let start = Instant::now();
    let mut search = Search {
        graph,
        target,
        egraph: EGraph::new(()),
        class: Vec::with_capacity(graph.len()),
        results: graph
            .outputs()
            .iter()
            .map(|(_, n)| *n)
            .chain(graph.state_updates())
            .collect(),
        absorbed: 0,
    };
    for id in graph.node_ids() {
        let operands = graph
            .operands(id)
            .iter()
            .map(|o| search.class[o.index()])
            .collect();
        let class = search.egraph.add(FusionNode::Value { node: id, operands });
        search.class.push(class);
    }
    // Seeds: every computed node alone is a kernel of some kind.
    let mut frontier: Vec<Candidate> = Vec::new();
    for id in graph.node_ids().filter(|&n| !graph.node(n).op.is_source()) {
        let seed = Candidate {
            root: id,
            members: BTreeSet::from([id]),
        };
        if !search.add(&seed) {
            return Err(OptError::NoKernel {
                node: id,
                op: graph.node(id).op.name(),
            });
        }
        frontier.push(seed);
    }
    // Attention patterns are seeded whole: their parts are kernels of no kind, so absorbing one
    // producer at a time never reaches them.
    for id in graph.node_ids() {
        for seed in search.attention_seeds(id) {
            if search.add(&seed) {
                frontier.push(seed);
            }
        }
    }
    let seeds = frontier.len();
    let mut stats = SaturationStats::default();
    // Semi-naive: only kernels new in the last round can grow into kernels not seen yet.
    while !frontier.is_empty() {
        if stats.iterations >= limits.max_iterations {
            stats.bound_hit = Some(Bound::Iterations);
            break;
        }
        stats.iterations += 1;
        let mut next = Vec::new();
        for candidate in &frontier {
            for grown in search.grow(candidate) {
                if search.add(&grown) {
                    search.absorbed += 1;
                    next.push(grown);
                }
            }
            if search.egraph.total_number_of_nodes() > limits.max_nodes {
                stats.bound_hit = Some(Bound::Nodes);
                break;
            }
            if start.elapsed() > limits.max_time {
                stats.bound_hit = Some(Bound::Time);
                break;
            }
        }
        if stats.bound_hit.is_some() {
            break;
        }
        frontier = next;
    }
    search.egraph.rebuild();
    stats.enodes = search.egraph.total_number_of_nodes();
    stats.fired.insert("seed-kernel", seeds);
    stats.fired.insert("absorb-producer", search.absorbed);
    let kernels = extract(&search)?;
    let fused = FusedGraph {
        graph: graph.clone(),
        kernels,
    };
    fused.verify()?;
    Ok((fused, stats))
}

/// Bytes moved plus launches, with shared inputs' costs split among the kernels that read them.
struct FusionCost<'a> {
    graph: &'a Graph,
    target: &'a FusionTarget,
    /// Bytes of each class's value and the nodes that use it.
    values: std::collections::HashMap<Id, (f64, Vec<NodeId>)>,
}

/// What a float product kernel that no library call can run adds to its cost, on a target that
/// runs plain float products on a library: a byte, so that of two extractions moving the same
/// bytes the one whose product the library runs wins (an attention kernel that stores its head
/// merge, rather than an output projection that reads through it). Only a tie-breaker: a
/// product still reads through a layout op where storing it would cost a kernel more.
const OFF_LIBRARY_BYTES: f64 = 1.0;

/// What a convolution kernel adds to its cost when the one user of its result is an
/// elementwise op it left out of its epilogue: a byte, so that of two extractions moving the
/// same bytes (the epilogue in the conv's kernel and a layout kernel after it, or the epilogue
/// in the layout kernel) the one whose conv kernel holds its bias and activation wins, the one
/// the library route fuses ([`kinds::conv_epilogue`]). Only a tie-breaker.
const EPILOGUE_LEFT_OUT_BYTES: f64 = 1.0;

impl FusionCost<'_> {
    /// [`EPILOGUE_LEFT_OUT_BYTES`] for a conv kernel whose result's one user is elementwise.
    fn epilogue_left_out(&self, kind: KernelKind, root: NodeId) -> f64 {
        let g = self.graph;
        let users = g.users(root);
        let left_out = matches!(users.as_slice(), [u] if kinds::is_elementwise(&g.node(*u).op));
        if kind == KernelKind::Conv && left_out {
            EPILOGUE_LEFT_OUT_BYTES
        } else {
            0.0
        }
    }

    /// [`OFF_LIBRARY_BYTES`] for a float matmul kernel that is no library call
    /// ([`kinds::is_library_matmul`]) on a target that runs those on a library, else 0.
    fn off_library(&self, kind: KernelKind, members: &[NodeId], root: NodeId) -> f64 {
        let g = self.graph;
        if kind != KernelKind::MatMul || self.target.fuse_matmul_epilogue {
            return 0.0;
        }
        let Some(&mm) = members.iter().find(|&&m| g.node(m).op == Op::MatMul) else {
            return 0.0;
        };
        let members: BTreeSet<NodeId> = members.iter().copied().collect();
        if g.ty(mm).dtype.is_float() && !kinds::is_library_matmul(g, &members, root, mm) {
            OFF_LIBRARY_BYTES
        } else {
            0.0
        }
    }
}

impl CostFunction<FusionNode> for FusionCost<'_> {
    type Cost = f64;
    fn cost<C: FnMut(Id) -> f64>(&mut self, enode: &FusionNode, mut costs: C) -> f64 {
        match enode {
            FusionNode::Value { node, .. } if self.graph.node(*node).op.is_source() => 0.0,
            FusionNode::Value { .. } => f64::INFINITY,
            FusionNode::Kernel {
                root,
                kind,
                members,
                inputs,
            } => {
                let written = self.target.bytes(self.graph.ty(*root)) as f64;
                let own = self.target.launch_cost_bytes
                    + written
                    + self.off_library(*kind, members, *root)
                    + self.epilogue_left_out(*kind, *root);
                inputs.iter().fold(own, |sum, &i| {
                    let Some((bytes, users)) = self.values.get(&i) else {
                        return sum + costs(i);
                    };
                    // This kernel and, at most, one other kernel per user outside it read `i`.
                    let outside = users.iter().filter(|u| members.binary_search(u).is_err());
                    sum + bytes + costs(i) / (1 + outside.count()) as f64
                })
            }
        }
    }
}

fn extract(search: &Search) -> Result<Vec<Kernel>, OptError> {
    let g = search.graph;
    let values = g
        .node_ids()
        .map(|n| {
            let bytes = search.target.bytes(g.ty(n)) as f64;
            (
                search.egraph.find(search.class[n.index()]),
                (bytes, g.users(n)),
            )
        })
        .collect();
    let cost = FusionCost {
        graph: g,
        target: search.target,
        values,
    };
    let extractor = Extractor::new(&search.egraph, cost);
    let mut kernels = Vec::new();
    let mut seen: HashSet<NodeId> = HashSet::new();
    let mut stack: Vec<NodeId> = search.results.iter().copied().collect();
    while let Some(n) = stack.pop() {
        if g.node(n).op.is_source() || !seen.insert(n) {
            continue;
        }
        let best = extractor.find_best_node(search.class[n.index()]);
        let FusionNode::Kernel {
            root,
            kind,
            members,
            ..
        } = best
        else {
            return Err(OptError::NoKernel {
                node: n,
                op: g.node(n).op.name(),
            });
        };
        let members_set: BTreeSet<NodeId> = members.iter().copied().collect();
        let inputs = search.inputs(&members_set);
        stack.extend(inputs.iter().copied());
        let bytes_read = inputs.iter().map(|&i| search.target.bytes(g.ty(i))).sum();
        kernels.push(Kernel {
            kind: *kind,
            root: *root,
            members: members.clone(),
            inputs,
            bytes_read,
            bytes_written: search.target.bytes(g.ty(*root)),
        });
    }
    let mut kernels = merge_custom_siblings(g, kernels);
    // A kernel's first output comes after everything it reads and before every reader of its
    // outputs, so this order has each kernel after those it reads.
    kernels.sort_by_key(|k| k.outputs().iter().min().copied());
    Ok(kernels)
}

/// Merges the kernels of sibling custom nodes (one kernel's outputs over the same operands)
/// into one kernel writing them all: the program runs once for all its outputs, not once per
/// output with the others' stores dropped. Each was a kernel alone, so the merged one reads the
/// same inputs and nothing else changes.
fn merge_custom_siblings(g: &Graph, kernels: Vec<Kernel>) -> Vec<Kernel> {
    let mut merged: Vec<Kernel> = Vec::with_capacity(kernels.len());
    let mut group_of: HashMap<(CustomRef, Vec<NodeId>), usize> = HashMap::new();
    for kernel in kernels {
        let Op::Custom { kernel: shared, .. } = &g.node(kernel.root).op else {
            merged.push(kernel);
            continue;
        };
        let key = (shared.clone(), g.operands(kernel.root).to_vec());
        match group_of.get(&key) {
            Some(&i)
                if !merged[i]
                    .members
                    .iter()
                    .any(|&m| g.node(m).op == g.node(kernel.root).op) =>
            {
                let into = &mut merged[i];
                into.members.push(kernel.root);
                into.members.sort_unstable();
                into.root = *into.members.last().unwrap_or(&kernel.root);
                into.bytes_written += kernel.bytes_written;
            }
            _ => {
                group_of.insert(key, merged.len());
                merged.push(kernel);
            }
        }
    }
    merged
}
