//! Writes the example graphs to `examples/` at the workspace root: `NAME.tir` (binary) and
//! `NAME.tirt` (text form). `cargo run -p tir-graph --example gen_examples [DIR]`.
//! The test `examples_are_current` fails when the committed files differ from what this writes.

use std::path::PathBuf;
use std::process::ExitCode;
use tir_graph::{file, models, text};

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples"));
    match write_all(&dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_all(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    for (name, graph) in models::examples()? {
        file::write(&dir.join(format!("{name}.tir")), &graph)?;
        file::write_atomically(
            &dir.join(format!("{name}.tirt")),
            text::print(&graph).as_bytes(),
        )?;
        println!("wrote {name}.tir and {name}.tirt ({} nodes)", graph.len());
    }
    Ok(())
}
