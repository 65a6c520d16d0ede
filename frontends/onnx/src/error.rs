//! Why an ONNX model could not be imported. Each message is one line that names the file, the
//! node (its name, op type and opset) or the tensor at fault.

use tir_graph::{GraphError, TensorError};

/// An import failure.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file does not decode as an ONNX `ModelProto`.
    #[error("{path} is not an ONNX model: {reason}")]
    Decode {
        /// The file.
        path: String,
        /// The decoder's reason.
        reason: String,
    },
    /// The model breaks a rule of the ONNX format (a dangling name, a cycle, a bad tensor).
    #[error("malformed model: {0}")]
    Malformed(String),
    /// Ops tir does not implement, every one of them listed.
    #[error("unsupported ops: {}", list(.0))]
    UnsupportedOps(Vec<UnsupportedNode>),
    /// A node whose op is supported but whose inputs, attributes or types are not, or are wrong.
    #[error("node `{node}` ({op}, opset {opset}): {kind}")]
    Node {
        /// The node's name (its first output's where it has none), or a graph input's.
        node: String,
        /// Its op type (`graph input` for a graph input).
        op: String,
        /// The default-domain opset the model imports (0 for a graph input).
        opset: i64,
        /// What is wrong.
        kind: Box<NodeErrorKind>,
    },
    /// `--dim NAME=N` (an [`crate::ImportOptions::fixed_dims`] entry) for a dim no input has.
    #[error("the model has no symbolic dim `{name}` to fix (its symbolic dims: {})", if .dims.is_empty() { "none".to_string() } else { .dims.join(", ") })]
    NoSuchDim {
        /// The dim asked to be fixed.
        name: String,
        /// The model's symbolic dims.
        dims: Vec<String>,
    },
    /// The graph built from the model fails verification (a bug of the importer).
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
    /// The node's name.
    pub node: String,
    /// Its op type.
    pub op: String,
    /// Its domain (empty for the default `ai.onnx`).
    pub domain: String,
    /// The opset of that domain the model imports.
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
    /// Building the node's ops refused their types or shapes.
    #[error("{0}")]
    Graph(#[from] GraphError),
    /// A tensor of the node (an initializer, a constant) is malformed.
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
