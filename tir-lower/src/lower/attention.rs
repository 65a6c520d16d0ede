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
//! concat reads that part alone through an affine index (a view load), see [`PinnedKeys`].
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

use super::builder::{ceil_pow2, Ix, SpaceId};
use super::emit::{broadcast_ix, KernelLowering, PinnedKeys};
use super::kernels::{accumulator, on_vector_units, operand_ix, splits_to_fill, tile_for};
use super::LowerError;
use crate::target::{TileShapes, SHORT_ATTENTION_KEYS};
use crate::tile::{
    AttentionOperand, CmpOp, DimPolynomial, IndexOp, LibraryAttention, LibraryCall, TileOp, Type,
    ValueId,
};
use std::collections::BTreeSet;
use tir_graph::{BinaryOp, ConstData, DType, Dim, ExactF64, Graph, NodeId, Op, ReduceOp, UnaryOp};
use tir_opt::fusion::kinds::{attention_pattern, store_chain, unchained, AttentionPattern};
use tir_opt::layout::{load_view, store_view, Stride, StridedView};

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

    /// The library call equal to this attention kernel ([`LibraryCall::Attention`]), when it is
    /// one: 16-bit floats, a constant positive scale ([`AttentionTiling::scale`]) and no mask
    /// or the causal one with offset 0, at most two batch dims that every operand has, head
    /// dims that are multiples of 8 up to 256, and each operand read from its buffer (and the
    /// output stored) through bijective layout ops that compose into a strided view with a
    /// contiguous head dim and rows 16-byte aligned.
    fn library_attention(
        &self,
        t: &AttentionTiling,
        root: NodeId,
        out: usize,
    ) -> Option<LibraryCall> {
        let g = self.g;
        let p = &t.pattern;
        let scale = t.scale?;
        if !matches!(t.causal, None | Some(0)) {
            return None;
        }
        let (q, kt, v) = (
            g.operands(p.scores)[0],
            g.operands(p.scores)[1],
            g.operands(p.output)[1],
        );
        let dtype = g.ty(p.output).dtype;
        let out_dims = g.ty(p.output).shape.dims();
        let rank = out_dims.len();
        let batch = &out_dims[..rank - 2];
        let same_batch = |x: NodeId| {
            let ty = g.ty(x);
            ty.dtype == dtype && ty.rank() == rank && &ty.shape.dims()[..rank - 2] == batch
        };
        if rank > 4 || ![q, kt, v].into_iter().all(same_batch) {
            return None;
        }
        let (q, k, v) = (
            self.loaded_view(q)?,
            self.loaded_view(kt)?,
            self.loaded_view(v)?,
        );
        let mut swap = (0..rank).collect::<Vec<_>>();
        swap.swap(rank - 2, rank - 1);
        let k = (k.0, k.1.permute(&swap));
        let chain = store_chain(g, &self.members, root);
        let o_view = if chain.is_empty() {
            StridedView::contiguous(&g.ty(root).shape)?
        } else {
            store_view(g, &chain)?
        };
        let o_param = self.b.params.iter().position(|tp| tp.buffer == out)?;
        let one = Dim::Static(1);
        let at = |i: usize| {
            batch
                .len()
                .checked_sub(i)
                .map_or(one.clone(), |j| batch[j].clone())
        };
        let keys = g.ty(p.scores).shape.dims()[rank - 1].clone();
        Some(LibraryCall::Attention(Box::new(LibraryAttention {
            q: attention_operand(q)?,
            k: attention_operand(k)?,
            v: attention_operand(v)?,
            o: attention_operand((o_param, o_view))?,
            dtype,
            dims: [at(2), at(1), out_dims[rank - 2].clone(), keys],
            d: library_head_dim(head_dim(g, p)?)?,
            d_v: library_head_dim(out_dims[rank - 1].as_static()?)?,
            scale: ExactF64(scale),
            causal: t.causal.is_some(),
        })))
    }

    /// The parameter `x` is loaded from and the strided view it is loaded through, when `x`
    /// is a buffer's value seen through bijective layout members.
    fn loaded_view(&self, x: NodeId) -> Option<(usize, StridedView)> {
        let g = self.g;
        let chain = store_chain(g, &self.members, x);
        let source = unchained(g, x, &chain);
        if self.members.contains(&source) {
            return None;
        }
        let buffer = *self.buffer_of.get(&source)?;
        let param = self.b.params.iter().position(|tp| tp.buffer == buffer)?;
        let view = if chain.is_empty() {
            StridedView::contiguous(&g.ty(x).shape)?
        } else {
            load_view(g, &chain)?
        };
        Some((param, view))
    }

    /// The first kernel of an attention whose key loop is split over `splits` programs:
    /// program `(s, tile)` walks its `s`-th share of the key blocks and stores its running
    /// maximum, sum and unnormalized output into `partials` at `s`.
    pub fn lower_attention_partials(
        &mut self,
        root: NodeId,
        partials: &AttentionPartials,
        splits: u64,
        tiles: &TileShapes,
    ) -> Res<()> {
        let t = self.attention_tiling(root, tiles)?;
        let g = self.g;
        let rank = t.tile.len();
        let keys = g.ty(t.pattern.scores).shape.dims()[rank - 1].clone();
        let keys_v = self.b.dim(&keys);
        let blocks = self.b.ceil_div(keys_v, t.bn);
        let out_dims = g.ty(t.pattern.output).shape.dims().to_vec();
        let grid = self.split_grid(&out_dims, &t.tile, splits, blocks);
        let store_space = grid.store;
        let done = self.attention_walk(&t, grid.space, Some(grid.steps))?;
        let dtype = self.attention_dtype(&t);
        // The combining kernel reads maxima of the softmax's own input.
        let max = match t.scale {
            Some(scale) => {
                let mut row = t.tile.clone();
                row[rank - 1] = 1;
                let c = self.b.constant(scale, dtype, &row);
                self.binary(BinaryOp::Mul, done.max, c, &Type::tile(dtype, &row))
            }
            None => done.max,
        };
        for (buffer, value, row) in [
            (partials.max, max, true),
            (partials.sum, done.sum, true),
            (partials.acc, done.acc, false),
        ] {
            let mut s = self.b.spaces[store_space].clone();
            if row {
                s.tile[rank] = 1;
                s.extents[rank] = self.b.index(1);
            }
            let value_tile = s.tile.clone();
            let s = self.b.add_space(s);
            let value = self
                .b
                .emit(TileOp::Reshape { x: value }, Type::tile(dtype, &value_tile));
            let view = self.row_major(&self.buffers[buffer].ty.shape, rank + 1);
            self.store_whole(buffer, s, value, view);
        }
        Ok(())
    }

    /// The second kernel of a split attention: the partial results of the `splits` shares,
    /// each rescaled by `exp(m_s - m)` to the overall maximum `m`, summed and normalized; then
    /// the store chain as in [`Self::lower_attention`].
    pub fn lower_attention_combine(
        &mut self,
        (root, out): (NodeId, usize),
        partials: &AttentionPartials,
        splits: u64,
        tiles: &TileShapes,
    ) -> Res<()> {
        let t = self.attention_tiling(root, tiles)?;
        let rank = t.tile.len();
        let out_shape = self.g.ty(t.pattern.output).shape.clone();
        let out_space = self.grid_space(out_shape.dims(), &t.tile);
        let mut rows = self.b.spaces[out_space].clone();
        rows.tile[rank - 1] = 1;
        rows.extents[rank - 1] = self.b.index(1);
        let row_shape = rows.tile.clone();
        let rows = self.b.add_space(rows);
        let dtype = self.attention_dtype(&t);
        let (row_ty, acc_ty) = (Type::tile(dtype, &row_shape), Type::tile(dtype, &t.tile));
        let at = |s: u64| {
            let mut ix = vec![Ix::constant(s as i64)];
            ix.extend(Self::canonical(rank));
            ix
        };
        let mut maxes = Vec::new();
        for s in 0..splits {
            maxes.push(self.load_buffer(partials.max, &at(s), rows, f64::NEG_INFINITY)?);
        }
        let mut max = maxes[0];
        for &m in &maxes[1..] {
            max = self.binary(BinaryOp::Maximum, max, m, &row_ty);
        }
        let shift = self.finite_shift(max, &row_shape, dtype);
        let (mut sum, mut acc) = (None, None);
        for (s, &m) in (0..splits).zip(&maxes) {
            let centered = self.binary(BinaryOp::Sub, m, shift, &row_ty);
            let weight = self.b.emit(
                TileOp::Unary {
                    op: UnaryOp::Exp,
                    x: centered,
                },
                row_ty.clone(),
            );
            let part_sum = self.load_buffer(partials.sum, &at(s), rows, 0.0)?;
            let part_sum = self.binary(BinaryOp::Mul, part_sum, weight, &row_ty);
            let part_acc = self.load_buffer(partials.acc, &at(s), out_space, 0.0)?;
            let weight = self.b.emit(TileOp::Broadcast { x: weight }, acc_ty.clone());
            let part_acc = self.binary(BinaryOp::Mul, part_acc, weight, &acc_ty);
            sum = Some(match sum {
                None => part_sum,
                Some(total) => self.binary(BinaryOp::Add, total, part_sum, &row_ty),
            });
            acc = Some(match acc {
                None => part_acc,
                Some(total) => self.binary(BinaryOp::Add, total, part_acc, &acc_ty),
            });
        }
        let (Some(sum), Some(acc)) = (sum, acc) else {
            return Err(self.unsupported("a key loop split over no programs".into()));
        };
        let normalized = self.normalized(&t, acc, sum);
        self.store_attention(&t, normalized, out_space, (root, out))
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

    /// The online softmax over the program's query tile in `out_space`: every key block, or
    /// with `range` the blocks `start..end` of a split key loop.
    fn attention_walk(
        &mut self,
        t: &AttentionTiling,
        out_space: SpaceId,
        range: Option<(ValueId, ValueId)>,
    ) -> Res<Running> {
        let g = self.g;
        let pattern = &t.pattern;
        let rank = t.tile.len();
        let q = g.operands(pattern.scores)[0];
        let head = g.ty(q).shape.dims()[rank - 1].clone();
        let keys = g.ty(pattern.scores).shape.dims()[rank - 1].clone();
        let zero = self.b.index(0);
        let head_v = self.b.dim(&head);
        let q_space = self.with_axis(out_space, rank - 1, t.d_tile, zero, head_v);
        let q_tile = self.value(q, &operand_ix(&g.ty(q).shape, rank), q_space)?;
        let q_tile = self.mask_k(q_tile, g.ty(q).dtype, q_space, rank - 1, &head, t.d_tile);

        let acc_dtype = self.attention_dtype(t);
        let mut row = t.tile.clone();
        row[rank - 1] = 1;
        let init = Running {
            max: self.b.constant(f64::NEG_INFINITY, acc_dtype, &row),
            sum: self.b.constant(0.0, acc_dtype, &row),
            acc: self.b.constant(0.0, acc_dtype, &t.tile),
        };
        let walk = KeyWalk {
            pattern,
            out_space,
            q: Operand {
                value: q_tile,
                dtype: g.ty(q).dtype,
                shape: self.b.spaces[q_space].tile.clone(),
            },
            blocks: (t.bn, t.d_tile),
            scale: t.scale,
            whole: false,
        };
        // Blocks `lo..hi` of the whole walk, within the split's range when there is one.
        let clamp = |b: &mut super::builder::KernelBuilder, lo: ValueId, hi: ValueId| match range {
            None => (lo, hi),
            Some((start, end)) => (
                b.arith(IndexOp::Max, lo, start),
                b.arith(IndexOp::Min, hi, end),
            ),
        };
        Ok(match t.causal {
            Some(delta) => self.causal_walk(&walk, t.tile[rank - 2], delta, init)?,
            None => match self.key_segments(&keys, t.bn) {
                Some(segments) => {
                    let mut running = init;
                    for (blocks, pin) in segments {
                        let (lo, hi) = (self.b.index(blocks.0), self.b.index(blocks.1));
                        let bounds = clamp(&mut self.b, lo, hi);
                        running = if pin.is_some_and(|(lo, hi)| hi - lo == 1) {
                            // One key (a decode step's new token): one step, without a loop,
                            // taken only where the split's range holds it. `tileiras` spends
                            // longer on a loop of 0 or 1 trips than on the whole step.
                            let within = range.map(|_| bounds);
                            self.key_step(&walk, lo, &running, Mask::Graph, pin, within)?
                        } else {
                            self.key_loop(&walk, bounds, running, Mask::Graph, pin)?
                        };
                    }
                    running
                }
                // One loop, masked past the end of the keys: peeling the whole blocks into a
                // loop of their own measured slower (a symbolic BERT's attention 0.122 ms
                // against 0.115 on an H100), though its steps are unmasked.
                None => {
                    let keys_v = self.b.dim(&keys);
                    let steps = self.b.ceil_div(keys_v, t.bn);
                    let bounds = clamp(&mut self.b, zero, steps);
                    self.key_loop(&walk, bounds, init, Mask::Graph, None)?
                }
            },
        })
    }

    /// The key loops of a causal walk with offset `delta` and query block `bm`: the blocks
    /// every query of the program sees whole, without a mask; then the blocks on the diagonal,
    /// up to the last key the last query sees. A query block shorter than the key block ends
    /// every other program's walk halfway through a key block: there the keys past the last
    /// whole block go in blocks of half as many, so that no step weighs half a block of zeros.
    fn causal_walk(&mut self, walk: &KeyWalk, bm: u64, delta: i64, init: Running) -> Res<Running> {
        let (bn, d_tile) = walk.blocks;
        let rank = self.b.spaces[walk.out_space].tile.len();
        let keys = self.g.ty(walk.pattern.scores).shape.dims()[rank - 1].clone();
        let (visible, end, steps) = self.causal_steps(walk.out_space, (bm, bn), delta, &keys);
        let zero = self.b.index(0);
        let seen = self.key_loop(
            &walk.of_whole_blocks(),
            (zero, visible),
            init,
            Mask::Visible,
            None,
        )?;
        let diagonal = Mask::Causal(delta);
        let half = bn / 2;
        if bm >= bn || half < MIN_DIAGONAL_KEYS {
            return self.key_loop(walk, (visible, steps), seen, diagonal, None);
        }
        let bn_v = self.b.index(bn as i64);
        let whole = self.b.arith(IndexOp::Div, end, bn_v);
        let masked = self.key_loop(walk, (visible, whole), seen, diagonal, None)?;
        let two = self.b.index(2);
        let first_half = self.b.arith(IndexOp::Mul, whole, two);
        let halves = self.b.ceil_div(end, half);
        let half_walk = KeyWalk {
            blocks: (half, d_tile),
            q: walk.q.clone(),
            ..*walk
        };
        self.key_loop(&half_walk, (first_half, halves), masked, diagonal, None)
    }

    /// With a causal offset `delta`: the number of leading key blocks every query of the
    /// program sees whole, the keys up to the last one its last query sees, and the key
    /// blocks that hold them.
    fn causal_steps(
        &mut self,
        out_space: SpaceId,
        (bm, bn): (u64, u64),
        delta: i64,
        keys: &Dim,
    ) -> (ValueId, ValueId, ValueId) {
        let rank = self.b.spaces[out_space].tile.len();
        let keys = self.b.dim(keys);
        let zero = self.b.index(0);
        let block = self.b.spaces[out_space].coords[rank - 2];
        let bm_v = self.b.index(bm as i64);
        let first = self.b.arith(IndexOp::Mul, block, bm_v);
        // Query m0 sees keys below m0 + delta + 1: whole blocks below that, and below the end.
        let reach = self.b.index(delta + 1);
        let seen = self.b.arith(IndexOp::Add, first, reach);
        let seen = self.b.arith(IndexOp::Max, seen, zero);
        let bn_v = self.b.index(bn as i64);
        let whole = self.b.arith(IndexOp::Div, seen, bn_v);
        let complete = self.b.arith(IndexOp::Div, keys, bn_v);
        let visible = self.b.arith(IndexOp::Min, whole, complete);
        // Query m0 + bm - 1 sees keys below m0 + bm + delta.
        let reach = self.b.index(bm as i64 + delta);
        let end = self.b.arith(IndexOp::Add, first, reach);
        let end = self.b.arith(IndexOp::Min, end, keys);
        let end = self.b.arith(IndexOp::Max, end, zero);
        let steps = self.b.ceil_div(end, bn);
        let visible = self.b.arith(IndexOp::Min, visible, steps);
        (visible, end, steps)
    }

    /// With static keys split by concats along them (members whose extent on their axis is
    /// the key count): runs of key blocks `(first, end)`, each with the keys `lo..hi` it
    /// covers when they lie in one part of every such concat (blocks that straddle a part
    /// boundary form runs of their own, unpinned). `None` without such concats.
    #[allow(clippy::type_complexity)]
    fn key_segments(&self, keys: &Dim, bn: u64) -> Option<Vec<((i64, i64), Option<(u64, u64)>)>> {
        let keys = keys.as_static()?;
        let g = self.g;
        let mut cuts = std::collections::BTreeSet::new();
        for &node in &self.members {
            let Op::Concat { axis } = g.node(node).op else {
                continue;
            };
            if g.ty(node).shape.dims()[axis].as_static() != Some(keys) {
                continue;
            }
            let mut start = 0;
            for part in g.operands(node) {
                start += g.ty(part).shape.dims()[axis].as_static()?;
                cuts.insert(start);
            }
        }
        cuts.retain(|&c| c < keys);
        if cuts.is_empty() {
            return None;
        }
        // The part run a block lies in (its index), or None when it straddles a cut.
        let part_of = |lo: u64, hi: u64| {
            let before = cuts.range(..=lo).count();
            (cuts.range(lo + 1..hi).next().is_none()).then_some(before)
        };
        let mut segments: Vec<((i64, i64), Option<(u64, u64)>)> = Vec::new();
        let mut last: Option<Option<usize>> = None;
        for block in 0..keys.div_ceil(bn) {
            let (lo, hi) = (block * bn, ((block + 1) * bn).min(keys));
            let part = part_of(lo, hi);
            match segments.last_mut() {
                Some(((_, end), pin)) if last == Some(part) => {
                    *end += 1;
                    if let Some((_, pin_hi)) = pin {
                        *pin_hi = hi;
                    }
                }
                _ => segments.push(((block as i64, block as i64 + 1), part.map(|_| (lo, hi)))),
            }
            last = Some(part);
        }
        Some(segments)
    }

    /// The loop over key blocks `start..end`, carrying the online softmax from `init`; with
    /// `pin`, the blocks' keys lie in that range (see [`PinnedKeys`]).
    fn key_loop(
        &mut self,
        walk: &KeyWalk,
        (start, end): (ValueId, ValueId),
        init: Running,
        mask: Mask,
        pin: Option<(u64, u64)>,
    ) -> Res<Running> {
        let tile = self.b.spaces[walk.out_space].tile.clone();
        let mut row = tile.clone();
        row[tile.len() - 1] = 1;
        let dtype = accumulator(self.g.ty(walk.pattern.output).dtype);
        let (row_ty, acc_ty) = (Type::tile(dtype, &row), Type::tile(dtype, &tile));
        let types = vec![row_ty.clone(), row_ty, acc_ty];
        let step = self.b.fresh();
        let carried = Running {
            max: self.b.fresh(),
            sum: self.b.fresh(),
            acc: self.b.fresh(),
        };
        self.b.open_block();
        let next = self.key_step(walk, step, &carried, mask, pin, None)?;
        let body = self.close_block();
        let one = self.b.index(1);
        let done = self.b.emit_multi(
            TileOp::For {
                start,
                end,
                step: one,
                var: step,
                init: vec![init.max, init.sum, init.acc],
                carried: vec![
                    (carried.max, types[0].clone()),
                    (carried.sum, types[1].clone()),
                    (carried.acc, types[2].clone()),
                ],
                body,
                yields: vec![next.max, next.sum, next.acc],
            },
            types,
        );
        Ok(Running {
            max: done[0],
            sum: done[1],
            acc: done[2],
        })
    }

    /// The scores `s` (f32) of the block in `s_space` through the graph's score epilogue, in
    /// f32. The causal mask's nodes are bound first: with `Visible`, the masked select is its
    /// unmasked branch; with `Causal`, its condition is computed from the positions rather
    /// than loaded.
    fn score_epilogue(
        &mut self,
        pattern: &AttentionPattern,
        s: ValueId,
        (s_space, s_shape): (SpaceId, &[u64]),
        mask: Mask,
    ) -> Res<ValueId> {
        let g = self.g;
        let scores_ty = g.ty(pattern.scores);
        let s = self
            .b
            .emit(TileOp::Cast { x: s }, Type::tile(scores_ty.dtype, s_shape));
        let rank = s_shape.len();
        let canonical = Self::canonical(rank);
        let depth = self.b.depth();
        self.memo
            .insert((pattern.scores, canonical.clone(), s_space), (s, depth));
        if mask != Mask::Graph {
            let select = pattern.logits;
            let [cond, unmasked, _] = <[NodeId; 3]>::try_from(g.operands(select))
                .map_err(|_| self.unsupported("a causal mask that is no select".into()))?;
            match mask {
                Mask::Causal(delta) => {
                    let visible = self.causal_visible(s_space, delta);
                    let ix = broadcast_ix(&g.ty(cond).shape, &g.ty(select).shape, &canonical);
                    self.memo.insert((cond, ix, s_space), (visible, depth));
                }
                _ => {
                    let v = self.operand(select, unmasked, &canonical, s_space)?;
                    self.memo
                        .insert((select, canonical.clone(), s_space), (v, depth));
                }
            }
        }
        let x = self.value(pattern.logits, &canonical, s_space)?;
        let acc_dtype = accumulator(scores_ty.dtype);
        Ok(self
            .b
            .emit(TileOp::Cast { x }, Type::tile(acc_dtype, s_shape)))
    }

    /// Whether each score of the block in `s_space` is visible under a causal mask with
    /// offset `delta`: `col <= row + delta`, from the block's positions.
    fn causal_visible(&mut self, s_space: SpaceId, delta: i64) -> ValueId {
        let shape = self.b.spaces[s_space].tile.clone();
        let coords = self.b.spaces[s_space].coords.clone();
        let rank = shape.len();
        let along = |b: &mut super::builder::KernelBuilder, axis: usize, shift: i64| {
            let mut line = vec![1u64; rank];
            line[axis] = shape[axis];
            let ty = Type::tile(DType::I64, &line);
            let size = b.index(shape[axis] as i64);
            let base = b.arith(IndexOp::Mul, coords[axis], size);
            let shift = b.index(shift);
            let base = b.arith(IndexOp::Add, base, shift);
            let base = b.emit(TileOp::Splat { x: base }, ty.clone());
            let iota = b.emit(TileOp::Iota { axis }, ty.clone());
            let at = b.emit(
                TileOp::IndexArith {
                    op: IndexOp::Add,
                    a: base,
                    b: iota,
                },
                ty,
            );
            b.emit(TileOp::Broadcast { x: at }, Type::tile(DType::I64, &shape))
        };
        let cols = along(&mut self.b, rank - 1, 0);
        let rows = along(&mut self.b, rank - 2, delta);
        self.b.emit(
            TileOp::IndexCmp {
                op: CmpOp::Le,
                a: cols,
                b: rows,
            },
            Type::tile(DType::Bool, &shape),
        )
    }

    /// One step of the key loop at key block `step`: the scores, the epilogue, and the online
    /// softmax update of `running`. With `within = (start, end)`, a step emitted without its
    /// loop counts only where `start < end` (elsewhere its keys weigh 0 and its values are 0).
    fn key_step(
        &mut self,
        walk: &KeyWalk,
        step: ValueId,
        running: &Running,
        mask: Mask,
        pin: Option<(u64, u64)>,
        within: Option<(ValueId, ValueId)>,
    ) -> Res<Running> {
        let KeyWalk {
            pattern,
            out_space,
            ref q,
            blocks: (bn, d_tile),
            scale,
            whole,
        } = *walk;
        let g = self.g;
        let (kt, v) = (g.operands(pattern.scores)[1], g.operands(pattern.output)[1]);
        let rank = self.b.spaces[out_space].tile.len();
        let scores_ty = g.ty(pattern.scores).clone();
        let keys = scores_ty.shape.dims()[rank - 1].clone();
        let head = g.ty(kt).shape.dims()[rank - 2].clone();
        let head_out = g.ty(pattern.output).shape.dims()[rank - 1].clone();
        let zero = self.b.index(0);
        // A step pinned to one key (a decode step's new token) takes it alone, as a block of
        // one key at position `step · bn`: its products are then a row sum and a broadcast,
        // which `tileiras` assembles far faster than two padded `[bn, d]` tensor-core products.
        let (block, key) = match pin {
            Some((lo, hi)) if hi - lo == 1 => {
                let bn_v = self.b.index(bn as i64);
                (1, self.b.arith(IndexOp::Mul, step, bn_v))
            }
            _ => (bn, step),
        };
        // The scores `q @ kt` of this block, as the graph's node.
        let (head_v, keys_v) = (self.b.dim(&head), self.b.dim(&keys));
        let kt_space = self.with_axis(out_space, rank - 2, d_tile, zero, head_v);
        let kt_space = self.with_axis(kt_space, rank - 1, block, key, keys_v);
        let s_space = self.with_axis(out_space, rank - 1, block, key, keys_v);
        let v_space = self.with_axis(out_space, rank - 2, block, key, keys_v);
        let dv_tile = self.b.spaces[out_space].tile[rank - 1];
        let head_out_v = self.b.dim(&head_out);
        let v_space = self.with_axis(v_space, rank - 1, dv_tile, zero, head_out_v);
        self.pinned_keys = pin.map(|(lo, hi)| PinnedKeys {
            axes: vec![
                (kt_space, rank - 1),
                (s_space, rank - 1),
                (v_space, rank - 2),
            ],
            lo,
            hi,
        });
        let kt_tile = self.value(kt, &operand_ix(&g.ty(kt).shape, rank), kt_space)?;
        let kt_tile = self.mask_k(kt_tile, g.ty(kt).dtype, kt_space, rank - 2, &head, d_tile);
        let s_shape = self.b.spaces[s_space].tile.clone();
        let acc_dtype = accumulator(scores_ty.dtype);
        let s_acc_ty = Type::tile(acc_dtype, &s_shape);
        let s_zero = self.b.constant(0.0, acc_dtype, &s_shape);
        let kt = Operand {
            value: kt_tile,
            dtype: g.ty(kt).dtype,
            shape: self.b.spaces[kt_space].tile.clone(),
        };
        let s = self.product(q, &kt, s_zero, acc_dtype);
        let mut x = match scale {
            // Unscaled and unrounded; the scale is folded into the exponentials.
            Some(_) => match mask {
                Mask::Causal(delta) => {
                    let visible = self.causal_visible(s_space, delta);
                    let masked = self.b.constant(f64::NEG_INFINITY, acc_dtype, &s_shape);
                    self.b.emit(
                        TileOp::Select {
                            cond: visible,
                            a: s,
                            b: masked,
                        },
                        s_acc_ty.clone(),
                    )
                }
                Mask::Graph | Mask::Visible => s,
            },
            None => self.score_epilogue(pattern, s, (s_space, &s_shape), mask)?,
        };
        // Keys past the end at -inf, in blocks that may pass it. The blocks of a loop pinned to
        // keys `lo..hi` with `hi` a multiple of the block cannot: only a block cut short by the
        // end of the keys ends between two multiples.
        let complete = whole
            || matches!(keys, Dim::Static(n) if n % block == 0)
            || pin.is_some_and(|(_, hi)| hi % block == 0);
        if !complete {
            let hi = self.b.dim(&keys);
            let inside = self.b.in_range(&Ix::axis(rank - 1), zero, hi, s_space);
            let masked = self.b.constant(f64::NEG_INFINITY, acc_dtype, &s_shape);
            x = self.b.emit(
                TileOp::Select {
                    cond: inside,
                    a: x,
                    b: masked,
                },
                s_acc_ty.clone(),
            );
        }
        if let Some(within) = within {
            let taken = self.step_taken(within, s_space);
            let masked = self.b.constant(f64::NEG_INFINITY, acc_dtype, &s_shape);
            let op = TileOp::Select {
                cond: taken,
                a: x,
                b: masked,
            };
            x = self.b.emit(op, s_acc_ty.clone());
        }
        // The online softmax.
        let mut row_shape = s_shape.clone();
        row_shape[rank - 1] = 1;
        let row_ty = Type::tile(acc_dtype, &row_shape);
        let block_max = self.b.emit(
            TileOp::Reduce {
                op: ReduceOp::Max,
                x,
                axis: rank - 1,
            },
            row_ty.clone(),
        );
        let max = self.binary(BinaryOp::Maximum, running.max, block_max, &row_ty);
        let shift = self.finite_shift(max, &row_shape, acc_dtype);
        let v_dtype = g.ty(v).dtype;
        let factor = scale.unwrap_or(1.0);
        let p = self.shifted_exp((x, shift, factor), &s_acc_ty, v_dtype);
        let rescale = self.shifted_exp((running.max, shift, factor), &row_ty, v_dtype);
        let block_sum = self.b.emit(
            TileOp::Reduce {
                op: ReduceOp::Sum,
                x: p,
                axis: rank - 1,
            },
            row_ty.clone(),
        );
        let kept = self.binary(BinaryOp::Mul, running.sum, rescale, &row_ty);
        let sum = self.binary(BinaryOp::Add, kept, block_sum, &row_ty);
        // acc · rescale + p @ v.
        let v_tile = self.value(v, &operand_ix(&g.ty(v).shape, rank), v_space)?;
        // Past the end, `p` is 0: the values there need masking only when they may not be
        // finite, i.e. unless they are a load's zero padding.
        let v_tile = if complete || self.b.is_zero_padded_load(v_tile) {
            v_tile
        } else {
            self.mask_k(v_tile, v_dtype, v_space, rank - 2, &keys, block)
        };
        // A step not taken reads keys that another program weighs: 0 · inf would be NaN.
        let v_tile = match within {
            Some(within) => {
                let taken = self.step_taken(within, v_space);
                let v_shape = self.b.spaces[v_space].tile.clone();
                let zero = self.b.constant(0.0, v_dtype, &v_shape);
                let op = TileOp::Select {
                    cond: taken,
                    a: v_tile,
                    b: zero,
                };
                self.b.emit(op, Type::tile(v_dtype, &v_shape))
            }
            None => v_tile,
        };
        let p = self
            .b
            .emit(TileOp::Cast { x: p }, Type::tile(v_dtype, &s_shape));
        let acc_ty = Type::tile(acc_dtype, &self.b.spaces[out_space].tile.clone());
        let rescale_tile = self
            .b
            .emit(TileOp::Broadcast { x: rescale }, acc_ty.clone());
        let kept = self.binary(BinaryOp::Mul, running.acc, rescale_tile, &acc_ty);
        let (p, v) = (
            Operand {
                value: p,
                dtype: v_dtype,
                shape: s_shape,
            },
            Operand {
                value: v_tile,
                dtype: v_dtype,
                shape: self.b.spaces[v_space].tile.clone(),
            },
        );
        let acc = self.product(&p, &v, kept, acc_dtype);
        self.pinned_keys = None;
        Ok(Running { max, sum, acc })
    }

    /// Whether a step emitted without its loop `start..end` is taken (`start < end`), as a
    /// bool tile over `space`.
    fn step_taken(&mut self, (start, end): (ValueId, ValueId), space: SpaceId) -> ValueId {
        let (start, end) = (self.b.splat(start, space), self.b.splat(end, space));
        let shape = self.b.spaces[space].tile.clone();
        let op = TileOp::IndexCmp {
            op: CmpOp::Lt,
            a: start,
            b: end,
        };
        self.b.emit(op, Type::tile(DType::Bool, &shape))
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

/// `d` when a fused attention library takes it as a head dim: a multiple of 8 up to 256
/// (cuDNN's bounds).
fn library_head_dim(d: u64) -> Option<u64> {
    (d.is_multiple_of(8) && d <= 256).then_some(d)
}

/// A parameter and its view as a library attention's 4-D operand: offset 0, the head dim
/// contiguous, missing batch dims of extent 1 (stride 0) in front.
fn attention_operand((param, view): (usize, StridedView)) -> Option<AttentionOperand> {
    let (last, outer) = view.strides.split_last()?;
    // Rows start 16-byte aligned: outer strides are multiples of 8 16-bit elements.
    let aligned = outer.iter().all(|s| s.coeff % 8 == 0);
    if view.offset != 0 || last.as_static() != Some(1) || outer.len() > 3 || !aligned {
        return None;
    }
    let polynomial = |s: &Stride| -> Option<DimPolynomial> {
        let factor = u64::try_from(s.coeff).ok()?;
        let dims = s.dims.clone();
        Some(DimPolynomial {
            terms: vec![(factor, dims)],
        })
    };
    let mut strides = vec![DimPolynomial::default(); 4 - view.strides.len()];
    for s in &view.strides {
        strides.push(polynomial(s)?);
    }
    Some(AttentionOperand {
        param,
        strides: strides.try_into().ok()?,
    })
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
