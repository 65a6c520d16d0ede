//! The f64 reference evaluator of a [`Graph`]: "the oracle" that every backend is checked against.
//!
//! [`evaluate`] runs a whole graph on concrete [`F64Tensor`]s; [`eval_op`] runs one op. Values are
//! held as `f64` whatever the dtype; the rules below say exactly what each op computes.
//!
//! # Numbers
//!
//! - **Floats are not rounded to their dtype after each op.** Every float op computes in `f64`
//!   and keeps the `f64` result, so an `f16` intermediate may hold values no `f16` can: the
//!   oracle gives the (nearly) exact value and backends are compared with tolerances. Only
//!   `cast` rounds (with [`DType::round_value`]); constants and supplied sources are already
//!   exact in their dtype.
//! - **Integers and bool are exact.** Integer arithmetic (`add`, `sub`, `mul`, `neg`, `abs`,
//!   `reduce_sum`, `reduce_prod`, `matmul`, and `reduce_mean` as the wrapped sum divided with
//!   truncation) runs on wrapping `i64` ([`int_unary`], [`int_binary`], [`reduce_ints`], which
//!   the reference backend computes with too) and the result then wraps to the dtype (two's
//!   complement, `round_value`): `i8` 100 + 100 = -56, `u8` 0 - 1 = 255, `i8` `neg(-128)` = -128. As values are held in `f64`, an `i64` value is exact only up to 2^53 in
//!   magnitude; beyond that the oracle is not exact (and may wrap 2^63 to -2^63). The reference
//!   backend holds integers as `i64` and is exact over the whole range. Unsigned dtypes compare,
//!   divide, shift and reduce as unsigned (a `u64` word is its bits, [`int_word`]).
//! - `bit_and`, `bit_or`, `bit_xor`, `bit_not` act on the two's-complement bits. `shift_left`
//!   discards the bits shifted past the top; `shift_right` is arithmetic for signed dtypes and
//!   logical for unsigned; an amount outside `0..bits` gives 0, or -1 for a right shift of a
//!   negative value (NumPy's rule, as ONNX's `BitShift` states it).
//! - Integer `div` truncates toward zero (-7 / 2 = -3); **division by zero gives 0**, and
//!   `i64::MIN / -1` wraps. Float `div` is IEEE (`1/0 = inf`, `0/0 = NaN`).
//! - `rem` is the remainder of that division, `x - (x / y) * y`: the dividend's sign, `x rem 0 =
//!   x`, `i64::MIN rem -1 = 0`. Float `rem` is C's `fmod` (exact; `fmod(x, 0)` and `fmod(inf, y)`
//!   are NaN, `fmod(x, inf) = x`).
//! - `pow` on floats is `f64::powf` (C `pow`: `pow(x, 0) = 1` even for NaN). On integers (which
//!   inference refuses today, kept so the rule is fixed): a negative exponent gives 0, except for
//!   base 1 (1) and base -1 (±1 by parity); otherwise wrapping repeated multiplication.
//!
//! # Elementwise ops (NumPy broadcasting)
//!
//! - `maximum`/`minimum` propagate NaN (a NaN operand gives NaN) and order `-0.0 < +0.0` (IEEE
//!   754-2019 maximum/minimum). `relu(x)` is `maximum(x, 0)`: NaN stays NaN, `relu(-0.0) = +0.0`.
//!   On integers all three are exact.
//! - Comparisons give bool; a NaN compares false, except under `ne` (true). `and`/`or`/`not` are
//!   logical on bool. `select(c, a, b)` broadcasts all three.
//! - Unary floats: `neg`, `abs`, `exp`, `log` (natural), `sqrt`, `rsqrt = 1/sqrt(x)`,
//!   `reciprocal = 1/x`, `sin`, `cos`, `tanh`, `sigmoid = 1/(1+exp(-x))`,
//!   `gelu_erf = x*0.5*(1+erf(x/sqrt(2)))` (`libm::erf`),
//!   `gelu_tanh = 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))`, `silu = x*sigmoid(x)`, `floor`,
//!   `ceil`, each as the formula gives it in IEEE `f64` arithmetic (so `silu(-inf)` and
//!   `gelu(-inf)` are NaN, as `-inf * 0` is).
//! - `cast` is `to.round_value(v)`: floats round to nearest even, integers truncate toward zero
//!   and wrap (NaN gives 0, ±inf what `round_value` gives), bool is `v != 0` (NaN gives true).
//!
//! # Reductions
//!
//! Over any set of axes, keeping them as size 1 or dropping them. Values are combined in
//! row-major order of the reduced axes: float `reduce_sum` accumulates sequentially in `f64`,
//! `reduce_mean` is that sum divided by the count, integer `reduce_sum`/`reduce_prod` wrap.
//! `reduce_max`/`reduce_min` propagate NaN. `argmax`/`argmin` give the (i64) index of the first
//! maximum/minimum along the axis, and a NaN counts as both the maximum and the minimum at its
//! first position (NumPy). Over an empty axis (size 0): `reduce_sum` gives 0, `reduce_prod` 1,
//! `reduce_mean` NaN, and `reduce_max`/`reduce_min`/`argmax`/`argmin` are an error (an empty
//! reduction) unless the result itself has no elements.
//!
//! # Other ops
//!
//! - `matmul`: `[..., m, k] @ [..., k, n]` with the batch dims broadcast; each output element
//!   accumulates its `k` products in order, in `f64` (wrapping `i64` for integers; `k = 0`
//!   gives 0).
//! - `reshape` (row-major), `permute`, `broadcast_to`, `slice` (`start`, `stop` or the end,
//!   `step`), `concat`, `pad` (with the constant value), `squeeze`, `unsqueeze` move values
//!   unchanged.
//! - `gather(data, indices)` along `axis`: the result has `data`'s dims before `axis`, then
//!   `indices`' dims, then `data`'s dims after `axis`. An index that is negative or not below the
//!   axis size is an error (no wrap-around, no clamping).
//! - `state_assign(state, value)` gives `value`, the state's value after the run.
//!   `state_write_slice(state, value[, offset])` gives the state with `value` written at the static
//!   `start` or the run-time scalar `offset` along `axis`; an offset that is negative or makes the
//!   write overrun the axis is an error.
//! - Every read of a state (the `state` node) sees its value at the **start** of the run, wherever
//!   the update sits in the graph; users of the update node see the updated value.
//!
//! # Sources and symbolic dims
//!
//! [`evaluate`] binds inputs, parameters and states by name from its `sources`; an input or
//! parameter not given is an error, a state not given starts as zeros, and a name the graph does
//! not have is an error. Every supplied tensor must be well formed ([`F64Tensor::new`]'s checks,
//! including values exact in its dtype) and match its source's dtype and shape; each symbolic dim
//! is bound by the supplied tensors that have it ([`bind_dims`]), and they must agree. A dim that
//! no supplied tensor binds is an error only where a node needs its value (a state left to zeros,
//! a `broadcast_to` or `reshape` target). Constants come from their [`ConstData`].
//!
//! # Errors, not panics
//!
//! Evaluation never panics: a malformed source, an out-of-range index or offset, an empty
//! reduction, or a tensor of more than [`MAX_EVAL_ELEMENTS`] elements gives an [`EvalError`]
//! whose one-line message names the node (`%N`), the op and what is wrong.

mod collective;

use crate::infer::infer;
use crate::op::ConstData;
use crate::{
    BinaryOp, DType, Dim, Graph, Node, NodeId, Op, ReduceOp, ReshapeDim, Shape, TensorType,
    UnaryOp, MAX_RANK,
};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The most elements one tensor of an evaluation may have (2 GiB of `f64`); larger results are
/// refused with an error instead of exhausting memory.
pub const MAX_EVAL_ELEMENTS: u64 = 1 << 28;

/// A tensor with concrete dims; values held as `f64`, row-major. Bool is 0.0/1.0, integers are
/// exact integer values. Tensors made by [`F64Tensor::new`] hold values exact in their dtype;
/// float tensors computed by the oracle hold unrounded `f64` results (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct F64Tensor {
    /// The dtype the values belong to.
    pub dtype: DType,
    /// The dims, in elements per axis.
    pub dims: Vec<u64>,
    /// The values, row-major; as many as the dims' product.
    pub data: Vec<f64>,
}

/// Why evaluation failed. Each message is one line naming the node (`%N`) and op where known;
/// source names are escaped (`\n`, `\"`, ...) so that odd names keep it one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A tensor's values do not match its dims or dtype.
    #[error("malformed tensor: {reason}")]
    BadTensor {
        /// What is wrong.
        reason: String,
    },
    /// A tensor is supplied under a name no source of the graph has.
    #[error(
        "a tensor is supplied for `{0}`, but the graph has no input, parameter or state `{0}`",
        .name.escape_debug()
    )]
    UnknownSource {
        /// The name the tensor was supplied under.
        name: String,
    },
    /// An input, parameter or state of the graph has no tensor.
    #[error("{node} ({op} `{}`): no tensor is supplied", .name.escape_debug())]
    MissingSource {
        /// The source node.
        node: NodeId,
        /// Its op name.
        op: &'static str,
        /// Its name.
        name: String,
    },
    /// A supplied tensor is malformed or does not match its source's type.
    #[error("{node} ({op} `{}`): {reason}", .name.escape_debug())]
    BadSource {
        /// The source node.
        node: NodeId,
        /// Its op name.
        op: &'static str,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Two supplied tensors give one symbolic dim different sizes.
    #[error(
        "{node} ({op} `{}`): symbolic dim `{dim}` is {value} here but {first_value} in `{}` ({first_node})",
        .name.escape_debug(),
        .first_name.escape_debug()
    )]
    DimConflict {
        /// The symbolic dim.
        dim: String,
        /// The source that binds it the second time.
        node: NodeId,
        /// That source's op name.
        op: &'static str,
        /// That source's name.
        name: String,
        /// The size its tensor gives the dim.
        value: u64,
        /// The source that bound it first.
        first_node: NodeId,
        /// That source's name.
        first_name: String,
        /// The size it gave the dim.
        first_value: u64,
    },
    /// `op` is empty when the dim was asked for outside any op ([`concrete_dims`]).
    #[error("{}symbolic dim `{dim}` is not bound by any supplied tensor", site(.node, .op))]
    UnboundDim {
        /// The symbolic dim.
        dim: String,
        /// The node that needs it, where known.
        node: Option<NodeId>,
        /// That node's op name, or empty.
        op: &'static str,
    },
    /// An op could not be evaluated on its operands; `node` is known inside [`evaluate`].
    #[error("{}{reason}", site(.node, .op))]
    OpFailed {
        /// The node, where known.
        node: Option<NodeId>,
        /// Its op name.
        op: &'static str,
        /// Why it failed.
        reason: String,
    },
}

/// The `%N (op): ` prefix of a message, as far as it is known.
fn site(node: &Option<NodeId>, op: &str) -> String {
    match (node, op) {
        (Some(n), op) => format!("{n} ({op}): "),
        (None, "") => String::new(),
        (None, op) => format!("{op}: "),
    }
}

impl EvalError {
    /// Places an op's error at `node` (errors already placed keep their node).
    fn at(self, node: NodeId, node_op: &'static str) -> EvalError {
        match self {
            EvalError::OpFailed {
                node: None,
                op,
                reason,
            } => EvalError::OpFailed {
                node: Some(node),
                op,
                reason,
            },
            EvalError::UnboundDim {
                dim, node: None, ..
            } => EvalError::UnboundDim {
                dim,
                node: Some(node),
                op: node_op,
            },
            e => e,
        }
    }
}

/// `f32[2, 3]`, the way [`TensorType`] prints.
struct TypeName<'a>(DType, &'a [u64]);

impl fmt::Display for TypeName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.0)?;
        for (i, d) in self.1.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The element count of `dims`, when it fits in a `usize`.
fn numel_of(dims: &[u64]) -> Option<usize> {
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    usize::try_from(n).ok()
}

/// Whether `v` is stored unchanged by `dtype` (a float dtype also holds NaN).
fn exact_in(dtype: DType, v: f64) -> bool {
    dtype.holds(v)
}

impl F64Tensor {
    /// A tensor from row-major values: `data` must have one value per element and each value must
    /// be exact in `dtype` (NaN only in float dtypes; integers as `+0.0`, not `-0.0`).
    pub fn new(dtype: DType, dims: Vec<u64>, data: Vec<f64>) -> Result<F64Tensor, EvalError> {
        let t = F64Tensor { dtype, dims, data };
        t.check_layout()
            .and_then(|()| t.check_values())
            .map_err(|reason| EvalError::BadTensor { reason })?;
        Ok(t)
    }

    /// All zeros. Panics if the element count does not fit in memory.
    pub fn zeros(dtype: DType, dims: Vec<u64>) -> F64Tensor {
        let n = numel_of(&dims).expect("the element count of a zeros tensor fits in a usize");
        F64Tensor {
            dtype,
            dims,
            data: vec![0.0; n],
        }
    }

    /// The number of elements (the length of `data`).
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Deterministic random values (same seed, same tensor), exact in `dtype` and never all zeros
    /// (unless there are no elements): floats roughly uniform in [-2, 2) rounded to the dtype,
    /// signed integers in -8..8, `u8` in 0..16, bool either. Panics if the element count does not
    /// fit in memory.
    pub fn random(dtype: DType, dims: Vec<u64>, seed: u64) -> F64Tensor {
        let n = numel_of(&dims).expect("the element count of a random tensor fits in a usize");
        let mut rng = SplitMix64(seed);
        let mut data: Vec<f64> = (0..n).map(|_| random_value(dtype, rng.next())).collect();
        if data.iter().all(|&v| v == 0.0) {
            if let Some(first) = data.first_mut() {
                *first = 1.0;
            }
        }
        F64Tensor { dtype, dims, data }
    }

    /// The rank is allowed and `data` has one value per element.
    fn check_layout(&self) -> Result<(), String> {
        let name = TypeName(self.dtype, &self.dims);
        if self.dims.len() > MAX_RANK {
            return Err(format!("{name} has rank {} > {MAX_RANK}", self.dims.len()));
        }
        match numel_of(&self.dims) {
            Some(n) if n == self.data.len() => Ok(()),
            Some(n) => Err(format!("{name} needs {n} values, got {}", self.data.len())),
            None => Err(format!("{name} has too many elements")),
        }
    }

    fn check_values(&self) -> Result<(), String> {
        match self.data.iter().position(|&v| !exact_in(self.dtype, v)) {
            None => Ok(()),
            Some(i) => Err(format!(
                "element {i} ({:?}) is not an exact {} value",
                self.data[i], self.dtype
            )),
        }
    }

    /// The tensor's type (static dims). Only for tensors whose layout was checked.
    fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype, Shape::of(&self.dims))
    }
}

/// The splitmix64 generator: tiny, fast, and good enough for test data (also the random graph
/// generator's, in `testing`).
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn random_value(dtype: DType, bits: u64) -> f64 {
    match dtype {
        DType::Bool => (bits >> 63) as f64,
        d if d.is_unsigned_int() => (bits >> 60) as f64,
        d if d.is_int() => (bits >> 60) as f64 - 8.0,
        // 53 random bits in [0, 1), scaled to [-2, 2).
        d => d.round_value((bits >> 11) as f64 * (4.0 / (1u64 << 53) as f64) - 2.0),
    }
}

/// The values a run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Each output by name.
    pub outputs: BTreeMap<String, F64Tensor>,
    /// Every state's value after the run: updated ones get their new value, the rest keep theirs.
    pub states: BTreeMap<String, F64Tensor>,
}

/// Concrete dims of `shape` under the symbolic dims `dims`.
pub fn concrete_dims(shape: &Shape, dims: &BTreeMap<String, u64>) -> Result<Vec<u64>, EvalError> {
    shape
        .dims()
        .iter()
        .map(|d| {
            d.value(dims).map_err(|e| match e {
                crate::DimError::Unbound(s) => EvalError::UnboundDim {
                    dim: s,
                    node: None,
                    op: "",
                },
                other => EvalError::OpFailed {
                    node: None,
                    op: "",
                    reason: other.to_string(),
                },
            })
        })
        .collect()
}

/// Binds the symbolic dims of the graph's sources from the shapes of the supplied tensors
/// (inputs, parameters and states; sources not supplied bind nothing). Checks every supplied
/// tensor: its name is a source of the graph, it is well formed, and its dtype and shape match
/// the source's (static dims equal, symbolic dims consistent across all tensors).
pub fn bind_dims(
    graph: &Graph,
    sources: &BTreeMap<String, F64Tensor>,
) -> Result<BTreeMap<String, u64>, EvalError> {
    let names: BTreeSet<&str> = graph
        .node_ids()
        .filter_map(|id| graph.node(id).op.source_name())
        .collect();
    if let Some(name) = sources.keys().find(|n| !names.contains(n.as_str())) {
        return Err(EvalError::UnknownSource { name: name.clone() });
    }
    // Each dim's value, with the node and name that bound it first.
    let mut bound: BTreeMap<String, (u64, NodeId, String)> = BTreeMap::new();
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Some(name) = node.op.source_name() else {
            continue;
        };
        let Some(t) = sources.get(name) else {
            continue;
        };
        let op = node.op.name();
        let bad = |reason: String| EvalError::BadSource {
            node: id,
            op,
            name: name.to_string(),
            reason,
        };
        t.check_layout()
            .and_then(|()| t.check_values())
            .map_err(bad)?;
        let mismatch = || {
            bad(format!(
                "the supplied tensor is {}, expected {}",
                TypeName(t.dtype, &t.dims),
                node.ty
            ))
        };
        if t.dtype != node.ty.dtype || t.dims.len() != node.ty.rank() {
            return Err(mismatch());
        }
        for (d, &n) in node.ty.shape.dims().iter().zip(&t.dims) {
            match d {
                Dim::Static(s) if *s != n => return Err(mismatch()),
                Dim::Static(_) => {}
                // Checked below, once the plain symbols are bound.
                Dim::Expr(_) => {}
                Dim::Symbolic(s) => match bound.get(s) {
                    Some((first_value, first_node, first_name)) if *first_value != n => {
                        return Err(EvalError::DimConflict {
                            dim: s.clone(),
                            node: id,
                            op,
                            name: name.to_string(),
                            value: n,
                            first_node: *first_node,
                            first_name: first_name.clone(),
                            first_value: *first_value,
                        });
                    }
                    Some(_) => {}
                    None => {
                        bound.insert(s.clone(), (n, id, name.to_string()));
                    }
                },
            }
        }
    }
    let mut dims: BTreeMap<String, u64> = bound.into_iter().map(|(k, (v, _, _))| (k, v)).collect();
    // A symbol that appears only in an affine dim (`seq + 1`) is solved from that dim's size.
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Some(t) = node.op.source_name().and_then(|name| sources.get(name)) else {
            continue;
        };
        for (d, &n) in node.ty.shape.dims().iter().zip(&t.dims) {
            if let Some((s, v)) = d.to_expr().solve(n, &dims) {
                dims.insert(s, v);
            }
        }
    }
    check_expression_dims(graph, sources, &dims)?;
    for bound in graph.dim_bounds() {
        // A bound over dims nothing binds waits for the op that reads them.
        let bound_here = bound
            .dim
            .symbols()
            .iter()
            .chain(&bound.at_most.symbols())
            .all(|s| dims.contains_key(s));
        if bound_here {
            bound.check(&dims).map_err(|reason| EvalError::OpFailed {
                node: None,
                op: "slice",
                reason,
            })?;
        }
    }
    Ok(dims)
}

/// Each expression dim of a supplied source equals the size the tensor has there.
fn check_expression_dims(
    graph: &Graph,
    sources: &BTreeMap<String, F64Tensor>,
    dims: &BTreeMap<String, u64>,
) -> Result<(), EvalError> {
    for id in graph.node_ids() {
        let node = graph.node(id);
        let Some(t) = node.op.source_name().and_then(|name| sources.get(name)) else {
            continue;
        };
        for (d, &n) in node.ty.shape.dims().iter().zip(&t.dims) {
            let Dim::Expr(e) = d else { continue };
            let bad = |reason: String| EvalError::BadSource {
                node: id,
                op: node.op.name(),
                name: node.op.source_name().unwrap_or_default().to_string(),
                reason,
            };
            match d.value(dims) {
                Ok(v) if v == n => {}
                Ok(v) => {
                    return Err(bad(format!(
                        "dim `{e}` is {v} by the other dims, but the supplied tensor has {n}"
                    )))
                }
                Err(err) => return Err(bad(format!("dim `{e}`: {err}"))),
            }
        }
    }
    Ok(())
}

/// Evaluates the whole graph on `sources` (see the module doc for binding rules and semantics).
/// A graph with collectives needs every device's values: [`evaluate_mesh`].
pub fn evaluate(
    graph: &Graph,
    sources: &BTreeMap<String, F64Tensor>,
) -> Result<Evaluation, EvalError> {
    let mut devices = evaluate_mesh(graph, std::slice::from_ref(sources))?;
    devices.pop().ok_or_else(|| EvalError::OpFailed {
        node: None,
        op: "evaluate",
        reason: "no device evaluated (evaluator bug)".into(),
    })
}

/// Evaluates the graph on each device of a mesh, device `r` binding `sources[r]`, in lockstep:
/// every op runs on each device's operands, and a collective (`all_reduce_*`, `all_gather`,
/// `reduce_scatter`, whose `world` must be the number of devices) combines all devices' operands
/// in rank order (module `collective`). One evaluation per device.
pub fn evaluate_mesh(
    graph: &Graph,
    sources: &[BTreeMap<String, F64Tensor>],
) -> Result<Vec<Evaluation>, EvalError> {
    let dims: Vec<BTreeMap<String, u64>> = sources
        .iter()
        .map(|s| bind_dims(graph, s))
        .collect::<Result<_, _>>()?;
    // Values are dropped after their last use unless an output or a state needs them.
    let mut uses = vec![0usize; graph.len()];
    let mut operands = Vec::with_capacity(graph.len());
    for id in graph.node_ids() {
        let ops = graph.operands(id);
        for o in &ops {
            uses[o.index()] += 1;
        }
        operands.push(ops);
    }
    let states = graph.states();
    let kept: BTreeSet<NodeId> = graph
        .outputs()
        .iter()
        .map(|(_, n)| *n)
        .chain(
            states
                .iter()
                .map(|(_, s)| graph.state_writer(*s).unwrap_or(*s)),
        )
        .collect();

    let mut values: Vec<Vec<Option<F64Tensor>>> = vec![vec![None; graph.len()]; sources.len()];
    for id in graph.node_ids() {
        let node = graph.node(id);
        let op = node.op.name();
        let args = |device: &Vec<Option<F64Tensor>>| -> Result<Vec<F64Tensor>, EvalError> {
            operands[id.index()]
                .iter()
                .map(|o| device[o.index()].clone())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| EvalError::OpFailed {
                    node: None,
                    op,
                    reason: "an operand's value is missing (evaluator bug)".into(),
                })
        };
        let results: Vec<F64Tensor> = if node.op.is_collective() {
            let xs: Vec<F64Tensor> = values
                .iter()
                .map(|device| args(device).map(|mut a| a.remove(0)))
                .collect::<Result<_, _>>()
                .map_err(|e| e.at(id, op))?;
            collective::apply(&node.op, &xs).map_err(|reason| EvalError::OpFailed {
                node: Some(id),
                op,
                reason,
            })?
        } else {
            let mut results = Vec::with_capacity(sources.len());
            for (r, device) in values.iter().enumerate() {
                let value = match &node.op {
                    Op::Input { name } | Op::Parameter { name } | Op::State { name } => {
                        source_value(id, node, name, &sources[r], &dims[r])
                    }
                    Op::Constant { data } => constant(data, &node.ty),
                    _ => args(device).and_then(|a| {
                        let refs: Vec<&F64Tensor> = a.iter().collect();
                        eval_op(&node.op, &refs, &node.ty, &dims[r])
                    }),
                }
                .map_err(|e| e.at(id, op))?;
                results.push(value);
            }
            results
        };
        for o in &operands[id.index()] {
            uses[o.index()] -= 1;
        }
        for (device, value) in values.iter_mut().zip(results) {
            device[id.index()] = Some(value);
            for o in &operands[id.index()] {
                if uses[o.index()] == 0 && !kept.contains(o) {
                    device[o.index()] = None;
                }
            }
        }
    }
    values
        .into_iter()
        .map(|device| collect_run(graph, &states, device))
        .collect()
}

/// The outputs and states of one device's run from its node values.
fn collect_run(
    graph: &Graph,
    states: &[(String, NodeId)],
    values: Vec<Option<F64Tensor>>,
) -> Result<Evaluation, EvalError> {
    let take = |name: &String, id: NodeId| {
        let value = values[id.index()].clone();
        value
            .map(|v| (name.clone(), v))
            .ok_or_else(|| EvalError::OpFailed {
                node: Some(id),
                op: graph.node(id).op.name(),
                reason: "the value was dropped before the end of the run (evaluator bug)".into(),
            })
    };
    let outputs = graph
        .outputs()
        .iter()
        .map(|(name, id)| take(name, *id))
        .collect::<Result<_, _>>()?;
    let states = states
        .iter()
        .map(|(name, s)| take(name, graph.state_writer(*s).unwrap_or(*s)))
        .collect::<Result<_, _>>()?;
    Ok(Evaluation { outputs, states })
}

/// The value of the input, parameter or state `node` named `name`: the supplied tensor (checked
/// by [`bind_dims`]), or zeros for a state not supplied.
fn source_value(
    id: NodeId,
    node: &Node,
    name: &str,
    sources: &BTreeMap<String, F64Tensor>,
    dims: &BTreeMap<String, u64>,
) -> Result<F64Tensor, EvalError> {
    let op = node.op.name();
    match (sources.get(name), &node.op) {
        (Some(t), _) => Ok(t.clone()),
        (None, Op::State { .. }) => {
            let d = concrete_dims(&node.ty.shape, dims)?;
            check_size(&d, &node.ty, op)?;
            Ok(F64Tensor::zeros(node.ty.dtype, d))
        }
        (None, _) => Err(EvalError::MissingSource {
            node: id,
            op,
            name: name.to_string(),
        }),
    }
}

/// A constant's values as a tensor.
fn constant(data: &ConstData, ty: &TensorType) -> Result<F64Tensor, EvalError> {
    let fail = |reason: String| EvalError::OpFailed {
        node: None,
        op: "constant",
        reason,
    };
    let dims = ty
        .shape
        .static_dims()
        .ok_or_else(|| fail(format!("a constant needs a static shape, got {ty}")))?;
    let n = numel_of(&dims).ok_or_else(|| fail(format!("{ty} has too many elements")))?;
    if data.len() != n {
        return Err(fail(format!("has {} values for {ty}", data.len())));
    }
    let values = (0..n).filter_map(|i| data.get_f64(i)).collect();
    Ok(F64Tensor {
        dtype: ty.dtype,
        dims,
        data: values,
    })
}

/// Refuses a result of `op` larger than [`MAX_EVAL_ELEMENTS`].
fn check_size(dims: &[u64], ty: &TensorType, op: &'static str) -> Result<usize, EvalError> {
    numel_of(dims)
        .filter(|&n| n as u64 <= MAX_EVAL_ELEMENTS)
        .ok_or_else(|| EvalError::OpFailed {
            node: None,
            op,
            reason: format!(
                "{} ({ty}) has more than {MAX_EVAL_ELEMENTS} elements, more than the oracle evaluates",
                TypeName(ty.dtype, dims)
            ),
        })
}

/// Evaluates one non-source op on concrete operands. `result` is the node's type: the result's
/// dims come from the operands (and from `dims` for the symbolic dims of a `broadcast_to` or
/// `reshape` target), and must agree with `result` where it is static or bound. The operands are
/// checked as inference checks types, so malformed operands give an error, never a panic.
pub fn eval_op(
    op: &Op,
    operands: &[&F64Tensor],
    result: &TensorType,
    dims: &BTreeMap<String, u64>,
) -> Result<F64Tensor, EvalError> {
    let name = op.name();
    let fail = |reason: String| EvalError::OpFailed {
        node: None,
        op: name,
        reason,
    };
    if op.is_source() {
        return Err(fail(
            "a source is bound by `evaluate`, not evaluated".into(),
        ));
    }
    for (i, x) in operands.iter().enumerate() {
        x.check_layout()
            .map_err(|e| fail(format!("operand {i} is malformed: {e}")))?;
    }
    let op = concretize(op, result, dims).map_err(|dim| EvalError::UnboundDim {
        dim,
        node: None,
        op: name,
    })?;
    let types: Vec<TensorType> = operands.iter().map(|x| x.tensor_type()).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs).map_err(|e| fail(format!("the operands do not type-check: {e}")))?;
    let out = ty
        .shape
        .static_dims()
        .ok_or_else(|| fail(format!("the result type {ty} is not concrete")))?;
    if !agrees(&ty, &out, result, dims) {
        return Err(fail(format!(
            "the operands give {ty}, but the node's type is {result}"
        )));
    }
    check_size(&out, &ty, name)?;
    let data = compute(&op, operands, &out, ty.dtype).map_err(fail)?;
    Ok(F64Tensor {
        dtype: ty.dtype,
        dims: out,
        data,
    })
}

/// `op` with the symbolic dims of its attributes replaced by their bindings (or the first
/// unbound dim's name). A reshape's inferred dim is taken from the node's type `result` where
/// that is concrete: with a zero-size dim the element count alone cannot tell it.
fn concretize<'a>(
    op: &'a Op,
    result: &TensorType,
    dims: &BTreeMap<String, u64>,
) -> Result<Cow<'a, Op>, String> {
    let bind = |d: &Dim| match d.value(dims) {
        Ok(n) => Ok(Dim::Static(n)),
        Err(crate::DimError::Unbound(s)) => Err(s),
        Err(other) => Err(format!("{d} ({other})")),
    };
    Ok(match op {
        Op::Reshape { dims: target } => Cow::Owned(Op::Reshape {
            dims: target
                .iter()
                .zip(
                    result
                        .shape
                        .dims()
                        .iter()
                        .map(Some)
                        .chain(std::iter::repeat(None)),
                )
                .map(|(d, known)| match d {
                    ReshapeDim::Dim(d) => bind(d).map(ReshapeDim::Dim),
                    ReshapeDim::Infer => Ok(known
                        .and_then(|k| bind(k).ok())
                        .map_or(ReshapeDim::Infer, ReshapeDim::Dim)),
                })
                .collect::<Result<_, _>>()?,
        }),
        Op::BroadcastTo { dims: target } => Cow::Owned(Op::BroadcastTo {
            dims: target.iter().map(bind).collect::<Result<_, _>>()?,
        }),
        Op::Iota { len } => Cow::Owned(Op::Iota { len: bind(len)? }),
        Op::DimValue { dim } => Cow::Owned(Op::DimValue { dim: bind(dim)? }),
        _ => Cow::Borrowed(op),
    })
}

/// Whether the concrete type (`ty` with dims `out`) is an instance of the node's type `result`.
fn agrees(ty: &TensorType, out: &[u64], result: &TensorType, dims: &BTreeMap<String, u64>) -> bool {
    ty.dtype == result.dtype
        && out.len() == result.rank()
        && result
            .shape
            .dims()
            .iter()
            .zip(out)
            .all(|(d, &n)| match d.value(dims) {
                Ok(v) => v == n,
                Err(crate::DimError::Unbound(_)) => true,
                Err(_) => false,
            })
}

/// The values of a type-checked op; `out` are the result dims, `dtype` its dtype.
fn compute(op: &Op, xs: &[&F64Tensor], out: &[u64], dtype: DType) -> Result<Vec<f64>, String> {
    // Checks of run-time values come first, so that they hold for empty results too; then an
    // empty result is done, and every op below has no zero dim in its result.
    match op {
        Op::Gather { axis } => check_indices(xs[1], xs[0].dims[*axis], *axis)?,
        Op::StateWriteSlice { axis, start } => {
            check_offset(write_offset(xs, *start), xs[0], xs[1], *axis)?
        }
        _ => {}
    }
    if out.contains(&0) {
        return Ok(Vec::new());
    }
    Ok(match op {
        Op::Iota { .. } => (0..out[0]).map(|i| i as f64).collect(),
        Op::DimValue { dim } => {
            let n = dim.as_static().ok_or("a dim_value of an unbound dim")?;
            vec![n as f64]
        }
        Op::Unary(u) => unary_values(*u, dtype, &xs[0].data),
        Op::Cast { to } => xs[0].data.iter().map(|&x| to.round_value(x)).collect(),
        Op::Binary(b) => {
            let (x, y) = (broadcast(xs[0], out), broadcast(xs[1], out));
            binary_values(*b, xs[0].dtype, &x, &y)
        }
        Op::Select => {
            let (c, a, b) = (
                broadcast(xs[0], out),
                broadcast(xs[1], out),
                broadcast(xs[2], out),
            );
            c.iter()
                .zip(a.iter().zip(b.iter()))
                .map(|(&c, (&a, &b))| if c != 0.0 { a } else { b })
                .collect()
        }
        Op::Reduce { op, axes, .. } => reduce(*op, axes, xs[0])?,
        Op::MatMul => matmul(xs[0], xs[1], out),
        Op::Conv {
            strides,
            dilations,
            pads,
            groups,
        } => conv(xs[0], xs[1], out, strides, dilations, pads, *groups),
        Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => xs[0].data.clone(),
        Op::Permute { perm } => {
            let strides = row_major_strides(&xs[0].dims);
            let strides: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
            strided(&xs[0].data, out, 0, &strides)
        }
        Op::BroadcastTo { .. } => broadcast(xs[0], out).into_owned(),
        Op::Slice { ranges } => {
            let strides = row_major_strides(&xs[0].dims);
            let base = ranges
                .iter()
                .zip(&strides)
                .map(|(r, s)| r.start as usize * s)
                .sum();
            // Wrapping: a step past the axis end (a size-1 result) may overflow, unused.
            let steps: Vec<usize> = ranges
                .iter()
                .zip(&strides)
                .map(|(r, s)| (r.step as usize).wrapping_mul(*s))
                .collect();
            strided(&xs[0].data, out, base, &steps)
        }
        Op::Concat { axis } => concat(xs, *axis, out),
        Op::Pad { pads, value } => pad(xs[0], pads, value.0, out),
        Op::Gather { axis } => gather(xs[0], xs[1], *axis),
        Op::StateAssign => xs[1].data.clone(),
        Op::StateWriteSlice { axis, start } => {
            write_slice(xs[0], xs[1], *axis, write_offset(xs, *start) as usize)
        }
        Op::Input { .. } | Op::Parameter { .. } | Op::Constant { .. } | Op::State { .. } => {
            return Err("a source is not computed".into())
        }
        Op::AllReduce { .. } | Op::AllGather { .. } | Op::ReduceScatter { .. } => {
            return Err("a collective combines every device's operand (evaluate_mesh)".into())
        }
        Op::Custom { kernel, output } => custom(kernel.kernel(), *output, xs)?,
    })
}

/// Output `output` of a custom kernel: its reference graph evaluated on the operands.
fn custom(
    kernel: &crate::CustomKernel,
    output: usize,
    xs: &[&F64Tensor],
) -> Result<Vec<f64>, String> {
    let reference = kernel
        .reference()
        .map_err(|e| format!("the reference of custom kernel {}: {e}", kernel.name()))?;
    let sources: BTreeMap<String, F64Tensor> = kernel
        .inputs()
        .iter()
        .zip(xs)
        .map(|(input, x)| {
            // The oracle keeps intermediate values unrounded; the kernel reads its operands
            // from buffers of their dtype, and the reference's inputs must be exact in it.
            let mut x = (*x).clone();
            x.data.iter_mut().for_each(|v| *v = x.dtype.round_value(*v));
            (input.name.clone(), x)
        })
        .collect();
    let name = &kernel
        .outputs()
        .get(output)
        .ok_or_else(|| format!("custom kernel {} has no output {output}", kernel.name()))?
        .name;
    let mut done = evaluate(&reference, &sources)
        .map_err(|e| format!("the reference of custom kernel {}: {e}", kernel.name()))?;
    done.outputs.remove(name).map(|t| t.data).ok_or_else(|| {
        format!(
            "the reference of custom kernel {} has no output `{name}`",
            kernel.name()
        )
    })
}

fn truth(b: bool) -> f64 {
    f64::from(u8::from(b))
}

/// `v` wrapped to the integer `dtype` (`v != 0` for bool), in the integers.
pub fn wrap_int(dtype: DType, v: i64) -> i64 {
    match dtype {
        DType::I8 => i64::from(v as i8),
        DType::U8 => i64::from(v as u8),
        DType::I16 => i64::from(v as i16),
        DType::U16 => i64::from(v as u16),
        DType::I32 => i64::from(v as i32),
        DType::U32 => i64::from(v as u32),
        DType::Bool => i64::from(v != 0),
        // `i64` and `u64` use every bit of the word (`u64` as its bits).
        _ => v,
    }
}

/// [`wrap_int`] as an `f64` (wrapped in the integers first: through `f64` the low bits of
/// values past 2^53 would be lost before wrapping); a `u64` word is read unsigned.
pub fn wrap(dtype: DType, v: i64) -> f64 {
    let w = wrap_int(dtype, v);
    if dtype == DType::U64 {
        crate::dtype::u64_value(w as u64)
    } else {
        w as f64
    }
}

/// The `i64` word holding the integer value `x` of `dtype` (a `u64` past `i64::MAX` as its
/// bits), as [`int_unary`], [`int_binary`] and [`reduce_ints`] take it.
pub fn int_word(dtype: DType, x: f64) -> i64 {
    if dtype == DType::U64 {
        x as u64 as i64
    } else {
        x as i64
    }
}

/// `u` on an integer or bool word of `dtype`, in `i64` (the caller wraps the result to the
/// dtype); `None` for an op that takes floats only.
pub fn int_unary(u: UnaryOp, dtype: DType) -> Option<fn(i64) -> i64> {
    let unsigned = dtype.is_unsigned_int();
    Some(match u {
        UnaryOp::Neg => i64::wrapping_neg,
        // An unsigned value is its own magnitude, and never below zero.
        UnaryOp::Abs | UnaryOp::Relu if unsigned => |v| v,
        UnaryOp::Abs => i64::wrapping_abs,
        UnaryOp::Relu => |v| v.max(0),
        UnaryOp::Not => |v| i64::from(v == 0),
        UnaryOp::BitNot => |v| !v,
        _ => return None,
    })
}

/// `b` on integer or bool words of `dtype`, in `i64`: arithmetic wraps (the caller wraps the
/// result to the dtype), comparisons and logic give 0 or 1. Words of `u8` to `u32` hold their
/// value, so signed `i64` arithmetic is exact for them; `u64` words are compared, divided and
/// shifted unsigned.
pub fn int_binary(b: BinaryOp, dtype: DType) -> fn(i64, i64) -> i64 {
    if dtype == DType::U64 {
        if let Some(f) = u64_binary(b) {
            return f;
        }
    }
    match b {
        BinaryOp::Add => i64::wrapping_add,
        BinaryOp::Sub => i64::wrapping_sub,
        BinaryOp::Mul => i64::wrapping_mul,
        BinaryOp::Div => int_div,
        BinaryOp::Rem => int_rem,
        BinaryOp::Pow => int_pow,
        BinaryOp::Maximum => |x, y| x.max(y),
        BinaryOp::Minimum => |x, y| x.min(y),
        BinaryOp::Eq => |x, y| i64::from(x == y),
        BinaryOp::Ne => |x, y| i64::from(x != y),
        BinaryOp::Lt => |x, y| i64::from(x < y),
        BinaryOp::Le => |x, y| i64::from(x <= y),
        BinaryOp::Gt => |x, y| i64::from(x > y),
        BinaryOp::Ge => |x, y| i64::from(x >= y),
        BinaryOp::And => |x, y| i64::from(x != 0 && y != 0),
        BinaryOp::Or => |x, y| i64::from(x != 0 || y != 0),
        BinaryOp::BitAnd => |x, y| x & y,
        BinaryOp::BitOr => |x, y| x | y,
        BinaryOp::BitXor => |x, y| x ^ y,
        BinaryOp::ShiftLeft => shift_left(dtype),
        BinaryOp::ShiftRight => shift_right(dtype),
    }
}

/// The ops whose `u64` meaning differs from the `i64` one on the same bits.
fn u64_binary(b: BinaryOp) -> Option<fn(i64, i64) -> i64> {
    Some(match b {
        BinaryOp::Div => |x, y| (x as u64).checked_div(y as u64).unwrap_or(0) as i64,
        BinaryOp::Rem => |x, y| (x as u64).checked_rem(y as u64).unwrap_or(x as u64) as i64,
        BinaryOp::Pow => {
            |x, y| (x as u64).wrapping_pow(y.clamp(0, i64::from(u32::MAX)) as u32) as i64
        }
        BinaryOp::Maximum => |x, y| (x as u64).max(y as u64) as i64,
        BinaryOp::Minimum => |x, y| (x as u64).min(y as u64) as i64,
        BinaryOp::Lt => |x, y| i64::from((x as u64) < (y as u64)),
        BinaryOp::Le => |x, y| i64::from((x as u64) <= (y as u64)),
        BinaryOp::Gt => |x, y| i64::from((x as u64) > (y as u64)),
        BinaryOp::Ge => |x, y| i64::from((x as u64) >= (y as u64)),
        _ => return None,
    })
}

/// `x << y` in a dtype of `bits` bits: an amount outside `0..bits` gives 0.
fn shl<const BITS: i64>(x: i64, y: i64) -> i64 {
    if (0..BITS).contains(&y) {
        x.wrapping_shl(y as u32)
    } else {
        0
    }
}

/// Arithmetic `x >> y` of a sign-extended word: an amount outside `0..bits` gives the sign fill.
fn sar<const BITS: i64>(x: i64, y: i64) -> i64 {
    if (0..BITS).contains(&y) {
        x >> y
    } else {
        x >> 63
    }
}

/// Logical `x >> y`: an amount outside `0..bits` gives 0 (a `u64` amount past `i64::MAX` is
/// negative as a word, so out of range too).
fn shr<const BITS: i64>(x: i64, y: i64) -> i64 {
    if (0..BITS).contains(&y) {
        ((x as u64) >> y) as i64
    } else {
        0
    }
}

fn shift_left(dtype: DType) -> fn(i64, i64) -> i64 {
    match dtype.bits() {
        8 => shl::<8>,
        16 => shl::<16>,
        32 => shl::<32>,
        _ => shl::<64>,
    }
}

fn shift_right(dtype: DType) -> fn(i64, i64) -> i64 {
    match (dtype.is_unsigned_int(), dtype.bits()) {
        (true, 8) => shr::<8>,
        (true, 16) => shr::<16>,
        (true, 32) => shr::<32>,
        (true, _) => shr::<64>,
        (false, 8) => sar::<8>,
        (false, 16) => sar::<16>,
        (false, 32) => sar::<32>,
        (false, _) => sar::<64>,
    }
}

/// `op` over one (non-empty) lane of integer words of `dtype`, in `i64`: sums and products
/// wrap, the mean truncates the wrapped sum, `ArgMax`/`ArgMin` give the first extreme's
/// position (the caller wraps a value, not a position, to the dtype).
pub fn reduce_ints(op: ReduceOp, dtype: DType, lane: &[i64]) -> i64 {
    if dtype == DType::U64 {
        // Unsigned order: flip the sign bit, reduce as signed, flip back (positions unchanged).
        let flipped: Vec<i64> = lane.iter().map(|&v| v ^ i64::MIN).collect();
        return match op {
            ReduceOp::Max | ReduceOp::Min => reduce_ints(op, DType::I64, &flipped) ^ i64::MIN,
            ReduceOp::ArgMax | ReduceOp::ArgMin => reduce_ints(op, DType::I64, &flipped),
            ReduceOp::Mean => {
                let sum = lane.iter().fold(0u64, |a, &v| a.wrapping_add(v as u64));
                (sum / lane.len() as u64) as i64
            }
            ReduceOp::Sum | ReduceOp::Prod => reduce_ints(op, DType::I64, lane),
        };
    }
    let first_index = |beats: fn(i64, i64) -> bool| {
        (1..lane.len()).fold(
            0,
            |best, i| if beats(lane[i], lane[best]) { i } else { best },
        ) as i64
    };
    let sum = || lane.iter().fold(0i64, |a, &v| a.wrapping_add(v));
    match op {
        ReduceOp::Sum => sum(),
        ReduceOp::Mean => sum().wrapping_div(lane.len() as i64),
        ReduceOp::Prod => lane.iter().fold(1i64, |a, &v| a.wrapping_mul(v)),
        ReduceOp::Max => lane.iter().copied().fold(lane[0], i64::max),
        ReduceOp::Min => lane.iter().copied().fold(lane[0], i64::min),
        ReduceOp::ArgMax => first_index(|v, best| v > best),
        ReduceOp::ArgMin => first_index(|v, best| v < best),
    }
}

/// IEEE 754-2019 maximum: NaN propagates, `-0.0 < +0.0`.
pub fn maximum(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        if x.is_sign_negative() {
            y
        } else {
            x
        }
    } else if x > y {
        x
    } else {
        y
    }
}

/// IEEE 754-2019 minimum: NaN propagates, `-0.0 < +0.0`.
pub fn minimum(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        if x.is_sign_negative() {
            x
        } else {
            y
        }
    } else if x < y {
        x
    } else {
        y
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `u` of each of `xs`, values of `dtype`: the op is chosen once, then applied in one loop.
pub fn unary_values(u: UnaryOp, dtype: DType, xs: &[f64]) -> Vec<f64> {
    fn map(xs: &[f64], f: impl Fn(f64) -> f64) -> Vec<f64> {
        xs.iter().map(|&x| f(x)).collect()
    }
    if let Some(f) = int_unary(u, dtype).filter(|_| dtype.is_int()) {
        return map(xs, |x| wrap(dtype, f(int_word(dtype, x))));
    }
    match u {
        UnaryOp::Neg => map(xs, |x| -x),
        UnaryOp::Abs => map(xs, f64::abs),
        UnaryOp::Relu => map(xs, |x| maximum(x, 0.0)),
        UnaryOp::Exp => map(xs, f64::exp),
        UnaryOp::Log => map(xs, f64::ln),
        UnaryOp::Sqrt => map(xs, f64::sqrt),
        UnaryOp::Rsqrt => map(xs, |x| 1.0 / x.sqrt()),
        UnaryOp::Reciprocal => map(xs, |x| 1.0 / x),
        UnaryOp::Sin => map(xs, f64::sin),
        UnaryOp::Cos => map(xs, f64::cos),
        UnaryOp::Tanh => map(xs, f64::tanh),
        UnaryOp::Sigmoid => map(xs, sigmoid),
        UnaryOp::Erf => map(xs, libm::erf),
        UnaryOp::GeluErf => map(xs, |x| {
            x * 0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
        }),
        UnaryOp::GeluTanh => map(xs, |x| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }),
        UnaryOp::Silu => map(xs, |x| x * sigmoid(x)),
        UnaryOp::Floor => map(xs, f64::floor),
        UnaryOp::Ceil => map(xs, f64::ceil),
        UnaryOp::Not => map(xs, |x| truth(x == 0.0)),
        // Inference refuses floats for `bit_not`; NaN if asked anyway.
        UnaryOp::BitNot => map(xs, |_| f64::NAN),
    }
}

/// `xs[i] b ys[i]` for operands of `dtype` (the result dtype is bool for comparisons): the op is
/// chosen once, then applied in one loop. `xs` and `ys` have one length.
pub fn binary_values(b: BinaryOp, dtype: DType, xs: &[f64], ys: &[f64]) -> Vec<f64> {
    fn zip(xs: &[f64], ys: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
        xs.iter().zip(ys).map(|(&x, &y)| f(x, y)).collect()
    }
    if dtype.is_int() {
        // Comparisons give 0 or 1, which every integer dtype holds unchanged.
        let f = int_binary(b, dtype);
        let word = |v| int_word(dtype, v);
        return zip(xs, ys, |x, y| wrap(dtype, f(word(x), word(y))));
    }
    match b {
        BinaryOp::Add => zip(xs, ys, |x, y| x + y),
        BinaryOp::Sub => zip(xs, ys, |x, y| x - y),
        BinaryOp::Mul => zip(xs, ys, |x, y| x * y),
        BinaryOp::Div => zip(xs, ys, |x, y| x / y),
        BinaryOp::Rem => zip(xs, ys, |x, y| x % y),
        BinaryOp::Pow => zip(xs, ys, f64::powf),
        BinaryOp::Maximum => zip(xs, ys, maximum),
        BinaryOp::Minimum => zip(xs, ys, minimum),
        BinaryOp::Eq => zip(xs, ys, |x, y| truth(x == y)),
        BinaryOp::Ne => zip(xs, ys, |x, y| truth(x != y)),
        BinaryOp::Lt => zip(xs, ys, |x, y| truth(x < y)),
        BinaryOp::Le => zip(xs, ys, |x, y| truth(x <= y)),
        BinaryOp::Gt => zip(xs, ys, |x, y| truth(x > y)),
        BinaryOp::Ge => zip(xs, ys, |x, y| truth(x >= y)),
        BinaryOp::And => zip(xs, ys, |x, y| truth(x != 0.0 && y != 0.0)),
        BinaryOp::Or => zip(xs, ys, |x, y| truth(x != 0.0 || y != 0.0)),
        // Inference refuses floats for the bitwise ops; NaN if asked anyway.
        BinaryOp::BitAnd
        | BinaryOp::BitOr
        | BinaryOp::BitXor
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRight => zip(xs, ys, |_, _| f64::NAN),
    }
}

/// Truncating division; dividing by zero gives 0.
fn int_div(x: i64, y: i64) -> i64 {
    if y == 0 {
        0
    } else {
        x.wrapping_div(y)
    }
}

/// Truncating remainder, `x - (x / y) * y` with `int_div`: dividing by zero gives `x`.
fn int_rem(x: i64, y: i64) -> i64 {
    if y == 0 {
        x
    } else {
        x.wrapping_rem(y)
    }
}

/// Wrapping `base^exp`; a negative exponent gives 0 except for bases 1 and -1.
fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 if exp % 2 == 0 => 1,
            -1 => -1,
            _ => 0,
        };
    }
    let (mut result, mut base, mut exp) = (1i64, base, exp as u64);
    while exp > 0 {
        if exp & 1 == 1 {
            result = result.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    result
}

/// Row-major strides (in elements) of `dims` (saturating where a zero-size dim makes them moot).
pub fn row_major_strides(dims: &[u64]) -> Vec<usize> {
    let mut strides = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        // Saturating: strides are used only when no dim is 0, and then they fit.
        strides[i] = strides[i + 1].saturating_mul(dims[i + 1] as usize);
    }
    strides
}

/// Calls `f` with `base + Σ index[i] * strides[i]` for every index of `dims`, in row-major order.
/// The arithmetic wraps, so a stride that overflows along a size-1 dim (never really taken)
/// cancels out.
pub fn for_each_offset(dims: &[u64], base: usize, strides: &[usize], mut f: impl FnMut(usize)) {
    if dims.contains(&0) {
        return;
    }
    let mut index = vec![0u64; dims.len()];
    let mut offset = base;
    loop {
        f(offset);
        let mut axis = dims.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            offset = offset.wrapping_add(strides[axis]);
            if index[axis] < dims[axis] {
                break;
            }
            offset = offset.wrapping_sub(strides[axis].wrapping_mul(dims[axis] as usize));
            index[axis] = 0;
        }
    }
}

/// The elements of `src` at the offsets of [`for_each_offset`].
fn strided(src: &[f64], dims: &[u64], base: usize, strides: &[usize]) -> Vec<f64> {
    let mut out = Vec::with_capacity(numel_of(dims).unwrap_or(0));
    for_each_offset(dims, base, strides, |o| out.push(src[o]));
    out
}

/// For each element of `out` (row-major), the flat index of the element of a tensor of dims `dims`
/// that broadcasting maps to it (`dims` right-aligned, size-1 dims repeated).
fn broadcast_index(dims: &[u64], out: &[u64]) -> Vec<usize> {
    let strides = broadcast_strides(dims, out);
    let mut index = Vec::with_capacity(numel_of(out).unwrap_or(0));
    for_each_offset(out, 0, &strides, |o| index.push(o));
    index
}

fn broadcast_strides(dims: &[u64], out: &[u64]) -> Vec<usize> {
    let strides = row_major_strides(dims);
    let lead = out.len() - dims.len();
    (0..out.len())
        .map(|i| match i.checked_sub(lead) {
            Some(a) if dims[a] != 1 => strides[a],
            _ => 0,
        })
        .collect()
}

/// `x`'s values broadcast to `out`.
fn broadcast<'a>(x: &'a F64Tensor, out: &[u64]) -> Cow<'a, [f64]> {
    if x.dims == out {
        Cow::Borrowed(&x.data)
    } else {
        let strides = broadcast_strides(&x.dims, out);
        Cow::Owned(strided(&x.data, out, 0, &strides))
    }
}

fn reduce(op: ReduceOp, axes: &[usize], x: &F64Tensor) -> Result<Vec<f64>, String> {
    let rank = x.dims.len();
    // Kept axes first, then the reduced ones in ascending order: each group is contiguous.
    let (reduced, kept): (Vec<usize>, Vec<usize>) = (0..rank).partition(|a| axes.contains(a));
    let strides = row_major_strides(&x.dims);
    let order: Vec<usize> = kept.iter().chain(&reduced).copied().collect();
    let moved_dims: Vec<u64> = order.iter().map(|&a| x.dims[a]).collect();
    let moved_strides: Vec<usize> = order.iter().map(|&a| strides[a]).collect();
    let groups = count(kept.iter().map(|&a| x.dims[a]));
    let len = count(reduced.iter().map(|&a| x.dims[a]));
    let dtype = x.dtype;
    if len == 0 {
        let identity = match op {
            ReduceOp::Sum => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Mean => f64::NAN,
            _ if groups == 0 => 0.0,
            _ => {
                return Err(format!(
                    "reduces over an empty axis ({}), which has no {}",
                    TypeName(dtype, &x.dims),
                    if matches!(op, ReduceOp::Max | ReduceOp::ArgMax) {
                        "maximum"
                    } else {
                        "minimum"
                    }
                ))
            }
        };
        return Ok(vec![identity; groups]);
    }
    let moved = strided(&x.data, &moved_dims, 0, &moved_strides);
    Ok(moved
        .chunks(len)
        .map(|c| reduce_group(op, dtype, c))
        .collect())
}

/// One output of a reduction over the (non-empty) values `c` of dtype `dtype`.
fn reduce_group(op: ReduceOp, dtype: DType, c: &[f64]) -> f64 {
    if dtype.is_int() {
        let lane: Vec<i64> = c.iter().map(|&v| int_word(dtype, v)).collect();
        let r = reduce_ints(op, dtype, &lane);
        return match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => r as f64,
            _ => wrap(dtype, r),
        };
    }
    match op {
        ReduceOp::Sum => c.iter().sum(),
        ReduceOp::Prod => c.iter().product(),
        ReduceOp::Mean => c.iter().sum::<f64>() / c.len() as f64,
        ReduceOp::Max => c.iter().copied().fold(c[0], maximum),
        ReduceOp::Min => c.iter().copied().fold(c[0], minimum),
        ReduceOp::ArgMax => first_extreme(c, |v, best| v > best),
        ReduceOp::ArgMin => first_extreme(c, |v, best| v < best),
    }
}

/// The index of the first value no other beats, or of the first NaN (argmax/argmin).
pub fn first_extreme(c: &[f64], beats: fn(f64, f64) -> bool) -> f64 {
    let mut best = 0;
    for (i, &v) in c.iter().enumerate() {
        if v.is_nan() {
            return i as f64;
        }
        if beats(v, c[best]) {
            best = i;
        }
    }
    best as f64
}

fn matmul(a: &F64Tensor, b: &F64Tensor, out: &[u64]) -> Vec<f64> {
    let rank = out.len();
    let (m, n) = (out[rank - 2] as usize, out[rank - 1] as usize);
    let k = a.dims[a.dims.len() - 1] as usize;
    let batch = &out[..rank - 2];
    let a_batch = broadcast_index(&a.dims[..a.dims.len() - 2], batch);
    let b_batch = broadcast_index(&b.dims[..b.dims.len() - 2], batch);
    let int = a.dtype.is_int();
    let mut result = Vec::with_capacity(a_batch.len() * m * n);
    let (mut acc, mut acc_int) = (vec![0.0f64; n], vec![0i64; n]);
    for (&ab, &bb) in a_batch.iter().zip(&b_batch) {
        let (a_mat, b_mat) = (&a.data[ab * m * k..], &b.data[bb * k * n..]);
        for i in 0..m {
            acc.fill(0.0);
            acc_int.fill(0);
            for p in 0..k {
                let x = a_mat[i * k + p];
                let row = &b_mat[p * n..(p + 1) * n];
                if int {
                    for (s, &y) in acc_int.iter_mut().zip(row) {
                        *s = s.wrapping_add((x as i64).wrapping_mul(y as i64));
                    }
                } else {
                    for (s, &y) in acc.iter_mut().zip(row) {
                        *s += x * y;
                    }
                }
            }
            if int {
                result.extend(acc_int.iter().map(|&s| wrap(a.dtype, s)));
            } else {
                result.extend_from_slice(&acc);
            }
        }
    }
    result
}

/// Direct convolution: every output element sums its window over its group's channels.
fn conv(
    x: &F64Tensor,
    w: &F64Tensor,
    out: &[u64],
    strides: &[u64],
    dilations: &[u64],
    pads: &[(u64, u64)],
    groups: u64,
) -> Vec<f64> {
    let (xs, ws) = (row_major_strides(&x.dims), row_major_strides(&w.dims));
    let spatial = out.len() - 2;
    let (channels, out_channels) = (w.dims[1] as usize, out[1] as usize);
    let per_group = out_channels / groups as usize;
    let window: Vec<u64> = w.dims[2..].to_vec();
    let taps: usize = window.iter().map(|&k| k as usize).product();
    let mut result = Vec::with_capacity(out.iter().map(|&d| d as usize).product());
    let mut q = vec![0u64; out.len()];
    for _ in 0..out.iter().product::<u64>() {
        let (n, o) = (q[0] as usize, q[1] as usize);
        let first_channel = o / per_group * channels;
        let mut acc = 0.0;
        for tap in 0..taps {
            // The tap's kernel position and the input position it reads, if inside.
            let (mut rest, mut at, mut w_at) = (tap, n * xs[0], o * ws[0]);
            let mut inside = true;
            for i in (0..spatial).rev() {
                let k = rest % window[i] as usize;
                rest /= window[i] as usize;
                let pos =
                    (q[2 + i] * strides[i] + k as u64 * dilations[i]) as i64 - pads[i].0 as i64;
                inside &= (0..x.dims[2 + i] as i64).contains(&pos);
                at += pos.max(0) as usize * xs[2 + i];
                w_at += k * ws[2 + i];
            }
            if inside {
                for c in 0..channels {
                    acc += x.data[at + (first_channel + c) * xs[1]] * w.data[w_at + c * ws[1]];
                }
            }
        }
        result.push(acc);
        for a in (0..q.len()).rev() {
            q[a] += 1;
            if q[a] < out[a] {
                break;
            }
            q[a] = 0;
        }
    }
    result
}

/// The element count of some dims of a tensor (so it fits), 0 when one of them is 0.
fn count(dims: impl Iterator<Item = u64> + Clone) -> usize {
    if dims.clone().any(|d| d == 0) {
        0
    } else {
        dims.map(|d| d as usize).product()
    }
}

/// `(outer, inner)`: the element counts before and after `axis`.
fn around(dims: &[u64], axis: usize) -> (usize, usize) {
    let outer = count(dims[..axis].iter().copied());
    let inner = count(dims[axis + 1..].iter().copied());
    (outer, inner)
}

fn concat(xs: &[&F64Tensor], axis: usize, out: &[u64]) -> Vec<f64> {
    let (outer, inner) = around(out, axis);
    let mut result = Vec::with_capacity(numel_of(out).unwrap_or(0));
    for o in 0..outer {
        for x in xs {
            let chunk = x.dims[axis] as usize * inner;
            result.extend_from_slice(&x.data[o * chunk..(o + 1) * chunk]);
        }
    }
    result
}

fn pad(x: &F64Tensor, pads: &[(u64, u64)], value: f64, out: &[u64]) -> Vec<f64> {
    let mut result = vec![value; numel_of(out).unwrap_or(0)];
    let strides = row_major_strides(out);
    let base = pads
        .iter()
        .zip(&strides)
        .map(|(&(before, _), s)| before as usize * s)
        .sum();
    let mut values = x.data.iter();
    for_each_offset(&x.dims, base, &strides, |o| {
        if let Some(&v) = values.next() {
            result[o] = v;
        }
    });
    result
}

/// Every index is in `0..size`.
fn check_indices(indices: &F64Tensor, size: u64, axis: usize) -> Result<(), String> {
    let in_range = |i: f64| u64::try_from(i as i64).is_ok_and(|r| r < size);
    match indices.data.iter().position(|&i| !in_range(i)) {
        None => Ok(()),
        Some(pos) => Err(format!(
            "index {} (element {pos} of the indices) is out of range for axis {axis} of size {size}",
            indices.data[pos]
        )),
    }
}

/// Indices checked by [`check_indices`].
fn gather(data: &F64Tensor, indices: &F64Tensor, axis: usize) -> Vec<f64> {
    let size = data.dims[axis] as usize;
    let (outer, inner) = around(&data.dims, axis);
    let mut result = Vec::with_capacity(outer * indices.data.len() * inner);
    for o in 0..outer {
        for &i in &indices.data {
            let start = (o * size + i as usize) * inner;
            result.extend_from_slice(&data.data[start..start + inner]);
        }
    }
    result
}

/// The static `start`, or the run-time scalar third operand.
fn write_offset(xs: &[&F64Tensor], start: Option<u64>) -> i128 {
    match start {
        Some(s) => i128::from(s),
        None => xs[2].data[0] as i128,
    }
}

/// Writing `value` at `offset` along `axis` stays within the state.
fn check_offset(
    offset: i128,
    state: &F64Tensor,
    value: &F64Tensor,
    axis: usize,
) -> Result<(), String> {
    let (size, len) = (state.dims[axis], value.dims[axis]);
    if offset < 0 || offset + i128::from(len) > i128::from(size) {
        return Err(format!(
            "offset {offset} with {len} elements overruns axis {axis} of size {size}"
        ));
    }
    Ok(())
}

/// `offset` checked by [`check_offset`].
fn write_slice(state: &F64Tensor, value: &F64Tensor, axis: usize, offset: usize) -> Vec<f64> {
    let (size, len) = (state.dims[axis] as usize, value.dims[axis] as usize);
    let (outer, inner) = around(&state.dims, axis);
    let mut result = state.data.clone();
    for o in 0..outer {
        let dst = (o * size + offset) * inner;
        let src = o * len * inner;
        result[dst..dst + len * inner].copy_from_slice(&value.data[src..src + len * inner]);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_pow_follows_the_rule() {
        assert_eq!(int_pow(3, 4), 81);
        assert_eq!(int_pow(2, 0), 1);
        assert_eq!(int_pow(2, -1), 0);
        assert_eq!(int_pow(1, -5), 1);
        assert_eq!(int_pow(-1, -3), -1);
        assert_eq!(int_pow(-1, -4), 1);
        assert_eq!(int_pow(2, 64), 0, "wraps");
        assert_eq!(int_pow(-2, 3), -8);
    }

    #[test]
    fn maximum_orders_signed_zeros() {
        assert!(maximum(-0.0, 0.0).is_sign_positive());
        assert!(maximum(0.0, -0.0).is_sign_positive());
        assert!(minimum(0.0, -0.0).is_sign_negative());
        assert!(minimum(-0.0, 0.0).is_sign_negative());
    }
}
