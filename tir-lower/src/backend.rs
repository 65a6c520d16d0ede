//! The backend plugin interface: a backend describes its target and capabilities, compiles a
//! [`Program`] into an [`Executable`], and an executable runs with named tensors. Backends are
//! found by name in a [`Registry`]; the CLI, the tests and the conformance runner use only this.

use crate::program::Program;
use crate::target::Target;
use std::collections::BTreeMap;
use tir_graph::eval::HostTensor;
use tir_graph::DType;

/// What a backend can run, so callers can skip what it lacks (with this as the reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Element types its kernels accept.
    pub dtypes: Vec<DType>,
    /// Whether kernels take symbolic dims at launch (else shapes must be static).
    pub symbolic_dims: bool,
    /// Whether state buffers persist across runs of one executable.
    pub persistent_state: bool,
}

/// Why a backend could not compile or run.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot run here (no driver, no device, no toolchain), and why.
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable { backend: String, reason: String },
    /// A run was given tensors that do not fit the program's signature.
    #[error("{0}")]
    BadInput(String),
    /// A kernel failed at run time (an index out of range, a failed launch-time check, ...).
    #[error("kernel {kernel}: {reason}")]
    Kernel { kernel: String, reason: String },
    /// The program asks for something this backend cannot do.
    #[error("backend `{backend}` cannot compile this program: {reason}")]
    Unsupported { backend: String, reason: String },
}

/// What one run returns.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutputs {
    pub outputs: BTreeMap<String, HostTensor>,
}

/// A compiled program. States persist across runs.
pub trait Executable {
    /// Runs with `sources`: every input and parameter by name (values exact in their dtypes).
    /// Symbolic dims are bound from the inputs' shapes.
    fn run(&mut self, sources: &BTreeMap<String, HostTensor>) -> Result<RunOutputs, BackendError>;

    /// The current value of every state.
    fn states(&self) -> BTreeMap<String, HostTensor>;
}

/// A backend: compile, capabilities, target.
pub trait Backend {
    fn name(&self) -> &'static str;
    /// What lowering should aim at: fusion limits and tile shapes.
    fn target(&self) -> Target;
    fn capabilities(&self) -> Capabilities;
    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError>;
}

/// The backends compiled into a binary, by name.
#[derive(Default)]
pub struct Registry {
    backends: Vec<Box<dyn Backend>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a backend; a later one with the same name replaces the earlier.
    pub fn register(&mut self, backend: Box<dyn Backend>) {
        self.backends.retain(|b| b.name() != backend.name());
        self.backends.push(backend);
    }

    pub fn get(&self, name: &str) -> Option<&dyn Backend> {
        self.backends
            .iter()
            .find(|b| b.name() == name)
            .map(|b| b.as_ref())
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.backends.iter().map(|b| b.name()).collect()
    }
}
