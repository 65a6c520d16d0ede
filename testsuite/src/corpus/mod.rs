//! The corpus: every case, generated deterministically from a seed (the seed changes the input
//! values, never the set of cases or their graphs).
//!
//! - [`ops`]: every op of the IR × every dtype it accepts × the shapes that matter (rank 0 and 1,
//!   size-1 dims, sizes that are no multiple of any tile, rows of 32768 and more, broadcasting in
//!   each direction, symbolic dims bound to several values run after run, operands made
//!   non-contiguous by permute and slice). One or two ops per case.
//! - [`patterns`]: the example models at small sizes, softmax and the norms with and without fused
//!   producers and consumers, matmul with every epilogue kind, attention, states over several
//!   runs, graphs whose memory plan reuses buffers.
//! - [`numerics`]: stability at large magnitudes, inf and NaN through each op class, integer
//!   wrap-around and division, f16/bf16 rounding.
//! - [`quant`]: products with weights dequantized from the int8, FP8, AWQ and GPTQ layouts
//!   (`tir_graph::quant`) at every group size and odd shapes.
//! - [`sharded`]: graphs run on a mesh of devices: every collective × dtype, and the sharding
//!   rules on the example models.
//! - [`custom`]: users' kernels (`tir_lower::custom`) against their reference composites.

mod custom;
mod numerics;
mod ops;
mod patterns;
mod quant;
mod sharded;

use crate::case::Case;
use crate::tolerance::Tolerance;
use crate::values::{sources, Values};
use std::collections::BTreeMap;
use tir_graph::eval::F64Tensor;
use tir_graph::{BinaryOp, DType, Graph, GraphError, Tensor, UnaryOp};

type Result<T> = std::result::Result<T, GraphError>;

/// The float dtypes, narrowest first.
pub(crate) const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];
/// The integer dtypes.
pub(crate) const INTS: [DType; 8] = DType::INTS;
/// Integers and floats: what arithmetic accepts.
pub(crate) const NUMERIC: [DType; 12] = [
    DType::I8,
    DType::U8,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::I16,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// The integer dtypes models rarely compute in (ONNX's `i16`, `u16`, `u32`, `u64`): the op
/// cases cover them in two or three operand layouts rather than all, which keeps the corpus's
/// cubin compile in CI short; their semantics (unsigned order, widths) are what differs, not
/// their addressing.
pub(crate) fn rare_int(d: DType) -> bool {
    matches!(d, DType::I16 | DType::U16 | DType::U32 | DType::U64)
}

/// One binding of the symbolic dims (empty for static graphs).
pub type Binding = Vec<(&'static str, u64)>;

/// Every case of the corpus for `seed`, in a fixed order.
pub fn corpus(seed: u64) -> Vec<Case> {
    let mut c = Corpus {
        seed,
        cases: Vec::new(),
    };
    let built = ops::add(&mut c)
        .and_then(|()| patterns::add(&mut c))
        .and_then(|()| numerics::add(&mut c))
        .and_then(|()| quant::add(&mut c))
        .and_then(|()| sharded::add(&mut c))
        .and_then(|()| custom::add(&mut c));
    if let Err(e) = built {
        // The graphs do not depend on the seed: the crate's tests build every one of them.
        panic!("a corpus graph failed to build: {e}");
    }
    c.cases
}

/// The corpus under construction.
pub(crate) struct Corpus {
    seed: u64,
    cases: Vec<Case>,
}

impl Corpus {
    /// A case with one run per binding, every input and parameter drawn as `values_of` says.
    pub(crate) fn add(
        &mut self,
        name: String,
        graph: Graph,
        bindings: &[Binding],
        values_of: &dyn Fn(&str) -> Values,
        tolerance: Tolerance,
    ) {
        let runs = bindings
            .iter()
            .enumerate()
            .map(|(run, b)| self.sources(&name, &graph, b, run, values_of))
            .collect();
        self.cases.push(Case::new(name, graph, runs, tolerance));
    }

    /// A case with one static run, every source drawn from `values`.
    pub(crate) fn add_static(
        &mut self,
        name: String,
        graph: Graph,
        values: Values,
        tolerance: Tolerance,
    ) {
        self.add(name, graph, &[Vec::new()], &|_| values.clone(), tolerance);
    }

    /// A case with runs given in full.
    pub(crate) fn add_runs(
        &mut self,
        name: String,
        graph: Graph,
        runs: Vec<BTreeMap<String, F64Tensor>>,
        tolerance: Tolerance,
    ) {
        self.cases.push(Case::new(name, graph, runs, tolerance));
    }

    /// Runs the case added last on `mesh`.
    pub(crate) fn put_on_mesh(&mut self, mesh: tir_lower::mesh::MeshSpec) {
        if let Some(case) = self.cases.pop() {
            self.cases.push(case.on_mesh(mesh));
        }
    }

    /// The sources of run `run` of case `name` under `binding`.
    pub(crate) fn sources(
        &self,
        name: &str,
        graph: &Graph,
        binding: &Binding,
        run: usize,
        values_of: &dyn Fn(&str) -> Values,
    ) -> BTreeMap<String, F64Tensor> {
        let dims = binding.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        sources(graph, &dims, values_of, self.seed, name, run)
    }
}

/// A scalar tensor of `dtype` holding `v` (exact in the dtype).
pub(crate) fn scalar(dtype: DType, v: f64) -> F64Tensor {
    F64Tensor {
        dtype,
        dims: vec![],
        data: vec![dtype.round_value(v)],
    }
}

/// A tensor from explicit values, rounded to `dtype`.
pub(crate) fn explicit(dtype: DType, dims: &[u64], values: &[f64]) -> F64Tensor {
    F64Tensor {
        dtype,
        dims: dims.to_vec(),
        data: values
            .iter()
            .map(|&v| {
                let r = dtype.const_value(v);
                if dtype.is_float() {
                    r
                } else {
                    r + 0.0
                }
            })
            .collect(),
    }
}

/// Applying an op by its enum value.
pub(crate) trait ByOp {
    fn apply_unary(&self, u: UnaryOp) -> Result<Tensor>;
    fn apply_binary(&self, b: BinaryOp, y: &Tensor) -> Result<Tensor>;
}

impl ByOp for Tensor {
    fn apply_unary(&self, u: UnaryOp) -> Result<Tensor> {
        let x = self;
        match u {
            UnaryOp::Neg => x.neg(),
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.log(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => x.rsqrt(),
            UnaryOp::Reciprocal => x.reciprocal(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => x.sigmoid(),
            UnaryOp::Relu => x.relu(),
            UnaryOp::GeluErf => x.gelu(),
            UnaryOp::GeluTanh => x.gelu_tanh(),
            UnaryOp::Silu => x.silu(),
            UnaryOp::Erf => x.erf(),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Not => x.not(),
            UnaryOp::BitNot => x.bit_not(),
        }
    }

    fn apply_binary(&self, b: BinaryOp, y: &Tensor) -> Result<Tensor> {
        let x = self;
        match b {
            BinaryOp::Add => x.add(y),
            BinaryOp::Sub => x.sub(y),
            BinaryOp::Mul => x.mul(y),
            BinaryOp::Div => x.div(y),
            BinaryOp::Rem => x.rem(y),
            BinaryOp::Pow => x.pow(y),
            BinaryOp::Maximum => x.maximum(y),
            BinaryOp::Minimum => x.minimum(y),
            BinaryOp::Eq => x.eq(y),
            BinaryOp::Ne => x.ne(y),
            BinaryOp::Lt => x.lt(y),
            BinaryOp::Le => x.le(y),
            BinaryOp::Gt => x.gt(y),
            BinaryOp::Ge => x.ge(y),
            BinaryOp::And => x.and(y),
            BinaryOp::Or => x.or(y),
            BinaryOp::BitAnd => x.bit_and(y),
            BinaryOp::BitOr => x.bit_or(y),
            BinaryOp::BitXor => x.bit_xor(y),
            BinaryOp::ShiftLeft => x.shift_left(y),
            BinaryOp::ShiftRight => x.shift_right(y),
        }
    }
}
