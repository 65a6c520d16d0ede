//! Proptest strategies that generate random **valid** graphs, for property tests of this crate
//! (file and text round trips) and of later stages (an optimizer's rewrites, evaluated
//! numerically against the original graph).
//!
//! Available in this crate's tests, and to other crates with the `testing` feature
//! (`tir-graph = { workspace = true, features = ["testing"] }` under `[dev-dependencies]`).
//!
//! # How graphs are made
//!
//! A strategy draws a [`Recipe`]: a list of steps, each an [`OpKind`] and a seed. [`build_graph`]
//! replays it through [`Graph::add_node`] only: each step picks its operands among the nodes built
//! so far and its attributes from those operands' actual types (axes within the rank, slice and
//! pad ranges within static sizes, reshape targets that factor the element count, matmul partners
//! with the right inner dim, ...), creating a fresh source when no node fits. A step whose node
//! inference still refuses, or whose result would exceed [`GraphConfig::max_numel`], is skipped.
//! Shrinking drops steps, so a failing graph shrinks to a short recipe.
//!
//! # What every generated graph guarantees
//!
//! - It is valid: built only through `add_node`/`add_output`, so [`Graph::verify`] passes.
//! - It has at least one result (an output, or a state update), and at least one node.
//! - Every node's static element count (the product of its static dims) is at most
//!   `max_numel`; every dtype of a source is one of [`GraphConfig::dtypes`] (index tensors for
//!   `gather` and offsets for `state_write_slice` may add i32/i64), and only the op kinds and
//!   unary/binary/reduce ops the config lists appear.
//!
//! # The two ready-made configurations
//!
//! - [`arb_graph`] ([`GraphConfig::full`]): every op kind and every unary, binary and reduce op;
//!   all dtypes; symbolic dims (`batch`, `seq`, ...), zero-size dims and ranks up to
//!   [`crate::MAX_RANK`]; constants of every dtype including NaN (also negative and with a
//!   payload), ±inf, -0.0, subnormals and integer extremes; pad values likewise; states read,
//!   assigned, and written by slice at static and dynamic offsets; source and output names with
//!   odd characters (quotes, backslashes, newlines, NUL, `%`, `#`, non-ASCII, names that look like
//!   keywords or numbers). Over a few hundred graphs every op name of [`Op::name`] appears (a
//!   unit test below checks it, and checks the features listed in [`feature_tags`]).
//! - [`arb_numeric_graph`] ([`GraphConfig::numeric`]): for numeric evaluation. Only f32 values,
//!   only static shapes (dims 1..=4, rank ≤ 4, at most 256 elements per node), no states, no
//!   `gather`/`select`/comparisons/argmax/argmin (so every node is a float tensor), finite
//!   constants and pad values in [-8, 8] on a 1/16 grid. It contains elementwise unary and binary
//!   ops (including the partial ones: `log`, `sqrt`, `rsqrt`, `reciprocal`, `div`, `pow` may give
//!   NaN/inf on some inputs; remove them from the config's lists if that matters), reductions,
//!   matmul and the layout ops (reshape, permute, broadcast_to, slice, concat, pad, squeeze,
//!   unsqueeze), and `cast`. Every node without users is an output.

use crate::eval::SplitMix64;
use crate::infer::infer;
use crate::op::{ConstData, ExactF64};
use crate::{
    BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, ReshapeDim, Shape, SliceRange, TensorType,
    UnaryOp, MAX_RANK,
};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::ops::Range;

/// The kinds of step a recipe can take: one per variant of [`Op`], with unary, binary and
/// reduce ops chosen inside the step from the config's lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// Adds an [`Op::Input`] node.
    Input,
    /// Adds an [`Op::Parameter`] node.
    Parameter,
    /// Adds an [`Op::Constant`] node.
    Constant,
    /// Adds an [`Op::State`] node.
    State,
    /// Adds an [`Op::Unary`] node.
    Unary,
    /// Adds an [`Op::Cast`] node.
    Cast,
    /// Adds an [`Op::Binary`] node.
    Binary,
    /// Adds an [`Op::Select`] node.
    Select,
    /// Adds an [`Op::Reduce`] node.
    Reduce,
    /// Adds an [`Op::MatMul`] node.
    MatMul,
    /// Adds an [`Op::Conv`] node.
    Conv,
    /// Adds an [`Op::Reshape`] node.
    Reshape,
    /// Adds an [`Op::Permute`] node.
    Permute,
    /// Adds an [`Op::BroadcastTo`] node.
    BroadcastTo,
    /// Adds an [`Op::Slice`] node.
    Slice,
    /// Adds an [`Op::Concat`] node.
    Concat,
    /// Adds an [`Op::Pad`] node.
    Pad,
    /// Adds an [`Op::Squeeze`] node.
    Squeeze,
    /// Adds an [`Op::Unsqueeze`] node.
    Unsqueeze,
    /// Adds an [`Op::Gather`] node.
    Gather,
    /// Adds an [`Op::StateAssign`] node.
    StateAssign,
    /// Adds an [`Op::StateWriteSlice`] node.
    StateWriteSlice,
    /// Adds an [`Op::Iota`] node.
    Iota,
    /// Adds an [`Op::DimValue`] node.
    DimValue,
    /// Adds an `all_reduce_*`, `all_gather` or `reduce_scatter` node (graphs for one device
    /// of a mesh).
    Collective,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 25] = [
        OpKind::Input,
        OpKind::Parameter,
        OpKind::Constant,
        OpKind::State,
        OpKind::Unary,
        OpKind::Cast,
        OpKind::Binary,
        OpKind::Select,
        OpKind::Reduce,
        OpKind::MatMul,
        OpKind::Conv,
        OpKind::Reshape,
        OpKind::Permute,
        OpKind::BroadcastTo,
        OpKind::Slice,
        OpKind::Concat,
        OpKind::Pad,
        OpKind::Squeeze,
        OpKind::Unsqueeze,
        OpKind::Gather,
        OpKind::StateAssign,
        OpKind::StateWriteSlice,
        OpKind::Iota,
        OpKind::DimValue,
        OpKind::Collective,
    ];

    /// The kind of step that makes `op`. Exhaustive, so a new op must be added here (and to
    /// the generator) before this module compiles.
    pub fn of(op: &Op) -> OpKind {
        match op {
            Op::Input { .. } => OpKind::Input,
            Op::Parameter { .. } => OpKind::Parameter,
            Op::Constant { .. } => OpKind::Constant,
            Op::State { .. } => OpKind::State,
            Op::Unary(_) => OpKind::Unary,
            Op::Cast { .. } => OpKind::Cast,
            Op::Binary(_) => OpKind::Binary,
            Op::Select => OpKind::Select,
            Op::Reduce { .. } => OpKind::Reduce,
            Op::MatMul => OpKind::MatMul,
            Op::Conv { .. } => OpKind::Conv,
            Op::Reshape { .. } => OpKind::Reshape,
            Op::Permute { .. } => OpKind::Permute,
            Op::BroadcastTo { .. } => OpKind::BroadcastTo,
            Op::Slice { .. } => OpKind::Slice,
            Op::Concat { .. } => OpKind::Concat,
            Op::Pad { .. } => OpKind::Pad,
            Op::Squeeze { .. } => OpKind::Squeeze,
            Op::Unsqueeze { .. } => OpKind::Unsqueeze,
            Op::Gather { .. } => OpKind::Gather,
            Op::StateAssign => OpKind::StateAssign,
            Op::StateWriteSlice { .. } => OpKind::StateWriteSlice,
            Op::Iota { .. } => OpKind::Iota,
            Op::DimValue { .. } => OpKind::DimValue,
            Op::AllReduce { .. } | Op::AllGather { .. } | Op::ReduceScatter { .. } => {
                OpKind::Collective
            }
        }
    }

    /// Whether this kind adds a source node (no operands).
    pub fn is_source(self) -> bool {
        matches!(
            self,
            OpKind::Input | OpKind::Parameter | OpKind::Constant | OpKind::State
        )
    }
}

/// Every name [`Op::name`] can return, in a fixed order.
pub fn all_op_names() -> Vec<&'static str> {
    let mut names = Vec::new();
    for kind in OpKind::ALL {
        match kind {
            OpKind::Unary => names.extend(UnaryOp::ALL.iter().map(|u| u.name())),
            OpKind::Binary => names.extend(BinaryOp::ALL.iter().map(|b| b.name())),
            OpKind::Reduce => names.extend(ReduceOp::ALL.iter().map(|r| r.name())),
            OpKind::Collective => names.extend(COLLECTIVES.iter().map(|c| c.name())),
            other => names.push(representative(other).name()),
        }
    }
    names
}

/// One collective of each name.
const COLLECTIVES: [Op; 5] = [
    Op::AllReduce {
        op: ReduceOp::Sum,
        world: 2,
    },
    Op::AllReduce {
        op: ReduceOp::Max,
        world: 2,
    },
    Op::AllReduce {
        op: ReduceOp::Min,
        world: 2,
    },
    Op::AllGather { axis: 0, world: 2 },
    Op::ReduceScatter { axis: 0, world: 2 },
];

/// An op of `kind` with arbitrary attributes (for its name).
fn representative(kind: OpKind) -> Op {
    let name = String::new();
    match kind {
        OpKind::Input => Op::Input { name },
        OpKind::Parameter => Op::Parameter { name },
        OpKind::Constant => Op::Constant {
            data: ConstData::Bool(Vec::new()),
        },
        OpKind::State => Op::State { name },
        OpKind::Unary => Op::Unary(UnaryOp::Neg),
        OpKind::Cast => Op::Cast { to: DType::F32 },
        OpKind::Binary => Op::Binary(BinaryOp::Add),
        OpKind::Select => Op::Select,
        OpKind::Reduce => Op::Reduce {
            op: ReduceOp::Sum,
            axes: Vec::new(),
            keepdims: false,
        },
        OpKind::MatMul => Op::MatMul,
        OpKind::Conv => Op::Conv {
            strides: Vec::new(),
            dilations: Vec::new(),
            pads: Vec::new(),
            groups: 1,
        },
        OpKind::Reshape => Op::Reshape { dims: Vec::new() },
        OpKind::Permute => Op::Permute { perm: Vec::new() },
        OpKind::BroadcastTo => Op::BroadcastTo { dims: Vec::new() },
        OpKind::Slice => Op::Slice { ranges: Vec::new() },
        OpKind::Concat => Op::Concat { axis: 0 },
        OpKind::Pad => Op::Pad {
            pads: Vec::new(),
            value: ExactF64(0.0),
        },
        OpKind::Squeeze => Op::Squeeze { axes: Vec::new() },
        OpKind::Unsqueeze => Op::Unsqueeze { axes: Vec::new() },
        OpKind::Gather => Op::Gather { axis: 0 },
        OpKind::StateAssign => Op::StateAssign,
        OpKind::StateWriteSlice => Op::StateWriteSlice {
            axis: 0,
            start: None,
        },
        OpKind::Iota => Op::Iota {
            len: Dim::Static(1),
        },
        OpKind::DimValue => Op::DimValue {
            dim: Dim::Static(1),
        },
        OpKind::Collective => COLLECTIVES[0].clone(),
    }
}

/// What the generator may produce. Start from [`GraphConfig::full`] or [`GraphConfig::numeric`]
/// and adjust fields.
#[derive(Clone, Debug)]
pub struct GraphConfig {
    /// How many steps a recipe has (each adds at most a few nodes; skipped steps add none).
    pub steps: Range<usize>,
    /// The step kinds with their relative weights; kinds absent (or weighted 0) never appear.
    pub kinds: Vec<(OpKind, u32)>,
    /// The unary ops a `Unary` step chooses from.
    pub unary_ops: Vec<UnaryOp>,
    /// The binary ops a `Binary` step chooses from.
    pub binary_ops: Vec<BinaryOp>,
    /// The reductions a `Reduce` step chooses from.
    pub reduce_ops: Vec<ReduceOp>,
    /// Dtypes of inputs, parameters, states and constants, and the targets of `cast`.
    pub dtypes: Vec<DType>,
    /// The largest rank of a fresh source (ops may add dims up to [`crate::MAX_RANK`]).
    pub max_rank: usize,
    /// Static dims of fresh sources are in `1..=max_dim` (or 0, see `zero_dims`).
    pub max_dim: u64,
    /// Whether a static dim may be 0 (rarely).
    pub zero_dims: bool,
    /// Names of symbolic dims sources may have; empty for static shapes only.
    pub symbols: Vec<String>,
    /// The most elements (the product of the static dims) any node may have.
    pub max_numel: u64,
    /// The most elements a constant may have.
    pub max_constant_elements: u64,
    /// Whether float constants and pad values may be NaN, ±inf, -0.0, subnormal or extreme
    /// (otherwise they are multiples of 1/16 in [-8, 8]), and integer ones the dtype's extremes.
    pub special_floats: bool,
    /// Whether the special NaNs include non-canonical ones (negative, with a payload).
    pub nan_payloads: bool,
    /// Whether source and output names may contain odd characters.
    pub odd_names: bool,
    /// Whether every node without users (other than a state update) becomes an output.
    pub output_sinks: bool,
}

/// The integer dtypes added after the kept draws (see [`GraphConfig::full`]).
const LATER_INTS: [DType; 4] = [DType::I16, DType::U16, DType::U32, DType::U64];

impl GraphConfig {
    /// Every op kind, dtype and attribute form the kept draws were made with (see the module
    /// doc); [`Self::with_dim_ops`] and [`Self::with_integer_bits`] add what came later.
    pub fn full() -> GraphConfig {
        let weight = |k: OpKind| match k {
            // Kinds added after the kept draws (`testsuite::differential::KEPT`) weigh nothing
            // here, so that those draws stay the graphs they were kept for; [`Self::with_dim_ops`]
            // adds them.
            OpKind::Iota | OpKind::DimValue | OpKind::Collective => 0,
            OpKind::Constant => 4,
            OpKind::Input | OpKind::Parameter => 3,
            OpKind::Unary | OpKind::Binary => 5,
            OpKind::State => 2,
            _ => 2,
        };
        GraphConfig {
            steps: 1..40,
            kinds: OpKind::ALL.iter().map(|&k| (k, weight(k))).collect(),
            // The bit ops and the rarer integer dtypes came after the kept draws too:
            // [`Self::with_integer_bits`] adds them.
            unary_ops: UnaryOp::ALL
                .into_iter()
                .filter(|u| *u != UnaryOp::BitNot)
                .collect(),
            binary_ops: BinaryOp::ALL
                .into_iter()
                .filter(|b| !b.is_bitwise())
                .collect(),
            reduce_ops: ReduceOp::ALL.to_vec(),
            // The f8 dtypes came later too, and are not drawn.
            dtypes: DType::ALL
                .into_iter()
                .filter(|d| !LATER_INTS.contains(d) && d.float8().is_none())
                .collect(),
            max_rank: 4,
            max_dim: 5,
            zero_dims: true,
            symbols: ["batch", "seq", "n", "_k9"].map(String::from).to_vec(),
            max_numel: 4096,
            max_constant_elements: 12,
            special_floats: true,
            nan_payloads: true,
            odd_names: true,
            output_sinks: false,
        }
    }

    /// This config with iotas and dim values drawn as often as most kinds (over its symbols, when
    /// it has any).
    pub fn with_dim_ops(mut self) -> GraphConfig {
        for (k, w) in &mut self.kinds {
            if matches!(k, OpKind::Iota | OpKind::DimValue) {
                *w = 2;
            }
        }
        self
    }

    /// This config with collectives drawn as often as most kinds: graphs of one device of a
    /// mesh, for the file forms (the single-device oracle refuses to evaluate them).
    pub fn with_collectives(mut self) -> GraphConfig {
        for (k, w) in &mut self.kinds {
            if *k == OpKind::Collective {
                *w = 2;
            }
        }
        self
    }

    /// This config with the bit ops and the integer dtypes `i16`, `u16`, `u32`, `u64`.
    pub fn with_integer_bits(mut self) -> GraphConfig {
        self.unary_ops.push(UnaryOp::BitNot);
        self.binary_ops
            .extend(BinaryOp::ALL.into_iter().filter(|b| b.is_bitwise()));
        self.dtypes.extend(LATER_INTS);
        self
    }

    /// Float elementwise, reduction, matmul and layout ops over small static f32 shapes, for
    /// numeric evaluation (see the module doc).
    pub fn numeric() -> GraphConfig {
        use OpKind::*;
        let kinds = [
            (Input, 3),
            (Parameter, 2),
            (Constant, 2),
            (Unary, 4),
            (Cast, 1),
            (Binary, 5),
            (Reduce, 3),
            (MatMul, 2),
            (Conv, 1),
            (Reshape, 2),
            (Permute, 2),
            (BroadcastTo, 1),
            (Slice, 2),
            (Concat, 2),
            (Pad, 1),
            (Squeeze, 1),
            (Unsqueeze, 1),
        ];
        GraphConfig {
            steps: 1..24,
            kinds: kinds.to_vec(),
            unary_ops: UnaryOp::ALL
                .into_iter()
                .filter(|u| !matches!(u, UnaryOp::Not | UnaryOp::BitNot))
                .collect(),
            binary_ops: vec![
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Pow,
                BinaryOp::Maximum,
                BinaryOp::Minimum,
            ],
            reduce_ops: vec![
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Prod,
            ],
            dtypes: vec![DType::F32],
            max_rank: 4,
            max_dim: 4,
            zero_dims: false,
            symbols: Vec::new(),
            max_numel: 256,
            max_constant_elements: 16,
            special_floats: false,
            nan_payloads: false,
            odd_names: false,
            output_sinks: true,
        }
    }
}

/// A replayable description of a graph: [`build_graph`] turns it into the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// Each step: what to add, and the seed of its choices.
    pub steps: Vec<(OpKind, u64)>,
    /// The seed of the final choices (outputs).
    pub seed: u64,
}

/// Random recipes for `config`.
pub fn arb_recipe(config: &GraphConfig) -> impl Strategy<Value = Recipe> {
    let weighted: Vec<(u32, Just<OpKind>)> = config
        .kinds
        .iter()
        .filter(|(_, w)| *w > 0)
        .map(|&(k, w)| (w, Just(k)))
        .collect();
    assert!(!weighted.is_empty(), "GraphConfig::kinds is empty");
    let kind = proptest::strategy::Union::new_weighted(weighted);
    (
        proptest::collection::vec((kind, any::<u64>()), config.steps.clone()),
        any::<u64>(),
    )
        .prop_map(|(steps, seed)| Recipe { steps, seed })
}

/// Random valid graphs for `config`.
pub fn arb_graph_with(config: GraphConfig) -> impl Strategy<Value = Graph> {
    arb_recipe(&config).prop_map(move |recipe| build_graph(&config, &recipe))
}

/// Random valid graphs using every op kind and attribute form ([`GraphConfig::full`]).
pub fn arb_graph() -> impl Strategy<Value = Graph> {
    arb_graph_with(GraphConfig::full())
}

/// Random valid float graphs over small static shapes ([`GraphConfig::numeric`]).
pub fn arb_numeric_graph() -> impl Strategy<Value = Graph> {
    arb_graph_with(GraphConfig::numeric())
}

/// Replays `recipe` under `config`. Deterministic: the same recipe gives the same graph.
pub fn build_graph(config: &GraphConfig, recipe: &Recipe) -> Graph {
    let mut b = Builder {
        cfg: config,
        g: Graph::new(),
        source_names: BTreeSet::new(),
        output_names: BTreeSet::new(),
        fresh: 0,
    };
    for &(kind, seed) in &recipe.steps {
        let mut rng = Rng::new(seed);
        if b.g.is_empty() && !kind.is_source() {
            b.source(&mut rng, OpKind::Input);
        }
        let made = b.step(kind, &mut rng);
        if let Some(id) = made {
            if rng.chance(1, 8) {
                b.output(&mut rng, id);
            }
        }
    }
    let mut rng = Rng::new(recipe.seed);
    if b.g.is_empty() {
        b.source(&mut rng, OpKind::Input);
    }
    if b.g.is_empty() {
        // Even the config's dtypes and shapes failed; a scalar f32 input always works.
        let ty = TensorType::new(DType::F32, Shape::scalar());
        let name = b.source_name(&mut rng);
        b.add_source(Op::Input { name }, ty);
    }
    b.finish(&mut rng)
}

/// A small deterministic generator (splitmix64) for a step's choices.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64(seed ^ 0x5851_f42d_4c95_7f2d))
    }

    fn next(&mut self) -> u64 {
        self.0.next()
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo + 1)
        }
    }

    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            Some(xs[self.below(xs.len())].clone())
        }
    }

    fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            xs.swap(i, self.below(i + 1));
        }
    }

    /// A random subset of `0..n` of size `k` (distinct, in random order).
    fn distinct(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        self.shuffle(&mut all);
        all.truncate(k);
        all
    }
}

/// Name fragments with characters a text form must quote or escape.
const ODD_NAME_PARTS: &[&str] = &[
    "a b",
    "q\"t",
    "b\\s",
    "nl\n",
    "\t",
    "%0",
    "#",
    "=",
    ", ",
    "(",
    ")",
    "[1]",
    "{",
    "}",
    ":",
    ";",
    "é",
    "名前",
    "🦀",
    "\u{0}",
    "\r\n",
    " ",
    "-1",
    "1e5",
    "input",
    "nan",
    "->",
    "'",
    "`",
    "//",
    "/*",
    "\u{7f}",
    "\u{200b}",
    "\u{1b}[0m",
    "x",
    "y",
];

fn special_f64s(payloads: bool) -> Vec<f64> {
    let mut v = vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
        f64::MIN_POSITIVE,
        // The smallest subnormals of f64, f32/bf16 and f16.
        5e-324,
        1.401298464324817e-45,
        5.960464477539063e-8,
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        65504.0,
        65520.0,
        -1e-7,
        0.1,
        1.0 / 3.0,
        1e300,
        -1e-300,
        std::f64::consts::PI,
        9_007_199_254_740_993.0,
        3.4028234663852886e38,
    ];
    if payloads {
        v.extend([
            -f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::from_bits(0xfff8_0000_dead_beef),
        ]);
    }
    v
}

fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U32 => (0, u32::MAX.into()),
        // A u64 constant is held in an i64 (see `ConstData`).
        DType::U64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    }
}

fn unary_accepts(u: UnaryOp, d: DType) -> bool {
    match u {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => d.is_numeric(),
        UnaryOp::Not => d == DType::Bool,
        UnaryOp::BitNot => d.is_int(),
        _ => d.is_float(),
    }
}

fn binary_accepts(b: BinaryOp, d: DType) -> bool {
    match b {
        BinaryOp::And | BinaryOp::Or => d == DType::Bool,
        BinaryOp::Eq | BinaryOp::Ne => true,
        BinaryOp::Pow => d.is_float(),
        b if b.is_bitwise() => d.is_int(),
        _ => d.is_numeric(),
    }
}

fn reduce_accepts(r: ReduceOp, d: DType) -> bool {
    match r {
        ReduceOp::Mean => d.is_float(),
        _ => d.is_numeric(),
    }
}

/// The product of the static dims (symbolic dims count as 1), if it fits.
fn static_part(shape: &Shape) -> Option<u64> {
    shape
        .dims()
        .iter()
        .try_fold(1u64, |acc, d| acc.checked_mul(d.as_static().unwrap_or(1)))
}

fn prime_factors(mut n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut p = 2;
    while p * p <= n {
        while n.is_multiple_of(p) {
            out.push(p);
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        out.push(n);
    }
    out
}

struct Builder<'a> {
    cfg: &'a GraphConfig,
    g: Graph,
    source_names: BTreeSet<String>,
    output_names: BTreeSet<String>,
    fresh: u32,
}

impl Builder<'_> {
    fn ty(&self, id: NodeId) -> &TensorType {
        self.g.ty(id)
    }

    fn fits(&self, ty: &TensorType) -> bool {
        ty.rank() <= MAX_RANK && static_part(&ty.shape).is_some_and(|n| n <= self.cfg.max_numel)
    }

    /// Adds a non-source op if inference accepts it and the result is within bounds.
    fn add(&mut self, op: Op, operands: &[NodeId]) -> Option<NodeId> {
        let types: Vec<&TensorType> = operands.iter().map(|&o| self.ty(o)).collect();
        let ty = infer(&op, &types).ok()?;
        if !self.fits(&ty) {
            return None;
        }
        self.g.add_node(op, operands, None).ok()
    }

    fn add_source(&mut self, op: Op, ty: TensorType) -> Option<NodeId> {
        if !self.fits(&ty) {
            return None;
        }
        let name = op.source_name().map(str::to_string);
        let id = self.g.add_node(op, &[], Some(ty)).ok()?;
        if let Some(name) = name {
            self.source_names.insert(name);
        }
        Some(id)
    }

    /// A node whose type satisfies `pred`, preferring recent ones (for deeper chains).
    fn pick(&self, rng: &mut Rng, pred: impl Fn(&TensorType) -> bool) -> Option<NodeId> {
        let c: Vec<NodeId> = self.g.node_ids().filter(|&id| pred(self.ty(id))).collect();
        if c.is_empty() {
            None
        } else if rng.chance(1, 2) {
            let k = c.len().min(4);
            Some(c[c.len() - 1 - rng.below(k)])
        } else {
            rng.pick(&c)
        }
    }

    /// A node whose type satisfies `pred`; failing that, a fresh input or parameter of a dtype
    /// satisfying `dtype_ok` (tried a few times, as the shape is random too).
    fn pick_or_make(
        &mut self,
        rng: &mut Rng,
        pred: impl Fn(&TensorType) -> bool,
        dtype_ok: impl Fn(DType) -> bool,
    ) -> Option<NodeId> {
        if rng.chance(7, 8) {
            if let Some(id) = self.pick(rng, &pred) {
                return Some(id);
            }
        }
        let dtypes: Vec<DType> = self
            .cfg
            .dtypes
            .iter()
            .copied()
            .filter(|&d| dtype_ok(d))
            .collect();
        for _ in 0..6 {
            let dtype = rng.pick(&dtypes)?;
            let ty = TensorType::new(dtype, self.fresh_shape(rng));
            if pred(&ty) {
                let kind = if rng.chance(1, 2) {
                    OpKind::Input
                } else {
                    OpKind::Parameter
                };
                return self.named_source(rng, kind, ty);
            }
        }
        self.pick(rng, &pred)
    }

    // ---- names ----

    fn fresh_name(&mut self, rng: &mut Rng, prefix: &str) -> String {
        self.fresh += 1;
        if self.cfg.odd_names && rng.chance(1, 2) {
            let parts = 1 + rng.below(3);
            let mut name: String = (0..parts)
                .map(|_| rng.pick(ODD_NAME_PARTS).unwrap_or("x"))
                .collect();
            if rng.chance(1, 3) {
                name.push_str(&self.fresh.to_string());
            }
            name
        } else {
            format!("{prefix}{}", self.fresh)
        }
    }

    fn source_name(&mut self, rng: &mut Rng) -> String {
        loop {
            let name = self.fresh_name(rng, "v");
            if !self.source_names.contains(&name) {
                return name;
            }
        }
    }

    fn output(&mut self, rng: &mut Rng, node: NodeId) {
        let mut name = self.fresh_name(rng, "out");
        if rng.chance(1, 10) {
            // An output may share a source's name.
            if let Some(src) = rng.pick(&self.source_names.iter().cloned().collect::<Vec<_>>()) {
                name = src;
            }
        }
        while self.output_names.contains(&name) {
            name = self.fresh_name(rng, "out");
        }
        if self.g.add_output(&name, node).is_ok() {
            self.output_names.insert(name);
        }
    }

    fn finish(mut self, rng: &mut Rng) -> Graph {
        if self.cfg.output_sinks {
            let outputs: BTreeSet<NodeId> = self.g.outputs().iter().map(|(_, n)| *n).collect();
            let sinks: Vec<NodeId> = self
                .g
                .node_ids()
                .filter(|&id| {
                    self.g.users(id).is_empty()
                        && !self.g.node(id).op.is_state_update()
                        && !outputs.contains(&id)
                })
                .collect();
            for id in sinks {
                self.output(rng, id);
            }
        }
        if self.g.outputs().is_empty() && self.g.state_updates().is_empty() {
            let last = NodeId(self.g.len() as u32 - 1);
            self.output(rng, last);
        }
        if rng.chance(1, 6) && !self.g.outputs().is_empty() {
            // The same node under a second name.
            let (_, node) = rng.pick(self.g.outputs()).expect("nonempty");
            self.output(rng, node);
        }
        self.g
    }

    // ---- shapes and values ----

    fn dim(&self, rng: &mut Rng) -> Dim {
        if !self.cfg.symbols.is_empty() && rng.chance(1, 6) {
            Dim::Symbolic(rng.pick(&self.cfg.symbols).expect("nonempty"))
        } else if self.cfg.zero_dims && rng.chance(1, 40) {
            Dim::Static(0)
        } else {
            Dim::Static(rng.range(1, self.cfg.max_dim.max(1)))
        }
    }

    fn random_shape(&self, rng: &mut Rng, rank: usize) -> Shape {
        let dims = (0..rank.min(MAX_RANK)).map(|_| self.dim(rng)).collect();
        Shape::new(dims).expect("valid symbols and rank")
    }

    /// A shape for a fresh source: often derived from an existing node's shape (so that
    /// binary ops and concat find partners), else random.
    fn fresh_shape(&self, rng: &mut Rng) -> Shape {
        if !self.g.is_empty() && rng.chance(1, 2) {
            let id = NodeId(rng.below(self.g.len()) as u32);
            let mut dims = self.ty(id).shape.dims().to_vec();
            if rng.chance(1, 3) {
                let drop = rng.below(dims.len() + 1);
                dims.drain(..drop);
            }
            if rng.chance(1, 3) {
                for d in dims.iter_mut() {
                    if rng.chance(1, 3) {
                        *d = Dim::Static(1);
                    }
                }
            }
            return Shape::new(dims).expect("derived from a valid shape");
        }
        let rank = rng.below(self.cfg.max_rank + 1);
        self.random_shape(rng, rank)
    }

    /// A static shape of at most `max_constant_elements` elements.
    fn constant_shape(&self, rng: &mut Rng) -> Shape {
        let dims: Vec<Dim> = self
            .fresh_shape(rng)
            .into_dims()
            .into_iter()
            .map(|d| match d {
                Dim::Symbolic(_) => Dim::Static(rng.range(1, 2)),
                d => d,
            })
            .collect();
        let shape = Shape::new(dims).expect("static dims");
        let limit = self.cfg.max_constant_elements.min(self.cfg.max_numel);
        if shape.static_numel().is_some_and(|n| n <= limit) {
            shape
        } else if rng.chance(1, 4) {
            Shape::scalar()
        } else {
            Shape::of(&[rng.range(1, limit.max(1))])
        }
    }

    fn float_value(&self, rng: &mut Rng, dtype: DType) -> f64 {
        if self.cfg.special_floats && rng.chance(1, 2) {
            let tiny = match dtype {
                DType::F16 => 2f64.powi(-24),
                DType::BF16 => 2f64.powi(-133),
                DType::F32 => 2f64.powi(-149),
                _ => f64::from_bits(1),
            };
            let headline = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, -tiny];
            let v = if rng.chance(1, 2) {
                rng.pick(&headline)
            } else {
                rng.pick(&special_f64s(self.cfg.nan_payloads))
            }
            .expect("nonempty");
            // NaNs are kept bit for bit (a constant accepts any NaN).
            return if v.is_nan() { v } else { dtype.const_value(v) };
        }
        let v = (rng.below(257) as f64 - 128.0) / 16.0;
        dtype.round_value(v)
    }

    fn int_value(&self, rng: &mut Rng, dtype: DType) -> i64 {
        let (lo, hi) = int_range(dtype);
        if self.cfg.special_floats && rng.chance(1, 2) {
            let extremes = [lo, hi, lo, hi, lo.saturating_add(1), hi - 1, 0, 1];
            return rng.pick(&extremes).expect("nonempty").clamp(lo, hi);
        }
        (rng.below(41) as i64 - 20).clamp(lo, hi)
    }

    fn const_data(&self, rng: &mut Rng, dtype: DType, n: usize) -> ConstData {
        match dtype {
            DType::Bool => ConstData::Bool((0..n).map(|_| rng.chance(1, 2)).collect()),
            d if d.is_int() => ConstData::Int((0..n).map(|_| self.int_value(rng, d)).collect()),
            d => ConstData::Float((0..n).map(|_| ExactF64(self.float_value(rng, d))).collect()),
        }
    }

    /// A pad value exact in `dtype`.
    fn pad_value(&self, rng: &mut Rng, dtype: DType) -> f64 {
        let v = match dtype {
            DType::Bool => rng.below(2) as f64,
            d if d.is_int() => self.int_value(rng, d) as f64,
            d => self.float_value(rng, d),
        };
        if dtype.holds(v) {
            v
        } else {
            0.0
        }
    }

    // ---- sources ----

    fn named_source(&mut self, rng: &mut Rng, kind: OpKind, ty: TensorType) -> Option<NodeId> {
        let name = self.source_name(rng);
        let op = match kind {
            OpKind::Input => Op::Input { name },
            OpKind::Parameter => Op::Parameter { name },
            _ => Op::State { name },
        };
        self.add_source(op, ty)
    }

    fn constant(&mut self, rng: &mut Rng, dtype: DType, shape: Shape) -> Option<NodeId> {
        let n = shape.static_numel()? as usize;
        let data = self.const_data(rng, dtype, n);
        self.add_source(Op::Constant { data }, TensorType::new(dtype, shape))
    }

    fn source(&mut self, rng: &mut Rng, kind: OpKind) -> Option<NodeId> {
        let floats: Vec<DType> = self
            .cfg
            .dtypes
            .iter()
            .copied()
            .filter(|d| d.is_float())
            .collect();
        let dtype = match rng.pick(&floats) {
            // Half the constants are floats, for the special values.
            Some(d) if kind == OpKind::Constant && rng.chance(1, 2) => d,
            _ => rng.pick(&self.cfg.dtypes)?,
        };
        if kind == OpKind::Constant {
            let shape = self.constant_shape(rng);
            return self.constant(rng, dtype, shape);
        }
        let ty = TensorType::new(dtype, self.fresh_shape(rng));
        self.named_source(rng, kind, ty)
    }

    /// A fresh source of `dtype` whose shape broadcasts with `shape`: a suffix of it with some
    /// dims set to 1. A constant when `dtype` is a config dtype and the shape allows it.
    fn partner(&mut self, rng: &mut Rng, dtype: DType, shape: &Shape) -> Option<NodeId> {
        let mut dims = shape.dims().to_vec();
        if rng.chance(1, 3) {
            let drop = rng.below(dims.len() + 1);
            dims.drain(..drop);
        }
        for d in dims.iter_mut() {
            if rng.chance(1, 4) {
                *d = Dim::Static(1);
            }
        }
        let constant_ok = self
            .cfg
            .kinds
            .iter()
            .any(|&(k, w)| k == OpKind::Constant && w > 0);
        if constant_ok && rng.chance(1, 3) {
            let dims: Vec<Dim> = dims
                .into_iter()
                .map(|d| match d {
                    Dim::Symbolic(_) => Dim::Static(1),
                    d => d,
                })
                .collect();
            let shape = Shape::new(dims).ok()?;
            if shape.static_numel()? <= self.cfg.max_constant_elements {
                return self.constant(rng, dtype, shape);
            }
            return None;
        }
        let ty = TensorType::new(dtype, Shape::new(dims).ok()?);
        let kind = if rng.chance(1, 2) {
            OpKind::Input
        } else {
            OpKind::Parameter
        };
        self.named_source(rng, kind, ty)
    }

    // ---- steps ----

    fn step(&mut self, kind: OpKind, rng: &mut Rng) -> Option<NodeId> {
        match kind {
            OpKind::Input | OpKind::Parameter | OpKind::Constant | OpKind::State => {
                self.source(rng, kind)
            }
            OpKind::Unary => self.unary(rng),
            OpKind::Cast => {
                let x = self.pick_or_make(rng, |_| true, |_| true)?;
                let to = rng.pick(&self.cfg.dtypes)?;
                self.add(Op::Cast { to }, &[x])
            }
            OpKind::Binary => self.binary(rng),
            OpKind::Select => self.select(rng),
            OpKind::Reduce => self.reduce(rng),
            OpKind::MatMul => self.matmul(rng),
            OpKind::Conv => self.conv(rng),
            OpKind::Reshape => self.reshape(rng),
            OpKind::Permute => {
                let x = self.pick_or_make(rng, |_| true, |_| true)?;
                let rank = self.ty(x).rank();
                let perm = rng.distinct(rank, rank);
                self.add(Op::Permute { perm }, &[x])
            }
            OpKind::BroadcastTo => self.broadcast_to(rng),
            OpKind::Slice => self.slice(rng),
            OpKind::Concat => self.concat(rng),
            OpKind::Pad => self.pad(rng),
            OpKind::Squeeze => self.squeeze(rng),
            OpKind::Unsqueeze => {
                let x = self.pick_or_make(rng, |t| t.rank() < MAX_RANK, |_| true)?;
                let rank = self.ty(x).rank();
                let k = 1 + rng.below((MAX_RANK - rank).min(3));
                let axes = rng.distinct(rank + k, k);
                self.add(Op::Unsqueeze { axes }, &[x])
            }
            OpKind::Gather => self.gather(rng),
            OpKind::StateAssign => self.state_assign(rng),
            OpKind::StateWriteSlice => self.state_write_slice(rng),
            OpKind::Iota => {
                let len = self.drawn_dim(rng)?;
                self.add(Op::Iota { len }, &[])
            }
            OpKind::DimValue => {
                let dim = self.drawn_dim(rng)?;
                self.add(Op::DimValue { dim }, &[])
            }
            OpKind::Collective => self.collective(rng),
        }
    }

    /// A collective of a world of 1 to 3 devices over a numeric tensor (`reduce_scatter` on an
    /// axis the world divides).
    fn collective(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(
            rng,
            |t| t.rank() > 0 && t.dtype.is_numeric(),
            |d| d.is_numeric(),
        )?;
        let world = 1 + rng.below(3) as u32;
        let rank = self.ty(x).rank();
        let axis = rng.below(rank);
        let op = match rng.below(3) {
            0 => Op::AllReduce {
                op: [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][rng.below(3)],
                world,
            },
            1 => Op::AllGather { axis, world },
            _ => Op::ReduceScatter { axis, world },
        };
        self.add(op, &[x])
    }

    /// A static size, a symbol, or a symbol plus one.
    fn drawn_dim(&self, rng: &mut Rng) -> Option<Dim> {
        let symbol = rng.pick(&self.cfg.symbols);
        Some(match (symbol, rng.below(3)) {
            (Some(s), 0) => Dim::Symbolic(s),
            (Some(s), 1) => Dim::Symbolic(s).offset(1).ok()?,
            _ => Dim::Static(rng.range(1, self.cfg.max_dim.max(1))),
        })
    }

    fn unary(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let u = rng.pick(&self.cfg.unary_ops)?;
        let x = self.pick_or_make(rng, |t| unary_accepts(u, t.dtype), |d| unary_accepts(u, d))?;
        self.add(Op::Unary(u), &[x])
    }

    fn binary(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let op = rng.pick(&self.cfg.binary_ops)?;
        let ok = move |d: DType| binary_accepts(op, d);
        let a = self.pick_or_make(rng, |t| ok(t.dtype), ok)?;
        let ta = self.ty(a).clone();
        let b = if rng.chance(1, 6) {
            a
        } else {
            let found = if rng.chance(5, 6) {
                self.pick(rng, |t| {
                    t.dtype == ta.dtype && ta.shape.broadcast(&t.shape).is_ok()
                })
            } else {
                None
            };
            match found {
                Some(b) => b,
                None => self.partner(rng, ta.dtype, &ta.shape)?,
            }
        };
        let (a, b) = if rng.chance(1, 2) { (a, b) } else { (b, a) };
        self.add(Op::Binary(op), &[a, b])
    }

    fn select(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let a = self.pick_or_make(rng, |_| true, |_| true)?;
        let ta = self.ty(a).clone();
        let b = match self.pick(rng, |t| {
            t.dtype == ta.dtype && ta.shape.broadcast(&t.shape).is_ok()
        }) {
            Some(b) if rng.chance(3, 4) => b,
            _ if rng.chance(1, 2) => a,
            _ => self.partner(rng, ta.dtype, &ta.shape)?,
        };
        let shape = ta.shape.broadcast(&self.ty(b).shape).ok()?;
        let cond = match self.pick(rng, |t| {
            t.dtype == DType::Bool && t.shape.broadcast(&shape).is_ok()
        }) {
            Some(c) if rng.chance(3, 4) => c,
            _ => self.partner(rng, DType::Bool, &shape)?,
        };
        self.add(Op::Select, &[cond, a, b])
    }

    fn reduce(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let op = rng.pick(&self.cfg.reduce_ops)?;
        let x = self.pick_or_make(
            rng,
            |t| t.rank() >= 1 && reduce_accepts(op, t.dtype),
            |d| reduce_accepts(op, d),
        )?;
        let rank = self.ty(x).rank();
        let k = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            1
        } else {
            1 + rng.below(rank)
        };
        let axes = rng.distinct(rank, k);
        let keepdims = rng.chance(1, 2);
        self.add(Op::Reduce { op, axes, keepdims }, &[x])
    }

    fn matmul(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let a = self.pick_or_make(
            rng,
            |t| t.rank() >= 2 && t.dtype.is_numeric(),
            DType::is_numeric,
        )?;
        let ta = self.ty(a).clone();
        let ad = ta.shape.dims();
        let k = ad[ad.len() - 1].clone();
        let batch_a = Shape::new(ad[..ad.len() - 2].to_vec()).ok()?;
        let found = self.pick(rng, |t| {
            let bd = t.shape.dims();
            t.dtype == ta.dtype
                && t.rank() >= 2
                && bd[bd.len() - 2] == k
                && Shape::new(bd[..bd.len() - 2].to_vec())
                    .is_ok_and(|batch_b| batch_a.broadcast(&batch_b).is_ok())
        });
        let b = match found {
            Some(b) if rng.chance(3, 4) => b,
            _ => {
                let mut dims: Vec<Dim> = batch_a.dims().to_vec();
                let drop = rng.below(dims.len() + 1);
                dims.drain(..drop);
                for d in dims.iter_mut() {
                    if rng.chance(1, 3) {
                        *d = Dim::Static(1);
                    }
                }
                dims.push(k);
                dims.push(self.dim(rng));
                let ty = TensorType::new(ta.dtype, Shape::new(dims).ok()?);
                self.named_source(rng, OpKind::Parameter, ty)?
            }
        };
        self.add(Op::MatMul, &[a, b])
    }

    /// A convolution of a float `[N, C, S..]` value with fresh weights: a random group count
    /// that divides `C`, kernels of 1 to 3 taps, strides and dilations of 1 or 2, padding up
    /// to 2 per side (inference skips the step when the kernel does not fit).
    fn conv(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(
            rng,
            |t| {
                (3..=5).contains(&t.rank())
                    && t.dtype.is_float()
                    && t.shape.dims()[1..]
                        .iter()
                        .all(|d| d.as_static().is_some_and(|n| n > 0))
            },
            DType::is_float,
        )?;
        let tx = self.ty(x).clone();
        let channels = tx.shape.dims()[1].as_static()?;
        let spatial = tx.rank() - 2;
        let divisors: Vec<u64> = (1..=channels).filter(|g| channels % g == 0).collect();
        let groups = rng.pick(&divisors)?;
        let out_channels = groups * rng.range(1, 3);
        let mut dims = vec![Dim::Static(out_channels), Dim::Static(channels / groups)];
        dims.extend((0..spatial).map(|_| Dim::Static(rng.range(1, 3))));
        let ty = TensorType::new(tx.dtype, Shape::new(dims).ok()?);
        let w = self.named_source(rng, OpKind::Parameter, ty)?;
        let op = Op::Conv {
            strides: (0..spatial).map(|_| rng.range(1, 2)).collect(),
            dilations: (0..spatial).map(|_| rng.range(1, 2)).collect(),
            pads: (0..spatial)
                .map(|_| (rng.range(0, 2), rng.range(0, 2)))
                .collect(),
            groups,
        };
        self.add(op, &[x, w])
    }

    fn reshape(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(rng, |_| true, |_| true)?;
        let shape = self.ty(x).shape.clone();
        let product = shape.static_numel().unwrap_or_else(|| {
            shape
                .dims()
                .iter()
                .filter_map(Dim::as_static)
                .product::<u64>()
        });
        let mut target: Vec<Dim> = shape
            .dims()
            .iter()
            .filter(|d| d.as_static().is_none())
            .cloned()
            .collect();
        // Split the static product into random factors, plus some 1s.
        let factors = if product == 0 {
            vec![0]
        } else {
            prime_factors(product)
        };
        let buckets = if factors.is_empty() {
            0
        } else {
            1 + rng.below(factors.len())
        };
        let mut parts = vec![1u64; buckets];
        for f in factors {
            let i = rng.below(buckets);
            parts[i] *= f;
        }
        target.extend(parts.into_iter().map(Dim::Static));
        for _ in 0..rng.below(3) {
            target.push(Dim::Static(1));
        }
        rng.shuffle(&mut target);
        if target.len() > MAX_RANK {
            return None;
        }
        let mut dims: Vec<ReshapeDim> = target.into_iter().map(ReshapeDim::Dim).collect();
        if !dims.is_empty() && rng.chance(2, 5) {
            let i = rng.below(dims.len());
            dims[i] = ReshapeDim::Infer;
        }
        self.add(Op::Reshape { dims }, &[x])
    }

    fn broadcast_to(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(rng, |_| true, |_| true)?;
        let mut dims: Vec<Dim> = self
            .ty(x)
            .shape
            .dims()
            .iter()
            .map(|d| {
                if *d == Dim::Static(1) && rng.chance(1, 2) {
                    self.dim(rng)
                } else {
                    d.clone()
                }
            })
            .collect();
        let room = MAX_RANK - dims.len();
        for _ in 0..rng.below(room.min(2) + 1) {
            dims.insert(0, self.dim(rng));
        }
        self.add(Op::BroadcastTo { dims }, &[x])
    }

    fn slice(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(rng, |_| true, |_| true)?;
        let ranges = self
            .ty(x)
            .shape
            .dims()
            .iter()
            .map(|d| match d.as_static() {
                Some(len) if rng.chance(2, 3) => {
                    let start = rng.range(0, len);
                    let stop = if rng.chance(1, 4) {
                        None
                    } else {
                        Some(rng.range(start, len))
                    };
                    let step = 1 + rng.below(3) as u64;
                    SliceRange {
                        start,
                        stop: stop.map(Dim::Static),
                        step,
                    }
                }
                _ => SliceRange::FULL,
            })
            .collect();
        self.add(Op::Slice { ranges }, &[x])
    }

    fn concat(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let first = self.pick_or_make(
            rng,
            |t| t.shape.dims().iter().any(|d| d.as_static().is_some()),
            |_| true,
        )?;
        let t0 = self.ty(first).clone();
        let static_axes: Vec<usize> = (0..t0.rank())
            .filter(|&a| t0.shape.dims()[a].as_static().is_some())
            .collect();
        let axis = rng.pick(&static_axes)?;
        let matches = |t: &TensorType| {
            t.dtype == t0.dtype
                && t.rank() == t0.rank()
                && t.shape.dims()[axis].as_static().is_some()
                && (0..t.rank()).all(|a| a == axis || t.shape.dims()[a] == t0.shape.dims()[a])
        };
        let mut operands = vec![first];
        for _ in 0..rng.below(4) {
            let next = match rng.below(3) {
                0 => Some(first),
                1 => self.pick(rng, matches),
                _ => {
                    let mut dims = t0.shape.dims().to_vec();
                    dims[axis] = Dim::Static(rng.range(1, self.cfg.max_dim));
                    let ty = TensorType::new(t0.dtype, Shape::new(dims).ok()?);
                    self.named_source(rng, OpKind::Input, ty)
                }
            };
            operands.extend(next);
        }
        self.add(Op::Concat { axis }, &operands)
    }

    fn pad(&mut self, rng: &mut Rng) -> Option<NodeId> {
        // Mostly floats, for the special pad values.
        let float = rng.chance(3, 4);
        let x = self.pick_or_make(
            rng,
            |t| !float || t.dtype.is_float(),
            |d| !float || d.is_float(),
        )?;
        let t = self.ty(x).clone();
        let pads = t
            .shape
            .dims()
            .iter()
            .map(|d| {
                if d.as_static().is_some() && rng.chance(1, 2) {
                    (rng.range(0, 2), rng.range(0, 2))
                } else {
                    (0, 0)
                }
            })
            .collect();
        let value = ExactF64(self.pad_value(rng, t.dtype));
        self.add(Op::Pad { pads, value }, &[x])
    }

    fn squeeze(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let one = Dim::Static(1);
        let has_one = |t: &TensorType| t.shape.dims().contains(&one);
        let x = match self.pick(rng, has_one) {
            Some(x) => x,
            None => self.pick_or_make(rng, |_| true, |_| true)?,
        };
        let ones: Vec<usize> = (0..self.ty(x).rank())
            .filter(|&a| self.ty(x).shape.dims()[a] == one)
            .collect();
        let k = if ones.is_empty() {
            0
        } else {
            1 + rng.below(ones.len())
        };
        let axes = rng
            .distinct(ones.len(), k)
            .into_iter()
            .map(|i| ones[i])
            .collect();
        self.add(Op::Squeeze { axes }, &[x])
    }

    fn gather(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let data = self.pick_or_make(rng, |t| t.rank() >= 1, |_| true)?;
        let td = self.ty(data).clone();
        let axis = rng.below(td.rank());
        let room = MAX_RANK + 1 - td.rank();
        let index = |t: &TensorType| matches!(t.dtype, DType::I32 | DType::I64) && t.rank() <= room;
        let indices = match self.pick(rng, index) {
            Some(i) if rng.chance(1, 2) => i,
            _ => {
                let dtype = if rng.chance(1, 2) {
                    DType::I32
                } else {
                    DType::I64
                };
                let rank = rng.below(room.min(2) + 1);
                let dims: Vec<u64> = (0..rank).map(|_| rng.range(1, 3)).collect();
                let shape = Shape::of(&dims);
                let n = shape.static_numel()? as usize;
                let bound = td.shape.dims()[axis].as_static().unwrap_or(2).max(1) as i64;
                let values = (0..n).map(|_| rng.below(bound as usize) as i64).collect();
                let data = ConstData::Int(values);
                self.add_source(Op::Constant { data }, TensorType::new(dtype, shape))?
            }
        };
        self.add(Op::Gather { axis }, &[data, indices])
    }

    /// A state that no update writes yet, or a fresh one whose type satisfies `pred`.
    fn unwritten_state(
        &mut self,
        rng: &mut Rng,
        pred: impl Fn(&TensorType) -> bool,
    ) -> Option<NodeId> {
        let states: Vec<NodeId> = self
            .g
            .node_ids()
            .filter(|&id| {
                matches!(self.g.node(id).op, Op::State { .. })
                    && self.g.state_writer(id).is_none()
                    && pred(self.ty(id))
            })
            .collect();
        if let Some(s) = rng.pick(&states) {
            if rng.chance(3, 4) {
                return Some(s);
            }
        }
        for _ in 0..6 {
            let dtype = rng.pick(&self.cfg.dtypes)?;
            let ty = TensorType::new(dtype, self.fresh_shape(rng));
            if pred(&ty) {
                return self.named_source(rng, OpKind::State, ty);
            }
        }
        None
    }

    fn state_assign(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let state = self.unwritten_state(rng, |_| true)?;
        let ts = self.ty(state).clone();
        let value = match self.pick(rng, |t| *t == ts) {
            Some(v) if rng.chance(2, 3) => v,
            _ => self.named_source(rng, OpKind::Input, ts)?,
        };
        self.add(Op::StateAssign, &[state, value])
    }

    fn state_write_slice(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let state = self.unwritten_state(rng, |t| {
            t.shape.dims().iter().any(|d| d.as_static().is_some())
        })?;
        let ts = self.ty(state).clone();
        let static_axes: Vec<usize> = (0..ts.rank())
            .filter(|&a| ts.shape.dims()[a].as_static().is_some())
            .collect();
        let axis = rng.pick(&static_axes)?;
        let capacity = ts.shape.dims()[axis].as_static()?;
        let fits_value = |t: &TensorType| {
            t.dtype == ts.dtype
                && t.rank() == ts.rank()
                && t.shape.dims()[axis]
                    .as_static()
                    .is_some_and(|n| n <= capacity)
                && (0..t.rank()).all(|a| a == axis || t.shape.dims()[a] == ts.shape.dims()[a])
        };
        let value = match self.pick(rng, fits_value) {
            Some(v) if rng.chance(1, 2) => v,
            _ => {
                let len = rng.range(capacity.min(1), capacity);
                if rng.chance(1, 2) {
                    // A slice of the state itself.
                    let start = rng.range(0, capacity - len);
                    let mut ranges = vec![SliceRange::FULL; ts.rank()];
                    ranges[axis] = SliceRange::new(start, start + len, 1);
                    self.add(Op::Slice { ranges }, &[state])?
                } else {
                    let mut dims = ts.shape.dims().to_vec();
                    dims[axis] = Dim::Static(len);
                    let ty = TensorType::new(ts.dtype, Shape::new(dims).ok()?);
                    self.named_source(rng, OpKind::Input, ty)?
                }
            }
        };
        let len = self.ty(value).shape.dims()[axis].as_static()?;
        if rng.chance(1, 2) {
            let start = Some(rng.range(0, capacity.saturating_sub(len)));
            self.add(Op::StateWriteSlice { axis, start }, &[state, value])
        } else {
            let scalar_index =
                |t: &TensorType| t.rank() == 0 && matches!(t.dtype, DType::I32 | DType::I64);
            let offset = match self.pick(rng, scalar_index) {
                Some(o) if rng.chance(1, 2) => o,
                _ => {
                    let dtype = if rng.chance(1, 2) {
                        DType::I32
                    } else {
                        DType::I64
                    };
                    let ty = TensorType::new(dtype, Shape::scalar());
                    if rng.chance(1, 2) {
                        self.named_source(rng, OpKind::Input, ty)?
                    } else {
                        let v = rng.range(0, capacity.saturating_sub(len)) as i64;
                        let data = ConstData::Int(vec![v]);
                        self.add_source(Op::Constant { data }, ty)?
                    }
                }
            };
            let op = Op::StateWriteSlice { axis, start: None };
            self.add(op, &[state, value, offset])
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{file, text};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    use std::collections::BTreeMap;

    /// Graphs with every later kind too, collectives included: what the file forms must carry.
    fn arb_mesh_graph() -> impl Strategy<Value = Graph> {
        arb_graph_with(GraphConfig::full().with_dim_ops().with_collectives())
    }

    fn config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn generated_graphs_verify(g in arb_graph()) {
            prop_assert!(g.verify().is_ok(), "{:?}", g.verify());
            prop_assert!(!g.is_empty());
        }

        #[test]
        fn binary_round_trip(g in arb_mesh_graph()) {
            let bytes = file::encode(&g);
            let back = file::decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back, &g);
            prop_assert_eq!(file::encode(&back), bytes);
            let rebuilt = Graph::from_data(g.to_data())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(rebuilt, g);
        }

        #[test]
        fn text_round_trip(g in arb_mesh_graph()) {
            let listing = text::print(&g);
            let back = text::parse(&listing)
                .map_err(|e| TestCaseError::fail(format!("{e}\n--- listing ---\n{listing}")))?;
            prop_assert!(back == g, "parse(print(g)) != g\n--- listing ---\n{}", listing);
            prop_assert_eq!(text::print(&back), listing);
        }

        #[test]
        fn numeric_graphs_are_float_and_small(g in arb_numeric_graph()) {
            prop_assert!(g.verify().is_ok(), "{:?}", g.verify());
            let allowed = GraphConfig::numeric();
            let kinds: BTreeSet<OpKind> = allowed.kinds.iter().map(|&(k, _)| k).collect();
            for id in g.node_ids() {
                let node = g.node(id);
                prop_assert_eq!(node.ty.dtype, DType::F32, "{}", node.op);
                let numel = node.ty.shape.static_numel();
                prop_assert!(numel.is_some_and(|n| n <= allowed.max_numel), "{}", node.ty);
                prop_assert!(kinds.contains(&OpKind::of(&node.op)), "{}", node.op);
                if let Op::Constant { data: ConstData::Float(v) } = &node.op {
                    prop_assert!(v.iter().all(|x| x.0.is_finite()));
                }
                if g.users(id).is_empty() && !node.op.is_state_update() {
                    prop_assert!(g.outputs().iter().any(|(_, n)| *n == id), "sink {} not an output", id);
                }
            }
        }

        #[test]
        fn building_is_deterministic(recipe in arb_recipe(&GraphConfig::full())) {
            let cfg = GraphConfig::full();
            prop_assert_eq!(build_graph(&cfg, &recipe), build_graph(&cfg, &recipe));
        }
    }

    /// Draws `n` graphs from `strategy` with a fixed seed.
    fn sample<S: Strategy>(strategy: S, n: usize) -> Vec<S::Value> {
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            proptest::test_runner::TestRng::deterministic_rng(
                proptest::test_runner::RngAlgorithm::ChaCha,
            ),
        );
        (0..n)
            .map(|_| strategy.new_tree(&mut runner).unwrap().current())
            .collect()
    }

    /// The generator cannot silently stop covering an op or an attribute form: across 200
    /// graphs, every op name and every listed feature appears.
    #[test]
    fn generator_covers_every_op_and_feature() {
        let config = GraphConfig::full()
            .with_dim_ops()
            .with_integer_bits()
            .with_collectives();
        let graphs = sample(arb_graph_with(config), 200);
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for g in &graphs {
            for t in feature_tags(g) {
                *counts.entry(t).or_default() += 1;
            }
        }
        let mut required: Vec<String> = all_op_names().into_iter().map(String::from).collect();
        // The f8 dtypes are not drawn (see `GraphConfig::full`).
        for d in DType::ALL.into_iter().filter(|d| d.float8().is_none()) {
            required.push(format!("constant:{d}"));
            required.push(format!("source:{d}"));
            required.push(format!("cast:to-{d}"));
        }
        for d in DType::INTS {
            required.push(format!("constant:{d}-extreme"));
        }
        for f in ["nan", "nan-noncanonical", "inf", "-inf", "-0", "subnormal"] {
            required.push(format!("constant:{f}"));
        }
        for f in ["nan", "inf", "-0"] {
            required.push(format!("pad:{f}"));
        }
        required.extend(
            [
                "dim:symbolic",
                "dim:zero",
                "rank:0",
                "rank:6",
                "reshape:infer",
                "reduce:keepdims",
                "reduce:dropdims",
                "reduce:multi-axis",
                "slice:step",
                "slice:open-stop",
                "concat:1",
                "concat:3+",
                "gather:i32",
                "gather:i64",
                "state_write_slice:static",
                "state_write_slice:dynamic",
                "name:odd",
                "name:control",
                "name:unicode",
                "output:odd-name",
                "output:shared-node",
                "output:source-name",
                "output:none",
            ]
            .map(String::from),
        );
        let missing: Vec<&String> = required
            .iter()
            .filter(|t| !counts.contains_key(*t))
            .collect();
        assert!(
            missing.is_empty(),
            "never generated: {missing:?}\ncounts: {counts:?}"
        );
        let steps: usize = graphs.iter().map(Graph::len).sum();
        assert!(
            steps > 200 * 10,
            "graphs are too small: {steps} nodes in 200 graphs"
        );
    }

    #[test]
    fn numeric_generator_covers_its_ops() {
        let graphs = sample(arb_numeric_graph(), 200);
        let seen: BTreeSet<&str> = graphs
            .iter()
            .flat_map(|g| {
                g.node_ids()
                    .map(|id| g.node(id).op.name())
                    .collect::<Vec<_>>()
            })
            .collect();
        let cfg = GraphConfig::numeric();
        let mut required: Vec<&str> = cfg.unary_ops.iter().map(|u| u.name()).collect();
        required.extend(cfg.binary_ops.iter().map(|b| b.name()));
        required.extend(cfg.reduce_ops.iter().map(|r| r.name()));
        required.extend([
            "input",
            "parameter",
            "constant",
            "cast",
            "matmul",
            "reshape",
            "permute",
            "broadcast_to",
            "slice",
            "concat",
            "pad",
            "squeeze",
            "unsqueeze",
        ]);
        let missing: Vec<&&str> = required.iter().filter(|n| !seen.contains(**n)).collect();
        assert!(missing.is_empty(), "never generated: {missing:?}");
    }

    /// The generator relies on inference to refuse attributes a dtype cannot hold; a pad value
    /// must be a value of the tensor's dtype.
    #[test]
    fn pad_values_must_be_values_of_the_dtype() {
        let mut g = Graph::new();
        for (i, (dtype, value)) in [
            (DType::I32, f64::NAN),
            (DType::Bool, f64::NAN),
            (DType::U8, f64::NAN),
            (DType::I64, 9_223_372_036_854_775_808.0),
        ]
        .into_iter()
        .enumerate()
        {
            let ty = TensorType::new(dtype, Shape::of(&[2]));
            let name = format!("x{i}");
            let x = g.add_node(Op::Input { name }, &[], Some(ty)).unwrap();
            let pads = vec![(1, 1)];
            let value = ExactF64(value);
            let padded = g.add_node(Op::Pad { pads, value }, &[x], None);
            assert!(padded.is_err(), "{dtype} pad value {:?} accepted", value.0);
        }
    }

    #[test]
    fn all_op_names_lists_each_name_once() {
        let names = all_op_names();
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        assert_eq!(names.len(), 4 + 20 + 1 + 21 + 1 + 7 + 11 + 2 + 1 + 1 + 5);
    }
}

/// A global allocator that records the largest single allocation of each thread, for tests
/// that bound what a reader allocates for its input: install it in a test binary with
/// `#[global_allocator] static A: RecordingAllocator = RecordingAllocator;` and measure with
/// [`largest_allocation`].
pub struct RecordingAllocator;

thread_local! {
    static LARGEST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn note_allocation(size: usize) {
    // `try_with`: the cell has no destructor, but the allocator may run during teardown.
    let _ = LARGEST.try_with(|c| c.set(c.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator; recording a size
// allocates nothing.
unsafe impl std::alloc::GlobalAlloc for RecordingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_allocation(layout.size());
        std::alloc::System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        note_allocation(layout.size());
        std::alloc::System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        note_allocation(new_size);
        std::alloc::System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
}

/// Runs `f` and returns its result with the largest single allocation it made on this thread
/// (0 unless [`RecordingAllocator`] is the global allocator).
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|c| c.set(0));
    let out = f();
    (out, LARGEST.with(std::cell::Cell::get))
}

/// The names in `dir`, sorted: what a writer left behind (a refused write leaves nothing, an
/// atomic one no temporary file).
pub fn dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}
