//! The f64 oracle ([`tir_graph::eval`]): every op on hand-computed values, NaN and integer rules,
//! symbolic dims, states, the builder's composites against hand-written loops, the example models
//! at small sizes, and the one-line errors.
//!
//! Single ops go through [`eval_op`] with the result type inference gives; graph-level behaviour
//! (binding, states, errors naming nodes) goes through [`evaluate`].

use std::collections::BTreeMap;
use std::f64::consts::{E, PI, SQRT_2};
use tir_graph::eval::{bind_dims, concrete_dims, eval_op, evaluate, EvalError, F64Tensor};
use tir_graph::infer::infer;
use tir_graph::models::{self, AttentionConfig, DecoderConfig};
use tir_graph::op::ExactF64;
use tir_graph::{
    shape, BinaryOp, DType, Graph, GraphBuilder, NodeId, Op, ReduceOp, ReshapeDim, Shape,
    SliceRange, TensorType, UnaryOp,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const NAN: f64 = f64::NAN;
const INF: f64 = f64::INFINITY;

/// A well-formed tensor (panics if it is not).
#[track_caller]
fn t(dtype: DType, dims: &[u64], data: &[f64]) -> F64Tensor {
    F64Tensor::new(dtype, dims.to_vec(), data.to_vec()).unwrap()
}

fn f64t(dims: &[u64], data: &[f64]) -> F64Tensor {
    t(DType::F64, dims, data)
}

fn f32t(dims: &[u64], data: &[f64]) -> F64Tensor {
    t(DType::F32, dims, data)
}

fn static_type(x: &F64Tensor) -> TensorType {
    TensorType::new(x.dtype, Shape::of(&x.dims))
}

/// `op` on `xs` through [`eval_op`], with the result type inference gives.
#[track_caller]
fn run(op: Op, xs: &[&F64Tensor]) -> F64Tensor {
    run_result(op.clone(), xs).unwrap_or_else(|e| panic!("{op:?} should evaluate, got: {e}"))
}

fn run_result(op: Op, xs: &[&F64Tensor]) -> Result<F64Tensor, EvalError> {
    let types: Vec<TensorType> = xs.iter().map(|x| static_type(x)).collect();
    let refs: Vec<&TensorType> = types.iter().collect();
    let ty = infer(&op, &refs).unwrap_or_else(|e| panic!("{op:?} should infer, got: {e}"));
    eval_op(&op, xs, &ty, &BTreeMap::new())
}

/// The error message of `op` on `xs`.
#[track_caller]
fn run_err(op: Op, xs: &[&F64Tensor]) -> String {
    match run_result(op.clone(), xs) {
        Ok(v) => panic!("{op:?} should fail, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn unary(u: UnaryOp, x: &F64Tensor) -> F64Tensor {
    run(Op::Unary(u), &[x])
}

fn binary(b: BinaryOp, x: &F64Tensor, y: &F64Tensor) -> F64Tensor {
    run(Op::Binary(b), &[x, y])
}

fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool, x: &F64Tensor) -> F64Tensor {
    let axes = axes.to_vec();
    run(Op::Reduce { op, axes, keepdims }, &[x])
}

/// Equal within 1e-12 relative (or 1e-12 absolute near zero); NaN matches only NaN.
#[track_caller]
fn assert_close(actual: &[f64], expected: &[f64]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= 1e-12 * e.abs().max(1.0)
        };
        assert!(
            ok,
            "element {i}: {a} vs {e} (in {actual:?} vs {expected:?})"
        );
    }
}

/// Bitwise-equal values (so NaN matches NaN and the sign of zero counts).
#[track_caller]
fn assert_bits(actual: &F64Tensor, dims: &[u64], expected: &[f64]) {
    assert_eq!(actual.dims, dims, "dims of {actual:?}");
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&actual.data),
        bits(expected),
        "{:?} vs {expected:?}",
        actual.data
    );
}

fn sources(pairs: Vec<(&str, F64Tensor)>) -> BTreeMap<String, F64Tensor> {
    pairs.into_iter().map(|(n, t)| (n.to_string(), t)).collect()
}

/// The error message of evaluating `graph` on `pairs`.
#[track_caller]
fn eval_err(graph: &Graph, pairs: Vec<(&str, F64Tensor)>) -> String {
    match evaluate(graph, &sources(pairs)) {
        Ok(v) => panic!("evaluation should fail, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// Random well-formed sources for every input and parameter of `graph` under `dims`.
fn random_sources(graph: &Graph, dims: &BTreeMap<String, u64>) -> BTreeMap<String, F64Tensor> {
    let mut out = BTreeMap::new();
    for (i, (name, id)) in graph
        .inputs()
        .into_iter()
        .chain(graph.parameters())
        .enumerate()
    {
        let ty = graph.ty(id);
        let d = concrete_dims(&ty.shape, dims).unwrap();
        out.insert(name, F64Tensor::random(ty.dtype, d, 1000 + i as u64));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Elementwise ops
// ---------------------------------------------------------------------------------------------

#[test]
fn unary_float_ops_follow_their_formulas() {
    let cases: &[(UnaryOp, &[f64], &[f64])] = &[
        (UnaryOp::Neg, &[1.0, -2.0, 0.0], &[-1.0, 2.0, -0.0]),
        (UnaryOp::Abs, &[-3.0, 2.0], &[3.0, 2.0]),
        (UnaryOp::Exp, &[0.0, 1.0, -INF], &[1.0, E, 0.0]),
        (UnaryOp::Log, &[1.0, E, 0.0, -1.0], &[0.0, 1.0, -INF, NAN]),
        (UnaryOp::Sqrt, &[4.0, 2.0, -1.0], &[2.0, SQRT_2, NAN]),
        (UnaryOp::Rsqrt, &[4.0, 0.25, 0.0], &[0.5, 2.0, INF]),
        (UnaryOp::Reciprocal, &[4.0, -0.5, 0.0], &[0.25, -2.0, INF]),
        (UnaryOp::Sin, &[0.0, PI / 2.0], &[0.0, 1.0]),
        (UnaryOp::Cos, &[0.0, PI], &[1.0, -1.0]),
        (UnaryOp::Tanh, &[0.0, 50.0, -50.0], &[0.0, 1.0, -1.0]),
        (UnaryOp::Sigmoid, &[0.0, -1000.0, 1000.0], &[0.5, 0.0, 1.0]),
        (UnaryOp::Relu, &[-1.0, 2.0, 0.0], &[0.0, 2.0, 0.0]),
        (
            UnaryOp::Erf,
            &[0.0, 1.0, -0.5],
            &[0.0, 0.8427007929497149, -0.5204998778130465],
        ),
        (
            UnaryOp::GeluErf,
            &[0.0, 1.0, -1.0],
            &[0.0, 0.8413447460685429, -0.15865525393145707],
        ),
        (UnaryOp::GeluTanh, &[0.0, 1.0], &[0.0, 0.8411919906082768]),
        (UnaryOp::Silu, &[0.0, 1.0], &[0.0, 0.7310585786300049]),
        (UnaryOp::Floor, &[-1.5, 1.5, 2.0], &[-2.0, 1.0, 2.0]),
        (UnaryOp::Ceil, &[-1.5, 1.5, 2.0], &[-1.0, 2.0, 2.0]),
    ];
    for &(u, input, expected) in cases {
        let x = f64t(&[input.len() as u64], input);
        let y = unary(u, &x);
        assert_eq!((y.dtype, &y.dims), (DType::F64, &x.dims), "{u:?}");
        assert_close(&y.data, expected);
    }
    // relu(-0.0) is +0.0: relu is maximum(x, 0) with -0 < +0.
    assert_bits(&unary(UnaryOp::Relu, &f64t(&[1], &[-0.0])), &[1], &[0.0]);
}

#[test]
fn float_results_are_not_rounded_to_the_dtype() {
    let x = t(DType::F16, &[2], &[1.0, 3.0]);
    let y = unary(UnaryOp::Exp, &x);
    assert_eq!(y.dtype, DType::F16);
    assert_eq!(
        y.data,
        vec![E, 3f64.exp()],
        "exact f64 values, not f16 ones"
    );
    let third = binary(BinaryOp::Div, &x, &t(DType::F16, &[], &[3.0]));
    assert_eq!(third.data, vec![1.0 / 3.0, 1.0]);
}

#[test]
fn integer_unary_ops_are_exact_and_wrap() {
    let x = t(DType::I8, &[3], &[-128.0, -3.0, 5.0]);
    assert_bits(&unary(UnaryOp::Neg, &x), &[3], &[-128.0, 3.0, -5.0]);
    assert_bits(&unary(UnaryOp::Abs, &x), &[3], &[-128.0, 3.0, 5.0]);
    assert_bits(&unary(UnaryOp::Relu, &x), &[3], &[0.0, 0.0, 5.0]);
    let u = t(DType::U8, &[2], &[1.0, 0.0]);
    assert_bits(&unary(UnaryOp::Neg, &u), &[2], &[255.0, 0.0]);
}

#[test]
fn logical_ops_on_bool() {
    let a = t(DType::Bool, &[4], &[0.0, 0.0, 1.0, 1.0]);
    let b = t(DType::Bool, &[4], &[0.0, 1.0, 0.0, 1.0]);
    assert_bits(&unary(UnaryOp::Not, &a), &[4], &[1.0, 1.0, 0.0, 0.0]);
    assert_bits(&binary(BinaryOp::And, &a, &b), &[4], &[0.0, 0.0, 0.0, 1.0]);
    assert_bits(&binary(BinaryOp::Or, &a, &b), &[4], &[0.0, 1.0, 1.0, 1.0]);
    assert_bits(&binary(BinaryOp::Eq, &a, &b), &[4], &[1.0, 0.0, 0.0, 1.0]);
}

#[test]
fn binary_float_ops_broadcast() {
    let a = f32t(&[2, 1], &[1.0, 2.0]);
    let b = f32t(&[3], &[10.0, 20.0, 40.0]);
    let add = binary(BinaryOp::Add, &a, &b);
    assert_bits(&add, &[2, 3], &[11.0, 21.0, 41.0, 12.0, 22.0, 42.0]);
    let sub = binary(BinaryOp::Sub, &a, &b);
    assert_bits(&sub, &[2, 3], &[-9.0, -19.0, -39.0, -8.0, -18.0, -38.0]);
    let mul = binary(BinaryOp::Mul, &b, &a);
    assert_bits(&mul, &[2, 3], &[10.0, 20.0, 40.0, 20.0, 40.0, 80.0]);
    let div = binary(BinaryOp::Div, &a, &b);
    assert_close(&div.data, &[0.1, 0.05, 0.025, 0.2, 0.1, 0.05]);
    let pow = binary(
        BinaryOp::Pow,
        &f64t(&[4], &[2.0, 4.0, -8.0, NAN]),
        &f64t(&[4], &[3.0, 0.5, 1.0 / 3.0, 0.0]),
    );
    // powf is C's pow: a negative base to a fractional power is NaN, anything^0 is 1.
    assert_close(&pow.data, &[8.0, 2.0, NAN, 1.0]);
    let by_zero = binary(
        BinaryOp::Div,
        &f32t(&[3], &[1.0, -1.0, 0.0]),
        &f32t(&[], &[0.0]),
    );
    assert_close(&by_zero.data, &[INF, -INF, NAN]);
    // C's fmod: exact at any quotient, the dividend's sign, NaN for x/0 and inf/y.
    let rem = binary(
        BinaryOp::Rem,
        &f32t(&[6], &[f64::from(3.0e38f32), -7.5, 5.0, 1.0, INF, -0.0]),
        &f32t(&[6], &[3.0, 2.0, INF, 0.0, 2.0, 0.5]),
    );
    let big = f64::from(3.0e38f32) % 3.0;
    assert_close(&rem.data, &[big, -1.5, 5.0, NAN, NAN, -0.0]);
    assert!(rem.data[5].is_sign_negative());
}

#[test]
fn integer_arithmetic_wraps_and_truncates() {
    let i8t = |v: &[f64]| t(DType::I8, &[v.len() as u64], v);
    let add = binary(BinaryOp::Add, &i8t(&[100.0, 127.0]), &i8t(&[100.0, 1.0]));
    assert_bits(&add, &[2], &[-56.0, -128.0]);
    let sub = binary(BinaryOp::Sub, &i8t(&[-100.0]), &i8t(&[100.0]));
    assert_bits(&sub, &[1], &[56.0]);
    let mul = binary(BinaryOp::Mul, &i8t(&[16.0, -16.0]), &i8t(&[16.0, 9.0]));
    assert_bits(&mul, &[2], &[0.0, 112.0]);
    let u = binary(
        BinaryOp::Sub,
        &t(DType::U8, &[1], &[0.0]),
        &t(DType::U8, &[1], &[1.0]),
    );
    assert_bits(&u, &[1], &[255.0]);

    let i32t = |v: &[f64]| t(DType::I32, &[v.len() as u64], v);
    let div = binary(
        BinaryOp::Div,
        &i32t(&[-7.0, 7.0, 7.0, -7.0, 5.0, 0.0]),
        &i32t(&[2.0, -2.0, 2.0, -2.0, 0.0, 0.0]),
    );
    assert_bits(&div, &[6], &[-3.0, -3.0, 3.0, 3.0, 0.0, 0.0]);
    let min = i32t(&[-2147483648.0]);
    let wrapped = binary(BinaryOp::Div, &min, &i32t(&[-1.0]));
    assert_bits(&wrapped, &[1], &[-2147483648.0]);
    let rem = binary(
        BinaryOp::Rem,
        &i32t(&[-7.0, 7.0, 7.0, -7.0, 5.0, -2147483648.0]),
        &i32t(&[2.0, -2.0, 2.0, -2.0, 0.0, -1.0]),
    );
    // The dividend's sign; `x rem 0 = x` (as `x / 0 = 0`); MIN rem -1 = 0.
    assert_bits(&rem, &[6], &[-1.0, 1.0, 1.0, -1.0, 5.0, 0.0]);
    let max = binary(BinaryOp::Maximum, &i32t(&[-3.0, 4.0]), &i32t(&[2.0, -9.0]));
    assert_bits(&max, &[2], &[2.0, 4.0]);
    let min = binary(BinaryOp::Minimum, &i32t(&[-3.0, 4.0]), &i32t(&[2.0, -9.0]));
    assert_bits(&min, &[2], &[-3.0, -9.0]);
}

#[test]
fn comparisons_give_bool_and_nan_compares_false_except_ne() {
    let a = f32t(&[4], &[1.0, NAN, 2.0, 1.0]);
    let b = f32t(&[4], &[1.0, 1.0, NAN, 2.0]);
    let cases = [
        (BinaryOp::Eq, [1.0, 0.0, 0.0, 0.0]),
        (BinaryOp::Ne, [0.0, 1.0, 1.0, 1.0]),
        (BinaryOp::Lt, [0.0, 0.0, 0.0, 1.0]),
        (BinaryOp::Le, [1.0, 0.0, 0.0, 1.0]),
        (BinaryOp::Gt, [0.0, 0.0, 0.0, 0.0]),
        (BinaryOp::Ge, [1.0, 0.0, 0.0, 0.0]),
    ];
    for (op, expected) in cases {
        let y = binary(op, &a, &b);
        assert_eq!(y.dtype, DType::Bool, "{op:?}");
        assert_bits(&y, &[4], &expected);
    }
    let ints = binary(
        BinaryOp::Lt,
        &t(DType::I64, &[2], &[-1.0, 3.0]),
        &t(DType::I64, &[], &[0.0]),
    );
    assert_bits(&ints, &[2], &[1.0, 0.0]);
}

#[test]
fn maximum_minimum_and_relu_propagate_nan() {
    let a = f32t(&[4], &[NAN, 1.0, 3.0, -0.0]);
    let b = f32t(&[4], &[1.0, NAN, 2.0, 0.0]);
    assert_bits(
        &binary(BinaryOp::Maximum, &a, &b),
        &[4],
        &[NAN, NAN, 3.0, 0.0],
    );
    assert_bits(
        &binary(BinaryOp::Minimum, &a, &b),
        &[4],
        &[NAN, NAN, 2.0, -0.0],
    );
    assert_bits(&unary(UnaryOp::Relu, &f32t(&[1], &[NAN])), &[1], &[NAN]);
}

#[test]
fn select_broadcasts_all_three() {
    let c = t(DType::Bool, &[2, 1], &[1.0, 0.0]);
    let a = f32t(&[3], &[1.0, 2.0, 3.0]);
    let b = f32t(&[], &[-1.0]);
    let y = run(Op::Select, &[&c, &a, &b]);
    assert_bits(&y, &[2, 3], &[1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);
}

#[test]
fn cast_rounds_to_the_target_dtype() {
    let x = f32t(
        &[5],
        &[
            1.0 + 2f64.powi(-11),
            f64::from(0.1f32),
            65520.0,
            1.0 + 2f64.powi(-11) + 2f64.powi(-20),
            NAN,
        ],
    );
    let y = run(Op::Cast { to: DType::F16 }, &[&x]);
    assert_eq!(y.dtype, DType::F16);
    // Ties go to even; 65520 is past the largest f16 (65504) by half an ulp: inf.
    assert_bits(
        &y,
        &[5],
        &[1.0, 0.0999755859375, INF, 1.0 + 2f64.powi(-10), NAN],
    );

    let x = f32t(&[6], &[2.75, -2.75, 300.0, NAN, -0.5, 127.0]);
    let y = run(Op::Cast { to: DType::I8 }, &[&x]);
    assert_bits(&y, &[6], &[2.0, -2.0, 44.0, 0.0, 0.0, 127.0]);

    let x = f32t(&[4], &[0.5, 0.0, NAN, -0.0]);
    let y = run(Op::Cast { to: DType::Bool }, &[&x]);
    assert_bits(&y, &[4], &[1.0, 0.0, 1.0, 0.0]);

    let x = t(DType::I32, &[1], &[16777217.0]);
    let y = run(Op::Cast { to: DType::F32 }, &[&x]);
    assert_bits(&y, &[1], &[16777216.0]);

    let x = t(DType::Bool, &[2], &[1.0, 0.0]);
    let y = run(Op::Cast { to: DType::I64 }, &[&x]);
    assert_bits(&y, &[2], &[1.0, 0.0]);
}

// ---------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------

#[test]
fn reductions_over_axes_with_and_without_keepdims() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_bits(
        &reduce(ReduceOp::Sum, &[0], false, &x),
        &[3],
        &[5.0, 7.0, 9.0],
    );
    assert_bits(
        &reduce(ReduceOp::Sum, &[1], true, &x),
        &[2, 1],
        &[6.0, 15.0],
    );
    assert_bits(&reduce(ReduceOp::Sum, &[0, 1], false, &x), &[], &[21.0]);
    assert_bits(&reduce(ReduceOp::Sum, &[1, 0], true, &x), &[1, 1], &[21.0]);
    assert_bits(&reduce(ReduceOp::Mean, &[1], false, &x), &[2], &[2.0, 5.0]);
    assert_bits(
        &reduce(ReduceOp::Max, &[0], false, &x),
        &[3],
        &[4.0, 5.0, 6.0],
    );
    assert_bits(&reduce(ReduceOp::Min, &[1], false, &x), &[2], &[1.0, 4.0]);
    assert_bits(
        &reduce(ReduceOp::Prod, &[1], false, &x),
        &[2],
        &[6.0, 120.0],
    );

    // [2, 2, 2] over axes 0 and 2: element (i, j, k) = 4i + 2j + k.
    let y = f32t(&[2, 2, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    assert_bits(
        &reduce(ReduceOp::Sum, &[2, 0], false, &y),
        &[2],
        &[10.0, 18.0],
    );
    assert_bits(
        &reduce(ReduceOp::Max, &[0, 2], true, &y),
        &[1, 2, 1],
        &[5.0, 7.0],
    );
}

#[test]
fn argmax_and_argmin_give_the_first_extreme_as_i64() {
    let x = f32t(&[2, 3], &[3.0, 1.0, 3.0, 0.0, 0.0, -1.0]);
    let am = run(
        Op::Reduce {
            op: ReduceOp::ArgMax,
            axes: vec![1],
            keepdims: false,
        },
        &[&x],
    );
    assert_eq!(am.dtype, DType::I64);
    assert_bits(&am, &[2], &[0.0, 0.0]);
    let am = run(
        Op::Reduce {
            op: ReduceOp::ArgMin,
            axes: vec![1],
            keepdims: true,
        },
        &[&x],
    );
    assert_bits(&am, &[2, 1], &[1.0, 2.0]);
    let col = run(
        Op::Reduce {
            op: ReduceOp::ArgMax,
            axes: vec![0],
            keepdims: false,
        },
        &[&x],
    );
    assert_bits(&col, &[3], &[0.0, 0.0, 0.0]);
}

#[test]
fn reductions_propagate_nan_and_arg_reductions_pick_the_first_nan() {
    let x = f32t(&[4], &[1.0, NAN, 3.0, NAN]);
    assert_bits(&reduce(ReduceOp::Max, &[0], false, &x), &[], &[NAN]);
    assert_bits(&reduce(ReduceOp::Min, &[0], false, &x), &[], &[NAN]);
    assert_bits(&reduce(ReduceOp::ArgMax, &[0], false, &x), &[], &[1.0]);
    assert_bits(&reduce(ReduceOp::ArgMin, &[0], false, &x), &[], &[1.0]);
    let first = f32t(&[3], &[NAN, 9.0, -9.0]);
    assert_bits(&reduce(ReduceOp::ArgMin, &[0], false, &first), &[], &[0.0]);
}

#[test]
fn integer_reductions_wrap() {
    let x = t(DType::I8, &[2], &[100.0, 100.0]);
    assert_bits(&reduce(ReduceOp::Sum, &[0], false, &x), &[], &[-56.0]);
    let x = t(DType::I8, &[2], &[16.0, 16.0]);
    assert_bits(&reduce(ReduceOp::Prod, &[0], false, &x), &[], &[0.0]);
    let x = t(DType::U8, &[3], &[200.0, 100.0, 1.0]);
    assert_bits(&reduce(ReduceOp::Sum, &[0], false, &x), &[], &[45.0]);
    assert_bits(&reduce(ReduceOp::Max, &[0], false, &x), &[], &[200.0]);
}

#[test]
fn empty_reductions_give_identities_or_an_error() {
    let x = f32t(&[2, 0], &[]);
    assert_bits(&reduce(ReduceOp::Sum, &[1], false, &x), &[2], &[0.0, 0.0]);
    assert_bits(&reduce(ReduceOp::Prod, &[1], false, &x), &[2], &[1.0, 1.0]);
    assert_bits(&reduce(ReduceOp::Mean, &[1], false, &x), &[2], &[NAN, NAN]);
    // Over the non-empty axis, the result has no elements: nothing to be undefined.
    assert_bits(&reduce(ReduceOp::Max, &[0], false, &x), &[0], &[]);
    let max = Op::Reduce {
        op: ReduceOp::Max,
        axes: vec![1],
        keepdims: false,
    };
    assert_eq!(
        run_err(max, &[&x]),
        "reduce_max: reduces over an empty axis (f32[2, 0]), which has no maximum"
    );
    let argmin = Op::Reduce {
        op: ReduceOp::ArgMin,
        axes: vec![1],
        keepdims: true,
    };
    assert_eq!(
        run_err(argmin, &[&x]),
        "argmin: reduces over an empty axis (f32[2, 0]), which has no minimum"
    );
}

// ---------------------------------------------------------------------------------------------
// Matmul
// ---------------------------------------------------------------------------------------------

#[test]
fn matmul_2d() {
    let a = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    assert_bits(
        &run(Op::MatMul, &[&a, &b]),
        &[2, 2],
        &[19.0, 22.0, 43.0, 50.0],
    );
    let row = f32t(&[1, 3], &[1.0, 2.0, 3.0]);
    let col = f32t(&[3, 1], &[4.0, 5.0, 6.0]);
    assert_bits(&run(Op::MatMul, &[&row, &col]), &[1, 1], &[32.0]);
    assert_bits(
        &run(Op::MatMul, &[&col, &row]),
        &[3, 3],
        &[4.0, 8.0, 12.0, 5.0, 10.0, 15.0, 6.0, 12.0, 18.0],
    );
    // k = 0: every dot product is empty.
    let a = f32t(&[2, 0], &[]);
    let b = f32t(&[0, 3], &[]);
    assert_bits(&run(Op::MatMul, &[&a, &b]), &[2, 3], &[0.0; 6]);
}

#[test]
fn batched_matmul_broadcasts_batch_dims() {
    // a: [2, 1, 2, 3], b: [4, 3, 2] -> [2, 4, 2, 2].
    let a_data: Vec<f64> = (0..12).map(|v| v as f64 - 5.0).collect();
    let b_data: Vec<f64> = (0..24).map(|v| (v % 7) as f64 * 0.5).collect();
    let a = f64t(&[2, 1, 2, 3], &a_data);
    let b = f64t(&[4, 3, 2], &b_data);
    let y = run(Op::MatMul, &[&a, &b]);
    assert_eq!(y.dims, vec![2, 4, 2, 2]);
    let mut expected = Vec::new();
    for i in 0..2 {
        for j in 0..4 {
            for r in 0..2 {
                for c in 0..2 {
                    let dot: f64 = (0..3)
                        .map(|p| a_data[i * 6 + r * 3 + p] * b_data[j * 6 + p * 2 + c])
                        .sum();
                    expected.push(dot);
                }
            }
        }
    }
    assert_bits(&y, &[2, 4, 2, 2], &expected);
    // One element by hand: y[1, 2, 1, 0] = a[1, 0, 1, :] . b[2, :, 0] = [4, 5, 6] . [5, 0, 2] / 2.
    assert_eq!(y.data[((4 + 2) * 2 + 1) * 2], 16.0);
}

#[test]
fn integer_matmul_wraps() {
    let a = t(DType::I8, &[1, 2], &[100.0, 100.0]);
    let b = t(DType::I8, &[2, 1], &[1.0, 1.0]);
    assert_bits(&run(Op::MatMul, &[&a, &b]), &[1, 1], &[-56.0]);
}

// ---------------------------------------------------------------------------------------------
// Layout ops and gather
// ---------------------------------------------------------------------------------------------

fn iota(dims: &[u64]) -> F64Tensor {
    let n: u64 = dims.iter().product();
    f32t(dims, &(0..n).map(|v| v as f64).collect::<Vec<_>>())
}

#[test]
fn reshape_squeeze_and_unsqueeze_keep_row_major_order() {
    let x = iota(&[2, 3]);
    let r = run(
        Op::Reshape {
            dims: vec![ReshapeDim::Infer, 2u64.into()],
        },
        &[&x],
    );
    assert_bits(&r, &[3, 2], &x.data);
    let u = run(Op::Unsqueeze { axes: vec![0, 2] }, &[&x]);
    assert_bits(&u, &[1, 2, 1, 3], &x.data);
    let s = run(Op::Squeeze { axes: vec![2, 0] }, &[&u]);
    assert_bits(&s, &[2, 3], &x.data);
}

#[test]
fn permute_moves_axes() {
    let x = iota(&[2, 3]);
    let p = run(Op::Permute { perm: vec![1, 0] }, &[&x]);
    assert_bits(&p, &[3, 2], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    // [2, 3, 4] -> [4, 2, 3]: result[k, i, j] = x[i, j, k] = 12i + 4j + k.
    let x = iota(&[2, 3, 4]);
    let p = run(
        Op::Permute {
            perm: vec![2, 0, 1],
        },
        &[&x],
    );
    assert_eq!(p.dims, vec![4, 2, 3]);
    assert_eq!(p.data[6 * 3 + 3 + 2], (12 + 4 * 2 + 3) as f64);
}

#[test]
fn broadcast_to_repeats_size_one_dims() {
    let x = f32t(&[2, 1], &[1.0, 2.0]);
    let y = run(
        Op::BroadcastTo {
            dims: vec![3u64.into(), 2u64.into(), 2u64.into()],
        },
        &[&x],
    );
    assert_bits(
        &y,
        &[3, 2, 2],
        &[1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0],
    );
}

#[test]
fn slice_with_start_stop_and_step() {
    let x = iota(&[7]);
    let s = run(
        Op::Slice {
            ranges: vec![SliceRange::new(1, 7, 2)],
        },
        &[&x],
    );
    assert_bits(&s, &[3], &[1.0, 3.0, 5.0]);
    let to_end = SliceRange {
        start: 4,
        stop: None,
        step: 2,
    };
    let s = run(
        Op::Slice {
            ranges: vec![to_end],
        },
        &[&x],
    );
    assert_bits(&s, &[2], &[4.0, 6.0]);
    let x = iota(&[3, 4]);
    let s = run(
        Op::Slice {
            ranges: vec![SliceRange::new(1, 3, 1), SliceRange::new(0, 4, 3)],
        },
        &[&x],
    );
    assert_bits(&s, &[2, 2], &[4.0, 7.0, 8.0, 11.0]);
    // A step past the end takes only the start.
    let first = run(
        Op::Slice {
            ranges: vec![SliceRange::new(1, 3, u64::MAX), SliceRange::new(1, 4, 5)],
        },
        &[&x],
    );
    assert_bits(&first, &[1, 1], &[5.0]);
    let empty = run(
        Op::Slice {
            ranges: vec![SliceRange::new(2, 2, 1), SliceRange::FULL],
        },
        &[&x],
    );
    assert_bits(&empty, &[0, 4], &[]);
}

#[test]
fn concat_joins_along_an_axis() {
    let a = iota(&[2, 2]);
    let b = f32t(&[2, 1], &[10.0, 11.0]);
    let c = f32t(&[2, 0], &[]);
    let y = run(Op::Concat { axis: 1 }, &[&a, &b, &c, &a]);
    assert_bits(
        &y,
        &[2, 5],
        &[0.0, 1.0, 10.0, 0.0, 1.0, 2.0, 3.0, 11.0, 2.0, 3.0],
    );
    let y = run(Op::Concat { axis: 0 }, &[&a, &f32t(&[1, 2], &[7.0, 8.0])]);
    assert_bits(&y, &[3, 2], &[0.0, 1.0, 2.0, 3.0, 7.0, 8.0]);
}

#[test]
fn pad_fills_with_the_value() {
    let x = iota(&[2, 2]);
    let y = run(
        Op::Pad {
            pads: vec![(1, 0), (0, 2)],
            value: ExactF64(-1.0),
        },
        &[&x],
    );
    assert_bits(
        &y,
        &[3, 4],
        &[
            -1.0, -1.0, -1.0, -1.0, //
            0.0, 1.0, -1.0, -1.0, //
            2.0, 3.0, -1.0, -1.0,
        ],
    );
    let y = run(
        Op::Pad {
            pads: vec![(2, 1)],
            value: ExactF64(NAN),
        },
        &[&f32t(&[1], &[5.0])],
    );
    assert_bits(&y, &[4], &[NAN, NAN, 5.0, NAN]);
}

#[test]
fn gather_takes_rows_along_an_axis() {
    // Embedding lookup: data [3, 2], indices [2, 2] -> [2, 2, 2].
    let data = iota(&[3, 2]);
    let idx = t(DType::I64, &[2, 2], &[2.0, 0.0, 1.0, 2.0]);
    let y = run(Op::Gather { axis: 0 }, &[&data, &idx]);
    assert_bits(&y, &[2, 2, 2], &[4.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // Along axis 1 with i32 indices: [2, 3] with [2] -> [2, 2].
    let data = iota(&[2, 3]);
    let idx = t(DType::I32, &[2], &[2.0, 2.0]);
    let y = run(Op::Gather { axis: 1 }, &[&data, &idx]);
    assert_bits(&y, &[2, 2], &[2.0, 2.0, 5.0, 5.0]);
    // A scalar index drops the axis.
    let y = run(
        Op::Gather { axis: 1 },
        &[&data, &t(DType::I64, &[], &[1.0])],
    );
    assert_bits(&y, &[2], &[1.0, 4.0]);
}

#[test]
fn gather_refuses_indices_out_of_range() {
    let data = iota(&[3, 2]);
    let idx = t(DType::I64, &[2], &[0.0, 3.0]);
    assert_eq!(
        run_err(Op::Gather { axis: 0 }, &[&data, &idx]),
        "gather: index 3 (element 1 of the indices) is out of range for axis 0 of size 3"
    );
    let idx = t(DType::I32, &[1], &[-1.0]);
    assert_eq!(
        run_err(Op::Gather { axis: 0 }, &[&data, &idx]),
        "gather: index -1 (element 0 of the indices) is out of range for axis 0 of size 3"
    );
    // Checked even when the result is empty.
    let empty = f32t(&[0, 2], &[]);
    let idx = t(DType::I64, &[1], &[1.0]);
    assert!(run_result(Op::Gather { axis: 1 }, &[&empty, &idx]).is_ok());
    let idx = t(DType::I64, &[1], &[0.0]);
    assert!(run_result(Op::Gather { axis: 0 }, &[&empty, &idx]).is_err());
}

// ---------------------------------------------------------------------------------------------
// Graphs: sources, symbolic dims, states
// ---------------------------------------------------------------------------------------------

#[test]
fn symbolic_dims_are_bound_from_the_inputs() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", 3]).unwrap();
    let b = g.parameter("b", DType::F32, shape![3]).unwrap();
    let y = (&x + &b).unwrap();
    let ones = g
        .scalar(DType::F32, 1.0)
        .unwrap()
        .broadcast_to(&shape!["batch", 3])
        .unwrap();
    let r = y
        .add(&ones)
        .unwrap()
        .reshape(&["batch".into(), 3u64.into(), 1u64.into()])
        .unwrap();
    g.output("y", &r).unwrap();
    g.output("rows", &x.sum(&[1], false).unwrap()).unwrap();
    let graph = g.finish().unwrap();

    let src = sources(vec![
        ("x", iota(&[2, 3])),
        ("b", f32t(&[3], &[10.0, 20.0, 30.0])),
    ]);
    let dims = bind_dims(&graph, &src).unwrap();
    assert_eq!(dims, BTreeMap::from([("batch".to_string(), 2)]));
    assert_eq!(
        concrete_dims(&shape!["batch", 3, "batch"], &dims).unwrap(),
        vec![2, 3, 2]
    );
    let run = evaluate(&graph, &src).unwrap();
    assert_bits(
        &run.outputs["y"],
        &[2, 3, 1],
        &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0],
    );
    assert_bits(&run.outputs["rows"], &[2], &[3.0, 12.0]);
    assert!(run.states.is_empty());

    // Another batch size, same graph.
    let src = sources(vec![("x", iota(&[1, 3])), ("b", f32t(&[3], &[0.0; 3]))]);
    let run = evaluate(&graph, &src).unwrap();
    assert_bits(&run.outputs["y"], &[1, 3, 1], &[1.0, 2.0, 3.0]);
}

#[test]
fn unbound_dims_are_errors_where_a_node_needs_them() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![2]).unwrap();
    let n = g
        .scalar(DType::F32, 0.0)
        .unwrap()
        .broadcast_to(&shape!["n"])
        .unwrap();
    g.output("x", &x).unwrap();
    g.output("n", &n).unwrap();
    let graph = g.finish().unwrap();
    assert_eq!(
        eval_err(&graph, vec![("x", iota(&[2]))]),
        "%2 (broadcast_to): symbolic dim `n` is not bound by any supplied tensor"
    );
    assert_eq!(
        concrete_dims(&shape![1, "n"], &BTreeMap::new())
            .unwrap_err()
            .to_string(),
        "symbolic dim `n` is not bound by any supplied tensor"
    );

    // A state left to zeros needs its dims bound.
    let g = GraphBuilder::new();
    let s = g.state("s", DType::F32, shape!["len"]).unwrap();
    g.output("s", &s.exp().unwrap()).unwrap();
    let graph = g.finish().unwrap();
    assert_eq!(
        eval_err(&graph, vec![]),
        "%0 (state): symbolic dim `len` is not bound by any supplied tensor"
    );
    let run = evaluate(&graph, &sources(vec![("s", f32t(&[1], &[0.0]))])).unwrap();
    assert_bits(&run.outputs["s"], &[1], &[1.0]);
}

/// `x: f32[batch, 3]`, `y: f32[batch]`, output `x + y[:, None]`... via unsqueeze.
fn two_input_graph() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", 3]).unwrap();
    let y = g.input("y", DType::F32, shape!["batch"]).unwrap();
    let w = g.parameter("w", DType::F16, shape![3]).unwrap();
    let sum = (&x + &y.unsqueeze(&[1]).unwrap()).unwrap();
    g.output("out", &sum).unwrap();
    g.output("w", &w.cast(DType::F32).unwrap()).unwrap();
    g.finish().unwrap()
}

#[test]
fn source_errors_name_the_node_and_what_is_wrong() {
    let graph = two_input_graph();
    let w = || t(DType::F16, &[3], &[1.0, 2.0, 3.0]);
    let ok = || vec![("x", iota(&[2, 3])), ("y", iota(&[2])), ("w", w())];
    assert!(evaluate(&graph, &sources(ok())).is_ok());

    assert_eq!(
        eval_err(&graph, vec![("x", iota(&[2, 3])), ("w", w())]),
        "%1 (input `y`): no tensor is supplied"
    );
    assert_eq!(
        eval_err(&graph, vec![("x", iota(&[2, 3])), ("y", iota(&[2]))]),
        "%2 (parameter `w`): no tensor is supplied"
    );
    assert_eq!(
        eval_err(
            &graph,
            vec![("x", iota(&[2, 4])), ("y", iota(&[2])), ("w", w())]
        ),
        "%0 (input `x`): the supplied tensor is f32[2, 4], expected f32[batch, 3]"
    );
    assert_eq!(
        eval_err(
            &graph,
            vec![("x", iota(&[6])), ("y", iota(&[2])), ("w", w())]
        ),
        "%0 (input `x`): the supplied tensor is f32[6], expected f32[batch, 3]"
    );
    assert_eq!(
        eval_err(
            &graph,
            vec![("x", iota(&[2, 3])), ("y", iota(&[2])), ("w", iota(&[3]))]
        ),
        "%2 (parameter `w`): the supplied tensor is f32[3], expected f16[3]"
    );
    assert_eq!(
        eval_err(
            &graph,
            vec![("x", iota(&[2, 3])), ("y", iota(&[3])), ("w", w())]
        ),
        "%1 (input `y`): symbolic dim `batch` is 3 here but 2 in `x` (%0)"
    );
    let mut extra = ok();
    extra.push(("z", iota(&[1])));
    assert_eq!(
        eval_err(&graph, extra),
        "a tensor is supplied for `z`, but the graph has no input, parameter or state `z`"
    );
    // A tensor built around `new`'s checks is still checked.
    let inexact = F64Tensor {
        dtype: DType::F16,
        dims: vec![3],
        data: vec![0.1, 0.0, 0.0],
    };
    assert_eq!(
        eval_err(
            &graph,
            vec![("x", iota(&[2, 3])), ("y", iota(&[2])), ("w", inexact)]
        ),
        "%2 (parameter `w`): element 0 (0.1) is not an exact f16 value"
    );
    let short = F64Tensor {
        dtype: DType::F32,
        dims: vec![2, 3],
        data: vec![0.0; 5],
    };
    assert_eq!(
        eval_err(&graph, vec![("x", short), ("y", iota(&[2])), ("w", w())]),
        "%0 (input `x`): f32[2, 3] needs 6 values, got 5"
    );
    // bind_dims alone binds from what is given, without asking for the rest.
    let dims = bind_dims(&graph, &sources(vec![("y", iota(&[4]))])).unwrap();
    assert_eq!(dims["batch"], 4);
}

#[test]
fn odd_source_names_keep_messages_on_one_line() {
    let g = GraphBuilder::new();
    let x = g.input("x\n`y\"", DType::F32, shape![1]).unwrap();
    g.output("y", &x).unwrap();
    let graph = g.finish().unwrap();
    assert_eq!(
        eval_err(&graph, vec![]),
        r#"%0 (input `x\n`y\"`): no tensor is supplied"#
    );
    assert_eq!(
        eval_err(&graph, vec![("a\tb", iota(&[1]))]),
        r"a tensor is supplied for `a\tb`, but the graph has no input, parameter or state `a\tb`"
    );
}

#[test]
fn host_tensor_new_checks_length_and_exactness() {
    let err = |r: Result<F64Tensor, EvalError>| r.unwrap_err().to_string();
    assert_eq!(
        err(F64Tensor::new(DType::F32, vec![2, 2], vec![0.0; 3])),
        "malformed tensor: f32[2, 2] needs 4 values, got 3"
    );
    assert_eq!(
        err(F64Tensor::new(DType::F16, vec![1], vec![0.1])),
        "malformed tensor: element 0 (0.1) is not an exact f16 value"
    );
    assert_eq!(
        err(F64Tensor::new(DType::I32, vec![2], vec![1.0, 0.5])),
        "malformed tensor: element 1 (0.5) is not an exact i32 value"
    );
    assert_eq!(
        err(F64Tensor::new(DType::I8, vec![1], vec![NAN])),
        "malformed tensor: element 0 (NaN) is not an exact i8 value"
    );
    assert_eq!(
        err(F64Tensor::new(DType::U8, vec![1], vec![256.0])),
        "malformed tensor: element 0 (256.0) is not an exact u8 value"
    );
    assert_eq!(
        err(F64Tensor::new(DType::Bool, vec![1], vec![2.0])),
        "malformed tensor: element 0 (2.0) is not an exact bool value"
    );
    assert_eq!(
        err(F64Tensor::new(DType::F32, vec![1; 9], vec![0.0])),
        "malformed tensor: f32[1, 1, 1, 1, 1, 1, 1, 1, 1] has rank 9 > 8"
    );
    assert!(F64Tensor::new(DType::F16, vec![2], vec![NAN, INF]).is_ok());
    assert!(F64Tensor::new(DType::F32, vec![], vec![1.5]).is_ok());
    let z = F64Tensor::zeros(DType::I32, vec![2, 0, 3]);
    assert_eq!((z.numel(), z.dims.clone()), (0, vec![2, 0, 3]));
    assert_eq!(F64Tensor::zeros(DType::F16, vec![2, 3]).data, vec![0.0; 6]);
}

#[test]
fn eval_op_refuses_what_it_cannot_evaluate_without_panicking() {
    let x = iota(&[2, 3]);
    let ty = static_type(&x);
    let none = BTreeMap::new();
    let msg = |r: Result<F64Tensor, EvalError>| r.unwrap_err().to_string();
    let input = Op::Input { name: "x".into() };
    assert_eq!(
        msg(eval_op(&input, &[], &ty, &none)),
        "input: a source is bound by `evaluate`, not evaluated"
    );
    assert_eq!(
        msg(eval_op(&Op::MatMul, &[&x], &ty, &none)),
        "matmul: the operands do not type-check: matmul(f32[2, 3]): takes 2 operand(s), got 1"
    );
    let exp = Op::Unary(UnaryOp::Exp);
    let wrong = TensorType::new(DType::F32, shape![2, 4]);
    assert_eq!(
        msg(eval_op(&exp, &[&x], &wrong, &none)),
        "exp: the operands give f32[2, 3], but the node's type is f32[2, 4]"
    );
    let bad = F64Tensor {
        dtype: DType::F32,
        dims: vec![2, 3],
        data: vec![],
    };
    assert_eq!(
        msg(eval_op(&exp, &[&bad], &ty, &none)),
        "exp: operand 0 is malformed: f32[2, 3] needs 6 values, got 0"
    );
    // A symbolic result dim is checked against its binding.
    let sym = TensorType::new(DType::F32, shape!["n", 3]);
    let n3 = BTreeMap::from([("n".to_string(), 3)]);
    assert!(eval_op(&exp, &[&x], &sym, &none).is_ok());
    assert!(eval_op(&exp, &[&x], &sym, &n3).is_err());
    let to_n = Op::BroadcastTo {
        dims: vec!["n".into(), 3u64.into()],
    };
    assert_eq!(
        msg(eval_op(&to_n, &[&x], &sym, &none)),
        "broadcast_to: symbolic dim `n` is not bound by any supplied tensor"
    );
    let ones = f32t(&[1, 3], &[1.0, 2.0, 3.0]);
    let y = eval_op(&to_n, &[&ones], &sym, &n3).unwrap();
    assert_eq!(y.dims, vec![3, 3]);
}

/// `counter: i32[2]` += 1; `cache: f32[4, 2]` gets `row` written at the run-time `pos`;
/// `fixed: f32[3]` gets `[9]` at 1; `kept: f32[1]` is only read. Outputs read the states.
fn state_graph() -> Graph {
    let g = GraphBuilder::new();
    let row = g.input("row", DType::F32, shape![1, 2]).unwrap();
    let pos = g.input("pos", DType::I64, shape![]).unwrap();
    let counter = g.state("counter", DType::I32, shape![2]).unwrap();
    let cache = g.state("cache", DType::F32, shape![4, 2]).unwrap();
    let fixed = g.state("fixed", DType::F32, shape![3]).unwrap();
    let kept = g.state("kept", DType::F32, shape![1]).unwrap();
    let next = counter.add_scalar(1.0).unwrap();
    counter.assign(&next).unwrap();
    let written = cache.write_slice_at(&row, 0, &pos).unwrap();
    let nine = g.constant(DType::F32, shape![1], &[9.0]).unwrap();
    fixed.write_slice(&nine, 0, 1).unwrap();
    // Reads after the updates in node order still see the start-of-run values.
    g.output("cache_sum", &cache.sum(&[0, 1], false).unwrap())
        .unwrap();
    g.output("counter", &counter).unwrap();
    g.output("kept", &kept).unwrap();
    g.output("written", &written).unwrap();
    g.finish().unwrap()
}

#[test]
fn states_update_and_reads_see_the_start_of_the_run() {
    let graph = state_graph();
    let cache: Vec<f64> = (1..=8).map(f64::from).collect();
    let src = sources(vec![
        ("row", f32t(&[1, 2], &[-1.0, -2.0])),
        ("pos", t(DType::I64, &[], &[2.0])),
        ("cache", f32t(&[4, 2], &cache)),
        ("kept", f32t(&[1], &[7.0])),
    ]);
    let run = evaluate(&graph, &src).unwrap();
    let new_cache = [1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 7.0, 8.0];
    assert_bits(&run.states["cache"], &[4, 2], &new_cache);
    assert_bits(&run.states["counter"], &[2], &[1.0, 1.0]);
    assert_bits(&run.states["fixed"], &[3], &[0.0, 9.0, 0.0]);
    assert_bits(&run.states["kept"], &[1], &[7.0]);
    assert_eq!(run.states.len(), 4);
    assert_bits(&run.outputs["cache_sum"], &[], &[36.0]);
    assert_bits(&run.outputs["counter"], &[2], &[0.0, 0.0]);
    assert_bits(&run.outputs["kept"], &[1], &[7.0]);
    assert_bits(&run.outputs["written"], &[4, 2], &new_cache);

    // Feeding the states back runs the next step.
    let mut next = src.clone();
    next.extend(run.states.clone());
    next.insert("pos".into(), t(DType::I64, &[], &[3.0]));
    let run2 = evaluate(&graph, &next).unwrap();
    assert_bits(&run2.states["counter"], &[2], &[2.0, 2.0]);
    assert_bits(&run2.outputs["cache_sum"], &[], &[22.0]);
    assert_eq!(&run2.states["cache"].data[6..], &[-1.0, -2.0]);
}

#[test]
fn state_write_slice_refuses_offsets_out_of_range() {
    let graph = state_graph();
    let with_pos = |pos: f64| {
        vec![
            ("row", f32t(&[1, 2], &[0.0, 0.0])),
            ("pos", t(DType::I64, &[], &[pos])),
        ]
    };
    assert!(evaluate(&graph, &sources(with_pos(3.0))).is_ok());
    assert_eq!(
        eval_err(&graph, with_pos(4.0)),
        "%9 (state_write_slice): offset 4 with 1 elements overruns axis 0 of size 4"
    );
    assert_eq!(
        eval_err(&graph, with_pos(-1.0)),
        "%9 (state_write_slice): offset -1 with 1 elements overruns axis 0 of size 4"
    );
}

#[test]
fn state_write_slice_along_an_inner_axis() {
    let state = iota(&[2, 4]);
    let value = f32t(&[2, 2], &[-1.0, -2.0, -3.0, -4.0]);
    let op = Op::StateWriteSlice {
        axis: 1,
        start: Some(1),
    };
    let y = run(op, &[&state, &value]);
    assert_bits(&y, &[2, 4], &[0.0, -1.0, -2.0, 3.0, 4.0, -3.0, -4.0, 7.0]);
    let op = Op::StateWriteSlice {
        axis: 1,
        start: None,
    };
    let offset = t(DType::I32, &[], &[2.0]);
    let y = run(op.clone(), &[&state, &value, &offset]);
    assert_bits(&y, &[2, 4], &[0.0, 1.0, -1.0, -2.0, 4.0, 5.0, -3.0, -4.0]);
    let offset = t(DType::I32, &[], &[3.0]);
    assert_eq!(
        run_err(op, &[&state, &value, &offset]),
        "state_write_slice: offset 3 with 2 elements overruns axis 1 of size 4"
    );
    let assigned = run(Op::StateAssign, &[&state, &iota(&[2, 4])]);
    assert_eq!(assigned, iota(&[2, 4]));
}

// ---------------------------------------------------------------------------------------------
// Composites from the builder
// ---------------------------------------------------------------------------------------------

#[test]
fn softmax_rows_sum_to_one() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["rows", 5]).unwrap();
    g.output("y", &x.softmax(1).unwrap()).unwrap();
    let graph = g.finish().unwrap();
    let x = F64Tensor::random(DType::F32, vec![3, 5], 7);
    let run = evaluate(&graph, &sources(vec![("x", x.clone())])).unwrap();
    let y = &run.outputs["y"];
    assert_eq!(y.dims, vec![3, 5]);
    for (r, row) in y.data.chunks(5).enumerate() {
        let sum: f64 = row.iter().sum();
        assert!((sum - 1.0).abs() < 1e-12, "row {r} sums to {sum}");
        let xs = &x.data[r * 5..r * 5 + 5];
        let denom: f64 = xs.iter().map(|v| v.exp()).sum();
        let expected: Vec<f64> = xs.iter().map(|v| v.exp() / denom).collect();
        assert_close(row, &expected);
    }
}

#[test]
fn layer_norm_centers_and_scales_rows() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![4, 8]).unwrap();
    let gamma = g.parameter("gamma", DType::F32, shape![8]).unwrap();
    let beta = g.parameter("beta", DType::F32, shape![8]).unwrap();
    g.output("y", &x.layer_norm(&gamma, &beta, 1e-5).unwrap())
        .unwrap();
    let graph = g.finish().unwrap();
    let src = sources(vec![
        ("x", F64Tensor::random(DType::F32, vec![4, 8], 3)),
        ("gamma", f32t(&[8], &[1.0; 8])),
        ("beta", f32t(&[8], &[0.0; 8])),
    ]);
    let y = &evaluate(&graph, &src).unwrap().outputs["y"];
    for row in y.data.chunks(8) {
        let mean = row.iter().sum::<f64>() / 8.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 8.0;
        assert!(mean.abs() < 1e-12, "mean {mean}");
        assert!((var - 1.0).abs() < 1e-3, "variance {var}");
    }
}

#[test]
fn causal_attention_matches_a_hand_written_loop() {
    let (s, d) = (3usize, 2usize);
    let g = GraphBuilder::new();
    let ty = shape![1, s as u64, d as u64];
    let q = g.input("q", DType::F64, ty.clone()).unwrap();
    let k = g.input("k", DType::F64, ty.clone()).unwrap();
    let v = g.input("v", DType::F64, ty).unwrap();
    g.output("y", &q.attention(&k, &v, true).unwrap()).unwrap();
    let graph = g.finish().unwrap();
    let dims = vec![1, s as u64, d as u64];
    let (qv, kv, vv) = (
        F64Tensor::random(DType::F64, dims.clone(), 1),
        F64Tensor::random(DType::F64, dims.clone(), 2),
        F64Tensor::random(DType::F64, dims, 3),
    );
    let src = sources(vec![
        ("q", qv.clone()),
        ("k", kv.clone()),
        ("v", vv.clone()),
    ]);
    let y = &evaluate(&graph, &src).unwrap().outputs["y"];

    let mut expected = Vec::new();
    for i in 0..s {
        // Query i sees keys 0..=i.
        let scores: Vec<f64> = (0..=i)
            .map(|j| {
                (0..d)
                    .map(|c| qv.data[i * d + c] * kv.data[j * d + c])
                    .sum::<f64>()
            })
            .map(|x| x / (d as f64).sqrt())
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for c in 0..d {
            let out: f64 = (0..=i)
                .map(|j| weights[j] / total * vv.data[j * d + c])
                .sum();
            expected.push(out);
        }
    }
    assert_eq!(y.dims, vec![1, 3, 2]);
    assert_close(&y.data, &expected);
    // The first query sees only the first key: its output is the first value row.
    assert_close(&y.data[..2], &vv.data[..2]);
}

// ---------------------------------------------------------------------------------------------
// Random tensors
// ---------------------------------------------------------------------------------------------

#[test]
fn random_tensors_are_deterministic_exact_and_never_all_zero() {
    for dtype in DType::ALL {
        let a = F64Tensor::random(dtype, vec![4, 16], 42);
        assert_eq!(a, F64Tensor::random(dtype, vec![4, 16], 42), "{dtype}");
        assert_ne!(a, F64Tensor::random(dtype, vec![4, 16], 43), "{dtype}");
        // Exact in the dtype: `new` accepts the same values.
        assert!(F64Tensor::new(dtype, a.dims.clone(), a.data.clone()).is_ok());
        let (lo, hi) = match dtype {
            DType::Bool => (0.0, 1.0),
            d if d.is_unsigned_int() => (0.0, 15.0),
            d if d.is_int() => (-8.0, 7.0),
            _ => (-2.0, 2.0),
        };
        assert!(a.data.iter().all(|v| (lo..=hi).contains(v)), "{dtype}");
        if dtype.is_signed_int() || dtype.is_float() {
            assert!(a.data.iter().any(|&v| v < 0.0), "{dtype} has negatives");
        }
        for seed in 0..64 {
            let one = F64Tensor::random(dtype, vec![1], seed);
            assert_ne!(one.data, vec![0.0], "{dtype} seed {seed}");
            let few = F64Tensor::random(dtype, vec![2, 1], seed);
            assert!(few.data.iter().any(|&v| v != 0.0), "{dtype} seed {seed}");
        }
        assert_eq!(F64Tensor::random(dtype, vec![0, 3], 1).numel(), 0);
        assert_eq!(F64Tensor::random(dtype, vec![], 1).numel(), 1);
    }
}

// ---------------------------------------------------------------------------------------------
// The example models at small sizes
// ---------------------------------------------------------------------------------------------

#[test]
fn small_example_models_evaluate() {
    let dims: BTreeMap<String, u64> = [("batch", 2), ("tokens", 3), ("rows", 2)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let attention = AttentionConfig {
        seq: 4,
        hidden: 8,
        heads: 2,
        causal: true,
    };
    let decoder = DecoderConfig {
        hidden: 8,
        heads: 2,
        context: 4,
        ffn: 16,
    };
    let small: BTreeMap<&str, (Graph, Vec<u64>)> = BTreeMap::from([
        ("mlp", (models::mlp(8, 16).unwrap(), vec![2, 8])),
        ("ln_gelu", (models::ln_gelu(16).unwrap(), vec![3, 16])),
        ("softmax", (models::softmax(16).unwrap(), vec![2, 16])),
        (
            "attention",
            (models::attention(&attention).unwrap(), vec![2, 4, 8]),
        ),
        (
            "decoder_block",
            (models::decoder_block(&decoder).unwrap(), vec![1, 1, 8]),
        ),
    ]);
    // Every example (built at full size here, not evaluated) has a small version.
    for (name, _) in models::examples().unwrap() {
        let (graph, out_dims) = small
            .get(name)
            .unwrap_or_else(|| panic!("add a small version of the example `{name}` here"));
        let mut src = random_sources(graph, &dims);
        if name == "decoder_block" {
            src.insert("pos".into(), t(DType::I64, &[], &[2.0]));
        }
        let run = evaluate(graph, &src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let y = &run.outputs["y"];
        assert_eq!((y.dtype, &y.dims), (DType::F16, out_dims), "{name}");
        assert!(y.data.iter().all(|v| v.is_finite()), "{name}: {y:?}");
        assert!(y.data.iter().any(|&v| v != 0.0), "{name}");
    }
}

#[test]
fn small_decoder_block_appends_to_its_caches() {
    let cfg = DecoderConfig {
        hidden: 8,
        heads: 2,
        context: 4,
        ffn: 16,
    };
    let graph = models::decoder_block(&cfg).unwrap();
    let mut src = random_sources(&graph, &BTreeMap::new());
    src.insert("pos".into(), t(DType::I64, &[], &[1.0]));
    let cache_dims = vec![1, 2, 4, 4];
    let k0 = F64Tensor::random(DType::F16, cache_dims.clone(), 5);
    src.insert("k_cache".into(), k0.clone());
    let run = evaluate(&graph, &src).unwrap();
    let y = &run.outputs["y"];
    assert_eq!(y.dims, vec![1, 1, 8]);
    assert!(y.data.iter().all(|v| v.is_finite()));

    // Per head, row `pos` of the cache is new and the other rows are kept. The v cache was not
    // supplied: it started as zeros, so only its row `pos` may be non-zero.
    let (k1, v1) = (&run.states["k_cache"], &run.states["v_cache"]);
    assert_eq!(k1.dims, cache_dims);
    for head in 0..2 {
        for row in 0..4 {
            let at = (head * 4 + row) * 4;
            let (before, after) = (&k0.data[at..at + 4], &k1.data[at..at + 4]);
            let v_row = &v1.data[at..at + 4];
            if row == 1 {
                assert_ne!(before, after, "head {head}");
                assert!(v_row.iter().any(|&v| v != 0.0), "head {head}");
            } else {
                assert_eq!(before, after, "head {head} row {row}");
                assert!(v_row.iter().all(|&v| v == 0.0), "head {head} row {row}");
            }
        }
    }
    // Past the cache's end, the write fails and names its node.
    src.insert("pos".into(), t(DType::I64, &[], &[4.0]));
    let err = evaluate(&graph, &src).unwrap_err();
    assert!(
        matches!(
            err,
            EvalError::OpFailed {
                node: Some(NodeId(_)),
                op: "state_write_slice",
                ..
            }
        ),
        "{err}"
    );
    assert!(err
        .to_string()
        .contains("offset 4 with 1 elements overruns axis 2 of size 4"));
}

/// A decoder of two layers is two decoder blocks in a row: the second block takes the first's
/// output, each layer its own weights and caches. (The oracle does not round results, so the
/// second block's input is the first's output rounded to f16, and what follows it agrees to
/// about f16's precision.)
#[test]
fn decoder_layers_are_blocks_in_a_row() {
    let cfg = DecoderConfig {
        hidden: 8,
        heads: 2,
        context: 4,
        ffn: 16,
    };
    let two = models::decoder(&cfg, 2).unwrap();
    assert_eq!(two.states().len(), 4);
    let mut src = random_sources(&two, &BTreeMap::new());
    src.insert("pos".into(), t(DType::I64, &[], &[2.0]));
    let run = evaluate(&two, &src).unwrap();
    let block = models::decoder_block(&cfg).unwrap();
    let mut x = src["x"].clone();
    for layer in 0..2 {
        let prefix = format!("l{layer}.");
        let mut layer_src: BTreeMap<String, F64Tensor> = src
            .iter()
            .filter_map(|(n, v)| Some((n.strip_prefix(&prefix)?.to_string(), v.clone())))
            .collect();
        layer_src.insert("x".into(), x);
        layer_src.insert("pos".into(), src["pos"].clone());
        let step = evaluate(&block, &layer_src).unwrap();
        for cache in ["k_cache", "v_cache"] {
            let (alone, stacked) = (
                &step.states[cache].data,
                &run.states[&format!("{prefix}{cache}")].data,
            );
            let scale = alone.iter().fold(0f64, |m, v| m.max(v.abs()));
            assert!(scale > 0.0);
            for (a, s) in alone.iter().zip(stacked) {
                let tolerance = if layer == 0 { 0.0 } else { 1e-2 * scale };
                assert!(
                    (a - s).abs() <= tolerance,
                    "layer {layer} {cache}: {a} vs {s}"
                );
            }
        }
        x = step.outputs["y"].clone();
        DType::F16.round_values(&mut x.data);
    }
    let scale = x.data.iter().fold(0f64, |m, v| m.max(v.abs()));
    for (a, s) in x.data.iter().zip(&run.outputs["y"].data) {
        assert!((a - s).abs() <= 1e-2 * scale, "y: {a} vs {s}");
    }
}

#[test]
fn conv_sums_each_window_of_its_group() {
    // x: [1, 2, 3] (two channels), w: [2, 1, 2] in two groups (depthwise), stride 1, padding
    // (1, 0), dilation 2: out[o, q] = Σ_k w[o, 0, k] · x[o, q - 1 + 2k].
    let x = f32t(&[1, 2, 3], &[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
    let w = f32t(&[2, 1, 2], &[1.0, 100.0, -1.0, 0.5]);
    let op = Op::Conv {
        strides: vec![1],
        dilations: vec![2],
        pads: vec![(1, 0)],
        groups: 2,
    };
    // Q = (3 + 1 - 2 - 1) / 1 + 1 = 2; q = 0 reads positions -1 (pad) and 1; q = 1 reads 0, 2.
    assert_bits(
        &run(op, &[&x, &w]),
        &[1, 2, 2],
        &[200.0, 301.0, 10.0, -10.0 + 15.0],
    );
    // Two input channels summed, a 2x2 kernel with stride 2 over a 3x4 image.
    let x = f32t(&[1, 2, 3, 4], &(0..24).map(f64::from).collect::<Vec<_>>());
    let w = f32t(&[1, 2, 2, 2], &[1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]);
    let op = Op::Conv {
        strides: vec![2, 2],
        dilations: vec![1, 1],
        pads: vec![(0, 0), (0, 0)],
        groups: 1,
    };
    // out[0, 0, 0, j] = x0[0, 2j] + x0[1, 2j + 1] + x1[0, 2j + 1] + x1[1, 2j].
    assert_bits(
        &run(op, &[&x, &w]),
        &[1, 1, 1, 2],
        &[5.0 + 13.0 + 16.0, 2.0 + 7.0 + 15.0 + 18.0],
    );
}
