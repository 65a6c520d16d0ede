//! A mesh of reference devices in one process, so that sharded programs are checked against
//! the oracle with no GPU.
//!
//! [`RefMeshExecutable`] holds one [`RefExecutable`] per device, all of one program, and runs
//! them in lockstep: every device runs kernel `k` before any runs kernel `k + 1`. A collective
//! kernel combines the devices' input buffers exactly as the collective says, in rank order, in
//! the buffer's dtype (an `f16` sum is rounded to `f16` after each device's addition, integers
//! wrap), and writes each device's output buffer. States are committed only when every device's
//! run has succeeded.

use crate::exec::{device_tensor, to_host, Ran, RefExecutable};
use crate::tile::binary;
use crate::word::{Tile, Word};
use std::collections::BTreeMap;
use tir_graph::collective::{join_shards, shard_dims, take_shard};
use tir_graph::{BinaryOp, HostTensor, Op, ReduceOp};
use tir_lower::program::MeshStep;
use tir_lower::{
    BackendError, Device, DeviceTensor, Executable, HostTensors, MeshExecutable, Program,
    Signature, TensorRef,
};

/// A program compiled for `world` reference devices (`ref:0`, `ref:1`, ...).
pub struct RefMeshExecutable {
    devices: Vec<RefExecutable>,
}

impl RefMeshExecutable {
    pub(crate) fn new(devices: Vec<RefExecutable>) -> RefMeshExecutable {
        RefMeshExecutable { devices }
    }

    fn program(&self) -> &Program {
        self.devices[0].program()
    }
}

/// Checks that every collective of `program` is over `world` devices.
pub(crate) fn check_world(program: &Program, world: u32) -> Result<(), BackendError> {
    tir_lower::mesh::check_world(program, world).map_err(|reason| BackendError::Unsupported {
        backend: "ref".into(),
        reason,
    })
}

impl RefMeshExecutable {
    /// Runs every device in lockstep; commits the states once every device has succeeded.
    fn run_all(&mut self, inputs: &[Vec<(&str, TensorRef<'_>)>]) -> Result<Vec<Ran>, BackendError> {
        if inputs.len() != self.devices.len() {
            return Err(BackendError::BadInput(format!(
                "{} devices' inputs for a mesh of {}",
                inputs.len(),
                self.devices.len()
            )));
        }
        let mut runs = self
            .devices
            .iter()
            .zip(inputs)
            .map(|(d, i)| d.begin(i))
            .collect::<Result<Vec<Ran>, _>>()?;
        for step in self.program().mesh_steps() {
            match step {
                MeshStep::Collective(k) => self.collective(k, &mut runs)?,
                MeshStep::Kernels(kernels) => {
                    for (d, run) in self.devices.iter().zip(runs.iter_mut()) {
                        for &k in &kernels {
                            d.launch_kernel(k, run)?;
                        }
                    }
                }
            }
        }
        for (d, run) in self.devices.iter_mut().zip(&runs) {
            d.commit(run);
        }
        Ok(runs)
    }

    /// Runs collective kernel `k` across the devices' runs.
    fn collective(&self, k: usize, runs: &mut [Ran]) -> Result<(), BackendError> {
        let program = self.program();
        let kernel = &program.kernels[k];
        let fail = |reason: String| BackendError::Kernel {
            kernel: kernel.name.clone(),
            reason,
        };
        let Some((op, input, output)) = kernel.collective() else {
            return Err(fail("not a collective".into()));
        };
        let (from, to) = (kernel.params[input].buffer, kernel.params[output].buffer);
        let dtype = program.buffers[from].ty.dtype;
        let inputs: Vec<Tile> = runs
            .iter()
            .map(|r| Tile {
                dtype,
                dims: r.shapes[from].clone(),
                data: r.bufs[from].clone(),
            })
            .collect();
        let world = inputs.len() as u32;
        let dims = inputs[0].dims.clone();
        let results: Vec<Vec<Word>> = match op {
            Op::AllReduce { op, .. } => vec![reduce(*op, &inputs).map_err(fail)?.data; runs.len()],
            Op::AllGather { axis, .. } => {
                let parts: Vec<&[Word]> = inputs.iter().map(|t| t.data.as_slice()).collect();
                vec![join_shards(&parts, &dims, *axis); runs.len()]
            }
            Op::ReduceScatter { axis, .. } => {
                shard_dims(&dims, *axis, world).ok_or_else(|| {
                    fail(format!(
                        "axis {axis} of {dims:?} is not divisible by {world}"
                    ))
                })?;
                let sum = reduce(ReduceOp::Sum, &inputs).map_err(fail)?;
                (0..world)
                    .map(|r| take_shard(&sum.data, &dims, *axis, world, r))
                    .collect()
            }
            other => return Err(fail(format!("{other} is not a collective"))),
        };
        for (run, data) in runs.iter_mut().zip(results) {
            if data.len() != run.bufs[to].len() {
                return Err(fail(format!(
                    "the result has {} elements, its buffer {}",
                    data.len(),
                    run.bufs[to].len()
                )));
            }
            run.bufs[to] = data;
        }
        Ok(())
    }
}

/// The devices' tiles combined elementwise by `op` (sum, max or min) in rank order, each step
/// rounded to the dtype.
fn reduce(op: ReduceOp, tiles: &[Tile]) -> Result<Tile, String> {
    let combine = match op {
        ReduceOp::Sum => BinaryOp::Add,
        ReduceOp::Max => BinaryOp::Maximum,
        ReduceOp::Min => BinaryOp::Minimum,
        other => return Err(format!("all_reduce cannot combine by {}", other.name())),
    };
    let mut acc = tiles[0].clone();
    for t in &tiles[1..] {
        acc = binary(combine, &acc, t)?;
    }
    Ok(acc)
}

impl MeshExecutable for RefMeshExecutable {
    fn signature(&self) -> &Signature {
        &self.program().signature
    }

    fn devices(&self) -> Vec<Device> {
        (0..self.devices.len() as u32)
            .map(|ordinal| Device {
                backend: "ref",
                ordinal,
            })
            .collect()
    }

    fn set_parameter(
        &mut self,
        rank: usize,
        name: &str,
        value: TensorRef<'_>,
    ) -> Result<(), BackendError> {
        let world = self.devices.len();
        self.devices
            .get_mut(rank)
            .ok_or_else(|| {
                BackendError::BadInput(format!("no device {rank} in a mesh of {world}"))
            })?
            .set_parameter(name, value)
    }

    fn run(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<HostTensors>, BackendError> {
        let runs = self.run_all(inputs)?;
        self.devices
            .iter()
            .zip(&runs)
            .map(|(d, run)| {
                d.outputs(run)
                    .map(|(name, t)| Ok((name.clone(), to_host(name, &t)?)))
                    .collect()
            })
            .collect()
    }

    fn run_on_device(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<BTreeMap<String, DeviceTensor>>, BackendError> {
        let runs = self.run_all(inputs)?;
        let devices = MeshExecutable::devices(self);
        Ok(self
            .devices
            .iter()
            .zip(&runs)
            .zip(devices)
            .map(|((d, run), device)| {
                d.outputs(run)
                    .map(|(name, t)| (name.clone(), device_tensor(t, device)))
                    .collect()
            })
            .collect())
    }

    fn to_device(
        &mut self,
        rank: usize,
        tensor: &HostTensor<'_>,
    ) -> Result<DeviceTensor, BackendError> {
        let device = *MeshExecutable::devices(self)
            .get(rank)
            .ok_or_else(|| BackendError::BadInput(format!("no device {rank} in the mesh")))?;
        let values = Tile::from_host(tensor).map_err(|e| BackendError::BadInput(e.to_string()))?;
        Ok(device_tensor(values, device))
    }

    fn states(&self) -> Result<Vec<HostTensors>, BackendError> {
        self.devices.iter().map(|d| d.states()).collect()
    }
}
