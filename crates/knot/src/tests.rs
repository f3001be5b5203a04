//! Round trips through the writer and reader, and one test per validation rule.

use std::collections::HashMap;

use proptest::prelude::*;

use crate::*;

fn config(n_layers: usize, tied: bool) -> ModelConfig {
    ModelConfig {
        n_layers,
        dim: 32,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 8,
        ffn_dim: 64,
        vocab_size: 8,
        context_length: 128,
        rope_theta: 10000.0,
        rope_style: RopeStyle::Neox,
        rope_dim: 8,
        norm_eps: 1e-5,
        tie_word_embeddings: tied,
        bos_id: Some(1),
        eos_ids: vec![2],
        pad_id: None,
        add_bos: true,
        qkv_bias: false,
        qk_norm: false,
        sandwich_norms: false,
        scale_embeddings: false,
        ffn_activation: FfnActivation::Silu,
        query_pre_attn_scalar: None,
        sliding_window: None,
        sliding_window_pattern: 0,
        rope_theta_local: None,
    }
}

fn tokenizer() -> TokenizerData {
    TokenizerData {
        model: "gpt2".into(),
        pre: Some("gpt2".into()),
        tokens: (0..8).map(|i| format!("t{i}")).collect(),
        token_types: vec![1; 8],
        merges: vec!["t 0".into()],
        bos_id: Some(1),
        eos_id: Some(2),
        ..Default::default()
    }
}

fn builder(n_layers: usize, tied: bool) -> KnotBuilder {
    let mut b = KnotBuilder::new("tiny", "llama", config(n_layers, tied), tokenizer());
    b.chat_template = Some("{{ messages }}".into());
    b.add_tensor("output_norm.weight", DType::F32, vec![32]);
    b.add_tensor("token_embd.weight", DType::Q8_0, vec![8, 32]);
    if !tied {
        b.add_tensor("output.weight", DType::Q4_0, vec![8, 32]);
    }
    for l in 0..n_layers {
        let mut add = |n: &str, d, s: Vec<u64>| b.add_tensor(layer_tensor_name(l, n), d, s);
        add("ffn_down", DType::Q4_1, vec![32, 64]);
        add("attn_norm", DType::F32, vec![32]);
        add("attn_q", DType::F16, vec![32, 32]);
        add("attn_k", DType::Bf16, vec![16, 32]);
        add("attn_v", DType::Q5_0, vec![16, 32]);
        add("attn_output", DType::Q5_1, vec![32, 32]);
        add("ffn_norm", DType::F32, vec![32]);
        add("ffn_gate", DType::Q4K, vec![64, 256]);
        add("ffn_up", DType::Q6K, vec![64, 256]);
        add("attn_q_norm", DType::F32, vec![8]);
    }
    b
}

/// Distinct, name-dependent bytes so misplaced tensors are caught.
fn data_for(plan: &KnotPlan) -> HashMap<String, Vec<u8>> {
    plan.tensors()
        .iter()
        .map(|t| {
            let seed = t
                .name
                .bytes()
                .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
            let bytes = (0..t.size).map(|i| seed.wrapping_add(i as u8)).collect();
            (t.name.clone(), bytes)
        })
        .collect()
}

fn build(b: KnotBuilder) -> (Vec<u8>, HashMap<String, Vec<u8>>) {
    let plan = b.plan().unwrap();
    let data = data_for(&plan);
    let file = plan
        .to_bytes(|n| data.get(n).map(|v| v.as_slice()))
        .unwrap();
    assert_eq!(file.len() as u64, plan.file_len());
    (file, data)
}

/// Re-serializes edited metadata in front of the original payload. The JSON is padded so the
/// payload keeps its alignment, as the writer does.
fn reassemble(meta: &Metadata, original: &[u8]) -> Vec<u8> {
    let knot = Knot::from_bytes(original).unwrap();
    let payload = &original[knot.payload_offset as usize..];
    let mut json = serde_json::to_vec(meta).unwrap();
    let codec_at = (FIXED_HEADER_LEN + json.len()).div_ceil(64) * 64;
    json.resize(codec_at - FIXED_HEADER_LEN, b' ');
    raw_file(&json, 0, payload)
}

fn raw_file(json: &[u8], codec: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = FixedHeader {
        version: 1,
        meta_len: json.len() as u32,
    }
    .to_bytes()
    .to_vec();
    f.extend_from_slice(json);
    f.resize(codec_offset(json.len() as u32) as usize, 0);
    f.push(codec);
    f.extend_from_slice(payload);
    f
}

fn mutate(f: impl FnOnce(&mut Metadata)) -> Result<Knot, KnotError> {
    let (file, _) = build(builder(2, false));
    let mut meta = Knot::from_bytes(&file).unwrap().meta;
    f(&mut meta);
    Knot::from_bytes(&reassemble(&meta, &file))
}

#[test]
fn round_trip() {
    let b = builder(2, false);
    let cfg = b.config.clone();
    let (file, data) = build(b);
    let knot = Knot::from_bytes(&file).unwrap();
    assert_eq!(knot.meta.config, cfg);
    assert_eq!(knot.meta.name, "tiny");
    assert_eq!(knot.meta.chat_template.as_deref(), Some("{{ messages }}"));
    assert_eq!(knot.n_layers(), 2);
    for (name, bytes) in &data {
        assert_eq!(
            knot.tensor_bytes(&file, name).unwrap(),
            bytes.as_slice(),
            "{name}"
        );
    }
    let t = knot.tensor("blk.1.ffn_gate.weight").unwrap();
    assert_eq!(t.dtype, DType::Q4K);
    assert_eq!(t.shape, vec![64, 256]);
    assert_eq!(t.n_elements(), 64 * 256);
    assert_eq!(t.size, 64 * 144);
    assert!(knot.tensor("nope").is_none());

    let blob = &file[knot.tokenizer_range().start as usize..knot.tokenizer_range().end as usize];
    assert_eq!(Knot::parse_tokenizer(blob).unwrap(), tokenizer());
    assert_eq!(knot.meta.tokenizer.model, "gpt2");
    assert_eq!(knot.meta.tokenizer.pre.as_deref(), Some("gpt2"));
}

#[test]
fn layer_and_resident_slices_are_relative() {
    let (file, data) = build(builder(3, false));
    let knot = Knot::from_bytes(&file).unwrap();
    for layer in 0..3 {
        let range = knot.layer_range(layer).unwrap();
        let layer_bytes = &file[range.start as usize..range.end as usize];
        let tensors = knot.layer_tensors(layer).unwrap();
        assert_eq!(tensors.len(), 10);
        // Canonical order first, extras after.
        assert_eq!(tensors[0].name, format!("blk.{layer}.attn_norm.weight"));
        assert_eq!(tensors[9].name, format!("blk.{layer}.attn_q_norm.weight"));
        assert_eq!(tensors[0].offset, 0);
        for t in tensors {
            assert_eq!(&layer_bytes[t.range().unwrap()], data[&t.name].as_slice());
        }
    }
    assert!(knot.layer_tensors(3).is_none());
    let range = knot.resident_range();
    let resident = &file[range.start as usize..range.end as usize];
    let tensors = knot.resident_tensors();
    let names: Vec<_> = tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [TOKEN_EMBD, OUTPUT_NORM, OUTPUT]);
    assert_eq!(tensors[0].offset, 0);
    // The resident span ends exactly at the last resident tensor.
    assert_eq!(tensors[2].offset + tensors[2].size, knot.meta.resident.size);
    for t in tensors {
        assert_eq!(&resident[t.range().unwrap()], data[&t.name].as_slice());
    }
    // Layers follow each other; layer 0 starts after the resident tensors.
    assert!(knot.meta.layers[0].offset >= knot.meta.resident.end().unwrap());
    assert!(knot.meta.layers[1].offset >= knot.meta.layers[0].end().unwrap());
}

#[test]
fn every_tensor_is_64_byte_aligned() {
    let (file, _) = build(builder(2, true));
    let knot = Knot::from_bytes(&file).unwrap();
    assert_eq!(knot.payload_offset % 64, 1);
    for t in &knot.meta.tensors {
        assert_eq!((knot.payload_offset + t.offset) % 64, 0, "{}", t.name);
    }
}

#[test]
fn writer_is_deterministic_and_order_independent() {
    let (a, _) = build(builder(2, false));
    let (b, _) = build(builder(2, false));
    assert_eq!(a, b);
    let mut shuffled = builder(2, false);
    shuffled.tensors.reverse();
    let (c, _) = build(shuffled);
    assert_eq!(a, c);
}

#[test]
fn tied_model_needs_no_output() {
    let (file, _) = build(builder(1, true));
    let knot = Knot::from_bytes(&file).unwrap();
    assert!(knot.tensor(OUTPUT).is_none());
    let mut untied = builder(1, true);
    untied.config.tie_word_embeddings = false;
    assert_eq!(
        untied.plan().unwrap_err(),
        KnotError::MissingTensor("output.weight".into())
    );
}

#[test]
fn parse_prefix_needs_only_the_prefix() {
    let (file, _) = build(builder(2, false));
    let header = FixedHeader::parse(&file[..FIXED_HEADER_LEN], &ReadOptions::default()).unwrap();
    let prefix = &file[..header.prefix_len() as usize];
    let knot = Knot::parse_prefix(prefix, file.len() as u64, &ReadOptions::default()).unwrap();
    assert_eq!(knot.meta, Knot::from_bytes(&file).unwrap().meta);
    assert_eq!(
        Knot::prefix_len(&file[..10], &ReadOptions::default()).unwrap(),
        header.prefix_len()
    );
    let short = &prefix[..prefix.len() - 1];
    assert!(matches!(
        Knot::parse_prefix(short, file.len() as u64, &ReadOptions::default()),
        Err(KnotError::Truncated { what: "prefix", .. })
    ));
}

#[test]
fn writer_rejects_wrong_order_size_and_incomplete() {
    let plan = builder(1, true).plan().unwrap();
    let mut w = plan.writer(Vec::new()).unwrap();
    let first = plan.tensors()[0].clone();
    assert!(matches!(
        w.write_tensor("blk.0.attn_q.weight", &[]),
        Err(WriteError::UnexpectedTensor { .. })
    ));
    assert!(matches!(
        w.write_tensor(&first.name, &[0; 3]),
        Err(WriteError::WrongSize { .. })
    ));
    w.write_tensor(&first.name, &vec![0; first.size as usize])
        .unwrap();
    assert!(matches!(
        w.finish(),
        Err(WriteError::Incomplete { written: 1, .. })
    ));
    assert!(matches!(
        plan.to_bytes(|_| None),
        Err(WriteError::MissingData(_))
    ));
}

#[test]
fn builder_rejects_layer_beyond_config() {
    let mut b = builder(1, true);
    b.add_tensor("blk.5.attn_q.weight", DType::F32, vec![32]);
    assert!(matches!(
        b.plan(),
        Err(KnotError::LayerOutOfRange { layer: 5, .. })
    ));
}

#[test]
fn builder_rejects_a_layer_count_its_tensors_cannot_fill() {
    // Before: `vec![…; n_layers]` with a count straight from a converted file's header.
    for n_layers in [usize::MAX, 1 << 30, 5] {
        let mut b = builder(2, true);
        b.config.n_layers = n_layers;
        assert_eq!(
            b.plan().unwrap_err(),
            KnotError::MissingTensor("blk.2.attn_norm.weight".into()),
            "{n_layers}"
        );
    }
}

// ---- one test per validation rule ----

#[test]
fn truncated_file() {
    let (file, _) = build(builder(1, true));
    assert!(matches!(
        Knot::from_bytes(&file[..5]),
        Err(KnotError::Truncated { .. })
    ));
    let knot = Knot::from_bytes(&file).unwrap();
    assert!(matches!(
        Knot::from_bytes(&file[..knot.payload_offset as usize - 3]),
        Err(KnotError::Truncated { .. })
    ));
    // Cutting into the payload leaves the last tensor beyond the end.
    assert!(matches!(
        Knot::from_bytes(&file[..file.len() - 1]),
        Err(KnotError::OutOfBounds { .. })
    ));
}

#[test]
fn metadata_not_utf8() {
    let json = b"{\"a\":\"\xff\"}";
    assert_eq!(
        Knot::from_bytes(&raw_file(json, 0, &[])).unwrap_err(),
        KnotError::MetadataNotUtf8
    );
}

#[test]
fn metadata_invalid_json() {
    for json in [&b"{\"name\": "[..], b"   ", b"nope"] {
        assert!(matches!(
            Knot::from_bytes(&raw_file(json, 0, &[])),
            Err(KnotError::MetadataInvalidJson(_))
        ));
    }
}

#[test]
fn metadata_not_object() {
    for json in [&b"[1,2]"[..], b"42", b" \"s\""] {
        assert_eq!(
            Knot::from_bytes(&raw_file(json, 0, &[])).unwrap_err(),
            KnotError::MetadataNotObject
        );
    }
}

#[test]
fn metadata_schema_mismatch() {
    assert!(matches!(
        Knot::from_bytes(&raw_file(b"{\"name\": 3}", 0, &[])),
        Err(KnotError::MetadataSchema(_))
    ));
}

#[test]
fn nonzero_padding_and_bad_codec() {
    let (mut file, _) = build(builder(1, true));
    let knot = Knot::from_bytes(&file).unwrap();
    let codec_at = knot.payload_offset as usize - 1;
    file[codec_at] = 1;
    assert_eq!(
        Knot::from_bytes(&file).unwrap_err(),
        KnotError::UnsupportedCodec(1)
    );
    // A 2-byte JSON ends at 12, exactly where the codec byte sits.
    assert_eq!(codec_offset(2), 12);
    let f = raw_file(b"{}", 9, &[]);
    assert_eq!(
        Knot::from_bytes(&f).unwrap_err(),
        KnotError::UnsupportedCodec(9)
    );
    let mut f = raw_file(b"{}  \n", 0, &[]);
    // JSON ends at 15, codec at 16: byte 15 is padding.
    f[15] = 1;
    assert_eq!(
        Knot::from_bytes(&f).unwrap_err(),
        KnotError::NonZeroPadding(15)
    );
}

#[test]
fn unknown_dtype() {
    let err = mutate(|m| m.tensors[0].dtype = "q3_k".into()).unwrap_err();
    assert_eq!(
        err,
        KnotError::UnknownDType {
            tensor: "token_embd.weight".into(),
            dtype: "q3_k".into()
        }
    );
}

#[test]
fn size_mismatch() {
    let err = mutate(|m| m.tensors[1].size += 1).unwrap_err();
    assert!(matches!(
        err,
        KnotError::SizeMismatch {
            expected: 128,
            actual: 129,
            ..
        }
    ));
}

#[test]
fn shape_overflow_and_partial_blocks() {
    let err = mutate(|m| m.tensors[0].shape = vec![u64::MAX, 32]).unwrap_err();
    assert!(matches!(
        err,
        KnotError::InvalidShape {
            reason: "element count overflows",
            ..
        }
    ));
    let err = mutate(|m| m.tensors[0].shape = vec![32, 8]).unwrap_err();
    assert!(matches!(err, KnotError::InvalidShape { .. }));
    let err = mutate(|m| m.tensors[0].shape = vec![]).unwrap_err();
    assert!(matches!(err, KnotError::InvalidShape { .. }));
    let err = mutate(|m| m.tensors[0].shape = vec![0, 32]).unwrap_err();
    assert!(matches!(err, KnotError::InvalidShape { .. }));
    // 2^62 f32 elements fit in u64, their 2^64 bytes do not.
    let err = mutate(|m| {
        m.tensors[0].dtype = "f32".into();
        m.tensors[0].shape = vec![1 << 31, 1 << 31];
    })
    .unwrap_err();
    assert!(matches!(
        err,
        KnotError::InvalidShape {
            reason: "byte size overflows",
            ..
        }
    ));
}

#[test]
fn tensor_beyond_file() {
    let err = mutate(|m| {
        let last = m.tensors.last_mut().unwrap();
        last.offset += 64;
    })
    .unwrap_err();
    assert!(matches!(err, KnotError::OutOfBounds { .. }));
    let err = mutate(|m| m.tensors[0].offset = u64::MAX - 10).unwrap_err();
    assert!(matches!(err, KnotError::OffsetOverflow(_)));
}

#[test]
fn overlapping_tensors() {
    let err = mutate(|m| {
        let (a, b) = (m.tensors[3].offset, m.tensors[4].clone());
        // Point tensor 4 at tensor 3's bytes, keeping it inside layer 0's span.
        m.tensors[4].offset = a;
        let _ = b;
    })
    .unwrap_err();
    assert!(matches!(err, KnotError::Overlap { .. }), "{err:?}");
    // A tensor overlapping the tokenizer blob.
    let err = mutate(|m| {
        m.tensors[0].offset = 63;
        m.resident.offset = 0;
        m.resident.size += 10_000;
    })
    .unwrap_err();
    assert!(matches!(err, KnotError::Overlap { .. }), "{err:?}");
}

#[test]
fn misaligned_tensor() {
    let err = mutate(|m| {
        m.tensors[1].offset += 4;
        m.resident.size += 4;
    })
    .unwrap_err();
    assert!(matches!(err, KnotError::Misaligned { .. }), "{err:?}");
}

#[test]
fn layer_span_not_covering_its_tensors() {
    let err = mutate(|m| m.layers[1].size -= 1).unwrap_err();
    assert_eq!(
        err,
        KnotError::OutsideSpan {
            tensor: "blk.1.attn_q_norm.weight".into(),
            span: "layer 1".into()
        }
    );
    let err = mutate(|m| m.resident.offset += 1).unwrap_err();
    assert!(matches!(err, KnotError::OutsideSpan { .. }));
    let err = mutate(|m| m.layers[0].size = u64::MAX).unwrap_err();
    assert!(matches!(err, KnotError::OffsetOverflow(_)));
}

#[test]
fn spans_larger_than_their_tensors_are_rejected() {
    // A layer span stretched over the whole payload: a host would fetch and cache every byte
    // of the file for that one layer.
    let err = mutate(|m| {
        m.layers[0].offset = m.resident.offset;
        m.layers[0].size = m.layers[1].end().unwrap() - m.resident.offset;
    })
    .unwrap_err();
    assert!(
        matches!(&err, KnotError::LooseSpan { span, .. } if span == "layer 0"),
        "{err:?}"
    );
    // One byte past the last tensor (the payload has room: the next layer follows).
    let err = mutate(|m| m.layers[0].size += 1).unwrap_err();
    assert!(
        matches!(&err, KnotError::LooseSpan { span, reason } if span == "layer 0" && reason.contains("ends 1 bytes after")),
        "{err:?}"
    );
    // Starting before the first tensor.
    let err = mutate(|m| {
        m.layers[1].offset -= 64;
        m.layers[1].size += 64;
    })
    .unwrap_err();
    assert!(
        matches!(&err, KnotError::LooseSpan { span, .. } if span == "layer 1"),
        "{err:?}"
    );
    // The resident span follows the same rule.
    let err = mutate(|m| m.resident.size += 64).unwrap_err();
    assert!(
        matches!(&err, KnotError::LooseSpan { span, .. } if span == "resident tensors"),
        "{err:?}"
    );
    // A gap of a whole alignment unit between two tensors of a span is more than padding.
    // (the last tensor of the file moves, and the file grows to keep it inside).
    let (file, _) = build(builder(2, false));
    let mut meta = Knot::from_bytes(&file).unwrap().meta;
    let last = meta.tensors.len() - 1;
    meta.tensors[last].offset += 64;
    meta.layers[1].size += 64;
    let mut moved = reassemble(&meta, &file);
    moved.extend_from_slice(&[0; 64]);
    let err = Knot::from_bytes(&moved).unwrap_err();
    assert!(
        matches!(&err, KnotError::LooseSpan { reason, .. } if reason.contains("more than alignment padding")),
        "{err:?}"
    );
}

#[test]
fn written_spans_are_tight_for_any_sizes() {
    // Odd-sized tensors leave padding between them; the writer's spans still pass.
    let mut b = builder(2, false);
    b.add_tensor("blk.0.extra_a", DType::F32, vec![3]);
    b.add_tensor("blk.0.extra_b", DType::F32, vec![5]);
    b.add_tensor("rope_freqs.weight", DType::F32, vec![7]);
    let (file, _) = build(b);
    Knot::from_bytes(&file).unwrap();
}

#[test]
fn tensor_ranges_beyond_usize_are_errors() {
    let info = |offset: u64, size: u64| TensorInfo {
        name: "t".into(),
        dtype: DType::F32,
        shape: vec![size / 4],
        offset,
        size,
    };
    assert_eq!(info(64, 8).range(), Ok(64..72));
    assert_eq!(
        info(u64::MAX - 4, 8).range(),
        Err(KnotError::OffsetOverflow("t".into()))
    );
    // Past 4 GiB: fine on 64-bit targets, an error (not a truncated range) on wasm32.
    let far = info(u32::MAX as u64 + 1, 8).range();
    #[cfg(target_pointer_width = "64")]
    assert_eq!(far, Ok(1 << 32..(1 << 32) + 8));
    #[cfg(target_pointer_width = "32")]
    assert_eq!(far, Err(KnotError::OffsetOverflow("t".into())));
}

#[test]
fn layer_count_mismatch() {
    let err = mutate(|m| m.config.n_layers = 3).unwrap_err();
    assert_eq!(
        err,
        KnotError::LayerCount {
            spans: 2,
            n_layers: 3
        }
    );
    let err = mutate(|m| {
        m.config.n_layers = 1;
        m.layers.pop();
    })
    .unwrap_err();
    assert!(matches!(err, KnotError::LayerOutOfRange { layer: 1, .. }));
}

#[test]
fn missing_canonical_tensors() {
    for name in ["token_embd.weight", "output_norm.weight", "output.weight"] {
        let err = mutate(|m| m.tensors.retain(|t| t.name != name)).unwrap_err();
        assert_eq!(err, KnotError::MissingTensor(name.into()));
    }
    for c in CANONICAL_LAYER_TENSORS {
        let name = layer_tensor_name(1, c);
        let err = mutate(|m| m.tensors.retain(|t| t.name != name)).unwrap_err();
        assert_eq!(err, KnotError::MissingTensor(name));
    }
}

#[test]
fn duplicate_tensor() {
    let err = mutate(|m| {
        let t = m.tensors[0].clone();
        m.tensors.push(t);
    })
    .unwrap_err();
    assert_eq!(err, KnotError::DuplicateTensor("token_embd.weight".into()));
}

#[test]
fn tokenizer_blob_out_of_range() {
    let err = mutate(|m| m.tokenizer.blob.size = 1 << 40).unwrap_err();
    assert!(matches!(err, KnotError::TokenizerOutOfRange { .. }));
    let err = mutate(|m| m.tokenizer.blob.offset = u64::MAX).unwrap_err();
    assert!(matches!(err, KnotError::TokenizerOutOfRange { .. }));
}

#[test]
fn bad_tokenizer_blob_is_typed() {
    assert!(matches!(
        Knot::parse_tokenizer(b"[]"),
        Err(KnotError::TokenizerBlob(_))
    ));
}

#[test]
fn absolute_checks_bounds() {
    let (file, _) = build(builder(1, true));
    let knot = Knot::from_bytes(&file).unwrap();
    let r = knot.absolute(Span { offset: 0, size: 4 }).unwrap();
    assert_eq!(r, knot.payload_offset..knot.payload_offset + 4);
    assert!(knot
        .absolute(Span {
            offset: 0,
            size: file.len() as u64
        })
        .is_err());
    assert!(knot
        .absolute(Span {
            offset: u64::MAX,
            size: 1
        })
        .is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any mix of row lengths and layer counts lays out aligned, round-trips, and the metadata
    /// padding always puts the payload one past a 64-byte boundary.
    #[test]
    fn layout_is_aligned_for_any_sizes(
        n_layers in 1usize..4,
        rows in proptest::collection::vec(1u64..40, 9),
        name_len in 0usize..200,
        extra_f32 in 0u64..70,
    ) {
        let mut b = KnotBuilder::new("m".repeat(name_len), "llama", config(n_layers, true), tokenizer());
        b.add_tensor(TOKEN_EMBD, DType::Q8_0, vec![rows[0], 32]);
        b.add_tensor(OUTPUT_NORM, DType::F32, vec![rows[1]]);
        for l in 0..n_layers {
            for (i, c) in CANONICAL_LAYER_TENSORS.iter().enumerate() {
                let dtype = [DType::F32, DType::F16, DType::Q4_0][i % 3];
                b.add_tensor(layer_tensor_name(l, c), dtype, vec![rows[i], 32]);
            }
            if extra_f32 > 0 {
                b.add_tensor(format!("blk.{l}.attn_q.bias"), DType::F32, vec![extra_f32]);
            }
        }
        let (file, data) = build(b);
        let knot = Knot::from_bytes(&file).unwrap();
        prop_assert_eq!(knot.payload_offset % 64, 1);
        prop_assert_eq!(knot.payload_offset, payload_offset(knot.header.meta_len));
        for t in &knot.meta.tensors {
            prop_assert_eq!((knot.payload_offset + t.offset) % 64, 0);
            prop_assert_eq!(knot.tensor_bytes(&file, &t.name).unwrap(), data[&t.name].as_slice());
        }
        let last = knot.meta.layers[n_layers - 1];
        prop_assert_eq!(knot.payload_offset + last.end().unwrap(), file.len() as u64);
    }
}

#[test]
fn llama_configs_omit_the_architecture_variations_and_read_back_as_before() {
    let c = config(2, false);
    let json = serde_json::to_value(&c).unwrap();
    for k in [
        "qkv_bias",
        "qk_norm",
        "sandwich_norms",
        "scale_embeddings",
        "ffn_activation",
        "query_pre_attn_scalar",
        "sliding_window",
        "sliding_window_pattern",
        "rope_theta_local",
    ] {
        assert!(json.get(k).is_none(), "{k} written for a llama config");
    }
    assert_eq!(serde_json::from_value::<ModelConfig>(json).unwrap(), c);

    let gemma = ModelConfig {
        qk_norm: true,
        sandwich_norms: true,
        ffn_activation: FfnActivation::GeluTanh,
        sliding_window: Some(4),
        sliding_window_pattern: 6,
        rope_theta_local: Some(10000.0),
        ..c
    };
    let json = serde_json::to_value(&gemma).unwrap();
    assert_eq!(json["ffn_activation"], "gelu_tanh");
    assert_eq!(serde_json::from_value::<ModelConfig>(json).unwrap(), gemma);
    let local: Vec<bool> = (0..12).map(|l| gemma.is_local_layer(l)).collect();
    assert_eq!(local.iter().filter(|&&l| !l).count(), 2);
    assert!(!local[5] && !local[11] && local[0] && local[6]);
}
