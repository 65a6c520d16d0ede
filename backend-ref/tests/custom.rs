//! Users' kernels end to end on the reference backend: top-k per row against the oracle (in
//! checking mode, which fails on any element written twice or never), the `.tir` and text
//! forms, type errors naming the kernel and operand, and a safe kernel whose stores overlap
//! another program's tile refused at compile time.

mod common;

use backend_ref::RefBackend;
use common::{random, sources};
use tir_graph::{shape, CustomKernel, DType, Dim, Graph, GraphBuilder};
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
    // A version-4 reader refuses the file with its one line.
    assert_eq!(tir_graph::file::FORMAT_VERSION, 5);
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
