//! all-MiniLM-L6-v2 on the reference backend, from the model's own files (installed by
//! `scripts/install-minilm.sh`, which the test command runs first): the embeddings match a BERT
//! computed here in f64, one sentence at a time without padding, straight from the weights; and
//! the similarities are the ones sentence-transformers' README prints for this model.

use backend_ref::RefBackend;
use std::collections::HashMap;
use std::path::PathBuf;
use tir_embed::{cosine_similarities, Embedder, Model};
use tir_graph::weights::WeightsFile;
use tir_graph::DType;

const SENTENCES: [&str; 3] = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
];

fn model_dir() -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tools/models/all-MiniLM-L6-v2");
    assert!(
        dir.join("model.safetensors").exists(),
        "{} has no model: run `bash scripts/install-minilm.sh` (the test command does)",
        dir.display()
    );
    dir
}

fn embed(dtype: DType) -> Vec<Vec<f32>> {
    let model = Model::open(&model_dir(), dtype).unwrap();
    let mut embedder = Embedder::new(model, &RefBackend::new()).unwrap();
    embedder.embed(&SENTENCES).unwrap()
}

/// BERT in f64 from the checkpoint's tensors: plain loops, nothing shared with tir but the file.
struct F64Bert {
    tensors: HashMap<String, Vec<f64>>,
    hidden: usize,
    heads: usize,
}

impl F64Bert {
    fn load() -> F64Bert {
        let file = WeightsFile::open(model_dir().join("model.safetensors")).unwrap();
        let tensors = file
            .iter()
            .filter(|(_, t)| t.dtype() == DType::F32)
            .map(|(n, t)| (n.to_string(), t.to_f64().data))
            .collect();
        F64Bert {
            tensors,
            hidden: 384,
            heads: 12,
        }
    }

    fn w(&self, name: &str) -> &[f64] {
        &self.tensors[name]
    }

    /// `x @ W^T + b` over rows `x` for the `Linear` `name` with `outputs` outputs.
    fn linear(&self, x: &[Vec<f64>], name: &str, outputs: usize) -> Vec<Vec<f64>> {
        let (w, b) = (
            self.w(&format!("{name}.weight")),
            self.w(&format!("{name}.bias")),
        );
        let inputs = x[0].len();
        x.iter()
            .map(|row| {
                (0..outputs)
                    .map(|o| {
                        let weights = &w[o * inputs..(o + 1) * inputs];
                        b[o] + row.iter().zip(weights).map(|(a, c)| a * c).sum::<f64>()
                    })
                    .collect()
            })
            .collect()
    }

    fn layer_norm(&self, x: &[Vec<f64>], name: &str) -> Vec<Vec<f64>> {
        let (g, b) = (
            self.w(&format!("{name}.weight")),
            self.w(&format!("{name}.bias")),
        );
        x.iter()
            .map(|row| {
                let n = row.len() as f64;
                let mean = row.iter().sum::<f64>() / n;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
                let inv = 1.0 / (var + 1e-12).sqrt();
                row.iter()
                    .enumerate()
                    .map(|(i, v)| (v - mean) * inv * g[i] + b[i])
                    .collect()
            })
            .collect()
    }

    fn add(a: &[Vec<f64>], b: &[Vec<f64>]) -> Vec<Vec<f64>> {
        a.iter()
            .zip(b)
            .map(|(x, y)| x.iter().zip(y).map(|(p, q)| p + q).collect())
            .collect()
    }

    fn attention(&self, x: &[Vec<f64>], layer: usize) -> Vec<Vec<f64>> {
        let at = |p: &str| format!("encoder.layer.{layer}.attention.self.{p}");
        let (q, k, v) = (
            self.linear(x, &at("query"), self.hidden),
            self.linear(x, &at("key"), self.hidden),
            self.linear(x, &at("value"), self.hidden),
        );
        let d = self.hidden / self.heads;
        let n = x.len();
        let mut out = vec![vec![0.0; self.hidden]; n];
        for h in 0..self.heads {
            let cols = h * d..(h + 1) * d;
            for i in 0..n {
                let scores: Vec<f64> = (0..n)
                    .map(|j| {
                        let dot: f64 = cols.clone().map(|c| q[i][c] * k[j][c]).sum();
                        dot / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for c in cols.clone() {
                    out[i][c] = (0..n).map(|j| e[j] / total * v[j][c]).sum();
                }
            }
        }
        out
    }

    /// The unit-length mean-pooled embedding of one unpadded sentence of token `ids`.
    fn embed(&self, ids: &[i64]) -> Vec<f64> {
        let row =
            |name: &str, r: usize| self.w(name)[r * self.hidden..(r + 1) * self.hidden].to_vec();
        let summed: Vec<Vec<f64>> = ids
            .iter()
            .enumerate()
            .map(|(t, &id)| {
                let word = row("embeddings.word_embeddings.weight", id as usize);
                let pos = row("embeddings.position_embeddings.weight", t);
                let typ = row("embeddings.token_type_embeddings.weight", 0);
                (0..self.hidden)
                    .map(|c| word[c] + pos[c] + typ[c])
                    .collect()
            })
            .collect();
        let mut x = self.layer_norm(&summed, "embeddings.LayerNorm");
        for layer in 0..6 {
            let at = |p: &str| format!("encoder.layer.{layer}.{p}");
            let attended = self.attention(&x, layer);
            let projected = self.linear(&attended, &at("attention.output.dense"), self.hidden);
            x = self.layer_norm(
                &F64Bert::add(&x, &projected),
                &at("attention.output.LayerNorm"),
            );
            let mut inner = self.linear(&x, &at("intermediate.dense"), 1536);
            for v in inner.iter_mut().flatten() {
                *v = 0.5 * *v * (1.0 + libm::erf(*v / std::f64::consts::SQRT_2));
            }
            let out = self.linear(&inner, &at("output.dense"), self.hidden);
            x = self.layer_norm(&F64Bert::add(&x, &out), &at("output.LayerNorm"));
        }
        let mean: Vec<f64> = (0..self.hidden)
            .map(|c| x.iter().map(|r| r[c]).sum::<f64>() / x.len() as f64)
            .collect();
        let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
        mean.iter().map(|v| v / norm).collect()
    }
}

/// The f64 embeddings of `SENTENCES`, each computed alone on its own tokens.
fn f64_embeddings() -> Vec<Vec<f64>> {
    let model = Model::open(&model_dir(), DType::F32).unwrap();
    let bert = F64Bert::load();
    SENTENCES
        .iter()
        .map(|s| {
            let batch = model.tokenize(&[s]).unwrap();
            bert.embed(&batch.ids)
        })
        .collect()
}

/// The largest difference between tir's embeddings and the f64 ones.
fn worst(got: &[Vec<f32>], want: &[Vec<f64>]) -> f64 {
    got.iter()
        .flatten()
        .zip(want.iter().flatten())
        .map(|(&g, &w)| {
            assert!(g.is_finite(), "a non-finite embedding value");
            (f64::from(g) - w).abs()
        })
        .fold(0.0, f64::max)
}

/// The padded batch (three sentences of different lengths) against each sentence alone in f64.
/// The vectors have unit length, so their elements are about 0.05; the largest differences seen
/// were 1.3e-7 in f32, 3.2e-4 in f16 and 2.1e-3 in bf16 (about 2^-11 and 2^-8 of the largest
/// elements, each dtype's rounding through 6 layers); the bounds leave ten times that.
#[test]
fn embeddings_match_an_independent_f64_bert() {
    let want = f64_embeddings();
    for (dtype, bound) in [(DType::F32, 1e-6), (DType::F16, 3e-3), (DType::BF16, 2e-2)] {
        let got = embed(dtype);
        assert_eq!((got.len(), got[0].len()), (3, 384));
        let error = worst(&got, &want);
        assert!(error <= bound, "{dtype}: {error:.3e} > {bound:.1e}");
    }
}

/// Tensor-parallel over 2 and 3 (simulated) devices, each holding its heads and MLP columns:
/// the same embeddings as the f64 BERT, to f32's bound; 5 devices divide nothing and are
/// refused.
#[test]
fn tensor_parallel_embeddings_match_the_f64_bert() {
    let want = f64_embeddings();
    for devices in [2, 3] {
        let model = Model::open(&model_dir(), DType::F32).unwrap();
        let mut embedder = Embedder::tensor_parallel(model, &RefBackend::new(), devices).unwrap();
        let layout = embedder.mesh.unwrap();
        assert_eq!(
            (layout.devices, layout.split, layout.weights),
            (devices, 60, 101)
        );
        let error = worst(&embedder.embed(&SENTENCES).unwrap(), &want);
        assert!(error <= 1e-6, "{devices} devices: {error:.3e}");
    }
    let model = Model::open(&model_dir(), DType::F32).unwrap();
    let refused = Embedder::tensor_parallel(model, &RefBackend::new(), 5)
        .err()
        .unwrap();
    assert!(
        refused.to_string().contains("splits nothing in this graph"),
        "{refused}"
    );
}

/// sentence-transformers' README prints, for all-MiniLM-L6-v2 and these sentences:
/// `[[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]`.
#[test]
fn similarities_are_the_ones_sentence_transformers_prints() {
    let s = cosine_similarities(&embed(DType::F32));
    let readme = [
        [1.0, 0.6660, 0.1046],
        [0.6660, 1.0, 0.1411],
        [0.1046, 0.1411, 1.0],
    ];
    for (i, row) in readme.iter().enumerate() {
        for (j, &want) in row.iter().enumerate() {
            let got = f64::from(s[i][j]);
            assert!((got - want).abs() < 5e-5, "[{i}][{j}]: {got:.5} vs {want}");
        }
    }
}
