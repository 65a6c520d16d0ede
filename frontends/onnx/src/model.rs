//! Reading an ONNX file: the `ModelProto` decoded with prost, its default-domain opset, and its
//! tensors (`TensorProto`, inline or in external data files) as typed [`HostTensor`]s.
//!
//! Guarantees: a decoded [`Model`] has exactly one default-domain opset; every tensor read has a
//! dtype tir has, dims whose element count fits in memory, and exactly as many elements as its
//! dims say; external data is read only from files beside the model (no absolute paths, no `..`).

use crate::proto::{self, tensor_proto::DataType, ModelProto, TensorProto};
use crate::OnnxError;
use prost::Message;
use std::path::{Component, Path, PathBuf};
use tir_graph::{DType, HostTensor};

/// A decoded ONNX model.
pub struct Model {
    /// The decoded protobuf, external data not yet read.
    pub proto: ModelProto,
    /// The version of the default (`ai.onnx`) operator set the model imports.
    pub opset: i64,
    /// Where external data files are looked up (the model file's folder).
    pub dir: Option<PathBuf>,
}

impl Model {
    /// Reads and decodes `path`.
    pub fn read(path: &Path) -> Result<Model, OnnxError> {
        let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Model::decode(&bytes, path.parent().map(Path::to_path_buf)).map_err(|e| match e {
            OnnxError::Decode { reason, .. } => OnnxError::Decode {
                path: path.display().to_string(),
                reason,
            },
            e => e,
        })
    }

    /// Decodes a model from `bytes`; external data is read relative to `dir`.
    pub fn decode(bytes: &[u8], dir: Option<PathBuf>) -> Result<Model, OnnxError> {
        let decode_error = |reason: String| OnnxError::Decode {
            path: "the input".into(),
            reason,
        };
        let proto = ModelProto::decode(bytes).map_err(|e| decode_error(e.to_string()))?;
        let Some(graph) = &proto.graph else {
            return Err(decode_error("it has no graph".into()));
        };
        if graph.node.is_empty() && graph.output.is_empty() {
            return Err(decode_error("its graph has no nodes and no outputs".into()));
        }
        let default: Vec<i64> = proto
            .opset_import
            .iter()
            .filter(|o| matches!(o.domain(), "" | "ai.onnx"))
            .map(|o| o.version())
            .collect();
        let opset = match default.as_slice() {
            [v] if *v >= 1 => *v,
            // Only other domains' ops (`ai.onnx.ml`, ...): each node is refused as unsupported.
            [] if graph
                .node
                .iter()
                .all(|n| !matches!(n.domain(), "" | "ai.onnx")) =>
            {
                0
            }
            [] => {
                return Err(OnnxError::Malformed(
                    "no default-domain opset import".into(),
                ))
            }
            _ => {
                return Err(OnnxError::Malformed(format!(
                    "the default-domain opset is imported as {default:?}"
                )))
            }
        };
        Ok(Model { proto, opset, dir })
    }

    /// The model's main graph (decoding refuses a model without one).
    pub fn graph(&self) -> &proto::GraphProto {
        self.proto.graph.as_ref().expect("checked in decode")
    }
}

/// The tir dtype of an ONNX element type, or why there is none.
pub fn dtype_of(data_type: i32) -> Result<DType, String> {
    let t = DataType::try_from(data_type)
        .map_err(|_| format!("element type {data_type} is not an ONNX type"))?;
    Ok(match t {
        DataType::Float => DType::F32,
        DataType::Double => DType::F64,
        DataType::Float16 => DType::F16,
        DataType::Bfloat16 => DType::BF16,
        DataType::Int8 => DType::I8,
        DataType::Uint8 => DType::U8,
        DataType::Int32 => DType::I32,
        DataType::Int64 => DType::I64,
        DataType::Int16 => DType::I16,
        DataType::Uint16 => DType::U16,
        DataType::Uint32 => DType::U32,
        DataType::Uint64 => DType::U64,
        DataType::Bool => DType::Bool,
        DataType::Float8e4m3fn => DType::F8E4M3,
        DataType::Float8e5m2 => DType::F8E5M2,
        // FNUZ: no -0, NaN at 0x80, biases 8 and 16; tir has no such dtype.
        other => return Err(format!("dtype {} has no tir dtype", other.as_str_name())),
    })
}

/// The ONNX element type of a tir dtype.
pub fn onnx_type_of(dtype: DType) -> DataType {
    match dtype {
        DType::Bool => DataType::Bool,
        DType::I8 => DataType::Int8,
        DType::U8 => DataType::Uint8,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::I16 => DataType::Int16,
        DType::U16 => DataType::Uint16,
        DType::U32 => DataType::Uint32,
        DType::U64 => DataType::Uint64,
        DType::F16 => DataType::Float16,
        DType::BF16 => DataType::Bfloat16,
        DType::F32 => DataType::Float,
        DType::F64 => DataType::Double,
        DType::F8E4M3 => DataType::Float8e4m3fn,
        DType::F8E5M2 => DataType::Float8e5m2,
    }
}

/// The most elements one tensor may hold (2^34, 16 GiB of bytes): larger dims are refused
/// before anything is allocated.
const MAX_ELEMENTS: u64 = 1 << 34;

/// `dims` as unsigned sizes; fails, with a message naming them, if one is negative or if they
/// hold more than 2^34 elements (`MAX_ELEMENTS`).
pub fn tensor_dims(dims: &[i64]) -> Result<Vec<u64>, String> {
    let mut count: u64 = 1;
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = u64::try_from(d).map_err(|_| format!("negative dim {d} in {dims:?}"))?;
        count = count.saturating_mul(d);
        out.push(d);
    }
    if count > MAX_ELEMENTS {
        return Err(format!("dims {dims:?} hold more than 2^34 elements"));
    }
    Ok(out)
}

/// Reads `t` as a typed tensor; `dir` is where external data files live.
pub fn read_tensor(t: &TensorProto, dir: Option<&Path>) -> Result<HostTensor<'static>, String> {
    let name = t.name();
    let fail = |reason: String| format!("tensor `{name}`: {reason}");
    let dtype = dtype_of(t.data_type()).map_err(fail)?;
    let dims = tensor_dims(&t.dims).map_err(fail)?;
    if t.segment.is_some() {
        return Err(fail("segmented tensors are not supported".into()));
    }
    let numel = dims.iter().product::<u64>() as usize;
    let bytes = if t.data_location() == proto::tensor_proto::DataLocation::External {
        read_external(t, dir).map_err(fail)?
    } else if let Some(raw) = &t.raw_data {
        raw.clone()
    } else {
        typed_field_bytes(t, dtype, numel).map_err(fail)?
    };
    let expected = numel * dtype.size_bytes();
    if bytes.len() != expected {
        return Err(fail(format!(
            "{} bytes of data for {} elements of {dtype}",
            bytes.len(),
            numel
        )));
    }
    HostTensor::from_bytes(dtype, &dims, &bytes)
        .map(HostTensor::into_owned)
        .map_err(|e| fail(e.to_string()))
}

/// The little-endian bytes of the typed field that holds `dtype`'s values.
fn typed_field_bytes(t: &TensorProto, dtype: DType, numel: usize) -> Result<Vec<u8>, String> {
    let count = match dtype {
        DType::F32 => t.float_data.len(),
        DType::F64 => t.double_data.len(),
        DType::I64 => t.int64_data.len(),
        DType::U32 | DType::U64 => t.uint64_data.len(),
        _ => t.int32_data.len(),
    };
    if count != numel {
        return Err(format!("{count} values for {numel} elements"));
    }
    let mut out = Vec::with_capacity(numel * dtype.size_bytes());
    match dtype {
        DType::F32 => t
            .float_data
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::F64 => t
            .double_data
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::I64 => t
            .int64_data
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        // The narrow types are stored one per int32: ints by value, f16/bf16 by their bits.
        DType::I32 => t
            .int32_data
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::F16 | DType::BF16 => {
            for &x in &t.int32_data {
                let bits = u16::try_from(x).map_err(|_| format!("{x} is not 16-bit float bits"))?;
                out.extend(bits.to_le_bytes());
            }
        }
        // u32 and u64 are stored one per uint64.
        DType::U64 => t
            .uint64_data
            .iter()
            .for_each(|x| out.extend(x.to_le_bytes())),
        DType::U32 => {
            for &x in &t.uint64_data {
                let v = u32::try_from(x).map_err(|_| format!("{x} is not a u32 value"))?;
                out.extend(v.to_le_bytes());
            }
        }
        DType::I16 | DType::U16 => {
            for &x in &t.int32_data {
                let bits = match dtype {
                    DType::I16 => i16::try_from(x).map(|v| v.to_le_bytes()),
                    _ => u16::try_from(x).map(|v| v.to_le_bytes()),
                };
                out.extend(bits.map_err(|_| format!("{x} is not a {dtype} value"))?);
            }
        }
        // One per int32, by their bits.
        DType::F8E4M3 | DType::F8E5M2 => {
            for &x in &t.int32_data {
                let bits = u8::try_from(x).map_err(|_| format!("{x} is not {dtype} bits"))?;
                out.push(bits);
            }
        }
        DType::I8 | DType::U8 | DType::Bool => {
            for &x in &t.int32_data {
                let fits = match dtype {
                    DType::I8 => i8::try_from(x).is_ok(),
                    DType::U8 => u8::try_from(x).is_ok(),
                    _ => x == 0 || x == 1,
                };
                if !fits {
                    return Err(format!("{x} is not a {dtype} value"));
                }
                out.push(x as u8);
            }
        }
    }
    Ok(out)
}

/// The bytes of an external-data tensor: `location` (a relative path inside `dir`), `offset`
/// and `length`.
fn read_external(t: &TensorProto, dir: Option<&Path>) -> Result<Vec<u8>, String> {
    let entry = |key: &str| {
        t.external_data
            .iter()
            .find(|e| e.key() == key)
            .map(|e| e.value().to_string())
    };
    let location = entry("location").ok_or("external data without a location")?;
    let relative = Path::new(&location);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(format!(
            "external data location `{location}` is not a plain relative path"
        ));
    }
    let number = |key: &str| -> Result<Option<u64>, String> {
        entry(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("external data {key} `{v}` is not a number"))
            })
            .transpose()
    };
    let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
    let path = dir.unwrap_or(Path::new(".")).join(relative);
    let data = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let start = usize::try_from(offset).ok().filter(|&s| s <= data.len());
    let start = start.ok_or_else(|| format!("offset {offset} past the end of {location}"))?;
    let end = match length {
        Some(n) => usize::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .filter(|&e| e <= data.len())
            .ok_or_else(|| format!("{n} bytes at {offset} run past the end of {location}"))?,
        None => data.len(),
    };
    Ok(data[start..end].to_vec())
}

/// `t` as a `TensorProto` named `name` (raw little-endian data), for writing test data and
/// outputs in ONNX's own form.
pub fn write_tensor(name: &str, t: &HostTensor<'_>) -> TensorProto {
    TensorProto {
        dims: t.dims().iter().map(|&d| d as i64).collect(),
        data_type: Some(onnx_type_of(t.dtype()) as i32),
        name: Some(name.to_string()),
        raw_data: Some(t.bytes().to_vec()),
        ..Default::default()
    }
}

/// Decodes a serialized `TensorProto` (an `input_K.pb` of ONNX's test data) into a tensor.
pub fn decode_tensor(bytes: &[u8]) -> Result<(String, HostTensor<'static>), String> {
    let t = TensorProto::decode(bytes).map_err(|e| format!("not a TensorProto: {e}"))?;
    let tensor = read_tensor(&t, None)?;
    Ok((t.name().to_string(), tensor))
}

/// A node's name, or its first output's when it has none (names are optional in ONNX).
pub(crate) fn node_name(n: &proto::NodeProto) -> String {
    match (n.name(), n.output.first()) {
        ("", Some(out)) => out.clone(),
        (name, _) => name.to_string(),
    }
}
