//! Round trips of hand-built graphs through both file forms: the binary `.tir` file
//! (`encode`/`decode`, `write`/`read`) and the text form (`print`/`parse`). Each graph must come
//! back equal (`==` compares constants and pad values bit for bit) and verified.
//!
//! The property tests over random graphs (every generated graph round-trips through both forms,
//! and the generator covers every op) are unit tests in `src/testing.rs`, next to the strategies,
//! so that they run without enabling the `testing` feature.

use tir_graph::op::{ConstData, ExactF64};
use tir_graph::{
    file, models, shape, text, BinaryOp, DType, Dim, Graph, GraphBuilder, NodeId, Op, ReduceOp,
    ReshapeDim, Shape, SliceRange, TensorType, UnaryOp,
};

/// Checks every round trip of `graph` and returns its text form.
fn assert_round_trips(graph: &Graph) -> String {
    graph.verify().unwrap();
    let bytes = file::encode(graph);
    let decoded = file::decode(&bytes).unwrap();
    assert_eq!(&decoded, graph, "binary round trip");
    assert_eq!(
        file::encode(&decoded),
        bytes,
        "binary encoding is deterministic"
    );

    let listing = text::print(graph);
    let parsed = text::parse(&listing).unwrap_or_else(|e| panic!("{e}\n{listing}"));
    assert!(
        &parsed == graph,
        "text round trip changed the graph:\n{listing}"
    );
    assert_eq!(text::print(&parsed), listing, "printing is deterministic");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.tir");
    file::write(&path, graph).unwrap();
    assert_eq!(&file::read(&path).unwrap(), graph, "on-disk round trip");
    listing
}

fn add(g: &mut Graph, op: Op, operands: &[NodeId]) -> NodeId {
    g.add_node(op, operands, None)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn source(g: &mut Graph, op: Op, dtype: DType, shape: Shape) -> NodeId {
    g.add_node(op, &[], Some(TensorType::new(dtype, shape)))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn input(g: &mut Graph, name: &str, dtype: DType, shape: Shape) -> NodeId {
    let name = name.to_string();
    source(g, Op::Input { name }, dtype, shape)
}

fn constant(g: &mut Graph, dtype: DType, shape: Shape, data: ConstData) -> NodeId {
    source(g, Op::Constant { data }, dtype, shape)
}

fn floats(values: &[f64]) -> ConstData {
    ConstData::Float(values.iter().map(|&v| ExactF64(v)).collect())
}

#[test]
fn model_examples_round_trip() {
    for (name, graph) in models::examples().unwrap() {
        let listing = assert_round_trips(&graph);
        assert!(listing.starts_with(text::HEADER), "{name}");
    }
}

#[test]
fn special_float_constants_round_trip_bit_for_bit() {
    let mut g = Graph::new();
    let payload_nan = f64::from_bits(0x7ff0_0000_0000_0001);
    let negative_nan = -f64::NAN;
    let f64_values = [
        f64::NAN,
        negative_nan,
        payload_nan,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
        5e-324,
        -f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
        0.1,
        1.0 / 3.0,
        9_007_199_254_740_993.0,
    ];
    let c64 = constant(
        &mut g,
        DType::F64,
        Shape::of(&[f64_values.len() as u64]),
        floats(&f64_values),
    );
    let mut outputs = vec![c64];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let rounded: Vec<f64> = f64_values
            .iter()
            .map(|&v| if v.is_nan() { v } else { dtype.round_value(v) })
            .collect();
        let c = constant(
            &mut g,
            dtype,
            Shape::of(&[rounded.len() as u64]),
            floats(&rounded),
        );
        outputs.push(c);
    }
    // Subnormals of each float dtype.
    let tiny = [
        (DType::F16, 2f64.powi(-24)),
        (DType::BF16, 2f64.powi(-133)),
        (DType::F32, 2f64.powi(-149)),
    ];
    for (dtype, v) in tiny {
        assert_eq!(dtype.round_value(v), v);
        outputs.push(constant(&mut g, dtype, Shape::of(&[2]), floats(&[v, -v])));
    }
    // Pad values: NaN with a payload, -0.0, -inf.
    let x = input(&mut g, "x", DType::F32, shape![2]);
    for value in [payload_nan, -0.0, f64::NEG_INFINITY] {
        let pads = vec![(1, 2)];
        outputs.push(add(
            &mut g,
            Op::Pad {
                pads,
                value: ExactF64(value),
            },
            &[x],
        ));
    }
    for (i, id) in outputs.into_iter().enumerate() {
        g.add_output(&format!("c{i}"), id).unwrap();
    }
    assert_round_trips(&g);
}

#[test]
fn integer_and_bool_constants_round_trip_at_their_extremes() {
    let mut g = Graph::new();
    let cases = [
        (DType::I8, vec![i8::MIN.into(), i8::MAX.into(), 0, -1]),
        (DType::U8, vec![0, u8::MAX.into(), 1, 128]),
        (DType::I32, vec![i32::MIN.into(), i32::MAX.into(), 0, -1]),
        (
            DType::I64,
            vec![i64::MIN, i64::MAX, (1 << 53) + 1, -((1 << 53) + 1)],
        ),
    ];
    let mut outputs = Vec::new();
    for (dtype, values) in cases {
        outputs.push(constant(
            &mut g,
            dtype,
            shape![2, 2],
            ConstData::Int(values),
        ));
    }
    outputs.push(constant(
        &mut g,
        DType::Bool,
        shape![3],
        ConstData::Bool(vec![true, false, true]),
    ));
    outputs.push(constant(
        &mut g,
        DType::Bool,
        shape![0],
        ConstData::Bool(vec![]),
    ));
    outputs.push(constant(
        &mut g,
        DType::I64,
        shape![],
        ConstData::Int(vec![i64::MIN]),
    ));
    for (i, id) in outputs.into_iter().enumerate() {
        g.add_output(&format!("c{i}"), id).unwrap();
    }
    assert_round_trips(&g);
}

#[test]
fn odd_names_round_trip() {
    let names = [
        "a b",
        "quote\"inside",
        "back\\slash",
        "new\nline",
        "tab\there",
        "cr\r",
        "nul\0byte",
        "%0",
        "# not a comment",
        "output \"y\" = %0",
        "{axes = [1]}",
        "é 名前 🦀",
        "\u{200b}zero-width",
        "\u{1b}[31mred\u{1b}[0m",
        "\u{7f}",
        "input",
        "NaN",
        "-1",
        " ",
        "'single'",
        "\\u{41}",
    ];
    let mut g = Graph::new();
    let mut ids = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let name = name.to_string();
        let op = match i % 3 {
            0 => Op::Input { name },
            1 => Op::Parameter { name },
            _ => Op::State { name },
        };
        ids.push(source(&mut g, op, DType::F32, shape![2]));
    }
    for (name, id) in names.iter().zip(&ids) {
        // Outputs may reuse source names, and several outputs may name one node.
        g.add_output(name, *id).unwrap();
    }
    g.add_output("second name", ids[0]).unwrap();
    let listing = assert_round_trips(&g);
    assert_eq!(
        listing.lines().count(),
        1 + names.len() + names.len() + 1,
        "one line per node and per output:\n{listing}"
    );
}

/// One graph with every op and attribute form the text form has syntax for.
#[test]
fn every_op_round_trips() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, shape!["batch", 4, 6]);
    let w = source(
        &mut g,
        Op::Parameter { name: "w".into() },
        DType::F32,
        shape![6, 3],
    );
    let mut results = Vec::new();
    let bits = input(&mut g, "bits", DType::I16, shape!["batch", 4, 6]);
    for u in UnaryOp::ALL {
        match u {
            UnaryOp::Not => {}
            UnaryOp::BitNot => results.push(add(&mut g, Op::Unary(u), &[bits])),
            _ => results.push(add(&mut g, Op::Unary(u), &[x])),
        }
    }
    for b in BinaryOp::ALL {
        if b.is_bitwise() {
            results.push(add(&mut g, Op::Binary(b), &[bits, bits]));
        } else if !matches!(b, BinaryOp::And | BinaryOp::Or) {
            results.push(add(&mut g, Op::Binary(b), &[x, x]));
        }
    }
    let mask = add(&mut g, Op::Binary(BinaryOp::Gt), &[x, x]);
    let not = add(&mut g, Op::Unary(UnaryOp::Not), &[mask]);
    results.push(add(&mut g, Op::Binary(BinaryOp::And), &[mask, not]));
    results.push(add(&mut g, Op::Binary(BinaryOp::Or), &[mask, not]));
    results.push(add(&mut g, Op::Select, &[mask, x, x]));
    for to in DType::ALL {
        results.push(add(&mut g, Op::Cast { to }, &[x]));
    }
    for op in ReduceOp::ALL {
        let axes = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            vec![2]
        } else {
            vec![2, 0]
        };
        for keepdims in [false, true] {
            let axes = axes.clone();
            results.push(add(&mut g, Op::Reduce { op, axes, keepdims }, &[x]));
        }
    }
    results.push(add(&mut g, Op::MatMul, &[x, w]));
    let reshape = |dims: Vec<ReshapeDim>| Op::Reshape { dims };
    results.push(add(
        &mut g,
        reshape(vec!["batch".into(), ReshapeDim::Infer, 2u64.into()]),
        &[x],
    ));
    results.push(add(
        &mut g,
        reshape(vec![ReshapeDim::Infer, 24u64.into()]),
        &[x],
    ));
    results.push(add(
        &mut g,
        Op::Permute {
            perm: vec![2, 0, 1],
        },
        &[x],
    ));
    let dims = vec![Dim::Static(2), "batch".into(), 4u64.into(), 6u64.into()];
    results.push(add(&mut g, Op::BroadcastTo { dims }, &[x]));
    let ranges = vec![
        SliceRange::FULL,
        SliceRange::new(1, 3, 1),
        SliceRange {
            start: 1,
            stop: None,
            step: 2,
        },
    ];
    results.push(add(&mut g, Op::Slice { ranges }, &[x]));
    results.push(add(&mut g, Op::Concat { axis: 2 }, &[x, x, x]));
    results.push(add(&mut g, Op::Concat { axis: 1 }, &[x]));
    let pads = vec![(0, 0), (1, 0), (0, 2)];
    let value = ExactF64(-1.5);
    results.push(add(&mut g, Op::Pad { pads, value }, &[x]));
    let u = add(&mut g, Op::Unsqueeze { axes: vec![3, 0] }, &[x]);
    results.push(add(&mut g, Op::Squeeze { axes: vec![0, 3] }, &[u]));
    let idx = constant(
        &mut g,
        DType::I32,
        shape![2, 2],
        ConstData::Int(vec![0, 5, 3, 1]),
    );
    results.push(add(&mut g, Op::Gather { axis: 2 }, &[x, idx]));
    let s1 = source(
        &mut g,
        Op::State { name: "s1".into() },
        DType::F32,
        shape!["batch", 4, 6],
    );
    add(&mut g, Op::StateAssign, &[s1, x]);
    let cache = source(
        &mut g,
        Op::State {
            name: "cache".into(),
        },
        DType::F32,
        shape![8, 4, 6],
    );
    let rows = input(&mut g, "rows", DType::F32, shape![2, 4, 6]);
    let start = Some(6);
    add(
        &mut g,
        Op::StateWriteSlice { axis: 0, start },
        &[cache, rows],
    );
    let kv = source(
        &mut g,
        Op::State { name: "kv".into() },
        DType::BF16,
        shape![1, 16],
    );
    let new = input(&mut g, "new", DType::BF16, shape![1, 1]);
    let pos = input(&mut g, "pos", DType::I32, shape![]);
    let op = Op::StateWriteSlice {
        axis: 1,
        start: None,
    };
    add(&mut g, op, &[kv, new, pos]);
    for (i, id) in results.into_iter().enumerate() {
        g.add_output(&format!("r{i}"), id).unwrap();
    }

    let covered: std::collections::BTreeSet<&str> =
        g.node_ids().map(|id| g.node(id).op.name()).collect();
    let all = 4 + UnaryOp::ALL.len() + BinaryOp::ALL.len() + ReduceOp::ALL.len() + 14;
    assert_eq!(covered.len(), all, "this graph has every op: {covered:?}");
    assert_round_trips(&g);
}

#[test]
fn state_only_and_zero_size_graphs_round_trip() {
    // No outputs: the state update is the only result.
    let g = GraphBuilder::new();
    let s = g.state("s", DType::I64, shape!["n", 0]).unwrap();
    let v = g.input("v", DType::I64, shape!["n", 0]).unwrap();
    s.assign(&v).unwrap();
    let graph = g.finish().unwrap();
    assert!(graph.outputs().is_empty());
    assert_round_trips(&graph);

    // Zero-size dims and rank 0 everywhere.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::U8, shape![0, 3]).unwrap();
    let y = x.sum(&[0], false).unwrap();
    let z = g.scalar(DType::U8, 255.0).unwrap();
    g.output("y", &y).unwrap();
    g.output("z", &z).unwrap();
    assert_round_trips(&g.finish().unwrap());
}
