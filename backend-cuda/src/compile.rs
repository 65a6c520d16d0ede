//! Compiling a program's kernels: each tile kernel to Tile IR bytecode (module `codegen`), then
//! to a cubin per target architecture with `tileiras`, through the kernel cache.
//!
//! Takes a verified [`Program`]. Guarantees one [`KernelAbi`] per kernel, each entry named
//! for its kernel's kind and content, and, per requested architecture, one cubin per kernel in
//! kernel order that holds the kernel's entry: assembled now, alone or in a batch with other
//! kernels (one module of several entries, one `tileiras` run, one cubin the batch shares), or
//! read back from the cache after its checksum verified.

use crate::cache::{cache_key, fnv64, KernelCache, Lookup};
use crate::codegen::{generate, generate_entry, rename_entry, KernelAbi, KernelHints};
use crate::toolchain::{Toolchain, ToolchainError, INSTALL_HINT};
use crate::tuning::Tuning;
use cutile_ir::bytecode::BytecodeVersion;
use cutile_ir::ir::Module;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tir_lower::tile::{TileKernel, TileOp};
use tir_lower::{BackendError, Program};

/// A cubin, shared by the kernels of one batch.
pub type Cubin = std::sync::Arc<[u8]>;

/// A program's kernels, compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledKernels {
    /// One per kernel, in kernel order: how each is launched.
    pub abis: Vec<KernelAbi>,
    /// Per architecture: one cubin per kernel (kernels assembled in one batch share one).
    pub cubins: BTreeMap<String, Vec<Cubin>>,
    /// The `tileiras` release that built them.
    pub toolchain: String,
}

/// What happened in the cache while compiling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUse {
    /// Cubins (one per kernel and architecture) the cache had, or that an identical kernel of
    /// the program needs too.
    pub hits: usize,
    /// Distinct cubins the cache lacked: assembled by `tileiras`, then stored.
    pub misses: usize,
    /// Cache entries that failed verification: deleted, and compiled again.
    pub corrupt: usize,
}

fn unsupported(reason: String) -> BackendError {
    BackendError::Unsupported {
        backend: "cuda".into(),
        reason,
    }
}

/// The Tile IR bytecode of one kernel with `hints` in bytecode version `version`, and its ABI.
///
/// The entry is named for the kernel's kind and content (`tir_matmul_` and the FNV-1a 64 of the
/// bytecode it would have under `tir_matmul`): kernels that differ only in position share their
/// bytecode and cache entries, and distinct kernels can share a module (`assemble_batch`).
pub fn kernel_bytecode(
    kernel: &TileKernel,
    hints: &KernelHints,
    version: BytecodeVersion,
) -> Result<(Vec<u8>, KernelAbi), BackendError> {
    let mut generated =
        generate(kernel, hints).map_err(|e| unsupported(format!("kernel {}: {e}", kernel.name)))?;
    let by_kind = module_bytecode(&generated.module, version, &kernel.name)?;
    let entry = format!("{}_{:016x}", generated.abi.entry, fnv64(&by_kind));
    rename_entry(&mut generated, entry);
    let bytes = module_bytecode(&generated.module, version, &kernel.name)?;
    Ok((bytes, generated.abi))
}

/// `module` as bytecode of `version`; `what` names it in the error.
fn module_bytecode(
    module: &Module,
    version: BytecodeVersion,
    what: &str,
) -> Result<Vec<u8>, BackendError> {
    cutile_ir::bytecode::write_bytecode_version(module, version)
        .map_err(|e| unsupported(format!("kernel {what}: writing bytecode: {e}")))
}

/// What compiling tells as it goes, so that a front end can show progress (`tirc` draws a bar
/// on a terminal). Only assembling with `tileiras` is reported: it is what takes seconds (cache
/// hits take milliseconds in all). Methods are called from the compiling threads.
pub trait CompileProgress: Send + Sync {
    /// `total` cubins were not in the cache and are about to be assembled; called once per
    /// compile, before the first, and only when `total` is at least 1.
    fn assembling(&self, total: usize);
    /// The cubin of `kernel` for `arch` was assembled (or failed, then `ok` is false): `done`
    /// of `total` so far.
    fn assembled(&self, kernel: &str, arch: &str, ok: bool, done: usize, total: usize);
    /// Every cubin that was to be assembled is, or the compile failed; called once after
    /// [`CompileProgress::assembling`].
    fn finished(&self);
}

/// The progress of a compile nobody watches.
pub struct Silent;

impl CompileProgress for Silent {
    fn assembling(&self, _: usize) {}
    fn assembled(&self, _: &str, _: &str, _: bool, _: usize, _: usize) {}
    fn finished(&self) {}
}

/// One kernel for one architecture after the cache was asked: its cubin, or the key it is
/// missing under (and whether a corrupt entry was dropped there).
enum Found {
    Cached(Cubin),
    Missing { key: u64, corrupt: bool },
}

/// The cubin of `bytecode` for `arch` when the cache holds a verified one.
fn look_up(bytecode: &[u8], arch: &str, compiler: &KernelCompiler) -> Found {
    let key = cache_key(bytecode, arch, &compiler.stamp.version);
    let lookup = compiler.cache.as_ref().map_or(Lookup::Miss, |c| c.get(key));
    match lookup {
        Lookup::Hit(bytes) => Found::Cached(bytes.into()),
        Lookup::Miss => Found::Missing {
            key,
            corrupt: false,
        },
        Lookup::Corrupt(_) => Found::Missing { key, corrupt: true },
    }
}

/// The most kernels one `tileiras` run assembles together. Each run costs about 0.15 s before
/// its first kernel (2 cores: the decoder block's nine kernels besides its attention took
/// 2.6-2.8 s as one module, 3.6-3.9 s one by one), while a batch finishes only when its
/// slowest member does and a rejected member sends every member of its batch through again.
pub const MAX_BATCH: usize = 8;

/// An estimate of the milliseconds `tileiras` takes on `kernel`'s entry beyond its start:
/// about 1.3 per statement outside loops, 300 for a kernel with loops and 10 per statement in
/// them. Fitted on the decoder block's kernels on 2 cores (a row reduction of 25 statements 0.24
/// s in all, its matrix-vector products of 27-40 statements 0.4-0.69 s, its attention with 126
/// statements in its key loop 1.9 s, the attention's split sum of 139 statements 0.33 s).
fn assembly_cost(kernel: &TileKernel) -> u64 {
    fn walk(block: &tir_lower::tile::Block, in_loop: bool, cost: &mut u64) {
        for s in &block.stmts {
            match &s.op {
                TileOp::For { body, .. } => {
                    if !in_loop {
                        *cost += 300;
                    }
                    walk(body, true, cost);
                }
                _ => *cost += if in_loop { 10 } else { 1 },
            }
        }
    }
    let mut cost = 0;
    walk(&kernel.body, false, &mut cost);
    cost
}

/// A cubin the cache did not hold: its cache key, the kernel and the architecture (indexes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Missing {
    key: u64,
    kernel: usize,
    arch: usize,
}

/// Groups `missing` cubins into batches for one `tileiras` run each: one architecture and at
/// most [`MAX_BATCH`] kernels a batch, and at least `threads` batches of each architecture
/// while there are cubins enough, so that every core has a run. Cubins go costliest first
/// (`cost` of its kernel, [`assembly_cost`]) into the batch of that architecture with the
/// smallest cost so far and room left. The batches come costliest first.
fn batches(missing: &[Missing], cost: impl Fn(usize) -> u64, threads: usize) -> Vec<Vec<Missing>> {
    let cost = |m: &Missing| cost(m.kernel);
    let mut all: Vec<(u64, Vec<Missing>)> = Vec::new();
    let archs: std::collections::BTreeSet<usize> = missing.iter().map(|m| m.arch).collect();
    for arch in archs {
        let mut cubins: Vec<Missing> = missing.iter().filter(|m| m.arch == arch).copied().collect();
        cubins.sort_by_key(|m| std::cmp::Reverse(cost(m)));
        let count = threads
            .max(cubins.len().div_ceil(MAX_BATCH))
            .min(cubins.len());
        let mut bins: Vec<(u64, Vec<Missing>)> = vec![(0, Vec::new()); count];
        for m in cubins {
            let bin = bins
                .iter_mut()
                .filter(|(_, members)| members.len() < MAX_BATCH)
                .min_by_key(|(c, _)| *c)
                .expect("count bins of MAX_BATCH hold every cubin");
            bin.0 += cost(&m);
            bin.1.push(m);
        }
        all.extend(bins);
    }
    all.sort_by_key(|(c, _)| std::cmp::Reverse(*c));
    all.into_iter().map(|(_, members)| members).collect()
}

/// One kernel's bytecode, ABI and hints, and per architecture what the cache held for it.
struct KernelCode {
    bytecode: Vec<u8>,
    abi: KernelAbi,
    hints: KernelHints,
    /// [`assembly_cost`].
    cost: u64,
    found: Vec<Found>,
}

/// Assembles the cubins of `batch` and stores them in the cache: a batch of several kernels as
/// one module holding each kernel's entry, so that every member's cubin is that one cubin.
/// When `tileiras` rejects such a module, each member is assembled alone, so that an error
/// names the kernel it is about. Returns each member's key and cubin, in batch order.
fn assemble_batch(
    batch: &[Missing],
    program: &Program,
    code: &[KernelCode],
    archs: &[String],
    compiler: &KernelCompiler,
) -> Result<Vec<(u64, Cubin)>, BackendError> {
    let arch = &archs[batch[0].arch];
    let toolchain = compiler.toolchain.as_ref().ok_or_else(|| {
        let kernel = &program.kernels[batch[0].kernel].name;
        unsupported(format!(
            "kernel {kernel} for {arch} is not in the kernel cache and tileiras was not found; \
             {INSTALL_HINT}"
        ))
    })?;
    if let [one] = batch {
        let name = &program.kernels[one.kernel].name;
        let cubin = toolchain
            .assemble(&code[one.kernel].bytecode, arch, name)
            .map_err(|e| unsupported(e.to_string()))?;
        if let Some(cache) = &compiler.cache {
            // A cache that cannot be written only costs time on the next compile.
            let _ = cache.put(one.key, &cubin);
        }
        return Ok(vec![(one.key, cubin.into())]);
    }
    let mut module = Module::new("tir");
    for m in batch {
        let (kernel, c) = (&program.kernels[m.kernel], &code[m.kernel]);
        module = generate_entry(module, kernel, &c.hints, c.abi.entry.clone())
            .map_err(|e| unsupported(format!("kernel {}: {e}", kernel.name)))?
            .module;
    }
    let names: Vec<&str> = batch
        .iter()
        .map(|m| program.kernels[m.kernel].name.as_str())
        .collect();
    let bytecode = module_bytecode(&module, compiler.stamp.bytecode, &names.join(", "))?;
    match toolchain.assemble(&bytecode, arch, &names.join(", ")) {
        Ok(cubin) => {
            if let Some(cache) = &compiler.cache {
                let keys: Vec<u64> = batch.iter().map(|m| m.key).collect();
                // As for one kernel: a cache that cannot be written only costs time.
                let _ = cache.put_shared(&keys, &cubin);
            }
            let cubin = Cubin::from(cubin);
            Ok(batch.iter().map(|m| (m.key, cubin.clone())).collect())
        }
        Err(_) => {
            let mut cubins = Vec::with_capacity(batch.len());
            for m in batch {
                let alone = std::slice::from_ref(m);
                cubins.extend(assemble_batch(alone, program, code, archs, compiler)?);
            }
            Ok(cubins)
        }
    }
}

/// The toolchain release and bytecode version kernels are compiled with: enough to generate
/// bytecode and compute cache keys without `tileiras` itself. Recorded in the cache directory
/// with the fingerprint of the `tileiras` that reported them, so that a later process finding
/// the same binary skips asking it again (two process launches, most of a warm compile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainStamp {
    /// The `tileiras` release (`13.5.37`).
    pub version: String,
    /// The newest bytecode version both it and `cutile-ir` speak.
    pub bytecode: BytecodeVersion,
    /// The binary's size, modification time and path, when known.
    pub fingerprint: Option<String>,
}

/// The file in a cache directory naming the toolchain that filled it.
const STAMP_FILE: &str = "toolchain";

/// `SIZE MTIME-NANOS PATH` of a file, or `None` when its metadata cannot be read.
fn fingerprint(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{} {} {}",
        meta.len(),
        modified.as_nanos(),
        path.display()
    ))
}

impl ToolchainStamp {
    fn of(toolchain: &Toolchain) -> ToolchainStamp {
        ToolchainStamp {
            version: toolchain.version.clone(),
            bytecode: toolchain.bytecode,
            fingerprint: fingerprint(&toolchain.tileiras),
        }
    }

    /// `13.5.37 13.5`, then the fingerprint if there is one.
    fn to_line(&self) -> String {
        let mut line = format!(
            "{} {}.{}",
            self.version, self.bytecode.major, self.bytecode.minor
        );
        if let Some(f) = &self.fingerprint {
            line = format!("{line} {f}");
        }
        line + "\n"
    }

    fn parse(line: &str) -> Option<ToolchainStamp> {
        let mut words = line.trim_end_matches('\n').splitn(3, ' ');
        let version = words.next()?.to_string();
        let (major, minor) = words.next()?.split_once('.')?;
        let bytecode = BytecodeVersion {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            tag: 0,
        };
        let fingerprint = words.next().map(str::to_string);
        BytecodeVersion::SUPPORTED
            .contains(&bytecode)
            .then_some(ToolchainStamp {
                version,
                bytecode,
                fingerprint,
            })
    }

    fn read(dir: &Path) -> Option<ToolchainStamp> {
        ToolchainStamp::parse(&std::fs::read_to_string(dir.join(STAMP_FILE)).ok()?)
    }

    /// The toolchain at `tileiras` when this stamp was made from that very binary.
    fn toolchain_at(&self, tileiras: &Path) -> Option<Toolchain> {
        let same = self.fingerprint.is_some() && self.fingerprint == fingerprint(tileiras);
        same.then(|| Toolchain {
            tileiras: tileiras.to_path_buf(),
            version: self.version.clone(),
            bytecode: self.bytecode,
        })
    }

    /// Records the stamp in `dir` (atomically; a cache that cannot be written only costs time).
    fn write(&self, dir: &Path) {
        if ToolchainStamp::read(dir).as_ref() == Some(self) || std::fs::create_dir_all(dir).is_err()
        {
            return;
        }
        if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) {
            if std::io::Write::write_all(&mut tmp, self.to_line().as_bytes()).is_ok() {
                let _ = tmp.persist(dir.join(STAMP_FILE));
            }
        }
    }
}

/// What compiling kernels needs (no GPU): `tileiras` and the kernel cache, or only a cache that
/// a machine with the toolchain filled (it then serves hits and refuses misses). Shareable
/// between threads.
pub struct KernelCompiler {
    /// The `tileiras` to assemble with; `None` where only the cache serves.
    pub toolchain: Option<Toolchain>,
    /// The release and bytecode version kernels are generated for.
    pub stamp: ToolchainStamp,
    /// The kernel cache, if any.
    pub cache: Option<KernelCache>,
    /// The hints each kernel is compiled with.
    pub tuning: Tuning,
}

impl KernelCompiler {
    /// The located toolchain (see [`Toolchain::locate`]) and the cache the environment names
    /// (see [`crate::cache::CacheConfig::from_env`]); without a toolchain, the cache alone when
    /// it records the toolchain that filled it. Kernels are compiled with `tuning`'s hints. The
    /// toolchain's versions come from the cache's stamp when it was made from the same binary.
    pub fn locate(tuning: Tuning) -> Result<KernelCompiler, String> {
        let config = crate::cache::CacheConfig::from_env().map_err(|e| e.to_string())?;
        let recorded = ToolchainStamp::read(&config.dir);
        let found = Toolchain::find();
        let reused = match (&found, &recorded) {
            (Some(path), Some(stamp)) => stamp.toolchain_at(path).map(|t| (t, stamp.clone())),
            _ => None,
        };
        let (toolchain, stamp) = match (reused, found, recorded) {
            (Some((t, stamp)), _, _) => (Some(t), stamp),
            (None, Some(path), _) => {
                let t = Toolchain::at(&path).map_err(|e| e.to_string())?;
                let stamp = ToolchainStamp::of(&t);
                stamp.write(&config.dir);
                (Some(t), stamp)
            }
            (None, None, Some(stamp)) => (None, stamp),
            (None, None, None) => return Err(ToolchainError::NotFound.to_string()),
        };
        Ok(KernelCompiler {
            toolchain,
            stamp,
            cache: Some(KernelCache::new(config)),
            tuning,
        })
    }

    /// Compiles every kernel of `program` for each of `archs` (see the module doc).
    pub fn compile(
        &self,
        program: &Program,
        archs: &[String],
    ) -> Result<(CompiledKernels, CacheUse), BackendError> {
        self.compile_reporting(program, archs, &Silent)
    }

    /// [`KernelCompiler::compile`], telling `progress` about the cubins it assembles.
    ///
    /// Bytecode is generated and the cache asked for every kernel first, so that the number of
    /// cubins to assemble is known before the first `tileiras` starts; then the missing cubins
    /// are grouped into batches and one `tileiras` runs per core (rayon's threads), each
    /// taking the next batch when it is free, the costliest first.
    pub fn compile_reporting(
        &self,
        program: &Program,
        archs: &[String],
        progress: &dyn CompileProgress,
    ) -> Result<(CompiledKernels, CacheUse), BackendError> {
        let code: Vec<KernelCode> = program
            .kernels
            .par_iter()
            .map(|kernel| {
                let hints = self.tuning.hints_for(program, kernel);
                let (bytecode, abi) = kernel_bytecode(kernel, &hints, self.stamp.bytecode)?;
                let found = archs
                    .iter()
                    .map(|arch| look_up(&bytecode, arch, self))
                    .collect();
                Ok(KernelCode {
                    bytecode,
                    abi,
                    hints,
                    cost: assembly_cost(kernel),
                    found,
                })
            })
            .collect::<Result<_, BackendError>>()?;
        // Each missing cubin once: kernels with the same bytecode (a program's
        // repeated layers) share one, the later ones counted as hits.
        let mut used = CacheUse::default();
        let mut missing: Vec<Missing> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (kernel, c) in code.iter().enumerate() {
            for (arch, f) in c.found.iter().enumerate() {
                match f {
                    Found::Cached(_) => used.hits += 1,
                    Found::Missing { key, corrupt } => {
                        used.corrupt += usize::from(*corrupt);
                        if seen.insert(*key) {
                            used.misses += 1;
                            missing.push(Missing {
                                key: *key,
                                kernel,
                                arch,
                            });
                        } else {
                            used.hits += 1;
                        }
                    }
                }
            }
        }
        let assembled = self.assemble_missing(program, &code, archs, &missing, progress)?;
        let mut cubins: BTreeMap<String, Vec<Cubin>> =
            archs.iter().map(|a| (a.clone(), Vec::new())).collect();
        let mut abis = Vec::with_capacity(code.len());
        for (k, c) in code.into_iter().enumerate() {
            abis.push(c.abi);
            for (arch, f) in archs.iter().zip(c.found) {
                let cubin = match f {
                    Found::Cached(bytes) => bytes,
                    Found::Missing { key, .. } => {
                        assembled.get(&key).cloned().ok_or_else(|| {
                            unsupported(format!("kernel {k} for {arch}: no cubin was assembled"))
                        })?
                    }
                };
                cubins.entry(arch.clone()).or_default().push(cubin);
            }
        }
        Ok((
            CompiledKernels {
                abis,
                cubins,
                toolchain: self.stamp.version.clone(),
            },
            used,
        ))
    }

    /// Assembles the `missing` cubins in batches (see [`KernelCompiler::compile_reporting`]),
    /// telling `progress` about each; returns them by cache key.
    fn assemble_missing(
        &self,
        program: &Program,
        code: &[KernelCode],
        archs: &[String],
        missing: &[Missing],
        progress: &dyn CompileProgress,
    ) -> Result<HashMap<u64, Cubin>, BackendError> {
        if missing.is_empty() {
            return Ok(HashMap::new());
        }
        let total = missing.len();
        progress.assembling(total);
        let done = std::sync::atomic::AtomicUsize::new(0);
        let threads = rayon::current_num_threads();
        let result = batches(missing, |k| code[k].cost, threads)
            .into_iter()
            .par_bridge()
            .map(|batch| {
                let cubins = assemble_batch(&batch, program, code, archs, self);
                let n = done.fetch_add(batch.len(), std::sync::atomic::Ordering::Relaxed);
                for (i, m) in batch.iter().enumerate() {
                    let (name, arch) = (&program.kernels[m.kernel].name, &archs[m.arch]);
                    progress.assembled(name, arch, cubins.is_ok(), n + i + 1, total);
                }
                cubins
            })
            .collect::<Result<Vec<Vec<(u64, Cubin)>>, BackendError>>();
        progress.finished();
        Ok(result?.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp_of(binary: &Path) -> ToolchainStamp {
        ToolchainStamp::of(&Toolchain {
            tileiras: binary.to_path_buf(),
            version: "13.5.37".into(),
            bytecode: BytecodeVersion::SUPPORTED[0],
        })
    }

    #[test]
    fn a_stamp_vouches_for_the_binary_it_was_made_from_only() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("tile ir/tileiras");
        std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
        std::fs::write(&binary, b"v1").unwrap();
        let stamp = stamp_of(&binary);
        stamp.write(dir.path());
        let read = ToolchainStamp::read(dir.path()).expect("the stamp reads back");
        assert_eq!(read, stamp, "a path with a space survives");
        let t = read.toolchain_at(&binary).expect("same binary");
        assert_eq!(
            (t.version.as_str(), t.bytecode),
            ("13.5.37", stamp.bytecode)
        );
        std::fs::write(&binary, b"version 2").unwrap();
        assert!(
            read.toolchain_at(&binary).is_none(),
            "a changed binary is asked again"
        );
        let elsewhere = dir.path().join("tileiras");
        std::fs::write(&elsewhere, b"v1").unwrap();
        assert!(
            read.toolchain_at(&elsewhere).is_none(),
            "another binary is asked"
        );
    }

    #[test]
    fn a_stamp_without_fingerprint_vouches_for_nothing() {
        let read = ToolchainStamp::parse("13.5.37 13.5\n").expect("the old form reads");
        assert_eq!(read.fingerprint, None);
        assert!(read.toolchain_at(Path::new("/bin/sh")).is_none());
        assert!(
            ToolchainStamp::parse("13.5.37 99.1\n").is_none(),
            "unknown bytecode"
        );
    }
}
