//! The importer on models built here: a valid one imported and run on the reference backend,
//! and malformed ones, each refused with one line and no panic.

use prost::Message;
use tir_graph::{DType, HostTensor};
use tir_lower::{Backend, TensorRef};
use tir_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension,
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use tir_onnx::{ImportOptions, Model, OnnxError};

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tir_onnx::proto::tensor_shape_proto::Dimension {
            value: Some(if d < 0 {
                dimension::Value::DimParam("batch".into())
            } else {
                dimension::Value::DimValue(d)
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs[0])),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn floats(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        float_data: values.to_vec(),
        ..Default::default()
    }
}

/// `y = relu(x @ w + b)` with `x: f32[batch, 3]`, `w` and `b` initializers.
fn linear_relu() -> ModelProto {
    let w: Vec<f32> = (0..6).map(|i| 0.25 * i as f32 - 0.6).collect();
    opset17(GraphProto {
        name: Some("linear_relu".into()),
        node: vec![
            node("MatMul", &["x", "w"], &["xw"]),
            node("Add", &["xw", "b"], &["z"]),
            node("Relu", &["z"], &["y"]),
        ],
        initializer: vec![floats("w", &[3, 2], &w), floats("b", &[2], &[0.5, -0.25])],
        input: vec![value("x", &[-1, 3])],
        output: vec![value("y", &[-1, 2])],
        ..Default::default()
    })
}

/// `graph` as a model of the default domain at opset 17.
fn opset17(graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

fn import(model: &ModelProto) -> Result<tir_onnx::Imported, OnnxError> {
    let decoded = Model::decode(&model.encode_to_vec(), None)?;
    tir_onnx::import(&decoded, &ImportOptions::default())
}

/// The error's message: one line.
fn refusal(model: &ModelProto) -> String {
    let message = match import(model) {
        Ok(_) => panic!("the model was imported"),
        Err(e) => e.to_string(),
    };
    assert!(!message.contains('\n'), "more than one line: {message}");
    message
}

#[test]
fn a_model_imports_and_runs_with_its_values() {
    let imported = import(&linear_relu()).unwrap();
    // Six and two elements: small enough to embed as constants.
    assert!(imported.weights.is_empty());
    let mut exe = on_ref(&imported);
    let x: Vec<f32> = vec![0.3, -1.2, 0.7, 2.0, 0.1, -0.4];
    let input = HostTensor::from_slice(&x, &[2, 3]).unwrap();
    let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
    let y = out["y"].as_slice::<f32>().unwrap().to_vec();
    let w: Vec<f64> = (0..6).map(|i| 0.25 * i as f64 - 0.6).collect();
    let b = [0.5, -0.25];
    for r in 0..2 {
        for c in 0..2 {
            let z: f64 = (0..3)
                .map(|k| f64::from(x[r * 3 + k]) * w[k * 2 + c])
                .sum::<f64>()
                + b[c];
            let want = z.max(0.0);
            assert!(
                (f64::from(y[r * 2 + c]) - want).abs() < 1e-6,
                "y[{r},{c}] {} vs {want}",
                y[r * 2 + c]
            );
        }
    }
    assert_eq!(out["y"].dtype(), DType::F32);
}

#[test]
fn large_initializers_become_parameters_with_their_values() {
    let mut model = linear_relu();
    let w: Vec<f32> = (0..300).map(|i| i as f32).collect();
    let graph = model.graph.as_mut().unwrap();
    graph.initializer[0] = floats("w", &[3, 100], &w);
    graph.initializer[1] = floats("b", &[100], &[0.5; 100]);
    graph.output[0] = value("y", &[-1, 100]);
    let imported = import(&model).unwrap();
    let names: Vec<&str> = imported.weights.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["w", "b"]);
    assert_eq!(imported.weights[0].1.as_slice::<f32>().unwrap(), &w[..]);
}

#[test]
fn bytes_that_are_no_model_are_refused() {
    let bytes = linear_relu().encode_to_vec();
    for cut in [1, 7, bytes.len() / 2, bytes.len() - 1] {
        let e = Model::decode(&bytes[..cut], None)
            .err()
            .expect("a truncated model");
        assert!(e.to_string().contains("not an ONNX model"), "{e}");
    }
    let e = Model::decode(b"\xff\xff\xff\xff not protobuf", None)
        .err()
        .unwrap();
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn a_dangling_name_is_named() {
    let mut model = linear_relu();
    model.graph.as_mut().unwrap().node[1].input[0] = "nowhere".into();
    let m = refusal(&model);
    assert!(m.contains("`nowhere`") && m.contains("Add"), "{m}");
}

#[test]
fn a_cycle_is_refused() {
    let mut model = linear_relu();
    let g = model.graph.as_mut().unwrap();
    // z reads y, y reads z: neither is defined before the other.
    g.node[1].input[0] = "y".into();
    let m = refusal(&model);
    assert!(m.contains("`y`") && m.contains("no earlier node"), "{m}");
}

#[test]
fn an_attribute_of_the_wrong_type_is_named() {
    let mut model = linear_relu();
    let g = model.graph.as_mut().unwrap();
    g.node.push(NodeProto {
        attribute: vec![AttributeProto {
            name: Some("axis".into()),
            r#type: Some(AttributeType::Float as i32),
            f: Some(1.0),
            ..Default::default()
        }],
        ..node("Softmax", &["y"], &["p"])
    });
    g.output[0] = value("p", &[-1, 2]);
    let m = refusal(&model);
    assert!(m.contains("attribute `axis` is FLOAT, expected INT"), "{m}");
}

#[test]
fn an_unknown_attribute_is_refused_not_ignored() {
    let mut model = linear_relu();
    model.graph.as_mut().unwrap().node[2]
        .attribute
        .push(AttributeProto {
            name: Some("alpha".into()),
            r#type: Some(AttributeType::Float as i32),
            f: Some(0.1),
            ..Default::default()
        });
    let m = refusal(&model);
    assert!(m.contains("attribute `alpha`") && m.contains("Relu"), "{m}");
}

#[test]
fn every_unsupported_node_is_listed() {
    let mut model = linear_relu();
    let g = model.graph.as_mut().unwrap();
    g.node.push(node("NonMaxSuppression", &["y", "w"], &["c"]));
    g.node.push(node("Unique", &["c"], &["t"]));
    let m = refusal(&model);
    assert!(
        m.contains("(NonMaxSuppression, opset 17)") && m.contains("(Unique, opset 17)"),
        "{m}"
    );
}

/// A model of one node over inputs of these dims (f32), at `opset`.
fn one_node(n: NodeProto, inputs: &[(&str, &[i64])], opset: i64) -> ModelProto {
    let output = value(&n.output[0], &[1]);
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            name: Some("one_node".into()),
            input: inputs
                .iter()
                .map(|(name, dims)| value(name, dims))
                .collect(),
            output: vec![output],
            node: vec![n],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(i),
        ..Default::default()
    }
}

#[test]
fn a_convolution_whose_groups_do_not_split_the_channels_is_refused() {
    let conv = NodeProto {
        attribute: vec![int_attr("group", 2)],
        ..node("Conv", &["x", "w"], &["y"])
    };
    let model = one_node(conv, &[("x", &[1, 3, 8, 8]), ("w", &[4, 1, 3, 3])], 17);
    let m = refusal(&model);
    assert!(
        m.contains("Conv") && m.contains("3 input channels") && m.contains("2 groups"),
        "{m}"
    );
}

#[test]
fn attention_of_3d_inputs_without_head_counts_is_refused() {
    let attention = node("Attention", &["q", "k", "v"], &["y"]);
    let dims: &[i64] = &[2, 4, 24];
    let model = one_node(attention, &[("q", dims), ("k", dims), ("v", dims)], 23);
    let m = refusal(&model);
    assert!(m.contains("Attention") && m.contains("q_num_heads"), "{m}");
    // Before opset 23 there is no Attention op.
    let attention = node("Attention", &["q", "k", "v"], &["y"]);
    let model = one_node(attention, &[("q", dims), ("k", dims), ("v", dims)], 21);
    assert!(refusal(&model).contains("opset 23"));
}

#[test]
fn a_pool_window_larger_than_its_padded_input_is_refused() {
    let pool = NodeProto {
        attribute: vec![AttributeProto {
            name: Some("kernel_shape".into()),
            r#type: Some(AttributeType::Ints as i32),
            ints: vec![5, 5],
            ..Default::default()
        }],
        ..node("MaxPool", &["x"], &["y"])
    };
    let m = refusal(&one_node(pool, &[("x", &[1, 1, 3, 3])], 17));
    assert!(m.contains("MaxPool") && m.contains("a window of 5"), "{m}");
}

#[test]
fn huge_and_negative_dims_are_refused() {
    let mut model = linear_relu();
    model.graph.as_mut().unwrap().initializer[0].dims = vec![1 << 40, 1 << 40];
    assert!(refusal(&model).contains("more than 2^34 elements"));
    let mut model = linear_relu();
    model.graph.as_mut().unwrap().initializer[0].dims = vec![-3, 2];
    assert!(refusal(&model).contains("negative dim"));
}

#[test]
fn data_that_does_not_fit_its_dims_is_refused() {
    let mut model = linear_relu();
    model.graph.as_mut().unwrap().initializer[0]
        .float_data
        .pop();
    let m = refusal(&model);
    assert!(
        m.contains("tensor `w`") && m.contains("5 values for 6 elements"),
        "{m}"
    );
}

#[test]
fn external_data_outside_the_model_folder_is_refused() {
    let mut model = linear_relu();
    let w = &mut model.graph.as_mut().unwrap().initializer[0];
    w.float_data.clear();
    w.data_location = Some(tir_onnx::proto::tensor_proto::DataLocation::External as i32);
    w.external_data = vec![tir_onnx::proto::StringStringEntryProto {
        key: Some("location".into()),
        value: Some("../../etc/passwd".into()),
    }];
    assert!(refusal(&model).contains("not a plain relative path"));
}

#[test]
fn external_data_beside_the_model_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let w: Vec<f32> = (0..6).map(|i| 0.25 * i as f32 - 0.6).collect();
    let bytes: Vec<u8> = [0u8; 8]
        .into_iter()
        .chain(w.iter().flat_map(|x| x.to_le_bytes()))
        .collect();
    std::fs::write(dir.path().join("weights.bin"), bytes).unwrap();
    let mut model = linear_relu();
    let t = &mut model.graph.as_mut().unwrap().initializer[0];
    t.float_data.clear();
    t.data_location = Some(tir_onnx::proto::tensor_proto::DataLocation::External as i32);
    let entry = |k: &str, v: &str| tir_onnx::proto::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    t.external_data = vec![
        entry("location", "weights.bin"),
        entry("offset", "8"),
        entry("length", "24"),
    ];
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let options = ImportOptions {
        max_constant_elements: 0,
        ..Default::default()
    };
    let imported = tir_onnx::import_file(&path, &options).unwrap();
    assert_eq!(imported.weights[0].1.as_slice::<f32>().unwrap(), &w[..]);
}

#[test]
fn a_declared_output_type_that_differs_is_refused() {
    let mut model = linear_relu();
    let out = &mut model.graph.as_mut().unwrap().output[0];
    if let Some(type_proto::Value::TensorType(t)) =
        out.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(DataType::Int64 as i32);
    }
    let m = refusal(&model);
    assert!(m.contains("declared i64, computed f32"), "{m}");
}

#[test]
fn a_shape_input_is_folded_when_its_value_is_given() {
    let mut model = linear_relu();
    let g = model.graph.as_mut().unwrap();
    g.input[0] = value("x", &[2, 3]);
    g.node.push(node("Reshape", &["y", "shape"], &["r"]));
    g.input.push(ValueInfoProto {
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Int64 as i32),
                shape: Some(TensorShapeProto {
                    dim: vec![tir_onnx::proto::tensor_shape_proto::Dimension {
                        value: Some(dimension::Value::DimValue(1)),
                        ..Default::default()
                    }],
                }),
            })),
            ..Default::default()
        }),
        ..value("shape", &[1])
    });
    g.output[0] = value("r", &[-1]);
    let decoded = Model::decode(&model.encode_to_vec(), None).unwrap();
    let e = match tir_onnx::import(&decoded, &ImportOptions::default()) {
        Ok(i) => panic!("imported: {}", tir_graph::text::print(&i.graph)),
        Err(e) => e,
    };
    assert!(
        e.to_string()
            .contains("input `shape` must be known at import"),
        "{e}"
    );
    let mut options = ImportOptions::default();
    let shape = HostTensor::from_vec(vec![4i64], &[1]).unwrap();
    options.known_inputs.insert("shape".into(), shape);
    let imported = tir_onnx::import(&decoded, &options).unwrap();
    let (_, out) = imported.graph.outputs()[0].clone();
    assert_eq!(imported.graph.ty(out).to_string(), "f32[4]");
}

fn int64s(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Int64 as i32),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

/// `model` with these initializers added (indices, pads, starts: known at import).
fn with_initializers(mut model: ModelProto, tensors: Vec<TensorProto>) -> ModelProto {
    model.graph.as_mut().unwrap().initializer.extend(tensors);
    model
}

fn string_attr(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(s.as_bytes().to_vec()),
        ..Default::default()
    }
}

#[test]
fn gather_nd_with_batch_dims_past_a_rank_is_refused() {
    let gather = NodeProto {
        attribute: vec![int_attr("batch_dims", 2)],
        ..node("GatherND", &["x", "i"], &["y"])
    };
    let model = one_node(gather, &[("x", &[2, 3])], 13);
    let model = with_initializers(model, vec![int64s("i", &[2, 1], &[0, 1])]);
    let m = refusal(&model);
    assert!(m.contains("GatherND") && m.contains("batch_dims 2"), "{m}");
}

#[test]
fn pad_mode_wrap_before_opset_19_is_refused() {
    let pad = NodeProto {
        attribute: vec![string_attr("mode", "wrap")],
        ..node("Pad", &["x", "p"], &["y"])
    };
    let model = one_node(pad, &[("x", &[2, 3])], 18);
    let model = with_initializers(model, vec![int64s("p", &[4], &[0, 1, 0, 1])]);
    let m = refusal(&model);
    assert!(
        m.contains("(Pad, opset 18)") && m.contains("Pad mode `wrap`"),
        "{m}"
    );
}

#[test]
fn a_negative_step_slice_from_before_its_axis_is_refused() {
    let slice = node("Slice", &["x", "s", "e", "a", "t"], &["y"]);
    let model = one_node(slice, &[("x", &[4])], 13);
    let ints = |name, v| int64s(name, &[1], &[v]);
    let model = with_initializers(
        model,
        vec![
            ints("s", -9),
            ints("e", i64::MIN),
            ints("a", 0),
            ints("t", -1),
        ],
    );
    let m = refusal(&model);
    assert!(
        m.contains("(Slice, opset 13)") && m.contains("from start -9") && m.contains("disagree"),
        "{m}"
    );
}

#[test]
fn max_pool_indices_of_a_window_wholly_in_the_padding_are_refused() {
    let pool = NodeProto {
        attribute: vec![
            AttributeProto {
                name: Some("kernel_shape".into()),
                r#type: Some(AttributeType::Ints as i32),
                ints: vec![1, 1],
                ..Default::default()
            },
            AttributeProto {
                name: Some("pads".into()),
                r#type: Some(AttributeType::Ints as i32),
                ints: vec![1, 0, 0, 0],
                ..Default::default()
            },
        ],
        ..node("MaxPool", &["x"], &["y", "z"])
    };
    let m = refusal(&one_node(pool, &[("x", &[1, 1, 3, 3])], 12));
    assert!(
        m.contains("(MaxPool, opset 12)") && m.contains("wholly in the padding"),
        "{m}"
    );
}

#[test]
fn mod_of_f64_is_one_exact_remainder() {
    let fmod = NodeProto {
        attribute: vec![int_attr("fmod", 1)],
        ..node("Mod", &["a", "b"], &["y"])
    };
    let mut model = one_node(fmod, &[("a", &[4]), ("b", &[4])], 13);
    let g = model.graph.as_mut().unwrap();
    for v in g.input.iter_mut().chain(g.output.iter_mut()) {
        if let Some(type_proto::Value::TensorType(t)) =
            v.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            t.elem_type = Some(DataType::Double as i32);
        }
    }
    let imported = import(&model).unwrap();
    assert_eq!(imported.graph.op_counts().get("rem"), Some(&1));
    let ref_backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &ref_backend.target(), &Default::default())
            .unwrap();
    let mut exe = ref_backend.compile(&compiled.program).unwrap();
    // A quotient of 2^1000 (a - trunc(a/b)·b would be far off), signs, an infinite divisor.
    let a = [1e300, -7.5, 5.0, -0.0];
    let b = [3.0, 2.0, f64::INFINITY, 0.5];
    let (ta, tb) = (
        HostTensor::from_slice(&a, &[4]).unwrap(),
        HostTensor::from_slice(&b, &[4]).unwrap(),
    );
    let out = exe
        .run(&[("a", TensorRef::Host(&ta)), ("b", TensorRef::Host(&tb))])
        .unwrap();
    let y = out["y"].as_slice::<f64>().unwrap();
    for i in 0..4 {
        assert_eq!(y[i].to_bits(), (a[i] % b[i]).to_bits(), "y[{i}] = {}", y[i]);
    }
}

#[test]
fn a_convolution_keeps_a_symbolic_batch_and_is_one_conv() {
    let conv = NodeProto {
        attribute: vec![int_attr("group", 1)],
        ..node("Conv", &["x", "w"], &["y"])
    };
    let mut model = one_node(conv, &[("x", &[-1, 3, 8, 8]), ("w", &[4, 3, 3, 3])], 17);
    model.graph.as_mut().unwrap().output = vec![value("y", &[-1, 4, 6, 6])];
    let imported = import(&model).unwrap();
    let g = &imported.graph;
    let (_, y) = g.outputs()[0].clone();
    assert_eq!(g.ty(y).to_string(), "f32[batch, 4, 6, 6]");
    assert_eq!(
        g.op_counts().get("conv"),
        Some(&1),
        "{}",
        tir_graph::text::print(g)
    );
    // A pool keeps a symbolic batch too; its spatial dims must be known.
    let pool = NodeProto {
        attribute: vec![AttributeProto {
            name: Some("kernel_shape".into()),
            r#type: Some(AttributeType::Ints as i32),
            ints: vec![2, 2],
            ..Default::default()
        }],
        ..node("MaxPool", &["x"], &["y"])
    };
    let pooled = import(&one_node(pool.clone(), &[("x", &[-1, 3, 8, 8])], 17)).unwrap();
    let (_, y) = pooled.graph.outputs()[0].clone();
    assert_eq!(pooled.graph.ty(y).to_string(), "f32[batch, 3, 7, 7]");
    let m = refusal(&one_node(pool, &[("x", &[-1, 3, -1, 8])], 17));
    assert!(m.contains("MaxPool of symbolic shape"), "{m}");
}

/// `x: f32[batch, seq, 4]` plus each position (a `Range` to the sequence's length), flattened
/// to `[batch·seq, 4]` by a shape computed as exporters compute it (`Shape`, `Gather`, `Mul`,
/// `Unsqueeze`, `Concat`).
fn flatten_with_positions() -> ModelProto {
    let dim = |v: dimension::Value| tir_onnx::proto::tensor_shape_proto::Dimension {
        value: Some(v),
        ..Default::default()
    };
    let mut x = value("x", &[-1, -1, 4]);
    if let Some(type_proto::Value::TensorType(t)) = x.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape.as_mut().unwrap().dim[1] = dim(dimension::Value::DimParam("seq".into()));
    }
    let mut cast = node("Cast", &["r"], &["rf"]);
    cast.attribute.push(int_attr("to", DataType::Float as i64));
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("flatten_with_positions".into()),
            node: vec![
                node("Shape", &["x"], &["s"]),
                node("Gather", &["s", "zero"], &["b"]),
                node("Gather", &["s", "one"], &["q"]),
                node("Mul", &["b", "q"], &["bq"]),
                node("Unsqueeze", &["bq", "axes0"], &["bq1"]),
                node("Concat", &["bq1", "four"], &["flat"]),
                node("Range", &["zero", "q", "one"], &["r"]),
                cast,
                node("Unsqueeze", &["rf", "axes02"], &["pos"]),
                node("Add", &["x", "pos"], &["z"]),
                node("Reshape", &["z", "flat"], &["y"]),
            ]
            .into_iter()
            .map(|mut n| {
                if n.op_type() == "Concat" {
                    n.attribute.push(int_attr("axis", 0));
                }
                n
            })
            .collect(),
            initializer: vec![
                int64s("zero", &[], &[0]),
                int64s("one", &[], &[1]),
                int64s("axes0", &[1], &[0]),
                int64s("axes02", &[2], &[0, 2]),
                int64s("four", &[1], &[4]),
            ],
            input: vec![x],
            output: vec![value("y", &[-1, 4])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn shape_computations_on_symbolic_dims_stay_symbolic() {
    let imported = import(&flatten_with_positions()).unwrap();
    let y = imported.graph.outputs()[0].1;
    assert_eq!(imported.graph.ty(y).to_string(), "f32[batch*seq, 4]");
    let mut exe = on_ref(&imported);
    // Two bindings of one executable.
    for (batch, seq) in [(2usize, 3usize), (1, 5)] {
        let x: Vec<f32> = (0..batch * seq * 4).map(|i| i as f32 * 0.5 - 1.0).collect();
        let input = HostTensor::from_slice(&x, &[batch as u64, seq as u64, 4]).unwrap();
        let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
        assert_eq!(out["y"].dims(), &[(batch * seq) as u64, 4]);
        let y = out["y"].as_slice::<f32>().unwrap();
        for (i, (&got, &x)) in y.iter().zip(&x).enumerate() {
            let position = (i / 4) % seq;
            assert_eq!(
                got,
                x + position as f32,
                "element {i} at batch {batch}, seq {seq}"
            );
        }
    }
}

#[test]
fn fixed_dims_make_the_graph_static_and_unknown_ones_are_named() {
    let decoded = Model::decode(&flatten_with_positions().encode_to_vec(), None).unwrap();
    let options = |pairs: &[(&str, u64)]| ImportOptions {
        fixed_dims: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        ..Default::default()
    };
    let imported = tir_onnx::import(&decoded, &options(&[("seq", 5)])).unwrap();
    let y = imported.graph.outputs()[0].1;
    assert_eq!(imported.graph.ty(y).to_string(), "f32[5*batch, 4]");
    let both = tir_onnx::import(&decoded, &options(&[("seq", 5), ("batch", 2)])).unwrap();
    assert_eq!(
        both.graph.ty(both.graph.outputs()[0].1).to_string(),
        "f32[10, 4]"
    );
    let err = tir_onnx::import(&decoded, &options(&[("sequence", 5)]))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        err,
        "the model has no symbolic dim `sequence` to fix (its symbolic dims: batch, seq)"
    );
}

/// An imported model compiled for the reference backend.
fn on_ref(imported: &tir_onnx::Imported) -> Box<dyn tir_lower::Executable> {
    let backend = backend_ref::RefBackend::default();
    let compiled =
        tir_lower::compile_graph(&imported.graph, &backend.target(), &Default::default()).unwrap();
    backend.compile(&compiled.program).unwrap()
}

/// Prefix sums along the symbolic batch (every `exclusive`/`reverse` pair) and the batch's
/// size read at run time (`Shape`, `Gather`, `Cast`, `Mul`), checked at several bindings.
fn scans_and_sizes_over_a_symbolic_dim() -> ModelProto {
    let mut nodes = Vec::new();
    let mut outputs = Vec::new();
    for (exclusive, reverse) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let name = format!("cumsum_{exclusive}{reverse}");
        let mut n = node("CumSum", &["x", "zero"], &[&name]);
        n.attribute.push(int_attr("exclusive", exclusive));
        n.attribute.push(int_attr("reverse", reverse));
        nodes.push(n);
        outputs.push(value(&name, &[-1, 3]));
    }
    let mut cast = node("Cast", &["b"], &["bf"]);
    cast.attribute.push(int_attr("to", DataType::Float as i64));
    nodes.extend([
        node("Shape", &["x"], &["s"]),
        node("Gather", &["s", "zero"], &["b"]),
        cast,
        node("Mul", &["x", "bf"], &["scaled"]),
    ]);
    outputs.push(value("scaled", &[-1, 3]));
    let graph = GraphProto {
        name: Some("scans_and_sizes".into()),
        node: nodes,
        initializer: vec![int64s("zero", &[], &[0])],
        input: vec![value("x", &[-1, 3])],
        output: outputs,
        ..Default::default()
    };
    opset17(graph)
}

#[test]
fn scans_and_sizes_over_a_symbolic_dim_run_at_every_binding() {
    let mut exe = on_ref(&import(&scans_and_sizes_over_a_symbolic_dim()).unwrap());
    for batch in [1usize, 2, 5] {
        let x: Vec<f32> = (0..batch * 3)
            .map(|i| ((i * 7 + 3) % 11) as f32 * 0.25 - 1.0)
            .collect();
        let input = HostTensor::from_slice(&x, &[batch as u64, 3]).unwrap();
        let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
        for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
            let name = format!("cumsum_{}{}", exclusive as u8, reverse as u8);
            let got = out[&name].as_slice::<f32>().unwrap();
            for r in 0..batch {
                for c in 0..3 {
                    let want: f64 = (0..batch)
                        .filter(|&i| match (exclusive, reverse) {
                            (false, false) => i <= r,
                            (true, false) => i < r,
                            (false, true) => i >= r,
                            (true, true) => i > r,
                        })
                        .map(|i| f64::from(x[i * 3 + c]))
                        .sum();
                    let g = f64::from(got[r * 3 + c]);
                    assert!(
                        (g - want).abs() <= 1e-6,
                        "{name}[{r}, {c}] at batch {batch}: {g} against {want}"
                    );
                }
            }
        }
        let scaled = out["scaled"].as_slice::<f32>().unwrap();
        for (i, (&got, &x)) in scaled.iter().zip(&x).enumerate() {
            assert_eq!(got, x * batch as f32, "scaled[{i}] at batch {batch}");
        }
    }
}

/// Slices of the symbolic batch that a range cannot express: the last row, the last two rows,
/// every row backwards and every other row backwards from the second to last.
fn slices_from_the_end_of_a_symbolic_dim() -> ModelProto {
    let cases: [(&str, i64, i64, i64); 4] = [
        ("last", -1, i64::MAX, 1),
        ("last_two", -2, i64::MAX, 1),
        ("reversed", -1, i64::MIN, -1),
        ("every_other_back", -2, i64::MIN, -2),
    ];
    let mut nodes = Vec::new();
    let mut initializer = vec![int64s("axis0", &[1], &[0])];
    let mut output = Vec::new();
    for (name, start, end, step) in cases {
        let bounds = [("start", start), ("end", end), ("step", step)];
        for (what, v) in bounds {
            initializer.push(int64s(&format!("{name}_{what}"), &[1], &[v]));
        }
        let inputs = [
            "x".to_string(),
            format!("{name}_start"),
            format!("{name}_end"),
            "axis0".to_string(),
            format!("{name}_step"),
        ];
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        nodes.push(node("Slice", &inputs, &[name]));
        let mut y = value(name, &[-1, 3]);
        if let Some(type_proto::Value::TensorType(t)) =
            y.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            t.shape = None;
        }
        output.push(y);
    }
    opset17(GraphProto {
        name: Some("slices_from_the_end".into()),
        node: nodes,
        initializer,
        input: vec![value("x", &[-1, 3])],
        output,
        ..Default::default()
    })
}

#[test]
fn slices_from_the_end_of_a_symbolic_dim_run_at_every_binding() {
    let mut exe = on_ref(&import(&slices_from_the_end_of_a_symbolic_dim()).unwrap());
    for batch in [1usize, 2, 5] {
        let x: Vec<f32> = (0..batch * 3).map(|i| i as f32 * 0.5 - 2.0).collect();
        let input = HostTensor::from_slice(&x, &[batch as u64, 3]).unwrap();
        let out = exe.run(&[("x", TensorRef::Host(&input))]).unwrap();
        let n = batch as i64;
        let rows = |v: Vec<i64>| -> Vec<f32> {
            v.into_iter()
                .flat_map(|r| x[r as usize * 3..r as usize * 3 + 3].to_vec())
                .collect()
        };
        let want = [
            ("last", rows(vec![n - 1])),
            ("last_two", rows(((n - 2).max(0)..n).collect())),
            ("reversed", rows((0..n).rev().collect())),
            (
                "every_other_back",
                rows((0..=(n - 2)).rev().step_by(2).collect()),
            ),
        ];
        for (name, want) in want {
            let got = out[name].as_slice::<f32>().unwrap();
            assert_eq!(got, want.as_slice(), "{name} at batch {batch}");
            assert_eq!(out[name].dims()[1], 3, "{name} at batch {batch}");
        }
    }
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

#[test]
fn conv_transpose_where_the_spec_and_the_reference_disagree_is_refused() {
    let inputs: &[(&str, &[i64])] = &[("x", &[1, 1, 3, 3]), ("w", &[1, 2, 3, 3])];
    // With explicit pads the spec ignores them for output_shape; the reference keeps them.
    let both = NodeProto {
        attribute: vec![
            ints_attr("pads", &[1, 1, 1, 1]),
            ints_attr("output_shape", &[5, 5]),
        ],
        ..node("ConvTranspose", &["x", "w"], &["y"])
    };
    let m = refusal(&one_node(both, inputs, 22));
    assert!(m.contains("both pads and output_shape"), "{m}");
    // A smaller output_shape under NOTSET: the two crop different ends.
    let crop = NodeProto {
        attribute: vec![ints_attr("output_shape", &[4, 4])],
        ..node("ConvTranspose", &["x", "w"], &["y"])
    };
    let m = refusal(&one_node(crop, inputs, 22));
    assert!(m.contains("output_shape 4 below the full 5"), "{m}");
}

#[test]
fn a_scatter_above_its_compare_bound_is_refused() {
    let scatter = NodeProto {
        attribute: vec![int_attr("axis", 1)],
        ..node("ScatterElements", &["x", "i", "u"], &["y"])
    };
    let model = one_node(scatter, &[("x", &[64, 65536]), ("u", &[1, 300])], 18);
    let model = with_initializers(model, vec![int64s("i", &[1, 300], &[0; 300])]);
    let m = refusal(&model);
    assert!(
        m.contains("ScatterElements") && m.contains("compares, above"),
        "{m}"
    );
}

#[test]
fn recurrent_attributes_tir_does_not_implement_are_refused() {
    let inputs: &[(&str, &[i64])] = &[("x", &[2, 1, 3]), ("w", &[1, 16, 3]), ("r", &[1, 16, 4])];
    let lstm = NodeProto {
        attribute: vec![int_attr("hidden_size", 4), int_attr("input_forget", 1)],
        ..node("LSTM", &["x", "w", "r"], &["y"])
    };
    let m = refusal(&one_node(lstm, inputs, 22));
    assert!(m.contains("input_forget"), "{m}");
    let alpha = AttributeProto {
        name: Some("activation_alpha".into()),
        r#type: Some(AttributeType::Floats as i32),
        floats: vec![0.5],
        ..Default::default()
    };
    let lstm = NodeProto {
        attribute: vec![int_attr("hidden_size", 4), alpha],
        ..node("LSTM", &["x", "w", "r"], &["y"])
    };
    let m = refusal(&one_node(lstm, inputs, 22));
    assert!(m.contains("activation_alpha"), "{m}");
}

/// The outputs of `model` run on the reference backend with these f32 inputs.
fn run_f32(model: &ModelProto, inputs: &[(&str, &[u64], &[f32])], output: &str) -> Vec<f32> {
    let imported = import(model).unwrap();
    let mut exe = on_ref(&imported);
    let tensors: Vec<HostTensor> = inputs
        .iter()
        .map(|(_, dims, x)| HostTensor::from_slice(x, dims).unwrap())
        .collect();
    let feeds: Vec<(&str, TensorRef)> = inputs
        .iter()
        .zip(&tensors)
        .map(|((name, ..), t)| (*name, TensorRef::Host(t)))
        .collect();
    let out = exe.run(&feeds).unwrap();
    out[output].as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn causal_conv_of_kernel_one_has_an_empty_state() {
    let conv = node("CausalConvWithState", &["x", "w"], &["y", "state"]);
    let inputs: &[(&str, &[i64])] = &[("x", &[1, 2, 3]), ("w", &[2, 1, 1])];
    let mut model = one_node(conv, inputs, 27);
    let graph = model.graph.as_mut().unwrap();
    graph.output.push(value("state", &[1, 2, 0]));
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let feeds: &[(&str, &[u64], &[f32])] =
        &[("x", &[1, 2, 3], &x), ("w", &[2, 1, 1], &[2.0, -1.0])];
    // The output is the input scaled per channel; the state of a kernel of 1 holds no step.
    assert_eq!(
        run_f32(&model, feeds, "y"),
        [2.0, 4.0, 6.0, -4.0, -5.0, -6.0]
    );
    assert!(run_f32(&model, feeds, "state").is_empty());
}

#[test]
fn linear_attention_past_the_unroll_cap_or_with_a_foreign_gate_is_refused() {
    let heads = [int_attr("q_num_heads", 1), int_attr("kv_num_heads", 1)];
    let attention = NodeProto {
        attribute: [&heads[..], &[string_attr("update_rule", "linear")]].concat(),
        ..node("LinearAttention", &["q", "k", "v"], &["y"])
    };
    let dims: &[i64] = &[1, 300, 4];
    let m = refusal(&one_node(
        attention,
        &[("q", dims), ("k", dims), ("v", dims)],
        27,
    ));
    assert!(m.contains("over 300 steps (unrolled up to 256)"), "{m}");
    // The linear rule takes no decay.
    let attention = NodeProto {
        attribute: [&heads[..], &[string_attr("update_rule", "linear")]].concat(),
        ..node("LinearAttention", &["q", "k", "v", "", "g"], &["y"])
    };
    let dims: &[i64] = &[1, 2, 4];
    let inputs: &[(&str, &[i64])] = &[("q", dims), ("k", dims), ("v", dims), ("g", dims)];
    let m = refusal(&one_node(attention, inputs, 27));
    assert!(m.contains("update_rule `linear` takes decay: false"), "{m}");
}

/// `z = FlexAttention(q + c, k, v) + c` (`c = 10`) whose `prob_mod` multiplies by its own `c`
/// (0.5) and names its input `q`: the subgraph's names shadow the outer ones only inside it.
fn flex_with_shadowing_prob_mod() -> ModelProto {
    let dims = [1, 1, 2, 2];
    let prob_mod = GraphProto {
        name: Some("prob_mod".into()),
        node: vec![node("Mul", &["q", "c"], &["probs_out"])],
        initializer: vec![floats("c", &[], &[0.5])],
        input: vec![value("q", &dims)],
        output: vec![value("probs_out", &dims)],
        ..Default::default()
    };
    let flex = NodeProto {
        domain: Some("ai.onnx.preview".into()),
        attribute: vec![AttributeProto {
            name: Some("prob_mod".into()),
            r#type: Some(AttributeType::Graph as i32),
            g: Some(prob_mod),
            ..Default::default()
        }],
        ..node("FlexAttention", &["q2", "k", "v"], &["y"])
    };
    let graph = GraphProto {
        name: Some("flex".into()),
        node: vec![
            node("Add", &["q", "c"], &["q2"]),
            flex,
            node("Add", &["y", "c"], &["z"]),
        ],
        initializer: vec![floats("c", &[], &[10.0])],
        input: ["q", "k", "v"].iter().map(|n| value(n, &dims)).collect(),
        output: vec![value("z", &dims)],
        ..Default::default()
    };
    let mut model = opset17(graph);
    model.opset_import = [("", 26), ("ai.onnx.preview", 1)]
        .iter()
        .map(|&(d, v)| OperatorSetIdProto {
            domain: Some(d.into()),
            version: Some(v),
        })
        .collect();
    model
}

#[test]
fn flex_attention_modifiers_are_inlined_in_a_scope_of_their_own() {
    // Equal key rows: every probability is 1/2, so `y` is half the mean of V's rows.
    let d = &[1, 1, 2, 2][..];
    let inputs = [
        ("q", d, &[0.3, -1.0, 2.0, 0.5][..]),
        ("k", d, &[1.0, 2.0, 1.0, 2.0][..]),
        ("v", d, &[1.0, 2.0, 3.0, 4.0][..]),
    ];
    let z = run_f32(&flex_with_shadowing_prob_mod(), &inputs, "z");
    for (got, want) in z.iter().zip([11.0, 11.5, 11.0, 11.5]) {
        assert!((got - want).abs() < 1e-5, "{z:?}");
    }
}

#[test]
fn flex_attention_is_an_op_of_the_preview_domain_only() {
    let mut model = flex_with_shadowing_prob_mod();
    let g = model.graph.as_mut().unwrap();
    g.node[1].domain = None;
    let m = refusal(&model);
    assert!(m.contains("FlexAttention"), "{m}");
}
