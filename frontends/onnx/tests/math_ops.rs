//! Lowerings whose node tests do not reach their edges: the trigonometric composites over their
//! whole domain (to a few ulps, where the node tests check 1e-3 on a few values), TopK's order
//! with NaN and ties, and refusals.

mod common;

use common::{import, value, OneNode};
use tir_graph::HostTensor;
use tir_lower::{Backend, TensorRef};
use tir_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, AttributeProto, ModelProto, TensorProto,
};

/// A model of one node `op(x) -> y` at `opset`, `x` and `y` of `dtype` and these dims.
fn unary_model(op: &str, attrs: Vec<AttributeProto>, dtype: DataType, dims: &[i64]) -> ModelProto {
    OneNode {
        op,
        inputs: vec!["x".into()],
        attrs,
        graph_inputs: vec![value("x", dtype, dims)],
        initializers: vec![],
        y: value("y", dtype, dims),
        opset: 22,
    }
    .model()
}

/// `op` of f32 `xs` on the reference backend.
fn run_f32(op: &str, xs: &[f32]) -> Vec<f32> {
    let model = unary_model(op, vec![], DataType::Float, &[xs.len() as i64]);
    let imported = import(&model).unwrap();
    let backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &backend.target(), &Default::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let input = HostTensor::from_slice(xs, &[xs.len() as u64]).unwrap();
    let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
    out["y"].as_slice::<f32>().unwrap().to_vec()
}

/// Magnitudes from 1e-30 to 1e30 (a geometric sweep), both signs, 0, and the domain edges.
fn sweep() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=600)
        .map(|i| 10f64.powf(-30.0 + 0.1 * i as f64) as f32)
        .flat_map(|v| [v, -v])
        .collect();
    xs.extend((0..=400).map(|i| -2.0 + 0.01 * i as f32));
    xs.extend([0.0, 1.0, -1.0, 0.999_999_9, -0.999_999_9, 1.000_000_1]);
    xs
}

/// Each of `op`'s results within `ulps` f32 ulps (relative) of `f` in f64, NaN where `f` is.
fn check(op: &str, f: fn(f64) -> f64, ulps: f64) {
    let xs = sweep();
    let ys = run_f32(op, &xs);
    for (&x, &y) in xs.iter().zip(&ys) {
        let want = f(f64::from(x));
        let got = f64::from(y);
        if want.is_nan() {
            assert!(got.is_nan(), "{op}({x}) = {got}, want NaN");
        } else if want.is_infinite() || want.abs() > f64::from(f32::MAX) {
            assert_eq!(got, want.signum() * f64::INFINITY, "{op}({x})");
        } else {
            let tol = ulps * f64::from(f32::EPSILON) * want.abs() + 1e-44;
            assert!((got - want).abs() <= tol, "{op}({x}) = {got}, want {want}");
        }
    }
}

#[test]
fn inverse_trigonometry_is_accurate_over_its_domain() {
    check("Atan", f64::atan, 2.0);
    check("Asin", f64::asin, 4.0);
    check("Acos", f64::acos, 4.0);
    check("Tan", f64::tan, 4.0);
}

#[test]
fn hyperbolic_functions_are_accurate_over_their_domain() {
    check("Sinh", f64::sinh, 4.0);
    check("Cosh", f64::cosh, 4.0);
    check("Asinh", f64::asinh, 4.0);
    check("Acosh", f64::acosh, 4.0);
    check("Atanh", f64::atanh, 4.0);
}

#[test]
fn atan_of_f64_has_f64_precision() {
    let xs: Vec<f64> = (0..=400)
        .map(|i| 10f64.powf(-20.0 + 0.1 * i as f64))
        .flat_map(|v| [v, -v])
        .chain([0.0, 0.66, 2.414_213_562_373_095, f64::INFINITY])
        .collect();
    let model = unary_model("Atan", vec![], DataType::Double, &[xs.len() as i64]);
    let imported = import(&model).unwrap();
    let backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &backend.target(), &Default::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let input = HostTensor::from_slice(&xs, &[xs.len() as u64]).unwrap();
    let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
    for (&x, &y) in xs.iter().zip(out["y"].as_slice::<f64>().unwrap()) {
        let want = x.atan();
        assert!(
            (y - want).abs() <= 4.0 * f64::EPSILON * want.abs(),
            "atan({x}) = {y}"
        );
    }
}

#[test]
fn trigonometry_of_integers_is_refused() {
    let model = unary_model("Atan", vec![], DataType::Int32, &[3]);
    let message = import(&model).err().unwrap().to_string();
    assert!(message.contains("Atan of i32"), "{message}");
}

/// `TopK(x, K = k)` of an f32 vector on the reference backend: values and indices.
fn top_k(xs: &[f32], k: i64, largest: bool) -> (Vec<f32>, Vec<i64>) {
    let mut model = unary_model(
        "TopK",
        vec![AttributeProto {
            name: Some("largest".into()),
            r#type: Some(AttributeType::Int as i32),
            i: Some(i64::from(largest)),
            ..Default::default()
        }],
        DataType::Float,
        &[xs.len() as i64],
    );
    let g = model.graph.as_mut().unwrap();
    g.node[0].input.push("k".into());
    g.node[0].output = vec!["values".into(), "indices".into()];
    g.initializer.push(TensorProto {
        name: Some("k".into()),
        dims: vec![1],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![k],
        ..Default::default()
    });
    g.output = vec![
        value("values", DataType::Float, &[k]),
        value("indices", DataType::Int64, &[k]),
    ];
    let imported = import(&model).unwrap();
    let backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &backend.target(), &Default::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let input = HostTensor::from_slice(xs, &[xs.len() as u64]).unwrap();
    let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
    (
        out["values"].as_slice::<f32>().unwrap().to_vec(),
        out["indices"].as_slice::<i64>().unwrap().to_vec(),
    )
}

#[test]
fn top_k_ranks_nan_highest_and_breaks_ties_by_index() {
    let xs = [
        1.0,
        f32::NAN,
        3.0,
        3.0,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::NEG_INFINITY,
    ];
    let (values, indices) = top_k(&xs, 4, true);
    assert_eq!(indices, [1, 5, 2, 3]);
    assert!(values[0].is_nan() && values[1].is_nan() && values[2..] == [3.0, 3.0]);
    let (values, indices) = top_k(&xs, 4, false);
    assert_eq!(indices, [4, 6, 0, 2]);
    assert_eq!(values, [f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0, 3.0]);
}

#[test]
fn top_k_of_zero_gives_empty_outputs() {
    let (values, indices) = top_k(&[2.0, 1.0, 3.0], 0, true);
    assert!(values.is_empty() && indices.is_empty());
}

#[test]
fn top_k_beyond_its_bound_is_refused() {
    let mut model = unary_model("TopK", vec![], DataType::Float, &[5000]);
    let g = model.graph.as_mut().unwrap();
    g.node[0].input.push("k".into());
    g.initializer.push(TensorProto {
        name: Some("k".into()),
        dims: vec![1],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![3],
        ..Default::default()
    });
    let message = import(&model).err().unwrap().to_string();
    assert!(message.contains("an axis of 5000 elements"), "{message}");
}
