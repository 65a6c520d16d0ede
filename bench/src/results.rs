//! One benchmark run in machine-readable form: `results.json`, which `bench/peers.py` writes
//! beside its RESULTS.md and `bench/results.json` holds for the latest full run.
//!
//! [`Run::load`] reads and checks it: every workload that did not fail has a mode, a positive
//! tir time, a bound and a positive roofline time; a peer that did not run is absent (or
//! `null`) and a plot then leaves out its bar.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a results file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: workload {workload}: {what}")]
    Invalid {
        path: PathBuf,
        workload: String,
        what: String,
    },
}

/// How a workload ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Stream-ordered launches.
    Stream,
    /// A CUDA graph replay.
    Graph,
}

impl Mode {
    pub fn describe(self) -> &'static str {
        match self {
            Mode::Stream => "stream launches",
            Mode::Graph => "CUDA graph",
        }
    }
}

/// What the roofline of a workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundKind {
    /// Its bytes at the measured copy bandwidth.
    Memory,
    /// Its flops at the tensor-core peak.
    Compute,
}

/// A workload that ran.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadResult {
    pub name: String,
    pub mode: Mode,
    pub tir_ms: f64,
    /// Each peer that ran, by name (`eager`, `torch.compile`, `cuBLASLt`), in milliseconds.
    pub peers: BTreeMap<String, f64>,
    pub bound: BoundKind,
    /// The time at the roofline; `roofline_ms / tir_ms` is the share tir reaches.
    pub roofline_ms: f64,
    /// For a launch-overhead workload, the number of chained kernels.
    pub chain: Option<u64>,
    /// tir's output did not match PyTorch's: the time stands, the ratios do not.
    pub wrong: bool,
    /// The commit of tir this workload ran at, where it differs from the run's.
    pub commit: Option<String>,
}

impl WorkloadResult {
    /// The fraction of the roofline tir reaches (1.0: at the roofline).
    pub fn roofline_share(&self) -> f64 {
        self.roofline_ms / self.tir_ms
    }
}

/// One run: where and when, the workloads that ran, and those that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub device: String,
    pub date: String,
    pub commit: String,
    pub notes: Vec<String>,
    pub workloads: Vec<WorkloadResult>,
    /// Workloads tir failed to run, with the reason.
    pub failed: Vec<(String, String)>,
}

/// The file as written: every field of a workload optional, since a failed one has only its
/// name and the reason.
#[derive(Deserialize)]
struct RawRun {
    device: String,
    date: String,
    commit: String,
    #[serde(default)]
    notes: Vec<String>,
    workloads: Vec<RawWorkload>,
}

#[derive(Deserialize)]
struct RawWorkload {
    name: String,
    failed: Option<String>,
    mode: Option<Mode>,
    tir_ms: Option<f64>,
    #[serde(default)]
    peers: BTreeMap<String, Option<f64>>,
    bound: Option<BoundKind>,
    roofline_ms: Option<f64>,
    chain: Option<u64>,
    #[serde(default)]
    wrong: bool,
    commit: Option<String>,
}

impl Run {
    /// Reads and checks the results file at `path`.
    pub fn load(path: &Path) -> Result<Run, ResultsError> {
        let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Run::parse(&text, path)
    }

    /// Parses and checks `text`; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Run, ResultsError> {
        let raw: RawRun = serde_json::from_str(text).map_err(|source| ResultsError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let mut run = Run {
            device: raw.device,
            date: raw.date,
            commit: raw.commit,
            notes: raw.notes,
            workloads: Vec::new(),
            failed: Vec::new(),
        };
        for w in raw.workloads {
            if let Some(reason) = w.failed {
                run.failed.push((w.name, reason));
                continue;
            }
            let invalid = |what: String| ResultsError::Invalid {
                path: path.to_path_buf(),
                workload: w.name.clone(),
                what,
            };
            let time = |field: &str, value: Option<f64>| match value {
                Some(ms) if ms.is_finite() && ms > 0.0 => Ok(ms),
                Some(ms) => Err(invalid(format!(
                    "{field} is {ms}, expected a positive time"
                ))),
                None => Err(invalid(format!("no {field} (and not marked failed)"))),
            };
            let tir_ms = time("tir_ms", w.tir_ms)?;
            let roofline_ms = time("roofline_ms", w.roofline_ms)?;
            let mut peers = BTreeMap::new();
            for (peer, ms) in &w.peers {
                if let Some(ms) = ms {
                    peers.insert(peer.clone(), time(&format!("peer {peer}"), Some(*ms))?);
                }
            }
            let mode = w
                .mode
                .ok_or_else(|| invalid("no mode (and not marked failed)".into()))?;
            let bound = w
                .bound
                .ok_or_else(|| invalid("no bound (and not marked failed)".into()))?;
            if w.chain == Some(0) {
                return Err(invalid("chain of 0 kernels".into()));
            }
            run.workloads.push(WorkloadResult {
                name: w.name,
                mode,
                tir_ms,
                peers,
                bound,
                roofline_ms,
                chain: w.chain,
                wrong: w.wrong,
                commit: w.commit,
            });
        }
        Ok(run)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small run: two workloads with both peers, one with eager only, a failed one, one
    /// without peers, and two launch-overhead chains.
    pub(crate) const FIXTURE: &str = r#"{
        "device": "Test GPU", "date": "2026-01-01", "commit": "abc1234",
        "notes": ["a fixture"],
        "workloads": [
            {"name": "add_small", "mode": "stream", "tir_ms": 0.5, "bound": "memory",
             "roofline_ms": 0.45, "peers": {"eager": 0.6, "torch.compile": 0.55}},
            {"name": "gemm_small_generated", "mode": "stream", "tir_ms": 0.2, "bound": "compute",
             "roofline_ms": 0.15, "peers": {"eager": 0.18, "torch.compile": 0.25, "cuBLASLt": 0.18},
             "commit": "def5678"},
            {"name": "attention_small", "mode": "stream", "tir_ms": 1.0, "bound": "compute",
             "roofline_ms": 0.3, "peers": {"eager": 0.4, "torch.compile": null}},
            {"name": "broken_one", "failed": "out of memory"},
            {"name": "decoder_small", "mode": "graph", "tir_ms": 0.3, "bound": "memory",
             "roofline_ms": 0.2},
            {"name": "chain_1_stream", "mode": "stream", "tir_ms": 0.004, "bound": "compute",
             "roofline_ms": 1e-8, "chain": 1, "peers": {"eager": 0.005}},
            {"name": "chain_10_stream", "mode": "stream", "tir_ms": 0.03, "bound": "compute",
             "roofline_ms": 1e-7, "chain": 10, "peers": {"eager": 0.05}},
            {"name": "chain_1_graph", "mode": "graph", "tir_ms": 0.004, "bound": "compute",
             "roofline_ms": 1e-8, "chain": 1, "peers": {"eager": 0.0045}},
            {"name": "chain_10_graph", "mode": "graph", "tir_ms": 0.02, "bound": "compute",
             "roofline_ms": 1e-7, "chain": 10}
        ]
    }"#;

    fn parse(text: &str) -> Result<Run, ResultsError> {
        Run::parse(text, Path::new("results.json"))
    }

    fn named<'a>(run: &'a Run, name: &str) -> &'a WorkloadResult {
        run.workloads.iter().find(|w| w.name == name).unwrap()
    }

    #[test]
    fn a_good_file_parses_with_its_workloads_peers_and_failures() {
        let run = parse(FIXTURE).unwrap();
        assert_eq!(
            (run.device.as_str(), run.date.as_str(), run.commit.as_str()),
            ("Test GPU", "2026-01-01", "abc1234")
        );
        assert_eq!(run.workloads.len(), 8);
        assert_eq!(
            run.failed,
            vec![("broken_one".to_string(), "out of memory".to_string())]
        );
        let names: Vec<&str> = run.workloads.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names[..3],
            ["add_small", "gemm_small_generated", "attention_small"]
        );
        let gemm = named(&run, "gemm_small_generated");
        assert_eq!(gemm.mode, Mode::Stream);
        assert_eq!(gemm.bound, BoundKind::Compute);
        assert_eq!(gemm.peers.get("cuBLASLt"), Some(&0.18));
        assert_eq!(gemm.commit.as_deref(), Some("def5678"));
        assert!((gemm.roofline_share() - 0.75).abs() < 1e-12);
        assert_eq!(named(&run, "decoder_small").mode, Mode::Graph);
        assert_eq!(named(&run, "chain_1_graph").chain, Some(1));
        assert_eq!(named(&run, "add_small").chain, None);
    }

    #[test]
    fn a_missing_or_null_peer_is_absent() {
        let run = parse(FIXTURE).unwrap();
        let attention = named(&run, "attention_small");
        assert_eq!(attention.peers.keys().collect::<Vec<_>>(), ["eager"]);
        assert!(named(&run, "decoder_small").peers.is_empty());
    }

    #[test]
    fn the_committed_results_parse() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("results.json");
        let run = Run::load(&path).unwrap();
        assert!(
            run.workloads.len() >= 20,
            "{} workloads",
            run.workloads.len()
        );
        assert!(run.workloads.iter().any(|w| w.chain.is_some()));
    }

    #[test]
    fn malformed_json_names_the_file_and_the_line() {
        let err = parse("{\"device\": \"x\",\n \"date\": }").unwrap_err();
        assert!(matches!(err, ResultsError::Parse { .. }), "{err}");
        let message = err.to_string();
        assert!(
            message.starts_with("results.json: not a results file:") && message.contains("line 2"),
            "{message}"
        );
    }

    #[test]
    fn a_missing_field_is_a_parse_error() {
        let err = parse(r#"{"device": "x", "date": "y", "workloads": []}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `commit`"), "{err}");
    }

    #[test]
    fn a_workload_without_a_time_names_the_workload_and_the_field() {
        let text = r#"{"device": "x", "date": "y", "commit": "z", "workloads": [
            {"name": "add", "mode": "stream", "bound": "memory", "roofline_ms": 1.0}]}"#;
        let err = parse(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "results.json: workload add: no tir_ms (and not marked failed)"
        );
    }

    #[test]
    fn a_negative_peer_time_is_rejected() {
        let text = r#"{"device": "x", "date": "y", "commit": "z", "workloads": [
            {"name": "add", "mode": "stream", "tir_ms": 1.0, "bound": "memory",
             "roofline_ms": 1.0, "peers": {"eager": -2.0}}]}"#;
        let err = parse(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "results.json: workload add: peer eager is -2, expected a positive time"
        );
    }

    #[test]
    fn a_missing_file_is_a_read_error() {
        let err = Run::load(Path::new("/nonexistent/results.json")).unwrap_err();
        assert!(matches!(err, ResultsError::Read { .. }), "{err}");
        assert!(err
            .to_string()
            .starts_with("/nonexistent/results.json: cannot read:"));
    }
}
