//! Shapes: up to [`MAX_RANK`] dims, each static or symbolic, with NumPy broadcasting.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 8;

/// One dimension: a size known when the graph is built, or a name bound when it runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Dim {
    Static(u64),
    /// A named size such as `batch`; two symbolic dims are equal when their names are.
    Symbolic(String),
}

impl Dim {
    pub fn as_static(&self) -> Option<u64> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Symbolic(_) => None,
        }
    }

    /// Whether `name` can name a symbolic dim: an identifier that does not start with a digit.
    pub fn is_valid_symbol(name: &str) -> bool {
        let mut chars = name.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Self {
        Dim::Static(n)
    }
}

impl From<&str> for Dim {
    fn from(name: &str) -> Self {
        Dim::Symbolic(name.to_string())
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Symbolic(name) => f.write_str(name),
        }
    }
}

/// The dims of a tensor, outermost first. Rank 0 is a scalar.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape(Vec<Dim>);

/// Why a shape could not be formed or combined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("rank {0} exceeds the maximum rank {MAX_RANK}")]
    RankTooLarge(usize),
    #[error("`{0}` is not a valid symbolic dim name")]
    BadSymbol(String),
    #[error("shapes {0} and {1} do not broadcast: dim {2} vs {3}")]
    NotBroadcastable(Shape, Shape, Dim, Dim),
}

impl Shape {
    /// A shape from its dims, refusing ranks above [`MAX_RANK`] and malformed symbol names.
    pub fn new(dims: Vec<Dim>) -> Result<Shape, ShapeError> {
        if dims.len() > MAX_RANK {
            return Err(ShapeError::RankTooLarge(dims.len()));
        }
        for d in &dims {
            if let Dim::Symbolic(name) = d {
                if !Dim::is_valid_symbol(name) {
                    return Err(ShapeError::BadSymbol(name.clone()));
                }
            }
        }
        Ok(Shape(dims))
    }

    /// A shape of static dims.
    pub fn of(dims: &[u64]) -> Shape {
        assert!(dims.len() <= MAX_RANK, "rank {} > {MAX_RANK}", dims.len());
        Shape(dims.iter().map(|&n| Dim::Static(n)).collect())
    }

    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    pub fn into_dims(self) -> Vec<Dim> {
        self.0
    }

    /// Number of elements, when every dim is static and the product fits in a `u64`.
    pub fn static_numel(&self) -> Option<u64> {
        self.0
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(d.as_static()?))
    }

    /// The dims, when all are static.
    pub fn static_dims(&self) -> Option<Vec<u64>> {
        self.0.iter().map(Dim::as_static).collect()
    }

    /// Whether concrete `dims` have this shape: the same rank and every static dim equal (a
    /// symbolic dim admits any size).
    pub fn admits(&self, dims: &[u64]) -> bool {
        dims.len() == self.rank()
            && self
                .0
                .iter()
                .zip(dims)
                .all(|(d, &n)| d.as_static().is_none_or(|s| s == n))
    }

    /// NumPy broadcasting: align from the right; equal dims stay, a static 1 takes the other dim.
    /// Symbolic dims match only a symbolic dim of the same name (or a static 1).
    pub fn broadcast(&self, other: &Shape) -> Result<Shape, ShapeError> {
        let rank = self.rank().max(other.rank());
        let one = Dim::Static(1);
        let mut dims = Vec::with_capacity(rank);
        for i in 0..rank {
            let a = dim_from_right(self, rank - i, &one);
            let b = dim_from_right(other, rank - i, &one);
            let d = if a == b || *b == one {
                a
            } else if *a == one {
                b
            } else {
                return Err(ShapeError::NotBroadcastable(
                    self.clone(),
                    other.clone(),
                    a.clone(),
                    b.clone(),
                ));
            };
            dims.push(d.clone());
        }
        Ok(Shape(dims))
    }
}

/// The dim `rank - pos` places from the left when `shape` is right-aligned to `rank` dims.
fn dim_from_right<'a>(shape: &'a Shape, from_right: usize, one: &'a Dim) -> &'a Dim {
    shape
        .rank()
        .checked_sub(from_right)
        .map_or(one, |i| &shape.0[i])
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Builds a [`Shape`] from static sizes and symbol names: `shape!["batch", 1024]`.
/// Panics on a rank above [`MAX_RANK`] or a malformed name; use [`Shape::new`] for fallible input.
#[macro_export]
macro_rules! shape {
    ($($d:expr),* $(,)?) => {
        $crate::Shape::new(vec![$($crate::Dim::from($d)),*]).expect("shape! literal")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        let a = Shape::of(&[4, 1, 3]);
        let b = Shape::of(&[5, 1]);
        assert_eq!(a.broadcast(&b).unwrap(), Shape::of(&[4, 5, 3]));
        assert_eq!(Shape::scalar().broadcast(&b).unwrap(), b);
        assert!(Shape::of(&[3]).broadcast(&Shape::of(&[4])).is_err());
    }

    #[test]
    fn broadcast_compares_symbols_by_name() {
        let a = shape!["batch", 1];
        let b = shape!["batch", 7];
        assert_eq!(a.broadcast(&b).unwrap(), shape!["batch", 7]);
        assert_eq!(shape![1].broadcast(&shape!["n"]).unwrap(), shape!["n"]);
        let err = shape!["batch"].broadcast(&shape!["seq"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "shapes [batch] and [seq] do not broadcast: dim batch vs seq"
        );
        assert!(shape!["batch"].broadcast(&shape![4]).is_err());
    }

    #[test]
    fn rank_and_symbols_are_checked() {
        assert_eq!(
            Shape::new(vec![Dim::Static(1); 9]),
            Err(ShapeError::RankTooLarge(9))
        );
        assert!(Shape::new(vec![Dim::Symbolic("1x".into())]).is_err());
        assert_eq!(shape![2, 3, "n"].static_numel(), None);
        assert_eq!(Shape::of(&[2, 3]).static_numel(), Some(6));
        assert_eq!(Shape::of(&[u64::MAX, 2]).static_numel(), None);
    }
}
