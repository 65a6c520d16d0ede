//! `KernelBuilder`: emits the statements of one tile kernel, with the index spaces its tiles
//! live in and symbolic index tiles ([`Ix`]) that become loads through strided views when they
//! are affine, and indexed loads otherwise.

use crate::tile::{
    Access, Block, CmpOp, DimPolynomial, IndexOp, LibraryCall, Region, Stmt, TensorParam,
    TileKernel, TileOp, Type, ValueId, WriteRegion,
};
use std::collections::{HashMap, HashSet};
use tir_graph::{BinaryOp, DType, Dim};

/// An index space of tiles: along axis `a`, a tile covers elements
/// `coords[a] * tile[a] ..+ tile[a]` of `extents[a]` (elements past the extent are padding).
#[derive(Clone, Debug)]
pub struct Space {
    /// Tile size per axis, in elements (static).
    pub tile: Vec<u64>,
    /// The program's tile coordinate per axis (index scalars).
    pub coords: Vec<ValueId>,
    /// The space's extent per axis, in elements (index scalars).
    pub extents: Vec<ValueId>,
}

/// A space of a [`KernelBuilder`], by its index in [`KernelBuilder::spaces`].
pub type SpaceId = usize;

/// An `i64` index tile over a space: either affine in the space's coordinates with static
/// coefficients (`Σ coeff * coord(axis) + offset + shift`, where `coord(a)` is the element index
/// along axis `a` and `shift` an index scalar, the same for every element of a program's tile),
/// or an emitted tile.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ix {
    /// Affine in the space's coordinates.
    Lin {
        /// `(axis, coefficient)` pairs.
        terms: Vec<(usize, i64)>,
        /// A static constant added.
        offset: i64,
        /// An index scalar added, if any.
        shift: Option<ValueId>,
    },
    /// An emitted `i64` tile.
    Dyn(ValueId),
}

impl Ix {
    /// The coordinate of axis `a`.
    pub fn axis(a: usize) -> Ix {
        Ix::Lin {
            terms: vec![(a, 1)],
            offset: 0,
            shift: None,
        }
    }

    /// The axis `a` when this is exactly the coordinate of `a` ([`Ix::axis`]).
    pub fn as_axis(&self) -> Option<usize> {
        match self {
            Ix::Lin {
                terms,
                offset: 0,
                shift: None,
            } => match terms.as_slice() {
                &[(a, 1)] => Some(a),
                _ => None,
            },
            _ => None,
        }
    }

    /// The constant `c` at every element.
    pub fn constant(c: i64) -> Ix {
        Ix::Lin {
            terms: Vec::new(),
            offset: c,
            shift: None,
        }
    }

    /// The index scalar `x`, the same for every element.
    pub fn scalar(x: ValueId) -> Ix {
        Ix::Lin {
            terms: Vec::new(),
            offset: 0,
            shift: Some(x),
        }
    }
}

/// Emits one kernel.
pub struct KernelBuilder {
    /// The kernel's name.
    pub name: String,
    next: u32,
    prelude: Vec<Stmt>,
    blocks: Vec<Vec<Stmt>>,
    grid: Vec<Stmt>,
    grid_values: Vec<ValueId>,
    /// The tensor parameters added so far.
    pub params: Vec<TensorParam>,
    param_of: HashMap<usize, usize>,
    /// The write regions declared so far.
    pub writes: Vec<WriteRegion>,
    scalars: HashMap<ScalarKey, ValueId>,
    prelude_ids: HashSet<ValueId>,
    /// The index spaces added so far, by [`SpaceId`].
    pub spaces: Vec<Space>,
    /// Coordinate tiles by (space, axis), with the depth of the block that holds them.
    coord_tiles: HashMap<(SpaceId, usize), (ValueId, usize)>,
    /// The token chain of mutable accesses.
    token: Option<ValueId>,
    /// A library routine equivalent to the kernel, when lowering recognised one.
    pub library: Option<LibraryCall>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ScalarKey {
    Index(i64),
    Dim(String),
    ProgramId(usize),
    Arith(IndexOp, ValueId, ValueId),
}

impl KernelBuilder {
    /// A builder of an empty kernel named `name`.
    pub fn new(name: String) -> KernelBuilder {
        KernelBuilder {
            name,
            next: 0,
            prelude: Vec::new(),
            blocks: vec![Vec::new()],
            grid: Vec::new(),
            grid_values: Vec::new(),
            params: Vec::new(),
            param_of: HashMap::new(),
            writes: Vec::new(),
            scalars: HashMap::new(),
            prelude_ids: HashSet::new(),
            spaces: Vec::new(),
            coord_tiles: HashMap::new(),
            token: None,
            library: None,
        }
    }

    /// A new value, defined by a statement emitted later (a loop's variable or carried value).
    pub fn fresh(&mut self) -> ValueId {
        self.next += 1;
        ValueId(self.next - 1)
    }

    /// Emits `op` defining one value of type `ty` in the current block.
    pub fn emit(&mut self, op: TileOp, ty: Type) -> ValueId {
        let id = self.fresh();
        let block = self.blocks.last_mut().expect("a block is open");
        block.push(Stmt {
            defs: vec![(id, ty)],
            op,
        });
        id
    }

    /// Emits a statement defining several values in the current block.
    pub fn emit_multi(&mut self, op: TileOp, types: Vec<Type>) -> Vec<ValueId> {
        let defs: Vec<(ValueId, Type)> = types.into_iter().map(|t| (self.fresh(), t)).collect();
        let ids = defs.iter().map(|(id, _)| *id).collect();
        self.blocks
            .last_mut()
            .expect("a block is open")
            .push(Stmt { defs, op });
        ids
    }

    /// A scalar op in the prelude (visible everywhere in the body), emitted once.
    fn scalar(&mut self, key: ScalarKey, op: TileOp) -> ValueId {
        if let Some(&v) = self.scalars.get(&key) {
            return v;
        }
        let id = self.fresh();
        self.prelude.push(Stmt {
            defs: vec![(id, Type::Index)],
            op,
        });
        self.scalars.insert(key, id);
        self.prelude_ids.insert(id);
        id
    }

    /// The index constant `value`, emitted once per kernel and reused.
    pub fn index(&mut self, value: i64) -> ValueId {
        self.scalar(ScalarKey::Index(value), TileOp::Index { value })
    }

    /// This program's index along grid axis `axis`, emitted once per kernel and reused.
    pub fn program_id(&mut self, axis: usize) -> ValueId {
        self.scalar(ScalarKey::ProgramId(axis), TileOp::ProgramId { axis })
    }

    /// The value of `dim` as a scalar: a symbol is a launch value, an expression is computed
    /// from its symbols (in the order `legality::Poly::of_dim` reads it back).
    pub fn dim(&mut self, dim: &Dim) -> ValueId {
        self.dim_with(dim, Self::body_scalar)
    }

    /// The scalar of `op` (an index, a dim or index arithmetic) in the prelude or body.
    fn body_scalar(&mut self, op: TileOp) -> ValueId {
        match op {
            TileOp::Index { value } => self.index(value),
            TileOp::Dim { name } => self.scalar(ScalarKey::Dim(name.clone()), TileOp::Dim { name }),
            TileOp::IndexArith { op, a, b } => self.arith(op, a, b),
            other => unreachable!("dims are computed from scalars, not {other:?}"),
        }
    }

    /// `dim` computed by scalar ops that `emit` places.
    fn dim_with(&mut self, dim: &Dim, emit: fn(&mut Self, TileOp) -> ValueId) -> ValueId {
        match dim {
            Dim::Static(n) => emit(self, TileOp::Index { value: *n as i64 }),
            Dim::Symbolic(name) => emit(self, TileOp::Dim { name: name.clone() }),
            Dim::Expr(e) => self.expr_with(e, emit),
        }
    }

    fn expr_with(
        &mut self,
        e: &tir_graph::DimExpr,
        emit: fn(&mut Self, TileOp) -> ValueId,
    ) -> ValueId {
        use tir_graph::dim::Atom;
        let arith = |b: &mut Self, op, a, c| emit(b, TileOp::IndexArith { op, a, b: c });
        let mut total = None;
        for (mono, k) in e.terms() {
            let mut term = emit(self, TileOp::Index { value: *k });
            for atom in mono {
                let (op, args): (IndexOp, Vec<&tir_graph::DimExpr>) = match atom {
                    Atom::Sym(s) => {
                        let d = emit(self, TileOp::Dim { name: s.clone() });
                        term = arith(self, IndexOp::Mul, term, d);
                        continue;
                    }
                    Atom::FloorDiv(n, d) => (IndexOp::Div, vec![n, d]),
                    Atom::Min(args) => (IndexOp::Min, args.iter().collect()),
                    Atom::Max(args) => (IndexOp::Max, args.iter().collect()),
                };
                let values: Vec<ValueId> = args.iter().map(|a| self.expr_with(a, emit)).collect();
                let value = values[1..]
                    .iter()
                    .fold(values[0], |x, &y| arith(self, op, x, y));
                term = arith(self, IndexOp::Mul, term, value);
            }
            total = Some(match total {
                None => term,
                Some(t) => arith(self, IndexOp::Add, t, term),
            });
        }
        total.unwrap_or_else(|| emit(self, TileOp::Index { value: 0 }))
    }

    /// Scalar arithmetic; ops on prelude scalars go to the prelude, others to the current block.
    pub fn arith(&mut self, op: IndexOp, a: ValueId, b: ValueId) -> ValueId {
        if self.prelude_ids.contains(&a) && self.prelude_ids.contains(&b) {
            return self.scalar(ScalarKey::Arith(op, a, b), TileOp::IndexArith { op, a, b });
        }
        self.emit(TileOp::IndexArith { op, a, b }, Type::Index)
    }

    /// `ceil(a / b)` for `b > 0`.
    pub fn ceil_div(&mut self, a: ValueId, b: u64) -> ValueId {
        let bm1 = self.index(b as i64 - 1);
        let b = self.index(b as i64);
        let sum = self.arith(IndexOp::Add, a, bm1);
        self.arith(IndexOp::Div, sum, b)
    }

    /// The value of a view stride: its static count times its symbolic dims.
    pub fn stride(&mut self, stride: &tir_opt::layout::Stride) -> ValueId {
        let mut value = self.index(stride.coeff);
        for dim in &stride.dims {
            let d = self.dim(dim);
            value = self.arith(IndexOp::Mul, value, d);
        }
        value
    }

    /// Row-major strides (in elements) of `dims`, as scalars.
    pub fn contiguous_strides(&mut self, dims: &[Dim]) -> Vec<ValueId> {
        let mut strides = vec![self.index(1); dims.len()];
        for k in (0..dims.len().saturating_sub(1)).rev() {
            let d = self.dim(&dims[k + 1]);
            strides[k] = self.arith(IndexOp::Mul, strides[k + 1], d);
        }
        strides
    }

    /// The parameter for `buffer`, added on first use. A buffer the kernel writes is mutable.
    pub fn param(&mut self, buffer: usize, dtype: DType, access: Access) -> usize {
        if let Some(&p) = self.param_of.get(&buffer) {
            if access == Access::Mutable {
                self.params[p].access = Access::Mutable;
            }
            return p;
        }
        self.params.push(TensorParam {
            buffer,
            dtype,
            access,
        });
        self.param_of.insert(buffer, self.params.len() - 1);
        self.params.len() - 1
    }

    /// Declares that the kernel writes `region` of `buffer`; returns its parameter.
    pub fn writes(&mut self, buffer: usize, dtype: DType, region: Region) -> usize {
        let param = self.param(buffer, dtype, Access::Mutable);
        self.writes.push(WriteRegion { param, region });
        param
    }

    /// Whether parameter `param` is written by the kernel.
    pub fn is_mutable(&self, param: usize) -> bool {
        self.params[param].access == Access::Mutable
    }

    /// The current token, created on first use.
    pub fn token(&mut self) -> ValueId {
        match self.token {
            Some(t) => t,
            None => {
                let t = self.scalar_token();
                self.token = Some(t);
                t
            }
        }
    }

    fn scalar_token(&mut self) -> ValueId {
        let id = self.fresh();
        self.prelude.push(Stmt {
            defs: vec![(id, Type::Token)],
            op: TileOp::MakeToken,
        });
        id
    }

    /// Makes `token` the current token: the one the next mutable access orders after.
    pub fn set_token(&mut self, token: ValueId) {
        self.token = Some(token);
    }

    /// Sets the grid: `extents[a]` tiles of `tile[a]` elements along each axis `a`, with the
    /// extents given as dims. Returns the program's coordinates.
    pub fn grid(&mut self, extents: &[Dim], tile: &[u64]) -> Vec<ValueId> {
        for (d, &t) in extents.iter().zip(tile) {
            let extent = self.grid_dim(d);
            let tm1 = self.grid_stmt(TileOp::Index {
                value: t as i64 - 1,
            });
            let t = self.grid_stmt(TileOp::Index { value: t as i64 });
            let sum = self.grid_stmt(TileOp::IndexArith {
                op: IndexOp::Add,
                a: extent,
                b: tm1,
            });
            let count = self.grid_stmt(TileOp::IndexArith {
                op: IndexOp::Div,
                a: sum,
                b: t,
            });
            self.grid_values.push(count);
        }
        (0..extents.len()).map(|a| self.program_id(a)).collect()
    }

    /// `dim` in the grid block.
    fn grid_dim(&mut self, dim: &Dim) -> ValueId {
        self.dim_with(dim, Self::grid_stmt)
    }

    fn grid_stmt(&mut self, op: TileOp) -> ValueId {
        let id = self.fresh();
        self.grid.push(Stmt {
            defs: vec![(id, Type::Index)],
            op,
        });
        id
    }

    /// A view of tensor parameter `param` (offset, extents and strides as scalars).
    pub fn view(
        &mut self,
        param: usize,
        offset: ValueId,
        shape: Vec<ValueId>,
        strides: Vec<ValueId>,
    ) -> ValueId {
        let rank = shape.len();
        self.emit(
            TileOp::MakeView {
                param,
                offset,
                shape,
                strides,
            },
            Type::View { param, rank },
        )
    }

    /// Adds `space`, returning its id.
    pub fn add_space(&mut self, space: Space) -> SpaceId {
        self.spaces.push(space);
        self.spaces.len() - 1
    }

    /// A constant tile.
    pub fn constant(&mut self, value: f64, dtype: DType, shape: &[u64]) -> ValueId {
        self.emit(TileOp::Constant { value }, Type::tile(dtype, shape))
    }

    /// The `i64` tile of element indices along `axis` of `space`.
    pub fn coord_tile(&mut self, space: SpaceId, axis: usize) -> ValueId {
        if let Some(&(v, _)) = self.coord_tiles.get(&(space, axis)) {
            return v;
        }
        let shape = self.spaces[space].tile.clone();
        let line = self.axis_line(space, axis);
        let v = if line_is_whole(&shape, axis) {
            line
        } else {
            self.emit(
                TileOp::Broadcast { x: line },
                Type::tile(DType::I64, &shape),
            )
        };
        self.coord_tiles
            .insert((space, axis), (v, self.blocks.len()));
        v
    }

    /// A splat of the scalar `x` over `space`'s tile, as `i64`.
    pub fn splat(&mut self, x: ValueId, space: SpaceId) -> ValueId {
        let shape = self.spaces[space].tile.clone();
        self.emit(TileOp::Splat { x }, Type::tile(DType::I64, &shape))
    }

    /// `ix` as an emitted `i64` tile over `space`.
    pub fn materialize(&mut self, ix: &Ix, space: SpaceId) -> ValueId {
        match ix {
            Ix::Dyn(v) => *v,
            Ix::Lin {
                terms,
                offset,
                shift,
            } => {
                let shape = self.spaces[space].tile.clone();
                let ty = Type::tile(DType::I64, &shape);
                let c = self.index(*offset);
                let c = match shift {
                    Some(x) => self.arith(IndexOp::Add, c, *x),
                    None => c,
                };
                let mut acc = self.emit(TileOp::Splat { x: c }, ty.clone());
                for &(axis, coeff) in terms {
                    let coord = self.coord_tile(space, axis);
                    let k = self.index(coeff);
                    let k = self.emit(TileOp::Splat { x: k }, ty.clone());
                    let term = self.tile_index_op(IndexOp::Mul, coord, k, space);
                    acc = self.tile_index_op(IndexOp::Add, acc, term, space);
                }
                acc
            }
        }
    }

    /// Integer arithmetic on two `i64` tiles of `space`.
    pub fn tile_index_op(
        &mut self,
        op: IndexOp,
        a: ValueId,
        b: ValueId,
        space: SpaceId,
    ) -> ValueId {
        let shape = self.spaces[space].tile.clone();
        self.emit(
            TileOp::IndexArith { op, a, b },
            Type::tile(DType::I64, &shape),
        )
    }

    /// `ix op scalar` as an index tile.
    pub fn ix_scalar_op(&mut self, ix: &Ix, op: IndexOp, x: ValueId, space: SpaceId) -> Ix {
        let a = self.materialize(ix, space);
        let b = self.splat(x, space);
        Ix::Dyn(self.tile_index_op(op, a, b, space))
    }

    /// The bool tile `lo <= ix < hi` over `space` (bounds as scalars). The coordinate of one axis
    /// is compared along that axis alone and the answer broadcast: `i64` arithmetic over the
    /// whole tile costs a GPU two instructions per element and op.
    pub fn in_range(&mut self, ix: &Ix, lo: ValueId, hi: ValueId, space: SpaceId) -> ValueId {
        let shape = self.spaces[space].tile.clone();
        if let Some(axis) = ix.as_axis().filter(|&a| !line_is_whole(&shape, a)) {
            let mut along = vec![1; shape.len()];
            along[axis] = shape[axis];
            let line = self.axis_line(space, axis);
            let inside = self.index_between(line, lo, hi, &along);
            let ty = Type::tile(DType::Bool, &shape);
            return self.emit(TileOp::Broadcast { x: inside }, ty);
        }
        let v = self.materialize(ix, space);
        self.index_between(v, lo, hi, &shape)
    }

    /// The coordinates of `space`'s tile along `axis`, as an `i64` tile of size 1 on the others.
    fn axis_line(&mut self, space: SpaceId, axis: usize) -> ValueId {
        let s = self.spaces[space].clone();
        let mut along = vec![1; s.tile.len()];
        along[axis] = s.tile[axis];
        let ty = Type::tile(DType::I64, &along);
        let tile = self.index(s.tile[axis] as i64);
        let base = self.arith(IndexOp::Mul, s.coords[axis], tile);
        let base = self.emit(TileOp::Splat { x: base }, ty.clone());
        let iota = self.emit(TileOp::Iota { axis }, ty.clone());
        self.emit(
            TileOp::IndexArith {
                op: IndexOp::Add,
                a: base,
                b: iota,
            },
            ty,
        )
    }

    /// The bool tile `lo <= v < hi` for the `i64` tile `v` of `shape` (bounds as scalars).
    fn index_between(&mut self, v: ValueId, lo: ValueId, hi: ValueId, shape: &[u64]) -> ValueId {
        let ty = Type::tile(DType::I64, shape);
        let lo = self.emit(TileOp::Splat { x: lo }, ty.clone());
        let hi = self.emit(TileOp::Splat { x: hi }, ty);
        let bool_ty = Type::tile(DType::Bool, shape);
        let ge = self.emit(
            TileOp::IndexCmp {
                op: CmpOp::Ge,
                a: v,
                b: lo,
            },
            bool_ty.clone(),
        );
        let lt = self.emit(
            TileOp::IndexCmp {
                op: CmpOp::Lt,
                a: v,
                b: hi,
            },
            bool_ty.clone(),
        );
        self.emit(
            TileOp::Binary {
                op: BinaryOp::And,
                a: ge,
                b: lt,
            },
            bool_ty,
        )
    }

    /// Whether `x` is a load padded with zeros (its elements past its view's shape are 0),
    /// defined in a block still open.
    pub fn is_zero_padded_load(&self, x: ValueId) -> bool {
        self.blocks.iter().flatten().any(|s| {
            s.defs.first().is_some_and(|(id, _)| *id == x)
                && matches!(s.op, TileOp::Load { padding, .. } if padding == 0.0)
        })
    }

    /// How many blocks are open (1 at the kernel's top level).
    pub fn depth(&self) -> usize {
        self.blocks.len()
    }

    /// Opens a nested block: statements go into it until [`KernelBuilder::close_block`].
    pub fn open_block(&mut self) {
        self.blocks.push(Vec::new());
    }

    /// Closes the innermost block; what it defined is no longer reusable.
    pub fn close_block(&mut self) -> Block {
        let depth = self.blocks.len();
        self.coord_tiles.retain(|_, (_, d)| *d < depth);
        Block {
            stmts: self.blocks.pop().expect("a block is open"),
        }
    }

    /// The kernel. Every block opened must be closed.
    pub fn finish(mut self) -> TileKernel {
        debug_assert_eq!(self.blocks.len(), 1, "unclosed block");
        let mut stmts = std::mem::take(&mut self.prelude);
        stmts.extend(self.blocks.pop().unwrap_or_default());
        TileKernel {
            name: self.name,
            params: self.params,
            writes: self.writes,
            grid: self.grid_values,
            grid_body: Block { stmts: self.grid },
            body: Block { stmts },
            library: self.library,
            flops: DimPolynomial::default(),
        }
    }
}

/// The largest power of two not above `n` (1 for 0).
pub fn floor_pow2(n: u64) -> u64 {
    if n <= 1 {
        1
    } else {
        1 << (63 - n.leading_zeros())
    }
}

/// The smallest power of two not below `n` (1 for 0), saturating.
pub fn ceil_pow2(n: u64) -> u64 {
    n.max(1).checked_next_power_of_two().unwrap_or(1 << 63)
}

/// The most a tile takes along a symbolic extent that has other axes outside it: what a run
/// binds is unknown, and a whole budget bet on one axis is mostly padding when the run binds
/// it small (a tile of 1024 over rows of 128 attention scores did 8 times the work).
pub const SYMBOLIC_TILE: u64 = 128;

/// A tile for `extents` with at most `budget` elements (a power of two), filled from the
/// innermost axis outwards; a symbolic extent takes what is left, at most [`SYMBOLIC_TILE`]
/// unless it is the outermost axis.
pub fn choose_tile(extents: &[Dim], budget: u64) -> Vec<u64> {
    fill_tile(extents, budget, &[])
}

/// The most a transpose's tile takes along each of its two contiguous axes.
pub const TRANSPOSE_RUN: u64 = 32;

/// [`choose_tile`] for a value whose operand's innermost axis is `axis` of the value (a
/// transpose): the value's innermost axis and `axis` first, at most [`TRANSPOSE_RUN`] each, so
/// that both the stores and the loads move runs of contiguous elements (a tile filled from the
/// innermost axis alone reads one element per run when the operand's innermost axis gets 1:
/// an NHWC to NCHW permute of 25.7 MB took 47 µs on an H200, 0.55 TB/s).
pub fn transpose_tile(extents: &[Dim], budget: u64, axis: usize) -> Vec<u64> {
    fill_tile(extents, budget, &[extents.len() - 1, axis])
}

/// A tile filled first along the axes of `runs` (at most [`TRANSPOSE_RUN`] each), then from
/// the innermost axis outwards (see [`choose_tile`]).
fn fill_tile(extents: &[Dim], budget: u64, runs: &[usize]) -> Vec<u64> {
    let mut left = floor_pow2(budget.max(1));
    let mut tile = vec![1u64; extents.len()];
    let rest = (0..extents.len()).rev().filter(|a| !runs.contains(a));
    for a in runs.iter().copied().chain(rest) {
        let want = match &extents[a] {
            Dim::Static(n) => ceil_pow2(*n),
            Dim::Symbolic(_) | Dim::Expr(_) if a > 0 => left.min(SYMBOLIC_TILE),
            Dim::Symbolic(_) | Dim::Expr(_) => left,
        };
        let cap = if runs.contains(&a) {
            TRANSPOSE_RUN
        } else {
            u64::MAX
        };
        tile[a] = want.min(cap).min(left);
        left /= tile[a];
    }
    tile
}

/// Whether a tile of `shape` has size 1 on every axis but `axis`.
fn line_is_whole(shape: &[u64], axis: usize) -> bool {
    shape.iter().enumerate().all(|(a, &n)| a == axis || n == 1)
}
