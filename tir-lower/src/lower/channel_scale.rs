//! Scales that do not vary along K, applied after a product's K loop instead of inside it.
//!
//! A weight stored per output channel (int8 with `scales[n]`, FP8 with a `weight_scale[n]` per
//! row or one per tensor) is dequantized by the graph as `w[k, n] = q[k, n] · s[n]`, and
//! `sum_k a[k] · q[k, n] · s[n] = s[n] · sum_k a[k] · q[k, n]`. So the K loop multiplies the
//! stored values (converted, not scaled) and the scale multiplies the f32 accumulator once,
//! after the loop: one multiply per output instead of one (and the scale's broadcast) per
//! weight element.
//!
//! Takes: a matmul kernel whose B operand is, through casts between float dtypes and permutes
//! (members of the kernel), `mul(x, s)` where `x` is a cast of a narrow value (`i8`, `u8`,
//! `f8e4m3`, `f8e5m2`) and `s`'s indices do not involve K.
//! Guarantees: the K loop reads `x` where the graph reads `mul(x, s)`, and
//! [`ChannelScale::scale_ix`] indexes `s` at the product's output tile. This is exact but for
//! rounding: every dtype on the way from the narrow value to B (f16, bf16, f32) holds it
//! exactly, so the loop's operand is the stored value itself, and what the graph rounds once per
//! weight element (`f16(q · s)`) is rounded once per output (`f16(f32(s) · acc)`), which the
//! per-dtype tolerances of products cover (the oracle still computes the graph as written).
//!
//! Done in lowering, not as an egg rule over `matmul(x, mul(q, s))`: the graph has no product
//! accumulating in f32 and scaling before its rounding to f16, and `mul(matmul(x, q), s)` would
//! round (and can overflow) the unscaled sum in f16. Formats whose scale varies along K (AWQ
//! and GPTQ groups, FP8 blocks) keep it in the loop: their `s` is indexed by K.

use super::builder::Ix;
use super::emit::broadcast_ix;
use super::kernels::operand_ix;
use std::collections::BTreeSet;
use tir_graph::{BinaryOp, DType, Graph, NodeId, Op};

/// A scale factored out of a matmul's B operand.
pub struct ChannelScale {
    /// The `mul(x, s)` node whose value the K loop replaces by `x`'s.
    pub mul: NodeId,
    /// The indices of `mul` over the B operand's space (the matmul's axes).
    pub mul_ix: Vec<Ix>,
    /// `x`: the unscaled stored values.
    pub unscaled: NodeId,
    /// The indices of `x` over the B operand's space.
    pub unscaled_ix: Vec<Ix>,
    /// `s`: the scale.
    pub scale: NodeId,
    /// The indices of `s` over the matmul's axes; they do not involve K (axis `rank - 2`).
    pub scale_ix: Vec<Ix>,
}

/// The scale of the B operand of `mm` that the product can apply after its K loop, if any
/// (see the module doc for when).
pub fn channel_scale(g: &Graph, members: &BTreeSet<NodeId>, mm: NodeId) -> Option<ChannelScale> {
    if !g.ty(mm).dtype.is_float() {
        return None;
    }
    let rank = g.ty(mm).rank();
    let k_axis = rank - 2;
    let mut node = g.operands(mm)[1];
    let mut ix = operand_ix(&g.ty(node).shape, rank);
    loop {
        if !members.contains(&node) || !holds_narrow_values(g.ty(node).dtype) {
            return None;
        }
        let operands = g.operands(node);
        match &g.node(node).op {
            Op::Cast { .. } => node = operands[0],
            Op::Permute { perm } => {
                let mut inner = vec![Ix::constant(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inner[p] = ix[i].clone();
                }
                ix = inner;
                node = operands[0];
            }
            Op::Binary(BinaryOp::Mul) => {
                return [(operands[0], operands[1]), (operands[1], operands[0])]
                    .into_iter()
                    .find_map(|(x, s)| factor(g, members, (node, &ix), (x, s), k_axis));
            }
            _ => return None,
        }
    }
}

/// `mul = x · s` at `mul_ix` as a [`ChannelScale`], when `x` is a cast of narrow values of
/// `mul`'s dtype and `s` is a float not indexed by `k_axis`.
fn factor(
    g: &Graph,
    members: &BTreeSet<NodeId>,
    (mul, mul_ix): (NodeId, &[Ix]),
    (x, s): (NodeId, NodeId),
    k_axis: usize,
) -> Option<ChannelScale> {
    let shape = &g.ty(mul).shape;
    if g.ty(x).shape != *shape || g.ty(x).dtype != g.ty(mul).dtype || !g.ty(s).dtype.is_float() {
        return None;
    }
    if !casts_narrow_values(g, members, x) {
        return None;
    }
    let scale_ix = broadcast_ix(&g.ty(s).shape, shape, mul_ix);
    let along_k = scale_ix.iter().any(|i| match i {
        Ix::Lin { terms, shift, .. } => {
            shift.is_some() || terms.iter().any(|&(a, c)| a == k_axis && c != 0)
        }
        Ix::Dyn(_) => true,
    });
    (!along_k).then(|| ChannelScale {
        mul,
        mul_ix: mul_ix.to_vec(),
        unscaled: x,
        unscaled_ix: mul_ix.to_vec(),
        scale: s,
        scale_ix,
    })
}

/// Whether `x` (a member) casts, through float dtypes that hold them, values of a narrow
/// dtype: every value of `x` is then one of that dtype's, exactly.
fn casts_narrow_values(g: &Graph, members: &BTreeSet<NodeId>, mut x: NodeId) -> bool {
    while members.contains(&x) && matches!(g.node(x).op, Op::Cast { .. }) {
        let from = g.ty(g.operands(x)[0]).dtype;
        if is_narrow(from) {
            return true;
        }
        if !holds_narrow_values(from) {
            return false;
        }
        x = g.operands(x)[0];
    }
    false
}

/// Whether `dtype` is an 8-bit integer or float: every one of its values is exact in each
/// dtype [`holds_narrow_values`] accepts (at most 8 significant bits, exponents within f16's).
pub fn is_narrow(dtype: DType) -> bool {
    matches!(dtype, DType::I8 | DType::U8 | DType::F8E4M3 | DType::F8E5M2)
}

/// Whether `dtype` holds every value of every [`is_narrow`] dtype exactly.
pub fn holds_narrow_values(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::quant::{Fp8Scale, WeightFormat};
    use tir_graph::{shape, GraphBuilder, Tensor};

    /// The scale factored out of `x: f16[1, 256] @ weight(g)`, with every computed node a
    /// member (as fusion makes a dequantization the product's prologue); the scale's name
    /// and whether its indices leave K out.
    fn factored(weight: impl Fn(&GraphBuilder) -> Tensor) -> Option<(String, bool)> {
        let g = GraphBuilder::new();
        let x = g.input("x", DType::F16, shape![1, 256]).unwrap();
        g.output("y", &x.matmul(&weight(&g)).unwrap()).unwrap();
        let graph = g.finish().unwrap();
        let members: BTreeSet<NodeId> = graph
            .node_ids()
            .filter(|&n| !graph.operands(n).is_empty())
            .collect();
        let mm = graph
            .node_ids()
            .find(|&n| graph.node(n).op == Op::MatMul)
            .unwrap();
        let cs = channel_scale(&graph, &members, mm)?;
        let free_of_k = cs.scale_ix.iter().all(|i| match i {
            Ix::Lin { terms, shift, .. } => shift.is_none() && terms.iter().all(|&(a, _)| a != 0),
            Ix::Dyn(_) => false,
        });
        let name = graph.node(cs.scale).op.source_name().unwrap_or_default();
        Some((name.to_string(), free_of_k))
    }

    fn stored(format: WeightFormat) -> impl Fn(&GraphBuilder) -> Tensor {
        move |g| format.declare(g, "w", 256, 64).unwrap()
    }

    #[test]
    fn per_channel_scales_leave_the_k_loop() {
        let int8 = factored(stored(WeightFormat::Int8));
        assert_eq!(int8, Some(("w.scales".into(), true)));
        for scale in [Fp8Scale::Row, Fp8Scale::Tensor] {
            let fp8 = factored(stored(WeightFormat::Fp8(scale)));
            assert_eq!(fp8, Some(("w.weight_scale".into(), true)), "{scale:?}");
        }
    }

    #[test]
    fn scales_that_vary_along_k_stay_in_the_loop() {
        for format in [
            WeightFormat::Fp8(Fp8Scale::Block),
            WeightFormat::Awq { group: 128 },
            WeightFormat::Gptq { group: 128 },
            WeightFormat::F16,
        ] {
            assert_eq!(factored(stored(format)), None, "{format:?}");
        }
        // One scale per row of K (a [256, 1] scale broadcast along N).
        let per_k = factored(|g| {
            let q = g.parameter("q", DType::I8, shape![256, 64]).unwrap();
            let s = g.parameter("s", DType::F16, shape![256, 1]).unwrap();
            q.cast(DType::F16).unwrap().mul(&s).unwrap()
        });
        assert_eq!(per_k, None);
    }

    #[test]
    fn only_narrow_stored_values_are_unscaled() {
        // An f16 weight times a per-channel scale: `w` is not exact in every dtype on the way,
        // and the loop would read values the graph never rounds.
        let f16 = factored(|g| {
            let w = g.parameter("w", DType::F16, shape![256, 64]).unwrap();
            let s = g.parameter("s", DType::F16, shape![64]).unwrap();
            w.mul(&s).unwrap()
        });
        assert_eq!(f16, None);
        // i32 values do not fit f16 exactly.
        let i32s = factored(|g| {
            let q = g.parameter("q", DType::I32, shape![256, 64]).unwrap();
            let s = g.parameter("s", DType::F16, shape![64]).unwrap();
            q.cast(DType::F16).unwrap().mul(&s).unwrap()
        });
        assert_eq!(i32s, None);
    }
}
