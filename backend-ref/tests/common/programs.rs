//! The hand-written programs the tests share.

use super::{KernelBuilder, ProgramBuilder};
use tir_graph::{shape, BinaryOp, DType, Dim, ReduceOp, TensorType, UnaryOp};
use tir_lower::legality::LaunchCheck;
use tir_lower::tile::{CmpOp, IndexOp, Region, SliceStart};
use tir_lower::Program;

pub const TILE: u64 = 256;

/// `z = x + y` over `f32[n]`, one tile of 256 per program, the last one masked.
pub fn vector_add() -> Program {
    let mut p = ProgramBuilder::new();
    let ty = TensorType::new(DType::F32, shape!["n"]);
    let (x, y) = (p.input("x", ty.clone()), p.input("y", ty.clone()));
    let z = p.output("z", ty);
    let mut k = KernelBuilder::new("k0_add");
    let (px, py) = (k.shared(x, DType::F32), k.shared(y, DType::F32));
    let pz = k.mutable(z, DType::F32, Region::Whole);
    k.grid(|k| {
        let n = k.dim("n");
        vec![k.cdiv(n, TILE as i64)]
    });
    let i = k.pid(0);
    let n = k.dim("n");
    let (vx, vy, vz) = (
        k.row_major_view(px, &[n]),
        k.row_major_view(py, &[n]),
        k.row_major_view(pz, &[n]),
    );
    let a = k.load(vx, &[i], 0.0, DType::F32, &[TILE]);
    let b = k.load(vy, &[i], 0.0, DType::F32, &[TILE]);
    let s = k.binary(BinaryOp::Add, a, b);
    let t = k.token();
    k.store(vz, &[i], s, t);
    p.kernel(k.finish(), vec![]);
    p.finish()
}

/// `out = softmax(x, axis 1)` over `f16[rows, 100]`: one row per program in a `[1, 128]` tile,
/// the padding masked out of both reductions with iota < 100.
pub fn row_softmax(width: u64, tile: u64) -> Program {
    let mut p = ProgramBuilder::new();
    let ty = TensorType::new(DType::F16, shape!["rows", width]);
    let x = p.input("x", ty.clone());
    let out = p.output("out", ty);
    let mut k = KernelBuilder::new("k0_softmax");
    let px = k.shared(x, DType::F16);
    let po = k.mutable(out, DType::F16, Region::Whole);
    k.grid(|k| vec![k.dim("rows")]);
    let r = k.pid(0);
    let rows = k.dim("rows");
    let w = k.index(width as i64);
    let vx = k.row_major_view(px, &[rows, w]);
    let vo = k.row_major_view(po, &[rows, w]);
    let zero = k.index(0);
    let shape = [1, tile];
    let t = k.load(vx, &[r, zero], 0.0, DType::F16, &shape);
    let col = k.iota(&shape, 1);
    let limit = k.splat(w, DType::I64, &shape);
    let mask = k.cmp(CmpOp::Lt, col, limit);
    let neg_inf = k.constant(DType::F16, &shape, f64::NEG_INFINITY);
    let masked = k.select(mask, t, neg_inf);
    let m = k.reduce(ReduceOp::Max, masked, 1);
    let mb = k.broadcast(m, &shape);
    let d = k.binary(BinaryOp::Sub, masked, mb);
    let e = k.unary(UnaryOp::Exp, d);
    let zeros = k.constant(DType::F16, &shape, 0.0);
    let e = k.select(mask, e, zeros);
    let s = k.reduce(ReduceOp::Sum, e, 1);
    let sb = k.broadcast(s, &shape);
    let y = k.binary(BinaryOp::Div, e, sb);
    let tok = k.token();
    k.store(vo, &[r, zero], y, tok);
    p.kernel(k.finish(), vec![]);
    p.finish()
}

pub const TM: u64 = 32;
pub const TN: u64 = 32;
pub const TK: u64 = 16;

/// `c = a @ b` for `f16[m, k] @ f16[k, n] -> f32[m, n]`: a grid of 32x32 output tiles, each
/// looping over K in steps of 16 with an f32 accumulator; loads pad with 0.
pub fn matmul(m: u64, kk: u64, n: u64) -> Program {
    let mut p = ProgramBuilder::new();
    let a = p.input("a", TensorType::new(DType::F16, shape![m, kk]));
    let b = p.input("b", TensorType::new(DType::F16, shape![kk, n]));
    let c = p.output("c", TensorType::new(DType::F32, shape![m, n]));
    let mut k = KernelBuilder::new("k0_matmul");
    let (pa, pb) = (k.shared(a, DType::F16), k.shared(b, DType::F16));
    let pc = k.mutable(c, DType::F32, Region::Whole);
    k.grid(|k| {
        let (m, n) = (k.index(m as i64), k.index(n as i64));
        vec![k.cdiv(m, TM as i64), k.cdiv(n, TN as i64)]
    });
    let (i, j) = (k.pid(0), k.pid(1));
    let (dm, dk, dn) = (k.index(m as i64), k.index(kk as i64), k.index(n as i64));
    let va = k.row_major_view(pa, &[dm, dk]);
    let vb = k.row_major_view(pb, &[dk, dn]);
    let vc = k.row_major_view(pc, &[dm, dn]);
    let acc = k.constant(DType::F32, &[TM, TN], 0.0);
    let (zero, one) = (k.index(0), k.index(1));
    let steps = k.cdiv(dk, TK as i64);
    let result = k.for_loop(zero, steps, one, &[acc], |k, s, carried| {
        let ta = k.load(va, &[i, s], 0.0, DType::F16, &[TM, TK]);
        let tb = k.load(vb, &[s, j], 0.0, DType::F16, &[TK, TN]);
        vec![k.mma(ta, tb, carried[0])]
    });
    let t = k.token();
    k.store(vc, &[i, j], result[0], t);
    p.kernel(k.finish(), vec![]);
    p.finish()
}

pub const SLOTS: u64 = 4;

/// `cache[pos] = v`: writes row `pos` (an input scalar) of the state `cache: f32[4, width]`
/// from `v: f32[1, width]`, with a launch check on `pos` when `checked`.
pub fn cache_writer(width: Dim, checked: bool) -> Program {
    let mut p = ProgramBuilder::new();
    let pos = p.input("pos", TensorType::new(DType::I64, shape![1]));
    let v = p.input(
        "v",
        TensorType::new(
            DType::F32,
            tir_graph::Shape::new(vec![1.into(), width.clone()]).unwrap(),
        ),
    );
    let cache = p.state(
        "cache",
        TensorType::new(
            DType::F32,
            tir_graph::Shape::new(vec![SLOTS.into(), width.clone()]).unwrap(),
        ),
    );
    let mut k = KernelBuilder::new("k0_cache_write");
    let (pp, pv) = (k.shared(pos, DType::I64), k.shared(v, DType::F32));
    let region = Region::Slice {
        axis: 0,
        start: SliceStart::Param(pp),
        len: 1.into(),
    };
    let pc = k.mutable(cache, DType::F32, region);
    k.grid(|k| vec![k.index(1)]);
    let zero = k.index(0);
    let at = k.load_scalar(pp, zero);
    let w = match &width {
        Dim::Static(n) => k.index(*n as i64),
        Dim::Symbolic(s) => k.dim(s),
        Dim::Expr(e) => unreachable!("the width is a size or a symbol, not {e}"),
    };
    let (one, rows) = (k.index(1), k.index(1));
    let offset = k.arith(IndexOp::Mul, at, w);
    let vc = k.view(pc, offset, &[rows, w], &[w, one]);
    let vv = k.row_major_view(pv, &[rows, w]);
    let row = k.load(vv, &[zero, zero], 0.0, DType::F32, &[1, 8]);
    let t = k.token();
    k.store(vc, &[zero, zero], row, t);
    let checks = if checked {
        vec![LaunchCheck::SliceInBounds {
            offset_buffer: pos,
            len: 1.into(),
            size: SLOTS.into(),
            what: "the KV-cache slot of cache".into(),
        }]
    } else {
        vec![]
    };
    p.kernel(k.finish(), checks);
    p.finish()
}
