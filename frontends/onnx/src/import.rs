//! ONNX graph → tir graph: walks the nodes in their (required) topological order and lowers each
//! through [`crate::ops`], keeping values that are known at import (initializers, constants, shape
//! computations) apart from run-time tensors until a run-time op needs them.
//!
//! Takes a decoded [`Model`]. Guarantees: every node's op is supported or the import is refused
//! with every unsupported node listed before anything is built; every name a node reads is
//! defined before it (so cycles and dangling names are refused); every attribute a node carries
//! is read by its lowering (an attribute tir does not know is refused, never ignored); the result
//! verifies ([`tir_graph::Graph::verify`]), and its parameters are exactly the initializers too
//! large to embed, with their values in [`Imported::weights`].

use crate::known::Known;
use crate::model::{dtype_of, read_tensor, Model};
use crate::ops;
use crate::proto::{self, attribute_proto::AttributeType, NodeProto};
use crate::{NodeErrorKind, OnnxError, UnsupportedNode};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use tir_graph::{ConstData, DType, Dim, DimExpr, Graph, GraphBuilder, HostTensor, Shape, Tensor};

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Values of graph inputs that set shapes, axes or sizes (a `Reshape`'s shape given as an
    /// input): such an input is folded in at import and is no input of the tir graph.
    pub known_inputs: BTreeMap<String, HostTensor<'static>>,
    /// Initializers of at most this many elements are embedded as constants; larger ones become
    /// parameters, their values in [`Imported::weights`].
    pub max_constant_elements: usize,
    /// Symbolic dims fixed to a size at import (`tirc import --dim batch=1`): the graph is
    /// static in them. Each must be a symbolic dim of some input.
    pub fixed_dims: BTreeMap<String, u64>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            known_inputs: BTreeMap::new(),
            max_constant_elements: 64,
            fixed_dims: BTreeMap::new(),
        }
    }
}

/// An imported model.
pub struct Imported {
    /// The verified graph: the model's inputs as inputs, its large initializers as parameters.
    pub graph: Graph,
    /// The value of every parameter of `graph`, by name, in the initializer's own dtype.
    pub weights: Vec<(String, HostTensor<'static>)>,
    /// The default-domain opset the model imports.
    pub opset: i64,
}

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
    fn new(options: &ImportOptions) -> State {
        State {
            b: GraphBuilder::new(),
            values: HashMap::new(),
            materialized: HashMap::new(),
            weights: Vec::new(),
            known_inputs: options.known_inputs.clone(),
            max_constant_elements: options.max_constant_elements,
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

/// Imports `model` as a tir graph.
pub fn import(model: &Model, options: &ImportOptions) -> Result<Imported, OnnxError> {
    let graph = model.graph();
    refuse_unsupported(graph, model.opset)?;
    let mut st = State::new(options);
    define_initializers(&mut st, graph, model)?;
    define_inputs(&mut st, graph, &options.fixed_dims)?;
    for node in &graph.node {
        lower_node(&mut st, node, model.opset)?;
    }
    define_outputs(&mut st, graph)?;
    let weights = std::mem::take(&mut st.weights);
    let graph = st.into_builder().finish()?;
    Ok(Imported {
        graph,
        weights,
        opset: model.opset,
    })
}

/// Refuses the model if any node's op is not one tir lowers, naming every such node.
fn refuse_unsupported(graph: &proto::GraphProto, opset: i64) -> Result<(), OnnxError> {
    let unsupported: Vec<UnsupportedNode> = graph
        .node
        .iter()
        .filter(|n| ops::lowering_in(n.domain(), n.op_type()).is_none())
        .map(|n| UnsupportedNode {
            node: node_name(n),
            op: n.op_type().to_string(),
            domain: n.domain().to_string(),
            opset,
        })
        .collect();
    if unsupported.is_empty() {
        Ok(())
    } else {
        Err(OnnxError::UnsupportedOps(unsupported))
    }
}

/// A node's name, or its first output's when it has none (names are optional in ONNX).
pub(crate) fn node_name(n: &NodeProto) -> String {
    match (n.name(), n.output.first()) {
        ("", Some(out)) => out.clone(),
        (name, _) => name.to_string(),
    }
}

fn define_initializers(
    st: &mut State,
    graph: &proto::GraphProto,
    model: &Model,
) -> Result<(), OnnxError> {
    if !graph.sparse_initializer.is_empty() {
        return Err(OnnxError::Node {
            node: "(graph)".into(),
            op: "sparse_initializer".into(),
            opset: model.opset,
            kind: Box::new(NodeErrorKind::Unsupported("sparse initializers".into())),
        });
    }
    for t in &graph.initializer {
        let data = read_tensor(t, model.dir.as_deref()).map_err(OnnxError::Malformed)?;
        if st.values.contains_key(t.name()) {
            return Err(OnnxError::Malformed(format!(
                "initializer `{}` is defined twice",
                t.name()
            )));
        }
        st.define(t.name(), Value::Known(Known::Data(Rc::new(data))));
    }
    Ok(())
}

/// Defines the graph inputs, with the dims of `fixed` replaced by their sizes; refuses a fixed
/// dim no input has, naming those they have.
fn define_inputs(
    st: &mut State,
    graph: &proto::GraphProto,
    fixed: &BTreeMap<String, u64>,
) -> Result<(), OnnxError> {
    let mut symbols = std::collections::BTreeSet::new();
    for input in &graph.input {
        // Before IR version 4 initializers are listed as inputs too; the initializer is the value.
        if st.values.contains_key(input.name()) {
            continue;
        }
        let (dtype, shape) = input_type(input).map_err(|reason| OnnxError::Node {
            node: input.name().to_string(),
            op: "graph input".into(),
            opset: 0,
            kind: Box::new(reason),
        })?;
        let dims = shape
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Symbolic(s) => {
                    symbols.insert(s.clone());
                    fixed.get(s).map_or_else(|| d.clone(), |&n| Dim::Static(n))
                }
                d => d.clone(),
            })
            .collect();
        let shape = Shape::new(dims).expect("static dims in place of valid symbols");
        let name = input.name().to_string();
        // An input whose value is given at import is that value everywhere, so that what is
        // computed from it (a size through a `Cast`) folds.
        let value = match st.known_inputs.get(&name) {
            Some(t) if t.dtype() != dtype || !shape.admits(t.dims()) => {
                return Err(OnnxError::Node {
                    node: name,
                    op: "graph input".into(),
                    opset: 0,
                    kind: Box::new(NodeErrorKind::Invalid(format!(
                        "the value given at import is {}{:?}, the input is {dtype}{shape}",
                        t.dtype(),
                        t.dims()
                    ))),
                })
            }
            Some(t) => Value::Known(Known::Data(Rc::new(t.clone()))),
            None => Value::Input { name, dtype, shape },
        };
        st.define(input.name(), value);
    }
    if let Some(name) = fixed.keys().find(|n| !symbols.contains(*n)) {
        return Err(OnnxError::NoSuchDim {
            name: name.clone(),
            dims: symbols.into_iter().collect(),
        });
    }
    Ok(())
}

/// The dtype and shape of a graph input: a tensor with every dim given a size or a name.
fn input_type(input: &proto::ValueInfoProto) -> Result<(DType, Shape), NodeErrorKind> {
    use proto::tensor_shape_proto::dimension::Value as D;
    use proto::type_proto::Value as T;
    let tensor = match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(T::TensorType(t)) => t,
        Some(_) => {
            return Err(NodeErrorKind::Unsupported(
                "inputs that are not tensors".into(),
            ))
        }
        None => return Err(NodeErrorKind::Invalid("the input has no type".into())),
    };
    let dtype = dtype_of(tensor.elem_type()).map_err(NodeErrorKind::Unsupported)?;
    let Some(shape) = &tensor.shape else {
        return Err(NodeErrorKind::Unsupported(
            "an input without a shape (tir needs each input's rank)".into(),
        ));
    };
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (i, d) in shape.dim.iter().enumerate() {
        dims.push(match &d.value {
            Some(D::DimValue(v)) => {
                Dim::Static(crate::model::tensor_dims(&[*v]).map_err(NodeErrorKind::Invalid)?[0])
            }
            Some(D::DimParam(p)) if !p.is_empty() => Dim::Symbolic(symbol_name(p)),
            // A dim with neither a size nor a name is a size of its own, named after the input.
            _ => Dim::Symbolic(symbol_name(&format!("{}_dim{i}", input.name()))),
        });
    }
    let shape = Shape::new(dims).map_err(|e| NodeErrorKind::Unsupported(e.to_string()))?;
    Ok((dtype, shape))
}

/// A `dim_param` as a tir symbol: characters a symbol cannot hold become `_`.
fn symbol_name(param: &str) -> String {
    let mut s: String = param
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

fn lower_node(st: &mut State, node: &NodeProto, opset: i64) -> Result<(), OnnxError> {
    let fail = |kind| OnnxError::Node {
        node: node_name(node),
        op: node.op_type().to_string(),
        opset,
        kind: Box::new(kind),
    };
    for input in node.input.iter().filter(|i| !i.is_empty()) {
        if !st.values.contains_key(input) {
            return Err(OnnxError::Malformed(format!(
                "node `{}` ({}) reads `{input}`, which no earlier node, input or initializer defines",
                node_name(node),
                node.op_type()
            )));
        }
    }
    let outputs = ops::lower(st, node, opset).map_err(fail)?;
    for (name, value) in node.output.iter().zip(outputs) {
        if name.is_empty() {
            continue;
        }
        if st.values.contains_key(name) {
            return Err(OnnxError::Malformed(format!(
                "`{name}` is defined twice (again by node `{}`)",
                node_name(node)
            )));
        }
        st.define(name, value);
    }
    Ok(())
}

/// Lowers `graph`, a node's graph attribute, inline into `st`'s graph with its inputs bound to
/// `inputs`, and returns its outputs. Its initializers, inputs and nodes live in a scope of
/// their own: they see the outer values (as an ONNX subgraph does) and may shadow them, but leave
/// them as they were; outer inputs and initializers that become graph nodes inside stay nodes.
pub(crate) fn inline_graph(
    st: &mut State,
    graph: &proto::GraphProto,
    inputs: Vec<Value>,
    opset: i64,
) -> Result<Vec<Value>, NodeErrorKind> {
    let what = format!("graph `{}`", graph.name());
    if graph.input.len() != inputs.len() || !graph.sparse_initializer.is_empty() {
        return Err(NodeErrorKind::Invalid(format!(
            "{what} takes {} inputs, not {} (nor sparse initializers)",
            graph.input.len(),
            inputs.len()
        )));
    }
    if let Some(n) = graph
        .node
        .iter()
        .find(|n| ops::lowering_in(n.domain(), n.op_type()).is_none())
    {
        return Err(NodeErrorKind::Unsupported(format!(
            "{what}: node `{}` ({}{})",
            node_name(n),
            n.domain(),
            n.op_type()
        )));
    }
    let mut inner = State {
        b: st.b.clone(),
        values: st.values.clone(),
        materialized: st.materialized.clone(),
        weights: Vec::new(),
        known_inputs: st.known_inputs.clone(),
        max_constant_elements: st.max_constant_elements,
    };
    let mut shadowed = std::collections::HashSet::new();
    let bound = graph.input.iter().map(|i| i.name()).zip(inputs);
    let initializers = graph.initializer.iter().map(|t| {
        let data = read_tensor(t, None).map_err(NodeErrorKind::Invalid)?;
        Ok::<_, NodeErrorKind>((t.name(), Value::Known(Known::Data(Rc::new(data)))))
    });
    for item in bound.map(Ok).chain(initializers) {
        let (name, value) = item?;
        inner.materialized.remove(name);
        inner.values.insert(name.to_string(), value);
        shadowed.insert(name.to_string());
    }
    for node in &graph.node {
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if !shadowed.insert(out.clone()) {
                return Err(NodeErrorKind::Invalid(format!(
                    "{what}: `{out}` is defined twice"
                )));
            }
            inner.values.remove(out);
            inner.materialized.remove(out);
        }
        lower_node(&mut inner, node, opset).map_err(|e| inside(&what, e))?;
    }
    let outputs = graph
        .output
        .iter()
        .map(|o| {
            inner.values.get(o.name()).cloned().ok_or_else(|| {
                NodeErrorKind::Invalid(format!("{what}: output `{}` is not defined", o.name()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // What the inner scope made of outer values (an input read, a weight embedded) holds outside.
    for (name, value) in inner.values {
        if !shadowed.contains(&name) && matches!(value, Value::Tensor(_)) {
            st.values.insert(name, value);
        }
    }
    for (name, t) in inner.materialized {
        if !shadowed.contains(&name) {
            st.materialized.insert(name, t);
        }
    }
    st.weights.extend(inner.weights);
    Ok(outputs)
}

/// An error of a node inside `what` as one of the node that holds it, of the same kind.
fn inside(what: &str, e: OnnxError) -> NodeErrorKind {
    match e {
        OnnxError::Node { node, op, kind, .. } => match *kind {
            NodeErrorKind::Unsupported(m) => {
                NodeErrorKind::Unsupported(format!("{what}, node `{node}` ({op}): {m}"))
            }
            NodeErrorKind::NeedsKnownInput(n) => NodeErrorKind::NeedsKnownInput(n),
            other => NodeErrorKind::Invalid(format!("{what}, node `{node}` ({op}): {other}")),
        },
        other => NodeErrorKind::Invalid(format!("{what}: {other}")),
    }
}

fn define_outputs(st: &mut State, graph: &proto::GraphProto) -> Result<(), OnnxError> {
    for output in &graph.output {
        let name = output.name();
        let fail = |kind| OnnxError::Node {
            node: name.to_string(),
            op: "graph output".into(),
            opset: 0,
            kind: Box::new(kind),
        };
        if !st.values.contains_key(name) {
            return Err(OnnxError::Malformed(format!(
                "graph output `{name}` is not defined by any node, input or initializer"
            )));
        }
        let t = st.tensor(name).map_err(fail)?;
        if let Some(proto::type_proto::Value::TensorType(ty)) =
            output.r#type.as_ref().and_then(|t| t.value.as_ref())
        {
            if ty.elem_type() != 0 {
                let declared =
                    dtype_of(ty.elem_type()).map_err(|e| fail(NodeErrorKind::Unsupported(e)))?;
                if declared != t.dtype() {
                    return Err(fail(NodeErrorKind::Invalid(format!(
                        "declared {declared}, computed {}",
                        t.ty()
                    ))));
                }
            }
        }
        st.b.output(name, &t).map_err(|e| fail(e.into()))?;
    }
    Ok(())
}

/// A node's attributes, each read at most through these accessors, so that an attribute nothing
/// read is refused ([`Attrs::unread`]).
pub(crate) struct Attrs<'a> {
    list: &'a [proto::AttributeProto],
    read: RefCell<Vec<bool>>,
}

impl<'a> Attrs<'a> {
    pub fn new(list: &'a [proto::AttributeProto]) -> Attrs<'a> {
        Attrs {
            list,
            read: RefCell::new(vec![false; list.len()]),
        }
    }

    fn get(
        &self,
        name: &str,
        ty: AttributeType,
    ) -> Result<Option<&'a proto::AttributeProto>, NodeErrorKind> {
        let Some(i) = self.list.iter().position(|a| a.name() == name) else {
            return Ok(None);
        };
        self.read.borrow_mut()[i] = true;
        let a = &self.list[i];
        if a.ref_attr_name.is_some() {
            return Err(NodeErrorKind::Invalid(format!(
                "attribute `{name}` refers to a function attribute outside a function"
            )));
        }
        if a.r#type.is_some() && a.r#type() != ty {
            return Err(NodeErrorKind::Invalid(format!(
                "attribute `{name}` is {}, expected {}",
                a.r#type().as_str_name(),
                ty.as_str_name()
            )));
        }
        Ok(Some(a))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, NodeErrorKind> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, NodeErrorKind> {
        match self.get(name, AttributeType::Int)? {
            Some(a) => a.i.map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, NodeErrorKind> {
        match self.get(name, AttributeType::Float)? {
            Some(a) => a.f.ok_or_else(|| missing(name)),
            None => Ok(default),
        }
    }

    pub fn opt_float(&self, name: &str) -> Result<Option<f32>, NodeErrorKind> {
        match self.get(name, AttributeType::Float)? {
            Some(a) => a.f.map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, NodeErrorKind> {
        Ok(self.get(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, NodeErrorKind> {
        Ok(self
            .get(name, AttributeType::Floats)?
            .map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String, NodeErrorKind> {
        match self.get(name, AttributeType::String)? {
            Some(a) => {
                let bytes = a.s.as_deref().ok_or_else(|| missing(name))?;
                String::from_utf8(bytes.to_vec())
                    .map_err(|_| NodeErrorKind::Invalid(format!("attribute `{name}` is not UTF-8")))
            }
            None => Ok(default.to_string()),
        }
    }

    pub fn graph(&self, name: &str) -> Result<Option<&'a proto::GraphProto>, NodeErrorKind> {
        match self.get(name, AttributeType::Graph)? {
            Some(a) => a.g.as_ref().map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    pub fn tensor(&self, name: &str) -> Result<Option<&'a proto::TensorProto>, NodeErrorKind> {
        match self.get(name, AttributeType::Tensor)? {
            Some(a) => a.t.as_ref().map(Some).ok_or_else(|| missing(name)),
            None => Ok(None),
        }
    }

    /// Marks `name` read whatever its value (attributes that do not change inference).
    pub fn ignore(&self, name: &str) {
        if let Some(i) = self.list.iter().position(|a| a.name() == name) {
            self.read.borrow_mut()[i] = true;
        }
    }

    /// The first attribute nothing read.
    pub fn unread(&self) -> Option<&'a str> {
        let read = self.read.borrow();
        self.list
            .iter()
            .zip(read.iter())
            .find(|(_, &r)| !r)
            .map(|(a, _)| a.name())
    }
}

fn missing(name: &str) -> NodeErrorKind {
    NodeErrorKind::Invalid(format!("attribute `{name}` has no value"))
}
