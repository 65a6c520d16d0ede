//! The library route of an attention kernel: the [`LibraryCall::Attention`] equal to it (cuDNN's
//! fused flash attention on the backend that has it), when its dtypes, scale, mask, head dims
//! and operand layouts are ones the library takes; otherwise the kernel runs as generated.

use super::{head_dim, AttentionTiling};
use crate::lower::emit::KernelLowering;
use crate::tile::{AttentionOperand, DimPolynomial, LibraryAttention, LibraryCall};
use tir_graph::{Dim, ExactF64, NodeId};
use tir_opt::fusion::kinds::{store_chain, unchained};
use tir_opt::layout::{load_view, store_view, Stride, StridedView};

impl KernelLowering<'_> {
    /// The library call equal to this attention kernel ([`LibraryCall::Attention`]), when it is
    /// one: 16-bit floats, a constant positive scale ([`AttentionTiling::scale`]) and no mask
    /// or the causal one with offset 0, at most two batch dims that every operand has, head
    /// dims that are multiples of 8 up to 256, and each operand read from its buffer (and the
    /// output stored) through bijective layout ops that compose into a strided view with a
    /// contiguous head dim and rows 16-byte aligned.
    pub(super) fn library_attention(
        &self,
        t: &AttentionTiling,
        root: NodeId,
        out: usize,
    ) -> Option<LibraryCall> {
        let g = self.g;
        let p = &t.pattern;
        let scale = t.scale?;
        if !matches!(t.causal, None | Some(0)) {
            return None;
        }
        let (q, kt, v) = (
            g.operands(p.scores)[0],
            g.operands(p.scores)[1],
            g.operands(p.output)[1],
        );
        let dtype = g.ty(p.output).dtype;
        let out_dims = g.ty(p.output).shape.dims();
        let rank = out_dims.len();
        let batch = &out_dims[..rank - 2];
        let same_batch = |x: NodeId| {
            let ty = g.ty(x);
            ty.dtype == dtype && ty.rank() == rank && &ty.shape.dims()[..rank - 2] == batch
        };
        if rank > 4 || ![q, kt, v].into_iter().all(same_batch) {
            return None;
        }
        let (q, k, v) = (
            self.loaded_view(q)?,
            self.loaded_view(kt)?,
            self.loaded_view(v)?,
        );
        let mut swap = (0..rank).collect::<Vec<_>>();
        swap.swap(rank - 2, rank - 1);
        let k = (k.0, k.1.permute(&swap));
        let chain = store_chain(g, &self.members, root);
        let o_view = if chain.is_empty() {
            StridedView::contiguous(&g.ty(root).shape)?
        } else {
            store_view(g, &chain)?
        };
        let o_param = self.b.params.iter().position(|tp| tp.buffer == out)?;
        let one = Dim::Static(1);
        let at = |i: usize| {
            batch
                .len()
                .checked_sub(i)
                .map_or(one.clone(), |j| batch[j].clone())
        };
        let keys = g.ty(p.scores).shape.dims()[rank - 1].clone();
        Some(LibraryCall::Attention(Box::new(LibraryAttention {
            q: attention_operand(q)?,
            k: attention_operand(k)?,
            v: attention_operand(v)?,
            o: attention_operand((o_param, o_view))?,
            dtype,
            dims: [at(2), at(1), out_dims[rank - 2].clone(), keys],
            d: library_head_dim(head_dim(g, p)?)?,
            d_v: library_head_dim(out_dims[rank - 1].as_static()?)?,
            scale: ExactF64(scale),
            causal: t.causal.is_some(),
        })))
    }

    /// The parameter `x` is loaded from and the strided view it is loaded through, when `x`
    /// is a buffer's value seen through bijective layout members.
    fn loaded_view(&self, x: NodeId) -> Option<(usize, StridedView)> {
        let g = self.g;
        let chain = store_chain(g, &self.members, x);
        let source = unchained(g, x, &chain);
        if self.members.contains(&source) {
            return None;
        }
        let buffer = *self.buffer_of.get(&source)?;
        let param = self.b.params.iter().position(|tp| tp.buffer == buffer)?;
        let view = if chain.is_empty() {
            StridedView::contiguous(&g.ty(x).shape)?
        } else {
            load_view(g, &chain)?
        };
        Some((param, view))
    }
}

/// `d` when a fused attention library takes it as a head dim: a multiple of 8 up to 256
/// (cuDNN's bounds).
fn library_head_dim(d: u64) -> Option<u64> {
    (d.is_multiple_of(8) && d <= 256).then_some(d)
}

/// A parameter and its view as a library attention's 4-D operand: offset 0, the head dim
/// contiguous, missing batch dims of extent 1 (stride 0) in front.
fn attention_operand((param, view): (usize, StridedView)) -> Option<AttentionOperand> {
    let (last, outer) = view.strides.split_last()?;
    // Rows start 16-byte aligned: outer strides are multiples of 8 16-bit elements.
    let aligned = outer.iter().all(|s| s.coeff % 8 == 0);
    if view.offset != 0 || last.as_static() != Some(1) || outer.len() > 3 || !aligned {
        return None;
    }
    let polynomial = |s: &Stride| -> Option<DimPolynomial> {
        let factor = u64::try_from(s.coeff).ok()?;
        let dims = s.dims.clone();
        Some(DimPolynomial {
            terms: vec![(factor, dims)],
        })
    };
    let mut strides = vec![DimPolynomial::default(); 4 - view.strides.len()];
    for s in &view.strides {
        strides.push(polynomial(s)?);
    }
    Some(AttentionOperand {
        param,
        strides: strides.try_into().ok()?,
    })
}
