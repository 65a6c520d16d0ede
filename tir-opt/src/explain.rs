//! `tirc explain`: what the optimizer made of a graph, as text for people and as JSON.

use crate::{FusedGraph, Kernel, OptReport};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use tir_graph::{Graph, NodeId};

/// One kernel as `--json` prints it.
#[derive(Serialize)]
pub struct KernelJson {
    pub kind: &'static str,
    /// Op names of the members, in order.
    pub ops: Vec<&'static str>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Bytes read plus bytes written.
    pub bytes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// The whole `--json` object.
#[derive(Serialize)]
pub struct ExplainJson<'a> {
    pub kernels: Vec<KernelJson>,
    pub rules: &'a BTreeMap<&'static str, usize>,
    pub bounds_hit: &'a [String],
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub total_bytes: u64,
}

/// A value as explain names it: `%3 "x": f16[4, 8]` for a source, `%7: f16[4, 8]` otherwise.
pub fn describe(g: &Graph, n: NodeId) -> String {
    match g.node(n).op.source_name() {
        Some(name) => format!("{n} \"{name}\": {}", g.ty(n)),
        None => format!("{n}: {}", g.ty(n)),
    }
}

fn kernel_json(g: &Graph, k: &Kernel) -> KernelJson {
    KernelJson {
        kind: k.kind.name(),
        ops: k.members.iter().map(|&m| g.node(m).op.name()).collect(),
        inputs: k.inputs.iter().map(|&i| describe(g, i)).collect(),
        outputs: k.outputs().iter().map(|&o| describe(g, o)).collect(),
        bytes: k.bytes_read + k.bytes_written,
        bytes_read: k.bytes_read,
        bytes_written: k.bytes_written,
    }
}

/// The JSON object of `tirc explain --json`.
pub fn to_json(fused: &FusedGraph, report: &OptReport) -> String {
    let kernels: Vec<KernelJson> = fused
        .kernels
        .iter()
        .map(|k| kernel_json(&fused.graph, k))
        .collect();
    let total_bytes = kernels.iter().map(|k| k.bytes).sum();
    let json = ExplainJson {
        kernels,
        rules: &report.rules,
        bounds_hit: &report.bounds_hit,
        nodes_before: report.nodes_before,
        nodes_after: report.nodes_after,
        total_bytes,
    };
    serde_json::to_string_pretty(&json).expect("explain JSON has only strings and numbers")
}

/// The text of `tirc explain`.
pub fn to_text(fused: &FusedGraph, report: &OptReport) -> String {
    let g = &fused.graph;
    let mut out = String::new();
    let total: u64 = fused
        .kernels
        .iter()
        .map(|k| k.bytes_read + k.bytes_written)
        .sum();
    let _ = writeln!(
        out,
        "{} kernels, {} nodes after simplification (from {}), ~{} moved",
        fused.kernels.len(),
        report.nodes_after,
        report.nodes_before,
        human_bytes(total)
    );
    for (i, k) in fused.kernels.iter().enumerate() {
        let json = kernel_json(g, k);
        let _ = writeln!(
            out,
            "\nkernel {i}: {} ({} ops), reads {}, writes {}",
            json.kind,
            json.ops.len(),
            human_bytes(k.bytes_read),
            human_bytes(k.bytes_written)
        );
        let ops: Vec<String> = k
            .members
            .iter()
            .map(|&m| format!("{} {m}", g.node(m).op.name()))
            .collect();
        let _ = writeln!(out, "  ops:    {}", ops.join(", "));
        for input in &json.inputs {
            let _ = writeln!(out, "  input:  {input}");
        }
        let _ = writeln!(out, "  output: {}", json.outputs[0]);
    }
    let rules: Vec<String> = report
        .rules
        .iter()
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let _ = writeln!(out, "\nrules fired: {}", rules.join(", "));
    let bounds = if report.bounds_hit.is_empty() {
        "none (both stages saturated)".to_string()
    } else {
        report.bounds_hit.join(", ")
    };
    let _ = writeln!(out, "bounds hit: {bounds}");
    out
}

/// `n` bytes for people: `512 B`, `8.4 MB` (powers of 1000).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
