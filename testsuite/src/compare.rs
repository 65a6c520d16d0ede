//! Comparing one tensor a backend returned with the oracle's value of it.
//!
//! The expected value of an element is the oracle's `f64` rounded to the tensor's dtype
//! ([`DType::round_value`]); the rules, in order:
//!
//! 1. The dtype and dims must be the oracle's.
//! 2. Every value must be one the dtype can hold (an `f16` output with `f32` precision, or an
//!    `i8` of 300, is wrong whatever the tolerance).
//! 3. A NaN matches only a NaN of the oracle; a NaN where the oracle has a number (an element
//!    no kernel wrote reads as NaN in the reference) never passes, nor does a number where the
//!    oracle has NaN. An infinity must be the same infinity.
//! 4. Integer and bool values, and every value under an exact bound, must be equal (`-0.0`
//!    equals `0.0`).
//! 5. Other floats must satisfy the [`Bound`] (see [`crate::tolerance`]).

use crate::tolerance::Bound;
use serde::Serialize;
use tir_graph::eval::F64Tensor;
use tir_graph::DType;

/// An element that failed, with why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mismatch {
    /// Row-major position in the tensor.
    pub index: usize,
    /// The same position as coordinates.
    pub coords: Vec<u64>,
    #[serde(serialize_with = "crate::report::float")]
    pub expected: f64,
    #[serde(serialize_with = "crate::report::float")]
    pub got: f64,
    pub why: &'static str,
}

/// The outcome of comparing one tensor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorCheck {
    /// Which run of the case (0-based).
    pub run: usize,
    /// `output NAME` or `state NAME`.
    pub tensor: String,
    #[serde(serialize_with = "crate::report::dtype")]
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub bound: Bound,
    /// The typical magnitude (root-mean-square of the finite expected values).
    #[serde(serialize_with = "crate::report::float")]
    pub typical: f64,
    /// The largest `|got - expected|` over elements where both are finite.
    #[serde(serialize_with = "crate::report::float")]
    pub max_abs: f64,
    /// The largest `|got - expected| / |expected|` over the same elements (infinite where the
    /// expected value is 0 and the got value is not).
    #[serde(serialize_with = "crate::report::float")]
    pub max_rel: f64,
    /// The largest error as a fraction of the error allowed at that element (at most 1 for a
    /// pass; 0 under an exact bound when all match).
    #[serde(serialize_with = "crate::report::float")]
    pub max_ratio: f64,
    /// How many elements failed.
    pub bad: usize,
    pub first_bad: Option<Mismatch>,
    /// A reason the tensor as a whole is wrong (dtype, dims), else `None`.
    pub malformed: Option<String>,
}

impl TensorCheck {
    pub fn passed(&self) -> bool {
        self.bad == 0 && self.malformed.is_none()
    }
}

/// The coordinates of row-major element `flat` of `dims`.
pub fn coords(mut flat: usize, dims: &[u64]) -> Vec<u64> {
    let mut index = vec![0u64; dims.len()];
    for (i, &d) in dims.iter().enumerate().rev() {
        if d > 0 {
            index[i] = flat as u64 % d;
            flat /= d as usize;
        }
    }
    index
}

/// Whether `v` is a value of `dtype` (any NaN for floats; integers compared by value, so that
/// `-0.0` counts as 0).
fn representable(dtype: DType, v: f64) -> bool {
    if v.is_nan() {
        return dtype.is_float();
    }
    dtype.round_value(v) == v || dtype.holds(v)
}

/// The expected value of an element whose oracle value is `v` and whose backend value is
/// `got`: `v` rounded to `dtype`. An `f8e5m2` infinity is kept where an op moves it (a load,
/// a select, a constant) and saturates where one rounds it (a cast, arithmetic); the oracle's
/// value does not say which, so the same infinity from the backend is expected too.
fn expected_value(dtype: DType, v: f64, got: f64) -> f64 {
    if dtype == DType::F8E5M2 && v.is_infinite() && got == v {
        v
    } else {
        dtype.round_value(v)
    }
}

/// Compares `got` (from a backend) with `oracle` (the oracle's unrounded value) under `bound`.
pub fn compare(
    run: usize,
    tensor: &str,
    oracle: &F64Tensor,
    got: &F64Tensor,
    bound: Bound,
) -> TensorCheck {
    let dtype = oracle.dtype;
    let mut check = TensorCheck {
        run,
        tensor: tensor.to_string(),
        dtype,
        dims: oracle.dims.clone(),
        bound,
        typical: 0.0,
        max_abs: 0.0,
        max_rel: 0.0,
        max_ratio: 0.0,
        bad: 0,
        first_bad: None,
        malformed: None,
    };
    if got.dtype != dtype || got.dims != oracle.dims || got.data.len() != oracle.data.len() {
        check.malformed = Some(format!(
            "expected {dtype}{:?}, got {}{:?} with {} values",
            oracle.dims,
            got.dtype,
            got.dims,
            got.data.len()
        ));
        return check;
    }
    let expected: Vec<f64> = oracle
        .data
        .iter()
        .zip(&got.data)
        .map(|(&v, &g)| expected_value(dtype, v, g))
        .collect();
    check.typical = typical(&expected);
    let exact = bound.is_exact() || !dtype.is_float();
    for (i, (&e, &g)) in expected.iter().zip(&got.data).enumerate() {
        let why = element_error(dtype, e, g, exact, bound, check.typical);
        if e.is_finite() && g.is_finite() {
            let diff = (g - e).abs();
            check.max_abs = check.max_abs.max(diff);
            if diff > 0.0 {
                check.max_rel = check.max_rel.max(diff / e.abs());
                let allowed = bound.rtol * (e.abs() + check.typical) + bound.floor;
                check.max_ratio = check.max_ratio.max(diff / allowed);
            }
        }
        if let Some(why) = why {
            check.bad += 1;
            if check.first_bad.is_none() {
                check.first_bad = Some(Mismatch {
                    index: i,
                    coords: coords(i, &oracle.dims),
                    expected: e,
                    got: g,
                    why,
                });
            }
        }
    }
    check
}

/// Why `got` does not pass for `expected`, or `None` if it does.
fn element_error(
    dtype: DType,
    expected: f64,
    got: f64,
    exact: bool,
    bound: Bound,
    typical: f64,
) -> Option<&'static str> {
    if !representable(dtype, got) {
        return Some("not a value of the dtype");
    }
    let bound = (!exact).then_some(bound);
    value_mismatch(expected, got, bound, typical).map(|(why, _)| why)
}

/// The root-mean-square of the finite values of `values` (0 when there are none): the typical
/// magnitude a tolerance is relative to.
pub fn typical(values: &[f64]) -> f64 {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return 0.0;
    }
    (finite.iter().map(|v| v * v).sum::<f64>() / finite.len() as f64).sqrt()
}

/// Why `got` does not pass for `expected`, with the difference as a multiple of what is
/// allowed, or `None` when it passes. A NaN matches only a NaN; without a bound the values
/// must be equal; an infinity matches only itself; other values must satisfy
/// `|got - expected| <= rtol * (|expected| + typical) + floor`.
pub fn value_mismatch(
    expected: f64,
    got: f64,
    bound: Option<Bound>,
    typical: f64,
) -> Option<(&'static str, f64)> {
    let mismatch = |why| Some((why, f64::INFINITY));
    match (expected.is_nan(), got.is_nan()) {
        (true, true) => return None,
        (true, false) => return mismatch("expected NaN"),
        (false, true) => return mismatch("unexpected NaN"),
        (false, false) => {}
    }
    if expected == got {
        return None;
    }
    let Some(bound) = bound else {
        return mismatch("not equal");
    };
    if expected.is_infinite() || got.is_infinite() {
        return mismatch("infinity differs");
    }
    let allowed = bound.rtol * (expected.abs() + typical) + bound.floor;
    let diff = (got - expected).abs();
    (diff > allowed).then_some(("outside tolerance", diff / allowed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tolerance::Tolerance;

    fn t(dtype: DType, data: &[f64]) -> F64Tensor {
        F64Tensor {
            dtype,
            dims: vec![data.len() as u64],
            data: data.to_vec(),
        }
    }

    fn check(oracle: &[f64], got: &[f64], tol: Tolerance, dtype: DType) -> TensorCheck {
        compare(
            0,
            "output y",
            &t(dtype, oracle),
            &t(dtype, got),
            tol.bound(dtype, dtype),
        )
    }

    #[test]
    fn the_oracle_is_rounded_to_the_dtype_first() {
        // exp(1) rounded to f16 is what an exact f16 backend returns.
        let e = 1f64.exp();
        let c = check(
            &[e],
            &[DType::F16.round_value(e)],
            Tolerance::EXACT,
            DType::F16,
        );
        assert!(c.passed(), "{c:?}");
        // An f16 value of 70000 is inf.
        let c = check(&[70000.0], &[f64::INFINITY], Tolerance::EXACT, DType::F16);
        assert!(c.passed(), "{c:?}");
    }

    #[test]
    fn an_unexpected_nan_never_passes() {
        let c = check(
            &[1.0, 2.0],
            &[1.0, f64::NAN],
            Tolerance::model(1 << 20),
            DType::F16,
        );
        assert!(!c.passed());
        let bad = c.first_bad.unwrap();
        assert_eq!((bad.index, bad.why), (1, "unexpected NaN"));
        let c = check(&[f64::NAN], &[0.0], Tolerance::model(1 << 20), DType::F32);
        assert_eq!(c.first_bad.unwrap().why, "expected NaN");
        let c = check(
            &[f64::NAN, 1.0],
            &[f64::NAN, 1.0],
            Tolerance::EXACT,
            DType::F32,
        );
        assert!(c.passed());
    }

    #[test]
    fn infinities_must_match() {
        let c = check(
            &[f64::INFINITY],
            &[-f64::INFINITY],
            Tolerance::model(64),
            DType::F32,
        );
        assert_eq!(c.first_bad.unwrap().why, "infinity differs");
        let c = check(&[1e30], &[f64::INFINITY], Tolerance::model(64), DType::F32);
        assert!(!c.passed());
    }

    #[test]
    fn values_the_dtype_cannot_hold_fail() {
        let c = check(&[1.0], &[1.0 + 1e-6], Tolerance::ELEMENTWISE, DType::F16);
        assert_eq!(c.first_bad.unwrap().why, "not a value of the dtype");
        let c = check(&[3.0], &[3.5], Tolerance::model(64), DType::I32);
        assert_eq!(c.first_bad.unwrap().why, "not a value of the dtype");
    }

    #[test]
    fn integers_are_exact_whatever_the_class() {
        let c = check(&[7.0], &[8.0], Tolerance::model(1 << 20), DType::I32);
        assert_eq!(c.first_bad.unwrap().why, "not equal");
        let c = check(&[0.0], &[-0.0], Tolerance::EXACT, DType::I8);
        assert!(c.passed());
    }

    #[test]
    fn floats_within_the_bound_pass_and_outside_fail() {
        let u = 2f64.powi(-24);
        let c = check(
            &[1.0, 1.0],
            &[1.0 + 2.0 * u, 1.0],
            Tolerance::ELEMENTWISE,
            DType::F32,
        );
        assert!(c.passed(), "{c:?}");
        let c = check(
            &[1.0, 1.0],
            &[1.0 + 64.0 * u, 1.0],
            Tolerance::ELEMENTWISE,
            DType::F32,
        );
        assert!(!c.passed());
        assert_eq!(c.first_bad.as_ref().unwrap().why, "outside tolerance");
        assert!((c.max_abs - 64.0 * u).abs() < 1e-12);
    }

    #[test]
    fn wrong_shapes_are_malformed() {
        let oracle = t(DType::F32, &[1.0, 2.0]);
        let got = t(DType::F32, &[1.0]);
        let bound = Tolerance::EXACT.bound(DType::F32, DType::F32);
        let c = compare(0, "output y", &oracle, &got, bound);
        assert!(c.malformed.is_some() && !c.passed());
    }
}
