//! Compiling a program's kernels: each tile kernel to Tile IR bytecode (module `codegen`), then
//! to a cubin per target architecture with `tileiras`, through the kernel cache.
//!
//! Takes a verified [`Program`]. Guarantees one [`KernelAbi`] per kernel and, per requested
//! architecture, one cubin per kernel in kernel order, each either assembled now or read back
//! from the cache after its checksum verified.

use crate::cache::{cache_key, KernelCache, Lookup};
use crate::codegen::{generate, KernelAbi, KernelHints};
use crate::toolchain::{Toolchain, ToolchainError, INSTALL_HINT};
use crate::tuning::Tuning;
use cutile_ir::bytecode::BytecodeVersion;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tir_lower::tile::TileKernel;
use tir_lower::{BackendError, Program};

/// A program's kernels, compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledKernels {
    pub abis: Vec<KernelAbi>,
    /// Per architecture: one cubin per kernel.
    pub cubins: BTreeMap<String, Vec<Vec<u8>>>,
    /// The `tileiras` release that built them.
    pub toolchain: String,
}

/// What happened in the cache while compiling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUse {
    pub hits: usize,
    pub misses: usize,
    pub corrupt: usize,
}

fn unsupported(reason: String) -> BackendError {
    BackendError::Unsupported {
        backend: "cuda".into(),
        reason,
    }
}

/// The Tile IR bytecode of one kernel with `hints` in bytecode version `version`, and its ABI.
pub fn kernel_bytecode(
    kernel: &TileKernel,
    hints: &KernelHints,
    version: BytecodeVersion,
) -> Result<(Vec<u8>, KernelAbi), BackendError> {
    let generated =
        generate(kernel, hints).map_err(|e| unsupported(format!("kernel {}: {e}", kernel.name)))?;
    let bytes = cutile_ir::bytecode::write_bytecode_version(&generated.module, version)
        .map_err(|e| unsupported(format!("kernel {}: writing bytecode: {e}", kernel.name)))?;
    Ok((bytes, generated.abi))
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
    Cached(Vec<u8>),
    Missing { key: u64, corrupt: bool },
}

/// The cubin of `bytecode` for `arch` when the cache holds a verified one.
fn look_up(bytecode: &[u8], arch: &str, compiler: &KernelCompiler) -> Found {
    let key = cache_key(bytecode, arch, &compiler.stamp.version);
    let lookup = compiler.cache.as_ref().map_or(Lookup::Miss, |c| c.get(key));
    match lookup {
        Lookup::Hit(bytes) => Found::Cached(bytes),
        Lookup::Miss => Found::Missing {
            key,
            corrupt: false,
        },
        Lookup::Corrupt(_) => Found::Missing { key, corrupt: true },
    }
}

/// Assembles a cubin the cache did not hold and stores it there.
fn assemble(
    bytecode: &[u8],
    arch: &str,
    kernel: &str,
    key: u64,
    compiler: &KernelCompiler,
) -> Result<Vec<u8>, BackendError> {
    let toolchain = compiler.toolchain.as_ref().ok_or_else(|| {
        unsupported(format!(
            "kernel {kernel} for {arch} is not in the kernel cache and tileiras was not found; \
             {INSTALL_HINT}"
        ))
    })?;
    let bytes = toolchain
        .assemble(bytecode, arch, kernel)
        .map_err(|e| unsupported(e.to_string()))?;
    if let Some(cache) = &compiler.cache {
        // A cache that cannot be written only costs time on the next compile.
        let _ = cache.put(key, &bytes);
    }
    Ok(bytes)
}

/// The toolchain release and bytecode version kernels are compiled with: enough to generate
/// bytecode and compute cache keys without `tileiras` itself. Recorded in the cache directory
/// with the fingerprint of the `tileiras` that reported them, so that a later process finding
/// the same binary skips asking it again (two process launches, most of a warm compile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolchainStamp {
    pub version: String,
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
    pub toolchain: Option<Toolchain>,
    pub stamp: ToolchainStamp,
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
    /// cubins to assemble is known before the first `tileiras` starts; then one `tileiras` runs
    /// per core (rayon's threads) over every missing (kernel, architecture) pair, the largest
    /// bytecode first.
    pub fn compile_reporting(
        &self,
        program: &Program,
        archs: &[String],
        progress: &dyn CompileProgress,
    ) -> Result<(CompiledKernels, CacheUse), BackendError> {
        let generated: Vec<(Vec<u8>, KernelAbi, Vec<Found>)> = program
            .kernels
            .par_iter()
            .map(|kernel| {
                let hints = self.tuning.hints_for(program, kernel);
                let (bytecode, abi) = kernel_bytecode(kernel, &hints, self.stamp.bytecode)?;
                let found = archs
                    .iter()
                    .map(|arch| look_up(&bytecode, arch, self))
                    .collect();
                Ok((bytecode, abi, found))
            })
            .collect::<Result<_, BackendError>>()?;
        // Each missing cubin once: kernels with the same bytecode (a program's
        // repeated layers) share one, the later ones counted as hits.
        let mut used = CacheUse::default();
        let mut missing: Vec<(u64, usize, usize)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (k, (_, _, found)) in generated.iter().enumerate() {
            for (a, f) in found.iter().enumerate() {
                match f {
                    Found::Cached(_) => used.hits += 1,
                    Found::Missing { key, corrupt } => {
                        used.corrupt += usize::from(*corrupt);
                        if seen.insert(*key) {
                            used.misses += 1;
                            missing.push((*key, k, a));
                        } else {
                            used.hits += 1;
                        }
                    }
                }
            }
        }
        // Largest bytecode first, each thread taking the next when it is free: the longest
        // assemblies (attention, matmuls) start early instead of ending the compile alone.
        missing.sort_by_key(|&(_, k, _)| std::cmp::Reverse(generated[k].0.len()));
        let mut assembled: HashMap<u64, Vec<u8>> = HashMap::new();
        if !missing.is_empty() {
            let total = missing.len();
            progress.assembling(total);
            let done = std::sync::atomic::AtomicUsize::new(0);
            let result = missing
                .iter()
                .par_bridge()
                .map(|&(key, k, a)| {
                    let (name, arch) = (&program.kernels[k].name, &archs[a]);
                    let cubin = assemble(&generated[k].0, arch, name, key, self);
                    let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    progress.assembled(name, arch, cubin.is_ok(), n, total);
                    cubin.map(|c| (key, c))
                })
                .collect::<Result<HashMap<u64, Vec<u8>>, BackendError>>();
            progress.finished();
            assembled = result?;
        }
        let mut cubins: BTreeMap<String, Vec<Vec<u8>>> =
            archs.iter().map(|a| (a.clone(), Vec::new())).collect();
        let mut abis = Vec::with_capacity(generated.len());
        for (k, (_, abi, found)) in generated.into_iter().enumerate() {
            abis.push(abi);
            for (arch, f) in archs.iter().zip(found) {
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
