//! Text form (being written).
use crate::Graph;

#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

pub fn print(_graph: &Graph) -> String {
    unimplemented!("text form in progress")
}

pub fn parse(_text: &str) -> Result<Graph, ParseError> {
    unimplemented!("text form in progress")
}
