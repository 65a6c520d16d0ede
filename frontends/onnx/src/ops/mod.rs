//! The lowering of each supported ONNX op onto tir ops, and the folding of nodes whose inputs
//! are all known at import.
//!
//! Takes one node whose inputs are defined. Guarantees: the node's outputs as values (run-time
//! tensors, or known values when every input was known), each with ONNX's semantics for the
//! model's opset; any attribute, dtype or input form tir does not implement is refused with a
//! [`NodeErrorKind::Unsupported`] naming it, never approximated.

mod attention;
mod causal_conv;
mod col2im;
mod conv;
mod deconv;
mod deform;
mod dims;
mod elementwise;
mod flex_attention;
mod gates;
mod grid;
mod linalg;
mod linear_attention;
mod loss;
mod nn;
mod norms;
mod quant;
mod rearrange;
mod resize;
mod rnn;
mod roi_align;
mod rotary;
mod scan;
mod scatter;
mod shape;
mod spectral;
mod subgraph;
mod topk;
mod trig;
mod unpool;
mod windows;

use crate::attrs::Attrs;
use crate::known::Known;
use crate::model::node_name;
use crate::proto::NodeProto;
use crate::state::{State, Value};
use crate::{unsupported, NodeErrorKind, OnnxError};
use std::collections::HashMap;
use tir_graph::{GraphBuilder, HostTensor, Tensor};

pub(crate) type Res<T> = Result<T, NodeErrorKind>;

/// How one op type is lowered.
pub(crate) type Lowering = fn(&mut Cx) -> Res<Vec<Value>>;

/// The lowering of `op` (a default-domain op type), if tir has one.
pub(crate) fn lowering(op: &str) -> Option<Lowering> {
    use elementwise as e;
    Some(match op {
        "Abs" | "Neg" | "Exp" | "Log" | "Sqrt" | "Reciprocal" | "Sin" | "Cos" | "Tanh"
        | "Sigmoid" | "Relu" | "Floor" | "Ceil" | "Not" | "Erf" => e::unary,
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Equal" | "Less" | "LessOrEqual" | "Greater"
        | "GreaterOrEqual" | "And" | "Or" | "Xor" => e::binary,
        "Max" | "Min" | "Sum" | "Mean" => e::variadic,
        "BitShift" | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitwiseNot" => e::bitwise,
        "Identity" => e::identity,
        "Where" => e::where_,
        "Mod" => e::modulo,
        "Sign" => e::sign,
        "IsNaN" | "IsInf" => e::classify,
        "Cast" | "CastLike" => e::cast,
        "Clip" => e::clip,
        "LeakyRelu" | "Elu" | "Selu" | "Celu" | "ThresholdedRelu" | "HardSigmoid" | "HardSwish"
        | "Softplus" | "Softsign" | "Mish" | "Gelu" | "PRelu" | "Swish" => e::activation,
        "Dropout" => e::dropout,
        "Shrink" => gates::shrink,
        "SwiGLU" => gates::swiglu,
        "MeanVarianceNormalization" => norms::mean_variance,
        "InstanceNormalization" => norms::instance_norm,
        "GroupNormalization" => norms::group_norm,
        "LRN" => norms::lrn,
        "DepthToSpace" => rearrange::depth_to_space,
        "SpaceToDepth" => rearrange::space_to_depth,
        "Atan" | "Asin" | "Acos" | "Tan" | "Sinh" | "Cosh" | "Asinh" | "Acosh" | "Atanh" => {
            trig::trig
        }
        "Reshape" => shape::reshape,
        "Transpose" => shape::transpose,
        "Squeeze" => shape::squeeze,
        "Unsqueeze" => shape::unsqueeze,
        "Flatten" => shape::flatten,
        "Concat" => shape::concat,
        "Split" => shape::split,
        "Slice" => shape::slice,
        "Expand" => shape::expand,
        "Gather" => shape::gather,
        "GatherElements" => shape::gather_elements,
        "GatherND" => shape::gather_nd,
        "ScatterElements" | "Scatter" => scatter::scatter_elements,
        "ScatterND" => scatter::scatter_nd,
        "TensorScatter" => scatter::tensor_scatter,
        "Shape" => shape::shape,
        "Size" => shape::size,
        "Constant" => shape::constant,
        "ConstantOfShape" => shape::constant_of_shape,
        "Range" => shape::range,
        "Tile" => shape::tile,
        "Pad" => shape::pad,
        "Trilu" => shape::trilu,
        "CumSum" => scan::cumsum,
        "CumProd" => scan::cumprod,
        "TopK" => topk::topk,
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => windows::window,
        "DFT" => spectral::dft,
        "STFT" => spectral::stft,
        "MelWeightMatrix" => spectral::mel_weight_matrix,
        "ReverseSequence" => rearrange::reverse_sequence,
        "CenterCropPad" => rearrange::center_crop_pad,
        "Round" => scan::round,
        "Einsum" => scan::einsum,
        "Attention" => attention::attention,
        "LinearAttention" => linear_attention::linear_attention,
        "NegativeLogLikelihoodLoss" | "SoftmaxCrossEntropyLoss" => loss::class_loss,
        "Conv" => conv::conv,
        "CausalConvWithState" => causal_conv::causal_conv_with_state,
        "RotaryEmbedding" => rotary::rotary_embedding,
        "Col2Im" => col2im::col2im,
        "ConvTranspose" => deconv::conv_transpose,
        "DeformConv" => deform::deform_conv,
        "MaxPool" | "AveragePool" | "LpPool" => conv::pool,
        "MaxUnpool" => unpool::max_unpool,
        "Resize" | "Upsample" => resize::resize,
        "GridSample" => grid::grid_sample,
        "RoiAlign" => roi_align::roi_align,
        "AffineGrid" => grid::affine_grid,
        "MatMul" => nn::matmul,
        "QuantizeLinear" => quant::quantize,
        "DequantizeLinear" => quant::dequantize,
        "DynamicQuantizeLinear" => quant::dynamic_quantize,
        "MatMulInteger" => quant::matmul_integer,
        "QLinearMatMul" => quant::qlinear_matmul,
        "Det" => linalg::det,
        "RNN" | "GRU" | "LSTM" => rnn::recurrent,
        "Gemm" => nn::gemm,
        "Softmax" | "LogSoftmax" => nn::softmax,
        "LayerNormalization" => nn::layer_norm,
        "RMSNormalization" => nn::rms_norm,
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd"
        | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" => {
            nn::reduce
        }
        "ArgMax" | "ArgMin" => nn::arg_extreme,
        "Hardmax" => nn::hardmax,
        "BatchNormalization" => nn::batch_norm,
        "GlobalAveragePool" | "GlobalMaxPool" => nn::global_pool,
        "LpNormalization" => nn::lp_norm,
        "OneHot" => shape::one_hot,
        "EyeLike" => shape::eye_like,
        _ => return None,
    })
}

/// The lowering of `op` of `domain`: the default domain's ops, and `ai.onnx.preview`'s
/// `FlexAttention`.
pub(crate) fn lowering_in(domain: &str, op: &str) -> Option<Lowering> {
    match (domain, op) {
        ("" | "ai.onnx", _) => lowering(op),
        ("ai.onnx.preview", "FlexAttention") => Some(flex_attention::flex_attention),
        _ => None,
    }
}

/// Inputs of at most this many elements in all are folded at import when all are known.
const FOLD_LIMIT: usize = 1 << 16;

/// Lowers `node`: folded to known values when every input is known, else into the graph.
pub(crate) fn lower(st: &mut State, node: &NodeProto, opset: i64) -> Res<Vec<Value>> {
    let f = lowering_in(node.domain(), node.op_type())
        .expect("unsupported ops are refused before lowering");
    if let Some(outputs) = dims::fold(st, node) {
        return outputs;
    }
    if let Some(values) = foldable_inputs(st, node) {
        if let Ok(outputs) = fold(values, node, opset, f) {
            return Ok(outputs);
        }
    }
    run(st, node, opset, f)
}

fn run(st: &mut State, node: &NodeProto, opset: i64, f: Lowering) -> Res<Vec<Value>> {
    let mut cx = Cx {
        st,
        node,
        opset,
        attrs: Attrs::new(&node.attribute),
    };
    let outputs = f(&mut cx)?;
    if let Some(name) = cx.attrs.unread() {
        return Err(unsupported(format!("attribute `{name}`")));
    }
    for (i, name) in node.output.iter().enumerate().skip(outputs.len()) {
        if !name.is_empty() {
            return Err(unsupported(format!("output {i} (`{name}`)")));
        }
    }
    Ok(outputs)
}

/// The node's inputs when all are known data and small enough to fold. An input whose dtype is
/// all the op reads (`CastLike`'s second) need not be known: it is passed on as an unread input.
fn foldable_inputs(st: &State, node: &NodeProto) -> Option<HashMap<String, Value>> {
    let dtype_only = |i: usize| node.op_type() == "CastLike" && i == 1;
    let mut values = HashMap::new();
    let mut total = 0;
    for (i, name) in node.input.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
        match st.value(name) {
            Some(v @ Value::Known(Known::Data(t))) => {
                total += t.numel();
                values.insert(name.clone(), v.clone());
            }
            Some(v) if dtype_only(i) => {
                let like = Value::Input {
                    name: name.clone(),
                    dtype: v.dtype(),
                    shape: tir_graph::Shape::scalar(),
                };
                values.insert(name.clone(), like);
            }
            _ => return None,
        }
    }
    (!values.is_empty() && total <= FOLD_LIMIT).then_some(values)
}

/// Lowers the node into a graph of its own over constants and evaluates it with the f64 oracle.
fn fold(
    values: HashMap<String, Value>,
    node: &NodeProto,
    opset: i64,
    f: Lowering,
) -> Res<Vec<Value>> {
    let mut scratch = State::scratch(values);
    let outputs = run(&mut scratch, node, opset, f)?;
    let b = scratch.into_builder();
    let mut computed = false;
    for (i, v) in outputs.iter().enumerate() {
        if let Value::Tensor(t) = v {
            b.output(&format!("out{i}"), t)?;
            computed = true;
        }
    }
    if !computed {
        return Ok(outputs);
    }
    let graph = b.finish()?;
    let evaluation = tir_graph::evaluate(&graph, &Default::default())
        .map_err(|e| NodeErrorKind::Invalid(e.to_string()))?;
    let mut results = Vec::with_capacity(outputs.len());
    for (i, v) in outputs.into_iter().enumerate() {
        results.push(match v {
            Value::Tensor(_) => {
                let t = &evaluation.outputs[&format!("out{i}")];
                Value::Known(Known::data(HostTensor::from_f64(t)?))
            }
            other => other,
        });
    }
    Ok(results)
}

/// One node being lowered.
pub(crate) struct Cx<'a> {
    pub st: &'a mut State,
    pub node: &'a NodeProto,
    /// The model's default-domain opset (which version of the op applies).
    pub opset: i64,
    pub attrs: Attrs<'a>,
}

impl Cx<'_> {
    pub fn op(&self) -> &str {
        self.node.op_type()
    }

    pub fn b(&self) -> GraphBuilder {
        self.st.b.clone()
    }

    /// The name of input `i`, if present (empty names mark optional inputs left out).
    pub fn input_name(&self, i: usize) -> Option<String> {
        self.node.input.get(i).filter(|n| !n.is_empty()).cloned()
    }

    pub fn num_inputs(&self) -> usize {
        self.node.input.len()
    }

    fn required(&self, i: usize) -> Res<String> {
        self.input_name(i)
            .ok_or_else(|| NodeErrorKind::Invalid(format!("input {i} is missing")))
    }

    /// Input `i` as a run-time tensor.
    pub fn tensor(&mut self, i: usize) -> Res<Tensor> {
        let name = self.required(i)?;
        self.st.tensor(&name)
    }

    pub fn opt_tensor(&mut self, i: usize) -> Res<Option<Tensor>> {
        match self.input_name(i) {
            Some(name) => self.st.tensor(&name).map(Some),
            None => Ok(None),
        }
    }

    /// Input `i` as a value known at import.
    pub fn known(&mut self, i: usize) -> Res<Known> {
        let name = self.required(i)?;
        self.st.known(&name)
    }

    pub fn opt_known(&mut self, i: usize) -> Res<Option<Known>> {
        match self.input_name(i) {
            Some(name) => self.st.known(&name).map(Some),
            None => Ok(None),
        }
    }

    /// Input `i`, known at import, as integers.
    pub fn ints(&mut self, i: usize) -> Res<Vec<i64>> {
        self.known(i)?.ints()
    }

    pub fn opt_ints(&mut self, i: usize) -> Res<Option<Vec<i64>>> {
        self.opt_known(i)?.map(|k| k.ints()).transpose()
    }

    /// Whether input `i` is a shape vector with symbolic entries.
    pub fn is_symbolic_dims(&self, i: usize) -> bool {
        self.input_name(i)
            .and_then(|n| self.st.value(&n).cloned())
            .is_some_and(|v| matches!(v, Value::Known(Known::Dims { .. })))
    }
}

/// The dtype of input `i`, without making it part of the graph.
pub(crate) fn input_dtype(cx: &Cx, i: usize) -> Res<tir_graph::DType> {
    let name = cx.input_name(i).unwrap_or_default();
    cx.st
        .value(&name)
        .map(Value::dtype)
        .ok_or_else(|| NodeErrorKind::Invalid(format!("input {i} is missing")))
}

/// `x` in dtype `d` (itself when it already is).
pub(crate) fn cast_to(x: &Tensor, d: tir_graph::DType) -> Res<Tensor> {
    Ok(if x.dtype() == d {
        x.clone()
    } else {
        x.cast(d)?
    })
}

/// The dtype a composite of several rounding steps computes in: f32 for 16- and 8-bit floats
/// (each step rounded to f16 would put the result an ulp or two off), else `d` itself.
pub(crate) fn compute_dtype(d: tir_graph::DType) -> tir_graph::DType {
    if d.is_narrow_float() {
        tir_graph::DType::F32
    } else {
        d
    }
}

/// `x` if it is of a float dtype, else `op` of its dtype is unsupported.
pub(crate) fn float<'t>(x: &'t Tensor, op: &str) -> Res<&'t Tensor> {
    if x.dtype().is_float() {
        Ok(x)
    } else {
        Err(crate::unsupported(format!("{op} of {}", x.dtype())))
    }
}

/// Dim `axis` of `x`, which must be static (else `what` is unsupported, named with its type).
pub(crate) fn static_dim(x: &Tensor, axis: usize, what: &str) -> Res<u64> {
    x.shape()
        .dims()
        .get(axis)
        .and_then(tir_graph::Dim::as_static)
        .ok_or_else(|| unsupported(format!("{what} symbolic (in {})", x.ty())))
}

/// ONNX axis `a` (negative counts from the end) of a rank-`rank` tensor.
pub(crate) fn axis(a: i64, rank: usize) -> Res<usize> {
    let r = rank as i64;
    let norm = if a < 0 { a + r } else { a };
    if (0..r).contains(&norm) {
        Ok(norm as usize)
    } else {
        Err(NodeErrorKind::Invalid(format!(
            "axis {a} is out of range for rank {rank}"
        )))
    }
}

/// ONNX axes, each normalized, sorted and distinct.
pub(crate) fn axes(list: &[i64], rank: usize) -> Res<Vec<usize>> {
    let mut out = list
        .iter()
        .map(|&a| axis(a, rank))
        .collect::<Res<Vec<_>>>()?;
    out.sort_unstable();
    let n = out.len();
    out.dedup();
    if out.len() != n {
        return Err(NodeErrorKind::Invalid(format!(
            "axes {list:?} repeat an axis"
        )));
    }
    Ok(out)
}

/// Lowers `node` into `st` and defines its outputs; refuses a node that reads an undefined
/// name or defines a name twice.
pub(crate) fn lower_node(st: &mut State, node: &NodeProto, opset: i64) -> Result<(), OnnxError> {
    let fail = |kind| OnnxError::Node {
        node: node_name(node),
        op: node.op_type().to_string(),
        opset,
        kind: Box::new(kind),
    };
    for input in node.input.iter().filter(|i| !i.is_empty()) {
        if st.value(input).is_none() {
            return Err(OnnxError::Malformed(format!(
                "node `{}` ({}) reads `{input}`, which no earlier node, input or initializer defines",
                node_name(node),
                node.op_type()
            )));
        }
    }
    let outputs = lower(st, node, opset).map_err(fail)?;
    for (name, value) in node.output.iter().zip(outputs) {
        if name.is_empty() {
            continue;
        }
        if st.value(name).is_some() {
            return Err(OnnxError::Malformed(format!(
                "`{name}` is defined twice (again by node `{}`)",
                node_name(node)
            )));
        }
        st.define(name, value);
    }
    Ok(())
}
