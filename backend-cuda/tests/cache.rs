//! The kernel cache under concurrency and faults, with real cubins from `tileiras` (no GPU):
//! 8 processes compiling overlapping kernel sets into one directory at once, writers killed
//! mid-entry, and entries truncated, bit-flipped or from another toolchain version. Whatever
//! happens, no compile fails, every kernel's cubin holds its entry, and every entry left
//! verifies.
//!
//! The processes are this test binary again, started with `TIR_CACHE_TEST_ROLE` set: then
//! [`child`] does the role's work, and the other tests return at once.

use backend_cuda::cache::{cache_key, decode_entry, CacheConfig, KernelCache, Lookup};
use backend_cuda::codegen::KernelAbi;
use backend_cuda::compile::ToolchainStamp;
use backend_cuda::tuning::Tuning;
use backend_cuda::{CacheUse, KernelCompiler, MatmulPolicy, Toolchain};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};
use tir_graph::testing::dir_names;
use tir_lower::Program;

const ROLE: &str = "TIR_CACHE_TEST_ROLE";
/// Which programs a compiling child compiles (`0,1`), and where it writes their cubins.
const PROGRAMS: &str = "TIR_CACHE_TEST_PROGRAMS";
const OUT: &str = "TIR_CACHE_TEST_OUT";
/// A file whose appearance starts every child's compile at once.
const GO: &str = "TIR_CACHE_TEST_GO";
const ARCH: &str = "sm_90";

/// Small graphs whose kernels overlap: the relu over f32[1000] is in three of them (the same
/// bytecode, so the same cache entry), the softmax in two.
const GRAPHS: &[&str] = &[
    "%0 = input \"x\" : f32[1000]\n\
     %1 = relu %0 : f32[1000]\n\
     %2 = exp %0 : f32[1000]\n\
     output \"r\" = %1\n\
     output \"e\" = %2\n",
    "%0 = input \"a\" : f32[1000]\n\
     %1 = relu %0 : f32[1000]\n\
     output \"y\" = %1\n\
     %2 = input \"x\" : f32[8, 1000]\n\
     %3 = reduce_max %2 {axes = [1], keepdims = true} : f32[8, 1]\n\
     %4 = sub %2, %3 : f32[8, 1000]\n\
     %5 = exp %4 : f32[8, 1000]\n\
     %6 = reduce_sum %5 {axes = [1], keepdims = true} : f32[8, 1]\n\
     %7 = div %5, %6 : f32[8, 1000]\n\
     output \"s\" = %7\n",
    "%0 = input \"a\" : f16[64, 128]\n\
     %1 = parameter \"w\" : f16[128, 96]\n\
     %2 = matmul %0, %1 : f16[64, 96]\n\
     output \"y\" = %2\n\
     %3 = input \"b\" : f32[1000]\n\
     %4 = relu %3 : f32[1000]\n\
     output \"z\" = %4\n",
    "%0 = input \"x\" : f32[8, 1000]\n\
     %1 = reduce_max %0 {axes = [1], keepdims = true} : f32[8, 1]\n\
     %2 = sub %0, %1 : f32[8, 1000]\n\
     %3 = exp %2 : f32[8, 1000]\n\
     %4 = reduce_sum %3 {axes = [1], keepdims = true} : f32[8, 1]\n\
     %5 = div %3, %4 : f32[8, 1000]\n\
     output \"s\" = %5\n\
     %6 = input \"g\" : bf16[300]\n\
     %7 = tanh %6 : bf16[300]\n\
     output \"t\" = %7\n",
];

fn programs() -> Vec<Program> {
    let target = backend_cuda::gpu_target(&Tuning::default(), &MatmulPolicy::default());
    GRAPHS
        .iter()
        .map(|source| {
            let graph = tir_graph::text::parse(source).unwrap();
            tir_lower::compile_graph(&graph, &target, &Default::default())
                .unwrap()
                .program
        })
        .collect()
}

/// The toolchain; a test that needs it fails without it, as the other toolchain tests do.
fn toolchain() -> Toolchain {
    Toolchain::locate().expect("the Tile IR toolchain (see README)")
}

/// A compiler over the cache in `dir`, its keys made with toolchain version `version`.
fn compiler_in(dir: &Path, toolchain: &Toolchain, version: &str) -> KernelCompiler {
    KernelCompiler {
        stamp: ToolchainStamp {
            version: version.to_string(),
            bytecode: toolchain.bytecode,
            fingerprint: None,
        },
        toolchain: Some(toolchain.clone()),
        cache: Some(KernelCache::new(CacheConfig {
            dir: dir.to_path_buf(),
            max_bytes: 1 << 30,
        })),
        tuning: Tuning::default(),
    }
}

/// The cubins of `program` for [`ARCH`], one per kernel.
fn compile(compiler: &KernelCompiler, program: &Program) -> (Vec<Vec<u8>>, CacheUse) {
    let (compiled, used) = compiler
        .compile(program, &[ARCH.to_string()])
        .unwrap_or_else(|e| panic!("{e}"));
    (
        compiled.cubins[ARCH].iter().map(|c| c.to_vec()).collect(),
        used,
    )
}

/// The entry files of `dir` by key.
fn entries(dir: &Path) -> BTreeMap<u64, Vec<u8>> {
    dir_names(dir)
        .into_iter()
        .filter_map(|n| {
            let key = u64::from_str_radix(n.strip_suffix(".cubin")?, 16).ok()?;
            Some((key, std::fs::read(dir.join(&n)).unwrap()))
        })
        .collect()
}

fn cache_at(dir: &Path) -> KernelCache {
    KernelCache::new(CacheConfig {
        dir: dir.to_path_buf(),
        max_bytes: 1 << 30,
    })
}

/// This test binary, running only [`child`], as `role`.
fn spawn(role: &str, env: &[(&str, &Path)], vars: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("starting {} as {role}: {e}", exe.display()))
}

/// Whether this process is one a test started: then the tests other than [`child`] do nothing.
fn in_child() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// Not a test of its own: the work of the processes the tests start (nothing without `ROLE`).
#[test]
fn child() {
    match std::env::var(ROLE).as_deref() {
        Err(_) => {}
        Ok("compile") => compile_child(),
        Ok("writer") => writer_child(),
        Ok(other) => panic!("{ROLE}={other:?} is no role"),
    }
}

/// Waits for the go file, then compiles the programs `PROGRAMS` names through the cache the
/// environment names (`KernelCompiler::locate`, as `tirc compile` does) and writes each cubin to
/// `OUT/p{program}-k{kernel}.cubin`.
fn compile_child() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let programs = programs();
    let chosen: Vec<usize> = var(PROGRAMS)
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    let (go, out) = (PathBuf::from(var(GO)), PathBuf::from(var(OUT)));
    let started = Instant::now();
    while !go.exists() {
        assert!(started.elapsed() < Duration::from_secs(120), "no go");
        std::thread::sleep(Duration::from_millis(2));
    }
    let compiler = KernelCompiler::locate(Tuning::default()).unwrap();
    for p in chosen {
        let (cubins, _) = compile(&compiler, &programs[p]);
        for (k, cubin) in cubins.iter().enumerate() {
            std::fs::write(out.join(format!("p{p}-k{k}.cubin")), cubin).unwrap();
        }
    }
}

/// Payload `key` of the writer: big, so that most of the writer's time is inside a write.
fn big_payload(key: u64) -> Vec<u8> {
    let mut payload = vec![(key as u8).wrapping_mul(37); 16 << 20];
    payload[..8].copy_from_slice(&key.to_le_bytes());
    payload
}

/// Writes entries 1 to 4 of the cache the environment names, again and again, until killed
/// (or a minute has passed, should the test that started it be gone); says `ready` before the
/// first.
fn writer_child() {
    let cache = KernelCache::new(CacheConfig::from_env().unwrap());
    let payloads: Vec<Vec<u8>> = (1..=4).map(big_payload).collect();
    println!("ready");
    let started = Instant::now();
    for round in 0u64.. {
        if started.elapsed() > Duration::from_secs(60) {
            break;
        }
        let key = 1 + round % 4;
        cache.put(key, &payloads[key as usize - 1]).unwrap();
    }
}

/// 8 processes compile overlapping sets of programs (each program in 4 of them, kernels
/// shared between programs) into one cache directory at once, twice: with room for every entry,
/// then for about half of them, so that they also evict each other's entries as they go. Each
/// process runs one `tileiras` at a time, so that a program's missing kernels are assembled as
/// one batch, and which kernels share a batch depends on what the others cached first. Every
/// process succeeds with, for each kernel, a cubin that holds its entry; what the directory
/// holds afterwards is entries that verify, each kernel's key a hit on such a cubin (every
/// key after the first round), and the toolchain stamp: no temp file.
#[test]
fn eight_processes_compile_into_one_cache_at_once() {
    if in_child() {
        return;
    }
    let toolchain = toolchain();
    let programs = programs();
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single");
    let alone = compiler_in(&single, &toolchain, &toolchain.version);
    let kernels: usize = programs.iter().map(|p| compile(&alone, p).0.len()).sum();
    let all_bytes: u64 = entries(&single).values().map(|e| e.len() as u64).sum();
    let mut keys = std::collections::BTreeSet::new();
    for p in &programs {
        for k in 0..p.kernels.len() {
            keys.insert((key_of(p, k, &toolchain), entry_of(p, k, &toolchain)));
        }
    }
    assert!(
        (5..kernels).contains(&keys.len()),
        "{} distinct kernels of {kernels}: the programs share some",
        keys.len()
    );

    for (round, max_bytes) in [(0, 1u64 << 30), (1, all_bytes / 2)] {
        let dir = tmp.path().join(format!("shared{round}"));
        let go = tmp.path().join(format!("go{round}"));
        let children: Vec<(usize, PathBuf, Child)> = (0..8)
            .map(|i| {
                let out = tmp.path().join(format!("out{round}-{i}"));
                std::fs::create_dir(&out).unwrap();
                let chosen = format!("{},{}", i % 4, (i + 1) % 4);
                let child = spawn(
                    "compile",
                    &[("TIR_CACHE_DIR", &dir), (GO, &go), (OUT, &out)],
                    &[
                        (PROGRAMS, chosen),
                        ("TIR_CACHE_MAX_BYTES", max_bytes.to_string()),
                        ("RAYON_NUM_THREADS", "1".to_string()),
                    ],
                );
                (i, out, child)
            })
            .collect();
        std::fs::write(&go, b"").unwrap();
        for (i, out, child) in children {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "round {round}, process {i}: {}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            for p in [i % 4, (i + 1) % 4] {
                for k in 0..programs[p].kernels.len() {
                    let got = std::fs::read(out.join(format!("p{p}-k{k}.cubin"))).unwrap();
                    let entry = entry_of(&programs[p], k, &toolchain);
                    assert!(
                        holds(&got, &entry),
                        "round {round}, process {i}: the cubin of program {p} kernel {k} lacks \
                         {entry}"
                    );
                }
            }
        }
        let left = entries(&dir);
        for (key, bytes) in &left {
            assert!(
                decode_entry(*key, bytes).is_ok(),
                "round {round}: {key:016x}"
            );
        }
        let cache = cache_at(&dir);
        let mut found = 0;
        for (key, entry) in &keys {
            match cache.get(*key) {
                Lookup::Hit(cubin) => {
                    assert!(
                        holds(&cubin, entry),
                        "round {round}: {key:016x} lacks {entry}"
                    );
                    found += 1;
                }
                other => assert!(round > 0, "round {round}: {key:016x}: {other:?}"),
            }
        }
        eprintln!(
            "round {round}: 8 processes, 16 program compiles of {kernels} kernels ({} distinct) \
             with room for {max_bytes} bytes: {} entries left, {found} kernels found, all verified",
            keys.len(),
            left.len()
        );
        let others: Vec<String> = dir_names(&dir)
            .into_iter()
            .filter(|n| !n.ends_with(".cubin"))
            .collect();
        assert_eq!(others, ["toolchain"], "round {round}: no temp files");
    }
}

/// Whether `cubin` holds the symbol `entry`.
fn holds(cubin: &[u8], entry: &str) -> bool {
    cubin.windows(entry.len()).any(|w| w == entry.as_bytes())
}

/// A writer killed (SIGKILL) while it writes leaves at most a temp file: every entry in the
/// directory is whole, no reader is handed part of one, and the temp file is removed once it is
/// old enough that its writer must be dead.
#[test]
fn a_writer_killed_mid_entry_leaves_no_entry_half_written() {
    if in_child() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    // Made here: a writer may be killed before its first put would make it.
    std::fs::create_dir(&dir).unwrap();
    let cache = cache_at(&dir);
    let payloads: BTreeMap<u64, Vec<u8>> = (1..=4).map(|k| (k, big_payload(k))).collect();
    let is_temp = |n: &String| n.starts_with('.') && n.ends_with(".tmp");
    let mut kills = 0;
    let mut inside_a_write = 0;
    // Kill at varying points, at least 6 times and until some kill landed inside a write and
    // some entry was written whole.
    let mut temps = 0;
    while kills < 6 || ((inside_a_write == 0 || cache.stats().entries == 0) && kills < 40) {
        let mut child = spawn("writer", &[("TIR_CACHE_DIR", &dir)], &[]);
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        // The harness prints `test child ... ` before the test runs: the word ends a line.
        let ready = std::io::BufRead::lines(stdout).any(|l| l.is_ok_and(|l| l.ends_with("ready")));
        assert!(ready, "the writer did not start");
        std::thread::sleep(Duration::from_millis(3 + 47 * kills % 400));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed");
        kills += 1;
        let temps_before = temps;
        let now = dir_names(&dir);
        temps = now.iter().filter(|n| is_temp(n)).count();
        inside_a_write += usize::from(temps > temps_before);
        for name in &now {
            assert!(
                is_temp(name) || name.ends_with(".cubin"),
                "unexpected file {name}"
            );
        }
        for (key, payload) in &payloads {
            match cache.get(*key) {
                Lookup::Hit(bytes) => assert!(&bytes == payload, "entry {key} is not whole"),
                Lookup::Miss => {}
                Lookup::Corrupt(why) => panic!("entry {key} was half written: {why}"),
            }
        }
    }
    eprintln!(
        "{kills} writers killed, {inside_a_write} inside a write; {} whole entries left",
        cache.stats().entries
    );
    assert!(
        inside_a_write > 0,
        "{kills} kills and none inside a write (the writer writes 16 MiB at a time)"
    );
    assert!(
        cache.stats().entries > 0,
        "{kills} kills and no entry written whole"
    );
    let stats = cache.stats();
    let temps: Vec<String> = dir_names(&dir).into_iter().filter(is_temp).collect();
    assert_eq!(
        stats.entries + temps.len(),
        dir_names(&dir).len(),
        "temp files are no entries"
    );
    // A temp file of a dead writer goes with the next put once it is old.
    for t in &temps {
        let file = std::fs::File::options()
            .write(true)
            .open(dir.join(t))
            .unwrap();
        let old = SystemTime::now() - backend_cuda::cache::STALE_TEMP_AGE - Duration::from_secs(1);
        file.set_modified(old).unwrap();
    }
    cache.put(9, b"after").unwrap();
    assert!(
        dir_names(&dir).iter().all(|n| !is_temp(n)),
        "{:?}",
        dir_names(&dir)
    );
    assert_eq!(cache.get(9), Lookup::Hit(b"after".to_vec()));
}

/// Damage to the entry of one kernel of a real program, and what the next compile does: it
/// reports the entry corrupt (or misses it), never hands out its bytes, assembles the cubin again
/// (the same bytes as before), and leaves an entry that verifies.
#[test]
fn damaged_entries_are_never_used_and_are_rebuilt() {
    if in_child() {
        return;
    }
    let toolchain = toolchain();
    let program = &programs()[3];
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let compiler = compiler_in(&dir, &toolchain, &toolchain.version);
    let (want, used) = compile(&compiler, program);
    let kernels = want.len();
    assert!(kernels >= 2, "{kernels} kernels");
    assert_eq!((used.misses, used.hits), (kernels, 0));
    let key = key_of(program, 0, &toolchain);
    let path = dir.join(format!("{key:016x}.cubin"));
    let second =
        std::fs::read(dir.join(format!("{:016x}.cubin", key_of(program, 1, &toolchain)))).unwrap();
    let good = std::fs::read(&path).unwrap();
    assert_eq!(decode_entry(key, &good).unwrap(), &want[0][..]);
    let len = good.len();

    let cut = |to: usize| good[..to].to_vec();
    let flip = |at: usize| {
        let mut b = good.clone();
        b[at] ^= 0x04;
        b
    };
    let mut appended = good.clone();
    appended.push(0);
    let mut zeroed = good.clone();
    zeroed[32..].fill(0);
    let damaged = [
        ("empty", cut(0)),
        ("cut in the magic", cut(5)),
        ("cut in the header", cut(31)),
        ("header only", cut(32)),
        ("cut in half", cut(len / 2)),
        ("last byte cut", cut(len - 1)),
        ("a byte appended", appended),
        ("magic flipped", flip(0)),
        ("format version flipped", flip(7)),
        ("key flipped", flip(12)),
        ("length flipped", flip(16)),
        ("checksum flipped", flip(30)),
        ("first payload byte flipped", flip(32)),
        ("middle payload byte flipped", flip(len / 2)),
        ("last payload byte flipped", flip(len - 1)),
        ("zeroed payload", zeroed),
        ("another kernel's entry", second),
    ];
    for (what, bytes) in &damaged {
        std::fs::write(&path, bytes).unwrap();
        let (got, used) = compile(&compiler, program);
        assert_eq!(got, want, "{what}: the cubins");
        assert_eq!(
            (used.corrupt, used.misses, used.hits),
            (1, 1, kernels - 1),
            "{what}: reported corrupt and rebuilt"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            good,
            "{what}: the entry is whole again"
        );
    }

    // What a writer killed mid-entry leaves, for the kernel it was writing: a half-written temp
    // file beside a missing entry, or an entry cut short where the rename was not atomic (a
    // crash before the data reached the disk). The next compile misses or finds it corrupt.
    let temp = dir.join(format!(".{key:016x}.dead.tmp"));
    std::fs::write(&temp, &good[..len / 2]).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (got, used) = compile(&compiler, program);
    assert_eq!(got, want);
    assert_eq!(
        (used.corrupt, used.misses),
        (0, 1),
        "a temp file is no entry"
    );
    std::fs::write(&path, &good[..len - 100]).unwrap();
    let (got, used) = compile(&compiler, program);
    assert_eq!(got, want);
    assert_eq!((used.corrupt, used.misses), (1, 1));
    assert_eq!(std::fs::read(&path).unwrap(), good);
    assert!(
        temp.exists(),
        "a fresh temp file may be a live writer's: kept"
    );
}

/// The bytecode and ABI of kernel `k` of `program`.
fn bytecode_of(program: &Program, k: usize, toolchain: &Toolchain) -> (Vec<u8>, KernelAbi) {
    let kernel = &program.kernels[k];
    let hints = Tuning::default().hints_for(program, kernel);
    backend_cuda::compile::kernel_bytecode(kernel, &hints, toolchain.bytecode).unwrap()
}

/// The cache key of kernel `k` of `program` for [`ARCH`].
fn key_of(program: &Program, k: usize, toolchain: &Toolchain) -> u64 {
    cache_key(
        &bytecode_of(program, k, toolchain).0,
        ARCH,
        &toolchain.version,
    )
}

/// The entry name of kernel `k` of `program`.
fn entry_of(program: &Program, k: usize, toolchain: &Toolchain) -> String {
    bytecode_of(program, k, toolchain).1.entry
}

/// Entries of another toolchain version are never used: its keys differ, so a compile with this
/// version misses them all (then both sets of entries coexist); another version's entry found
/// under this version's key is refused as corrupt and rebuilt.
#[test]
fn entries_of_another_toolchain_version_are_never_used() {
    if in_child() {
        return;
    }
    let toolchain = toolchain();
    let program = &programs()[0];
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let older = compiler_in(&dir, &toolchain, "13.4.0");
    let (_, used) = compile(&older, program);
    let kernels = used.misses + used.hits;
    let old_entries = entries(&dir);
    assert_eq!(old_entries.len(), used.misses);

    let current = compiler_in(&dir, &toolchain, &toolchain.version);
    let (want, used) = compile(&current, program);
    assert_eq!(
        (used.hits, used.corrupt),
        (0, 0),
        "no entry of 13.4.0 is used"
    );
    assert_eq!(used.misses + used.hits, kernels);
    let all = entries(&dir);
    assert_eq!(
        all.len(),
        2 * old_entries.len(),
        "both versions' entries coexist"
    );

    // Each of this version's entries replaced by one of 13.4.0 (a copied or renamed file).
    let new_keys: Vec<u64> = all
        .keys()
        .filter(|k| !old_entries.contains_key(k))
        .copied()
        .collect();
    let old = old_entries.values().next().unwrap();
    for key in &new_keys {
        std::fs::write(dir.join(format!("{key:016x}.cubin")), old).unwrap();
    }
    let (got, used) = compile(&current, program);
    assert_eq!(got, want);
    assert_eq!(
        (used.corrupt, used.misses),
        (new_keys.len(), new_keys.len())
    );
    for key in &new_keys {
        assert_eq!(Some(&entries(&dir)[key]), all.get(key), "rebuilt");
    }
}
