//! `tirc explain --dot`: a lowered program as a Graphviz graph.
//!
//! One box per kernel (its name, kind, the ops it computes and its wave), one node per buffer a
//! kernel uses (name, storage, dtype and shape, bytes; intermediates with the waves they live
//! in, from the memory plan), styled by storage, an edge from each buffer a kernel reads and to each buffer
//! it writes, and each schedule wave as one rank. Node ids are `k<i>` (kernel `i` of the
//! program) and `b<i>` (buffer `i`); every label is a quoted string escaped by [`quote`].
//! A program sharded over a mesh is drawn once per device, in lanes ([`to_mesh_dot`]).

use std::collections::BTreeSet;
use std::fmt::Write;
use tir_graph::{Dim, Graph};
use tir_lower::tile::{Access, TileKernel, TileOp};
use tir_lower::{Buffer, Compiled, Storage};
use tir_opt::explain::human_bytes;

/// Ops per line of a kernel's label.
const OPS_PER_LINE: usize = 3;

/// `text` as a DOT quoted string: `"` and `\` escaped, line breaks as `\n` (Graphviz reads a
/// backslash in a label as the start of an escape, so a literal one must be doubled), other
/// control characters dropped.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What a buffer's storage is called in labels, and its node attributes.
fn storage_style(storage: &Storage) -> (&'static str, &'static str) {
    match storage {
        Storage::Input(_) => ("input", r##"shape=invhouse, fillcolor="#cdeccd""##),
        Storage::Parameter(_) => ("parameter", r##"shape=cylinder, fillcolor="#fbefc0""##),
        Storage::State(_) => ("state", r##"shape=cylinder, fillcolor="#f6cfa4""##),
        Storage::Constant(_) => ("constant", r##"shape=ellipse, fillcolor="#e6e6e6""##),
        Storage::Output => ("output", r##"shape=house, fillcolor="#f4c2c2""##),
        Storage::Arena => (
            "intermediate",
            r##"shape=ellipse, fillcolor="#ffffff", style="filled,dashed""##,
        ),
    }
}

/// The bytes of `buffer`: a number when its shape is static, else the static part times the
/// symbolic dims (`8.2 KB × batch`).
fn bytes_text(buffer: &Buffer) -> String {
    let mut fixed = buffer.ty.dtype.size_bytes() as u64;
    let mut symbols = Vec::new();
    for d in buffer.ty.shape.dims() {
        match d {
            Dim::Static(n) => fixed = fixed.saturating_mul(*n),
            Dim::Symbolic(name) => symbols.push(name.clone()),
            Dim::Expr(e) => symbols.push(format!("({e})")),
        }
    }
    let mut text = human_bytes(fixed);
    for s in symbols {
        text = format!("{text} × {s}");
    }
    text
}

/// The parameters of `kernel` that are mutable and also loaded from (an update in place).
fn mutable_reads(kernel: &TileKernel) -> BTreeSet<usize> {
    let mut views = std::collections::BTreeMap::new();
    let mut read = BTreeSet::new();
    kernel.walk(&mut |stmt| match &stmt.op {
        TileOp::MakeView { param, .. } => {
            if let Some((id, _)) = stmt.defs.first() {
                views.insert(id.0, *param);
            }
        }
        TileOp::Load { view, .. } | TileOp::LoadIndexed { view, .. } => {
            if let Some(&param) = views.get(&view.0) {
                read.insert(param);
            }
        }
        _ => {}
    });
    read.retain(|&p| {
        kernel
            .params
            .get(p)
            .is_some_and(|t| t.access == Access::Mutable)
    });
    read
}

/// The label of kernel `index`: name, kind (and library routine), wave, ops.
fn kernel_label(compiled: &Compiled, index: usize, wave: usize) -> String {
    let kernel = &compiled.program.kernels[index];
    let g: &Graph = &compiled.fused.graph;
    let mut lines = vec![kernel.name.clone()];
    let origin = compiled.origins.get(index);
    let mut kind = origin.map_or("?", |o| o.kind.name()).to_string();
    if kernel.library.is_some() && kernel.collective().is_none() {
        // A collective is always the library's (NCCL on CUDA); others may run as generated.
        kind.push_str(", or a library call");
    }
    lines.push(format!("{kind} · wave {wave}"));
    let ops: Vec<String> = match origin {
        Some(o) if !o.members.is_empty() => o
            .members
            .iter()
            .map(|&m| format!("{} {m}", g.node(m).op.name()))
            .collect(),
        Some(o) => vec![format!("copy {}", o.root)],
        None => Vec::new(),
    };
    for chunk in ops.chunks(OPS_PER_LINE) {
        lines.push(chunk.join(", "));
    }
    lines.join("\n")
}

/// The label of buffer `index`: name, storage and type, bytes (and live waves).
fn buffer_label(compiled: &Compiled, index: usize) -> String {
    let program = &compiled.program;
    let buffer = &program.buffers[index];
    let (storage, _) = storage_style(&buffer.storage);
    let mut lines = vec![
        buffer.name.clone(),
        format!("{storage} {}", buffer.ty),
        bytes_text(buffer),
    ];
    if let Some(live) = program.plan.live.iter().find(|l| l.buffer == index) {
        let waves = if live.first == live.last {
            format!("live in wave {}", live.first)
        } else {
            format!("live in waves {}-{}", live.first, live.last)
        };
        lines.push(waves);
    }
    lines.join("\n")
}

/// The DOT text of `compiled`'s program, titled `title`.
pub fn to_dot(compiled: &Compiled, title: &str) -> String {
    let mut out = header(compiled, title, None);
    write_nodes(&mut out, compiled, "", "  ");
    write_edges(&mut out, compiled, "");
    for wave in &compiled.program.schedule.waves {
        let ids: Vec<String> = wave.iter().map(|k| format!("k{k};")).collect();
        let _ = writeln!(out, "  {{ rank=same; {} }}", ids.join(" "));
    }
    out.push_str("}\n");
    out
}

/// The DOT text of `compiled`, the program every device of a mesh of `world` devices runs on
/// its shards, titled `title`: one lane (a cluster) per device, node ids prefixed `d<rank>`, the
/// devices' kernels of one wave side by side, and each collective joined to the same
/// collective on the next device by a dashed line (they run together).
pub fn to_mesh_dot(compiled: &Compiled, title: &str, world: u32) -> String {
    let mut out = header(compiled, title, Some(world));
    for rank in 0..world {
        let _ = writeln!(out, "  subgraph cluster_d{rank} {{");
        let _ = writeln!(
            out,
            "    graph [style=\"rounded,dashed\", color=\"#888888\", label={}];",
            quote(&format!("device {rank}"))
        );
        write_nodes(&mut out, compiled, &format!("d{rank}"), "    ");
        out.push_str("  }\n");
    }
    for rank in 0..world {
        write_edges(&mut out, compiled, &format!("d{rank}"));
    }
    let program = &compiled.program;
    for (k, kernel) in program.kernels.iter().enumerate() {
        if kernel.collective().is_none() {
            continue;
        }
        for rank in 1..world {
            let _ = writeln!(
                out,
                "  d{}k{k} -> d{rank}k{k} [dir=none, style=dashed, color=\"#b03060\", constraint=false];",
                rank - 1
            );
        }
    }
    for wave in &program.schedule.waves {
        let ids: Vec<String> = (0..world)
            .flat_map(|r| wave.iter().map(move |k| format!("d{r}k{k};")))
            .collect();
        let _ = writeln!(out, "  {{ rank=same; {} }}", ids.join(" "));
    }
    out.push_str("}\n");
    out
}

/// The buffers some kernel of `compiled` uses.
fn used_buffers(compiled: &Compiled) -> BTreeSet<usize> {
    compiled
        .program
        .kernels
        .iter()
        .flat_map(|k| k.params.iter().map(|p| p.buffer))
        .collect()
}

/// `digraph program {` and the graph's attributes: its heading (counts, the mesh, the legend).
fn header(compiled: &Compiled, title: &str, world: Option<u32>) -> String {
    let program = &compiled.program;
    let used = used_buffers(compiled);
    let unused = program.buffers.len() - used.len();
    let mut heading = format!(
        "{title}: {} kernels in {} waves, {} buffers",
        program.kernels.len(),
        program.schedule.waves.len(),
        used.len()
    );
    if unused > 0 {
        // Constants the kernels took in as immediates.
        heading.push_str(&format!(" ({unused} more unused, not drawn)"));
    }
    if let Some(world) = world {
        heading.push_str(&format!(
            ", on each of {world} devices (dashed lines join a collective's devices)"
        ));
    }
    heading.push_str(
        "\ngreen: input · yellow: parameter · orange: state · red: output · dashed: intermediate",
    );
    let mut out = String::new();
    let _ = writeln!(out, "digraph program {{");
    let _ = writeln!(
        out,
        "  graph [rankdir=TB, labelloc=t, fontname=\"Helvetica\", fontsize=12, label={}];",
        quote(&heading)
    );
    let _ = writeln!(
        out,
        "  node [fontname=\"Helvetica\", fontsize=10, style=filled];"
    );
    let _ = writeln!(out, "  edge [color=\"#555555\", arrowsize=0.7];");
    out
}

/// One node per kernel (`<prefix>k<i>`) and per used buffer (`<prefix>b<i>`), each line
/// indented by `indent`.
fn write_nodes(out: &mut String, compiled: &Compiled, prefix: &str, indent: &str) {
    let program = &compiled.program;
    for (i, wave) in program.schedule.wave_of().iter().enumerate() {
        let _ = writeln!(
            out,
            "{indent}{prefix}k{i} [shape=box, style=\"rounded,filled\", fillcolor=\"#d6e4f5\", label={}];",
            quote(&kernel_label(compiled, i, *wave))
        );
    }
    let used = used_buffers(compiled);
    let outputs: BTreeSet<usize> = program.signature.outputs.iter().map(|o| o.1).collect();
    for (i, buffer) in program.buffers.iter().enumerate() {
        if !used.contains(&i) {
            continue;
        }
        let (_, style) = storage_style(&buffer.storage);
        let ring = if outputs.contains(&i) {
            ", peripheries=2"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{indent}{prefix}b{i} [{style}{ring}, label={}];",
            quote(&buffer_label(compiled, i))
        );
    }
}

/// An edge from each buffer a kernel reads and to each buffer it writes (bold).
fn write_edges(out: &mut String, compiled: &Compiled, prefix: &str) {
    let mut edges: BTreeSet<(String, String, bool)> = BTreeSet::new();
    for (k, kernel) in compiled.program.kernels.iter().enumerate() {
        let in_place = mutable_reads(kernel);
        for (p, param) in kernel.params.iter().enumerate() {
            let (buffer, node) = (
                format!("{prefix}b{}", param.buffer),
                format!("{prefix}k{k}"),
            );
            if param.access == Access::Shared || in_place.contains(&p) {
                edges.insert((buffer.clone(), node.clone(), false));
            }
            if param.access == Access::Mutable {
                edges.insert((node, buffer, true));
            }
        }
    }
    for (from, to, write) in &edges {
        let style = if *write { " [penwidth=1.6]" } else { "" };
        let _ = writeln!(out, "  {from} -> {to}{style};");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_quoted_with_their_escapes() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("output \"y\""), "\"output \\\"y\\\"\"");
        assert_eq!(
            quote("a\\nb"),
            "\"a\\\\nb\"",
            "a literal backslash stays one"
        );
        assert_eq!(quote("two\nlines"), "\"two\\nlines\"");
        assert_eq!(quote("bell\u{7}{x}"), "\"bell{x}\"");
    }
}
