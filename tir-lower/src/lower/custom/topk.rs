//! Top-k per row, the first example of a user's kernel: the `k` largest elements of each row
//! of `x: [batch, n]` (`k <= 64`, `k <= n`), largest first, and their positions.
//!
//! Ties go to the lowest index first (a round takes the first position of the row's maximum).
//! Indices are `i64`: the graph's `argmax` and `gather` speak `i64`, so the positions feed a
//! gather with no cast, and `k` of them per row cost nothing next to the row itself. NaN is not
//! ordered (a row holding NaN has no defined top-k), and a row with fewer than `k` elements
//! above `-inf` repeats positions among its `-inf`s (both the kernel and its reference mask a
//! taken element with `-inf`).
//!
//! The program: one program per row loads the row (padded with `-inf`), then `k` rounds, carried
//! in a loop, each taking the row's maximum and its first position into lane `r` of the two
//! result tiles and masking that position out. The reference composite does the same rounds
//! with `reduce_max`, `argmax`, `select` and `concat`.

use super::{Body, KernelDef, KernelError};
use crate::tile::{CmpOp, TileOp, Type};
use tir_graph::{CustomKernel, DType, Dim, GraphBuilder, ReduceOp, Shape};

/// The largest `k` this kernel takes.
pub const MAX_K: u64 = 64;

/// The top-`k` kernel over rows of `n` elements of `dtype` (a float), for any batch: outputs
/// `values: dtype[batch, k]` and `indices: i64[batch, k]`.
pub fn topk(dtype: DType, n: u64, k: u64) -> Result<CustomKernel, KernelError> {
    let name = "topk";
    if k == 0 || k > MAX_K || k > n || !dtype.is_float() {
        return Err(super::body_error(
            name,
            format!("takes 1 <= k <= min(n, {MAX_K}) over floats; got k = {k}, n = {n}, {dtype}"),
        ));
    }
    let batch = Dim::from("batch");
    let (np, kp) = (n.next_power_of_two(), k.next_power_of_two());
    KernelDef::new(name)
        .input("x", dtype, &[batch.clone(), Dim::Static(n)])
        .output("values", dtype, &[batch.clone(), Dim::Static(k)], &[1, kp])
        .output("indices", DType::I64, &[batch, Dim::Static(k)], &[1, kp])
        .build(&reference(dtype, n, k)?, |b| body(b, dtype, (np, k, kp)))
}

/// The rounds, as the module doc says; `(np, k, kp)`: the row's tile, `k`, the results' tile.
fn body(b: &mut Body, dtype: DType, (np, k, kp): (u64, u64, u64)) -> Result<(), KernelError> {
    let (row, zero, one, rounds) = (b.program_id(0)?, b.index(0), b.index(1), b.index(k as i64));
    let view = b.input_view(0)?;
    let x = b.load(view, &[row, zero], &[1, np], f64::NEG_INFINITY)?;
    let (row_ty, lane_ty) = (Type::tile(dtype, &[1, np]), Type::tile(dtype, &[1, kp]));
    let (pos_ty, slot_ty) = (
        Type::tile(DType::I64, &[1, np]),
        Type::tile(DType::I64, &[1, kp]),
    );
    let values = b.op(TileOp::Constant { value: 0.0 }, lane_ty.clone());
    let indices = b.op(TileOp::Constant { value: 0.0 }, slot_ty.clone());
    let positions = b.op(TileOp::Iota { axis: 1 }, pos_ty.clone());
    let lanes = b.op(TileOp::Iota { axis: 1 }, slot_ty.clone());
    let masked = b.op(
        TileOp::Constant {
            value: f64::NEG_INFINITY,
        },
        row_ty.clone(),
    );
    let bools = |ty: &Type| match ty {
        Type::Tile { shape, .. } => Type::tile(DType::Bool, shape),
        other => other.clone(),
    };
    let done = b.for_loop((zero, rounds, one), &[x, values, indices], |b, r, c| {
        let (x, values, indices) = (c[0], c[1], c[2]);
        let max = b.op(
            TileOp::Reduce {
                op: ReduceOp::Max,
                x,
                axis: 1,
            },
            Type::tile(dtype, &[1, 1]),
        );
        let at = b.op(
            TileOp::Reduce {
                op: ReduceOp::ArgMax,
                x,
                axis: 1,
            },
            Type::tile(DType::I64, &[1, 1]),
        );
        let r = b.op(TileOp::Splat { x: r }, slot_ty.clone());
        let lane = b.op(
            TileOp::IndexCmp {
                op: CmpOp::Eq,
                a: lanes,
                b: r,
            },
            bools(&slot_ty),
        );
        let max = b.op(TileOp::Broadcast { x: max }, lane_ty.clone());
        let at_lane = b.op(TileOp::Broadcast { x: at }, slot_ty.clone());
        let values = b.op(
            TileOp::Select {
                cond: lane,
                a: max,
                b: values,
            },
            lane_ty.clone(),
        );
        let indices = b.op(
            TileOp::Select {
                cond: lane,
                a: at_lane,
                b: indices,
            },
            slot_ty.clone(),
        );
        let at_row = b.op(TileOp::Broadcast { x: at }, pos_ty.clone());
        let taken = b.op(
            TileOp::IndexCmp {
                op: CmpOp::Eq,
                a: positions,
                b: at_row,
            },
            bools(&pos_ty),
        );
        let x = b.op(
            TileOp::Select {
                cond: taken,
                a: masked,
                b: x,
            },
            row_ty.clone(),
        );
        Ok(vec![x, values, indices])
    })?;
    b.store_own(0, done[1])?;
    b.store_own(1, done[2])
}

/// The same rounds with IR ops, for the oracle.
fn reference(dtype: DType, n: u64, k: u64) -> Result<tir_graph::Graph, KernelError> {
    let graph = |e: tir_graph::GraphError| super::body_error("topk", format!("its reference: {e}"));
    let g = GraphBuilder::new();
    let shape = Shape::new(vec![Dim::from("batch"), Dim::Static(n)])
        .map_err(|e| super::body_error("topk", e.to_string()))?;
    let mut x = g.input("x", dtype, shape).map_err(graph)?;
    let positions = g.iota(Dim::Static(n)).map_err(graph)?;
    let masked = g.scalar(dtype, f64::NEG_INFINITY).map_err(graph)?;
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    for _ in 0..k {
        let max = x.max(&[1], true).map_err(graph)?;
        let at = x.argmax(1, true).map_err(graph)?;
        let taken = positions.eq(&at).map_err(graph)?;
        x = taken.select(&masked, &x).map_err(graph)?;
        values.push(max);
        indices.push(at);
    }
    let values = g
        .concat(&values.iter().collect::<Vec<_>>(), 1)
        .map_err(graph)?;
    let indices = g
        .concat(&indices.iter().collect::<Vec<_>>(), 1)
        .map_err(graph)?;
    g.output("values", &values).map_err(graph)?;
    g.output("indices", &indices).map_err(graph)?;
    g.finish().map_err(graph)
}
