//! Strided views: where the elements of a layout op's result lie in a contiguous row-major
//! buffer, when that is an affine map. A stride is a static count times a product of symbolic
//! dims ([`Stride`]): the batch stride of a head merge over a symbolic sequence is `seq · 384`.
//! Fusion uses this to decide whether a chain of bijective layout ops after a matmul or an
//! attention can be a store's index map; lowering uses it to build that store's view.

use tir_graph::{Dim, Op, Shape};

/// A stride in elements: `coeff` times the product of the non-static dims `dims` (symbols or
/// expressions, sorted, so that equal strides compare equal; empty for a static stride, and for
/// 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stride {
    pub coeff: i64,
    pub dims: Vec<Dim>,
}

impl Stride {
    pub fn constant(coeff: i64) -> Stride {
        Stride {
            coeff,
            dims: Vec::new(),
        }
    }

    /// This stride times the extent of `dim`; `None` on overflow.
    pub fn times(&self, dim: &Dim) -> Option<Stride> {
        match dim {
            Dim::Static(n) => {
                let coeff = self.coeff.checked_mul(i64::try_from(*n).ok()?)?;
                Some(if coeff == 0 {
                    Stride::constant(0)
                } else {
                    Stride {
                        coeff,
                        dims: self.dims.clone(),
                    }
                })
            }
            _ if self.coeff != 0 => {
                let mut dims = self.dims.clone();
                dims.push(dim.clone());
                dims.sort();
                Some(Stride {
                    coeff: self.coeff,
                    dims,
                })
            }
            _ => Some(Stride::constant(0)),
        }
    }

    /// The stride as a number, when it depends on no symbolic dim.
    pub fn as_static(&self) -> Option<i64> {
        self.dims.is_empty().then_some(self.coeff)
    }
}

/// Element `i` of the view is element `offset + Σ i[k] * strides[k]` of the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StridedView {
    pub shape: Vec<Dim>,
    pub strides: Vec<Stride>,
    pub offset: i64,
}

impl StridedView {
    /// The row-major view of a buffer of `shape`; `None` if a stride overflows.
    pub fn contiguous(shape: &Shape) -> Option<StridedView> {
        let dims = shape.dims();
        let mut strides = vec![Stride::constant(0); dims.len()];
        let mut stride = Stride::constant(1);
        for k in (0..dims.len()).rev() {
            strides[k] = stride.clone();
            if k > 0 {
                stride = stride.times(&dims[k])?;
            }
        }
        Some(StridedView {
            shape: dims.to_vec(),
            strides,
            offset: 0,
        })
    }

    /// The strides as numbers, when none depends on a symbolic dim.
    pub fn static_strides(&self) -> Option<Vec<i64>> {
        self.strides.iter().map(Stride::as_static).collect()
    }

    /// Result dim `i` is dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> StridedView {
        StridedView {
            shape: perm.iter().map(|&p| self.shape[p].clone()).collect(),
            strides: perm.iter().map(|&p| self.strides[p].clone()).collect(),
            offset: self.offset,
        }
    }

    /// The same elements in row-major order with the dims `to`; `None` if that is not a
    /// strided view (dims that merge must be laid out one after another).
    pub fn reshape(&self, to: &[Dim]) -> Option<StridedView> {
        // Size-1 dims carry no elements: drop them, then insert them back with stride 0.
        let from: Vec<(Dim, Stride)> = self
            .shape
            .iter()
            .cloned()
            .zip(self.strides.iter().cloned())
            .filter(|(d, _)| *d != Dim::Static(1))
            .collect();
        let target: Vec<Dim> = to
            .iter()
            .filter(|d| **d != Dim::Static(1))
            .cloned()
            .collect();
        let mut strides = Vec::with_capacity(target.len());
        let (mut i, mut j) = (0, 0);
        while i < from.len() || j < target.len() {
            let group = next_group(&from[i..], &target[j..])?;
            // The source dims of the group must form one run: stride[k] = stride[k+1] * dim[k+1].
            let source = &from[i..i + group.0];
            for w in source.windows(2) {
                if w[0].1 != w[1].1.times(&w[1].0)? {
                    return None;
                }
            }
            let mut stride = source.last()?.1.clone();
            let mut group_strides = Vec::with_capacity(group.1);
            for d in target[j..j + group.1].iter().rev() {
                group_strides.push(stride.clone());
                stride = stride.times(d)?;
            }
            group_strides.reverse();
            strides.extend(group_strides);
            i += group.0;
            j += group.1;
        }
        let mut it = strides.into_iter();
        let strides = to
            .iter()
            .map(|d| {
                if *d == Dim::Static(1) {
                    Some(Stride::constant(0))
                } else {
                    it.next()
                }
            })
            .collect::<Option<Vec<Stride>>>()?;
        Some(StridedView {
            shape: to.to_vec(),
            strides,
            offset: self.offset,
        })
    }
}

/// The view, over the shape of the value `chain` starts from, through which a kernel stores
/// `root` into its contiguous buffer: `chain` lists the bijective layout ops from `root` down,
/// and each is undone in turn. `None` if some step is not a strided view.
pub fn store_view(g: &tir_graph::Graph, chain: &[tir_graph::NodeId]) -> Option<StridedView> {
    let root = *chain.first()?;
    let mut view = StridedView::contiguous(&g.ty(root).shape)?;
    for &node in chain {
        let operand = g.operands(node)[0];
        view = match &g.node(node).op {
            Op::Permute { perm } => {
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                view.permute(&inverse)
            }
            Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
                view.reshape(g.ty(operand).shape.dims())?
            }
            _ => return None,
        };
    }
    Some(view)
}

/// The view, over the shape of `chain`'s first node, through which a kernel loads it from the
/// contiguous buffer of the value `chain` starts from: `chain` lists bijective layout ops from
/// the loaded value down (as a store chain does), and each is applied in turn from the buffer
/// up. `None` if some step is not a strided view.
pub fn load_view(g: &tir_graph::Graph, chain: &[tir_graph::NodeId]) -> Option<StridedView> {
    let source = g.operands(*chain.last()?)[0];
    let mut view = StridedView::contiguous(&g.ty(source).shape)?;
    for &node in chain.iter().rev() {
        view = match &g.node(node).op {
            Op::Permute { perm } => view.permute(perm),
            Op::Reshape { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
                view.reshape(g.ty(node).shape.dims())?
            }
            _ => return None,
        };
    }
    Some(view)
}

/// The next pair of groups (source dims, target dims) with equal element counts, at least one
/// dim each; a symbolic or expression dim must stand alone on both sides, the same on each.
fn next_group(from: &[(Dim, Stride)], to: &[Dim]) -> Option<(usize, usize)> {
    match (from.first()?, to.first()?) {
        ((a, _), b) if a.as_static().is_none() || b.as_static().is_none() => {
            (a == b).then_some((1, 1))
        }
        _ => {
            let (mut i, mut j) = (1, 1);
            let mut left = from[0].0.as_static()?;
            let mut right = to[0].as_static()?;
            while left != right {
                if left < right {
                    left = left.checked_mul(from.get(i)?.0.as_static()?)?;
                    i += 1;
                } else {
                    right = right.checked_mul(to.get(j)?.as_static()?)?;
                    j += 1;
                }
            }
            Some((i, j))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tir_graph::shape;

    fn numbers(v: &StridedView) -> Vec<i64> {
        v.static_strides().unwrap()
    }

    #[test]
    fn contiguous_strides_multiply_static_and_symbolic_dims() {
        let v = StridedView::contiguous(&shape!["batch", 4, 8]).unwrap();
        assert_eq!(numbers(&v), [32, 8, 1]);
        let v = StridedView::contiguous(&shape!["b", "n", 4]).unwrap();
        let n4 = Stride {
            coeff: 4,
            dims: vec![Dim::from("n")],
        };
        assert_eq!(v.strides, [n4, Stride::constant(4), Stride::constant(1)]);
        assert!(v.static_strides().is_none());
    }

    #[test]
    fn split_heads_merges_only_when_the_sequence_is_one() {
        // root [b, h, s, d] contiguous; its permute^-1 is the view of [b, s, h, d].
        let prefill = StridedView::contiguous(&shape![2, 4, 16, 8])
            .unwrap()
            .permute(&[0, 2, 1, 3]);
        assert!(prefill.reshape(&[2.into(), 16.into(), 32.into()]).is_none());
        let decode = StridedView::contiguous(&shape![2, 4, 1, 8])
            .unwrap()
            .permute(&[0, 2, 1, 3]);
        let merged = decode.reshape(&[2.into(), 1.into(), 32.into()]).unwrap();
        assert_eq!(numbers(&merged), [32, 0, 1]);
    }

    #[test]
    fn a_head_merge_over_a_symbolic_sequence_is_a_view_with_a_symbolic_batch_stride() {
        // The merge's result [b, s, 32] contiguous, seen from the heads [b, 2, s, 16]: undo the
        // reshape (32 -> 2 x 16), then the permute.
        let merged = StridedView::contiguous(&shape!["b", "s", 32]).unwrap();
        let heads = merged
            .reshape(&["b".into(), "s".into(), 2.into(), 16.into()])
            .unwrap()
            .permute(&[0, 2, 1, 3]);
        let batch = Stride {
            coeff: 32,
            dims: vec![Dim::from("s")],
        };
        let rest = [16, 32, 1].map(Stride::constant);
        assert_eq!(heads.strides, [vec![batch], rest.to_vec()].concat());
    }

    #[test]
    fn reshape_splits_and_merges_contiguous_runs() {
        let v = StridedView::contiguous(&shape!["n", 6, 4]).unwrap();
        let r = v.reshape(&["n".into(), 3.into(), 8.into()]).unwrap();
        assert_eq!(numbers(&r), [24, 8, 1]);
        let t = v.permute(&[0, 2, 1]);
        assert!(t.reshape(&["n".into(), 24.into()]).is_none());
        assert!(v.reshape(&["m".into(), 24.into()]).is_none());
    }
}
