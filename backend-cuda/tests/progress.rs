//! Cold compiles as a front end sees them: the cubins missing from the cache are counted before
//! the first `tileiras` starts, each is assembled once (kernels with the same bytecode share
//! one) and reported as it finishes; a warm compile reports nothing.

use backend_cuda::cache::{CacheConfig, KernelCache};
use backend_cuda::compile::ToolchainStamp;
use backend_cuda::tuning::Tuning;
use backend_cuda::{CompileProgress, KernelCompiler, Toolchain};
use std::sync::Mutex;
use tir_lower::compile_graph;

/// Everything a compile told, in order.
#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

impl Recorded {
    fn push(&self, event: String) {
        self.0.lock().unwrap().push(event);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

impl CompileProgress for Recorded {
    fn assembling(&self, total: usize) {
        self.push(format!("assembling {total}"));
    }
    fn assembled(&self, kernel: &str, arch: &str, ok: bool, done: usize, total: usize) {
        self.push(format!("assembled {done}/{total} {kernel} {arch} {ok}"));
    }
    fn finished(&self) {
        self.push("finished".into());
    }
}

/// A compiler with the toolchain and a cache in `dir`.
fn compiler_in(dir: &std::path::Path) -> KernelCompiler {
    let toolchain = Toolchain::locate().expect("the Tile IR toolchain (see README)");
    KernelCompiler {
        stamp: ToolchainStamp {
            version: toolchain.version.clone(),
            bytecode: toolchain.bytecode,
            fingerprint: None,
        },
        toolchain: Some(toolchain),
        cache: Some(KernelCache::new(CacheConfig {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 30,
        })),
        tuning: Tuning::default(),
    }
}

/// The program of the graph in text form `text` for the GPU target.
fn program_of(text: &str) -> tir_lower::Program {
    let graph = tir_graph::text::parse(text).unwrap();
    let target =
        backend_cuda::gpu_target(&Tuning::default(), &backend_cuda::MatmulPolicy::default());
    compile_graph(&graph, &target, &Default::default())
        .unwrap()
        .program
}

#[test]
fn cold_compiles_report_each_missing_cubin_once() {
    // Two independent relus of the same type: two kernels, one bytecode.
    let program = program_of(
        "%0 = input \"a\" : f32[1000]\n\
         %1 = input \"b\" : f32[1000]\n\
         %2 = relu %0 : f32[1000]\n\
         %3 = relu %1 : f32[1000]\n\
         %4 = exp %0 : f32[1000]\n\
         output \"y\" = %2\n\
         output \"z\" = %3\n\
         output \"e\" = %4\n",
    );
    assert_eq!(program.kernels.len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let compiler = compiler_in(dir.path());
    let archs = ["sm_90".to_string(), "sm_100".to_string()];
    let progress = Recorded::default();

    let (cold, used) = compiler
        .compile_reporting(&program, &archs, &progress)
        .unwrap();
    assert_eq!((used.misses, used.hits, used.corrupt), (4, 2, 0));
    let events = progress.take();
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(events[0], "assembling 4");
    assert_eq!(events[5], "finished");
    let mut done: Vec<&str> = events[1..5]
        .iter()
        .map(|e| {
            assert!(e.ends_with(" true"), "{e}");
            e.split(' ').nth(1).unwrap()
        })
        .collect();
    done.sort_unstable();
    assert_eq!(done, ["1/4", "2/4", "3/4", "4/4"]);
    for arch in &archs {
        let cubins = &cold.cubins[arch];
        assert_eq!(cubins.len(), 3);
        assert!(cubins.iter().all(|c| c.starts_with(b"\x7fELF")));
    }

    // Warm: every cubin from the cache, the same bytes, nothing reported.
    let (warm, used) = compiler
        .compile_reporting(&program, &archs, &progress)
        .unwrap();
    assert_eq!((used.misses, used.hits), (0, 6));
    assert!(progress.take().is_empty());
    assert_eq!(warm, cold);

    // A failing architecture: reported as failed, then finished; the error names it.
    let err = compiler
        .compile_reporting(&program, &["sm_99".to_string()], &progress)
        .unwrap_err();
    assert!(err.to_string().contains("sm_99"), "{err}");
    let events = progress.take();
    assert_eq!(events.first().map(String::as_str), Some("assembling 2"));
    assert_eq!(events.last().map(String::as_str), Some("finished"));
    assert!(
        events[1..events.len() - 1]
            .iter()
            .all(|e| e.ends_with(" false")),
        "{events:?}"
    );
}

/// Three independent elementwise kernels of three different bytecodes.
const THREE_KERNELS: &str = "%0 = input \"a\" : f32[1000]\n\
    %1 = input \"b\" : f32[1000]\n\
    %2 = input \"c\" : f16[300]\n\
    %3 = relu %0 : f32[1000]\n\
    %4 = exp %1 : f32[1000]\n\
    %5 = tanh %2 : f16[300]\n\
    output \"r\" = %3\n\
    output \"e\" = %4\n\
    output \"t\" = %5\n";

/// On one core a program's missing cubins are assembled by one `tileiras` run: its kernels
/// share one cubin that holds each one's entry, the cache keeps that cubin once (a reference
/// under each kernel's key), and a warm compile reads the same bytes back for each.
#[test]
fn on_one_core_a_program_is_assembled_in_one_run() {
    let program = program_of(THREE_KERNELS);
    assert_eq!(program.kernels.len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let archs = ["sm_90".to_string()];
    let progress = Recorded::default();
    let one_core = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();

    let (cold, used) = one_core
        .install(|| compiler_in(dir.path()).compile_reporting(&program, &archs, &progress))
        .unwrap();
    assert_eq!((used.misses, used.hits), (3, 0));
    let events = progress.take();
    assert_eq!(events.first().map(String::as_str), Some("assembling 3"));
    assert_eq!(events.last().map(String::as_str), Some("finished"));
    let cubins = &cold.cubins["sm_90"];
    assert!(
        cubins.iter().all(|c| std::sync::Arc::ptr_eq(c, &cubins[0])),
        "one cubin for the three kernels"
    );
    let entries: std::collections::BTreeSet<&str> =
        cold.abis.iter().map(|a| a.entry.as_str()).collect();
    assert_eq!(entries.len(), 3, "distinct entries: {entries:?}");
    for entry in entries {
        assert!(
            cubins[0]
                .windows(entry.len())
                .any(|w| w == entry.as_bytes()),
            "the cubin holds {entry}"
        );
    }
    let files = tir_graph::testing::dir_names(dir.path());
    let stored: Vec<&String> = files.iter().filter(|n| n.ends_with(".cubin")).collect();
    assert_eq!(stored.len(), 4, "three references and the cubin: {files:?}");

    let (warm, used) = compiler_in(dir.path())
        .compile_reporting(&program, &archs, &progress)
        .unwrap();
    assert_eq!((used.misses, used.hits), (0, 3));
    assert!(progress.take().is_empty());
    assert_eq!(warm, cold);
}

/// When `tileiras` rejects a batch, its kernels are assembled one by one, so that the error
/// names the kernel it rejects rather than the batch.
#[cfg(unix)]
#[test]
fn a_rejected_batch_names_the_kernel_tileiras_rejects() {
    use std::os::unix::fs::PermissionsExt;
    use tir_lower::tile::TileOp;
    let program = program_of(THREE_KERNELS);
    let real = Toolchain::locate().expect("the Tile IR toolchain (see README)");
    let tanh = program
        .kernels
        .iter()
        .find(|k| {
            let mut found = false;
            k.walk(&mut |s| {
                found |= matches!(
                    s.op,
                    TileOp::Unary {
                        op: tir_graph::UnaryOp::Tanh,
                        ..
                    }
                )
            });
            found
        })
        .expect("a tanh kernel");
    let hints = Tuning::default().hints_for(&program, tanh);
    let (_, abi) = backend_cuda::compile::kernel_bytecode(tanh, &hints, real.bytecode).unwrap();
    // A tileiras that refuses every module holding the tanh kernel's entry.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tileiras");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor last; do :; done\n\
             if grep -q '{}' \"$last\"; then echo 'error: no tanh today' >&2; exit 1; fi\n\
             exec '{}' \"$@\"\n",
            abi.entry,
            real.tileiras.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut compiler = compiler_in(&dir.path().join("cache"));
    compiler.toolchain = Some(Toolchain {
        tileiras: script,
        ..real
    });
    let progress = Recorded::default();
    let one_core = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let err = one_core
        .install(|| compiler.compile_reporting(&program, &["sm_90".to_string()], &progress))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "tileiras rejected kernel {} for sm_90: error: no tanh today",
            tanh.name
        )),
        "{err}"
    );
    let events = progress.take();
    assert_eq!(events.first().map(String::as_str), Some("assembling 3"));
    assert!(
        events[1..events.len() - 1]
            .iter()
            .all(|e| e.ends_with(" false")),
        "{events:?}"
    );
}
