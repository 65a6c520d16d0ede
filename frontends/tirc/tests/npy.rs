//! `.npy` reading and writing: every supported dtype round-trips exactly (in its own dtype, so
//! `i64` beyond 2^53 too); files NumPy writes in other layouts (big-endian, Fortran order) read
//! as the same tensor; bad files are refused.

use npyz::WriterBuilder;
use tir_graph::eval::F64Tensor;
use tir_graph::{DType, HostTensor};
use tirc::npy::{self, into_dtype, NpyError};

/// Values exact in `dtype`, including its edges (and for floats -0, ±inf and NaN).
fn edge_values(dtype: DType) -> Vec<f64> {
    match dtype {
        DType::Bool => vec![0.0, 1.0, 1.0, 0.0, 1.0, 0.0],
        DType::I8 => vec![-128.0, -1.0, 0.0, 1.0, 100.0, 127.0],
        DType::U8 => vec![0.0, 1.0, 7.0, 128.0, 200.0, 255.0],
        DType::I32 => vec![-2147483648.0, -5.0, 0.0, 3.0, 65536.0, 2147483647.0],
        DType::I64 => vec![-(2f64.powi(53)), -7.0, 0.0, 1.0, 1e15, 2f64.powi(53)],
        DType::I16 => vec![-32768.0, -5.0, 0.0, 3.0, 256.0, 32767.0],
        DType::U16 => vec![0.0, 1.0, 7.0, 256.0, 40000.0, 65535.0],
        DType::U32 => vec![0.0, 1.0, 65536.0, 2147483648.0, 3e9, 4294967295.0],
        DType::U64 => vec![
            0.0,
            1.0,
            1e15,
            2f64.powi(53),
            2f64.powi(63),
            2f64.powi(63) * 1.5,
        ],
        DType::F16 => vec![
            -65504.0,
            -0.0,
            5.960464477539063e-8,
            0.333251953125,
            f64::INFINITY,
            f64::NAN,
        ],
        DType::BF16 => vec![
            -3.3895313892515355e38,
            -0.0,
            0.5,
            1.0078125,
            f64::NEG_INFINITY,
            f64::NAN,
        ],
        DType::F32 => vec![
            -3.4028234663852886e38,
            -0.0,
            1.401298464324817e-45,
            0.1f32 as f64,
            f64::INFINITY,
            f64::NAN,
        ],
        DType::F64 => vec![f64::MIN, -0.0, 5e-324, 0.1, f64::INFINITY, f64::NAN],
        DType::F8E4M3 => vec![-448.0, -0.0, 2f64.powi(-9), 0.3125, 240.0, f64::NAN],
        DType::F8E5M2 => vec![
            -57344.0,
            -0.0,
            2f64.powi(-16),
            0.3125,
            f64::INFINITY,
            f64::NAN,
        ],
    }
}

/// The tensor of `values` (exact in `dtype`).
fn tensor(dtype: DType, dims: &[u64], values: Vec<f64>) -> HostTensor<'static> {
    let t = F64Tensor::new(dtype, dims.to_vec(), values).expect("exact values");
    HostTensor::from_f64(&t).unwrap()
}

#[test]
fn float8_tensors_are_refused_in_one_line() {
    for dtype in DType::FLOAT8 {
        let t = tensor(dtype, &[2, 3], edge_values(dtype));
        let e = npy::encode(&t).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{dtype} tensors have no .npy element type (NumPy has no 8-bit floats)")
        );
    }
}

#[test]
fn every_dtype_round_trips_exactly() {
    for dtype in DType::ALL.into_iter().filter(|d| d.float8().is_none()) {
        let t = tensor(dtype, &[2, 3], edge_values(dtype));
        let bytes = npy::encode(&t).unwrap();
        let read = npy::decode(&bytes).unwrap();
        let expected_file_dtype = if dtype == DType::BF16 {
            DType::F32
        } else {
            dtype
        };
        assert_eq!(read.dtype(), expected_file_dtype, "{dtype}");
        let back = into_dtype(read, dtype).expect("the file holds the tensor's dtype");
        // Equal as stored: bit-identical (so NaN equals NaN, -0 is not 0).
        assert_eq!(back, t);
    }
}

#[test]
fn random_tensors_round_trip_in_every_dtype_and_rank() {
    for dtype in DType::ALL {
        if dtype.float8().is_some() {
            // NumPy has no 8-bit floats: writing one is refused with one line.
            let t = HostTensor::random(dtype, &[2], 7, 2.0).unwrap();
            let e = npy::encode(&t).unwrap_err().to_string();
            assert!(e.contains("NumPy has no 8-bit floats"), "{e}");
            continue;
        }
        for dims in [vec![], vec![0], vec![5], vec![2, 3, 4], vec![1, 1, 2, 1, 3]] {
            let t = HostTensor::random(dtype, &dims, 7, 2.0).unwrap();
            let read = npy::decode(&npy::encode(&t).unwrap()).unwrap();
            assert_eq!(read.dims(), dims);
            assert_eq!(into_dtype(read, dtype).unwrap(), t);
        }
    }
}

#[test]
fn i64_values_beyond_f64_precision_round_trip() {
    let big = vec![i64::MIN, (1 << 53) + 1, i64::MAX];
    let t = HostTensor::from_vec(big.clone(), &[3]).unwrap();
    let read = npy::decode(&npy::encode(&t).unwrap()).unwrap();
    assert_eq!(read.to_vec::<i64>().unwrap(), big);
}

#[test]
fn files_name_numpy_dtypes() {
    let cases = [
        (DType::Bool, "'|b1'"),
        (DType::I8, "'|i1'"),
        (DType::U8, "'|u1'"),
        (DType::I32, "'<i4'"),
        (DType::I64, "'<i8'"),
        (DType::I16, "'<i2'"),
        (DType::U16, "'<u2'"),
        (DType::U32, "'<u4'"),
        (DType::U64, "'<u8'"),
        (DType::F16, "'<f2'"),
        (DType::BF16, "'<f4'"),
        (DType::F32, "'<f4'"),
        (DType::F64, "'<f8'"),
    ];
    for (dtype, descr) in cases {
        let bytes = npy::encode(&HostTensor::zeros(dtype, &[2, 2]).unwrap()).unwrap();
        assert!(bytes.starts_with(b"\x93NUMPY"));
        let header = String::from_utf8_lossy(&bytes[10..]);
        assert!(header.contains(descr), "{dtype}: {header}");
        assert!(header.contains("'fortran_order': False"), "{header}");
        assert!(header.contains("'shape': (2, 2"), "{header}");
    }
}

fn npyz_file<T: npyz::Serialize>(
    dtype: &str,
    order: npyz::Order,
    shape: &[u64],
    items: Vec<T>,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .dtype(npyz::DType::Plain(dtype.parse().unwrap()))
        .order(order)
        .shape(shape)
        .writer(&mut bytes)
        .begin_nd()
        .unwrap();
    w.extend(items).unwrap();
    w.finish().unwrap();
    bytes
}

#[test]
fn big_endian_and_fortran_order_files_read_as_row_major() {
    let big = npyz_file(">i4", npyz::Order::C, &[3], vec![1i32, -2, 300]);
    let t = npy::decode(&big).unwrap();
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, -2, 300]);
    // [[1, 2, 3], [4, 5, 6]] stored column by column.
    let fortran = npyz_file(
        "<f8",
        npyz::Order::Fortran,
        &[2, 3],
        vec![1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0],
    );
    let t = npy::decode(&fortran).unwrap();
    assert_eq!(t.dims(), [2, 3]);
    assert_eq!(
        t.to_vec::<f64>().unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    let bools = npyz_file(
        "|b1",
        npyz::Order::Fortran,
        &[2, 2],
        vec![true, false, true, true],
    );
    let t = npy::decode(&bools).unwrap();
    assert_eq!(t.to_vec::<bool>().unwrap(), vec![true, true, false, true]);
}

#[test]
fn bf16_reads_only_f32_values_exact_in_bf16() {
    let exact = tensor(DType::F32, &[2], vec![1.0, -0.5]);
    let read = npy::decode(&npy::encode(&exact).unwrap()).unwrap();
    assert!(into_dtype(read, DType::BF16).is_some());
    let inexact = tensor(DType::F32, &[2], vec![1.0, 0.1f32 as f64]);
    let read = npy::decode(&npy::encode(&inexact).unwrap()).unwrap();
    assert!(into_dtype(read.clone(), DType::BF16).is_none());
    // Otherwise the dtype must be the file's own.
    assert!(into_dtype(read.clone(), DType::F64).is_none());
    assert!(into_dtype(read, DType::F32).is_some());
}

#[test]
fn bad_files_are_refused() {
    let good = npy::encode(&HostTensor::random(DType::F32, &[4, 4], 1, 2.0).unwrap()).unwrap();
    let message = |bytes: &[u8]| npy::decode(bytes).unwrap_err().to_string();
    assert!(message(b"").contains("not a valid .npy file"));
    assert!(message(b"hello, not an array").contains("not a valid .npy file"));
    assert!(message(&good[..good.len() - 3]).contains("truncated"));
    let mut long = good.clone();
    long.extend([0, 0]);
    assert!(matches!(
        npy::decode(&long),
        Err(NpyError::TrailingBytes(2))
    ));
    let raw = vec![npyz::FixedSizeBytes([1u8, 2]), npyz::FixedSizeBytes([3, 4])];
    let voids = npyz_file("|V2", npyz::Order::C, &[2], raw);
    let m = message(&voids);
    assert!(m.contains("`|V2` is not supported"), "{m}");
    for m in [message(&voids), message(&good[..good.len() - 3])] {
        assert_eq!(m.lines().count(), 1);
    }
}

#[test]
fn a_header_promising_more_than_the_file_holds_is_refused_before_reading() {
    // A shape of 2^40 elements in a file of a few bytes: refused, not allocated. The header is
    // edited in place (its padding absorbs the longer shape).
    let good = npyz_file("<f8", npyz::Order::C, &[2], vec![1.0f64, 2.0]);
    let end = good.iter().position(|&b| b == b'\n').unwrap();
    let header = std::str::from_utf8(&good[10..end]).unwrap();
    assert!(header.contains("(2,"), "{header}");
    let huge = header.replacen("(2,", "(1099511627776,", 1);
    let huge = &huge[..header.len()];
    let mut bytes = good[..10].to_vec();
    bytes.extend(huge.as_bytes());
    bytes.extend(&good[10 + header.len()..]);
    assert_eq!(bytes.len(), good.len());
    let m = npy::decode(&bytes).unwrap_err().to_string();
    assert!(m.contains("truncated"), "{m}");
}

/// Found by fuzzing (fuzz/regressions/npy): a version-2 header whose length field says 662 MB in
/// a file of 160 bytes. It used to be allocated before anything was read; now it is refused
/// by its length.
#[test]
fn a_header_length_past_the_end_is_refused_before_allocating() {
    let mut bytes = b"\x93NUMPY\x02\x00".to_vec();
    bytes.extend(662_372_470u32.to_le_bytes());
    bytes.extend(b"{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n");
    match npy::decode(&bytes) {
        Err(NpyError::Header(why)) => assert!(
            why.contains("the header length is 662372470 bytes, the file has 58 after it"),
            "{why}"
        ),
        other => panic!("expected a header error, got {other:?}"),
    }
    // Version 1's length is a u16.
    let mut v1 = b"\x93NUMPY\x01\x00".to_vec();
    v1.extend(1000u16.to_le_bytes());
    v1.extend(b"{}");
    let e = npy::decode(&v1).unwrap_err().to_string();
    assert!(e.contains("header length is 1000 bytes"), "{e}");
}

/// Found by fuzzing (fuzz/regressions/npy): a header of 30 nested `{` took npyz's parser more
/// than 12 seconds; it is refused by its depth before it is parsed.
#[test]
fn a_deeply_nested_header_is_refused_quickly() {
    let dict = format!(
        "{}'descr': '|i1', 'fortran_order': False, 'shape': (2, 3), }}\n",
        "{".repeat(30)
    );
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((dict.len() as u16).to_le_bytes());
    bytes.extend(dict.as_bytes());
    bytes.extend([0u8; 6]);
    let start = std::time::Instant::now();
    let e = npy::decode(&bytes).unwrap_err().to_string();
    assert!(e.contains("nests brackets more than 4 deep"), "{e}");
    assert!(start.elapsed().as_secs() < 1, "{:?}", start.elapsed());
}
