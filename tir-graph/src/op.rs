//! The operations of the graph IR. Each op's result type comes from [`crate::infer`].

use crate::{DType, Dim};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Elementwise ops of one operand. The result has the operand's type (see [`crate::infer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// `1 / x`.
    Reciprocal,
    /// `sin(x)`, in radians.
    Sin,
    /// `cos(x)`, in radians.
    Cos,
    /// Hyperbolic tangent.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `max(x, 0)`.
    Relu,
    /// `x * Φ(x)` with the exact normal CDF (erf form).
    GeluErf,
    /// The tanh approximation of gelu.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// The error function.
    Erf,
    /// Rounds toward negative infinity.
    Floor,
    /// Rounds toward positive infinity.
    Ceil,
    /// Logical not of a bool tensor.
    Not,
    /// Bitwise complement of an integer (appended: `.tir` files store the variant index).
    BitNot,
}

/// Elementwise ops of two operands with NumPy broadcasting; both operands share one dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `x + y` (integers wrap).
    Add,
    /// `x - y` (integers wrap).
    Sub,
    /// `x * y` (integers wrap).
    Mul,
    /// `x / y`; integers truncate toward zero, and `x / 0 = 0`.
    Div,
    /// `x^y`; for integers a negative exponent gives `1 / x^-y` truncated.
    Pow,
    /// The larger of `x` and `y`; NaN if either is NaN, and `+0` over `-0`.
    Maximum,
    /// The smaller of `x` and `y`; NaN if either is NaN, and `-0` over `+0`.
    Minimum,
    /// `x == y` (bool result).
    Eq,
    /// `x != y` (bool result).
    Ne,
    /// `x < y` (bool result).
    Lt,
    /// `x <= y` (bool result).
    Le,
    /// `x > y` (bool result).
    Gt,
    /// `x >= y` (bool result).
    Ge,
    /// Logical and: true where both are nonzero.
    And,
    /// Logical or: true where either is nonzero.
    Or,
    /// The remainder of truncating division (C's `fmod`): the dividend's sign, exact for
    /// floats; integers wrap and `x rem 0 = x` (as `x / 0 = 0`). Appended last: `.tir` files
    /// store the variant index.
    Rem,
    /// Bitwise and, or and exclusive or of integers.
    BitAnd,
    /// Bitwise or of integers.
    BitOr,
    /// Bitwise exclusive or of integers.
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
    /// Sum of the elements.
    Sum,
    /// Arithmetic mean (for integers, the sum divided by the count, truncated).
    Mean,
    /// Largest element.
    Max,
    /// Smallest element.
    Min,
    /// Product of the elements.
    Prod,
    /// Index (i64) of the first maximum along exactly one axis.
    ArgMax,
    /// Index (i64) of the first minimum along exactly one axis.
    ArgMin,
}

/// One target dim of a reshape: given, or inferred from the element count (at most one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ReshapeDim {
    /// This size (static or symbolic).
    Dim(Dim),
    /// Whatever size makes the element count match the operand's.
    Infer,
}

/// The range `start..stop` with `step` taken along one axis. `stop: None` means the end of the
/// axis. A stop that is not static (`seq`, where an exporter slices a table of positions to the
/// sequence's length) must be at most the axis's size: a run whose binding breaks that is
/// refused ([`crate::Graph::dim_bounds`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SliceRange {
    /// First index taken.
    pub start: u64,
    /// One past the last index taken (`None`: the axis's end); at most the axis's size.
    pub stop: Option<Dim>,
    /// Distance between taken indices (≥ 1).
    pub step: u64,
}

impl SliceRange {
    /// The whole axis.
    pub const FULL: SliceRange = SliceRange {
        start: 0,
        stop: None,
        step: 1,
    };

    /// `start..stop` with `step`, of a static `stop`.
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
    /// Values of a bool dtype.
    Bool(Vec<bool>),
    /// Values of an integer dtype (i8, u8, i32, i64), each within that dtype's range.
    Int(Vec<i64>),
    /// Values of a float dtype, each exactly representable in that dtype.
    Float(Vec<ExactF64>),
}

impl ConstData {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            ConstData::Bool(v) => v.len(),
            ConstData::Int(v) => v.len(),
            ConstData::Float(v) => v.len(),
        }
    }

    /// Whether there are no elements.
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
        /// The name its value is bound by on each run.
        name: String,
    },
    /// A named weight, supplied at run time or stored with the program.
    Parameter {
        /// The name its value is bound by (in a weights file, or set on an executable).
        name: String,
    },
    /// A small tensor embedded in the graph (at most [`MAX_CONSTANT_ELEMENTS`]).
    Constant {
        /// The values, row-major.
        data: ConstData,
    },
    /// The current value of a named buffer that persists between runs (zeros before the first).
    State {
        /// The buffer's name, shared by its `state_assign` or `state_write_slice`.
        name: String,
    },
    /// An elementwise op of one operand.
    Unary(UnaryOp),
    /// Converts each element to another dtype (floats round to nearest, integers truncate toward
    /// zero and wrap, bool is `x != 0`).
    Cast {
        /// The result dtype.
        to: DType,
    },
    /// An elementwise op of two broadcast operands.
    Binary(BinaryOp),
    /// `select(cond, a, b)`: `a` where `cond` is true, else `b`, all three broadcast.
    Select,
    /// A reduction over `axes`.
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// The axes reduced, distinct and in range.
        axes: Vec<usize>,
        /// Whether reduced axes stay as size 1 (otherwise they are removed).
        keepdims: bool,
    },
    /// `a[..., m, k] @ b[..., k, n]`, batch dims broadcast.
    MatMul,
    /// The same elements, row-major, in a new shape.
    Reshape {
        /// The result's dims, at most one of them inferred.
        dims: Vec<ReshapeDim>,
    },
    /// Result dim `i` is operand dim `perm[i]`.
    Permute {
        /// A permutation of the operand's axes.
        perm: Vec<usize>,
    },
    /// Repeats size-1 axes (and adds leading ones) to reach `dims`, NumPy's rule.
    BroadcastTo {
        /// The result's dims.
        dims: Vec<Dim>,
    },
    /// One range per axis.
    Slice {
        /// One range per axis of the operand.
        ranges: Vec<SliceRange>,
    },
    /// Joins any number (≥ 1) of operands along `axis`.
    Concat {
        /// The axis joined along; the other dims must be equal.
        axis: usize,
    },
    /// Pads each axis with `(before, after)` elements of `value`.
    Pad {
        /// `(before, after)` per axis, in elements.
        pads: Vec<(u64, u64)>,
        /// The fill value.
        value: ExactF64,
    },
    /// Removes the given axes, each of static size 1.
    Squeeze {
        /// The axes removed, by operand position.
        axes: Vec<usize>,
    },
    /// Inserts size-1 axes at the given positions of the result.
    Unsqueeze {
        /// The positions of the new axes in the result.
        axes: Vec<usize>,
    },
    /// `gather(data, indices)`: result is `data[.., indices[...], ..]` along `axis`.
    Gather {
        /// The axis of `data` the indices select along.
        axis: usize,
    },
    /// `state_assign(state, value)`: the state holds `value` after this run.
    StateAssign,
    /// `state_write_slice(state, value[, offset])`: writes `value` into the state at `start`
    /// along `axis` (all other axes whole). `start: None` takes the start from the third operand,
    /// a scalar i32/i64 read at run time (e.g. the KV-cache position).
    StateWriteSlice {
        /// The axis written along.
        axis: usize,
        /// The static start offset, or `None` for the run-time third operand.
        start: Option<u64>,
    },
    // New variants go last: `.tir` files store the variant's index.
    /// `conv(x, w)`: the cross-correlation of `x: [N, C, S..]` (1 to 3 spatial axes) with
    /// `w: [O, C / groups, K..]`, giving `[N, O, Q..]` with
    /// `Q = (S + before + after - dilation·(K - 1) - 1) / stride + 1` (floor) per spatial axis.
    /// Channels split into `groups` equal groups: output channel `o` reads only the input
    /// channels of its group `o / (O / groups)` (ONNX's and PyTorch's `Conv`, without bias).
    Conv {
        /// Step per spatial axis, in elements.
        strides: Vec<u64>,
        /// Spacing between kernel taps per spatial axis (1: dense).
        dilations: Vec<u64>,
        /// Zero padding `(before, after)` per spatial axis, in elements.
        pads: Vec<(u64, u64)>,
        /// The number of channel groups; divides `C` and `O`.
        groups: u64,
    },
    /// `iota()`: the `i64` vector `0, 1, .., len - 1`, of a length that may be symbolic (the
    /// positions of a sequence, what an exported `Range(0, seq, 1)` computes).
    Iota {
        /// The vector's length.
        len: Dim,
    },
    /// `dim_value()`: the value of a dim as an `i64` scalar, so that run-time arithmetic can read
    /// a symbolic size (an exported mask or index computation multiplies by `seq`).
    DimValue {
        /// The dim whose value is read.
        dim: Dim,
    },
    /// A collective over the `world` devices of a mesh, each running the same graph on its
    /// shard: every device gets the elementwise `op` (`Sum`, `Max` or `Min`) of all devices'
    /// operands, combined in rank order. The type is the operand's.
    AllReduce {
        /// `Sum`, `Max` or `Min`.
        op: ReduceOp,
        /// The number of devices taking part.
        world: u32,
    },
    /// A collective: every device gets all devices' operands concatenated along `axis` in rank
    /// order (that axis `world` times larger).
    AllGather {
        /// The axis gathered along.
        axis: usize,
        /// The number of devices taking part.
        world: u32,
    },
    /// A collective: the elementwise sum of all devices' operands, cut into `world` equal parts
    /// along `axis`, of which device `r` keeps part `r`.
    ReduceScatter {
        /// The axis cut into `world` parts.
        axis: usize,
        /// The number of devices taking part.
        world: u32,
    },
    /// `custom(x..)`: output `output` of a user's kernel ([`crate::custom`]) applied to its
    /// inputs; a kernel with several outputs is one node per output.
    Custom {
        /// The kernel.
        kernel: crate::custom::CustomRef,
        /// Which of its outputs this node is.
        output: usize,
    },
}

/// How many operands an op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    /// Exactly this many.
    Exactly(usize),
    /// This many or more.
    AtLeast(usize),
}

impl Arity {
    /// Whether an op of this arity accepts `n` operands.
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
    /// Every unary op.
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

    /// The op's name in the text form.
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
    /// Every binary op.
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

    /// The op's name in the text form.
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
    /// Every reduction.
    pub const ALL: [ReduceOp; 7] = [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
        ReduceOp::ArgMax,
        ReduceOp::ArgMin,
    ];

    /// The op's name in the text form (`reduce_sum`, `argmax`, ...).
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
            Op::Custom { .. } => "custom",
        }
    }

    /// How many operands the op takes (`concat` any number ≥ 1; `state_write_slice` 2 or 3).
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
            Op::Custom { kernel, .. } => Arity::Exactly(kernel.kernel().inputs().len()),
        }
    }

    /// Sources take no operands; their type is declared, not inferred.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            Op::Input { .. } | Op::Parameter { .. } | Op::Constant { .. } | Op::State { .. }
        )
    }

    /// State updates: the graph's mutable outputs. Operand 0 is the state they write. A user's
    /// kernel's output that updates its input 0 in place is one
    /// ([`crate::custom::CustomOutput::updates`]).
    pub fn is_state_update(&self) -> bool {
        match self {
            Op::StateAssign | Op::StateWriteSlice { .. } => true,
            Op::Custom { kernel, output } => kernel
                .kernel()
                .outputs()
                .get(*output)
                .is_some_and(|o| o.updates.is_some()),
            _ => false,
        }
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
