//! How an executable runs: the execution mode, and which path each plain matmul takes.

use std::collections::BTreeMap;

/// How [`Executable::run`] executes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// Enqueue copies and launches, then wait.
    #[default]
    Sync,
    /// Replay a CUDA graph of the launches (captured again when dims or addresses change). A
    /// program with a write position that the run computes runs as in `Sync` instead: its
    /// launch checks wait for the kernels before them.
    Graph,
    /// [`CudaExecutable::run_async`], waited for.
    Async,
}

/// How a kernel that is a plain matmul ([`LibraryCall::MatMul`]) runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulPath {
    /// The generated Tile IR kernel.
    Generated,
    /// cuBLASLt.
    Cublas,
    /// Whichever measures faster for the shape, timed on the GPU at the first run that binds
    /// it (the generated kernel where cuBLASLt cannot run it).
    #[default]
    Auto,
}

/// The matmul path of every kernel, and of named kernels (`k3_matmul`, as `tirc explain
/// --tile` names them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatmulPolicy {
    pub default: MatmulPath,
    pub per_kernel: BTreeMap<String, MatmulPath>,
}

impl MatmulPolicy {
    /// `auto`, `generated` or `cublaslt`, then optionally `KERNEL=PATH` items, comma-separated
    /// (`generated,k3_matmul=cublaslt`).
    pub fn parse(text: &str) -> Result<MatmulPolicy, String> {
        let path = |word: &str| match word.trim() {
            "auto" => Ok(MatmulPath::Auto),
            "generated" => Ok(MatmulPath::Generated),
            "cublaslt" => Ok(MatmulPath::Cublas),
            other => Err(format!(
                "unknown matmul path `{other}` (expected auto, generated or cublaslt)"
            )),
        };
        let mut policy = MatmulPolicy::default();
        for item in text.split(',').filter(|i| !i.trim().is_empty()) {
            match item.split_once('=') {
                Some((kernel, p)) => {
                    policy
                        .per_kernel
                        .insert(kernel.trim().to_string(), path(p)?);
                }
                None => policy.default = path(item)?,
            }
        }
        Ok(policy)
    }

    /// `$TIR_MATMUL` parsed, or the default (auto) when it is unset.
    pub fn from_env() -> Result<MatmulPolicy, String> {
        match std::env::var("TIR_MATMUL") {
            Ok(text) => MatmulPolicy::parse(&text).map_err(|e| format!("TIR_MATMUL: {e}")),
            Err(_) => Ok(MatmulPolicy::default()),
        }
    }

    pub(crate) fn of(&self, kernel: &str) -> MatmulPath {
        self.per_kernel.get(kernel).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_policies_parse_with_per_kernel_overrides() {
        let p = MatmulPolicy::parse("generated,k3_matmul=cublaslt, k5_matmul = auto").unwrap();
        assert_eq!(p.default, MatmulPath::Generated);
        assert_eq!(p.of("k3_matmul"), MatmulPath::Cublas);
        assert_eq!(p.of("k5_matmul"), MatmulPath::Auto);
        assert_eq!(p.of("k0_matmul"), MatmulPath::Generated);
        assert_eq!(MatmulPolicy::parse("").unwrap(), MatmulPolicy::default());
        let e = MatmulPolicy::parse("k1=fast").unwrap_err();
        assert!(e.contains("`fast`"), "{e}");
    }
}
