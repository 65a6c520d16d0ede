//! The element semantics of the tile IR's compute ops in Tile IR: the same results as the
//! oracle's (`tir_graph::eval`) up to floating-point rounding. 16-bit and 8-bit floats compute
//! in `f32` and round back after each op, except where the native 16-bit op gives the same bits
//! ([`native_16_bit`]); integers wrap; unsigned dtypes compare, divide, shift and extend unsigned.

use super::emit::{is_float, reg_scalar, Emitter, Pred};
use super::CodegenError;
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{Attribute, ScalarType, Type, Value};
use tir_graph::{BinaryOp, DType, ReduceOp, UnaryOp};
use tir_lower::lower::emit::identity;

type Res<T> = Result<T, CodegenError>;

fn unsupported(what: String) -> CodegenError {
    CodegenError::Unsupported(what)
}

fn signed(dtype: DType) -> bool {
    dtype.is_signed_int()
}

/// The type arithmetic on `dtype` runs in.
fn compute_scalar(dtype: DType) -> ScalarType {
    match dtype {
        d if d.is_narrow_float() => ScalarType::F32,
        d => reg_scalar(d),
    }
}

/// The opcode of `op` on 16-bit float tiles when it may run natively rather than widened to
/// `f32`: add, subtract and multiply are correctly rounded either way (`f32` holds 2p + 2 bits
/// of an f16 or bf16 result, so rounding twice equals rounding once), and the native op skips
/// three conversions per element and packs two elements per instruction.
fn native_16_bit(op: BinaryOp, dtype: DType) -> Option<Opcode> {
    match dtype {
        DType::F16 | DType::BF16 => float_arith(op),
        _ => None,
    }
}

/// Runs `f` on `inputs` widened to the compute type of `dtype`; a float result is rounded back
/// to `dtype`.
fn widened(
    e: &mut Emitter,
    dtype: DType,
    inputs: &[Value],
    f: impl FnOnce(&mut Emitter, &[Value]) -> Res<Value>,
) -> Res<Value> {
    let wide = compute_scalar(dtype);
    let xs: Vec<Value> = inputs.iter().map(|&x| e.ftof_if_float(x, wide)).collect();
    let r = f(e, &xs)?;
    Ok(if is_float(e.elem(r)) {
        e.ftof(r, reg_scalar(dtype))
    } else {
        r
    })
}

impl Emitter {
    fn ftof_if_float(&mut self, x: Value, to: ScalarType) -> Value {
        if is_float(self.elem(x)) {
            self.ftof(x, to)
        } else {
            x
        }
    }

    pub(super) fn like(&mut self, x: Value, value: f64) -> Value {
        let shape = self.shape(x);
        let elem = self.elem(x);
        self.constant(elem, value, &shape)
    }

    fn is_nan(&mut self, x: Value) -> Value {
        self.cmpf(Pred::Ne, x, x)
    }

    fn recip(&mut self, x: Value) -> Value {
        let one = self.like(x, 1.0);
        self.float_op(Opcode::DivF, one, x)
    }

    fn sigmoid(&mut self, x: Value) -> Value {
        let neg = self.unary(Opcode::NegF, x, vec![]);
        let ex = self.unary(Opcode::Exp, neg, vec![]);
        let one = self.like(x, 1.0);
        let den = self.float_op(Opcode::AddF, one, ex);
        self.recip(den)
    }

    /// `erf(x)`: to double precision for `f64` tiles ([`Emitter::erf_f64`]), else by Abramowitz
    /// and Stegun 7.1.26 (absolute error below 1.5e-7) from |x| = 0.5 on and its Maclaurin
    /// series below, so that the relative error stays near `f32`'s rounding everywhere.
    fn erf(&mut self, x: Value) -> Value {
        if self.elem(x) == ScalarType::F64 {
            return self.erf_f64(x);
        }
        let ax = self.unary(Opcode::AbsF, x, vec![]);
        let p = self.like(x, 0.327_591_1);
        let one = self.like(x, 1.0);
        let px = self.float_op(Opcode::MulF, p, ax);
        let den = self.float_op(Opcode::AddF, one, px);
        let t = if self.elem(x) == ScalarType::F32 {
            self.div_approx(one, den)
        } else {
            self.recip(den)
        };
        let coeffs = [
            1.061_405_429,
            -1.453_152_027,
            1.421_413_741,
            -0.284_496_736,
            0.254_829_592,
        ];
        let mut poly = self.like(x, coeffs[0]);
        for &c in &coeffs[1..] {
            let cc = self.like(x, c);
            poly = self.fma(poly, t, cc);
        }
        poly = self.float_op(Opcode::MulF, poly, t);
        let x2 = self.float_op(Opcode::MulF, ax, ax);
        let nx2 = self.unary(Opcode::NegF, x2, vec![]);
        let ex = self.unary(Opcode::Exp, nx2, vec![]);
        let tail = self.float_op(Opcode::MulF, poly, ex);
        let pos = self.float_op(Opcode::SubF, one, tail);
        let neg = self.unary(Opcode::NegF, pos, vec![]);
        let zero = self.like(x, 0.0);
        let is_neg = self.cmpf(Pred::Lt, x, zero);
        let far = self.select(is_neg, neg, pos);
        // Near 0 the approximation's absolute error (1.5e-7) is a large relative one: there the
        // Maclaurin series `2/√π x Σ (-x²)^n / (n! (2n+1))` to x^13 (error below 1e-9 relative).
        let x2 = self.float_op(Opcode::MulF, x, x);
        let coeffs = [
            1.0 / 9360.0,
            -1.0 / 1320.0,
            1.0 / 216.0,
            -1.0 / 42.0,
            0.1,
            -1.0 / 3.0,
            1.0,
        ];
        let mut series = self.like(x, coeffs[0]);
        for &c in &coeffs[1..] {
            let cc = self.like(x, c);
            series = self.fma(series, x2, cc);
        }
        let scale = self.like(x, std::f64::consts::FRAC_2_SQRT_PI);
        let sx = self.float_op(Opcode::MulF, scale, x);
        let near = self.float_op(Opcode::MulF, sx, series);
        let half = self.like(x, 0.5);
        let is_near = self.cmpf(Pred::Lt, ax, half);
        self.select(is_near, near, far)
    }

    /// `erf(x)` in `f64`, odd in `x`. Below 3 the series `erf(a) = 2/√π e^(-a²) Σ 2^n a^(2n+1) /
    /// (2n+1)!!` (positive terms, no cancellation; 80 terms converge there); from 3 on,
    /// `erfc(a) = e^(-a²) / (√π f)` with the continued fraction `f = a + (1/2)/(a + 1/(a +
    /// (3/2)/(a + ...)))` evaluated from 60 levels down.
    fn erf_f64(&mut self, x: Value) -> Value {
        let a = self.unary(Opcode::AbsF, x, vec![]);
        let three = self.like(x, 3.0);
        let small = self.float_extreme(false, a, three);
        let large = self.float_extreme(true, a, three);
        let x2 = self.float_op(Opcode::MulF, small, small);
        let (mut term, mut sum) = (small, small);
        for n in 1..=80 {
            let c = self.like(x, 2.0 / (2 * n + 1) as f64);
            let t = self.float_op(Opcode::MulF, term, x2);
            term = self.float_op(Opcode::MulF, t, c);
            sum = self.float_op(Opcode::AddF, sum, term);
        }
        let nx2 = self.unary(Opcode::NegF, x2, vec![]);
        let e = self.unary(Opcode::Exp, nx2, vec![]);
        let scale = self.like(x, std::f64::consts::FRAC_2_SQRT_PI);
        let es = self.float_op(Opcode::MulF, e, scale);
        let erf_small = self.float_op(Opcode::MulF, es, sum);
        let mut f = large;
        for k in (1..=60).rev() {
            let c = self.like(x, f64::from(k) / 2.0);
            let q = self.float_op(Opcode::DivF, c, f);
            f = self.float_op(Opcode::AddF, large, q);
        }
        let l2 = self.float_op(Opcode::MulF, large, large);
        let nl2 = self.unary(Opcode::NegF, l2, vec![]);
        let el = self.unary(Opcode::Exp, nl2, vec![]);
        let sqrt_pi = self.like(x, std::f64::consts::PI.sqrt());
        let den = self.float_op(Opcode::MulF, sqrt_pi, f);
        let erfc = self.float_op(Opcode::DivF, el, den);
        let one = self.like(x, 1.0);
        let erf_large = self.float_op(Opcode::SubF, one, erfc);
        let is_small = self.cmpf(Pred::Lt, a, three);
        let pos = self.select(is_small, erf_small, erf_large);
        let neg = self.unary(Opcode::NegF, pos, vec![]);
        let zero = self.like(x, 0.0);
        let is_neg = self.cmpf(Pred::Lt, x, zero);
        // NaN stays NaN: the comparisons above are false for it and the series keeps it.
        self.select(is_neg, neg, pos)
    }

    /// A float tile to `to` (an integer type) as the oracle converts: truncate toward zero,
    /// then wrap as if through `i128` (NaN is 0; beyond the `i128` range, including the
    /// infinities, saturate there first). Computed on the `f64` value: below 2^63 in magnitude
    /// by `ftoi`; above, from the exponent and mantissa bits (the low 64 bits of `m·2^e`).
    fn float_to_int(&mut self, x: Value, to: ScalarType) -> Value {
        let x = self.ftof(x, ScalarType::F64);
        let i64t = |e: &Emitter| super::emit::tile(ScalarType::I64, &e.shape(x));
        let limit = self.like(x, 2f64.powi(63));
        let a = self.unary(Opcode::AbsF, x, vec![]);
        let fits = self.cmpf(Pred::Lt, a, limit);
        let zero = self.like(x, 0.0);
        let clamped = self.select(fits, x, zero);
        let direct = self.ftoi(clamped, ScalarType::I64, true);
        let ty = i64t(self);
        let bits = self.op1(Opcode::Bitcast, &[x], vec![], ty.clone());
        let c = |e: &mut Emitter, v: i64| {
            let shape = e.shape(x);
            e.constant(ScalarType::I64, v as f64, &shape)
        };
        let shift52 = c(self, 52);
        let shr = |e: &mut Emitter, v: Value, by: Value| {
            e.same(Opcode::ShRI, v, by, vec![("signedness", Attribute::i32(0))])
        };
        let raw_exp = shr(self, bits, shift52);
        let mask11 = c(self, 0x7ff);
        let biased = self.same(Opcode::AndI, raw_exp, mask11, vec![]);
        let bias = c(self, 1075);
        let exp = self.subi(biased, bias);
        let mask52 = c(self, (1i64 << 52) - 1);
        let frac = self.same(Opcode::AndI, bits, mask52, vec![]);
        let hidden = c(self, 1i64 << 52);
        let mantissa = self.same(Opcode::OrI, frac, hidden, vec![]);
        let sixty_four = c(self, 64);
        let in_word = self.cmpi(Pred::Lt, exp, sixty_four, true);
        let zero_i = c(self, 0);
        let shift = self.select(in_word, exp, zero_i);
        let shifted = self.same(
            Opcode::ShLI,
            mantissa,
            shift,
            vec![("overflow", Attribute::i32(0))],
        );
        let low = self.select(in_word, shifted, zero_i);
        let neg_low = self.subi(zero_i, low);
        let is_neg = self.cmpf(Pred::Lt, x, zero);
        let wide = self.select(is_neg, neg_low, low);
        // Past 2^127 (and the infinities) i128 saturates: all ones for +, zero for -.
        let huge = self.like(x, 2f64.powi(127));
        let beyond = self.cmpf(Pred::Ge, a, huge);
        let minus_one = c(self, -1);
        let saturated = self.select(is_neg, zero_i, minus_one);
        let wide = self.select(beyond, saturated, wide);
        let exact = self.select(fits, direct, wide);
        let nan = self.is_nan(x);
        let exact = self.select(nan, zero_i, exact);
        self.int_resize(exact, to, true)
    }

    fn float_unary(&mut self, op: UnaryOp, x: Value) -> Res<Value> {
        let plain = |e: &mut Emitter, opcode| e.unary(opcode, x, vec![]);
        Ok(match op {
            UnaryOp::Neg => plain(self, Opcode::NegF),
            UnaryOp::Abs => plain(self, Opcode::AbsF),
            UnaryOp::Exp => plain(self, Opcode::Exp),
            UnaryOp::Log => plain(self, Opcode::Log),
            UnaryOp::Sin => plain(self, Opcode::Sin),
            UnaryOp::Cos => plain(self, Opcode::Cos),
            UnaryOp::Tanh => plain(self, Opcode::TanH),
            UnaryOp::Floor => plain(self, Opcode::Floor),
            UnaryOp::Ceil => plain(self, Opcode::Ceil),
            UnaryOp::Sqrt => {
                self.unary(Opcode::Sqrt, x, vec![("rounding_mode", Attribute::i32(0))])
            }
            UnaryOp::Rsqrt => {
                let s = self.float_unary(UnaryOp::Sqrt, x)?;
                self.recip(s)
            }
            UnaryOp::Reciprocal => self.recip(x),
            UnaryOp::Sigmoid => self.sigmoid(x),
            UnaryOp::Relu => {
                let zero = self.like(x, 0.0);
                self.float_extreme(true, x, zero)
            }
            UnaryOp::Silu => {
                let s = self.sigmoid(x);
                self.float_op(Opcode::MulF, x, s)
            }
            UnaryOp::Erf => self.erf(x),
            UnaryOp::GeluErf => {
                let r = self.like(x, std::f64::consts::FRAC_1_SQRT_2);
                let xs = self.float_op(Opcode::MulF, x, r);
                let erf = self.erf(xs);
                self.gelu_tail(x, erf)
            }
            UnaryOp::GeluTanh => {
                let c = self.like(x, (2.0 / std::f64::consts::PI).sqrt());
                let k = self.like(x, 0.044_715);
                let x2 = self.float_op(Opcode::MulF, x, x);
                let x3 = self.float_op(Opcode::MulF, x2, x);
                let kx3 = self.float_op(Opcode::MulF, k, x3);
                let inner = self.float_op(Opcode::AddF, x, kx3);
                let arg = self.float_op(Opcode::MulF, c, inner);
                let t = self.unary(Opcode::TanH, arg, vec![]);
                self.gelu_tail(x, t)
            }
            UnaryOp::Not | UnaryOp::BitNot => {
                return Err(unsupported(format!("{} of a float tile", op.name())))
            }
        })
    }

    /// `0.5 * x * (1 + s)`.
    fn gelu_tail(&mut self, x: Value, s: Value) -> Value {
        let one = self.like(x, 1.0);
        let half = self.like(x, 0.5);
        let sum = self.float_op(Opcode::AddF, one, s);
        let hx = self.float_op(Opcode::MulF, half, x);
        self.float_op(Opcode::MulF, hx, sum)
    }

    fn int_unary(&mut self, op: UnaryOp, dtype: DType, x: Value) -> Res<Value> {
        Ok(match op {
            UnaryOp::Neg => {
                let zero = self.like(x, 0.0);
                self.subi(zero, x)
            }
            UnaryOp::Abs if signed(dtype) => self.unary(Opcode::AbsI, x, vec![]),
            UnaryOp::Abs | UnaryOp::Floor | UnaryOp::Ceil => x,
            UnaryOp::Relu => {
                let zero = self.like(x, 0.0);
                self.signed_op(Opcode::MaxI, x, zero, signed(dtype))
            }
            UnaryOp::Not if dtype == DType::Bool => {
                let one = self.like(x, 1.0);
                self.same(Opcode::XOrI, x, one, vec![])
            }
            UnaryOp::BitNot => {
                let ones = self.like(x, -1.0);
                self.same(Opcode::XOrI, x, ones, vec![])
            }
            _ => return Err(unsupported(format!("{op:?} of a {dtype} tile"))),
        })
    }

    /// `x / y` truncating, with `x / 0 = 0` as in the oracle.
    fn int_div(&mut self, dtype: DType, x: Value, y: Value) -> Value {
        let zero = self.like(y, 0.0);
        let one = self.like(y, 1.0);
        let y_zero = self.cmpi(Pred::Eq, y, zero, true);
        let safe = self.select(y_zero, one, y);
        let q = self.divi(x, safe, signed(dtype));
        self.select(y_zero, zero, q)
    }

    /// `x - (x / y) * y` with `int_div`'s quotient: dividing by zero leaves `x`, and the
    /// quotient's wrap (`MIN / -1`) gives 0, as in the oracle.
    fn int_rem(&mut self, dtype: DType, x: Value, y: Value) -> Value {
        let q = self.int_div(dtype, x, y);
        let qy = self.muli(q, y);
        self.subi(x, qy)
    }

    /// `x << y` or `x >> y` (arithmetic for signed dtypes) with the oracle's rule for an amount
    /// outside `0..bits` (0, or the sign fill for a right shift), which the hardware's shifts
    /// do not give: they see the amount modulo the width.
    fn shift(&mut self, right: bool, dtype: DType, x: Value, y: Value) -> Value {
        let zero = self.like(y, 0.0);
        let width = self.like(y, f64::from(dtype.bits()));
        // Compared unsigned, a negative amount is huge: out of range like one past the width.
        let in_range = self.cmpi(Pred::Lt, y, width, false);
        let safe = self.select(in_range, y, zero);
        let (shifted, fill) = if right {
            let s = signed(dtype);
            let shifted = self.same(
                Opcode::ShRI,
                x,
                safe,
                vec![("signedness", Attribute::i32(s as i64))],
            );
            let fill = if s {
                let top = self.like(y, f64::from(dtype.bits() - 1));
                self.same(
                    Opcode::ShRI,
                    x,
                    top,
                    vec![("signedness", Attribute::i32(1))],
                )
            } else {
                self.like(x, 0.0)
            };
            (shifted, fill)
        } else {
            let overflow = vec![("overflow", Attribute::i32(0))];
            (
                self.same(Opcode::ShLI, x, safe, overflow),
                self.like(x, 0.0),
            )
        };
        self.select(in_range, shifted, fill)
    }

    /// Wrapping `base^exp` by squaring (64 steps cover every exponent); a negative exponent
    /// gives 0 except for bases 1 and -1, as in the oracle.
    fn int_pow(&mut self, base: Value, exp: Value) -> Value {
        let ty = self.ty(base);
        let zero = self.like(base, 0.0);
        let one = self.like(base, 1.0);
        let (lo, hi, step) = (
            self.index_const(0),
            self.index_const(i64::from(super::emit::bits(self.elem(base)))),
            self.index_const(1),
        );
        let carried = [ty.clone(), ty.clone(), ty.clone()];
        let mut args = vec![Type::Tile(cutile_ir::ir::TileType {
            shape: vec![],
            element_type: cutile_ir::ir::TileElementType::Scalar(ScalarType::I64),
        })];
        args.extend(carried.iter().cloned());
        let (region, ()) = self.in_region(&args, |e, v| {
            let (acc, b, n) = (v[1], v[2], v[3]);
            let zero = e.like(n, 0.0);
            let one = e.like(n, 1.0);
            let bit = e.same(Opcode::AndI, n, one, vec![]);
            let odd = e.cmpi(Pred::Ne, bit, zero, true);
            let times = e.muli(acc, b);
            let acc = e.select(odd, times, acc);
            let b = e.muli(b, b);
            let n = e.same(
                Opcode::ShRI,
                n,
                one,
                vec![("signedness", Attribute::i32(0))],
            );
            e.op(Opcode::Continue, &[acc, b, n], vec![], vec![]);
        });
        let out = self.region_op(
            Opcode::For,
            &[lo, hi, step, one, base, exp],
            vec![],
            carried.to_vec(),
            region,
        );
        let pow = out[0];
        let neg_exp = self.cmpi(Pred::Lt, exp, zero, true);
        let minus_one = self.like(base, -1.0);
        let base_one = self.cmpi(Pred::Eq, base, one, true);
        let base_m1 = self.cmpi(Pred::Eq, base, minus_one, true);
        let bit = self.same(Opcode::AndI, exp, one, vec![]);
        let odd = self.cmpi(Pred::Ne, bit, zero, true);
        let m1_pow = self.select(odd, minus_one, one);
        let neg = self.select(base_m1, m1_pow, zero);
        let neg = self.select(base_one, one, neg);
        self.select(neg_exp, neg, pow)
    }
}

/// `op x` for a tile of `dtype`.
pub fn unary(e: &mut Emitter, op: UnaryOp, dtype: DType, x: Value) -> Res<Value> {
    if dtype.is_float() {
        widened(e, dtype, &[x], |e, v| e.float_unary(op, v[0]))
    } else {
        e.int_unary(op, dtype, x)
    }
}

/// The Tile IR opcode of a float add, subtract or multiply.
fn float_arith(op: BinaryOp) -> Option<Opcode> {
    match op {
        BinaryOp::Add => Some(Opcode::AddF),
        BinaryOp::Sub => Some(Opcode::SubF),
        BinaryOp::Mul => Some(Opcode::MulF),
        _ => None,
    }
}

fn pred_of(op: BinaryOp) -> Option<Pred> {
    Some(match op {
        BinaryOp::Eq => Pred::Eq,
        BinaryOp::Ne => Pred::Ne,
        BinaryOp::Lt => Pred::Lt,
        BinaryOp::Le => Pred::Le,
        BinaryOp::Gt => Pred::Gt,
        BinaryOp::Ge => Pred::Ge,
        _ => return None,
    })
}

/// `a op b` for operands of `dtype` (comparisons yield bool).
pub fn binary(e: &mut Emitter, op: BinaryOp, dtype: DType, a: Value, b: Value) -> Res<Value> {
    if let Some(opcode) = native_16_bit(op, dtype) {
        return Ok(e.float_op(opcode, a, b));
    }
    if dtype.is_float() {
        return widened(e, dtype, &[a, b], |e, v| {
            let (a, b) = (v[0], v[1]);
            if let Some(p) = pred_of(op) {
                return Ok(e.cmpf(p, a, b));
            }
            if let Some(opcode) = float_arith(op) {
                return Ok(e.float_op(opcode, a, b));
            }
            Ok(match op {
                // f16 quotients round far coarser than the approximation's error, and f16
                // divisors stay below 2^126, where the approximation flushes (bf16's do not).
                BinaryOp::Div if dtype == DType::F16 => e.div_approx(a, b),
                BinaryOp::Div => e.float_op(Opcode::DivF, a, b),
                BinaryOp::Pow => e.same(Opcode::Pow, a, b, vec![]),
                // fmod is exact in any float at least as wide as the operands' own.
                BinaryOp::Rem => e.same(Opcode::RemF, a, b, vec![]),
                BinaryOp::Maximum => e.float_extreme(true, a, b),
                BinaryOp::Minimum => e.float_extreme(false, a, b),
                _ => return Err(unsupported(format!("{op:?} of {dtype} tiles"))),
            })
        });
    }
    if let Some(p) = pred_of(op) {
        return Ok(e.cmpi(p, a, b, signed(dtype)));
    }
    Ok(match op {
        BinaryOp::Add => e.addi(a, b),
        BinaryOp::Sub => e.subi(a, b),
        BinaryOp::Mul => e.muli(a, b),
        BinaryOp::Div => e.int_div(dtype, a, b),
        BinaryOp::Rem => e.int_rem(dtype, a, b),
        BinaryOp::Pow => e.int_pow(a, b),
        BinaryOp::Maximum => e.signed_op(Opcode::MaxI, a, b, signed(dtype)),
        BinaryOp::Minimum => e.signed_op(Opcode::MinI, a, b, signed(dtype)),
        BinaryOp::And | BinaryOp::BitAnd => e.same(Opcode::AndI, a, b, vec![]),
        BinaryOp::Or | BinaryOp::BitOr => e.same(Opcode::OrI, a, b, vec![]),
        BinaryOp::BitXor => e.same(Opcode::XOrI, a, b, vec![]),
        BinaryOp::ShiftLeft => e.shift(false, dtype, a, b),
        BinaryOp::ShiftRight => e.shift(true, dtype, a, b),
        _ => return Err(unsupported(format!("{op:?} of {dtype} tiles"))),
    })
}

/// Converts `x` from `from` to `to`: floats round to nearest, floats to integers truncate toward
/// zero and wrap, integers wrap, and anything to bool is `x != 0`. To an f8 dtype the rounding
/// is `tir_graph::float8`'s rule, which `ftof` from `f32` or `f16` is (nearest even,
/// saturating); other dtypes reach f8 through `f32` exactly ([`to_float8`]), and f8 values
/// leave through `f32`, which holds each of them.
pub fn cast(e: &mut Emitter, from: DType, to: DType, x: Value) -> Value {
    if from == to {
        return x;
    }
    let dst = reg_scalar(to);
    if to.float8().is_some() {
        return to_float8(e, from, dst, x);
    }
    if from.float8().is_some() && to != DType::F16 {
        let wide = e.ftof(x, ScalarType::F32);
        return cast(e, DType::F32, to, wide);
    }
    if to == DType::Bool {
        let zero = e.like(x, 0.0);
        return if from.is_float() {
            e.cmpf(Pred::Ne, x, zero)
        } else {
            e.cmpi(Pred::Ne, x, zero, true)
        };
    }
    match (from.is_float(), to.is_float()) {
        (true, true) => e.ftof(x, dst),
        (false, true) => match byte_to_float(e, from, dst, x) {
            Some(y) => y,
            None => e.itof(x, dst, signed(from)),
        },
        (false, false) => e.int_resize(x, dst, signed(from)),
        (true, false) => e.float_to_int(x, dst),
    }
}

/// An 8-bit integer `x` to `f32` or `f16` by placing its byte in the mantissa of a float whose
/// exponent makes one mantissa step 1 (2^23 for f32, 2^10 for f16), then subtracting that
/// float: `bits(2^23) | (u ^ 0x80) = 2^23 + q + 128` for `i8` (`u` its byte, `u ^ 0x80 = q +
/// 128`), `2^23 + u` for `u8`. Every step is exact. A zero-extend, one `xor` and one add, all at
/// full rate, where `IToF` is a quarter-rate convert (the K loop of an int8 weight's product
/// converts every element).
fn byte_to_float(e: &mut Emitter, from: DType, dst: ScalarType, x: Value) -> Option<Value> {
    let (int, exponent_bits, one_step) = match dst {
        ScalarType::F32 => (ScalarType::I32, 0x4B00_0000_i64, 2f64.powi(23)),
        ScalarType::F16 => (ScalarType::I16, 0x6400, 2f64.powi(10)),
        _ => return None,
    };
    let offset = match from {
        DType::I8 => 128,
        DType::U8 => 0,
        _ => return None,
    };
    let shape = e.shape(x);
    let byte = e.int_resize(x, int, false);
    let magic = e.constant(int, (exponent_bits | offset) as f64, &shape);
    let bits = e.same(Opcode::XOrI, byte, magic, vec![]);
    let biased = e.op1(
        Opcode::Bitcast,
        &[bits],
        vec![],
        super::emit::tile(dst, &shape),
    );
    let bias = e.constant(dst, one_step + offset as f64, &shape);
    Some(e.float_op(Opcode::SubF, biased, bias))
}

/// `x` of `from` rounded to the f8 type `dst`. `ftof` rounds once from `f32` and `f16`, and
/// `bf16` widens to `f32` exactly. An integer goes through `f32` exactly where it matters: one
/// past 2^24 in magnitude saturates either way. `f64` is rounded to `f32` to odd first (an
/// inexact result gets its last bit set), which keeps the second rounding exact: 24 bits are
/// well over the f8 mantissa's 4 plus 2.
fn to_float8(e: &mut Emitter, from: DType, dst: ScalarType, x: Value) -> Value {
    let x = match from {
        DType::F32 | DType::F16 => x,
        DType::F64 => f64_to_f32_odd(e, x),
        d if d.is_float() => e.ftof(x, ScalarType::F32),
        d => e.itof(x, ScalarType::F32, signed(d)),
    };
    e.ftof(x, dst)
}

/// `x` (`f64`) rounded to `f32` to odd: truncated toward zero, with the last bit set when the
/// result is inexact. From the nearest-even `r`: one step toward zero where `r` went past `x`.
fn f64_to_f32_odd(e: &mut Emitter, x: Value) -> Value {
    let r = e.ftof(x, ScalarType::F32);
    let back = e.ftof(r, ScalarType::F64);
    let inexact = e.cmpf(Pred::Ne, back, x);
    let ax = e.unary(Opcode::AbsF, x, vec![]);
    let aback = e.unary(Opcode::AbsF, back, vec![]);
    let past = e.cmpf(Pred::Gt, aback, ax);
    let shape = e.shape(r);
    let bits = e.op1(
        Opcode::Bitcast,
        &[r],
        vec![],
        super::emit::tile(ScalarType::I32, &shape),
    );
    let one = e.like(bits, 1.0);
    let stepped = e.subi(bits, one);
    let toward_zero = e.select(past, stepped, bits);
    let odd = e.same(Opcode::OrI, toward_zero, one, vec![]);
    let bits = e.select(inexact, odd, bits);
    e.op1(
        Opcode::Bitcast,
        &[bits],
        vec![],
        super::emit::tile(ScalarType::F32, &shape),
    )
}

fn identity_attr(elem: ScalarType, value: f64) -> Attribute {
    if is_float(elem) {
        Attribute::float(value, elem)
    } else if elem == ScalarType::I1 {
        Attribute::int((value != 0.0) as i64, elem)
    } else {
        let v = super::emit::int_bits(value);
        // Integer attributes are written as their bit pattern at the element's width.
        let width = super::emit::bits(elem);
        let v = if width < 64 {
            v & ((1i64 << width) - 1)
        } else {
            v
        };
        Attribute::int(v, elem)
    }
}

/// One `reduce` of `x` (already in its compute type) along `axis` with the combiner `op` of
/// `dtype`, keeping `axis` as a dim of size 1.
fn reduce_once(e: &mut Emitter, op: ReduceOp, dtype: DType, x: Value, axis: usize) -> Value {
    let elem = e.elem(x);
    let shape = e.shape(x);
    let scalar = super::emit::tile(elem, &[]);
    let (region, ()) = e.in_region(&[scalar.clone(), scalar], |e, v| {
        let (a, b) = (v[0], v[1]);
        let r = match (op, is_float(elem)) {
            (ReduceOp::Sum, true) => e.float_op(Opcode::AddF, a, b),
            (ReduceOp::Prod, true) => e.float_op(Opcode::MulF, a, b),
            (ReduceOp::Max, true) => e.float_extreme(true, a, b),
            (ReduceOp::Min, true) => e.float_extreme(false, a, b),
            (ReduceOp::Sum, false) => e.addi(a, b),
            (ReduceOp::Prod, false) => e.muli(a, b),
            (ReduceOp::Max, false) if dtype == DType::Bool => e.same(Opcode::OrI, a, b, vec![]),
            (ReduceOp::Min, false) if dtype == DType::Bool => e.same(Opcode::AndI, a, b, vec![]),
            (ReduceOp::Max, false) => e.signed_op(Opcode::MaxI, a, b, signed(dtype)),
            (_, false) => e.signed_op(Opcode::MinI, a, b, signed(dtype)),
            (_, true) => e.float_extreme(false, a, b),
        };
        e.op(Opcode::Yield, &[r], vec![], vec![]);
    });
    let mut reduced = shape.clone();
    reduced.remove(axis);
    let out = e.region_op(
        Opcode::Reduce,
        &[x],
        vec![
            ("dim", Attribute::i32(axis as i64)),
            (
                "identities",
                Attribute::Array(vec![identity_attr(elem, identity(op, dtype))]),
            ),
        ],
        vec![super::emit::tile(elem, &reduced)],
        region,
    )[0];
    let mut kept = shape;
    kept[axis] = 1;
    e.reshape(out, &kept)
}

/// Reduces `x` (a tile of `dtype`) along `axis`, keeping it as size 1. 16-bit float sums and
/// products accumulate in `f32`. ArgMax/ArgMin give the first position of the extreme (NaN
/// counts as the extreme) as `i64`.
pub fn reduce(e: &mut Emitter, op: ReduceOp, dtype: DType, x: Value, axis: usize) -> Res<Value> {
    match op {
        ReduceOp::Mean => Err(unsupported("a mean reduce (lowering divides a sum)".into())),
        ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min => {
            if dtype == DType::Bool && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
                return Err(unsupported(format!("{op:?} of a bool tile")));
            }
            widened(e, dtype, &[x], |e, v| {
                Ok(reduce_once(e, op, dtype, v[0], axis))
            })
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            let max = op == ReduceOp::ArgMax;
            let extreme = if max { ReduceOp::Max } else { ReduceOp::Min };
            let xw = if dtype.is_float() {
                e.ftof(x, compute_scalar(dtype))
            } else {
                x
            };
            let m = reduce_once(e, extreme, dtype, xw, axis);
            let shape = e.shape(xw);
            let m = e.broadcast(m, &shape);
            let hit = if dtype.is_float() {
                let eq = e.cmpf(Pred::Eq, xw, m);
                let nan = e.is_nan(xw);
                e.same(Opcode::OrI, eq, nan, vec![])
            } else {
                e.cmpi(Pred::Eq, xw, m, signed(dtype))
            };
            let pos = e.iota(&shape, axis);
            let none = e.constant(ScalarType::I64, i64::MAX as f64, &shape);
            let cand = e.select(hit, pos, none);
            Ok(reduce_once(e, ReduceOp::Min, DType::I64, cand, axis))
        }
    }
}

impl Emitter {
    /// An `i64` tile of `shape` whose element `t` is `t[axis]`.
    pub fn iota(&mut self, shape: &[i64], axis: usize) -> Value {
        let n = shape[axis];
        if n == 1 {
            return self.constant(ScalarType::I64, 0.0, shape);
        }
        let line = self.op1(
            Opcode::Iota,
            &[],
            vec![],
            super::emit::tile(ScalarType::I64, &[n]),
        );
        let mut along = vec![1; shape.len()];
        along[axis] = n;
        let r = self.reshape(line, &along);
        self.broadcast(r, shape)
    }
}
