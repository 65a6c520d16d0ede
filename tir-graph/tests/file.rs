//! The `.tir` file refuses every bad file with the right one-line error (never a panic, never a
//! huge allocation), and `file::write` is atomic.

use proptest::prelude::*;
use std::path::Path;
use tir_graph::file::{
    self, FileError, FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_BODY_LEN, OLDEST_READ_VERSION,
};
use tir_graph::op::ConstData;
use tir_graph::testing::{dir_names, largest_allocation, RecordingAllocator};
use tir_graph::{
    shape, DType, Graph, GraphBuilder, GraphData, NodeData, NodeId, Op, TensorType, UnaryOp,
};

#[global_allocator]
static ALLOCATOR: RecordingAllocator = RecordingAllocator;

// ---- helpers ----

/// A small real graph: symbolic dims, a parameter, a state written by slice, two outputs.
fn sample_graph() -> Graph {
    let g = GraphBuilder::new();
    let x = g.input("x", DType::F32, shape!["batch", 4]).unwrap();
    let w = g.parameter("w", DType::F32, shape![4, 3]).unwrap();
    let y = x.matmul(&w).unwrap().relu().unwrap();
    let cache = g.state("cache", DType::F32, shape![8, 3]).unwrap();
    let row = g.input("row", DType::F32, shape![1, 3]).unwrap();
    let pos = g.input("pos", DType::I64, shape![]).unwrap();
    cache.write_slice_at(&row, 0, &pos).unwrap();
    g.output("y", &y).unwrap();
    g.output("w", &w).unwrap();
    g.finish().unwrap()
}

fn sample_bytes() -> Vec<u8> {
    file::encode(&sample_graph())
}

/// A file with the given header fields in front of `body`.
fn with_header(version: u32, len: u64, checksum: u64, body: &[u8]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&checksum.to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// `body` behind a valid header (current version, right length and checksum).
fn wrap(body: &[u8]) -> Vec<u8> {
    with_header(
        FORMAT_VERSION,
        body.len() as u64,
        file::checksum(body),
        body,
    )
}

/// The bincode body of `data`, as `file::encode` would write it.
fn body_of(data: &GraphData) -> Vec<u8> {
    bincode::serde::encode_to_vec(data, bincode::config::standard()).unwrap()
}

/// The error `decode` gives for `bytes`; fails the test if it accepts them.
fn refusal(bytes: &[u8]) -> FileError {
    match file::decode(bytes) {
        Ok(g) => panic!("accepted a bad file as {g:?}"),
        Err(e) => e,
    }
}

fn message(bytes: &[u8]) -> String {
    let msg = refusal(bytes).to_string();
    assert!(!msg.contains('\n'), "not one line: {msg:?}");
    msg
}

fn f32_ty(dims: &[u64]) -> TensorType {
    TensorType::new(DType::F32, tir_graph::Shape::of(dims))
}

fn node(op: Op, ty: TensorType, operands: &[u32]) -> NodeData {
    NodeData {
        op,
        ty,
        operands: operands.iter().map(|&i| NodeId(i)).collect(),
    }
}

fn input(name: &str, ty: TensorType) -> NodeData {
    let name = name.to_string();
    node(Op::Input { name }, ty, &[])
}

fn output(name: &str, id: u32) -> (String, NodeId) {
    (name.to_string(), NodeId(id))
}

/// The message for a body that encodes `data` (with a valid header and checksum).
fn invalid_data_message(nodes: Vec<NodeData>, outputs: Vec<(String, NodeId)>) -> String {
    let bytes = wrap(&body_of(&GraphData { nodes, outputs }));
    let err = refusal(&bytes);
    assert!(matches!(err, FileError::Invalid(_)), "{err:?}");
    message(&bytes)
}

// ---- the happy path, so the refusals below are refusals of a file that is otherwise good ----

#[test]
fn sample_round_trips() {
    let graph = sample_graph();
    let bytes = file::encode(&graph);
    assert_eq!(&bytes[..8], b"TIRGRAPH");
    assert_eq!(file::decode(&bytes).unwrap(), graph);
    assert!(file::has_magic(&bytes));
    let body = &bytes[HEADER_LEN..];
    assert_eq!(
        bytes,
        wrap(body),
        "the header is magic, version, length, checksum"
    );
    assert_eq!(body, body_of(&graph.to_data()));
}

// ---- empty, foreign and truncated files ----

#[test]
fn empty_file_is_refused() {
    assert!(matches!(refusal(&[]), FileError::Empty));
    assert_eq!(message(&[]), "the file is empty");
}

#[test]
fn foreign_files_have_bad_magic() {
    let text = tir_graph::text::print(&sample_graph());
    let elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0>\0\x01\0\0\0\x10\x10\0\0\0\0\0\0";
    let cases: Vec<&[u8]> = vec![
        text.as_bytes(),
        b"hello, world\n",
        b"{\"nodes\": []}",
        elf,
        b"X",
        b"T\0",
        b"TIRGRAPX\x01\0\0\0",
        b"tirgraph",
        &[0xff; 64],
        &[0; 40],
    ];
    for bytes in cases {
        assert!(matches!(refusal(bytes), FileError::BadMagic), "{bytes:?}");
        assert_eq!(message(bytes), "not a .tir file (bad magic bytes)");
        assert!(!file::has_magic(bytes));
    }
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    let bytes = sample_bytes();
    let body_len = bytes.len() - HEADER_LEN;
    for n in 1..bytes.len() {
        let cut = &bytes[..n];
        assert!(
            matches!(refusal(cut), FileError::Truncated { .. }),
            "{n} bytes"
        );
        let expected = if n < HEADER_LEN {
            format!("the file is truncated: {n} bytes, shorter than the 28-byte header")
        } else {
            format!(
                "the file is truncated: the header promises {body_len} body bytes, the file has {}",
                n - HEADER_LEN
            )
        };
        assert_eq!(message(cut), expected, "{n} bytes");
    }
}

#[test]
fn header_only_file_with_empty_body_does_not_decode() {
    let bytes = wrap(&[]);
    assert_eq!(bytes.len(), HEADER_LEN);
    assert!(matches!(refusal(&bytes), FileError::Decode(_)));
    assert_eq!(
        message(&bytes),
        "the body does not decode: UnexpectedEnd { additional: 1 }"
    );
}

// ---- flipped bits ----

#[test]
fn a_flipped_bit_anywhere_in_the_body_fails_the_checksum() {
    let bytes = sample_bytes();
    let stored = file::checksum(&bytes[HEADER_LEN..]);
    for at in HEADER_LEN..bytes.len() {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[at] ^= 1 << bit;
            let computed = file::checksum(&bad[HEADER_LEN..]);
            assert_ne!(computed, stored, "FNV-1a misses a one-bit change");
            let err = refusal(&bad);
            assert!(
                matches!(err, FileError::Checksum { stored: s, computed: c } if s == stored && c == computed),
                "byte {at} bit {bit}: {err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!(
                    "checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): the file is corrupt"
                )
            );
        }
    }
}

#[test]
fn a_flipped_bit_in_the_magic_is_bad_magic() {
    let bytes = sample_bytes();
    for at in 0..8 {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[at] ^= 1 << bit;
            assert_eq!(message(&bad), "not a .tir file (bad magic bytes)");
        }
    }
}

#[test]
fn a_flipped_bit_in_the_version_is_zero_newer_older_or_read_as_that_version() {
    let bytes = sample_bytes();
    for bit in 0..32 {
        let mut bad = bytes.clone();
        let version = FORMAT_VERSION ^ (1 << bit);
        bad[8..12].copy_from_slice(&version.to_le_bytes());
        let expected = if version == 0 {
            assert!(matches!(refusal(&bad), FileError::ZeroVersion));
            "format version 0 is not a version tir ever wrote; the file is corrupt".to_string()
        } else if version > FORMAT_VERSION {
            assert!(matches!(refusal(&bad), FileError::NewerVersion { found } if found == version));
            format!("format version {version} is newer than this build reads ({FORMAT_VERSION}); upgrade tir")
        } else if version < OLDEST_READ_VERSION {
            assert!(matches!(refusal(&bad), FileError::OlderVersion { found } if found == version));
            format!("format version {version} is older than this build reads ({OLDEST_READ_VERSION}); write the file again from its source (tirc parse, tirc import)")
        } else {
            // An older version this build reads: the graph has nothing it lacks.
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("older.tir");
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(file::read(&path).unwrap(), sample_graph(), "bit {bit}");
            continue;
        };
        assert_eq!(message(&bad), expected, "bit {bit}");
    }
}

#[test]
fn a_flipped_bit_in_the_length_is_truncated_trailing_or_too_large() {
    let bytes = sample_bytes();
    let have = (bytes.len() - HEADER_LEN) as u64;
    let (mut truncated, mut trailing, mut too_large) = (0, 0, 0);
    for bit in 0..64 {
        let mut bad = bytes.clone();
        let len = have ^ (1 << bit);
        bad[12..20].copy_from_slice(&len.to_le_bytes());
        let err = refusal(&bad);
        let expected = if len > MAX_BODY_LEN {
            too_large += 1;
            assert!(matches!(err, FileError::TooLarge(n) if n == len), "{err:?}");
            format!("the body of {len} bytes exceeds the 1073741824-byte limit")
        } else if len > have {
            truncated += 1;
            assert!(matches!(err, FileError::Truncated { .. }), "{err:?}");
            format!(
                "the file is truncated: the header promises {len} body bytes, the file has {have}"
            )
        } else {
            trailing += 1;
            assert!(
                matches!(err, FileError::TrailingBytes(n) if n == have - len),
                "{err:?}"
            );
            format!(
                "the file has {} bytes after the graph; it is corrupt",
                have - len
            )
        };
        assert_eq!(err.to_string(), expected, "bit {bit}");
    }
    assert!(truncated > 0 && trailing > 0 && too_large > 0);
}

#[test]
fn a_flipped_bit_in_the_stored_checksum_is_a_checksum_error() {
    let bytes = sample_bytes();
    let computed = file::checksum(&bytes[HEADER_LEN..]);
    for bit in 0..64 {
        let mut bad = bytes.clone();
        let stored = computed ^ (1 << bit);
        bad[20..28].copy_from_slice(&stored.to_le_bytes());
        assert_eq!(
            message(&bad),
            format!(
                "checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): the file is corrupt"
            )
        );
    }
}

// ---- versions, lengths, trailing bytes ----

#[test]
fn a_future_version_is_refused_even_with_a_valid_checksum() {
    let bytes = sample_bytes();
    let body = &bytes[HEADER_LEN..];
    for version in [FORMAT_VERSION + 1, 99, u32::MAX] {
        let future = with_header(version, body.len() as u64, file::checksum(body), body);
        assert!(matches!(refusal(&future), FileError::NewerVersion { found } if found == version));
        assert_eq!(
            message(&future),
            format!("format version {version} is newer than this build reads ({FORMAT_VERSION}); upgrade tir")
        );
        // The version is checked before anything else about the body.
        let garbage = with_header(version, 3, 0, b"xyz");
        assert_eq!(
            message(&garbage),
            format!("format version {version} is newer than this build reads ({FORMAT_VERSION}); upgrade tir")
        );
    }
    let zero = with_header(0, body.len() as u64, file::checksum(body), body);
    assert!(matches!(refusal(&zero), FileError::ZeroVersion));
}

#[test]
fn trailing_bytes_are_refused() {
    let bytes = sample_bytes();
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"abc");
    assert!(matches!(refusal(&longer), FileError::TrailingBytes(3)));
    assert_eq!(
        message(&longer),
        "the file has 3 bytes after the graph; it is corrupt"
    );
    // Two files glued together.
    let mut twice = bytes.clone();
    twice.extend_from_slice(&bytes);
    assert_eq!(
        message(&twice),
        format!(
            "the file has {} bytes after the graph; it is corrupt",
            bytes.len()
        )
    );
    // Extra bytes inside the checksummed body, after the graph's data.
    let mut body = bytes[HEADER_LEN..].to_vec();
    body.push(0);
    assert!(matches!(refusal(&wrap(&body)), FileError::TrailingBytes(1)));
    assert_eq!(
        message(&wrap(&body)),
        "the file has 1 bytes after the graph; it is corrupt"
    );
}

#[test]
fn a_huge_length_field_is_too_large_without_allocating() {
    let bytes = sample_bytes();
    let body = &bytes[HEADER_LEN..];
    for len in [1u64 << 40, MAX_BODY_LEN + 1, u64::MAX] {
        let bad = with_header(FORMAT_VERSION, len, file::checksum(body), body);
        let (err, largest) = largest_allocation(|| file::decode(&bad).unwrap_err());
        assert!(matches!(err, FileError::TooLarge(n) if n == len), "{err:?}");
        assert!(largest < 4096, "decoding allocated {largest} bytes");
        assert_eq!(
            err.to_string(),
            format!("the body of {len} bytes exceeds the 1073741824-byte limit")
        );
    }
    assert_eq!(
        message(&with_header(FORMAT_VERSION, 1 << 40, 0, &[])),
        "the body of 1099511627776 bytes exceeds the 1073741824-byte limit"
    );
}

#[test]
fn a_body_claiming_a_huge_string_is_refused_before_allocating() {
    // nodes: 1 entry; op: variant 0 (input); name: a varint length (252 = u32 follows), no bytes.
    let body_claiming = |len: u32| {
        let mut body = vec![1, 0, 252];
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(b"abc");
        wrap(&body)
    };
    // Any length past what the 10-byte body can hold is refused before it is allocated (the
    // decoder may claim CLAIM_PER_BYTE per byte of body; 1 << 29 used to be allocated).
    for len in [u32::MAX, 1 << 29, 1 << 16] {
        let bad = body_claiming(len);
        let (err, largest) = largest_allocation(|| file::decode(&bad).unwrap_err());
        assert!(matches!(err, FileError::Decode(_)), "{err:?}");
        assert!(largest < 4096, "{len}: decoding allocated {largest} bytes");
        assert_eq!(
            err.to_string(),
            "the body does not decode: a length in it promises more than its 10 bytes can hold"
        );
    }
}

/// Found by fuzzing (fuzz/regressions/tir_file): a name's length claims 418 MB in an 11-byte
/// body, and was allocated before the bytes were found missing.
#[test]
fn a_fuzzed_output_name_length_is_refused_before_allocating() {
    let body = [
        0x00, 0xff, 0x3b, 0xfe, 0x00, 0x06, 0xfc, 0x01, 0x79, 0xf6, 0x18,
    ];
    let bytes = wrap(&body);
    let (err, largest) = largest_allocation(|| file::decode(&bytes).unwrap_err());
    assert!(matches!(err, FileError::Decode(_)), "{err:?}");
    assert!(largest < 4096, "decoding allocated {largest} bytes");
}

// ---- bodies with a valid checksum that are not a valid graph ----

#[test]
fn a_body_that_does_not_decode_is_a_decode_error() {
    let sample = sample_bytes();
    let valid_body = &sample[HEADER_LEN..];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Too short to hold anything.
        (vec![1], "UnexpectedEnd { additional: 1 }"),
        // One node whose op is variant 99: not an op.
        (
            vec![1, 99, 0, 0],
            "OtherString(\"invalid value: integer `99`, expected variant index 0 <= i < 28\")",
        ),
        // An input whose name is not UTF-8.
        (
            vec![1, 0, 2, 0xc3, 0x28],
            "Utf8 { inner: Utf8Error { valid_up_to: 0, error_len: Some(1) } }",
        ),
        // The valid body cut short (checksum recomputed).
        (
            valid_body[..valid_body.len() - 1].to_vec(),
            "UnexpectedEnd { additional: 1 }",
        ),
    ];
    for (body, reason) in cases {
        let bytes = wrap(&body);
        assert!(matches!(refusal(&bytes), FileError::Decode(_)), "{body:?}");
        assert_eq!(
            message(&bytes),
            format!("the body does not decode: {reason}"),
            "{body:?}"
        );
    }
}

#[test]
fn an_operand_defined_later_is_invalid() {
    let nodes = vec![
        input("x", f32_ty(&[2])),
        node(Op::Unary(UnaryOp::Neg), f32_ty(&[2]), &[2]),
        node(Op::Unary(UnaryOp::Neg), f32_ty(&[2]), &[0]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![output("y", 2)]),
        "the graph is invalid: node %1 (neg) uses %2, which is not defined before it"
    );
    // Its own operand: a cycle of one.
    let nodes = vec![
        input("x", f32_ty(&[2])),
        node(Op::Unary(UnaryOp::Neg), f32_ty(&[2]), &[1]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![output("y", 1)]),
        "the graph is invalid: node %1 (neg) uses %1, which is not defined before it"
    );
    // An operand past the end of the graph.
    let nodes = vec![
        input("x", f32_ty(&[2])),
        node(Op::Unary(UnaryOp::Neg), f32_ty(&[2]), &[u32::MAX]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![output("y", 1)]),
        "the graph is invalid: node %1 (neg) uses %4294967295, which is not defined before it"
    );
}

#[test]
fn a_stored_type_that_inference_contradicts_is_invalid() {
    let nodes = vec![
        input("x", f32_ty(&[2])),
        node(Op::Unary(UnaryOp::Neg), f32_ty(&[3]), &[0]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![output("y", 1)]),
        "the graph is invalid: node %1 (neg) is stored as f32[3] but its operands give f32[2]"
    );
    let nodes = vec![
        input("x", f32_ty(&[2])),
        input("i", TensorType::new(DType::I32, shape![2])),
        node(Op::Binary(tir_graph::BinaryOp::Add), f32_ty(&[2]), &[0, 1]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![output("y", 2)]),
        "the graph is invalid: node %2: add(f32[2], i32[2]): dtypes f32 and i32 differ (cast one first)"
    );
    // Wrong arity.
    let nodes = vec![
        input("x", f32_ty(&[2])),
        node(Op::Unary(UnaryOp::Neg), f32_ty(&[2]), &[0, 0]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![output("y", 1)]),
        "the graph is invalid: node %1: neg(f32[2], f32[2]): takes 1 operand(s), got 2"
    );
}

#[test]
fn a_state_written_twice_is_invalid() {
    let state = |name: &str| Op::State {
        name: name.to_string(),
    };
    let nodes = vec![
        node(state("s"), f32_ty(&[2]), &[]),
        input("v", f32_ty(&[2])),
        node(Op::StateAssign, f32_ty(&[2]), &[0, 1]),
        node(Op::StateAssign, f32_ty(&[2]), &[0, 1]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![]),
        "the graph is invalid: state `s` is written by %2 and %3; a state is written at most once per run"
    );
    let nodes = vec![
        input("x", f32_ty(&[2])),
        input("v", f32_ty(&[2])),
        node(Op::StateAssign, f32_ty(&[2]), &[0, 1]),
    ];
    assert_eq!(
        invalid_data_message(nodes, vec![]),
        "the graph is invalid: node %2 (state_assign) writes %0, which is a input, not a state"
    );
}

#[test]
fn bad_sources_names_and_outputs_are_invalid() {
    let f32_2 = || f32_ty(&[2]);
    type Case = (Vec<NodeData>, Vec<(String, NodeId)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            vec![
                input("x", f32_2()),
                node(Op::Parameter { name: "x".into() }, f32_2(), &[]),
            ],
            vec![output("y", 1)],
            "source name `x` is used by %0 (input) and %1 (parameter)",
        ),
        (
            vec![input("x", f32_2())],
            vec![output("y", 0), output("y", 0)],
            "output name `y` is used by %0 and %0",
        ),
        (
            vec![input("x", f32_2())],
            vec![output("y", 5)],
            "output `y` refers to %5, which is not in the graph",
        ),
        (
            vec![input("x", f32_2())],
            vec![output("", 0)],
            "output name is empty",
        ),
        (
            vec![input("x", f32_2())],
            vec![],
            "the graph computes nothing: it has no outputs and no state updates",
        ),
        (
            vec![],
            vec![],
            "the graph computes nothing: it has no outputs and no state updates",
        ),
        (
            vec![input("", f32_2())],
            vec![output("y", 0)],
            "node %0: input(): declared f32[2]: the name is empty",
        ),
        (
            vec![input(
                "x",
                serde_shape(vec![tir_graph::Dim::Symbolic("1x".into())]),
            )],
            vec![output("y", 0)],
            "node %0: input(): declared f32[1x]: `1x` is not a valid symbolic dim name",
        ),
        (
            vec![input("x", serde_shape(vec![tir_graph::Dim::Static(1); 9]))],
            vec![output("y", 0)],
            "node %0: input(): declared f32[1, 1, 1, 1, 1, 1, 1, 1, 1]: rank 9 exceeds the maximum rank 8",
        ),
        (
            vec![node(
                Op::Constant {
                    data: ConstData::Int(vec![1, 2, 3]),
                },
                TensorType::new(DType::I8, shape![2]),
                &[],
            )],
            vec![output("c", 0)],
            "node %0: constant(): declared i8[2]: has 3 values for 2 elements",
        ),
        (
            vec![node(
                Op::Constant {
                    data: ConstData::Int(vec![1, 300]),
                },
                TensorType::new(DType::I8, shape![2]),
                &[],
            )],
            vec![output("c", 0)],
            "node %0: constant(): declared i8[2]: values are not all exact i8 values",
        ),
        (
            vec![
                input("x", f32_2()),
                node(Op::Input { name: "z".into() }, f32_2(), &[0]),
            ],
            vec![output("y", 1)],
            "node %1: input(f32[2]): a source takes no operands",
        ),
    ];
    for (nodes, outputs, reason) in cases {
        assert_eq!(
            invalid_data_message(nodes, outputs),
            format!("the graph is invalid: {reason}")
        );
    }
}

/// A f32 type whose shape bypasses `Shape::new`'s checks, as a file's bytes can.
fn serde_shape(dims: Vec<tir_graph::Dim>) -> TensorType {
    #[derive(serde::Serialize)]
    struct RawShape(Vec<tir_graph::Dim>);
    let bytes = bincode::serde::encode_to_vec(RawShape(dims), bincode::config::standard()).unwrap();
    let (shape, _): (tir_graph::Shape, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
    TensorType::new(DType::F32, shape)
}

// ---- no input makes decoding panic ----

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    /// Random bodies behind a valid header and checksum: refused (or, by chance, a valid graph),
    /// never a panic.
    #[test]
    fn random_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(g) = file::decode(&wrap(&body)) {
            prop_assert!(g.verify().is_ok());
        }
    }

    /// A real body with a few bytes changed, re-checksummed, exercises the graph checks.
    #[test]
    fn mutated_real_bodies_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let bytes = sample_bytes();
        let mut body = bytes[HEADER_LEN..].to_vec();
        for (at, value) in edits {
            let i = at.index(body.len());
            body[i] = value;
        }
        if let Ok(g) = file::decode(&wrap(&body)) {
            prop_assert!(g.verify().is_ok());
            prop_assert_eq!(file::decode(&file::encode(&g)).unwrap(), g);
        }
    }

    /// Arbitrary bytes, with and without the magic in front, never panic.
    #[test]
    fn random_files_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..128),
        magic in any::<bool>(),
    ) {
        let mut file = if magic { MAGIC.to_vec() } else { Vec::new() };
        file.extend_from_slice(&bytes);
        let _ = file::decode(&file);
    }
}

// ---- reading and writing files on disk ----

#[test]
fn write_then_read_round_trips_and_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.tir");
    let graph = sample_graph();
    file::write(&path, &graph).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), file::encode(&graph));
    assert_eq!(file::read(&path).unwrap(), graph);
    file::write(&path, &graph).unwrap();
    assert_eq!(dir_names(dir.path()), ["g.tir"]);
}

#[test]
fn write_replaces_an_existing_file_fully() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.tir");
    // A longer file first: a non-atomic in-place write would leave its tail behind.
    std::fs::write(&path, vec![b'x'; 10_000]).unwrap();
    let graph = sample_graph();
    file::write(&path, &graph).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), file::encode(&graph));
    assert_eq!(file::read(&path).unwrap(), graph);
    assert_eq!(dir_names(dir.path()), ["g.tir"]);
}

#[test]
fn write_into_a_missing_directory_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("sub").join("g.tir");
    let err = file::write(&path, &sample_graph()).unwrap_err();
    assert!(matches!(err, FileError::Io { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", path.display())) && !msg.contains('\n'),
        "{msg}"
    );
    assert!(dir_names(dir.path()).is_empty());
}

#[test]
fn write_over_a_directory_fails_and_leaves_no_temp_files() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("g.tir");
    std::fs::create_dir(&target).unwrap();
    let err = file::write(&target, &sample_graph()).unwrap_err();
    assert!(matches!(err, FileError::Io { .. }), "{err:?}");
    assert_eq!(dir_names(dir.path()), ["g.tir"]);
    assert!(target.is_dir());
}

#[test]
fn reading_a_missing_or_bad_file_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.tir");
    let err = file::read(&missing).unwrap_err();
    assert!(matches!(err, FileError::Io { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    let empty = dir.path().join("empty.tir");
    std::fs::write(&empty, b"").unwrap();
    assert_eq!(
        file::read(&empty).unwrap_err().to_string(),
        "the file is empty"
    );
    let text = dir.path().join("g.tirt");
    std::fs::write(&text, tir_graph::text::print(&sample_graph())).unwrap();
    assert_eq!(
        file::read(&text).unwrap_err().to_string(),
        "not a .tir file (bad magic bytes)"
    );
}

#[cfg(unix)]
#[test]
fn write_keeps_normal_file_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        format!("{mode:o}")
    };
    let dir = tempfile::tempdir().unwrap();
    // What `File::create` gives here: 0o666 less the umask.
    let reference = dir.path().join("reference");
    std::fs::File::create(&reference).unwrap();
    let fresh = dir.path().join("fresh.tir");
    file::write(&fresh, &sample_graph()).unwrap();
    assert_eq!(mode(&fresh), mode(&reference), "a new file");
    // Writing over a file keeps its mode.
    let existing = dir.path().join("existing.tir");
    std::fs::write(&existing, b"old").unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
    file::write(&existing, &sample_graph()).unwrap();
    assert_eq!(mode(&existing), "644", "a replaced file");
}

#[test]
fn a_version_1_file_is_refused_as_older_with_one_line() {
    let bytes = sample_bytes();
    let body = &bytes[HEADER_LEN..];
    let old = with_header(1, body.len() as u64, file::checksum(body), body);
    assert!(matches!(
        refusal(&old),
        FileError::OlderVersion { found: 1 }
    ));
    assert_eq!(
        message(&old),
        "format version 1 is older than this build reads (2); write the file again from its source (tirc parse, tirc import)"
    );
}

#[test]
fn a_version_2_file_reads_as_the_same_graph() {
    // Version 3 only added an op, so a version-2 body is a version-3 body.
    let bytes = sample_bytes();
    let body = &bytes[HEADER_LEN..];
    let v2 = with_header(2, body.len() as u64, file::checksum(body), body);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.tir");
    std::fs::write(&path, &v2).unwrap();
    let read = file::read(&path).unwrap();
    assert_eq!(read, sample_graph());
}
