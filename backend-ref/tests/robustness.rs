//! Whatever a kernel holds, the reference backend answers with a result or an error, never a
//! panic: valid programs are mutated at random (operands, declared types, constants, axes,
//! statements) and compiled and run with and without checking.

mod common;

use backend_ref::RefBackend;
use common::programs::{cache_writer, matmul, row_softmax, vector_add};
use common::{random, sources, tensor};
use proptest::prelude::*;
use std::collections::BTreeMap;
use tir_graph::eval::F64Tensor;
use tir_graph::DType;
use tir_lower::testing::RunF64;
use tir_lower::tile::{Block, Stmt, TileOp, Type, ValueId};
use tir_lower::{Backend, Program};

/// A program and sources it runs on.
fn case(which: u8) -> (Program, BTreeMap<String, F64Tensor>) {
    match which % 4 {
        0 => (
            vector_add(),
            sources(vec![
                ("x", random(DType::F32, &[300], 1)),
                ("y", random(DType::F32, &[300], 2)),
            ]),
        ),
        1 => (
            row_softmax(100, 128),
            sources(vec![("x", random(DType::F16, &[3, 100], 3))]),
        ),
        2 => (
            matmul(40, 20, 33),
            sources(vec![
                ("a", random(DType::F16, &[40, 20], 4)),
                ("b", random(DType::F16, &[20, 33], 5)),
            ]),
        ),
        _ => (
            cache_writer(8.into(), true),
            sources(vec![
                ("pos", tensor(DType::I64, &[1], vec![2.0])),
                ("v", random(DType::F32, &[1, 8], 6)),
            ]),
        ),
    }
}

/// The value ids `op` reads, mutably.
fn operands(op: &mut TileOp) -> Vec<&mut ValueId> {
    match op {
        TileOp::IndexArith { a, b, .. }
        | TileOp::IndexCmp { a, b, .. }
        | TileOp::Binary { a, b, .. } => vec![a, b],
        TileOp::LoadScalar { index, .. } => vec![index],
        TileOp::MakeView {
            offset,
            shape,
            strides,
            ..
        } => std::iter::once(offset)
            .chain(shape.iter_mut())
            .chain(strides.iter_mut())
            .collect(),
        TileOp::Load {
            view,
            coords,
            token,
            ..
        } => std::iter::once(view)
            .chain(coords.iter_mut())
            .chain(token.iter_mut())
            .collect(),
        TileOp::LoadIndexed {
            view,
            indices,
            mask,
            ..
        } => std::iter::once(view)
            .chain(indices.iter_mut())
            .chain([mask])
            .collect(),
        TileOp::Store {
            view,
            coords,
            value,
            token,
        } => std::iter::once(view)
            .chain(coords.iter_mut())
            .chain([value, token])
            .collect(),
        TileOp::ApproxExp { x, shift, .. } => vec![x, shift],
        TileOp::Splat { x }
        | TileOp::Unary { x, .. }
        | TileOp::Cast { x }
        | TileOp::Broadcast { x }
        | TileOp::Reshape { x }
        | TileOp::Permute { x, .. }
        | TileOp::Reduce { x, .. } => vec![x],
        TileOp::Select { cond, a, b } => vec![cond, a, b],
        TileOp::Mma { a, b, acc } => vec![a, b, acc],
        TileOp::For {
            start,
            end,
            step,
            init,
            yields,
            ..
        } => [start, end, step]
            .into_iter()
            .chain(init.iter_mut())
            .chain(yields.iter_mut())
            .collect(),
        _ => vec![],
    }
}

/// Applies `f` to block number `n` (in preorder, nested loop bodies included) of `block`, or to
/// `block` when there are fewer; `n` counts down the blocks visited.
fn with_block(block: &mut Block, n: &mut usize, f: &mut dyn FnMut(&mut Block)) -> bool {
    if *n == 0 {
        f(block);
        return true;
    }
    *n -= 1;
    for stmt in &mut block.stmts {
        if let TileOp::For { body, .. } = &mut stmt.op {
            if with_block(body, n, f) {
                return true;
            }
        }
    }
    false
}

fn random_type(r: u64) -> Type {
    let dtype = DType::ALL[(r % 9) as usize];
    match (r >> 8) % 6 {
        0 => Type::Index,
        1 => Type::Token,
        2 => Type::View {
            param: ((r >> 12) % 3) as usize,
            rank: ((r >> 16) % 3) as usize,
        },
        3 => Type::tile(dtype, &[]),
        4 => Type::tile(dtype, &[1, 1 << ((r >> 20) % 8)]),
        _ => Type::tile(dtype, &[1 << ((r >> 20) % 6)]),
    }
}

/// Applies mutation `kind` (chosen with the random bits `r`) to statement `s` of a block.
fn mutate(block: &mut Block, s: usize, kind: u8, r: u64) {
    let len = block.stmts.len();
    if len == 0 {
        return;
    }
    let s = s % len;
    let small = [-1i64, 0, 1, 2, 3, 7, 64, 100][(r % 8) as usize];
    let stmt: &mut Stmt = &mut block.stmts[s];
    match kind % 7 {
        0 => {
            let mut ops = operands(&mut stmt.op);
            if !ops.is_empty() {
                let i = (r as usize >> 4) % ops.len();
                *ops[i] = ValueId(((r >> 12) % 64) as u32);
            }
        }
        1 => {
            if !stmt.defs.is_empty() {
                let i = (r as usize >> 4) % stmt.defs.len();
                stmt.defs[i].1 = random_type(r >> 8);
            }
        }
        2 => match &mut stmt.op {
            TileOp::Index { value } => *value = small,
            TileOp::Constant { value } | TileOp::Load { padding: value, .. } => {
                *value = [f64::NAN, f64::INFINITY, -1e300, 0.5][(r % 4) as usize]
            }
            _ => {}
        },
        3 => match &mut stmt.op {
            TileOp::Reduce { axis, .. } | TileOp::Iota { axis } | TileOp::ProgramId { axis } => {
                *axis = (r % 4) as usize
            }
            TileOp::Permute { perm, .. } => perm.reverse(),
            TileOp::LoadScalar { param, .. } | TileOp::MakeView { param, .. } => {
                *param = (r % 4) as usize
            }
            TileOp::Dim { name } => *name = ["n", "rows", "d", "zz"][(r % 4) as usize].into(),
            _ => {}
        },
        4 => {
            block.stmts.remove(s);
        }
        5 => block.stmts.swap(s, (r as usize) % len),
        _ => {
            let copy = block.stmts[(r as usize) % len].clone();
            block.stmts.insert(s, copy);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn mutated_kernels_never_panic(
        which in 0u8..4,
        mutations in prop::collection::vec((any::<bool>(), any::<u16>(), 0u8..7, any::<u64>()), 1..4),
    ) {
        let (mut program, src) = case(which);
        for (in_grid, s, kind, r) in mutations {
            let kernel = &mut program.kernels[0];
            if in_grid {
                mutate(&mut kernel.grid_body, s as usize, kind, r);
            } else {
                let mut n = (r >> 40) as usize % 3;
                let mut f = |b: &mut Block| mutate(b, s as usize, kind, r);
                if !with_block(&mut kernel.body, &mut n, &mut f) {
                    mutate(&mut kernel.body, s as usize, kind, r);
                }
            }
        }
        let mut results = Vec::new();
        for backend in [RefBackend::new(), RefBackend::checking()] {
            if let Ok(mut exe) = backend.compile(&program) {
                match exe.run_f64(&src) {
                    Ok(out) => results.push(out.outputs),
                    Err(e) => prop_assert!(!e.to_string().contains('\n'), "{}", e),
                }
            }
        }
        // Checking changes what is reported, never what is computed.
        if let [plain, checked] = &results[..] {
            let bits = |o: &BTreeMap<String, F64Tensor>| -> Vec<(String, Vec<u64>, Vec<u64>)> {
                o.iter()
                    .map(|(n, t)| (n.clone(), t.dims.clone(), t.data.iter().map(|v| v.to_bits()).collect()))
                    .collect()
            };
            prop_assert_eq!(bits(plain), bits(checked));
        }
    }
}
