//! Q8_0: 32 elements as an f16 scale `d` and 32 signed bytes; value = q · d.

use super::act::{ActRow, ACT_BLOCK};
use super::block::{LegacyScales, QuantBlock};
use super::float::{f16_to_f32, f32_to_f16};
use knot::DType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlockQ8_0 {
    /// f16 scale, little-endian.
    pub d: [u8; 2],
    pub qs: [u8; 32],
}

impl BlockQ8_0 {
    #[inline]
    pub(crate) fn d(&self) -> f32 {
        f16_to_f32(u16::from_le_bytes(self.d))
    }
}

// SAFETY: only byte arrays, so size 34 with alignment 1 and every bit pattern valid.
unsafe impl QuantBlock for BlockQ8_0 {
    const DTYPE: DType = DType::Q8_0;

    fn to_float(&self, out: &mut [f32]) {
        let d = self.d();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = f32::from(q as i8) * d;
        }
    }

    /// ggml's reference rounding: d = amax / 127, q = round(x / d) with ties away from zero.
    fn from_float(x: &[f32]) -> Self {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 32];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = ((v * id).round() as i8) as u8;
        }
        BlockQ8_0 {
            d: f32_to_f16(d).to_le_bytes(),
            qs,
        }
    }

    fn vec_dot(row: &[Self], act: ActRow<'_>) -> f32 {
        let mut sum = 0.0f32;
        for (b, blk) in row.iter().enumerate() {
            let xq = &act.qs[b * ACT_BLOCK..][..ACT_BLOCK];
            let dot: i32 = blk
                .qs
                .iter()
                .zip(xq)
                .map(|(&w, &x)| i32::from(w as i8) * i32::from(x))
                .sum();
            sum += blk.d() * act.d[b] * dot as f32;
        }
        sum
    }
}

impl LegacyScales for BlockQ8_0 {
    #[inline]
    fn scale_bits(&self) -> (u16, u16) {
        (u16::from_le_bytes(self.d), 0)
    }
}
