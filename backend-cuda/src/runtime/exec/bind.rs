//! Steps 1 to 4 of a run and its uploads (see [`super`]'s module doc): binds the inputs' dims,
//! shapes every buffer for them (reusing the last run's shapes when the dims are the same),
//! places every buffer at an address, evaluates the launch checks the run does not compute, and
//! enqueues the host inputs' copies.
//!
//! Takes a loaded executable and a run's inputs. Guarantees: a refused binding (a dim, a
//! state's dims, an input larger than its staging) changes no buffer a run in flight uses.

use super::{kernel_error, tensor_memory, CudaExecutable, Outputs, Parameter, Placed, Shaped};
use crate::runtime::driver::{self, DeviceMemory};
use crate::runtime::memory::TensorMemory;
use crate::runtime::staging::{self, Source};
use crate::runtime::trace::SpanKind;
use std::collections::BTreeMap;
use std::rc::Rc;
use tir_graph::{DType, HostTensor};
use tir_lower::legality::LaunchCheck;
use tir_lower::run::{self, type_name};
use tir_lower::{BackendError, DeviceTensor, Executable, Storage, TensorRef};

/// Makes sure `slot` holds at least `bytes`, reallocating (and so moving) when it does not.
fn ensure(slot: &mut Option<DeviceMemory>, bytes: usize) -> Result<u64, String> {
    if slot.as_ref().is_none_or(|m| m.bytes < bytes) {
        *slot = None;
        *slot = Some(DeviceMemory::alloc(bytes)?);
    }
    Ok(slot.as_ref().map_or(0, |m| m.ptr))
}

/// The input named `name` of a run.
fn input<'a>(inputs: &'a [(&str, TensorRef<'a>)], name: &str) -> Option<TensorRef<'a>> {
    inputs.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

impl CudaExecutable {
    /// Steps 1 and 2 of a run (see the module doc).
    pub(super) fn bind(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<(), BackendError> {
        let dims = run::bind_dims(
            &self.program,
            inputs,
            &self.parameter_dims,
            &self.state_dims,
        )?;
        if self.shaped.as_ref().is_some_and(|s| s.dims == dims) {
            return Ok(());
        }
        run::check_kernel_dims(&self.program, &dims)?;
        self.reshape(dims)
    }

    /// Shapes every buffer for `dims` and makes room for them.
    fn reshape(&mut self, dims: BTreeMap<String, u64>) -> Result<(), BackendError> {
        let shapes = run::buffer_shapes(&self.program, &dims)?;
        let layout = run::checked_layout(&self.program, &dims, "cuda")?;
        let bytes = self
            .program
            .buffers
            .iter()
            .map(|b| {
                tir_lower::plan::buffer_bytes(b, &dims)
                    .map(|n| n as usize)
                    .map_err(|e| BackendError::BadInput(format!("buffer {}: {e}", b.name)))
            })
            .collect::<Result<Vec<usize>, _>>()?;
        // Larger buffers replace smaller ones, which runs still in flight may use.
        self.wait().map_err(|e| self.device_error(e))?;
        ensure(&mut self.arena, layout.size as usize).map_err(|e| self.device_error(e))?;
        let mut states = Vec::new();
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            match &buffer.storage {
                Storage::Input(_) | Storage::Output => {
                    ensure(&mut self.staged[b], bytes[b]).map_err(|e| BackendError::Device {
                        device: self.device_of(),
                        reason: e,
                    })?;
                }
                Storage::State(name) => states.push((name.clone(), b)),
                _ => {}
            }
        }
        for (name, b) in states {
            self.bind_state(&name, &shapes[b], bytes[b])?;
        }
        let mut grids = Vec::with_capacity(self.kernels.len());
        for (kernel, abi) in self.program.kernels.iter().zip(&self.abis) {
            let extents = kernel
                .grid_extents(&dims)
                .map_err(|e| kernel_error(kernel, e))?;
            let blocks = extents
                .iter()
                .try_fold(1i64, |a, &e| a.checked_mul(e.max(0)))
                .filter(|&n| n <= i64::from(i32::MAX))
                .ok_or_else(|| {
                    kernel_error(
                        kernel,
                        format!("the grid {extents:?} has too many tile blocks"),
                    )
                })?;
            let mut scalars: Vec<u64> = abi
                .dims
                .iter()
                .map(|d| dims.get(d).copied().unwrap_or(0))
                .collect();
            if abi.grid_extents {
                scalars.extend(extents.iter().map(|&e| e as u64));
            }
            // A persistent entry loops over the grid's tiles, so fills the GPU once at most.
            let blocks = match abi.blocks_per_sm {
                Some(per_sm) => blocks.min(i64::from(self.gpu.sms) * i64::from(per_sm)),
                None => blocks,
            };
            // The entry for divisible dims where the binding's dims are, and its buffers are
            // no larger than the bound that entry's views are clamped to.
            let bound = crate::codegen::DIM_BOUND as u64;
            let divisible = abi.divisible_entry.is_some()
                && abi.dims.iter().all(|d| {
                    dims.get(d)
                        .is_some_and(|&n| n % crate::codegen::DIM_DIVISOR as u64 == 0 && n <= bound)
                })
                && kernel
                    .params
                    .iter()
                    .all(|p| (bytes[p.buffer] / p.dtype.size_bytes().max(1)) as u64 <= bound);
            grids.push((blocks as u32, scalars, divisible));
        }
        self.graphs.clear();
        self.shaped = Some(Shaped {
            dims,
            shapes,
            bytes,
            offsets: layout.offsets,
            grids,
        });
        Ok(())
    }

    /// Binds state `name` to `dims` (zeros when first bound); refuses other dims later.
    fn bind_state(&mut self, name: &str, dims: &[u64], bytes: usize) -> Result<(), BackendError> {
        if let Some((held, _)) = self.states.get(name) {
            if held.as_slice() == dims {
                return Ok(());
            }
            let dtype = self
                .program
                .state_buffer(name)
                .map_or(DType::F32, |b| self.program.buffers[b].ty.dtype);
            return Err(BackendError::BadInput(format!(
                "state {name:?}: this run binds {}, but earlier runs bound {}",
                type_name(dtype, dims),
                type_name(dtype, held)
            )));
        }
        let mem = DeviceMemory::alloc(bytes).map_err(|e| self.device_error(e))?;
        // On stream 0, so that the zeros land before this run's kernels read the state.
        driver::fill_async(mem.ptr, 0, mem.bytes, &self.gpu.streams()[0])
            .map_err(|e| self.device_error(e))?;
        self.states.insert(name.to_string(), (dims.to_vec(), mem));
        self.state_dims.insert(name.to_string(), dims.to_vec());
        Ok(())
    }

    pub(super) fn shaped(&self) -> Result<&Shaped, BackendError> {
        self.shaped
            .as_ref()
            .ok_or_else(|| BackendError::BadInput("no run has bound the program's dims".into()))
    }

    /// Step 3: every buffer's address for a run with `inputs` whose outputs go to `outputs`.
    pub(super) fn place(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        outputs: Outputs,
    ) -> Result<Placed, BackendError> {
        let shaped = self.shaped()?;
        let n = self.program.buffers.len();
        let (mut addresses, mut lent) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            let staged = || self.staged[b].as_ref().map_or(0, |m| m.ptr);
            let mut lend = None;
            let address = match &buffer.storage {
                Storage::Arena => {
                    self.arena.as_ref().map_or(0, |m| m.ptr)
                        + shaped.offsets.get(&b).copied().unwrap_or(0)
                }
                Storage::Constant(_) => self.constants[b].as_ref().map_or(0, |m| m.ptr),
                Storage::State(name) => self.states.get(name).map_or(0, |(_, m)| m.ptr),
                Storage::Parameter(name) => self
                    .parameters
                    .get(name)
                    .map(Parameter::ptr)
                    .ok_or_else(|| {
                        BackendError::BadInput(format!("parameter {name:?} is not set"))
                    })?,
                Storage::Input(name) => match input(inputs, name) {
                    Some(TensorRef::Device(t)) => self.device_address(name, t)?,
                    _ => staged(),
                },
                Storage::Output => match outputs {
                    Outputs::Host => staged(),
                    Outputs::Device => {
                        let memory = TensorMemory::take(&self.gpu, shaped.bytes[b])
                            .map_err(|e| self.device_error(e))?;
                        let ptr = memory.ptr();
                        lend = Some(Rc::new(memory));
                        ptr
                    }
                },
            };
            addresses.push(address);
            lent.push(lend);
        }
        Ok(Placed { addresses, lent })
    }

    /// The address of device tensor `t`, which must be on this executable's GPU.
    pub(super) fn device_address(&self, name: &str, t: &DeviceTensor) -> Result<u64, BackendError> {
        match tensor_memory(t) {
            Some(m) if m.is_on(&self.gpu) => Ok(m.ptr()),
            _ => Err(BackendError::BadInput(format!(
                "{name:?} is a tensor on {} (or another thread's), not on {}: copy it to the host \
                 first",
                t.device(),
                self.device()
            ))),
        }
    }

    /// Step 4: the certificates' launch checks, but those of positions the run computes
    /// ([`Self::enqueue_checked`] makes those).
    pub(super) fn check_launches(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        addresses: &[u64],
    ) -> Result<(), BackendError> {
        let dims = &self.shaped()?.dims;
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            for check in &self.program.certificates[k].checks {
                if self.computed_in_run(check) {
                    continue; // checked by enqueue_checked, when the run has computed it
                }
                run::check_launch(
                    &self.program,
                    check,
                    |b| self.first_element(b, inputs, addresses),
                    dims,
                )
                .map_err(|e| kernel_error(kernel, e))?;
            }
        }
        Ok(())
    }

    /// Whether the position `check` reads is computed by the run: a kernel writes its buffer
    /// (an intermediate, an output, or a state updated before it is read).
    pub(super) fn computed_in_run(&self, check: &LaunchCheck) -> bool {
        let LaunchCheck::SliceInBounds { offset_buffer, .. } = check;
        self.program.kernels.iter().any(|k| {
            k.writes.iter().any(|w| {
                k.params
                    .get(w.param)
                    .is_some_and(|p| p.buffer == *offset_buffer)
            })
        })
    }

    /// Whether a launch check of the program reads a position the run computes, so that its
    /// runs go through [`Self::enqueue_checked`].
    pub(crate) fn checks_wait(&self) -> bool {
        let certificates = &self.program.certificates;
        certificates
            .iter()
            .any(|c| c.checks.iter().any(|check| self.computed_in_run(check)))
    }

    /// Element 0 of buffer `b` for a launch check: from the host where it is there, else read
    /// from the device (after the work before it).
    fn first_element(
        &self,
        b: usize,
        inputs: &[(&str, TensorRef<'_>)],
        addresses: &[u64],
    ) -> Option<f64> {
        let buffer = &self.program.buffers[b];
        if self.shaped.as_ref()?.bytes[b] == 0 {
            // Nothing to read: the allocation's padding is not an element.
            return None;
        }
        match &buffer.storage {
            Storage::Input(n) => match input(inputs, n)? {
                TensorRef::Host(t) => t.element_f64(0),
                TensorRef::Device(_) => self.read_first(buffer.ty.dtype, addresses[b]),
            },
            Storage::Parameter(n) => {
                let p = self.parameters.get(n)?;
                p.first
                    .or_else(|| self.read_first(buffer.ty.dtype, addresses[b]))
            }
            Storage::Constant(data) => data.get_f64(0),
            Storage::State(_) => self.read_first(buffer.ty.dtype, addresses[b]),
            Storage::Output | Storage::Arena => None,
        }
    }

    /// The first element of a `dtype` tensor at device `address`, once the GPU is idle.
    pub(super) fn read_first(&self, dtype: DType, address: u64) -> Option<f64> {
        let mut bytes = vec![0u8; dtype.size_bytes()];
        let stream = &self.gpu.streams()[0];
        driver::download_async(&mut bytes, address, stream).ok()?;
        stream.synchronize().ok()?;
        HostTensor::from_bytes(dtype, &[1], &bytes)
            .ok()?
            .element_f64(0)
    }

    /// Step 5, the copies: enqueues each host input's copy into its staging device memory.
    pub(super) fn upload_inputs(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        source: Source,
    ) -> Result<(), BackendError> {
        let gpu = self.gpu.clone();
        let stream = &gpu.streams()[0];
        // The staging of the last run's copies is rewritten only once they have run.
        self.uploaded
            .synchronize()
            .map_err(|e| self.device_error(e))?;
        for (b, buffer) in self.program.buffers.iter().enumerate() {
            let Storage::Input(name) = &buffer.storage else {
                continue;
            };
            let Some(TensorRef::Host(t)) = input(inputs, name) else {
                continue;
            };
            // Read once: the memory behind a tensor is the user's to implement.
            let bytes = t.bytes();
            let room = self.staged[b].as_ref().map_or(0, |m| m.bytes);
            if bytes.len() > room {
                return Err(BackendError::BadInput(format!(
                    "input {name:?}: its memory holds {} bytes, more than the {room} of {}",
                    bytes.len(),
                    t.type_name()
                )));
            }
            let dst = self.staged[b].as_ref().map_or(0, |m| m.ptr);
            let span = (name.as_str(), SpanKind::Upload, bytes.len() as u64);
            let device = self.device_of();
            let failed = |e: String| BackendError::Device {
                device,
                reason: format!("input {name:?}: {e}"),
            };
            let start = self.trace.start(stream).map_err(failed)?;
            let host_staging = &mut self.host_staging[b];
            staging::upload(bytes, dst, host_staging, gpu.context(), source, stream)
                .map_err(failed)?;
            self.trace.end(start, span, 0, stream).map_err(failed)?;
        }
        self.uploaded
            .record(stream)
            .map_err(|e| self.device_error(e))
    }
}
