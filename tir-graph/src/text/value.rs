//! Attribute values: a small generic tree (numbers, names, strings, lists, tuples, ranges) read
//! into op attributes in context (a dim, an axis, a dtype, a pad).
//!
//! Takes a value as parsed and what it must be. Guarantees: numbers are range-checked for their
//! use; a value of the wrong form is an error naming what was expected, never a panic.

use super::error::{ParseError, Result};
use super::lex::clip;
use super::print::quote;
use super::CANONICAL_NAN;
use crate::op::{ConstData, ExactF64, ReshapeDim, SliceRange};
use crate::{DType, Dim};
use std::fmt;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;

#[derive(Clone, Debug)]
pub(super) struct Val {
    pub(super) kind: ValKind,
    pub(super) col: usize,
}

#[derive(Clone, Debug)]
pub(super) enum ValKind {
    Num(String),
    Ident(String),
    /// A quoted string: a dim expression.
    Str(String),
    /// `NaN(0x...)`.
    NanBits(u64),
    /// `?` (an inferred reshape dim).
    Infer,
    List(Vec<Val>),
    Tuple(Vec<Val>),
    /// `start:stop:step`, each part optional.
    Range {
        start: Option<Box<Val>>,
        stop: Option<Box<Val>>,
        step: Option<Box<Val>>,
    },
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ValKind::Num(s) | ValKind::Ident(s) => write!(f, "`{}`", clip(s)),
            ValKind::Str(s) => write!(f, "the string {}", quote(&clip(s))),
            ValKind::NanBits(bits) => write!(f, "`NaN({bits:#018x})`"),
            ValKind::Infer => f.write_str("`?`"),
            ValKind::List(_) => f.write_str("a list"),
            ValKind::Tuple(_) => f.write_str("a tuple"),
            ValKind::Range { .. } => f.write_str("a range"),
        }
    }
}

pub(super) fn expected(line: usize, v: &Val, what: &str) -> ParseError {
    ParseError::at(line, v.col, format!("expected {what}, found {v}"))
}

/// An integer of type `T`, as `str::parse` reads it; out-of-range values are named as such.
pub(super) fn to_int<T: FromStr<Err = ParseIntError>>(
    v: &Val,
    line: usize,
    what: &str,
) -> Result<T> {
    let ValKind::Num(s) = &v.kind else {
        return Err(expected(line, v, what));
    };
    s.parse::<T>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow => ParseError::at(
            line,
            v.col,
            format!("`{}` is too large for {what}", clip(s)),
        ),
        IntErrorKind::NegOverflow => ParseError::at(
            line,
            v.col,
            format!("`{}` is too small for {what}", clip(s)),
        ),
        _ => expected(line, v, what),
    })
}

/// A quoted string (a name or an opaque payload).
pub(super) fn to_string_val(v: &Val, line: usize, what: &str) -> Result<String> {
    match &v.kind {
        ValKind::Str(s) => Ok(s.clone()),
        _ => Err(expected(line, v, &format!("{what} (a quoted string)"))),
    }
}

pub(super) fn to_u64(v: &Val, line: usize, what: &str) -> Result<u64> {
    to_int(v, line, what)
}

pub(super) fn to_axis(v: &Val, line: usize) -> Result<usize> {
    to_int(v, line, "an axis (a non-negative integer)")
}

pub(super) fn to_bool(v: &Val, line: usize) -> Result<bool> {
    match &v.kind {
        ValKind::Ident(s) if s == "true" => Ok(true),
        ValKind::Ident(s) if s == "false" => Ok(false),
        _ => Err(expected(line, v, "`true` or `false`")),
    }
}

pub(super) fn to_f64(v: &Val, line: usize) -> Result<f64> {
    let what = "a number (or `inf`, `-inf`, `NaN`)";
    match &v.kind {
        ValKind::NanBits(bits) => Ok(f64::from_bits(*bits)),
        ValKind::Ident(s) if s == "inf" => Ok(f64::INFINITY),
        ValKind::Ident(s) if s == "NaN" => Ok(f64::from_bits(CANONICAL_NAN)),
        ValKind::Num(s) => match s.parse::<f64>() {
            Ok(x) if x.is_nan() => Ok(f64::from_bits(CANONICAL_NAN)),
            Ok(x) => Ok(x),
            Err(_) => Err(expected(line, v, what)),
        },
        _ => Err(expected(line, v, what)),
    }
}

pub(super) fn to_dim(v: &Val, line: usize) -> Result<Dim> {
    match &v.kind {
        ValKind::Num(_) => to_u64(v, line, "a dim size").map(Dim::Static),
        ValKind::Ident(s) if Dim::is_valid_symbol(s) => Ok(Dim::Symbolic(s.clone())),
        ValKind::Str(s) => crate::DimExpr::parse(s)
            .map_err(|e| ParseError::at(line, v.col, format!("dim expression {}: {e}", quote(s))))
            .and_then(|e| {
                Dim::from_expr(e).map_err(|e| ParseError::at(line, v.col, e.to_string()))
            }),
        _ => Err(expected(
            line,
            v,
            "a dim (a size, a symbol such as `batch`, or an expression such as \"seq - 1\")",
        )),
    }
}

pub(super) fn to_reshape_dim(v: &Val, line: usize) -> Result<ReshapeDim> {
    match v.kind {
        ValKind::Infer => Ok(ReshapeDim::Infer),
        _ => to_dim(v, line).map(ReshapeDim::Dim),
    }
}

pub(super) fn to_dtype(v: &Val, line: usize) -> Result<DType> {
    match &v.kind {
        ValKind::Ident(s) => s
            .parse::<DType>()
            .map_err(|e| ParseError::at(line, v.col, e.to_string())),
        _ => Err(expected(line, v, "a dtype such as `f32`")),
    }
}

pub(super) fn to_range(v: &Val, line: usize) -> Result<SliceRange> {
    let ValKind::Range { start, stop, step } = &v.kind else {
        return Err(expected(
            line,
            v,
            "a slice range such as `0:`, `2:10` or `0:128:2`",
        ));
    };
    let part = |p: &Option<Box<Val>>, what| p.as_deref().map(|p| to_u64(p, line, what)).transpose();
    Ok(SliceRange {
        start: part(start, "a slice start")?.unwrap_or(0),
        stop: stop.as_deref().map(|p| to_dim(p, line)).transpose()?,
        step: part(step, "a slice step")?.unwrap_or(1),
    })
}

pub(super) fn to_pad(v: &Val, line: usize) -> Result<(u64, u64)> {
    match &v.kind {
        ValKind::Tuple(items) => match items.as_slice() {
            [before, after] => Ok((
                to_u64(before, line, "a pad size")?,
                to_u64(after, line, "a pad size")?,
            )),
            _ => Err(expected(line, v, "a pad `(before, after)` of two sizes")),
        },
        _ => Err(expected(line, v, "a pad `(before, after)`")),
    }
}

pub(super) fn to_list<T>(
    v: &Val,
    line: usize,
    what: &str,
    item: impl Fn(&Val, usize) -> Result<T>,
) -> Result<Vec<T>> {
    match &v.kind {
        ValKind::List(items) => items.iter().map(|x| item(x, line)).collect(),
        _ => Err(expected(line, v, &format!("a list of {what} in brackets"))),
    }
}

/// A constant's values for `dtype`, each checked (ints) or rounded (floats) to it.
pub(super) fn to_const_data(v: &Val, dtype: DType, line: usize) -> Result<ConstData> {
    let ValKind::List(items) = &v.kind else {
        return Err(expected(line, v, "the constant's values in brackets"));
    };
    Ok(match dtype {
        DType::Bool => ConstData::Bool(
            items
                .iter()
                .map(|x| to_bool(x, line))
                .collect::<Result<_>>()?,
        ),
        d if d.is_int() => {
            let mut values = Vec::with_capacity(items.len());
            for x in items {
                let n: i64 = to_int(x, line, "an integer")?;
                if !ConstData::Int(vec![n]).fits(d) {
                    return Err(ParseError::at(
                        line,
                        x.col,
                        format!("`{n}` does not fit in {d}"),
                    ));
                }
                values.push(n);
            }
            ConstData::Int(values)
        }
        d => ConstData::Float(
            items
                .iter()
                .map(|x| {
                    let x = to_f64(x, line)?;
                    Ok(ExactF64(if x.is_nan() { x } else { d.const_value(x) }))
                })
                .collect::<Result<_>>()?,
        ),
    })
}
