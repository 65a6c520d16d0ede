//! The tile program interpreter: runs one program of a kernel (or the kernel's grid body) on the
//! buffers as they were when the kernel started.
//!
//! # Memory semantics
//!
//! A program never writes a buffer directly: each [`TileOp::Store`] appends its elements to the
//! program's [`ProgramOutput::writes`], which the launcher applies after every program of the
//! kernel has finished (in program order, checking ownership in checking mode). Loads therefore
//! see the buffers as they were at kernel start, except that a load of a *mutable* parameter
//! sees the program's own earlier stores to it (the read-modify-write a token chain orders).
//! Reading an element that *another* program of the kernel writes is a race; checking mode
//! reports it from [`ProgramOutput::mutable_reads`].
//!
//! Every value is checked against the type its statement declares, and every malformed use
//! (an undefined value, a mismatched type, an index past a buffer) is an error, never a panic.

use crate::prepare::{KernelPlan, NO_SLOT};
use crate::stmt_text::describe;
use crate::tile::{self, type_name};
use crate::word::{Tile, Word};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use tir_graph::DType;
use tir_lower::tile::{Access, Block, Stmt, TileKernel, TileOp, Type, ValueId};

/// A value of a running program.
#[derive(Clone, Debug)]
enum Value {
    Index(i64),
    Tile(Rc<Tile>),
    View(Rc<View>),
    Token,
}

/// A view of a tensor parameter: view element `i` is buffer element `offset + Σ i[k]*strides[k]`.
#[derive(Debug)]
struct View {
    param: usize,
    offset: i64,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// One tensor parameter of a launch: its buffer's values at kernel start.
pub struct ParamData<'a> {
    pub data: &'a [Word],
    pub name: &'a str,
    pub access: Access,
    pub dtype: DType,
}

/// What every program of one launch shares.
pub struct Launch<'a> {
    pub kernel: &'a TileKernel,
    pub plan: &'a KernelPlan,
    pub params: Vec<ParamData<'a>>,
    pub dims: &'a BTreeMap<String, u64>,
    /// Whether to record what checking mode needs ([`ProgramOutput::mutable_reads`]).
    pub checking: bool,
}

/// One stored element: `value` for element `flat` of parameter `param`'s buffer.
#[derive(Clone, Copy, Debug)]
pub struct Write {
    pub param: u32,
    pub flat: usize,
    pub value: Word,
}

/// What one program did.
#[derive(Debug, Default)]
pub struct ProgramOutput {
    /// Its stores, in program order.
    pub writes: Vec<Write>,
    /// Elements of mutable parameters it loaded, `(param, flat)` (checking mode only).
    pub mutable_reads: Vec<(u32, usize)>,
}

/// Grid extents and programs.
///
/// Returns the grid extents of the launch, computed by the kernel's grid body.
pub fn grid(launch: &Launch) -> Result<Vec<i64>, String> {
    let mut p = Program::new(launch, None);
    p.block(&launch.kernel.grid_body)
        .map_err(|e| format!("grid: {e}"))?;
    launch
        .kernel
        .grid
        .iter()
        .map(|&g| match p.index(g) {
            Ok(n) if n >= 0 => Ok(n),
            Ok(n) => Err(format!("grid: extent {g} is {n}, below zero")),
            Err(e) => Err(format!("grid: {e}")),
        })
        .collect()
}

/// Runs the program with id `coords`.
pub fn run_program(launch: &Launch, coords: &[i64]) -> Result<ProgramOutput, String> {
    let mut p = Program::new(launch, Some(coords));
    p.block(&launch.kernel.body)?;
    Ok(p.out)
}

fn type_text(ty: &Type) -> String {
    match ty {
        Type::Index => "index".into(),
        Type::Tile { dtype, shape } => format!("tile {}", type_name(*dtype, shape)),
        Type::View { param, rank } => format!("view of parameter {param} (rank {rank})"),
        Type::Token => "token".into(),
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Index(_) => "index".into(),
        Value::Tile(t) => format!("tile {}", type_name(t.dtype, &t.dims)),
        Value::View(v) => format!("view of parameter {} (rank {})", v.param, v.shape.len()),
        Value::Token => "token".into(),
    }
}

fn fits(v: &Value, ty: &Type) -> bool {
    match (v, ty) {
        (Value::Index(_), Type::Index) | (Value::Token, Type::Token) => true,
        (Value::Tile(t), Type::Tile { dtype, shape }) => t.dtype == *dtype && t.dims == *shape,
        (Value::View(v), Type::View { param, rank }) => v.param == *param && v.shape.len() == *rank,
        _ => false,
    }
}

/// The declared tile type of a statement's `i`-th definition.
fn def_tile(stmt: &Stmt, i: usize) -> Result<(DType, &[u64]), String> {
    match stmt.defs.get(i) {
        Some((_, Type::Tile { dtype, shape })) => Ok((*dtype, shape)),
        Some((id, ty)) => Err(format!(
            "{id} is declared {}, expected a tile",
            type_text(ty)
        )),
        None => Err(format!("defines {} values, expected more", stmt.defs.len())),
    }
}

fn need_defs(stmt: &Stmt, n: usize) -> Result<(), String> {
    if stmt.defs.len() == n {
        Ok(())
    } else {
        Err(format!("defines {} values, expected {n}", stmt.defs.len()))
    }
}

/// `base + Σ index[k] * strides[k]`, saturating: a result past the `i64` range is outside
/// every buffer either way.
fn flat_of(base: i64, index: &[i128], strides: &[i64]) -> i128 {
    index
        .iter()
        .zip(strides)
        .fold(i128::from(base), |acc, (&i, &s)| {
            acc.saturating_add(i.saturating_mul(i128::from(s)))
        })
}

/// Why a statement failed: a reason about the statement itself, or an error inside a `for` body
/// that already names its statement.
enum Fault {
    Here(String),
    Inside(String),
}

impl From<String> for Fault {
    fn from(e: String) -> Fault {
        Fault::Here(e)
    }
}

/// The program's own stores to one mutable parameter, for its loads after them: built lazily
/// from `writes[..upto]`.
#[derive(Default)]
struct Overlay {
    upto: usize,
    values: HashMap<usize, Word>,
}

struct Program<'l, 'a> {
    launch: &'l Launch<'a>,
    /// This program's id, or `None` while evaluating the grid body.
    coords: Option<&'l [i64]>,
    env: Vec<Option<Value>>,
    out: ProgramOutput,
    /// Per parameter: whether this program stored to it, and its overlay once a load needs it.
    stored: Vec<bool>,
    overlays: Vec<Overlay>,
}

impl<'l, 'a> Program<'l, 'a> {
    fn new(launch: &'l Launch<'a>, coords: Option<&'l [i64]>) -> Self {
        let n = launch.params.len();
        Program {
            launch,
            coords,
            env: vec![None; launch.plan.slots],
            out: ProgramOutput::default(),
            stored: vec![false; n],
            overlays: (0..n).map(|_| Overlay::default()).collect(),
        }
    }

    fn slot(&self, id: ValueId) -> Option<usize> {
        match self.launch.plan.slot_of.get(id.0 as usize) {
            Some(&s) if s != NO_SLOT => Some(s as usize),
            _ => None,
        }
    }

    fn get(&self, id: ValueId) -> Result<&Value, String> {
        self.slot(id)
            .and_then(|s| self.env[s].as_ref())
            .ok_or_else(|| format!("{id} is used before it is defined"))
    }

    fn set(&mut self, id: ValueId, v: Value) -> Result<(), String> {
        let s = self
            .slot(id)
            .ok_or_else(|| format!("{id} has no slot (not planned)"))?;
        self.env[s] = Some(v);
        Ok(())
    }

    /// Binds `v` to `id` after checking it against the declared type.
    fn define(&mut self, id: ValueId, ty: &Type, v: Value) -> Result<(), String> {
        if !fits(&v, ty) {
            return Err(format!(
                "{id} is declared {} but is computed as {}",
                type_text(ty),
                value_text(&v)
            ));
        }
        self.set(id, v)
    }

    /// Defines the statement's one result.
    fn define_one(&mut self, stmt: &Stmt, v: Value) -> Result<(), String> {
        need_defs(stmt, 1)?;
        let (id, ty) = &stmt.defs[0];
        self.define(*id, ty, v)
    }

    fn define_tile(&mut self, stmt: &Stmt, t: Tile) -> Result<(), String> {
        self.define_one(stmt, Value::Tile(Rc::new(t)))
    }

    fn index(&self, id: ValueId) -> Result<i64, String> {
        match self.get(id)? {
            Value::Index(i) => Ok(*i),
            v => Err(format!("{id} is {}, expected an index", value_text(v))),
        }
    }

    fn tile(&self, id: ValueId) -> Result<&Tile, String> {
        self.tile_rc(id).map(|t| &**t)
    }

    fn tile_rc(&self, id: ValueId) -> Result<&Rc<Tile>, String> {
        match self.get(id)? {
            Value::Tile(t) => Ok(t),
            v => Err(format!("{id} is {}, expected a tile", value_text(v))),
        }
    }

    fn view(&self, id: ValueId) -> Result<Rc<View>, String> {
        match self.get(id)? {
            Value::View(v) => Ok(v.clone()),
            v => Err(format!("{id} is {}, expected a view", value_text(v))),
        }
    }

    fn token(&self, id: ValueId) -> Result<(), String> {
        match self.get(id)? {
            Value::Token => Ok(()),
            v => Err(format!("{id} is {}, expected a token", value_text(v))),
        }
    }

    fn indices(&self, ids: &[ValueId]) -> Result<Vec<i64>, String> {
        ids.iter().map(|&i| self.index(i)).collect()
    }

    fn param(&self, p: usize) -> Result<&ParamData<'a>, String> {
        self.launch.params.get(p).ok_or_else(|| {
            format!(
                "parameter {p} does not exist (the kernel has {})",
                self.launch.params.len()
            )
        })
    }

    /// Runs `block`; an error names the statement that failed.
    fn block(&mut self, block: &Block) -> Result<(), String> {
        for stmt in &block.stmts {
            self.stmt(stmt).map_err(|e| match e {
                Fault::Here(e) => format!("{}: {e}", describe(stmt)),
                Fault::Inside(e) => e,
            })?;
        }
        Ok(())
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<(), Fault> {
        if let TileOp::For {
            start,
            end,
            step,
            var,
            init,
            carried,
            body,
            yields,
        } = &stmt.op
        {
            if self.coords.is_none() {
                return Err(Fault::Here("the grid body has no loops".into()));
            }
            let bounds = (*start, *end, *step);
            return self.for_loop(stmt, bounds, *var, init, carried, body, yields);
        }
        self.plain_stmt(stmt).map_err(Fault::Here)
    }

    /// A statement other than `for`.
    fn plain_stmt(&mut self, stmt: &Stmt) -> Result<(), String> {
        let scalar_op = matches!(
            stmt.op,
            TileOp::Dim { .. } | TileOp::Index { .. } | TileOp::IndexArith { .. }
        );
        if self.coords.is_none() && !scalar_op {
            return Err("the grid body computes extents from dims and index constants only".into());
        }
        match &stmt.op {
            TileOp::ProgramId { axis } => {
                let coords = self.coords.unwrap_or(&[]);
                let v = *coords.get(*axis).ok_or_else(|| {
                    format!(
                        "grid axis {axis} does not exist (the grid has {})",
                        coords.len()
                    )
                })?;
                self.define_one(stmt, Value::Index(v))
            }
            TileOp::Dim { name } => {
                let v = self
                    .launch
                    .dims
                    .get(name)
                    .ok_or_else(|| format!("symbolic dim `{name}` is not bound"))?;
                let v =
                    i64::try_from(*v).map_err(|_| format!("dim `{name}` = {v} overflows i64"))?;
                self.define_one(stmt, Value::Index(v))
            }
            TileOp::Index { value } => self.define_one(stmt, Value::Index(*value)),
            TileOp::IndexArith { op, a, b } => {
                let v = match (self.get(*a)?, self.get(*b)?) {
                    (Value::Index(x), Value::Index(y)) => {
                        Value::Index(tile::index_arith(*op, *x, *y)?)
                    }
                    (Value::Tile(x), Value::Tile(y)) => {
                        let dtype = int_tiles(x, y)?;
                        let values = x
                            .ints()
                            .zip(y.ints())
                            .map(|(p, q)| tile::index_arith(*op, p, q))
                            .collect::<Result<Vec<_>, _>>()?;
                        Value::Tile(Rc::new(Tile::from_i64s(dtype, &x.dims, values)))
                    }
                    (x, y) => {
                        return Err(format!(
                            "operands are {} and {}: expected two indices or two integer tiles",
                            value_text(x),
                            value_text(y)
                        ))
                    }
                };
                self.define_one(stmt, v)
            }
            TileOp::IndexCmp { op, a, b } => {
                let t = match (self.get(*a)?, self.get(*b)?) {
                    (Value::Index(x), Value::Index(y)) => {
                        Tile::from_i64s(DType::Bool, &[], [i64::from(tile::index_cmp(*op, *x, *y))])
                    }
                    (Value::Tile(x), Value::Tile(y)) => {
                        int_tiles(x, y)?;
                        let values = x
                            .ints()
                            .zip(y.ints())
                            .map(|(p, q)| i64::from(tile::index_cmp(*op, p, q)));
                        Tile::from_i64s(DType::Bool, &x.dims, values)
                    }
                    (x, y) => {
                        return Err(format!(
                            "operands are {} and {}: expected two indices or two integer tiles",
                            value_text(x),
                            value_text(y)
                        ))
                    }
                };
                self.define_tile(stmt, t)
            }
            TileOp::LoadScalar { param, index } => {
                let i = self.index(*index)?;
                let v = self.load_scalar(*param, i)?;
                self.define_one(stmt, Value::Index(v))
            }
            TileOp::MakeView {
                param,
                offset,
                shape,
                strides,
            } => {
                self.param(*param)?;
                let offset = self.index(*offset)?;
                let shape = self.indices(shape)?;
                let strides = self.indices(strides)?;
                if shape.len() != strides.len() {
                    return Err(format!(
                        "{} shape dims but {} strides",
                        shape.len(),
                        strides.len()
                    ));
                }
                if let Some(d) = shape.iter().find(|&&d| d < 0) {
                    return Err(format!("view shape {shape:?} has a negative extent {d}"));
                }
                let view = View {
                    param: *param,
                    offset,
                    shape,
                    strides,
                };
                self.define_one(stmt, Value::View(Rc::new(view)))
            }
            TileOp::MakeToken => self.define_one(stmt, Value::Token),
            TileOp::Load {
                view,
                coords,
                padding,
                token,
            } => {
                need_defs(stmt, if token.is_some() { 2 } else { 1 })?;
                if let Some(t) = token {
                    self.token(*t)?;
                }
                let (dtype, shape) = def_tile(stmt, 0)?;
                let view = self.view(*view)?;
                let t = self.load(&view, coords, *padding, dtype, shape)?;
                let (id, ty) = &stmt.defs[0];
                self.define(*id, ty, Value::Tile(Rc::new(t)))?;
                if token.is_some() {
                    self.define(stmt.defs[1].0, &stmt.defs[1].1, Value::Token)?;
                }
                Ok(())
            }
            TileOp::LoadIndexed {
                view,
                indices,
                mask,
                padding,
            } => {
                let (dtype, shape) = def_tile(stmt, 0)?;
                let view = self.view(*view)?;
                let t = self.load_indexed(&view, indices, *mask, *padding, dtype, shape)?;
                self.define_tile(stmt, t)
            }
            TileOp::Store {
                view,
                coords,
                value,
                token,
            } => {
                self.token(*token)?;
                let (view, value) = (self.view(*view)?, self.tile_rc(*value)?.clone());
                self.store(&view, coords, &value)?;
                self.define_one(stmt, Value::Token)
            }
            TileOp::Constant { value } => {
                let (dtype, shape) = def_tile(stmt, 0)?;
                let t = tile::filled(dtype, shape, Word::constant(dtype, *value))?;
                self.define_tile(stmt, t)
            }
            TileOp::Iota { axis } => {
                let (dtype, shape) = def_tile(stmt, 0)?;
                let t = tile::iota(dtype, shape, *axis)?;
                self.define_tile(stmt, t)
            }
            TileOp::Splat { x } => {
                let (dtype, shape) = def_tile(stmt, 0)?;
                let v = match self.get(*x)? {
                    Value::Index(i) => Word::from_i64(dtype, *i),
                    Value::Tile(t) if t.data.len() == 1 => t.data[0].cast(t.dtype, dtype),
                    v => {
                        return Err(format!(
                            "splats {}: expected an index or a one-element tile",
                            value_text(v)
                        ))
                    }
                };
                let t = tile::filled(dtype, shape, v)?;
                self.define_tile(stmt, t)
            }
            TileOp::Unary { op, x } => {
                let t = tile::unary(*op, self.tile(*x)?)?;
                self.define_tile(stmt, t)
            }
            // The reference computes the exact value the approximation approaches.
            TileOp::ApproxExp { x, shift, factor } => {
                let t = tile::scaled_exp(self.tile(*x)?, self.tile(*shift)?, *factor)?;
                self.define_tile(stmt, t)
            }
            TileOp::Binary { op, a, b } => {
                let t = tile::binary(*op, self.tile(*a)?, self.tile(*b)?)?;
                self.define_tile(stmt, t)
            }
            TileOp::Select { cond, a, b } => {
                let t = tile::select(self.tile(*cond)?, self.tile(*a)?, self.tile(*b)?)?;
                self.define_tile(stmt, t)
            }
            TileOp::Cast { x } => {
                let (dtype, _) = def_tile(stmt, 0)?;
                let t = tile::cast(self.tile(*x)?, dtype);
                self.define_tile(stmt, t)
            }
            TileOp::Broadcast { x } => {
                let (_, shape) = def_tile(stmt, 0)?;
                let t = tile::broadcast(self.tile(*x)?, shape)?;
                self.define_tile(stmt, t)
            }
            TileOp::Reshape { x } => {
                let (_, shape) = def_tile(stmt, 0)?;
                let t = tile::reshape(self.tile(*x)?, shape)?;
                self.define_tile(stmt, t)
            }
            TileOp::Permute { x, perm } => {
                let t = tile::permute(self.tile(*x)?, perm)?;
                self.define_tile(stmt, t)
            }
            TileOp::Reduce { op, x, axis } => {
                let t = tile::reduce(*op, self.tile(*x)?, *axis)?;
                self.define_tile(stmt, t)
            }
            TileOp::Mma { a, b, acc } => {
                let t = tile::mma(self.tile(*a)?, self.tile(*b)?, self.tile(*acc)?)?;
                self.define_tile(stmt, t)
            }
            TileOp::For { .. } => Err("a loop is not a plain statement".into()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn for_loop(
        &mut self,
        stmt: &Stmt,
        (start, end, step): (ValueId, ValueId, ValueId),
        var: ValueId,
        init: &[ValueId],
        carried: &[(ValueId, Type)],
        body: &Block,
        yields: &[ValueId],
    ) -> Result<(), Fault> {
        let n = carried.len();
        if init.len() != n || yields.len() != n || stmt.defs.len() != n {
            return Err(Fault::Here(format!(
                "{} initial values, {} carried values, {} yields and {} results must agree",
                init.len(),
                n,
                yields.len(),
                stmt.defs.len()
            )));
        }
        let (start, end, step) = (self.index(start)?, self.index(end)?, self.index(step)?);
        if step <= 0 {
            return Err(format!("the loop step is {step}, not positive").into());
        }
        let mut values: Vec<Value> = init
            .iter()
            .map(|&v| self.get(v).cloned())
            .collect::<Result<_, _>>()?;
        let mut i = start;
        while i < end {
            self.set(var, Value::Index(i))?;
            for ((id, ty), v) in carried.iter().zip(values.drain(..)) {
                self.define(*id, ty, v)?;
            }
            self.block(body).map_err(Fault::Inside)?;
            values = yields
                .iter()
                .map(|&v| self.get(v).cloned())
                .collect::<Result<_, _>>()?;
            match i.checked_add(step) {
                Some(next) => i = next,
                None => break,
            }
        }
        for ((id, ty), v) in stmt.defs.iter().zip(values) {
            self.define(*id, ty, v)?;
        }
        Ok(())
    }

    /// Element `i` of shared integer parameter `param`.
    fn load_scalar(&self, param: usize, i: i64) -> Result<i64, String> {
        let p = self.param(param)?;
        if p.access != Access::Shared {
            return Err(format!(
                "reads a scalar of mutable parameter {param} ({}); only shared parameters hold \
                 run-time positions",
                p.name
            ));
        }
        if !(p.dtype.is_int() || p.dtype == DType::Bool) {
            return Err(format!(
                "parameter {param} ({}) is {}, not an integer",
                p.name, p.dtype
            ));
        }
        let v = usize::try_from(i)
            .ok()
            .and_then(|i| p.data.get(i))
            .ok_or_else(|| {
                format!(
                    "element {i} is outside buffer {} of {} elements (a lowering bug)",
                    p.name,
                    p.data.len()
                )
            })?;
        Ok(v.as_int())
    }

    /// Where the tile at `coords` of `view` lies, for a tile of `shape`.
    fn place(&self, view: &View, coords: &[ValueId], shape: &[u64]) -> Result<Placement, String> {
        let rank = view.shape.len();
        if coords.len() != rank || shape.len() != rank {
            return Err(format!(
                "a view of rank {rank} takes {rank} coordinates and tiles of rank {rank}, got {} \
                 coordinates and a tile of rank {}",
                coords.len(),
                shape.len()
            ));
        }
        tile::tile_numel(shape)?;
        let coords = self.indices(coords)?;
        if let Some(c) = coords.iter().find(|&&c| c < 0) {
            return Err(format!("tile coordinate {c} is negative"));
        }
        let mut start = Vec::with_capacity(rank);
        let mut valid = Vec::with_capacity(rank);
        for k in 0..rank {
            let s = i128::from(coords[k]) * i128::from(shape[k]);
            start.push(s);
            valid.push((i128::from(view.shape[k]) - s).clamp(0, i128::from(shape[k])) as usize);
        }
        Ok(Placement {
            tile_shape: shape.iter().map(|&d| d as usize).collect(),
            base: flat_of(view.offset, &start, &view.strides),
            start,
            valid,
            strides: view.strides.clone(),
        })
    }

    fn bounds_error(&self, view: &View, pl: &Placement, len: usize) -> String {
        let (index, flat) = pl.first_outside(len);
        format!(
            "view element {index:?} of parameter {} is buffer element {flat}, outside buffer {} \
             of {len} elements (a lowering bug: the view does not fit its buffer)",
            view.param, self.launch.params[view.param].name
        )
    }

    fn load(
        &mut self,
        view: &View,
        coords: &[ValueId],
        padding: f64,
        dtype: DType,
        shape: &[u64],
    ) -> Result<Tile, String> {
        let p = self.param(view.param)?;
        if p.dtype != dtype {
            return Err(format!(
                "loads a {dtype} tile from parameter {} ({}) of {}",
                view.param, p.name, p.dtype
            ));
        }
        let (data, access) = (p.data, p.access);
        let pl = self.place(view, coords, shape)?;
        if !pl.in_bounds(data.len()) {
            return Err(self.bounds_error(view, &pl, data.len()));
        }
        let mut out = vec![Word::constant(dtype, padding); tile::tile_numel(shape)?];
        pl.for_each_row(|t, b, len, stride| {
            if stride == 1 {
                out[t..t + len].copy_from_slice(&data[b..b + len]);
            } else {
                for (j, o) in out[t..t + len].iter_mut().enumerate() {
                    *o = data[b.wrapping_add_signed(j as isize * stride)];
                }
            }
        });
        if access == Access::Mutable {
            self.mutable_reads(view.param, &pl, &mut out);
        }
        Ok(Tile {
            dtype,
            dims: shape.to_vec(),
            data: out,
        })
    }

    /// For a load of mutable parameter `param`: replaces what this program stored itself, and
    /// records the elements read in checking mode.
    fn mutable_reads(&mut self, param: usize, pl: &Placement, out: &mut [Word]) {
        if self.launch.checking {
            let reads = &mut self.out.mutable_reads;
            pl.for_each(|_, b| reads.push((param as u32, b)));
        }
        if self.stored[param] {
            let overlay = self.overlay(param);
            pl.for_each(|t, b| {
                if let Some(&v) = overlay.get(&b) {
                    out[t] = v;
                }
            });
        }
    }

    /// This program's stores to `param` so far, by element.
    fn overlay(&mut self, param: usize) -> &HashMap<usize, Word> {
        let overlay = &mut self.overlays[param];
        for w in &self.out.writes[overlay.upto..] {
            if w.param as usize == param {
                overlay.values.insert(w.flat, w.value);
            }
        }
        overlay.upto = self.out.writes.len();
        &overlay.values
    }

    fn load_indexed(
        &mut self,
        view: &View,
        indices: &[ValueId],
        mask: ValueId,
        padding: f64,
        dtype: DType,
        shape: &[u64],
    ) -> Result<Tile, String> {
        let p = self.param(view.param)?;
        if p.dtype != dtype {
            return Err(format!(
                "loads a {dtype} tile from parameter {} ({}) of {}",
                view.param, p.name, p.dtype
            ));
        }
        let (data, mutable) = (p.data, p.access == Access::Mutable);
        let rank = view.shape.len();
        if indices.len() != rank {
            return Err(format!(
                "{} index tiles for a view of rank {rank}",
                indices.len()
            ));
        }
        let n = tile::tile_numel(shape)?;
        let mask = self.tile_rc(mask)?.clone();
        let idx: Vec<Rc<Tile>> = indices
            .iter()
            .map(|&i| self.tile_rc(i).cloned())
            .collect::<Result<_, _>>()?;
        if mask.dtype != DType::Bool
            || mask.dims != shape
            || idx.iter().any(|t| !t.dtype.is_int() || t.dims != shape)
        {
            return Err(format!(
                "the mask must be a bool tile and the indices integer tiles of the loaded shape \
                 {shape:?}"
            ));
        }
        let mut out = vec![Word::constant(dtype, padding); n];
        let mut index = vec![0i128; rank];
        let mut read = Vec::new();
        'elements: for (t, o) in out.iter_mut().enumerate() {
            if mask.data[t].as_int() == 0 {
                continue;
            }
            for k in 0..rank {
                let i = idx[k].data[t].as_int();
                if i < 0 || i >= view.shape[k] {
                    continue 'elements;
                }
                index[k] = i128::from(i);
            }
            let flat = flat_of(view.offset, &index, &view.strides);
            if flat < 0 || flat >= data.len() as i128 {
                return Err(format!(
                    "view element {index:?} of parameter {} is buffer element {flat}, outside \
                     buffer {} of {} elements (a lowering bug: the view does not fit its buffer)",
                    view.param,
                    self.launch.params[view.param].name,
                    data.len()
                ));
            }
            *o = data[flat as usize];
            if mutable {
                read.push((t, flat as usize));
            }
        }
        if mutable {
            if self.launch.checking {
                let param = view.param as u32;
                self.out
                    .mutable_reads
                    .extend(read.iter().map(|&(_, b)| (param, b)));
            }
            if self.stored[view.param] {
                let overlay = self.overlay(view.param);
                for &(t, b) in &read {
                    if let Some(&v) = overlay.get(&b) {
                        out[t] = v;
                    }
                }
            }
        }
        Ok(Tile {
            dtype,
            dims: shape.to_vec(),
            data: out,
        })
    }

    fn store(&mut self, view: &View, coords: &[ValueId], value: &Tile) -> Result<(), String> {
        let p = self.param(view.param)?;
        if p.access != Access::Mutable {
            return Err(format!(
                "stores to shared parameter {} ({}), which the kernel only reads",
                view.param, p.name
            ));
        }
        if p.dtype != value.dtype {
            return Err(format!(
                "stores a {} tile to parameter {} ({}) of {}",
                value.dtype, view.param, p.name, p.dtype
            ));
        }
        let len = p.data.len();
        let pl = self.place(view, coords, &value.dims)?;
        if !pl.in_bounds(len) {
            return Err(self.bounds_error(view, &pl, len));
        }
        let param = view.param as u32;
        let writes = &mut self.out.writes;
        pl.for_each(|t, b| {
            writes.push(Write {
                param,
                flat: b,
                value: value.data[t],
            })
        });
        self.stored[view.param] = true;
        Ok(())
    }
}

/// The dtype of two integer tiles of one shape and dtype.
fn int_tiles(x: &Tile, y: &Tile) -> Result<DType, String> {
    if x.dtype != y.dtype || x.dims != y.dims || !x.dtype.is_int() {
        return Err(format!(
            "operands are tiles {} and {}: expected integer tiles of one type",
            type_name(x.dtype, &x.dims),
            type_name(y.dtype, &y.dims)
        ));
    }
    Ok(x.dtype)
}

/// The part of a tile inside its view and where it lies in the buffer.
struct Placement {
    tile_shape: Vec<usize>,
    /// View index of tile element 0, per axis.
    start: Vec<i128>,
    /// Elements of the tile inside the view's shape, per axis (a leading box of the tile).
    valid: Vec<usize>,
    /// Buffer element of tile element 0.
    base: i128,
    strides: Vec<i64>,
}

impl Placement {
    /// The smallest and largest buffer elements of the in-view part, if it is not empty.
    fn range(&self) -> Option<(i128, i128)> {
        if self.valid.contains(&0) {
            return None;
        }
        let (mut lo, mut hi) = (self.base, self.base);
        for (&v, &s) in self.valid.iter().zip(&self.strides) {
            let span = (v as i128 - 1) * i128::from(s);
            lo = lo.saturating_add(span.min(0));
            hi = hi.saturating_add(span.max(0));
        }
        Some((lo, hi))
    }

    fn in_bounds(&self, len: usize) -> bool {
        self.range()
            .is_none_or(|(lo, hi)| lo >= 0 && hi < len as i128)
    }

    /// The view index and buffer element of the first in-view element outside `0..len`.
    fn first_outside(&self, len: usize) -> (Vec<i128>, i128) {
        let rank = self.valid.len();
        let mut index = vec![0usize; rank];
        loop {
            let view: Vec<i128> = (0..rank)
                .map(|k| self.start[k] + index[k] as i128)
                .collect();
            let flat = (0..rank).fold(self.base, |acc, k| {
                acc.saturating_add(index[k] as i128 * i128::from(self.strides[k]))
            });
            if flat < 0 || flat >= len as i128 {
                return (view, flat);
            }
            let mut axis = rank;
            loop {
                if axis == 0 {
                    return (view, flat);
                }
                axis -= 1;
                index[axis] += 1;
                if index[axis] < self.valid[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
    }

    /// Calls `f(tile element, buffer element)` for every in-view element, row-major. The caller
    /// has checked [`Placement::in_bounds`].
    fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        self.for_each_row(|t, b, len, stride| {
            for j in 0..len {
                f(t + j, b.wrapping_add_signed(j as isize * stride));
            }
        });
    }

    /// Calls `f(tile element, buffer element, len, stride)` for every row of in-view elements
    /// (along the last axis), in order: the row's elements are tile elements `t..t + len` and
    /// buffer elements `b + j * stride`. The caller has checked [`Placement::in_bounds`].
    fn for_each_row(&self, mut f: impl FnMut(usize, usize, usize, isize)) {
        let rank = self.valid.len();
        if rank == 0 {
            f(0, self.base as usize, 1, 0);
            return;
        }
        if self.valid.contains(&0) {
            return;
        }
        let mut tile_strides = vec![1usize; rank];
        for k in (0..rank - 1).rev() {
            tile_strides[k] = tile_strides[k + 1] * self.tile_shape[k + 1];
        }
        let last = rank - 1;
        let (inner, inner_stride) = (self.valid[last], self.strides[last] as isize);
        let mut index = vec![0usize; rank];
        loop {
            let mut t = 0usize;
            let mut b = self.base as i64;
            for k in 0..last {
                t += index[k] * tile_strides[k];
                b = b.wrapping_add((index[k] as i64).wrapping_mul(self.strides[k]));
            }
            f(t, b as usize, inner, inner_stride);
            let mut axis = last;
            loop {
                if axis == 0 {
                    return;
                }
                axis -= 1;
                index[axis] += 1;
                if index[axis] < self.valid[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
    }
}
