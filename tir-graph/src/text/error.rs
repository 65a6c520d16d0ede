//! The parser's error ([`ParseError`]): one line naming the line, the column where it is
//! known, and what was expected.
//!
//! Takes a position and a reason, or a graph error found while building. Guarantees: every
//! message is one line and points at the place it is about (a type mismatch at the declared
//! type).

use crate::GraphError;

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

pub(super) fn column_suffix(column: &Option<usize>) -> String {
    column.map_or(String::new(), |c| format!(", column {c}"))
}

impl ParseError {
    /// An error whose message is forced onto one line (names may hold newlines).
    pub(super) fn new(
        line: usize,
        column: Option<usize>,
        message: impl Into<String>,
    ) -> ParseError {
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

    pub(super) fn at(line: usize, column: usize, message: impl Into<String>) -> ParseError {
        ParseError::new(line, Some(column), message)
    }
}

/// A graph error on `line`; a mismatch with the declared type points at that type.
pub(super) fn graph_error(line: usize, type_col: Option<usize>, err: GraphError) -> ParseError {
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

pub(super) type Result<T> = std::result::Result<T, ParseError>;
