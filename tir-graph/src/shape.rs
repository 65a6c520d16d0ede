//! Shapes: up to [`MAX_RANK`] dims, each static, a symbol, or an expression over symbols, with
//! NumPy broadcasting.

pub use crate::dim::{Atom, DimError, DimExpr};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 8;

/// One dimension: a size known when the graph is built, a name bound when it runs, or an
/// expression over such names. Built through [`Dim::from_expr`], a dim is in canonical form: an
/// expression that is a constant is `Static`, one that is a lone symbol is `Symbolic`, so equal
/// dims compare equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Dim {
    /// A size known when the graph is built.
    Static(u64),
    /// A named size such as `batch`; two symbolic dims are equal when their names are.
    Symbolic(String),
    /// An expression over symbols, neither a constant nor a lone symbol (`seq - 1`,
    /// `batch*seq`, `floor((h + 1) / 2)`). Appended last: `.tir` files store the variant index.
    Expr(DimExpr),
}

impl Dim {
    /// The size, if the dim is static.
    pub fn as_static(&self) -> Option<u64> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Symbolic(_) | Dim::Expr(_) => None,
        }
    }

    /// The dim as an expression.
    pub fn to_expr(&self) -> DimExpr {
        match self {
            // Past i64's range a size saturates (arithmetic on it then overflows, an error).
            Dim::Static(n) => DimExpr::constant(i64::try_from(*n).unwrap_or(i64::MAX)),
            Dim::Symbolic(s) => DimExpr::symbol(s),
            Dim::Expr(e) => e.clone(),
        }
    }

    /// The canonical dim of `e`; a negative constant is refused.
    pub fn from_expr(e: DimExpr) -> Result<Dim, ShapeError> {
        if let Some(c) = e.as_constant() {
            return u64::try_from(c)
                .map(Dim::Static)
                .map_err(|_| ShapeError::Negative(e.to_string()));
        }
        if let Some(s) = e.as_symbol() {
            return Ok(Dim::Symbolic(s.to_string()));
        }
        Ok(Dim::Expr(e))
    }

    /// A dim from its text: a size, a symbol or an expression (`"batch*seq"`, `"seq - 1"`).
    pub fn parse(text: &str) -> Result<Dim, ShapeError> {
        let e =
            DimExpr::parse(text).map_err(|reason| ShapeError::BadExpr(text.to_string(), reason))?;
        let d = Dim::from_expr(e)?;
        if let Some(bad) = d.symbols().into_iter().find(|s| !Dim::is_valid_symbol(s)) {
            return Err(ShapeError::BadSymbol(bad));
        }
        Ok(d)
    }

    /// `f(self, other)` as a dim: `a.combine(&b, DimExpr::add)` is `a + b`.
    pub fn combine(
        &self,
        other: &Dim,
        f: impl FnOnce(&DimExpr, &DimExpr) -> Result<DimExpr, DimError>,
    ) -> Result<Dim, ShapeError> {
        Dim::from_expr(f(&self.to_expr(), &other.to_expr())?)
    }

    /// `self + c` (`c` may be negative).
    pub fn offset(&self, c: i64) -> Result<Dim, ShapeError> {
        self.combine(&Dim::Static(0), |a, _| a.add(&DimExpr::constant(c)))
    }

    /// The symbols the dim mentions.
    pub fn symbols(&self) -> BTreeSet<String> {
        match self {
            Dim::Static(_) => BTreeSet::new(),
            Dim::Symbolic(s) => BTreeSet::from([s.clone()]),
            Dim::Expr(e) => e.symbols(),
        }
    }

    /// The dim with the symbols of `values` fixed to those sizes.
    pub fn substitute(&self, values: &BTreeMap<String, u64>) -> Result<Dim, ShapeError> {
        match self {
            Dim::Static(_) => Ok(self.clone()),
            d => Dim::from_expr(d.to_expr().substitute(values)?),
        }
    }

    /// The size under `dims`, which bind its symbols; a negative value is an error naming the
    /// dim.
    pub fn value(&self, dims: &BTreeMap<String, u64>) -> Result<u64, DimError> {
        match self {
            Dim::Static(n) => Ok(*n),
            Dim::Symbolic(s) => dims
                .get(s)
                .copied()
                .ok_or_else(|| DimError::Unbound(s.clone())),
            Dim::Expr(e) => {
                let v = e.eval(dims)?;
                u64::try_from(v).map_err(|_| DimError::NegativeDim {
                    dim: e.to_string(),
                    value: v,
                })
            }
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

/// A symbol (`"batch"`) or an expression (`"seq - 1"`); text that is neither stays a symbol of
/// that name, which [`Shape::new`] refuses.
impl From<&str> for Dim {
    fn from(text: &str) -> Self {
        if Dim::is_valid_symbol(text) {
            return Dim::Symbolic(text.to_string());
        }
        match Dim::parse(text) {
            Ok(d @ Dim::Expr(_)) => d,
            _ => Dim::Symbolic(text.to_string()),
        }
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Symbolic(name) => f.write_str(name),
            Dim::Expr(e) => write!(f, "{e}"),
        }
    }
}

/// `dim ≤ at_most`: what an op needs of the dims that its shape rule cannot prove (a slice's
/// symbolic stop within its axis), checked when a run binds them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DimBound {
    /// The dim that must stay within the bound.
    pub dim: Dim,
    /// Its upper bound.
    pub at_most: Dim,
    /// The op and operand that need it, for the error.
    pub what: String,
}

impl DimBound {
    /// A bound, unless it holds for every binding (`at_most − dim` a constant ≥ 0).
    pub fn needed(dim: &Dim, at_most: &Dim, what: String) -> Option<DimBound> {
        let slack = at_most.to_expr().sub(&dim.to_expr()).ok()?;
        if slack.as_constant().is_some_and(|c| c >= 0) {
            return None;
        }
        Some(DimBound {
            dim: dim.clone(),
            at_most: at_most.clone(),
            what,
        })
    }

    /// Whether the bound holds under `dims`; the error names both dims and their values.
    pub fn check(&self, dims: &BTreeMap<String, u64>) -> Result<(), String> {
        let value = |d: &Dim| d.value(dims).map_err(|e| format!("{}: {e}", self.what));
        let (v, limit) = (value(&self.dim)?, value(&self.at_most)?);
        if v > limit {
            return Err(format!(
                "{}: `{}` is {v}, more than `{}` = {limit}",
                self.what, self.dim, self.at_most
            ));
        }
        Ok(())
    }
}

/// The dims of a tensor, outermost first. Rank 0 is a scalar.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shape(Vec<Dim>);

/// Why a shape could not be formed or combined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The rank given, above [`MAX_RANK`].
    #[error("rank {0} exceeds the maximum rank {MAX_RANK}")]
    RankTooLarge(usize),
    /// A symbol name that is not an ASCII identifier (a letter or `_`, then letters, digits or `_`).
    #[error("`{0}` is not a valid symbolic dim name")]
    BadSymbol(String),
    /// Two shapes that do not broadcast: both shapes, then the first pair of dims that differ with
    /// neither 1.
    #[error("shapes {0} and {1} do not broadcast: dim {2} vs {3}")]
    NotBroadcastable(Shape, Shape, Dim, Dim),
    /// Text that does not parse as a dim expression, with the parser's reason.
    #[error("`{0}` is not a dim expression: {1}")]
    BadExpr(String, String),
    /// A dim that evaluates to a negative size.
    #[error("dim `{0}` is negative")]
    Negative(String),
    /// An expression dim not in canonical form, with the form it should take.
    #[error("dim `{0}` is not in canonical form (write it as `{1}`)")]
    NotCanonical(String, String),
    /// Dim arithmetic failed.
    #[error(transparent)]
    Arithmetic(#[from] DimError),
}

impl Shape {
    /// A shape from its dims, refusing ranks above [`MAX_RANK`] and malformed symbol names.
    pub fn new(dims: Vec<Dim>) -> Result<Shape, ShapeError> {
        if dims.len() > MAX_RANK {
            return Err(ShapeError::RankTooLarge(dims.len()));
        }
        for d in &dims {
            if let Some(bad) = d.symbols().into_iter().find(|s| !Dim::is_valid_symbol(s)) {
                return Err(ShapeError::BadSymbol(bad));
            }
            if let Dim::Expr(e) = d {
                let canonical = Dim::from_expr(
                    DimExpr::parse(&e.to_string())
                        .map_err(|_| ShapeError::NotCanonical(format!("{e:?}"), e.to_string()))?,
                )?;
                if canonical != *d {
                    return Err(ShapeError::NotCanonical(
                        format!("{e:?}"),
                        canonical.to_string(),
                    ));
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

    /// The shape of rank 0.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims, outermost first.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The dims, outermost first, by value.
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
