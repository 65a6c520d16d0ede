//! What every backend checks at each run, before any kernel: the sources against the
//! signature (binding the symbolic dims from their shapes), each buffer's concrete shape, the
//! memory plan's layout for those dims, and the launch checks of the certificates.
//!
//! Each check fails with one line naming the tensor, buffer or kernel at fault.

use crate::legality::LaunchCheck;
use crate::plan::{buffer_bytes, ArenaLayout, ALIGN};
use crate::{BackendError, Program};
use std::collections::BTreeMap;
use tir_graph::eval::HostTensor;
use tir_graph::{DType, Dim, TensorType};

fn bad_input(reason: String) -> BackendError {
    BackendError::BadInput(reason)
}

/// Whether `v` is stored unchanged by `dtype` (floats also hold NaN).
fn exact_in(dtype: DType, v: f64) -> bool {
    (v.is_nan() && dtype.is_float()) || dtype.round_value(v).to_bits() == v.to_bits()
}

/// `f32[2, 3]`.
pub fn type_name(dtype: DType, dims: &[u64]) -> String {
    let dims: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("{dtype}[{}]", dims.join(", "))
}

/// The value of `d` under `dims`.
pub fn dim_value(d: &Dim, dims: &BTreeMap<String, u64>) -> Result<u64, String> {
    match d {
        Dim::Static(n) => Ok(*n),
        Dim::Symbolic(s) => dims
            .get(s)
            .copied()
            .ok_or_else(|| format!("symbolic dim `{s}` is not bound")),
    }
}

/// Checks `sources` against the signature and binds the symbolic dims from their shapes
/// (then from `held_states`, the shapes of states bound by earlier runs, for dims no source
/// binds).
pub fn bind_dims(
    program: &Program,
    sources: &BTreeMap<String, HostTensor>,
    held_states: &BTreeMap<String, Vec<u64>>,
) -> Result<BTreeMap<String, u64>, BackendError> {
    let sig = &program.signature;
    let declared: Vec<(&str, &String, &TensorType)> = sig
        .inputs
        .iter()
        .map(|(n, t)| ("input", n, t))
        .chain(sig.parameters.iter().map(|(n, t)| ("parameter", n, t)))
        .collect();
    for name in sources.keys() {
        if declared.iter().any(|(_, n, _)| *n == name) {
            continue;
        }
        return Err(bad_input(if sig.states.iter().any(|(n, _)| n == name) {
            format!(
                "tensor {name:?} is a state of the program: states are kept by the \
                 executable, not supplied"
            )
        } else {
            format!("unknown tensor {name:?}: the program has no input or parameter of that name")
        }));
    }
    let mut bound: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for (kind, name, ty) in declared {
        let Some(t) = sources.get(name) else {
            return Err(bad_input(format!("missing {kind} {name:?}: expected {ty}")));
        };
        let got = type_name(t.dtype, &t.dims);
        let fits_type = t.dtype == ty.dtype
            && t.dims.len() == ty.rank()
            && ty
                .shape
                .dims()
                .iter()
                .zip(&t.dims)
                .all(|(d, &n)| d.as_static().is_none_or(|s| s == n));
        if !fits_type {
            return Err(bad_input(format!(
                "{kind} {name:?}: expected {ty}, got {got}"
            )));
        }
        let numel = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if numel != Some(t.data.len() as u64) {
            return Err(bad_input(format!(
                "{kind} {name:?}: {got} needs {} values, got {}",
                numel.map_or("too many".into(), |n| n.to_string()),
                t.data.len()
            )));
        }
        if let Some(i) = t.data.iter().position(|&v| !exact_in(t.dtype, v)) {
            return Err(bad_input(format!(
                "{kind} {name:?}: element {i} ({:?}) is not an exact {} value",
                t.data[i], t.dtype
            )));
        }
        for (d, &n) in ty.shape.dims().iter().zip(&t.dims) {
            let Dim::Symbolic(s) = d else { continue };
            let here = format!("{kind} {name:?}");
            match bound.get(s) {
                Some((first, by)) if *first != n => {
                    return Err(bad_input(format!(
                        "symbolic dim `{s}` is {first} in {by} but {n} in {here}"
                    )))
                }
                Some(_) => {}
                None => {
                    bound.insert(s.clone(), (n, here));
                }
            }
        }
    }
    let mut dims: BTreeMap<String, u64> = bound.into_iter().map(|(k, (v, _))| (k, v)).collect();
    for (name, ty) in &sig.states {
        if let Some(held) = held_states.get(name) {
            for (d, &n) in ty.shape.dims().iter().zip(held) {
                if let Dim::Symbolic(s) = d {
                    dims.entry(s.clone()).or_insert(n);
                }
            }
        }
    }
    Ok(dims)
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
