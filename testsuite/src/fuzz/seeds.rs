//! The seed inputs of the fuzz targets, made with tir's own writers: `tir-fuzz-seeds DIR`
//! writes them as `DIR/TARGET/NAME` (the repository keeps them in `fuzz/seeds`). Each is a small
//! valid input its reader accepts; `tests/fuzz_replay.rs` checks that the committed ones still
//! are. The ONNX seeds are not made here: they are ONNX's own test models (see
//! `scripts/onnx-node-tests.sh`).

use crate::values::{self, Values};
use backend_cuda::codegen::KernelAbi;
use backend_cuda::{cache, package};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tir_graph::eval::F64Tensor;
use tir_graph::{file, text, weights, DType, Graph, HostTensor};
use tir_lower::Backend;

/// One seed: its target, its file name, its bytes.
pub struct Seed {
    pub target: &'static str,
    pub name: String,
    pub bytes: Vec<u8>,
}

/// The most bytes of graph seeds per target (in text form), so the seeds stay small.
const GRAPH_SEED_BYTES: usize = 48 * 1024;
/// The most elements of the values of a `pipeline` seed, so a run of it is quick.
const PIPELINE_ELEMENTS: u64 = 1 << 14;

/// Every seed (see the module doc). `Err` says which writer failed.
pub fn seeds() -> Result<Vec<Seed>, String> {
    let mut out = Vec::new();
    let graphs = graphs(GRAPH_SEED_BYTES, u64::MAX);
    for (name, g) in &graphs {
        out.push(seed("tir_file", format!("{name}.tir"), file::encode(g)));
        out.push(seed(
            "text",
            format!("{name}.tirt"),
            text::print(g).into_bytes(),
        ));
    }
    for (i, (name, g)) in graphs_for_pipeline().iter().enumerate() {
        // Both forms, so the binary decoder and the parser each feed the pipeline.
        out.push(if i % 2 == 0 {
            seed(
                "pipeline",
                format!("{name}.tirt"),
                text::print(g).into_bytes(),
            )
        } else {
            seed("pipeline", format!("{name}.tir"), file::encode(g))
        });
    }
    out.extend(npy_seeds()?);
    out.extend(safetensors_seeds()?);
    out.extend(package_seeds()?);
    for (name, payload) in [
        ("empty", Vec::new()),
        ("elf", b"\x7fELF\x02\x01\x01\0cubin".to_vec()),
        ("bytes", (0..=255u8).collect()),
    ] {
        let key = cache::cache_key(name.as_bytes(), "sm_90", "13.5.37");
        out.push(seed(
            "cache_entry",
            format!("{name}.cubin"),
            cache::encode_entry(key, &payload),
        ));
    }
    Ok(out)
}

/// Writes every seed into `dir/TARGET/NAME`, and removes the files of those `TARGET` folders
/// that are no longer seeds (a format change renames or drops seeds, and a stale one left
/// behind would only test what a reader refuses).
pub fn write(dir: &Path) -> Result<usize, String> {
    let seeds = seeds()?;
    let mut names: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &seeds {
        names.entry(s.target).or_default().insert(&s.name);
    }
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    for (target, keep) in &names {
        let folder = dir.join(target);
        std::fs::create_dir_all(&folder).map_err(|e| io(&folder, e))?;
        for entry in std::fs::read_dir(&folder).map_err(|e| io(&folder, e))? {
            let path = entry.map_err(|e| io(&folder, e))?.path();
            let stale = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| !keep.contains(n));
            if stale && path.is_file() {
                std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
            }
        }
    }
    for s in &seeds {
        let path = dir.join(s.target).join(&s.name);
        std::fs::write(&path, &s.bytes).map_err(|e| io(&path, e))?;
    }
    Ok(seeds.len())
}

fn seed(target: &'static str, name: String, bytes: Vec<u8>) -> Seed {
    Seed {
        target,
        name,
        bytes,
    }
}

/// A file name for a corpus case (`op/add/f32/4x8` → `op-add-f32-4x8`).
fn file_name(case: &str) -> String {
    case.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The smallest corpus graphs that between them have every trait ([`traits`]) of the corpus,
/// greedily: smallest first (in text form), each taken when it has a trait the ones before lack,
/// while the text of those taken stays within `max_bytes`, and only graphs whose values hold at
/// most `max_elements` elements (symbolic dims counted as 1).
fn graphs(max_bytes: usize, max_elements: u64) -> Vec<(String, Graph)> {
    let mut cases: Vec<(String, Graph, usize)> = crate::corpus(1)
        .into_iter()
        .filter(|c| elements(&c.graph) <= max_elements)
        .map(|c| {
            let len = text::print(&c.graph).len();
            (c.name, c.graph, len)
        })
        .collect();
    cases.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
    let mut seen = BTreeSet::new();
    let mut taken = Vec::new();
    let mut bytes = 0;
    for (name, graph, len) in cases {
        let traits = traits(&name, &graph);
        if traits.is_subset(&seen) || bytes + len > max_bytes {
            continue;
        }
        seen.extend(traits);
        bytes += len;
        taken.push((file_name(&name), graph));
    }
    taken
}

/// What makes a graph different as a seed: the kind of case it is (`pattern/attention`, the
/// first two parts of its name), its ops, its dtypes, and whether it has symbolic dims or
/// states.
fn traits(case: &str, graph: &Graph) -> BTreeSet<String> {
    let kind: Vec<&str> = case.split('/').take(2).collect();
    let mut traits: BTreeSet<String> = graph
        .node_ids()
        .flat_map(|id| {
            [
                graph.node(id).op.name().to_string(),
                graph.ty(id).dtype.to_string(),
            ]
        })
        .collect();
    traits.insert(kind.join("/"));
    if graph
        .node_ids()
        .any(|id| graph.ty(id).shape.static_dims().is_none())
    {
        traits.insert("symbolic".to_string());
    }
    if !graph.states().is_empty() {
        traits.insert("state".to_string());
    }
    traits
}

/// The elements of every value of `graph`, a symbolic dim counted as 1.
fn elements(graph: &Graph) -> u64 {
    graph
        .node_ids()
        .map(|id| {
            graph
                .ty(id)
                .shape
                .dims()
                .iter()
                .fold(1u64, |n, d| n.saturating_mul(d.as_static().unwrap_or(1)))
        })
        .fold(0, u64::saturating_add)
}

fn graphs_for_pipeline() -> Vec<(String, Graph)> {
    graphs(GRAPH_SEED_BYTES / 2, PIPELINE_ELEMENTS)
}

/// A tensor of `dtype` and `dims` with the corpus's random values.
fn host_tensor(dtype: DType, dims: &[u64], seed: u64) -> Result<HostTensor<'static>, String> {
    let t: F64Tensor = values::tensor(dtype, dims, &Values::Default, seed);
    HostTensor::from_f64(&t).map_err(|e| e.to_string())
}

/// One `.npy` file per dtype, a scalar, an empty array, and a Fortran-order and a big-endian
/// file (the header edited: the writer makes neither).
fn npy_seeds() -> Result<Vec<Seed>, String> {
    let npy = |t: &HostTensor| tirc::npy::encode(t).map_err(|e| e.to_string());
    let mut out = Vec::new();
    // Not bf16 (a bf16 tensor is stored as f32) nor the 8-bit floats: NumPy has none.
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        if dtype == DType::BF16 || dtype.float8().is_some() {
            continue;
        }
        let t = host_tensor(dtype, &[2, 3], i as u64)?;
        out.push(seed("npy", format!("{dtype}.npy"), npy(&t)?));
    }
    out.push(seed(
        "npy",
        "scalar.npy".into(),
        npy(&HostTensor::scalar(1.5f32))?,
    ));
    let empty = HostTensor::from_vec(Vec::<i64>::new(), &[0, 4]).map_err(|e| e.to_string())?;
    out.push(seed("npy", "empty.npy".into(), npy(&empty)?));
    let t = host_tensor(DType::F32, &[2, 3], 9)?;
    let fortran = replace(
        &npy(&t)?,
        b"'fortran_order': False",
        b"'fortran_order': True ",
    )?;
    out.push(seed("npy", "fortran.npy".into(), fortran));
    let mut big = replace(&npy(&t)?, b"'<f4'", b"'>f4'")?;
    let data = big.len() - t.bytes().len();
    big[data..].chunks_mut(4).for_each(<[u8]>::reverse);
    out.push(seed("npy", "big_endian.npy".into(), big));
    Ok(out)
}

/// `bytes` with the one occurrence of `from` replaced by `to` (of the same length).
fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Result<Vec<u8>, String> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .ok_or_else(|| format!("no {:?} in the header", String::from_utf8_lossy(from)))?;
    let mut out = bytes.to_vec();
    out[at..at + to.len()].copy_from_slice(to);
    Ok(out)
}

/// A file with one tensor of every dtype, an empty file and one scalar, written by
/// [`weights::write_safetensors`].
fn safetensors_seeds() -> Result<Vec<Seed>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        all.push((dtype.to_string(), host_tensor(dtype, &[2, 2], i as u64)?));
    }
    let scalar = [("s".to_string(), HostTensor::scalar(-2i32))];
    let mut out = Vec::new();
    for (name, tensors) in [
        ("all_dtypes", &all[..]),
        ("empty", &[]),
        ("scalar", &scalar),
    ] {
        let path = dir.path().join(name);
        let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        weights::write_safetensors(&path, &refs).map_err(|e| e.to_string())?;
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        out.push(seed("safetensors", format!("{name}.safetensors"), bytes));
    }
    Ok(out)
}

/// Packages of a few small corpus programs (lowered for the CUDA backend's target), with
/// stand-in cubins: the reader checks their presence, not their contents.
fn package_seeds() -> Result<Vec<Seed>, String> {
    let target = backend_cuda::CudaBackend::new().target();
    let mut out = Vec::new();
    for (name, graph) in graphs(4 * 1024, PIPELINE_ELEMENTS).into_iter().take(4) {
        let compiled = tir_lower::compile_graph(&graph, &target, &tir_opt::Limits::default())
            .map_err(|e| format!("{name}: {e}"))?;
        let program = compiled.program;
        let abis = program
            .kernels
            .iter()
            .map(|k| KernelAbi {
                entry: k.name.clone(),
                divisible_entry: None,
                params: k.params.len(),
                dims: vec![],
                grid_extents: false,
                blocks_per_sm: None,
            })
            .collect();
        let cubins: Vec<backend_cuda::compile::Cubin> = (0..program.kernels.len())
            .map(|i| vec![0x7f, b'E', b'L', b'F', i as u8].into())
            .collect();
        let pkg = package::Package {
            program,
            abis,
            cubins: BTreeMap::from([("sm_90".to_string(), cubins)]),
            toolchain: "13.5.37".to_string(),
            mesh: None,
        };
        let bytes = package::to_bytes(&pkg)?;
        out.push(seed("tirpkg", format!("{name}.tirpkg"), bytes));
    }
    Ok(out)
}
