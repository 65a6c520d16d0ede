//! Tuning: the tile shapes lowering uses for the GPU and the hints each kernel is compiled
//! with.
//!
//! The defaults are the choices measured best on an H100 (`bench/RESULTS.md` has the search):
//! 128x128 matmul tiles with a K step of 32, or 128x256 by 8 warps (two warpgroups) for a
//! float product that still has 264 tiles or more at that width (generated 4096³ 0.198 →
//! 0.180 ms, 8192³ 1.515 → 1.417 ms, cuBLAS's speed), walked in groups of 8 tile rows by persistent
//! entries of one tile block per SM for grids of [`PERSISTENT_MIN_TILES`] tiles or more that are
//! not matrix-vector products (4% to 10% faster than one block per tile), and a K step of
//! 128 for matrix-vector products (the decode step 15% faster than at 32), two of their blocks
//! per SM (their split kernels 12% faster); row reductions one
//! 4096-element row per tile block at occupancy 4 (a register budget that fits four blocks per
//! SM: 1.7x to 2.9x faster than two rows per block without the hint) and loaded without TMA
//! (6% to 30% faster); longer rows (their own hints kind, [`LONG_ROW`]) with warps enough for
//! 32 values a thread, in persistent blocks (one per SM) that load by TMA, so a block's next
//! row's load is in flight while it reduces this one (softmax 4096x32768 0.2115 → 0.193-0.198
//! ms; short rows got slower so); attention in blocks of 128 queries and 128 keys by 8 warps
//! (two warpgroups), which `tileiras` does not pick alone (the causal b4 h32 s2048 d128
//! workload 0.376 ms against 0.53 for its own choice at 64x128 and 0.87 at 128x128), unless a
//! program has fewer query rows;
//! an attention over at most [`tir_lower::SHORT_ATTENTION_KEYS`] keys in blocks of 64 queries
//! by one warpgroup, two blocks per SM (causal s2048 0.341 → 0.320 ms, full 0.512 → 0.492;
//! longer walks keep 128: causal s8192 1.000 ms against 1.035 at 64); a decode step's
//! attention (a query row per program) loads its keys and values without TMA, two blocks per
//! SM (the step 10% faster). f32 and f64 products and attention (on the vector units) take
//! 64x32 tiles and blocks, attention by one warpgroup at two blocks per SM (f32 all-MiniLM at
//! batch 32 x 128: 10.0 → 4.5 ms; their 128x128 tiles spilled; 32x64 gave 5.1 ms, 32x32 5.4,
//! 16x64 5.3, 32x128 5.7). Attention blocks walk the grid from its last tile (the causal
//! s8192 workload 2% faster: its longest programs start first). Kernels that
//! move less than [`SMALL_KERNEL_BYTES`] get no TMA either, unless a hint says otherwise. A matmul or
//! attention of fewer than 264 programs (two per SM) splits its K or key loop over more (the
//! decode step 0.261 → 0.216 ms: its output projection 0.048 → 0.028 ms, its attention over
//! the KV cache 0.061 → 0.036 ms; 132 and 528 gave the same splits, a K step of 64 or 256 or
//! key blocks of 64 were slower). A product of a quantized weight (dequantized in its
//! prologue) at a small batch (`m` tile of 9 to 16 rows) takes a K step of 128, as a
//! matrix-vector product does: each step loads a packed tile four times as long (on an H200 at
//! M=16: int8 4096x4096 0.0440 → 0.0248 ms, 4096x14336 0.0843 → 0.0712; fp8 row 0.0442 →
//! 0.0251 and 0.1268 → 0.0675; a step of 64 was slower for fp8, 0.185 ms).
//!
//! `TIR_TUNE` overrides them for a search, as a comma-separated list of `key=value`: a tile
//! size (`elementwise`, `row_elements`, `matmul_m`, `matmul_n`, `matmul_k`, `matmul_wide_n`
//! (0 never widens), `matvec_k`, `quant_matmul_k` (0: `matmul_k`),
//! `attention_m`, `attention_n`, `attention_short_m` (0 never shortens), `vector_matmul_m`,
//! `vector_matmul_n`), `split_programs` (any whole number; 0 never splits) or a
//! hint for every kernel of one kind (`row_reduction.occupancy=4`, `matmul.num_ctas=2`,
//! `matmul.group_rows=8`, `row_reduction.tma=0`, `matmul.load_latency=4`,
//! `matmul.persistent=0` for one block per tile, `long_row.warps=16` for the warps of a row
//! reduction over rows longer than the row budget, `attention.warps=8`, `attention.last_first=0`
//! to walk the grid from its first tile). Hints change speed, never results.

use crate::codegen::{kernel_kind, KernelHints};
use std::collections::BTreeMap;
use tir_lower::plan::buffer_bytes;
use tir_lower::tile::{TileKernel, TileOp, Type};
use tir_lower::{Program, TileShapes, MATVEC_M};

/// Kernels whose parameters hold fewer bytes than this are compiled without TMA: setting up the
/// tensor maps costs about a microsecond a launch (a chain of dependent 16x16 matmuls took
/// 2.05 µs a kernel with TMA, 1.08 without), about as long as moving a MiB from HBM.
pub const SMALL_KERNEL_BYTES: u64 = 1 << 20;

/// Grids of fewer tiles than this (two waves of one block per SM on an H100), or whose size is
/// known only at run time, get no persistent entry whatever their kind's hints say: the loop
/// makes `tileiras` emit several times the code (20 KB against 3 KB for a 16x16 matmul), which
/// cost 1.3 µs a launch in a chain of tiny matmuls and made the decode step's matrix-vector
/// products (32 to 86 tiles) 5% slower, while grids of 1024 tiles and more gained 4% to 10%.
/// Matrix-vector products (an m tile of at most [`MATVEC_M`] rows) get none either: they are
/// memory-bound, and one block per SM keeps too few loads in flight (the decode step's
/// 512-tile product of a query with its keys cost 0.02 ms more as one).
pub const PERSISTENT_MIN_TILES: i64 = 264;

/// The values of its largest tile each thread of a row reduction over rows longer than the row
/// budget holds (at most 32 warps a block): what a 4096-element row gets from the 4 warps
/// `tileiras` picks. The 4096x32768 softmax went 0.2274 → 0.2115 ms on an H100 at 32 warps (8
/// warps 0.2218, 16 warps 0.2190).
pub const LONG_ROW_VALUES_PER_THREAD: u64 = 32;

/// The hints kind of a row reduction over rows longer than the row budget
/// ([`TileShapes::row_elements`]): its own, since what suits 4096-element rows does not.
pub const LONG_ROW: &str = "long_row";

/// The environment variable that overrides the defaults.
pub const TUNE_ENV: &str = "TIR_TUNE";

/// Tile shapes, and hints per kernel kind (`matmul`, `row_reduction`, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// The tile shapes lowering aims at.
    pub tiles: TileShapes,
    /// Compiler hints by kernel kind.
    pub hints: BTreeMap<String, KernelHints>,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            tiles: TileShapes {
                elementwise: 1024,
                row_elements: 4096,
                matmul_m: 128,
                matmul_n: 128,
                matmul_k: 32,
                matmul_wide_n: 256,
                matvec_k: 128,
                quant_matmul_k: 128,
                int_matmul: 32,
                vector_matmul_m: 64,
                vector_matmul_n: 32,
                attention_m: 128,
                attention_n: 128,
                attention_short_m: 64,
                reduction_out: 64,
                reduction_chunk: 256,
                split_programs: 264,
            },
            hints: BTreeMap::from([
                (
                    "matmul".to_string(),
                    KernelHints {
                        group_rows: Some(8),
                        persistent: Some(1),
                        ..KernelHints::default()
                    },
                ),
                (
                    LONG_ROW.to_string(),
                    KernelHints {
                        persistent: Some(1),
                        ..KernelHints::default()
                    },
                ),
                (
                    "attention".to_string(),
                    KernelHints {
                        warps: Some(8),
                        last_first: Some(true),
                        ..KernelHints::default()
                    },
                ),
                (
                    "row_reduction".to_string(),
                    KernelHints {
                        occupancy: Some(4),
                        allow_tma: Some(false),
                        ..KernelHints::default()
                    },
                ),
            ]),
        }
    }
}

impl Tuning {
    /// The defaults with `$TIR_TUNE` applied; an error names the entry it cannot read.
    pub fn from_env() -> Result<Tuning, String> {
        let mut tuning = Tuning::default();
        if let Ok(spec) = std::env::var(TUNE_ENV) {
            tuning
                .apply(&spec)
                .map_err(|e| format!("{TUNE_ENV}: {e}"))?;
        }
        Ok(tuning)
    }

    /// Applies a `key=value,...` list (see the module doc).
    pub fn apply(&mut self, spec: &str) -> Result<(), String> {
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("`{entry}` is not key=value"))?;
            let number: u64 = value
                .parse()
                .map_err(|_| format!("`{entry}`: `{value}` is not a whole number"))?;
            self.set(key, number)
                .map_err(|reason| format!("`{entry}`: {reason}"))?;
        }
        Ok(())
    }

    fn set(&mut self, key: &str, value: u64) -> Result<(), String> {
        if let Some((kind, hint)) = key.split_once('.') {
            let hints = self.hints.entry(kind.to_string()).or_default();
            let small = |allowed: &[u64]| -> Result<Option<u8>, String> {
                if allowed.contains(&value) {
                    Ok(Some(value as u8))
                } else {
                    Err(format!("{hint} must be one of {allowed:?}"))
                }
            };
            match hint {
                "occupancy" => hints.occupancy = small(&(1..=32).collect::<Vec<_>>())?,
                "num_ctas" => hints.num_ctas = small(&[1, 2, 4, 8, 16])?,
                "group_rows" => hints.group_rows = small(&[1, 2, 4, 8, 16, 32])?,
                "tma" => hints.allow_tma = small(&[0, 1])?.map(|v| v == 1),
                "load_latency" => hints.load_latency = small(&(1..=10).collect::<Vec<_>>())?,
                "persistent" => hints.persistent = small(&[0, 1, 2, 3, 4])?.filter(|&n| n > 0),
                "warps" => hints.warps = small(&[1, 2, 4, 8, 16, 32])?,
                "last_first" => hints.last_first = small(&[0, 1])?.map(|v| v == 1),
                _ => {
                    return Err(format!(
                        "unknown hint `{hint}` (occupancy, num_ctas, group_rows, tma, \
                         load_latency, persistent, warps, last_first)"
                    ))
                }
            }
            return Ok(());
        }
        if key == "split_programs" {
            self.tiles.split_programs = value;
            return Ok(());
        }
        let never = matches!(
            key,
            "matmul_wide_n" | "attention_short_m" | "quant_matmul_k"
        ) && value == 0;
        if !(value.is_power_of_two() || never) {
            return Err(
                "tile sizes are powers of two (matmul_wide_n, attention_short_m and quant_matmul_k may be 0)"
                    .into(),
            );
        }
        let t = &mut self.tiles;
        let slot = match key {
            "elementwise" => &mut t.elementwise,
            "row_elements" => &mut t.row_elements,
            "matmul_m" => &mut t.matmul_m,
            "matmul_n" => &mut t.matmul_n,
            "matmul_k" => &mut t.matmul_k,
            "matmul_wide_n" => &mut t.matmul_wide_n,
            "matvec_k" => &mut t.matvec_k,
            "quant_matmul_k" => &mut t.quant_matmul_k,
            "attention_m" => &mut t.attention_m,
            "attention_n" => &mut t.attention_n,
            "attention_short_m" => &mut t.attention_short_m,
            "vector_matmul_m" => &mut t.vector_matmul_m,
            "vector_matmul_n" => &mut t.vector_matmul_n,
            _ => {
                return Err(format!(
                    "unknown key `{key}` (elementwise, row_elements, matmul_m, matmul_n, \
                     matmul_k, matmul_wide_n, matvec_k, quant_matmul_k, attention_m, attention_n, \
                     attention_short_m, vector_matmul_m, vector_matmul_n, split_programs, \
                     KIND.occupancy, KIND.num_ctas, \
                     KIND.group_rows, KIND.tma, KIND.load_latency, KIND.persistent, KIND.warps, \
                     KIND.last_first)"
                ))
            }
        };
        *slot = value;
        Ok(())
    }

    /// The hints `kernel` of `program` is compiled with: those of its kind, except that a row
    /// reduction whose rows exceed the row budget takes [`LONG_ROW`]'s (row reductions'
    /// occupancy, a budget of registers made for 4096-element rows, spills longer ones: 1184
    /// bytes a thread for 32768), the warps that hold [`LONG_ROW_VALUES_PER_THREAD`] of a
    /// tile's values each and TMA loads when it is persistent, a grid
    /// below [`PERSISTENT_MIN_TILES`] gets no persistent entry, a matrix-vector product (at
    /// most [`MATVEC_M`] rows) two blocks per SM unless its hints say otherwise (the decode
    /// step's split output projection 0.0242 → 0.0213 ms on an H100, the step 0.2026 →
    /// 0.1995 ms), and a kernel of fewer than
    /// [`SMALL_KERNEL_BYTES`] gets no TMA unless its kind's hints ask, and an attention kernel
    /// with fewer query rows per program than the tuned block (a decode step's one) gets no
    /// warp count (the count was tuned for full blocks); with at most [`MATVEC_M`] rows it
    /// gets no TMA and two blocks per SM, unless its hints say otherwise (on an H200 the
    /// decode step's attention over its 2048-position cache 0.0335 → 0.0271 ms without TMA,
    /// the step 0.185 → 0.175 ms, then 0.1665 ms at occupancy 2).
    pub fn hints_for(&self, program: &Program, kernel: &TileKernel) -> KernelHints {
        let kind = kernel_kind(&kernel.name);
        let largest = largest_tile(kernel);
        let long_row = kind == "row_reduction" && largest > self.tiles.row_elements;
        let hints_kind = if long_row { LONG_ROW } else { kind };
        let mut hints = self.hints.get(hints_kind).copied().unwrap_or_default();
        if long_row {
            let warps = (largest / (32 * LONG_ROW_VALUES_PER_THREAD)).clamp(1, 32);
            hints.warps = hints.warps.or(Some(warps as u8));
        }
        let tile = mma_tile(kernel);
        let rows = tile.map(|(rows, _)| rows);
        // A large product's wide tile (`matmul_wide_n`) takes two warpgroups, 64 rows of the
        // 128x256 accumulator each (128 registers a thread).
        if kind == "matmul" && tile.is_some_and(|(_, cols)| cols > self.tiles.matmul_n) {
            hints.warps = hints.warps.or(Some(8));
        }
        if kind == "attention" && rows.is_some_and(|r| r < self.tiles.attention_m) {
            hints.warps = None;
        }
        // A block of `attention_short_m` queries (64: a short walk's, or an f32 attention's):
        // one warpgroup, two blocks per SM.
        let short_m = self.tiles.attention_short_m;
        if kind == "attention" && rows == Some(short_m) && short_m < self.tiles.attention_m {
            hints.warps = Some(4);
            hints.occupancy = hints.occupancy.or(Some(2));
        }
        if kind == "attention" && rows.is_some_and(|r| r <= MATVEC_M) {
            hints.allow_tma = hints.allow_tma.or(Some(false));
            hints.occupancy = hints.occupancy.or(Some(2));
        }
        // A matmul of one row has no tensor-core product (lowering sums it on the vector units).
        let matvec = rows.map_or(kind == "matmul", |rows| rows <= MATVEC_M);
        if matvec || static_tiles(kernel).is_none_or(|tiles| tiles < PERSISTENT_MIN_TILES) {
            hints.persistent = None;
        }
        if kind == "matmul" && matvec {
            hints.occupancy = hints.occupancy.or(Some(2));
        }
        // A long row's TMA loads pay only where a persistent block prefetches its next row.
        if long_row {
            hints.allow_tma = hints.allow_tma.or(Some(hints.persistent.is_some()));
        }
        let small = kernel_bytes(program, kernel).is_some_and(|b| b < SMALL_KERNEL_BYTES);
        if hints.allow_tma.is_none() && small {
            hints.allow_tma = Some(false);
        }
        hints
    }
}

/// The tile count of `kernel`'s grid, when it depends on no symbolic dim.
fn static_tiles(kernel: &TileKernel) -> Option<i64> {
    let extents = kernel.grid_extents(&BTreeMap::new()).ok()?;
    Some(extents.iter().product())
}

/// The rows and columns of the accumulator tile of `kernel`'s first matrix product, if it has
/// one.
fn mma_tile(kernel: &TileKernel) -> Option<(u64, u64)> {
    let mut tile = None;
    kernel.walk(&mut |stmt| {
        if let (TileOp::Mma { .. }, Some((_, Type::Tile { shape, .. }))) =
            (&stmt.op, stmt.defs.first())
        {
            let mut last = shape.iter().rev().copied();
            let (cols, rows) = (last.next().unwrap_or(1), last.next().unwrap_or(1));
            tile = tile.or(Some((rows, cols)));
        }
    });
    tile
}

/// The bytes of every tensor `kernel` takes, when all their shapes are static.
fn kernel_bytes(program: &Program, kernel: &TileKernel) -> Option<u64> {
    let no_dims = BTreeMap::new();
    kernel
        .params
        .iter()
        .map(|param| buffer_bytes(program.buffers.get(param.buffer)?, &no_dims).ok())
        .sum()
}

/// The element count of the largest tile `kernel` computes.
fn largest_tile(kernel: &TileKernel) -> u64 {
    let mut largest = 0;
    kernel.walk(&mut |stmt| {
        for (_, ty) in &stmt.defs {
            if let Type::Tile { shape, .. } = ty {
                largest = largest.max(shape.iter().product());
            }
        }
    });
    largest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_tiles_and_hints() {
        let mut t = Tuning::default();
        t.apply(
            "row_elements=4096, matmul.num_ctas=2,row_reduction.occupancy=4,row_reduction.tma=0",
        )
        .unwrap();
        assert_eq!(t.hints["row_reduction"].allow_tma, Some(false));
        assert_eq!(t.tiles.row_elements, 4096);
        assert_eq!(t.hints["matmul"].num_ctas, Some(2));
        assert_eq!(t.hints["row_reduction"].occupancy, Some(4));
        assert_eq!(t.hints["row_reduction"].num_ctas, None);
        assert_eq!(t.hints["matmul"].group_rows, Some(8), "defaults are kept");
        // The split threshold is a count of programs, not a tile size.
        t.apply("split_programs=132").unwrap();
        assert_eq!(t.tiles.split_programs, 132);
        assert!(t.apply("matmul_m=132").is_err());
        assert_eq!(t.hints["matmul"].persistent, Some(1));
        t.apply("matmul.persistent=0").unwrap();
        assert_eq!(t.hints["matmul"].persistent, None, "0 turns it off");
    }

    use tir_graph::{shape, DType, GraphBuilder, Tensor};

    /// The accumulator tile (of its first product, if any) and the hints of the single kernel
    /// of the graph `build` makes, of kind `kind`.
    fn tile_and_hints_of(
        tuning: &Tuning,
        kind: &str,
        build: impl FnOnce(&GraphBuilder) -> Result<Tensor, tir_graph::GraphError>,
    ) -> (Option<(u64, u64)>, KernelHints) {
        let g = GraphBuilder::new();
        let y = build(&g).unwrap();
        g.output("y", &y).unwrap();
        let graph = g.finish().unwrap();
        // The backend's own target: products that cuBLASLt can run stay whole.
        let target = crate::gpu_target(tuning, &crate::MatmulPolicy::default());
        let compiled =
            tir_lower::compile_graph(&graph, &target, &tir_opt::Limits::default()).unwrap();
        let kernel = &compiled.program.kernels[0];
        assert_eq!(kernel_kind(&kernel.name), kind);
        (
            mma_tile(kernel),
            tuning.hints_for(&compiled.program, kernel),
        )
    }

    /// The hints of the single kernel of the graph `build` makes, of kind `kind`.
    fn hints_of(
        tuning: &Tuning,
        kind: &str,
        build: impl FnOnce(&GraphBuilder) -> Result<Tensor, tir_graph::GraphError>,
    ) -> KernelHints {
        tile_and_hints_of(tuning, kind, build).1
    }

    /// The hints of a softmax over `rows` f16 rows of `cols` under `tuning`.
    fn softmax_hints(tuning: &Tuning, rows: u64, cols: u64) -> KernelHints {
        hints_of(tuning, "row_reduction", |g| {
            g.input("x", DType::F16, shape![rows, cols])?.softmax(1)
        })
    }

    /// The hints of an `n`x`n` f16 matmul under `tuning`.
    fn matmul_hints(tuning: &Tuning, n: u64) -> KernelHints {
        hints_of(tuning, "matmul", |g| {
            let a = g.input("a", DType::F16, shape![n, n])?;
            a.matmul(&g.input("b", DType::F16, shape![n, n])?)
        })
    }

    #[test]
    fn attention_blocks_follow_the_queries_and_the_keys_they_walk() {
        let hints = |tuning: &Tuning, queries: u64, keys: u64| {
            let h = hints_of(tuning, "attention", |g| {
                let q = g.input("q", DType::F16, shape![1, 4, queries, 64])?;
                let kv = g.input("kv", DType::F16, shape![1, 4, keys, 64])?;
                q.attention(&kv, &kv, false)
            });
            (h.warps, h.occupancy, h.allow_tma)
        };
        let defaults = Tuning::default();
        // A long walk: 128-query blocks by two warpgroups, one block per SM.
        assert_eq!(hints(&defaults, 512, 8192), (Some(8), None, None));
        // A short one: 64-query blocks by one warpgroup, two blocks per SM.
        assert_eq!(hints(&defaults, 512, 4096), (Some(4), Some(2), None));
        let mut never_short = Tuning::default();
        never_short.apply("attention_short_m=0").unwrap();
        assert_eq!(hints(&never_short, 512, 4096), (Some(8), None, None));
        // A decode step's one row: `tileiras`'s warps, no TMA, two blocks per SM.
        assert_eq!(hints(&defaults, 1, 512), (None, Some(2), Some(false)));
    }

    #[test]
    fn f32_products_and_attention_take_vector_unit_tiles() {
        let defaults = Tuning::default();
        let tile_and_warps = |kind: &str, dtype: DType| {
            let (tile, hints) = tile_and_hints_of(&defaults, kind, |g| match kind {
                // A product whose `a` is a head merge (no library call).
                "matmul" => {
                    let a = g.input("a", dtype, shape![4, 256, 64])?;
                    let a = a.permute(&[1, 0, 2])?.reshape_to(&shape![256, 256])?;
                    a.matmul(&g.input("w", dtype, shape![256, 256])?)
                }
                _ => {
                    let q = g.input("q", dtype, shape![1, 4, 512, 32])?;
                    q.attention(&q, &q, false)
                }
            });
            (tile, hints.warps)
        };
        assert_eq!(tile_and_warps("matmul", DType::F32), (Some((64, 32)), None));
        assert_eq!(tile_and_warps("matmul", DType::F16).0, Some((128, 128)));
        assert_eq!(
            tile_and_warps("attention", DType::F32),
            (Some((64, 32)), Some(4))
        );
        assert_eq!(
            tile_and_warps("attention", DType::F16),
            (Some((64, 128)), Some(4))
        );
    }

    #[test]
    fn rows_longer_than_the_budget_get_warps_and_no_occupancy_hint() {
        let defaults = Tuning::default();
        assert_eq!(softmax_hints(&defaults, 8, 4096).occupancy, Some(4));
        assert_eq!(softmax_hints(&defaults, 8, 4096).warps, None);
        assert_eq!(softmax_hints(&defaults, 8, 32768).occupancy, None);
        assert_eq!(softmax_hints(&defaults, 8, 32768).warps, Some(32));
        assert_eq!(softmax_hints(&defaults, 8, 8192).warps, Some(8));
    }

    #[test]
    fn long_rows_in_large_grids_are_persistent_and_load_by_tma() {
        let defaults = Tuning::default();
        let long = softmax_hints(&defaults, 4096, 32768);
        assert_eq!((long.persistent, long.allow_tma), (Some(1), Some(true)));
        // Too few rows for a persistent entry: no TMA either.
        let few = softmax_hints(&defaults, 8, 32768);
        assert_eq!((few.persistent, few.allow_tma), (None, Some(false)));
        // Short rows keep one block per row, loaded without TMA.
        let short = softmax_hints(&defaults, 4096, 4096);
        assert_eq!((short.persistent, short.allow_tma), (None, Some(false)));
        // Long rows have their own hints kind.
        let mut tuned = Tuning::default();
        tuned
            .apply("long_row.persistent=0,long_row.warps=16")
            .unwrap();
        let tuned = softmax_hints(&tuned, 4096, 32768);
        assert_eq!(
            (tuned.persistent, tuned.allow_tma, tuned.warps),
            (None, Some(false), Some(16))
        );
    }

    #[test]
    fn small_kernels_get_no_tma_unless_asked() {
        let defaults = Tuning::default();
        // 3 x 16x16 f16: 1.5 KiB; 3 x 1024x1024 f16: 6 MiB.
        assert_eq!(matmul_hints(&defaults, 16).allow_tma, Some(false));
        assert_eq!(matmul_hints(&defaults, 1024).allow_tma, None);
        let mut asked = Tuning::default();
        asked.apply("matmul.tma=1").unwrap();
        assert_eq!(matmul_hints(&asked, 16).allow_tma, Some(true));
    }

    #[test]
    fn only_large_static_grids_are_persistent() {
        let defaults = Tuning::default();
        // 2048 / 128 = 16 tiles a side: 256 tiles, under the minimum; 4096: 1024 tiles.
        assert_eq!(matmul_hints(&defaults, 2048).persistent, None);
        assert_eq!(matmul_hints(&defaults, 4096).persistent, Some(1));
        let symbolic = hints_of(&defaults, "matmul", |g| {
            let a = g.input("a", DType::F16, shape!["m", 4096])?;
            a.matmul(&g.input("b", DType::F16, shape![4096, 4096])?)
        });
        assert_eq!(symbolic.persistent, None);
        // 1x128 rows against 8192 columns in 64 batches: 4096 tiles of one row each.
        let matvec = hints_of(&defaults, "matmul", |g| {
            let a = g.input("a", DType::F16, shape![64, 1, 128])?;
            a.matmul(&g.input("b", DType::F16, shape![64, 128, 8192])?)
        });
        assert_eq!(matvec.persistent, None);
        // Matrix-vector products fit two blocks per SM; larger tiles keep tileiras's choice.
        assert_eq!(matvec.occupancy, Some(2));
        assert_eq!(matmul_hints(&defaults, 4096).occupancy, None);
    }

    /// The accumulator tile and warps of an `m`x`k` by `k`x`n` f16 product under `tuning`.
    fn product_tile(
        tuning: &Tuning,
        (m, k, n): (u64, u64, u64),
    ) -> (Option<(u64, u64)>, Option<u8>) {
        let (tile, hints) = tile_and_hints_of(tuning, "matmul", |g| {
            let a = g.input("a", DType::F16, shape![m, k])?;
            a.matmul(&g.input("b", DType::F16, shape![k, n])?)
        });
        (tile, hints.warps)
    }

    #[test]
    fn large_products_take_the_wide_tile_with_two_warpgroups() {
        let defaults = Tuning::default();
        // 4096² outputs: 512 tiles of 128x256.
        assert_eq!(
            product_tile(&defaults, (4096, 4096, 4096)),
            (Some((128, 256)), Some(8))
        );
        // 2048 x 4096: 256 tiles of 128x256, under the 264 that fill the target.
        assert_eq!(
            product_tile(&defaults, (2048, 512, 4096)),
            (Some((128, 128)), None)
        );
        // Matrix-vector products keep their tile.
        assert_eq!(
            product_tile(&defaults, (8, 512, 1 << 20)),
            (Some((8, 128)), None)
        );
        let mut narrow = Tuning::default();
        narrow.apply("matmul_wide_n=0").unwrap();
        assert_eq!(
            product_tile(&narrow, (4096, 4096, 4096)),
            (Some((128, 128)), None)
        );
    }

    #[test]
    fn names_what_it_cannot_read() {
        for (spec, needle) in [
            ("row_elements", "is not key=value"),
            ("row_elements=x", "not a whole number"),
            ("row_elements=3000", "powers of two"),
            ("tiles=4", "unknown key `tiles`"),
            ("matmul.num_ctas=3", "num_ctas must be one of"),
            ("matmul.occupancy=0", "occupancy must be one of"),
            ("matmul.threads=4", "unknown hint `threads`"),
            ("attention.warps=3", "warps must be one of"),
            ("matmul.load_latency=11", "load_latency must be one of"),
            ("row_reduction.tma=2", "tma must be one of"),
            ("matmul.persistent=8", "persistent must be one of"),
        ] {
            let err = Tuning::default().apply(spec).unwrap_err();
            assert!(err.contains(needle), "{spec}: {err}");
        }
    }
}
