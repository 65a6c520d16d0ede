//! Why an ONNX model could not be imported. Each message is one line that names the file, the
//! node (its name, op type and opset) or the tensor at fault.

use tir_graph::{GraphError, TensorError};

/// An import failure.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not an ONNX model: {reason}")]
    Decode { path: String, reason: String },
    /// The model breaks a rule of the ONNX format (a dangling name, a cycle, a bad tensor).
    #[error("malformed model: {0}")]
    Malformed(String),
    /// Ops tir does not implement, every one of them listed.
    #[error("unsupported ops: {}", list(.0))]
    UnsupportedOps(Vec<UnsupportedNode>),
    /// A node whose op is supported but whose inputs, attributes or types are not, or are wrong.
    #[error("node `{node}` ({op}, opset {opset}): {kind}")]
    Node {
        node: String,
        op: String,
        opset: i64,
        kind: Box<NodeErrorKind>,
    },
    /// `--dim NAME=N` (an [`crate::ImportOptions::fixed_dims`] entry) for a dim no input has.
    #[error("the model has no symbolic dim `{name}` to fix (its symbolic dims: {})", if .dims.is_empty() { "none".to_string() } else { .dims.join(", ") })]
    NoSuchDim { name: String, dims: Vec<String> },
    #[error("the imported graph does not verify: {0}")]
    Graph(#[from] GraphError),
}

impl OnnxError {
    /// Whether the model is refused for using what tir does not support (rather than being
    /// malformed or unreadable).
    pub fn is_unsupported(&self) -> bool {
        match self {
            OnnxError::UnsupportedOps(_) => true,
            OnnxError::Node { kind, .. } => matches!(
                **kind,
                NodeErrorKind::Unsupported(_) | NodeErrorKind::NeedsKnownInput(_)
            ),
            _ => false,
        }
    }
}

fn list(nodes: &[UnsupportedNode]) -> String {
    let names: Vec<String> = nodes.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// A node whose op type (in its domain and opset) tir does not implement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedNode {
    pub node: String,
    pub op: String,
    pub domain: String,
    pub opset: i64,
}

impl std::fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let domain = if self.domain.is_empty() {
            String::new()
        } else {
            format!("{}.", self.domain)
        };
        write!(
            f,
            "`{}` ({domain}{}, opset {})",
            self.node, self.op, self.opset
        )
    }
}

/// What is wrong with one node.
#[derive(Debug, thiserror::Error)]
pub enum NodeErrorKind {
    /// Valid ONNX that tir does not implement (an attribute value, a dtype, a mode).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Input `name` sets a shape or an attribute, so its value must be known when the model is
    /// imported, but it is a graph input.
    #[error("input `{0}` must be known at import (it sets a shape, axes or sizes), but it is a graph input; give its value at import")]
    NeedsKnownInput(String),
    /// Not valid ONNX.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Graph(#[from] GraphError),
    #[error("{0}")]
    Tensor(#[from] TensorError),
}

/// Shorthand for an unsupported feature of a node.
pub(crate) fn unsupported(what: impl Into<String>) -> NodeErrorKind {
    NodeErrorKind::Unsupported(what.into())
}

/// Shorthand for a node that breaks the ONNX spec.
pub(crate) fn invalid(what: impl Into<String>) -> NodeErrorKind {
    NodeErrorKind::Invalid(what.into())
}
