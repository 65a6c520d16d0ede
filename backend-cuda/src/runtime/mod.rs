//! The runtime: the CUDA driver through `cudarc` (loaded dynamically, so a machine without
//! CUDA builds and runs everything else), memory pools, and executables that run programs on a
//! GPU.

mod blas;
mod block;
mod dnn;
mod driver;
mod exec;
mod future;
mod gpu;
mod memory;
mod mesh;
mod nccl;
mod policy;
mod pool;
mod profile;
mod staging;
mod timing;
mod trace;
mod traced;

pub use driver::device_count;
pub use gpu::Gpu;
pub use mesh::CudaMeshExecutable;
pub(crate) use nccl::{present as nccl_present, Comms};

/// Whether NCCL has a call for collective `op` of `dtype` elements, or why not.
pub(crate) fn collective_of(op: &tir_graph::Op, dtype: tir_graph::DType) -> Result<(), String> {
    nccl::Collective::of(op, dtype).map(|_| ())
}
pub use block::block_on;
pub(crate) use exec::CudaExecutable as Loaded;
pub use exec::CudaExecutable;
pub use future::RunFuture;
pub use policy::{
    AttentionPath, AttentionPolicy, ConvPath, ConvPolicy, ExecMode, MatmulPath, MatmulPolicy,
};
pub use profile::KernelTimes;

/// The libraries' line of `tirc doctor`: which of cuBLASLt (plain matmuls) and cuDNN (fused
/// attention, convolutions) this process can load; without one, its kernels run as generated.
pub fn libraries() -> String {
    let blas = match blas::present() {
        Ok(()) => "cuBLASLt found".to_string(),
        Err(e) => format!("{e} (plain matmuls run as generated kernels)"),
    };
    let dnn = match dnn::version() {
        Ok(v) => format!("cuDNN {}.{}.{} found", v / 10000, v / 100 % 100, v % 100),
        Err(e) => format!("{e} (attention and convolutions run as generated kernels)"),
    };
    format!("libraries: {blas}; {dnn}")
}
pub use trace::{KernelWork, RunTrace, Span, SpanKind};
