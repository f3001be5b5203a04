//! The sans-I/O path end to end: the committed tiny GGUFs through `PrefixReader` and
//! `ConversionPlan` give the committed knot files byte for byte (the CLI writes the same plan).

use std::path::PathBuf;

use knot_convert::gguf::PrefixReader;
use knot_convert::{ConversionPlan, ConvertError, ConvertOptions, Piece, TargetDType};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Converts in memory as a driver would; returns the output and the longest read.
fn convert(gguf: &[u8], opts: &ConvertOptions, name: &str) -> Result<(Vec<u8>, u64), ConvertError> {
    let mut reader = PrefixReader::new(gguf.len() as u64);
    let mut longest = 0;
    let g = loop {
        let (start, end) = reader.wanted();
        longest = longest.max(end - start);
        if let Some(g) = reader.feed(&gguf[start as usize..end as usize])? {
            break g;
        }
    };
    let plan = ConversionPlan::from_gguf(&g, opts, name)?;
    let mut out = plan.header().to_vec();
    for (i, piece) in plan.pieces().iter().enumerate() {
        match piece {
            Piece::Literal(bytes) => out.extend_from_slice(bytes),
            Piece::Tensor(t) => {
                let r = t.range.expect("GGUF tensors have ranges");
                longest = longest.max(r.len);
                let src = &gguf[r.offset as usize..(r.offset + r.len) as usize];
                out.extend_from_slice(&plan.transform(i, src.to_vec())?);
            }
        }
    }
    assert_eq!(out.len() as u64, plan.file_len());
    assert_eq!(plan.summary().file_len, plan.file_len());
    Ok((out, longest))
}

#[test]
fn tiny_ggufs_convert_to_the_committed_knots() {
    for name in [
        "llama-f32",
        "llama-f16",
        "llama-tied-f32",
        "qwen2-f32",
        "qwen3-f32",
        "gemma3-f32",
    ] {
        let gguf = fixture(&format!("{name}.gguf"));
        let (out, _) = convert(&gguf, &ConvertOptions::default(), name).unwrap();
        assert!(out == fixture(&format!("{name}.knot")), "{name}");
    }
}

#[test]
fn requantized_plans_transform_and_parse() {
    let gguf = fixture("llama-f32.gguf");
    let opts = ConvertOptions {
        dtype: TargetDType::Q8_0,
        name: Some("q".into()),
    };
    let (out, _) = convert(&gguf, &opts, "x").unwrap();
    let k = knot::Knot::from_bytes(&out).unwrap();
    assert_eq!(k.meta.name, "q");
    assert!(k.meta.tensors.iter().any(|t| t.dtype == "q8_0"));
}

#[test]
fn bad_input_is_an_error_never_a_panic() {
    let gguf = fixture("llama-f32.gguf");
    let opts = ConvertOptions::default();
    // Every cut of the file, and garbage.
    for cut in (0..gguf.len()).step_by(97) {
        assert!(convert(&gguf[..cut], &opts, "x").is_err(), "cut at {cut}");
    }
    assert!(matches!(
        convert(b"not a gguf at all", &opts, "x"),
        Err(ConvertError::Gguf(_))
    ));
    let mut reader = PrefixReader::new(gguf.len() as u64);
    let g = reader.feed(&gguf).unwrap().unwrap();
    let plan = ConversionPlan::from_gguf(&g, &opts, "x").unwrap();
    // Piece 0 is the tokenizer blob; a tensor's bytes must have its length.
    assert!(plan.transform(0, vec![]).is_err());
    assert!(plan.transform(usize::MAX, vec![]).is_err());
    let first_tensor = plan
        .pieces()
        .iter()
        .position(|p| matches!(p, Piece::Tensor(_)))
        .unwrap();
    assert!(plan.transform(first_tensor, vec![0; 3]).is_err());
}
