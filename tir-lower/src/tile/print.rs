//! A readable listing of tile kernels and programs, for `tirc explain --tile`, tests and diffs.
//!
//! The syntax is MLIR-like, one statement per line, with the defined values' types after a `:`
//! (`index`, `f16<64x64>`, `bool<>` for a rank-0 tile, `view<param 0, rank 2>`, `token`):
//!
//! ```text
//! kernel k0_row_sum {
//!   param 0: buffer 0, f16, shared
//!   param 1: buffer 1, f32, mutable
//!   writes param 1: whole
//!   grid(%0) {
//!     %0 = dim rows : index
//!   }
//!   body {
//!     %1 = program_id 0 : index
//!     ...
//!     %7 = make_view param 0 offset %3 shape [%2, %5] strides [%5, %4] : view<param 0, rank 2>
//!     %9 = make_token : token
//!     %10 = constant -0 : f32<1x1>
//!     %11 = for %12 = %3 to %6 step %4 iter(%13: f32<1x1> = %10) {
//!       %14 = load %7[%1, %12] pad 0 : f16<1x256>
//!       %15 = cast %14 : f32<1x256>
//!       %16 = reduce_sum %15 axis 1 : f32<1x1>
//!       %17 = add %13, %16 : f32<1x1>
//!       yield %17
//!     } : f32<1x1>
//!     %23 = irem %1, %2 : index
//!     %24 = icmp lt %23, %2 : bool<>
//!     %25 = store %22 to %8[%1, %3] token %9 : token
//!   }
//! }
//! ```
//!
//! A load of a mutable parameter names its token and defines the next one
//! (`%1, %2 = load %0[%3, %4] pad -inf token %5 : f16<2x4>, token`); index arithmetic prints as
//! `iadd`, `isub`, `imul`, `idiv`, `irem`, `imin`, `imax`, and element ops by their graph names.
//!
//! The output depends only on the kernel (no maps with random order), so it can be compared
//! with a golden string.

use super::ir::{
    Access, Block, CmpOp, IndexOp, LibraryCall, Region, SliceStart, Stmt, TileKernel, TileOp, Type,
    ValueId,
};
use std::fmt::Write;

/// How a type prints: `index`, `f16<64x64>`, `view<param 0, rank 2>`, `token`.
pub fn type_name(ty: &Type) -> String {
    match ty {
        Type::Index => "index".to_string(),
        Type::Tile { dtype, shape } => {
            let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
            format!("{dtype}<{}>", dims.join("x"))
        }
        Type::View { param, rank } => format!("view<param {param}, rank {rank}>"),
        Type::Token => "token".to_string(),
    }
}

/// The name a statement's op prints with (`load`, `iadd`, `reduce_sum`, `for`, ...).
pub fn op_name(op: &TileOp) -> &'static str {
    match op {
        TileOp::ProgramId { .. } => "program_id",
        TileOp::Dim { .. } => "dim",
        TileOp::Index { .. } => "index",
        TileOp::IndexArith { op, .. } => index_op_name(*op),
        TileOp::IndexCmp { .. } => "icmp",
        TileOp::LoadScalar { .. } => "load_scalar",
        TileOp::MakeView { .. } => "make_view",
        TileOp::MakeToken => "make_token",
        TileOp::Load { .. } => "load",
        TileOp::LoadIndexed { .. } => "load_indexed",
        TileOp::Store { .. } => "store",
        TileOp::Constant { .. } => "constant",
        TileOp::Iota { .. } => "iota",
        TileOp::Splat { .. } => "splat",
        TileOp::Unary { op, .. } => op.name(),
        TileOp::Binary { op, .. } => op.name(),
        TileOp::Select { .. } => "select",
        TileOp::Cast { .. } => "cast",
        TileOp::ApproxExp { .. } => "approx_exp",
        TileOp::Broadcast { .. } => "broadcast",
        TileOp::Reshape { .. } => "reshape",
        TileOp::Permute { .. } => "permute",
        TileOp::Reduce { op, .. } => op.name(),
        TileOp::Mma { .. } => "mma",
        TileOp::For { .. } => "for",
    }
}

fn index_op_name(op: IndexOp) -> &'static str {
    match op {
        IndexOp::Add => "iadd",
        IndexOp::Sub => "isub",
        IndexOp::Mul => "imul",
        IndexOp::Div => "idiv",
        IndexOp::Rem => "irem",
        IndexOp::Min => "imin",
        IndexOp::Max => "imax",
    }
}

fn cmp_op_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Ge => "ge",
        CmpOp::Eq => "eq",
    }
}

fn list(values: &[ValueId]) -> String {
    let names: Vec<String> = values.iter().map(ValueId::to_string).collect();
    names.join(", ")
}

/// The access as the printer writes it: `shared` or `mutable`.
pub fn access_name(access: Access) -> &'static str {
    match access {
        Access::Shared => "shared",
        Access::Mutable => "mutable",
    }
}

/// A symbolic dim's name as written: bare when it is an identifier, quoted otherwise.
pub(crate) fn symbol(name: &str) -> String {
    if tir_graph::Dim::is_valid_symbol(name) {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// `f64` the way Rust prints it (`0`, `-0`, `0.5`, `-inf`, `NaN`): exact and round-trippable.
fn number(v: f64) -> String {
    format!("{v}")
}

/// The kernel as text, ending in a newline.
pub fn print_kernel(k: &TileKernel) -> String {
    let mut out = String::new();
    write_kernel(&mut out, k, "");
    out
}

pub(crate) fn write_kernel(out: &mut String, k: &TileKernel, indent: &str) {
    let inner = format!("{indent}  ");
    let _ = writeln!(out, "{indent}kernel {} {{", k.name);
    for (i, p) in k.params.iter().enumerate() {
        let _ = writeln!(
            out,
            "{inner}param {i}: buffer {}, {}, {}",
            p.buffer,
            p.dtype,
            access_name(p.access)
        );
    }
    for w in &k.writes {
        let region = match &w.region {
            Region::Whole => "whole".to_string(),
            Region::Slice { axis, start, len } => {
                let start = match start {
                    SliceStart::Static(n) => n.to_string(),
                    SliceStart::Param(p) => format!("param {p}"),
                };
                format!("slice axis {axis} start {start} len {len}")
            }
            Region::Scattered => "scattered (unproven)".to_string(),
        };
        let _ = writeln!(out, "{inner}writes param {}: {region}", w.param);
    }
    match &k.library {
        Some(LibraryCall::MatMul {
            a, b, c, residual, ..
        }) => {
            let plus = residual.map_or(String::new(), |r| format!(" + param {r}"));
            let _ = writeln!(
                out,
                "{inner}library matmul: param {c} = param {a} @ param {b}{plus}"
            );
        }
        Some(LibraryCall::Attention(a)) => {
            let mask = if a.causal { ", causal" } else { "" };
            let _ = writeln!(
                out,
                "{inner}library attention: param {} = softmax({} · param {} @ param {}ᵀ{mask}) @ param {}",
                a.o.param, a.scale.0, a.q.param, a.k.param, a.v.param
            );
        }
        Some(LibraryCall::Conv(c)) => {
            let bias = c.bias.map_or(String::new(), |b| format!(" + param {b}"));
            let (open, close) = match c.activation {
                Some(a) => (format!("{a:?}(").to_lowercase(), ")"),
                None => (String::new(), ""),
            };
            let _ = writeln!(
                out,
                "{inner}library conv: param {} = {open}conv(param {}, param {}){bias}{close}",
                c.y, c.x, c.w
            );
        }
        Some(LibraryCall::Collective { op, input, output }) => {
            let _ = writeln!(
                out,
                "{inner}collective: param {output} = {} of param {input} over the mesh",
                crate::certificate::collective_text(op)
            );
        }
        None => {}
    }
    let _ = writeln!(out, "{inner}grid({}) {{", list(&k.grid));
    write_block(out, &k.grid_body, &format!("{inner}  "));
    let _ = writeln!(out, "{inner}}}");
    let _ = writeln!(out, "{inner}body {{");
    write_block(out, &k.body, &format!("{inner}  "));
    let _ = writeln!(out, "{inner}}}");
    let _ = writeln!(out, "{indent}}}");
}

fn write_block(out: &mut String, block: &Block, indent: &str) {
    for stmt in &block.stmts {
        write_stmt(out, stmt, indent);
    }
}

/// `%3, %4 = ` (nothing when the statement defines no value).
fn defs_prefix(stmt: &Stmt) -> String {
    if stmt.defs.is_empty() {
        return String::new();
    }
    let names: Vec<String> = stmt.defs.iter().map(|(v, _)| v.to_string()).collect();
    format!("{} = ", names.join(", "))
}

/// ` : f16<64>, token` (nothing when the statement defines no value).
fn defs_suffix(stmt: &Stmt) -> String {
    if stmt.defs.is_empty() {
        return String::new();
    }
    let types: Vec<String> = stmt.defs.iter().map(|(_, t)| type_name(t)).collect();
    format!(" : {}", types.join(", "))
}

fn write_stmt(out: &mut String, stmt: &Stmt, indent: &str) {
    let name = op_name(&stmt.op);
    let operands = match &stmt.op {
        TileOp::ProgramId { axis } => format!(" {axis}"),
        TileOp::Dim { name } => format!(" {}", symbol(name)),
        TileOp::Index { value } => format!(" {value}"),
        TileOp::IndexArith { a, b, .. } => format!(" {a}, {b}"),
        TileOp::IndexCmp { op, a, b } => format!(" {} {a}, {b}", cmp_op_name(*op)),
        TileOp::LoadScalar { param, index } => format!(" param {param}[{index}]"),
        TileOp::MakeView {
            param,
            offset,
            shape,
            strides,
        } => format!(
            " param {param} offset {offset} shape [{}] strides [{}]",
            list(shape),
            list(strides)
        ),
        TileOp::MakeToken => String::new(),
        TileOp::Load {
            view,
            coords,
            padding,
            token,
        } => {
            let token = token.map(|t| format!(" token {t}")).unwrap_or_default();
            format!(" {view}[{}] pad {}{token}", list(coords), number(*padding))
        }
        TileOp::LoadIndexed {
            view,
            indices,
            mask,
            padding,
        } => format!(
            " {view}[{}] mask {mask} pad {}",
            list(indices),
            number(*padding)
        ),
        TileOp::Store {
            view,
            coords,
            value,
            token,
        } => format!(" {value} to {view}[{}] token {token}", list(coords)),
        TileOp::Constant { value } => format!(" {}", number(*value)),
        TileOp::Iota { axis } => format!(" {axis}"),
        TileOp::ApproxExp { x, shift, factor } => {
            format!(" {x} - {shift} times {}", number(*factor))
        }
        TileOp::Splat { x }
        | TileOp::Unary { x, .. }
        | TileOp::Cast { x }
        | TileOp::Broadcast { x }
        | TileOp::Reshape { x } => format!(" {x}"),
        TileOp::Binary { a, b, .. } => format!(" {a}, {b}"),
        TileOp::Select { cond, a, b } => format!(" {cond}, {a}, {b}"),
        TileOp::Permute { x, perm } => {
            let perm: Vec<String> = perm.iter().map(usize::to_string).collect();
            format!(" {x} [{}]", perm.join(", "))
        }
        TileOp::Reduce { x, axis, .. } => format!(" {x} axis {axis}"),
        TileOp::Mma { a, b, acc } => format!(" {a}, {b}, {acc}"),
        TileOp::For {
            start,
            end,
            step,
            var,
            init,
            carried,
            body,
            yields,
        } => {
            let iter: Vec<String> = carried
                .iter()
                .zip(init)
                .map(|((c, t), i)| format!("{c}: {} = {i}", type_name(t)))
                .collect();
            // More inits than carried values (malformed) still print, so nothing is hidden.
            let extra: Vec<String> = init
                .iter()
                .skip(carried.len())
                .map(|i| format!("? = {i}"))
                .collect();
            let iter: Vec<String> = iter.into_iter().chain(extra).collect();
            let iter = if iter.is_empty() {
                String::new()
            } else {
                format!(" iter({})", iter.join(", "))
            };
            let _ = writeln!(
                out,
                "{indent}{}for {var} = {start} to {end} step {step}{iter} {{",
                defs_prefix(stmt),
            );
            let inner = format!("{indent}  ");
            write_block(out, body, &inner);
            if yields.is_empty() {
                let _ = writeln!(out, "{inner}yield");
            } else {
                let _ = writeln!(out, "{inner}yield {}", list(yields));
            }
            let _ = writeln!(out, "{indent}}}{}", defs_suffix(stmt));
            return;
        }
    };
    let _ = writeln!(
        out,
        "{indent}{}{name}{operands}{}",
        defs_prefix(stmt),
        defs_suffix(stmt)
    );
}
