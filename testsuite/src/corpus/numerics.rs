//! Numerics: where the documented semantics (tir_graph::eval's module doc) decide the answer.
//! Softmax at large magnitudes (stable only if the max is subtracted); inf and NaN through every
//! op class; integer wrap-around, truncating division and `x / 0 = 0`; f16/bf16 rounding (ties
//! to even, overflow to inf, subnormals) and f32 accumulation; f8 rounding (ties to even,
//! saturation, subnormals) and f8 arithmetic through f32.
//!
//! Names are `numerics/WHAT/DTYPE/VARIANT`. Inputs are explicit lists, mostly.

use super::{explicit, ByOp, Corpus, Result, FLOATS, INTS};
use crate::tolerance::Tolerance;
use crate::values::Values;
use std::collections::BTreeMap;
use tir_graph::eval::F64Tensor;
use tir_graph::{shape, BinaryOp, DType, Graph, GraphBuilder, ReduceOp, Tensor, UnaryOp};

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    stability(c)?;
    special_unary(c)?;
    special_binary(c)?;
    special_reductions(c)?;
    special_other(c)?;
    integer_wrap(c)?;
    integer_division(c)?;
    rounding(c)?;
    float8(c)?;
    Ok(())
}

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

/// One run with these sources.
fn one_run(sources: Vec<(&str, F64Tensor)>) -> Vec<BTreeMap<String, F64Tensor>> {
    vec![sources
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect()]
}

/// A graph with one input `x` of `dtype` and `dims` and the outputs `build` makes.
fn graph_of(
    dtype: DType,
    dims: &[u64],
    build: impl FnOnce(&GraphBuilder, &Tensor) -> Result<()>,
) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", dtype, tir_graph::Shape::of(dims))?;
    build(&g, &x)?;
    g.finish()
}

/// Softmax and log_softmax of rows near a large offset (exp of the raw values overflows every
/// dtype) and of rows spread over most of the dtype's range; the oracle subtracts the row max,
/// as the composite does, so it is stable too. Then rows with -inf (masked), all -inf (NaN),
/// +inf (NaN) and NaN.
fn stability(c: &mut Corpus) -> Result<()> {
    let ranges = [
        (DType::F16, 1000.0, 8.0, 30000.0),
        (DType::BF16, 1000.0, 32.0, 1e30),
        (DType::F32, 1e5, 8.0, 1e30),
        (DType::F64, 1e10, 8.0, 1e300),
    ];
    for (d, offset, spread, wide) in ranges {
        for (variant, lo, hi) in [
            ("offset", offset - spread, offset + spread),
            ("wide", -wide, wide),
        ] {
            for log in [false, true] {
                let g = graph_of(d, &[5, 64], |g, x| {
                    let y = if log {
                        x.log_softmax(1)?
                    } else {
                        x.softmax(1)?
                    };
                    g.output("y", &y)
                })?;
                let op = if log { "log_softmax" } else { "softmax" };
                let name = format!("numerics/stability/{d}/{op}_{variant}");
                c.add_static(name, g, Values::Uniform(lo, hi), Tolerance::composite(64));
            }
        }
        let rows = [
            [1.0, -INF, 0.5, -INF],
            [-INF, -INF, -INF, -INF],
            [1.0, INF, 0.0, -1.0],
            [0.25, NAN, 2.0, 1.0],
            [offset, offset + 1.0, offset - 1.0, offset],
        ];
        let values: Vec<f64> = rows.iter().flatten().copied().collect();
        let g = graph_of(d, &[5, 4], |g, x| g.output("y", &x.softmax(1)?))?;
        let name = format!("numerics/stability/{d}/softmax_special_rows");
        let runs = one_run(vec![("x", explicit(d, &[5, 4], &values))]);
        c.add_runs(name, g, runs, Tolerance::composite(4));
    }
    Ok(())
}

/// Special values every float unary op meets.
const SPECIALS: [f64; 10] = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0];

fn unary_tolerance(u: UnaryOp) -> Tolerance {
    match u {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Relu
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Not
        | UnaryOp::BitNot => Tolerance::EXACT,
        UnaryOp::Sqrt | UnaryOp::Reciprocal => Tolerance::ELEMENTWISE,
        _ => Tolerance::TRANSCENDENTAL,
    }
}

/// Every float unary op (and neg, abs, relu) on NaN, ±inf, ±0 and a few finite values.
fn special_unary(c: &mut Corpus) -> Result<()> {
    for u in UnaryOp::ALL {
        if matches!(u, UnaryOp::Not | UnaryOp::BitNot) {
            continue;
        }
        for d in FLOATS {
            let g = graph_of(d, &[SPECIALS.len() as u64], |g, x| {
                g.output("y", &x.apply_unary(u)?)
            })?;
            let name = format!("numerics/special/{}/{d}", u.name());
            let runs = one_run(vec![("x", explicit(d, &[10], &SPECIALS))]);
            c.add_runs(name, g, runs, unary_tolerance(u));
        }
    }
    Ok(())
}

/// Every float binary op on all pairs of NaN, ±inf, ±0, 1 and -2 (an outer product by
/// broadcasting): IEEE results such as `inf - inf = NaN`, `1 / -0 = -inf`, `0 * inf = NaN`,
/// NaN-propagating maximum/minimum, comparisons false on NaN except `ne`.
fn special_binary(c: &mut Corpus) -> Result<()> {
    let values = [NAN, INF, -INF, 0.0, -0.0, 1.0, -2.0];
    let n = values.len() as u64;
    for b in BinaryOp::ALL {
        if matches!(b, BinaryOp::And | BinaryOp::Or) || b.is_bitwise() {
            continue;
        }
        for d in FLOATS {
            let g = GraphBuilder::new();
            let x = g.input("a", d, shape![n, 1])?;
            let y = g.input("b", d, shape![1, n])?;
            g.output("y", &x.apply_binary(b, &y)?)?;
            let tolerance = match b {
                BinaryOp::Pow => Tolerance::TRANSCENDENTAL,
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                    Tolerance::ELEMENTWISE
                }
                _ => Tolerance::EXACT,
            };
            let name = format!("numerics/special/{}/{d}", b.name());
            let runs = one_run(vec![
                ("a", explicit(d, &[n, 1], &values)),
                ("b", explicit(d, &[1, n], &values)),
            ]);
            c.add_runs(name, g.finish()?, runs, tolerance);
        }
    }
    Ok(())
}

/// Reductions over rows holding NaN, +inf, -inf, both infinities, and none.
fn special_reductions(c: &mut Corpus) -> Result<()> {
    let rows = [
        [1.0, NAN, 2.0, -1.0, 0.5, 3.0],
        [1.0, INF, 2.0, -1.0, 0.5, 3.0],
        [-INF, 1.0, 2.0, -1.0, 0.5, 3.0],
        [INF, -INF, 2.0, -1.0, 0.5, 3.0],
        [0.5, 1.0, 2.0, -1.0, 0.5, 3.0],
    ];
    let values: Vec<f64> = rows.iter().flatten().copied().collect();
    for op in ReduceOp::ALL {
        for d in FLOATS {
            let g = graph_of(d, &[5, 6], |g, x| {
                let y = match op {
                    ReduceOp::Sum => x.sum(&[1], false)?,
                    ReduceOp::Mean => x.mean(&[1], false)?,
                    ReduceOp::Max => x.max(&[1], false)?,
                    ReduceOp::Min => x.min(&[1], false)?,
                    ReduceOp::Prod => x.prod(&[1], false)?,
                    ReduceOp::ArgMax => x.argmax(1, false)?,
                    ReduceOp::ArgMin => x.argmin(1, false)?,
                };
                g.output("y", &y)
            })?;
            let tolerance = match op {
                ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod => Tolerance::reduction(6),
                _ => Tolerance::EXACT,
            };
            let name = format!("numerics/special/{}/{d}", op.name());
            let runs = one_run(vec![("x", explicit(d, &[5, 6], &values))]);
            c.add_runs(name, g, runs, tolerance);
        }
    }
    Ok(())
}

/// NaN and inf through matmul (a NaN row, an inf row, `inf * 0`), select (the branch not taken
/// never leaks), layout ops (moved unchanged, pad with NaN and -inf), and casts (NaN to an
/// integer is 0 and to bool true; overflow to inf; what `round_value` gives for ±inf).
fn special_other(c: &mut Corpus) -> Result<()> {
    for d in FLOATS {
        let g = GraphBuilder::new();
        let a = g.input("a", d, shape![4, 3])?;
        let b = g.input("b", d, shape![3, 5])?;
        g.output("y", &a.matmul(&b)?)?;
        let av = [
            NAN, 1.0, 2.0, INF, 1.0, -1.0, 0.5, 0.25, 1.0, 1.0, -2.0, 0.0,
        ];
        let bv = [
            1.0, 0.0, INF, 1.0, 2.0, //
            0.5, 1.0, 0.0, -1.0, 1.0, //
            0.25, -1.0, 0.0, 1.0, -INF,
        ];
        let name = format!("numerics/special/matmul/{d}");
        let runs = one_run(vec![
            ("a", explicit(d, &[4, 3], &av)),
            ("b", explicit(d, &[3, 5], &bv)),
        ]);
        c.add_runs(name, g.finish()?, runs, Tolerance::matmul(3));

        let g = GraphBuilder::new();
        let cond = g.input("cond", DType::Bool, shape![6])?;
        let a = g.input("a", d, shape![6])?;
        let b = g.input("b", d, shape![6])?;
        g.output("y", &cond.select(&a, &b)?)?;
        let name = format!("numerics/special/select/{d}");
        let runs = one_run(vec![
            (
                "cond",
                explicit(DType::Bool, &[6], &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]),
            ),
            ("a", explicit(d, &[6], &[NAN, NAN, INF, 1.0, -INF, 2.0])),
            ("b", explicit(d, &[6], &[1.0, -INF, NAN, NAN, 0.0, -0.0])),
        ]);
        c.add_runs(name, g.finish()?, runs, Tolerance::EXACT);

        let g = graph_of(d, &[2, 3], |g, x| {
            g.output("permuted", &x.transpose()?)?;
            g.output("padded_nan", &x.pad(&[(1, 0), (0, 2)], NAN)?)?;
            g.output("padded_neg_inf", &x.pad(&[(0, 1), (1, 0)], -INF)?)?;
            g.output("concat", &g.concat(&[x, &x.slice_axis(1, 1, 3)?], 1)?)
        })?;
        let name = format!("numerics/special/layout/{d}");
        let xv = [NAN, INF, -INF, -0.0, 1.0, 2.0];
        let runs = one_run(vec![("x", explicit(d, &[2, 3], &xv))]);
        c.add_runs(name, g, runs, Tolerance::EXACT);

        // Casts of special and out-of-range values to every other dtype.
        let big = match d {
            DType::F16 => 65504.0,
            DType::BF16 => 1e38,
            DType::F32 => 3e38,
            _ => 1e300,
        };
        let xv = [NAN, INF, -INF, -0.0, big, -big, 70000.0, 1.5];
        let g = graph_of(d, &[8], |g, x| {
            for to in DType::ALL {
                if to != d {
                    g.output(&format!("to_{to}"), &x.cast(to)?)?;
                }
            }
            Ok(())
        })?;
        let name = format!("numerics/special/cast/{d}");
        let runs = one_run(vec![("x", explicit(d, &[8], &xv))]);
        c.add_runs(name, g, runs, Tolerance::EXACT);
    }
    Ok(())
}

/// Values at the edges of `i8`, `u8` and `i32`, for wrapping add, sub and mul (`i32` products
/// kept below 2^53, where the oracle's `f64` values are exact; `i64` wrap-around lies beyond
/// 2^53, where the oracle cannot judge it: `backend-ref/tests/integers.rs` checks the reference
/// there against exact values, and the differential runs check CUDA against the reference).
fn edge_values(d: DType, mul: bool) -> Vec<f64> {
    let p = |e: i32| 2f64.powi(e);
    match (d, mul) {
        (DType::I8, _) => vec![127.0, -128.0, 100.0, -100.0, 64.0, -1.0, 0.0, 3.0],
        (DType::U8, _) => vec![255.0, 0.0, 1.0, 128.0, 200.0, 100.0, 16.0, 3.0],
        (DType::I16, _) => vec![32767.0, -32768.0, 20000.0, -20000.0, 256.0, -1.0, 0.0, 3.0],
        (DType::U16, _) => vec![65535.0, 0.0, 1.0, 32768.0, 50000.0, 256.0, 300.0, 3.0],
        (DType::U32, false) => vec![p(32) - 1.0, 0.0, 1.0, p(31), 3e9, 65536.0, 7.0, 3.0],
        (DType::U32, true) => vec![65536.0, 65535.0, 46341.0, p(26), p(20), 3.0, 1.0, 0.0],
        (_, false) => vec![p(31) - 1.0, -p(31), p(30), -p(30), 65536.0, -1.0, 0.0, 1.0],
        (_, true) => vec![65536.0, -65536.0, 46341.0, p(26), -p(26), 3.0, -1.0, 0.0],
    }
}

/// Wrap-around as documented: two's complement in every integer dtype.
fn integer_wrap(c: &mut Corpus) -> Result<()> {
    let narrow = [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
    ];
    for d in narrow {
        for b in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul] {
            let values = edge_values(d, b == BinaryOp::Mul);
            let n = values.len() as u64;
            let g = GraphBuilder::new();
            let x = g.input("a", d, shape![n, 1])?;
            let y = g.input("b", d, shape![1, n])?;
            g.output("y", &x.apply_binary(b, &y)?)?;
            let name = format!("numerics/int_wrap/{d}/{}", b.name());
            let runs = one_run(vec![
                ("a", explicit(d, &[n, 1], &values)),
                ("b", explicit(d, &[1, n], &values)),
            ]);
            c.add_runs(name, g.finish()?, runs, Tolerance::EXACT);
        }
    }
    // neg and abs of the minimum (which wrap to itself), relu, for every integer dtype.
    for d in INTS {
        let values = [
            int_min(d),
            -1.0 + f64::from(u8::from(d.is_unsigned_int())) * 2.0,
            0.0,
            5.0,
        ];
        let g = graph_of(d, &[4], |g, x| {
            g.output("neg", &x.neg()?)?;
            g.output("abs", &x.abs()?)?;
            g.output("relu", &x.relu()?)
        })?;
        let name = format!("numerics/int_wrap/{d}/neg_abs_relu_of_min");
        let runs = one_run(vec![("x", explicit(d, &[4], &values))]);
        c.add_runs(name, g, runs, Tolerance::EXACT);
    }
    // Sums, products and matmuls that overflow the dtype.
    let reductions = [
        (DType::I8, ReduceOp::Sum, vec![100.0, 100.0, 100.0, 27.0]),
        (DType::U8, ReduceOp::Sum, vec![200.0, 100.0, 255.0, 1.0]),
        (
            DType::I8,
            ReduceOp::Prod,
            vec![3.0, 3.0, 3.0, 3.0, 3.0, 1.0],
        ),
        (DType::I32, ReduceOp::Sum, vec![2147483647.0; 4]),
        (DType::U8, ReduceOp::Prod, vec![16.0, 16.0, 3.0]),
    ];
    for (d, op, values) in reductions {
        let n = values.len() as u64;
        let g = graph_of(d, &[n], |g, x| {
            let y = if op == ReduceOp::Sum {
                x.sum(&[0], false)?
            } else {
                x.prod(&[0], false)?
            };
            g.output("y", &y)
        })?;
        let name = format!("numerics/int_wrap/{d}/{}", op.name());
        let runs = one_run(vec![("x", explicit(d, &[n], &values))]);
        c.add_runs(name, g, runs, Tolerance::EXACT);
    }
    let g = GraphBuilder::new();
    let a = g.input("a", DType::I8, shape![2, 4])?;
    let b = g.input("b", DType::I8, shape![4, 3])?;
    g.output("y", &a.matmul(&b)?)?;
    let runs = one_run(vec![
        (
            "a",
            explicit(
                DType::I8,
                &[2, 4],
                &[100.0, 100.0, 100.0, 100.0, -128.0, 1.0, 2.0, 3.0],
            ),
        ),
        (
            "b",
            explicit(
                DType::I8,
                &[4, 3],
                &[
                    1.0, 2.0, -1.0, 1.0, 2.0, 127.0, 1.0, 2.0, 3.0, 1.0, 2.0, 4.0,
                ],
            ),
        ),
    ]);
    c.add_runs(
        "numerics/int_wrap/i8/matmul".into(),
        g.finish()?,
        runs,
        Tolerance::EXACT,
    );

    // Casts truncate toward zero and wrap (float to integer, integer to narrower integer).
    let casts: [(DType, Vec<f64>); 7] = [
        (
            DType::I16,
            vec![-32768.0, 32767.0, -1.0, 255.0, 256.0, -129.0, 0.0, 1000.0],
        ),
        // Past i64::MAX, past 2^53 and narrow values: unsigned to signed and to floats.
        (
            DType::U64,
            vec![
                2f64.powi(63),
                18_446_744_073_709_549_568.0,
                2f64.powi(53) + 2.0,
                4294967297.0,
                65537.0,
                257.0,
                1.0,
                0.0,
            ],
        ),
        (
            DType::F32,
            vec![300.0, -129.0, 255.75, -1.0, -2.75, 2.9, 1e9, -0.5],
        ),
        (
            DType::F64,
            vec![
                3e9,
                -3e9,
                2f64.powi(40) + 0.5,
                -2.5,
                2.5,
                4294967295.0,
                1e15,
                -7.9,
            ],
        ),
        (
            DType::I32,
            vec![
                70000.0,
                -1.0,
                255.0,
                256.0,
                -129.0,
                2147483647.0,
                -2147483648.0,
                0.0,
            ],
        ),
        (
            DType::I64,
            vec![
                2f64.powi(40) + 5.0,
                -(2f64.powi(33)),
                1e15,
                -1.0,
                4294967296.0,
                128.0,
                0.0,
                7.0,
            ],
        ),
        (
            DType::U8,
            vec![200.0, 255.0, 128.0, 127.0, 0.0, 1.0, 100.0, 17.0],
        ),
    ];
    for (from, values) in casts {
        // Integers also to floats: a u64 past 2^63 converts unsigned.
        let floats: &[DType] = if from.is_int() {
            &[DType::F32, DType::F64]
        } else {
            &[]
        };
        let g = graph_of(from, &[8], |g, x| {
            for &to in INTS.iter().chain(floats) {
                if to != from {
                    g.output(&format!("to_{to}"), &x.cast(to)?)?;
                }
            }
            Ok(())
        })?;
        let name = format!("numerics/int_wrap/{from}/casts");
        let runs = one_run(vec![("x", explicit(from, &[8], &values))]);
        c.add_runs(name, g, runs, Tolerance::EXACT);
    }
    Ok(())
}

/// The smallest value of the integer dtype `d`.
fn int_min(d: DType) -> f64 {
    if d.is_unsigned_int() {
        0.0
    } else {
        -(2f64.powi(d.bits() as i32 - 1))
    }
}

/// Integer division truncates toward zero, `x / 0 = 0`, and `MIN / -1` wraps to `MIN`;
/// unsigned dtypes divide their values past the signed range as unsigned.
fn integer_division(c: &mut Corpus) -> Result<()> {
    for d in INTS {
        let top = 2f64.powi(d.bits() as i32 - 1);
        let (a, b) = if d.is_unsigned_int() {
            (
                vec![7.0, 8.0, 0.0, 1.0, top + 1.0, 200.0, 3.0, top],
                vec![2.0, 3.0, 0.0, 1.0, top + 3.0, 7.0, top, 16.0],
            )
        } else {
            (
                vec![-7.0, 7.0, -8.0, 8.0, 0.0, 1.0, -1.0, int_min(d)],
                vec![2.0, -2.0, 3.0, -3.0, 0.0, 1.0, -1.0, 7.0],
            )
        };
        let g = GraphBuilder::new();
        let x = g.input("a", d, shape![8, 1])?;
        let y = g.input("b", d, shape![1, 8])?;
        g.output("y", &x.div(&y)?)?;
        let name = format!("numerics/int_division/{d}/trunc_and_by_zero");
        let runs = one_run(vec![
            ("a", explicit(d, &[8, 1], &a)),
            ("b", explicit(d, &[1, 8], &b)),
        ]);
        c.add_runs(name, g.finish()?, runs, Tolerance::EXACT);
    }
    Ok(())
}

/// f16 and bf16 rounding: casts at ties (to even), at the largest finite value and past it (to
/// inf), at subnormals; basic arithmetic whose exact result is a tie; sums that need an f32
/// accumulator (an f16 or bf16 accumulator stalls).
fn rounding(c: &mut Corpus) -> Result<()> {
    let p = |e: i32| 2f64.powi(e);
    let to_f16 = vec![
        1.0 + p(-11),
        1.0 + 3.0 * p(-11),
        65504.0,
        65519.0,
        65520.0,
        p(-24),
        p(-25),
        3.0 * p(-25),
        -0.0,
        1.0 / 3.0,
        0.1,
        2049.0,
        2051.0,
        -(1.0 + p(-11)),
    ];
    let to_bf16 = vec![
        1.0 + p(-8),
        1.0 + 3.0 * p(-8),
        3.389_531_389_251_535_5e38,
        3.4e38,
        p(-133),
        p(-134),
        257.0,
        259.0,
        1.0 / 3.0,
        0.1,
        -0.0,
        -(1.0 + 3.0 * p(-8)),
    ];
    for (to, values) in [(DType::F16, &to_f16), (DType::BF16, &to_bf16)] {
        for from in [DType::F32, DType::F64] {
            let n = values.len() as u64;
            let g = graph_of(from, &[n], |g, x| g.output("y", &x.cast(to)?))?;
            let name = format!("numerics/rounding/{to}/cast_from_{from}");
            let runs = one_run(vec![("x", explicit(from, &[n], values))]);
            c.add_runs(name, g, runs, Tolerance::EXACT);
        }
    }
    // Between the 16-bit formats: f16 has the precision, bf16 the range.
    let between = [
        (
            DType::F16,
            DType::BF16,
            vec![1.0 + p(-10), 65504.0, p(-24), 2049.0, 1.0 / 3.0, -3.0],
        ),
        (
            DType::BF16,
            DType::F16,
            vec![1e5, p(-30), 3.0, 1.0 / 3.0, 65536.0, -0.1],
        ),
    ];
    for (from, to, values) in between {
        let n = values.len() as u64;
        let g = graph_of(from, &[n], |g, x| g.output("y", &x.cast(to)?))?;
        let name = format!("numerics/rounding/{to}/cast_from_{from}");
        let runs = one_run(vec![("x", explicit(from, &[n], &values))]);
        c.add_runs(name, g, runs, Tolerance::EXACT);
    }
    // Arithmetic with ties: computed exactly (an f32 intermediate holds these) and rounded to
    // nearest even once, which every correct 16-bit implementation gives.
    let arithmetic = [
        (
            DType::F16,
            vec![
                2048.0,
                2048.0,
                1.0,
                1.0,
                65504.0,
                0.1,
                p(-24),
                p(-14),
                3.0,
                1024.0,
            ],
            vec![
                1.0,
                3.0,
                p(-11),
                3.0 * p(-11),
                16.0,
                0.2,
                p(-24),
                -p(-15),
                7.0,
                0.5,
            ],
        ),
        (
            DType::BF16,
            vec![
                256.0,
                256.0,
                1.0,
                1.0,
                3.3e38,
                0.1,
                p(-133),
                p(-126),
                3.0,
                128.0,
            ],
            vec![
                1.0,
                3.0,
                p(-8),
                3.0 * p(-8),
                3.3e38,
                0.2,
                p(-133),
                -p(-127),
                7.0,
                0.5,
            ],
        ),
    ];
    for (d, a, b) in arithmetic {
        let n = a.len() as u64;
        let g = GraphBuilder::new();
        let x = g.input("a", d, shape![n])?;
        let y = g.input("b", d, shape![n])?;
        g.output("add", &x.add(&y)?)?;
        g.output("sub", &x.sub(&y)?)?;
        g.output("mul", &x.mul(&y)?)?;
        g.output("div", &x.div(&y)?)?;
        let name = format!("numerics/rounding/{d}/arithmetic_ties");
        let runs = one_run(vec![
            ("a", explicit(d, &[n], &a)),
            ("b", explicit(d, &[n], &b)),
        ]);
        c.add_runs(name, g.finish()?, runs, Tolerance::EXACT);
    }
    // Sums an accumulator of the dtype itself gets wrong: f16 stalls at 2048 (2048 + 1 rounds
    // back), bf16 at 256; an f16 sum of large values overflows before a mean divides it.
    let sums = [
        (DType::F16, ReduceOp::Sum, 4096u64, 1.0),
        (DType::BF16, ReduceOp::Sum, 1000, 1.0),
        (DType::F16, ReduceOp::Mean, 64, 60000.0),
        (DType::BF16, ReduceOp::Mean, 512, 300.0),
    ];
    for (d, op, n, v) in sums {
        let g = graph_of(d, &[1, n], |g, x| {
            let y = if op == ReduceOp::Sum {
                x.sum(&[1], false)?
            } else {
                x.mean(&[1], false)?
            };
            g.output("y", &y)
        })?;
        let name = format!("numerics/rounding/{d}/{}_needs_f32_accumulation", op.name());
        let runs = one_run(vec![("x", explicit(d, &[1, n], &vec![v; n as usize]))]);
        c.add_runs(name, g, runs, Tolerance::reduction(n));
    }
    Ok(())
}

/// Values at the edges of both f8 formats (`tir_graph::float8`'s rule): ties to even in the
/// normals and subnormals, the largest finite values and past them (saturated, infinities
/// too), NaN, -0, and ordinary values. Each source dtype gets them as it holds them.
fn float8_edges() -> Vec<f64> {
    let p = |e: i32| 2f64.powi(e);
    vec![
        17.0,
        19.0,
        17.000_001,
        4.5,
        5.5,
        448.0,
        464.0,
        465.0,
        480.0,
        57344.0,
        61440.0,
        1e6,
        INF,
        -INF,
        NAN,
        -0.0,
        p(-9),
        p(-10),
        1.5 * p(-9),
        p(-16),
        p(-17),
        3.0 * p(-17),
        -0.3,
        1.0 / 3.0,
        -1000.0,
        0.1,
    ]
}

/// f8 casts at the edges, both ways: to each f8 from the floats and integers, from each f8
/// (every one of its 256 values) to the floats, between the f8s, to i32 and bool; and f8
/// arithmetic (computed in f32, rounded once: exact for these) and a row sum in f32.
fn float8(c: &mut Corpus) -> Result<()> {
    use tir_graph::float8::{E4M3, E5M2};
    for to in DType::FLOAT8 {
        for from in FLOATS {
            let values = float8_edges();
            let n = values.len() as u64;
            let g = graph_of(from, &[n], |g, x| g.output("y", &x.cast(to)?))?;
            let name = format!("numerics/float8/{to}/cast_from_{from}");
            let runs = one_run(vec![("x", explicit(from, &[n], &values))]);
            c.add_runs(name, g, runs, Tolerance::EXACT);
        }
        let ints = [
            0.0, 1.0, -1.0, 17.0, 19.0, 9.0, 11.0, 127.0, -128.0, 448.0, 464.0, 465.0, 1000.0,
            57344.0, 61440.0, -100000.0,
        ];
        for from in [DType::I8, DType::U8, DType::I32, DType::I64] {
            let values: Vec<f64> = ints.iter().map(|&v| from.round_value(v)).collect();
            let n = values.len() as u64;
            let g = graph_of(from, &[n], |g, x| g.output("y", &x.cast(to)?))?;
            let name = format!("numerics/float8/{to}/cast_from_{from}");
            let runs = one_run(vec![("x", explicit(from, &[n], &values))]);
            c.add_runs(name, g, runs, Tolerance::EXACT);
        }
    }
    for (from, format) in [(DType::F8E4M3, E4M3), (DType::F8E5M2, E5M2)] {
        let every: Vec<f64> = (0..=255u8).map(|b| format.from_bits(b)).collect();
        let finite: Vec<f64> = every.iter().copied().filter(|v| v.is_finite()).collect();
        let other = if from == DType::F8E4M3 {
            DType::F8E5M2
        } else {
            DType::F8E4M3
        };
        let targets = [DType::F16, DType::BF16, DType::F32, DType::F64, other];
        for (to, values) in targets
            .iter()
            .map(|&t| (t, &every))
            .chain([(DType::I32, &finite), (DType::Bool, &finite)])
        {
            let n = values.len() as u64;
            let g = graph_of(from, &[n], |g, x| g.output("y", &x.cast(to)?))?;
            let name = format!("numerics/float8/{from}/cast_to_{to}");
            let runs = one_run(vec![("x", explicit(from, &[n], values))]);
            c.add_runs(name, g, runs, Tolerance::EXACT);
        }
    }
    float8_arithmetic(c)
}

/// f8 add, sub, mul, maximum and a comparison with exact results that are ties or subnormal
/// (one rounding, in f32 or f64, gives the same f8), and a row sum accumulated in f32.
fn float8_arithmetic(c: &mut Corpus) -> Result<()> {
    let p = |e: i32| 2f64.powi(e);
    let a = vec![16.0, 16.0, 1.0, 0.5, 3.0, p(-9), -2.0, 240.0, 0.0, -0.0];
    let b = vec![
        1.0,
        3.0,
        0.0625,
        -0.1875,
        7.0,
        p(-9),
        2.0,
        -224.0,
        -0.0,
        -0.0,
    ];
    for d in DType::FLOAT8 {
        let n = a.len() as u64;
        let g = GraphBuilder::new();
        let x = g.input("a", d, shape![n])?;
        let y = g.input("b", d, shape![n])?;
        g.output("add", &x.add(&y)?)?;
        g.output("sub", &x.sub(&y)?)?;
        g.output("mul", &x.mul(&y)?)?;
        g.output("maximum", &x.maximum(&y)?)?;
        g.output("lt", &x.lt(&y)?)?;
        let name = format!("numerics/float8/{d}/arithmetic_ties");
        let runs = one_run(vec![
            ("a", explicit(d, &[n], &a)),
            ("b", explicit(d, &[n], &b)),
        ]);
        c.add_runs(name, g.finish()?, runs, Tolerance::EXACT);
        // 64 ones: an f8 accumulator would stall at 16 (e4m3) or 8 (e5m2).
        let rows = 64u64;
        let g = graph_of(d, &[2, rows], |g, x| g.output("y", &x.sum(&[1], false)?))?;
        let name = format!("numerics/float8/{d}/sum_needs_f32_accumulation");
        let values: Vec<f64> = (0..2 * rows)
            .map(|i| if i < rows { 1.0 } else { 0.5 })
            .collect();
        let runs = one_run(vec![("x", explicit(d, &[2, rows], &values))]);
        c.add_runs(name, g, runs, Tolerance::reduction(rows));
        // A product of f8 operands accumulates in f32 (the tensor cores' f8 inputs).
        let g = GraphBuilder::new();
        let x = g.input("a", d, shape![16, 32])?;
        let w = g.input("b", d, shape![32, 16])?;
        g.output("y", &x.matmul(&w)?)?;
        let name = format!("numerics/float8/{d}/matmul");
        let runs = one_run(vec![
            ("a", explicit(d, &[16, 32], &halves(16 * 32))),
            ("b", explicit(d, &[32, 16], &halves(32 * 16))),
        ]);
        c.add_runs(name, g.finish()?, runs, Tolerance::matmul(32));
    }
    Ok(())
}

/// `n` small multiples of a half (-2 to 2), exact in both f8s.
fn halves(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 7 % 9) as f64 - 4.0) / 2.0).collect()
}
