//! NCCL, loaded at run time through `cudarc`: the communicators of a mesh of this host's GPUs
//! and the calls its collective kernels make. A machine without `libnccl.so.2` builds and runs
//! everything else; a mesh there is refused with one line saying what to install.
//!
//! One thread drives every GPU of a mesh ([`super::mesh`]), so each collective's calls on the
//! devices are made inside one `ncclGroupStart`/`ncclGroupEnd`: outside a group, the call for
//! the first device could wait for the others', which this thread has not made yet.

use cudarc::nccl::{result, sys};
use tir_graph::{DType, Op, ReduceOp};

/// Why NCCL cannot run here, if it cannot.
pub fn present() -> Result<(), String> {
    // SAFETY: only probes whether the library can be loaded.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "NCCL (libnccl.so.2) was not found: install it (the libnccl2 package, or the \
             nvidia-nccl-cu13 wheel's lib/ on LD_LIBRARY_PATH) to run a mesh of GPUs"
                .into(),
        )
    }
}

/// A failed NCCL call as one line: what was called and NCCL's reason.
fn call(what: &str, r: Result<result::NcclStatus, result::NcclError>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| {
        // SAFETY: NCCL returns a static NUL-terminated string for every result code.
        let reason = unsafe {
            let p = sys::ncclGetErrorString(e.0);
            if p.is_null() {
                format!("{:?}", e.0)
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        format!("{what} failed: {reason}")
    })
}

/// The element type NCCL reduces `dtype` as, where it can (it has no 16-bit integers, no
/// bool and no packed 4-bit types).
fn reduce_type(dtype: DType) -> Option<sys::ncclDataType_t> {
    use sys::ncclDataType_t::*;
    Some(match dtype {
        DType::I8 => ncclInt8,
        DType::U8 => ncclUint8,
        DType::I32 => ncclInt32,
        DType::U32 => ncclUint32,
        DType::I64 => ncclInt64,
        DType::U64 => ncclUint64,
        DType::F16 => ncclFloat16,
        DType::BF16 => ncclBfloat16,
        DType::F32 => ncclFloat32,
        DType::F64 => ncclFloat64,
        _ => return None,
    })
}

/// What one device's call of a collective does, with NCCL's types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collective {
    /// `ncclAllReduce` of elements of a type, by an op.
    AllReduce(sys::ncclDataType_t, sys::ncclRedOp_t),
    /// `ncclAllGather` of bytes (a gather moves bytes: every dtype gathers as `u8`).
    AllGather,
    /// `ncclReduceScatter` summing elements of a type.
    ReduceScatter(sys::ncclDataType_t),
}

impl Collective {
    /// The call for the graph's collective `op` of `dtype` elements, or why NCCL has none.
    pub fn of(op: &Op, dtype: DType) -> Result<Collective, String> {
        let reduce = |what: &str| {
            reduce_type(dtype).ok_or_else(|| format!("NCCL cannot {what} {dtype} elements"))
        };
        match op {
            Op::AllReduce { op, .. } => {
                let by = match op {
                    ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
                    ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
                    ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
                    other => return Err(format!("NCCL cannot all-reduce by {}", other.name())),
                };
                Ok(Collective::AllReduce(reduce("all-reduce")?, by))
            }
            Op::AllGather { .. } => Ok(Collective::AllGather),
            Op::ReduceScatter { .. } => Ok(Collective::ReduceScatter(reduce("reduce-scatter")?)),
            other => Err(format!("{other} is not a collective")),
        }
    }
}

/// One device's call: `input` to `output` (each device's own buffers), `count` elements of
/// the output for a reduce-scatter, of the input otherwise (bytes for an all-gather).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub collective: Collective,
    pub input: u64,
    pub output: u64,
    pub count: usize,
}

/// The communicators of a mesh, one per device by rank; destroyed on drop, or aborted by
/// [`Comms::abort`] so that no device waits for a peer that will not come.
pub struct Comms {
    comms: Vec<sys::ncclComm_t>,
    aborted: bool,
}

impl Comms {
    /// Communicators over the GPUs `ordinals` (rank `r` on `ordinals[r]`), made together by
    /// one `ncclCommInitAll`.
    pub fn init(ordinals: &[u32]) -> Result<Comms, String> {
        present()?;
        let devices: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devices.len()];
        // SAFETY: `comms` has room for one communicator per device of `devices`.
        call("ncclCommInitAll", unsafe {
            result::comm_init_all(comms.as_mut_ptr(), devices.len() as i32, devices.as_ptr())
        })?;
        Ok(Comms {
            comms,
            aborted: false,
        })
    }

    /// Whether [`Comms::abort`] has run: the communicators are gone.
    pub fn aborted(&self) -> bool {
        self.aborted
    }

    /// Aborts every communicator: a device's collective waiting for a peer that failed
    /// returns, and the mesh can make no more calls.
    pub fn abort(&mut self) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        for &comm in &self.comms {
            // SAFETY: each communicator is live and aborted once.
            let _ = unsafe { result::comm_abort(comm) };
        }
    }

    /// The first asynchronous error a communicator reports (a peer that failed, a broken
    /// link), as one line naming the rank: the device waiting in that collective would
    /// otherwise wait for ever.
    pub fn async_error(&self) -> Result<(), String> {
        if self.aborted {
            return Ok(());
        }
        for (rank, &comm) in self.comms.iter().enumerate() {
            let mut status = sys::ncclResult_t::ncclSuccess;
            // SAFETY: the communicator is live; NCCL writes one result code.
            call("ncclCommGetAsyncError", unsafe {
                sys::ncclCommGetAsyncError(comm, &mut status).result()
            })
            .and_then(|()| call("a collective", status.result()))
            .map_err(|e| format!("rank {rank}: {e}"))?;
        }
        Ok(())
    }

    /// Enqueues one call on every device, inside one group (see the module doc): `calls[r]` on
    /// `streams[r]` with rank `r`'s communicator. The calls' GPU contexts are NCCL's concern:
    /// each communicator knows its device.
    pub fn group(&self, calls: &[Call], streams: &[sys::cudaStream_t]) -> Result<(), String> {
        if self.aborted {
            return Err("the mesh's NCCL communicators were aborted after an earlier error".into());
        }
        call("ncclGroupStart", result::group_start())?;
        let enqueued = calls
            .iter()
            .zip(streams)
            .zip(&self.comms)
            .enumerate()
            .try_for_each(|(rank, ((c, &stream), &comm))| {
                enqueue(c, comm, stream).map_err(|e| format!("rank {rank}: {e}"))
            });
        let ended = call("ncclGroupEnd", result::group_end());
        enqueued.and(ended)
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        if self.aborted {
            return;
        }
        for &comm in &self.comms {
            // SAFETY: each communicator is live and destroyed once; its work has finished
            // (the mesh waits for every run it starts).
            let _ = unsafe { result::comm_destroy(comm) };
        }
    }
}

/// Enqueues `c` with communicator `comm` on `stream`.
fn enqueue(c: &Call, comm: sys::ncclComm_t, stream: sys::cudaStream_t) -> Result<(), String> {
    let (input, output) = (c.input as *const _, c.output as *mut _);
    // SAFETY: `input` and `output` are device memory of the communicator's GPU, large enough
    // for `count` elements (the input, or the output of a reduce-scatter) times the world.
    match c.collective {
        Collective::AllReduce(ty, op) => call("ncclAllReduce", unsafe {
            result::all_reduce(input, output, c.count, ty, op, comm, stream)
        }),
        Collective::AllGather => call("ncclAllGather", unsafe {
            result::all_gather(
                input,
                output,
                c.count,
                sys::ncclDataType_t::ncclUint8,
                comm,
                stream,
            )
        }),
        Collective::ReduceScatter(ty) => call("ncclReduceScatter", unsafe {
            result::reduce_scatter(
                input,
                output,
                c.count,
                ty,
                sys::ncclRedOp_t::ncclSum,
                comm,
                stream,
            )
        }),
    }
}
