//! The tile IR verifier: a valid kernel and program pass, and each rule, broken once, is refused
//! with a one-line message naming the kernel, the statement and what is wrong.

use tir_graph::{shape, BinaryOp, DType, ReduceOp, TensorType, UnaryOp};
use tir_lower::legality::Certificate;
use tir_lower::plan::MemoryPlan;
use tir_lower::program::verify_program;
use tir_lower::schedule::Schedule;
use tir_lower::tile::verify::{verify_kernel, TileError};
use tir_lower::tile::{
    Access, Block, CmpOp, IndexOp, Region, Stmt, TensorParam, TileKernel, TileOp, Type, ValueId,
    WriteRegion,
};
use tir_lower::{Buffer, Program, Signature, Storage};

fn v(n: u32) -> ValueId {
    ValueId(n)
}

fn vs(ns: &[u32]) -> Vec<ValueId> {
    ns.iter().map(|&n| v(n)).collect()
}

fn s(defs: &[(u32, Type)], op: TileOp) -> Stmt {
    Stmt {
        defs: defs.iter().map(|(n, t)| (v(*n), t.clone())).collect(),
        op,
    }
}

fn tile(dtype: DType, shape: &[u64]) -> Type {
    Type::tile(dtype, shape)
}

const IX: Type = Type::Index;

fn index(n: u32, value: i64) -> Stmt {
    s(&[(n, IX)], TileOp::Index { value })
}

fn dim(n: u32, name: &str) -> Stmt {
    s(&[(n, IX)], TileOp::Dim { name: name.into() })
}

fn arith(n: u32, op: IndexOp, a: u32, b: u32) -> Stmt {
    s(
        &[(n, IX)],
        TileOp::IndexArith {
            op,
            a: v(a),
            b: v(b),
        },
    )
}

fn view(n: u32, param: usize, shape: &[u32], strides: &[u32]) -> Stmt {
    s(
        &[(
            n,
            Type::View {
                param,
                rank: shape.len(),
            },
        )],
        TileOp::MakeView {
            param,
            offset: v(14),
            shape: vs(shape),
            strides: vs(strides),
        },
    )
}

fn load(defs: &[(u32, Type)], view: u32, coords: &[u32], token: Option<u32>) -> Stmt {
    s(
        defs,
        TileOp::Load {
            view: v(view),
            coords: vs(coords),
            padding: 0.0,
            token: token.map(v),
        },
    )
}

/// A kernel that uses every op: `y = select(iota >= 0, exp(m - max(m)), y)` with
/// `m = x[16 rows] @ w` (a K loop of two steps), a permute/reshape round trip, a scalar load and
/// a gathered load.
fn valid_kernel() -> TileKernel {
    use TileOp::*;
    let f16 = DType::F16;
    let body = vec![
        s(&[(10, IX)], ProgramId { axis: 0 }),
        dim(11, "rows"),
        index(12, 64),
        index(13, 1),
        index(14, 0),
        view(15, 0, &[11, 12], &[12, 13]),
        view(16, 1, &[12, 12], &[12, 13]),
        view(17, 2, &[11, 12], &[12, 13]),
        s(&[(18, Type::Token)], MakeToken),
        s(
            &[(19, tile(DType::F32, &[16, 64]))],
            Constant { value: 0.0 },
        ),
        index(20, 2),
        s(
            &[(21, tile(DType::F32, &[16, 64]))],
            For {
                start: v(14),
                end: v(20),
                step: v(13),
                var: v(22),
                init: vs(&[19]),
                carried: vec![(v(23), tile(DType::F32, &[16, 64]))],
                body: Block {
                    stmts: vec![
                        load(&[(24, tile(f16, &[16, 32]))], 15, &[10, 22], None),
                        load(&[(25, tile(f16, &[32, 64]))], 16, &[22, 14], None),
                        s(
                            &[(26, tile(DType::F32, &[16, 64]))],
                            Mma {
                                a: v(24),
                                b: v(25),
                                acc: v(23),
                            },
                        ),
                    ],
                },
                yields: vs(&[26]),
            },
        ),
        s(&[(27, tile(f16, &[16, 64]))], Cast { x: v(21) }),
        s(
            &[(28, tile(f16, &[16, 1]))],
            Reduce {
                op: ReduceOp::Max,
                x: v(27),
                axis: 1,
            },
        ),
        s(&[(29, tile(f16, &[16, 64]))], Broadcast { x: v(28) }),
        s(
            &[(30, tile(f16, &[16, 64]))],
            Binary {
                op: BinaryOp::Sub,
                a: v(27),
                b: v(29),
            },
        ),
        s(
            &[(31, tile(f16, &[16, 64]))],
            Unary {
                op: UnaryOp::Exp,
                x: v(30),
            },
        ),
        load(
            &[(32, tile(f16, &[16, 64])), (33, Type::Token)],
            17,
            &[10, 14],
            Some(18),
        ),
        s(&[(34, tile(DType::I64, &[16, 64]))], Iota { axis: 1 }),
        s(&[(35, tile(DType::I64, &[16, 64]))], Splat { x: v(14) }),
        s(
            &[(36, tile(DType::Bool, &[16, 64]))],
            IndexCmp {
                op: CmpOp::Ge,
                a: v(34),
                b: v(35),
            },
        ),
        s(
            &[(37, tile(f16, &[16, 64]))],
            Select {
                cond: v(36),
                a: v(31),
                b: v(32),
            },
        ),
        s(
            &[(38, tile(f16, &[64, 16]))],
            Permute {
                x: v(37),
                perm: vec![1, 0],
            },
        ),
        s(&[(39, tile(f16, &[16, 64]))], Reshape { x: v(38) }),
        s(
            &[(40, Type::Token)],
            Store {
                view: v(17),
                coords: vs(&[10, 14]),
                value: v(39),
                token: v(33),
            },
        ),
        s(
            &[(41, IX)],
            LoadScalar {
                param: 3,
                index: v(14),
            },
        ),
        s(
            &[(42, tile(f16, &[16, 64]))],
            LoadIndexed {
                view: v(15),
                indices: vs(&[35, 34]),
                mask: v(36),
                padding: 0.0,
            },
        ),
        s(
            &[(43, tile(DType::I64, &[16, 1]))],
            Reduce {
                op: ReduceOp::ArgMax,
                x: v(42),
                axis: 1,
            },
        ),
    ];
    TileKernel {
        name: "k0_matmul".into(),
        params: vec![
            TensorParam {
                buffer: 0,
                dtype: f16,
                access: Access::Shared,
            },
            TensorParam {
                buffer: 1,
                dtype: f16,
                access: Access::Shared,
            },
            TensorParam {
                buffer: 2,
                dtype: f16,
                access: Access::Mutable,
            },
            TensorParam {
                buffer: 3,
                dtype: DType::I64,
                access: Access::Shared,
            },
        ],
        writes: vec![WriteRegion {
            param: 2,
            region: Region::Whole,
        }],
        grid: vs(&[4]),
        grid_body: Block {
            stmts: vec![
                dim(0, "rows"),
                index(1, 16),
                index(2, 15),
                arith(3, IndexOp::Add, 0, 2),
                arith(4, IndexOp::Div, 3, 1),
            ],
        },
        body: Block { stmts: body },
        library: None,
        flops: Default::default(),
    }
}

fn valid_program() -> Program {
    let kernel = valid_kernel();
    let buffer = |name: &str, ty: TensorType, storage: Storage| Buffer {
        name: name.into(),
        ty,
        storage,
    };
    Program {
        buffers: vec![
            buffer(
                "x",
                TensorType::new(DType::F16, shape!["rows", 64]),
                Storage::Input("x".into()),
            ),
            buffer(
                "w",
                TensorType::new(DType::F16, shape![64, 64]),
                Storage::Parameter("w".into()),
            ),
            buffer(
                "y",
                TensorType::new(DType::F16, shape!["rows", 64]),
                Storage::Output,
            ),
            buffer(
                "pos",
                TensorType::new(DType::I64, shape![1]),
                Storage::Input("pos".into()),
            ),
        ],
        certificates: vec![Certificate {
            kernel: kernel.name.clone(),
            facts: vec!["each program writes its own 16 rows".into()],
            checks: vec![],
        }],
        kernels: vec![kernel],
        plan: MemoryPlan::default(),
        schedule: Schedule::from_deps(vec![vec![]]),
        signature: Signature {
            outputs: vec![("y".into(), 2)],
            dims: vec!["rows".into()],
            ..Signature::default()
        },
    }
}

/// The statement defining `%n`, wherever it is.
fn def_of(k: &mut TileKernel, n: u32) -> &mut Stmt {
    fn find(block: &mut Block, n: u32) -> Option<&mut Stmt> {
        for stmt in &mut block.stmts {
            if stmt.defs.iter().any(|(d, _)| d.0 == n) {
                return Some(stmt);
            }
            if let TileOp::For { body, .. } = &mut stmt.op {
                if let Some(s) = find(body, n) {
                    return Some(s);
                }
            }
        }
        None
    }
    if let Some(s) = find(&mut k.grid_body, n) {
        return s;
    }
    find(&mut k.body, n).expect("the value is defined")
}

/// The for loop's body.
fn loop_body(k: &mut TileKernel) -> &mut Vec<Stmt> {
    match &mut def_of(k, 21).op {
        TileOp::For { body, .. } => &mut body.stmts,
        _ => unreachable!(),
    }
}

/// `break_it` makes the valid kernel invalid; the error message must contain every needle.
fn refused(break_it: impl FnOnce(&mut TileKernel), needles: &[&str]) -> TileError {
    let mut k = valid_kernel();
    break_it(&mut k);
    let err = verify_kernel(&k).expect_err("the broken kernel is refused");
    let msg = err.to_string();
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert!(msg.starts_with("kernel k0_matmul: "), "{msg}");
    for needle in needles {
        assert!(msg.contains(needle), "`{needle}` not in: {msg}");
    }
    err
}

fn program_refused(break_it: impl FnOnce(&mut Program), needle: &str) {
    let mut p = valid_program();
    break_it(&mut p);
    let msg = verify_program(&p).expect_err("refused").to_string();
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert!(msg.contains(needle), "`{needle}` not in: {msg}");
}

fn body_pos(k: &TileKernel, n: u32) -> usize {
    k.body
        .stmts
        .iter()
        .position(|s| s.defs.iter().any(|(d, _)| d.0 == n))
        .unwrap()
}

#[test]
fn a_valid_kernel_and_program_pass() {
    assert_eq!(verify_kernel(&valid_kernel()), Ok(()));
    assert_eq!(verify_program(&valid_program()), Ok(()));
}

// ---- SSA ----

#[test]
fn a_value_defined_twice_is_refused() {
    let err = refused(
        |k| def_of(k, 13).defs[0].0 = v(12),
        &["%12 (index)", "%12 is defined twice"],
    );
    assert!(matches!(err, TileError::Redefined { .. }));
    // Also across the grid and the body.
    refused(|k| def_of(k, 10).defs[0].0 = v(0), &["%0 is defined twice"]);
}

#[test]
fn a_use_before_its_definition_is_refused() {
    let err = refused(
        |k| {
            let pos = body_pos(k, 27);
            let cast = k.body.stmts.remove(pos);
            k.body.stmts.insert(0, cast);
        },
        &["%27 (cast)", "uses %21", "not defined before it"],
    );
    assert!(matches!(err, TileError::Undefined { .. }));
}

#[test]
fn loop_values_are_not_visible_after_the_loop() {
    // The loop variable and carried value live in the body only.
    refused(
        |k| {
            if let TileOp::Cast { x } = &mut def_of(k, 27).op {
                *x = v(23);
            }
        },
        &["%27 (cast)", "uses %23"],
    );
    refused(
        |k| {
            if let TileOp::Store { coords, .. } = &mut def_of(k, 40).op {
                coords[1] = v(22);
            }
        },
        &["%40 (store)", "uses %22"],
    );
    // A value of the body is not visible after it either.
    refused(
        |k| {
            if let TileOp::Cast { x } = &mut def_of(k, 27).op {
                *x = v(26);
            }
        },
        &["uses %26"],
    );
}

#[test]
fn the_body_does_not_see_grid_values() {
    refused(
        |k| {
            if let TileOp::MakeView { offset, .. } = &mut def_of(k, 15).op {
                *offset = v(1);
            }
        },
        &["%15 (make_view)", "uses %1"],
    );
}

// ---- operand and result types ----

#[test]
fn index_arith_needs_matching_operands() {
    refused(
        |k| {
            k.body.stmts.push(arith(50, IndexOp::Add, 13, 34));
        },
        &["%50 (iadd)", "operands %13: index and %34: i64<16x64>"],
    );
}

#[test]
fn binary_operands_need_one_shape() {
    refused(
        |k| {
            if let TileOp::Binary { b, .. } = &mut def_of(k, 30).op {
                *b = v(28);
            }
        },
        &["%30 (sub)", "f16<16x64>", "f16<16x1>", "differ"],
    );
}

#[test]
fn binary_and_unary_follow_the_graph_dtype_rules() {
    refused(
        |k| {
            k.body.stmts.push(s(
                &[(50, tile(DType::I64, &[16, 64]))],
                TileOp::Unary {
                    op: UnaryOp::Exp,
                    x: v(34),
                },
            ))
        },
        &["%50 (exp)", "exp does not take i64 tiles"],
    );
    // The approximate exp is for f32 only.
    refused(
        |k| {
            k.body.stmts.push(s(
                &[(50, tile(DType::F16, &[16, 64]))],
                TileOp::ApproxExp {
                    x: v(27),
                    shift: v(27),
                    factor: 1.0,
                },
            ))
        },
        &["%50 (approx_exp)", "approx_exp takes f32 tiles, not f16"],
    );
    // A comparison defines bool.
    refused(
        |k| {
            if let TileOp::Binary { op, .. } = &mut def_of(k, 30).op {
                *op = BinaryOp::Lt;
            }
        },
        &["%30 (lt)", "defines f16<16x64>, expected bool<16x64>"],
    );
}

#[test]
fn select_needs_a_bool_condition() {
    refused(
        |k| {
            if let TileOp::Select { cond, .. } = &mut def_of(k, 37).op {
                *cond = v(34);
            }
        },
        &["%37 (select)", "bool condition"],
    );
}

#[test]
fn broadcast_grows_only_size_one_dims() {
    refused(
        |k| {
            k.body.stmts.push(s(
                &[(50, tile(DType::F16, &[16, 64]))],
                TileOp::Broadcast { x: v(38) },
            ))
        },
        &[
            "%50 (broadcast)",
            "cannot broadcast %38: f16<64x16> to f16<16x64>",
        ],
    );
}

#[test]
fn reshape_keeps_the_element_count() {
    refused(
        |k| def_of(k, 39).defs[0].1 = tile(DType::F16, &[16, 32]),
        &["%39 (reshape)", "element count"],
    );
}

#[test]
fn permute_needs_a_permutation() {
    refused(
        |k| {
            if let TileOp::Permute { perm, .. } = &mut def_of(k, 38).op {
                *perm = vec![1, 1];
            }
        },
        &[
            "%38 (permute)",
            "[1, 1] is not a permutation of the 2 axes of %37",
        ],
    );
}

#[test]
fn reduce_axis_in_range_kept_as_one_and_argmax_gives_i64() {
    refused(
        |k| {
            if let TileOp::Reduce { axis, .. } = &mut def_of(k, 28).op {
                *axis = 2;
            }
        },
        &["%28 (reduce_max)", "axis 2 is out of range"],
    );
    refused(
        |k| def_of(k, 28).defs[0].1 = tile(DType::F16, &[16]),
        &["%28 (reduce_max)", "defines f16<16>, expected f16<16x1>"],
    );
    refused(
        |k| def_of(k, 43).defs[0].1 = tile(DType::F16, &[16, 1]),
        &["%43 (argmax)", "expected i64<16x1>"],
    );
}

#[test]
fn mma_shapes_and_accumulator_are_checked() {
    // k differs: [16, 32] x [16, 64].
    refused(
        |k| loop_body(k)[1].defs[0].1 = tile(DType::F16, &[16, 64]),
        &["%26 (mma)", "%24: f16<16x32>, %25: f16<16x64>"],
    );
    // An f16 accumulator.
    refused(
        |k| {
            def_of(k, 19).defs[0].1 = tile(DType::F16, &[16, 64]);
            def_of(k, 21).defs[0].1 = tile(DType::F16, &[16, 64]);
            if let TileOp::For { carried, .. } = &mut def_of(k, 21).op {
                carried[0].1 = tile(DType::F16, &[16, 64]);
            }
        },
        &["%26 (mma)", "f32 for 16/32-bit floats"],
    );
}

#[test]
fn for_types_must_agree() {
    refused(
        |k| {
            if let TileOp::For { init, .. } = &mut def_of(k, 21).op {
                init[0] = v(13);
            }
        },
        &[
            "%21 (for)",
            "initial value %13 is index, but carried %23 is f32<16x64>",
        ],
    );
    refused(
        |k| {
            if let TileOp::For { yields, .. } = &mut def_of(k, 21).op {
                yields[0] = v(24);
            }
        },
        &[
            "%21 (for)",
            "yields %24 of f16<16x32> for carried %23 of f32<16x64>",
        ],
    );
    refused(
        |k| {
            if let TileOp::For { step, .. } = &mut def_of(k, 21).op {
                *step = v(19);
            }
        },
        &["%21 (for)", "step %19 is f32<16x64>, expected index"],
    );
}

#[test]
fn load_coords_view_rank_and_tile_rank_agree() {
    refused(
        |k| {
            if let TileOp::Load { coords, .. } = &mut loop_body(k)[0].op {
                coords.pop();
            }
        },
        &["%24 (load)", "1 coordinates for a view of rank 2"],
    );
    refused(
        |k| loop_body(k)[0].defs[0].1 = tile(DType::F16, &[512]),
        &["%24 (load)", "loads f16<512> through a view of rank 2"],
    );
    refused(
        |k| loop_body(k)[0].defs[0].1 = tile(DType::F32, &[16, 32]),
        &["%24 (load)", "of a f16 param"],
    );
}

#[test]
fn load_indexed_needs_i64_indices_of_the_result_shape_and_a_bool_mask() {
    refused(
        |k| {
            if let TileOp::LoadIndexed { indices, .. } = &mut def_of(k, 42).op {
                indices.pop();
            }
        },
        &["%42 (load_indexed)", "1 index tiles for a view of rank 2"],
    );
    refused(
        |k| {
            if let TileOp::LoadIndexed { indices, .. } = &mut def_of(k, 42).op {
                indices[0] = v(31);
            }
        },
        &[
            "%42 (load_indexed)",
            "index %31 is f16<16x64>, expected i64<16x64>",
        ],
    );
    refused(
        |k| {
            if let TileOp::LoadIndexed { mask, .. } = &mut def_of(k, 42).op {
                *mask = v(34);
            }
        },
        &[
            "%42 (load_indexed)",
            "mask %34 is i64<16x64>, expected bool<16x64>",
        ],
    );
}

#[test]
fn store_value_rank_is_the_view_rank() {
    refused(
        |k| {
            k.body.stmts.insert(
                body_pos(k, 40),
                s(
                    &[(50, tile(DType::F16, &[1024]))],
                    TileOp::Reshape { x: v(39) },
                ),
            );
            if let TileOp::Store { value, .. } = &mut def_of(k, 40).op {
                *value = v(50);
            }
        },
        &["%40 (store)", "stores f16<1024> through a view of rank 2"],
    );
}

#[test]
fn tile_dims_are_powers_of_two() {
    let err = refused(
        |k| {
            def_of(k, 19).defs[0].1 = tile(DType::F32, &[16, 48]);
        },
        &[
            "%19 (constant)",
            "tile dim 48 of f32<16x48> is not a power of two",
        ],
    );
    assert!(matches!(err, TileError::NotPowerOfTwo { .. }));
}

// ---- parameters, views and tokens ----

#[test]
fn referenced_params_exist() {
    let err = refused(
        |k| {
            if let TileOp::MakeView { param, .. } = &mut def_of(k, 16).op {
                *param = 9;
            }
            def_of(k, 16).defs[0].1 = Type::View { param: 9, rank: 2 };
        },
        &[
            "%16 (make_view)",
            "parameter 9 does not exist (the kernel has 4)",
        ],
    );
    assert!(matches!(err, TileError::UnknownParam { .. }));
}

#[test]
fn make_view_takes_index_scalars_with_one_stride_per_dim() {
    refused(
        |k| {
            let c = s(
                &[(50, tile(DType::F32, &[2]))],
                TileOp::Constant { value: 1.0 },
            );
            k.body.stmts.insert(0, c);
            if let TileOp::MakeView { shape, .. } = &mut def_of(k, 15).op {
                shape[0] = v(50);
            }
        },
        &["%15 (make_view)", "shape %50 is f32<2>, expected index"],
    );
    refused(
        |k| {
            if let TileOp::MakeView { strides, .. } = &mut def_of(k, 15).op {
                strides.pop();
            }
        },
        &["%15 (make_view)", "2 shape values but 1 strides"],
    );
    refused(
        |k| def_of(k, 15).defs[0].1 = Type::View { param: 0, rank: 3 },
        &[
            "%15 (make_view)",
            "defines view<param 0, rank 3>, expected view<param 0, rank 2>",
        ],
    );
}

#[test]
fn stores_go_to_mutable_params_only() {
    let err = refused(
        |k| {
            if let TileOp::Store { view, .. } = &mut def_of(k, 40).op {
                *view = v(15);
            }
        },
        &["%40 (store)", "stores to param 0, which is shared"],
    );
    assert!(matches!(err, TileError::Access { .. }));
}

#[test]
fn stores_need_a_token() {
    refused(
        |k| {
            if let TileOp::Store { token, .. } = &mut def_of(k, 40).op {
                *token = v(13);
            }
        },
        &["%40 (store)", "token %13 is index, expected token"],
    );
}

#[test]
fn mutable_loads_carry_a_token_and_shared_loads_none() {
    refused(
        |k| {
            let stmt = def_of(k, 32);
            if let TileOp::Load { token, .. } = &mut stmt.op {
                *token = None;
            }
        },
        &["%32 (load)", "loads mutable param 2 without a token"],
    );
    refused(
        |k| {
            if let TileOp::Load { token, .. } = &mut loop_body(k)[0].op {
                *token = Some(v(18));
            }
        },
        &["%24 (load)", "loads shared param 0 with a token"],
    );
    // A token-carrying load defines its next token.
    refused(
        |k| def_of(k, 32).defs.truncate(1),
        &["%32 (load)", "defines 1 values, expected 2"],
    );
}

#[test]
fn load_scalar_and_load_indexed_read_shared_params_only() {
    refused(
        |k| {
            if let TileOp::LoadScalar { param, .. } = &mut def_of(k, 41).op {
                *param = 2;
            }
        },
        &["%41 (load_scalar)", "param 2, which is mutable"],
    );
    refused(
        |k| {
            if let TileOp::LoadIndexed { view, .. } = &mut def_of(k, 42).op {
                *view = v(17);
            }
        },
        &["%42 (load_indexed)", "reads mutable param 2"],
    );
}

// ---- grid and writes ----

#[test]
fn grid_body_holds_only_dims_and_index_arithmetic() {
    let err = refused(
        |k| {
            k.grid_body
                .stmts
                .push(s(&[(5, IX)], TileOp::ProgramId { axis: 0 }));
        },
        &["grid: %5 (program_id) is not allowed in grid_body"],
    );
    assert!(matches!(err, TileError::Grid { .. }));
}

#[test]
fn grid_values_are_defined_by_grid_body() {
    refused(
        |k| k.grid = vs(&[10]),
        &["grid: axis 0 is %10, which grid_body does not define"],
    );
    refused(
        |k| {
            if let TileOp::ProgramId { axis } = &mut def_of(k, 10).op {
                *axis = 1;
            }
        },
        &[
            "%10 (program_id)",
            "grid axis 1 does not exist (the grid has 1)",
        ],
    );
}

#[test]
fn every_mutable_param_is_written_exactly_once() {
    let err = refused(
        |k| k.writes.clear(),
        &["writes: mutable param 2 is not listed"],
    );
    assert!(matches!(err, TileError::Writes { .. }));
    refused(
        |k| k.writes.push(k.writes[0].clone()),
        &["writes: param 2 is listed twice"],
    );
    refused(
        |k| {
            k.writes.push(WriteRegion {
                param: 1,
                region: Region::Whole,
            })
        },
        &["writes: param 1 is shared, not mutable"],
    );
    refused(
        |k| {
            k.writes.push(WriteRegion {
                param: 7,
                region: Region::Whole,
            })
        },
        &["writes: param 7 does not exist"],
    );
}

// ---- program ----

#[test]
fn program_buffer_indices_are_in_range() {
    program_refused(
        |p| p.kernels[0].params[1].buffer = 9,
        "kernel k0_matmul: param 1 names buffer 9, but the program has 4 buffers",
    );
    program_refused(
        |p| p.signature.outputs[0].1 = 4,
        "output \"y\" names buffer 4",
    );
}

#[test]
fn program_param_dtypes_match_their_buffers() {
    program_refused(
        |p| p.buffers[1].ty.dtype = DType::F32,
        "param 1 is f16 but its buffer 1 \"w\" is f32[64, 64]",
    );
}

#[test]
fn program_has_one_certificate_per_kernel() {
    program_refused(|p| p.certificates.clear(), "0 certificates for 1 kernels");
}

#[test]
fn program_schedule_deps_name_earlier_kernels() {
    program_refused(
        |p| p.schedule.deps[0] = vec![0],
        "the schedule makes kernel 0 (k0_matmul) wait for kernel 0, which is not earlier",
    );
    program_refused(
        |p| p.schedule.deps.push(vec![]),
        "the schedule has 2 dependency lists for 1 kernels",
    );
}

#[test]
fn program_checks_each_kernel() {
    program_refused(
        |p| p.kernels[0].writes.clear(),
        "kernel k0_matmul: writes: mutable param 2 is not listed",
    );
}
