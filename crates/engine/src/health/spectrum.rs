//! The colour of a series: the slope of its log–log periodogram. A window of `n` values is
//! centred, tapered (Hann) and transformed; `S(f) ∝ 1/f^α` is fitted by least squares over the
//! frequencies 1 .. n/2 − 1, and α named after the nearest noise colour. Everything is basic
//! IEEE arithmetic in a fixed order (twiddles from series, logarithms from `moa::math`), so a
//! window gives the same bits natively and in wasm — the policy acting on it must not depend on
//! the platform.

use moa::math::ln;
use std::f64::consts::PI;

/// The named colours: white 0, pink 1, brown 2, blue −1, violet −2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NoiseColour {
    Violet,
    Blue,
    White,
    Pink,
    Brown,
}

impl NoiseColour {
    /// The nearest colour to a slope α (ties toward white).
    pub fn nearest(alpha: f64) -> NoiseColour {
        if alpha.is_nan() {
            return NoiseColour::White;
        }
        match alpha {
            a if a < -1.5 => NoiseColour::Violet,
            a if a < -0.5 => NoiseColour::Blue,
            a if a <= 0.5 => NoiseColour::White,
            a if a <= 1.5 => NoiseColour::Pink,
            _ => NoiseColour::Brown,
        }
    }
}

/// The periodogram's fixed parts for windows of one length: taper, twiddles, and the fit's
/// abscissae (ln f, centred).
#[derive(Debug, Clone)]
pub struct Spectrum {
    n: usize,
    taper: Vec<f64>,
    /// cos and sin of 2π·j/n for j in 0..n.
    cos: Vec<f64>,
    sin: Vec<f64>,
    /// ln k − mean for the fitted frequencies k = 1 .. n/2 − 1, and Σ of its squares.
    log_f: Vec<f64>,
    log_f_ss: f64,
}

/// The shortest window a slope is fitted over (fewer frequencies say little).
pub const MIN_WINDOW: usize = 16;
/// The longest.
pub const MAX_WINDOW: usize = 1024;

impl Spectrum {
    /// For windows of `n` values (`MIN_WINDOW ..= MAX_WINDOW`, the caller checks).
    pub fn new(n: usize) -> Spectrum {
        debug_assert!((MIN_WINDOW..=MAX_WINDOW).contains(&n));
        let (cos, sin): (Vec<f64>, Vec<f64>) = (0..n).map(|j| cos_sin(j, n)).unzip();
        // Hann: ½ (1 − cos 2πj/n), from the same table.
        let taper = cos.iter().map(|c| 0.5 * (1.0 - c)).collect();
        let ks: Vec<f64> = (1..n / 2).map(|k| ln(k as f64)).collect();
        let mean = ks.iter().sum::<f64>() / ks.len() as f64;
        let log_f: Vec<f64> = ks.iter().map(|l| l - mean).collect();
        let log_f_ss = log_f.iter().map(|d| d * d).sum();
        Spectrum {
            n,
            taper,
            cos,
            sin,
            log_f,
            log_f_ss,
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// α of `values` (exactly `len()` of them, oldest first): the negated least-squares slope
    /// of ln S(k) on ln k. A constant window (no power) gives 0 (white: nothing to say).
    pub fn alpha(&self, values: &[f64]) -> f64 {
        debug_assert_eq!(values.len(), self.n);
        let n = self.n;
        let mean = values.iter().sum::<f64>() / n as f64;
        let x: Vec<f64> = values
            .iter()
            .zip(&self.taper)
            .map(|(v, w)| (v - mean) * w)
            .collect();
        let mut log_s = Vec::with_capacity(self.log_f.len());
        for k in 1..n / 2 {
            let (mut re, mut im) = (0.0f64, 0.0f64);
            for (j, xj) in x.iter().enumerate() {
                let t = (k * j) % n;
                re += xj * self.cos[t];
                im -= xj * self.sin[t];
            }
            let power = re * re + im * im;
            if power.is_nan() || power <= 0.0 || power.is_infinite() {
                return 0.0;
            }
            log_s.push(ln(power));
        }
        let mean_s = log_s.iter().sum::<f64>() / log_s.len() as f64;
        let cov: f64 = self
            .log_f
            .iter()
            .zip(&log_s)
            .map(|(f, s)| f * (s - mean_s))
            .sum();
        -cov / self.log_f_ss
    }
}

/// cos and sin of 2π·j/n from a Taylor series on the first octant (symmetries do the rest):
/// the same bits on every platform, unlike libm's.
fn cos_sin(j: usize, n: usize) -> (f64, f64) {
    // Work in eighths of a turn: angle = 2π·j/n = (π/4)·(8j/n).
    let eighths = 8.0 * j as f64 / n as f64;
    let octant = eighths.floor() as u32 % 8;
    let frac = eighths - eighths.floor();
    // Within the octant: odd octants run backwards from the next axis.
    let r = match octant % 2 {
        0 => frac,
        _ => 1.0 - frac,
    } * (PI / 4.0);
    let (c, s) = taylor_cos_sin(r);
    // (cos, sin) of the angle within its quarter turn.
    let (c, s) = match octant % 2 {
        0 => (c, s),
        _ => (s, c),
    };
    match octant / 2 {
        0 => (c, s),
        1 => (-s, c),
        2 => (-c, -s),
        _ => (s, -c),
    }
}

/// cos and sin of r in [0, π/4]: 12 terms each, the last below 1e-20.
fn taylor_cos_sin(r: f64) -> (f64, f64) {
    let r2 = r * r;
    let (mut c, mut s) = (1.0f64, r);
    let (mut tc, mut ts) = (1.0f64, r);
    for i in 1..12 {
        let k = 2 * i as u64;
        tc = -tc * r2 / ((k - 1) * k) as f64;
        ts = -ts * r2 / (k * (k + 1)) as f64;
        c += tc;
        s += ts;
    }
    (c, s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Pcg32;

    #[test]
    fn twiddles_match_the_library_to_rounding() {
        for n in [16, 64, 100, 1024] {
            for j in 0..n {
                let (c, s) = cos_sin(j, n);
                let a = 2.0 * PI * j as f64 / n as f64;
                assert!((c - a.cos()).abs() < 1e-14, "cos {j}/{n}");
                assert!((s - a.sin()).abs() < 1e-14, "sin {j}/{n}");
            }
        }
    }

    /// Gaussian-ish noise: a sum of uniforms.
    fn noise(rng: &mut Pcg32) -> f64 {
        (0..6).map(|_| rng.next_f32() as f64).sum::<f64>() - 3.0
    }

    /// Mean α over many windows of a process.
    fn mean_alpha(n: usize, windows: usize, mut next: impl FnMut() -> f64) -> f64 {
        let s = Spectrum::new(n);
        (0..windows)
            .map(|_| {
                let w: Vec<f64> = (0..n).map(|_| next()).collect();
                s.alpha(&w)
            })
            .sum::<f64>()
            / windows as f64
    }

    #[test]
    fn known_noises_get_their_colours() {
        let mut rng = Pcg32::new(7);
        // White: independent values.
        let white = mean_alpha(64, 200, || noise(&mut rng));
        // Brown: a random walk.
        let mut walk = 0.0;
        let brown = mean_alpha(64, 200, || {
            walk += noise(&mut rng);
            walk
        });
        // Violet: differences of white noise (S ∝ f² at low f).
        let mut last = 0.0;
        let violet = mean_alpha(64, 200, || {
            let x = noise(&mut rng);
            let d = x - last;
            last = x;
            d
        });
        // Pink: Voss–McCartney, one row per octave, row r redrawn every 2^r steps.
        let mut rows = [0.0f64; 8];
        let mut t = 0u32;
        let pink = mean_alpha(64, 200, || {
            t += 1;
            for (r, v) in rows.iter_mut().enumerate() {
                if t.is_multiple_of(1 << r) {
                    *v = noise(&mut rng);
                }
            }
            rows.iter().sum()
        });
        assert!(white.abs() < 0.25, "white {white}");
        assert!((pink - 1.0).abs() < 0.4, "pink {pink}");
        assert!((brown - 2.0).abs() < 0.4, "brown {brown}");
        assert!(violet < -1.2, "violet {violet}");
        assert_eq!(NoiseColour::nearest(white), NoiseColour::White);
        assert_eq!(NoiseColour::nearest(pink), NoiseColour::Pink);
        assert_eq!(NoiseColour::nearest(brown), NoiseColour::Brown);
        assert_eq!(NoiseColour::nearest(violet), NoiseColour::Violet);
    }

    #[test]
    fn colours_are_the_nearest_named_slope() {
        use NoiseColour::*;
        for (a, c) in [
            (-3.0, Violet),
            (-1.6, Violet),
            (-1.2, Blue),
            (-0.5, White),
            (0.0, White),
            (0.5, White),
            (0.6, Pink),
            (1.5, Pink),
            (1.51, Brown),
            (9.0, Brown),
            (f64::NAN, White),
        ] {
            assert_eq!(NoiseColour::nearest(a), c, "{a}");
        }
    }

    #[test]
    fn a_flat_window_is_white_and_a_sine_is_not_a_crash() {
        let s = Spectrum::new(32);
        assert_eq!(s.alpha(&[3.0; 32]), 0.0);
        let sine: Vec<f64> = (0..32).map(|j| cos_sin(3 * j, 32).1).collect();
        assert!(s.alpha(&sine).is_finite());
    }
}
