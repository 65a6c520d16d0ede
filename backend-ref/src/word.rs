//! [`Word`] and [`Tile`]: how the reference holds elements.
//!
//! Every element is its dtype's value in 64 bits: a float dtype's value as an `f64` (exact for
//! every float dtype, the f8s included), an integer's or a bool's as an `i64` (exact for every
//! integer dtype, which an `f64` is only up to 2^53; a `u64` as its bits). The dtype, which every tile and buffer
//! carries, says which ([`int_lane`]); moving elements (loads, stores, broadcasts, permutes,
//! selects) copies words without looking at them.

use tir_graph::eval::wrap_int;
use tir_graph::float8::{F8E4M3, F8E5M2};
use tir_graph::{DType, Element, HostMemory, HostTensor, TensorError};

/// Whether `dtype`'s elements are held as integers (integers and bool) rather than floats.
pub fn int_lane(dtype: DType) -> bool {
    dtype.is_int() || dtype == DType::Bool
}

/// One element: an `f64` for a float dtype, an `i64` for an integer dtype or bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word(u64);

impl Word {
    pub const fn float(v: f64) -> Word {
        Word(v.to_bits())
    }

    pub const fn int(v: i64) -> Word {
        Word(v as u64)
    }

    pub fn as_float(self) -> f64 {
        f64::from_bits(self.0)
    }

    pub fn as_int(self) -> i64 {
        self.0 as i64
    }

    /// `v` stored in `dtype` as [`DType::round_value`] stores it: floats round to their
    /// precision, integers truncate toward zero and wrap (through `i128`, so that values past
    /// the `i64` range wrap too), bool is `v != 0`; computed in the integers, never through an
    /// inexact `f64`.
    pub fn from_f64(dtype: DType, v: f64) -> Word {
        match dtype {
            DType::Bool => Word::int(i64::from(v != 0.0)),
            d if d.is_int() => Word::int(wrap_int(d, v as i128 as i64)),
            d => Word::float(d.round_value(v)),
        }
    }

    /// `v` as a constant (or a padding value) of `dtype` stores it: as [`Word::from_f64`],
    /// except that a value the dtype holds is kept ([`DType::const_value`]: an `f8e5m2`
    /// infinity).
    pub fn constant(dtype: DType, v: f64) -> Word {
        match dtype {
            DType::F8E5M2 => Word::float(dtype.const_value(v)),
            d => Word::from_f64(d, v),
        }
    }

    /// The integer `v` stored in `dtype`: wrapped for integers, `v != 0` for bool, rounded to
    /// nearest for floats (once for `f32` and `f64`; `f16` and `bf16` through `f64`, which
    /// differs from one rounding only past 2^53).
    pub fn from_i64(dtype: DType, v: i64) -> Word {
        match dtype {
            d if int_lane(d) => Word::int(wrap_int(d, v)),
            DType::F32 => Word::float(f64::from(v as f32)),
            d => Word::float(d.round_value(v as f64)),
        }
    }

    /// The value of this `dtype` element as an `f64` (an integer past 2^53 rounds to nearest;
    /// a `u64` word is read unsigned).
    pub fn to_f64(self, dtype: DType) -> f64 {
        match dtype {
            DType::U64 => tir_graph::dtype::u64_value(self.0),
            d if int_lane(d) => self.as_int() as f64,
            _ => self.as_float(),
        }
    }

    /// This element of `from` converted to `to`, as a cast converts.
    pub fn cast(self, from: DType, to: DType) -> Word {
        if from == DType::U64 && !int_lane(to) {
            // Unsigned to float, rounded once (f16 and bf16 through f64, as from i64).
            return match to {
                DType::F32 => Word::float(f64::from(self.0 as f32)),
                d => Word::float(d.round_value(self.0 as f64)),
            };
        }
        if int_lane(from) {
            Word::from_i64(to, self.as_int())
        } else {
            Word::from_f64(to, self.as_float())
        }
    }
}

/// A tile, a buffer or a tensor of the reference: dtype, dims and row-major words.
#[derive(Clone, Debug, PartialEq)]
pub struct Tile {
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub data: Vec<Word>,
}

impl Tile {
    /// The values as `f64` (integers past 2^53 rounded), for float computations.
    pub fn floats(&self) -> Vec<f64> {
        self.data.iter().map(|w| w.to_f64(self.dtype)).collect()
    }

    /// The values of an integer or bool tile.
    pub fn ints(&self) -> impl Iterator<Item = i64> + '_ {
        self.data.iter().map(|w| w.as_int())
    }

    /// A tile of `dtype` holding `values` stored in it ([`Word::from_f64`]).
    pub fn from_f64s(dtype: DType, dims: &[u64], values: impl IntoIterator<Item = f64>) -> Tile {
        Tile {
            dtype,
            dims: dims.to_vec(),
            data: values
                .into_iter()
                .map(|v| Word::from_f64(dtype, v))
                .collect(),
        }
    }

    /// A tile of `dtype` holding the integers `values` stored in it ([`Word::from_i64`]).
    pub fn from_i64s(dtype: DType, dims: &[u64], values: impl IntoIterator<Item = i64>) -> Tile {
        Tile {
            dtype,
            dims: dims.to_vec(),
            data: values
                .into_iter()
                .map(|v| Word::from_i64(dtype, v))
                .collect(),
        }
    }

    /// The elements of a host tensor, exactly.
    pub fn from_host(t: &HostTensor<'_>) -> Result<Tile, TensorError> {
        fn read<T: Element>(
            t: &HostTensor<'_>,
            word: fn(T) -> Word,
        ) -> Result<Vec<Word>, TensorError> {
            Ok(t.to_vec::<T>()?.into_iter().map(word).collect())
        }
        let data = match t.dtype() {
            DType::Bool => read(t, |v: bool| Word::int(i64::from(v)))?,
            DType::I8 => read(t, |v: i8| Word::int(i64::from(v)))?,
            DType::U8 => read(t, |v: u8| Word::int(i64::from(v)))?,
            DType::I32 => read(t, |v: i32| Word::int(i64::from(v)))?,
            DType::I64 => read(t, Word::int)?,
            DType::I16 => read(t, |v: i16| Word::int(i64::from(v)))?,
            DType::U16 => read(t, |v: u16| Word::int(i64::from(v)))?,
            DType::U32 => read(t, |v: u32| Word::int(i64::from(v)))?,
            DType::U64 => read(t, |v: u64| Word(v))?,
            DType::F16 => read(t, |v: half::f16| Word::float(f64::from(v)))?,
            DType::BF16 => read(t, |v: half::bf16| Word::float(f64::from(v)))?,
            DType::F32 => read(t, |v: f32| Word::float(f64::from(v)))?,
            DType::F64 => read(t, Word::float)?,
            DType::F8E4M3 => read(t, |v: F8E4M3| Word::float(v.to_f64()))?,
            DType::F8E5M2 => read(t, |v: F8E5M2| Word::float(v.to_f64()))?,
        };
        Ok(Tile {
            dtype: t.dtype(),
            dims: t.dims().to_vec(),
            data,
        })
    }

    /// The tile as a host tensor, exactly (its float words are values of its dtype).
    pub fn to_host(&self) -> Result<HostTensor<'static>, TensorError> {
        fn write<T: Element>(
            t: &Tile,
            value: fn(Word) -> T,
        ) -> Result<HostTensor<'static>, TensorError>
        where
            Vec<T>: HostMemory,
        {
            HostTensor::from_vec(t.data.iter().map(|&w| value(w)).collect(), &t.dims)
        }
        match self.dtype {
            DType::Bool => {
                let bytes: Vec<u8> = self
                    .data
                    .iter()
                    .map(|w| u8::from(w.as_int() != 0))
                    .collect();
                HostTensor::from_bytes(DType::Bool, &self.dims, &bytes).map(HostTensor::into_owned)
            }
            DType::I8 => write(self, |w| w.as_int() as i8),
            DType::U8 => write(self, |w| w.as_int() as u8),
            DType::I32 => write(self, |w| w.as_int() as i32),
            DType::I64 => write(self, Word::as_int),
            DType::I16 => write(self, |w| w.as_int() as i16),
            DType::U16 => write(self, |w| w.as_int() as u16),
            DType::U32 => write(self, |w| w.as_int() as u32),
            DType::U64 => write(self, |w| w.0),
            DType::F16 => write(self, |w| half::f16::from_f64(w.as_float())),
            DType::BF16 => write(self, |w| half::bf16::from_f64(w.as_float())),
            DType::F32 => write(self, |w| w.as_float() as f32),
            DType::F64 => write(self, Word::as_float),
            DType::F8E4M3 => write(self, |w| F8E4M3::from_f64(w.as_float())),
            DType::F8E5M2 => write(self, |w| F8E5M2::from_value(w.as_float())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_past_2_pow_53_is_exact() {
        let big = i64::MAX - 1;
        let t = HostTensor::from_vec(vec![big, i64::MIN + 1, 3], &[3]).unwrap();
        let tile = Tile::from_host(&t).unwrap();
        assert_eq!(tile.ints().collect::<Vec<_>>(), vec![big, i64::MIN + 1, 3]);
        assert_eq!(
            tile.to_host().unwrap().to_vec::<i64>().unwrap(),
            vec![big, i64::MIN + 1, 3]
        );
        // 2^63 wraps to -2^63 in the integers, as the oracle's rounding does.
        assert_eq!(Word::from_f64(DType::I64, 2f64.powi(63)).as_int(), i64::MIN);
        assert_eq!(Word::from_f64(DType::I8, 130.0).as_int(), -126);
        assert_eq!(Word::from_f64(DType::Bool, f64::NAN).as_int(), 1);
        // An f32 from an i64 rounds once.
        let v = (1i64 << 60) + (1 << 36) + 1;
        assert_eq!(
            Word::from_i64(DType::F32, v).as_float(),
            f64::from(v as f32)
        );
        assert_eq!(Word::int(-5).cast(DType::I64, DType::U8).as_int(), 251);
    }

    #[test]
    fn every_dtype_crosses_to_the_host_and_back() {
        for dtype in DType::ALL {
            let host = HostTensor::random(dtype, &[7], 3, 4.0).unwrap();
            let tile = Tile::from_host(&host).unwrap();
            assert_eq!(tile.to_host().unwrap().bytes(), host.bytes(), "{dtype}");
        }
    }
}
