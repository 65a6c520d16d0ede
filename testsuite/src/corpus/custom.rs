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
//!
//! Rotary embedding at a run-time position (`tir_lower::custom::rope`) of one token's heads,
//! `[1, heads, 1, head_dim]` with `heads` symbolic, in f16, bf16 and f32, with i64 and i32
//! positions in `0..=32`. Its angles are rounded in f32 (an error under `0.75 · 2^-22 · pos`
//! radians against the oracle, see the kernel's module), which grows with the position like a
//! reduction's error with the square root of its length: the tolerance is the composite class
//! with `len = (8 · 32)^2`, `4 · 256 · 2^-24` relative, a margin of 4 over the kernel's bound
//! for a device whose `exp` is a few times less exact than the reference's.
//!
//! The same rotation written in place into a key cache at the position
//! (`tir_lower::custom::rope::rope_into_cache`, a safe kernel writing a slice of its state),
//! `custom/rope_into_cache/DTYPE/...`: an odd context, run after run at positions out of order
//! (the first, the last, the middle), the cache carried by the backend, so rows written by
//! earlier runs must keep their values.

use super::{Corpus, Result};
use crate::tolerance::Tolerance;
use crate::values::Values;
use tir_graph::{shape, DType, GraphBuilder, Shape};
use tir_lower::custom::paged_kv::{paged_append, PagedLayout};
use tir_lower::custom::rope::{rope, rope_into_cache};
use tir_lower::custom::topk::topk;

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    add_topk(c)?;
    add_rope(c)?;
    add_rope_into_cache(c)?;
    paged(c)
}

/// The largest position the rotary cases draw.
const ROPE_MAX_POS: u64 = 32;

fn add_rope(c: &mut Corpus) -> Result<()> {
    let cases = [
        (DType::F16, DType::I64, 128u64),
        (DType::F16, DType::I32, 64),
        (DType::F32, DType::I64, 128),
        (DType::F32, DType::I64, 8),
        (DType::BF16, DType::I64, 128),
    ];
    for (dtype, pos_dtype, head_dim) in cases {
        // The table above holds only sizes rope takes: a refusal is a bug of it.
        let kernel = rope(dtype, pos_dtype, head_dim, 10000.0)
            .unwrap_or_else(|e| panic!("the rope table: {e}"));
        let g = GraphBuilder::new();
        let x = g.input("x", dtype, shape![1, "heads", 1, head_dim])?;
        let pos = g.input("pos", pos_dtype, Shape::scalar())?;
        let out = g.custom(&kernel, &[&x, &pos])?;
        g.output("y", &out[0])?;
        let name = format!("custom/rope/{dtype}/1_x_heads_x1_x{head_dim}_pos_{pos_dtype}");
        let values = |input: &str| match input {
            "pos" => Values::Uniform(0.0, ROPE_MAX_POS as f64),
            _ => Values::Default,
        };
        let len = (8 * ROPE_MAX_POS).pow(2);
        c.add(
            name,
            g.finish()?,
            &[vec![("heads", 32)], vec![("heads", 1)], vec![("heads", 5)]],
            &values,
            Tolerance::composite(len),
        );
    }
    Ok(())
}

fn add_topk(c: &mut Corpus) -> Result<()> {
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
    Ok(())
}

fn add_rope_into_cache(c: &mut Corpus) -> Result<()> {
    let (heads, ctx) = (3u64, 9u64);
    let positions = [4u64, 0, 8, 5, 1];
    for (dtype, pos_dtype, head_dim) in [
        (DType::F16, DType::I64, 128u64),
        (DType::F32, DType::I32, 8),
        (DType::BF16, DType::I64, 64),
    ] {
        // The table above holds only sizes the kernel takes: a refusal is a bug of it.
        let kernel = rope_into_cache(dtype, pos_dtype, head_dim, 10000.0)
            .unwrap_or_else(|e| panic!("the rope_into_cache table: {e}"));
        let g = GraphBuilder::new();
        let cache = g.state("k_cache", dtype, shape![1, heads, ctx, head_dim])?;
        let x = g.input("x", dtype, shape![1, heads, 1, head_dim])?;
        let pos = g.input("pos", pos_dtype, Shape::scalar())?;
        let out = g.custom(&kernel, &[&cache, &x, &pos])?;
        g.output("k_cache_after", &out[0])?;
        let graph = g.finish()?;
        let name =
            format!("custom/rope_into_cache/{dtype}/1x{heads}x{ctx}x{head_dim}_pos_{pos_dtype}");
        let runs = positions
            .iter()
            .enumerate()
            .map(|(run, &at)| {
                let mut s = c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default);
                s.insert("pos".into(), super::explicit(pos_dtype, &[], &[at as f64]));
                s
            })
            .collect();
        c.add_runs(
            name,
            graph,
            runs,
            Tolerance::composite((8 * ROPE_MAX_POS).pow(2)),
        );
    }
    Ok(())
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
