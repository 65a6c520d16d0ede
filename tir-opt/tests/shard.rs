//! Sharding checked against the oracle: each device's graph, run on its shards by
//! `evaluate_mesh` (collectives exact), must give every device the whole graph's outputs and
//! states (each state as the device's shard of it); and the plan must be the one the rules
//! promise (Megatron's split of an MLP, heads for attention and the KV cache).

use proptest::prelude::*;
use std::collections::BTreeMap;
use tir_graph::collective::{ShardPlan, Sharding};
use tir_graph::eval::{evaluate, evaluate_mesh, F64Tensor};
use tir_graph::models::{self, DecoderConfig};
use tir_graph::testing::arb_numeric_graph;
use tir_graph::{shape, DType, Graph, GraphBuilder};
use tir_opt::shard::{shard, ShardError, ShardOptions, ShardedGraph};

/// Random values for every input, parameter and state of `graph` (`fixed` overrides some).
fn sources(graph: &Graph, fixed: &[(&str, F64Tensor)]) -> BTreeMap<String, F64Tensor> {
    let mut out = BTreeMap::new();
    for (seed, id) in graph.node_ids().enumerate() {
        let node = graph.node(id);
        let Some(name) = node.op.source_name() else {
            continue;
        };
        let dims = node.ty.shape.static_dims().expect("static test graphs");
        out.insert(
            name.to_string(),
            F64Tensor::random(node.ty.dtype, dims, 7 + seed as u64),
        );
    }
    for (name, t) in fixed {
        out.insert(name.to_string(), t.clone());
    }
    out
}

fn close(a: &F64Tensor, b: &F64Tensor, what: &str) {
    assert_eq!((a.dtype, &a.dims), (b.dtype, &b.dims), "{what}: types");
    let tol = if a.dtype == DType::F64 { 1e-9 } else { 2e-2 };
    for (i, (x, y)) in a.data.iter().zip(&b.data).enumerate() {
        assert!(
            !x.is_nan() && !y.is_nan() && (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: sharded {x}, whole {y}"
        );
    }
}

/// Runs the whole graph and each device's graph on the same values and compares.
fn check_against_whole(
    graph: &Graph,
    sharded: &ShardedGraph,
    values: &BTreeMap<String, F64Tensor>,
) {
    sharded.local.verify().unwrap();
    let whole = evaluate(graph, values).unwrap();
    let per_device = sharded.plan.shard_sources(values).unwrap();
    let runs = evaluate_mesh(&sharded.local, &per_device).unwrap();
    assert_eq!(runs.len(), sharded.plan.world as usize);
    for (rank, run) in runs.iter().enumerate() {
        for (name, want) in &whole.outputs {
            close(
                &run.outputs[name],
                want,
                &format!("device {rank} output {name}"),
            );
        }
        for (name, want) in &whole.states {
            let want = sharded.plan.shard_f64(name, want, rank as u32).unwrap();
            close(
                &run.states[name],
                &want,
                &format!("device {rank} state {name}"),
            );
        }
    }
}

fn split(pairs: &[(&str, usize)]) -> BTreeMap<String, Sharding> {
    pairs
        .iter()
        .map(|(n, a)| (n.to_string(), Sharding::Split(*a)))
        .collect()
}

fn count(g: &Graph, op: &str) -> usize {
    g.op_counts().get(op).copied().unwrap_or(0)
}

/// The MLP example with its batch fixed (a symbolic batch cannot be split or sampled).
fn mlp(hidden: u64, ffn: u64) -> Graph {
    let batch = BTreeMap::from([("batch".to_string(), 6)]);
    models::mlp(hidden, ffn)
        .unwrap()
        .specialize(&batch)
        .unwrap()
}

fn mlp_plan(plan: &ShardPlan) -> Vec<(&str, Sharding)> {
    ["x", "w1", "b1", "w2", "b2"]
        .iter()
        .map(|n| (*n, plan.sharding(n)))
        .collect()
}

#[test]
fn mlp_column_then_row_split_needs_one_all_reduce() {
    let graph = mlp(16, 32);
    let sharded = shard(&graph, 2, &split(&[("w1", 1)]), &ShardOptions::default()).unwrap();
    use Sharding::{Replicated, Split};
    assert_eq!(
        mlp_plan(&sharded.plan),
        [
            ("x", Replicated),
            ("w1", Split(1)),
            ("b1", Split(0)),
            ("w2", Split(0)),
            ("b2", Replicated)
        ]
    );
    assert_eq!(count(&sharded.local, "all_reduce_sum"), 1);
    assert_eq!(count(&sharded.local, "all_gather"), 0);
    check_against_whole(&graph, &sharded, &sources(&graph, &[]));
}

#[test]
fn tensor_parallel_finds_megatron_split_without_names() {
    let graph = mlp(16, 32);
    let options = ShardOptions {
        tensor_parallel: true,
    };
    let by_rule = shard(&graph, 4, &BTreeMap::new(), &options).unwrap();
    let by_name = shard(&graph, 4, &split(&[("w1", 1)]), &ShardOptions::default()).unwrap();
    assert_eq!(by_rule.plan, by_name.plan);
    assert_eq!(by_rule.local, by_name.local);
}

#[test]
fn decoder_splits_attention_and_kv_cache_by_heads() {
    let cfg = DecoderConfig {
        hidden: 32,
        heads: 4,
        context: 8,
        ffn: 48,
    };
    let graph = models::decoder(&cfg, 2).unwrap();
    let options = ShardOptions {
        tensor_parallel: true,
    };
    let sharded = shard(&graph, 2, &BTreeMap::new(), &options).unwrap();
    let plan = &sharded.plan;
    for layer in 0..2 {
        let s = |n: &str| plan.sharding(&format!("l{layer}.{n}"));
        for column in ["wq", "wk", "wv", "w_gate", "w_up"] {
            assert_eq!(s(column), Sharding::Split(1), "{column}");
        }
        for row in ["wo", "w_down"] {
            assert_eq!(s(row), Sharding::Split(0), "{row}");
        }
        for cache in ["k_cache", "v_cache"] {
            assert_eq!(s(cache), Sharding::Split(1), "{cache} by heads");
        }
        assert_eq!(s("attn_norm"), Sharding::Replicated);
    }
    // Two all-reduces a layer (after o and after down), nothing gathered.
    assert_eq!(count(&sharded.local, "all_reduce_sum"), 4);
    assert_eq!(count(&sharded.local, "all_gather"), 0);
    let pos = F64Tensor::new(DType::I64, vec![], vec![5.0]).unwrap();
    let values = sources(&graph, &[("pos", pos)]);
    check_against_whole(&graph, &sharded, &values);
}

#[test]
fn batch_split_stays_split_through_an_encoder() {
    let symbolic = models::transformer(&models::TransformerConfig {
        layers: 1,
        seq: 8,
        hidden: 32,
        heads: 4,
        ffn: 64,
    })
    .unwrap();
    let graph = symbolic
        .specialize(&BTreeMap::from([("batch".to_string(), 4)]))
        .unwrap();
    let input = graph.inputs()[0].0.clone();
    let sharded = shard(&graph, 2, &split(&[(&input, 0)]), &ShardOptions::default()).unwrap();
    // Only the outputs are gathered.
    assert_eq!(count(&sharded.local, "all_gather"), graph.outputs().len());
    assert_eq!(count(&sharded.local, "all_reduce_sum"), 0);
    check_against_whole(&graph, &sharded, &sources(&graph, &[]));
}

#[test]
fn splits_the_rules_cannot_keep_are_gathered_and_still_right() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![4, 6]).unwrap();
    let p = g.parameter("p", DType::F32, shape![4, 6]).unwrap();
    // A slice across the split axis, a mean over it, a cumulative-free softmax over it.
    let y = x.slice_axis(1, 1, 5).unwrap();
    let m = x.mean(&[1], true).unwrap();
    let s = (&x - &m).unwrap().softmax(1).unwrap();
    let t = (&s * &p).unwrap();
    g.output("y", &y).unwrap();
    g.output("t", &t).unwrap();
    let graph = g.finish().unwrap();
    let sharded = shard(&graph, 3, &split(&[("x", 1)]), &ShardOptions::default()).unwrap();
    check_against_whole(&graph, &sharded, &sources(&graph, &[]));
}

#[test]
fn refusals_name_the_source_dim_and_mesh() {
    let graph = models::mlp(16, 30).unwrap();
    let none = ShardOptions::default();
    let err = shard(&graph, 4, &split(&[("w1", 1)]), &none).unwrap_err();
    assert_eq!(
        err.to_string(),
        "parameter `w1` (f16[16, 30]): axis 1 (30) is not divisible by the mesh of 4 devices"
    );
    let err = shard(&graph, 2, &split(&[("w9", 0)]), &none).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the graph has no input, parameter or state `w9` to shard"
    );
    let err = shard(&graph, 2, &split(&[("b1", 1)]), &none).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot be split along axis 1: it has 1 axes"),
        "{err}"
    );
    // A symbolic batch is not provably divisible.
    let err = shard(&graph, 2, &split(&[("x", 0)]), &none).unwrap_err();
    assert!(matches!(err, ShardError::NotDivisible { .. }), "{err}");
    assert!(matches!(
        shard(&graph, 0, &BTreeMap::new(), &none),
        Err(ShardError::EmptyMesh)
    ));
}

#[test]
fn a_graph_with_collectives_is_refused() {
    let graph = mlp(16, 32);
    let sharded = shard(&graph, 2, &split(&[("w1", 1)]), &ShardOptions::default()).unwrap();
    let err = shard(
        &sharded.local,
        2,
        &BTreeMap::new(),
        &ShardOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ShardError::HasCollective { .. }), "{err}");
}

#[test]
fn a_bert_encoder_under_tensor_parallel_matches_the_whole_graph() {
    let cfg = models::BertConfig {
        vocab: 50,
        hidden: 32,
        layers: 2,
        heads: 4,
        intermediate: 64,
        max_positions: 16,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
        dtype: DType::F32,
    };
    let bind = BTreeMap::from([("batch".to_string(), 2), ("seq".to_string(), 5)]);
    let graph = models::bert_embedder(&cfg)
        .unwrap()
        .specialize(&bind)
        .unwrap();
    let options = ShardOptions {
        tensor_parallel: true,
    };
    let sharded = shard(&graph, 2, &BTreeMap::new(), &options).unwrap();
    let plan = &sharded.plan;
    let weight = |p: &str| plan.sharding(&format!("encoder.layer.1.{p}.weight"));
    assert_eq!(
        weight("attention.self.query"),
        Sharding::Split(0),
        "q by output"
    );
    assert_eq!(
        weight("attention.output.dense"),
        Sharding::Split(1),
        "o by input"
    );
    assert_eq!(
        weight("intermediate.dense"),
        Sharding::Split(0),
        "up by output"
    );
    assert_eq!(weight("output.dense"), Sharding::Split(1), "down by input");
    assert_eq!(count(&sharded.local, "all_reduce_sum"), 4, "two a layer");
    let ids = |dims: Vec<u64>, seed| {
        let mut t = F64Tensor::random(DType::I64, dims, seed);
        t.data.iter_mut().for_each(|v| *v = v.rem_euclid(2.0) + 0.0);
        t
    };
    // Every integer input (ids, token types, positions) in 0..2; the mask keeps every key.
    let mut values = sources(&graph, &[]);
    for (i, t) in values.values_mut().enumerate() {
        if t.dtype == DType::I64 {
            *t = ids(t.dims.clone(), i as u64);
        }
    }
    let mask = F64Tensor::new(DType::I64, vec![2, 5], vec![1.0; 10]).unwrap();
    values.insert("attention_mask".into(), mask);
    check_against_whole(&graph, &sharded, &values);
}

/// A reduction over a split axis of `dtype` elements, `x: dtype[4, 6]` split along its columns.
fn split_reduction(dtype: DType, by_max: bool) -> (Graph, ShardedGraph) {
    let g = GraphBuilder::new();
    let x = g.input("x", dtype, shape![4, 6]).unwrap();
    let y = if by_max {
        x.max(&[1], false)
    } else {
        x.sum(&[1], false)
    }
    .unwrap();
    g.output("y", &y).unwrap();
    let graph = g.finish().unwrap();
    let sharded = shard(&graph, 2, &split(&[("x", 1)]), &ShardOptions::default()).unwrap();
    (graph, sharded)
}

#[test]
fn reductions_nccl_has_no_type_for_run_widened_between_casts() {
    for (dtype, wide) in [
        (DType::I16, DType::I32),
        (DType::U16, DType::U32),
        (DType::F8E4M3, DType::F32),
        (DType::F8E5M2, DType::F32),
    ] {
        let (_, sharded) = split_reduction(dtype, false);
        let local = &sharded.local;
        let reduce = local
            .node_ids()
            .find(|&id| local.node(id).op.name() == "all_reduce_sum")
            .unwrap();
        assert_eq!(local.ty(reduce).dtype, wide, "{dtype}");
        assert_eq!(count(local, "cast"), 2, "{dtype}");
    }
    // Types NCCL reduces keep theirs, and a gather moves bytes of any type.
    let (_, sharded) = split_reduction(DType::F16, false);
    assert_eq!(count(&sharded.local, "cast"), 0);
}

#[test]
fn widened_integer_reductions_wrap_exactly_as_the_whole_graph() {
    // Large values, so that both the devices' partial sums and the total wrap around 2^16.
    for (dtype, by_max, base) in [
        (DType::I16, false, 30_000.0),
        (DType::U16, false, 60_000.0),
        (DType::U16, true, 60_000.0),
    ] {
        let (graph, sharded) = split_reduction(dtype, by_max);
        let data = (0..24).map(|i| base + f64::from(i * 37 % 101)).collect();
        let x = F64Tensor::new(dtype, vec![4, 6], data).unwrap();
        let values = BTreeMap::from([("x".to_string(), x)]);
        let whole = evaluate(&graph, &values).unwrap();
        let runs = evaluate_mesh(
            &sharded.local,
            &sharded.plan.shard_sources(&values).unwrap(),
        )
        .unwrap();
        for run in &runs {
            assert_eq!(run.outputs["y"], whole.outputs["y"], "{dtype} max={by_max}");
        }
    }
}

/// Whether two oracle values agree up to the reordering of sums that sharding makes: equal
/// non-finite values, or finite ones within a relative 1e-9 of the tensor's largest magnitude.
fn agrees(got: &F64Tensor, want: &F64Tensor) -> Result<(), String> {
    if (got.dtype, &got.dims) != (want.dtype, &want.dims) {
        return Err(format!("{:?} against {:?}", got.dims, want.dims));
    }
    let scale = 1.0
        + want
            .data
            .iter()
            .filter(|v| v.is_finite())
            .fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
        let same = if w.is_finite() {
            (g - w).abs() <= 1e-9 * scale
        } else {
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
        };
        if !same {
            return Err(format!("element {i}: sharded {g}, whole {w}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every rule on random graphs: the sources split at random (where the mesh divides the
    /// axis), the graph sharded, each device's graph run on its shards, and every device's
    /// outputs equal to the whole graph's.
    #[test]
    fn random_graphs_sharded_at_random_match_the_whole_graph(
        graph in arb_numeric_graph(),
        picks in proptest::collection::vec(any::<u8>(), 8),
        world in 2u32..4,
        tensor_parallel in any::<bool>(),
    ) {
        let mut shardings = BTreeMap::new();
        for (i, (name, id)) in graph.inputs().into_iter().chain(graph.parameters()).enumerate() {
            let ty = graph.ty(id);
            let pick = picks[i % picks.len()] as usize % (ty.rank() + 1);
            let divisible = |axis: usize| {
                ty.shape.dims()[axis].as_static().is_some_and(|d| d % u64::from(world) == 0)
            };
            if pick > 0 && divisible(pick - 1) {
                shardings.insert(name, Sharding::Split(pick - 1));
            }
        }
        let options = ShardOptions { tensor_parallel };
        let sharded = shard(&graph, world, &shardings, &options)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", tir_graph::text::print(&graph))))?;
        prop_assert!(sharded.local.verify().is_ok());
        let values = sources(&graph, &[]);
        let whole = evaluate(&graph, &values).map_err(|e| TestCaseError::reject(e.to_string()))?;
        let per_device = sharded.plan.shard_sources(&values).map_err(TestCaseError::fail)?;
        let runs = evaluate_mesh(&sharded.local, &per_device)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (rank, run) in runs.iter().enumerate() {
            for (name, want) in &whole.outputs {
                agrees(&run.outputs[name], want).map_err(|e| {
                    TestCaseError::fail(format!(
                        "device {rank}, output {name}: {e}\nplan {:?}\n{}",
                        sharded.plan.sources,
                        tir_graph::text::print(&graph)
                    ))
                })?;
            }
        }
    }
}
