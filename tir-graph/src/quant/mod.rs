//! Quantized weights: the on-disk layouts of int8, FP8, AWQ and GPTQ checkpoints, and their
//! dequantization as composites of existing IR ops (casts, integer shifts and masks,
//! broadcasts, reshapes, a gather for GPTQ's act-order), so the oracle computes it exactly and
//! fusion sees ordinary ops.
//!
//! Takes: a weight's tensors as a checkpoint stores them (parameters of a graph, in the
//! [`WeightFormat`]'s names, dtypes and shapes). Guarantees: an `f16[K, N]` tensor, the layout
//! `x.matmul(w)` takes, equal element by element to the format's reference dequantization:
//!
//! | format | tensors (`{name}.…`) | value of `w[k, n]` |
//! |---|---|---|
//! | int8 | `qweight: i8[K, N]`, `scales: f16[N]` | `f16(q[k, n] · s[n])` |
//! | FP8 | `weight: f8e4m3[N, K]`, `weight_scale: f32` scalar, `[1]` or `[N, 1]` | `f16(f32(q[n, k] · s))` |
//! | FP8 block | `weight: f8e4m3[N, K]`, `weight_scale_inv: f32[⌈N/128⌉, ⌈K/128⌉]` | `f16(f32(q[n, k] · s[n/128, k/128]))` |
//! | AWQ | `qweight: i32[K, N/8]`, `qzeros: i32[K/G, N/8]`, `scales: f16[K/G, N]` | `f16((q − z[k/G]) · s[k/G, n])` |
//! | GPTQ | `qweight: i32[K/8, N]`, `qzeros: i32[K/G, N/8]`, `scales: f16[K/G, N]`, `g_idx: i32[K]` | `f16((q − (z + 1)) · s[g, n])`, `g = g_idx[k]` |
//!
//! The FP8 layouts are PyTorch's `Linear` (`[out, in]` = `[N, K]`, transposed here); the scale
//! multiplies (DeepSeek-V3's `weight_scale_inv` is, despite its name, multiplied too).
//!
//! **Nibble orders** (a 4-bit value is `(word >> 4i) & 15`, nibble `i` = bits `4i..4i+3`),
//! verified against the packers upstream:
//! - AWQ (AutoAWQ `awq/modules/linear/gemm.py`, `WQLinear_GEMM.from_linear`: `qweight[:, col]
//!   |= intweight[:, col * 8 + order_map[i]] << (i * 4)` with `order_map = [0, 2, 4, 6, 1, 3,
//!   5, 7]`; unpacked by `awq/utils/packing_utils.py` with `AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2,
//!   6, 3, 7]`): nibble `i` of word `j` holds column `8j + [0, 2, 4, 6, 1, 3, 5, 7][i]`, so
//!   column `8j + c` is nibble `[0, 4, 1, 5, 2, 6, 3, 7][c]`. `qzeros` is packed the same way;
//!   zeros are stored as they are.
//! - GPTQ (AutoGPTQ `auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py`, `QuantLinear.pack`:
//!   `qweight[row] |= intweight[j] << (4 * (j - i))` over rows `j = 8·row ..`, and `zeros -= 1`
//!   then `qzeros[:, col] |= zeros[:, j] << (4 * (j - i))`; `forward` adds the 1 back): nibble
//!   `i` of `qweight` word `(r, n)` holds row `8r + i`; nibble `i` of `qzeros` word `(g, c)`
//!   holds column `8c + i`, as `zero − 1` (so a zero of 0 is stored as 15 and reads as 16:
//!   the classic format cannot hold it, and [`quantize`] never writes it).
//!
//! Refused, with one line naming the tensor ([`QuantError::Layout`]): a wrong dtype or rank, a
//! symbolic dim, shapes that disagree, `N` (or GPTQ's `K`) not divisible by 8, `K` not divisible
//! by the group count. A GPTQ `g_idx` entry out of range is the gather's run-time refusal.

pub mod quantize;

use crate::{shape, DType, GraphBuilder, GraphError, Shape, Tensor};

/// Why a quantized weight could not be declared or dequantized.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// A tensor does not have the format's dtype or shape.
    #[error("tensor {tensor}: {reason}")]
    Layout {
        /// The tensor's name.
        tensor: String,
        /// What is wrong, and what the format wants.
        reason: String,
    },
    /// Building the composite failed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

type Result<T> = std::result::Result<T, QuantError>;

/// How an FP8 weight is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Scale {
    /// One `weight_scale` for the whole tensor (stored as `f32[1]`).
    Tensor,
    /// A `weight_scale: f32[N, 1]`, one per output channel (row of the `[N, K]` weight).
    Row,
    /// A `weight_scale_inv: f32[⌈N/128⌉, ⌈K/128⌉]`, one per 128×128 block (DeepSeek-V3).
    Block,
}

/// The side of FP8's square scale blocks (DeepSeek-V3's `weight_block_size` [128, 128]).
pub const FP8_BLOCK: u64 = 128;

/// How a weight is stored: plain f16, or one of the quantized layouts of the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// `f16[K, N]` under the weight's own name.
    #[default]
    F16,
    /// Symmetric int8 with an f16 scale per output channel.
    Int8,
    /// `f8e4m3` with f32 scales.
    Fp8(Fp8Scale),
    /// AWQ int4 (GEMM packing), asymmetric, `group` rows of K per scale.
    Awq {
        /// Rows of K sharing a scale and zero.
        group: u64,
    },
    /// GPTQ int4 (AutoGPTQ's packing, zeros stored minus one), `group` rows of K per scale
    /// (the group of each row is read from `g_idx`).
    Gptq {
        /// Rows of K sharing a scale and zero.
        group: u64,
    },
}

/// One tensor a weight is stored as: its full name, dtype and dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredTensor {
    /// `{weight name}.{part}` (the weight's name alone for f16).
    pub name: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its dims.
    pub dims: Vec<u64>,
}

impl WeightFormat {
    /// The tensors that store a `[K, N]` weight named `name` in this format, in the order
    /// [`WeightFormat::declare`] declares them; refuses sizes the format cannot hold.
    pub fn tensors(&self, name: &str, k: u64, n: u64) -> Result<Vec<StoredTensor>> {
        let part = |p: &str, dtype: DType, dims: &[u64]| StoredTensor {
            name: format!("{name}.{p}"),
            dtype,
            dims: dims.to_vec(),
        };
        Ok(match *self {
            WeightFormat::F16 => vec![StoredTensor {
                name: name.to_string(),
                dtype: DType::F16,
                dims: vec![k, n],
            }],
            WeightFormat::Int8 => vec![
                part("qweight", DType::I8, &[k, n]),
                part("scales", DType::F16, &[n]),
            ],
            WeightFormat::Fp8(scale) => {
                let s = match scale {
                    Fp8Scale::Tensor => part("weight_scale", DType::F32, &[1]),
                    Fp8Scale::Row => part("weight_scale", DType::F32, &[n, 1]),
                    Fp8Scale::Block => part(
                        "weight_scale_inv",
                        DType::F32,
                        &[n.div_ceil(FP8_BLOCK), k.div_ceil(FP8_BLOCK)],
                    ),
                };
                vec![part("weight", DType::F8E4M3, &[n, k]), s]
            }
            WeightFormat::Awq { group } => {
                let groups = int4_groups(name, k, n, group, false)?;
                vec![
                    part("qweight", DType::I32, &[k, n / 8]),
                    part("qzeros", DType::I32, &[groups, n / 8]),
                    part("scales", DType::F16, &[groups, n]),
                ]
            }
            WeightFormat::Gptq { group } => {
                let groups = int4_groups(name, k, n, group, true)?;
                vec![
                    part("qweight", DType::I32, &[k / 8, n]),
                    part("qzeros", DType::I32, &[groups, n / 8]),
                    part("scales", DType::F16, &[groups, n]),
                    part("g_idx", DType::I32, &[k]),
                ]
            }
        })
    }

    /// Declares the parameters that store a `[K, N]` weight named `name` in this format and
    /// returns the weight dequantized to `f16[K, N]`.
    pub fn declare(&self, g: &GraphBuilder, name: &str, k: u64, n: u64) -> Result<Tensor> {
        let params = self
            .tensors(name, k, n)?
            .into_iter()
            .map(|t| g.parameter(&t.name, t.dtype, Shape::of(&t.dims)))
            .collect::<std::result::Result<Vec<Tensor>, GraphError>>()?;
        match (*self, params.as_slice()) {
            (WeightFormat::F16, [w]) => Ok(w.clone()),
            (WeightFormat::Int8, [q, s]) => int8(name, q, s),
            (WeightFormat::Fp8(Fp8Scale::Block), [w, s]) => fp8_block(name, w, s),
            (WeightFormat::Fp8(_), [w, s]) => fp8(name, w, s),
            (WeightFormat::Awq { .. }, [q, z, s]) => awq(name, q, z, s),
            (WeightFormat::Gptq { .. }, [q, z, s, g_idx]) => gptq(name, q, z, s, g_idx),
            _ => unreachable!("tensors() lists each format's parts"),
        }
    }
}

/// The number of groups of an int4 `[K, N]` weight, checking what the packing needs.
fn int4_groups(name: &str, k: u64, n: u64, group: u64, packed_k: bool) -> Result<u64> {
    let refuse = |reason: String| {
        Err(QuantError::Layout {
            tensor: name.to_string(),
            reason,
        })
    };
    if group == 0 || !k.is_multiple_of(group) {
        return refuse(format!(
            "K = {k} is not a whole number of groups of {group}"
        ));
    }
    if !n.is_multiple_of(8) {
        return refuse(format!(
            "N = {n} is not a multiple of 8 (eight nibbles a word)"
        ));
    }
    if packed_k && !k.is_multiple_of(8) {
        return refuse(format!(
            "K = {k} is not a multiple of 8 (eight nibbles a word)"
        ));
    }
    Ok(k / group)
}

fn layout<T>(name: &str, part: &str, reason: String) -> Result<T> {
    Err(QuantError::Layout {
        tensor: format!("{name}.{part}"),
        reason,
    })
}

/// The static dims of `t`, which must be of `dtype` and `rank`.
fn dims_of(name: &str, part: &str, t: &Tensor, dtype: DType, rank: usize) -> Result<Vec<u64>> {
    let ty = t.ty();
    let dims: Option<Vec<u64>> = ty.shape.dims().iter().map(|d| d.as_static()).collect();
    match dims {
        Some(d) if ty.dtype == dtype && d.len() == rank => Ok(d),
        _ => layout(
            name,
            part,
            format!("is {ty}, the format wants {dtype} of rank {rank} with static dims"),
        ),
    }
}

/// `want` or a refusal naming `{name}.{part}` and its dims.
fn expect_dims(name: &str, part: &str, got: &[u64], want: &[u64]) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        layout(
            name,
            part,
            format!("has dims {got:?}, the format wants {want:?}"),
        )
    }
}

/// Int8 per output channel: `f16(q · s[n])`.
pub fn int8(name: &str, qweight: &Tensor, scales: &Tensor) -> Result<Tensor> {
    let d = dims_of(name, "qweight", qweight, DType::I8, 2)?;
    let s = dims_of(name, "scales", scales, DType::F16, 1)?;
    expect_dims(name, "scales", &s, &[d[1]])?;
    // i8 to f16 is exact; the product rounds once, as f32 then f16 would.
    Ok(qweight.cast(DType::F16)?.mul(scales)?)
}

/// The float8 weight `[N, K]`'s dims, checked.
fn fp8_weight(name: &str, weight: &Tensor) -> Result<(u64, u64)> {
    let ty = weight.ty();
    if ty.dtype.float8().is_none() {
        return layout(
            name,
            "weight",
            format!("is {ty}, the format wants f8e4m3 or f8e5m2"),
        );
    }
    let d = dims_of(name, "weight", weight, ty.dtype, 2)?;
    Ok((d[0], d[1]))
}

/// `f16(f32(q) · s)` transposed to `[K, N]`, with `s` broadcast against `[N, K]`. The product
/// is cast to its own dtype so that the oracle, which keeps products unrounded, rounds it to f32
/// first as the backends do.
fn fp8_scaled(weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    Ok(weight
        .cast(DType::F32)?
        .mul(scale)?
        .cast(DType::F32)?
        .cast(DType::F16)?
        .transpose()?)
}

/// FP8 with a per-tensor (`weight_scale` a scalar or `[1]`) or per-row (`[N, 1]`) scale.
pub fn fp8(name: &str, weight: &Tensor, weight_scale: &Tensor) -> Result<Tensor> {
    let (n, _) = fp8_weight(name, weight)?;
    let rank = weight_scale.rank();
    let s = dims_of(name, "weight_scale", weight_scale, DType::F32, rank)?;
    if !(s.is_empty() || s == [1] || s == [n, 1]) {
        return layout(
            name,
            "weight_scale",
            format!("has dims {s:?}, the format wants [], [1] (per tensor) or [{n}, 1] (per row)"),
        );
    }
    fp8_scaled(weight, weight_scale)
}

/// FP8 with a `weight_scale_inv` per 128×128 block (edge blocks cover what is left).
pub fn fp8_block(name: &str, weight: &Tensor, weight_scale_inv: &Tensor) -> Result<Tensor> {
    let (n, k) = fp8_weight(name, weight)?;
    let s = dims_of(name, "weight_scale_inv", weight_scale_inv, DType::F32, 2)?;
    let (nb, kb) = (n.div_ceil(FP8_BLOCK), k.div_ceil(FP8_BLOCK));
    expect_dims(name, "weight_scale_inv", &s, &[nb, kb])?;
    let b = FP8_BLOCK;
    // Each block's scale repeated over its 128×128 elements, cut to the weight's size.
    let mut full = weight_scale_inv
        .unsqueeze(&[1, 3])?
        .broadcast_to(&shape![nb, b, kb, b])?
        .reshape_to(&shape![nb * b, kb * b])?;
    if nb * b != n || kb * b != k {
        full = full.slice_axis(0, 0, n)?.slice_axis(1, 0, k)?;
    }
    fp8_scaled(weight, &full)
}

/// AWQ's nibble for each column of a word: column `8j + c` is nibble `AWQ_NIBBLE[c]`.
pub const AWQ_NIBBLE: [u32; 8] = [0, 4, 1, 5, 2, 6, 3, 7];
/// AWQ's column for each nibble of a word (AutoAWQ's `AWQ_ORDER`): nibble `i` holds column
/// `8j + AWQ_ORDER[i]`.
pub const AWQ_ORDER: [u32; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
/// Sequential nibbles: element `8j + i` is nibble `i` (GPTQ along K and its zeros along N).
pub const SEQUENTIAL_NIBBLE: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The shift amounts that bring each nibble of `nibbles` to the bottom, as an i32 constant of
/// `dims` (eight elements).
fn shifts(b: &GraphBuilder, nibbles: [u32; 8], dims: &[u64]) -> Result<Tensor> {
    let values: Vec<f64> = nibbles.iter().map(|&i| f64::from(4 * i)).collect();
    Ok(b.constant(DType::I32, Shape::of(dims), &values)?)
}

/// `packed: i32[R, C]` unpacked along its columns to `i32[R, 8C]`: element `(r, 8c + j)` is
/// nibble `nibbles[j]` of word `(r, c)`, in `0..16`.
fn unpack_columns(packed: &Tensor, (r, c): (u64, u64), nibbles: [u32; 8]) -> Result<Tensor> {
    let b = packed.builder();
    let shifted = packed
        .unsqueeze(&[2])?
        .shift_right(&shifts(&b, nibbles, &[1, 1, 8])?)?;
    Ok(shifted
        .bit_and(&b.scalar(DType::I32, 15.0)?)?
        .reshape_to(&shape![r, 8 * c])?)
}

/// `packed: i32[R, C]` unpacked along its rows to `i32[8R, C]`: element `(8r + i, c)` is
/// nibble `i` of word `(r, c)`.
fn unpack_rows(packed: &Tensor, (r, c): (u64, u64)) -> Result<Tensor> {
    let b = packed.builder();
    let shifted =
        packed
            .unsqueeze(&[1])?
            .shift_right(&shifts(&b, SEQUENTIAL_NIBBLE, &[1, 8, 1])?)?;
    Ok(shifted
        .bit_and(&b.scalar(DType::I32, 15.0)?)?
        .reshape_to(&shape![8 * r, c])?)
}

/// `x: [K/G, N]` with each row repeated over its group's `G` rows: `[K, N]`.
fn per_row(x: &Tensor, groups: u64, group: u64, n: u64) -> Result<Tensor> {
    Ok(x.unsqueeze(&[1])?
        .broadcast_to(&shape![groups, group, n])?
        .reshape_to(&shape![groups * group, n])?)
}

/// The int4 formats' common checks: `qzeros: i32[groups, N/8]` and `scales: f16[groups, N]`
/// for a `[K, N]` weight; returns `groups`.
fn int4_parameters(name: &str, k: u64, n: u64, qzeros: &Tensor, scales: &Tensor) -> Result<u64> {
    let s = dims_of(name, "scales", scales, DType::F16, 2)?;
    let z = dims_of(name, "qzeros", qzeros, DType::I32, 2)?;
    let groups = s[0];
    if s[1] != n || groups == 0 || !k.is_multiple_of(groups) {
        return layout(
            name,
            "scales",
            format!("has dims {s:?}, the format wants [K / group, {n}] with K = {k}"),
        );
    }
    expect_dims(name, "qzeros", &z, &[groups, n / 8])?;
    Ok(groups)
}

/// `f16(q − z) · s`: the difference is exact in i32 and in f16 (|q − z| ≤ 16); the product
/// rounds once, as AutoAWQ's f16 `(iweight - izeros) * scales` does.
fn scaled(q: &Tensor, z: &Tensor, s: &Tensor) -> Result<Tensor> {
    Ok(q.sub(z)?.cast(DType::F16)?.mul(s)?)
}

/// AWQ int4 (GEMM packing, order of the module doc): `(q − z) · s` per group of `K / groups`
/// rows, the group count read from `scales`.
pub fn awq(name: &str, qweight: &Tensor, qzeros: &Tensor, scales: &Tensor) -> Result<Tensor> {
    let q = dims_of(name, "qweight", qweight, DType::I32, 2)?;
    let (k, n) = (q[0], 8 * q[1]);
    let groups = int4_parameters(name, k, n, qzeros, scales)?;
    let group = k / groups;
    let q = unpack_columns(qweight, (k, n / 8), AWQ_NIBBLE)?;
    let z = unpack_columns(qzeros, (groups, n / 8), AWQ_NIBBLE)?;
    let z = per_row(&z, groups, group, n)?;
    scaled(&q, &z, &per_row(scales, groups, group, n)?)
}

/// GPTQ int4 (AutoGPTQ's packing): `(q − (z + 1)) · s` with row `k`'s zero and scale from group
/// `g_idx[k]` (act-order; sequential checkpoints store `k / G`).
pub fn gptq(
    name: &str,
    qweight: &Tensor,
    qzeros: &Tensor,
    scales: &Tensor,
    g_idx: &Tensor,
) -> Result<Tensor> {
    let q = dims_of(name, "qweight", qweight, DType::I32, 2)?;
    let (k, n) = (8 * q[0], q[1]);
    if !n.is_multiple_of(8) {
        return layout(
            name,
            "qweight",
            format!("has N = {n} columns, not a multiple of 8 (eight nibbles a zeros word)"),
        );
    }
    let groups = int4_parameters(name, k, n, qzeros, scales)?;
    let gi = dims_of(name, "g_idx", g_idx, DType::I32, 1)?;
    expect_dims(name, "g_idx", &gi, &[k])?;
    let q = unpack_rows(qweight, (k / 8, n))?;
    // The classic format stores each zero minus one.
    let z = unpack_columns(qzeros, (groups, n / 8), SEQUENTIAL_NIBBLE)?
        .add(&qzeros.builder().scalar(DType::I32, 1.0)?)?;
    scaled(&q, &z.gather(g_idx, 0)?, &scales.gather(g_idx, 0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn awq_orders_are_inverse_permutations() {
        for (i, &col) in AWQ_ORDER.iter().enumerate() {
            assert_eq!(AWQ_NIBBLE[col as usize], i as u32);
        }
    }

    #[test]
    fn layouts_refuse_sizes_they_cannot_hold() {
        let e = WeightFormat::Awq { group: 32 }
            .tensors("l0.wq", 64, 12)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tensor l0.wq: N = 12"), "{e}");
        let e = WeightFormat::Gptq { group: 48 }
            .tensors("w", 64, 16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("groups of 48"), "{e}");
        let fp8 = WeightFormat::Fp8(Fp8Scale::Block)
            .tensors("w", 200, 130)
            .unwrap();
        assert_eq!(fp8[0].dims, [130, 200]);
        assert_eq!(fp8[1].name, "w.weight_scale_inv");
        assert_eq!(fp8[1].dims, [2, 2]);
    }
}
