//! tir-lower: from a [`tir_opt::FusedGraph`] to a [`Program`] of tile IR kernels, with a legality
//! certificate per kernel, a memory plan and a schedule; and the [`Backend`] trait that runs it.

#![warn(missing_docs)]

pub mod backend;
pub mod buffer;
pub mod certificate;
pub mod legality;
pub mod mesh;
pub mod plan;
pub mod program;
pub mod run;
pub mod schedule;
pub mod target;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tile;

pub use backend::{
    Backend, BackendError, Capabilities, Device, DeviceStorage, DeviceTensor, Executable,
    HostTensors, MeshExecutable, Registry, TensorRef, WeightsBound,
};
pub use program::{Buffer, Program, Signature, Storage};
pub use target::{Target, TileShapes, MATVEC_M, QUANT_SMALL_M, SHORT_ATTENTION_KEYS};
pub mod lower;

/// Users' kernels as graph ops (see [`lower::custom`]).
pub use lower::custom;
pub use lower::{KernelOrigin, LowerError};

use tir_graph::Graph;
use tir_opt::{FusedGraph, Limits, OptOptions, OptReport};

/// A graph taken through the whole pipeline: optimized, lowered, proven legal, planned.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The lowered program.
    pub program: Program,
    /// One per kernel of `program`: the nodes of `fused`'s graph it computes.
    pub origins: Vec<KernelOrigin>,
    /// The optimizer's result: the graph as optimized and its kernels.
    pub fused: FusedGraph,
    /// What the optimizer did, for reports.
    pub report: OptReport,
}

/// Optimizes `graph` for `target` and lowers it into a verified, certified [`Program`].
pub fn compile_graph(
    graph: &Graph,
    target: &Target,
    limits: &Limits,
) -> Result<Compiled, LowerError> {
    let options = OptOptions {
        limits: limits.clone(),
        target: target.fusion.clone(),
    };
    let (fused, report) = tir_opt::optimize(graph, &options)?;
    let (program, origins) = lower::lower(&fused, target)?;
    Ok(Compiled {
        program,
        origins,
        fused,
        report,
    })
}
