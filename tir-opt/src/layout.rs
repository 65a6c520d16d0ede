//! Strided views: where the elements of a layout op's result lie in a contiguous row-major
//! buffer, when that is an affine map with static strides. Fusion uses this to decide whether a
//! chain of bijective layout ops after a matmul can be a store's index map; lowering uses it to
//! build that store's view.

use tir_graph::{Dim, Op, Shape};

/// Element `i` of the view is element `offset + Σ i[k] * strides[k]` of the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StridedView {
    pub shape: Vec<Dim>,
    pub strides: Vec<i64>,
    pub offset: i64,
}

impl StridedView {
    /// The row-major view of a buffer of `shape`; `None` if a stride would depend on a
    /// symbolic dim (a symbolic dim right of another dim).
    pub fn contiguous(shape: &Shape) -> Option<StridedView> {
        let dims = shape.dims();
        let mut strides = vec![0i64; dims.len()];
        let mut stride: i64 = 1;
        for k in (0..dims.len()).rev() {
            strides[k] = stride;
            if k > 0 {
                stride = stride.checked_mul(i64::try_from(dims[k].as_static()?).ok()?)?;
            }
        }
        Some(StridedView {
            shape: dims.to_vec(),
            strides,
            offset: 0,
        })
    }

    /// Result dim `i` is dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> StridedView {
        StridedView {
            shape: perm.iter().map(|&p| self.shape[p].clone()).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// The same elements in row-major order with the dims `to`; `None` if that is not a
    /// strided view (dims that merge must be laid out one after another).
    pub fn reshape(&self, to: &[Dim]) -> Option<StridedView> {
        // Size-1 dims carry no elements: drop them, then insert them back with stride 0.
        let from: Vec<(Dim, i64)> = self
            .shape
            .iter()
            .cloned()
            .zip(self.strides.iter().copied())
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
                let next = i64::try_from(w[1].0.as_static()?).ok()?;
                if w[0].1 != w[1].1.checked_mul(next)? {
                    return None;
                }
            }
            let mut stride = source.last()?.1;
            let mut group_strides = Vec::with_capacity(group.1);
            for d in target[j..j + group.1].iter().rev() {
                group_strides.push(stride);
                if let Some(n) = d.as_static() {
                    stride = stride.checked_mul(i64::try_from(n).ok()?)?;
                }
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
                    Some(0)
                } else {
                    it.next()
                }
            })
            .collect::<Option<Vec<i64>>>()?;
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

/// The next pair of groups (source dims, target dims) with equal element counts, at least one
/// dim each; a symbolic dim must stand alone on both sides with the same name.
fn next_group(from: &[(Dim, i64)], to: &[Dim]) -> Option<(usize, usize)> {
    match (from.first()?, to.first()?) {
        ((Dim::Symbolic(a), _), Dim::Symbolic(b)) => (a == b).then_some((1, 1)),
        ((Dim::Symbolic(_), _), _) | (_, Dim::Symbolic(_)) => None,
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

    #[test]
    fn contiguous_strides_need_static_trailing_dims() {
        let v = StridedView::contiguous(&shape!["batch", 4, 8]).unwrap();
        assert_eq!(v.strides, [32, 8, 1]);
        assert!(StridedView::contiguous(&shape![4, "n"]).is_none());
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
        assert_eq!(merged.strides, [32, 0, 1]);
    }

    #[test]
    fn reshape_splits_and_merges_contiguous_runs() {
        let v = StridedView::contiguous(&shape!["n", 6, 4]).unwrap();
        let r = v.reshape(&["n".into(), 3.into(), 8.into()]).unwrap();
        assert_eq!(r.strides, [24, 8, 1]);
        let t = v.permute(&[0, 2, 1]);
        assert!(t.reshape(&["n".into(), 24.into()]).is_none());
        assert!(v.reshape(&["m".into(), 24.into()]).is_none());
    }
}
