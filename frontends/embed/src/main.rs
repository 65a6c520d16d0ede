//! `tir-embed`: sentence embeddings with all-MiniLM-L6-v2 on a tir backend.
//!
//! ```text
//! tir-embed [--backend ref|cuda] [--model DIR] [--dtype f32|f16|bf16] [--tensor-parallel N] [--json] SENTENCE...
//! ```
//!
//! Prints each sentence's first embedding values and the cosine similarity matrix; `--json`
//! prints one object with the whole vectors and the matrix instead. Every error is one line
//! `error: ...` on stderr, with exit code 1.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tir_embed::{cosine_similarities, Embedder, Model, DEFAULT_MODEL_DIR};
use tir_graph::DType;
use tir_lower::Backend;

#[derive(Parser)]
#[command(
    name = "tir-embed",
    version,
    about = "Sentence embeddings with all-MiniLM-L6-v2 on a tir backend"
)]
struct Cli {
    /// The sentences to embed.
    #[arg(required = true, value_name = "SENTENCE")]
    sentences: Vec<String>,
    /// The backend: ref (the CPU reference) or cuda.
    #[arg(long, default_value = "ref", value_parser = ["ref", "cuda"])]
    backend: String,
    /// The model directory [default: $TIR_MINILM_DIR, else .tools/models/all-MiniLM-L6-v2].
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The dtype the encoder computes in.
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    dtype: String,
    /// Print the whole vectors and the similarity matrix as one JSON object.
    #[arg(long)]
    json: bool,
    /// Run on a mesh of N devices by tensor parallelism (each holds 1/N of the heads and of
    /// the MLP's width); the reference backend simulates them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    tensor_parallel: Option<u32>,
}

fn main() -> ExitCode {
    let cli = match tirc::parse_cli::<Cli>("tir-embed") {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match run(&cli) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<String, tir_embed::EmbedError> {
    let dir = cli
        .model
        .clone()
        .or_else(|| std::env::var_os("TIR_MINILM_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR));
    let dtype = match cli.dtype.as_str() {
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        _ => DType::F32,
    };
    let model = Model::open(&dir, dtype)?;
    let backend: Box<dyn Backend> = match cli.backend.as_str() {
        "cuda" => Box::new(backend_cuda::CudaBackend::new()),
        _ => Box::new(backend_ref::RefBackend::new()),
    };
    let started = Instant::now();
    let mut embedder = match cli.tensor_parallel {
        Some(devices) => Embedder::tensor_parallel(model, backend.as_ref(), devices)?,
        None => Embedder::new(model, backend.as_ref())?,
    };
    let ready = started.elapsed();
    let sentences: Vec<&str> = cli.sentences.iter().map(String::as_str).collect();
    let batch = embedder.model.tokenize(&sentences)?;
    let started = Instant::now();
    let embeddings = embedder.embed(&sentences)?;
    let ran = started.elapsed();
    let similarity = cosine_similarities(&embeddings);
    if cli.json {
        let value = serde_json::json!({
            "sentences": sentences,
            "embeddings": embeddings,
            "similarity": similarity,
        });
        return Ok(format!("{value}\n"));
    }
    let mut out = format!(
        "{} sentences ({} tokens each, padded) on backend `{}`{} in {}: {} x {} embeddings in \
         {:.1} ms (compile and weights {:.1} ms)\n",
        sentences.len(),
        batch.tokens,
        backend.name(),
        embedder.mesh.map_or(String::new(), |m| format!(
            " (tensor-parallel over {} devices, {} of {} weights split)",
            m.devices, m.split, m.weights
        )),
        dtype,
        embeddings.len(),
        embedder.model.config.hidden,
        ran.as_secs_f64() * 1e3,
        ready.as_secs_f64() * 1e3,
    );
    for (i, (sentence, e)) in sentences.iter().zip(&embeddings).enumerate() {
        let first: Vec<String> = e.iter().take(6).map(|v| format!("{v:.4}")).collect();
        out += &format!("{i}: {sentence:?} [{}, ...]\n", first.join(", "));
    }
    out += "cosine similarity:\n";
    for row in &similarity {
        let cells: Vec<String> = row.iter().map(|v| format!("{v:.4}")).collect();
        out += &format!("  {}\n", cells.join("  "));
    }
    Ok(out)
}
