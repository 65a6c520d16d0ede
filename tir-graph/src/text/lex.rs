//! The lexer: one line of the text form into tokens.
//!
//! Takes a line. Guarantees: each token with its column; a comment ends the line outside
//! strings; strings are unescaped with Rust's escapes; an unknown character or escape is a
//! [`super::ParseError`] naming it, never a panic.

use super::error::{ParseError, Result};
use super::print::quote;
use crate::Dim;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
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
pub(super) struct Token {
    pub(super) tok: Tok,
    /// 1-based column of the token's first character.
    pub(super) col: usize,
}

/// `s`, cut to a readable length for an error message.
pub(super) fn clip(s: &str) -> String {
    const MAX_CHARS: usize = 40;
    if s.chars().count() <= MAX_CHARS {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX_CHARS).collect::<String>())
    }
}

pub(super) const PUNCT: &str = "=,:[](){}?";

/// `chars[range]` as a string (empty if the range were out of bounds, which it never is).
pub(super) fn collect(chars: &[char], range: std::ops::Range<usize>) -> String {
    chars.get(range).unwrap_or_default().iter().collect()
}

pub(super) fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The tokens of one line, comments dropped.
pub(super) fn lex(line: &str, line_no: usize) -> Result<Vec<Token>> {
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
pub(super) fn lex_string(chars: &[char], open: usize, line_no: usize) -> Result<(String, usize)> {
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
pub(super) fn lex_unicode_escape(
    chars: &[char],
    i: usize,
    line_no: usize,
) -> Result<(char, usize)> {
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
