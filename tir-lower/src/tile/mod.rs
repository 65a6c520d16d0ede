//! The tile IR ([`ir`]), its printer ([`print`](mod@print)) and its verifier ([`verify`]).

pub mod ir;
pub mod print;
pub mod verify;

pub use ir::*;
