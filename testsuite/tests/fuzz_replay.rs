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

/// Writing the seeds replaces each target folder's files (a stale seed, left by a format that
/// renamed its seeds, is removed) and touches nothing else: not a folder of seeds it does not
/// make (the ONNX ones), not a subfolder.
#[test]
fn writing_the_seeds_removes_stale_ones_only() {
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("tir_file/stale-format-4.tir");
    let foreign = dir.path().join("onnx_import/model.onnx");
    let nested = dir.path().join("tir_file/keep/inner");
    for (path, bytes) in [(&stale, &b"old"[..]), (&foreign, b"onnx"), (&nested, b"x")] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let written = seeds::write(dir.path()).expect("the seeds are written");
    assert_eq!(written, seeds::seeds().unwrap().len());
    assert!(!stale.exists(), "the stale seed is removed");
    assert_eq!(std::fs::read(&foreign).unwrap(), b"onnx");
    assert!(nested.exists());
    let tir_files = std::fs::read_dir(dir.path().join("tir_file"))
        .unwrap()
        .count();
    assert!(tir_files > 1, "the tir_file seeds are written");
}

/// The mutations of [`mutated_seeds_go_through`]: a splitmix64 stream, so that a failure
/// names a case that reproduces.
struct Mutator(u64);

impl Mutator {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `seed` with one edit (one time in eight up to three): a bit flipped, a byte set to an edge value, a cut, a
    /// range deleted or repeated, random bytes inserted, or the tail of `other` spliced on.
    fn mutate(&mut self, seed: &[u8], other: &[u8]) -> Vec<u8> {
        let mut bytes = seed.to_vec();
        let edits = if self.below(8) == 0 {
            1 + self.below(3)
        } else {
            1
        };
        for _ in 0..edits {
            let len = bytes.len();
            let at = if len == 0 { 0 } else { self.below(len) };
            match self.below(7) {
                0 if len > 0 => bytes[at] ^= 1 << self.below(8),
                1 if len > 0 => bytes[at] = [0, 0xff, 0x7f, 0x80, 1][self.below(5)],
                2 => bytes.truncate(at),
                3 if len > 0 => {
                    let end = (at + 1 + self.below(16)).min(len);
                    bytes.drain(at..end);
                }
                4 if len > 0 => {
                    let end = (at + 1 + self.below(64)).min(len);
                    let copy = bytes[at..end].to_vec();
                    bytes.splice(at..at, copy);
                }
                5 => {
                    let random: Vec<u8> =
                        (0..1 + self.below(8)).map(|_| self.next() as u8).collect();
                    bytes.splice(at..at, random);
                }
                _ => {
                    let from = if other.is_empty() {
                        0
                    } else {
                        self.below(other.len())
                    };
                    bytes.truncate(at);
                    bytes.extend_from_slice(&other[from..]);
                }
            }
        }
        bytes
    }
}

/// A smoke of the fuzz targets on stable, for CI (which does not run cargo-fuzz): every
/// target's committed seeds mutated, deterministically, [`MUTANTS_PER_TARGET`] times in all;
/// each mutant must go through its target without a panic and, but for the pipeline's,
/// without one allocation larger than [`allocation_bound`]. The cargo-fuzz runs
/// (`scripts/fuzz.sh`) search far wider; this catches a reader that a change made panic on
/// inputs near its seeds.
#[test]
fn mutated_seeds_go_through() {
    const MUTANTS_PER_TARGET: usize = 10_000;
    for (t, (name, run)) in TARGETS.iter().enumerate() {
        let seeds: Vec<Vec<u8>> = files(&fuzz_dir().join("seeds").join(name))
            .iter()
            .map(|p| std::fs::read(p).expect("a seed reads"))
            .collect();
        assert!(!seeds.is_empty(), "fuzz target {name} has no seeds");
        let mut mutator = Mutator(0x5eed_0000 + t as u64);
        let mut accepted = 0;
        for case in 0..MUTANTS_PER_TARGET {
            let seed = &seeds[case % seeds.len()];
            let other = &seeds[mutator.below(seeds.len())];
            let bytes = mutator.mutate(seed, other);
            let outcome = std::panic::catch_unwind(|| largest_allocation(|| run(&bytes)));
            let Ok((read, largest)) = outcome else {
                let path = std::env::temp_dir().join(format!("tir-fuzz-smoke-{name}-{case}"));
                let _ = std::fs::write(&path, &bytes);
                panic!(
                    "fuzz target {name} panicked on mutant {case} (written to {})",
                    path.display()
                );
            };
            assert!(
                *name == "pipeline" || largest <= allocation_bound(bytes.len()),
                "{name} mutant {case}: {largest} bytes allocated at once for {} bytes of input",
                bytes.len()
            );
            accepted += usize::from(read);
        }
        eprintln!("{name}: {accepted} of {MUTANTS_PER_TARGET} mutants accepted");
    }
}
