//! The values of an ONNX graph while it is imported ([`Value`]) and the state the lowering of
//! every node shares ([`State`]): the graph being built, each name's value, and the known values
//! already embedded or made weights.
//!
//! Takes values as nodes define them. Guarantees: a known value is embedded at most once per
//! scope (a constant when small, else a parameter whose data joins the weights); a graph input
//! becomes a tir input only when a node reads it as a tensor; a subgraph's scope
//! ([`State::scope`]) leaves the outer names as they were.

use crate::known::Known;
use crate::NodeErrorKind;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use tir_graph::{ConstData, DType, Dim, DimExpr, GraphBuilder, HostTensor, Shape, Tensor};

/// One value of the ONNX graph while it is imported.
#[derive(Clone)]
pub(crate) enum Value {
    /// Computed at run time.
    Tensor(Tensor),
    /// Known at import.
    Known(Known),
    /// A graph input not yet read by any node: it becomes a tir input when a node reads it as a
    /// tensor, or a known value (from [`ImportOptions::known_inputs`]) when a node needs it so.
    Input {
        name: String,
        dtype: DType,
        shape: Shape,
    },
}

impl Value {
    pub fn dtype(&self) -> DType {
        match self {
            Value::Tensor(t) => t.dtype(),
            Value::Input { dtype, .. } => *dtype,
            Value::Known(k) => k.dtype(),
        }
    }
}

impl From<Tensor> for Value {
    fn from(t: Tensor) -> Value {
        Value::Tensor(t)
    }
}

impl From<Known> for Value {
    fn from(k: Known) -> Value {
        Value::Known(k)
    }
}

/// What the lowering of the nodes shares.
pub(crate) struct State {
    pub b: GraphBuilder,
    values: HashMap<String, Value>,
    /// Known values already embedded in the graph, by value name.
    materialized: HashMap<String, Tensor>,
    weights: Vec<(String, HostTensor<'static>)>,
    known_inputs: BTreeMap<String, HostTensor<'static>>,
    max_constant_elements: usize,
}

impl State {
    /// An empty state for an import with `known_inputs` (see
    /// [`crate::ImportOptions::known_inputs`]) embedding known values of at most
    /// `max_constant_elements` as constants.
    pub fn new(
        known_inputs: BTreeMap<String, HostTensor<'static>>,
        max_constant_elements: usize,
    ) -> State {
        State {
            b: GraphBuilder::new(),
            values: HashMap::new(),
            materialized: HashMap::new(),
            weights: Vec::new(),
            known_inputs,
            max_constant_elements,
        }
    }

    /// A state for folding one node whose inputs are all known: everything embeds as a constant.
    pub fn scratch(values: HashMap<String, Value>) -> State {
        State {
            b: GraphBuilder::new(),
            values,
            materialized: HashMap::new(),
            weights: Vec::new(),
            known_inputs: BTreeMap::new(),
            max_constant_elements: tir_graph::op::MAX_CONSTANT_ELEMENTS as usize,
        }
    }

    pub fn value(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// Value `name` as a run-time tensor, making it an input or embedding it if need be.
    pub fn tensor(&mut self, name: &str) -> Result<Tensor, NodeErrorKind> {
        let value = self
            .values
            .get(name)
            .cloned()
            .ok_or_else(|| NodeErrorKind::Invalid(format!("`{name}` is not defined")))?;
        match value {
            Value::Tensor(t) => Ok(t),
            Value::Input {
                name: input,
                dtype,
                shape,
            } => {
                // `name` may be another name for the input (an `Identity` of it).
                let t = self.b.input(&input, dtype, shape)?;
                for n in [name, input.as_str()] {
                    self.values.insert(n.to_string(), Value::Tensor(t.clone()));
                }
                Ok(t)
            }
            Value::Known(k) => {
                if let Some(t) = self.materialized.get(name) {
                    return Ok(t.clone());
                }
                let t = self.embed(name, &k)?;
                self.materialized.insert(name.to_string(), t.clone());
                Ok(t)
            }
        }
    }

    /// A known value as a graph node: a constant when small, else a parameter named `name`; a
    /// vector of dims as the dims' values.
    fn embed(&mut self, name: &str, k: &Known) -> Result<Tensor, NodeErrorKind> {
        if let Known::Dims { entries, scalar } = k {
            return self.dim_values(entries, *scalar);
        }
        let data = k.to_tensor()?;
        let shape = Shape::of(data.dims());
        if data.numel() <= self.max_constant_elements {
            let values = const_data(&data);
            return Ok(self.b.constant_data(data.dtype(), shape, values)?);
        }
        let t = self.b.parameter(name, data.dtype(), shape)?;
        self.weights.push((name.to_string(), data.into_owned()));
        Ok(t)
    }

    /// The `i64` values of `entries` at run time: a scalar, or a vector of one per entry.
    fn dim_values(&mut self, entries: &[DimExpr], scalar: bool) -> Result<Tensor, NodeErrorKind> {
        let values = entries
            .iter()
            .map(|e| {
                let v = match e.as_constant() {
                    // Shape vectors hold negatives too (a reshape's `-1`).
                    Some(c) => self.b.scalar(DType::I64, c as f64)?,
                    None => {
                        let dim = Dim::from_expr(e.clone()).map_err(|err| {
                            NodeErrorKind::Unsupported(format!(
                                "the shape value {e} as a run-time tensor: {err}"
                            ))
                        })?;
                        self.b.dim_value(dim)?
                    }
                };
                Ok(if scalar { v } else { v.unsqueeze(&[0])? })
            })
            .collect::<Result<Vec<_>, NodeErrorKind>>()?;
        match &values[..] {
            [one] => Ok(one.clone()),
            many => Ok(self.b.concat(&many.iter().collect::<Vec<_>>(), 0)?),
        }
    }

    /// Value `name` as a value known at import, or why it is not one.
    pub fn known(&mut self, name: &str) -> Result<Known, NodeErrorKind> {
        match self.values.get(name) {
            Some(Value::Known(k)) => Ok(k.clone()),
            Some(Value::Input { name: input, .. }) => match self.known_inputs.get(input) {
                Some(t) => {
                    let k = Known::Data(Rc::new(t.clone()));
                    self.values
                        .insert(name.to_string(), Value::Known(k.clone()));
                    Ok(k)
                }
                None => Err(NodeErrorKind::NeedsKnownInput(input.clone())),
            },
            Some(Value::Tensor(t)) => {
                // Computed from graph inputs alone: known once they are.
                let inputs = t.computed_from_inputs().unwrap_or_default();
                match inputs.into_iter().find(|i| !self.known_inputs.contains_key(i)) {
                    Some(input) => Err(NodeErrorKind::NeedsKnownInput(input)),
                    None => Err(NodeErrorKind::Unsupported(format!(
                        "`{name}` sets a shape, axes or sizes, so it must be known at import, but it is computed at run time"
                    ))),
                }
            }
            None => Err(NodeErrorKind::Invalid(format!("`{name}` is not defined"))),
        }
    }

    pub fn define(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_string(), value);
    }

    pub fn into_builder(self) -> GraphBuilder {
        self.b
    }

    /// The value given at import for graph input `name`, if any.
    pub fn known_input(&self, name: &str) -> Option<&HostTensor<'static>> {
        self.known_inputs.get(name)
    }

    /// The weights the import has made parameters of so far, taken out of the state.
    pub fn take_weights(&mut self) -> Vec<(String, HostTensor<'static>)> {
        std::mem::take(&mut self.weights)
    }

    /// A scope inside this one (a subgraph's): it sees every value of this one, builds onto a
    /// clone of its graph and has no weights of its own yet.
    pub fn scope(&self) -> State {
        State {
            b: self.b.clone(),
            values: self.values.clone(),
            materialized: self.materialized.clone(),
            weights: Vec::new(),
            known_inputs: self.known_inputs.clone(),
            max_constant_elements: self.max_constant_elements,
        }
    }

    /// Binds `name` to `value` in this scope (or unbinds it), forgetting what an outer value of
    /// that name was embedded as.
    pub fn rebind(&mut self, name: &str, value: Option<Value>) {
        self.materialized.remove(name);
        match value {
            Some(v) => self.values.insert(name.to_string(), v),
            None => self.values.remove(name),
        };
    }

    /// Ends `inner`, a [`State::scope`] of this one: what it made of outer values (an input
    /// read, a weight embedded) holds here too; the names it `shadowed` stay as they were here.
    pub fn close_scope(&mut self, inner: State, shadowed: &HashSet<String>) {
        for (name, value) in inner.values {
            if !shadowed.contains(&name) && matches!(value, Value::Tensor(_)) {
                self.values.insert(name, value);
            }
        }
        for (name, t) in inner.materialized {
            if !shadowed.contains(&name) {
                self.materialized.insert(name, t);
            }
        }
        self.weights.extend(inner.weights);
    }
}

/// A tensor's values as constant data, exactly.
fn const_data(t: &HostTensor<'_>) -> ConstData {
    let n = t.numel();
    let at = |i| t.element_f64(i).expect("index within numel");
    match t.dtype() {
        DType::Bool => ConstData::Bool((0..n).map(|i| at(i) != 0.0).collect()),
        DType::I64 => ConstData::Int(t.as_slice::<i64>().expect("i64 data").to_vec()),
        d if d.is_int() => ConstData::Int((0..n).map(|i| at(i) as i64).collect()),
        _ => ConstData::Float((0..n).map(|i| tir_graph::ExactF64(at(i))).collect()),
    }
}
