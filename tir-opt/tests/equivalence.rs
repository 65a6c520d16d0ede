//! Property tests: on random graphs the optimizer never fails, its result verifies, and the
//! optimized graph computes what the original computes (both evaluated by the f64 oracle).

use proptest::prelude::*;
use std::collections::BTreeMap;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::testing::{arb_graph, arb_numeric_graph};
use tir_graph::Graph;
use tir_opt::{optimize, OptOptions};

/// Random values for every input and parameter of `graph` (static shapes only).
fn random_sources(graph: &Graph, seed: u64) -> BTreeMap<String, F64Tensor> {
    graph
        .inputs()
        .into_iter()
        .chain(graph.parameters())
        .enumerate()
        .map(|(i, (name, id))| {
            let ty = graph.ty(id);
            let dims = ty.shape.static_dims().expect("numeric graphs are static");
            (
                name,
                F64Tensor::random(ty.dtype, dims, seed ^ (i as u64) << 8),
            )
        })
        .collect()
}

/// The names and types of the graph's inputs, parameters and states, in order.
fn signature(g: &Graph) -> Vec<(String, String)> {
    let sources = g
        .inputs()
        .into_iter()
        .chain(g.parameters())
        .chain(g.states());
    sources
        .map(|(name, id)| (name, g.ty(id).to_string()))
        .collect()
}

/// Equal up to the rounding of folded constants to f32: NaN only where NaN, infinities equal.
fn close(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b || (a - b).abs() <= 1e-3 * a.abs().max(b.abs());
    }
    (a - b).abs() <= 1e-4 * (1.0 + a.abs().max(b.abs()))
}

proptest! {
    // A fixed seed: CI sees the same graphs every time (set PROPTEST_CASES to explore more).
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7170),
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_graph_optimizes_into_verified_kernels(graph in arb_graph()) {
        let (fused, report) = optimize(&graph, &OptOptions::default())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        fused.verify().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let g = &fused.graph;
        prop_assert_eq!(g.outputs().len(), graph.outputs().len());
        for ((name, a), (name2, b)) in graph.outputs().iter().zip(g.outputs()) {
            prop_assert_eq!(name, name2);
            prop_assert_eq!(graph.ty(*a), g.ty(*b));
        }
        prop_assert_eq!(signature(g), signature(&graph));
        prop_assert!(report.bounds_hit.is_empty(), "{:?}", report.bounds_hit);
    }

    #[test]
    fn optimized_graphs_compute_the_same_values(graph in arb_numeric_graph(), seed in any::<u64>()) {
        let sources = random_sources(&graph, seed);
        let (fused, _) = optimize(&graph, &OptOptions::default())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        // The oracle refuses a few generated graphs (e.g. a max over an empty axis, perhaps in
        // dead code the optimizer removes): there is nothing to compare with.
        let before = evaluate(&graph, &sources);
        prop_assume!(before.is_ok());
        let before = before.unwrap();
        let after = evaluate(&fused.graph, &sources).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(before.outputs.len(), after.outputs.len());
        for (name, expected) in &before.outputs {
            let got = &after.outputs[name];
            prop_assert_eq!(&expected.dims, &got.dims);
            prop_assert_eq!(expected.dtype, got.dtype);
            for (i, (&e, &g)) in expected.data.iter().zip(&got.data).enumerate() {
                prop_assert!(close(e, g), "output {} element {}: expected {}, got {}", name, i, e, g);
            }
        }
    }
}
