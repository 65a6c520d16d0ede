//! A tile statement as text, for the messages of both the preparation of a kernel
//! (`prepare`) and its interpretation (`interp`).
//!
//! Takes a statement of the tile IR. Guarantees: the text names the values it defines and its
//! op, as the tile IR printer spells it ([`tir_lower::tile::print::op_name`]).

use tir_lower::tile::Stmt;

/// `%3, %4 = load`, naming a statement in messages.
pub fn describe(stmt: &Stmt) -> String {
    let defs: Vec<String> = stmt.defs.iter().map(|(id, _)| id.to_string()).collect();
    if defs.is_empty() {
        tir_lower::tile::print::op_name(&stmt.op).to_string()
    } else {
        format!(
            "{} = {}",
            defs.join(", "),
            tir_lower::tile::print::op_name(&stmt.op)
        )
    }
}
