//! A graph on a mesh of devices, run with whole tensors.
//!
//! [`compile_sharded`] cuts the whole graph for one device ([`tir_opt::shard`]) and compiles that
//! graph like any other (its collectives become collective kernels); a backend compiles the
//! program for its devices ([`crate::Backend::compile_mesh`]). [`ShardedExecutable`] is the
//! [`Executable`] a user holds: it takes whole parameters and inputs, gives each device its
//! shard (reading only those bytes of a host or memory-mapped tensor), runs every device, and
//! returns whole outputs and states. Outputs are replicated by construction, so they are read
//! from device 0; states are joined from their shards.

use crate::backend::{
    BackendError, Device, DeviceTensor, Executable, HostTensors, MeshExecutable, TensorRef,
};
use crate::program::Signature;
use crate::{compile_graph, Compiled, LowerError, Target};
use std::collections::BTreeMap;
use tir_graph::collective::{ShardPlan, Sharding};
use tir_graph::tensor::join_host;
use tir_graph::{DType, Graph, HostTensor};
use tir_opt::shard::{shard, ShardError, ShardOptions};
use tir_opt::Limits;

/// A whole graph compiled for one device of a mesh.
#[derive(Clone, Debug)]
pub struct ShardedCompiled {
    /// The per-device graph taken through the pipeline.
    pub compiled: Compiled,
    /// Each source's sharding and the mesh's size.
    pub plan: ShardPlan,
    /// The whole graph's signature: what a [`ShardedExecutable`] takes and returns.
    pub whole: Signature,
}

/// A mesh to run a whole graph on, and how to shard the graph over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeshSpec {
    /// The number of devices.
    pub world: u32,
    /// The inputs, parameters and states split by name; the rest are propagated.
    pub shardings: BTreeMap<String, Sharding>,
    /// Megatron's rule for the weights not named ([`ShardOptions::tensor_parallel`]).
    pub tensor_parallel: bool,
}

impl MeshSpec {
    /// The graph each device of this mesh runs, and the plan ([`tir_opt::shard::shard`]).
    /// Tensor parallelism that splits nothing (every device would compute the whole graph) is
    /// refused.
    pub fn shard(&self, graph: &Graph) -> Result<tir_opt::shard::ShardedGraph, ShardError> {
        let options = ShardOptions {
            tensor_parallel: self.tensor_parallel,
        };
        let sharded = shard(graph, self.world, &self.shardings, &options)?;
        let splits = (sharded.plan.sources.values()).any(|s| matches!(s, Sharding::Split(_)));
        if self.tensor_parallel && self.world > 1 && !splits {
            return Err(ShardError::NothingSplit { world: self.world });
        }
        Ok(sharded)
    }
}

/// Cuts `graph` for `mesh` (see [`tir_opt::shard`]) and compiles the per-device graph for
/// `target`.
pub fn compile_sharded(
    graph: &Graph,
    mesh: &MeshSpec,
    target: &Target,
    limits: &Limits,
) -> Result<ShardedCompiled, LowerError> {
    let sharded = mesh.shard(graph)?;
    let compiled = compile_graph(&sharded.local, target, limits)?;
    let source_types = |sources: Vec<(String, tir_graph::NodeId)>| {
        sources
            .into_iter()
            .map(|(name, id)| (name, graph.ty(id).clone()))
            .collect()
    };
    let local = &compiled.program.signature;
    let whole = Signature {
        inputs: source_types(graph.inputs()),
        parameters: source_types(graph.parameters()),
        states: source_types(graph.states()),
        outputs: local.outputs.clone(),
        dims: local.dims.clone(),
        bounds: local.bounds.clone(),
    };
    Ok(ShardedCompiled {
        compiled,
        plan: sharded.plan,
        whole,
    })
}

/// Checks that every collective of `program` is over `world` devices; the error names the first
/// kernel that is not (for backends' [`crate::Backend::compile_mesh`]).
pub fn check_world(program: &crate::Program, world: u32) -> Result<(), String> {
    for k in &program.kernels {
        let over = match k.collective() {
            Some((
                tir_graph::Op::AllReduce { world, .. }
                | tir_graph::Op::AllGather { world, .. }
                | tir_graph::Op::ReduceScatter { world, .. },
                _,
                _,
            )) => *world,
            Some(_) => 0,
            None => continue,
        };
        if over != world {
            return Err(format!(
                "kernel {} is a collective over {over} devices, but the mesh has {world}",
                k.name
            ));
        }
    }
    Ok(())
}

/// Whole tensors over a [`MeshExecutable`] (see the module doc).
pub struct ShardedExecutable {
    mesh: Box<dyn MeshExecutable>,
    plan: ShardPlan,
    whole: Signature,
}

fn bad_input(reason: String) -> BackendError {
    BackendError::BadInput(reason)
}

impl ShardedExecutable {
    /// `mesh` (compiled from `sharded`'s program) with `sharded`'s plan and whole signature.
    pub fn new(mesh: Box<dyn MeshExecutable>, sharded: &ShardedCompiled) -> ShardedExecutable {
        ShardedExecutable::from_plan(mesh, sharded.plan.clone(), sharded.whole.clone())
    }

    /// `mesh` with the plan its program was cut by and the whole graph's signature (as an AOT
    /// package stores them).
    pub fn from_plan(
        mesh: Box<dyn MeshExecutable>,
        plan: ShardPlan,
        whole: Signature,
    ) -> ShardedExecutable {
        ShardedExecutable { mesh, plan, whole }
    }

    /// How the sources are laid over the devices.
    pub fn plan(&self) -> &ShardPlan {
        &self.plan
    }

    /// Each device's part of source `name`'s whole value.
    fn shards(
        &self,
        name: &str,
        value: TensorRef<'_>,
    ) -> Result<Vec<HostTensor<'static>>, BackendError> {
        let host;
        let whole = match value {
            TensorRef::Host(t) => t,
            TensorRef::Device(t) => {
                host = t.to_host()?;
                &host
            }
        };
        (0..self.plan.world)
            .map(|rank| self.plan.shard_host(name, whole, rank).map_err(bad_input))
            .collect()
    }

    /// Checks a whole source's type against the whole signature.
    fn check(
        &self,
        kind: &str,
        types: &[(String, tir_graph::TensorType)],
        name: &str,
        value: TensorRef<'_>,
    ) -> Result<(), BackendError> {
        let Some((_, ty)) = types.iter().find(|(n, _)| n == name) else {
            return Err(bad_input(format!("{name:?} is not {kind} of the program")));
        };
        if value.dtype() != ty.dtype || !ty.shape.admits(value.dims()) {
            return Err(bad_input(format!(
                "{kind} {name:?}: expected {ty}, got {}",
                crate::run::type_name(value.dtype(), value.dims())
            )));
        }
        Ok(())
    }
}

/// Each device's inputs as references.
fn refs<'a>(
    per_device: &'a [Vec<(String, HostTensor<'static>)>],
) -> Vec<Vec<(&'a str, TensorRef<'a>)>> {
    per_device
        .iter()
        .map(|d| {
            d.iter()
                .map(|(n, t)| (n.as_str(), TensorRef::Host(t)))
                .collect()
        })
        .collect()
}

impl ShardedExecutable {
    /// Each device's shards of the whole `inputs`, checked against the whole signature.
    fn per_device(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<Vec<Vec<(String, HostTensor<'static>)>>, BackendError> {
        let mut per_device = vec![Vec::new(); self.plan.world as usize];
        for (name, value) in inputs {
            self.check("an input", &self.whole.inputs, name, *value)?;
            for (rank, part) in self.shards(name, *value)?.into_iter().enumerate() {
                per_device[rank].push((name.to_string(), part));
            }
        }
        Ok(per_device)
    }
}

impl Executable for ShardedExecutable {
    fn signature(&self) -> &Signature {
        &self.whole
    }

    fn device(&self) -> Device {
        self.mesh.devices()[0]
    }

    fn set_parameter(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), BackendError> {
        self.check("a parameter", &self.whole.parameters, name, value)?;
        for (rank, part) in self.shards(name, value)?.iter().enumerate() {
            self.mesh.set_parameter(rank, name, TensorRef::Host(part))?;
        }
        Ok(())
    }

    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<HostTensors, BackendError> {
        let per_device = self.per_device(inputs)?;
        let mut outputs = self.mesh.run(&refs(&per_device))?;
        Ok(outputs.swap_remove(0))
    }

    fn run_on_device(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError> {
        let per_device = self.per_device(inputs)?;
        let mut outputs = self.mesh.run_on_device(&refs(&per_device))?;
        Ok(outputs.swap_remove(0))
    }

    /// A copy on device 0; a run or a parameter given it shards it from there.
    fn to_device(&mut self, tensor: &HostTensor<'_>) -> Result<DeviceTensor, BackendError> {
        self.mesh.to_device(0, tensor)
    }

    fn alloc_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, BackendError> {
        HostTensor::zeros(dtype, dims).map_err(|e| bad_input(e.to_string()))
    }

    fn states(&self) -> Result<HostTensors, BackendError> {
        let per_device = self.mesh.states()?;
        let mut whole = BTreeMap::new();
        for (name, _) in &self.whole.states {
            let parts: Vec<HostTensor<'_>> = per_device
                .iter()
                .filter_map(|d| d.get(name).map(|t| t.view()))
                .collect();
            if parts.len() != per_device.len() {
                continue;
            }
            let value = match self.plan.sharding(name) {
                Sharding::Replicated => parts[0].view().into_owned(),
                Sharding::Split(axis) => join_host(&parts, axis).map_err(bad_input)?,
            };
            whole.insert(name.clone(), value);
        }
        Ok(whole)
    }
}
