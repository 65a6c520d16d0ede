//! Values known when a model is imported: initializers, constants, and the shape computations
//! exported models make (`Shape` → `Gather` → `Unsqueeze` → `Concat` → `Reshape`), including
//! shapes with symbolic dims, which stay symbolic rather than being guessed.

use crate::NodeErrorKind;
use std::rc::Rc;
use tir_graph::{DType, Dim, DimExpr, HostTensor};

/// A value known at import.
#[derive(Clone, Debug)]
pub(crate) enum Known {
    Data(Rc<HostTensor<'static>>),
    /// An i64 vector (or, when `scalar`, one i64) of which some entries are symbolic: dims, or
    /// arithmetic on them.
    Dims {
        entries: Vec<Entry>,
        scalar: bool,
    },
}

/// One entry of a shape vector: an integer, or an expression over symbolic dims.
pub(crate) type Entry = DimExpr;

impl Known {
    pub fn data(t: HostTensor<'static>) -> Known {
        Known::Data(Rc::new(t))
    }

    /// A shape vector; symbolic only if some entry is.
    pub fn dims(entries: Vec<Entry>, scalar: bool) -> Known {
        let ints: Option<Vec<i64>> = entries.iter().map(DimExpr::as_constant).collect();
        match ints {
            Some(ints) if scalar => Known::data(HostTensor::scalar(ints[0])),
            Some(ints) => {
                let n = ints.len() as u64;
                Known::data(HostTensor::from_vec(ints, &[n]).expect("dims match"))
            }
            None => Known::Dims { entries, scalar },
        }
    }

    /// The shape of `dims` as a known i64 vector.
    pub fn shape_of(dims: &[Dim]) -> Known {
        Known::dims(dims.iter().map(Dim::to_expr).collect(), false)
    }

    pub fn dtype(&self) -> DType {
        match self {
            Known::Data(t) => t.dtype(),
            Known::Dims { .. } => DType::I64,
        }
    }

    pub fn dims_of(&self) -> Vec<u64> {
        match self {
            Known::Data(t) => t.dims().to_vec(),
            Known::Dims { scalar: true, .. } => vec![],
            Known::Dims { entries, .. } => vec![entries.len() as u64],
        }
    }

    /// The value as a tensor, if it has no symbolic entry.
    pub fn to_tensor(&self) -> Result<HostTensor<'static>, NodeErrorKind> {
        match self {
            Known::Data(t) => Ok((**t).clone()),
            Known::Dims { entries, .. } => Err(symbolic(entries)),
        }
    }

    /// The entries of an integer scalar or vector (symbolic ones included).
    pub fn entries(&self) -> Option<(Vec<Entry>, bool)> {
        match self {
            Known::Dims { entries, scalar } => Some((entries.clone(), *scalar)),
            Known::Data(t) if t.dims().len() <= 1 && t.dtype().is_int() => {
                let ints = int_values(t)?;
                Some((
                    ints.into_iter().map(DimExpr::constant).collect(),
                    t.dims().is_empty(),
                ))
            }
            Known::Data(_) => None,
        }
    }

    /// The values of an integer scalar or vector.
    pub fn ints(&self) -> Result<Vec<i64>, NodeErrorKind> {
        match self {
            Known::Data(t) if t.dims().len() <= 1 => int_values(t).ok_or_else(|| {
                NodeErrorKind::Invalid(format!("expected integers, got {}", t.type_name()))
            }),
            Known::Data(t) => Err(NodeErrorKind::Invalid(format!(
                "expected an integer scalar or vector, got {}",
                t.type_name()
            ))),
            Known::Dims { entries, .. } => Err(symbolic(entries)),
        }
    }

    /// The values as f64 (any dtype, any rank).
    pub fn f64s(&self) -> Result<Vec<f64>, NodeErrorKind> {
        let t = self.to_tensor()?;
        Ok((0..t.numel())
            .map(|i| t.element_f64(i).expect("in range"))
            .collect())
    }
}

/// The values of an integer tensor, exactly.
fn int_values(t: &HostTensor<'_>) -> Option<Vec<i64>> {
    match t.dtype() {
        DType::I64 => t.as_slice::<i64>().ok().map(<[i64]>::to_vec),
        DType::I32 => t
            .as_slice::<i32>()
            .ok()
            .map(|v| v.iter().map(|&x| x.into()).collect()),
        DType::I8 | DType::U8 | DType::I16 | DType::U16 | DType::U32 => Some(
            (0..t.numel())
                .map(|i| t.element_f64(i).expect("in range") as i64)
                .collect(),
        ),
        _ => None,
    }
}

fn symbolic(entries: &[Entry]) -> NodeErrorKind {
    let names: Vec<String> = entries
        .iter()
        .filter(|e| e.as_constant().is_none())
        .map(ToString::to_string)
        .collect();
    NodeErrorKind::Unsupported(format!(
        "a computation on the symbolic dims {names:?} that tir cannot keep symbolic"
    ))
}
