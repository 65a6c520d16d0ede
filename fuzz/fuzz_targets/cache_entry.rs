//! Kernel-cache entry bytes → `backend_cuda::cache::decode_entry`: an accepted entry is
//! exactly what `encode_entry` writes for its payload.
//! The body is `testsuite::fuzz::cache_entry`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::cache_entry(data);
});
