//! What each kernel of a run launches ([`Launch`]): its generated entry on its grid, a library
//! call (cuBLASLt, cuDNN) where the policies choose one (`auto` times both once per shape), or
//! its NCCL collective.
//!
//! Takes a shaped executable and its buffers' addresses. Guarantees: every launch's pointers are
//! [`PARAM_ALIGN`]-aligned, and a library launch is one whose shape the library was prepared
//! for.

use super::{kernel_error, CudaExecutable, Shaped};
use crate::codegen::PARAM_ALIGN;
use crate::runtime::blas::{MatmulOperands, MatmulShape};
use crate::runtime::dnn::{self, AttentionOperands, AttentionShape, ConvOperands, ConvShape};
use crate::runtime::driver::Kernel;
use crate::runtime::nccl::{Call, Collective};
use crate::runtime::policy::{AttentionPath, ConvPath, MatmulPath};
use crate::runtime::timing::ColdTimer;
use std::collections::BTreeMap;
use tir_graph::Op;
use tir_lower::run::{self};
use tir_lower::tile::{AttentionOperand, LibraryAttention, LibraryCall, TileKernel};
use tir_lower::{BackendError, Program};

/// One kernel's work in a run.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::runtime) enum Launch {
    /// The generated kernel: tile blocks (0: nothing to do) and arguments.
    /// `divisible`: the entry for dims that [`crate::codegen::DIM_DIVISOR`] divides (and
    /// [`crate::codegen::DIM_BOUND`] bounds).
    Tiles {
        blocks: u32,
        args: Vec<u64>,
        divisible: bool,
    },
    /// cuBLASLt on the addresses of its operands.
    Blas {
        shape: MatmulShape,
        buffers: MatmulOperands,
    },
    /// cuDNN's fused attention on the addresses of its operands.
    Dnn {
        shape: AttentionShape,
        buffers: AttentionOperands,
    },
    /// One cuDNN plan of a convolution with its bias and activation.
    DnnConv {
        shape: ConvShape,
        buffers: ConvOperands,
    },
    /// A collective through NCCL, which only a mesh runs ([`super::mesh`]).
    Collective(CollectiveLaunch),
}

/// One device's part of a collective kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::runtime) struct CollectiveLaunch {
    /// The NCCL call on this device's own input and output buffers.
    pub(in crate::runtime) call: Call,
    /// The devices of the mesh.
    pub(in crate::runtime) world: usize,
    /// For a gather (or scatter) along an axis with dims before it: the rows (the product of
    /// those dims) and the bytes of one device's part of a row. NCCL gathers (scatters) whole
    /// per-device blocks, so the parts go through a staging buffer, rank by rank.
    pub(in crate::runtime) strided: Option<(usize, usize)>,
}

impl Launch {
    /// How it runs: `tiles xN` (the generated kernel on N tile blocks), `cublaslt` or `cudnn`.
    pub(in crate::runtime) fn how(&self) -> String {
        match self {
            Launch::Tiles { blocks, .. } => format!("tiles x{blocks}"),
            Launch::Blas { .. } => "cublaslt".to_string(),
            Launch::Dnn { .. } | Launch::DnnConv { .. } => "cudnn".to_string(),
            Launch::Collective(_) => "nccl".to_string(),
        }
    }
}

/// The shape of a library call, which auto's choice is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum LibraryShape {
    Matmul(MatmulShape),
    Attention(AttentionShape),
    Conv(ConvShape),
}

/// Whether a library call runs: never, always, or when it measures faster.
enum LibraryUse {
    Never,
    Always,
    Timed,
}

/// The library launch of `kernel` under `dims`, with buffer `addresses`, if it has a library
/// call.
fn library_launch(
    kernel: &TileKernel,
    dims: &BTreeMap<String, u64>,
    addresses: &[u64],
) -> Option<Launch> {
    let address = |p: &usize| kernel.params.get(*p).map(|tp| addresses[tp.buffer]);
    match kernel.library.as_ref()? {
        LibraryCall::MatMul {
            a,
            b,
            c,
            residual,
            dtype,
            batch,
            m,
            k,
            n,
            b_batched,
            b_transposed,
        } => {
            let value = |d: &tir_graph::Dim| run::dim_value(d, dims).ok();
            let mut count = 1u64;
            for d in batch {
                count = count.checked_mul(value(d)?)?;
            }
            Some(Launch::Blas {
                shape: MatmulShape {
                    dtype: *dtype,
                    batch: count,
                    m: value(m)?,
                    k: value(k)?,
                    n: value(n)?,
                    b_batched: *b_batched,
                    b_transposed: *b_transposed,
                },
                buffers: MatmulOperands {
                    a: address(a)?,
                    b: address(b)?,
                    c: address(c)?,
                    residual: match residual {
                        Some(r) => Some(address(r)?),
                        None => None,
                    },
                },
            })
        }
        // Not an alternative to the body: `collective_launch` makes it.
        LibraryCall::Collective { .. } => None,
        LibraryCall::Attention(call) => Some(Launch::Dnn {
            shape: attention_shape(call, dims)?,
            buffers: AttentionOperands {
                q: address(&call.q.param)?,
                k: address(&call.k.param)?,
                v: address(&call.v.param)?,
                o: address(&call.o.param)?,
            },
        }),
        LibraryCall::Conv(call) => Some(Launch::DnnConv {
            shape: dnn::conv_shape(call, run::dim_value(&call.batch, dims).ok()?)?,
            buffers: ConvOperands {
                x: address(&call.x)?,
                w: address(&call.w)?,
                bias: call.bias.as_ref().map_or(Some(0), address)?,
                y: address(&call.y)?,
            },
        }),
    }
}

/// Collective `kernel`'s launch with buffers of `shaped`'s shapes at `addresses`, if it is one.
fn collective_launch(
    program: &Program,
    kernel: &TileKernel,
    shaped: &Shaped,
    addresses: &[u64],
) -> Result<Option<Launch>, String> {
    let Some((op, input, output)) = kernel.collective() else {
        return Ok(None);
    };
    let (from, to) = (kernel.params[input].buffer, kernel.params[output].buffer);
    let dtype = program.buffers[from].ty.dtype;
    let collective = Collective::of(op, dtype)?;
    let elements = |b: usize| shaped.shapes[b].iter().product::<u64>() as usize;
    // The split axis and the buffer holding one device's part along it.
    let (world, split) = match op {
        Op::AllReduce { world, .. } => (*world, None),
        Op::AllGather { axis, world } => (*world, Some((*axis, from))),
        Op::ReduceScatter { axis, world } => (*world, Some((*axis, to))),
        other => return Err(format!("{other} is not a collective")),
    };
    let strided = match split {
        Some((axis, part)) => {
            let rows = shaped.shapes[part][..axis].iter().product::<u64>() as usize;
            let bytes = shaped.bytes[part];
            if rows > 1 && !bytes.is_multiple_of(rows) {
                return Err(format!("{bytes} bytes do not split into {rows} rows"));
            }
            (rows > 1).then(|| (rows, bytes / rows))
        }
        None => None,
    };
    let count = match collective {
        Collective::AllReduce(..) => elements(from),
        Collective::AllGather => shaped.bytes[from],
        Collective::ReduceScatter(_) => elements(to),
    };
    Ok(Some(Launch::Collective(CollectiveLaunch {
        call: Call {
            collective,
            input: addresses[from],
            output: addresses[to],
            count,
        },
        world: world as usize,
        strided,
    })))
}

/// The shape of a library attention under `dims`; `None` where an extent is 0 (the generated
/// kernel then runs: cuDNN takes no empty tensor).
fn attention_shape(
    call: &LibraryAttention,
    dims: &BTreeMap<String, u64>,
) -> Option<AttentionShape> {
    let value = |d: &tir_graph::Dim| run::dim_value(d, dims).ok();
    let [b, h, sq, sk] = &call.dims;
    let extents = [value(b)?, value(h)?, value(sq)?, value(sk)?];
    if extents.contains(&0) {
        return None;
    }
    let strides = |op: &AttentionOperand, seq: u64, head: u64| {
        let mut s = [0u64; 4];
        for (i, p) in op.strides.iter().enumerate() {
            s[i] = p.value(dims).ok()?;
        }
        // A dim of extent 1 may have any stride: give it the row-major one.
        let shape = [extents[0], extents[1], seq, head];
        for i in (0..3).rev() {
            if shape[i] == 1 {
                s[i] = s[i + 1].checked_mul(shape[i + 1])?;
            }
        }
        Some(s)
    };
    let (d, d_v) = (call.d, call.d_v);
    Some(AttentionShape {
        dtype: call.dtype,
        dims: extents,
        d,
        d_v,
        strides: [
            strides(&call.q, extents[2], d)?,
            strides(&call.k, extents[3], d)?,
            strides(&call.v, extents[3], d_v)?,
            strides(&call.o, extents[2], d_v)?,
        ],
        causal: call.causal,
        scale: (call.scale.0 as f32).to_bits(),
    })
}

impl CudaExecutable {
    /// Kernel `k`'s entry: for dims that [`crate::codegen::DIM_DIVISOR`] divides, when
    /// `divisible` (set only where it has one).
    pub(super) fn entry(&self, k: usize, divisible: bool) -> &Kernel {
        match &self.kernels[k] {
            (_, Some(twin)) if divisible => twin,
            (whole, _) => whole,
        }
    }

    /// Every kernel's launch with buffers at `addresses` (auto's choice timed on first use).
    pub(in crate::runtime) fn launches(
        &mut self,
        addresses: &[u64],
    ) -> Result<Vec<Launch>, BackendError> {
        let mut launches = Vec::with_capacity(self.kernels.len());
        let mut timer = None;
        for k in 0..self.kernels.len() {
            let shaped = self.shaped()?;
            let kernel = &self.program.kernels[k];
            let (blocks, scalars, divisible) = &shaped.grids[k];
            let mut args: Vec<u64> = kernel.params.iter().map(|p| addresses[p.buffer]).collect();
            if let Some(p) = args.iter().position(|a| a % PARAM_ALIGN != 0) {
                return Err(kernel_error(
                    kernel,
                    format!("parameter {p} is not {PARAM_ALIGN}-byte aligned"),
                ));
            }
            args.extend(scalars);
            if let Some(collective) = collective_launch(&self.program, kernel, shaped, addresses)
                .map_err(|e| kernel_error(kernel, e))?
            {
                launches.push(collective);
                continue;
            }
            let tiles = Launch::Tiles {
                blocks: *blocks,
                args,
                divisible: *divisible,
            };
            let launch = match library_launch(kernel, &shaped.dims, addresses) {
                Some(library) => {
                    let use_library = self
                        .use_library(k, &tiles, &library, &mut timer)
                        .map_err(|e| kernel_error(&self.program.kernels[k], e))?;
                    if use_library {
                        library
                    } else {
                        tiles
                    }
                }
                None => tiles,
            };
            launches.push(launch);
        }
        Ok(launches)
    }

    /// Whether kernel `k` runs as `library` (cuBLASLt or cuDNN) rather than as `tiles`, by
    /// the policies; `Auto` times both once per shape, from a cold L2 (`timer`, made on first
    /// use).
    /// What `auto` does with kernel `k`'s cuDNN call. cuDNN compiles its kernels at run time: a
    /// plan takes 45-70 ms to build, up to 1.2 s where it compiles a kernel (the first of a
    /// dtype, head dim and mask, and some lengths; a plan per batch size for a convolution), so
    /// a call whose shape changes with the dims keeps the generated kernel unless cuDNN is
    /// asked for, and a static one is timed against it once.
    fn cudnn_auto(&self, k: usize) -> LibraryUse {
        let is_static = match &self.program.kernels[k].library {
            Some(LibraryCall::Attention(call)) => call.is_static(),
            Some(LibraryCall::Conv(call)) => call.is_static(),
            _ => false,
        };
        if is_static {
            LibraryUse::Timed
        } else {
            LibraryUse::Never
        }
    }

    fn use_library(
        &mut self,
        k: usize,
        tiles: &Launch,
        library: &Launch,
        timer: &mut Option<ColdTimer>,
    ) -> Result<bool, String> {
        let name = &self.program.kernels[k].name;
        let (shape, by_policy) = match library {
            Launch::Tiles { .. } | Launch::Collective(_) => return Ok(false),
            Launch::Blas { shape, .. } => (
                LibraryShape::Matmul(*shape),
                match self.matmul.of(name) {
                    MatmulPath::Generated => LibraryUse::Never,
                    MatmulPath::Cublas => LibraryUse::Always,
                    MatmulPath::Auto => LibraryUse::Timed,
                },
            ),
            Launch::Dnn { shape, .. } => (
                LibraryShape::Attention(*shape),
                match self.attention.of(name) {
                    AttentionPath::Generated => LibraryUse::Never,
                    AttentionPath::Cudnn => LibraryUse::Always,
                    AttentionPath::Auto => self.cudnn_auto(k),
                },
            ),
            Launch::DnnConv { shape, .. } => (
                LibraryShape::Conv(*shape),
                match self.conv.of(name) {
                    ConvPath::Generated => LibraryUse::Never,
                    ConvPath::Cudnn => LibraryUse::Always,
                    ConvPath::Auto => self.cudnn_auto(k),
                },
            ),
        };
        match by_policy {
            LibraryUse::Never => Ok(false),
            LibraryUse::Always => {
                match shape {
                    LibraryShape::Matmul(s) => self.blas()?.prepare(s)?,
                    LibraryShape::Attention(s) => self.dnn()?.prepare(s)?,
                    LibraryShape::Conv(s) => self.dnn()?.prepare_conv(s)?,
                }
                Ok(true)
            }
            LibraryUse::Timed => {
                if let Some(&choice) = self.chosen.get(&(k, shape)) {
                    return Ok(choice);
                }
                let timer = match timer {
                    Some(timer) => timer,
                    None => timer.insert(ColdTimer::new()?),
                };
                let choice = match (self.time(k, tiles, timer), self.time(k, library, timer)) {
                    (Ok(t), Ok(l)) => l < t,
                    (Ok(_), Err(_)) => false,
                    (Err(e), _) => return Err(e),
                };
                self.chosen.insert((k, shape), choice);
                Ok(choice)
            }
        }
    }

    /// The best of a few timed runs of `launch` as kernel `k`, in milliseconds, each after an L2
    /// flush: a decode step's matrices do not stay in L2 between steps, and timed from L2 its
    /// 4096x11008 matrix-vector product chose the generated kernel (0.054 ms from memory)
    /// over cuBLASLt (0.044). Its output is scratch until the run proper writes it.
    fn time(&mut self, k: usize, launch: &Launch, timer: &ColdTimer) -> Result<f32, String> {
        let gpu = self.gpu.clone();
        let stream = &gpu.streams()[0];
        let mut best = f32::INFINITY;
        for rep in 0..4 {
            timer.start(rep, stream)?;
            self.enqueue_one(k, launch, stream, 0)?;
            let ms = timer.stop(stream)?;
            if rep > 0 {
                best = best.min(ms);
            }
        }
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::{DType, Dim, ExactF64};
    use tir_lower::tile::DimPolynomial;

    /// `[b, h, s, d]` over a `[b, s, h·d]` buffer: strides `[s·h·d, d, h·d, 1]`.
    fn split_heads(param: usize) -> AttentionOperand {
        let stride = |factor: u64, dims: Vec<Dim>| DimPolynomial {
            terms: vec![(factor, dims)],
        };
        let s = || Dim::Symbolic("s".into());
        AttentionOperand {
            param,
            strides: [
                stride(256, vec![s()]),
                stride(64, vec![]),
                stride(256, vec![]),
                stride(1, vec![]),
            ],
        }
    }

    #[test]
    fn an_attention_shape_evaluates_symbolic_strides_and_gives_unit_dims_row_major_ones() {
        let call = LibraryAttention {
            q: split_heads(0),
            k: split_heads(1),
            v: split_heads(2),
            o: split_heads(3),
            dtype: DType::F16,
            dims: [
                Dim::Symbolic("b".into()),
                4.into(),
                Dim::Symbolic("s".into()),
                Dim::Symbolic("s".into()),
            ],
            d: 64,
            d_v: 64,
            scale: ExactF64(0.125),
            causal: true,
        };
        let dims = |b: u64, s: u64| BTreeMap::from([("b".to_string(), b), ("s".to_string(), s)]);
        let shape = attention_shape(&call, &dims(2, 77)).unwrap();
        assert_eq!(shape.dims, [2, 4, 77, 77]);
        assert_eq!(shape.strides, [[77 * 256, 64, 256, 1]; 4]);
        assert_eq!(f32::from_bits(shape.scale), 0.125);
        // One token: the sequence's stride is the head dim's extent, the batch's the rest.
        let shape = attention_shape(&call, &dims(1, 1)).unwrap();
        assert_eq!(shape.strides[0], [256, 64, 64, 1]);
        assert!(
            attention_shape(&call, &BTreeMap::new()).is_none(),
            "unbound dims"
        );
        assert!(
            attention_shape(&call, &dims(0, 77)).is_none(),
            "an empty batch"
        );
    }
}
