//! A program's buffers: each tensor in memory ([`Buffer`]) and where its memory comes from
//! ([`Storage`]).
//!
//! Takes nothing: the types a [`crate::Program`] lists its buffers in, kept apart so that the
//! memory plan and legality name them without depending on the program. Guarantees: plain
//! serializable data (an AOT package stores it).

use serde::{Deserialize, Serialize};
use tir_graph::op::ConstData;
use tir_graph::TensorType;

/// Where a buffer's memory comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Storage {
    /// Supplied on every run under this name.
    Input(String),
    /// A weight supplied under this name (once per executable or per run, by the backend).
    Parameter(String),
    /// Persistent across runs of one executable; zeros before the first run.
    State(String),
    /// Embedded values.
    Constant(ConstData),
    /// A graph output not stored elsewhere: allocated by the backend for each run.
    Output,
    /// An intermediate value: a region of the arena at the offset the memory plan gives.
    Arena,
}

/// One tensor in memory: row-major and contiguous, with its element type and (possibly
/// symbolic) shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffer {
    /// A name for messages: the source's name, or the graph node (`%12`) it holds.
    pub name: String,
    /// Its element type and dims (static or symbolic).
    pub ty: TensorType,
    /// Where it lives and what sets it.
    pub storage: Storage,
}
