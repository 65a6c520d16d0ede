//! The key loop of an attention program: the walk over key blocks (whole blocks, then a tail of
//! half blocks; stopping at the last block a causal query block can see; split at the parts of
//! concatenated keys, see [`crate::lower::emit::PinnedKeys`]), and one step of it: the scores
//! on tensor cores, the score epilogue and mask, and the online softmax update.

use super::{AttentionTiling, KeyWalk, Mask, Operand, Res, Running, MIN_DIAGONAL_KEYS};
use crate::lower::builder::{Ix, SpaceId};
use crate::lower::emit::{broadcast_ix, KernelLowering, PinnedKeys};
use crate::lower::kernels::{accumulator, operand_ix};
use crate::tile::{CmpOp, IndexOp, TileOp, Type, ValueId};
use tir_graph::{BinaryOp, DType, Dim, NodeId, Op, ReduceOp};
use tir_opt::fusion::kinds::AttentionPattern;

impl KernelLowering<'_> {
    /// The online softmax over the program's query tile in `out_space`: every key block, or
    /// with `range` the blocks `start..end` of a split key loop.
    pub(super) fn attention_walk(
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
        let clamp =
            |b: &mut crate::lower::builder::KernelBuilder, lo: ValueId, hi: ValueId| match range {
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
        let along = |b: &mut crate::lower::builder::KernelBuilder, axis: usize, shift: i64| {
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
}
