//! What a backend tells lowering: its fusion limits and the tile shapes its kernels use.

use serde::{Deserialize, Serialize};
use tir_opt::FusionTarget;

/// The most rows of a matmul's `m` tile that take [`TileShapes::matvec_k`] as their K step.
pub const MATVEC_M: u64 = 8;

/// The most rows of an `m` tile that take [`TileShapes::quant_matmul_k`] as the K step of a
/// product of a quantized weight.
pub const QUANT_SMALL_M: u64 = 16;

/// The most keys an attention may walk to take [`TileShapes::attention_short_m`] query blocks.
pub const SHORT_ATTENTION_KEYS: u64 = 4096;

/// Tile shapes, each a power of two.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileShapes {
    /// Elements per program of an elementwise, gather or layout kernel, filled from the
    /// innermost axis outwards.
    pub elementwise: u64,
    /// The most elements a row-reduction program holds; it takes as many whole rows as fit.
    pub row_elements: u64,
    /// Matmul output tile (`m` x `n`) and the step of its K loop.
    pub matmul_m: u64,
    /// The `n` of the matmul output tile.
    pub matmul_n: u64,
    /// The K step of a matmul's loop, in elements of K.
    pub matmul_k: u64,
    /// The `n` tile of a float matmul whose output still has [`Self::split_programs`] tiles
    /// or more at `matmul_m` by this width: a large product, where each program reads its
    /// `a` tile once for twice the outputs. 0 never widens.
    pub matmul_wide_n: u64,
    /// The K step of a matmul whose `m` tile is at most [`MATVEC_M`] rows (a matrix-vector
    /// product, say): its operands are nearly all matrix, and a longer step keeps more of it in
    /// flight per program.
    pub matvec_k: u64,
    /// The K step of a product whose `b` operand is dequantized inside the kernel (a quantized
    /// weight, see `quantized_operand` in the lowering) at an `m` tile above [`MATVEC_M`] rows
    /// and at most [`QUANT_SMALL_M`] (a small decode batch): each step then loads a packed tile
    /// as wide as a matrix-vector product's. 0 takes `matmul_k`.
    pub quant_matmul_k: u64,
    /// The largest `m` and `n` of an integer matmul tile (integers have no tensor-core path
    /// wide enough for their `i64` accumulator, so their tiles are smaller).
    pub int_matmul: u64,
    /// The largest `m` and `n` of an f32 or f64 matmul tile, and the query and key blocks of an
    /// f32 or f64 attention: their products have no tensor-core path that keeps their
    /// precision, so they run on the vector units, each accumulator a register of its own.
    pub vector_matmul_m: u64,
    /// The largest `n` of an f32 or f64 matmul tile (see `vector_matmul_m`).
    pub vector_matmul_n: u64,
    /// An attention program's block of queries, and the block of keys each step of its loop
    /// takes.
    pub attention_m: u64,
    /// The block of keys each step of an attention's key loop takes.
    pub attention_n: u64,
    /// The query block of an attention over at most [`SHORT_ATTENTION_KEYS`] keys (known when
    /// compiling), when smaller than `attention_m`: a short key walk spends more of its time
    /// outside the loop (loading its queries, storing its output), which another program on
    /// the same SM can overlap. 0 never shortens.
    pub attention_short_m: u64,
    /// Output elements per program of a general reduction, and the chunk of its reduced axis.
    pub reduction_out: u64,
    /// The chunk of a general reduction's reduced axis each loop step takes.
    pub reduction_chunk: u64,
    /// The programs a kernel needs to keep the target busy: a matmul kernel with fewer output
    /// tiles splits its K loop over up to this many programs (partial sums, then a kernel that
    /// adds them and applies the epilogue); 0 never splits.
    pub split_programs: u64,
}

impl Default for TileShapes {
    fn default() -> Self {
        TileShapes {
            elementwise: 1024,
            row_elements: 1 << 15,
            matmul_m: 64,
            matmul_n: 64,
            matmul_k: 32,
            matmul_wide_n: 0,
            matvec_k: 32,
            quant_matmul_k: 0,
            int_matmul: 64,
            vector_matmul_m: 64,
            vector_matmul_n: 64,
            attention_m: 64,
            attention_n: 64,
            attention_short_m: 0,
            reduction_out: 64,
            reduction_chunk: 256,
            split_programs: 0,
        }
    }
}

/// A backend's target: how to fuse and how to tile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Target {
    /// How to fuse: what the optimizer may put in one kernel.
    pub fusion: FusionTarget,
    /// How to tile each kind of kernel.
    pub tiles: TileShapes,
}
