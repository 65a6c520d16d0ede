//! An on-disk cache of compiled kernels (cubins), keyed by [`cache_key`] of the Tile IR
//! bytecode, the target arch and the toolchain version.
//!
//! Each entry is one file, `<dir>/<key as 16 lowercase hex digits>.cubin`: a 32-byte header
//! (magic `TIRCUBN2`, then the key, the payload length and the FNV-1a 64 checksum of the
//! payload, each a u64 LE) followed by the payload. The payload is a cubin, or a reference to
//! the entry holding one: [`SHARED`] then that entry's key (u64 LE), written by
//! [`KernelCache::put_shared`] for the kernels of one cubin (a batch), so that it is on disk
//! once. Guarantees:
//! - readers see a whole entry or none: writes go to a temp file that is renamed into place;
//! - an entry that fails verification is never returned: it is deleted and reported;
//! - after a `put` the entries total at most `max_bytes` (header included), unless the new
//!   entry alone is bigger; the least recently used go first (recency is the file's
//!   modification time, bumped on every hit);
//! - files in the directory not named like entries are never counted, evicted or deleted,
//!   except this cache's own temp files once they are [`STALE_TEMP_AGE`] old: a writer killed
//!   between creating its temp file and renaming it leaves one behind, and `put` removes it.
//!
//! Several processes may share one directory: the worst a race does is lose an entry (a miss).
//! Temp file names are random (not the pid, which containers sharing a directory repeat), and a
//! writer deletes only the temp file it created.

use std::ffi::OsString;
use std::fs::{self, File};
use std::hash::Hasher;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Magic of the entry format; the last byte is the format version.
const MAGIC: &[u8; 8] = b"TIRCUBN2";
/// The first bytes of a payload that refers to another entry (never those of a cubin, an ELF
/// file).
pub const SHARED: &[u8; 8] = b"TIRSHARE";
/// Magic, key, payload length, checksum.
const HEADER_LEN: usize = 32;
const ENTRY_SUFFIX: &str = ".cubin";
const DEFAULT_MAX_BYTES: u64 = 1 << 30;
const MAX_BYTES_VAR: &str = "TIR_CACHE_MAX_BYTES";
const TEMP_SUFFIX: &str = ".tmp";
/// How old a temp file must be before `put` takes its writer for dead and deletes it: writing
/// one entry takes milliseconds.
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

/// Where and how big.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// The directory holding the entries; made on the first `put`.
    pub dir: PathBuf,
    /// The most bytes the entries may total, headers included; least recently used entries are
    /// evicted past it.
    pub max_bytes: u64,
}

impl CacheConfig {
    /// From the environment: dir = `$TIR_CACHE_DIR`, else `$XDG_CACHE_HOME/tir/kernels`, else
    /// `$HOME/.cache/tir/kernels`, else `<temp dir>/tir-kernels`; max_bytes =
    /// `$TIR_CACHE_MAX_BYTES` (a plain integer), else 1 GiB. Empty variables count as unset.
    pub fn from_env() -> Result<CacheConfig, CacheError> {
        let max_bytes = match non_empty_var(MAX_BYTES_VAR) {
            None => parse_max_bytes(None)?,
            Some(v) => match v.into_string() {
                Ok(s) => parse_max_bytes(Some(&s))?,
                Err(v) => return Err(bad_max_bytes(&v.to_string_lossy())),
            },
        };
        let dir = resolve_dir(
            non_empty_var("TIR_CACHE_DIR"),
            non_empty_var("XDG_CACHE_HOME"),
            non_empty_var("HOME"),
            std::env::temp_dir(),
        );
        Ok(CacheConfig { dir, max_bytes })
    }
}

fn non_empty_var(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The directory choice of [`CacheConfig::from_env`], apart from the environment so that
/// tests need not mutate it.
fn resolve_dir(
    tir: Option<OsString>,
    xdg: Option<OsString>,
    home: Option<OsString>,
    temp: PathBuf,
) -> PathBuf {
    if let Some(dir) = tir {
        return PathBuf::from(dir);
    }
    // The XDG spec says a relative $XDG_CACHE_HOME is invalid and to be ignored.
    if let Some(xdg) = xdg.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return xdg.join("tir").join("kernels");
    }
    match home {
        Some(home) => Path::new(&home).join(".cache").join("tir").join("kernels"),
        None => temp.join("tir-kernels"),
    }
}

/// `$TIR_CACHE_MAX_BYTES`'s value (`None`: unset) as a byte count.
fn parse_max_bytes(value: Option<&str>) -> Result<u64, CacheError> {
    match value {
        None => Ok(DEFAULT_MAX_BYTES),
        Some(s) => s.trim().parse::<u64>().map_err(|_| bad_max_bytes(s)),
    }
}

fn bad_max_bytes(value: &str) -> CacheError {
    CacheError::Config(format!(
        "{MAX_BYTES_VAR}={value:?} is not a byte count (want a plain integer, e.g. 1073741824)"
    ))
}

/// Why the cache could not be configured, read or written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// `$TIR_CACHE_MAX_BYTES` is not a plain integer.
    #[error("kernel cache: {0}")]
    Config(String),
    /// A file or directory of the cache could not be read, written or removed.
    #[error("kernel cache {path}: {reason}")]
    Io {
        /// The file or directory.
        path: String,
        /// The I/O error.
        reason: String,
    },
}

fn io_error(path: &Path, err: &io::Error) -> CacheError {
    CacheError::Io {
        path: path.display().to_string(),
        reason: err.to_string(),
    }
}

/// FNV-1a 64 of the parts, each prefixed by its length as u64 LE, so that moving bytes from
/// one part to the next changes the key.
pub fn cache_key(bytecode: &[u8], arch: &str, toolchain_version: &str) -> u64 {
    let mut h = fnv::FnvHasher::default();
    for part in [bytecode, arch.as_bytes(), toolchain_version.as_bytes()] {
        h.write(&(part.len() as u64).to_le_bytes());
        h.write(part);
    }
    h.finish()
}

/// The key a shared cubin is stored under: FNV-1a 64 of the word `shared` and the cubin (a
/// kernel's [`cache_key`] hashes a length first).
fn shared_cubin_key(cubin: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(b"shared");
    h.write(cubin);
    h.finish()
}

/// The key a payload refers to, when it is a reference.
fn shared_key(payload: &[u8]) -> Option<u64> {
    let key = payload.strip_prefix(SHARED.as_slice())?;
    Some(u64::from_le_bytes(key.try_into().ok()?))
}

/// FNV-1a 64 of `bytes`: entries' and packages' checksums, and kernels' content names.
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    h.finish()
}

/// Entry and total bytes, entries only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The number of entries.
    pub entries: usize,
    /// Their total size in bytes, headers included.
    pub bytes: u64,
}

/// What [`KernelCache::get`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The entry's cubin (a shared entry's reference already followed).
    Hit(Vec<u8>),
    /// No entry for the key.
    Miss,
    /// An entry existed but failed verification; it has been removed.
    Corrupt(String),
}

/// The kernel cache in one directory (see the module doc).
#[derive(Clone, Debug)]
pub struct KernelCache {
    config: CacheConfig,
}

impl KernelCache {
    /// Creates nothing yet: the directory appears on the first `put`.
    pub fn new(config: CacheConfig) -> KernelCache {
        KernelCache { config }
    }

    /// Its directory and size limit.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    fn entry_path(&self, key: u64) -> PathBuf {
        self.config.dir.join(entry_name(key))
    }

    /// Reads and verifies entry `key`, following a reference to a shared cubin. A hit bumps the
    /// entry's modification time (its LRU recency), and the shared entry's. A corrupt entry is
    /// deleted. An entry that cannot be read at all (e.g. permissions), or whose shared cubin
    /// is gone, is a miss: the next `put` replaces it.
    pub fn get(&self, key: u64) -> Lookup {
        match self.get_payload(key) {
            Lookup::Hit(payload) => match shared_key(&payload) {
                Some(shared) => match self.get_payload(shared) {
                    Lookup::Hit(cubin) if shared_key(&cubin).is_none() => Lookup::Hit(cubin),
                    Lookup::Hit(_) => Lookup::Corrupt(remove_corrupt(
                        &self.entry_path(key),
                        format!("it refers to {shared:016x}, itself a reference"),
                    )),
                    other => other,
                },
                None => Lookup::Hit(payload),
            },
            other => other,
        }
    }

    /// Entry `key`'s verified payload, as it is on disk.
    fn get_payload(&self, key: u64) -> Lookup {
        let path = self.entry_path(key);
        let Ok(mut bytes) = fs::read(&path) else {
            return Lookup::Miss;
        };
        if let Err(e) = decode_entry(key, &bytes) {
            return Lookup::Corrupt(remove_corrupt(&path, e.to_string()));
        }
        touch(&path);
        bytes.drain(..HEADER_LEN);
        Lookup::Hit(bytes)
    }

    /// Stores `payload` as entry `key` (replacing any), then evicts least recently used
    /// entries, never this one, until the entries total at most `max_bytes`. An error from
    /// eviction comes after the entry was written.
    pub fn put(&self, key: u64, payload: &[u8]) -> Result<(), CacheError> {
        let dir = &self.config.dir;
        fs::create_dir_all(dir).map_err(|e| io_error(dir, &e))?;
        let temp = dir.join(temp_name(key));
        write_temp(&temp, key, payload)?;
        let path = self.entry_path(key);
        if let Err(e) = fs::rename(&temp, &path) {
            let _ = fs::remove_file(&temp);
            return Err(io_error(&path, &e));
        }
        self.evict(key)
    }

    /// Stores one `cubin` for every key of `keys` (the kernels it holds): once, under a key of
    /// its own, and a reference to it under each of `keys`. The references are written first,
    /// so that a reader finds a whole cubin or a miss.
    pub fn put_shared(&self, keys: &[u64], cubin: &[u8]) -> Result<(), CacheError> {
        if let [key] = keys {
            return self.put(*key, cubin);
        }
        let shared = shared_cubin_key(cubin);
        let mut reference = SHARED.to_vec();
        reference.extend_from_slice(&shared.to_le_bytes());
        for &key in keys {
            self.put(key, &reference)?;
        }
        self.put(shared, cubin)
    }

    /// Removes the least recently modified entries other than `keep` until the total fits, and
    /// stale temp files.
    fn evict(&self, keep: u64) -> Result<(), CacheError> {
        self.remove_stale_temps();
        let mut entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        // Oldest first; the name breaks ties so that the order is deterministic.
        entries.sort_by(|a, b| (a.modified, &a.path).cmp(&(b.modified, &b.path)));
        let keep = self.entry_path(keep);
        for entry in entries.iter().filter(|e| e.path != keep) {
            if total <= self.config.max_bytes {
                break;
            }
            remove_if_present(&entry.path)?;
            total = total.saturating_sub(entry.bytes);
        }
        Ok(())
    }

    /// Deletes this cache's temp files older than [`STALE_TEMP_AGE`] (best effort: another
    /// process may be doing the same).
    fn remove_stale_temps(&self) {
        let Ok(listing) = fs::read_dir(&self.config.dir) else {
            return;
        };
        let now = SystemTime::now();
        for item in listing.flatten() {
            if !item.file_name().to_str().is_some_and(is_temp_name) {
                continue;
            }
            let stale = item.metadata().ok().filter(|m| m.is_file()).and_then(|m| {
                let age = now.duration_since(m.modified().ok()?).ok()?;
                Some(age >= STALE_TEMP_AGE)
            });
            if stale == Some(true) {
                let _ = fs::remove_file(item.path());
            }
        }
    }

    /// Entries and total bytes (0/0 when the directory does not exist).
    pub fn stats(&self) -> CacheStats {
        let entries = self.entries().unwrap_or_default();
        CacheStats {
            entries: entries.len(),
            bytes: entries.iter().map(|e| e.bytes).sum(),
        }
    }

    /// Deletes every entry file (not other files); returns how many.
    pub fn clear(&self) -> Result<usize, CacheError> {
        let mut removed = 0;
        for entry in self.entries()? {
            if remove_if_present(&entry.path)? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The entry files now in the directory; none when it does not exist. Files that vanish
    /// while being listed (another process evicting) are skipped.
    fn entries(&self) -> Result<Vec<Entry>, CacheError> {
        let dir = &self.config.dir;
        let listing = match fs::read_dir(dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error(dir, &e)),
        };
        let mut out = Vec::new();
        for item in listing {
            let item = item.map_err(|e| io_error(dir, &e))?;
            if !item.file_name().to_str().is_some_and(is_entry_name) {
                continue;
            }
            let Ok(meta) = item.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            out.push(Entry {
                path: item.path(),
                bytes: meta.len(),
                // Unknown times sort first: such entries are evicted before known ones.
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            });
        }
        Ok(out)
    }
}

struct Entry {
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
}

fn entry_name(key: u64) -> String {
    format!("{key:016x}{ENTRY_SUFFIX}")
}

/// Writes entry `key` into the new file `temp`. Creating it is exclusive: a file someone else
/// is writing is neither written into nor deleted. A file this call created and could not
/// finish is deleted (a stray temp file is never mistaken for an entry, but it takes room).
fn write_temp(temp: &Path, key: u64, payload: &[u8]) -> Result<(), CacheError> {
    let mut file = File::options()
        .write(true)
        .create_new(true)
        .open(temp)
        .map_err(|e| io_error(temp, &e))?;
    let written = file
        .write_all(&header(key, payload))
        .and_then(|()| file.write_all(payload));
    if let Err(e) = written {
        let _ = fs::remove_file(temp);
        return Err(io_error(temp, &e));
    }
    Ok(())
}

/// `.<key>.<random>.tmp`: starts with a dot, so it is never named like an entry. Random rather
/// than the pid and a counter, which repeat in containers sharing a directory.
fn temp_name(key: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState has new keys: random per process, distinct per call.
    let nonce = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!(".{key:016x}.{nonce:016x}{TEMP_SUFFIX}")
}

fn is_key(stem: &str) -> bool {
    stem.len() == 16
        && stem
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(ENTRY_SUFFIX).is_some_and(is_key)
}

/// Whether `name` is one of [`temp_name`]'s.
fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let Some(middle) = rest.strip_suffix(TEMP_SUFFIX) else {
        return false;
    };
    // The key, a dot, and at least one character of nonce.
    middle.len() > 17 && middle.get(..16).is_some_and(is_key) && middle[16..].starts_with('.')
}

fn header(key: u64, payload: &[u8]) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&key.to_le_bytes());
    h[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h[24..].copy_from_slice(&fnv64(payload).to_le_bytes());
    h
}

/// The bytes of the entry file that [`KernelCache::put`] writes for `key` and `payload`.
pub fn encode_entry(key: u64, payload: &[u8]) -> Vec<u8> {
    [&header(key, payload)[..], payload].concat()
}

/// Why an entry file's bytes were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The file is shorter than its header.
    #[error("truncated header ({len} of {HEADER_LEN} bytes)")]
    TruncatedHeader {
        /// The file's length in bytes.
        len: usize,
    },
    /// The file does not start with the entry magic.
    #[error("bad magic (not a tir kernel cache entry)")]
    BadMagic,
    /// The entry is of another format version.
    #[error("format version {:?}, expected {:?}", char::from(*.found), char::from(MAGIC[7]))]
    Version {
        /// The version byte found.
        found: u8,
    },
    /// The entry holds another key than its file name says.
    #[error("holds key {stored:016x}, not {key:016x}")]
    WrongKey {
        /// The key in the header.
        stored: u64,
        /// The key asked for.
        key: u64,
    },
    /// The payload's length differs from the header's.
    #[error("payload is {found} bytes, header says {declared}")]
    Length {
        /// The length in the header.
        declared: u64,
        /// The payload's length.
        found: u64,
    },
    /// The payload's FNV-1a 64 checksum differs from the header's.
    #[error("payload checksum mismatch (stored {stored:#018x}, computed {computed:#018x})")]
    Checksum {
        /// The checksum in the header.
        stored: u64,
        /// The payload's checksum.
        computed: u64,
    },
}

/// The little-endian u64 at `at`; the caller has checked that the header is whole.
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// The payload of an entry file's `bytes`, checked against the format and `key`.
pub fn decode_entry(key: u64, bytes: &[u8]) -> Result<&[u8], EntryError> {
    if bytes.len() < HEADER_LEN {
        return Err(EntryError::TruncatedHeader { len: bytes.len() });
    }
    if bytes[..7] != MAGIC[..7] {
        return Err(EntryError::BadMagic);
    }
    if bytes[7] != MAGIC[7] {
        return Err(EntryError::Version { found: bytes[7] });
    }
    let stored = u64_at(bytes, 8);
    if stored != key {
        return Err(EntryError::WrongKey { stored, key });
    }
    let payload = &bytes[HEADER_LEN..];
    let declared = u64_at(bytes, 16);
    if declared != payload.len() as u64 {
        let found = payload.len() as u64;
        return Err(EntryError::Length { declared, found });
    }
    let (stored, computed) = (u64_at(bytes, 24), fnv64(payload));
    if stored != computed {
        return Err(EntryError::Checksum { stored, computed });
    }
    Ok(payload)
}

/// Deletes a corrupt entry; the reason says if that failed too.
fn remove_corrupt(path: &Path, reason: String) -> String {
    match remove_if_present(path) {
        Ok(_) => reason,
        Err(e) => format!("{reason}; and removing it failed: {e}"),
    }
}

/// Removes `path`; `Ok(false)` when it was already gone (another process got there first).
fn remove_if_present(path: &Path) -> Result<bool, CacheError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error(path, &e)),
    }
}

/// Marks an entry as just used. Best effort: a failure only makes it look older to eviction.
fn touch(path: &Path) {
    if let Ok(file) = File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cache_in(dir: &Path, max_bytes: u64) -> KernelCache {
        KernelCache::new(CacheConfig {
            dir: dir.join("kernels"),
            max_bytes,
        })
    }

    fn set_age(cache: &KernelCache, key: u64, secs_ago: u64) {
        let when = SystemTime::now() - Duration::from_secs(secs_ago);
        let file = File::options()
            .write(true)
            .open(cache.entry_path(key))
            .expect("open entry");
        file.set_modified(when).expect("set mtime");
    }

    fn hit(payload: &[u8]) -> Lookup {
        Lookup::Hit(payload.to_vec())
    }

    #[test]
    fn round_trip_creates_dir_and_leaves_no_temp_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        assert!(!cache.config().dir.exists(), "new creates nothing");
        cache.put(7, b"cubin bytes").expect("put");
        assert_eq!(cache.get(7), hit(b"cubin bytes"));
        cache.put(7, b"replaced").expect("put again");
        assert_eq!(cache.get(7), hit(b"replaced"));
        cache.put(8, b"").expect("put empty");
        assert_eq!(cache.get(8), hit(b""));
        let mut names: Vec<String> = fs::read_dir(&cache.config().dir)
            .expect("read dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        assert_eq!(names, [entry_name(7), entry_name(8)]);
        assert_eq!(entry_name(0xab), "00000000000000ab.cubin");
    }

    #[test]
    fn miss_on_absent_key_and_absent_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        assert_eq!(cache.get(1), Lookup::Miss);
        cache.put(1, b"x").expect("put");
        assert_eq!(cache.get(2), Lookup::Miss);
    }

    /// Damages entry 5 with `damage`, expects a Corrupt mentioning `why`, then a working cache.
    fn check_corruption(damage: impl Fn(&mut Vec<u8>), why: &str) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        cache.put(5, b"payload").expect("put");
        let path = cache.entry_path(5);
        let mut bytes = fs::read(&path).expect("read entry");
        damage(&mut bytes);
        fs::write(&path, &bytes).expect("write damaged entry");
        match cache.get(5) {
            Lookup::Corrupt(reason) => assert!(reason.contains(why), "{why}: got {reason}"),
            other => panic!("{why}: expected Corrupt, got {other:?}"),
        }
        assert!(!path.exists(), "{why}: corrupt entry is removed");
        assert_eq!(cache.get(5), Lookup::Miss);
        cache.put(5, b"payload").expect("put after corruption");
        assert_eq!(cache.get(5), hit(b"payload"));
    }

    #[test]
    fn corrupt_entries_are_detected_and_removed() {
        check_corruption(|b| b[HEADER_LEN + 2] ^= 0x40, "checksum");
        check_corruption(|b| b.truncate(b.len() - 1), "payload is 6 bytes");
        check_corruption(|b| b.truncate(20), "truncated header");
        check_corruption(|b| b[..8].copy_from_slice(b"NOTCUBIN"), "bad magic");
        check_corruption(|b| b[7] = b'1', "format version");
        check_corruption(|b| b[8] ^= 1, "holds key");
        check_corruption(|b| b.push(0), "payload is 8 bytes");
    }

    #[test]
    fn a_shared_cubin_is_stored_once_and_found_under_each_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        let cubin = b"\x7fELF two entries".as_slice();
        cache.put_shared(&[1, 2, 3], cubin).expect("put_shared");
        for key in [1, 2, 3] {
            assert_eq!(cache.get(key), hit(cubin), "key {key}");
        }
        let stats = cache.stats();
        assert_eq!(stats.entries, 4, "three references and the cubin");
        let shared = shared_cubin_key(cubin);
        assert_eq!(cache.get(shared), hit(cubin));
        let cubin_bytes = (HEADER_LEN + cubin.len()) as u64;
        assert_eq!(stats.bytes, cubin_bytes + 3 * (HEADER_LEN as u64 + 16));

        // One key alone is a plain entry.
        cache.put_shared(&[7], b"alone").expect("put_shared");
        assert_eq!(stats.entries + 1, cache.stats().entries);
        assert_eq!(cache.get(7), hit(b"alone"));

        // The cubin gone (evicted or damaged): each reference is a miss, never its bytes.
        let mut bytes = fs::read(cache.entry_path(shared)).unwrap();
        bytes[HEADER_LEN] ^= 1;
        fs::write(cache.entry_path(shared), &bytes).unwrap();
        assert!(matches!(cache.get(1), Lookup::Corrupt(_)), "damaged");
        assert_eq!(cache.get(2), Lookup::Miss, "removed");
        cache.put_shared(&[1, 2], cubin).expect("put_shared again");
        assert_eq!(cache.get(2), hit(cubin));

        // A reference to a reference is refused, not followed.
        let mut reference = SHARED.to_vec();
        reference.extend_from_slice(&1u64.to_le_bytes());
        cache.put(9, &reference).expect("put");
        assert!(matches!(cache.get(9), Lookup::Corrupt(r) if r.contains("itself a reference")));
    }

    #[test]
    fn entries_decode_from_memory_with_typed_errors() {
        let bytes = encode_entry(9, b"cubin");
        assert_eq!(decode_entry(9, &bytes), Ok(&b"cubin"[..]));
        let wrong = EntryError::WrongKey { stored: 9, key: 8 };
        assert_eq!(decode_entry(8, &bytes), Err(wrong));
        let short = EntryError::TruncatedHeader { len: 31 };
        assert_eq!(decode_entry(9, &bytes[..31]), Err(short));
        let cut = EntryError::Length {
            declared: 5,
            found: 4,
        };
        assert_eq!(decode_entry(9, &bytes[..bytes.len() - 1]), Err(cut));
    }

    #[test]
    fn entry_under_another_key_is_corrupt() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        cache.put(1, b"one").expect("put");
        fs::copy(cache.entry_path(1), cache.entry_path(2)).expect("copy");
        assert!(matches!(cache.get(2), Lookup::Corrupt(_)));
        assert_eq!(cache.get(1), hit(b"one"));
    }

    #[test]
    fn key_depends_on_every_part_and_its_boundaries() {
        let base = cache_key(b"bytecode", "sm_90", "13.0");
        assert_eq!(base, cache_key(b"bytecode", "sm_90", "13.0"));
        assert_ne!(base, cache_key(b"bytecodf", "sm_90", "13.0"));
        assert_ne!(base, cache_key(b"bytecode", "sm_100", "13.0"));
        assert_ne!(base, cache_key(b"bytecode", "sm_90", "13.1"));
        assert_ne!(cache_key(b"ab", "c", ""), cache_key(b"a", "bc", ""));
        assert_ne!(cache_key(b"", "ab", "c"), cache_key(b"", "a", "bc"));
        assert_ne!(cache_key(b"a", "", "b"), cache_key(b"", "a", "b"));
    }

    #[test]
    fn lru_eviction_keeps_recently_used() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let payload = [0u8; 10];
        let entry_bytes = (HEADER_LEN + payload.len()) as u64;
        let cache = cache_in(tmp.path(), 3 * entry_bytes);
        for (key, age) in [(1, 300), (2, 200), (3, 100)] {
            cache.put(key, &payload).expect("put");
            set_age(&cache, key, age);
        }
        assert_eq!(cache.get(1), hit(&payload), "touches entry 1");
        cache.put(4, &payload).expect("put 4th");
        assert_eq!(cache.get(2), Lookup::Miss, "least recently used is evicted");
        for key in [1, 3, 4] {
            assert_eq!(cache.get(key), hit(&payload), "entry {key} stays");
        }
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 3,
                bytes: 3 * entry_bytes
            }
        );
    }

    #[test]
    fn oversized_entry_is_kept_and_others_evicted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1);
        cache.put(1, b"first").expect("put");
        assert_eq!(cache.get(1), hit(b"first"), "just written, never evicted");
        cache.put(2, b"second").expect("put");
        assert_eq!(cache.get(1), Lookup::Miss);
        assert_eq!(cache.get(2), hit(b"second"));
    }

    #[test]
    fn stats_and_clear_touch_entries_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        assert_eq!(cache.stats(), CacheStats::default());
        assert_eq!(cache.clear().expect("clear absent dir"), 0);
        cache.put(1, b"abc").expect("put");
        cache.put(2, b"defgh").expect("put");
        let other = cache.config().dir.join("notes.txt");
        fs::write(&other, b"not an entry").expect("write other file");
        let upper = cache.config().dir.join("00000000000000AB.cubin");
        fs::write(&upper, b"not an entry either").expect("write other file");
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 2,
                bytes: 2 * HEADER_LEN as u64 + 8
            }
        );
        assert_eq!(cache.clear().expect("clear"), 2);
        assert_eq!(cache.stats(), CacheStats::default());
        assert!(other.exists() && upper.exists(), "other files are kept");
        assert_eq!(cache.get(1), Lookup::Miss);
    }

    #[test]
    fn entry_names() {
        assert!(is_entry_name("0123456789abcdef.cubin"));
        assert!(!is_entry_name("0123456789ABCDEF.cubin"));
        assert!(!is_entry_name("0123456789abcde.cubin"));
        assert!(!is_entry_name("0123456789abcdef.cubin.tmp"));
        assert!(!is_entry_name(&temp_name(1)));
    }

    #[test]
    fn temp_names_are_random_and_recognized() {
        let (a, b) = (temp_name(0xab), temp_name(0xab));
        assert_ne!(a, b, "two writers of one key never share a temp file");
        assert!(a.starts_with(".00000000000000ab."), "{a}");
        assert!(is_temp_name(&a) && is_temp_name(&b));
        for other in [
            "00000000000000ab.cubin",
            ".00000000000000ab.tmp",
            ".tmpA1b2C3",
            ".00000000000000AB.x.tmp",
            "x.00000000000000ab.1.tmp",
        ] {
            assert!(!is_temp_name(other), "{other}");
        }
    }

    /// Regression: a writer whose temp name was taken (the pid-and-counter names of
    /// containers sharing the directory collided) deleted the other writer's file.
    #[test]
    fn a_taken_temp_name_is_neither_written_nor_deleted() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let temp = tmp.path().join(temp_name(3));
        fs::write(&temp, b"another writer's").expect("write");
        let err = write_temp(&temp, 3, b"mine").expect_err("the name is taken");
        assert!(
            err.to_string().contains(&temp.display().to_string()),
            "{err}"
        );
        assert_eq!(fs::read(&temp).expect("still there"), b"another writer's");
    }

    #[test]
    fn put_removes_stale_temp_files_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = cache_in(tmp.path(), 1 << 20);
        cache.put(1, b"x").expect("put");
        let dir = &cache.config().dir;
        let aged = |name: &str, age: Duration| {
            let path = dir.join(name);
            let file = File::create(&path).expect("create");
            file.set_modified(SystemTime::now() - age)
                .expect("set mtime");
            path
        };
        let hour = STALE_TEMP_AGE + Duration::from_secs(60);
        let dead = aged(&temp_name(2), hour);
        let live = aged(&temp_name(2), Duration::from_secs(5));
        let foreign = aged(".tmpA1b2C3", hour);
        cache.put(2, b"y").expect("put");
        assert!(!dead.exists(), "a dead writer's temp file is removed");
        assert!(live.exists(), "a live writer's temp file is kept");
        assert!(foreign.exists(), "other files are kept");
        assert_eq!(cache.get(2), hit(b"y"));
    }

    #[test]
    fn max_bytes_parsing() {
        assert_eq!(parse_max_bytes(None).expect("default"), 1 << 30);
        assert_eq!(parse_max_bytes(Some("4096")).expect("plain"), 4096);
        for bad in ["1GiB", "-1", "", "1e9", "18446744073709551616"] {
            let err = parse_max_bytes(Some(bad)).expect_err(bad).to_string();
            assert!(err.contains("TIR_CACHE_MAX_BYTES"), "{err}");
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn dir_resolution_order() {
        let os = |s: &str| Some(OsString::from(s));
        let temp = PathBuf::from("/tmp");
        assert_eq!(
            resolve_dir(os("/a"), os("/x"), os("/h"), temp.clone()),
            PathBuf::from("/a")
        );
        assert_eq!(
            resolve_dir(None, os("/x"), os("/h"), temp.clone()),
            PathBuf::from("/x/tir/kernels")
        );
        assert_eq!(
            resolve_dir(None, os("relative"), os("/h"), temp.clone()),
            PathBuf::from("/h/.cache/tir/kernels")
        );
        assert_eq!(
            resolve_dir(None, None, None, temp),
            PathBuf::from("/tmp/tir-kernels")
        );
    }
}
