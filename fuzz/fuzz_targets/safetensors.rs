//! `.safetensors` bytes → `tir_graph::weights::WeightsFile::from_bytes`: every tensor of an
//! accepted file can be read.
//! The body is `testsuite::fuzz::safetensors`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::safetensors(data);
});
