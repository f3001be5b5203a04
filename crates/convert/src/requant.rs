//! Choosing and producing output dtypes for `--dtype`.

use engine::quant;
use knot::DType;

use crate::{ConvertError, SourceTensor, TargetDType};

/// 2-D weight matrices take the target dtype when their rows are whole blocks of it; rows that
/// are not whole 256-value super-blocks take q5_0 for a K-quant target (llama.cpp's fallback
/// for q4_k, similar in size); otherwise they keep their dtype. 1-D tensors (norms, biases)
/// become f32 so the engine's norm code sees one format. `Keep` changes nothing.
pub fn output_dtype(t: &SourceTensor, target: TargetDType) -> DType {
    let Some(target) = target.dtype() else {
        return t.dtype;
    };
    let fallback = match target {
        DType::Q4K => Some(DType::Q5_0),
        _ => None,
    };
    let fits = |dtype: DType, row: u64| row.is_multiple_of(dtype.block_len() as u64);
    match t.shape.as_slice() {
        [_] => DType::F32,
        [_, row] if fits(target, *row) => target,
        [_, row] => match fallback {
            Some(f) if fits(f, *row) => f,
            _ => t.dtype,
        },
        _ => t.dtype,
    }
}

/// Re-encodes `bytes` (in `t.dtype`) as `to`, going through f32.
pub fn convert(t: &SourceTensor, bytes: &[u8], to: DType) -> Result<Vec<u8>, ConvertError> {
    let n: u64 = t.shape.iter().product();
    let n = usize::try_from(n).map_err(|_| ConvertError::Tensor {
        tensor: t.name.clone(),
        message: "too many elements for this machine".into(),
    })?;
    let err = |e: quant::QuantError| ConvertError::Tensor {
        tensor: t.name.clone(),
        message: format!("converting {} to {to}: {e}", t.dtype),
    };
    let mut values = vec![0f32; n];
    quant::dequantize(t.dtype, bytes, &mut values).map_err(err)?;
    let mut out = Vec::new();
    quant::quantize(to, &values, &mut out).map_err(err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: Vec<u64>, dtype: DType) -> SourceTensor {
        SourceTensor {
            name: "x".into(),
            dtype,
            shape,
            range: None,
        }
    }

    #[test]
    fn dtype_choice() {
        let m = t(vec![64, 64], DType::Q4_1);
        assert_eq!(output_dtype(&m, TargetDType::Keep), DType::Q4_1);
        assert_eq!(output_dtype(&m, TargetDType::Q8_0), DType::Q8_0);
        assert_eq!(output_dtype(&m, TargetDType::F16), DType::F16);
        let norm = t(vec![64], DType::Bf16);
        assert_eq!(output_dtype(&norm, TargetDType::Keep), DType::Bf16);
        assert_eq!(output_dtype(&norm, TargetDType::Q4_0), DType::F32);
        // Rows of 48 are not whole 32-element blocks: keep the source format.
        let odd = t(vec![4, 48], DType::F16);
        assert_eq!(output_dtype(&odd, TargetDType::Q4_0), DType::F16);
        assert_eq!(output_dtype(&odd, TargetDType::F32), DType::F32);
        assert_eq!(output_dtype(&odd, TargetDType::Q4K), DType::F16);
        // K-quants need rows of whole 256-blocks; 640-wide rows (Gemma-3-270M) fall back.
        let wide = t(vec![4, 512], DType::Q4_1);
        assert_eq!(output_dtype(&wide, TargetDType::Q4K), DType::Q4K);
        let gemma = t(vec![4, 640], DType::Q6K);
        assert_eq!(output_dtype(&gemma, TargetDType::Q4K), DType::Q5_0);
        assert_eq!("q4_k".parse::<TargetDType>(), Ok(TargetDType::Q4K));
        assert!("q5_k".parse::<TargetDType>().is_err());
    }

    #[test]
    fn k_quants_requantize_to_q4_k_and_back() {
        // A Q6_K source (one super-block per row) goes to Q4_K through f32.
        let values: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let mut q6 = Vec::new();
        quant::quantize(DType::Q6K, &values, &mut q6).unwrap();
        let m = t(vec![2, 256], DType::Q6K);
        let q4k = convert(&m, &q6, DType::Q4K).unwrap();
        assert_eq!(q4k.len(), 2 * 144);
        let mut back = vec![0f32; 512];
        quant::dequantize(DType::Q4K, &q4k, &mut back).unwrap();
        let rms = (values
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f32>()
            / 512.0)
            .sqrt();
        // Values span [-1.25, 1.25]: Q4_K steps of about 2.5/15 give an rms error near 0.05.
        assert!(rms < 0.06, "rms {rms}");
        assert!(matches!(
            convert(&m, &q6[..100], DType::Q4K),
            Err(ConvertError::Tensor { .. })
        ));
    }

    #[test]
    fn f16_to_f32_and_q8_0() {
        let values: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
        let src: Vec<u8> = values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let m = t(vec![2, 32], DType::F16);
        let f32s = convert(&m, &src, DType::F32).unwrap();
        let back: Vec<f32> = f32s
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, values);
        let q = convert(&m, &src, DType::Q8_0).unwrap();
        assert_eq!(q.len(), 2 * 34);
        let bad = convert(&m, &src[..10], DType::F32);
        assert!(matches!(bad, Err(ConvertError::Tensor { .. })));
    }
}
