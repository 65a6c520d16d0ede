//! The builder API: tensor handles with methods and operators that read like the math.
//!
//! ```
//! use tir_graph::{shape, DType, GraphBuilder};
//! # fn main() -> Result<(), tir_graph::GraphError> {
//! let g = GraphBuilder::new();
//! let x = g.input("x", DType::F32, shape!["batch", 64])?;
//! let w = g.parameter("w", DType::F32, shape![64, 32])?;
//! let b = g.parameter("b", DType::F32, shape![32])?;
//! let y = (&x.matmul(&w)? + &b)?.gelu()?;
//! g.output("y", &y)?;
//! let graph = g.finish()?;
//! assert_eq!(graph.ty(graph.outputs()[0].1).to_string(), "f32[batch, 32]");
//! # Ok(()) }
//! ```
//!
//! Every call that can fail returns `Result<_, GraphError>` and adds nothing on failure.
//! Composites (softmax, layer_norm, attention, ...) expand into primitive ops.

use crate::op::{ConstData, ExactF64, SliceRange, MAX_CONSTANT_ELEMENTS};
use crate::{
    BinaryOp, DType, Dim, Graph, GraphError, NodeId, Op, ReduceOp, ReshapeDim, Shape, TensorType,
    UnaryOp,
};
use std::cell::RefCell;
use std::rc::Rc;

/// Builds one [`Graph`]. Cloning a builder shares the graph under construction.
#[derive(Clone, Default)]
pub struct GraphBuilder {
    graph: Rc<RefCell<Graph>>,
}

/// A value of the graph under construction. Cheap to clone.
#[derive(Clone)]
pub struct Tensor {
    graph: Rc<RefCell<Graph>>,
    id: NodeId,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({}: {})", self.id, self.ty())
    }
}

type Result<T> = std::result::Result<T, GraphError>;

impl GraphBuilder {
    /// A builder of an empty graph.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    fn source(&self, op: Op, ty: TensorType) -> Result<Tensor> {
        let id = self.graph.borrow_mut().add_node(op, &[], Some(ty))?;
        Ok(Tensor {
            graph: self.graph.clone(),
            id,
        })
    }

    /// A tensor supplied on every run.
    pub fn input(&self, name: &str, dtype: DType, shape: Shape) -> Result<Tensor> {
        let name = name.to_string();
        self.source(Op::Input { name }, TensorType::new(dtype, shape))
    }

    /// A named weight.
    pub fn parameter(&self, name: &str, dtype: DType, shape: Shape) -> Result<Tensor> {
        let name = name.to_string();
        self.source(Op::Parameter { name }, TensorType::new(dtype, shape))
    }

    /// A buffer that persists between runs; reads see its value at the start of the run.
    pub fn state(&self, name: &str, dtype: DType, shape: Shape) -> Result<Tensor> {
        let name = name.to_string();
        self.source(Op::State { name }, TensorType::new(dtype, shape))
    }

    /// A small embedded tensor; `values` (row-major) are rounded to `dtype`.
    pub fn constant(&self, dtype: DType, shape: Shape, values: &[f64]) -> Result<Tensor> {
        let data = ConstData::from_f64(dtype, values);
        self.source(Op::Constant { data }, TensorType::new(dtype, shape))
    }

    /// A small embedded tensor with its values given exactly (integers past 2^53 included).
    pub fn constant_data(&self, dtype: DType, shape: Shape, data: ConstData) -> Result<Tensor> {
        self.source(Op::Constant { data }, TensorType::new(dtype, shape))
    }

    /// A rank-0 constant.
    pub fn scalar(&self, dtype: DType, value: f64) -> Result<Tensor> {
        self.constant(dtype, Shape::scalar(), &[value])
    }

    /// `0, 1, ..., n-1` as a constant of shape `[n]`.
    pub fn arange(&self, dtype: DType, n: u64) -> Result<Tensor> {
        if n > MAX_CONSTANT_ELEMENTS {
            // Let the constant refuse the size before `n` values are materialized.
            return self.constant(dtype, Shape::of(&[n]), &[]);
        }
        let values: Vec<f64> = (0..n).map(|i| i as f64).collect();
        self.constant(dtype, Shape::of(&[n]), &values)
    }

    /// Names `tensor` as an output of the graph.
    pub fn output(&self, name: &str, tensor: &Tensor) -> Result<()> {
        self.check_own(tensor)?;
        self.graph.borrow_mut().add_output(name, tensor.id)
    }

    /// The `i64` vector `0, 1, .., len - 1`; `len` may be symbolic (an expression over the dims).
    pub fn iota(&self, len: Dim) -> Result<Tensor> {
        self.operandless(Op::Iota { len })
    }

    /// The value of `dim` as an `i64` scalar (a constant when `dim` is static).
    pub fn dim_value(&self, dim: Dim) -> Result<Tensor> {
        if let Some(n) = dim.as_static() {
            return self.scalar(DType::I64, n as f64);
        }
        self.operandless(Op::DimValue { dim })
    }

    /// A user's kernel applied to `inputs`: one tensor per output of the kernel, typed by its
    /// signature (symbols bound by the operands; a mismatch names the kernel and the operand).
    pub fn custom(&self, kernel: &crate::CustomKernel, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        for t in inputs {
            self.check_own(t)?;
        }
        let ids: Vec<NodeId> = inputs.iter().map(|t| t.id).collect();
        let shared = crate::CustomRef::new(kernel.clone());
        (0..kernel.outputs().len())
            .map(|output| {
                let op = Op::Custom {
                    kernel: shared.clone(),
                    output,
                };
                let id = self.graph.borrow_mut().add_node(op, &ids, None)?;
                Ok(Tensor {
                    graph: self.graph.clone(),
                    id,
                })
            })
            .collect()
    }

    /// A node of `op`, which takes no operands.
    fn operandless(&self, op: Op) -> Result<Tensor> {
        let id = self.graph.borrow_mut().add_node(op, &[], None)?;
        Ok(Tensor {
            graph: self.graph.clone(),
            id,
        })
    }

    /// Joins `tensors` along `axis`.
    pub fn concat(&self, tensors: &[&Tensor], axis: usize) -> Result<Tensor> {
        for t in tensors {
            self.check_own(t)?;
        }
        let ids: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
        let id = self
            .graph
            .borrow_mut()
            .add_node(Op::Concat { axis }, &ids, None)?;
        Ok(Tensor {
            graph: self.graph.clone(),
            id,
        })
    }

    /// A bool `[q_len, k_len]` mask, true where query `i` may see key `j`: `j <= i + k_len - q_len`
    /// (the queries are the last `q_len` positions of the keys). The lengths may be symbolic:
    /// the positions are then counted at run time.
    pub fn causal_mask(&self, q_len: impl Into<Dim>, k_len: impl Into<Dim>) -> Result<Tensor> {
        let (q_len, k_len) = (q_len.into(), k_len.into());
        self.atomically(|| {
            let rows = self.positions(&q_len)?.unsqueeze(&[1])?;
            let offset = k_len.to_expr().sub(&q_len.to_expr()).ok();
            let rows = match offset.and_then(|d| d.as_constant()) {
                Some(d) => rows.add_scalar(d as f64)?,
                None => {
                    let ahead = self
                        .dim_value(k_len.clone())?
                        .sub(&self.dim_value(q_len)?)?;
                    rows.add(&ahead)?
                }
            };
            let cols = self.positions(&k_len)?.unsqueeze(&[0])?;
            cols.le(&rows)
        })
    }

    /// `0, 1, .., len - 1` as `i64`: a constant when `len` is static, else an `iota`.
    fn positions(&self, len: &Dim) -> Result<Tensor> {
        match len.as_static() {
            Some(n) => self.arange(DType::I64, n),
            None => self.iota(len.clone()),
        }
    }

    /// The finished graph, verified. Fails if the graph has no outputs and no state updates.
    pub fn finish(self) -> Result<Graph> {
        let graph = self.graph.borrow().clone();
        graph.verify()?;
        Ok(graph)
    }

    /// Runs `build`; if it fails, removes every node it added, so a failed composite leaves the
    /// graph as it was.
    fn atomically<T>(&self, build: impl FnOnce() -> Result<T>) -> Result<T> {
        let len = self.graph.borrow().len();
        let result = build();
        if result.is_err() {
            self.graph.borrow_mut().truncate(len);
        }
        result
    }

    fn check_own(&self, t: &Tensor) -> Result<()> {
        if Rc::ptr_eq(&self.graph, &t.graph) {
            Ok(())
        } else {
            Err(GraphError::ForeignTensor)
        }
    }
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> Result<Tensor> {
                self.apply(Op::Unary(UnaryOp::$op), &[])
            }
        )*
    };
}

macro_rules! binary_methods {
    ($($name:ident => $op:ident;)*) => {
        $(
            #[doc = concat!("[`BinaryOp::", stringify!($op), "`] of `self` and `other`, elementwise with NumPy broadcasting; both have one dtype.")]
            pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                self.apply(Op::Binary(BinaryOp::$op), &[other])
            }
        )*
    };
}

macro_rules! reduce_methods {
    ($($name:ident => $op:ident;)*) => {
        $(
            #[doc = concat!("[`ReduceOp::", stringify!($op), "`] over `axes`; `keepdims` keeps them as size-1 axes, otherwise they are removed.")]
            pub fn $name(&self, axes: &[usize], keepdims: bool) -> Result<Tensor> {
                let op = Op::Reduce { op: ReduceOp::$op, axes: axes.to_vec(), keepdims };
                self.apply(op, &[])
            }
        )*
    };
}

impl Tensor {
    /// The node that computes this tensor.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The tensor's type.
    pub fn ty(&self) -> TensorType {
        self.graph.borrow().ty(self.id).clone()
    }

    /// The tensor's element type.
    pub fn dtype(&self) -> DType {
        self.graph.borrow().ty(self.id).dtype
    }

    /// The tensor's shape.
    pub fn shape(&self) -> Shape {
        self.graph.borrow().ty(self.id).shape.clone()
    }

    /// The tensor's number of dims.
    pub fn rank(&self) -> usize {
        self.graph.borrow().ty(self.id).rank()
    }

    /// The graph inputs this tensor is computed from, when nothing else it depends on varies
    /// between runs (no parameter, state or symbolic dim): fixing those inputs fixes its value.
    /// `None` when something else varies. An importer uses it to ask for the inputs whose values
    /// it needs at import (a size computed from an input).
    pub fn computed_from_inputs(&self) -> Option<Vec<String>> {
        let g = self.graph.borrow();
        let mut inputs = std::collections::BTreeSet::new();
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![self.id];
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            // A symbolic dim varies between runs.
            g.ty(id).shape.static_dims()?;
            match &g.node(id).op {
                Op::Input { name } => {
                    inputs.insert(name.clone());
                }
                Op::Parameter { .. } | Op::State { .. } => return None,
                _ => stack.extend(g.operands(id)),
            }
        }
        Some(inputs.into_iter().collect())
    }

    /// The builder this tensor belongs to.
    pub fn builder(&self) -> GraphBuilder {
        GraphBuilder {
            graph: self.graph.clone(),
        }
    }

    /// Adds `op` with `self` as operand 0 followed by `rest`.
    fn apply(&self, op: Op, rest: &[&Tensor]) -> Result<Tensor> {
        let mut ids = vec![self.id];
        for t in rest {
            if !Rc::ptr_eq(&self.graph, &t.graph) {
                return Err(GraphError::ForeignTensor);
            }
            ids.push(t.id);
        }
        let id = self.graph.borrow_mut().add_node(op, &ids, None)?;
        Ok(Tensor {
            graph: self.graph.clone(),
            id,
        })
    }

    /// `op` applied to each element.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        self.apply(Op::Unary(op), &[])
    }

    /// A scalar constant of this tensor's dtype.
    fn scalar_like(&self, value: f64) -> Result<Tensor> {
        self.builder().scalar(self.dtype(), value)
    }

    unary_methods! {
        /// `-x` of each element.
        neg => Neg;
        /// `|x|` of each element.
        abs => Abs;
        /// `e^x` of each element.
        exp => Exp;
        /// Natural logarithm of each element.
        log => Log;
        /// Square root of each element.
        sqrt => Sqrt;
        /// `1 / sqrt(x)` of each element.
        rsqrt => Rsqrt;
        /// `1 / x` of each element.
        reciprocal => Reciprocal;
        /// `sin(x)` of each element, in radians.
        sin => Sin;
        /// `cos(x)` of each element, in radians.
        cos => Cos;
        /// Hyperbolic tangent of each element.
        tanh => Tanh;
        /// `1 / (1 + e^-x)` of each element.
        sigmoid => Sigmoid;
        /// `max(x, 0)` of each element.
        relu => Relu;
        /// Gelu with the exact normal CDF (erf form).
        gelu => GeluErf;
        /// Gelu's tanh approximation.
        gelu_tanh => GeluTanh;
        /// `x * sigmoid(x)` of each element.
        silu => Silu;
        /// The error function of each element.
        erf => Erf;
        /// Each element rounded toward negative infinity.
        floor => Floor;
        /// Each element rounded toward positive infinity.
        ceil => Ceil;
        /// Logical not (bool only).
        not => Not;
        /// Bitwise complement (integers only).
        bit_not => BitNot;
    }

    binary_methods! {
        add => Add;
        sub => Sub;
        mul => Mul;
        div => Div;
        rem => Rem;
        pow => Pow;
        maximum => Maximum;
        minimum => Minimum;
        eq => Eq;
        ne => Ne;
        lt => Lt;
        le => Le;
        gt => Gt;
        ge => Ge;
        and => And;
        or => Or;
        bit_and => BitAnd;
        bit_or => BitOr;
        bit_xor => BitXor;
        shift_left => ShiftLeft;
        shift_right => ShiftRight;
    }

    reduce_methods! {
        sum => Sum;
        mean => Mean;
        max => Max;
        min => Min;
        prod => Prod;
    }

    /// `self + value`, with `value` a constant of `self`'s dtype (rounded to it).
    pub fn add_scalar(&self, value: f64) -> Result<Tensor> {
        self.builder()
            .atomically(|| self.add(&self.scalar_like(value)?))
    }

    /// `self * value`, with `value` a constant of `self`'s dtype (rounded to it).
    pub fn mul_scalar(&self, value: f64) -> Result<Tensor> {
        self.builder()
            .atomically(|| self.mul(&self.scalar_like(value)?))
    }

    /// Each element converted to `to` ([`Op::Cast`]).
    pub fn cast(&self, to: DType) -> Result<Tensor> {
        self.apply(Op::Cast { to }, &[])
    }

    /// `self ? a : b` elementwise; `self` is the bool condition.
    pub fn select(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.apply(Op::Select, &[a, b])
    }

    /// Index of the first maximum along `axis` (i64).
    pub fn argmax(&self, axis: usize, keepdims: bool) -> Result<Tensor> {
        let op = Op::Reduce {
            op: ReduceOp::ArgMax,
            axes: vec![axis],
            keepdims,
        };
        self.apply(op, &[])
    }

    /// Index of the first minimum along `axis` (i64).
    pub fn argmin(&self, axis: usize, keepdims: bool) -> Result<Tensor> {
        let op = Op::Reduce {
            op: ReduceOp::ArgMin,
            axes: vec![axis],
            keepdims,
        };
        self.apply(op, &[])
    }

    /// `self[..., m, k] @ other[..., k, n]`, batch dims broadcast ([`Op::MatMul`]).
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.apply(Op::MatMul, &[other])
    }

    /// `conv(self, weights)`: `self: [N, C, S..]`, `weights: [O, C / groups, K..]` (see
    /// [`Op::Conv`]); per spatial axis a stride, a dilation and `(before, after)` padding.
    pub fn conv(
        &self,
        weights: &Tensor,
        strides: &[u64],
        dilations: &[u64],
        pads: &[(u64, u64)],
        groups: u64,
    ) -> Result<Tensor> {
        let op = Op::Conv {
            strides: strides.to_vec(),
            dilations: dilations.to_vec(),
            pads: pads.to_vec(),
            groups,
        };
        self.apply(op, &[weights])
    }

    /// Reshape; at most one dim may be [`ReshapeDim::Infer`].
    pub fn reshape(&self, dims: &[ReshapeDim]) -> Result<Tensor> {
        self.apply(
            Op::Reshape {
                dims: dims.to_vec(),
            },
            &[],
        )
    }

    /// Reshape to exactly `shape`.
    pub fn reshape_to(&self, shape: &Shape) -> Result<Tensor> {
        let dims: Vec<ReshapeDim> = shape.dims().iter().cloned().map(ReshapeDim::Dim).collect();
        self.reshape(&dims)
    }

    /// Result dim `i` is dim `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        self.apply(
            Op::Permute {
                perm: perm.to_vec(),
            },
            &[],
        )
    }

    /// Swaps the last two axes.
    pub fn transpose(&self) -> Result<Tensor> {
        let rank = self.rank();
        if rank < 2 {
            // Let inference name the problem: a permutation of the wrong length.
            return self.permute(&[1, 0]);
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        self.permute(&perm)
    }

    /// `self` repeated along its size-1 axes (and new leading ones) to `shape`, by NumPy's rule.
    pub fn broadcast_to(&self, shape: &Shape) -> Result<Tensor> {
        let dims = shape.dims().to_vec();
        self.apply(Op::BroadcastTo { dims }, &[])
    }

    /// One range per axis.
    pub fn slice(&self, ranges: &[SliceRange]) -> Result<Tensor> {
        let ranges = ranges.to_vec();
        self.apply(Op::Slice { ranges }, &[])
    }

    /// `start..stop` of one axis, the other axes whole.
    pub fn slice_axis(&self, axis: usize, start: u64, stop: u64) -> Result<Tensor> {
        let mut ranges = vec![SliceRange::FULL; self.rank()];
        if let Some(r) = ranges.get_mut(axis) {
            *r = SliceRange::new(start, stop, 1);
        } else {
            ranges.push(SliceRange::new(start, stop, 1));
        }
        self.slice(&ranges)
    }

    /// Pads each axis with `(before, after)` copies of `value`.
    pub fn pad(&self, pads: &[(u64, u64)], value: f64) -> Result<Tensor> {
        let op = Op::Pad {
            pads: pads.to_vec(),
            value: ExactF64(value),
        };
        self.apply(op, &[])
    }

    /// `self` without `axes`, each of static size 1.
    pub fn squeeze(&self, axes: &[usize]) -> Result<Tensor> {
        let axes = axes.to_vec();
        self.apply(Op::Squeeze { axes }, &[])
    }

    /// Inserts size-1 axes at these positions of the result.
    pub fn unsqueeze(&self, axes: &[usize]) -> Result<Tensor> {
        let axes = axes.to_vec();
        self.apply(Op::Unsqueeze { axes }, &[])
    }

    /// `self[.., indices, ..]` along `axis` (an embedding lookup with `axis` 0).
    pub fn gather(&self, indices: &Tensor, axis: usize) -> Result<Tensor> {
        self.apply(Op::Gather { axis }, &[indices])
    }

    /// Makes `value` this state's value after the run. `self` must be a state.
    pub fn assign(&self, value: &Tensor) -> Result<Tensor> {
        self.apply(Op::StateAssign, &[value])
    }

    /// Writes `value` into this state at a fixed `start` along `axis`.
    pub fn write_slice(&self, value: &Tensor, axis: usize, start: u64) -> Result<Tensor> {
        let op = Op::StateWriteSlice {
            axis,
            start: Some(start),
        };
        self.apply(op, &[value])
    }

    /// Writes `value` into this state along `axis` at the run-time scalar `offset` (i32/i64).
    pub fn write_slice_at(&self, value: &Tensor, axis: usize, offset: &Tensor) -> Result<Tensor> {
        let op = Op::StateWriteSlice { axis, start: None };
        self.apply(op, &[value, offset])
    }

    /// The last axis, or an error from a reduction if `self` is a scalar.
    fn last_axis(&self) -> usize {
        self.rank().saturating_sub(1)
    }

    /// `exp(x - max) / sum(exp(x - max))` along `axis`.
    pub fn softmax(&self, axis: usize) -> Result<Tensor> {
        self.builder().atomically(|| {
            let shifted = self.sub(&self.max(&[axis], true)?)?;
            let e = shifted.exp()?;
            e.div(&e.sum(&[axis], true)?)
        })
    }

    /// `(x - max) - log(sum(exp(x - max)))` along `axis`.
    pub fn log_softmax(&self, axis: usize) -> Result<Tensor> {
        self.builder().atomically(|| {
            let shifted = self.sub(&self.max(&[axis], true)?)?;
            let log_sum = shifted.exp()?.sum(&[axis], true)?.log()?;
            shifted.sub(&log_sum)
        })
    }

    /// Layer norm over the last axis: `(x - mean) / sqrt(var + eps) * gamma + beta`.
    pub fn layer_norm(&self, gamma: &Tensor, beta: &Tensor, eps: f64) -> Result<Tensor> {
        self.builder().atomically(|| {
            let axis = self.last_axis();
            let centered = self.sub(&self.mean(&[axis], true)?)?;
            let var = centered.mul(&centered)?.mean(&[axis], true)?;
            let inv_std = var.add_scalar(eps)?.rsqrt()?;
            centered.mul(&inv_std)?.mul(gamma)?.add(beta)
        })
    }

    /// RMS norm over the last axis: `x / sqrt(mean(x^2) + eps) * gamma`.
    pub fn rms_norm(&self, gamma: &Tensor, eps: f64) -> Result<Tensor> {
        self.builder().atomically(|| {
            let axis = self.last_axis();
            let ms = self.mul(self)?.mean(&[axis], true)?;
            self.mul(&ms.add_scalar(eps)?.rsqrt()?)?.mul(gamma)
        })
    }

    /// `x @ w + b` with `w` of shape `[in, out]`.
    pub fn linear(&self, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        self.builder().atomically(|| {
            let y = self.matmul(w)?;
            match b {
                Some(b) => y.add(b),
                None => Ok(y),
            }
        })
    }

    /// Scaled dot-product attention: `softmax(q @ k^T / sqrt(d) masked) @ v` for
    /// `q: [..., s_q, d]`, `k: [..., s_k, d]`, `v: [..., s_k, d_v]`. `causal` keeps key `j` for
    /// query `i` when `j <= i + s_k - s_q` (the lengths static or symbolic).
    pub fn attention(&self, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
        self.builder().check_own(k)?;
        self.builder().atomically(|| {
            let mask = if causal {
                let (s_q, s_k) = (self.seq_len()?, k.seq_len()?);
                Some(self.builder().causal_mask(s_q, s_k)?)
            } else {
                None
            };
            self.attention_masked(k, v, mask.as_ref())
        })
    }

    /// Attention with an explicit bool mask broadcastable to `[..., s_q, s_k]` (true = attend).
    /// The head dim (last axis of `self`) must be static: it sets the scale.
    pub fn attention_masked(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let builder = self.builder();
        // Checked before anything is built, so a foreign operand's graph is never touched.
        for t in [k, v].into_iter().chain(mask) {
            builder.check_own(t)?;
        }
        let head_dim = match self.shape().dims().last() {
            Some(Dim::Static(d)) => *d,
            _ => {
                return Err(GraphError::AttentionNeedsStaticHeadDim {
                    node: self.id,
                    ty: self.ty(),
                })
            }
        };
        builder.atomically(|| {
            let scores = self
                .matmul(&k.transpose()?)?
                .mul_scalar(1.0 / (head_dim as f64).sqrt())?;
            let scores = match mask {
                Some(mask) => mask.select(&scores, &scores.scalar_like(f64::NEG_INFINITY)?)?,
                None => scores,
            };
            scores.softmax(scores.last_axis())?.matmul(v)
        })
    }

    /// The size of the second-to-last axis (the sequence axis of attention operands).
    fn seq_len(&self) -> Result<Dim> {
        let shape = self.shape();
        match shape.rank().checked_sub(2) {
            Some(i) => Ok(shape.dims()[i].clone()),
            None => Err(GraphError::AttentionNeedsSequence {
                node: self.id,
                ty: self.ty(),
            }),
        }
    }
}

macro_rules! operator {
    ($trait:ident, $method:ident) => {
        impl std::ops::$trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }

        impl std::ops::$trait<f64> for &Tensor {
            type Output = Result<Tensor>;
            /// With a scalar of the tensor's dtype.
            fn $method(self, rhs: f64) -> Result<Tensor> {
                self.builder()
                    .atomically(|| Tensor::$method(self, &self.scalar_like(rhs)?))
            }
        }
    };
}

operator!(Add, add);
operator!(Sub, sub);
operator!(Mul, mul);
operator!(Div, div);

impl std::ops::Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}
