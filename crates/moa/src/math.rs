//! `exp` and `ln` from basic IEEE operations only (+, −, ×, ÷, rounding, bit casts), so the same
//! inputs give the same bits natively and in wasm; libm's `exp`/`ln` differ between targets in
//! the last bit, and one bit is enough to flip a seeded draw.

use std::f64::consts::{LN_2, LOG2_E, SQRT_2};

/// 2^k for any integer k, exact wherever the result is a normal or subnormal f64.
fn pow2(k: i32) -> f64 {
    // Normal exponents are built from bits; beyond them, two exact steps.
    let normal = |e: i32| f64::from_bits(((e + 1023) as u64) << 52);
    match k {
        -1022..=1023 => normal(k),
        k if k > 1023 => f64::INFINITY,
        k => normal(-1022) * normal((k + 1022).max(-1022)),
    }
}

/// e^x: x = k·ln2 + r with |r| ≤ ln2/2, then 14 Taylor terms of e^r (the last is below 1e-17).
pub fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < -746.0 {
        return 0.0;
    }
    if x > 710.0 {
        return f64::INFINITY;
    }
    let k = (x * LOG2_E).round();
    let r = x - k * LN_2;
    let mut term = 1.0f64;
    let mut sum = 1.0f64;
    for i in 1..14 {
        term = term * r / i as f64;
        sum += term;
    }
    sum * pow2(k as i32)
}

/// Natural logarithm: x = m·2^e with m in (√½, √2], then ln m = 2·atanh((m−1)/(m+1)) as a series
/// in s² ≤ 0.0295 (12 terms: the next is below 1e-19).
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x == f64::INFINITY {
        return f64::INFINITY;
    }
    // Subnormals: scale into the normal range first (exact).
    let (x, bias) = if x < f64::MIN_POSITIVE {
        (x * pow2(54), -54)
    } else {
        (x, 0)
    };
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i32 - 1023 + bias;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut power = s;
    let mut series = 0.0f64;
    for j in 0..12 {
        series += power / (2 * j + 1) as f64;
        power *= s2;
    }
    e as f64 * LN_2 + 2.0 * series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_libm_closely() {
        for i in -7000..=7000 {
            let x = i as f64 * 0.1;
            let (a, b) = (exp(x), x.exp());
            if b == 0.0 || b.is_infinite() {
                assert_eq!(a, b, "x={x}");
            } else if b < f64::MIN_POSITIVE {
                // Subnormal results keep fewer bits.
                assert!(
                    (a - b).abs() <= 1e-14 * f64::MIN_POSITIVE,
                    "x={x} det={a} std={b}"
                );
            } else {
                // One rounded ln2 in the range reduction: the error grows with |x| (2e-14 at 700).
                assert!(((a - b) / b).abs() < 1e-13, "x={x} det={a} std={b}");
            }
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert!(exp(f64::NAN).is_nan());
    }

    #[test]
    fn ln_matches_libm_closely() {
        let mut x = 1e-310f64;
        while x < 1e300 {
            let (a, b) = (ln(x), x.ln());
            assert!(
                (a - b).abs() <= 1e-14 * b.abs().max(1.0),
                "x={x} det={a} std={b}"
            );
            x *= 1.37;
        }
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(0.0), f64::NEG_INFINITY);
        assert!(ln(-1.0).is_nan() && ln(f64::NAN).is_nan());
        assert_eq!(ln(f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn golden_bits_are_the_same_on_every_target() {
        // Checked natively and under wasm32 (the suite runs both).
        assert_eq!(exp(-1.2345).to_bits(), GOLDEN_EXP);
        assert_eq!(ln(0.0123).to_bits(), GOLDEN_LN);
    }
    const GOLDEN_EXP: u64 = 4598913453489276573;
    const GOLDEN_LN: u64 = 13840009938731537217;
}
