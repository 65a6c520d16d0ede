//! The operations of the graph IR. Each op's result type comes from [`crate::infer`].

use crate::{DType, Dim};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Elementwise ops of one operand. The result has the operand's type (see [`crate::infer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Reciprocal,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    /// `x * Φ(x)` with the exact normal CDF (erf form).
    GeluErf,
    /// The tanh approximation of gelu.
    GeluTanh,
    Silu,
    /// The error function.
    Erf,
    Floor,
    Ceil,
    /// Logical not of a bool tensor.
    Not,
    /// Bitwise complement of an integer (appended: `.tir` files store the variant index).
    BitNot,
}

/// Elementwise ops of two operands with NumPy broadcasting; both operands share one dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    /// The remainder of truncating division (C's `fmod`): the dividend's sign, exact for
    /// floats; integers wrap and `x rem 0 = x` (as `x / 0 = 0`). Appended last: `.tir` files
    /// store the variant index.
    Rem,
    /// Bitwise and, or and exclusive or of integers.
    BitAnd,
    BitOr,
    BitXor,
    /// `x << y` of integers, bits shifted past the top discarded; an amount outside
    /// `0..bits` gives 0 (NumPy's rule, which ONNX's `BitShift` states).
    ShiftLeft,
    /// `x >> y` of integers: arithmetic for signed dtypes, logical for unsigned; an amount
    /// outside `0..bits` gives the sign fill (-1 for a negative signed `x`, else 0).
    ShiftRight,
}

/// Reductions over a set of axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    /// Index (i64) of the first maximum along exactly one axis.
    ArgMax,
    /// Index (i64) of the first minimum along exactly one axis.
    ArgMin,
}

/// One target dim of a reshape: given, or inferred from the element count (at most one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ReshapeDim {
    Dim(Dim),
    Infer,
}

/// The range `start..stop` with `step` taken along one axis. `stop: None` means the end of the
/// axis. A stop that is not static (`seq`, where an exporter slices a table of positions to the
/// sequence's length) must be at most the axis's size: a run whose binding breaks that is
/// refused ([`crate::Graph::dim_bounds`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SliceRange {
    pub start: u64,
    pub stop: Option<Dim>,
    pub step: u64,
}

impl SliceRange {
    /// The whole axis.
    pub const FULL: SliceRange = SliceRange {
        start: 0,
        stop: None,
        step: 1,
    };

    pub fn new(start: u64, stop: u64, step: u64) -> SliceRange {
        SliceRange {
            start,
            stop: Some(Dim::Static(stop)),
            step,
        }
    }
}

/// An f64 attribute compared by its bits, so that ops (and graphs) have exact equality and a
/// hash: `NaN == NaN`, `0.0 != -0.0`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ExactF64(pub f64);

impl PartialEq for ExactF64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for ExactF64 {}

impl PartialOrd for ExactF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By bits, consistent with equality (not numeric order).
impl Ord for ExactF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.to_bits().cmp(&other.0.to_bits())
    }
}

impl std::hash::Hash for ExactF64 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// The values of a constant, stored exactly in the class of its dtype.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConstData {
    Bool(Vec<bool>),
    /// Values of an integer dtype (i8, u8, i32, i64), each within that dtype's range.
    Int(Vec<i64>),
    /// Values of a float dtype, each exactly representable in that dtype.
    Float(Vec<ExactF64>),
}

impl ConstData {
    pub fn len(&self) -> usize {
        match self {
            ConstData::Bool(v) => v.len(),
            ConstData::Int(v) => v.len(),
            ConstData::Float(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as an f64 (exact for every bool, float and int up to 2^53).
    pub fn get_f64(&self, i: usize) -> Option<f64> {
        match self {
            ConstData::Bool(v) => v.get(i).map(|&b| f64::from(u8::from(b))),
            ConstData::Int(v) => v.get(i).map(|&x| x as f64),
            ConstData::Float(v) => v.get(i).map(|x| x.0),
        }
    }

    /// Whether these values can be stored in `dtype` without change.
    pub fn fits(&self, dtype: DType) -> bool {
        match (self, dtype) {
            (ConstData::Bool(_), DType::Bool) => true,
            (ConstData::Int(v), d) if d.is_int() => v.iter().all(|&x| int_fits(x, d)),
            (ConstData::Float(v), d) if d.is_float() => v.iter().all(|x| d.holds(x.0)),
            _ => false,
        }
    }

    /// `values` converted to `dtype` as a constant stores them (rounded floats, wrapped ints).
    pub fn from_f64(dtype: DType, values: &[f64]) -> ConstData {
        match dtype {
            DType::Bool => ConstData::Bool(values.iter().map(|&x| x != 0.0).collect()),
            d if d.is_int() => {
                ConstData::Int(values.iter().map(|&x| d.round_value(x) as i64).collect())
            }
            d => ConstData::Float(values.iter().map(|&x| ExactF64(d.const_value(x))).collect()),
        }
    }
}

fn int_fits(x: i64, dtype: DType) -> bool {
    match dtype {
        DType::I8 => i8::try_from(x).is_ok(),
        DType::U8 => u8::try_from(x).is_ok(),
        DType::I16 => i16::try_from(x).is_ok(),
        DType::U16 => u16::try_from(x).is_ok(),
        DType::I32 => i32::try_from(x).is_ok(),
        DType::U32 => u32::try_from(x).is_ok(),
        // A `u64` constant is held in an `i64`: values past `i64::MAX` are not representable.
        DType::U64 => x >= 0,
        _ => true,
    }
}

/// The most elements a constant may embed; larger tensors are parameters.
pub const MAX_CONSTANT_ELEMENTS: u64 = 1 << 16;

/// An operation of the graph. Sources carry their declared type in the node; every other op's
/// result type is inferred from its operands and attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Op {
    /// A named tensor supplied on every run.
    Input {
        name: String,
    },
    /// A named weight, supplied at run time or stored with the program.
    Parameter {
        name: String,
    },
    /// A small tensor embedded in the graph (at most [`MAX_CONSTANT_ELEMENTS`]).
    Constant {
        data: ConstData,
    },
    /// The current value of a named buffer that persists between runs (zeros before the first).
    State {
        name: String,
    },
    Unary(UnaryOp),
    Cast {
        to: DType,
    },
    Binary(BinaryOp),
    /// `select(cond, a, b)`: `a` where `cond` is true, else `b`, all three broadcast.
    Select,
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// `a[..., m, k] @ b[..., k, n]`, batch dims broadcast.
    MatMul,
    Reshape {
        dims: Vec<ReshapeDim>,
    },
    /// Result dim `i` is operand dim `perm[i]`.
    Permute {
        perm: Vec<usize>,
    },
    BroadcastTo {
        dims: Vec<Dim>,
    },
    /// One range per axis.
    Slice {
        ranges: Vec<SliceRange>,
    },
    /// Joins any number (≥ 1) of operands along `axis`.
    Concat {
        axis: usize,
    },
    /// Pads each axis with `(before, after)` elements of `value`.
    Pad {
        pads: Vec<(u64, u64)>,
        value: ExactF64,
    },
    /// Removes the given axes, each of static size 1.
    Squeeze {
        axes: Vec<usize>,
    },
    /// Inserts size-1 axes at the given positions of the result.
    Unsqueeze {
        axes: Vec<usize>,
    },
    /// `gather(data, indices)`: result is `data[.., indices[...], ..]` along `axis`.
    Gather {
        axis: usize,
    },
    /// `state_assign(state, value)`: the state holds `value` after this run.
    StateAssign,
    /// `state_write_slice(state, value[, offset])`: writes `value` into the state at `start`
    /// along `axis` (all other axes whole). `start: None` takes the start from the third operand,
    /// a scalar i32/i64 read at run time (e.g. the KV-cache position).
    StateWriteSlice {
        axis: usize,
        start: Option<u64>,
    },
    // New variants go last: `.tir` files store the variant's index.
    /// `conv(x, w)`: the cross-correlation of `x: [N, C, S..]` (1 to 3 spatial axes) with
    /// `w: [O, C / groups, K..]`, giving `[N, O, Q..]` with
    /// `Q = (S + before + after - dilation·(K - 1) - 1) / stride + 1` (floor) per spatial axis.
    /// Channels split into `groups` equal groups: output channel `o` reads only the input
    /// channels of its group `o / (O / groups)` (ONNX's and PyTorch's `Conv`, without bias).
    Conv {
        strides: Vec<u64>,
        dilations: Vec<u64>,
        pads: Vec<(u64, u64)>,
        groups: u64,
    },
    /// `iota()`: the `i64` vector `0, 1, .., len - 1`, of a length that may be symbolic (the
    /// positions of a sequence, what an exported `Range(0, seq, 1)` computes).
    Iota {
        len: Dim,
    },
    /// `dim_value()`: the value of a dim as an `i64` scalar, so that run-time arithmetic can read
    /// a symbolic size (an exported mask or index computation multiplies by `seq`).
    DimValue {
        dim: Dim,
    },
    /// A collective over the `world` devices of a mesh, each running the same graph on its
    /// shard: every device gets the elementwise `op` (`Sum`, `Max` or `Min`) of all devices'
    /// operands, combined in rank order. The type is the operand's.
    AllReduce {
        op: ReduceOp,
        world: u32,
    },
    /// A collective: every device gets all devices' operands concatenated along `axis` in rank
    /// order (that axis `world` times larger).
    AllGather {
        axis: usize,
        world: u32,
    },
    /// A collective: the elementwise sum of all devices' operands, cut into `world` equal parts
    /// along `axis`, of which device `r` keeps part `r`.
    ReduceScatter {
        axis: usize,
        world: u32,
    },
}

/// How many operands an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Exactly(usize),
    AtLeast(usize),
}

impl Arity {
    pub fn accepts(self, n: usize) -> bool {
        match self {
            Arity::Exactly(k) => n == k,
            Arity::AtLeast(k) => n >= k,
        }
    }
}

impl fmt::Display for Arity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arity::Exactly(k) => write!(f, "{k}"),
            Arity::AtLeast(k) => write!(f, "at least {k}"),
        }
    }
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 20] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Reciprocal,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::GeluErf,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Not,
        UnaryOp::BitNot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Reciprocal => "reciprocal",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Silu => "silu",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Not => "not",
            UnaryOp::BitNot => "bit_not",
        }
    }
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 21] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRight,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Rem => "rem",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::BitAnd => "bit_and",
            BinaryOp::BitOr => "bit_or",
            BinaryOp::BitXor => "bit_xor",
            BinaryOp::ShiftLeft => "shift_left",
            BinaryOp::ShiftRight => "shift_right",
        }
    }

    /// The ops on the bits of integers: and, or, xor and the shifts.
    pub fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinaryOp::BitAnd
                | BinaryOp::BitOr
                | BinaryOp::BitXor
                | BinaryOp::ShiftLeft
                | BinaryOp::ShiftRight
        )
    }

    /// Comparisons produce bool.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 7] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Mean => "reduce_mean",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
            ReduceOp::Prod => "reduce_prod",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
}

impl Op {
    /// The op's name in the text form and in error messages.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Parameter { .. } => "parameter",
            Op::Constant { .. } => "constant",
            Op::State { .. } => "state",
            Op::Unary(u) => u.name(),
            Op::Cast { .. } => "cast",
            Op::Binary(b) => b.name(),
            Op::Select => "select",
            Op::Reduce { op, .. } => op.name(),
            Op::MatMul => "matmul",
            Op::Conv { .. } => "conv",
            Op::Iota { .. } => "iota",
            Op::DimValue { .. } => "dim_value",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::BroadcastTo { .. } => "broadcast_to",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Pad { .. } => "pad",
            Op::Squeeze { .. } => "squeeze",
            Op::Unsqueeze { .. } => "unsqueeze",
            Op::Gather { .. } => "gather",
            Op::StateAssign => "state_assign",
            Op::StateWriteSlice { .. } => "state_write_slice",
            Op::AllReduce { op, .. } => match op {
                ReduceOp::Max => "all_reduce_max",
                ReduceOp::Min => "all_reduce_min",
                _ => "all_reduce_sum",
            },
            Op::AllGather { .. } => "all_gather",
            Op::ReduceScatter { .. } => "reduce_scatter",
        }
    }

    pub fn arity(&self) -> Arity {
        match self {
            Op::Input { .. }
            | Op::Parameter { .. }
            | Op::Constant { .. }
            | Op::State { .. }
            | Op::Iota { .. }
            | Op::DimValue { .. } => Arity::Exactly(0),
            Op::Unary(_)
            | Op::Cast { .. }
            | Op::Reduce { .. }
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::BroadcastTo { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Squeeze { .. }
            | Op::Unsqueeze { .. }
            | Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::ReduceScatter { .. } => Arity::Exactly(1),
            Op::Binary(_) | Op::MatMul | Op::Conv { .. } | Op::Gather { .. } | Op::StateAssign => {
                Arity::Exactly(2)
            }
            Op::Select => Arity::Exactly(3),
            Op::Concat { .. } => Arity::AtLeast(1),
            Op::StateWriteSlice { start, .. } => {
                Arity::Exactly(if start.is_some() { 2 } else { 3 })
            }
        }
    }

    /// Sources take no operands; their type is declared, not inferred.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Op::Input { .. } | Op::Parameter { .. } | Op::Constant { .. } | Op::State { .. }
        )
    }

    /// State updates: the graph's mutable outputs. Operand 0 is the state they write.
    pub fn is_state_update(&self) -> bool {
        matches!(self, Op::StateAssign | Op::StateWriteSlice { .. })
    }

    /// Collectives: ops whose value on one device depends on the other devices' operands.
    pub fn is_collective(&self) -> bool {
        matches!(
            self,
            Op::AllReduce { .. } | Op::AllGather { .. } | Op::ReduceScatter { .. }
        )
    }

    /// The name a source is bound by at run time (inputs, parameters, states).
    pub fn source_name(&self) -> Option<&str> {
        match self {
            Op::Input { name } | Op::Parameter { name } | Op::State { name } => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Dim> for ReshapeDim {
    fn from(d: Dim) -> Self {
        ReshapeDim::Dim(d)
    }
}

impl From<u64> for ReshapeDim {
    fn from(n: u64) -> Self {
        ReshapeDim::Dim(Dim::Static(n))
    }
}

impl From<&str> for ReshapeDim {
    fn from(name: &str) -> Self {
        ReshapeDim::Dim(Dim::from(name))
    }
}
