//! cuDNN, for attention kernels that are a fused attention ([`LibraryCall::Attention`]) and
//! convolution kernels that are a convolution with its bias and activation
//! ([`LibraryCall::Conv`]): one handle, a workspace per lane (as for cuBLASLt, see
//! [`super::blas`]), and an execution plan per shape, built through cuDNN's backend graph API.
//!
//! The plan's operation graph is the one cuDNN's fused flash-attention engines recognise:
//! `S = Q @ Kᵀ` (`K` read transposed through its strides), `S · scale` (a host scalar passed
//! by value), under the causal mask the select of `S` where `row >= col` (positions from
//! `GEN_INDEX`) and `-inf` elsewhere, then the softmax as `max`, `x - max`, `exp`, `sum`, the
//! row statistics `max + log(sum)` (virtual, but the engines match only a graph that has them)
//! and `exp / sum` in the inputs' dtype, and `O = P @ V`. Every intermediate is virtual: the
//! engine never writes the scores. Scores and softmax are `f32`, as in the kernel's body.
//!
//! A convolution's graph is `conv_fprop` (compute type `f32`), then `+ bias` (a `[1, O, 1..]`
//! tensor broadcast over the rest) and the activation as pointwise ops in `f32`, the
//! intermediates virtual: the shape of cuDNN's conv-bias-activation fusion, which its fused
//! engines match, so the whole epilogue runs in the convolution's kernel. Every tensor has its
//! buffer's real strides (NCHW as the graph has them; the same code takes NHWC strides).
//! Engines that reduce in reduced precision, and plans that need more workspace than a lane
//! has, are passed over for the next of the heuristic's list.
//!
//! A shape no engine runs fails at [`Dnn::prepare`] (or [`Dnn::prepare_conv`]) with cuDNN's
//! reason: under the `auto` path the kernel then runs as generated, under `cudnn` the run fails
//! with that reason.
//!
//! [`LibraryCall::Conv`]: tir_lower::tile::LibraryCall::Conv

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
use tir_lower::tile::{ConvActivation, LibraryConv};

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

    /// A tensor of any rank (a convolution's); `is_virtual` for an intermediate.
    fn tensor_nd(
        &mut self,
        ty: Data,
        (dims, strides): (&[u64], &[u64]),
        uid: i64,
        is_virtual: bool,
    ) -> DriverResult<Tensor> {
        let t = Descriptor::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
        t.data_type(Attr::CUDNN_ATTR_TENSOR_DATA_TYPE, ty)?;
        let ints = |v: &[u64]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        t.ints(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, &ints(dims))?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_STRIDES, &ints(strides))?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
        t.ints(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
        if is_virtual {
            t.flag(Attr::CUDNN_ATTR_TENSOR_IS_VIRTUAL)?;
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

    /// `y = x ⋆ w`, cross-correlation accumulated in `f32`, as the shape `s` describes.
    fn conv_fprop(&mut self, s: &ConvShape, x: Tensor, w: Tensor, y: Tensor) -> DriverResult<()> {
        let n = s.spatial;
        let ints = |v: &[u64]| v[..n].iter().map(|&d| d as i64).collect::<Vec<_>>();
        let c = Descriptor::new(Kind::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        c.data_type(
            Attr::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            Data::CUDNN_DATA_FLOAT,
        )?;
        c.set(
            Attr::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            AttrType::CUDNN_TYPE_CONVOLUTION_MODE,
            &[sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
        )?;
        c.ints(Attr::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[n as i64])?;
        c.ints(Attr::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &ints(&s.steps))?;
        c.ints(Attr::CUDNN_ATTR_CONVOLUTION_DILATIONS, &ints(&s.dilations))?;
        c.ints(
            Attr::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
            &ints(&s.pads_before),
        )?;
        c.ints(
            Attr::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
            &ints(&s.pads_after),
        )?;
        let c = c.finalized("convolution")?;
        let o = Descriptor::new(Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)?;
        o.descriptors(
            Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            &[self.get(x)],
        )?;
        o.descriptors(
            Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
            &[self.get(w)],
        )?;
        o.descriptors(
            Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
            &[self.get(y)],
        )?;
        o.descriptors(
            Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            &[&c],
        )?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        o.set(
            Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            AttrType::CUDNN_TYPE_FLOAT,
            &[alpha],
        )?;
        o.set(
            Attr::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            AttrType::CUDNN_TYPE_FLOAT,
            &[beta],
        )?;
        self.keep.push(c);
        self.op(o, "convolution forward")
    }
}

/// One shape of a convolution with its bias and activation, as cuDNN runs it: `x: [N, C, S..]`,
/// `w: [O, C / groups, K..]`, `y: [N, O, Q..]` (the first `2 + spatial` entries of each array
/// used; a 1-D convolution is given as a 2-D one over a unit axis), with their strides in
/// elements, and the convolution's steps, dilations and paddings per spatial axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvShape {
    pub dtype: DType,
    pub spatial: usize,
    pub x: [u64; 5],
    pub w: [u64; 5],
    pub y: [u64; 5],
    pub strides: [[u64; 5]; 3],
    pub steps: [u64; 3],
    pub dilations: [u64; 3],
    pub pads_before: [u64; 3],
    pub pads_after: [u64; 3],
    pub bias: bool,
    pub activation: Option<ConvActivation>,
}

/// The device addresses of a convolution's buffers (`bias` 0 where it has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOperands {
    pub x: u64,
    pub w: u64,
    pub bias: u64,
    pub y: u64,
}

/// The unique ids of a convolution graph's tensors that the variant pack binds.
const CONV_X: i64 = 1;
const CONV_W: i64 = 2;
const CONV_BIAS: i64 = 3;
const CONV_Y: i64 = 4;

/// The shape of library convolution `call` with batch `n`; `None` where an extent is 0 (the
/// generated kernel then runs: cuDNN takes no empty tensor) or the call has more than 3 spatial
/// axes (cuDNN's limit).
pub fn conv_shape(call: &LibraryConv, n: u64) -> Option<ConvShape> {
    let spatial = call.input.len();
    if !(1..=3).contains(&spatial) || n == 0 {
        return None;
    }
    // A 1-D convolution becomes a 2-D one whose first spatial axis has extent 1.
    let unit = usize::from(spatial == 1);
    let dims = |lead: [u64; 2], rest: &[u64]| -> [u64; 5] {
        let mut d = [1u64; 5];
        d[..2].copy_from_slice(&lead);
        d[2 + unit..2 + unit + rest.len()].copy_from_slice(rest);
        d
    };
    let strides = |s: &[u64], d: &[u64; 5]| -> Option<[u64; 5]> {
        let mut out = [1u64; 5];
        out[..2].copy_from_slice(s.get(..2)?);
        out[2 + unit..2 + unit + spatial].copy_from_slice(s.get(2..)?);
        if unit == 1 {
            out[2] = out[3] * d[3];
        }
        Some(out)
    };
    let per_axis = |v: &[u64], default: u64| -> [u64; 3] {
        let mut a = [default; 3];
        a[unit..unit + v.len()].copy_from_slice(v);
        a
    };
    let x = dims([n, call.channels], &call.input);
    let w = dims(
        [call.out_channels, call.channels / call.groups.max(1)],
        &call.kernel,
    );
    let y = dims([n, call.out_channels], &call.output);
    if x.iter().chain(&w).chain(&y).any(|&d| d == 0) {
        return None;
    }
    let [xs, ws, ys] = &call.layout;
    let before: Vec<u64> = call.pads.iter().map(|p| p.0).collect();
    let after: Vec<u64> = call.pads.iter().map(|p| p.1).collect();
    Some(ConvShape {
        dtype: call.dtype,
        spatial: spatial + unit,
        strides: [strides(xs, &x)?, strides(ws, &w)?, strides(ys, &y)?],
        x,
        w,
        y,
        steps: per_axis(&call.strides, 1),
        dilations: per_axis(&call.dilations, 1),
        pads_before: per_axis(&before, 0),
        pads_after: per_axis(&after, 0),
        bias: call.bias.is_some(),
        activation: call.activation,
    })
}

fn activation_mode(a: ConvActivation) -> Pointwise {
    match a {
        ConvActivation::Relu => Pointwise::CUDNN_POINTWISE_RELU_FWD,
        ConvActivation::Sigmoid => Pointwise::CUDNN_POINTWISE_SIGMOID_FWD,
        ConvActivation::Tanh => Pointwise::CUDNN_POINTWISE_TANH_FWD,
        ConvActivation::GeluErf => Pointwise::CUDNN_POINTWISE_GELU_FWD,
        ConvActivation::GeluTanh => Pointwise::CUDNN_POINTWISE_GELU_APPROX_TANH_FWD,
    }
}

/// The operation graph of convolution `s` (see the module doc).
fn conv_graph(
    s: &ConvShape,
    handle: sys::cudnnHandle_t,
) -> DriverResult<(Descriptor, GraphBuilder)> {
    let io = data_type(s.dtype)
        .ok_or_else(|| format!("cuDNN convolution of {} is not supported", s.dtype))?;
    let rank = 2 + s.spatial;
    let mut g = GraphBuilder {
        keep: Vec::new(),
        ops: Vec::new(),
        next_uid: 100,
    };
    let [xs, ws, ys] = &s.strides;
    let x = g.tensor_nd(io, (&s.x[..rank], &xs[..rank]), CONV_X, false)?;
    let w = g.tensor_nd(io, (&s.w[..rank], &ws[..rank]), CONV_W, false)?;
    let y = g.tensor_nd(io, (&s.y[..rank], &ys[..rank]), CONV_Y, false)?;
    let float = Data::CUDNN_DATA_FLOAT;
    let steps = usize::from(s.bias) + usize::from(s.activation.is_some());
    // The convolution, then each epilogue step, into a virtual `f32` tensor of `y`'s layout
    // until the last, which writes `y`.
    let intermediate = |g: &mut GraphBuilder, left: usize| -> DriverResult<Tensor> {
        if left == 0 {
            return Ok(y);
        }
        g.next_uid += 1;
        g.tensor_nd(float, (&s.y[..rank], &ys[..rank]), g.next_uid, true)
    };
    let mut value = intermediate(&mut g, steps)?;
    g.conv_fprop(s, x, w, value)?;
    let mut left = steps;
    if s.bias {
        let mut dims = [1u64; 5];
        dims[1] = s.y[1];
        let mut strides = [1u64; 5];
        strides[0] = s.y[1];
        let b = g.tensor_nd(io, (&dims[..rank], &strides[..rank]), CONV_BIAS, false)?;
        left -= 1;
        let sum = intermediate(&mut g, left)?;
        g.binary(Pointwise::CUDNN_POINTWISE_ADD, value, b, sum)?;
        value = sum;
    }
    if let Some(a) = s.activation {
        g.pointwise(activation_mode(a), float, (value, None, None), y, None)?;
    }
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

/// The engine configs cuDNN's heuristic (`mode`) lists for `graph`, best first.
fn engine_configs(
    graph: &Descriptor,
    mode: sys::cudnnBackendHeurMode_t,
) -> DriverResult<Vec<Descriptor>> {
    let heur = Descriptor::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.descriptors(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
    heur.set(
        Attr::CUDNN_ATTR_ENGINEHEUR_MODE,
        AttrType::CUDNN_TYPE_HEUR_MODE,
        &[mode],
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
    let mut configs = (0..count)
        .map(|_| Descriptor::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<DriverResult<Vec<_>>>()?;
    let mut raw: Vec<_> = configs.iter().map(|c| c.0).collect();
    let count = results(count, raw.as_mut_ptr().cast())?;
    configs.truncate(usize::try_from(count).unwrap_or(0));
    Ok(configs)
}

/// Whether `config`'s engine reduces in a precision below `f32` (its numerical notes say so).
fn reduces_in_low_precision(config: &Descriptor) -> DriverResult<bool> {
    let engine = Descriptor::new(Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let mut n = 0i64;
    // SAFETY: one descriptor, made above, receives the config's engine.
    check("engine of config", unsafe {
        sys::cudnnBackendGetAttribute(
            config.0,
            Attr::CUDNN_ATTR_ENGINECFG_ENGINE,
            AttrType::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            1,
            &mut n,
            (&engine.0 as *const sys::cudnnBackendDescriptor_t)
                .cast_mut()
                .cast(),
        )
    })?;
    let mut notes = [u32::MAX; 16];
    // SAFETY: room for 16 notes, each a C enum (`u32`).
    check("engine numerical notes", unsafe {
        sys::cudnnBackendGetAttribute(
            engine.0,
            Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            AttrType::CUDNN_TYPE_NUMERICAL_NOTE,
            notes.len() as i64,
            &mut n,
            notes.as_mut_ptr().cast(),
        )
    })?;
    let reduced =
        sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION as u32;
    let n = usize::try_from(n).unwrap_or(0).min(notes.len());
    Ok(notes[..n].contains(&reduced))
}

/// A finalized plan's workspace need in bytes.
fn workspace_size(plan: &Descriptor) -> DriverResult<usize> {
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
    Ok(usize::try_from(size).unwrap_or(usize::MAX))
}

/// The first plan for `graph` (a `what`) that builds from the engine configs of heuristic mode
/// A, then of the fallback list, passing over engines that reduce in reduced precision and
/// plans that need more than a lane's workspace; with its workspace need and the configs,
/// which must outlive it.
fn first_plan(
    graph: &Descriptor,
    handle: sys::cudnnHandle_t,
    what: &str,
) -> DriverResult<(Descriptor, usize, Vec<Descriptor>)> {
    let mut last = format!("cuDNN found no engine for this {what}");
    let modes = [
        sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
        sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
    ];
    for mode in modes {
        let configs = match engine_configs(graph, mode) {
            Ok(configs) => configs,
            Err(e) => {
                last = e;
                continue;
            }
        };
        for config in &configs {
            // The compute type already asks for `f32`; a query cuDNN refuses is no reason to
            // drop an engine.
            if reduces_in_low_precision(config).unwrap_or(false) {
                last = format!("cuDNN's engines for this {what} reduce in reduced precision");
                continue;
            }
            let plan = Descriptor::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
            plan.set(
                Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                AttrType::CUDNN_TYPE_HANDLE,
                &[handle],
            )?;
            plan.descriptors(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[config])?;
            let plan = match plan.finalized("execution plan") {
                Ok(plan) => plan,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let workspace = workspace_size(&plan)?;
            if workspace > WORKSPACE {
                last = format!(
                    "cuDNN's {what} plan needs {workspace} bytes of workspace, more than {WORKSPACE}"
                );
                continue;
            }
            return Ok((plan, workspace, configs));
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
    plans: HashMap<PlanKey, Plan>,
}

/// What a plan was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PlanKey {
    Attention(AttentionShape),
    Conv(ConvShape),
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

    /// Makes the plan of attention shape `s` now (before a graph capture, which must not
    /// allocate); an error says why cuDNN cannot run it.
    pub fn prepare(&mut self, s: AttentionShape) -> DriverResult<()> {
        self.prepare_key(PlanKey::Attention(s))
    }

    /// Makes the plan of convolution shape `s` now, as [`Dnn::prepare`] does.
    pub fn prepare_conv(&mut self, s: ConvShape) -> DriverResult<()> {
        self.prepare_key(PlanKey::Conv(s))
    }

    fn prepare_key(&mut self, key: PlanKey) -> DriverResult<()> {
        if self.plans.contains_key(&key) {
            return Ok(());
        }
        let (graph, built, what) = match &key {
            PlanKey::Attention(s) => {
                let (graph, built) = attention_graph(s, self.handle)?;
                (graph, built, "attention")
            }
            PlanKey::Conv(s) => {
                let (graph, built) = conv_graph(s, self.handle)?;
                (graph, built, "convolution")
            }
        };
        let (plan, workspace, configs) = first_plan(&graph, self.handle, what)?;
        // Destroyed in the reverse order of their making: what refers to a descriptor first.
        let mut keep = built.keep;
        keep.extend(built.ops);
        keep.push(graph);
        keep.extend(configs);
        keep.reverse();
        self.plans.insert(
            key,
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
        // The scalars live through the call, which reads them while it enqueues.
        self.execute(PlanKey::Attention(s), (&uids, &pointers), stream, lane)
    }

    /// Enqueues convolution `s` on `stream` with the workspace of `lane`.
    pub fn conv(
        &mut self,
        s: ConvShape,
        buffers: ConvOperands,
        stream: &Stream,
        lane: usize,
    ) -> DriverResult<()> {
        let ConvOperands { x, w, bias, y } = buffers;
        let mut uids = vec![CONV_X, CONV_W, CONV_Y];
        let mut pointers = vec![x as *const c_void, w as *const c_void, y as *const c_void];
        if s.bias {
            uids.push(CONV_BIAS);
            pointers.push(bias as *const c_void);
        }
        self.execute(PlanKey::Conv(s), (&uids, &pointers), stream, lane)
    }

    /// Enqueues the plan of `key` (made now if it is not yet) on the tensors `uids` at
    /// `pointers`.
    fn execute(
        &mut self,
        key: PlanKey,
        (uids, pointers): (&[i64], &[*const c_void]),
        stream: &Stream,
        lane: usize,
    ) -> DriverResult<()> {
        self.prepare_key(key)?;
        let workspace = self.workspaces.get(lane)?;
        let handle = self.handle;
        let plan = self
            .plans
            .get(&key)
            .ok_or_else(|| "cuDNN plan missing".to_string())?;
        let pack = Descriptor::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.ints(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)?;
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            AttrType::CUDNN_TYPE_VOID_PTR,
            pointers,
        )?;
        let workspace = if plan.workspace > 0 { workspace } else { 0 };
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            AttrType::CUDNN_TYPE_VOID_PTR,
            &[workspace as *const c_void],
        )?;
        let pack = pack.finalized("variant pack")?;
        // SAFETY: the pointers are device buffers of the views the plan was built for, or
        // host scalars that live through this call.
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

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::Dim;

    fn call(input: Vec<u64>, kernel: Vec<u64>, output: Vec<u64>) -> LibraryConv {
        let spatial = input.len();
        let contiguous = |dims: Vec<u64>| {
            let mut s = vec![1u64; dims.len()];
            for i in (0..dims.len() - 1).rev() {
                s[i] = s[i + 1] * dims[i + 1];
            }
            s
        };
        let with = |lead: [u64; 2], rest: &[u64]| [lead.to_vec(), rest.to_vec()].concat();
        LibraryConv {
            x: 0,
            w: 1,
            bias: Some(2),
            y: 3,
            dtype: DType::F16,
            batch: Dim::from("n"),
            channels: 6,
            out_channels: 4,
            groups: 2,
            layout: [
                contiguous(with([2, 6], &input)),
                contiguous(with([4, 3], &kernel)),
                contiguous(with([2, 4], &output)),
            ],
            input,
            kernel,
            output,
            strides: vec![2; spatial],
            dilations: vec![3; spatial],
            pads: vec![(1, 0); spatial],
            activation: Some(ConvActivation::Relu),
        }
    }

    #[test]
    fn a_conv_shape_has_the_batch_groups_and_strides_and_a_1d_conv_a_unit_axis() {
        let shape = conv_shape(&call(vec![9, 7], vec![3, 2], vec![4, 3]), 5).unwrap();
        assert_eq!((shape.spatial, shape.bias), (2, true));
        assert_eq!(shape.x, [5, 6, 9, 7, 1]);
        assert_eq!(
            shape.w,
            [4, 3, 3, 2, 1],
            "C / groups input channels per filter"
        );
        assert_eq!(shape.strides[0][..4], [378, 63, 7, 1]);
        assert_eq!(shape.strides[2][..4], [48, 12, 3, 1]);
        assert_eq!((shape.steps, shape.pads_before), ([2, 2, 1], [1, 1, 0]));
        let one = conv_shape(&call(vec![9], vec![3], vec![4]), 5).unwrap();
        assert_eq!(one.spatial, 2);
        assert_eq!((one.x, one.y), ([5, 6, 1, 9, 1], [5, 4, 1, 4, 1]));
        assert_eq!(one.strides[0][..4], [54, 9, 9, 1]);
        assert_eq!((one.steps, one.dilations), ([1, 2, 1], [1, 3, 1]));
        assert_eq!((one.pads_before, one.pads_after), ([0, 1, 0], [0, 0, 0]));
        assert!(conv_shape(&call(vec![9], vec![3], vec![4]), 0).is_none());
        assert!(conv_shape(&call(vec![2; 4], vec![1; 4], vec![2; 4]), 1).is_none());
    }
}
