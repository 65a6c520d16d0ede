//! The attention kernel: flash attention.
//!
//! Takes a [`tir_opt::KernelKind::Attention`] kernel (an attention pattern
//! `softmax(f(q @ kt)) @ v`, its operands' producers as index maps, and a chain of layout ops
//! up to the root) and emits one tile program per block of `BM` queries of one batch and head:
//! its output tile `[1.., BM, Dv]`. The program loads its `[BM, D]` query tile once, then walks
//! the keys in blocks of `BN`: a step computes the `[BM, BN]` scores on tensor cores, applies
//! the score epilogue `f` to them (scale, mask: the graph's own nodes, with the mask read per
//! tile), and folds them into an online softmax: a running row maximum `m`, a running sum `l`
//! of `exp(x - m)` and the accumulator `acc` of `exp(x - m) @ v`, both rescaled by
//! `exp(m_old - m_new)` when the maximum grows. After the loop `acc / l` is the output tile,
//! stored once. The scores are never written, so memory grows with the sequence, not with its
//! square. The softmax runs in f32 (f64 for f64) and the probabilities are rounded to `v`'s
//! dtype for the second product, as flash attention does.
//!
//! Keys past the end of the sequence are masked to `-inf` (they weigh 0). A row whose keys are
//! all masked keeps `m = -inf`, which is shifted by 0 instead, so its `l` is 0 and its output
//! `0 / 0 = NaN`, as the graph's softmax of a row of `-inf` gives. When the mask is causal
//! (the graph's `select(col <= row + δ, x, -inf)` on two position ranges, as the `attention`
//! composite builds it), each program stops at the last key block its queries can see:
//! a block it skips would only add zeros. Where the query block is shorter than the key
//! block, the keys past the last whole key block go in blocks of half the keys, for the same
//! reason.
//!
//! Keys that are a concat (a KV cache and the new token's key, and the mask over both) would
//! be a gather with a select per element; instead the key loop is split at the parts'
//! boundaries, and inside a loop whose blocks lie in one part of every such concat, each
//! concat reads that part alone through an affine index (a view load), see [`super::emit::PinnedKeys`].
//! A part of one key (the new token's) is one step without a loop, its products elementwise.
//!
//! A non-causal attention with too few programs to fill the target (a decode step: one query
//! row per head) splits its key loop over several programs (flash decoding,
//! [`AttentionTiling::splits`]): each stores its running maximum, sum and unnormalized output
//! for its share of the key blocks, and a second kernel rescales the shares to their common
//! maximum, adds them and divides once.
//!
//! Guarantees: every output element is written once, by the program that owns its tile, as
//! for any tile-per-program kernel (the same legality certificate).
//!
//! This module holds the tiling and the program around the key loop; its submodules hold the
//! key loop (`keys`), flash decoding (`split`) and the library route (`library`).

mod keys;
mod library;
mod split;

use super::builder::{ceil_pow2, SpaceId};
use super::emit::KernelLowering;
use super::kernels::{accumulator, on_vector_units, splits_to_fill, tile_for};
use super::LowerError;
use crate::target::{TileShapes, SHORT_ATTENTION_KEYS};
use crate::tile::{TileOp, Type, ValueId};
use std::collections::BTreeSet;
use tir_graph::{BinaryOp, ConstData, DType, Dim, Graph, NodeId, Op, ReduceOp, UnaryOp};
use tir_opt::fusion::kinds::{attention_pattern, store_chain, AttentionPattern};

type Res<T> = Result<T, LowerError>;

/// What a key loop knows of the mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mask {
    /// The score epilogue as the graph has it.
    Graph,
    /// Causal, and every key of the block is visible to every query of the program.
    Visible,
    /// Causal with offset `δ`: key `j` is visible to query `i` when `j <= i + δ`.
    Causal(i64),
}

/// What every step of the key loops shares.
struct KeyWalk<'p> {
    pattern: &'p AttentionPattern,
    out_space: SpaceId,
    q: Operand,
    /// The key block and the head dim's tile.
    blocks: (u64, u64),
    /// [`AttentionTiling::scale`].
    scale: Option<f64>,
    /// Every block of the walk lies before the end of the keys: none needs the end masked.
    whole: bool,
}

impl KeyWalk<'_> {
    /// This walk over blocks known to lie before the end of the keys.
    fn of_whole_blocks(&self) -> Self {
        KeyWalk {
            q: self.q.clone(),
            whole: true,
            ..*self
        }
    }
}

/// A tile operand of a product: its value, dtype and shape.
#[derive(Clone)]
struct Operand {
    value: ValueId,
    dtype: DType,
    shape: Vec<u64>,
}

/// The running state of the online softmax, carried through the key loop.
struct Running {
    max: ValueId,
    sum: ValueId,
    acc: ValueId,
}

/// How an attention kernel is tiled: its pattern, output tile `[1.., BM, Dv]`, key block `BN`
/// and head tile, and whether its mask is causal (with offset `δ`).
pub struct AttentionTiling {
    /// The graph pattern the kernel computes.
    pub pattern: AttentionPattern,
    /// The output tile `[1.., BM, Dv]`, in elements.
    pub tile: Vec<u64>,
    /// `BN`: keys per block of the key loop.
    pub bn: u64,
    /// The head dim's tile, in elements.
    pub d_tile: u64,
    /// The causal mask's offset `δ` (key `j` visible to query `i` when `j <= i + δ`), or `None`
    /// without one.
    pub causal: Option<i64>,
    /// `c` when the softmax reads its scores as `c · (q @ kt)` (under the causal mask when
    /// `causal`) and its probabilities are rounded to 16 bits: the key loop then keeps the
    /// scores in `f32` unrounded and folds `c` into one approximate `exp` per score
    /// ([`TileOp::ApproxExp`]), its running maximum counting unscaled scores.
    pub scale: Option<f64>,
}

/// The fewest keys of a causal walk's diagonal blocks when they take half a key block.
const MIN_DIAGONAL_KEYS: u64 = 16;

/// The fewest key blocks each program of a split key loop takes.
pub const MIN_SPLIT_BLOCKS: u64 = 2;

impl AttentionTiling {
    /// The tiling of the attention kernel of `members` rooted at `root`.
    pub fn new(
        g: &Graph,
        members: &BTreeSet<NodeId>,
        root: NodeId,
        tiles: &TileShapes,
    ) -> Option<AttentionTiling> {
        let chain = store_chain(g, members, root);
        let top = chain.last().map_or(root, |&c| g.operands(c)[0]);
        let pattern = attention_pattern(g, top)?;
        let out_shape = &g.ty(pattern.output).shape;
        let rank = out_shape.rank();
        let q = g.operands(pattern.scores)[0];
        let head = &g.ty(q).shape.dims()[rank - 1];
        let keys = &g.ty(pattern.scores).shape.dims()[rank - 1];
        let mut tile = vec![1u64; rank];
        let (mut bm, mut bn) = (query_block(keys, tiles), tiles.attention_n);
        if on_vector_units(g.ty(pattern.output).dtype) {
            (bm, bn) = (bm.min(tiles.vector_matmul_m), bn.min(tiles.vector_matmul_n));
        }
        tile[rank - 2] = tile_for(&out_shape.dims()[rank - 2], bm);
        tile[rank - 1] = pow2_of(&out_shape.dims()[rank - 1]);
        let causal = causal_offset(g, &pattern);
        let v = g.operands(pattern.output)[1];
        let scale = if approximates_exp(g.ty(v).dtype) {
            score_scale(g, &pattern, causal.is_some())
        } else {
            None
        };
        Some(AttentionTiling {
            bn: tile_for(keys, bn),
            d_tile: pow2_of(head),
            causal,
            scale,
            tile,
            pattern,
        })
    }

    /// Over how many programs a non-causal attention splits its key loop (flash decoding,
    /// [`splits_to_fill`], each program keeping [`MIN_SPLIT_BLOCKS`] key blocks). Over symbolic
    /// dims, where the programs are counted only at run time, in two when the static dims alone
    /// do not fill the target: one kernel serves every binding, and a split costs a large one
    /// little (the partial outputs are written and read once) while it doubles the programs of a
    /// small one (an encoder at batch 32 of 128 tokens: 0.83x of the same model at fixed shapes
    /// without it). A share with no key block is empty, which the combining kernel allows.
    pub fn splits(&self, g: &Graph, tiles: &TileShapes) -> Option<u64> {
        if self.causal.is_some() {
            return None;
        }
        let rank = self.tile.len();
        let dims = g.ty(self.pattern.output).shape.dims();
        let keys = &g.ty(self.pattern.scores).shape.dims()[rank - 1];
        let all_static = dims.iter().all(|d| d.as_static().is_some());
        if let (Some(keys), true) = (keys.as_static(), all_static) {
            let blocks = keys.div_ceil(self.bn);
            return splits_to_fill(dims, &self.tile, blocks, MIN_SPLIT_BLOCKS, tiles);
        }
        let static_programs: u64 = dims
            .iter()
            .zip(&self.tile)
            .filter_map(|(d, &t)| d.as_static().map(|n| n.div_ceil(t)))
            .product();
        let blocks = keys.as_static().map(|k| k.div_ceil(self.bn));
        let room = blocks.is_none_or(|b| b / 2 >= MIN_SPLIT_BLOCKS);
        (2 * static_programs <= tiles.split_programs && room).then_some(2)
    }
}

/// The buffers of a split attention's partial results: the running maximum and sum of each
/// query row (`[S, .., s_q, 1]`) and its unnormalized output (`[S, .., s_q, d_v]`).
pub struct AttentionPartials {
    /// The buffer of the running maxima.
    pub max: usize,
    /// The buffer of the running sums.
    pub sum: usize,
    /// The buffer of the unnormalized outputs.
    pub acc: usize,
}

impl KernelLowering<'_> {
    fn attention_tiling(&self, root: NodeId, tiles: &TileShapes) -> Res<AttentionTiling> {
        AttentionTiling::new(self.g, &self.members, root, tiles)
            .ok_or_else(|| self.unsupported("an attention kernel without its pattern".into()))
    }

    /// An attention pattern with its operand maps and store chain (see the module doc).
    pub fn lower_attention(&mut self, root: NodeId, out: usize, tiles: &TileShapes) -> Res<()> {
        let t = self.attention_tiling(root, tiles)?;
        let out_shape = self.g.ty(t.pattern.output).shape.clone();
        let out_space = self.grid_space(out_shape.dims(), &t.tile);
        let done = self.attention_walk(&t, out_space, None)?;
        let normalized = self.normalized(&t, done.acc, done.sum);
        self.store_attention(&t, normalized, out_space, (root, out))?;
        self.b.library = self.library_attention(&t, root, out);
        Ok(())
    }

    /// `acc / sum`, `sum` a tile of the rows of `acc`. Where the output is 16-bit (the
    /// probabilities approximate `exp`), each row's reciprocal is taken once and multiplied
    /// in: a correctly rounded f32 division per element costs a reciprocal, five `fma` and a
    /// branch to a slow path, and the product's extra ulp vanishes in the rounding to 16 bits.
    /// A row of zero sum still gives NaN (`0 · inf`), as `0 / 0` does.
    fn normalized(&mut self, t: &AttentionTiling, acc: ValueId, sum: ValueId) -> ValueId {
        let dtype = self.attention_dtype(t);
        let acc_ty = Type::tile(dtype, &t.tile);
        if !approximates_exp(self.g.ty(t.pattern.output).dtype) {
            let sum = self.b.emit(TileOp::Broadcast { x: sum }, acc_ty.clone());
            return self.binary(BinaryOp::Div, acc, sum, &acc_ty);
        }
        let mut row = t.tile.clone();
        row[t.tile.len() - 1] = 1;
        let row_ty = Type::tile(dtype, &row);
        let one = self.b.constant(1.0, dtype, &row);
        let reciprocal = self.binary(BinaryOp::Div, one, sum, &row_ty);
        let reciprocal = self
            .b
            .emit(TileOp::Broadcast { x: reciprocal }, acc_ty.clone());
        self.binary(BinaryOp::Mul, acc, reciprocal, &acc_ty)
    }

    /// The softmax's dtype: f32 for 16-bit outputs.
    fn attention_dtype(&self, t: &AttentionTiling) -> DType {
        accumulator(self.g.ty(t.pattern.output).dtype)
    }

    /// The output tile `normalized` (in the softmax's dtype) rounded to the output's dtype as
    /// the value of the pattern's output, stored through the chain to `out`.
    fn store_attention(
        &mut self,
        t: &AttentionTiling,
        normalized: ValueId,
        out_space: SpaceId,
        (root, out): (NodeId, usize),
    ) -> Res<()> {
        let output_ty = self.g.ty(t.pattern.output).clone();
        let output = self.b.emit(
            TileOp::Cast { x: normalized },
            Type::tile(output_ty.dtype, &t.tile),
        );
        let depth = self.b.depth();
        self.memo.insert(
            (
                t.pattern.output,
                Self::canonical(output_ty.rank()),
                out_space,
            ),
            (output, depth),
        );
        self.store_through_chain(root, out, out_space)?;
        Ok(())
    }

    /// `acc + a @ b` in `dtype`, for `a` and `b` of shapes `[.., m, k]` and `[.., k, n]`: on
    /// tensor cores, or elementwise when a block of one key makes an operand a vector:
    /// `k = 1` (an outer product), or `n = 1` (each row of `a` times `b` as a row, summed).
    fn product(&mut self, a: &Operand, b: &Operand, acc: ValueId, dtype: DType) -> ValueId {
        let rank = b.shape.len();
        let (k, n) = (b.shape[rank - 2], b.shape[rank - 1]);
        let mut out = a.shape.clone();
        out[rank - 1] = n;
        let out_ty = Type::tile(dtype, &out);
        if k != 1 && n != 1 {
            let op = TileOp::Mma {
                a: a.value,
                b: b.value,
                acc,
            };
            return self.b.emit(op, out_ty);
        }
        // Both operands widened to `dtype` and broadcast over the terms; `b` as a row when it
        // is a column (a reshape, since one of its dims is 1).
        let mut b_row = b.shape.clone();
        if k != 1 {
            b_row.swap(rank - 2, rank - 1);
        }
        let mut terms_shape = out.clone();
        terms_shape[rank - 1] = if k == 1 { n } else { k };
        let (a_wide, b_wide) = (
            self.widened(a, &a.shape, dtype, &terms_shape),
            self.widened(b, &b_row, dtype, &terms_shape),
        );
        let terms_ty = Type::tile(dtype, &terms_shape);
        let terms = self.binary(BinaryOp::Mul, a_wide, b_wide, &terms_ty);
        let terms = if k == 1 {
            terms
        } else {
            let sum = TileOp::Reduce {
                op: ReduceOp::Sum,
                x: terms,
                axis: rank - 1,
            };
            self.b.emit(sum, out_ty.clone())
        };
        self.binary(BinaryOp::Add, acc, terms, &out_ty)
    }

    /// `x` in `dtype`, reshaped to `shape` and broadcast to `wide`.
    fn widened(&mut self, x: &Operand, shape: &[u64], dtype: DType, wide: &[u64]) -> ValueId {
        let mut v = x.value;
        if x.dtype != dtype {
            v = self
                .b
                .emit(TileOp::Cast { x: v }, Type::tile(dtype, &x.shape));
        }
        if shape != x.shape.as_slice() {
            v = self
                .b
                .emit(TileOp::Reshape { x: v }, Type::tile(dtype, shape));
        }
        if shape != wide {
            v = self
                .b
                .emit(TileOp::Broadcast { x: v }, Type::tile(dtype, wide));
        }
        v
    }

    /// The shift of rows with maximum `max`: a row with nothing seen yet keeps -inf; it is
    /// shifted by 0 so that exp gives 0.
    fn finite_shift(&mut self, max: ValueId, row_shape: &[u64], dtype: DType) -> ValueId {
        let minus_inf = self.b.constant(f64::NEG_INFINITY, dtype, row_shape);
        let unseen = self.b.emit(
            TileOp::Binary {
                op: BinaryOp::Eq,
                a: max,
                b: minus_inf,
            },
            Type::tile(DType::Bool, row_shape),
        );
        let zero = self.b.constant(0.0, dtype, row_shape);
        self.b.emit(
            TileOp::Select {
                cond: unseen,
                a: zero,
                b: max,
            },
            Type::tile(dtype, row_shape),
        )
    }

    /// `e^(factor · (x − shift))` of an f32 tile `x` of the online softmax, `shift` a tile of
    /// its rows. Where the probabilities are rounded to a 16-bit `v_dtype` for the second
    /// product (and the output is 16-bit), the hardware's approximation is used: its few f32
    /// ulp vanish in that rounding, and it costs a fraction of a correctly rounded `exp` (the
    /// causal b4 h32 s2048 d128 workload 0.58 → 0.53 ms). Otherwise `factor` is 1.
    fn shifted_exp(
        &mut self,
        (x, shift, factor): (ValueId, ValueId, f64),
        ty: &Type,
        v_dtype: DType,
    ) -> ValueId {
        if approximates_exp(v_dtype) {
            return self
                .b
                .emit(TileOp::ApproxExp { x, shift, factor }, ty.clone());
        }
        let shift = self.b.emit(TileOp::Broadcast { x: shift }, ty.clone());
        let centered = self.binary(BinaryOp::Sub, x, shift, ty);
        self.b.emit(
            TileOp::Unary {
                op: UnaryOp::Exp,
                x: centered,
            },
            ty.clone(),
        )
    }
}

/// The query block of an attention over `keys`: [`TileShapes::attention_short_m`] for a short
/// walk (at most [`SHORT_ATTENTION_KEYS`] keys), else [`TileShapes::attention_m`].
fn query_block(keys: &Dim, tiles: &TileShapes) -> u64 {
    let short = (1..tiles.attention_m).contains(&tiles.attention_short_m)
        && keys.as_static().is_some_and(|k| k <= SHORT_ATTENTION_KEYS);
    if short {
        tiles.attention_short_m
    } else {
        tiles.attention_m
    }
}

/// The head dim of `q` (static in every attention pattern).
fn head_dim(g: &Graph, p: &AttentionPattern) -> Option<u64> {
    let q = g.operands(p.scores)[0];
    g.ty(q).shape.dims().last()?.as_static()
}

/// Whether the online softmax approximates `exp`: where its probabilities are rounded to the
/// 16-bit dtype of `v`.
fn approximates_exp(v_dtype: DType) -> bool {
    matches!(v_dtype, DType::F16 | DType::BF16)
}

/// `c` when the softmax's input is `scores · c` or `scores / c` for a constant `c` (one value,
/// so that `c > 0` keeps the row maximum where it is), or `scores` itself (`c = 1`), under the
/// causal select when `causal` ([`causal_offset`] found it).
fn score_scale(g: &Graph, pattern: &AttentionPattern, causal: bool) -> Option<f64> {
    let scaled = if causal {
        g.operands(pattern.logits)[1]
    } else {
        pattern.logits
    };
    if scaled == pattern.scores {
        return Some(1.0);
    }
    let Op::Binary(op) = g.node(scaled).op else {
        return None;
    };
    let [a, b] = <[NodeId; 2]>::try_from(g.operands(scaled)).ok()?;
    let scores = pattern.scores;
    let c = match op {
        BinaryOp::Mul if a == scores => float_value(g, b)?,
        BinaryOp::Mul if b == scores => float_value(g, a)?,
        BinaryOp::Div if a == scores => 1.0 / float_value(g, b)?,
        _ => return None,
    };
    (c.is_finite() && c > 0.0).then_some(c)
}

/// The value of a float constant whose elements are all one value.
fn float_value(g: &Graph, node: NodeId) -> Option<f64> {
    match &g.node(node).op {
        Op::Constant {
            data: ConstData::Float(values),
        } => uniform(values).map(|v| v.0),
        _ => None,
    }
}

/// The value every element of `values` has, if they all have one.
fn uniform<T: Copy + PartialEq>(values: &[T]) -> Option<T> {
    let first = *values.first()?;
    values.iter().all(|&v| v == first).then_some(first)
}

/// The power-of-two tile covering a static head dim (attention patterns have static ones).
fn pow2_of(d: &Dim) -> u64 {
    ceil_pow2(d.as_static().unwrap_or(1))
}

/// `δ` when the pattern's last epilogue node is `select(col <= row + δ, x, -inf)`, with `col`
/// and `row` constant ranges of consecutive positions along the keys' and the queries' axes
/// (any of `<=`, `<`, `>=`, `>` with the operands on the matching sides).
fn causal_offset(g: &Graph, pattern: &AttentionPattern) -> Option<i64> {
    if g.node(pattern.logits).op != Op::Select {
        return None;
    }
    let [cond, _, otherwise] = <[NodeId; 3]>::try_from(g.operands(pattern.logits)).ok()?;
    let Op::Constant {
        data: ConstData::Float(fill),
    } = &g.node(otherwise).op
    else {
        return None;
    };
    if !fill.iter().all(|v| v.0 == f64::NEG_INFINITY) {
        return None;
    }
    let Op::Binary(op) = g.node(cond).op else {
        return None;
    };
    let [a, b] = <[NodeId; 2]>::try_from(g.operands(cond)).ok()?;
    let (pa, pb) = (positions(g, a)?, positions(g, b)?);
    // (axis counted from the last, first position) of each side: 0 is a key, 1 a query.
    let (col, row, strict) = match (op, pa.0, pb.0) {
        (BinaryOp::Le, 0, 1) => (pa.1, pb.1, false),
        (BinaryOp::Lt, 0, 1) => (pa.1, pb.1, true),
        (BinaryOp::Ge, 1, 0) => (pb.1, pa.1, false),
        (BinaryOp::Gt, 1, 0) => (pb.1, pa.1, true),
        _ => return None,
    };
    // Key j + col is allowed for query i + row when j + col <= i + row (minus 1 if strict).
    Some(row - col - i64::from(strict))
}

/// `(axis from the last, first value)` when `node` counts up by one along one axis of size
/// above 1, all its other axes of size 1: an integer constant or an `iota` (a symbolic length),
/// or one seen through reshapes, unsqueezes, broadcasts that keep that form, and the addition of
/// a one-valued integer constant (the optimizer folds these into the constant only up to
/// `FOLD_LIMIT` elements, so a long sequence's mask reaches lowering unfolded).
fn positions(g: &Graph, node: NodeId) -> Option<(usize, i64)> {
    let axis = long_axis(g.ty(node).shape.dims())?;
    match &g.node(node).op {
        Op::Constant {
            data: ConstData::Int(values),
        } => {
            let first = *values.first()?;
            let counts = values
                .iter()
                .enumerate()
                .all(|(t, &v)| Some(v) == first.checked_add(t as i64));
            counts.then_some((axis, first))
        }
        Op::Iota { .. } => Some((axis, 0)),
        Op::Reshape { .. } | Op::Unsqueeze { .. } | Op::BroadcastTo { .. } => {
            let source = g.operands(node)[0];
            let (_, first) = positions(g, source)?;
            // The one long axis keeps its length, so the values keep their order along it.
            (g.ty(source).shape.static_numel() == g.ty(node).shape.static_numel())
                .then_some((axis, first))
        }
        Op::Binary(BinaryOp::Add) => {
            let [a, b] = <[NodeId; 2]>::try_from(g.operands(node)).ok()?;
            let (ranged, offset) = match (one_value(g, a), one_value(g, b)) {
                (None, Some(c)) => (a, c),
                (Some(c), None) => (b, c),
                _ => return None,
            };
            let (_, first) = positions(g, ranged)?;
            Some((axis, first.checked_add(offset)?))
        }
        _ => None,
    }
}

/// The position (counted from the last) of the one axis of `dims` that is not of size 1.
fn long_axis(dims: &[Dim]) -> Option<usize> {
    let mut long = dims
        .iter()
        .rev()
        .enumerate()
        .filter(|(_, d)| **d != Dim::Static(1));
    let (axis, _) = long.next()?;
    long.next().is_none().then_some(axis)
}

/// The value of an integer constant whose elements are all one value.
fn one_value(g: &Graph, node: NodeId) -> Option<i64> {
    match &g.node(node).op {
        Op::Constant {
            data: ConstData::Int(values),
        } => uniform(values),
        _ => None,
    }
}
