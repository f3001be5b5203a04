//! What every block format provides, as a trait on its `#[repr(C)]` block struct
//! ([`QuantBlock`]: to f32, from f32, the scalar reference dot product), the traits its
//! kernels may ask of it besides, and [`as_blocks`], the one place bytes become blocks.

use super::act::{ActRow, ACT_BLOCK};
use knot::DType;

/// A GGML block format as a byte-exact struct.
///
/// # Safety
/// Implementors must be `#[repr(C)]` structs made only of byte arrays, with
/// `size_of::<Self>() == DTYPE.block_bytes()`: alignment 1 and every bit pattern valid is what
/// lets `as_blocks` view unaligned file bytes as blocks.
pub(crate) unsafe trait QuantBlock: Copy + 'static {
    const DTYPE: DType;
    /// Writes the block's `DTYPE.block_len()` values.
    fn to_float(&self, out: &mut [f32]);
    /// Quantizes `DTYPE.block_len()` values with ggml's reference rounding.
    fn from_float(x: &[f32]) -> Self;
    /// Scalar reference dot product of a row of blocks with one token's quantized activations.
    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32;
}

/// A 32-value legacy block's scales as the SIMD kernels read them.
pub(crate) trait LegacyScales: QuantBlock {
    /// f16 bits of the scale `d`, and of the stored minimum `m` (0 where the format has none).
    fn scale_bits(&self) -> (u16, u16);
}

/// A block format whose dot products go through 32-value sub-blocks of small integers, one per
/// activation block: value_j ≈ scale · w_j + offset (up to f32 rounding; `to_float` is the exact
/// dequantization).
pub(crate) trait SubBlocks: QuantBlock {
    /// 32-value sub-blocks per block.
    const SUBS: usize = Self::DTYPE.block_len() / ACT_BLOCK;
    /// Writes sub-block `sub`'s integer weights (|w| ≤ 4096) and returns (scale, offset).
    fn unpack(&self, sub: usize, w: &mut [i16; 32]) -> (f32, f32);
}

/// Scalar reference dot product for `SubBlocks` formats: Σ scale·x_d·Σw·x_q + offset·Σx.
pub(super) fn sub_block_dot<B: SubBlocks>(row: &[B], act: ActRow<'_>) -> f32 {
    let mut sum = 0.0f32;
    let mut w = [0i16; 32];
    for (b, blk) in row.iter().enumerate() {
        for sub in 0..B::SUBS {
            let ab = b * B::SUBS + sub;
            let (scale, offset) = blk.unpack(sub, &mut w);
            // i64: 32 products of up to 4096·32767 pass i32.
            let dot: i64 = w
                .iter()
                .zip(&act.qs[ab * ACT_BLOCK..][..ACT_BLOCK])
                .map(|(&w, &x)| i64::from(w) * i64::from(x))
                .sum();
            sum += scale * act.d[ab] * dot as f32 + offset * act.s[ab];
        }
    }
    sum
}

/// Views bytes as blocks; `bytes.len()` must be a whole number of blocks.
pub(super) fn as_blocks<B: QuantBlock>(bytes: &[u8]) -> &[B] {
    const { assert!(std::mem::align_of::<B>() == 1) };
    assert_eq!(std::mem::size_of::<B>(), B::DTYPE.block_bytes());
    assert_eq!(bytes.len() % std::mem::size_of::<B>(), 0);
    // SAFETY: B has alignment 1 and no invalid bit patterns (QuantBlock's contract), and the
    // slice covers exactly the bytes borrowed, for the same lifetime.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size_of::<B>()) }
}
