//! Flash decoding: an attention with too few programs to fill the target (a decode step: one
//! query row per head) splits its key loop over several programs, each storing its running
//! maximum, sum and unnormalized output for its share of the key blocks; a second kernel
//! rescales the shares to their common maximum, adds them and divides once.

use super::{AttentionPartials, Res};
use crate::lower::builder::Ix;
use crate::lower::emit::KernelLowering;
use crate::target::TileShapes;
use crate::tile::{TileOp, Type};
use tir_graph::{BinaryOp, NodeId, UnaryOp};

impl KernelLowering<'_> {
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
}
