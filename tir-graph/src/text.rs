//! The text form of a graph: one op per line with its type, for reading, diffing and writing by
//! hand. [`print()`] writes it and [`parse`] reads it back; `parse(&print(g)) == g` holds for every
//! graph, bit for bit (NaN payloads, `-0.0`, subnormals, `i64::MIN`, names with any characters).
//!
//! ```text
//! # tir graph, text form v1
//! %0 = input "x" : f16[batch, 1024]
//! %1 = parameter "w" : f16[1024, 4096]
//! %2 = matmul %0, %1 : f16[batch, 4096]
//! %3 = reduce_max %2 {axes = [1], keepdims = true} : f16[batch, 1]
//! %4 = sub %2, %3 : f16[batch, 4096]
//! %5 = reshape %4 {dims = [batch, 64, ?]} : f16[batch, 64, 64]
//! %6 = slice %5 {ranges = [0:, 0:, 0:64:2]} : f16[batch, 64, 32]
//! %7 = constant [1.0, -0.0, inf, NaN] : f16[4]
//! %8 = cast %7 {to = f32} : f32[4]
//! %9 = pad %8 {pads = [(1, 2)], value = -inf} : f32[7]
//! %10 = state "kv" : f16[8, 4096]
//! %11 = input "new" : f16[1, 4096]
//! %12 = input "pos" : i64[]
//! %13 = state_write_slice %10, %11, %12 {axis = 0} : f16[8, 4096]
//! output "y" = %6
//! output "padded" = %9
//! ```
//!
//! Written by hand, the same kind of listing may name values and leave non-source types to
//! inference:
//!
//! ```text
//! %x = input "x" : f32[batch, 4]
//! %w = parameter "w" : f32[4, 4]
//! %h = matmul %x, %w          # f32[batch, 4]
//! %y = reduce_sum %h {axes = [1]}
//! output "y" = %y
//! ```
//!
//! (A unit test checks that both listings parse, and that the first is exactly what [`print()`]
//! writes for the graph it describes.)
//!
//! # Syntax
//!
//! - A line is a definition `%NAME = OP ...`, an output `output "NAME" = %VALUE`, or blank. `#`
//!   starts a comment that runs to the end of the line (outside strings); the header line is one. Whitespace between
//!   tokens is free; a statement never spans lines.
//! - A value is named `%` followed by digits or an identifier (`%3`, `%logits`). [`print()`] names
//!   node `i` `%i`; a hand-written file may use any names, and nodes are numbered in definition
//!   order (error messages that come from the graph name nodes by that number). A value is
//!   defined once, before it is used.
//! - Sources carry their type, which is required: `input "x" : f32[4]`, likewise `parameter`
//!   and `state`; `constant [v, ...] : TYPE` lists the values row-major. Bool constants use
//!   `true`/`false`; integers must fit the dtype; floats are rounded to the dtype (as
//!   [`crate::GraphBuilder::constant`] does) and may be `inf`, `-inf`, `NaN`, or
//!   `NaN(0x7ff8000000000001)` for a NaN with other bits (this is how [`print()`] writes them).
//! - Other ops: `OP %a, %b {attr = value, ...} : TYPE`. The op name is [`Op::name`]; the
//!   attribute block is left out when the op has none; the type is optional, and when present
//!   must equal the type inference gives.
//! - A type is a dtype and a dim list: `f16[batch, 1024]`, `f32[]` (rank 0). A dim is a size, a
//!   symbol, or an expression over symbols in quotes: `f32[batch, "seq - 1", "floor(h / 2) + 1"]`
//!   (`+ - *`, `/` is floor division, `%` its remainder, `min(..)`, `max(..)`; written in the
//!   canonical form that [`crate::DimExpr`] prints, read in any form).
//! - Strings are in double quotes with Rust's escapes: `\"`, `\\`, `\n`, `\r`, `\t`, `\0`,
//!   `\u{1F600}`. [`print()`] escapes control and invisible characters.
//!
//! Attributes, as [`print()`] writes them (an attribute with a default may be left out):
//!
//! | op | attributes |
//! |----|------------|
//! | `cast` | `to = f32` |
//! | `reduce_sum` ... `reduce_prod`, `argmax`, `argmin` | `axes = [1]`, `keepdims = true` (default `false`) |
//! | `reshape` | `dims = [batch, 64, ?]` (`?`: the one inferred dim) |
//! | `permute` | `perm = [1, 0]` |
//! | `broadcast_to` | `dims = [batch, 4]` |
//! | `slice` | `ranges = [0:, 2:10, 0:128:2, 1::3, 0:seq]`: `start:stop:step` per axis (start default 0; no stop: to the end; step default 1; a stop may be a dim) |
//! | `iota` | `len = seq` (a dim; no operands: `%3 = iota {len = "seq + 1"} : i64["seq + 1"]`) |
//! | `concat`, `gather` | `axis = 1` |
//! | `pad` | `pads = [(0, 0), (1, 2)]` (before, after per axis), `value = 0.0` (default `0.0`) |
//! | `conv` | `strides = [2, 2]`, `dilations = [1, 1]`, `pads = [(1, 1), (1, 1)]` (per spatial axis; defaults 1, 1 and no padding), `groups = 1` (default 1) |
//! | `squeeze`, `unsqueeze` | `axes = [0]` |
//! | `state_write_slice` | `axis = 0`, `start = 2`; without `start`, a third operand (a scalar i32/i64) gives the offset |
//! | `all_reduce_sum`, `all_reduce_max`, `all_reduce_min` | `world = 2` (the devices taking part) |
//! | `all_gather`, `reduce_scatter` | `axis = 1`, `world = 2` |
//!
//! Every [`ParseError`] is one line naming the line (and column, where it is known) and what was
//! expected. The parser never panics: numbers are range-checked, nesting is bounded.

use crate::op::{ConstData, ExactF64, ReshapeDim, SliceRange};
use crate::{
    BinaryOp, DType, Dim, Graph, GraphError, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp,
    MAX_RANK,
};
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;

/// The first line [`print()`] writes (a comment to the parser).
pub const HEADER: &str = "# tir graph, text form v1";

/// The bits of the NaN that the text writes as plain `NaN`; any other NaN is written with its bits.
const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

/// How deeply attribute values may nest (`[(1, 2)]` is 2); bounds the parser's recursion.
const MAX_NESTING: usize = 8;

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

/// The graph in the text form: a header comment, one line per node in id order, then the outputs.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    for id in graph.node_ids() {
        let node = graph.node(id);
        let _ = write!(out, "{id} = {}", node.op.name());
        match &node.op {
            Op::Input { name } | Op::Parameter { name } | Op::State { name } => {
                let _ = write!(out, " {}", quote(name));
            }
            Op::Constant { data } => {
                let _ = write!(out, " {}", const_values(data));
            }
            op => {
                for (i, operand) in graph.operands(id).iter().enumerate() {
                    let _ = write!(out, "{}{operand}", if i == 0 { " " } else { ", " });
                }
                let attrs = attributes(op);
                if !attrs.is_empty() {
                    let _ = write!(out, " {{{}}}", attrs.join(", "));
                }
            }
        }
        let dims = node.ty.shape.dims().iter().map(dim_text);
        let _ = writeln!(out, " : {}{}", node.ty.dtype, list(dims));
    }
    for (name, node) in graph.outputs() {
        let _ = writeln!(out, "output {} = {node}", quote(name));
    }
    out
}

/// `name` in double quotes with Rust's escapes (control and invisible characters included).
fn quote(name: &str) -> String {
    format!("{name:?}")
}

/// `{:?}` round-trips every f64 except NaNs, whose sign and payload it drops: those print their
/// bits.
fn float(x: f64) -> String {
    if x.is_nan() && x.to_bits() != CANONICAL_NAN {
        format!("NaN({:#018x})", x.to_bits())
    } else {
        format!("{x:?}")
    }
}

/// A dim as the text form writes it: an expression in quotes (`"seq - 1"`).
fn dim_text(d: &Dim) -> String {
    match d {
        Dim::Expr(e) => quote(&e.to_string()),
        d => d.to_string(),
    }
}

fn list<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

fn const_values(data: &ConstData) -> String {
    match data {
        ConstData::Bool(v) => list(v),
        ConstData::Int(v) => list(v),
        ConstData::Float(v) => list(v.iter().map(|x| float(x.0))),
    }
}

fn slice_range(r: &SliceRange) -> String {
    let mut s = format!("{}:", r.start);
    if let Some(stop) = &r.stop {
        let _ = write!(s, "{}", dim_text(stop));
    }
    if r.step != 1 {
        let _ = write!(s, ":{}", r.step);
    }
    s
}

/// The op's attributes as `key = value` items, in the order the module doc lists them.
fn attributes(op: &Op) -> Vec<String> {
    match op {
        Op::Cast { to } => vec![format!("to = {to}")],
        Op::Reduce { axes, keepdims, .. } => {
            vec![
                format!("axes = {}", list(axes)),
                format!("keepdims = {keepdims}"),
            ]
        }
        Op::Reshape { dims } => {
            let dims = dims.iter().map(|d| match d {
                ReshapeDim::Dim(d) => dim_text(d),
                ReshapeDim::Infer => "?".to_string(),
            });
            vec![format!("dims = {}", list(dims))]
        }
        Op::Permute { perm } => vec![format!("perm = {}", list(perm))],
        Op::BroadcastTo { dims } => vec![format!("dims = {}", list(dims.iter().map(dim_text)))],
        Op::Iota { len } => vec![format!("len = {}", dim_text(len))],
        Op::DimValue { dim } => vec![format!("dim = {}", dim_text(dim))],
        Op::Slice { ranges } => vec![format!("ranges = {}", list(ranges.iter().map(slice_range)))],
        Op::Concat { axis } | Op::Gather { axis } => vec![format!("axis = {axis}")],
        Op::AllReduce { world, .. } => vec![format!("world = {world}")],
        Op::AllGather { axis, world } | Op::ReduceScatter { axis, world } => {
            vec![format!("axis = {axis}"), format!("world = {world}")]
        }
        Op::Pad { pads, value } => {
            let pads = pads.iter().map(|(b, a)| format!("({b}, {a})"));
            vec![
                format!("pads = {}", list(pads)),
                format!("value = {}", float(value.0)),
            ]
        }
        Op::Squeeze { axes } | Op::Unsqueeze { axes } => vec![format!("axes = {}", list(axes))],
        Op::Conv {
            strides,
            dilations,
            pads,
            groups,
        } => {
            let pads = pads.iter().map(|(b, a)| format!("({b}, {a})"));
            vec![
                format!("strides = {}", list(strides)),
                format!("dilations = {}", list(dilations)),
                format!("pads = {}", list(pads)),
                format!("groups = {groups}"),
            ]
        }
        Op::StateWriteSlice { axis, start } => {
            let mut attrs = vec![format!("axis = {axis}")];
            attrs.extend(start.map(|s| format!("start = {s}")));
            attrs
        }
        Op::Input { .. }
        | Op::Parameter { .. }
        | Op::Constant { .. }
        | Op::State { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::MatMul
        | Op::StateAssign => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why a text could not be parsed: one line, `line N: ...` or `line N, column M: ...`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}{}: {message}", column_suffix(.column))]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, in characters, where the error is known to one token.
    pub column: Option<usize>,
    /// What is wrong.
    pub message: String,
}

fn column_suffix(column: &Option<usize>) -> String {
    column.map_or(String::new(), |c| format!(", column {c}"))
}

impl ParseError {
    /// An error whose message is forced onto one line (names may hold newlines).
    fn new(line: usize, column: Option<usize>, message: impl Into<String>) -> ParseError {
        let message: String = message.into();
        let message = message
            .chars()
            .map(|c| {
                if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                    c.escape_debug().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect();
        ParseError {
            line,
            column,
            message,
        }
    }

    fn at(line: usize, column: usize, message: impl Into<String>) -> ParseError {
        ParseError::new(line, Some(column), message)
    }
}

/// A graph error on `line`; a mismatch with the declared type points at that type.
fn graph_error(line: usize, type_col: Option<usize>, err: GraphError) -> ParseError {
    match err {
        GraphError::TypeMismatch {
            node,
            op,
            stored,
            inferred,
        } => ParseError::new(
            line,
            type_col,
            format!(
                "node {node} ({op}): the line declares {stored}, but the operands give {inferred}"
            ),
        ),
        err => ParseError::new(line, None, err.to_string()),
    }
}

type Result<T> = std::result::Result<T, ParseError>;

// ---------------------------------------------------------------------------------------------
// Lexer: one line into tokens
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// `%name`, kept with its `%`.
    Value(String),
    Ident(String),
    /// A number as written (`-12`, `1e-5`, `0x7ff8...`, `-inf`); read in context.
    Num(String),
    Str(String),
    Punct(char),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Value(s) | Tok::Ident(s) | Tok::Num(s) => write!(f, "`{}`", clip(s)),
            Tok::Str(s) => write!(f, "the string {}", quote(&clip(s))),
            Tok::Punct(c) => write!(f, "`{c}`"),
        }
    }
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    /// 1-based column of the token's first character.
    col: usize,
}

/// `s`, cut to a readable length for an error message.
fn clip(s: &str) -> String {
    const MAX_CHARS: usize = 40;
    if s.chars().count() <= MAX_CHARS {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX_CHARS).collect::<String>())
    }
}

const PUNCT: &str = "=,:[](){}?";

/// `chars[range]` as a string (empty if the range were out of bounds, which it never is).
fn collect(chars: &[char], range: std::ops::Range<usize>) -> String {
    chars.get(range).unwrap_or_default().iter().collect()
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The tokens of one line, comments dropped.
fn lex(line: &str, line_no: usize) -> Result<Vec<Token>> {
    let chars: Vec<char> = line.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let mut toks = Vec::new();
    let mut i = 0;
    while let Some(c) = at(i) {
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '#' {
            break;
        }
        let start = i;
        let tok = if c == '%' {
            i += 1;
            while at(i).is_some_and(is_word_char) {
                i += 1;
            }
            let name = collect(&chars, start + 1..i);
            let digits = !name.is_empty() && name.chars().all(|c| c.is_ascii_digit());
            if !digits && !Dim::is_valid_symbol(&name) {
                return Err(ParseError::at(
                    line_no,
                    col,
                    format!(
                        "`%{}` is not a value name (expected `%` then digits or an identifier, e.g. `%3` or `%x`)",
                        clip(&name)
                    ),
                ));
            }
            Tok::Value(format!("%{name}"))
        } else if c == '"' {
            let (s, next) = lex_string(&chars, i, line_no)?;
            i = next;
            Tok::Str(s)
        } else if c.is_ascii_alphabetic() || c == '_' {
            while at(i).is_some_and(is_word_char) {
                i += 1;
            }
            Tok::Ident(collect(&chars, start..i))
        } else if c.is_ascii_digit()
            || (c == '.' && at(i + 1).is_some_and(|d| d.is_ascii_digit()))
            || ((c == '-' || c == '+') && at(i + 1).is_some_and(|d| is_word_char(d) || d == '.'))
        {
            if c == '-' || c == '+' {
                i += 1;
            }
            let numeric = at(i).is_some_and(|d| d.is_ascii_digit() || d == '.');
            while let Some(d) = at(i) {
                let exponent_sign = (d == '-' || d == '+')
                    && numeric
                    && matches!(at(i.wrapping_sub(1)), Some('e' | 'E'));
                if is_word_char(d) || d == '.' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            Tok::Num(collect(&chars, start..i))
        } else if PUNCT.contains(c) {
            i += 1;
            Tok::Punct(c)
        } else {
            return Err(ParseError::at(
                line_no,
                col,
                format!("unexpected character `{}`", c.escape_debug()),
            ));
        };
        toks.push(Token { tok, col });
    }
    Ok(toks)
}

/// The string whose opening quote is `chars[open]`, and the index after its closing quote.
fn lex_string(chars: &[char], open: usize, line_no: usize) -> Result<(String, usize)> {
    let unterminated = || {
        ParseError::at(
            line_no,
            open + 1,
            "unterminated string (the closing `\"` is missing)",
        )
    };
    let mut s = String::new();
    let mut i = open + 1;
    loop {
        match chars.get(i).copied() {
            None => return Err(unterminated()),
            Some('"') => return Ok((s, i + 1)),
            Some('\\') => {
                let escaped = match chars.get(i + 1).copied() {
                    None => return Err(unterminated()),
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('t') => '\t',
                    Some('0') => '\0',
                    Some(c @ ('\\' | '"' | '\'')) => c,
                    Some('u') => {
                        let (c, next) = lex_unicode_escape(chars, i, line_no)?;
                        s.push(c);
                        i = next;
                        continue;
                    }
                    Some(c) => {
                        return Err(ParseError::at(
                            line_no,
                            i + 1,
                            format!(
                                "unknown escape `\\{}` (expected \\\\, \\\", \\', \\n, \\r, \\t, \\0 or \\u{{...}})",
                                c.escape_debug()
                            ),
                        ))
                    }
                };
                s.push(escaped);
                i += 2;
            }
            Some(c) => {
                s.push(c);
                i += 1;
            }
        }
    }
}

/// `\u{HEX}` starting at the backslash `chars[i]`: the char and the index after the `}`.
fn lex_unicode_escape(chars: &[char], i: usize, line_no: usize) -> Result<(char, usize)> {
    let bad = || {
        ParseError::at(
            line_no,
            i + 1,
            "bad unicode escape (expected `\\u{` then 1 to 6 hex digits of a Unicode scalar value, then `}`)",
        )
    };
    if chars.get(i + 2) != Some(&'{') {
        return Err(bad());
    }
    let digits_start = i + 3;
    let mut j = digits_start;
    while chars.get(j).is_some_and(|c| c.is_ascii_hexdigit()) {
        j += 1;
    }
    if chars.get(j) != Some(&'}') || j == digits_start || j - digits_start > 6 {
        return Err(bad());
    }
    let hex = collect(chars, digits_start..j);
    let c = u32::from_str_radix(&hex, 16)
        .ok()
        .and_then(char::from_u32)
        .ok_or_else(bad)?;
    Ok((c, j + 1))
}

// ---------------------------------------------------------------------------------------------
// Attribute values: a small generic tree, read into op attributes in context
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Val {
    kind: ValKind,
    col: usize,
}

#[derive(Clone, Debug)]
enum ValKind {
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

fn expected(line: usize, v: &Val, what: &str) -> ParseError {
    ParseError::at(line, v.col, format!("expected {what}, found {v}"))
}

/// An integer of type `T`, as `str::parse` reads it; out-of-range values are named as such.
fn to_int<T: FromStr<Err = ParseIntError>>(v: &Val, line: usize, what: &str) -> Result<T> {
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

fn to_u64(v: &Val, line: usize, what: &str) -> Result<u64> {
    to_int(v, line, what)
}

fn to_axis(v: &Val, line: usize) -> Result<usize> {
    to_int(v, line, "an axis (a non-negative integer)")
}

fn to_bool(v: &Val, line: usize) -> Result<bool> {
    match &v.kind {
        ValKind::Ident(s) if s == "true" => Ok(true),
        ValKind::Ident(s) if s == "false" => Ok(false),
        _ => Err(expected(line, v, "`true` or `false`")),
    }
}

fn to_f64(v: &Val, line: usize) -> Result<f64> {
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

fn to_dim(v: &Val, line: usize) -> Result<Dim> {
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

fn to_reshape_dim(v: &Val, line: usize) -> Result<ReshapeDim> {
    match v.kind {
        ValKind::Infer => Ok(ReshapeDim::Infer),
        _ => to_dim(v, line).map(ReshapeDim::Dim),
    }
}

fn to_dtype(v: &Val, line: usize) -> Result<DType> {
    match &v.kind {
        ValKind::Ident(s) => s
            .parse::<DType>()
            .map_err(|e| ParseError::at(line, v.col, e.to_string())),
        _ => Err(expected(line, v, "a dtype such as `f32`")),
    }
}

fn to_range(v: &Val, line: usize) -> Result<SliceRange> {
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

fn to_pad(v: &Val, line: usize) -> Result<(u64, u64)> {
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

fn to_list<T>(
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
fn to_const_data(v: &Val, dtype: DType, line: usize) -> Result<ConstData> {
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

// ---------------------------------------------------------------------------------------------
// Ops by name
// ---------------------------------------------------------------------------------------------

/// One op of every kind, attributes empty; names come from [`Op::name`], never repeated here.
fn op_templates() -> impl Iterator<Item = Op> {
    [
        Op::Input {
            name: String::new(),
        },
        Op::Parameter {
            name: String::new(),
        },
        Op::Constant {
            data: ConstData::Bool(Vec::new()),
        },
        Op::State {
            name: String::new(),
        },
        Op::Cast { to: DType::F32 },
        Op::Select,
        Op::MatMul,
        Op::Reshape { dims: Vec::new() },
        Op::Permute { perm: Vec::new() },
        Op::BroadcastTo { dims: Vec::new() },
        Op::Slice { ranges: Vec::new() },
        Op::Concat { axis: 0 },
        Op::Pad {
            pads: Vec::new(),
            value: ExactF64(0.0),
        },
        Op::Squeeze { axes: Vec::new() },
        Op::Unsqueeze { axes: Vec::new() },
        Op::Gather { axis: 0 },
        Op::Conv {
            strides: Vec::new(),
            dilations: Vec::new(),
            pads: Vec::new(),
            groups: 1,
        },
        Op::StateAssign,
        Op::StateWriteSlice {
            axis: 0,
            start: None,
        },
        Op::Iota {
            len: Dim::Static(0),
        },
        Op::DimValue {
            dim: Dim::Static(0),
        },
        Op::AllGather { axis: 0, world: 1 },
        Op::ReduceScatter { axis: 0, world: 1 },
    ]
    .into_iter()
    .chain(
        [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]
            .into_iter()
            .map(|op| Op::AllReduce { op, world: 1 }),
    )
    .chain(UnaryOp::ALL.into_iter().map(Op::Unary))
    .chain(BinaryOp::ALL.into_iter().map(Op::Binary))
    .chain(ReduceOp::ALL.into_iter().map(|op| Op::Reduce {
        op,
        axes: Vec::new(),
        keepdims: false,
    }))
}

fn lookup_op(name: &str) -> Option<Op> {
    op_templates().find(|op| op.name() == name)
}

/// The op name closest to `name` by edit distance, if it is a likely typo.
fn suggest_op(name: &str) -> Option<&'static str> {
    if name.len() > 32 {
        return None;
    }
    op_templates()
        .map(|op| (edit_distance(name, op.name()), op.name()))
        .filter(|&(d, _)| d <= 2)
        .min()
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The attributes written on one line, taken one by one as the op asks for them.
struct Attrs {
    items: Vec<(String, usize, Val)>,
    asked: Vec<&'static str>,
    op: &'static str,
    op_col: usize,
    line: usize,
}

impl Attrs {
    fn optional(&mut self, key: &'static str) -> Option<Val> {
        self.asked.push(key);
        let i = self.items.iter().position(|(k, _, _)| k == key)?;
        Some(self.items.remove(i).2)
    }

    fn required(&mut self, key: &'static str) -> Result<Val> {
        self.optional(key).ok_or_else(|| {
            ParseError::at(
                self.line,
                self.op_col,
                format!("`{}` needs the attribute `{key}`", self.op),
            )
        })
    }

    /// Refuses an attribute the op did not ask for.
    fn finish(self) -> Result<()> {
        let Some((key, col, _)) = self.items.first() else {
            return Ok(());
        };
        let takes = if self.asked.is_empty() {
            "it takes none".to_string()
        } else {
            format!("it takes {}", self.asked.join(", "))
        };
        Err(ParseError::at(
            self.line,
            *col,
            format!("`{}` has no attribute `{key}` ({takes})", self.op),
        ))
    }
}

/// `template` with its attributes read from `attrs`.
fn build_op(template: Op, attrs: &mut Attrs) -> Result<Op> {
    let line = attrs.line;
    let axes = |v: Val| to_list(&v, line, "axes", to_axis);
    Ok(match template {
        Op::Cast { .. } => Op::Cast {
            to: to_dtype(&attrs.required("to")?, line)?,
        },
        Op::Reduce { op, .. } => Op::Reduce {
            op,
            axes: axes(attrs.required("axes")?)?,
            keepdims: match attrs.optional("keepdims") {
                Some(v) => to_bool(&v, line)?,
                None => false,
            },
        },
        Op::Reshape { .. } => Op::Reshape {
            dims: to_list(&attrs.required("dims")?, line, "dims", to_reshape_dim)?,
        },
        Op::Permute { .. } => Op::Permute {
            perm: to_list(&attrs.required("perm")?, line, "axes", to_axis)?,
        },
        Op::BroadcastTo { .. } => Op::BroadcastTo {
            dims: to_list(&attrs.required("dims")?, line, "dims", to_dim)?,
        },
        Op::Iota { .. } => Op::Iota {
            len: to_dim(&attrs.required("len")?, line)?,
        },
        Op::DimValue { .. } => Op::DimValue {
            dim: to_dim(&attrs.required("dim")?, line)?,
        },
        Op::Slice { .. } => Op::Slice {
            ranges: to_list(&attrs.required("ranges")?, line, "ranges", to_range)?,
        },
        Op::Concat { .. } => Op::Concat {
            axis: to_axis(&attrs.required("axis")?, line)?,
        },
        Op::Gather { .. } => Op::Gather {
            axis: to_axis(&attrs.required("axis")?, line)?,
        },
        Op::Pad { .. } => Op::Pad {
            pads: to_list(&attrs.required("pads")?, line, "pads", to_pad)?,
            value: ExactF64(match attrs.optional("value") {
                Some(v) => to_f64(&v, line)?,
                None => 0.0,
            }),
        },
        Op::Squeeze { .. } => Op::Squeeze {
            axes: axes(attrs.required("axes")?)?,
        },
        Op::Unsqueeze { .. } => Op::Unsqueeze {
            axes: axes(attrs.required("axes")?)?,
        },
        Op::Conv { .. } => conv_op(attrs)?,
        Op::AllReduce { op, .. } => Op::AllReduce {
            op,
            world: world(attrs)?,
        },
        Op::AllGather { .. } => Op::AllGather {
            axis: to_axis(&attrs.required("axis")?, line)?,
            world: world(attrs)?,
        },
        Op::ReduceScatter { .. } => Op::ReduceScatter {
            axis: to_axis(&attrs.required("axis")?, line)?,
            world: world(attrs)?,
        },
        Op::StateWriteSlice { .. } => Op::StateWriteSlice {
            axis: to_axis(&attrs.required("axis")?, line)?,
            start: match attrs.optional("start") {
                Some(v) => Some(to_u64(&v, line, "a start (a non-negative integer)")?),
                None => None,
            },
        },
        Op::Input { .. }
        | Op::Parameter { .. }
        | Op::Constant { .. }
        | Op::State { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::MatMul
        | Op::StateAssign => template,
    })
}

/// A collective's `world`: how many devices take part.
fn world(attrs: &mut Attrs) -> Result<u32> {
    to_int(
        &attrs.required("world")?,
        attrs.line,
        "a world (a device count)",
    )
}

/// A `conv` whose attributes left out take their defaults: as many spatial axes as the
/// attributes given say (the operands' rank is checked by type inference), stride and dilation
/// 1, no padding, one group.
fn conv_op(attrs: &mut Attrs) -> Result<Op> {
    let line = attrs.line;
    let sizes = |v: Option<Val>, what: &str| -> Result<Option<Vec<u64>>> {
        v.map(|v| to_list(&v, line, what, |x, l| to_u64(x, l, what)))
            .transpose()
    };
    let strides = sizes(attrs.optional("strides"), "strides")?;
    let dilations = sizes(attrs.optional("dilations"), "dilations")?;
    let pads = attrs
        .optional("pads")
        .map(|v| to_list(&v, line, "pads", to_pad))
        .transpose()?;
    let groups = match attrs.optional("groups") {
        Some(v) => to_u64(&v, line, "a group count")?,
        None => 1,
    };
    let spatial = [
        strides.as_ref().map(Vec::len),
        dilations.as_ref().map(Vec::len),
        pads.as_ref().map(Vec::len),
    ]
    .into_iter()
    .flatten()
    .next()
    .ok_or_else(|| ParseError {
        line,
        column: None,
        message: "conv needs at least one of `strides`, `dilations` and `pads` to give its \
                  spatial axes"
            .into(),
    })?;
    Ok(Op::Conv {
        strides: strides.unwrap_or_else(|| vec![1; spatial]),
        dilations: dilations.unwrap_or_else(|| vec![1; spatial]),
        pads: pads.unwrap_or_else(|| vec![(0, 0); spatial]),
        groups,
    })
}

// ---------------------------------------------------------------------------------------------
// Parser: one statement per line
// ---------------------------------------------------------------------------------------------

/// The tokens of one line and a position in them.
struct Line {
    toks: Vec<Token>,
    pos: usize,
    line: usize,
    /// The column just past the line's last character, for "found the end of the line".
    end_col: usize,
}

impl Line {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn bump(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += usize::from(t.is_some());
        t
    }

    fn col(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end_col, |t| t.col)
    }

    fn found(&self) -> String {
        self.peek()
            .map_or("the end of the line".to_string(), |t| t.to_string())
    }

    fn err_here(&self, message: impl Into<String>) -> ParseError {
        ParseError::at(self.line, self.col(), message)
    }

    fn expected(&self, what: &str) -> ParseError {
        self.err_here(format!("expected {what}, found {}", self.found()))
    }

    fn peek_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let found = self.peek_punct(c);
        self.pos += usize::from(found);
        found
    }

    fn expect_punct(&mut self, c: char, what: &str) -> Result<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn expect_end(&self, what: &str) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.expected(what)),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => Err(self.expected(what)),
        }
    }

    fn value_name(&mut self, what: &str) -> Result<(String, usize)> {
        let col = self.col();
        match self.peek() {
            Some(Tok::Value(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok((s, col))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// An attribute value, nested at most [`MAX_NESTING`] deep.
    fn value(&mut self, depth: usize) -> Result<Val> {
        if depth >= MAX_NESTING {
            return Err(self.err_here(format!("values nest more than {MAX_NESTING} deep")));
        }
        let col = self.col();
        let Some(tok) = self.bump() else {
            return Err(self.expected("a value"));
        };
        let kind = match tok.tok {
            Tok::Punct('[') => ValKind::List(self.sequence(']', depth)?),
            Tok::Punct('(') => ValKind::Tuple(self.sequence(')', depth)?),
            Tok::Punct('?') => ValKind::Infer,
            Tok::Punct(':') => self.range_rest(None)?,
            Tok::Ident(s) if s == "NaN" && self.peek_punct('(') => {
                self.pos += 1;
                let bits = self.nan_bits()?;
                self.expect_punct(')', "`)` after the NaN's bits")?;
                ValKind::NanBits(bits)
            }
            Tok::Ident(s) => ValKind::Ident(s),
            Tok::Str(s) => ValKind::Str(s),
            Tok::Num(s) => {
                let num = Val {
                    kind: ValKind::Num(s),
                    col,
                };
                if self.eat_punct(':') {
                    self.range_rest(Some(num))?
                } else {
                    num.kind
                }
            }
            other => {
                return Err(ParseError::at(
                    self.line,
                    col,
                    format!("expected a value, found {other}"),
                ))
            }
        };
        Ok(Val { kind, col })
    }

    /// Items up to `close` (the opener is taken), separated by commas; a trailing comma is fine.
    fn sequence(&mut self, close: char, depth: usize) -> Result<Vec<Val>> {
        let mut items = Vec::new();
        loop {
            if self.eat_punct(close) {
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            if self.eat_punct(',') {
                continue;
            }
            if self.eat_punct(close) {
                return Ok(items);
            }
            return Err(self.expected(&format!("`,` or `{close}`")));
        }
    }

    /// The rest of `start:stop:step` after the first colon.
    fn range_rest(&mut self, start: Option<Val>) -> Result<ValKind> {
        let num = |l: &mut Line| -> Option<Box<Val>> {
            let col = l.col();
            match l.peek() {
                Some(Tok::Num(s)) => {
                    let kind = ValKind::Num(s.clone());
                    l.pos += 1;
                    Some(Box::new(Val { kind, col }))
                }
                _ => None,
            }
        };
        // A stop may be a dim: a symbol or a quoted expression.
        let col = self.col();
        let stop = match self.peek() {
            Some(Tok::Ident(s)) if s != "NaN" => {
                let kind = ValKind::Ident(s.clone());
                self.pos += 1;
                Some(Box::new(Val { kind, col }))
            }
            Some(Tok::Str(s)) => {
                let kind = ValKind::Str(s.clone());
                self.pos += 1;
                Some(Box::new(Val { kind, col }))
            }
            _ => num(self),
        };
        let step = if self.eat_punct(':') {
            Some(num(self).ok_or_else(|| self.expected("a step after the second `:`"))?)
        } else {
            None
        };
        Ok(ValKind::Range {
            start: start.map(Box::new),
            stop,
            step,
        })
    }

    fn nan_bits(&mut self) -> Result<u64> {
        let bad = |l: &Line| l.expected("the NaN's bits in hex, e.g. `NaN(0x7ff8000000000001)`");
        let Some(Tok::Num(s)) = self.peek() else {
            return Err(bad(self));
        };
        let bits = s
            .strip_prefix("0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .filter(|b| f64::from_bits(*b).is_nan())
            .ok_or_else(|| bad(self))?;
        self.pos += 1;
        Ok(bits)
    }

    /// A type such as `f16[batch, 1024]`, and its column.
    fn tensor_type(&mut self) -> Result<(TensorType, usize)> {
        let col = self.col();
        let Some(Tok::Ident(name)) = self.peek() else {
            return Err(self.expected("a type such as `f32[batch, 4]`"));
        };
        let dtype = name
            .parse::<DType>()
            .map_err(|e| ParseError::at(self.line, col, e.to_string()))?;
        self.pos += 1;
        if !self.peek_punct('[') {
            return Err(self.expected("`[` and the dims after the dtype (rank 0 is `f32[]`)"));
        }
        let dims = self.value(0)?;
        let ValKind::List(items) = &dims.kind else {
            return Err(expected(self.line, &dims, "the dims in brackets"));
        };
        if items.len() > MAX_RANK {
            let message = crate::ShapeError::RankTooLarge(items.len()).to_string();
            return Err(ParseError::at(self.line, dims.col, message));
        }
        let dims = items
            .iter()
            .map(|d| to_dim(d, self.line))
            .collect::<Result<Vec<Dim>>>()?;
        let shape = Shape::new(dims).map_err(|e| ParseError::at(self.line, col, e.to_string()))?;
        Ok((TensorType::new(dtype, shape), col))
    }

    /// `{key = value, ...}` (the `{` not yet taken).
    fn attrs(&mut self, op: &'static str, op_col: usize) -> Result<Attrs> {
        let mut attrs = Attrs {
            items: Vec::new(),
            asked: Vec::new(),
            op,
            op_col,
            line: self.line,
        };
        if !self.eat_punct('{') {
            return Ok(attrs);
        }
        loop {
            if self.eat_punct('}') {
                return Ok(attrs);
            }
            let col = self.col();
            let Some(Tok::Ident(key)) = self.peek() else {
                return Err(self.expected("an attribute name"));
            };
            let key = key.clone();
            if attrs.items.iter().any(|(k, _, _)| *k == key) {
                return Err(self.err_here(format!("attribute `{key}` is given twice")));
            }
            self.pos += 1;
            self.expect_punct('=', &format!("`=` after `{key}`"))?;
            let value = self.value(0)?;
            attrs.items.push((key, col, value));
            if self.eat_punct(',') {
                continue;
            }
            if self.eat_punct('}') {
                return Ok(attrs);
            }
            return Err(self.expected("`,` or `}` after an attribute"));
        }
    }
}

/// The graph being read and the value names defined so far.
struct Parser {
    graph: Graph,
    /// Value name (with its `%`) → its node and the line that defined it.
    names: HashMap<String, (NodeId, usize)>,
}

impl Parser {
    fn statement(&mut self, mut l: Line) -> Result<()> {
        match l.peek() {
            Some(Tok::Value(_)) => {
                let (name, col) = l.value_name("a value name")?;
                self.definition(l, name, col)
            }
            Some(Tok::Ident(kw)) if kw == "output" => {
                l.pos += 1;
                self.output(l)
            }
            _ => Err(
                l.expected("a definition `%name = op ...` or an output `output \"name\" = %value`")
            ),
        }
    }

    fn resolve(&self, line: usize, name: &str, col: usize) -> Result<NodeId> {
        match self.names.get(name) {
            Some(&(id, _)) => Ok(id),
            None => Err(ParseError::at(
                line,
                col,
                format!("{name} is used before it is defined"),
            )),
        }
    }

    fn definition(&mut self, mut l: Line, name: String, name_col: usize) -> Result<()> {
        if let Some((_, first)) = self.names.get(&name) {
            return Err(ParseError::at(
                l.line,
                name_col,
                format!("{name} is already defined on line {first}"),
            ));
        }
        l.expect_punct('=', &format!("`=` after {name}"))?;
        let op_col = l.col();
        let Some(Tok::Ident(op_name)) = l.peek() else {
            return Err(l.expected("an op name"));
        };
        let Some(template) = lookup_op(op_name) else {
            let hint =
                suggest_op(op_name).map_or(String::new(), |s| format!(" (did you mean `{s}`?)"));
            return Err(l.err_here(format!("unknown op `{}`{hint}", clip(op_name))));
        };
        l.pos += 1;
        let op_name = template.name();
        let (op, operands, declared) = if template.is_source() {
            let (op, ty) = match template {
                Op::Constant { .. } => {
                    if !l.peek_punct('[') {
                        return Err(
                            l.expected("the constant's values in brackets, e.g. `[1.0, 2.0]`")
                        );
                    }
                    let values = l.value(0)?;
                    l.expect_punct(':', "`:` and the constant's type")?;
                    let (ty, _) = l.tensor_type()?;
                    l.expect_end("the end of the line after the type")?;
                    let data = to_const_data(&values, ty.dtype, l.line)?;
                    (Op::Constant { data }, ty)
                }
                mut op => {
                    let source_name = l.string(&format!(
                        "the {op_name}'s name in quotes, e.g. `{op_name} \"x\"`"
                    ))?;
                    if let Op::Input { name } | Op::Parameter { name } | Op::State { name } =
                        &mut op
                    {
                        *name = source_name;
                    }
                    l.expect_punct(':', &format!("`:` and the {op_name}'s type"))?;
                    let (ty, _) = l.tensor_type()?;
                    l.expect_end("the end of the line after the type")?;
                    (op, ty)
                }
            };
            (op, Vec::new(), Some((ty, None)))
        } else {
            let mut operands = Vec::new();
            if matches!(l.peek(), Some(Tok::Value(_))) {
                loop {
                    let (operand, col) = l.value_name("an operand such as `%3` after `,`")?;
                    operands.push(self.resolve(l.line, &operand, col)?);
                    if !l.eat_punct(',') {
                        break;
                    }
                }
            }
            let has_attrs = l.peek_punct('{');
            let mut attrs = l.attrs(op_name, op_col)?;
            let declared = if l.eat_punct(':') {
                let (ty, col) = l.tensor_type()?;
                l.expect_end("the end of the line after the type")?;
                Some((ty, Some(col)))
            } else if has_attrs {
                l.expect_end("`:` and the type, or the end of the line")?;
                None
            } else {
                l.expect_end("`,` and an operand, `{` and attributes, `:` and the type, or the end of the line")?;
                None
            };
            let op = build_op(template, &mut attrs)?;
            attrs.finish()?;
            (op, operands, declared)
        };
        let (declared, type_col) = match declared {
            Some((ty, col)) => (Some(ty), col),
            None => (None, None),
        };
        let id = self
            .graph
            .add_node(op, &operands, declared)
            .map_err(|e| graph_error(l.line, type_col, e))?;
        self.names.insert(name, (id, l.line));
        Ok(())
    }

    fn output(&mut self, mut l: Line) -> Result<()> {
        let name = l.string("the output's name in quotes, e.g. `output \"y\" = %3`")?;
        l.expect_punct('=', "`=` after the output's name")?;
        let (value, col) = l.value_name("the value to output, such as `%3`")?;
        l.expect_end("the end of the line after the value")?;
        let node = self.resolve(l.line, &value, col)?;
        self.graph
            .add_output(&name, node)
            .map_err(|e| graph_error(l.line, None, e))
    }
}

/// Reads a graph from its text form (see the module doc), checking it as [`Graph::add_node`] and
/// [`Graph::add_output`] do; it must compute something (an output or a state update).
pub fn parse(text: &str) -> std::result::Result<Graph, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser {
        graph: Graph::new(),
        names: HashMap::new(),
    };
    let mut last_line = 1;
    for (i, raw) in text.split('\n').enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        let toks = lex(raw, line)?;
        if toks.is_empty() {
            continue;
        }
        last_line = line;
        let end_col = raw.chars().count() + 1;
        parser.statement(Line {
            toks,
            pos: 0,
            line,
            end_col,
        })?;
    }
    let graph = parser.graph;
    if graph.is_empty() {
        return Err(ParseError::new(
            last_line,
            None,
            "the text defines no nodes (expected lines such as `%0 = input \"x\" : f32[4]` and `output \"y\" = %0`)",
        ));
    }
    if graph.outputs().is_empty() && graph.state_updates().is_empty() {
        return Err(ParseError::new(
            last_line,
            None,
            GraphError::NoResults.to_string(),
        ));
    }
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{shape, GraphBuilder};
    use proptest::prelude::*;

    fn source(g: &mut Graph, op: Op, dtype: DType, shape: Shape) -> NodeId {
        g.add_node(op, &[], Some(TensorType::new(dtype, shape)))
            .unwrap()
    }

    fn input(g: &mut Graph, name: &str, dtype: DType, shape: Shape) -> NodeId {
        let name = name.to_string();
        source(g, Op::Input { name }, dtype, shape)
    }

    fn constant(g: &mut Graph, dtype: DType, shape: Shape, data: ConstData) -> NodeId {
        source(g, Op::Constant { data }, dtype, shape)
    }

    fn floats(values: &[f64]) -> ConstData {
        ConstData::Float(values.iter().map(|&x| ExactF64(x)).collect())
    }

    fn node(g: &mut Graph, op: Op, operands: &[NodeId]) -> NodeId {
        g.add_node(op, operands, None).unwrap()
    }

    /// A graph with every op kind and the values that are hard to print exactly.
    fn every_op_graph() -> Graph {
        let mut g = Graph::new();
        let tricky = "we\"ird \\ name\n\t\r\0\u{1b}é😀\u{301}\u{202e}\u{2028} end";
        let x = input(&mut g, tricky, DType::F32, shape!["batch", 8]);
        let flags = input(&mut g, "flags", DType::Bool, shape!["batch", 8]);
        let w = source(
            &mut g,
            Op::Parameter { name: "w".into() },
            DType::F32,
            shape![8, 4],
        );
        let table = source(
            &mut g,
            Op::Parameter {
                name: "table".into(),
            },
            DType::F32,
            shape![10, 4],
        );
        let idx = input(&mut g, "idx", DType::I64, shape!["seq_len"]);
        let pos = input(&mut g, "pos", DType::I64, shape![]);
        input(&mut g, "rank8", DType::F32, shape![1, 2, 1, 2, 1, 2, 1, 2]);
        input(&mut g, "empty", DType::U8, shape![0, "batch"]);
        let state = |g: &mut Graph, name: &str, dtype, shape| {
            source(g, Op::State { name: name.into() }, dtype, shape)
        };
        let kv = state(&mut g, "kv", DType::F16, shape![4, 16]);
        let kv2 = state(&mut g, "kv2", DType::F16, shape![8, 16]);
        let s2 = state(&mut g, "s2", DType::F32, shape![2, 3]);
        let new2 = input(&mut g, "new2", DType::F16, shape![2, 16]);
        let new1 = input(&mut g, "new1", DType::F16, shape![1, 16]);

        let negative_nan = f64::from_bits(0xfff8_0000_0000_0000);
        let f32_subnormal = f64::from(f32::from_bits(1));
        let c_f32 = constant(
            &mut g,
            DType::F32,
            shape![2, 3],
            floats(&[
                f64::NAN,
                negative_nan,
                -0.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f32_subnormal,
            ]),
        );
        let f64_values = [
            5e-324,
            -f64::MAX,
            0.1,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::MIN_POSITIVE,
            1e300,
            -1.5e-7,
        ];
        constant(&mut g, DType::F64, shape![7], floats(&f64_values));
        let f16_nan = f64::from(half::f16::from_bits(0xfe01));
        constant(
            &mut g,
            DType::F16,
            shape![3],
            floats(&[65504.0, 5.960464477539063e-8, f16_nan]),
        );
        constant(&mut g, DType::BF16, shape![], floats(&[1.5]));
        constant(&mut g, DType::F32, shape![0, 3], floats(&[]));
        constant(
            &mut g,
            DType::I64,
            shape![3],
            ConstData::Int(vec![i64::MIN, i64::MAX, 0]),
        );
        constant(
            &mut g,
            DType::I8,
            shape![2],
            ConstData::Int(vec![-128, 127]),
        );
        constant(&mut g, DType::U8, shape![2], ConstData::Int(vec![0, 255]));
        constant(
            &mut g,
            DType::I32,
            shape![],
            ConstData::Int(vec![i32::MIN.into()]),
        );
        let bools = ConstData::Bool(vec![true, false, false, true]);
        constant(&mut g, DType::Bool, shape![2, 2], bools);
        let vec4 = constant(
            &mut g,
            DType::F32,
            shape![4],
            floats(&[1.0, 2.5, -3.0, 0.0]),
        );

        // After the nodes the expected lines below name by id.
        let bits = input(&mut g, "bits", DType::U32, shape!["batch", 8]);
        for u in UnaryOp::ALL {
            let v = match u {
                UnaryOp::Not => flags,
                UnaryOp::BitNot => bits,
                _ => x,
            };
            node(&mut g, Op::Unary(u), &[v]);
        }
        for b in BinaryOp::ALL {
            let v = match b {
                BinaryOp::And | BinaryOp::Or => flags,
                b if b.is_bitwise() => bits,
                _ => x,
            };
            node(&mut g, Op::Binary(b), &[v, v]);
        }
        node(&mut g, Op::Cast { to: DType::F16 }, &[x]);
        node(&mut g, Op::Select, &[flags, x, x]);
        for (i, op) in ReduceOp::ALL.into_iter().enumerate() {
            let axes = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
                vec![1]
            } else {
                vec![1, 0]
            };
            node(
                &mut g,
                Op::Reduce {
                    op,
                    axes,
                    keepdims: i % 2 == 0,
                },
                &[x],
            );
        }
        node(&mut g, Op::MatMul, &[x, w]);
        let dims = vec!["batch".into(), 2.into(), ReshapeDim::Infer];
        node(&mut g, Op::Reshape { dims }, &[x]);
        node(&mut g, Op::Permute { perm: vec![1, 0] }, &[x]);
        let dims = vec!["batch".into(), 3.into(), 4.into()];
        node(&mut g, Op::BroadcastTo { dims }, &[vec4]);
        let stepped = SliceRange {
            start: 1,
            stop: None,
            step: 3,
        };
        let s1 = node(
            &mut g,
            Op::Slice {
                ranges: vec![SliceRange::FULL, stepped],
            },
            &[x],
        );
        let s2_ = node(
            &mut g,
            Op::Slice {
                ranges: vec![SliceRange::FULL, SliceRange::new(2, 6, 1)],
            },
            &[x],
        );
        node(&mut g, Op::Concat { axis: 1 }, &[x, s1, s2_, x, s1, s2_]);
        let pads = vec![(0, 0), (1, 2)];
        node(
            &mut g,
            Op::Pad {
                pads: pads.clone(),
                value: ExactF64(-0.0),
            },
            &[x],
        );
        node(
            &mut g,
            Op::Pad {
                pads,
                value: ExactF64(negative_nan),
            },
            &[x],
        );
        let u = node(&mut g, Op::Unsqueeze { axes: vec![0, 2] }, &[x]);
        node(&mut g, Op::Squeeze { axes: vec![2, 0] }, &[u]);
        node(&mut g, Op::Gather { axis: 0 }, &[table, idx]);
        let image = input(&mut g, "image", DType::F32, shape!["batch", 4, 9, 7]);
        let filter = Op::Parameter {
            name: "filter".into(),
        };
        let filter = source(&mut g, filter, DType::F32, shape![6, 2, 3, 2]);
        let conv = Op::Conv {
            strides: vec![2, 1],
            dilations: vec![1, 3],
            pads: vec![(1, 0), (2, 2)],
            groups: 2,
        };
        node(&mut g, conv, &[image, filter]);
        node(&mut g, Op::StateAssign, &[s2, c_f32]);
        node(
            &mut g,
            Op::StateWriteSlice {
                axis: 0,
                start: Some(2),
            },
            &[kv, new2],
        );
        node(
            &mut g,
            Op::StateWriteSlice {
                axis: 0,
                start: None,
            },
            &[kv2, new1, pos],
        );
        // The value of an expression dim, an iota of a symbolic length and a slice to an
        // expression stop.
        let dim = Dim::parse("2*seq_len - 1").unwrap();
        node(&mut g, Op::DimValue { dim }, &[]);
        let len = Dim::parse("seq_len + 2").unwrap();
        let positions = node(&mut g, Op::Iota { len }, &[]);
        let stop = Some(Dim::parse("seq_len + 1").unwrap());
        let ranges = vec![SliceRange {
            start: 1,
            stop,
            step: 2,
        }];
        node(&mut g, Op::Slice { ranges }, &[positions]);
        // The collectives, one of each name, over a symbolic axis and a static one.
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            node(&mut g, Op::AllReduce { op, world: 2 }, &[x]);
        }
        node(&mut g, Op::AllGather { axis: 0, world: 3 }, &[x]);
        node(&mut g, Op::ReduceScatter { axis: 1, world: 4 }, &[x]);

        let last = NodeId(g.len() as u32 - 1);
        g.add_output("y", s1).unwrap();
        g.add_output("out \"1\"\n\\ ünï 😀", u).unwrap();
        g.add_output("last", last).unwrap();
        g
    }

    #[test]
    fn every_op_round_trips_exactly() {
        let g = every_op_graph();
        let counts = g.op_counts();
        for op in op_templates() {
            assert!(
                counts.contains_key(op.name()),
                "no {} in the test graph",
                op.name()
            );
        }
        let text = print(&g);
        let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, g, "{text}");
        assert_eq!(print(&back), text);
        for line in [
            "# tir graph, text form v1",
            r#"%0 = input "we\"ird \\ name\n\t\r\0\u{1b}é😀\u{301}\u{202e}\u{2028} end" : f32[batch, 8]"#,
            "%6 = input \"rank8\" : f32[1, 2, 1, 2, 1, 2, 1, 2]",
            "%7 = input \"empty\" : u8[0, batch]",
            "%5 = input \"pos\" : i64[]",
            "= constant [NaN, NaN(0xfff8000000000000), -0.0, inf, -inf, 1.401298464324817e-45] : f32[2, 3]",
            "= constant [5e-324, -1.7976931348623157e308, 0.1, NaN(0x7ff0000000000001), 2.2250738585072014e-308, 1e300, -1.5e-7] : f64[7]",
            "= constant [-9223372036854775808, 9223372036854775807, 0] : i64[3]",
            "= constant [] : f32[0, 3]",
            "= constant [true, false, false, true] : bool[2, 2]",
            "= gelu_erf %0 : f32[batch, 8]",
            "= not %1 : bool[batch, 8]",
            "= reduce_sum %0 {axes = [1, 0], keepdims = true} : f32[1, 1]",
            "= argmax %0 {axes = [1], keepdims = false} : i64[batch]",
            "= cast %0 {to = f16} : f16[batch, 8]",
            "= select %1, %0, %0 : f32[batch, 8]",
            "= reshape %0 {dims = [batch, 2, ?]} : f32[batch, 2, 4]",
            "= broadcast_to %23 {dims = [batch, 3, 4]} : f32[batch, 3, 4]",
            "= slice %0 {ranges = [0:, 1::3]} : f32[batch, 3]",
            "= slice %0 {ranges = [0:, 2:6]} : f32[batch, 4]",
            "= pad %0 {pads = [(0, 0), (1, 2)], value = -0.0} : f32[batch, 11]",
            "= state_write_slice %8, %11 {axis = 0, start = 2} : f16[4, 16]",
            "= state_write_slice %9, %12, %5 {axis = 0} : f16[8, 16]",
            "output \"out \\\"1\\\"\\n\\\\ ünï 😀\" = %",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
        assert!(text.lines().all(|l| !l.contains('\u{2028}')));
    }

    #[test]
    fn hand_written_names_comments_and_omitted_types() {
        let text =
            "\r\n# a hand-written graph\n\n  %x = input \"x\":f32[batch,4]   # the input\r\n\
                    %w\t=  parameter \"w\" : f32[4, 4]\n\
                    %h = matmul %x, %w\n\
                    %7 = relu %h : f32[batch, 4]\n\
                    %h2 = reduce_sum %7 {axes = [1,],}\n\
                    %s = slice %7 {ranges = [:, 1:3]}\n\
                    %p = pad %7 {pads = [(0, 0), (1, 1)]}\n\
                    %c = constant [0.1, 1, -inf, NaN] : f16[4]\n\
                    output \"y\" = %7\noutput \"s\" = %h2\n";
        let g = GraphBuilder::new();
        let x = g.input("x", DType::F32, shape!["batch", 4]).unwrap();
        let w = g.parameter("w", DType::F32, shape![4, 4]).unwrap();
        let y = x.matmul(&w).unwrap().relu().unwrap();
        let s = y.sum(&[1], false).unwrap();
        y.slice(&[SliceRange::FULL, SliceRange::new(1, 3, 1)])
            .unwrap();
        y.pad(&[(0, 0), (1, 1)], 0.0).unwrap();
        g.constant(
            DType::F16,
            shape![4],
            &[0.1, 1.0, f64::NEG_INFINITY, f64::NAN],
        )
        .unwrap();
        g.output("y", &y).unwrap();
        g.output("s", &s).unwrap();
        let expected = g.finish().unwrap();
        let parsed = parse(text).unwrap();
        assert_eq!(parsed, expected, "{}", print(&parsed));
        assert!(print(&parsed).contains("constant [0.0999755859375, 1.0, -inf, NaN] : f16[4]"));
    }

    /// The ```text blocks of the module doc.
    fn doc_listings() -> Vec<String> {
        let doc: String = include_str!("text.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| format!("{}\n", l.trim_start_matches("//!").trim_start_matches(' ')))
            .collect();
        doc.split("```text\n")
            .skip(1)
            .map(|block| block.split("```").next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_module_doc_listings_are_true() {
        let listings = doc_listings();
        assert_eq!(listings.len(), 2);
        let printed = parse(&listings[0]).unwrap();
        assert_eq!(print(&printed), listings[0]);
        let hand_written = parse(&listings[1]).unwrap();
        assert_eq!(hand_written.len(), 4);
    }

    #[test]
    fn state_updates_alone_are_results() {
        let text = "%0 = state \"s\" : f32[2]\n%1 = exp %0\n%2 = state_assign %0, %1\n";
        let g = parse(text).unwrap();
        assert_eq!(g.state_updates(), vec![NodeId(2)]);
        assert!(g.outputs().is_empty());
    }

    #[test]
    fn malformed_inputs_give_one_line_errors() {
        let head = "%0 = input \"x\" : f16[2]\n%1 = input \"i\" : f32[2]\n";
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "line 1: the text defines no nodes (expected lines such as `%0 = input \"x\" : f32[4]` and `output \"y\" = %0`)"),
            ("# only a comment\n\n".into(), "line 1: the text defines no nodes (expected lines such as `%0 = input \"x\" : f32[4]` and `output \"y\" = %0`)"),
            (format!("{head}%2 = matmull %0, %0\n"), "line 3, column 6: unknown op `matmull` (did you mean `matmul`?)"),
            ("%0 = frobnicate : f32[2]\n".into(), "line 1, column 6: unknown op `frobnicate`"),
            ("%0 = input \"x\" : f8[2]\n".into(), "line 1, column 18: unknown dtype `f8` (expected one of bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, f8e4m3, f8e5m2)"),
            (format!("{head}%2 = add %0\noutput \"y\" = %2\n"), "line 3: node %2: add(f16[2]): takes 2 operand(s), got 1"),
            (format!("{head}%2 = add %0, \n"), "line 3, column 14: expected an operand such as `%3` after `,`, found the end of the line"),
            (format!("{head}%2 = exp %9\n"), "line 3, column 10: %9 is used before it is defined"),
            (format!("{head}output \"y\" = %x\n"), "line 3, column 14: %x is used before it is defined"),
            (format!("{head}%1 = exp %0\n"), "line 3, column 1: %1 is already defined on line 2"),
            (format!("{head}%2 = add %0, %1\n"), "line 3: node %2: add(f16[2], f32[2]): dtypes f16 and f32 differ (cast one first)"),
            (format!("{head}%2 = exp %0 : f32[2]\n"), "line 3, column 15: node %2 (exp): the line declares f32[2], but the operands give f16[2]"),
            (format!("{head}%2 = exp %0 : f16[2] junk\n"), "line 3, column 22: expected the end of the line after the type, found `junk`"),
            (format!("{head}%2 = exp %0 %1\n"), "line 3, column 13: expected `,` and an operand, `{` and attributes, `:` and the type, or the end of the line, found `%1`"),
            ("%0 = input \"x : f32[2]\n".into(), "line 1, column 12: unterminated string (the closing `\"` is missing)"),
            ("%0 = input \"x\\q\" : f32[2]\n".into(), "line 1, column 14: unknown escape `\\q` (expected \\\\, \\\", \\', \\n, \\r, \\t, \\0 or \\u{...})"),
            ("%0 = input \"x\" : f32[1, 1, 1, 1, 1, 1, 1, 1, 1]\n".into(), "line 1, column 21: rank 9 exceeds the maximum rank 8"),
            ("%0 = input \"x\" : f32[99999999999999999999]\n".into(), "line 1, column 22: `99999999999999999999` is too large for a dim size"),
            (format!("{head}%2 = reduce_sum %0 {{axes = [18446744073709551616]}}\n"), "line 3, column 29: `18446744073709551616` is too large for an axis (a non-negative integer)"),
            ("%0 = constant [300] : i8[1]\n".into(), "line 1, column 16: `300` does not fit in i8"),
            ("%0 = constant [9223372036854775808] : i64[1]\n".into(), "line 1, column 16: `9223372036854775808` is too large for an integer"),
            ("%0 = constant [1.0, 2.0] : f32[3]\noutput \"y\" = %0\n".into(), "line 1: node %0: constant(): declared f32[3]: has 2 values for 3 elements"),
            ("%0 = input \"x\" : f32[2]\n".into(), "line 1: the graph computes nothing: it has no outputs and no state updates"),
            ("%0 = input \"x\"\n".into(), "line 1, column 15: expected `:` and the input's type, found the end of the line"),
            ("%0 = input x : f32[2]\n".into(), "line 1, column 12: expected the input's name in quotes, e.g. `input \"x\"`, found `x`"),
            (format!("{head}%2 = reduce_sum %0\n"), "line 3, column 6: `reduce_sum` needs the attribute `axes`"),
            (format!("{head}%2 = reduce_sum %0 {{axes = [0], axis = 0}}\n"), "line 3, column 33: `reduce_sum` has no attribute `axis` (it takes axes, keepdims)"),
            (format!("{head}%2 = exp %0 {{axis = 0}}\n"), "line 3, column 14: `exp` has no attribute `axis` (it takes none)"),
            (format!("{head}%2 = concat %0 {{axis = 0, axis = 1}}\n"), "line 3, column 27: attribute `axis` is given twice"),
            (format!("{head}%2 = cast %0 {{to = \"f32\"}}\n"), "line 3, column 20: expected a dtype such as `f32`, found the string \"f32\""),
            (format!("{head}%2 = cast %0 {{to = f33}}\n"), "line 3, column 20: unknown dtype `f33` (expected one of bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, f8e4m3, f8e5m2)"),
            (format!("{head}%2 = slice %0 {{ranges = [0:1:]}}\n"), "line 3, column 30: expected a step after the second `:`, found `]`"),
            (format!("{head}%2 = reduce_sum %0 {{axes = {}}}\n", "[".repeat(20)), "line 3, column 36: values nest more than 8 deep"),
            ("%0 = input \"x\" : f32[2] $\n".into(), "line 1, column 25: unexpected character `$`"),
            ("%0 = input \"x\" : f32[2]\nhello\n".into(), "line 2, column 1: expected a definition `%name = op ...` or an output `output \"name\" = %value`, found `hello`"),
            ("%0 = input \"x\" : f32[2]\noutput \"\" = %0\n".into(), "line 2: output name is empty"),
            ("%0 = input \"a\nb\" : f32[2]\n".into(), "line 1, column 12: unterminated string (the closing `\"` is missing)"),
            ("%0 = input \"a\\nb\" : f32[2]\n%1 = input \"a\\nb\" : f32[2]\noutput \"y\" = %0\n".into(), "line 2: source name `a\\nb` is used by %0 (input) and %1 (input)"),
            ("%1x = input \"x\" : f32[2]\n".into(), "line 1, column 1: `%1x` is not a value name (expected `%` then digits or an identifier, e.g. `%3` or `%x`)"),
            ("%0 = constant [NaN(0x1)] : f64[1]\n".into(), "line 1, column 20: expected the NaN's bits in hex, e.g. `NaN(0x7ff8000000000001)`, found `0x1`"),
            ("%0 = state \"s\" : f32[2]\n%1 = state_assign %0, %0\n%2 = state_assign %0, %0\n".into(), "line 3: state `s` is written by %1 and %2; a state is written at most once per run"),
        ];
        let mut wrong = Vec::new();
        for (text, want) in cases {
            let shown = parse(&text).expect_err(&text).to_string();
            assert_eq!(shown.lines().count(), 1);
            if shown != want {
                wrong.push(format!("input {text:?}\n  got  {shown}\n  want {want}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn long_tokens_are_clipped_in_messages() {
        let op = "x".repeat(1000);
        let err = parse(&format!("%0 = {op} %1\n")).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("line 1, column 6: unknown op `{}…`", "x".repeat(40))
        );
    }

    #[test]
    fn deep_nesting_and_long_lines_do_not_overflow() {
        let text = format!("%0 = input \"x\" : f32{}\n", "[".repeat(100_000));
        assert!(parse(&text)
            .unwrap_err()
            .to_string()
            .contains("nest more than"));
        let text = format!("%0 = constant [{}] : f32[1]\n", "1.0, ".repeat(100_000));
        assert!(parse(&text).is_err());
    }

    #[test]
    fn op_names_are_unique_and_found() {
        let names: Vec<&str> = op_templates().map(|op| op.name()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        for name in names {
            assert_eq!(lookup_op(name).map(|op| op.name()), Some(name));
        }
    }

    /// Applies `edits` (position, kind, char) to `text`.
    fn mutate(text: &str, edits: &[(usize, u8, char)]) -> String {
        const PIECES: [&str; 14] = [
            "%",
            "\"",
            "\\",
            "[",
            "]",
            "{",
            "}",
            "(",
            ":",
            "?",
            "NaN(",
            "-",
            "99999999999999999999999",
            "\\u{",
        ];
        let mut chars: Vec<char> = text.chars().collect();
        for &(pos, kind, c) in edits {
            let n = chars.len().max(1);
            let i = pos % n;
            match kind % 6 {
                0 if !chars.is_empty() => {
                    chars.remove(i);
                }
                1 => chars.insert(i.min(chars.len()), c),
                2 if !chars.is_empty() => chars[i] = c,
                3 => {
                    let piece = PIECES[usize::from(kind) % PIECES.len()];
                    for (k, p) in piece.chars().enumerate() {
                        chars.insert((i + k).min(chars.len()), p);
                    }
                }
                4 => {
                    let end = (i + usize::from(kind) * 7).min(chars.len());
                    let copy: Vec<char> = chars[i.min(end)..end].to_vec();
                    chars.splice(end..end, copy);
                }
                _ => chars.truncate(i),
            }
        }
        chars.into_iter().collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn parse_never_panics_on_mutated_text(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>(), any::<char>()), 1..6)
        ) {
            let text = mutate(&print(&every_op_graph()), &edits);
            match parse(&text) {
                Ok(g) => prop_assert_eq!(parse(&print(&g)).ok(), Some(g)),
                Err(e) => {
                    let shown = e.to_string();
                    prop_assert_eq!(shown.lines().count(), 1);
                    prop_assert!(shown.starts_with("line "));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn any_f64_bits_round_trip(bits in any::<u64>(), pad in any::<u64>()) {
            let mut g = Graph::new();
            let x = input(&mut g, "x", DType::F64, shape![1]);
            let c = constant(&mut g, DType::F64, shape![1], floats(&[f64::from_bits(bits)]));
            let value = ExactF64(f64::from_bits(pad));
            let p = node(&mut g, Op::Pad { pads: vec![(1, 0)], value }, &[x]);
            g.add_output("c", c).unwrap();
            g.add_output("p", p).unwrap();
            prop_assert_eq!(parse(&print(&g)).unwrap(), g);
        }

        #[test]
        fn any_name_round_trips(name in "\\PC*|.*", out in any::<String>()) {
            prop_assume!(!name.is_empty() && !out.is_empty());
            let mut g = Graph::new();
            let x = input(&mut g, &name, DType::F32, shape![]);
            g.add_output(&out, x).unwrap();
            prop_assert_eq!(parse(&print(&g)).unwrap(), g);
        }
    }
}
