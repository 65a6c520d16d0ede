//! Ops by name: the op a name in the text stands for, and the reading of its attributes into
//! an [`Op`].
//!
//! Takes an op name and its attribute values. Guarantees: every op of [`Op::name`] has a name
//! here; an unknown name gets the closest known ones as suggestions; an attribute the op does
//! not take, or one missing without a default, is an error naming it.

use super::error::{ParseError, Result};
use super::value::*;
use crate::op::{ConstData, ExactF64};
use crate::{BinaryOp, DType, Dim, Op, ReduceOp, UnaryOp};

/// One op of every kind, attributes empty; names come from [`Op::name`], never repeated here.
pub(super) fn op_templates() -> impl Iterator<Item = Op> {
    [
        Op::Input {
            name: String::new(),
        },
        Op::Parameter {
            name: String::new(),
        },
        Op::Constant {
            data: ConstData::Bool(Vec::new()),
        },
        Op::State {
            name: String::new(),
        },
        Op::Cast { to: DType::F32 },
        Op::Select,
        Op::MatMul,
        Op::Reshape { dims: Vec::new() },
        Op::Permute { perm: Vec::new() },
        Op::BroadcastTo { dims: Vec::new() },
        Op::Slice { ranges: Vec::new() },
        Op::Concat { axis: 0 },
        Op::Pad {
            pads: Vec::new(),
            value: ExactF64(0.0),
        },
        Op::Squeeze { axes: Vec::new() },
        Op::Unsqueeze { axes: Vec::new() },
        Op::Gather { axis: 0 },
        Op::Conv {
            strides: Vec::new(),
            dilations: Vec::new(),
            pads: Vec::new(),
            groups: 1,
        },
        Op::StateAssign,
        Op::StateWriteSlice {
            axis: 0,
            start: None,
        },
        Op::Iota {
            len: Dim::Static(0),
        },
        Op::DimValue {
            dim: Dim::Static(0),
        },
        Op::AllGather { axis: 0, world: 1 },
        Op::ReduceScatter { axis: 0, world: 1 },
    ]
    .into_iter()
    .chain(custom_template())
    .chain(
        [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]
            .into_iter()
            .map(|op| Op::AllReduce { op, world: 1 }),
    )
    .chain(UnaryOp::ALL.into_iter().map(Op::Unary))
    .chain(BinaryOp::ALL.into_iter().map(Op::Binary))
    .chain(ReduceOp::ALL.into_iter().map(|op| Op::Reduce {
        op,
        axes: Vec::new(),
        keepdims: false,
    }))
}

pub(super) fn lookup_op(name: &str) -> Option<Op> {
    op_templates().find(|op| op.name() == name)
}

/// The op name closest to `name` by edit distance, if it is a likely typo.
pub(super) fn suggest_op(name: &str) -> Option<&'static str> {
    if name.len() > 32 {
        return None;
    }
    op_templates()
        .map(|op| (edit_distance(name, op.name()), op.name()))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, n)| n)
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The attributes written on one line, taken one by one as the op asks for them.
pub(super) struct Attrs {
    pub(super) items: Vec<(String, usize, Val)>,
    pub(super) asked: Vec<&'static str>,
    pub(super) op: &'static str,
    pub(super) op_col: usize,
    pub(super) line: usize,
}

impl Attrs {
    pub(super) fn optional(&mut self, key: &'static str) -> Option<Val> {
        self.asked.push(key);
        let i = self.items.iter().position(|(k, _, _)| k == key)?;
        Some(self.items.remove(i).2)
    }

    pub(super) fn required(&mut self, key: &'static str) -> Result<Val> {
        self.optional(key).ok_or_else(|| {
            ParseError::at(
                self.line,
                self.op_col,
                format!("`{}` needs the attribute `{key}`", self.op),
            )
        })
    }

    /// Refuses an attribute the op did not ask for.
    pub(super) fn finish(self) -> Result<()> {
        let Some((key, col, _)) = self.items.first() else {
            return Ok(());
        };
        let takes = if self.asked.is_empty() {
            "it takes none".to_string()
        } else {
            format!("it takes {}", self.asked.join(", "))
        };
        Err(ParseError::at(
            self.line,
            *col,
            format!("`{}` has no attribute `{key}` ({takes})", self.op),
        ))
    }
}

/// `template` with its attributes read from `attrs`.
pub(super) fn build_op(template: Op, attrs: &mut Attrs) -> Result<Op> {
    let line = attrs.line;
    let axes = |v: Val| to_list(&v, line, "axes", to_axis);
    Ok(match template {
        Op::Cast { .. } => Op::Cast {
            to: to_dtype(&attrs.required("to")?, line)?,
        },
        Op::Reduce { op, .. } => Op::Reduce {
            op,
            axes: axes(attrs.required("axes")?)?,
            keepdims: match attrs.optional("keepdims") {
                Some(v) => to_bool(&v, line)?,
                None => false,
            },
        },
        Op::Reshape { .. } => Op::Reshape {
            dims: to_list(&attrs.required("dims")?, line, "dims", to_reshape_dim)?,
        },
        Op::Permute { .. } => Op::Permute {
            perm: to_list(&attrs.required("perm")?, line, "axes", to_axis)?,
        },
        Op::BroadcastTo { .. } => Op::BroadcastTo {
            dims: to_list(&attrs.required("dims")?, line, "dims", to_dim)?,
        },
        Op::Iota { .. } => Op::Iota {
            len: to_dim(&attrs.required("len")?, line)?,
        },
        Op::DimValue { .. } => Op::DimValue {
            dim: to_dim(&attrs.required("dim")?, line)?,
        },
        Op::Slice { .. } => Op::Slice {
            ranges: to_list(&attrs.required("ranges")?, line, "ranges", to_range)?,
        },
        Op::Concat { .. } => Op::Concat {
            axis: to_axis(&attrs.required("axis")?, line)?,
        },
        Op::Gather { .. } => Op::Gather {
            axis: to_axis(&attrs.required("axis")?, line)?,
        },
        Op::Pad { .. } => Op::Pad {
            pads: to_list(&attrs.required("pads")?, line, "pads", to_pad)?,
            value: ExactF64(match attrs.optional("value") {
                Some(v) => to_f64(&v, line)?,
                None => 0.0,
            }),
        },
        Op::Squeeze { .. } => Op::Squeeze {
            axes: axes(attrs.required("axes")?)?,
        },
        Op::Unsqueeze { .. } => Op::Unsqueeze {
            axes: axes(attrs.required("axes")?)?,
        },
        Op::Conv { .. } => conv_op(attrs)?,
        Op::AllReduce { op, .. } => Op::AllReduce {
            op,
            world: world(attrs)?,
        },
        Op::AllGather { .. } => Op::AllGather {
            axis: to_axis(&attrs.required("axis")?, line)?,
            world: world(attrs)?,
        },
        Op::ReduceScatter { .. } => Op::ReduceScatter {
            axis: to_axis(&attrs.required("axis")?, line)?,
            world: world(attrs)?,
        },
        Op::StateWriteSlice { .. } => Op::StateWriteSlice {
            axis: to_axis(&attrs.required("axis")?, line)?,
            start: match attrs.optional("start") {
                Some(v) => Some(to_u64(&v, line, "a start (a non-negative integer)")?),
                None => None,
            },
        },
        Op::Custom { .. } => custom_op(attrs)?,
        Op::Input { .. }
        | Op::Parameter { .. }
        | Op::Constant { .. }
        | Op::State { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::MatMul
        | Op::StateAssign => template,
    })
}

/// A `custom` op with no kernel, only for its name: [`build_op`] reads the real one.
pub(crate) fn custom_template() -> Option<Op> {
    let g = crate::GraphBuilder::new();
    let x = g.input("x", DType::F32, crate::Shape::scalar()).ok()?;
    g.output("y", &x).ok()?;
    let reference = g.finish().ok()?;
    let kernel = crate::CustomKernel::new(
        "template",
        vec![crate::CustomInput {
            name: "x".into(),
            dtype: DType::F32,
            dims: Vec::new(),
        }],
        vec![crate::CustomOutput {
            name: "y".into(),
            dtype: DType::F32,
            dims: Vec::new(),
            tile: Vec::new(),
            updates: None,
            slice: None,
        }],
        crate::Safety::Safe,
        &reference,
        crate::KernelBody {
            version: 0,
            bytes: Vec::new(),
        },
    )
    .ok()?;
    Some(Op::Custom {
        kernel: crate::CustomRef::new(kernel),
        output: 0,
    })
}

/// A `custom` op: its kernel decoded from the hex `body`, which must be the kernel `kernel`
/// names, and which of its outputs the node is.
fn custom_op(attrs: &mut Attrs) -> Result<Op> {
    let line = attrs.line;
    let bad = |message: String| ParseError {
        line,
        column: None,
        message,
    };
    let name = to_string_val(&attrs.required("kernel")?, line, "kernel")?;
    let output = to_u64(&attrs.required("output")?, line, "an output index")? as usize;
    let hex = to_string_val(&attrs.required("body")?, line, "body")?;
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| bad(format!("custom kernel {name}: its body is not hex")))?;
    let (kernel, _): (crate::CustomRef, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).map_err(|e| {
            bad(format!(
                "custom kernel {name}: its body does not decode: {e}"
            ))
        })?;
    if kernel.kernel().name() != name {
        return Err(bad(format!(
            "the body is custom kernel {}, not {name}",
            kernel.kernel().name()
        )));
    }
    Ok(Op::Custom { kernel, output })
}

/// A collective's `world`: how many devices take part.
pub(super) fn world(attrs: &mut Attrs) -> Result<u32> {
    to_int(
        &attrs.required("world")?,
        attrs.line,
        "a world (a device count)",
    )
}

/// A `conv` whose attributes left out take their defaults: as many spatial axes as the
/// attributes given say (the operands' rank is checked by type inference), stride and dilation
/// 1, no padding, one group.
pub(super) fn conv_op(attrs: &mut Attrs) -> Result<Op> {
    let line = attrs.line;
    let sizes = |v: Option<Val>, what: &str| -> Result<Option<Vec<u64>>> {
        v.map(|v| to_list(&v, line, what, |x, l| to_u64(x, l, what)))
            .transpose()
    };
    let strides = sizes(attrs.optional("strides"), "strides")?;
    let dilations = sizes(attrs.optional("dilations"), "dilations")?;
    let pads = attrs
        .optional("pads")
        .map(|v| to_list(&v, line, "pads", to_pad))
        .transpose()?;
    let groups = match attrs.optional("groups") {
        Some(v) => to_u64(&v, line, "a group count")?,
        None => 1,
    };
    let spatial = [
        strides.as_ref().map(Vec::len),
        dilations.as_ref().map(Vec::len),
        pads.as_ref().map(Vec::len),
    ]
    .into_iter()
    .flatten()
    .next()
    .ok_or_else(|| ParseError {
        line,
        column: None,
        message: "conv needs at least one of `strides`, `dilations` and `pads` to give its \
                  spatial axes"
            .into(),
    })?;
    Ok(Op::Conv {
        strides: strides.unwrap_or_else(|| vec![1; spatial]),
        dilations: dilations.unwrap_or_else(|| vec![1; spatial]),
        pads: pads.unwrap_or_else(|| vec![(0, 0); spatial]),
        groups,
    })
}
