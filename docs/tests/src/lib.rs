//! tir-docs: the guide's tests. Each page of `docs/` and README.md is the doc comment of a module
//! here, so `cargo test -p tir-docs --doc` compiles and runs every ```rust block in them
//! (`no_run` blocks, which need a GPU, are compiled only); `tests/shell.rs` runs the shell blocks
//! marked `<!-- run -->`.

#[doc = include_str!("../../../README.md")]
pub mod readme {}

#[doc = include_str!("../../graphs.md")]
pub mod graphs {}

#[doc = include_str!("../../ir.md")]
pub mod ir {}

#[doc = include_str!("../../files.md")]
pub mod files {}

#[doc = include_str!("../../tirc.md")]
pub mod tirc {}

#[doc = include_str!("../../onnx.md")]
pub mod onnx {}

#[doc = include_str!("../../run-api.md")]
pub mod run_api {}

#[doc = include_str!("../../quantized.md")]
pub mod quantized {}

#[doc = include_str!("../../mesh.md")]
pub mod mesh {}

#[doc = include_str!("../../cuda.md")]
pub mod cuda {}

#[doc = include_str!("../../optimizer.md")]
pub mod optimizer {}

#[doc = include_str!("../../backends.md")]
pub mod backends {}

#[doc = include_str!("../../benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("../../embed.md")]
pub mod embed {}

#[doc = include_str!("../../custom-kernels.md")]
pub mod custom_kernels {}
