//! The backend plugin interface: a backend describes its target and capabilities, compiles a
//! [`Program`] into an [`Executable`], and an executable runs with named tensors. Backends are
//! found by name in a [`Registry`]; the CLI, the tests and the conformance runner use only this.
//!
//! Tensors cross the interface in their own dtypes: [`HostTensor`]s in host memory, and
//! [`DeviceTensor`]s in a backend's memory (device memory on a GPU), which a run can take as
//! inputs and leave its outputs in, so that one run feeds the next without a host round trip.
//! Parameters are set once ([`Executable::set_parameter`], [`Executable::load_weights`]) and
//! stay resident; a run takes the inputs only.

use crate::program::{Program, Signature};
use crate::target::Target;
use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use tir_graph::weights::WeightsFile;
use tir_graph::{DType, HostTensor};

/// What a backend can run, so callers can skip what it lacks (with this as the reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Element types its kernels accept.
    pub dtypes: Vec<DType>,
    /// Whether kernels take symbolic dims at launch (else shapes must be static).
    pub symbolic_dims: bool,
    /// Whether state buffers persist across runs of one executable.
    pub persistent_state: bool,
    /// The most devices a mesh may have ([`Backend::compile_mesh`]); 1 for a backend without
    /// meshes.
    pub devices: u32,
    /// Element types its reducing collectives (all-reduce, reduce-scatter) take on a mesh;
    /// gathers move every type of `dtypes`. Empty for a backend without meshes.
    pub reduce_dtypes: Vec<DType>,
}

/// Why a backend could not compile or run.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot run here (no driver, no device, no toolchain), and why.
    #[error("backend `{backend}` is unavailable: {reason}")]
    Unavailable {
        /// The backend's name.
        backend: String,
        /// Why it is unavailable.
        reason: String,
    },
    /// A run was given tensors that do not fit the program's signature.
    #[error("{0}")]
    BadInput(String),
    /// A kernel failed at run time (an index out of range, a failed launch-time check, ...).
    #[error("kernel {kernel}: {reason}")]
    Kernel {
        /// The kernel's name.
        kernel: String,
        /// What failed.
        reason: String,
    },
    /// The program asks for something this backend cannot do.
    #[error("backend `{backend}` cannot compile this program: {reason}")]
    Unsupported {
        /// The backend's name.
        backend: String,
        /// What it cannot do.
        reason: String,
    },
    /// The device failed outside a kernel (an allocation, a copy, a driver call).
    #[error("device {device}: {reason}")]
    Device {
        /// The device.
        device: Device,
        /// What failed.
        reason: String,
    },
}

/// One device of a backend: where a [`DeviceTensor`] lives and an executable runs. The
/// reference backend's device is host memory it owns (`ref:0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// The backend's name (`"ref"`, `"cuda"`).
    pub backend: &'static str,
    /// The device's number among the backend's devices (a CUDA device ordinal).
    pub ordinal: u32,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend, self.ordinal)
    }
}

/// A backend's memory behind a [`DeviceTensor`]; the backend that made it downcasts it with
/// [`DeviceStorage::as_any`] to read its address.
pub trait DeviceStorage {
    /// The device that holds the memory.
    fn device(&self) -> Device;
    /// The elements copied to the host, once the work that writes them has finished.
    fn to_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, String>;
    /// The storage itself, for the backend that made it to downcast.
    fn as_any(&self) -> &dyn Any;
}

/// A tensor in a backend's memory (see the module doc). Clones share the memory.
#[derive(Clone)]
pub struct DeviceTensor {
    dtype: DType,
    dims: Vec<u64>,
    storage: Rc<dyn DeviceStorage>,
}

impl DeviceTensor {
    /// For backends: a tensor of `dtype` and `dims` held in `storage`.
    pub fn new(dtype: DType, dims: Vec<u64>, storage: Rc<dyn DeviceStorage>) -> DeviceTensor {
        DeviceTensor {
            dtype,
            dims,
            storage,
        }
    }

    /// The elements' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dims, in elements per axis.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The device that holds the tensor.
    pub fn device(&self) -> Device {
        self.storage.device()
    }

    /// For backends: the memory, to downcast.
    pub fn storage(&self) -> &dyn DeviceStorage {
        self.storage.as_ref()
    }

    /// The tensor copied to the host (waiting for the run that writes it).
    pub fn to_host(&self) -> Result<HostTensor<'static>, BackendError> {
        self.storage
            .to_host(self.dtype, &self.dims)
            .map_err(|reason| BackendError::Device {
                device: self.device(),
                reason,
            })
    }
}

impl fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceTensor({} on {})",
            tir_graph::tensor::type_name(self.dtype, &self.dims),
            self.device()
        )
    }
}

/// A tensor handed to a run or to [`Executable::set_parameter`]: in host memory or in a
/// backend's.
#[derive(Clone, Copy, Debug)]
pub enum TensorRef<'a> {
    /// A tensor in host memory.
    Host(&'a HostTensor<'a>),
    /// A tensor in a backend's memory.
    Device(&'a DeviceTensor),
}

impl TensorRef<'_> {
    /// The elements' dtype.
    pub fn dtype(&self) -> DType {
        match self {
            TensorRef::Host(t) => t.dtype(),
            TensorRef::Device(t) => t.dtype(),
        }
    }

    /// The dims, in elements per axis.
    pub fn dims(&self) -> &[u64] {
        match self {
            TensorRef::Host(t) => t.dims(),
            TensorRef::Device(t) => t.dims(),
        }
    }
}

impl<'a> From<&'a HostTensor<'a>> for TensorRef<'a> {
    fn from(t: &'a HostTensor<'a>) -> Self {
        TensorRef::Host(t)
    }
}

impl<'a> From<&'a DeviceTensor> for TensorRef<'a> {
    fn from(t: &'a DeviceTensor) -> Self {
        TensorRef::Device(t)
    }
}

/// Tensors by name in host memory: a run's outputs, an executable's states.
pub type HostTensors = BTreeMap<String, HostTensor<'static>>;

/// What [`Executable::load_weights`] did with a file's tensors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightsBound {
    /// Parameters set from the file.
    pub bound: Vec<String>,
    /// Tensors of the file that are not parameters of the program.
    pub unused: Vec<String>,
    /// Parameters the file does not have (still unset, unless set before).
    pub missing: Vec<String>,
}

/// A compiled program on one device. Parameters stay set and states persist across runs.
pub trait Executable {
    /// The names and types a run binds and returns.
    fn signature(&self) -> &Signature;

    /// The device the executable runs on.
    fn device(&self) -> Device;

    /// Sets parameter `name` to `value` until it is set again: a host tensor is copied into
    /// the backend's memory now, a device tensor of this device is used in place. Its dtype and
    /// shape must fit the parameter's type.
    fn set_parameter(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), BackendError>;

    /// Runs with `inputs` (every input of the signature, once, by name; every parameter must be
    /// set). Symbolic dims are bound from the inputs' and parameters' shapes. Returns the
    /// outputs in host memory.
    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<HostTensors, BackendError>;

    /// Runs like [`Executable::run`] but leaves the outputs in the backend's memory; it may
    /// return before the device has finished (reading an output waits for it).
    fn run_on_device(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError>;

    /// A copy of `tensor` in the backend's memory.
    fn to_device(&mut self, tensor: &HostTensor<'_>) -> Result<DeviceTensor, BackendError>;

    /// A zeroed host tensor in the memory this backend copies from and to fastest
    /// (page-locked memory on CUDA): fill it and pass it to runs.
    fn alloc_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, BackendError>;

    /// The current value of every state (zeros before a run has bound it, where its shape is
    /// static).
    fn states(&self) -> Result<HostTensors, BackendError>;

    /// Sets every parameter that `weights` has a tensor for (by name); see [`WeightsBound`].
    /// A tensor whose dtype or shape does not fit its parameter is refused, naming it.
    fn load_weights(&mut self, weights: &WeightsFile) -> Result<WeightsBound, BackendError> {
        let parameters: Vec<String> = self
            .signature()
            .parameters
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        let mut report = WeightsBound::default();
        for (name, tensor) in weights.iter() {
            if parameters.iter().any(|p| p == name) {
                self.set_parameter(name, TensorRef::Host(&tensor))
                    .map_err(|e| match e {
                        BackendError::BadInput(why) => {
                            BackendError::BadInput(format!("{}: {why}", weights.path().display()))
                        }
                        other => other,
                    })?;
                report.bound.push(name.to_string());
            } else {
                report.unused.push(name.to_string());
            }
        }
        report.missing = parameters
            .into_iter()
            .filter(|p| !report.bound.contains(p))
            .collect();
        Ok(report)
    }
}

/// A program compiled for each device of a mesh: every device runs the same program on its
/// own shards (SPMD), and its collectives combine the devices' values. Tensors go in and come
/// out per device (`[rank]`); [`crate::mesh::ShardedExecutable`] puts whole tensors on top.
pub trait MeshExecutable {
    /// The per-device program's signature.
    fn signature(&self) -> &Signature;

    /// The devices, by rank.
    fn devices(&self) -> Vec<Device>;

    /// Sets parameter `name` on device `rank` (as [`Executable::set_parameter`]).
    fn set_parameter(
        &mut self,
        rank: usize,
        name: &str,
        value: TensorRef<'_>,
    ) -> Result<(), BackendError>;

    /// Runs every device with its inputs (`inputs[rank]`); returns each device's outputs. A run
    /// that fails on any device leaves every device's states as they were.
    fn run(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<HostTensors>, BackendError>;

    /// Like [`MeshExecutable::run`], leaving each device's outputs in its memory.
    fn run_on_device(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<BTreeMap<String, DeviceTensor>>, BackendError>;

    /// A copy of `tensor` in device `rank`'s memory.
    fn to_device(
        &mut self,
        rank: usize,
        tensor: &HostTensor<'_>,
    ) -> Result<DeviceTensor, BackendError>;

    /// Each device's states (as [`Executable::states`]).
    fn states(&self) -> Result<Vec<HostTensors>, BackendError>;
}

/// A backend: compile, capabilities, target.
pub trait Backend {
    /// The name it is registered and chosen by (`"ref"`, `"cuda"`).
    fn name(&self) -> &'static str;
    /// What lowering should aim at: fusion limits and tile shapes.
    fn target(&self) -> Target;
    /// What it can run.
    fn capabilities(&self) -> Capabilities;
    /// Compiles `program` for this backend's device; fails if the backend is unavailable here
    /// or cannot compile what the program asks for.
    fn compile(&self, program: &Program) -> Result<Box<dyn Executable>, BackendError>;

    /// Compiles `program` (a graph cut for one device of a mesh, with collectives) for a mesh
    /// of `world` devices. Backends without meshes refuse.
    fn compile_mesh(
        &self,
        program: &Program,
        world: u32,
    ) -> Result<Box<dyn MeshExecutable>, BackendError> {
        let _ = (program, world);
        Err(BackendError::Unsupported {
            backend: self.name().to_string(),
            reason: "it runs on one device; a mesh needs a backend with collectives".into(),
        })
    }
}

/// The backends compiled into a binary, by name.
#[derive(Default)]
pub struct Registry {
    backends: Vec<Box<dyn Backend>>,
}

impl Registry {
    /// A registry without backends.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds a backend; a later one with the same name replaces the earlier.
    pub fn register(&mut self, backend: Box<dyn Backend>) {
        self.backends.retain(|b| b.name() != backend.name());
        self.backends.push(backend);
    }

    /// The backend registered as `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Backend> {
        self.backends
            .iter()
            .find(|b| b.name() == name)
            .map(|b| b.as_ref())
    }

    /// The registered backends' names, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.backends.iter().map(|b| b.name()).collect()
    }
}
