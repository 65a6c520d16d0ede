//! A graph (`.tir` bytes or text) → verify → optimize → lower for the reference backend →
//! compile → a run of a small graph in checking mode: refusals only, never a panic.
//! The body is `testsuite::fuzz::pipeline`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::pipeline(data);
});
