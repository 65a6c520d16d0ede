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
