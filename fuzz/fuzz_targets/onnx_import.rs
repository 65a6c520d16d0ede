//! ONNX bytes → `Model::decode` → `import`: any input is refused with an error or imported into
//! a graph that verifies; nothing panics, loops or allocates without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = tir_onnx::Model::decode(data, None) else {
        return;
    };
    if let Ok(imported) = tir_onnx::import(&model, &tir_onnx::ImportOptions::default()) {
        if let Err(e) = imported.graph.verify() {
            panic!("an imported graph does not verify: {e}");
        }
    }
});
