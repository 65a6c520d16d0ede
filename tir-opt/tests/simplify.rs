//! Each simplification rule on its own: it fires where it should and not where it must not.

use tir_graph::{shape, text, DType, Graph, GraphBuilder, Op, ReshapeDim, SliceRange, Tensor};
use tir_opt::simplify::simplify;
use tir_opt::Limits;

type R = Result<(), tir_graph::GraphError>;

/// Simplifies the graph whose one output is `y`; returns the result and the rules that fired.
fn simplified(g: GraphBuilder, y: &Tensor) -> (Graph, Vec<&'static str>) {
    g.output("y", y).unwrap();
    let graph = g.finish().unwrap();
    let (out, stats) = simplify(&graph, &Limits::default()).unwrap();
    (out, stats.fired.keys().copied().collect())
}

/// The op of the output's node.
fn output_op(g: &Graph) -> &Op {
    &g.node(g.outputs()[0].1).op
}

/// The output is the source named `name`.
#[track_caller]
fn assert_output_is(g: &Graph, name: &str) {
    assert_eq!(output_op(g).source_name(), Some(name), "{}", text::print(g));
}

/// The graph's non-source op names, in order.
fn computed_ops(g: &Graph) -> Vec<&'static str> {
    g.node_ids()
        .map(|n| &g.node(n).op)
        .filter(|op| !op.is_source())
        .map(|op| op.name())
        .collect()
}

fn f32_input(g: &GraphBuilder, dims: &[u64]) -> Tensor {
    g.input("x", DType::F32, tir_graph::Shape::of(dims))
        .unwrap()
}

#[test]
fn mul_and_div_by_one_vanish_on_both_sides() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[2, 3]);
    let y = (&(&x * 1.0)? / 1.0)?;
    let one = g.scalar(DType::F32, 1.0)?;
    let y = one.mul(&y)?;
    let (out, fired) = simplified(g, &y);
    assert_output_is(&out, "x");
    assert!(
        fired.contains(&"mul-one") && fired.contains(&"div-one"),
        "{fired:?}"
    );
    Ok(())
}

#[test]
fn mul_by_ones_that_widen_the_shape_stays() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[3]);
    let ones = g.constant(DType::F32, shape![2, 3], &[1.0; 6])?;
    let (out, _) = simplified(g, &x.mul(&ones)?);
    assert_eq!(computed_ops(&out), ["mul"]);
    Ok(())
}

#[test]
fn adding_zero_vanishes_only_where_it_is_exact() -> R {
    // Integers: x + 0 is x.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::I32, shape![4])?;
    let (out, fired) = simplified(g, &(&x + 0.0)?);
    assert_output_is(&out, "x");
    assert_eq!(fired, ["add-zero"]);
    // Floats: x + (-0.0) is x ...
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, _) = simplified(g, &(&x + -0.0)?);
    assert_output_is(&out, "x");
    // ... but x + 0.0 is not (-0.0 + 0.0 = +0.0).
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, fired) = simplified(g, &(&x + 0.0)?);
    assert_eq!(computed_ops(&out), ["add"]);
    assert!(fired.is_empty(), "{fired:?}");
    // x - (+0.0) is x for floats.
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, fired) = simplified(g, &(&x - 0.0)?);
    assert_output_is(&out, "x");
    assert_eq!(fired, ["sub-zero"]);
    Ok(())
}

#[test]
fn x_minus_x_is_zero_for_integers_only() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::I64, shape!["n"])?;
    let (out, fired) = simplified(g, &(&x - &x)?);
    assert!(fired.contains(&"sub-self"), "{fired:?}");
    assert_eq!(computed_ops(&out), ["broadcast_to"]);
    assert_eq!(out.ty(out.outputs()[0].1).to_string(), "i64[n]");
    // inf - inf is NaN: a float x - x must stay.
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, _) = simplified(g, &(&x - &x)?);
    assert_eq!(computed_ops(&out), ["sub"]);
    Ok(())
}

#[test]
fn double_negation_and_double_not_cancel() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, fired) = simplified(g, &x.neg()?.neg()?);
    assert_output_is(&out, "x");
    assert_eq!(fired, ["neg-neg"]);
    let g = GraphBuilder::new();
    let b = g.input("b", DType::Bool, shape![4])?;
    let (out, fired) = simplified(g, &b.not()?.not()?.not()?);
    assert_eq!(computed_ops(&out), ["not"]);
    assert_eq!(fired, ["not-not"]);
    Ok(())
}

#[test]
fn select_with_a_constant_condition_picks_a_branch() -> R {
    let g = GraphBuilder::new();
    let a = f32_input(&g, &[2, 3]);
    let b = g.input("b", DType::F32, shape![2, 3])?;
    let yes = g.constant(DType::Bool, shape![3], &[1.0; 3])?;
    let (out, fired) = simplified(g, &yes.select(&a, &b)?);
    assert_output_is(&out, "x");
    assert_eq!(fired, ["select-constant"]);
    // All false, and the chosen branch is narrower than the result: a broadcast keeps the type.
    let g = GraphBuilder::new();
    let a = f32_input(&g, &[2, 3]);
    let b = g.input("b", DType::F32, shape![3])?;
    let no = g.scalar(DType::Bool, 0.0)?;
    let (out, _) = simplified(g, &no.select(&a, &b)?);
    assert_eq!(computed_ops(&out), ["broadcast_to"]);
    // A mixed condition stays.
    let g = GraphBuilder::new();
    let a = f32_input(&g, &[3]);
    let b = g.input("b", DType::F32, shape![3])?;
    let mixed = g.constant(DType::Bool, shape![3], &[1.0, 0.0, 1.0])?;
    let (out, _) = simplified(g, &mixed.select(&a, &b)?);
    assert_eq!(computed_ops(&out), ["select"]);
    Ok(())
}

#[test]
fn casts_collapse_only_through_lossless_steps() -> R {
    // f16 -> f32 -> f64 is f16 -> f64.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![4])?;
    let (out, fired) = simplified(g, &x.cast(DType::F32)?.cast(DType::F64)?);
    assert_eq!(computed_ops(&out), ["cast"]);
    assert!(fired.contains(&"cast-chain"), "{fired:?}");
    // f16 -> f32 -> f16 is the identity.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F16, shape![4])?;
    let (out, _) = simplified(g, &x.cast(DType::F32)?.cast(DType::F16)?);
    assert_output_is(&out, "x");
    // f32 -> f16 -> f32 rounds: it stays.
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, fired) = simplified(g, &x.cast(DType::F16)?.cast(DType::F32)?);
    assert_eq!(computed_ops(&out), ["cast", "cast"]);
    assert!(fired.is_empty(), "{fired:?}");
    // i64 -> i8 -> i64 wraps: it stays.
    let g = GraphBuilder::new();
    let x = g.input("x", DType::I64, shape![4])?;
    let (out, _) = simplified(g, &x.cast(DType::I8)?.cast(DType::I64)?);
    assert_eq!(computed_ops(&out), ["cast", "cast"]);
    // A cast to the same dtype vanishes.
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let (out, fired) = simplified(g, &x.cast(DType::F32)?);
    assert_output_is(&out, "x");
    assert_eq!(fired, ["cast-same"]);
    Ok(())
}

#[test]
fn small_constant_expressions_fold() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[3]);
    let c = g.constant(DType::F32, shape![3], &[1.0, 2.0, 3.0])?;
    let folded = (&c.exp()? * 2.0)?.sum(&[0], true)?;
    let (out, fired) = simplified(g, &x.add(&folded)?);
    assert_eq!(computed_ops(&out), ["add"]);
    assert!(fired.contains(&"fold-constant"), "{fired:?}");
    let constant = out
        .node_ids()
        .find_map(|n| match &out.node(n).op {
            Op::Constant { data } if out.ty(n).to_string() == "f32[1]" => data.get_f64(0),
            _ => None,
        })
        .expect("the folded constant");
    let expected = 2.0 * (1f64.exp() + 2f64.exp() + 3f64.exp());
    assert_eq!(constant, f64::from(expected as f32));
    Ok(())
}

#[test]
fn folding_keeps_integer_wrap_and_nan() -> R {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::I8, shape![1])?;
    let c = g.scalar(DType::I8, 100.0)?;
    let (out, _) = simplified(g, &x.add(&(&c + &c)?)?);
    let value = out.node_ids().find_map(|n| match &out.node(n).op {
        Op::Constant { data } => data.get_f64(0),
        _ => None,
    });
    assert_eq!(value, Some(-56.0), "100 + 100 wraps in i8");
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[1]);
    let nan = g.scalar(DType::F32, f64::NAN)?;
    let (out, _) = simplified(g, &x.add(&nan.mul_scalar(1.0)?.maximum(&nan)?)?);
    let value = out.node_ids().find_map(|n| match &out.node(n).op {
        Op::Constant { data } => data.get_f64(0),
        _ => None,
    });
    assert!(
        value.is_some_and(f64::is_nan),
        "NaN survives folding: {value:?}"
    );
    Ok(())
}

#[test]
fn large_constant_expressions_do_not_fold() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[100, 100]);
    let big = g
        .scalar(DType::F32, 2.0)?
        .broadcast_to(&shape![100, 100])?
        .exp()?;
    let (out, fired) = simplified(g, &x.add(&big)?);
    assert_eq!(computed_ops(&out), ["broadcast_to", "exp", "add"]);
    assert!(!fired.contains(&"fold-constant"), "{fired:?}");
    Ok(())
}

#[test]
fn reshape_chains_collapse_and_noops_vanish() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4, 6]);
    let y = x
        .reshape(&[ReshapeDim::Dim(24.into())])?
        .unsqueeze(&[0])?
        .reshape(&[ReshapeDim::Infer, 8.into()])?;
    let (out, fired) = simplified(g, &y);
    assert_eq!(computed_ops(&out), ["reshape"]);
    assert_eq!(out.ty(out.outputs()[0].1).to_string(), "f32[3, 8]");
    assert!(fired.contains(&"reshape-chain"), "{fired:?}");
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4, 6]);
    let (out, _) = simplified(
        g,
        &x.reshape(&[ReshapeDim::Dim(24.into())])?
            .reshape(&[4.into(), 6.into()])?,
    );
    assert_output_is(&out, "x");
    Ok(())
}

#[test]
fn reshape_does_not_cancel_across_a_permute() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4, 6]);
    let y = x
        .reshape(&[2.into(), 2.into(), 6.into()])?
        .permute(&[1, 0, 2])?
        .reshape(&[4.into(), 6.into()])?;
    let (out, fired) = simplified(g, &y);
    assert_eq!(computed_ops(&out), ["reshape", "permute", "reshape"]);
    assert!(fired.is_empty(), "{fired:?}");
    Ok(())
}

#[test]
fn permutes_compose_and_identities_vanish() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[2, 3, 4]);
    let (out, fired) = simplified(g, &x.permute(&[1, 2, 0])?.permute(&[2, 0, 1])?);
    assert_output_is(&out, "x");
    assert!(fired.contains(&"permute-chain") && fired.contains(&"permute-identity"));
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[2, 3, 4]);
    let (out, _) = simplified(g, &x.permute(&[1, 2, 0])?.permute(&[1, 0, 2])?);
    assert_eq!(computed_ops(&out), ["permute"]);
    assert_eq!(
        output_op(&out),
        &Op::Permute {
            perm: vec![2, 1, 0]
        }
    );
    Ok(())
}

#[test]
fn broadcasts_and_full_slices_collapse() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[3]);
    let y = x
        .broadcast_to(&shape![3])?
        .broadcast_to(&shape![2, 3])?
        .broadcast_to(&shape![4, 2, 3])?;
    let (out, fired) = simplified(g, &y);
    assert_eq!(computed_ops(&out), ["broadcast_to"]);
    assert!(fired.contains(&"broadcast-noop") && fired.contains(&"broadcast-chain"));
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[3, 4]);
    let full = [SliceRange::FULL, SliceRange::new(0, 4, 1)];
    let (out, fired) = simplified(g, &x.slice(&full)?);
    assert_output_is(&out, "x");
    assert_eq!(fired, ["slice-full"]);
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[3, 4]);
    let (out, _) = simplified(g, &x.slice(&[SliceRange::FULL, SliceRange::new(0, 4, 2)])?);
    assert_eq!(computed_ops(&out), ["slice"]);
    Ok(())
}

#[test]
fn common_subexpressions_merge() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let y = (&x.exp()? + &x.exp()?)?;
    let (out, _) = simplified(g, &y);
    assert_eq!(computed_ops(&out), ["exp", "add"]);
    Ok(())
}

#[test]
fn the_signature_survives_even_when_an_input_is_no_longer_used() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let unused = g.input("unused", DType::I32, shape!["n"])?;
    let zero = (&unused - &unused)?.cast(DType::F32)?.sum(&[0], false)?;
    let _ = zero;
    let s = g.state("s", DType::F32, shape![4])?;
    s.assign(&(&x * 1.0)?)?;
    let (out, _) = simplified(g, &x.exp()?);
    let names: Vec<String> = out.inputs().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["x", "unused"]);
    assert_eq!(out.states().len(), 1);
    assert_eq!(out.state_updates().len(), 1);
    Ok(())
}

#[test]
fn a_bounded_saturation_says_so_and_stays_correct() -> R {
    let g = GraphBuilder::new();
    let x = f32_input(&g, &[4]);
    let mut y = x.clone();
    for _ in 0..6 {
        y = y.neg()?.neg()?.mul_scalar(1.0)?;
    }
    g.output("y", &y)?;
    let graph = g.finish()?;
    let limits = Limits {
        max_iterations: 1,
        ..Limits::default()
    };
    let (out, stats) = simplify(&graph, &limits).unwrap();
    assert_eq!(stats.bound_hit, Some(tir_opt::Bound::Iterations));
    out.verify()?;
    assert_eq!(out.ty(out.outputs()[0].1), graph.ty(graph.outputs()[0].1));
    Ok(())
}
