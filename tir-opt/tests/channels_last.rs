//! The channels-last layout pass: values unchanged (f64 oracle on random inputs), convolutions
//! read and written channels-last, permutes only at the graph's boundary, and what fuses.

use std::collections::BTreeMap;
use tir_graph::eval::F64Tensor;
use tir_graph::{evaluate, shape, DType, Graph, GraphBuilder, Op, Tensor};
use tir_opt::channels_last::{channels_last, copy_conv_inputs, to_first, to_last};
use tir_opt::simplify::simplify;
use tir_opt::{optimize, FusedGraph, FusionTarget, KernelKind, Limits, OptOptions};

/// Random values for every input and parameter of `g` (static shapes).
fn sources(g: &Graph) -> BTreeMap<String, F64Tensor> {
    g.inputs()
        .into_iter()
        .chain(g.parameters())
        .enumerate()
        .map(|(i, (name, id))| {
            let ty = g.ty(id);
            let dims = ty
                .shape
                .dims()
                .iter()
                .map(|d| d.as_static().unwrap())
                .collect();
            (name, F64Tensor::random(ty.dtype, dims, 7 + i as u64))
        })
        .collect()
}

/// `before` and `after` compute the same outputs, exactly (the pass only renumbers elements).
fn assert_same_values(before: &Graph, after: &Graph) {
    let s = sources(before);
    let (a, b) = (evaluate(before, &s).unwrap(), evaluate(after, &s).unwrap());
    assert!(!a.outputs.is_empty());
    for (name, want) in &a.outputs {
        let got = &b.outputs[name];
        assert_eq!(got.dims, want.dims, "{name}");
        assert!(want.data.iter().any(|v| *v != 0.0), "{name}: all zeros");
        assert!(
            want.data.iter().all(|v| v.is_finite()),
            "{name}: not finite"
        );
        assert_eq!(got.data, want.data, "{name}");
    }
}

fn conv_bias_relu(x: &Tensor, g: &GraphBuilder, name: &str, c: u64, o: u64) -> Tensor {
    let dtype = x.ty().dtype;
    let w = g
        .parameter(&format!("{name}.w"), dtype, shape![o, c, 3, 3])
        .unwrap();
    let b = g.parameter(&format!("{name}.b"), dtype, shape![o]).unwrap();
    let y = x.conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], 1).unwrap();
    let bias = b.reshape(&[o.into(), 1.into(), 1.into()]).unwrap();
    (&y + &bias).unwrap().relu().unwrap()
}

fn permutes(g: &Graph) -> Vec<Vec<usize>> {
    g.node_ids()
        .filter_map(|id| match &g.node(id).op {
            Op::Permute { perm } => Some(perm.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_conv_chain_stays_channels_last_between_convolutions() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![2, 4, 6, 6]).unwrap();
    let y = conv_bias_relu(&x, &g, "c1", 4, 8);
    let y = conv_bias_relu(&y, &g, "c2", 8, 8);
    g.output("y", &y).unwrap();
    let graph = g.finish().unwrap();
    let relaid = channels_last(&graph).unwrap();
    assert_same_values(&graph, &relaid);
    let (simplified, _) = simplify(&relaid, &Limits::default()).unwrap();
    assert_same_values(&graph, &simplified);
    // Each conv writes channels-last; the second reads its input back through one permute;
    // the output leaves once. The first conv reads the graph's input as it lies.
    let (last, first) = (to_last(4), to_first(4));
    let mut found = permutes(&simplified);
    found.sort();
    let mut want = vec![last.clone(), last, first.clone(), first];
    want.sort();
    assert_eq!(found, want);
}

#[test]
fn batchnorm_residual_and_pool_compute_channels_last() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![2, 4, 5, 5]).unwrap();
    let y = conv_bias_relu(&x, &g, "c1", 4, 4);
    // The ONNX importer's BatchNorm: (y - mean) * (rsqrt(var + eps) * scale) + bias on [C, 1, 1].
    let p = |n: &str| g.parameter(n, DType::F32, shape![4, 1, 1]).unwrap();
    let (mean, var, scale, bias) = (p("mean"), p("var"), p("scale"), p("bias"));
    // A variance squared: positive, so that no value is NaN.
    let var = (&var * &var).unwrap();
    let inv = var.add_scalar(1e-5).unwrap().rsqrt().unwrap();
    let factor = (&inv * &scale).unwrap();
    let normed = (&(&y - &mean).unwrap() * &factor).unwrap();
    let normed = (&normed + &bias).unwrap();
    // A residual from the graph's input, and a global average pool.
    let out = (&normed + &x).unwrap().relu().unwrap();
    g.output("y", &out).unwrap();
    g.output("pooled", &out.sum(&[2, 3], false).unwrap())
        .unwrap();
    let graph = g.finish().unwrap();
    let relaid = channels_last(&graph).unwrap();
    assert_same_values(&graph, &relaid);
    // Only the residual's input comes in permuted, and only `y` goes out: the pool reads the
    // channels-last value.
    let (simplified, _) = simplify(&relaid, &Limits::default()).unwrap();
    assert_same_values(&graph, &simplified);
    let mut found = permutes(&simplified);
    found.sort();
    let mut want = vec![to_last(4), to_last(4), to_first(4)];
    want.sort();
    assert_eq!(found, want);
}

#[test]
fn a_graph_without_convolutions_is_unchanged() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape![2, 4, 5, 5]).unwrap();
    g.output("y", &x.relu().unwrap()).unwrap();
    let graph = g.finish().unwrap();
    let relaid = channels_last(&graph).unwrap();
    assert_eq!(relaid.len(), graph.len());
}

#[test]
fn each_conv_kernel_reads_and_writes_through_its_permutes() {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![2, 8, 6, 6]).unwrap();
    let y = conv_bias_relu(&x, &g, "c1", 8, 8);
    let y = conv_bias_relu(&y, &g, "c2", 8, 8);
    g.output("y", &y).unwrap();
    let (fused, _) = optimize(&g.finish().unwrap(), &OptOptions::default()).unwrap();
    fused.verify().unwrap();
    // The first conv reads a channels-last copy of the graph's input, made by a layout kernel;
    // both store channels-last, and a layout kernel permutes the output back.
    use KernelKind::{Conv, Layout};
    assert_eq!(kinds(&fused), [Layout, Conv, Conv, Layout]);
    assert_eq!(ops(&fused, 0), ["permute"]);
    for k in [1, 2] {
        assert_eq!(
            ops(&fused, k),
            ["permute", "conv", "permute", "add", "relu"]
        );
    }
    assert_eq!(ops(&fused, 3), ["permute"]);
}

fn kinds(fused: &FusedGraph) -> Vec<KernelKind> {
    fused.kernels.iter().map(|k| k.kind).collect()
}

fn ops(fused: &FusedGraph, k: usize) -> Vec<&'static str> {
    let members = &fused.kernels[k].members;
    members
        .iter()
        .map(|&m| fused.graph.node(m).op.name())
        .collect()
}

/// One NCHW conv with its bias and ReLU, its input computed by `input` from a graph input.
fn lone_conv(input: impl Fn(&Tensor) -> Tensor, channels: u64, groups: u64) -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![2, channels, 6, 6]).unwrap();
    let x = input(&x);
    let w = g
        .parameter("w", DType::F16, shape![channels, channels / groups, 3, 3])
        .unwrap();
    let b = g.parameter("b", DType::F16, shape![channels]).unwrap();
    let y = x
        .conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], groups)
        .unwrap();
    let bias = b.reshape(&[channels.into(), 1.into(), 1.into()]).unwrap();
    g.output("y", &(&y + &bias).unwrap().relu().unwrap())
        .unwrap();
    g.finish().unwrap()
}

#[test]
fn a_lone_nchw_conv_computes_channels_last_between_two_layout_kernels() {
    let graph = lone_conv(|x| x.clone(), 8, 1);
    let relaid = channels_last(&graph).unwrap();
    let (simplified, _) = simplify(&relaid, &Limits::default()).unwrap();
    let copied = copy_conv_inputs(&simplified).unwrap();
    assert_same_values(&graph, &copied);
    let (fused, _) = optimize(&graph, &OptOptions::default()).unwrap();
    fused.verify().unwrap();
    use KernelKind::{Conv, Layout};
    assert_eq!(kinds(&fused), [Layout, Conv, Layout]);
    // The copy's permute to channels-last, the conv reading it back and storing channels-last
    // (cuDNN's fast engines write NHWC), and the permute back to the graph's layout.
    let perm_of = |k: usize| &fused.graph.node(fused.kernels[k].root).op;
    assert_eq!(*perm_of(0), Op::Permute { perm: to_last(4) });
    assert_eq!(
        ops(&fused, 1),
        ["permute", "conv", "permute", "add", "relu"]
    );
    assert_eq!(*perm_of(2), Op::Permute { perm: to_first(4) });
}

#[test]
fn the_copy_of_a_conv_input_fuses_into_the_kernel_that_computes_it() {
    let graph = lone_conv(|x| x.sigmoid().unwrap(), 8, 1);
    let (fused, _) = optimize(&graph, &OptOptions::default()).unwrap();
    fused.verify().unwrap();
    use KernelKind::{Conv, Elementwise, Layout};
    assert_eq!(kinds(&fused), [Elementwise, Conv, Layout]);
    assert_eq!(ops(&fused, 0), ["sigmoid", "permute"]);
}

#[test]
fn depthwise_convs_and_backends_that_ask_no_copy_read_their_input_as_it_lies() {
    let depthwise = lone_conv(|x| x.clone(), 8, 8);
    let (fused, _) = optimize(&depthwise, &OptOptions::default()).unwrap();
    assert_eq!(kinds(&fused), [KernelKind::Conv]);
    let no_copy = OptOptions {
        target: FusionTarget {
            conv_inputs_channels_last: false,
            ..FusionTarget::default()
        },
        ..OptOptions::default()
    };
    let (fused, _) = optimize(&lone_conv(|x| x.clone(), 8, 1), &no_copy).unwrap();
    assert_eq!(kinds(&fused), [KernelKind::Conv]);
    assert_eq!(ops(&fused, 0)[0], "conv");
}
