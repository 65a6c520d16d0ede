//! A node's graph attribute (a `Loop` body, a score function) lowered inline into the graph
//! being built.
//!
//! Takes a subgraph and the values bound to its inputs. Guarantees: every node of it is
//! supported or the subgraph is refused naming the first that is not; its names live in a scope
//! of their own ([`State::scope`]) that leaves the outer names as they were; an error inside
//! names the subgraph and the node, of the same kind.

use super::{lower_node, lowering_in};
use crate::known::Known;
use crate::model::{node_name, read_tensor};
use crate::proto;
use crate::state::{State, Value};
use crate::{NodeErrorKind, OnnxError};
use std::rc::Rc;

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
        .find(|n| lowering_in(n.domain(), n.op_type()).is_none())
    {
        return Err(NodeErrorKind::Unsupported(format!(
            "{what}: node `{}` ({}{})",
            node_name(n),
            n.domain(),
            n.op_type()
        )));
    }
    let mut inner = st.scope();
    let mut shadowed = std::collections::HashSet::new();
    let bound = graph.input.iter().map(|i| i.name()).zip(inputs);
    let initializers = graph.initializer.iter().map(|t| {
        let data = read_tensor(t, None).map_err(NodeErrorKind::Invalid)?;
        Ok::<_, NodeErrorKind>((t.name(), Value::Known(Known::Data(Rc::new(data)))))
    });
    for item in bound.map(Ok).chain(initializers) {
        let (name, value) = item?;
        inner.rebind(name, Some(value));
        shadowed.insert(name.to_string());
    }
    for node in &graph.node {
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if !shadowed.insert(out.clone()) {
                return Err(NodeErrorKind::Invalid(format!(
                    "{what}: `{out}` is defined twice"
                )));
            }
            inner.rebind(out, None);
        }
        lower_node(&mut inner, node, opset).map_err(|e| inside(&what, e))?;
    }
    let outputs = graph
        .output
        .iter()
        .map(|o| {
            inner.value(o.name()).cloned().ok_or_else(|| {
                NodeErrorKind::Invalid(format!("{what}: output `{}` is not defined", o.name()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    st.close_scope(inner, &shadowed);
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
