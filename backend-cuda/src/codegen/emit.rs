//! A thin layer over `cutile_ir`'s builder: appends ops to the current block and spells the
//! attributes each op needs (rounding, signedness, overflow, segment sizes) in one place.

use cutile_ir::builder::{append_op, build_single_block_region};
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{
    Attribute, BlockId, DenseElements, Location, Module, PointerType, RegionId, ScalarType,
    TileElementType, TileType, Type, Value,
};
use cutile_ir::OpBuilder;
use tir_graph::float8::{F8E4M3, F8E5M2};
use tir_graph::DType;

/// The Tile IR element type a tile of `dtype` has in registers (bool is `i1`; signedness is
/// carried by the ops, not the type).
pub fn reg_scalar(dtype: DType) -> ScalarType {
    match dtype {
        DType::Bool => ScalarType::I1,
        DType::I8 | DType::U8 => ScalarType::I8,
        DType::I16 | DType::U16 => ScalarType::I16,
        DType::I32 | DType::U32 => ScalarType::I32,
        DType::I64 | DType::U64 => ScalarType::I64,
        DType::F16 => ScalarType::F16,
        DType::BF16 => ScalarType::BF16,
        DType::F32 => ScalarType::F32,
        DType::F64 => ScalarType::F64,
        DType::F8E4M3 => ScalarType::F8E4M3FN,
        DType::F8E5M2 => ScalarType::F8E5M2,
    }
}

/// The element type of `dtype` in memory: bool is stored as one byte.
pub fn mem_scalar(dtype: DType) -> ScalarType {
    match dtype {
        DType::Bool => ScalarType::I8,
        d => reg_scalar(d),
    }
}

pub fn tile(elem: ScalarType, shape: &[i64]) -> Type {
    Type::Tile(TileType {
        shape: shape.to_vec(),
        element_type: TileElementType::Scalar(elem),
    })
}

pub fn ptr_tile(pointee: ScalarType, shape: &[i64]) -> Type {
    Type::Tile(TileType {
        shape: shape.to_vec(),
        element_type: TileElementType::Pointer(Box::new(PointerType { pointee })),
    })
}

pub fn is_float(s: ScalarType) -> bool {
    matches!(
        s,
        ScalarType::F16
            | ScalarType::BF16
            | ScalarType::F32
            | ScalarType::F64
            | ScalarType::F8E4M3FN
            | ScalarType::F8E5M2
    )
}

pub fn bits(s: ScalarType) -> u32 {
    match s {
        ScalarType::I1 => 1,
        ScalarType::I8 | ScalarType::F8E4M3FN | ScalarType::F8E5M2 => 8,
        ScalarType::I16 | ScalarType::F16 | ScalarType::BF16 => 16,
        ScalarType::I64 | ScalarType::F64 => 64,
        _ => 32,
    }
}

fn i32_attr(v: i64) -> Attribute {
    Attribute::i32(v)
}

/// Integer comparison predicates, as Tile IR numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pred {
    Eq = 0,
    Ne = 1,
    Lt = 2,
    Le = 3,
    Gt = 4,
    Ge = 5,
}

/// Appends ops to one block of a module.
pub struct Emitter {
    pub module: Module,
    pub block: BlockId,
}

impl Emitter {
    /// Appends `opcode` with `operands`, `attrs` and `results`, returning the result values.
    pub fn op(
        &mut self,
        opcode: Opcode,
        operands: &[Value],
        attrs: Vec<(&str, Attribute)>,
        results: Vec<Type>,
    ) -> Vec<Value> {
        let mut b = OpBuilder::new(opcode, Location::Unknown)
            .operands(operands.iter().copied())
            .results(results);
        for (name, a) in attrs {
            b = b.attr(name, a);
        }
        let (op, values) = b.build(&mut self.module);
        append_op(&mut self.module, self.block, op);
        values
    }

    pub fn op1(
        &mut self,
        opcode: Opcode,
        operands: &[Value],
        attrs: Vec<(&str, Attribute)>,
        result: Type,
    ) -> Value {
        self.op(opcode, operands, attrs, vec![result])[0]
    }

    /// Appends an op that owns `region`.
    pub fn region_op(
        &mut self,
        opcode: Opcode,
        operands: &[Value],
        attrs: Vec<(&str, Attribute)>,
        results: Vec<Type>,
        region: RegionId,
    ) -> Vec<Value> {
        let mut b = OpBuilder::new(opcode, Location::Unknown)
            .operands(operands.iter().copied())
            .results(results)
            .region(region);
        for (name, a) in attrs {
            b = b.attr(name, a);
        }
        let (op, values) = b.build(&mut self.module);
        append_op(&mut self.module, self.block, op);
        values
    }

    /// Makes a single-block region with `args` and runs `body` with it as the current block.
    pub fn in_region<R>(
        &mut self,
        args: &[Type],
        body: impl FnOnce(&mut Emitter, &[Value]) -> R,
    ) -> (RegionId, R) {
        let (region, block, values) = build_single_block_region(&mut self.module, args);
        let outer = std::mem::replace(&mut self.block, block);
        let r = body(self, &values);
        self.block = outer;
        (region, r)
    }

    pub fn ty(&self, v: Value) -> Type {
        self.module.value_type(v).clone()
    }

    pub fn shape(&self, v: Value) -> Vec<i64> {
        match self.module.value_type(v) {
            Type::Tile(t) => t.shape.clone(),
            _ => Vec::new(),
        }
    }

    pub fn elem(&self, v: Value) -> ScalarType {
        match self.module.value_type(v) {
            Type::Tile(TileType {
                element_type: TileElementType::Scalar(s),
                ..
            }) => *s,
            _ => ScalarType::I64,
        }
    }

    /// A scalar constant (`tile<elem>`); integers are taken from `value` truncated toward zero
    /// and wrapped to the width.
    pub fn scalar_const(&mut self, elem: ScalarType, value: f64) -> Value {
        let data = const_bytes(elem, value);
        let ty = tile(elem, &[]);
        self.op1(
            Opcode::Constant,
            &[],
            vec![(
                "value",
                Attribute::DenseElements(DenseElements {
                    element_type: ty.clone(),
                    shape: vec![],
                    data,
                }),
            )],
            ty,
        )
    }

    /// A tile of `shape` filled with `value`.
    pub fn constant(&mut self, elem: ScalarType, value: f64, shape: &[i64]) -> Value {
        let s = self.scalar_const(elem, value);
        self.splat(s, shape)
    }

    pub fn index_const(&mut self, value: i64) -> Value {
        self.scalar_const(ScalarType::I64, value as f64)
    }

    /// Broadcasts the scalar tile `x` to `shape`.
    pub fn splat(&mut self, x: Value, shape: &[i64]) -> Value {
        if shape.is_empty() {
            return x;
        }
        let ones = vec![1; shape.len()];
        let r = self.reshape(x, &ones);
        self.broadcast(r, shape)
    }

    /// The type of `x` (a tile of numbers or pointers) with another shape.
    fn reshaped_type(&self, x: Value, shape: &[i64]) -> Type {
        match self.module.value_type(x) {
            Type::Tile(t) => Type::Tile(TileType {
                shape: shape.to_vec(),
                element_type: t.element_type.clone(),
            }),
            other => other.clone(),
        }
    }

    pub fn reshape(&mut self, x: Value, shape: &[i64]) -> Value {
        if self.shape(x) == shape {
            return x;
        }
        let t = self.reshaped_type(x, shape);
        self.op1(Opcode::Reshape, &[x], vec![], t)
    }

    pub fn broadcast(&mut self, x: Value, shape: &[i64]) -> Value {
        if self.shape(x) == shape {
            return x;
        }
        let t = self.reshaped_type(x, shape);
        self.op1(Opcode::Broadcast, &[x], vec![], t)
    }

    /// A binary op on two values of one type whose result has that type.
    pub fn same(
        &mut self,
        opcode: Opcode,
        a: Value,
        b: Value,
        attrs: Vec<(&str, Attribute)>,
    ) -> Value {
        let t = self.ty(a);
        self.op1(opcode, &[a, b], attrs, t)
    }

    pub fn addi(&mut self, a: Value, b: Value) -> Value {
        self.same(Opcode::AddI, a, b, vec![("overflow", i32_attr(0))])
    }

    pub fn subi(&mut self, a: Value, b: Value) -> Value {
        self.same(Opcode::SubI, a, b, vec![("overflow", i32_attr(0))])
    }

    pub fn muli(&mut self, a: Value, b: Value) -> Value {
        self.same(Opcode::MulI, a, b, vec![("overflow", i32_attr(0))])
    }

    /// Division truncating toward zero.
    pub fn divi(&mut self, a: Value, b: Value, signed: bool) -> Value {
        self.same(
            Opcode::DivI,
            a,
            b,
            vec![
                ("signedness", i32_attr(signed as i64)),
                ("rounding", i32_attr(1)),
            ],
        )
    }

    pub fn signed_op(&mut self, opcode: Opcode, a: Value, b: Value, signed: bool) -> Value {
        self.same(opcode, a, b, vec![("signedness", i32_attr(signed as i64))])
    }

    /// A float op with round-to-nearest-even.
    pub fn float_op(&mut self, opcode: Opcode, a: Value, b: Value) -> Value {
        self.same(opcode, a, b, vec![("rounding_mode", i32_attr(0))])
    }

    /// `a / b` in `f32` by the hardware's approximate reciprocal (about 2 ulp of `f32`; a
    /// divisor of magnitude 2^126 or more gives 0): for values that round to f16 after, or feed
    /// an approximation already coarser.
    pub fn div_approx(&mut self, a: Value, b: Value) -> Value {
        self.same(Opcode::DivF, a, b, vec![("rounding_mode", i32_attr(4))])
    }

    /// `e^(factor · (x − shift))` in `f32`, `shift` repeated to `x`'s shape: one fused
    /// multiply-add `x · c − shift · c` (`c = factor · log2 e`, `shift · c` computed before
    /// the repeat) and the hardware's `ex2` approximation (a few ulp, subnormals flushed).
    pub fn scaled_exp_approx(&mut self, x: Value, shift: Value, factor: f64) -> Value {
        let c = factor * std::f64::consts::LOG2_E;
        let minus_c = self.like(shift, -c);
        let offset = self.float_op(Opcode::MulF, shift, minus_c);
        let offset = self.broadcast(offset, &self.shape(x));
        let c = self.like(x, c);
        let y = self.fma(x, c, offset);
        self.unary(
            Opcode::Exp2,
            y,
            vec![("flush_to_zero", Attribute::Bool(true))],
        )
    }

    /// `a * b + c` rounded once.
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        let t = self.ty(a);
        self.op1(
            Opcode::Fma,
            &[a, b, c],
            vec![("rounding_mode", i32_attr(0))],
            t,
        )
    }

    /// NaN-propagating max/min of floats.
    pub fn float_extreme(&mut self, max: bool, a: Value, b: Value) -> Value {
        let opcode = if max { Opcode::MaxF } else { Opcode::MinF };
        self.same(opcode, a, b, vec![("propagate_nan", i32_attr(1))])
    }

    pub fn unary(&mut self, opcode: Opcode, x: Value, attrs: Vec<(&str, Attribute)>) -> Value {
        let t = self.ty(x);
        self.op1(opcode, &[x], attrs, t)
    }

    /// Integer comparison yielding an `i1` tile.
    pub fn cmpi(&mut self, pred: Pred, a: Value, b: Value, signed: bool) -> Value {
        let t = tile(ScalarType::I1, &self.shape(a));
        self.op1(
            Opcode::CmpI,
            &[a, b],
            vec![
                ("comparison_predicate", i32_attr(pred as i64)),
                ("signedness", i32_attr(signed as i64)),
            ],
            t,
        )
    }

    /// Float comparison yielding an `i1` tile: ordered, except `Ne`, which is unordered (true
    /// when either side is NaN), as in IEEE and the oracle.
    pub fn cmpf(&mut self, pred: Pred, a: Value, b: Value) -> Value {
        let t = tile(ScalarType::I1, &self.shape(a));
        let ordering = if pred == Pred::Ne { 0 } else { 1 };
        self.op1(
            Opcode::CmpF,
            &[a, b],
            vec![
                ("comparison_predicate", i32_attr(pred as i64)),
                ("comparison_ordering", i32_attr(ordering)),
            ],
            t,
        )
    }

    pub fn select(&mut self, cond: Value, a: Value, b: Value) -> Value {
        let t = self.ty(a);
        self.op1(Opcode::Select, &[cond, a, b], vec![], t)
    }

    /// Float to float conversion (round to nearest even).
    pub fn ftof(&mut self, x: Value, to: ScalarType) -> Value {
        if self.elem(x) == to {
            return x;
        }
        let t = tile(to, &self.shape(x));
        self.op1(Opcode::FToF, &[x], vec![("rounding_mode", i32_attr(0))], t)
    }

    /// Integer to integer: sign- or zero-extends, or truncates (wrapping).
    pub fn int_resize(&mut self, x: Value, to: ScalarType, signed: bool) -> Value {
        let from = self.elem(x);
        let t = tile(to, &self.shape(x));
        match bits(from).cmp(&bits(to)) {
            std::cmp::Ordering::Equal => x,
            std::cmp::Ordering::Less => self.op1(
                Opcode::ExtI,
                &[x],
                vec![("signedness", i32_attr(signed as i64))],
                t,
            ),
            std::cmp::Ordering::Greater => {
                self.op1(Opcode::TruncI, &[x], vec![("overflow", i32_attr(0))], t)
            }
        }
    }

    pub fn itof(&mut self, x: Value, to: ScalarType, signed: bool) -> Value {
        let t = tile(to, &self.shape(x));
        self.op1(
            Opcode::IToF,
            &[x],
            vec![
                ("signedness", i32_attr(signed as i64)),
                ("rounding_mode", i32_attr(0)),
            ],
            t,
        )
    }

    /// Float to integer, truncating toward zero.
    pub fn ftoi(&mut self, x: Value, to: ScalarType, signed: bool) -> Value {
        let t = tile(to, &self.shape(x));
        self.op1(
            Opcode::FToI,
            &[x],
            vec![
                ("signedness", i32_attr(signed as i64)),
                ("rounding_mode", i32_attr(6)),
            ],
            t,
        )
    }

    /// `ptr + offset` elements (a pointer tile of `offset`'s shape).
    pub fn offset(&mut self, ptr: Value, offset: Value) -> Value {
        let shape = self.shape(offset);
        let ptr = self.splat(ptr, &shape);
        let t = self.ty(ptr);
        self.op1(Opcode::Offset, &[ptr, offset], vec![], t)
    }

    /// A token-less load of the pointer tile `ptrs`, masked when `mask` is given (masked-off
    /// lanes read `padding`, a tile of the result's type).
    pub fn load_ptr(
        &mut self,
        ptrs: Value,
        elem: ScalarType,
        masked: Option<(Value, Value)>,
    ) -> Value {
        let shape = self.shape(ptrs);
        let mut operands = vec![ptrs];
        let segments = match masked {
            Some((mask, padding)) => {
                operands.extend([mask, padding]);
                vec![1, 1, 1, 0]
            }
            None => vec![1, 0, 0, 0],
        };
        self.op(
            Opcode::LoadPtrTko,
            &operands,
            vec![
                ("memory_ordering_semantics", i32_attr(0)),
                ("operandSegmentSizes", segments_attr(&segments)),
            ],
            vec![tile(elem, &shape), Type::Token],
        )[0]
    }

    /// An unmasked load through the pointer tile `ptrs`, after `token` when given; returns the
    /// tile and the next token.
    pub fn load_ptr_token(
        &mut self,
        ptrs: Value,
        elem: ScalarType,
        token: Option<Value>,
    ) -> (Value, Value) {
        let shape = self.shape(ptrs);
        let mut operands = vec![ptrs];
        operands.extend(token);
        let out = self.op(
            Opcode::LoadPtrTko,
            &operands,
            vec![
                ("memory_ordering_semantics", i32_attr(0)),
                (
                    "operandSegmentSizes",
                    segments_attr(&[1, 0, 0, token.is_some() as i64]),
                ),
            ],
            vec![tile(elem, &shape), Type::Token],
        );
        (out[0], out[1])
    }

    /// Stores `value` through the pointer tile `ptrs` after `token`; returns the next token.
    pub fn store_ptr(&mut self, ptrs: Value, value: Value, token: Value) -> Value {
        self.op1(
            Opcode::StorePtrTko,
            &[ptrs, value, token],
            vec![
                ("memory_ordering_semantics", i32_attr(0)),
                ("operandSegmentSizes", segments_attr(&[1, 1, 0, 1])),
            ],
            Type::Token,
        )
    }
}

pub fn segments_attr(sizes: &[i64]) -> Attribute {
    Attribute::Array(sizes.iter().map(|&s| i32_attr(s)).collect())
}

/// The 64-bit word of the integer `value`: an `i64` value saturates (`i64::MAX` is 2^63 as an
/// `f64`, and so are the "no index" markers of argmax); only a `u64` value past 2^63 (the
/// identity of a `u64` min reduction; `u64` constants stay below 2^63) is taken as its bits.
pub fn int_bits(value: f64) -> i64 {
    if value > 2f64.powi(63) {
        value as u64 as i64
    } else {
        value as i64
    }
}

/// The little-endian bytes of `value` as one element of `elem`.
fn const_bytes(elem: ScalarType, value: f64) -> Vec<u8> {
    let int = if value.is_finite() { value as i128 } else { 0 };
    match elem {
        ScalarType::I1 => vec![(value != 0.0) as u8],
        ScalarType::I8 => vec![int as i8 as u8],
        ScalarType::I16 => (int as i16).to_le_bytes().to_vec(),
        ScalarType::I32 => (int as i32).to_le_bytes().to_vec(),
        ScalarType::I64 => int_bits(value).to_le_bytes().to_vec(),
        ScalarType::F16 => half::f16::from_f64(value).to_le_bytes().to_vec(),
        ScalarType::BF16 => half::bf16::from_f64(value).to_le_bytes().to_vec(),
        ScalarType::F64 => value.to_le_bytes().to_vec(),
        // As the reference stores a constant: rounded by the IR's f8 rule, except that an
        // f8e5m2 infinity is kept (`DType::const_value`).
        ScalarType::F8E4M3FN => vec![F8E4M3::from_f64(value).0],
        ScalarType::F8E5M2 => vec![F8E5M2::from_value(value).0],
        _ => (value as f32).to_le_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::int_bits;

    #[test]
    fn int_bits_saturate_signed_values_and_keep_u64_identities() {
        // argmax's "no index yet" marker is i64::MAX, which an f64 holds as 2^63.
        assert_eq!(int_bits(i64::MAX as f64), i64::MAX);
        assert_eq!(int_bits(i64::MIN as f64), i64::MIN);
        assert_eq!(int_bits(-5.0), -5);
        let u64_min_identity = 18_446_744_073_709_549_568.0;
        assert_eq!(
            int_bits(u64_min_identity) as u64,
            18_446_744_073_709_549_568
        );
    }
}
