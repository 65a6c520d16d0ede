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
//! - Other ops: `OP %a, %b {attr = value, ...} : TYPE`. The op name is
//!   [`Op::name`](crate::Op::name); the attribute block is left out when the op has none; the
//!   type is optional, and when present must equal the type inference gives.
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

mod error;
mod lex;
pub(crate) mod ops;
mod parse;
mod print;
mod value;

pub use error::ParseError;
pub use parse::parse;
pub use print::print;

/// The first line [`print()`] writes (a comment to the parser).
pub const HEADER: &str = "# tir graph, text form v1";

/// The bits of the NaN that the text writes as plain `NaN`; any other NaN is written with its bits.
const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

/// How deeply attribute values may nest (`[(1, 2)]` is 2); bounds the parser's recursion.
const MAX_NESTING: usize = 8;

#[cfg(test)]
mod tests {

    use super::ops::*;
    use super::print::*;

    use super::*;
    use crate::op::{ConstData, ExactF64, ReshapeDim, SliceRange};
    use crate::{BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, Shape, TensorType, UnaryOp};

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
        // A user's kernel: its whole declaration travels in the text.
        let scalar = input(&mut g, "scalar", DType::F32, Shape::scalar());
        let custom = custom_template().expect("the template kernel is valid");
        node(&mut g, custom, &[scalar]);

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
        let doc: String = include_str!("mod.rs")
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
