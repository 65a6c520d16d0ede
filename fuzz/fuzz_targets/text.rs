//! Text → `tir_graph::text::parse`: a graph it returns verifies, and its printed form parses
//! back to the same graph.
//! The body is `testsuite::fuzz::text`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::text(data);
});
