//! The run API on the reference backend, as a user drives it: parameters set once (from a
//! `.safetensors` file too) and kept, device tensors that one run leaves and the next takes,
//! copies to and from the device, and refusals that name the tensor.

use backend_ref::RefBackend;
use std::collections::BTreeMap;
use tir_graph::models::{decoder_block, DecoderConfig};
use tir_graph::weights::{write_safetensors, WeightsFile};
use tir_graph::{DType, Graph, HostTensor, Op};
use tir_lower::{compile_graph, Backend, BackendError, Executable, TensorRef};
use tir_opt::Limits;

fn small_decoder() -> Graph {
    decoder_block(&DecoderConfig {
        hidden: 32,
        heads: 2,
        context: 8,
        ffn: 48,
    })
    .unwrap()
}

fn compile(graph: &Graph) -> Box<dyn Executable> {
    let backend = RefBackend::checking();
    let compiled = compile_graph(graph, &backend.target(), &Limits::default()).unwrap();
    backend.compile(&compiled.program).unwrap()
}

/// Random parameters of `graph`, of a model's scale.
fn parameters(graph: &Graph) -> BTreeMap<String, HostTensor<'static>> {
    graph
        .node_ids()
        .filter_map(|id| match &graph.node(id).op {
            Op::Parameter { name } => {
                let ty = graph.ty(id);
                let dims = ty.shape.static_dims().unwrap();
                let t = HostTensor::random(ty.dtype, &dims, id.index() as u64, 0.2).unwrap();
                Some((name.clone(), t))
            }
            _ => None,
        })
        .collect()
}

fn step_inputs<'a>(x: TensorRef<'a>, pos: &'a HostTensor) -> [(&'a str, TensorRef<'a>); 2] {
    [("x", x), ("pos", pos.into())]
}

/// The decode step run token by token from the host, and again with each step's output left on
/// the device and fed to the next: the same outputs and the same KV cache.
#[test]
fn device_outputs_feed_the_next_run() {
    let graph = small_decoder();
    let params = parameters(&graph);
    let (mut host, mut device) = (compile(&graph), compile(&graph));
    for exe in [&mut host, &mut device] {
        for (name, t) in &params {
            exe.set_parameter(name, t.into()).unwrap();
        }
    }
    let x0 = HostTensor::random(DType::F16, &[1, 1, 32], 9, 1.0).unwrap();
    let mut x_host = x0.clone();
    let mut x_device = device.to_device(&x0).unwrap();
    for pos in 0..8i64 {
        let pos = HostTensor::scalar(pos);
        let out = host.run(&step_inputs((&x_host).into(), &pos)).unwrap();
        x_host = out["y"].clone();
        let out = device
            .run_on_device(&step_inputs((&x_device).into(), &pos))
            .unwrap();
        x_device = out["y"].clone();
        assert_eq!(x_device.device(), device.device());
    }
    assert_eq!(x_device.to_host().unwrap(), x_host);
    assert_eq!(device.states().unwrap(), host.states().unwrap());
    let y = x_host.to_vec::<half::f16>().unwrap();
    assert!(y.iter().all(|v| v.is_finite()) && y.iter().any(|v| v.to_f32() != 0.0));
}

#[test]
fn weights_load_from_a_safetensors_file_once() {
    let graph = small_decoder();
    let params = parameters(&graph);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let extra = HostTensor::scalar(1.0f32);
    let mut named: Vec<(&str, &HostTensor)> = params
        .iter()
        .filter(|(n, _)| n.as_str() != "wo")
        .map(|(n, t)| (n.as_str(), t))
        .collect();
    named.push(("not_a_parameter", &extra));
    write_safetensors(&path, &named).unwrap();

    let mut exe = compile(&graph);
    let weights = WeightsFile::open(&path).unwrap();
    let report = exe.load_weights(&weights).unwrap();
    assert_eq!(report.bound.len(), params.len() - 1);
    assert_eq!(report.unused, ["not_a_parameter"]);
    assert_eq!(report.missing, ["wo"]);
    drop(weights);
    let x = HostTensor::random(DType::F16, &[1, 1, 32], 9, 1.0).unwrap();
    let pos = HostTensor::scalar(3i64);
    let e = exe.run(&step_inputs((&x).into(), &pos)).unwrap_err();
    assert!(
        e.to_string().starts_with("parameter \"wo\" is not set"),
        "{e}"
    );
    exe.set_parameter("wo", (&params["wo"]).into()).unwrap();
    let loaded = exe.run(&step_inputs((&x).into(), &pos)).unwrap();

    let mut set = compile(&graph);
    for (name, t) in &params {
        set.set_parameter(name, t.into()).unwrap();
    }
    assert_eq!(set.run(&step_inputs((&x).into(), &pos)).unwrap(), loaded);
}

#[test]
fn a_weight_of_the_wrong_type_is_refused_naming_it() {
    let graph = small_decoder();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let wrong = HostTensor::zeros(DType::F32, &[32, 32]).unwrap();
    write_safetensors(&path, &[("wq", &wrong)]).unwrap();
    let mut exe = compile(&graph);
    let e = exe
        .load_weights(&WeightsFile::open(&path).unwrap())
        .unwrap_err();
    let message = e.to_string();
    assert!(
        message.contains("w.safetensors")
            && message.contains("parameter \"wq\": expected f16[32, 32], got f32[32, 32]"),
        "{message}"
    );
}

#[test]
fn tensors_copy_to_the_device_and_back_unchanged() {
    let graph = small_decoder();
    let mut exe = compile(&graph);
    for dtype in DType::ALL {
        let t = HostTensor::random(dtype, &[3, 5], 4, 1.0).unwrap();
        let on_device = exe.to_device(&t).unwrap();
        assert_eq!(
            (on_device.dtype(), on_device.dims()),
            (dtype, &[3u64, 5][..])
        );
        assert_eq!(on_device.to_host().unwrap(), t);
    }
    let zeros = exe.alloc_host(DType::BF16, &[4]).unwrap();
    assert_eq!(zeros, HostTensor::zeros(DType::BF16, &[4]).unwrap());
}

#[test]
fn a_device_tensor_must_fit_like_a_host_tensor() {
    let graph = small_decoder();
    let mut exe = compile(&graph);
    let wrong = exe
        .to_device(&HostTensor::zeros(DType::F32, &[1, 1, 32]).unwrap())
        .unwrap();
    let pos = HostTensor::scalar(0i64);
    let e = exe
        .run_on_device(&step_inputs((&wrong).into(), &pos))
        .unwrap_err();
    assert!(
        matches!(&e, BackendError::BadInput(m) if m == "input \"x\": expected f16[1, 1, 32], got f32[1, 1, 32]"),
        "{e}"
    );
}
