//! The fuzz targets (`testsuite::fuzz`) on stable, as CI runs them: every committed seed in
//! `fuzz/seeds/TARGET` must be accepted by its reader (a seed the reader refuses has gone stale:
//! rewrite them with `cargo run -p testsuite --bin tir-fuzz-seeds`), and every input a fuzzer
//! once crashed on, kept in `fuzz/regressions/TARGET`, must now go through without a panic and,
//! but for the pipeline's, without one allocation larger than [`allocation_bound`].

use std::path::{Path, PathBuf};
use testsuite::fuzz::{seeds, Target, TARGETS};
use tir_graph::testing::{largest_allocation, RecordingAllocator};

#[global_allocator]
static ALLOCATOR: RecordingAllocator = RecordingAllocator;

/// The largest single allocation a reader may make for `len` bytes of input: 64 bytes per
/// byte (what `tir_graph::file::decode_bincode` allows), at least 1 MiB.
fn allocation_bound(len: usize) -> usize {
    (64 * len).max(1 << 20)
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files in `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = listing
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn target(name: &str) -> Target {
    TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"))
        .1
}

#[test]
fn every_committed_seed_is_accepted() {
    for (name, run) in TARGETS {
        let seeds = files(&fuzz_dir().join("seeds").join(name));
        assert!(!seeds.is_empty(), "fuzz target {name} has no seeds");
        for path in seeds {
            let bytes = std::fs::read(&path).expect("a seed reads");
            assert!(
                run(&bytes),
                "{}: the {name} reader refuses this seed (rewrite the seeds with \
                 `cargo run -p testsuite --bin tir-fuzz-seeds`)",
                path.display()
            );
        }
    }
}

#[test]
fn every_regression_input_goes_through() {
    let mut replayed = 0;
    for (name, run) in TARGETS {
        for path in files(&fuzz_dir().join("regressions").join(name)) {
            let bytes = std::fs::read(&path).expect("an input reads");
            // A panic fails the test; this line says which input it was.
            eprintln!("replaying {}", path.display());
            let (_, largest) = largest_allocation(|| run(&bytes));
            assert!(
                *name == "pipeline" || largest <= allocation_bound(bytes.len()),
                "{}: {largest} bytes allocated at once for {} bytes of input",
                path.display(),
                bytes.len()
            );
            replayed += 1;
        }
    }
    eprintln!("{replayed} regression inputs");
}

#[test]
fn generated_seeds_are_accepted() {
    let seeds = seeds::seeds().expect("the seeds are written");
    for (name, _) in TARGETS.iter().filter(|(n, _)| *n != "onnx_import") {
        assert!(
            seeds.iter().any(|s| s.target == *name),
            "no seed is generated for {name}"
        );
    }
    for s in &seeds {
        assert!(
            target(s.target)(&s.bytes),
            "{}/{} is refused",
            s.target,
            s.name
        );
    }
}
