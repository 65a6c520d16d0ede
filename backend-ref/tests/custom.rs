//! Users' kernels end to end on the reference backend: top-k per row against the oracle (in
//! checking mode, which fails on any element written twice or never), the `.tir` and text
//! forms, type errors naming the kernel and operand, and a safe kernel whose stores overlap
//! another program's tile refused at compile time.

mod common;

use std::collections::BTreeMap;

use backend_ref::RefBackend;
use common::{random, sources};
use tir_graph::{shape, CustomKernel, DType, Dim, Graph, GraphBuilder};
use tir_lower::custom::rope::{rope, rope_into_cache};
use tir_lower::custom::{topk::topk, KernelDef};
use tir_lower::testing::RunF64;
use tir_lower::tile::IndexOp;
use tir_lower::{Backend, LowerError};

fn topk_graph(dtype: DType, n: u64, k: u64) -> Graph {
    let kernel = topk(dtype, n, k).unwrap();
    let g = GraphBuilder::new();
    let x = g.input("x", dtype, shape!["batch", n]).unwrap();
    let out = g.custom(&kernel, &[&x]).unwrap();
    g.output("values", &out[0]).unwrap();
    g.output("indices", &out[1]).unwrap();
    g.finish().unwrap()
}

fn compile(graph: &Graph) -> Result<tir_lower::Compiled, LowerError> {
    let backend = RefBackend::checking();
    tir_lower::compile_graph(graph, &backend.target(), &tir_opt::Limits::default())
}

#[test]
fn topk_matches_the_oracle_exactly() {
    for (dtype, n, k) in [
        (DType::F32, 37, 5),
        (DType::F16, 100, 64),
        (DType::F32, 7, 7),
        (DType::F16, 5, 1),
    ] {
        let graph = topk_graph(dtype, n, k);
        let compiled = compile(&graph).unwrap();
        let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
        for batch in [1u64, 3, 9] {
            let src = sources(vec![("x", random(dtype, &[batch, n], batch * 31 + n))]);
            let got = exe.run_f64(&src).unwrap().outputs;
            let want = tir_graph::evaluate(&graph, &src).unwrap().outputs;
            for name in ["values", "indices"] {
                assert_eq!(got[name].dims, vec![batch, k], "{name}");
                assert!(got[name].data.iter().all(|v| !v.is_nan()), "{name}");
                assert_eq!(
                    got[name].data, want[name].data,
                    "{name}, {dtype} n={n} k={k} batch={batch}"
                );
            }
            // Values are the row's elements at the indices, non-increasing.
            let x = &src["x"].data;
            for (row, (vals, idx)) in got["values"]
                .data
                .chunks(k as usize)
                .zip(got["indices"].data.chunks(k as usize))
                .enumerate()
            {
                for (v, i) in vals.iter().zip(idx) {
                    assert_eq!(*v, x[row * n as usize + *i as usize]);
                }
                assert!(vals.windows(2).all(|w| w[0] >= w[1]));
            }
        }
    }
}

#[test]
fn topk_is_one_kernel_writing_both_outputs() {
    let graph = topk_graph(DType::F32, 37, 5);
    let compiled = compile(&graph).unwrap();
    let kernels = &compiled.program.kernels;
    assert_eq!(
        kernels.len(),
        1,
        "{:?}",
        kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    assert_eq!(kernels[0].name, "k0_custom_topk_values_indices");
    assert_eq!(kernels[0].writes.len(), 2);
    // Both writes are proven, in one certificate.
    assert_eq!(compiled.program.certificates.len(), 1);
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let src = sources(vec![("x", random(DType::F32, &[4, 37], 7))]);
    let got = exe.run_f64(&src).unwrap().outputs;
    let want = tir_graph::evaluate(&graph, &src).unwrap().outputs;
    for name in ["values", "indices"] {
        assert!(got[name].data.iter().all(|v| !v.is_nan()), "{name}");
        assert_eq!(got[name].data, want[name].data, "{name}");
    }
}

#[test]
fn an_unused_output_of_a_kernel_is_not_written() {
    let kernel = topk(DType::F32, 20, 3).unwrap();
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", 20]).unwrap();
    let out = g.custom(&kernel, &[&x]).unwrap();
    g.output("indices", &out[1]).unwrap();
    let graph = g.finish().unwrap();
    let compiled = compile(&graph).unwrap();
    let kernels = &compiled.program.kernels;
    assert_eq!(kernels.len(), 1);
    assert_eq!(kernels[0].name, "k0_custom_topk_indices");
    assert_eq!(kernels[0].writes.len(), 1);
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let src = sources(vec![("x", random(DType::F32, &[3, 20], 11))]);
    let got = exe.run_f64(&src).unwrap().outputs;
    let want = tir_graph::evaluate(&graph, &src).unwrap().outputs;
    assert_eq!(got["indices"].data, want["indices"].data);
}

#[test]
fn ties_take_the_lowest_index_first() {
    let graph = topk_graph(DType::F32, 6, 3);
    let compiled = compile(&graph).unwrap();
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let x = tir_graph::F64Tensor::new(DType::F32, vec![1, 6], vec![1.0, 3.0, 2.0, 3.0, 3.0, -1.0])
        .unwrap();
    let got = exe.run_f64(&sources(vec![("x", x)])).unwrap().outputs;
    assert_eq!(got["indices"].data, vec![1.0, 3.0, 4.0]);
    assert_eq!(got["values"].data, vec![3.0, 3.0, 3.0]);
}

#[test]
fn topk_round_trips_through_files_and_text() {
    let graph = topk_graph(DType::F16, 33, 4);
    let bytes = tir_graph::file::encode(&graph);
    let back = tir_graph::file::decode(&bytes).unwrap();
    assert_eq!(back.to_data(), graph.to_data());
    let text = tir_graph::text::print(&graph);
    assert!(
        text.contains("custom %0 {kernel = \"topk\", output = 1"),
        "{text}"
    );
    let parsed = tir_graph::text::parse(&text).unwrap();
    assert_eq!(parsed.to_data(), graph.to_data());
    // A version-6 reader refuses the file with its one line (version 7: slices of states).
    assert_eq!(tir_graph::file::FORMAT_VERSION, 7);
}

#[test]
fn operand_type_errors_name_the_kernel_and_operand() {
    let kernel = topk(DType::F32, 7, 3).unwrap();
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["B", 7]).unwrap();
    let err = g.custom(&kernel, &[&x]).unwrap_err().to_string();
    assert!(
        err.contains(
            "custom kernel topk: operand 0 (x) is f16[B, 7], the kernel takes f32[batch, 7]"
        ),
        "{err}"
    );
}

/// A "safe" kernel whose program `p` stores the tile `p / 2`: programs 0 and 1 overlap.
fn overlapping() -> CustomKernel {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["n"]).unwrap();
    g.output("y", &x).unwrap();
    let reference = g.finish().unwrap();
    KernelDef::new("halves")
        .input("x", DType::F32, &[Dim::from("n")])
        .output("y", DType::F32, &[Dim::from("n")], &[16])
        .build(&reference, |b| {
            let p = b.program_id(0)?;
            let two = b.index(2);
            let half = b.arith(IndexOp::Div, p, two);
            let view = b.input_view(0)?;
            let tile = b.load(view, &[p], &[16], 0.0)?;
            let out = b.output_view(0)?;
            b.store(out, &[half], tile)
        })
        .unwrap()
}

#[test]
fn a_safe_kernel_storing_into_another_programs_tile_is_refused() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["n"]).unwrap();
    let y = g.custom(&overlapping(), &[&x]).unwrap();
    g.output("y", &y[0]).unwrap();
    let err = compile(&g.finish().unwrap()).unwrap_err().to_string();
    assert!(err.starts_with("kernel k0_custom_halves_y: "), "{err}");
    assert!(
        err.contains("programs (0) and (1) both write tile (0) of output \"y\" (elements [0, 16))"),
        "{err}"
    );
}

fn rope_graph(dtype: DType, pos_dtype: DType, head_dim: u64) -> Graph {
    let kernel = rope(dtype, pos_dtype, head_dim, 10000.0).unwrap();
    let g = GraphBuilder::new();
    let x = g
        .input("x", dtype, shape![1, "heads", 1, head_dim])
        .unwrap();
    let pos = g
        .input("pos", pos_dtype, tir_graph::Shape::scalar())
        .unwrap();
    let y = g.custom(&kernel, &[&x, &pos]).unwrap();
    g.output("y", &y[0]).unwrap();
    g.finish().unwrap()
}

/// What separates the kernel from the f64 oracle at `pos`, for the element whose own input is
/// `own` and whose partner in the other half is `other`: the angle's f32 error (the inverse
/// frequency's exponent `a = lane · step` carries `|a| · 2^-23`, `exp` and the f32 constant of
/// the composite `2^-24` each, the product with `pos` `2^-24`: at most
/// `pos · e^a (|a| + 1.5) 2^-23 <= 0.75 · 2^-22 · pos` radians for `a <= 0`), cos and sin
/// rounded to the dtype in the composite (two roundings), and the result rounded once.
fn rope_tolerance(dtype: DType, pos: u64, own: f64, other: f64, want: f64) -> f64 {
    let eps = match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    };
    let angle = (pos as f64 + 1.0) * 2f64.powi(-22);
    (own.abs() + other.abs()) * (angle + 2.0 * eps + 4.0 * 2f64.powi(-24)) + eps * want.abs()
}

#[test]
fn rope_matches_the_oracle_at_small_and_large_positions() {
    for (dtype, pos_dtype, head_dim, heads) in [
        (DType::F32, DType::I64, 128, 32),
        (DType::F16, DType::I64, 128, 5),
        (DType::F16, DType::I32, 64, 3),
        (DType::F32, DType::I32, 8, 1),
        (DType::BF16, DType::I64, 256, 2),
    ] {
        let graph = rope_graph(dtype, pos_dtype, head_dim);
        let compiled = compile(&graph).unwrap();
        assert_eq!(compiled.program.kernels.len(), 1);
        let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
        for pos in [0u64, 1, 7, 2047, 65_535, 1_000_000] {
            let x = random(dtype, &[1, heads, 1, head_dim], pos + heads);
            let at = tir_graph::F64Tensor::new(pos_dtype, vec![], vec![pos as f64]).unwrap();
            let src = sources(vec![("x", x.clone()), ("pos", at)]);
            let got = exe.run_f64(&src).unwrap().outputs;
            let want = tir_graph::evaluate(&graph, &src).unwrap().outputs;
            let (got, want) = (&got["y"].data, &want["y"].data);
            assert_eq!(got.len(), want.len());
            let half = (head_dim / 2) as usize;
            let mut worst = 0f64;
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let j = i % head_dim as usize;
                let partner = if j < half { i + half } else { i - half };
                let tol = rope_tolerance(dtype, pos, x.data[i], x.data[partner], *w);
                assert!(
                    (g - w).abs() <= tol,
                    "{dtype} head_dim {head_dim} pos {pos} element {i}: {g} vs {w} (tolerance {tol})"
                );
                worst = worst.max((g - w).abs() / tol);
            }
            // Lane 0 of a head turns by `pos` radians: the rotation is not the identity.
            if pos == 7 {
                assert!(got.iter().zip(&x.data).any(|(g, x)| (g - x).abs() > 0.1));
            }
            assert!(worst <= 1.0);
        }
    }
}

#[test]
fn rope_refuses_head_dims_whose_half_is_no_power_of_two() {
    let err = rope(DType::F16, DType::I64, 96, 10000.0)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("custom kernel rope: "), "{err}");
    assert!(err.contains("f16 heads of 96"), "{err}");
    let err = rope(DType::F16, DType::F32, 128, 10000.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("a f32 position"), "{err}");
}

/// The decode step with each rotary variant against the oracle on ref, three steps running
/// (the k cache holds rotated keys from earlier steps).
#[test]
fn the_decoder_with_rope_matches_the_oracle() {
    use tir_graph::models::{decoder, decoder_rope, DecoderConfig, Rope};
    let cfg = DecoderConfig {
        hidden: 32,
        heads: 2,
        context: 8,
        ffn: 48,
    };
    let kernels = Rope::Kernel {
        q: rope(DType::F16, DType::I64, 16, 10000.0).unwrap().into(),
        k_into_cache: rope_into_cache(DType::F16, DType::I64, 16, 10000.0)
            .unwrap()
            .into(),
    };
    let variants = [
        ("composite", Rope::Composite { base: 10000.0 }),
        ("kernel", kernels),
    ];
    let plain = decoder(&cfg, 2).unwrap();
    for (what, variant) in variants {
        let graph = decoder_rope(&cfg, 2, &variant).unwrap();
        let compiled = compile(&graph).unwrap();
        let named = |part: &str| {
            compiled
                .program
                .kernels
                .iter()
                .filter(|k| k.name.contains(part))
                .count()
        };
        // Per layer: q rotated, the new k rotated straight into its cache (no copy of its own).
        let per_layer = if what == "kernel" { 2 } else { 0 };
        assert_eq!(named("custom_rope_y"), per_layer, "{what}");
        assert_eq!(named("custom_rope_into_cache"), per_layer, "{what}");
        let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
        let mut states = BTreeMap::new();
        for pos in [0u64, 1, 2] {
            let mut src = BTreeMap::new();
            let named = graph.inputs().into_iter().chain(graph.parameters());
            for (i, (name, id)) in named.enumerate() {
                let ty = graph.ty(id);
                let dims: Vec<u64> = ty.shape.dims().iter().filter_map(Dim::as_static).collect();
                let mut t = random(ty.dtype, &dims, pos * 1000 + i as u64);
                // Scaled down so the f16 layers stay in range.
                t.data
                    .iter_mut()
                    .for_each(|v| *v = ty.dtype.round_value(*v * 0.25));
                src.insert(name, t);
            }
            src.insert(
                "pos".into(),
                tir_graph::F64Tensor::new(DType::I64, vec![], vec![pos as f64]).unwrap(),
            );
            let mut oracle = src.clone();
            oracle.extend(states.clone());
            let want = tir_graph::evaluate(&graph, &oracle).unwrap();
            let got = exe.run_f64(&src).unwrap();
            let (g, w) = (&got.outputs["y"].data, &want.outputs["y"].data);
            assert!(g.iter().all(|v| v.is_finite()), "{what} pos {pos}");
            let worst = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f64, f64::max);
            let scale = w.iter().map(|v| v.abs()).fold(0f64, f64::max);
            assert!(worst <= 2e-2 * scale.max(1.0), "{what} pos {pos}: {worst}");
            // Past step 0 the rotation changes what attention sees: not the plain decoder.
            if pos > 0 {
                let none = tir_graph::evaluate(&plain, &oracle).unwrap();
                let differs = none.outputs["y"]
                    .data
                    .iter()
                    .zip(w)
                    .any(|(a, b)| (a - b).abs() > 1e-3);
                assert!(differs, "{what} pos {pos}: rope changed nothing");
            }
            states = exe.states_f64();
        }
    }
}
