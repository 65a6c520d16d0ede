//! Quantized weights on the reference backend: products with weights dequantized from every
//! layout of `tir_graph::quant` against the oracle, and a two-layer decoder that reads
//! checkpoints as they are on disk (`Executable::load_weights` of safetensors files made by the
//! host quantizer) against the f16 decoder on the dequantized weights and on the original ones.

use backend_ref::RefBackend;
use half::f16;
use std::collections::BTreeMap;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::models::{self, DecoderConfig};
use tir_graph::quant::quantize::{dequantize, quantize, Named};
use tir_graph::quant::{Fp8Scale, WeightFormat};
use tir_graph::weights::{write_safetensors, WeightsFile};
use tir_graph::{shape, DType, Graph, GraphBuilder, HostTensor};
use tir_lower::testing::RunF64;
use tir_lower::{compile_graph, Backend, Executable, TensorRef};
use tir_opt::Limits;

fn executable(graph: &Graph) -> Box<dyn Executable> {
    let backend = RefBackend::checking();
    let compiled = compile_graph(graph, &backend.target(), &Limits::default()).unwrap();
    backend.compile(&compiled.program).unwrap()
}

/// `x.matmul(w)` with `w` in every format at odd shapes and groups of 32, 64 and 128, random
/// `x` and random quantized tensors (quantized from random weights, so every nibble and scale
/// is as a checkpoint has it): the backend within `2^-8 (|want| + rms(want))` of the oracle,
/// and no NaN.
#[test]
fn dequantized_products_match_the_oracle() {
    let cases = [
        (WeightFormat::Int8, 67, 45),
        (WeightFormat::Fp8(Fp8Scale::Tensor), 33, 50),
        (WeightFormat::Fp8(Fp8Scale::Row), 72, 40),
        (WeightFormat::Fp8(Fp8Scale::Block), 200, 136),
        (WeightFormat::Awq { group: 32 }, 96, 24),
        (WeightFormat::Awq { group: 64 }, 192, 40),
        (WeightFormat::Awq { group: 128 }, 384, 56),
        (WeightFormat::Gptq { group: 32 }, 160, 24),
        (WeightFormat::Gptq { group: 64 }, 192, 72),
        (WeightFormat::Gptq { group: 128 }, 384, 40),
    ];
    for (seed, (format, k, n)) in cases.into_iter().enumerate() {
        let what = format!("{format:?} [{k}, {n}]");
        let g = GraphBuilder::new();
        let x = g.input("x", DType::F16, shape![3, k]).unwrap();
        let w = format.declare(&g, "w", k, n).unwrap();
        g.output("y", &x.matmul(&w).unwrap()).unwrap();
        let graph = g.finish().unwrap();
        let weights = HostTensor::random(DType::F32, &[k, n], seed as u64, 1.0).unwrap();
        let stored = quantize("w", &weights.to_vec::<f32>().unwrap(), k, n, format).unwrap();
        let mut sources: BTreeMap<String, F64Tensor> = stored
            .iter()
            .map(|(name, t)| (name.clone(), t.to_f64()))
            .collect();
        let x = HostTensor::random(DType::F16, &[3, k], 100 + seed as u64, 2.0).unwrap();
        sources.insert("x".into(), x.to_f64());
        let want = &evaluate(&graph, &sources).unwrap().outputs["y"];
        let got = &executable(&graph).run_f64(&sources).unwrap().outputs["y"];
        let rms = (want.data.iter().map(|v| v * v).sum::<f64>() / want.data.len() as f64).sqrt();
        assert!(rms > 0.1, "{what}: the product is {rms} in rms");
        for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
            let bound = 2f64.powi(-8) * (w.abs() + rms);
            assert!((g - w).abs() <= bound, "{what}: y[{i}] = {g}, oracle {w}");
        }
    }
}

fn config() -> DecoderConfig {
    DecoderConfig {
        hidden: 64,
        heads: 4,
        context: 16,
        ffn: 128,
    }
}

const LAYERS: u64 = 2;

/// The seven projections of each layer: name, K, N.
fn projections(cfg: &DecoderConfig) -> Vec<(String, u64, u64)> {
    let (h, f) = (cfg.hidden, cfg.ffn);
    let shapes = [
        ("wq", h, h),
        ("wk", h, h),
        ("wv", h, h),
        ("wo", h, h),
        ("w_gate", h, f),
        ("w_up", h, f),
        ("w_down", f, h),
    ];
    (0..LAYERS)
        .flat_map(|l| shapes.map(|(n, k, c)| (format!("l{l}.{n}"), k, c)))
        .collect()
}

/// The f16 weights of the decoder: projections within ±0.25, norms around 1.
fn f16_weights(cfg: &DecoderConfig) -> Vec<Named> {
    let mut out = Vec::new();
    for (i, (name, k, n)) in projections(cfg).into_iter().enumerate() {
        out.push((
            name,
            HostTensor::random(DType::F16, &[k, n], i as u64, 0.5).unwrap(),
        ));
    }
    for l in 0..LAYERS {
        for norm in ["attn_norm", "mlp_norm"] {
            let seed = 50 + l * 2 + u64::from(norm == "mlp_norm");
            let values = HostTensor::random(DType::F32, &[cfg.hidden], seed, 0.5).unwrap();
            let near_one: Vec<f16> = values
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| f16::from_f32(1.0 + v))
                .collect();
            let t = HostTensor::from_vec(near_one, &[cfg.hidden]).unwrap();
            out.push((format!("l{l}.{norm}"), t));
        }
    }
    out
}

/// `weights` with each projection quantized into `format` (its tensors under the format's
/// names) and, beside them, the f16 weights holding the dequantized values.
fn quantized(
    cfg: &DecoderConfig,
    weights: &[Named],
    format: WeightFormat,
) -> (Vec<Named>, Vec<Named>) {
    let (mut stored, mut dequantized) = (Vec::new(), Vec::new());
    for (name, t) in weights {
        let Some((_, k, n)) = projections(cfg).into_iter().find(|(p, ..)| p == name) else {
            stored.push((name.clone(), t.clone()));
            dequantized.push((name.clone(), t.clone()));
            continue;
        };
        let values: Vec<f32> = t
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        let parts = quantize(name, &values, k, n, format).unwrap();
        let views: Vec<HostTensor<'_>> = parts.iter().map(|(_, t)| t.view()).collect();
        let back = dequantize(name, format, k, n, &views).unwrap();
        dequantized.push((name.clone(), HostTensor::from_vec(back, &[k, n]).unwrap()));
        stored.extend(parts);
    }
    (stored, dequantized)
}

/// Three decode steps of `graph` with the weights of the safetensors file `tensors` makes;
/// the outputs of each step.
fn decode(graph: &Graph, tensors: &[Named]) -> Vec<Vec<f64>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let refs: Vec<(&str, &HostTensor<'_>)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(&path, &refs).unwrap();
    let mut exe = executable(graph);
    let bound = exe
        .load_weights(&WeightsFile::open(&path).unwrap())
        .unwrap();
    assert!(
        bound.missing.is_empty() && bound.unused.is_empty(),
        "{bound:?}"
    );
    (0..3)
        .map(|step| {
            let x =
                HostTensor::random(DType::F16, &[1, 1, config().hidden], 900 + step, 2.0).unwrap();
            let pos = HostTensor::scalar(step as i64);
            let out = exe
                .run(&[("x", TensorRef::Host(&x)), ("pos", TensorRef::Host(&pos))])
                .unwrap();
            out["y"].to_f64().data
        })
        .collect()
}

/// The root mean square of `a − b` over every step, over `scale`; infinite where either is NaN.
fn rms_error(a: &[Vec<f64>], b: &[Vec<f64>], scale: f64) -> f64 {
    let (mut sum, mut count) = (0f64, 0usize);
    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
        if x.is_nan() || y.is_nan() {
            return f64::INFINITY;
        }
        sum += (x - y) * (x - y);
        count += 1;
    }
    (sum / count.max(1) as f64).sqrt() / scale
}

/// The largest `|a − b|` over every step.
fn max_error(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| {
            if x.is_nan() || y.is_nan() {
                f64::INFINITY
            } else {
                (x - y).abs()
            }
        })
        .fold(0f64, f64::max)
}

/// A quantized decoder agrees with the f16 decoder on its dequantized weights to f16 rounding
/// (the weights are bit-identical, so only fusing the dequantization differently could differ:
/// the bound is 2e-3 absolute; the outputs measure identical), and with the f16 decoder on the
/// original weights within the format's error, in rms over the rms change the layers make to
/// their input. Those bounds come from the per-weight rms error relative to the weights' rms
/// (uniform within ±0.25): int8 per channel 0.4% (`s/√12`, `s = max|w|/127`), e4m3 at most
/// 3.6% (half a step of 2⁻³, relative), int4 at groups of 32 about 6.7% (a step of a group's
/// range / 15), times about 6 for two layers of seven products, a gated product and attention
/// (measured: 1.6e-2 int8, 1.4e-1 to 1.9e-1 FP8, 3.7e-1 to 4.2e-1 int4).
#[test]
fn quantized_decoders_read_checkpoints_as_they_are_on_disk() {
    let cfg = config();
    let weights = f16_weights(&cfg);
    let f16_graph = models::decoder(&cfg, LAYERS).unwrap();
    let original = decode(&f16_graph, &weights);
    let x: Vec<Vec<f64>> = (0..3)
        .map(|step| {
            HostTensor::random(DType::F16, &[1, 1, cfg.hidden], 900 + step, 2.0)
                .unwrap()
                .to_f64()
                .data
        })
        .collect();
    // What the layers add to their input, in rms: the scale of the errors below.
    let change = rms_error(&original, &x, 1.0);
    assert!(
        change > 0.25,
        "the layers change their input by {change} in rms"
    );
    let formats = [
        (WeightFormat::Int8, 0.03),
        (WeightFormat::Fp8(Fp8Scale::Tensor), 0.3),
        (WeightFormat::Fp8(Fp8Scale::Row), 0.3),
        (WeightFormat::Fp8(Fp8Scale::Block), 0.3),
        (WeightFormat::Awq { group: 32 }, 0.6),
        (WeightFormat::Gptq { group: 32 }, 0.6),
        (WeightFormat::Gptq { group: 64 }, 0.6),
    ];
    for (format, bound) in formats {
        let (stored, dequantized) = quantized(&cfg, &weights, format);
        let graph = models::quantized_decoder(&cfg, LAYERS, format).unwrap();
        let got = decode(&graph, &stored);
        let same_weights = decode(&f16_graph, &dequantized);
        let to_dequantized = max_error(&got, &same_weights);
        let to_original = rms_error(&got, &original, change);
        eprintln!("{format:?}: {to_dequantized:.2e} to the dequantized f16 decoder, {to_original:.2e} to the original");
        assert!(
            to_dequantized <= 2e-3,
            "{format:?}: {to_dequantized} to the dequantized weights"
        );
        assert!(
            to_original <= bound,
            "{format:?}: {to_original} to the original weights"
        );
        assert!(
            to_original > 0.0,
            "{format:?}: quantization changed nothing"
        );
    }
}
