//! `.npy` files for `tirc run`: reading input tensors and writing outputs, with `npyz`, in the
//! tensors' own dtypes ([`HostTensor`]).
//!
//! Element types: `bool` (`|b1`), `i8` (`|i1`), `u8` (`|u1`), `i32` (`<i4`), `i64` (`<i8`), `f16`
//! (`<f2`), `f32` (`<f4`), `f64` (`<f8`); big-endian files are read too, and Fortran-order
//! arrays are reordered to row-major. NumPy has no `bf16`, so a `bf16` tensor is written as `f32`
//! (exact: every `bf16` is an `f32`) and read from an `f32` file whose values are all exact `bf16`
//! values ([`into_dtype`]). NumPy has no 8-bit float element type either (`f8e4m3` and
//! `f8e5m2` tensors are refused with one line). Other element types (`u16`, `u32`, `u64`, `i16`, complex, strings,
//! structured, pickled objects) are refused with a message naming them.

use npyz::WriterBuilder;
use tir_graph::{DType, Element, HostMemory, HostTensor};

/// Why a `.npy` file could not be read or a tensor not written. Messages do not name the file;
/// the caller does.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("not a valid .npy file: {0}")]
    Header(String),
    #[error("the .npy element type `{descr}` is not supported (bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64; bf16 tensors are stored as f32)")]
    UnsupportedDType { descr: String },
    #[error("the .npy file is truncated: the header promises {expected} data bytes, the file has {found}")]
    Truncated { expected: u64, found: u64 },
    #[error("the .npy file has {0} bytes after its data")]
    TrailingBytes(u64),
    #[error("reading the .npy data: {0}")]
    Data(String),
    #[error("writing the .npy data: {0}")]
    Write(String),
    #[error("{0} tensors have no .npy element type (NumPy has no 8-bit floats)")]
    NoNpyType(DType),
}

/// `t` as `dtype`: itself, or a `bf16` tensor from an `f32` one whose values are all exact
/// `bf16` values. `None` when its values are not of that dtype.
pub fn into_dtype(t: HostTensor<'static>, dtype: DType) -> Option<HostTensor<'static>> {
    if t.dtype() == dtype {
        return Some(t);
    }
    if dtype != DType::BF16 || t.dtype() != DType::F32 {
        return None;
    }
    let values = t.to_vec::<f32>().ok()?;
    let narrowed: Vec<half::bf16> = values.iter().map(|&v| half::bf16::from_f32(v)).collect();
    let exact = values
        .iter()
        .zip(&narrowed)
        .all(|(v, n)| v.is_nan() || n.to_f32().to_bits() == v.to_bits());
    if !exact {
        return None;
    }
    HostTensor::from_vec(narrowed, t.dims()).ok()
}

/// The dtype of a `.npy` element type, as far as tir has it.
fn dtype_of(ty: &npyz::TypeStr) -> Option<DType> {
    use npyz::TypeChar;
    Some(match (ty.type_char(), ty.size_field()) {
        (TypeChar::Bool, 1) => DType::Bool,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Int, 2) => DType::I16,
        (TypeChar::Uint, 2) => DType::U16,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Uint, 4) => DType::U32,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Uint, 8) => DType::U64,
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 8) => DType::F64,
        _ => return None,
    })
}

/// The file's elements as a row-major tensor of `T`.
fn read<T>(file: npyz::NpyFile<&[u8]>, dims: &[u64]) -> Result<HostTensor<'static>, NpyError>
where
    T: npyz::Deserialize + Element,
    Vec<T>: HostMemory,
{
    let fortran = file.header().order() == npyz::Order::Fortran;
    let values = file
        .into_vec::<T>()
        .map_err(|e| NpyError::Data(e.to_string()))?;
    let values = if fortran {
        fortran_to_c(&values, dims)
    } else {
        values
    };
    HostTensor::from_vec(values, dims).map_err(|e| NpyError::Data(e.to_string()))
}

/// Checks that the header length in a `.npy` preamble (magic, version, then the length: `u16`
/// in version 1, `u32` in versions 2 and 3) fits in `bytes`, before `npyz` allocates a buffer
/// of that length, and that the header is not nested too deep for `npyz`'s parser. Other
/// faults of the header are left to `npyz` to name.
fn check_header_len(bytes: &[u8]) -> Result<(), NpyError> {
    if !bytes.starts_with(b"\x93NUMPY") {
        return Ok(());
    }
    let field = match bytes.get(6) {
        Some(1) => bytes.get(8..10),
        Some(2 | 3) => bytes.get(8..12),
        _ => None,
    };
    let Some(field) = field else {
        return Ok(());
    };
    let mut le = [0u8; 8];
    le[..field.len()].copy_from_slice(field);
    let len = u64::from_le_bytes(le);
    let start = 8 + field.len();
    let have = (bytes.len() - start) as u64;
    if len > have {
        return Err(NpyError::Header(format!(
            "the header length is {len} bytes, the file has {have} after it"
        )));
    }
    check_nesting(&bytes[start..start + len as usize])
}

/// The deepest nesting of brackets a `.npy` header may have: the dict, a structured dtype's
/// list, a field's tuple, a field's shape. Deeper headers are refused before `npyz` parses them
/// (its parser takes time exponential in the depth).
const MAX_HEADER_NESTING: usize = 4;

fn check_nesting(header: &[u8]) -> Result<(), NpyError> {
    let mut depth = 0usize;
    for &b in header {
        match b {
            b'{' | b'[' | b'(' => depth += 1,
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => continue,
        }
        if depth > MAX_HEADER_NESTING {
            return Err(NpyError::Header(format!(
                "the header nests brackets more than {MAX_HEADER_NESTING} deep"
            )));
        }
    }
    Ok(())
}

/// Reads a `.npy` file's bytes.
pub fn decode(bytes: &[u8]) -> Result<HostTensor<'static>, NpyError> {
    check_header_len(bytes)?;
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
    let file = npyz::NpyFile::with_header(header, rest);
    match dtype {
        DType::Bool => {
            let bools = read_bools(file, &dims)?;
            HostTensor::from_slice(&bools, &dims)
                .map(HostTensor::into_owned)
                .map_err(|e| NpyError::Data(e.to_string()))
        }
        DType::I8 => read::<i8>(file, &dims),
        DType::U8 => read::<u8>(file, &dims),
        DType::I32 => read::<i32>(file, &dims),
        DType::I64 => read::<i64>(file, &dims),
        DType::I16 => read::<i16>(file, &dims),
        DType::U16 => read::<u16>(file, &dims),
        DType::U32 => read::<u32>(file, &dims),
        DType::U64 => read::<u64>(file, &dims),
        DType::F16 => read::<half::f16>(file, &dims),
        DType::F32 => read::<f32>(file, &dims),
        DType::F64 => read::<f64>(file, &dims),
        DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => {
            unreachable!("no .npy element type maps to {dtype}")
        }
    }
}

/// A bool file's elements, row-major.
fn read_bools(file: npyz::NpyFile<&[u8]>, dims: &[u64]) -> Result<Vec<bool>, NpyError> {
    let fortran = file.header().order() == npyz::Order::Fortran;
    let values = file
        .into_vec::<bool>()
        .map_err(|e| NpyError::Data(e.to_string()))?;
    Ok(if fortran {
        fortran_to_c(&values, dims)
    } else {
        values
    })
}

/// Row-major values from column-major ones.
fn fortran_to_c<T: Copy>(flat: &[T], dims: &[u64]) -> Vec<T> {
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

/// `t`'s elements as `T`s.
fn elements<T: Element>(t: &HostTensor) -> Result<Vec<T>, NpyError> {
    t.to_vec::<T>().map_err(|e| NpyError::Write(e.to_string()))
}

/// The `.npy` bytes of `t` (little-endian, row-major; `bf16` as `f32`).
pub fn encode(t: &HostTensor) -> Result<Vec<u8>, NpyError> {
    let dims = t.dims();
    match t.dtype() {
        DType::Bool => write_values(dims, elements::<bool>(t)?.into_iter()),
        DType::I8 => write_values(dims, elements::<i8>(t)?.into_iter()),
        DType::U8 => write_values(dims, elements::<u8>(t)?.into_iter()),
        DType::I32 => write_values(dims, elements::<i32>(t)?.into_iter()),
        DType::I64 => write_values(dims, elements::<i64>(t)?.into_iter()),
        DType::I16 => write_values(dims, elements::<i16>(t)?.into_iter()),
        DType::U16 => write_values(dims, elements::<u16>(t)?.into_iter()),
        DType::U32 => write_values(dims, elements::<u32>(t)?.into_iter()),
        DType::U64 => write_values(dims, elements::<u64>(t)?.into_iter()),
        DType::F16 => write_values(dims, elements::<half::f16>(t)?.into_iter()),
        DType::BF16 => write_values(
            dims,
            elements::<half::bf16>(t)?
                .into_iter()
                .map(half::bf16::to_f32),
        ),
        DType::F32 => write_values(dims, elements::<f32>(t)?.into_iter()),
        DType::F64 => write_values(dims, elements::<f64>(t)?.into_iter()),
        d @ (DType::F8E4M3 | DType::F8E5M2) => Err(NpyError::NoNpyType(d)),
    }
}
