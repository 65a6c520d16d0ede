//! Cases on a mesh of devices: the whole graph is the oracle's; the runner cuts it for each
//! device and runs it with whole tensors ([`tir_lower::mesh::MeshSpec`]).
//!
//! - Every collective with every dtype it accepts, each from the rule that inserts it: a
//!   reduction over a split axis (`all_reduce_sum`/`max`/`min`), a split value made whole for an
//!   output (`all_gather`), a partial sum written to a split state (`reduce_scatter`).
//! - The propagation rules on the example models: Megatron's split of an MLP (by name, and by
//!   `tensor_parallel` at 4 devices), attention by heads, a decoder whose KV cache is split by
//!   heads over several runs, an encoder split by batch, a BERT encoder under Megatron's rule,
//!   and ops whose split must be gathered.

use super::{scalar, Corpus, Result, FLOATS};
use crate::tolerance::Tolerance;
use crate::values::Values;
use std::collections::BTreeMap;
use tir_graph::collective::Sharding;
use tir_graph::models::{self, AttentionConfig, DecoderConfig, TransformerConfig};
use tir_graph::{shape, DType, Graph, GraphBuilder};
use tir_lower::mesh::MeshSpec;

pub(crate) fn add(c: &mut Corpus) -> Result<()> {
    collectives(c)?;
    models_on_meshes(c)
}

/// A mesh of `world` devices with `pairs` split by name.
fn mesh(world: u32, pairs: &[(&str, usize)], tensor_parallel: bool) -> MeshSpec {
    MeshSpec {
        world,
        shardings: pairs
            .iter()
            .map(|(n, a)| (n.to_string(), Sharding::Split(*a)))
            .collect(),
        tensor_parallel,
    }
}

fn values_for(dtype: DType) -> Values {
    if dtype.is_float() {
        Values::Halves
    } else {
        Values::Default
    }
}

fn collectives(c: &mut Corpus) -> Result<()> {
    for dtype in DType::ALL {
        if dtype == DType::Bool {
            continue;
        }
        for (name, reduce) in [("sum", 0), ("max", 1), ("min", 2)] {
            let g = GraphBuilder::new();
            let x = g.input("x", dtype, shape![4, 6])?;
            let y = match reduce {
                0 => x.sum(&[1], false)?,
                1 => x.max(&[1], false)?,
                _ => x.min(&[1], false)?,
            };
            g.output("y", &y)?;
            let tol = if reduce == 0 {
                Tolerance::reduction(6)
            } else {
                Tolerance::EXACT
            };
            let case = format!("op/all_reduce_{name}/{dtype}/4x6_split1_tp2");
            sharded_static(
                c,
                case,
                g.finish()?,
                values_for(dtype),
                tol,
                mesh(2, &[("x", 1)], false),
            );
        }
        // A partial sum written to a state split by rows, and read whole.
        let g = GraphBuilder::new();
        let x = g.input("x", dtype, shape![4, 6])?;
        let s = g.state("s", dtype, shape![4, 1])?;
        let p = x.sum(&[1], true)?;
        s.assign(&p)?;
        g.output("y", &p)?;
        let case = format!("op/reduce_scatter/{dtype}/4x6_split1_state_split0_tp2");
        let m = mesh(2, &[("x", 1), ("s", 0)], false);
        sharded_static(
            c,
            case,
            g.finish()?,
            values_for(dtype),
            Tolerance::reduction(6),
            m,
        );
    }
    for dtype in DType::ALL {
        let g = GraphBuilder::new();
        let x = g.input("x", dtype, shape![6, 5])?;
        g.output("y", &x)?;
        let case = format!("op/all_gather/{dtype}/6x5_split0_tp3");
        sharded_static(
            c,
            case,
            g.finish()?,
            values_for(dtype),
            Tolerance::EXACT,
            mesh(3, &[("x", 0)], false),
        );
    }
    Ok(())
}

fn sharded_static(
    c: &mut Corpus,
    name: String,
    graph: Graph,
    values: Values,
    tol: Tolerance,
    m: MeshSpec,
) {
    c.add_static(name, graph, values, tol);
    c.put_on_mesh(m);
}

fn fixed_batch(graph: Graph, batch: u64) -> Result<Graph> {
    graph.specialize(&BTreeMap::from([("batch".to_string(), batch)]))
}

fn small() -> Values {
    Values::Uniform(-0.5, 0.5)
}

fn models_on_meshes(c: &mut Corpus) -> Result<()> {
    let mlp = fixed_batch(models::mlp(32, 96)?, 3)?;
    let case = "pattern/sharded/mlp/f16/w1_split1_tp2".to_string();
    c.add_static(case, mlp.clone(), small(), Tolerance::model(96));
    c.put_on_mesh(mesh(2, &[("w1", 1)], false));
    let case = "pattern/sharded/mlp/f16/tensor_parallel_tp4".to_string();
    c.add_static(case, mlp, small(), Tolerance::model(96));
    c.put_on_mesh(mesh(4, &[], true));

    let attention = fixed_batch(
        models::attention(&AttentionConfig {
            seq: 10,
            hidden: 24,
            heads: 4,
            causal: true,
        })?,
        2,
    )?;
    let case = "pattern/sharded/attention/f16/heads_tp2".to_string();
    c.add_static(case, attention, small(), Tolerance::model(24));
    c.put_on_mesh(mesh(2, &[], true));

    let transformer = fixed_batch(
        models::transformer(&TransformerConfig {
            layers: 2,
            seq: 8,
            hidden: 16,
            heads: 2,
            ffn: 32,
        })?,
        4,
    )?;
    let case = "pattern/sharded/transformer/f16/batch_split_tp2".to_string();
    c.add_static(case, transformer.clone(), small(), Tolerance::model(32));
    c.put_on_mesh(mesh(2, &[("x", 0)], false));
    let case = "pattern/sharded/transformer/f16/tensor_parallel_tp2".to_string();
    c.add_static(case, transformer, small(), Tolerance::model(32));
    c.put_on_mesh(mesh(2, &[], true));

    // A decoder's KV caches split by heads, filled run after run.
    let cfg = DecoderConfig {
        hidden: 32,
        heads: 4,
        context: 8,
        ffn: 48,
    };
    let graph = models::decoder(&cfg, 2)?;
    let name = "pattern/sharded/decoder/f16/kv_cache_4_runs_tp2".to_string();
    let runs = (0..4)
        .map(|pos| {
            let mut s = c.sources(&name, &graph, &Vec::new(), pos, &|_: &str| small());
            s.insert("pos".into(), scalar(DType::I64, pos as f64));
            s
        })
        .collect();
    c.add_runs(name, graph, runs, Tolerance::model(48));
    c.put_on_mesh(mesh(2, &[], true));

    bert(c)?;
    gathered_splits(c)
}

/// A BERT encoder (embeddings, layer norms, masked attention, GELU MLP) under Megatron's rule.
fn bert(c: &mut Corpus) -> Result<()> {
    let cfg = models::BertConfig {
        vocab: 50,
        hidden: 32,
        layers: 2,
        heads: 4,
        intermediate: 64,
        max_positions: 16,
        type_vocab: 2,
        layer_norm_eps: 1e-12,
        dtype: DType::F32,
    };
    let bind = BTreeMap::from([("batch".to_string(), 2), ("seq".to_string(), 7)]);
    let graph = models::bert_embedder(&cfg)?.specialize(&bind)?;
    let values = |name: &str| match name {
        "attention_mask" => Values::Choice(vec![0.0, 1.0, 1.0, 1.0]),
        "input_ids" | "token_type_ids" | "position_ids" => Values::Below(2),
        _ => small(),
    };
    let name = "pattern/sharded/bert/f32/tensor_parallel_tp2".to_string();
    c.add(name, graph, &[Vec::new()], &values, Tolerance::model(64));
    c.put_on_mesh(mesh(2, &[], true));
    Ok(())
}

/// Ops that cannot keep a split along their axis (a slice across it, a mean and a softmax over
/// it, a product with a whole parameter): the split is gathered, the values stay right.
fn gathered_splits(c: &mut Corpus) -> Result<()> {
    for dtype in FLOATS {
        let g = GraphBuilder::new();
        let x = g.input("x", dtype, shape![4, 6])?;
        let p = g.parameter("p", dtype, shape![4, 6])?;
        let y = x.slice_axis(1, 1, 5)?;
        let m = x.mean(&[1], true)?;
        let t = (&(&x - &m)?.softmax(1)? * &p)?;
        g.output("y", &y)?;
        g.output("t", &t)?;
        let name = format!("pattern/sharded/gathered/{dtype}/slice_mean_softmax_tp3");
        c.add_static(name, g.finish()?, small(), Tolerance::composite(6));
        c.put_on_mesh(mesh(3, &[("x", 1)], false));
    }
    Ok(())
}
