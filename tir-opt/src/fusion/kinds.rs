//! Which sets of nodes form a kernel, and of which kind. A set that fits no kind is not a kernel.

use super::cost::FusionTarget;
use crate::fused::KernelKind;
use std::collections::{BTreeMap, BTreeSet};
use tir_graph::{BinaryOp, Dim, Graph, NodeId, Op, ReduceOp, Shape, UnaryOp};

/// What a member does, for the fusion rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Elementwise,
    Layout,
    /// A layout op that only renumbers elements one-to-one (usable on a store).
    Bijective,
    Reduce,
    MatMul,
    Conv,
    Gather,
    StateUpdate,
    Collective,
    Custom,
}

/// Whether `op` computes each element from the same element of its operands (broadcast): the
/// ops whose absorption into a kernel of their users never costs more than it saves.
pub(super) fn is_elementwise(op: &Op) -> bool {
    role(op) == Role::Elementwise
}

fn role(op: &Op) -> Role {
    match op {
        // An iota is computed from the coordinates alone and a dim value from the launch's dims:
        // elementwise ops of no operands.
        Op::Unary(_)
        | Op::Cast { .. }
        | Op::Binary(_)
        | Op::Select
        | Op::Iota { .. }
        | Op::DimValue { .. } => Role::Elementwise,
        Op::Reshape { .. } | Op::Permute { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            Role::Bijective
        }
        Op::BroadcastTo { .. } | Op::Slice { .. } | Op::Concat { .. } | Op::Pad { .. } => {
            Role::Layout
        }
        Op::Reduce { .. } => Role::Reduce,
        Op::MatMul => Role::MatMul,
        Op::Conv { .. } => Role::Conv,
        Op::Gather { .. } => Role::Gather,
        Op::StateAssign | Op::StateWriteSlice { .. } => Role::StateUpdate,
        Op::AllReduce { .. } | Op::AllGather { .. } | Op::ReduceScatter { .. } => Role::Collective,
        Op::Custom { .. } => Role::Custom,
        // Sources are never members.
        Op::Input { .. } | Op::Parameter { .. } | Op::Constant { .. } | Op::State { .. } => {
            Role::Layout
        }
    }
}

fn is_layout(r: Role) -> bool {
    matches!(r, Role::Layout | Role::Bijective)
}

/// The kind of kernel `members` (rooted at `root`, reading `inputs`) would be, if any.
pub fn classify(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    root: NodeId,
    inputs: usize,
    target: &FusionTarget,
) -> Option<KernelKind> {
    // A node alone is always a kernel, whatever it reads: fusion must never leave one out.
    if inputs > target.max_inputs && members.len() > 1 {
        return None;
    }
    let roles: Vec<(NodeId, Role)> = members.iter().map(|&m| (m, role(&g.node(m).op))).collect();
    let count = |r: Role| roles.iter().filter(|(_, x)| *x == r).count();
    let (matmuls, reduces, gathers, updates) = (
        count(Role::MatMul),
        count(Role::Reduce),
        count(Role::Gather),
        count(Role::StateUpdate),
    );
    // A collective moves whole buffers between devices: nothing fuses into it.
    if count(Role::Collective) > 0 {
        return (members.len() == 1).then_some(KernelKind::Collective);
    }
    // A user's kernel runs its author's tile program: nothing fuses into it.
    if count(Role::Custom) > 0 {
        return (members.len() == 1).then_some(KernelKind::Custom);
    }
    if updates > 0 {
        let root_updates = g.node(root).op.is_state_update() && updates == 1;
        let rest_simple = roles
            .iter()
            .all(|(m, r)| *m == root || *r == Role::Elementwise || is_layout(*r));
        return (root_updates && rest_simple && state_read_in_place(g, members, root))
            .then_some(KernelKind::StateUpdate);
    }
    if members.len() > 1 && conv_reads_back(g, root) {
        return None;
    }
    if count(Role::Conv) > 0 {
        return (count(Role::Conv) == 1 && conv_fits(g, members, root)).then_some(KernelKind::Conv);
    }
    if matmuls == 2 {
        return attention_fits(g, members, root).then_some(KernelKind::Attention);
    }
    if matmuls > 0 {
        // A gather joins a product only in an operand prologue (GPTQ's groups by `g_idx`).
        let feeds = operand_side(g, members, mm_of(g, members)?);
        let prologue_gathers = roles
            .iter()
            .filter(|(m, r)| *r == Role::Gather && feeds.contains(m))
            .count();
        return (matmuls == 1
            && reduces == 0
            && gathers == prologue_gathers
            && matmul_fits(g, members, root, target))
        .then_some(KernelKind::MatMul);
    }
    if reduces > 0 {
        if gathers > 0 {
            return None;
        }
        if members.len() == 1 {
            let row = row_shape(g, root, target).is_some();
            return Some(if row {
                KernelKind::RowReduction
            } else {
                KernelKind::Reduction
            });
        }
        return rows_fit(g, &roles, target).then_some(KernelKind::RowReduction);
    }
    if gathers > 0 {
        // The gathered data is read at data-dependent positions: it must come from memory.
        let data_loaded = roles
            .iter()
            .filter(|(_, r)| *r == Role::Gather)
            .all(|(m, _)| !members.contains(&g.operands(*m)[0]));
        return data_loaded.then_some(KernelKind::Gather);
    }
    if roles.iter().all(|(_, r)| is_layout(*r)) {
        return Some(KernelKind::Layout);
    }
    Some(KernelKind::Elementwise)
}

/// A state update kernel overwrites its state in place, so it may read the state only where
/// each program writes it: elementwise at the state's own shape, and not at all when it writes
/// only a slice.
fn state_read_in_place(g: &Graph, members: &BTreeSet<NodeId>, root: NodeId) -> bool {
    let state = g.operands(root)[0];
    let slice = matches!(g.node(root).op, Op::StateWriteSlice { .. });
    // A run-time write position is read from memory before the kernel writes anything.
    if g.operands(root)
        .get(2)
        .is_some_and(|pos| members.contains(pos))
    {
        return false;
    }
    members.iter().filter(|&&m| m != root).all(|&m| {
        !g.operands(m).contains(&state)
            || (!slice
                && role(&g.node(m).op) == Role::Elementwise
                && g.ty(m).shape == g.ty(state).shape)
    })
}

/// The row space `[outer.., L]` of a reduction over the innermost axis, with `L` static and
/// within the target's width.
fn row_shape(g: &Graph, reduce: NodeId, target: &FusionTarget) -> Option<Shape> {
    let Op::Reduce { axes, .. } = &g.node(reduce).op else {
        return None;
    };
    let operand = g.ty(g.operands(reduce)[0]).shape.clone();
    let last = operand.rank().checked_sub(1)?;
    let width = operand.dims()[last].as_static()?;
    // An empty row has nothing to tile; the general reduction handles it.
    let fits = (1..=target.max_reduction_width).contains(&width);
    (axes.as_slice() == [last] && fits).then_some(operand)
}

/// Whether `shape` is a full row `[outer.., L]`, a reduced row `[outer.., 1]` or `[outer..]`.
fn row_compatible(shape: &Shape, row: &Shape) -> bool {
    let outer = &row.dims()[..row.rank() - 1];
    shape == row
        || shape.dims() == outer
        || (shape.rank() == row.rank()
            && &shape.dims()[..outer.len()] == outer
            && shape.dims()[outer.len()] == Dim::Static(1))
}

/// All reductions are innermost over one row space, and every member's value lives in it.
fn rows_fit(g: &Graph, roles: &[(NodeId, Role)], target: &FusionTarget) -> bool {
    let mut row: Option<Shape> = None;
    for (m, r) in roles {
        if *r == Role::Reduce {
            let Some(shape) = row_shape(g, *m, target) else {
                return false;
            };
            if row.get_or_insert_with(|| shape.clone()) != &shape {
                return false;
            }
        }
    }
    let Some(row) = row else {
        return false;
    };
    roles.iter().all(|(m, r)| {
        let fits = |n: NodeId| row_compatible(&g.ty(n).shape, &row);
        match r {
            Role::Reduce | Role::Elementwise => fits(*m),
            // Layout inside a row kernel only between row-shaped values (e.g. [n, 1] -> [n]).
            Role::Bijective | Role::Layout => {
                !matches!(g.node(*m).op, Op::Permute { .. })
                    && fits(*m)
                    && g.operands(*m).iter().all(|o| fits(*o))
            }
            _ => false,
        }
    })
}

/// Whether a node of `op` may be part of a product's operand prologue (see
/// [`operand_prologue_fits`], which decides whether the whole prologue may).
pub(super) fn may_join_prologue(op: &Op) -> bool {
    matches!(
        role(op),
        Role::Elementwise | Role::Gather | Role::Layout | Role::Bijective
    ) && !op.is_source()
}

/// The matmul member of `members`, if any.
fn mm_of(g: &Graph, members: &BTreeSet<NodeId>) -> Option<NodeId> {
    members
        .iter()
        .copied()
        .find(|&m| g.node(m).op == Op::MatMul)
}

/// A matmul kernel: on the operand side layout ops (load index maps) and, per operand, perhaps
/// an [`operand_prologue_fits`] (a weight dequantized in the K loop); an epilogue of elementwise
/// ops over exactly the matmul's output shape (for float matmuls, where the target does not fuse
/// epilogues, only a [`residual_add`]), and last a chain of bijective layout ops up to the root
/// that composes into a strided store.
fn matmul_fits(g: &Graph, members: &BTreeSet<NodeId>, root: NodeId, target: &FusionTarget) -> bool {
    let Some(mm) = mm_of(g, members) else {
        return false;
    };
    let feeds_matmul = operand_side(g, members, mm);
    let prologues_ok = g
        .operands(mm)
        .iter()
        .all(|&o| operand_prologue_fits(g, members, o, target));
    let chain = store_chain(g, members, root);
    let out = &g.ty(mm).shape;
    let residual = residual_add(g, members, mm).map(|(add, _)| add);
    let epilogue_ok = members.iter().all(|&m| {
        let r = role(&g.node(m).op);
        if m == mm || chain.contains(&m) {
            true
        } else if feeds_matmul.contains(&m) {
            is_layout(r) || r == Role::Elementwise || r == Role::Gather
        } else {
            (target.fuse_matmul_epilogue || !g.ty(mm).dtype.is_float() || residual == Some(m))
                && r == Role::Elementwise
                && g.ty(m).shape == *out
                && g.operands(m).iter().all(|o| !chain.contains(o))
        }
    });
    prologues_ok
        && epilogue_ok
        && (chain.is_empty() || crate::layout::store_view(g, &chain).is_some())
}

/// The members that `operand` of a product is computed by (`operand` itself when a member, and
/// the members it depends on).
pub fn prologue_of(g: &Graph, members: &BTreeSet<NodeId>, operand: NodeId) -> BTreeSet<NodeId> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![operand];
    while let Some(n) = stack.pop() {
        if members.contains(&n) && seen.insert(n) {
            stack.extend(g.operands(n));
        }
    }
    seen
}

/// Whether the members computing `operand` of a product may run inside its K loop, each program
/// computing the operand tiles it multiplies: layout ops only (index maps), or a prologue of
/// elementwise ops, layout ops and gathers whose values are recomputed per output tile and
/// therefore must be cheap to recompute: its leaves (what it reads from memory) are fewer bytes
/// than the operand (a dequantized weight: packed int4 or int8/fp8 plus scales), or it only
/// casts and scales ([`is_cast_or_scale`]). A costlier prologue (`silu(gate) * up` read by
/// the down projection) would redo its work and reads for every tile of the other operand.
fn operand_prologue_fits(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    operand: NodeId,
    target: &FusionTarget,
) -> bool {
    let prologue = prologue_of(g, members, operand);
    let computes = prologue.iter().any(|&m| !is_layout(role(&g.node(m).op)));
    if !computes {
        return true;
    }
    let ok_roles = prologue.iter().all(|&m| {
        matches!(
            role(&g.node(m).op),
            Role::Elementwise | Role::Gather | Role::Layout | Role::Bijective
        )
    });
    // A gather's data, when computed in the kernel, is computed at the gathered positions.
    let leaves: BTreeSet<NodeId> = prologue
        .iter()
        .flat_map(|&m| g.operands(m))
        .filter(|o| !members.contains(o))
        .collect();
    let leaf_bytes: u64 = leaves.iter().map(|&l| target.bytes(g.ty(l))).sum();
    let smaller = leaf_bytes < target.bytes(g.ty(operand));
    ok_roles && (smaller || prologue.iter().all(|&m| is_cast_or_scale(g, m)))
}

/// Whether prologue member `m` is a layout op, a cast, or a product with (or quotient by) a
/// value of fewer elements broadcast over it (a per-channel scale).
fn is_cast_or_scale(g: &Graph, m: NodeId) -> bool {
    let elements = |n: NodeId| -> Option<u64> {
        g.ty(n)
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(d.as_static()?))
    };
    match g.node(m).op {
        Op::Cast { .. } => true,
        Op::Binary(BinaryOp::Mul | BinaryOp::Div) => match elements(m) {
            Some(all) => g
                .operands(m)
                .iter()
                .any(|&o| elements(o).is_some_and(|e| e < all)),
            None => false,
        },
        ref op => is_layout(role(op)),
    }
}

/// The member `mm + r` (or `r + mm`) that adds to matmul `mm` a tensor `r` read from memory with
/// exactly `mm`'s type, and that `r`: the one epilogue a library product takes as well
/// (cuBLASLt's `C` with `beta = 1`), so a target that runs products on a library still fuses it.
pub fn residual_add(g: &Graph, members: &BTreeSet<NodeId>, mm: NodeId) -> Option<(NodeId, NodeId)> {
    members.iter().find_map(|&m| {
        if g.node(m).op != Op::Binary(BinaryOp::Add) {
            return None;
        }
        let r = match g.operands(m)[..] {
            [x, r] | [r, x] if x == mm && r != mm => r,
            _ => return None,
        };
        (!members.contains(&r) && g.ty(r) == g.ty(mm)).then_some((m, r))
    })
}

/// A convolution kernel: the conv reads its weights from memory and its input from memory,
/// perhaps through the one permute back from channels-last ([`conv_input_permute`]); a conv
/// whose input is such a permute (a member or not) stores channels-last; the other
/// members are its epilogue ([`conv_epilogue`]): elementwise ops and permutes after the conv, up
/// to the root, and the layout ops that bring the epilogue's other operands there (a bias
/// reshaped to `[O, 1, 1]` or `[O]`), which do not depend on the conv.
fn conv_fits(g: &Graph, members: &BTreeSet<NodeId>, root: NodeId) -> bool {
    let Some(&conv) = members.iter().find(|&&m| role(&g.node(m).op) == Role::Conv) else {
        return false;
    };
    let Some(perms) = conv_epilogue(g, members, conv) else {
        return false;
    };
    let side = operand_side(g, members, conv);
    let read_back = conv_input_permute(g, members, conv);
    let input_ok = side.is_empty() || side == BTreeSet::from_iter(read_back);
    // A conv reading a channels-last input stores channels-last: cuDNN's NHWC engines are fast
    // only writing NHWC (H200, n32 c64 56x56 3x3: 0.64 ms storing NCHW, 0.030 NHWC), so the
    // permute back to channels-first is a layout kernel of its own or a load of the next one.
    let rank = g.ty(conv).rank();
    let x = g.operands(conv)[0];
    let reads_last = g.node(x).op
        == Op::Permute {
            perm: crate::channels_last::to_first(rank),
        };
    // (The conv alone is a kernel whatever it reads: fusion must never leave one out.)
    let store_ok = !reads_last
        || members.len() == 1
        || perms
            .get(&root)
            .is_some_and(|p| *p == crate::channels_last::to_last(rank));
    input_ok
        && store_ok
        && perms.contains_key(&root)
        && members.iter().all(|&m| {
            perms.contains_key(&m) || side.contains(&m) || (is_layout(role(&g.node(m).op)))
        })
}

/// The member permute through which `conv` reads its input, when there is one: `permute(v,
/// to_first)` of a value `v` read from memory (a channels-last activation, see
/// [`crate::channels_last`]).
pub fn conv_input_permute(g: &Graph, members: &BTreeSet<NodeId>, conv: NodeId) -> Option<NodeId> {
    let x = g.operands(conv)[0];
    let Op::Permute { perm } = &g.node(x).op else {
        return None;
    };
    let source = g.operands(x)[0];
    (members.contains(&x)
        && !members.contains(&source)
        && *perm == crate::channels_last::to_first(g.ty(x).rank()))
    .then_some(x)
}

/// Whether `node` is a permute to channels-first that a conv reads as its input: it belongs in
/// that conv's kernel ([`conv_input_permute`]), never at the root of another, since a kernel
/// ending in it would store channels-first and leave the conv a channels-first input (the
/// same bytes moved, but the slow layout for cuDNN and for the pair of permutes
/// [`crate::channels_last::copy_conv_inputs`] puts there, the layout it meant to change).
fn conv_reads_back(g: &Graph, node: NodeId) -> bool {
    let Op::Permute { perm } = &g.node(node).op else {
        return false;
    };
    *perm == crate::channels_last::to_first(g.ty(node).rank())
        && g.users(node)
            .iter()
            .any(|&u| matches!(g.node(u).op, Op::Conv { .. }) && g.operands(u)[0] == node)
}

/// The epilogue of `conv` in kernel `members`: every member that depends on the conv (the conv
/// included), with the axis of the conv's result that each of its axes is (`perm[i]`: axis `i`
/// of the member's value is axis `perm[i]` of the conv's), when every such member is an
/// elementwise op over the conv's result permuted (all its operands that depend on the conv
/// permuted alike) or a permute. `None` when a member is anything else.
pub fn conv_epilogue(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    conv: NodeId,
) -> Option<BTreeMap<NodeId, Vec<usize>>> {
    let out = g.ty(conv).shape.dims().to_vec();
    let mut perms = BTreeMap::from([(conv, (0..out.len()).collect::<Vec<usize>>())]);
    // Node ids are topological: one pass finds every member that depends on the conv.
    for &m in members.range(conv..).skip(1) {
        let after: Vec<&Vec<usize>> = g.operands(m).iter().filter_map(|o| perms.get(o)).collect();
        let Some(&first) = after.first() else {
            continue;
        };
        let perm = match &g.node(m).op {
            Op::Permute { perm } => perm.iter().map(|&p| first[p]).collect(),
            op if role(op) == Role::Elementwise && after.iter().all(|p| *p == first) => {
                first.clone()
            }
            _ => return None,
        };
        let permuted: Vec<Dim> = perm.iter().map(|&p| out[p].clone()).collect();
        if g.ty(m).shape.dims() != permuted {
            return None;
        }
        perms.insert(m, perm);
    }
    Some(perms)
}

/// The nodes of an attention pattern `softmax(f(q @ kt)) @ v`, found from its last product.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionPattern {
    /// `q @ kt`: `[.., s_q, s_k]`.
    pub scores: NodeId,
    /// `p @ v`: `[.., s_q, d_v]`.
    pub output: NodeId,
    /// The softmax's input: the last node of the score epilogue, or `scores`.
    pub logits: NodeId,
    /// The score epilogue: the elementwise nodes on the paths from `scores` to `logits`
    /// (`logits` included unless it is `scores`).
    pub epilogue: BTreeSet<NodeId>,
    /// The softmax over the last axis: `max`, `x - max`, `exp`, `sum`, `exp / sum`.
    pub softmax: [NodeId; 5],
}

impl AttentionPattern {
    /// Every node of the pattern: the two products, the epilogue and the softmax.
    pub fn nodes(&self) -> BTreeSet<NodeId> {
        let mut nodes = self.epilogue.clone();
        nodes.extend([self.scores, self.output]);
        nodes.extend(self.softmax);
        nodes
    }
}

/// The attention pattern whose last product is `output`, if it is one: float products with a
/// static head dim (the last axis of `q` and of the output), and a softmax written as
/// `exp(x - max(x)) / sum(exp(x - max(x)))` over the last axis of the scores.
pub fn attention_pattern(g: &Graph, output: NodeId) -> Option<AttentionPattern> {
    if g.node(output).op != Op::MatMul || !g.ty(output).dtype.is_float() {
        return None;
    }
    let probs = g.operands(output)[0];
    let [e, sum] = binary_operands(g, probs, BinaryOp::Div)?;
    (reduced_row(g, sum, ReduceOp::Sum)? == e).then_some(())?;
    let Op::Unary(UnaryOp::Exp) = g.node(e).op else {
        return None;
    };
    let shifted = g.operands(e)[0];
    let [logits, max] = binary_operands(g, shifted, BinaryOp::Sub)?;
    (reduced_row(g, max, ReduceOp::Max)? == logits).then_some(())?;
    let (scores, epilogue) = score_epilogue(g, logits)?;
    let q = g.operands(scores)[0];
    let static_last = |n: NodeId| g.ty(n).shape.dims().last()?.as_static();
    static_last(q)?;
    static_last(output)?;
    let dtype = g.ty(output).dtype;
    (g.ty(scores).dtype == dtype && g.ty(logits).dtype == dtype).then_some(())?;
    Some(AttentionPattern {
        scores,
        output,
        logits,
        epilogue,
        softmax: [max, shifted, e, sum, probs],
    })
}

/// The operands of `node` when it is the binary op `op`.
fn binary_operands(g: &Graph, node: NodeId, op: BinaryOp) -> Option<[NodeId; 2]> {
    (g.node(node).op == Op::Binary(op)).then(|| {
        let o = g.operands(node);
        [o[0], o[1]]
    })
}

/// The operand of `node` when it is an `op` reduction over the last axis, keeping it.
fn reduced_row(g: &Graph, node: NodeId, op: ReduceOp) -> Option<NodeId> {
    let Op::Reduce {
        op: r,
        axes,
        keepdims: true,
    } = &g.node(node).op
    else {
        return None;
    };
    let x = g.operands(node)[0];
    (*r == op && axes.as_slice() == [g.ty(x).rank() - 1]).then_some(x)
}

/// The product whose elementwise consequences `logits` is (at the scores' shape), and the
/// elementwise nodes on the way. Exactly one product may be reached.
fn score_epilogue(g: &Graph, logits: NodeId) -> Option<(NodeId, BTreeSet<NodeId>)> {
    let shape = &g.ty(logits).shape;
    let mut seen = BTreeSet::new();
    let mut products = BTreeSet::new();
    let mut stack = vec![logits];
    while let Some(n) = stack.pop() {
        if g.ty(n).shape != *shape || !seen.insert(n) {
            continue;
        }
        match role(&g.node(n).op) {
            Role::MatMul => {
                products.insert(n);
            }
            Role::Elementwise => stack.extend(g.operands(n)),
            _ => {}
        }
    }
    let [scores] = <[NodeId; 1]>::try_from(products.into_iter().collect::<Vec<_>>()).ok()?;
    // Node ids are topological: the nodes seen that depend on the product, in one pass.
    let mut after = BTreeSet::from([scores]);
    for &n in seen.range(scores..) {
        if role(&g.node(n).op) == Role::Elementwise
            && g.operands(n).iter().any(|o| after.contains(o))
        {
            after.insert(n);
        }
    }
    after.remove(&scores);
    Some((scores, after))
}

/// An attention kernel: an [`AttentionPattern`] whose nodes are all members; the other members
/// are the layout and elementwise producers of its operands (none depending on the scores) and
/// a chain of bijective layout ops from the output product up to the root that composes into a
/// strided store.
fn attention_fits(g: &Graph, members: &BTreeSet<NodeId>, root: NodeId) -> bool {
    let chain = store_chain(g, members, root);
    let top = chain.last().map_or(root, |&c| g.operands(c)[0]);
    let Some(pattern) = attention_pattern(g, top) else {
        return false;
    };
    let core = pattern.nodes();
    // The chain must compose into a strided store, as a matmul's must (a reshape that merges
    // dims a permute moved apart does not).
    if !core.is_subset(members)
        || !(chain.is_empty() || crate::layout::store_view(g, &chain).is_some())
    {
        return false;
    }
    // A member outside the pattern and the chain may not depend on the pattern: it would need
    // the scores or the probabilities, which are never whole.
    members.iter().all(|&m| {
        let r = role(&g.node(m).op);
        core.contains(&m)
            || chain.contains(&m)
            || ((r == Role::Elementwise || is_layout(r)) && ancestors_outside(g, members, m, &core))
    })
}

/// Whether no member that `m` depends on is in `core`.
fn ancestors_outside(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    m: NodeId,
    core: &BTreeSet<NodeId>,
) -> bool {
    let mut stack = g.operands(m);
    let mut seen = BTreeSet::new();
    while let Some(x) = stack.pop() {
        if core.contains(&x) {
            return false;
        }
        if members.contains(&x) && seen.insert(x) {
            stack.extend(g.operands(x));
        }
    }
    true
}

/// The bijective layout members from `root` down to the first member that is not one.
pub fn store_chain(g: &Graph, members: &BTreeSet<NodeId>, root: NodeId) -> Vec<NodeId> {
    let mut chain = Vec::new();
    let mut node = root;
    while members.contains(&node) && role(&g.node(node).op) == Role::Bijective {
        chain.push(node);
        node = g.operands(node)[0];
    }
    chain
}

/// The node whose transpose `b` is, when `b` is a member of the kernel that swaps the last
/// two axes of a non-member (a value in a buffer): the weight of `x @ wᵀ`.
pub fn transposed_source(g: &Graph, members: &BTreeSet<NodeId>, b: NodeId) -> Option<NodeId> {
    let Op::Permute { perm } = &g.node(b).op else {
        return None;
    };
    let r = perm.len();
    let swaps_last_two = r >= 2
        && perm[..r - 2].iter().enumerate().all(|(i, &p)| i == p)
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2;
    let source = g.operands(b)[0];
    (members.contains(&b) && !members.contains(&source) && swaps_last_two).then_some(source)
}

/// Whether a kernel of `members` computes what a library matmul call does: `mm` alone (its A
/// operand perhaps read through layout ops that move nothing, its B operand perhaps transposed
/// by an index map) or plus a [`residual_add`], stored through a row-major chain, on floats,
/// with `a` having the output's batch dims and `b` them or none.
pub fn is_library_matmul(g: &Graph, members: &BTreeSet<NodeId>, root: NodeId, mm: NodeId) -> bool {
    let chain = store_chain(g, members, root);
    let top = unchained(g, root, &chain);
    let a_chain = store_chain(g, members, g.operands(mm)[0]);
    let a_in_place = stores_row_major(g, &a_chain)
        && !members.contains(&unchained(g, g.operands(mm)[0], &a_chain));
    let b_transposed = transposed_source(g, members, g.operands(mm)[1]);
    let residual = residual_add(g, members, mm).map(|(add, _)| add);
    let operands =
        1 + a_chain.len() + usize::from(b_transposed.is_some()) + usize::from(residual.is_some());
    let only_mm =
        a_in_place && members.len() == operands + chain.len() && top == residual.unwrap_or(mm);
    let (a, b) = (g.operands(mm)[0], g.operands(mm)[1]);
    let (sa, sb, sc) = (&g.ty(a).shape, &g.ty(b).shape, &g.ty(mm).shape);
    let rank = sc.rank();
    let batch = &sc.dims()[..rank - 2];
    let b_batched = sb.rank() == rank && rank > 2;
    only_mm
        && (chain.is_empty() || stores_row_major(g, &chain))
        && g.ty(mm).dtype.is_float()
        && sa.rank() == rank
        && &sa.dims()[..rank - 2] == batch
        && (b_batched && &sb.dims()[..rank - 2] == batch || sb.rank() == 2)
}

/// The value a `chain` of layout ops (from `node` down, as [`store_chain`] gives) starts from.
pub fn unchained(g: &Graph, node: NodeId, chain: &[NodeId]) -> NodeId {
    chain.last().map_or(node, |&c| g.operands(c)[0])
}

/// Whether the store `chain` of layout ops puts every element of its top operand where a
/// row-major copy of that operand would go: offset 0 and row-major strides on every axis longer
/// than 1 (split-heads at one token, say), so the chain moves nothing in memory.
fn stores_row_major(g: &Graph, chain: &[NodeId]) -> bool {
    let Some(top) = chain.last().map(|&c| g.operands(c)[0]) else {
        return true;
    };
    let (Some(view), Some(rows)) = (
        crate::layout::store_view(g, chain),
        crate::layout::StridedView::contiguous(&g.ty(top).shape),
    ) else {
        return false;
    };
    let moved = view
        .shape
        .iter()
        .zip(view.strides.iter().zip(&rows.strides))
        .any(|(dim, (s, r))| dim.as_static() != Some(1) && s != r);
    view.offset == 0 && !moved
}

/// The members the matmul depends on.
fn operand_side(g: &Graph, members: &BTreeSet<NodeId>, mm: NodeId) -> BTreeSet<NodeId> {
    let mut seen = BTreeSet::new();
    let mut stack = g.operands(mm);
    while let Some(n) = stack.pop() {
        if members.contains(&n) && seen.insert(n) {
            stack.extend(g.operands(n));
        }
    }
    seen
}
