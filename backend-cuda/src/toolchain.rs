//! The Tile IR toolchain: finding `tileiras` (and the `ptxas` beside it), its version, the
//! bytecode version it reads, and assembling bytecode into a cubin.
//!
//! `tileiras` is looked for, in order: `$TIR_TILEIRAS` (the binary), `$CUTILE_TILEIRAS_PATH`,
//! `$CUDA_HOME/bin/tileiras`, the project-local install `.tools/cuda/nvidia/cu13/bin/tileiras`
//! in the current directory or an ancestor (what `scripts/install-tileiras.sh` makes), then
//! `tileiras` on `PATH`.

use cutile_ir::bytecode::BytecodeVersion;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How to install the toolchain, for error messages.
pub const INSTALL_HINT: &str = "install it with `bash scripts/install-tileiras.sh` (pip, into \
     .tools/cuda) or point TIR_TILEIRAS at a tileiras binary";

const LOCAL_INSTALL: &str = ".tools/cuda/nvidia/cu13/bin/tileiras";

/// Why `tileiras` could not be found, run or made to assemble a kernel.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// No `tileiras` in any of the places the module doc lists.
    #[error("tileiras was not found; {INSTALL_HINT}")]
    NotFound,
    /// The `tileiras` found does not run or does not report a usable version.
    #[error("{path} does not run: {reason}")]
    Broken {
        /// The binary.
        path: String,
        /// What failed.
        reason: String,
    },
    /// `tileiras` refused a kernel's bytecode.
    #[error("tileiras rejected kernel {kernel} for {arch}: {message}")]
    Rejected {
        /// The kernel's name.
        kernel: String,
        /// The target architecture (`sm_90`).
        arch: String,
        /// What `tileiras` printed.
        message: String,
    },
    /// Writing its input or reading its output failed.
    #[error("{0}")]
    Io(String),
}

/// A located `tileiras`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    /// The `tileiras` binary.
    pub tileiras: PathBuf,
    /// The release, e.g. `13.5.37`.
    pub version: String,
    /// The newest bytecode version both it and `cutile-ir` speak.
    pub bytecode: BytecodeVersion,
}

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for var in ["TIR_TILEIRAS", "CUTILE_TILEIRAS_PATH"] {
        if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            out.push(PathBuf::from(p));
        }
    }
    if let Some(home) = std::env::var_os("CUDA_HOME").filter(|v| !v.is_empty()) {
        out.push(Path::new(&home).join("bin/tileiras"));
    }
    if let Ok(cwd) = std::env::current_dir() {
        out.extend(cwd.ancestors().map(|d| d.join(LOCAL_INSTALL)));
    }
    if let Ok(exe) = std::env::current_exe() {
        out.extend(exe.ancestors().skip(1).map(|d| d.join(LOCAL_INSTALL)));
    }
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path).map(|d| d.join("tileiras")));
    }
    out
}

/// `PATH` with `tileiras`'s own directory first, so it finds the `ptxas` of its release.
fn search_path(tileiras: &Path) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = tileiras
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

impl Toolchain {
    /// Finds `tileiras` (see the module doc) and asks it for its versions.
    pub fn locate() -> Result<Toolchain, ToolchainError> {
        Toolchain::at(&Toolchain::find().ok_or(ToolchainError::NotFound)?)
    }

    /// The `tileiras` binary the module doc's search finds, without running it.
    pub fn find() -> Option<PathBuf> {
        candidates().into_iter().find(|p| p.is_file())
    }

    /// The toolchain whose `tileiras` is `path`.
    pub fn at(path: &Path) -> Result<Toolchain, ToolchainError> {
        let broken = |reason: String| ToolchainError::Broken {
            path: path.display().to_string(),
            reason,
        };
        let out = Command::new(path)
            .arg("--version")
            .env("PATH", search_path(path))
            .output()
            .map_err(|e| broken(e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix('V'))
            .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .ok_or_else(|| broken(format!("unexpected --version output: {}", text.trim())))?
            .to_string();
        let bytecode = cutile_ir::toolchain::negotiate_bytecode_version(path, None)
            .map_err(|e| broken(e.to_string()))?;
        Ok(Toolchain {
            tileiras: path.to_path_buf(),
            version,
            bytecode,
        })
    }

    /// Assembles `bytecode` (of kernel `kernel`, for messages) into a cubin for `arch`
    /// (`sm_90`, `sm_100`, ...).
    pub fn assemble(
        &self,
        bytecode: &[u8],
        arch: &str,
        kernel: &str,
    ) -> Result<Vec<u8>, ToolchainError> {
        let io = |e: std::io::Error| ToolchainError::Io(format!("assembling {kernel}: {e}"));
        let dir = tempfile::tempdir().map_err(io)?;
        let input = dir.path().join("kernel.tileirbc");
        let output = dir.path().join("kernel.cubin");
        std::fs::write(&input, bytecode).map_err(io)?;
        let out = Command::new(&self.tileiras)
            .arg(format!("--gpu-name={arch}"))
            .args(["--opt-level", "3", "-o"])
            .arg(&output)
            .arg(&input)
            .env("PATH", search_path(&self.tileiras))
            .output()
            .map_err(io)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let message: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            return Err(ToolchainError::Rejected {
                kernel: kernel.to_string(),
                arch: arch.to_string(),
                message: message.join(" | "),
            });
        }
        std::fs::read(&output).map_err(io)
    }
}
