//! The CUDA backend's commands as a user meets them: `tirc compile` (needs `tileiras`, found in
//! the workspace's `.tools`, but no GPU), `tirc run` on a package or with `--backend cuda`, and
//! `tirc doctor`.
//!
//! Every command runs with `CUDA_VISIBLE_DEVICES` empty, so the GPU is unavailable whether or
//! not this machine has one, and with `TIR_CACHE_DIR` in a temporary directory, so the user's
//! kernel cache is neither read nor filled.

mod common;

use backend_cuda::package;
use common::{assert_quiet_ok as assert_ok, assert_refused, example, stderr, stdout, tirc_os};
use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use tir_graph::testing::dir_names;

/// `tirc ARGS` with the kernel cache in `cache` and no visible GPU.
fn tirc(cache: &Path, args: &[&str]) -> Output {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let env = [
        ("TIR_CACHE_DIR", cache.as_os_str()),
        ("CUDA_VISIBLE_DEVICES", OsStr::new("")),
    ];
    tirc_os(&args, &env)
}

fn s(path: &Path) -> String {
    path.display().to_string()
}

/// `tirc run ARGS --output-dir DIR/out` is refused with `needles` and creates no output dir.
fn run_refused(cache: &Path, dir: &Path, args: &[&str], needles: &[&str]) {
    let mut all = vec!["run"];
    all.extend(args);
    common::assert_refused_without_output(dir, &all, needles, |a| tirc(cache, a));
}

/// One compile from scratch for two architectures, one from the cache for one; then the ways a
/// package can be run here (all refused: there is no GPU).
#[test]
fn compile_writes_packages_that_run_only_on_cuda() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let mlp = example("mlp.tir");

    // Two architectures, every kernel assembled by tileiras. Four kernels: the two matmuls, and
    // their epilogues (bias and gelu, bias) as passes of their own, since the default `auto`
    // matmul path may run the products on cuBLASLt. Stderr is no terminal here: the progress
    // is one plain line per kernel and architecture.
    let both = d.join("mlp-both.tirpkg");
    let out = tirc(
        &cache,
        &["compile", &mlp, "--arch", "sm_90,sm_100", "-o", &s(&both)],
    );
    let summary = common::assert_ok(&out);
    let mut counted: Vec<usize> = stderr(&out)
        .lines()
        .map(|l| {
            let rest = l.strip_prefix("compiled ").unwrap_or_else(|| panic!("{l}"));
            assert!(rest.contains("/8 kernels (k") && rest.ends_with(")"), "{l}");
            assert!(
                l.contains(" for sm_90)") || l.contains(" for sm_100)"),
                "{l}"
            );
            rest.split('/').next().unwrap().parse().unwrap()
        })
        .collect();
    counted.sort_unstable();
    assert_eq!(counted, (1..=8).collect::<Vec<_>>(), "{}", stderr(&out));
    assert_eq!(summary.lines().count(), 1, "{summary}");
    assert!(
        summary.starts_with(&format!("{}: 4 kernels for sm_90, sm_100 from ", s(&both))),
        "{summary}"
    );
    assert!(
        summary.contains("kernel cache: 0 hits, 8 misses"),
        "{summary}"
    );
    let size = std::fs::metadata(&both).unwrap().len();
    assert!(summary.contains(&format!(", {size} bytes (")), "{summary}");
    let pkg = package::read(&both).unwrap();
    let kernels = pkg.program.kernels.len();
    assert_eq!(kernels, 4);
    assert_eq!(pkg.abis.len(), kernels);
    assert_eq!(
        pkg.cubins.keys().collect::<Vec<_>>(),
        ["sm_100", "sm_90"],
        "one entry per architecture"
    );
    for cubins in pkg.cubins.values() {
        assert_eq!(cubins.len(), kernels);
        assert!(cubins.iter().all(|c| c.starts_with(b"\x7fELF")));
    }
    assert!(pkg.toolchain.starts_with("13.5"), "{}", pkg.toolchain);
    assert_eq!(pkg.program.signature.dims, ["batch"]);

    // One architecture: the same cubins, now from the cache (magic bytes, not the extension,
    // make a package); nothing is assembled, so no progress is shown.
    let one = d.join("mlp-sm90.bin");
    let summary = assert_ok(&tirc(
        &cache,
        &["compile", &mlp, "--arch", "sm_90", "-o", &s(&one)],
    ));
    assert!(summary.contains("4 kernels for sm_90 from "), "{summary}");
    assert!(
        summary.contains("kernel cache: 4 hits, 0 misses"),
        "{summary}"
    );
    let sm90 = package::read(&one).unwrap();
    assert_eq!(sm90.cubins.len(), 1);
    assert_eq!(sm90.cubins["sm_90"], pkg.cubins["sm_90"]);
    assert_eq!(sm90.program, pkg.program);

    // Running a package: the interface comes from the package and the GPU is asked for last.
    let (one, both) = (s(&one), s(&both));
    let refusals: [(Vec<&str>, &[&str]); 7] = [
        (
            vec![&one, "--random-inputs", "--seed", "3"],
            &["mlp-sm90.bin: backend `cuda` is unavailable: "],
        ),
        (
            vec![&both, "--random-inputs", "--backend", "cuda"],
            &["backend `cuda` is unavailable: "],
        ),
        (
            vec![&both, "--random-inputs", "--backend", "ref"],
            &["a package runs only on backend `cuda`, not `ref`"],
        ),
        (
            vec![&both, "--random-inputs", "--check"],
            &["--check", "backend `cuda`"],
        ),
        (vec![&both], &["no tensor for input `x` (f16[batch, 1024])"]),
        (
            vec![&both, "--random-inputs", "--dim", "rows=3"],
            &["the package has no symbolic dim `rows` (it has: batch)"],
        ),
        (
            vec![&both, "--random-inputs", "--input", "z=z.npy"],
            &["the package has no input or parameter `z` (it has: x, w1, b1, w2, b2)"],
        ),
    ];
    for (args, needles) in &refusals {
        run_refused(&cache, d, args, needles);
    }

    // A package is not a graph for the graph commands.
    assert_refused(
        &tirc(&cache, &["check", &both]),
        &["a tir package, not a graph"],
    );
    // Nor is it a graph to compile; an existing output survives a refused compile.
    let target = d.join("kept.tirpkg");
    std::fs::write(&target, b"keep me").unwrap();
    assert_refused(
        &tirc(
            &cache,
            &["compile", &both, "--arch", "sm_90", "-o", &s(&target)],
        ),
        &["a tir package, not a graph"],
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");

    // A flipped byte in a copy: corrupt, whatever the backend.
    let mut bytes = std::fs::read(&one).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    let corrupt = d.join("corrupt.tirpkg");
    std::fs::write(&corrupt, &bytes).unwrap();
    run_refused(
        &cache,
        d,
        &[&s(&corrupt), "--random-inputs"],
        &["corrupt.tirpkg: corrupt package: checksum mismatch"],
    );
    assert_eq!(
        dir_names(d),
        [
            "cache",
            "corrupt.tirpkg",
            "kept.tirpkg",
            "mlp-both.tirpkg",
            "mlp-sm90.bin"
        ]
    );
}

#[test]
fn bad_compile_arguments_are_refused_before_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let mlp = example("mlp.tir");
    let target = d.join("out.tirpkg");
    let t = s(&target);
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--arch", "sm90", "-o", &t],
            vec!["`sm90` is not a GPU architecture (expected sm_NN or sm_NNN"],
        ),
        (
            vec!["--arch", "sm_9", "-o", &t],
            vec!["`sm_9` is not a GPU architecture"],
        ),
        (
            vec!["--arch", "sm_90,compute_90", "-o", &t],
            vec!["`compute_90` is not a GPU architecture"],
        ),
        (
            vec!["--arch", "sm_1000", "-o", &t],
            vec!["`sm_1000` is not a GPU architecture"],
        ),
        (
            vec!["--arch", "sm_90a", "-o", &t],
            vec!["`sm_90a` is not a GPU architecture"],
        ),
        (
            vec!["--arch", "sm_90,", "-o", &t],
            vec!["an empty architecture"],
        ),
        (vec!["--arch", "", "-o", &t], vec!["an empty architecture"]),
        (
            vec!["--arch", "sm_90,sm_100,sm_90", "-o", &t],
            vec!["`sm_90` is given twice"],
        ),
        (
            vec!["--arch", "sm_90", "--backend", "ref", "-o", &t],
            vec!["tirc compile: backend `ref` has no ahead-of-time packages; use --backend cuda"],
        ),
        (
            vec!["--arch", "sm_90", "--backend", "tpu", "-o", &t],
            vec![
                "unknown backend `tpu` (known: ref, cuda)",
                "use --backend cuda",
            ],
        ),
        (vec!["--arch", "sm_90"], vec!["not provided", "--output"]),
        (vec!["-o", &t], vec!["not provided", "--arch"]),
        (
            vec!["--arch", "sm_90", "-o", &mlp],
            vec!["that is the graph being compiled"],
        ),
    ];
    for (args, needles) in cases {
        let mut all = vec!["compile", mlp.as_str()];
        all.extend(args);
        assert_refused(&tirc(&cache, &all), &needles);
    }
    let missing = d.join("missing.tir");
    assert_refused(
        &tirc(
            &cache,
            &["compile", &s(&missing), "--arch", "sm_90", "-o", &t],
        ),
        &["missing.tir"],
    );
    // A well-formed architecture that tileiras does not know fails in the compile, one line.
    assert_refused(
        &tirc(&cache, &["compile", &mlp, "--arch", "sm_99", "-o", &t]),
        &["backend `cuda` cannot compile this program", "sm_99"],
    );
    // Into a directory that does not exist, or onto a directory.
    let nested = d.join("no/such/dir/out.tirpkg");
    assert_refused(
        &tirc(
            &cache,
            &["compile", &mlp, "--arch", "sm_90", "-o", &s(&nested)],
        ),
        &["out.tirpkg: its directory does not exist"],
    );
    assert_refused(
        &tirc(&cache, &["compile", &mlp, "--arch", "sm_90", "-o", &s(d)]),
        &["it is a directory"],
    );
    // Nothing was written but the kernel cache (filled by the two compiles that ran).
    let left: Vec<String> = dir_names(d).into_iter().filter(|n| n != "cache").collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn running_a_graph_on_cuda_without_a_gpu_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    run_refused(
        &cache,
        d,
        &[&example("mlp.tir"), "--backend", "cuda", "--random-inputs"],
        &["mlp.tir: backend `cuda` is unavailable: "],
    );
    run_refused(
        &cache,
        d,
        &[
            &example("mlp.tir"),
            "--backend",
            "cuda",
            "--random-inputs",
            "--check",
        ],
        &["--check is the checking mode of backend `ref`"],
    );
    let trace = s(&d.join("trace.json"));
    run_refused(
        &cache,
        d,
        &[
            &example("mlp.tir"),
            "--backend",
            "cuda",
            "--random-inputs",
            "--profile",
            "--trace",
            &trace,
        ],
        &["mlp.tir: backend `cuda` is unavailable: "],
    );
    for flag in [&["--profile"][..], &["--trace", &trace][..]] {
        let mut args = vec![example("mlp.tir"), "--random-inputs".to_string()];
        args.extend(flag.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let message = format!(
            "{} times kernels on the GPU of backend `cuda`, not on backend `ref`",
            flag[0]
        );
        run_refused(&cache, d, &args, &[&message]);
    }
    assert!(!d.join("trace.json").exists());
    assert!(!cache.exists(), "no compile, so no cache");
}

/// `tirc compile --tensor-parallel 2`: a package of the program each device runs, with the plan
/// that cut it; here (no GPU) running it is refused, and so are mesh flags with a package and a
/// mesh that would split nothing (nothing written).
#[test]
fn a_package_for_a_mesh_holds_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let mlp = example("mlp.tir");
    let pkg = d.join("mlp_tp2.tirpkg");
    let args = ["--dim", "batch=8", "--arch", "sm_90", "-o", &s(&pkg)];
    let out = tirc(
        &cache,
        &[
            &["compile", mlp.as_str(), "--tensor-parallel", "2"][..],
            &args,
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("kernels on each of a mesh of 2 devices for sm_90"),
        "{}",
        stdout(&out)
    );
    let read = package::read(&pkg).unwrap();
    let mesh = read.mesh.as_ref().expect("a mesh package");
    assert_eq!(mesh.plan.world, 2);
    assert_eq!(
        mesh.plan.sharding("w1"),
        tir_graph::collective::Sharding::Split(1)
    );
    assert_eq!(
        mesh.whole
            .parameters
            .iter()
            .find(|p| p.0 == "w1")
            .unwrap()
            .1
            .to_string(),
        "f16[1024, 4096]"
    );
    assert!(read
        .program
        .kernels
        .iter()
        .any(|k| k.collective().is_some()));
    run_refused(
        &cache,
        d,
        &[&s(&pkg), "--random-inputs"],
        &["a mesh of 2 GPUs, but this machine has 0"],
    );
    run_refused(
        &cache,
        d,
        &[&s(&pkg), "--random-inputs", "--devices", "2"],
        &["a package's mesh is set when it is compiled"],
    );
    let three = d.join("mlp_tp3.tirpkg");
    let args = ["--dim", "batch=8", "--arch", "sm_90", "-o", &s(&three)];
    assert_refused(
        &tirc(
            &cache,
            &[
                &["compile", mlp.as_str(), "--tensor-parallel", "3"][..],
                &args,
            ]
            .concat(),
        ),
        &["tensor parallelism over 3 devices splits nothing"],
    );
    assert!(!three.exists());
}

#[test]
fn doctor_reports_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = tirc(&cache, &["doctor"]);
    let report = stdout(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{report}{err}");
    assert_eq!(
        err,
        "error: the CUDA backend is not usable here (see above)\n"
    );
    assert!(report.contains("toolchain: tileiras 13.5"), "{report}");
    assert!(report.contains("\ngpu: unavailable: "), "{report}");
    // This machine has neither library: each is named with what runs instead.
    let libraries = "\nlibraries: cuBLASLt (libcublasLt.so) was not found (plain matmuls run as \
                     generated kernels); cuDNN (libcudnn.so) was not found (attention and \
                     convolutions run as generated kernels)\n";
    assert!(report.contains(libraries), "{report}");
    assert!(
        report.contains(&format!("kernel cache: {} (", cache.display())),
        "{report}"
    );
}

/// A package cut short anywhere (inside its magic too), with any header field or payload byte
/// damaged, or of another format version, is refused by `tirc run` with exit 1 and one line
/// naming the file and what is wrong; nothing is run and no output directory is made.
#[test]
fn damaged_packages_are_refused_with_one_line() {
    use backend_cuda::package::{FORMAT_VERSION, HEADER_LEN};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let good = d.join("softmax.tirpkg");
    common::assert_ok(&tirc(
        &cache,
        &[
            "compile",
            &example("softmax.tir"),
            "--arch",
            "sm_90",
            "-o",
            &s(&good),
        ],
    ));
    let bytes = std::fs::read(&good).unwrap();
    let len = bytes.len();
    let other = |version: u32| {
        let mut b = bytes.clone();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        b
    };
    let flipped = |at: usize| {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        b
    };
    // A flipped bit 4 of the version's low byte, and the versions either side of this one.
    let reads = format!("this build reads version {FORMAT_VERSION}");
    let flipped_version = format!("package format version {}, {reads}", FORMAT_VERSION ^ 0x10);
    let old_version = format!("package format version {}, {reads}", FORMAT_VERSION - 1);
    let new_version = format!("package format version {}, {reads}", FORMAT_VERSION + 1);
    let expected_len = format!("declares {} payload bytes", len - HEADER_LEN);
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        (
            "empty",
            Vec::new(),
            vec!["corrupt package: the file is empty"],
        ),
        // Inside the magic: still a package by its extension, not a graph in text form.
        (
            "cut5",
            bytes[..5].to_vec(),
            vec!["corrupt package: truncated: 5 bytes"],
        ),
        (
            "cut20",
            bytes[..20].to_vec(),
            vec!["corrupt package: truncated: 20 bytes"],
        ),
        (
            "cut_header",
            bytes[..HEADER_LEN].to_vec(),
            vec!["corrupt package: truncated", &expected_len],
        ),
        (
            "cut_half",
            bytes[..len / 2].to_vec(),
            vec!["corrupt package: truncated", &expected_len],
        ),
        (
            "cut_last",
            bytes[..len - 1].to_vec(),
            vec!["corrupt package: truncated", &expected_len],
        ),
        ("magic", flipped(2), vec!["not a tir package (bad magic)"]),
        ("version", flipped(8), vec![&flipped_version]),
        ("old", other(FORMAT_VERSION - 1), vec![&old_version]),
        ("new", other(FORMAT_VERSION + 1), vec![&new_version]),
        ("length", flipped(12), vec!["corrupt package: "]),
        (
            "checksum",
            flipped(20),
            vec!["corrupt package: checksum mismatch"],
        ),
        (
            "payload",
            flipped(HEADER_LEN + 7),
            vec!["corrupt package: checksum mismatch"],
        ),
        (
            "last",
            flipped(len - 1),
            vec!["corrupt package: checksum mismatch"],
        ),
    ];
    for (name, damaged, needles) in cases {
        let path = d.join(format!("{name}.tirpkg"));
        std::fs::write(&path, &damaged).unwrap();
        let shown = format!("{}: ", s(&path));
        let mut all = vec![shown.as_str()];
        all.extend(needles);
        run_refused(&cache, d, &[&s(&path), "--random-inputs"], &all);
    }
}
