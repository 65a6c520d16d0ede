//! The Tile IR we emit for a handful of kernels, compared with golden MLIR text
//! (`tests/golden/NAME.mlir`; `TIR_BLESS=1 cargo test -p backend-cuda --test golden` rewrites
//! them), and every one of them accepted by `tileiras` for sm_90 and sm_100.

use backend_cuda::codegen::generate;
use backend_cuda::tuning::Tuning;
use backend_cuda::{gpu_target, MatmulPath, MatmulPolicy, Toolchain};
use std::path::PathBuf;
use tir_lower::compile_graph;

/// The graphs, one kernel kind each: elementwise with broadcasting, a row softmax, a matmul
/// with a K loop and a fused epilogue, a gather, a KV-cache state update, an integer matmul, a
/// batched matmul of enough tiles (288) for a persistent entry.
const CASES: &[(&str, &str)] = &[
    (
        "broadcast_add",
        "%0 = input \"x\" : f16[n, 64]\n\
         %1 = parameter \"b\" : f16[64]\n\
         %2 = add %0, %1 : f16[n, 64]\n\
         %3 = relu %2 : f16[n, 64]\n\
         output \"y\" = %3\n",
    ),
    (
        "softmax_rows",
        "%0 = input \"x\" : f32[8, 1000]\n\
         %1 = reduce_max %0 {axes = [1], keepdims = true} : f32[8, 1]\n\
         %2 = sub %0, %1 : f32[8, 1000]\n\
         %3 = exp %2 : f32[8, 1000]\n\
         %4 = reduce_sum %3 {axes = [1], keepdims = true} : f32[8, 1]\n\
         %5 = div %3, %4 : f32[8, 1000]\n\
         output \"y\" = %5\n",
    ),
    (
        "matmul_gelu",
        "%0 = input \"a\" : bf16[m, 256]\n\
         %1 = parameter \"w\" : bf16[256, 192]\n\
         %2 = matmul %0, %1 : bf16[m, 192]\n\
         %3 = gelu_tanh %2 : bf16[m, 192]\n\
         output \"y\" = %3\n",
    ),
    (
        "gather_rows",
        "%0 = parameter \"table\" : f32[100, 32]\n\
         %1 = input \"ids\" : i64[7]\n\
         %2 = gather %0, %1 {axis = 0} : f32[7, 32]\n\
         output \"y\" = %2\n",
    ),
    (
        "kv_update",
        "%0 = state \"cache\" : f16[4, 16, 8]\n\
         %1 = input \"new\" : f16[4, 1, 8]\n\
         %2 = input \"pos\" : i64[]\n\
         %3 = state_write_slice %0, %1, %2 {axis = 1} : f16[4, 16, 8]\n\
         %4 = reduce_sum %3 {axes = [1], keepdims = false} : f16[4, 8]\n\
         output \"y\" = %4\n",
    ),
    (
        "int_matmul",
        "%0 = input \"a\" : i32[5, 7]\n\
         %1 = input \"b\" : i32[7, 3]\n\
         %2 = matmul %0, %1 : i32[5, 3]\n\
         output \"y\" = %2\n",
    ),
    (
        "matmul_persistent",
        "%0 = input \"a\" : f16[3, 1024, 256]\n\
         %1 = parameter \"w\" : f16[256, 1536]\n\
         %2 = matmul %0, %1 : f16[3, 1024, 1536]\n\
         output \"y\" = %2\n",
    ),
];

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The MLIR text of every kernel of `source`, kernel after kernel.
fn emitted(name: &str, source: &str) -> (String, Vec<cutile_ir::Module>) {
    let text = format!("# tir graph, text form v1\n{source}");
    let graph = tir_graph::text::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    // Lowered for the generated matmul path, the one that fuses epilogues into matmuls.
    let policy = MatmulPolicy {
        default: MatmulPath::Generated,
        ..MatmulPolicy::default()
    };
    let compiled = compile_graph(
        &graph,
        &gpu_target(&backend_cuda::tuning::Tuning::default(), &policy),
        &tir_opt::Limits::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut mlir = String::new();
    let mut modules = Vec::new();
    for kernel in &compiled.program.kernels {
        let hints = Tuning::default().hints_for(&compiled.program, kernel);
        let generated = generate(kernel, &hints).unwrap_or_else(|e| panic!("{name}: {e}"));
        mlir.push_str(&format!("// kernel {}\n", kernel.name));
        mlir.push_str(&generated.module.to_mlir_text());
        mlir.push('\n');
        modules.push(generated.module);
    }
    (mlir, modules)
}

#[test]
fn emitted_mlir_matches_golden_files() {
    let bless = std::env::var_os("TIR_BLESS").is_some();
    for (name, source) in CASES {
        let (mlir, _) = emitted(name, source);
        let path = golden_dir().join(format!("{name}.mlir"));
        if bless {
            std::fs::write(&path, &mlir).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (bless with TIR_BLESS=1)", path.display()));
        assert!(
            want == mlir,
            "{name}: the emitted MLIR differs from {}; if the change is intended, rerun with \
             TIR_BLESS=1 and review the diff\n--- emitted ---\n{mlir}",
            path.display()
        );
    }
}

#[test]
fn tileiras_accepts_every_golden_kernel_for_hopper_and_blackwell() {
    let toolchain = Toolchain::locate().expect("the Tile IR toolchain (see README)");
    for (name, source) in CASES {
        let (_, modules) = emitted(name, source);
        for (i, module) in modules.iter().enumerate() {
            let bytes =
                cutile_ir::bytecode::write_bytecode_version(module, toolchain.bytecode).unwrap();
            for arch in ["sm_90", "sm_100"] {
                let cubin = toolchain
                    .assemble(&bytes, arch, &format!("{name}#{i}"))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(
                    &cubin[..4],
                    b"\x7fELF",
                    "{name}#{i} for {arch}: not an ELF cubin"
                );
            }
        }
    }
}
