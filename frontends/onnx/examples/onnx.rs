//! An ONNX model on the CPU reference backend: a small BERT exported by torch with symbolic
//! `batch` and `seq` (`testsuite/models/dynamic/bert_ts`), imported, compiled once, and run at
//! two bindings of its dims.
//!
//! `cargo run --example onnx [MODEL.onnx]`

use backend_ref::RefBackend;
use tir_graph::{DType, HostTensor};
use tir_lower::{compile_graph, Backend};
use tir_onnx::{import_file, ImportOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let path = std::env::args().nth(1).unwrap_or(format!(
        "{root}/testsuite/models/dynamic/bert_ts/model.onnx"
    ));
    let imported = import_file(path.as_ref(), &ImportOptions::default())?;
    let graph = &imported.graph;
    println!(
        "opset {}: {} nodes, {} parameters",
        imported.opset,
        graph.node_ids().count(),
        imported.weights.len()
    );
    for (name, id) in &graph.inputs() {
        println!("input {name:?}: {}", graph.ty(*id));
    }

    let backend = RefBackend::new();
    let program = compile_graph(graph, &backend.target(), &Default::default())?.program;
    let mut exe = backend.compile(&program)?;
    for (name, value) in &imported.weights {
        exe.set_parameter(name, value.into())?;
    }

    // Token ids below the vocabulary's 100, and a mask that keeps every position.
    for (batch, seq) in [(1u64, 7u64), (3, 16)] {
        let n = (batch * seq) as usize;
        let ids: Vec<i64> = (0..n as i64).map(|i| (i * 7 + 3) % 100).collect();
        let ids = HostTensor::from_vec(ids, &[batch, seq])?;
        let mask = HostTensor::from_vec(vec![1i64; n], &[batch, seq])?;
        let out = exe.run(&[
            ("input_ids", (&ids).into()),
            ("attention_mask", (&mask).into()),
        ])?;
        for (name, t) in &out {
            assert_eq!(t.dtype(), DType::F32);
            println!(
                "batch {batch}, seq {seq}: {name} {:?}, first values {:?}",
                t.dims(),
                &t.as_slice::<f32>()?[..3]
            );
        }
    }
    Ok(())
}
