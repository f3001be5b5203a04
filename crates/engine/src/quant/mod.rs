//! Matrix kernels on GGML storage formats.
//!
//! Weights stay in their stored bytes (`QMatrix` borrows them); nothing dequantizes a whole tensor.
//! `matmul` computes `out = x · Wᵀ` for `n` tokens at once:
//! - float formats (f32, f16, bf16) compute in f32, the 16-bit formats widened exactly;
//! - block formats (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k) first quantize `x` to 16-bit blocks of 32 (see `act`) and
//!   take integer dot products per block, then scale.
//!
//! Layout: one file per format family (`float`, `q8_0`, `q4`, `q5`, `kquant`) holding the block struct, its
//! conversions and its scalar reference dot product (the `QuantBlock` trait); SIMD kernels for
//! every format live in `avx2` (x86_64, chosen at run time) and `simd128` (wasm32, chosen at
//! compile time). The SIMD kernels take rows as typed blocks (`&[BlockQ4K]`, through
//! `as_blocks`) and read fields by name; each module says what it needs of a format in one
//! trait per family (`LegacyBlock`/`SimdBlock` for 32-value blocks, `KBlock` for the K-quant
//! super-blocks). Adding a format = one block file + its trait impls in the SIMD modules + the
//! `match` arms here.

mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
pub(crate) mod float;
mod kquant;
mod q4;
mod q5;
mod q8_0;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;

use act::{ActRow, BlockActs, ACT_BLOCK};
use float::FloatFormat;
use kquant::{BlockQ4K, BlockQ5K, BlockQ6K};
use q4::{BlockQ4_0, BlockQ4_1};
use q5::{BlockQ5_0, BlockQ5_1};
use q8_0::BlockQ8_0;

pub use knot::DType;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    #[error("{dtype} is not supported by the matrix kernels yet")]
    Unsupported { dtype: DType },
    #[error("{dtype} packs {block_len} elements per block, but the row length is {cols}")]
    ColsNotWholeBlocks {
        dtype: DType,
        block_len: usize,
        cols: usize,
    },
    #[error("{dtype} matrix [{rows}, {cols}] is too large to address")]
    ShapeOverflow {
        dtype: DType,
        rows: usize,
        cols: usize,
    },
    #[error("{dtype} matrix [{rows}, {cols}] needs {expected} bytes, got {actual}")]
    MatrixSize {
        dtype: DType,
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("{len} bytes are not a whole number of {dtype} blocks ({block_bytes} bytes each)")]
    BytesNotWholeBlocks {
        dtype: DType,
        block_bytes: usize,
        len: usize,
    },
    #[error("{len} values are not a whole number of {dtype} blocks ({block_len} values each)")]
    ValuesNotWholeBlocks {
        dtype: DType,
        block_len: usize,
        len: usize,
    },
    #[error("{dtype} bytes hold {elements} values but the output has room for {out_len}")]
    OutputLength {
        dtype: DType,
        elements: usize,
        out_len: usize,
    },
}

/// Formats the kernels of this module handle.
fn check_supported(dtype: DType) -> Result<(), QuantError> {
    match dtype {
        DType::F32
        | DType::F16
        | DType::Bf16
        | DType::Q8_0
        | DType::Q4_0
        | DType::Q4_1
        | DType::Q5_0
        | DType::Q5_1
        | DType::Q4K
        | DType::Q5K
        | DType::Q6K => Ok(()),
    }
}

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
    const SUBS: usize = Self::DTYPE.block_len() / act::ACT_BLOCK;
    /// Writes sub-block `sub`'s integer weights (|w| ≤ 4096) and returns (scale, offset).
    fn unpack(&self, sub: usize, w: &mut [i16; 32]) -> (f32, f32);
}

/// Scalar reference dot product for `SubBlocks` formats: Σ scale·x_d·Σw·x_q + offset·Σx.
fn sub_block_dot<B: SubBlocks>(row: &[B], act: ActRow<'_>) -> f32 {
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
fn as_blocks<B: QuantBlock>(bytes: &[u8]) -> &[B] {
    const { assert!(std::mem::align_of::<B>() == 1) };
    assert_eq!(std::mem::size_of::<B>(), B::DTYPE.block_bytes());
    assert_eq!(bytes.len() % std::mem::size_of::<B>(), 0);
    // SAFETY: B has alignment 1 and no invalid bit patterns (QuantBlock's contract), and the
    // slice covers exactly the bytes borrowed, for the same lifetime.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size_of::<B>()) }
}

/// A borrowed row-major weight matrix [rows, cols] in its stored format (rows = out features).
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        let expected = Self::byte_len(dtype, rows, cols)?;
        let row_bytes = cols / dtype.block_len() * dtype.block_bytes();
        if data.len() != expected {
            return Err(QuantError::MatrixSize {
                dtype,
                rows,
                cols,
                expected,
                actual: data.len(),
            });
        }
        Ok(QMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// Bytes a `[rows, cols]` matrix of `dtype` occupies; fails for unsupported formats, rows
    /// that are not whole blocks, and sizes that overflow.
    pub fn byte_len(dtype: DType, rows: usize, cols: usize) -> Result<usize, QuantError> {
        check_supported(dtype)?;
        let block_len = dtype.block_len();
        if !cols.is_multiple_of(block_len) {
            return Err(QuantError::ColsNotWholeBlocks {
                dtype,
                block_len,
                cols,
            });
        }
        let row_bytes = cols / block_len * dtype.block_bytes();
        rows.checked_mul(row_bytes)
            .filter(|_| rows.checked_mul(cols).is_some())
            .ok_or(QuantError::ShapeOverflow { dtype, rows, cols })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The matrix of rows `rows` alone (a head station's slice of the vocabulary); `None` when
    /// the range is empty or passes the last row.
    pub fn rows_slice(&self, rows: std::ops::Range<usize>) -> Option<QMatrix<'a>> {
        if rows.is_empty() || rows.end > self.rows {
            return None;
        }
        Some(QMatrix {
            rows: rows.len(),
            data: &self.data[rows.start * self.row_bytes..rows.end * self.row_bytes],
            ..*self
        })
    }

    /// The stored bytes of row `r`.
    #[inline]
    fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Writes row `r` as f32 into `out[..cols]` (embedding lookup).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        debug_assert!(r < self.rows);
        let out = &mut out[..self.cols];
        // QMatrix::new accepted dtype and sizes, so this cannot fail.
        dequantize_unchecked(self.dtype, self.row(r), out);
    }
}

/// Reusable buffers (activation quantization), created once per session, never per token.
#[derive(Default, Debug)]
pub struct MatmulScratch {
    acts: BlockActs,
}

impl MatmulScratch {
    /// Room for the activations of `values` inputs (a batch times the widest row), so that
    /// matmuls of that batch allocate nothing.
    pub fn reserve(&mut self, values: usize) {
        self.acts.reserve(values);
    }
}

/// out[t*rows + r] = sum_c W[r,c] * x[t*cols + c], t in 0..n.  x.len() == n*cols, out.len() == n*rows.
///
/// Uses the fastest kernel this machine has. Block formats quantize `x` to 16-bit blocks first,
/// so results differ from an f32 dequantized product by the activation rounding (relative error
/// of order 1/65534 per block, mostly cancelling in the sum).
///
/// # Panics
/// If `x` or `out` do not have the lengths above (a caller bug, not bad input).
pub fn matmul(w: &QMatrix, x: &[f32], n: usize, out: &mut [f32], scratch: &mut MatmulScratch) {
    matmul_with(best_kernel(), w, x, n, out, scratch);
}

/// Converts stored bytes to f32; `out.len()` must equal the number of stored values.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_supported(dtype)?;
    let block_bytes = dtype.block_bytes();
    if !bytes.len().is_multiple_of(block_bytes) {
        return Err(QuantError::BytesNotWholeBlocks {
            dtype,
            block_bytes,
            len: bytes.len(),
        });
    }
    let elements = bytes.len() / block_bytes * dtype.block_len();
    if out.len() != elements {
        return Err(QuantError::OutputLength {
            dtype,
            elements,
            out_len: out.len(),
        });
    }
    dequantize_unchecked(dtype, bytes, out);
    Ok(())
}

/// `dequantize` after the checks: supported dtype, whole blocks, matching `out`.
fn dequantize_unchecked(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    fn blocks<B: QuantBlock>(bytes: &[u8], out: &mut [f32]) {
        let len = B::DTYPE.block_len();
        for (b, o) in as_blocks::<B>(bytes).iter().zip(out.chunks_exact_mut(len)) {
            b.to_float(o);
        }
    }
    match dtype {
        DType::F32 => float::dequantize_f32(bytes, out),
        DType::F16 => float::dequantize_f16(bytes, out),
        DType::Bf16 => float::dequantize_bf16(bytes, out),
        DType::Q8_0 => blocks::<BlockQ8_0>(bytes, out),
        DType::Q4_0 => blocks::<BlockQ4_0>(bytes, out),
        DType::Q4_1 => blocks::<BlockQ4_1>(bytes, out),
        DType::Q5_0 => blocks::<BlockQ5_0>(bytes, out),
        DType::Q5_1 => blocks::<BlockQ5_1>(bytes, out),
        DType::Q4K => blocks::<BlockQ4K>(bytes, out),
        DType::Q5K => blocks::<BlockQ5K>(bytes, out),
        DType::Q6K => blocks::<BlockQ6K>(bytes, out),
    }
}

/// ggml-compatible reference quantization (round-to-nearest as ggml's `quantize_row_*_ref`).
/// Replaces the contents of `out` with the stored bytes of `x`.
pub fn quantize(dtype: DType, x: &[f32], out: &mut Vec<u8>) -> Result<(), QuantError> {
    check_supported(dtype)?;
    let block_len = dtype.block_len();
    if !x.len().is_multiple_of(block_len) {
        return Err(QuantError::ValuesNotWholeBlocks {
            dtype,
            block_len,
            len: x.len(),
        });
    }
    fn blocks<B: QuantBlock>(x: &[f32], out: &mut Vec<u8>) {
        out.resize(x.len() / B::DTYPE.block_len() * B::DTYPE.block_bytes(), 0);
        let mut blocks = Vec::with_capacity(x.len() / B::DTYPE.block_len());
        blocks.extend(x.chunks_exact(B::DTYPE.block_len()).map(B::from_float));
        for (dst, b) in out.chunks_exact_mut(B::DTYPE.block_bytes()).zip(&blocks) {
            // SAFETY: B is a byte-only struct of exactly block_bytes bytes (QuantBlock contract).
            let bytes =
                unsafe { std::slice::from_raw_parts((b as *const B).cast::<u8>(), size_of::<B>()) };
            dst.copy_from_slice(bytes);
        }
    }
    out.clear();
    match dtype {
        DType::F32 => float::quantize_f32(x, out),
        DType::F16 => float::quantize_f16(x, out),
        DType::Bf16 => float::quantize_bf16(x, out),
        DType::Q8_0 => blocks::<BlockQ8_0>(x, out),
        DType::Q4_0 => blocks::<BlockQ4_0>(x, out),
        DType::Q4_1 => blocks::<BlockQ4_1>(x, out),
        DType::Q5_0 => blocks::<BlockQ5_0>(x, out),
        DType::Q5_1 => blocks::<BlockQ5_1>(x, out),
        DType::Q4K => blocks::<BlockQ4K>(x, out),
        DType::Q5K => blocks::<BlockQ5K>(x, out),
        DType::Q6K => blocks::<BlockQ6K>(x, out),
    }
    Ok(())
}

#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Scalar,
    Avx2,
    Simd128,
}

/// Scalar always; Avx2 when detected at runtime; Simd128 when compiled with target_feature simd128.
#[doc(hidden)]
pub fn available_kernels() -> Vec<Kernel> {
    ALL_KERNELS
        .into_iter()
        .filter(|&k| kernel_available(k))
        .collect()
}

/// Every kernel, scalar first and faster ones after it.
const ALL_KERNELS: [Kernel; 3] = [Kernel::Scalar, Kernel::Avx2, Kernel::Simd128];

/// Whether `kernel` runs on this machine (checked on every matmul, so no allocation).
fn kernel_available(kernel: Kernel) -> bool {
    match kernel {
        Kernel::Scalar => true,
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => avx2::detected(),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Kernel::Simd128 => true,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

fn best_kernel() -> Kernel {
    static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    // available_kernels lists Scalar first and faster kernels after it.
    *BEST.get_or_init(|| *available_kernels().last().unwrap_or(&Kernel::Scalar))
}

/// Rows per tile in multi-token matmuls: a tile's weights stay in L1 while every token group
/// streams past them.
const ROW_TILE: usize = 16;
/// Tokens per weight-row pass: each unpacked weight block serves this many tokens.
pub const TOKEN_GROUP: usize = 4;

/// Drives a row kernel over [rows × n]: for each tile of rows and each group of up to
/// `TOKEN_GROUP` tokens starting at `$t0`, evaluates `$dot` (an expression of `$r`, `$t0` and the
/// const `$nt`, returning `[f32; $nt]`) and stores the results token-major into `$out`.
macro_rules! tiled_matmul {
    ($rows:expr, $n:expr, $out:expr, |$r:ident, $t0:ident, $nt:ident| $dot:expr) => {{
        let rows: usize = $rows;
        let n: usize = $n;
        let out: &mut [f32] = $out;
        let mut r0 = 0;
        while r0 < rows {
            let r1 = (r0 + $crate::quant::ROW_TILE).min(rows);
            let mut $t0 = 0;
            while $t0 < n {
                let group = (n - $t0).min($crate::quant::TOKEN_GROUP);
                macro_rules! group_of {
                    ($k:literal) => {{
                        const $nt: usize = $k;
                        for $r in r0..r1 {
                            let v: [f32; $nt] = $dot;
                            for (i, v) in v.into_iter().enumerate() {
                                out[($t0 + i) * rows + $r] = v;
                            }
                        }
                    }};
                }
                match group {
                    4 => group_of!(4),
                    3 => group_of!(3),
                    2 => group_of!(2),
                    _ => group_of!(1),
                }
                $t0 += group;
            }
            r0 = r1;
        }
    }};
}
#[allow(unused_imports)] // used by the SIMD modules only
pub(crate) use tiled_matmul;

#[doc(hidden)]
pub fn matmul_with(
    kernel: Kernel,
    w: &QMatrix,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    assert_eq!(x.len(), n * w.cols, "matmul: x must hold n * cols values");
    assert_eq!(
        out.len(),
        n * w.rows,
        "matmul: out must hold n * rows values"
    );
    assert!(
        kernel_available(kernel),
        "matmul: kernel {kernel:?} is not available here"
    );
    if n == 0 || w.rows == 0 {
        return;
    }
    let float_format = match w.dtype {
        DType::F32 => Some(FloatFormat::F32),
        DType::F16 => Some(FloatFormat::F16),
        DType::Bf16 => Some(FloatFormat::Bf16),
        _ => None,
    };
    if let Some(format) = float_format {
        match kernel {
            Kernel::Scalar => scalar_float(format, w, x, n, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Avx2 is listed by available_kernels only when its features were detected.
            Kernel::Avx2 => unsafe { avx2::matmul_float(format, w, x, n, out) },
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128 => simd128::matmul_float(format, w, x, n, out),
            #[allow(unreachable_patterns)]
            _ => unreachable!("kernel availability was asserted"),
        }
        return;
    }

    let acts = &mut scratch.acts;
    acts.quantize(x);
    let matmul = block_kernel(kernel, w.dtype);
    // SAFETY: an architecture's kernels are listed only for it, and `kernel` was asserted to
    // be available on this machine.
    unsafe { matmul(w, &*acts, n, out) }
}

/// A block-format matmul over quantized activations: `out[t*rows + r] = W[r] · x[t]`.
/// `unsafe` because architecture kernels need their CPU features.
pub(crate) type BlockMatmul = unsafe fn(&QMatrix, &BlockActs, usize, &mut [f32]);

/// The generic kernel of every block format: the reference each architecture's is tested
/// against. Adding a format = its block type, a line here, and optionally a line in an
/// architecture's table.
fn generic_kernel(dtype: DType) -> BlockMatmul {
    match dtype {
        DType::Q8_0 => scalar_blocks::<BlockQ8_0>,
        DType::Q4_0 => scalar_blocks::<BlockQ4_0>,
        DType::Q4_1 => scalar_blocks::<BlockQ4_1>,
        DType::Q5_0 => scalar_blocks::<BlockQ5_0>,
        DType::Q5_1 => scalar_blocks::<BlockQ5_1>,
        DType::Q4K => scalar_blocks::<BlockQ4K>,
        DType::Q5K => scalar_blocks::<BlockQ5K>,
        DType::Q6K => scalar_blocks::<BlockQ6K>,
        DType::F32 | DType::F16 | DType::Bf16 => unreachable!("{dtype} is a float format"),
    }
}

/// The formats an architecture accelerates, each with its kernel (`avx2::KERNELS`,
/// `simd128::KERNELS`: the one table, kept beside the kernels it names).
fn arch_kernels(kernel: Kernel) -> &'static [(DType, BlockMatmul)] {
    match kernel {
        Kernel::Scalar => &[],
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => avx2::KERNELS,
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Kernel::Simd128 => simd128::KERNELS,
        #[allow(unreachable_patterns)]
        _ => &[],
    }
}

/// `kernel`'s own kernel for `dtype` when its table lists one, else the generic kernel.
fn block_kernel(kernel: Kernel, dtype: DType) -> BlockMatmul {
    arch_kernels(kernel)
        .iter()
        .find(|(d, _)| *d == dtype)
        .map_or_else(|| generic_kernel(dtype), |&(_, f)| f)
}

/// Whether `kernel` has a kernel of its own for `dtype` (rather than the generic one).
#[doc(hidden)]
pub fn accelerates(kernel: Kernel, dtype: DType) -> bool {
    arch_kernels(kernel).iter().any(|(d, _)| *d == dtype)
}

/// Scalar reference for the float formats.
fn scalar_float(format: FloatFormat, w: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    for t in 0..n {
        let xt = &x[t * w.cols..(t + 1) * w.cols];
        for r in 0..w.rows {
            out[t * w.rows + r] = float::dot_row(format, w.row(r), xt);
        }
    }
}

/// Scalar reference for the block formats (an `unsafe fn` only to share [`BlockMatmul`]'s type:
/// it needs nothing).
unsafe fn scalar_blocks<B: QuantBlock>(w: &QMatrix, acts: &BlockActs, n: usize, out: &mut [f32]) {
    let blocks_per_row = w.cols / ACT_BLOCK;
    for t in 0..n {
        let act = acts.token(t, blocks_per_row);
        for r in 0..w.rows {
            out[t * w.rows + r] = B::vec_dot(as_blocks::<B>(w.row(r)), act);
        }
    }
}

#[cfg(test)]
mod tests;
