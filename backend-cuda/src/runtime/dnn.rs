//! cuDNN, for attention kernels that are a fused attention ([`LibraryCall::Attention`]): one
//! handle, a workspace per lane (as for cuBLASLt, see [`super::blas`]), and an execution plan
//! per shape, built through cuDNN's backend graph API.
//!
//! The plan's operation graph is the one cuDNN's fused flash-attention engines recognise:
//! `S = Q @ Kᵀ` (`K` read transposed through its strides), `S · scale` (a host scalar passed
//! by value), under the causal mask the select of `S` where `row >= col` (positions from
//! `GEN_INDEX`) and `-inf` elsewhere, then the softmax as `max`, `x - max`, `exp`, `sum`, the
//! row statistics `max + log(sum)` (virtual, but the engines match only a graph that has them)
//! and `exp / sum` in the inputs' dtype, and `O = P @ V`. Every intermediate is virtual: the
//! engine never writes the scores. Scores and softmax are `f32`, as in the kernel's body.
//!
//! A shape no engine runs fails at [`Dnn::prepare`] with cuDNN's reason: under the `auto` path
//! the kernel then runs as generated, under `cudnn` the run fails with that reason.

use super::driver::{DriverResult, LaneWorkspaces, Stream};
use cudarc::cudnn::sys;
use std::collections::HashMap;
use std::ffi::c_void;
use sys::cudnnBackendAttributeName_t as Attr;
use sys::cudnnBackendAttributeType_t as AttrType;
use sys::cudnnBackendDescriptorType_t as Kind;
use sys::cudnnDataType_t as Data;
use sys::cudnnPointwiseMode_t as Pointwise;
use tir_graph::DType;

/// The workspace a plan may use, per lane (the engines ask for 256 bytes for a prefill and
/// about 128 KiB for one query over 4096 keys at 32 heads); a plan that needs more is refused.
const WORKSPACE: usize = 8 << 20;

/// One shape of attention: `[b, h, s_q, s_kv]`, the head dims, and the strides in elements of
/// `q`, `k`, `v`, `o` as `[b, h, s, d]` views (`d` contiguous).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionShape {
    pub dtype: DType,
    pub dims: [u64; 4],
    pub d: u64,
    pub d_v: u64,
    pub strides: [[u64; 4]; 4],
    pub causal: bool,
    /// The scale's `f32` bits.
    pub scale: u32,
}

/// The device addresses of an attention's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionOperands {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
}

/// The unique ids of the graph's tensors that the variant pack binds.
const Q: i64 = 1;
const K: i64 = 2;
const V: i64 = 3;
const O: i64 = 4;
const SCALE: i64 = 5;
const NEG_INF: i64 = 6;

/// A backend descriptor, destroyed when dropped.
struct Descriptor(sys::cudnnBackendDescriptor_t);

impl Drop for Descriptor {
    fn drop(&mut self) {
        // SAFETY: created once in `Descriptor::new`, destroyed once here.
        let _ = unsafe { sys::cudnnBackendDestroyDescriptor(self.0) };
    }
}

/// `what` failed with `status`, with cuDNN's last error message.
fn check(what: &str, status: sys::cudnnStatus_t) -> DriverResult<()> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Ok(());
    }
    let mut message = vec![0u8; 1024];
    // SAFETY: the buffer holds `len` bytes; cuDNN writes a NUL-terminated string into it.
    unsafe { sys::cudnnGetLastErrorString(message.as_mut_ptr().cast(), message.len()) };
    let end = message
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(message.len());
    let reason = String::from_utf8_lossy(&message[..end]);
    let reason = reason.lines().next().unwrap_or("").trim();
    Err(format!("cuDNN {what} failed: {status:?} {reason}"))
}

impl Descriptor {
    fn new(kind: Kind) -> DriverResult<Descriptor> {
        let mut d = std::ptr::null_mut();
        // SAFETY: `d` receives a new descriptor.
        check("create descriptor", unsafe {
            sys::cudnnBackendCreateDescriptor(kind, &mut d)
        })?;
        Ok(Descriptor(d))
    }

    /// Sets `attr` to the `values`, of the attribute type `ty`.
    fn set<T>(&self, attr: Attr, ty: AttrType, values: &[T]) -> DriverResult<()> {
        // SAFETY: `values` holds `len` elements of the C type that `ty` names.
        check(&format!("set {attr:?}"), unsafe {
            sys::cudnnBackendSetAttribute(
                self.0,
                attr,
                ty,
                values.len() as i64,
                values.as_ptr() as *const c_void,
            )
        })
    }

    fn descriptors(&self, attr: Attr, ds: &[&Descriptor]) -> DriverResult<()> {
        let raw: Vec<_> = ds.iter().map(|d| d.0).collect();
        self.set(attr, AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)
    }

    fn ints(&self, attr: Attr, values: &[i64]) -> DriverResult<()> {
        self.set(attr, AttrType::CUDNN_TYPE_INT64, values)
    }

    fn data_type(&self, attr: Attr, ty: Data) -> DriverResult<()> {
        self.set(attr, AttrType::CUDNN_TYPE_DATA_TYPE, &[ty])
    }

    fn flag(&self, attr: Attr) -> DriverResult<()> {
        self.set(attr, AttrType::CUDNN_TYPE_BOOLEAN, &[true])
    }

    fn finalized(self, what: &str) -> DriverResult<Descriptor> {
        // SAFETY: every required attribute was set.
        check(&format!("finalize {what}"), unsafe {
            sys::cudnnBackendFinalize(self.0)
        })?;
        Ok(self)
    }
}

/// Builds the operation graph: its tensors and ops, kept alive until the plan is.
struct GraphBuilder {
    keep: Vec<Descriptor>,
    ops: Vec<Descriptor>,
    next_uid: i64,
}

/// A tensor's index in [`GraphBuilder::keep`].
#[derive(Clone, Copy)]
struct Tensor(usize);

impl GraphBuilder {
    fn tensor(
        &mut self,
        ty: Data,
        dims: [u64; 4],
        strides: [u64; 4],
        uid: i64,
    ) -> DriverResult<Tensor> {
        let t = Descriptor::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
        t.data_type(Attr::CUDNN_ATTR_TENSOR_DATA_TYPE, ty)?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims.map(|d| d as i64))?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_STRIDES, &strides.map(|s| s as i64))?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
        if uid > NEG_INF {
            t.flag(Attr::CUDNN_ATTR_TENSOR_IS_VIRTUAL)?;
        } else if uid >= SCALE {
            t.flag(Attr::CUDNN_ATTR_TENSOR_IS_BY_VALUE)?;
        }
        self.keep.push(t.finalized("tensor")?);
        Ok(Tensor(self.keep.len() - 1))
    }

    /// A virtual tensor of `dims`, row-major.
    fn virtual_tensor(&mut self, ty: Data, dims: [u64; 4]) -> DriverResult<Tensor> {
        self.next_uid += 1;
        let strides = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
        self.tensor(ty, dims, strides, self.next_uid)
    }

    fn get(&self, t: Tensor) -> &Descriptor {
        &self.keep[t.0]
    }

    fn op(&mut self, op: Descriptor, what: &str) -> DriverResult<()> {
        self.ops.push(op.finalized(what)?);
        Ok(())
    }

    /// `y = mode(x, b)`, selecting by `t` for `BINARY_SELECT`; `axis` for `GEN_INDEX`.
    fn pointwise(
        &mut self,
        mode: Pointwise,
        prec: Data,
        (x, b, t): (Tensor, Option<Tensor>, Option<Tensor>),
        y: Tensor,
        axis: Option<i64>,
    ) -> DriverResult<()> {
        let pw = Descriptor::new(Kind::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
        pw.set(
            Attr::CUDNN_ATTR_POINTWISE_MODE,
            AttrType::CUDNN_TYPE_POINTWISE_MODE,
            &[mode],
        )?;
        pw.data_type(Attr::CUDNN_ATTR_POINTWISE_MATH_PREC, prec)?;
        if let Some(axis) = axis {
            pw.ints(Attr::CUDNN_ATTR_POINTWISE_AXIS, &[axis])?;
        }
        let pw = pw.finalized("pointwise")?;
        let op = Descriptor::new(Kind::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
        op.descriptors(Attr::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&pw])?;
        op.descriptors(Attr::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[self.get(x)])?;
        if let Some(b) = b {
            op.descriptors(Attr::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[self.get(b)])?;
        }
        if let Some(t) = t {
            op.descriptors(Attr::CUDNN_ATTR_OPERATION_POINTWISE_TDESC, &[self.get(t)])?;
        }
        op.descriptors(Attr::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[self.get(y)])?;
        self.keep.push(pw);
        self.op(op, &format!("{mode:?}"))
    }

    fn binary(&mut self, mode: Pointwise, x: Tensor, b: Tensor, y: Tensor) -> DriverResult<()> {
        self.pointwise(mode, Data::CUDNN_DATA_FLOAT, (x, Some(b), None), y, None)
    }

    /// `y = op(x)` over the last axis (kept, of extent 1 in `y`).
    fn reduce(&mut self, op: sys::cudnnReduceTensorOp_t, x: Tensor, y: Tensor) -> DriverResult<()> {
        let r = Descriptor::new(Kind::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
        r.set(
            Attr::CUDNN_ATTR_REDUCTION_OPERATOR,
            AttrType::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
            &[op],
        )?;
        r.data_type(Attr::CUDNN_ATTR_REDUCTION_COMP_TYPE, Data::CUDNN_DATA_FLOAT)?;
        let r = r.finalized("reduction")?;
        let o = Descriptor::new(Kind::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &[&r])?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &[self.get(x)])?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &[self.get(y)])?;
        self.keep.push(r);
        self.op(o, "reduction")
    }

    /// `c = a @ b`, accumulating in `f32`.
    fn matmul(&mut self, a: Tensor, b: Tensor, c: Tensor) -> DriverResult<()> {
        let m = Descriptor::new(Kind::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
        m.data_type(Attr::CUDNN_ATTR_MATMUL_COMP_TYPE, Data::CUDNN_DATA_FLOAT)?;
        let m = m.finalized("matmul")?;
        let o = Descriptor::new(Kind::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_MATMUL_ADESC, &[self.get(a)])?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_MATMUL_BDESC, &[self.get(b)])?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_MATMUL_CDESC, &[self.get(c)])?;
        o.descriptors(Attr::CUDNN_ATTR_OPERATION_MATMUL_DESC, &[&m])?;
        self.keep.push(m);
        self.op(o, "matmul")
    }
}

/// An execution plan with every descriptor it was built from, and its workspace need.
struct Plan {
    plan: Descriptor,
    workspace: usize,
    _graph: Vec<Descriptor>,
}

fn data_type(dtype: DType) -> Option<Data> {
    match dtype {
        DType::F16 => Some(Data::CUDNN_DATA_HALF),
        DType::BF16 => Some(Data::CUDNN_DATA_BFLOAT16),
        _ => None,
    }
}

/// The operation graph of attention of shape `s` (see the module doc).
fn attention_graph(
    s: &AttentionShape,
    handle: sys::cudnnHandle_t,
) -> DriverResult<(Descriptor, GraphBuilder)> {
    let io = data_type(s.dtype)
        .ok_or_else(|| format!("cuDNN fused attention of {} is not supported", s.dtype))?;
    let [b, h, sq, sk] = s.dims;
    let [qs, ks, vs, os] = s.strides;
    let mut g = GraphBuilder {
        keep: Vec::new(),
        ops: Vec::new(),
        next_uid: NEG_INF,
    };
    let float = Data::CUDNN_DATA_FLOAT;
    let q = g.tensor(io, [b, h, sq, s.d], qs, Q)?;
    let kt = g.tensor(io, [b, h, s.d, sk], [ks[0], ks[1], ks[3], ks[2]], K)?;
    let v = g.tensor(io, [b, h, sk, s.d_v], vs, V)?;
    let o = g.tensor(io, [b, h, sq, s.d_v], os, O)?;
    let scale = g.tensor(float, [1; 4], [1; 4], SCALE)?;
    let scores = [b, h, sq, sk];
    let rows = [b, h, sq, 1];
    let raw = g.virtual_tensor(float, scores)?;
    g.matmul(q, kt, raw)?;
    let mut logits = g.virtual_tensor(float, scores)?;
    g.binary(Pointwise::CUDNN_POINTWISE_MUL, raw, scale, logits)?;
    if s.causal {
        let neg_inf = g.tensor(float, [1; 4], [1; 4], NEG_INF)?;
        let row = g.virtual_tensor(Data::CUDNN_DATA_INT32, scores)?;
        let col = g.virtual_tensor(Data::CUDNN_DATA_INT32, scores)?;
        let visible = g.virtual_tensor(Data::CUDNN_DATA_BOOLEAN, scores)?;
        let masked = g.virtual_tensor(float, scores)?;
        let index = Pointwise::CUDNN_POINTWISE_GEN_INDEX;
        g.pointwise(index, float, (logits, None, None), row, Some(2))?;
        g.pointwise(index, float, (logits, None, None), col, Some(3))?;
        let ge = Pointwise::CUDNN_POINTWISE_CMP_GE;
        g.pointwise(
            ge,
            Data::CUDNN_DATA_BOOLEAN,
            (row, Some(col), None),
            visible,
            None,
        )?;
        let select = Pointwise::CUDNN_POINTWISE_BINARY_SELECT;
        g.pointwise(
            select,
            float,
            (logits, Some(neg_inf), Some(visible)),
            masked,
            None,
        )?;
        logits = masked;
    }
    let max = g.virtual_tensor(float, rows)?;
    g.reduce(
        sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_MAX,
        logits,
        max,
    )?;
    let shifted = g.virtual_tensor(float, scores)?;
    g.binary(Pointwise::CUDNN_POINTWISE_SUB, logits, max, shifted)?;
    let e = g.virtual_tensor(float, scores)?;
    g.pointwise(
        Pointwise::CUDNN_POINTWISE_EXP,
        float,
        (shifted, None, None),
        e,
        None,
    )?;
    let sum = g.virtual_tensor(float, rows)?;
    g.reduce(sys::cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD, e, sum)?;
    let log = g.virtual_tensor(float, rows)?;
    g.pointwise(
        Pointwise::CUDNN_POINTWISE_LOG,
        float,
        (sum, None, None),
        log,
        None,
    )?;
    let stats = g.virtual_tensor(float, rows)?;
    g.binary(Pointwise::CUDNN_POINTWISE_ADD, max, log, stats)?;
    let p = g.virtual_tensor(io, scores)?;
    g.binary(Pointwise::CUDNN_POINTWISE_DIV, e, sum, p)?;
    g.matmul(p, v, o)?;
    let graph = Descriptor::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    let ops: Vec<&Descriptor> = g.ops.iter().collect();
    graph.descriptors(Attr::CUDNN_ATTR_OPERATIONGRAPH_OPS, &ops)?;
    graph.set(
        Attr::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
        AttrType::CUDNN_TYPE_HANDLE,
        &[handle],
    )?;
    Ok((graph.finalized("operation graph")?, g))
}

/// The first plan of the heuristic's engine configs for `graph` that builds.
fn first_plan(
    graph: &Descriptor,
    handle: sys::cudnnHandle_t,
) -> DriverResult<(Descriptor, Vec<Descriptor>)> {
    let heur = Descriptor::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.descriptors(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
    heur.set(
        Attr::CUDNN_ATTR_ENGINEHEUR_MODE,
        AttrType::CUDNN_TYPE_HEUR_MODE,
        &[sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A],
    )?;
    let heur = heur.finalized("engine heuristics")?;
    let results = |count: i64, out: *mut c_void| {
        let mut n = 0i64;
        // SAFETY: `out` has room for `count` descriptors (or is null with `count` 0).
        check("engine heuristics results", unsafe {
            sys::cudnnBackendGetAttribute(
                heur.0,
                Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                count,
                &mut n,
                out,
            )
        })
        .map(|()| n)
    };
    let count = results(0, std::ptr::null_mut())?;
    let configs = (0..count)
        .map(|_| Descriptor::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<DriverResult<Vec<_>>>()?;
    let mut raw: Vec<_> = configs.iter().map(|c| c.0).collect();
    let count = results(count, raw.as_mut_ptr().cast())?;
    let mut last = "cuDNN found no engine for this attention".to_string();
    let built = usize::try_from(count).map_or(0, |n| n.min(configs.len()));
    for config in &configs[..built] {
        let plan = Descriptor::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set(
            Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
            AttrType::CUDNN_TYPE_HANDLE,
            &[handle],
        )?;
        plan.descriptors(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[config])?;
        match plan.finalized("execution plan") {
            Ok(plan) => return Ok((plan, configs)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The version of the cuDNN this process loads (`91400` for 9.14.0), or why it has none that
/// runs fused attention (missing, or older than 9.0).
pub fn version() -> DriverResult<usize> {
    // SAFETY: only probes whether the library can be loaded.
    if !unsafe { sys::is_culib_present() } {
        return Err("cuDNN (libcudnn.so) was not found".into());
    }
    // SAFETY: a plain query.
    let version = unsafe { sys::cudnnGetVersion() };
    if version < 90000 {
        return Err(format!(
            "cuDNN {version} is older than 9.0, which fused attention needs"
        ));
    }
    Ok(version)
}

/// A cuDNN handle with its workspaces and plans.
pub struct Dnn {
    handle: sys::cudnnHandle_t,
    workspaces: LaneWorkspaces,
    plans: HashMap<AttentionShape, Plan>,
}

impl Drop for Dnn {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: created once in `new`.
        let _ = unsafe { sys::cudnnDestroy(self.handle) };
    }
}

impl Dnn {
    pub fn new() -> DriverResult<Dnn> {
        version()?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: `handle` receives a new handle.
        check("create handle", unsafe { sys::cudnnCreate(&mut handle) })?;
        Ok(Dnn {
            handle,
            workspaces: LaneWorkspaces::new(WORKSPACE),
            plans: HashMap::new(),
        })
    }

    /// Makes the plan of shape `s` now (before a graph capture, which must not allocate); an
    /// error says why cuDNN cannot run it.
    pub fn prepare(&mut self, s: AttentionShape) -> DriverResult<()> {
        if self.plans.contains_key(&s) {
            return Ok(());
        }
        let (graph, built) = attention_graph(&s, self.handle)?;
        let (plan, configs) = first_plan(&graph, self.handle)?;
        let mut size = 0i64;
        let mut count = 0i64;
        // SAFETY: one INT64 into `size`.
        check("workspace size", unsafe {
            sys::cudnnBackendGetAttribute(
                plan.0,
                Attr::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                AttrType::CUDNN_TYPE_INT64,
                1,
                &mut count,
                (&mut size as *mut i64).cast(),
            )
        })?;
        let workspace = usize::try_from(size).unwrap_or(usize::MAX);
        if workspace > WORKSPACE {
            return Err(format!(
                "cuDNN's attention plan needs {workspace} bytes of workspace, more than {WORKSPACE}"
            ));
        }
        // Destroyed in the reverse order of their making: what refers to a descriptor first.
        let mut keep = built.keep;
        keep.extend(built.ops);
        keep.push(graph);
        keep.extend(configs);
        keep.reverse();
        self.plans.insert(
            s,
            Plan {
                plan,
                workspace,
                _graph: keep,
            },
        );
        Ok(())
    }

    /// Makes the workspaces of lanes `0..lanes` now (a graph capture may not allocate).
    pub fn reserve_lanes(&mut self, lanes: usize) -> DriverResult<()> {
        self.workspaces.reserve(lanes)
    }

    /// Enqueues attention of shape `s` on `stream` with the workspace of `lane`.
    pub fn attention(
        &mut self,
        s: AttentionShape,
        buffers: AttentionOperands,
        stream: &Stream,
        lane: usize,
    ) -> DriverResult<()> {
        self.prepare(s)?;
        let workspace = self.workspaces.get(lane)?;
        let handle = self.handle;
        let plan = self
            .plans
            .get(&s)
            .ok_or_else(|| "cuDNN plan missing".to_string())?;
        let scale = f32::from_bits(s.scale);
        let neg_inf = f32::NEG_INFINITY;
        let AttentionOperands { q, k, v, o } = buffers;
        let mut uids = vec![Q, K, V, O, SCALE];
        let mut pointers: Vec<*const c_void> = vec![
            q as *const c_void,
            k as *const c_void,
            v as *const c_void,
            o as *const c_void,
            &scale as *const f32 as *const c_void,
        ];
        if s.causal {
            uids.push(NEG_INF);
            pointers.push(&neg_inf as *const f32 as *const c_void);
        }
        let pack = Descriptor::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.ints(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &uids)?;
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            AttrType::CUDNN_TYPE_VOID_PTR,
            &pointers,
        )?;
        let workspace = if plan.workspace > 0 { workspace } else { 0 };
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            AttrType::CUDNN_TYPE_VOID_PTR,
            &[workspace as *const c_void],
        )?;
        let pack = pack.finalized("variant pack")?;
        // SAFETY: the addresses are device buffers of the views in `s`; the scalars live
        // through the call, which reads them while it enqueues.
        unsafe {
            check(
                "set stream",
                sys::cudnnSetStream(handle, stream.0 as sys::cudaStream_t),
            )?;
            check(
                "execute",
                sys::cudnnBackendExecute(handle, plan.plan.0, pack.0),
            )
        }
    }
}
