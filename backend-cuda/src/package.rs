//! AOT packages (`.tirpkg`): a lowered [`Program`] with its kernels' ABIs and cubins for one or
//! more GPU architectures, so a machine with a GPU but no compiler toolchain can run it.
//!
//! Layout (little-endian): a 28-byte header, then the payload.
//!
//! | bytes  | field                                        |
//! |--------|----------------------------------------------|
//! | 0..8   | magic `b"TIRPKG\0\0"`                        |
//! | 8..12  | format version, `u32` ([`FORMAT_VERSION`])   |
//! | 12..20 | payload length, `u64`                        |
//! | 20..28 | FNV-1a 64 checksum of the payload, `u64`     |
//! | 28..   | payload: the [`Package`] as bincode 2 (serde, standard config) |
//!
//! Guarantees: [`write()`] goes to a temporary file in the target's directory and renames it over
//! the target, so no reader ever sees a partially written package, and it refuses to write an
//! inconsistent one. [`read`] and [`from_bytes`] refuse a foreign, truncated, corrupt,
//! wrong-version or inconsistent file with one [`PackageError`] line naming the file and the
//! reason, without panicking and without allocating more than a small multiple of what the
//! file holds (up to [`MAX_PAYLOAD_LEN`]); [`Package::cubins_for`] refuses an architecture the package lacks.

use crate::cache::fnv64;
use crate::codegen::KernelAbi;
use crate::compile::Cubin;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use tir_graph::collective::ShardPlan;
use tir_lower::{Program, Signature};

/// The package format version this build writes and reads (2: kernel ABIs say whether the
/// entry is persistent; 3: library matmuls may read B transposed; 4: kernels count their
/// products' flops; 5: `approx_exp` takes a shift and a factor; 6: library matmuls may add a
/// residual; 7: cubins shared by several kernels, as batches assemble them, are stored once;
/// 8: dims may be expressions; 9: a kernel that reads dims has a second entry for dims that
/// 16 divides; 10: a program cut for a mesh carries its sharding plan; 11: a convolution kernel
/// may carry a cuDNN library call; 12: a user's unsafe kernel may write a scattered region, and
/// a custom kernel several outputs).
pub const FORMAT_VERSION: u32 = 12;
/// The first bytes of every package.
pub const MAGIC: [u8; 8] = *b"TIRPKG\0\0";
/// Magic, version, payload length, checksum.
pub const HEADER_LEN: usize = 28;
/// The largest payload written or read. The decoder's allocations are bounded by the payload's
/// length ([`tir_graph::file::decode_bincode`]), so that a length field inside a (checksum-valid
/// but crafted) payload cannot ask for much more memory than the file holds.
pub const MAX_PAYLOAD_LEN: u64 = 1 << 30;

/// A program with everything needed to run it on a GPU without compiling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Package {
    /// The program, as lowering made it.
    pub program: Program,
    /// One per kernel of `program`, in order.
    pub abis: Vec<KernelAbi>,
    /// Per architecture (`sm_90`, `sm_100`, ...): one cubin per kernel, in kernel order;
    /// kernels assembled in one batch share one (stored once, `shared_cubins`).
    #[serde(with = "shared_cubins")]
    pub cubins: BTreeMap<String, Vec<Cubin>>,
    /// The tileiras release that built the cubins (e.g. "13.5.37").
    pub toolchain: String,
    /// For a program cut for a mesh (every device runs it on its shards): how the whole graph's
    /// sources are laid over the devices and its signature; `None` for one GPU.
    pub mesh: Option<PackageMesh>,
}

/// How a package's program runs on a mesh ([`tir_lower::mesh::ShardedExecutable::from_plan`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PackageMesh {
    /// Each source's sharding and the mesh's size.
    pub plan: ShardPlan,
    /// The whole graph's signature: what a run takes and returns.
    pub whole: Signature,
}

/// Why a package could not be read, written or used.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// The file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The file does not start with the package magic.
    #[error("{path}: not a tir package (bad magic)")]
    NotAPackage {
        /// The file.
        path: String,
    },
    /// The file is of another package format version.
    #[error("{path}: package format version {found}, this build reads version {expected}")]
    Version {
        /// The file.
        path: String,
        /// The version in the header.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// The file is truncated, fails its checksum or does not decode, or the package is
    /// inconsistent.
    #[error("{path}: corrupt package: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The package has no cubins for the GPU's architecture.
    #[error("{path}: the package has no cubins for {arch} (it has: {available})")]
    WrongArch {
        /// The file.
        path: String,
        /// The architecture asked for (`sm_90`).
        arch: String,
        /// The architectures it has, listed.
        available: String,
    },
}

impl Package {
    /// Checks internal consistency: one ABI per kernel, at least one architecture, one non-empty
    /// cubin per kernel for each. `Err` says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let kernels = self.program.kernels.len();
        if self.abis.len() != kernels {
            return Err(format!(
                "{} kernel ABIs for {kernels} kernels",
                self.abis.len()
            ));
        }
        if self.cubins.is_empty() {
            return Err("no cubins for any architecture".to_string());
        }
        let world = self.mesh.as_ref().map_or(1, |m| m.plan.world);
        tir_lower::mesh::check_world(&self.program, world)?;
        for (arch, cubins) in &self.cubins {
            if cubins.len() != kernels {
                return Err(format!(
                    "{} cubins for {arch}, for {kernels} kernels",
                    cubins.len()
                ));
            }
            if let Some(i) = cubins.iter().position(|c| c.is_empty()) {
                let name = &self.program.kernels[i].name;
                return Err(format!("the {arch} cubin of kernel {i} ({name}) is empty"));
            }
        }
        Ok(())
    }

    /// The cubins for `arch`, one per kernel in kernel order. `path` names the package in the
    /// message when it has none for `arch`.
    pub fn cubins_for(&self, arch: &str, path: &Path) -> Result<&[Cubin], PackageError> {
        match self.cubins.get(arch) {
            Some(cubins) => Ok(cubins),
            None => {
                let archs: Vec<&str> = self.cubins.keys().map(String::as_str).collect();
                let available = if archs.is_empty() {
                    "none".to_string()
                } else {
                    archs.join(", ")
                };
                Err(PackageError::WrongArch {
                    path: shown(path),
                    arch: arch.to_string(),
                    available,
                })
            }
        }
    }
}

/// A package's cubins as stored: each distinct cubin once, and per architecture the index of
/// each kernel's. Decoding makes one [`Cubin`] per stored image that every kernel using it
/// shares, so that memory stays a small multiple of the payload (an index is a byte or more).
mod shared_cubins {
    use crate::compile::Cubin;
    use serde::de::Error;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::{BTreeMap, HashMap};

    #[derive(Serialize)]
    struct Stored<'a> {
        images: Vec<&'a [u8]>,
        kernels: BTreeMap<&'a str, Vec<u32>>,
    }

    #[derive(Deserialize)]
    struct Owned {
        images: Vec<Vec<u8>>,
        kernels: BTreeMap<String, Vec<u32>>,
    }

    pub fn serialize<S: Serializer>(
        cubins: &BTreeMap<String, Vec<Cubin>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut images: Vec<&[u8]> = Vec::new();
        let mut index: HashMap<&[u8], u32> = HashMap::new();
        let mut kernels = BTreeMap::new();
        for (arch, per_kernel) in cubins {
            let indexes = per_kernel
                .iter()
                .map(|cubin| {
                    *index.entry(cubin).or_insert_with(|| {
                        images.push(cubin);
                        (images.len() - 1) as u32
                    })
                })
                .collect();
            kernels.insert(arch.as_str(), indexes);
        }
        Stored { images, kernels }.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, Vec<Cubin>>, D::Error> {
        let owned = Owned::deserialize(deserializer)?;
        let images: Vec<Cubin> = owned.images.into_iter().map(Cubin::from).collect();
        let mut cubins = BTreeMap::new();
        for (arch, indexes) in owned.kernels {
            let per_kernel = indexes
                .iter()
                .map(|&i| {
                    images.get(i as usize).cloned().ok_or_else(|| {
                        D::Error::custom(format!(
                            "{arch} names cubin {i} of {} stored",
                            images.len()
                        ))
                    })
                })
                .collect::<Result<Vec<Cubin>, D::Error>>()?;
            cubins.insert(arch, per_kernel);
        }
        Ok(cubins)
    }
}

/// The package's file bytes. Does not validate (see [`write()`]); fails only if the payload
/// does not encode or exceeds [`MAX_PAYLOAD_LEN`].
pub fn to_bytes(pkg: &Package) -> Result<Vec<u8>, String> {
    let payload = bincode::serde::encode_to_vec(pkg, bincode::config::standard())
        .map_err(|e| format!("the package does not encode: {e}"))?;
    let len = payload.len() as u64;
    if len > MAX_PAYLOAD_LEN {
        return Err(format!(
            "the payload of {len} bytes exceeds the {MAX_PAYLOAD_LEN}-byte limit"
        ));
    }
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&fnv64(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// `N` bytes at `at`, if the slice has them.
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Checks the header of `bytes` (magic, version, payload length bound) and returns the declared
/// payload length and the stored checksum. Needs only the header, so [`read`] can refuse a
/// foreign or oversized file before reading the rest of it.
fn parse_header(bytes: &[u8], path: &Path) -> Result<(u64, u64), PackageError> {
    let truncated = || PackageError::Corrupt {
        path: shown(path),
        reason: match bytes.len() {
            0 => "the file is empty".to_string(),
            n => format!("truncated: {n} bytes, shorter than the {HEADER_LEN}-byte header"),
        },
    };
    // Compare only the bytes present, so a cut-off header reads as truncated, not foreign.
    if !MAGIC.starts_with(&bytes[..bytes.len().min(MAGIC.len())]) {
        return Err(PackageError::NotAPackage { path: shown(path) });
    }
    // The version comes before the rest of the header: a future format may lay it out otherwise.
    let version = u32::from_le_bytes(field(bytes, 8).ok_or_else(truncated)?);
    if version != FORMAT_VERSION {
        return Err(PackageError::Version {
            path: shown(path),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let len = u64::from_le_bytes(field(bytes, 12).ok_or_else(truncated)?);
    let stored = u64::from_le_bytes(field(bytes, 20).ok_or_else(truncated)?);
    if len > MAX_PAYLOAD_LEN {
        return Err(PackageError::Corrupt {
            path: shown(path),
            reason: format!(
                "the header declares a payload of {len} bytes, over the {MAX_PAYLOAD_LEN}-byte limit"
            ),
        });
    }
    Ok((len, stored))
}

/// Parses and verifies a package's bytes: magic, version, payload length, checksum, a decode
/// that consumes exactly the payload, then [`Package::validate`]. `path` is only for messages.
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Package, PackageError> {
    let corrupt = |reason: String| PackageError::Corrupt {
        path: shown(path),
        reason,
    };
    let (len, stored) = parse_header(bytes, path)?;
    // Before touching the payload: the declared length must be exactly what is there.
    let payload = bytes.get(HEADER_LEN..).unwrap_or_default();
    let have = payload.len() as u64;
    if have < len {
        return Err(corrupt(format!(
            "truncated: the header declares {len} payload bytes, the file has {have}"
        )));
    }
    if have > len {
        return Err(corrupt(format!(
            "{} bytes after the {len}-byte payload",
            have - len
        )));
    }
    let computed = fnv64(payload);
    if computed != stored {
        return Err(corrupt(format!(
            "checksum mismatch (stored {stored:#018x}, computed {computed:#018x})"
        )));
    }
    let (pkg, used): (Package, usize) = tir_graph::file::decode_bincode(payload)
        .map_err(|e| corrupt(format!("the payload does not decode: {e}")))?;
    if used != payload.len() {
        return Err(corrupt(format!(
            "{} bytes after the encoded package",
            payload.len() - used
        )));
    }
    pkg.validate().map_err(corrupt)?;
    Ok(pkg)
}

/// Writes `pkg` to `path` atomically: validated, encoded, written to a temporary file in the
/// same directory, flushed to disk, then renamed over `path`. On failure `path` is untouched and
/// the temporary file is removed. An inconsistent package is refused as `Corrupt`.
pub fn write(pkg: &Package, path: &Path) -> Result<(), PackageError> {
    let corrupt = |reason: String| PackageError::Corrupt {
        path: shown(path),
        reason,
    };
    pkg.validate()
        .map_err(|e| corrupt(format!("refusing to write it: {e}")))?;
    let bytes = to_bytes(pkg).map_err(corrupt)?;
    tir_graph::file::write_atomically(path, &bytes).map_err(|e| match e {
        tir_graph::file::FileError::Io { source, .. } => io_error(path, source),
        other => PackageError::Io {
            path: shown(path),
            reason: other.to_string(),
        },
    })
}

/// Reads and verifies the package at `path` (see [`from_bytes`]).
pub fn read(path: &Path) -> Result<Package, PackageError> {
    let mut file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    // The header first, so a foreign or oversized file is refused before its body is read.
    let mut bytes = Vec::with_capacity(HEADER_LEN);
    (&mut file)
        .take(HEADER_LEN as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    let (len, _) = parse_header(&bytes, path)?;
    // One byte past the declared length is enough to detect trailing bytes; reading grows the
    // buffer only as bytes arrive, so a short file costs only its size.
    file.take(len + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    from_bytes(&bytes, path)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn io_error(path: &Path, e: std::io::Error) -> PackageError {
    PackageError::Io {
        path: shown(path),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use tir_graph::testing::dir_names;
    use tir_graph::{shape, DType, GraphBuilder};

    /// y = relu(x + x) over f32[4, 8], compiled for real.
    fn program() -> Program {
        let g = GraphBuilder::new();
        let x = g.input("x", DType::F32, shape![4, 8]).unwrap();
        let y = (&x + &x).unwrap().relu().unwrap();
        g.output("y", &y).unwrap();
        let graph = g.finish().unwrap();
        let compiled = tir_lower::compile_graph(
            &graph,
            &tir_lower::Target::default(),
            &tir_opt::Limits::default(),
        )
        .unwrap();
        compiled.program
    }

    fn package() -> Package {
        let program = program();
        assert!(!program.kernels.is_empty());
        let abis = program
            .kernels
            .iter()
            .map(|k| KernelAbi {
                entry: k.name.clone(),
                divisible_entry: None,
                params: 2,
                dims: vec![],
                grid_extents: false,
                blocks_per_sm: None,
            })
            .collect();
        let cubins = |tag: u8| -> Vec<Cubin> {
            (0..program.kernels.len())
                .map(|i| Cubin::from(vec![0x7f, b'E', b'L', b'F', tag, i as u8]))
                .collect()
        };
        let mut all = BTreeMap::new();
        all.insert("sm_90".to_string(), cubins(90));
        all.insert("sm_100".to_string(), cubins(100));
        Package {
            program,
            abis,
            cubins: all,
            toolchain: "13.5.37".to_string(),
            mesh: None,
        }
    }

    fn p() -> PathBuf {
        PathBuf::from("model.tirpkg")
    }

    fn corrupt(result: Result<Package, PackageError>) -> String {
        match result {
            Err(PackageError::Corrupt { reason, .. }) => reason,
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn a_cubin_kernels_share_is_stored_once_and_shared_again_when_read() {
        let mut pkg = package();
        let distinct = to_bytes(&pkg).unwrap().len();
        let big = Cubin::from([b"\x7fELF".as_slice(), &[7; 4096]].concat());
        for cubins in pkg.cubins.values_mut() {
            cubins.iter_mut().for_each(|c| *c = big.clone());
        }
        let bytes = to_bytes(&pkg).unwrap();
        assert!(bytes.len() < distinct + 4096 + 64, "{} bytes", bytes.len());
        let back = from_bytes(&bytes, &p()).unwrap();
        assert_eq!(back, pkg);
        let all: Vec<&Cubin> = back.cubins.values().flatten().collect();
        assert!(all.iter().all(|c| std::sync::Arc::ptr_eq(c, all[0])));
    }

    /// The stored form, for crafting payloads.
    #[derive(Serialize)]
    struct StoredCubins {
        images: Vec<Vec<u8>>,
        kernels: BTreeMap<String, Vec<u32>>,
    }

    #[derive(Debug, Deserialize)]
    struct Cubins(#[serde(with = "shared_cubins")] BTreeMap<String, Vec<Cubin>>);

    #[test]
    fn a_cubin_index_past_the_stored_cubins_is_refused() {
        let encoded = |indexes: Vec<u32>| {
            let stored = StoredCubins {
                images: vec![b"\x7fELF".to_vec()],
                kernels: BTreeMap::from([("sm_90".to_string(), indexes)]),
            };
            bincode::serde::encode_to_vec(&stored, bincode::config::standard()).unwrap()
        };
        let (good, _) = tir_graph::file::decode_bincode::<Cubins>(&encoded(vec![0, 0])).unwrap();
        assert_eq!(good.0["sm_90"].len(), 2);
        let err = tir_graph::file::decode_bincode::<Cubins>(&encoded(vec![0, 1])).unwrap_err();
        assert!(
            err.to_string().contains("sm_90 names cubin 1 of 1 stored"),
            "{err}"
        );
    }

    #[test]
    fn a_mesh_package_round_trips_and_its_collectives_must_match_its_mesh() {
        let graph = tir_graph::models::mlp(64, 256).unwrap();
        let mesh = tir_lower::mesh::MeshSpec {
            world: 2,
            shardings: Default::default(),
            tensor_parallel: true,
        };
        let target = tir_lower::Backend::target(&crate::CudaBackend::new());
        let sharded =
            tir_lower::mesh::compile_sharded(&graph, &mesh, &target, &Default::default()).unwrap();
        let mut pkg = package();
        pkg.program = sharded.compiled.program;
        pkg.abis = vec![pkg.abis[0].clone(); pkg.program.kernels.len()];
        for cubins in pkg.cubins.values_mut() {
            *cubins = vec![cubins[0].clone(); pkg.program.kernels.len()];
        }
        pkg.mesh = Some(PackageMesh {
            plan: sharded.plan.clone(),
            whole: sharded.whole.clone(),
        });
        pkg.validate().unwrap();
        assert_eq!(from_bytes(&to_bytes(&pkg).unwrap(), &p()).unwrap(), pkg);
        // The plan of another mesh, or none, does not fit the program's collectives.
        pkg.mesh.as_mut().unwrap().plan.world = 3;
        assert!(pkg
            .validate()
            .unwrap_err()
            .contains("over 2 devices, but the mesh has 3"));
        pkg.mesh = None;
        assert!(pkg
            .validate()
            .unwrap_err()
            .contains("over 2 devices, but the mesh has 1"));
    }

    #[test]
    fn round_trips_through_bytes_and_files() {
        let pkg = package();
        pkg.validate().unwrap();
        let bytes = to_bytes(&pkg).unwrap();
        assert_eq!(&bytes[..8], b"TIRPKG\0\0");
        assert_eq!(from_bytes(&bytes, &p()).unwrap(), pkg);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.tirpkg");
        write(&pkg, &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let back = read(&path).unwrap();
        assert_eq!(back, pkg);
        assert_eq!(
            back.cubins_for("sm_90", &path).unwrap(),
            &pkg.cubins["sm_90"][..]
        );
    }

    #[test]
    fn write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.tirpkg");
        std::fs::write(&path, b"an older file").unwrap();
        let mut pkg = package();
        write(&pkg, &path).unwrap();
        assert_eq!(read(&path).unwrap(), pkg);
        pkg.toolchain = "13.6.0".to_string();
        write(&pkg, &path).unwrap();
        assert_eq!(read(&path).unwrap().toolchain, "13.6.0");
        assert_eq!(dir_names(dir.path()), ["model.tirpkg"]);

        // A refused write leaves the existing file and nothing else.
        pkg.abis.pop();
        let err = write(&pkg, &path).unwrap_err();
        assert!(matches!(err, PackageError::Corrupt { .. }), "{err}");
        assert_eq!(read(&path).unwrap().toolchain, "13.6.0");
        assert_eq!(dir_names(dir.path()), ["model.tirpkg"]);
    }

    #[test]
    fn write_into_a_missing_directory_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("model.tirpkg");
        let err = write(&package(), &path).unwrap_err();
        assert!(matches!(err, PackageError::Io { .. }), "{err}");
        assert!(err.to_string().starts_with(&path.display().to_string()));
        let err = read(&path).unwrap_err();
        assert!(matches!(err, PackageError::Io { .. }), "{err}");
    }

    #[test]
    fn bad_magic_is_not_a_package() {
        let mut bytes = to_bytes(&package()).unwrap();
        bytes[0] = b'X';
        let err = from_bytes(&bytes, &p()).unwrap_err();
        assert!(matches!(err, PackageError::NotAPackage { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "model.tirpkg: not a tir package (bad magic)"
        );
        // Foreign files, even shorter than the header.
        for foreign in [&b"TIRGRAPH\x01\0\0\0"[..], b"\x7fELF", b"{}"] {
            let err = from_bytes(foreign, &p()).unwrap_err();
            assert!(matches!(err, PackageError::NotAPackage { .. }), "{err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.tirpkg");
        std::fs::write(&path, vec![0xffu8; 4096]).unwrap();
        assert!(matches!(read(&path), Err(PackageError::NotAPackage { .. })));
    }

    #[test]
    fn other_versions_are_refused() {
        let mut bytes = to_bytes(&package()).unwrap();
        for found in [0u32, 1, FORMAT_VERSION - 1, FORMAT_VERSION + 1, u32::MAX] {
            bytes[8..12].copy_from_slice(&found.to_le_bytes());
            let err = from_bytes(&bytes, &p()).unwrap_err();
            match &err {
                PackageError::Version {
                    found: f, expected, ..
                } => assert_eq!((*f, *expected), (found, FORMAT_VERSION)),
                other => panic!("expected Version, got {other:?}"),
            }
            assert_eq!(
                err.to_string(),
                format!(
                    "model.tirpkg: package format version {found}, this build reads version \
                     {FORMAT_VERSION}"
                )
            );
        }
    }

    #[test]
    fn a_flipped_byte_is_corrupt() {
        let bytes = to_bytes(&package()).unwrap();
        // Every payload byte, and the checksum itself.
        for at in 20..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            let reason = corrupt(from_bytes(&bad, &p()));
            assert!(reason.contains("checksum mismatch"), "byte {at}: {reason}");
        }
    }

    #[test]
    fn a_changed_length_field_is_corrupt() {
        let bytes = to_bytes(&package()).unwrap();
        let len = (bytes.len() - HEADER_LEN) as u64;
        for declared in [
            0,
            len - 1,
            len + 1,
            MAX_PAYLOAD_LEN,
            MAX_PAYLOAD_LEN + 1,
            u64::MAX,
        ] {
            let mut bad = bytes.clone();
            bad[12..20].copy_from_slice(&declared.to_le_bytes());
            corrupt(from_bytes(&bad, &p()));
        }
        // Trailing bytes.
        let mut long = bytes.clone();
        long.push(0);
        assert!(corrupt(from_bytes(&long, &p())).contains("after the"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.tirpkg");
        std::fs::write(&path, &long).unwrap();
        corrupt(read(&path));
    }

    #[test]
    fn truncated_files_are_refused_without_panicking() {
        let bytes = to_bytes(&package()).unwrap();
        let payload = bytes.len() - HEADER_LEN;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.tirpkg");
        let cuts = (0..=HEADER_LEN).chain([HEADER_LEN + payload / 2, bytes.len() - 1]);
        for cut in cuts {
            let result = from_bytes(&bytes[..cut], &p());
            // A magic that is cut off is still ours, so every prefix is Corrupt.
            let reason = corrupt(result);
            assert!(
                reason.contains("truncated") || reason.contains("empty"),
                "{cut}: {reason}"
            );
            std::fs::write(&path, &bytes[..cut]).unwrap();
            corrupt(read(&path));
        }
    }

    #[test]
    fn a_mangled_payload_with_a_fixed_checksum_never_panics() {
        // Past the checksum, only the decoder and validate() stand between bad bytes and a
        // panic or a huge allocation.
        let bytes = to_bytes(&package()).unwrap();
        for at in HEADER_LEN..bytes.len() {
            for value in [0x00, 0x7f, 0xfc, 0xff] {
                let mut bad = bytes.clone();
                bad[at] = value;
                let sum = fnv64(&bad[HEADER_LEN..]);
                bad[20..28].copy_from_slice(&sum.to_le_bytes());
                let _ = from_bytes(&bad, &p());
            }
        }
    }

    #[test]
    fn an_inconsistent_payload_is_corrupt() {
        let mut pkg = package();
        pkg.cubins.clear();
        let bytes = to_bytes(&pkg).unwrap();
        let reason = corrupt(from_bytes(&bytes, &p()));
        assert_eq!(reason, "no cubins for any architecture");
    }

    #[test]
    fn cubins_for_an_unknown_arch_lists_the_available_ones() {
        let pkg = package();
        assert_eq!(
            pkg.cubins_for("sm_100", &p()).unwrap().len(),
            pkg.abis.len()
        );
        let err = pkg.cubins_for("sm_120", &p()).unwrap_err();
        assert!(matches!(err, PackageError::WrongArch { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "model.tirpkg: the package has no cubins for sm_120 (it has: sm_100, sm_90)"
        );
    }

    #[test]
    fn validate_catches_inconsistencies() {
        let good = package();
        let kernels = good.program.kernels.len();

        let mut pkg = good.clone();
        pkg.abis.push(pkg.abis[0].clone());
        assert_eq!(
            pkg.validate().unwrap_err(),
            format!("{} kernel ABIs for {kernels} kernels", kernels + 1)
        );

        let mut pkg = good.clone();
        pkg.cubins.clear();
        assert_eq!(
            pkg.validate().unwrap_err(),
            "no cubins for any architecture"
        );

        let mut pkg = good.clone();
        pkg.cubins.get_mut("sm_90").unwrap().pop();
        let err = pkg.validate().unwrap_err();
        assert!(err.contains("for sm_90"), "{err}");

        let mut pkg = good.clone();
        pkg.cubins.get_mut("sm_100").unwrap()[0] = Cubin::from(Vec::new());
        let err = pkg.validate().unwrap_err();
        assert!(err.contains("sm_100 cubin of kernel 0"), "{err}");
        assert!(err.ends_with("is empty"), "{err}");
    }
}
