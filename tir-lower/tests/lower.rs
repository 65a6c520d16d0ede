//! Lowering every example and model: the programs verify, every kernel has a certificate, and
//! the legality checks pass.

use tir_graph::models::{self, AttentionConfig, DecoderConfig, TransformerConfig};
use tir_graph::Graph;
use tir_lower::tile::{TileOp, Type};
use tir_lower::{compile_graph, Program, Target};
use tir_opt::Limits;

fn lower(graph: &Graph) -> Program {
    lower_for(graph, &Target::default())
}

fn lower_for(graph: &Graph, target: &Target) -> Program {
    let compiled =
        compile_graph(graph, target, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
    compiled.program
}

#[test]
fn every_example_lowers_to_certified_kernels() {
    for (name, graph) in models::examples().unwrap() {
        let program = lower(&graph);
        assert_eq!(program.kernels.len(), program.certificates.len(), "{name}");
        for c in &program.certificates {
            assert!(c.facts.len() >= 3, "{name}: {c:?}");
        }
    }
}

#[test]
fn small_models_lower() {
    let small = [
        models::mlp(16, 32).unwrap(),
        models::attention(&AttentionConfig {
            seq: 8,
            hidden: 16,
            heads: 2,
            causal: true,
        })
        .unwrap(),
        models::decoder_block(&DecoderConfig {
            hidden: 16,
            heads: 2,
            context: 8,
            ffn: 32,
        })
        .unwrap(),
        models::transformer(&TransformerConfig {
            layers: 2,
            seq: 8,
            hidden: 16,
            heads: 2,
            ffn: 32,
        })
        .unwrap(),
    ];
    for graph in &small {
        lower(graph);
    }
}

#[test]
fn programs_round_trip_through_bincode_and_report_their_arena_peak() {
    let graph = models::mlp(16, 32).unwrap();
    let program = lower(&graph);
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(&program, config).unwrap();
    let (back, _): (Program, usize) = bincode::serde::decode_from_slice(&bytes, config).unwrap();
    assert_eq!(back, program);
    let decoder = models::decoder_block(&DecoderConfig {
        hidden: 16,
        heads: 2,
        context: 8,
        ffn: 32,
    })
    .unwrap();
    let text = tir_lower::program::print_program(&lower(&decoder));
    assert!(text.contains("arena peak: "), "{text}");
    let peak: u64 = text
        .split("arena peak: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a static peak");
    // Dead intermediates are reused: the peak is below the sum of all arena buffers.
    let total: u64 = lower(&decoder)
        .buffers
        .iter()
        .filter(|b| b.storage == tir_lower::Storage::Arena)
        .map(|b| {
            tir_lower::plan::buffer_bytes(b, &Default::default())
                .unwrap()
                .div_ceil(256)
                * 256
        })
        .sum();
    assert!(peak > 0 && peak < total, "peak {peak}, total {total}");
}

/// The kernels of a text-form graph, lowered for the default target.
fn lower_text(text: &str) -> Program {
    let graph = tir_graph::text::parse(&format!("# tir graph, text form v1\n{text}"))
        .unwrap_or_else(|e| panic!("{e}"));
    lower(&graph)
}

#[test]
fn a_product_with_a_transposed_weight_carries_a_library_call_that_reads_it_transposed() {
    use tir_lower::tile::LibraryCall;
    let program = lower_text(
        "%0 = input \"x\" : f16[b, 8, 32]\n%1 = parameter \"w\" : f16[16, 32]\n\
         %2 = permute %1 {perm = [1, 0]} : f16[32, 16]\n%3 = matmul %0, %2 : f16[b, 8, 16]\n\
         output \"y\" = %3\n",
    );
    assert_eq!(
        program.kernels.len(),
        1,
        "the transpose is an index map, not a copy"
    );
    let kernel = &program.kernels[0];
    let Some(LibraryCall::MatMul {
        b,
        b_transposed,
        n,
        k,
        ..
    }) = &kernel.library
    else {
        panic!("no library call: {:?}", kernel.library)
    };
    assert!(*b_transposed);
    assert_eq!(program.buffers[kernel.params[*b].buffer].name, "w");
    use tir_graph::Dim;
    assert_eq!((k, n), (&Dim::Static(32), &Dim::Static(16)));
    // Any other permute of the weight is no library call.
    let other = lower_text(
        "%0 = input \"x\" : f16[2, 8, 32]\n%1 = parameter \"w\" : f16[16, 2, 32]\n\
         %2 = permute %1 {perm = [1, 2, 0]} : f16[2, 32, 16]\n%3 = matmul %0, %2 : f16[2, 8, 16]\n\
         output \"y\" = %3\n",
    );
    assert!(other.kernels[0].library.is_none());
}

#[test]
fn a_plain_matmul_carries_a_library_call_and_a_fused_one_does_not() {
    use tir_graph::{DType, Dim};
    use tir_lower::tile::LibraryCall;
    let plain = lower_text(
        "%0 = input \"a\" : f16[b, 8, 32]\n%1 = parameter \"w\" : f16[32, 16]\n\
         %2 = matmul %0, %1 : f16[b, 8, 16]\noutput \"y\" = %2\n",
    );
    assert_eq!(plain.kernels.len(), 1);
    let kernel = &plain.kernels[0];
    let Some(LibraryCall::MatMul {
        a,
        b,
        c,
        dtype,
        batch,
        m,
        k,
        n,
        b_batched,
        b_transposed,
        residual,
    }) = &kernel.library
    else {
        panic!("no library call: {:?}", kernel.library)
    };
    assert!(!b_transposed);
    assert_eq!(*residual, None);
    assert_eq!(*dtype, DType::F16);
    assert_eq!(batch, &vec![Dim::Symbolic("b".into())]);
    assert_eq!(
        (m, k, n),
        (&Dim::Static(8), &Dim::Static(32), &Dim::Static(16))
    );
    assert!(!b_batched);
    let buffer = |p: &usize| &plain.buffers[kernel.params[*p].buffer].name;
    assert_eq!((buffer(a).as_str(), buffer(b).as_str()), ("a", "w"));
    assert_eq!(kernel.params[*c].access, tir_lower::tile::Access::Mutable);

    let fused = lower_text(
        "%0 = input \"a\" : f16[8, 32]\n%1 = parameter \"w\" : f16[32, 16]\n\
         %2 = matmul %0, %1 : f16[8, 16]\n%3 = relu %2 : f16[8, 16]\noutput \"y\" = %3\n",
    );
    assert!(fused.kernels.iter().all(|k| k.library.is_none()));
    let ints = lower_text(
        "%0 = input \"a\" : i32[8, 32]\n%1 = input \"w\" : i32[32, 16]\n\
         %2 = matmul %0, %1 : i32[8, 16]\noutput \"y\" = %2\n",
    );
    assert!(ints.kernels.iter().all(|k| k.library.is_none()));
}

#[test]
fn a_product_plus_a_residual_carries_a_library_call_with_the_residual() {
    use tir_lower::tile::LibraryCall;
    let program = lower_text(
        "%0 = input \"x\" : f16[2, 32]\n%1 = parameter \"w\" : f16[32, 16]\n\
         %2 = input \"r\" : f16[2, 16]\n%3 = matmul %0, %1 : f16[2, 16]\n\
         %4 = add %2, %3 : f16[2, 16]\noutput \"y\" = %4\n",
    );
    assert_eq!(program.kernels.len(), 1);
    let kernel = &program.kernels[0];
    let Some(LibraryCall::MatMul { residual, .. }) = &kernel.library else {
        panic!("no library call: {:?}", kernel.library)
    };
    let residual = residual.expect("the add is the library's residual");
    assert_eq!(program.buffers[kernel.params[residual].buffer].name, "r");
    let text = tir_lower::tile::print::print_kernel(kernel);
    assert!(text.contains("@ param 1 + param"), "{text}");
    // Anything more than the one add keeps the product off the library.
    let scaled = lower_text(
        "%0 = input \"x\" : f16[2, 32]\n%1 = parameter \"w\" : f16[32, 16]\n\
         %2 = input \"r\" : f16[2, 16]\n%3 = matmul %0, %1 : f16[2, 16]\n\
         %4 = add %2, %3 : f16[2, 16]\n%5 = relu %4 : f16[2, 16]\noutput \"y\" = %5\n",
    );
    assert!(scaled.kernels.iter().all(|k| k.library.is_none()));
}

/// A product of 4 heads of 16 merged (`[1, 4, tokens, 16]` -> `[tokens, 64]`) with a weight.
fn merged_heads_product(tokens: u64) -> Program {
    lower_text(&format!(
        "%0 = input \"o\" : f16[1, 4, {tokens}, 16]\n%1 = parameter \"w\" : f16[64, 32]\n\
         %2 = permute %0 {{perm = [0, 2, 1, 3]}} : f16[1, {tokens}, 4, 16]\n\
         %3 = reshape %2 {{dims = [{tokens}, 64]}} : f16[{tokens}, 64]\n\
         %4 = matmul %3, %1 : f16[{tokens}, 32]\noutput \"y\" = %4\n"
    ))
}

#[test]
fn an_operand_read_through_layout_ops_that_move_nothing_keeps_the_library_call() {
    use tir_lower::tile::LibraryCall;
    // At one token the merge is the same bytes.
    let merged = merged_heads_product(1);
    assert_eq!(merged.kernels.len(), 1);
    let kernel = &merged.kernels[0];
    let Some(LibraryCall::MatMul { a, .. }) = &kernel.library else {
        panic!("no library call: {:?}", kernel.library)
    };
    assert_eq!(merged.buffers[kernel.params[*a].buffer].name, "o");
    // At two tokens the permute moves elements: no library call.
    let moved = merged_heads_product(2);
    assert_eq!(moved.kernels.len(), 1);
    assert!(moved.kernels[0].library.is_none(), "a moving permute");
}

#[test]
fn a_store_chain_that_moves_nothing_keeps_the_library_call() {
    // Split heads at one token: [1, 1, 64] -> [1, 1, 4, 16] -> [1, 4, 1, 16] is the same bytes.
    let one = lower_text(
        "%0 = input \"x\" : f16[1, 1, 32]\n%1 = parameter \"w\" : f16[32, 64]\n\
         %2 = matmul %0, %1 : f16[1, 1, 64]\n\
         %3 = reshape %2 {dims = [1, 1, 4, 16]} : f16[1, 1, 4, 16]\n\
         %4 = permute %3 {perm = [0, 2, 1, 3]} : f16[1, 4, 1, 16]\noutput \"y\" = %4\n",
    );
    assert_eq!(one.kernels.len(), 1);
    assert!(one.kernels[0].library.is_some(), "split heads at one token");
    // A transposed product moves every element: no library call.
    let transposed = lower_text(
        "%0 = input \"x\" : f16[4, 32]\n%1 = parameter \"w\" : f16[32, 64]\n\
         %2 = matmul %0, %1 : f16[4, 64]\n%3 = permute %2 {perm = [1, 0]} : f16[64, 4]\n\
         output \"y\" = %3\n",
    );
    assert_eq!(transposed.kernels.len(), 1);
    assert!(
        transposed.kernels[0].library.is_none(),
        "a transposed store"
    );
}

/// The K step of the single matmul kernel of `m`x`k` @ `k`x64 (f16), under tiles with a K step
/// of 32 and a matrix-vector K step of 128: the last dim of the tiles it loads from `a`.
fn matmul_k_step(m: u64, k: u64) -> u64 {
    use tir_lower::tile::{TileOp, Type};
    let graph = tir_graph::text::parse(&format!(
        "# tir graph, text form v1\n%0 = input \"a\" : f16[{m}, {k}]\n\
         %1 = parameter \"w\" : f16[{k}, 64]\n%2 = matmul %0, %1 : f16[{m}, 64]\n\
         output \"y\" = %2\n"
    ))
    .unwrap();
    let mut target = Target::default();
    target.tiles.matmul_k = 32;
    target.tiles.matvec_k = 128;
    let program = compile_graph(&graph, &target, &Limits::default())
        .unwrap()
        .program;
    let kernel = &program.kernels[0];
    let a = kernel
        .params
        .iter()
        .position(|p| program.buffers[p.buffer].name == "a")
        .expect("the kernel reads a");
    let mut a_views = std::collections::HashSet::new();
    let mut steps = Vec::new();
    kernel.walk(&mut |stmt| match &stmt.op {
        TileOp::MakeView { param, .. } if *param == a => {
            a_views.extend(stmt.defs.iter().map(|(id, _)| *id));
        }
        TileOp::Load { view, .. } if a_views.contains(view) => {
            if let Some((_, Type::Tile { shape, .. })) = stmt.defs.first() {
                steps.push(*shape.last().unwrap());
            }
        }
        _ => {}
    });
    assert_eq!(steps.len(), 1, "one load of a: {steps:?}");
    steps[0]
}

#[test]
fn matrix_vector_products_take_the_longer_k_step() {
    assert_eq!(matmul_k_step(1, 512), 128);
    assert_eq!(matmul_k_step(8, 512), 128);
    assert_eq!(matmul_k_step(16, 512), 32);
    // Never longer than K itself.
    assert_eq!(matmul_k_step(1, 64), 64);
}

/// The `For` loops of `kernel`, outermost first, and the parameters it reads.
fn loops_and_params(program: &Program, kernel: usize) -> (usize, usize) {
    let k = &program.kernels[kernel];
    let mut loops = 0;
    k.walk(&mut |s| loops += usize::from(matches!(s.op, tir_lower::tile::TileOp::For { .. })));
    (loops, k.params.len())
}

#[test]
fn causal_attention_walks_visible_blocks_unmasked_then_the_diagonal() {
    let causal = |causal| {
        let g = tir_graph::GraphBuilder::new();
        let qkv = |n: &str| g.input(n, tir_graph::DType::F16, tir_graph::shape![2, 4, 100, 32]);
        let (q, k, v) = (qkv("q").unwrap(), qkv("k").unwrap(), qkv("v").unwrap());
        g.output("o", &q.attention(&k, &v, causal).unwrap())
            .unwrap();
        lower(&g.finish().unwrap())
    };
    let program = causal(true);
    let at = program
        .kernels
        .iter()
        .position(|k| k.name.ends_with("attention"))
        .expect("an attention kernel");
    // Two key loops (whole blocks, then the diagonal with the mask computed from positions):
    // q, k, v and the output are its only parameters, no mask and no score buffer.
    assert_eq!(loops_and_params(&program, at), (2, 4));
    assert_eq!(program.kernels.len(), 1);
    let program = causal(false);
    assert_eq!(loops_and_params(&program, 0), (1, 4));
}

/// Past the optimizer's fold limit (4096 elements) the mask's position ranges reach lowering
/// as reshapes of a constant plus an offset; they are still recognised as causal.
#[test]
fn causal_attention_past_the_fold_limit_still_walks_visible_blocks() {
    for (q_len, k_len) in [(5000u64, 5000u64), (4500, 5000)] {
        let g = tir_graph::GraphBuilder::new();
        let qkv =
            |n: &str, s: u64| g.input(n, tir_graph::DType::F16, tir_graph::shape![1, 2, s, 16]);
        let q = qkv("q", q_len).unwrap();
        let (k, v) = (qkv("k", k_len).unwrap(), qkv("v", k_len).unwrap());
        g.output("o", &q.attention(&k, &v, true).unwrap()).unwrap();
        let program = lower(&g.finish().unwrap());
        assert_eq!(program.kernels.len(), 1, "{q_len}x{k_len}");
        assert_eq!(loops_and_params(&program, 0), (2, 4), "{q_len}x{k_len}");
    }
}

#[test]
fn attention_approximates_exp_only_where_probabilities_round_to_16_bits() {
    let exps = |dtype| {
        let g = tir_graph::GraphBuilder::new();
        let qkv = |n: &str| g.input(n, dtype, tir_graph::shape![1, 2, 40, 16]);
        let (q, k, v) = (qkv("q").unwrap(), qkv("k").unwrap(), qkv("v").unwrap());
        g.output("o", &q.attention(&k, &v, false).unwrap()).unwrap();
        let program = lower(&g.finish().unwrap());
        let (mut approx, mut exact) = (0, 0);
        for k in &program.kernels {
            k.walk(&mut |s| match &s.op {
                tir_lower::tile::TileOp::ApproxExp { .. } => approx += 1,
                tir_lower::tile::TileOp::Unary {
                    op: tir_graph::UnaryOp::Exp,
                    ..
                } => exact += 1,
                _ => {}
            });
        }
        (approx, exact)
    };
    // The running maximum's rescale and the block's probabilities.
    assert_eq!(exps(tir_graph::DType::F16), (2, 0));
    assert_eq!(exps(tir_graph::DType::BF16), (2, 0));
    assert_eq!(exps(tir_graph::DType::F32), (0, 2));
}

/// The program of an attention of one query over a concat of a cache of `ctx` positions and a
/// new token's key, masked to the first positions of the cache and the new token; for a target
/// that splits key loops over programs to fill `split_programs`.
fn attention_over_cache(ctx: u64, split_programs: u64) -> Program {
    use tir_graph::{shape, DType, GraphBuilder};
    let g = GraphBuilder::new();
    let q = g.input("q", DType::F16, shape![1, 2, 1, 32]).unwrap();
    let cache = g.input("cache", DType::F16, shape![1, 2, ctx, 32]).unwrap();
    let new = g.input("new", DType::F16, shape![1, 2, 1, 32]).unwrap();
    let keys = g.concat(&[&cache, &new], 2).unwrap();
    let pos = g.scalar(DType::I64, 5.0).unwrap();
    let cached = g.arange(DType::I64, ctx).unwrap().lt(&pos).unwrap();
    let one = g.constant(DType::Bool, shape![1], &[1.0]).unwrap();
    let visible = g.concat(&[&cached, &one], 0).unwrap();
    let y = q.attention_masked(&keys, &keys, Some(&visible)).unwrap();
    g.output("y", &y).unwrap();
    let mut target = Target::default();
    target.tiles.split_programs = split_programs;
    lower_for(&g.finish().unwrap(), &target)
}

/// The attention kernel of `program`.
fn attention_kernel(program: &Program) -> &tir_lower::tile::TileKernel {
    program
        .kernels
        .iter()
        .find(|k| k.name.ends_with("attention"))
        .expect("an attention kernel")
}

/// Per key loop of `program`'s kernels, the selects in its body over a block of scores (a
/// last axis of `bn`) and over a block of values (`bn` on the axis before).
fn key_masks(program: &Program, bn: u64) -> Vec<(usize, usize)> {
    let mut loops = Vec::new();
    for k in &program.kernels {
        k.walk(&mut |s| {
            let TileOp::For { body, .. } = &s.op else {
                return;
            };
            let (mut scores, mut values) = (0, 0);
            for st in &body.stmts {
                if let (TileOp::Select { .. }, Some((_, Type::Tile { shape, .. }))) =
                    (&st.op, st.defs.first())
                {
                    let n = shape.len();
                    scores += usize::from(shape[n - 1] == bn);
                    values += usize::from(n > 1 && shape[n - 2] == bn);
                }
            }
            loops.push((scores, values));
        });
    }
    loops
}

/// A key loop over whole blocks of one part of a concat masks no key past the end, and does
/// not mask the values: the cache's loop selects only with the graph's mask. The part cut
/// short by the end is the new token's one key, walked without a loop.
#[test]
fn key_loops_mask_only_what_can_pass_the_end() {
    assert_eq!(key_masks(&attention_over_cache(256, 0), 64), [(1, 0)]);
}

/// The new token's key is one step outside any loop, its products elementwise: the kernel's
/// only products on tensor cores are the cache loop's two. When the key loop is split over
/// programs, the step is taken only by the program whose share holds the new
/// token: elsewhere its score and its values are selected away, by two comparisons of the
/// share's bounds.
#[test]
fn a_new_tokens_key_is_one_step_without_a_loop_or_tensor_cores() {
    let shape_of = |split_programs: u64| {
        let program = attention_over_cache(256, split_programs);
        let at = attention_kernel(&program);
        let (mut products, mut in_loops) = (0, 0);
        at.walk(&mut |s| {
            if let TileOp::For { body, .. } = &s.op {
                in_loops += body
                    .stmts
                    .iter()
                    .filter(|st| matches!(st.op, TileOp::Mma { .. }))
                    .count();
            }
            products += usize::from(matches!(s.op, TileOp::Mma { .. }));
        });
        let bounds_compared = at
            .body
            .stmts
            .iter()
            .filter(|st| {
                matches!(
                    (&st.op, st.defs.first()),
                    (TileOp::IndexCmp { .. }, Some((_, Type::Tile { .. })))
                )
            })
            .count();
        (products, in_loops, bounds_compared)
    };
    assert_eq!(shape_of(0), (2, 2, 0));
    assert_eq!(shape_of(64), (2, 2, 2));
}

#[test]
fn attention_over_a_concat_of_keys_reads_each_part_through_views() {
    // Loops, and gathers (indexed loads) in them, of the attention kernel over a cache of `ctx`
    // positions and one new token (key blocks of 64 under the default target).
    let shape_of = |ctx: u64| {
        let program = attention_over_cache(ctx, 0);
        let (mut loops, mut gathers) = (0, 0);
        attention_kernel(&program).walk(&mut |s| match s.op {
            tir_lower::tile::TileOp::For { .. } => loops += 1,
            tir_lower::tile::TileOp::LoadIndexed { .. } => gathers += 1,
            _ => {}
        });
        (loops, gathers)
    };
    // The parts meet on a block boundary: the cache's blocks in a loop, then the new token's
    // one key, each through views.
    assert_eq!(shape_of(256), (1, 0));
    // The block that straddles the boundary gathers from both parts.
    let (loops, gathers) = shape_of(200);
    assert_eq!(loops, 2);
    assert!(gathers > 0);
}

/// `(rows, columns)` of each product in the attention kernel of 512 queries over `keys` keys
/// (f16, head dim 16), lowered with 128-query and 128-key blocks and `short_m`-query blocks for
/// short walks.
fn attention_products(keys: u64, causal: bool, short_m: u64) -> Vec<(u64, u64)> {
    use tir_graph::{shape, DType, GraphBuilder};
    let g = GraphBuilder::new();
    let q = g.input("q", DType::F16, shape![1, 2, 512, 16]).unwrap();
    let kv = g.input("kv", DType::F16, shape![1, 2, keys, 16]).unwrap();
    g.output("y", &q.attention(&kv, &kv, causal).unwrap())
        .unwrap();
    let mut target = Target::default();
    (target.tiles.attention_m, target.tiles.attention_n) = (128, 128);
    target.tiles.attention_short_m = short_m;
    let program = lower_for(&g.finish().unwrap(), &target);
    let mut products = std::collections::BTreeSet::new();
    attention_kernel(&program).walk(&mut |s| {
        if let (TileOp::Mma { .. }, Some((_, Type::Tile { shape, .. }))) = (&s.op, s.defs.first()) {
            products.insert((shape[shape.len() - 2], shape[shape.len() - 1]));
        }
    });
    products.into_iter().collect()
}

#[test]
fn a_short_key_walk_takes_the_short_query_block() {
    let rows = |keys: u64, short_m: u64| {
        let products = attention_products(keys, true, short_m);
        let rows: std::collections::BTreeSet<u64> = products.iter().map(|p| p.0).collect();
        rows.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(rows(4096, 64), [64]);
    assert_eq!(rows(4097, 64), [128]);
    assert_eq!(rows(4096, 0), [128]);
}

#[test]
fn a_causal_walk_takes_its_diagonal_in_half_key_blocks_when_queries_are_fewer() {
    // 64-query blocks against 128-key blocks: scores of 128 keys, then of 64 on the diagonal
    // (and the products with the values, 16 columns).
    assert_eq!(
        attention_products(4096, true, 64),
        [(64, 16), (64, 64), (64, 128)]
    );
    // 128-query blocks, and walks without a diagonal, take whole key blocks only.
    assert_eq!(attention_products(4097, true, 64), [(128, 16), (128, 128)]);
    assert_eq!(attention_products(4096, false, 64), [(64, 16), (64, 128)]);
}

#[test]
fn a_16_bit_attention_divides_once_per_row() {
    use tir_graph::{shape, BinaryOp, DType, GraphBuilder};
    // The last axis of each division's result in the attention kernel.
    let divisions = |dtype: DType| {
        let g = GraphBuilder::new();
        let q = g.input("q", dtype, shape![1, 2, 100, 32]).unwrap();
        g.output("y", &q.attention(&q, &q, true).unwrap()).unwrap();
        let program = lower(&g.finish().unwrap());
        let mut widths = Vec::new();
        attention_kernel(&program).walk(&mut |s| {
            if let (
                TileOp::Binary {
                    op: BinaryOp::Div, ..
                },
                Some((_, Type::Tile { shape, .. })),
            ) = (&s.op, s.defs.first())
            {
                widths.push(shape[shape.len() - 1]);
            }
        });
        widths
    };
    assert_eq!(divisions(DType::F16), [1]);
    assert_eq!(divisions(DType::BF16), [1]);
    assert_eq!(divisions(DType::F32), [32]);
}

/// An attention over heads split from `[b, s, h·d]` inputs and merged back, of `dtype`.
fn split_head_attention(dtype: tir_graph::DType, causal: bool) -> Program {
    use tir_graph::shape;
    let g = tir_graph::GraphBuilder::new();
    let heads = shape!["b", 100, 4, 16];
    let split = |n: &str| {
        g.input(n, dtype, shape!["b", 100, 64])
            .and_then(|x| x.reshape_to(&heads))
            .and_then(|x| x.permute(&[0, 2, 1, 3]))
            .unwrap()
    };
    let (q, k, v) = (split("q"), split("k"), split("v"));
    let o = q.attention(&k, &v, causal).unwrap();
    let merged = o
        .permute(&[0, 2, 1, 3])
        .and_then(|o| o.reshape_to(&shape!["b", 100, 64]))
        .unwrap();
    g.output("o", &merged).unwrap();
    lower(&g.finish().unwrap())
}

#[test]
fn a_16_bit_attention_over_split_heads_carries_a_library_call_with_its_strides() {
    use tir_graph::{DType, Dim};
    use tir_lower::tile::{DimPolynomial, LibraryCall};
    for causal in [false, true] {
        let program = split_head_attention(DType::BF16, causal);
        let kernel = attention_kernel(&program);
        let Some(LibraryCall::Attention(call)) = &kernel.library else {
            panic!("no library call: {:?}", kernel.library)
        };
        let tir_lower::tile::LibraryAttention {
            q,
            k,
            v,
            o,
            dtype,
            dims,
            d,
            d_v,
            scale,
            causal: masked,
        } = call.as_ref();
        assert_eq!((*dtype, *d, *d_v, *masked), (DType::BF16, 16, 16, causal));
        assert!(!call.is_static(), "its batch is symbolic");
        assert_eq!(scale.0, 0.25, "1/sqrt(16)");
        let b = Dim::Symbolic("b".into());
        assert_eq!(dims, &[b.clone(), 4.into(), 100.into(), 100.into()]);
        // [b, h, s, d] seen in a [b, s, h·d] buffer: strides [s·h·d, d, h·d, 1].
        let stride = |factor: u64, dims: Vec<Dim>| DimPolynomial {
            terms: vec![(factor, dims)],
        };
        let heads = [
            stride(6400, vec![]),
            stride(16, vec![]),
            stride(64, vec![]),
            stride(1, vec![]),
        ];
        for (name, operand) in [("q", q), ("k", k), ("v", v), ("output \"o\"", o)] {
            assert_eq!(operand.strides, heads, "{name}");
            let buffer = &program.buffers[kernel.params[operand.param].buffer];
            assert_eq!(buffer.name, name);
        }
    }
}

#[test]
fn a_static_attention_carries_a_static_library_call() {
    use tir_lower::tile::LibraryCall;
    let g = tir_graph::GraphBuilder::new();
    let qkv = |n: &str| {
        g.input(n, tir_graph::DType::F16, tir_graph::shape![2, 4, 100, 32])
            .unwrap()
    };
    let (q, k, v) = (qkv("q"), qkv("k"), qkv("v"));
    g.output("o", &q.attention(&k, &v, true).unwrap()).unwrap();
    let program = lower(&g.finish().unwrap());
    let Some(LibraryCall::Attention(call)) = &attention_kernel(&program).library else {
        panic!("no library call")
    };
    assert!(call.is_static() && call.causal);
}

#[test]
fn a_rank_3_attention_is_a_library_call_of_one_batch() {
    use tir_graph::{shape, DType, Dim};
    use tir_lower::tile::LibraryCall;
    let g = tir_graph::GraphBuilder::new();
    let q = g.input("q", DType::F16, shape![6, 96, 64]).unwrap();
    let k = g.input("k", DType::F16, shape![6, 96, 64]).unwrap();
    let v = g.input("v", DType::F16, shape![6, 96, 32]).unwrap();
    g.output("o", &q.attention(&k, &v, true).unwrap()).unwrap();
    let program = lower(&g.finish().unwrap());
    let Some(LibraryCall::Attention(call)) = &attention_kernel(&program).library else {
        panic!("no library call")
    };
    let dims: [Dim; 4] = [1, 6, 96, 96].map(Dim::Static);
    assert_eq!((&call.dims, call.d, call.d_v), (&dims, 64, 32));
    // The missing batch dim has no stride term; v's rows are 32 apart.
    assert!(call.v.strides[0].terms.is_empty());
    assert_eq!(call.v.strides[2].terms, [(32, vec![])]);
}

#[test]
fn attention_in_f32_or_with_a_mask_tensor_carries_no_library_call() {
    let program = split_head_attention(tir_graph::DType::F32, true);
    assert!(attention_kernel(&program).library.is_none());
    let g = tir_graph::GraphBuilder::new();
    let f16 = tir_graph::DType::F16;
    let qkv = |n: &str| g.input(n, f16, tir_graph::shape![1, 2, 40, 16]).unwrap();
    let (q, k, v) = (qkv("q"), qkv("k"), qkv("v"));
    let keep = g
        .input(
            "keep",
            tir_graph::DType::Bool,
            tir_graph::shape![1, 1, 40, 40],
        )
        .unwrap();
    g.output("o", &q.attention_masked(&k, &v, Some(&keep)).unwrap())
        .unwrap();
    let program = lower(&g.finish().unwrap());
    assert!(attention_kernel(&program).library.is_none());
}

/// A 3x3 conv of `dtype` over `x: [n, 8, 10, 10]` (stride 2, padding 1), with `epilogue` applied.
fn conv_graph(
    dtype: tir_graph::DType,
    epilogue: fn(
        &tir_graph::GraphBuilder,
        tir_graph::Tensor,
    ) -> Result<tir_graph::Tensor, tir_graph::GraphError>,
) -> Graph {
    use tir_graph::{shape, GraphBuilder};
    let g = GraphBuilder::new();
    let x = g.input("x", dtype, shape!["n", 8, 10, 10]).unwrap();
    let w = g.parameter("w", dtype, shape![16, 8, 3, 3]).unwrap();
    let y = x.conv(&w, &[2, 2], &[1, 1], &[(1, 1), (1, 0)], 1).unwrap();
    g.output("y", &epilogue(&g, y).unwrap()).unwrap();
    g.finish().unwrap()
}

#[test]
fn a_conv_with_a_channel_bias_and_an_activation_carries_a_library_call() {
    use tir_graph::{shape, DType, Dim};
    use tir_lower::tile::{ConvActivation, LibraryCall};
    let program = lower(&conv_graph(DType::F16, |g, y| {
        let b = g.parameter("b", DType::F16, shape![16])?;
        let b = b.reshape(&[16.into(), 1.into(), 1.into()])?;
        (&b + &y)?.sigmoid()
    }));
    // The NCHW input is copied channels-last, the conv stores channels-last, and the result
    // is permuted back: three kernels, the middle one the library's.
    assert_eq!(program.kernels.len(), 3);
    let kernel = &program.kernels[1];
    let Some(LibraryCall::Conv(call)) = &kernel.library else {
        panic!("no library call: {:?}", kernel.library)
    };
    let name = |p: usize| program.buffers[kernel.params[p].buffer].name.as_str();
    assert_eq!(name(call.w), "w");
    assert_ne!(name(call.x), "x");
    assert_eq!(call.bias.map(name), Some("b"));
    assert_eq!(call.activation, Some(ConvActivation::Sigmoid));
    assert_eq!(call.batch, Dim::from("n"));
    assert!(!call.is_static());
    assert_eq!((call.channels, call.out_channels, call.groups), (8, 16, 1));
    assert_eq!(call.output, vec![5, 5]);
    assert_eq!(call.pads, vec![(1, 1), (1, 0)]);
    assert_eq!(call.layout[0], vec![800, 1, 80, 8]);
    assert_eq!(call.layout[2], vec![400, 1, 80, 16]);
    let text = tir_lower::program::print_program(&program);
    assert!(text.contains("library conv: param"), "{text}");
}

#[test]
fn a_conv_whose_epilogue_the_library_lacks_carries_no_library_call() {
    use tir_graph::{shape, DType};
    use tir_lower::tile::LibraryCall;
    let library = |graph: &Graph| {
        let program = lower(graph);
        program
            .kernels
            .iter()
            .any(|k| matches!(&k.library, Some(LibraryCall::Conv(_))))
    };
    // A plain conv and one with its ReLU have a call; f32, a bias over every element, a
    // scale, or a bias broadcast along the wrong axis have none.
    assert!(library(&conv_graph(DType::BF16, |_, y| Ok(y))));
    assert!(library(&conv_graph(DType::F16, |_, y| y.relu())));
    assert!(!library(&conv_graph(DType::F32, |_, y| y.relu())));
    assert!(!library(&conv_graph(DType::F16, |g, y| {
        let r = g.input("r", DType::F16, shape!["n", 16, 5, 5])?;
        &y + &r
    })));
    assert!(!library(&conv_graph(DType::F16, |_, y| (&y * &y)?.relu())));
    assert!(!library(&conv_graph(DType::F16, |g, y| {
        let b = g.parameter("b", DType::F16, shape![5])?;
        &y + &b
    })));
}

/// A quantized decoder layer lowers with its dequantizations inside the products: certified
/// kernels, no buffer holding an f16 weight (the memory plan has no dequantized copy), and
/// AWQ's packed words read through views (a block of words per tile, reshaped after the
/// unpacking), not gathered per element; split-K still applies at one row.
#[test]
fn quantized_products_read_their_packed_weights() {
    use tir_graph::quant::{Fp8Scale, WeightFormat};
    let cfg = DecoderConfig {
        hidden: 256,
        heads: 4,
        context: 16,
        ffn: 384,
    };
    let mut target = Target::default();
    target.tiles.split_programs = 64;
    target.tiles.matvec_k = 32;
    for format in [
        WeightFormat::Int8,
        WeightFormat::Fp8(Fp8Scale::Row),
        WeightFormat::Awq { group: 32 },
        WeightFormat::Gptq { group: 128 },
    ] {
        let graph = models::quantized_decoder(&cfg, 1, format).unwrap();
        let program = lower_for(&graph, &target);
        assert_eq!(program.kernels.len(), program.certificates.len());
        for b in &program.buffers {
            let weight_sized = b.ty.dtype == tir_graph::DType::F16
                && b.ty.rank() == 2
                && b.ty
                    .shape
                    .dims()
                    .iter()
                    .all(|d| d.as_static().is_some_and(|n| n >= 256));
            assert!(!weight_sized, "{format:?}: buffer {} is {}", b.name, b.ty);
        }
        let splits = program
            .kernels
            .iter()
            .filter(|k| k.name.ends_with("_splitsum"))
            .count();
        assert!(splits > 0, "{format:?}: no split-K product");
        if format == (WeightFormat::Awq { group: 32 }) {
            for kernel in program
                .kernels
                .iter()
                .filter(|k| k.name.ends_with("_matmul"))
            {
                let mut indexed = 0;
                kernel.walk(&mut |stmt| {
                    indexed += usize::from(matches!(stmt.op, TileOp::LoadIndexed { .. }));
                });
                assert_eq!(indexed, 0, "{}: an indexed load", kernel.name);
            }
        }
    }
}

#[test]
fn mesh_steps_cut_the_schedule_at_collectives_and_hold_every_kernel_once() {
    use tir_lower::mesh::{compile_sharded, MeshSpec};
    use tir_lower::program::MeshStep;
    let cfg = DecoderConfig {
        hidden: 64,
        heads: 4,
        context: 16,
        ffn: 128,
    };
    let graph = models::decoder(&cfg, 2).unwrap();
    let mesh = MeshSpec {
        world: 2,
        shardings: Default::default(),
        tensor_parallel: true,
    };
    let program = compile_sharded(&graph, &mesh, &Target::default(), &Limits::default())
        .unwrap()
        .compiled
        .program;
    let steps = program.mesh_steps();
    let mut seen = Vec::new();
    let mut collectives = 0;
    for step in &steps {
        match step {
            MeshStep::Collective(k) => {
                assert!(program.kernels[*k].collective().is_some());
                collectives += 1;
                seen.push(*k);
            }
            MeshStep::Kernels(ks) => {
                assert!(!ks.is_empty());
                assert!(ks
                    .iter()
                    .all(|&k| program.kernels[k].collective().is_none()));
                seen.extend(ks);
            }
        }
    }
    // Two all-reduces a layer (after o and after down), each kernel once, dependencies first.
    assert_eq!(collectives, 4);
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..program.kernels.len()).collect::<Vec<_>>());
    for (at, &k) in seen.iter().enumerate() {
        for dep in &program.schedule.deps[k] {
            assert!(
                seen[..at].contains(dep),
                "kernel {k} runs before its dependency {dep}"
            );
        }
    }
}

/// A conv between NHWC tensors (the layout pass keeps them channels-last): its library call
/// carries NHWC strides for `x` and `y`, in the conv's `[N, C, H, W]` axis order.
#[test]
fn a_channels_last_conv_hands_the_library_nhwc_strides() {
    use tir_graph::{shape, DType, GraphBuilder};
    use tir_lower::tile::LibraryCall;
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![2, 10, 10, 8]).unwrap();
    let w = g.parameter("w", DType::F16, shape![16, 8, 3, 3]).unwrap();
    let b = g.parameter("b", DType::F16, shape![16]).unwrap();
    let y = x
        .permute(&[0, 3, 1, 2])
        .unwrap()
        .conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], 1)
        .unwrap();
    let bias = b.reshape(&[16.into(), 1.into(), 1.into()]).unwrap();
    let y = (&y + &bias).unwrap().relu().unwrap();
    g.output("y", &y.permute(&[0, 2, 3, 1]).unwrap()).unwrap();
    let program = lower(&g.finish().unwrap());
    assert_eq!(program.kernels.len(), 1);
    let kernel = &program.kernels[0];
    let Some(LibraryCall::Conv(call)) = &kernel.library else {
        panic!("no library call: {:?}", kernel.library)
    };
    let name = |p: usize| program.buffers[kernel.params[p].buffer].name.as_str();
    assert_eq!((name(call.x), call.bias.map(name)), ("x", Some("b")));
    assert_eq!(call.layout[0], vec![800, 1, 80, 8]);
    assert_eq!(call.layout[1], vec![72, 9, 3, 1]);
    assert_eq!(call.layout[2], vec![1600, 1, 160, 16]);
}
