//! A program as text, for `tirc explain --tile`, tests and diffs: its buffers, its signature's
//! dims and outputs, each kernel as [`crate::tile::print`] lists it, the memory plan's live
//! ranges and the schedule's waves.

use super::{Program, Storage};
use crate::tile::print::{symbol, write_kernel};
use std::fmt::Write;

fn storage_name(storage: &Storage) -> String {
    match storage {
        Storage::Input(name) => format!("input {name:?}"),
        Storage::Parameter(name) => format!("parameter {name:?}"),
        Storage::State(name) => format!("state {name:?}"),
        Storage::Constant(data) => format!("constant ({} values)", data.len()),
        Storage::Output => "output".to_string(),
        Storage::Arena => "arena".to_string(),
    }
}

/// The program as text: its buffers, its signature's dims and outputs, each kernel, the memory
/// plan's live ranges and the schedule's waves. Ends in a newline.
pub fn print_program(p: &Program) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "program: {} buffers, {} kernels",
        p.buffers.len(),
        p.kernels.len()
    );
    let _ = writeln!(out, "buffers {{");
    for (i, b) in p.buffers.iter().enumerate() {
        let _ = writeln!(
            out,
            "  buffer {i} {:?}: {}, {}",
            b.name,
            b.ty,
            storage_name(&b.storage)
        );
    }
    let _ = writeln!(out, "}}");
    if !p.signature.dims.is_empty() {
        let dims: Vec<String> = p.signature.dims.iter().map(|d| symbol(d)).collect();
        let _ = writeln!(out, "dims: {}", dims.join(", "));
    }
    for (name, buffer) in &p.signature.outputs {
        let _ = writeln!(out, "output {name:?} = buffer {buffer}");
    }
    for k in &p.kernels {
        write_kernel(&mut out, k, "");
    }
    let _ = writeln!(out, "memory plan {{");
    for r in &p.plan.live {
        let name = p.buffers.get(r.buffer).map_or("?", |b| b.name.as_str());
        let _ = writeln!(
            out,
            "  buffer {} {name:?}: live in waves {}..={}",
            r.buffer, r.first, r.last
        );
    }
    // The peak is exact for static shapes; with symbolic dims it is computed at each run.
    match p.plan.layout(&p.buffers, &Default::default()) {
        Ok(layout) => {
            let _ = writeln!(out, "  arena peak: {} bytes", layout.size);
        }
        Err(_) => {
            let _ = writeln!(
                out,
                "  arena peak: depends on the dims, laid out at each run"
            );
        }
    }
    let _ = writeln!(out, "}}");
    let _ = writeln!(out, "schedule {{");
    for (w, kernels) in p.schedule.waves.iter().enumerate() {
        let names: Vec<String> = kernels
            .iter()
            .map(|&k| {
                let name = p.kernels.get(k).map_or("?", |k| k.name.as_str());
                match p.schedule.deps.get(k) {
                    Some(deps) if !deps.is_empty() => {
                        let deps: Vec<String> = deps.iter().map(usize::to_string).collect();
                        format!("{k} {name} (after {})", deps.join(", "))
                    }
                    _ => format!("{k} {name}"),
                }
            })
            .collect();
        let _ = writeln!(out, "  wave {w}: {}", names.join(", "));
    }
    let _ = writeln!(out, "}}");
    out
}
