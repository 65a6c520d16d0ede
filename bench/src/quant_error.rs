//! `tir-bench quant-error`: each weight format's error against the fp16 decoder, for
//! `bench/RESULTS.md` (no GPU: the f64 oracle, `tir_graph::eval`).
//!
//! Takes one decoder layer at the bench's size (h4096, ctx 2048, ffn 11008) with random f16
//! projections (uniform within ±1/√K, so activations keep their scale through the layer) and
//! norms near 1, quantizes the projections into each of [`QUANT_FORMATS`] with the host
//! quantizer (round to nearest, as `tirc quantize` does), runs one decode step at position 0 on
//! the same random input for the fp16 layer and each quantized one, and prints per format the
//! largest absolute difference of the step's output, that over the output's largest value, and
//! the rms difference over the rms change the layer makes to its input (the layer's own
//! contribution, what quantization perturbs). One JSON line per format.

use crate::workloads::QUANT_FORMATS;
use std::collections::BTreeMap;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::models::{self, DecoderConfig};
use tir_graph::quant::quantize::{dequantize, quantize};
use tir_graph::quant::WeightFormat;
use tir_graph::{DType, HostTensor};

/// The decoder layer's size (the bench's decode workloads').
const CFG: DecoderConfig = DecoderConfig {
    hidden: 4096,
    heads: 32,
    context: 2048,
    ffn: 11008,
};

/// The seven projections of the layer: name, K, N.
fn projections() -> [(&'static str, u64, u64); 7] {
    let (h, f) = (CFG.hidden, CFG.ffn);
    [
        ("wq", h, h),
        ("wk", h, h),
        ("wv", h, h),
        ("wo", h, h),
        ("w_gate", h, f),
        ("w_up", h, f),
        ("w_down", f, h),
    ]
}

/// Each projection's f32 values (f16-exact), by name.
type Projections = Vec<(String, Vec<f32>)>;

/// Sources of the oracle, by name.
type Sources = BTreeMap<String, F64Tensor>;

/// The fp16 layer's sources: the projections' f32 values (f16-exact) by name, and the f16
/// sources (projections, norms, the input and position) for the oracle.
fn fp16_sources() -> Result<(Projections, Sources), String> {
    let mut values = Vec::new();
    let mut sources = BTreeMap::new();
    for (i, (name, k, n)) in projections().into_iter().enumerate() {
        let bound = 2.0 / (k as f64).sqrt();
        let t = HostTensor::random(DType::F16, &[k, n], 7 + i as u64, bound)
            .map_err(|e| e.to_string())?;
        let f = t.to_f64();
        values.push((name.to_string(), f.data.iter().map(|&v| v as f32).collect()));
        sources.insert(name.to_string(), f);
    }
    for (seed, norm) in [(30u64, "attn_norm"), (31, "mlp_norm")] {
        let mut t = HostTensor::random(DType::F16, &[CFG.hidden], seed, 0.5)
            .map_err(|e| e.to_string())?
            .to_f64();
        // Near 1, rounded to f16 (the values the graph's f16 parameter holds).
        t.data = t
            .data
            .iter()
            .map(|v| DType::F16.round_value(1.0 + v))
            .collect();
        sources.insert(norm.to_string(), t);
    }
    let x =
        HostTensor::random(DType::F16, &[1, 1, CFG.hidden], 40, 2.0).map_err(|e| e.to_string())?;
    sources.insert("x".into(), x.to_f64());
    sources.insert(
        "pos".into(),
        F64Tensor {
            dtype: DType::I64,
            dims: vec![],
            data: vec![0.0],
        },
    );
    Ok((values, sources))
}

/// The layer's output `y` for `sources`, by the oracle.
fn step(
    graph: &tir_graph::Graph,
    sources: &BTreeMap<String, F64Tensor>,
) -> Result<Vec<f64>, String> {
    let out = evaluate(graph, sources).map_err(|e| e.to_string())?;
    out.outputs
        .get("y")
        .map(|y| y.data.clone())
        .ok_or_else(|| "the decoder layer has no output `y`".to_string())
}

/// The quantized layer's sources: each projection's stored tensors in `format`, the rest as
/// in `base`; and the largest relative rms error of a dequantized projection.
fn quantized_sources(
    format: WeightFormat,
    values: &[(String, Vec<f32>)],
    base: &BTreeMap<String, F64Tensor>,
) -> Result<(BTreeMap<String, F64Tensor>, f64), String> {
    let mut sources = base.clone();
    let mut weight_error = 0f64;
    for ((name, k, n), (_, w)) in projections().into_iter().zip(values) {
        sources.remove(name);
        let stored = quantize(name, w, k, n, format).map_err(|e| e.to_string())?;
        let views: Vec<HostTensor<'_>> = stored.iter().map(|(_, t)| t.view()).collect();
        let back = dequantize(name, format, k, n, &views).map_err(|e| e.to_string())?;
        let (mut diff, mut norm) = (0f64, 0f64);
        for (a, b) in back.iter().zip(w) {
            diff += (f64::from(a.to_f32()) - f64::from(*b)).powi(2);
            norm += f64::from(*b).powi(2);
        }
        weight_error = weight_error.max((diff / norm).sqrt());
        for (part, t) in &stored {
            sources.insert(part.clone(), t.to_f64());
        }
    }
    Ok((sources, weight_error))
}

/// Prints one JSON line per quantized format (see the module doc).
pub fn run() -> Result<(), String> {
    let (values, sources) = fp16_sources()?;
    let fp16 = models::decoder(&CFG, 1).map_err(|e| e.to_string())?;
    let want = step(&fp16, &sources)?;
    let x = &sources["x"].data;
    let rms = |v: &mut dyn Iterator<Item = f64>| {
        let (s, c) = v.fold((0f64, 0usize), |(s, c), d| (s + d * d, c + 1));
        (s / c.max(1) as f64).sqrt()
    };
    let change = rms(&mut want.iter().zip(x).map(|(y, x)| y - x));
    let largest = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    for (name, format) in &QUANT_FORMATS[1..] {
        let (q_sources, weight_error) = quantized_sources(*format, &values, &sources)?;
        let graph = models::quantized_decoder(&CFG, 1, *format).map_err(|e| e.to_string())?;
        let got = step(&graph, &q_sources)?;
        let max_abs = got
            .iter()
            .zip(&want)
            .map(|(g, w)| {
                if g.is_finite() {
                    (g - w).abs()
                } else {
                    f64::INFINITY
                }
            })
            .fold(0f64, f64::max);
        let rms_diff = rms(&mut got.iter().zip(&want).map(|(g, w)| g - w));
        let line = serde_json::json!({
            "format": name,
            "max_abs": max_abs,
            "max_abs_over_largest": max_abs / largest,
            "rms_over_layer_change": rms_diff / change,
            "largest_output": largest,
            "layer_change_rms": change,
            "weight_rms_rel_error": weight_error,
        });
        println!("{line}");
    }
    Ok(())
}
