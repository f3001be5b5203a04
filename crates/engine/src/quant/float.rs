//! Plain float formats: f32, f16, bf16 (little-endian, one element per "block").
//!
//! Weights in these formats are read straight from their bytes; matmul computes in f32 and the
//! 16-bit formats widen exactly, so every kernel sees the same values.

/// f16 bits to f32, exact for every input (subnormals, infinities, NaN payloads).
///
/// Branch-free so the SIMD kernels can use the same arithmetic lane-wise: moving the exponent and
/// mantissa into f32 position and scaling by 2^112 rebiases normals and normalizes subnormals in
/// one multiply; only infinities and NaNs (exponent all ones) need their exponent forced.
#[inline]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let magnitude = u32::from(h & 0x7fff) << 13;
    let scaled = f32::from_bits(magnitude) * f32::from_bits(0x7780_0000); // 2^112
    let inf_nan = if h & 0x7c00 == 0x7c00 { 0x7f80_0000 } else { 0 };
    let sign = u32::from(h & 0x8000) << 16;
    f32::from_bits(scaled.to_bits() | inf_nan | sign)
}

/// f32 to f16 bits, round to nearest even (as ggml's `GGML_FP32_TO_FP16`).
#[inline]
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

#[inline]
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to bf16 bits, round to nearest even; NaNs stay (quiet) NaNs.
#[inline]
pub(crate) fn f32_to_bf16(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

#[inline]
pub(crate) fn le_u16(bytes: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])
}

#[inline]
pub(crate) fn le_f32(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
}

pub(crate) fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(crate) fn dequantize_f16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn dequantize_bf16(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn quantize_f32(x: &[f32], out: &mut Vec<u8>) {
    out.extend(x.iter().flat_map(|v| v.to_le_bytes()));
}

pub(crate) fn quantize_f16(x: &[f32], out: &mut Vec<u8>) {
    out.extend(x.iter().flat_map(|&v| f32_to_f16(v).to_le_bytes()));
}

pub(crate) fn quantize_bf16(x: &[f32], out: &mut Vec<u8>) {
    out.extend(x.iter().flat_map(|&v| f32_to_bf16(v).to_le_bytes()));
}

/// Which float format a weight row is stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatFormat {
    F32,
    F16,
    Bf16,
}

impl FloatFormat {
    #[inline]
    pub(crate) fn element(self, row: &[u8], i: usize) -> f32 {
        match self {
            FloatFormat::F32 => le_f32(row, i),
            FloatFormat::F16 => f16_to_f32(le_u16(row, i)),
            FloatFormat::Bf16 => bf16_to_f32(le_u16(row, i)),
        }
    }
}

/// Scalar reference: dot product of one stored float row with `x` (accumulated in order).
pub(crate) fn dot_row(format: FloatFormat, row: &[u8], x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for (i, &xv) in x.iter().enumerate() {
        sum += format.element(row, i) * xv;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_half_for_every_bit_pattern() {
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            let got = f16_to_f32(bits);
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}");
            }
        }
    }

    #[test]
    fn known_float_encodings() {
        // 1.0, -2.0, 65504 (f16 max), smallest f16 subnormal 2^-24.
        let f16_bytes = [0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00];
        let mut out = [0.0; 4];
        dequantize_f16(&f16_bytes, &mut out);
        assert_eq!(out, [1.0, -2.0, 65504.0, 2f32.powi(-24)]);
        // bf16 is the top half of an f32: 1.0 = 0x3f80, -0.5 = 0xbf00.
        let mut out = [0.0; 2];
        dequantize_bf16(&[0x80, 0x3f, 0x00, 0xbf], &mut out);
        assert_eq!(out, [1.0, -0.5]);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        // Just above the tie rounds up.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
    }
}
