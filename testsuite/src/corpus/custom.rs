//! Users' kernels (`tir_lower::custom`): the graph op `custom` running its author's tile
//! program, checked against the oracle running its reference composite.
//!
//! Names are `custom/KERNEL/DTYPE/SHAPE`. Top-k per row (`tir_lower::custom::topk`) over rows
//! of odd lengths, `k` from 1 to its largest (64), a symbolic batch bound to several values run
//! after run, in f16 and f32; with `Halves` values (many ties, so the lowest-index-first rule is
//! exercised) and with the default ones. Top-k selects elements, so it is exact.
//!
//! The paged KV-cache append (`tir_lower::custom::paged_kv`, an unsafe kernel updating its pool
//! state in place), `custom/paged_append/DTYPE/INDEX_...`: f16 and f32 pools, i32 and i64 tables,
//! two geometries (one with odd sizes), batch 1 and 3, run after run at consecutive positions
//! that cross page boundaries, the pool carried by the backend; tables that keep the contract
//! (distinct pages). Exact: every element is copied or kept.

use super::{Corpus, Result};
use crate::tolerance::Tolerance;
use crate::values::Values;
use tir_graph::{shape, DType, GraphBuilder};
use tir_lower::custom::paged_kv::{paged_append, PagedLayout};
use tir_lower::custom::topk::topk;

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let shapes: [(u64, u64); 5] = [(37, 5), (100, 64), (7, 7), (1, 1), (1000, 16)];
    for dtype in [DType::F16, DType::F32] {
        for (n, k) in shapes {
            for (values, tag) in [(Values::Default, ""), (Values::Halves, "_ties")] {
                // The table above holds only sizes topk takes: a refusal is a bug of it.
                let kernel = topk(dtype, n, k).unwrap_or_else(|e| panic!("the top-k table: {e}"));
                let g = GraphBuilder::new();
                let x = g.input("x", dtype, shape!["batch", n])?;
                let out = g.custom(&kernel, &[&x])?;
                g.output("values", &out[0])?;
                g.output("indices", &out[1])?;
                let name = format!("custom/topk/{dtype}/batch_x{n}_k{k}{tag}");
                let values = move |_: &str| values.clone();
                c.add(
                    name,
                    g.finish()?,
                    &[vec![("batch", 3)], vec![("batch", 1)], vec![("batch", 8)]],
                    &values,
                    Tolerance::EXACT,
                );
            }
        }
    }
    paged(c)
}

/// A geometry, its tables (one row per sequence, distinct pages) and the runs: sequence `b` at
/// position `run + b`.
type PagedSetup = (PagedLayout, &'static [&'static [u64]], u64);

fn paged(c: &mut Corpus) -> Result<()> {
    let even = PagedLayout {
        pages: 8,
        page_size: 4,
        heads: 2,
        head_dim: 16,
        max_blocks: 2,
    };
    let odd = PagedLayout {
        pages: 5,
        page_size: 3,
        heads: 3,
        head_dim: 5,
        max_blocks: 3,
    };
    let setups: [PagedSetup; 3] = [
        (even, &[&[5, 0], &[2, 7], &[3, 6]], 6),
        (even, &[&[6, 1]], 8),
        (odd, &[&[4, 0, 2]], 9),
    ];
    for (dtype, index) in [
        (DType::F16, DType::I32),
        (DType::F32, DType::I64),
        (DType::F16, DType::I64),
    ] {
        for (layout, rows, runs) in setups {
            paged_case(c, dtype, index, (layout, rows, runs))?;
        }
    }
    Ok(())
}

fn paged_case(c: &mut Corpus, dtype: DType, index: DType, setup: PagedSetup) -> Result<()> {
    let (l, rows, runs) = setup;
    // The setups above keep what paged_append takes: a refusal is a bug of it.
    let kernel = paged_append(dtype, index, l).unwrap_or_else(|e| panic!("the paged table: {e}"));
    let g = GraphBuilder::new();
    let pool = g.state(
        "kv",
        dtype,
        shape![l.pages, l.page_size, l.heads, l.head_dim],
    )?;
    let table = g.input("table", index, shape!["batch", l.max_blocks])?;
    let pos = g.input("pos", index, shape!["batch"])?;
    let new = g.input("new", dtype, shape!["batch", l.heads, l.head_dim])?;
    let out = g.custom(&kernel, &[&pool, &table, &pos, &new])?;
    g.output("kv_after", &out[0])?;
    let graph = g.finish()?;
    let batch = rows.len() as u64;
    let name = format!(
        "custom/paged_append/{dtype}/{index}_pages{}x{}_heads{}x{}_batch{batch}",
        l.pages, l.page_size, l.heads, l.head_dim
    );
    let table: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.iter())
        .map(|&p| p as f64)
        .collect();
    let binding = vec![("batch", batch)];
    let runs = (0..runs)
        .map(|run| {
            let mut s = c.sources(&name, &graph, &binding, run as usize, &|_| Values::Default);
            let at: Vec<f64> = (0..batch).map(|b| (run + b) as f64).collect();
            s.insert(
                "table".into(),
                super::explicit(index, &[batch, l.max_blocks], &table),
            );
            s.insert("pos".into(), super::explicit(index, &[batch], &at));
            s
        })
        .collect();
    c.add_runs(name, graph, runs, Tolerance::EXACT);
    Ok(())
}
