//! The op grid: every op × every dtype it accepts × the shapes that matter, one or two ops per
//! case (an op, sometimes behind a permute or slice that makes its operand non-contiguous).
//!
//! Names are `op/OP/DTYPE/SHAPE`. Inputs are drawn where the op is well-conditioned and away
//! from its discontinuities (see each op's [`Values`]).

use super::{rare_int, Binding, ByOp, Corpus, Result, FLOATS, INTS, NUMERIC};
use crate::tolerance::Tolerance;
use crate::values::Values;
use tir_graph::{
    shape, BinaryOp, DType, GraphBuilder, ReduceOp, ReshapeDim, SliceRange, Tensor, UnaryOp,
};

pub(super) fn add(c: &mut Corpus) -> Result<()> {
    unary_ops(c)?;
    binary_ops(c)?;
    select(c)?;
    casts(c)?;
    reductions(c)?;
    large_rows(c)?;
    matmuls(c)?;
    convs(c)?;
    layout_ops(c)?;
    expression_dims(c)?;
    gathers(c)?;
    state_ops(c)?;
    sources(c)?;
    Ok(())
}

fn no_binding() -> Vec<Binding> {
    vec![Vec::new()]
}

/// `n` bound to each of `values`, one run each.
fn runs_of(dim: &'static str, values: &[u64]) -> Vec<Binding> {
    values.iter().map(|&v| vec![(dim, v)]).collect()
}

/// The shape of an elementwise op's operand.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Rank 0.
    Scalar,
    /// Rank 1, 1000 elements: not a power of two, no multiple of any tile.
    Vector,
    /// Size-1 dims between others.
    UnitDims,
    /// `[n, 37]` with `n` bound to 1, 6 and 300 in three runs of one executable.
    Symbolic,
    /// A `[13, 9, 5]` input permuted to `[5, 13, 9]`.
    Permuted,
    /// A `[20, 37]` input sliced with steps 3 and 2.
    Sliced,
}

impl Layout {
    const ALL: [Layout; 6] = [
        Layout::Scalar,
        Layout::Vector,
        Layout::UnitDims,
        Layout::Symbolic,
        Layout::Permuted,
        Layout::Sliced,
    ];

    fn name(self) -> &'static str {
        match self {
            Layout::Scalar => "scalar",
            Layout::Vector => "len1000",
            Layout::UnitDims => "unit_dims",
            Layout::Symbolic => "symbolic",
            Layout::Permuted => "permuted",
            Layout::Sliced => "strided_slice",
        }
    }

    /// The layouts that cover the rare integer dtypes ([`rare_int`]).
    fn for_rare_ints(self) -> bool {
        matches!(self, Layout::Vector | Layout::Symbolic)
    }

    fn operand(self, g: &GraphBuilder, name: &str, d: DType) -> Result<Tensor> {
        match self {
            Layout::Scalar => g.input(name, d, shape![]),
            Layout::Vector => g.input(name, d, shape![1000]),
            Layout::UnitDims => g.input(name, d, shape![1, 7, 1, 33]),
            Layout::Symbolic => g.input(name, d, shape!["n", 37]),
            Layout::Permuted => g.input(name, d, shape![13, 9, 5])?.permute(&[2, 0, 1]),
            Layout::Sliced => g
                .input(name, d, shape![20, 37])?
                .slice(&[SliceRange::new(1, 19, 3), SliceRange::new(2, 37, 2)]),
        }
    }

    fn bindings(self) -> Vec<Binding> {
        match self {
            Layout::Symbolic => runs_of("n", &[1, 6, 300]),
            _ => no_binding(),
        }
    }
}

/// The dtypes a unary op accepts, its inputs, and its tolerance class.
fn unary_spec(u: UnaryOp) -> (Vec<DType>, Values, Tolerance) {
    let positive = Values::Uniform(0.25, 2.25);
    match u {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => {
            (NUMERIC.to_vec(), Values::Default, Tolerance::EXACT)
        }
        UnaryOp::Not => (vec![DType::Bool], Values::Default, Tolerance::EXACT),
        UnaryOp::BitNot => (INTS.to_vec(), Values::Default, Tolerance::EXACT),
        UnaryOp::Floor | UnaryOp::Ceil => {
            (FLOATS.to_vec(), Values::OffGrid(-4, 4), Tolerance::EXACT)
        }
        UnaryOp::Sqrt => (FLOATS.to_vec(), positive, Tolerance::ELEMENTWISE),
        UnaryOp::Reciprocal => (
            FLOATS.to_vec(),
            Values::AwayFromZero,
            Tolerance::ELEMENTWISE,
        ),
        UnaryOp::Log | UnaryOp::Rsqrt => (FLOATS.to_vec(), positive, Tolerance::TRANSCENDENTAL),
        UnaryOp::Exp
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Tanh
        | UnaryOp::Sigmoid
        | UnaryOp::GeluErf
        | UnaryOp::GeluTanh
        | UnaryOp::Silu
        | UnaryOp::Erf => (FLOATS.to_vec(), Values::Default, Tolerance::TRANSCENDENTAL),
    }
}

fn unary_ops(c: &mut Corpus) -> Result<()> {
    for u in UnaryOp::ALL {
        let (dtypes, values, tolerance) = unary_spec(u);
        for d in dtypes {
            let layouts = Layout::ALL.into_iter();
            for layout in layouts.filter(|l| !rare_int(d) || l.for_rare_ints()) {
                let g = GraphBuilder::new();
                let x = layout.operand(&g, "x", d)?;
                let y = x.apply_unary(u)?;
                g.output("y", &y)?;
                let name = format!("op/{}/{d}/{}", u.name(), layout.name());
                let values = values.clone();
                c.add(
                    name,
                    g.finish()?,
                    &layout.bindings(),
                    &|_| values.clone(),
                    tolerance,
                );
            }
        }
    }
    Ok(())
}

/// The shapes of a binary op's two operands.
#[derive(Clone, Copy, Debug)]
enum Pair {
    Scalars,
    Vectors,
    /// `[7, 33] op [33]`: the right operand broadcasts over rows.
    RhsBroadcast,
    /// `[1, 33] op [7, 33]`: the left operand broadcasts along a size-1 dim.
    LhsBroadcast,
    /// `[4, 1, 5] op [1, 9, 1]`: both broadcast.
    Outer,
    /// `[7, 33] op []`.
    ScalarRhs,
    /// `[n, 37] op [37]` with `n` bound to 1, 5 and 130.
    Symbolic,
    /// A permuted left operand and a strided slice on the right, both `[13, 9]`.
    Strided,
}

impl Pair {
    const ALL: [Pair; 8] = [
        Pair::Scalars,
        Pair::Vectors,
        Pair::RhsBroadcast,
        Pair::LhsBroadcast,
        Pair::Outer,
        Pair::ScalarRhs,
        Pair::Symbolic,
        Pair::Strided,
    ];

    fn name(self) -> &'static str {
        match self {
            Pair::Scalars => "scalars",
            Pair::Vectors => "len1000",
            Pair::RhsBroadcast => "bcast_rhs",
            Pair::LhsBroadcast => "bcast_lhs",
            Pair::Outer => "bcast_both",
            Pair::ScalarRhs => "scalar_rhs",
            Pair::Symbolic => "symbolic",
            Pair::Strided => "strided",
        }
    }

    /// The pairs that cover the rare integer dtypes ([`rare_int`]).
    fn for_rare_ints(self) -> bool {
        matches!(self, Pair::Vectors | Pair::Outer | Pair::Symbolic)
    }

    fn operands(self, g: &GraphBuilder, d: DType) -> Result<(Tensor, Tensor)> {
        let (a, b) = match self {
            Pair::Scalars => (shape![], shape![]),
            Pair::Vectors => (shape![1000], shape![1000]),
            Pair::RhsBroadcast => (shape![7, 33], shape![33]),
            Pair::LhsBroadcast => (shape![1, 33], shape![7, 33]),
            Pair::Outer => (shape![4, 1, 5], shape![1, 9, 1]),
            Pair::ScalarRhs => (shape![7, 33], shape![]),
            Pair::Symbolic => (shape!["n", 37], shape![37]),
            Pair::Strided => {
                let a = g.input("a", d, shape![9, 13])?.permute(&[1, 0])?;
                let b = g
                    .input("b", d, shape![26, 9])?
                    .slice(&[SliceRange::new(0, 26, 2), SliceRange::FULL])?;
                return Ok((a, b));
            }
        };
        Ok((g.input("a", d, a)?, g.input("b", d, b)?))
    }

    fn bindings(self) -> Vec<Binding> {
        match self {
            Pair::Symbolic => runs_of("n", &[1, 5, 130]),
            _ => no_binding(),
        }
    }
}

/// The dtypes a binary op accepts, its operands' values (left, right) and its tolerance.
fn binary_spec(b: BinaryOp) -> (Vec<DType>, Values, Values, Tolerance) {
    let d = Values::Default;
    match b {
        BinaryOp::Add | BinaryOp::Sub => (NUMERIC.to_vec(), d.clone(), d, Tolerance::ELEMENTWISE),
        BinaryOp::Mul => (
            NUMERIC.to_vec(),
            Values::Products,
            Values::Products,
            Tolerance::ELEMENTWISE,
        ),
        // Integer divisors include 0 (x / 0 = 0, as documented); float ones stay away from it.
        BinaryOp::Div => (
            NUMERIC.to_vec(),
            d,
            Values::AwayFromZero,
            Tolerance::ELEMENTWISE,
        ),
        // Quotients up to about 2000 (integers: as `Default`, divisor 0 included); the
        // remainder is exact in every dtype.
        BinaryOp::Rem => (
            NUMERIC.to_vec(),
            Values::Uniform(-1000.0, 1000.0),
            Values::AwayFromZero,
            Tolerance::EXACT,
        ),
        BinaryOp::Pow => (
            FLOATS.to_vec(),
            Values::Uniform(0.5, 2.5),
            Values::Uniform(-2.0, 2.0),
            Tolerance::TRANSCENDENTAL,
        ),
        BinaryOp::Maximum
        | BinaryOp::Minimum
        | BinaryOp::Lt
        | BinaryOp::Le
        | BinaryOp::Gt
        | BinaryOp::Ge => (
            NUMERIC.to_vec(),
            Values::Halves,
            Values::Halves,
            Tolerance::EXACT,
        ),
        BinaryOp::Eq | BinaryOp::Ne => (
            DType::ALL.to_vec(),
            Values::Halves,
            Values::Halves,
            Tolerance::EXACT,
        ),
        BinaryOp::And | BinaryOp::Or => (vec![DType::Bool], d.clone(), d, Tolerance::EXACT),
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor => {
            (INTS.to_vec(), d.clone(), d, Tolerance::EXACT)
        }
        // Amounts from -3 to 70: in range, past every width, and negative.
        BinaryOp::ShiftLeft | BinaryOp::ShiftRight => (
            INTS.to_vec(),
            d,
            Values::Choice(vec![
                0.0, 1.0, 3.0, 7.0, 8.0, 15.0, 31.0, 33.0, 63.0, 70.0, -1.0, -3.0,
            ]),
            Tolerance::EXACT,
        ),
    }
}

fn binary_ops(c: &mut Corpus) -> Result<()> {
    for b in BinaryOp::ALL {
        let (dtypes, left, right, tolerance) = binary_spec(b);
        for d in dtypes {
            for pair in Pair::ALL
                .into_iter()
                .filter(|p| !rare_int(d) || p.for_rare_ints())
            {
                let g = GraphBuilder::new();
                let (x, y) = pair.operands(&g, d)?;
                g.output("y", &x.apply_binary(b, &y)?)?;
                let name = format!("op/{}/{d}/{}", b.name(), pair.name());
                let (l, r) = (left.clone(), right.clone());
                let values = move |n: &str| if n == "a" { l.clone() } else { r.clone() };
                c.add(name, g.finish()?, &pair.bindings(), &values, tolerance);
            }
        }
    }
    Ok(())
}

fn select(c: &mut Corpus) -> Result<()> {
    for d in DType::ALL {
        // The condition, the branches: same shape; three-way broadcast; a symbolic dim.
        let shapes = [
            ("same", shape![5, 40], shape![5, 40], shape![5, 40]),
            ("bcast", shape![7, 1], shape![7, 33], shape![33]),
            ("scalar_cond", shape![], shape![100], shape![100]),
            ("symbolic", shape!["n", 9], shape!["n", 9], shape![1, 9]),
        ];
        for (shape_name, cs, a_shape, b_shape) in shapes {
            let g = GraphBuilder::new();
            let cond = g.input("cond", DType::Bool, cs)?;
            let a = g.input("a", d, a_shape)?;
            let b = g.input("b", d, b_shape)?;
            g.output("y", &cond.select(&a, &b)?)?;
            let bindings = if shape_name == "symbolic" {
                runs_of("n", &[1, 4, 77])
            } else {
                no_binding()
            };
            let name = format!("op/select/{d}/{shape_name}");
            c.add(
                name,
                g.finish()?,
                &bindings,
                &|_| Values::Default,
                Tolerance::EXACT,
            );
        }
    }
    Ok(())
}

/// The input values for a cast from `from` to `to`: in range for the target and a quarter away
/// from integers when a float becomes an integer, with zeros when the target is bool.
/// (Overflowing casts are in the numerics group.)
fn cast_values(from: DType, to: DType) -> Values {
    match (from.is_float(), to) {
        (_, DType::Bool) => Values::Halves,
        (true, DType::U8) => Values::OffGrid(0, 8),
        (true, t) if t.is_int() => Values::OffGrid(-4, 4),
        (true, _) => Values::Default,
        (false, t) if t.is_float() => Values::Uniform(-200.0, 200.0),
        _ => Values::Default,
    }
}

fn casts(c: &mut Corpus) -> Result<()> {
    for from in DType::ALL {
        for to in DType::ALL {
            for (shape_name, strided) in [("len1000", false), ("strided_slice", true)] {
                // The f8 casts' edges are numerics/float8's; one layout here.
                if strided && (from.float8().is_some() || to.float8().is_some()) {
                    continue;
                }
                let g = GraphBuilder::new();
                let x = if strided {
                    g.input("x", from, shape![20, 37])?
                        .slice(&[SliceRange::new(1, 19, 3), SliceRange::new(2, 37, 2)])?
                } else {
                    g.input("x", from, shape![1000])?
                };
                g.output("y", &x.cast(to)?)?;
                let name = format!("op/cast/{from}_to_{to}/{shape_name}");
                let values = cast_values(from, to);
                c.add_static(name, g.finish()?, values, Tolerance::EXACT);
            }
        }
    }
    Ok(())
}

/// The operand and axes of a reduction.
#[derive(Clone, Copy, Debug)]
enum Reduced {
    /// `[7, 1000]` over axis 1: a row reduction of a length no tile divides.
    Rows,
    /// `[300, 33]` over axis 0, kept: a column reduction.
    Columns,
    /// `[5, 40, 3]` over the middle axis.
    Middle,
    /// `[9, 11]` over both axes, to rank 0.
    All,
    /// `[4, 6, 10]` over axes 0 and 2, kept.
    TwoAxes,
    /// `[1000]` to rank 0.
    Vector,
    /// `[6, 1]` over its size-1 axis.
    UnitAxis,
    /// `[n, 300]` over axis 1, `n` bound to 1, 4 and 33.
    Symbolic,
    /// A `[40, 6]` input permuted, over the (now strided) last axis.
    Permuted,
    /// A `[30, 50]` input sliced with a row step, over the last axis.
    Sliced,
}

impl Reduced {
    const ALL: [Reduced; 10] = [
        Reduced::Rows,
        Reduced::Columns,
        Reduced::Middle,
        Reduced::All,
        Reduced::TwoAxes,
        Reduced::Vector,
        Reduced::UnitAxis,
        Reduced::Symbolic,
        Reduced::Permuted,
        Reduced::Sliced,
    ];

    fn name(self) -> &'static str {
        match self {
            Reduced::Rows => "rows1000",
            Reduced::Columns => "columns",
            Reduced::Middle => "middle_axis",
            Reduced::All => "all_axes",
            Reduced::TwoAxes => "two_axes",
            Reduced::Vector => "len1000",
            Reduced::UnitAxis => "unit_axis",
            Reduced::Symbolic => "symbolic",
            Reduced::Permuted => "permuted",
            Reduced::Sliced => "strided_slice",
        }
    }

    /// Whether argmax/argmin (one axis) apply.
    fn single_axis(self) -> bool {
        !matches!(self, Reduced::All | Reduced::TwoAxes)
    }

    /// The operand, the axes, keepdims, and the reduced length.
    fn operand(self, g: &GraphBuilder, d: DType) -> Result<(Tensor, Vec<usize>, bool, u64)> {
        Ok(match self {
            Reduced::Rows => (g.input("x", d, shape![7, 1000])?, vec![1], false, 1000),
            Reduced::Columns => (g.input("x", d, shape![300, 33])?, vec![0], true, 300),
            Reduced::Middle => (g.input("x", d, shape![5, 40, 3])?, vec![1], false, 40),
            Reduced::All => (g.input("x", d, shape![9, 11])?, vec![0, 1], false, 99),
            Reduced::TwoAxes => (g.input("x", d, shape![4, 6, 10])?, vec![0, 2], true, 40),
            Reduced::Vector => (g.input("x", d, shape![1000])?, vec![0], false, 1000),
            Reduced::UnitAxis => (g.input("x", d, shape![6, 1])?, vec![1], true, 1),
            Reduced::Symbolic => (g.input("x", d, shape!["n", 300])?, vec![1], false, 300),
            Reduced::Permuted => {
                let x = g.input("x", d, shape![40, 6])?.permute(&[1, 0])?;
                (x, vec![1], false, 40)
            }
            Reduced::Sliced => {
                let x = g
                    .input("x", d, shape![30, 50])?
                    .slice(&[SliceRange::new(0, 30, 2), SliceRange::new(3, 47, 1)])?;
                (x, vec![1], false, 44)
            }
        })
    }

    fn bindings(self) -> Vec<Binding> {
        match self {
            Reduced::Symbolic => runs_of("n", &[1, 4, 33]),
            _ => no_binding(),
        }
    }
}

/// The dtypes a reduction accepts, its inputs, and whether it rounds (sum, mean, prod) or only
/// selects (max, min, argmax, argmin: exact).
fn reduce_spec(op: ReduceOp) -> (Vec<DType>, Values, bool) {
    match op {
        // A positive mean keeps every sum away from the cancellation that makes a single sum
        // ill-conditioned (integers span their dtype: they are exact).
        ReduceOp::Sum => (NUMERIC.to_vec(), Values::Uniform(-1.0, 3.0), true),
        ReduceOp::Mean => (FLOATS.to_vec(), Values::Uniform(-1.0, 3.0), true),
        // Near 1 so that long products neither vanish nor overflow; integer products of ±1 and
        // ±2 stay exact in the oracle (a power of two, or 0 once it wraps past 2^64).
        ReduceOp::Prod => (NUMERIC.to_vec(), Values::Uniform(0.9, 1.1), true),
        ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin => {
            (NUMERIC.to_vec(), Values::Halves, false)
        }
    }
}

fn reduce(x: &Tensor, op: ReduceOp, axes: &[usize], keepdims: bool) -> Result<Tensor> {
    match op {
        ReduceOp::Sum => x.sum(axes, keepdims),
        ReduceOp::Mean => x.mean(axes, keepdims),
        ReduceOp::Max => x.max(axes, keepdims),
        ReduceOp::Min => x.min(axes, keepdims),
        ReduceOp::Prod => x.prod(axes, keepdims),
        ReduceOp::ArgMax => x.argmax(axes[0], keepdims),
        ReduceOp::ArgMin => x.argmin(axes[0], keepdims),
    }
}

fn reduce_values(op: ReduceOp, d: DType, values: &Values) -> Values {
    match op {
        ReduceOp::Prod if d.is_int() => {
            Values::Choice(vec![1.0, -1.0, 1.0, -1.0, 2.0, -2.0, 1.0, 1.0])
        }
        ReduceOp::Sum if d.is_int() => Values::Default,
        _ => values.clone(),
    }
}

fn reductions(c: &mut Corpus) -> Result<()> {
    for op in ReduceOp::ALL {
        let (dtypes, values, rounds) = reduce_spec(op);
        let arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
        for d in dtypes {
            for r in Reduced::ALL {
                let rare = rare_int(d) && !matches!(r, Reduced::Rows | Reduced::Columns);
                if rare || arg && !r.single_axis() {
                    continue;
                }
                let g = GraphBuilder::new();
                let (x, axes, keepdims, len) = r.operand(&g, d)?;
                g.output("y", &reduce(&x, op, &axes, keepdims)?)?;
                let tolerance = if rounds {
                    Tolerance::reduction(len)
                } else {
                    Tolerance::EXACT
                };
                let name = format!("op/{}/{d}/{}", op.name(), r.name());
                let v = reduce_values(op, d, &values);
                c.add(name, g.finish()?, &r.bindings(), &|_| v.clone(), tolerance);
            }
        }
    }
    Ok(())
}

/// Rows of 32768 elements (the widest a row kernel takes) and beyond (a general reduction):
/// a handful, as they are the slowest cases.
fn large_rows(c: &mut Corpus) -> Result<()> {
    let biased = Values::Uniform(-1.0, 3.0);
    let cases: [(ReduceOp, DType, u64, u64, Values); 7] = [
        (ReduceOp::Sum, DType::F16, 2, 32768, biased.clone()),
        (ReduceOp::Sum, DType::F32, 2, 40000, biased.clone()),
        (ReduceOp::Mean, DType::BF16, 1, 32768, biased),
        (ReduceOp::Max, DType::F32, 2, 32768, Values::Default),
        (ReduceOp::ArgMax, DType::F16, 2, 32769, Values::Halves),
        (
            ReduceOp::Prod,
            DType::F32,
            1,
            32768,
            Values::Uniform(0.99, 1.01),
        ),
        (ReduceOp::Sum, DType::I32, 2, 50000, Values::Default),
    ];
    for (op, d, rows, len, values) in cases {
        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![rows, len])?;
        g.output("y", &reduce(&x, op, &[1], false)?)?;
        let tolerance = if matches!(op, ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Prod) {
            Tolerance::reduction(len)
        } else {
            Tolerance::EXACT
        };
        let name = format!("op/{}/{d}/row{len}", op.name());
        c.add_static(name, g.finish()?, values, tolerance);
    }
    Ok(())
}

fn matmuls(c: &mut Corpus) -> Result<()> {
    for d in NUMERIC {
        // Floats with a positive mean: no dot product cancels to near zero by chance.
        let values = if d.is_int() {
            Values::Products
        } else {
            Values::Uniform(-1.0, 3.0)
        };
        type Build = fn(&GraphBuilder, DType) -> Result<Tensor>;
        let shapes: [(&str, u64, Build); 8] = [
            ("7x33x13", 33, |g, d| {
                g.input("a", d, shape![7, 33])?
                    .matmul(&g.input("b", d, shape![33, 13])?)
            }),
            ("70x65x35", 65, |g, d| {
                g.input("a", d, shape![70, 65])?
                    .matmul(&g.input("b", d, shape![65, 35])?)
            }),
            ("1x100x1", 100, |g, d| {
                g.input("a", d, shape![1, 100])?
                    .matmul(&g.input("b", d, shape![100, 1])?)
            }),
            ("batched", 17, |g, d| {
                g.input("a", d, shape![3, 5, 17])?
                    .matmul(&g.input("b", d, shape![17, 9])?)
            }),
            ("batch_broadcast", 8, |g, d| {
                g.input("a", d, shape![2, 1, 5, 8])?
                    .matmul(&g.input("b", d, shape![3, 8, 4])?)
            }),
            ("symbolic", 24, |g, d| {
                g.input("a", d, shape!["b", 5, 24])?
                    .matmul(&g.input("b", d, shape![24, 11])?)
            }),
            ("transposed_b", 40, |g, d| {
                let w = g.input("b", d, shape![20, 40])?.transpose()?;
                g.input("a", d, shape![12, 40])?.matmul(&w)
            }),
            ("strided_a", 40, |g, d| {
                let a = g
                    .input("a", d, shape![12, 80])?
                    .slice(&[SliceRange::FULL, SliceRange::new(0, 80, 2)])?;
                a.matmul(&g.input("b", d, shape![40, 16])?)
            }),
        ];
        // The rare integer dtypes: the first two shapes (an edge tile and a multi-tile K).
        let count = if rare_int(d) { 2 } else { shapes.len() };
        for (shape_name, k, build) in shapes.into_iter().take(count) {
            let g = GraphBuilder::new();
            g.output("y", &build(&g, d)?)?;
            let bindings = if shape_name == "symbolic" {
                runs_of("b", &[1, 3])
            } else {
                no_binding()
            };
            let name = format!("op/matmul/{d}/{shape_name}");
            let v = values.clone();
            c.add(
                name,
                g.finish()?,
                &bindings,
                &|_| v.clone(),
                Tolerance::matmul(k),
            );
        }
    }
    // More 128x128 output tiles (24 x 24) than an H100 runs at once even at four per SM, so a
    // persistent matmul entry loops over several tiles per block.
    let g = GraphBuilder::new();
    let a = g.input("a", DType::F16, shape![3072, 8])?;
    g.output("y", &a.matmul(&g.input("b", DType::F16, shape![8, 3072])?)?)?;
    c.add_static(
        "op/matmul/f16/many_tiles".into(),
        g.finish()?,
        Values::Uniform(-1.0, 3.0),
        Tolerance::matmul(8),
    );
    Ok(())
}

/// Convolutions (implicit-GEMM kernels): 1 to 3 spatial axes, strides, dilations, uneven
/// padding, groups (depthwise too), K not a multiple of the tile, a symbolic batch with a bias
/// and activation fused, a `[1, O, 1, 1]` bias with a sigmoid, and enough channels for several
/// K steps.
fn convs(c: &mut Corpus) -> Result<()> {
    type Build = fn(&GraphBuilder, DType) -> Result<Tensor>;
    let cases: [(&str, u64, Build); 11] = [
        ("1d_k3_pad1", 9, |g, d| {
            let w = g.input("w", d, shape![4, 3, 3])?;
            g.input("x", d, shape![2, 3, 17])?
                .conv(&w, &[1], &[1], &[(1, 1)], 1)
        }),
        ("2d_3x3_stride2", 45, |g, d| {
            let w = g.input("w", d, shape![8, 5, 3, 3])?;
            g.input("x", d, shape![2, 5, 13, 11])?
                .conv(&w, &[2, 2], &[1, 1], &[(1, 1), (1, 0)], 1)
        }),
        ("2d_dilated_groups", 12, |g, d| {
            let w = g.input("w", d, shape![9, 2, 3, 2])?;
            g.input("x", d, shape![1, 6, 10, 9])?
                .conv(&w, &[1, 1], &[2, 3], &[(2, 1), (0, 3)], 3)
        }),
        ("2d_depthwise", 9, |g, d| {
            let w = g.input("w", d, shape![8, 1, 3, 3])?;
            g.input("x", d, shape![2, 8, 12, 12])?
                .conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], 8)
        }),
        ("3d", 24, |g, d| {
            let w = g.input("w", d, shape![3, 2, 2, 3, 2])?;
            g.input("x", d, shape![1, 2, 5, 6, 7])?.conv(
                &w,
                &[1, 2, 1],
                &[1, 1, 1],
                &[(1, 0), (0, 1), (1, 1)],
                1,
            )
        }),
        ("1x1_bias_relu_symbolic", 4, |g, d| {
            let w = g.input("w", d, shape![16, 4, 1, 1])?;
            let bias = g.input("bias", d, shape![16])?;
            let bias = bias.reshape(&[16.into(), 1.into(), 1.into()])?;
            let y = g.input("x", d, shape!["n", 4, 9, 9])?.conv(
                &w,
                &[1, 1],
                &[1, 1],
                &[(0, 0), (0, 0)],
                1,
            )?;
            (&y + &bias)?.relu()
        }),
        // A bias of shape [1, O, 1, 1] and a sigmoid: the library route's other epilogue.
        ("2d_bias_sigmoid", 72, |g, d| {
            let w = g.input("w", d, shape![16, 8, 3, 3])?;
            let bias = g.input("bias", d, shape![1, 16, 1, 1])?;
            let y = g.input("x", d, shape![2, 8, 9, 9])?.conv(
                &w,
                &[2, 2],
                &[1, 1],
                &[(1, 1), (1, 1)],
                1,
            )?;
            (&y + &bias)?.sigmoid()
        }),
        ("2d_64x128_channels", 576, |g, d| {
            let w = g.input("w", d, shape![128, 64, 3, 3])?;
            g.input("x", d, shape![1, 64, 16, 16])?
                .conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], 1)
        }),
        // Two convs: the second reads the first's channels-last result (the layout pass), tap-major.
        ("2d_chain", 216, |g, d| {
            let w1 = g.input("w1", d, shape![16, 8, 3, 3])?;
            let w2 = g.input("w2", d, shape![32, 16, 3, 3])?;
            let bias = g.input("bias", d, shape![16])?;
            let bias = bias.reshape(&[16.into(), 1.into(), 1.into()])?;
            let pads = [(1, 1), (1, 1)];
            let y = g
                .input("x", d, shape![2, 8, 9, 9])?
                .conv(&w1, &[1, 1], &[1, 1], &pads, 1)?;
            (&y + &bias)?.relu()?.conv(&w2, &[2, 2], &[1, 1], &pads, 1)
        }),
        // NHWC in and out: the conv reads and writes channels-last buffers through permutes.
        ("2d_channels_last_io", 144, |g, d| {
            let w = g.input("w", d, shape![16, 16, 3, 3])?;
            let bias = g.input("bias", d, shape![16])?;
            let bias = bias.reshape(&[16.into(), 1.into(), 1.into()])?;
            let x = g
                .input("x", d, shape![2, 9, 9, 16])?
                .permute(&[0, 3, 1, 2])?;
            let y = x.conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], 1)?;
            (&y + &bias)?.relu()?.permute(&[0, 2, 3, 1])
        }),
        // A lone NCHW conv of a computed input over a symbolic batch: the kernel computing the
        // input also writes the channels-last copy the conv reads.
        ("2d_copied_input_symbolic", 144, |g, d| {
            let w = g.input("w", d, shape![16, 16, 3, 3])?;
            let x = g.input("x", d, shape!["n", 16, 7, 7])?.tanh()?;
            x.conv(&w, &[1, 1], &[1, 1], &[(1, 1), (1, 1)], 1)
        }),
    ];
    for d in FLOATS {
        for (shape_name, k, build) in cases {
            let g = GraphBuilder::new();
            g.output("y", &build(&g, d)?)?;
            let bindings = if shape_name.ends_with("symbolic") {
                runs_of("n", &[1, 3])
            } else {
                no_binding()
            };
            c.add(
                format!("op/conv/{d}/{shape_name}"),
                g.finish()?,
                &bindings,
                &|_| Values::Uniform(-1.0, 3.0),
                Tolerance::matmul(k),
            );
        }
    }
    Ok(())
}

/// A pad value every dtype holds exactly.
fn pad_value(d: DType) -> f64 {
    match d {
        DType::Bool => 1.0,
        d if d.is_int() => 3.0,
        _ => -1.5,
    }
}

fn layout_ops(c: &mut Corpus) -> Result<()> {
    for d in DType::ALL {
        type Build = fn(&GraphBuilder, DType) -> Result<Tensor>;
        let cases: [(&str, &str, Build); 14] = [
            ("reshape", "6x35_to_14x15", |g, d| {
                g.input("x", d, shape![6, 35])?.reshape_to(&shape![14, 15])
            }),
            ("reshape", "symbolic", |g, d| {
                g.input("x", d, shape!["n", 4, 6])?
                    .reshape(&["n".into(), ReshapeDim::Infer])
            }),
            ("permute", "rank3", |g, d| {
                g.input("x", d, shape![3, 5, 7])?.permute(&[2, 0, 1])
            }),
            ("permute", "heads", |g, d| {
                g.input("x", d, shape![2, 3, 4, 5])?.permute(&[0, 2, 1, 3])
            }),
            ("broadcast_to", "rows", |g, d| {
                g.input("x", d, shape![1, 7])?.broadcast_to(&shape![5, 7])
            }),
            ("broadcast_to", "new_axes", |g, d| {
                g.input("x", d, shape![7, 1])?
                    .broadcast_to(&shape![3, 7, 33])
            }),
            ("slice", "steps", |g, d| {
                g.input("x", d, shape![20, 37])?
                    .slice(&[SliceRange::new(3, 17, 2), SliceRange::new(1, 36, 5)])
            }),
            ("slice", "vector", |g, d| {
                g.input("x", d, shape![100])?
                    .slice(&[SliceRange::new(1, 100, 7)])
            }),
            ("concat", "axis1", |g, d| {
                let a = g.input("a", d, shape![4, 3])?;
                let b = g.input("b", d, shape![4, 5])?;
                let c = g.input("c", d, shape![4, 1])?;
                g.concat(&[&a, &b, &c], 1)
            }),
            ("concat", "axis0", |g, d| {
                let a = g.input("a", d, shape![2, 6])?;
                let b = g.input("b", d, shape![3, 6])?;
                g.concat(&[&a, &b], 0)
            }),
            ("pad", "both_sides", |g, d| {
                g.input("x", d, shape![5, 7])?
                    .pad(&[(1, 2), (0, 3)], pad_value(d))
            }),
            ("pad", "vector", |g, d| {
                g.input("x", d, shape![9])?.pad(&[(4, 0)], 0.0)
            }),
            ("squeeze", "unit_dims", |g, d| {
                g.input("x", d, shape![1, 7, 1, 5])?.squeeze(&[0, 2])
            }),
            ("unsqueeze", "new_dims", |g, d| {
                g.input("x", d, shape![7, 5])?.unsqueeze(&[0, 2])
            }),
        ];
        for (op, shape_name, build) in cases {
            let g = GraphBuilder::new();
            g.output("y", &build(&g, d)?)?;
            let bindings = if shape_name == "symbolic" {
                runs_of("n", &[1, 3, 10])
            } else {
                no_binding()
            };
            let name = format!("op/{op}/{d}/{shape_name}");
            c.add(
                name,
                g.finish()?,
                &bindings,
                &|_| Values::Default,
                Tolerance::EXACT,
            );
        }
    }
    Ok(())
}

/// Shapes whose dims are expressions over the bound symbols (`n*s`, `s + 3`, `floor(s / 2) + 1`,
/// `s + 1` of an iota), bound so that some tiles are partial and one binding makes a dim 1, and
/// the values of such dims read at run time.
fn expression_dims(c: &mut Corpus) -> Result<()> {
    type Build = fn(&GraphBuilder, DType) -> Result<Tensor>;
    let cases: [(&str, u64, Build); 6] = [
        ("iota_positions", 1, |g, d| {
            // Positions 0..s + 1 as a row added to every batch row (an exported `Range`).
            let x = g.input("x", d, shape!["n", "s + 1"])?;
            let positions = g.iota("s + 1".into())?.cast(d)?;
            &x + &positions
        }),
        ("dim_values", 1, |g, d| {
            // Each row scaled by its length and shifted by the element count, as exported
            // index arithmetic reads sizes (`x * (s + 1) + n*s`).
            let x = g.input("x", d, shape!["n", "s + 1"])?;
            let len = g.dim_value("s + 1".into())?.cast(d)?;
            let count = g.dim_value("n*s".into())?.cast(d)?;
            &(&x * &len)? + &count
        }),
        ("flatten_rows", 1, |g, d| {
            let x = g.input("x", d, shape!["n", "s", 24])?;
            let rows = x.reshape(&[ReshapeDim::Infer, 24.into()])?;
            let scaled = (&rows + &g.scalar(d, 0.5)?)?;
            scaled.reshape(&["n".into(), ReshapeDim::Infer, 24.into()])
        }),
        ("pad_concat", 1, |g, d| {
            let x = g.input("x", d, shape!["n", "s", 8])?;
            let padded = x.pad(&[(0, 0), (1, 2), (0, 0)], -1.5)?;
            g.concat(&[&x, &padded], 1)
        }),
        ("slice_step_reduce", 1, |g, d| {
            let x = g.input("x", d, shape!["n", "s", 40])?;
            let every_other = x.slice(&[
                SliceRange::FULL,
                SliceRange {
                    start: 1,
                    stop: None,
                    step: 2,
                },
                SliceRange::FULL,
            ])?;
            every_other.sum(&[2], false)
        }),
        ("conv_flatten", 18, |g, d| {
            // A convolution over a symbolic batch whose output is flattened per image and
            // joined with a symbolic-length row.
            let w = g.input("w", d, shape![6, 2, 3, 3])?;
            let y = g.input("x", d, shape!["n", 2, 5, 5])?.conv(
                &w,
                &[2, 1],
                &[1, 1],
                &[(1, 1), (0, 1)],
                1,
            )?;
            let flat = y.reshape(&["n".into(), ReshapeDim::Infer])?;
            let extra = g.input("e", d, shape!["n", "s"])?;
            g.concat(&[&flat, &extra], 1)
        }),
    ];
    for d in [DType::F32, DType::F16] {
        for (shape_name, k, build) in cases {
            let g = GraphBuilder::new();
            g.output("y", &build(&g, d)?)?;
            let bindings: Vec<Binding> = [(1, 3), (3, 5), (2, 70)]
                .iter()
                .map(|&(n, s)| vec![("n", n), ("s", s)])
                .collect();
            c.add(
                format!("op/expression_dims/{d}/{shape_name}"),
                g.finish()?,
                &bindings,
                &|_| Values::Uniform(-1.0, 3.0),
                Tolerance::matmul(k),
            );
        }
    }
    Ok(())
}

fn gathers(c: &mut Corpus) -> Result<()> {
    for d in DType::ALL {
        for index in [DType::I32, DType::I64] {
            // An embedding lookup (axis 0, 2-D indices) and a gather along the last axis.
            let g = GraphBuilder::new();
            let table = g.input("x", d, shape![10, 6])?;
            let idx = g.input("idx", index, shape![4, 3])?;
            g.output("y", &table.gather(&idx, 0)?)?;
            let values = |n: &str| {
                if n == "idx" {
                    Values::Below(10)
                } else {
                    Values::Default
                }
            };
            let name = format!("op/gather/{d}/{index}_axis0");
            c.add(name, g.finish()?, &no_binding(), &values, Tolerance::EXACT);

            let g = GraphBuilder::new();
            let data = g.input("x", d, shape![5, 12])?;
            let idx = g.input("idx", index, shape![7])?;
            g.output("y", &data.gather(&idx, 1)?)?;
            let values = |n: &str| {
                if n == "idx" {
                    Values::Below(12)
                } else {
                    Values::Default
                }
            };
            let name = format!("op/gather/{d}/{index}_axis1");
            c.add(name, g.finish()?, &no_binding(), &values, Tolerance::EXACT);
        }
    }
    Ok(())
}

/// State updates of every dtype, each over several runs of one executable: the output reads the
/// state's value from the start of the run.
fn state_ops(c: &mut Corpus) -> Result<()> {
    for d in DType::ALL {
        // state_assign: the state becomes the input; the output shows the previous one.
        let g = GraphBuilder::new();
        let s = g.state("s", d, shape![4, 9])?;
        let x = g.input("x", d, shape![4, 9])?;
        s.assign(&x)?;
        g.output("y", &g.concat(&[&s, &x], 0)?)?;
        let graph = g.finish()?;
        let name = format!("op/state_assign/{d}/three_runs");
        let runs = (0..3)
            .map(|run| c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default))
            .collect();
        c.add_runs(name, graph, runs, Tolerance::EXACT);

        // state_write_slice at a static start.
        let g = GraphBuilder::new();
        let s = g.state("s", d, shape![8, 5])?;
        let x = g.input("x", d, shape![3, 5])?;
        s.write_slice(&x, 0, 2)?;
        g.output("y", &s.slice_axis(0, 1, 6)?)?;
        let graph = g.finish()?;
        let name = format!("op/state_write_slice/{d}/static_start");
        let runs = (0..2)
            .map(|run| c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default))
            .collect();
        c.add_runs(name, graph, runs, Tolerance::EXACT);

        // state_write_slice at a run-time position, along the middle axis.
        let g = GraphBuilder::new();
        let s = g.state("s", d, shape![2, 6, 3])?;
        let x = g.input("x", d, shape![2, 1, 3])?;
        let pos = g.input("pos", DType::I64, shape![])?;
        s.write_slice_at(&x, 1, &pos)?;
        g.output("y", &s.permute(&[1, 0, 2])?)?;
        let graph = g.finish()?;
        let name = format!("op/state_write_slice/{d}/runtime_position");
        let runs = [0u64, 1, 5, 2]
            .iter()
            .enumerate()
            .map(|(run, &p)| {
                let mut s = c.sources(&name, &graph, &Vec::new(), run, &|_| Values::Default);
                s.insert("pos".into(), super::scalar(DType::I64, p as f64));
                s
            })
            .collect();
        c.add_runs(name, graph, runs, Tolerance::EXACT);
    }
    Ok(())
}

/// Sources of every dtype used directly: a constant joined to an input, a parameter read through
/// a layout op, and an input that is itself an output.
fn sources(c: &mut Corpus) -> Result<()> {
    for d in DType::ALL {
        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![2, 3])?;
        let k = g.constant(d, shape![1, 3], &[1.0, 0.0, 1.0])?;
        g.output("y", &g.concat(&[&x, &k], 0)?)?;
        let name = format!("op/constant/{d}/concat");
        c.add_static(name, g.finish()?, Values::Default, Tolerance::EXACT);

        let g = GraphBuilder::new();
        let p = g.parameter("p", d, shape![3, 4])?;
        g.output("y", &p.transpose()?)?;
        let name = format!("op/parameter/{d}/transposed");
        c.add_static(name, g.finish()?, Values::Default, Tolerance::EXACT);

        let g = GraphBuilder::new();
        let x = g.input("x", d, shape![5])?;
        g.output("y", &x)?;
        g.output("y_again", &x)?;
        let name = format!("op/input/{d}/is_the_output");
        c.add_static(name, g.finish()?, Values::Default, Tolerance::EXACT);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unary_op_has_a_spec_that_type_checks() {
        for u in UnaryOp::ALL {
            let (dtypes, _, _) = unary_spec(u);
            for d in dtypes {
                let g = GraphBuilder::new();
                let x = g.input("x", d, shape![2]).unwrap();
                assert!(x.apply_unary(u).is_ok(), "{} {d}", u.name());
            }
        }
    }
}
