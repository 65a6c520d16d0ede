//! `tirc run` and `tirc explain --tile` as a user meets them: refusals are one line with exit 1
//! and leave no output files; runs write every output (and generated input) as `.npy`, and
//! running again on the written inputs reproduces the outputs byte for byte.

mod common;

use common::{assert_ok, assert_refused, example, stderr, tirc as run};
use std::path::Path;
use tir_graph::{DType, HostTensor};
use tirc::npy;

/// Writes `t` as `dir/name` and returns the path.
fn write_npy(dir: &Path, name: &str, t: &HostTensor) -> String {
    let path = dir.join(name);
    std::fs::write(&path, npy::encode(t).unwrap()).unwrap();
    path.display().to_string()
}

fn read_npy(path: &Path) -> HostTensor<'static> {
    npy::decode(&std::fs::read(path).unwrap()).unwrap()
}

/// Random values in [-2, 2).
fn random(dtype: DType, dims: &[u64], seed: u64) -> HostTensor<'static> {
    HostTensor::random(dtype, dims, seed, 2.0).unwrap()
}

/// Whether two files hold the same bytes (compared without printing them).
fn same_bytes(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

fn arg(name: &str, path: &str) -> String {
    format!("{name}={path}")
}

// ---- refusals: each before anything is written ----

/// Runs `args` (then `--output-dir OUT`) and checks the refusal left no output directory.
fn refused_without_output(dir: &Path, args: &[&str], needles: &[&str]) {
    common::assert_refused_without_output(dir, args, needles, run);
}

#[test]
fn an_unknown_input_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = write_npy(dir.path(), "x.npy", &random(DType::F16, &[4, 1024], 1));
    refused_without_output(
        dir.path(),
        &[
            "run",
            &example("mlp.tir"),
            "--input",
            &arg("z", &x),
            "--random-inputs",
        ],
        &[
            "--input z",
            "no input or parameter `z`",
            "x, w1, b1, w2, b2",
        ],
    );
}

#[test]
fn missing_inputs_are_named_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let x = write_npy(dir.path(), "x.npy", &random(DType::F16, &[4, 1024], 1));
    refused_without_output(
        dir.path(),
        &["run", &example("mlp.tir"), "--input", &arg("x", &x)],
        &[
            "no tensor for parameter `w1` (f16[1024, 4096])",
            "parameter `b2`",
            "--random-inputs",
        ],
    );
    let err = stderr(&run(&["run", &example("softmax.tir")]));
    assert!(err.contains("input `x` (f16[rows, 4096])"), "{err}");
}

#[test]
fn a_wrong_dtype_or_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f32_x = write_npy(d, "x32.npy", &random(DType::F32, &[4, 1024], 1));
    refused_without_output(
        d,
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--input",
            &arg("x", &f32_x),
        ],
        &[
            "--input x=",
            "x32.npy",
            "expected f16[batch, 1024], got f32[4, 1024]",
        ],
    );
    let narrow = write_npy(d, "narrow.npy", &random(DType::F16, &[4, 1000], 1));
    refused_without_output(
        d,
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--input",
            &arg("x", &narrow),
        ],
        &["expected f16[batch, 1024], got f16[4, 1000]"],
    );
    let rank3 = write_npy(d, "rank3.npy", &random(DType::F16, &[1, 4, 1024], 1));
    refused_without_output(
        d,
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--input",
            &arg("x", &rank3),
        ],
        &["got f16[1, 4, 1024]"],
    );
    let w1 = write_npy(d, "w1.npy", &random(DType::F16, &[1024, 4095], 1));
    refused_without_output(
        d,
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--input",
            &arg("w1", &w1),
        ],
        &[
            "--input w1=",
            "expected f16[1024, 4096], got f16[1024, 4095]",
        ],
    );
}

#[test]
fn a_dim_that_disagrees_with_an_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = write_npy(dir.path(), "x.npy", &random(DType::F16, &[4, 1024], 1));
    refused_without_output(
        dir.path(),
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--dim",
            "batch=8",
            "--input",
            &arg("x", &x),
        ],
        &["dim `batch` is 4 here, but --dim batch=8 makes it 8"],
    );
}

#[test]
fn unreadable_and_corrupt_npy_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = npy::encode(&random(DType::F16, &[4, 1024], 1)).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (d.join("missing.npy").display().to_string(), "missing.npy"),
        (
            {
                std::fs::write(d.join("junk.npy"), b"not an array at all").unwrap();
                d.join("junk.npy").display().to_string()
            },
            "not a valid .npy file",
        ),
        (
            {
                std::fs::write(d.join("cut.npy"), &good[..good.len() - 10]).unwrap();
                d.join("cut.npy").display().to_string()
            },
            "truncated",
        ),
        (
            {
                std::fs::write(d.join("empty.npy"), b"").unwrap();
                d.join("empty.npy").display().to_string()
            },
            "not a valid .npy file",
        ),
    ];
    for (path, needle) in &cases {
        refused_without_output(
            d,
            &[
                "run",
                &example("mlp.tir"),
                "--random-inputs",
                "--input",
                &arg("x", path),
            ],
            &[path.as_str(), needle],
        );
    }
}

#[test]
fn an_unsupported_npy_dtype_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    {
        use npyz::WriterBuilder;
        let mut w = npyz::WriteOptions::new()
            .dtype(npyz::DType::Plain("|V2".parse().unwrap()))
            .shape(&[4, 1024])
            .writer(&mut bytes)
            .begin_nd()
            .unwrap();
        w.extend(vec![npyz::FixedSizeBytes([1u8, 0]); 4096])
            .unwrap();
        w.finish().unwrap();
    }
    let path = dir.path().join("void.npy");
    std::fs::write(&path, bytes).unwrap();
    let path = path.display().to_string();
    refused_without_output(
        dir.path(),
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--input",
            &arg("x", &path),
        ],
        &[
            "void.npy",
            "`|V2` is not supported",
            "bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64",
        ],
    );
}

#[test]
fn an_unknown_backend_is_refused_with_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    refused_without_output(
        dir.path(),
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--backend",
            "tpu",
        ],
        &["unknown backend `tpu` (known: ref, cuda)"],
    );
}

#[test]
fn bad_dims_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mlp = example("mlp.tir");
    let base = ["run", mlp.as_str(), "--random-inputs", "--dim"];
    let cases: [(&str, &[&str]); 6] = [
        (
            "rows=4",
            &["--dim rows", "no symbolic dim `rows`", "it has: batch"],
        ),
        ("batch=0", &["`0` is not a positive integer"]),
        ("batch=-3", &["`-3` is not a positive integer"]),
        ("batch=four", &["`four` is not a positive integer"]),
        ("batch", &["`batch` is not NAME=N"]),
        ("=4", &["`=4` is not NAME=N"]),
    ];
    for (value, needles) in cases {
        let mut args = base.to_vec();
        args.push(value);
        refused_without_output(dir.path(), &args, needles);
    }
    refused_without_output(
        dir.path(),
        &[
            "run",
            &mlp,
            "--random-inputs",
            "--dim",
            "batch=2",
            "--dim",
            "batch=3",
        ],
        &["--dim batch is given twice"],
    );
    // A graph without symbolic dims has none to set.
    let graph = dir.path().join("static.tirt");
    std::fs::write(
        &graph,
        "%0 = input \"x\" : f32[2]\n%1 = exp %0 : f32[2]\noutput \"y\" = %1\n",
    )
    .unwrap();
    refused_without_output(
        dir.path(),
        &[
            "run",
            &graph.display().to_string(),
            "--random-inputs",
            "--dim",
            "n=2",
        ],
        &["no symbolic dim `n` (it has none)"],
    );
}

#[test]
fn an_input_given_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = write_npy(dir.path(), "x.npy", &random(DType::F16, &[4, 1024], 1));
    refused_without_output(
        dir.path(),
        &[
            "run",
            &example("mlp.tir"),
            "--random-inputs",
            "--input",
            &arg("x", &x),
            "--input",
            &arg("x", &x),
        ],
        &["--input x is given twice"],
    );
}

#[test]
fn a_bad_graph_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.tir");
    std::fs::write(&bad, b"TIRGRAPH garbage").unwrap();
    refused_without_output(
        dir.path(),
        &["run", &bad.display().to_string(), "--random-inputs"],
        &["bad.tir"],
    );
    assert_refused(&run(&["run", "--input", "x"]), &["NAME=FILE.npy"]);
}

// ---- runs: these need lowering and the reference backend ----

/// `tirc run FILE --random-inputs ARGS --output-dir DIR`; the summary.
fn run_random(file: &str, args: &[&str], dir: &Path) -> String {
    let d = dir.display().to_string();
    let mut all = vec!["run", file, "--random-inputs"];
    all.extend(args);
    all.extend(["--output-dir", &d]);
    assert_ok(&run(&all))
}

#[test]
fn mlp_random_inputs_write_every_tensor_and_reproduce_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let summary = run_random(
        &example("mlp.tir"),
        &["--seed", "1", "--dim", "batch=4"],
        &first,
    );
    assert!(summary.contains("dims: batch=4 (--dim)"), "{summary}");
    assert!(
        summary.contains("output \"y\": f16[4, 1024] sum="),
        "{summary}"
    );
    assert!(summary.contains("fnv1a="), "{summary}");
    for name in ["y", "x", "w1", "b1", "w2", "b2"] {
        assert!(first.join(format!("{name}.npy")).exists(), "{name}.npy");
    }
    let x = read_npy(&first.join("x.npy"));
    assert_eq!(x.type_name(), "f16[4, 1024]");
    let y = read_npy(&first.join("y.npy"));
    assert_eq!(y.type_name(), "f16[4, 1024]");
    assert!(y.to_f64().data.iter().all(|v| v.is_finite()));

    // Again from the written files, without --random-inputs: the same bytes.
    let second = dir.path().join("second");
    let second_s = second.display().to_string();
    let mlp = example("mlp.tir");
    let mut args: Vec<String> = vec!["run".into(), mlp];
    for name in ["x", "w1", "b1", "w2", "b2"] {
        args.push("--input".into());
        args.push(format!(
            "{name}={}",
            first.join(format!("{name}.npy")).display()
        ));
    }
    args.extend(["--output-dir".into(), second_s]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let summary = assert_ok(&run(&args));
    assert!(summary.contains("dims: batch=4 (input `x`)"), "{summary}");
    assert!(same_bytes(&second.join("y.npy"), &first.join("y.npy")));
    // Only the output is written when every input is given.
    let written: Vec<_> = std::fs::read_dir(&second).unwrap().collect();
    assert_eq!(written.len(), 1);
}

#[test]
fn softmax_rows_sum_to_one() {
    let dir = tempfile::tempdir().unwrap();
    let summary = run_random(&example("softmax.tir"), &["--dim", "rows=3"], dir.path());
    assert!(summary.contains("output \"y\": f16[3, 4096]"), "{summary}");
    let y = read_npy(&dir.path().join("y.npy")).to_f64();
    assert_eq!(y.dims, vec![3, 4096]);
    for row in y.data.chunks(4096) {
        let sum: f64 = row.iter().sum();
        assert!((sum - 1.0).abs() < 1e-2, "a row sums to {sum}");
        assert!(row.iter().all(|&v| (0.0..=1.0).contains(&v)));
    }
}

#[test]
fn unbound_dims_default_to_two_and_inputs_bind_them() {
    let dir = tempfile::tempdir().unwrap();
    let summary = run_random(&example("softmax.tir"), &[], &dir.path().join("a"));
    assert!(summary.contains("dims: rows=2 (the default)"), "{summary}");
    assert_eq!(read_npy(&dir.path().join("a/y.npy")).dims(), [2, 4096]);
    // A given input binds the dim (and the text form runs as the .tir file does).
    let x = write_npy(dir.path(), "x.npy", &random(DType::F16, &[3, 4096], 9));
    let summary = run_random(
        &example("softmax.tirt"),
        &["--input", &arg("x", &x)],
        &dir.path().join("b"),
    );
    assert!(summary.contains("dims: rows=3 (input `x`)"), "{summary}");
    assert!(
        summary.contains(&format!("input \"x\": f16[3, 4096] from {x}")),
        "{summary}"
    );
    assert_eq!(read_npy(&dir.path().join("b/y.npy")).dims(), [3, 4096]);
    assert!(
        !dir.path().join("b/x.npy").exists(),
        "a given input is not written"
    );
}

#[test]
fn the_checking_backend_runs_too() {
    let dir = tempfile::tempdir().unwrap();
    let summary = run_random(
        &example("ln_gelu.tir"),
        &["--check", "--dim", "tokens=5"],
        dir.path(),
    );
    assert!(summary.contains("backend `ref`"), "{summary}");
    assert!(dir.path().join("y.npy").exists());
}

#[test]
fn explain_tile_prints_the_program_and_certificates() {
    let out = run(&["explain", "--tile", &example("mlp.tir")]);
    let text = assert_ok(&out);
    assert!(text.starts_with("2 kernels, "), "{text}");
    assert!(
        text.contains("\ntile program (ref target):\nprogram: "),
        "{text}"
    );
    assert!(text.contains("\nkernel k0_"), "{text}");
    assert!(text.contains(" = mma "), "{text}");
    assert!(text.contains("\nschedule {\n  wave 0: 0 k0_"), "{text}");
    assert!(text.contains("\ncertificates:\nkernel k0_"), "{text}");
    assert_refused(
        &run(&["explain", "--tile", "--json", &example("mlp.tir")]),
        &["--json", "--tile"],
    );
}

#[test]
fn random_inputs_take_seeds_inputs_first_then_parameters() {
    // A parameter declared before the input: the input still gets seed + 0, as in the package
    // compiled from this graph (whose signature lists inputs, then parameters).
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("order.tirt");
    std::fs::write(
        &graph,
        "%0 = parameter \"w\" : f32[3]\n%1 = input \"x\" : f32[3]\n%2 = add %0, %1 : f32[3]\noutput \"y\" = %2\n",
    )
    .unwrap();
    let summary = run_random(
        &graph.display().to_string(),
        &["--seed", "7"],
        &dir.path().join("out"),
    );
    let x_at = summary.find("input \"x\"").expect("x in the summary");
    let w_at = summary.find("parameter \"w\"").expect("w in the summary");
    assert!(x_at < w_at, "{summary}");
    // Both of unit scale: an input, and a parameter of rank 1 (no fan-in to scale by).
    for (name, seed) in [("x", 7), ("w", 8)] {
        let t = HostTensor::random(DType::F32, &[3], seed, 1.0).unwrap();
        let expected = npy::encode(&t).unwrap();
        let written = std::fs::read(dir.path().join(format!("out/{name}.npy"))).unwrap();
        assert_eq!(written, expected, "{name}.npy");
    }
}

// ---- --weights ----

/// mlp's parameters from a first random run, written to `dir/w.safetensors` (all but `skip`).
fn mlp_weights(dir: &Path, skip: &[&str]) -> String {
    let first = dir.join("first");
    run_random(&example("mlp.tir"), &["--dim", "batch=4"], &first);
    let tensors: Vec<(String, HostTensor)> = ["w1", "b1", "w2", "b2"]
        .iter()
        .filter(|n| !skip.contains(n))
        .map(|n| (n.to_string(), read_npy(&first.join(format!("{n}.npy")))))
        .collect();
    let named: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let path = dir.join("w.safetensors");
    tir_graph::weights::write_safetensors(&path, &named).unwrap();
    path.display().to_string()
}

#[test]
fn weights_from_safetensors_reproduce_a_run_from_npy_files() {
    let dir = tempfile::tempdir().unwrap();
    let weights = mlp_weights(dir.path(), &[]);
    let x = dir.path().join("first/x.npy").display().to_string();
    let out = dir.path().join("second");
    let summary = assert_ok(&run(&[
        "run",
        &example("mlp.tir"),
        "--weights",
        &weights,
        "--input",
        &arg("x", &x),
        "--output-dir",
        &out.display().to_string(),
    ]));
    assert!(
        summary.contains(&format!("weights: 4 of 4 tensors from {weights}")),
        "{summary}"
    );
    assert!(same_bytes(
        &out.join("y.npy"),
        &dir.path().join("first/y.npy")
    ));
    // Only the output is written: nothing was generated.
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn a_weight_missing_from_the_file_is_named_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let weights = mlp_weights(dir.path(), &["b2"]);
    let x = dir.path().join("first/x.npy").display().to_string();
    refused_without_output(
        dir.path(),
        &[
            "run",
            &example("mlp.tir"),
            "--weights",
            &weights,
            "--input",
            &arg("x", &x),
        ],
        &["no tensor for parameter `b2` (f16[1024])"],
    );
}

#[test]
fn bad_weights_files_are_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let weights = mlp_weights(dir.path(), &[]);
    let bytes = std::fs::read(&weights).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let mlp = example("mlp.tir");
    let try_weights = |path: &str, needles: &[&str]| {
        refused_without_output(
            dir.path(),
            &["run", &mlp, "--weights", path, "--random-inputs"],
            needles,
        )
    };
    let truncated = write("truncated.safetensors", &bytes[..bytes.len() / 2]);
    try_weights(&truncated, &[&truncated, "not a valid safetensors file"]);
    let mut lying = bytes.clone();
    lying[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let lying = write("lying.safetensors", &lying);
    try_weights(&lying, &[&lying, "not a valid safetensors file"]);
    let missing = dir.path().join("none.safetensors").display().to_string();
    try_weights(&missing, &[&missing]);

    let wrong = |name: &str, t: &HostTensor| {
        let p = dir.path().join(format!("{name}.safetensors"));
        tir_graph::weights::write_safetensors(&p, &[(name, t)]).unwrap();
        p.display().to_string()
    };
    let f32_w1 = wrong("w1", &HostTensor::zeros(DType::F32, &[1024, 4096]).unwrap());
    try_weights(
        &f32_w1,
        &["tensor \"w1\": expected f16[1024, 4096], got f32[1024, 4096]"],
    );
    let short_b1 = wrong("b1", &HostTensor::zeros(DType::F16, &[4095]).unwrap());
    try_weights(
        &short_b1,
        &["tensor \"b1\": expected f16[4096], got f16[4095]"],
    );
    let x_as_weight = wrong("x", &HostTensor::zeros(DType::F16, &[2, 1024]).unwrap());
    try_weights(
        &x_as_weight,
        &["tensor \"x\" is an input of the graph, not a parameter"],
    );
}

// ---- --dim fixes dims at import (ONNX) or specializes the graph ----

/// A model exported with a dynamic batch (testsuite/models/dynamic).
fn dynamic_model() -> String {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    root.join("../../testsuite/models/dynamic/vit_ts/model.onnx")
        .display()
        .to_string()
}

#[test]
fn dim_fixes_a_dynamic_onnx_batch_and_an_unknown_dim_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let printed = assert_ok(&run(&[
        "run",
        &dynamic_model(),
        "--random-inputs",
        "--dim",
        "batch=2",
        "--output-dir",
        out.to_str().unwrap(),
    ]));
    assert!(printed.contains("f32[2, 17, 32]"), "{printed}");
    assert_refused(
        &run(&["explain", &dynamic_model(), "--dim", "seq=4"]),
        &["no symbolic dim `seq` to fix", "its symbolic dims: batch"],
    );
}

#[test]
fn dim_specializes_a_graph_for_explain_and_names_an_unknown_dim() {
    let fixed = assert_ok(&run(&["explain", &example("mlp.tir"), "--dim", "batch=4"]));
    assert!(!fixed.contains("batch"), "{fixed}");
    assert_refused(
        &run(&["explain", &example("mlp.tir"), "--dim", "rows=4"]),
        &[
            "--dim rows",
            "no symbolic dim `rows`",
            "its symbolic dims: batch",
        ],
    );
}

#[test]
fn explain_tile_lists_an_unsafe_kernel_as_unproven_with_its_contract() {
    use tir_lower::custom::paged_kv::{paged_append, PagedLayout, CONTRACT};
    let layout = PagedLayout {
        pages: 4,
        page_size: 2,
        heads: 1,
        head_dim: 8,
        max_blocks: 2,
    };
    let kernel = paged_append(DType::F16, DType::I32, layout).unwrap();
    let g = tir_graph::GraphBuilder::new();
    let pool = g
        .state("kv", DType::F16, tir_graph::shape![4, 2, 1, 8])
        .unwrap();
    let table = g
        .input("table", DType::I32, tir_graph::shape!["batch", 2])
        .unwrap();
    let pos = g
        .input("pos", DType::I32, tir_graph::shape!["batch"])
        .unwrap();
    let new = g
        .input("new", DType::F16, tir_graph::shape!["batch", 1, 8])
        .unwrap();
    let out = g.custom(&kernel, &[&pool, &table, &pos, &new]).unwrap();
    g.output("kv_after", &out[0]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("paged.tir");
    tir_graph::file::write(&file, &g.finish().unwrap()).unwrap();
    let text = assert_ok(&run(&["explain", "--tile", file.to_str().unwrap()]));
    assert!(
        text.contains(&format!(
            "\n  - unproven: declared by its author: \"{CONTRACT}\"\n"
        )),
        "{text}"
    );
    assert!(
        text.contains("the CUDA backend runs it unchecked"),
        "{text}"
    );
    assert!(
        text.contains("writes param 0: scattered (unproven)"),
        "{text}"
    );
}
