//! Matrix kernels on GGML storage formats.
//!
//! Weights stay in their stored bytes (`QMatrix` borrows them); nothing dequantizes a whole tensor.
//! `matmul` computes `out = x · Wᵀ` for `n` tokens at once:
//! - float formats (f32, f16, bf16) compute in f32, the 16-bit formats widened exactly;
//! - block formats (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k) first quantize `x` to
//!   16-bit blocks of 32 (see `act`) and take integer dot products per block, then scale.
//!
//! Files, each using only those listed before it:
//! - `error.rs` (`QuantError`), `act.rs` (the 16-bit activation blocks), `float.rs` (f16 and
//!   bf16 conversions, the float formats), `tile.rs` (`tiled_matmul!`: how a kernel walks rows
//!   and tokens), `matrix.rs` (`QMatrix`);
//! - `block.rs`: `QuantBlock`, the trait every block format implements on its `#[repr(C)]`
//!   struct (`to_float`, `from_float`, the scalar reference `vec_dot`), `SubBlocks`,
//!   `LegacyScales`, and `as_blocks` (bytes to typed blocks);
//! - one file per block family (`q8_0`, `q4`, `q5`, `kquant`): the structs and their impls;
//! - `format.rs`: the format table, `format(dtype)`, the one `match` over `DType`; a block
//!   format's entry (dequantize, quantize, generic kernel) is built from its block type;
//! - `avx2.rs` (x86_64, chosen at run time) and `simd128.rs` (wasm32, chosen at compile time):
//!   SIMD kernels over typed blocks (`&[BlockQ4K]`, fields read by name), with one trait per
//!   family for what they need of a format (`LegacyBlock`/`SimdBlock`, `KBlock`) and a
//!   `KERNELS` table of the formats each accelerates;
//! - `pool.rs` (a small spinning thread pool, one job at a time) and `threads.rs` (the
//!   process-wide pool a matmul splits its rows across; bit-identical at every count: each row
//!   is one thread's dot);
//! - this file, on top: `matmul` (which architecture runs, then the format's kernel or the
//!   architecture's own), `dequantize`, `quantize`.
//!
//! Adding a block format: its struct and `QuantBlock` impl in a family file, and one line in
//! `format`. A SIMD kernel is optional: the family trait's impl and one `KERNELS` line in
//! `avx2.rs` / `simd128.rs`.

mod act;
#[cfg(target_arch = "x86_64")]
mod avx2;
mod block;
mod error;
pub(crate) mod float;
mod format;
mod kquant;
mod matrix;
#[cfg(threads)]
mod pool;
mod q4;
mod q5;
mod q8_0;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
pub(crate) mod threads;
mod tile;

pub use error::QuantError;
pub use knot::DType;
pub use matrix::QMatrix;
pub use threads::{
    available_threads, set_threads, threads, with_threads, ThreadsError, MAX_THREADS,
};
#[cfg(all(threads, target_arch = "wasm32"))]
pub use threads::{begin_pool, join_pool, use_pool, PoolWorker};
pub use tile::TOKEN_GROUP;

use act::BlockActs;
use format::{format, scalar_float, BlockMatmul, Matmul};

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

/// `out[t*rows + r] = sum_c W[r,c] * x[t*cols + c]`, t in 0..n; `x.len() == n*cols`,
/// `out.len() == n*rows`.
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
    (format(dtype).dequantize)(bytes, out);
    Ok(())
}

impl QMatrix<'_> {
    /// Writes row `r` as f32 into `out[..cols]` (embedding lookup).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        debug_assert!(r < self.rows());
        let out = &mut out[..self.cols()];
        (format(self.dtype()).dequantize)(self.row(r), out);
    }
}

/// ggml-compatible reference quantization (round-to-nearest as ggml's `quantize_row_*_ref`).
/// Replaces the contents of `out` with the stored bytes of `x`.
pub fn quantize(dtype: DType, x: &[f32], out: &mut Vec<u8>) -> Result<(), QuantError> {
    let block_len = dtype.block_len();
    if !x.len().is_multiple_of(block_len) {
        return Err(QuantError::ValuesNotWholeBlocks {
            dtype,
            block_len,
            len: x.len(),
        });
    }
    out.clear();
    (format(dtype).quantize)(x, out);
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

pub(crate) fn best_kernel() -> Kernel {
    static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    // available_kernels lists Scalar first and faster kernels after it.
    *BEST.get_or_init(|| *available_kernels().last().unwrap_or(&Kernel::Scalar))
}

#[doc(hidden)]
pub fn matmul_with(
    kernel: Kernel,
    w: &QMatrix,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) {
    matmuls_with(kernel, &mut [(w, out)], x, n, scratch);
}

/// Several matmuls of the same `x` — a layer's q, k and v, or its gate and up — each exactly as
/// [`matmul`] computes it, in one hand-off to the matmul threads and with `x` quantized once.
///
/// # Panics
/// As [`matmul`], for each pair; or more than [`MAX_FUSED`] matrices.
pub fn matmuls(
    ws: &mut [(&QMatrix, &mut [f32])],
    x: &[f32],
    n: usize,
    scratch: &mut MatmulScratch,
) {
    matmuls_with(best_kernel(), ws, x, n, scratch);
}

pub use threads::MAX_FUSED;

#[doc(hidden)]
pub fn matmuls_with(
    kernel: Kernel,
    ws: &mut [(&QMatrix, &mut [f32])],
    x: &[f32],
    n: usize,
    scratch: &mut MatmulScratch,
) {
    assert!(
        ws.len() <= MAX_FUSED,
        "matmuls: at most {MAX_FUSED} matrices"
    );
    for (w, out) in ws.iter() {
        assert_eq!(x.len(), n * w.cols(), "matmul: x must hold n * cols values");
        assert_eq!(
            out.len(),
            n * w.rows(),
            "matmul: out must hold n * rows values"
        );
    }
    assert!(
        kernel_available(kernel),
        "matmul: kernel {kernel:?} is not available here"
    );
    let Some((first, _)) = ws.first() else {
        return;
    };
    if n == 0 {
        return;
    }
    let cols = first.cols();
    // Block formats share one quantization of `x` (it does not depend on the format).
    let acts = &mut scratch.acts;
    let blocks = ws
        .iter()
        .any(|(w, _)| matches!(format(w.dtype()).matmul, Matmul::Blocks(_)));
    if blocks {
        acts.quantize(x);
    }
    let acts = &*acts;
    let mut kernels = [RowKernel::Float(Kernel::Scalar, float::FloatFormat::F32); MAX_FUSED];
    for (k, (w, _)) in kernels.iter_mut().zip(ws.iter()) {
        *k = match format(w.dtype()).matmul {
            Matmul::Float(format) => RowKernel::Float(kernel, format),
            Matmul::Blocks(generic) => {
                RowKernel::Blocks(arch_kernel(kernel, w.dtype()).unwrap_or(generic))
            }
        };
    }
    let run = |m: usize, w: &QMatrix, out: &mut [f32]| match kernels[m] {
        RowKernel::Float(kernel, format) => match kernel {
            Kernel::Scalar => scalar_float(format, w, x, n, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: Avx2 is listed by available_kernels only when its features were detected.
            Kernel::Avx2 => unsafe { avx2::matmul_float(format, w, x, n, out) },
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128 => simd128::matmul_float(format, w, x, n, out),
            #[allow(unreachable_patterns)]
            _ => unreachable!("kernel availability was asserted"),
        },
        // SAFETY: an architecture's kernels are listed only for it, and `kernel` was asserted
        // to be available on this machine.
        RowKernel::Blocks(matmul) => unsafe { matmul(w, acts, n, out) },
    };
    threads::split_rows(ws, cols, n, &run);
}

/// What computes one matrix's rows: a float format under a kernel, or a block kernel over the
/// quantized activations.
#[derive(Clone, Copy)]
enum RowKernel {
    Float(Kernel, float::FloatFormat),
    Blocks(BlockMatmul),
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

/// `kernel`'s own kernel for `dtype` when its table lists one (else the format's generic
/// kernel serves).
fn arch_kernel(kernel: Kernel, dtype: DType) -> Option<BlockMatmul> {
    arch_kernels(kernel)
        .iter()
        .find(|(d, _)| *d == dtype)
        .map(|&(_, f)| f)
}

/// Whether `kernel` has a kernel of its own for `dtype` (rather than the generic one).
#[doc(hidden)]
pub fn accelerates(kernel: Kernel, dtype: DType) -> bool {
    arch_kernels(kernel).iter().any(|(d, _)| *d == dtype)
}

#[cfg(test)]
mod tests;
