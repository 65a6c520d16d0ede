//! What `compile` checks once per program, before any run: the program's parts agree with each
//! other (buffers, signature, certificates, schedule, memory plan), and each kernel's values are
//! used only where they are defined (SSA scoping), so the interpreter can keep one slot per value.

use crate::stmt_text::describe;
use std::collections::BTreeSet;
use tir_lower::legality::LaunchCheck;
use tir_lower::tile::{Access, Block, Region, SliceStart, TileKernel, TileOp, ValueId};
use tir_lower::{BackendError, Program, Storage};

/// Per-kernel facts the interpreter needs, computed once.
#[derive(Clone, Debug)]
pub struct KernelPlan {
    /// The environment slot of each value id (`NO_SLOT` where the id is not defined).
    pub slot_of: Vec<u32>,
    /// How many slots a program's environment has.
    pub slots: usize,
}

pub const NO_SLOT: u32 = u32::MAX;

/// The largest value id a kernel may use (ids index a table).
const MAX_VALUE_ID: u32 = 1 << 24;

fn invalid(reason: String) -> BackendError {
    BackendError::Unsupported {
        backend: "ref".into(),
        reason: format!("invalid program: {reason}"),
    }
}

fn kernel_error(kernel: &TileKernel, reason: String) -> BackendError {
    BackendError::Kernel {
        kernel: kernel.name.clone(),
        reason,
    }
}

/// Checks `program` as a whole and plans each kernel.
pub fn prepare(program: &Program) -> Result<Vec<KernelPlan>, BackendError> {
    check_signature(program)?;
    check_schedule_and_plan(program)?;
    if program.certificates.len() != program.kernels.len() {
        return Err(invalid(format!(
            "{} kernels but {} certificates",
            program.kernels.len(),
            program.certificates.len()
        )));
    }
    let mut plans = Vec::with_capacity(program.kernels.len());
    for (kernel, cert) in program.kernels.iter().zip(&program.certificates) {
        if cert.kernel != kernel.name {
            return Err(invalid(format!(
                "the certificate of kernel {} is for kernel {}",
                kernel.name, cert.kernel
            )));
        }
        for check in &cert.checks {
            let LaunchCheck::SliceInBounds { offset_buffer, .. } = check;
            if *offset_buffer >= program.buffers.len() {
                return Err(kernel_error(
                    kernel,
                    format!("a launch check reads buffer {offset_buffer}, which does not exist"),
                ));
            }
        }
        check_params(program, kernel)?;
        plans.push(plan_kernel(kernel)?);
    }
    Ok(plans)
}

/// Inputs, parameters and states of the signature have buffers of their declared types, outputs
/// name existing buffers, and constants fit their buffers.
fn check_signature(program: &Program) -> Result<(), BackendError> {
    let sig = &program.signature;
    let sources = sig
        .inputs
        .iter()
        .map(|(n, t)| (n, Storage::Input(n.clone()), t))
        .chain(
            sig.parameters
                .iter()
                .map(|(n, t)| (n, Storage::Parameter(n.clone()), t)),
        )
        .chain(
            sig.states
                .iter()
                .map(|(n, t)| (n, Storage::State(n.clone()), t)),
        );
    let mut names = BTreeSet::new();
    for (name, storage, ty) in sources {
        if !names.insert(name.clone()) {
            return Err(invalid(format!(
                "the signature names {name:?} more than once"
            )));
        }
        match program.buffers.iter().find(|b| b.storage == storage) {
            None => {
                return Err(invalid(format!(
                    "{storage:?} of the signature has no buffer"
                )))
            }
            Some(b) if b.ty != *ty => {
                return Err(invalid(format!(
                    "{storage:?} is {ty} in the signature but its buffer {} is {}",
                    b.name, b.ty
                )))
            }
            Some(_) => {}
        }
    }
    for (name, buffer) in &sig.outputs {
        if *buffer >= program.buffers.len() {
            return Err(invalid(format!(
                "output {name:?} is buffer {buffer}, which does not exist"
            )));
        }
    }
    for b in &program.buffers {
        if let Storage::Constant(data) = &b.storage {
            let n = b.ty.shape.static_numel();
            if n != Some(data.len() as u64) || !data.fits(b.ty.dtype) {
                return Err(invalid(format!(
                    "constant buffer {} of {} has {} values that do not fit it",
                    b.name,
                    b.ty,
                    data.len()
                )));
            }
        }
    }
    Ok(())
}

/// Kernels come in an order that satisfies the schedule, and every arena buffer a kernel uses is
/// live (in the memory plan) in the kernel's wave: together with the run-time check of the
/// layout, no kernel touches bytes another live value owns.
fn check_schedule_and_plan(program: &Program) -> Result<(), BackendError> {
    let schedule = &program.schedule;
    let n = program.kernels.len();
    if schedule.deps.len() != n {
        return Err(invalid(format!(
            "the schedule has dependencies for {} kernels, the program has {n}",
            schedule.deps.len()
        )));
    }
    let mut in_waves = vec![0usize; n];
    for &k in schedule.waves.iter().flatten() {
        match in_waves.get_mut(k) {
            Some(c) => *c += 1,
            None => return Err(invalid(format!("a schedule wave lists kernel {k} of {n}"))),
        }
    }
    if let Some(k) = in_waves.iter().position(|&c| c != 1) {
        return Err(invalid(format!(
            "kernel {} is in {} schedule waves, not one",
            program.kernels[k].name, in_waves[k]
        )));
    }
    let wave_of = schedule.wave_of();
    for (k, deps) in schedule.deps.iter().enumerate() {
        if let Some(&d) = deps.iter().find(|&&d| d >= k || wave_of[d] >= wave_of[k]) {
            return Err(invalid(format!(
                "kernel {} depends on kernel {d}, which does not run (or finish) before it",
                program.kernels[k].name
            )));
        }
    }
    let mut live = vec![None; program.buffers.len()];
    for r in &program.plan.live {
        let Some(slot) = live.get_mut(r.buffer) else {
            return Err(invalid(format!(
                "the memory plan has buffer {}, which does not exist",
                r.buffer
            )));
        };
        if program.buffers[r.buffer].storage != Storage::Arena || slot.is_some() || r.first > r.last
        {
            return Err(invalid(format!(
                "the memory plan's live range {}..={} of buffer {} is not the one range of an \
                 arena buffer",
                r.first, r.last, program.buffers[r.buffer].name
            )));
        }
        *slot = Some((r.first, r.last));
    }
    for (k, kernel) in program.kernels.iter().enumerate() {
        for p in &kernel.params {
            let Some(buffer) = program.buffers.get(p.buffer) else {
                continue; // reported by check_params
            };
            if buffer.storage != Storage::Arena {
                continue;
            }
            let w = wave_of[k];
            match live[p.buffer] {
                Some((first, last)) if first <= w && w <= last => {}
                range => {
                    return Err(invalid(format!(
                        "memory plan: kernel {} (wave {w}) uses arena buffer {}, whose live range \
                         is {}",
                        kernel.name,
                        buffer.name,
                        range.map_or("missing".to_string(), |(f, l)| format!("waves {f}..={l}"))
                    )))
                }
            }
        }
    }
    Ok(())
}

/// Parameters name existing buffers of their dtype; write regions name distinct mutable
/// parameters and fit their buffers' ranks.
fn check_params(program: &Program, kernel: &TileKernel) -> Result<(), BackendError> {
    for (i, p) in kernel.params.iter().enumerate() {
        match program.buffers.get(p.buffer) {
            None => {
                return Err(kernel_error(
                    kernel,
                    format!("parameter {i} is buffer {}, which does not exist", p.buffer),
                ))
            }
            Some(b) if b.ty.dtype != p.dtype => {
                return Err(kernel_error(
                    kernel,
                    format!(
                        "parameter {i} is {} but its buffer {} is {}",
                        p.dtype, b.name, b.ty
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let mut seen = BTreeSet::new();
    for w in &kernel.writes {
        let ok = kernel
            .params
            .get(w.param)
            .is_some_and(|p| p.access == Access::Mutable);
        if !ok || !seen.insert(w.param) {
            return Err(kernel_error(
                kernel,
                format!(
                    "the write region of parameter {} does not name a distinct mutable parameter",
                    w.param
                ),
            ));
        }
        if let Region::Slice { axis, start, .. } = &w.region {
            let p = &kernel.params[w.param];
            let rank = program.buffers[p.buffer].ty.rank();
            let start_ok = match start {
                SliceStart::Static(_) => true,
                SliceStart::Param(q) => kernel.params.get(*q).is_some(),
            };
            if *axis >= rank || !start_ok {
                return Err(kernel_error(
                    kernel,
                    format!(
                        "the write region of parameter {} ({:?}) does not fit its buffer of rank \
                         {rank}",
                        w.param, w.region
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The value ids an op uses from its enclosing scope (a `for`'s yields are used inside its body
/// and checked there).
fn uses(op: &TileOp) -> Vec<ValueId> {
    match op {
        TileOp::ProgramId { .. }
        | TileOp::Dim { .. }
        | TileOp::Index { .. }
        | TileOp::MakeToken
        | TileOp::Constant { .. }
        | TileOp::Iota { .. } => vec![],
        TileOp::IndexArith { a, b, .. }
        | TileOp::IndexCmp { a, b, .. }
        | TileOp::Binary { a, b, .. } => vec![*a, *b],
        TileOp::LoadScalar { index, .. } => vec![*index],
        TileOp::MakeView {
            offset,
            shape,
            strides,
            ..
        } => std::iter::once(*offset)
            .chain(shape.iter().copied())
            .chain(strides.iter().copied())
            .collect(),
        TileOp::Load {
            view,
            coords,
            token,
            ..
        } => std::iter::once(*view)
            .chain(coords.iter().copied())
            .chain(*token)
            .collect(),
        TileOp::LoadIndexed {
            view,
            indices,
            mask,
            ..
        } => std::iter::once(*view)
            .chain(indices.iter().copied())
            .chain([*mask])
            .collect(),
        TileOp::Store {
            view,
            coords,
            value,
            token,
        } => std::iter::once(*view)
            .chain(coords.iter().copied())
            .chain([*value, *token])
            .collect(),
        TileOp::ApproxExp { x, shift, .. } => vec![*x, *shift],
        TileOp::Splat { x }
        | TileOp::Unary { x, .. }
        | TileOp::Cast { x }
        | TileOp::Broadcast { x }
        | TileOp::Reshape { x }
        | TileOp::Permute { x, .. }
        | TileOp::Reduce { x, .. } => vec![*x],
        TileOp::Select { cond, a, b } => vec![*cond, *a, *b],
        TileOp::Mma { a, b, acc } => vec![*a, *b, *acc],
        TileOp::For {
            start,
            end,
            step,
            init,
            ..
        } => [*start, *end, *step]
            .into_iter()
            .chain(init.iter().copied())
            .collect(),
    }
}

/// Scoping state of [`plan_kernel`]: which ids are visible now, and the slot of every id.
struct Scope {
    visible: Vec<bool>,
    /// Ids visible now, in order of definition (closing a block pops its ids).
    stack: Vec<u32>,
    slot_of: Vec<u32>,
    slots: u32,
}

impl Scope {
    fn define(&mut self, id: ValueId) -> Result<(), String> {
        if id.0 >= MAX_VALUE_ID {
            return Err(format!(
                "value id {id} is too large (ids must be below {MAX_VALUE_ID})"
            ));
        }
        let i = id.0 as usize;
        if i >= self.slot_of.len() {
            self.slot_of.resize(i + 1, NO_SLOT);
            self.visible.resize(i + 1, false);
        }
        if self.slot_of[i] != NO_SLOT {
            return Err(format!("{id} is defined more than once"));
        }
        self.slot_of[i] = self.slots;
        self.slots += 1;
        self.visible[i] = true;
        self.stack.push(id.0);
        Ok(())
    }

    fn check_use(&self, id: ValueId) -> Result<(), String> {
        if self.visible.get(id.0 as usize).copied().unwrap_or(false) {
            Ok(())
        } else {
            Err(format!(
                "uses {id}, which is not defined before it in its block or an enclosing one"
            ))
        }
    }

    /// Hides every id defined since the stack had `len` entries.
    fn close(&mut self, len: usize) {
        for id in self.stack.drain(len..) {
            self.visible[id as usize] = false;
        }
    }

    fn block(&mut self, block: &Block) -> Result<(), String> {
        for stmt in &block.stmts {
            let at = |e: String| format!("{}: {e}", describe(stmt));
            for id in uses(&stmt.op) {
                self.check_use(id).map_err(at)?;
            }
            if let TileOp::For {
                var,
                carried,
                body,
                yields,
                ..
            } = &stmt.op
            {
                let len = self.stack.len();
                self.define(*var).map_err(at)?;
                for (id, _) in carried {
                    self.define(*id).map_err(at)?;
                }
                self.block(body)?;
                for &y in yields {
                    self.check_use(y).map_err(at)?;
                }
                self.close(len);
            }
            for (id, _) in &stmt.defs {
                self.define(*id).map_err(at)?;
            }
        }
        Ok(())
    }
}

/// The slots of a kernel's values, checking that every use sees a definition (the grid body and
/// the program body are separate scopes) and that each id is defined once.
fn plan_kernel(kernel: &TileKernel) -> Result<KernelPlan, BackendError> {
    let mut scope = Scope {
        visible: Vec::new(),
        stack: Vec::new(),
        slot_of: Vec::new(),
        slots: 0,
    };
    let fail = |e: String| kernel_error(kernel, e);
    scope
        .block(&kernel.grid_body)
        .map_err(|e| fail(format!("grid: {e}")))?;
    for &g in &kernel.grid {
        scope
            .check_use(g)
            .map_err(|e| fail(format!("grid: the grid {e}")))?;
    }
    scope.close(0);
    scope.block(&kernel.body).map_err(fail)?;
    Ok(KernelPlan {
        slot_of: scope.slot_of,
        slots: scope.slots as usize,
    })
}
