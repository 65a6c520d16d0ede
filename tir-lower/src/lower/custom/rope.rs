//! Rotary position embedding at a run-time position, the decode step's kernel: `y` is
//! `x: [1, heads, 1, head_dim]` (one token's q or k) rotated by the angles
//! `pos * base^(-2i / head_dim)`, half-split as [`tir_graph::models::rope_at`] (its reference)
//! applies it: `y[j] = x[j] cos θ_j - x[j + h] sin θ_j` and `y[j + h] = x[j + h] cos θ_j +
//! x[j] sin θ_j` for `j < h = head_dim / 2`.
//!
//! No table is read: each program computes its angles in f32 from `pos` (read as a scalar) and
//! the lane index (`exp` of the lane times `-2 ln(base) / head_dim`), then cos and sin, and
//! applies them in f32, rounding once to `x`'s dtype. The partition is one half of one head per
//! program (`[1, 1, 1, h]`): program `(.., half)` loads its own half and the other one and
//! writes its own, so the legality pass proves it like any kernel. Hence `h` must be a power
//! of two (head dims 64, 128, 256: tiles are powers of two).
//!
//! [`rope_into_cache`] is the same rotation of the decode step's new key, written in place
//! into the key cache at the position (a slice output: no rotated copy, no separate cache
//! write), as a model applies it before attention reads the cache.
//!
//! Accuracy against the f64 oracle: the angle is rounded in f32 three times (the inverse
//! frequency by `exp`, within a few ulp, the product with `pos`, and `pos` itself past 2^24),
//! so its error is a few `2^-24 · pos` radians, which grows with the position: at `pos = 10^5`
//! about `0.02` rad. Frequencies in a model are meant to be used at positions where that
//! matters little, and the composite computed in f32 has the same error; the tests bound it so.

use super::{Body, KernelDef, KernelError};
use crate::tile::{IndexOp, TileOp, Type};
use tir_graph::{BinaryOp, CustomKernel, DType, Dim, GraphBuilder, Shape, UnaryOp};

/// The rotary kernel for `x: dtype[1, heads, 1, head_dim]` (f16, bf16 or f32; any `heads`) at
/// `pos: pos_dtype[]` (i64 or i32), with frequencies `base^(-2i / head_dim)`; output
/// `y: dtype[1, heads, 1, head_dim]`. `head_dim / 2` must be a power of two.
pub fn rope(
    dtype: DType,
    pos_dtype: DType,
    head_dim: u64,
    base: f64,
) -> Result<CustomKernel, KernelError> {
    let name = "rope";
    let half = check(name, dtype, pos_dtype, head_dim, base)?;
    let dims = heads_dims(head_dim, Dim::Static(1));
    KernelDef::new(name)
        .input("x", dtype, &dims)
        .input("pos", pos_dtype, &[])
        .output("y", dtype, &dims, &[1, 1, 1, half])
        .build(&reference(name, dtype, pos_dtype, head_dim, base)?, |b| {
            let y = rotated(b, (0, 1), dtype, half, base)?;
            b.store_own(0, y)
        })
}

/// The rotation of [`rope`] applied to `x: dtype[1, heads, 1, head_dim]` (the step's new key)
/// and written in place into `cache: dtype[1, heads, ctx, head_dim]` (a graph state) at
/// position `pos: pos_dtype[]` along axis 2: inputs `cache`, `x`, `pos`; output `cache_new`, the
/// cache with that one row per head rotated in, every other row as it was. The legality pass
/// proves the programs cover the slice one to one; the position is checked against `ctx`
/// before each launch.
pub fn rope_into_cache(
    dtype: DType,
    pos_dtype: DType,
    head_dim: u64,
    base: f64,
) -> Result<CustomKernel, KernelError> {
    let name = "rope_into_cache";
    let half = check(name, dtype, pos_dtype, head_dim, base)?;
    KernelDef::new(name)
        .input("cache", dtype, &heads_dims(head_dim, Dim::from("ctx")))
        .input("x", dtype, &heads_dims(head_dim, Dim::Static(1)))
        .input("pos", pos_dtype, &[])
        .output_in_place_slice("cache_new", &[1, 1, 1, half], (2, Dim::Static(1), 2))
        .build(&reference(name, dtype, pos_dtype, head_dim, base)?, |b| {
            let y = rotated(b, (1, 2), dtype, half, base)?;
            b.store_own(0, y)
        })
}

/// `[1, heads, rows, head_dim]`.
fn heads_dims(head_dim: u64, rows: Dim) -> Vec<Dim> {
    vec![
        Dim::Static(1),
        Dim::from("heads"),
        rows,
        Dim::Static(head_dim),
    ]
}

/// Refuses what the kernels do not take (see [`rope`]); returns half the head dim.
fn check(
    name: &str,
    dtype: DType,
    pos_dtype: DType,
    head_dim: u64,
    base: f64,
) -> Result<u64, KernelError> {
    let half = head_dim / 2;
    let float = matches!(dtype, DType::F16 | DType::BF16 | DType::F32);
    let position = matches!(pos_dtype, DType::I64 | DType::I32);
    let base_ok = base.is_finite() && base > 1.0;
    if !float || !position || half == 0 || !half.is_power_of_two() || !base_ok {
        return Err(super::body_error(
            name,
            format!(
                "takes f16/bf16/f32 heads whose half is a power of two, an i64/i32 position and a \
                 finite base above 1; got {dtype} heads of {head_dim}, a {pos_dtype} position, base {base}"
            ),
        ));
    }
    Ok(half)
}

/// The program of the module doc, one half of one head: the rotated tile of input `x` at the
/// position in input `pos` (`(x, pos)`), in `dtype`.
fn rotated(
    b: &mut Body,
    (x, pos): (usize, usize),
    dtype: DType,
    half: u64,
    base: f64,
) -> Result<crate::tile::ValueId, KernelError> {
    let shape = [1, 1, 1, half];
    let f32_tile = Type::tile(DType::F32, &shape);
    let i64_tile = Type::tile(DType::I64, &shape);
    let programs = [
        b.program_id(0)?,
        b.program_id(1)?,
        b.program_id(2)?,
        b.program_id(3)?,
    ];
    let (zero, one, two) = (b.index(0), b.index(1), b.index(2));
    // The other half's tile coordinate, and the sign its sine term takes (-1 for the first).
    let other_half = b.arith(IndexOp::Sub, one, programs[3]);
    let twice = b.arith(IndexOp::Mul, two, programs[3]);
    let sign = b.arith(IndexOp::Sub, twice, one);
    let view = b.input_view(x)?;
    let own = b.load(view, &programs, &shape, 0.0)?;
    let mut at_other = programs;
    at_other[3] = other_half;
    let other = b.load(view, &at_other, &shape, 0.0)?;
    let (own, other) = (
        to_f32(b, own, dtype, &shape),
        to_f32(b, other, dtype, &shape),
    );
    // Angles: pos * exp(lane * (-2 ln(base) / head_dim)), in f32.
    let pos = b.op(
        TileOp::LoadScalar {
            param: pos,
            index: zero,
        },
        Type::Index,
    );
    let pos = scalar_tile(b, pos, &i64_tile, &f32_tile);
    let lanes = b.op(TileOp::Iota { axis: 3 }, i64_tile.clone());
    let lanes = b.op(TileOp::Cast { x: lanes }, f32_tile.clone());
    let step = -(base.ln()) / half as f64;
    let step = b.op(
        TileOp::Constant {
            value: step as f32 as f64,
        },
        f32_tile.clone(),
    );
    let exponent = binary(b, BinaryOp::Mul, lanes, step, &f32_tile);
    let inverse = unary(b, UnaryOp::Exp, exponent, &f32_tile);
    let angle = binary(b, BinaryOp::Mul, pos, inverse, &f32_tile);
    let cos = unary(b, UnaryOp::Cos, angle, &f32_tile);
    let sin = unary(b, UnaryOp::Sin, angle, &f32_tile);
    // y = own * cos + sign * other * sin
    let sign = scalar_tile(b, sign, &i64_tile, &f32_tile);
    let turned = binary(b, BinaryOp::Mul, other, sin, &f32_tile);
    let turned = binary(b, BinaryOp::Mul, sign, turned, &f32_tile);
    let kept = binary(b, BinaryOp::Mul, own, cos, &f32_tile);
    let y = binary(b, BinaryOp::Add, kept, turned, &f32_tile);
    Ok(if dtype == DType::F32 {
        y
    } else {
        b.op(TileOp::Cast { x: y }, Type::tile(dtype, &shape))
    })
}

/// `x` (a tile of `dtype`) as f32.
fn to_f32(
    b: &mut Body,
    x: crate::tile::ValueId,
    dtype: DType,
    shape: &[u64],
) -> crate::tile::ValueId {
    if dtype == DType::F32 {
        return x;
    }
    b.op(TileOp::Cast { x }, Type::tile(DType::F32, shape))
}

/// The index scalar `x` as an f32 tile of `f32_tile`'s shape (through an i64 splat).
fn scalar_tile(
    b: &mut Body,
    x: crate::tile::ValueId,
    i64_tile: &Type,
    f32_tile: &Type,
) -> crate::tile::ValueId {
    let splat = b.op(TileOp::Splat { x }, i64_tile.clone());
    b.op(TileOp::Cast { x: splat }, f32_tile.clone())
}

fn unary(b: &mut Body, op: UnaryOp, x: crate::tile::ValueId, ty: &Type) -> crate::tile::ValueId {
    b.op(TileOp::Unary { op, x }, ty.clone())
}

fn binary(
    b: &mut Body,
    op: BinaryOp,
    a: crate::tile::ValueId,
    c: crate::tile::ValueId,
    ty: &Type,
) -> crate::tile::ValueId {
    b.op(TileOp::Binary { op, a, b: c }, ty.clone())
}

/// [`tir_graph::models::rope_at`] on the kernel's inputs, for the oracle; for
/// [`rope_into_cache`], written into the cache at the position by a select over its rows
/// (exact: each element takes the rotated value or keeps its own).
fn reference(
    name: &str,
    dtype: DType,
    pos_dtype: DType,
    head_dim: u64,
    base: f64,
) -> Result<tir_graph::Graph, KernelError> {
    let graph = |e: tir_graph::GraphError| super::body_error(name, format!("its reference: {e}"));
    let shape = |rows: Dim| {
        Shape::new(heads_dims(head_dim, rows)).map_err(|e| super::body_error(name, e.to_string()))
    };
    let g = GraphBuilder::new();
    let into_cache = name == "rope_into_cache";
    let cache = if into_cache {
        Some(
            g.input("cache", dtype, shape(Dim::from("ctx"))?)
                .map_err(graph)?,
        )
    } else {
        None
    };
    let x = g.input("x", dtype, shape(Dim::Static(1))?).map_err(graph)?;
    let pos = g.input("pos", pos_dtype, Shape::scalar()).map_err(graph)?;
    let y = tir_graph::models::rope_at(&x, &pos, base).map_err(graph)?;
    match cache {
        Some(cache) => {
            let cache_new = written_at(&g, &cache, &y, &pos).map_err(graph)?;
            g.output("cache_new", &cache_new).map_err(graph)?;
        }
        None => g.output("y", &y).map_err(graph)?,
    }
    g.finish().map_err(graph)
}

/// `cache` with its row `pos` along axis 2 replaced by `row`.
fn written_at(
    g: &GraphBuilder,
    cache: &tir_graph::Tensor,
    row: &tir_graph::Tensor,
    pos: &tir_graph::Tensor,
) -> Result<tir_graph::Tensor, tir_graph::GraphError> {
    let ctx = cache.ty().shape.dims()[2].clone();
    let at = g.iota(ctx)?.eq(&pos.cast(DType::I64)?)?.unsqueeze(&[1])?;
    at.select(row, cache)
}
