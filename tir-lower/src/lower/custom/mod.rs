//! Users' kernels: writing a tile program that becomes a graph op ([`tir_graph::Op::Custom`]).
//!
//! Takes a declaration ([`KernelDef`]: inputs with symbolic dims, outputs with their partitions,
//! safety) and a body written with [`Body`] (the [`KernelBuilder`] lowering itself uses, over the
//! kernel's own parameters: inputs first, then outputs). Guarantees of [`KernelDef::build`]: the
//! program passes the tile IR verifier, its grid follows from the outputs' partitions (every
//! output has the same grid), and it is encoded into the [`tir_graph::CustomKernel`]'s body
//! (version [`BODY_VERSION`]), so it is part of the kernel's fingerprint, of `.tir` files and of
//! the text form.
//!
//! Lowering ([`instantiate`]) decodes the program, binds the kernel's symbols to the operands'
//! dims (a static size becomes a constant, a symbol the graph's symbol), keeps the stores of the
//! outputs its nodes are (fusion gathers a kernel's sibling output nodes into one kernel, so the
//! program runs once for all of them; an output no node uses is not written), and binds the
//! parameters to the kernel's buffers. The result is an ordinary [`TileKernel`] writing each of
//! its outputs [`Region::Whole`]: the legality pass proves it with the obligations of
//! [`crate::legality`], unchanged, or refuses it naming the kernel, the programs and the region.
//!
//! **In place.** An output declared with [`KernelDef::output_in_place`] updates input 0, a graph
//! state: the instantiated kernel has one parameter for both (the state's buffer, mutable,
//! written), so the legality pass's in-place obligation applies to the author's reads of the
//! state: each program loads only the tile it stores, before the store (loads of input 0 are
//! ordered by tokens). A safe in-place kernel claims the whole state.
//!
//! **In a slice.** An in-place output declared with [`KernelDef::output_in_place_slice`]
//! writes only a slice of its state at a run-time position (a cache append): its partition
//! tiles the slice, its view starts at the position, and it claims [`Region::Slice`] from the
//! position's parameter, so the legality pass proves the stores cover the slice one to one and
//! lowering adds the launch check that the slice lies inside the state, as for
//! `state_write_slice`.
//!
//! **Unsafe.** A kernel declared [`Safety::Unsafe`] is not proven: lowering records its
//! contract in an unproven certificate ([`crate::legality::unproven`]). Its output is claimed
//! [`Region::Whole`] (every element exactly once), or, in place, [`Region::Scattered`] (some
//! elements, each at most once: the others keep the state's value); the reference backend's
//! checking mode checks that at run time, the CUDA backend runs it unchecked. An unsafe kernel
//! may take its grid from an input ([`KernelDef::grid_over`]) when its writes are data-dependent.

pub mod paged_kv;
pub mod rope;
pub mod topk;

use crate::lower::builder::KernelBuilder;
use crate::tile::{
    Access, Block, IndexOp, Region, SliceStart, TileKernel, TileOp, Type, ValueId, WriteRegion,
};
use std::collections::{BTreeMap, HashMap};
use tir_graph::{
    CustomError, CustomInput, CustomKernel, CustomOutput, DType, Dim, Graph, KernelBody, Safety,
    StateSlice, TensorType,
};

/// The version of the body encoding this build writes and reads (bincode of a [`TileKernel`]
/// whose parameter `i` is the kernel's input `i`, then its outputs, with buffer `i`).
pub const BODY_VERSION: u32 = 1;

/// Why a custom kernel cannot be built or lowered; names the kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The declaration or an operand is wrong ([`tir_graph::CustomError`]).
    #[error(transparent)]
    Declaration(#[from] CustomError),
    /// The body breaks a rule of the tile IR.
    #[error("custom kernel {kernel}: {reason}")]
    Body {
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
}

fn body_error(kernel: &str, reason: impl Into<String>) -> KernelError {
    KernelError::Body {
        kernel: kernel.to_string(),
        reason: reason.into(),
    }
}

/// A kernel's declaration: its name, inputs, outputs with partitions, and safety.
#[derive(Clone, Debug)]
pub struct KernelDef {
    name: String,
    inputs: Vec<CustomInput>,
    outputs: Vec<CustomOutput>,
    safety: Safety,
    /// An unsafe kernel's grid: one program per tile of this input.
    grid: Option<(usize, Vec<u64>)>,
}

impl KernelDef {
    /// A safe kernel named `name` with no inputs or outputs yet.
    pub fn new(name: &str) -> KernelDef {
        KernelDef {
            name: name.to_string(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            safety: Safety::Safe,
            grid: None,
        }
    }

    /// Adds an input of `dtype` with `dims` (sizes, or symbols bound by the operand).
    pub fn input(mut self, name: &str, dtype: DType, dims: &[Dim]) -> KernelDef {
        self.inputs.push(CustomInput {
            name: name.to_string(),
            dtype,
            dims: dims.to_vec(),
        });
        self
    }

    /// Adds an output of `dtype` with `dims` (sizes or the inputs' symbols), partitioned into
    /// tiles of `tile` (one power of two per axis; each program writes one tile).
    pub fn output(mut self, name: &str, dtype: DType, dims: &[Dim], tile: &[u64]) -> KernelDef {
        self.outputs.push(CustomOutput {
            name: name.to_string(),
            dtype,
            dims: dims.to_vec(),
            tile: tile.to_vec(),
            updates: None,
            slice: None,
        });
        self
    }

    /// Adds an output that updates input 0 (declared first; given a graph state) in place: the
    /// output is the state's new value, of input 0's dtype and dims, partitioned into tiles of
    /// `tile`. Its buffer is the state's; the graph node is a state update. A safe kernel must
    /// write the whole state, each program reading only its own tile before its store.
    pub fn output_in_place(mut self, name: &str, tile: &[u64]) -> KernelDef {
        let (dtype, dims) = self
            .inputs
            .first()
            .map_or((DType::F32, Vec::new()), |i| (i.dtype, i.dims.clone()));
        self.outputs.push(CustomOutput {
            name: name.to_string(),
            dtype,
            dims,
            tile: tile.to_vec(),
            updates: Some(0),
            slice: None,
        });
        self
    }

    /// Adds an output that updates input 0 (a graph state) in place in one slice only: `len`
    /// elements along `axis` from the run-time position in input `start` (an `i32`/`i64`
    /// scalar), every other element keeping its value. `tile` partitions the slice;
    /// [`Body::output_view`] is a view of the slice, so [`Body::store_own`] writes the program's
    /// tile of it. The legality pass proves the stores cover the slice one to one, and the
    /// backends check before each launch that the slice lies inside the state.
    pub fn output_in_place_slice(
        self,
        name: &str,
        tile: &[u64],
        (axis, len, start): (usize, Dim, usize),
    ) -> KernelDef {
        let mut def = self.output_in_place(name, tile);
        if let Some(out) = def.outputs.last_mut() {
            out.slice = Some(StateSlice { axis, len, start });
        }
        def
    }

    /// An unsafe kernel's grid: one program per tile of `tile` over input `input` (for writes
    /// at data-dependent places, where the outputs' partitions do not say what a program does).
    pub fn grid_over(mut self, input: usize, tile: &[u64]) -> KernelDef {
        self.grid = Some((input, tile.to_vec()));
        self
    }

    /// Declares the kernel unsafe: its writes are not proven, `contract` says why they are
    /// disjoint and covering.
    pub fn unsafe_contract(mut self, contract: &str) -> KernelDef {
        self.safety = Safety::Unsafe {
            contract: contract.to_string(),
        };
        self
    }

    /// The kernel: `body` writes its tile program, `reference` (inputs and outputs named as
    /// declared) computes the same values with IR ops for the oracle.
    pub fn build(
        self,
        reference: &Graph,
        body: impl FnOnce(&mut Body) -> Result<(), KernelError>,
    ) -> Result<CustomKernel, KernelError> {
        let program = self.program(body)?;
        let bytes = bincode::serde::encode_to_vec(&program, bincode::config::standard())
            .map_err(|e| body_error(&self.name, format!("the program does not encode: {e}")))?;
        Ok(CustomKernel::new(
            &self.name,
            self.inputs,
            self.outputs,
            self.safety,
            reference,
            KernelBody {
                version: BODY_VERSION,
                bytes,
            },
        )?)
    }

    /// The verified tile program over the kernel's own parameters.
    fn program(
        &self,
        body: impl FnOnce(&mut Body) -> Result<(), KernelError>,
    ) -> Result<TileKernel, KernelError> {
        let first = self
            .outputs
            .first()
            .ok_or_else(|| body_error(&self.name, "it declares no output"))?;
        let (grid_dims, grid_tile) = self.grid_shape(first)?;
        for out in &self.outputs[1..] {
            let same = out.written_dims() == first.written_dims() && out.tile == first.tile;
            if self.grid.is_none() && !same {
                return Err(body_error(
                    &self.name,
                    format!(
                        "outputs {} and {} have different partitions; one grid serves every output",
                        first.name, out.name
                    ),
                ));
            }
        }
        if self.outputs.len() > 1 && self.outputs.iter().any(|o| o.updates.is_some()) {
            return Err(body_error(
                &self.name,
                "a kernel that updates a state in place has that one output",
            ));
        }
        let mut b = KernelBuilder::new(self.name.clone());
        for (i, input) in self.inputs.iter().enumerate() {
            // A state updated in place is mutable: its loads are token-ordered.
            if self.updated_in_place(i) {
                b.writes(i, input.dtype, Region::Whole);
            } else {
                b.param(i, input.dtype, Access::Shared);
            }
        }
        let n = self.inputs.len();
        for (j, out) in self.outputs.iter().enumerate() {
            b.writes(n + j, out.dtype, Region::Whole);
        }
        let programs = b.grid(&grid_dims, &grid_tile);
        let mut types = HashMap::new();
        for &p in &programs {
            types.insert(p, Type::Index);
        }
        let mut body_builder = Body {
            def: self,
            b,
            types,
            programs,
        };
        body(&mut body_builder)?;
        let program = body_builder.b.finish();
        crate::tile::verify::verify_kernel(&program)
            .map_err(|e| body_error(&self.name, e.to_string()))?;
        Ok(program)
    }
}

impl KernelDef {
    /// The dims and tile the grid partitions: the first output's, or an unsafe kernel's
    /// [`KernelDef::grid_over`] input's.
    fn grid_shape(&self, first: &CustomOutput) -> Result<(Vec<Dim>, Vec<u64>), KernelError> {
        let Some((input, tile)) = &self.grid else {
            return Ok((first.written_dims(), first.tile.clone()));
        };
        if self.safety == Safety::Safe {
            return Err(body_error(
                &self.name,
                "a safe kernel's grid follows from its outputs' partitions; only an unsafe one \
                 takes its grid from an input",
            ));
        }
        let dims = self
            .inputs
            .get(*input)
            .ok_or_else(|| {
                body_error(
                    &self.name,
                    format!("its grid is over input {input}, which it does not declare"),
                )
            })?
            .dims
            .clone();
        if tile.len() != dims.len() || !tile.iter().all(|t| t.is_power_of_two()) {
            return Err(body_error(
                &self.name,
                format!(
                    "its grid is over input {input} of rank {} in tiles of {tile:?}; a tile has one power of two per axis",
                    dims.len()
                ),
            ));
        }
        Ok((dims, tile.clone()))
    }

    /// Whether input `param` is updated in place by an output.
    fn updated_in_place(&self, param: usize) -> bool {
        self.outputs.iter().any(|o| o.updates == Some(param))
    }
}

/// Writes a kernel's tile program: program ids, views and loads of inputs, loops, tile ops and
/// stores to the outputs. Values are [`ValueId`]s of the tile IR; every op of
/// [`TileOp`] is available through [`Body::op`].
pub struct Body<'a> {
    def: &'a KernelDef,
    b: KernelBuilder,
    types: HashMap<ValueId, Type>,
    programs: Vec<ValueId>,
}

impl Body<'_> {
    /// This program's index along grid axis `axis` (one axis per output axis).
    pub fn program_id(&mut self, axis: usize) -> Result<ValueId, KernelError> {
        self.programs.get(axis).copied().ok_or_else(|| {
            body_error(
                &self.def.name,
                format!(
                    "the grid has {} axes, not an axis {axis}",
                    self.programs.len()
                ),
            )
        })
    }

    /// The index constant `value`.
    pub fn index(&mut self, value: i64) -> ValueId {
        let v = self.b.index(value);
        self.types.insert(v, Type::Index);
        v
    }

    /// The value of `dim` (a size or one of the kernel's symbols) as an index scalar.
    pub fn dim(&mut self, dim: &Dim) -> ValueId {
        let v = self.b.dim(dim);
        self.types.insert(v, Type::Index);
        v
    }

    /// Scalar index arithmetic.
    pub fn arith(&mut self, op: IndexOp, a: ValueId, b: ValueId) -> ValueId {
        let v = self.b.arith(op, a, b);
        self.types.insert(v, Type::Index);
        v
    }

    /// A view of all of input `input` (row-major, as the kernel receives it).
    pub fn input_view(&mut self, input: usize) -> Result<ValueId, KernelError> {
        let dims = self
            .def
            .inputs
            .get(input)
            .ok_or_else(|| body_error(&self.def.name, format!("there is no input {input}")))?
            .dims
            .clone();
        Ok(self.whole_view(input, &dims))
    }

    /// A view of all of output `output` (row-major), or of the slice it writes
    /// ([`KernelDef::output_in_place_slice`]: the state's strides, from the run-time position).
    pub fn output_view(&mut self, output: usize) -> Result<ValueId, KernelError> {
        let out =
            self.def.outputs.get(output).ok_or_else(|| {
                body_error(&self.def.name, format!("there is no output {output}"))
            })?;
        let (dims, written, slice) = (out.dims.clone(), out.written_dims(), out.slice.clone());
        let param = self.def.inputs.len() + output;
        let Some(slice) = slice else {
            return Ok(self.view_from(param, &dims, &dims, None));
        };
        let zero = self.index(0);
        let position = self.op(
            TileOp::LoadScalar {
                param: slice.start,
                index: zero,
            },
            Type::Index,
        );
        Ok(self.view_from(param, &dims, &written, Some((slice.axis, position))))
    }

    fn whole_view(&mut self, param: usize, dims: &[Dim]) -> ValueId {
        self.view_from(param, dims, dims, None)
    }

    /// A view of `shape` into parameter `param` laid out row-major as `dims`, at element 0 or at
    /// `position` along `axis`.
    fn view_from(
        &mut self,
        param: usize,
        dims: &[Dim],
        shape: &[Dim],
        at: Option<(usize, ValueId)>,
    ) -> ValueId {
        let shape: Vec<ValueId> = shape.iter().map(|d| self.dim(d)).collect();
        let strides = self.b.contiguous_strides(dims);
        for &s in &strides {
            self.types.insert(s, Type::Index);
        }
        let offset = match at {
            Some((axis, position)) => self.arith(IndexOp::Mul, position, strides[axis]),
            None => self.index(0),
        };
        let rank = shape.len();
        let v = self.b.view(param, offset, shape, strides);
        self.types.insert(v, Type::View { param, rank });
        v
    }

    /// Loads the tile of `shape` at tile coordinates `coords` of the input view `view`
    /// (elements past the input's extent read `padding`).
    pub fn load(
        &mut self,
        view: ValueId,
        coords: &[ValueId],
        shape: &[u64],
        padding: f64,
    ) -> Result<ValueId, KernelError> {
        let dtype = self.view_dtype(view)?;
        let ty = Type::tile(dtype, shape);
        let in_place = matches!(self.types.get(&view), Some(Type::View { param, .. }) if self.is_in_place(*param));
        // A state updated in place is read before its store in token order (the legality pass's
        // in-place obligation), like every mutable access.
        let token = in_place.then(|| self.b.token());
        let op = TileOp::Load {
            view,
            coords: coords.to_vec(),
            padding,
            token,
        };
        if token.is_none() {
            return Ok(self.op(op, ty));
        }
        let ids = self.b.emit_multi(op, vec![ty.clone(), Type::Token]);
        self.b.set_token(ids[1]);
        self.types.insert(ids[0], ty);
        self.types.insert(ids[1], Type::Token);
        Ok(ids[0])
    }

    /// Stores the tile `value` at tile coordinates `coords` of the output view `view`
    /// (elements past the output's extent are not written). A safe kernel's store must be at
    /// the program's own tile (the program ids): the legality pass refuses any other.
    pub fn store(
        &mut self,
        view: ValueId,
        coords: &[ValueId],
        value: ValueId,
    ) -> Result<(), KernelError> {
        self.view_dtype(view)?;
        let token = self.b.token();
        let op = TileOp::Store {
            view,
            coords: coords.to_vec(),
            value,
            token,
        };
        let next = self.op(op, Type::Token);
        self.b.set_token(next);
        Ok(())
    }

    /// Stores `value` as this program's own tile of output `output`.
    pub fn store_own(&mut self, output: usize, value: ValueId) -> Result<(), KernelError> {
        let view = self.output_view(output)?;
        let coords = self.programs.clone();
        self.store(view, &coords, value)
    }

    /// Whether parameter `param` is a state updated in place (the input, or the output that
    /// updates it).
    fn is_in_place(&self, param: usize) -> bool {
        let n = self.def.inputs.len();
        self.def.updated_in_place(param)
            || (param >= n
                && self
                    .def
                    .outputs
                    .get(param - n)
                    .is_some_and(|o| o.updates.is_some()))
    }

    fn view_dtype(&self, view: ValueId) -> Result<DType, KernelError> {
        let Some(Type::View { param, .. }) = self.types.get(&view) else {
            return Err(body_error(&self.def.name, format!("{view} is not a view")));
        };
        let n = self.def.inputs.len();
        Ok(if *param < n {
            self.def.inputs[*param].dtype
        } else {
            self.def.outputs[*param - n].dtype
        })
    }

    /// Emits `op` defining one value of type `ty` (any op of the tile IR but loops, which
    /// [`Body::for_loop`] writes).
    pub fn op(&mut self, op: TileOp, ty: Type) -> ValueId {
        let v = self.b.emit(op, ty.clone());
        self.types.insert(v, ty);
        v
    }

    /// The type of `value`, if this body defined it.
    pub fn type_of(&self, value: ValueId) -> Option<&Type> {
        self.types.get(&value)
    }

    /// `for i in (start..end).step_by(step)` carrying `init`: `body` gets the index and the
    /// carried values and returns the next ones; returns the final values.
    pub fn for_loop(
        &mut self,
        (start, end, step): (ValueId, ValueId, ValueId),
        init: &[ValueId],
        body: impl FnOnce(&mut Body, ValueId, &[ValueId]) -> Result<Vec<ValueId>, KernelError>,
    ) -> Result<Vec<ValueId>, KernelError> {
        let var = self.b.fresh();
        self.types.insert(var, Type::Index);
        let mut carried = Vec::with_capacity(init.len());
        for &v in init {
            let ty = self.types.get(&v).cloned().ok_or_else(|| {
                body_error(&self.def.name, format!("loop value {v} has no known type"))
            })?;
            let c = self.b.fresh();
            self.types.insert(c, ty.clone());
            carried.push((c, ty));
        }
        self.b.open_block();
        let inner: Vec<ValueId> = carried.iter().map(|(c, _)| *c).collect();
        let yields = body(self, var, &inner);
        let block = self.b.close_block();
        let yields = yields?;
        let types: Vec<Type> = carried.iter().map(|(_, t)| t.clone()).collect();
        let op = TileOp::For {
            start,
            end,
            step,
            var,
            init: init.to_vec(),
            carried,
            body: block,
            yields,
        };
        let results = self.b.emit_multi(op, types.clone());
        for (r, t) in results.iter().zip(types) {
            self.types.insert(*r, t);
        }
        Ok(results)
    }
}

/// The tile program of `kernel` writing its outputs `written` (`(output, buffer)`, each output
/// once, in output order), bound to the buffers `inputs` (one per operand, of the operands'
/// `types`), named `name` (see the module doc). An output updating input 0 in place is bound to
/// its buffer, the state's, as parameter 0.
pub fn instantiate(
    kernel: &CustomKernel,
    written: &[(usize, usize)],
    types: &[&TensorType],
    inputs: &[usize],
    name: String,
) -> Result<TileKernel, KernelError> {
    let fail = |reason: String| body_error(kernel.name(), reason);
    let mut program = decode(kernel)?;
    let bound = kernel.bind(types)?;
    let n = kernel.inputs().len();
    let outputs = kernel.outputs().len();
    let in_order = written.windows(2).all(|w| w[0].0 < w[1].0);
    if written.is_empty()
        || !in_order
        || written.iter().any(|(o, _)| *o >= outputs)
        || inputs.len() != n
        || program.params.len() != n + outputs
    {
        return Err(fail(
            "its body's parameters do not match its signature".into(),
        ));
    }
    bind_dims(&mut program.grid_body, &bound).map_err(&fail)?;
    bind_dims(&mut program.body, &bound).map_err(&fail)?;
    let in_place = |o: usize| kernel.outputs()[o].updates.is_some();
    // Each written output's parameter: in place, 0 (the state it updates, read and written
    // through one parameter); else the next after the inputs. Unwritten outputs' go.
    let mut next = n;
    let at: Vec<usize> = written
        .iter()
        .map(|&(o, _)| {
            if in_place(o) {
                return 0;
            }
            next += 1;
            next - 1
        })
        .collect();
    let remap = |p: usize| -> Option<usize> {
        if p < n {
            return Some(p);
        }
        written.iter().position(|(o, _)| n + o == p).map(|j| at[j])
    };
    keep_outputs(&mut program.body, &remap, &mut Vec::new());
    let mut params = Vec::with_capacity(n + written.len());
    for (i, &buffer) in inputs.iter().enumerate() {
        let mut p = program.params[i].clone();
        p.buffer = buffer;
        params.push(p);
    }
    for (&(output, buffer), &param) in written.iter().zip(&at) {
        let mut p = program.params[n + output].clone();
        p.buffer = buffer;
        if param == 0 {
            params[0] = p;
        } else {
            params.push(p);
        }
    }
    program.params = params;
    program.writes = written
        .iter()
        .zip(&at)
        .map(|(&(output, _), &param)| WriteRegion {
            param,
            region: written_region(kernel, output, &bound),
        })
        .collect();
    program.name = name;
    Ok(program)
}

/// What output `output` writes of its buffer: an unsafe in-place output some elements, a slice
/// output its slice (the length bound as [`CustomKernel::bind`] bound the operands), else all.
fn written_region(kernel: &CustomKernel, output: usize, bound: &BTreeMap<String, Dim>) -> Region {
    let out = &kernel.outputs()[output];
    match (kernel.safety(), &out.slice) {
        (Safety::Unsafe { .. }, _) if out.updates.is_some() => Region::Scattered,
        (_, Some(slice)) => Region::Slice {
            axis: slice.axis,
            start: SliceStart::Param(slice.start),
            len: tir_graph::custom::bind_dim(&slice.len, bound),
        },
        _ => Region::Whole,
    }
}

/// The kernel's tile program, decoded from its body.
fn decode(kernel: &CustomKernel) -> Result<TileKernel, KernelError> {
    let body = kernel.body();
    if body.version != BODY_VERSION {
        return Err(body_error(
            kernel.name(),
            format!(
                "its body is encoding version {}, this build reads {BODY_VERSION}",
                body.version
            ),
        ));
    }
    let (program, _): (TileKernel, usize) =
        bincode::serde::decode_from_slice(&body.bytes, bincode::config::standard())
            .map_err(|e| body_error(kernel.name(), format!("its body does not decode: {e}")))?;
    Ok(program)
}

/// Replaces each `Dim` of the kernel's symbols by its binding: a size becomes an index
/// constant, a symbol the graph's symbol.
fn bind_dims(block: &mut Block, bound: &BTreeMap<String, Dim>) -> Result<(), String> {
    for stmt in &mut block.stmts {
        match &mut stmt.op {
            TileOp::Dim { name } => match bound.get(name.as_str()) {
                Some(Dim::Static(v)) => stmt.op = TileOp::Index { value: *v as i64 },
                Some(Dim::Symbolic(s)) => *name = s.clone(),
                Some(d @ Dim::Expr(_)) => {
                    return Err(format!(
                        "its dim `{name}` is bound to the expression {d}; bind it to a size or a symbol"
                    ))
                }
                None => return Err(format!("its dim `{name}` is not bound by the operands")),
            },
            TileOp::For { body, .. } => bind_dims(body, bound)?,
            _ => {}
        }
    }
    Ok(())
}

/// Drops the views and stores of the parameters `remap` removes (a dropped store's token
/// becomes a fresh token: it ordered nothing the kept outputs need, since each output is
/// stored once and never loaded) and renumbers the others.
fn keep_outputs(
    block: &mut Block,
    remap: &impl Fn(usize) -> Option<usize>,
    dropped_views: &mut Vec<ValueId>,
) {
    let mut kept = Vec::with_capacity(block.stmts.len());
    for mut stmt in std::mem::take(&mut block.stmts) {
        match &mut stmt.op {
            TileOp::MakeView { param, .. } => match remap(*param) {
                Some(p) => *param = p,
                None => {
                    dropped_views.extend(stmt.defs.iter().map(|(v, _)| *v));
                    continue;
                }
            },
            TileOp::Store { view, .. } if dropped_views.contains(view) => {
                stmt.op = TileOp::MakeToken;
            }
            TileOp::LoadScalar { param, .. } => *param = remap(*param).unwrap_or(*param),
            TileOp::For { body, carried, .. } => {
                keep_outputs(body, remap, dropped_views);
                for (_, t) in carried {
                    remap_type(t, remap);
                }
            }
            _ => {}
        }
        for (_, t) in &mut stmt.defs {
            remap_type(t, remap);
        }
        kept.push(stmt);
    }
    block.stmts = kept;
}

fn remap_type(t: &mut Type, remap: &impl Fn(usize) -> Option<usize>) {
    if let Type::View { param, .. } = t {
        *param = remap(*param).unwrap_or(*param);
    }
}
