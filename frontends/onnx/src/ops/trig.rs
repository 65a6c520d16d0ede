//! Inverse and hyperbolic trigonometry: `Atan`, `Asin`, `Acos`, `Tan`, `Sinh`, `Cosh`, `Asinh`,
//! `Acosh` and `Atanh`, composed from tir's `exp`, `log`, `sqrt`, `sin`, `cos`, division and
//! selects (tir has no atan, expm1 or log1p).
//!
//! Takes a float tensor (16-bit floats computed in f32 and rounded once). Guarantees: within a
//! few ulps of the function over its whole domain in f32 and f64 (about 2e-7 relative in f32):
//! `atan` by Cephes' range reduction and polynomial (f32) or rational function (f64); the others
//! from it, `exp` and `log` in forms that avoid cancellation near 0 and overflow before the
//! result does. NaN outside the domain (as NumPy, ONNX's reference), infinities where the
//! function has them. A signed zero in comes out as +0 for the odd functions.

use super::{cast_to, compute_dtype, Cx, Res};
use crate::state::Value;
use crate::unsupported;
use std::f64::consts::{FRAC_PI_2, FRAC_PI_4, LN_2};
use tir_graph::{DType, Tensor};

pub(super) fn trig(cx: &mut Cx) -> Res<Vec<Value>> {
    let x = cx.tensor(0)?;
    let dtype = x.dtype();
    if !dtype.is_float() {
        return Err(unsupported(format!("{} of {dtype}", cx.op())));
    }
    let w = cast_to(&x, compute_dtype(dtype))?;
    let y = match cx.op() {
        "Atan" => atan(&w)?,
        "Asin" => asin(&w)?,
        "Acos" => acos(&w)?,
        "Tan" => w.sin()?.div(&w.cos()?)?,
        "Sinh" => sinh(&w)?,
        "Cosh" => cosh(&w)?,
        "Asinh" => asinh(&w)?,
        "Acosh" => acosh(&w)?,
        "Atanh" => atanh(&w)?,
        other => unreachable!("{other} is not a trigonometric op"),
    };
    Ok(vec![cast_to(&y, dtype)?.into()])
}

/// A scalar of `t`'s dtype.
fn c(t: &Tensor, v: f64) -> Res<Tensor> {
    Ok(t.builder().scalar(t.dtype(), v)?)
}

/// `r` with the sign of `x` (`-r` where `x < 0`; NaN stays NaN).
fn with_sign_of(x: &Tensor, r: &Tensor) -> Res<Tensor> {
    Ok(x.lt(&c(x, 0.0)?)?.select(&r.neg()?, r)?)
}

/// The polynomial `coeffs[0] z^n + ... + coeffs[n]`, by Horner's rule.
fn horner(z: &Tensor, coeffs: &[f64]) -> Res<Tensor> {
    let mut acc = c(z, coeffs[0])?;
    for &k in &coeffs[1..] {
        acc = acc.mul(z)?.add_scalar(k)?;
    }
    Ok(acc)
}

/// Cephes' atan: `|x|` reduced to `|t| <= tan(pi/8)` (f32) or `<= 0.66` (f64) by
/// `atan(a) = pi/2 - atan(1/a)` above `tan(3pi/8)` and `pi/4 + atan((a-1)/(a+1))` between, then
/// an odd polynomial (f32) or rational function (f64) of `t`, fitted to the dtype's precision.
fn atan(x: &Tensor) -> Res<Tensor> {
    let a = x.abs()?;
    let f64_ = x.dtype() == DType::F64;
    let big = a.gt(&c(x, 2.414_213_562_373_095)?)?;
    let mid_from = if f64_ { 0.66 } else { 0.414_213_562_373_095 };
    let mid = a.gt(&c(x, mid_from)?)?;
    let one = c(x, 1.0)?;
    let t = big.select(
        &one.neg()?.div(&a)?,
        &mid.select(&a.sub(&one)?.div(&a.add(&one)?)?, &a)?,
    )?;
    let z = t.mul(&t)?;
    let p = if f64_ {
        // Cephes atan.c; MOREBITS adds the part of pi/2 that f64 misses.
        const P: [f64; 5] = [
            -8.750_608_600_031_904e-1,
            -1.615_753_718_733_365e1,
            -7.500_855_792_314_705e1,
            -1.228_866_684_490_136e2,
            -6.485_021_904_942_025e1,
        ];
        const Q: [f64; 6] = [
            1.0,
            2.485_846_490_142_306e1,
            1.650_270_098_316_988_5e2,
            4.328_810_604_912_903e2,
            4.853_903_996_359_137e2,
            1.945_506_571_482_614e2,
        ];
        const MOREBITS: f64 = 6.123_233_995_736_766e-17;
        let r = z.mul(&horner(&z, &P)?)?.div(&horner(&z, &Q)?)?;
        let extra = big.select(
            &c(x, MOREBITS)?,
            &mid.select(&c(x, 0.5 * MOREBITS)?, &c(x, 0.0)?)?,
        )?;
        t.mul(&r)?.add(&t)?.add(&extra)?
    } else {
        // Cephes atanf.c.
        const P: [f64; 4] = [
            8.053_744_495_38e-2,
            -1.387_768_560_32e-1,
            1.997_771_064_78e-1,
            -3.333_294_915_39e-1,
        ];
        horner(&z, &P)?.mul(&z)?.mul(&t)?.add(&t)?
    };
    let base = big.select(
        &c(x, FRAC_PI_2)?,
        &mid.select(&c(x, FRAC_PI_4)?, &c(x, 0.0)?)?,
    )?;
    with_sign_of(x, &base.add(&p)?)
}

/// `sqrt((1 - x)(1 + x))`: `sqrt(1 - x^2)` without the cancellation near `|x| = 1`; NaN past it.
fn cos_of_asin(x: &Tensor) -> Res<Tensor> {
    let one = c(x, 1.0)?;
    Ok(one.sub(x)?.mul(&one.add(x)?)?.sqrt()?)
}

/// `atan(x / sqrt(1 - x^2))`; `+-1` gives `+-inf` in, `+-pi/2` out.
fn asin(x: &Tensor) -> Res<Tensor> {
    atan(&x.div(&cos_of_asin(x)?)?)
}

/// `2 atan(sqrt((1 - x) / (1 + x)))`: no cancellation near `x = 1`, where `pi/2 - asin` has it.
fn acos(x: &Tensor) -> Res<Tensor> {
    let one = c(x, 1.0)?;
    let q = one.sub(x)?.div(&one.add(x)?)?.sqrt()?;
    Ok(atan(&q)?.mul_scalar(2.0)?)
}

/// `log(1 + u)` accurate near 0 (Goldberg's form: the rounding of `1 + u` is divided out).
fn log1p(u: &Tensor) -> Res<Tensor> {
    let w = u.add_scalar(1.0)?;
    let d = w.add_scalar(-1.0)?;
    let scaled = w.log()?.mul(&u.div(&d)?)?;
    let finite = d.eq(&c(u, 0.0)?)?.select(u, &scaled)?;
    // `u = inf` makes `u / d` NaN.
    Ok(w.eq(&c(u, f64::INFINITY)?)?.select(&w, &finite)?)
}

/// `exp(a) - 1` accurate near 0 (Kahan's form), for `0 <= a < 1`.
fn expm1_small(a: &Tensor) -> Res<Tensor> {
    let w = a.exp()?;
    let d = w.add_scalar(-1.0)?;
    let scaled = d.mul(a)?.div(&w.log()?)?;
    Ok(d.eq(&c(a, 0.0)?)?.select(a, &scaled)?)
}

/// `h * h / 2` and `1 / (2 h h)` for `h = exp(|x| / 2)`: `e^|x| / 2` and `e^-|x| / 2` that
/// overflow only where the result does.
fn half_exps(x: &Tensor) -> Res<(Tensor, Tensor)> {
    let h = x.abs()?.mul_scalar(0.5)?.exp()?;
    let up = h.mul_scalar(0.5)?.mul(&h)?;
    let down = c(x, 0.5)?.div(&h)?.div(&h)?;
    Ok((up, down))
}

/// `(e^a - e^-a) / 2` for `a = |x| >= 1/2`; below, `(u + u / (u + 1)) / 2` with
/// `u = expm1(a)`, free of the cancellation near 0. The sign of `x` is put back.
fn sinh(x: &Tensor) -> Res<Tensor> {
    let a = x.abs()?;
    let (up, down) = half_exps(x)?;
    let large = up.sub(&down)?;
    let small_a = a.minimum(&c(x, 0.5)?)?;
    let u = expm1_small(&small_a)?;
    let small = u.add(&u.div(&u.add_scalar(1.0)?)?)?.mul_scalar(0.5)?;
    let r = a.lt(&c(x, 0.5)?)?.select(&small, &large)?;
    with_sign_of(x, &r)
}

fn cosh(x: &Tensor) -> Res<Tensor> {
    let (up, down) = half_exps(x)?;
    Ok(up.add(&down)?)
}

/// From `|x| = 2^28` on, `sqrt(x^2 + 1) = |x|` to f64's precision: `log(2|x|)` is the value,
/// and `x^2` would overflow for larger `x`.
const HUGE: f64 = 268_435_456.0;

/// `log(2a)`, computed as `log(a) + ln 2` so `2a` cannot overflow.
fn log_twice(a: &Tensor) -> Res<Tensor> {
    Ok(a.log()?.add_scalar(LN_2)?)
}

/// `log1p(a + a^2 / (1 + sqrt(1 + a^2)))` for `a = |x|` (equal to `log(a + sqrt(a^2 + 1))`,
/// accurate near 0), `log(2a)` for huge `a`; the sign of `x` put back.
fn asinh(x: &Tensor) -> Res<Tensor> {
    let a = x.abs()?;
    let a2 = a.mul(&a)?;
    let root = a2.add_scalar(1.0)?.sqrt()?.add_scalar(1.0)?;
    let small = log1p(&a.add(&a2.div(&root)?)?)?;
    let r = a.ge(&c(x, HUGE)?)?.select(&log_twice(&a)?, &small)?;
    with_sign_of(x, &r)
}

/// `log1p(t + sqrt(2t + t^2))` for `t = x - 1` (accurate near 1), `log(2x)` for huge `x`; NaN
/// below 1 (below -1 the root is real, so the domain is checked, not left to the root).
fn acosh(x: &Tensor) -> Res<Tensor> {
    let t = x.add_scalar(-1.0)?;
    let root = t.mul_scalar(2.0)?.add(&t.mul(&t)?)?.sqrt()?;
    let small = log1p(&t.add(&root)?)?;
    let r = x.ge(&c(x, HUGE)?)?.select(&log_twice(x)?, &small)?;
    Ok(x.lt(&c(x, 1.0)?)?.select(&c(x, f64::NAN)?, &r)?)
}

/// `log1p(2a / (1 - a)) / 2` for `a = |x|`: `log((1 + a) / (1 - a)) / 2` without the
/// cancellation near 0 (and, on `|x|`, without `1 + u` cancelling near `x = -1`); the sign of
/// `x` put back. `+-1` give `+-inf`, NaN past them.
fn atanh(x: &Tensor) -> Res<Tensor> {
    let a = x.abs()?;
    let u = a.mul_scalar(2.0)?.div(&c(x, 1.0)?.sub(&a)?)?;
    with_sign_of(x, &log1p(&u)?.mul_scalar(0.5)?)
}
