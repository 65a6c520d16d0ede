//! Quantized weights: `x.matmul(w)` with `w` dequantized by `tir_graph::quant` from each
//! on-disk layout (int8 per channel, FP8 per tensor, row and 128×128 block, AWQ and GPTQ int4
//! at groups of 32, 64 and 128, GPTQ with act-order `g_idx`), at shapes that are no power of
//! two and at decode (one row) and prefill (5 and 16 rows) sizes.
//!
//! Names are `quant/FORMAT/VARIANT/MxKxN`. Packed words are random over the whole i32 range
//! (every nibble value, negative words included); scales are small and positive so that the
//! products stay within a few units.

use super::{Corpus, Result};
use crate::tolerance::Tolerance;
use crate::values::Values;
use tir_graph::quant::{Fp8Scale, QuantError, WeightFormat};
use tir_graph::{shape, DType, GraphBuilder, Tensor};

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let cases: [(WeightFormat, &str, u64, u64); 11] = [
        (WeightFormat::Int8, "int8/channel", 67, 45),
        (WeightFormat::Fp8(Fp8Scale::Tensor), "fp8/tensor", 33, 50),
        (WeightFormat::Fp8(Fp8Scale::Row), "fp8/row", 72, 40),
        (WeightFormat::Fp8(Fp8Scale::Block), "fp8/block128", 200, 136),
        (WeightFormat::Awq { group: 32 }, "awq/g32", 96, 24),
        (WeightFormat::Awq { group: 64 }, "awq/g64", 192, 40),
        (WeightFormat::Awq { group: 128 }, "awq/g128", 384, 56),
        (WeightFormat::Gptq { group: 32 }, "gptq/g32", 160, 24),
        (WeightFormat::Gptq { group: 64 }, "gptq/g64", 192, 72),
        (WeightFormat::Gptq { group: 128 }, "gptq/g128", 384, 40),
        (
            WeightFormat::Gptq { group: 128 },
            "gptq/g128_wide",
            128,
            264,
        ),
    ];
    for (format, variant, k, n) in cases {
        for m in [1, 5, 16] {
            let g = GraphBuilder::new();
            let x = g.input("x", DType::F16, shape![m, k])?;
            let w = built(format.declare(&g, "w", k, n))?;
            g.output("y", &x.matmul(&w)?)?;
            let groups = match format {
                WeightFormat::Awq { group } | WeightFormat::Gptq { group } => k / group,
                _ => 1,
            };
            let name = format!("quant/{variant}/{m}x{k}x{n}");
            let values = move |source: &str| values_of(source, groups);
            c.add(
                name,
                g.finish()?,
                &[Vec::new()],
                &values,
                Tolerance::composite(k),
            );
        }
    }
    Ok(())
}

/// The weight. A refused layout is a bug of the table above (every size there fits its
/// format), which [`super::corpus`] reports as it reports a graph that fails to build.
fn built(w: std::result::Result<Tensor, QuantError>) -> Result<Tensor> {
    match w {
        Ok(w) => Ok(w),
        Err(QuantError::Graph(e)) => Err(e),
        Err(e @ QuantError::Layout { .. }) => panic!("a corpus graph failed to build: {e}"),
    }
}

/// The values of a source, by its name.
fn values_of(source: &str, groups: u64) -> Values {
    match source.rsplit('.').next() {
        // Random words: every nibble value, negative words included.
        Some("qweight" | "qzeros") => Values::Default,
        Some("g_idx") => Values::Below(groups),
        Some("scales") => Values::Uniform(0.005, 0.03),
        Some("weight_scale" | "weight_scale_inv") => Values::Uniform(0.05, 0.2),
        // The FP8 weight over [-2, 2), e4m3's subnormals included.
        Some("weight") => Values::Default,
        _ => Values::Uniform(-1.0, 1.0),
    }
}
