//! A user's kernel as a graph op, end to end: top-k per row (`tir_lower::custom::topk`, whose
//! declaration, tile program and reference composite are one file) inside a
//! graph, proven by the legality pass, run on the reference backend in checking mode (every
//! element of every output written exactly once) and compared with the f64 oracle.
//!
//! `cargo run -p backend-ref --example custom_topk`

use backend_ref::RefBackend;
use std::collections::BTreeMap;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::{shape, DType, GraphBuilder};
use tir_lower::custom::topk::topk;
use tir_lower::testing::RunF64;
use tir_lower::Backend;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logits of 5 rows of 37 (odd on purpose: the last tile is masked), top 4 of each.
    let (n, k, batch) = (37, 4, 5);
    let kernel = topk(DType::F32, n, k)?;

    // The graph: a softmax, then the user's kernel; the batch stays symbolic.
    let g = GraphBuilder::new();
    let logits = g.input("logits", DType::F32, shape!["batch", n])?;
    let probs = logits.softmax(1)?;
    let top = g.custom(&kernel, &[&probs])?;
    g.output("probs", &top[0])?;
    g.output("tokens", &top[1])?;
    let graph = g.finish()?;

    // Compiled: the custom node is a kernel of its own, proven like every generated kernel.
    let backend = RefBackend::checking();
    let compiled =
        tir_lower::compile_graph(&graph, &backend.target(), &tir_opt::Limits::default())?;
    for cert in &compiled.program.certificates {
        println!("{}", cert.kernel);
        for fact in &cert.facts {
            println!("  {fact}");
        }
    }

    // Run it, and check it against the oracle (which runs the kernel's reference composite).
    let mut exe = backend.compile(&compiled.program)?;
    let x = F64Tensor::random(DType::F32, vec![batch, n], 7);
    let sources = BTreeMap::from([("logits".to_string(), x)]);
    let got = exe.run_f64(&sources)?.outputs;
    let want = evaluate(&graph, &sources)?.outputs;
    let tokens = &got["tokens"].data;
    for (row, ids) in tokens.chunks(k as usize).enumerate() {
        println!("row {row}: tokens {ids:?}");
    }
    assert_eq!(
        tokens, &want["tokens"].data,
        "the kernel's indices are the oracle's"
    );
    for (a, b) in got["probs"].data.iter().zip(&want["probs"].data) {
        assert!((a - b).abs() <= 1e-6, "probability {a} vs {b}");
    }
    println!("top-{k} of {batch} rows of {n}: matches the oracle");
    Ok(())
}
