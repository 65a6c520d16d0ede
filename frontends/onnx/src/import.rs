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
use crate::model::{dtype_of, node_name, read_tensor, Model};
use crate::ops;
use crate::proto;
use crate::state::{State, Value};
use crate::{NodeErrorKind, OnnxError, UnsupportedNode};
use std::collections::BTreeMap;
use std::rc::Rc;
use tir_graph::{DType, Dim, Graph, HostTensor, Shape};

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

/// Imports `model` as a tir graph.
pub fn import(model: &Model, options: &ImportOptions) -> Result<Imported, OnnxError> {
    let graph = model.graph();
    refuse_unsupported(graph, model.opset)?;
    let mut st = State::new(options.known_inputs.clone(), options.max_constant_elements);
    define_initializers(&mut st, graph, model)?;
    define_inputs(&mut st, graph, &options.fixed_dims)?;
    for node in &graph.node {
        ops::lower_node(&mut st, node, model.opset)?;
    }
    define_outputs(&mut st, graph)?;
    let weights = st.take_weights();
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
        if st.value(t.name()).is_some() {
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
        if st.value(input.name()).is_some() {
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
        let value = match st.known_input(&name) {
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

fn define_outputs(st: &mut State, graph: &proto::GraphProto) -> Result<(), OnnxError> {
    for output in &graph.output {
        let name = output.name();
        let fail = |kind| OnnxError::Node {
            node: name.to_string(),
            op: "graph output".into(),
            opset: 0,
            kind: Box::new(kind),
        };
        if st.value(name).is_none() {
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
