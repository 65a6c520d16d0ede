//! Sharding: the graph each device of a mesh runs (SPMD), cut from a whole graph.
//!
//! Takes a verified graph without collectives, a mesh of `world` devices and the shardings the
//! user gives for some inputs, parameters and states ([`Sharding`]); gives a verified graph for
//! one device, whose sources are the devices' shards, whose outputs are the whole graph's
//! outputs on every device, and a [`ShardPlan`] naming every source's sharding. Every device
//! runs the same graph; only the shards of its data differ.
//!
//! **Propagation.** Each value gets a placement: replicated, split along an axis, or a partial
//! sum (or max, min) that devices must combine. A rule per op maps its operands' placements to
//! its own (elementwise ops keep a split whose axis the other operands have whole or broadcast;
//! a reduction over a split axis gives a partial; a matmul over a split contraction gives a
//! partial sum; reshapes, permutes, squeezes, broadcasts, slices, pads, concats and gathers
//! carry a split through the axes they leave whole; a convolution keeps a batch split or splits
//! by output channel). Sources the user did not shard follow their users, to a fixed point: a
//! parameter that meets a split value elementwise, or as the other factor of a product over a
//! split contraction, is split to match; a state follows the value written to it. Under
//! [`ShardOptions::tensor_parallel`], a 2-D parameter multiplied by a replicated activation is
//! split by output column (Megatron's rule: q/k/v and gate/up by output, then o and down by input
//! through propagation, attention by heads through the reshapes).
//!
//! **Collectives.** Where an op needs an operand placed otherwise, a collective is inserted: a
//! partial becomes replicated by `all_reduce_*`, a split becomes replicated by `all_gather`, a
//! partial sum becomes split by `reduce_scatter`. A reduction of a type NCCL has none for (16-bit
//! integers, 8-bit floats) is done in a wider one between two casts ([`reduce_width`]), so
//! every backend runs the same graph. A value is never cut from a replicated one
//! (that would need the device's rank), so a rule that cannot keep a split gathers it. Outputs
//! are made replicated.
//!
//! **Refusals.** A split axis must be divisible by the world: a static size that the world does
//! not divide, or a symbolic size not provably divisible, is refused naming the node, the dim and
//! the mesh; so is a user sharding whose axis is out of range, a state whose update cannot keep
//! its sharding, and a graph that already has collectives.

use std::collections::BTreeMap;
use tir_graph::collective::{ShardPlan, Sharding};
use tir_graph::op::{ReduceOp, ReshapeDim, SliceRange};
use tir_graph::{BinaryOp, DType, Dim, DimExpr, Graph, GraphError, NodeId, Op, Shape, TensorType};

/// What sharding should do beyond the user's shardings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardOptions {
    /// Apply Megatron's rule (see the module doc) to the parameters the user did not shard.
    pub tensor_parallel: bool,
}

/// A graph for one device of a mesh and how it relates to the whole graph.
#[derive(Clone, Debug)]
pub struct ShardedGraph {
    /// The graph every device runs, on its shards.
    pub local: Graph,
    pub plan: ShardPlan,
}

/// Why a graph cannot be sharded as asked; names the node, the dim and the mesh.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("a mesh needs at least one device")]
    EmptyMesh,
    #[error("the graph has no input, parameter or state `{0}` to shard")]
    UnknownSource(String),
    #[error("{name} ({ty}) cannot be split along axis {axis}: it has {rank} axes")]
    AxisOutOfRange {
        name: String,
        ty: TensorType,
        axis: usize,
        rank: usize,
    },
    #[error("{what}: axis {axis} ({dim}) is not divisible by the mesh of {world} devices")]
    NotDivisible {
        what: String,
        axis: usize,
        dim: Dim,
        world: u32,
    },
    #[error("node {node} ({op}): the graph already has collectives; shard the whole graph")]
    HasCollective { node: NodeId, op: &'static str },
    #[error("node {node} ({op}) writes state `{state}`, {sharding}, with a value that cannot be placed so on a mesh of {world} devices")]
    StateUpdate {
        node: NodeId,
        op: &'static str,
        state: String,
        sharding: Sharding,
        world: u32,
    },
    #[error("tensor parallelism over {world} devices splits nothing in this graph: no weight has a dim that {world} divides where Megatron's rule would cut it")]
    NothingSplit { world: u32 },
    #[error("sharding built an invalid graph: {0}")]
    Graph(#[from] GraphError),
    #[error("sharding failed (a bug in tir): {0}")]
    Internal(String),
}

/// Where a value of the whole graph lies on the devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    Replicated,
    Split(usize),
    /// Each device holds a part; the value is their combination by this op.
    Partial(ReduceOp),
}

/// Cuts `graph` for a mesh of `world` devices with the sources `shardings` names placed so (see
/// the module doc).
pub fn shard(
    graph: &Graph,
    world: u32,
    shardings: &BTreeMap<String, Sharding>,
    options: &ShardOptions,
) -> Result<ShardedGraph, ShardError> {
    if world == 0 {
        return Err(ShardError::EmptyMesh);
    }
    if let Some(id) = graph
        .node_ids()
        .find(|&id| graph.node(id).op.is_collective())
    {
        let op = graph.node(id).op.name();
        return Err(ShardError::HasCollective { node: id, op });
    }
    let mut decided = BTreeMap::new();
    for (name, &sharding) in shardings {
        let id = graph
            .source(name)
            .ok_or_else(|| ShardError::UnknownSource(name.clone()))?;
        check_source_split(graph, id, name, sharding, world)?;
        decided.insert(name.clone(), sharding);
    }
    // Each round either decides a source or ends: at most one round per source, plus the last.
    for _ in 0..=graph.len() {
        let mut cutter = Cutter::new(graph, world, &decided, options);
        cutter.run()?;
        // One decision a round, the earliest in graph order: a later wish may have been made
        // against a placement that this decision changes.
        let Some((name, sharding)) = cutter.wishes.into_iter().next() else {
            let plan = ShardPlan {
                world,
                sources: source_shardings(graph, &decided),
            };
            return Ok(ShardedGraph {
                local: cutter.local,
                plan,
            });
        };
        decided.insert(name, sharding);
    }
    Err(ShardError::Internal(
        "propagation did not reach a fixed point".into(),
    ))
}

/// Every source's sharding: decided ones as decided, the rest replicated.
fn source_shardings(
    graph: &Graph,
    decided: &BTreeMap<String, Sharding>,
) -> BTreeMap<String, Sharding> {
    graph
        .node_ids()
        .filter_map(|id| graph.node(id).op.source_name())
        .map(|name| {
            let s = decided.get(name).copied().unwrap_or(Sharding::Replicated);
            (name.to_string(), s)
        })
        .collect()
}

fn check_source_split(
    graph: &Graph,
    id: NodeId,
    name: &str,
    sharding: Sharding,
    world: u32,
) -> Result<(), ShardError> {
    let Sharding::Split(axis) = sharding else {
        return Ok(());
    };
    let ty = graph.ty(id);
    if axis >= ty.rank() {
        return Err(ShardError::AxisOutOfRange {
            name: format!("{} `{name}`", graph.node(id).op),
            ty: ty.clone(),
            axis,
            rank: ty.rank(),
        });
    }
    local_dim(&ty.shape.dims()[axis], world).ok_or_else(|| ShardError::NotDivisible {
        what: format!("{} `{name}` ({ty})", graph.node(id).op),
        axis,
        dim: ty.shape.dims()[axis].clone(),
        world,
    })?;
    Ok(())
}

/// `d / world`, where `world` divides `d` (for a symbolic `d`: provably, as polynomials).
fn local_dim(d: &Dim, world: u32) -> Option<Dim> {
    let q = d
        .to_expr()
        .exact_div(&DimExpr::constant(i64::from(world)))?;
    Dim::from_expr(q).ok()
}

/// The product of `dims` as an expression.
fn product(dims: &[Dim]) -> Option<DimExpr> {
    dims.iter()
        .try_fold(DimExpr::constant(1), |acc, d| acc.mul(&d.to_expr()).ok())
}

/// One round: builds the local graph under the decided shardings and collects the shardings
/// that undecided sources should take.
struct Cutter<'a> {
    graph: &'a Graph,
    world: u32,
    decided: &'a BTreeMap<String, Sharding>,
    options: &'a ShardOptions,
    local: Graph,
    /// Each whole-graph node's value in the local graph, and its placement.
    values: Vec<(NodeId, Placement)>,
    /// Values already converted to another placement.
    converted: BTreeMap<(NodeId, PlacementKey), NodeId>,
    /// Shardings undecided sources should take, in the order the graph asked for them.
    wishes: Vec<(String, Sharding)>,
}

/// [`Placement`] as a map key.
type PlacementKey = (u8, usize);

/// The type a reducing collective of `dtype` elements runs in, where `dtype` is one NCCL does
/// not reduce: 16-bit integers in 32 bits (a wrapped sum is the same modulo 2^16; max and min
/// are exact), 8-bit floats in `f32` (the partials' sum is exact there and rounds once).
/// `None`: reduced as it is.
pub fn reduce_width(dtype: DType) -> Option<DType> {
    match dtype {
        DType::I16 => Some(DType::I32),
        DType::U16 => Some(DType::U32),
        DType::F8E4M3 | DType::F8E5M2 => Some(DType::F32),
        _ => None,
    }
}

fn key(p: Placement) -> PlacementKey {
    match p {
        Placement::Replicated => (0, 0),
        Placement::Split(a) => (1, a),
        Placement::Partial(op) => (2, op as usize),
    }
}

impl<'a> Cutter<'a> {
    fn new(
        graph: &'a Graph,
        world: u32,
        decided: &'a BTreeMap<String, Sharding>,
        options: &'a ShardOptions,
    ) -> Cutter<'a> {
        Cutter {
            graph,
            world,
            decided,
            options,
            local: Graph::new(),
            values: Vec::with_capacity(graph.len()),
            converted: BTreeMap::new(),
            wishes: Vec::new(),
        }
    }

    fn run(&mut self) -> Result<(), ShardError> {
        for id in self.graph.node_ids() {
            let value = self.node(id)?;
            self.values.push(value);
        }
        for (name, id) in self.graph.outputs() {
            let whole = self.place(*id, Placement::Replicated)?;
            self.local.add_output(name, whole)?;
        }
        Ok(())
    }

    fn placement(&self, id: NodeId) -> Placement {
        self.values[id.index()].1
    }

    /// Whether `id` is a source whose sharding is not decided yet (so it may follow a wish).
    fn undecided_source(&self, id: NodeId) -> Option<&'a str> {
        let name = self.graph.node(id).op.source_name()?;
        (!self.decided.contains_key(name)).then_some(name)
    }

    /// Asks that undecided source `id` be split along `axis` in a later round, where the world
    /// divides that axis. Through a transpose or a cast of a source, the source is asked (a
    /// `Linear` weight is stored transposed and may be cast to the compute dtype).
    fn wish(&mut self, id: NodeId, axis: usize) {
        let (source, axis) = self.through_layout(id, axis);
        let Some(name) = self.undecided_source(source) else {
            return;
        };
        let ty = self.graph.ty(source);
        if axis < ty.rank() && local_dim(&ty.shape.dims()[axis], self.world).is_some() {
            self.wishes.push((name.to_string(), Sharding::Split(axis)));
        }
    }

    /// The node behind `id`'s chain of permutes and casts, and the axis `axis` of `id` is there.
    fn through_layout(&self, mut id: NodeId, mut axis: usize) -> (NodeId, usize) {
        loop {
            match &self.graph.node(id).op {
                Op::Permute { perm } => axis = perm[axis],
                Op::Cast { .. } => {}
                _ => return (id, axis),
            }
            id = self.graph.operands(id)[0];
        }
    }

    /// The local value of whole-graph node `id` placed as `to`, inserting collectives. Rules
    /// ask only for what collectives can give: a whole value, or a split of a split (along its
    /// axis) or of a partial sum.
    fn place(&mut self, id: NodeId, to: Placement) -> Result<NodeId, ShardError> {
        let (local, from) = self.values[id.index()];
        if from == to {
            return Ok(local);
        }
        if let Some(&done) = self.converted.get(&(id, key(to))) {
            return Ok(done);
        }
        let world = self.world;
        let op = match (from, to) {
            (Placement::Partial(op), Placement::Replicated) => Op::AllReduce { op, world },
            (Placement::Split(axis), Placement::Replicated) => Op::AllGather { axis, world },
            (Placement::Partial(ReduceOp::Sum), Placement::Split(axis)) => {
                Op::ReduceScatter { axis, world }
            }
            _ => {
                return Err(ShardError::Internal(format!(
                    "node {id} is {from:?} and was asked to be {to:?}"
                )))
            }
        };
        let converted = self.collective(op, local)?;
        self.converted.insert((id, key(to)), converted);
        Ok(converted)
    }

    /// The collective `op` of `local`, a reducing one done in [`reduce_width`]'s type where
    /// `local`'s own has no reduction on every backend (cast there and back).
    fn collective(&mut self, op: Op, local: NodeId) -> Result<NodeId, ShardError> {
        let dtype = self.local.ty(local).dtype;
        let reduces = matches!(op, Op::AllReduce { .. } | Op::ReduceScatter { .. });
        match reduce_width(dtype).filter(|_| reduces) {
            Some(wide) => {
                let widened = self.add(Op::Cast { to: wide }, &[local])?;
                let reduced = self.add(op, &[widened])?;
                self.add(Op::Cast { to: dtype }, &[reduced])
            }
            None => self.add(op, &[local]),
        }
    }

    fn add(&mut self, op: Op, operands: &[NodeId]) -> Result<NodeId, ShardError> {
        Ok(self.local.add_node(op, operands, None)?)
    }

    /// The local value and placement of whole-graph node `id`.
    fn node(&mut self, id: NodeId) -> Result<(NodeId, Placement), ShardError> {
        let node = self.graph.node(id);
        if node.op.is_source() {
            return self.source(id);
        }
        let operands = self.graph.operands(id);
        let rule = self.rule(id, &operands)?;
        let mut locals = Vec::with_capacity(operands.len());
        for (&o, &p) in operands.iter().zip(&rule.operands) {
            locals.push(self.place(o, p)?);
        }
        let local = self.add(rule.op, &locals)?;
        Ok((local, rule.result))
    }

    fn source(&mut self, id: NodeId) -> Result<(NodeId, Placement), ShardError> {
        let node = self.graph.node(id);
        let sharding = node
            .op
            .source_name()
            .and_then(|n| self.decided.get(n).copied())
            .unwrap_or(Sharding::Replicated);
        let (ty, placement) = match sharding {
            Sharding::Replicated => (node.ty.clone(), Placement::Replicated),
            Sharding::Split(axis) => {
                let what = || format!("{} {id}", node.op);
                let ty = self.split_type(&node.ty, axis, what)?;
                (ty, Placement::Split(axis))
            }
        };
        let local = self.local.add_node(node.op.clone(), &[], Some(ty))?;
        Ok((local, placement))
    }

    /// `ty` with axis `axis` divided by the world; `what` names the value for the refusal.
    fn split_type(
        &self,
        ty: &TensorType,
        axis: usize,
        what: impl Fn() -> String,
    ) -> Result<TensorType, ShardError> {
        let mut dims = ty.shape.dims().to_vec();
        dims[axis] =
            local_dim(&dims[axis], self.world).ok_or_else(|| ShardError::NotDivisible {
                what: what(),
                axis,
                dim: dims[axis].clone(),
                world: self.world,
            })?;
        let shape = Shape::new(dims).map_err(|e| ShardError::NotDivisible {
            what: format!("{} ({e})", what()),
            axis,
            dim: ty.shape.dims()[axis].clone(),
            world: self.world,
        })?;
        Ok(TensorType::new(ty.dtype, shape))
    }
}

/// What a rule decides for one node: its local op, the placement each operand must have, and
/// the placement of its result.
struct Rule {
    op: Op,
    operands: Vec<Placement>,
    result: Placement,
}

impl Rule {
    /// Every operand whole, the op unchanged: always correct.
    fn replicated(op: &Op, n: usize) -> Rule {
        Rule {
            op: op.clone(),
            operands: vec![Placement::Replicated; n],
            result: Placement::Replicated,
        }
    }

    fn keep(op: &Op, operands: Vec<Placement>, result: Placement) -> Rule {
        Rule {
            op: op.clone(),
            operands,
            result,
        }
    }
}

impl Cutter<'_> {
    fn rule(&mut self, id: NodeId, operands: &[NodeId]) -> Result<Rule, ShardError> {
        let op = &self.graph.node(id).op;
        let placements: Vec<Placement> = operands.iter().map(|&o| self.placement(o)).collect();
        let n = operands.len();
        let all_whole = Rule::replicated(op, n);
        if placements.iter().all(|p| *p == Placement::Replicated) {
            if self.options.tensor_parallel && *op == Op::MatMul {
                self.wish_columns(operands[1]);
            }
            return Ok(all_whole);
        }
        let p0 = placements[0];
        let rule = match op {
            Op::Unary(_) | Op::Cast { .. } => match p0 {
                Placement::Split(_) => Some(Rule::keep(op, vec![p0], p0)),
                _ => None,
            },
            Op::Binary(b) => self.binary(*b, id, operands, &placements),
            Op::Select => self.elementwise(id, operands, &placements),
            Op::Reduce {
                op: r,
                axes,
                keepdims,
            } => reduce(op, *r, axes, *keepdims, p0),
            Op::MatMul => self.matmul(id, operands, &placements),
            Op::Reshape { .. } => self.reshape(id, operands[0], p0),
            Op::Permute { perm } => match p0 {
                Placement::Split(a) => perm
                    .iter()
                    .position(|&p| p == a)
                    .map(|j| Rule::keep(op, vec![p0], Placement::Split(j))),
                Placement::Partial(_) => Some(Rule::keep(op, vec![p0], p0)),
                Placement::Replicated => None,
            },
            Op::Squeeze { axes } => map_axis(op, p0, |a| {
                (!axes.contains(&a)).then(|| a - axes.iter().filter(|&&x| x < a).count())
            }),
            Op::Unsqueeze { axes } => map_axis(op, p0, |a| {
                let mut j = a;
                for k in 0..self.graph.ty(id).rank() {
                    if axes.contains(&k) && k <= j {
                        j += 1;
                    }
                }
                Some(j)
            }),
            Op::BroadcastTo { dims } => self.broadcast_to(id, operands[0], dims, p0),
            Op::Slice { ranges } => self.slice(id, operands[0], ranges, p0),
            Op::Pad { pads, .. } => match p0 {
                Placement::Split(a) if pads[a] == (0, 0) => Some(Rule::keep(op, vec![p0], p0)),
                _ => None,
            },
            Op::Concat { axis } => concat(op, *axis, &placements),
            Op::Gather { axis } => self.gather(op, *axis, operands, &placements),
            Op::Conv { groups, .. } => conv(op, *groups, &placements),
            Op::StateAssign | Op::StateWriteSlice { .. } => {
                return self.state_update(id, operands, &placements)
            }
            _ => None,
        };
        Ok(rule.unwrap_or(all_whole))
    }
}

/// A layout op that moves the split axis `a` to `f(a)` (`None`: it cannot keep it).
fn map_axis(op: &Op, p: Placement, f: impl Fn(usize) -> Option<usize>) -> Option<Rule> {
    match p {
        Placement::Split(a) => f(a).map(|j| Rule::keep(op, vec![p], Placement::Split(j))),
        Placement::Partial(_) => Some(Rule::keep(op, vec![p], p)),
        Placement::Replicated => None,
    }
}

fn reduce(op: &Op, r: ReduceOp, axes: &[usize], keepdims: bool, p: Placement) -> Option<Rule> {
    match p {
        Placement::Split(a) if !axes.contains(&a) => {
            let j = if keepdims {
                a
            } else {
                a - axes.iter().filter(|&&x| x < a).count()
            };
            Some(Rule::keep(op, vec![p], Placement::Split(j)))
        }
        Placement::Split(_) => match r {
            ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min => {
                Some(Rule::keep(op, vec![p], Placement::Partial(r)))
            }
            _ => None,
        },
        // A sum of partial sums is a partial sum of the whole.
        Placement::Partial(ReduceOp::Sum) if r == ReduceOp::Sum => Some(Rule::keep(op, vec![p], p)),
        _ => None,
    }
}

fn concat(op: &Op, axis: usize, placements: &[Placement]) -> Option<Rule> {
    match placements[0] {
        Placement::Split(a) if a != axis && placements.iter().all(|p| *p == placements[0]) => {
            Some(Rule::keep(op, placements.to_vec(), placements[0]))
        }
        _ => None,
    }
}

fn conv(op: &Op, groups: u64, placements: &[Placement]) -> Option<Rule> {
    use Placement::*;
    match (placements[0], placements[1]) {
        (Split(0), Replicated) => Some(Rule::keep(op, vec![Split(0), Replicated], Split(0))),
        (Replicated, Split(0)) if groups == 1 => {
            Some(Rule::keep(op, vec![Replicated, Split(0)], Split(1)))
        }
        _ => None,
    }
}

impl Cutter<'_> {
    /// Megatron's rule: a 2-D weight multiplied by a replicated activation is split by output
    /// column (also through a transpose, as a `Linear` stores its weight).
    fn wish_columns(&mut self, b: NodeId) {
        let (source, _) = self.through_layout(b, 0);
        if matches!(self.graph.node(source).op, Op::Parameter { .. })
            && self.graph.ty(b).rank() == 2
        {
            self.wish(b, 1);
        }
    }

    /// Where operand axis `k` of an operand of rank `r` lands in a result of rank `rank`.
    fn result_axis(k: usize, r: usize, rank: usize) -> usize {
        k + rank - r
    }

    /// The operand axis of `x` (a broadcast operand of a result of rank `rank`) at result axis
    /// `j`, unless `x` broadcasts along it (no such axis, or a static 1).
    fn operand_axis(&self, x: NodeId, j: usize, rank: usize) -> Option<usize> {
        let ty = self.graph.ty(x);
        let k = j.checked_sub(rank - ty.rank())?;
        (ty.shape.dims()[k] != Dim::Static(1)).then_some(k)
    }

    /// Elementwise ops with broadcasting: the first split operand's axis is kept where every
    /// other operand is split along it too or broadcasts along it; partials are combined first.
    fn elementwise(
        &mut self,
        id: NodeId,
        operands: &[NodeId],
        placements: &[Placement],
    ) -> Option<Rule> {
        let rank = self.graph.ty(id).rank();
        let op = &self.graph.node(id).op;
        let (first, axis) = operands
            .iter()
            .zip(placements)
            .find_map(|(&x, p)| match p {
                Placement::Split(a) => Some((x, *a)),
                _ => None,
            })?;
        let j = Self::result_axis(axis, self.graph.ty(first).rank(), rank);
        let mut wanted = Vec::with_capacity(operands.len());
        let mut cut = true;
        for (&x, &p) in operands.iter().zip(placements) {
            match self.operand_axis(x, j, rank) {
                None => wanted.push(Placement::Replicated),
                Some(k) if p == Placement::Split(k) => wanted.push(p),
                Some(k) => {
                    self.wish(x, k);
                    cut = false;
                }
            }
        }
        cut.then(|| Rule::keep(op, wanted, Placement::Split(j)))
    }

    /// Binary ops: linear ones keep a partial sum (`p + q`, `p - q` of two partial sums, `p · c`,
    /// `c · p`, `p / c` with `c` whole); the rest are elementwise.
    fn binary(
        &mut self,
        b: BinaryOp,
        id: NodeId,
        operands: &[NodeId],
        placements: &[Placement],
    ) -> Option<Rule> {
        use Placement::{Partial, Replicated};
        let op = &self.graph.node(id).op;
        let sum = Partial(ReduceOp::Sum);
        let linear = match (b, placements[0], placements[1]) {
            (BinaryOp::Add | BinaryOp::Sub, p, q) => p == sum && q == sum,
            (BinaryOp::Mul, p, q) => (p == sum && q == Replicated) || (p == Replicated && q == sum),
            (BinaryOp::Div, p, q) => p == sum && q == Replicated,
            _ => false,
        };
        if linear {
            return Some(Rule::keep(op, placements.to_vec(), sum));
        }
        self.elementwise(id, operands, placements)
    }

    /// `[.., m, k] @ [.., k, n]`: a split contraction gives a partial sum; a split `m`, `n` or
    /// batch axis stays split; a partial sum times a whole value stays a partial sum.
    fn matmul(
        &mut self,
        id: NodeId,
        operands: &[NodeId],
        placements: &[Placement],
    ) -> Option<Rule> {
        use Placement::{Partial, Replicated, Split};
        let op = &self.graph.node(id).op;
        let (a, b) = (operands[0], operands[1]);
        let (ra, rb) = (self.graph.ty(a).rank(), self.graph.ty(b).rank());
        let rank = self.graph.ty(id).rank();
        let sum = Partial(ReduceOp::Sum);
        let keep = |pa, pb, out| Some(Rule::keep(op, vec![pa, pb], out));
        match (placements[0], placements[1]) {
            (pa, pb) if (pa == sum && pb == Replicated) || (pa == Replicated && pb == sum) => {
                keep(pa, pb, sum)
            }
            (Split(x), Split(y)) if x == ra - 1 && y == rb - 2 => keep(Split(x), Split(y), sum),
            (Split(x), _) if x == ra - 1 => {
                self.wish(b, rb - 2);
                None
            }
            (_, Split(y)) if y == rb - 2 => {
                self.wish(a, ra - 1);
                None
            }
            (Replicated, Split(y)) if y == rb - 1 => keep(Replicated, Split(y), Split(rank - 1)),
            (Split(x), Replicated) if x == ra - 2 => keep(Split(x), Replicated, Split(rank - 2)),
            (pa, pb) => self.batch_matmul(op, (a, pa), (b, pb), rank),
        }
    }

    /// A matmul split along a batch axis: the other operand split along it too or broadcast.
    fn batch_matmul(
        &mut self,
        op: &Op,
        a: (NodeId, Placement),
        b: (NodeId, Placement),
        rank: usize,
    ) -> Option<Rule> {
        let batch_axis = |x: NodeId, p: Placement| match p {
            Placement::Split(k) if k + 2 < self.graph.ty(x).rank() => {
                Some(Self::result_axis(k, self.graph.ty(x).rank(), rank))
            }
            _ => None,
        };
        let j = batch_axis(a.0, a.1).or_else(|| batch_axis(b.0, b.1))?;
        let mut wanted = Vec::with_capacity(2);
        for (x, p) in [a, b] {
            let k = self
                .operand_axis(x, j, rank)
                .filter(|&k| k + 2 < self.graph.ty(x).rank());
            match k {
                None => wanted.push(Placement::Replicated),
                Some(k) if p == Placement::Split(k) => wanted.push(p),
                Some(k) => {
                    self.wish(x, k);
                    return None;
                }
            }
        }
        Some(Rule::keep(op, wanted, Placement::Split(j)))
    }

    /// A reshape keeps a split along axis `a` where an output axis starts at the same element
    /// offset (the dims before both have one product) and the world divides both: each device's
    /// part is then one contiguous range of that product's blocks on both sides.
    fn reshape(&mut self, id: NodeId, x: NodeId, p: Placement) -> Option<Rule> {
        let Op::Reshape { dims: target } = &self.graph.node(id).op else {
            return None;
        };
        let a = match p {
            Placement::Split(a) => a,
            Placement::Partial(_) => return Some(Rule::keep(&self.graph.node(id).op, vec![p], p)),
            Placement::Replicated => return None,
        };
        let before = product(&self.graph.ty(x).shape.dims()[..a])?;
        let out = self.graph.ty(id).shape.dims();
        let j = (0..out.len()).find(|&j| {
            product(&out[..j]).as_ref() == Some(&before) && local_dim(&out[j], self.world).is_some()
        })?;
        let mut dims = target.clone();
        if let ReshapeDim::Dim(d) = &dims[j] {
            dims[j] = ReshapeDim::Dim(local_dim(d, self.world)?);
        }
        Some(Rule::keep(
            &Op::Reshape { dims },
            vec![p],
            Placement::Split(j),
        ))
    }

    fn broadcast_to(&mut self, id: NodeId, x: NodeId, dims: &[Dim], p: Placement) -> Option<Rule> {
        let op = &self.graph.node(id).op;
        match p {
            Placement::Split(a) => {
                let j = Self::result_axis(a, self.graph.ty(x).rank(), dims.len());
                let mut local = dims.to_vec();
                local[j] = local_dim(&dims[j], self.world)?;
                let op = Op::BroadcastTo { dims: local };
                Some(Rule::keep(&op, vec![p], Placement::Split(j)))
            }
            Placement::Partial(_) => Some(Rule::keep(op, vec![p], p)),
            Placement::Replicated => None,
        }
    }

    /// A slice keeps a split along an axis it takes whole.
    fn slice(
        &mut self,
        id: NodeId,
        x: NodeId,
        ranges: &[SliceRange],
        p: Placement,
    ) -> Option<Rule> {
        let op = &self.graph.node(id).op;
        match p {
            Placement::Split(a) => {
                let r = &ranges[a];
                let whole = r.start == 0
                    && r.step == 1
                    && r.stop
                        .as_ref()
                        .is_none_or(|s| *s == self.graph.ty(x).shape.dims()[a]);
                if !whole {
                    return None;
                }
                let mut local = ranges.to_vec();
                local[a] = SliceRange::FULL;
                Some(Rule::keep(&Op::Slice { ranges: local }, vec![p], p))
            }
            Placement::Partial(_) => Some(Rule::keep(op, vec![p], p)),
            Placement::Replicated => None,
        }
    }

    /// `gather(data, indices)` along `axis`: data split along another axis, or indices split.
    fn gather(
        &mut self,
        op: &Op,
        axis: usize,
        operands: &[NodeId],
        placements: &[Placement],
    ) -> Option<Rule> {
        use Placement::{Replicated, Split};
        let index_rank = self.graph.ty(operands[1]).rank();
        match (placements[0], placements[1]) {
            (Split(a), Replicated) if a != axis => {
                let j = if a < axis { a } else { a - 1 + index_rank };
                Some(Rule::keep(op, vec![Split(a), Replicated], Split(j)))
            }
            (Replicated, Split(b)) => {
                Some(Rule::keep(op, vec![Replicated, Split(b)], Split(axis + b)))
            }
            _ => None,
        }
    }

    /// A state update writes the state as it is placed; an undecided state follows a split
    /// value (written whole meanwhile).
    fn state_update(
        &mut self,
        id: NodeId,
        operands: &[NodeId],
        placements: &[Placement],
    ) -> Result<Rule, ShardError> {
        let node = self.graph.node(id);
        let state = operands[0];
        let write_axis = match node.op {
            Op::StateWriteSlice { axis, .. } => Some(axis),
            _ => None,
        };
        let held = placements[0];
        let value = placements[1];
        let mut wanted = vec![Placement::Replicated; operands.len()];
        wanted[0] = held;
        match (held, value) {
            (Placement::Replicated, Placement::Split(a)) if write_axis != Some(a) => {
                self.wish(state, a);
            }
            (Placement::Split(a), Placement::Split(b)) if a == b && write_axis != Some(a) => {
                wanted[1] = held;
            }
            (Placement::Split(a), Placement::Partial(ReduceOp::Sum)) if write_axis != Some(a) => {
                wanted[1] = held;
            }
            (Placement::Replicated, _) => {}
            (Placement::Split(_), _) | (Placement::Partial(_), _) => {
                return Err(ShardError::StateUpdate {
                    node: id,
                    op: node.op.name(),
                    state: node_name(self.graph, state),
                    sharding: match held {
                        Placement::Split(a) => Sharding::Split(a),
                        _ => Sharding::Replicated,
                    },
                    world: self.world,
                })
            }
        }
        Ok(Rule::keep(&node.op, wanted, held))
    }
}

fn node_name(graph: &Graph, id: NodeId) -> String {
    graph
        .node(id)
        .op
        .source_name()
        .map_or_else(|| id.to_string(), str::to_string)
}
