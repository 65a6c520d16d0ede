//! The collective kernel.
//!
//! Takes a [`tir_opt::KernelKind::Collective`] kernel (one `all_reduce_*`, `all_gather` or
//! `reduce_scatter` alone) and emits a kernel with no grid and no body whose
//! [`LibraryCall::Collective`] names the op, its input (a shared parameter) and its output (a
//! mutable parameter written whole). Guarantees: the legality certificate of a collective (see
//! [`crate::legality`]): it reads one buffer and writes all of another, of the type the op gives.

use super::emit::KernelLowering;
use super::LowerError;
use crate::tile::{Access, LibraryCall, Region};
use tir_graph::NodeId;

impl KernelLowering<'_> {
    /// `root`'s collective, reading its operand's buffer and writing buffer `out`.
    pub fn lower_collective(&mut self, root: NodeId, out: usize) -> Result<(), LowerError> {
        let g = self.g;
        let op = g.node(root).op.clone();
        if !op.is_collective() {
            return Err(self.unsupported(format!("{op} is not a collective")));
        }
        let operand = g.operands(root)[0];
        let dtype = g.ty(root).dtype;
        let input = self
            .b
            .param(self.buffer_of[&operand], dtype, Access::Shared);
        let output = self.b.writes(out, dtype, Region::Whole);
        self.b.library = Some(LibraryCall::Collective { op, input, output });
        Ok(())
    }
}
