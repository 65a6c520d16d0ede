//! The order tile blocks walk a matmul's grid in. Row-major order sweeps a whole row of output
//! tiles before the next, so blocks running together share one A row-panel but read every B
//! column-panel; grouped order walks `group` rows at a time column by column, so they share
//! both and L2 serves most operand reads.
//!
//! The arithmetic is written once over [`IndexArith`]: the code generator emits it as Tile IR
//! ([`Emitter`]) and the tests evaluate it on integers to check that it is a bijection.

use super::emit::Emitter;
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::Value;

/// Signed 64-bit index arithmetic, emitted or evaluated.
pub trait IndexArith {
    type V: Copy;
    fn constant(&mut self, c: i64) -> Self::V;
    fn add(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn div(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn rem(&mut self, a: Self::V, b: Self::V) -> Self::V;
    fn min(&mut self, a: Self::V, b: Self::V) -> Self::V;
}

impl IndexArith for Emitter {
    type V = Value;
    fn constant(&mut self, c: i64) -> Value {
        self.index_const(c)
    }
    fn add(&mut self, a: Value, b: Value) -> Value {
        self.addi(a, b)
    }
    fn sub(&mut self, a: Value, b: Value) -> Value {
        self.subi(a, b)
    }
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.muli(a, b)
    }
    fn div(&mut self, a: Value, b: Value) -> Value {
        self.divi(a, b, true)
    }
    fn rem(&mut self, a: Value, b: Value) -> Value {
        self.signed_op(Opcode::RemI, a, b, true)
    }
    fn min(&mut self, a: Value, b: Value) -> Value {
        self.signed_op(Opcode::MinI, a, b, true)
    }
}

/// The (row, column) of block `flat` of a `rows x cols` grid plane walked in groups of `group`
/// rows: block `r` is row `first + w % height` and column `w / height`, where `w` is its place
/// in its group (`r % (group * cols)`), `first` the group's first row and `height` its number
/// of rows (the last group may be shorter). Blocks past the plane (leading grid axes) wrap.
pub fn grouped<A: IndexArith>(
    a: &mut A,
    flat: A::V,
    rows: A::V,
    cols: A::V,
    group: i64,
) -> (A::V, A::V) {
    let plane = a.mul(rows, cols);
    let r = a.rem(flat, plane);
    let g = a.constant(group);
    let per_group = a.mul(g, cols);
    let group_index = a.div(r, per_group);
    let first = a.mul(group_index, g);
    let left = a.sub(rows, first);
    let height = a.min(left, g);
    let within = a.rem(r, per_group);
    let row_in_group = a.rem(within, height);
    let row = a.add(first, row_in_group);
    let col = a.div(within, height);
    (row, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ints;

    impl IndexArith for Ints {
        type V = i64;
        fn constant(&mut self, c: i64) -> i64 {
            c
        }
        fn add(&mut self, a: i64, b: i64) -> i64 {
            a + b
        }
        fn sub(&mut self, a: i64, b: i64) -> i64 {
            a - b
        }
        fn mul(&mut self, a: i64, b: i64) -> i64 {
            a * b
        }
        fn div(&mut self, a: i64, b: i64) -> i64 {
            a / b
        }
        fn rem(&mut self, a: i64, b: i64) -> i64 {
            a % b
        }
        fn min(&mut self, a: i64, b: i64) -> i64 {
            a.min(b)
        }
    }

    #[test]
    fn grouped_order_visits_every_block_once() {
        for rows in 1..=19 {
            for cols in 1..=13 {
                for group in [1, 2, 4, 8, 16] {
                    let mut seen = vec![false; (rows * cols) as usize];
                    for flat in 0..rows * cols {
                        let (r, c) = grouped(&mut Ints, flat, rows, cols, group);
                        assert!((0..rows).contains(&r) && (0..cols).contains(&c));
                        let k = (r * cols + c) as usize;
                        assert!(!seen[k], "{rows}x{cols} group {group}: ({r}, {c}) twice");
                        seen[k] = true;
                    }
                }
            }
        }
    }

    #[test]
    fn groups_walk_columns_first() {
        // 8 rows, 3 columns, groups of 4: the first 4 blocks are column 0 of rows 0..4.
        let at = |flat| grouped(&mut Ints, flat, 8, 3, 4);
        assert_eq!(
            (0..4).map(at).collect::<Vec<_>>(),
            [(0, 0), (1, 0), (2, 0), (3, 0)]
        );
        assert_eq!(at(4), (0, 1));
        assert_eq!(at(12), (4, 0));
    }
}
