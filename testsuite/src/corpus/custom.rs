//! Users' kernels (`tir_lower::custom`): the graph op `custom` running its author's tile
//! program, checked against the oracle running its reference composite.
//!
//! Names are `custom/KERNEL/DTYPE/SHAPE`. Top-k per row (`tir_lower::custom::topk`) over rows
//! of odd lengths, `k` from 1 to its largest (64), a symbolic batch bound to several values run
//! after run, in f16 and f32; with `Halves` values (many ties, so the lowest-index-first rule is
//! exercised) and with the default ones. Top-k selects elements, so it is exact.

use super::{Corpus, Result};
use crate::tolerance::Tolerance;
use crate::values::Values;
use tir_graph::{shape, DType, GraphBuilder};
use tir_lower::custom::topk::topk;

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    let shapes: [(u64, u64); 5] = [(37, 5), (100, 64), (7, 7), (1, 1), (1000, 16)];
    for dtype in [DType::F16, DType::F32] {
        for (n, k) in shapes {
            for (values, tag) in [(Values::Default, ""), (Values::Halves, "_ties")] {
                // The table above holds only sizes topk takes: a refusal is a bug of it.
                let kernel = topk(dtype, n, k).unwrap_or_else(|e| panic!("the top-k table: {e}"));
                let g = GraphBuilder::new();
                let x = g.input("x", dtype, shape!["batch", n])?;
                let out = g.custom(&kernel, &[&x])?;
                g.output("values", &out[0])?;
                g.output("indices", &out[1])?;
                let name = format!("custom/topk/{dtype}/batch_x{n}_k{k}{tag}");
                let values = move |_: &str| values.clone();
                c.add(
                    name,
                    g.finish()?,
                    &[vec![("batch", 3)], vec![("batch", 1)], vec![("batch", 8)]],
                    &values,
                    Tolerance::EXACT,
                );
            }
        }
    }
    Ok(())
}
