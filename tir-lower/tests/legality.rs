//! Illegal kernels and schedules, built on purpose from legal ones, are refused with messages
//! that name the kernel, the programs and the region.

use tir_graph::models::{self, DecoderConfig};
use tir_graph::{shape, DType, GraphBuilder};
use tir_lower::legality::{certify, check_program};
use tir_lower::tile::{Stmt, TileKernel, TileOp, Type, ValueId};
use tir_lower::{compile_graph, Program, Target};
use tir_opt::Limits;

fn program(graph: &tir_graph::Graph) -> Program {
    compile_graph(graph, &Target::default(), &Limits::default())
        .unwrap()
        .program
}

/// A 2-D elementwise program: `exp(x) + y` over `f32[40, 300]`.
fn elementwise() -> Program {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![40, 300]).unwrap();
    let y = g.input("y", DType::F32, shape![40, 300]).unwrap();
    g.output("z", &(&x.exp().unwrap() + &y).unwrap()).unwrap();
    program(&g.finish().unwrap())
}

fn store_mut(kernel: &mut TileKernel) -> &mut Stmt {
    kernel
        .body
        .stmts
        .iter_mut()
        .find(|s| matches!(s.op, TileOp::Store { .. }))
        .expect("a store")
}

fn refusal(kernel: &TileKernel, program: &Program) -> String {
    certify(kernel, &program.buffers)
        .expect_err("the kernel must be refused")
        .to_string()
}

#[test]
fn legal_kernels_get_certificates_in_plain_words() {
    let p = elementwise();
    let c = &p.certificates[0];
    let text = c.facts.join("\n");
    assert!(text.contains("distinct programs, distinct tiles"), "{text}");
    assert!(
        text.contains("partition the extent [40, 300] exactly"),
        "{text}"
    );
    assert!(
        text.contains("covers all of output \"z\" (f32[40, 300]) one to one"),
        "{text}"
    );
}

#[test]
fn two_programs_writing_one_tile_are_refused() {
    let p = elementwise();
    let mut k = p.kernels[0].clone();
    let TileOp::Store { coords, .. } = &mut store_mut(&mut k).op else {
        unreachable!()
    };
    coords[1] = coords[0];
    let e = refusal(&k, &p);
    assert!(e.starts_with("kernel k0_elementwise: "), "{e}");
    assert!(
        e.contains("programs (0, 0) and (0, 1) both write the same tile of output \"z\""),
        "{e}"
    );
}

#[test]
fn a_partition_that_does_not_cover_the_output_is_refused() {
    let p = elementwise();
    let mut k = p.kernels[0].clone();
    let one = ValueId(100_000);
    k.grid_body.stmts.push(Stmt {
        defs: vec![(one, Type::Index)],
        op: TileOp::Index { value: 1 },
    });
    k.grid[0] = one;
    let e = refusal(&k, &p);
    assert!(
        e.contains(
            "the partition of output \"z\" does not cover it exactly: grid axis 0 has 1 programs"
        ),
        "{e}"
    );
}

#[test]
fn a_permuted_store_that_collides_is_refused() {
    let p = elementwise();
    let mut k = p.kernels[0].clone();
    let TileOp::Store { view, .. } = store_mut(&mut k).op.clone() else {
        unreachable!()
    };
    // Make both axes of the stored view step by the same stride: rows land on each other.
    let view_stmt = k
        .body
        .stmts
        .iter_mut()
        .find(|s| s.defs.first().map(|d| d.0) == Some(view))
        .expect("the store's view");
    let TileOp::MakeView { strides, .. } = &mut view_stmt.op else {
        unreachable!()
    };
    strides[0] = strides[1];
    let e = refusal(&k, &p);
    assert!(e.contains("the store view of output \"z\""), "{e}");
    assert!(
        e.contains("is not one-to-one onto all of output \"z\""),
        "{e}"
    );
}

#[test]
fn a_state_write_racing_a_read_of_the_state_is_refused() {
    let graph = models::decoder_block(&DecoderConfig {
        hidden: 16,
        heads: 2,
        context: 8,
        ffn: 32,
    })
    .unwrap();
    let mut p = program(&graph);
    check_program(&p).unwrap();
    // Drop the ordering "read the cache before overwriting it" from the k_cache update.
    let writer = p
        .kernels
        .iter()
        .position(|k| {
            k.name.contains("state_update") && {
                let b = k.params[k.writes[0].param].buffer;
                p.buffers[b].name == "k_cache"
            }
        })
        .expect("the k_cache update");
    let reader = p
        .kernels
        .iter()
        .position(|k| {
            k.name.contains("attention")
                && k.params
                    .iter()
                    .any(|q| p.buffers[q.buffer].name == "k_cache")
        })
        .expect("the attention kernel reads k_cache");
    p.schedule.deps[writer].retain(|&d| d != reader);
    let e = check_program(&p).unwrap_err().to_string();
    assert!(e.contains("may run concurrently"), "{e}");
    assert!(e.contains("k_cache"), "{e}");
    assert!(
        e.contains("writes k_cache") || e.contains("reads k_cache"),
        "{e}"
    );
}

#[test]
fn a_kernel_reading_outside_the_tile_it_writes_in_place_is_refused() {
    let g = GraphBuilder::new();
    let s = g.state("s", DType::F32, shape![64, 64]).unwrap();
    let x = g.input("x", DType::F32, shape![64, 64]).unwrap();
    s.assign(&(&s + &x).unwrap()).unwrap();
    let p = program(&g.finish().unwrap());
    let update = p
        .kernels
        .iter()
        .find(|k| k.name.contains("state_update"))
        .unwrap();
    let text = p.certificates[p
        .kernels
        .iter()
        .position(|k| k.name == update.name)
        .unwrap()]
    .facts
    .join("\n");
    assert!(text.contains("s is read in place"), "{text}");
    // Shift the load of the state by one tile: it reads a neighbour's region.
    let mut k = update.clone();
    let load = k
        .body
        .stmts
        .iter_mut()
        .find(|st| matches!(&st.op, TileOp::Load { token: Some(_), .. }))
        .expect("the in-place load");
    let TileOp::Load { coords, .. } = &mut load.op else {
        unreachable!()
    };
    coords.swap(0, 1);
    let e = refusal(&k, &p);
    assert!(e.contains("reads s outside the tile it writes"), "{e}");
}

/// `state_write_slice` of `f32[2, 8]` into the state `cache: f32[4, 8]` along axis 0, at 1 or
/// (with `run_time`) at the position in the input `pos`.
fn slice_writer(run_time: bool) -> Program {
    let start = if run_time { "" } else { ", start = 1" };
    let pos = if run_time { ", %2" } else { "" };
    let text = format!(
        "%0 = state \"cache\" : f32[4, 8]\n\
         %1 = input \"v\" : f32[2, 8]\n\
         %2 = input \"pos\" : i64[]\n\
         %3 = state_write_slice %0, %1{pos} {{axis = 0{start}}} : f32[4, 8]\n"
    );
    program(&tir_graph::text::parse(&text).unwrap())
}

/// An in-place update that reads its state again after storing it: the read is not ordered
/// before the store by tokens, so it may see the new value (or another program's).
#[test]
fn a_read_of_the_state_after_its_store_is_refused() {
    let g = GraphBuilder::new();
    let s = g.state("s", DType::F32, shape![64, 64]).unwrap();
    let x = g.input("x", DType::F32, shape![64, 64]).unwrap();
    s.assign(&(&s + &x).unwrap()).unwrap();
    let p = program(&g.finish().unwrap());
    let mut k = p.kernels[0].clone();
    let body = &mut k.body.stmts;
    let load = body
        .iter()
        .find(|st| matches!(&st.op, TileOp::Load { token: Some(_), .. }))
        .expect("the in-place load")
        .clone();
    let store = body
        .iter()
        .position(|st| matches!(st.op, TileOp::Store { .. }))
        .expect("the store");
    let stored = body[store].defs[0].0;
    // The same load again, after the store, its token the store's.
    let mut again = load;
    again.defs[0].0 = ValueId(100_000);
    again.defs[1].0 = ValueId(100_001);
    let TileOp::Load { token, .. } = &mut again.op else {
        unreachable!()
    };
    *token = Some(stored);
    body.insert(store + 1, again);
    let e = refusal(&k, &p);
    assert_eq!(
        e,
        "kernel k0_state_update: a read of s is not ordered before its store by tokens"
    );
}

/// Regression: a slice at a static start past the end of its state (the stored view moved
/// with it, so the view matched the region) was certified; the region is now checked against
/// the buffer.
#[test]
fn a_slice_write_outside_its_state_is_refused() {
    let p = slice_writer(false);
    assert!(
        p.certificates[0]
            .facts
            .join("\n")
            .contains("the slice of cache of length 2 along axis 0 at 1"),
        "{:?}",
        p.certificates[0].facts
    );
    let mut k = p.kernels[0].clone();
    let tir_lower::tile::Region::Slice { start, .. } = &mut k.writes[0].region else {
        panic!("a slice write");
    };
    *start = tir_lower::tile::SliceStart::Static(3);
    // Rows 3 and 4 of a 4-row state: offset 3 * 8.
    let offset = ValueId(100_000);
    k.body.stmts.insert(
        0,
        Stmt {
            defs: vec![(offset, Type::Index)],
            op: TileOp::Index { value: 24 },
        },
    );
    let writes = k.writes[0].param;
    for st in &mut k.body.stmts {
        if let TileOp::MakeView {
            param, offset: o, ..
        } = &mut st.op
        {
            if *param == writes {
                *o = offset;
            }
        }
    }
    let e = refusal(&k, &p);
    assert_eq!(
        e,
        "kernel k0_state_update: the write region 3..5 along axis 0 of cache is outside its size 4"
    );
}

/// Two kernels writing overlapping slices of one state with nothing ordering them.
#[test]
fn overlapping_slice_writes_in_concurrent_kernels_are_refused() {
    let mut p = slice_writer(true);
    let mut second = p.kernels[0].clone();
    second.name = "k1_state_update".into();
    let mut certificate = p.certificates[0].clone();
    certificate.kernel = second.name.clone();
    p.kernels.push(second);
    p.certificates.push(certificate);
    p.schedule.deps.push(Vec::new());
    tir_lower::program::verify_program(&p).unwrap();
    let e = check_program(&p).unwrap_err().to_string();
    assert_eq!(
        e,
        "kernels k0_state_update and k1_state_update may run concurrently, but k0_state_update \
         writes cache while k1_state_update writes it"
    );
}

/// A write at a run-time position comes with the launch check of that position, or the program
/// is refused.
#[test]
fn a_run_time_write_position_without_its_launch_check_is_refused() {
    let mut p = slice_writer(true);
    let checks = p.certificates[0].checks.clone();
    assert_eq!(checks.len(), 1, "{checks:?}");
    let tir_lower::legality::LaunchCheck::SliceInBounds { what, .. } = &checks[0];
    assert_eq!(what, "the write position of state `cache`");
    p.certificates[0].checks.clear();
    let e = tir_lower::program::verify_program(&p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "kernel k0_state_update writes cache at the run-time position in parameter 0, but \
             its certificate has no launch check of that position"
        ),
        "{e}"
    );
}
