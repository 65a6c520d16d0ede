//! The library half of `tirc`: what its commands do beyond printing, so tests can use it too.
//!
//! - [`npy`]: reading and writing `.npy` tensors.
//! - [`run`]: `tirc run`, compile a graph for a backend and run it once.

pub mod npy;
pub mod run;
