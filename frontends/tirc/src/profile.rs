//! `tirc run --profile` and `--trace`: where a run's time goes on the GPU.
//!
//! Both come from traced runs ([`CudaExecutable::trace_run`]): after the run whose outputs are
//! written (the warm-up, which also loads the libraries and makes every choice), the program
//! runs [`PROFILE_RUNS`] more times with the same inputs, every copy and kernel timed by events
//! on its stream. `--profile` prints each kernel's median time, how it ran, its bandwidth and
//! FLOP/s at the run's dims and its share of the run; `--trace` writes the last traced run as a
//! Chrome trace (JSON, opened by Perfetto or `chrome://tracing`): one track per stream, one
//! slice per copy and kernel.

use backend_cuda::{CudaExecutable, KernelWork, RunTrace, SpanKind};
use serde_json::json;
use tir_lower::{BackendError, TensorRef};

/// The traced runs a profile or trace takes its times from.
pub const PROFILE_RUNS: usize = 10;

/// [`PROFILE_RUNS`] traced runs of `exe` with `inputs`.
pub fn traced_runs(
    exe: &mut CudaExecutable,
    inputs: &[(&str, TensorRef<'_>)],
) -> Result<Vec<RunTrace>, BackendError> {
    (0..PROFILE_RUNS)
        .map(|_| exe.trace_run(inputs).map(|(_, trace)| trace))
        .collect()
}

/// The median of `values` (0 for none).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// A run's time on the GPU: from its first copy or kernel's start to its last one's end.
fn run_ms(trace: &RunTrace) -> f64 {
    let start = trace
        .spans
        .iter()
        .map(|s| s.start_ms)
        .fold(f64::MAX, f64::min);
    let end = trace.spans.iter().map(|s| s.end_ms).fold(0.0, f64::max);
    (end - start).max(0.0)
}

/// The medians over `traces` of each copy direction's summed time.
fn copies_ms(traces: &[RunTrace], direction: &SpanKind) -> f64 {
    median(
        traces
            .iter()
            .map(|t| {
                t.spans
                    .iter()
                    .filter(|s| &s.kind == direction)
                    .map(|s| s.end_ms - s.start_ms)
                    .sum()
            })
            .collect(),
    )
}

/// Kernel `index`'s median time over `traces`, and how it ran in the last.
fn kernel_ms(traces: &[RunTrace], index: usize) -> (f64, String) {
    let mut how = String::new();
    let mut times = Vec::with_capacity(traces.len());
    for trace in traces {
        for span in &trace.spans {
            if let SpanKind::Kernel { index: k, how: h } = &span.kind {
                if *k == index {
                    times.push(span.end_ms - span.start_ms);
                    how.clone_from(h);
                }
            }
        }
    }
    (median(times), how)
}

/// A kernel's kind, from the name lowering gives it (`k3_matmul` is a matmul).
fn kind_of(name: &str) -> &str {
    name.split_once('_').map_or(name, |(_, kind)| kind)
}

/// `value` per millisecond in units of 1e`exponent` per second, or `-` for nothing.
fn per_second(value: f64, ms: f64, exponent: i32) -> String {
    if value <= 0.0 || ms <= 0.0 {
        return "-".to_string();
    }
    format!("{:.1}", value / (ms * 1e-3) / 10f64.powi(exponent))
}

/// The `--profile` table: one line per kernel in program order (see the module doc).
pub fn profile_table(traces: &[RunTrace], work: &[KernelWork], device: &str) -> String {
    let run = median(traces.iter().map(run_ms).collect());
    let uploads = copies_ms(traces, &SpanKind::Upload);
    let downloads = copies_ms(traces, &SpanKind::Download);
    let mut out = format!(
        "profile on {device}, median of {} traced runs: {run:.4} ms on the GPU \
         (copies in {uploads:.4} ms, out {downloads:.4} ms)\n",
        traces.len()
    );
    out.push_str(&format!(
        "{:<24} {:<12} {:<14} {:>9} {:>6} {:>8} {:>8}\n",
        "kernel", "kind", "how", "ms", "share", "GB/s", "TFLOP/s"
    ));
    for (index, w) in work.iter().enumerate() {
        let (ms, how) = kernel_ms(traces, index);
        let share = if run > 0.0 { 100.0 * ms / run } else { 0.0 };
        out.push_str(&format!(
            "{:<24} {:<12} {:<14} {:>9.4} {:>5.1}% {:>8} {:>8}\n",
            w.name,
            kind_of(&w.name),
            how,
            ms,
            share,
            per_second(w.bytes, ms, 9),
            per_second(w.flops, ms, 12),
        ));
    }
    out
}

/// `trace` as a Chrome trace: one track per stream, one complete event per copy and kernel
/// (times in microseconds), the kernels' work in their arguments.
pub fn chrome_trace(trace: &RunTrace, work: &[KernelWork], device: &str) -> Vec<u8> {
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": 0, "tid": 0,
        "args": { "name": format!("tir on {device}") },
    })];
    let mut streams: Vec<usize> = trace.spans.iter().map(|s| s.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    for s in streams {
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": s,
            "args": { "name": format!("stream {s}") },
        }));
    }
    for span in &trace.spans {
        let (category, args) = match &span.kind {
            SpanKind::Upload => (
                "copy",
                json!({ "direction": "host to device", "bytes": span.bytes }),
            ),
            SpanKind::Download => (
                "copy",
                json!({ "direction": "device to host", "bytes": span.bytes }),
            ),
            SpanKind::Kernel { index, how } => {
                let w = work.get(*index);
                let args = json!({
                    "how": how,
                    "bytes": w.map_or(0.0, |w| w.bytes),
                    "flops": w.map_or(0.0, |w| w.flops),
                });
                ("kernel", args)
            }
        };
        events.push(json!({
            "name": span.name,
            "cat": category,
            "ph": "X",
            "pid": 0,
            "tid": span.stream,
            "ts": span.start_ms * 1e3,
            "dur": (span.end_ms - span.start_ms) * 1e3,
            "args": args,
        }));
    }
    let document = json!({ "traceEvents": events, "displayTimeUnit": "ns" });
    let mut bytes = serde_json::to_vec_pretty(&document).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use backend_cuda::Span;

    fn span(name: &str, kind: SpanKind, stream: usize, (start, end): (f64, f64)) -> Span {
        Span {
            name: name.into(),
            kind,
            stream,
            start_ms: start,
            end_ms: end,
            bytes: 4096,
        }
    }

    fn kernel(index: usize, how: &str) -> SpanKind {
        SpanKind::Kernel {
            index,
            how: how.into(),
        }
    }

    fn trace(scale: f64) -> RunTrace {
        RunTrace {
            spans: vec![
                span("x", SpanKind::Upload, 0, (0.0, 0.01)),
                span(
                    "k0_matmul",
                    kernel(0, "cublaslt"),
                    0,
                    (0.01, 0.01 + 0.1 * scale),
                ),
                span("k1_elementwise", kernel(1, "tiles x8"), 1, (0.2, 0.25)),
                span("y", SpanKind::Download, 0, (0.25, 0.3)),
            ],
        }
    }

    fn work() -> Vec<KernelWork> {
        vec![
            KernelWork {
                name: "k0_matmul".into(),
                flops: 2e9,
                bytes: 1e8,
            },
            KernelWork {
                name: "k1_elementwise".into(),
                flops: 0.0,
                bytes: 5e7,
            },
        ]
    }

    #[test]
    fn profile_takes_medians_and_rates_per_kernel() {
        let traces = [trace(1.0), trace(3.0), trace(2.0)];
        let table = profile_table(&traces, &work(), "GPU 0");
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].contains("median of 3 traced runs"), "{table}");
        // The median run ends at 0.3 ms; the median matmul takes 0.2 ms.
        assert!(lines[0].contains("0.3000 ms on the GPU"), "{table}");
        let matmul: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            matmul,
            [
                "k0_matmul",
                "matmul",
                "cublaslt",
                "0.2000",
                "66.7%",
                "500.0",
                "10.0"
            ]
        );
        let elementwise: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            elementwise,
            [
                "k1_elementwise",
                "elementwise",
                "tiles",
                "x8",
                "0.0500",
                "16.7%",
                "1000.0",
                "-"
            ]
        );
    }

    #[test]
    fn chrome_trace_has_a_track_per_stream_and_a_slice_per_span() {
        let bytes = chrome_trace(&trace(1.0), &work(), "GPU 0");
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let tracks: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .collect();
        assert_eq!(tracks.len(), 2);
        let slices: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 4);
        let matmul = slices.iter().find(|e| e["name"] == "k0_matmul").unwrap();
        assert_eq!(matmul["cat"], "kernel");
        assert!((matmul["ts"].as_f64().unwrap() - 10.0).abs() < 1e-9);
        assert!((matmul["dur"].as_f64().unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(matmul["args"]["how"], "cublaslt");
        assert_eq!(slices[0]["args"]["direction"], "host to device");
        assert_eq!(slices[0]["args"]["bytes"], 4096);
    }
}
