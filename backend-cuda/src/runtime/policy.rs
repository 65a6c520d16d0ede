//! How an executable runs: the execution mode, and which path each kernel that a library can
//! run takes (plain matmuls: cuBLASLt; fused attention and convolutions: cuDNN).

use std::collections::BTreeMap;

/// How [`Executable::run`](tir_lower::Executable::run) executes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecMode {
    /// Enqueue copies and launches, then wait.
    #[default]
    Sync,
    /// Replay a CUDA graph of the launches (captured again when dims or addresses change). A
    /// program with a write position that the run computes runs as in `Sync` instead: its
    /// launch checks wait for the kernels before them.
    Graph,
    /// [`CudaExecutable::run_async`](crate::CudaExecutable::run_async), waited for.
    Async,
}

/// How a kernel that is a plain matmul ([`LibraryCall::MatMul`]) runs.
///
/// [`LibraryCall::MatMul`]: tir_lower::tile::LibraryCall::MatMul
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

/// How a kernel that is a fused attention ([`LibraryCall::Attention`]) runs.
///
/// [`LibraryCall::Attention`]: tir_lower::tile::LibraryCall::Attention
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionPath {
    /// The generated Tile IR kernel.
    Generated,
    /// cuDNN's fused attention.
    Cudnn,
    /// Whichever measures faster, timed on the GPU at the first run, for a kernel whose shape
    /// depends on no symbolic dim (cuDNN builds a plan per shape, compiling kernels at run
    /// time); the generated kernel for the others, and where cuDNN is missing or has no
    /// engine.
    #[default]
    Auto,
}

/// How a kernel that is a convolution with its bias and activation ([`LibraryCall::Conv`])
/// runs.
///
/// [`LibraryCall::Conv`]: tir_lower::tile::LibraryCall::Conv
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvPath {
    /// The generated Tile IR kernel.
    Generated,
    /// One cuDNN execution plan (convolution, bias, activation).
    Cudnn,
    /// Whichever measures faster, timed on the GPU at the first run, for a kernel whose batch
    /// is static (cuDNN builds a plan per shape); the generated kernel for the others, and
    /// where cuDNN is missing or has no engine.
    #[default]
    Auto,
}

/// The paths one library can take: the words that name them and the variable that sets them.
pub trait LibraryPath: Copy + Default + 'static {
    /// The environment variable read by [`Policy::from_env`].
    const VARIABLE: &'static str;
    /// The words, each with its path.
    const WORDS: &'static [(&'static str, Self)];
}

impl LibraryPath for MatmulPath {
    const VARIABLE: &'static str = "TIR_MATMUL";
    const WORDS: &'static [(&'static str, Self)] = &[
        ("auto", MatmulPath::Auto),
        ("generated", MatmulPath::Generated),
        ("cublaslt", MatmulPath::Cublas),
    ];
}

impl LibraryPath for AttentionPath {
    const VARIABLE: &'static str = "TIR_ATTENTION";
    const WORDS: &'static [(&'static str, Self)] = &[
        ("auto", AttentionPath::Auto),
        ("generated", AttentionPath::Generated),
        ("cudnn", AttentionPath::Cudnn),
    ];
}

impl LibraryPath for ConvPath {
    const VARIABLE: &'static str = "TIR_CONV";
    const WORDS: &'static [(&'static str, Self)] = &[
        ("auto", ConvPath::Auto),
        ("generated", ConvPath::Generated),
        ("cudnn", ConvPath::Cudnn),
    ];
}

/// The path of every kernel, and of named kernels (`k3_matmul`, as `tirc explain --tile`
/// names them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy<P> {
    pub default: P,
    pub per_kernel: BTreeMap<String, P>,
}

/// The paths of plain matmuls (`$TIR_MATMUL`).
pub type MatmulPolicy = Policy<MatmulPath>;

/// The paths of fused attentions (`$TIR_ATTENTION`).
pub type AttentionPolicy = Policy<AttentionPath>;

/// The paths of convolutions (`$TIR_CONV`).
pub type ConvPolicy = Policy<ConvPath>;

impl<P: LibraryPath> Policy<P> {
    /// A path's word (`auto`, `generated` or the library's), then optionally `KERNEL=PATH`
    /// items, comma-separated (`generated,k3_matmul=cublaslt`).
    pub fn parse(text: &str) -> Result<Policy<P>, String> {
        let path = |word: &str| {
            let word = word.trim();
            P::WORDS
                .iter()
                .find(|(w, _)| *w == word)
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    let words: Vec<&str> = P::WORDS.iter().map(|(w, _)| *w).collect();
                    format!("unknown path `{word}` (expected {})", words.join(", "))
                })
        };
        let mut policy = Policy::<P>::default();
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

    /// The library's variable parsed, or the default (auto) when it is unset.
    pub fn from_env() -> Result<Policy<P>, String> {
        match std::env::var(P::VARIABLE) {
            Ok(text) => Policy::parse(&text).map_err(|e| format!("{}: {e}", P::VARIABLE)),
            Err(_) => Ok(Policy::default()),
        }
    }

    pub(crate) fn of(&self, kernel: &str) -> P {
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
        assert!(e.contains("`fast`") && e.contains("cublaslt"), "{e}");
        let p = AttentionPolicy::parse("cudnn,k2_attention=generated").unwrap();
        assert_eq!(p.of("k0_attention"), AttentionPath::Cudnn);
        assert_eq!(p.of("k2_attention"), AttentionPath::Generated);
        let e = AttentionPolicy::parse("cublaslt").unwrap_err();
        assert!(e.contains("expected auto, generated, cudnn"), "{e}");
        let p = ConvPolicy::parse("generated,k1_conv=cudnn").unwrap();
        assert_eq!(p.of("k0_conv"), ConvPath::Generated);
        assert_eq!(p.of("k1_conv"), ConvPath::Cudnn);
        assert_eq!(ConvPolicy::parse("").unwrap().default, ConvPath::Auto);
        let e = ConvPolicy::parse("fast").unwrap_err();
        assert!(
            e.contains("`fast`") && e.contains("expected auto, generated, cudnn"),
            "{e}"
        );
    }
}
