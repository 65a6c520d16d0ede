//! A decode loop: a decoder block (`tir_graph::models::decoder_block`) run one token at a time
//! on the CPU reference backend. Its KV cache is two states that persist between runs; each
//! step appends at run-time position `pos`, and each step's output stays in the backend's memory
//! as the next step's input.
//!
//! `cargo run --example decode`

use backend_ref::RefBackend;
use tir_graph::models::{decoder_block, DecoderConfig};
use tir_graph::{DType, HostTensor, Op};
use tir_lower::{compile_graph, Backend};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = DecoderConfig {
        hidden: 64,
        heads: 4,
        context: 32,
        ffn: 176,
    };
    let graph = decoder_block(&cfg)?;
    let backend = RefBackend::new();
    let compiled = compile_graph(&graph, &backend.target(), &Default::default())?;
    let mut exe = backend.compile(&compiled.program)?;
    println!("decoder block: {} kernels", compiled.program.kernels.len());

    // Random weights, set once (a model's own would come from `load_weights`).
    for id in graph.node_ids() {
        if let Op::Parameter { name } = &graph.node(id).op {
            let ty = graph.ty(id);
            let dims = ty.shape.static_dims().unwrap_or_default();
            let fan_in = dims.iter().rev().nth(1).copied().unwrap_or(1) as f64;
            let w = HostTensor::random(ty.dtype, &dims, id.index() as u64, fan_in.powf(-0.5))?;
            exe.set_parameter(name, (&w).into())?;
        }
    }

    let mut x = exe.to_device(&HostTensor::random(DType::F16, &[1, 1, 64], 0, 1.0)?)?;
    for pos in 0..cfg.context as i64 {
        let pos_t = HostTensor::scalar(pos);
        let out = exe.run_on_device(&[("x", (&x).into()), ("pos", (&pos_t).into())])?;
        x = out["y"].clone();
        if pos % 8 == 7 {
            let y = x.to_host()?;
            let first: Vec<f32> = y.as_slice::<half::f16>()?[..4]
                .iter()
                .map(|v| v.to_f32())
                .collect();
            println!("step {:2}: y[..4] = {first:?}", pos + 1);
        }
    }
    let states = exe.states()?;
    println!(
        "k_cache {:?} after {} steps",
        states["k_cache"].dims(),
        cfg.context
    );
    Ok(())
}
