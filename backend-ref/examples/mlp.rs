//! The first thing to try: build an MLP with the builder, compile it for the CPU reference
//! backend, set its weights once, and run it.
//!
//! `cargo run --example mlp`

use backend_ref::RefBackend;
use tir_graph::{shape, DType, GraphBuilder, HostTensor};
use tir_lower::{compile_graph, Backend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // y = gelu(x @ w1 + b1) @ w2, over a symbolic batch.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", 64])?;
    let w1 = g.parameter("w1", DType::F32, shape![64, 256])?;
    let b1 = g.parameter("b1", DType::F32, shape![256])?;
    let w2 = g.parameter("w2", DType::F32, shape![256, 64])?;
    let h = (&x.matmul(&w1)? + &b1)?.gelu()?;
    g.output("y", &h.matmul(&w2)?)?;
    let graph = g.finish()?;

    // Optimize, fuse and lower for the backend's target, then compile.
    let backend = RefBackend::new();
    let compiled = compile_graph(&graph, &backend.target(), &Default::default())?;
    println!("{} kernels", compiled.program.kernels.len());
    let mut exe = backend.compile(&compiled.program)?;

    // Parameters are set once and stay resident; a run takes the inputs only.
    exe.set_parameter(
        "w1",
        (&HostTensor::random(DType::F32, &[64, 256], 1, 0.125)?).into(),
    )?;
    exe.set_parameter(
        "b1",
        (&HostTensor::random(DType::F32, &[256], 2, 0.1)?).into(),
    )?;
    exe.set_parameter(
        "w2",
        (&HostTensor::random(DType::F32, &[256, 64], 3, 0.0625)?).into(),
    )?;

    for batch in [1, 4] {
        let x = HostTensor::random(DType::F32, &[batch, 64], 0, 1.0)?;
        let out = exe.run(&[("x", (&x).into())])?;
        let y = &out["y"];
        println!(
            "batch {batch}: y {:?}, y[0][..4] = {:?}",
            y.dims(),
            &y.as_slice::<f32>()?[..4]
        );
    }
    Ok(())
}
