//! The benchmark workloads: each a graph, how to run it, and what bounds it (bytes moved or
//! floating-point operations), so a time becomes a fraction of the hardware's ceiling.

use std::collections::BTreeMap;
use tir_graph::models::{self, DecoderConfig};
use tir_graph::quant::{Fp8Scale, QuantError, WeightFormat};
use tir_graph::{shape, DType, Graph, GraphBuilder, GraphError};

/// A workload's graph failed to build: a graph error, a quantized layout refused, or a custom
/// kernel refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Kernel(#[from] tir_lower::custom::KernelError),
}

type Result<T> = std::result::Result<T, WorkloadError>;

/// What limits a workload.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Bytes that must cross device memory once (reads plus writes).
    Memory { bytes: f64 },
    /// Floating-point operations.
    Compute { flops: f64 },
}

/// One benchmark.
pub struct Workload {
    /// `gemm_4096`, also the peers' key.
    pub name: String,
    pub graph: Graph,
    /// Values of the symbolic dims.
    pub dims: BTreeMap<String, u64>,
    /// Inputs scaled into this magnitude, so deep models stay finite in f16.
    pub scale: f64,
    pub bound: Bound,
    /// Run as a CUDA graph replay (else stream-chained launches).
    pub graph_replay: bool,
    /// The matmul path (`auto`, `generated`, `cublaslt`).
    pub matmul: &'static str,
    /// Whether the peers script has a PyTorch counterpart to time and check against.
    pub peer: bool,
    /// Inputs whose values are not random (token ids, positions, masks), by name.
    pub fixed: fn(&str, &[u64]) -> Option<Vec<f64>>,
    /// Items a run processes (sentences), for a rate beside the time; 0: none.
    pub items: u64,
}

const F16: f64 = 2.0;

fn workload(name: &str, graph: Graph, bound: Bound) -> Workload {
    Workload {
        name: name.to_string(),
        graph,
        dims: BTreeMap::new(),
        scale: 1.0,
        bound,
        graph_replay: false,
        matmul: "auto",
        peer: true,
        fixed: |_, _| None,
        items: 0,
    }
}

/// The BERT embedder's inputs: token ids spread over the vocabulary, positions 0.., one token
/// type, every token kept.
fn bert_inputs(name: &str, dims: &[u64]) -> Option<Vec<f64>> {
    let n: u64 = dims.iter().product();
    Some(match name {
        "input_ids" => (0..n).map(|i| (1000 + i * 7919 % 28000) as f64).collect(),
        "position_ids" => (0..n).map(|i| i as f64).collect(),
        "token_type_ids" => vec![0.0; n as usize],
        "attention_mask" => vec![1.0; n as usize],
        _ => return None,
    })
}

/// all-MiniLM-L6-v2's encoder in `dtype` on `batch` sentences of `seq` tokens, as a CUDA graph.
fn bert(dtype: DType, batch: u64, seq: u64) -> Result<Workload> {
    let cfg = models::BertConfig::minilm_l6(dtype);
    let (h, ffn, layers) = (
        cfg.hidden as f64,
        cfg.intermediate as f64,
        cfg.layers as f64,
    );
    let tokens = (batch * seq) as f64;
    // Projections and the feed-forward layer, then the two attention products.
    let flops = 2.0 * tokens * layers * (4.0 * h * h + 2.0 * h * ffn)
        + 4.0 * layers * tokens * seq as f64 * h;
    let precision = if dtype == DType::F16 {
        String::new()
    } else {
        format!("_{dtype}")
    };
    let mut w = workload(
        &format!("bert_minilm{precision}_b{batch}_s{seq}"),
        models::bert_embedder(&cfg)?,
        Bound::Compute { flops },
    );
    w.dims.insert("batch".into(), batch);
    w.dims.insert("seq".into(), seq);
    w.scale = 0.05;
    w.graph_replay = true;
    w.fixed = bert_inputs;
    w.items = batch;
    Ok(w)
}

fn add(n: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![n])?;
    let y = g.input("y", DType::F16, shape![n])?;
    g.output("z", &(&x + &y)?)?;
    Ok(g.finish()?)
}

fn rms_norm(rows: u64, cols: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![rows, cols])?;
    let w = g.parameter("w", DType::F16, shape![cols])?;
    g.output("y", &x.rms_norm(&w, 1e-6)?)?;
    Ok(g.finish()?)
}

fn softmax(rows: u64, cols: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![rows, cols])?;
    g.output("y", &x.softmax(1)?)?;
    Ok(g.finish()?)
}

fn gemm(m: u64, k: u64, n: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let a = g.input("a", DType::F16, shape![m, k])?;
    let b = g.input("b", DType::F16, shape![k, n])?;
    g.output("c", &a.matmul(&b)?)?;
    Ok(g.finish()?)
}

/// A square convolution of fp16 NCHW tensors, `size`x`size` images of `channels` into `out`
/// channels, with its bias and ReLU: a kernel of `k`x`k` taps with "same" padding, a stride,
/// and `groups` channel groups.
#[derive(Clone, Copy)]
struct Conv {
    batch: u64,
    channels: u64,
    out: u64,
    size: u64,
    k: u64,
    stride: u64,
    groups: u64,
}

impl Conv {
    /// The name `tir-bench --filter conv` and the peers script know it by (the peers read the
    /// taps, stride and depthwise-ness from it).
    fn name(&self) -> String {
        let Conv {
            batch,
            channels,
            out,
            size,
            k,
            stride,
            groups,
        } = *self;
        let dw = if groups > 1 { "dw" } else { "" };
        let s = if stride > 1 {
            format!("s{stride}")
        } else {
            String::new()
        };
        let o = if out != channels {
            format!("_k{out}")
        } else {
            String::new()
        };
        format!("{dw}conv{k}x{k}{s}_n{batch}_c{channels}{o}_{size}x{size}")
    }

    fn output_size(&self) -> u64 {
        (self.size + 2 * (self.k / 2) - self.k) / self.stride + 1
    }

    /// Multiply-adds times two.
    fn flops(&self) -> f64 {
        let q = self.output_size();
        let taps = self.k * self.k * self.channels / self.groups;
        2.0 * (self.batch * self.out * q * q * taps) as f64
    }

    /// The graph: NCHW in and out, or, `channels_last`, NHWC in and out (the layout a
    /// channels-last model hands over; the conv still reads through a permute to NCHW).
    fn graph(&self, channels_last: bool) -> Result<Graph> {
        let Conv {
            batch,
            channels,
            out,
            size,
            k,
            stride,
            groups,
        } = *self;
        let g = GraphBuilder::new();
        let x = if channels_last {
            g.input("x", DType::F16, shape![batch, size, size, channels])?
                .permute(&[0, 3, 1, 2])?
        } else {
            g.input("x", DType::F16, shape![batch, channels, size, size])?
        };
        let w = g.input("w", DType::F16, shape![out, channels / groups, k, k])?;
        let b = g.input("b", DType::F16, shape![out])?;
        let p = k / 2;
        let y = x.conv(&w, &[stride, stride], &[1, 1], &[(p, p), (p, p)], groups)?;
        let bias = b.reshape(&[out.into(), 1.into(), 1.into()])?;
        let y = (&y + &bias)?.relu()?;
        let y = if channels_last {
            y.permute(&[0, 2, 3, 1])?
        } else {
            y
        };
        g.output("y", &y)?;
        Ok(g.finish()?)
    }
}

fn mlp(tokens: u64, hidden: u64, ffn: u64) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![tokens, hidden])?;
    let w1 = g.parameter("w1", DType::F16, shape![hidden, ffn])?;
    let w2 = g.parameter("w2", DType::F16, shape![ffn, hidden])?;
    g.output("y", &x.matmul(&w1)?.gelu()?.matmul(&w2)?)?;
    Ok(g.finish()?)
}

fn attention(batch: u64, heads: u64, seq: u64, head_dim: u64, causal: bool) -> Result<Graph> {
    let g = GraphBuilder::new();
    let qkv = |n: &str| g.input(n, DType::F16, shape![batch, heads, seq, head_dim]);
    let (q, k, v) = (qkv("q")?, qkv("k")?, qkv("v")?);
    g.output("o", &q.attention(&k, &v, causal)?)?;
    Ok(g.finish()?)
}

/// `n` dependent 16x16 matmuls: `n` kernels that cannot fuse, each of a few hundred flops.
fn chain(n: usize) -> Result<Graph> {
    let g = GraphBuilder::new();
    let mut x = g.input("x", DType::F16, shape![16, 16])?;
    let w = g.parameter("w", DType::F16, shape![16, 16])?;
    for _ in 0..n {
        x = x.matmul(&w)?;
    }
    g.output("y", &x)?;
    Ok(g.finish()?)
}

/// Every workload of `bench/README.md`.
pub fn all() -> Result<Vec<Workload>> {
    let mut out = Vec::new();
    let n = 1u64 << 28;
    out.push(workload(
        "add_2^28",
        add(n)?,
        Bound::Memory {
            bytes: 3.0 * n as f64 * F16,
        },
    ));
    let (rows, cols) = (16384u64, 4096u64);
    let mut ln = workload(
        "ln_gelu_16384x4096",
        models::ln_gelu(cols)?,
        Bound::Memory {
            bytes: 3.0 * (rows * cols) as f64 * F16,
        },
    );
    ln.dims.insert("tokens".into(), rows);
    out.push(ln);
    out.push(workload(
        "rms_norm_16384x4096",
        rms_norm(rows, cols)?,
        Bound::Memory {
            bytes: 2.0 * (rows * cols) as f64 * F16,
        },
    ));
    for (r, c) in [(16384u64, 4096u64), (4096, 32768)] {
        out.push(workload(
            &format!("softmax_{r}x{c}"),
            softmax(r, c)?,
            Bound::Memory {
                bytes: 2.0 * (r * c) as f64 * F16,
            },
        ));
    }
    for (m, k, n) in [
        (4096u64, 4096u64, 4096u64),
        (8192, 8192, 8192),
        (2048, 4096, 16384),
    ] {
        let bound = Bound::Compute {
            flops: 2.0 * (m * k * n) as f64,
        };
        out.push(workload(
            &format!("gemm_{m}x{k}x{n}"),
            gemm(m, k, n)?,
            bound,
        ));
        // The same GEMM through tir's own kernel rather than cuBLASLt.
        let mut generated = workload(
            &format!("gemm_{m}x{k}x{n}_generated"),
            gemm(m, k, n)?,
            bound,
        );
        generated.matmul = "generated";
        out.push(generated);
    }
    // ResNet's 3x3 convolutions, a bottleneck's 1x1, a downsampling strided 3x3 and
    // MobileNet's depthwise 3x3.
    let conv = |channels, out, size, k, stride, groups| Conv {
        batch: 32,
        channels,
        out,
        size,
        k,
        stride,
        groups,
    };
    for c in [
        conv(64, 64, 56, 3, 1, 1),
        conv(256, 256, 14, 3, 1, 1),
        conv(256, 64, 56, 1, 1, 1),
        conv(128, 128, 28, 3, 2, 1),
        conv(256, 256, 28, 3, 1, 256),
    ] {
        let flops = c.flops();
        out.push(workload(
            &c.name(),
            c.graph(false)?,
            Bound::Compute { flops },
        ));
        // The same with NHWC tensors at the boundary, as torch.compile's channels_last peer has
        // them: what the layout pass makes of a conv between channels-last neighbours.
        let name = format!("{}_cl", c.name());
        out.push(workload(&name, c.graph(true)?, Bound::Compute { flops }));
    }
    let mut mlp = workload(
        "mlp_2048x4096x16384",
        mlp(2048, 4096, 16384)?,
        Bound::Compute {
            flops: 2.0 * 2.0 * (2048u64 * 4096 * 16384) as f64,
        },
    );
    mlp.scale = 0.1;
    out.push(mlp);
    for (b, s, causal) in [(4u64, 2048u64, true), (4, 2048, false), (1, 8192, true)] {
        let (h, d) = (32u64, 128u64);
        let name = format!(
            "attention_b{b}_h{h}_s{s}_d{d}_{}",
            if causal { "causal" } else { "full" }
        );
        // Two matmuls of 2 * b * h * s * s * d flops each, over half the scores when causal.
        let flops = 4.0 * (b * h * s * s * d) as f64 / if causal { 2.0 } else { 1.0 };
        let mut att = workload(
            &name,
            attention(b, h, s, d, causal)?,
            Bound::Compute { flops },
        );
        att.scale = 0.5;
        out.push(att);
    }
    for (dtype, batch, seq) in [
        (DType::F16, 32u64, 128u64),
        (DType::F16, 1, 16),
        (DType::F32, 32, 128),
    ] {
        out.push(bert(dtype, batch, seq)?);
    }
    let cfg = DecoderConfig {
        hidden: 4096,
        heads: 32,
        context: 2048,
        ffn: 11008,
    };
    let weights = 4.0 * (cfg.hidden * cfg.hidden) as f64 + 3.0 * (cfg.hidden * cfg.ffn) as f64;
    let kv = 2.0 * (cfg.context * cfg.hidden) as f64;
    let mut decoder = workload(
        "decoder_step_h4096_ctx2048",
        models::decoder_block(&cfg)?,
        Bound::Memory {
            bytes: (weights + kv) * F16,
        },
    );
    decoder.scale = 0.02;
    decoder.graph_replay = true;
    out.push(decoder);
    // The token loop of a 32-layer model of the block's shapes: one token per replay.
    let layers = 32;
    let mut decode = workload(
        &format!("decode_{layers}_layers_h4096_ctx2048"),
        models::decoder(&cfg, layers)?,
        Bound::Memory {
            bytes: layers as f64 * (weights + kv) * F16,
        },
    );
    decode.scale = 0.02;
    decode.graph_replay = true;
    decode.items = 1;
    out.push(decode);
    rope_variants(&mut out, &cfg, layers, weights + kv)?;
    quantized(&mut out, &cfg)?;
    for n in [1usize, 10, 100, 1000] {
        for replay in [false, true] {
            let mode = if replay { "graph" } else { "stream" };
            let mut w = workload(
                &format!("chain_{n}_{mode}"),
                chain(n)?,
                Bound::Compute {
                    flops: 2.0 * 16.0 * 16.0 * 16.0 * n as f64,
                },
            );
            w.graph_replay = replay;
            w.matmul = "generated";
            w.scale = 0.05;
            out.push(w);
        }
    }
    Ok(out)
}

/// The weight formats of the quantized workloads, with their names: fp16 first, the baseline.
pub const QUANT_FORMATS: [(&str, WeightFormat); 4] = [
    ("f16", WeightFormat::F16),
    ("int8", WeightFormat::Int8),
    ("fp8row", WeightFormat::Fp8(Fp8Scale::Row)),
    ("awq128", WeightFormat::Awq { group: 128 }),
];

/// The bytes a `[k, n]` weight takes in `format` (its stored tensors: packed values, scales,
/// zeros).
fn stored_bytes(format: WeightFormat, k: u64, n: u64) -> Result<f64> {
    Ok(format
        .tensors("w", k, n)?
        .iter()
        .map(|t| t.dims.iter().product::<u64>() as f64 * t.dtype.size_bytes() as f64)
        .sum())
}

/// `x: f16[m, k]` times a `[k, n]` weight stored in `format`.
fn quantized_gemv(m: u64, k: u64, n: u64, format: WeightFormat) -> Result<Graph> {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![m, k])?;
    let w = format.declare(&g, "w", k, n)?;
    g.output("y", &x.matmul(&w)?)?;
    Ok(g.finish()?)
}

/// The quantized products alone (the bytes read: the stored weight, `x` and `y`) per format
/// next to fp16, and the 32-layer decode loop per quantized format (fp16's is `decode_32_…`).
fn quantized(out: &mut Vec<Workload>, cfg: &DecoderConfig) -> Result<()> {
    for (k, n) in [(4096u64, 4096u64), (4096, 14336)] {
        for m in [1u64, 16] {
            for (name, format) in QUANT_FORMATS {
                let weight = stored_bytes(format, k, n)?;
                let mut w = workload(
                    &format!("qgemv_{name}_m{m}_{k}x{n}"),
                    quantized_gemv(m, k, n, format)?,
                    Bound::Memory {
                        bytes: weight + (m * (k + n)) as f64 * F16,
                    },
                );
                w.scale = 0.05;
                w.graph_replay = true;
                w.peer = false;
                out.push(w);
            }
        }
    }
    let layers = 32;
    let kv = 2.0 * (cfg.context * cfg.hidden) as f64 * F16;
    for (name, format) in &QUANT_FORMATS[1..] {
        let (h, f) = (cfg.hidden, cfg.ffn);
        let weights = 4.0 * stored_bytes(*format, h, h)?
            + 2.0 * stored_bytes(*format, h, f)?
            + stored_bytes(*format, f, h)?;
        let graph = models::quantized_decoder(cfg, layers, *format)?;
        let mut decode = workload(
            &format!("decode_{layers}_layers_h4096_ctx2048_{name}"),
            graph,
            Bound::Memory {
                bytes: layers as f64 * (weights + kv),
            },
        );
        decode.scale = 0.02;
        decode.graph_replay = true;
        decode.items = 1;
        decode.peer = false;
        out.push(decode);
    }
    Ok(())
}

/// The decode step with rotary embeddings on q and k (#40): as the composite of IR ops and as
/// the custom kernel, one layer (`decoder_step_h4096_ctx2048_rope_*`, for per-kernel profiles)
/// and `layers` of them (`decode_{layers}_layers_h4096_ctx2048_rope_*`, against the plain
/// `decode_{layers}_layers_h4096_ctx2048`). `per_layer_bytes`: weights and cache per layer.
fn rope_variants(
    out: &mut Vec<Workload>,
    cfg: &DecoderConfig,
    layers: u64,
    per_layer_bytes: f64,
) -> Result<()> {
    let head_dim = cfg.hidden / cfg.heads;
    let kernels = models::Rope::Kernel {
        q: tir_lower::custom::rope::rope(DType::F16, DType::I64, head_dim, 10000.0)?.into(),
        k_into_cache: tir_lower::custom::rope::rope_into_cache(
            DType::F16,
            DType::I64,
            head_dim,
            10000.0,
        )?
        .into(),
    };
    let variants = [
        ("composite", models::Rope::Composite { base: 10000.0 }),
        ("kernel", kernels),
    ];
    for (tag, rope) in variants {
        for (name, n) in [
            (format!("decoder_step_h4096_ctx2048_rope_{tag}"), 1),
            (
                format!("decode_{layers}_layers_h4096_ctx2048_rope_{tag}"),
                layers,
            ),
        ] {
            let mut w = workload(
                &name,
                models::decoder_rope(cfg, n, &rope)?,
                Bound::Memory {
                    bytes: n as f64 * per_layer_bytes * F16,
                },
            );
            w.scale = 0.02;
            w.graph_replay = true;
            w.items = if n > 1 { 1 } else { 0 };
            w.peer = false;
            out.push(w);
        }
    }
    Ok(())
}
