//! Weights files: `.safetensors`, read memory-mapped (a tensor is a [`HostTensor`] borrowing the
//! mapped bytes: no copy and no `f64` detour) and written atomically.
//!
//! [`WeightsFile::open`] (and [`WeightsFile::from_bytes`], for a file's bytes already in memory)
//! checks the whole file before it returns: the header (its length, its
//! JSON, every tensor's offsets against its dtype and shape, the data ending where the file
//! ends; the `safetensors` crate's validation), that every dtype is one tir has, and that bool
//! tensors hold only 0 and 1. Each refusal is one [`WeightsError`] naming the file and, where
//! one is at fault, the tensor.

use crate::tensor::{HostTensor, TensorError};
use crate::DType;
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Why a weights file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// Opening, mapping or reading the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid safetensors (header, offsets), or a tensor could not be encoded.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's safetensors dtype has no tir dtype.
    #[error("{path}: tensor {name:?} has dtype {dtype}, which tir does not have (bool, the integers, f16, bf16, f32, f64, f8e4m3 as F8_E4M3, f8e5m2 as F8_E5M2)")]
    UnsupportedDType {
        /// The file.
        path: String,
        /// The tensor's name.
        name: String,
        /// Its dtype, as safetensors names it.
        dtype: String,
    },
    /// A tensor's bytes do not fit its dtype and dims (size, or a bool byte other than 0 and 1).
    #[error("{path}: tensor {name:?}: {source}")]
    Tensor {
        /// The file.
        path: String,
        /// The tensor's name.
        name: String,
        /// What is wrong.
        source: TensorError,
    },
    /// Writing the file failed.
    #[error("{0}")]
    Write(crate::file::FileError),
}

/// One tensor of a file: its dtype, dims and where its bytes are in the file.
struct Entry {
    name: String,
    dtype: DType,
    dims: Vec<u64>,
    bytes: Range<usize>,
}

/// A `.safetensors` file, memory-mapped (or its bytes, held) and checked (see the module doc).
pub struct WeightsFile {
    path: PathBuf,
    bytes: Bytes,
    /// In file order.
    entries: Vec<Entry>,
}

/// Where a [`WeightsFile`]'s bytes are.
enum Bytes {
    Mapped(memmap2::Mmap),
    Held(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Held(bytes) => bytes,
        }
    }
}

fn dtype_of(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::BOOL => DType::Bool,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::I16 => DType::I16,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F8_E4M3 => DType::F8E4M3,
        Dtype::F8_E5M2 => DType::F8E5M2,
        _ => return None,
    })
}

fn safetensors_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::Bool => Dtype::BOOL,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::I16 => Dtype::I16,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F8E4M3 => Dtype::F8_E4M3,
        DType::F8E5M2 => Dtype::F8_E5M2,
    }
}

impl WeightsFile {
    /// Maps and checks the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<WeightsFile, WeightsError> {
        let path = path.as_ref();
        let io = |source| WeightsError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every reader of a memory-mapped file, this one
        // assumes no other process truncates or rewrites the file while it is open (tir writes
        // its files by rename, which leaves a mapped file as it was).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        WeightsFile::checked(path, Bytes::Mapped(map))
    }

    /// Checks a file's `bytes`, held in memory; `path` names the file in messages.
    pub fn from_bytes(path: impl AsRef<Path>, bytes: Vec<u8>) -> Result<WeightsFile, WeightsError> {
        WeightsFile::checked(path.as_ref(), Bytes::Held(bytes))
    }

    fn checked(path: &Path, bytes: Bytes) -> Result<WeightsFile, WeightsError> {
        let shown = path.display().to_string();
        let (header_len, metadata) =
            SafeTensors::read_metadata(&bytes).map_err(|e| WeightsError::Format {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
        let data_start = 8 + header_len;
        let mut entries = Vec::new();
        for name in metadata.offset_keys() {
            let Some(info) = metadata.info(&name) else {
                continue;
            };
            let dtype = dtype_of(info.dtype).ok_or_else(|| WeightsError::UnsupportedDType {
                path: shown.clone(),
                name: name.clone(),
                dtype: format!("{:?}", info.dtype),
            })?;
            let (start, end) = info.data_offsets;
            let entry = Entry {
                dims: info.shape.iter().map(|&d| d as u64).collect(),
                dtype,
                bytes: data_start + start..data_start + end,
                name,
            };
            // Checks the size and, for bool, every byte.
            HostTensor::from_bytes(entry.dtype, &entry.dims, &bytes[entry.bytes.clone()]).map_err(
                |source| WeightsError::Tensor {
                    path: shown.clone(),
                    name: entry.name.clone(),
                    source,
                },
            )?;
            entries.push(entry);
        }
        Ok(WeightsFile {
            path: path.to_path_buf(),
            bytes,
            entries,
        })
    }

    /// The file's path, as given to open it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The number of tensors in the file.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tensor named `name`, borrowing the mapped bytes.
    pub fn get(&self, name: &str) -> Option<HostTensor<'_>> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .map(|e| self.tensor(e))
    }

    /// Every tensor, in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, HostTensor<'_>)> {
        self.entries
            .iter()
            .map(|e| (e.name.as_str(), self.tensor(e)))
    }

    fn tensor(&self, e: &Entry) -> HostTensor<'_> {
        HostTensor::from_bytes(e.dtype, &e.dims, &self.bytes[e.bytes.clone()])
            .expect("checked when the file was opened")
    }
}

/// A tensor as the `safetensors` writer sees it.
struct Viewed<'a> {
    tensor: &'a HostTensor<'a>,
    shape: Vec<usize>,
}

impl View for Viewed<'_> {
    fn dtype(&self) -> Dtype {
        safetensors_dtype(self.tensor.dtype())
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.tensor.bytes())
    }
    fn data_len(&self) -> usize {
        self.tensor.bytes().len()
    }
}

/// Writes `tensors` as a `.safetensors` file at `path`, atomically (a temporary file, then a
/// rename). Names must be distinct.
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[(&str, &HostTensor<'_>)],
) -> Result<(), WeightsError> {
    let path = path.as_ref();
    let format = |reason: String| WeightsError::Format {
        path: path.display().to_string(),
        reason,
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut views = Vec::with_capacity(tensors.len());
    for (name, tensor) in tensors {
        if !seen.insert(*name) {
            return Err(format(format!("tensor {name:?} is given twice")));
        }
        let shape = tensor
            .dims()
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| format(format!("tensor {name:?} is too large")))?;
        views.push((name.to_string(), Viewed { tensor, shape }));
    }
    let bytes = safetensors::tensor::serialize(views, None).map_err(|e| format(e.to_string()))?;
    crate::file::write_atomically(path, &bytes).map_err(WeightsError::Write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    fn sample(dir: &Path) -> PathBuf {
        let w = HostTensor::from_vec(vec![f16::from_f32(0.5); 6], &[2, 3]).unwrap();
        let ids = HostTensor::from_vec(vec![3i64, -1], &[2]).unwrap();
        let mask = HostTensor::from_slice(&[true, false, true], &[3]).unwrap();
        let path = dir.join("w.safetensors");
        write_safetensors(&path, &[("w", &w), ("ids", &ids), ("mask", &mask)]).unwrap();
        path
    }

    #[test]
    fn tensors_round_trip_in_their_dtypes() {
        let dir = tempfile::tempdir().unwrap();
        let file = WeightsFile::open(sample(dir.path())).unwrap();
        assert_eq!(file.len(), 3);
        let w = file.get("w").unwrap();
        assert_eq!(w.type_name(), "f16[2, 3]");
        assert_eq!(w.to_vec::<f16>().unwrap(), vec![f16::from_f32(0.5); 6]);
        assert_eq!(file.get("ids").unwrap().to_vec::<i64>().unwrap(), [3, -1]);
        assert_eq!(
            file.get("mask").unwrap().to_vec::<bool>().unwrap(),
            [true, false, true]
        );
        assert!(file.get("nope").is_none());
        let names: Vec<&str> = file.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 3);
    }

    /// Each broken file is refused with one line naming the file.
    #[test]
    fn broken_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = std::fs::read(sample(dir.path())).unwrap();
        let header_len = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let refused = |p: PathBuf| {
            let e = WeightsFile::open(&p).err().expect("refused").to_string();
            assert!(e.starts_with(&p.display().to_string()), "{e}");
            assert!(!e.contains('\n'), "{e}");
            e
        };
        let e = refused(write("empty", &[]));
        assert!(e.contains("not a valid safetensors file"), "{e}");
        let e = refused(write("truncated", &good[..good.len() - 3]));
        assert!(e.contains("not a valid safetensors file"), "{e}");
        let mut lying = good.clone();
        lying[..8].copy_from_slice(&((header_len + 4096) as u64).to_le_bytes());
        let e = refused(write("lying", &lying));
        assert!(e.contains("header length"), "{e}");
        let mut long = good.clone();
        long.extend([0u8; 8]);
        refused(write("trailing", &long));
        let mut unsupported = good.clone();
        let at = good.windows(5).position(|w| w == b"\"I64\"").unwrap();
        // Complex64: eight bytes an element like i64, so the header stays consistent.
        unsupported[at + 1] = b'C';
        let e = refused(write("c64", &unsupported));
        assert!(e.contains("\"ids\" has dtype C64"), "{e}");
        let mut not_bool = good.clone();
        let last = not_bool.len() - 1;
        not_bool[last] = 7;
        // The bool tensor is last in the data (the writer orders by descending alignment).
        let e = refused(write("bool", &not_bool));
        assert!(e.contains("\"mask\"") && e.contains("not a bool"), "{e}");
        let e = refused(dir.path().join("missing.safetensors"));
        assert!(e.contains("No such file"), "{e}");
    }

    #[test]
    fn bytes_in_memory_read_like_the_mapped_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let mapped = WeightsFile::open(&path).unwrap();
        let held = WeightsFile::from_bytes("held.safetensors", bytes.clone()).unwrap();
        assert_eq!(held.size(), mapped.size());
        let tensors = |w: &WeightsFile| -> Vec<(String, String, Vec<u8>)> {
            w.iter()
                .map(|(n, t)| (n.to_string(), t.type_name(), t.bytes().to_vec()))
                .collect()
        };
        assert_eq!(tensors(&held), tensors(&mapped));
        let cut = bytes[..bytes.len() - 3].to_vec();
        let e = WeightsFile::from_bytes("held.safetensors", cut)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .starts_with("held.safetensors: not a valid safetensors file"),
            "{e}"
        );
    }

    #[test]
    fn names_given_twice_are_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let t = HostTensor::scalar(1.0f32);
        let path = dir.path().join("twice.safetensors");
        let e = write_safetensors(&path, &[("a", &t), ("a", &t)]).unwrap_err();
        assert!(e.to_string().contains("\"a\" is given twice"), "{e}");
        assert!(!path.exists());
    }
}
