//! The two 8-bit float formats ([`DType::F8E4M3`], [`DType::F8E5M2`]): their encodings and the
//! one rounding rule every value of theirs goes through.
//!
//! **The rule** (a cast to an f8 dtype, an f8 result of arithmetic): round to
//! nearest, ties to even, from the exact value; a value whose magnitude is past the largest
//! finite one, infinities included, becomes the largest finite value of its sign; NaN stays
//! NaN; -0 stays -0. This is what the GPU's conversion does without extra instructions: Tile
//! IR's `ftof` rounds to nearest even (its only mode for f8 results), and the PTX conversion
//! it becomes on sm_89 and later, `cvt.rn.satfinite.{e4m3x2,e5m2x2}.{f32,f16x2}`, is
//! saturating by definition (`.satfinite` is not optional there). It is also ONNX's `Cast`
//! with `saturate=1` (its default) and NVIDIA's `__NV_SATFINITE`. So no cast or arithmetic
//! produces an `f8e5m2` infinity; it comes from memory or from a constant, which stores the
//! values its dtype holds unchanged ([`crate::DType::const_value`]).
//!
//! Values are held as `f64` (every f8 value is one exactly); [`Float8::to_bits`] and
//! [`Float8::from_bits`] cross to and from the byte in memory. NaN is stored as `0x7F` (with
//! its sign), which is NaN in both formats.
//!
//! [`DType::F8E4M3`]: crate::DType::F8E4M3
//! [`DType::F8E5M2`]: crate::DType::F8E5M2

/// One `f8e4m3` element, as its byte in memory (a [`crate::Element`] of host tensors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// One `f8e5m2` element, as its byte in memory (a [`crate::Element`] of host tensors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

impl F8E4M3 {
    /// `value` rounded by the module's rule.
    pub fn from_f64(value: f64) -> Self {
        F8E4M3(E4M3.to_bits(E4M3.round(value)))
    }
    /// The element's value, exactly (NaN for the NaN byte).
    pub fn to_f64(self) -> f64 {
        E4M3.from_bits(self.0)
    }
}

impl F8E5M2 {
    /// `value` rounded by the module's rule.
    pub fn from_f64(value: f64) -> Self {
        F8E5M2(E5M2.to_bits(E5M2.round(value)))
    }
    /// `value` as stored in memory or in a constant: rounded by the rule, except that an
    /// infinity, an E5M2 value, is kept.
    pub fn from_value(value: f64) -> Self {
        if value.is_infinite() {
            F8E5M2(E5M2.to_bits(value))
        } else {
            F8E5M2::from_f64(value)
        }
    }
    /// The element's value, exactly (infinities and NaN included).
    pub fn to_f64(self) -> f64 {
        E5M2.from_bits(self.0)
    }
}

/// An 8-bit float format: sign, `exp_bits` exponent bits, `man_bits` mantissa bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Float8 {
    /// Exponent bits.
    pub exp_bits: u32,
    /// Mantissa bits, without the implicit leading one.
    pub man_bits: u32,
    /// The exponent bias: a normal number's value is `2^(exponent - bias) · 1.mantissa`.
    pub bias: i32,
    /// The largest finite value.
    pub max: f64,
    /// Whether an all-ones exponent with a zero mantissa is infinity (IEEE-like, E5M2) rather
    /// than a finite value (E4M3FN, whose only NaN is all ones).
    pub has_inf: bool,
}

/// OCP E4M3FN: bias 7, no infinities, NaN = S.1111.111, largest finite 448.
pub const E4M3: Float8 = Float8 {
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    max: 448.0,
    has_inf: false,
};

/// OCP E5M2: bias 15, IEEE-like (infinities S.11111.00, NaNs), largest finite 57344.
pub const E5M2: Float8 = Float8 {
    exp_bits: 5,
    man_bits: 2,
    bias: 15,
    max: 57344.0,
    has_inf: true,
};

const NAN_BITS: u8 = 0x7F;

impl Float8 {
    /// The exponent of the smallest normal value (`1 - bias`).
    fn emin(self) -> i32 {
        1 - self.bias
    }

    /// The smallest positive (subnormal) value.
    pub fn min_subnormal(self) -> f64 {
        pow2(self.emin() - self.man_bits as i32)
    }

    /// `value` rounded by the rule of the module doc.
    #[inline]
    pub fn round(self, value: f64) -> f64 {
        if value.is_nan() {
            return value;
        }
        let a = value.abs();
        if a >= self.max {
            return self.max.copysign(value);
        }
        // The spacing of the values around `a`: that of its binade, or of the subnormals.
        let ulp = pow2(binade(a).max(self.emin()) - self.man_bits as i32);
        // Scaling by a power of two is exact, so this rounds the exact value once.
        ((a / ulp).round_ties_even() * ulp).copysign(value)
    }

    /// The byte holding `value`, which must be a value of this format (already rounded).
    pub fn to_bits(self, value: f64) -> u8 {
        let sign = u8::from(value.is_sign_negative()) << 7;
        let a = value.abs();
        if a.is_nan() {
            return sign | NAN_BITS;
        }
        if a.is_infinite() {
            // Only E5M2 holds infinities; E4M3 would have saturated.
            return sign | if self.has_inf { 0x7C } else { 0x7E };
        }
        let m = self.man_bits as i32;
        let e = binade(a).max(self.emin());
        let scaled = (a / pow2(e - m)) as u32; // 1.mmm (or 0.mmm) times 2^m
        let exp = if a < pow2(self.emin()) {
            0
        } else {
            (e + self.bias) as u32
        };
        sign | ((exp << m) | (scaled & ((1 << m) - 1))) as u8
    }

    /// The value of the byte `bits`.
    pub fn from_bits(self, bits: u8) -> f64 {
        let m = self.man_bits;
        let exp = i32::from((bits >> m) & ((1 << self.exp_bits) - 1));
        let man = f64::from(bits & ((1 << m) - 1));
        let top = (1 << self.exp_bits) - 1;
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let magnitude = if self.has_inf && exp == top {
            if man == 0.0 {
                f64::INFINITY
            } else {
                f64::NAN
            }
        } else if !self.has_inf && bits & 0x7F == NAN_BITS {
            f64::NAN
        } else if exp == 0 {
            man * self.min_subnormal()
        } else {
            (1.0 + man / f64::from(1u32 << m)) * pow2(exp - self.bias)
        };
        sign * magnitude
    }
}

/// 2^`e` for the small exponents of these formats.
fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}

/// The exponent of `a`'s binade (`floor(log2 a)`) for a positive normal `f64`; very negative
/// for zero and subnormal `f64`s, which lie far below every f8 value.
fn binade(a: f64) -> i32 {
    ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_through_its_value() {
        for format in [E4M3, E5M2] {
            for bits in 0..=255u8 {
                let v = format.from_bits(bits);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(format.to_bits(v), bits, "{format:?} {v}");
                // Rounding keeps every finite value; infinities saturate (the rule).
                if !v.is_infinite() {
                    assert_eq!(
                        format.round(v).to_bits(),
                        v.to_bits(),
                        "{format:?} {bits:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_edges_of_e4m3() {
        let f = E4M3;
        assert_eq!(f.from_bits(0x7E), 448.0);
        assert!(f.from_bits(0x7F).is_nan() && f.from_bits(0xFF).is_nan());
        assert_eq!(f.from_bits(0x78), 256.0, "S.1111.000 is finite in E4M3FN");
        assert_eq!(f.min_subnormal(), 2f64.powi(-9));
        assert_eq!(f.from_bits(0x01), 2f64.powi(-9));
        // Past the largest finite value, infinities included: saturated.
        assert_eq!(f.round(449.0), 448.0);
        assert_eq!(f.round(1e30), 448.0);
        assert_eq!(f.round(f64::INFINITY), 448.0);
        assert_eq!(f.round(f64::NEG_INFINITY), -448.0);
        // Ties to even: 17 lies between 16 and 18 (step 2 in [16, 32)); 19 between 18 and 20.
        assert_eq!(f.round(17.0), 16.0);
        assert_eq!(f.round(19.0), 20.0);
        assert_eq!(f.round(17.000001), 18.0);
        // Subnormals: half the smallest rounds to zero (even), a little more to the smallest.
        let tiny = f.min_subnormal();
        assert_eq!(f.round(tiny / 2.0), 0.0);
        assert_eq!(f.round(tiny * 0.51), tiny);
        assert_eq!(f.round(tiny * 1.5), 2.0 * tiny);
        assert!(f.round(-tiny / 4.0).is_sign_negative());
        assert_eq!(f.to_bits(-0.0), 0x80);
        assert!(f.round(f64::NAN).is_nan());
        assert_eq!(f.to_bits(f64::NAN), 0x7F);
    }

    #[test]
    fn the_edges_of_e5m2() {
        let f = E5M2;
        assert_eq!(f.from_bits(0x7B), 57344.0);
        assert_eq!(f.from_bits(0x7C), f64::INFINITY);
        assert_eq!(f.from_bits(0xFC), f64::NEG_INFINITY);
        assert!(f.from_bits(0x7D).is_nan());
        assert_eq!(f.min_subnormal(), 2f64.powi(-16));
        assert_eq!(f.round(61440.0), 57344.0);
        assert_eq!(f.round(f64::INFINITY), 57344.0);
        assert_eq!(f.round(-1e9), -57344.0);
        // Step 1 in [4, 8): 4.5 ties to 4 (even), 5.5 to 6.
        assert_eq!(f.round(4.5), 4.0);
        assert_eq!(f.round(5.5), 6.0);
        assert_eq!(f.round(2f64.powi(-17)), 0.0);
        assert_eq!(f.round(2f64.powi(-17) * 3.0), 2f64.powi(-15));
        assert_eq!(f.to_bits(f64::NAN), 0x7F);
        assert_eq!(f.to_bits(-f64::NAN), 0xFF);
    }

    #[test]
    fn rounding_agrees_with_f16_where_e5m2_is_its_top_byte() {
        // An E5M2 value is an f16 whose low byte is zero: rounding the f16 to its top byte
        // (ties to even) must agree with rounding the exact value, away from double rounding.
        for bits in 0..0x7B00u16 {
            let h = half::f16::from_bits(bits).to_f64();
            let expected = {
                let low = bits & 0xFF;
                let high = bits >> 8;
                let up = low > 0x80 || (low == 0x80 && high & 1 == 1);
                half::f16::from_bits((high + u16::from(up)) << 8).to_f64()
            };
            assert_eq!(E5M2.round(h), expected.min(57344.0), "{bits:#x}");
        }
    }
}
