//! Symbolic integers: the arithmetic shape rules do on dims (`batch·seq`, `seq − 1`,
//! `(h + 2p − d·(k − 1) − 1) / s + 1`, min and max), kept in a canonical form so that two
//! expressions of the same value compare equal whenever the rules below can see it.
//!
//! An expression is a sum of terms `coefficient × ∏ atoms` (a polynomial with integer
//! coefficients), where an atom is a symbol, a floor division, a min or a max. Canonical form:
//! - terms are sorted by their atoms (a sorted multiset), none has coefficient 0, the constant is
//!   the term with no atom;
//! - a floor division by a constant `c > 1` holds a numerator whose coefficients lie in `0..c`
//!   and share no factor with `c` (`(2x + 3) / 2 = x + 1 + ⌊1/2⌋ = x + 1`); a division by a
//!   constant 1, or of a multiple of its divisor, is no atom; a remainder is `a − b·⌊a / b⌋`, and a
//!   ceiling division is `−⌊−a / b⌋`;
//! - a min or max holds at least two sorted, distinct arguments, none of them a min (max) itself,
//!   no two of which differ by a constant (the smaller, or larger, is kept), at most one constant.
//!
//! Evaluation ([`DimExpr::eval`]) binds symbols to sizes; a floor division there whose numerator
//! is negative or whose divisor is not positive is an error, so that truncating and flooring
//! division (what kernels compute and what the rules assume) never disagree.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A product of atoms, sorted; empty for the constant term.
type Monomial = Vec<Atom>;

/// A symbolic integer in canonical form (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DimExpr {
    terms: Vec<(Monomial, i64)>,
}

/// A factor of a term that is not a product of others.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Atom {
    /// A named symbolic dim (`batch`, `seq`).
    Sym(String),
    /// `⌊numerator / divisor⌋`.
    FloorDiv(Box<DimExpr>, Box<DimExpr>),
    /// The least of two or more expressions.
    Min(Vec<DimExpr>),
    /// The greatest of two or more expressions.
    Max(Vec<DimExpr>),
}

/// Why dim arithmetic or evaluation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DimError {
    /// A coefficient or value left the `i64` range.
    #[error("dim arithmetic overflows i64")]
    Overflow,
    /// A floor division by zero (or a min or max of nothing), naming the expression.
    #[error("`{0}` divides by zero")]
    DivisionByZero(String),
    /// Evaluation met a symbol without a value.
    #[error("symbolic dim `{0}` is not bound")]
    Unbound(String),
    /// A dim evaluated to a negative size.
    #[error("dim `{dim}` is {value}: a dim cannot be negative")]
    NegativeDim {
        /// The dim, printed.
        dim: String,
        /// Its value.
        value: i64,
    },
    /// A floor division met a negative numerator or a divisor that is not positive.
    #[error("`{expr}` divides {numerator} by {divisor}: dims must stay non-negative")]
    NegativeDivision {
        /// The division, printed.
        expr: String,
        /// The numerator's value.
        numerator: i64,
        /// The divisor's value.
        divisor: i64,
    },
}

type Res<T> = Result<T, DimError>;

fn add_term(map: &mut BTreeMap<Monomial, i64>, mono: Monomial, k: i64) -> Res<()> {
    let slot = map.entry(mono).or_insert(0);
    *slot = slot.checked_add(k).ok_or(DimError::Overflow)?;
    Ok(())
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a as i64
}

impl DimExpr {
    fn from_map(map: BTreeMap<Monomial, i64>) -> DimExpr {
        DimExpr {
            terms: map.into_iter().filter(|(_, k)| *k != 0).collect(),
        }
    }

    /// The constant `c`.
    pub fn constant(c: i64) -> DimExpr {
        DimExpr::from_map(BTreeMap::from([(Vec::new(), c)]))
    }

    /// The symbol `name` alone.
    pub fn symbol(name: &str) -> DimExpr {
        DimExpr::atom(Atom::Sym(name.to_string()))
    }

    fn atom(a: Atom) -> DimExpr {
        DimExpr {
            terms: vec![(vec![a], 1)],
        }
    }

    /// The value, when the expression is a constant.
    pub fn as_constant(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [(m, k)] if m.is_empty() => Some(*k),
            _ => None,
        }
    }

    /// The name, when the expression is one symbol.
    pub fn as_symbol(&self) -> Option<&str> {
        match self.terms.as_slice() {
            [(m, 1)] => match m.as_slice() {
                [Atom::Sym(s)] => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// The terms, sorted: each a coefficient and its atoms (none for the constant).
    pub fn terms(&self) -> &[(Vec<Atom>, i64)] {
        &self.terms
    }

    /// Every symbol the expression mentions.
    pub fn symbols(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        self.collect_symbols(&mut out);
        out
    }

    fn collect_symbols(&self, out: &mut BTreeSet<String>) {
        for (mono, _) in &self.terms {
            for a in mono {
                match a {
                    Atom::Sym(s) => {
                        out.insert(s.clone());
                    }
                    Atom::FloorDiv(n, d) => {
                        n.collect_symbols(out);
                        d.collect_symbols(out);
                    }
                    Atom::Min(args) | Atom::Max(args) => {
                        args.iter().for_each(|e| e.collect_symbols(out))
                    }
                }
            }
        }
    }

    fn map(&self) -> BTreeMap<Monomial, i64> {
        self.terms.iter().cloned().collect()
    }

    /// `self + other`, canonical; fails only on `i64` overflow of a coefficient.
    pub fn add(&self, other: &DimExpr) -> Res<DimExpr> {
        let mut map = self.map();
        for (m, k) in &other.terms {
            add_term(&mut map, m.clone(), *k)?;
        }
        Ok(DimExpr::from_map(map))
    }

    /// `self - other`, canonical; fails only on overflow.
    pub fn sub(&self, other: &DimExpr) -> Res<DimExpr> {
        self.add(&other.scale(-1)?)
    }

    /// `c · self`; fails only on overflow.
    pub fn scale(&self, c: i64) -> Res<DimExpr> {
        let terms = self
            .terms
            .iter()
            .map(|(m, k)| Ok((m.clone(), k.checked_mul(c).ok_or(DimError::Overflow)?)))
            .collect::<Res<BTreeMap<_, _>>>()?;
        Ok(DimExpr::from_map(terms))
    }

    /// `self · other`, expanded into canonical terms; fails only on overflow.
    pub fn mul(&self, other: &DimExpr) -> Res<DimExpr> {
        let mut map = BTreeMap::new();
        for (a, x) in &self.terms {
            for (b, y) in &other.terms {
                let mut mono = a.clone();
                mono.extend(b.iter().cloned());
                mono.sort();
                add_term(&mut map, mono, x.checked_mul(*y).ok_or(DimError::Overflow)?)?;
            }
        }
        Ok(DimExpr::from_map(map))
    }

    /// `⌊self / divisor⌋`.
    pub fn floor_div(&self, divisor: &DimExpr) -> Res<DimExpr> {
        match divisor.as_constant() {
            Some(0) => Err(DimError::DivisionByZero(format!("({self}) / 0"))),
            Some(c) if c < 0 => self.scale(-1)?.floor_div(&DimExpr::constant(
                c.checked_neg().ok_or(DimError::Overflow)?,
            )),
            Some(1) => Ok(self.clone()),
            Some(c) => self.floor_div_constant(c),
            None => Ok(self.exact_quotient(divisor).unwrap_or_else(|| {
                DimExpr::atom(Atom::FloorDiv(self.clone().into(), divisor.clone().into()))
            })),
        }
    }

    /// `⌊self / c⌋` for `c > 1`: the multiples of `c` leave the division (every term is an
    /// integer), what remains has coefficients in `0..c` and shares no factor with `c`.
    fn floor_div_constant(&self, c: i64) -> Res<DimExpr> {
        let mut quotient = BTreeMap::new();
        let mut rest = BTreeMap::new();
        for (m, k) in &self.terms {
            add_term(&mut quotient, m.clone(), k.div_euclid(c))?;
            add_term(&mut rest, m.clone(), k.rem_euclid(c))?;
        }
        let quotient = DimExpr::from_map(quotient);
        let rest = DimExpr::from_map(rest);
        if rest.as_constant().is_some() {
            // 0 <= rest < c.
            return Ok(quotient);
        }
        let g = rest.terms.iter().fold(c, |g, (_, k)| gcd(g, *k));
        let rest = DimExpr::from_map(rest.terms.iter().map(|(m, k)| (m.clone(), k / g)).collect());
        let atom = DimExpr::atom(Atom::FloorDiv(rest.into(), DimExpr::constant(c / g).into()));
        quotient.add(&atom)
    }

    /// `self / divisor` when every term of `self` is a multiple of the one term of `divisor`.
    fn exact_quotient(&self, divisor: &DimExpr) -> Option<DimExpr> {
        let [(dm, dk)] = divisor.terms.as_slice() else {
            return (self == divisor).then(|| DimExpr::constant(1));
        };
        let mut out = BTreeMap::new();
        for (m, k) in &self.terms {
            if k % dk != 0 {
                return None;
            }
            let mut left = m.clone();
            for a in dm {
                let at = left.iter().position(|x| x == a)?;
                left.remove(at);
            }
            out.insert(left, k / dk);
        }
        Some(DimExpr::from_map(out))
    }

    /// `self − divisor·⌊self / divisor⌋`.
    pub fn rem(&self, divisor: &DimExpr) -> Res<DimExpr> {
        self.sub(&divisor.mul(&self.floor_div(divisor)?)?)
    }

    /// `⌈self / divisor⌉`: `⌊(self + c − 1) / c⌋` for a constant `c > 0` (its numerator is not
    /// negative where `self` is not), else `−⌊−self / divisor⌋`.
    pub fn ceil_div(&self, divisor: &DimExpr) -> Res<DimExpr> {
        match divisor.as_constant() {
            Some(c) if c > 0 => self.add(&DimExpr::constant(c - 1))?.floor_div(divisor),
            _ => self.scale(-1)?.floor_div(divisor)?.scale(-1),
        }
    }

    /// `self / divisor` when it divides exactly as polynomials (`(768·b·s − 768·b) / (12·s − 12)
    /// = 64·b`), else `None`.
    pub fn exact_div(&self, divisor: &DimExpr) -> Option<DimExpr> {
        if let Some(q) = self.exact_quotient(divisor) {
            return Some(q);
        }
        // Long division by the divisor's leading term (the term of most atoms, then the
        // largest), checked by multiplying back: a bounded search, not a proof of non-divisibility.
        let lead = |e: &DimExpr| {
            e.terms
                .iter()
                .max_by(|a, b| (a.0.len(), &a.0).cmp(&(b.0.len(), &b.0)))
                .cloned()
        };
        let (dm, dk) = lead(divisor)?;
        let lead_divisor = DimExpr {
            terms: vec![(dm, dk)],
        };
        let mut rest = self.clone();
        let mut quotient = DimExpr::constant(0);
        for _ in 0..64 {
            let Some(term) = lead(&rest) else { break };
            let step = DimExpr { terms: vec![term] }.exact_quotient(&lead_divisor)?;
            quotient = quotient.add(&step).ok()?;
            rest = rest.sub(&step.mul(divisor).ok()?).ok()?;
        }
        (quotient.mul(divisor).ok()? == *self).then_some(quotient)
    }

    /// The least of `args`: nested mins are flattened and arguments that differ by a constant keep
    /// only the smaller; fails on an empty list.
    pub fn min(args: &[DimExpr]) -> Res<DimExpr> {
        DimExpr::extremum(args, true)
    }

    /// The greatest of `args`, simplified as [`DimExpr::min`] does; fails on an empty list.
    pub fn max(args: &[DimExpr]) -> Res<DimExpr> {
        DimExpr::extremum(args, false)
    }

    fn extremum(args: &[DimExpr], is_min: bool) -> Res<DimExpr> {
        let mut flat: Vec<DimExpr> = Vec::new();
        for a in args {
            match a.terms.as_slice() {
                [(m, 1)]
                    if matches!(m.as_slice(), [Atom::Min(_)] if is_min)
                        || matches!(m.as_slice(), [Atom::Max(_)] if !is_min) =>
                {
                    let (Atom::Min(inner) | Atom::Max(inner)) = &m[0] else {
                        unreachable!("matched above")
                    };
                    flat.extend(inner.iter().cloned());
                }
                _ => flat.push(a.clone()),
            }
        }
        // Keep an argument unless another one is known to beat it (differ by a constant).
        let mut kept: Vec<DimExpr> = Vec::new();
        'next: for a in flat {
            for k in kept.iter_mut() {
                if let Some(d) = a.sub(k)?.as_constant() {
                    if (d < 0) == is_min && d != 0 {
                        *k = a;
                    }
                    continue 'next;
                }
            }
            kept.push(a);
        }
        kept.sort();
        match kept.len() {
            0 => Err(DimError::DivisionByZero("an empty min or max".into())),
            1 => Ok(kept.pop().expect("one argument")),
            _ => Ok(DimExpr::atom(if is_min {
                Atom::Min(kept)
            } else {
                Atom::Max(kept)
            })),
        }
    }

    /// The value under `dims` (see the module doc for the errors).
    pub fn eval(&self, dims: &BTreeMap<String, u64>) -> Res<i64> {
        let mut total = 0i64;
        for (mono, k) in &self.terms {
            let mut product = *k;
            for a in mono {
                let v = a.eval(dims)?;
                product = product.checked_mul(v).ok_or(DimError::Overflow)?;
            }
            total = total.checked_add(product).ok_or(DimError::Overflow)?;
        }
        Ok(total)
    }

    /// The expression with the symbols of `values` replaced by those sizes (canonical again:
    /// `floor((h + 1) / 2)` with `h = 7` is `4`).
    pub fn substitute(&self, values: &BTreeMap<String, u64>) -> Res<DimExpr> {
        let mut total = DimExpr::constant(0);
        for (mono, k) in &self.terms {
            let mut term = DimExpr::constant(*k);
            for a in mono {
                term = term.mul(&a.substitute(values)?)?;
            }
            total = total.add(&term)?;
        }
        Ok(total)
    }

    /// The one symbol not in `bound` and its value, when `self = value` fixes it: the symbol
    /// appears once, alone in a term (`k·s + rest`), every other term evaluates under `bound`,
    /// and `(value − rest) / k` is a whole size. `None` otherwise.
    pub fn solve(&self, value: u64, bound: &BTreeMap<String, u64>) -> Option<(String, u64)> {
        let mut unknown = None;
        let mut rest = 0i64;
        for (mono, k) in &self.terms {
            match mono.as_slice() {
                [Atom::Sym(s)] if !bound.contains_key(s) => {
                    if unknown.replace((s.clone(), *k)).is_some() {
                        return None;
                    }
                }
                _ => {
                    let term = DimExpr {
                        terms: vec![(mono.clone(), *k)],
                    };
                    rest = rest.checked_add(term.eval(bound).ok()?)?;
                }
            }
        }
        let (name, k) = unknown?;
        let left = i64::try_from(value).ok()?.checked_sub(rest)?;
        if k == 0
            || left % k != 0
            || left / k < 0
            || self
                .symbols()
                .iter()
                .filter(|s| !bound.contains_key(*s))
                .count()
                != 1
        {
            return None;
        }
        Some((name, (left / k) as u64))
    }

    /// Parses the form [`fmt::Display`] writes: integers, symbols, `+ - * /` (`/` is floor
    /// division, `%` its remainder), parentheses, `min(..)`, `max(..)`, `floor(..)` (of an
    /// integer: itself) and `ceil(a / b)`.
    pub fn parse(text: &str) -> Result<DimExpr, String> {
        let mut p = Parser {
            chars: text.chars().collect(),
            pos: 0,
        };
        let e = p.sum()?;
        p.skip_space();
        if p.pos != p.chars.len() {
            return Err(format!(
                "unexpected `{}` at column {} of `{text}`",
                p.chars[p.pos],
                p.pos + 1
            ));
        }
        Ok(e)
    }
}

impl Atom {
    fn substitute(&self, values: &BTreeMap<String, u64>) -> Res<DimExpr> {
        let all = |args: &[DimExpr]| -> Res<Vec<DimExpr>> {
            args.iter().map(|a| a.substitute(values)).collect()
        };
        match self {
            Atom::Sym(s) => match values.get(s) {
                Some(&v) => Ok(DimExpr::constant(
                    i64::try_from(v).map_err(|_| DimError::Overflow)?,
                )),
                None => Ok(DimExpr::symbol(s)),
            },
            Atom::FloorDiv(n, d) => n.substitute(values)?.floor_div(&d.substitute(values)?),
            Atom::Min(args) => DimExpr::min(&all(args)?),
            Atom::Max(args) => DimExpr::max(&all(args)?),
        }
    }

    fn eval(&self, dims: &BTreeMap<String, u64>) -> Res<i64> {
        match self {
            Atom::Sym(s) => dims
                .get(s)
                .ok_or_else(|| DimError::Unbound(s.clone()))
                .and_then(|&v| i64::try_from(v).map_err(|_| DimError::Overflow)),
            Atom::FloorDiv(n, d) => {
                let (numerator, divisor) = (n.eval(dims)?, d.eval(dims)?);
                if numerator < 0 || divisor <= 0 {
                    return Err(DimError::NegativeDivision {
                        expr: DimExpr::atom(self.clone()).to_string(),
                        numerator,
                        divisor,
                    });
                }
                Ok(numerator / divisor)
            }
            Atom::Min(args) => args
                .iter()
                .map(|a| a.eval(dims))
                .try_fold(i64::MAX, |m, v| Ok(m.min(v?))),
            Atom::Max(args) => args
                .iter()
                .map(|a| a.eval(dims))
                .try_fold(i64::MIN, |m, v| Ok(m.max(v?))),
        }
    }
}

impl fmt::Display for DimExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        // Terms with atoms first, the constant last: `seq - 1`.
        let ordered = self
            .terms
            .iter()
            .filter(|(m, _)| !m.is_empty())
            .chain(self.terms.iter().filter(|(m, _)| m.is_empty()));
        for (i, (mono, k)) in ordered.enumerate() {
            let (sign, mag) = if *k < 0 {
                ("-", k.unsigned_abs())
            } else {
                ("+", *k as u64)
            };
            match (i, sign) {
                (0, "-") => f.write_str("-")?,
                (0, _) => {}
                _ => write!(f, " {sign} ")?,
            }
            if mono.is_empty() {
                write!(f, "{mag}")?;
                continue;
            }
            if mag != 1 {
                write!(f, "{mag}*")?;
            }
            for (j, a) in mono.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                write!(f, "{a}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, name: &str, args: &[DimExpr]| {
            let args: Vec<String> = args.iter().map(ToString::to_string).collect();
            write!(f, "{name}({})", args.join(", "))
        };
        match self {
            Atom::Sym(s) => f.write_str(s),
            Atom::FloorDiv(n, d) => {
                let simple = |e: &DimExpr| e.as_constant().is_some() || e.as_symbol().is_some();
                let n = if simple(n) {
                    n.to_string()
                } else {
                    format!("({n})")
                };
                let d = if simple(d) {
                    d.to_string()
                } else {
                    format!("({d})")
                };
                write!(f, "floor({n} / {d})")
            }
            Atom::Min(args) => list(f, "min", args),
            Atom::Max(args) => list(f, "max", args),
        }
    }
}

/// A recursive-descent parser of [`DimExpr::parse`]'s grammar.
struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn skip_space(&mut self) {
        while self.chars.get(self.pos).is_some_and(|c| c.is_whitespace()) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected `{c}` at column {}", self.pos + 1))
        }
    }

    fn sum(&mut self) -> Result<DimExpr, String> {
        let mut e = self.product()?;
        loop {
            let op = match self.peek() {
                Some(c @ ('+' | '-')) => c,
                _ => return Ok(e),
            };
            self.pos += 1;
            let rhs = self.product()?;
            e = if op == '+' { e.add(&rhs) } else { e.sub(&rhs) }.map_err(|e| e.to_string())?;
        }
    }

    fn product(&mut self) -> Result<DimExpr, String> {
        let mut e = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(c @ ('*' | '/' | '%')) => c,
                _ => return Ok(e),
            };
            self.pos += 1;
            let rhs = self.unary()?;
            e = match op {
                '*' => e.mul(&rhs),
                '/' => e.floor_div(&rhs),
                _ => e.rem(&rhs),
            }
            .map_err(|e| e.to_string())?;
        }
    }

    fn unary(&mut self) -> Result<DimExpr, String> {
        if self.eat('-') {
            return self.unary()?.scale(-1).map_err(|e| e.to_string());
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<DimExpr, String> {
        let start = self.pos;
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                let e = self.sum()?;
                self.expect(')')?;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => {
                let begin = self.pos;
                while self.chars.get(self.pos).is_some_and(char::is_ascii_digit) {
                    self.pos += 1;
                }
                let digits: String = self.chars[begin..self.pos].iter().collect();
                digits
                    .parse::<i64>()
                    .map(DimExpr::constant)
                    .map_err(|_| format!("`{digits}` is too large"))
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let begin = self.pos;
                while self
                    .chars
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                {
                    self.pos += 1;
                }
                let name: String = self.chars[begin..self.pos].iter().collect();
                if !self.eat('(') {
                    return Ok(DimExpr::symbol(&name));
                }
                let mut args = vec![self.sum()?];
                while self.eat(',') {
                    args.push(self.sum()?);
                }
                self.expect(')')?;
                let e = match (name.as_str(), args.as_slice()) {
                    ("min", _) => DimExpr::min(&args),
                    ("max", _) => DimExpr::max(&args),
                    ("floor", [a]) => Ok(a.clone()),
                    _ => {
                        return Err(format!(
                            "unknown function `{name}` with {} arguments",
                            args.len()
                        ))
                    }
                };
                e.map_err(|e| e.to_string())
            }
            _ => Err(format!("expected a dim expression at column {}", start + 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> DimExpr {
        DimExpr::parse(s).unwrap()
    }

    fn bind(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn equal_values_compare_equal() {
        assert_eq!(e("seq + 1 - 1"), e("seq"));
        assert_eq!(e("batch*seq"), e("seq * batch"));
        assert_eq!(e("(2*x + 3) / 2"), e("x + 1"));
        assert_eq!(e("(2*x + 4) / 4"), e("(x + 2) / 2"));
        assert_eq!(e("(x*y) / y"), e("x"));
        assert_eq!(e("min(x, x + 1)"), e("x"));
        assert_eq!(e("max(x, x + 1, 3, 5)"), e("max(x + 1, 5)"));
        assert_eq!(e("min(min(a, b), c)"), e("min(c, b, a)"));
        assert_eq!(e("x % 1"), e("0"));
        assert_eq!(e("(4*x) % 2"), e("0"));
        assert_ne!(e("x / 2"), e("(x + 1) / 2"));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "seq - 1",
            "2*batch*seq + 3",
            "-seq + 4",
            "floor((h + 1) / 2) + 1",
            "floor(x / y)",
            "max(seq, 5)",
            "batch*floor((h - 3) / 2)",
            "x - 3*floor(x / 3)",
        ] {
            let parsed = e(s);
            assert_eq!(e(&parsed.to_string()), parsed, "{s} -> {parsed}");
        }
        assert_eq!(e("(h + 2 - 3) / 2 + 1").to_string(), "floor((h + 1) / 2)");
        assert_eq!(e("seq - 1").to_string(), "seq - 1");
    }

    #[test]
    fn substitution_folds_what_it_fixes() {
        let fixed = bind(&[("h", 7)]);
        assert_eq!(
            e("floor((h + 1) / 2) + b").substitute(&fixed),
            Ok(e("b + 4"))
        );
        assert_eq!(e("min(h, s) * 2").substitute(&fixed), Ok(e("2*min(s, 7)")));
        assert_eq!(e("x").substitute(&fixed), Ok(e("x")));
    }

    #[test]
    fn solving_finds_the_one_unbound_symbol_of_an_affine_dim() {
        let h = bind(&[("h", 7)]);
        assert_eq!(e("s + 1").solve(9, &h), Some(("s".into(), 8)));
        assert_eq!(e("2*s + h").solve(15, &h), Some(("s".into(), 4)));
        assert_eq!(e("2*s + h").solve(14, &h), None);
        assert_eq!(e("s - 3").solve(1, &h), Some(("s".into(), 4)));
        assert_eq!(e("s*t").solve(6, &h), None);
        assert_eq!(e("s + t").solve(6, &h), None);
        assert_eq!(e("floor(s / 2)").solve(3, &h), None);
    }

    #[test]
    fn eval_floors_and_refuses_negative_divisions() {
        let dims = bind(&[("h", 7), ("s", 2), ("x", 10)]);
        assert_eq!(e("(h + 2*1 - 1*(3 - 1) - 1) / s + 1").eval(&dims), Ok(4));
        assert_eq!(e("x % 3").eval(&dims), Ok(1));
        assert_eq!(
            DimExpr::symbol("x")
                .ceil_div(&DimExpr::constant(4))
                .unwrap()
                .eval(&dims),
            Ok(3)
        );
        assert_eq!(e("min(x, h) + max(s, 1)").eval(&dims), Ok(9));
        assert!(matches!(
            e("(h - x) / s").eval(&dims),
            Err(DimError::NegativeDivision { .. })
        ));
        assert_eq!(e("y").eval(&dims), Err(DimError::Unbound("y".into())));
        assert!(e("x").floor_div(&DimExpr::constant(0)).is_err());
        assert!(DimExpr::parse("x +").is_err());
        assert!(DimExpr::parse("foo(x)").is_err());
        assert!(DimExpr::parse("99999999999999999999").is_err());
        assert_eq!(
            e("9223372036854775807").add(&DimExpr::constant(1)),
            Err(DimError::Overflow)
        );
    }
}
