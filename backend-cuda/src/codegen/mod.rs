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
//!
//! This module translates statements; its submodules hold the parts: `grid` (program ids),
//! `index` (index arithmetic and what is known of its values), `memory` (views, loads and
//! stores), `math` (element ops), `emit` (the Tile IR builder) and `order` (the order tile blocks
//! walk a matmul's grid in).

mod emit;
mod grid;
mod index;
mod math;
mod memory;
mod order;

use crate::codegen::emit::{mem_scalar, ptr_tile, reg_scalar, tile, Emitter, Pred};
use cutile_ir::builder::build_single_block_region;
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{
    Attribute, DivBy, FuncType, Location, Module, OptimizationHints, ScalarType, TensorViewType,
    Type, Value,
};
use cutile_ir::OpBuilder;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use tir_graph::DType;
use tir_lower::tile::{Block, CmpOp, TileKernel, TileOp, Type as TileType, ValueId};

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
