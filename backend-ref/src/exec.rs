//! [`RefExecutable`]: one compiled program, its parameters and its states; a run binds the
//! inputs, lays out and checks the memory plan, and launches the kernels in program order.
//!
//! The interpreter holds elements as [`Word`]s (floats as `f64`, integers as `i64`, exact in
//! their dtypes), so a parameter is converted once when it is set and an input at each run. The
//! reference backend's "device" (`ref:0`) is host memory it owns: a [`DeviceTensor`] of it holds
//! such words, which runs take without converting.

use crate::interp::{self, Launch, ParamData, ProgramOutput};
use crate::prepare::KernelPlan;
use crate::tile::unravel;
use crate::word::{Tile, Word};
use rayon::prelude::*;
use std::any::Any;
use std::collections::BTreeMap;
use std::rc::Rc;
use tir_graph::eval::MAX_EVAL_ELEMENTS;
use tir_graph::{ConstData, DType, HostTensor};
use tir_lower::run::{self, dim_value, type_name};
use tir_lower::tile::{Access, Region, SliceStart, TileKernel};
use tir_lower::{
    BackendError, Device, DeviceStorage, DeviceTensor, Executable, HostTensors, Program, Signature,
    Storage, TensorRef,
};

/// Every buffer's values and shape after a run.
pub(crate) struct Ran {
    pub(crate) bufs: Vec<Vec<Word>>,
    pub(crate) shapes: Vec<Vec<u64>>,
    pub(crate) dims: BTreeMap<String, u64>,
}

/// The reference backend's one device.
pub const REF_DEVICE: Device = Device {
    backend: "ref",
    ordinal: 0,
};

/// A tensor on a reference device (`ref:0`, or a device of a mesh): its elements as the
/// interpreter holds them.
struct RefMemory(Tile, Device);

/// `t` as a tensor of reference device `device`.
pub(crate) fn device_tensor(t: Tile, device: Device) -> DeviceTensor {
    let (dtype, dims) = (t.dtype, t.dims.clone());
    DeviceTensor::new(dtype, dims, Rc::new(RefMemory(t, device)))
}

impl DeviceStorage for RefMemory {
    fn device(&self) -> Device {
        self.1
    }

    fn to_host(&self, _dtype: DType, _dims: &[u64]) -> Result<HostTensor<'static>, String> {
        self.0.to_host().map_err(|e| e.to_string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The values of `t`, converted from the host or taken from the reference device.
fn values_of(name: &str, t: TensorRef<'_>) -> Result<Tile, BackendError> {
    match t {
        TensorRef::Host(h) => Tile::from_host(h).map_err(|e| bad_input(format!("{name:?}: {e}"))),
        TensorRef::Device(d) => match d.storage().as_any().downcast_ref::<RefMemory>() {
            Some(m) => Ok(m.0.clone()),
            None => Err(bad_input(format!(
                "{name:?} is a tensor on {}, not on {REF_DEVICE}: copy it to the host first",
                d.device()
            ))),
        },
    }
}

/// The host tensor of a value the interpreter computed.
pub(crate) fn to_host(name: &str, t: &Tile) -> Result<HostTensor<'static>, BackendError> {
    t.to_host().map_err(|e| BackendError::Kernel {
        kernel: format!("(output {name:?})"),
        reason: e.to_string(),
    })
}

/// A program compiled by [`crate::RefBackend`]: the program itself (the reference interprets it
/// as is), per-kernel plans, and the states, which persist across runs.
///
/// A run that fails leaves the states as they were: kernels update copies, committed only when
/// every kernel has succeeded.
pub struct RefExecutable {
    program: Program,
    plans: Vec<KernelPlan>,
    checking: bool,
    /// The values of each constant buffer.
    constants: Vec<Option<Vec<Word>>>,
    /// Each parameter set so far.
    parameters: BTreeMap<String, Tile>,
    /// Each state's value after the last successful run (absent before the first).
    states: BTreeMap<String, Tile>,
}

/// The value of an element of an arena or output buffer before anything writes it: NaN for
/// floats, so that an unwritten element never passes a comparison; an extreme for integers.
fn poison(dtype: DType) -> Word {
    match dtype {
        DType::Bool => Word::int(1),
        DType::I8 => Word::int(i64::from(i8::MIN)),
        DType::U8 => Word::int(i64::from(u8::MAX)),
        DType::I32 => Word::int(i64::from(i32::MIN)),
        DType::I64 => Word::int(i64::MIN),
        DType::I16 => Word::int(i64::from(i16::MIN)),
        DType::U16 => Word::int(i64::from(u16::MAX)),
        DType::U32 => Word::int(i64::from(u32::MAX)),
        // All ones: `u64::MAX`.
        DType::U64 => Word::int(-1),
        _ => Word::float(f64::NAN),
    }
}

/// The words of a constant buffer of `dtype`: integers exactly, floats as stored.
fn constant_words(dtype: DType, data: &ConstData) -> Vec<Word> {
    match data {
        ConstData::Int(v) => v.iter().map(|&x| Word::from_i64(dtype, x)).collect(),
        _ => (0..data.len())
            .filter_map(|i| data.get_f64(i))
            .map(|x| Word::constant(dtype, x))
            .collect(),
    }
}

fn bad_input(reason: String) -> BackendError {
    BackendError::BadInput(reason)
}

/// `[1, 0]`: program number `i` of `grid` as its coordinates.
fn program_name(i: usize, grid: &[u64]) -> String {
    format!("{:?}", unravel(i, grid))
}

/// The part of a buffer a kernel declares it writes: all of it, or `start..start + len` along
/// `axis` (other axes whole).
struct RegionBox {
    slice: Option<(usize, u64, u64)>,
    /// Some elements, each at most once, none required ([`Region::Scattered`]).
    scattered: bool,
    /// Buffer size along the slice axis, and elements after it.
    size: u64,
    inner: usize,
}

impl RegionBox {
    fn contains(&self, flat: usize) -> bool {
        match self.slice {
            None => true,
            // A region with a zero-size axis has no elements.
            Some(_) if self.inner == 0 || self.size == 0 => false,
            Some((_, start, len)) => {
                let i = (flat / self.inner) as u64 % self.size;
                start <= i && i < start + len
            }
        }
    }

    /// Every element the region requires written, in order.
    fn elements(&self, total: usize) -> Box<dyn Iterator<Item = usize> + '_> {
        if self.scattered {
            return Box::new(std::iter::empty());
        }
        match self.slice {
            None => Box::new(0..total),
            Some((_, start, len)) => {
                let outer = if self.size == 0 || self.inner == 0 {
                    0
                } else {
                    total / (self.size as usize * self.inner)
                };
                Box::new((0..outer).flat_map(move |o| {
                    (start..start + len).flat_map(move |a| {
                        let base = (o * self.size as usize + a as usize) * self.inner;
                        base..base + self.inner
                    })
                }))
            }
        }
    }

    fn describe(&self) -> String {
        if self.scattered {
            return "scattered: any elements, each at most once".into();
        }
        match self.slice {
            None => "the whole buffer".into(),
            Some((axis, start, len)) => format!("{start}..{} along axis {axis}", start + len),
        }
    }
}

impl RefExecutable {
    pub(crate) fn new(program: &Program, plans: Vec<KernelPlan>, checking: bool) -> RefExecutable {
        let constants = program
            .buffers
            .iter()
            .map(|b| match &b.storage {
                Storage::Constant(data) => Some(constant_words(b.ty.dtype, data)),
                _ => None,
            })
            .collect();
        RefExecutable {
            program: program.clone(),
            plans,
            checking,
            constants,
            parameters: BTreeMap::new(),
            states: BTreeMap::new(),
        }
    }

    /// The program this executable runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Whether kernels run with ownership checks (see [`crate::RefBackend::checking`]).
    pub fn is_checking(&self) -> bool {
        self.checking
    }

    /// The concrete dims of every buffer, within what the reference allocates.
    fn shapes(&self, dims: &BTreeMap<String, u64>) -> Result<Vec<Vec<u64>>, BackendError> {
        let shapes = run::buffer_shapes(&self.program, dims)?;
        for (b, shape) in self.program.buffers.iter().zip(&shapes) {
            if shape.iter().product::<u64>() > MAX_EVAL_ELEMENTS {
                return Err(bad_input(format!(
                    "buffer {} is {}, more than {MAX_EVAL_ELEMENTS} elements, more than the \
                     reference backend allocates",
                    b.name,
                    type_name(b.ty.dtype, shape)
                )));
            }
        }
        Ok(shapes)
    }

    /// Every buffer's values at the start of a run, with `inputs` by name.
    fn allocate(
        &self,
        mut inputs: BTreeMap<String, Tile>,
        shapes: &[Vec<u64>],
    ) -> Result<Vec<Vec<Word>>, BackendError> {
        let mut bufs = Vec::with_capacity(shapes.len());
        for ((b, shape), constant) in self.program.buffers.iter().zip(shapes).zip(&self.constants) {
            let numel = shape.iter().product::<u64>() as usize;
            let values = match &b.storage {
                Storage::Input(n) => inputs
                    .remove(n)
                    .map(|t| t.data)
                    .ok_or_else(|| bad_input(format!("missing input {n:?}")))?,
                Storage::Parameter(n) => self
                    .parameters
                    .get(n)
                    .map(|t| t.data.clone())
                    .ok_or_else(|| bad_input(format!("parameter {n:?} is not set")))?,
                Storage::State(n) => match self.states.get(n) {
                    Some(t) if t.dims == *shape => t.data.clone(),
                    Some(t) => {
                        return Err(bad_input(format!(
                            "state {n:?}: this run binds {}, but earlier runs bound {}",
                            type_name(b.ty.dtype, shape),
                            type_name(t.dtype, &t.dims)
                        )))
                    }
                    None => vec![Word::from_i64(b.ty.dtype, 0); numel],
                },
                Storage::Constant(_) => constant.clone().unwrap_or_default(),
                Storage::Output | Storage::Arena => vec![poison(b.ty.dtype); numel],
            };
            bufs.push(values);
        }
        Ok(bufs)
    }

    /// The declared write region of each parameter of `kernel` (checking mode).
    fn write_regions(
        &self,
        kernel: &TileKernel,
        bufs: &[Vec<Word>],
        shapes: &[Vec<u64>],
        dims: &BTreeMap<String, u64>,
    ) -> Result<Vec<Option<RegionBox>>, String> {
        let mut regions: Vec<Option<RegionBox>> = kernel.params.iter().map(|_| None).collect();
        for w in &kernel.writes {
            let buffer = kernel.params[w.param].buffer;
            let (name, shape) = (&self.program.buffers[buffer].name, &shapes[buffer]);
            regions[w.param] = Some(match &w.region {
                Region::Whole | Region::Scattered => RegionBox {
                    slice: None,
                    scattered: w.region == Region::Scattered,
                    size: 1,
                    inner: 1,
                },
                Region::Slice { axis, start, len } => {
                    let start = match start {
                        SliceStart::Static(s) => i128::from(*s),
                        SliceStart::Param(q) => {
                            let b = kernel.params[*q].buffer;
                            let v = bufs[b].first().ok_or_else(|| {
                                format!(
                                    "the write region of {name} starts at element 0 of {}, which \
                                     is empty",
                                    self.program.buffers[b].name
                                )
                            })?;
                            i128::from(v.as_int())
                        }
                    };
                    let len = dim_value(len, dims)?;
                    let size = shape[*axis];
                    if start < 0 || start + i128::from(len) > i128::from(size) {
                        return Err(format!(
                            "the write region {start}..{} along axis {axis} of {name} is outside \
                             its size {size}",
                            start + i128::from(len)
                        ));
                    }
                    RegionBox {
                        slice: Some((*axis, start as u64, len)),
                        scattered: false,
                        size,
                        inner: shape[axis + 1..].iter().product::<u64>() as usize,
                    }
                }
            });
        }
        Ok(regions)
    }

    /// Launches kernel `k`: its launch checks, its grid, every program (in parallel), then
    /// their stores in program order (with ownership checks in checking mode).
    fn launch(
        &self,
        k: usize,
        bufs: &mut [Vec<Word>],
        shapes: &[Vec<u64>],
        dims: &BTreeMap<String, u64>,
    ) -> Result<(), BackendError> {
        let kernel = &self.program.kernels[k];
        let unproven = self.program.certificates[k].is_unproven();
        let fail = |reason: String| BackendError::Kernel {
            kernel: kernel.name.clone(),
            // An unsafe kernel runs on its author's word: what breaks in it is that contract.
            reason: if unproven {
                reason.replace(
                    "a lowering bug",
                    "this unsafe kernel's contract does not hold for these inputs",
                )
            } else {
                reason
            },
        };
        for check in &self.program.certificates[k].checks {
            let first = |b: usize| {
                let dtype = self.program.buffers[b].ty.dtype;
                bufs[b].first().map(|w| w.to_f64(dtype))
            };
            run::check_launch(&self.program, check, first, dims).map_err(fail)?;
        }
        let (grid, outputs, regions) = {
            let launch = Launch {
                kernel,
                plan: &self.plans[k],
                params: kernel
                    .params
                    .iter()
                    .map(|p| ParamData {
                        data: &bufs[p.buffer],
                        name: &self.program.buffers[p.buffer].name,
                        access: p.access,
                        dtype: p.dtype,
                    })
                    .collect(),
                dims,
                checking: self.checking,
            };
            let grid: Vec<u64> = interp::grid(&launch)
                .map_err(fail)?
                .into_iter()
                .map(|g| g as u64)
                .collect();
            let count = grid
                .iter()
                .try_fold(1u64, |a, &g| a.checked_mul(g))
                .filter(|&n| n < u64::from(u32::MAX))
                .ok_or_else(|| fail(format!("the grid {grid:?} has too many programs")))?;
            let regions = if self.checking {
                Some(
                    self.write_regions(kernel, bufs, shapes, dims)
                        .map_err(fail)?,
                )
            } else {
                None
            };
            let results: Vec<Result<ProgramOutput, String>> = (0..count as usize)
                .into_par_iter()
                .map(|i| {
                    let coords: Vec<i64> =
                        unravel(i, &grid).into_iter().map(|c| c as i64).collect();
                    interp::run_program(&launch, &coords)
                })
                .collect();
            let mut outputs = Vec::with_capacity(results.len());
            for (i, r) in results.into_iter().enumerate() {
                outputs
                    .push(r.map_err(|e| fail(format!("program {}: {e}", program_name(i, &grid))))?);
            }
            (grid, outputs, regions)
        };
        match regions {
            None => {
                for out in &outputs {
                    for w in &out.writes {
                        bufs[kernel.params[w.param as usize].buffer][w.flat] = w.value;
                    }
                }
                Ok(())
            }
            Some(regions) => self
                .apply_checked(kernel, &grid, &outputs, &regions, bufs, shapes)
                .map_err(fail),
        }
    }

    /// Applies the programs' stores, checking that each element is written by one program and
    /// inside the declared region, that the regions are covered, and that no program reads an
    /// element of a mutable parameter another program writes.
    fn apply_checked(
        &self,
        kernel: &TileKernel,
        grid: &[u64],
        outputs: &[ProgramOutput],
        regions: &[Option<RegionBox>],
        bufs: &mut [Vec<Word>],
        shapes: &[Vec<u64>],
    ) -> Result<(), String> {
        const NONE: u32 = u32::MAX;
        let mut owners: Vec<Vec<u32>> = kernel
            .params
            .iter()
            .map(|p| match p.access {
                Access::Mutable => vec![NONE; bufs[p.buffer].len()],
                Access::Shared => Vec::new(),
            })
            .collect();
        let element = |p: usize, flat: usize| {
            let b = kernel.params[p].buffer;
            format!(
                "element {flat} (index {:?}) of buffer {}",
                unravel(flat, &shapes[b]),
                self.program.buffers[b].name
            )
        };
        for (i, out) in outputs.iter().enumerate() {
            for w in &out.writes {
                let p = w.param as usize;
                match &regions[p] {
                    None => {
                        return Err(format!(
                            "program {} writes {}, which the kernel does not declare it writes",
                            program_name(i, grid),
                            element(p, w.flat)
                        ))
                    }
                    Some(r) if !r.contains(w.flat) => {
                        return Err(format!(
                            "program {} writes {}, outside the kernel's write region ({})",
                            program_name(i, grid),
                            element(p, w.flat),
                            r.describe()
                        ))
                    }
                    Some(_) => {}
                }
                let owner = &mut owners[p][w.flat];
                // One program may store an element again (in program order, last wins); two
                // programs never.
                if *owner != NONE && *owner != i as u32 {
                    return Err(format!(
                        "programs {} and {} both write {}",
                        program_name(*owner as usize, grid),
                        program_name(i, grid),
                        element(p, w.flat)
                    ));
                }
                *owner = i as u32;
                bufs[kernel.params[p].buffer][w.flat] = w.value;
            }
        }
        for (p, region) in regions.iter().enumerate() {
            let Some(region) = region else { continue };
            if let Some(flat) = region
                .elements(owners[p].len())
                .find(|&f| owners[p][f] == NONE)
            {
                let b = kernel.params[p].buffer;
                return Err(format!(
                    "element {:?} of {} is never written (the kernel's write region is {}, its grid \
                     {grid:?})",
                    unravel(flat, &shapes[b]),
                    self.program.buffers[b].name,
                    region.describe()
                ));
            }
        }
        for (i, out) in outputs.iter().enumerate() {
            for &(p, flat) in &out.mutable_reads {
                let owner = owners[p as usize][flat];
                if owner != NONE && owner != i as u32 {
                    return Err(format!(
                        "program {} reads {}, which program {} writes: a race (a program may read \
                         a mutable parameter only where no other program writes)",
                        program_name(i, grid),
                        element(p as usize, flat),
                        program_name(owner as usize, grid)
                    ));
                }
            }
        }
        Ok(())
    }
}

impl RefExecutable {
    /// Runs the kernels on `inputs`; returns every buffer's values and shape, and commits the
    /// states.
    fn execute(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<Ran, BackendError> {
        let mut ran = self.begin(inputs)?;
        for k in 0..self.program.kernels.len() {
            self.launch_kernel(k, &mut ran)?;
        }
        self.commit(&ran);
        Ok(ran)
    }

    /// A run's start: the inputs checked, the dims bound, every buffer allocated.
    pub(crate) fn begin(&self, inputs: &[(&str, TensorRef<'_>)]) -> Result<Ran, BackendError> {
        let held: BTreeMap<String, Vec<u64>> = self
            .states
            .iter()
            .map(|(n, t)| (n.clone(), t.dims.clone()))
            .collect();
        let parameter_dims: BTreeMap<String, Vec<u64>> = self
            .parameters
            .iter()
            .map(|(n, t)| (n.clone(), t.dims.clone()))
            .collect();
        let dims = run::bind_dims(&self.program, inputs, &parameter_dims, &held)?;
        run::check_kernel_dims(&self.program, &dims)?;
        let shapes = self.shapes(&dims)?;
        run::checked_layout(&self.program, &dims, "ref")?;
        let values = inputs
            .iter()
            .map(|(n, t)| Ok((n.to_string(), values_of(n, *t)?)))
            .collect::<Result<BTreeMap<_, _>, BackendError>>()?;
        let bufs = self.allocate(values, &shapes)?;
        Ok(Ran { bufs, shapes, dims })
    }

    /// Runs kernel `k` of a run begun with [`Self::begin`].
    pub(crate) fn launch_kernel(&self, k: usize, ran: &mut Ran) -> Result<(), BackendError> {
        self.launch(k, &mut ran.bufs, &ran.shapes, &ran.dims)
    }

    /// Keeps the states a finished run wrote.
    pub(crate) fn commit(&mut self, ran: &Ran) {
        for (name, _) in &self.program.signature.states {
            if let Some(b) = self.program.state_buffer(name) {
                let t = Tile {
                    dtype: self.program.buffers[b].ty.dtype,
                    dims: ran.shapes[b].clone(),
                    data: ran.bufs[b].clone(),
                };
                self.states.insert(name.clone(), t);
            }
        }
    }

    /// Each output's values after a run.
    pub(crate) fn outputs<'a>(
        &'a self,
        ran: &'a Ran,
    ) -> impl Iterator<Item = (&'a String, Tile)> + 'a {
        self.program.signature.outputs.iter().map(move |(name, b)| {
            let t = Tile {
                dtype: self.program.buffers[*b].ty.dtype,
                dims: ran.shapes[*b].clone(),
                data: ran.bufs[*b].clone(),
            };
            (name, t)
        })
    }
}

impl Executable for RefExecutable {
    fn signature(&self) -> &Signature {
        &self.program.signature
    }

    fn device(&self) -> Device {
        REF_DEVICE
    }

    fn set_parameter(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), BackendError> {
        run::check_parameter(&self.program, name, value.dtype(), value.dims())?;
        let values = values_of(name, value)?;
        self.parameters.insert(name.to_string(), values);
        Ok(())
    }

    fn run(&mut self, inputs: &[(&str, TensorRef<'_>)]) -> Result<HostTensors, BackendError> {
        let ran = self.execute(inputs)?;
        self.outputs(&ran)
            .map(|(name, t)| Ok((name.clone(), to_host(name, &t)?)))
            .collect()
    }

    fn run_on_device(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
    ) -> Result<BTreeMap<String, DeviceTensor>, BackendError> {
        let ran = self.execute(inputs)?;
        Ok(self
            .outputs(&ran)
            .map(|(name, t)| (name.clone(), device_tensor(t, REF_DEVICE)))
            .collect())
    }

    fn to_device(&mut self, tensor: &HostTensor<'_>) -> Result<DeviceTensor, BackendError> {
        let values = Tile::from_host(tensor).map_err(|e| bad_input(e.to_string()))?;
        Ok(device_tensor(values, REF_DEVICE))
    }

    fn alloc_host(&self, dtype: DType, dims: &[u64]) -> Result<HostTensor<'static>, BackendError> {
        HostTensor::zeros(dtype, dims).map_err(|e| bad_input(e.to_string()))
    }

    /// Every state bound by a run; before the first run, zeros for the states of static shape.
    fn states(&self) -> Result<HostTensors, BackendError> {
        let mut states = BTreeMap::new();
        for (name, ty) in &self.program.signature.states {
            let value = match self.states.get(name) {
                Some(t) => to_host(name, t)?,
                None => match ty.shape.static_dims() {
                    Some(dims)
                        if ty
                            .shape
                            .static_numel()
                            .is_some_and(|n| n <= MAX_EVAL_ELEMENTS) =>
                    {
                        HostTensor::zeros(ty.dtype, &dims).map_err(|e| bad_input(e.to_string()))?
                    }
                    _ => continue,
                },
            };
            states.insert(name.clone(), value);
        }
        Ok(states)
    }
}
