//! tir-graph: the first stage of the tir pipeline.
//!
//! It defines the tensor graph IR (dtypes, shapes with static and symbolic dims, ops with type
//! inference), the [`Graph`] with its verifier, the [`GraphBuilder`] API, and the two file forms:
//! the binary `.tir` file ([`file`](mod@file)) and the text form ([`text`]), and the f64 reference
//! evaluator of a graph ([`eval`], the oracle later stages are checked against).

#![warn(missing_docs)]

pub mod builder;
pub mod collective;
pub mod custom;
pub mod dim;
pub mod dtype;
pub mod eval;
pub mod file;
pub mod float8;
pub mod graph;
pub mod infer;
pub mod models;
pub mod op;
pub mod quant;
pub mod shape;
pub mod tensor;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod types;
pub mod weights;

pub use builder::{GraphBuilder, Tensor};
pub use custom::{
    CustomError, CustomInput, CustomKernel, CustomOutput, CustomRef, KernelBody, Safety, StateSlice,
};
pub use dtype::DType;
pub use eval::{evaluate, EvalError, Evaluation, F64Tensor};
pub use graph::{Graph, GraphData, GraphError, Node, NodeData, NodeId};
pub use infer::InferError;
pub use op::{BinaryOp, ConstData, ExactF64, Op, ReduceOp, ReshapeDim, SliceRange, UnaryOp};
pub use shape::{Dim, DimBound, DimError, DimExpr, Shape, ShapeError, MAX_RANK};
pub use tensor::{Element, HostMemory, HostTensor, TensorError};
pub use types::TensorType;
