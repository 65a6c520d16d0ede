//! Properties of the corpus itself: size, unique names, determinism by seed, and coverage of
//! every op of the IR with every dtype its type inference accepts.

use std::collections::{BTreeMap, BTreeSet};
use testsuite::{corpus, Case, OpClass};
use tir_graph::infer::infer;
use tir_graph::op::ConstData;
use tir_graph::text::print;
use tir_graph::{
    shape, BinaryOp, DType, ExactF64, Op, ReduceOp, Shape, SliceRange, TensorType, UnaryOp,
};

/// One op of each kind with attributes that fit a `[2, 3]` operand. The match below has no
/// wildcard: a new kind of op fails to compile here until it gets a sample (and cases).
fn sample_ops() -> Vec<Op> {
    fn kind(op: &Op) -> usize {
        match op {
            Op::Input { .. } => 0,
            Op::Parameter { .. } => 1,
            Op::Constant { .. } => 2,
            Op::State { .. } => 3,
            Op::Unary(_) => 4,
            Op::Cast { .. } => 5,
            Op::Binary(_) => 6,
            Op::Select => 7,
            Op::Reduce { .. } => 8,
            Op::MatMul => 9,
            Op::Reshape { .. } => 10,
            Op::Permute { .. } => 11,
            Op::BroadcastTo { .. } => 12,
            Op::Slice { .. } => 13,
            Op::Concat { .. } => 14,
            Op::Pad { .. } => 15,
            Op::Squeeze { .. } => 16,
            Op::Unsqueeze { .. } => 17,
            Op::Gather { .. } => 18,
            Op::StateAssign => 19,
            Op::StateWriteSlice { .. } => 20,
            Op::Conv { .. } => 21,
            Op::Iota { .. } => 22,
            Op::DimValue { .. } => 23,
            Op::AllReduce { .. } => 24,
            Op::AllGather { .. } => 25,
            Op::ReduceScatter { .. } => 26,
            Op::Custom { .. } => 27,
        }
    }
    let name = String::from("s");
    let mut ops = vec![
        Op::Input { name: name.clone() },
        Op::Parameter { name: name.clone() },
        Op::Constant {
            data: ConstData::Int(vec![0; 6]),
        },
        Op::State { name },
        Op::Cast { to: DType::F32 },
        Op::Select,
        Op::MatMul,
        Op::Reshape {
            dims: vec![6.into()],
        },
        Op::Permute { perm: vec![1, 0] },
        Op::BroadcastTo {
            dims: vec![2.into(), 2.into(), 3.into()],
        },
        Op::Slice {
            ranges: vec![SliceRange::FULL, SliceRange::new(0, 2, 1)],
        },
        Op::Concat { axis: 0 },
        Op::Pad {
            pads: vec![(1, 0), (0, 0)],
            value: ExactF64(0.0),
        },
        Op::Squeeze { axes: vec![] },
        Op::Unsqueeze { axes: vec![0] },
        Op::Gather { axis: 0 },
        Op::StateAssign,
        Op::StateWriteSlice {
            axis: 0,
            start: Some(0),
        },
        Op::Conv {
            strides: vec![1],
            dilations: vec![1],
            pads: vec![(0, 0)],
            groups: 1,
        },
        Op::Iota { len: 6.into() },
        Op::DimValue { dim: 6.into() },
        Op::AllGather { axis: 0, world: 2 },
        Op::ReduceScatter { axis: 0, world: 2 },
    ];
    ops.extend(
        [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min].map(|op| Op::AllReduce { op, world: 2 }),
    );
    let topk = tir_lower::custom::topk::topk(DType::F32, 3, 2).expect("top-2 of rows of 3");
    ops.extend([0, 1].map(|output| Op::Custom {
        kernel: tir_graph::CustomRef::new(topk.clone()),
        output,
    }));
    ops.extend(UnaryOp::ALL.map(Op::Unary));
    ops.extend(BinaryOp::ALL.map(Op::Binary));
    ops.extend(ReduceOp::ALL.map(|op| Op::Reduce {
        op,
        axes: vec![1],
        keepdims: false,
    }));
    let kinds: BTreeSet<usize> = ops.iter().map(kind).collect();
    assert_eq!(kinds.len(), 28, "a sample of every kind of op");
    ops
}

/// Whether inference accepts `op` with `dtype` as its principal operand (operand 0, a select's
/// branches, a source's own type).
fn accepts(op: &Op, dtype: DType) -> bool {
    if op.is_source() {
        return true;
    }
    if let Op::Iota { .. } | Op::DimValue { .. } = op {
        return dtype == DType::I64;
    }
    let ty = TensorType::new(dtype, shape![2, 3]);
    let bool_ty = TensorType::new(DType::Bool, shape![2, 3]);
    let index = TensorType::new(DType::I64, shape![4]);
    let tall = TensorType::new(dtype, shape![3, 2]);
    let (image, filter) = (
        TensorType::new(dtype, shape![1, 2, 3]),
        TensorType::new(dtype, shape![1, 2, 2]),
    );
    let operands: Vec<&TensorType> = match op {
        Op::Select => vec![&bool_ty, &ty, &ty],
        Op::MatMul => vec![&ty, &tall],
        Op::Conv { .. } => vec![&image, &filter],
        Op::Gather { .. } => vec![&ty, &index],
        Op::Binary(_) | Op::StateAssign | Op::StateWriteSlice { .. } => vec![&ty, &ty],
        _ => vec![&ty],
    };
    infer(op, &operands).is_ok()
}

/// `(op name, principal dtype)` pairs.
type OpDTypes = BTreeSet<(String, DType)>;

/// The graphs a case runs: its own, and for a case on a mesh, the graph each device runs (where
/// the collectives are).
fn graphs_of(case: &Case) -> Vec<tir_graph::Graph> {
    let mut graphs = vec![case.graph.clone()];
    if let Some(mesh) = &case.mesh {
        let sharded = mesh
            .shard(&case.graph)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        graphs.push(sharded.local);
    }
    graphs
}

/// `(op name, principal dtype)` of every node of every case, and every `(from, to)` of a cast.
fn covered(cases: &[Case]) -> (OpDTypes, BTreeSet<(DType, DType)>) {
    let mut ops = BTreeSet::new();
    let mut casts = BTreeSet::new();
    for graph in cases.iter().flat_map(graphs_of) {
        let g = &graph;
        for id in g.node_ids() {
            let node = g.node(id);
            let operands = g.operands(id);
            let principal = match (&node.op, operands.as_slice()) {
                (Op::Select, [_, a, _]) => g.ty(*a).dtype,
                (_, [first, ..]) => g.ty(*first).dtype,
                _ => node.ty.dtype,
            };
            if let (Op::Cast { to }, [from]) = (&node.op, operands.as_slice()) {
                casts.insert((g.ty(*from).dtype, *to));
            }
            ops.insert((node.op.name().to_string(), principal));
        }
    }
    (ops, casts)
}

#[test]
fn the_corpus_has_at_least_500_cases_with_unique_names() {
    let cases = corpus(0);
    assert!(cases.len() >= 500, "{} cases", cases.len());
    let mut seen = BTreeSet::new();
    for c in &cases {
        assert!(
            seen.insert(c.name.as_str()),
            "duplicate case name {}",
            c.name
        );
        assert!(
            ["op", "pattern", "numerics", "quant", "custom"].contains(&c.group()),
            "{}: unknown group",
            c.name
        );
        assert!(!c.runs.is_empty(), "{}: no runs", c.name);
    }
    let groups: BTreeMap<&str, usize> = cases.iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.group()).or_default() += 1;
        m
    });
    assert!(
        groups["pattern"] >= 100 && groups["numerics"] >= 100,
        "{groups:?}"
    );
}

/// Bitwise equality of two cases (NaN payloads included).
fn same(a: &Case, b: &Case) -> bool {
    let bits = |t: &tir_graph::eval::F64Tensor| -> (DType, Vec<u64>, Vec<u64>) {
        (
            t.dtype,
            t.dims.clone(),
            t.data.iter().map(|v| v.to_bits()).collect(),
        )
    };
    a.name == b.name
        && print(&a.graph) == print(&b.graph)
        && a.tolerance == b.tolerance
        && a.needs == b.needs
        && a.runs.len() == b.runs.len()
        && a.runs.iter().zip(&b.runs).all(|(x, y)| {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((n, t), (m, u))| n == m && bits(t) == bits(u))
        })
}

#[test]
fn the_corpus_is_deterministic_by_seed() {
    let (a, b, other) = (corpus(7), corpus(7), corpus(8));
    assert_eq!(a.len(), b.len());
    assert!(a.iter().zip(&b).all(|(x, y)| same(x, y)));
    // Another seed: the same cases and graphs, other values.
    assert_eq!(a.len(), other.len());
    assert!(a
        .iter()
        .zip(&other)
        .all(|(x, y)| x.name == y.name && print(&x.graph) == print(&y.graph)));
    let differ = a.iter().zip(&other).filter(|(x, y)| !same(x, y)).count();
    assert!(
        differ > a.len() / 2,
        "only {differ} cases changed with the seed"
    );
}

#[test]
fn every_source_is_exact_in_its_dtype_and_matches_the_graph() {
    for case in corpus(0) {
        for (run, sources) in case.runs.iter().enumerate() {
            for (name, t) in sources {
                let checked =
                    tir_graph::eval::F64Tensor::new(t.dtype, t.dims.clone(), t.data.clone());
                assert!(
                    checked.is_ok(),
                    "{} run {run} `{name}`: {:?}",
                    case.name,
                    checked
                );
            }
            let dims = tir_graph::eval::bind_dims(&case.graph, sources);
            assert!(dims.is_ok(), "{} run {run}: {:?}", case.name, dims);
        }
    }
}

#[test]
fn every_op_of_the_ir_is_covered_with_every_dtype_it_accepts() {
    let cases = corpus(0);
    let (ops, casts) = covered(&cases);
    let mut missing = Vec::new();
    for op in sample_ops() {
        // The f8 dtypes have casts (all pairs, below), moves and numerics/float8's arithmetic
        // and sum, not every op yet.
        // A reducing collective of a type sharding widens (`reduce_width`: i16, u16) runs in
        // its wide type: its cases (`op/all_reduce_*/i16/...`) cover it there.
        let widened = |d: DType| {
            matches!(op, Op::AllReduce { .. } | Op::ReduceScatter { .. })
                && tir_opt::shard::reduce_width(d).is_some()
        };
        for d in DType::ALL.into_iter().filter(|d| d.float8().is_none()) {
            if accepts(&op, d) && !widened(d) && !ops.contains(&(op.name().to_string(), d)) {
                missing.push(format!("{} on {d}", op.name()));
            }
        }
    }
    for from in DType::ALL {
        for to in DType::ALL {
            if !casts.contains(&(from, to)) {
                missing.push(format!("cast {from} to {to}"));
            }
        }
    }
    assert!(missing.is_empty(), "not covered: {}", missing.join(", "));
}

#[test]
fn every_dtype_and_every_tolerance_class_appears() {
    let cases = corpus(0);
    let dtypes: BTreeSet<DType> = cases
        .iter()
        .flat_map(|c| c.graph.node_ids().map(|id| c.graph.ty(id).dtype))
        .collect();
    assert_eq!(dtypes.len(), DType::ALL.len());
    let classes: BTreeSet<OpClass> = cases.iter().map(|c| c.tolerance.class).collect();
    assert_eq!(classes.len(), 7, "{classes:?}");
}

#[test]
fn the_shapes_that_matter_are_there() {
    let cases = corpus(0);
    let has = |pred: &dyn Fn(&Case) -> bool| cases.iter().any(pred);
    let shapes = |c: &Case| -> Vec<Shape> {
        c.graph
            .node_ids()
            .map(|id| c.graph.ty(id).shape.clone())
            .collect()
    };
    // Rank 0 and 1, size-1 dims, symbolic dims bound to several values across runs.
    assert!(has(&|c| shapes(c).iter().any(|s| s.rank() == 0)));
    assert!(has(&|c| shapes(c).iter().any(|s| s.rank() == 1)));
    assert!(has(&|c| c.runs.len() >= 3 && c.name.contains("symbolic")));
    // Rows of at least 32768 under a reduction.
    let long_rows = cases
        .iter()
        .filter(|c| {
            c.graph.node_ids().any(|id| {
                matches!(c.graph.node(id).op, Op::Reduce { .. })
                    && c.graph
                        .operands(id)
                        .first()
                        .and_then(|o| c.graph.ty(*o).shape.dims().last()?.as_static())
                        .is_some_and(|n| n >= 32768)
            })
        })
        .count();
    assert!(
        (5..=20).contains(&long_rows),
        "{long_rows} cases with rows of 32768+"
    );
    // States over several runs.
    assert!(has(&|c| !c.graph.states().is_empty() && c.runs.len() >= 5));
}
