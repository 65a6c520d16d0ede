//! A BERT encoder with sentence-transformers' pooling: what all-MiniLM-L6-v2 computes.
//!
//! Embeddings (word, position and token type, summed, then layer norm), `layers` post-norm
//! encoder layers (self-attention over the keys the attention mask keeps, output projection,
//! residual and layer norm; a GELU (erf) feed-forward layer, residual and layer norm), then the
//! mean of the token embeddings the mask keeps, divided by its L2 norm. Batch and sequence
//! length are symbolic (`batch`, `seq`).
//!
//! Inputs: `input_ids`, `token_type_ids` and `attention_mask` (1 keeps a token, 0 is padding),
//! `i64[batch, seq]` as tokenizers give them, and `position_ids: i64[seq]` (0, 1, ...). Output:
//! `embeddings: [batch, hidden]` in the config's dtype. Parameters carry the checkpoint's names
//! (`embeddings.word_embeddings.weight`, `encoder.layer.0.attention.self.query.weight`, ...),
//! linear weights as PyTorch stores them, `[out, in]` (the product reads them transposed, without
//! a copy).

use super::Result;
use crate::{shape, DType, Dim, GraphBuilder, ReshapeDim, Shape, Tensor};

/// The sizes and constants of a BERT encoder, as a checkpoint's `config.json` gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Vocabulary size (`vocab_size`): rows of the word embedding table.
    pub vocab: u64,
    /// Model width (`hidden_size`).
    pub hidden: u64,
    /// Number of encoder layers (`num_hidden_layers`).
    pub layers: u64,
    /// Attention heads per layer (`num_attention_heads`); divides `hidden`.
    pub heads: u64,
    /// Width of each layer's feed-forward hidden layer (`intermediate_size`).
    pub intermediate: u64,
    /// Rows of the position embedding table (`max_position_embeddings`): the longest sequence.
    pub max_positions: u64,
    /// Rows of the token type embedding table (`type_vocab_size`).
    pub type_vocab: u64,
    /// The epsilon of every layer norm (`layer_norm_eps`).
    pub layer_norm_eps: f64,
    /// The dtype the encoder computes in (its parameters' too).
    pub dtype: DType,
}

impl BertConfig {
    /// all-MiniLM-L6-v2's sizes.
    pub fn minilm_l6(dtype: DType) -> BertConfig {
        BertConfig {
            vocab: 30522,
            hidden: 384,
            layers: 6,
            heads: 12,
            intermediate: 1536,
            max_positions: 512,
            type_vocab: 2,
            layer_norm_eps: 1e-12,
            dtype,
        }
    }
}

/// `batch` and `seq`, the symbolic dims.
fn symbolic(name: &str) -> ReshapeDim {
    ReshapeDim::Dim(Dim::Symbolic(name.to_string()))
}

/// The encoder's builder state: the graph and the config.
struct Encoder<'a> {
    g: &'a GraphBuilder,
    cfg: &'a BertConfig,
}

impl Encoder<'_> {
    fn parameter(&self, name: &str, shape: Shape) -> Result<Tensor> {
        self.g.parameter(name, self.cfg.dtype, shape)
    }

    /// `x @ w^T + b` for PyTorch's `Linear` named `name` (`w: [out, in]`).
    fn linear(&self, x: &Tensor, name: &str, inputs: u64, outputs: u64) -> Result<Tensor> {
        let w = self.parameter(&format!("{name}.weight"), shape![outputs, inputs])?;
        let b = self.parameter(&format!("{name}.bias"), shape![outputs])?;
        x.matmul(&w.transpose()?)?.add(&b)
    }

    fn layer_norm(&self, x: &Tensor, name: &str) -> Result<Tensor> {
        let h = self.cfg.hidden;
        let gamma = self.parameter(&format!("{name}.weight"), shape![h])?;
        let beta = self.parameter(&format!("{name}.bias"), shape![h])?;
        x.layer_norm(&gamma, &beta, self.cfg.layer_norm_eps)
    }

    fn embedding(&self, name: &str, rows: u64, ids: &Tensor) -> Result<Tensor> {
        let table = self.parameter(
            &format!("embeddings.{name}.weight"),
            shape![rows, self.cfg.hidden],
        )?;
        table.gather(ids, 0)
    }

    /// `[batch, seq, hidden]` → `[batch, heads, seq, head_dim]`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (heads, hidden) = (self.cfg.heads, self.cfg.hidden);
        x.reshape(&[
            symbolic("batch"),
            symbolic("seq"),
            heads.into(),
            (hidden / heads).into(),
        ])?
        .permute(&[0, 2, 1, 3])
    }

    /// `[batch, heads, seq, head_dim]` → `[batch, seq, hidden]`.
    fn merge_heads(&self, x: &Tensor) -> Result<Tensor> {
        x.permute(&[0, 2, 1, 3])?.reshape(&[
            symbolic("batch"),
            symbolic("seq"),
            self.cfg.hidden.into(),
        ])
    }

    /// Encoder layer `i` over `x`, attending to the keys `keep` (bool `[batch, 1, 1, seq]`).
    fn layer(&self, i: u64, x: &Tensor, keep: &Tensor) -> Result<Tensor> {
        let (h, ffn) = (self.cfg.hidden, self.cfg.intermediate);
        let at = |part: &str| format!("encoder.layer.{i}.{part}");
        let q = self.split_heads(&self.linear(x, &at("attention.self.query"), h, h)?)?;
        let k = self.split_heads(&self.linear(x, &at("attention.self.key"), h, h)?)?;
        let v = self.split_heads(&self.linear(x, &at("attention.self.value"), h, h)?)?;
        let attended = self.merge_heads(&q.attention_masked(&k, &v, Some(keep))?)?;
        let projected = self.linear(&attended, &at("attention.output.dense"), h, h)?;
        let x = self.layer_norm(&x.add(&projected)?, &at("attention.output.LayerNorm"))?;
        let inner = self.linear(&x, &at("intermediate.dense"), h, ffn)?.gelu()?;
        let out = self.linear(&inner, &at("output.dense"), ffn, h)?;
        self.layer_norm(&x.add(&out)?, &at("output.LayerNorm"))
    }
}

/// The sentence-embedding graph of `cfg` (see the module doc).
pub fn bert_embedder(cfg: &BertConfig) -> Result<crate::Graph> {
    let g = GraphBuilder::new();
    let enc = Encoder { g: &g, cfg };
    let ids = |name: &str| g.input(name, DType::I64, shape!["batch", "seq"]);
    let (input_ids, token_types, mask) = (
        ids("input_ids")?,
        ids("token_type_ids")?,
        ids("attention_mask")?,
    );
    let positions = g.input("position_ids", DType::I64, shape!["seq"])?;
    let summed = enc
        .embedding("word_embeddings", cfg.vocab, &input_ids)?
        .add(&enc.embedding("position_embeddings", cfg.max_positions, &positions)?)?
        .add(&enc.embedding("token_type_embeddings", cfg.type_vocab, &token_types)?)?;
    let mut x = enc.layer_norm(&summed, "embeddings.LayerNorm")?;
    let keep = mask.cast(DType::Bool)?.reshape(&[
        symbolic("batch"),
        1.into(),
        1.into(),
        symbolic("seq"),
    ])?;
    for i in 0..cfg.layers {
        x = enc.layer(i, &x, &keep)?;
    }
    // Mean pooling over the kept tokens (their count at least 1e-9, as sentence-transformers
    // clamps it), then division by the L2 norm (at least 1e-12, as torch's normalize clamps).
    let weights = mask.cast(cfg.dtype)?.unsqueeze(&[2])?;
    let summed = x.mul(&weights)?.sum(&[1], false)?;
    let count = weights
        .sum(&[1], false)?
        .maximum(&g.scalar(cfg.dtype, 1e-9)?)?;
    let mean = summed.div(&count)?;
    let norm = mean
        .mul(&mean)?
        .sum(&[1], true)?
        .sqrt()?
        .maximum(&g.scalar(cfg.dtype, 1e-12)?)?;
    g.output("embeddings", &mean.div(&norm)?)?;
    g.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minilm_has_the_checkpoint_parameters() {
        let g = bert_embedder(&BertConfig::minilm_l6(DType::F32)).unwrap();
        assert_eq!(g.ty(g.outputs()[0].1).to_string(), "f32[batch, 384]");
        let names: Vec<String> = g.parameters().into_iter().map(|(n, _)| n).collect();
        // 5 for the embeddings, 16 per layer.
        assert_eq!(names.len(), 5 + 6 * 16);
        for name in [
            "embeddings.word_embeddings.weight",
            "embeddings.LayerNorm.bias",
            "encoder.layer.5.attention.self.query.weight",
            "encoder.layer.0.output.LayerNorm.weight",
        ] {
            assert!(names.iter().any(|n| n == name), "{name}");
        }
        let query = g
            .parameters()
            .into_iter()
            .find(|(n, _)| n == "encoder.layer.0.intermediate.dense.weight")
            .unwrap()
            .1;
        assert_eq!(g.ty(query).to_string(), "f32[1536, 384]");
    }
}
