//! `tir-fuzz-seeds [DIR]`: writes the fuzz targets' seed inputs into `DIR/TARGET/` (default
//! `fuzz/seeds`), made with tir's own writers (see `testsuite::fuzz::seeds`).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/seeds".into()),
    );
    match testsuite::fuzz::seeds::write(&dir) {
        Ok(n) => {
            println!("wrote {n} seeds into {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
