//! `tirc quantize`: a small decoder's f16 weights quantized into each layout, loaded as they
//! are into the quantized decoder and run on the reference backend; and the refusals (one line,
//! exit 1, nothing written).

mod common;

use backend_ref::RefBackend;
use common::{assert_ok, assert_refused, tirc};
use std::path::Path;
use tir_graph::models::{self, DecoderConfig};
use tir_graph::quant::WeightFormat;
use tir_graph::weights::{write_safetensors, WeightsFile};
use tir_graph::{DType, HostTensor};
use tir_lower::{compile_graph, Backend, TensorRef};
use tir_opt::Limits;

fn config() -> DecoderConfig {
    DecoderConfig {
        hidden: 64,
        heads: 4,
        context: 16,
        ffn: 128,
    }
}

/// The f16 weights of a 2-layer decoder of [`config`] (random, projections within ±0.25).
fn write_decoder_weights(path: &Path) {
    let graph = models::decoder(&config(), 2).unwrap();
    let tensors: Vec<(String, HostTensor<'static>)> = graph
        .parameters()
        .into_iter()
        .enumerate()
        .map(|(i, (name, id))| {
            let dims: Vec<u64> = graph
                .ty(id)
                .shape
                .dims()
                .iter()
                .map(|d| d.as_static().unwrap())
                .collect();
            (
                name,
                HostTensor::random(DType::F16, &dims, i as u64, 0.5).unwrap(),
            )
        })
        .collect();
    let refs: Vec<(&str, &HostTensor<'_>)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(path, &refs).unwrap();
}

/// One decode step of the decoder stored in `format`, its weights from `path`: the output.
fn run_quantized(path: &Path, format: WeightFormat) -> Vec<f64> {
    let graph = models::quantized_decoder(&config(), 2, format).unwrap();
    let backend = RefBackend::checking();
    let compiled = compile_graph(&graph, &backend.target(), &Limits::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let bound = exe.load_weights(&WeightsFile::open(path).unwrap()).unwrap();
    assert!(
        bound.missing.is_empty() && bound.unused.is_empty(),
        "{bound:?}"
    );
    let x = HostTensor::random(DType::F16, &[1, 1, 64], 7, 2.0).unwrap();
    let pos = HostTensor::scalar(0i64);
    let out = exe
        .run(&[("x", TensorRef::Host(&x)), ("pos", TensorRef::Host(&pos))])
        .unwrap();
    out["y"].to_f64().data
}

#[test]
fn quantized_checkpoints_load_into_the_quantized_decoder_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let weights = dir.path().join("w.safetensors");
    write_decoder_weights(&weights);
    let w = weights.to_str().unwrap();
    let cases: [(&[&str], WeightFormat); 5] = [
        (&["--int8"], WeightFormat::Int8),
        (
            &["--fp8"],
            WeightFormat::Fp8(tir_graph::quant::Fp8Scale::Row),
        ),
        (
            &["--fp8", "--block", "128"],
            WeightFormat::Fp8(tir_graph::quant::Fp8Scale::Block),
        ),
        (
            &["--int4", "--group", "32"],
            WeightFormat::Awq { group: 32 },
        ),
        (
            &["--int4", "--format", "gptq", "--group", "64"],
            WeightFormat::Gptq { group: 64 },
        ),
    ];
    for (i, (flags, format)) in cases.into_iter().enumerate() {
        let q = dir.path().join(format!("q{i}.safetensors"));
        let mut args = vec!["quantize", w];
        args.extend_from_slice(flags);
        args.extend(["-o", q.to_str().unwrap()]);
        let text = assert_ok(&tirc(&args));
        assert!(
            text.contains("14 weights quantized") && text.contains("4 tensors copied"),
            "{text}"
        );
        let y = run_quantized(&q, format);
        assert_eq!(y.len(), 64);
        assert!(y.iter().all(|v| v.is_finite()), "{format:?}: {y:?}");
        assert!(y.iter().any(|&v| v != 0.0), "{format:?}");
    }
    // int4 at groups of 32 stores about a quarter of f16's bytes (plus scales and zeros).
    let f16_size = std::fs::metadata(&weights).unwrap().len();
    let int4_size = std::fs::metadata(dir.path().join("q3.safetensors"))
        .unwrap()
        .len();
    assert!(int4_size * 10 < f16_size * 4, "{int4_size} of {f16_size}");
}

#[test]
fn bad_inputs_are_refused_in_one_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.safetensors");
    let o = out.to_str().unwrap();
    let missing = dir.path().join("missing.safetensors");
    assert_refused(
        &tirc(&["quantize", missing.to_str().unwrap(), "--int8", "-o", o]),
        &["missing.safetensors"],
    );
    let cube = dir.path().join("cube.safetensors");
    let t = HostTensor::random(DType::F16, &[2, 8, 8], 1, 1.0).unwrap();
    write_safetensors(&cube, &[("w", &t)]).unwrap();
    assert_refused(
        &tirc(&["quantize", cube.to_str().unwrap(), "--int8", "-o", o]),
        &["cube.safetensors", "tensor \"w\" is f16[2, 8, 8]"],
    );
    let odd = dir.path().join("odd.safetensors");
    let t = HostTensor::random(DType::F32, &[96, 16], 1, 1.0).unwrap();
    write_safetensors(&odd, &[("l0.wq", &t)]).unwrap();
    assert_refused(
        &tirc(&["quantize", odd.to_str().unwrap(), "--int4", "-o", o]),
        &[
            "odd.safetensors",
            "tensor l0.wq: K = 96 is not a whole number of groups of 128",
        ],
    );
    assert_refused(
        &tirc(&[
            "quantize",
            odd.to_str().unwrap(),
            "--fp8",
            "--block",
            "64",
            "-o",
            o,
        ]),
        &["--block 64"],
    );
    assert_refused(
        &tirc(&["quantize", odd.to_str().unwrap(), "-o", o]),
        &["--int8"],
    );
    assert!(!out.exists());
    // No output, no temporary file left behind: only the two inputs.
    let names = tir_graph::testing::dir_names(dir.path());
    assert_eq!(names, ["cube.safetensors", "odd.safetensors"]);
}
