//! The format table: [`format()`] is the one `match` over `DType`, and each entry ([`Format`]) is
//! everything the kernels do with that format — read it, write it, multiply by it. A block
//! format's entry is built from its block type alone ([`Format::blocks`]): dequantize and
//! quantize block by block, and the generic (scalar) matmul that every architecture kernel is
//! tested against.

use super::act::{BlockActs, ACT_BLOCK};
use super::block::{as_blocks, QuantBlock};
use super::float::{
    dequantize_bf16, dequantize_f16, dequantize_f32, dot_row, quantize_bf16, quantize_f16,
    quantize_f32, FloatFormat,
};
use super::kquant::{BlockQ4K, BlockQ5K, BlockQ6K};
use super::matrix::QMatrix;
use super::q4::{BlockQ4_0, BlockQ4_1};
use super::q5::{BlockQ5_0, BlockQ5_1};
use super::q8_0::BlockQ8_0;
use knot::DType;

/// A block-format matmul over quantized activations: `out[t*rows + r] = W[r] · x[t]`.
/// `unsafe` because architecture kernels need their CPU features.
pub(super) type BlockMatmul = unsafe fn(&QMatrix, &BlockActs, usize, &mut [f32]);

/// What the kernels do with one storage format: read it, write it, multiply by it.
#[derive(Clone, Copy)]
pub(super) struct Format {
    /// Stored bytes (whole blocks) to f32, one value per element of the output.
    pub dequantize: fn(&[u8], &mut [f32]),
    /// f32 values (whole blocks) to stored bytes, appended to the output.
    pub quantize: fn(&[f32], &mut Vec<u8>),
    pub matmul: Matmul,
}

/// How `matmul` multiplies by a format.
#[derive(Clone, Copy)]
pub(super) enum Matmul {
    /// In f32, the 16-bit formats widened exactly; each architecture has one kernel for all
    /// three.
    Float(FloatFormat),
    /// Over 16-bit block activations with this generic kernel, which an architecture's table
    /// (`avx2::KERNELS`, `simd128::KERNELS`) may replace.
    Blocks(BlockMatmul),
}

impl Format {
    const fn float(
        format: FloatFormat,
        dequantize: fn(&[u8], &mut [f32]),
        quantize: fn(&[f32], &mut Vec<u8>),
    ) -> Format {
        Format {
            dequantize,
            quantize,
            matmul: Matmul::Float(format),
        }
    }

    /// A block format's entry: everything built from its block type.
    const fn blocks<B: QuantBlock>() -> Format {
        Format {
            dequantize: dequantize_blocks::<B>,
            quantize: quantize_blocks::<B>,
            matmul: Matmul::Blocks(scalar_blocks::<B>),
        }
    }
}

/// Every storage format the kernels handle: the one `match` over `DType`. A block format is
/// its block type and one line here.
pub(super) const fn format(dtype: DType) -> Format {
    match dtype {
        DType::F32 => Format::float(FloatFormat::F32, dequantize_f32, quantize_f32),
        DType::F16 => Format::float(FloatFormat::F16, dequantize_f16, quantize_f16),
        DType::Bf16 => Format::float(FloatFormat::Bf16, dequantize_bf16, quantize_bf16),
        DType::Q8_0 => Format::blocks::<BlockQ8_0>(),
        DType::Q4_0 => Format::blocks::<BlockQ4_0>(),
        DType::Q4_1 => Format::blocks::<BlockQ4_1>(),
        DType::Q5_0 => Format::blocks::<BlockQ5_0>(),
        DType::Q5_1 => Format::blocks::<BlockQ5_1>(),
        DType::Q4K => Format::blocks::<BlockQ4K>(),
        DType::Q5K => Format::blocks::<BlockQ5K>(),
        DType::Q6K => Format::blocks::<BlockQ6K>(),
    }
}

fn dequantize_blocks<B: QuantBlock>(bytes: &[u8], out: &mut [f32]) {
    let len = B::DTYPE.block_len();
    for (b, o) in as_blocks::<B>(bytes).iter().zip(out.chunks_exact_mut(len)) {
        b.to_float(o);
    }
}

fn quantize_blocks<B: QuantBlock>(x: &[f32], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(
        start + x.len() / B::DTYPE.block_len() * B::DTYPE.block_bytes(),
        0,
    );
    let mut blocks = Vec::with_capacity(x.len() / B::DTYPE.block_len());
    blocks.extend(x.chunks_exact(B::DTYPE.block_len()).map(B::from_float));
    for (dst, b) in out[start..]
        .chunks_exact_mut(B::DTYPE.block_bytes())
        .zip(&blocks)
    {
        // SAFETY: B is a byte-only struct of exactly block_bytes bytes (QuantBlock contract).
        let bytes =
            unsafe { std::slice::from_raw_parts((b as *const B).cast::<u8>(), size_of::<B>()) };
        dst.copy_from_slice(bytes);
    }
}

/// Scalar reference for the float formats.
pub(super) fn scalar_float(format: FloatFormat, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    for t in 0..n {
        let xt = &x[t * w.cols()..(t + 1) * w.cols()];
        for r in 0..w.rows() {
            out[t * w.rows() + r] = dot_row(format, w.row(r), xt);
        }
    }
}

/// Scalar reference for the block formats (an `unsafe fn` only to share [`BlockMatmul`]'s type:
/// it needs nothing).
unsafe fn scalar_blocks<B: QuantBlock>(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    let blocks_per_row = w.cols() / ACT_BLOCK;
    for t in 0..n {
        let act = acts.token(t, blocks_per_row);
        for r in 0..w.rows() {
            out[t * w.rows() + r] = B::vec_dot(as_blocks::<B>(w.row(r)), act);
        }
    }
}
