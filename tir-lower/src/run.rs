//! What every backend checks before any kernel: a parameter's value against the signature when
//! it is set; at each run the inputs against the signature (binding the symbolic dims from their
//! shapes and the parameters'), each buffer's concrete shape, the memory plan's layout for those
//! dims, and the launch checks of the certificates.
//!
//! Each check fails with one line naming the tensor, buffer or kernel at fault.

use crate::legality::LaunchCheck;
use crate::plan::{buffer_bytes, ArenaLayout, ALIGN};
use crate::tile::TileOp;
use crate::{BackendError, Program, TensorRef};
use std::collections::BTreeMap;
use tir_graph::{DType, Dim, TensorType};

fn bad_input(reason: String) -> BackendError {
    BackendError::BadInput(reason)
}

/// `f32[2, 3]`.
pub use tir_graph::tensor::type_name;

/// The value of `d` under `dims`.
pub fn dim_value(d: &Dim, dims: &BTreeMap<String, u64>) -> Result<u64, String> {
    d.value(dims).map_err(|e| e.to_string())
}

/// Whether a tensor of `dtype` and `dims` fits `ty` (symbolic dims fit any size).
fn fits(ty: &TensorType, dtype: DType, dims: &[u64]) -> bool {
    dtype == ty.dtype && ty.shape.admits(dims)
}

/// Checks a value for parameter `name` (of `set_parameter`) against the signature.
pub fn check_parameter(
    program: &Program,
    name: &str,
    dtype: DType,
    dims: &[u64],
) -> Result<(), BackendError> {
    let sig = &program.signature;
    let Some((_, ty)) = sig.parameters.iter().find(|(n, _)| n == name) else {
        let kind = if sig.inputs.iter().any(|(n, _)| n == name) {
            "an input, passed to each run, not a parameter"
        } else if sig.states.iter().any(|(n, _)| n == name) {
            "a state, kept by the executable, not a parameter"
        } else {
            "not a parameter of the program"
        };
        return Err(bad_input(format!("{name:?} is {kind}")));
    };
    if !fits(ty, dtype, dims) {
        return Err(bad_input(format!(
            "parameter {name:?}: expected {ty}, got {}",
            type_name(dtype, dims)
        )));
    }
    Ok(())
}

/// Checks `inputs` against the signature (each input given once, of its type), checks that
/// every parameter is set (`parameters` holds the dims of those set), and binds the symbolic
/// dims from the inputs' shapes, then the parameters', then `held_states` (the shapes of
/// states bound by earlier runs, for dims nothing else binds).
pub fn bind_dims(
    program: &Program,
    inputs: &[(&str, TensorRef<'_>)],
    parameters: &BTreeMap<String, Vec<u64>>,
    held_states: &BTreeMap<String, Vec<u64>>,
) -> Result<BTreeMap<String, u64>, BackendError> {
    let sig = &program.signature;
    for (i, (name, _)) in inputs.iter().enumerate() {
        if inputs[..i].iter().any(|(n, _)| n == name) {
            return Err(bad_input(format!("input {name:?} is given twice")));
        }
        if sig.inputs.iter().any(|(n, _)| n == name) {
            continue;
        }
        return Err(bad_input(
            if sig.parameters.iter().any(|(n, _)| n == name) {
                format!(
                    "{name:?} is a parameter: set it once with set_parameter or load_weights, not \
                 at each run"
                )
            } else if sig.states.iter().any(|(n, _)| n == name) {
                format!(
                    "tensor {name:?} is a state of the program: states are kept by the \
                 executable, not supplied"
                )
            } else {
                format!("unknown input {name:?}: the program has no input of that name")
            },
        ));
    }
    let mut bound: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut bind = |ty: &TensorType, dims: &[u64], here: String| {
        for (d, &n) in ty.shape.dims().iter().zip(dims) {
            let Dim::Symbolic(s) = d else { continue };
            match bound.get(s) {
                Some((first, by)) if *first != n => {
                    return Err(bad_input(format!(
                        "symbolic dim `{s}` is {first} in {by} but {n} in {here}"
                    )))
                }
                Some(_) => {}
                None => {
                    bound.insert(s.clone(), (n, here.clone()));
                }
            }
        }
        Ok(())
    };
    for (name, ty) in &sig.inputs {
        let Some((_, t)) = inputs.iter().find(|(n, _)| n == name) else {
            return Err(bad_input(format!("missing input {name:?}: expected {ty}")));
        };
        if !fits(ty, t.dtype(), t.dims()) {
            return Err(bad_input(format!(
                "input {name:?}: expected {ty}, got {}",
                type_name(t.dtype(), t.dims())
            )));
        }
        bind(ty, t.dims(), format!("input {name:?}"))?;
    }
    for (name, ty) in &sig.parameters {
        let Some(dims) = parameters.get(name) else {
            return Err(bad_input(format!(
                "parameter {name:?} is not set: expected {ty} (set it with set_parameter, \
                 load_weights or tirc run --weights)"
            )));
        };
        bind(ty, dims, format!("parameter {name:?}"))?;
    }
    let mut dims: BTreeMap<String, u64> = bound.into_iter().map(|(k, (v, _))| (k, v)).collect();
    // A symbol that appears only in an affine dim (`seq + 1`) is solved from that dim's size.
    let given = inputs
        .iter()
        .filter_map(|(n, t)| Some((sig.inputs.iter().find(|(m, _)| m == n)?, t.dims())));
    let params = sig
        .parameters
        .iter()
        .filter_map(|p| Some((p, parameters.get(&p.0)?.as_slice())));
    for ((_, ty), sizes) in given.chain(params) {
        for (d, &n) in ty.shape.dims().iter().zip(sizes) {
            if let Some((s, v)) = d.to_expr().solve(n, &dims) {
                dims.insert(s, v);
            }
        }
    }
    for (name, ty) in &sig.states {
        if let Some(held) = held_states.get(name) {
            for (d, &n) in ty.shape.dims().iter().zip(held) {
                if let Dim::Symbolic(s) = d {
                    dims.entry(s.clone()).or_insert(n);
                }
            }
        }
    }
    check_bound_dims(program, inputs, &dims)?;
    Ok(dims)
}

/// Each expression dim of an input has the size the other dims give it, and the bounds of the
/// signature hold.
fn check_bound_dims(
    program: &Program,
    inputs: &[(&str, TensorRef<'_>)],
    dims: &BTreeMap<String, u64>,
) -> Result<(), BackendError> {
    let sig = &program.signature;
    for (name, ty) in &sig.inputs {
        let Some((_, t)) = inputs.iter().find(|(n, _)| n == name) else {
            continue;
        };
        for (d, &n) in ty.shape.dims().iter().zip(t.dims()) {
            if let Dim::Expr(e) = d {
                match d.value(dims) {
                    Ok(v) if v == n => {}
                    Ok(v) => {
                        return Err(bad_input(format!(
                            "input {name:?}: dim `{e}` is {v} by the other dims, but the tensor has {n}"
                        )))
                    }
                    Err(err) => return Err(bad_input(format!("input {name:?}: dim `{e}`: {err}"))),
                }
            }
        }
    }
    for b in &sig.bounds {
        b.check(dims).map_err(bad_input)?;
    }
    Ok(())
}

/// Every dim a kernel reads is bound by `dims` (a `dim_value` may name a dim that no tensor
/// has). A walk over every kernel: for a backend to run when a binding changes, not per run.
pub fn check_kernel_dims(
    program: &Program,
    dims: &BTreeMap<String, u64>,
) -> Result<(), BackendError> {
    for kernel in &program.kernels {
        let mut unbound = None;
        kernel.walk(&mut |stmt| match &stmt.op {
            TileOp::Dim { name } if !dims.contains_key(name) => {
                unbound.get_or_insert_with(|| name.clone());
            }
            _ => {}
        });
        if let Some(name) = unbound {
            return Err(bad_input(format!(
                "symbolic dim `{name}` is not bound by any input or parameter (kernel {} reads it)",
                kernel.name
            )));
        }
    }
    Ok(())
}

/// The run-time check of the memory plan: its layout for `dims` places every arena buffer
/// aligned, inside the arena, and apart from every buffer live in an overlapping wave range.
/// Returns the layout.
pub fn checked_layout(
    program: &Program,
    dims: &BTreeMap<String, u64>,
    backend: &str,
) -> Result<ArenaLayout, BackendError> {
    let plan_error = |reason: String| BackendError::Unsupported {
        backend: backend.to_string(),
        reason: format!("invalid memory plan: {reason}"),
    };
    let buffers = &program.buffers;
    let layout = program
        .plan
        .layout(buffers, dims)
        .map_err(|e| plan_error(e.to_string()))?;
    let mut placed = Vec::with_capacity(program.plan.live.len());
    for r in &program.plan.live {
        let name = &buffers[r.buffer].name;
        let offset = *layout
            .offsets
            .get(&r.buffer)
            .ok_or_else(|| plan_error(format!("the layout has no offset for buffer {name}")))?;
        let bytes =
            buffer_bytes(&buffers[r.buffer], dims).map_err(|e| plan_error(e.to_string()))?;
        if offset % ALIGN != 0
            || offset
                .checked_add(bytes)
                .is_none_or(|end| end > layout.size)
        {
            return Err(plan_error(format!(
                "buffer {name} at byte {offset} ({bytes} bytes) is misaligned or past the \
                 arena's {} bytes",
                layout.size
            )));
        }
        placed.push((r, offset, offset + bytes));
    }
    for (i, &(a, a0, a1)) in placed.iter().enumerate() {
        for &(b, b0, b1) in &placed[..i] {
            let live_together = a.first <= b.last && b.first <= a.last;
            if live_together && a0 < b1 && b0 < a1 {
                return Err(plan_error(format!(
                    "buffers {} (waves {}..={}, bytes {a0}..{a1}) and {} (waves {}..={}, \
                     bytes {b0}..{b1}) are live together but share bytes",
                    buffers[a.buffer].name,
                    a.first,
                    a.last,
                    buffers[b.buffer].name,
                    b.first,
                    b.last
                )));
            }
        }
    }
    Ok(layout)
}
/// The concrete dims of every buffer of `program` under `dims`.
pub fn buffer_shapes(
    program: &Program,
    dims: &BTreeMap<String, u64>,
) -> Result<Vec<Vec<u64>>, BackendError> {
    program
        .buffers
        .iter()
        .map(|b| {
            let shape: Vec<u64> =
                b.ty.shape
                    .dims()
                    .iter()
                    .map(|d| dim_value(d, dims))
                    .collect::<Result<_, _>>()
                    .map_err(|e| {
                        bad_input(format!(
                            "buffer {} ({}): {e} by any input or parameter",
                            b.name, b.ty
                        ))
                    })?;
            if shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .is_none()
            {
                return Err(bad_input(format!(
                    "buffer {} is {}: its element count overflows",
                    b.name,
                    type_name(b.ty.dtype, &shape)
                )));
            }
            Ok(shape)
        })
        .collect()
}

/// Evaluates `check` before a launch; `first_element(buffer)` reads element 0 of a buffer (the
/// run-time position a slice starts at).
pub fn check_launch(
    program: &Program,
    check: &LaunchCheck,
    first_element: impl Fn(usize) -> Option<f64>,
    dims: &BTreeMap<String, u64>,
) -> Result<(), String> {
    match check {
        LaunchCheck::SliceInBounds {
            offset_buffer,
            len,
            size,
            what,
        } => {
            let name = &program.buffers[*offset_buffer].name;
            let offset = first_element(*offset_buffer)
                .ok_or_else(|| format!("launch check failed: {what}: {name} is empty"))?;
            let offset = offset as i128;
            let len = dim_value(len, dims)?;
            let size = dim_value(size, dims)?;
            if offset < 0 || offset + i128::from(len) > i128::from(size) {
                return Err(format!(
                    "launch check failed: {what}: position {offset} (from {name}) with length \
                     {len} does not fit in 0..{size}"
                ));
            }
            Ok(())
        }
    }
}
