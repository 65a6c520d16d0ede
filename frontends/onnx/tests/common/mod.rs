//! What the op-edge test files share: typed value infos, int attributes, importing a model as
//! a file would be, and its refusal.

use prost::Message;
use tir_onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension,
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
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

/// The parts of a model of one node `op(inputs) -> y` at `opset` of the default domain.
pub struct OneNode<'a> {
    pub op: &'a str,
    pub inputs: Vec<String>,
    pub attrs: Vec<AttributeProto>,
    pub graph_inputs: Vec<ValueInfoProto>,
    pub initializers: Vec<TensorProto>,
    pub y: ValueInfoProto,
    pub opset: i64,
}

impl OneNode<'_> {
    pub fn model(self) -> ModelProto {
        let n = NodeProto {
            op_type: Some(self.op.into()),
            name: Some(self.op.into()),
            input: self.inputs,
            output: vec!["y".into()],
            attribute: self.attrs,
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(self.opset),
            }],
            graph: Some(GraphProto {
                name: Some(self.op.into()),
                input: self.graph_inputs,
                output: vec![self.y],
                initializer: self.initializers,
                node: vec![n],
                ..Default::default()
            }),
            ..Default::default()
        }
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
