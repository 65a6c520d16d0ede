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
use std::collections::BTreeMap;
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

/// One cubin for `arch`, from the cache when it holds a verified one.
fn cubin(
    bytecode: &[u8],
    arch: &str,
    kernel: &str,
    compiler: &KernelCompiler,
    used: &std::sync::Mutex<CacheUse>,
) -> Result<Vec<u8>, BackendError> {
    let cache = compiler.cache.as_ref();
    let key = cache_key(bytecode, arch, &compiler.stamp.version);
    let count = |f: fn(&mut CacheUse)| {
        if let Ok(mut u) = used.lock() {
            f(&mut u)
        }
    };
    if let Some(cache) = cache {
        match cache.get(key) {
            Lookup::Hit(bytes) => {
                count(|u| u.hits += 1);
                return Ok(bytes);
            }
            Lookup::Corrupt(_) => count(|u| u.corrupt += 1),
            Lookup::Miss => {}
        }
    }
    count(|u| u.misses += 1);
    let toolchain = compiler.toolchain.as_ref().ok_or_else(|| {
        unsupported(format!(
            "kernel {kernel} for {arch} is not in the kernel cache and tileiras was not found; \
             {INSTALL_HINT}"
        ))
    })?;
    let bytes = toolchain
        .assemble(bytecode, arch, kernel)
        .map_err(|e| unsupported(e.to_string()))?;
    if let Some(cache) = cache {
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
        compile_kernels(program, archs, self)
    }
}

/// Compiles every kernel of `program` for each of `archs` (see the module doc).
fn compile_kernels(
    program: &Program,
    archs: &[String],
    compiler: &KernelCompiler,
) -> Result<(CompiledKernels, CacheUse), BackendError> {
    let used = std::sync::Mutex::new(CacheUse::default());
    let per_kernel: Vec<(KernelAbi, Vec<Vec<u8>>)> = program
        .kernels
        .par_iter()
        .map(|kernel| {
            let hints = compiler.tuning.hints_for(program, kernel);
            let (bytecode, abi) = kernel_bytecode(kernel, &hints, compiler.stamp.bytecode)?;
            let cubins = archs
                .iter()
                .map(|arch| cubin(&bytecode, arch, &kernel.name, compiler, &used))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((abi, cubins))
        })
        .collect::<Result<_, BackendError>>()?;
    let mut cubins: BTreeMap<String, Vec<Vec<u8>>> =
        archs.iter().map(|a| (a.clone(), Vec::new())).collect();
    let mut abis = Vec::with_capacity(per_kernel.len());
    for (abi, per_arch) in per_kernel {
        abis.push(abi);
        for (arch, c) in archs.iter().zip(per_arch) {
            cubins.entry(arch.clone()).or_default().push(c);
        }
    }
    let used = used.into_inner().unwrap_or_default();
    Ok((
        CompiledKernels {
            abis,
            cubins,
            toolchain: compiler.stamp.version.clone(),
        },
        used,
    ))
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
