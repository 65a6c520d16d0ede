//! Users' kernels that update a state in place, and unsafe kernels, on the reference backend:
//! a safe in-place accumulator proven and matching the oracle across runs (ordered after a
//! reader of the state's old value), a safe in-place kernel reading another program's tile
//! refused, the paged KV-cache append (unsafe) against the oracle across page boundaries, and
//! checking mode catching an unsafe kernel's double writes; a safe kernel writing a slice of its
//! state at a run-time position (the rotary embedding into a key cache) proven, checked at
//! launch, and matching the oracle.

mod common;

use backend_ref::RefBackend;
use common::{random, sources, tensor};
use std::collections::BTreeMap;
use tir_graph::eval::F64Tensor;
use tir_graph::{shape, CustomKernel, DType, Dim, Graph, GraphBuilder};
use tir_lower::custom::paged_kv::{paged_append, PagedLayout, CONTRACT};
use tir_lower::custom::rope::rope_into_cache;
use tir_lower::custom::KernelDef;
use tir_lower::testing::RunF64;
use tir_lower::tile::IndexOp;
use tir_lower::{Backend, BackendError, LowerError};

fn compile(graph: &Graph) -> Result<tir_lower::Compiled, LowerError> {
    let backend = RefBackend::checking();
    tir_lower::compile_graph(graph, &backend.target(), &tir_opt::Limits::default())
}

/// `acc += x` in place, rows of 8 per program; `shift` makes program `p` read (and so claim)
/// row `p + shift` of the state instead of its own.
fn accumulate(shift: i64) -> CustomKernel {
    let g = GraphBuilder::new();
    let acc = g.input("acc", DType::F32, shape!["n", 8]).unwrap();
    let x = g.input("x", DType::F32, shape!["n", 8]).unwrap();
    g.output("sum", &acc.add(&x).unwrap()).unwrap();
    let reference = g.finish().unwrap();
    let n = Dim::from("n");
    KernelDef::new("accumulate")
        .input("acc", DType::F32, &[n.clone(), Dim::Static(8)])
        .input("x", DType::F32, &[n, Dim::Static(8)])
        .output_in_place("sum", &[1, 8])
        .build(&reference, |b| {
            let (row, col) = (b.program_id(0)?, b.program_id(1)?);
            let by = b.index(shift);
            let read = if shift == 0 {
                row
            } else {
                b.arith(IndexOp::Add, row, by)
            };
            let state = b.input_view(0)?;
            let old = b.load(state, &[read, col], &[1, 8], 0.0)?;
            let xs = b.input_view(1)?;
            let x = b.load(xs, &[row, col], &[1, 8], 0.0)?;
            let ty = b.type_of(x).cloned().expect("a loaded tile");
            let sum = b.op(
                tir_lower::tile::TileOp::Binary {
                    op: tir_graph::BinaryOp::Add,
                    a: old,
                    b: x,
                },
                ty,
            );
            b.store_own(0, sum)
        })
        .unwrap()
}

/// A state `acc: f32[5, 8]` updated by `kernel` with `x`; outputs the old value doubled (a
/// reader the update must wait for) and the new value.
fn accumulator_graph(kernel: &CustomKernel) -> Graph {
    let g = GraphBuilder::new();
    let acc = g.state("acc", DType::F32, shape![5, 8]).unwrap();
    let x = g.input("x", DType::F32, shape![5, 8]).unwrap();
    let old = acc.mul_scalar(2.0).unwrap();
    let new = g.custom(kernel, &[&acc, &x]).unwrap();
    g.output("old", &old).unwrap();
    g.output("new", &new[0]).unwrap();
    g.finish().unwrap()
}

/// f32 sums against the f64 oracle: within a few units of f32's last place; NaN never passes.
fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "{what}: {g} against {w}"
        );
    }
}

#[test]
fn a_safe_in_place_kernel_is_proven_and_matches_the_oracle_across_runs() {
    let graph = accumulator_graph(&accumulate(0));
    assert_eq!(
        graph.state_updates().len(),
        1,
        "the custom node is the update"
    );
    let compiled = compile(&graph).unwrap();
    let cert = compiled
        .program
        .certificates
        .iter()
        .find(|c| c.kernel.contains("custom_accumulate"))
        .unwrap();
    assert!(
        cert.facts.iter().any(|f| f.contains("is read in place")),
        "{:?}",
        cert.facts
    );
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let mut state: BTreeMap<String, F64Tensor> = BTreeMap::new();
    state.insert("acc".into(), tensor(DType::F32, &[5, 8], vec![0.0; 40]));
    for step in 0..3 {
        let x = random(DType::F32, &[5, 8], 7 + step);
        let mut src = sources(vec![("x", x)]);
        src.extend(state.clone());
        let got = exe
            .run_f64(&sources(vec![("x", src["x"].clone())]))
            .unwrap();
        let want = tir_graph::evaluate(&graph, &src).unwrap();
        for name in ["old", "new"] {
            assert_close(&got.outputs[name].data, &want.outputs[name].data, name);
        }
        assert_close(
            &exe.states_f64()["acc"].data,
            &want.states["acc"].data,
            "acc",
        );
        // The next run starts from what the kernel wrote (f32), as the backend's does.
        state = exe.states_f64();
    }
}

#[test]
fn a_safe_in_place_kernel_reading_another_programs_tile_is_refused() {
    let err = compile(&accumulator_graph(&accumulate(1)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("custom_accumulate_sum"), "{err}");
    assert!(
        err.contains("reads acc outside the tile it writes"),
        "{err}"
    );
}

#[test]
fn an_in_place_output_must_update_a_state() {
    let g = GraphBuilder::new();
    let acc = g.input("acc", DType::F32, shape![5, 8]).unwrap();
    let x = g.input("x", DType::F32, shape![5, 8]).unwrap();
    let err = g
        .custom(&accumulate(0), &[&acc, &x])
        .unwrap_err()
        .to_string();
    assert!(err.contains("which is a input, not a state"), "{err}");
}

const LAYOUT: PagedLayout = PagedLayout {
    pages: 8,
    page_size: 4,
    heads: 2,
    head_dim: 12,
    max_blocks: 2,
};

fn paged_graph(dtype: DType, index: DType) -> Graph {
    let kernel = paged_append(dtype, index, LAYOUT).unwrap();
    let g = GraphBuilder::new();
    let l = LAYOUT;
    let pool = g
        .state(
            "kv",
            dtype,
            shape![l.pages, l.page_size, l.heads, l.head_dim],
        )
        .unwrap();
    let table = g
        .input("table", index, shape!["batch", l.max_blocks])
        .unwrap();
    let pos = g.input("pos", index, shape!["batch"]).unwrap();
    let new = g
        .input("new", dtype, shape!["batch", l.heads, l.head_dim])
        .unwrap();
    let out = g.custom(&kernel, &[&pool, &table, &pos, &new]).unwrap();
    g.output("kv_after", &out[0]).unwrap();
    g.finish().unwrap()
}

/// Runs `steps` appends of `batch` sequences whose table rows are `rows`; sequence `b` is at
/// position `step + b`. Checks every run's pool against the oracle's.
fn run_appends(dtype: DType, index: DType, rows: &[[u64; 2]], steps: u64) -> F64Tensor {
    let graph = paged_graph(dtype, index);
    let compiled = compile(&graph).unwrap();
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let l = LAYOUT;
    let batch = rows.len() as u64;
    let table: Vec<f64> = rows.iter().flatten().map(|&p| p as f64).collect();
    let numel = (l.pages * l.page_size * l.heads * l.head_dim) as usize;
    let dims = [l.pages, l.page_size, l.heads, l.head_dim];
    let mut pool = tensor(dtype, &dims, vec![0.0; numel]);
    for step in 0..steps {
        let pos: Vec<f64> = (0..batch).map(|b| (step + b) as f64).collect();
        let inputs = sources(vec![
            ("table", tensor(index, &[batch, 2], table.clone())),
            ("pos", tensor(index, &[batch], pos)),
            (
                "new",
                random(dtype, &[batch, l.heads, l.head_dim], 100 + step),
            ),
        ]);
        let got = exe.run_f64(&inputs).unwrap();
        let mut src = inputs.clone();
        src.insert("kv".into(), pool.clone());
        let want = tir_graph::evaluate(&graph, &src).unwrap();
        let state = &exe.states_f64()["kv"];
        assert!(state.data.iter().all(|v| !v.is_nan()));
        assert_eq!(
            state.data, want.states["kv"].data,
            "{dtype} {index} step {step}"
        );
        assert_eq!(got.outputs["kv_after"].data, want.states["kv"].data);
        pool = want.states["kv"].clone();
    }
    pool
}

#[test]
fn the_paged_append_matches_the_oracle_across_page_boundaries() {
    for (dtype, index) in [
        (DType::F32, DType::I64),
        (DType::F16, DType::I32),
        (DType::F16, DType::I64),
    ] {
        // Three sequences on six of the eight pages; positions 0..=7 cross each one's block 0
        // into block 1 (pages hold 4 tokens).
        let pool = run_appends(dtype, index, &[[5, 0], [2, 7], [3, 6]], 6);
        let l = LAYOUT;
        let per_page = (l.page_size * l.heads * l.head_dim) as usize;
        let page = |p: usize| &pool.data[p * per_page..(p + 1) * per_page];
        assert!(page(1).iter().all(|&v| v == 0.0), "page 1 is no one's");
        assert!(page(4).iter().all(|&v| v == 0.0), "page 4 is no one's");
        assert!(
            page(5).iter().all(|&v| v != 0.0),
            "sequence 0's block 0 is full"
        );
        assert!(
            page(0).iter().any(|&v| v != 0.0),
            "sequence 0 crossed into page 0"
        );
    }
    // Batch 1.
    run_appends(DType::F32, DType::I32, &[[6, 1]], 8);
}

#[test]
fn the_paged_append_is_lowered_unproven_with_its_contract() {
    let compiled = compile(&paged_graph(DType::F16, DType::I32)).unwrap();
    let cert = compiled
        .program
        .certificates
        .iter()
        .find(|c| c.kernel.contains("custom_paged_append"))
        .unwrap();
    assert_eq!(
        cert.facts[0],
        format!("unproven: declared by its author: \"{CONTRACT}\"")
    );
    assert!(cert.facts[1].contains("claims some elements of kv, each at most once"));
    assert!(cert.facts[1].contains("the CUDA backend runs it unchecked"));
}

#[test]
fn checking_mode_catches_a_table_naming_one_page_twice() {
    let graph = paged_graph(DType::F32, DType::I64);
    let compiled = compile(&graph).unwrap();
    let inputs = sources(vec![
        (
            "table",
            tensor(DType::I64, &[2, 2], vec![3.0, 1.0, 3.0, 2.0]),
        ),
        ("pos", tensor(DType::I64, &[2], vec![1.0, 1.0])),
        ("new", random(DType::F32, &[2, 2, 12], 5)),
    ]);
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    match exe.run_f64(&inputs) {
        Err(BackendError::Kernel { kernel, reason }) => {
            assert_eq!(kernel, "k0_custom_paged_append_appended");
            assert!(
                reason.contains("programs [0, 0, 0] and [1, 0, 0] both write element"),
                "{reason}"
            );
            assert!(
                reason.contains("index [3, 1, 0, 0]) of buffer kv"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        exe.states_f64()["kv"].data.iter().all(|&v| v == 0.0),
        "a failed kernel leaves the state"
    );
    // Unchecked, the contract is the author's word: the run completes.
    let mut exe = RefBackend::new().compile(&compiled.program).unwrap();
    exe.run_f64(&inputs).unwrap();
}

#[test]
fn an_index_an_unsafe_kernel_reads_out_of_range_blames_its_contract_not_lowering() {
    // Position 9 is block 4 of a table row of 2 blocks: the read leaves the table.
    let graph = paged_graph(DType::F32, DType::I64);
    let compiled = compile(&graph).unwrap();
    let inputs = sources(vec![
        ("table", tensor(DType::I64, &[1, 2], vec![3.0, 1.0])),
        ("pos", tensor(DType::I64, &[1], vec![9.0])),
        ("new", random(DType::F32, &[1, 2, 12], 5)),
    ]);
    let mut exe = RefBackend::new().compile(&compiled.program).unwrap();
    match exe.run_f64(&inputs) {
        Err(BackendError::Kernel { reason, .. }) => {
            assert!(
                reason.contains("this unsafe kernel's contract does not hold for these inputs"),
                "{reason}"
            );
            assert!(!reason.contains("lowering bug"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// An unsafe kernel whose program `p` stores its tile at `p / 2`: programs 0 and 1 both write
/// tile 0 (and tiles 2 and 3 are never written).
fn halves() -> CustomKernel {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![64]).unwrap();
    g.output("y", &x).unwrap();
    let reference = g.finish().unwrap();
    KernelDef::new("halves")
        .input("x", DType::F32, &[Dim::Static(64)])
        .output("y", DType::F32, &[Dim::Static(64)], &[16])
        .unsafe_contract("each element is written once")
        .build(&reference, |b| {
            let p = b.program_id(0)?;
            let two = b.index(2);
            let half = b.arith(IndexOp::Div, p, two);
            let view = b.input_view(0)?;
            let tile = b.load(view, &[p], &[16], 0.0)?;
            let out = b.output_view(0)?;
            b.store(out, &[half], tile)
        })
        .unwrap()
}

#[test]
fn checking_mode_catches_an_unsafe_kernels_programs_writing_one_element() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![64]).unwrap();
    let y = g.custom(&halves(), &[&x]).unwrap();
    g.output("y", &y[0]).unwrap();
    // Lowered without the proof (the same kernel declared safe is refused: backend-ref's
    // custom.rs), it fails at run time in checking mode.
    let compiled = compile(&g.finish().unwrap()).unwrap();
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let src = sources(vec![("x", random(DType::F32, &[64], 3))]);
    let err = exe.run_f64(&src).unwrap_err().to_string();
    assert_eq!(
        err,
        "kernel k0_custom_halves_y: programs [0] and [1] both write element 0 (index [0]) of \
         buffer output \"y\""
    );
}

/// A key cache `k_cache: dtype[1, 3, 5, head_dim]` that `rope_into_cache` writes the rotated `x`
/// into at `pos`.
fn rope_cache_graph(dtype: DType, head_dim: u64) -> Graph {
    let kernel = rope_into_cache(dtype, DType::I64, head_dim, 10000.0).unwrap();
    let g = GraphBuilder::new();
    let cache = g
        .state("k_cache", dtype, shape![1, 3, 5, head_dim])
        .unwrap();
    let x = g.input("x", dtype, shape![1, 3, 1, head_dim]).unwrap();
    let pos = g
        .input("pos", DType::I64, tir_graph::Shape::scalar())
        .unwrap();
    g.custom(&kernel, &[&cache, &x, &pos]).unwrap();
    g.finish().unwrap()
}

fn position(pos: i64) -> F64Tensor {
    tensor(DType::I64, &[], vec![pos as f64])
}

#[test]
fn rope_into_cache_is_proven_on_its_slice_and_matches_the_oracle_run_after_run() {
    for (dtype, head_dim, eps) in [(DType::F32, 8, 1e-6), (DType::F16, 64, 2e-3)] {
        let graph = rope_cache_graph(dtype, head_dim);
        assert_eq!(graph.state_updates().len(), 1);
        let compiled = compile(&graph).unwrap();
        // One kernel: no rotated copy, no separate cache write.
        assert_eq!(compiled.program.kernels.len(), 1);
        let cert = &compiled.program.certificates[0];
        let facts = cert.facts.join("\n");
        assert!(
            facts
                .contains("the slice of k_cache of length 1 along axis 2 at the run-time position"),
            "{facts}"
        );
        assert_eq!(cert.checks.len(), 1, "the position is checked at launch");
        let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
        let mut state = BTreeMap::new();
        state.insert(
            "k_cache".to_string(),
            tensor(
                dtype,
                &[1, 3, 5, head_dim],
                vec![0.0; 15 * head_dim as usize],
            ),
        );
        // Out of order, so rows written earlier must keep their values.
        for (run, pos) in [3i64, 0, 4, 1, 3].into_iter().enumerate() {
            let x = random(dtype, &[1, 3, 1, head_dim], 40 + run as u64);
            let src = sources(vec![("x", x), ("pos", position(pos))]);
            exe.run_f64(&src).unwrap();
            let mut oracle = src.clone();
            oracle.extend(state.clone());
            let want = tir_graph::evaluate(&graph, &oracle).unwrap();
            state = exe.states_f64();
            let (got, want) = (&state["k_cache"].data, &want.states["k_cache"].data);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= eps * (1.0 + w.abs()),
                    "{dtype} run {run} pos {pos} element {i}: {g} against {w}"
                );
            }
            // The row just written is rotated (pos 0 is the identity), the others not all zero.
            if pos > 0 {
                assert!(got.iter().any(|v| *v != 0.0));
            }
        }
    }
}

#[test]
fn rope_into_cache_at_a_position_past_the_cache_is_refused_at_launch() {
    let graph = rope_cache_graph(DType::F32, 8);
    let compiled = compile(&graph).unwrap();
    let mut exe = RefBackend::checking().compile(&compiled.program).unwrap();
    let x = random(DType::F32, &[1, 3, 1, 8], 5);
    exe.run_f64(&sources(vec![("x", x.clone()), ("pos", position(2))]))
        .unwrap();
    let before = exe.states_f64();
    for pos in [5, -1] {
        let src = sources(vec![("x", x.clone()), ("pos", position(pos))]);
        let err = exe.run_f64(&src).unwrap_err().to_string();
        assert!(
            err.contains("the write position of state `k_cache` (custom kernel rope_into_cache)"),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
        assert_eq!(exe.states_f64()["k_cache"].data, before["k_cache"].data);
    }
}

/// A slice kernel storing its tiles at the state's first rows instead of its slice.
fn stores_outside_its_slice() -> CustomKernel {
    let g = GraphBuilder::new();
    let cache = g.input("cache", DType::F32, shape![4, 8]).unwrap();
    let row = g.input("row", DType::F32, shape![1, 8]).unwrap();
    let pos = g
        .input("pos", DType::I64, tir_graph::Shape::scalar())
        .unwrap();
    let at = g
        .iota(Dim::Static(4))
        .unwrap()
        .eq(&pos)
        .unwrap()
        .unsqueeze(&[1])
        .unwrap();
    g.output("cache_new", &at.select(&row, &cache).unwrap())
        .unwrap();
    let reference = g.finish().unwrap();
    KernelDef::new("misplaced")
        .input("cache", DType::F32, &[Dim::Static(4), Dim::Static(8)])
        .input("row", DType::F32, &[Dim::Static(1), Dim::Static(8)])
        .input("pos", DType::I64, &[])
        .output_in_place_slice("cache_new", &[1, 8], (0, Dim::Static(1), 2))
        .build(&reference, |b| {
            let at = [b.program_id(0)?, b.program_id(1)?];
            let rows = b.input_view(1)?;
            let tile = b.load(rows, &at, &[1, 8], 0.0)?;
            // The whole state's view, not the slice's: row 0 whatever the position.
            let whole = b.input_view(0)?;
            b.store(whole, &at, tile)
        })
        .unwrap()
}

#[test]
fn a_slice_kernel_storing_outside_its_slice_is_refused_naming_the_state() {
    let g = GraphBuilder::new();
    let cache = g.state("cache", DType::F32, shape![4, 8]).unwrap();
    let row = g.input("row", DType::F32, shape![1, 8]).unwrap();
    let pos = g
        .input("pos", DType::I64, tir_graph::Shape::scalar())
        .unwrap();
    g.custom(&stores_outside_its_slice(), &[&cache, &row, &pos])
        .unwrap();
    let err = compile(&g.finish().unwrap()).unwrap_err().to_string();
    // Its one program stores a tile of the whole state, which the partition of the slice's
    // one row does not cover.
    assert!(
        err.contains(
            "kernel k0_custom_misplaced_cache_new: the partition of cache does not cover it"
        ),
        "{err}"
    );
}
