//! What legality proves of a kernel, as data: its [`Certificate`] (the facts proven, in words)
//! and the [`LaunchCheck`]s a backend makes before each launch for what only a run knows.
//!
//! Takes nothing: these are the types [`crate::legality`] produces, a [`crate::Program`] holds
//! and backends read; kept apart from the proofs so that the program and the tile verifier name
//! them without depending on the prover. Guarantees: plain serializable data (an AOT package
//! stores it).

use serde::{Deserialize, Serialize};
use tir_graph::Dim;

/// A check a backend makes before launching a kernel, for what only the run knows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaunchCheck {
    /// `0 <= offset` and `offset + len <= size` along an axis, where `offset` is element 0 of
    /// buffer `offset_buffer` (a run-time position such as a KV-cache slot).
    SliceInBounds {
        /// The program buffer whose element 0 is the offset.
        offset_buffer: usize,
        /// The slice's length along the axis.
        len: Dim,
        /// The axis's size in the written buffer.
        size: Dim,
        /// What the offset is, for the error ("the write position of state `cache`").
        what: String,
    },
}

/// Why a kernel writes only what it owns, in plain words, and what must be checked at launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    /// The kernel's name.
    pub kernel: String,
    /// The proven obligations, one sentence each.
    pub facts: Vec<String>,
    /// What a backend checks before each launch.
    pub checks: Vec<LaunchCheck>,
}

/// How an unsafe user's kernel's certificate begins ([`crate::legality::unproven`]).
pub const UNPROVEN: &str = "unproven: declared by its author";

impl Certificate {
    /// Whether the kernel is an unsafe user's kernel, run on its author's word: an index out of
    /// range or a double write in it breaks that contract, not a rule lowering promised.
    pub fn is_unproven(&self) -> bool {
        self.facts.first().is_some_and(|f| f.starts_with(UNPROVEN))
    }
}

/// `all_reduce_sum over 2 devices`, `all_gather along axis 1 over 2 devices`.
pub fn collective_text(op: &tir_graph::Op) -> String {
    match op {
        tir_graph::Op::AllReduce { world, .. } => format!("{op} over {world} devices"),
        tir_graph::Op::AllGather { axis, world } | tir_graph::Op::ReduceScatter { axis, world } => {
            format!("{op} along axis {axis} over {world} devices")
        }
        other => other.name().to_string(),
    }
}
