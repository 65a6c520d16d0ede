//! Code generation: one tile-IR kernel ([`TileKernel`]) to one entry of an NVIDIA Tile IR
//! module ([`generate`] makes a module of one, [`generate_entry`] adds to one), ready for
//! `tileiras`.
//!
//! Takes a kernel that passes the tile IR verifier. Guarantees a module whose entry follows
//! [`KernelAbi`]: one `ptr` argument per tensor parameter (the buffer's base, assumed
//! [`PARAM_ALIGN`]-byte aligned), then one `i64` per symbolic dim the body reads, then (for
//! grids of two or more axes) one `i64` per grid extent. The launch grid is one-dimensional
//! (the product of the extents, at most 2^31 - 1); the entry recovers each axis's program id by
//! division, row-major or in groups of rows ([`KernelHints::group_rows`]); a persistent entry
//! ([`KernelHints::persistent`]) runs its body in a loop over tile ids instead. Views become
//! `make_tensor_view` (static shapes and strides where the tile IR has constants), tile loads
//! and stores become partition-view loads and stores, token-ordered for mutable parameters only;
//! gathers become masked pointer loads; tiles of 16-bit floats compute in `f32` and round after
//! each op.

mod emit;
mod math;
mod order;

use crate::codegen::emit::{mem_scalar, ptr_tile, reg_scalar, segments_attr, tile, Emitter, Pred};
use cutile_ir::builder::build_single_block_region;
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{
    Attribute, Bounded, DivBy, FuncType, Location, Module, OptimizationHints, PaddingValue,
    PartitionViewType, ScalarType, TensorViewType, Type, Value, DYNAMIC,
};
use cutile_ir::OpBuilder;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use tir_graph::DType;
use tir_lower::tile::{Block, CmpOp, IndexOp, TileKernel, TileOp, Type as TileType, ValueId};

/// Why a kernel could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The kernel uses something the CUDA backend does not generate (named).
    #[error("{0} is not supported by the CUDA backend")]
    Unsupported(String),
    /// The kernel's tile IR breaks a rule the verifier should have caught.
    #[error("malformed tile IR: {0}")]
    Malformed(String),
}

/// The alignment in bytes of every tensor parameter's base address: kernels assume it, and
/// the runtime checks it before each launch.
pub const PARAM_ALIGN: u64 = 16;
/// The largest divisor a kernel tells the compiler of a dynamic stride or offset: enough for
/// any vector or TMA load.
const MAX_KNOWN_DIVISOR: i64 = 1 << 12;
/// What divides every dim of a kernel's second entry ([`KernelAbi::divisible_entry`]), which a
/// binding whose dims it divides (and [`DIM_BOUND`] bounds) runs: rows whose stride is a dim are
/// then aligned for vector and TMA loads, as they are at static shapes (an encoder's attention
/// at 32 x 128 tokens ran in 0.115 ms against 0.21 ms without it).
pub const DIM_DIVISOR: i64 = 16;
/// The largest dim, and the most elements of a buffer it reads or writes, of a binding that
/// runs a kernel's second entry: there each dim is assumed in `0..=DIM_BOUND`, and the
/// extents and strides of its views are clamped to it (exact for views of such buffers: an
/// axis of two elements or more steps inside the buffer, one of fewer is never stepped).
/// `tileiras` moves tiles through the tensor memory accelerator (TMA) only where it knows the
/// view's extents and strides fit in 32 bits, as static ones do: an encoder's attention at 32 x
/// 128 tokens loaded its keys, values and mask with threads (cp.async) without the bound. A
/// multiple of `MAX_KNOWN_DIVISOR`, so that the clamp keeps what divides a stride.
pub const DIM_BOUND: i64 = (1 << 31) - MAX_KNOWN_DIVISOR;

/// How the host passes arguments to a generated entry, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelAbi {
    /// The entry's symbol in the cubin.
    pub entry: String,
    /// For a kernel that reads symbolic dims: the symbol of the same kernel compiled assuming
    /// [`DIM_DIVISOR`] divides each of them and [`DIM_BOUND`] bounds them, in the same cubin; a
    /// binding whose dims are all such runs this one. One compile serves both, so a new binding
    /// compiles nothing.
    pub divisible_entry: Option<String>,
    /// One device pointer per tensor parameter, in parameter order.
    pub params: usize,
    /// Then the value of each of these symbolic dims, as `i64`.
    pub dims: Vec<String>,
    /// Then, when true, each grid extent as `i64`.
    pub grid_extents: bool,
    /// When set, the entry is persistent: each tile block walks tiles `id, id + blocks, ...`
    /// until the grid's end, so the runtime launches at most this many blocks per SM.
    pub blocks_per_sm: Option<u8>,
}

/// Tuning choices for one kernel. They change speed, never results; `None` leaves the choice
/// to the compiler. `occupancy` and `num_ctas` are `tileiras` hints, carried on the entry as
/// its `optimization_hints` for every architecture (the `default` dictionary).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelHints {
    /// Tile blocks the compiler should fit on one SM at once (1..=32).
    pub occupancy: Option<u8>,
    /// CTAs per cluster (1, 2, 4, 8, 16): a cluster shares operand loads across its CTAs.
    pub num_ctas: Option<u8>,
    /// For grids of two or more axes: tile blocks walk the last two axes in groups of this
    /// many rows (each group column by column), so blocks running together share operand
    /// tiles in L2.
    pub group_rows: Option<u8>,
    /// Whether tile loads and stores may use the tensor memory accelerator (TMA) rather than
    /// vectorized loads by threads; a `tileiras` hint on each access.
    pub allow_tma: Option<bool>,
    /// The latency (1..=10) `tileiras` should plan tile loads for: higher values pipeline
    /// loads deeper ahead of their use.
    pub load_latency: Option<u8>,
    /// Launch at most this many tile blocks per SM (1..=4), each looping over the grid's tiles
    /// in strides of the block count, instead of one block per tile: a block's next tile
    /// follows its last one with no launch or block start in between.
    pub persistent: Option<u8>,
    /// Warps per tile block (1, 2, 4, ..., 32) instead of the number `tileiras` picks.
    pub warps: Option<u8>,
    /// Tile blocks walk the grid from its last tile to its first: the last query blocks of a
    /// causal attention, which see the most keys, start first, and the short first ones fill
    /// the tail of the run instead of the long ones.
    pub last_first: Option<bool>,
}

impl KernelHints {
    fn attribute(&self) -> Attribute {
        let mut values = Vec::new();
        let int = |v: u8| Attribute::Integer(v as i64, Type::Scalar(ScalarType::I32));
        if let Some(n) = self.num_ctas {
            values.push(("num_cta_in_cga".to_string(), int(n)));
        }
        if let Some(n) = self.occupancy {
            values.push(("occupancy".to_string(), int(n)));
        }
        if let Some(n) = self.warps {
            values.push(("num_worker_warps_per_cta".to_string(), int(n)));
        }
        Attribute::OptimizationHints(OptimizationHints {
            entries: vec![("default".to_string(), values)],
        })
    }
}

/// A translated kernel.
pub struct Generated {
    /// The Tile IR module, with the kernel's one entry.
    pub module: Module,
    /// How the host passes the entry its arguments.
    pub abi: KernelAbi,
}

/// A tensor view: its base pointer (a `ptr` scalar tile), extents and strides in elements
/// (`i64` scalars, with their values where they are constants).
#[derive(Clone)]
struct View {
    dtype: DType,
    base: Value,
    shape: Vec<(Value, Option<i64>)>,
    strides: Vec<(Value, Option<i64>)>,
    /// What is known to divide each extent and each stride (powers of two, 1 when nothing).
    divisors: (Vec<i64>, Vec<i64>),
    /// Axes of stride 0 and extent above 1 (a broadcast read): the tensor view has extent 1
    /// there, and loads repeat that element and pad past `shape`.
    repeated: Vec<bool>,
    tensor_view: Option<(Value, TensorViewType)>,
}

struct Translator<'k> {
    e: Emitter,
    kernel: &'k TileKernel,
    values: HashMap<ValueId, Value>,
    consts: HashMap<ValueId, i64>,
    /// The largest power of two (at most [`MAX_KNOWN_DIVISOR`]) known to divide each index
    /// value that index arithmetic computes; absent means 1.
    divisors: HashMap<ValueId, i64>,
    /// Whether this entry is the twin that assumes [`DIM_DIVISOR`] divides every dim and
    /// [`DIM_BOUND`] bounds it.
    dims_divisible: bool,
    types: HashMap<ValueId, TileType>,
    views: HashMap<ValueId, View>,
    params: Vec<Value>,
    dims: HashMap<String, Value>,
    extents: Vec<Value>,
    block_id: Option<Value>,
    hints: KernelHints,
}

type Res<T> = Result<T, CodegenError>;

fn malformed(what: String) -> CodegenError {
    CodegenError::Malformed(what)
}

fn index_ty() -> Type {
    tile(ScalarType::I64, &[])
}

/// The symbolic dims the kernel's body reads, sorted.
fn body_dims(kernel: &TileKernel) -> Vec<String> {
    let mut dims = BTreeSet::new();
    fn walk(block: &Block, dims: &mut BTreeSet<String>) {
        for s in &block.stmts {
            match &s.op {
                TileOp::Dim { name } => {
                    dims.insert(name.clone());
                }
                TileOp::For { body, .. } => walk(body, dims),
                _ => {}
            }
        }
    }
    walk(&kernel.body, &mut dims);
    dims.into_iter().collect()
}

/// Translates `kernel` into a Tile IR module with one entry (see the module doc) that carries
/// `hints`, named for the kernel's kind (`entry_name`).
pub fn generate(kernel: &TileKernel, hints: &KernelHints) -> Result<Generated, CodegenError> {
    generate_entry(Module::new("tir"), kernel, hints, entry_name(&kernel.name))
}

/// Renames the entry of a module [`generate`] made (and its twin for divisible dims).
pub fn rename_entry(generated: &mut Generated, entry: String) {
    let twin = generated
        .abi
        .divisible_entry
        .as_ref()
        .map(|_| divisible_name(&entry));
    let names = std::iter::once(entry.clone()).chain(twin.clone());
    let functions = generated.module.functions.clone();
    for (op, name) in functions.into_iter().zip(names) {
        for (key, value) in &mut generated.module.op_mut(op).attributes {
            if key == "sym_name" {
                *value = Attribute::String(name.clone());
            }
        }
    }
    generated.abi.entry = entry;
    generated.abi.divisible_entry = twin;
}

/// The symbol of the entry for dims that [`DIM_DIVISOR`] divides.
fn divisible_name(entry: &str) -> String {
    format!("{entry}_dims{DIM_DIVISOR}")
}

/// Adds `kernel` to `module` as an entry named `entry` that carries `hints` and, when the
/// kernel reads symbolic dims, as its twin for dims that [`DIM_DIVISOR`] divides and
/// [`DIM_BOUND`] bounds; a module of
/// several entries (their names distinct) assembles into one cubin holding each.
pub fn generate_entry(
    module: Module,
    kernel: &TileKernel,
    hints: &KernelHints,
    entry: String,
) -> Result<Generated, CodegenError> {
    let mut generated = add_entry(module, kernel, hints, entry.clone(), false)?;
    if !generated.abi.dims.is_empty() {
        let twin = divisible_name(&entry);
        let with_twin = add_entry(generated.module, kernel, hints, twin.clone(), true)?;
        generated.module = with_twin.module;
        generated.abi.divisible_entry = Some(twin);
    }
    Ok(generated)
}

/// Adds one entry of `kernel` to `module`; with `dims_divisible`, its dims are assumed
/// multiples of [`DIM_DIVISOR`] in `0..=DIM_BOUND`.
fn add_entry(
    module: Module,
    kernel: &TileKernel,
    hints: &KernelHints,
    entry: String,
    dims_divisible: bool,
) -> Result<Generated, CodegenError> {
    let dims = body_dims(kernel);
    let persistent = hints.persistent.filter(|_| !kernel.grid.is_empty());
    let grid_extents = kernel.grid.len() > 1 || persistent.is_some();
    let mut arg_types: Vec<Type> = kernel
        .params
        .iter()
        .map(|p| ptr_tile(mem_scalar(p.dtype), &[]))
        .collect();
    arg_types.extend(dims.iter().map(|_| index_ty()));
    if grid_extents {
        arg_types.extend(kernel.grid.iter().map(|_| index_ty()));
    }
    let mut module = module;
    let (region, block, args) = build_single_block_region(&mut module, &arg_types);
    let n = kernel.params.len();
    let mut t = Translator {
        e: Emitter { module, block },
        kernel,
        values: HashMap::new(),
        consts: HashMap::new(),
        divisors: HashMap::new(),
        dims_divisible,
        types: HashMap::new(),
        views: HashMap::new(),
        params: args[..n].to_vec(),
        dims: dims
            .iter()
            .cloned()
            .zip(args[n..n + dims.len()].iter().copied())
            .collect(),
        extents: args[n + dims.len()..].to_vec(),
        block_id: None,
        hints: *hints,
    };
    t.assume_aligned_params();
    if persistent.is_some() {
        t.tile_loop(&kernel.body)?;
    } else {
        t.block(&kernel.body)?;
    }
    t.e.op(Opcode::Return, &[], vec![], vec![]);
    let mut module = t.e.module;
    let mut builder = OpBuilder::new(Opcode::Entry, Location::Unknown)
        .attr("sym_name", Attribute::String(entry.clone()))
        .attr(
            "function_type",
            Attribute::Type(Type::Func(FuncType {
                inputs: arg_types,
                results: vec![],
            })),
        );
    if hints.occupancy.is_some() || hints.num_ctas.is_some() || hints.warps.is_some() {
        builder = builder.attr("optimization_hints", hints.attribute());
    }
    let (op, _) = builder.region(region).build(&mut module);
    module.functions.push(op);
    Ok(Generated {
        module,
        abi: KernelAbi {
            entry,
            divisible_entry: None,
            params: n,
            dims,
            grid_extents,
            blocks_per_sm: persistent,
        },
    })
}

/// The kind of a kernel named `k3_matmul` (`matmul`): its name without its position.
pub fn kernel_kind(name: &str) -> &str {
    match name.split_once('_') {
        Some((index, kind))
            if index.len() > 1
                && index.starts_with('k')
                && index[1..].chars().all(|c| c.is_ascii_digit()) =>
        {
            kind
        }
        _ => name,
    }
}

/// A symbol made of the kernel's kind (`k3_matmul` → `tir_matmul`): letters, digits and `_`.
/// Without the position, so that kernels that differ only in position generate the same
/// module.
fn entry_name(name: &str) -> String {
    let clean: String = kernel_kind(name)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("tir_{clean}")
}

impl Translator<'_> {
    /// Tells the compiler every parameter's base is [`PARAM_ALIGN`]-byte aligned (the runtime
    /// guarantees it), which vectorized and TMA loads need.
    fn assume_aligned_params(&mut self) {
        for p in &mut self.params {
            let ty = self.e.ty(*p);
            let predicate = Attribute::DivBy(DivBy {
                divisor: PARAM_ALIGN,
                every: None,
                along: None,
            });
            *p = self
                .e
                .op1(Opcode::Assume, &[*p], vec![("predicate", predicate)], ty);
        }
    }

    fn get(&self, id: ValueId) -> Res<Value> {
        self.values.get(&id).copied().ok_or_else(|| {
            malformed(format!(
                "{} uses {id} before it is defined",
                self.kernel.name
            ))
        })
    }

    fn tile_of(&self, id: ValueId) -> Res<(DType, Vec<i64>)> {
        match self.types.get(&id) {
            Some(TileType::Tile { dtype, shape }) => {
                Ok((*dtype, shape.iter().map(|&d| d as i64).collect()))
            }
            _ => Err(malformed(format!("{id} is not a tile"))),
        }
    }

    fn block(&mut self, block: &Block) -> Res<()> {
        for stmt in &block.stmts {
            let results = self.stmt(&stmt.op, &stmt.defs)?;
            if results.len() != stmt.defs.len() {
                return Err(malformed(format!(
                    "{}: {:?} defines {} values, translated to {}",
                    self.kernel.name,
                    stmt.defs.first().map(|d| d.0),
                    stmt.defs.len(),
                    results.len()
                )));
            }
            for ((id, ty), v) in stmt.defs.iter().zip(results) {
                self.values.insert(*id, v);
                self.types.insert(*id, ty.clone());
            }
        }
        Ok(())
    }

    /// The flat tile-block id as `i64`.
    fn block_id(&mut self) -> Value {
        if let Some(v) = self.block_id {
            return v;
        }
        let v = self.grid_query(Opcode::GetTileBlockId);
        self.block_id = Some(v);
        v
    }

    /// The x component of a grid query (`GetTileBlockId`, `GetNumTileBlocks`) as `i64`; the
    /// launch grid is one-dimensional.
    fn grid_query(&mut self, opcode: Opcode) -> Value {
        let i32t = tile(ScalarType::I32, &[]);
        let xyz = self
            .e
            .op(opcode, &[], vec![], vec![i32t.clone(), i32t.clone(), i32t]);
        self.e.int_resize(xyz[0], ScalarType::I64, false)
    }

    /// `body` once per tile of the grid, for a persistent entry: block `b` of `B` runs tiles
    /// `b, b + B, ...` below the product of the grid's extents, each with its flat id as the
    /// block id. Tiles write disjoint regions (what the kernel's certificate proves of tile
    /// blocks), so running several in one block in any order computes the same.
    fn tile_loop(&mut self, body: &Block) -> Res<()> {
        let first = self.block_id();
        let tiles = self.tile_count();
        let blocks = self.grid_query(Opcode::GetNumTileBlocks);
        let (region, block, ids) = build_single_block_region(&mut self.e.module, &[index_ty()]);
        let outer = std::mem::replace(&mut self.e.block, block);
        self.block_id = Some(ids[0]);
        let translated = self.block(body);
        self.e.op(Opcode::Continue, &[], vec![], vec![]);
        self.e.block = outer;
        translated?;
        self.e
            .region_op(Opcode::For, &[first, tiles, blocks], vec![], vec![], region);
        Ok(())
    }

    fn program_id(&mut self, axis: usize) -> Res<Value> {
        let flat = self.block_id();
        let rank = self.extents.len();
        if rank == 0 {
            return Ok(flat);
        }
        let flat = if self.hints.last_first == Some(true) {
            self.last_first(flat)
        } else {
            flat
        };
        if let Some(group) = self.hints.group_rows.filter(|_| axis + 2 >= rank) {
            return Ok(self.grouped_program_id(flat, axis, i64::from(group)));
        }
        Ok(self.row_major_program_id(flat, axis))
    }

    /// The number of tiles of the grid: the product of its extents.
    fn tile_count(&mut self) -> Value {
        let mut tiles = self.extents[0];
        for k in 1..self.extents.len() {
            tiles = self.e.muli(tiles, self.extents[k]);
        }
        tiles
    }

    /// The flat id `flat` counted from the grid's last tile: `tiles - 1 - flat`.
    fn last_first(&mut self, flat: Value) -> Value {
        let tiles = self.tile_count();
        let one = self.e.index_const(1);
        let last = self.e.subi(tiles, one);
        self.e.subi(last, flat)
    }

    /// Axis `axis` of the flat id `flat` over the grid's extents, row-major.
    fn row_major_program_id(&mut self, flat: Value, axis: usize) -> Value {
        let mut inner: Option<Value> = None;
        for k in axis + 1..self.extents.len() {
            let ext = self.extents[k];
            inner = Some(match inner {
                None => ext,
                Some(i) => self.e.muli(i, ext),
            });
        }
        let q = match inner {
            None => flat,
            Some(i) => self.e.divi(flat, i, true),
        };
        if axis == 0 {
            q
        } else {
            self.e.signed_op(Opcode::RemI, q, self.extents[axis], true)
        }
    }

    /// Axis `axis` (one of the last two) when the last two axes are walked in groups of
    /// `group` rows ([`order::grouped`]).
    fn grouped_program_id(&mut self, flat: Value, axis: usize, group: i64) -> Value {
        let rank = self.extents.len();
        let (rows, cols) = (self.extents[rank - 2], self.extents[rank - 1]);
        let (row, col) = order::grouped(&mut self.e, flat, rows, cols, group);
        if axis == rank - 2 {
            row
        } else {
            col
        }
    }

    fn index_arith(&mut self, op: IndexOp, a: Value, b: Value) -> Value {
        let e = &mut self.e;
        match op {
            IndexOp::Add => e.addi(a, b),
            IndexOp::Sub => e.subi(a, b),
            IndexOp::Mul => e.muli(a, b),
            IndexOp::Div => e.divi(a, b, true),
            IndexOp::Rem => e.signed_op(Opcode::RemI, a, b, true),
            IndexOp::Min => e.signed_op(Opcode::MinI, a, b, true),
            IndexOp::Max => e.signed_op(Opcode::MaxI, a, b, true),
        }
    }

    /// The largest power of two (at most [`MAX_KNOWN_DIVISOR`]) known to divide index `id`:
    /// 0 is divided by every one, a dim or a program id by 1 only.
    fn divisor(&self, id: ValueId) -> i64 {
        match self.consts.get(&id) {
            Some(0) => MAX_KNOWN_DIVISOR,
            Some(&c) => (1i64 << c.trailing_zeros().min(62)).min(MAX_KNOWN_DIVISOR),
            None => self.divisors.get(&id).copied().unwrap_or(1),
        }
    }

    /// What divides `a op b` given what divides `a` and `b`: a sum, difference, minimum or
    /// maximum keeps the smaller power of two, a product multiplies them.
    fn arith_divisor(&self, op: IndexOp, a: ValueId, b: ValueId) -> i64 {
        let (x, y) = (self.divisor(a), self.divisor(b));
        match op {
            IndexOp::Add | IndexOp::Sub | IndexOp::Min | IndexOp::Max => x.min(y),
            IndexOp::Mul => x.saturating_mul(y).min(MAX_KNOWN_DIVISOR),
            IndexOp::Div | IndexOp::Rem => 1,
        }
    }

    /// `v` (of type `ty`) with the compiler told that `divisor` divides it, when it is more
    /// than 1.
    fn assume_div_by(&mut self, v: Value, divisor: i64) -> Value {
        if divisor <= 1 {
            return v;
        }
        let ty = self.e.ty(v);
        let predicate = Attribute::DivBy(DivBy {
            divisor: divisor as u64,
            every: None,
            along: None,
        });
        self.e
            .op1(Opcode::Assume, &[v], vec![("predicate", predicate)], ty)
    }

    /// The extent or stride `v` of a view, which `divisor` divides, clamped to
    /// `0..=DIM_BOUND` (exact in an entry for dims that [`DIM_BOUND`] bounds; see there), with
    /// the compiler told so and that `divisor` still divides it.
    fn within_bound(&mut self, v: Value, divisor: i64) -> Value {
        let zero = self.e.index_const(0);
        let bound = self.e.index_const(DIM_BOUND);
        let v = self.e.signed_op(Opcode::MaxI, v, zero, true);
        let v = self.e.signed_op(Opcode::MinI, v, bound, true);
        let v = self.assume_bounded(v, DIM_BOUND);
        self.assume_div_by(v, divisor)
    }

    /// `v` with the compiler told that it lies in `0..=max`.
    fn assume_bounded(&mut self, v: Value, max: i64) -> Value {
        let ty = self.e.ty(v);
        let predicate = Attribute::Bounded(Bounded {
            lb: Some(0),
            ub: Some(max),
        });
        self.e
            .op1(Opcode::Assume, &[v], vec![("predicate", predicate)], ty)
    }

    fn fold(&self, op: IndexOp, a: ValueId, b: ValueId) -> Option<i64> {
        let (x, y) = (*self.consts.get(&a)?, *self.consts.get(&b)?);
        match op {
            IndexOp::Add => x.checked_add(y),
            IndexOp::Sub => x.checked_sub(y),
            IndexOp::Mul => x.checked_mul(y),
            IndexOp::Div => x.checked_div(y),
            IndexOp::Rem => x.checked_rem(y),
            IndexOp::Min => Some(x.min(y)),
            IndexOp::Max => Some(x.max(y)),
        }
    }

    fn stmt(&mut self, op: &TileOp, defs: &[(ValueId, TileType)]) -> Res<Vec<Value>> {
        let def = |i: usize| -> Res<&TileType> {
            defs.get(i)
                .map(|d| &d.1)
                .ok_or_else(|| malformed("a statement defines too few values".into()))
        };
        let def_tile = |i: usize| -> Res<(DType, Vec<i64>)> {
            match def(i)? {
                TileType::Tile { dtype, shape } => {
                    Ok((*dtype, shape.iter().map(|&d| d as i64).collect()))
                }
                _ => Err(malformed("expected a tile".into())),
            }
        };
        let one = |v: Value| Ok(vec![v]);
        match op {
            TileOp::ProgramId { axis } => one(self.program_id(*axis)?),
            TileOp::Dim { name } => {
                let v = *self
                    .dims
                    .get(name)
                    .ok_or_else(|| malformed(format!("dim `{name}` is not an argument")))?;
                if self.dims_divisible {
                    if let Some((id, _)) = defs.first() {
                        self.divisors.insert(*id, DIM_DIVISOR);
                    }
                    let v = self.assume_bounded(v, DIM_BOUND);
                    return one(self.assume_div_by(v, DIM_DIVISOR));
                }
                one(v)
            }
            TileOp::Index { value } => {
                if let Some((id, _)) = defs.first() {
                    self.consts.insert(*id, *value);
                }
                one(self.e.index_const(*value))
            }
            TileOp::IndexArith { op, a, b } => {
                if let (Some(c), Some((id, TileType::Index))) =
                    (self.fold(*op, *a, *b), defs.first())
                {
                    self.consts.insert(*id, c);
                    return one(self.e.index_const(c));
                }
                if let Some((id, _)) = defs.first() {
                    let divisor = self.arith_divisor(*op, *a, *b);
                    if divisor > 1 {
                        self.divisors.insert(*id, divisor);
                    }
                }
                let (a, b) = (self.get(*a)?, self.get(*b)?);
                one(self.index_arith(*op, a, b))
            }
            TileOp::IndexCmp { op, a, b } => {
                let pred = match op {
                    CmpOp::Lt => Pred::Lt,
                    CmpOp::Le => Pred::Le,
                    CmpOp::Ge => Pred::Ge,
                    CmpOp::Eq => Pred::Eq,
                };
                let (a, b) = (self.get(*a)?, self.get(*b)?);
                one(self.e.cmpi(pred, a, b, true))
            }
            TileOp::LoadScalar { param, index } => {
                let ptr = self.param_ptr(*param)?;
                let dtype = self.kernel.params[*param].dtype;
                let index = self.get(*index)?;
                let p = self.e.offset(ptr, index);
                let v = self.e.load_ptr(p, mem_scalar(dtype), None);
                one(self
                    .e
                    .int_resize(v, ScalarType::I64, !dtype.is_unsigned_int()))
            }
            TileOp::MakeView {
                param,
                offset,
                shape,
                strides,
            } => {
                let view = self.make_view(*param, *offset, shape, strides)?;
                let id = defs
                    .first()
                    .map(|d| d.0)
                    .ok_or_else(|| malformed("view".into()))?;
                self.views.insert(id, view);
                // Views have no value of their own until a load or store needs one.
                one(self.params[*param])
            }
            TileOp::MakeToken => one(self.e.op1(Opcode::MakeToken, &[], vec![], Type::Token)),
            TileOp::Load {
                view,
                coords,
                padding,
                token,
            } => {
                let (dtype, shape) = def_tile(0)?;
                let (v, tok) = self.load(*view, coords, *padding, *token, dtype, &shape)?;
                Ok(match token {
                    Some(_) => vec![v, tok],
                    None => vec![v],
                })
            }
            TileOp::LoadIndexed {
                view,
                indices,
                mask,
                padding,
            } => {
                let (dtype, shape) = def_tile(0)?;
                one(self.load_indexed(*view, indices, *mask, *padding, dtype, &shape)?)
            }
            TileOp::Store {
                view,
                coords,
                value,
                token,
            } => one(self.store(*view, coords, *value, *token)?),
            TileOp::Constant { value } => match def(0)? {
                TileType::Index => one(self.e.index_const(*value as i64)),
                _ => {
                    let (dtype, shape) = def_tile(0)?;
                    one(self.e.constant(reg_scalar(dtype), *value, &shape))
                }
            },
            TileOp::Iota { axis } => {
                let (_, shape) = def_tile(0)?;
                one(self.e.iota(&shape, *axis))
            }
            TileOp::Splat { x } => {
                let (_, shape) = def_tile(0)?;
                let x = self.get(*x)?;
                one(self.e.splat(x, &shape))
            }
            TileOp::Unary { op, x } => {
                let (dtype, _) = self.tile_of(*x)?;
                let x = self.get(*x)?;
                one(math::unary(&mut self.e, *op, dtype, x)?)
            }
            TileOp::ApproxExp { x, shift, factor } => {
                let (x, shift) = (self.get(*x)?, self.get(*shift)?);
                one(self.e.scaled_exp_approx(x, shift, *factor))
            }
            TileOp::Binary { op, a, b } => {
                let (dtype, _) = self.tile_of(*a)?;
                let (a, b) = (self.get(*a)?, self.get(*b)?);
                one(math::binary(&mut self.e, *op, dtype, a, b)?)
            }
            TileOp::Select { cond, a, b } => {
                let (c, a, b) = (self.get(*cond)?, self.get(*a)?, self.get(*b)?);
                one(self.e.select(c, a, b))
            }
            TileOp::Cast { x } => {
                let (from, _) = self.tile_of(*x)?;
                let (to, _) = def_tile(0)?;
                let x = self.get(*x)?;
                one(math::cast(&mut self.e, from, to, x))
            }
            TileOp::Broadcast { x } => {
                let (_, shape) = def_tile(0)?;
                let x = self.get(*x)?;
                one(self.e.broadcast(x, &shape))
            }
            TileOp::Reshape { x } => {
                let (_, shape) = def_tile(0)?;
                let x = self.get(*x)?;
                one(self.e.reshape(x, &shape))
            }
            TileOp::Permute { x, perm } => {
                let (dtype, shape) = def_tile(0)?;
                let x = self.get(*x)?;
                let perm: Vec<i32> = perm.iter().map(|&p| p as i32).collect();
                one(self.e.op1(
                    Opcode::Permute,
                    &[x],
                    vec![("permutation", Attribute::DenseI32Array(perm))],
                    tile(reg_scalar(dtype), &shape),
                ))
            }
            TileOp::Reduce { op, x, axis } => {
                let (dtype, _) = self.tile_of(*x)?;
                let x = self.get(*x)?;
                one(math::reduce(&mut self.e, *op, dtype, x, *axis)?)
            }
            TileOp::Mma { a, b, acc } => {
                let (dtype, _) = self.tile_of(*a)?;
                let (a, b, acc) = (self.get(*a)?, self.get(*b)?, self.get(*acc)?);
                one(self.mma(dtype, a, b, acc)?)
            }
            TileOp::For {
                start,
                end,
                step,
                var,
                init,
                carried,
                body,
                yields,
            } => self.for_loop(*start, *end, *step, *var, init, carried, body, yields),
        }
    }

    fn param_ptr(&self, param: usize) -> Res<Value> {
        self.params
            .get(param)
            .copied()
            .ok_or_else(|| malformed(format!("parameter {param} does not exist")))
    }

    fn make_view(
        &mut self,
        param: usize,
        offset: ValueId,
        shape: &[ValueId],
        strides_ids: &[ValueId],
    ) -> Res<View> {
        let ptr = self.param_ptr(param)?;
        let dtype = self.kernel.params[param].dtype;
        let base = if self.consts.get(&offset) == Some(&0) {
            ptr
        } else {
            let off = self.get(offset)?;
            let moved = self.e.offset(ptr, off);
            // Aligned as far as both the base and the offset's bytes are.
            let bytes = self
                .divisor(offset)
                .saturating_mul(dtype.size_bytes() as i64);
            self.assume_div_by(moved, bytes.min(PARAM_ALIGN as i64))
        };
        let with_const = |t: &Self, ids: &[ValueId]| -> Res<Vec<(Value, Option<i64>)>> {
            ids.iter()
                .map(|id| Ok((t.get(*id)?, t.consts.get(id).copied())))
                .collect()
        };
        let divisors = (
            shape.iter().map(|id| self.divisor(*id)).collect(),
            strides_ids.iter().map(|id| self.divisor(*id)).collect(),
        );
        let shape = with_const(self, shape)?;
        // A dynamic stride with what divides it, so that rows stay as aligned as they are
        // for vector and TMA loads (a stride of `256·seq` elements is a multiple of 256).
        let mut strides = with_const(self, strides_ids)?;
        for ((v, c), id) in strides.iter_mut().zip(strides_ids) {
            if c.is_none() {
                let divisor = self.divisor(*id);
                *v = self.assume_div_by(*v, divisor);
            }
        }
        let repeated = shape
            .iter()
            .zip(&strides)
            .map(|(e, s)| s.1 == Some(0) && e.1 != Some(1))
            .collect();
        Ok(View {
            dtype,
            base,
            shape,
            strides,
            divisors,
            repeated,
            tensor_view: None,
        })
    }

    fn view(&self, id: ValueId) -> Res<View> {
        self.views
            .get(&id)
            .cloned()
            .ok_or_else(|| malformed(format!("{id} is not a view")))
    }

    /// The `make_tensor_view` of a view, made on first use.
    fn tensor_view(&mut self, id: ValueId) -> Res<(Value, TensorViewType)> {
        let view = self.view(id)?;
        if let Some(tv) = view.tensor_view {
            return Ok(tv);
        }
        // Tile IR wants positive constant strides: a stride-0 axis has one element to read,
        // so its stride is never stepped; it is the next inner axis's span, which keeps every
        // row as aligned as the innermost one for vectorized and TMA loads (a TMA stride is a
        // multiple of 16 bytes). A dynamic span is at least what divides it, so never 0.
        let mut extents = view.shape.clone();
        let mut strides = view.strides.clone();
        let (mut extent_divisors, mut stride_divisors) = view.divisors.clone();
        for k in (0..extents.len()).rev() {
            if strides[k].1 == Some(0) {
                let (span, divisor) = match (strides.get(k + 1), extents.get(k + 1)) {
                    (Some(&(_, Some(s))), Some(&(_, Some(e)))) => {
                        let span = (s * e).max(1);
                        let divisor = (1i64 << span.trailing_zeros()).min(MAX_KNOWN_DIVISOR);
                        ((self.e.index_const(span), Some(span)), divisor)
                    }
                    (Some(&stride), Some(&extent)) => {
                        let divisor = stride_divisors[k + 1]
                            .saturating_mul(extent_divisors[k + 1])
                            .min(MAX_KNOWN_DIVISOR);
                        // A static one's value may stand in for it (a replaced extent's).
                        let mut value = |(v, c): (Value, Option<i64>)| match c {
                            Some(c) => self.e.index_const(c),
                            None => v,
                        };
                        let (s, e) = (value(stride), value(extent));
                        let span = self.e.muli(s, e);
                        let least = self.e.index_const(divisor);
                        let span = self.e.signed_op(Opcode::MaxI, span, least, true);
                        ((self.assume_div_by(span, divisor), None), divisor)
                    }
                    _ => ((self.e.index_const(1), Some(1)), 1),
                };
                strides[k] = span;
                stride_divisors[k] = divisor;
                extents[k] = (view.base, Some(1));
                extent_divisors[k] = 1;
            }
        }
        // Tile IR wants positive constant sizes too: an empty axis is given at run time.
        for extent in &mut extents {
            if extent.1 == Some(0) {
                *extent = (self.e.index_const(0), None);
            }
        }
        let statics = |xs: &[(Value, Option<i64>)]| -> Vec<i64> {
            xs.iter().map(|(_, c)| c.unwrap_or(DYNAMIC)).collect()
        };
        let dynamic = |xs: &[(Value, Option<i64>)]| -> Vec<Value> {
            xs.iter()
                .filter(|(_, c)| c.is_none())
                .map(|(v, _)| *v)
                .collect()
        };
        let ty = TensorViewType {
            element_type: mem_scalar(view.dtype),
            shape: statics(&extents),
            strides: statics(&strides),
        };
        if self.dims_divisible {
            for (k, extent) in extents.iter_mut().enumerate() {
                if extent.1.is_none() {
                    extent.0 = self.within_bound(extent.0, extent_divisors[k]);
                }
            }
            for (k, stride) in strides.iter_mut().enumerate() {
                if stride.1.is_none() {
                    stride.0 = self.within_bound(stride.0, stride_divisors[k]);
                }
            }
        }
        let shape_ops = dynamic(&extents);
        let stride_ops = dynamic(&strides);
        let mut operands = vec![view.base];
        operands.extend(&shape_ops);
        operands.extend(&stride_ops);
        let v = self.e.op1(
            Opcode::MakeTensorView,
            &operands,
            vec![(
                "operandSegmentSizes",
                segments_attr(&[1, shape_ops.len() as i64, stride_ops.len() as i64]),
            )],
            Type::TensorView(ty.clone()),
        );
        if let Some(entry) = self.views.get_mut(&id) {
            entry.tensor_view = Some((v, ty.clone()));
        }
        Ok((v, ty))
    }

    fn partition_view(
        &mut self,
        view: ValueId,
        tile_shape: &[i64],
        padding: Option<PaddingValue>,
    ) -> Res<Value> {
        let (tv, tv_ty) = self.tensor_view(view)?;
        let ty = PartitionViewType {
            tile_shape: tile_shape.iter().map(|&d| d as i32).collect(),
            dim_map: (0..tile_shape.len() as i32).collect(),
            tensor_view: tv_ty,
            padding_value: padding,
        };
        Ok(self.e.op1(
            Opcode::MakePartitionView,
            &[tv],
            vec![],
            Type::PartitionView(ty),
        ))
    }

    /// The attributes of a tile load (`load`) or store: `attrs`, and the kernel's hints for
    /// such accesses if it has any.
    fn view_access_attrs<'a>(
        &self,
        load: bool,
        mut attrs: Vec<(&'a str, Attribute)>,
    ) -> Vec<(&'a str, Attribute)> {
        let mut hints = Vec::new();
        if let Some(allow) = self.hints.allow_tma {
            hints.push(("allow_tma".to_string(), Attribute::Bool(allow)));
        }
        if let Some(latency) = self.hints.load_latency.filter(|_| load) {
            let value = Attribute::Integer(i64::from(latency), Type::Scalar(ScalarType::I32));
            hints.push(("latency".to_string(), value));
        }
        if !hints.is_empty() {
            attrs.push((
                "optimization_hints",
                Attribute::OptimizationHints(OptimizationHints {
                    entries: vec![("default".to_string(), hints)],
                }),
            ));
        }
        attrs
    }

    /// A tile of `dtype` read from memory (of `mem_scalar(dtype)`) to its register type.
    fn loaded_value(&mut self, v: Value, dtype: DType) -> Value {
        if dtype == DType::Bool {
            let zero = self.e.constant(ScalarType::I8, 0.0, &self.e.shape(v));
            self.e.cmpi(Pred::Ne, v, zero, false)
        } else {
            v
        }
    }

    fn stored_value(&mut self, v: Value, dtype: DType) -> Value {
        if dtype == DType::Bool {
            self.e.int_resize(v, ScalarType::I8, false)
        } else {
            v
        }
    }

    /// Whether element `t` of the tile at `coords` is inside the view along each of `axes`.
    /// Each axis's test runs on a tile that spans that axis only and is broadcast after, so
    /// the index arithmetic costs the tile's edge lengths rather than its size.
    fn in_bounds(&mut self, view: &View, coords: &[Value], shape: &[i64], axes: &[usize]) -> Value {
        let mut mask: Option<Value> = None;
        for &k in axes {
            let mut along = vec![1; shape.len()];
            along[k] = shape[k];
            let size = self.e.index_const(shape[k]);
            let start = self.e.muli(coords[k], size);
            let start = self.e.splat(start, &along);
            let pos = self.e.iota(&along, k);
            let pos = self.e.addi(start, pos);
            let extent = self.e.splat(view.shape[k].0, &along);
            let inside = self.e.cmpi(Pred::Lt, pos, extent, true);
            let inside = self.e.broadcast(inside, shape);
            mask = Some(match mask {
                None => inside,
                Some(m) => self.e.same(Opcode::AndI, m, inside, vec![]),
            });
        }
        mask.unwrap_or_else(|| self.e.constant(ScalarType::I1, 1.0, shape))
    }

    fn load(
        &mut self,
        view_id: ValueId,
        coords: &[ValueId],
        padding: f64,
        token: Option<ValueId>,
        dtype: DType,
        shape: &[i64],
    ) -> Res<(Value, Value)> {
        let view = self.view(view_id)?;
        let coords: Vec<Value> = coords.iter().map(|c| self.get(*c)).collect::<Res<_>>()?;
        let token = token.map(|t| self.get(t)).transpose()?;
        let mem = mem_scalar(dtype);
        if shape.is_empty() {
            let (v, tok) = self.e.load_ptr_token(view.base, mem, token);
            return Ok((self.loaded_value(v, dtype), tok));
        }
        let native = padding_value(padding, dtype);
        // Repeated axes load one element (at coordinate 0) and broadcast it.
        let mut loaded = shape.to_vec();
        let mut at = coords.clone();
        let zero = self.e.index_const(0);
        for k in 0..shape.len() {
            if view.repeated[k] {
                loaded[k] = 1;
                at[k] = zero;
            }
        }
        let pv = self.partition_view(view_id, &loaded, native)?;
        let mut operands = vec![pv];
        operands.extend(&at);
        operands.extend(token);
        let out = self.e.op(
            Opcode::LoadViewTko,
            &operands,
            self.view_access_attrs(
                true,
                vec![
                    ("memory_ordering_semantics", Attribute::i32(0)),
                    (
                        "operandSegmentSizes",
                        segments_attr(&[1, coords.len() as i64, token.is_some() as i64]),
                    ),
                ],
            ),
            vec![tile(mem, &loaded), Type::Token],
        );
        let v = self.loaded_value(out[0], dtype);
        let mut v = self.e.broadcast(v, shape);
        let axes: Vec<usize> = (0..shape.len())
            .filter(|&k| view.repeated[k] || native.is_none())
            .collect();
        if !axes.is_empty() {
            let inside = self.in_bounds(&view, &coords, shape, &axes);
            let pad = self.e.constant(reg_scalar(dtype), padding, shape);
            v = self.e.select(inside, v, pad);
        }
        Ok((v, out[1]))
    }

    fn load_indexed(
        &mut self,
        view_id: ValueId,
        indices: &[ValueId],
        mask: ValueId,
        padding: f64,
        dtype: DType,
        shape: &[i64],
    ) -> Res<Value> {
        let view = self.view(view_id)?;
        let mut mask = self.get(mask)?;
        let mut offset: Option<Value> = None;
        for (k, id) in indices.iter().enumerate() {
            let i = self.get(*id)?;
            let zero = self.e.constant(ScalarType::I64, 0.0, shape);
            let extent = self.e.splat(view.shape[k].0, shape);
            let lo = self.e.cmpi(Pred::Ge, i, zero, true);
            let hi = self.e.cmpi(Pred::Lt, i, extent, true);
            let ok = self.e.same(Opcode::AndI, lo, hi, vec![]);
            mask = self.e.same(Opcode::AndI, mask, ok, vec![]);
            let stride = self.e.splat(view.strides[k].0, shape);
            let term = self.e.muli(i, stride);
            offset = Some(match offset {
                None => term,
                Some(o) => self.e.addi(o, term),
            });
        }
        let offset = match offset {
            Some(o) => o,
            None => self.e.constant(ScalarType::I64, 0.0, shape),
        };
        // Masked-off lanes still form an address: keep it at the base.
        let zero = self.e.constant(ScalarType::I64, 0.0, shape);
        let offset = self.e.select(mask, offset, zero);
        let ptrs = self.e.offset(view.base, offset);
        let mem = mem_scalar(dtype);
        let pad = self.e.constant(mem, padding, shape);
        let v = self.e.load_ptr(ptrs, mem, Some((mask, pad)));
        Ok(self.loaded_value(v, dtype))
    }

    fn store(
        &mut self,
        view_id: ValueId,
        coords: &[ValueId],
        value: ValueId,
        token: ValueId,
    ) -> Res<Value> {
        let view = self.view(view_id)?;
        let coords: Vec<Value> = coords.iter().map(|c| self.get(*c)).collect::<Res<_>>()?;
        let token = self.get(token)?;
        let (dtype, shape) = self.tile_of(value)?;
        let v = self.get(value)?;
        let v = self.stored_value(v, dtype);
        if shape.is_empty() {
            return Ok(self.e.store_ptr(view.base, v, token));
        }
        let pv = self.partition_view(view_id, &shape, None)?;
        let mut operands = vec![v, pv];
        operands.extend(&coords);
        operands.push(token);
        Ok(self.e.op1(
            Opcode::StoreViewTko,
            &operands,
            self.view_access_attrs(
                false,
                vec![
                    ("memory_ordering_semantics", Attribute::i32(0)),
                    (
                        "operandSegmentSizes",
                        segments_attr(&[1, 1, coords.len() as i64, 1]),
                    ),
                ],
            ),
            Type::Token,
        ))
    }

    /// `acc + a @ b` on the last two dims. Floats use `mmaf` (batched over one leading dim;
    /// more are folded into it); integers multiply and sum in `i64`.
    fn mma(&mut self, dtype: DType, a: Value, b: Value, acc: Value) -> Res<Value> {
        let (sa, sb, sc) = (self.e.shape(a), self.e.shape(b), self.e.shape(acc));
        let r = sa.len();
        if r < 2 {
            return Err(malformed("mma of tiles of rank below 2".into()));
        }
        let batch: i64 = sa[..r - 2].iter().product();
        let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
        if dtype.is_float() {
            let (a3, b3, c3) = if r == 2 {
                (a, b, acc)
            } else if batch == 1 {
                // A batch of one is a plain product: `tileiras` puts only 2-d `mmaf` on the
                // Hopper tensor-core path (wgmma); a 3-d one takes the sm_80 `mma.sync` path.
                (
                    self.e.reshape(a, &[m, k]),
                    self.e.reshape(b, &[k, n]),
                    self.e.reshape(acc, &[m, n]),
                )
            } else {
                (
                    self.e.reshape(a, &[batch, m, k]),
                    self.e.reshape(b, &[batch, k, n]),
                    self.e.reshape(acc, &[batch, m, n]),
                )
            };
            let t = self.e.ty(c3);
            let out = self.e.op1(Opcode::MmaF, &[a3, b3, c3], vec![], t);
            return Ok(self.e.reshape(out, &sc));
        }
        self.int_mma(dtype, a, b, acc, [batch, m, k, n])
    }

    /// Integer `acc + a @ b` in `i64` (wrapping): a loop over `k` adding the outer product of
    /// column `c` of `a` and row `c` of `b` (tensor cores have no 64-bit integer path).
    fn int_mma(
        &mut self,
        dtype: DType,
        a: Value,
        b: Value,
        acc: Value,
        [batch, m, k, n]: [i64; 4],
    ) -> Res<Value> {
        let signed = !dtype.is_unsigned_int();
        let sc = self.e.shape(acc);
        let a = self.e.int_resize(a, ScalarType::I64, signed);
        let b = self.e.int_resize(b, ScalarType::I64, signed);
        let a = self.e.reshape(a, &[batch, m, k]);
        let b = self.e.reshape(b, &[batch, k, n]);
        let acc = self.e.reshape(acc, &[batch, m, n]);
        let i32t = tile(ScalarType::I32, &[]);
        let lo = self.e.scalar_const(ScalarType::I32, 0.0);
        let hi = self.e.scalar_const(ScalarType::I32, k as f64);
        let step = self.e.scalar_const(ScalarType::I32, 1.0);
        let acc_ty = self.e.ty(acc);
        let (region, ()) = self.e.in_region(&[i32t, acc_ty.clone()], |e, v| {
            let (c, sum) = (v[0], v[1]);
            let zero = e.scalar_const(ScalarType::I32, 0.0);
            let column = e.op1(
                Opcode::Extract,
                &[a, zero, zero, c],
                vec![],
                tile(ScalarType::I64, &[batch, m, 1]),
            );
            let row = e.op1(
                Opcode::Extract,
                &[b, zero, c, zero],
                vec![],
                tile(ScalarType::I64, &[batch, 1, n]),
            );
            let full = [batch, m, n];
            let column = e.broadcast(column, &full);
            let row = e.broadcast(row, &full);
            let product = e.muli(column, row);
            let sum = e.addi(sum, product);
            e.op(Opcode::Continue, &[sum], vec![], vec![]);
        });
        let out = self.e.region_op(
            Opcode::For,
            &[lo, hi, step, acc],
            vec![],
            vec![acc_ty],
            region,
        )[0];
        Ok(self.e.reshape(out, &sc))
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        start: ValueId,
        end: ValueId,
        step: ValueId,
        var: ValueId,
        init: &[ValueId],
        carried: &[(ValueId, TileType)],
        body: &Block,
        yields: &[ValueId],
    ) -> Res<Vec<Value>> {
        let mut operands = vec![self.get(start)?, self.get(end)?, self.get(step)?];
        for id in init {
            operands.push(self.get(*id)?);
        }
        let carried_types: Vec<Type> = init
            .iter()
            .map(|id| self.get(*id).map(|v| self.e.ty(v)))
            .collect::<Res<_>>()?;
        let mut args = vec![index_ty()];
        args.extend(carried_types.iter().cloned());
        let (region, block, values) = build_single_block_region(&mut self.e.module, &args);
        let outer = std::mem::replace(&mut self.e.block, block);
        self.values.insert(var, values[0]);
        self.types.insert(var, TileType::Index);
        for ((id, ty), v) in carried.iter().zip(&values[1..]) {
            self.values.insert(*id, *v);
            self.types.insert(*id, ty.clone());
        }
        let inner = self
            .block(body)
            .and_then(|()| yields.iter().map(|y| self.get(*y)).collect::<Res<Vec<_>>>());
        let inner = match inner {
            Ok(v) => v,
            Err(e) => {
                self.e.block = outer;
                return Err(e);
            }
        };
        self.e.op(Opcode::Continue, &inner, vec![], vec![]);
        self.e.block = outer;
        Ok(self
            .e
            .region_op(Opcode::For, &operands, vec![], carried_types, region))
    }
}

/// The partition view's own padding for `padding`, where Tile IR has one for `dtype`.
fn padding_value(padding: f64, dtype: DType) -> Option<PaddingValue> {
    if padding == 0.0 && padding.is_sign_positive() {
        return Some(PaddingValue::Zero);
    }
    // An f8 view pads with zero only: e4m3 has no infinities, and other values go through the
    // select below, as the reference pads (with the value rounded to the dtype).
    if !dtype.is_float() || dtype.float8().is_some() {
        return None;
    }
    if padding.is_nan() {
        Some(PaddingValue::Nan)
    } else if padding == f64::INFINITY {
        Some(PaddingValue::PosInf)
    } else if padding == f64::NEG_INFINITY {
        Some(PaddingValue::NegInf)
    } else if padding == 0.0 {
        Some(PaddingValue::NegZero)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::entry_name;

    #[test]
    fn entry_names_drop_the_kernel_position() {
        assert_eq!(entry_name("k3_matmul"), "tir_matmul");
        assert_eq!(entry_name("k12_row_reduction"), "tir_row_reduction");
        assert_eq!(entry_name("kv_update"), "tir_kv_update");
        assert_eq!(entry_name("odd-name"), "tir_odd_name");
    }
}
