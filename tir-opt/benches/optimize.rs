//! How long the optimizer takes on a whole model: a 48-layer transformer built with the builder
//! (prefill, 2048 tokens, hidden 4096), and the same architecture with enough layers for at
//! least 10,000 nodes. `cargo bench -p tir-opt --bench optimize`; it prints one line per model
//! (median of several runs, one thread) for `bench/RESULTS.md`.

use std::time::{Duration, Instant};
use tir_graph::models::{transformer, TransformerConfig};
use tir_opt::{optimize, OptOptions};

const RUNS: usize = 5;

fn main() {
    for layers in [48, 134] {
        let cfg = TransformerConfig {
            layers,
            ..TransformerConfig::default()
        };
        let graph = transformer(&cfg).expect("the transformer builds");
        let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
        let mut kernels = 0;
        let mut bounds = Vec::new();
        for _ in 0..RUNS {
            let start = Instant::now();
            let (fused, report) = optimize(&graph, &OptOptions::default()).expect("optimizes");
            times.push(start.elapsed());
            kernels = fused.kernels.len();
            bounds = report.bounds_hit;
        }
        times.sort();
        let median = times[RUNS / 2];
        println!(
            "transformer {layers} layers: {} nodes -> {kernels} kernels in {:.3} s (median of {RUNS}; bounds hit: {})",
            graph.len(),
            median.as_secs_f64(),
            if bounds.is_empty() { "none".to_string() } else { bounds.join(", ") }
        );
    }
}
