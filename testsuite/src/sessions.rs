//! Sessions: the run API driven the way a user drives it, on any backend, where the corpus runs
//! one case at a time. Each session compiles small graphs and checks what only a sequence of
//! calls shows: parameters set once and kept, from a `.safetensors` file too; outputs left on the
//! device and fed to the next run (a decode loop whose KV cache fills up); host tensors of either
//! kind of memory giving the same outputs; copies to the device and back leaving every dtype
//! unchanged; refusals naming the tensor. `tir-conform --sessions` runs them on a backend (the
//! GPU machine's way to check the CUDA runtime); `tests/sessions.rs` runs them on the reference.

use std::collections::BTreeMap;
use tir_graph::models::{decoder_block, mlp, DecoderConfig};
use tir_graph::weights::{write_safetensors, WeightsFile};
use tir_graph::{DType, Graph, HostTensor, Op};
use tir_lower::{compile_graph, Backend, Executable, HostTensors, TensorRef};
use tir_opt::Limits;

/// One session: its name and its check.
pub struct Session {
    pub name: &'static str,
    pub check: fn(&dyn Backend) -> Result<(), String>,
}

/// Every session.
pub fn sessions() -> Vec<Session> {
    vec![
        Session {
            name: "decode_loop_on_device",
            check: decode_loop_on_device,
        },
        Session {
            name: "weights_from_safetensors",
            check: weights_from_safetensors,
        },
        Session {
            name: "host_memory_of_either_kind",
            check: host_memory_of_either_kind,
        },
        Session {
            name: "copies_keep_every_dtype",
            check: copies_keep_every_dtype,
        },
        Session {
            name: "refusals_name_the_tensor",
            check: refusals_name_the_tensor,
        },
    ]
}

/// Every graph the sessions compile, for compiling their kernels ahead of time
/// (`tir-conform --sessions --compile-only`).
pub fn graphs() -> Result<Vec<Graph>, String> {
    Ok(vec![
        small_decoder()?,
        mlp(64, 128).map_err(err)?,
        mlp(8, 16).map_err(err)?,
    ])
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn compile(backend: &dyn Backend, graph: &Graph) -> Result<Box<dyn Executable>, String> {
    let compiled = compile_graph(graph, &backend.target(), &Limits::default()).map_err(err)?;
    backend.compile(&compiled.program).map_err(err)
}

/// Random parameters of `graph`, of a model's scale (static shapes only).
fn parameters(graph: &Graph) -> Result<BTreeMap<String, HostTensor<'static>>, String> {
    let mut out = BTreeMap::new();
    for id in graph.node_ids() {
        if let Op::Parameter { name } = &graph.node(id).op {
            let ty = graph.ty(id);
            let dims = ty.shape.static_dims().ok_or("parameters of static shape")?;
            let t = HostTensor::random(ty.dtype, &dims, id.index() as u64, 0.2).map_err(err)?;
            out.insert(name.clone(), t);
        }
    }
    Ok(out)
}

fn set_all(
    exe: &mut dyn Executable,
    params: &BTreeMap<String, HostTensor<'static>>,
) -> Result<(), String> {
    for (name, t) in params {
        exe.set_parameter(name, t.into()).map_err(err)?;
    }
    Ok(())
}

/// The largest difference between `a` and `b` relative to `b`'s largest magnitude; infinite
/// when their types differ or one has a NaN where the other does not.
fn relative_error(a: &HostTensor, b: &HostTensor) -> f64 {
    if a.dtype() != b.dtype() || a.dims() != b.dims() {
        return f64::INFINITY;
    }
    let (a, b) = (a.to_f64().data, b.to_f64().data);
    let scale = b.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    a.iter().zip(&b).fold(0.0, |m, (x, y)| {
        if x.is_nan() || y.is_nan() {
            f64::INFINITY
        } else {
            m.max((x - y).abs() / scale)
        }
    })
}

/// Checks that `got` and `want` hold the same tensors, within `bound` of each other (a
/// comparison of nothing fails).
fn same(what: &str, got: &HostTensors, want: &HostTensors, bound: f64) -> Result<(), String> {
    if want.is_empty() || got.keys().ne(want.keys()) {
        return Err(format!(
            "{what}: tensors {:?}, expected {:?}",
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        ));
    }
    for (name, w) in want {
        let e = relative_error(&got[name], w);
        if e > bound {
            return Err(format!(
                "{what}: {name} differs by {e:.3e} (allowed {bound:.1e})"
            ));
        }
    }
    Ok(())
}

/// A small decoder block: 8 cache positions of 2 heads of 16.
fn small_decoder() -> Result<Graph, String> {
    decoder_block(&DecoderConfig {
        hidden: 32,
        heads: 2,
        context: 8,
        ffn: 48,
    })
    .map_err(err)
}

/// The decode step, token by token, from the host on one executable and with each output left
/// on the device and fed to the next step on another: the same outputs and KV caches (within
/// f16 rounding: two executables may pick different matmul paths).
fn decode_loop_on_device(backend: &dyn Backend) -> Result<(), String> {
    let graph = small_decoder()?;
    let params = parameters(&graph)?;
    let (mut host, mut device) = (compile(backend, &graph)?, compile(backend, &graph)?);
    set_all(host.as_mut(), &params)?;
    set_all(device.as_mut(), &params)?;
    let x0 = HostTensor::random(DType::F16, &[1, 1, 32], 9, 1.0).map_err(err)?;
    let mut x_host = x0.clone();
    let mut x_device = device.to_device(&x0).map_err(err)?;
    for pos in 0..8i64 {
        let pos = HostTensor::scalar(pos);
        let inputs = [("x", (&x_host).into()), ("pos", (&pos).into())];
        x_host = host.run(&inputs).map_err(err)?.remove("y").ok_or("no y")?;
        let inputs = [("x", (&x_device).into()), ("pos", (&pos).into())];
        let out = device.run_on_device(&inputs).map_err(err)?;
        x_device = out.get("y").ok_or("no y")?.clone();
        if x_device.device() != device.device() {
            return Err(format!(
                "an output on {}, not {}",
                x_device.device(),
                device.device()
            ));
        }
    }
    let y = HostTensors::from([("y".to_string(), x_device.to_host().map_err(err)?)]);
    same("y", &y, &HostTensors::from([("y".into(), x_host)]), 1e-2)?;
    same(
        "states",
        &device.states().map_err(err)?,
        &host.states().map_err(err)?,
        1e-2,
    )
}

/// An mlp's parameters loaded from a `.safetensors` file give exactly the outputs of the same
/// executable with them set one by one; what the file lacks or has extra is reported.
fn weights_from_safetensors(backend: &dyn Backend) -> Result<(), String> {
    let graph = mlp(64, 128).map_err(err)?;
    let params = parameters(&graph)?;
    let dir = tempfile::tempdir().map_err(err)?;
    let path = dir.path().join("mlp.safetensors");
    let extra = HostTensor::scalar(1.0f32);
    let mut named: Vec<(&str, &HostTensor)> = params
        .iter()
        .filter(|(n, _)| n.as_str() != "b2")
        .map(|(n, t)| (n.as_str(), t))
        .collect();
    named.push(("not_a_parameter", &extra));
    write_safetensors(&path, &named).map_err(err)?;

    let mut exe = compile(backend, &graph)?;
    let weights = WeightsFile::open(&path).map_err(err)?;
    let report = exe.load_weights(&weights).map_err(err)?;
    drop(weights);
    if report.unused != ["not_a_parameter"] || report.missing != ["b2"] {
        return Err(format!("load_weights reported {report:?}"));
    }
    let x = HostTensor::random(DType::F16, &[5, 64], 3, 1.0).map_err(err)?;
    let inputs = [("x", (&x).into())];
    match exe.run(&inputs) {
        Err(e) if e.to_string().starts_with("parameter \"b2\" is not set") => {}
        other => return Err(format!("a run without b2: {other:?}")),
    }
    exe.set_parameter("b2", (&params["b2"]).into())
        .map_err(err)?;
    let loaded = exe.run(&inputs).map_err(err)?;
    set_all(exe.as_mut(), &params)?;
    same("y", &exe.run(&inputs).map_err(err)?, &loaded, 0.0)
}

/// Inputs in the backend's host memory (`alloc_host`), in a `Vec` and borrowed from a slice give
/// the same outputs, run after run, and the outputs of one run survive the next.
fn host_memory_of_either_kind(backend: &dyn Backend) -> Result<(), String> {
    let graph = mlp(64, 128).map_err(err)?;
    let mut exe = compile(backend, &graph)?;
    set_all(exe.as_mut(), &parameters(&graph)?)?;
    let x = HostTensor::random(DType::F16, &[300, 64], 5, 1.0).map_err(err)?;
    let mut pinned = exe.alloc_host(DType::F16, &[300, 64]).map_err(err)?;
    pinned.bytes_mut().map_err(err)?.copy_from_slice(x.bytes());
    let values = x.to_vec::<half::f16>().map_err(err)?;
    let borrowed = HostTensor::from_slice(&values, &[300, 64]).map_err(err)?;
    let first = exe.run(&[("x", (&x).into())]).map_err(err)?;
    let kept = first.clone();
    for t in [&pinned, &borrowed, &x] {
        same("y", &exe.run(&[("x", t.into())]).map_err(err)?, &kept, 0.0)?;
    }
    same("the first outputs, later", &first, &kept, 0.0)
}

/// Every dtype goes to the device and back unchanged; `alloc_host` gives zeros.
fn copies_keep_every_dtype(backend: &dyn Backend) -> Result<(), String> {
    let graph = mlp(8, 16).map_err(err)?;
    let mut exe = compile(backend, &graph)?;
    for dtype in DType::ALL {
        for dims in [vec![], vec![3, 5], vec![1000]] {
            let t = HostTensor::random(dtype, &dims, 4, 1.0).map_err(err)?;
            let back = exe.to_device(&t).map_err(err)?.to_host().map_err(err)?;
            if back != t {
                return Err(format!(
                    "{} changed on its way to the device",
                    t.type_name()
                ));
            }
        }
        let zeros = exe.alloc_host(dtype, &[7]).map_err(err)?;
        if zeros != HostTensor::zeros(dtype, &[7]).map_err(err)? {
            return Err(format!("alloc_host({dtype}) is not zeros"));
        }
    }
    Ok(())
}

/// Inputs and parameters that do not fit are refused with one line naming them, on the host
/// and on the device alike, and the executable still runs afterwards.
fn refusals_name_the_tensor(backend: &dyn Backend) -> Result<(), String> {
    let graph = mlp(8, 16).map_err(err)?;
    let mut exe = compile(backend, &graph)?;
    let expect = |got: Result<(), tir_lower::BackendError>, want: &str| match got {
        Err(e) if e.to_string() == want => Ok(()),
        other => Err(format!("expected `{want}`, got {other:?}")),
    };
    let f32_x = HostTensor::zeros(DType::F32, &[2, 8]).map_err(err)?;
    let f32_on_device = exe.to_device(&f32_x).map_err(err)?;
    expect(
        exe.set_parameter("w1", (&f32_x).into()),
        "parameter \"w1\": expected f16[8, 16], got f32[2, 8]",
    )?;
    expect(
        exe.set_parameter("x", (&f32_x).into()),
        "\"x\" is an input, passed to each run, not a parameter",
    )?;
    for x in [TensorRef::Host(&f32_x), TensorRef::Device(&f32_on_device)] {
        expect(
            exe.run(&[("x", x)]).map(|_| ()),
            "input \"x\": expected f16[batch, 8], got f32[2, 8]",
        )?;
    }
    let params = parameters(&graph)?;
    let x = HostTensor::random(DType::F16, &[2, 8], 1, 1.0).map_err(err)?;
    expect(
        exe.run(&[("x", (&x).into())]).map(|_| ()),
        "parameter \"w1\" is not set: expected f16[8, 16] (set it with set_parameter, \
         load_weights or tirc run --weights)",
    )?;
    set_all(exe.as_mut(), &params)?;
    expect(
        exe.run(&[("x", (&x).into()), ("w1", (&params["w1"]).into())])
            .map(|_| ()),
        "\"w1\" is a parameter: set it once with set_parameter or load_weights, not at each run",
    )?;
    exe.run(&[("x", (&x).into())]).map(|_| ()).map_err(err)
}
