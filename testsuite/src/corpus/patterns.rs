//! Patterns: the shapes of real programs. The example models at small sizes; softmax, layer_norm
//! and rms_norm alone and with fused producers and consumers; matmul with every epilogue kind;
//! attention with and without a causal mask; states over several runs (a KV cache filling up);
//! graphs whose memory plan reuses buffers.
//!
//! Names are `pattern/WHAT/DTYPE/VARIANT`. Inputs are small (mostly within ±0.5 or ±2) so that
//! nothing cancels catastrophically and the dtype's rounding at each step is the only error.

use super::{scalar, Binding, Corpus, Result, FLOATS};
use crate::tolerance::Tolerance;
use crate::values::Values;
use tir_graph::models::{self, AttentionConfig, DecoderConfig, TransformerConfig};
use tir_graph::{shape, DType, Graph, GraphBuilder, ReshapeDim, Tensor};

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    examples(c)?;
    row_ops(c)?;
    epilogues(c)?;
    attention(c)?;
    long_attention(c)?;
    split_head_attention(c)?;
    attention_past_fold_limit(c)?;
    kv_cache_attention(c)?;
    states(c)?;
    plan_reuse(c)?;
    empty_axes(c)?;
    Ok(())
}

/// Static axes of size 0 (Tile IR refuses a view with a constant size 0, so the CUDA backend
/// gives it at run time; found by the differential test): an empty tensor concatenated with a
/// full one, an elementwise op and a sum over it, and a product over an empty K.
fn empty_axes(c: &mut Corpus) -> Result<()> {
    for d in [DType::F32, DType::F16] {
        let g = GraphBuilder::new();
        let empty = g.input("empty", d, shape![3, 0])?;
        let full = g.input("full", d, shape![3, 4])?;
        let k_empty = g.input("k_empty", d, shape![0, 4])?;
        g.output("joined", &g.concat(&[&empty, &full], 1)?)?;
        g.output("negated", &empty.neg()?)?;
        g.output("summed", &empty.sum(&[1], false)?)?;
        g.output("product", &empty.matmul(&k_empty)?)?;
        let name = format!("pattern/empty_axes/{d}");
        c.add_static(name, g.finish()?, small_values(), Tolerance::EXACT);
    }
    Ok(())
}

/// Inputs within ±0.5: chains of rounded steps stay well-conditioned.
fn small_values() -> Values {
    Values::Uniform(-0.5, 0.5)
}

fn small(_: &str) -> Values {
    small_values()
}

/// Every example graph of `tir_graph::models`, at small sizes, in f16 as the examples are.
fn examples(c: &mut Corpus) -> Result<()> {
    let bind = |pairs: &[(&'static str, u64)]| -> Vec<Binding> {
        pairs.iter().map(|&p| vec![p]).collect()
    };
    let cases: Vec<(&str, Graph, Vec<Binding>, u64)> = vec![
        (
            "mlp",
            models::mlp(32, 96)?,
            bind(&[("batch", 3), ("batch", 1)]),
            96,
        ),
        (
            "ln_gelu",
            models::ln_gelu(100)?,
            bind(&[("tokens", 5), ("tokens", 2)]),
            100,
        ),
        (
            "softmax",
            models::softmax(300)?,
            bind(&[("rows", 7), ("rows", 1)]),
            300,
        ),
        (
            "attention_causal",
            models::attention(&AttentionConfig {
                seq: 12,
                hidden: 32,
                heads: 4,
                causal: true,
            })?,
            bind(&[("batch", 2)]),
            32,
        ),
        (
            "attention",
            models::attention(&AttentionConfig {
                seq: 10,
                hidden: 24,
                heads: 3,
                causal: false,
            })?,
            bind(&[("batch", 1), ("batch", 2)]),
            24,
        ),
        (
            "transformer",
            models::transformer(&TransformerConfig {
                layers: 2,
                seq: 8,
                hidden: 16,
                heads: 2,
                ffn: 32,
            })?,
            bind(&[("batch", 2)]),
            32,
        ),
    ];
    for (name, graph, bindings, len) in cases {
        let name = format!("pattern/example/{name}/f16");
        c.add(name, graph, &bindings, &small, Tolerance::model(len));
    }

    // The decoder block appends to its KV cache at `pos` on each run: 6 runs fill 6 of 8 slots,
    // and every run's output reads what the previous runs wrote.
    let cfg = DecoderConfig {
        hidden: 16,
        heads: 2,
        context: 8,
        ffn: 32,
    };
    let graph = models::decoder_block(&cfg)?;
    let name = "pattern/example/decoder_block/f16/kv_cache_6_runs".to_string();
    let runs = (0..6)
        .map(|pos| {
            let mut s = c.sources(&name, &graph, &Vec::new(), pos, &small);
            s.insert("pos".into(), scalar(DType::I64, pos as f64));
            s
        })
        .collect();
    c.add_runs(name, graph, runs, Tolerance::model(32));
    Ok(())
}

/// A row op over the last axis of `x`, rows of `len`; it adds the parameters it needs.
type RowOp = fn(&Tensor, &GraphBuilder, DType, u64) -> Result<Tensor>;

fn softmax_op(x: &Tensor, _: &GraphBuilder, _: DType, _: u64) -> Result<Tensor> {
    x.softmax(x.rank() - 1)
}

fn log_softmax_op(x: &Tensor, _: &GraphBuilder, _: DType, _: u64) -> Result<Tensor> {
    x.log_softmax(x.rank() - 1)
}

fn layer_norm_op(x: &Tensor, g: &GraphBuilder, d: DType, len: u64) -> Result<Tensor> {
    let gamma = g.parameter("gamma", d, shape![len])?;
    let beta = g.parameter("beta", d, shape![len])?;
    x.layer_norm(&gamma, &beta, 1e-5)
}

fn rms_norm_op(x: &Tensor, g: &GraphBuilder, d: DType, len: u64) -> Result<Tensor> {
    let gamma = g.parameter("gamma", d, shape![len])?;
    x.rms_norm(&gamma, 1e-5)
}

/// softmax, log_softmax, layer_norm and rms_norm over rows: alone, after a producer (a scale and
/// a bias, or a residual add), before a consumer (a product with another input, or gelu/silu),
/// and both; along a non-innermost axis; over the longest rows a row kernel takes.
fn row_ops(c: &mut Corpus) -> Result<()> {
    let ops: [(&str, RowOp); 4] = [
        ("softmax", softmax_op),
        ("log_softmax", log_softmax_op),
        ("layer_norm", layer_norm_op),
        ("rms_norm", rms_norm_op),
    ];
    for d in FLOATS {
        for (op_name, op) in ops {
            for variant in ["alone", "producer", "consumer", "producer_consumer"] {
                let g = GraphBuilder::new();
                let len = 300;
                let mut x = g.input("x", d, shape![6, len])?;
                let producer = variant.starts_with("producer");
                if producer {
                    if op_name.contains("softmax") {
                        // Scaled scores plus a bias row, as attention does.
                        let bias = g.input("bias", d, shape![len])?;
                        x = (&x.mul_scalar(0.5)? + &bias)?;
                    } else {
                        let residual = g.input("residual", d, shape![6, len])?;
                        x = (&x + &residual)?;
                    }
                }
                let mut y = op(&x, &g, d, len)?;
                if variant.ends_with("consumer") {
                    y = match op_name {
                        "softmax" | "log_softmax" => (&y * &g.input("v", d, shape![6, len])?)?,
                        "layer_norm" => y.gelu()?,
                        _ => y.silu()?,
                    };
                }
                g.output("y", &y)?;
                let name = format!("pattern/{op_name}/{d}/{variant}");
                c.add_static(
                    name,
                    g.finish()?,
                    Values::Default,
                    Tolerance::composite(len),
                );
            }
            // The same op over a symbolic number of rows, run with three bindings.
            let g = GraphBuilder::new();
            let x = g.input("x", d, shape!["rows", 77])?;
            g.output("y", &op(&x, &g, d, 77)?)?;
            let name = format!("pattern/{op_name}/{d}/symbolic_rows");
            let bindings: Vec<Binding> = [1, 9, 40].iter().map(|&n| vec![("rows", n)]).collect();
            c.add(
                name,
                g.finish()?,
                &bindings,
                &|_| Values::Default,
                Tolerance::composite(77),
            );
        }
        // Softmax along the first axis: a general (column) reduction, not a row kernel.
        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![300, 6])?;
        g.output("y", &x.softmax(0)?)?;
        let name = format!("pattern/softmax/{d}/axis0");
        c.add_static(
            name,
            g.finish()?,
            Values::Default,
            Tolerance::composite(300),
        );
    }
    // Rows of 32768: the widest a row kernel takes (a handful, the slowest cases); and enough
    // long rows (300) that the GPU walks them in persistent blocks, several rows a block, not
    // the same number each.
    let long: [(&str, RowOp, DType, u64, u64); 5] = [
        ("softmax", softmax_op, DType::F16, 2, 32768),
        ("softmax", softmax_op, DType::F32, 2, 32768),
        ("layer_norm", layer_norm_op, DType::F32, 2, 32768),
        ("softmax", softmax_op, DType::F16, 300, 8192),
        ("layer_norm", layer_norm_op, DType::F32, 300, 8192),
    ];
    for (op_name, op, d, rows, len) in long {
        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![rows, len])?;
        g.output("y", &op(&x, &g, d, len)?)?;
        let name = if rows == 2 {
            format!("pattern/{op_name}/{d}/row{len}")
        } else {
            format!("pattern/{op_name}/{d}/{rows}rows{len}")
        };
        c.add_static(
            name,
            g.finish()?,
            Values::Default,
            Tolerance::composite(len),
        );
    }
    Ok(())
}

/// A matmul epilogue: what follows `y = a @ w` (`a: [33, 40]`, `w: [40, 24]`).
type Epilogue = fn(&GraphBuilder, Tensor, DType) -> Result<Tensor>;

/// Matmul with every epilogue kind the fusion accepts (elementwise ops over the product's
/// shape, with broadcast operands), with operand layouts folded into loads, and with a store
/// through layout ops.
fn epilogues(c: &mut Corpus) -> Result<()> {
    let kinds: [(&str, Epilogue, bool); 12] = [
        ("none", |_, y, _| Ok(y), false),
        (
            "bias",
            |g, y, d| &y + &g.parameter("bias", d, shape![24])?,
            false,
        ),
        (
            "bias_relu",
            |g, y, d| (&y + &g.parameter("bias", d, shape![24])?)?.relu(),
            false,
        ),
        (
            "bias_gelu",
            |g, y, d| (&y + &g.parameter("bias", d, shape![24])?)?.gelu(),
            true,
        ),
        ("silu", |_, y, _| y.silu(), true),
        ("tanh", |_, y, _| y.tanh(), true),
        (
            "residual",
            |g, y, d| &y + &g.input("residual", d, shape![33, 24])?,
            false,
        ),
        ("scale", |_, y, _| y.mul_scalar(0.125), false),
        (
            "bias_gelu_residual",
            |g, y, d| {
                let h = (&y + &g.parameter("bias", d, shape![24])?)?.gelu()?;
                &h + &g.input("residual", d, shape![33, 24])?
            },
            true,
        ),
        (
            "column_scale",
            |g, y, d| &y * &g.input("scale", d, shape![33, 1])?,
            false,
        ),
        ("cast_f32", |_, y, _| y.cast(DType::F32), false),
        (
            "store_permuted",
            |_, y, _| {
                // Split the 24 columns into 4 heads of 6 and put heads first: a strided store.
                y.reshape(&[33.into(), 4.into(), 6.into()])?
                    .permute(&[1, 0, 2])
            },
            false,
        ),
    ];
    for d in [DType::F16, DType::BF16, DType::F32, DType::F64] {
        for (kind, epilogue, transcendental) in kinds {
            let g = GraphBuilder::new();
            let a = g.input("a", d, shape![33, 40])?;
            let w = g.parameter("w", d, shape![40, 24])?;
            let y = epilogue(&g, a.matmul(&w)?, d)?;
            g.output("y", &y)?;
            let name = format!("pattern/matmul_epilogue/{d}/{kind}");
            // A squashing epilogue (gelu, silu, tanh) keeps the product's absolute error but
            // not its magnitude: small inputs keep the product near the activation's linear part.
            let (values, tolerance) = if transcendental {
                (small_values(), Tolerance::composite(40))
            } else {
                (Values::Default, Tolerance::matmul(40))
            };
            c.add_static(name, g.finish()?, values, tolerance);
        }
        // Operand layouts as load index maps: a transposed weight, a transposed and sliced
        // activation, batched heads with a broadcast weight.
        let g = GraphBuilder::new();
        let a = g.input("a", d, shape![40, 33])?.transpose()?;
        let w = g.parameter("w", d, shape![24, 40])?.transpose()?;
        let b = g.parameter("bias", d, shape![24])?;
        g.output("y", &(&a.matmul(&w)? + &b)?)?;
        let name = format!("pattern/matmul_epilogue/{d}/transposed_operands_bias");
        c.add_static(name, g.finish()?, Values::Default, Tolerance::matmul(40));

        let g = GraphBuilder::new();
        let x = g.input("x", d, shape!["batch", 5, 40])?;
        let w = g.parameter("w", d, shape![40, 24])?;
        let b = g.parameter("bias", d, shape![24])?;
        g.output("y", &(&x.matmul(&w)? + &b)?.relu()?)?;
        let name = format!("pattern/matmul_epilogue/{d}/symbolic_batch_bias_relu");
        let bindings: Vec<Binding> = vec![vec![("batch", 1)], vec![("batch", 3)]];
        c.add(
            name,
            g.finish()?,
            &bindings,
            &|_| Values::Default,
            Tolerance::matmul(40),
        );

        // A gated MLP: two matmuls joined by an elementwise product, then a third.
        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![9, 16])?;
        let gate = x
            .matmul(&g.parameter("w_gate", d, shape![16, 40])?)?
            .silu()?;
        let up = x.matmul(&g.parameter("w_up", d, shape![16, 40])?)?;
        let y = (&gate * &up)?.matmul(&g.parameter("w_down", d, shape![40, 16])?)?;
        g.output("y", &y)?;
        let name = format!("pattern/matmul_epilogue/{d}/gated_mlp");
        c.add_static(name, g.finish()?, small_values(), Tolerance::composite(40));
    }
    // Integer matmuls with integer epilogues (exact).
    for d in [DType::I32, DType::I8] {
        let g = GraphBuilder::new();
        let a = g.input("a", d, shape![17, 30])?;
        let w = g.parameter("w", d, shape![30, 11])?;
        let b = g.parameter("bias", d, shape![11])?;
        g.output("y", &(&a.matmul(&w)? + &b)?.relu()?)?;
        let name = format!("pattern/matmul_epilogue/{d}/bias_relu");
        c.add_static(name, g.finish()?, Values::Products, Tolerance::EXACT);
    }
    Ok(())
}

/// Attention over `[batch, heads, seq, head_dim]`, with and without a causal mask, with an
/// explicit mask, with fewer queries than keys (a decode step), with a symbolic batch.
fn attention(c: &mut Corpus) -> Result<()> {
    for d in [DType::F16, DType::BF16, DType::F32] {
        for variant in [
            "causal",
            "no_mask",
            "explicit_mask",
            "decode_causal",
            "symbolic_batch",
        ] {
            let g = GraphBuilder::new();
            let (batch, s_q): (tir_graph::Dim, u64) = match variant {
                "symbolic_batch" => ("b".into(), 10),
                "decode_causal" => (2.into(), 3),
                _ => (2.into(), 10),
            };
            let q = g.input("q", d, shape![batch.clone(), 3, s_q, 8])?;
            let k = g.input("k", d, shape![batch.clone(), 3, 10, 8])?;
            let v = g.input("v", d, shape![batch, 3, 10, 8])?;
            let y = match variant {
                "causal" | "decode_causal" => q.attention(&k, &v, true)?,
                "explicit_mask" => {
                    // A random mask with the diagonal kept, so no row is fully masked.
                    let m = g.input("mask", DType::Bool, shape![10, 10])?;
                    let eye = g
                        .arange(DType::I64, 10)?
                        .unsqueeze(&[1])?
                        .eq(&g.arange(DType::I64, 10)?.unsqueeze(&[0])?)?;
                    q.attention_masked(&k, &v, Some(&m.or(&eye)?))?
                }
                _ => q.attention(&k, &v, false)?,
            };
            g.output("y", &y)?;
            let bindings: Vec<Binding> = if variant == "symbolic_batch" {
                vec![vec![("b", 1)], vec![("b", 3)]]
            } else {
                vec![Vec::new()]
            };
            let name = format!("pattern/attention/{d}/{variant}");
            c.add(
                name,
                g.finish()?,
                &bindings,
                &|_| Values::Default,
                Tolerance::composite(10),
            );
        }
    }
    Ok(())
}

/// Attention over sequences longer than a GPU program's query and key blocks (128 and 64), of
/// lengths that are multiples of neither, with a head dim that is no power of two: causal
/// (more keys than queries, bottom-right aligned), unmasked, and with whole rows masked out
/// (their output is NaN, as the softmax of a row of `-inf` is).
fn long_attention(c: &mut Corpus) -> Result<()> {
    for d in [DType::F16, DType::BF16, DType::F32] {
        for variant in ["causal", "no_mask", "masked_rows"] {
            let g = GraphBuilder::new();
            let (s_q, s_k) = (150, 203);
            let q = g.input("q", d, shape![1, 2, s_q, 40])?;
            let k = g.input("k", d, shape![1, 2, s_k, 40])?;
            let v = g.input("v", d, shape![1, 2, s_k, 24])?;
            let y = match variant {
                "causal" => q.attention(&k, &v, true)?,
                "masked_rows" => {
                    // Every query sees the keys up to its own position except rows 3 and 140,
                    // which see none.
                    let rows = g.arange(DType::I64, s_q)?.unsqueeze(&[1])?;
                    let cols = g.arange(DType::I64, s_k)?.unsqueeze(&[0])?;
                    let at = |r: f64| rows.eq(&g.scalar(DType::I64, r)?);
                    let hidden = at(3.0)?.or(&at(140.0)?)?;
                    let mask = cols.le(&rows)?.and(&hidden.not()?)?;
                    q.attention_masked(&k, &v, Some(&mask))?
                }
                _ => q.attention(&k, &v, false)?,
            };
            g.output("y", &y)?;
            let name = format!("pattern/attention_long/{d}/{variant}");
            c.add_static(
                name,
                g.finish()?,
                Values::Default,
                Tolerance::composite(s_k),
            );
        }
        // A symbolic sequence: the key loop's whole blocks run unmasked, the block the end cuts
        // short masked; bound below one block, past several with a cut block, and to whole ones.
        for causal in [false, true] {
            let g = GraphBuilder::new();
            let q = g.input("q", d, shape![1, 2, "s", 40])?;
            let k = g.input("k", d, shape![1, 2, "s", 40])?;
            let v = g.input("v", d, shape![1, 2, "s", 24])?;
            g.output("y", &q.attention(&k, &v, causal)?)?;
            let mask = if causal { "causal" } else { "no_mask" };
            c.add(
                format!("pattern/attention_long/{d}/symbolic_seq_{mask}"),
                g.finish()?,
                &[vec![("s", 45)], vec![("s", 203)], vec![("s", 192)]],
                &|_| Values::Default,
                Tolerance::composite(203),
            );
        }
    }
    Ok(())
}

/// Attention over heads split from `[batch, seq, heads · 64]` projections and merged back, as
/// transformers lay it out (a CUDA backend may run it on a library through strided views),
/// with a symbolic batch and a sequence of 77 (no multiple of any block), a square causal one
/// of 150 over `[batch, heads, seq, 64]`, and a causal one over `[batch · heads, seq, d]` (one
/// batch dim) whose values' head dim (32) is not the queries' (64).
fn split_head_attention(c: &mut Corpus) -> Result<()> {
    for d in [DType::F16, DType::BF16] {
        for causal in [false, true] {
            let g = GraphBuilder::new();
            let heads = shape!["b", 77, 4, 64];
            let split = |name: &str| -> Result<Tensor> {
                g.input(name, d, shape!["b", 77, 256])?
                    .reshape_to(&heads)?
                    .permute(&[0, 2, 1, 3])
            };
            let (q, k, v) = (split("q")?, split("k")?, split("v")?);
            let y = q.attention(&k, &v, causal)?.permute(&[0, 2, 1, 3])?;
            g.output("y", &y.reshape_to(&shape!["b", 77, 256])?)?;
            let mask = if causal { "causal" } else { "no_mask" };
            c.add(
                format!("pattern/attention_split_heads/{d}/{mask}"),
                g.finish()?,
                &[vec![("b", 1)], vec![("b", 2)]],
                &|_| Values::Default,
                Tolerance::composite(77),
            );
        }
        let g = GraphBuilder::new();
        let qkv = |name: &str| g.input(name, d, shape![2, 3, 150, 64]);
        let (q, k, v) = (qkv("q")?, qkv("k")?, qkv("v")?);
        g.output("y", &q.attention(&k, &v, true)?)?;
        c.add_static(
            format!("pattern/attention_square/{d}/causal"),
            g.finish()?,
            Values::Default,
            Tolerance::composite(150),
        );
        let g = GraphBuilder::new();
        let q = g.input("q", d, shape![6, 96, 64])?;
        let k = g.input("k", d, shape![6, 96, 64])?;
        let v = g.input("v", d, shape![6, 96, 32])?;
        g.output("y", &q.attention(&k, &v, true)?)?;
        c.add_static(
            format!("pattern/attention_rank3/{d}/causal"),
            g.finish()?,
            Values::Default,
            Tolerance::composite(96),
        );
    }
    Ok(())
}

/// Causal attention over sequences longer than the optimizer folds constants for (4096
/// elements), so the mask's position ranges reach lowering as reshapes of a constant plus an
/// offset (more keys than queries); lowering must still see the mask as causal.
fn attention_past_fold_limit(c: &mut Corpus) -> Result<()> {
    for d in [DType::F16, DType::BF16] {
        let g = GraphBuilder::new();
        let (s_q, s_k) = (4200, 4500);
        let q = g.input("q", d, shape![1, 1, s_q, 16])?;
        let k = g.input("k", d, shape![1, 1, s_k, 16])?;
        let v = g.input("v", d, shape![1, 1, s_k, 16])?;
        g.output("y", &q.attention(&k, &v, true)?)?;
        c.add_static(
            format!("pattern/attention_past_fold_limit/{d}"),
            g.finish()?,
            Values::Default,
            Tolerance::composite(s_k),
        );
    }
    Ok(())
}

/// Attention of a few queries over a KV cache and the new tokens' keys (a concat along the
/// keys, with the mask a concat too), as a decode step builds it: a cache of 256 positions (the
/// parts meet on a key-block boundary of both backends, so each key loop reads one part
/// through a view) and of 200 (a block straddles the boundary), part of the cache masked.
fn kv_cache_attention(c: &mut Corpus) -> Result<()> {
    for d in [DType::F16, DType::BF16] {
        for ctx in [256u64, 200] {
            let g = GraphBuilder::new();
            let q = g.input("q", d, shape![1, 4, 3, 40])?;
            let k_cache = g.input("k_cache", d, shape![1, 4, ctx, 40])?;
            let v_cache = g.input("v_cache", d, shape![1, 4, ctx, 24])?;
            let k_new = g.input("k_new", d, shape![1, 4, 1, 40])?;
            let v_new = g.input("v_new", d, shape![1, 4, 1, 24])?;
            let keys = g.concat(&[&k_cache, &k_new], 2)?;
            let values = g.concat(&[&v_cache, &v_new], 2)?;
            let pos = g.scalar(DType::I64, (ctx - 37) as f64)?;
            let cached = g.arange(DType::I64, ctx)?.lt(&pos)?;
            let visible = g.concat(&[&cached, &g.constant(DType::Bool, shape![1], &[1.0])?], 0)?;
            g.output("y", &q.attention_masked(&keys, &values, Some(&visible))?)?;
            c.add_static(
                format!("pattern/attention_kv_cache/{d}/ctx{ctx}"),
                g.finish()?,
                Values::Default,
                Tolerance::composite(ctx + 1),
            );
        }
    }
    Ok(())
}

/// States over several consecutive runs of one executable.
fn states(c: &mut Corpus) -> Result<()> {
    // A KV cache filling up slot by slot: each run appends one token's keys at `pos` and attends
    // over the cached ones before `pos` plus the new one.
    for d in [DType::F16, DType::F32] {
        let g = GraphBuilder::new();
        let ctx = 6;
        let cache = g.state("k_cache", d, shape![2, ctx, 4])?;
        let values = g.state("v_cache", d, shape![2, ctx, 4])?;
        let q = g.input("q", d, shape![2, 1, 4])?;
        let k_new = g.input("k", d, shape![2, 1, 4])?;
        let v_new = g.input("v", d, shape![2, 1, 4])?;
        let pos = g.input("pos", DType::I64, shape![])?;
        cache.write_slice_at(&k_new, 1, &pos)?;
        values.write_slice_at(&v_new, 1, &pos)?;
        let keys = g.concat(&[&cache, &k_new], 1)?;
        let vals = g.concat(&[&values, &v_new], 1)?;
        let cached = g.arange(DType::I64, ctx)?.lt(&pos)?;
        let visible = g.concat(&[&cached, &g.constant(DType::Bool, shape![1], &[1.0])?], 0)?;
        g.output("y", &q.attention_masked(&keys, &vals, Some(&visible))?)?;
        let graph = g.finish()?;
        let name = format!("pattern/state/{d}/kv_cache_fills_up");
        let runs = (0..ctx)
            .map(|p| {
                let mut s = c.sources(&name, &graph, &Vec::new(), p as usize, &|_| Values::Default);
                s.insert("pos".into(), scalar(DType::I64, p as f64));
                s
            })
            .collect();
        c.add_runs(name, graph, runs, Tolerance::composite(ctx + 1));
    }

    // An accumulator: s <- s + x every run; the output is the old value times 2. Integers wrap
    // as the sum grows (i8 passes 127 within a few runs).
    for d in [DType::F32, DType::F16, DType::I32, DType::I8] {
        let g = GraphBuilder::new();
        let s = g.state("acc", d, shape![3, 7])?;
        let x = g.input("x", d, shape![3, 7])?;
        s.assign(&(&s + &x)?)?;
        g.output("doubled", &(&s + &s)?)?;
        let graph = g.finish()?;
        let name = format!("pattern/state/{d}/accumulator_5_runs");
        let values = |_: &str| {
            if d.is_int() {
                Values::Uniform(-60.0, 60.0)
            } else {
                Values::Default
            }
        };
        let runs = (0..5)
            .map(|run| c.sources(&name, &graph, &Vec::new(), run, &values))
            .collect();
        c.add_runs(name, graph, runs, Tolerance::ELEMENTWISE);
    }

    // A state updated from a reduction (a running maximum of row maxima), read by its users
    // after the update: users of the update node see the new value.
    let g = GraphBuilder::new();
    let s = g.state("running_max", DType::F32, shape![4])?;
    let x = g.input("x", DType::F32, shape![4, 50])?;
    let updated = s.assign(&s.maximum(&x.max(&[1], false)?)?)?;
    g.output("y", &(&x - &updated.unsqueeze(&[1])?)?)?;
    let graph = g.finish()?;
    let name = "pattern/state/f32/running_max_read_after_update".to_string();
    let runs = (0..4)
        .map(|run| c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default))
        .collect();
    c.add_runs(name, graph, runs, Tolerance::ELEMENTWISE);

    // A slice written at a static start, and the whole state summed (its old value).
    let g = GraphBuilder::new();
    let s = g.state("slots", DType::BF16, shape![6, 8])?;
    let x = g.input("x", DType::BF16, shape![2, 8])?;
    let scaled = x.mul_scalar(2.0)?;
    s.write_slice(&scaled, 0, 3)?;
    g.output("sum", &s.sum(&[0], false)?)?;
    let graph = g.finish()?;
    let name = "pattern/state/bf16/slice_write_and_sum".to_string();
    let runs = (0..3)
        .map(|run| c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default))
        .collect();
    c.add_runs(name, graph, runs, Tolerance::reduction(6));

    // Write positions that a kernel of the same run computes: `step + 2` from an input, and a
    // cursor state advanced before the write (the write uses the new value). A backend must
    // check (and use) the position the kernel reads, not what the buffer held before the run.
    for from_state in [false, true] {
        let g = GraphBuilder::new();
        let ring = g.state("ring", DType::F32, shape![6, 3])?;
        let x = g.input("x", DType::F32, shape![1, 3])?;
        let pos = if from_state {
            let cursor = g.state("cursor", DType::I64, shape![])?;
            cursor.assign(&cursor.add_scalar(1.0)?)?
        } else {
            g.input("step", DType::I64, shape![])?.add_scalar(2.0)?
        };
        ring.write_slice_at(&x, 0, &pos)?;
        g.output("sum", &ring.sum(&[0], false)?)?;
        let graph = g.finish()?;
        let kind = if from_state { "state" } else { "input" };
        let name = format!("pattern/state/f32/write_position_computed_from_{kind}");
        let runs = (0..4)
            .map(|run| {
                let mut s = c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default);
                if !from_state {
                    s.insert("step".into(), scalar(DType::I64, run as f64));
                }
                s
            })
            .collect();
        c.add_runs(name, graph, runs, Tolerance::reduction(6));
    }
    Ok(())
}

/// Graphs whose memory plan puts several intermediates in the same arena bytes: chains of
/// kernels that cannot fuse (matmul → softmax → matmul → norm → ...), so each intermediate dies
/// while later ones are born; a diamond; and symbolic sizes, where offsets differ per binding.
fn plan_reuse(c: &mut Corpus) -> Result<()> {
    for d in [DType::F32, DType::F16] {
        // matmul + gelu (one kernel), then layer_norm (a row kernel), four times.
        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![24, 32])?;
        let mut h = x.clone();
        for layer in 0..4 {
            let w = g.parameter(&format!("w{layer}"), d, shape![32, 32])?;
            let gamma = g.parameter(&format!("gamma{layer}"), d, shape![32])?;
            let beta = g.parameter(&format!("beta{layer}"), d, shape![32])?;
            h = h.matmul(&w)?.gelu()?.layer_norm(&gamma, &beta, 1e-5)?;
        }
        g.output("y", &h)?;
        let name = format!("pattern/plan_reuse/{d}/chain");
        let values = |n: &str| if n == "x" { Values::Default } else { small(n) };
        c.add(
            name,
            g.finish()?,
            &[Vec::new()],
            &values,
            Tolerance::model(32),
        );
    }

    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![16, 48])?;
    let left = x
        .matmul(&g.parameter("wl", DType::F32, shape![48, 48])?)?
        .softmax(1)?;
    let right = x
        .matmul(&g.parameter("wr", DType::F32, shape![48, 48])?)?
        .softmax(1)?;
    let joined = (&left * &right)?.sum(&[1], true)?;
    let out = (&left.matmul(&g.parameter("wo", DType::F32, shape![48, 48])?)? * &joined)?;
    g.output("y", &out.softmax(1)?)?;
    let name = "pattern/plan_reuse/f32/diamond".to_string();
    let values = |n: &str| if n == "x" { Values::Default } else { small(n) };
    c.add(
        name,
        g.finish()?,
        &[Vec::new()],
        &values,
        Tolerance::model(48),
    );

    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["tokens", 40])?;
    let mut h = x.clone();
    for layer in 0..3 {
        let w = g.parameter(&format!("w{layer}"), DType::F32, shape![40, 40])?;
        // softmax times the row length: rows of mean 1, so the next logits stay O(1).
        h = h.matmul(&w)?.softmax(1)?.mul_scalar(40.0)?;
        h = h.reshape(&[ReshapeDim::Infer, 40.into()])?;
    }
    g.output("y", &h.log_softmax(1)?)?;
    let name = "pattern/plan_reuse/f32/symbolic_chain".to_string();
    let bindings: Vec<Binding> = [3, 17, 1].iter().map(|&n| vec![("tokens", n)]).collect();
    // Weights of ±0.1 keep the logits below 1: softmax stays far from one-hot.
    let values = |n: &str| {
        if n == "x" {
            Values::Default
        } else {
            Values::Uniform(-0.1, 0.1)
        }
    };
    c.add(name, g.finish()?, &bindings, &values, Tolerance::model(40));
    Ok(())
}
