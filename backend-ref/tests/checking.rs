//! Checking mode: ownership violations of a kernel are errors naming the kernel, the programs
//! and the element; without checking the same kernels run (bounds are still checked).

mod common;

use backend_ref::RefBackend;
use common::{random, sources, KernelBuilder, ProgramBuilder};
use tir_graph::{shape, DType, TensorType};
use tir_lower::testing::RunF64;
use tir_lower::tile::{Region, SliceStart};
use tir_lower::{Backend, BackendError, Program};

/// A kernel writing `z: f32[n]` in tiles of 4 with `programs` programs; each program stores
/// ones at tile `coord(pid)`.
fn writer(
    programs: i64,
    region: Option<Region>,
    coord: impl Fn(&mut KernelBuilder) -> tir_lower::tile::ValueId,
) -> Program {
    let mut p = ProgramBuilder::new();
    let z = p.output("z", TensorType::new(DType::F32, shape![8]));
    let mut k = KernelBuilder::new("k0_write");
    let pz = match region {
        Some(r) => k.mutable(z, DType::F32, r),
        None => k.mutable_undeclared(z, DType::F32),
    };
    k.grid(|k| vec![k.index(programs)]);
    let c = coord(&mut k);
    let eight = k.index(8);
    let vz = k.row_major_view(pz, &[eight]);
    let ones = k.constant(DType::F32, &[4], 1.0);
    let t = k.token();
    k.store(vz, &[c], ones, t);
    p.kernel(k.finish(), vec![]);
    p.finish()
}

fn kernel_error(program: &Program) -> (String, String) {
    let mut exe = RefBackend::checking().compile(program).unwrap();
    match exe.run_f64(&sources(vec![])) {
        Err(BackendError::Kernel { kernel, reason }) => (kernel, reason),
        other => panic!("expected a kernel error, got {other:?}"),
    }
}

#[test]
fn two_programs_writing_one_tile_are_caught() {
    let program = writer(2, Some(Region::Whole), |k| k.index(0));
    let (kernel, reason) = kernel_error(&program);
    assert_eq!(kernel, "k0_write");
    assert_eq!(
        reason,
        "programs [0] and [1] both write element 0 (index [0]) of buffer z"
    );
    // Without checking, the last program's store wins and nothing is reported.
    let mut exe = RefBackend::new().compile(&program).unwrap();
    exe.run_f64(&sources(vec![])).unwrap();
}

#[test]
fn an_unwritten_element_is_caught() {
    let program = writer(1, Some(Region::Whole), |k| k.pid(0));
    let (kernel, reason) = kernel_error(&program);
    assert_eq!(kernel, "k0_write");
    assert!(
        reason.starts_with("element [4] of z is never written"),
        "{reason}"
    );
    // Without checking, the unwritten elements keep their poison (NaN).
    let mut exe = RefBackend::new().compile(&program).unwrap();
    let out = exe.run_f64(&sources(vec![])).unwrap();
    assert!(out.outputs["z"].data[4..].iter().all(|v| v.is_nan()));
}

#[test]
fn a_store_outside_the_write_region_is_caught() {
    let region = Region::Slice {
        axis: 0,
        start: SliceStart::Static(0),
        len: 4.into(),
    };
    let program = writer(2, Some(region), |k| k.pid(0));
    let (kernel, reason) = kernel_error(&program);
    assert_eq!(kernel, "k0_write");
    assert_eq!(
        reason,
        "program [1] writes element 4 (index [4]) of buffer z, outside the kernel's write region \
         (0..4 along axis 0)"
    );

    let program = writer(2, None, |k| k.pid(0));
    let (_, reason) = kernel_error(&program);
    assert!(
        reason.contains("which the kernel does not declare it writes"),
        "{reason}"
    );
}

/// Program `i` reads tile `1 - i` of the mutable `z` before writing tile `i`: a race.
#[test]
fn reading_what_another_program_writes_is_caught() {
    let mut p = ProgramBuilder::new();
    let z = p.state("z", TensorType::new(DType::F32, shape![8]));
    let mut k = KernelBuilder::new("k0_race");
    let pz = k.mutable(z, DType::F32, Region::Whole);
    k.grid(|k| vec![k.index(2)]);
    let i = k.pid(0);
    let one = k.index(1);
    let other = k.arith(tir_lower::tile::IndexOp::Sub, one, i);
    let eight = k.index(8);
    let vz = k.row_major_view(pz, &[eight]);
    let t0 = k.token();
    let (v, t1) = k.load_ordered(vz, &[other], DType::F32, &[4], t0);
    k.store(vz, &[i], v, t1);
    p.kernel(k.finish(), vec![]);
    let (kernel, reason) = kernel_error(&p.finish());
    assert_eq!(kernel, "k0_race");
    assert!(
        reason.starts_with(
            "program [0] reads element 4 (index [4]) of buffer z, which program [1] writes"
        ),
        "{reason}"
    );
}

/// The vector add of `kernels.rs` with a grid one program short, caught for a symbolic size.
#[test]
fn a_short_grid_over_a_symbolic_dim_is_caught() {
    let mut p = ProgramBuilder::new();
    let ty = TensorType::new(DType::F32, shape!["n"]);
    let x = p.input("x", ty.clone());
    let z = p.output("z", ty);
    let mut k = KernelBuilder::new("k0_copy");
    let px = k.shared(x, DType::F32);
    let pz = k.mutable(z, DType::F32, Region::Whole);
    k.grid(|k| {
        let n = k.dim("n");
        let tile = k.index(256);
        vec![k.arith(tir_lower::tile::IndexOp::Div, n, tile)]
    });
    let i = k.pid(0);
    let n = k.dim("n");
    let (vx, vz) = (k.row_major_view(px, &[n]), k.row_major_view(pz, &[n]));
    let v = k.load(vx, &[i], 0.0, DType::F32, &[256]);
    let t = k.token();
    k.store(vz, &[i], v, t);
    p.kernel(k.finish(), vec![]);
    let program = p.finish();
    let mut exe = RefBackend::checking().compile(&program).unwrap();
    // 512 is covered exactly; 1000 leaves 768..1000 unwritten.
    exe.run_f64(&sources(vec![("x", random(DType::F32, &[512], 1))]))
        .unwrap();
    let err = exe
        .run_f64(&sources(vec![("x", random(DType::F32, &[1000], 1))]))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "kernel k0_copy: element [768] of z is never written (the kernel's write region is the \
         whole buffer, its grid [3])"
    );
}
