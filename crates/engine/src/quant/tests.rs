use super::*;
use proptest::prelude::*;

/// Every format a knot file can hold: the kernels handle each one.
const FORMATS: [DType; DType::ALL.len()] = DType::ALL;

/// Elements per test block: 32 for the float formats too, so every format fits the same shapes.
fn unit(dtype: DType) -> usize {
    dtype.block_len().max(32)
}

/// Deterministic pseudo-random values in [-scale, scale) (xorshift; tests must not depend on
/// a seed source).
fn values(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn quantized(dtype: DType, x: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::new();
    quantize(dtype, x, &mut bytes).unwrap();
    bytes
}

fn dequantized(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0; bytes.len() / dtype.block_bytes() * dtype.block_len()];
    dequantize(dtype, bytes, &mut out).unwrap();
    out
}

/// Largest round-trip error each format allows for element `x` of a block `xb`.
fn roundtrip_bound(dtype: DType, xb: &[f32], x: f32) -> f32 {
    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let min = xb.iter().fold(f32::MAX, |m, &v| m.min(v));
    let max = xb.iter().fold(f32::MIN, |m, &v| m.max(v));
    // The f16 scale carries a relative error up to 2^-11, multiplied by |q| ≤ 128.
    let f16_scale = 128.0 * 2f32.powi(-11);
    match dtype {
        DType::F32 => 0.0,
        // Below 2^-14 f16 is subnormal, with a fixed step of 2^-24.
        DType::F16 => x.abs() * 2f32.powi(-11) + 2f32.powi(-25),
        DType::Bf16 => x.abs() * 2f32.powi(-8),
        // Half a step of amax/127.
        DType::Q8_0 => amax / 127.0 * (0.5 + f16_scale),
        // Steps of amax/8; values on the far side of the extreme clamp at 7 steps, so up to a
        // whole step away.
        DType::Q4_0 => amax / 8.0 * (1.0 + f16_scale),
        // Half a step of (max-min)/15, plus the f16 rounding of the minimum.
        DType::Q4_1 => (max - min) / 15.0 * (0.5 + f16_scale) + min.abs() * 2f32.powi(-11),
        DType::Q5_0 => amax / 16.0 * (1.0 + f16_scale),
        DType::Q5_1 => (max - min) / 31.0 * (0.5 + f16_scale) + min.abs() * 2f32.powi(-11),
        // K-quants (xb is the whole super-block): half a sub-block step plus the 6-bit rounding
        // of the sub-block scale (up to 1/126 of the largest, times q ≤ nmax) and of the min.
        DType::Q4K => (max - min) * (0.5 / 15.0 + 1.0 / 126.0 + 1.0 / 126.0),
        DType::Q5K => (max - min) * (0.5 / 31.0 + 1.0 / 126.0 + 1.0 / 126.0),
        // As q4_0: steps of amax/32, values opposite the extreme clamp a whole step away; plus
        // the i8 rounding of the scale (1/254 of the largest, times |q| ≤ 32).
        // Small blocks put d among the f16 subnormals (absolute step 2^-24, times |sc·q| ≤ 4064).
        DType::Q6K => {
            amax * (1.0 / 32.0 + 32.0 / 254.0 / 32.0) * (1.0 + f16_scale) + 4064.0 * 2f32.powi(-25)
        }
    }
}

#[test]
fn every_format_round_trips_within_its_error() {
    for dtype in FORMATS {
        for (seed, scale) in [(1, 1.0), (2, 0.01), (3, 300.0)] {
            let x = values(256 * 2, seed, scale);
            let y = dequantized(dtype, &quantized(dtype, &x));
            let block = unit(dtype);
            for (xb, yb) in x.chunks(block).zip(y.chunks(block)) {
                for (&a, &b) in xb.iter().zip(yb) {
                    let bound = roundtrip_bound(dtype, xb, a) * 1.0001 + 1e-30;
                    assert!(
                        (a - b).abs() <= bound,
                        "{dtype}: {a} -> {b} (bound {bound})"
                    );
                }
            }
        }
    }
}

#[test]
fn quantize_sizes_follow_the_block_layout() {
    let x = values(512, 9, 1.0);
    for dtype in FORMATS {
        assert_eq!(
            quantized(dtype, &x).len(),
            512 / dtype.block_len() * dtype.block_bytes()
        );
    }
    // quantize replaces earlier contents.
    let mut out = vec![1, 2, 3];
    quantize(DType::Q8_0, &x[..64], &mut out).unwrap();
    assert_eq!(out.len(), 68);
}

#[test]
fn zero_blocks_quantize_to_zero() {
    for dtype in FORMATS {
        let y = dequantized(dtype, &quantized(dtype, &vec![0.0; unit(dtype)]));
        assert!(y.iter().all(|&v| v == 0.0), "{dtype}");
    }
}

#[test]
fn hand_built_q8_0_block() {
    // d = 0.5 (f16 0x3800), q_j = j - 16.
    let mut bytes = vec![0x00, 0x38];
    bytes.extend((0..32).map(|j| (j as i8 - 16) as u8));
    let want: Vec<f32> = (0..32).map(|j| (j as f32 - 16.0) * 0.5).collect();
    assert_eq!(dequantized(DType::Q8_0, &bytes), want);
}

#[test]
fn hand_built_q4_0_block() {
    // d = 2.0 (f16 0x4000); byte j holds element j (low nibble) and j+16 (high nibble).
    let mut bytes = vec![0x00, 0x40];
    bytes.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = dequantized(DType::Q4_0, &bytes);
    for j in 0..16 {
        assert_eq!(y[j], (j as f32 - 8.0) * 2.0);
        assert_eq!(y[j + 16], ((15 - j) as f32 - 8.0) * 2.0);
    }
}

#[test]
fn hand_built_q4_1_block() {
    // d = 0.25 (f16 0x3400), m = -1.5 (f16 0xbe00).
    let mut bytes = vec![0x00, 0x34, 0x00, 0xbe];
    bytes.extend((0..16u8).map(|j| (j % 16) | (((j * 3) % 16) << 4)));
    let y = dequantized(DType::Q4_1, &bytes);
    for j in 0..16u8 {
        assert_eq!(y[j as usize], f32::from(j) * 0.25 - 1.5);
        assert_eq!(y[j as usize + 16], f32::from((j * 3) % 16) * 0.25 - 1.5);
    }
}

#[test]
fn q8_0_rounds_ties_away_from_zero_like_ggml() {
    // amax 127 makes d = 1 exactly, so x = ±2.5 is a tie: roundf gives ±3 (ties-even would give ±2).
    let mut x = vec![0.0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -2.5;
    let bytes = quantized(DType::Q8_0, &x);
    assert_eq!(&bytes[..2], &[0x00, 0x3c]); // d = 1.0
    assert_eq!(bytes[2..5], [127, 3, (-3i8) as u8]);
}

#[test]
fn q4_0_maps_the_signed_extreme_to_minus_eight() {
    // max = -16 (largest magnitude) gives d = 2, the extreme quantizes to q = 0, zero to q = 8,
    // and +14 (7 steps) to q = 15.
    let mut x = vec![0.0f32; 32];
    x[0] = -16.0;
    x[17] = 14.0;
    let bytes = quantized(DType::Q4_0, &x);
    assert_eq!(&bytes[..2], &[0x00, 0x40]);
    assert_eq!(bytes[2], 0x80); // element 0 low nibble 0, element 16 high nibble 8
    assert_eq!(bytes[3], 0xf8); // element 1 → 8, element 17 → 15
}

#[test]
fn q4_1_spans_min_to_max() {
    // min 0, max 15: d = 1, m = 0, q = x rounded half up.
    let x: Vec<f32> = (0..32).map(|j| (j % 16) as f32).collect();
    let bytes = quantized(DType::Q4_1, &x);
    assert_eq!(&bytes[..4], &[0x00, 0x3c, 0x00, 0x00]);
    assert_eq!(dequantized(DType::Q4_1, &bytes), x);
}

#[test]
fn bad_sizes_are_errors() {
    let bytes = vec![0u8; 34 * 4];
    assert!(matches!(
        QMatrix::new(DType::Q8_0, 2, 48, &bytes),
        Err(QuantError::ColsNotWholeBlocks { cols: 48, .. })
    ));
    assert!(matches!(
        QMatrix::new(DType::Q8_0, 3, 64, &bytes),
        Err(QuantError::MatrixSize {
            expected: 204,
            actual: 136,
            ..
        })
    ));
    assert!(matches!(
        QMatrix::new(DType::F32, usize::MAX / 2, 4, &bytes),
        Err(QuantError::ShapeOverflow { .. })
    ));
    assert!(matches!(
        QMatrix::new(DType::Q4K, 1, 96, &[0u8; 144]),
        Err(QuantError::ColsNotWholeBlocks { block_len: 256, .. })
    ));
    assert!(QMatrix::new(DType::Q4K, 1, 256, &[0u8; 144]).is_ok());
    assert!(QMatrix::new(DType::Q8_0, 2, 64, &bytes).is_ok());

    let mut out = vec![0.0; 32];
    assert!(matches!(
        dequantize(DType::Q4_1, &[0u8; 21], &mut out),
        Err(QuantError::BytesNotWholeBlocks { len: 21, .. })
    ));
    assert!(matches!(
        dequantize(DType::Q4_1, &[0u8; 40], &mut out),
        Err(QuantError::OutputLength {
            elements: 64,
            out_len: 32,
            ..
        })
    ));
    assert!(matches!(
        dequantize(DType::F16, &[0u8; 3], &mut out),
        Err(QuantError::BytesNotWholeBlocks { .. })
    ));
    assert!(matches!(
        dequantize(DType::Q6K, &[0u8; 209], &mut vec![0.0; 256]),
        Err(QuantError::BytesNotWholeBlocks { .. })
    ));
    let mut bytes_out = Vec::new();
    assert!(matches!(
        quantize(DType::Q4_0, &[0.0; 33], &mut bytes_out),
        Err(QuantError::ValuesNotWholeBlocks { len: 33, .. })
    ));
    assert!(matches!(
        quantize(DType::Q4K, &[0.0; 32], &mut bytes_out),
        Err(QuantError::ValuesNotWholeBlocks { len: 32, .. })
    ));
}

#[test]
fn dequantize_row_reads_one_row() {
    let x = values(3 * 256, 4, 1.0);
    for dtype in FORMATS {
        let bytes = quantized(dtype, &x);
        let all = dequantized(dtype, &bytes);
        let w = QMatrix::new(dtype, 3, 256, &bytes).unwrap();
        assert_eq!(w.row_bytes(), 256 / dtype.block_len() * dtype.block_bytes());
        let mut row = vec![0.0; 256];
        w.dequantize_row(2, &mut row);
        assert_eq!(row, &all[512..]);
    }
}

/// Runs `matmul_with` on weights quantized from random values; `offset` shifts the weight bytes
/// off any alignment.
fn run(
    kernel: Kernel,
    dtype: DType,
    rows: usize,
    cols: usize,
    n: usize,
    offset: usize,
) -> Vec<f32> {
    let wf = values(rows * cols, (rows * 31 + cols) as u64, 1.0);
    let mut buf = vec![0u8; offset];
    buf.extend(quantized(dtype, &wf));
    let w = QMatrix::new(dtype, rows, cols, &buf[offset..]).unwrap();
    let x = values(n * cols, 77 + n as u64, 2.0);
    let mut out = vec![f32::NAN; n * rows];
    matmul_with(kernel, &w, &x, n, &mut out, &mut MatmulScratch::default());
    out
}

#[test]
fn every_kernel_matches_scalar() {
    for kernel in available_kernels() {
        for dtype in FORMATS {
            let col_choices: &[usize] = if dtype.block_len() == 1 {
                &[45, 64, 96]
            } else if dtype.block_len() == 256 {
                // 1, 2 and 3 super-blocks.
                &[256, 512, 768]
            } else {
                // 5 and 8 blocks: SIMD kernels that take blocks in groups, with and without a tail.
                &[64, 96, 160, 256]
            };
            for &cols in col_choices {
                for (rows, n) in [(37, 1), (37, 5), (17, 4), (3, 9), (1, 2)] {
                    let want = run(Kernel::Scalar, dtype, rows, cols, n, 0);
                    let got = run(kernel, dtype, rows, cols, n, 1);
                    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                        // Only the float summation order differs.
                        assert!(
                            (a - b).abs() <= 1e-5 * (1.0 + a.abs()) * (cols as f32).sqrt(),
                            "{kernel:?} {dtype} [{rows},{cols}] n={n} out[{i}]: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}

/// Activations like a transformer residual stream: mostly small, with a few outlier dimensions
/// (the same ones in every token) hundreds of times larger.
fn outlier_values(len: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut x = values(len, seed, 1.0);
    for (i, v) in x.iter_mut().enumerate() {
        if (i % cols) % 37 == 5 {
            *v *= 300.0;
        }
    }
    x
}

#[test]
fn quantized_matmul_is_close_to_the_dequantized_product() {
    let (rows, cols, n) = (23, 512, 3);
    for x in [values(n * cols, 5, 3.0), outlier_values(n * cols, cols, 11)] {
        for dtype in FORMATS {
            let bytes = quantized(dtype, &values(rows * cols, 6, 1.0));
            let wf = dequantized(dtype, &bytes);
            let w = QMatrix::new(dtype, rows, cols, &bytes).unwrap();
            for kernel in available_kernels() {
                let mut out = vec![0.0; n * rows];
                matmul_with(kernel, &w, &x, n, &mut out, &mut MatmulScratch::default());
                for t in 0..n {
                    let xt = &x[t * cols..(t + 1) * cols];
                    for r in 0..rows {
                        let wr = &wf[r * cols..(r + 1) * cols];
                        let exact: f64 = wr
                            .iter()
                            .zip(xt)
                            .map(|(&a, &b)| f64::from(a) * f64::from(b))
                            .sum();
                        // Block formats see x rounded to the nearest step of amax/32767 per 32
                        // values, so each term moves by at most |w|·step/2.
                        let act_err: f32 = if dtype.block_len() == 1 {
                            0.0
                        } else {
                            xt.chunks(32)
                                .zip(wr.chunks(32))
                                .map(|(xb, wb)| {
                                    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                                    let step = amax / 32767.0;
                                    wb.iter().map(|w| w.abs()).sum::<f32>() * step / 2.0
                                })
                                .sum()
                        };
                        // The rest is f32 rounding; q4 computes d·Σq·x and m·Σx apart, so its
                        // rounding scales with |m|·Σ|x| too, not only with Σ|w·x|.
                        let x_abs: f32 = xt.iter().map(|v| v.abs()).sum();
                        let magnitude: f32 =
                            wr.iter().zip(xt).map(|(a, b)| (a * b).abs()).sum::<f32>() + x_abs;
                        let bound = act_err * 1.001 + magnitude * 1e-6;
                        let got = out[t * rows + r];
                        assert!(
                            (f64::from(got) - exact).abs() <= f64::from(bound),
                            "{kernel:?} {dtype} t={t} r={r}: {got} vs {exact} (bound {bound})"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_uses_the_best_kernel_and_reuses_scratch() {
    let (rows, cols) = (9, 64);
    let bytes = quantized(DType::Q4_1, &values(rows * cols, 8, 1.0));
    let w = QMatrix::new(DType::Q4_1, rows, cols, &bytes).unwrap();
    let mut scratch = MatmulScratch::default();
    let mut a = vec![0.0; 2 * rows];
    let mut b = vec![0.0; 2 * rows];
    let x = values(2 * cols, 10, 1.0);
    matmul(&w, &x, 2, &mut a, &mut scratch);
    // A smaller call with the same scratch must not see stale activations.
    let mut single = vec![0.0; rows];
    matmul(&w, &x[cols..], 1, &mut single, &mut scratch);
    matmul_with(
        *available_kernels().last().unwrap(),
        &w,
        &x,
        2,
        &mut b,
        &mut scratch,
    );
    assert_eq!(a, b);
    assert_eq!(&single[..], &a[rows..]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn kernels_agree_on_random_shapes(
        dtype_index in 0usize..FORMATS.len(),
        rows in 1usize..40,
        col_blocks in 1usize..6,
        n in 1usize..7,
        offset in 0usize..4,
    ) {
        let dtype = FORMATS[dtype_index];
        let cols = col_blocks * unit(dtype);
        let want = run(Kernel::Scalar, dtype, rows, cols, n, 0);
        for kernel in available_kernels() {
            let got = run(kernel, dtype, rows, cols, n, offset);
            for (a, b) in want.iter().zip(&got) {
                prop_assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()) * (cols as f32).sqrt());
            }
        }
    }

    #[test]
    fn q4_1_round_trip_stays_within_half_a_step(x in proptest::collection::vec(-100.0f32..100.0, 32)) {
        let y = dequantized(DType::Q4_1, &quantized(DType::Q4_1, &x));
        for (&a, &b) in x.iter().zip(&y) {
            prop_assert!((a - b).abs() <= roundtrip_bound(DType::Q4_1, &x, a) * 1.0001 + 1e-30);
        }
    }
}

#[test]
fn simd_kernels_are_offered_where_built() {
    let kernels = available_kernels();
    assert_eq!(kernels[0], Kernel::Scalar);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    assert!(kernels.contains(&Kernel::Simd128));
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        kernels.contains(&Kernel::Avx2),
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    );
}

/// Block formats that run on their generic kernel on every architecture (a new format may start
/// here, before its SIMD kernels).
const GENERIC_ONLY: [DType; 0] = [];

/// The table says what each architecture accelerates: every block format but `GENERIC_ONLY` on
/// AVX2 and SIMD128, nothing on the generic kernel; `every_kernel_matches_scalar` checks each
/// one listed.
#[test]
fn the_kernel_table_lists_each_architectures_formats() {
    let blocks: Vec<DType> = FORMATS.into_iter().filter(|d| d.block_len() > 1).collect();
    for dtype in &blocks {
        assert!(!accelerates(Kernel::Scalar, *dtype));
        for kernel in available_kernels().into_iter().skip(1) {
            let listed = !GENERIC_ONLY.contains(dtype);
            assert_eq!(accelerates(kernel, *dtype), listed, "{kernel:?} {dtype}");
        }
    }
}

/// Rough speed probe that also runs under wasm32-wasip1 (criterion does not):
/// `cargo test -p engine --lib --release [--target wasm32-wasip1] quant::tests::matvec_speed
/// -- --ignored --nocapture`. Prints weight GB/s per kernel for SmolLM2's shapes, and for
/// the formats Gemma-3-270M Q4_K_M uses on its shapes.
#[test]
#[ignore = "timing probe, run by hand in release"]
fn matvec_speed() {
    let shapes = [
        (DType::Q4_1, 576, 576),
        (DType::Q4_1, 1536, 576),
        (DType::Q4_1, 576, 1536),
        (DType::Q8_0, 49152, 576),
        (DType::Q5_0, 2048, 640),
        (DType::Q5_1, 2048, 640),
        (DType::Q4K, 640, 2048),
        (DType::Q5K, 640, 2048),
        (DType::Q6K, 640, 2048),
    ];
    for (dtype, rows, cols) in shapes {
        let bytes = quantized(dtype, &values(rows * cols, 1, 1.0));
        let w = QMatrix::new(dtype, rows, cols, &bytes).unwrap();
        let x = values(cols, 2, 1.0);
        let mut out = vec![0.0; rows];
        let mut scratch = MatmulScratch::default();
        for kernel in available_kernels() {
            let reps = (20_000_000 / bytes.len()).max(1);
            let secs = best_time(|| {
                for _ in 0..reps {
                    matmul_with(kernel, &w, &x, 1, &mut out, &mut scratch);
                }
            });
            let gbps = (bytes.len() * reps) as f64 / secs / 1e9;
            println!("{dtype} [{rows},{cols}] {kernel:?}: {gbps:.2} GB/s");
        }
        // 128-token prefill on the same weights.
        let n = 128;
        let x = values(n * cols, 3, 1.0);
        let mut out = vec![0.0; n * rows];
        for kernel in available_kernels() {
            let secs = best_time(|| matmul_with(kernel, &w, &x, n, &mut out, &mut scratch));
            let macs = (n * rows * cols) as f64 / secs / 1e9;
            println!(
                "{dtype} [{rows},{cols}] x {n} tokens {kernel:?}: {macs:.2} G multiply-adds/s"
            );
        }
    }
}

/// The shortest of 15 timed runs of `f` (after one warm-up): on a shared machine the least
/// disturbed run is the closest to the kernel's own speed.
fn best_time(mut f: impl FnMut()) -> f64 {
    f();
    (0..15)
        .map(|_| {
            let start = std::time::Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// One file of tests/fixtures/quant (scripts/reference/make_quant_fixtures.py).
#[derive(serde::Deserialize)]
struct QuantFixture {
    dtype: String,
    source: String,
    blocks: String,
    expected_bits: Vec<u32>,
    input_bits: Option<Vec<u32>>,
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Fixtures are compiled in, so the test also runs under wasm32 without file access.
const QUANT_FIXTURES: [(&str, &str); 9] = [
    (
        "q8_0",
        include_str!("../../../../tests/fixtures/quant/q8_0.json"),
    ),
    (
        "q4_0",
        include_str!("../../../../tests/fixtures/quant/q4_0.json"),
    ),
    (
        "q4_1",
        include_str!("../../../../tests/fixtures/quant/q4_1.json"),
    ),
    (
        "q5_0",
        include_str!("../../../../tests/fixtures/quant/q5_0.json"),
    ),
    (
        "q5_1",
        include_str!("../../../../tests/fixtures/quant/q5_1.json"),
    ),
    (
        "q4_k",
        include_str!("../../../../tests/fixtures/quant/q4_k.json"),
    ),
    (
        "q5_k",
        include_str!("../../../../tests/fixtures/quant/q5_k.json"),
    ),
    (
        "q6_k",
        include_str!("../../../../tests/fixtures/quant/q6_k.json"),
    ),
    (
        "bf16",
        include_str!("../../../../tests/fixtures/quant/bf16.json"),
    ),
];

#[test]
fn dequantization_matches_gguf_py_on_real_blocks() {
    for (name, text) in QUANT_FIXTURES {
        let fx: QuantFixture = serde_json::from_str(text).unwrap();
        assert_eq!(fx.dtype, name);
        let dtype = DType::from_name(&fx.dtype).unwrap();
        let bytes = hex_bytes(&fx.blocks);
        assert!(bytes.len() >= dtype.block_bytes(), "{name}: empty fixture");
        let got = dequantized(dtype, &bytes);
        assert_eq!(got.len(), fx.expected_bits.len(), "{name}");
        for (i, (g, &want)) in got.iter().zip(&fx.expected_bits).enumerate() {
            assert_eq!(
                g.to_bits(),
                want,
                "{name} ({}) value {i}: {g} vs {}",
                fx.source,
                f32::from_bits(want)
            );
        }
        // Through a matrix row as well: the embedding lookup path.
        let w = QMatrix::new(dtype, 1, got.len(), &bytes).unwrap();
        let mut row = vec![0.0; got.len()];
        w.dequantize_row(0, &mut row);
        assert_eq!(row, got, "{name}");
    }
}

#[test]
fn legacy_quantizers_match_gguf_py_byte_for_byte() {
    let mut checked = 0;
    for (name, text) in QUANT_FIXTURES {
        let fx: QuantFixture = serde_json::from_str(text).unwrap();
        let Some(input) = fx.input_bits else { continue };
        let dtype = DType::from_name(name).unwrap();
        let x: Vec<f32> = input.into_iter().map(f32::from_bits).collect();
        assert_eq!(quantized(dtype, &x), hex_bytes(&fx.blocks), "{name}");
        checked += 1;
    }
    assert_eq!(checked, 4, "q5_1, q4_0, q4_1 and bf16 carry their inputs");
}

/// Root-mean-square round-trip error of `dtype` on `x`.
fn rms_error(dtype: DType, x: &[f32]) -> f32 {
    let y = dequantized(dtype, &quantized(dtype, x));
    (x.iter().zip(&y).map(|(a, b)| (a - b).powi(2)).sum::<f32>() / x.len() as f32).sqrt()
}

#[test]
fn k_quant_quantizers_beat_the_legacy_formats_of_similar_size() {
    // Weight-like values: a sum of uniforms is roughly Gaussian, with a few outliers.
    let n = 256 * 16;
    let parts: Vec<Vec<f32>> = (0..4).map(|s| values(n, 40 + s, 1.0)).collect();
    let mut x: Vec<f32> = (0..n).map(|i| parts.iter().map(|p| p[i]).sum()).collect();
    for v in x.iter_mut().step_by(97) {
        *v *= 4.0;
    }
    let e = |d| rms_error(d, &x);
    let (q4_0, q4_1, q4_k) = (e(DType::Q4_0), e(DType::Q4_1), e(DType::Q4K));
    let (q5_0, q5_1, q5_k, q6_k) = (e(DType::Q5_0), e(DType::Q5_1), e(DType::Q5K), e(DType::Q6K));
    // Measured rms: q4_0 0.127, q4_1 0.103, q4_k 0.099, q5_0 0.064, q5_1 0.051, q5_k 0.050,
    // q6_k 0.026. 4.5 bits per value against 4.5 (q4_0) and 5 (q4_1); 5.5 against 5.5 and 6.
    assert!(
        q4_k < q4_0 && q4_k < q4_1 * 1.05,
        "{q4_k} vs {q4_0}, {q4_1}"
    );
    assert!(
        q5_k < q5_0 && q5_k < q5_1 * 1.05,
        "{q5_k} vs {q5_0}, {q5_1}"
    );
    // 6.56 bits: about half the q5_0 error.
    assert!(q6_k < q5_0 * 0.6, "{q6_k} vs {q5_0}");
}

/// Matmul rows split across threads give the same bits as one thread, for every kernel and
/// format, one token or several, with chunks that do not end on a row tile. (wasm32 builds have
/// one thread.)
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn every_thread_count_gives_the_same_bits() {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for kernel in available_kernels() {
        for dtype in FORMATS {
            let cols = if dtype.block_len() == 256 { 512 } else { 256 };
            for (rows, n) in [(300, 1), (261, 3), (130, 9)] {
                assert!(rows * cols * n >= 1 << 16, "large enough to split");
                let one = with_threads(1, || run(kernel, dtype, rows, cols, n, 0)).unwrap();
                for t in [2, 3, 4] {
                    let got = with_threads(t, || run(kernel, dtype, rows, cols, n, 0)).unwrap();
                    assert_eq!(
                        bits(&got),
                        bits(&one),
                        "{kernel:?} {dtype} [{rows},{cols}] n={n} at {t} threads"
                    );
                }
            }
        }
    }
}

/// `matmuls` (one hand-off, one quantization of `x`) gives each matrix the bits `matmul` gives
/// it alone: formats mixed (float beside block, k-quants beside legacy), a matrix of fewer rows
/// than a row tile, one token and several, at every thread count.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn fused_matmuls_give_each_matrix_its_own_bits() {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let cols = 256;
    let groups: [&[(DType, usize)]; 3] = [
        &[(DType::Q4_1, 300), (DType::Q6K, 96), (DType::F16, 96)],
        &[(DType::Q4K, 261), (DType::Q8_0, 3)],
        &[(DType::F32, 130)],
    ];
    for kernel in available_kernels() {
        for group in groups {
            let bytes: Vec<Vec<u8>> = group
                .iter()
                .map(|&(d, rows)| quantized(d, &values(rows * cols, rows as u64 + 5, 1.0)))
                .collect();
            let ws: Vec<QMatrix> = group
                .iter()
                .zip(&bytes)
                .map(|(&(d, rows), b)| QMatrix::new(d, rows, cols, b).unwrap())
                .collect();
            for n in [1, 3, 9] {
                let x = values(n * cols, 11 + n as u64, 2.0);
                let alone: Vec<Vec<f32>> = ws
                    .iter()
                    .map(|w| {
                        let mut out = vec![f32::NAN; n * w.rows()];
                        let scratch = &mut MatmulScratch::default();
                        with_threads(1, || matmul_with(kernel, w, &x, n, &mut out, scratch))
                            .unwrap();
                        out
                    })
                    .collect();
                for t in [1, 2, 3, 4] {
                    let mut outs: Vec<Vec<f32>> =
                        ws.iter().map(|w| vec![f32::NAN; n * w.rows()]).collect();
                    let mut pairs: Vec<(&QMatrix, &mut [f32])> = ws
                        .iter()
                        .zip(outs.iter_mut())
                        .map(|(w, o)| (w, &mut o[..]))
                        .collect();
                    let scratch = &mut MatmulScratch::default();
                    with_threads(t, || matmuls_with(kernel, &mut pairs, &x, n, scratch)).unwrap();
                    for ((got, want), w) in outs.iter().zip(&alone).zip(&ws) {
                        assert_eq!(
                            bits(got),
                            bits(want),
                            "{kernel:?} {} [{}, {cols}] n={n} at {t} threads",
                            w.dtype(),
                            w.rows()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_thread_counts_are_refused() {
    assert_eq!(set_threads(0), Err(ThreadsError::Count(0)));
    assert_eq!(
        set_threads(MAX_THREADS + 1),
        Err(ThreadsError::Count(MAX_THREADS + 1))
    );
    assert!(with_threads(0, || ()).is_err());
    assert_eq!(with_threads(1, threads).unwrap(), 1);
    #[cfg(not(target_arch = "wasm32"))]
    assert_eq!(with_threads(3, threads).unwrap(), 3);
    #[cfg(target_arch = "wasm32")]
    assert_eq!(with_threads(2, || ()), Err(ThreadsError::Unavailable(2)));
}
