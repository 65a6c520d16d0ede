//! The printer: a graph in the text form ([`print()`]), every value written so that the parser
//! reads it back bit for bit.
//!
//! Takes a graph. Guarantees: the header line first, one line per node in id order (node `i`
//! named `%i`, its type written), then the outputs; floats round-trip exactly (NaNs other than
//! the canonical one with their bits), names are quoted with Rust's escapes.

use super::{CANONICAL_NAN, HEADER};
use crate::op::{ConstData, ReshapeDim, SliceRange};
use crate::{Dim, Graph, Op};
use std::fmt::{self, Write as _};

/// The graph in the text form: a header comment, one line per node in id order, then the outputs.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    for id in graph.node_ids() {
        let node = graph.node(id);
        let _ = write!(out, "{id} = {}", node.op.name());
        match &node.op {
            Op::Input { name } | Op::Parameter { name } | Op::State { name } => {
                let _ = write!(out, " {}", quote(name));
            }
            Op::Constant { data } => {
                let _ = write!(out, " {}", const_values(data));
            }
            op => {
                for (i, operand) in graph.operands(id).iter().enumerate() {
                    let _ = write!(out, "{}{operand}", if i == 0 { " " } else { ", " });
                }
                let attrs = attributes(op);
                if !attrs.is_empty() {
                    let _ = write!(out, " {{{}}}", attrs.join(", "));
                }
            }
        }
        let dims = node.ty.shape.dims().iter().map(dim_text);
        let _ = writeln!(out, " : {}{}", node.ty.dtype, list(dims));
    }
    for (name, node) in graph.outputs() {
        let _ = writeln!(out, "output {} = {node}", quote(name));
    }
    out
}

/// `name` in double quotes with Rust's escapes (control and invisible characters included).
pub(super) fn quote(name: &str) -> String {
    format!("{name:?}")
}

/// `{:?}` round-trips every f64 except NaNs, whose sign and payload it drops: those print their
/// bits.
pub(super) fn float(x: f64) -> String {
    if x.is_nan() && x.to_bits() != CANONICAL_NAN {
        format!("NaN({:#018x})", x.to_bits())
    } else {
        format!("{x:?}")
    }
}

/// A dim as the text form writes it: an expression in quotes (`"seq - 1"`).
pub(super) fn dim_text(d: &Dim) -> String {
    match d {
        Dim::Expr(e) => quote(&e.to_string()),
        d => d.to_string(),
    }
}

pub(super) fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

pub(super) fn const_values(data: &ConstData) -> String {
    match data {
        ConstData::Bool(v) => list(v),
        ConstData::Int(v) => list(v),
        ConstData::Float(v) => list(v.iter().map(|x| float(x.0))),
    }
}

pub(super) fn slice_range(r: &SliceRange) -> String {
    let mut s = format!("{}:", r.start);
    if let Some(stop) = &r.stop {
        let _ = write!(s, "{}", dim_text(stop));
    }
    if r.step != 1 {
        let _ = write!(s, ":{}", r.step);
    }
    s
}

/// The op's attributes as `key = value` items, in the order the text form's doc lists them.
pub(super) fn attributes(op: &Op) -> Vec<String> {
    match op {
        Op::Cast { to } => vec![format!("to = {to}")],
        Op::Reduce { axes, keepdims, .. } => {
            vec![
                format!("axes = {}", list(axes)),
                format!("keepdims = {keepdims}"),
            ]
        }
        Op::Reshape { dims } => {
            let dims = dims.iter().map(|d| match d {
                ReshapeDim::Dim(d) => dim_text(d),
                ReshapeDim::Infer => "?".to_string(),
            });
            vec![format!("dims = {}", list(dims))]
        }
        Op::Permute { perm } => vec![format!("perm = {}", list(perm))],
        Op::BroadcastTo { dims } => vec![format!("dims = {}", list(dims.iter().map(dim_text)))],
        Op::Iota { len } => vec![format!("len = {}", dim_text(len))],
        Op::DimValue { dim } => vec![format!("dim = {}", dim_text(dim))],
        Op::Slice { ranges } => vec![format!("ranges = {}", list(ranges.iter().map(slice_range)))],
        Op::Concat { axis } | Op::Gather { axis } => vec![format!("axis = {axis}")],
        Op::AllReduce { world, .. } => vec![format!("world = {world}")],
        Op::AllGather { axis, world } | Op::ReduceScatter { axis, world } => {
            vec![format!("axis = {axis}"), format!("world = {world}")]
        }
        Op::Pad { pads, value } => {
            let pads = pads.iter().map(|(b, a)| format!("({b}, {a})"));
            vec![
                format!("pads = {}", list(pads)),
                format!("value = {}", float(value.0)),
            ]
        }
        Op::Squeeze { axes } | Op::Unsqueeze { axes } => vec![format!("axes = {}", list(axes))],
        Op::Conv {
            strides,
            dilations,
            pads,
            groups,
        } => {
            let pads = pads.iter().map(|(b, a)| format!("({b}, {a})"));
            vec![
                format!("strides = {}", list(strides)),
                format!("dilations = {}", list(dilations)),
                format!("pads = {}", list(pads)),
                format!("groups = {groups}"),
            ]
        }
        Op::StateWriteSlice { axis, start } => {
            let mut attrs = vec![format!("axis = {axis}")];
            attrs.extend(start.map(|s| format!("start = {s}")));
            attrs
        }
        Op::Custom { kernel, output } => vec![
            format!("kernel = {}", quote(kernel.kernel().name())),
            format!("output = {output}"),
            format!("body = {}", quote(&custom_hex(kernel))),
        ],
        Op::Input { .. }
        | Op::Parameter { .. }
        | Op::Constant { .. }
        | Op::State { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::MatMul
        | Op::StateAssign => Vec::new(),
    }
}

/// The whole custom kernel (signature, reference, body) as hex of its bincode encoding: the
/// text form names the kernel and carries it opaquely, so a printed graph parses back.
fn custom_hex(kernel: &crate::CustomRef) -> String {
    let bytes = bincode::serde::encode_to_vec(kernel, bincode::config::standard())
        .expect("a custom kernel always encodes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
