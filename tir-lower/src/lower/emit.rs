//! Computing a kernel member at index tiles: the value of node `n` at element indices `ix` (one
//! index tile per dim of `n`) over a space. Elementwise ops recurse with broadcast-adjusted
//! indices, layout ops transform the indices (an index map, never a copy), reductions reduce
//! their operand along the row axis, and values the kernel does not compute are loaded: through
//! a strided view when the indices are affine and the buffer's strides static, by an indexed
//! load otherwise.

use super::builder::{Ix, KernelBuilder, SpaceId};
use super::LowerError;
use crate::program::Buffer;
use crate::tile::{Access, IndexOp, TileOp, Type, ValueId};
use std::collections::{BTreeSet, HashMap};
use tir_graph::{BinaryOp, ConstData, DType, Dim, Graph, NodeId, Op, ReduceOp, Shape};
use tir_opt::layout::StridedView;

/// The two spaces of a row-reduction kernel: whole rows, and one element per row.
#[derive(Clone, Copy, Debug)]
pub struct RowSpaces {
    /// The space of whole rows.
    pub full: SpaceId,
    /// The space of one element per row (the row axis of size 1).
    pub reduced: SpaceId,
    /// The row axis (the last) and the row length.
    pub axis: usize,
    /// The row length, in elements.
    pub len: u64,
}

/// Inside an attention key loop whose blocks all lie in keys `lo..hi`: the (space, axis) pairs
/// whose coordinate is the key, so that a concat along the keys whose part spans `lo..hi`
/// reads that part alone, through an affine index (a view load) rather than a gather.
#[derive(Clone, Debug)]
pub struct PinnedKeys {
    /// The (space, axis) pairs whose coordinate is the key index.
    pub axes: Vec<(SpaceId, usize)>,
    /// The first key the loop's blocks cover.
    pub lo: u64,
    /// One past the last key they cover.
    pub hi: u64,
}

/// The state of lowering one kernel.
pub struct KernelLowering<'a> {
    /// The kernel being emitted.
    pub b: KernelBuilder,
    /// The fused graph's graph.
    pub g: &'a Graph,
    /// The nodes the kernel computes.
    pub members: BTreeSet<NodeId>,
    /// The program's buffers.
    pub buffers: &'a [Buffer],
    /// The buffer holding each node's value that is stored or read from memory.
    pub buffer_of: &'a HashMap<NodeId, usize>,
    /// Values already computed, with the depth of the block that defines them.
    pub memo: HashMap<(NodeId, Vec<Ix>, SpaceId), (ValueId, usize)>,
    /// The spaces of a row-reduction kernel, if this is one.
    pub rows: Option<RowSpaces>,
    /// The key axes pinned inside an attention key loop, if any.
    pub pinned_keys: Option<PinnedKeys>,
}

type Res<T> = Result<T, LowerError>;

impl KernelLowering<'_> {
    /// A [`LowerError::Unsupported`] naming this kernel.
    pub fn unsupported(&self, reason: String) -> LowerError {
        LowerError::Unsupported {
            kernel: self.b.name.clone(),
            reason,
        }
    }

    /// The member whose op `is` matches: the op a kernel of that kind is built around.
    pub fn member_where(&self, what: &str, is: impl Fn(&Op) -> bool) -> Res<NodeId> {
        self.members
            .iter()
            .copied()
            .find(|&m| is(&self.g.node(m).op))
            .ok_or_else(|| self.unsupported(format!("a {what} kernel without its {what}")))
    }

    fn tile_shape(&self, space: SpaceId) -> Vec<u64> {
        self.b.spaces[space].tile.clone()
    }

    /// `a op b` of type `ty`.
    pub(super) fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId, ty: &Type) -> ValueId {
        self.b.emit(TileOp::Binary { op, a, b }, ty.clone())
    }

    /// The value of `node` at `ix` over `space`.
    pub fn value(&mut self, node: NodeId, ix: &[Ix], space: SpaceId) -> Res<ValueId> {
        let key = (node, ix.to_vec(), space);
        if let Some(&(v, _)) = self.memo.get(&key) {
            return Ok(v);
        }
        let v = if let Some(reduced) = self.row_invariant_space(node, ix, space) {
            let r = self.value(node, ix, reduced)?;
            let ty = Type::tile(self.g.ty(node).dtype, &self.tile_shape(space));
            self.b.emit(TileOp::Broadcast { x: r }, ty)
        } else if self.members.contains(&node) {
            self.compute(node, ix, space)?
        } else if let Some(c) = single_constant(&self.g.node(node).op) {
            let ty = Type::tile(self.g.ty(node).dtype, &self.tile_shape(space));
            self.b.emit(TileOp::Constant { value: c }, ty)
        } else {
            self.load(node, ix, space, 0.0)?
        };
        self.memo.insert(key, (v, self.b.depth()));
        Ok(v)
    }

    /// The one-element-per-row space, when `node` is an elementwise member asked for over
    /// whole rows whose value at `ix` is the same all along the row (it depends on the row
    /// axis through reductions only, like a norm's `rsqrt(var + eps)`): it is then computed
    /// once per row and broadcast, not once per element.
    fn row_invariant_space(&self, node: NodeId, ix: &[Ix], space: SpaceId) -> Option<SpaceId> {
        let rows = self.rows?;
        let elementwise = matches!(
            self.g.node(node).op,
            Op::Unary(_) | Op::Cast { .. } | Op::Binary(_) | Op::Select
        );
        (space == rows.full
            && self.members.contains(&node)
            && elementwise
            && self.row_invariant(node, ix, rows.axis, &mut HashMap::new()))
        .then_some(rows.reduced)
    }

    /// Whether `node` at `ix` does not vary along `axis` (see [`Self::row_invariant_space`]).
    fn row_invariant(
        &self,
        node: NodeId,
        ix: &[Ix],
        axis: usize,
        seen: &mut HashMap<(NodeId, Vec<Ix>), bool>,
    ) -> bool {
        let mentions_axis = ix.iter().any(|i| match i {
            Ix::Lin { terms, .. } => terms.iter().any(|&(a, c)| a == axis && c != 0),
            Ix::Dyn(_) => true,
        });
        if mentions_axis {
            return false;
        }
        if !self.members.contains(&node) {
            return true;
        }
        if let Some(&known) = seen.get(&(node, ix.to_vec())) {
            return known;
        }
        let g = self.g;
        let invariant = match g.node(node).op {
            Op::Reduce { .. } => true,
            Op::Unary(_) | Op::Cast { .. } | Op::Binary(_) | Op::Select => {
                g.operands(node).iter().all(|&o| {
                    let inner = broadcast_ix(&g.ty(o).shape, &g.ty(node).shape, ix);
                    self.row_invariant(o, &inner, axis, seen)
                })
            }
            _ => false,
        };
        seen.insert((node, ix.to_vec()), invariant);
        invariant
    }

    /// Closes the innermost block, forgetting the values it defined.
    pub fn close_block(&mut self) -> crate::tile::Block {
        let depth = self.b.depth();
        self.memo.retain(|_, (_, d)| *d < depth);
        self.b.close_block()
    }

    fn compute(&mut self, node: NodeId, ix: &[Ix], space: SpaceId) -> Res<ValueId> {
        let g = self.g;
        let op = g.node(node).op.clone();
        let dtype = g.ty(node).dtype;
        let shape = self.tile_shape(space);
        let operands = g.operands(node);
        let ty = Type::tile(dtype, &shape);
        match op {
            Op::Unary(u) => {
                let x = self.operand(node, operands[0], ix, space)?;
                Ok(self.b.emit(TileOp::Unary { op: u, x }, ty))
            }
            Op::Cast { .. } => {
                let x = self.operand(node, operands[0], ix, space)?;
                Ok(self.b.emit(TileOp::Cast { x }, ty))
            }
            Op::Binary(op) => {
                let a = self.operand(node, operands[0], ix, space)?;
                let b = self.operand(node, operands[1], ix, space)?;
                Ok(self.b.emit(TileOp::Binary { op, a, b }, ty))
            }
            Op::Select => {
                let cond = self.operand(node, operands[0], ix, space)?;
                let a = self.operand(node, operands[1], ix, space)?;
                let b = self.operand(node, operands[2], ix, space)?;
                Ok(self.b.emit(TileOp::Select { cond, a, b }, ty))
            }
            Op::Reduce { op, axes, keepdims } => {
                self.row_reduce(node, op, &axes, keepdims, ix, space)
            }
            Op::Permute { perm } => {
                let mut inner = vec![Ix::constant(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inner[p] = ix[i].clone();
                }
                self.value(operands[0], &inner, space)
            }
            Op::BroadcastTo { .. } => {
                let inner = broadcast_ix(&g.ty(operands[0]).shape, &g.ty(node).shape, ix);
                self.value(operands[0], &inner, space)
            }
            Op::Slice { ranges } => {
                let mut inner = Vec::with_capacity(ranges.len());
                for (r, i) in ranges.iter().zip(ix) {
                    inner.push(match affine(i, r.step as i64, r.start as i64) {
                        Some(a) => a,
                        None => {
                            let step = self.b.index(r.step as i64);
                            let start = self.b.index(r.start as i64);
                            let scaled = self.b.ix_scalar_op(i, IndexOp::Mul, step, space);
                            self.b.ix_scalar_op(&scaled, IndexOp::Add, start, space)
                        }
                    });
                }
                self.value(operands[0], &inner, space)
            }
            Op::Squeeze { axes } => {
                let mut inner = Vec::new();
                let mut it = ix.iter();
                for k in 0..g.ty(operands[0]).rank() {
                    if axes.contains(&k) {
                        inner.push(Ix::constant(0));
                    } else {
                        inner.push(it.next().cloned().unwrap_or(Ix::constant(0)));
                    }
                }
                self.value(operands[0], &inner, space)
            }
            Op::Unsqueeze { axes } => {
                let inner: Vec<Ix> = ix
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !axes.contains(k))
                    .map(|(_, i)| i.clone())
                    .collect();
                self.value(operands[0], &inner, space)
            }
            Op::Reshape { .. } => {
                let (from, to) = (&g.ty(operands[0]).shape, &g.ty(node).shape);
                if let Some((inner, split)) = self.merge_by_tile(from, to, ix, space) {
                    let x = self.value(operands[0], &inner, split)?;
                    return Ok(self.b.emit(TileOp::Reshape { x }, ty));
                }
                let inner = self.reshape_ix(from, to, ix, space);
                self.value(operands[0], &inner, space)
            }
            Op::Concat { axis } => self.concat(node, axis, &operands, ix, space),
            Op::Pad { pads, value } => self.pad(node, &pads, value.0, ix, space),
            Op::Gather { axis } => self.gather(node, axis, &operands, ix, space),
            Op::StateAssign => self.value(operands[1], ix, space),
            Op::Iota { .. } => Ok(self.b.materialize(&ix[0], space)),
            Op::DimValue { dim } => {
                let value = self.b.dim(&dim);
                Ok(self.b.splat(value, space))
            }
            Op::StateWriteSlice { axis, start } => self.write_slice(node, axis, start, ix, space),
            Op::MatMul => Err(self.unsupported("a matmul outside a matmul kernel".into())),
            other => Err(self.unsupported(format!(
                "{} cannot be computed inside a kernel",
                other.name()
            ))),
        }
    }

    /// Operand `operand` of `node` at the indices that broadcasting gives it.
    pub(super) fn operand(
        &mut self,
        node: NodeId,
        operand: NodeId,
        ix: &[Ix],
        space: SpaceId,
    ) -> Res<ValueId> {
        let inner = broadcast_ix(&self.g.ty(operand).shape, &self.g.ty(node).shape, ix);
        self.value(operand, &inner, space)
    }

    /// Loads the value of `node` (a source or another kernel's output) at `ix`.
    pub fn load(&mut self, node: NodeId, ix: &[Ix], space: SpaceId, padding: f64) -> Res<ValueId> {
        let buffer = *self
            .buffer_of
            .get(&node)
            .ok_or_else(|| self.unsupported(format!("{node} has no buffer")))?;
        self.load_buffer(buffer, ix, space, padding)
    }

    /// Loads the elements of `buffer` at `ix`.
    pub fn load_buffer(
        &mut self,
        buffer: usize,
        ix: &[Ix],
        space: SpaceId,
        padding: f64,
    ) -> Res<ValueId> {
        let ty = self.buffers[buffer].ty.clone();
        let param = self.b.param(buffer, ty.dtype, Access::Shared);
        let shape = self.tile_shape(space);
        let tile_ty = Type::tile(ty.dtype, &shape);
        let token = if self.b.is_mutable(param) {
            Some(self.b.token())
        } else {
            None
        };
        if let Some(view) = self.affine_view(param, &ty.shape, ix, space) {
            let coords = self.b.spaces[space].coords.clone();
            let op = TileOp::Load {
                view,
                coords,
                padding,
                token,
            };
            return Ok(match token {
                None => self.b.emit(op, tile_ty),
                Some(_) => {
                    let ids = self.b.emit_multi(op, vec![tile_ty, Type::Token]);
                    self.b.set_token(ids[1]);
                    ids[0]
                }
            });
        }
        if token.is_some() {
            return Err(self.unsupported(format!(
                "{} is read through a non-affine index map in the kernel that writes it",
                self.buffers[buffer].name
            )));
        }
        let view = self.full_view(param, &ty.shape);
        let indices: Vec<ValueId> = ix.iter().map(|i| self.b.materialize(i, space)).collect();
        let mask = self.b.constant(1.0, DType::Bool, &shape);
        let op = TileOp::LoadIndexed {
            view,
            indices,
            mask,
            padding,
        };
        Ok(self.b.emit(op, tile_ty))
    }

    /// The view of the whole buffer with row-major strides.
    pub fn full_view(&mut self, param: usize, shape: &Shape) -> ValueId {
        let offset = self.b.index(0);
        let extents: Vec<ValueId> = shape.dims().iter().map(|d| self.b.dim(d)).collect();
        let strides = self.b.contiguous_strides(shape.dims());
        self.b.view(param, offset, extents, strides)
    }

    /// A view over `space` whose element `x` is the buffer element at `ix(x)`, when every index
    /// is affine: static strides when the buffer's are, scalar ones (from its dims) otherwise.
    fn affine_view(
        &mut self,
        param: usize,
        shape: &Shape,
        ix: &[Ix],
        space: SpaceId,
    ) -> Option<ValueId> {
        let rank = self.b.spaces[space].tile.len();
        type Lin<'a> = (&'a [(usize, i64)], i64, Option<ValueId>);
        let lins: Vec<Lin> = ix
            .iter()
            .map(|i| match i {
                Ix::Lin {
                    terms,
                    offset,
                    shift,
                } => Some((terms.as_slice(), *offset, *shift)),
                Ix::Dyn(_) => None,
            })
            .collect::<Option<_>>()?;
        let shifted = lins.iter().any(|(_, _, s)| s.is_some());
        if let Some(buffer_strides) =
            StridedView::contiguous(shape).and_then(|v| v.static_strides())
        {
            let mut strides = vec![0i64; rank];
            let mut offset = 0i64;
            for ((terms, o, _), &bs) in lins.iter().zip(&buffer_strides) {
                offset = offset.checked_add(bs.checked_mul(*o)?)?;
                for &(axis, coeff) in *terms {
                    strides[axis] = strides[axis].checked_add(bs.checked_mul(coeff)?)?;
                }
            }
            if !shifted {
                return Some(self.view_over(param, space, offset, &strides));
            }
            let mut offset = self.b.index(offset);
            for ((_, _, shift), &bs) in lins.iter().zip(&buffer_strides) {
                if let Some(x) = shift {
                    let bs = self.b.index(bs);
                    let term = self.b.arith(IndexOp::Mul, bs, *x);
                    offset = self.b.arith(IndexOp::Add, offset, term);
                }
            }
            let strides: Vec<ValueId> = strides.iter().map(|&s| self.b.index(s)).collect();
            let extents = self.b.spaces[space].extents.clone();
            return Some(self.b.view(param, offset, extents, strides));
        }
        let buffer_strides = self.b.contiguous_strides(shape.dims());
        let zero = self.b.index(0);
        let mut strides = vec![zero; rank];
        let mut offset = zero;
        for ((terms, o, shift), &bs) in lins.iter().zip(&buffer_strides) {
            let o = self.b.index(*o);
            let o = match shift {
                Some(x) => self.b.arith(IndexOp::Add, o, *x),
                None => o,
            };
            let term = self.b.arith(IndexOp::Mul, bs, o);
            offset = self.b.arith(IndexOp::Add, offset, term);
            for &(axis, coeff) in *terms {
                let c = self.b.index(coeff);
                let term = self.b.arith(IndexOp::Mul, bs, c);
                strides[axis] = self.b.arith(IndexOp::Add, strides[axis], term);
            }
        }
        let extents = self.b.spaces[space].extents.clone();
        Some(self.b.view(param, offset, extents, strides))
    }

    /// A view of parameter `param` over `space`'s extents with static `offset` and `strides`, in
    /// elements.
    pub fn view_over(
        &mut self,
        param: usize,
        space: SpaceId,
        offset: i64,
        strides: &[i64],
    ) -> ValueId {
        let offset = self.b.index(offset);
        let strides: Vec<ValueId> = strides.iter().map(|&s| self.b.index(s)).collect();
        let extents = self.b.spaces[space].extents.clone();
        self.b.view(param, offset, extents, strides)
    }

    /// Indices of a reshape's operand. The two shapes are cut into groups of dims with equal
    /// products ([`reshape_groups`]): a group that keeps or splits one operand dim gives it the
    /// affine combination of the result's indices; a group that merges operand dims gives each
    /// of them an index scalar per program, and the innermost the result's index shifted, when
    /// every tile along the merged axis lies inside one row of the innermost dim (merging heads
    /// under a K step that divides the head size). Anything else is linearized and split again
    /// with index arithmetic.
    fn reshape_ix(&mut self, from: &Shape, to: &Shape, ix: &[Ix], space: SpaceId) -> Vec<Ix> {
        let Some(groups) = reshape_groups(from, to) else {
            return self.reshape_linearized(from, to, ix, space);
        };
        let mut inner = vec![Ix::constant(0); from.rank()];
        for (f, t) in &groups {
            if let [j] = f.as_slice() {
                inner[*j] = self.split_ix(to, t, ix, space);
                continue;
            }
            match t.as_slice() {
                [i] => match self.merge_ix(from, f, &ix[*i], space) {
                    Some(parts) => {
                        for (&j, part) in f.iter().zip(parts) {
                            inner[j] = part;
                        }
                    }
                    None => return self.reshape_linearized(from, to, ix, space),
                },
                _ => return self.reshape_linearized(from, to, ix, space),
            }
        }
        inner
    }

    /// A reshape that merges two operand dims `[o, d]` into one result dim whose index is
    /// axis `a` of `space`, when `d` (static) divides the tile along `a`: each program's tile
    /// is then a row-major `[T / d, d]` block of the operand, computed over a space with `a`
    /// split in two and reshaped (the eight nibbles of AWQ's words: the packed words are loaded
    /// once per tile, not gathered per element). The operand's indices in that space and the
    /// space; `None` for any other reshape or when an index is not affine.
    fn merge_by_tile(
        &mut self,
        from: &Shape,
        to: &Shape,
        ix: &[Ix],
        space: SpaceId,
    ) -> Option<(Vec<Ix>, SpaceId)> {
        let groups = reshape_groups(from, to)?;
        let merged: Vec<&(Vec<usize>, Vec<usize>)> =
            groups.iter().filter(|(f, _)| f.len() > 1).collect();
        let [(f, t)] = merged.as_slice() else {
            return None;
        };
        let ([o, j], [i]) = (f.as_slice(), t.as_slice()) else {
            return None;
        };
        let a = ix[*i].as_axis()?;
        let d = from.dims()[*j].as_static()?;
        let s = self.b.spaces[space].clone();
        // A tile inside one row of `d` takes `merge_ix`'s scalar indices instead.
        let fits = s.tile[a] > d && s.tile[a].is_multiple_of(d);
        if !fits || groups.iter().any(|(_, t)| t.len() != 1) {
            return None;
        }
        // Every other index is affine and independent of `a`: renumber the axes after `a`.
        let renumber = |x: &Ix| -> Option<Ix> {
            let Ix::Lin {
                terms,
                offset,
                shift,
            } = x
            else {
                return None;
            };
            let terms = terms
                .iter()
                .map(|&(k, c)| match k.cmp(&a) {
                    std::cmp::Ordering::Less => Some((k, c)),
                    std::cmp::Ordering::Equal => None,
                    std::cmp::Ordering::Greater => Some((k + 1, c)),
                })
                .collect::<Option<Vec<_>>>()?;
            Some(Ix::Lin {
                terms,
                offset: *offset,
                shift: *shift,
            })
        };
        let mut inner = vec![Ix::constant(0); from.rank()];
        for (f, t) in &groups {
            if let [k] = f.as_slice() {
                inner[*k] = renumber(&ix[t[0]])?;
            }
        }
        inner[*o] = Ix::axis(a);
        inner[*j] = Ix::axis(a + 1);
        let d_v = self.b.index(d as i64);
        let outer_extent = self.b.ceil_div(s.extents[a], d);
        let zero = self.b.index(0);
        let mut split = s;
        split.tile[a] /= d;
        split.tile.insert(a + 1, d);
        split.coords.insert(a + 1, zero);
        split.extents[a] = outer_extent;
        split.extents.insert(a + 1, d_v);
        Some((inner, self.b.add_space(split)))
    }

    /// The index of an operand dim that result dims `t` (static but perhaps the last) split:
    /// `Σ ix[t_k] * (product of the dims after t_k)`.
    fn split_ix(&mut self, to: &Shape, t: &[usize], ix: &[Ix], space: SpaceId) -> Ix {
        let mut parts = Vec::with_capacity(t.len());
        let mut scale = 1i64;
        for &k in t.iter().rev() {
            parts.push((ix[k].clone(), scale));
            scale = scale.saturating_mul(to.dims()[k].as_static().unwrap_or(1) as i64);
        }
        self.ix_sum(&parts, space)
    }

    /// `Σ scale * ix`: affine while every part is, an emitted tile otherwise.
    fn ix_sum(&mut self, parts: &[(Ix, i64)], space: SpaceId) -> Ix {
        if let [(i, 1)] = parts {
            return i.clone();
        }
        let mut terms: Vec<(usize, i64)> = Vec::new();
        let (mut offset, mut shift) = (0i64, None);
        for (i, scale) in parts {
            let Ix::Lin {
                terms: t,
                offset: o,
                shift: s,
            } = i
            else {
                return self.ix_sum_emitted(parts, space);
            };
            for &(a, c) in t {
                match terms.iter_mut().find(|(b, _)| *b == a) {
                    Some((_, acc)) => *acc += c * scale,
                    None => terms.push((a, c * scale)),
                }
            }
            offset += o * scale;
            if let Some(x) = s {
                let k = self.b.index(*scale);
                let scaled = self.b.arith(IndexOp::Mul, *x, k);
                shift = Some(match shift {
                    Some(acc) => self.b.arith(IndexOp::Add, acc, scaled),
                    None => scaled,
                });
            }
        }
        Ix::Lin {
            terms,
            offset,
            shift,
        }
    }

    fn ix_sum_emitted(&mut self, parts: &[(Ix, i64)], space: SpaceId) -> Ix {
        let mut acc: Option<ValueId> = None;
        for (i, scale) in parts {
            let k = self.b.index(*scale);
            let Ix::Dyn(term) = self.b.ix_scalar_op(i, IndexOp::Mul, k, space) else {
                unreachable!("ix_scalar_op emits a tile")
            };
            acc = Some(match acc {
                Some(a) => self.b.tile_index_op(IndexOp::Add, a, term, space),
                None => term,
            });
        }
        acc.map_or(Ix::constant(0), Ix::Dyn)
    }

    /// The indices of operand dims `f` (static) that a result index `i` merges, when `i` is an
    /// axis's coordinate whose tile divides the innermost of them: per program, the tile starts
    /// at `base = coord * tile` and stays inside one row of the innermost dim, so its outer
    /// indices are scalars `(base / stride) % dim` and its innermost `i - base + base % dim`.
    fn merge_ix(&mut self, from: &Shape, f: &[usize], i: &Ix, space: SpaceId) -> Option<Vec<Ix>> {
        let axis = i.as_axis()?;
        let dims: Vec<u64> = f
            .iter()
            .map(|&j| from.dims()[j].as_static())
            .collect::<Option<_>>()?;
        let tile = self.b.spaces[space].tile[axis];
        let innermost = *dims.last()?;
        if tile == 0 || !innermost.is_multiple_of(tile) {
            return None;
        }
        let coord = self.b.spaces[space].coords[axis];
        let t = self.b.index(tile as i64);
        let base = self.b.arith(IndexOp::Mul, coord, t);
        let mut parts = Vec::with_capacity(dims.len());
        let mut stride = 1u64;
        for (k, &d) in dims.iter().enumerate().rev() {
            let d_v = self.b.index(d as i64);
            if k + 1 == dims.len() {
                let within = self.b.arith(IndexOp::Rem, base, d_v);
                let shift = self.b.arith(IndexOp::Sub, within, base);
                parts.push(Ix::Lin {
                    terms: vec![(axis, 1)],
                    offset: 0,
                    shift: Some(shift),
                });
            } else {
                let s = self.b.index(stride as i64);
                let q = self.b.arith(IndexOp::Div, base, s);
                parts.push(Ix::scalar(self.b.arith(IndexOp::Rem, q, d_v)));
            }
            stride = stride.checked_mul(d)?;
        }
        parts.reverse();
        Some(parts)
    }

    /// A reshape's operand indices by linearizing the result's and splitting again.
    fn reshape_linearized(
        &mut self,
        from: &Shape,
        to: &Shape,
        ix: &[Ix],
        space: SpaceId,
    ) -> Vec<Ix> {
        // linear = Σ ix[k] * stride_to[k]; operand index j = (linear / stride_from[j]) % dim[j].
        let to_strides = self.b.contiguous_strides(to.dims());
        let mut linear = Ix::constant(0);
        for (i, &s) in ix.iter().zip(&to_strides) {
            let term = self.b.ix_scalar_op(i, IndexOp::Mul, s, space);
            let (a, b) = (
                self.b.materialize(&linear, space),
                self.b.materialize(&term, space),
            );
            linear = Ix::Dyn(self.b.tile_index_op(IndexOp::Add, a, b, space));
        }
        // With a zero-size dim there is no element to address (every load pads): divisors are
        // kept at 1 or more so the index arithmetic stays defined.
        let one = self.b.index(1);
        let from_strides = self.b.contiguous_strides(from.dims());
        from.dims()
            .iter()
            .zip(from_strides)
            .map(|(d, s)| {
                let s = self.b.arith(IndexOp::Max, s, one);
                let q = self.b.ix_scalar_op(&linear, IndexOp::Div, s, space);
                let d = self.b.dim(d);
                let d = self.b.arith(IndexOp::Max, d, one);
                self.b.ix_scalar_op(&q, IndexOp::Rem, d, space)
            })
            .collect()
    }

    fn concat(
        &mut self,
        node: NodeId,
        axis: usize,
        parts: &[NodeId],
        ix: &[Ix],
        space: SpaceId,
    ) -> Res<ValueId> {
        let g = self.g;
        if let Some((part, key_axis, start, len)) = self.pinned_part(axis, parts, &ix[axis], space)
        {
            // The part's own space: its key coordinate counts from the part's start, and its
            // extent is the part's, so that loads past it read padding.
            let tile = self.b.spaces[space].tile[key_axis];
            let coord = self.b.spaces[space].coords[key_axis];
            let blocks_before = self.b.index((start / tile) as i64);
            let coord = self.b.arith(IndexOp::Sub, coord, blocks_before);
            let extent = self.b.index(len as i64);
            let part_space = self.with_axis(space, key_axis, tile, coord, extent);
            return self.value(part, ix, part_space);
        }
        let dtype = g.ty(node).dtype;
        let shape = self.tile_shape(space);
        // Each part's start along `axis`: a sum of the parts' lengths before it, which are
        // scalars of the dims where they are not static.
        let mut start = Dim::Static(0);
        let mut pieces = Vec::with_capacity(parts.len());
        for &part in parts {
            let len = &g.ty(part).shape.dims()[axis];
            let end = start
                .combine(len, |a, b| a.add(b))
                .map_err(|e| self.unsupported(format!("a concat's offsets: {e}")))?;
            let lo = self.b.dim(&start);
            let hi = self.b.dim(&end);
            let mask = self.b.in_range(&ix[axis], lo, hi, space);
            let mut inner = ix.to_vec();
            // Dynamic, so that positions outside this part read padding, not other memory.
            inner[axis] = self.b.ix_scalar_op(&ix[axis], IndexOp::Sub, lo, space);
            let v = self.value(part, &inner, space)?;
            pieces.push((mask, v));
            start = end;
        }
        let (_, mut acc) = pieces
            .pop()
            .ok_or_else(|| self.unsupported("an empty concat".into()))?;
        while let Some((mask, v)) = pieces.pop() {
            acc = self.b.emit(
                TileOp::Select {
                    cond: mask,
                    a: v,
                    b: acc,
                },
                Type::tile(dtype, &shape),
            );
        }
        Ok(acc)
    }

    /// The part of a concat that every index `i` takes, with the space axis `i` is, and the
    /// part's start and length: when `i` is a pinned key axis of `space` (see [`PinnedKeys`]),
    /// one part spans the pinned keys, and it starts on a tile boundary of that axis.
    fn pinned_part(
        &self,
        axis: usize,
        parts: &[NodeId],
        i: &Ix,
        space: SpaceId,
    ) -> Option<(NodeId, usize, u64, u64)> {
        let pin = self.pinned_keys.as_ref()?;
        let a = i.as_axis()?;
        if !pin.axes.contains(&(space, a)) {
            return None;
        }
        let mut start = 0u64;
        for &part in parts {
            let len = self.g.ty(part).shape.dims()[axis].as_static()?;
            if start <= pin.lo && pin.hi <= start + len {
                let on_tile = start.is_multiple_of(self.b.spaces[space].tile[a]);
                return on_tile.then_some((part, a, start, len));
            }
            start += len;
        }
        None
    }

    fn pad(
        &mut self,
        node: NodeId,
        pads: &[(u64, u64)],
        fill: f64,
        ix: &[Ix],
        space: SpaceId,
    ) -> Res<ValueId> {
        let g = self.g;
        let operand = g.operands(node)[0];
        let dims = g.ty(operand).shape.dims().to_vec();
        let dtype = g.ty(node).dtype;
        let shape = self.tile_shape(space);
        let mut inner = ix.to_vec();
        let mut mask: Option<ValueId> = None;
        for (k, &(before, after)) in pads.iter().enumerate() {
            if before == 0 && after == 0 {
                continue;
            }
            let lo = self.b.index(before as i64);
            let len = self.b.dim(&dims[k]);
            let hi = self.b.arith(IndexOp::Add, lo, len);
            let in_range = self.b.in_range(&ix[k], lo, hi, space);
            inner[k] = self.b.ix_scalar_op(&ix[k], IndexOp::Sub, lo, space);
            mask = Some(match mask {
                None => in_range,
                Some(m) => self.b.emit(
                    TileOp::Binary {
                        op: BinaryOp::And,
                        a: m,
                        b: in_range,
                    },
                    Type::tile(DType::Bool, &shape),
                ),
            });
        }
        let v = self.value(operand, &inner, space)?;
        let Some(mask) = mask else {
            return Ok(v);
        };
        let fill = self.b.constant(fill, dtype, &shape);
        Ok(self.b.emit(
            TileOp::Select {
                cond: mask,
                a: v,
                b: fill,
            },
            Type::tile(dtype, &shape),
        ))
    }

    fn gather(
        &mut self,
        node: NodeId,
        axis: usize,
        operands: &[NodeId],
        ix: &[Ix],
        space: SpaceId,
    ) -> Res<ValueId> {
        let (data, indices) = (operands[0], operands[1]);
        let index_rank = self.g.ty(indices).rank();
        let index_ix = &ix[axis..axis + index_rank];
        let index = self.value(indices, index_ix, space)?;
        let shape = self.tile_shape(space);
        let index = if self.g.ty(indices).dtype == DType::I64 {
            index
        } else {
            self.b
                .emit(TileOp::Cast { x: index }, Type::tile(DType::I64, &shape))
        };
        let mut data_ix: Vec<Ix> = ix[..axis].to_vec();
        data_ix.push(Ix::Dyn(index));
        data_ix.extend_from_slice(&ix[axis + index_rank..]);
        // Data computed in the kernel (a product's prologue: GPTQ's unpacked zeros) is
        // computed at the gathered positions, which fusion admits only for elementwise and
        // layout ops (`tir_opt::fusion::kinds`).
        let _ = node;
        self.value(data, &data_ix, space)
    }

    /// The new value of a state a slice write makes, computed out of place: the value inside
    /// the slice, the old state elsewhere.
    fn write_slice(
        &mut self,
        node: NodeId,
        axis: usize,
        start: Option<u64>,
        ix: &[Ix],
        space: SpaceId,
    ) -> Res<ValueId> {
        let operands = self.g.operands(node);
        let (state, value) = (operands[0], operands[1]);
        let lo = match start {
            Some(s) => self.b.index(s as i64),
            None => {
                let pos = operands[2];
                let buffer = *self
                    .buffer_of
                    .get(&pos)
                    .ok_or_else(|| self.unsupported(format!("{pos} has no buffer")))?;
                let param = self.b.param(buffer, self.g.ty(pos).dtype, Access::Shared);
                let zero = self.b.index(0);
                self.b
                    .emit(TileOp::LoadScalar { param, index: zero }, Type::Index)
            }
        };
        let len = self.b.dim(&self.g.ty(value).shape.dims()[axis]);
        let hi = self.b.arith(IndexOp::Add, lo, len);
        let inside = self.b.in_range(&ix[axis], lo, hi, space);
        let mut inner = ix.to_vec();
        inner[axis] = self.b.ix_scalar_op(&ix[axis], IndexOp::Sub, lo, space);
        let new = self.value(value, &inner, space)?;
        let old = self.value(state, ix, space)?;
        let ty = Type::tile(self.g.ty(node).dtype, &self.tile_shape(space));
        Ok(self.b.emit(
            TileOp::Select {
                cond: inside,
                a: new,
                b: old,
            },
            ty,
        ))
    }

    /// A reduction over the row axis of a row-reduction kernel.
    fn row_reduce(
        &mut self,
        node: NodeId,
        op: ReduceOp,
        axes: &[usize],
        keepdims: bool,
        ix: &[Ix],
        space: SpaceId,
    ) -> Res<ValueId> {
        let rows = self
            .rows
            .ok_or_else(|| self.unsupported("a reduction outside a reduction kernel".into()))?;
        let operand = self.g.operands(node)[0];
        let rank = self.g.ty(operand).rank();
        if axes != [rank - 1] {
            return Err(self.unsupported("a reduction over other than the last axis".into()));
        }
        // The operand's indices: the outer ones as given (widened to whole rows), the row axis.
        let outer = if keepdims { &ix[..rank - 1] } else { ix };
        let mut inner = Vec::with_capacity(rank);
        for i in outer {
            inner.push(match i {
                Ix::Lin { .. } => i.clone(),
                Ix::Dyn(v) if space == rows.reduced => {
                    let full = self.tile_shape(rows.full);
                    Ix::Dyn(
                        self.b
                            .emit(TileOp::Broadcast { x: *v }, Type::tile(DType::I64, &full)),
                    )
                }
                Ix::Dyn(_) => i.clone(),
            });
        }
        inner.push(Ix::axis(rows.axis));
        let x = self.value(operand, &inner, rows.full)?;
        let in_dtype = self.g.ty(operand).dtype;
        let full = self.tile_shape(rows.full);
        let x = self.mask_row(x, op, in_dtype, &full, rows)?;
        let out_dtype = self.g.ty(node).dtype;
        let reduced_shape = self.tile_shape(rows.reduced);
        let r = if op == ReduceOp::Mean {
            self.row_mean(x, in_dtype, &full, &reduced_shape, rows)
        } else {
            let ty = Type::tile(out_dtype, &reduced_shape);
            self.b.emit(
                TileOp::Reduce {
                    op,
                    x,
                    axis: rows.axis,
                },
                ty,
            )
        };
        if space == rows.reduced {
            Ok(r)
        } else {
            let shape = self.tile_shape(space);
            Ok(self
                .b
                .emit(TileOp::Broadcast { x: r }, Type::tile(out_dtype, &shape)))
        }
    }

    /// A row mean: the sum and the division in f32 (f64 for f64), then one rounding to the
    /// dtype, so a 16-bit mean of large values does not overflow in its sum.
    fn row_mean(
        &mut self,
        x: ValueId,
        dtype: DType,
        full: &[u64],
        reduced: &[u64],
        rows: RowSpaces,
    ) -> ValueId {
        let acc = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let x = if acc == dtype {
            x
        } else {
            self.b.emit(TileOp::Cast { x }, Type::tile(acc, full))
        };
        let sum = self.b.emit(
            TileOp::Reduce {
                op: ReduceOp::Sum,
                x,
                axis: rows.axis,
            },
            Type::tile(acc, reduced),
        );
        let n = self.b.constant(rows.len as f64, acc, reduced);
        let mean = self.b.emit(
            TileOp::Binary {
                op: BinaryOp::Div,
                a: sum,
                b: n,
            },
            Type::tile(acc, reduced),
        );
        if acc == dtype {
            mean
        } else {
            self.b
                .emit(TileOp::Cast { x: mean }, Type::tile(dtype, reduced))
        }
    }

    /// Replaces the padding past the row's end with the reduction's identity.
    fn mask_row(
        &mut self,
        x: ValueId,
        op: ReduceOp,
        dtype: DType,
        full: &[u64],
        rows: RowSpaces,
    ) -> Res<ValueId> {
        if full[rows.axis] == rows.len {
            return Ok(x);
        }
        let lo = self.b.index(0);
        let hi = self.b.index(rows.len as i64);
        let mask = self.b.in_range(&Ix::axis(rows.axis), lo, hi, rows.full);
        let identity = self.b.constant(identity(op, dtype), dtype, full);
        Ok(self.b.emit(
            TileOp::Select {
                cond: mask,
                a: x,
                b: identity,
            },
            Type::tile(dtype, full),
        ))
    }
}

/// The value a reduction starts from: padding with it changes nothing.
pub fn identity(op: ReduceOp, dtype: DType) -> f64 {
    let (low, high) = match dtype {
        DType::Bool => (0.0, 1.0),
        DType::I8 => (i8::MIN as f64, i8::MAX as f64),
        DType::U8 => (0.0, u8::MAX as f64),
        DType::I16 => (i16::MIN as f64, i16::MAX as f64),
        DType::U16 => (0.0, u16::MAX as f64),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::U32 => (0.0, u32::MAX as f64),
        // 2^64 - 2048, the largest f64 below 2^64 (as for i64 below).
        DType::U64 => (0.0, 18_446_744_073_709_549_568.0),
        // 2^63 - 1024, the largest f64 below 2^63: values are held as f64, and 2^63 itself
        // would wrap to i64::MIN.
        DType::I64 => (i64::MIN as f64, 9_223_372_036_854_774_784.0),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    match op {
        ReduceOp::Sum | ReduceOp::Mean => 0.0,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max | ReduceOp::ArgMax => low,
        ReduceOp::Min | ReduceOp::ArgMin => high,
    }
}

/// The indices of an operand of shape `from` broadcast to `to` at `ix`: right-aligned, with
/// broadcast (size-1) dims at index 0.
/// The value of a one-element constant that a constant tile holds exactly: not NaN (whose
/// payload a tile constant may not keep), integers within ±2^53 (exact as `f64`).
fn single_constant(op: &Op) -> Option<f64> {
    let Op::Constant { data } = op else {
        return None;
    };
    let value = match data {
        ConstData::Bool(v) => f64::from(u8::from(*v.first()?)),
        ConstData::Int(v) => {
            let x = *v.first()?;
            (x.unsigned_abs() <= 1 << 53).then_some(x as f64)?
        }
        ConstData::Float(v) => v.first()?.0,
    };
    (data.len() == 1 && !value.is_nan()).then_some(value)
}

/// The indices of an operand of shape `from` broadcast to `to`, given the result's indices `ix`: a
/// size-1 axis that broadcasts reads index 0, leading axes of `to` that `from` lacks are dropped.
pub fn broadcast_ix(from: &Shape, to: &Shape, ix: &[Ix]) -> Vec<Ix> {
    let skip = to.rank() - from.rank();
    from.dims()
        .iter()
        .enumerate()
        .map(|(k, d)| {
            if *d == Dim::Static(1) && to.dims()[k + skip] != Dim::Static(1) {
                Ix::constant(0)
            } else {
                ix[k + skip].clone()
            }
        })
        .collect()
}

/// A reshape's dims cut into groups with equal products, as `(operand dims, result dims)`:
/// size-1 dims belong to none, a symbolic dim must meet the same symbolic dim (a group of one on
/// each side), and static dims group until their products agree. `None` when the shapes cannot
/// be cut so (a symbolic dim meeting anything else, a zero-size dim).
fn reshape_groups(from: &Shape, to: &Shape) -> Option<Vec<(Vec<usize>, Vec<usize>)>> {
    let kept = |s: &Shape| -> Vec<usize> {
        (0..s.rank())
            .filter(|&k| s.dims()[k] != Dim::Static(1))
            .collect()
    };
    let (a, b) = (kept(from), kept(to));
    let size = |s: &Shape, k: usize| s.dims()[k].as_static().filter(|&n| n > 0);
    let (mut i, mut j) = (0, 0);
    let mut groups = Vec::new();
    while i < a.len() && j < b.len() {
        let (fd, td) = (&from.dims()[a[i]], &to.dims()[b[j]]);
        if fd.as_static().is_none() || td.as_static().is_none() {
            if fd != td {
                return None;
            }
            groups.push((vec![a[i]], vec![b[j]]));
            i += 1;
            j += 1;
            continue;
        }
        let (mut f, mut t) = (vec![a[i]], vec![b[j]]);
        let (mut pf, mut pt) = (size(from, a[i])?, size(to, b[j])?);
        while pf != pt {
            if pf < pt {
                i += 1;
                let k = *a.get(i)?;
                pf = pf.checked_mul(size(from, k)?)?;
                f.push(k);
            } else {
                j += 1;
                let k = *b.get(j)?;
                pt = pt.checked_mul(size(to, k)?)?;
                t.push(k);
            }
        }
        groups.push((f, t));
        i += 1;
        j += 1;
    }
    (i == a.len() && j == b.len()).then_some(groups)
}

/// `scale * i + offset` when `i` is affine with no shift.
fn affine(i: &Ix, scale: i64, offset: i64) -> Option<Ix> {
    match i {
        Ix::Lin {
            terms,
            offset: o,
            shift: None,
        } => Some(Ix::Lin {
            terms: terms.iter().map(|&(a, c)| (a, c * scale)).collect(),
            offset: o.checked_mul(scale)?.checked_add(offset)?,
            shift: None,
        }),
        _ => None,
    }
}
