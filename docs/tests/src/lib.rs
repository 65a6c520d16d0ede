//! tir-docs: the guide's tests. Each page of `docs/` (and README.md) is the doc comment of a
//! module here, so `cargo test -p tir-docs --doc` compiles and runs every ```rust block in them;
//! `tests/shell.rs` runs the shell blocks marked `<!-- run -->`.
