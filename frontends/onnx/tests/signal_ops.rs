//! Lowerings of the signal and geometry ops at edges their node tests do not reach: DFT's
//! zero padding to `dft_length`, Det past 2×2, Pow of an integer base with a fractional
//! exponent, and the refusals of what is not lowered (DFT's two-sided inverse, Det past 3×3,
//! RoiAlign's adaptive grid, an odd rotary dim).

mod common;

use common::{import, int_attr, refusal, value, OneNode};
use std::f64::consts::PI;
use tir_graph::HostTensor;
use tir_lower::{Backend, TensorRef};
use tir_onnx::proto::{tensor_proto::DataType, AttributeProto, ModelProto, TensorProto};

/// A scalar i64 initializer.
fn int_scalar(name: &str, v: i64) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![v],
        ..Default::default()
    }
}

/// One node `op(inputs) -> y` (f32) at `opset`; `inputs` are graph inputs, `inits` initializers.
fn model(
    op: &str,
    attrs: Vec<AttributeProto>,
    inputs: &[(&str, DataType, &[i64])],
    inits: Vec<TensorProto>,
    opset: i64,
) -> ModelProto {
    model_of(op, attrs, inputs, inits, DataType::Float, opset)
}

/// [`model`] with an output of dtype `out`.
fn model_of(
    op: &str,
    attrs: Vec<AttributeProto>,
    inputs: &[(&str, DataType, &[i64])],
    inits: Vec<TensorProto>,
    out: DataType,
    opset: i64,
) -> ModelProto {
    let mut names: Vec<String> = inputs.iter().map(|(n, _, _)| n.to_string()).collect();
    names.extend(inits.iter().map(|t| t.name().to_string()));
    if op == "DFT" {
        // DFT's inputs are positional: `x`, then `dft_length`.
        names = vec!["x".into(), "n".into()];
    }
    OneNode {
        op,
        inputs: names,
        attrs,
        graph_inputs: inputs.iter().map(|(n, t, d)| value(n, *t, d)).collect(),
        initializers: inits,
        y: value("y", out, &[1]),
        opset,
    }
    .model()
}

/// Runs `m` on the reference backend; its output `y` as f64.
fn run(m: &ModelProto, inputs: &[(&str, &HostTensor)]) -> Vec<f64> {
    let imported = import(m).unwrap();
    let backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &backend.target(), &Default::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let refs: Vec<(&str, TensorRef)> = inputs
        .iter()
        .map(|(n, t)| (*n, TensorRef::Host(t)))
        .collect();
    let y = &exe.run(&refs).unwrap()["y"];
    (0..y.numel()).map(|i| y.element_f64(i).unwrap()).collect()
}

#[test]
fn dft_zero_pads_to_dft_length() {
    let signal = [1.0f32, 2.0, 3.0];
    let m = model(
        "DFT",
        vec![int_attr("axis", 1)],
        &[("x", DataType::Float, &[1, 3, 1])],
        vec![int_scalar("n", 5)],
        17,
    );
    let x = HostTensor::from_slice(&signal, &[1, 3, 1]).unwrap();
    let y = run(&m, &[("x", &x)]);
    assert_eq!(y.len(), 10);
    for j in 0..5 {
        let (mut re, mut im) = (0.0, 0.0);
        for (t, &v) in signal.iter().enumerate() {
            let theta = 2.0 * PI * (j * t) as f64 / 5.0;
            re += f64::from(v) * theta.cos();
            im -= f64::from(v) * theta.sin();
        }
        assert!(
            (y[2 * j] - re).abs() < 1e-5,
            "bin {j}: {} vs {re}",
            y[2 * j]
        );
        assert!(
            (y[2 * j + 1] - im).abs() < 1e-5,
            "bin {j}: {} vs {im}",
            y[2 * j + 1]
        );
    }
}

#[test]
fn dft_two_sided_inverse_is_refused_by_name() {
    let m = model(
        "DFT",
        vec![int_attr("axis", 1), int_attr("inverse", 1)],
        &[("x", DataType::Float, &[1, 4, 2])],
        vec![int_scalar("n", 4)],
        17,
    );
    let r = refusal(&m);
    assert!(r.contains("two-sided inverse"), "{r}");
}

#[test]
fn det_expands_3x3_and_refuses_4x4() {
    let m = model(
        "Det",
        vec![],
        &[("x", DataType::Float, &[3, 3])],
        vec![],
        22,
    );
    let a = [2.0f32, -1.0, 0.5, 3.0, 4.0, -2.0, 1.0, 0.0, 5.0];
    let x = HostTensor::from_slice(&a, &[3, 3]).unwrap();
    let want = 2.0 * (4.0 * 5.0 - 0.0) + 1.0 * (3.0 * 5.0 + 2.0) + 0.5 * (0.0 - 4.0);
    let y = run(&m, &[("x", &x)]);
    assert!((y[0] - want).abs() < 1e-4, "{} vs {want}", y[0]);
    let m = model(
        "Det",
        vec![],
        &[("x", DataType::Float, &[2, 4, 4])],
        vec![],
        22,
    );
    let r = refusal(&m);
    assert!(r.contains("Det of 4x4"), "{r}");
}

#[test]
fn pow_of_an_int_base_truncates_numpys_float_result() {
    let m = model_of(
        "Pow",
        vec![],
        &[("b", DataType::Int32, &[3]), ("e", DataType::Float, &[3])],
        vec![],
        DataType::Int32,
        15,
    );
    let b = HostTensor::from_slice(&[2i32, 4, -8], &[3]).unwrap();
    let e = HostTensor::from_slice(&[-1.0f32, 0.5, 1.0 / 3.0], &[3]).unwrap();
    // NumPy: int32 ** float32 in f64 (0.5, 2, NaN), then astype(int32) truncates toward zero.
    let y = run(&m, &[("b", &b), ("e", &e)]);
    assert_eq!(y[..2], [0.0, 2.0]);
}

#[test]
fn roi_align_with_a_run_time_grid_is_refused() {
    let m = model(
        "RoiAlign",
        vec![],
        &[
            ("x", DataType::Float, &[1, 1, 4, 4]),
            ("rois", DataType::Float, &[2, 4]),
            ("batch", DataType::Int64, &[2]),
        ],
        vec![],
        22,
    );
    let r = refusal(&m);
    assert!(r.contains("sampling_ratio 0"), "{r}");
}

#[test]
fn rotary_embedding_of_an_odd_rotary_dim_is_refused() {
    let m = model(
        "RotaryEmbedding",
        vec![int_attr("rotary_embedding_dim", 3)],
        &[
            ("x", DataType::Float, &[1, 2, 3, 8]),
            ("cos", DataType::Float, &[1, 3, 1]),
            ("sin", DataType::Float, &[1, 3, 1]),
        ],
        vec![],
        23,
    );
    let r = refusal(&m);
    assert!(r.contains("rotary_embedding_dim 3"), "{r}");
}
