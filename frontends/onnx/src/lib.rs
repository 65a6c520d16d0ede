//! tir-onnx: ONNX models as tir graphs.
//!
//! [`Model::read`] decodes an `.onnx` file (prost types generated from the official
//! `onnx.proto`); [`import`] turns its graph into a verified [`tir_graph::Graph`] whose
//! parameters are the model's large initializers, returned with their values in their own dtype
//! (write them with [`tir_graph::weights::write_safetensors`], or set them on an executable).
//! Values known at import (initializers, constants, shape computations) are folded, so shapes
//! computed in the model are fixed; `dim_param`s become symbolic dims. A model using an op tir
//! does not lower is refused with every such node listed.

#![warn(missing_docs)]

mod attrs;
mod error;
mod import;
mod known;
pub mod model;
mod ops;
pub mod proto;
mod state;

pub(crate) use error::{invalid, unsupported};
pub use error::{NodeErrorKind, OnnxError, UnsupportedNode};
pub use import::{import, ImportOptions, Imported};
pub use model::Model;

/// Reads and imports the model at `path`.
pub fn import_file(path: &std::path::Path, options: &ImportOptions) -> Result<Imported, OnnxError> {
    import(&Model::read(path)?, options)
}
