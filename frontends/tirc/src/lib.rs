//! The library half of `tirc`: what its commands do beyond printing, so tests can use it too.
//!
//! - [`npy`]: reading and writing `.npy` tensors.
//! - [`run`]: `tirc run`, compile a graph for a backend (or load a package) and run it once.
//! - [`compile`]: `tirc compile`, compile a graph for GPU architectures into an AOT package.

pub mod compile;
pub mod npy;
pub mod run;
