//! A conformance case: a graph, the sources of each consecutive run, a tolerance class, and the
//! backend features it needs.

use crate::tolerance::Tolerance;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use tir_graph::eval::F64Tensor;
use tir_graph::{DType, Graph, Op};
use tir_lower::mesh::MeshSpec;
use tir_lower::Capabilities;

/// Something a backend declares in its [`Capabilities`]; a case that needs what the backend
/// lacks is skipped, with this as the reason. Serialized as its text (`dtype f16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// Tensors of this dtype anywhere in the graph.
    DType(DType),
    /// Symbolic dims, bound at launch.
    SymbolicDims,
    /// States that persist across runs of one executable.
    PersistentState,
    /// A mesh of this many devices.
    Devices(u32),
    /// Collectives that reduce (all-reduce, reduce-scatter) elements of this dtype.
    ReduceDType(DType),
}

impl Feature {
    /// Whether `caps` declares this feature.
    pub fn supported_by(self, caps: &Capabilities) -> bool {
        match self {
            Feature::DType(d) => caps.dtypes.contains(&d),
            Feature::SymbolicDims => caps.symbolic_dims,
            Feature::PersistentState => caps.persistent_state,
            Feature::Devices(n) => caps.devices >= n,
            Feature::ReduceDType(d) => caps.reduce_dtypes.contains(&d),
        }
    }
}

impl Serialize for Feature {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Feature::DType(d) => write!(f, "dtype {d}"),
            Feature::SymbolicDims => f.write_str("symbolic dims"),
            Feature::PersistentState => f.write_str("persistent state"),
            Feature::Devices(n) => write!(f, "a mesh of {n} devices"),
            Feature::ReduceDType(d) => write!(f, "collectives reducing {d}"),
        }
    }
}

/// One conformance case.
#[derive(Clone, Debug)]
pub struct Case {
    /// `group/what/dtype/shape`, unique in the corpus.
    pub name: String,
    pub graph: Graph,
    /// The inputs and parameters of each consecutive run of one executable; states are carried
    /// by the backend from run to run.
    pub runs: Vec<BTreeMap<String, F64Tensor>>,
    pub tolerance: Tolerance,
    /// What a backend must declare to run the case ([`Case::new`] derives it from the graph).
    pub needs: Vec<Feature>,
    /// The mesh the case runs on, sharded; `None` for one device. The whole graph stays the
    /// oracle's; the runner cuts it for each device ([`tir_lower::mesh::compile_sharded`]) and
    /// runs it with whole tensors.
    pub mesh: Option<MeshSpec>,
}

impl Case {
    /// A case whose needs are read off the graph: every dtype of every value, symbolic dims if
    /// any shape has one, persistent state if the graph has a state.
    pub fn new(
        name: impl Into<String>,
        graph: Graph,
        runs: Vec<BTreeMap<String, F64Tensor>>,
        tolerance: Tolerance,
    ) -> Case {
        let needs = needs_of(&graph);
        Case {
            name: name.into(),
            graph,
            runs,
            tolerance,
            needs,
            mesh: None,
        }
    }

    /// This case run on `mesh`: it also needs the reductions of the collectives that sharding
    /// puts into the graph (a graph that cannot be sharded needs none: its run fails, naming
    /// why).
    pub fn on_mesh(mut self, mesh: MeshSpec) -> Case {
        let mut needs: BTreeSet<Feature> = self.needs.drain(..).collect();
        needs.insert(Feature::Devices(mesh.world));
        if let Ok(sharded) = mesh.shard(&self.graph) {
            needs.extend(reductions(&sharded.local));
        }
        self.needs = needs.into_iter().collect();
        self.mesh = Some(mesh);
        self
    }

    /// The first path segment of the name: `op`, `pattern` or `numerics`.
    pub fn group(&self) -> &str {
        self.name.split('/').next().unwrap_or("")
    }

    /// The reason `caps` cannot run this case, naming every missing feature, or `None`.
    pub fn skip_reason(&self, caps: &Capabilities) -> Option<String> {
        let missing: Vec<String> = self
            .needs
            .iter()
            .filter(|f| !f.supported_by(caps))
            .map(Feature::to_string)
            .collect();
        (!missing.is_empty())
            .then(|| format!("the backend's capabilities lack {}", missing.join(", ")))
    }
}

/// The features `graph` needs, sorted.
pub fn needs_of(graph: &Graph) -> Vec<Feature> {
    let mut needs = BTreeSet::new();
    for id in graph.node_ids() {
        let ty = graph.ty(id);
        needs.insert(Feature::DType(ty.dtype));
        if ty.shape.dims().iter().any(|d| d.as_static().is_none()) {
            needs.insert(Feature::SymbolicDims);
        }
    }
    if !graph.states().is_empty() {
        needs.insert(Feature::PersistentState);
    }
    needs.extend(reductions(graph));
    needs.into_iter().collect()
}

/// The dtypes `graph`'s reducing collectives reduce.
fn reductions(graph: &Graph) -> impl Iterator<Item = Feature> + '_ {
    graph.node_ids().filter_map(|id| {
        let node = graph.node(id);
        matches!(node.op, Op::AllReduce { .. } | Op::ReduceScatter { .. })
            .then(|| Feature::ReduceDType(graph.ty(id).dtype))
    })
}
