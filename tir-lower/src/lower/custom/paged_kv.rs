//! The paged KV-cache append, an unsafe in-place kernel: each sequence of a batch writes its new
//! key (or value) into the page its block table names, at its run-time position.
//!
//! Takes `pool: dtype[pages, page_size, heads, head_dim]` (a graph state, updated in place),
//! `table: idx[batch, max_blocks]` (row `b`: sequence `b`'s pages, block by block), `pos:
//! idx[batch]` (each sequence's position) and `new: dtype[batch, heads, head_dim]`; `idx` is
//! `i32` or `i64`. Sequence `b` writes `new[b]` at page `table[b, pos[b] / page_size]`, slot
//! `pos[b] % page_size`; every other element of the pool keeps its value.
//!
//! Layout: pages outermost, so a page is one contiguous `[page_size, heads, head_dim]` block (what
//! a paged attention reads page by page) and a token's heads are contiguous within it.
//!
//! Why unsafe: where a program writes depends on the table's contents, which no proof sees.
//! The contract ([`CONTRACT`]): the table maps distinct blocks to distinct pages, across the
//! whole batch, and every position's block and page are in range. A table naming one page twice
//! makes two programs write one element; the reference backend's checking mode reports it.
//!
//! The program: one program per (sequence, head) reads the position, the page from the table,
//! loads its head's `[head_dim]` row of `new` and stores it at `(page, slot, head)`. The
//! reference composite builds the new pool with one-hot selects over pages and slots (the IR has
//! no scatter): exact, as each element takes one value or keeps its own.

use super::{Body, KernelDef, KernelError};
use crate::tile::{IndexOp, TileOp, Type};
use tir_graph::{CustomKernel, DType, Dim, GraphBuilder, GraphError, Shape, Tensor};

/// The author's contract of [`paged_append`].
pub const CONTRACT: &str = "the block table maps distinct blocks to distinct pages (across the \
     whole batch), each position's block is inside its table row, and every page it names is a \
     page of the pool";

/// The pool's geometry: `[pages, page_size, heads, head_dim]`, and the table's `max_blocks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagedLayout {
    /// Pages in the pool.
    pub pages: u64,
    /// Tokens per page.
    pub page_size: u64,
    /// Heads per token.
    pub heads: u64,
    /// Elements per head.
    pub head_dim: u64,
    /// Blocks per sequence in the table.
    pub max_blocks: u64,
}

impl PagedLayout {
    fn pool_dims(&self) -> Vec<Dim> {
        [self.pages, self.page_size, self.heads, self.head_dim]
            .into_iter()
            .map(Dim::Static)
            .collect()
    }
}

/// The append kernel over a pool of `dtype` (a float) and positions and tables of `index` (`i32`
/// or `i64`), for any batch: inputs `pool`, `table`, `pos`, `new`; output `appended`, the pool
/// updated in place.
pub fn paged_append(
    dtype: DType,
    index: DType,
    layout: PagedLayout,
) -> Result<CustomKernel, KernelError> {
    let name = "paged_append";
    let sizes = [
        layout.pages,
        layout.page_size,
        layout.heads,
        layout.head_dim,
        layout.max_blocks,
    ];
    if !dtype.is_float() || !matches!(index, DType::I32 | DType::I64) || sizes.contains(&0) {
        return Err(super::body_error(
            name,
            format!(
                "takes a float pool, i32 or i64 tables and positions, and sizes above 0; got \
                 {dtype}, {index}, {layout:?}"
            ),
        ));
    }
    let batch = Dim::from("batch");
    let dp = layout.head_dim.next_power_of_two();
    let l = layout;
    KernelDef::new(name)
        .input("pool", dtype, &layout.pool_dims())
        .input(
            "table",
            index,
            &[batch.clone(), Dim::Static(layout.max_blocks)],
        )
        .input("pos", index, std::slice::from_ref(&batch))
        .input(
            "new",
            dtype,
            &[batch, Dim::Static(l.heads), Dim::Static(l.head_dim)],
        )
        .output_in_place("appended", &[1, 1, 1, dp])
        .unsafe_contract(CONTRACT)
        .grid_over(3, &[1, 1, dp])
        .build(&reference(dtype, index, layout)?, |b| {
            body(b, dtype, layout, dp)
        })
}

/// Program `(b, h, 0)` writes head `h` of sequence `b`'s new token (see the module doc).
fn body(b: &mut Body, dtype: DType, l: PagedLayout, dp: u64) -> Result<(), KernelError> {
    let (seq, head, zero) = (b.program_id(0)?, b.program_id(1)?, b.program_id(2)?);
    let pos = b.op(
        TileOp::LoadScalar {
            param: 2,
            index: seq,
        },
        Type::Index,
    );
    let page_size = b.index(l.page_size as i64);
    let block = b.arith(IndexOp::Div, pos, page_size);
    let slot = b.arith(IndexOp::Rem, pos, page_size);
    let max_blocks = b.index(l.max_blocks as i64);
    let row = b.arith(IndexOp::Mul, seq, max_blocks);
    let entry = b.arith(IndexOp::Add, row, block);
    let page = b.op(
        TileOp::LoadScalar {
            param: 1,
            index: entry,
        },
        Type::Index,
    );
    let new = b.input_view(3)?;
    let x = b.load(new, &[seq, head, zero], &[1, 1, dp], 0.0)?;
    let x = b.op(TileOp::Reshape { x }, Type::tile(dtype, &[1, 1, 1, dp]));
    let pool = b.output_view(0)?;
    b.store(pool, &[page, slot, head, zero], x)
}

/// The same writes with IR ops, for the oracle: a one-hot select over (page, slot) per sequence.
fn reference(dtype: DType, index: DType, l: PagedLayout) -> Result<tir_graph::Graph, KernelError> {
    let graph = |e: GraphError| super::body_error("paged_append", format!("its reference: {e}"));
    let shape = |dims: Vec<Dim>| {
        Shape::new(dims).map_err(|e| super::body_error("paged_append", e.to_string()))
    };
    let batch = Dim::from("batch");
    let g = GraphBuilder::new();
    let pool = g
        .input("pool", dtype, shape(l.pool_dims())?)
        .map_err(graph)?;
    let table = g
        .input(
            "table",
            index,
            shape(vec![batch.clone(), Dim::Static(l.max_blocks)])?,
        )
        .map_err(graph)?;
    let pos = g
        .input("pos", index, shape(vec![batch.clone()])?)
        .map_err(graph)?;
    let new = g
        .input(
            "new",
            dtype,
            shape(vec![batch, Dim::Static(l.heads), Dim::Static(l.head_dim)])?,
        )
        .map_err(graph)?;
    let appended = composite(&g, (&pool, &table, &pos, &new), dtype, l).map_err(graph)?;
    g.output("appended", &appended).map_err(graph)?;
    g.finish().map_err(graph)
}

/// The new pool: `new[b]` where `(page, slot)` is sequence `b`'s target, the pool elsewhere.
fn composite(
    g: &GraphBuilder,
    (pool, table, pos, new): (&Tensor, &Tensor, &Tensor, &Tensor),
    dtype: DType,
    l: PagedLayout,
) -> Result<Tensor, GraphError> {
    let i64s = |v: u64| g.scalar(DType::I64, v as f64);
    let (table, pos) = (table.cast(DType::I64)?, pos.cast(DType::I64)?);
    let block = pos.div(&i64s(l.page_size)?)?;
    let slot = pos.rem(&i64s(l.page_size)?)?;
    // page[b] = table[b, block[b]], as a one-hot sum over the row.
    let in_row = g
        .iota(Dim::Static(l.max_blocks))?
        .eq(&block.unsqueeze(&[1])?)?;
    let page = in_row.select(&table, &i64s(0)?)?.sum(&[1], false)?;
    let on_page = g.iota(Dim::Static(l.pages))?.eq(&page.unsqueeze(&[1])?)?;
    let on_slot = g
        .iota(Dim::Static(l.page_size))?
        .eq(&slot.unsqueeze(&[1])?)?;
    let hit = on_page.unsqueeze(&[2])?.and(&on_slot.unsqueeze(&[1])?)?; // [batch, pages, slots]
    let zero = g.scalar(dtype, 0.0)?;
    let written = hit
        .unsqueeze(&[3, 4])?
        .select(&new.unsqueeze(&[1, 2])?, &zero)?
        .sum(&[0], false)?;
    let any = hit
        .cast(DType::I64)?
        .sum(&[0], false)?
        .gt(&i64s(0)?)?
        .unsqueeze(&[2, 3])?;
    any.select(&written, pool)
}
