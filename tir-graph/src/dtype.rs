//! Element types of tensors.

use crate::float8::{self, Float8};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DType {
    /// `bool`, stored as one byte, 0 or 1.
    Bool,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// IEEE half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`): f32's exponent range, 8 bits of precision.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    // Appended after the rest: `.tir` files and packages store the variant index.
    /// 16-bit signed integer.
    I16,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer (constants hold values up to `i64::MAX`).
    U64,
    /// OCP FP8 E4M3FN: sign, 4 exponent bits, 3 mantissa bits, bias 7, no infinities, NaN =
    /// 0x7F/0xFF, largest finite 448. Values are rounded to it by one rule ([`crate::float8`]):
    /// to nearest, ties to even; magnitudes past 448, infinities included, saturate to ±448;
    /// NaN stays NaN. Arithmetic computes in `f32` and rounds its result so, as for `f16`.
    F8E4M3,
    /// OCP FP8 E5M2: sign, 5 exponent bits, 2 mantissa bits, bias 15, IEEE-like (infinities,
    /// NaNs), largest finite 57344. Rounded by the same rule as [`DType::F8E4M3`]: to nearest
    /// even, saturating to ±57344 (an infinity too: only a load or a constant yields an `f8e5m2`
    /// infinity).
    F8E5M2,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 15] = [
        DType::Bool,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I16,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// The two 8-bit float dtypes.
    pub const FLOAT8: [DType; 2] = [DType::F8E4M3, DType::F8E5M2];

    /// The integer dtypes, narrowest first, signed before unsigned.
    pub const INTS: [DType; 8] = [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// The name used in the text form and in error messages (`f16`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }

    /// Bytes one element occupies in device memory.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// Any float dtype, the f8s included.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 | DType::F8E4M3 | DType::F8E5M2
        )
    }

    /// The format of an 8-bit float dtype.
    pub fn float8(self) -> Option<Float8> {
        match self {
            DType::F8E4M3 => Some(float8::E4M3),
            DType::F8E5M2 => Some(float8::E5M2),
            _ => None,
        }
    }

    /// A float narrower than `f32` (`f16`, `bf16`, the f8s): arithmetic on it computes in
    /// `f32` and rounds the result to the dtype.
    pub fn is_narrow_float(self) -> bool {
        self.is_float() && self.size_bytes() < 4
    }

    /// Signed or unsigned integer (bool is not an integer here).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// `i8`, `i16`, `i32` or `i64`.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// `u8`, `u16`, `u32` or `u64`.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Bits of an integer dtype (8 for bool, which is stored in a byte).
    pub fn bits(self) -> u32 {
        8 * self.size_bytes() as u32
    }

    /// Integer or float: the dtypes arithmetic accepts.
    pub fn is_numeric(self) -> bool {
        self.is_int() || self.is_float()
    }

    /// Rounds `value` to the nearest value this dtype can hold, the way a constant of this dtype
    /// stores it: floats round to their precision, integers truncate toward zero and wrap, bool is
    /// `value != 0`. Used so that a constant's stored values are exactly representable.
    #[inline]
    pub fn round_value(self, value: f64) -> f64 {
        match self {
            DType::Bool => f64::from(u8::from(value != 0.0)),
            // Through i128 so that values past the i64 range wrap instead of saturating.
            DType::I8 => f64::from(value as i128 as i8),
            DType::U8 => f64::from(value as i128 as u8),
            DType::I32 => f64::from(value as i128 as i32),
            DType::I64 => value as i128 as i64 as f64,
            DType::I16 => f64::from(value as i128 as i16),
            DType::U16 => f64::from(value as i128 as u16),
            DType::U32 => f64::from(value as i128 as u32),
            DType::U64 => u64_value(value as i128 as u64),
            DType::F16 => f64::from(half::f16::from_f64(value)),
            DType::BF16 => f64::from(half::bf16::from_f64(value)),
            DType::F32 => f64::from(value as f32),
            DType::F64 => value,
            DType::F8E4M3 => float8::E4M3.round(value),
            DType::F8E5M2 => float8::E5M2.round(value),
        }
    }

    /// Whether `value` is a value of this dtype, stored unchanged: what [`DType::round_value`]
    /// keeps, NaN in a float dtype, and `f8e5m2`'s infinities (which its rounding saturates,
    /// though the dtype holds them).
    pub fn holds(self, value: f64) -> bool {
        (value.is_nan() && self.is_float())
            || (value.is_infinite() && self == DType::F8E5M2)
            || self.round_value(value).to_bits() == value.to_bits()
    }

    /// `value` as a constant of this dtype stores it: unchanged where the dtype holds it
    /// ([`DType::holds`]), else rounded as a cast rounds ([`DType::round_value`]). The two differ
    /// only for an `f8e5m2` infinity, which a constant keeps.
    pub fn const_value(self, value: f64) -> f64 {
        if value.is_infinite() && self == DType::F8E5M2 {
            value
        } else {
            self.round_value(value)
        }
    }

    /// [`DType::round_value`] of each of `values`, in place: the dtype is chosen once, then each
    /// arm runs a loop with the dtype a constant.
    pub fn round_values(self, values: &mut [f64]) {
        #[inline(always)]
        fn each(dtype: DType, values: &mut [f64]) {
            for v in values {
                *v = dtype.round_value(*v);
            }
        }
        match self {
            DType::Bool => each(DType::Bool, values),
            DType::I8 => each(DType::I8, values),
            DType::U8 => each(DType::U8, values),
            DType::I32 => each(DType::I32, values),
            DType::I64 => each(DType::I64, values),
            DType::I16 => each(DType::I16, values),
            DType::U16 => each(DType::U16, values),
            DType::U32 => each(DType::U32, values),
            DType::U64 => each(DType::U64, values),
            DType::F16 => each(DType::F16, values),
            DType::BF16 => each(DType::BF16, values),
            DType::F32 => each(DType::F32, values),
            DType::F64 => {}
            DType::F8E4M3 => each(DType::F8E4M3, values),
            DType::F8E5M2 => each(DType::F8E5M2, values),
        }
    }
}

/// The `f64` that holds the `u64` value `v` where values of `u64` are held as `f64` (the
/// oracle, constants, test data): the nearest, except that values past the largest `f64` below
/// 2^64 (2^64 − 2048) are held as that one, never as 2^64, which no `u64` is.
pub fn u64_value(v: u64) -> f64 {
    const LARGEST: f64 = 18_446_744_073_709_549_568.0;
    (v as f64).min(LARGEST)
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The text was not the name of a dtype.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}` (expected one of bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, f8e4m3, f8e5m2)")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| UnknownDType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>(), Ok(d));
        }
        assert!("f8".parse::<DType>().is_err());
    }

    #[test]
    fn round_value_matches_dtype_precision() {
        assert_eq!(DType::F16.round_value(1.0 + 1e-4), 1.0);
        assert_eq!(DType::I8.round_value(130.0), -126.0);
        assert_eq!(DType::U8.round_value(-1.0), 255.0);
        assert_eq!(DType::Bool.round_value(-3.0), 1.0);
        assert_eq!(DType::F64.round_value(0.1), 0.1);
        assert_eq!(DType::I64.round_value(2f64.powi(63)), -(2f64.powi(63)));
        assert_eq!(DType::I16.round_value(32768.0), -32768.0);
        assert_eq!(DType::U16.round_value(-1.0), 65535.0);
        assert_eq!(DType::U32.round_value(-1.0), 4294967295.0);
        assert_eq!(DType::U64.round_value(2f64.powi(63)), 2f64.powi(63));
        assert_eq!(DType::U64.round_value(-1.0), 18_446_744_073_709_549_568.0);
        assert_eq!(DType::F8E4M3.round_value(1000.0), 448.0);
        assert_eq!(DType::F8E4M3.round_value(0.3), 0.3125);
        assert_eq!(DType::F8E5M2.round_value(f64::NEG_INFINITY), -57344.0);
        assert_eq!(DType::F8E5M2.round_value(0.3), 0.3125);
    }

    #[test]
    fn round_values_rounds_each_as_round_value() {
        let values = [
            1.0 + 1e-4,
            130.7,
            -1.5,
            0.1,
            2f64.powi(63),
            f64::NAN,
            -3.0,
            65520.0,
        ];
        for dtype in DType::ALL {
            let mut rounded = values;
            dtype.round_values(&mut rounded);
            for (r, &v) in rounded.iter().zip(&values) {
                let one = dtype.round_value(v);
                assert!(r.to_bits() == one.to_bits(), "{dtype} of {v}: {r} vs {one}");
            }
        }
    }
}
