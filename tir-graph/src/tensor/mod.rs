//! [`HostTensor`]: a tensor in host memory with its elements in their own dtype, as a user hands
//! it to a run and gets it back.
//!
//! A tensor is a dtype, concrete dims and the elements' bytes, row-major and little-endian (what
//! device memory holds: `bool` as one byte 0 or 1, `bf16` and `f16` as their two bytes). The
//! bytes are either borrowed (made from a user's slice or a memory-mapped file without a copy)
//! or owned: a `Vec` of the element type, or memory a backend provides through [`HostMemory`]
//! (page-locked memory that a GPU copies from and to at full speed).
//!
//! Typed access goes through [`Element`] (`half::f16`, `half::bf16`, `f32`, `f64`, the integers,
//! `bool`, and the byte newtypes [`F8E4M3`] and [`F8E5M2`]). `f64` values belong to the oracle ([`crate::eval::F64Tensor`]);
//! [`HostTensor::to_f64`] and [`HostTensor::from_f64`] cross over, for comparisons and tests.

mod shard;

pub use shard::{join_host, shard_host};

use crate::eval::F64Tensor;
use crate::float8::{F8E4M3, F8E5M2};
use crate::{ConstData, DType};
use std::any::Any;
use std::fmt;

/// Why a tensor could not be made or read as asked. One line each, naming the tensor's type.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TensorError {
    /// The dims hold more elements (or bytes) than fit in `usize`.
    #[error("{ty} has too many elements to hold in memory")]
    TooLarge {
        /// The tensor's type, as `dtype[dims]`.
        ty: String,
    },
    /// The bytes given are not the size the dtype and dims need.
    #[error("{ty} needs {expected} bytes, got {got}")]
    Size {
        /// The tensor's type.
        ty: String,
        /// The bytes the type needs.
        expected: usize,
        /// The bytes given.
        got: usize,
    },
    /// The elements were asked for as another dtype's Rust type.
    #[error("{ty} holds {dtype} elements, not {asked}")]
    WrongElement {
        /// The tensor's type.
        ty: String,
        /// The dtype it holds.
        dtype: DType,
        /// The dtype asked for.
        asked: DType,
    },
    /// Borrowed bytes are not aligned for a typed slice of their dtype.
    #[error("the elements of {ty} are not aligned for {dtype} in memory; read them with to_vec")]
    Misaligned {
        /// The tensor's type.
        ty: String,
        /// Its dtype.
        dtype: DType,
    },
    /// A byte of a bool tensor is neither 0 nor 1.
    #[error("{ty}: byte {index} is {byte}, not a bool (0 or 1)")]
    BadBool {
        /// The tensor's type.
        ty: String,
        /// The element's index.
        index: usize,
        /// The byte found.
        byte: u8,
    },
    /// An f64 value given for a tensor is not a value of its dtype.
    #[error("{ty}: element {index} ({value:?}) is not an exact {dtype} value")]
    Inexact {
        /// The tensor's type.
        ty: String,
        /// The element's index, row-major.
        index: usize,
        /// The value given.
        value: f64,
        /// The dtype it does not fit.
        dtype: DType,
    },
    /// Writing was asked of a tensor that borrows its bytes.
    #[error("{ty} borrows its elements and cannot be written; make an owned tensor")]
    Borrowed {
        /// The tensor's type.
        ty: String,
    },
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that holds one element of a tir dtype, bit for bit as device memory does.
pub trait Element: Copy + Send + Sync + fmt::Debug + 'static + sealed::Sealed {
    /// The dtype whose elements this type holds.
    const DTYPE: DType;
    /// The zero of the type (`false` for bool).
    const ZERO: Self;
    /// The slice's bytes.
    fn slice_bytes(slice: &[Self]) -> &[u8];
    /// The elements `bytes` holds, when they are aligned (and, for bool, 0 or 1).
    fn from_bytes(bytes: &[u8]) -> Option<&[Self]>;
    /// The elements `bytes` holds, writable, when they are aligned (and, for bool, 0 or 1).
    fn from_bytes_mut(bytes: &mut [u8]) -> Option<&mut [Self]>;
    /// The element whose little-endian bytes are `bytes` (exactly its size).
    fn read(bytes: &[u8]) -> Self;
}

macro_rules! pod_element {
    ($($t:ty => $dtype:ident, $zero:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
            const ZERO: Self = $zero;
            fn slice_bytes(slice: &[Self]) -> &[u8] {
                bytemuck::cast_slice(slice)
            }
            fn from_bytes(bytes: &[u8]) -> Option<&[Self]> {
                bytemuck::try_cast_slice(bytes).ok()
            }
            fn from_bytes_mut(bytes: &mut [u8]) -> Option<&mut [Self]> {
                bytemuck::try_cast_slice_mut(bytes).ok()
            }
            fn read(bytes: &[u8]) -> Self {
                bytemuck::pod_read_unaligned(bytes)
            }
        }
        impl HostMemory for Vec<$t> {
            fn bytes(&self) -> &[u8] {
                bytemuck::cast_slice(self)
            }
            fn bytes_mut(&mut self) -> &mut [u8] {
                bytemuck::cast_slice_mut(self)
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
        }
    )*};
}

pod_element! {
    i8 => I8, 0;
    u8 => U8, 0;
    i32 => I32, 0;
    i64 => I64, 0;
    i16 => I16, 0;
    u16 => U16, 0;
    u32 => U32, 0;
    u64 => U64, 0;
    half::f16 => F16, half::f16::ZERO;
    half::bf16 => BF16, half::bf16::ZERO;
    f32 => F32, 0.0;
    f64 => F64, 0.0;
    F8E4M3 => F8E4M3, F8E4M3(0);
    F8E5M2 => F8E5M2, F8E5M2(0);
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    const ZERO: Self = false;
    fn slice_bytes(slice: &[Self]) -> &[u8] {
        bytemuck::cast_slice(slice)
    }
    fn from_bytes(bytes: &[u8]) -> Option<&[Self]> {
        bytemuck::checked::try_cast_slice(bytes).ok()
    }
    fn from_bytes_mut(bytes: &mut [u8]) -> Option<&mut [Self]> {
        bytemuck::checked::try_cast_slice_mut(bytes).ok()
    }
    fn read(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// Memory that owns a tensor's elements: a `Vec` of the element type (`Vec<u8>` for bool, so
/// that writing its bytes cannot make an invalid bool), or memory a backend provides (the CUDA backend's page-locked host memory, which it recognizes with
/// [`HostMemory::as_any`] and copies to the GPU directly).
pub trait HostMemory: Send + Sync + 'static {
    /// The elements' bytes, row-major and little-endian.
    fn bytes(&self) -> &[u8];
    /// The same bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// The memory itself, so that the backend that made it can recognize it by its type.
    fn as_any(&self) -> &dyn Any;
}

/// Where a tensor's bytes are.
enum Elements<'a> {
    Borrowed(&'a [u8]),
    Owned(Box<dyn HostMemory>),
}

/// A tensor in host memory, its elements in its own dtype (see the module doc).
pub struct HostTensor<'a> {
    dtype: DType,
    dims: Vec<u64>,
    elements: Elements<'a>,
}

/// `f32[2, 3]`.
pub fn type_name(dtype: DType, dims: &[u64]) -> String {
    let dims: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("{dtype}[{}]", dims.join(", "))
}

/// The element count of `dims`, if it fits in memory.
pub fn numel(dims: &[u64]) -> Option<usize> {
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    usize::try_from(n).ok()
}

/// The byte count of a `dtype` tensor of `dims`.
fn byte_len(dtype: DType, dims: &[u64]) -> Result<usize, TensorError> {
    numel(dims)
        .and_then(|n| n.checked_mul(dtype.size_bytes()))
        .ok_or_else(|| TensorError::TooLarge {
            ty: type_name(dtype, dims),
        })
}

/// Zeroed owned memory for `n` elements of `dtype`, aligned for its element type.
fn zeroed(dtype: DType, n: usize) -> Box<dyn HostMemory> {
    fn of<T: Element>(n: usize) -> Box<dyn HostMemory>
    where
        Vec<T>: HostMemory,
    {
        Box::new(vec![T::ZERO; n])
    }
    match dtype {
        DType::Bool | DType::U8 => of::<u8>(n),
        DType::I8 => of::<i8>(n),
        DType::I32 => of::<i32>(n),
        DType::I64 => of::<i64>(n),
        DType::I16 => of::<i16>(n),
        DType::U16 => of::<u16>(n),
        DType::U32 => of::<u32>(n),
        DType::U64 => of::<u64>(n),
        DType::F16 => of::<half::f16>(n),
        DType::BF16 => of::<half::bf16>(n),
        DType::F32 => of::<f32>(n),
        DType::F64 => of::<f64>(n),
        DType::F8E4M3 => of::<F8E4M3>(n),
        DType::F8E5M2 => of::<F8E5M2>(n),
    }
}

/// The index and value of the first byte of a bool tensor that is not 0 or 1.
fn bad_bool(bytes: &[u8]) -> Option<(usize, u8)> {
    bytes.iter().position(|&b| b > 1).map(|i| (i, bytes[i]))
}

impl<'a> HostTensor<'a> {
    /// A tensor over `data` (row-major), without a copy.
    pub fn from_slice<T: Element>(data: &'a [T], dims: &[u64]) -> Result<Self, TensorError> {
        HostTensor::from_bytes(T::DTYPE, dims, T::slice_bytes(data))
    }

    /// A tensor over `bytes` (row-major, little-endian elements of `dtype`), without a copy.
    pub fn from_bytes(dtype: DType, dims: &[u64], bytes: &'a [u8]) -> Result<Self, TensorError> {
        HostTensor::checked(dtype, dims, Elements::Borrowed(bytes))
    }

    fn checked(dtype: DType, dims: &[u64], elements: Elements<'a>) -> Result<Self, TensorError> {
        let t = HostTensor {
            dtype,
            dims: dims.to_vec(),
            elements,
        };
        let expected = byte_len(dtype, dims)?;
        let got = t.bytes().len();
        if got != expected {
            return Err(TensorError::Size {
                ty: t.type_name(),
                expected,
                got,
            });
        }
        if dtype == DType::Bool {
            if let Some((index, byte)) = bad_bool(t.bytes()) {
                return Err(TensorError::BadBool {
                    ty: t.type_name(),
                    index,
                    byte,
                });
            }
        }
        Ok(t)
    }

    /// The elements' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dims, in elements per axis.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.bytes().len() / self.dtype.size_bytes()
    }

    /// `f16[2, 3]`.
    pub fn type_name(&self) -> String {
        type_name(self.dtype, &self.dims)
    }

    /// The elements' bytes (row-major, little-endian).
    pub fn bytes(&self) -> &[u8] {
        match &self.elements {
            Elements::Borrowed(b) => b,
            Elements::Owned(m) => m.bytes(),
        }
    }

    /// The elements' bytes of an owned tensor, to write (for bool, only 0 and 1: bool reads
    /// check them).
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], TensorError> {
        match &mut self.elements {
            Elements::Owned(m) => Ok(m.bytes_mut()),
            Elements::Borrowed(_) => Err(TensorError::Borrowed {
                ty: type_name(self.dtype, &self.dims),
            }),
        }
    }

    /// Element `index` as an `f64` (what a launch check reads of a run-time position).
    pub fn element_f64(&self, index: usize) -> Option<f64> {
        let size = self.dtype.size_bytes();
        let bytes = self.bytes().get(index * size..(index + 1) * size)?;
        Some(element_f64(self.dtype, bytes))
    }

    /// The memory that owns the elements (`None` when they are borrowed).
    pub fn memory(&self) -> Option<&dyn HostMemory> {
        match &self.elements {
            Elements::Borrowed(_) => None,
            Elements::Owned(m) => Some(m.as_ref()),
        }
    }

    /// The elements as `T`s, when `T` is the tensor's dtype and the bytes are aligned for it
    /// (owned tensors always are).
    pub fn as_slice<T: Element>(&self) -> Result<&[T], TensorError> {
        self.expect_element::<T>()?;
        self.expect_bools()?;
        T::from_bytes(self.bytes()).ok_or_else(|| TensorError::Misaligned {
            ty: self.type_name(),
            dtype: self.dtype,
        })
    }

    /// The elements as mutable `T`s, for an owned tensor of dtype `T`.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], TensorError> {
        self.expect_element::<T>()?;
        self.expect_bools()?;
        let ty = self.type_name();
        match &mut self.elements {
            Elements::Borrowed(_) => Err(TensorError::Borrowed { ty }),
            Elements::Owned(m) => {
                let dtype = self.dtype;
                T::from_bytes_mut(m.bytes_mut()).ok_or(TensorError::Misaligned { ty, dtype })
            }
        }
    }

    /// A copy of the elements as `T`s (aligned or not).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, TensorError> {
        self.expect_element::<T>()?;
        let size = self.dtype.size_bytes();
        Ok(self.bytes().chunks_exact(size).map(T::read).collect())
    }

    /// A bool tensor's bytes are all 0 or 1 (what was written through `bytes_mut` may not be).
    fn expect_bools(&self) -> Result<(), TensorError> {
        if self.dtype != DType::Bool {
            return Ok(());
        }
        match bad_bool(self.bytes()) {
            None => Ok(()),
            Some((index, byte)) => Err(TensorError::BadBool {
                ty: self.type_name(),
                index,
                byte,
            }),
        }
    }

    fn expect_element<T: Element>(&self) -> Result<(), TensorError> {
        if T::DTYPE == self.dtype {
            Ok(())
        } else {
            Err(TensorError::WrongElement {
                ty: self.type_name(),
                dtype: self.dtype,
                asked: T::DTYPE,
            })
        }
    }

    /// A tensor borrowing this one's elements.
    pub fn view(&self) -> HostTensor<'_> {
        HostTensor {
            dtype: self.dtype,
            dims: self.dims.clone(),
            elements: Elements::Borrowed(self.bytes()),
        }
    }

    /// This tensor with owned elements (copied if they were borrowed).
    pub fn into_owned(self) -> HostTensor<'static> {
        match self.elements {
            Elements::Owned(m) => HostTensor {
                dtype: self.dtype,
                dims: self.dims,
                elements: Elements::Owned(m),
            },
            Elements::Borrowed(bytes) => owned_copy(self.dtype, self.dims, bytes),
        }
    }

    /// The values as `f64`, for the oracle and comparisons.
    pub fn to_f64(&self) -> F64Tensor {
        let size = self.dtype.size_bytes();
        let data = self
            .bytes()
            .chunks_exact(size)
            .map(|b| element_f64(self.dtype, b))
            .collect();
        F64Tensor {
            dtype: self.dtype,
            dims: self.dims.clone(),
            data,
        }
    }
}

/// An owned tensor holding a copy of `bytes`.
fn owned_copy(dtype: DType, dims: Vec<u64>, bytes: &[u8]) -> HostTensor<'static> {
    let mut memory = zeroed(dtype, bytes.len() / dtype.size_bytes());
    memory.bytes_mut().copy_from_slice(bytes);
    HostTensor {
        dtype,
        dims,
        elements: Elements::Owned(memory),
    }
}

/// The value of one element's little-endian `bytes` of `dtype`.
fn element_f64(dtype: DType, b: &[u8]) -> f64 {
    match dtype {
        DType::Bool => f64::from(b[0] != 0),
        DType::I8 => f64::from(i8::read(b)),
        DType::U8 => f64::from(b[0]),
        DType::I32 => f64::from(i32::read(b)),
        DType::I64 => i64::read(b) as f64,
        DType::I16 => f64::from(i16::read(b)),
        DType::U16 => f64::from(u16::read(b)),
        DType::U32 => f64::from(u32::read(b)),
        DType::U64 => crate::dtype::u64_value(u64::read(b)),
        DType::F16 => half::f16::read(b).to_f64(),
        DType::BF16 => half::bf16::read(b).to_f64(),
        DType::F32 => f64::from(f32::read(b)),
        DType::F64 => f64::read(b),
        DType::F8E4M3 => F8E4M3(b[0]).to_f64(),
        DType::F8E5M2 => F8E5M2(b[0]).to_f64(),
    }
}

/// Writes `v` (exact in `dtype`) as one element's bytes into `out`.
fn write_element(dtype: DType, v: f64, out: &mut [u8]) {
    match dtype {
        DType::Bool => out[0] = u8::from(v != 0.0),
        DType::I8 => out.copy_from_slice(&(v as i8).to_le_bytes()),
        DType::U8 => out[0] = v as u8,
        DType::I32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&(v as i64).to_le_bytes()),
        DType::I16 => out.copy_from_slice(&(v as i16).to_le_bytes()),
        DType::U16 => out.copy_from_slice(&(v as u16).to_le_bytes()),
        DType::U32 => out.copy_from_slice(&(v as u32).to_le_bytes()),
        DType::U64 => out.copy_from_slice(&(v as u64).to_le_bytes()),
        DType::F16 => out.copy_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        DType::BF16 => out.copy_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.copy_from_slice(&v.to_le_bytes()),
        DType::F8E4M3 => out[0] = F8E4M3::from_f64(v).0,
        // An infinity is an f8e5m2 value: kept, not saturated as a cast would.
        DType::F8E5M2 => out[0] = F8E5M2::from_value(v).0,
    }
}

/// Whether `v` is stored unchanged by `dtype` (a float dtype also holds NaN).
fn exact_in(dtype: DType, v: f64) -> bool {
    dtype.holds(v)
}

impl HostTensor<'static> {
    /// A tensor owning `data` (row-major), without a copy.
    pub fn from_vec<T: Element>(data: Vec<T>, dims: &[u64]) -> Result<Self, TensorError>
    where
        Vec<T>: HostMemory,
    {
        HostTensor::from_memory(T::DTYPE, dims, Box::new(data))
    }

    /// A tensor owning `memory`, which holds its elements' bytes.
    pub fn from_memory(
        dtype: DType,
        dims: &[u64],
        memory: Box<dyn HostMemory>,
    ) -> Result<Self, TensorError> {
        HostTensor::checked(dtype, dims, Elements::Owned(memory))
    }

    /// A one-element tensor of rank 0.
    pub fn scalar<T: Element>(value: T) -> Self {
        owned_copy(T::DTYPE, Vec::new(), T::slice_bytes(&[value]))
    }

    /// All zeros.
    pub fn zeros(dtype: DType, dims: &[u64]) -> Result<Self, TensorError> {
        byte_len(dtype, dims)?;
        let n = numel(dims).unwrap_or(0);
        Ok(HostTensor {
            dtype,
            dims: dims.to_vec(),
            elements: Elements::Owned(zeroed(dtype, n)),
        })
    }

    /// The tensor holding `t`'s values, each of which must be exact in `t.dtype` (NaN only in
    /// float dtypes).
    pub fn from_f64(t: &F64Tensor) -> Result<Self, TensorError> {
        if let Some(index) = t.data.iter().position(|&v| !exact_in(t.dtype, v)) {
            return Err(TensorError::Inexact {
                ty: type_name(t.dtype, &t.dims),
                index,
                value: t.data[index],
                dtype: t.dtype,
            });
        }
        HostTensor::from_f64_rounded(t)
    }

    /// A constant's values (`dims` must hold `data.len()` elements) in `dtype`, which the
    /// values must fit ([`ConstData::fits`]): integers are written from their `i64`s
    /// directly, not through `f64`.
    pub fn from_const(dtype: DType, dims: &[u64], data: &ConstData) -> Result<Self, TensorError> {
        let mut out = HostTensor::zeros(dtype, dims)?;
        let size = dtype.size_bytes();
        if data.len() != out.numel() || !data.fits(dtype) {
            return Err(TensorError::Size {
                ty: out.type_name(),
                expected: out.bytes().len(),
                got: data.len() * size,
            });
        }
        let bytes = out.owned_bytes_mut();
        match data {
            ConstData::Int(values) => {
                for (&v, b) in values.iter().zip(bytes.chunks_exact_mut(size)) {
                    b.copy_from_slice(&v.to_le_bytes()[..size]);
                }
            }
            ConstData::Bool(values) => {
                for (&v, b) in values.iter().zip(bytes.iter_mut()) {
                    *b = u8::from(v);
                }
            }
            ConstData::Float(values) => {
                for (v, b) in values.iter().zip(bytes.chunks_exact_mut(size)) {
                    write_element(dtype, v.0, b);
                }
            }
        }
        Ok(out)
    }

    /// The tensor holding `t`'s values as its dtype stores them: floats rounded to nearest,
    /// integers truncated and saturated as Rust's `as` casts do (an `i64` beyond 2^53, which an
    /// `f64` cannot hold exactly, comes back as the nearest `i64`). For values a computation in
    /// `f64` produced, such as the reference backend's.
    pub fn from_f64_rounded(t: &F64Tensor) -> Result<Self, TensorError> {
        let expected = byte_len(t.dtype, &t.dims)?;
        let got = t.data.len().saturating_mul(t.dtype.size_bytes());
        if got != expected {
            return Err(TensorError::Size {
                ty: type_name(t.dtype, &t.dims),
                expected,
                got,
            });
        }
        let mut out = HostTensor::zeros(t.dtype, &t.dims)?;
        out.fill_from_f64(&t.data);
        Ok(out)
    }

    /// Deterministic random values (same seed, same tensor), never all zeros: floats uniform in
    /// `[-bound, bound)` rounded to the dtype, signed integers in -8..8, `u8` in 0..16, bool
    /// either.
    pub fn random(dtype: DType, dims: &[u64], seed: u64, bound: f64) -> Result<Self, TensorError> {
        let mut out = HostTensor::zeros(dtype, dims)?;
        let values = F64Tensor::random(dtype, dims.to_vec(), seed);
        let scale = bound / 2.0;
        let scaled: Vec<f64> = if dtype.is_float() {
            values
                .data
                .iter()
                .map(|&v| dtype.round_value(v * scale))
                .collect()
        } else {
            values.data
        };
        out.fill_from_f64(&scaled);
        if out.bytes().iter().all(|&b| b == 0) {
            if let Some(first) = scaled.first() {
                let one = if *first == 0.0 { 1.0 } else { *first };
                write_element(dtype, one, &mut out.owned_bytes_mut()[..dtype.size_bytes()]);
            }
        }
        Ok(out)
    }

    /// Writes `values` (one per element) over the elements, as the dtype stores them.
    fn fill_from_f64(&mut self, values: &[f64]) {
        let (dtype, size) = (self.dtype, self.dtype.size_bytes());
        for (&v, out) in values
            .iter()
            .zip(self.owned_bytes_mut().chunks_exact_mut(size))
        {
            write_element(dtype, v, out);
        }
    }

    fn owned_bytes_mut(&mut self) -> &mut [u8] {
        self.bytes_mut().unwrap_or_default()
    }
}

impl Clone for HostTensor<'_> {
    /// Borrowed elements stay borrowed; owned ones are copied into a `Vec`.
    fn clone(&self) -> Self {
        match &self.elements {
            Elements::Borrowed(b) => HostTensor {
                dtype: self.dtype,
                dims: self.dims.clone(),
                elements: Elements::Borrowed(b),
            },
            Elements::Owned(m) => owned_copy(self.dtype, self.dims.clone(), m.bytes()),
        }
    }
}

impl PartialEq for HostTensor<'_> {
    /// Same dtype, dims and bytes (so NaNs with the same bits are equal).
    fn eq(&self, other: &Self) -> bool {
        self.dtype == other.dtype && self.dims == other.dims && self.bytes() == other.bytes()
    }
}

impl fmt::Debug for HostTensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        let size = self.dtype.size_bytes();
        let first: Vec<f64> = self
            .bytes()
            .chunks_exact(size)
            .take(SHOWN)
            .map(|b| element_f64(self.dtype, b))
            .collect();
        let more = if self.numel() > SHOWN { ", .." } else { "" };
        write!(f, "HostTensor({} {first:?}{more})", self.type_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn a_slice_is_borrowed_and_read_back_typed() {
        let data = [f16::from_f32(1.5), f16::from_f32(-2.0), f16::ONE, f16::ZERO];
        let t = HostTensor::from_slice(&data, &[2, 2]).unwrap();
        assert!(t.memory().is_none(), "no copy");
        assert_eq!(t.bytes().as_ptr(), data.as_ptr().cast());
        assert_eq!(t.as_slice::<f16>().unwrap(), &data);
        assert_eq!(t.to_f64().data, vec![1.5, -2.0, 1.0, 0.0]);
        let e = t.as_slice::<bf16>().unwrap_err();
        assert_eq!(e.to_string(), "f16[2, 2] holds f16 elements, not bf16");
    }

    #[test]
    fn sizes_must_match_the_dims() {
        let e = HostTensor::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
        assert_eq!(e.to_string(), "f32[2, 2] needs 16 bytes, got 12");
        let e = HostTensor::zeros(DType::F64, &[u64::MAX, 4]).unwrap_err();
        assert!(matches!(e, TensorError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn bool_bytes_must_be_zero_or_one() {
        let e = HostTensor::from_bytes(DType::Bool, &[3], &[0, 1, 2]).unwrap_err();
        assert_eq!(e.to_string(), "bool[3]: byte 2 is 2, not a bool (0 or 1)");
        let t = HostTensor::from_slice(&[true, false], &[2]).unwrap();
        assert_eq!(t.as_slice::<bool>().unwrap(), &[true, false]);
    }

    #[test]
    fn unaligned_bytes_are_read_with_to_vec() {
        // Bytes one past a 4-aligned start: never aligned for f32.
        let mut words = [0u32; 3];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        bytes[1..5].copy_from_slice(&1.0f32.to_le_bytes());
        bytes[5..9].copy_from_slice(&2.0f32.to_le_bytes());
        let t = HostTensor::from_bytes(DType::F32, &[2], &bytes[1..9]).unwrap();
        assert!(matches!(
            t.as_slice::<f32>(),
            Err(TensorError::Misaligned { .. })
        ));
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    }

    #[test]
    fn owned_tensors_are_writable_and_borrowed_ones_are_not() {
        let mut t = HostTensor::zeros(DType::I32, &[3]).unwrap();
        t.as_mut_slice::<i32>()
            .unwrap()
            .copy_from_slice(&[1, -2, 3]);
        assert_eq!(t.to_f64().data, vec![1.0, -2.0, 3.0]);
        let data = [1i32, 2, 3];
        let mut b = HostTensor::from_slice(&data, &[3]).unwrap();
        assert!(matches!(
            b.as_mut_slice::<i32>(),
            Err(TensorError::Borrowed { .. })
        ));
        let owned = b.clone().into_owned();
        assert!(owned.memory().is_some());
        assert_eq!(owned, b);
    }

    #[test]
    fn f64_values_cross_over_exactly_or_not_at_all() {
        let t = F64Tensor::new(DType::BF16, vec![3], vec![1.0, -0.5, f64::NAN]).unwrap();
        let h = HostTensor::from_f64(&t).unwrap();
        assert_eq!(h.dtype(), DType::BF16);
        let back = h.to_f64();
        assert_eq!(back.data[..2], [1.0, -0.5]);
        assert!(back.data[2].is_nan());
        let inexact = F64Tensor {
            dtype: DType::F16,
            dims: vec![1],
            data: vec![0.1],
        };
        let e = HostTensor::from_f64(&inexact).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f16[1]: element 0 (0.1) is not an exact f16 value"
        );
    }

    #[test]
    fn elements_are_held_as_device_memory_holds_them() {
        let t = F64Tensor::new(DType::I32, vec![2], vec![1.0, -1.0]).unwrap();
        assert_eq!(
            HostTensor::from_f64(&t).unwrap().bytes(),
            [1, 0, 0, 0, 255, 255, 255, 255]
        );
        let t = F64Tensor::new(DType::BF16, vec![1], vec![1.0]).unwrap();
        assert_eq!(HostTensor::from_f64(&t).unwrap().bytes(), [0x80, 0x3f]);
        for dtype in DType::ALL {
            let t = F64Tensor::random(dtype, vec![3, 5], 7);
            let h = HostTensor::from_f64(&t).unwrap();
            assert_eq!(h.bytes().len(), 15 * dtype.size_bytes());
            assert_eq!(h.to_f64(), t, "{dtype}");
        }
    }

    #[test]
    fn constants_keep_their_integers_exactly() {
        let data = ConstData::Int(vec![i64::MAX, (1 << 53) + 1, -3]);
        let t = HostTensor::from_const(DType::I64, &[3], &data).unwrap();
        assert_eq!(t.to_vec::<i64>().unwrap(), [i64::MAX, (1 << 53) + 1, -3]);
        let t = HostTensor::from_const(DType::I8, &[1], &ConstData::Int(vec![-7])).unwrap();
        assert_eq!(t.to_vec::<i8>().unwrap(), [-7]);
        let bools = ConstData::Bool(vec![true, false]);
        let t = HostTensor::from_const(DType::Bool, &[2], &bools).unwrap();
        assert_eq!(t.to_vec::<bool>().unwrap(), [true, false]);
        assert!(HostTensor::from_const(DType::I8, &[1], &ConstData::Int(vec![300])).is_err());
        assert!(HostTensor::from_const(DType::I32, &[2], &ConstData::Int(vec![1])).is_err());
    }

    #[test]
    fn bytes_written_into_a_bool_tensor_are_checked_when_read() {
        let mut t = HostTensor::zeros(DType::Bool, &[2]).unwrap();
        t.bytes_mut().unwrap()[1] = 0xff;
        let e = t.as_slice::<bool>().unwrap_err();
        assert_eq!(e.to_string(), "bool[2]: byte 1 is 255, not a bool (0 or 1)");
    }

    #[test]
    fn random_tensors_are_deterministic_bounded_and_not_all_zero() {
        let a = HostTensor::random(DType::F32, &[64], 7, 0.25).unwrap();
        assert_eq!(a, HostTensor::random(DType::F32, &[64], 7, 0.25).unwrap());
        assert_ne!(a, HostTensor::random(DType::F32, &[64], 8, 0.25).unwrap());
        let v = a.as_slice::<f32>().unwrap();
        assert!(v.iter().all(|x| (-0.25..0.25).contains(x)));
        assert!(v.iter().any(|&x| x != 0.0));
        let b = HostTensor::random(DType::Bool, &[1], 0, 1.0).unwrap();
        assert_eq!(b.as_slice::<bool>().unwrap(), &[true]);
    }
}
