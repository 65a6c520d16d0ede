//! The rules of a [`Program`] across its kernels: each kernel valid ([`verify_kernel`]), every
//! buffer index in range, each parameter's dtype its buffer's, one certificate per kernel
//! (naming it) with a launch check of every run-time write position of its kernel, and one
//! dependency list per kernel in the schedule naming only earlier kernels.
//!
//! Each error is one line naming the kernel and what is wrong.

use super::Program;
use crate::tile::verify::{verify_kernel, TileError};
use crate::tile::{Region, SliceStart};

/// Checks each kernel and the program-level rules of the module doc.
pub fn verify_program(p: &Program) -> Result<(), TileError> {
    let program = |reason: String| TileError::Program { reason };
    let nbuf = p.buffers.len();
    for k in &p.kernels {
        for (i, param) in k.params.iter().enumerate() {
            let Some(buffer) = p.buffers.get(param.buffer) else {
                return Err(program(format!(
                    "kernel {}: param {i} names buffer {}, but the program has {nbuf} buffers",
                    k.name, param.buffer
                )));
            };
            if buffer.ty.dtype != param.dtype {
                return Err(program(format!(
                    "kernel {}: param {i} is {} but its buffer {} {:?} is {}",
                    k.name, param.dtype, param.buffer, buffer.name, buffer.ty
                )));
            }
        }
        verify_kernel(k)?;
    }
    for r in &p.plan.live {
        if r.buffer >= nbuf {
            return Err(program(format!(
                "the memory plan names buffer {}, but the program has {nbuf} buffers",
                r.buffer
            )));
        }
    }
    for (name, b) in &p.signature.outputs {
        if *b >= nbuf {
            return Err(program(format!(
                "output {name:?} names buffer {b}, but the program has {nbuf} buffers"
            )));
        }
    }
    let nk = p.kernels.len();
    if p.certificates.len() != nk {
        return Err(program(format!(
            "{} certificates for {nk} kernels",
            p.certificates.len()
        )));
    }
    for (k, c) in p.kernels.iter().zip(&p.certificates) {
        if c.kernel != k.name {
            return Err(program(format!(
                "the certificate of kernel {} names kernel {}",
                k.name, c.kernel
            )));
        }
        for check in &c.checks {
            let crate::certificate::LaunchCheck::SliceInBounds { offset_buffer, .. } = check;
            if *offset_buffer >= nbuf {
                return Err(program(format!(
                    "kernel {}: a launch check names buffer {offset_buffer}, but the program has {nbuf} buffers",
                    k.name
                )));
            }
        }
        // A write at a run-time position is only safe with the check of that position.
        for w in &k.writes {
            let Region::Slice {
                start: SliceStart::Param(q),
                ..
            } = &w.region
            else {
                continue;
            };
            let (Some(at), Some(written)) = (k.params.get(*q), k.params.get(w.param)) else {
                continue; // verify_kernel refuses these
            };
            let checked = c.checks.iter().any(|check| {
                let crate::certificate::LaunchCheck::SliceInBounds { offset_buffer, .. } = check;
                *offset_buffer == at.buffer
            });
            if !checked {
                let name = p
                    .buffers
                    .get(written.buffer)
                    .map_or("?", |b| b.name.as_str());
                return Err(program(format!(
                    "kernel {} writes {name} at the run-time position in parameter {q}, but its \
                     certificate has no launch check of that position",
                    k.name
                )));
            }
        }
    }
    if p.schedule.deps.len() != nk {
        return Err(program(format!(
            "the schedule has {} dependency lists for {nk} kernels",
            p.schedule.deps.len()
        )));
    }
    for (k, deps) in p.schedule.deps.iter().enumerate() {
        if let Some(d) = deps.iter().find(|&&d| d >= k) {
            return Err(program(format!(
                "the schedule makes kernel {k} ({}) wait for kernel {d}, which is not earlier",
                p.kernels[k].name
            )));
        }
    }
    Ok(())
}
