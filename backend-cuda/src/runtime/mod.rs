//! The runtime: the CUDA driver through `cudarc` (loaded dynamically, so a machine without
//! CUDA builds and runs everything else), and executables that run programs on a GPU.

mod blas;
mod driver;
mod exec;

pub use driver::Gpu;
pub(crate) use exec::CudaExecutable as Loaded;
pub use exec::{
    block_on, CudaExecutable, ExecMode, KernelTimes, MatmulPath, MatmulPolicy, RunFuture,
};
