//! States persist across runs; a failed launch check or kernel leaves them unchanged.

mod common;

use backend_ref::RefBackend;
use common::programs::cache_writer;
use common::{sources, tensor};
use tir_graph::DType;
use tir_lower::testing::RunF64;
use tir_lower::{Backend, BackendError};

fn step(
    pos: i64,
    fill: f64,
    width: u64,
) -> std::collections::BTreeMap<String, tir_graph::eval::F64Tensor> {
    sources(vec![
        ("pos", tensor(DType::I64, &[1], vec![pos as f64])),
        (
            "v",
            tensor(DType::F32, &[1, width], vec![fill; width as usize]),
        ),
    ])
}

#[test]
fn state_slices_persist_across_runs() {
    let program = cache_writer(8.into(), true);
    for backend in [RefBackend::new(), RefBackend::checking()] {
        let mut exe = backend.compile(&program).unwrap();
        assert_eq!(
            exe.states_f64()["cache"].data,
            vec![0.0; 32],
            "zeros before the first run"
        );
        for pos in 0..3 {
            exe.run_f64(&step(pos, pos as f64 + 1.0, 8)).unwrap();
        }
        let cache = exe.states_f64()["cache"].clone();
        assert_eq!(cache.dims, vec![4, 8]);
        let mut expected = vec![1.0; 8];
        expected.extend([2.0; 8]);
        expected.extend([3.0; 8]);
        expected.extend([0.0; 8]);
        assert_eq!(cache.data, expected);

        // Out-of-range positions fail the launch check and leave the state unchanged.
        for pos in [4, -1, 100] {
            match exe.run_f64(&step(pos, 9.0, 8)) {
                Err(BackendError::Kernel { kernel, reason }) => {
                    assert_eq!(kernel, "k0_cache_write");
                    assert!(reason.contains("the KV-cache slot of cache"), "{reason}");
                    assert!(reason.contains(&format!("position {pos}")), "{reason}");
                }
                other => panic!("position {pos}: {other:?}"),
            }
            assert_eq!(exe.states_f64()["cache"], cache);
        }
        // The last slot is in range.
        exe.run_f64(&step(3, 4.0, 8)).unwrap();
        assert_eq!(exe.states_f64()["cache"].data[24..], [4.0; 8]);
    }
}

#[test]
fn without_a_launch_check_the_store_is_still_bounds_checked() {
    let program = cache_writer(8.into(), false);
    let mut exe = RefBackend::new().compile(&program).unwrap();
    exe.run_f64(&step(1, 5.0, 8)).unwrap();
    let before = exe.states_f64()["cache"].clone();
    let err = exe.run_f64(&step(4, 9.0, 8)).err().unwrap();
    assert!(
        err.to_string()
            .contains("outside buffer cache of 32 elements"),
        "{err}"
    );
    assert_eq!(exe.states_f64()["cache"], before);
    // In checking mode the write region itself is checked against the buffer.
    let mut exe = RefBackend::checking().compile(&program).unwrap();
    let err = exe.run_f64(&step(4, 9.0, 8)).err().unwrap();
    assert!(
        err.to_string()
            .contains("write region 4..5 along axis 0 of cache"),
        "{err}"
    );
}

#[test]
fn a_state_keeps_the_shape_of_its_first_run() {
    let program = cache_writer("d".into(), true);
    let mut exe = RefBackend::checking().compile(&program).unwrap();
    assert!(
        exe.states_f64().is_empty(),
        "a symbolic state has no value before a run"
    );
    exe.run_f64(&step(0, 1.0, 8)).unwrap();
    exe.run_f64(&step(1, 2.0, 8)).unwrap();
    assert_eq!(exe.states_f64()["cache"].dims, vec![4, 8]);
    let err = exe.run_f64(&step(2, 3.0, 6)).err().unwrap();
    assert_eq!(
        err.to_string(),
        "state \"cache\": this run binds f32[4, 6], but earlier runs bound f32[4, 8]"
    );
}

/// A graph whose run-time write position falls outside its state, past either end or with a
/// slice longer than the room left, is refused at launch, before any kernel runs, with the
/// state, the position and the bounds named; in range, it runs. For i32 and i64 positions, with
/// and without checking mode.
#[test]
fn graph_write_positions_outside_the_state_are_refused_at_launch() {
    for dtype in ["i32", "i64"] {
        let graph = tir_graph::text::parse(&format!(
            "%0 = state \"cache\" : f32[4, 8]\n\
             %1 = input \"v\" : f32[2, 8]\n\
             %2 = input \"pos\" : {dtype}[]\n\
             %3 = state_write_slice %0, %1, %2 {{axis = 0}} : f32[4, 8]\n\
             %4 = reduce_sum %3 {{axes = [1], keepdims = false}} : f32[4]\n\
             output \"y\" = %4\n"
        ))
        .unwrap();
        let dt = if dtype == "i32" {
            DType::I32
        } else {
            DType::I64
        };
        for backend in [RefBackend::new(), RefBackend::checking()] {
            let compiled =
                tir_lower::compile_graph(&graph, &backend.target(), &tir_opt::Limits::default())
                    .unwrap();
            let mut exe = backend.compile(&compiled.program).unwrap();
            let run = |exe: &mut Box<dyn tir_lower::Executable>, pos: i64| {
                exe.run_f64(&sources(vec![
                    ("pos", tensor(dt, &[], vec![pos as f64])),
                    ("v", tensor(DType::F32, &[2, 8], vec![1.5; 16])),
                ]))
            };
            run(&mut exe, 1).unwrap();
            let before = exe.states_f64();
            for pos in [-1, 3, 4, 100, i64::from(i32::MIN)] {
                match run(&mut exe, pos) {
                    Err(BackendError::Kernel { kernel, reason }) => {
                        assert_eq!(kernel, "k0_state_update");
                        assert_eq!(
                            reason,
                            format!(
                                "launch check failed: the write position of state `cache`: \
                                 position {pos} (from pos) with length 2 does not fit in 0..4"
                            )
                        );
                    }
                    other => panic!("{dtype} position {pos}: {other:?}"),
                }
                assert_eq!(exe.states_f64(), before, "{dtype} position {pos}");
            }
            for pos in [0, 2] {
                let out = run(&mut exe, pos).unwrap();
                assert_eq!(out.outputs["y"].dims, vec![4]);
            }
        }
    }
}
