//! The builder API end to end: operators, the README examples, every composite's expansion into
//! primitive ops, atomic rollback of failed composites, foreign tensors, names, `finish`, and
//! state updates (assign, slice writes, KV-cache appends at a run-time position).

use std::collections::BTreeMap;
use tir_graph::op::{ConstData, ExactF64};
use tir_graph::{
    shape, DType, Graph, GraphBuilder, GraphError, NodeId, Op, ReduceOp, ReshapeDim, SliceRange,
    Tensor, TensorType,
};

type R = Result<(), GraphError>;

/// `tt!(F32[4, "batch"])` is the type `f32[4, batch]`.
macro_rules! tt {
    ($dt:ident [$($d:expr),* $(,)?]) => {
        TensorType::new(DType::$dt, shape![$($d),*])
    };
}

fn counts(pairs: &[(&'static str, usize)]) -> BTreeMap<&'static str, usize> {
    pairs.iter().copied().collect()
}

/// The builder's graph as it stands, verified (via a clone of the builder, which shares it).
/// The graph needs a result already (an output or a state update).
#[track_caller]
fn peek(g: &GraphBuilder) -> Graph {
    g.clone().finish().unwrap_or_else(|e| panic!("{e}"))
}

/// The values of a constant node.
fn constant_values(graph: &Graph, id: NodeId) -> Vec<f64> {
    match &graph.node(id).op {
        Op::Constant { data } => (0..data.len()).map(|i| data.get_f64(i).unwrap()).collect(),
        op => panic!("{id} is {op}, not a constant"),
    }
}

/// The ids of the nodes with op name `name`, in order.
fn nodes_named(graph: &Graph, name: &str) -> Vec<NodeId> {
    graph
        .node_ids()
        .filter(|&id| graph.node(id).op.name() == name)
        .collect()
}

/// Finishes a builder whose last tensor is named `y`, returning the graph.
fn finish_with(g: GraphBuilder, y: &Tensor) -> Graph {
    g.output("y", y).unwrap();
    g.finish().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Operators
// ---------------------------------------------------------------------------------------------

#[test]
fn operators_return_results() -> R {
    let g = GraphBuilder::new();
    let a = g.input("a", DType::F32, shape!["n", 4])?;
    let b = g.input("b", DType::F32, shape![4])?;
    let sum: Result<Tensor, GraphError> = &a + &b;
    let sum = sum?;
    assert_eq!(sum.ty(), tt!(F32["n", 4]));
    assert_eq!((&a - &b)?.ty(), tt!(F32["n", 4]));
    assert_eq!((&b * &a)?.ty(), tt!(F32["n", 4]));
    assert_eq!((&b / &b)?.ty(), tt!(F32[4]));
    let neg = (-&a)?;
    assert_eq!(neg.ty(), a.ty());
    let scaled = (&a * 2.0)?;
    let shifted = (&a + 1.5)?;
    let less = (&a - 0.5)?;
    let halved = (&a / 4.0)?;
    // Chained with `?`.
    let chained = (&(&(&a + &b)? * 2.0)? - &b)?;
    assert_eq!(chained.ty(), tt!(F32["n", 4]));
    for t in [&scaled, &shifted, &less, &halved] {
        assert_eq!(t.ty(), a.ty());
    }
    g.output("y", &chained)?;
    let graph = peek(&g);
    assert_eq!(
        graph.op_counts(),
        counts(&[
            ("input", 2),
            ("add", 3),
            ("sub", 3),
            ("mul", 3),
            ("div", 2),
            ("neg", 1),
            ("constant", 5),
        ])
    );
    // Each scalar operand is a rank-0 constant of the tensor's dtype, as the right operand.
    let mul = graph.node(scaled.id());
    assert_eq!(mul.op.name(), "mul");
    let ops = graph.operands(scaled.id());
    assert_eq!(ops[0], a.id());
    assert_eq!(graph.ty(ops[1]), &tt!(F32[]));
    assert_eq!(constant_values(&graph, ops[1]), vec![2.0]);
    assert_eq!(
        constant_values(&graph, graph.operands(halved.id())[1]),
        vec![4.0]
    );
    Ok(())
}

#[test]
fn scalar_operands_take_the_tensor_dtype() -> R {
    let g = GraphBuilder::new();
    let h = g.input("h", DType::F16, shape![2])?;
    let i = g.input("i", DType::I32, shape![2])?;
    let y = (&h * 0.1)?;
    let z = (&i * 3.0)?;
    // An int tensor times a fraction multiplies by the truncated value.
    let w = (&i * 0.5)?;
    g.output("y", &y)?;
    g.output("z", &z)?;
    g.output("w", &w)?;
    let graph = peek(&g);
    let c = graph.operands(y.id())[1];
    assert_eq!(graph.ty(c), &tt!(F16[]));
    assert_eq!(
        constant_values(&graph, c),
        vec![DType::F16.round_value(0.1)]
    );
    let c = graph.operands(z.id())[1];
    assert_eq!(graph.ty(c), &tt!(I32[]));
    assert_eq!(
        graph.node(c).op,
        Op::Constant {
            data: ConstData::Int(vec![3])
        }
    );
    assert_eq!(
        constant_values(&graph, graph.operands(w.id())[1]),
        vec![0.0]
    );
    Ok(())
}

#[test]
fn failed_operators_add_nothing() -> R {
    let g = GraphBuilder::new();
    let a = g.input("a", DType::F32, shape![3])?;
    let c = g.input("c", DType::F32, shape![4])?;
    let flag = g.input("flag", DType::Bool, shape![3])?;
    g.output("a", &a)?;
    let len = peek(&g).len();
    let e = (&a + &c).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %3: add(f32[3], f32[4]): shapes [3] and [4] do not broadcast: dim 3 vs 4"
    );
    // The scalar constant is rolled back with the failed op.
    let e = (&flag + 1.0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %4: add(bool[3], bool[]): needs a numeric dtype, got bool"
    );
    assert!((&flag * 2.0).is_err());
    assert!((&flag / 2.0).is_err());
    assert!((&flag - 2.0).is_err());
    assert!((-&flag).is_err());
    assert!(flag.add_scalar(1.0).is_err());
    assert!(flag.mul_scalar(1.0).is_err());
    assert_eq!(peek(&g).len(), len);
    // The next node gets the next id.
    let ok = (&a + 1.0)?;
    assert_eq!(ok.id(), NodeId(len as u32 + 1));
    Ok(())
}

#[test]
fn tensor_accessors_and_debug() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::BF16, shape!["batch", 3])?;
    assert_eq!(format!("{x:?}"), "Tensor(%0: bf16[batch, 3])");
    assert_eq!(x.id(), NodeId(0));
    assert_eq!(x.dtype(), DType::BF16);
    assert_eq!(x.shape(), shape!["batch", 3]);
    assert_eq!(x.rank(), 2);
    assert_eq!(x.ty().to_string(), "bf16[batch, 3]");
    // The tensor's builder and clones of a builder share one graph.
    let y = x.builder().parameter("w", DType::BF16, shape![3, 5])?;
    let z = x.matmul(&y)?;
    g.clone().output("z", &z)?;
    let graph = g.finish()?;
    assert_eq!(graph.len(), 3);
    assert_eq!(graph.outputs(), &[("z".to_string(), NodeId(2))]);
    Ok(())
}

#[test]
fn primitive_methods() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["b", 6, 4])?;
    let ids = g.input("ids", DType::I64, shape!["b", 7])?;
    let table = g.parameter("table", DType::F32, shape![100, 4])?;
    assert_eq!(x.transpose()?.ty(), tt!(F32["b", 4, 6]));
    assert_eq!(x.slice_axis(1, 2, 5)?.ty(), tt!(F32["b", 3, 4]));
    assert_eq!(
        x.slice(&[SliceRange::FULL, SliceRange::new(0, 6, 2), SliceRange::FULL])?
            .ty(),
        tt!(F32["b", 3, 4])
    );
    assert_eq!(x.argmax(2, false)?.ty(), tt!(I64["b", 6]));
    assert_eq!(x.argmin(1, true)?.ty(), tt!(I64["b", 1, 4]));
    assert_eq!(x.sum(&[1, 2], false)?.ty(), tt!(F32["b"]));
    assert_eq!(x.max(&[1], true)?.ty(), tt!(F32["b", 1, 4]));
    assert_eq!(x.cast(DType::F16)?.ty(), tt!(F16["b", 6, 4]));
    assert_eq!(table.gather(&ids, 0)?.ty(), tt!(F32["b", 7, 4]));
    assert_eq!(
        x.reshape(&[ReshapeDim::Infer, 2.into(), 12.into()])?.ty(),
        tt!(F32["b", 2, 12])
    );
    assert_eq!(x.reshape_to(&shape!["b", 24])?.ty(), tt!(F32["b", 24]));
    assert_eq!(
        x.broadcast_to(&shape![2, "b", 6, 4])?.ty(),
        tt!(F32[2, "b", 6, 4])
    );
    assert_eq!(
        x.pad(&[(0, 0), (1, 1), (0, 2)], 0.0)?.ty(),
        tt!(F32["b", 8, 6])
    );
    assert_eq!(x.unsqueeze(&[0])?.squeeze(&[0])?.ty(), x.ty());
    let cond = x.gt(&g.scalar(DType::F32, 0.0)?)?;
    assert_eq!(cond.ty(), tt!(Bool["b", 6, 4]));
    assert_eq!(cond.not()?.and(&cond)?.ty(), tt!(Bool["b", 6, 4]));
    assert_eq!(cond.select(&x, &x.neg()?)?.ty(), x.ty());
    let joined = g.concat(&[&x, &x.slice_axis(1, 0, 2)?], 1)?;
    assert_eq!(joined.ty(), tt!(F32["b", 8, 4]));
    assert_eq!(g.arange(DType::I32, 5)?.ty(), tt!(I32[5]));
    // Errors of the helpers come from inference.
    let v = g.input("v", DType::F32, shape![3])?;
    assert_eq!(
        v.transpose().unwrap_err().to_string(),
        "node %N: permute(f32[3]): permutation [1, 0] has 2 entries for rank 1"
            .replace("%N", &format!("%{}", v.id().0 + 1))
    );
    assert!(v.slice_axis(1, 0, 1).is_err());
    Ok(())
}

#[test]
fn constants_round_to_their_dtype() -> R {
    let g = GraphBuilder::new();
    let c = g.constant(DType::F16, shape![2], &[0.1, 1.0])?;
    let i = g.constant(DType::U8, shape![2], &[255.0, 256.0])?;
    let b = g.constant(DType::Bool, shape![2], &[0.0, -3.0])?;
    let a = g.arange(DType::I64, 4)?;
    let s = g.scalar(DType::F64, 0.1)?;
    g.output("c", &c)?;
    let graph = peek(&g);
    assert_eq!(
        constant_values(&graph, c.id()),
        vec![DType::F16.round_value(0.1), 1.0]
    );
    assert_eq!(constant_values(&graph, i.id()), vec![255.0, 0.0]);
    assert_eq!(constant_values(&graph, b.id()), vec![0.0, 1.0]);
    assert_eq!(constant_values(&graph, a.id()), vec![0.0, 1.0, 2.0, 3.0]);
    assert_eq!(
        graph.node(s.id()).op,
        Op::Constant {
            data: ConstData::Float(vec![ExactF64(0.1)])
        }
    );
    let e = g.constant(DType::F32, shape![3], &[1.0, 2.0]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %5: constant(): declared f32[3]: has 2 values for 3 elements"
    );
    let e = g.arange(DType::I64, 65537).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node %5: constant(): declared i64[65537]: 65537 elements exceed the constant limit \
         65536; use a parameter"
    );
    Ok(())
}

#[test]
fn arange_with_a_huge_length_is_an_error_not_a_panic() {
    let r = std::panic::catch_unwind(|| GraphBuilder::new().arange(DType::I64, u64::MAX).is_err());
    assert_eq!(r.ok(), Some(true), "arange(u64::MAX) must return an error");
}

// ---------------------------------------------------------------------------------------------
// README-style models
// ---------------------------------------------------------------------------------------------

#[test]
fn readme_mlp() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", 64])?;
    let w = g.parameter("w", DType::F32, shape![64, 32])?;
    let b = g.parameter("b", DType::F32, shape![32])?;
    let y = (&x.matmul(&w)? + &b)?.gelu()?;
    assert_eq!(y.ty(), tt!(F32["batch", 32]));
    let graph = finish_with(g, &y);
    assert_eq!(graph.ty(graph.outputs()[0].1).to_string(), "f32[batch, 32]");
    assert_eq!(
        graph.op_counts(),
        counts(&[
            ("input", 1),
            ("parameter", 2),
            ("matmul", 1),
            ("add", 1),
            ("gelu_erf", 1)
        ])
    );
    assert_eq!(graph.inputs(), vec![("x".to_string(), NodeId(0))]);
    assert_eq!(graph.parameters().len(), 2);
    graph.verify()?;
    Ok(())
}

#[test]
fn readme_two_layer_mlp_in_f16() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["batch", 1024])?;
    let w1 = g.parameter("w1", DType::F16, shape![1024, 4096])?;
    let b1 = g.parameter("b1", DType::F16, shape![4096])?;
    let w2 = g.parameter("w2", DType::F16, shape![4096, 1024])?;
    let h = (&x.matmul(&w1)? + &b1)?.gelu()?;
    g.output("y", &h.matmul(&w2)?)?;
    let graph = g.finish()?;
    assert_eq!(
        graph.ty(graph.outputs()[0].1).to_string(),
        "f16[batch, 1024]"
    );
    assert_eq!(graph.op_counts()["matmul"], 2);
    Ok(())
}

#[test]
fn attention_block() -> R {
    let (seq, hidden, heads, head_dim) = (16u64, 64u64, 4u64, 16u64);
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape!["batch", seq, hidden])?;
    let w = |name: &str| g.parameter(name, DType::F16, shape![hidden, hidden]);
    let split = |t: &Tensor| -> Result<Tensor, GraphError> {
        let dims = [ReshapeDim::Infer, seq.into(), heads.into(), head_dim.into()];
        t.reshape(&dims)?.permute(&[0, 2, 1, 3])
    };
    let q = split(&x.matmul(&w("wq")?)?)?;
    let k = split(&x.matmul(&w("wk")?)?)?;
    let v = split(&x.matmul(&w("wv")?)?)?;
    assert_eq!(q.ty(), tt!(F16["batch", heads, seq, head_dim]));
    let attn = q.attention(&k, &v, true)?;
    assert_eq!(attn.ty(), tt!(F16["batch", heads, seq, head_dim]));
    let merged =
        attn.permute(&[0, 2, 1, 3])?
            .reshape(&[ReshapeDim::Infer, seq.into(), hidden.into()])?;
    let y = (&x + &merged.matmul(&w("wo")?)?)?;
    assert_eq!(y.ty(), tt!(F16["batch", seq, hidden]));
    let graph = finish_with(g, &y);
    assert_eq!(
        graph.ty(graph.outputs()[0].1).to_string(),
        "f16[batch, 16, 64]"
    );
    assert_eq!(
        graph.op_counts(),
        counts(&[
            ("input", 1),
            ("parameter", 4),
            ("matmul", 6),
            ("reshape", 4),
            ("permute", 5),
            // Causal mask: two aranges and the diagonal offset; then the scale and -inf.
            ("constant", 5),
            ("unsqueeze", 2),
            ("add", 2),
            ("le", 1),
            ("mul", 1),
            ("select", 1),
            ("reduce_max", 1),
            ("sub", 1),
            ("exp", 1),
            ("reduce_sum", 1),
            ("div", 1),
        ])
    );
    let select = nodes_named(&graph, "select")[0];
    assert_eq!(graph.ty(graph.operands(select)[0]), &tt!(Bool[seq, seq]));
    assert_eq!(graph.ty(select), &tt!(F16["batch", heads, seq, seq]));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Composites
// ---------------------------------------------------------------------------------------------

/// A builder with an input `x` of type `t` named as an output, so `peek` works.
fn builder_with(t: TensorType) -> (GraphBuilder, Tensor) {
    let g = GraphBuilder::new();
    let x = g.input("x", t.dtype, t.shape).unwrap();
    g.output("x", &x).unwrap();
    (g, x)
}

#[test]
fn softmax_expansion() -> R {
    for axis in [0, 1] {
        let (g, x) = builder_with(tt!(F32["rows", 10]));
        let y = x.softmax(axis)?;
        assert_eq!(y.ty(), tt!(F32["rows", 10]));
        let graph = peek(&g);
        assert_eq!(
            graph.op_counts(),
            counts(&[
                ("input", 1),
                ("reduce_max", 1),
                ("sub", 1),
                ("exp", 1),
                ("reduce_sum", 1),
                ("div", 1)
            ])
        );
        for name in ["reduce_max", "reduce_sum"] {
            let id = nodes_named(&graph, name)[0];
            assert!(matches!(
                &graph.node(id).op,
                Op::Reduce { axes, keepdims: true, .. } if axes == &[axis]
            ));
        }
        assert_eq!(graph.node(y.id()).op.name(), "div");
    }
    Ok(())
}

#[test]
fn log_softmax_expansion() -> R {
    let (g, x) = builder_with(tt!(F16[2, 3, 5]));
    let y = x.log_softmax(2)?;
    assert_eq!(y.ty(), tt!(F16[2, 3, 5]));
    assert_eq!(
        peek(&g).op_counts(),
        counts(&[
            ("input", 1),
            ("reduce_max", 1),
            ("sub", 2),
            ("exp", 1),
            ("reduce_sum", 1),
            ("log", 1)
        ])
    );
    Ok(())
}

#[test]
fn layer_norm_expansion() -> R {
    let (g, x) = builder_with(tt!(F32["tokens", 64]));
    let gamma = g.parameter("gamma", DType::F32, shape![64])?;
    let beta = g.parameter("beta", DType::F32, shape![64])?;
    let y = x.layer_norm(&gamma, &beta, 1e-5)?;
    assert_eq!(y.ty(), tt!(F32["tokens", 64]));
    let graph = peek(&g);
    assert_eq!(
        graph.op_counts(),
        counts(&[
            ("input", 1),
            ("parameter", 2),
            ("reduce_mean", 2),
            ("sub", 1),
            ("mul", 3),
            ("add", 2),
            ("constant", 1),
            ("rsqrt", 1),
        ])
    );
    let eps = nodes_named(&graph, "constant")[0];
    assert_eq!(graph.ty(eps), &tt!(F32[]));
    assert_eq!(constant_values(&graph, eps), vec![f64::from(1e-5_f32)]);
    for id in nodes_named(&graph, "reduce_mean") {
        assert_eq!(
            graph.node(id).op,
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![1],
                keepdims: true
            }
        );
    }
    assert_eq!(graph.node(y.id()).op.name(), "add");
    assert_eq!(graph.operands(y.id())[1], beta.id());
    Ok(())
}

#[test]
fn rms_norm_expansion() -> R {
    let (g, x) = builder_with(tt!(BF16[1, "seq", 32]));
    let gamma = g.parameter("gamma", DType::BF16, shape![32])?;
    let y = x.rms_norm(&gamma, 1e-6)?;
    assert_eq!(y.ty(), tt!(BF16[1, "seq", 32]));
    let graph = peek(&g);
    assert_eq!(
        graph.op_counts(),
        counts(&[
            ("input", 1),
            ("parameter", 1),
            ("mul", 3),
            ("reduce_mean", 1),
            ("constant", 1),
            ("add", 1),
            ("rsqrt", 1),
        ])
    );
    let eps = nodes_named(&graph, "constant")[0];
    assert_eq!(
        constant_values(&graph, eps),
        vec![DType::BF16.round_value(1e-6)]
    );
    assert_eq!(graph.operands(y.id())[1], gamma.id());
    Ok(())
}

#[test]
fn linear_with_and_without_bias() -> R {
    let (g, x) = builder_with(tt!(F32["batch", 8]));
    let w = g.parameter("w", DType::F32, shape![8, 3])?;
    let b = g.parameter("b", DType::F32, shape![3])?;
    let y = x.linear(&w, Some(&b))?;
    assert_eq!(y.ty(), tt!(F32["batch", 3]));
    assert_eq!(
        peek(&g).op_counts(),
        counts(&[("input", 1), ("parameter", 2), ("matmul", 1), ("add", 1)])
    );
    let (g, x) = builder_with(tt!(F32["batch", 8]));
    let w = g.parameter("w", DType::F32, shape![8, 3])?;
    let y = x.linear(&w, None)?;
    assert_eq!(y.ty(), tt!(F32["batch", 3]));
    assert_eq!(
        peek(&g).op_counts(),
        counts(&[("input", 1), ("parameter", 1), ("matmul", 1)])
    );
    Ok(())
}

/// q `[2, 4, 8, 16]`, k `[2, 4, 10, 16]`, v `[2, 4, 10, 32]`.
fn qkv() -> (GraphBuilder, Tensor, Tensor, Tensor) {
    let (g, q) = builder_with(tt!(F32[2, 4, 8, 16]));
    let k = g.input("k", DType::F32, shape![2, 4, 10, 16]).unwrap();
    let v = g.input("v", DType::F32, shape![2, 4, 10, 32]).unwrap();
    (g, q, k, v)
}

fn softmax_counts() -> [(&'static str, usize); 5] {
    [
        ("reduce_max", 1),
        ("sub", 1),
        ("exp", 1),
        ("reduce_sum", 1),
        ("div", 1),
    ]
}

#[test]
fn attention_without_a_mask() -> R {
    let (g, q, k, v) = qkv();
    let y = q.attention(&k, &v, false)?;
    assert_eq!(y.ty(), tt!(F32[2, 4, 8, 32]));
    let graph = peek(&g);
    let mut expected = counts(&[
        ("input", 3),
        ("permute", 1),
        ("matmul", 2),
        ("constant", 1),
        ("mul", 1),
    ]);
    expected.extend(softmax_counts());
    assert_eq!(graph.op_counts(), expected);
    // The scale is 1/sqrt(head_dim).
    let scale = nodes_named(&graph, "constant")[0];
    assert_eq!(constant_values(&graph, scale), vec![0.25]);
    // k is transposed over its last two axes.
    let kt = nodes_named(&graph, "permute")[0];
    assert_eq!(graph.ty(kt), &tt!(F32[2, 4, 16, 10]));
    assert_eq!(graph.node(y.id()).op, Op::MatMul);
    assert_eq!(graph.operands(y.id())[1], v.id());
    // attention_masked without a mask is the same expansion.
    let (g2, q2, k2, v2) = qkv();
    q2.attention_masked(&k2, &v2, None)?;
    assert_eq!(peek(&g2), graph);
    Ok(())
}

#[test]
fn causal_attention() -> R {
    let (g, q, k, v) = qkv();
    let y = q.attention(&k, &v, true)?;
    assert_eq!(y.ty(), tt!(F32[2, 4, 8, 32]));
    let graph = peek(&g);
    let mut expected = counts(&[
        ("input", 3),
        ("constant", 5),
        ("unsqueeze", 2),
        ("add", 1),
        ("le", 1),
        ("permute", 1),
        ("matmul", 2),
        ("mul", 1),
        ("select", 1),
    ]);
    expected.extend(softmax_counts());
    assert_eq!(graph.op_counts(), expected);
    // The mask is `key j <= query i + (s_k - s_q)`: cols [1, 10] <= rows [8, 1].
    let le = nodes_named(&graph, "le")[0];
    assert_eq!(graph.ty(le), &tt!(Bool[8, 10]));
    let [cols, rows] = graph.operands(le)[..] else {
        panic!("le takes two operands")
    };
    assert_eq!(graph.ty(cols), &tt!(I64[1, 10]));
    assert_eq!(graph.ty(rows), &tt!(I64[8, 1]));
    let consts: Vec<Vec<f64>> = nodes_named(&graph, "constant")
        .into_iter()
        .map(|c| constant_values(&graph, c))
        .collect();
    let range = |n: u64| (0..n).map(|i| i as f64).collect::<Vec<_>>();
    assert!(consts.contains(&range(8)));
    assert!(consts.contains(&range(10)));
    assert!(consts.contains(&vec![2.0]), "the diagonal offset s_k - s_q");
    assert!(consts.contains(&vec![0.25]));
    assert!(consts.contains(&vec![f64::NEG_INFINITY]));
    // Masked scores are -inf: select(mask, scores, -inf).
    let select = nodes_named(&graph, "select")[0];
    let ops = graph.operands(select);
    assert_eq!(ops[0], le);
    assert_eq!(constant_values(&graph, ops[2]), vec![f64::NEG_INFINITY]);
    Ok(())
}

#[test]
fn causal_mask_directly() -> R {
    let (g, _) = builder_with(tt!(F32[1]));
    let m = g.causal_mask(3, 5)?;
    assert_eq!(m.ty(), tt!(Bool[3, 5]));
    let square = g.causal_mask(4, 4)?;
    assert_eq!(square.ty(), tt!(Bool[4, 4]));
    let graph = peek(&g);
    assert_eq!(graph.op_counts()["le"], 2);
    // The square mask's offset is 0.
    let add = graph.operands(square.id())[1];
    assert_eq!(constant_values(&graph, graph.operands(add)[1]), vec![0.0]);
    Ok(())
}

#[test]
fn attention_with_an_explicit_mask() -> R {
    let (g, q, k, v) = qkv();
    let mask = g.input("mask", DType::Bool, shape![2, 1, 8, 10])?;
    let y = q.attention_masked(&k, &v, Some(&mask))?;
    assert_eq!(y.ty(), tt!(F32[2, 4, 8, 32]));
    let mut expected = counts(&[
        ("input", 4),
        ("permute", 1),
        ("matmul", 2),
        ("constant", 2),
        ("mul", 1),
        ("select", 1),
    ]);
    expected.extend(softmax_counts());
    assert_eq!(peek(&g).op_counts(), expected);
    // A mask that broadcasts over the keys only.
    let key_mask = g.input("key_mask", DType::Bool, shape![10])?;
    assert_eq!(
        q.attention_masked(&k, &v, Some(&key_mask))?.ty(),
        tt!(F32[2, 4, 8, 32])
    );
    Ok(())
}

#[test]
fn attention_with_symbolic_sequences() -> R {
    let (g, q) = builder_with(tt!(F32["b", 4, "seq", 16]));
    let k = g.input("k", DType::F32, shape!["b", 4, "seq", 16])?;
    let v = g.input("v", DType::F32, shape!["b", 4, "seq", 16])?;
    assert_eq!(
        q.attention(&k, &v, false)?.ty(),
        tt!(F32["b", 4, "seq", 16])
    );
    // A causal mask over symbolic lengths counts its positions at run time.
    let square = q.attention(&k, &v, true)?;
    assert_eq!(square.ty(), tt!(F32["b", 4, "seq", 16]));
    let q1 = g.input("q1", DType::F32, shape!["b", 4, 1, 16])?;
    assert_eq!(q1.attention(&k, &v, true)?.ty(), tt!(F32["b", 4, 1, 16]));
    assert!(peek(&g).op_counts()["iota"] >= 2);
    // A tensor of rank 1 has no sequence axis.
    let flat = g.input("flat", DType::F32, shape![16])?;
    let e = flat.attention(&flat, &flat, true).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "node {}: causal attention needs a sequence axis (rank 2 or more), got f32[16]",
            flat.id()
        )
    );
    Ok(())
}

/// The causal mask over symbolic lengths has, at every binding, the values of the static one.
#[test]
fn symbolic_causal_mask_matches_the_static_one() -> Result<(), Box<dyn std::error::Error>> {
    use tir_graph::eval::F64Tensor;
    for (q_len, k_len) in [(3u64, 5u64), (4, 4), (1, 6)] {
        let g = GraphBuilder::new();
        let q = g.input("q", DType::F32, shape!["q", 1])?;
        let k = g.input("k", DType::F32, shape!["k", 1])?;
        let mask = g.causal_mask(q.shape().dims()[0].clone(), k.shape().dims()[0].clone())?;
        g.output("m", &mask.cast(DType::F32)?)?;
        let graph = g.finish()?;
        let sources: BTreeMap<String, F64Tensor> = [("q", q_len), ("k", k_len)]
            .into_iter()
            .map(|(name, n)| {
                let t = F64Tensor::new(DType::F32, vec![n, 1], vec![0.5; n as usize]);
                t.map(|t| (name.to_string(), t))
            })
            .collect::<Result<_, _>>()?;
        let got = tir_graph::eval::evaluate(&graph, &sources)?;
        let want: Vec<f64> = (0..q_len)
            .flat_map(|i| (0..k_len).map(move |j| f64::from(u8::from(j + q_len <= i + k_len))))
            .collect();
        assert_eq!(got.outputs["m"].data, want, "q {q_len}, k {k_len}");
    }
    Ok(())
}

#[test]
fn attention_with_a_symbolic_head_dim_is_refused() {
    let (g, q) = builder_with(tt!(F32[8, "d"]));
    let k = g.input("k", DType::F32, shape![8, "d"]).unwrap();
    let v = g.input("v", DType::F32, shape![8, "d"]).unwrap();
    let len = peek(&g).len();
    let r = q.attention(&k, &v, false);
    assert!(
        r.is_err(),
        "unscaled attention was built: {:?}",
        peek(&g)
            .node_ids()
            .filter_map(|id| match &peek(&g).node(id).op {
                Op::Constant { data } => data.get_f64(0),
                _ => None,
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(peek(&g).len(), len);
}

// ---------------------------------------------------------------------------------------------
// Failed composites roll back
// ---------------------------------------------------------------------------------------------

/// Runs `f`, which must fail, and checks the graph is unchanged, then that the builder still
/// works (the next node gets the next id) and the graph verifies.
#[track_caller]
fn assert_rolls_back(
    g: &GraphBuilder,
    f: impl FnOnce() -> Result<Tensor, GraphError>,
) -> GraphError {
    let before = peek(g);
    let e = f().expect_err("the composite should fail");
    let after = peek(g);
    assert_eq!(after.len(), before.len(), "{e}");
    assert_eq!(after, before);
    let next = g.scalar(DType::F32, 1.0).unwrap();
    assert_eq!(next.id().index(), before.len());
    peek(g).verify().unwrap();
    e
}

#[test]
fn failed_layer_norm_leaves_the_graph_unchanged() -> R {
    let (g, x) = builder_with(tt!(F32["tokens", 64]));
    let gamma = g.parameter("gamma", DType::F32, shape![32])?;
    let beta = g.parameter("beta", DType::F32, shape![64])?;
    let e = assert_rolls_back(&g, || x.layer_norm(&gamma, &beta, 1e-5));
    // The failing node is numbered as if the composite's earlier nodes were there.
    let msg = e.to_string();
    assert!(
        msg.ends_with(
            "mul(f32[tokens, 64], f32[32]): shapes [tokens, 64] and [32] do not broadcast: \
             dim 64 vs 32"
        ),
        "{msg}"
    );
    // A wrong beta fails at the very last node.
    let gamma64 = g.parameter("gamma64", DType::F32, shape![64])?;
    let beta_f16 = g.parameter("beta_f16", DType::F16, shape![64])?;
    let e = assert_rolls_back(&g, || x.layer_norm(&gamma64, &beta_f16, 1e-5));
    assert!(e
        .to_string()
        .ends_with("dtypes f32 and f16 differ (cast one first)"));
    // An int input fails at the first node.
    let i = g.input("i", DType::I32, shape![4])?;
    assert_rolls_back(&g, || i.layer_norm(&gamma64, &beta, 1e-5));
    // A scalar has no last axis to normalize.
    let s = g.input("s", DType::F32, shape![])?;
    let e = assert_rolls_back(&g, || s.layer_norm(&gamma64, &beta, 1e-5));
    assert!(
        e.to_string().ends_with("axis 0 is out of range for rank 0"),
        "{e}"
    );
    Ok(())
}

#[test]
fn other_failed_composites_leave_the_graph_unchanged() -> R {
    let (g, x) = builder_with(tt!(F32[4, 8]));
    let i = g.input("i", DType::I32, shape![4, 8])?;
    let gamma16 = g.parameter("gamma16", DType::F16, shape![8])?;
    let w = g.parameter("w", DType::F32, shape![8, 3])?;
    let bad_b = g.parameter("bad_b", DType::F32, shape![4, 1, 2])?;
    let int_mask = g.input("int_mask", DType::I32, shape![4, 4])?;
    let wide_mask = g.input("wide_mask", DType::Bool, shape![5, 4])?;
    let v_short = g.input("v_short", DType::F32, shape![3, 8])?;

    // softmax/log_softmax of ints fail at exp, after max and sub.
    assert_rolls_back(&g, || i.softmax(1));
    assert_rolls_back(&g, || i.log_softmax(1));
    assert_rolls_back(&g, || x.softmax(2));
    assert_rolls_back(&g, || x.rms_norm(&gamma16, 1e-6));
    assert_rolls_back(&g, || x.linear(&w, Some(&bad_b)));
    assert_rolls_back(&g, || x.linear(&x, None));
    // Attention failing after the mask was built, at the select, or at the final matmul.
    assert_rolls_back(&g, || x.attention(&x, &v_short, true));
    assert_rolls_back(&g, || x.attention(&x, &v_short, false));
    assert_rolls_back(&g, || x.attention_masked(&x, &x, Some(&int_mask)));
    assert_rolls_back(&g, || x.attention_masked(&x, &x, Some(&wide_mask)));
    assert_rolls_back(&g, || i.attention(&i, &i, true));
    // A causal mask too long for a constant.
    let e = assert_rolls_back(&g, || g.causal_mask(70000, 70000));
    assert!(
        e.to_string().contains("exceed the constant limit 65536"),
        "{e}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Foreign tensors, names, finish
// ---------------------------------------------------------------------------------------------

#[test]
fn tensors_from_another_builder_are_refused() -> R {
    let (g, a) = builder_with(tt!(F32[4]));
    let other = GraphBuilder::new();
    let f = other.input("f", DType::F32, shape![4])?;
    let pos = other.input("pos", DType::I64, shape![])?;
    let before = peek(&g);

    let e = (&a + &f).unwrap_err();
    assert_eq!(e, GraphError::ForeignTensor);
    assert_eq!(
        e.to_string(),
        "a tensor from another graph builder was used with this one"
    );
    assert_eq!((&f * &a).unwrap_err(), GraphError::ForeignTensor);
    assert_eq!(a.matmul(&f).unwrap_err(), GraphError::ForeignTensor);
    assert_eq!(g.output("f", &f).unwrap_err(), GraphError::ForeignTensor);
    assert_eq!(
        g.concat(&[&a, &f], 0).unwrap_err(),
        GraphError::ForeignTensor
    );
    assert_eq!(g.concat(&[&f], 0).unwrap_err(), GraphError::ForeignTensor);
    let cond = other.input("cond", DType::Bool, shape![4])?;
    assert_eq!(cond.select(&a, &a).unwrap_err(), GraphError::ForeignTensor);
    assert_eq!(
        a.layer_norm(&f, &f, 1e-5).unwrap_err(),
        GraphError::ForeignTensor
    );
    assert_eq!(a.linear(&f, None).unwrap_err(), GraphError::ForeignTensor);
    let s = g.state("s", DType::F32, shape![4])?;
    assert_eq!(s.assign(&f).unwrap_err(), GraphError::ForeignTensor);
    assert_eq!(
        s.write_slice_at(&a, 0, &pos).unwrap_err(),
        GraphError::ForeignTensor
    );
    let q = g.input("q", DType::F32, shape![2, 4])?;
    let m = other.input("m", DType::Bool, shape![2, 2])?;
    assert_eq!(
        q.attention_masked(&q, &q, Some(&m)).unwrap_err(),
        GraphError::ForeignTensor
    );
    // Nothing but the two sources reached this builder's graph; nothing reached the other's.
    let after = peek(&g);
    assert_eq!(after.len(), before.len() + 2);
    other.output("f", &f)?;
    assert_eq!(peek(&other).len(), 4);
    Ok(())
}

#[test]
fn failed_attention_with_a_foreign_key_leaves_both_graphs_unchanged() {
    let (g, q) = builder_with(tt!(F32[2, 4]));
    let other = GraphBuilder::new();
    let k = other.input("k", DType::F32, shape![2, 4]).unwrap();
    other.output("k", &k).unwrap();
    let (g_before, other_before) = (peek(&g), peek(&other));
    for causal in [false, true] {
        assert_eq!(
            q.attention(&k, &k, causal).unwrap_err(),
            GraphError::ForeignTensor
        );
        assert_eq!(peek(&g), g_before);
        assert_eq!(peek(&other), other_before, "causal: {causal}");
    }
}

#[test]
fn finish_needs_a_result() -> R {
    let e = GraphBuilder::new().finish().unwrap_err();
    assert_eq!(e, GraphError::NoResults);
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![2])?;
    x.exp()?;
    let e = g.clone().finish().unwrap_err();
    assert_eq!(e, GraphError::NoResults);
    assert_eq!(
        e.to_string(),
        "the graph computes nothing: it has no outputs and no state updates"
    );
    // A state update alone is a result.
    let s = g.state("s", DType::F32, shape![2])?;
    s.assign(&x)?;
    let graph = g.finish()?;
    assert!(graph.outputs().is_empty());
    assert_eq!(graph.state_updates().len(), 1);
    Ok(())
}

#[test]
fn duplicate_and_empty_names_are_refused() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![2])?;
    let e = g.input("x", DType::F32, shape![2]).unwrap_err();
    assert_eq!(
        e,
        GraphError::DuplicateName {
            kind: "source",
            name: "x".into(),
            first: "%0 (input)".into(),
            second: "%1 (input)".into(),
        }
    );
    assert_eq!(
        e.to_string(),
        "source name `x` is used by %0 (input) and %1 (input)"
    );
    assert_eq!(
        g.parameter("x", DType::F16, shape![])
            .unwrap_err()
            .to_string(),
        "source name `x` is used by %0 (input) and %1 (parameter)"
    );
    assert_eq!(
        g.state("x", DType::F32, shape![2]).unwrap_err().to_string(),
        "source name `x` is used by %0 (input) and %1 (state)"
    );
    let w = g.parameter("w", DType::F32, shape![2])?;
    assert_eq!(
        g.input("w", DType::F32, shape![2]).unwrap_err().to_string(),
        "source name `w` is used by %1 (parameter) and %2 (input)"
    );
    assert_eq!(
        g.input("", DType::F32, shape![2]).unwrap_err().to_string(),
        "node %2: input(): declared f32[2]: the name is empty"
    );
    g.output("y", &x)?;
    let e = g.output("y", &w).unwrap_err();
    assert_eq!(e.to_string(), "output name `y` is used by %0 and %1");
    assert_eq!(g.output("", &w).unwrap_err(), GraphError::EmptyOutputName);
    assert_eq!(
        g.output("", &w).unwrap_err().to_string(),
        "output name is empty"
    );
    // One tensor may be output under two names, and an output may share a source's name.
    g.output("y2", &x)?;
    g.output("x", &x)?;
    let graph = g.finish()?;
    assert_eq!(graph.outputs().len(), 3);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// States
// ---------------------------------------------------------------------------------------------

#[test]
fn state_assign() -> R {
    let g = GraphBuilder::new();
    let counter = g.state("counter", DType::I64, shape![])?;
    let next = (&counter + 1.0)?;
    let update = counter.assign(&next)?;
    assert_eq!(update.ty(), tt!(I64[]));
    g.output("count", &counter)?;
    let graph = peek(&g);
    assert_eq!(graph.state_updates(), vec![update.id()]);
    assert_eq!(graph.state_writer(counter.id()), Some(update.id()));
    assert_eq!(graph.states(), vec![("counter".to_string(), counter.id())]);
    assert_eq!(graph.node(update.id()).op, Op::StateAssign);
    assert_eq!(graph.operands(update.id()), vec![counter.id(), next.id()]);

    // A second write is refused, naming both writers.
    let e = counter.assign(&counter).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "state `counter` is written by {} and %{}; a state is written at most once per run",
            update.id(),
            graph.len()
        )
    );
    // Types must match exactly: no broadcast, no cast.
    let s = g.state("s", DType::F32, shape![2, 3])?;
    let row = g.input("row", DType::F32, shape![3])?;
    assert_eq!(
        s.assign(&row).unwrap_err().to_string(),
        format!(
            "node %{}: state_assign(f32[2, 3], f32[3]): the value must have the state's type \
             f32[2, 3]",
            row.id().0 + 1
        )
    );
    let h = g.input("h", DType::F16, shape![2, 3])?;
    assert!(s.assign(&h).is_err());
    // Only states can be written.
    let e = row.assign(&row).unwrap_err();
    assert!(
        matches!(e, GraphError::NotAState { target, target_op: "input", .. } if target == row.id())
    );
    assert!(matches!(
        update.assign(&update).unwrap_err(),
        GraphError::NotAState {
            target_op: "state_assign",
            ..
        }
    ));
    Ok(())
}

#[test]
fn state_write_slice_at_fixed_starts() -> R {
    let g = GraphBuilder::new();
    let buf = g.state("buf", DType::F32, shape![8, 4])?;
    let rows = g.input("rows", DType::F32, shape![2, 4])?;
    let w = buf.write_slice(&rows, 0, 6)?;
    assert_eq!(w.ty(), tt!(F32[8, 4]));
    assert_eq!(
        peek(&g).node(w.id()).op,
        Op::StateWriteSlice {
            axis: 0,
            start: Some(6)
        }
    );
    let other = g.state("other", DType::F32, shape![8, 4])?;
    assert_eq!(
        other.write_slice(&rows, 0, 7).unwrap_err().to_string(),
        "node %4: state_write_slice(f32[8, 4], f32[2, 4]): writing 2 elements at offset 7 \
         overruns axis 0 of size 8"
    );
    let cols = g.input("cols", DType::F32, shape![8, 1])?;
    other.write_slice(&cols, 1, 3)?;
    let e = buf.write_slice(&rows, 0, 0).unwrap_err();
    assert!(
        matches!(e, GraphError::StateWrittenTwice { ref name, first, .. }
        if name == "buf" && first == w.id())
    );
    let graph = g.finish()?;
    assert_eq!(graph.state_updates().len(), 2);
    Ok(())
}

#[test]
fn kv_cache_append_at_a_runtime_position() -> R {
    let (heads, ctx, head_dim) = (4u64, 16u64, 8u64);
    let g = GraphBuilder::new();
    let q = g.input("q", DType::F16, shape![1, heads, 1, head_dim])?;
    let k_new = g.input("k", DType::F16, shape![1, heads, 1, head_dim])?;
    let v_new = g.input("v", DType::F16, shape![1, heads, 1, head_dim])?;
    let pos = g.input("pos", DType::I64, shape![])?;
    let cache_shape = shape![1, heads, ctx, head_dim];
    let k_cache = g.state("k_cache", DType::F16, cache_shape.clone())?;
    let v_cache = g.state("v_cache", DType::F16, cache_shape)?;

    let k_write = k_cache.write_slice_at(&k_new, 2, &pos)?;
    let v_write = v_cache.write_slice_at(&v_new, 2, &pos)?;
    assert_eq!(k_write.ty(), k_cache.ty());
    // Attend over the cache as it was at the start of the run plus the new token.
    let keys = g.concat(&[&k_cache, &k_new], 2)?;
    let values = g.concat(&[&v_cache, &v_new], 2)?;
    assert_eq!(keys.ty(), tt!(F16[1, heads, ctx + 1, head_dim]));
    let cached = g.arange(DType::I64, ctx)?.lt(&pos)?;
    let visible = g.concat(&[&cached, &g.constant(DType::Bool, shape![1], &[1.0])?], 0)?;
    assert_eq!(visible.ty(), tt!(Bool[17]));
    let y = q.attention_masked(&keys, &values, Some(&visible))?;
    assert_eq!(y.ty(), tt!(F16[1, heads, 1, head_dim]));
    let graph = finish_with(g.clone(), &y);
    assert_eq!(graph.op_counts()["state_write_slice"], 2);
    assert_eq!(graph.state_updates(), vec![k_write.id(), v_write.id()]);
    assert_eq!(graph.state_writer(k_cache.id()), Some(k_write.id()));
    assert_eq!(
        graph.operands(k_write.id()),
        vec![k_cache.id(), k_new.id(), pos.id()]
    );
    assert_eq!(
        graph.node(k_write.id()).op,
        Op::StateWriteSlice {
            axis: 2,
            start: None
        }
    );

    // The cache cannot be written again this run, by any update.
    let e = k_cache.assign(&k_cache).unwrap_err();
    assert_eq!(
        e,
        GraphError::StateWrittenTwice {
            name: "k_cache".into(),
            first: k_write.id(),
            second: NodeId(graph.len() as u32),
        }
    );
    assert!(k_cache.write_slice_at(&k_new, 2, &pos).is_err());
    assert!(k_cache.write_slice(&k_new, 2, 0).is_err());
    // An i32 position works; a float or non-scalar one does not.
    let s = g.state("s", DType::F16, shape![1, heads, ctx, head_dim])?;
    let pos_f = g.input("pos_f", DType::F32, shape![])?;
    let pos_v = g.input("pos_v", DType::I64, shape![1])?;
    assert!(s
        .write_slice_at(&k_new, 2, &pos_f)
        .unwrap_err()
        .to_string()
        .ends_with("the offset must be a scalar i32 or i64, got f32[]"));
    assert!(s
        .write_slice_at(&k_new, 2, &pos_v)
        .unwrap_err()
        .to_string()
        .ends_with("the offset must be a scalar i32 or i64, got i64[1]"));
    let pos32 = g.input("pos32", DType::I32, shape![])?;
    s.write_slice_at(&k_new, 2, &pos32)?;
    // A value longer than the cache overruns at any offset.
    let t = g.state("t", DType::F16, shape![1, heads, 1, head_dim])?;
    let two = g.input("two", DType::F16, shape![1, heads, 2, head_dim])?;
    assert!(t
        .write_slice_at(&two, 2, &pos)
        .unwrap_err()
        .to_string()
        .ends_with("writing 2 elements at some offset overruns axis 2 of size 1"));
    Ok(())
}
