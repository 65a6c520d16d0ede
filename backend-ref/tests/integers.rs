//! `i64` through the whole pipeline is exact over its whole range, past the 2^53 where an `f64`
//! stops holding every integer: wrapping arithmetic, casts from floats, reductions, products,
//! states across runs, and constants the optimizer must not fold through `f64`.

use backend_ref::RefBackend;
use tir_graph::{shape, ConstData, DType, Graph, GraphBuilder, HostTensor};
use tir_lower::{compile_graph, Backend, HostTensors, TensorRef};
use tir_opt::Limits;

const BIG: [i64; 4] = [i64::MAX - 1, (1 << 53) + 1, i64::MIN + 3, -(1 << 60) - 7];
const X: [i64; 4] = [1, 2, -3, 5];
const F: [f64; 3] = [9.3e18, -9.3e18, 1152921504606849024.0];

fn graph() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::I64, shape![4]).unwrap();
    let f = g.input("f", DType::F64, shape![3]).unwrap();
    let big = g
        .constant_data(DType::I64, shape![4], ConstData::Int(BIG.to_vec()))
        .unwrap();
    let one = g
        .constant_data(DType::I64, shape![4], ConstData::Int(vec![1; 4]))
        .unwrap();
    // Each element alone is an `f64` the oracle takes as exact (2^53 + 1 reads as 2^53).
    let odd = g
        .constant_data(
            DType::I64,
            shape![2],
            ConstData::Int(vec![(1 << 53) + 1, 3]),
        )
        .unwrap();
    let acc = g.state("acc", DType::I64, shape![4]).unwrap();
    let sum = x.add(&big).unwrap();
    g.output("sum", &sum).unwrap();
    g.output("product", &x.mul(&big).unwrap()).unwrap();
    g.output("total", &sum.sum(&[0], false).unwrap()).unwrap();
    g.output("cast", &f.cast(DType::I64).unwrap()).unwrap();
    let row = x.reshape_to(&shape![1, 4]).unwrap();
    let column = big.reshape_to(&shape![4, 1]).unwrap();
    g.output("dot", &row.matmul(&column).unwrap()).unwrap();
    g.output("folded", &big.mul(&one).unwrap()).unwrap();
    g.output("odd", &odd.mul(&odd).unwrap()).unwrap();
    g.output("less", &big.lt(&x).unwrap()).unwrap();
    acc.assign(&acc.add(&big).unwrap()).unwrap();
    g.finish().unwrap()
}

fn ints(outputs: &HostTensors, name: &str) -> Vec<i64> {
    outputs[name].to_vec::<i64>().unwrap()
}

fn each(f: impl Fn(i64, i64) -> i64) -> Vec<i64> {
    X.iter().zip(BIG).map(|(&x, b)| f(x, b)).collect()
}

#[test]
fn i64_is_exact_past_2_pow_53() {
    for backend in [RefBackend::new(), RefBackend::checking()] {
        let compiled = compile_graph(&graph(), &backend.target(), &Limits::default()).unwrap();
        let mut exe = backend.compile(&compiled.program).unwrap();
        let x = HostTensor::from_vec(X.to_vec(), &[4]).unwrap();
        let f = HostTensor::from_vec(F.to_vec(), &[3]).unwrap();
        let inputs = [("x", TensorRef::Host(&x)), ("f", TensorRef::Host(&f))];
        exe.run(&inputs).unwrap();
        let out = exe.run(&inputs).unwrap();
        let sum = each(i64::wrapping_add);
        assert_eq!(ints(&out, "sum"), sum);
        assert_eq!(ints(&out, "product"), each(i64::wrapping_mul));
        assert_eq!(
            ints(&out, "total"),
            vec![sum.iter().fold(0i64, |a, &v| a.wrapping_add(v))]
        );
        // Truncated, then wrapped as if through i128 (9.3e18 is past i64::MAX).
        let cast: Vec<i64> = F.iter().map(|&v| v as i128 as i64).collect();
        assert_eq!(ints(&out, "cast"), cast);
        assert_eq!(
            ints(&out, "dot"),
            vec![each(i64::wrapping_mul)
                .iter()
                .fold(0i64, |a, &v| a.wrapping_add(v))]
        );
        assert_eq!(ints(&out, "folded"), BIG.to_vec());
        let odd = (1i64 << 53) + 1;
        assert_eq!(ints(&out, "odd"), vec![odd.wrapping_mul(odd), 9]);
        let less: Vec<bool> = X.iter().zip(BIG).map(|(&x, b)| b < x).collect();
        assert_eq!(out["less"].to_vec::<bool>().unwrap(), less);
        let states = exe.states().unwrap();
        assert_eq!(ints(&states, "acc"), each(|_, b| b.wrapping_add(b)));
    }
}
