//! The channels-last layout pass: convolutions and the layout-agnostic ops after them compute on
//! values whose channels are the innermost axis (`[N, S.., C]`, NHWC for 2-D), whatever layout
//! the graph states.
//!
//! Takes a verified [`Graph`]. A *region* starts at every `conv` and grows forward through the
//! ops whose meaning does not depend on the layout: elementwise ops (unary, cast, binary,
//! select) of the conv's rank whose operands of that shape are region values or of the same
//! shape, the others broadcasting (a channel bias `[C, 1, 1]`, the importer's BatchNorm
//! parameters, scalars). Each region value is rebuilt channels-last: a conv becomes
//! `permute(conv(x, w), to_last)` (the conv op itself stays channels-first, so the oracle and the
//! text form are unchanged; lowering reads its operand and writes its result through those
//! permutes with channels-last strides), an elementwise op applies to the channels-last operands
//! (a channel bias becomes `[C]`, any other broadcast operand is permuted too), and a conv whose
//! input is a region value reads `permute(v, to_first)`. A reduction over every spatial axis and
//! not the channels (a global pool) reads the region value directly. Only where a region value
//! leaves the region (a graph output, another op) is it permuted back, once per value.
//!
//! Guarantees: the same inputs, parameters, states and outputs with the same types, and the same
//! values (every rewrite composes index maps exactly); every conv's result is used only by one
//! permute to channels-last ([`verify`] checks both). A conv whose input comes from outside a
//! region reads it as it lies (no permute pair for the simplifier to cancel; whether it reads a
//! channels-last copy instead is decided after simplification, below). The simplifier then
//! cancels `permute(permute(x, p), q)` pairs ([`crate::simplify::layout`]).
//!
//! **Inputs from outside a chain** ([`copy_conv_inputs`], after simplification, where the
//! backend asks for it: [`crate::FusionTarget::conv_inputs_channels_last`]): a convolution
//! whose input is read as it lies, channels-first (an NCHW graph input, or a value no chain
//! made), reads it through `permute(permute(x, to_last), to_first)`. Fusion makes the inner
//! permute a layout kernel of its own or the end of the kernel that produces `x`, and puts the
//! outer one in the conv's kernel, which then reads a channels-last buffer
//! ([`crate::fusion::kinds`] keeps the pair out of one kernel). It runs after the simplifier,
//! which would cancel the pair. A conv kernel that reads channels-last also stores
//! channels-last (fusion's rule), so the permute back to the graph's layout is a layout kernel
//! too, or the load of whatever reads the value. The cost argument: two more passes, over the
//! input and over the output (H200, n32 c64 56x56 fp16: 13 µs each, at 2 TB/s), against
//! cuDNN's NCHW engines (that 3x3 conv: 0.502 ms NCHW, 0.030 NHWC; a 1x1 256→64 at 56x56:
//! 0.27 against 0.023). Storing NCHW from the NHWC-reading conv instead, fused, is no saving:
//! cuDNN's engines for mixed layouts measured 0.64 ms on that 3x3.
//! Left as they lie: a depthwise or grouped conv of fewer than
//! [`MIN_GROUP_CHANNELS`] channels a group (cuDNN's NHWC depthwise measured 0.356 against 0.138
//! ms NCHW), and an input whose two layouts are the same bytes (one channel, or one position).
//! The generated kernel's tap-major NHWC loop is slower than its NCHW gather on three of the
//! five bench shapes (c64 56x56: 0.55 against 0.19 ms), so a backend that runs convolutions
//! by its generated kernel by policy turns the copy off (the CUDA backend under
//! `$TIR_CONV=generated`); under `auto` without cuDNN the generated kernel reads the copy.
//!
//! Why a pass before saturation rather than egg rules: which values live channels-last is a
//! global decision over connected chains (a value is permuted once however many users it has),
//! which a local rewrite would have to rediscover by pushing permutes through every elementwise
//! op in both directions, rules that grow the e-graph with a copy of each op per layout and that
//! the least-depth extraction would not prefer anyway. The pass is linear in the graph.

use crate::OptError;
use std::collections::{BTreeMap, BTreeSet};
use tir_graph::{DType, Dim, Graph, GraphError, NodeId, Op, ReshapeDim};

/// The permutation taking a channels-first value of `rank` to channels-last: `[0, 2.., 1]`.
pub fn to_last(rank: usize) -> Vec<usize> {
    let mut perm = vec![0];
    perm.extend(2..rank);
    perm.push(1);
    perm
}

/// The permutation taking a channels-last value of `rank` back to channels-first.
pub fn to_first(rank: usize) -> Vec<usize> {
    let mut perm = vec![0, rank - 1];
    perm.extend(1..rank - 1);
    perm
}

/// Whether `op` computes each element from the same element of its operands.
fn is_elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Cast { .. } | Op::Binary(_) | Op::Select
    )
}

/// Whether `conv` is a convolution the pass relays out (1 to 3 spatial axes).
fn relaid_conv(g: &Graph, conv: NodeId) -> bool {
    matches!(g.node(conv).op, Op::Conv { .. }) && (3..=5).contains(&g.ty(conv).rank())
}

/// The nodes whose values the pass holds channels-last.
fn region(g: &Graph) -> BTreeSet<NodeId> {
    let mut region = BTreeSet::new();
    // Node ids are topological: operands are decided before their users.
    for id in g.node_ids() {
        let node = g.node(id);
        let joins = if matches!(node.op, Op::Conv { .. }) {
            relaid_conv(g, id)
        } else if is_elementwise(&node.op) {
            let operands = g.operands(id);
            let shape = &node.ty.shape;
            operands.iter().any(|o| region.contains(o))
                && operands
                    .iter()
                    .all(|o| !region.contains(o) || g.ty(*o).shape == *shape)
                && operands.iter().all(|o| g.ty(*o).rank() <= shape.rank())
        } else {
            false
        };
        if joins {
            region.insert(id);
        }
    }
    region
}

/// Whether `op` on a region value of `rank` is a reduction over every spatial axis and not the
/// channels or the batch, removing them: its result is the same computed channels-last.
fn spatial_pool_axes(op: &Op, rank: usize) -> Option<Vec<usize>> {
    let Op::Reduce { axes, keepdims, .. } = op else {
        return None;
    };
    let mut sorted = axes.clone();
    sorted.sort_unstable();
    let spatial: Vec<usize> = (2..rank).collect();
    (!keepdims && sorted == spatial).then(|| (1..rank - 1).collect())
}

/// Rebuilds the graph with the region channels-last.
struct Relayout<'a> {
    old: &'a Graph,
    region: BTreeSet<NodeId>,
    new: Graph,
    /// Each old node's value as the old graph lays it out, once built.
    value: BTreeMap<NodeId, NodeId>,
    /// Each region node's value channels-last.
    last: BTreeMap<NodeId, NodeId>,
    /// Non-region operands converted to channels-last for a region user, by old node.
    converted: BTreeMap<NodeId, NodeId>,
}

impl Relayout<'_> {
    fn add(&mut self, op: Op, operands: &[NodeId]) -> Result<NodeId, GraphError> {
        self.new.add_node(op, operands, None)
    }

    /// Old node `id`'s value in its own layout (a region value is permuted back once).
    fn value_of(&mut self, id: NodeId) -> Result<NodeId, GraphError> {
        if let Some(&v) = self.value.get(&id) {
            return Ok(v);
        }
        let last = self.last[&id];
        let perm = to_first(self.old.ty(id).rank());
        let v = self.add(Op::Permute { perm }, &[last])?;
        self.value.insert(id, v);
        Ok(v)
    }

    /// Operand `o` of a region op of shape rank `rank`, channels-last: a region value as it
    /// is; a channel vector (every axis 1 but the channels', right-aligned) reshaped to `[C]`; a
    /// value of ones as it is; anything else padded to `rank` and permuted.
    fn operand_last(&mut self, o: NodeId, rank: usize) -> Result<NodeId, GraphError> {
        if let Some(&v) = self.last.get(&o) {
            return Ok(v);
        }
        if let Some(&v) = self.converted.get(&o) {
            return Ok(v);
        }
        let v = self.value_of(o)?;
        let dims = self.old.ty(o).shape.dims().to_vec();
        let mut padded = vec![Dim::Static(1); rank - dims.len()];
        padded.extend(dims);
        let one = Dim::Static(1);
        let others_one = padded.iter().enumerate().all(|(i, d)| i == 1 || *d == one);
        let converted = if others_one && padded[1] == one {
            v
        } else if others_one {
            let dims = vec![ReshapeDim::Dim(padded[1].clone())];
            self.add(Op::Reshape { dims }, &[v])?
        } else {
            let full = if self.old.ty(o).rank() < rank {
                let dims = padded.iter().cloned().map(ReshapeDim::Dim).collect();
                self.add(Op::Reshape { dims }, &[v])?
            } else {
                v
            };
            let perm = to_last(rank);
            self.add(Op::Permute { perm }, &[full])?
        };
        self.converted.insert(o, converted);
        Ok(converted)
    }

    fn node(&mut self, id: NodeId) -> Result<(), GraphError> {
        let node = self.old.node(id).clone();
        let operands = self.old.operands(id);
        let rank = node.ty.rank();
        if !self.region.contains(&id) {
            let pooled = operands
                .first()
                .filter(|o| self.region.contains(o))
                .and_then(|&o| spatial_pool_axes(&node.op, self.old.ty(o).rank()).map(|a| (o, a)));
            let v = match (pooled, &node.op) {
                (Some((o, axes)), Op::Reduce { op, .. }) => {
                    let op = Op::Reduce {
                        op: *op,
                        axes,
                        keepdims: false,
                    };
                    let last = self.last[&o];
                    self.add(op, &[last])?
                }
                _ => {
                    let mapped = operands
                        .iter()
                        .map(|&o| self.value_of(o))
                        .collect::<Result<Vec<_>, _>>()?;
                    let declared = node.op.is_source().then(|| node.ty.clone());
                    self.new.add_node(node.op.clone(), &mapped, declared)?
                }
            };
            self.value.insert(id, v);
            return Ok(());
        }
        let last = if matches!(node.op, Op::Conv { .. }) {
            let (x, w) = (operands[0], operands[1]);
            // An input from outside the region is read as it lies (no permute pair to cancel).
            let x = match self.last.get(&x) {
                Some(&xl) => self.add(
                    Op::Permute {
                        perm: to_first(rank),
                    },
                    &[xl],
                )?,
                None => self.value_of(x)?,
            };
            let w = self.value_of(w)?;
            let conv = self.add(node.op.clone(), &[x, w])?;
            self.add(
                Op::Permute {
                    perm: to_last(rank),
                },
                &[conv],
            )?
        } else {
            let mapped = operands
                .iter()
                .map(|&o| self.operand_last(o, rank))
                .collect::<Result<Vec<_>, _>>()?;
            self.add(node.op.clone(), &mapped)?
        };
        self.last.insert(id, last);
        Ok(())
    }
}

/// Rewrites `graph` so that its convolutions and the layout-agnostic ops after them compute
/// channels-last (see the module doc). A graph without convolutions comes back unchanged.
pub fn channels_last(graph: &Graph) -> Result<Graph, OptError> {
    let region = region(graph);
    if region.is_empty() {
        return Ok(graph.clone());
    }
    let mut pass = Relayout {
        old: graph,
        region,
        new: Graph::new(),
        value: BTreeMap::new(),
        last: BTreeMap::new(),
        converted: BTreeMap::new(),
    };
    for id in graph.node_ids() {
        pass.node(id)?;
    }
    for (name, id) in graph.outputs() {
        let v = pass.value_of(*id)?;
        pass.new.add_output(name, v)?;
    }
    let relaid = pass.new;
    verify(graph, &relaid)?;
    Ok(relaid)
}

/// Grouped convolutions with fewer channels a group than this read their input as it lies.
pub const MIN_GROUP_CHANNELS: u64 = 8;

/// Whether `conv` reads its input as it lies, channels-first, where a channels-last copy pays
/// (see the module doc): a relaid conv whose input is not already read back from
/// channels-last, of at least [`MIN_GROUP_CHANNELS`] channels a group, whose input's two
/// layouts differ, and not of bf16: on the H200, cuDNN's bf16 engine for a lone conv read and
/// stored channels-last (`op/conv/bf16/2d_bias_sigmoid` with bias and sigmoid) wrote 2 of 800
/// elements wrong where the channels-first plan is right; until that is understood, bf16 keeps
/// the plan that was checked.
fn reads_copy(g: &Graph, conv: NodeId) -> bool {
    let Op::Conv { groups, .. } = g.node(conv).op else {
        return false;
    };
    if !relaid_conv(g, conv) || g.ty(conv).dtype == DType::BF16 {
        return false;
    }
    let x = g.operands(conv)[0];
    let rank = g.ty(x).rank();
    if g.node(x).op
        == (Op::Permute {
            perm: to_first(rank),
        })
    {
        return false;
    }
    let dims = g.ty(x).shape.dims();
    let is = |d: &Dim, n: u64| *d == Dim::Static(n);
    let channels = dims[1].as_static();
    let per_group = channels.map(|c| c / groups);
    let one_position = dims[2..].iter().all(|d| is(d, 1));
    per_group.is_none_or(|c| c >= MIN_GROUP_CHANNELS) && !is(&dims[1], 1) && !one_position
}

/// Rewrites a simplified `graph` so that every convolution that reads its input as it lies
/// where a channels-last copy pays (`reads_copy`) reads it through
/// `permute(permute(x, to_last), to_first)` (see the module doc). Values are unchanged; a graph
/// without such a convolution comes back unchanged.
pub fn copy_conv_inputs(graph: &Graph) -> Result<Graph, OptError> {
    let convs: BTreeSet<NodeId> = graph
        .node_ids()
        .filter(|&id| reads_copy(graph, id))
        .collect();
    if convs.is_empty() {
        return Ok(graph.clone());
    }
    let mut new = Graph::new();
    let mut value: BTreeMap<NodeId, NodeId> = BTreeMap::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        let mut operands: Vec<NodeId> = graph.operands(id).iter().map(|o| value[o]).collect();
        if convs.contains(&id) {
            let rank = node.ty.rank();
            let last = new.add_node(
                Op::Permute {
                    perm: to_last(rank),
                },
                &operands[..1],
                None,
            )?;
            operands[0] = new.add_node(
                Op::Permute {
                    perm: to_first(rank),
                },
                &[last],
                None,
            )?;
        }
        let declared = node.op.is_source().then(|| node.ty.clone());
        value.insert(id, new.add_node(node.op.clone(), &operands, declared)?);
    }
    for (name, id) in graph.outputs() {
        new.add_output(name, value[id])?;
    }
    verify_signature(graph, &new)?;
    Ok(new)
}

/// Checks what [`channels_last`] guarantees of `after` against `before`: a valid graph with the
/// same signature (sources and outputs, by name and type, in order), and every relaid conv's
/// result used by exactly one permute to channels-last.
pub fn verify(before: &Graph, after: &Graph) -> Result<(), OptError> {
    verify_signature(before, after)?;
    for id in after.node_ids() {
        if !relaid_conv(after, id) {
            continue;
        }
        let users = after.users(id);
        let expected = Op::Permute {
            perm: to_last(after.ty(id).rank()),
        };
        if users.len() != 1 || after.node(users[0]).op != expected {
            return Err(OptError::Layout {
                node: id,
                why: "its result is not read through one permute to channels-last".into(),
            });
        }
    }
    Ok(())
}

/// Checks that `after` is a valid graph with `before`'s signature: sources and outputs, by
/// name and type, in order.
fn verify_signature(before: &Graph, after: &Graph) -> Result<(), OptError> {
    after.verify()?;
    let signature = |g: &Graph| {
        let mut s: Vec<(String, tir_graph::TensorType)> = g
            .inputs()
            .into_iter()
            .chain(g.parameters())
            .chain(g.states())
            .map(|(n, id)| (n, g.ty(id).clone()))
            .collect();
        s.extend(
            g.outputs()
                .iter()
                .map(|(n, id)| (n.clone(), g.ty(*id).clone())),
        );
        s
    };
    let (b, a) = (signature(before), signature(after));
    if b.len() != a.len() {
        return Err(OptError::Signature(format!(
            "{} sources and outputs before, {} after",
            b.len(),
            a.len()
        )));
    }
    for ((name, before), (_, after)) in b.into_iter().zip(a) {
        if before != after {
            return Err(OptError::TypeChanged {
                what: name,
                before,
                after,
            });
        }
    }
    Ok(())
}
