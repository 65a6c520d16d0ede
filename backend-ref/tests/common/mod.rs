//! Builders for writing tile kernels and programs by hand, compactly: each value's type is
//! tracked so that ops infer their result types the way the tile IR defines them.

#![allow(dead_code)]

pub mod programs;

use std::collections::{BTreeMap, BTreeSet};
use tir_graph::eval::F64Tensor;
use tir_graph::{BinaryOp, DType, Dim, ReduceOp, TensorType, UnaryOp};
use tir_lower::legality::{Certificate, LaunchCheck};
use tir_lower::plan::MemoryPlan;
use tir_lower::schedule::Schedule;
use tir_lower::tile::{
    Access, Block, CmpOp, IndexOp, Region, Stmt, TensorParam, TileKernel, TileOp, Type, ValueId,
    WriteRegion,
};
use tir_lower::{Buffer, Program, Signature, Storage};

/// Builds one [`TileKernel`]: statements go to the grid body inside [`KernelBuilder::grid`],
/// to the innermost open loop body inside [`KernelBuilder::for_loop`], else to the body.
pub struct KernelBuilder {
    name: String,
    params: Vec<TensorParam>,
    writes: Vec<WriteRegion>,
    grid: Vec<ValueId>,
    grid_body: Block,
    in_grid: bool,
    /// The body, then one block per open loop.
    blocks: Vec<Block>,
    types: BTreeMap<ValueId, Type>,
    next: u32,
}

impl KernelBuilder {
    pub fn new(name: &str) -> KernelBuilder {
        KernelBuilder {
            name: name.to_string(),
            params: Vec::new(),
            writes: Vec::new(),
            grid: Vec::new(),
            grid_body: Block::default(),
            in_grid: false,
            blocks: vec![Block::default()],
            types: BTreeMap::new(),
            next: 0,
        }
    }

    /// A read-only parameter bound to `buffer`.
    pub fn shared(&mut self, buffer: usize, dtype: DType) -> usize {
        self.params.push(TensorParam {
            buffer,
            dtype,
            access: Access::Shared,
        });
        self.params.len() - 1
    }

    /// A written parameter bound to `buffer`, writing `region` of it.
    pub fn mutable(&mut self, buffer: usize, dtype: DType, region: Region) -> usize {
        self.params.push(TensorParam {
            buffer,
            dtype,
            access: Access::Mutable,
        });
        let param = self.params.len() - 1;
        self.writes.push(WriteRegion { param, region });
        param
    }

    /// A written parameter with no declared write region (to test checking mode).
    pub fn mutable_undeclared(&mut self, buffer: usize, dtype: DType) -> usize {
        self.params.push(TensorParam {
            buffer,
            dtype,
            access: Access::Mutable,
        });
        self.params.len() - 1
    }

    /// Emits the grid body with `f`, which returns the grid extents.
    pub fn grid(&mut self, f: impl FnOnce(&mut KernelBuilder) -> Vec<ValueId>) {
        self.in_grid = true;
        self.grid = f(self);
        self.in_grid = false;
    }

    pub fn fresh(&mut self) -> ValueId {
        self.next += 1;
        ValueId(self.next - 1)
    }

    pub fn ty(&self, v: ValueId) -> Type {
        self.types[&v].clone()
    }

    pub fn tile_type(&self, v: ValueId) -> (DType, Vec<u64>) {
        match self.ty(v) {
            Type::Tile { dtype, shape } => (dtype, shape),
            t => panic!("{v} is {t:?}, not a tile"),
        }
    }

    /// Appends a statement defining values of `types`.
    pub fn emit(&mut self, op: TileOp, types: Vec<Type>) -> Vec<ValueId> {
        let defs: Vec<(ValueId, Type)> = types.into_iter().map(|t| (self.fresh(), t)).collect();
        for (id, t) in &defs {
            self.types.insert(*id, t.clone());
        }
        let ids = defs.iter().map(|(id, _)| *id).collect();
        let stmt = Stmt { defs, op };
        if self.in_grid {
            self.grid_body.stmts.push(stmt);
        } else {
            self.blocks.last_mut().unwrap().stmts.push(stmt);
        }
        ids
    }

    pub fn emit1(&mut self, op: TileOp, ty: Type) -> ValueId {
        self.emit(op, vec![ty])[0]
    }

    pub fn index(&mut self, value: i64) -> ValueId {
        self.emit1(TileOp::Index { value }, Type::Index)
    }

    pub fn dim(&mut self, name: &str) -> ValueId {
        self.emit1(TileOp::Dim { name: name.into() }, Type::Index)
    }

    pub fn pid(&mut self, axis: usize) -> ValueId {
        self.emit1(TileOp::ProgramId { axis }, Type::Index)
    }

    /// Scalar or tile integer arithmetic.
    pub fn arith(&mut self, op: IndexOp, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a);
        self.emit1(TileOp::IndexArith { op, a, b }, ty)
    }

    /// `ceil(a / b)` on scalars.
    pub fn cdiv(&mut self, a: ValueId, b: i64) -> ValueId {
        let b1 = self.index(b - 1);
        let b = self.index(b);
        let s = self.arith(IndexOp::Add, a, b1);
        self.arith(IndexOp::Div, s, b)
    }

    pub fn cmp(&mut self, op: CmpOp, a: ValueId, b: ValueId) -> ValueId {
        let shape = match self.ty(a) {
            Type::Tile { shape, .. } => shape,
            _ => vec![],
        };
        self.emit1(
            TileOp::IndexCmp { op, a, b },
            Type::tile(DType::Bool, &shape),
        )
    }

    pub fn load_scalar(&mut self, param: usize, index: ValueId) -> ValueId {
        self.emit1(TileOp::LoadScalar { param, index }, Type::Index)
    }

    pub fn view(
        &mut self,
        param: usize,
        offset: ValueId,
        shape: &[ValueId],
        strides: &[ValueId],
    ) -> ValueId {
        let rank = shape.len();
        self.emit1(
            TileOp::MakeView {
                param,
                offset,
                shape: shape.to_vec(),
                strides: strides.to_vec(),
            },
            Type::View { param, rank },
        )
    }

    /// A row-major view of all of `param`, whose dims are `dims` (index scalars).
    pub fn row_major_view(&mut self, param: usize, dims: &[ValueId]) -> ValueId {
        let zero = self.index(0);
        let mut strides = vec![self.index(1)];
        for &d in dims[1..].iter().rev() {
            let s = self.arith(IndexOp::Mul, *strides.last().unwrap(), d);
            strides.push(s);
        }
        strides.reverse();
        self.view(param, zero, dims, &strides)
    }

    pub fn token(&mut self) -> ValueId {
        self.emit1(TileOp::MakeToken, Type::Token)
    }

    pub fn load(
        &mut self,
        view: ValueId,
        coords: &[ValueId],
        padding: f64,
        dtype: DType,
        shape: &[u64],
    ) -> ValueId {
        let op = TileOp::Load {
            view,
            coords: coords.to_vec(),
            padding,
            token: None,
        };
        self.emit1(op, Type::tile(dtype, shape))
    }

    /// A token-ordered load (of a mutable parameter): the tile and the next token.
    pub fn load_ordered(
        &mut self,
        view: ValueId,
        coords: &[ValueId],
        dtype: DType,
        shape: &[u64],
        token: ValueId,
    ) -> (ValueId, ValueId) {
        let op = TileOp::Load {
            view,
            coords: coords.to_vec(),
            padding: 0.0,
            token: Some(token),
        };
        let ids = self.emit(op, vec![Type::tile(dtype, shape), Type::Token]);
        (ids[0], ids[1])
    }

    pub fn load_indexed(
        &mut self,
        view: ValueId,
        indices: &[ValueId],
        mask: ValueId,
        padding: f64,
        dtype: DType,
    ) -> ValueId {
        let (_, shape) = self.tile_type(mask);
        let op = TileOp::LoadIndexed {
            view,
            indices: indices.to_vec(),
            mask,
            padding,
        };
        self.emit1(op, Type::tile(dtype, &shape))
    }

    pub fn store(
        &mut self,
        view: ValueId,
        coords: &[ValueId],
        value: ValueId,
        token: ValueId,
    ) -> ValueId {
        let op = TileOp::Store {
            view,
            coords: coords.to_vec(),
            value,
            token,
        };
        self.emit1(op, Type::Token)
    }

    pub fn constant(&mut self, dtype: DType, shape: &[u64], value: f64) -> ValueId {
        self.emit1(TileOp::Constant { value }, Type::tile(dtype, shape))
    }

    pub fn iota(&mut self, shape: &[u64], axis: usize) -> ValueId {
        self.emit1(TileOp::Iota { axis }, Type::tile(DType::I64, shape))
    }

    pub fn splat(&mut self, x: ValueId, dtype: DType, shape: &[u64]) -> ValueId {
        self.emit1(TileOp::Splat { x }, Type::tile(dtype, shape))
    }

    pub fn unary(&mut self, op: UnaryOp, x: ValueId) -> ValueId {
        let ty = self.ty(x);
        self.emit1(TileOp::Unary { op, x }, ty)
    }

    pub fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        let (dtype, shape) = self.tile_type(a);
        let dtype = match op {
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => DType::Bool,
            _ => dtype,
        };
        self.emit1(TileOp::Binary { op, a, b }, Type::tile(dtype, &shape))
    }

    pub fn select(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let ty = self.ty(a);
        self.emit1(TileOp::Select { cond, a, b }, ty)
    }

    pub fn cast(&mut self, x: ValueId, dtype: DType) -> ValueId {
        let (_, shape) = self.tile_type(x);
        self.emit1(TileOp::Cast { x }, Type::tile(dtype, &shape))
    }

    pub fn broadcast(&mut self, x: ValueId, shape: &[u64]) -> ValueId {
        let (dtype, _) = self.tile_type(x);
        self.emit1(TileOp::Broadcast { x }, Type::tile(dtype, shape))
    }

    pub fn reshape(&mut self, x: ValueId, shape: &[u64]) -> ValueId {
        let (dtype, _) = self.tile_type(x);
        self.emit1(TileOp::Reshape { x }, Type::tile(dtype, shape))
    }

    pub fn permute(&mut self, x: ValueId, perm: &[usize]) -> ValueId {
        let (dtype, shape) = self.tile_type(x);
        let shape: Vec<u64> = perm.iter().map(|&p| shape[p]).collect();
        let op = TileOp::Permute {
            x,
            perm: perm.to_vec(),
        };
        self.emit1(op, Type::tile(dtype, &shape))
    }

    pub fn reduce(&mut self, op: ReduceOp, x: ValueId, axis: usize) -> ValueId {
        let (dtype, mut shape) = self.tile_type(x);
        shape[axis] = 1;
        let dtype = match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
            _ => dtype,
        };
        self.emit1(TileOp::Reduce { op, x, axis }, Type::tile(dtype, &shape))
    }

    pub fn mma(&mut self, a: ValueId, b: ValueId, acc: ValueId) -> ValueId {
        let ty = self.ty(acc);
        self.emit1(TileOp::Mma { a, b, acc }, ty)
    }

    /// `for i in (start..end).step_by(step)` carrying `init`; `body(builder, i, carried)` returns
    /// the yields. Returns the final carried values.
    pub fn for_loop(
        &mut self,
        start: ValueId,
        end: ValueId,
        step: ValueId,
        init: &[ValueId],
        body: impl FnOnce(&mut KernelBuilder, ValueId, &[ValueId]) -> Vec<ValueId>,
    ) -> Vec<ValueId> {
        let var = self.fresh();
        self.types.insert(var, Type::Index);
        let carried: Vec<(ValueId, Type)> = init
            .iter()
            .map(|&v| {
                let t = self.ty(v);
                let id = self.fresh();
                self.types.insert(id, t.clone());
                (id, t)
            })
            .collect();
        self.blocks.push(Block::default());
        let ids: Vec<ValueId> = carried.iter().map(|(id, _)| *id).collect();
        let yields = body(self, var, &ids);
        let block = self.blocks.pop().unwrap();
        let types = carried.iter().map(|(_, t)| t.clone()).collect();
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
        self.emit(op, types)
    }

    pub fn finish(mut self) -> TileKernel {
        assert_eq!(self.blocks.len(), 1, "a loop is still open");
        TileKernel {
            name: self.name,
            params: self.params,
            writes: self.writes,
            grid: self.grid,
            grid_body: self.grid_body,
            body: self.blocks.pop().unwrap(),
            library: None,
            flops: Default::default(),
        }
    }
}

/// Builds a [`Program`]: buffers, kernels (run in order, each depending on the previous one),
/// launch checks; the schedule and memory plan are derived.
#[derive(Default)]
pub struct ProgramBuilder {
    buffers: Vec<Buffer>,
    kernels: Vec<TileKernel>,
    certificates: Vec<Certificate>,
    signature: Signature,
}

impl ProgramBuilder {
    pub fn new() -> ProgramBuilder {
        ProgramBuilder::default()
    }

    fn buffer(&mut self, name: &str, ty: TensorType, storage: Storage) -> usize {
        self.buffers.push(Buffer {
            name: name.to_string(),
            ty,
            storage,
        });
        self.buffers.len() - 1
    }

    pub fn input(&mut self, name: &str, ty: TensorType) -> usize {
        self.signature.inputs.push((name.into(), ty.clone()));
        self.buffer(name, ty, Storage::Input(name.into()))
    }

    pub fn parameter(&mut self, name: &str, ty: TensorType) -> usize {
        self.signature.parameters.push((name.into(), ty.clone()));
        self.buffer(name, ty, Storage::Parameter(name.into()))
    }

    pub fn state(&mut self, name: &str, ty: TensorType) -> usize {
        self.signature.states.push((name.into(), ty.clone()));
        self.buffer(name, ty, Storage::State(name.into()))
    }

    pub fn output(&mut self, name: &str, ty: TensorType) -> usize {
        let b = self.buffer(name, ty, Storage::Output);
        self.signature.outputs.push((name.into(), b));
        b
    }

    pub fn arena(&mut self, name: &str, ty: TensorType) -> usize {
        self.buffer(name, ty, Storage::Arena)
    }

    pub fn kernel(&mut self, kernel: TileKernel, checks: Vec<LaunchCheck>) {
        self.certificates.push(Certificate {
            kernel: kernel.name.clone(),
            facts: vec![],
            checks,
        });
        self.kernels.push(kernel);
    }

    pub fn finish(mut self) -> Program {
        let deps: Vec<Vec<usize>> = (0..self.kernels.len())
            .map(|k| if k == 0 { vec![] } else { vec![k - 1] })
            .collect();
        let schedule = Schedule::from_deps(deps);
        let uses: Vec<Vec<usize>> = self
            .kernels
            .iter()
            .map(|k| k.params.iter().map(|p| p.buffer).collect())
            .collect();
        let plan = MemoryPlan::new(&self.buffers, &schedule.wave_of(), &uses);
        let mut dims = BTreeSet::new();
        for (_, ty) in self
            .signature
            .inputs
            .iter()
            .chain(&self.signature.parameters)
        {
            for d in ty.shape.dims() {
                if let Dim::Symbolic(s) = d {
                    dims.insert(s.clone());
                }
            }
        }
        self.signature.dims = dims.into_iter().collect();
        Program {
            buffers: self.buffers,
            kernels: self.kernels,
            certificates: self.certificates,
            plan,
            schedule,
            signature: self.signature,
        }
    }
}

/// Deterministic values exact in `dtype`.
pub fn random(dtype: DType, dims: &[u64], seed: u64) -> F64Tensor {
    F64Tensor::random(dtype, dims.to_vec(), seed)
}

pub fn tensor(dtype: DType, dims: &[u64], data: Vec<f64>) -> F64Tensor {
    F64Tensor::new(dtype, dims.to_vec(), data).expect("a well-formed tensor")
}

pub fn sources(items: Vec<(&str, F64Tensor)>) -> BTreeMap<String, F64Tensor> {
    items.into_iter().map(|(n, t)| (n.to_string(), t)).collect()
}
