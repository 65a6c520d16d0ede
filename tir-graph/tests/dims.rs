//! Expression dims through the graph stage: the shape rules that compute them, the verifier,
//! the text form and the `.tir` file that carry them, the oracle that binds them, and
//! specialization that fixes them.

use std::collections::BTreeMap;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::{file, shape, text, DType, Dim, Graph, GraphBuilder, ReshapeDim, SliceRange};

fn dim(s: &str) -> Dim {
    Dim::parse(s).unwrap()
}

fn binding(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// `x[batch, seq, 8]` flattened to `[batch*seq, 8]`, padded, sliced and joined along the
/// sequence, and reshaped back with the inferred dim: every rule that computes a dim.
fn sequence_graph() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", "seq", 8]).unwrap();
    let flat = x.reshape(&[ReshapeDim::Infer, 8.into()]).unwrap();
    assert_eq!(flat.ty().to_string(), "f32[batch*seq, 8]");
    let back = flat
        .reshape(&[ReshapeDim::Dim(dim("batch")), ReshapeDim::Infer, 8.into()])
        .unwrap();
    assert_eq!(back.ty(), x.ty());
    let padded = back.pad(&[(0, 0), (1, 2), (0, 0)], 0.5).unwrap();
    assert_eq!(padded.ty().to_string(), "f32[batch, seq + 3, 8]");
    let tail = padded
        .slice(&[
            SliceRange::FULL,
            SliceRange {
                start: 2,
                stop: None,
                step: 2,
            },
            SliceRange::FULL,
        ])
        .unwrap();
    assert_eq!(tail.ty().to_string(), "f32[batch, floor(seq / 2) + 1, 8]");
    let joined = g.concat(&[&x, &padded, &tail], 1).unwrap();
    assert_eq!(
        joined.ty().to_string(),
        "f32[batch, 2*seq + floor(seq / 2) + 4, 8]"
    );
    g.output("y", &joined).unwrap();
    g.finish().unwrap()
}

#[test]
fn shape_rules_compute_expression_dims() {
    sequence_graph();
    let g = GraphBuilder::new();
    let img = g
        .input("img", DType::F32, shape!["n", 3, "h", "w"])
        .unwrap();
    let w = g.parameter("w", DType::F32, shape![4, 3, 3, 3]).unwrap();
    let y = img
        .conv(&w, &[2, 1], &[1, 2], &[(1, 1), (0, 0)], 1)
        .unwrap();
    assert_eq!(y.ty().to_string(), "f32[n, 4, floor((h + 1) / 2), w - 4]");
    // A reshape whose element counts differ by a symbol is refused.
    let err = img
        .reshape(&[ReshapeDim::Dim(dim("n*h")), 3.into()])
        .unwrap_err();
    assert!(err.to_string().contains("element counts differ"), "{err}");
}

#[test]
fn text_and_file_forms_carry_expression_dims() {
    let graph = sequence_graph();
    let listing = text::print(&graph);
    assert!(listing.contains("f32[batch, \"seq + 3\", 8]"), "{listing}");
    assert_eq!(text::parse(&listing).unwrap(), graph);
    let bytes = file::encode(&graph);
    assert_eq!(file::decode(&bytes).unwrap(), graph);
    // A malformed or non-canonical expression in the text form is one line naming it.
    let bad = listing.replace("\"seq + 3\"", "\"seq + \"");
    assert!(text::parse(&bad)
        .unwrap_err()
        .to_string()
        .contains("dim expression"));
}

#[test]
fn the_oracle_binds_expression_dims_from_the_symbols() {
    let graph = sequence_graph();
    let x: Vec<f64> = (0..2 * 5 * 8).map(|i| f64::from(i) * 0.25 - 3.0).collect();
    let sources = BTreeMap::from([(
        "x".to_string(),
        F64Tensor::new(DType::F32, vec![2, 5, 8], x.clone()).unwrap(),
    )]);
    let out = &evaluate(&graph, &sources).unwrap().outputs["y"];
    // seq 5: 5 + 8 + 3 positions.
    assert_eq!(out.dims, vec![2, 16, 8]);
    // Batch 1, position 5 is the padded copy's first element (the pad value), position 6 is
    // x[1, 0, :].
    let at = |b: usize, p: usize, c: usize| out.data[(b * 16 + p) * 8 + c];
    assert_eq!(at(1, 5, 3), 0.5);
    assert_eq!(at(1, 6, 3), x[(5) * 8 + 3]);
}

#[test]
fn specialize_fixes_dims_and_infers_again() {
    let graph = sequence_graph();
    let fixed = graph.specialize(&binding(&[("seq", 5)])).unwrap();
    let out = fixed.outputs()[0].1;
    assert_eq!(fixed.ty(out).to_string(), "f32[batch, 16, 8]");
    let all = graph
        .specialize(&binding(&[("seq", 5), ("batch", 2)]))
        .unwrap();
    assert_eq!(all.ty(all.outputs()[0].1).to_string(), "f32[2, 16, 8]");
}
