//! `.tirpkg` bytes → `backend_cuda::package::from_bytes` (as given, and with the header's
//! length and checksum recomputed): a package it returns is consistent and round-trips.
//! The body is `testsuite::fuzz::tirpkg`, which `cargo test -p testsuite` replays on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    testsuite::fuzz::tirpkg(data);
});
