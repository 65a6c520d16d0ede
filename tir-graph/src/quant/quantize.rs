//! Quantization on the host: a `[K, N]` weight (row-major, the layout `x.matmul(w)` takes) into
//! the tensors of a [`WeightFormat`] (names, dtypes, shapes and bit layouts of the module doc of
//! [`crate::quant`]), and the formats' reference dequantization back to f16.
//!
//! Takes: finite values (a NaN or an infinity is refused, naming the weight). Guarantees, per
//! format, round to nearest (ties to even) and these bounds on `|w − dequantize(w)|`, before the
//! final rounding to f16 (half an f16 ulp of the value on top):
//! - int8, symmetric per output channel `n`: `s = f16(max_k |w| / 127)`, `q = clamp(round(w /
//!   s), −127, 127)`; error ≤ `s / 2` (≤ `s` where `s` rounded down clips the largest value).
//! - FP8 e4m3, `s = max |w| / 448` (f32) per tensor, output channel or 128×128 block; `q =
//!   e4m3(w / s)`, saturating; relative error ≤ 2⁻⁴ above e4m3's subnormals (2⁻⁹ · s absolute
//!   below them).
//! - int4, asymmetric per group of `G` rows of K and one column: `lo = min(w, 0)`, `hi = max(w,
//!   0)`, `s = f16((hi − lo) / 15)`, `z = clamp(round(−lo / s), z₀, 15)`, `q = clamp(round(w /
//!   s) + z, 0, 15)`; error ≤ `s` (`s / 2` except where a rounded `s` or `z` clips an end).
//!   `z₀` is 0 for AWQ and 1 for GPTQ, whose classic format stores `z − 1` in a nibble and so
//!   cannot hold a zero of 0.
//!
//! The dequantization here ([`dequantize`]) is written from the layouts, independently of the
//! graph composites, and computes what they compute: the same roundings in the same order.

use super::{Fp8Scale, QuantError, StoredTensor, WeightFormat, AWQ_ORDER, FP8_BLOCK};
use crate::float8::F8E4M3;
use crate::tensor::HostTensor;
use half::f16;

type Result<T> = std::result::Result<T, QuantError>;

/// A named tensor, as [`quantize`] returns it.
pub type Named = (String, HostTensor<'static>);

/// The largest finite e4m3 value.
const E4M3_MAX: f32 = 448.0;

fn refuse<T>(tensor: &str, reason: String) -> Result<T> {
    Err(QuantError::Layout {
        tensor: tensor.to_string(),
        reason,
    })
}

/// `values` (`[K, N]`, row-major) of the weight `name` quantized into `format`'s tensors, in
/// the order of [`WeightFormat::tensors`].
pub fn quantize(
    name: &str,
    values: &[f32],
    k: u64,
    n: u64,
    format: WeightFormat,
) -> Result<Vec<Named>> {
    let layout = format.tensors(name, k, n)?;
    if u64::try_from(values.len()).ok() != k.checked_mul(n) {
        return refuse(name, format!("has {} values, not {k} × {n}", values.len()));
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return refuse(name, format!("element {i} is {}", values[i]));
    }
    let w = Matrix {
        values,
        k: k as usize,
        n: n as usize,
    };
    let tensors = match format {
        WeightFormat::F16 => {
            let h: Vec<f16> = values.iter().map(|&v| f16::from_f32(v)).collect();
            vec![tensor(h, &layout[0])?]
        }
        WeightFormat::Int8 => {
            let (q, s) = int8(&w);
            vec![tensor(q, &layout[0])?, tensor(s, &layout[1])?]
        }
        WeightFormat::Fp8(scale) => {
            let (q, s) = fp8(&w, scale);
            vec![tensor(q, &layout[0])?, tensor(s, &layout[1])?]
        }
        WeightFormat::Awq { group } => {
            let g = Int4::new(&w, group as usize, 0);
            vec![
                tensor(g.awq_qweight(), &layout[0])?,
                tensor(pack_zeros(&g, &AWQ_ORDER, 0), &layout[1])?,
                tensor(g.scales.clone(), &layout[2])?,
            ]
        }
        WeightFormat::Gptq { group } => {
            let g = Int4::new(&w, group as usize, 1);
            let g_idx: Vec<i32> = (0..w.k).map(|r| (r / g.group) as i32).collect();
            vec![
                tensor(g.gptq_qweight(), &layout[0])?,
                tensor(pack_zeros(&g, &super::SEQUENTIAL_NIBBLE, 1), &layout[1])?,
                tensor(g.scales.clone(), &layout[2])?,
                tensor(g_idx, &layout[3])?,
            ]
        }
    };
    Ok(tensors)
}

fn tensor<T: crate::Element>(data: Vec<T>, stored: &StoredTensor) -> Result<Named>
where
    Vec<T>: crate::HostMemory,
{
    let t = HostTensor::from_vec(data, &stored.dims).map_err(|e| QuantError::Layout {
        tensor: stored.name.clone(),
        reason: e.to_string(),
    })?;
    Ok((stored.name.clone(), t))
}

/// A `[K, N]` row-major weight.
struct Matrix<'a> {
    values: &'a [f32],
    k: usize,
    n: usize,
}

impl Matrix<'_> {
    fn at(&self, k: usize, n: usize) -> f32 {
        self.values[k * self.n + n]
    }
}

/// A positive f16 scale for `value` (≥ 0): `value` rounded, never 0 (1 for an all-zero range,
/// the least subnormal where `value` underflows).
fn f16_scale(value: f32) -> f16 {
    let s = f16::from_f32(value);
    if value == 0.0 {
        f16::ONE
    } else if s.to_f32() <= 0.0 {
        f16::from_bits(1)
    } else {
        s
    }
}

fn int8(w: &Matrix) -> (Vec<i8>, Vec<f16>) {
    let scales: Vec<f16> = (0..w.n)
        .map(|n| {
            let amax = (0..w.k).map(|k| w.at(k, n).abs()).fold(0f32, f32::max);
            f16_scale(amax / 127.0)
        })
        .collect();
    let q = (0..w.k * w.n)
        .map(|i| {
            let s = scales[i % w.n].to_f32();
            (w.values[i] / s).round_ties_even().clamp(-127.0, 127.0) as i8
        })
        .collect();
    (q, scales)
}

/// The f32 scale that maps `amax` to e4m3's largest value (1 for 0).
fn fp8_scale(amax: f32) -> f32 {
    if amax == 0.0 {
        1.0
    } else {
        (amax / E4M3_MAX).max(f32::MIN_POSITIVE)
    }
}

/// The weight transposed to `[N, K]` in e4m3 and its scales (f32, in the layout of `scale`).
fn fp8(w: &Matrix, scale: Fp8Scale) -> (Vec<F8E4M3>, Vec<f32>) {
    let b = FP8_BLOCK as usize;
    let (nb, kb) = (w.n.div_ceil(b), w.k.div_ceil(b));
    let amax = |ns: std::ops::Range<usize>, ks: std::ops::Range<usize>| {
        ns.flat_map(|n| ks.clone().map(move |k| (n, k)))
            .map(|(n, k)| w.at(k, n).abs())
            .fold(0f32, f32::max)
    };
    let scales: Vec<f32> = match scale {
        Fp8Scale::Tensor => vec![fp8_scale(amax(0..w.n, 0..w.k))],
        Fp8Scale::Row => (0..w.n)
            .map(|n| fp8_scale(amax(n..n + 1, 0..w.k)))
            .collect(),
        Fp8Scale::Block => (0..nb * kb)
            .map(|i| {
                let (bn, bk) = (i / kb, i % kb);
                let ns = bn * b..((bn + 1) * b).min(w.n);
                fp8_scale(amax(ns, bk * b..((bk + 1) * b).min(w.k)))
            })
            .collect(),
    };
    let scale_of = |n: usize, k: usize| match scale {
        Fp8Scale::Tensor => scales[0],
        Fp8Scale::Row => scales[n],
        Fp8Scale::Block => scales[(n / b) * kb + k / b],
    };
    let q = (0..w.n * w.k)
        .map(|i| {
            let (n, k) = (i / w.k, i % w.k);
            F8E4M3::from_f64(f64::from(w.at(k, n) / scale_of(n, k)))
        })
        .collect();
    (q, scales)
}

/// An int4 quantization: `q[k, n]` and `z[g, n]` in `0..16`, `scales[g, n]`.
struct Int4 {
    k: usize,
    n: usize,
    group: usize,
    q: Vec<u8>,
    zeros: Vec<u8>,
    scales: Vec<f16>,
}

impl Int4 {
    /// `w` quantized per group of `group` rows (which divides K: [`WeightFormat::tensors`]
    /// checked it), zeros at least `z_min`.
    fn new(w: &Matrix, group: usize, z_min: u8) -> Int4 {
        let groups = w.k / group;
        let (mut zeros, mut scales) = (Vec::new(), Vec::new());
        for g in 0..groups {
            for n in 0..w.n {
                let rows = (g * group..(g + 1) * group).map(|k| w.at(k, n));
                let lo = rows.clone().fold(0f32, f32::min);
                let hi = rows.fold(0f32, f32::max);
                let s = f16_scale((hi - lo) / 15.0);
                let z = (-lo / s.to_f32()).round_ties_even();
                zeros.push(z.clamp(f32::from(z_min), 15.0) as u8);
                scales.push(s);
            }
        }
        let q = (0..w.k * w.n)
            .map(|i| {
                let (k, n) = (i / w.n, i % w.n);
                let at = (k / group) * w.n + n;
                let z = f32::from(zeros[at]);
                ((w.values[i] / scales[at].to_f32()).round_ties_even() + z).clamp(0.0, 15.0) as u8
            })
            .collect();
        Int4 {
            k: w.k,
            n: w.n,
            group,
            q,
            zeros,
            scales,
        }
    }

    /// AWQ's `qweight: i32[K, N/8]`: nibble `i` of word `(r, j)` holds column `8j +
    /// AWQ_ORDER[i]`.
    fn awq_qweight(&self) -> Vec<i32> {
        pack_rows_of(&self.q, self.n, &AWQ_ORDER, 0)
    }

    /// GPTQ's `qweight: i32[K/8, N]`: nibble `i` of word `(r, n)` holds row `8r + i`.
    fn gptq_qweight(&self) -> Vec<i32> {
        (0..self.k / 8 * self.n)
            .map(|w| {
                let (r, n) = (w / self.n, w % self.n);
                let word = (0..8).fold(0u32, |word, i| {
                    word | u32::from(self.q[(8 * r + i) * self.n + n]) << (4 * i)
                });
                word as i32
            })
            .collect()
    }
}

/// Rows of `cols` nibble values packed along the row: nibble `i` of word `j` holds element
/// `8j + order[i]`, minus `minus` (modulo 16).
fn pack_rows_of(values: &[u8], cols: usize, order: &[u32; 8], minus: u8) -> Vec<i32> {
    values
        .chunks(cols)
        .flat_map(|row| {
            row.chunks(8).map(|eight| {
                let word = order.iter().enumerate().fold(0u32, |word, (i, &c)| {
                    let v = eight[c as usize].wrapping_sub(minus) & 15;
                    word | u32::from(v) << (4 * i)
                });
                word as i32
            })
        })
        .collect()
}

/// `qzeros: i32[K/G, N/8]` in `order`, each zero minus `minus`.
fn pack_zeros(g: &Int4, order: &[u32; 8], minus: u8) -> Vec<i32> {
    pack_rows_of(&g.zeros, g.n, order, minus)
}

/// The nibble of `word` at position `i`.
fn nibble(word: i32, i: u32) -> i32 {
    (word >> (4 * i)) & 15
}

/// A stored tensor's elements, checked against the layout.
fn part<'a, T: crate::Element>(
    tensors: &'a [HostTensor<'_>],
    i: usize,
    s: &StoredTensor,
) -> Result<&'a [T]> {
    let t = tensors.get(i).ok_or_else(|| QuantError::Layout {
        tensor: s.name.clone(),
        reason: "is missing".into(),
    })?;
    if t.dtype() != s.dtype || t.dims() != s.dims.as_slice() {
        return refuse(
            &s.name,
            format!(
                "is {}, the format wants {}",
                t.type_name(),
                crate::tensor::type_name(s.dtype, &s.dims)
            ),
        );
    }
    t.as_slice::<T>().map_err(|e| QuantError::Layout {
        tensor: s.name.clone(),
        reason: e.to_string(),
    })
}

/// The format's reference dequantization of a `[K, N]` weight from its `tensors` (in the order
/// of [`WeightFormat::tensors`]) to f16 `[K, N]`, row-major.
pub fn dequantize(
    name: &str,
    format: WeightFormat,
    k: u64,
    n: u64,
    tensors: &[HostTensor<'_>],
) -> Result<Vec<f16>> {
    let layout = format.tensors(name, k, n)?;
    let (k, n) = (k as usize, n as usize);
    let out = match format {
        WeightFormat::F16 => part::<f16>(tensors, 0, &layout[0])?.to_vec(),
        WeightFormat::Int8 => {
            let (q, s) = (
                part::<i8>(tensors, 0, &layout[0])?,
                part::<f16>(tensors, 1, &layout[1])?,
            );
            (0..k * n)
                .map(|i| f16::from_f32(f32::from(q[i]) * s[i % n].to_f32()))
                .collect()
        }
        WeightFormat::Fp8(scale) => {
            let q = part::<F8E4M3>(tensors, 0, &layout[0])?;
            let s = part::<f32>(tensors, 1, &layout[1])?;
            let b = FP8_BLOCK as usize;
            (0..k * n)
                .map(|i| {
                    let (kk, nn) = (i / n, i % n);
                    let sc = match scale {
                        Fp8Scale::Tensor => s[0],
                        Fp8Scale::Row => s[nn],
                        Fp8Scale::Block => s[(nn / b) * k.div_ceil(b) + kk / b],
                    };
                    f16::from_f32(q[nn * k + kk].to_f64() as f32 * sc)
                })
                .collect()
        }
        WeightFormat::Awq { group } => {
            let q = part::<i32>(tensors, 0, &layout[0])?;
            let z = part::<i32>(tensors, 1, &layout[1])?;
            let s = part::<f16>(tensors, 2, &layout[2])?;
            let g = group as usize;
            (0..k * n)
                .map(|i| {
                    let (kk, nn) = (i / n, i % n);
                    let at = |row: usize| row * (n / 8) + nn / 8;
                    let nib = super::AWQ_NIBBLE[nn % 8];
                    let d = nibble(q[at(kk)], nib) - nibble(z[at(kk / g)], nib);
                    f16::from_f32(d as f32 * s[(kk / g) * n + nn].to_f32())
                })
                .collect()
        }
        WeightFormat::Gptq { .. } => {
            let q = part::<i32>(tensors, 0, &layout[0])?;
            let z = part::<i32>(tensors, 1, &layout[1])?;
            let s = part::<f16>(tensors, 2, &layout[2])?;
            let g_idx = part::<i32>(tensors, 3, &layout[3])?;
            let groups = layout[2].dims[0] as usize;
            let mut out = Vec::with_capacity(k * n);
            for (kk, &gi) in g_idx.iter().enumerate() {
                let g = usize::try_from(gi).ok().filter(|&g| g < groups);
                let Some(g) = g else {
                    return refuse(
                        &layout[3].name,
                        format!("entry {kk} is {gi}, not a group below {groups}"),
                    );
                };
                for nn in 0..n {
                    let qv = nibble(q[(kk / 8) * n + nn], (kk % 8) as u32);
                    let zv = nibble(z[g * (n / 8) + nn / 8], (nn % 8) as u32) + 1;
                    out.push(f16::from_f32((qv - zv) as f32 * s[g * n + nn].to_f32()));
                }
            }
            out
        }
    };
    Ok(out)
}

/// The largest error [`quantize`] promises for element `(k, n)` of a `[K, N]` weight whose value
/// is `value`, quantized into `stored` of `format` (see the module doc), before the final f16
/// rounding: `s` for int4 and int8 (their
/// scale), `2⁻⁴ |w| + 2⁻⁹ s` for FP8.
pub fn error_bound(
    format: WeightFormat,
    stored: &[HostTensor<'_>],
    k: u64,
    n: u64,
    value: f32,
) -> Option<f32> {
    let (k, n) = (k as usize, n as usize);
    let f16_at =
        |t: &HostTensor<'_>, i: usize| t.as_slice::<f16>().ok()?.get(i).map(|v| v.to_f32());
    match format {
        WeightFormat::F16 => Some(0.0),
        WeightFormat::Int8 => f16_at(stored.get(1)?, n),
        WeightFormat::Awq { group } | WeightFormat::Gptq { group } => {
            let cols = stored.get(2)?.dims().get(1).copied()? as usize;
            f16_at(stored.get(2)?, (k / group as usize) * cols + n)
        }
        WeightFormat::Fp8(scale) => {
            let s = stored.get(1)?.as_slice::<f32>().ok()?;
            let b = FP8_BLOCK as usize;
            let sc = match scale {
                Fp8Scale::Tensor => s.first()?,
                Fp8Scale::Row => s.get(n)?,
                Fp8Scale::Block => {
                    let kb = stored.get(1)?.dims().get(1).copied()? as usize;
                    s.get((n / b) * kb + k / b)?
                }
            };
            Some(value.abs() / 16.0 + sc / 512.0)
        }
    }
}
