//! The 5-bit legacy formats. Both store the low four bits of 32 values as nibbles (element j in
//! the low nibble of byte j, element j + 16 in the high nibble) and the fifth bits in a
//! little-endian u32 `qh` (bit j for element j).
//! - Q5_0: f16 scale `d`; value = (q − 16) · d.
//! - Q5_1: f16 scale `d` and f16 minimum `m`; value = q · d + m.

use super::act::ActRow;
use super::block::{sub_block_dot, LegacyScales, QuantBlock, SubBlocks};
use super::float::{f16_to_f32, f32_to_f16};
use knot::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// The unsigned 5-bit values in element order.
#[inline]
fn values5(qh: &[u8; 4], qs: &[u8; 16]) -> [u8; 32] {
    let high = u32::from_le_bytes(*qh);
    let mut q = [0u8; 32];
    for j in 0..16 {
        q[j] = (qs[j] & 0x0f) | ((((high >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((high >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

#[inline]
fn pack5(q: &[u8; 32]) -> ([u8; 4], [u8; 16]) {
    let mut qs = [0u8; 16];
    let mut high = 0u32;
    for j in 0..16 {
        qs[j] = (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4);
    }
    for (j, &v) in q.iter().enumerate() {
        high |= u32::from(v >> 4) << j;
    }
    (high.to_le_bytes(), qs)
}

// SAFETY: only byte arrays, so size 22 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ5_0 {
    const DTYPE: DType = DType::Q5_0;

    fn to_float(&self, out: &mut [f32]) {
        let d = f16_to_f32(u16::from_le_bytes(self.d));
        for (o, q) in out.iter_mut().zip(values5(&self.qh, &self.qs)) {
            *o = d * f32::from(q as i8 - 16);
        }
    }

    /// ggml's reference rounding: the signed extreme maps to −16, d = max / −16,
    /// q = min(31, trunc(x / d + 16.5)).
    fn from_float(x: &[f32]) -> Self {
        let d = super::q4::signed_extreme(x) / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = ((v * id + 16.5) as i8).clamp(0, 31) as u8;
        }
        let (qh, qs) = pack5(&q);
        BlockQ5_0 {
            d: f32_to_f16(d).to_le_bytes(),
            qh,
            qs,
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        sub_block_dot(row, act)
    }
}

impl SubBlocks for BlockQ5_0 {
    fn unpack(&self, _sub: usize, w: &mut [i16; 32]) -> (f32, f32) {
        for (w, q) in w.iter_mut().zip(values5(&self.qh, &self.qs)) {
            *w = i16::from(q) - 16;
        }
        (f16_to_f32(u16::from_le_bytes(self.d)), 0.0)
    }
}

// SAFETY: only byte arrays, so size 24 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ5_1 {
    const DTYPE: DType = DType::Q5_1;

    fn to_float(&self, out: &mut [f32]) {
        let d = f16_to_f32(u16::from_le_bytes(self.d));
        let m = f16_to_f32(u16::from_le_bytes(self.m));
        for (o, q) in out.iter_mut().zip(values5(&self.qh, &self.qs)) {
            *o = d * f32::from(q) + m;
        }
    }

    /// ggml's reference rounding: d = (max − min) / 31, m = min, q = min(31, trunc((x − m)/d + 0.5)).
    fn from_float(x: &[f32]) -> Self {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            min = if v < min { v } else { min };
            max = if v > max { v } else { max };
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (((v - min) * id + 0.5) as i8).clamp(0, 31) as u8;
        }
        let (qh, qs) = pack5(&q);
        BlockQ5_1 {
            d: f32_to_f16(d).to_le_bytes(),
            m: f32_to_f16(min).to_le_bytes(),
            qh,
            qs,
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        sub_block_dot(row, act)
    }
}

impl SubBlocks for BlockQ5_1 {
    fn unpack(&self, _sub: usize, w: &mut [i16; 32]) -> (f32, f32) {
        for (w, q) in w.iter_mut().zip(values5(&self.qh, &self.qs)) {
            *w = i16::from(q);
        }
        (
            f16_to_f32(u16::from_le_bytes(self.d)),
            f16_to_f32(u16::from_le_bytes(self.m)),
        )
    }
}

impl LegacyScales for BlockQ5_0 {
    #[inline]
    fn scale_bits(&self) -> (u16, u16) {
        (u16::from_le_bytes(self.d), 0)
    }
}

impl LegacyScales for BlockQ5_1 {
    #[inline]
    fn scale_bits(&self) -> (u16, u16) {
        (u16::from_le_bytes(self.d), u16::from_le_bytes(self.m))
    }
}
