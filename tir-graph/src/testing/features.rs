//! What a graph exercises, as tags ([`feature_tags`]): its op names and the attribute and value
//! forms it uses, for tests that check the generator's coverage over many graphs.
//!
//! Takes any graph. Guarantees: every op name of the graph ([`crate::Op::name`]) is a tag, and
//! each tag names a form the graph has (never one it lacks).

use super::build::int_range;
use crate::op::ConstData;
use crate::{Dim, Graph, Op, ReshapeDim};
use std::collections::BTreeSet;

/// Tags for what a graph exercises: every op name it has ([`Op::name`]), plus attribute and
/// value forms (`reshape:infer`, `constant:f16`, `constant:nan`, `state_write_slice:dynamic`,
/// `name:odd`, ...). Tests use the union over many graphs to check the generator's coverage.
pub fn feature_tags(graph: &Graph) -> BTreeSet<String> {
    let mut tags = BTreeSet::new();
    let mut tag = |s: &str| {
        tags.insert(s.to_string());
    };
    let is_odd = |name: &str| !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    for id in graph.node_ids() {
        let node = graph.node(id);
        tag(node.op.name());
        for d in node.ty.shape.dims() {
            match d {
                Dim::Symbolic(_) => tag("dim:symbolic"),
                Dim::Expr(_) => tag("dim:expr"),
                Dim::Static(0) => tag("dim:zero"),
                Dim::Static(_) => {}
            }
        }
        tag(&format!("rank:{}", node.ty.rank()));
        if let Some(name) = node.op.source_name() {
            if is_odd(name) {
                tag("name:odd");
            }
            if name.chars().any(char::is_control) {
                tag("name:control");
            }
            if !name.is_ascii() {
                tag("name:unicode");
            }
        }
        match &node.op {
            Op::Input { .. } | Op::Parameter { .. } | Op::State { .. } => {
                tag(&format!("source:{}", node.ty.dtype));
            }
            Op::Constant { data } => {
                tag(&format!("constant:{}", node.ty.dtype));
                if let ConstData::Float(v) = data {
                    for x in v.iter().map(|x| x.0) {
                        float_tags(&mut tag, "constant", x);
                    }
                }
                if let ConstData::Int(v) = data {
                    let (lo, hi) = int_range(node.ty.dtype);
                    if v.iter().any(|&x| x == lo || x == hi) {
                        tag(&format!("constant:{}-extreme", node.ty.dtype));
                    }
                }
            }
            Op::Cast { to } => tag(&format!("cast:to-{to}")),
            Op::Reduce { axes, keepdims, .. } => {
                tag(if *keepdims {
                    "reduce:keepdims"
                } else {
                    "reduce:dropdims"
                });
                if axes.len() > 1 {
                    tag("reduce:multi-axis");
                }
            }
            Op::Reshape { dims } if dims.contains(&ReshapeDim::Infer) => tag("reshape:infer"),
            Op::Slice { ranges } => {
                if ranges.iter().any(|r| r.step > 1) {
                    tag("slice:step");
                }
                if ranges.iter().any(|r| r.stop.is_none() && r.start > 0) {
                    tag("slice:open-stop");
                }
            }
            Op::Concat { .. } => {
                if graph.operands(id).len() >= 3 {
                    tag("concat:3+");
                }
                if graph.operands(id).len() == 1 {
                    tag("concat:1");
                }
            }
            Op::Pad { value, .. } => float_tags(&mut tag, "pad", value.0),
            Op::Gather { .. } => {
                tag(&format!("gather:{}", graph.ty(graph.operands(id)[1]).dtype));
            }
            Op::StateWriteSlice { start, .. } => tag(if start.is_some() {
                "state_write_slice:static"
            } else {
                "state_write_slice:dynamic"
            }),
            _ => {}
        }
    }
    let mut seen = BTreeSet::new();
    for (name, node) in graph.outputs() {
        if is_odd(name) {
            tag("output:odd-name");
        }
        if !seen.insert(*node) {
            tag("output:shared-node");
        }
        if graph.source(name).is_some() {
            tag("output:source-name");
        }
    }
    if graph.outputs().is_empty() {
        tag("output:none");
    }
    tags
}

fn float_tags(tag: &mut impl FnMut(&str), prefix: &str, x: f64) {
    let kind = if x.is_nan() {
        if x.to_bits() == f64::NAN.to_bits() {
            "nan"
        } else {
            "nan-noncanonical"
        }
    } else if x == f64::INFINITY {
        "inf"
    } else if x == f64::NEG_INFINITY {
        "-inf"
    } else if x.to_bits() == (-0.0f64).to_bits() {
        "-0"
    } else if x != 0.0 && x.abs() < f64::MIN_POSITIVE {
        "subnormal"
    } else {
        return;
    };
    tag(&format!("{prefix}:{kind}"));
}
