//! Quantization lowerings at the edges the node tests do not reach: ties, saturation and NaN
//! in `QuantizeLinear`, a per-row zero point of `MatMulInteger`, folding of known inputs, and
//! the refusals that must name what tir lacks.

mod common;

use common::{import, int_attr, refusal, value, OneNode};
use tir_graph::HostTensor;
use tir_lower::{Backend, TensorRef};
use tir_onnx::proto::{
    tensor_proto::DataType, AttributeProto, ModelProto, TensorProto, ValueInfoProto,
};

/// A model of one node at opset 21 over graph inputs and initializers, with output `y`.
fn model(
    op: &str,
    inputs: &[&str],
    attrs: Vec<AttributeProto>,
    graph_inputs: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
    y: ValueInfoProto,
) -> ModelProto {
    OneNode {
        op,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        attrs,
        graph_inputs,
        initializers,
        y,
        opset: 21,
    }
    .model()
}

/// A scalar initializer of `dtype` (its value in `int32_data`, or `float_data` for f32).
fn scalar(name: &str, dtype: DataType, v: f64) -> TensorProto {
    let mut t = TensorProto {
        name: Some(name.into()),
        data_type: Some(dtype as i32),
        ..Default::default()
    };
    if dtype == DataType::Float {
        t.float_data = vec![v as f32];
    } else {
        t.int32_data = vec![v as i32];
    }
    t
}

/// Output `y` of the model on the reference backend, given its inputs.
fn run(model: &ModelProto, inputs: &[(&str, HostTensor)]) -> HostTensor<'static> {
    let imported = import(model).unwrap();
    let backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &backend.target(), &Default::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let refs: Vec<_> = inputs
        .iter()
        .map(|(n, t)| (*n, TensorRef::Host(t)))
        .collect();
    let mut out = exe.run(&refs).unwrap();
    out.remove("y").unwrap().into_owned()
}

#[test]
fn quantize_rounds_ties_to_even_and_saturates() {
    let xs = [0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0, f32::NAN];
    let n = xs.len() as i64;
    let m = model(
        "QuantizeLinear",
        &["x", "s", "z"],
        vec![],
        vec![value("x", DataType::Float, &[n])],
        vec![
            scalar("s", DataType::Float, 1.0),
            scalar("z", DataType::Int8, 1.0),
        ],
        value("y", DataType::Int8, &[n]),
    );
    let y = run(
        &m,
        &[("x", HostTensor::from_slice(&xs, &[n as u64]).unwrap())],
    );
    let want: Vec<i8> = vec![1, 3, 3, 1, -1, -1, 127, -128, -128];
    assert_eq!(y.as_slice::<i8>().unwrap(), &want[..]);
}

#[test]
fn matmul_integer_takes_a_1d_zero_point_of_a_per_row() {
    // a: [2, 2] u8, a_zero_point [2] per row (the spec's reading, not NumPy broadcasting).
    let m = model(
        "MatMulInteger",
        &["a", "b", "za"],
        vec![],
        vec![
            value("a", DataType::Uint8, &[2, 2]),
            value("b", DataType::Uint8, &[2, 1]),
            value("za", DataType::Uint8, &[2]),
        ],
        vec![],
        value("y", DataType::Int32, &[2, 1]),
    );
    let a = HostTensor::from_slice(&[10u8, 20, 30, 40], &[2, 2]).unwrap();
    let b = HostTensor::from_slice(&[1u8, 2], &[2, 1]).unwrap();
    let za = HostTensor::from_slice(&[10u8, 30], &[2]).unwrap();
    let y = run(&m, &[("a", a), ("b", b), ("za", za)]);
    // Row 0: (0, 10) · (1, 2) = 20; row 1: (0, 10) · (1, 2) = 20.
    assert_eq!(y.as_slice::<i32>().unwrap(), &[20, 20]);
}

#[test]
fn a_known_dequantize_is_folded_to_the_same_values() {
    let mut x = scalar("x", DataType::Uint8, 0.0);
    x.dims = vec![3];
    x.int32_data = vec![0, 128, 255];
    let m = model(
        "DequantizeLinear",
        &["x", "s", "z"],
        vec![],
        vec![],
        vec![
            x,
            scalar("s", DataType::Float, 0.5),
            scalar("z", DataType::Uint8, 128.0),
        ],
        value("y", DataType::Float, &[3]),
    );
    let y = run(&m, &[]);
    assert_eq!(y.as_slice::<f32>().unwrap(), &[-64.0, 0.0, 63.5]);
}

#[test]
fn a_float8_fnuz_zero_point_is_refused_by_its_dtype() {
    let m = model(
        "QuantizeLinear",
        &["x", "s", "z"],
        vec![],
        vec![
            value("x", DataType::Float, &[4]),
            value("z", DataType::Float8e4m3fnuz, &[]),
        ],
        vec![scalar("s", DataType::Float, 1.0)],
        value("y", DataType::Float8e4m3fnuz, &[4]),
    );
    let m = refusal(&m);
    assert!(m.contains("FLOAT8E4M3FNUZ"), "{m}");
}

#[test]
fn an_int4_output_dtype_is_refused_by_name() {
    let m = model(
        "QuantizeLinear",
        &["x", "s"],
        vec![int_attr("output_dtype", DataType::Int4 as i64)],
        vec![value("x", DataType::Float, &[4])],
        vec![scalar("s", DataType::Float, 1.0)],
        value("y", DataType::Int4, &[4]),
    );
    let m = refusal(&m);
    assert!(m.contains("INT4"), "{m}");
}

#[test]
fn blocks_that_do_not_match_the_scale_are_refused() {
    // 5 elements in blocks of 2 need 3 scales, not 2.
    let m = model(
        "DequantizeLinear",
        &["x", "s"],
        vec![int_attr("axis", 1), int_attr("block_size", 2)],
        vec![
            value("x", DataType::Uint8, &[2, 5]),
            value("s", DataType::Float, &[2, 2]),
        ],
        vec![],
        value("y", DataType::Float, &[2, 5]),
    );
    let m = refusal(&m);
    assert!(m.contains("blocks of 2"), "{m}");
}

#[test]
fn a_zero_point_that_widens_its_operand_is_refused() {
    // `b` is a vector, so its zero point must be one value; 3 of them would broadcast `b` to a
    // matrix.
    let m = model(
        "MatMulInteger",
        &["a", "b", "", "zb"],
        vec![],
        vec![
            value("a", DataType::Uint8, &[2, 3]),
            value("b", DataType::Uint8, &[3]),
            value("zb", DataType::Uint8, &[3]),
        ],
        vec![],
        value("y", DataType::Int32, &[2]),
    );
    let m = refusal(&m);
    assert!(m.contains("broadcasts u8[3, 1]"), "{m}");
}
