//! `.npy` bytes → `tirc::npy::decode`: a tensor it returns round-trips through `encode`.
//! The body is `testsuite::fuzz::npy`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::npy(data);
});
