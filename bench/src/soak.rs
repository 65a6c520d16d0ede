//! `tir-bench soak`: the decode step with its KV-cache states run many times on the GPU (issue
//! #19), checking three things:
//! - no error in any step;
//! - device memory flat: the memory in use after a warm-up of [`WARMUP`] steps is the memory
//!   in use at every checkpoint after (every [`CHECKPOINT`] steps) and at the end;
//! - a replay's outputs are a fresh executable's: after the soak, a new executable runs the
//!   last `context` steps (which rewrite every cache position, so both executables then hold
//!   the same states), then both run one more step; its output and both states must be
//!   identical, byte for byte.
//!
//! Step `i` writes cache position `i % context` (every step has the same token `x`). Prints one
//! JSON object; exits 1 when a check fails.

use crate::{executable, tensors, Tensors};
use backend_cuda::CudaExecutable;
use std::time::Instant;
use tir_lower::{Executable, HostTensors};

/// Steps before the memory in use is taken as the baseline.
const WARMUP: usize = 1000;
/// Steps between two readings of the memory in use.
const CHECKPOINT: usize = 10_000;
/// The workload soaked.
const WORKLOAD: &str = "decoder_step_h4096_ctx2048";

/// Sets the `pos` input (an i64 scalar) to `pos`.
fn set_position(t: &mut Tensors, pos: u64) -> Result<(), String> {
    let (_, tensor) = t
        .inputs
        .iter_mut()
        .find(|(n, _)| n == "pos")
        .ok_or_else(|| format!("{WORKLOAD} has no input `pos`"))?;
    let bytes = tensor.bytes_mut().map_err(|e| e.to_string())?;
    bytes.copy_from_slice(&(pos as i64).to_le_bytes());
    Ok(())
}

/// Runs steps `range` of the soak on `exe` (step `i` at position `i % context`).
fn steps(
    exe: &mut CudaExecutable,
    t: &mut Tensors,
    range: std::ops::Range<usize>,
    context: u64,
) -> Result<HostTensors, String> {
    let mut last = HostTensors::new();
    for i in range {
        set_position(t, i as u64 % context)?;
        last = exe.run(&t.inputs()).map_err(|e| format!("step {i}: {e}"))?;
    }
    Ok(last)
}

/// Device memory in use, in bytes.
fn used(exe: &CudaExecutable) -> Result<u64, String> {
    let (free, total) = exe.gpu().memory()?;
    Ok((total - free) as u64)
}

/// Whether two sets of tensors are identical, byte for byte.
fn identical(a: &HostTensors, b: &HostTensors) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((na, ta), (nb, tb))| {
            na == nb && ta.dims() == tb.dims() && ta.bytes() == tb.bytes()
        })
}

/// Soaks the decode step for `total` steps (see the module doc).
pub fn soak(total: usize) -> Result<(), String> {
    let w = crate::matching(Some(WORKLOAD))?
        .into_iter()
        .next()
        .ok_or_else(|| format!("no workload {WORKLOAD}"))?;
    // The cache positions: axis 2 of the `k_cache` state `[1, heads, context, head_dim]`.
    let context = w
        .graph
        .states()
        .into_iter()
        .find(|(name, _)| name == "k_cache")
        .and_then(|(_, id)| w.graph.ty(id).shape.dims().get(2)?.as_static())
        .filter(|&c| c > 0)
        .ok_or_else(|| format!("{WORKLOAD} has no state `k_cache` of a static context"))?;
    let total = total.max(WARMUP + context as usize);
    let mut exe = executable(&w)?;
    let mut t = tensors(&w, &exe)?;
    t.set_parameters(&mut exe)?;

    let started = Instant::now();
    steps(&mut exe, &mut t, 0..WARMUP, context)?;
    let baseline = used(&exe)?;
    let mut in_use = Vec::new();
    let mut done = WARMUP;
    while done < total {
        let next = (done + CHECKPOINT).min(total);
        steps(&mut exe, &mut t, done..next, context)?;
        in_use.push(used(&exe)?);
        done = next;
    }
    let soak_s = started.elapsed().as_secs_f64();

    let mut fresh = executable(&w)?;
    t.set_parameters(&mut fresh)?;
    let tail = total - context as usize..total;
    steps(&mut fresh, &mut t, tail, context)?;
    let soaked_out = steps(&mut exe, &mut t, total..total + 1, context)?;
    let fresh_out = steps(&mut fresh, &mut t, total..total + 1, context)?;
    let same_outputs = identical(&soaked_out, &fresh_out);
    let same_states = identical(
        &exe.states().map_err(|e| e.to_string())?,
        &fresh.states().map_err(|e| e.to_string())?,
    );
    let flat = in_use.iter().all(|&u| u == baseline);
    let report = serde_json::json!({
        "workload": WORKLOAD,
        "device": exe.gpu().name,
        "steps": total + 1,
        "seconds": soak_s,
        "ms_per_step": soak_s * 1e3 / total as f64,
        "used_after_warmup_bytes": baseline,
        "used_at_checkpoints_bytes": in_use,
        "memory_flat": flat,
        "replay_outputs_identical_to_fresh": same_outputs,
        "replay_states_identical_to_fresh": same_states,
    });
    println!("{report}");
    if flat && same_outputs && same_states {
        Ok(())
    } else {
        Err(format!(
            "soak of {WORKLOAD} failed a check (see the report above)"
        ))
    }
}
