//! The example graphs, built with the builder API: the files in `examples/` are these graphs
//! (written by `cargo run -p tir-graph --example gen_examples`), and later stages reuse the
//! builders for tests and benchmarks at other sizes.

use crate::quant::{QuantError, WeightFormat};
use crate::{shape, DType, Dim, Graph, GraphBuilder, GraphError, ReshapeDim, Tensor};

pub mod bert;

pub use bert::{bert_embedder, BertConfig};

type Result<T> = std::result::Result<T, GraphError>;

/// Every example, by file stem.
pub fn examples() -> Result<Vec<(&'static str, Graph)>> {
    Ok(vec![
        ("mlp", mlp(1024, 4096)?),
        ("ln_gelu", ln_gelu(4096)?),
        ("softmax", softmax(4096)?),
        ("attention", attention(&AttentionConfig::default())?),
        ("decoder_block", decoder_block(&DecoderConfig::default())?),
    ])
}

/// `linear -> gelu -> linear` on `x: f16[batch, hidden]` with a `ffn`-wide hidden layer.
pub fn mlp(hidden: u64, ffn: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["batch", hidden])?;
    let w1 = g.parameter("w1", DType::F16, shape![hidden, ffn])?;
    let b1 = g.parameter("b1", DType::F16, shape![ffn])?;
    let w2 = g.parameter("w2", DType::F16, shape![ffn, hidden])?;
    let b2 = g.parameter("b2", DType::F16, shape![hidden])?;
    let h = x.linear(&w1, Some(&b1))?.gelu()?;
    g.output("y", &h.linear(&w2, Some(&b2))?)?;
    g.finish()
}

/// `gelu(layer_norm(x + residual))` over rows of `hidden` elements.
pub fn ln_gelu(hidden: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["tokens", hidden])?;
    let residual = g.input("residual", DType::F16, shape!["tokens", hidden])?;
    let gamma = g.parameter("gamma", DType::F16, shape![hidden])?;
    let beta = g.parameter("beta", DType::F16, shape![hidden])?;
    let y = (&x + &residual)?.layer_norm(&gamma, &beta, 1e-5)?.gelu()?;
    g.output("y", &y)?;
    g.finish()
}

/// Softmax of each row of `x: f16[rows, cols]`.
pub fn softmax(cols: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["rows", cols])?;
    g.output("y", &x.softmax(1)?)?;
    g.finish()
}

/// Sizes of a multi-head attention block.
#[derive(Clone, Debug)]
pub struct AttentionConfig {
    /// Sequence length, in tokens (static).
    pub seq: u64,
    /// Model width: `heads × head dim`.
    pub hidden: u64,
    /// Number of attention heads; divides `hidden`.
    pub heads: u64,
    /// Whether each position attends only to itself and earlier ones.
    pub causal: bool,
}

impl Default for AttentionConfig {
    fn default() -> Self {
        AttentionConfig {
            seq: 1024,
            hidden: 1024,
            heads: 16,
            causal: true,
        }
    }
}

/// `[batch, seq, hidden]` → `[batch, heads, seq, head_dim]`.
fn split_heads(x: &Tensor, seq: u64, heads: u64, head_dim: u64) -> Result<Tensor> {
    let dims: [ReshapeDim; 4] = [ReshapeDim::Infer, seq.into(), heads.into(), head_dim.into()];
    x.reshape(&dims)?.permute(&[0, 2, 1, 3])
}

/// `[batch, heads, seq, head_dim]` → `[batch, seq, hidden]`.
fn merge_heads(x: &Tensor, seq: u64, hidden: u64) -> Result<Tensor> {
    let dims: [ReshapeDim; 3] = [ReshapeDim::Infer, seq.into(), hidden.into()];
    x.permute(&[0, 2, 1, 3])?.reshape(&dims)
}

/// Multi-head scaled dot-product attention with q/k/v/output projections on
/// `x: f16[batch, seq, hidden]`.
pub fn attention(cfg: &AttentionConfig) -> Result<Graph> {
    let g = GraphBuilder::new();
    let (seq, hidden, heads) = (cfg.seq, cfg.hidden, cfg.heads);
    let head_dim = hidden / heads;
    let x = g.input("x", DType::F16, shape!["batch", seq, hidden])?;
    let proj = |name: &str| g.parameter(name, DType::F16, shape![hidden, hidden]);
    let (wq, wk, wv, wo) = (proj("wq")?, proj("wk")?, proj("wv")?, proj("wo")?);
    let q = split_heads(&x.matmul(&wq)?, seq, heads, head_dim)?;
    let k = split_heads(&x.matmul(&wk)?, seq, heads, head_dim)?;
    let v = split_heads(&x.matmul(&wv)?, seq, heads, head_dim)?;
    let attn = q.attention(&k, &v, cfg.causal)?;
    g.output("y", &merge_heads(&attn, seq, hidden)?.matmul(&wo)?)?;
    g.finish()
}

/// Sizes of one decoder block's decode step.
#[derive(Clone, Debug)]
pub struct DecoderConfig {
    /// Model width: `heads × head dim`.
    pub hidden: u64,
    /// Number of attention heads; divides `hidden`.
    pub heads: u64,
    /// KV-cache capacity in tokens.
    pub context: u64,
    /// Width of the gated MLP's hidden layer.
    pub ffn: u64,
}

impl Default for DecoderConfig {
    fn default() -> Self {
        DecoderConfig {
            hidden: 4096,
            heads: 32,
            context: 2048,
            ffn: 11008,
        }
    }
}

/// One decode step of a pre-norm decoder block for one new token `x: f16[1, 1, hidden]` at
/// position `pos` (an i64 scalar): rms_norm, attention over the KV cache plus the new token
/// (which is appended to the cache states `k_cache`/`v_cache` at `pos`), residual, rms_norm,
/// SiLU-gated MLP, residual. Cache entries at `pos` and after are masked out; the states are
/// read as they were at the start of the step.
pub fn decoder_block(cfg: &DecoderConfig) -> Result<Graph> {
    decoder(cfg, 1)
}

/// One decode step of `layers` decoder blocks ([`decoder_block`]) one after another, each with
/// its own weights and KV cache (named `l{i}.wq`, `l{i}.k_cache`, ...; a single layer keeps the
/// plain names), all at position `pos`: the token loop of a decoder-only model without its
/// embedding and head.
pub fn decoder(cfg: &DecoderConfig, layers: u64) -> Result<Graph> {
    decoder_rope(cfg, layers, &Rope::None)
}

/// How a decode step applies rotary position embeddings to each layer's q and new k (before
/// the k cache write) at the step's position `pos`.
#[derive(Clone, Debug, Default)]
pub enum Rope {
    /// None: the plain decoder ([`decoder`]).
    #[default]
    None,
    /// [`rope_at`] with frequencies `base^(-2i / head_dim)`, built from IR ops (fusion decides
    /// where its cos, sin and products go).
    Composite {
        /// The frequency base (10000 in most models).
        base: f64,
    },
    /// Users' kernels, built by the caller (tir-graph sits below their author, tir-lower):
    /// `q` takes `(x: f16[1, heads, 1, head_dim], pos: i64[])` to `y` of `x`'s type
    /// (`tir_lower::custom::rope::rope`), `k_into_cache` rotates the new k straight into the
    /// k cache at `pos`, in place (`rope::rope_into_cache`: operands the cache, the new k and
    /// `pos`). Attention then reads the updated caches (rows `0..=pos`) instead of the old cache
    /// beside the new token: the rotated key is never a tensor of its own.
    Kernel {
        /// Rotates q.
        q: crate::CustomRef,
        /// Rotates the new k into the k cache.
        k_into_cache: crate::CustomRef,
    },
}

/// [`decoder`] with rotary position embeddings on each layer's q and new k, applied as `rope`
/// says; [`Rope::None`] is [`decoder`] itself.
pub fn decoder_rope(cfg: &DecoderConfig, layers: u64, rope: &Rope) -> Result<Graph> {
    decoder_with(cfg, layers, rope, &|g, name, k, n| {
        g.parameter(name, DType::F16, shape![k, n])
    })
}

/// [`decoder`] with the seven projections of each layer (`wq`, `wk`, `wv`, `wo`, `w_gate`,
/// `w_up`, `w_down`) stored in `format`, under the format's own tensor names
/// ([`WeightFormat::tensors`]: `l0.wq.qweight`, `l0.wq.qzeros`, `l0.wq.scales` for AWQ,
/// `l0.wq.weight` and `l0.wq.weight_scale_inv` for block FP8, ...) and dequantized to f16 in
/// the graph ([`crate::quant`]); the norms stay f16. A checkpoint in that format binds as it is
/// on disk. Refuses sizes the format cannot hold, naming the weight.
pub fn quantized_decoder(
    cfg: &DecoderConfig,
    layers: u64,
    format: WeightFormat,
) -> std::result::Result<Graph, QuantError> {
    decoder_with(cfg, layers, &Rope::None, &|g, name, k, n| {
        format.declare(g, name, k, n)
    })
}

/// Declares the `[k, n]` projection `name` and returns it as f16.
type Projection<'a, E> =
    dyn Fn(&GraphBuilder, &str, u64, u64) -> std::result::Result<Tensor, E> + 'a;

fn decoder_with<E: From<GraphError>>(
    cfg: &DecoderConfig,
    layers: u64,
    rope: &Rope,
    weight: &Projection<'_, E>,
) -> std::result::Result<Graph, E> {
    let g = GraphBuilder::new();
    let mut x = g.input("x", DType::F16, shape![1, 1, cfg.hidden])?;
    let pos = g.input("pos", DType::I64, shape![])?;
    for layer in 0..layers {
        let prefix = if layers == 1 {
            String::new()
        } else {
            format!("l{layer}.")
        };
        let layer = Layer {
            prefix: &prefix,
            pos: &pos,
            rope,
        };
        x = decoder_layer(&g, cfg, &layer, &x, weight)?;
    }
    g.output("y", &x)?;
    Ok(g.finish()?)
}

/// What a decoder layer is built with besides its sizes: its names' prefix, the step's position
/// and how it applies rotary embeddings.
struct Layer<'a> {
    prefix: &'a str,
    pos: &'a Tensor,
    rope: &'a Rope,
}

/// `x` (q or the new k, `[1, heads, 1, head_dim]`) rotated at `pos` as `rope` says.
fn apply_rope(x: Tensor, pos: &Tensor, rope: &Rope) -> Result<Tensor> {
    match rope {
        Rope::None => Ok(x),
        Rope::Composite { base } => rope_at(&x, pos, *base),
        Rope::Kernel { q, .. } => first_output(q, &[&x, pos]),
    }
}

/// Output 0 of `kernel` on `operands` (a kernel with no output is refused when declared).
fn first_output(kernel: &crate::CustomRef, operands: &[&Tensor]) -> Result<Tensor> {
    let out = operands[0].builder().custom(kernel.kernel(), operands)?;
    Ok(out
        .into_iter()
        .next()
        .unwrap_or_else(|| operands[0].clone()))
}

/// One decoder block's step on `x` at `layer.pos`, its parameters and states named with
/// `layer.prefix`.
fn decoder_layer<E: From<GraphError>>(
    g: &GraphBuilder,
    cfg: &DecoderConfig,
    layer: &Layer<'_>,
    x: &Tensor,
    weight: &Projection<'_, E>,
) -> std::result::Result<Tensor, E> {
    let (prefix, pos) = (layer.prefix, layer.pos);
    let (hidden, heads, ctx, ffn) = (cfg.hidden, cfg.heads, cfg.context, cfg.ffn);
    let head_dim = hidden / heads;
    let name = |n: &str| format!("{prefix}{n}");
    let weight = |n: &str, rows: u64, cols: u64| weight(g, &name(n), rows, cols);
    let norm1 = g.parameter(&name("attn_norm"), DType::F16, shape![hidden])?;
    let norm2 = g.parameter(&name("mlp_norm"), DType::F16, shape![hidden])?;
    let (wq, wk, wv, wo) = (
        weight("wq", hidden, hidden)?,
        weight("wk", hidden, hidden)?,
        weight("wv", hidden, hidden)?,
        weight("wo", hidden, hidden)?,
    );
    let (w_gate, w_up, w_down) = (
        weight("w_gate", hidden, ffn)?,
        weight("w_up", hidden, ffn)?,
        weight("w_down", ffn, hidden)?,
    );
    let cache_shape = shape![1, heads, ctx, head_dim];
    let k_cache = g.state(&name("k_cache"), DType::F16, cache_shape.clone())?;
    let v_cache = g.state(&name("v_cache"), DType::F16, cache_shape)?;

    let h = x.rms_norm(&norm1, 1e-5)?;
    let q = split_heads(&h.matmul(&wq)?, 1, heads, head_dim)?;
    let q = apply_rope(q, pos, layer.rope)?;
    let k_new = split_heads(&h.matmul(&wk)?, 1, heads, head_dim)?;
    let k_new = match layer.rope {
        Rope::Kernel { .. } => k_new,
        rope => apply_rope(k_new, pos, rope)?,
    };
    let v_new = split_heads(&h.matmul(&wv)?, 1, heads, head_dim)?;
    let (keys, values, visible) = if let Rope::Kernel { k_into_cache, .. } = layer.rope {
        // The caches' new values, rows 0..=pos visible.
        let keys = first_output(k_into_cache, &[&k_cache, &k_new, pos])?;
        let values = v_cache.write_slice_at(&v_new, 2, pos)?;
        (keys, values, g.arange(DType::I64, ctx)?.le(pos)?)
    } else {
        // The old caches (rows 0..pos visible) beside the new token.
        k_cache.write_slice_at(&k_new, 2, pos)?;
        v_cache.write_slice_at(&v_new, 2, pos)?;
        let keys = g.concat(&[&k_cache, &k_new], 2)?;
        let values = g.concat(&[&v_cache, &v_new], 2)?;
        let cached = g.arange(DType::I64, ctx)?.lt(pos)?;
        let visible = g.concat(&[&cached, &g.constant(DType::Bool, shape![1], &[1.0])?], 0)?;
        (keys, values, visible)
    };
    let attn = q.attention_masked(&keys, &values, Some(&visible))?;
    let x = (x + &merge_heads(&attn, 1, hidden)?.matmul(&wo)?)?;

    let h = x.rms_norm(&norm2, 1e-5)?;
    let gated = (&h.matmul(&w_gate)?.silu()? * &h.matmul(&w_up)?)?;
    Ok((&x + &gated.matmul(&w_down)?)?)
}

/// Sizes of a whole decoder-only transformer run over a full sequence (prefill).
#[derive(Clone, Debug)]
pub struct TransformerConfig {
    /// Number of decoder blocks.
    pub layers: u64,
    /// Sequence length, in tokens (static).
    pub seq: u64,
    /// Model width: `heads × head dim`.
    pub hidden: u64,
    /// Number of attention heads; divides `hidden`.
    pub heads: u64,
    /// Width of each block's gated MLP hidden layer.
    pub ffn: u64,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        TransformerConfig {
            layers: 48,
            seq: 2048,
            hidden: 4096,
            heads: 32,
            ffn: 11008,
        }
    }
}

/// `layers` pre-norm decoder layers over `x: f16[batch, seq, hidden]`: rms_norm, causal
/// multi-head attention with rotary position embeddings on q and k, residual, rms_norm,
/// SiLU-gated MLP, residual; then a final rms_norm. Each layer has its own weights.
pub fn transformer(cfg: &TransformerConfig) -> Result<Graph> {
    let g = GraphBuilder::new();
    let (seq, hidden, heads) = (cfg.seq, cfg.hidden, cfg.heads);
    let head_dim = hidden / heads;
    let mut x = g.input("x", DType::F16, shape!["batch", seq, hidden])?;
    let cos = g.input("rope_cos", DType::F16, shape![seq, head_dim])?;
    let sin = g.input("rope_sin", DType::F16, shape![seq, head_dim])?;
    for layer in 0..cfg.layers {
        let weight = |name: &str, rows: u64, cols: u64| {
            g.parameter(&format!("l{layer}.{name}"), DType::F16, shape![rows, cols])
        };
        let norm =
            |name: &str| g.parameter(&format!("l{layer}.{name}"), DType::F16, shape![hidden]);
        let h = x.rms_norm(&norm("attn_norm")?, 1e-5)?;
        let heads_of = |name: &str| {
            split_heads(
                &h.matmul(&weight(name, hidden, hidden)?)?,
                seq,
                heads,
                head_dim,
            )
        };
        let q = rotary(&heads_of("wq")?, &cos, &sin)?;
        let k = rotary(&heads_of("wk")?, &cos, &sin)?;
        let v = heads_of("wv")?;
        let attn = merge_heads(&q.attention(&k, &v, true)?, seq, hidden)?;
        x = (&x + &attn.matmul(&weight("wo", hidden, hidden)?)?)?;
        let h = x.rms_norm(&norm("mlp_norm")?, 1e-5)?;
        let gate = h.matmul(&weight("w_gate", hidden, cfg.ffn)?)?.silu()?;
        let up = h.matmul(&weight("w_up", hidden, cfg.ffn)?)?;
        x = (&x + &(&gate * &up)?.matmul(&weight("w_down", cfg.ffn, hidden)?)?)?;
    }
    let final_norm = g.parameter("final_norm", DType::F16, shape![hidden])?;
    g.output("y", &x.rms_norm(&final_norm, 1e-5)?)?;
    g.finish()
}

/// Rotary position embedding of `x: [.., head_dim]` at the run-time position `pos` (an i64 or
/// i32 scalar): `x * cos + rotate_half(x) * sin` (half-split, as [`transformer`] applies it),
/// where lane `j` of cos and sin is the angle `pos * base^(-2 (j mod h) / head_dim)`,
/// `h = head_dim / 2`. Built from IR ops: the inverse frequencies are an f32 constant, the
/// angles, cos and sin are computed in f32 and rounded to `x`'s dtype. What `Rope::Composite`
/// applies in the decoder, and the reference of `tir_lower::custom::rope`'s kernel.
pub fn rope_at(x: &Tensor, pos: &Tensor, base: f64) -> Result<Tensor> {
    let g = x.builder();
    let shape = x.shape();
    // A symbolic or odd last dim makes the halves disagree with `x`: inference then refuses the
    // product `x * cos`, naming the node.
    let head_dim = shape.dims().last().and_then(Dim::as_static).unwrap_or(0);
    let half = head_dim / 2;
    let inverse: Vec<f64> = (0..half)
        .map(|i| base.powf(-2.0 * i as f64 / head_dim as f64) as f32 as f64)
        .collect();
    let inverse = g.constant(DType::F32, shape![half], &inverse)?;
    let angle = (&pos.cast(DType::F32)? * &inverse)?;
    let dtype = x.ty().dtype;
    let cos = angle.cos()?.cast(dtype)?;
    let sin = angle.sin()?.cast(dtype)?;
    let cos = g.concat(&[&cos, &cos], 0)?;
    let sin = g.concat(&[&sin, &sin], 0)?;
    rotary(x, &cos, &sin)
}

/// Rotary embedding of `x: [.., seq, head_dim]`: `x * cos + rotate_half(x) * sin`.
fn rotary(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let shape = x.shape();
    let last = shape.rank() - 1;
    let half = shape.dims()[last].as_static().unwrap_or(0) / 2;
    let first = x.slice_axis(last, 0, half)?;
    let second = x.slice_axis(last, half, 2 * half)?;
    let rotated = x.builder().concat(&[&second.neg()?, &first], last)?;
    &(x * cos)? + &(&rotated * sin)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_have_the_expected_outputs() {
        let examples = examples().unwrap();
        let out = |name: &str| {
            let g = &examples.iter().find(|(n, _)| *n == name).unwrap().1;
            g.ty(g.outputs()[0].1).to_string()
        };
        assert_eq!(out("mlp"), "f16[batch, 1024]");
        assert_eq!(out("ln_gelu"), "f16[tokens, 4096]");
        assert_eq!(out("softmax"), "f16[rows, 4096]");
        assert_eq!(out("attention"), "f16[batch, 1024, 1024]");
        assert_eq!(out("decoder_block"), "f16[1, 1, 4096]");
    }

    #[test]
    fn transformer_layers_repeat() {
        let cfg = TransformerConfig {
            layers: 2,
            seq: 8,
            hidden: 16,
            heads: 2,
            ffn: 32,
        };
        let g = transformer(&cfg).unwrap();
        assert_eq!(g.ty(g.outputs()[0].1).to_string(), "f16[batch, 8, 16]");
        assert_eq!(g.op_counts()["matmul"], 2 * 9);
        assert_eq!(g.parameters().len(), 2 * 9 + 1);
    }

    #[test]
    fn quantized_decoders_declare_the_formats_tensors() {
        let cfg = DecoderConfig {
            hidden: 64,
            heads: 4,
            context: 16,
            ffn: 128,
        };
        let g = quantized_decoder(&cfg, 2, WeightFormat::Awq { group: 32 }).unwrap();
        let params: Vec<String> = g.parameters().into_iter().map(|(n, _)| n).collect();
        // Seven projections of three tensors and two norms, per layer.
        assert_eq!(params.len(), 2 * (7 * 3 + 2));
        for name in [
            "l0.wq.qweight",
            "l1.w_down.qzeros",
            "l1.w_up.scales",
            "l0.mlp_norm",
        ] {
            assert!(params.iter().any(|p| p == name), "{name}: {params:?}");
        }
        assert_eq!(g.ty(g.outputs()[0].1).to_string(), "f16[1, 1, 64]");
        let e = quantized_decoder(&cfg, 1, WeightFormat::Gptq { group: 48 })
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("tensor wq: K = 64 is not a whole number"),
            "{e}"
        );
    }

    #[test]
    fn decoder_block_appends_to_both_caches() {
        let g = decoder_block(&DecoderConfig::default()).unwrap();
        assert_eq!(g.state_updates().len(), 2);
        assert_eq!(g.op_counts()["state_write_slice"], 2);
    }
}
