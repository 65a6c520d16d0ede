//! ONNX bytes → `Model::decode` → `import`: any input is refused with an error or imported
//! into a graph that verifies.
//! The body is `testsuite::fuzz::onnx_import`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::onnx_import(data);
});
