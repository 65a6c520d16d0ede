//! The dequantization composites of `tir_graph::quant` on the oracle: hand-made packed tensors
//! whose values are written here bit by bit (independently of the composites and of the host
//! quantizer), the host quantizer's round trip against the composites at several group sizes
//! and odd shapes, and the refusals.

use half::f16;
use std::collections::BTreeMap;
use tir_graph::float8::F8E4M3;
use tir_graph::quant::quantize::{dequantize, error_bound, quantize};
use tir_graph::quant::{self, Fp8Scale, WeightFormat};
use tir_graph::{evaluate, DType, F64Tensor, GraphBuilder, HostTensor, Shape};

/// Declares `format`'s parameters for a `[k, n]` weight `w`, binds `tensors` to them and returns
/// the dequantized weight as the oracle computes it, rounded to f16 as a backend stores it.
fn oracle_weight(format: WeightFormat, k: u64, n: u64, tensors: &[HostTensor<'_>]) -> Vec<f64> {
    let g = GraphBuilder::new();
    let w = format.declare(&g, "w", k, n).unwrap();
    g.output("w", &w).unwrap();
    let graph = g.finish().unwrap();
    let names = format.tensors("w", k, n).unwrap();
    let sources: BTreeMap<String, F64Tensor> = names
        .iter()
        .zip(tensors)
        .map(|(s, t)| (s.name.clone(), t.to_f64()))
        .collect();
    let out = &evaluate(&graph, &sources).unwrap().outputs["w"];
    assert_eq!(out.dims, [k, n]);
    out.data
        .iter()
        .map(|&v| DType::F16.round_value(v))
        .collect()
}

fn i32s(words: &[u32], dims: &[u64]) -> HostTensor<'static> {
    let v: Vec<i32> = words.iter().map(|&w| w as i32).collect();
    HostTensor::from_vec(v, dims).unwrap()
}

fn f16s(v: &[f32], dims: &[u64]) -> HostTensor<'static> {
    HostTensor::from_vec(
        v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
        dims,
    )
    .unwrap()
}

/// A word whose nibble `i` (bits `4i..4i+3`) is `i + 1`: `0x87654321` (negative as i32, so the
/// unpacking's arithmetic shift is exercised).
const ONE_TO_EIGHT: u32 = 0x8765_4321;

#[test]
fn awq_nibbles_hold_columns_in_autoawq_order() {
    // Row 0: nibble i = i + 1, nibble i holding column [0, 2, 4, 6, 1, 3, 5, 7][i], so columns
    // 0..8 are 1, 5, 2, 6, 3, 7, 4, 8. Row 1: only nibble 0 (column 0) = 15, nibble 7
    // (column 7) = 9.
    let qweight = i32s(&[ONE_TO_EIGHT, 0x9000_000F], &[2, 1]);
    // Zeros: nibble 1 (column 2) = 2, nibble 4 (column 1) = 1.
    let qzeros = i32s(&[0x0001_0020], &[1, 1]);
    let scales = f16s(&[1.0, 0.5, 1.0, 2.0, 1.0, 1.0, 1.0, -0.25], &[1, 8]);
    let want = [
        1.0, 2.0, 0.0, 12.0, 3.0, 7.0, 4.0, -2.0, // (q - z) * s, row 0
        15.0, -0.5, -2.0, 0.0, 0.0, 0.0, 0.0, -2.25, // row 1
    ];
    let got = oracle_weight(
        WeightFormat::Awq { group: 2 },
        2,
        8,
        &[qweight, qzeros, scales],
    );
    assert_eq!(got, want);
}

#[test]
fn awq_groups_take_their_own_zeros_and_scales() {
    // K = 4, N = 8, groups of 2: rows 0-1 group 0, rows 2-3 group 1.
    let qweight = i32s(&[0x7777_7777; 4], &[4, 1]);
    // Group 0 zero 3 everywhere, group 1 zero 8 everywhere.
    let qzeros = i32s(&[0x3333_3333, 0x8888_8888], &[2, 1]);
    let mut s = vec![1.0f32; 8];
    s.extend([0.5f32; 8]);
    let got = oracle_weight(
        WeightFormat::Awq { group: 2 },
        4,
        8,
        &[qweight, qzeros, f16s(&s, &[2, 8])],
    );
    let want: Vec<f64> = [4.0; 16].into_iter().chain([-0.5; 16]).collect();
    assert_eq!(got, want);
}

#[test]
fn gptq_nibbles_run_along_k_and_zeros_are_stored_minus_one() {
    // K = 8, N = 8, one group. Column 0's word holds rows 0..8 = 1..8; column 1's holds 15 in
    // row 7 only; the rest are 0.
    let mut words = vec![0u32; 8];
    words[0] = ONE_TO_EIGHT;
    words[1] = 0xF000_0000;
    let qweight = i32s(&words, &[1, 8]);
    // Stored zero - 1: column 0 stores 0 (zero 1), column 1 stores 15 (zero 16: the format's
    // wrap), column 2 stores 7 (zero 8), the rest 0 (zero 1).
    let qzeros = i32s(&[0x0000_07F0], &[1, 1]);
    let scales = f16s(&[1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0, 2.0], &[1, 8]);
    let g_idx = HostTensor::from_vec(vec![0i32; 8], &[8]).unwrap();
    let got = oracle_weight(
        WeightFormat::Gptq { group: 8 },
        8,
        8,
        &[qweight, qzeros, scales, g_idx],
    );
    for k in 0..8 {
        let row = &got[k * 8..k * 8 + 8];
        let col1 = if k == 7 { -1.0 } else { -16.0 };
        let want = [k as f64, col1, -4.0, -1.0, -1.0, -1.0, -1.0, -2.0];
        assert_eq!(row, want, "row {k}");
    }
}

#[test]
fn gptq_act_order_reads_each_rows_group_from_g_idx() {
    // K = 16, N = 8, two groups; g_idx alternates 1, 0, 1, 0, ... (act-order).
    let qweight = i32s(&[0x5555_5555; 16], &[2, 8]);
    // Group 0 stores 1 (zero 2), group 1 stores 4 (zero 5).
    let qzeros = i32s(&[0x1111_1111, 0x4444_4444], &[2, 1]);
    let mut s = vec![3.0f32; 8];
    s.extend([0.5f32; 8]);
    let g_idx: Vec<i32> = (0..16).map(|k| 1 - k % 2).collect();
    let got = oracle_weight(
        WeightFormat::Gptq { group: 8 },
        16,
        8,
        &[
            qweight,
            qzeros,
            f16s(&s, &[2, 8]),
            HostTensor::from_vec(g_idx, &[16]).unwrap(),
        ],
    );
    for k in 0..16 {
        // Group 1: (5 - 5) * 0.5 = 0; group 0: (5 - 2) * 3 = 9.
        let want = if k % 2 == 0 { 0.0 } else { 9.0 };
        assert!(got[k * 8..k * 8 + 8].iter().all(|&v| v == want), "row {k}");
    }
}

#[test]
fn int8_scales_each_output_channel() {
    let q = HostTensor::from_vec(vec![-127i8, 3, 100, 1, -1, 0], &[2, 3]).unwrap();
    let s = f16s(&[0.5, -2.0, 0.25], &[3]);
    let got = oracle_weight(WeightFormat::Int8, 2, 3, &[q, s]);
    assert_eq!(got, [-63.5, -6.0, 25.0, 0.5, 2.0, 0.0]);
}

/// e4m3 bytes: 0x38 = 1, 0x40 = 2, 0xB8 = -1, 0x7E = 448, 0x01 = 2^-9 (least subnormal),
/// 0x3C = 1.5.
fn e4m3(bytes: &[u8], dims: &[u64]) -> HostTensor<'static> {
    HostTensor::from_vec(bytes.iter().map(|&b| F8E4M3(b)).collect::<Vec<_>>(), dims).unwrap()
}

#[test]
fn fp8_rows_are_output_channels_and_come_out_transposed() {
    // weight [N = 2, K = 3]; scale per row 2 and 0.5.
    let w = e4m3(&[0x38, 0x40, 0xB8, 0x7E, 0x01, 0x3C], &[2, 3]);
    let s = HostTensor::from_vec(vec![2.0f32, 0.5], &[2, 1]).unwrap();
    let got = oracle_weight(WeightFormat::Fp8(Fp8Scale::Row), 3, 2, &[w, s]);
    // [K = 3, N = 2]: column n is row n of the weight times its scale.
    let want = [2.0, 224.0, 4.0, 2f64.powi(-10), -2.0, 0.75];
    assert_eq!(got, want);
    let w = e4m3(&[0x38, 0x40, 0xB8, 0x7E, 0x01, 0x3C], &[2, 3]);
    let s = HostTensor::from_vec(vec![-4.0f32], &[1]).unwrap();
    let got = oracle_weight(WeightFormat::Fp8(Fp8Scale::Tensor), 3, 2, &[w, s]);
    assert_eq!(got, [-4.0, -1792.0, -8.0, -2f64.powi(-7), 4.0, -6.0]);
}

#[test]
fn fp8_blocks_cover_128_rows_and_columns_with_the_edge_cut() {
    // weight [N = 130, K = 129], every element 1.0; block scales [[1, 2], [3, 4]].
    let (n, k) = (130u64, 129u64);
    let w = e4m3(&vec![0x38; (n * k) as usize], &[n, k]);
    let s = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let got = oracle_weight(WeightFormat::Fp8(Fp8Scale::Block), k, n, &[w, s]);
    for kk in 0..k as usize {
        for nn in 0..n as usize {
            let want = [[1.0, 2.0], [3.0, 4.0]][nn / 128][kk / 128];
            assert_eq!(got[kk * n as usize + nn], want, "k {kk}, n {nn}");
        }
    }
}

/// Random finite weights of `[k, n]` in about [-bound, bound], never all zero.
fn weights(k: u64, n: u64, seed: u64, bound: f64) -> Vec<f32> {
    let t = HostTensor::random(DType::F32, &[k, n], seed, 2.0 * bound).unwrap();
    t.to_vec::<f32>().unwrap()
}

/// Every format at several group sizes and odd shapes: the composite on the oracle equals the
/// host's reference dequantization bit for bit, and both are within the quantizer's bound.
#[test]
fn quantized_weights_round_trip_through_the_composites() {
    let cases: Vec<(WeightFormat, u64, u64)> = vec![
        (WeightFormat::Int8, 37, 23),
        (WeightFormat::Fp8(Fp8Scale::Tensor), 19, 45),
        (WeightFormat::Fp8(Fp8Scale::Row), 33, 7),
        (WeightFormat::Fp8(Fp8Scale::Block), 200, 136),
        (WeightFormat::Awq { group: 32 }, 96, 24),
        (WeightFormat::Awq { group: 64 }, 192, 40),
        (WeightFormat::Awq { group: 128 }, 384, 8),
        (WeightFormat::Gptq { group: 32 }, 160, 24),
        (WeightFormat::Gptq { group: 64 }, 64, 56),
        (WeightFormat::Gptq { group: 128 }, 256, 16),
    ];
    for (seed, (format, k, n)) in cases.into_iter().enumerate() {
        let what = format!("{format:?} [{k}, {n}]");
        let w = weights(k, n, seed as u64, 1.5);
        let stored = quantize("w", &w, k, n, format).unwrap();
        let tensors: Vec<HostTensor<'_>> = stored.iter().map(|(_, t)| t.view()).collect();
        let host = dequantize("w", format, k, n, &tensors).unwrap();
        let graph = oracle_weight(format, k, n, &tensors);
        for (i, (&h, &g)) in host.iter().zip(&graph).enumerate() {
            assert_eq!(h.to_f64(), g, "{what}: element {i}");
            let (kk, nn) = (i as u64 / n, i as u64 % n);
            let bound = error_bound(format, &tensors, kk, nn, w[i]).unwrap();
            // The final f16 rounding adds at most half an ulp of the value (2^-11 relative).
            let slack = f64::from(w[i].abs()) * 2f64.powi(-11) + 1e-7;
            let err = (f64::from(w[i]) - g).abs();
            assert!(
                err <= f64::from(bound) * 1.0001 + slack,
                "{what}: element {i}: {} became {g}, error {err} over {bound}",
                w[i]
            );
        }
    }
}

#[test]
fn gptq_never_writes_a_zero_of_zero() {
    // All-positive groups would want zero 0, which the classic format cannot store.
    let w: Vec<f32> = (0..64 * 8).map(|i| 0.01 + (i % 13) as f32 * 0.1).collect();
    let stored = quantize("w", &w, 64, 8, WeightFormat::Gptq { group: 32 }).unwrap();
    let tensors: Vec<HostTensor<'_>> = stored.iter().map(|(_, t)| t.view()).collect();
    let host = dequantize("w", WeightFormat::Gptq { group: 32 }, 64, 8, &tensors).unwrap();
    for (i, (h, &v)) in host.iter().zip(&w).enumerate() {
        let s = error_bound(
            WeightFormat::Gptq { group: 32 },
            &tensors,
            i as u64 / 8,
            i as u64 % 8,
            v,
        )
        .unwrap();
        assert!((h.to_f32() - v).abs() <= s * 1.001 + 1e-3, "element {i}");
    }
    let zeros = stored[1].1.to_vec::<i32>().unwrap();
    // Stored z - 1 = 15 would read back as 16.
    assert!(zeros
        .iter()
        .all(|&w| (0..8).all(|i| (w >> (4 * i)) & 15 != 15)));
}

/// A refusal's message, which must be one line.
fn one_line(e: impl std::fmt::Display) -> String {
    let e = e.to_string();
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn mismatched_tensors_are_refused_by_name() {
    let g = GraphBuilder::new();
    let p =
        |name: &str, dtype: DType, dims: &[u64]| g.parameter(name, dtype, Shape::of(dims)).unwrap();
    let q = p("q", DType::I32, &[64, 2]);
    let z = p("z", DType::I32, &[2, 2]);
    let s = p("s", DType::F16, &[3, 16]);
    let e = quant::awq("l0.wq", &q, &z, &s)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(
        e.starts_with("tensor l0.wq.scales: has dims [3, 16]"),
        "{e}"
    );
    let s16 = p("s16", DType::F16, &[2, 16]);
    let z8 = p("z8", DType::I8, &[2, 2]);
    let e = quant::awq("l0.wq", &q, &z8, &s16)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(e.starts_with("tensor l0.wq.qzeros: is i8[2, 2]"), "{e}");
    let gq = p("gq", DType::I32, &[8, 12]);
    let gz = p("gz", DType::I32, &[2, 1]);
    let gs = p("gs", DType::F16, &[2, 12]);
    let gi = p("gi", DType::I32, &[64]);
    let e = quant::gptq("w", &gq, &gz, &gs, &gi)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(e.starts_with("tensor w.qweight: has N = 12"), "{e}");
    let w8 = p("w8", DType::F8E4M3, &[16, 32]);
    let bad = p("bad", DType::F32, &[16]);
    let e = quant::fp8("w", &w8, &bad)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(e.starts_with("tensor w.weight_scale: has dims [16]"), "{e}");
    let e = quant::fp8_block("w", &w8, &bad)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(
        e.starts_with("tensor w.weight_scale_inv: is f32[16]"),
        "{e}"
    );
    let wf = p("wf", DType::F16, &[16, 32]);
    let e = quant::fp8("w", &wf, &bad)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(e.starts_with("tensor w.weight: is f16[16, 32]"), "{e}");
    let qi = p("qi", DType::I8, &[4, 5]);
    let si = p("si", DType::F16, &[4]);
    let e = quant::int8("w", &qi, &si)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(e.starts_with("tensor w.scales: has dims [4]"), "{e}");
    let e = quantize("w", &[1.0, f32::NAN], 1, 2, WeightFormat::Int8)
        .map(drop)
        .map_err(one_line)
        .unwrap_err();
    assert!(e.starts_with("tensor w: element 1 is NaN"), "{e}");
}
