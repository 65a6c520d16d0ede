//! The committed example files are exactly what the generator writes, and load back unchanged.

use std::path::PathBuf;
use tir_graph::{file, models, text};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

#[test]
fn examples_are_current() {
    let stale = "is stale: run `cargo run -p tir-graph --example gen_examples`";
    for (name, graph) in models::examples().unwrap() {
        let binary = std::fs::read(examples_dir().join(format!("{name}.tir"))).unwrap();
        assert!(
            binary == file::encode(&graph),
            "examples/{name}.tir {stale}"
        );
        let listing = std::fs::read_to_string(examples_dir().join(format!("{name}.tirt"))).unwrap();
        assert!(
            listing == text::print(&graph),
            "examples/{name}.tirt {stale}"
        );
        assert_eq!(file::decode(&binary).unwrap(), graph);
        assert_eq!(text::parse(&listing).unwrap(), graph);
    }
}
