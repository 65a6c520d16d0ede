//! Views and memory: a tile IR view becomes `make_tensor_view` (static shapes and strides
//! where the tile IR has constants) and partition views; tile loads and stores become
//! partition-view loads and stores, token-ordered for mutable parameters only; gathers become
//! masked pointer loads.

use super::{malformed, Res, Translator, View, MAX_KNOWN_DIVISOR, PARAM_ALIGN};
use crate::codegen::emit::{mem_scalar, reg_scalar, segments_attr, tile, Pred};
use cutile_ir::bytecode::Opcode;
use cutile_ir::ir::{
    Attribute, OptimizationHints, PaddingValue, PartitionViewType, ScalarType, TensorViewType,
    Type, Value, DYNAMIC,
};
use tir_graph::DType;
use tir_lower::tile::ValueId;

impl Translator<'_> {
    pub(super) fn param_ptr(&self, param: usize) -> Res<Value> {
        self.params
            .get(param)
            .copied()
            .ok_or_else(|| malformed(format!("parameter {param} does not exist")))
    }

    pub(super) fn make_view(
        &mut self,
        param: usize,
        offset: ValueId,
        shape: &[ValueId],
        strides_ids: &[ValueId],
    ) -> Res<View> {
        let ptr = self.param_ptr(param)?;
        let dtype = self.kernel.params[param].dtype;
        let base = if self.consts.get(&offset) == Some(&0) {
            ptr
        } else {
            let off = self.get(offset)?;
            let moved = self.e.offset(ptr, off);
            // Aligned as far as both the base and the offset's bytes are.
            let bytes = self
                .divisor(offset)
                .saturating_mul(dtype.size_bytes() as i64);
            self.assume_div_by(moved, bytes.min(PARAM_ALIGN as i64))
        };
        let with_const = |t: &Self, ids: &[ValueId]| -> Res<Vec<(Value, Option<i64>)>> {
            ids.iter()
                .map(|id| Ok((t.get(*id)?, t.consts.get(id).copied())))
                .collect()
        };
        let divisors = (
            shape.iter().map(|id| self.divisor(*id)).collect(),
            strides_ids.iter().map(|id| self.divisor(*id)).collect(),
        );
        let shape = with_const(self, shape)?;
        // A dynamic stride with what divides it, so that rows stay as aligned as they are
        // for vector and TMA loads (a stride of `256·seq` elements is a multiple of 256).
        let mut strides = with_const(self, strides_ids)?;
        for ((v, c), id) in strides.iter_mut().zip(strides_ids) {
            if c.is_none() {
                let divisor = self.divisor(*id);
                *v = self.assume_div_by(*v, divisor);
            }
        }
        let repeated = shape
            .iter()
            .zip(&strides)
            .map(|(e, s)| s.1 == Some(0) && e.1 != Some(1))
            .collect();
        Ok(View {
            dtype,
            base,
            shape,
            strides,
            divisors,
            repeated,
            tensor_view: None,
        })
    }

    fn view(&self, id: ValueId) -> Res<View> {
        self.views
            .get(&id)
            .cloned()
            .ok_or_else(|| malformed(format!("{id} is not a view")))
    }

    /// The `make_tensor_view` of a view, made on first use.
    fn tensor_view(&mut self, id: ValueId) -> Res<(Value, TensorViewType)> {
        let view = self.view(id)?;
        if let Some(tv) = view.tensor_view {
            return Ok(tv);
        }
        // Tile IR wants positive constant strides: a stride-0 axis has one element to read,
        // so its stride is never stepped; it is the next inner axis's span, which keeps every
        // row as aligned as the innermost one for vectorized and TMA loads (a TMA stride is a
        // multiple of 16 bytes). A dynamic span is at least what divides it, so never 0.
        let mut extents = view.shape.clone();
        let mut strides = view.strides.clone();
        let (mut extent_divisors, mut stride_divisors) = view.divisors.clone();
        for k in (0..extents.len()).rev() {
            if strides[k].1 == Some(0) {
                let (span, divisor) = match (strides.get(k + 1), extents.get(k + 1)) {
                    (Some(&(_, Some(s))), Some(&(_, Some(e)))) => {
                        let span = (s * e).max(1);
                        let divisor = (1i64 << span.trailing_zeros()).min(MAX_KNOWN_DIVISOR);
                        ((self.e.index_const(span), Some(span)), divisor)
                    }
                    (Some(&stride), Some(&extent)) => {
                        let divisor = stride_divisors[k + 1]
                            .saturating_mul(extent_divisors[k + 1])
                            .min(MAX_KNOWN_DIVISOR);
                        // A static one's value may stand in for it (a replaced extent's).
                        let mut value = |(v, c): (Value, Option<i64>)| match c {
                            Some(c) => self.e.index_const(c),
                            None => v,
                        };
                        let (s, e) = (value(stride), value(extent));
                        let span = self.e.muli(s, e);
                        let least = self.e.index_const(divisor);
                        let span = self.e.signed_op(Opcode::MaxI, span, least, true);
                        ((self.assume_div_by(span, divisor), None), divisor)
                    }
                    _ => ((self.e.index_const(1), Some(1)), 1),
                };
                strides[k] = span;
                stride_divisors[k] = divisor;
                extents[k] = (view.base, Some(1));
                extent_divisors[k] = 1;
            }
        }
        // Tile IR wants positive constant sizes too: an empty axis is given at run time.
        for extent in &mut extents {
            if extent.1 == Some(0) {
                *extent = (self.e.index_const(0), None);
            }
        }
        let statics = |xs: &[(Value, Option<i64>)]| -> Vec<i64> {
            xs.iter().map(|(_, c)| c.unwrap_or(DYNAMIC)).collect()
        };
        let dynamic = |xs: &[(Value, Option<i64>)]| -> Vec<Value> {
            xs.iter()
                .filter(|(_, c)| c.is_none())
                .map(|(v, _)| *v)
                .collect()
        };
        let ty = TensorViewType {
            element_type: mem_scalar(view.dtype),
            shape: statics(&extents),
            strides: statics(&strides),
        };
        if self.dims_divisible {
            for (k, extent) in extents.iter_mut().enumerate() {
                if extent.1.is_none() {
                    extent.0 = self.within_bound(extent.0, extent_divisors[k]);
                }
            }
            for (k, stride) in strides.iter_mut().enumerate() {
                if stride.1.is_none() {
                    stride.0 = self.within_bound(stride.0, stride_divisors[k]);
                }
            }
        }
        let shape_ops = dynamic(&extents);
        let stride_ops = dynamic(&strides);
        let mut operands = vec![view.base];
        operands.extend(&shape_ops);
        operands.extend(&stride_ops);
        let v = self.e.op1(
            Opcode::MakeTensorView,
            &operands,
            vec![(
                "operandSegmentSizes",
                segments_attr(&[1, shape_ops.len() as i64, stride_ops.len() as i64]),
            )],
            Type::TensorView(ty.clone()),
        );
        if let Some(entry) = self.views.get_mut(&id) {
            entry.tensor_view = Some((v, ty.clone()));
        }
        Ok((v, ty))
    }

    fn partition_view(
        &mut self,
        view: ValueId,
        tile_shape: &[i64],
        padding: Option<PaddingValue>,
    ) -> Res<Value> {
        let (tv, tv_ty) = self.tensor_view(view)?;
        let ty = PartitionViewType {
            tile_shape: tile_shape.iter().map(|&d| d as i32).collect(),
            dim_map: (0..tile_shape.len() as i32).collect(),
            tensor_view: tv_ty,
            padding_value: padding,
        };
        Ok(self.e.op1(
            Opcode::MakePartitionView,
            &[tv],
            vec![],
            Type::PartitionView(ty),
        ))
    }

    /// The attributes of a tile load (`load`) or store: `attrs`, and the kernel's hints for
    /// such accesses if it has any.
    fn view_access_attrs<'a>(
        &self,
        load: bool,
        mut attrs: Vec<(&'a str, Attribute)>,
    ) -> Vec<(&'a str, Attribute)> {
        let mut hints = Vec::new();
        if let Some(allow) = self.hints.allow_tma {
            hints.push(("allow_tma".to_string(), Attribute::Bool(allow)));
        }
        if let Some(latency) = self.hints.load_latency.filter(|_| load) {
            let value = Attribute::Integer(i64::from(latency), Type::Scalar(ScalarType::I32));
            hints.push(("latency".to_string(), value));
        }
        if !hints.is_empty() {
            attrs.push((
                "optimization_hints",
                Attribute::OptimizationHints(OptimizationHints {
                    entries: vec![("default".to_string(), hints)],
                }),
            ));
        }
        attrs
    }

    /// A tile of `dtype` read from memory (of `mem_scalar(dtype)`) to its register type.
    fn loaded_value(&mut self, v: Value, dtype: DType) -> Value {
        if dtype == DType::Bool {
            let zero = self.e.constant(ScalarType::I8, 0.0, &self.e.shape(v));
            self.e.cmpi(Pred::Ne, v, zero, false)
        } else {
            v
        }
    }

    fn stored_value(&mut self, v: Value, dtype: DType) -> Value {
        if dtype == DType::Bool {
            self.e.int_resize(v, ScalarType::I8, false)
        } else {
            v
        }
    }

    /// Whether element `t` of the tile at `coords` is inside the view along each of `axes`.
    /// Each axis's test runs on a tile that spans that axis only and is broadcast after, so
    /// the index arithmetic costs the tile's edge lengths rather than its size.
    fn in_bounds(&mut self, view: &View, coords: &[Value], shape: &[i64], axes: &[usize]) -> Value {
        let mut mask: Option<Value> = None;
        for &k in axes {
            let mut along = vec![1; shape.len()];
            along[k] = shape[k];
            let size = self.e.index_const(shape[k]);
            let start = self.e.muli(coords[k], size);
            let start = self.e.splat(start, &along);
            let pos = self.e.iota(&along, k);
            let pos = self.e.addi(start, pos);
            let extent = self.e.splat(view.shape[k].0, &along);
            let inside = self.e.cmpi(Pred::Lt, pos, extent, true);
            let inside = self.e.broadcast(inside, shape);
            mask = Some(match mask {
                None => inside,
                Some(m) => self.e.same(Opcode::AndI, m, inside, vec![]),
            });
        }
        mask.unwrap_or_else(|| self.e.constant(ScalarType::I1, 1.0, shape))
    }

    pub(super) fn load(
        &mut self,
        view_id: ValueId,
        coords: &[ValueId],
        padding: f64,
        token: Option<ValueId>,
        dtype: DType,
        shape: &[i64],
    ) -> Res<(Value, Value)> {
        let view = self.view(view_id)?;
        let coords: Vec<Value> = coords.iter().map(|c| self.get(*c)).collect::<Res<_>>()?;
        let token = token.map(|t| self.get(t)).transpose()?;
        let mem = mem_scalar(dtype);
        if shape.is_empty() {
            let (v, tok) = self.e.load_ptr_token(view.base, mem, token);
            return Ok((self.loaded_value(v, dtype), tok));
        }
        let native = padding_value(padding, dtype);
        // Repeated axes load one element (at coordinate 0) and broadcast it.
        let mut loaded = shape.to_vec();
        let mut at = coords.clone();
        let zero = self.e.index_const(0);
        for k in 0..shape.len() {
            if view.repeated[k] {
                loaded[k] = 1;
                at[k] = zero;
            }
        }
        let pv = self.partition_view(view_id, &loaded, native)?;
        let mut operands = vec![pv];
        operands.extend(&at);
        operands.extend(token);
        let out = self.e.op(
            Opcode::LoadViewTko,
            &operands,
            self.view_access_attrs(
                true,
                vec![
                    ("memory_ordering_semantics", Attribute::i32(0)),
                    (
                        "operandSegmentSizes",
                        segments_attr(&[1, coords.len() as i64, token.is_some() as i64]),
                    ),
                ],
            ),
            vec![tile(mem, &loaded), Type::Token],
        );
        let v = self.loaded_value(out[0], dtype);
        let mut v = self.e.broadcast(v, shape);
        let axes: Vec<usize> = (0..shape.len())
            .filter(|&k| view.repeated[k] || native.is_none())
            .collect();
        if !axes.is_empty() {
            let inside = self.in_bounds(&view, &coords, shape, &axes);
            let pad = self.e.constant(reg_scalar(dtype), padding, shape);
            v = self.e.select(inside, v, pad);
        }
        Ok((v, out[1]))
    }

    pub(super) fn load_indexed(
        &mut self,
        view_id: ValueId,
        indices: &[ValueId],
        mask: ValueId,
        padding: f64,
        dtype: DType,
        shape: &[i64],
    ) -> Res<Value> {
        let view = self.view(view_id)?;
        let mut mask = self.get(mask)?;
        let mut offset: Option<Value> = None;
        for (k, id) in indices.iter().enumerate() {
            let i = self.get(*id)?;
            let zero = self.e.constant(ScalarType::I64, 0.0, shape);
            let extent = self.e.splat(view.shape[k].0, shape);
            let lo = self.e.cmpi(Pred::Ge, i, zero, true);
            let hi = self.e.cmpi(Pred::Lt, i, extent, true);
            let ok = self.e.same(Opcode::AndI, lo, hi, vec![]);
            mask = self.e.same(Opcode::AndI, mask, ok, vec![]);
            let stride = self.e.splat(view.strides[k].0, shape);
            let term = self.e.muli(i, stride);
            offset = Some(match offset {
                None => term,
                Some(o) => self.e.addi(o, term),
            });
        }
        let offset = match offset {
            Some(o) => o,
            None => self.e.constant(ScalarType::I64, 0.0, shape),
        };
        // Masked-off lanes still form an address: keep it at the base.
        let zero = self.e.constant(ScalarType::I64, 0.0, shape);
        let offset = self.e.select(mask, offset, zero);
        let ptrs = self.e.offset(view.base, offset);
        let mem = mem_scalar(dtype);
        let pad = self.e.constant(mem, padding, shape);
        let v = self.e.load_ptr(ptrs, mem, Some((mask, pad)));
        Ok(self.loaded_value(v, dtype))
    }

    pub(super) fn store(
        &mut self,
        view_id: ValueId,
        coords: &[ValueId],
        value: ValueId,
        token: ValueId,
    ) -> Res<Value> {
        let view = self.view(view_id)?;
        let coords: Vec<Value> = coords.iter().map(|c| self.get(*c)).collect::<Res<_>>()?;
        let token = self.get(token)?;
        let (dtype, shape) = self.tile_of(value)?;
        let v = self.get(value)?;
        let v = self.stored_value(v, dtype);
        if shape.is_empty() {
            return Ok(self.e.store_ptr(view.base, v, token));
        }
        let pv = self.partition_view(view_id, &shape, None)?;
        let mut operands = vec![v, pv];
        operands.extend(&coords);
        operands.push(token);
        Ok(self.e.op1(
            Opcode::StoreViewTko,
            &operands,
            self.view_access_attrs(
                false,
                vec![
                    ("memory_ordering_semantics", Attribute::i32(0)),
                    (
                        "operandSegmentSizes",
                        segments_attr(&[1, 1, coords.len() as i64, 1]),
                    ),
                ],
            ),
            Type::Token,
        ))
    }
}

/// The partition view's own padding for `padding`, where Tile IR has one for `dtype`.
fn padding_value(padding: f64, dtype: DType) -> Option<PaddingValue> {
    if padding == 0.0 && padding.is_sign_positive() {
        return Some(PaddingValue::Zero);
    }
    // An f8 view pads with zero only: e4m3 has no infinities, and other values go through the
    // select below, as the reference pads (with the value rounded to the dtype).
    if !dtype.is_float() || dtype.float8().is_some() {
        return None;
    }
    if padding.is_nan() {
        Some(PaddingValue::Nan)
    } else if padding == f64::INFINITY {
        Some(PaddingValue::PosInf)
    } else if padding == f64::NEG_INFINITY {
        Some(PaddingValue::NegInf)
    } else if padding == 0.0 {
        Some(PaddingValue::NegZero)
    } else {
        None
    }
}
