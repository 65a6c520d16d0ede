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

mod build;
mod features;
mod footprint;

pub use build::build_graph;
pub use features::feature_tags;
pub use footprint::{dir_names, largest_allocation, RecordingAllocator};

use crate::op::{ConstData, ExactF64};
use crate::{BinaryOp, DType, Dim, Graph, Op, ReduceOp, UnaryOp};
use proptest::prelude::*;
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
    /// A user's kernel ([`Op::Custom`]). Not in [`OpKind::ALL`]: its tile program comes from
    /// `tir_lower::custom`, above this crate, so the generator cannot make one.
    Custom,
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
            Op::Custom { .. } => OpKind::Custom,
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
        OpKind::Custom => {
            crate::text::ops::custom_template().expect("the template kernel is valid")
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::{bind_dims, concrete_dims, evaluate, EvalError, F64Tensor};
    use crate::{file, text};
    use crate::{Shape, TensorType};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    use std::collections::BTreeMap;
    use std::collections::BTreeSet;

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

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Whatever the graph, the oracle evaluating it on well-formed random sources never panics: it gives
        /// values of the outputs' types, or an error caused by a run-time value or an unbound dim.
        #[test]
        fn evaluate_never_panics(graph in arb_graph(), seed in any::<u64>(), size in 0u64..4) {
            let dims: BTreeMap<String, u64> = GraphConfig::full()
                .symbols
                .into_iter()
                .enumerate()
                .map(|(i, s)| (s, (size + i as u64) % 4))
                .collect();
            let mut sources = BTreeMap::new();
            for (i, id) in graph.node_ids().enumerate() {
                let node = graph.node(id);
                let Some(name) = node.op.source_name() else { continue };
                // Leave some states to start as zeros.
                if matches!(node.op, Op::State { .. }) && (seed >> (i % 64)) & 1 == 0 {
                    continue;
                }
                let d = concrete_dims(&node.ty.shape, &dims).unwrap();
                let t = F64Tensor::random(node.ty.dtype, d, seed.wrapping_add(i as u64));
                sources.insert(name.to_string(), t);
            }
            let result = evaluate(&graph, &sources);
            if let Err(e) = &result {
                // Only run-time values and unbound dims can fail a verified graph.
                let expected = match e {
                    EvalError::UnboundDim { .. } => true,
                    EvalError::OpFailed { reason, .. } => [
                        "is out of range for axis",
                        "overruns axis",
                        "reduces over an empty axis",
                    ]
                    .iter()
                    .any(|r| reason.contains(r)),
                    _ => false,
                };
                prop_assert!(expected, "{}", e);
            }
            if let Ok(run) = result {
                let bound = bind_dims(&graph, &sources).unwrap();
                for (name, id) in graph.outputs() {
                    let (t, ty) = (&run.outputs[name], graph.ty(*id));
                    prop_assert_eq!(t.dtype, ty.dtype);
                    prop_assert_eq!(&t.dims, &concrete_dims(&ty.shape, &bound).unwrap());
                    prop_assert_eq!(t.numel() as u64, t.dims.iter().product::<u64>());
                }
                prop_assert_eq!(run.states.len(), graph.states().len());
            }
        }
    }
}
