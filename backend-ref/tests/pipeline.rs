//! The whole CPU pipeline against the f64 oracle: graph -> optimizer -> legality -> tile IR ->
//! reference backend (checking mode: every element written exactly once), on random graphs and
//! on the example models at small sizes.

use backend_ref::RefBackend;
use proptest::prelude::*;
use std::collections::BTreeMap;
use tir_graph::eval::{concrete_dims, evaluate, F64Tensor};
use tir_graph::models::{self, AttentionConfig, DecoderConfig};
use tir_graph::testing::arb_numeric_graph;
use tir_graph::{DType, Graph};
use tir_lower::testing::RunF64;
use tir_lower::{compile_graph, Backend, Target};
use tir_opt::Limits;

/// Random inputs and parameters for `graph`, scaled down so f16 models stay in range.
fn sources(
    graph: &Graph,
    dims: &BTreeMap<String, u64>,
    seed: u64,
    scale: f64,
) -> BTreeMap<String, F64Tensor> {
    graph
        .inputs()
        .into_iter()
        .chain(graph.parameters())
        .enumerate()
        .map(|(i, (name, id))| {
            let ty = graph.ty(id);
            let shape = concrete_dims(&ty.shape, dims).unwrap();
            let mut t = F64Tensor::random(ty.dtype, shape, seed.wrapping_add(i as u64));
            if ty.dtype.is_float() {
                t.data
                    .iter_mut()
                    .for_each(|v| *v = ty.dtype.round_value(*v * scale));
            }
            (name, t)
        })
        .collect()
}

/// The largest error of `got` against `want` relative to `1 + |want|`; NaN where only one is
/// NaN, an infinity that differs, or a shape or dtype that differs, fails.
fn worst_error(name: &str, got: &F64Tensor, want: &F64Tensor) -> Result<f64, String> {
    if got.dims != want.dims || got.dtype != want.dtype {
        return Err(format!(
            "{name}: {:?} {:?} vs {:?} {:?}",
            got.dtype, got.dims, want.dtype, want.dims
        ));
    }
    let mut worst = 0f64;
    for (i, (&g, &w)) in got.data.iter().zip(&want.data).enumerate() {
        if g.is_nan() || w.is_nan() {
            if g.is_nan() != w.is_nan() {
                return Err(format!("{name}[{i}]: got {g}, expected {w}"));
            }
            continue;
        }
        if g.is_infinite() || w.is_infinite() {
            if g != w {
                return Err(format!("{name}[{i}]: got {g}, expected {w}"));
            }
            continue;
        }
        // Relative to 1 + |expected|: absolute near zero, relative for large values.
        worst = worst.max((g - w).abs() / (1.0 + w.abs()));
    }
    Ok(worst)
}

/// `sources` with every float value moved by a relative 2^-18 or less (deterministically): how
/// much the oracle's outputs move under it measures how ill-conditioned the graph is there.
fn perturbed(sources: &BTreeMap<String, F64Tensor>) -> BTreeMap<String, F64Tensor> {
    let mut out = sources.clone();
    for t in out.values_mut().filter(|t| t.dtype.is_float()) {
        for (i, v) in t.data.iter_mut().enumerate() {
            let r = ((i * 7919) % 200) as f64 / 100.0 - 1.0;
            *v = t.dtype.round_value(*v * (1.0 + r * 2f64.powi(-18)));
        }
    }
    out
}

/// Runs `graph` on the checking reference backend and compares every f32 output with the
/// oracle (rounded to f32): within `1e-4 * (1 + |expected|)` plus 64 times how far the oracle
/// itself moves when the inputs move by f32-sized amounts (the reference rounds every op to
/// f32, the oracle nothing, so a division by a cancelled sum legitimately differs). NaN must
/// match NaN and infinity infinity, except where the perturbed oracle flips on them.
fn check_conditioned(graph: &Graph, sources: &BTreeMap<String, F64Tensor>) -> Result<(), String> {
    let backend = RefBackend::checking();
    let compiled =
        compile_graph(graph, &backend.target(), &Limits::default()).map_err(|e| e.to_string())?;
    let mut exe = backend
        .compile(&compiled.program)
        .map_err(|e| e.to_string())?;
    let got = exe.run_f64(sources).map_err(|e| e.to_string())?;
    let want = evaluate(graph, sources).map_err(|e| e.to_string())?;
    let moved = evaluate(graph, &perturbed(sources)).map_err(|e| e.to_string())?;
    for (name, w) in &want.outputs {
        let (g, m) = (&got.outputs[name], &moved.outputs[name]);
        if g.dims != w.dims || g.dtype != w.dtype {
            return Err(format!(
                "{name}: {:?} {:?} vs {:?} {:?}",
                g.dtype, g.dims, w.dtype, w.dims
            ));
        }
        for (i, ((&g, &w), &m)) in g.data.iter().zip(&w.data).zip(&m.data).enumerate() {
            let (w, m) = (w_round(w), w_round(m));
            if w.is_finite() != m.is_finite() || w.is_nan() != m.is_nan() {
                continue; // unstable here: the oracle itself flips
            }
            let ok = if w.is_nan() {
                g.is_nan()
            } else if w.is_infinite() {
                g == w
            } else {
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()) + 64.0 * (m - w).abs()
            };
            if !ok {
                return Err(format!(
                    "{name}[{i}]: got {g}, expected {w} (perturbed oracle {m})"
                ));
            }
        }
    }
    Ok(())
}

/// An f32 output's expected value: the oracle's rounded to f32 (which may overflow to inf).
fn w_round(w: f64) -> f64 {
    DType::F32.round_value(w)
}

/// Compiles and runs `graph` on the checking reference backend, and compares every output with
/// the oracle within `tolerance`.
fn check(
    graph: &Graph,
    sources: &BTreeMap<String, F64Tensor>,
    tolerance: f64,
) -> Result<(), String> {
    check_for(graph, sources, tolerance, &RefBackend::checking().target()).map(|_| ())
}

/// [`check`] for `target`; returns the names of the program's kernels.
fn check_for(
    graph: &Graph,
    sources: &BTreeMap<String, F64Tensor>,
    tolerance: f64,
    target: &Target,
) -> Result<Vec<String>, String> {
    let backend = RefBackend::checking();
    let compiled = compile_graph(graph, target, &Limits::default()).map_err(|e| e.to_string())?;
    let mut exe = backend
        .compile(&compiled.program)
        .map_err(|e| e.to_string())?;
    let got = exe.run_f64(sources).map_err(|e| e.to_string())?;
    let want = evaluate(graph, sources).map_err(|e| e.to_string())?;
    for (name, w) in &want.outputs {
        let err = worst_error(name, &got.outputs[name], w)?;
        if err > tolerance {
            return Err(format!("{name}: error {err:.3e} above {tolerance:.0e}"));
        }
    }
    Ok(compiled
        .program
        .kernels
        .iter()
        .map(|k| k.name.clone())
        .collect())
}

/// The largest finite magnitude of any value the graph computes (the oracle's), or `None` if
/// the oracle refuses the inputs.
fn largest_intermediate(graph: &Graph, srcs: &BTreeMap<String, F64Tensor>) -> Option<f64> {
    let mut all = graph.clone();
    for id in graph.node_ids() {
        all.add_output(&format!("__node{}", id.index()), id).ok()?;
    }
    let values = evaluate(&all, srcs).ok()?;
    let finite = values
        .outputs
        .values()
        .flat_map(|t| t.data.iter())
        .filter(|v| v.is_finite());
    Some(finite.fold(0f64, |m, v| m.max(v.abs())))
}

proptest! {
    // A fixed seed: CI sees the same graphs every time (set PROPTEST_CASES to explore more).
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7172),
        ..ProptestConfig::default()
    })]

    /// f32 graphs against the oracle, with the tolerance of `check_conditioned`. Graphs whose
    /// values approach f32's range (where f32 overflows and f64 does not) are left out.
    #[test]
    fn random_graphs_match_the_oracle(graph in arb_numeric_graph(), seed in any::<u64>()) {
        let srcs = sources(&graph, &BTreeMap::new(), seed, 1.0);
        // The oracle refuses a few generated graphs (a max over an empty axis): nothing to compare.
        let largest = largest_intermediate(&graph, &srcs);
        prop_assume!(largest.is_some_and(|m| m < 1e30));
        check_conditioned(&graph, &srcs)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", tir_graph::text::print(&graph))))?;
    }
}

fn dims(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn example_models_match_the_oracle_in_f16() {
    let cases: Vec<(&str, Graph, BTreeMap<String, u64>)> = vec![
        ("mlp", models::mlp(32, 96).unwrap(), dims(&[("batch", 3)])),
        (
            "ln_gelu",
            models::ln_gelu(100).unwrap(),
            dims(&[("tokens", 5)]),
        ),
        (
            "softmax",
            models::softmax(300).unwrap(),
            dims(&[("rows", 7)]),
        ),
        (
            "attention",
            models::attention(&AttentionConfig {
                seq: 12,
                hidden: 32,
                heads: 4,
                causal: true,
            })
            .unwrap(),
            dims(&[("batch", 2)]),
        ),
    ];
    for (name, graph, dims) in cases {
        let srcs = sources(&graph, &dims, 7, 0.25);
        check(&graph, &srcs, 2e-2).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn matrix_vector_products_split_their_k_loop_to_fill_the_target() {
    use tir_graph::{shape, GraphBuilder};
    let mut target = RefBackend::checking().target();
    target.tiles.split_programs = 64;
    // (rows, K, N, transposed weight): K not a multiple of the step, a batch of rows, and
    // `x @ wᵀ` as exported models write it.
    for (dtype, rows, k, n, transposed) in [
        (DType::F16, 1u64, 1000u64, 40u64, false),
        (DType::BF16, 3, 520, 70, true),
        (DType::F32, 1, 4096, 8, false),
    ] {
        let g = GraphBuilder::new();
        let x = g.input("x", dtype, shape![rows, k]).unwrap();
        let w = if transposed {
            g.parameter("w", dtype, shape![n, k])
                .unwrap()
                .transpose()
                .unwrap()
        } else {
            g.parameter("w", dtype, shape![k, n]).unwrap()
        };
        let bias = g.parameter("bias", dtype, shape![n]).unwrap();
        let residual = g.input("residual", dtype, shape![rows, n]).unwrap();
        let y = x.matmul(&w).unwrap().add(&bias).unwrap();
        let y = y.relu().unwrap().add(&residual).unwrap();
        g.output("y", &y).unwrap();
        let graph = g.finish().unwrap();
        let srcs = sources(&graph, &BTreeMap::new(), k, 0.5);
        let what = format!("{dtype} {rows}x{k} @ {k}x{n}");
        let kernels =
            check_for(&graph, &srcs, 3e-2, &target).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            kernels.iter().any(|k| k.ends_with("_splitsum")),
            "{what}: no split K loop in {kernels:?}"
        );
        // The same graph without splitting: one kernel fewer.
        let unsplit = check_for(&graph, &srcs, 3e-2, &RefBackend::checking().target()).unwrap();
        assert_eq!(
            unsplit.len() + 1,
            kernels.len(),
            "{what}: {unsplit:?} / {kernels:?}"
        );
    }
}

#[test]
fn a_product_a_library_can_run_splits_only_where_products_run_on_their_own_kernels() {
    use tir_graph::{shape, GraphBuilder};
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![1, 1000]).unwrap();
    let w = g.parameter("w", DType::F16, shape![1000, 40]).unwrap();
    let residual = g.input("residual", DType::F16, shape![1, 40]).unwrap();
    g.output("y", &(&x.matmul(&w).unwrap() + &residual).unwrap())
        .unwrap();
    let graph = g.finish().unwrap();
    let srcs = sources(&graph, &BTreeMap::new(), 1000, 0.5);
    let mut own_kernels = RefBackend::checking().target();
    own_kernels.tiles.split_programs = 64;
    let split = check_for(&graph, &srcs, 3e-2, &own_kernels).unwrap();
    assert!(split.iter().any(|k| k.ends_with("_splitsum")), "{split:?}");
    // A target that keeps epilogues out of products runs them on a library: kept whole.
    let mut on_library = own_kernels.clone();
    on_library.fusion.fuse_matmul_epilogue = false;
    let whole = check_for(&graph, &srcs, 3e-2, &on_library).unwrap();
    assert_eq!(whole.len(), 1, "{whole:?}");
}

#[test]
fn attention_over_a_kv_cache_splits_its_key_loop_to_fill_the_target() {
    use tir_graph::{shape, GraphBuilder};
    let mut target = RefBackend::checking().target();
    target.tiles.split_programs = 64;
    // A cache whose length meets the key blocks (the new token's key is then a step of its
    // own) or not, with positions past `filled` masked out (`filled = 0`: only the new token
    // is seen); several query rows in the last cases.
    for (dtype, ctx, filled, rows) in [
        (DType::F16, 256u64, 100.0, 1u64),
        (DType::BF16, 192, 0.0, 1),
        (DType::BF16, 200, 0.0, 1),
        (DType::F32, 77, 77.0, 3),
        (DType::F32, 128, 50.0, 3),
    ] {
        let g = GraphBuilder::new();
        let q = g.input("q", dtype, shape![1, 2, rows, 32]).unwrap();
        let cache = g.input("cache", dtype, shape![1, 2, ctx, 32]).unwrap();
        let new = g.input("new", dtype, shape![1, 2, 1, 32]).unwrap();
        let keys = g.concat(&[&cache, &new], 2).unwrap();
        let pos = g.scalar(DType::I64, filled).unwrap();
        let cached = g.arange(DType::I64, ctx).unwrap().lt(&pos).unwrap();
        let one = g.constant(DType::Bool, shape![1], &[1.0]).unwrap();
        let visible = g.concat(&[&cached, &one], 0).unwrap();
        let y = q.attention_masked(&keys, &keys, Some(&visible)).unwrap();
        g.output("y", &y).unwrap();
        let graph = g.finish().unwrap();
        let srcs = sources(&graph, &BTreeMap::new(), ctx, 1.0);
        let what = format!("{dtype} ctx {ctx}");
        let kernels =
            check_for(&graph, &srcs, 2e-2, &target).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            kernels.iter().any(|k| k.ends_with("_splitsum")),
            "{what}: no split key loop in {kernels:?}"
        );
        let unsplit = check_for(&graph, &srcs, 2e-2, &RefBackend::checking().target()).unwrap();
        assert_eq!(
            unsplit.len() + 1,
            kernels.len(),
            "{what}: {unsplit:?} / {kernels:?}"
        );
    }
}

#[test]
fn short_query_blocks_match_the_oracle_under_causal_and_padding_masks() {
    use tir_graph::{shape, GraphBuilder};
    // The GPU's geometry at a smaller scale: query blocks half the key block, so that a causal
    // program's diagonal block is partly visible to every one of its rows.
    let mut target = RefBackend::checking().target();
    target.tiles.attention_m = 64;
    target.tiles.attention_n = 64;
    target.tiles.attention_short_m = 32;
    // (dtype, queries, keys, causal): lengths off the blocks, more keys than queries (a causal
    // offset), and a padding mask over the keys.
    for (dtype, queries, keys, causal) in [
        (DType::F16, 100u64, 100u64, true),
        (DType::BF16, 45, 130, true),
        (DType::F16, 70, 70, false),
    ] {
        let g = GraphBuilder::new();
        let q = g.input("q", dtype, shape![1, 2, queries, 16]).unwrap();
        let kv = g.input("kv", dtype, shape![1, 2, keys, 16]).unwrap();
        let y = if causal {
            q.attention(&kv, &kv, true).unwrap()
        } else {
            let pos = g.scalar(DType::I64, 40.0).unwrap();
            let visible = g.arange(DType::I64, keys).unwrap().lt(&pos).unwrap();
            q.attention_masked(&kv, &kv, Some(&visible)).unwrap()
        };
        g.output("y", &y).unwrap();
        let graph = g.finish().unwrap();
        let srcs = sources(&graph, &BTreeMap::new(), keys, 1.0);
        let what = format!("{dtype} {queries}x{keys} causal {causal}");
        check_for(&graph, &srcs, 2e-2, &target).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

#[test]
fn a_head_merge_over_a_symbolic_sequence_is_the_attention_kernels_store() {
    use tir_graph::{shape, Dim, GraphBuilder, Shape};
    // The attention's heads merged back ([1, 2, seq, 16] -> [1, seq, 32]) and read by a softmax
    // (which takes no permute): the attention kernel stores the merge, through a view whose
    // batch stride is `seq · 32`, at sequence lengths off the query block.
    let target = RefBackend::checking().target();
    for seq in [Dim::Symbolic("seq".into()), Dim::Static(70)] {
        let g = GraphBuilder::new();
        let q_dims = vec![Dim::Static(1), Dim::Static(2), seq.clone(), Dim::Static(16)];
        let q = g
            .input("q", DType::F16, Shape::new(q_dims).unwrap())
            .unwrap();
        let kv = g.input("kv", DType::F16, shape![1, 2, 70, 16]).unwrap();
        let heads = q.attention(&kv, &kv, false).unwrap();
        let merged = Shape::new(vec![Dim::Static(1), seq.clone(), Dim::Static(32)]).unwrap();
        let merged = heads
            .permute(&[0, 2, 1, 3])
            .unwrap()
            .reshape_to(&merged)
            .unwrap();
        g.output("y", &merged.softmax(2).unwrap()).unwrap();
        let graph = g.finish().unwrap();
        let lengths: &[u64] = if seq.as_static().is_some() {
            &[70]
        } else {
            &[5, 70]
        };
        for &length in lengths {
            let srcs = sources(&graph, &dims(&[("seq", length)]), length, 1.0);
            let what = format!("seq {seq:?} at {length}");
            let kernels =
                check_for(&graph, &srcs, 2e-2, &target).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(kernels.len(), 2, "{what}: {kernels:?}");
            assert!(kernels[0].ends_with("attention"), "{what}: {kernels:?}");
        }
    }
}

#[test]
fn a_kv_cache_fills_up_run_by_run() {
    let cfg = DecoderConfig {
        hidden: 16,
        heads: 2,
        context: 8,
        ffn: 32,
    };
    let graph = models::decoder_block(&cfg).unwrap();
    let backend = RefBackend::checking();
    let compiled = compile_graph(&graph, &backend.target(), &Limits::default()).unwrap();
    let mut exe = backend.compile(&compiled.program).unwrap();
    let mut states: BTreeMap<String, F64Tensor> = BTreeMap::new();
    for pos in 0..3u64 {
        let mut srcs = sources(&graph, &BTreeMap::new(), 100 + pos, 0.25);
        srcs.insert(
            "pos".into(),
            F64Tensor::new(DType::I64, vec![], vec![pos as f64]).unwrap(),
        );
        // The oracle sees the states the backend holds before this run.
        let mut oracle_sources = srcs.clone();
        oracle_sources.extend(states.clone());
        let want = evaluate(&graph, &oracle_sources).unwrap();
        let got = exe.run_f64(&srcs).unwrap();
        let err = worst_error("y", &got.outputs["y"], &want.outputs["y"]).unwrap();
        assert!(err < 2e-2, "run {pos}: error {err}");
        states = exe.states_f64();
        for (name, want_state) in &want.states {
            let err = worst_error(name, &states[name], want_state).unwrap();
            assert!(err < 2e-2, "run {pos}, state {name}: error {err}");
            // Row `pos` of every head is now written; later rows are still zero.
            let later = (pos as usize + 1..cfg.context as usize).all(|r| {
                (0..2).all(|h| (0..8).all(|d| states[name].data[(h * 8 + r) * 8 + d] == 0.0))
            });
            assert!(later, "run {pos}: {name} has rows past {pos}");
        }
    }
    let mut srcs = sources(&graph, &BTreeMap::new(), 9, 0.25);
    srcs.insert(
        "pos".into(),
        F64Tensor::new(DType::I64, vec![], vec![8.0]).unwrap(),
    );
    let before = exe.states_f64();
    let e = exe.run_f64(&srcs).unwrap_err().to_string();
    assert!(e.contains("write position"), "{e}");
    assert_eq!(
        exe.states_f64(),
        before,
        "a refused run leaves the states as they were"
    );
}

/// Regression: states updated from each other (`a := b + x`, `b := a`) each wait for the other's
/// read of the old value, so neither update can run in place; lowering refused such graphs
/// ("read both at its value from the start of the run and after its update") until one of the
/// updates went out of place. Found by the random graphs below (seeds 1 and 3, about once in
/// 5000 graphs); the second graph is the one seed 1 shrank to.
#[test]
fn states_updated_from_each_other_swap_their_values() {
    let swap = tir_graph::text::parse(
        "%0 = state \"a\" : f32[300]\n\
         %1 = state \"b\" : f32[300]\n\
         %2 = input \"x\" : f32[300]\n\
         %3 = add %1, %2 : f32[300]\n\
         %4 = state_assign %0, %3 : f32[300]\n\
         %5 = state_assign %1, %0 : f32[300]\n\
         %6 = mul %0, %1 : f32[300]\n\
         output \"y\" = %6\n",
    )
    .unwrap();
    let shrunk = tir_graph::text::parse(
        "%0 = input \"x\" : f64[4]\n\
         %1 = parameter \"v2\" : bf16[4]\n\
         %2 = squeeze %1 {axes = []} : bf16[4]\n\
         %3 = pad %0 {pads = [(2, 0)], value = -1.75} : f64[6]\n\
         %4 = state \"v4\" : f16[4]\n\
         %5 = state \"v6\" : f16[4]\n\
         %6 = state_assign %5, %4 : f16[4]\n\
         %7 = state_assign %4, %5 : f16[4]\n\
         output \"(\" = %2\n\
         output \"out5\" = %4\n",
    )
    .unwrap();
    for graph in [swap, shrunk] {
        let backend = RefBackend::checking();
        let compiled = compile_graph(&graph, &backend.target(), &Limits::default()).unwrap();
        let mut exe = backend.compile(&compiled.program).unwrap();
        // States start at zero: `a` and `b` differ from the second run on.
        for run in 0..4u64 {
            let srcs = sources(&graph, &BTreeMap::new(), 40 + run, 1.0);
            // The oracle sees the states the backend holds before this run.
            let mut oracle_sources = srcs.clone();
            oracle_sources.extend(exe.states_f64());
            let want = evaluate(&graph, &oracle_sources).unwrap();
            let got = exe.run_f64(&srcs).unwrap();
            for (name, w) in &want.outputs {
                let err = worst_error(name, &got.outputs[name], w).unwrap();
                assert!(err < 1e-6, "run {run}, output {name}: error {err}");
            }
            let states = exe.states_f64();
            for (name, w) in &want.states {
                let err = worst_error(name, &states[name], w).unwrap();
                assert!(err < 1e-6, "run {run}, state {name}: error {err}");
            }
        }
    }
}

/// The random graphs of [`random_graphs_of_every_kind_run_in_checking_mode`]: how many, and the
/// seed that picks them (`TIR_PROPTEST_CASES`, `TIR_PROPTEST_SEED`; decimal or `0x` hex). Fixed
/// by default, so that a failure in CI reproduces; any seed may be tried.
const CHECKING_CASES: u64 = 200;
const CHECKING_SEED: u64 = 0x7173;

fn env_number(name: &str, default: u64) -> u64 {
    let Ok(value) = std::env::var(name) else {
        return default;
    };
    let v = value.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.unwrap_or_else(|_| panic!("{name}={value:?} is not a number"))
}

/// A run-time write position the test chose: the input that holds it, and whether it fits.
struct Position {
    input: String,
    state: String,
    fits: bool,
}

/// Sets every input that is directly a `state_write_slice` position: within the state on three
/// seeds of four (all writes of that input fit), past either end otherwise. Returns the
/// positions set; positions computed by the graph are left to the random values.
fn choose_positions(
    graph: &Graph,
    srcs: &mut BTreeMap<String, F64Tensor>,
    seed: u64,
) -> Vec<Position> {
    use tir_graph::Op;
    // Per position input: (state, room = capacity - length) of each write it positions.
    let mut uses: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    for id in graph.node_ids() {
        let Op::StateWriteSlice { axis, start: None } = graph.node(id).op else {
            continue;
        };
        let operands = graph.operands(id);
        let (Op::Input { name }, Op::State { name: state }) =
            (&graph.node(operands[2]).op, &graph.node(operands[0]).op)
        else {
            continue;
        };
        let size = |n| {
            graph.ty(n).shape.dims()[axis]
                .as_static()
                .expect("a slice write's axis is static")
        };
        let room = size(operands[0]) - size(operands[1]);
        uses.entry(name.clone())
            .or_default()
            .push((state.clone(), room));
    }
    let mut chosen = Vec::new();
    for (i, (input, writes)) in uses.into_iter().enumerate() {
        let r = seed.rotate_left(7 * i as u32 + 3);
        let min_room = writes.iter().map(|w| w.1).min().unwrap_or(0);
        let max_room = writes.iter().map(|w| w.1).max().unwrap_or(0);
        let pos: i64 = match r % 8 {
            0 => -1 - (r >> 8) as i64 % 3,
            1 => max_room as i64 + 1 + (r >> 8) as i64 % 3,
            _ => ((r >> 8) % (min_room + 1)) as i64,
        };
        if let Some(t) = srcs.get_mut(&input) {
            t.data = vec![pos as f64];
        }
        for (state, room) in writes {
            let fits = (0..=room as i64).contains(&pos);
            chosen.push(Position {
                input: input.clone(),
                state,
                fits,
            });
        }
    }
    chosen
}

/// How the random graphs ended.
#[derive(Default)]
struct Outcomes {
    ran: std::cell::Cell<u64>,
    refused_at_launch: std::cell::Cell<u64>,
    unbound: std::cell::Cell<u64>,
}

fn bump(c: &std::cell::Cell<u64>) {
    c.set(c.get() + 1);
}

/// Random graphs of every op kind, dtype and shape form (symbolic dims, zero-size dims, states,
/// gathers, special values) compile, verify, certify and run in checking mode, and checking mode
/// never finds a write the certificates do not allow: each element of each declared write region
/// written by exactly one program, nothing else written, no program reading what another writes
/// (`RefExecutable`'s ownership checks). The only refusals allowed are the certificates' launch
/// checks, exactly when a run-time write position chosen out of range (or computed by the graph)
/// does not fit its state, naming that state; and a symbolic dim that only a state has. Values
/// are not compared here (16-bit float rounding per op and special values make a tolerance
/// meaningless); `random_graphs_match_the_oracle` compares them.
///
/// `TIR_PROPTEST_CASES=10000` runs the count the issue asks for (see testsuite/README.md); a
/// failure names the seed that reproduces it.
#[test]
fn random_graphs_of_every_kind_run_in_checking_mode() {
    use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};
    use tir_graph::testing::{arb_graph_with, GraphConfig};
    let cases = env_number("TIR_PROPTEST_CASES", CHECKING_CASES);
    let seed = env_number("TIR_PROPTEST_SEED", CHECKING_SEED);
    let config = Config {
        cases: u32::try_from(cases).expect("TIR_PROPTEST_CASES fits in a u32"),
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    let outcomes = Outcomes::default();
    let mut runner = TestRunner::new(config);
    let graphs = arb_graph_with(GraphConfig::full().with_dim_ops().with_integer_bits());
    let result = runner.run(&(graphs, any::<u64>()), |(graph, seed)| {
        let dims: BTreeMap<String, u64> = ["batch", "seq", "n", "_k9"]
            .iter()
            .enumerate()
            .map(|(i, d)| (d.to_string(), 1 + (seed >> (8 * i)) % 4))
            .collect();
        let mut srcs = sources(&graph, &dims, seed, 1.0);
        let positions = choose_positions(&graph, &mut srcs, seed);
        let backend = RefBackend::checking();
        let compiled = compile_graph(&graph, &backend.target(), &Limits::default())
            .map_err(|e| TestCaseError::fail(format!("refused statically: {e}")))?;
        let mut exe = backend
            .compile_ref(&compiled.program)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(exe.is_checking());
        let misfit = positions.iter().find(|p| !p.fits);
        match exe.run_f64(&srcs) {
            Ok(out) => {
                if let Some(p) = misfit {
                    return Err(TestCaseError::fail(format!(
                        "the write position {:?} in input {} does not fit state {}, yet the run \
                         was not refused",
                        srcs[&p.input].data, p.input, p.state
                    )));
                }
                for (name, _) in graph.outputs() {
                    prop_assert!(out.outputs.contains_key(name));
                }
                bump(&outcomes.ran);
                Ok(())
            }
            Err(e) => {
                let e = e.to_string();
                if e.contains("launch check failed: the write position of state `") {
                    // Refused before the kernel: fine when a position does not fit, or when the
                    // graph computes one (the test set all the others in range).
                    let computed = positions.len() < write_positions(&graph);
                    let names_a_misfit = positions
                        .iter()
                        .any(|p| !p.fits && e.contains(&format!("`{}`", p.state)));
                    if names_a_misfit || computed {
                        bump(&outcomes.refused_at_launch);
                        return Ok(());
                    }
                }
                // A symbolic dim only a state has cannot be bound from the inputs: refused.
                if e.contains("is not bound by any input or parameter") {
                    bump(&outcomes.unbound);
                    return Ok(());
                }
                let what = if ownership_violation(&e) {
                    "checking mode found a write the certificate does not allow"
                } else {
                    "the run failed"
                };
                Err(TestCaseError::fail(format!("{what}: {e}")))
            }
        }
    });
    let summary = format!(
        "{cases} random graphs (TIR_PROPTEST_SEED={seed:#x}): {} ran in checking mode, {} refused \
         by a launch check, {} with a dim no input binds",
        outcomes.ran.get(),
        outcomes.refused_at_launch.get(),
        outcomes.unbound.get()
    );
    match result {
        Ok(()) => eprintln!("{summary}"),
        Err(TestError::Fail(reason, (graph, input_seed))) => panic!(
            "{reason}\nreproduce with TIR_PROPTEST_SEED={seed:#x} TIR_PROPTEST_CASES={cases}; \
             the smallest failing graph (input seed {input_seed}):\n{}",
            tir_graph::text::print(&graph)
        ),
        Err(e) => panic!("{e} (TIR_PROPTEST_SEED={seed:#x})"),
    }
}

/// How many `state_write_slice`s of `graph` take their position at run time.
fn write_positions(graph: &Graph) -> usize {
    graph
        .node_ids()
        .filter(|&id| {
            matches!(
                graph.node(id).op,
                tir_graph::Op::StateWriteSlice { start: None, .. }
            )
        })
        .count()
}

/// Whether a kernel error is one of checking mode's ownership findings (`RefExecutable`).
fn ownership_violation(e: &str) -> bool {
    [
        "which the kernel does not declare it writes",
        "outside the kernel's write region",
        " both write ",
        "is never written",
        ": a race",
        "the write region ",
    ]
    .iter()
    .any(|needle| e.contains(needle))
}
