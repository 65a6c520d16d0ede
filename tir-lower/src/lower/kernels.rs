//! One function per kernel shape: the spaces and grid of the kernel, its loops, and its store.

use super::builder::{ceil_pow2, choose_tile, transpose_tile, Ix, Space, SpaceId};
use super::emit::{identity, KernelLowering, RowSpaces};
use super::LowerError;
use crate::target::{TileShapes, MATVEC_M, QUANT_SMALL_M};
use crate::tile::{
    Access, CmpOp, IndexOp, LibraryCall, Region, SliceStart, TileOp, Type, ValueId, WriteRegion,
};
use tir_graph::{BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, Shape, UnaryOp};
use tir_opt::fusion::kinds::{
    is_library_matmul, residual_add, store_chain, transposed_source, unchained,
};
use tir_opt::layout::{store_view, Stride, StridedView};

type Res<T> = Result<T, LowerError>;

/// How a kernel's output tile reaches memory.
pub enum StoreView {
    /// Strides (static, or static times symbolic dims) and a static offset, in elements.
    Strided {
        /// One stride per axis of the stored value.
        strides: Vec<Stride>,
        /// The first element's offset in the buffer.
        offset: i64,
    },
    /// Row-major strides of `dims` (which may be symbolic).
    Rows {
        /// The dims whose row-major layout the buffer has.
        dims: Vec<Dim>,
    },
}

impl KernelLowering<'_> {
    /// A space over `extents` with one tile per program (grid axes = space axes).
    pub(super) fn grid_space(&mut self, extents: &[Dim], tile: &[u64]) -> SpaceId {
        let coords = self.b.grid(extents, tile);
        let extents = extents.iter().map(|d| self.b.dim(d)).collect();
        self.b.add_space(Space {
            tile: tile.to_vec(),
            coords,
            extents,
        })
    }

    pub(super) fn canonical(rank: usize) -> Vec<Ix> {
        (0..rank).map(Ix::axis).collect()
    }

    /// The value of `node` at the canonical indices of `space`, computed or loaded.
    fn root_value(&mut self, node: NodeId, space: SpaceId) -> Res<ValueId> {
        let ix = Self::canonical(self.g.ty(node).rank());
        if self.members.contains(&node) {
            self.value(node, &ix, space)
        } else {
            self.load(node, &ix, space, 0.0)
        }
    }

    /// Stores `value` (over `space`) into parameter `param` through `view` at `offset`.
    fn store(
        &mut self,
        param: usize,
        space: SpaceId,
        value: ValueId,
        view: StoreView,
        offset: ValueId,
    ) {
        let extents = self.b.spaces[space].extents.clone();
        let strides: Vec<ValueId> = match view {
            StoreView::Strided { strides, offset: o } => {
                debug_assert_eq!(o, 0, "static offsets are folded into `offset`");
                strides.iter().map(|s| self.b.stride(s)).collect()
            }
            StoreView::Rows { dims } => self.b.contiguous_strides(&dims),
        };
        let view = self.b.view(param, offset, extents, strides);
        let coords = self.b.spaces[space].coords.clone();
        let token = self.b.token();
        let next = self.b.emit(
            TileOp::Store {
                view,
                coords,
                value,
                token,
            },
            Type::Token,
        );
        self.b.set_token(next);
    }

    /// Stores `value` into all of buffer `out`.
    pub(super) fn store_whole(
        &mut self,
        out: usize,
        space: SpaceId,
        value: ValueId,
        view: StoreView,
    ) {
        let dtype = self.buffers[out].ty.dtype;
        let param = self.b.writes(out, dtype, Region::Whole);
        let offset = match &view {
            StoreView::Strided { offset, .. } => *offset,
            StoreView::Rows { .. } => 0,
        };
        let offset = self.b.index(offset);
        let view = match view {
            StoreView::Strided { strides, .. } => StoreView::Strided { strides, offset: 0 },
            rows => rows,
        };
        self.store(param, space, value, view, offset);
    }

    /// The row-major store view of a buffer of `shape` over a space of `space_rank` axes: the
    /// buffer's axes first, extra trailing axes of size 1 (stride 0).
    pub(super) fn row_major(&self, shape: &Shape, space_rank: usize) -> StoreView {
        if let Some(mut strides) = StridedView::contiguous(shape).and_then(|v| v.static_strides()) {
            strides.resize(space_rank, 0);
            let strides = strides.into_iter().map(Stride::constant).collect();
            return StoreView::Strided { strides, offset: 0 };
        }
        let mut dims = shape.dims().to_vec();
        dims.resize(space_rank, Dim::Static(1));
        StoreView::Rows { dims }
    }

    /// Elementwise, gather and layout kernels, and copies: one tile of the root per program.
    pub fn lower_pointwise(&mut self, root: NodeId, out: usize, tiles: &TileShapes) -> Res<()> {
        let shape = self.g.ty(root).shape.clone();
        let extents = space_dims(&shape);
        let tile = match transposed_axis(&self.g.node(root).op) {
            Some(axis) => transpose_tile(&extents, tiles.elementwise, axis),
            None => choose_tile(&extents, tiles.elementwise),
        };
        let space = self.grid_space(&extents, &tile);
        let value = self.root_value(root, space)?;
        let view = self.row_major(&self.buffers[out].ty.shape, extents.len());
        self.store_whole(out, space, value, view);
        Ok(())
    }

    /// Row reductions with their producers and consumers: whole rows per program.
    pub fn lower_rows(&mut self, root: NodeId, out: usize, tiles: &TileShapes) -> Res<()> {
        let g = self.g;
        let reduce = self.member_where("reduction", |op| matches!(op, Op::Reduce { .. }))?;
        let row = g.ty(g.operands(reduce)[0]).shape.clone();
        let axis = row.rank() - 1;
        let len = row.dims()[axis]
            .as_static()
            .ok_or_else(|| self.unsupported("a row of symbolic length".into()))?;
        let mut tile = vec![1u64; row.rank()];
        tile[axis] = ceil_pow2(len);
        if axis > 0 {
            let budget = (tiles.row_elements / tile[axis]).max(1);
            tile[axis - 1] = choose_tile(&row.dims()[axis - 1..axis], budget)[0];
        }
        let full = self.grid_space(row.dims(), &tile);
        let mut reduced = self.b.spaces[full].clone();
        reduced.tile[axis] = 1;
        reduced.extents[axis] = self.b.index(1);
        let reduced = self.b.add_space(reduced);
        self.rows = Some(RowSpaces {
            full,
            reduced,
            axis,
            len,
        });
        let root_shape = g.ty(root).shape.clone();
        let space = if root_shape == row { full } else { reduced };
        let value = self.value(root, &Self::canonical(root_shape.rank()), space)?;
        let view = self.row_major(&root_shape, row.rank());
        self.store_whole(out, space, value, view);
        Ok(())
    }

    /// A matmul with its operand index maps, K loop, epilogue and store chain.
    pub fn lower_matmul(&mut self, root: NodeId, out: usize, tiles: &TileShapes) -> Res<()> {
        let g = self.g;
        let mm = self.member_where("matmul", |op| *op == Op::MatMul)?;
        let tiling = MatmulTiling::new(g, mm, tiles);
        let out_space = self.grid_space(g.ty(mm).shape.dims(), &tiling.tile);
        let zero = self.b.index(0);
        let steps = self.k_steps(&tiling);
        let sum = self.k_loop(mm, &tiling, out_space, (zero, steps))?;
        self.set_matmul_value(mm, sum, out_space);
        self.store_through_chain(root, out, out_space)?;
        if is_library_matmul(g, &self.members, root, mm) {
            let b_transposed = transposed_source(g, &self.members, g.operands(mm)[1]);
            self.b.library = self.library_matmul(mm, b_transposed, out);
        }
        Ok(())
    }

    /// The first kernel of a matmul whose K loop is split over `splits` programs: program
    /// `(s, tile)` sums the products of its `s`-th share of the K steps into `scratch[s, tile]`
    /// (in the accumulator's dtype). [`Self::lower_split_sum`] adds the shares.
    pub fn lower_matmul_partials(
        &mut self,
        scratch: usize,
        splits: u64,
        tiles: &TileShapes,
    ) -> Res<()> {
        let g = self.g;
        let mm = self.member_where("matmul", |op| *op == Op::MatMul)?;
        let tiling = MatmulTiling::new(g, mm, tiles);
        let steps = self.k_steps(&tiling);
        let grid = self.split_grid(g.ty(mm).shape.dims(), &tiling.tile, splits, steps);
        let sum = self.k_loop(mm, &tiling, grid.space, grid.steps)?;
        let acc_dtype = self.buffers[scratch].ty.dtype;
        let tile = self.b.spaces[grid.store].tile.clone();
        let sum = self
            .b
            .emit(TileOp::Reshape { x: sum }, Type::tile(acc_dtype, &tile));
        let view = self.row_major(&self.buffers[scratch].ty.shape, tile.len());
        self.store_whole(scratch, grid.store, sum, view);
        Ok(())
    }

    /// The grid of the first kernel of a split loop over `steps` steps: programs `(s, tile)`
    /// over `[splits, ..dims]`, each taking the `s`-th share of the steps.
    pub(super) fn split_grid(
        &mut self,
        dims: &[Dim],
        tile: &[u64],
        splits: u64,
        steps: ValueId,
    ) -> SplitGrid {
        let mut all_dims = vec![Dim::Static(splits)];
        all_dims.extend(dims.iter().cloned());
        let mut all_tile = vec![1];
        all_tile.extend(tile);
        let store = self.grid_space(&all_dims, &all_tile);
        let (space, split) = self.without_split_axis(store);
        let share = self.b.ceil_div(steps, splits);
        let start = self.b.arith(IndexOp::Mul, split, share);
        let after = self.b.arith(IndexOp::Add, start, share);
        let end = self.b.arith(IndexOp::Min, after, steps);
        SplitGrid {
            store,
            space,
            steps: (start, end),
        }
    }

    /// The second kernel of a split matmul: the matmul's value is the sum of the `splits`
    /// partial sums in `scratch`, rounded once; the epilogue and store chain follow as in
    /// [`Self::lower_matmul`].
    pub fn lower_split_sum(
        &mut self,
        root: NodeId,
        out: usize,
        (scratch, splits): (usize, u64),
        tiles: &TileShapes,
    ) -> Res<()> {
        let g = self.g;
        let mm = self.member_where("matmul", |op| *op == Op::MatMul)?;
        let tiling = MatmulTiling::new(g, mm, tiles);
        let rank = g.ty(mm).rank();
        let out_space = self.grid_space(g.ty(mm).shape.dims(), &tiling.tile);
        let acc_ty = Type::tile(self.buffers[scratch].ty.dtype, &tiling.tile);
        let mut sum = None;
        for s in 0..splits {
            let mut ix = vec![Ix::constant(s as i64)];
            ix.extend(Self::canonical(rank));
            let part = self.load_buffer(scratch, &ix, out_space, 0.0)?;
            sum = Some(match sum {
                None => part,
                Some(acc) => self.b.emit(
                    TileOp::Binary {
                        op: BinaryOp::Add,
                        a: acc,
                        b: part,
                    },
                    acc_ty.clone(),
                ),
            });
        }
        let sum = sum.ok_or_else(|| self.unsupported("a K loop split over no programs".into()))?;
        self.set_matmul_value(mm, sum, out_space);
        self.store_through_chain(root, out, out_space)?;
        Ok(())
    }

    /// The number of K steps of a matmul, as a scalar.
    fn k_steps(&mut self, tiling: &MatmulTiling) -> ValueId {
        let k_extent = self.b.dim(&tiling.k);
        self.b.ceil_div(k_extent, tiling.tk)
    }

    /// The K loop of `mm` over steps `start..end` at the tiles of `space` (over `mm`'s axes):
    /// returns the sum in the accumulator's dtype.
    fn k_loop(
        &mut self,
        mm: NodeId,
        tiling: &MatmulTiling,
        space: SpaceId,
        range: (ValueId, ValueId),
    ) -> Res<ValueId> {
        let g = self.g;
        let rank = g.ty(mm).rank();
        let (a, b) = (g.operands(mm)[0], g.operands(mm)[1]);
        let tk = tiling.tk;
        let tile = self.b.spaces[space].tile.clone();
        let acc_dtype = accumulator(g.ty(mm).dtype);
        // One row of a float A: products on the vector units (see `close_vector_k_loop`).
        let vector = tile[rank - 2] == 1 && g.ty(mm).dtype.is_float();
        let mut acc_tile = tile.clone();
        if vector {
            acc_tile[rank - 2] = tk;
        }
        let acc_ty = Type::tile(acc_dtype, &acc_tile);
        let acc0 = self.b.constant(0.0, acc_dtype, &acc_tile);
        let k_extent = self.b.dim(&tiling.k);
        let (kk, acc_in) = (self.b.fresh(), self.b.fresh());
        self.b.open_block();
        // Step kk: the A tile [.., m, kk] and the B tile [.., kk, n], multiplied into acc.
        let a_space = self.with_axis(space, rank - 1, tk, kk, k_extent);
        let b_space = self.with_axis(space, rank - 2, tk, kk, k_extent);
        let a_tile = self.value(a, &operand_ix(&g.ty(a).shape, rank), a_space)?;
        let b_tile = self.value(b, &operand_ix(&g.ty(b).shape, rank), b_space)?;
        let a_tile = self.mask_k(a_tile, g.ty(a).dtype, a_space, rank - 1, &tiling.k, tk);
        let b_tile = self.mask_k(b_tile, g.ty(b).dtype, b_space, rank - 2, &tiling.k, tk);
        if vector {
            let a = (a_tile, g.ty(a).dtype);
            return Ok(self.close_vector_k_loop(kk, range, (acc0, acc_in, acc_ty), a, b_tile));
        }
        Ok(self.close_k_loop(kk, range, (acc0, acc_in, acc_ty), a_tile, b_tile))
    }

    /// [`Self::close_k_loop`] for an A of one row, `a: [.., 1, k]`: each step adds the products
    /// `a[k] · b[k, n]` into an accumulator of `[.., k, n]`, summed over `k` once after the
    /// loop. A tensor-core product of one row computes a 64-row one, and `tileiras` took 0.9 to
    /// 1.3 s to assemble such a kernel (this one: 0.5 to 0.6 s).
    fn close_vector_k_loop(
        &mut self,
        var: ValueId,
        range: (ValueId, ValueId),
        (acc0, acc_in, acc_ty): (ValueId, ValueId, Type),
        (a, a_dtype): (ValueId, DType),
        b: ValueId,
    ) -> ValueId {
        let Type::Tile { dtype, shape } = acc_ty.clone() else {
            unreachable!("accumulators are tiles")
        };
        let rank = shape.len();
        let mut column = shape.clone();
        column[rank - 1] = 1;
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(rank - 2, rank - 1);
        let a_column = self
            .b
            .emit(TileOp::Permute { x: a, perm }, Type::tile(a_dtype, &column));
        let a_wide = self
            .b
            .emit(TileOp::Cast { x: a_column }, Type::tile(dtype, &column));
        let a_rows = self.b.emit(TileOp::Broadcast { x: a_wide }, acc_ty.clone());
        let b_wide = self.b.emit(TileOp::Cast { x: b }, acc_ty.clone());
        let products = self.binary(BinaryOp::Mul, a_rows, b_wide, &acc_ty);
        let acc_out = self.binary(BinaryOp::Add, acc_in, products, &acc_ty);
        let sums = self.close_loop(var, range, (acc0, acc_in, acc_ty), acc_out);
        let mut row = shape;
        row[rank - 2] = 1;
        self.b.emit(
            TileOp::Reduce {
                op: ReduceOp::Sum,
                x: sums,
                axis: rank - 2,
            },
            Type::tile(dtype, &row),
        )
    }

    /// Makes `sum` (over `space`, in the accumulator's dtype) rounded to `mm`'s dtype the value
    /// the epilogue reads for `mm`.
    fn set_matmul_value(&mut self, mm: NodeId, sum: ValueId, space: SpaceId) {
        let g = self.g;
        let tile = self.b.spaces[space].tile.clone();
        let mm_value = self
            .b
            .emit(TileOp::Cast { x: sum }, Type::tile(g.ty(mm).dtype, &tile));
        let depth = self.b.depth();
        self.memo.insert(
            (mm, Self::canonical(g.ty(mm).rank()), space),
            (mm_value, depth),
        );
    }

    /// The epilogue up to the top of the chain of bijective layout ops below `root`, stored
    /// whole to `out` through that chain (a strided view); returns the chain and its top.
    pub(super) fn store_through_chain(
        &mut self,
        root: NodeId,
        out: usize,
        out_space: SpaceId,
    ) -> Res<(Vec<NodeId>, NodeId)> {
        let g = self.g;
        let chain = store_chain(g, &self.members, root);
        let top = unchained(g, root, &chain);
        let rank = g.ty(top).rank();
        let value = self.value(top, &Self::canonical(rank), out_space)?;
        let view = if chain.is_empty() {
            self.row_major(&self.buffers[out].ty.shape, rank)
        } else {
            let v = store_view(g, &chain).ok_or_else(|| {
                self.unsupported("a store chain that is not a strided view".into())
            })?;
            StoreView::Strided {
                strides: v.strides,
                offset: v.offset,
            }
        };
        self.store_whole(out, out_space, value, view);
        Ok((chain, top))
    }

    /// Ends the body of a K loop (opened with `open_block`) with `acc_in + a @ b`, closes it,
    /// and emits the loop over steps `start..end` with variable `var`, carrying the accumulator
    /// from `acc0` through `acc_in`; returns the final sum.
    pub(super) fn close_k_loop(
        &mut self,
        var: ValueId,
        range: (ValueId, ValueId),
        (acc0, acc_in, acc_ty): (ValueId, ValueId, Type),
        a: ValueId,
        b: ValueId,
    ) -> ValueId {
        let acc_out = self
            .b
            .emit(TileOp::Mma { a, b, acc: acc_in }, acc_ty.clone());
        self.close_loop(var, range, (acc0, acc_in, acc_ty), acc_out)
    }

    /// Closes the body of a loop (opened with `open_block`) that ends with `acc_out`, and emits
    /// the loop over steps `start..end` with variable `var`, carrying the accumulator from
    /// `acc0` through `acc_in`; returns its final value.
    fn close_loop(
        &mut self,
        var: ValueId,
        (start, end): (ValueId, ValueId),
        (acc0, acc_in, acc_ty): (ValueId, ValueId, Type),
        acc_out: ValueId,
    ) -> ValueId {
        let body = self.close_block();
        let one = self.b.index(1);
        self.b.emit_multi(
            TileOp::For {
                start,
                end,
                step: one,
                var,
                init: vec![acc0],
                carried: vec![(acc_in, acc_ty.clone())],
                body,
                yields: vec![acc_out],
            },
            vec![acc_ty],
        )[0]
    }

    /// The library call equal to a kernel that is only `mm` ([`is_library_matmul`]; operands
    /// read from their buffers, the product stored whole to `out`).
    /// `b_stored`, when given, is the node holding `bᵀ` that the kernel reads transposed.
    fn library_matmul(
        &self,
        mm: NodeId,
        b_stored: Option<NodeId>,
        out: usize,
    ) -> Option<LibraryCall> {
        let g = self.g;
        let (a, b) = (g.operands(mm)[0], g.operands(mm)[1]);
        let (sa, sb, sc) = (&g.ty(a).shape, &g.ty(b).shape, &g.ty(mm).shape);
        let rank = sc.rank();
        let batch = &sc.dims()[..rank - 2];
        let b_batched = sb.rank() == rank && rank > 2;
        let param = |buffer: usize| self.b.params.iter().position(|p| p.buffer == buffer);
        let residual = match residual_add(g, &self.members, mm) {
            Some((_, r)) => Some(param(*self.buffer_of.get(&r)?)?),
            None => None,
        };
        // A is read from the value its layout ops start from: they move nothing.
        let a_source = unchained(g, a, &store_chain(g, &self.members, a));
        Some(LibraryCall::MatMul {
            a: param(*self.buffer_of.get(&a_source)?)?,
            b: param(*self.buffer_of.get(&b_stored.unwrap_or(b))?)?,
            c: param(out)?,
            residual,
            dtype: g.ty(mm).dtype,
            batch: batch.to_vec(),
            m: sc.dims()[rank - 2].clone(),
            k: sa.dims()[rank - 1].clone(),
            n: sc.dims()[rank - 1].clone(),
            b_batched,
            b_transposed: b_stored.is_some(),
        })
    }

    /// `from` with axis `axis` replaced: tiles of `tile` at coordinate `coord` of `extent`
    /// (a K step of a matmul operand, a block of keys of attention).
    pub(super) fn with_axis(
        &mut self,
        from: SpaceId,
        axis: usize,
        tile: u64,
        coord: ValueId,
        extent: ValueId,
    ) -> SpaceId {
        let mut s = self.b.spaces[from].clone();
        s.tile[axis] = tile;
        s.coords[axis] = coord;
        s.extents[axis] = extent;
        self.b.add_space(s)
    }

    /// `space` (whose axis 0 is a split of a loop) without that axis, and the split's
    /// coordinate: the loop's operands are read over the kernel's own axes, since a view with
    /// a stride-0 split axis keeps `tileiras` off TMA (a split matrix-vector product ran at a
    /// third of the speed).
    pub(super) fn without_split_axis(&mut self, space: SpaceId) -> (SpaceId, ValueId) {
        let mut s = self.b.spaces[space].clone();
        let split = s.coords.remove(0);
        s.extents.remove(0);
        s.tile.remove(0);
        (self.b.add_space(s), split)
    }

    /// Zeroes a K-loop operand tile past K unless K is a multiple of the step.
    pub(super) fn mask_k(
        &mut self,
        x: ValueId,
        dtype: DType,
        space: SpaceId,
        axis: usize,
        k: &Dim,
        tk: u64,
    ) -> ValueId {
        if matches!(k, Dim::Static(n) if n % tk == 0) {
            return x;
        }
        let shape = self.b.spaces[space].tile.clone();
        let lo = self.b.index(0);
        let hi = self.b.dim(k);
        let mask = self.b.in_range(&Ix::axis(axis), lo, hi, space);
        let zero = self.b.constant(0.0, dtype, &shape);
        self.b.emit(
            TileOp::Select {
                cond: mask,
                a: x,
                b: zero,
            },
            Type::tile(dtype, &shape),
        )
    }

    /// A reduction over any axes, alone in its kernel: a tile of outputs per program and a loop
    /// over the flattened reduced elements in chunks.
    pub fn lower_reduction(&mut self, root: NodeId, out: usize, tiles: &TileShapes) -> Res<()> {
        let g = self.g;
        let Op::Reduce { op, axes, .. } = g.node(root).op.clone() else {
            return Err(self.unsupported("a reduction kernel without a reduction".into()));
        };
        let operand = g.operands(root)[0];
        let in_ty = g.ty(operand).clone();
        let rank = in_ty.rank();
        // The output space: the kept axes (one element for a reduction over all of them), so
        // that with the chunk axis the tiles stay within the rank limit.
        let kept_axes: Vec<usize> = (0..rank).filter(|k| !axes.contains(k)).collect();
        let kept: Vec<Dim> = kept_axes
            .iter()
            .map(|&k| in_ty.shape.dims()[k].clone())
            .collect();
        let space_dims = if kept.is_empty() {
            vec![Dim::Static(1)]
        } else {
            kept.clone()
        };
        let tile = choose_tile(&space_dims, tiles.reduction_out);
        let out_space = self.grid_space(&space_dims, &tile);
        let reduced_dims: Vec<Dim> = axes
            .iter()
            .map(|&a| in_ty.shape.dims()[a].clone())
            .collect();
        let mut count = self.b.index(1);
        for d in &reduced_dims {
            let d = self.b.dim(d);
            count = self.b.arith(IndexOp::Mul, count, d);
        }
        let static_count = reduced_dims
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(d.as_static()?));
        let chunk = static_count.map_or(tiles.reduction_chunk, |n| {
            ceil_pow2(n).min(tiles.reduction_chunk)
        });
        let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
        let acc_dtype = if arg {
            in_ty.dtype
        } else {
            reduce_accumulator(in_ty.dtype)
        };
        let acc_ty = Type::tile(acc_dtype, &tile);
        let mut init = vec![self.b.constant(identity(op, acc_dtype), acc_dtype, &tile)];
        let mut carried_types = vec![acc_ty.clone()];
        if arg {
            init.push(self.b.constant(0.0, DType::I64, &tile));
            carried_types.push(Type::tile(DType::I64, &tile));
        }
        let steps = self.b.ceil_div(count, chunk);
        let (zero, one) = (self.b.index(0), self.b.index(1));
        let jj = self.b.fresh();
        let carried: Vec<ValueId> = carried_types.iter().map(|_| self.b.fresh()).collect();
        self.b.open_block();
        // The chunk space: the output axes, then the flat reduced index.
        let mut inner = self.b.spaces[out_space].clone();
        inner.tile.push(chunk);
        inner.coords.push(jj);
        inner.extents.push(count);
        let chunk_axis = inner.tile.len() - 1;
        let inner_tile = inner.tile.clone();
        let inner = self.b.add_space(inner);
        let flat = Ix::axis(chunk_axis);
        let mut ix: Vec<Ix> = vec![Ix::constant(0); rank];
        for (position, &k) in kept_axes.iter().enumerate() {
            ix[k] = Ix::axis(position);
        }
        if let [a] = axes.as_slice() {
            // One reduced axis is the flat index itself: loads past its end pad, and `valid`
            // below masks them, so no index arithmetic (and no indexed load) is needed.
            ix[*a] = flat.clone();
        } else {
            let mut stride = self.b.index(1);
            for (&a, d) in axes.iter().zip(&reduced_dims).rev() {
                let q = self.b.ix_scalar_op(&flat, IndexOp::Div, stride, inner);
                let dv = self.b.dim(d);
                ix[a] = self.b.ix_scalar_op(&q, IndexOp::Rem, dv, inner);
                stride = self.b.arith(IndexOp::Mul, stride, dv);
            }
        }
        let x = self.value(operand, &ix, inner)?;
        let lo = self.b.index(0);
        let valid = self.b.in_range(&flat, lo, count, inner);
        let pad = self
            .b
            .constant(identity(op, in_ty.dtype), in_ty.dtype, &inner_tile);
        let x = self.b.emit(
            TileOp::Select {
                cond: valid,
                a: x,
                b: pad,
            },
            Type::tile(in_ty.dtype, &inner_tile),
        );
        let mut keep = tile.clone();
        keep.push(1);
        let yields = if arg {
            self.fold_arg(op, x, &keep, &carried, jj, chunk, in_ty.dtype)
        } else {
            self.fold_chunk(op, x, &keep, carried[0], acc_dtype, in_ty.dtype)
        };
        let body = self.close_block();
        let results = self.b.emit_multi(
            TileOp::For {
                start: zero,
                end: steps,
                step: one,
                var: jj,
                init,
                carried: carried
                    .iter()
                    .copied()
                    .zip(carried_types.iter().cloned())
                    .collect(),
                body,
                yields,
            },
            carried_types,
        );
        let out_dtype = g.ty(root).dtype;
        let mut value = if arg { results[1] } else { results[0] };
        if op == ReduceOp::Mean {
            let n = self
                .b
                .emit(TileOp::Splat { x: count }, Type::tile(DType::I64, &tile));
            let n = self
                .b
                .emit(TileOp::Cast { x: n }, Type::tile(acc_dtype, &tile));
            value = self.b.emit(
                TileOp::Binary {
                    op: BinaryOp::Div,
                    a: value,
                    b: n,
                },
                Type::tile(acc_dtype, &tile),
            );
        }
        if !arg && acc_dtype != out_dtype {
            value = self
                .b
                .emit(TileOp::Cast { x: value }, Type::tile(out_dtype, &tile));
        }
        // Whether the root keeps the reduced axes or not, they have size 1: the kept axes
        // alone give the layout.
        let view = self.row_major(
            &Shape::new(kept).map_err(|e| self.unsupported(e.to_string()))?,
            space_dims.len(),
        );
        self.store_whole(out, out_space, value, view);
        Ok(())
    }

    /// One chunk of a sum, product, max, min or mean folded into the carried value.
    fn fold_chunk(
        &mut self,
        op: ReduceOp,
        x: ValueId,
        keep: &[u64],
        acc: ValueId,
        acc_dtype: DType,
        dtype: DType,
    ) -> Vec<ValueId> {
        let tile = &keep[..keep.len() - 1];
        let base = if op == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            op
        };
        let axis = keep.len() - 1;
        let part = self.b.emit(
            TileOp::Reduce { op: base, x, axis },
            Type::tile(dtype, keep),
        );
        let mut part = self
            .b
            .emit(TileOp::Reshape { x: part }, Type::tile(dtype, tile));
        if acc_dtype != dtype {
            part = self
                .b
                .emit(TileOp::Cast { x: part }, Type::tile(acc_dtype, tile));
        }
        let combine = match base {
            ReduceOp::Prod => BinaryOp::Mul,
            ReduceOp::Max => BinaryOp::Maximum,
            ReduceOp::Min => BinaryOp::Minimum,
            _ => BinaryOp::Add,
        };
        vec![self.b.emit(
            TileOp::Binary {
                op: combine,
                a: acc,
                b: part,
            },
            Type::tile(acc_dtype, tile),
        )]
    }

    /// One chunk of an argmax/argmin: the chunk's best and its flat position, kept where it
    /// beats the carried best (earlier wins ties; the first NaN wins).
    #[allow(clippy::too_many_arguments)] // the loop's state, passed as it is
    fn fold_arg(
        &mut self,
        op: ReduceOp,
        x: ValueId,
        keep: &[u64],
        carried: &[ValueId],
        jj: ValueId,
        chunk: u64,
        dtype: DType,
    ) -> Vec<ValueId> {
        let tile = &keep[..keep.len() - 1];
        let axis = keep.len() - 1;
        let (value_op, better_op) = if op == ReduceOp::ArgMax {
            (ReduceOp::Max, BinaryOp::Gt)
        } else {
            (ReduceOp::Min, BinaryOp::Lt)
        };
        let (v_ty, i_ty, b_ty) = (
            Type::tile(dtype, tile),
            Type::tile(DType::I64, tile),
            Type::tile(DType::Bool, tile),
        );
        let best = self.b.emit(
            TileOp::Reduce {
                op: value_op,
                x,
                axis,
            },
            Type::tile(dtype, keep),
        );
        let best = self.b.emit(TileOp::Reshape { x: best }, v_ty.clone());
        let at = self
            .b
            .emit(TileOp::Reduce { op, x, axis }, Type::tile(DType::I64, keep));
        let at = self.b.emit(TileOp::Reshape { x: at }, i_ty.clone());
        let c = self.b.index(chunk as i64);
        let base = self.b.arith(IndexOp::Mul, jj, c);
        let base = self.b.emit(TileOp::Splat { x: base }, i_ty.clone());
        let at = self.b.emit(
            TileOp::IndexArith {
                op: IndexOp::Add,
                a: base,
                b: at,
            },
            i_ty.clone(),
        );
        let binary = |me: &mut Self, op: BinaryOp, a: ValueId, b: ValueId| {
            me.b.emit(TileOp::Binary { op, a, b }, b_ty.clone())
        };
        let mut take = binary(self, better_op, best, carried[0]);
        if dtype.is_float() {
            // A NaN wins over any number, and the first NaN stays.
            let new_nan = binary(self, BinaryOp::Ne, best, best);
            let old_nan = binary(self, BinaryOp::Ne, carried[0], carried[0]);
            let old_ok = self.b.emit(
                TileOp::Unary {
                    op: UnaryOp::Not,
                    x: old_nan,
                },
                b_ty.clone(),
            );
            let nan_wins = binary(self, BinaryOp::And, new_nan, old_ok);
            let better = binary(self, BinaryOp::And, take, old_ok);
            take = binary(self, BinaryOp::Or, better, nan_wins);
        }
        // The first chunk always sets the carried best.
        let jj_tile = self.b.emit(TileOp::Splat { x: jj }, i_ty.clone());
        let zero = self.b.constant(0.0, DType::I64, tile);
        let first = self.b.emit(
            TileOp::IndexCmp {
                op: CmpOp::Eq,
                a: jj_tile,
                b: zero,
            },
            b_ty.clone(),
        );
        let take = binary(self, BinaryOp::Or, take, first);
        let value = self.b.emit(
            TileOp::Select {
                cond: take,
                a: best,
                b: carried[0],
            },
            v_ty,
        );
        let index = self.b.emit(
            TileOp::Select {
                cond: take,
                a: at,
                b: carried[1],
            },
            i_ty,
        );
        vec![value, index]
    }

    /// A state update: the value's tile per program, stored into the state in place (all of it,
    /// or a slice at a static or run-time position).
    pub fn lower_state_update(
        &mut self,
        root: NodeId,
        state: usize,
        tiles: &TileShapes,
    ) -> Res<()> {
        let g = self.g;
        let operands = g.operands(root);
        let value = operands[1];
        let state_ty = g.ty(operands[0]).clone();
        let shape = g.ty(value).shape.clone();
        let (region, start) = match g.node(root).op {
            Op::StateWriteSlice { axis, start } => {
                let len = shape.dims()[axis].clone();
                let (start, param) = match start {
                    Some(s) => (SliceStart::Static(s), None),
                    None => {
                        let pos = operands[2];
                        let p = self
                            .b
                            .param(self.buffer_of[&pos], g.ty(pos).dtype, Access::Shared);
                        (SliceStart::Param(p), Some(p))
                    }
                };
                (Region::Slice { axis, start, len }, param)
            }
            _ => (Region::Whole, None),
        };
        // Declared before the value is computed: reads of the state are then token-ordered.
        let param = self.b.param(state, state_ty.dtype, Access::Mutable);
        let extents = space_dims(&shape);
        let tile = choose_tile(&extents, tiles.elementwise);
        let space = self.grid_space(&extents, &tile);
        let v = self.root_value(value, space)?;
        let strides = self.b.contiguous_strides(state_ty.shape.dims());
        let offset = match (&region, start) {
            (
                Region::Slice {
                    axis,
                    start: SliceStart::Static(s),
                    ..
                },
                _,
            ) => {
                let s = self.b.index(*s as i64);
                self.b.arith(IndexOp::Mul, s, strides[*axis])
            }
            (Region::Slice { axis, .. }, Some(p)) => {
                let zero = self.b.index(0);
                let pos = self.b.emit(
                    TileOp::LoadScalar {
                        param: p,
                        index: zero,
                    },
                    Type::Index,
                );
                self.b.arith(IndexOp::Mul, pos, strides[*axis])
            }
            _ => self.b.index(0),
        };
        let view = if state_ty.rank() == 0 {
            StoreView::Strided {
                strides: vec![Stride::constant(0)],
                offset: 0,
            }
        } else {
            StoreView::Rows {
                dims: state_ty.shape.dims().to_vec(),
            }
        };
        self.b.writes.push(WriteRegion { param, region });
        self.store(param, space, v, view, offset);
        Ok(())
    }
}

/// A matmul kernel's output tile (over the matmul's axes), its K dim and its K step.
pub struct MatmulTiling {
    /// Tile size per axis of the matmul's result, in elements.
    pub tile: Vec<u64>,
    /// The contracted dim.
    pub k: Dim,
    /// The K step: elements of `k` each loop iteration multiplies.
    pub tk: u64,
}

/// The fewest K steps each program of a split K loop takes: fewer leave too little to overlap
/// the loads of one step with the products of the last.
pub const MIN_SPLIT_STEPS: u64 = 4;

impl MatmulTiling {
    /// The tiling of matmul node `mm` under `tiles`: smaller tiles for integer and vector-unit
    /// dtypes, wide ones for a wide enough product, a matrix-vector K step for a tile of few rows.
    pub fn new(g: &Graph, mm: NodeId, tiles: &TileShapes) -> MatmulTiling {
        let shape = &g.ty(mm).shape;
        let rank = shape.rank();
        let a = g.operands(mm)[0];
        let k = g.ty(a).shape.dims()[g.ty(a).rank() - 1].clone();
        let dtype = g.ty(mm).dtype;
        let (tm, tn) = if dtype.is_int() {
            (
                tiles.matmul_m.min(tiles.int_matmul),
                tiles.matmul_n.min(tiles.int_matmul),
            )
        } else if on_vector_units(dtype) {
            (
                tiles.matmul_m.min(tiles.vector_matmul_m),
                tiles.matmul_n.min(tiles.vector_matmul_n),
            )
        } else if wide_enough(shape.dims(), tiles) {
            (tiles.matmul_m, tiles.matmul_wide_n)
        } else {
            (tiles.matmul_m, tiles.matmul_n)
        };
        let mut tile = vec![1u64; rank];
        tile[rank - 2] = tile_for(&shape.dims()[rank - 2], tm);
        tile[rank - 1] = tile_for(&shape.dims()[rank - 1], tn);
        let rows = tile[rank - 2];
        let k_step = if rows <= MATVEC_M {
            tiles.matvec_k
        } else if rows <= QUANT_SMALL_M
            && tiles.quant_matmul_k > 0
            && quantized_operand(g, g.operands(mm)[1])
        {
            tiles.quant_matmul_k
        } else {
            tiles.matmul_k
        };
        let tk = tile_for(&k, k_step);
        MatmulTiling { tile, k, tk }
    }

    /// Over how many programs a float matmul `mm` splits its K loop ([`splits_to_fill`], each
    /// program keeping [`MIN_SPLIT_STEPS`] steps).
    pub fn splits(g: &Graph, mm: NodeId, tiles: &TileShapes) -> Option<u64> {
        if !g.ty(mm).dtype.is_float() {
            return None;
        }
        let t = MatmulTiling::new(g, mm, tiles);
        let steps = t.k.as_static()?.div_ceil(t.tk);
        splits_to_fill(
            g.ty(mm).shape.dims(),
            &t.tile,
            steps,
            MIN_SPLIT_STEPS,
            tiles,
        )
    }
}

/// How many ops up from a product's `b` operand [`quantized_operand`] looks for the cast of a
/// packed weight (AWQ's is six: words, shift, mask, subtract, cast, scale).
const PROLOGUE_DEPTH: usize = 8;

/// Whether `b` is computed from integer or 8-bit float values it casts (a quantized weight
/// dequantized by the graph, which fusion puts in the product's prologue) within
/// [`PROLOGUE_DEPTH`] ops: its tile is then a fraction of the bytes of an f16 one.
fn quantized_operand(g: &Graph, b: NodeId) -> bool {
    let mut frontier = vec![b];
    for _ in 0..PROLOGUE_DEPTH {
        let mut next = Vec::new();
        for n in frontier {
            let operands = g.operands(n);
            if matches!(g.node(n).op, Op::Cast { .. }) {
                let from = g.ty(operands[0]).dtype;
                if from.is_int() || from.float8().is_some() {
                    return true;
                }
            }
            next.extend(operands.iter().copied());
        }
        if next.is_empty() {
            return false;
        }
        frontier = next;
    }
    false
}

/// Whether a float product of `dtype` runs on the vector units (f32, f64): the tensor cores'
/// paths for them would round its operands.
pub(super) fn on_vector_units(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64)
}

/// Whether a float matmul output of `dims` takes [`TileShapes::matmul_wide_n`]: wider than
/// `matmul_n`, not a matrix-vector product, and still [`TileShapes::split_programs`] tiles or
/// more at that width (static dims only).
fn wide_enough(dims: &[Dim], tiles: &TileShapes) -> bool {
    let rank = dims.len();
    if rank < 2 || tiles.matmul_wide_n <= tiles.matmul_n {
        return false;
    }
    let mut tile = vec![1u64; rank];
    tile[rank - 2] = tile_for(&dims[rank - 2], tiles.matmul_m);
    if tile[rank - 2] <= MATVEC_M {
        return false;
    }
    tile[rank - 1] = tiles.matmul_wide_n;
    static_programs(dims, &tile).is_some_and(|c| c >= tiles.split_programs.max(1))
}

/// How many tiles of `tile` cover static `dims` (`None` when a dim is symbolic).
fn static_programs(dims: &[Dim], tile: &[u64]) -> Option<u64> {
    dims.iter()
        .zip(tile)
        .map(|(d, &t)| d.as_static().map(|n| n.div_ceil(t)))
        .product()
}

/// The spaces of a split loop's first kernel (`KernelLowering::split_grid`): `store` over
/// `[splits, ..dims]`, `space` the same without the split axis, and the program's steps.
pub struct SplitGrid {
    /// The space of the partial results, `[splits, ..dims]`.
    pub store: SpaceId,
    /// The space of the result, without the split axis.
    pub space: SpaceId,
    /// The program's share of the loop: its first step and one past its last (index scalars).
    pub steps: (ValueId, ValueId),
}

/// Over how many programs to split a loop of `steps` steps whose kernel tiles static `dims` by
/// `tile`: the smallest power of two that brings the programs to
/// [`TileShapes::split_programs`] while each keeps `min_steps` steps; `None` for one (or for
/// symbolic dims).
pub fn splits_to_fill(
    dims: &[Dim],
    tile: &[u64],
    steps: u64,
    min_steps: u64,
    tiles: &TileShapes,
) -> Option<u64> {
    let programs = static_programs(dims, tile)?;
    let mut splits = 1;
    while programs * splits < tiles.split_programs && steps / (2 * splits) >= min_steps {
        splits *= 2;
    }
    (splits > 1).then_some(splits)
}

/// The dims of a space for values of `shape`: a scalar lives in a space of one element.
/// The axis of a permute's result that is its operand's innermost axis, when that is not the
/// result's innermost axis too (a transpose, such as the channels-last copies around a conv).
fn transposed_axis(op: &Op) -> Option<usize> {
    let Op::Permute { perm } = op else {
        return None;
    };
    let innermost = perm.len().checked_sub(1)?;
    perm.iter()
        .position(|&p| p == innermost)
        .filter(|&axis| axis != innermost)
}

fn space_dims(shape: &Shape) -> Vec<Dim> {
    if shape.rank() == 0 {
        vec![Dim::Static(1)]
    } else {
        shape.dims().to_vec()
    }
}

/// A power-of-two tile along a dim: at most `max`, no more than a small static dim needs.
pub(super) fn tile_for(d: &Dim, max: u64) -> u64 {
    match d {
        Dim::Static(n) => ceil_pow2(*n).min(max),
        Dim::Symbolic(_) | Dim::Expr(_) => max,
    }
}

/// The matmul accumulator's dtype for operands of `dtype`.
pub fn accumulator(dtype: DType) -> DType {
    match dtype {
        DType::F64 => DType::F64,
        d if d.is_int() => DType::I64,
        _ => DType::F32,
    }
}

/// The carried dtype of a general reduction: f32 for 16- and 8-bit floats, else the input's.
fn reduce_accumulator(dtype: DType) -> DType {
    if dtype.is_narrow_float() {
        DType::F32
    } else {
        dtype
    }
}

/// An operand's indices in its K-step space of `rank` axes: batch dims right-aligned
/// (broadcast ones at 0), then its two matrix axes.
pub(super) fn operand_ix(shape: &Shape, rank: usize) -> Vec<Ix> {
    let r = shape.rank();
    let skip = rank - r;
    (0..r)
        .map(|k| {
            if k + 2 >= r || shape.dims()[k] != Dim::Static(1) {
                Ix::axis(k + skip)
            } else {
                Ix::constant(0)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::quant::WeightFormat;
    use tir_graph::{shape, GraphBuilder};

    /// `x: f16[m, 256]` times a `[256, 64]` weight stored in `format` (f16 when `None`):
    /// the K step lowering picks for its product.
    fn k_step(m: u64, format: Option<WeightFormat>, tiles: &TileShapes) -> u64 {
        let g = GraphBuilder::new();
        let x = g.input("x", DType::F16, shape![m, 256]).unwrap();
        let w = match format {
            Some(f) => f.declare(&g, "w", 256, 64).unwrap(),
            None => g.parameter("w", DType::F16, shape![256, 64]).unwrap(),
        };
        g.output("y", &x.matmul(&w).unwrap()).unwrap();
        let graph = g.finish().unwrap();
        let mm = graph
            .node_ids()
            .find(|&n| graph.node(n).op == Op::MatMul)
            .unwrap();
        MatmulTiling::new(&graph, mm, tiles).tk
    }

    /// At a small batch a quantized weight's product takes `quant_matmul_k`, an f16 weight's
    /// `matmul_k`; one row takes `matvec_k` either way, and 0 leaves `matmul_k`.
    #[test]
    fn quantized_products_take_their_own_k_step_at_small_batches() {
        let mut tiles = TileShapes {
            matmul_m: 128,
            matmul_k: 32,
            matvec_k: 64,
            quant_matmul_k: 128,
            ..TileShapes::default()
        };
        let formats = [
            WeightFormat::Int8,
            WeightFormat::Fp8(tir_graph::quant::Fp8Scale::Row),
            WeightFormat::Awq { group: 128 },
            WeightFormat::Gptq { group: 128 },
        ];
        for f in formats {
            assert_eq!(k_step(16, Some(f), &tiles), 128, "{f:?} at 16 rows");
            assert_eq!(k_step(1, Some(f), &tiles), 64, "{f:?} at one row");
            assert_eq!(k_step(64, Some(f), &tiles), 32, "{f:?} at 64 rows");
        }
        assert_eq!(k_step(16, None, &tiles), 32);
        tiles.quant_matmul_k = 0;
        assert_eq!(k_step(16, Some(WeightFormat::Int8), &tiles), 32);
    }
}
