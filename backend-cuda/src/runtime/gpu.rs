//! One GPU as executables use it: its primary context, the streams every executable on it
//! enqueues on, and the pools its tensors' memory comes from.
//!
//! Takes a CUDA device ordinal. Guarantees: every caller on a thread gets the same [`Gpu`] for
//! an ordinal while one is held, so work on it is ordered by its shared streams; a machine
//! without the driver or the device gets an error naming which, never a panic.

use super::driver::{call, DriverResult, PrimaryContext, Stream, MAX_STREAMS};
use super::pool::{DevicePool, PinnedPool};
use cudarc::driver::{result, sys};

/// One GPU: its primary context, current on the thread that opened it, and the streams every
/// executable on it enqueues on, so that work on one GPU of one thread runs in the order it
/// was enqueued (a run's output, fed to another executable's run, is ready when that run reads
/// it; memory returned to a pool is free for work enqueued after). [`Gpu::open`] hands every
/// caller on a thread the same `Gpu` for an ordinal.
pub struct Gpu {
    /// The CUDA device ordinal.
    pub ordinal: u32,
    /// `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// `sm_90`.
    pub arch: String,
    /// The driver's CUDA version, e.g. `13.0`.
    pub driver: String,
    /// Streaming multiprocessors (132 on an H100 SXM).
    pub sms: u32,
    /// Stream 0 orders everything; waves fork onto the others and join back.
    streams: Vec<Stream>,
    /// Device memory lent to device tensors and given back.
    pub(crate) device_pool: DevicePool,
    /// Page-locked host memory lent to host tensors and given back.
    pub(crate) pinned_pool: std::sync::Arc<PinnedPool>,
    /// Last: everything above needs the context.
    context: std::sync::Arc<PrimaryContext>,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // The memory of its pools is freed next, in this context.
        let _ = self.bind();
    }
}

thread_local! {
    /// The GPUs open on this thread, by ordinal.
    static OPEN: std::cell::RefCell<Vec<(u32, std::rc::Weak<Gpu>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Gpu {
    /// GPU `ordinal`, shared with every other caller on this thread that holds it open; or why
    /// there is none (no driver library, no such device).
    pub fn open(ordinal: u32) -> DriverResult<std::rc::Rc<Gpu>> {
        let held = OPEN.with(|open| {
            open.borrow()
                .iter()
                .find(|(o, _)| *o == ordinal)
                .and_then(|(_, g)| g.upgrade())
        });
        if let Some(gpu) = held {
            gpu.bind()?;
            return Ok(gpu);
        }
        let gpu = std::rc::Rc::new(Gpu::open_new(ordinal)?);
        OPEN.with(|open| {
            let mut open = open.borrow_mut();
            open.retain(|(o, g)| *o != ordinal && g.strong_count() > 0);
            open.push((ordinal, std::rc::Rc::downgrade(&gpu)));
        });
        Ok(gpu)
    }

    fn open_new(ordinal: u32) -> DriverResult<Gpu> {
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { sys::is_culib_present() } {
            return Err("the CUDA driver (libcuda.so) was not found on this machine".into());
        }
        call("cuInit", result::init())?;
        let count = call("cuDeviceGetCount", result::device::get_count())?;
        if i64::from(ordinal) >= i64::from(count) {
            return Err(match count {
                0 => "the CUDA driver found no GPU".to_string(),
                n => format!("there is no GPU {ordinal} (the CUDA driver found {n})"),
            });
        }
        let device = call("cuDeviceGet", result::device::get(ordinal as i32))?;
        let context = std::sync::Arc::new(PrimaryContext::retain(device)?);
        // SAFETY: `context` is a live primary context.
        call("cuCtxSetCurrent", unsafe {
            result::ctx::set_current(context.context)
        })?;
        let attr = |a| {
            // SAFETY: `device` is valid; the attribute is a plain integer query.
            call("cuDeviceGetAttribute", unsafe {
                result::device::get_attribute(device, a)
            })
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let mut version = 0i32;
        // SAFETY: writes one int.
        call("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut version).result()
        })?;
        let streams = (0..MAX_STREAMS)
            .map(|_| Stream::new())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Gpu {
            ordinal,
            name: call("cuDeviceGetName", result::device::get_name(device))?,
            arch: format!("sm_{major}{minor}"),
            driver: format!("{}.{}", version / 1000, (version % 1000) / 10),
            sms: sms.max(1) as u32,
            streams,
            device_pool: DevicePool::default(),
            pinned_pool: PinnedPool::new(context.clone()),
            context,
        })
    }

    /// Makes this GPU's context current on the calling thread.
    pub fn bind(&self) -> DriverResult<()> {
        // SAFETY: the context lives as long as `self`.
        call("cuCtxSetCurrent", unsafe {
            result::ctx::set_current(self.context.context)
        })
    }

    /// The primary context, for memory that may outlive this value.
    pub fn context(&self) -> &std::sync::Arc<PrimaryContext> {
        &self.context
    }

    /// The shared streams (see the type's doc); stream 0 first.
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    /// Free and total device memory in bytes.
    pub fn memory(&self) -> DriverResult<(usize, usize)> {
        self.bind()?;
        call("cuMemGetInfo", result::mem_get_info())
    }
}
