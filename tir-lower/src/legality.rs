//! Legality: proof that every kernel writes only memory it owns, each element once.
//!
//! [`certify`] takes one tile kernel and proves, for every region it declares it writes:
//! 1. **Injective programs.** The region is written by exactly one store, outside any loop, at
//!    tile coordinates that are the program ids in some order, each grid axis once: distinct
//!    programs store distinct tiles.
//! 2. **Disjoint, covering tiles.** Along each axis the grid has exactly `ceil(extent / tile)`
//!    programs, where `extent` is the stored view's extent: the tiles `[c*t, (c+1)*t)` are
//!    disjoint and cover `[0, extent)`, the last one masked at the edge.
//! 3. **A one-to-one view.** The stored view's (extent, stride) pairs, merged into contiguous
//!    runs, are exactly those of the region in the buffer's row-major layout, at the region's
//!    offset: view elements and region elements correspond one to one.
//! 4. **In-place reads.** A buffer the kernel both reads and writes is read only by loads of the
//!    very tiles it stores (same view, same coordinates), ordered before the store by tokens.
//!
//! A slice region at a static start must lie inside its buffer; a run-time write position
//! becomes a [`LaunchCheck`] (added by lowering; the program verifier checks that every such
//! region has one). Sizes are compared as polynomials in the symbolic dims (so the proof holds
//! for every binding). [`check_program`] checks across
//! kernels: kernels that may run concurrently never touch one buffer when either writes it, and
//! the memory plan never overlaps buffers that are live together.
//!
//! An unsafe user's kernel is not proven: [`unproven`] gives its certificate, which says so and
//! quotes its author's contract; [`certify`] refuses a [`Region::Scattered`] write, which only
//! such a kernel claims. [`check_program`]'s cross-kernel checks apply to it as to any kernel.
//!
//! A collective kernel (an `all_reduce_*`, `all_gather` or `reduce_scatter` over a mesh) has no
//! programs: [`certify`] proves instead that it reads one buffer and writes one other buffer
//! whole, of the type the collective gives; its buffer is then owned by it alone on every device
//! (each device writes its own copy), and [`check_program`] keeps every other kernel that
//! touches those buffers ordered with it, as for any kernel.

use crate::buffer::{Buffer, Storage};
pub use crate::certificate::{collective_text, Certificate, LaunchCheck};
use crate::program::Program;
use crate::tile::{Access, IndexOp, Region, SliceStart, Stmt, TileKernel, TileOp, Type, ValueId};
use std::collections::{BTreeMap, HashMap};
use tir_graph::Dim;

/// A kernel or program that could not be proven legal: names the kernel(s), the programs and
/// the region.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LegalityError {
    /// One kernel's writes could not be proven owned (an obligation of the module doc fails).
    #[error("kernel {kernel}: {why}")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// The obligation that fails, and where.
        why: String,
    },
    /// Two kernels that may run concurrently touch one buffer and at least one writes it.
    #[error("kernels {first} and {second} may run concurrently, but {first} {first_access} {buffer} while {second} {second_access} it")]
    Race {
        /// The first kernel's name.
        first: String,
        /// The second kernel's name.
        second: String,
        /// The buffer's name.
        buffer: String,
        /// What the first does with it (`reads` or `writes`).
        first_access: &'static str,
        /// What the second does with it.
        second_access: &'static str,
    },
    /// The memory plan gives two buffers that are live together overlapping bytes.
    #[error("the memory plan overlaps {first} and {second} (bytes {start}..{end} of the arena) while both are live")]
    Overlap {
        /// The first buffer's name.
        first: String,
        /// The second buffer's name.
        second: String,
        /// The overlap's first byte in the arena.
        start: u64,
        /// One past its last byte.
        end: u64,
    },
}

/// A polynomial in the symbolic dims, program ids and opaque terms, with integer coefficients.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Poly(BTreeMap<Vec<String>, i64>);

impl Poly {
    fn constant(c: i64) -> Poly {
        let mut m = BTreeMap::new();
        if c != 0 {
            m.insert(Vec::new(), c);
        }
        Poly(m)
    }

    fn atom(name: String) -> Poly {
        Poly(BTreeMap::from([(vec![name], 1)]))
    }

    fn add(&self, other: &Poly, sign: i64) -> Poly {
        let mut m = self.0.clone();
        for (k, v) in &other.0 {
            let e = m.entry(k.clone()).or_insert(0);
            *e += sign * v;
            if *e == 0 {
                m.remove(k);
            }
        }
        Poly(m)
    }

    fn mul(&self, other: &Poly) -> Poly {
        let mut out = Poly::constant(0);
        for (a, x) in &self.0 {
            for (b, y) in &other.0 {
                let mut k = a.clone();
                k.extend(b.iter().cloned());
                k.sort();
                out = out.add(&Poly(BTreeMap::from([(k, x * y)])), 1);
            }
        }
        out
    }

    fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    /// The program-id axis when the polynomial is exactly one program id.
    fn as_program_id(&self) -> Option<usize> {
        let (k, v) = self.0.iter().next()?;
        if self.0.len() != 1 || *v != 1 || k.len() != 1 {
            return None;
        }
        k[0].strip_prefix("pid").and_then(|a| a.parse().ok())
    }

    /// The polynomial of `d` as [`Scalars`] sees the scalar lowering computes for it
    /// (`KernelBuilder::dim`): a floor division, min or max of non-constants is the atom
    /// `Div(n, d)` (`Min`, `Max`, folded left) that the scalar ops give.
    fn of_dim(d: &Dim) -> Poly {
        match d {
            Dim::Static(n) => Poly::constant(*n as i64),
            Dim::Symbolic(name) => Poly::atom(name.clone()),
            Dim::Expr(e) => Poly::of_expr(e),
        }
    }

    fn of_expr(e: &tir_graph::DimExpr) -> Poly {
        let mut total = Poly::constant(0);
        for (mono, k) in e.terms() {
            let term = mono
                .iter()
                .fold(Poly::constant(*k), |p, a| p.mul(&Poly::of_atom(a)));
            total = total.add(&term, 1);
        }
        total
    }

    fn of_atom(a: &tir_graph::dim::Atom) -> Poly {
        use tir_graph::dim::Atom;
        let binary = |op: IndexOp, x: Poly, y: Poly| Poly::atom(format!("{op:?}({x}, {y})"));
        let fold = |op: IndexOp, args: &[tir_graph::DimExpr]| {
            let mut polys = args.iter().map(Poly::of_expr);
            let first = polys.next().unwrap_or_else(|| Poly::constant(0));
            polys.fold(first, |x, y| binary(op, x, y))
        };
        match a {
            Atom::Sym(s) => Poly::atom(s.clone()),
            Atom::FloorDiv(n, d) => binary(IndexOp::Div, Poly::of_expr(n), Poly::of_expr(d)),
            Atom::Min(args) => fold(IndexOp::Min, args),
            Atom::Max(args) => fold(IndexOp::Max, args),
        }
    }
}

impl std::fmt::Display for Poly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("0");
        }
        let terms: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| match (k.is_empty(), *v) {
                (true, v) => v.to_string(),
                (false, 1) => k.join("*"),
                (false, v) => format!("{v}*{}", k.join("*")),
            })
            .collect();
        f.write_str(&terms.join(" + "))
    }
}

/// Symbolic values of a kernel's index scalars.
struct Scalars(HashMap<ValueId, Poly>);

impl Scalars {
    fn of(kernel: &TileKernel) -> Scalars {
        let mut s = Scalars(HashMap::new());
        for stmt in kernel.grid_body.stmts.iter().chain(&kernel.body.stmts) {
            s.define(stmt);
        }
        s
    }

    fn define(&mut self, stmt: &Stmt) {
        let Some(&(id, Type::Index)) = stmt.defs.first() else {
            return;
        };
        let poly = match &stmt.op {
            TileOp::Index { value } => Poly::constant(*value),
            TileOp::Dim { name } => Poly::atom(name.clone()),
            TileOp::ProgramId { axis } => Poly::atom(format!("pid{axis}")),
            TileOp::IndexArith { op, a, b } => {
                let (Some(x), Some(y)) = (self.0.get(a), self.0.get(b)) else {
                    return;
                };
                match (op, x.as_constant(), y.as_constant()) {
                    (IndexOp::Add, ..) => x.add(y, 1),
                    (IndexOp::Sub, ..) => x.add(y, -1),
                    (IndexOp::Mul, ..) => x.mul(y),
                    (IndexOp::Div, Some(a), Some(b)) if b != 0 => Poly::constant(a / b),
                    (IndexOp::Rem, Some(a), Some(b)) if b != 0 => Poly::constant(a % b),
                    (IndexOp::Min, Some(a), Some(b)) => Poly::constant(a.min(b)),
                    (IndexOp::Max, Some(a), Some(b)) => Poly::constant(a.max(b)),
                    (other, ..) => Poly::atom(format!("{other:?}({x}, {y})")),
                }
            }
            TileOp::LoadScalar { param, .. } => Poly::atom(format!("scalar{param}")),
            _ => return,
        };
        self.0.insert(id, poly);
    }

    fn get(&self, v: &ValueId) -> Option<&Poly> {
        self.0.get(v)
    }
}

/// A view as polynomials.
#[derive(Clone, Debug, PartialEq)]
struct ViewExpr {
    param: usize,
    offset: Poly,
    shape: Vec<Poly>,
    strides: Vec<Poly>,
}

fn views(kernel: &TileKernel, scalars: &Scalars) -> HashMap<ValueId, ViewExpr> {
    let mut out = HashMap::new();
    kernel.walk(&mut |stmt| {
        if let TileOp::MakeView {
            param,
            offset,
            shape,
            strides,
        } = &stmt.op
        {
            let polys = |vs: &[ValueId]| {
                vs.iter()
                    .map(|v| scalars.get(v).cloned())
                    .collect::<Option<Vec<_>>>()
            };
            if let (Some(offset), Some(shape), Some(strides)) =
                (scalars.get(offset).cloned(), polys(shape), polys(strides))
            {
                out.insert(
                    stmt.defs[0].0,
                    ViewExpr {
                        param: *param,
                        offset,
                        shape,
                        strides,
                    },
                );
            }
        }
    });
    out
}

/// (extent, stride) pairs without unit extents, merged into contiguous runs.
fn runs(mut pairs: Vec<(Poly, Poly)>) -> Vec<(Poly, Poly)> {
    pairs.retain(|(e, _)| e.as_constant() != Some(1));
    pairs.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    // Repeatedly merge a pair whose stride is another's stride times extent.
    loop {
        let mut merged = false;
        'outer: for i in 0..pairs.len() {
            for j in 0..pairs.len() {
                if i != j && pairs[j].1 == pairs[i].1.mul(&pairs[i].0) {
                    let extent = pairs[i].0.mul(&pairs[j].0);
                    let stride = pairs[i].1.clone();
                    let (hi, lo) = (i.max(j), i.min(j));
                    pairs.remove(hi);
                    pairs.remove(lo);
                    pairs.push((extent, stride));
                    merged = true;
                    break 'outer;
                }
            }
        }
        if !merged {
            break;
        }
    }
    pairs.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    pairs
}

/// The tile shape a statement defines (for loads and stores: the value's).
fn tile_of(types: &HashMap<ValueId, Type>, v: ValueId) -> Vec<u64> {
    match types.get(&v) {
        Some(Type::Tile { shape, .. }) => shape.clone(),
        _ => Vec::new(),
    }
}

/// Proves `kernel` legal (see the module doc) or says what fails.
pub fn certify(kernel: &TileKernel, buffers: &[Buffer]) -> Result<Certificate, LegalityError> {
    let fail = |why: String| LegalityError::Kernel {
        kernel: kernel.name.clone(),
        why,
    };
    if let Some((op, input, output)) = kernel.collective() {
        return certify_collective(kernel, op, input, output, buffers).map_err(fail);
    }
    let scalars = Scalars::of(kernel);
    let views = views(kernel, &scalars);
    let mut types: HashMap<ValueId, Type> = HashMap::new();
    kernel.walk(&mut |s| {
        for (id, t) in &s.defs {
            types.insert(*id, t.clone());
        }
    });
    let mut facts = Vec::new();
    let grid: Vec<Poly> = kernel
        .grid
        .iter()
        .map(|g| {
            scalars
                .get(g)
                .cloned()
                .ok_or_else(|| fail(format!("grid extent {g} is not an index expression")))
        })
        .collect::<Result<_, _>>()?;
    facts.push(format!(
        "programs: a grid of [{}], one per tile of the output",
        grid.iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for write in &kernel.writes {
        let buffer = &buffers[kernel.params[write.param].buffer];
        if write.region == Region::Scattered {
            return Err(fail(format!(
                "its writes into {} are scattered at places only the run knows, which cannot be \
                 proven (only an unsafe kernel claims such a region)",
                buffer.name
            )));
        }
        let stores: Vec<&Stmt> = kernel
            .body
            .stmts
            .iter()
            .filter(|s| matches!(&s.op, TileOp::Store { view, .. } if views.get(view).is_some_and(|v| v.param == write.param)))
            .collect();
        let mut nested = 0;
        kernel.walk(&mut |s| {
            if matches!(&s.op, TileOp::Store { view, .. } if views.get(view).is_some_and(|v| v.param == write.param)) {
                nested += 1;
            }
        });
        if stores.len() != 1 || nested != 1 {
            return Err(fail(format!(
                "{} is stored {nested} times ({} outside loops); each program must store its one tile once",
                buffer.name,
                stores.len()
            )));
        }
        let TileOp::Store {
            view,
            coords,
            value,
            token,
        } = &stores[0].op
        else {
            unreachable!("filtered to stores");
        };
        let view = views[view].clone();
        let tile = tile_of(&types, *value);
        prove_programs(kernel, &scalars, coords, &grid, &tile, &view, &buffer.name)
            .map_err(fail)?;
        facts.push(format!(
            "program (p0, ..) stores tile (p0, ..) of {}: distinct programs, distinct tiles; tiles of [{}] partition the extent [{}] exactly (edge tiles masked)",
            buffer.name,
            tile.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
            view.shape.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
        ));
        prove_inside(buffer, &write.region).map_err(fail)?;
        facts.push(prove_view(kernel, &view, buffer, &write.region).map_err(fail)?);
        if let Some(fact) = prove_in_place(
            kernel,
            &views,
            write.param,
            &view,
            coords,
            *token,
            &buffer.name,
        )
        .map_err(fail)?
        {
            facts.push(fact);
        }
    }
    let shared: Vec<&str> = kernel
        .params
        .iter()
        .filter(|p| p.access == Access::Shared)
        .map(|p| buffers[p.buffer].name.as_str())
        .collect();
    if !shared.is_empty() {
        facts.push(format!(
            "reads {} shared: read-only, in any order",
            shared.join(", ")
        ));
    }
    Ok(Certificate {
        kernel: kernel.name.clone(),
        facts,
        checks: Vec::new(),
    })
}

/// The certificate of an unsafe user's kernel: nothing is proven of its writes; it records its
/// author's `contract` verbatim, what it claims of each buffer it writes, and who checks it.
pub fn unproven(kernel: &TileKernel, buffers: &[Buffer], contract: &str) -> Certificate {
    let mut facts = vec![format!("{}: \"{contract}\"", crate::certificate::UNPROVEN)];
    for write in &kernel.writes {
        let name = kernel
            .params
            .get(write.param)
            .and_then(|p| buffers.get(p.buffer))
            .map_or("?", |b| b.name.as_str());
        let claim = match &write.region {
            Region::Scattered => format!(
                "claims some elements of {name}, each at most once (the others keep their values)"
            ),
            _ => format!("claims every element of {name} exactly once"),
        };
        facts.push(format!(
            "{claim}: not proven; the reference backend's checking mode checks it at run time \
             (no element written twice or outside {name}), the CUDA backend runs it unchecked"
        ));
    }
    Certificate {
        kernel: kernel.name.clone(),
        facts,
        checks: Vec::new(),
    }
}

/// A collective reads its input buffer and writes all of a distinct output buffer, whose type
/// is the one the collective gives its input's.
fn certify_collective(
    kernel: &TileKernel,
    op: &tir_graph::Op,
    input: usize,
    output: usize,
    buffers: &[Buffer],
) -> Result<Certificate, String> {
    let buffer = |p: usize| {
        kernel
            .params
            .get(p)
            .and_then(|tp| buffers.get(tp.buffer))
            .ok_or_else(|| format!("parameter {p} names no buffer"))
    };
    let (from, to) = (buffer(input)?, buffer(output)?);
    if kernel.params[input].buffer == kernel.params[output].buffer {
        return Err(format!(
            "{} reads and writes {} in place",
            collective_text(op),
            from.name
        ));
    }
    let whole = kernel
        .writes
        .iter()
        .any(|w| w.param == output && w.region == Region::Whole);
    if !whole || kernel.params[output].access != Access::Mutable {
        return Err(format!(
            "{} does not write {} whole",
            collective_text(op),
            to.name
        ));
    }
    let given = tir_graph::infer::infer(op, &[&from.ty]).map_err(|e| e.to_string())?;
    if given != to.ty {
        return Err(format!(
            "{} of {} gives {given}, but {} is {}",
            collective_text(op),
            from.ty,
            to.name,
            to.ty
        ));
    }
    Ok(Certificate {
        kernel: kernel.name.clone(),
        facts: vec![
            format!(
                "collective {}: each device reads its {} ({}) whole, read-only",
                collective_text(op),
                from.name,
                from.ty
            ),
            format!(
                "each device writes all of its own {} ({}), and nothing else: no program writes it",
                to.name, to.ty
            ),
        ],
        checks: Vec::new(),
    })
}

/// A slice region at a static start lies inside its buffer. (One at a run-time position is
/// checked at launch: lowering adds the [`LaunchCheck`], the program verifier checks it is there.)
fn prove_inside(buffer: &Buffer, region: &Region) -> Result<(), String> {
    let Region::Slice {
        axis,
        start: SliceStart::Static(s),
        len,
    } = region
    else {
        return Ok(());
    };
    let name = &buffer.name;
    let size = buffer.ty.shape.dims().get(*axis);
    match (len, size) {
        (Dim::Static(l), Some(Dim::Static(n))) if s.checked_add(*l).is_some_and(|e| e <= *n) => {
            Ok(())
        }
        (Dim::Static(l), Some(Dim::Static(n))) => Err(format!(
            "the write region {s}..{} along axis {axis} of {name} is outside its size {n}",
            s.saturating_add(*l)
        )),
        _ => Err(format!(
            "the write region of {name} at {s} of length {len} along axis {axis} cannot be proven \
             inside {name} ({})",
            buffer.ty
        )),
    }
}

/// Facts 1 and 2: program ids as tile coordinates, and grid = ceil(extent / tile) per axis.
fn prove_programs(
    kernel: &TileKernel,
    scalars: &Scalars,
    coords: &[ValueId],
    grid: &[Poly],
    tile: &[u64],
    view: &ViewExpr,
    name: &str,
) -> Result<(), String> {
    let axes: Vec<Option<usize>> = coords
        .iter()
        .map(|c| scalars.get(c).and_then(Poly::as_program_id))
        .collect();
    let mut used = vec![0usize; grid.len()];
    for (k, a) in axes.iter().enumerate() {
        let Some(a) = a.filter(|&a| a < grid.len()) else {
            let expr = scalars
                .get(&coords[k])
                .map_or_else(|| coords[k].to_string(), Poly::to_string);
            let clash = collision(kernel, coords, tile, grid.len(), name).unwrap_or_default();
            return Err(format!(
                "the store into {name} is at a tile coordinate (axis {k}: {expr}) that is not a program id, so distinct programs cannot be proven to write distinct tiles{clash}"
            ));
        };
        used[a] += 1;
    }
    let unused = used.iter().position(|&n| n == 0);
    if let Some(a) = unused.or_else(|| used.iter().position(|&n| n > 1)) {
        let other = |v: usize| {
            (0..grid.len())
                .map(|i| if i == a { v } else { 0 })
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(if used[a] == 0 {
            format!("programs ({}) and ({}) both write the same tile of {name}: grid axis {a} does not select a tile", other(0), other(1))
        } else {
            format!("the store into {name} uses program axis {a} for {} tile coordinates: programs write along a diagonal and leave tiles unwritten", used[a])
        });
    }
    for (k, a) in axes.iter().enumerate() {
        let a = a.expect("checked above");
        let t = tile.get(k).copied().unwrap_or(1) as i64;
        let expected = Poly::atom(format!(
            "Div({}, {})",
            view.shape[k].add(&Poly::constant(t - 1), 1),
            Poly::constant(t)
        ));
        let expected_alt = (view.shape[k].add(&Poly::constant(t - 1), 1).as_constant())
            .map(|n| Poly::constant(n.div_euclid(t)));
        if grid[a] != expected && Some(&grid[a]) != expected_alt.as_ref() {
            let _ = kernel;
            return Err(format!(
                "the partition of {name} does not cover it exactly: grid axis {a} has {} programs but the extent {} in tiles of {t} needs ceil({} / {t})",
                grid[a], view.shape[k], view.shape[k]
            ));
        }
    }
    Ok(())
}

/// Two programs whose store coordinates coincide, found by evaluating the kernel's top-level
/// scalars for the first programs of each axis (symbolic dims at 2^20): `", e.g. programs (..)
/// and (..) both write tile (..) of name (elements ..)"`. None when no small pair collides or the
/// coordinates depend on what this cannot evaluate (loads, loops).
fn collision(
    kernel: &TileKernel,
    coords: &[ValueId],
    tile: &[u64],
    axes: usize,
    name: &str,
) -> Option<String> {
    const TRY: i64 = 4;
    let points: Vec<Vec<i64>> = (0..TRY.pow(axes as u32))
        .map(|mut i| {
            (0..axes)
                .map(|_| {
                    let c = i % TRY;
                    i /= TRY;
                    c
                })
                .collect()
        })
        .collect();
    let mut seen: Vec<(Vec<i64>, Vec<i64>)> = Vec::new();
    for p in points {
        let at = store_coords(kernel, coords, &p)?;
        if let Some((q, _)) = seen.iter().find(|(_, c)| *c == at) {
            let list = |v: &[i64]| {
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let elements: Vec<String> = at
                .iter()
                .zip(tile)
                .map(|(&c, &t)| format!("[{}, {})", c * t as i64, (c + 1) * t as i64))
                .collect();
            return Some(format!(
                ", e.g. programs ({}) and ({}) both write tile ({}) of {name} (elements {})",
                list(q),
                list(&p),
                list(&at),
                elements.join(" x ")
            ));
        }
        seen.push((p, at));
    }
    None
}

/// The values of `coords` in program `pid`, from the body's top-level scalar statements.
fn store_coords(kernel: &TileKernel, coords: &[ValueId], pid: &[i64]) -> Option<Vec<i64>> {
    let mut values: HashMap<ValueId, i64> = HashMap::new();
    for stmt in &kernel.body.stmts {
        let Some((id, Type::Index)) = stmt.defs.first() else {
            continue;
        };
        let value = match &stmt.op {
            TileOp::ProgramId { axis } => *pid.get(*axis)?,
            TileOp::Index { value } => *value,
            TileOp::Dim { .. } => 1 << 20,
            TileOp::IndexArith { op, a, b } => {
                let (a, b) = (*values.get(a)?, *values.get(b)?);
                match op {
                    IndexOp::Add => a.checked_add(b)?,
                    IndexOp::Sub => a.checked_sub(b)?,
                    IndexOp::Mul => a.checked_mul(b)?,
                    IndexOp::Div => a.checked_div(b)?,
                    IndexOp::Rem => a.checked_rem(b)?,
                    IndexOp::Min => a.min(b),
                    IndexOp::Max => a.max(b),
                }
            }
            _ => continue,
        };
        values.insert(*id, value);
    }
    coords.iter().map(|c| values.get(c).copied()).collect()
}

/// Fact 3: the stored view is a one-to-one map onto the region.
fn prove_view(
    kernel: &TileKernel,
    view: &ViewExpr,
    buffer: &Buffer,
    region: &Region,
) -> Result<String, String> {
    let dims = buffer.ty.shape.dims();
    let mut strides = vec![Poly::constant(1); dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1].mul(&Poly::of_dim(&dims[k + 1]));
    }
    let mut extents: Vec<Poly> = dims.iter().map(Poly::of_dim).collect();
    let (offset, what) = match region {
        Region::Whole => (
            Poly::constant(0),
            format!("all of {} ({})", buffer.name, buffer.ty),
        ),
        Region::Scattered => {
            return Err(format!(
                "the writes into {} are scattered, which cannot be proven",
                buffer.name
            ))
        }
        Region::Slice { axis, start, len } => {
            extents[*axis] = Poly::of_dim(len);
            let (start, at) = match start {
                SliceStart::Static(s) => (Poly::constant(*s as i64), s.to_string()),
                SliceStart::Param(p) => (
                    Poly::atom(format!("scalar{p}")),
                    format!("the run-time position in parameter {p} (checked at launch)"),
                ),
            };
            (
                start.mul(&strides[*axis]),
                format!(
                    "the slice of {} of length {len} along axis {axis} at {at}",
                    buffer.name
                ),
            )
        }
    };
    let expected = runs(extents.into_iter().zip(strides).collect());
    let got = runs(
        view.shape
            .iter()
            .cloned()
            .zip(view.strides.iter().cloned())
            .collect(),
    );
    if expected != got || view.offset != offset {
        let show = |r: &[(Poly, Poly)]| {
            r.iter()
                .map(|(e, s)| format!("{e}@{s}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = kernel;
        return Err(format!(
            "the store view of {} (extent@stride runs [{}], offset {}) is not one-to-one onto {what} (runs [{}], offset {offset}): some elements are written twice or never",
            buffer.name,
            show(&got),
            view.offset,
            show(&expected)
        ));
    }
    Ok(format!(
        "the stored view covers {what} one to one (contiguous runs [{}])",
        expected
            .iter()
            .map(|(e, s)| format!("{e} at stride {s}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Fact 4: reads of a buffer the kernel writes are loads of the stored tile, before the store.
fn prove_in_place(
    kernel: &TileKernel,
    views: &HashMap<ValueId, ViewExpr>,
    param: usize,
    stored: &ViewExpr,
    coords: &[ValueId],
    store_token: ValueId,
    name: &str,
) -> Result<Option<String>, String> {
    let mut reads = 0;
    let mut problem = None;
    let mut token_source: HashMap<ValueId, Option<ValueId>> = HashMap::new();
    kernel.walk(&mut |s| match &s.op {
        TileOp::Load {
            view,
            coords: c,
            token,
            ..
        } if views.get(view).is_some_and(|v| v.param == param) => {
            reads += 1;
            if views[view] != *stored || c != coords {
                problem = Some(format!(
                    "a program of {} reads {name} outside the tile it writes",
                    kernel.name
                ));
            }
            if let Some((t, _)) = s.defs.get(1) {
                token_source.insert(*t, *token);
            }
        }
        TileOp::LoadIndexed { view, .. } if views.get(view).is_some_and(|v| v.param == param) => {
            problem = Some(format!(
                "{name} is read at computed indices in the kernel that writes it"
            ));
        }
        TileOp::LoadScalar { param: p, .. } if *p == param => {
            problem = Some(format!(
                "{name} is read as a scalar in the kernel that writes it"
            ));
        }
        _ => {}
    });
    if let Some(p) = problem {
        return Err(p);
    }
    if reads == 0 {
        return Ok(None);
    }
    // Every load's token must lead to the store's token.
    let loads_before_store = token_source.keys().all(|t| {
        let mut cur = Some(store_token);
        while let Some(c) = cur {
            if c == *t {
                return true;
            }
            cur = token_source.get(&c).copied().flatten();
        }
        false
    });
    if !loads_before_store {
        return Err(format!(
            "a read of {name} is not ordered before its store by tokens"
        ));
    }
    Ok(Some(format!("{name} is read in place: each program loads exactly the tile it stores, before the store in token order")))
}

/// Cross-kernel checks: no race between kernels that may run concurrently, and a memory plan
/// without overlaps (for static shapes here; for symbolic ones at each launch, by the backend,
/// with [`check_layout`]).
pub fn check_program(program: &Program) -> Result<(), LegalityError> {
    let n = program.kernels.len();
    // ancestors[k]: kernels that finish before k starts.
    let words = n.div_ceil(64);
    let mut ancestors = vec![vec![0u64; words]; n];
    for k in 0..n {
        for &d in &program.schedule.deps[k] {
            let (before, rest) = ancestors.split_at_mut(k);
            let row = &mut rest[0];
            row[d / 64] |= 1 << (d % 64);
            for (w, bits) in before[d].iter().enumerate() {
                row[w] |= bits;
            }
        }
    }
    let ordered = |a: usize, b: usize| {
        ancestors[b][a / 64] & (1 << (a % 64)) != 0 || ancestors[a][b / 64] & (1 << (b % 64)) != 0
    };
    let mut accessors: BTreeMap<usize, Vec<(usize, bool)>> = BTreeMap::new();
    for (k, kernel) in program.kernels.iter().enumerate() {
        for p in &kernel.params {
            accessors
                .entry(p.buffer)
                .or_default()
                .push((k, p.access == Access::Mutable));
        }
    }
    for (buffer, list) in &accessors {
        for (i, &(a, wa)) in list.iter().enumerate() {
            for &(b, wb) in &list[i + 1..] {
                if (wa || wb) && !ordered(a, b) {
                    let access = |w: bool| if w { "writes" } else { "reads" };
                    return Err(LegalityError::Race {
                        first: program.kernels[a].name.clone(),
                        second: program.kernels[b].name.clone(),
                        buffer: program.buffers[*buffer].name.clone(),
                        first_access: access(wa),
                        second_access: access(wb),
                    });
                }
            }
        }
    }
    let symbolic = program
        .buffers
        .iter()
        .any(|b| b.ty.shape.static_numel().is_none());
    if !symbolic {
        check_layout(program, &BTreeMap::new())?;
    }
    Ok(())
}

/// Checks the arena layout for one binding of the dims: buffers live in a common wave never
/// share bytes.
pub fn check_layout(program: &Program, dims: &BTreeMap<String, u64>) -> Result<(), LegalityError> {
    let Ok(layout) = program.plan.layout(&program.buffers, dims) else {
        return Ok(());
    };
    let live = &program.plan.live;
    for (i, a) in live.iter().enumerate() {
        for b in &live[i + 1..] {
            if a.first > b.last || b.first > a.last {
                continue;
            }
            let size = |r: &crate::plan::LiveRange| {
                crate::plan::buffer_bytes(&program.buffers[r.buffer], dims).unwrap_or(0)
            };
            let (sa, sb) = (layout.offsets[&a.buffer], layout.offsets[&b.buffer]);
            let (ea, eb) = (sa + size(a), sb + size(b));
            if sa < eb && sb < ea && size(a) > 0 && size(b) > 0 {
                debug_assert!(program.buffers[a.buffer].storage == Storage::Arena);
                return Err(LegalityError::Overlap {
                    first: program.buffers[a.buffer].name.clone(),
                    second: program.buffers[b.buffer].name.clone(),
                    start: sa.max(sb),
                    end: ea.min(eb),
                });
            }
        }
    }
    Ok(())
}
