//! [`CudaMeshExecutable`]: one program on several GPUs of this host, its collectives through
//! NCCL.
//!
//! It holds one [`CudaExecutable`] per GPU (rank `r` on GPU `r`), each loaded from the same
//! cubins, and drives them all from the calling thread (GPU state in this crate is per thread:
//! every GPU of a mesh is opened, and bound before each call, on it). A run:
//! 1. prepares every device (inputs bound and checked, buffers placed, launch checks made,
//!    host inputs uploaded): a refusal here enqueues no kernel anywhere;
//! 2. enqueues each device's kernels on its stream 0 in schedule order, cut into segments at
//!    the collectives: each device's segment, then the collective on every device inside one
//!    NCCL group (staging copies before a scatter and after a gather, for an axis with dims
//!    before it);
//! 3. enqueues the outputs' copies and waits for every device by polling, so that a device that
//!    fails cannot leave another waiting in a collective for it: the communicators are aborted,
//!    every device drains, and the error names the device (and the kernel, where a kernel
//!    failed to enqueue).
//!
//! Runs are synchronous (`ExecMode::Sync`, and `Async` waits like it); CUDA graphs of a mesh
//! are not built, and the backend refuses a mesh in graph mode. A program whose launch checks
//! read positions the run computes (they wait mid-run) is refused too. A run that fails after
//! its kernels were enqueued may leave states partly updated.

use super::driver::{self, DeviceMemory, Event, Rows, Stream};
use super::exec::{CollectiveLaunch, CudaExecutable, Launch, Outputs, Placed};
use super::nccl::{Call, Collective, Comms};
use super::staging::Source;
use std::collections::BTreeMap;
use std::time::Duration;
use tir_graph::HostTensor;
use tir_lower::{
    BackendError, Device, DeviceTensor, Executable, HostTensors, MeshExecutable, Signature,
    TensorRef,
};

/// A program compiled for a mesh of this host's GPUs (see the module doc).
pub struct CudaMeshExecutable {
    /// First: destroyed while the executables (and their GPUs' contexts) are alive.
    comms: Comms,
    /// Per device: the staging buffer of strided gathers and scatters (freed by `drop`, each
    /// in its GPU's context).
    staging: Vec<Option<DeviceMemory>>,
    devices: Vec<CudaExecutable>,
}

impl Drop for CudaMeshExecutable {
    fn drop(&mut self) {
        for (exe, slot) in self.devices.iter().zip(&mut self.staging) {
            if exe.gpu().bind().is_ok() {
                *slot = None;
            }
        }
    }
}

impl CudaMeshExecutable {
    /// The mesh of `devices` (rank by rank, on the GPUs `comms` was made for).
    pub(crate) fn new(devices: Vec<CudaExecutable>, comms: Comms) -> CudaMeshExecutable {
        let staging = devices.iter().map(|_| None).collect();
        CudaMeshExecutable {
            comms,
            staging,
            devices,
        }
    }

    fn device_mut(&mut self, rank: usize) -> Result<&mut CudaExecutable, BackendError> {
        let world = self.devices.len();
        let exe = self.devices.get_mut(rank).ok_or_else(|| {
            BackendError::BadInput(format!("no device {rank} in a mesh of {world}"))
        })?;
        exe.gpu().bind().map_err(|e| exe.device_error(e))?;
        Ok(exe)
    }

    /// Steps 1 and 2 of a run (see the module doc), then `finish` on each device; waits for
    /// every device, also after an error.
    fn run_all<T>(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
        outputs: Outputs,
        finish: impl Fn(&CudaExecutable, &Placed) -> Result<T, BackendError>,
    ) -> Result<Vec<T>, BackendError> {
        if inputs.len() != self.devices.len() {
            return Err(BackendError::BadInput(format!(
                "{} devices' inputs for a mesh of {}",
                inputs.len(),
                self.devices.len()
            )));
        }
        if self.comms.aborted() {
            return Err(BackendError::Unsupported {
                backend: "cuda".into(),
                reason: "the mesh's NCCL communicators were aborted after an error in an \
                         earlier run: compile it again"
                    .into(),
            });
        }
        let ran = self.enqueue_all(inputs, outputs, &finish);
        // Also on an error: copies queued from the caller's memory must have run before it
        // gets its memory back, and no device may be left in a collective.
        let waited = self.wait_all();
        let ran = ran?;
        waited?;
        Ok(ran)
    }

    fn enqueue_all<T>(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
        outputs: Outputs,
        finish: &impl Fn(&CudaExecutable, &Placed) -> Result<T, BackendError>,
    ) -> Result<Vec<T>, BackendError> {
        let mut placed = Vec::with_capacity(self.devices.len());
        for (exe, inputs) in self.devices.iter_mut().zip(inputs) {
            placed.push(exe.prepare(inputs, outputs, Source::InPlace)?);
        }
        let mut launches = Vec::with_capacity(self.devices.len());
        for (exe, placed) in self.devices.iter_mut().zip(&placed) {
            exe.gpu().bind().map_err(|e| exe.device_error(e))?;
            if exe.poisons() {
                let gpu = exe.gpu().clone();
                exe.fill_scratch(placed, &gpu.streams()[0])
                    .map_err(|e| exe.device_error(e))?;
            }
            launches.push(exe.launches(&placed.addresses)?);
        }
        let order = self.devices[0].program.schedule.waves.concat();
        let mut segment = Vec::new();
        for k in order {
            if !matches!(launches[0][k], Launch::Collective(_)) {
                segment.push(k);
                continue;
            }
            self.enqueue_segment(&segment, &launches)?;
            segment.clear();
            self.enqueue_collective(k, &launches)?;
        }
        self.enqueue_segment(&segment, &launches)?;
        self.devices
            .iter()
            .zip(&placed)
            .map(|(exe, placed)| {
                exe.gpu().bind().map_err(|e| exe.device_error(e))?;
                finish(exe, placed)
            })
            .collect()
    }

    /// Kernels `segment` (none a collective) on every device's stream 0.
    fn enqueue_segment(
        &mut self,
        segment: &[usize],
        launches: &[Vec<Launch>],
    ) -> Result<(), BackendError> {
        if segment.is_empty() {
            return Ok(());
        }
        for (exe, launches) in self.devices.iter_mut().zip(launches) {
            let gpu = exe.gpu().clone();
            gpu.bind().map_err(|e| exe.device_error(e))?;
            for &k in segment {
                exe.enqueue_spanned(k, &launches[k], &gpu.streams()[0], 0)
                    .map_err(|e| exe.device_error(e))?;
            }
        }
        Ok(())
    }

    /// Collective kernel `k` on every device: the staging copies before it, the NCCL calls in
    /// one group, the staging copies after it.
    fn enqueue_collective(
        &mut self,
        k: usize,
        launches: &[Vec<Launch>],
    ) -> Result<(), BackendError> {
        let kernel = self.devices[0].program.kernels[k].name.clone();
        let failed = |rank: usize, reason: String| BackendError::Kernel {
            kernel: kernel.clone(),
            reason: format!("on cuda:{rank}: {reason}"),
        };
        let mut calls = Vec::with_capacity(self.devices.len());
        let mut streams = Vec::with_capacity(self.devices.len());
        for (rank, launches) in launches.iter().enumerate() {
            let Launch::Collective(c) = &launches[k] else {
                return Err(failed(rank, "not a collective on every device".into()));
            };
            let exe = &self.devices[rank];
            exe.gpu().bind().map_err(|e| failed(rank, e))?;
            let stream = &exe.gpu().streams()[0];
            let staging = staging_for(&mut self.staging[rank], c).map_err(|e| failed(rank, e))?;
            calls.push(before(c, staging, stream).map_err(|e| failed(rank, e))?);
            streams.push(stream.0 as cudarc::nccl::sys::cudaStream_t);
        }
        if let Err(e) = self.comms.group(&calls, &streams) {
            // A group that failed may have enqueued some devices' calls: abort, so that none
            // waits for a peer.
            self.comms.abort();
            return Err(BackendError::Kernel {
                kernel: kernel.clone(),
                reason: e,
            });
        }
        for (rank, launches) in launches.iter().enumerate() {
            let Launch::Collective(c) = &launches[k] else {
                continue;
            };
            let exe = &self.devices[rank];
            exe.gpu().bind().map_err(|e| failed(rank, e))?;
            let staging = self.staging[rank].as_ref().map_or(0, |m| m.ptr);
            after(c, staging, &exe.gpu().streams()[0]).map_err(|e| failed(rank, e))?;
        }
        Ok(())
    }

    /// Waits for every device (see the module doc): polls each device's stream 0; on the first
    /// failure aborts the communicators, then waits for the rest.
    fn wait_all(&mut self) -> Result<(), BackendError> {
        let mut pending = Vec::with_capacity(self.devices.len());
        let mut first: Option<BackendError> = None;
        for exe in &self.devices {
            let recorded = exe.gpu().bind().and_then(|()| {
                let event = Event::new()?;
                event.record(&exe.gpu().streams()[0])?;
                Ok(event)
            });
            match recorded {
                Ok(event) => pending.push((exe, event)),
                Err(e) => {
                    first.get_or_insert(exe.device_error(e));
                }
            }
        }
        if first.is_some() {
            self.comms.abort();
        }
        let mut sleep = Duration::from_micros(5);
        while !pending.is_empty() {
            let mut still = Vec::with_capacity(pending.len());
            for (exe, event) in pending {
                match exe.gpu().bind().and_then(|()| event.done()) {
                    Ok(true) => {}
                    Ok(false) => still.push((exe, event)),
                    Err(e) => {
                        first.get_or_insert(exe.device_error(e));
                        self.comms.abort();
                    }
                }
            }
            pending = still;
            if let Err(e) = self.comms.async_error() {
                // Which of the run's collectives failed, NCCL does not say.
                let program = &self.devices[0].program;
                let names: Vec<&str> = program
                    .kernels
                    .iter()
                    .filter(|k| k.collective().is_some())
                    .map(|k| k.name.as_str())
                    .collect();
                first.get_or_insert(BackendError::Kernel {
                    kernel: names.join(" or "),
                    reason: e,
                });
                self.comms.abort();
            }
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(Duration::from_micros(200));
        }
        first.map_or(Ok(()), Err)
    }
}

/// The staging buffer `c` needs on its device (0 where it needs none): every device's parts,
/// rank by rank.
fn staging_for(slot: &mut Option<DeviceMemory>, c: &CollectiveLaunch) -> Result<u64, String> {
    let Some((rows, part)) = c.strided else {
        return Ok(0);
    };
    let bytes = c.world * rows * part;
    if slot.as_ref().is_none_or(|m| m.bytes < bytes) {
        // The last run's collectives are done (runs are waited for), so the old one is free.
        *slot = None;
        *slot = Some(DeviceMemory::alloc(bytes)?);
    }
    Ok(slot.as_ref().map_or(0, |m| m.ptr))
}

/// The row copies between `strided`'s rows (`world` parts a row, one per rank) and the
/// staging buffer (each rank's parts together): `(dst, src)` pairs of `rows` rows of `part`
/// bytes, into the staging when `pack`, out of it otherwise.
fn restage_copies(
    c: &CollectiveLaunch,
    strided: u64,
    staging: u64,
    pack: bool,
) -> Vec<(Rows, Rows)> {
    let Some((rows, part)) = c.strided else {
        return Vec::new();
    };
    (0..c.world)
        .map(|rank| {
            let row = Rows {
                address: strided + (rank * part) as u64,
                pitch: c.world * part,
            };
            let block = Rows {
                address: staging + (rank * rows * part) as u64,
                pitch: part,
            };
            if pack {
                (block, row)
            } else {
                (row, block)
            }
        })
        .collect()
}

/// Enqueues [`restage_copies`] on `stream`.
fn restage(
    c: &CollectiveLaunch,
    strided: u64,
    staging: u64,
    pack: bool,
    stream: &Stream,
) -> Result<(), String> {
    let Some((rows, part)) = c.strided else {
        return Ok(());
    };
    for (dst, src) in restage_copies(c, strided, staging, pack) {
        driver::copy_rows_async(dst, src, part, rows, stream)?;
    }
    Ok(())
}

/// The staging before `c` (a strided scatter's input packed by rank) and its NCCL call, which
/// reads or writes the staging where `c` is strided.
fn before(c: &CollectiveLaunch, staging: u64, stream: &Stream) -> Result<Call, String> {
    let mut call = c.call;
    if c.strided.is_some() {
        match call.collective {
            Collective::ReduceScatter(_) => {
                restage(c, call.input, staging, true, stream)?;
                call.input = staging;
            }
            Collective::AllGather => call.output = staging,
            Collective::AllReduce(..) => {}
        }
    }
    Ok(call)
}

/// The staging after `c`: a strided gather's parts unpacked into its output.
fn after(c: &CollectiveLaunch, staging: u64, stream: &Stream) -> Result<(), String> {
    match c.call.collective {
        Collective::AllGather => restage(c, c.call.output, staging, false, stream),
        _ => Ok(()),
    }
}

impl MeshExecutable for CudaMeshExecutable {
    fn signature(&self) -> &Signature {
        &self.devices[0].program.signature
    }

    fn devices(&self) -> Vec<Device> {
        self.devices.iter().map(|d| d.device()).collect()
    }

    fn set_parameter(
        &mut self,
        rank: usize,
        name: &str,
        value: TensorRef<'_>,
    ) -> Result<(), BackendError> {
        self.device_mut(rank)?.set_parameter(name, value)
    }

    fn run(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<HostTensors>, BackendError> {
        self.run_all(inputs, Outputs::Host, |exe, placed| {
            Ok(exe.download_outputs(placed)?.into_iter().collect())
        })
    }

    fn run_on_device(
        &mut self,
        inputs: &[Vec<(&str, TensorRef<'_>)>],
    ) -> Result<Vec<BTreeMap<String, DeviceTensor>>, BackendError> {
        self.run_all(inputs, Outputs::Device, |exe, placed| {
            exe.device_outputs(placed)
        })
    }

    fn to_device(
        &mut self,
        rank: usize,
        tensor: &HostTensor<'_>,
    ) -> Result<DeviceTensor, BackendError> {
        self.device_mut(rank)?.to_device(tensor)
    }

    fn states(&self) -> Result<Vec<HostTensors>, BackendError> {
        self.devices
            .iter()
            .map(|exe| {
                exe.gpu().bind().map_err(|e| exe.device_error(e))?;
                exe.states()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::collective::{join_shards, take_shard};

    /// Runs `copies` of `rows` rows of `part` bytes on `memory`, addresses being offsets.
    fn copy(memory: &mut [u8], copies: &[(Rows, Rows)], rows: usize, part: usize) {
        for (dst, src) in copies {
            for r in 0..rows {
                for i in 0..part {
                    let from = src.address as usize + r * src.pitch + i;
                    let to = dst.address as usize + r * dst.pitch + i;
                    memory[to] = memory[from];
                }
            }
        }
    }

    fn strided(call: Collective, world: usize, rows: usize, part: usize) -> CollectiveLaunch {
        CollectiveLaunch {
            call: Call {
                collective: call,
                input: 0,
                output: 0,
                count: 0,
            },
            world,
            strided: Some((rows, part)),
        }
    }

    #[test]
    fn a_gather_along_an_inner_axis_unpacks_each_ranks_block_into_its_columns() {
        // Parts of [3, 2] bytes from 3 ranks gathered along axis 1 into [3, 6].
        let (world, rows, part) = (3usize, 3usize, 2usize);
        let parts: Vec<Vec<u8>> = (0..world as u8)
            .map(|r| (0..(rows * part) as u8).map(|i| 16 * r + i).collect())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let want = join_shards(&refs, &[rows as u64, part as u64], 1);
        // NCCL's all-gather leaves the blocks rank by rank in the staging (at 0); the output
        // follows it.
        let total = world * rows * part;
        let mut memory: Vec<u8> = parts.concat();
        memory.resize(2 * total, 0);
        let c = strided(Collective::AllGather, world, rows, part);
        copy(
            &mut memory,
            &restage_copies(&c, total as u64, 0, false),
            rows,
            part,
        );
        assert_eq!(memory[total..], want[..]);
    }

    #[test]
    fn a_scatter_along_an_inner_axis_packs_each_ranks_columns_into_its_block() {
        // [2, 8] bytes scattered along axis 1 over 4 ranks: each rank's [2, 2] block in turn,
        // which NCCL's reduce-scatter hands to that rank.
        let (world, rows, part) = (4usize, 2usize, 2usize);
        let total = world * rows * part;
        let whole: Vec<u8> = (0..total as u8).collect();
        let mut memory = whole.clone();
        memory.resize(2 * total, 0);
        let c = strided(
            Collective::ReduceScatter(cudarc::nccl::sys::ncclDataType_t::ncclUint8),
            world,
            rows,
            part,
        );
        copy(
            &mut memory,
            &restage_copies(&c, 0, total as u64, true),
            rows,
            part,
        );
        let dims = [rows as u64, (world * part) as u64];
        for rank in 0..world {
            let block = &memory[total + rank * rows * part..][..rows * part];
            assert_eq!(
                block,
                take_shard(&whole, &dims, 1, world as u32, rank as u32)
            );
        }
    }
}
