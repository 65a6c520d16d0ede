//! `.npy` files for `tirc run`: reading input tensors and writing outputs, with `npyz`.
//!
//! Element types: `bool` (`|b1`), `i8` (`|i1`), `u8` (`|u1`), `i32` (`<i4`), `i64` (`<i8`), `f16`
//! (`<f2`), `f32` (`<f4`), `f64` (`<f8`); big-endian files are read too, and Fortran-order
//! arrays are reordered to row-major. NumPy has no `bf16`, so a `bf16` tensor is written as `f32`
//! (exact: every `bf16` is an `f32`) and read from an `f32` file whose values are all exact `bf16`
//! values ([`NpyTensor::into_dtype`]). Other element types (`u16`, `u32`, `u64`, `i16`,
//! complex, strings, structured, pickled objects) are refused with a message naming them.
//!
//! Values are held as `f64`, like [`HostTensor`]; an `i64` beyond 2^53 in magnitude cannot be
//! held exactly and is refused.

use npyz::WriterBuilder;
use tir_graph::eval::HostTensor;
use tir_graph::DType;

/// Why a `.npy` file could not be read or a tensor not written. Messages do not name the file;
/// the caller does.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("not a valid .npy file: {0}")]
    Header(String),
    #[error("the .npy element type `{descr}` is not supported (bool, i8, u8, i32, i64, f16, f32, f64; bf16 tensors are stored as f32)")]
    UnsupportedDType { descr: String },
    #[error("the .npy file is truncated: the header promises {expected} data bytes, the file has {found}")]
    Truncated { expected: u64, found: u64 },
    #[error("the .npy file has {0} bytes after its data")]
    TrailingBytes(u64),
    #[error("reading the .npy data: {0}")]
    Data(String),
    #[error("element {index} ({value}) of the .npy file cannot be held exactly (integers up to 2^53 in magnitude)")]
    Inexact { index: usize, value: i64 },
    #[error("writing the .npy data: {0}")]
    Write(String),
}

/// A tensor read from a `.npy` file: its element type as the file states it, its dims and its
/// row-major values.
#[derive(Clone, Debug, PartialEq)]
pub struct NpyTensor {
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub data: Vec<f64>,
}

impl NpyTensor {
    /// The tensor as `dtype`: the file's own dtype, or `bf16` from an `f32` file whose values are
    /// all exact `bf16` values. `None` when the file's values are not of that dtype.
    pub fn into_dtype(self, dtype: DType) -> Option<HostTensor> {
        let compatible = self.dtype == dtype
            || (dtype == DType::BF16
                && self.dtype == DType::F32
                && self
                    .data
                    .iter()
                    .all(|&v| v.is_nan() || DType::BF16.round_value(v).to_bits() == v.to_bits()));
        if !compatible {
            return None;
        }
        HostTensor::new(dtype, self.dims, self.data).ok()
    }
}

/// The dtype of a `.npy` element type, as far as tir has it.
fn dtype_of(ty: &npyz::TypeStr) -> Option<DType> {
    use npyz::TypeChar;
    Some(match (ty.type_char(), ty.size_field()) {
        (TypeChar::Bool, 1) => DType::Bool,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 8) => DType::F64,
        _ => return None,
    })
}

fn values<T: npyz::Deserialize>(
    file: npyz::NpyFile<&[u8]>,
    to_f64: impl Fn(T) -> f64,
) -> Result<Vec<f64>, NpyError> {
    let reader = file
        .data::<T>()
        .map_err(|e| NpyError::Data(e.to_string()))?;
    reader
        .map(|v| v.map(&to_f64))
        .collect::<Result<Vec<f64>, _>>()
        .map_err(|e| NpyError::Data(e.to_string()))
}

/// `i64` values, refusing those an `f64` cannot hold exactly.
fn values_i64(file: npyz::NpyFile<&[u8]>) -> Result<Vec<f64>, NpyError> {
    let ints = file
        .data::<i64>()
        .map_err(|e| NpyError::Data(e.to_string()))?
        .collect::<Result<Vec<i64>, _>>()
        .map_err(|e| NpyError::Data(e.to_string()))?;
    ints.into_iter()
        .enumerate()
        .map(|(index, value)| {
            if value.unsigned_abs() > 1 << 53 {
                Err(NpyError::Inexact { index, value })
            } else {
                Ok(value as f64)
            }
        })
        .collect()
}

/// Reads a `.npy` file's bytes.
pub fn decode(bytes: &[u8]) -> Result<NpyTensor, NpyError> {
    let mut rest: &[u8] = bytes;
    let header =
        npyz::NpyHeader::from_reader(&mut rest).map_err(|e| NpyError::Header(e.to_string()))?;
    let npyz::DType::Plain(ty) = header.dtype() else {
        return Err(NpyError::UnsupportedDType {
            descr: header.dtype().descr(),
        });
    };
    let dtype = dtype_of(&ty).ok_or_else(|| NpyError::UnsupportedDType {
        descr: ty.to_string(),
    })?;
    let dims = header.shape().to_vec();
    // Checked before reading, so a corrupt header cannot make us allocate what the file lacks.
    let found = rest.len() as u64;
    let expected = match header.len().checked_mul(dtype.size_bytes() as u64) {
        Some(e) if e <= found => e,
        Some(e) => return Err(NpyError::Truncated { expected: e, found }),
        None => {
            return Err(NpyError::Header(format!(
                "the shape {dims:?} has too many elements"
            )))
        }
    };
    if found > expected {
        return Err(NpyError::TrailingBytes(found - expected));
    }
    let order = header.order();
    let file = npyz::NpyFile::with_header(header, rest);
    let flat = match dtype {
        DType::Bool => values(file, |v: bool| f64::from(u8::from(v)))?,
        DType::I8 => values(file, |v: i8| f64::from(v))?,
        DType::U8 => values(file, |v: u8| f64::from(v))?,
        DType::I32 => values(file, |v: i32| f64::from(v))?,
        DType::I64 => values_i64(file)?,
        DType::F16 => values(file, |v: half::f16| f64::from(v))?,
        DType::F32 => values(file, |v: f32| f64::from(v))?,
        DType::F64 => values(file, |v: f64| v)?,
        DType::BF16 => unreachable!("no .npy element type maps to bf16"),
    };
    let data = match order {
        npyz::Order::C => flat,
        npyz::Order::Fortran => fortran_to_c(&flat, &dims),
    };
    Ok(NpyTensor { dtype, dims, data })
}

/// Row-major values from column-major ones.
fn fortran_to_c(flat: &[f64], dims: &[u64]) -> Vec<f64> {
    let mut strides = vec![1usize; dims.len()];
    for i in 1..dims.len() {
        strides[i] = strides[i - 1] * dims[i - 1] as usize;
    }
    let mut index = vec![0u64; dims.len()];
    let mut out = Vec::with_capacity(flat.len());
    for _ in 0..flat.len() {
        let at: usize = index
            .iter()
            .zip(&strides)
            .map(|(&i, &s)| i as usize * s)
            .sum();
        out.push(flat[at]);
        for axis in (0..dims.len()).rev() {
            index[axis] += 1;
            if index[axis] < dims[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    out
}

fn write_values<T: npyz::Serialize + npyz::AutoSerialize>(
    dims: &[u64],
    items: impl Iterator<Item = T>,
) -> Result<Vec<u8>, NpyError> {
    let mut bytes = Vec::new();
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(dims)
        .writer(&mut bytes)
        .begin_nd()
        .map_err(|e| NpyError::Write(e.to_string()))?;
    writer
        .extend(items)
        .map_err(|e| NpyError::Write(e.to_string()))?;
    writer
        .finish()
        .map_err(|e| NpyError::Write(e.to_string()))?;
    Ok(bytes)
}

/// The `.npy` bytes of `t` (little-endian, row-major; `bf16` as `f32`). Values are exact in the
/// tensor's dtype where they come from a backend or [`HostTensor::new`]; others are rounded.
pub fn encode(t: &HostTensor) -> Result<Vec<u8>, NpyError> {
    let data = t.data.iter().copied();
    let dims = &t.dims;
    match t.dtype {
        DType::Bool => write_values(dims, data.map(|v| v != 0.0)),
        DType::I8 => write_values(dims, data.map(|v| v as i8)),
        DType::U8 => write_values(dims, data.map(|v| v as u8)),
        DType::I32 => write_values(dims, data.map(|v| v as i32)),
        DType::I64 => write_values(dims, data.map(|v| v as i64)),
        DType::F16 => write_values(dims, data.map(half::f16::from_f64)),
        DType::BF16 | DType::F32 => write_values(dims, data.map(|v| v as f32)),
        DType::F64 => write_values(dims, data),
    }
}
