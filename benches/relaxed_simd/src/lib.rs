// q4_1-weight x i16-activation dot product benchmark: SIMD128 vs relaxed SIMD.
// Build twice: RUSTFLAGS="-C target-feature=+simd128" and "+simd128,+relaxed-simd".
#![allow(static_mut_refs)]
use core::arch::wasm32::*;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockW {
    d: f32,
    m: f32,
    qs: [u8; 16], // element j = low nibble of qs[j], element j+16 = high nibble
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockX {
    d: f32,
    s: f32, // d * sum(qs)
    qs: [i16; 32],
}

// split activation: x = 256*hi + lo, hi/lo in -128..127
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BlockXS {
    hi: [i8; 32],
    lo: [i8; 32],
}

static mut R: usize = 0;
static mut B: usize = 0;
static mut NMAT: usize = 0;
static mut W: Vec<BlockW> = Vec::new();
static mut X: Vec<BlockX> = Vec::new();
static mut XS: Vec<BlockXS> = Vec::new();
static mut OUT: Vec<f32> = Vec::new();
static mut RNG: u64 = 1;

fn rnd() -> u32 {
    unsafe {
        RNG = RNG.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (RNG >> 33) as u32
    }
}
fn rndf() -> f32 {
    (rnd() as f32) / (2147483648.0) // 0..1
}

fn fill_x(mode: u32) {
    unsafe {
        for b in 0..B {
            let mut sum = 0i32;
            for j in 0..32 {
                let v: i32 = match mode {
                    0 => (rnd() % 65279) as i32 - 32639, // full legal range
                    1 => 32639,
                    2 => -32639,
                    3 => if j % 2 == 0 { 32639 } else { -32639 },
                    4 => -32768 + (rnd() % 128) as i32, // near bottom (also legal)
                    _ => ((rndf() - 0.5) * 2000.0) as i32,
                };
                X[b].qs[j] = v as i16;
                sum += v;
            }
            X[b].d = 1e-4 * (0.5 + rndf());
            X[b].s = X[b].d * sum as f32;
        }
    }
}

fn fill_w(mode: u32) {
    unsafe {
        for blk in W.iter_mut() {
            blk.d = 0.01 * (rndf() - 0.5);
            blk.m = 0.01 * (rndf() - 0.5);
            for j in 0..16 {
                blk.qs[j] = match mode {
                    0 => (rnd() & 0xff) as u8,
                    1 => 0xff,
                    _ => 0x0f,
                };
            }
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn setup(r: usize, b: usize, nmat: usize, seed: u32) {
    unsafe {
        R = r;
        B = b;
        NMAT = nmat;
        RNG = seed as u64 * 2654435761 + 12345;
        W = vec![BlockW { d: 0.0, m: 0.0, qs: [0; 16] }; r * b * nmat];
        X = vec![BlockX { d: 0.0, s: 0.0, qs: [0; 32] }; b];
        XS = vec![BlockXS { hi: [0; 32], lo: [0; 32] }; b];
        OUT = vec![0.0; r];
        fill_w(0);
        fill_x(0);
    }
}

#[inline(always)]
fn split_x() {
    unsafe {
        for b in 0..B {
            let x = &X[b];
            let s = &mut XS[b];
            for j in 0..32 {
                let v = x.qs[j] as i32;
                let lo = v as i8;
                let hi = ((v - lo as i32) >> 8) as i8;
                s.lo[j] = lo;
                s.hi[j] = hi;
            }
        }
    }
}

// ---------- kernels: return i32x4 whose horizontal sum is the integer block dot ----------

#[inline(always)]
unsafe fn kern_a(w: &BlockW, x: &BlockX) -> v128 {
    unsafe {
        let q = v128_load(w.qs.as_ptr() as *const v128);
        let lo = v128_and(q, u8x16_splat(0x0f));
        let hi = u8x16_shr(q, 4);
        let xp = x.qs.as_ptr() as *const v128;
        let d0 = i32x4_dot_i16x8(u16x8_extend_low_u8x16(lo), v128_load(xp));
        let d1 = i32x4_dot_i16x8(u16x8_extend_high_u8x16(lo), v128_load(xp.add(1)));
        let d2 = i32x4_dot_i16x8(u16x8_extend_low_u8x16(hi), v128_load(xp.add(2)));
        let d3 = i32x4_dot_i16x8(u16x8_extend_high_u8x16(hi), v128_load(xp.add(3)));
        i32x4_add(i32x4_add(d0, d1), i32x4_add(d2, d3))
    }
}

// B16: i16x8 relaxed dot for hi and lo, then combine with i32x4_dot_i16x8(splat 256 / splat 1)
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn kern_b16(w: &BlockW, s: &BlockXS) -> v128 {
    unsafe {
        let q = v128_load(w.qs.as_ptr() as *const v128);
        let wl = v128_and(q, u8x16_splat(0x0f));
        let wh = u8x16_shr(q, 4);
        let hp = s.hi.as_ptr() as *const v128;
        let lp = s.lo.as_ptr() as *const v128;
        let h = i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(hp), wl),
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(hp.add(1)), wh),
        );
        let l = i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(lp), wl),
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(lp.add(1)), wh),
        );
        i32x4_add(i32x4_dot_i16x8(h, i16x8_splat(256)), i32x4_dot_i16x8(l, i16x8_splat(1)))
    }
}

// B16e: same, but combine with dot(h,256) + extadd_pairwise(l)
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn kern_b16e(w: &BlockW, s: &BlockXS) -> v128 {
    unsafe {
        let q = v128_load(w.qs.as_ptr() as *const v128);
        let wl = v128_and(q, u8x16_splat(0x0f));
        let wh = u8x16_shr(q, 4);
        let hp = s.hi.as_ptr() as *const v128;
        let lp = s.lo.as_ptr() as *const v128;
        let h = i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(hp), wl),
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(hp.add(1)), wh),
        );
        let l = i16x8_add(
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(lp), wl),
            i16x8_relaxed_dot_i8x16_i7x16(v128_load(lp.add(1)), wh),
        );
        i32x4_add(i32x4_dot_i16x8(h, i16x8_splat(256)), i32x4_extadd_pairwise_i16x8(l))
    }
}

// B32: i32x4_relaxed_dot_i8x16_i7x16_add chains, combine (hi << 8) + lo
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn kern_b32(w: &BlockW, s: &BlockXS) -> v128 {
    unsafe {
        let q = v128_load(w.qs.as_ptr() as *const v128);
        let wl = v128_and(q, u8x16_splat(0x0f));
        let wh = u8x16_shr(q, 4);
        let hp = s.hi.as_ptr() as *const v128;
        let lp = s.lo.as_ptr() as *const v128;
        let z = i32x4_splat(0);
        let h = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load(hp), wl, z);
        let h = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load(hp.add(1)), wh, h);
        let l = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load(lp), wl, z);
        let l = i32x4_relaxed_dot_i8x16_i7x16_add(v128_load(lp.add(1)), wh, l);
        i32x4_add(i32x4_shl(h, 8), l)
    }
}

fn scalar_dot(w: &BlockW, x: &BlockX) -> i32 {
    let mut s = 0i32;
    for j in 0..16 {
        s += (w.qs[j] & 15) as i32 * x.qs[j] as i32;
        s += (w.qs[j] >> 4) as i32 * x.qs[j + 16] as i32;
    }
    s
}

#[inline(always)]
fn hsum_i(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v) + i32x4_extract_lane::<1>(v) + i32x4_extract_lane::<2>(v) + i32x4_extract_lane::<3>(v)
}
#[inline(always)]
fn hsum_f(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v)
}

// ---------- full matvec for matrix `mat` ----------

macro_rules! matvec {
    ($name:ident, $kern:ident, $xarr:ident, $split:expr) => {
        #[inline(never)]
        unsafe fn $name(mat: usize) -> f32 {
            unsafe {
                if $split {
                    split_x();
                }
                let (r, b) = (R, B);
                let w = &W[mat * r * b..(mat + 1) * r * b];
                let xa = &X[..b];
                let xk = &$xarr[..b];
                for row in 0..r {
                    let wr = &w[row * b..(row + 1) * b];
                    let mut acc = f32x4_splat(0.0);
                    let mut accm = 0.0f32;
                    for k in 0..b {
                        let d = $kern(&wr[k], &xk[k]);
                        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(d), f32x4_splat(wr[k].d * xa[k].d)));
                        accm += wr[k].m * xa[k].s;
                    }
                    OUT[row] = hsum_f(acc) + accm;
                }
                OUT[0] + OUT[r - 1]
            }
        }
    };
}

matvec!(mv_a, kern_a, X, false);
#[cfg(target_feature = "relaxed-simd")]
matvec!(mv_b16, kern_b16, XS, true);
#[cfg(target_feature = "relaxed-simd")]
matvec!(mv_b16e, kern_b16e, XS, true);
#[cfg(target_feature = "relaxed-simd")]
matvec!(mv_b32, kern_b32, XS, true);

unsafe fn mv_scalar(mat: usize) {
    unsafe {
        let (r, b) = (R, B);
        for row in 0..r {
            let mut acc = 0.0f64;
            for k in 0..b {
                let wb = &W[(mat * r + row) * b + k];
                let xb = &X[k];
                acc += (wb.d * xb.d) as f64 * scalar_dot(wb, xb) as f64 + (wb.m * xb.s) as f64;
            }
            OUT[row] = acc as f32;
        }
    }
}

/// variant: 0=A, 1=B16, 2=B16e, 3=B32. Runs `iters` matvecs cycling over the matrices.
#[unsafe(no_mangle)]
pub extern "C" fn bench(variant: u32, iters: u32) -> f32 {
    let mut cs = 0.0f32;
    unsafe {
        for it in 0..iters as usize {
            let mat = it % NMAT;
            cs += match variant {
                0 => mv_a(mat),
                #[cfg(target_feature = "relaxed-simd")]
                1 => mv_b16(mat),
                #[cfg(target_feature = "relaxed-simd")]
                2 => mv_b16e(mat),
                #[cfg(target_feature = "relaxed-simd")]
                3 => mv_b32(mat),
                _ => core::arch::wasm32::unreachable(),
            };
        }
    }
    cs
}

#[unsafe(no_mangle)]
pub extern "C" fn has_relaxed() -> u32 {
    cfg!(target_feature = "relaxed-simd") as u32
}

unsafe fn kern_dispatch(variant: u32, w: &BlockW, x: &BlockX, s: &BlockXS) -> i32 {
    unsafe {
        let _ = s;
        match variant {
            0 => hsum_i(kern_a(w, x)),
            #[cfg(target_feature = "relaxed-simd")]
            1 => hsum_i(kern_b16(w, s)),
            #[cfg(target_feature = "relaxed-simd")]
            2 => hsum_i(kern_b16e(w, s)),
            #[cfg(target_feature = "relaxed-simd")]
            3 => hsum_i(kern_b32(w, s)),
            _ => i32::MIN,
        }
    }
}

/// Returns number of integer block-dot mismatches vs scalar over all blocks of all matrices,
/// for random data plus edge-case data sets (weight/activation modes). Also checks the float
/// matvec against an f64 scalar reference; max relative error (x1e9, as u32) stored in LAST_ERR.
static mut LAST_ERR: f32 = 0.0;
#[unsafe(no_mangle)]
pub extern "C" fn verify(variant: u32) -> u32 {
    let mut bad = 0u32;
    unsafe {
        let mut maxerr = 0.0f32;
        let cases: [(u32, u32); 8] = [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 1), (1, 2), (1, 4)];
        for (wm, xm) in cases {
            // edge-weight modes overwrite only matrix data temporarily, regenerate at end
            fill_w(wm);
            fill_x(xm);
            split_x();
            for i in 0..W.len() {
                let k = i % B;
                let want = scalar_dot(&W[i], &X[k]);
                let got = kern_dispatch(variant, &W[i], &X[k], &XS[k]);
                if got != want {
                    bad += 1;
                }
            }
            // float check on matrix 0 and last
            for mat in [0, NMAT - 1] {
                mv_scalar(mat);
                let reff: Vec<f32> = OUT.clone();
                let _ = match variant {
                    0 => mv_a(mat),
                    #[cfg(target_feature = "relaxed-simd")]
                    1 => mv_b16(mat),
                    #[cfg(target_feature = "relaxed-simd")]
                    2 => mv_b16e(mat),
                    #[cfg(target_feature = "relaxed-simd")]
                    3 => mv_b32(mat),
                    _ => 0.0,
                };
                let scale = reff.iter().fold(0.0f32, |a, v| a.max(v.abs())).max(1e-30);
                for (a, b) in reff.iter().zip(OUT.iter()) {
                    maxerr = maxerr.max((a - b).abs() / scale);
                }
            }
        }
        LAST_ERR = maxerr;
        RNG = 777;
        fill_w(0);
        fill_x(0);
    }
    bad
}

#[unsafe(no_mangle)]
pub extern "C" fn last_err() -> f32 {
    unsafe { LAST_ERR }
}
