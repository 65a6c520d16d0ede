//! Real ONNX models (built by scripts/onnx-models.sh with onnx.helper, expected outputs from
//! ONNX's reference evaluator) imported and run on the reference backend.

use std::path::Path;
use testsuite::onnx_node::{discover, run_node_test, NodeOutcome};

#[test]
fn exported_models_match_onnx_reference_evaluator() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/onnx-models");
    assert!(
        dir.is_dir(),
        "{} is missing: run `bash scripts/onnx-models.sh` (scripts/test.sh does)",
        dir.display()
    );
    let backend = backend_ref::RefBackend::default();
    let outcome = |name: &str| {
        let test = discover(&dir)
            .unwrap()
            .into_iter()
            .find(|t| t.name == name)
            .unwrap();
        run_node_test(&backend, &test).outcome
    };
    // A BERT-style encoder layer with a symbolic batch, shapes computed with Shape/Gather/Concat.
    assert_eq!(outcome("transformer_encoder"), NodeOutcome::Passed);
    assert_eq!(outcome("mlp_gemm"), NodeOutcome::Passed);
    // Conv (grouped too), MaxPool, BatchNormalization, GlobalAveragePool, Gemm.
    assert_eq!(outcome("small_cnn"), NodeOutcome::Passed);
}
