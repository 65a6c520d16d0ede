//! Index arithmetic, and what is known of its values: divisors (from constants, dims assumed
//! divisible and arithmetic on them) and bounds, told to `tileiras` with `assume` so that views
//! get aligned, vectorized and TMA accesses.

use super::{Translator, DIM_BOUND, MAX_KNOWN_DIVISOR};
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{Attribute, Bounded, DivBy, Value};
use tir_lower::tile::{IndexOp, ValueId};

impl Translator<'_> {
    pub(super) fn index_arith(&mut self, op: IndexOp, a: Value, b: Value) -> Value {
        let e = &mut self.e;
        match op {
            IndexOp::Add => e.addi(a, b),
            IndexOp::Sub => e.subi(a, b),
            IndexOp::Mul => e.muli(a, b),
            IndexOp::Div => e.divi(a, b, true),
            IndexOp::Rem => e.signed_op(Opcode::RemI, a, b, true),
            IndexOp::Min => e.signed_op(Opcode::MinI, a, b, true),
            IndexOp::Max => e.signed_op(Opcode::MaxI, a, b, true),
        }
    }

    /// The largest power of two (at most [`MAX_KNOWN_DIVISOR`]) known to divide index `id`:
    /// 0 is divided by every one, a dim or a program id by 1 only.
    pub(super) fn divisor(&self, id: ValueId) -> i64 {
        match self.consts.get(&id) {
            Some(0) => MAX_KNOWN_DIVISOR,
            Some(&c) => (1i64 << c.trailing_zeros().min(62)).min(MAX_KNOWN_DIVISOR),
            None => self.divisors.get(&id).copied().unwrap_or(1),
        }
    }

    /// What divides `a op b` given what divides `a` and `b`: a sum, difference, minimum or
    /// maximum keeps the smaller power of two, a product multiplies them.
    pub(super) fn arith_divisor(&self, op: IndexOp, a: ValueId, b: ValueId) -> i64 {
        let (x, y) = (self.divisor(a), self.divisor(b));
        match op {
            IndexOp::Add | IndexOp::Sub | IndexOp::Min | IndexOp::Max => x.min(y),
            IndexOp::Mul => x.saturating_mul(y).min(MAX_KNOWN_DIVISOR),
            IndexOp::Div | IndexOp::Rem => 1,
        }
    }

    /// `v` (of type `ty`) with the compiler told that `divisor` divides it, when it is more
    /// than 1.
    pub(super) fn assume_div_by(&mut self, v: Value, divisor: i64) -> Value {
        if divisor <= 1 {
            return v;
        }
        let ty = self.e.ty(v);
        let predicate = Attribute::DivBy(DivBy {
            divisor: divisor as u64,
            every: None,
            along: None,
        });
        self.e
            .op1(Opcode::Assume, &[v], vec![("predicate", predicate)], ty)
    }

    /// The extent or stride `v` of a view, which `divisor` divides, clamped to
    /// `0..=DIM_BOUND` (exact in an entry for dims that [`DIM_BOUND`] bounds; see there), with
    /// the compiler told so and that `divisor` still divides it.
    pub(super) fn within_bound(&mut self, v: Value, divisor: i64) -> Value {
        let zero = self.e.index_const(0);
        let bound = self.e.index_const(DIM_BOUND);
        let v = self.e.signed_op(Opcode::MaxI, v, zero, true);
        let v = self.e.signed_op(Opcode::MinI, v, bound, true);
        let v = self.assume_bounded(v, DIM_BOUND);
        self.assume_div_by(v, divisor)
    }

    /// `v` with the compiler told that it lies in `0..=max`.
    pub(super) fn assume_bounded(&mut self, v: Value, max: i64) -> Value {
        let ty = self.e.ty(v);
        let predicate = Attribute::Bounded(Bounded {
            lb: Some(0),
            ub: Some(max),
        });
        self.e
            .op1(Opcode::Assume, &[v], vec![("predicate", predicate)], ty)
    }

    pub(super) fn fold(&self, op: IndexOp, a: ValueId, b: ValueId) -> Option<i64> {
        let (x, y) = (*self.consts.get(&a)?, *self.consts.get(&b)?);
        match op {
            IndexOp::Add => x.checked_add(y),
            IndexOp::Sub => x.checked_sub(y),
            IndexOp::Mul => x.checked_mul(y),
            IndexOp::Div => x.checked_div(y),
            IndexOp::Rem => x.checked_rem(y),
            IndexOp::Min => Some(x.min(y)),
            IndexOp::Max => Some(x.max(y)),
        }
    }
}
