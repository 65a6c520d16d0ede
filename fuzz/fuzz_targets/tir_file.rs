//! `.tir` bytes → `tir_graph::file::decode` (as given, and with the header's length and
//! checksum recomputed): a graph it returns verifies and round-trips.
//! The body is `testsuite::fuzz::tir_file`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::tir_file(data);
});
