//! The cost model of fusion, and the limits a backend sets.
//!
//! A kernel costs the bytes it moves through device memory plus a fixed cost per launch, counted
//! in bytes too ([`FusionTarget::launch_cost_bytes`]: about what the GPU streams in the time a
//! launch takes). A kernel reads each input once and writes its root once; values computed inside
//! it cost nothing. A symbolic dim counts as [`FusionTarget::symbolic_dim_estimate`]. On a target
//! that runs plain float products on a library, a product kernel no library call can run costs a
//! byte more, which breaks ties toward the library (see `OFF_LIBRARY_BYTES` in the fusion
//! module).
//!
//! Extraction charges each kernel its own cost plus, for each input, the cost of the kernel that
//! produces it divided by the number of kernels that may read it (this one, and one per user
//! outside it), so a value shared by several consumers is paid for about once in total rather
//! than once per consumer (tree costs would count it once per path and grow exponentially on a
//! residual stream).

use tir_graph::{Dim, TensorType};

/// What a backend allows in one kernel, and the constants of the cost model.
#[derive(Clone, Debug, PartialEq)]
pub struct FusionTarget {
    /// The most distinct values one kernel may read.
    pub max_inputs: usize,
    /// The longest row (innermost axis) a row-reduction kernel keeps in one tile program.
    pub max_reduction_width: u64,
    /// Whether elementwise epilogues may fuse into a float matmul kernel. A backend that runs
    /// plain float products on a library faster than its own kernels turns this off, since a
    /// fused epilogue would tie the product to its own kernel; integer matmuls, which no library
    /// runs, always take their epilogues.
    pub fuse_matmul_epilogue: bool,
    /// Whether a convolution whose input comes from outside a channels-last chain reads a
    /// channels-last copy of it ([`crate::channels_last::copy_conv_inputs`]): for a backend
    /// whose convolutions run faster on NHWC tensors.
    pub conv_inputs_channels_last: bool,
    /// The fixed cost of one launch, in bytes of memory traffic.
    pub launch_cost_bytes: f64,
    /// The size assumed for a symbolic dim when estimating bytes.
    pub symbolic_dim_estimate: u64,
}

impl Default for FusionTarget {
    fn default() -> Self {
        FusionTarget {
            max_inputs: 16,
            max_reduction_width: 32_768,
            fuse_matmul_epilogue: true,
            conv_inputs_channels_last: true,
            // ~3 µs of launch and tail at ~3 TB/s.
            launch_cost_bytes: 8.0e6,
            symbolic_dim_estimate: 1024,
        }
    }
}

impl FusionTarget {
    /// Estimated bytes of one value of type `ty`.
    pub fn bytes(&self, ty: &TensorType) -> u64 {
        let elements = ty.shape.dims().iter().fold(1u64, |acc, d| {
            let n = match d {
                Dim::Static(n) => *n,
                Dim::Symbolic(_) => self.symbolic_dim_estimate,
                // Each symbol at the estimate; an expression that fails there counts as one symbol.
                Dim::Expr(e) => {
                    let guess = e
                        .symbols()
                        .into_iter()
                        .map(|s| (s, self.symbolic_dim_estimate))
                        .collect();
                    e.eval(&guess)
                        .ok()
                        .and_then(|v| u64::try_from(v).ok())
                        .unwrap_or(self.symbolic_dim_estimate)
                }
            };
            acc.saturating_mul(n)
        });
        elements.saturating_mul(ty.dtype.size_bytes() as u64)
    }
}
