//! The tile IR printer: a hand-built kernel and program print exactly as the golden text says.

use tir_graph::{shape, BinaryOp, DType, ReduceOp, TensorType, UnaryOp};
use tir_lower::legality::Certificate;
use tir_lower::plan::{LiveRange, MemoryPlan};
use tir_lower::program::{print_program, verify_program};
use tir_lower::schedule::Schedule;
use tir_lower::tile::print::print_kernel;
use tir_lower::tile::{
    Access, Block, CmpOp, IndexOp, Region, SliceStart, Stmt, TensorParam, TileKernel, TileOp, Type,
    ValueId, WriteRegion,
};
use tir_lower::{Buffer, Program, Signature, Storage};

fn v(n: u32) -> ValueId {
    ValueId(n)
}

fn s(defs: &[(u32, Type)], op: TileOp) -> Stmt {
    Stmt {
        defs: defs.iter().map(|(n, t)| (v(*n), t.clone())).collect(),
        op,
    }
}

const IX: Type = Type::Index;

fn param(buffer: usize, dtype: DType, access: Access) -> TensorParam {
    TensorParam {
        buffer,
        dtype,
        access,
    }
}

/// Row sums of `x: f16[rows, 1024]` into `y: f32[rows, 1]`: each program takes one row, in
/// chunks of 256 columns, accumulating in f32; then `y = exp(-sum)` where `sum > 0`.
fn row_sum_kernel() -> TileKernel {
    use TileOp::*;
    let f32_row = Type::tile(DType::F32, &[1, 1]);
    TileKernel {
        name: "k0_row_sum".into(),
        params: vec![
            param(0, DType::F16, Access::Shared),
            param(1, DType::F32, Access::Mutable),
        ],
        writes: vec![WriteRegion {
            param: 1,
            region: Region::Whole,
        }],
        grid: vec![v(0)],
        grid_body: Block {
            stmts: vec![s(
                &[(0, IX)],
                Dim {
                    name: "rows".into(),
                },
            )],
        },
        body: Block {
            stmts: vec![
                s(&[(1, IX)], ProgramId { axis: 0 }),
                s(
                    &[(2, IX)],
                    Dim {
                        name: "rows".into(),
                    },
                ),
                s(&[(3, IX)], Index { value: 0 }),
                s(&[(4, IX)], Index { value: 1 }),
                s(&[(5, IX)], Index { value: 1024 }),
                s(&[(6, IX)], Index { value: 4 }),
                s(
                    &[(7, Type::View { param: 0, rank: 2 })],
                    MakeView {
                        param: 0,
                        offset: v(3),
                        shape: vec![v(2), v(5)],
                        strides: vec![v(5), v(4)],
                    },
                ),
                s(
                    &[(8, Type::View { param: 1, rank: 2 })],
                    MakeView {
                        param: 1,
                        offset: v(3),
                        shape: vec![v(2), v(4)],
                        strides: vec![v(4), v(4)],
                    },
                ),
                s(&[(9, Type::Token)], MakeToken),
                s(&[(10, f32_row.clone())], Constant { value: -0.0 }),
                s(
                    &[(11, f32_row.clone())],
                    For {
                        start: v(3),
                        end: v(6),
                        step: v(4),
                        var: v(12),
                        init: vec![v(10)],
                        carried: vec![(v(13), f32_row.clone())],
                        body: Block {
                            stmts: vec![
                                s(
                                    &[(14, Type::tile(DType::F16, &[1, 256]))],
                                    Load {
                                        view: v(7),
                                        coords: vec![v(1), v(12)],
                                        padding: 0.0,
                                        token: None,
                                    },
                                ),
                                s(
                                    &[(15, Type::tile(DType::F32, &[1, 256]))],
                                    Cast { x: v(14) },
                                ),
                                s(
                                    &[(16, f32_row.clone())],
                                    Reduce {
                                        op: ReduceOp::Sum,
                                        x: v(15),
                                        axis: 1,
                                    },
                                ),
                                s(
                                    &[(17, f32_row.clone())],
                                    Binary {
                                        op: BinaryOp::Add,
                                        a: v(13),
                                        b: v(16),
                                    },
                                ),
                            ],
                        },
                        yields: vec![v(17)],
                    },
                ),
                s(&[(18, f32_row.clone())], Constant { value: 0.0 }),
                s(
                    &[(19, Type::tile(DType::Bool, &[1, 1]))],
                    Binary {
                        op: BinaryOp::Gt,
                        a: v(11),
                        b: v(18),
                    },
                ),
                s(
                    &[(20, f32_row.clone())],
                    Unary {
                        op: UnaryOp::Neg,
                        x: v(11),
                    },
                ),
                s(
                    &[(21, f32_row.clone())],
                    Unary {
                        op: UnaryOp::Exp,
                        x: v(20),
                    },
                ),
                s(
                    &[(22, f32_row.clone())],
                    Select {
                        cond: v(19),
                        a: v(21),
                        b: v(18),
                    },
                ),
                s(
                    &[(23, IX)],
                    IndexArith {
                        op: IndexOp::Rem,
                        a: v(1),
                        b: v(2),
                    },
                ),
                s(
                    &[(24, Type::tile(DType::Bool, &[]))],
                    IndexCmp {
                        op: CmpOp::Lt,
                        a: v(23),
                        b: v(2),
                    },
                ),
                s(
                    &[(25, Type::Token)],
                    Store {
                        view: v(8),
                        coords: vec![v(1), v(3)],
                        value: v(22),
                        token: v(9),
                    },
                ),
            ],
        },
        library: None,
        flops: Default::default(),
    }
}

const KERNEL_GOLDEN: &str = "\
kernel k0_row_sum {
  param 0: buffer 0, f16, shared
  param 1: buffer 1, f32, mutable
  writes param 1: whole
  grid(%0) {
    %0 = dim rows : index
  }
  body {
    %1 = program_id 0 : index
    %2 = dim rows : index
    %3 = index 0 : index
    %4 = index 1 : index
    %5 = index 1024 : index
    %6 = index 4 : index
    %7 = make_view param 0 offset %3 shape [%2, %5] strides [%5, %4] : view<param 0, rank 2>
    %8 = make_view param 1 offset %3 shape [%2, %4] strides [%4, %4] : view<param 1, rank 2>
    %9 = make_token : token
    %10 = constant -0 : f32<1x1>
    %11 = for %12 = %3 to %6 step %4 iter(%13: f32<1x1> = %10) {
      %14 = load %7[%1, %12] pad 0 : f16<1x256>
      %15 = cast %14 : f32<1x256>
      %16 = reduce_sum %15 axis 1 : f32<1x1>
      %17 = add %13, %16 : f32<1x1>
      yield %17
    } : f32<1x1>
    %18 = constant 0 : f32<1x1>
    %19 = gt %11, %18 : bool<1x1>
    %20 = neg %11 : f32<1x1>
    %21 = exp %20 : f32<1x1>
    %22 = select %19, %21, %18 : f32<1x1>
    %23 = irem %1, %2 : index
    %24 = icmp lt %23, %2 : bool<>
    %25 = store %22 to %8[%1, %3] token %9 : token
  }
}
";

#[test]
fn a_kernel_prints_as_the_golden_text() {
    assert_eq!(print_kernel(&row_sum_kernel()), KERNEL_GOLDEN);
}

#[test]
fn token_loads_indexed_loads_and_slices_print() {
    use TileOp::*;
    let tile = Type::tile(DType::F16, &[2, 4]);
    let idx = Type::tile(DType::I64, &[2, 4]);
    let k = TileKernel {
        name: "k1_cache".into(),
        params: vec![
            param(0, DType::F16, Access::Mutable),
            param(1, DType::I64, Access::Shared),
        ],
        writes: vec![WriteRegion {
            param: 0,
            region: Region::Slice {
                axis: 1,
                start: SliceStart::Param(1),
                len: tir_graph::Dim::Static(1),
            },
        }],
        grid: vec![],
        grid_body: Block::default(),
        body: Block {
            stmts: vec![
                s(&[(0, Type::View { param: 0, rank: 0 })], {
                    MakeView {
                        param: 0,
                        offset: v(9),
                        shape: vec![],
                        strides: vec![],
                    }
                }),
                s(
                    &[(1, tile.clone()), (2, Type::Token)],
                    Load {
                        view: v(0),
                        coords: vec![v(3), v(4)],
                        padding: f64::NEG_INFINITY,
                        token: Some(v(5)),
                    },
                ),
                s(
                    &[(6, tile.clone())],
                    LoadIndexed {
                        view: v(0),
                        indices: vec![v(7), v(8)],
                        mask: v(10),
                        padding: 0.5,
                    },
                ),
                s(&[(7, idx.clone())], Iota { axis: 1 }),
                s(&[(8, idx)], Splat { x: v(9) }),
                s(
                    &[(9, IX)],
                    LoadScalar {
                        param: 1,
                        index: v(3),
                    },
                ),
                s(&[(11, Type::tile(DType::F16, &[4, 2]))], {
                    Permute {
                        x: v(1),
                        perm: vec![1, 0],
                    }
                }),
                s(&[(12, Type::tile(DType::F16, &[8]))], Reshape { x: v(11) }),
                s(&[(13, tile.clone())], Broadcast { x: v(1) }),
                s(
                    &[(14, Type::tile(DType::F32, &[2, 2]))],
                    Mma {
                        a: v(1),
                        b: v(11),
                        acc: v(15),
                    },
                ),
                s(
                    &[(16, Type::tile(DType::I64, &[2, 1]))],
                    Reduce {
                        op: ReduceOp::ArgMax,
                        x: v(1),
                        axis: 1,
                    },
                ),
                s(
                    &[],
                    For {
                        start: v(3),
                        end: v(3),
                        step: v(3),
                        var: v(17),
                        init: vec![],
                        carried: vec![],
                        body: Block::default(),
                        yields: vec![],
                    },
                ),
            ],
        },
        library: None,
        flops: Default::default(),
    };
    // Not a valid kernel (values are used before they are defined): the printer shows it anyway.
    let expected = "\
kernel k1_cache {
  param 0: buffer 0, f16, mutable
  param 1: buffer 1, i64, shared
  writes param 0: slice axis 1 start param 1 len 1
  grid() {
  }
  body {
    %0 = make_view param 0 offset %9 shape [] strides [] : view<param 0, rank 0>
    %1, %2 = load %0[%3, %4] pad -inf token %5 : f16<2x4>, token
    %6 = load_indexed %0[%7, %8] mask %10 pad 0.5 : f16<2x4>
    %7 = iota 1 : i64<2x4>
    %8 = splat %9 : i64<2x4>
    %9 = load_scalar param 1[%3] : index
    %11 = permute %1 [1, 0] : f16<4x2>
    %12 = reshape %11 : f16<8>
    %13 = broadcast %1 : f16<2x4>
    %14 = mma %1, %11, %15 : f32<2x2>
    %16 = argmax %1 axis 1 : i64<2x1>
    for %17 = %3 to %3 step %3 {
      yield
    }
  }
}
";
    assert_eq!(print_kernel(&k), expected);
}

#[test]
fn a_program_prints_buffers_kernels_plan_and_schedule() {
    let mut k0 = row_sum_kernel();
    let mut k1 = row_sum_kernel();
    k1.name = "k1_row_sum".into();
    k0.params[1].buffer = 1;
    k1.params[1].buffer = 2;
    let buffer = |name: &str, ty: TensorType, storage: Storage| Buffer {
        name: name.into(),
        ty,
        storage,
    };
    let p = Program {
        buffers: vec![
            buffer(
                "x",
                TensorType::new(DType::F16, shape!["rows", 1024]),
                Storage::Input("x".into()),
            ),
            buffer(
                "%3",
                TensorType::new(DType::F32, shape!["rows", 1]),
                Storage::Arena,
            ),
            buffer(
                "y",
                TensorType::new(DType::F32, shape!["rows", 1]),
                Storage::Output,
            ),
        ],
        certificates: vec![
            Certificate {
                kernel: "k0_row_sum".into(),
                facts: vec![],
                checks: vec![],
            },
            Certificate {
                kernel: "k1_row_sum".into(),
                facts: vec![],
                checks: vec![],
            },
        ],
        kernels: vec![k0, k1],
        plan: MemoryPlan {
            live: vec![LiveRange {
                buffer: 1,
                first: 0,
                last: 1,
            }],
        },
        schedule: Schedule::from_deps(vec![vec![], vec![0]]),
        signature: Signature {
            inputs: vec![(
                "x".into(),
                TensorType::new(DType::F16, shape!["rows", 1024]),
            )],
            outputs: vec![("y".into(), 2)],
            dims: vec!["rows".into()],
            ..Signature::default()
        },
    };
    assert_eq!(verify_program(&p), Ok(()));
    let text = print_program(&p);
    let head = "\
program: 3 buffers, 2 kernels
buffers {
  buffer 0 \"x\": f16[rows, 1024], input \"x\"
  buffer 1 \"%3\": f32[rows, 1], arena
  buffer 2 \"y\": f32[rows, 1], output
}
dims: rows
output \"y\" = buffer 2
kernel k0_row_sum {
";
    let tail = "\
memory plan {
  buffer 1 \"%3\": live in waves 0..=1
  arena peak: depends on the dims, laid out at each run
}
schedule {
  wave 0: 0 k0_row_sum
  wave 1: 1 k1_row_sum (after 0)
}
";
    assert!(text.starts_with(head), "{text}");
    assert!(text.ends_with(tail), "{text}");
    assert!(text.contains("\n}\nkernel k1_row_sum {\n  param 0: buffer 0, f16, shared\n  param 1: buffer 2, f32, mutable\n"));
    assert_eq!(text, print_program(&p), "printing is deterministic");
}
