//! The parser: the text form into a graph ([`parse`]), one statement per line.
//!
//! Takes any text. Guarantees: a graph that verifies, or a [`ParseError`] naming the line (and
//! column) and what was expected; values are defined once, before use; declared types must
//! equal the inferred ones; nesting is bounded ([`super::MAX_NESTING`]); never a panic.

use super::error::{graph_error, ParseError, Result};
use super::lex::{clip, lex, Tok, Token};
use super::ops::{build_op, lookup_op, suggest_op, Attrs};
use super::value::*;
use super::MAX_NESTING;
use crate::{DType, Dim, Graph, GraphError, NodeId, Op, Shape, TensorType, MAX_RANK};
use std::collections::HashMap;

/// The tokens of one line and a position in them.
pub(super) struct Line {
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
pub(super) struct Parser {
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

/// Reads a graph from its text form (see [`crate::text`]), checking it as [`Graph::add_node`] and
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
