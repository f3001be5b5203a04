//! f32 vectors for the attention kernels: AVX2 + FMA + F16C (chosen at run time), wasm SIMD128,
//! and portable code for everything else.
//!
//! Every operation is lane-wise — nothing horizontal — so a lane's bits never depend on the lanes
//! beside it, nor on how many there are. SIMD128 and the portable path (a multiply, then an add)
//! therefore give the same bits as each other; AVX2's fused multiply-add rounds once instead.

#![allow(clippy::missing_safety_doc)]

/// A vector of [`Lanes::N`] f32 and the operations the kernels use.
pub(crate) trait Lanes: Copy {
    const N: usize;
    type V: Copy;

    fn splat(x: f32) -> Self::V;
    /// # Safety
    /// `N` readable f32 at `p` (any alignment).
    unsafe fn load(p: *const f32) -> Self::V;
    /// # Safety
    /// `N` writable f32 at `p` (any alignment).
    unsafe fn store(p: *mut f32, v: Self::V);
    /// `a * b + c`: fused on AVX2, a multiply then an add elsewhere.
    fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn mul(a: Self::V, b: Self::V) -> Self::V;
    fn add(a: Self::V, b: Self::V) -> Self::V;
    fn sub(a: Self::V, b: Self::V) -> Self::V;
    fn max(a: Self::V, b: Self::V) -> Self::V;
    /// Round to the nearest integer, ties to even.
    fn round(a: Self::V) -> Self::V;
    /// 2^n for integral `n` in [-126, 127] (other lanes: any value).
    fn pow2(n: Self::V) -> Self::V;
    /// `v` where `lo <= x < hi`, `fill` elsewhere.
    fn within(lo: Self::V, hi: Self::V, x: Self::V, v: Self::V, fill: Self::V) -> Self::V;
    /// `x` where `a > b`, `y` elsewhere.
    fn where_greater(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// `v` where `x >= t`, 0 elsewhere (and where `x` is NaN).
    fn keep_at_least(v: Self::V, x: Self::V, t: Self::V) -> Self::V;
    /// f16 bits to f32 (exact on every path).
    fn widen(src: &[u16], dst: &mut [f32]);

    /// e^x for x ≤ 0, and exactly 0 below −87.34 (where e^x leaves the normal range), for −∞
    /// and for NaN. Cephes' expf: x = n·ln 2 + r, |r| ≤ ln 2 / 2, e^r by a degree-6
    /// polynomial, 2^n from the exponent bits; within 2 ulp of e^x.
    #[inline(always)]
    fn exp_nonpositive(x: Self::V) -> Self::V {
        const LOWEST: f32 = -87.336_55;
        let xc = Self::max(x, Self::splat(LOWEST));
        let n = Self::round(Self::mul(xc, Self::splat(std::f32::consts::LOG2_E)));
        // ln 2 in two parts, so n·ln2_hi is exact.
        let r = Self::mul_add(n, Self::splat(-0.693_359_4), xc);
        let r = Self::mul_add(n, Self::splat(2.121_944_4e-4), r);
        let mut p = Self::splat(1.987_569_1e-4);
        for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
            p = Self::mul_add(p, r, Self::splat(c));
        }
        let y = Self::add(Self::mul_add(p, Self::mul(r, r), r), Self::splat(1.0));
        Self::keep_at_least(Self::mul(y, Self::pow2(n)), x, Self::splat(LOWEST))
    }
}

/// Portable lanes: plain Rust on arrays (the compiler vectorises what it can).
#[derive(Clone, Copy)]
pub(crate) struct Portable;

const P: usize = 4;

#[inline(always)]
fn each(f: impl Fn(usize) -> f32) -> [f32; P] {
    std::array::from_fn(f)
}

impl Lanes for Portable {
    const N: usize = P;
    type V = [f32; P];

    #[inline(always)]
    fn splat(x: f32) -> [f32; P] {
        [x; P]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [f32; P] {
        // SAFETY: P readable f32 at p, per the contract.
        unsafe { std::ptr::read_unaligned(p as *const [f32; P]) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: [f32; P]) {
        // SAFETY: P writable f32 at p, per the contract.
        unsafe { std::ptr::write_unaligned(p as *mut [f32; P], v) }
    }
    #[inline(always)]
    fn mul_add(a: [f32; P], b: [f32; P], c: [f32; P]) -> [f32; P] {
        each(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    fn mul(a: [f32; P], b: [f32; P]) -> [f32; P] {
        each(|i| a[i] * b[i])
    }
    #[inline(always)]
    fn add(a: [f32; P], b: [f32; P]) -> [f32; P] {
        each(|i| a[i] + b[i])
    }
    #[inline(always)]
    fn sub(a: [f32; P], b: [f32; P]) -> [f32; P] {
        each(|i| a[i] - b[i])
    }
    #[inline(always)]
    fn max(a: [f32; P], b: [f32; P]) -> [f32; P] {
        // As SIMD128's pmax(b, a): `a` unless b > a.
        each(|i| if a[i] < b[i] { b[i] } else { a[i] })
    }
    #[inline(always)]
    fn round(a: [f32; P]) -> [f32; P] {
        each(|i| a[i].round_ties_even())
    }
    #[inline(always)]
    fn pow2(n: [f32; P]) -> [f32; P] {
        each(|i| f32::from_bits(((n[i] as i32).wrapping_add(127) as u32).wrapping_shl(23)))
    }
    #[inline(always)]
    fn within(lo: [f32; P], hi: [f32; P], x: [f32; P], v: [f32; P], fill: [f32; P]) -> [f32; P] {
        each(|i| {
            if lo[i] <= x[i] && x[i] < hi[i] {
                v[i]
            } else {
                fill[i]
            }
        })
    }
    #[inline(always)]
    fn where_greater(a: [f32; P], b: [f32; P], x: [f32; P], y: [f32; P]) -> [f32; P] {
        each(|i| if a[i] > b[i] { x[i] } else { y[i] })
    }
    #[inline(always)]
    fn keep_at_least(v: [f32; P], x: [f32; P], t: [f32; P]) -> [f32; P] {
        each(|i| if x[i] >= t[i] { v[i] } else { 0.0 })
    }
    fn widen(src: &[u16], dst: &mut [f32]) {
        for (d, &h) in dst.iter_mut().zip(src) {
            *d = crate::quant::float::f16_to_f32(h);
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use simd128::Simd128;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128 {
    use super::Lanes;
    use std::arch::wasm32::*;

    /// wasm SIMD128: four lanes, no fused multiply-add (bit for bit as [`super::Portable`]).
    #[derive(Clone, Copy)]
    pub(crate) struct Simd128;

    impl Lanes for Simd128 {
        const N: usize = 4;
        type V = v128;

        #[inline(always)]
        fn splat(x: f32) -> v128 {
            f32x4_splat(x)
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> v128 {
            // SAFETY: 16 readable bytes at p, per the contract; v128_load is unaligned.
            unsafe { v128_load(p as *const v128) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: v128) {
            // SAFETY: 16 writable bytes at p, per the contract.
            unsafe { v128_store(p as *mut v128, v) }
        }
        #[inline(always)]
        fn mul_add(a: v128, b: v128, c: v128) -> v128 {
            f32x4_add(f32x4_mul(a, b), c)
        }
        #[inline(always)]
        fn mul(a: v128, b: v128) -> v128 {
            f32x4_mul(a, b)
        }
        #[inline(always)]
        fn add(a: v128, b: v128) -> v128 {
            f32x4_add(a, b)
        }
        #[inline(always)]
        fn sub(a: v128, b: v128) -> v128 {
            f32x4_sub(a, b)
        }
        #[inline(always)]
        fn max(a: v128, b: v128) -> v128 {
            // pmax(a, b) = a < b ? b : a.
            f32x4_pmax(a, b)
        }
        #[inline(always)]
        fn round(a: v128) -> v128 {
            f32x4_nearest(a)
        }
        #[inline(always)]
        fn pow2(n: v128) -> v128 {
            i32x4_shl(i32x4_add(i32x4_trunc_sat_f32x4(n), i32x4_splat(127)), 23)
        }
        #[inline(always)]
        fn within(lo: v128, hi: v128, x: v128, v: v128, fill: v128) -> v128 {
            v128_bitselect(v, fill, v128_and(f32x4_le(lo, x), f32x4_lt(x, hi)))
        }
        #[inline(always)]
        fn where_greater(a: v128, b: v128, x: v128, y: v128) -> v128 {
            v128_bitselect(x, y, f32x4_gt(a, b))
        }
        #[inline(always)]
        fn keep_at_least(v: v128, x: v128, t: v128) -> v128 {
            v128_and(v, f32x4_ge(x, t))
        }
        fn widen(src: &[u16], dst: &mut [f32]) {
            super::Portable::widen(src, dst)
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Avx2;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Lanes;
    use std::arch::x86_64::*;

    /// AVX2 + FMA + F16C: eight lanes, fused multiply-add. Only used inside functions compiled
    /// with those features (the kernels' `#[target_feature]` entry points), into which these
    /// `#[inline(always)]` methods are inlined; and only after `quant::Kernel::Avx2` was
    /// detected.
    #[derive(Clone, Copy)]
    pub(crate) struct Avx2;

    // SAFETY (every block below): the CPU has AVX2, FMA and F16C — these run only under the
    // detected `Kernel::Avx2` — and pointer arguments carry their callers' contracts.
    impl Lanes for Avx2 {
        const N: usize = 8;
        type V = __m256;

        #[inline(always)]
        fn splat(x: f32) -> __m256 {
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            unsafe { _mm256_storeu_ps(p, v) }
        }
        #[inline(always)]
        fn mul_add(a: __m256, b: __m256, c: __m256) -> __m256 {
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn mul(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        fn add(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_sub_ps(a, b) }
        }
        #[inline(always)]
        fn max(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_max_ps(a, b) }
        }
        #[inline(always)]
        fn round(a: __m256) -> __m256 {
            unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn pow2(n: __m256) -> __m256 {
            unsafe {
                let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
                _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
            }
        }
        #[inline(always)]
        fn within(lo: __m256, hi: __m256, x: __m256, v: __m256, fill: __m256) -> __m256 {
            unsafe {
                let inside = _mm256_and_ps(
                    _mm256_cmp_ps::<_CMP_LE_OQ>(lo, x),
                    _mm256_cmp_ps::<_CMP_LT_OQ>(x, hi),
                );
                _mm256_blendv_ps(fill, v, inside)
            }
        }
        #[inline(always)]
        fn where_greater(a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
            unsafe { _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_GT_OQ>(a, b)) }
        }
        #[inline(always)]
        fn keep_at_least(v: __m256, x: __m256, t: __m256) -> __m256 {
            unsafe { _mm256_and_ps(v, _mm256_cmp_ps::<_CMP_GE_OQ>(x, t)) }
        }
        #[inline(always)]
        fn widen(src: &[u16], dst: &mut [f32]) {
            let n = src.len().min(dst.len());
            let mut i = 0;
            while i + 8 <= n {
                // SAFETY: i + 8 <= n elements of both.
                unsafe {
                    let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                    _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                }
                i += 8;
            }
            super::Portable::widen(&src[i..n], &mut dst[i..n]);
        }
    }
}
