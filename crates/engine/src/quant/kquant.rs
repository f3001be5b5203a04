//! The K-quant formats: super-blocks of 256 values with one f16 scale (and minimum scale)
//! and small integer scales per sub-block.
//! - Q4_K: 8 sub-blocks of 32; 6-bit scale `sc` and min `m` each, packed in 12 bytes;
//!   value = d·sc·q − dmin·m, q a nibble. 64-value chunk c keeps sub-block 2c in the low
//!   nibbles of bytes 32c..32c+32 and sub-block 2c+1 in the high nibbles.
//! - Q5_K: Q4_K plus a fifth bit: bit i of `qh[l]` is the high bit of element l of sub-block i.
//! - Q6_K: 16 sub-blocks of 16 with i8 scales; value = d·sc·(q − 32), q 6 bits: four low bits
//!   in `ql`, two high bits in `qh` (layout in `q6_values`).
//!
//! Every 32-value activation block lines up with one Q4_K/Q5_K sub-block or two Q6_K
//! sub-blocks, so dots use the integer weights sc·q (|sc·q| ≤ 4096 fits i16) against the
//! 16-bit activations and apply d (and dmin·m through the activation block sum) per block.

use super::act::ActRow;
use super::block::{sub_block_dot, QuantBlock, SubBlocks};
use super::float::{f16_to_f32, f32_to_f16};
use knot::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; 128],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [u8; 16],
    pub d: [u8; 2],
}

/// The eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block. Bytes 0..4 hold scales 0..4 in
/// their low six bits, bytes 4..8 mins 0..4; scales and mins 4..8 keep their low four bits in
/// bytes 8..12 (scale low nibble, min high nibble) and their top two bits in the top bits of
/// bytes 0..4 (scales) and 4..8 (mins).
#[inline]
pub(crate) fn scales_mins(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
        m[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, m)
}

fn pack_scales_mins(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4);
    }
    s
}

/// The unsigned values of sub-block `sub` of a Q4_K/Q5_K block (`qh` None for Q4_K).
#[inline]
fn k_values(qs: &[u8; 128], qh: Option<&[u8; 32]>, sub: usize) -> [u8; 32] {
    let bytes = &qs[32 * (sub / 2)..][..32];
    let shift = 4 * (sub % 2);
    let mut q = [0u8; 32];
    for (l, q) in q.iter_mut().enumerate() {
        *q = (bytes[l] >> shift) & 0x0f;
        if let Some(qh) = qh {
            *q |= ((qh[l] >> sub) & 1) << 4;
        }
    }
    q
}

/// The 256 unsigned 6-bit values of a Q6_K block. Half h (128 values) uses ql[64h..64h+64] and
/// qh[32h..32h+32]: its values 32k + l (k < 4, l < 32) take the low (k < 2) or high nibble of
/// ql[64h + 32(k % 2) + l] and bits 2k, 2k+1 of qh[32h + l].
#[inline]
fn q6_values(ql: &[u8; 128], qh: &[u8; 64]) -> [u8; 256] {
    let mut q = [0u8; 256];
    for h in 0..2 {
        for k in 0..4 {
            for l in 0..32 {
                let low = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
                let high = (qh[32 * h + l] >> (2 * k)) & 3;
                q[128 * h + 32 * k + l] = low | (high << 4);
            }
        }
    }
    q
}

/// Least-squares fit of x ≈ scale·q + min with q in 0..=nmax and min ≤ 0 (the formats store
/// −min as an unsigned multiple of dmin): starts from the block's range and alternates
/// rounding and refitting a few times, keeping the best squared error.
fn fit_scale_min(x: &[f32], nmax: u8) -> (f32, f32) {
    let lo = x.iter().fold(0.0f32, |m, &v| m.min(v));
    let hi = x.iter().fold(f32::MIN, |m, &v| m.max(v));
    if hi <= lo {
        return (0.0, lo);
    }
    let nmax_f = f32::from(nmax);
    let error = |scale: f32, min: f32| -> f32 {
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        x.iter()
            .map(|&v| {
                let q = ((v - min) * inv).round().clamp(0.0, nmax_f);
                let e = scale * q + min - v;
                e * e
            })
            .sum()
    };
    let (mut scale, mut min) = ((hi - lo) / nmax_f, lo);
    let mut best = (scale, min, error(scale, min));
    for _ in 0..4 {
        let inv = 1.0 / scale;
        let (mut sq, mut sqq, mut sx, mut sqx) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for &v in x {
            let q = f64::from(((v - min) * inv).round().clamp(0.0, nmax_f));
            sq += q;
            sqq += q * q;
            sx += f64::from(v);
            sqx += q * f64::from(v);
        }
        let n = x.len() as f64;
        let det = n * sqq - sq * sq;
        if det <= 0.0 {
            break;
        }
        let new_scale = ((n * sqx - sq * sx) / det) as f32;
        let new_min = (((sqq * sx - sq * sqx) / det) as f32).min(0.0);
        if new_scale <= 0.0 || !new_scale.is_finite() {
            break;
        }
        (scale, min) = (new_scale, new_min);
        let e = error(scale, min);
        if e < best.2 {
            best = (scale, min, e);
        }
    }
    (best.0, best.1)
}

/// Quantizes a super-block's sub-block scales and mins to 6 bits under f16 `d` and `dmin`;
/// returns (d, dmin, sc, m) with d and dmin already rounded to f16.
fn k_scales(fits: &[(f32, f32); 8]) -> (f32, f32, [u8; 8], [u8; 8]) {
    let max_scale = fits.iter().fold(0.0f32, |m, f| m.max(f.0));
    let max_min = fits.iter().fold(0.0f32, |m, f| m.max(-f.1));
    let d = f16_to_f32(f32_to_f16(max_scale / 63.0));
    let dmin = f16_to_f32(f32_to_f16(max_min / 63.0));
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for (i, &(scale, min)) in fits.iter().enumerate() {
        sc[i] = if d > 0.0 {
            (scale / d).round().clamp(0.0, 63.0) as u8
        } else {
            0
        };
        m[i] = if dmin > 0.0 {
            (-min / dmin).round().clamp(0.0, 63.0) as u8
        } else {
            0
        };
    }
    (d, dmin, sc, m)
}

/// Quantizes 256 values to Q4_K/Q5_K integers (0..=nmax) with their scale header.
fn quantize_k(x: &[f32], nmax: u8) -> ([u8; 2], [u8; 2], [u8; 12], [u8; 256]) {
    let mut fits = [(0.0f32, 0.0f32); 8];
    for (f, xs) in fits.iter_mut().zip(x.chunks_exact(32)) {
        *f = fit_scale_min(xs, nmax);
    }
    let (d, dmin, sc, m) = k_scales(&fits);
    let mut q = [0u8; 256];
    for (i, xs) in x.chunks_exact(32).enumerate() {
        let scale = d * f32::from(sc[i]);
        let min = dmin * f32::from(m[i]);
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        for (q, &v) in q[32 * i..][..32].iter_mut().zip(xs) {
            *q = ((v + min) * inv).round().clamp(0.0, f32::from(nmax)) as u8;
        }
    }
    (
        f32_to_f16(d).to_le_bytes(),
        f32_to_f16(dmin).to_le_bytes(),
        pack_scales_mins(&sc, &m),
        q,
    )
}

fn pack_k_nibbles(q: &[u8; 256]) -> [u8; 128] {
    let mut qs = [0u8; 128];
    for c in 0..4 {
        for l in 0..32 {
            qs[32 * c + l] = (q[64 * c + l] & 0x0f) | ((q[64 * c + 32 + l] & 0x0f) << 4);
        }
    }
    qs
}

/// Dequantizes a Q4_K/Q5_K block in gguf-py's order of operations: (d·sc)·q − dmin·m.
fn k_to_float(
    d: [u8; 2],
    dmin: [u8; 2],
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: Option<&[u8; 32]>,
    out: &mut [f32],
) {
    let d = f16_to_f32(u16::from_le_bytes(d));
    let dmin = f16_to_f32(u16::from_le_bytes(dmin));
    let (sc, m) = scales_mins(scales);
    for (sub, o) in out.chunks_exact_mut(32).enumerate() {
        let scale = d * f32::from(sc[sub]);
        let min = dmin * f32::from(m[sub]);
        for (o, q) in o.iter_mut().zip(k_values(qs, qh, sub)) {
            *o = scale * f32::from(q) - min;
        }
    }
}

/// Integer weights sc·q of one Q4_K/Q5_K sub-block, with d and the offset −dmin·m.
#[inline]
fn k_unpack(
    d: [u8; 2],
    dmin: [u8; 2],
    scales: &[u8; 12],
    qs: &[u8; 128],
    qh: Option<&[u8; 32]>,
    sub: usize,
    w: &mut [i16; 32],
) -> (f32, f32) {
    let (sc, m) = scales_mins(scales);
    for (w, q) in w.iter_mut().zip(k_values(qs, qh, sub)) {
        *w = i16::from(sc[sub]) * i16::from(q);
    }
    let dmin = f16_to_f32(u16::from_le_bytes(dmin));
    (
        f16_to_f32(u16::from_le_bytes(d)),
        -(dmin * f32::from(m[sub])),
    )
}

// SAFETY: only byte arrays, so size 144 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ4K {
    const DTYPE: DType = DType::Q4K;

    fn to_float(&self, out: &mut [f32]) {
        k_to_float(self.d, self.dmin, &self.scales, &self.qs, None, out);
    }

    /// Per sub-block least-squares scale and min (see `fit_scale_min`), then 6-bit scales.
    fn from_float(x: &[f32]) -> Self {
        let (d, dmin, scales, q) = quantize_k(x, 15);
        BlockQ4K {
            d,
            dmin,
            scales,
            qs: pack_k_nibbles(&q),
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        sub_block_dot(row, act)
    }
}

impl SubBlocks for BlockQ4K {
    fn unpack(&self, sub: usize, w: &mut [i16; 32]) -> (f32, f32) {
        k_unpack(self.d, self.dmin, &self.scales, &self.qs, None, sub, w)
    }
}

// SAFETY: only byte arrays, so size 176 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ5K {
    const DTYPE: DType = DType::Q5K;

    fn to_float(&self, out: &mut [f32]) {
        k_to_float(
            self.d,
            self.dmin,
            &self.scales,
            &self.qs,
            Some(&self.qh),
            out,
        );
    }

    fn from_float(x: &[f32]) -> Self {
        let (d, dmin, scales, q) = quantize_k(x, 31);
        let mut qh = [0u8; 32];
        for (i, qi) in q.iter().enumerate() {
            qh[i % 32] |= (qi >> 4) << (i / 32);
        }
        BlockQ5K {
            d,
            dmin,
            scales,
            qh,
            qs: pack_k_nibbles(&q),
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        sub_block_dot(row, act)
    }
}

impl SubBlocks for BlockQ5K {
    fn unpack(&self, sub: usize, w: &mut [i16; 32]) -> (f32, f32) {
        k_unpack(
            self.d,
            self.dmin,
            &self.scales,
            &self.qs,
            Some(&self.qh),
            sub,
            w,
        )
    }
}

// SAFETY: only byte arrays, so size 210 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ6K {
    const DTYPE: DType = DType::Q6K;

    /// gguf-py's order of operations: (d·sc)·(q − 32).
    fn to_float(&self, out: &mut [f32]) {
        let d = f16_to_f32(u16::from_le_bytes(self.d));
        let q = q6_values(&self.ql, &self.qh);
        for (i, o) in out[..256].iter_mut().enumerate() {
            let scale = d * f32::from(self.scales[i / 16] as i8);
            *o = scale * f32::from(q[i] as i8 - 32);
        }
    }

    /// Per 16 values: the signed extreme maps to −32 (as q4_0/q5_0); the sub-block scales then
    /// round to i8 under one f16 `d`, and the values are rounded again with the final scales.
    fn from_float(x: &[f32]) -> Self {
        let mut scales = [0.0f32; 16];
        for (s, xs) in scales.iter_mut().zip(x.chunks_exact(16)) {
            let mut amax = 0.0f32;
            for &v in xs {
                if amax < v.abs() {
                    amax = v.abs();
                    *s = v / -32.0;
                }
            }
        }
        let max_scale = scales.iter().fold(0.0f32, |m, s| m.max(s.abs()));
        let d = f16_to_f32(f32_to_f16(max_scale / 127.0));
        let mut sc = [0i8; 16];
        let mut q = [0u8; 256];
        for (i, xs) in x.chunks_exact(16).enumerate() {
            sc[i] = if d > 0.0 {
                (scales[i] / d).round().clamp(-127.0, 127.0) as i8
            } else {
                0
            };
            let scale = d * f32::from(sc[i]);
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            for (q, &v) in q[16 * i..][..16].iter_mut().zip(xs) {
                *q = ((v * inv).round() + 32.0).clamp(0.0, 63.0) as u8;
            }
        }
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for h in 0..2 {
            for k in 0..4 {
                for l in 0..32 {
                    let v = q[128 * h + 32 * k + l];
                    ql[64 * h + 32 * (k % 2) + l] |= (v & 0x0f) << (4 * (k / 2));
                    qh[32 * h + l] |= (v >> 4) << (2 * k);
                }
            }
        }
        BlockQ6K {
            ql,
            qh,
            scales: sc.map(|s| s as u8),
            d: f32_to_f16(d).to_le_bytes(),
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        sub_block_dot(row, act)
    }
}

impl SubBlocks for BlockQ6K {
    /// Integer weights sc·(q − 32) (|·| ≤ 4096) of values 32·sub..32·sub+32, which span two
    /// 16-value scales.
    fn unpack(&self, sub: usize, w: &mut [i16; 32]) -> (f32, f32) {
        let (h, k) = (sub / 4, sub % 4);
        for (l, w) in w.iter_mut().enumerate() {
            let low = (self.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
            let high = (self.qh[32 * h + l] >> (2 * k)) & 3;
            let q = i16::from(low | (high << 4));
            *w = i16::from(self.scales[2 * sub + l / 16] as i8) * (q - 32);
        }
        (f16_to_f32(u16::from_le_bytes(self.d)), 0.0)
    }
}
