//! The type of a value: dtype plus shape.

use crate::{DType, Shape};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The type of a tensor value: its element type and shape. Prints as `f16[batch, 1024]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TensorType {
    /// The element type.
    pub dtype: DType,
    /// The dims, static or symbolic.
    pub shape: Shape,
}

impl TensorType {
    /// The type of `dtype` elements in `shape`.
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
