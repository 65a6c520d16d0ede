//! The binary `.tir` file: a fixed header, then the graph's [`GraphData`] as bincode.
//!
//! Header (28 bytes, little-endian): magic `b"TIRGRAPH"`, format version `u32`, body length `u64`,
//! FNV-1a 64 checksum of the body `u64`. Reading refuses an empty, truncated, corrupt, foreign,
//! older- or newer-version file with a [`FileError`] that says which, and rebuilds the graph through
//! [`Graph::from_data`], so what it returns has passed every check of the verifier. Writing goes
//! to a temporary file in the target's directory and renames it over the target, so a reader
//! never sees a half-written file.

use crate::{Graph, GraphData, GraphError};
use std::hash::Hasher;
use std::io::Write;
use std::path::Path;

/// The first 8 bytes of every `.tir` file.
pub const MAGIC: [u8; 8] = *b"TIRGRAPH";
/// The format version this build writes. Version 2 added expression dims
/// ([`crate::Dim::Expr`]), the `iota` op and slice stops that are dims, which changed how slices
/// are stored: a version-1 reader refuses version 2 files as newer, and this build refuses
/// version 1 files as older (make them again from their source: `tirc parse`, `tirc import`).
/// Version 3 added the `dim_value` op: a version-2 reader refuses version 3 files as newer, and
/// this build reads version 2 files, which are version 3 files without it.
/// Version 4 added the collectives (`all_reduce_*`, `all_gather`, `reduce_scatter`): a version-3
/// reader refuses version 4 files as newer; version 2 and 3 files are version 4 files without them.
/// Version 5 added users' kernels (`custom`, [`crate::custom`]): a version-4 reader refuses
/// version 5 files as newer; version 2 to 4 files are version 5 files without them.
/// Version 6 added in-place outputs to users' kernels ([`crate::custom::CustomOutput::updates`]),
/// which changed how a custom op is stored: a version-5 reader refuses version 6 files as newer;
/// version 2 to 5 files without a custom op are version 6 files, and a version-5 file with one is
/// refused naming its version (write it again from its source).
/// Version 7 added slices at a run-time position to in-place outputs
/// ([`crate::custom::CustomOutput::slice`]), changing again how a custom op is stored: a
/// version-6 reader refuses version 7 files as newer; version 2 to 6 files without a custom op
/// are version 7 files, and a version-5 or 6 file with one is refused naming its version.
pub const FORMAT_VERSION: u32 = 7;
/// The last version whose custom ops this build cannot read (see [`FORMAT_VERSION`]).
const CUSTOM_CHANGED_AFTER: u32 = 6;
/// The oldest format version this build reads.
pub const OLDEST_READ_VERSION: u32 = 2;
/// The header's size in bytes: magic, version, body length, checksum.
pub const HEADER_LEN: usize = 28;
/// The largest body a reader accepts. The decoder's allocations are bounded by the body's
/// length ([`decode_bincode`]).
pub const MAX_BODY_LEN: u64 = 1 << 30;

/// Why a `.tir` file was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file has no bytes.
    #[error("the file is empty")]
    Empty,
    /// The file does not start with [`MAGIC`].
    #[error("not a .tir file (bad magic bytes)")]
    BadMagic,
    /// The file ends before its header or body does.
    #[error("the file is truncated: {what}")]
    Truncated {
        /// What is missing.
        what: String,
    },
    /// Bytes follow the body that the header's length covers.
    #[error("the file has {0} bytes after the graph; it is corrupt")]
    TrailingBytes(u64),
    /// The file's format version is newer than [`FORMAT_VERSION`].
    #[error(
        "format version {found} is newer than this build reads ({FORMAT_VERSION}); upgrade tir"
    )]
    NewerVersion {
        /// The version in the header.
        found: u32,
    },
    /// The file's format version is older than [`OLDEST_READ_VERSION`].
    #[error(
        "format version {found} is older than this build reads ({OLDEST_READ_VERSION}); write the file again from its source (tirc parse, tirc import)"
    )]
    OlderVersion {
        /// The version in the header.
        found: u32,
    },
    /// The header's version is 0, which tir never wrote.
    #[error("format version 0 is not a version tir ever wrote; the file is corrupt")]
    ZeroVersion,
    /// The header's body length exceeds [`MAX_BODY_LEN`].
    #[error("the body of {0} bytes exceeds the {MAX_BODY_LEN}-byte limit")]
    TooLarge(u64),
    /// The body's FNV-1a 64 checksum differs from the header's.
    #[error(
        "checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): the file is corrupt"
    )]
    Checksum {
        /// The checksum in the header.
        stored: u64,
        /// The checksum of the body read.
        computed: u64,
    },
    /// The body is not a bincode [`GraphData`].
    #[error("the body does not decode: {0}")]
    Decode(String),
    /// The body decodes but the graph fails verification.
    #[error("the graph is invalid: {0}")]
    Invalid(#[from] GraphError),
}

/// The most bytes a decoder claims per byte it reads: 16, the size of the widest primitive
/// (`u128`), each read from at least one byte.
pub const CLAIM_PER_BYTE: usize = 16;

/// A serde value of `T` from `bytes` in bincode's standard encoding, and how many bytes it
/// used. Bincode allocates a string or a byte buffer at the length its prefix gives before it
/// reads the bytes, within a limit on what the decoding claims (each primitive its size, each
/// string its length). The limit here is [`CLAIM_PER_BYTE`] × `bytes.len()` (rounded up to a
/// power of 4, at least 4 KiB): what a valid encoding never exceeds, so that a length taken from
/// corrupt bytes cannot allocate far more than there are bytes.
/// `Err` says why, in words.
pub fn decode_bincode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), String> {
    decode_within(bytes).map_err(|e| match e {
        bincode::error::DecodeError::LimitExceeded => format!(
            "a length in it promises more than its {} bytes can hold",
            bytes.len()
        ),
        e => e.to_string(),
    })
}

fn decode_within<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, usize), bincode::error::DecodeError> {
    let bound = bytes.len().saturating_mul(CLAIM_PER_BYTE);
    macro_rules! within {
        ($($shift:literal)*) => {
            $(
                if bound <= 1usize << $shift {
                    let config = bincode::config::standard().with_limit::<{ 1usize << $shift }>();
                    return bincode::serde::decode_from_slice(bytes, config);
                }
            )*
        };
    }
    within!(12 14 16 18 20 22 24 26 28 30 32);
    // Over 256 MiB of bytes (over any body a reader here accepts at 1 GiB: 16 GiB).
    let config = bincode::config::standard().with_limit::<{ 1usize << 34 }>();
    bincode::serde::decode_from_slice(bytes, config)
}

/// FNV-1a 64 of `bytes`.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    h.finish()
}

/// The file's bytes for `graph`.
pub fn encode(graph: &Graph) -> Vec<u8> {
    let body = bincode::serde::encode_to_vec(graph.to_data(), bincode::config::standard())
        .expect("a graph's data always encodes");
    let mut bytes = Vec::with_capacity(HEADER_LEN + body.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&checksum(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    bytes
}

/// Whether `bytes` start like a `.tir` file (so a caller can tell it from the text form).
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The graph in a `.tir` file's bytes, fully verified.
pub fn decode(bytes: &[u8]) -> Result<Graph, FileError> {
    if bytes.is_empty() {
        return Err(FileError::Empty);
    }
    if !MAGIC.starts_with(&bytes[..bytes.len().min(MAGIC.len())]) {
        return Err(FileError::BadMagic);
    }
    if bytes.len() < HEADER_LEN {
        let what = format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        );
        return Err(FileError::Truncated { what });
    }
    let word = |at: usize, n: usize| -> u64 {
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(&bytes[at..at + n]);
        u64::from_le_bytes(buf)
    };
    let version = word(8, 4) as u32;
    let (len, stored) = (word(12, 8), word(20, 8));
    if version == 0 {
        return Err(FileError::ZeroVersion);
    }
    if version > FORMAT_VERSION {
        return Err(FileError::NewerVersion { found: version });
    }
    if version < OLDEST_READ_VERSION {
        return Err(FileError::OlderVersion { found: version });
    }
    if len > MAX_BODY_LEN {
        return Err(FileError::TooLarge(len));
    }
    let body = &bytes[HEADER_LEN..];
    let have = body.len() as u64;
    if have < len {
        let what = format!("the header promises {len} body bytes, the file has {have}");
        return Err(FileError::Truncated { what });
    }
    if have > len {
        return Err(FileError::TrailingBytes(have - len));
    }
    let computed = checksum(body);
    if computed != stored {
        return Err(FileError::Checksum { stored, computed });
    }
    let (data, used): (GraphData, usize) = decode_bincode(body).map_err(|e| {
        FileError::Decode(if (5..=CUSTOM_CHANGED_AFTER).contains(&version) {
            format!(
                "{e} (a version-{version} file that holds a custom op: custom ops are stored \
                 differently since version {}; write the file again from its source)",
                CUSTOM_CHANGED_AFTER + 1
            )
        } else {
            e
        })
    })?;
    if used != body.len() {
        return Err(FileError::TrailingBytes((body.len() - used) as u64));
    }
    Ok(Graph::from_data(data)?)
}

/// Reads and verifies the `.tir` file at `path`.
pub fn read(path: &Path) -> Result<Graph, FileError> {
    let bytes = std::fs::read(path).map_err(|source| io_error(path, source))?;
    decode(&bytes)
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, flushed, then renamed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = new_temp_file(path, dir).map_err(|e| io_error(path, e))?;
    tmp.write_all(bytes).map_err(|e| io_error(path, e))?;
    tmp.as_file().sync_all().map_err(|e| io_error(path, e))?;
    tmp.persist(path).map_err(|e| io_error(path, e.error))?;
    Ok(())
}

/// A temporary file in `dir` with the mode the file at `path` will keep: the replaced file's
/// mode, or what a plain create gives (0o666 less the umask), not tempfile's private 0o600.
fn new_temp_file(path: &Path, dir: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    let replaced = std::fs::metadata(path).ok().map(|m| m.permissions());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // open(2) applies the umask to this mode, as it does for File::create.
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let tmp = builder.tempfile_in(dir)?;
    #[cfg(unix)]
    if let Some(permissions) = replaced {
        tmp.as_file().set_permissions(permissions)?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(tmp)
}

/// Writes `graph` as a `.tir` file at `path`, atomically.
pub fn write(path: &Path, graph: &Graph) -> Result<(), FileError> {
    write_atomically(path, &encode(graph))
}

fn io_error(path: &Path, source: std::io::Error) -> FileError {
    let path = path.display().to_string();
    FileError::Io { path, source }
}
