//! The convolution kernel: an implicit GEMM.
//!
//! Takes a [`tir_opt::KernelKind::Conv`] kernel (one `conv` reading `x: [N, C, S..]` and
//! `w: [O, C/G, K..]` from memory, and an elementwise epilogue) and emits one tile program per
//! output tile `[1, TO, TQ..]`: image `n`, `TO` output channels of one group, a block of output
//! positions. Per group the product is `out[o, q] = Σ_k w[o, k] · col[k, q]` with
//! `k = (c, tap)` over the group's channels times the kernel's taps (the weights' own order).
//! The K loop loads a `[TO, TK]` tile of the weights (rows of `w` flattened to
//! `[O, C/G · taps]`) and gathers the matching `[TK, TQ]` tile of input windows (`col`, never
//! materialized) with one indexed load from the group's `[C/G, S..]` view: element `(k, q)`
//! reads channel `k / taps` at `q·stride - pad + tap·dilation` per spatial axis. The first-tap
//! positions are computed once per program, what depends on `k` alone on `[TK, 1..]` tiles;
//! a position in the padding, or a channel past the group's, is outside the view and reads 0
//! (measured on the H100, this beat both a single linear index with explicit masks and a
//! tap-major K loop). The products accumulate on
//! tensor cores in f32 (f64 for f64), then the epilogue runs on the output tile and one store
//! writes it, so the legality certificate is that of any tile-per-program kernel.
//! Guarantees: every output element is the sum over exactly its window.

use super::builder::{choose_tile, Ix, Space, SpaceId};
use super::emit::KernelLowering;
use super::kernels::{accumulator, tile_for, StoreView};
use super::LowerError;
use crate::target::TileShapes;
use crate::tile::{
    Access, ConvActivation, IndexOp, LibraryCall, LibraryConv, TileOp, Type, ValueId,
};
use tir_graph::{BinaryOp, DType, Dim, NodeId, Op, UnaryOp};
use tir_opt::fusion::kinds::{conv_epilogue, conv_input_permute};
use tir_opt::layout::{Stride, StridedView};

type Res<T> = Result<T, LowerError>;

/// The static sizes of a convolution.
struct ConvShape {
    /// Input channels, output channels and groups.
    channels: u64,
    out_channels: u64,
    groups: u64,
    /// Spatial sizes of the input and of the kernel.
    input: Vec<u64>,
    kernel: Vec<u64>,
    strides: Vec<u64>,
    dilations: Vec<u64>,
    pads_before: Vec<u64>,
}

impl ConvShape {
    fn channels_per_group(&self) -> u64 {
        self.channels / self.groups
    }

    fn taps(&self) -> u64 {
        self.kernel.iter().product()
    }
}

impl KernelLowering<'_> {
    /// A convolution with its epilogue (see the module doc).
    pub fn lower_conv(&mut self, root: NodeId, out: usize, tiles: &TileShapes) -> Res<()> {
        let g = self.g;
        let conv = self.member_where("conv", |op| matches!(op, Op::Conv { .. }))?;
        let geometry = self.conv_shape(conv)?;
        let (x, w) = (g.operands(conv)[0], g.operands(conv)[1]);
        let out_ty = g.ty(conv).clone();
        let spatial = geometry.input.len();
        // Output channels per tile divide a group's, so that a tile reads one group.
        let per_group = geometry.out_channels / geometry.groups;
        let to = if geometry.groups == 1 {
            tile_for(&Dim::Static(per_group), tiles.matmul_m)
        } else {
            (1u64 << per_group.trailing_zeros()).min(tiles.matmul_m)
        };
        let tq = choose_tile(&out_ty.shape.dims()[2..], tiles.matmul_n);
        let k = geometry.channels_per_group() * geometry.taps();
        let tk = tile_for(&Dim::Static(k), tiles.matmul_k);
        let mut tile = vec![1, to];
        tile.extend(&tq);
        let out_space = self.grid_space(out_ty.shape.dims(), &tile);
        let coords = self.b.spaces[out_space].coords.clone();
        let count: u64 = tq.iter().product();

        let input_permute = conv_input_permute(g, &self.members, conv);
        let x_view = self.window_view(x, input_permute, &geometry, coords[0], coords[1], to)?;
        let (bases, bases_space) = self.window_bases(&geometry, &coords[2..], &tq);

        let acc_dtype = accumulator(out_ty.dtype);
        let acc_ty = Type::tile(acc_dtype, &[to, count]);
        let acc0 = self.b.constant(0.0, acc_dtype, &[to, count]);
        // Channels-last input: K runs tap-major, a block of channels per step, so each pixel's
        // channels are one contiguous run (the channel-major order would step by C per tap).
        let tap_major =
            input_permute.and_then(|_| channel_block(geometry.channels_per_group(), tk));
        let (step, acc_in) = (self.b.fresh(), self.b.fresh());
        let zero = self.b.index(0);
        let sum = if let Some(tc) = tap_major {
            let blocks = geometry.channels_per_group() / tc;
            let steps = self.b.index((geometry.taps() * blocks) as i64);
            let w_view = self.tap_weight_view(w, &geometry)?;
            self.b.open_block();
            let blocks = self.b.index(blocks as i64);
            let tap = self.b.arith(IndexOp::Div, step, blocks);
            let block = self.b.arith(IndexOp::Rem, step, blocks);
            let w_tile = self.b.emit(
                TileOp::Load {
                    view: w_view,
                    coords: vec![coords[1], tap, block],
                    padding: 0.0,
                    token: None,
                },
                Type::tile(out_ty.dtype, &[to, 1, tc]),
            );
            let w_tile = self.b.emit(
                TileOp::Reshape { x: w_tile },
                Type::tile(out_ty.dtype, &[to, tc]),
            );
            let taps = (tap, block, tc);
            let cols = self.tap_tile(
                x_view,
                &geometry,
                (&bases, bases_space),
                taps,
                &tq,
                out_ty.dtype,
            );
            self.close_k_loop(step, (zero, steps), (acc0, acc_in, acc_ty), w_tile, cols)
        } else {
            let w_view = self.weight_view(w, &geometry)?;
            let steps = self.b.index(k.div_ceil(tk) as i64);
            self.b.open_block();
            let w_tile = self.b.emit(
                TileOp::Load {
                    view: w_view,
                    coords: vec![coords[1], step],
                    padding: 0.0,
                    token: None,
                },
                Type::tile(out_ty.dtype, &[to, tk]),
            );
            let cols = self.window_tile(x_view, &geometry, &bases, step, tk, &tq, out_ty.dtype);
            self.close_k_loop(step, (zero, steps), (acc0, acc_in, acc_ty), w_tile, cols)
        };
        let rounded = self.b.emit(
            TileOp::Cast { x: sum },
            Type::tile(out_ty.dtype, &[to, count]),
        );
        let value = self.b.emit(
            TileOp::Reshape { x: rounded },
            Type::tile(out_ty.dtype, &tile),
        );
        let canonical: Vec<Ix> = (0..spatial + 2).map(Ix::axis).collect();
        let depth = self.b.depth();
        self.memo
            .insert((conv, canonical, out_space), (value, depth));
        let perm = self.root_perm(conv, root)?;
        let root_ix: Vec<Ix> = perm.iter().map(|&a| Ix::axis(a)).collect();
        let value = self.value(root, &root_ix, out_space)?;
        let view = self.conv_store_view(out, &perm)?;
        self.store_whole(out, out_space, value, view);
        self.b.library = self.library_conv(conv, root, out, &geometry);
        Ok(())
    }

    /// Which axis of the conv's result each axis of the root is (the permutes of the epilogue,
    /// composed; the identity without them).
    fn root_perm(&self, conv: NodeId, root: NodeId) -> Res<Vec<usize>> {
        conv_epilogue(self.g, &self.members, conv)
            .and_then(|mut perms| perms.remove(&root))
            .ok_or_else(|| self.unsupported(format!("{root} is not in {conv}'s epilogue")))
    }

    /// The output buffer seen in the conv's axes: root axis `j` is conv axis `perm[j]`, so conv
    /// axis `perm[j]` steps by the buffer's row-major stride of axis `j` (channels-last: the
    /// channels step by 1).
    fn conv_store_view(&self, out: usize, perm: &[usize]) -> Res<StoreView> {
        let shape = &self.buffers[out].ty.shape;
        let rows = StridedView::contiguous(shape)
            .ok_or_else(|| self.unsupported(format!("the strides of {shape} overflow")))?;
        let mut strides = vec![Stride::constant(0); perm.len()];
        for (j, &a) in perm.iter().enumerate() {
            strides[a] = rows.strides[j].clone();
        }
        Ok(StoreView::Strided { strides, offset: 0 })
    }

    /// The library call equal to this kernel ([`LibraryCall::Conv`]), when it is one: 16-bit
    /// floats, and an epilogue that is nothing, a bias add, an activation cuDNN computes as the
    /// graph does ([`ConvActivation`]), or a bias add then such an activation, with permutes
    /// anywhere between them (each tensor's strides say its layout). The bias is the other
    /// operand of an add with the conv, `O` contiguous elements of a buffer, perhaps reshaped
    /// (or (un)squeezed) to broadcast along the channels only.
    fn library_conv(
        &self,
        conv: NodeId,
        root: NodeId,
        out: usize,
        geometry: &ConvShape,
    ) -> Option<LibraryCall> {
        let g = self.g;
        let ty = g.ty(conv);
        if !matches!(ty.dtype, DType::F16 | DType::BF16) {
            return None;
        }
        let perms = conv_epilogue(g, &self.members, conv)?;
        let input_permute = conv_input_permute(g, &self.members, conv);
        let top = self.below_permutes(root, conv);
        let (activation, top) = match &g.node(top).op {
            Op::Unary(op) => (
                Some(conv_activation(*op)?),
                self.below_permutes(g.operands(top)[0], conv),
            ),
            _ => (None, top),
        };
        let (bias, chain) = if top == conv {
            (None, Vec::new())
        } else {
            let (param, chain) = self.conv_bias(conv, top, perms.get(&top)?)?;
            (Some(param), chain)
        };
        let epilogue = usize::from(top != conv) + usize::from(activation.is_some());
        let permutes = self
            .members
            .iter()
            .filter(|&&m| matches!(g.node(m).op, Op::Permute { .. }))
            .count();
        if self.members.len() != 1 + epilogue + chain.len() + permutes {
            return None;
        }
        let param = |buffer: usize| self.b.params.iter().position(|tp| tp.buffer == buffer);
        let (x, w) = (g.operands(conv)[0], g.operands(conv)[1]);
        let x_source = input_permute.map_or(x, |p| g.operands(p)[0]);
        let dims = ty.shape.dims();
        let output = dims[2..]
            .iter()
            .map(Dim::as_static)
            .collect::<Option<Vec<u64>>>()?;
        let contiguous = |shape: &tir_graph::Shape| -> Option<Vec<u64>> {
            let strides = StridedView::contiguous(shape)?.static_strides()?;
            strides.into_iter().map(|s| u64::try_from(s).ok()).collect()
        };
        // Axis `i` of a permuted tensor is axis `perm[i]` of its buffer: the same stride.
        let x_strides = match input_permute.map(|p| &g.node(p).op) {
            Some(Op::Permute { perm }) => {
                let rows = contiguous(&g.ty(x_source).shape)?;
                perm.iter().map(|&p| rows[p]).collect()
            }
            _ => contiguous(&g.ty(x).shape)?,
        };
        let rows = contiguous(&self.buffers[out].ty.shape)?;
        let mut y_strides = vec![0; rows.len()];
        for (j, &a) in perms.get(&root)?.iter().enumerate() {
            y_strides[a] = rows[j];
        }
        Some(LibraryCall::Conv(Box::new(LibraryConv {
            x: param(*self.buffer_of.get(&x_source)?)?,
            w: param(*self.buffer_of.get(&w)?)?,
            bias,
            y: param(out)?,
            dtype: ty.dtype,
            batch: dims[0].clone(),
            channels: geometry.channels,
            out_channels: geometry.out_channels,
            groups: geometry.groups,
            input: geometry.input.clone(),
            kernel: geometry.kernel.clone(),
            output,
            strides: geometry.strides.clone(),
            dilations: geometry.dilations.clone(),
            pads: self.conv_pads(conv)?,
            layout: [x_strides, contiguous(&g.ty(w).shape)?, y_strides],
            activation,
        })))
    }

    /// `node`, or what it permutes when it is a member permute (repeatedly), stopping at `conv`.
    fn below_permutes(&self, mut node: NodeId, conv: NodeId) -> NodeId {
        while node != conv
            && self.members.contains(&node)
            && matches!(self.g.node(node).op, Op::Permute { .. })
        {
            node = self.g.operands(node)[0];
        }
        node
    }

    /// The bias parameter of `add = conv + bias` (either order, the conv perhaps permuted; the
    /// add's axis `i` is the conv's axis `perm[i]`) and the member layout ops between the add
    /// and the bias's buffer: each only reinterprets contiguous elements, the buffer holds `O`
    /// of them, and the bias broadcasts along the channel axis alone.
    fn conv_bias(&self, conv: NodeId, add: NodeId, perm: &[usize]) -> Option<(usize, Vec<NodeId>)> {
        let g = self.g;
        if !matches!(g.node(add).op, Op::Binary(BinaryOp::Add)) {
            return None;
        }
        let bias = match g.operands(add)[..] {
            [a, b] if self.below_permutes(a, conv) == conv => b,
            [a, b] if self.below_permutes(b, conv) == conv => a,
            _ => return None,
        };
        let out = g.ty(add).shape.dims();
        let channel_axis = perm.iter().position(|&a| a == 1)?;
        let shape = g.ty(bias).shape.dims();
        let lead = out.len().checked_sub(shape.len())?;
        let channel_only = shape.iter().enumerate().all(|(i, d)| {
            if i + lead == channel_axis {
                d == &out[channel_axis]
            } else {
                *d == Dim::Static(1)
            }
        });
        if !channel_only || lead > channel_axis {
            return None;
        }
        let mut chain = Vec::new();
        let mut source = bias;
        while self.members.contains(&source) {
            match &g.node(source).op {
                Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {}
                _ => return None,
            }
            chain.push(source);
            source = g.operands(source)[0];
        }
        let buffer = *self.buffer_of.get(&source)?;
        let param = self.b.params.iter().position(|tp| tp.buffer == buffer)?;
        (g.ty(source).shape.static_numel()? == out[channel_axis].as_static()?)
            .then_some((param, chain))
    }

    fn conv_pads(&self, conv: NodeId) -> Option<Vec<(u64, u64)>> {
        match &self.g.node(conv).op {
            Op::Conv { pads, .. } => Some(pads.clone()),
            _ => None,
        }
    }

    fn conv_shape(&self, conv: NodeId) -> Res<ConvShape> {
        let g = self.g;
        let Op::Conv {
            strides,
            dilations,
            pads,
            groups,
        } = &g.node(conv).op
        else {
            return Err(self.unsupported(format!("{conv} is not a conv")));
        };
        let static_dims = |node: NodeId| -> Res<Vec<u64>> {
            g.ty(node).shape.dims()[1..]
                .iter()
                .map(|d| {
                    d.as_static()
                        .ok_or_else(|| self.unsupported(format!("{node} has symbolic dim {d}")))
                })
                .collect()
        };
        let (x, w) = (g.operands(conv)[0], g.operands(conv)[1]);
        let (xd, wd) = (static_dims(x)?, static_dims(w)?);
        let out_channels = g.ty(w).shape.dims()[0]
            .as_static()
            .ok_or_else(|| self.unsupported("weights with a symbolic output channel".into()))?;
        Ok(ConvShape {
            channels: xd[0],
            out_channels,
            groups: *groups,
            input: xd[1..].to_vec(),
            kernel: wd[1..].to_vec(),
            strides: strides.clone(),
            dilations: dilations.clone(),
            pads_before: pads.iter().map(|p| p.0).collect(),
        })
    }

    /// The input of image `n` and of the group that output-channel tile `ot` (of `to`
    /// channels) belongs to, as `[C/G, S..]`: from `x`'s buffer, or, when the conv reads `x`
    /// through `permute` (back from channels-last), from the buffer of the permute's operand
    /// `[N, S.., C]`, where the channels step by 1 and position `s` by the channels times the
    /// later spatial sizes.
    fn window_view(
        &mut self,
        x: NodeId,
        permute: Option<NodeId>,
        geometry: &ConvShape,
        n: ValueId,
        ot: ValueId,
        to: u64,
    ) -> Res<ValueId> {
        let source = match permute {
            Some(p) => self.g.operands(p)[0],
            None => x,
        };
        let param = self.shared_param(source)?;
        let image: u64 = geometry.input.iter().product();
        let per_group = geometry.out_channels / geometry.groups;
        let first_channel = self.b.index(to as i64);
        let first_channel = self.b.arith(IndexOp::Mul, ot, first_channel);
        let group_size = self.b.index(per_group as i64);
        let group = self.b.arith(IndexOp::Div, first_channel, group_size);
        let cpg = geometry.channels_per_group();
        // Where the group's first channel starts, and each axis's step, in elements.
        let (group_step, steps): (u64, Vec<u64>) = if permute.is_some() {
            let mut steps = vec![1];
            let mut step = geometry.channels;
            let mut spatial = vec![0; geometry.input.len()];
            for i in (0..geometry.input.len()).rev() {
                spatial[i] = step;
                step *= geometry.input[i];
            }
            steps.extend(spatial);
            (cpg, steps)
        } else {
            let mut dims = vec![cpg];
            dims.extend(&geometry.input);
            let mut steps = vec![1; dims.len()];
            for k in (0..dims.len() - 1).rev() {
                steps[k] = steps[k + 1] * dims[k + 1];
            }
            (cpg * image, steps)
        };
        let group_stride = self.b.index(group_step as i64);
        let image_stride = self.b.index((geometry.channels * image) as i64);
        let group_offset = self.b.arith(IndexOp::Mul, group, group_stride);
        let image_offset = self.b.arith(IndexOp::Mul, n, image_stride);
        let offset = self.b.arith(IndexOp::Add, image_offset, group_offset);
        let mut dims = vec![Dim::Static(cpg)];
        dims.extend(geometry.input.iter().map(|&s| Dim::Static(s)));
        let extents = dims.iter().map(|d| self.b.dim(d)).collect();
        let strides = steps.iter().map(|&s| self.b.index(s as i64)).collect();
        Ok(self.b.view(param, offset, extents, strides))
    }

    /// The weights as the GEMM's `[O, C/G · taps]` operand (rows contiguous).
    fn weight_view(&mut self, w: NodeId, geometry: &ConvShape) -> Res<ValueId> {
        let param = self.shared_param(w)?;
        let dims = [
            Dim::Static(geometry.out_channels),
            Dim::Static(geometry.channels_per_group() * geometry.taps()),
        ];
        let offset = self.b.index(0);
        let extents = dims.iter().map(|d| self.b.dim(d)).collect();
        let strides = self.b.contiguous_strides(&dims);
        Ok(self.b.view(param, offset, extents, strides))
    }

    /// The parameter of a conv operand, read from its buffer.
    fn shared_param(&mut self, node: NodeId) -> Res<usize> {
        let buffer = *self
            .buffer_of
            .get(&node)
            .ok_or_else(|| self.unsupported(format!("{node} has no buffer")))?;
        Ok(self.b.param(buffer, self.g.ty(node).dtype, Access::Shared))
    }

    /// Per spatial axis, the input position of each output position's first tap,
    /// `q·stride - pad`, as a `[1, TQ..]` tile (the same for every K step).
    fn window_bases(
        &mut self,
        geometry: &ConvShape,
        tile_coords: &[ValueId],
        tq: &[u64],
    ) -> (Vec<ValueId>, SpaceId) {
        let mut shape = vec![1];
        shape.extend(tq);
        let zero = self.b.index(0);
        let mut coords = vec![zero];
        coords.extend(tile_coords);
        let extents = shape.iter().map(|_| zero).collect();
        let space = self.b.add_space(Space {
            tile: shape,
            coords,
            extents,
        });
        let bases = (0..geometry.input.len())
            .map(|i| {
                let start = Ix::Lin {
                    terms: vec![(i + 1, geometry.strides[i] as i64)],
                    offset: -(geometry.pads_before[i] as i64),
                    shift: None,
                };
                self.b.materialize(&start, space)
            })
            .collect();
        (bases, space)
    }

    /// The weights as `[O, taps, C/G]` (their own `[O, C/G, taps]` elements, strided), for a
    /// tap-major K loop.
    fn tap_weight_view(&mut self, w: NodeId, geometry: &ConvShape) -> Res<ValueId> {
        let param = self.shared_param(w)?;
        let (cpg, taps) = (geometry.channels_per_group(), geometry.taps());
        let dims = [geometry.out_channels, taps, cpg];
        let offset = self.b.index(0);
        let extents = dims.iter().map(|&d| self.b.dim(&Dim::Static(d))).collect();
        let strides = [cpg * taps, 1, taps]
            .iter()
            .map(|&s| self.b.index(s as i64))
            .collect();
        Ok(self.b.view(param, offset, extents, strides))
    }

    /// The `[TC, TQ]` tile of input windows for one tap and channel block `block` (of `tc`
    /// channels): channel `block·tc + i` at `base + tap·dilation` along each spatial axis, a
    /// contiguous run of channels per position in a channels-last input; a position in the
    /// padding is outside the view and reads 0.
    fn tap_tile(
        &mut self,
        view: ValueId,
        geometry: &ConvShape,
        (bases, bases_space): (&[ValueId], SpaceId),
        (tap, block, tc): (ValueId, ValueId, u64),
        tq: &[u64],
        dtype: DType,
    ) -> ValueId {
        let rank = tq.len() + 1;
        let mut c_shape = vec![1; rank];
        c_shape[0] = tc;
        let mut full = vec![tc];
        full.extend(tq);
        let zero = self.b.index(0);
        let mut coords = vec![zero; rank];
        coords[0] = block;
        let c_space = self.b.add_space(Space {
            tile: c_shape,
            coords,
            extents: vec![zero; rank],
        });
        let i64_full = Type::tile(DType::I64, &full);
        let channel = self.b.materialize(&Ix::axis(0), c_space);
        let mut indices = vec![self
            .b
            .emit(TileOp::Broadcast { x: channel }, i64_full.clone())];
        // The tap's offset along each spatial axis (row-major over the kernel's axes).
        let mut rest = tap;
        let mut offsets = vec![zero; tq.len()];
        for i in (0..tq.len()).rev() {
            let size = self.b.index(geometry.kernel[i] as i64);
            let dilation = self.b.index(geometry.dilations[i] as i64);
            let along = self.b.arith(IndexOp::Rem, rest, size);
            offsets[i] = self.b.arith(IndexOp::Mul, along, dilation);
            rest = self.b.arith(IndexOp::Div, rest, size);
        }
        for (&base, &offset) in bases.iter().zip(&offsets) {
            let at = self
                .b
                .ix_scalar_op(&Ix::Dyn(base), IndexOp::Add, offset, bases_space);
            let at = self.b.materialize(&at, bases_space);
            indices.push(self.b.emit(TileOp::Broadcast { x: at }, i64_full.clone()));
        }
        let mask = self.b.constant(1.0, DType::Bool, &full);
        let windows = self.b.emit(
            TileOp::LoadIndexed {
                view,
                indices,
                mask,
                padding: 0.0,
            },
            Type::tile(dtype, &full),
        );
        let count = tq.iter().product();
        self.b.emit(
            TileOp::Reshape { x: windows },
            Type::tile(dtype, &[tc, count]),
        )
    }

    /// The `[TK, TQ]` tile of input windows for K step `step`: K index `k` is channel
    /// `k / taps` and tap `k % taps` (row-major over the kernel's axes), read at
    /// `base + tap·dilation` along each spatial axis. What depends on `k` alone is computed on
    /// `[TK, 1..]` tiles; a position in the padding, or a channel past the group's, is outside
    /// the view and reads 0.
    #[allow(clippy::too_many_arguments)]
    fn window_tile(
        &mut self,
        view: ValueId,
        geometry: &ConvShape,
        bases: &[ValueId],
        step: ValueId,
        tk: u64,
        tq: &[u64],
        dtype: DType,
    ) -> ValueId {
        let rank = tq.len() + 1;
        let mut k_shape = vec![1; rank];
        k_shape[0] = tk;
        let mut full = vec![tk];
        full.extend(tq);
        let zero = self.b.index(0);
        let mut coords = vec![zero; rank];
        coords[0] = step;
        let k_space = self.b.add_space(Space {
            tile: k_shape,
            coords,
            extents: vec![zero; rank],
        });
        let k = Ix::axis(0);
        let taps = self.b.index(geometry.taps() as i64);
        let channel = self.b.ix_scalar_op(&k, IndexOp::Div, taps, k_space);
        let mut tap = self.b.ix_scalar_op(&k, IndexOp::Rem, taps, k_space);
        let mut offsets = vec![zero; tq.len()];
        for i in (0..tq.len()).rev() {
            let size = self.b.index(geometry.kernel[i] as i64);
            let dilation = self.b.index(geometry.dilations[i] as i64);
            let along = self.b.ix_scalar_op(&tap, IndexOp::Rem, size, k_space);
            let scaled = self.b.ix_scalar_op(&along, IndexOp::Mul, dilation, k_space);
            offsets[i] = self.b.materialize(&scaled, k_space);
            tap = self.b.ix_scalar_op(&tap, IndexOp::Div, size, k_space);
        }
        let i64_full = Type::tile(DType::I64, &full);
        let channel = self.b.materialize(&channel, k_space);
        let mut indices = vec![self
            .b
            .emit(TileOp::Broadcast { x: channel }, i64_full.clone())];
        for (&base, &offset) in bases.iter().zip(&offsets) {
            let base = self.b.emit(TileOp::Broadcast { x: base }, i64_full.clone());
            let offset = self
                .b
                .emit(TileOp::Broadcast { x: offset }, i64_full.clone());
            indices.push(self.b.emit(
                TileOp::IndexArith {
                    op: IndexOp::Add,
                    a: base,
                    b: offset,
                },
                i64_full.clone(),
            ));
        }
        let mask = self.b.constant(1.0, DType::Bool, &full);
        let windows = self.b.emit(
            TileOp::LoadIndexed {
                view,
                indices,
                mask,
                padding: 0.0,
            },
            Type::tile(dtype, &full),
        );
        let count = tq.iter().product();
        self.b.emit(
            TileOp::Reshape { x: windows },
            Type::tile(dtype, &[tk, count]),
        )
    }
}

/// The channels per K step of a tap-major loop over `channels_per_group` channels: the largest
/// power of two up to `tk` that divides them, at least 16 (a tensor-core step); `None` below.
fn channel_block(channels_per_group: u64, tk: u64) -> Option<u64> {
    let block = (1u64 << channels_per_group.trailing_zeros()).min(tk);
    (block >= 16).then_some(block)
}

/// The library activation that computes `op` as the graph defines it, if there is one.
fn conv_activation(op: UnaryOp) -> Option<ConvActivation> {
    Some(match op {
        UnaryOp::Relu => ConvActivation::Relu,
        UnaryOp::Sigmoid => ConvActivation::Sigmoid,
        UnaryOp::Tanh => ConvActivation::Tanh,
        UnaryOp::GeluErf => ConvActivation::GeluErf,
        UnaryOp::GeluTanh => ConvActivation::GeluTanh,
        _ => return None,
    })
}
