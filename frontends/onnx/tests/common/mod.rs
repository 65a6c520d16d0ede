//! What the op-edge test files share: typed value infos, int attributes, importing a model as
//! a file would be, and its refusal.

use prost::Message;
use tir_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension,
    type_proto, AttributeProto, ModelProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use tir_onnx::{ImportOptions, Model};

/// A tensor value info of `dtype` and static `dims`.
pub fn value(name: &str, dtype: DataType, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tir_onnx::proto::tensor_shape_proto::Dimension {
            value: Some(dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(dtype as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[allow(dead_code)] // Not every test file sets an int attribute.
pub fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(i),
        ..Default::default()
    }
}

/// `model` imported from its bytes, as a file is.
pub fn import(model: &ModelProto) -> Result<tir_onnx::Imported, tir_onnx::OnnxError> {
    let decoded = Model::decode(&model.encode_to_vec(), None)?;
    tir_onnx::import(&decoded, &ImportOptions::default())
}

/// Why `model` is refused (panics if it imports).
#[allow(dead_code)] // Not every test file checks a refusal.
pub fn refusal(model: &ModelProto) -> String {
    match import(model) {
        Ok(_) => panic!("the model was imported"),
        Err(e) => e.to_string(),
    }
}
