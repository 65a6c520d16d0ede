//! Fusion decisions on small graphs: what becomes one kernel, what must not, and the limits.

use tir_graph::models::{self, AttentionConfig, DecoderConfig};
use tir_graph::{shape, DType, Graph, GraphBuilder};
use tir_opt::{optimize, FusedGraph, FusionTarget, KernelKind, Limits, OptOptions};

fn fuse_with(graph: &Graph, options: &OptOptions) -> FusedGraph {
    let (fused, _) = optimize(graph, options).unwrap();
    fused.verify().unwrap();
    fused
}

fn fuse(graph: &Graph) -> FusedGraph {
    fuse_with(graph, &OptOptions::default())
}

fn kinds(f: &FusedGraph) -> Vec<KernelKind> {
    f.kernels.iter().map(|k| k.kind).collect()
}

fn ops(f: &FusedGraph, kernel: usize) -> Vec<&'static str> {
    let g = &f.graph;
    f.kernels[kernel]
        .members
        .iter()
        .map(|&m| g.node(m).op.name())
        .collect()
}

#[test]
fn norms_and_softmax_are_one_kernel_each() {
    for graph in [models::ln_gelu(64).unwrap(), models::softmax(64).unwrap()] {
        assert_eq!(kinds(&fuse(&graph)), [KernelKind::RowReduction]);
    }
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["rows", 128]).unwrap();
    let r = g.input("r", DType::F32, shape!["rows", 128]).unwrap();
    let gamma = g.parameter("gamma", DType::F32, shape![128]).unwrap();
    let y = (&x + &r)
        .unwrap()
        .rms_norm(&gamma, 1e-6)
        .unwrap()
        .silu()
        .unwrap();
    g.output("y", &y).unwrap();
    let fused = fuse(&g.finish().unwrap());
    assert_eq!(kinds(&fused), [KernelKind::RowReduction]);
    assert_eq!(fused.kernels[0].inputs.len(), 4, "x, r, gamma and eps");
}

#[test]
fn mlp_is_two_matmuls_with_their_epilogues() {
    let fused = fuse(&models::mlp(64, 256).unwrap());
    assert_eq!(kinds(&fused), [KernelKind::MatMul, KernelKind::MatMul]);
    assert_eq!(ops(&fused, 0), ["matmul", "add", "gelu_erf"]);
    assert_eq!(ops(&fused, 1), ["matmul", "add"]);
}

/// The default options with epilogues kept out of matmul kernels.
fn without_epilogue_fusion() -> OptOptions {
    OptOptions {
        target: FusionTarget {
            fuse_matmul_epilogue: false,
            ..FusionTarget::default()
        },
        ..OptOptions::default()
    }
}

#[test]
fn without_epilogue_fusion_the_mlp_has_four_kernels() {
    let options = without_epilogue_fusion();
    let fused = fuse_with(&models::mlp(64, 256).unwrap(), &options);
    let expected = [
        KernelKind::MatMul,
        KernelKind::Elementwise,
        KernelKind::MatMul,
        KernelKind::Elementwise,
    ];
    assert_eq!(kinds(&fused), expected);
}

#[test]
fn without_epilogue_fusion_a_residual_add_still_fuses() {
    let options = without_epilogue_fusion();
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![4, 32]).unwrap();
    let w = g.parameter("w", DType::F16, shape![32, 32]).unwrap();
    let r = g.input("r", DType::F16, shape![4, 32]).unwrap();
    g.output("y", &(&r + &x.matmul(&w).unwrap()).unwrap())
        .unwrap();
    let fused = fuse_with(&g.finish().unwrap(), &options);
    assert_eq!(kinds(&fused), [KernelKind::MatMul]);
    assert_eq!(ops(&fused, 0), ["matmul", "add"]);
    // A broadcast bias is no residual, and neither is the product added to itself.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![4, 32]).unwrap();
    let w = g.parameter("w", DType::F16, shape![32, 32]).unwrap();
    let bias = g.parameter("bias", DType::F16, shape![32]).unwrap();
    let p = x.matmul(&w).unwrap();
    g.output("y", &(&p + &bias).unwrap()).unwrap();
    g.output("z", &(&p + &p).unwrap()).unwrap();
    let fused = fuse_with(&g.finish().unwrap(), &options);
    assert_eq!(
        kinds(&fused),
        [
            KernelKind::MatMul,
            KernelKind::Elementwise,
            KernelKind::Elementwise
        ]
    );
}

#[test]
fn integer_matmuls_keep_their_epilogues_without_epilogue_fusion() {
    let options = without_epilogue_fusion();
    let g = GraphBuilder::new();
    let a = g.input("a", DType::I32, shape![8, 16]).unwrap();
    let b = g.input("b", DType::I32, shape![16, 4]).unwrap();
    g.output("y", &a.matmul(&b).unwrap().relu().unwrap())
        .unwrap();
    let fused = fuse_with(&g.finish().unwrap(), &options);
    assert_eq!(kinds(&fused), [KernelKind::MatMul]);
    assert_eq!(ops(&fused, 0), ["matmul", "relu"]);
}

#[test]
fn a_matmul_used_by_two_kernels_is_never_recomputed() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![16, 32]).unwrap();
    let w = g.parameter("w", DType::F32, shape![32, 8]).unwrap();
    let h = x.matmul(&w).unwrap();
    g.output("a", &h.gelu().unwrap()).unwrap();
    g.output("b", &h.sum(&[1], true).unwrap()).unwrap();
    let fused = fuse(&g.finish().unwrap());
    let matmuls: Vec<usize> = (0..fused.kernels.len())
        .filter(|&k| ops(&fused, k).contains(&"matmul"))
        .collect();
    assert_eq!(matmuls.len(), 1);
    assert_eq!(ops(&fused, matmuls[0]), ["matmul"]);
    assert_eq!(fused.kernels.len(), 3);
}

#[test]
fn elementwise_dags_with_broadcasting_fuse_into_one_kernel() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["n", 64]).unwrap();
    let b = g.input("b", DType::F32, shape![64]).unwrap();
    let t = (&x + &b).unwrap();
    let y = (&t.exp().unwrap() * &t.sigmoid().unwrap())
        .unwrap()
        .tanh()
        .unwrap();
    g.output("y", &y).unwrap();
    let fused = fuse(&g.finish().unwrap());
    assert_eq!(kinds(&fused), [KernelKind::Elementwise]);
    assert_eq!(fused.kernels[0].members.len(), 5);
}

#[test]
fn a_transposed_matmul_operand_is_a_load_index_map() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![16, 32]).unwrap();
    let w = g.parameter("w", DType::F16, shape![8, 32]).unwrap();
    g.output("y", &x.matmul(&w.transpose().unwrap()).unwrap())
        .unwrap();
    let fused = fuse(&g.finish().unwrap());
    assert_eq!(kinds(&fused), [KernelKind::MatMul]);
    assert_eq!(ops(&fused, 0), ["permute", "matmul"]);
}

#[test]
fn the_input_limit_splits_kernels() {
    let g = GraphBuilder::new();
    let mut acc = g.input("x0", DType::F32, shape![8]).unwrap();
    for i in 1..6 {
        let xi = g.input(&format!("x{i}"), DType::F32, shape![8]).unwrap();
        acc = (&acc + &xi).unwrap();
    }
    g.output("y", &acc).unwrap();
    let graph = g.finish().unwrap();
    assert_eq!(fuse(&graph).kernels.len(), 1);
    let options = OptOptions {
        target: FusionTarget {
            max_inputs: 3,
            ..FusionTarget::default()
        },
        ..OptOptions::default()
    };
    let fused = fuse_with(&graph, &options);
    assert!(fused.kernels.len() >= 3, "{:?}", kinds(&fused));
    assert!(fused.kernels.iter().all(|k| k.inputs.len() <= 3));
}

#[test]
fn rows_wider_than_the_target_do_not_fuse_into_one_row_kernel() {
    let options = OptOptions {
        target: FusionTarget {
            max_reduction_width: 32,
            ..FusionTarget::default()
        },
        ..OptOptions::default()
    };
    let fused = fuse_with(&models::softmax(64).unwrap(), &options);
    assert!(fused.kernels.len() > 1);
    assert!(!kinds(&fused).contains(&KernelKind::RowReduction));
}

#[test]
fn bounded_fusion_reports_the_bound_and_stays_valid() {
    let graph = models::ln_gelu(64).unwrap();
    let options = OptOptions {
        limits: Limits {
            max_iterations: 2,
            ..Limits::default()
        },
        ..OptOptions::default()
    };
    let (fused, report) = optimize(&graph, &options).unwrap();
    fused.verify().unwrap();
    assert!(fused.kernels.len() > 1);
    assert_eq!(report.bounds_hit, ["fusion: iteration limit"]);
}

#[test]
fn attention_and_the_decoder_block_fuse_into_verified_kernels() {
    let attention = models::attention(&AttentionConfig {
        seq: 16,
        hidden: 64,
        heads: 4,
        causal: true,
    })
    .unwrap();
    let fused = fuse(&attention);
    // Both products, the scale, the mask and the softmax are one attention kernel, with the
    // head split as load index maps; nothing else reduces.
    let at: Vec<usize> = (0..fused.kernels.len())
        .filter(|&k| fused.kernels[k].kind == KernelKind::Attention)
        .collect();
    assert_eq!(at.len(), 1, "{:?}", kinds(&fused));
    let members = ops(&fused, at[0]);
    for op in [
        "matmul",
        "mul",
        "select",
        "reduce_max",
        "exp",
        "reduce_sum",
        "div",
    ] {
        assert!(members.contains(&op), "{op} missing from {members:?}");
    }
    assert_eq!(members.iter().filter(|&&o| o == "matmul").count(), 2);
    assert!(!kinds(&fused).contains(&KernelKind::RowReduction));
    let decoder = models::decoder_block(&DecoderConfig {
        hidden: 64,
        heads: 4,
        context: 16,
        ffn: 128,
    })
    .unwrap();
    let fused = fuse(&decoder);
    let updates = kinds(&fused)
        .into_iter()
        .filter(|k| *k == KernelKind::StateUpdate)
        .count();
    assert_eq!(updates, 2);
}

#[test]
fn conv_takes_its_epilogue_but_reads_its_operands() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["n", 8, 12, 12]).unwrap();
    let w = g.parameter("w", DType::F16, shape![16, 8, 3, 3]).unwrap();
    let b = g.parameter("b", DType::F16, shape![16]).unwrap();
    let pads = [(1, 1), (1, 1)];
    // A producer of the input stays a kernel of its own, which also writes the channels-last
    // copy the conv reads: the conv gathers its windows from memory.
    let y = x
        .relu()
        .unwrap()
        .conv(&w, &[1, 1], &[1, 1], &pads, 1)
        .unwrap();
    let bias = b.reshape(&[16.into(), 1.into(), 1.into()]).unwrap();
    let y = (&y + &bias).unwrap().silu().unwrap();
    // A consumer that is not elementwise at the conv's shape is not part of it.
    let pooled = y.sum(&[2, 3], false).unwrap();
    g.output("y", &pooled).unwrap();
    let fused = fuse(&g.finish().unwrap());
    assert_eq!(
        kinds(&fused),
        [
            KernelKind::Elementwise,
            KernelKind::Conv,
            KernelKind::Reduction
        ]
    );
    // Channels-last: the conv reads the copy back and writes through a permute, the bias is
    // `[16]` as given, and the pool reads the channels-last value.
    assert_eq!(ops(&fused, 0), ["relu", "permute"]);
    assert_eq!(
        ops(&fused, 1),
        ["permute", "conv", "permute", "add", "silu"]
    );
}

#[test]
fn attention_whose_probabilities_are_an_output_stays_apart() {
    let g = GraphBuilder::new();
    let q = g.input("q", DType::F16, shape![2, 4, 32, 16]).unwrap();
    let k = g.input("k", DType::F16, shape![2, 4, 32, 16]).unwrap();
    let v = g.input("v", DType::F16, shape![2, 4, 32, 16]).unwrap();
    let scores = q.matmul(&k.transpose().unwrap()).unwrap();
    let probs = scores.softmax(3).unwrap();
    g.output("y", &probs.matmul(&v).unwrap()).unwrap();
    g.output("p", &probs).unwrap();
    let fused = fuse(&g.finish().unwrap());
    // The probabilities must be written, so they are no attention kernel's inside.
    assert!(
        !kinds(&fused).contains(&KernelKind::Attention),
        "{:?}",
        kinds(&fused)
    );
    assert!(kinds(&fused).contains(&KernelKind::RowReduction));
}

#[test]
fn a_softmax_over_another_axis_is_no_attention() {
    let g = GraphBuilder::new();
    let q = g.input("q", DType::F16, shape![4, 32, 16]).unwrap();
    let k = g.input("k", DType::F16, shape![4, 32, 16]).unwrap();
    let v = g.input("v", DType::F16, shape![4, 32, 16]).unwrap();
    let scores = q.matmul(&k.transpose().unwrap()).unwrap();
    g.output("y", &scores.softmax(1).unwrap().matmul(&v).unwrap())
        .unwrap();
    let fused = fuse(&g.finish().unwrap());
    assert!(
        !kinds(&fused).contains(&KernelKind::Attention),
        "{:?}",
        kinds(&fused)
    );
}

/// An attention kernel grows only into the kernel with every producer it can absorb: every
/// combination of the rotary embeddings' ops above Q and K is also an attention kernel (2280
/// of them a layer), which made a 134-layer transformer run out of fusion's time and fuse
/// worse than a short one. Now each layer costs the search the same few hundred kernels and
/// fuses the same, however many layers there are.
#[test]
fn a_deep_transformer_fuses_each_layer_as_a_shallow_one() {
    let fused_layers = |layers: u64| {
        let graph = models::transformer(&models::TransformerConfig {
            layers,
            seq: 16,
            hidden: 64,
            heads: 2,
            ffn: 128,
        })
        .unwrap();
        let (fused, report) = optimize(&graph, &OptOptions::default()).unwrap();
        fused.verify().unwrap();
        assert!(report.bounds_hit.is_empty(), "{:?}", report.bounds_hit);
        let attention = kinds(&fused)
            .iter()
            .filter(|k| **k == KernelKind::Attention)
            .count();
        assert_eq!(attention as u64, layers, "one attention kernel a layer");
        (fused.kernels.len(), report.rules["absorb-producer"])
    };
    let (one, one_absorbed) = fused_layers(1);
    let (two, two_absorbed) = fused_layers(2);
    let (forty, forty_absorbed) = fused_layers(40);
    assert_eq!(
        forty - one,
        39 * (two - one),
        "kernels grow by one layer's each layer"
    );
    assert!(
        one_absorbed < 300,
        "{one_absorbed} kernels grown for one layer"
    );
    assert_eq!(
        forty_absorbed - one_absorbed,
        39 * (two_absorbed - one_absorbed),
        "the search grows by one layer's each layer"
    );
}

/// Self-attention over symbolic batch and sequence with its heads split from and merged back into
/// `[batch, seq, 64]`, and an output projection.
fn self_attention_with_projection() -> Graph {
    use tir_graph::{Dim, ReshapeDim};
    let g = GraphBuilder::new();
    let x = g
        .input("x", DType::F32, shape!["batch", "seq", 64])
        .unwrap();
    let dims = |d: &[Dim]| d.iter().cloned().map(ReshapeDim::Dim).collect::<Vec<_>>();
    let (batch, seq) = (Dim::Symbolic("batch".into()), Dim::Symbolic("seq".into()));
    let split = dims(&[batch.clone(), seq.clone(), Dim::Static(4), Dim::Static(16)]);
    let heads = |name: &str| {
        let w = g.parameter(name, DType::F32, shape![64, 64]).unwrap();
        let projected = x.matmul(&w).unwrap().reshape(&split).unwrap();
        projected.permute(&[0, 2, 1, 3]).unwrap()
    };
    let (q, k, v) = (heads("wq"), heads("wk"), heads("wv"));
    let merged = q
        .attention(&k, &v, false)
        .unwrap()
        .permute(&[0, 2, 1, 3])
        .unwrap();
    let merged = merged
        .reshape(&dims(&[batch, seq, Dim::Static(64)]))
        .unwrap();
    let wo = g.parameter("wo", DType::F32, shape![64, 64]).unwrap();
    g.output("y", &merged.matmul(&wo).unwrap()).unwrap();
    g.finish().unwrap()
}

#[test]
fn on_a_library_target_the_attention_kernel_stores_the_head_merge() {
    use std::collections::BTreeSet;
    use tir_opt::fusion::kinds::is_library_matmul;
    // Reading the merge in the projection or storing it from the attention moves the same
    // bytes; where a library runs plain products, the merge goes to the attention's store so
    // that the projection is one (and every product of the layer is).
    let fused = fuse_with(
        &self_attention_with_projection(),
        &without_epilogue_fusion(),
    );
    let g = &fused.graph;
    let attention = fused
        .kernels
        .iter()
        .find(|k| k.kind == KernelKind::Attention)
        .unwrap();
    let root = g.node(attention.root).op.name();
    assert!(["permute", "reshape"].contains(&root), "the merge: {root}");
    for kernel in fused
        .kernels
        .iter()
        .filter(|k| k.kind == KernelKind::MatMul)
    {
        let members: BTreeSet<_> = kernel.members.iter().copied().collect();
        let mm = *members
            .iter()
            .find(|&&m| g.node(m).op.name() == "matmul")
            .unwrap();
        assert!(
            is_library_matmul(g, &members, kernel.root, mm),
            "{members:?}"
        );
    }
}

/// Each format's dequantization fuses into the product that reads it, on a library target and
/// on one that fuses epilogues: the layer has as many kernels as the f16 layer, every product
/// reads the format's packed tensors, and no kernel writes a weight-sized f16 value.
#[test]
fn a_dequantized_weight_is_read_inside_its_product() {
    use tir_graph::quant::{Fp8Scale, WeightFormat};
    let cfg = DecoderConfig {
        hidden: 256,
        heads: 4,
        context: 16,
        ffn: 384,
    };
    for options in [OptOptions::default(), without_epilogue_fusion()] {
        let f16 = fuse_with(&models::decoder(&cfg, 1).unwrap(), &options);
        for format in [
            WeightFormat::Int8,
            WeightFormat::Fp8(Fp8Scale::Row),
            WeightFormat::Fp8(Fp8Scale::Block),
            WeightFormat::Awq { group: 128 },
            WeightFormat::Gptq { group: 64 },
        ] {
            let graph = models::quantized_decoder(&cfg, 1, format).unwrap();
            let fused = fuse_with(&graph, &options);
            let g = &fused.graph;
            assert_eq!(
                fused.kernels.len(),
                f16.kernels.len(),
                "{format:?}: {:?}",
                kinds(&fused)
            );
            let mut packed_reads = 0;
            for k in &fused.kernels {
                let weight_sized = g.ty(k.root).rank() == 2 && g.ty(k.root).dtype == DType::F16;
                assert!(
                    !weight_sized,
                    "{format:?}: a kernel writes {}",
                    g.ty(k.root)
                );
                if k.kind == KernelKind::MatMul {
                    let members = k.members.iter().copied().collect();
                    let mm = *k
                        .members
                        .iter()
                        .find(|&&m| g.node(m).op == tir_graph::Op::MatMul)
                        .unwrap();
                    let library =
                        tir_opt::fusion::kinds::is_library_matmul(g, &members, k.root, mm);
                    let reads_params = k
                        .inputs
                        .iter()
                        .any(|&i| matches!(g.node(i).op, tir_graph::Op::Parameter { .. }));
                    assert!(!(reads_params && library), "{format:?}: a library product");
                    packed_reads += usize::from(reads_params);
                }
            }
            assert_eq!(packed_reads, 7, "{format:?}: {:?}", kinds(&fused));
        }
    }
}

/// A prologue that would recompute costly work per output tile stays its own kernel: the
/// product of `silu(a) * b` with a weight reads the gated value from memory.
#[test]
fn a_costly_operand_prologue_does_not_fuse() {
    let g = GraphBuilder::new();
    let a = g.input("a", DType::F16, shape![32, 64]).unwrap();
    let b = g.input("b", DType::F16, shape![32, 64]).unwrap();
    let w = g.parameter("w", DType::F16, shape![64, 48]).unwrap();
    let gated = a.silu().unwrap().mul(&b).unwrap();
    g.output("y", &gated.matmul(&w).unwrap()).unwrap();
    let fused = fuse(&g.finish().unwrap());
    assert_eq!(
        kinds(&fused),
        [KernelKind::Elementwise, KernelKind::MatMul],
        "{:?}",
        (0..fused.kernels.len())
            .map(|k| ops(&fused, k))
            .collect::<Vec<_>>()
    );
}
