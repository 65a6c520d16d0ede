//! The bodies of the fuzz targets in `fuzz/` (cargo-fuzz, nightly), here so that a stable
//! `cargo test` replays every seed and regression input through the very same code
//! (`tests/fuzz_replay.rs`): a `fuzz/fuzz_targets/NAME.rs` is one line that calls the function
//! `NAME` here.
//!
//! Each target hands its bytes to one reader a user can give bad bytes to. A refusal (an `Err`)
//! is fine; a panic, an endless loop or an unbounded allocation is a bug. Where a reader accepts
//! the bytes, the target also checks what the reader promises (a decoded graph verifies, a
//! re-encoded value decodes to the same bytes), panicking when it does not. Each returns whether
//! the reader accepted the bytes as given (the replay checks that every seed is accepted).
//!
//! Readers behind a checksum ([`tir_file`], [`tirpkg`], [`cache_entry`]) are also fed the same
//! bytes with the header's length and checksum recomputed, so that mutations reach the body's
//! decoder instead of stopping at the checksum.

use backend_cuda::{cache, package};
use backend_ref::RefBackend;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use tir_graph::{file, text, weights::WeightsFile, Graph};
use tir_lower::testing::RunF64;
use tir_lower::{Backend, BackendError};

pub mod seeds;

/// A target's body: whether the reader accepted the bytes as given.
pub type Target = fn(&[u8]) -> bool;

/// Every target by name, in the order `scripts/fuzz.sh` runs them.
pub const TARGETS: &[(&str, Target)] = &[
    ("tir_file", tir_file),
    ("text", text),
    ("npy", npy),
    ("tirpkg", tirpkg),
    ("cache_entry", cache_entry),
    ("safetensors", safetensors),
    ("onnx_import", onnx_import),
    ("pipeline", pipeline),
];

/// `bytes` with the 28-byte header of a `.tir` file or a package (magic, version `u32`, body
/// length `u64`, checksum `u64`) made to fit the body: length and FNV-1a checksum recomputed.
/// `None` when `bytes` are shorter than the header.
fn with_fixed_header(bytes: &[u8]) -> Option<Vec<u8>> {
    const HEADER_LEN: usize = 28;
    let body = bytes.get(HEADER_LEN..)?;
    let mut fixed = bytes.to_vec();
    fixed[12..20].copy_from_slice(&(body.len() as u64).to_le_bytes());
    fixed[20..28].copy_from_slice(&file::checksum(body).to_le_bytes());
    Some(fixed)
}

/// `.tir` bytes → [`file::decode`]: a graph it returns verifies and encodes to bytes that
/// decode to the same graph.
pub fn tir_file(data: &[u8]) -> bool {
    let fixed = with_fixed_header(data);
    let accepted = decode_tir(data);
    if let Some(fixed) = fixed {
        decode_tir(&fixed);
    }
    accepted
}

fn decode_tir(bytes: &[u8]) -> bool {
    let Ok(graph) = file::decode(bytes) else {
        return false;
    };
    check_graph(&graph);
    let encoded = file::encode(&graph);
    match file::decode(&encoded) {
        Ok(again) => assert!(again == graph, "a re-encoded graph decodes differently"),
        Err(e) => panic!("a re-encoded graph does not decode: {e}"),
    }
    true
}

/// A graph a reader returned must pass the verifier.
fn check_graph(graph: &Graph) {
    if let Err(e) = graph.verify() {
        panic!("a graph that was read does not verify: {e}");
    }
}

/// Text → [`text::parse`]: a graph it returns verifies, and its printed form parses back to
/// the same graph.
pub fn text(data: &[u8]) -> bool {
    let Ok(Ok(graph)) = std::str::from_utf8(data).map(text::parse) else {
        return false;
    };
    check_graph(&graph);
    let printed = text::print(&graph);
    match text::parse(&printed) {
        Ok(again) => assert!(again == graph, "the printed graph parses differently"),
        Err(e) => panic!("the printed graph does not parse: {e}\n{printed}"),
    }
    true
}

/// `.npy` bytes → [`tirc::npy::decode`]: a tensor it returns encodes to a file that decodes to
/// the same tensor.
pub fn npy(data: &[u8]) -> bool {
    let Ok(t) = tirc::npy::decode(data) else {
        return false;
    };
    let encoded = match tirc::npy::encode(&t) {
        Ok(e) => e,
        Err(e) => panic!("a decoded {} does not encode: {e}", t.type_name()),
    };
    match tirc::npy::decode(&encoded) {
        Ok(again) => assert!(
            again.dtype() == t.dtype() && again.dims() == t.dims() && again.bytes() == t.bytes(),
            "a re-encoded {} decodes as {}",
            t.type_name(),
            again.type_name()
        ),
        Err(e) => panic!("a re-encoded {} does not decode: {e}", t.type_name()),
    }
    true
}

/// `.tirpkg` bytes → [`package::from_bytes`]: a package it returns is consistent and encodes
/// to bytes that decode to a package encoding to the same bytes.
pub fn tirpkg(data: &[u8]) -> bool {
    let accepted = decode_package(data);
    if let Some(fixed) = with_fixed_header(data) {
        decode_package(&fixed);
    }
    accepted
}

fn decode_package(bytes: &[u8]) -> bool {
    let path = Path::new("fuzz.tirpkg");
    let Ok(pkg) = package::from_bytes(bytes, path) else {
        return false;
    };
    if let Err(e) = pkg.validate() {
        panic!("a package that was read is inconsistent: {e}");
    }
    let encoded = match package::to_bytes(&pkg) {
        Ok(e) => e,
        Err(e) => panic!("a package that was read does not encode: {e}"),
    };
    match package::from_bytes(&encoded, path) {
        Ok(again) => assert!(
            package::to_bytes(&again).as_ref() == Ok(&encoded),
            "a re-encoded package decodes differently"
        ),
        Err(e) => panic!("a re-encoded package does not decode: {e}"),
    }
    true
}

/// Kernel-cache entry bytes → [`cache::decode_entry`], under the key the entry names (bytes
/// 8..16) and with its length and checksum recomputed: a payload it returns re-encodes to the
/// same bytes.
pub fn cache_entry(data: &[u8]) -> bool {
    let key = data
        .get(8..16)
        .map_or(0, |k| u64::from_le_bytes(k.try_into().expect("8 bytes")));
    let _ = cache::decode_entry(key.wrapping_add(1), data);
    let mut fixed = data.to_vec();
    if let Some(payload) = data.get(32..) {
        let whole = cache::encode_entry(key, payload);
        fixed[16..32].copy_from_slice(&whole[16..32]);
    }
    let mut accepted = false;
    for (i, bytes) in [data, &fixed].into_iter().enumerate() {
        if let Ok(payload) = cache::decode_entry(key, bytes) {
            assert!(
                cache::encode_entry(key, payload) == bytes,
                "an accepted entry is not what encode_entry writes for its payload"
            );
            accepted |= i == 0;
        }
    }
    accepted
}

/// `.safetensors` bytes → [`WeightsFile::from_bytes`]: every tensor of a file it accepts can
/// be read.
pub fn safetensors(data: &[u8]) -> bool {
    let Ok(weights) = WeightsFile::from_bytes("fuzz.safetensors", data.to_vec()) else {
        return false;
    };
    let bytes: usize = weights.iter().map(|(_, t)| t.bytes().len()).sum();
    assert!(
        bytes <= weights.size(),
        "the tensors hold more than the file"
    );
    true
}

/// ONNX bytes → [`tir_onnx::Model::decode`] → [`tir_onnx::import`]: an imported graph verifies.
/// Accepted: the model decodes (an ONNX test model may use an op tir refuses).
pub fn onnx_import(data: &[u8]) -> bool {
    let Ok(model) = tir_onnx::Model::decode(data, None) else {
        return false;
    };
    if let Ok(imported) = tir_onnx::import(&model, &tir_onnx::ImportOptions::default()) {
        if let Err(e) = imported.graph.verify() {
            panic!("an imported graph does not verify: {e}");
        }
    }
    true
}

/// The most elements of all values of a graph that [`pipeline`] runs on the reference backend
/// (the interpreter's cost is per element).
const MAX_RUN_ELEMENTS: u64 = 1 << 16;
/// What every symbolic dim is bound to when [`pipeline`] runs a graph.
const RUN_DIM: u64 = 3;

/// A graph (`.tir` bytes, told by the magic, with the header fixed as for [`tir_file`], or the
/// text form) → verify → optimize → lower for the reference backend → compile, and for a small
/// graph a run on the reference backend in checking mode with random inputs. A graph that was
/// read must verify; every later stage may refuse it with an error but must not panic, and a
/// run must not report a compiler bug (`COMPILER_BUGS`). Accepted: the graph was read.
pub fn pipeline(data: &[u8]) -> bool {
    let graph = if file::has_magic(data) {
        match with_fixed_header(data).map(|bytes| file::decode(&bytes)) {
            Some(Ok(g)) => g,
            _ => return false,
        }
    } else {
        match std::str::from_utf8(data).map(text::parse) {
            Ok(Ok(g)) => g,
            _ => return false,
        }
    };
    compile_and_run(&graph);
    true
}

fn compile_and_run(graph: &Graph) {
    check_graph(graph);
    let backend = RefBackend::checking();
    let limits = tir_opt::Limits {
        max_nodes: 20_000,
        max_iterations: 8,
        max_time: Duration::from_secs(2),
    };
    let Ok(compiled) = tir_lower::compile_graph(graph, &backend.target(), &limits) else {
        return;
    };
    let Ok(mut exe) = backend.compile_ref(&compiled.program) else {
        return;
    };
    let dims: BTreeMap<String, u64> = graph
        .node_ids()
        .flat_map(|id| graph.ty(id).shape.dims().to_vec())
        .flat_map(|d| d.symbols())
        .map(|s| (s, RUN_DIM))
        .collect();
    let elements = graph.node_ids().try_fold(0u64, |sum, id| {
        let ty = graph.ty(id);
        let dims = tir_graph::eval::concrete_dims(&ty.shape, &dims).ok()?;
        let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        sum.checked_add(n)
    });
    if elements.is_none_or(|n| n > MAX_RUN_ELEMENTS) {
        return;
    }
    let sources = crate::values::sources(
        graph,
        &dims,
        &|_| crate::values::Values::Default,
        1,
        "fuzz",
        0,
    );
    if let Err(BackendError::Kernel { kernel, reason }) = exe.run_f64(&sources) {
        // An unsafe user's kernel given inputs that break its author's contract (random block
        // tables) fails as checking mode should, not as a compiler bug.
        let unproven = compiled
            .program
            .certificates
            .iter()
            .any(|c| c.kernel == kernel && c.is_unproven());
        if !unproven && COMPILER_BUGS.iter().any(|bug| reason.contains(bug)) {
            panic!("kernel {kernel}: {reason}");
        }
    }
}

/// What the reference backend's messages say when a kernel broke the rules lowering promised
/// (an index outside its buffer, or in checking mode, a write its certificate does not allow),
/// rather than refusing what a run was given.
const COMPILER_BUGS: &[&str] = &[
    "a lowering bug",
    "which the kernel does not declare it writes",
    "outside the kernel's write region",
    "both write",
    "is never written",
    "a race",
];
