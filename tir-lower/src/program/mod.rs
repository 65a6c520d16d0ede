//! `Program`: what lowering produces and what a backend compiles: tile kernels, the buffers they
//! use, a memory plan, a schedule, the run-time signature and a legality certificate per kernel.
//! It is plain serializable data (an AOT package stores it). [`verify_program`] checks one, and
//! [`print_program`] lists it.

mod print;
mod verify;

pub use crate::buffer::{Buffer, Storage};
use crate::certificate::Certificate;
use crate::plan::MemoryPlan;
use crate::schedule::Schedule;
use crate::tile::TileKernel;
pub use print::print_program;
use serde::{Deserialize, Serialize};
use tir_graph::TensorType;
pub use verify::verify_program;

/// The names and types a run binds and returns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// Each input's name and type, in graph order.
    pub inputs: Vec<(String, TensorType)>,
    /// Each parameter's name and type, in graph order.
    pub parameters: Vec<(String, TensorType)>,
    /// Each state's name and type, in graph order.
    pub states: Vec<(String, TensorType)>,
    /// Each output's name and the buffer holding it after a run.
    pub outputs: Vec<(String, usize)>,
    /// The symbolic dims, bound from the shapes of the inputs at each run.
    pub dims: Vec<String>,
    /// What the graph's ops need of the dims beyond their shape rules, checked at each run
    /// once the dims are bound ([`tir_graph::Graph::dim_bounds`]).
    pub bounds: Vec<tir_graph::DimBound>,
}

/// A lowered graph, ready for a backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// Every tensor the kernels touch; kernels name them by index.
    pub buffers: Vec<Buffer>,
    /// Kernels in a valid execution order (the schedule's order).
    pub kernels: Vec<TileKernel>,
    /// One per kernel: why it writes only what it owns.
    pub certificates: Vec<Certificate>,
    /// When each arena buffer is live; [`MemoryPlan::layout`] places them for a binding.
    pub plan: MemoryPlan,
    /// The kernels' dependencies and waves.
    pub schedule: Schedule,
    /// What a run binds and returns.
    pub signature: Signature,
}

/// One step of a mesh's run ([`Program::mesh_steps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MeshStep {
    /// Kernels each device runs on its own, in this order (none a collective).
    Kernels(Vec<usize>),
    /// A collective kernel, run across the devices together.
    Collective(usize),
}

impl Program {
    /// The kernels in the schedule's order cut at the collectives: what each device of a mesh
    /// runs on its own between two collectives, then the collective across the devices. Every
    /// kernel is in exactly one step; no `Kernels` step is empty.
    pub fn mesh_steps(&self) -> Vec<MeshStep> {
        let mut steps = Vec::new();
        let mut segment = Vec::new();
        for &k in self.schedule.waves.iter().flatten() {
            if self.kernels[k].collective().is_none() {
                segment.push(k);
                continue;
            }
            if !segment.is_empty() {
                steps.push(MeshStep::Kernels(std::mem::take(&mut segment)));
            }
            steps.push(MeshStep::Collective(k));
        }
        if !segment.is_empty() {
            steps.push(MeshStep::Kernels(segment));
        }
        steps
    }

    /// The buffer holding the state named `name`.
    pub fn state_buffer(&self, name: &str) -> Option<usize> {
        self.buffers
            .iter()
            .position(|b| b.storage == Storage::State(name.to_string()))
    }
}
