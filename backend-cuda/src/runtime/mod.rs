//! The runtime: the CUDA driver through `cudarc` (loaded dynamically, so a machine without
//! CUDA builds and runs everything else), memory pools, and executables that run programs on a
//! GPU.

mod blas;
mod dnn;
mod driver;
mod exec;
mod future;
mod memory;
mod policy;
mod staging;
mod timing;
mod trace;

pub use driver::Gpu;
pub(crate) use exec::CudaExecutable as Loaded;
pub use exec::CudaExecutable;
pub use future::{block_on, RunFuture};
pub use policy::{AttentionPath, AttentionPolicy, ExecMode, MatmulPath, MatmulPolicy};
pub use timing::KernelTimes;
pub use trace::{KernelWork, RunTrace, Span, SpanKind};
