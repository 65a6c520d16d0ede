//! backend-ref: tir's CPU reference backend, the ground truth every other backend is checked
//! against.
//!
//! [`RefBackend`] compiles a [`Program`] into a [`RefExecutable`] that interprets the tile IR:
//! for each kernel in program order it evaluates the certificate's launch checks, computes the
//! grid, runs every tile program in parallel (rayon), and applies the programs' stores. Values
//! are held exact in their dtype, floats as `f64` and integers as `i64` (module `word`): every
//! tile operation rounds its result to the result dtype (the reference computes "in the tensor's dtype"), with `f32` accumulation in reductions
//! and `mma` (module `tile`). Within a kernel, programs read the buffers as they were when the
//! kernel started, except that a program's load of a mutable parameter sees its own earlier
//! stores; the stores of all programs are applied after the last program (module `interp`).
//!
//! Each run checks what only a run knows: the sources against the signature
//! ([`BackendError::BadInput`]), the memory plan's layout for the bound dims, launch checks and
//! every buffer index ([`BackendError::Kernel`]). [`RefBackend::checking`] adds the ownership
//! checks of the legality model: every element of a kernel's declared write region is written by
//! exactly one program, nothing outside it is written, and no program reads what another writes.
//!
//! Buffers are kept one `Vec` per buffer rather than in one byte arena; the memory plan is still
//! laid out and checked on every run (buffers live in overlapping waves must not share bytes,
//! and every arena buffer a kernel touches must be live in its wave). Arena and output buffers
//! start as poison (NaN for floats), so an element no kernel writes never passes a comparison.

#![warn(missing_docs)]

mod exec;
mod interp;
mod mesh;
mod prepare;
mod stmt_text;
mod tile;
mod word;

pub use exec::RefExecutable;
pub use mesh::RefMeshExecutable;

use tir_graph::DType;
use tir_lower::{
    Backend, BackendError, Capabilities, Executable, MeshExecutable, Program, Target, TileShapes,
};

/// The CPU reference backend (`"ref"`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RefBackend {
    checking: bool,
}

impl RefBackend {
    /// The reference backend without ownership bookkeeping (bounds are always checked).
    pub fn new() -> RefBackend {
        RefBackend { checking: false }
    }

    /// The reference backend that also checks, for every kernel, that each element of its write
    /// regions is written by exactly one program, that nothing else is written, and that no
    /// program reads an element of a mutable parameter that another program writes.
    pub fn checking() -> RefBackend {
        RefBackend { checking: true }
    }

    /// Whether this backend makes the ownership checks of [`RefBackend::checking`].
    pub fn is_checking(&self) -> bool {
        self.checking
    }

    /// The tile shapes the reference asks lowering for: smaller than a GPU's, since the
    /// interpreter's cost is per element, padding included.
    pub fn tile_shapes() -> TileShapes {
        TileShapes {
            elementwise: 256,
            matmul_m: 32,
            matmul_n: 32,
            matmul_k: 32,
            attention_m: 16,
            attention_n: 16,
            reduction_out: 16,
            reduction_chunk: 64,
            ..TileShapes::default()
        }
    }

    /// [`Backend::compile`] with the concrete executable type. A program with collectives
    /// needs a mesh ([`RefBackend::compile_mesh_ref`]).
    pub fn compile_ref(&self, program: &Program) -> Result<RefExecutable, BackendError> {
        if let Some(k) = program.kernels.iter().find(|k| k.collective().is_some()) {
            return Err(BackendError::Unsupported {
                backend: "ref".into(),
                reason: format!(
                    "kernel {} is a collective: compile the program for a mesh of devices",
                    k.name
                ),
            });
        }
        let plans = prepare::prepare(program)?;
        Ok(RefExecutable::new(program, plans, self.checking))
    }

    /// [`Backend::compile_mesh`] with the concrete executable type: `world` reference devices
    /// in this process (module `mesh`).
    pub fn compile_mesh_ref(
        &self,
        program: &Program,
        world: u32,
    ) -> Result<RefMeshExecutable, BackendError> {
        if world == 0 {
            return Err(BackendError::BadInput(
                "a mesh needs at least one device".into(),
            ));
        }
        mesh::check_world(program, world)?;
        let plans = prepare::prepare(program)?;
        let devices = (0..world)
            .map(|_| RefExecutable::new(program, plans.clone(), self.checking))
            .collect();
        Ok(RefMeshExecutable::new(devices))
    }
}

impl Backend for RefBackend {
    fn name(&self) -> &'static str {
        "ref"
    }

    fn target(&self) -> Target {
        Target {
            tiles: RefBackend::tile_shapes(),
            ..Target::default()
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            dtypes: DType::ALL.to_vec(),
            symbolic_dims: true,
            persistent_state: true,
            // Simulated in one process: any number.
            devices: u32::MAX,
            reduce_dtypes: DType::ALL.to_vec(),
        }
    }

    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError> {
        Ok(Box::new(self.compile_ref(program)?))
    }

    fn compile_mesh(
        &self,
        program: &Program,
        world: u32,
    ) -> Result<Box<dyn MeshExecutable>, BackendError> {
        Ok(Box::new(self.compile_mesh_ref(program, world)?))
    }
}
