//! testsuite: tir's conformance suite. A corpus of graphs ([`corpus`]) runs on any backend of a
//! [`Registry`] ([`run_case`]) and every output and state is compared with the f64 oracle
//! (`tir_graph::eval`) under a tolerance per dtype and op class ([`tolerance`]); `tir-conform`
//! is the command-line runner. [`differential`] runs random graphs on two backends and compares
//! them (`tir-differential`: CUDA against the reference). testsuite/README.md explains the
//! tolerances and how to add a backend.

pub mod case;
pub mod compare;
mod corpus;
pub mod differential;
pub mod fuzz;
pub mod onnx_node;
pub mod report;
pub mod runner;
pub mod sessions;
pub mod tolerance;
pub mod values;

pub use case::{Case, Feature};
pub use corpus::corpus;
pub use runner::{compile_case, matches_filter, run_case, CaseResult, Io, Outcome, Stage, Summary};
pub use tolerance::{OpClass, Tolerance};

use tir_lower::Registry;

/// Every backend compiled into this build, by name. Adding a backend is one `register` line.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    // The reference in checking mode: besides values, every kernel's writes are checked against
    // its legality certificate (each element written exactly once, nothing outside).
    registry.register(Box::new(backend_ref::RefBackend::checking()));
    // The GPU, driver and toolchain are looked for on first use: listing it costs nothing.
    // Poisoning: arena and outputs start as NaN bytes, so unwritten elements fail.
    registry.register(Box::new(backend_cuda::CudaBackend::new().poisoning()));
    registry
}

/// The README's Rust examples, compiled and run as doctests so the README stays true (here,
/// where every crate they use is a dependency).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
