//! The 4-bit legacy formats. Both store 32 nibbles in 16 bytes: element j is the low nibble of
//! byte j and element j + 16 the high nibble.
//! - Q4_0: f16 scale `d`; value = (q − 8) · d.
//! - Q4_1: f16 scale `d` and f16 minimum `m`; value = q · d + m.
//!
//! Dot products against 16-bit block activations use Σ (q·d + m)·x = d·Σ q·x + m·Σ x, so both formats
//! share one integer kernel; Q4_0 is the case m = −8·d.

use super::act::{ActRow, ACT_BLOCK};
use super::block::{LegacyScales, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use knot::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; 16],
}

impl BlockQ4_0 {
    #[inline]
    pub(crate) fn d(&self) -> f32 {
        f16_to_f32(u16::from_le_bytes(self.d))
    }
}

impl BlockQ4_1 {
    #[inline]
    pub(crate) fn d(&self) -> f32 {
        f16_to_f32(u16::from_le_bytes(self.d))
    }
    #[inline]
    pub(crate) fn m(&self) -> f32 {
        f16_to_f32(u16::from_le_bytes(self.m))
    }
}

/// The unsigned nibbles in element order.
#[inline]
fn nibbles(qs: &[u8; 16]) -> [u8; 32] {
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
    }
    q
}

#[inline]
fn pack_nibbles(q: &[u8; 32]) -> [u8; 16] {
    let mut qs = [0u8; 16];
    for j in 0..16 {
        qs[j] = q[j] | (q[j + 16] << 4);
    }
    qs
}

/// Σ q·x over one block, q the unsigned nibbles.
#[inline]
fn nibble_dot(qs: &[u8; 16], xq: &[i16]) -> i32 {
    let q = nibbles(qs);
    q.iter()
        .zip(xq)
        .map(|(&w, &x)| i32::from(w) * i32::from(x))
        .sum()
}

// SAFETY: only byte arrays, so size 18 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ4_0 {
    const DTYPE: DType = DType::Q4_0;

    fn to_float(&self, out: &mut [f32]) {
        let d = self.d();
        for (o, q) in out.iter_mut().zip(nibbles(&self.qs)) {
            *o = (f32::from(q) - 8.0) * d;
        }
    }

    /// ggml's reference rounding: the signed value of largest magnitude maps to −8, so
    /// d = max / −8; q = min(15, trunc(x / d + 8.5)).
    fn from_float(x: &[f32]) -> Self {
        let d = signed_extreme(x) / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(x) {
            // Truncation toward zero of a value ≥ 0.5 (up to rounding) equals ggml's int8 cast.
            *q = ((v * id + 8.5) as i8).clamp(0, 15) as u8;
        }
        BlockQ4_0 {
            d: f32_to_f16(d).to_le_bytes(),
            qs: pack_nibbles(&q),
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in row.iter().enumerate() {
            let dot = nibble_dot(&blk.qs, &act.qs[b * ACT_BLOCK..][..ACT_BLOCK]);
            let d = blk.d();
            sum += d * act.d[b] * dot as f32 + (-8.0 * d) * act.s[b];
        }
        sum
    }
}

// SAFETY: only byte arrays, so size 20 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ4_1 {
    const DTYPE: DType = DType::Q4_1;

    fn to_float(&self, out: &mut [f32]) {
        let (d, m) = (self.d(), self.m());
        for (o, q) in out.iter_mut().zip(nibbles(&self.qs)) {
            *o = f32::from(q) * d + m;
        }
    }

    /// ggml's reference rounding: d = (max − min) / 15, m = min, q = min(15, trunc((x − m)/d + 0.5)).
    fn from_float(x: &[f32]) -> Self {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            min = if v < min { v } else { min };
            max = if v > max { v } else { max };
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (((v - min) * id + 0.5) as i8).clamp(0, 15) as u8;
        }
        BlockQ4_1 {
            d: f32_to_f16(d).to_le_bytes(),
            m: f32_to_f16(min).to_le_bytes(),
            qs: pack_nibbles(&q),
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in row.iter().enumerate() {
            let dot = nibble_dot(&blk.qs, &act.qs[b * ACT_BLOCK..][..ACT_BLOCK]);
            sum += blk.d() * act.d[b] * dot as f32 + blk.m() * act.s[b];
        }
        sum
    }
}

/// The value of largest magnitude, with its sign (the first one on ties, as ggml picks it):
/// q4_0 and q5_0 map it to their most negative level.
pub(super) fn signed_extreme(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

impl LegacyScales for BlockQ4_0 {
    #[inline]
    fn scale_bits(&self) -> (u16, u16) {
        (u16::from_le_bytes(self.d), 0)
    }
}

impl LegacyScales for BlockQ4_1 {
    #[inline]
    fn scale_bits(&self) -> (u16, u16) {
        (u16::from_le_bytes(self.d), u16::from_le_bytes(self.m))
    }
}
