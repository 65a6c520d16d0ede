//! The replay of a [`Recipe`] into a graph ([`build_graph`]): each step picks its operands among
//! the nodes built so far and its attributes from their actual types.
//!
//! Takes a recipe and the config it was drawn for. Guarantees what the [module](super) doc
//! lists for every generated graph (valid, at least one node and one result, within the
//! config's sizes, dtypes and ops), and determinism: the same recipe gives the same graph.

use super::{GraphConfig, OpKind, Recipe};
use crate::eval::SplitMix64;
use crate::infer::infer;
use crate::op::{ConstData, ExactF64};
use crate::{
    BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, ReshapeDim, Shape, SliceRange, TensorType,
    UnaryOp, MAX_RANK,
};
use std::collections::BTreeSet;

/// Replays `recipe` under `config`. Deterministic: the same recipe gives the same graph.
pub fn build_graph(config: &GraphConfig, recipe: &Recipe) -> Graph {
    let mut b = Builder {
        cfg: config,
        g: Graph::new(),
        source_names: BTreeSet::new(),
        output_names: BTreeSet::new(),
        fresh: 0,
    };
    for &(kind, seed) in &recipe.steps {
        let mut rng = Rng::new(seed);
        if b.g.is_empty() && !kind.is_source() {
            b.source(&mut rng, OpKind::Input);
        }
        let made = b.step(kind, &mut rng);
        if let Some(id) = made {
            if rng.chance(1, 8) {
                b.output(&mut rng, id);
            }
        }
    }
    let mut rng = Rng::new(recipe.seed);
    if b.g.is_empty() {
        b.source(&mut rng, OpKind::Input);
    }
    if b.g.is_empty() {
        // Even the config's dtypes and shapes failed; a scalar f32 input always works.
        let ty = TensorType::new(DType::F32, Shape::scalar());
        let name = b.source_name(&mut rng);
        b.add_source(Op::Input { name }, ty);
    }
    b.finish(&mut rng)
}

/// A small deterministic generator (splitmix64) for a step's choices.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(SplitMix64(seed ^ 0x5851_f42d_4c95_7f2d))
    }

    fn next(&mut self) -> u64 {
        self.0.next()
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo + 1)
        }
    }

    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            Some(xs[self.below(xs.len())].clone())
        }
    }

    fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            xs.swap(i, self.below(i + 1));
        }
    }

    /// A random subset of `0..n` of size `k` (distinct, in random order).
    fn distinct(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        self.shuffle(&mut all);
        all.truncate(k);
        all
    }
}

/// Name fragments with characters a text form must quote or escape.
const ODD_NAME_PARTS: &[&str] = &[
    "a b",
    "q\"t",
    "b\\s",
    "nl\n",
    "\t",
    "%0",
    "#",
    "=",
    ", ",
    "(",
    ")",
    "[1]",
    "{",
    "}",
    ":",
    ";",
    "é",
    "名前",
    "🦀",
    "\u{0}",
    "\r\n",
    " ",
    "-1",
    "1e5",
    "input",
    "nan",
    "->",
    "'",
    "`",
    "//",
    "/*",
    "\u{7f}",
    "\u{200b}",
    "\u{1b}[0m",
    "x",
    "y",
];

fn special_f64s(payloads: bool) -> Vec<f64> {
    let mut v = vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
        f64::MIN_POSITIVE,
        // The smallest subnormals of f64, f32/bf16 and f16.
        5e-324,
        1.401298464324817e-45,
        5.960464477539063e-8,
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        65504.0,
        65520.0,
        -1e-7,
        0.1,
        1.0 / 3.0,
        1e300,
        -1e-300,
        std::f64::consts::PI,
        9_007_199_254_740_993.0,
        3.4028234663852886e38,
    ];
    if payloads {
        v.extend([
            -f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::from_bits(0xfff8_0000_dead_beef),
        ]);
    }
    v
}

pub(super) fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::Bool => (0, 1),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U32 => (0, u32::MAX.into()),
        // A u64 constant is held in an i64 (see `ConstData`).
        DType::U64 => (0, i64::MAX),
        _ => (i64::MIN, i64::MAX),
    }
}

fn unary_accepts(u: UnaryOp, d: DType) -> bool {
    match u {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => d.is_numeric(),
        UnaryOp::Not => d == DType::Bool,
        UnaryOp::BitNot => d.is_int(),
        _ => d.is_float(),
    }
}

fn binary_accepts(b: BinaryOp, d: DType) -> bool {
    match b {
        BinaryOp::And | BinaryOp::Or => d == DType::Bool,
        BinaryOp::Eq | BinaryOp::Ne => true,
        BinaryOp::Pow => d.is_float(),
        b if b.is_bitwise() => d.is_int(),
        _ => d.is_numeric(),
    }
}

fn reduce_accepts(r: ReduceOp, d: DType) -> bool {
    match r {
        ReduceOp::Mean => d.is_float(),
        _ => d.is_numeric(),
    }
}

/// The product of the static dims (symbolic dims count as 1), if it fits.
fn static_part(shape: &Shape) -> Option<u64> {
    shape
        .dims()
        .iter()
        .try_fold(1u64, |acc, d| acc.checked_mul(d.as_static().unwrap_or(1)))
}

fn prime_factors(mut n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut p = 2;
    while p * p <= n {
        while n.is_multiple_of(p) {
            out.push(p);
            n /= p;
        }
        p += 1;
    }
    if n > 1 {
        out.push(n);
    }
    out
}

struct Builder<'a> {
    cfg: &'a GraphConfig,
    g: Graph,
    source_names: BTreeSet<String>,
    output_names: BTreeSet<String>,
    fresh: u32,
}

impl Builder<'_> {
    fn ty(&self, id: NodeId) -> &TensorType {
        self.g.ty(id)
    }

    fn fits(&self, ty: &TensorType) -> bool {
        ty.rank() <= MAX_RANK && static_part(&ty.shape).is_some_and(|n| n <= self.cfg.max_numel)
    }

    /// Adds a non-source op if inference accepts it and the result is within bounds.
    fn add(&mut self, op: Op, operands: &[NodeId]) -> Option<NodeId> {
        let types: Vec<&TensorType> = operands.iter().map(|&o| self.ty(o)).collect();
        let ty = infer(&op, &types).ok()?;
        if !self.fits(&ty) {
            return None;
        }
        self.g.add_node(op, operands, None).ok()
    }

    fn add_source(&mut self, op: Op, ty: TensorType) -> Option<NodeId> {
        if !self.fits(&ty) {
            return None;
        }
        let name = op.source_name().map(str::to_string);
        let id = self.g.add_node(op, &[], Some(ty)).ok()?;
        if let Some(name) = name {
            self.source_names.insert(name);
        }
        Some(id)
    }

    /// A node whose type satisfies `pred`, preferring recent ones (for deeper chains).
    fn pick(&self, rng: &mut Rng, pred: impl Fn(&TensorType) -> bool) -> Option<NodeId> {
        let c: Vec<NodeId> = self.g.node_ids().filter(|&id| pred(self.ty(id))).collect();
        if c.is_empty() {
            None
        } else if rng.chance(1, 2) {
            let k = c.len().min(4);
            Some(c[c.len() - 1 - rng.below(k)])
        } else {
            rng.pick(&c)
        }
    }

    /// A node whose type satisfies `pred`; failing that, a fresh input or parameter of a dtype
    /// satisfying `dtype_ok` (tried a few times, as the shape is random too).
    fn pick_or_make(
        &mut self,
        rng: &mut Rng,
        pred: impl Fn(&TensorType) -> bool,
        dtype_ok: impl Fn(DType) -> bool,
    ) -> Option<NodeId> {
        if rng.chance(7, 8) {
            if let Some(id) = self.pick(rng, &pred) {
                return Some(id);
            }
        }
        let dtypes: Vec<DType> = self
            .cfg
            .dtypes
            .iter()
            .copied()
            .filter(|&d| dtype_ok(d))
            .collect();
        for _ in 0..6 {
            let dtype = rng.pick(&dtypes)?;
            let ty = TensorType::new(dtype, self.fresh_shape(rng));
            if pred(&ty) {
                let kind = if rng.chance(1, 2) {
                    OpKind::Input
                } else {
                    OpKind::Parameter
                };
                return self.named_source(rng, kind, ty);
            }
        }
        self.pick(rng, &pred)
    }

    // ---- names ----

    fn fresh_name(&mut self, rng: &mut Rng, prefix: &str) -> String {
        self.fresh += 1;
        if self.cfg.odd_names && rng.chance(1, 2) {
            let parts = 1 + rng.below(3);
            let mut name: String = (0..parts)
                .map(|_| rng.pick(ODD_NAME_PARTS).unwrap_or("x"))
                .collect();
            if rng.chance(1, 3) {
                name.push_str(&self.fresh.to_string());
            }
            name
        } else {
            format!("{prefix}{}", self.fresh)
        }
    }

    fn source_name(&mut self, rng: &mut Rng) -> String {
        loop {
            let name = self.fresh_name(rng, "v");
            if !self.source_names.contains(&name) {
                return name;
            }
        }
    }

    fn output(&mut self, rng: &mut Rng, node: NodeId) {
        let mut name = self.fresh_name(rng, "out");
        if rng.chance(1, 10) {
            // An output may share a source's name.
            if let Some(src) = rng.pick(&self.source_names.iter().cloned().collect::<Vec<_>>()) {
                name = src;
            }
        }
        while self.output_names.contains(&name) {
            name = self.fresh_name(rng, "out");
        }
        if self.g.add_output(&name, node).is_ok() {
            self.output_names.insert(name);
        }
    }

    fn finish(mut self, rng: &mut Rng) -> Graph {
        if self.cfg.output_sinks {
            let outputs: BTreeSet<NodeId> = self.g.outputs().iter().map(|(_, n)| *n).collect();
            let sinks: Vec<NodeId> = self
                .g
                .node_ids()
                .filter(|&id| {
                    self.g.users(id).is_empty()
                        && !self.g.node(id).op.is_state_update()
                        && !outputs.contains(&id)
                })
                .collect();
            for id in sinks {
                self.output(rng, id);
            }
        }
        if self.g.outputs().is_empty() && self.g.state_updates().is_empty() {
            let last = NodeId(self.g.len() as u32 - 1);
            self.output(rng, last);
        }
        if rng.chance(1, 6) && !self.g.outputs().is_empty() {
            // The same node under a second name.
            let (_, node) = rng.pick(self.g.outputs()).expect("nonempty");
            self.output(rng, node);
        }
        self.g
    }

    // ---- shapes and values ----

    fn dim(&self, rng: &mut Rng) -> Dim {
        if !self.cfg.symbols.is_empty() && rng.chance(1, 6) {
            Dim::Symbolic(rng.pick(&self.cfg.symbols).expect("nonempty"))
        } else if self.cfg.zero_dims && rng.chance(1, 40) {
            Dim::Static(0)
        } else {
            Dim::Static(rng.range(1, self.cfg.max_dim.max(1)))
        }
    }

    fn random_shape(&self, rng: &mut Rng, rank: usize) -> Shape {
        let dims = (0..rank.min(MAX_RANK)).map(|_| self.dim(rng)).collect();
        Shape::new(dims).expect("valid symbols and rank")
    }

    /// A shape for a fresh source: often derived from an existing node's shape (so that
    /// binary ops and concat find partners), else random.
    fn fresh_shape(&self, rng: &mut Rng) -> Shape {
        if !self.g.is_empty() && rng.chance(1, 2) {
            let id = NodeId(rng.below(self.g.len()) as u32);
            let mut dims = self.ty(id).shape.dims().to_vec();
            if rng.chance(1, 3) {
                let drop = rng.below(dims.len() + 1);
                dims.drain(..drop);
            }
            if rng.chance(1, 3) {
                for d in dims.iter_mut() {
                    if rng.chance(1, 3) {
                        *d = Dim::Static(1);
                    }
                }
            }
            return Shape::new(dims).expect("derived from a valid shape");
        }
        let rank = rng.below(self.cfg.max_rank + 1);
        self.random_shape(rng, rank)
    }

    /// A static shape of at most `max_constant_elements` elements.
    fn constant_shape(&self, rng: &mut Rng) -> Shape {
        let dims: Vec<Dim> = self
            .fresh_shape(rng)
            .into_dims()
            .into_iter()
            .map(|d| match d {
                Dim::Symbolic(_) => Dim::Static(rng.range(1, 2)),
                d => d,
            })
            .collect();
        let shape = Shape::new(dims).expect("static dims");
        let limit = self.cfg.max_constant_elements.min(self.cfg.max_numel);
        if shape.static_numel().is_some_and(|n| n <= limit) {
            shape
        } else if rng.chance(1, 4) {
            Shape::scalar()
        } else {
            Shape::of(&[rng.range(1, limit.max(1))])
        }
    }

    fn float_value(&self, rng: &mut Rng, dtype: DType) -> f64 {
        if self.cfg.special_floats && rng.chance(1, 2) {
            let tiny = match dtype {
                DType::F16 => 2f64.powi(-24),
                DType::BF16 => 2f64.powi(-133),
                DType::F32 => 2f64.powi(-149),
                _ => f64::from_bits(1),
            };
            let headline = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, -tiny];
            let v = if rng.chance(1, 2) {
                rng.pick(&headline)
            } else {
                rng.pick(&special_f64s(self.cfg.nan_payloads))
            }
            .expect("nonempty");
            // NaNs are kept bit for bit (a constant accepts any NaN).
            return if v.is_nan() { v } else { dtype.const_value(v) };
        }
        let v = (rng.below(257) as f64 - 128.0) / 16.0;
        dtype.round_value(v)
    }

    fn int_value(&self, rng: &mut Rng, dtype: DType) -> i64 {
        let (lo, hi) = int_range(dtype);
        if self.cfg.special_floats && rng.chance(1, 2) {
            let extremes = [lo, hi, lo, hi, lo.saturating_add(1), hi - 1, 0, 1];
            return rng.pick(&extremes).expect("nonempty").clamp(lo, hi);
        }
        (rng.below(41) as i64 - 20).clamp(lo, hi)
    }

    fn const_data(&self, rng: &mut Rng, dtype: DType, n: usize) -> ConstData {
        match dtype {
            DType::Bool => ConstData::Bool((0..n).map(|_| rng.chance(1, 2)).collect()),
            d if d.is_int() => ConstData::Int((0..n).map(|_| self.int_value(rng, d)).collect()),
            d => ConstData::Float((0..n).map(|_| ExactF64(self.float_value(rng, d))).collect()),
        }
    }

    /// A pad value exact in `dtype`.
    fn pad_value(&self, rng: &mut Rng, dtype: DType) -> f64 {
        let v = match dtype {
            DType::Bool => rng.below(2) as f64,
            d if d.is_int() => self.int_value(rng, d) as f64,
            d => self.float_value(rng, d),
        };
        if dtype.holds(v) {
            v
        } else {
            0.0
        }
    }

    // ---- sources ----

    fn named_source(&mut self, rng: &mut Rng, kind: OpKind, ty: TensorType) -> Option<NodeId> {
        let name = self.source_name(rng);
        let op = match kind {
            OpKind::Input => Op::Input { name },
            OpKind::Parameter => Op::Parameter { name },
            _ => Op::State { name },
        };
        self.add_source(op, ty)
    }

    fn constant(&mut self, rng: &mut Rng, dtype: DType, shape: Shape) -> Option<NodeId> {
        let n = shape.static_numel()? as usize;
        let data = self.const_data(rng, dtype, n);
        self.add_source(Op::Constant { data }, TensorType::new(dtype, shape))
    }

    fn source(&mut self, rng: &mut Rng, kind: OpKind) -> Option<NodeId> {
        let floats: Vec<DType> = self
            .cfg
            .dtypes
            .iter()
            .copied()
            .filter(|d| d.is_float())
            .collect();
        let dtype = match rng.pick(&floats) {
            // Half the constants are floats, for the special values.
            Some(d) if kind == OpKind::Constant && rng.chance(1, 2) => d,
            _ => rng.pick(&self.cfg.dtypes)?,
        };
        if kind == OpKind::Constant {
            let shape = self.constant_shape(rng);
            return self.constant(rng, dtype, shape);
        }
        let ty = TensorType::new(dtype, self.fresh_shape(rng));
        self.named_source(rng, kind, ty)
    }

    /// A fresh source of `dtype` whose shape broadcasts with `shape`: a suffix of it with some
    /// dims set to 1. A constant when `dtype` is a config dtype and the shape allows it.
    fn partner(&mut self, rng: &mut Rng, dtype: DType, shape: &Shape) -> Option<NodeId> {
        let mut dims = shape.dims().to_vec();
        if rng.chance(1, 3) {
            let drop = rng.below(dims.len() + 1);
            dims.drain(..drop);
        }
        for d in dims.iter_mut() {
            if rng.chance(1, 4) {
                *d = Dim::Static(1);
            }
        }
        let constant_ok = self
            .cfg
            .kinds
            .iter()
            .any(|&(k, w)| k == OpKind::Constant && w > 0);
        if constant_ok && rng.chance(1, 3) {
            let dims: Vec<Dim> = dims
                .into_iter()
                .map(|d| match d {
                    Dim::Symbolic(_) => Dim::Static(1),
                    d => d,
                })
                .collect();
            let shape = Shape::new(dims).ok()?;
            if shape.static_numel()? <= self.cfg.max_constant_elements {
                return self.constant(rng, dtype, shape);
            }
            return None;
        }
        let ty = TensorType::new(dtype, Shape::new(dims).ok()?);
        let kind = if rng.chance(1, 2) {
            OpKind::Input
        } else {
            OpKind::Parameter
        };
        self.named_source(rng, kind, ty)
    }

    // ---- steps ----

    fn step(&mut self, kind: OpKind, rng: &mut Rng) -> Option<NodeId> {
        match kind {
            OpKind::Input | OpKind::Parameter | OpKind::Constant | OpKind::State => {
                self.source(rng, kind)
            }
            // A custom kernel's body comes from tir-lower (see `OpKind::Custom`).
            OpKind::Custom => None,
            OpKind::Unary => self.unary(rng),
            OpKind::Cast => {
                let x = self.pick_or_make(rng, |_| true, |_| true)?;
                let to = rng.pick(&self.cfg.dtypes)?;
                self.add(Op::Cast { to }, &[x])
            }
            OpKind::Binary => self.binary(rng),
            OpKind::Select => self.select(rng),
            OpKind::Reduce => self.reduce(rng),
            OpKind::MatMul => self.matmul(rng),
            OpKind::Conv => self.conv(rng),
            OpKind::Reshape => self.reshape(rng),
            OpKind::Permute => {
                let x = self.pick_or_make(rng, |_| true, |_| true)?;
                let rank = self.ty(x).rank();
                let perm = rng.distinct(rank, rank);
                self.add(Op::Permute { perm }, &[x])
            }
            OpKind::BroadcastTo => self.broadcast_to(rng),
            OpKind::Slice => self.slice(rng),
            OpKind::Concat => self.concat(rng),
            OpKind::Pad => self.pad(rng),
            OpKind::Squeeze => self.squeeze(rng),
            OpKind::Unsqueeze => {
                let x = self.pick_or_make(rng, |t| t.rank() < MAX_RANK, |_| true)?;
                let rank = self.ty(x).rank();
                let k = 1 + rng.below((MAX_RANK - rank).min(3));
                let axes = rng.distinct(rank + k, k);
                self.add(Op::Unsqueeze { axes }, &[x])
            }
            OpKind::Gather => self.gather(rng),
            OpKind::StateAssign => self.state_assign(rng),
            OpKind::StateWriteSlice => self.state_write_slice(rng),
            OpKind::Iota => {
                let len = self.drawn_dim(rng)?;
                self.add(Op::Iota { len }, &[])
            }
            OpKind::DimValue => {
                let dim = self.drawn_dim(rng)?;
                self.add(Op::DimValue { dim }, &[])
            }
            OpKind::Collective => self.collective(rng),
        }
    }

    /// A collective of a world of 1 to 3 devices over a numeric tensor (`reduce_scatter` on an
    /// axis the world divides).
    fn collective(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(
            rng,
            |t| t.rank() > 0 && t.dtype.is_numeric(),
            |d| d.is_numeric(),
        )?;
        let world = 1 + rng.below(3) as u32;
        let rank = self.ty(x).rank();
        let axis = rng.below(rank);
        let op = match rng.below(3) {
            0 => Op::AllReduce {
                op: [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min][rng.below(3)],
                world,
            },
            1 => Op::AllGather { axis, world },
            _ => Op::ReduceScatter { axis, world },
        };
        self.add(op, &[x])
    }

    /// A static size, a symbol, or a symbol plus one.
    fn drawn_dim(&self, rng: &mut Rng) -> Option<Dim> {
        let symbol = rng.pick(&self.cfg.symbols);
        Some(match (symbol, rng.below(3)) {
            (Some(s), 0) => Dim::Symbolic(s),
            (Some(s), 1) => Dim::Symbolic(s).offset(1).ok()?,
            _ => Dim::Static(rng.range(1, self.cfg.max_dim.max(1))),
        })
    }

    fn unary(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let u = rng.pick(&self.cfg.unary_ops)?;
        let x = self.pick_or_make(rng, |t| unary_accepts(u, t.dtype), |d| unary_accepts(u, d))?;
        self.add(Op::Unary(u), &[x])
    }

    fn binary(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let op = rng.pick(&self.cfg.binary_ops)?;
        let ok = move |d: DType| binary_accepts(op, d);
        let a = self.pick_or_make(rng, |t| ok(t.dtype), ok)?;
        let ta = self.ty(a).clone();
        let b = if rng.chance(1, 6) {
            a
        } else {
            let found = if rng.chance(5, 6) {
                self.pick(rng, |t| {
                    t.dtype == ta.dtype && ta.shape.broadcast(&t.shape).is_ok()
                })
            } else {
                None
            };
            match found {
                Some(b) => b,
                None => self.partner(rng, ta.dtype, &ta.shape)?,
            }
        };
        let (a, b) = if rng.chance(1, 2) { (a, b) } else { (b, a) };
        self.add(Op::Binary(op), &[a, b])
    }

    fn select(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let a = self.pick_or_make(rng, |_| true, |_| true)?;
        let ta = self.ty(a).clone();
        let b = match self.pick(rng, |t| {
            t.dtype == ta.dtype && ta.shape.broadcast(&t.shape).is_ok()
        }) {
            Some(b) if rng.chance(3, 4) => b,
            _ if rng.chance(1, 2) => a,
            _ => self.partner(rng, ta.dtype, &ta.shape)?,
        };
        let shape = ta.shape.broadcast(&self.ty(b).shape).ok()?;
        let cond = match self.pick(rng, |t| {
            t.dtype == DType::Bool && t.shape.broadcast(&shape).is_ok()
        }) {
            Some(c) if rng.chance(3, 4) => c,
            _ => self.partner(rng, DType::Bool, &shape)?,
        };
        self.add(Op::Select, &[cond, a, b])
    }

    fn reduce(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let op = rng.pick(&self.cfg.reduce_ops)?;
        let x = self.pick_or_make(
            rng,
            |t| t.rank() >= 1 && reduce_accepts(op, t.dtype),
            |d| reduce_accepts(op, d),
        )?;
        let rank = self.ty(x).rank();
        let k = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            1
        } else {
            1 + rng.below(rank)
        };
        let axes = rng.distinct(rank, k);
        let keepdims = rng.chance(1, 2);
        self.add(Op::Reduce { op, axes, keepdims }, &[x])
    }

    fn matmul(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let a = self.pick_or_make(
            rng,
            |t| t.rank() >= 2 && t.dtype.is_numeric(),
            DType::is_numeric,
        )?;
        let ta = self.ty(a).clone();
        let ad = ta.shape.dims();
        let k = ad[ad.len() - 1].clone();
        let batch_a = Shape::new(ad[..ad.len() - 2].to_vec()).ok()?;
        let found = self.pick(rng, |t| {
            let bd = t.shape.dims();
            t.dtype == ta.dtype
                && t.rank() >= 2
                && bd[bd.len() - 2] == k
                && Shape::new(bd[..bd.len() - 2].to_vec())
                    .is_ok_and(|batch_b| batch_a.broadcast(&batch_b).is_ok())
        });
        let b = match found {
            Some(b) if rng.chance(3, 4) => b,
            _ => {
                let mut dims: Vec<Dim> = batch_a.dims().to_vec();
                let drop = rng.below(dims.len() + 1);
                dims.drain(..drop);
                for d in dims.iter_mut() {
                    if rng.chance(1, 3) {
                        *d = Dim::Static(1);
                    }
                }
                dims.push(k);
                dims.push(self.dim(rng));
                let ty = TensorType::new(ta.dtype, Shape::new(dims).ok()?);
                self.named_source(rng, OpKind::Parameter, ty)?
            }
        };
        self.add(Op::MatMul, &[a, b])
    }

    /// A convolution of a float `[N, C, S..]` value with fresh weights: a random group count
    /// that divides `C`, kernels of 1 to 3 taps, strides and dilations of 1 or 2, padding up
    /// to 2 per side (inference skips the step when the kernel does not fit).
    fn conv(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(
            rng,
            |t| {
                (3..=5).contains(&t.rank())
                    && t.dtype.is_float()
                    && t.shape.dims()[1..]
                        .iter()
                        .all(|d| d.as_static().is_some_and(|n| n > 0))
            },
            DType::is_float,
        )?;
        let tx = self.ty(x).clone();
        let channels = tx.shape.dims()[1].as_static()?;
        let spatial = tx.rank() - 2;
        let divisors: Vec<u64> = (1..=channels).filter(|g| channels % g == 0).collect();
        let groups = rng.pick(&divisors)?;
        let out_channels = groups * rng.range(1, 3);
        let mut dims = vec![Dim::Static(out_channels), Dim::Static(channels / groups)];
        dims.extend((0..spatial).map(|_| Dim::Static(rng.range(1, 3))));
        let ty = TensorType::new(tx.dtype, Shape::new(dims).ok()?);
        let w = self.named_source(rng, OpKind::Parameter, ty)?;
        let op = Op::Conv {
            strides: (0..spatial).map(|_| rng.range(1, 2)).collect(),
            dilations: (0..spatial).map(|_| rng.range(1, 2)).collect(),
            pads: (0..spatial)
                .map(|_| (rng.range(0, 2), rng.range(0, 2)))
                .collect(),
            groups,
        };
        self.add(op, &[x, w])
    }

    fn reshape(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(rng, |_| true, |_| true)?;
        let shape = self.ty(x).shape.clone();
        let product = shape.static_numel().unwrap_or_else(|| {
            shape
                .dims()
                .iter()
                .filter_map(Dim::as_static)
                .product::<u64>()
        });
        let mut target: Vec<Dim> = shape
            .dims()
            .iter()
            .filter(|d| d.as_static().is_none())
            .cloned()
            .collect();
        // Split the static product into random factors, plus some 1s.
        let factors = if product == 0 {
            vec![0]
        } else {
            prime_factors(product)
        };
        let buckets = if factors.is_empty() {
            0
        } else {
            1 + rng.below(factors.len())
        };
        let mut parts = vec![1u64; buckets];
        for f in factors {
            let i = rng.below(buckets);
            parts[i] *= f;
        }
        target.extend(parts.into_iter().map(Dim::Static));
        for _ in 0..rng.below(3) {
            target.push(Dim::Static(1));
        }
        rng.shuffle(&mut target);
        if target.len() > MAX_RANK {
            return None;
        }
        let mut dims: Vec<ReshapeDim> = target.into_iter().map(ReshapeDim::Dim).collect();
        if !dims.is_empty() && rng.chance(2, 5) {
            let i = rng.below(dims.len());
            dims[i] = ReshapeDim::Infer;
        }
        self.add(Op::Reshape { dims }, &[x])
    }

    fn broadcast_to(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(rng, |_| true, |_| true)?;
        let mut dims: Vec<Dim> = self
            .ty(x)
            .shape
            .dims()
            .iter()
            .map(|d| {
                if *d == Dim::Static(1) && rng.chance(1, 2) {
                    self.dim(rng)
                } else {
                    d.clone()
                }
            })
            .collect();
        let room = MAX_RANK - dims.len();
        for _ in 0..rng.below(room.min(2) + 1) {
            dims.insert(0, self.dim(rng));
        }
        self.add(Op::BroadcastTo { dims }, &[x])
    }

    fn slice(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let x = self.pick_or_make(rng, |_| true, |_| true)?;
        let ranges = self
            .ty(x)
            .shape
            .dims()
            .iter()
            .map(|d| match d.as_static() {
                Some(len) if rng.chance(2, 3) => {
                    let start = rng.range(0, len);
                    let stop = if rng.chance(1, 4) {
                        None
                    } else {
                        Some(rng.range(start, len))
                    };
                    let step = 1 + rng.below(3) as u64;
                    SliceRange {
                        start,
                        stop: stop.map(Dim::Static),
                        step,
                    }
                }
                _ => SliceRange::FULL,
            })
            .collect();
        self.add(Op::Slice { ranges }, &[x])
    }

    fn concat(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let first = self.pick_or_make(
            rng,
            |t| t.shape.dims().iter().any(|d| d.as_static().is_some()),
            |_| true,
        )?;
        let t0 = self.ty(first).clone();
        let static_axes: Vec<usize> = (0..t0.rank())
            .filter(|&a| t0.shape.dims()[a].as_static().is_some())
            .collect();
        let axis = rng.pick(&static_axes)?;
        let matches = |t: &TensorType| {
            t.dtype == t0.dtype
                && t.rank() == t0.rank()
                && t.shape.dims()[axis].as_static().is_some()
                && (0..t.rank()).all(|a| a == axis || t.shape.dims()[a] == t0.shape.dims()[a])
        };
        let mut operands = vec![first];
        for _ in 0..rng.below(4) {
            let next = match rng.below(3) {
                0 => Some(first),
                1 => self.pick(rng, matches),
                _ => {
                    let mut dims = t0.shape.dims().to_vec();
                    dims[axis] = Dim::Static(rng.range(1, self.cfg.max_dim));
                    let ty = TensorType::new(t0.dtype, Shape::new(dims).ok()?);
                    self.named_source(rng, OpKind::Input, ty)
                }
            };
            operands.extend(next);
        }
        self.add(Op::Concat { axis }, &operands)
    }

    fn pad(&mut self, rng: &mut Rng) -> Option<NodeId> {
        // Mostly floats, for the special pad values.
        let float = rng.chance(3, 4);
        let x = self.pick_or_make(
            rng,
            |t| !float || t.dtype.is_float(),
            |d| !float || d.is_float(),
        )?;
        let t = self.ty(x).clone();
        let pads = t
            .shape
            .dims()
            .iter()
            .map(|d| {
                if d.as_static().is_some() && rng.chance(1, 2) {
                    (rng.range(0, 2), rng.range(0, 2))
                } else {
                    (0, 0)
                }
            })
            .collect();
        let value = ExactF64(self.pad_value(rng, t.dtype));
        self.add(Op::Pad { pads, value }, &[x])
    }

    fn squeeze(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let one = Dim::Static(1);
        let has_one = |t: &TensorType| t.shape.dims().contains(&one);
        let x = match self.pick(rng, has_one) {
            Some(x) => x,
            None => self.pick_or_make(rng, |_| true, |_| true)?,
        };
        let ones: Vec<usize> = (0..self.ty(x).rank())
            .filter(|&a| self.ty(x).shape.dims()[a] == one)
            .collect();
        let k = if ones.is_empty() {
            0
        } else {
            1 + rng.below(ones.len())
        };
        let axes = rng
            .distinct(ones.len(), k)
            .into_iter()
            .map(|i| ones[i])
            .collect();
        self.add(Op::Squeeze { axes }, &[x])
    }

    fn gather(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let data = self.pick_or_make(rng, |t| t.rank() >= 1, |_| true)?;
        let td = self.ty(data).clone();
        let axis = rng.below(td.rank());
        let room = MAX_RANK + 1 - td.rank();
        let index = |t: &TensorType| matches!(t.dtype, DType::I32 | DType::I64) && t.rank() <= room;
        let indices = match self.pick(rng, index) {
            Some(i) if rng.chance(1, 2) => i,
            _ => {
                let dtype = if rng.chance(1, 2) {
                    DType::I32
                } else {
                    DType::I64
                };
                let rank = rng.below(room.min(2) + 1);
                let dims: Vec<u64> = (0..rank).map(|_| rng.range(1, 3)).collect();
                let shape = Shape::of(&dims);
                let n = shape.static_numel()? as usize;
                let bound = td.shape.dims()[axis].as_static().unwrap_or(2).max(1) as i64;
                let values = (0..n).map(|_| rng.below(bound as usize) as i64).collect();
                let data = ConstData::Int(values);
                self.add_source(Op::Constant { data }, TensorType::new(dtype, shape))?
            }
        };
        self.add(Op::Gather { axis }, &[data, indices])
    }

    /// A state that no update writes yet, or a fresh one whose type satisfies `pred`.
    fn unwritten_state(
        &mut self,
        rng: &mut Rng,
        pred: impl Fn(&TensorType) -> bool,
    ) -> Option<NodeId> {
        let states: Vec<NodeId> = self
            .g
            .node_ids()
            .filter(|&id| {
                matches!(self.g.node(id).op, Op::State { .. })
                    && self.g.state_writer(id).is_none()
                    && pred(self.ty(id))
            })
            .collect();
        if let Some(s) = rng.pick(&states) {
            if rng.chance(3, 4) {
                return Some(s);
            }
        }
        for _ in 0..6 {
            let dtype = rng.pick(&self.cfg.dtypes)?;
            let ty = TensorType::new(dtype, self.fresh_shape(rng));
            if pred(&ty) {
                return self.named_source(rng, OpKind::State, ty);
            }
        }
        None
    }

    fn state_assign(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let state = self.unwritten_state(rng, |_| true)?;
        let ts = self.ty(state).clone();
        let value = match self.pick(rng, |t| *t == ts) {
            Some(v) if rng.chance(2, 3) => v,
            _ => self.named_source(rng, OpKind::Input, ts)?,
        };
        self.add(Op::StateAssign, &[state, value])
    }

    fn state_write_slice(&mut self, rng: &mut Rng) -> Option<NodeId> {
        let state = self.unwritten_state(rng, |t| {
            t.shape.dims().iter().any(|d| d.as_static().is_some())
        })?;
        let ts = self.ty(state).clone();
        let static_axes: Vec<usize> = (0..ts.rank())
            .filter(|&a| ts.shape.dims()[a].as_static().is_some())
            .collect();
        let axis = rng.pick(&static_axes)?;
        let capacity = ts.shape.dims()[axis].as_static()?;
        let fits_value = |t: &TensorType| {
            t.dtype == ts.dtype
                && t.rank() == ts.rank()
                && t.shape.dims()[axis]
                    .as_static()
                    .is_some_and(|n| n <= capacity)
                && (0..t.rank()).all(|a| a == axis || t.shape.dims()[a] == ts.shape.dims()[a])
        };
        let value = match self.pick(rng, fits_value) {
            Some(v) if rng.chance(1, 2) => v,
            _ => {
                let len = rng.range(capacity.min(1), capacity);
                if rng.chance(1, 2) {
                    // A slice of the state itself.
                    let start = rng.range(0, capacity - len);
                    let mut ranges = vec![SliceRange::FULL; ts.rank()];
                    ranges[axis] = SliceRange::new(start, start + len, 1);
                    self.add(Op::Slice { ranges }, &[state])?
                } else {
                    let mut dims = ts.shape.dims().to_vec();
                    dims[axis] = Dim::Static(len);
                    let ty = TensorType::new(ts.dtype, Shape::new(dims).ok()?);
                    self.named_source(rng, OpKind::Input, ty)?
                }
            }
        };
        let len = self.ty(value).shape.dims()[axis].as_static()?;
        if rng.chance(1, 2) {
            let start = Some(rng.range(0, capacity.saturating_sub(len)));
            self.add(Op::StateWriteSlice { axis, start }, &[state, value])
        } else {
            let scalar_index =
                |t: &TensorType| t.rank() == 0 && matches!(t.dtype, DType::I32 | DType::I64);
            let offset = match self.pick(rng, scalar_index) {
                Some(o) if rng.chance(1, 2) => o,
                _ => {
                    let dtype = if rng.chance(1, 2) {
                        DType::I32
                    } else {
                        DType::I64
                    };
                    let ty = TensorType::new(dtype, Shape::scalar());
                    if rng.chance(1, 2) {
                        self.named_source(rng, OpKind::Input, ty)?
                    } else {
                        let v = rng.range(0, capacity.saturating_sub(len)) as i64;
                        let data = ConstData::Int(vec![v]);
                        self.add_source(Op::Constant { data }, ty)?
                    }
                }
            };
            let op = Op::StateWriteSlice { axis, start: None };
            self.add(op, &[state, value, offset])
        }
    }
}
