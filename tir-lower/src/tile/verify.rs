//! The tile IR verifier: every invariant of [`super::ir`], in one place.
//!
//! A kernel is valid when:
//! - **SSA.** Each value is defined once in the whole kernel (grid and body together), and a
//!   statement uses only values defined before it in its block or an enclosing block. A `for`'s
//!   induction variable and carried values are defined inside its body only; its results after
//!   it. The body does not see the grid's values (the grid is computed before launch).
//! - **Types.** Each op's operands and defined values have the types [`super::ir::TileOp`]
//!   documents: index scalars where indices go, tiles of one shape for elementwise ops,
//!   `Broadcast` only from size-1 dims, `Reshape` keeping the element count, `Permute` by a
//!   permutation, `Reduce` keeping its axis as 1 (`ArgMax`/`ArgMin` give `i64`), `Mma` as
//!   `[.., m, k] x [.., k, n] + [.., m, n]` (an `f32` accumulator for 16/32-bit floats, `f64`
//!   for `f64`, `i64` for integers), loads and stores with one coordinate per view
//!   axis and tiles of the view's rank and the parameter's dtype. Element dtypes follow the
//!   graph's rules (float-only, numeric, bool-only ops). Every tile dim is a power of two.
//! - **Parameters and tokens.** Referenced parameters exist; a shared parameter is loaded with
//!   no token (and is the only kind `LoadScalar` and `LoadIndexed` read); a mutable parameter is
//!   loaded and stored with a token, and only mutable parameters are stored to.
//! - **Grid.** `grid_body` holds only `Dim`, `Index` and scalar `IndexArith`, and defines the
//!   grid's values; `ProgramId` axes are grid axes.
//! - **Writes.** Each mutable parameter appears in `writes` exactly once, and every entry names
//!   a mutable parameter.
//!
//! [`crate::program::verify_program`] checks a whole program's kernels with [`verify_kernel`],
//! and the rules across them.
//!
//! Each error is one line naming the kernel, the statement (by its first value and op) and what
//! is wrong.

use super::ir::{
    Access, Block, LibraryCall, Region, SliceStart, Stmt, TensorParam, TileKernel, TileOp, Type,
    ValueId,
};
use super::print::{access_name, op_name, type_name};
use std::collections::{BTreeMap, BTreeSet};
use tir_graph::{DType, ReduceOp};

/// Why a kernel or program is not valid tile IR. `at` names the statement: `%7 (load)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TileError {
    /// A value is defined by two statements.
    #[error("kernel {kernel}: {at}: {value} is defined twice")]
    Redefined {
        /// The kernel's name.
        kernel: String,
        /// The statement.
        at: String,
        /// The value.
        value: ValueId,
    },
    /// A statement uses a value not in scope.
    #[error(
        "kernel {kernel}: {at}: uses {value}, which is not defined before it in this block or an enclosing one"
    )]
    Undefined {
        /// The kernel's name.
        kernel: String,
        /// The statement.
        at: String,
        /// The value.
        value: ValueId,
    },
    /// An operand or a defined value has the wrong type for the op.
    #[error("kernel {kernel}: {at}: {reason}")]
    Type {
        /// The kernel's name.
        kernel: String,
        /// The statement.
        at: String,
        /// What was expected.
        reason: String,
    },
    /// A tile dim is neither a power of two nor 1.
    #[error("kernel {kernel}: {at}: tile dim {dim} of {ty} is not a power of two")]
    NotPowerOfTwo {
        /// The kernel's name.
        kernel: String,
        /// The statement.
        at: String,
        /// The tile type.
        ty: String,
        /// The offending dim.
        dim: u64,
    },
    /// A statement names a tensor parameter the kernel does not have.
    #[error("kernel {kernel}: {at}: parameter {param} does not exist (the kernel has {count})")]
    UnknownParam {
        /// The kernel's name.
        kernel: String,
        /// The statement.
        at: String,
        /// The parameter index named.
        param: usize,
        /// How many parameters the kernel has.
        count: usize,
    },
    /// A token or access rule is broken (a store to a shared parameter, a load without a token).
    #[error("kernel {kernel}: {at}: {reason}")]
    Access {
        /// The kernel's name.
        kernel: String,
        /// The statement.
        at: String,
        /// The rule broken.
        reason: String,
    },
    /// The grid breaks a rule: an extent that `grid_body` does not define as an index scalar, or
    /// an op other than dims, index constants and index arithmetic in `grid_body`.
    #[error("kernel {kernel}: grid: {reason}")]
    Grid {
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// The write regions or the library call break a rule (a shared parameter written, a library
    /// call's parameter of the wrong dtype or not written whole).
    #[error("kernel {kernel}: writes: {reason}")]
    Writes {
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// A rule across the program's kernels and buffers is broken.
    #[error("program: {reason}")]
    Program {
        /// What is wrong.
        reason: String,
    },
}

/// Checks every rule of the module doc for one kernel.
pub fn verify_kernel(k: &TileKernel) -> Result<(), TileError> {
    let mut v = Verifier {
        kernel: k,
        defined: BTreeSet::new(),
        scopes: Vec::new(),
        in_grid: true,
    };
    v.check_writes()?;
    v.check_library()?;
    // The grid: its own scope, computed before launch.
    v.scopes.push(BTreeMap::new());
    v.block(&k.grid_body)?;
    let grid_scope = v.scopes.pop().unwrap_or_default();
    for (axis, g) in k.grid.iter().enumerate() {
        match grid_scope.get(g) {
            Some(Type::Index) => {}
            Some(t) => {
                return Err(v.grid(format!(
                    "axis {axis} is {g} of type {}, expected index",
                    type_name(t)
                )))
            }
            None => {
                return Err(v.grid(format!(
                    "axis {axis} is {g}, which grid_body does not define"
                )))
            }
        }
    }
    v.in_grid = false;
    v.scopes.push(BTreeMap::new());
    v.block(&k.body)?;
    Ok(())
}

struct Verifier<'k> {
    kernel: &'k TileKernel,
    /// Every value defined so far, in any block.
    defined: BTreeSet<ValueId>,
    /// Values visible here: the enclosing blocks', innermost last.
    scopes: Vec<BTreeMap<ValueId, Type>>,
    in_grid: bool,
}

/// `%7 (load)`, or `load` for a statement that defines nothing.
fn site(stmt: &Stmt) -> String {
    match stmt.defs.first() {
        Some((v, _)) => format!("{v} ({})", op_name(&stmt.op)),
        None => format!("a {} with no results", op_name(&stmt.op)),
    }
}

fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

impl<'k> Verifier<'k> {
    fn name(&self) -> String {
        self.kernel.name.clone()
    }

    fn grid(&self, reason: String) -> TileError {
        TileError::Grid {
            kernel: self.name(),
            reason,
        }
    }

    /// A library call names existing parameters of its dtype: its operands (`a`, `b` and a
    /// residual; `q`, `k`, `v`; `x`, `w` and a bias) shared, its result (`c`; `o`; `y`) the
    /// whole of a mutable one.
    fn check_library(&self) -> Result<(), TileError> {
        let (what, operands, result, dtype) = match &self.kernel.library {
            None => return Ok(()),
            Some(LibraryCall::MatMul {
                a,
                b,
                c,
                residual,
                dtype,
                ..
            }) => {
                let mut operands = vec![("a", *a), ("b", *b)];
                operands.extend(residual.map(|r| ("residual", r)));
                ("matmul", operands, ("c", *c), dtype)
            }
            Some(LibraryCall::Attention(a)) => {
                let operands = vec![("q", a.q.param), ("k", a.k.param), ("v", a.v.param)];
                ("attention", operands, ("o", a.o.param), &a.dtype)
            }
            Some(LibraryCall::Conv(c)) => {
                let mut operands = vec![("x", c.x), ("w", c.w)];
                operands.extend(c.bias.map(|b| ("bias", b)));
                ("conv", operands, ("y", c.y), &c.dtype)
            }
            Some(LibraryCall::Collective { op, input, output }) => {
                self.check_collective(op)?;
                let dtype = &self
                    .kernel
                    .params
                    .get(*input)
                    .map_or(DType::F32, |p| p.dtype);
                let operands = vec![("input", *input)];
                return self.check_call(op.name(), operands, ("output", *output), dtype);
            }
        };
        self.check_call(what, operands, result, dtype)
    }

    /// A collective is the whole kernel: no grid, no body, one write.
    fn check_collective(&self, op: &tir_graph::Op) -> Result<(), TileError> {
        let k = self.kernel;
        if !op.is_collective() {
            return Err(TileError::Writes {
                kernel: self.name(),
                reason: format!("collective call of {op}, which is not a collective"),
            });
        }
        if !k.grid.is_empty() || !k.body.stmts.is_empty() || k.writes.len() != 1 {
            return Err(TileError::Writes {
                kernel: self.name(),
                reason: "a collective has no grid, no body and one write".into(),
            });
        }
        Ok(())
    }

    /// The call's operands are shared parameters of `dtype`, its result a mutable one written
    /// whole.
    fn check_call(
        &self,
        what: &str,
        operands: Vec<(&'static str, usize)>,
        result: (&'static str, usize),
        dtype: &DType,
    ) -> Result<(), TileError> {
        let library = |reason: String| TileError::Writes {
            kernel: self.name(),
            reason: format!("library {what}: {reason}"),
        };
        let params = &self.kernel.params;
        let shared = operands.into_iter().map(|(w, p)| (w, p, Access::Shared));
        for (name, p, access) in shared.chain([(result.0, result.1, Access::Mutable)]) {
            match params.get(p) {
                Some(tp) if tp.dtype == *dtype && tp.access == access => {}
                _ => {
                    return Err(library(format!(
                        "{name} is param {p}, not a {} {dtype} param",
                        access_name(access)
                    )))
                }
            }
        }
        let (name, c) = result;
        let whole = self
            .kernel
            .writes
            .iter()
            .any(|w| w.param == c && w.region == Region::Whole);
        if !whole {
            return Err(library(format!("{name} (param {c}) is not written whole")));
        }
        Ok(())
    }

    fn check_writes(&self) -> Result<(), TileError> {
        let writes = |reason: String| TileError::Writes {
            kernel: self.name(),
            reason,
        };
        let params = &self.kernel.params;
        let mut seen = BTreeSet::new();
        for w in &self.kernel.writes {
            let Some(p) = params.get(w.param) else {
                return Err(writes(format!(
                    "param {} does not exist (the kernel has {})",
                    w.param,
                    params.len()
                )));
            };
            if p.access != Access::Mutable {
                return Err(writes(format!("param {} is shared, not mutable", w.param)));
            }
            if !seen.insert(w.param) {
                return Err(writes(format!("param {} is listed twice", w.param)));
            }
            if let Region::Slice {
                start: SliceStart::Param(s),
                ..
            } = &w.region
            {
                if *s >= params.len() {
                    return Err(writes(format!(
                        "the slice of param {} starts at param {s}, which does not exist",
                        w.param
                    )));
                }
            }
        }
        for (i, p) in params.iter().enumerate() {
            if p.access == Access::Mutable && !seen.contains(&i) {
                return Err(writes(format!(
                    "mutable param {i} is not listed (each mutable param is written)"
                )));
            }
        }
        Ok(())
    }

    fn block(&mut self, block: &Block) -> Result<(), TileError> {
        for stmt in &block.stmts {
            self.stmt(stmt)?;
        }
        Ok(())
    }

    /// The type of `v` where `stmt` uses it.
    fn use_of(&self, stmt: &Stmt, v: ValueId) -> Result<Type, TileError> {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(&v))
            .cloned()
            .ok_or_else(|| TileError::Undefined {
                kernel: self.name(),
                at: site(stmt),
                value: v,
            })
    }

    fn define(&mut self, stmt: &Stmt, v: ValueId, ty: &Type) -> Result<(), TileError> {
        if !self.defined.insert(v) {
            return Err(TileError::Redefined {
                kernel: self.name(),
                at: site(stmt),
                value: v,
            });
        }
        self.check_tile_dims(stmt, ty)?;
        self.scopes
            .last_mut()
            .expect("a block is open")
            .insert(v, ty.clone());
        Ok(())
    }

    fn check_tile_dims(&self, stmt: &Stmt, ty: &Type) -> Result<(), TileError> {
        if let Type::Tile { shape, .. } = ty {
            if let Some(&dim) = shape.iter().find(|&&d| !d.is_power_of_two()) {
                return Err(TileError::NotPowerOfTwo {
                    kernel: self.name(),
                    at: site(stmt),
                    ty: type_name(ty),
                    dim,
                });
            }
        }
        Ok(())
    }

    fn type_error(&self, stmt: &Stmt, reason: String) -> TileError {
        TileError::Type {
            kernel: self.name(),
            at: site(stmt),
            reason,
        }
    }

    fn access_error(&self, stmt: &Stmt, reason: String) -> TileError {
        TileError::Access {
            kernel: self.name(),
            at: site(stmt),
            reason,
        }
    }

    fn param(&self, stmt: &Stmt, param: usize) -> Result<&'k TensorParam, TileError> {
        self.kernel
            .params
            .get(param)
            .ok_or_else(|| TileError::UnknownParam {
                kernel: self.name(),
                at: site(stmt),
                param,
                count: self.kernel.params.len(),
            })
    }

    /// `v` must be an index scalar; `what` names it in the message.
    fn index(&self, stmt: &Stmt, v: ValueId, what: &str) -> Result<(), TileError> {
        match self.use_of(stmt, v)? {
            Type::Index => Ok(()),
            t => Err(self.type_error(
                stmt,
                format!("{what} {v} is {}, expected index", type_name(&t)),
            )),
        }
    }

    /// `v` must be a tile; its dtype and shape.
    fn tile(&self, stmt: &Stmt, v: ValueId, what: &str) -> Result<(DType, Vec<u64>), TileError> {
        match self.use_of(stmt, v)? {
            Type::Tile { dtype, shape } => Ok((dtype, shape)),
            t => Err(self.type_error(
                stmt,
                format!("{what} {v} is {}, expected a tile", type_name(&t)),
            )),
        }
    }

    /// `v` must be a view; its parameter and rank.
    fn view(&self, stmt: &Stmt, v: ValueId) -> Result<(usize, usize), TileError> {
        match self.use_of(stmt, v)? {
            Type::View { param, rank } => Ok((param, rank)),
            t => Err(self.type_error(
                stmt,
                format!("view {v} is {}, expected a view", type_name(&t)),
            )),
        }
    }

    fn token(&self, stmt: &Stmt, v: ValueId) -> Result<(), TileError> {
        match self.use_of(stmt, v)? {
            Type::Token => Ok(()),
            t => Err(self.type_error(
                stmt,
                format!("token {v} is {}, expected token", type_name(&t)),
            )),
        }
    }

    /// The statement defines exactly `n` values; their types.
    fn defs(&self, stmt: &Stmt, n: usize) -> Result<Vec<Type>, TileError> {
        if stmt.defs.len() != n {
            return Err(self.type_error(
                stmt,
                format!("defines {} values, expected {n}", stmt.defs.len()),
            ));
        }
        Ok(stmt.defs.iter().map(|(_, t)| t.clone()).collect())
    }

    /// The statement defines one value of type `expected`.
    fn defines(&self, stmt: &Stmt, expected: &Type) -> Result<(), TileError> {
        let got = &self.defs(stmt, 1)?[0];
        if got != expected {
            return Err(self.type_error(
                stmt,
                format!(
                    "defines {}, expected {}",
                    type_name(got),
                    type_name(expected)
                ),
            ));
        }
        Ok(())
    }

    /// The statement defines one tile; its dtype and shape.
    fn defines_tile(&self, stmt: &Stmt) -> Result<(DType, Vec<u64>), TileError> {
        match &self.defs(stmt, 1)?[0] {
            Type::Tile { dtype, shape } => Ok((*dtype, shape.clone())),
            t => Err(self.type_error(stmt, format!("defines {}, expected a tile", type_name(t)))),
        }
    }

    fn stmt(&mut self, stmt: &Stmt) -> Result<(), TileError> {
        if self.in_grid
            && !matches!(
                stmt.op,
                TileOp::Dim { .. } | TileOp::Index { .. } | TileOp::IndexArith { .. }
            )
        {
            return Err(self.grid(format!(
                "{} is not allowed in grid_body (only dim, index and index arithmetic)",
                site(stmt)
            )));
        }
        self.check_op(stmt)?;
        for (v, ty) in &stmt.defs {
            self.define(stmt, *v, ty)?;
        }
        Ok(())
    }

    /// The op's operand and defined types; `For` also checks its body.
    fn check_op(&mut self, stmt: &Stmt) -> Result<(), TileError> {
        match &stmt.op {
            TileOp::ProgramId { axis } => {
                self.defines(stmt, &Type::Index)?;
                if *axis >= self.kernel.grid.len() {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "grid axis {axis} does not exist (the grid has {})",
                            self.kernel.grid.len()
                        ),
                    ));
                }
            }
            TileOp::Dim { .. } | TileOp::Index { .. } => self.defines(stmt, &Type::Index)?,
            TileOp::IndexArith { a, b, .. } | TileOp::IndexCmp { a, b, .. } => {
                let is_cmp = matches!(stmt.op, TileOp::IndexCmp { .. });
                let (ta, tb) = (self.use_of(stmt, *a)?, self.use_of(stmt, *b)?);
                let expected = match (&ta, &tb) {
                    (Type::Index, Type::Index) if is_cmp => Type::tile(DType::Bool, &[]),
                    (Type::Index, Type::Index) => Type::Index,
                    (
                        Type::Tile {
                            dtype: DType::I64,
                            shape: sa,
                        },
                        Type::Tile {
                            dtype: DType::I64,
                            shape: sb,
                        },
                    ) if sa == sb && !self.in_grid => {
                        Type::tile(if is_cmp { DType::Bool } else { DType::I64 }, sa)
                    }
                    _ => {
                        let allowed = if self.in_grid {
                            "two index scalars (in grid_body)"
                        } else {
                            "two index scalars or two i64 tiles of one shape"
                        };
                        return Err(self.type_error(
                            stmt,
                            format!(
                                "operands {a}: {} and {b}: {} are not {allowed}",
                                type_name(&ta),
                                type_name(&tb)
                            ),
                        ));
                    }
                };
                self.defines(stmt, &expected)?;
            }
            TileOp::LoadScalar { param, index } => {
                let p = self.param(stmt, *param)?;
                if p.access != Access::Shared {
                    return Err(self.access_error(
                        stmt,
                        format!("load_scalar reads param {param}, which is mutable (shared params only)"),
                    ));
                }
                if !p.dtype.is_int() {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "load_scalar reads param {param} of {}, expected an integer dtype",
                            p.dtype
                        ),
                    ));
                }
                self.index(stmt, *index, "index")?;
                self.defines(stmt, &Type::Index)?;
            }
            TileOp::MakeView {
                param,
                offset,
                shape,
                strides,
            } => {
                self.param(stmt, *param)?;
                self.index(stmt, *offset, "offset")?;
                for &s in shape {
                    self.index(stmt, s, "shape")?;
                }
                for &s in strides {
                    self.index(stmt, s, "stride")?;
                }
                if shape.len() != strides.len() {
                    return Err(self.type_error(
                        stmt,
                        format!("{} shape values but {} strides", shape.len(), strides.len()),
                    ));
                }
                self.defines(
                    stmt,
                    &Type::View {
                        param: *param,
                        rank: shape.len(),
                    },
                )?;
            }
            TileOp::MakeToken => self.defines(stmt, &Type::Token)?,
            TileOp::Load {
                view,
                coords,
                token,
                ..
            } => {
                let (param, rank) = self.view(stmt, *view)?;
                let p = self.param(stmt, param)?;
                self.coords(stmt, coords, rank)?;
                let defs = match (p.access, token) {
                    (Access::Shared, None) => self.defs(stmt, 1)?,
                    (Access::Mutable, Some(t)) => {
                        self.token(stmt, *t)?;
                        let defs = self.defs(stmt, 2)?;
                        if defs[1] != Type::Token {
                            return Err(self.type_error(
                                stmt,
                                format!(
                                    "its second value is {}, expected token",
                                    type_name(&defs[1])
                                ),
                            ));
                        }
                        defs
                    }
                    (Access::Shared, Some(_)) => {
                        return Err(self.access_error(
                            stmt,
                            format!(
                                "loads shared param {param} with a token (shared loads carry none)"
                            ),
                        ))
                    }
                    (Access::Mutable, None) => {
                        return Err(self.access_error(
                            stmt,
                            format!("loads mutable param {param} without a token"),
                        ))
                    }
                };
                self.tile_of_view(stmt, &defs[0], p, rank, "loads")?;
            }
            TileOp::LoadIndexed {
                view,
                indices,
                mask,
                ..
            } => {
                let (param, rank) = self.view(stmt, *view)?;
                let p = self.param(stmt, param)?;
                if p.access != Access::Shared {
                    return Err(self.access_error(
                        stmt,
                        format!("load_indexed reads mutable param {param} (it carries no token; shared params only)"),
                    ));
                }
                let (dtype, shape) = self.defines_tile(stmt)?;
                // The tile has the index tiles' shape, of any rank: one index tile per view axis.
                self.tile_of_view(stmt, &Type::tile(dtype, &shape), p, shape.len(), "loads")?;
                if indices.len() != rank {
                    return Err(self.type_error(
                        stmt,
                        format!("{} index tiles for a view of rank {rank}", indices.len()),
                    ));
                }
                let want = Type::tile(DType::I64, &shape);
                for &i in indices {
                    let t = self.use_of(stmt, i)?;
                    if t != want {
                        return Err(self.type_error(
                            stmt,
                            format!(
                                "index {i} is {}, expected {}",
                                type_name(&t),
                                type_name(&want)
                            ),
                        ));
                    }
                }
                let want = Type::tile(DType::Bool, &shape);
                let t = self.use_of(stmt, *mask)?;
                if t != want {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "mask {mask} is {}, expected {}",
                            type_name(&t),
                            type_name(&want)
                        ),
                    ));
                }
            }
            TileOp::Store {
                view,
                coords,
                value,
                token,
            } => {
                let (param, rank) = self.view(stmt, *view)?;
                let p = self.param(stmt, param)?;
                if p.access != Access::Mutable {
                    return Err(self.access_error(
                        stmt,
                        format!("stores to param {param}, which is shared (stores need a mutable param)"),
                    ));
                }
                self.coords(stmt, coords, rank)?;
                self.token(stmt, *token)?;
                let (dtype, shape) = self.tile(stmt, *value, "value")?;
                self.tile_of_view(stmt, &Type::tile(dtype, &shape), p, rank, "stores")?;
                self.defines(stmt, &Type::Token)?;
            }
            TileOp::Constant { .. } => {
                self.defines_tile(stmt)?;
            }
            TileOp::Iota { axis } => {
                let (dtype, shape) = self.defines_tile(stmt)?;
                if dtype != DType::I64 || *axis >= shape.len() {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "iota along axis {axis} defines {}, expected an i64 tile with that axis",
                            type_name(&Type::tile(dtype, &shape))
                        ),
                    ));
                }
            }
            TileOp::Splat { x } => {
                let (dtype, _) = self.defines_tile(stmt)?;
                let ok = match self.use_of(stmt, *x)? {
                    Type::Index => dtype == DType::I64,
                    Type::Tile { dtype: d, shape } => shape.is_empty() && d == dtype,
                    _ => false,
                };
                if !ok {
                    let t = self.use_of(stmt, *x)?;
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "splats {x} of {} into {dtype}, expected an index into i64 or a rank-0 tile of {dtype}",
                            type_name(&t)
                        ),
                    ));
                }
            }
            TileOp::Unary { op, x } => {
                let (dtype, shape) = self.tile(stmt, *x, "operand")?;
                // The graph's typing: one table for both IRs.
                if tir_graph::infer::unary_dtype(*op, dtype).is_err() {
                    return Err(
                        self.type_error(stmt, format!("{} does not take {dtype} tiles", op.name()))
                    );
                }
                self.defines(stmt, &Type::tile(dtype, &shape))?;
            }
            TileOp::ApproxExp { x, shift, factor } => {
                let (dtype, shape) = self.tile(stmt, *x, "operand")?;
                let (shift_dtype, shift_shape) = self.tile(stmt, *shift, "shift")?;
                if dtype != DType::F32 || shift_dtype != DType::F32 {
                    return Err(self.type_error(
                        stmt,
                        format!("approx_exp takes f32 tiles, not {dtype} and {shift_dtype}"),
                    ));
                }
                let repeats = shift_shape.len() == shape.len()
                    && shift_shape
                        .iter()
                        .zip(&shape)
                        .all(|(&s, &d)| s == d || s == 1);
                if !repeats {
                    return Err(self.type_error(
                        stmt,
                        format!("approx_exp's shift {shift_shape:?} does not repeat to {shape:?}"),
                    ));
                }
                if !(factor.is_finite() && *factor > 0.0) {
                    return Err(self.type_error(
                        stmt,
                        format!("approx_exp's factor {factor} is not finite and positive"),
                    ));
                }
                self.defines(stmt, &Type::tile(dtype, &shape))?;
            }
            TileOp::Binary { op, a, b } => {
                let (da, sa) = self.tile(stmt, *a, "operand")?;
                let (db, sb) = self.tile(stmt, *b, "operand")?;
                if da != db || sa != sb {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "operands {a}: {} and {b}: {} differ (one dtype and shape expected)",
                            type_name(&Type::tile(da, &sa)),
                            type_name(&Type::tile(db, &sb))
                        ),
                    ));
                }
                let dtype = tir_graph::infer::binary_dtype(*op, da, da).map_err(|_| {
                    self.type_error(stmt, format!("{} does not take {da} tiles", op.name()))
                })?;
                self.defines(stmt, &Type::tile(dtype, &sa))?;
            }
            TileOp::Select { cond, a, b } => {
                let (dc, sc) = self.tile(stmt, *cond, "condition")?;
                let (da, sa) = self.tile(stmt, *a, "operand")?;
                let (db, sb) = self.tile(stmt, *b, "operand")?;
                if dc != DType::Bool || sc != sa || da != db || sa != sb {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "select({cond}: {}, {a}: {}, {b}: {}) needs a bool condition and operands of one type and shape",
                            type_name(&Type::tile(dc, &sc)),
                            type_name(&Type::tile(da, &sa)),
                            type_name(&Type::tile(db, &sb))
                        ),
                    ));
                }
                self.defines(stmt, &Type::tile(da, &sa))?;
            }
            TileOp::Cast { x } => {
                let (_, shape) = self.tile(stmt, *x, "operand")?;
                let (dtype, _) = self.defines_tile(stmt)?;
                self.defines(stmt, &Type::tile(dtype, &shape))?;
            }
            TileOp::Broadcast { x } => {
                let (dx, sx) = self.tile(stmt, *x, "operand")?;
                let (dtype, shape) = self.defines_tile(stmt)?;
                let ok = dx == dtype
                    && sx.len() == shape.len()
                    && sx.iter().zip(&shape).all(|(&a, &b)| a == b || a == 1);
                if !ok {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "cannot broadcast {x}: {} to {} (same dtype and rank, only size-1 dims grow)",
                            type_name(&Type::tile(dx, &sx)),
                            type_name(&Type::tile(dtype, &shape))
                        ),
                    ));
                }
            }
            TileOp::Reshape { x } => {
                let (dx, sx) = self.tile(stmt, *x, "operand")?;
                let (dtype, shape) = self.defines_tile(stmt)?;
                if dx != dtype || numel(&sx) != numel(&shape) {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "cannot reshape {x}: {} to {} (same dtype and element count)",
                            type_name(&Type::tile(dx, &sx)),
                            type_name(&Type::tile(dtype, &shape))
                        ),
                    ));
                }
            }
            TileOp::Permute { x, perm } => {
                let (dx, sx) = self.tile(stmt, *x, "operand")?;
                let mut sorted = perm.clone();
                sorted.sort_unstable();
                if sorted != (0..sx.len()).collect::<Vec<_>>() {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "{perm:?} is not a permutation of the {} axes of {x}",
                            sx.len()
                        ),
                    ));
                }
                let shape: Vec<u64> = perm.iter().map(|&i| sx[i]).collect();
                self.defines(stmt, &Type::tile(dx, &shape))?;
            }
            TileOp::Reduce { op, x, axis } => {
                let (dx, sx) = self.tile(stmt, *x, "operand")?;
                if *axis >= sx.len() {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "axis {axis} is out of range for {x}: {}",
                            type_name(&Type::tile(dx, &sx))
                        ),
                    ));
                }
                let class_ok = match op {
                    ReduceOp::Mean => dx.is_float(),
                    _ => dx.is_numeric(),
                };
                if !class_ok {
                    return Err(
                        self.type_error(stmt, format!("{} does not take {dx} tiles", op.name()))
                    );
                }
                let dtype = match op {
                    ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
                    _ => dx,
                };
                let mut shape = sx;
                shape[*axis] = 1;
                self.defines(stmt, &Type::tile(dtype, &shape))?;
            }
            TileOp::Mma { a, b, acc } => {
                let (da, sa) = self.tile(stmt, *a, "lhs")?;
                let (db, sb) = self.tile(stmt, *b, "rhs")?;
                let (dc, sc) = self.tile(stmt, *acc, "accumulator")?;
                let r = sa.len();
                let ok = r >= 2
                    && sb.len() == r
                    && sc.len() == r
                    && sa[..r - 2] == sb[..r - 2]
                    && sa[..r - 2] == sc[..r - 2]
                    && sa[r - 1] == sb[r - 2]
                    && sc[r - 2] == sa[r - 2]
                    && sc[r - 1] == sb[r - 1]
                    && da == db
                    && Some(dc) == mma_acc_dtype(da);
                if !ok {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "mma of {a}: {}, {b}: {} into {acc}: {} (expected [.., m, k] x [.., k, n] of one dtype + [.., m, n] of f32 for 16/32-bit floats, f64 for f64, i64 for integers)",
                            type_name(&Type::tile(da, &sa)),
                            type_name(&Type::tile(db, &sb)),
                            type_name(&Type::tile(dc, &sc))
                        ),
                    ));
                }
                self.defines(stmt, &Type::tile(dc, &sc))?;
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
            } => {
                self.index(stmt, *start, "start")?;
                self.index(stmt, *end, "end")?;
                self.index(stmt, *step, "step")?;
                if init.len() != carried.len() || yields.len() != carried.len() {
                    return Err(self.type_error(
                        stmt,
                        format!(
                            "{} initial values, {} carried values and {} yields (all must be equal)",
                            init.len(),
                            carried.len(),
                            yields.len()
                        ),
                    ));
                }
                for (&i, (c, ct)) in init.iter().zip(carried) {
                    let t = self.use_of(stmt, i)?;
                    if &t != ct {
                        return Err(self.type_error(
                            stmt,
                            format!(
                                "initial value {i} is {}, but carried {c} is {}",
                                type_name(&t),
                                type_name(ct)
                            ),
                        ));
                    }
                }
                let defs = self.defs(stmt, carried.len())?;
                for ((c, ct), d) in carried.iter().zip(&defs) {
                    if d != ct {
                        return Err(self.type_error(
                            stmt,
                            format!(
                                "defines {}, but carried {c} is {}",
                                type_name(d),
                                type_name(ct)
                            ),
                        ));
                    }
                }
                self.scopes.push(BTreeMap::new());
                self.define(stmt, *var, &Type::Index)?;
                for (c, ct) in carried {
                    self.define(stmt, *c, ct)?;
                }
                self.block(body)?;
                for (&y, (c, ct)) in yields.iter().zip(carried) {
                    let t = self.use_of(stmt, y)?;
                    if &t != ct {
                        return Err(self.type_error(
                            stmt,
                            format!(
                                "yields {y} of {} for carried {c} of {}",
                                type_name(&t),
                                type_name(ct)
                            ),
                        ));
                    }
                }
                self.scopes.pop();
            }
        }
        Ok(())
    }

    fn coords(&self, stmt: &Stmt, coords: &[ValueId], rank: usize) -> Result<(), TileError> {
        if coords.len() != rank {
            return Err(self.type_error(
                stmt,
                format!("{} coordinates for a view of rank {rank}", coords.len()),
            ));
        }
        for &c in coords {
            self.index(stmt, c, "coordinate")?;
        }
        Ok(())
    }

    /// A tile loaded from or stored to a view of `p` with `rank` axes: that rank and p's dtype.
    fn tile_of_view(
        &self,
        stmt: &Stmt,
        ty: &Type,
        p: &TensorParam,
        rank: usize,
        verb: &str,
    ) -> Result<(), TileError> {
        match ty {
            Type::Tile { dtype, shape } if shape.len() == rank && *dtype == p.dtype => Ok(()),
            _ => Err(self.type_error(
                stmt,
                format!(
                    "{verb} {} through a view of rank {rank} of a {} param (expected a {} tile of rank {rank})",
                    type_name(ty),
                    p.dtype,
                    p.dtype
                ),
            )),
        }
    }
}

/// The accumulator dtype of an `Mma` on `dtype` operands.
fn mma_acc_dtype(dtype: DType) -> Option<DType> {
    match dtype {
        DType::F64 => Some(DType::F64),
        d if d.is_float() => Some(DType::F32),
        d if d.is_int() => Some(DType::I64),
        _ => None,
    }
}
