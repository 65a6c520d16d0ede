//! Input values of cases: deterministic by seed, exact in their dtype, never all zeros, and drawn
//! from a range where the op under test is well-conditioned and away from its discontinuities.

use std::collections::BTreeMap;
use tir_graph::eval::{concrete_dims, F64Tensor};
use tir_graph::{DType, Graph};

/// How the values of one tensor are drawn.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Floats in [-2, 2); integers over [`int_range`] (wrap-around is exercised, the oracle stays
    /// exact); bool either.
    Default,
    /// Floats uniform in `[lo, hi)`; integers uniform in `lo..=hi` (clamped to the dtype).
    Uniform(f64, f64),
    /// Floats in ±[0.5, 2.5): away from zero (divisors, reciprocals); integers as `Default`.
    AwayFromZero,
    /// Floats `k + 0.25` or `k + 0.75` for integers `k` in `lo..hi`: exact in every float dtype
    /// and a quarter away from every integer (floor, ceil, casts to integers); integers as
    /// `Default`.
    OffGrid(i64, i64),
    /// Multiples of 0.5 in [-2, 2] (integers in -4..=4): many ties, for comparisons, max, argmax.
    Halves,
    /// Integers whose products stay below 2^53 in magnitude even summed a thousand times (the
    /// oracle holds values as `f64`): the full range of `i8`/`u8`, ±2^20 for `i32`/`i64`.
    Products,
    /// Integers in `0..n` (gather indices).
    Below(u64),
    /// Each element one of these values, drawn at random (rounded to the dtype).
    Choice(Vec<f64>),
    /// These values, cycled in order (rounded to the dtype).
    List(Vec<f64>),
}

/// The integer range [`Values::Default`] draws from: all of the 8-, 16- and 32-bit dtypes
/// (sums of a thousand stay exact in `f64`), and ±2^40 for `i64` (`0..2^40` for `u64`: exact
/// sums, no overflow).
pub fn int_range(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
        DType::U16 => (0.0, f64::from(u16::MAX)),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::U32 => (0.0, f64::from(u32::MAX)),
        DType::I64 => (-(2f64.powi(40)), 2f64.powi(40)),
        DType::U64 => (0.0, 2f64.powi(40)),
        _ => (0.0, 1.0),
    }
}

/// The splitmix64 generator: small, fast and plenty for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `lo..=hi`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (u128::from(self.next_u64()) % span) as i128) as i64
    }
}

/// FNV-1a of `parts`, for per-tensor seeds.
pub fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// One value of `dtype` drawn from `values`; `i` is the element's position (for lists).
fn draw(dtype: DType, values: &Values, rng: &mut Rng, i: usize) -> f64 {
    if dtype == DType::Bool {
        return match values {
            Values::List(l) => f64::from(u8::from(l[i % l.len()] != 0.0)),
            Values::Choice(l) => {
                f64::from(u8::from(l[rng.int(0, l.len() as i64 - 1) as usize] != 0.0))
            }
            _ => (rng.next_u64() >> 63) as f64,
        };
    }
    let int = |rng: &mut Rng, lo: f64, hi: f64| {
        let (dlo, dhi) = int_range_full(dtype);
        let (lo, hi) = (lo.ceil().max(dlo), hi.floor().min(dhi));
        rng.int(lo as i64, hi as i64) as f64
    };
    let v = match values {
        Values::List(l) => l[i % l.len()],
        Values::Choice(l) => l[rng.int(0, l.len() as i64 - 1) as usize],
        Values::Below(n) => rng.int(0, *n as i64 - 1) as f64,
        _ if dtype.is_int() => match values {
            Values::Uniform(lo, hi) => int(rng, *lo, *hi),
            Values::Halves => int(rng, -4.0, 4.0),
            Values::Products => int(rng, -(2f64.powi(20)), 2f64.powi(20)),
            _ => {
                let (lo, hi) = int_range(dtype);
                int(rng, lo, hi)
            }
        },
        Values::Default => rng.unit() * 4.0 - 2.0,
        Values::Uniform(lo, hi) => lo + rng.unit() * (hi - lo),
        Values::AwayFromZero => {
            let m = 0.5 + rng.unit() * 2.0;
            if rng.next_u64() >> 63 == 1 {
                -m
            } else {
                m
            }
        }
        Values::OffGrid(lo, hi) => {
            let k = rng.int(*lo, *hi - 1) as f64;
            k + if rng.next_u64() >> 63 == 1 {
                0.25
            } else {
                0.75
            }
        }
        Values::Halves => rng.int(-4, 4) as f64 * 0.5,
        Values::Products => rng.unit() * 4.0 - 2.0,
    };
    // `+ 0.0` turns -0.0 into +0.0 for integers (F64Tensor wants integers as +0.0).
    let rounded = dtype.round_value(v);
    if dtype.is_int() {
        rounded + 0.0
    } else {
        rounded
    }
}

/// The whole range of an integer dtype (for clamping).
fn int_range_full(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
        DType::U16 => (0.0, f64::from(u16::MAX)),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::U32 => (0.0, f64::from(u32::MAX)),
        DType::I64 => (-(2f64.powi(62)), 2f64.powi(62)),
        DType::U64 => (0.0, 2f64.powi(62)),
        _ => (0.0, 1.0),
    }
}

/// A tensor of `dtype` and `dims` drawn from `values` with `seed`. Unless the values are a
/// list or indices, a draw of all zeros gets a nonzero first element.
pub fn tensor(dtype: DType, dims: &[u64], values: &Values, seed: u64) -> F64Tensor {
    let n: usize = dims.iter().map(|&d| d as usize).product();
    let mut rng = Rng::new(seed);
    let mut data: Vec<f64> = (0..n).map(|i| draw(dtype, values, &mut rng, i)).collect();
    let fixed = matches!(values, Values::List(_) | Values::Below(_));
    if !fixed && !data.is_empty() && data.iter().all(|&v| v == 0.0) {
        data[0] = 1.0;
    }
    F64Tensor {
        dtype,
        dims: dims.to_vec(),
        data,
    }
}

/// Values for every input and parameter of `graph` under the dim binding `dims`: `values_of`
/// names the distribution of each source by name; the seed of each tensor is derived from
/// `seed`, the case name, the run and the source name.
pub fn sources(
    graph: &Graph,
    dims: &BTreeMap<String, u64>,
    values_of: &dyn Fn(&str) -> Values,
    seed: u64,
    case: &str,
    run: usize,
) -> BTreeMap<String, F64Tensor> {
    graph
        .inputs()
        .into_iter()
        .chain(graph.parameters())
        .map(|(name, id)| {
            let ty = graph.ty(id);
            let shape = concrete_dims(&ty.shape, dims)
                .unwrap_or_else(|e| panic!("case {case}: source `{name}`: {e}"));
            let s = hash(&[
                &seed.to_le_bytes(),
                case.as_bytes(),
                &(run as u64).to_le_bytes(),
                name.as_bytes(),
            ]);
            let t = tensor(ty.dtype, &shape, &values_of(&name), s);
            (name, t)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(t: &F64Tensor) -> bool {
        F64Tensor::new(t.dtype, t.dims.clone(), t.data.clone()).is_ok()
    }

    #[test]
    fn values_are_exact_in_their_dtype() {
        let all = [
            Values::Default,
            Values::Uniform(0.25, 2.25),
            Values::AwayFromZero,
            Values::OffGrid(-4, 4),
            Values::Halves,
            Values::Products,
            Values::Below(5),
        ];
        for d in DType::ALL {
            for v in &all {
                let t = tensor(d, &[3, 50], v, 7);
                assert!(exact(&t), "{d} {v:?}: {:?}", t.data);
                assert!(t.data.iter().any(|&x| x != 0.0), "{d} {v:?}");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_tensor() {
        let a = tensor(DType::F16, &[100], &Values::Default, 3);
        let b = tensor(DType::F16, &[100], &Values::Default, 3);
        let c = tensor(DType::F16, &[100], &Values::Default, 4);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn off_grid_values_are_a_quarter_from_integers() {
        let t = tensor(DType::BF16, &[200], &Values::OffGrid(-4, 4), 1);
        assert!(t.data.iter().all(|v| (v - v.floor() - 0.5).abs() == 0.25));
    }
}
