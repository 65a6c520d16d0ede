//! `tirc quantize`: a weights file's 2-D weights quantized into one of the checkpoint layouts of
//! `tir_graph::quant` (int8 per channel, FP8 e4m3 per row or 128×128 block, AWQ or GPTQ int4
//! per group), for users without a quantized checkpoint.
//!
//! Takes: a `.safetensors` file whose 2-D tensors (f16, bf16 or f32) are weights in tir's
//! layout `[K, N]` (what `x.matmul(w)` takes; FP8 is written transposed, `[N, K]`, as the
//! format stores it) and whose 1-D tensors are norms or biases. Guarantees: each 2-D weight
//! `NAME` becomes the format's tensors `NAME.qweight`, `NAME.scales`, ... (rounded to nearest
//! as `tir_graph::quant::quantize` states), each 1-D tensor is copied as it is, in the input's
//! order; the output is written atomically (a temporary file, then a rename), and nothing is
//! written when any tensor is refused: a tensor of another rank, a 2-D tensor of another
//! dtype, or a size the format cannot hold (K not divisible by the group, N not by 8), each
//! named in one line.

use std::path::Path;
use tir_graph::quant::quantize::{quantize, Named};
use tir_graph::quant::{QuantError, WeightFormat};
use tir_graph::weights::{write_safetensors, WeightsError, WeightsFile};
use tir_graph::{DType, HostTensor};

/// Why a file could not be quantized; each message names the file and, where one is at fault,
/// the tensor.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// Reading the input or writing the output failed.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// A tensor is neither a 2-D float weight nor a 1-D tensor.
    #[error("{path}: tensor {name:?} is {ty}: tirc quantize takes 2-D f16, bf16 or f32 weights and copies 1-D tensors")]
    NotAWeight {
        /// The input file.
        path: String,
        /// The tensor.
        name: String,
        /// Its type.
        ty: String,
    },
    /// The format cannot hold a weight (or its values are not finite).
    #[error("{path}: {source}")]
    Quant {
        /// The input file.
        path: String,
        /// What the format refused.
        source: QuantError,
    },
}

/// What [`quantize_file`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantized {
    /// The weights quantized.
    pub weights: usize,
    /// The 1-D tensors copied.
    pub copied: usize,
    /// The input's and the output's sizes in bytes.
    pub bytes: (usize, usize),
}

/// Quantizes the weights of `input` into `format` and writes the result to `output`.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    format: WeightFormat,
) -> Result<Quantized, QuantizeError> {
    let file = WeightsFile::open(input)?;
    let path = input.display().to_string();
    let mut tensors: Vec<Named> = Vec::new();
    let mut summary = Quantized {
        weights: 0,
        copied: 0,
        bytes: (file.size(), 0),
    };
    for (name, t) in file.iter() {
        match t.dims() {
            [_] => {
                tensors.push((name.to_string(), t.clone().into_owned()));
                summary.copied += 1;
            }
            &[k, n] if matches!(t.dtype(), DType::F16 | DType::BF16 | DType::F32) => {
                let values = as_f32(&t);
                let parts = quantize(name, &values, k, n, format).map_err(|source| {
                    QuantizeError::Quant {
                        path: path.clone(),
                        source,
                    }
                })?;
                tensors.extend(parts);
                summary.weights += 1;
            }
            _ => {
                return Err(QuantizeError::NotAWeight {
                    path,
                    name: name.to_string(),
                    ty: t.type_name(),
                })
            }
        }
    }
    let refs: Vec<(&str, &HostTensor<'_>)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(output, &refs)?;
    summary.bytes.1 = std::fs::metadata(output)
        .map(|m| m.len() as usize)
        .unwrap_or(0);
    Ok(summary)
}

/// A float tensor's values as f32 (exact from f16, bf16 and f32).
fn as_f32(t: &HostTensor<'_>) -> Vec<f32> {
    match t.dtype() {
        DType::F32 => t.to_vec::<f32>().unwrap_or_default(),
        DType::F16 => t
            .to_vec::<half::f16>()
            .map(|v| v.iter().map(|x| x.to_f32()).collect())
            .unwrap_or_default(),
        DType::BF16 => t
            .to_vec::<half::bf16>()
            .map(|v| v.iter().map(|x| x.to_f32()).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}
