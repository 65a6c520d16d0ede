//! Program ids: the launch grid is one-dimensional, so each axis's id is recovered from the
//! block id by division, row-major or in groups of rows ([`super::KernelHints::group_rows`]); a
//! persistent entry ([`super::KernelHints::persistent`]) loops over tile ids instead.

use super::order;
use super::{index_ty, Res, Translator};
use crate::codegen::emit::tile;
use cutile_ir::builder::build_single_block_region;
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{ScalarType, Value};
use tir_lower::tile::Block;

impl Translator<'_> {
    /// The flat tile-block id as `i64`.
    fn block_id(&mut self) -> Value {
        if let Some(v) = self.block_id {
            return v;
        }
        let v = self.grid_query(Opcode::GetTileBlockId);
        self.block_id = Some(v);
        v
    }

    /// The x component of a grid query (`GetTileBlockId`, `GetNumTileBlocks`) as `i64`; the
    /// launch grid is one-dimensional.
    fn grid_query(&mut self, opcode: Opcode) -> Value {
        let i32t = tile(ScalarType::I32, &[]);
        let xyz = self
            .e
            .op(opcode, &[], vec![], vec![i32t.clone(), i32t.clone(), i32t]);
        self.e.int_resize(xyz[0], ScalarType::I64, false)
    }

    /// `body` once per tile of the grid, for a persistent entry: block `b` of `B` runs tiles
    /// `b, b + B, ...` below the product of the grid's extents, each with its flat id as the
    /// block id. Tiles write disjoint regions (what the kernel's certificate proves of tile
    /// blocks), so running several in one block in any order computes the same.
    pub(super) fn tile_loop(&mut self, body: &Block) -> Res<()> {
        let first = self.block_id();
        let tiles = self.tile_count();
        let blocks = self.grid_query(Opcode::GetNumTileBlocks);
        let (region, block, ids) = build_single_block_region(&mut self.e.module, &[index_ty()]);
        let outer = std::mem::replace(&mut self.e.block, block);
        self.block_id = Some(ids[0]);
        let translated = self.block(body);
        self.e.op(Opcode::Continue, &[], vec![], vec![]);
        self.e.block = outer;
        translated?;
        self.e
            .region_op(Opcode::For, &[first, tiles, blocks], vec![], vec![], region);
        Ok(())
    }

    pub(super) fn program_id(&mut self, axis: usize) -> Res<Value> {
        let flat = self.block_id();
        let rank = self.extents.len();
        if rank == 0 {
            return Ok(flat);
        }
        let flat = if self.hints.last_first == Some(true) {
            self.last_first(flat)
        } else {
            flat
        };
        if let Some(group) = self.hints.group_rows.filter(|_| axis + 2 >= rank) {
            return Ok(self.grouped_program_id(flat, axis, i64::from(group)));
        }
        Ok(self.row_major_program_id(flat, axis))
    }

    /// The number of tiles of the grid: the product of its extents.
    fn tile_count(&mut self) -> Value {
        let mut tiles = self.extents[0];
        for k in 1..self.extents.len() {
            tiles = self.e.muli(tiles, self.extents[k]);
        }
        tiles
    }

    /// The flat id `flat` counted from the grid's last tile: `tiles - 1 - flat`.
    fn last_first(&mut self, flat: Value) -> Value {
        let tiles = self.tile_count();
        let one = self.e.index_const(1);
        let last = self.e.subi(tiles, one);
        self.e.subi(last, flat)
    }

    /// Axis `axis` of the flat id `flat` over the grid's extents, row-major.
    fn row_major_program_id(&mut self, flat: Value, axis: usize) -> Value {
        let mut inner: Option<Value> = None;
        for k in axis + 1..self.extents.len() {
            let ext = self.extents[k];
            inner = Some(match inner {
                None => ext,
                Some(i) => self.e.muli(i, ext),
            });
        }
        let q = match inner {
            None => flat,
            Some(i) => self.e.divi(flat, i, true),
        };
        if axis == 0 {
            q
        } else {
            self.e.signed_op(Opcode::RemI, q, self.extents[axis], true)
        }
    }

    /// Axis `axis` (one of the last two) when the last two axes are walked in groups of
    /// `group` rows ([`order::grouped`]).
    fn grouped_program_id(&mut self, flat: Value, axis: usize, group: i64) -> Value {
        let rank = self.extents.len();
        let (rows, cols) = (self.extents[rank - 2], self.extents[rank - 1]);
        let (row, col) = order::grouped(&mut self.e, flat, rows, cols, group);
        if axis == rank - 2 {
            row
        } else {
            col
        }
    }
}
