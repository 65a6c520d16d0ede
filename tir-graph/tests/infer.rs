//! Type inference for every op of the graph IR, and its errors.
//!
//! Most checks call [`tir_graph::infer::infer`] directly on operand types; a representative
//! sample goes through [`Graph::add_node`] and asserts the whole error string, which must name
//! the node (`%N`), the op and the operand types. The last test is a property test: inference
//! never panics, whatever the op, its attributes and its operand types.

use proptest::prelude::*;
use tir_graph::infer::{check_source, infer, InferError};
use tir_graph::op::{ConstData, ExactF64, MAX_CONSTANT_ELEMENTS};
use tir_graph::{
    shape, BinaryOp, DType, Dim, Graph, GraphError, NodeId, Op, ReduceOp, ReshapeDim, Shape,
    SliceRange, TensorType, UnaryOp, MAX_RANK,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `tt!(F32[4, "batch"])` is the type `f32[4, batch]`.
macro_rules! tt {
    ($dt:ident [$($d:expr),* $(,)?]) => {
        TensorType::new(DType::$dt, shape![$($d),*])
    };
}

fn ty(dtype: DType, shape: Shape) -> TensorType {
    TensorType::new(dtype, shape)
}

/// The inferred type, or a panic naming the error.
#[track_caller]
fn ok(op: Op, operands: &[&TensorType]) -> TensorType {
    infer(&op, operands).unwrap_or_else(|e| panic!("{op:?} should infer, got: {e}"))
}

/// The inference error.
#[track_caller]
fn fail(op: Op, operands: &[&TensorType]) -> InferError {
    match infer(&op, operands) {
        Ok(t) => panic!("{op:?} on {operands:?} should fail, got {t}"),
        Err(e) => e,
    }
}

/// The reason of the inference error (the text after `op(types): `).
#[track_caller]
fn reason(op: Op, operands: &[&TensorType]) -> String {
    let e = fail(op.clone(), operands);
    assert_eq!(e.op, op.name(), "the error names the op");
    assert_eq!(
        e.operands,
        operands.iter().map(|t| (*t).clone()).collect::<Vec<_>>(),
        "the error carries the operand types"
    );
    e.reason
}

fn input_op(name: &str) -> Op {
    Op::Input {
        name: name.to_string(),
    }
}

fn state_op(name: &str) -> Op {
    Op::State {
        name: name.to_string(),
    }
}

/// A graph with one input per type (`x0`, `x1`, ...), then `op` applied to all of them; the
/// whole error string of the failing `add_node`.
#[track_caller]
fn graph_err(op: Op, operands: &[TensorType]) -> String {
    let mut g = Graph::new();
    let ids = add_inputs(&mut g, operands);
    let before = g.len();
    let err = g
        .add_node(op, &ids, None)
        .expect_err("add_node should fail")
        .to_string();
    assert_eq!(g.len(), before, "a failed add_node adds nothing");
    err
}

fn add_inputs(g: &mut Graph, types: &[TensorType]) -> Vec<NodeId> {
    types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            g.add_node(input_op(&format!("x{i}")), &[], Some(t.clone()))
                .unwrap()
        })
        .collect()
}

fn source(g: &mut Graph, op: Op, t: TensorType) -> Result<NodeId, GraphError> {
    g.add_node(op, &[], Some(t))
}

fn reduce(op: ReduceOp, axes: &[usize], keepdims: bool) -> Op {
    Op::Reduce {
        op,
        axes: axes.to_vec(),
        keepdims,
    }
}

fn reshape(dims: &[ReshapeDim]) -> Op {
    Op::Reshape {
        dims: dims.to_vec(),
    }
}

fn permute(perm: &[usize]) -> Op {
    Op::Permute {
        perm: perm.to_vec(),
    }
}

fn broadcast_to(s: Shape) -> Op {
    Op::BroadcastTo {
        dims: s.into_dims(),
    }
}

fn slice(ranges: &[SliceRange]) -> Op {
    Op::Slice {
        ranges: ranges.to_vec(),
    }
}

fn pad(pads: &[(u64, u64)], value: f64) -> Op {
    Op::Pad {
        pads: pads.to_vec(),
        value: ExactF64(value),
    }
}

fn squeeze(axes: &[usize]) -> Op {
    Op::Squeeze {
        axes: axes.to_vec(),
    }
}

fn unsqueeze(axes: &[usize]) -> Op {
    Op::Unsqueeze {
        axes: axes.to_vec(),
    }
}

fn write_slice(axis: usize, start: Option<u64>) -> Op {
    Op::StateWriteSlice { axis, start }
}

use ReshapeDim::Infer as Q;

fn rd(d: impl Into<ReshapeDim>) -> ReshapeDim {
    d.into()
}

// ---------------------------------------------------------------------------------------------
// Sources
// ---------------------------------------------------------------------------------------------

#[test]
fn sources_take_their_declared_type() {
    let mut g = Graph::new();
    let cases = [
        (input_op("x"), tt!(F16["batch", 1024])),
        (Op::Parameter { name: "w".into() }, tt!(BF16[1024, 4096])),
        (state_op("cache"), tt!(I64["batch", 8, 0])),
        (input_op("scalar"), tt!(Bool[])),
    ];
    for (op, t) in cases {
        let id = source(&mut g, op.clone(), t.clone()).unwrap();
        assert_eq!(g.ty(id), &t);
        assert_eq!(g.node(id).op, op);
        check_source(&op, &t).unwrap();
    }
    assert_eq!(g.inputs().len(), 2);
    assert_eq!(g.parameters().len(), 1);
    assert_eq!(g.states().len(), 1);
}

#[test]
fn a_source_needs_a_declared_type_and_no_operands() {
    let mut g = Graph::new();
    let e = g.add_node(input_op("x"), &[], None).unwrap_err();
    assert_eq!(e, GraphError::MissingDeclaredType { node: NodeId(0) });
    assert_eq!(e.to_string(), "node %0: a source needs a declared type");

    let x = source(&mut g, input_op("x"), tt!(F32[2])).unwrap();
    let e = g
        .add_node(input_op("y"), &[x], Some(tt!(F32[2])))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %1: input(f32[2]): a source takes no operands"
    );
    assert_eq!(g.len(), 1);
}

#[test]
fn source_names_must_not_be_empty() {
    let ops = [
        input_op(""),
        Op::Parameter { name: "".into() },
        state_op(""),
    ];
    for op in ops {
        let mut g = Graph::new();
        let e = source(&mut g, op.clone(), tt!(F32[2])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "node %0: {}(): declared f32[2]: the name is empty",
                op.name()
            )
        );
        assert!(g.is_empty());
    }
}

#[test]
fn source_names_must_be_unique_across_kinds() {
    let mut g = Graph::new();
    source(&mut g, input_op("x"), tt!(F32[2])).unwrap();
    let e = source(&mut g, state_op("x"), tt!(F32[2])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "source name `x` is used by %0 (input) and %1 (state)"
    );
    let e = source(&mut g, Op::Parameter { name: "x".into() }, tt!(I8[])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "source name `x` is used by %0 (input) and %1 (parameter)"
    );
    assert_eq!(g.len(), 1);
}

#[test]
fn constants_of_every_dtype_class() {
    let cases = [
        (tt!(Bool[3]), ConstData::Bool(vec![true, false, true])),
        (tt!(I8[2]), ConstData::Int(vec![-128, 127])),
        (tt!(U8[2]), ConstData::Int(vec![0, 255])),
        (
            tt!(I32[2]),
            ConstData::Int(vec![i32::MIN.into(), i32::MAX.into()]),
        ),
        (tt!(I64[2]), ConstData::Int(vec![i64::MIN, i64::MAX])),
        (
            tt!(F16[2, 2]),
            ConstData::Float(
                [65504.0, f64::NAN, f64::NEG_INFINITY, -0.0]
                    .map(ExactF64)
                    .to_vec(),
            ),
        ),
        (
            tt!(BF16[2]),
            ConstData::Float(
                [0.5, 3.0e38]
                    .map(|v| ExactF64(DType::BF16.round_value(v)))
                    .to_vec(),
            ),
        ),
        (
            tt!(F32[2]),
            ConstData::Float([0.1f32 as f64, f64::INFINITY].map(ExactF64).to_vec()),
        ),
        (tt!(F64[1]), ConstData::Float(vec![ExactF64(0.1)])),
        (tt!(F64[]), ConstData::Float(vec![ExactF64(1.0)])),
        (tt!(F32[0, 3]), ConstData::Float(vec![])),
    ];
    for (t, data) in cases {
        let mut g = Graph::new();
        let id = source(&mut g, Op::Constant { data }, t.clone())
            .unwrap_or_else(|e| panic!("constant {t}: {e}"));
        assert_eq!(g.ty(id), &t);
    }
}

#[test]
fn constant_data_must_match_the_declared_type() {
    let check = |t: TensorType, data: ConstData| {
        let mut g = Graph::new();
        source(&mut g, Op::Constant { data }, t)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        check(tt!(F32[2, 2]), ConstData::Float(vec![ExactF64(1.0); 3])),
        "node %0: constant(): declared f32[2, 2]: has 3 values for 4 elements"
    );
    assert_eq!(
        check(tt!(I32[]), ConstData::Int(vec![])),
        "node %0: constant(): declared i32[]: has 0 values for 1 elements"
    );
    assert_eq!(
        check(tt!(F32["n"]), ConstData::Float(vec![])),
        "node %0: constant(): declared f32[n]: a constant needs a static shape"
    );
    // The value class must be the dtype's class.
    let not_exact = |d: DType| format!("values are not all exact {d} values");
    for (t, data) in [
        (tt!(F32[1]), ConstData::Int(vec![1])),
        (tt!(I32[1]), ConstData::Float(vec![ExactF64(1.0)])),
        (tt!(I8[1]), ConstData::Bool(vec![true])),
        (tt!(Bool[1]), ConstData::Int(vec![1])),
        (tt!(Bool[1]), ConstData::Float(vec![ExactF64(1.0)])),
    ] {
        let d = t.dtype;
        assert!(check(t, data).ends_with(&not_exact(d)));
    }
    // Integers must fit; floats must be exact in the dtype.
    for (t, data) in [
        (tt!(I8[1]), ConstData::Int(vec![128])),
        (tt!(I8[1]), ConstData::Int(vec![-129])),
        (tt!(U8[1]), ConstData::Int(vec![-1])),
        (tt!(U8[1]), ConstData::Int(vec![256])),
        (tt!(I32[1]), ConstData::Int(vec![1 << 31])),
        (tt!(F16[1]), ConstData::Float(vec![ExactF64(0.1)])),
        (tt!(F16[1]), ConstData::Float(vec![ExactF64(70000.0)])),
        (
            tt!(BF16[1]),
            ConstData::Float(vec![ExactF64(1.0 + 1.0 / 256.0)]),
        ),
        (tt!(F32[1]), ConstData::Float(vec![ExactF64(0.1)])),
    ] {
        let d = t.dtype;
        let msg = check(t, data);
        assert!(msg.ends_with(&not_exact(d)), "{msg}");
    }
}

#[test]
fn constants_are_limited_in_size() {
    let limit = MAX_CONSTANT_ELEMENTS;
    assert_eq!(limit, 65536);
    let mut g = Graph::new();
    let data = ConstData::Int(vec![0; limit as usize]);
    source(&mut g, Op::Constant { data }, tt!(I32[256, 256])).unwrap();

    let data = ConstData::Int(vec![0; limit as usize + 1]);
    let e = source(&mut g, Op::Constant { data }, tt!(I32[65537])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %1: constant(): declared i32[65537]: 65537 elements exceed the constant limit \
         65536; use a parameter"
    );
    // The limit is checked before the data length, and an overflowing count is not static.
    let data = ConstData::Int(vec![]);
    let e = source(&mut g, Op::Constant { data }, tt!(I32[1u64 << 40])).unwrap_err();
    assert!(e.to_string().contains("exceed the constant limit"), "{e}");
    let data = ConstData::Int(vec![]);
    let e = source(&mut g, Op::Constant { data }, tt!(I32[u64::MAX, 2])).unwrap_err();
    assert!(
        e.to_string().ends_with("a constant needs a static shape"),
        "{e}"
    );
    assert_eq!(g.len(), 1);
}

#[test]
fn check_source_refuses_non_sources() {
    let e = check_source(&Op::MatMul, &tt!(F32[2, 2])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "matmul(): declared f32[2, 2]: is not a source op"
    );
}

#[test]
fn infer_refuses_sources() {
    for op in [
        input_op("x"),
        Op::Parameter { name: "w".into() },
        state_op("s"),
        Op::Constant {
            data: ConstData::Bool(vec![]),
        },
    ] {
        assert_eq!(
            reason(op, &[]),
            "a source has a declared type, not an inferred one"
        );
    }
}

#[test]
fn arity_is_checked() {
    let x = tt!(F32[2]);
    let cases: Vec<(Op, Vec<&TensorType>, &str)> = vec![
        (Op::Unary(UnaryOp::Exp), vec![], "takes 1 operand(s), got 0"),
        (
            Op::Unary(UnaryOp::Exp),
            vec![&x, &x],
            "takes 1 operand(s), got 2",
        ),
        (
            Op::Cast { to: DType::F16 },
            vec![],
            "takes 1 operand(s), got 0",
        ),
        (
            Op::Binary(BinaryOp::Add),
            vec![&x],
            "takes 2 operand(s), got 1",
        ),
        (Op::MatMul, vec![&x, &x, &x], "takes 2 operand(s), got 3"),
        (Op::Select, vec![&x, &x], "takes 3 operand(s), got 2"),
        (
            Op::Concat { axis: 0 },
            vec![],
            "takes at least 1 operand(s), got 0",
        ),
        (
            Op::Gather { axis: 0 },
            vec![&x],
            "takes 2 operand(s), got 1",
        ),
        (Op::StateAssign, vec![&x], "takes 2 operand(s), got 1"),
        (
            write_slice(0, Some(0)),
            vec![&x, &x, &x],
            "takes 2 operand(s), got 3",
        ),
        (
            write_slice(0, None),
            vec![&x, &x],
            "takes 3 operand(s), got 2",
        ),
        (input_op("x"), vec![&x], "takes 0 operand(s), got 1"),
    ];
    for (op, operands, expected) in cases {
        assert_eq!(reason(op, &operands), expected);
    }
    // State updates with no operands fail in inference, before the state check looks at
    // operand 0.
    assert_eq!(
        graph_err(Op::StateAssign, &[]),
        "node %0: state_assign(): takes 2 operand(s), got 0"
    );
    assert_eq!(
        graph_err(write_slice(0, None), &[]),
        "node %0: state_write_slice(): takes 3 operand(s), got 0"
    );
}

#[test]
fn add_node_checks_operands_and_declared_types() {
    let mut g = Graph::new();
    let x = source(&mut g, input_op("x"), tt!(F32[4])).unwrap();
    let e = g
        .add_node(Op::Unary(UnaryOp::Exp), &[NodeId(5)], None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %1 (exp) uses %5, which is not defined before it"
    );
    let e = g
        .add_node(Op::Unary(UnaryOp::Exp), &[x], Some(tt!(F32[3])))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %1 (exp) is stored as f32[3] but its operands give f32[4]"
    );
    let y = g
        .add_node(Op::Unary(UnaryOp::Exp), &[x], Some(tt!(F32[4])))
        .unwrap();
    assert_eq!(y, NodeId(1));
}

// ---------------------------------------------------------------------------------------------
// Unary ops and cast
// ---------------------------------------------------------------------------------------------

/// Which dtypes each unary op accepts.
fn unary_accepts(u: UnaryOp, d: DType) -> bool {
    match u {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => d.is_numeric(),
        UnaryOp::Not => d == DType::Bool,
        UnaryOp::BitNot => d.is_int(),
        _ => d.is_float(),
    }
}

#[test]
fn unary_ops_over_every_dtype() {
    assert_eq!(UnaryOp::ALL.len(), 20);
    let float_only = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Reciprocal,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::GeluErf,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
    ];
    for u in UnaryOp::ALL {
        for d in DType::ALL {
            let x = ty(d, shape!["batch", 3, 0]);
            let op = Op::Unary(u);
            if unary_accepts(u, d) {
                assert_eq!(ok(op, &[&x]), x, "{} on {d}", u.name());
            } else {
                let expected = if u == UnaryOp::Not {
                    format!("the operand must be bool, got {d}")
                } else if u == UnaryOp::BitNot {
                    format!("needs an integer dtype, got {d}")
                } else if float_only.contains(&u) {
                    format!("needs a float dtype, got {d}")
                } else {
                    format!("needs a numeric dtype, got {d}")
                };
                assert_eq!(reason(op, &[&x]), expected, "{} on {d}", u.name());
            }
        }
    }
    // Spot checks of the classes the brief names.
    assert!(unary_accepts(UnaryOp::Neg, DType::I8));
    assert!(unary_accepts(UnaryOp::Relu, DType::U8));
    assert!(!unary_accepts(UnaryOp::Abs, DType::Bool));
    assert!(!unary_accepts(UnaryOp::Floor, DType::I32));
    assert!(!unary_accepts(UnaryOp::Not, DType::U8));
}

#[test]
fn unary_error_strings() {
    assert_eq!(
        graph_err(Op::Unary(UnaryOp::Exp), &[tt!(I32[4])]),
        "node %1: exp(i32[4]): needs a float dtype, got i32"
    );
    assert_eq!(
        graph_err(Op::Unary(UnaryOp::Neg), &[tt!(Bool["n"])]),
        "node %1: neg(bool[n]): needs a numeric dtype, got bool"
    );
    assert_eq!(
        graph_err(Op::Unary(UnaryOp::Not), &[tt!(F32[])]),
        "node %1: not(f32[]): the operand must be bool, got f32"
    );
    assert_eq!(
        graph_err(Op::Unary(UnaryOp::GeluTanh), &[tt!(U8[2, 2])]),
        "node %1: gelu_tanh(u8[2, 2]): needs a float dtype, got u8"
    );
}

#[test]
fn cast_between_all_dtypes() {
    for from in DType::ALL {
        for to in DType::ALL {
            let x = ty(from, shape!["batch", 0, 7]);
            assert_eq!(
                ok(Op::Cast { to }, &[&x]),
                ty(to, shape!["batch", 0, 7]),
                "{from} -> {to}"
            );
        }
    }
    assert_eq!(
        ok(Op::Cast { to: DType::Bool }, &[&tt!(F16[])]),
        tt!(Bool[])
    );
}

// ---------------------------------------------------------------------------------------------
// Binary ops and broadcasting
// ---------------------------------------------------------------------------------------------

/// The result dtype of `b` on two operands of dtype `d`, or the expected refusal.
fn binary_expect(b: BinaryOp, d: DType) -> Result<DType, String> {
    use BinaryOp::*;
    match b {
        And | Or if d == DType::Bool => Ok(DType::Bool),
        And | Or => Err(format!("operands must be bool, got {d}")),
        Eq | Ne => Ok(DType::Bool),
        Lt | Le | Gt | Ge if d.is_numeric() => Ok(DType::Bool),
        Pow if d.is_float() => Ok(d),
        Pow => Err(format!("needs a float dtype, got {d}")),
        b if b.is_bitwise() && d.is_int() => Ok(d),
        b if b.is_bitwise() => Err(format!("needs an integer dtype, got {d}")),
        _ if d.is_numeric() => Ok(d),
        _ => Err(format!("needs a numeric dtype, got {d}")),
    }
}

#[test]
fn binary_ops_over_every_dtype() {
    assert_eq!(BinaryOp::ALL.len(), 21);
    for b in BinaryOp::ALL {
        for d in DType::ALL {
            let x = ty(d, shape!["batch", 1, 3]);
            let y = ty(d, shape![5, 1]);
            let op = Op::Binary(b);
            match binary_expect(b, d) {
                Ok(out) => assert_eq!(
                    ok(op, &[&x, &y]),
                    ty(out, shape!["batch", 5, 3]),
                    "{} on {d}",
                    b.name()
                ),
                Err(msg) => assert_eq!(reason(op, &[&x, &y]), msg, "{} on {d}", b.name()),
            }
        }
    }
    // The classes the module doc names.
    assert_eq!(
        binary_expect(BinaryOp::Lt, DType::Bool),
        Err("needs a numeric dtype, got bool".into())
    );
    assert_eq!(binary_expect(BinaryOp::Eq, DType::Bool), Ok(DType::Bool));
    assert_eq!(binary_expect(BinaryOp::Div, DType::I32), Ok(DType::I32));
}

#[test]
fn binary_ops_refuse_mixed_dtypes() {
    for b in BinaryOp::ALL {
        for (x, y) in [
            (DType::F32, DType::F16),
            (DType::I32, DType::I64),
            (DType::Bool, DType::U8),
            (DType::BF16, DType::F16),
        ] {
            let msg = reason(Op::Binary(b), &[&ty(x, shape![4]), &ty(y, shape![4])]);
            assert_eq!(msg, format!("dtypes {x} and {y} differ (cast one first)"));
        }
    }
    assert_eq!(
        graph_err(Op::Binary(BinaryOp::Add), &[tt!(F32[4]), tt!(F16[4])]),
        "node %2: add(f32[4], f16[4]): dtypes f32 and f16 differ (cast one first)"
    );
    // The dtype check comes before the bool check of and/or.
    assert_eq!(
        graph_err(Op::Binary(BinaryOp::And), &[tt!(Bool[4]), tt!(I32[4])]),
        "node %2: and(bool[4], i32[4]): dtypes bool and i32 differ (cast one first)"
    );
}

#[test]
fn binary_error_strings() {
    assert_eq!(
        graph_err(Op::Binary(BinaryOp::Pow), &[tt!(I32[2]), tt!(I32[2])]),
        "node %2: pow(i32[2], i32[2]): needs a float dtype, got i32"
    );
    assert_eq!(
        graph_err(Op::Binary(BinaryOp::Or), &[tt!(F32[2]), tt!(F32[2])]),
        "node %2: or(f32[2], f32[2]): operands must be bool, got f32"
    );
    assert_eq!(
        graph_err(Op::Binary(BinaryOp::Mul), &[tt!(F32[3]), tt!(F32[4])]),
        "node %2: mul(f32[3], f32[4]): shapes [3] and [4] do not broadcast: dim 3 vs 4"
    );
}

fn add_shapes(a: Shape, b: Shape) -> Result<Shape, String> {
    infer(
        &Op::Binary(BinaryOp::Add),
        &[&ty(DType::F32, a), &ty(DType::F32, b)],
    )
    .map(|t| t.shape)
    .map_err(|e| e.reason)
}

#[test]
fn broadcasting_in_each_direction() {
    let cases = [
        (shape![], shape![], shape![]),
        (shape![], shape![2, 3, 4], shape![2, 3, 4]),
        (shape![2, 3, 4], shape![], shape![2, 3, 4]),
        (shape![4, 1, 3], shape![5, 1], shape![4, 5, 3]),
        (shape![5, 1], shape![4, 1, 3], shape![4, 5, 3]),
        (shape![1, 3], shape![4, 1], shape![4, 3]),
        (shape![3], shape![2, 3], shape![2, 3]),
        (shape![2, 3], shape![1], shape![2, 3]),
        (shape![1, 1, 1], shape![7], shape![1, 1, 7]),
        (shape![0], shape![1], shape![0]),
        (shape![1], shape![0], shape![0]),
        (shape![0, 3], shape![3], shape![0, 3]),
        (
            shape![1, 1, 1, 1, 1, 1, 1, 8],
            shape![2, 1, 1, 1, 1, 1, 1, 1],
            shape![2, 1, 1, 1, 1, 1, 1, 8],
        ),
    ];
    for (a, b, out) in cases {
        assert_eq!(add_shapes(a.clone(), b.clone()), Ok(out), "{a} + {b}");
    }
}

#[test]
fn broadcasting_failures() {
    let cases = [
        (
            shape![3],
            shape![4],
            "shapes [3] and [4] do not broadcast: dim 3 vs 4",
        ),
        (
            shape![2, 3],
            shape![3, 2],
            "shapes [2, 3] and [3, 2] do not broadcast: dim 2 vs 3",
        ),
        (
            shape![4, 1, 3],
            shape![5, 2],
            "shapes [4, 1, 3] and [5, 2] do not broadcast: dim 3 vs 2",
        ),
        (
            shape![0],
            shape![3],
            "shapes [0] and [3] do not broadcast: dim 0 vs 3",
        ),
        (
            shape![2, 1],
            shape![4, 3, 1],
            "shapes [2, 1] and [4, 3, 1] do not broadcast: dim 2 vs 3",
        ),
    ];
    for (a, b, msg) in cases {
        assert_eq!(add_shapes(a, b), Err(msg.to_string()));
    }
}

#[test]
fn symbolic_dims_broadcast_by_name() {
    assert_eq!(
        add_shapes(shape!["batch", 1], shape!["batch", 7]),
        Ok(shape!["batch", 7])
    );
    assert_eq!(
        add_shapes(shape!["batch", "seq"], shape!["seq"]),
        Ok(shape!["batch", "seq"])
    );
    assert_eq!(add_shapes(shape![1], shape!["n"]), Ok(shape!["n"]));
    assert_eq!(add_shapes(shape!["n"], shape![1]), Ok(shape!["n"]));
    assert_eq!(
        add_shapes(shape!["n", 1], shape![1, "m"]),
        Ok(shape!["n", "m"])
    );
    assert_eq!(add_shapes(shape![], shape!["a", "b"]), Ok(shape!["a", "b"]));
    assert_eq!(
        add_shapes(shape!["batch"], shape!["seq"]),
        Err("shapes [batch] and [seq] do not broadcast: dim batch vs seq".into())
    );
    assert_eq!(
        add_shapes(shape!["n"], shape![4]),
        Err("shapes [n] and [4] do not broadcast: dim n vs 4".into())
    );
    assert_eq!(
        add_shapes(shape![4], shape!["n"]),
        Err("shapes [4] and [n] do not broadcast: dim 4 vs n".into())
    );
    assert_eq!(
        graph_err(
            Op::Binary(BinaryOp::Sub),
            &[tt!(F16["batch", 64]), tt!(F16["seq", 64])]
        ),
        "node %2: sub(f16[batch, 64], f16[seq, 64]): shapes [batch, 64] and [seq, 64] do not \
         broadcast: dim batch vs seq"
    );
}

// ---------------------------------------------------------------------------------------------
// Select
// ---------------------------------------------------------------------------------------------

#[test]
fn select_types() {
    for d in DType::ALL {
        let a = ty(d, shape![4, 3]);
        assert_eq!(ok(Op::Select, &[&tt!(Bool[4, 3]), &a, &a]), a, "{d}");
    }
    // Three-way broadcast, each operand contributing a dim.
    assert_eq!(
        ok(
            Op::Select,
            &[&tt!(Bool[4, 1, 1]), &tt!(I8[1, 3, 1]), &tt!(I8[5])]
        ),
        tt!(I8[4, 3, 5])
    );
    assert_eq!(
        ok(Op::Select, &[&tt!(Bool[]), &tt!(F32["n", 2]), &tt!(F32[])]),
        tt!(F32["n", 2])
    );
    assert_eq!(
        ok(
            Op::Select,
            &[&tt!(Bool["s", "s"]), &tt!(F16[2, 1, 1]), &tt!(F16[1, "s"])]
        ),
        tt!(F16[2, "s", "s"])
    );
}

#[test]
fn select_errors() {
    for d in DType::ALL.into_iter().filter(|&d| d != DType::Bool) {
        assert_eq!(
            reason(Op::Select, &[&ty(d, shape![2]), &tt!(F32[2]), &tt!(F32[2])]),
            format!("the condition must be bool, got {d}")
        );
    }
    assert_eq!(
        graph_err(Op::Select, &[tt!(Bool[2]), tt!(F32[2]), tt!(F16[2])]),
        "node %3: select(bool[2], f32[2], f16[2]): dtypes f32 and f16 differ (cast one first)"
    );
    assert_eq!(
        graph_err(Op::Select, &[tt!(I32[2]), tt!(F32[2]), tt!(F32[2])]),
        "node %3: select(i32[2], f32[2], f32[2]): the condition must be bool, got i32"
    );
    // Broadcast failures between the condition and a branch, and between the branches.
    assert_eq!(
        reason(Op::Select, &[&tt!(Bool[3]), &tt!(F32[4]), &tt!(F32[])]),
        "shapes [3] and [4] do not broadcast: dim 3 vs 4"
    );
    assert_eq!(
        reason(
            Op::Select,
            &[&tt!(Bool[]), &tt!(F32[2, 1]), &tt!(F32[3, 5])]
        ),
        "shapes [2, 1] and [3, 5] do not broadcast: dim 2 vs 3"
    );
    assert!(
        reason(Op::Select, &[&tt!(Bool["a"]), &tt!(F32["b"]), &tt!(F32[1])]).contains("dim a vs b")
    );
}

// ---------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------

#[test]
fn reductions_over_every_dtype() {
    assert_eq!(ReduceOp::ALL.len(), 7);
    for r in ReduceOp::ALL {
        for d in DType::ALL {
            let x = ty(d, shape!["batch", 5, 7]);
            let op = reduce(r, &[1], false);
            let accepts = match r {
                ReduceOp::Mean => d.is_float(),
                _ => d.is_numeric(),
            };
            if accepts {
                let out = match r {
                    ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
                    _ => d,
                };
                assert_eq!(
                    ok(op, &[&x]),
                    ty(out, shape!["batch", 7]),
                    "{} {d}",
                    r.name()
                );
            } else {
                let class = if r == ReduceOp::Mean {
                    "float"
                } else {
                    "numeric"
                };
                assert_eq!(
                    reason(op, &[&x]),
                    format!("needs a {class} dtype, got {d}"),
                    "{} {d}",
                    r.name()
                );
            }
        }
    }
}

#[test]
fn reduction_axes_and_keepdims() {
    let x = tt!(F32["batch", 5, 7, "seq"]);
    for r in [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ] {
        assert_eq!(
            ok(reduce(r, &[1], true), &[&x]),
            tt!(F32["batch", 1, 7, "seq"])
        );
        assert_eq!(ok(reduce(r, &[3, 0], false), &[&x]), tt!(F32[5, 7]));
        assert_eq!(ok(reduce(r, &[3, 0], true), &[&x]), tt!(F32[1, 5, 7, 1]));
        assert_eq!(ok(reduce(r, &[0, 1, 2, 3], false), &[&x]), tt!(F32[]));
        assert_eq!(
            ok(reduce(r, &[2, 1, 0, 3], true), &[&x]),
            tt!(F32[1, 1, 1, 1])
        );
    }
    for r in [ReduceOp::ArgMax, ReduceOp::ArgMin] {
        assert_eq!(ok(reduce(r, &[3], false), &[&x]), tt!(I64["batch", 5, 7]));
        assert_eq!(ok(reduce(r, &[0], true), &[&x]), tt!(I64[1, 5, 7, "seq"]));
        assert_eq!(ok(reduce(r, &[0], false), &[&tt!(U8[9])]), tt!(I64[]));
    }
}

#[test]
fn reduction_errors() {
    let x = tt!(F32[2, 3, 4]);
    for r in ReduceOp::ALL {
        assert_eq!(
            reason(reduce(r, &[3], false), &[&x]),
            "axis 3 is out of range for rank 3"
        );
        assert_eq!(
            reason(reduce(r, &[usize::MAX], true), &[&x]),
            format!("axis {} is out of range for rank 3", usize::MAX)
        );
        assert_eq!(reason(reduce(r, &[], false), &[&x]), "reduces over no axes");
        assert_eq!(
            reason(reduce(r, &[0], false), &[&tt!(F32[])]),
            "axis 0 is out of range for rank 0"
        );
    }
    for r in [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ] {
        assert_eq!(
            reason(reduce(r, &[1, 0, 1], false), &[&x]),
            "axis 1 is repeated"
        );
    }
    for r in [ReduceOp::ArgMax, ReduceOp::ArgMin] {
        assert_eq!(
            reason(reduce(r, &[0, 1], false), &[&x]),
            "reduces over exactly one axis, got 2"
        );
        // Repeated axes are found before the count is checked.
        assert_eq!(
            reason(reduce(r, &[1, 1], false), &[&x]),
            "axis 1 is repeated"
        );
    }
    assert_eq!(
        graph_err(reduce(ReduceOp::Mean, &[1], false), &[tt!(I32[4, 5])]),
        "node %1: reduce_mean(i32[4, 5]): needs a float dtype, got i32"
    );
    assert_eq!(
        graph_err(reduce(ReduceOp::ArgMax, &[0, 1], true), &[tt!(F16[4, 5])]),
        "node %1: argmax(f16[4, 5]): reduces over exactly one axis, got 2"
    );
    assert_eq!(
        graph_err(reduce(ReduceOp::Sum, &[2], false), &[tt!(Bool[4, 5])]),
        "node %1: reduce_sum(bool[4, 5]): axis 2 is out of range for rank 2"
    );
}

/// Reductions over a zero-size axis are accepted, including max/min/argmax/argmin, which have no
/// identity (what they produce is left to the backends). Pinned so a change is deliberate.
#[test]
fn reductions_over_a_zero_size_axis_are_accepted() {
    let x = tt!(F32[0, 3]);
    for r in ReduceOp::ALL {
        let out = ok(reduce(r, &[0], false), &[&x]);
        assert_eq!(out.shape, shape![3], "{}", r.name());
    }
}

// ---------------------------------------------------------------------------------------------
// Matmul
// ---------------------------------------------------------------------------------------------

#[test]
fn matmul_shapes() {
    let cases = [
        (tt!(F32[4, 3]), tt!(F32[3, 5]), tt!(F32[4, 5])),
        (tt!(I32[1, 1]), tt!(I32[1, 1]), tt!(I32[1, 1])),
        (tt!(U8[0, 3]), tt!(U8[3, 0]), tt!(U8[0, 0])),
        (tt!(F16[2, 4, 3]), tt!(F16[2, 3, 5]), tt!(F16[2, 4, 5])),
        // Rank 2 against batched, both ways.
        (tt!(F16[4, 3]), tt!(F16[7, 3, 5]), tt!(F16[7, 4, 5])),
        (tt!(F16[7, 4, 3]), tt!(F16[3, 5]), tt!(F16[7, 4, 5])),
        // Broadcast batch dims.
        (
            tt!(BF16[2, 1, 4, 3]),
            tt!(BF16[5, 3, 6]),
            tt!(BF16[2, 5, 4, 6]),
        ),
        (
            tt!(F64[1, 6, 4, 3]),
            tt!(F64[2, 1, 3, 5]),
            tt!(F64[2, 6, 4, 5]),
        ),
        // Symbolic m, n, k and batch dims.
        (tt!(F32["m", "k"]), tt!(F32["k", "n"]), tt!(F32["m", "n"])),
        (
            tt!(F32["b", "h", "s", 64]),
            tt!(F32["b", "h", 64, "t"]),
            tt!(F32["b", "h", "s", "t"]),
        ),
        (
            tt!(F32["b", 4, "k"]),
            tt!(F32[1, "k", 2]),
            tt!(F32["b", 4, 2]),
        ),
    ];
    for (a, b, out) in cases {
        assert_eq!(ok(Op::MatMul, &[&a, &b]), out, "{a} @ {b}");
    }
}

#[test]
fn matmul_errors() {
    assert_eq!(
        graph_err(Op::MatMul, &[tt!(F32[4, 3]), tt!(F32[5, 2])]),
        "node %2: matmul(f32[4, 3], f32[5, 2]): inner dims 3 and 5 differ"
    );
    assert_eq!(
        graph_err(Op::MatMul, &[tt!(F32["m", "k"]), tt!(F32[64, "n"])]),
        "node %2: matmul(f32[m, k], f32[64, n]): inner dims k and 64 differ"
    );
    assert_eq!(
        reason(Op::MatMul, &[&tt!(F32["m", "k"]), &tt!(F32["j", "n"])]),
        "inner dims k and j differ"
    );
    // No broadcasting of the inner dim.
    assert_eq!(
        reason(Op::MatMul, &[&tt!(F32[4, 1]), &tt!(F32[3, 5])]),
        "inner dims 1 and 3 differ"
    );
    let rank_msg = "both operands need rank 2 or more ([..., m, k] @ [..., k, n])";
    assert_eq!(
        reason(Op::MatMul, &[&tt!(F32[3]), &tt!(F32[3, 4])]),
        rank_msg
    );
    assert_eq!(
        reason(Op::MatMul, &[&tt!(F32[4, 3]), &tt!(F32[3])]),
        rank_msg
    );
    assert_eq!(reason(Op::MatMul, &[&tt!(F32[]), &tt!(F32[])]), rank_msg);
    assert_eq!(
        graph_err(Op::MatMul, &[tt!(F32[2, 4, 3]), tt!(F32[3, 3, 5])]),
        "node %2: matmul(f32[2, 4, 3], f32[3, 3, 5]): batch dims: shapes [2] and [3] do not \
         broadcast: dim 2 vs 3"
    );
    assert_eq!(
        reason(Op::MatMul, &[&tt!(F32[4, 3]), &tt!(F16[3, 5])]),
        "dtypes f32 and f16 differ (cast one first)"
    );
    assert_eq!(
        graph_err(Op::MatMul, &[tt!(Bool[2, 2]), tt!(Bool[2, 2])]),
        "node %2: matmul(bool[2, 2], bool[2, 2]): needs a numeric dtype, got bool"
    );
}

// ---------------------------------------------------------------------------------------------
// Reshape
// ---------------------------------------------------------------------------------------------

fn reshape_of(x: TensorType, dims: &[ReshapeDim]) -> Result<TensorType, String> {
    infer(&reshape(dims), &[&x]).map_err(|e| e.reason)
}

#[test]
fn reshape_static() {
    let x = tt!(F32[2, 3, 4]);
    assert_eq!(reshape_of(x.clone(), &[rd(6), rd(4)]), Ok(tt!(F32[6, 4])));
    assert_eq!(reshape_of(x.clone(), &[rd(24)]), Ok(tt!(F32[24])));
    assert_eq!(reshape_of(x.clone(), &[Q, rd(4)]), Ok(tt!(F32[6, 4])));
    assert_eq!(
        reshape_of(x.clone(), &[rd(2), Q, rd(2)]),
        Ok(tt!(F32[2, 6, 2]))
    );
    assert_eq!(reshape_of(x.clone(), &[Q]), Ok(tt!(F32[24])));
    assert_eq!(reshape_of(x, &[rd(1), rd(24), Q]), Ok(tt!(F32[1, 24, 1])));
    // Scalars and size-1 dims.
    assert_eq!(reshape_of(tt!(I8[1, 1]), &[]), Ok(tt!(I8[])));
    assert_eq!(reshape_of(tt!(I8[]), &[rd(1), rd(1)]), Ok(tt!(I8[1, 1])));
    assert_eq!(reshape_of(tt!(I8[]), &[Q]), Ok(tt!(I8[1])));
    // Zero-size tensors.
    assert_eq!(reshape_of(tt!(F32[0, 4]), &[Q]), Ok(tt!(F32[0])));
    assert_eq!(
        reshape_of(tt!(F32[0, 4]), &[rd(2), rd(0)]),
        Ok(tt!(F32[2, 0]))
    );
    assert_eq!(reshape_of(tt!(F32[0, 4]), &[Q, rd(4)]), Ok(tt!(F32[0, 4])));
}

#[test]
fn reshape_symbolic() {
    let x = tt!(F32["batch", 64]);
    // Given symbolic dims must account for the operand's symbols.
    assert_eq!(
        reshape_of(x.clone(), &[rd("batch"), rd(8), rd(8)]),
        Ok(tt!(F32["batch", 8, 8]))
    );
    // An inferred dim is the one leftover symbol when the static products match ...
    assert_eq!(
        reshape_of(x.clone(), &[Q, rd(8), rd(8)]),
        Ok(tt!(F32["batch", 8, 8]))
    );
    assert_eq!(
        reshape_of(x.clone(), &[rd(64), Q]),
        Ok(tt!(F32[64, "batch"]))
    );
    // ... or a static size when every symbol is given.
    assert_eq!(
        reshape_of(x.clone(), &[rd("batch"), Q, rd(2)]),
        Ok(tt!(F32["batch", 32, 2]))
    );
    // Symbols may move.
    assert_eq!(
        reshape_of(tt!(F32["a", "b", 2]), &[rd(2), rd("b"), rd("a")]),
        Ok(tt!(F32[2, "b", "a"]))
    );
    // The inferred dim is the quotient of the element counts, an expression where need be.
    assert_eq!(
        reshape_of(tt!(F32["n", "n", 3]), &[rd("n"), Q]),
        Ok(tt!(F32["n", "3*n"]))
    );
    assert_eq!(
        reshape_of(tt!(F32["n", "n", 3]), &[rd("m"), Q]),
        Err("cannot reshape [n, n, 3] to [m, ?]: element counts differ".into()),
        "n*n*3 is no multiple of m"
    );
    assert_eq!(
        reshape_of(tt!(F32["n", "n"]), &[rd("n"), Q]),
        Ok(tt!(F32["n", "n"]))
    );
    // What is left over is an expression: `4*batch`, `batch*seq`.
    assert_eq!(
        reshape_of(x.clone(), &[Q, rd(16)]),
        Ok(tt!(F32["4*batch", 16]))
    );
    assert_eq!(
        reshape_of(tt!(F32["batch", "seq", 64]), &[Q, rd(64)]),
        Ok(tt!(F32["batch*seq", 64]))
    );
    // A count that is no multiple of the given dims is refused.
    assert_eq!(
        reshape_of(x.clone(), &[Q, rd(48)]),
        Err("cannot reshape [batch, 64] to [?, 48]: element counts differ".into())
    );
    // A target symbol the operand lacks.
    assert_eq!(
        reshape_of(x.clone(), &[rd("seq"), Q]),
        Err("cannot reshape [batch, 64] to [seq, ?]: element counts differ".into())
    );
    assert_eq!(
        reshape_of(x.clone(), &[rd("seq"), rd(64)]),
        Err("cannot reshape [batch, 64] to [seq, 64]: element counts differ".into())
    );
    // Dropping a symbol is a count mismatch, even with a static product that matches.
    assert_eq!(
        reshape_of(x, &[rd(64)]),
        Err("cannot reshape [batch, 64] to [64]: element counts differ".into())
    );
}

#[test]
fn reshape_errors() {
    assert_eq!(
        reshape_of(tt!(F32[2, 3]), &[Q, Q]),
        Err("at most one dim may be inferred".into())
    );
    assert_eq!(
        graph_err(reshape(&[rd(4), Q]), &[tt!(F32[2, 3])]),
        "node %1: reshape(f32[2, 3]): cannot reshape [2, 3] to [4, ?]: element counts differ"
    );
    assert_eq!(
        graph_err(reshape(&[rd(5)]), &[tt!(F32[2, 3])]),
        "node %1: reshape(f32[2, 3]): cannot reshape [2, 3] to [5]: element counts differ"
    );
    // An inferred dim next to a zero dim is ambiguous.
    assert_eq!(
        reshape_of(tt!(F32[0, 4]), &[Q, rd(0)]),
        Err("cannot reshape [0, 4] to [?, 0]: element counts differ".into())
    );
    // Overflowing element counts.
    assert_eq!(
        reshape_of(tt!(F32[4294967296, 4294967296]), &[Q]),
        Err("the element count overflows u64".into())
    );
    assert_eq!(
        reshape_of(tt!(F32[2]), &[rd(u64::MAX), rd(u64::MAX)]),
        Err("the element count overflows u64".into())
    );
    // The result rank is limited.
    let mut nine = vec![rd(1); 8];
    nine.push(Q);
    assert_eq!(
        reshape_of(tt!(F32[4]), &nine),
        Err("rank 9 exceeds the maximum rank 8".into())
    );
    // A malformed symbol in the target.
    let bad = ReshapeDim::Dim(Dim::Symbolic("1x".into()));
    assert!(reshape_of(tt!(F32[4]), &[bad, Q]).is_err());
}

// ---------------------------------------------------------------------------------------------
// Permute and broadcast_to
// ---------------------------------------------------------------------------------------------

#[test]
fn permute_shapes_and_errors() {
    let x = tt!(F32["batch", 3, 4]);
    assert_eq!(ok(permute(&[2, 0, 1]), &[&x]), tt!(F32[4, "batch", 3]));
    assert_eq!(ok(permute(&[0, 1, 2]), &[&x]), x);
    assert_eq!(ok(permute(&[]), &[&tt!(I8[])]), tt!(I8[]));
    assert_eq!(
        reason(permute(&[0, 1]), &[&x]),
        "permutation [0, 1] has 2 entries for rank 3"
    );
    assert_eq!(
        reason(permute(&[0, 1, 2, 3]), &[&x]),
        "permutation [0, 1, 2, 3] has 4 entries for rank 3"
    );
    assert_eq!(
        reason(permute(&[0, 0, 1]), &[&x]),
        "[0, 0, 1] is not a permutation: axis 0 is repeated"
    );
    assert_eq!(
        graph_err(permute(&[0, 3, 1]), &[tt!(F16[2, 3, 4])]),
        "node %1: permute(f16[2, 3, 4]): [0, 3, 1] is not a permutation: axis 3 is out of \
         range for rank 3"
    );
}

#[test]
fn broadcast_to_shapes_and_errors() {
    let cases = [
        (tt!(F32[3]), shape![2, 3], tt!(F32[2, 3])),
        (tt!(F32[]), shape![2, 3], tt!(F32[2, 3])),
        (tt!(F32[1]), shape!["batch"], tt!(F32["batch"])),
        (
            tt!(F32["batch", 1]),
            shape!["batch", 4],
            tt!(F32["batch", 4]),
        ),
        (tt!(F32["n"]), shape![2, "n"], tt!(F32[2, "n"])),
        (tt!(F32[2, 3]), shape![2, 3], tt!(F32[2, 3])),
        (tt!(F32[1, 3]), shape![0, 3], tt!(F32[0, 3])),
    ];
    for (x, target, out) in cases {
        assert_eq!(
            ok(broadcast_to(target.clone()), &[&x]),
            out,
            "{x} to {target}"
        );
    }
    assert_eq!(
        reason(broadcast_to(shape![3]), &[&tt!(F32[2, 3])]),
        "[2, 3] does not broadcast to [3]"
    );
    assert_eq!(
        reason(broadcast_to(shape![1]), &[&tt!(F32[4])]),
        "[4] does not broadcast to [1]"
    );
    assert_eq!(
        reason(broadcast_to(shape![1]), &[&tt!(F32["batch"])]),
        "[batch] does not broadcast to [1]"
    );
    assert_eq!(
        graph_err(broadcast_to(shape![2, 4]), &[tt!(F32[3])]),
        "node %1: broadcast_to(f32[3]): shapes [3] and [2, 4] do not broadcast: dim 3 vs 4"
    );
    assert_eq!(
        reason(broadcast_to(shape!["n"]), &[&tt!(F32[4])]),
        "shapes [4] and [n] do not broadcast: dim 4 vs n"
    );
    let nine = Op::BroadcastTo {
        dims: vec![Dim::Static(1); 9],
    };
    assert_eq!(
        reason(nine, &[&tt!(F32[1])]),
        "rank 9 exceeds the maximum rank 8"
    );
    let bad = Op::BroadcastTo {
        dims: vec![Dim::Symbolic("1x".into())],
    };
    assert_eq!(
        reason(bad, &[&tt!(F32[1])]),
        "`1x` is not a valid symbolic dim name"
    );
}

// ---------------------------------------------------------------------------------------------
// Slice
// ---------------------------------------------------------------------------------------------

#[test]
fn slice_shapes() {
    let r = SliceRange::new;
    let to_end = |start, step| SliceRange {
        start,
        stop: None,
        step,
    };
    let x = tt!(F32[10, "batch", 6]);
    let cases = [
        (
            vec![r(0, 10, 1), SliceRange::FULL, SliceRange::FULL],
            tt!(F32[10, "batch", 6]),
        ),
        (
            vec![r(2, 5, 1), SliceRange::FULL, r(0, 6, 2)],
            tt!(F32[3, "batch", 3]),
        ),
        (
            vec![r(1, 10, 3), SliceRange::FULL, r(1, 6, 4)],
            tt!(F32[3, "batch", 2]),
        ),
        (
            vec![r(0, 10, 4), SliceRange::FULL, r(5, 6, 100)],
            tt!(F32[3, "batch", 1]),
        ),
        (
            vec![to_end(7, 1), SliceRange::FULL, to_end(0, 5)],
            tt!(F32[3, "batch", 2]),
        ),
        (
            vec![r(4, 4, 1), SliceRange::FULL, to_end(6, 1)],
            tt!(F32[0, "batch", 0]),
        ),
        (
            vec![to_end(10, 2), SliceRange::FULL, SliceRange::FULL],
            tt!(F32[0, "batch", 6]),
        ),
    ];
    for (ranges, out) in cases {
        assert_eq!(ok(slice(&ranges), &[&x]), out, "{ranges:?}");
    }
    assert_eq!(ok(slice(&[]), &[&tt!(I8[])]), tt!(I8[]));
}

#[test]
fn slice_errors() {
    let r = SliceRange::new;
    let x = tt!(F32[10, "n"]);
    assert_eq!(
        reason(slice(&[r(0, 10, 1)]), &[&x]),
        "has 1 ranges for rank 2"
    );
    assert_eq!(
        reason(slice(&[r(0, 10, 0), SliceRange::FULL]), &[&x]),
        "axis 0: step is 0"
    );
    assert_eq!(
        reason(slice(&[r(0, 11, 1), SliceRange::FULL]), &[&x]),
        "axis 0: range 0..11 is not within 0..10"
    );
    assert_eq!(
        reason(slice(&[r(5, 3, 1), SliceRange::FULL]), &[&x]),
        "axis 0: range 5..3 is not within 0..10"
    );
    let from_12 = SliceRange {
        start: 12,
        stop: None,
        step: 1,
    };
    assert_eq!(
        reason(slice(&[from_12, SliceRange::FULL]), &[&x]),
        "axis 0: range 12..10 is not within 0..10"
    );
    // A symbolic axis is sliced to expression lengths; a stop within it is checked at run time
    // (`Graph::dim_bounds`), not here.
    assert_eq!(
        ok(slice(&[SliceRange::FULL, r(0, 1, 1)]), &[&x]),
        tt!(F32[10, 1])
    );
    for (partial, len) in [
        (
            SliceRange {
                start: 1,
                stop: None,
                step: 1,
            },
            "n - 1",
        ),
        (
            SliceRange {
                start: 0,
                stop: None,
                step: 2,
            },
            "floor((n + 1) / 2)",
        ),
    ] {
        assert_eq!(
            ok(slice(&[SliceRange::FULL, partial]), &[&x]),
            tt!(F32[10, len])
        );
    }
    assert_eq!(
        reason(slice(&[SliceRange::FULL, r(0, 0, 0)]), &[&x]),
        "axis 1: step is 0"
    );
}

// ---------------------------------------------------------------------------------------------
// Concat
// ---------------------------------------------------------------------------------------------

#[test]
fn concat_shapes() {
    let (a, b, c, d) = (
        tt!(F32["batch", 1, 4]),
        tt!(F32["batch", 2, 4]),
        tt!(F32["batch", 0, 4]),
        tt!(F32["batch", 5, 4]),
    );
    assert_eq!(
        ok(Op::Concat { axis: 1 }, &[&a, &b, &c, &d]),
        tt!(F32["batch", 8, 4])
    );
    assert_eq!(ok(Op::Concat { axis: 1 }, &[&a]), a);
    assert_eq!(
        ok(Op::Concat { axis: 0 }, &[&tt!(Bool[2]), &tt!(Bool[3])]),
        tt!(Bool[5])
    );
    let many: Vec<TensorType> = (0u64..20).map(|i| ty(DType::I64, shape![i, 3])).collect();
    let refs: Vec<&TensorType> = many.iter().collect();
    assert_eq!(ok(Op::Concat { axis: 0 }, &refs), tt!(I64[190, 3]));
}

#[test]
fn concat_errors() {
    assert_eq!(
        graph_err(
            Op::Concat { axis: 0 },
            &[tt!(F32[2]), tt!(F32[3]), tt!(F16[3])]
        ),
        "node %3: concat(f32[2], f32[3], f16[3]): dtypes f32 and f16 differ (cast one first)"
    );
    assert_eq!(
        reason(Op::Concat { axis: 0 }, &[&tt!(F32[2, 3]), &tt!(F32[3])]),
        "operand 1 has rank 1, expected 2"
    );
    assert_eq!(
        reason(
            Op::Concat { axis: 0 },
            &[&tt!(F32[2, 3]), &tt!(F32[1, 3]), &tt!(F32[2, 4])]
        ),
        "operand 2 has 4 at axis 1, expected 3"
    );
    assert_eq!(
        reason(
            Op::Concat { axis: 1 },
            &[&tt!(F32["batch", 2]), &tt!(F32["seq", 2])]
        ),
        "operand 1 has seq at axis 0, expected batch"
    );
    // Along a symbolic axis the lengths add up to an expression.
    assert_eq!(
        ok(
            Op::Concat { axis: 0 },
            &[&tt!(F32["n", 2]), &tt!(F32["n", 2])]
        ),
        tt!(F32["2*n", 2])
    );
    assert_eq!(
        ok(
            Op::Concat { axis: 0 },
            &[&tt!(F32[3, 2]), &tt!(F32["n", 2])]
        ),
        tt!(F32["n + 3", 2])
    );
    assert_eq!(
        reason(Op::Concat { axis: 2 }, &[&tt!(F32[2, 3])]),
        "axis 2 is out of range for rank 2"
    );
    assert_eq!(
        reason(Op::Concat { axis: 0 }, &[&tt!(F32[])]),
        "axis 0 is out of range for rank 0"
    );
    assert_eq!(
        reason(
            Op::Concat { axis: 0 },
            &[&tt!(F32[18446744073709551615]), &tt!(F32[1])]
        ),
        "the concatenated size overflows u64"
    );
}

// ---------------------------------------------------------------------------------------------
// Pad
// ---------------------------------------------------------------------------------------------

#[test]
fn pad_shapes() {
    assert_eq!(
        ok(pad(&[(1, 2), (0, 0), (3, 0)], 0.0), &[&tt!(F32[4, "n", 0])]),
        tt!(F32[7, "n", 3])
    );
    assert_eq!(ok(pad(&[], 1.0), &[&tt!(I32[])]), tt!(I32[]));
    assert_eq!(
        ok(pad(&[(0, 0), (0, 0)], 5.0), &[&tt!(U8["a", "b"])]),
        tt!(U8["a", "b"])
    );
}

#[test]
fn pad_values_representable_in_the_dtype() {
    let accepted: &[(DType, f64)] = &[
        (DType::F32, 0.0),
        (DType::F32, f64::NEG_INFINITY),
        (DType::F32, f64::NAN),
        (DType::F32, 0.5),
        (DType::F32, -0.0),
        (DType::F16, 65504.0),
        (DType::F16, f64::INFINITY),
        (DType::F16, f64::NAN),
        (DType::BF16, DType::BF16.round_value(3.0e38)),
        (DType::F64, 0.1),
        (DType::I8, -128.0),
        (DType::I8, 127.0),
        (DType::U8, 255.0),
        (DType::I32, -2147483648.0),
        (DType::I64, -9223372036854775808.0),
        (DType::I64, 9007199254740992.0),
        (DType::Bool, 0.0),
        (DType::Bool, 1.0),
    ];
    for &(d, v) in accepted {
        let x = ty(d, shape![2]);
        assert_eq!(
            ok(pad(&[(1, 1)], v), &[&x]),
            ty(d, shape![4]),
            "{v:?} as {d}"
        );
    }
    let refused: &[(DType, f64)] = &[
        (DType::I32, 0.1),
        (DType::I32, 2147483648.0),
        (DType::I32, f64::INFINITY),
        (DType::F16, 70000.0),
        (DType::F16, 0.1),
        (DType::BF16, 0.1),
        (DType::F32, 0.1),
        (DType::F32, 1e39),
        (DType::I8, 128.0),
        (DType::I8, -129.0),
        (DType::U8, -1.0),
        (DType::U8, 256.0),
        (DType::Bool, 0.5),
        (DType::Bool, 2.0),
        (DType::Bool, -1.0),
        (DType::I64, 1e300),
    ];
    for &(d, v) in refused {
        let x = ty(d, shape![2]);
        assert_eq!(
            reason(pad(&[(1, 1)], v), &[&x]),
            format!("pad value {v:?} is not an exact {d} value")
        );
    }
    assert_eq!(
        graph_err(pad(&[(1, 1)], 0.1), &[tt!(I32[2])]),
        "node %1: pad(i32[2]): pad value 0.1 is not an exact i32 value"
    );
    assert_eq!(
        graph_err(pad(&[(0, 0), (2, 0)], 70000.0), &[tt!(F16[2, 3])]),
        "node %1: pad(f16[2, 3]): pad value 70000.0 is not an exact f16 value"
    );
    // -0.0 is compared by its bits, so an integer tensor refuses it (it would store 0).
    assert_eq!(
        reason(pad(&[(1, 1)], -0.0), &[&tt!(I32[2])]),
        "pad value -0.0 is not an exact i32 value"
    );
}

#[test]
fn pad_refuses_nan_for_non_float_dtypes() {
    for d in [DType::I8, DType::U8, DType::I32, DType::I64, DType::Bool] {
        let x = ty(d, shape![2]);
        assert_eq!(
            infer(&pad(&[(1, 1)], f64::NAN), &[&x]).map_err(|e| e.reason),
            Err(format!("pad value NaN is not an exact {d} value"))
        );
    }
}

#[test]
fn pad_refuses_two_to_the_63_for_i64() {
    let v = 9223372036854775808.0; // 2^63 = i64::MAX + 1
    assert_eq!(
        infer(&pad(&[(1, 1)], v), &[&tt!(I64[2])]).map_err(|e| e.reason),
        Err("pad value 9.223372036854776e18 is not an exact i64 value".to_string())
    );
}

#[test]
fn pad_errors() {
    assert_eq!(
        reason(pad(&[(1, 1)], 0.0), &[&tt!(F32[2, 3])]),
        "has 1 pads for rank 2"
    );
    assert_eq!(
        ok(pad(&[(0, 1), (0, 0)], 0.0), &[&tt!(F32["batch", 3])]),
        tt!(F32["batch + 1", 3])
    );
    assert_eq!(
        reason(pad(&[(u64::MAX, 1)], 0.0), &[&tt!(F32[0])]),
        "the padded size overflows u64"
    );
    assert_eq!(
        reason(pad(&[(1, u64::MAX)], 0.0), &[&tt!(F32[0])]),
        "the padded size overflows u64"
    );
    assert_eq!(
        ok(pad(&[(u64::MAX - 1, 1)], 0.0), &[&tt!(F32[0])]),
        tt!(F32[18446744073709551615])
    );
}

// ---------------------------------------------------------------------------------------------
// Squeeze and unsqueeze
// ---------------------------------------------------------------------------------------------

#[test]
fn squeeze_shapes_and_errors() {
    let x = tt!(F32[1, "n", 1, 3]);
    assert_eq!(ok(squeeze(&[0, 2]), &[&x]), tt!(F32["n", 3]));
    assert_eq!(ok(squeeze(&[2, 0]), &[&x]), tt!(F32["n", 3]));
    assert_eq!(ok(squeeze(&[]), &[&x]), x);
    assert_eq!(ok(squeeze(&[0]), &[&tt!(Bool[1])]), tt!(Bool[]));
    assert_eq!(reason(squeeze(&[3]), &[&x]), "axis 3 has size 3, not 1");
    assert_eq!(
        graph_err(squeeze(&[1]), std::slice::from_ref(&x)),
        "node %1: squeeze(f32[1, n, 1, 3]): axis 1 has size n, not 1"
    );
    assert_eq!(
        reason(squeeze(&[4]), &[&x]),
        "axis 4 is out of range for rank 4"
    );
    assert_eq!(reason(squeeze(&[0, 0]), &[&x]), "axis 0 is repeated");
    assert_eq!(
        reason(squeeze(&[0]), &[&tt!(F32[0])]),
        "axis 0 has size 0, not 1"
    );
}

#[test]
fn unsqueeze_shapes_and_errors() {
    let x = tt!(F32["n", 3]);
    assert_eq!(ok(unsqueeze(&[0]), &[&x]), tt!(F32[1, "n", 3]));
    assert_eq!(ok(unsqueeze(&[2]), &[&x]), tt!(F32["n", 3, 1]));
    assert_eq!(ok(unsqueeze(&[3, 0]), &[&x]), tt!(F32[1, "n", 3, 1]));
    assert_eq!(ok(unsqueeze(&[1, 2]), &[&x]), tt!(F32["n", 1, 1, 3]));
    assert_eq!(ok(unsqueeze(&[]), &[&x]), x);
    assert_eq!(ok(unsqueeze(&[0]), &[&tt!(I8[])]), tt!(I8[1]));
    // Up to rank 8.
    let six = tt!(F32[2, 2, 2, 2, 2, 2]);
    assert_eq!(
        ok(unsqueeze(&[0, 7]), &[&six]),
        tt!(F32[1, 2, 2, 2, 2, 2, 2, 1])
    );
    assert_eq!(
        graph_err(unsqueeze(&[0, 1, 2]), std::slice::from_ref(&six)),
        "node %1: unsqueeze(f32[2, 2, 2, 2, 2, 2]): the result rank 9 exceeds 8"
    );
    assert_eq!(
        reason(unsqueeze(&[0; 100]), &[&tt!(F32[])]),
        "the result rank 100 exceeds 8"
    );
    // Axes are positions in the result.
    assert_eq!(
        reason(unsqueeze(&[3]), &[&x]),
        "axis 3 is out of range for rank 3"
    );
    assert_eq!(reason(unsqueeze(&[1, 1]), &[&x]), "axis 1 is repeated");
}

// ---------------------------------------------------------------------------------------------
// Gather
// ---------------------------------------------------------------------------------------------

#[test]
fn gather_shapes() {
    let table = tt!(F16[100, 64]);
    for idx in [DType::I32, DType::I64] {
        assert_eq!(
            ok(
                Op::Gather { axis: 0 },
                &[&table, &ty(idx, shape!["batch", "seq"])]
            ),
            tt!(F16["batch", "seq", 64])
        );
        assert_eq!(
            ok(Op::Gather { axis: 1 }, &[&table, &ty(idx, shape![5])]),
            tt!(F16[100, 5])
        );
        assert_eq!(
            ok(Op::Gather { axis: 0 }, &[&table, &ty(idx, shape![])]),
            tt!(F16[64])
        );
    }
    assert_eq!(
        ok(
            Op::Gather { axis: 1 },
            &[&tt!(Bool[2, 3, 4]), &tt!(I64[5, 6])]
        ),
        tt!(Bool[2, 5, 6, 4])
    );
    // The result may reach rank 8 but not exceed it.
    let data = tt!(F32[2, 3, 4, 5]);
    assert_eq!(
        ok(Op::Gather { axis: 3 }, &[&data, &tt!(I32[1, 1, 1, 1, 1])]),
        tt!(F32[2, 3, 4, 1, 1, 1, 1, 1])
    );
    assert_eq!(
        graph_err(Op::Gather { axis: 3 }, &[data, tt!(I32[1, 1, 1, 1, 1, 1])]),
        "node %2: gather(f32[2, 3, 4, 5], i32[1, 1, 1, 1, 1, 1]): rank 9 exceeds the maximum \
         rank 8"
    );
}

#[test]
fn gather_errors() {
    let table = tt!(F32[100, 64]);
    for d in DType::ALL
        .into_iter()
        .filter(|d| !matches!(d, DType::I32 | DType::I64))
    {
        assert_eq!(
            reason(Op::Gather { axis: 0 }, &[&table, &ty(d, shape![3])]),
            format!("indices must be i32 or i64, got {d}")
        );
    }
    assert_eq!(
        graph_err(Op::Gather { axis: 2 }, &[table, tt!(I64[3])]),
        "node %2: gather(f32[100, 64], i64[3]): axis 2 is out of range for rank 2"
    );
    assert_eq!(
        reason(Op::Gather { axis: 0 }, &[&tt!(F32[]), &tt!(I64[3])]),
        "axis 0 is out of range for rank 0"
    );
}

// ---------------------------------------------------------------------------------------------
// State updates
// ---------------------------------------------------------------------------------------------

#[test]
fn state_assign_types() {
    for t in [tt!(F32[4]), tt!(I64["batch", 2]), tt!(Bool[])] {
        assert_eq!(ok(Op::StateAssign, &[&t, &t]), t);
    }
    for (s, v) in [
        (tt!(F32[4]), tt!(F16[4])),
        (tt!(F32[4]), tt!(F32[5])),
        (tt!(F32[4]), tt!(F32[1])),
        (tt!(F32[4]), tt!(F32[])),
        (tt!(F32["n"]), tt!(F32["m"])),
        (tt!(F32[1, 4]), tt!(F32[4])),
    ] {
        assert_eq!(
            reason(Op::StateAssign, &[&s, &v]),
            format!("the value must have the state's type {s}")
        );
    }
}

/// A graph with a state `s` of type `state` (%0) and inputs for `others` (%1, ...).
fn with_state(state: TensorType, others: &[TensorType]) -> (Graph, NodeId, Vec<NodeId>) {
    let mut g = Graph::new();
    let s = source(&mut g, state_op("s"), state).unwrap();
    let ids = add_inputs(&mut g, others);
    (g, s, ids)
}

#[test]
fn state_assign_in_a_graph() {
    let (mut g, s, ids) = with_state(tt!(F32[4]), &[tt!(F32[4]), tt!(F32[5])]);
    let e = g.add_node(Op::StateAssign, &[s, ids[1]], None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %3: state_assign(f32[4], f32[5]): the value must have the state's type f32[4]"
    );
    // The first operand must be a state.
    let e = g
        .add_node(Op::StateAssign, &[ids[0], ids[0]], None)
        .unwrap_err();
    assert_eq!(
        e,
        GraphError::NotAState {
            node: NodeId(3),
            op: "state_assign",
            target: ids[0],
            target_op: "input",
        }
    );
    assert_eq!(
        e.to_string(),
        "node %3 (state_assign) writes %1, which is a input, not a state"
    );
    // A state update's result is not a state either.
    let first = g.add_node(Op::StateAssign, &[s, ids[0]], None).unwrap();
    assert_eq!(g.ty(first), &tt!(F32[4]));
    assert_eq!(g.state_writer(s), Some(first));
    let e = g
        .add_node(Op::StateAssign, &[first, ids[0]], None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %4 (state_assign) writes %3, which is a state_assign, not a state"
    );
    // A second write of the same state, by either update op.
    let e = g.add_node(Op::StateAssign, &[s, ids[0]], None).unwrap_err();
    assert_eq!(
        e,
        GraphError::StateWrittenTwice {
            name: "s".into(),
            first,
            second: NodeId(4),
        }
    );
    assert_eq!(
        e.to_string(),
        "state `s` is written by %3 and %4; a state is written at most once per run"
    );
    let e = g
        .add_node(write_slice(0, Some(0)), &[s, ids[0]], None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "state `s` is written by %3 and %4; a state is written at most once per run"
    );
    assert_eq!(g.len(), 4);
    // Reading the state as a value elsewhere is fine, and a state may be assigned itself.
    let mut g2 = Graph::new();
    let s2 = source(&mut g2, state_op("t"), tt!(I32[2])).unwrap();
    let sum = g2
        .add_node(Op::Binary(BinaryOp::Add), &[s2, s2], None)
        .unwrap();
    g2.add_node(Op::StateAssign, &[s2, sum], None).unwrap();
    let s3 = source(&mut g2, state_op("u"), tt!(I32[2])).unwrap();
    g2.add_node(Op::StateAssign, &[s3, s3], None).unwrap();
    g2.verify().unwrap();
    assert_eq!(g2.state_updates().len(), 2);
}

#[test]
fn state_write_slice_static_start() {
    let state = tt!(F32[8, "batch", 4]);
    let value = |n: u64| ty(DType::F32, shape![n, "batch", 4]);
    for (start, len) in [(0, 8), (0, 1), (3, 5), (7, 1), (8, 0), (0, 0)] {
        assert_eq!(
            ok(write_slice(0, Some(start)), &[&state, &value(len)]),
            state,
            "{len} at {start}"
        );
    }
    assert_eq!(
        reason(write_slice(0, Some(6)), &[&state, &value(3)]),
        "writing 3 elements at offset 6 overruns axis 0 of size 8"
    );
    assert_eq!(
        reason(write_slice(0, Some(9)), &[&state, &value(0)]),
        "writing 0 elements at offset 9 overruns axis 0 of size 8"
    );
    assert_eq!(
        reason(write_slice(0, Some(u64::MAX)), &[&state, &value(1)]),
        format!(
            "writing 1 elements at offset {} overruns axis 0 of size 8",
            u64::MAX
        )
    );
    // Along a later axis, with symbolic dims elsewhere matching by name.
    let cache = tt!(F16["batch", 8, 128, 64]);
    assert_eq!(
        ok(
            write_slice(2, Some(127)),
            &[&cache, &tt!(F16["batch", 8, 1, 64])]
        ),
        cache
    );
}

#[test]
fn state_write_slice_dynamic_offset() {
    let cache = tt!(F16[1, 8, 128, 64]);
    let token = tt!(F16[1, 8, 1, 64]);
    for off in [tt!(I32[]), tt!(I64[])] {
        assert_eq!(ok(write_slice(2, None), &[&cache, &token, &off]), cache);
    }
    for off in [
        tt!(I64[1]),
        tt!(F32[]),
        tt!(U8[]),
        tt!(Bool[]),
        tt!(I64["n"]),
    ] {
        assert_eq!(
            reason(write_slice(2, None), &[&cache, &token, &off]),
            format!("the offset must be a scalar i32 or i64, got {off}")
        );
    }
    assert_eq!(
        reason(
            write_slice(2, None),
            &[&cache, &tt!(F16[1, 8, 129, 64]), &tt!(I64[])]
        ),
        "writing 129 elements at some offset overruns axis 2 of size 128"
    );
    let (mut g, s, ids) = with_state(cache, &[token, tt!(I64[2])]);
    let e = g
        .add_node(write_slice(2, None), &[s, ids[0], ids[1]], None)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %3: state_write_slice(f16[1, 8, 128, 64], f16[1, 8, 1, 64], i64[2]): the offset \
         must be a scalar i32 or i64, got i64[2]"
    );
}

#[test]
fn state_write_slice_errors() {
    let state = tt!(F32[8, 4]);
    assert_eq!(
        reason(write_slice(0, Some(0)), &[&state, &tt!(F16[1, 4])]),
        "dtypes f32 and f16 differ (cast one first)"
    );
    assert_eq!(
        reason(write_slice(0, Some(0)), &[&state, &tt!(F32[4])]),
        "the value has rank 1, the state 2"
    );
    assert_eq!(
        reason(write_slice(2, Some(0)), &[&state, &tt!(F32[1, 4])]),
        "axis 2 is out of range for rank 2"
    );
    assert_eq!(
        reason(write_slice(0, Some(0)), &[&state, &tt!(F32[1, 3])]),
        "the value has 3 at axis 1, the state 4"
    );
    assert_eq!(
        reason(
            write_slice(1, Some(0)),
            &[&tt!(F32["n", 4]), &tt!(F32["m", 1])]
        ),
        "the value has m at axis 0, the state n"
    );
    assert_eq!(
        reason(
            write_slice(0, Some(0)),
            &[&tt!(F32["n", 4]), &tt!(F32[1, 4])]
        ),
        "a slice write needs axis 0 to be static, got n"
    );
    assert_eq!(
        reason(
            write_slice(0, Some(0)),
            &[&tt!(F32[8, 4]), &tt!(F32["n", 4])]
        ),
        "a slice write needs axis 0 to be static, got n"
    );
    // The first operand must be a state.
    let mut g = Graph::new();
    let ids = add_inputs(&mut g, &[state.clone(), tt!(F32[1, 4])]);
    let e = g.add_node(write_slice(0, Some(7)), &ids, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %2 (state_write_slice) writes %0, which is a input, not a state"
    );
    // A state written by a slice write refuses a second write.
    let (mut g, s, ids) = with_state(state, &[tt!(F32[1, 4]), tt!(I32[])]);
    let first = g
        .add_node(write_slice(0, None), &[s, ids[0], ids[1]], None)
        .unwrap();
    let e = g
        .add_node(write_slice(0, Some(1)), &[s, ids[0]], None)
        .unwrap_err();
    assert_eq!(
        e,
        GraphError::StateWrittenTwice {
            name: "s".into(),
            first,
            second: NodeId(4),
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Rank limits and malformed operand types
// ---------------------------------------------------------------------------------------------

#[test]
fn results_never_exceed_max_rank() {
    assert_eq!(MAX_RANK, 8);
    let eight = ty(DType::F32, Shape::of(&[1; 8]));
    assert_eq!(ok(Op::Unary(UnaryOp::Exp), &[&eight]), eight);
    assert_eq!(ok(Op::MatMul, &[&eight, &eight]), eight);
    assert_eq!(
        reason(unsqueeze(&[0]), &[&eight]),
        "the result rank 9 exceeds 8"
    );
    assert_eq!(
        reason(Op::Gather { axis: 0 }, &[&eight, &tt!(I32[1, 1])]),
        "rank 9 exceeds the maximum rank 8"
    );
    assert_eq!(ok(Op::Gather { axis: 0 }, &[&eight, &tt!(I32[1])]), eight);
}

/// Operand types that break `Shape::new`'s rules (as a decoder without checks could produce)
/// are refused, not trusted.
#[test]
fn malformed_operand_shapes_are_refused() {
    let config = bincode::config::standard();
    let decode = |dims: Vec<Dim>| -> Shape {
        let bytes = bincode::serde::encode_to_vec(&dims, config).unwrap();
        bincode::serde::decode_from_slice(&bytes, config).unwrap().0
    };
    let nine = ty(DType::F32, decode(vec![Dim::Static(1); 9]));
    assert_eq!(nine.rank(), 9);
    assert_eq!(
        reason(Op::Unary(UnaryOp::Exp), &[&nine]),
        "rank 9 exceeds the maximum rank 8"
    );
    let bad = ty(DType::F32, decode(vec![Dim::Symbolic("".into())]));
    assert_eq!(
        reason(Op::Binary(BinaryOp::Add), &[&tt!(F32[1]), &bad]),
        "`` is not a valid symbolic dim name"
    );
    let e = check_source(&input_op("x"), &nine).unwrap_err();
    assert_eq!(
        e.to_string(),
        "input(): declared f32[1, 1, 1, 1, 1, 1, 1, 1, 1]: rank 9 exceeds the maximum rank 8"
    );
}

// ---------------------------------------------------------------------------------------------
// Property: inference never panics
// ---------------------------------------------------------------------------------------------

fn arb_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn arb_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        6 => (0u64..5).prop_map(Dim::Static),
        1 => prop::sample::select(vec![u64::MAX, u64::MAX - 1, 1 << 32, 1 << 63]).prop_map(Dim::Static),
        2 => prop::sample::select(vec!["a", "b", "batch"]).prop_map(Dim::from),
    ]
}

fn arb_shape() -> impl Strategy<Value = Shape> {
    prop::collection::vec(arb_dim(), 0..=MAX_RANK).prop_map(|d| Shape::new(d).unwrap())
}

fn arb_type() -> impl Strategy<Value = TensorType> {
    (arb_dtype(), arb_shape()).prop_map(|(d, s)| TensorType::new(d, s))
}

fn arb_axes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![8 => 0usize..10, 1 => Just(usize::MAX)], 0..10)
}

fn arb_u64() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0u64..12, 1 => Just(u64::MAX), 1 => Just(u64::MAX - 1), 1 => any::<u64>()]
}

fn arb_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-3i32..300).prop_map(f64::from),
        prop::sample::select(vec![
            0.1,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            70000.0,
            9223372036854775808.0,
            -9223372036854775809.0,
            1e300,
            f64::MIN_POSITIVE / 2.0,
        ]),
        any::<f64>(),
    ]
}

fn arb_slice_range() -> impl Strategy<Value = SliceRange> {
    (arb_u64(), prop::option::of(arb_u64()), arb_u64()).prop_map(|(start, stop, step)| SliceRange {
        start,
        stop: stop.map(Dim::Static),
        step,
    })
}

fn arb_reshape_dim() -> impl Strategy<Value = ReshapeDim> {
    prop_oneof![4 => arb_dim().prop_map(ReshapeDim::Dim), 1 => Just(ReshapeDim::Infer)]
}

fn arb_const_data() -> impl Strategy<Value = ConstData> {
    prop_oneof![
        prop::collection::vec(any::<bool>(), 0..5).prop_map(ConstData::Bool),
        prop::collection::vec(any::<i64>(), 0..5).prop_map(ConstData::Int),
        prop::collection::vec(arb_f64().prop_map(ExactF64), 0..5).prop_map(ConstData::Float),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prop::sample::select(UnaryOp::ALL.to_vec()).prop_map(Op::Unary),
        arb_dtype().prop_map(|to| Op::Cast { to }),
        prop::sample::select(BinaryOp::ALL.to_vec()).prop_map(Op::Binary),
        Just(Op::Select),
        (
            prop::sample::select(ReduceOp::ALL.to_vec()),
            arb_axes(),
            any::<bool>()
        )
            .prop_map(|(op, axes, keepdims)| Op::Reduce { op, axes, keepdims }),
        Just(Op::MatMul),
        prop::collection::vec(arb_reshape_dim(), 0..10).prop_map(|dims| Op::Reshape { dims }),
        arb_axes().prop_map(|perm| Op::Permute { perm }),
        prop::collection::vec(arb_dim(), 0..10).prop_map(|dims| Op::BroadcastTo { dims }),
        prop::collection::vec(arb_slice_range(), 0..10).prop_map(|ranges| Op::Slice { ranges }),
        (0usize..10).prop_map(|axis| Op::Concat { axis }),
        (
            prop::collection::vec((arb_u64(), arb_u64()), 0..10),
            arb_f64()
        )
            .prop_map(|(pads, v)| Op::Pad {
                pads,
                value: ExactF64(v)
            }),
        arb_axes().prop_map(|axes| Op::Squeeze { axes }),
        arb_axes().prop_map(|axes| Op::Unsqueeze { axes }),
        (0usize..10).prop_map(|axis| Op::Gather { axis }),
        Just(Op::StateAssign),
        ((0usize..10), prop::option::of(arb_u64()))
            .prop_map(|(axis, start)| Op::StateWriteSlice { axis, start }),
        Just(input_op("x")),
        Just(state_op("s")),
        arb_const_data().prop_map(|data| Op::Constant { data }),
    ]
}

/// Operands that often fit: copies of one type, reshaped variants, plus random ones.
fn arb_operands() -> impl Strategy<Value = Vec<TensorType>> {
    prop_oneof![
        prop::collection::vec(arb_type(), 0..5),
        (arb_type(), 1usize..5).prop_map(|(t, n)| vec![t; n]),
        (arb_type(), arb_dtype(), 0usize..4).prop_map(|(t, d, n)| {
            let mut v = vec![t.clone(); n];
            v.push(TensorType::new(d, t.shape.clone()));
            v.push(TensorType::new(d, Shape::scalar()));
            v
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Neither inference nor `add_node` panics, and every inferred type is a valid type.
    #[test]
    fn inference_never_panics(op in arb_op(), operands in arb_operands()) {
        let refs: Vec<&TensorType> = operands.iter().collect();
        match infer(&op, &refs) {
            Ok(t) => {
                prop_assert!(!op.is_source());
                prop_assert!(Shape::new(t.shape.dims().to_vec()).is_ok(), "{t}");
                prop_assert!(t.rank() <= MAX_RANK);
            }
            Err(e) => {
                prop_assert_eq!(e.op, op.name());
                prop_assert!(!e.reason.is_empty());
                let _ = e.to_string();
            }
        }
        // The same through a graph, where operand 0 is a state (so state updates reach the
        // state checks) and the others inputs.
        let mut g = Graph::new();
        let mut ids = Vec::new();
        for (i, t) in operands.iter().enumerate() {
            let src = if i == 0 { state_op("s") } else { input_op(&format!("x{i}")) };
            ids.push(g.add_node(src, &[], Some(t.clone())).unwrap());
        }
        let before = g.len();
        match g.add_node(op.clone(), &ids, None) {
            Ok(id) => {
                prop_assert_eq!(g.ty(id), &infer(&op, &refs).unwrap());
                if op.is_state_update() {
                    g.verify().unwrap();
                }
            }
            Err(e) => {
                prop_assert_eq!(g.len(), before);
                let _ = e.to_string();
            }
        }
        // Sources checked against a random declared type.
        if let Some(t) = operands.first() {
            let _ = check_source(&op, t);
        }
    }
}

fn conv_op(strides: &[u64], dilations: &[u64], pads: &[(u64, u64)], groups: u64) -> Op {
    Op::Conv {
        strides: strides.to_vec(),
        dilations: dilations.to_vec(),
        pads: pads.to_vec(),
        groups,
    }
}

#[test]
fn conv_shapes() {
    // (S + before + after - dilation·(K - 1) - 1) / stride + 1 per spatial axis.
    let op = conv_op(&[2, 1], &[1, 3], &[(1, 0), (2, 2)], 2);
    let (x, w) = (tt!(F16["n", 4, 9, 7]), tt!(F16[6, 2, 3, 2]));
    assert_eq!(ok(op, &[&x, &w]), tt!(F16["n", 6, 4, 8]));
    let op = conv_op(&[1], &[1], &[(0, 0)], 1);
    assert_eq!(
        ok(op, &[&tt!(F64[1, 3, 5]), &tt!(F64[2, 3, 5])]),
        tt!(F64[1, 2, 1])
    );
}

#[test]
fn conv_errors() {
    let plain = conv_op(&[1, 1], &[1, 1], &[(0, 0), (0, 0)], 1);
    let cases = [
        (
            plain.clone(),
            tt!(F32[1, 4, 5, 5]),
            tt!(F32[2, 3, 3, 3]),
            "4 input and 2 output channels in 1 groups need weights of 4 channels per group, got 3",
        ),
        (
            conv_op(&[1, 1], &[1, 1], &[(0, 0), (0, 0)], 3),
            tt!(F32[1, 6, 5, 5]),
            tt!(F32[4, 2, 3, 3]),
            "6 input and 4 output channels in 3 groups need weights of 2 channels per group, got 2",
        ),
        (
            plain.clone(),
            tt!(F32[1, 4, 2, 5]),
            tt!(F32[2, 4, 3, 3]),
            "spatial axis 0: a kernel of 3 (dilation 1) does not fit 2 padded to 2",
        ),
        (
            conv_op(&[1], &[1, 1], &[(0, 0)], 1),
            tt!(F32[1, 4, 5]),
            tt!(F32[2, 4, 3]),
            "needs 1 strides, dilations and pads, got 1, 2 and 1",
        ),
        (
            conv_op(&[0, 1], &[1, 1], &[(0, 0), (0, 0)], 1),
            tt!(F32[1, 4, 5, 5]),
            tt!(F32[2, 4, 3, 3]),
            "strides, dilations and groups must be at least 1",
        ),
        (
            plain.clone(),
            tt!(F32[1, "c", 5, 5]),
            tt!(F32[2, 4, 3, 3]),
            "conv needs axis 1 to be static, got c",
        ),
        (
            plain.clone(),
            tt!(I32[1, 4, 5, 5]),
            tt!(I32[2, 4, 3, 3]),
            "needs a float dtype, got i32",
        ),
        (
            plain,
            tt!(F32[4, 5, 5]),
            tt!(F32[2, 4, 3, 3]),
            "needs x: [N, C, S..] and w: [O, C / groups, K..] with 1 to 3 spatial axes",
        ),
    ];
    for (op, x, w, why) in cases {
        assert_eq!(reason(op, &[&x, &w]), why, "{x} * {w}");
    }
}
