//! Tolerances: how far a backend's value may lie from the oracle's, per op class and dtype.
//!
//! Every float bound is a multiple of the dtype's unit roundoff `u` (half an ulp at 1.0) plus,
//! for classes that accumulate, a term in `sqrt(len) * u_acc` where `u_acc` is the unit roundoff
//! of the accumulator (`f32` for `f16`, `bf16` and `f32`; `f64` for `f64`). An element passes when
//!
//! ```text
//! |got - expected| <= rtol * (|expected| + typical) + min_normal(dtype)
//! ```
//!
//! where `typical` is the root-mean-square of the tensor's finite expected values: near a zero of
//! the result (a sum that cancels, `cos` near pi/2) the error is judged against the tensor's
//! magnitude, not the tiny element, and `min_normal` lets a backend flush subnormal results.
//! Integer and bool tensors, and every tensor of an [`OpClass::Exact`] case, must match exactly.
//! testsuite/README.md gives the reasoning behind each number.

use serde::Serialize;
use std::fmt;
use tir_graph::DType;

/// What a case computes, as far as rounding is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Values move or are chosen, never computed (layout ops, gather, select, comparisons,
    /// max/min, casts, floor/ceil on exact inputs, integer arithmetic): bit-exact.
    Exact,
    /// IEEE basic operations, correctly rounded (add, sub, mul, div, sqrt, reciprocal), at most
    /// two of them per case.
    Elementwise,
    /// Library functions (exp, log, sin, cos, tanh, sigmoid, gelu, silu, pow, rsqrt).
    Transcendental,
    /// A reduction (sum, mean, prod) over `len` elements, accumulated in `u_acc`.
    Reduction,
    /// A matmul with reduced length `len` (K), possibly with an elementwise epilogue.
    MatMul,
    /// A composite of a few rounded steps around one reduction of length `len` (softmax,
    /// layer_norm, rms_norm, attention), each step rounded to the dtype.
    Composite,
    /// A whole model (several matmuls, norms and attention chained), rows of length `len`.
    Model,
}

impl OpClass {
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Exact => "exact",
            OpClass::Elementwise => "elementwise",
            OpClass::Transcendental => "transcendental",
            OpClass::Reduction => "reduction",
            OpClass::MatMul => "matmul",
            OpClass::Composite => "composite",
            OpClass::Model => "model",
        }
    }

    /// `(k, c)`: the bound is `k * u + c * sqrt(len) * u_acc`.
    fn coefficients(self) -> (f64, f64) {
        match self {
            OpClass::Exact => (0.0, 0.0),
            OpClass::Elementwise => (4.0, 0.0),
            OpClass::Transcendental => (8.0, 0.0),
            OpClass::Reduction | OpClass::MatMul => (8.0, 4.0),
            OpClass::Composite => (16.0, 4.0),
            OpClass::Model => (64.0, 8.0),
        }
    }
}

/// A case's tolerance class: the op class and, for accumulating classes, the reduced length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Tolerance {
    pub class: OpClass,
    /// The longest reduction in the case (1 where nothing is reduced).
    pub len: u64,
}

/// The bound for one tensor: `|got - expected| <= rtol * (|expected| + typical) + floor`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Bound {
    pub rtol: f64,
    /// The smallest normal value of the dtype (0 when exact).
    pub floor: f64,
}

impl Bound {
    pub const EXACT: Bound = Bound {
        rtol: 0.0,
        floor: 0.0,
    };

    pub fn is_exact(&self) -> bool {
        self.rtol == 0.0 && self.floor == 0.0
    }
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance {
        class: OpClass::Exact,
        len: 1,
    };
    pub const ELEMENTWISE: Tolerance = Tolerance {
        class: OpClass::Elementwise,
        len: 1,
    };
    pub const TRANSCENDENTAL: Tolerance = Tolerance {
        class: OpClass::Transcendental,
        len: 1,
    };

    pub fn reduction(len: u64) -> Tolerance {
        Tolerance {
            class: OpClass::Reduction,
            len,
        }
    }

    pub fn matmul(k: u64) -> Tolerance {
        Tolerance {
            class: OpClass::MatMul,
            len: k,
        }
    }

    pub fn composite(len: u64) -> Tolerance {
        Tolerance {
            class: OpClass::Composite,
            len,
        }
    }

    pub fn model(len: u64) -> Tolerance {
        Tolerance {
            class: OpClass::Model,
            len,
        }
    }

    /// The bound for a tensor of `dtype` computed through values as coarse as `computed_in`
    /// (the least precise float dtype of the case's graph: an `f16` matmul cast to `f32` carries
    /// `f16` rounding). Exact for bool, integers and the exact class.
    pub fn bound(&self, dtype: DType, computed_in: DType) -> Bound {
        if !dtype.is_float() || self.class == OpClass::Exact {
            return Bound::EXACT;
        }
        let (k, c) = self.class.coefficients();
        let sqrt_len = (self.len.max(1) as f64).sqrt();
        let u = unit_roundoff(dtype).max(unit_roundoff(computed_in));
        Bound {
            rtol: k * u + c * sqrt_len * unit_roundoff(accumulator(dtype)),
            floor: min_normal(dtype),
        }
    }
}

/// The least precise float dtype among `dtypes` (`None` if there is no float).
pub fn coarsest_float(dtypes: impl IntoIterator<Item = DType>) -> Option<DType> {
    dtypes
        .into_iter()
        .filter(|d| d.is_float())
        .max_by(|a, b| unit_roundoff(*a).total_cmp(&unit_roundoff(*b)))
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.class {
            OpClass::Exact | OpClass::Elementwise | OpClass::Transcendental => {
                f.write_str(self.class.name())
            }
            c => write!(f, "{}(len {})", c.name(), self.len),
        }
    }
}

/// Half an ulp at 1.0: the largest relative error of one rounding to nearest.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F32 => 2f64.powi(-24),
        DType::F64 => 2f64.powi(-53),
        DType::F8E4M3 => 2f64.powi(-4),
        DType::F8E5M2 => 2f64.powi(-3),
        _ => 0.0,
    }
}

/// The dtype reductions and matmuls accumulate in.
pub fn accumulator(dtype: DType) -> DType {
    match dtype {
        DType::F64 => DType::F64,
        _ => DType::F32,
    }
}

/// The smallest positive normal value of a float dtype.
pub fn min_normal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-14),
        DType::BF16 | DType::F32 => 2f64.powi(-126),
        DType::F64 => f64::MIN_POSITIVE,
        DType::F8E4M3 => 2f64.powi(-6),
        DType::F8E5M2 => 2f64.powi(-14),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_the_exact_class_are_exact() {
        for d in [DType::Bool, DType::I8, DType::U8, DType::I32, DType::I64] {
            assert!(Tolerance::matmul(100).bound(d, DType::F16).is_exact());
        }
        assert!(Tolerance::EXACT.bound(DType::F16, DType::F16).is_exact());
    }

    #[test]
    fn a_coarse_dtype_on_the_way_loosens_the_bound() {
        let f32_only = Tolerance::matmul(40).bound(DType::F32, DType::F32).rtol;
        let via_f16 = Tolerance::matmul(40).bound(DType::F32, DType::F16).rtol;
        assert!(via_f16 > 100.0 * f32_only);
        let coarsest = coarsest_float([DType::I32, DType::F32, DType::BF16, DType::F16]);
        assert_eq!(coarsest, Some(DType::BF16));
        assert_eq!(coarsest_float([DType::I8]), None);
    }

    #[test]
    fn bounds_grow_with_length_and_shrink_with_precision() {
        let f32 = DType::F32;
        let short = Tolerance::reduction(16).bound(f32, f32).rtol;
        let long = Tolerance::reduction(65536).bound(f32, f32).rtol;
        assert!(long > short);
        let f16 = Tolerance::ELEMENTWISE.bound(DType::F16, DType::F16).rtol;
        let f32 = Tolerance::ELEMENTWISE.bound(f32, f32).rtol;
        assert!(f16 > 1000.0 * f32);
        assert_eq!(f16, 4.0 * 2f64.powi(-11));
    }
}
