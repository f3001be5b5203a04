//! Matrix kernel speed on SmolLM2-135M and Gemma-3-270M shapes: matvec (decode) per format and
//! a 128-token matmul (prefill) for the formats those models' files hold (SmolLM2 Q4_1: q4_1 and
//! q8_0; Gemma Q4_K_M: q5_0 and q8_0 on 640-wide rows, q4_k and q6_k on the others).
//! Throughput is weight bytes read per second for matvec and multiply-adds (elements) per second
//! for the 128-token matmul.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use engine::quant::{available_kernels, matmul_with, quantize, DType, MatmulScratch, QMatrix};

/// [rows, cols] of SmolLM2's projections: q/o, k/v, gate/up, down, and the tied LM head.
const SHAPES: [(usize, usize); 5] = [
    (576, 576),
    (192, 576),
    (1536, 576),
    (576, 1536),
    (49152, 576),
];

/// Gemma-3-270M shapes whose rows are whole 256-value super-blocks (SmolLM2's 576 is not):
/// attention output and FFN down projection.
const K_SHAPES: [(usize, usize); 2] = [(640, 1024), (640, 2048)];

/// Gemma-3-270M shapes whose 640-value rows are not whole super-blocks, so its Q4_K_M file
/// stores them as q5_0 / q8_0: query and the FFN gate/up projections.
const GEMMA_LEGACY: [(usize, usize); 2] = [(1024, 640), (2048, 640)];

fn values(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn weights(dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    quantize(dtype, &values(rows * cols, 7), &mut bytes).expect("supported format");
    bytes
}

fn matvec(c: &mut Criterion) {
    let mut group = c.benchmark_group("matvec");
    for dtype in [
        DType::Q4_1,
        DType::Q4_0,
        DType::Q8_0,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::F16,
        DType::Bf16,
        DType::F32,
    ] {
        for (rows, cols) in SHAPES.into_iter().chain(K_SHAPES).chain(GEMMA_LEGACY) {
            // The LM head is q8_0 in SmolLM2; other formats there only add minutes.
            if rows == 49152 && dtype != DType::Q8_0 {
                continue;
            }
            if cols % dtype.block_len() != 0 {
                continue;
            }
            let bytes = weights(dtype, rows, cols);
            let w = QMatrix::new(dtype, rows, cols, &bytes).expect("valid shape");
            let x = values(cols, 3);
            let mut out = vec![0.0; rows];
            let mut scratch = MatmulScratch::default();
            group.throughput(Throughput::Bytes(bytes.len() as u64));
            for kernel in available_kernels() {
                let id = BenchmarkId::new(format!("{dtype}/{kernel:?}"), format!("{rows}x{cols}"));
                group.bench_function(id, |b| {
                    b.iter(|| matmul_with(kernel, &w, &x, 1, &mut out, &mut scratch))
                });
            }
        }
    }
    group.finish();
}

fn prefill(c: &mut Criterion) {
    const TOKENS: usize = 128;
    let mut group = c.benchmark_group("matmul128");
    group.sample_size(20);
    let cases = [DType::Q4_1, DType::Q8_0]
        .into_iter()
        .flat_map(|d| SHAPES[..4].iter().map(move |&s| (d, s)))
        .chain(
            [DType::Q5_0, DType::Q8_0]
                .into_iter()
                .flat_map(|d| GEMMA_LEGACY.map(|s| (d, s))),
        )
        .chain(
            [DType::Q4K, DType::Q6K]
                .into_iter()
                .flat_map(|d| K_SHAPES.map(|s| (d, s))),
        );
    for (dtype, (rows, cols)) in cases {
        let bytes = weights(dtype, rows, cols);
        let w = QMatrix::new(dtype, rows, cols, &bytes).expect("valid shape");
        let x = values(TOKENS * cols, 5);
        let mut out = vec![0.0; TOKENS * rows];
        let mut scratch = MatmulScratch::default();
        group.throughput(Throughput::Elements((TOKENS * rows * cols) as u64));
        for kernel in available_kernels() {
            let id = BenchmarkId::new(format!("{dtype}/{kernel:?}"), format!("{rows}x{cols}"));
            group.bench_function(id, |b| {
                b.iter(|| matmul_with(kernel, &w, &x, TOKENS, &mut out, &mut scratch))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, matvec, prefill);
criterion_main!(benches);
