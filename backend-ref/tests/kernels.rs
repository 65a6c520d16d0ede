//! Hand-written tile kernels run by the reference backend and compared with exact values, the
//! f64 oracle, or an f64 loop.

mod common;

use backend_ref::RefBackend;
use common::programs::{matmul, row_softmax, vector_add, TILE};
use common::{random, sources, tensor, KernelBuilder, ProgramBuilder};
use std::time::Instant;
use tir_graph::eval::{evaluate, F64Tensor};
use tir_graph::{shape, BinaryOp, DType, GraphBuilder, TensorType};
use tir_lower::testing::RunF64;
use tir_lower::tile::{CmpOp, IndexOp, Region, TileOp, Type, ValueId};
use tir_lower::{Backend, BackendError};

#[test]
fn vector_add_over_a_symbolic_dim_masks_the_edge_tile() {
    let program = vector_add();
    for backend in [RefBackend::new(), RefBackend::checking()] {
        let mut exe = backend.compile(&program).unwrap();
        for n in [1000u64, 256, 1, 0] {
            let (x, y) = (random(DType::F32, &[n], 1), random(DType::F32, &[n], 2));
            let out = exe
                .run_f64(&sources(vec![("x", x.clone()), ("y", y.clone())]))
                .unwrap();
            let z = &out.outputs["z"];
            assert_eq!((z.dtype, &z.dims), (DType::F32, &vec![n]));
            let expected: Vec<f64> = x
                .data
                .iter()
                .zip(&y.data)
                .map(|(a, b)| f64::from((*a as f32) + (*b as f32)))
                .collect();
            assert_eq!(z.data, expected, "n = {n}");
        }
    }
}

#[test]
fn row_softmax_matches_the_oracle() {
    let program = row_softmax(100, 128);
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["rows", 100]).unwrap();
    g.output("out", &x.softmax(1).unwrap()).unwrap();
    let graph = g.finish().unwrap();
    let mut exe = RefBackend::checking().compile(&program).unwrap();
    for rows in [1u64, 7, 16] {
        let src = sources(vec![("x", random(DType::F16, &[rows, 100], rows))]);
        let got = &exe.run_f64(&src).unwrap().outputs["out"];
        let want = &evaluate(&graph, &src).unwrap().outputs["out"];
        assert_eq!(got.dims, want.dims);
        for (i, (g, w)) in got.data.iter().zip(&want.data).enumerate() {
            assert!((g - w).abs() <= 1e-2, "element {i}: {g} vs {w}");
        }
        // Every row sums to about 1.
        for row in got.data.chunks(100) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 2e-2);
        }
    }
}

#[test]
fn softmax_of_16_by_1024_is_fast() {
    let program = row_softmax(1000, 1024);
    let mut exe = RefBackend::new().compile(&program).unwrap();
    let src = sources(vec![("x", random(DType::F16, &[16, 1000], 3))]);
    let start = Instant::now();
    let out = exe.run_f64(&src).unwrap();
    let elapsed = start.elapsed();
    assert!(out.outputs["out"].data.iter().all(|v| v.is_finite()));
    eprintln!("softmax 16x1000 (tile 1024): {elapsed:?}");
}

/// The same product in sequential f32 fused multiply-adds, in f64, and the sum of the products'
/// magnitudes (which bounds the rounding error of an f32 sum in any order).
fn reference_matmul(
    a: &F64Tensor,
    b: &F64Tensor,
    m: usize,
    k: usize,
    n: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut fused = vec![0.0; m * n];
    let mut exact = vec![0.0; m * n];
    let mut magnitude = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut f, mut e, mut g) = (0f32, 0f64, 0f64);
            for p in 0..k {
                let (x, y) = (a.data[i * k + p], b.data[p * n + j]);
                f = (x as f32).mul_add(y as f32, f);
                e += x * y;
                g += (x * y).abs();
            }
            fused[i * n + j] = f64::from(f);
            exact[i * n + j] = e;
            magnitude[i * n + j] = g;
        }
    }
    (fused, exact, magnitude)
}

#[test]
fn matmul_with_a_k_loop_matches_an_f64_loop() {
    for (m, k, n) in [(70u64, 45u64, 33u64), (1, 1, 1), (32, 16, 32), (5, 100, 3)] {
        let program = matmul(m, k, n);
        let mut exe = RefBackend::checking().compile(&program).unwrap();
        let (a, b) = (
            random(DType::F16, &[m, k], 7),
            random(DType::F16, &[k, n], 8),
        );
        let out = exe
            .run_f64(&sources(vec![("a", a.clone()), ("b", b.clone())]))
            .unwrap();
        let c = &out.outputs["c"];
        let (fused, exact, magnitude) =
            reference_matmul(&a, &b, m as usize, k as usize, n as usize);
        // Products of f16 values are exact in f32, so two f32 sums of them in different orders
        // (with at most 2k roundings each) differ by at most 4k * 2^-24 * Σ|a b|.
        let f32_sum = 2.0 * (k as f64 + 1.0) * f64::from(f32::EPSILON);
        for ((g, f), (e, mag)) in c.data.iter().zip(&fused).zip(exact.iter().zip(&magnitude)) {
            assert!(g.is_finite(), "{m}x{k}x{n}: {g}");
            assert_eq!(
                *g,
                f64::from(*g as f32),
                "{m}x{k}x{n}: {g} is not an f32 value"
            );
            assert!(
                (g - f).abs() <= f32_sum * mag,
                "{m}x{k}x{n}: {g} vs f32 steps {f}"
            );
            assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{g} vs {e}");
        }
    }
}

#[test]
fn matmul_of_64_cubed_is_fast() {
    let program = matmul(64, 64, 64);
    let mut exe = RefBackend::checking().compile(&program).unwrap();
    let src = sources(vec![
        ("a", random(DType::F16, &[64, 64], 1)),
        ("b", random(DType::F16, &[64, 64], 2)),
    ]);
    let start = Instant::now();
    exe.run_f64(&src).unwrap();
    eprintln!("matmul 64x64x64: {:?}", start.elapsed());
}

/// Two kernels through an arena buffer: `t = x * 2` then `z = t + x`.
#[test]
fn kernels_pass_values_through_the_arena() {
    let mut p = ProgramBuilder::new();
    let ty = TensorType::new(DType::I32, shape!["n"]);
    let x = p.input("x", ty.clone());
    let t = p.arena("%1", ty.clone());
    let z = p.output("z", ty);
    for (name, ins, out, op) in [
        ("k0_double", [x, x], t, BinaryOp::Add),
        ("k1_add", [t, x], z, BinaryOp::Add),
    ] {
        let mut k = KernelBuilder::new(name);
        let (p0, p1) = (k.shared(ins[0], DType::I32), k.shared(ins[1], DType::I32));
        let po = k.mutable(out, DType::I32, Region::Whole);
        k.grid(|k| {
            let n = k.dim("n");
            vec![k.cdiv(n, 4)]
        });
        let i = k.pid(0);
        let n = k.dim("n");
        let (v0, v1, vo) = (
            k.row_major_view(p0, &[n]),
            k.row_major_view(p1, &[n]),
            k.row_major_view(po, &[n]),
        );
        let a = k.load(v0, &[i], 0.0, DType::I32, &[4]);
        let b = k.load(v1, &[i], 0.0, DType::I32, &[4]);
        let s = k.binary(op, a, b);
        let tok = k.token();
        k.store(vo, &[i], s, tok);
        p.kernel(k.finish(), vec![]);
    }
    let program = p.finish();
    let mut exe = RefBackend::checking().compile(&program).unwrap();
    let x = tensor(DType::I32, &[6], vec![1.0, -2.0, 3.0, 4.0, 5.0, 2e9]);
    let out = exe.run_f64(&sources(vec![("x", x)])).unwrap();
    // 2e9 * 3 wraps in i32.
    let wrapped = DType::I32.round_value(6e9);
    assert_eq!(
        out.outputs["z"].data,
        vec![3.0, -6.0, 9.0, 12.0, 15.0, wrapped]
    );

    // A memory plan whose live range misses a use is refused.
    let mut bad = program.clone();
    bad.plan.live[0].last = 0;
    let err = RefBackend::new().compile(&bad).err().unwrap();
    assert!(err.to_string().contains("memory plan"), "{err}");
}

/// A program reads back its own store to a mutable parameter (token-ordered): `z = 1` then
/// `z = z + 1`.
#[test]
fn a_program_reads_its_own_stores() {
    let mut p = ProgramBuilder::new();
    let z = p.output("z", TensorType::new(DType::F32, shape![8]));
    let mut k = KernelBuilder::new("k0_rmw");
    let pz = k.mutable(z, DType::F32, Region::Whole);
    k.grid(|k| vec![k.index(2)]);
    let i = k.pid(0);
    let eight = k.index(8);
    let vz = k.row_major_view(pz, &[eight]);
    let ones = k.constant(DType::F32, &[4], 1.0);
    let t0 = k.token();
    let t1 = k.store(vz, &[i], ones, t0);
    let (v, t2) = k.load_ordered(vz, &[i], DType::F32, &[4], t1);
    let v = k.binary(BinaryOp::Add, v, ones);
    k.store(vz, &[i], v, t2);
    p.kernel(k.finish(), vec![]);
    let mut exe = RefBackend::checking().compile(&p.finish()).unwrap();
    let out = exe.run_f64(&sources(vec![])).unwrap();
    assert_eq!(out.outputs["z"].data, vec![2.0; 8]);
}

/// Gathers `x[idx[t]]` with LoadIndexed; masked lanes and indices past the view give padding.
#[test]
fn load_indexed_pads_masked_and_out_of_range_lanes() {
    let mut p = ProgramBuilder::new();
    let x = p.input("x", TensorType::new(DType::F32, shape![5]));
    let idx = p.input("idx", TensorType::new(DType::I64, shape![4]));
    let z = p.output("z", TensorType::new(DType::F32, shape![4]));
    let mut k = KernelBuilder::new("k0_gather");
    let (px, pi) = (k.shared(x, DType::F32), k.shared(idx, DType::I64));
    let pz = k.mutable(z, DType::F32, Region::Whole);
    k.grid(|k| vec![k.index(1)]);
    let zero = k.index(0);
    let (five, four) = (k.index(5), k.index(4));
    let vx = k.row_major_view(px, &[five]);
    let vi = k.row_major_view(pi, &[four]);
    let vz = k.row_major_view(pz, &[four]);
    let ix = k.load(vi, &[zero], 0.0, DType::I64, &[4]);
    let lane = k.iota(&[4], 0);
    let three = k.index(3);
    let three = k.splat(three, DType::I64, &[4]);
    let mask = k.cmp(CmpOp::Lt, lane, three);
    let g = k.load_indexed(vx, &[ix], mask, -1.0, DType::F32);
    let t = k.token();
    k.store(vz, &[zero], g, t);
    p.kernel(k.finish(), vec![]);
    let mut exe = RefBackend::checking().compile(&p.finish()).unwrap();
    let x = tensor(DType::F32, &[5], vec![10.0, 11.0, 12.0, 13.0, 14.0]);
    let idx = tensor(DType::I64, &[4], vec![4.0, 7.0, 0.0, 1.0]);
    let out = exe.run_f64(&sources(vec![("x", x), ("idx", idx)])).unwrap();
    assert_eq!(out.outputs["z"].data, vec![14.0, -1.0, 10.0, -1.0]);
}

/// Malformed kernels give errors naming the kernel, never a panic.
#[test]
fn malformed_kernels_are_errors() {
    // A use of a value defined nowhere is refused at compile time.
    let mut program = vector_add();
    let body = &mut program.kernels[0].body.stmts;
    body.insert(
        0,
        tir_lower::tile::Stmt {
            defs: vec![(ValueId(900), Type::Index)],
            op: TileOp::IndexArith {
                op: IndexOp::Add,
                a: ValueId(901),
                b: ValueId(901),
            },
        },
    );
    match RefBackend::new().compile(&program).err() {
        Some(BackendError::Kernel { kernel, reason }) => {
            assert_eq!(kernel, "k0_add");
            assert!(reason.contains("%901"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // A declared type that the op does not compute is a run-time kernel error.
    let mut program = vector_add();
    for stmt in &mut program.kernels[0].body.stmts {
        if matches!(stmt.op, TileOp::Binary { .. }) {
            stmt.defs[0].1 = Type::tile(DType::F16, &[TILE]);
        }
    }
    let mut exe = RefBackend::new().compile(&program).unwrap();
    let src = sources(vec![
        ("x", random(DType::F32, &[10], 1)),
        ("y", random(DType::F32, &[10], 2)),
    ]);
    match exe.run_f64(&src).err() {
        Some(BackendError::Kernel { kernel, reason }) => {
            assert_eq!(kernel, "k0_add");
            assert!(reason.starts_with("program [0]: "), "{reason}");
            assert!(reason.contains("= add"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // A view past its buffer is a bounds error even without checking.
    let mut program = vector_add();
    for stmt in &mut program.kernels[0].body.stmts {
        if let TileOp::Index { value } = &mut stmt.op {
            if *value == 0 {
                *value = 5; // every view's offset
            }
        }
    }
    let mut exe = RefBackend::new().compile(&program).unwrap();
    let err = exe.run_f64(&src).err().unwrap();
    assert!(
        err.to_string().contains("outside buffer x of 10 elements"),
        "{err}"
    );
}
