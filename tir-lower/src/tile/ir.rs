//! The tile IR: backend-neutral kernels modelled on NVIDIA Tile IR.
//!
//! A [`TileKernel`] is a grid of tile programs. Each program reads its program id (one index per
//! grid axis), builds *views* of the kernel's tensor parameters (a base offset, a shape and
//! strides, all in elements; a view of a mutable parameter is a partition view of what the
//! kernel writes, a view of a shared one is a read-only tensor view), loads tiles (static
//! power-of-two shapes, padded where they run past the view's shape), computes with tile
//! operations, and stores tiles (elements past the view's shape are not written). Loads and
//! stores of a mutable parameter are chained by tokens; loads of shared parameters carry none.
//!
//! Values are in SSA form: every statement defines its values once ([`Stmt::defs`]), and a
//! statement uses only values defined before it in its block or an enclosing one. Index
//! arithmetic runs on `i64` scalars; tiles have a dtype and a static shape. Element dtypes of
//! tiles follow the graph: an op on `f16` tiles yields an `f16` tile (a backend may compute in
//! `f32` and round), matmul accumulates in `f32` for 16- and 32-bit floats ([`TileOp::Mma`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tir_graph::{BinaryOp, DType, ExactF64, ReduceOp, UnaryOp};

/// An SSA value of a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ValueId(pub u32);

impl std::fmt::Display for ValueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// The type of a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Type {
    /// An `i64` scalar: index arithmetic, program ids, dims.
    Index,
    /// A tile of `dtype` with a static shape (each dim a power of two, or 1).
    Tile {
        /// The element type.
        dtype: DType,
        /// The static shape, in elements per axis.
        shape: Vec<u64>,
    },
    /// A view of tensor parameter `param` with `rank` axes.
    View {
        /// The kernel parameter it views (index into [`TileKernel::params`]).
        param: usize,
        /// Its number of axes.
        rank: usize,
    },
    /// Orders accesses to a mutable parameter.
    Token,
}

impl Type {
    /// The tile type of `dtype` elements in `shape`.
    pub fn tile(dtype: DType, shape: &[u64]) -> Type {
        Type::Tile {
            dtype,
            shape: shape.to_vec(),
        }
    }
}

/// How a kernel uses a tensor parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    /// Read only; loads need no ordering.
    Shared,
    /// Written (and possibly read) by the kernel; its accesses are token-ordered.
    Mutable,
}

/// A tensor the kernel reads or writes: one buffer of the program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorParam {
    /// The buffer bound to this parameter at launch ([`crate::Program::buffers`] index).
    pub buffer: usize,
    /// The element type of the buffer.
    pub dtype: DType,
    /// Whether the kernel writes it.
    pub access: Access,
}

/// Integer ops on `i64` scalars or tiles. Division truncates toward zero (operands of index
/// arithmetic are never negative where it is used).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IndexOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`, truncated toward zero.
    Div,
    /// The remainder of `a / b` (the dividend's sign).
    Rem,
    /// The smaller of `a` and `b`.
    Min,
    /// The larger of `a` and `b`.
    Max,
}

/// Comparisons of `i64` scalars or tiles, yielding bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a >= b`.
    Ge,
    /// `a == b`.
    Eq,
}

/// One statement: an op and the values it defines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stmt {
    /// The values it defines, with their types (none for some, two for a token-ordered load).
    pub defs: Vec<(ValueId, Type)>,
    /// The operation.
    pub op: TileOp,
}

/// A sequence of statements.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Block {
    /// The statements, in execution order.
    pub stmts: Vec<Stmt>,
}

/// The operations of the tile IR.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TileOp {
    // ---- index scalars ----
    /// This program's index along grid axis `axis`.
    ProgramId {
        /// The grid axis.
        axis: usize,
    },
    /// The launch-time value of a symbolic dim.
    Dim {
        /// The symbol's name.
        name: String,
    },
    /// An index constant.
    Index {
        /// The constant.
        value: i64,
    },
    /// Integer arithmetic on two scalars, or on two `i64` tiles of one shape.
    IndexArith {
        /// The operation.
        op: IndexOp,
        /// The first operand.
        a: ValueId,
        /// The second operand.
        b: ValueId,
    },
    /// Integer comparison on two scalars or two `i64` tiles: a bool scalar is a `bool[]` tile.
    IndexCmp {
        /// The comparison.
        op: CmpOp,
        /// The left operand.
        a: ValueId,
        /// The right operand.
        b: ValueId,
    },
    /// Reads element `index` (flat, in elements) of tensor parameter `param` as an `i64` scalar
    /// (a run-time position such as a KV-cache offset). Shared parameters only.
    LoadScalar {
        /// The kernel parameter read (index into [`TileKernel::params`]).
        param: usize,
        /// The flat element index, an index scalar.
        index: ValueId,
    },

    // ---- views and memory ----
    /// A view of tensor parameter `param`: view element `i` is buffer element
    /// `offset + Σ i[k] * strides[k]`; its extent is `shape` (scalars).
    MakeView {
        /// The kernel parameter viewed (index into [`TileKernel::params`]).
        param: usize,
        /// The view's first element in the buffer, in elements (an index scalar).
        offset: ValueId,
        /// The view's extent per axis, in elements (index scalars).
        shape: Vec<ValueId>,
        /// The buffer distance between neighbours per axis, in elements (index scalars).
        strides: Vec<ValueId>,
    },
    /// A fresh token for ordering accesses to mutable parameters.
    MakeToken,
    /// Loads the tile at tile coordinates `coords` of `view` partitioned into tiles of the
    /// defined tile's shape: element `t` is view element `coords * tile + t`, or `padding` where
    /// that is past the view's shape. Defines the tile and, when `token` is given, then a new
    /// token (`[tile, token]`).
    Load {
        /// The view loaded from.
        view: ValueId,
        /// The tile's coordinates per view axis, in tiles (index scalars).
        coords: Vec<ValueId>,
        /// The value of elements past the view's shape.
        padding: f64,
        /// The token to order after, for a view of a mutable parameter.
        token: Option<ValueId>,
    },
    /// Loads element `t` from view element `(indices[0][t], .., indices[r-1][t])` where
    /// `mask[t]` is true, `padding` elsewhere (and where an index is past the view's shape).
    /// `indices` are `i64` tiles and `mask` a bool tile, all of the defined tile's shape.
    LoadIndexed {
        /// The view loaded from.
        view: ValueId,
        /// One `i64` tile per view axis: the element's coordinate along that axis.
        indices: Vec<ValueId>,
        /// Which elements to load (bool tile).
        mask: ValueId,
        /// The value of elements not loaded.
        padding: f64,
    },
    /// Stores `value` at tile coordinates `coords` of `view` (a view of a mutable parameter),
    /// skipping elements past the view's shape; defines the next token.
    Store {
        /// The view stored to, of a mutable parameter.
        view: ValueId,
        /// The tile's coordinates per view axis, in tiles (index scalars).
        coords: Vec<ValueId>,
        /// The tile stored.
        value: ValueId,
        /// The token to order after.
        token: ValueId,
    },

    // ---- tiles ----
    /// A tile filled with `value` (of the defined type).
    Constant {
        /// The fill value, exact in the defined dtype.
        value: f64,
    },
    /// An `i64` tile whose element `t` is `t[axis]`.
    Iota {
        /// The axis whose coordinate each element holds.
        axis: usize,
    },
    /// A tile of the defined shape filled with the scalar `x`.
    Splat {
        /// The scalar.
        x: ValueId,
    },
    /// An elementwise op of the graph on a tile, yielding the same type.
    Unary {
        /// The operation.
        op: UnaryOp,
        /// The operand.
        x: ValueId,
    },
    /// `e^(factor · (x − shift))` of an `f32` tile `x` to within a few ulp, not correctly
    /// rounded; `shift` is an `f32` tile of `x`'s rank whose dims are `x`'s or 1 (repeated
    /// along those). The hardware's approximation of `2^y` on one fused multiply-add
    /// `x · c − shift · c` with `c = factor · log2 e`, several times cheaper than `exp` and a
    /// subtraction: lowering uses it only where the result is rounded to a 16-bit type before
    /// anything else reads it, which dwarfs the difference. `factor` is finite and positive.
    ApproxExp {
        /// The `f32` operand.
        x: ValueId,
        /// Subtracted from `x` before scaling.
        shift: ValueId,
        /// Multiplies `x - shift`.
        factor: f64,
    },
    /// Both operands have the defined tile's shape (broadcasts are explicit).
    Binary {
        /// The operation.
        op: BinaryOp,
        /// The first operand.
        a: ValueId,
        /// The second operand.
        b: ValueId,
    },
    /// `a` where the bool tile `cond` is true, else `b`; all three of the defined shape.
    Select {
        /// The condition.
        cond: ValueId,
        /// Taken where `cond` is true.
        a: ValueId,
        /// Taken elsewhere.
        b: ValueId,
    },
    /// Converts to the defined tile's dtype (round to nearest for floats; toward zero and
    /// wrapping for integers; `x != 0` for bool).
    Cast {
        /// The operand.
        x: ValueId,
    },
    /// Repeats the size-1 dims of `x` to the defined shape (same rank).
    Broadcast {
        /// The operand.
        x: ValueId,
    },
    /// Same elements in row-major order, another shape.
    Reshape {
        /// The operand.
        x: ValueId,
    },
    /// Result dim `i` is dim `perm[i]` of `x`.
    Permute {
        /// The operand.
        x: ValueId,
        /// A permutation of `x`'s axes.
        perm: Vec<usize>,
    },
    /// Reduces `x` along `axis`, keeping it as a dim of size 1. Sum/Prod/Max/Min keep the dtype;
    /// ArgMax/ArgMin yield `i64` positions along the axis (first of equals; NaN wins).
    Reduce {
        /// The reduction (`Mean` of float tiles only).
        op: ReduceOp,
        /// The operand.
        x: ValueId,
        /// The axis reduced.
        axis: usize,
    },
    /// `acc + a @ b` on the last two dims: `a: [.., m, k]`, `b: [.., k, n]`, `acc: [.., m, n]`
    /// (leading dims equal). `acc` is `f32` for f16, bf16 and f32 operands, `f64` for f64 and
    /// `i64` (wrapping) for integer operands; products and sums are in `acc`'s dtype.
    Mma {
        /// The left factor, `[.., m, k]`.
        a: ValueId,
        /// The right factor, `[.., k, n]`.
        b: ValueId,
        /// The accumulator added to, `[.., m, n]`.
        acc: ValueId,
    },
    /// `for i in (start..end).step_by(step)`, threading `init` through `carried` to `yields`;
    /// defines the final carried values.
    For {
        /// The first index (an index scalar).
        start: ValueId,
        /// The bound, exclusive (an index scalar).
        end: ValueId,
        /// The increment, positive (an index scalar).
        step: ValueId,
        /// The loop index inside `body`.
        var: ValueId,
        /// The carried values' initial values.
        init: Vec<ValueId>,
        /// The carried values as `body` sees them, with their types.
        carried: Vec<(ValueId, Type)>,
        /// The loop body.
        body: Block,
        /// The values `body` passes to the next iteration, one per carried value.
        yields: Vec<ValueId>,
    },
}

/// Where a write region starts along its axis.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SliceStart {
    /// A start known when the kernel is built, in elements.
    Static(u64),
    /// Element 0 of this tensor parameter (an integer scalar read at run time).
    Param(usize),
}

/// What a kernel writes of a mutable parameter: all of it, or a slice along one axis (all other
/// axes whole). The kernel must write each element of the region exactly once and nothing else.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Region {
    /// Every element of the parameter.
    Whole,
    /// `len` elements along `axis` from `start`, the other axes whole.
    Slice {
        /// The axis sliced.
        axis: usize,
        /// The first element along it.
        start: SliceStart,
        /// The number of elements along it (static or symbolic).
        len: tir_graph::Dim,
    },
    /// Some elements of the parameter, each at most once, at places only the run knows; the
    /// others keep their values. Never proven: only an unsafe user's kernel that updates a state
    /// in place claims it (the reference backend's checking mode checks it at run time).
    Scattered,
}

/// A region of a mutable parameter the kernel writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WriteRegion {
    /// The kernel parameter written (index into [`TileKernel::params`]).
    pub param: usize,
    /// What of it is written.
    pub region: Region,
}

/// A library routine that computes exactly what a kernel computes, for a backend that has one
/// (the kernel's tile IR stays the definition and the fallback).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LibraryCall {
    /// `c = a @ b` of row-major contiguous parameters `a: [..batch, m, k]`, `b: [..batch, k, n]`
    /// (or `[k, n]`, shared by every batch when `b_batched` is false) and `c: [..batch, m, n]`,
    /// accumulating in `f32` for 16- and 32-bit floats (`f64` for `f64`), rounded once. With
    /// `b_transposed`, parameter `b` holds `bᵀ` (`[..batch, n, k]`, as a PyTorch `Linear`
    /// stores its weight) and the product reads it transposed. With `residual`, a parameter of
    /// `c`'s type and layout, `c = a @ b + residual`, added in the accumulator before the one
    /// rounding (the kernel's body rounds the product first; they may differ by one rounding).
    MatMul {
        /// The parameter of `a`.
        a: usize,
        /// The parameter of `b` (or of `bᵀ`).
        b: usize,
        /// The parameter written.
        c: usize,
        /// The parameter added to the product, if any.
        residual: Option<usize>,
        /// The dtype of `a`, `b` and `c`.
        dtype: DType,
        /// The batch dims of `a` and `c`.
        batch: Vec<tir_graph::Dim>,
        /// Rows of `a` and `c`.
        m: tir_graph::Dim,
        /// The contracted dim.
        k: tir_graph::Dim,
        /// Columns of `b` and `c`.
        n: tir_graph::Dim,
        /// Whether `b` has the batch dims (otherwise one `b` serves every batch).
        b_batched: bool,
        /// Whether parameter `b` holds `bᵀ`.
        b_transposed: bool,
    },
    /// Fused attention ([`LibraryAttention`]).
    Attention(Box<LibraryAttention>),
    /// Not an alternative to `body` but the kernel itself: the graph's collective `op`
    /// (`all_reduce_*`, `all_gather`, `reduce_scatter`) over the devices of a mesh, each device
    /// reading its parameter `input` whole and writing its parameter `output` whole. Its grid
    /// and body are empty ([`TileKernel::collective`]); a backend runs it with its devices'
    /// collective engine, and a backend without a mesh refuses the program.
    Collective {
        /// The graph's collective op.
        op: tir_graph::Op,
        /// The parameter each device reads whole.
        input: usize,
        /// The parameter each device writes whole.
        output: usize,
    },
    /// A convolution with its bias and activation ([`LibraryConv`]).
    Conv(Box<LibraryConv>),
}

/// The activation a library convolution applies after its bias: each is the graph's unary op
/// of the same name, computed on the `f32` sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConvActivation {
    /// `max(x, 0)`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `x · Φ(x)`, the erf form.
    GeluErf,
    /// The tanh approximation of gelu.
    GeluTanh,
}

/// `y = act(conv(x, w) + bias)` of 16-bit floats, the convolution accumulated in `f32` and the
/// bias and activation applied to the `f32` sum before the one rounding to `y`'s dtype (the
/// kernel's body rounds the convolution first; the two may differ by one rounding). `x`, `w`
/// and `y` are strided views of their parameters, `[N, C, S..]`, `[O, C / groups, K..]` and
/// `[N, O, Q..]`, with strides in elements as the buffers hold them (every dim but the batch is
/// static, so every stride is); `bias`, when there is one, holds `O` contiguous elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LibraryConv {
    /// The parameter of the input.
    pub x: usize,
    /// The parameter of the weights.
    pub w: usize,
    /// The parameter of the bias, if any.
    pub bias: Option<usize>,
    /// The parameter written (whole).
    pub y: usize,
    /// The element type of every operand.
    pub dtype: DType,
    /// The batch dim `N` (static or symbolic).
    pub batch: tir_graph::Dim,
    /// Input channels `C`, output channels `O` and groups.
    pub channels: u64,
    /// Output channels.
    pub out_channels: u64,
    /// Channel groups (dividing `C` and `O`).
    pub groups: u64,
    /// Spatial extents of the input, of the kernel and of the output.
    pub input: Vec<u64>,
    /// Spatial extents of the kernel.
    pub kernel: Vec<u64>,
    /// Spatial extents of the output.
    pub output: Vec<u64>,
    /// Step per spatial axis.
    pub strides: Vec<u64>,
    /// Tap spacing per spatial axis.
    pub dilations: Vec<u64>,
    /// Zero padding `(before, after)` per spatial axis.
    pub pads: Vec<(u64, u64)>,
    /// Strides in elements of `x`, `w` and `y`, every axis.
    pub layout: [Vec<u64>; 3],
    /// Applied after the bias, if any.
    pub activation: Option<ConvActivation>,
}

impl LibraryConv {
    /// Whether the batch dim is static: the call has one shape.
    pub fn is_static(&self) -> bool {
        self.batch.as_static().is_some()
    }
}

/// Fused attention `o = softmax(scale · q @ kᵀ) @ v` of 16-bit floats, under the causal mask
/// (key `j` visible to query `i` when `j <= i`) when `causal`, with the scores and the softmax
/// in `f32` and the probabilities rounded to `v`'s dtype for the second product, as the
/// kernel's body computes them (the two may differ by roundings). Each operand is a strided
/// view of a parameter: `q: [b, h, s_q, d]`, `k: [b, h, s_kv, d]`, `v: [b, h, s_kv, d_v]`,
/// `o: [b, h, s_q, d_v]`, with its head dim contiguous.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LibraryAttention {
    /// The queries, `[b, h, s_q, d]`.
    pub q: AttentionOperand,
    /// The keys, `[b, h, s_kv, d]`.
    pub k: AttentionOperand,
    /// The values, `[b, h, s_kv, d_v]`.
    pub v: AttentionOperand,
    /// The output, `[b, h, s_q, d_v]`.
    pub o: AttentionOperand,
    /// The element type of `q`, `k`, `v` and `o` (a 16-bit float).
    pub dtype: DType,
    /// `[b, h, s_q, s_kv]`.
    pub dims: [tir_graph::Dim; 4],
    /// The head dim of queries and keys.
    pub d: u64,
    /// The head dim of values and the output.
    pub d_v: u64,
    /// The factor applied to the scores before the softmax.
    pub scale: ExactF64,
    /// Whether the causal mask applies.
    pub causal: bool,
}

impl LibraryAttention {
    /// Whether no extent or stride depends on a symbolic dim: the call has one shape.
    pub fn is_static(&self) -> bool {
        let strides = [&self.q, &self.k, &self.v, &self.o]
            .into_iter()
            .flat_map(|op| op.strides.iter())
            .flat_map(|p| p.terms.iter())
            .flat_map(|(_, dims)| dims.iter());
        self.dims
            .iter()
            .chain(strides)
            .all(|d| d.as_static().is_some())
    }
}

/// A parameter of a library attention read (or written) as a 4-D strided view
/// `[b, h, s, d]`: element `(i, j, k, l)` is element `Σ index · stride` of the parameter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionOperand {
    /// The kernel parameter viewed (index into [`TileKernel::params`]).
    pub param: usize,
    /// In elements; each a single-term polynomial in the dims (a count times a product of
    /// dims), or no term (0) for a batch dim the kernel's tensors lack; the last 1.
    pub strides: [DimPolynomial; 4],
}

/// One kernel: a grid of programs running `body`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TileKernel {
    /// A readable name (`k3_matmul`).
    pub name: String,
    /// The tensors it reads and writes.
    pub params: Vec<TensorParam>,
    /// What it writes (each mutable parameter once).
    pub writes: Vec<WriteRegion>,
    /// Programs along each grid axis: index scalars computed by `grid_body` from the dims.
    pub grid: Vec<ValueId>,
    /// Computes the grid extents (with [`TileOp::Dim`], [`TileOp::Index`] and scalar
    /// [`TileOp::IndexArith`] only).
    pub grid_body: Block,
    /// The tile program each grid point runs.
    pub body: Block,
    /// A library routine a backend may call instead of running `body`.
    pub library: Option<LibraryCall>,
    /// The floating-point operations of its products (matmuls, convolutions, attention's two
    /// products), for reports of FLOP/s; zero terms for a kernel without products.
    pub flops: DimPolynomial,
}

/// A count that depends on the dims: the sum over its terms of `factor × ∏ dims`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DimPolynomial {
    /// The terms: a factor and the dims it multiplies.
    pub terms: Vec<(u64, Vec<tir_graph::Dim>)>,
}

impl DimPolynomial {
    /// Its value for `dims` (as `f64`: a count for a report, where rounding is harmless); an
    /// error names an unbound dim.
    pub fn eval(&self, dims: &BTreeMap<String, u64>) -> Result<f64, String> {
        let mut total = 0.0;
        for (factor, term) in &self.terms {
            let mut product = *factor as f64;
            for d in term {
                product *= d.value(dims).map_err(|e| e.to_string())? as f64;
            }
            total += product;
        }
        Ok(total)
    }

    /// Its exact value for `dims`; an error names an unbound dim or an overflow.
    pub fn value(&self, dims: &BTreeMap<String, u64>) -> Result<u64, String> {
        let overflow = || "a count overflows u64".to_string();
        let mut total = 0u64;
        for (factor, term) in &self.terms {
            let mut product = *factor;
            for d in term {
                let n = d.value(dims).map_err(|e| e.to_string())?;
                product = product.checked_mul(n).ok_or_else(overflow)?;
            }
            total = total.checked_add(product).ok_or_else(overflow)?;
        }
        Ok(total)
    }
}

impl TileKernel {
    /// The collective this kernel is, if it is one: its op and its input and output
    /// parameters ([`LibraryCall::Collective`]).
    pub fn collective(&self) -> Option<(&tir_graph::Op, usize, usize)> {
        match &self.library {
            Some(LibraryCall::Collective { op, input, output }) => Some((op, *input, *output)),
            _ => None,
        }
    }

    /// Every statement of the kernel, nested blocks included, grid first.
    pub fn walk(&self, f: &mut impl FnMut(&Stmt)) {
        walk_block(&self.grid_body, f);
        walk_block(&self.body, f);
    }

    /// The grid's extents for `dims` (`grid_body` is index arithmetic on dims); an error names
    /// an unbound dim or the arithmetic that overflows.
    pub fn grid_extents(&self, dims: &BTreeMap<String, u64>) -> Result<Vec<i64>, String> {
        let mut values: BTreeMap<u32, i64> = BTreeMap::new();
        for stmt in &self.grid_body.stmts {
            let get = |v: &ValueId| {
                values
                    .get(&v.0)
                    .copied()
                    .ok_or_else(|| format!("grid value {v} is undefined"))
            };
            let value = match &stmt.op {
                TileOp::Dim { name } => dims
                    .get(name)
                    .map(|&d| d as i64)
                    .ok_or_else(|| format!("symbolic dim `{name}` is not bound"))?,
                TileOp::Index { value } => *value,
                TileOp::IndexArith { op, a, b } => {
                    let (a, b) = (get(a)?, get(b)?);
                    let r = match op {
                        IndexOp::Add => a.checked_add(b),
                        IndexOp::Sub => a.checked_sub(b),
                        IndexOp::Mul => a.checked_mul(b),
                        IndexOp::Div => a.checked_div(b),
                        IndexOp::Rem => a.checked_rem(b),
                        IndexOp::Min => Some(a.min(b)),
                        IndexOp::Max => Some(a.max(b)),
                    };
                    r.ok_or_else(|| format!("grid arithmetic {a} {op:?} {b} overflows"))?
                }
                other => return Err(format!("unexpected {other:?} in the grid")),
            };
            if let Some((id, _)) = stmt.defs.first() {
                values.insert(id.0, value);
            }
        }
        self.grid
            .iter()
            .map(|v| {
                values
                    .get(&v.0)
                    .copied()
                    .ok_or_else(|| format!("grid extent {v} is undefined"))
            })
            .collect()
    }
}

fn walk_block(block: &Block, f: &mut impl FnMut(&Stmt)) {
    for stmt in &block.stmts {
        f(stmt);
        if let TileOp::For { body, .. } = &stmt.op {
            walk_block(body, f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_evaluate_from_dims() {
        let stmt = |id: u32, op: TileOp| Stmt {
            defs: vec![(ValueId(id), Type::Index)],
            op,
        };
        let kernel = TileKernel {
            name: "k".into(),
            params: vec![],
            writes: vec![],
            grid: vec![ValueId(2), ValueId(1)],
            grid_body: Block {
                stmts: vec![
                    stmt(0, TileOp::Dim { name: "n".into() }),
                    stmt(1, TileOp::Index { value: 4 }),
                    stmt(
                        2,
                        TileOp::IndexArith {
                            op: IndexOp::Div,
                            a: ValueId(0),
                            b: ValueId(1),
                        },
                    ),
                ],
            },
            body: Block::default(),
            library: None,
            flops: DimPolynomial::default(),
        };
        let dims = BTreeMap::from([("n".to_string(), 10)]);
        assert_eq!(kernel.grid_extents(&dims).unwrap(), vec![2, 4]);
        assert!(kernel
            .grid_extents(&BTreeMap::new())
            .unwrap_err()
            .contains("`n`"));
    }
}
