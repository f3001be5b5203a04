//! Conversion tests: crafted GGUF files and HF directories, and the real SmolLM2 GGUF.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use knot::{DType, Knot, RopeStyle};
use serde_json::json;

use super::*;
use crate::gguf::write::{file as gguf_file, RawTensor};
use crate::gguf::{GgufArray, GgufError, GgufFile, GgufValue};

/// The real model the conversion is checked on, in the workspace's models/ cache.
const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A model file in the workspace's git-ignored models/ cache (scripts/fetch-model.sh fills it),
/// or None when it is absent. When `KNOT_REQUIRE_MODELS` is set, a missing model is a failure,
/// so a test run can never pass by skipping; `KNOT_SKIP_MODELS` (the quick tier) skips.
fn require_model(name: &str) -> Option<PathBuf> {
    if std::env::var_os("KNOT_SKIP_MODELS").is_some() {
        eprintln!("skipping: {name} (KNOT_SKIP_MODELS: the tiny-model tier)");
        return None;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(name);
    if path.exists() {
        return Some(path);
    }
    if std::env::var_os("KNOT_REQUIRE_MODELS").is_some() {
        panic!("{} is missing: run scripts/fetch-model.sh", path.display());
    }
    eprintln!(
        "skipping: {} not present (run scripts/fetch-model.sh)",
        path.display()
    );
    None
}

/// A scratch directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "knot-convert-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn no_progress(_: u64, _: u64) {}

fn f32_bytes(n: usize, seed: f32) -> Vec<u8> {
    (0..n)
        .flat_map(|i| ((i as f32 * 0.37 + seed).sin() * 0.5).to_le_bytes())
        .collect()
}

const DIM: u64 = 32;
const FFN: u64 = 64;
const VOCAB: u64 = 16;
const KV_DIM: u64 = 16;

fn vocab() -> Vec<String> {
    let mut v: Vec<String> = (0..VOCAB - 3).map(|i| format!("t{i}")).collect();
    v.extend(["<s>".into(), "</s>".into(), "<|im_end|>".into()]);
    v
}

/// A tiny llama GGUF (f32 weights, ne-order dims) with every canonical tensor.
fn tiny_gguf(arch: &str, n_layers: u64, tied: bool) -> Vec<u8> {
    let mut tensors = Vec::new();
    let mut add = |name: String, ne: Vec<u64>| {
        let n: u64 = ne.iter().product();
        let seed = tensors.len() as f32;
        tensors.push(RawTensor {
            name,
            dims: ne,
            type_id: 0,
            data: f32_bytes(n as usize, seed),
        });
    };
    add("token_embd.weight".into(), vec![DIM, VOCAB]);
    add("output_norm.weight".into(), vec![DIM]);
    if !tied {
        add("output.weight".into(), vec![DIM, VOCAB]);
    }
    for l in 0..n_layers {
        add(format!("blk.{l}.attn_norm.weight"), vec![DIM]);
        add(format!("blk.{l}.attn_q.weight"), vec![DIM, DIM]);
        add(format!("blk.{l}.attn_k.weight"), vec![DIM, KV_DIM]);
        add(format!("blk.{l}.attn_v.weight"), vec![DIM, KV_DIM]);
        add(format!("blk.{l}.attn_output.weight"), vec![DIM, DIM]);
        add(format!("blk.{l}.ffn_norm.weight"), vec![DIM]);
        add(format!("blk.{l}.ffn_gate.weight"), vec![DIM, FFN]);
        add(format!("blk.{l}.ffn_up.weight"), vec![DIM, FFN]);
        add(format!("blk.{l}.ffn_down.weight"), vec![FFN, DIM]);
    }
    let s = |x: &str| GgufValue::String(x.into());
    let kv = vec![
        ("general.architecture", s(arch)),
        ("general.name", s("tiny")),
        ("llama.block_count", GgufValue::U32(n_layers as u32)),
        ("llama.embedding_length", GgufValue::U32(DIM as u32)),
        ("llama.attention.head_count", GgufValue::U32(4)),
        ("llama.attention.head_count_kv", GgufValue::U32(2)),
        ("llama.feed_forward_length", GgufValue::U32(FFN as u32)),
        ("llama.context_length", GgufValue::U32(256)),
        ("llama.rope.freq_base", GgufValue::F32(100000.0)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            GgufValue::F32(1e-5),
        ),
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("smollm")),
        (
            "tokenizer.ggml.tokens",
            GgufValue::array(vocab().iter().map(|t| s(t)).collect()).unwrap(),
        ),
        (
            "tokenizer.ggml.token_type",
            GgufValue::Array(GgufArray::I32(
                (0..VOCAB).map(|i| if i >= 13 { 3 } else { 1 }).collect(),
            )),
        ),
        (
            "tokenizer.ggml.merges",
            GgufValue::array(vec![s("t 1")]).unwrap(),
        ),
        ("tokenizer.ggml.bos_token_id", GgufValue::U32(13)),
        ("tokenizer.ggml.eos_token_id", GgufValue::U32(14)),
        ("tokenizer.ggml.add_bos_token", GgufValue::Bool(false)),
        (
            "tokenizer.chat_template",
            s("{% for m in messages %}{{ m.content }}{% endfor %}"),
        ),
    ];
    gguf_file(&kv, &tensors)
}

fn convert_gguf_bytes(
    bytes: &[u8],
    opts: &ConvertOptions,
) -> Result<(Summary, Vec<u8>), ConvertError> {
    let dir = TempDir::new("gguf");
    let input = dir.path("in.gguf");
    let output = dir.path("out.knot");
    std::fs::write(&input, bytes).unwrap();
    let summary = gguf_to_knot(&input, &output, opts, &no_progress)?;
    assert!(!dir.path("out.knot.partial").exists());
    Ok((summary, std::fs::read(&output).unwrap()))
}

#[test]
fn tiny_gguf_converts_with_bytes_config_and_tokenizer() {
    let input = tiny_gguf("llama", 2, false);
    let progress_calls = std::cell::RefCell::new(Vec::new());
    let dir = TempDir::new("tiny");
    std::fs::write(dir.path("in.gguf"), &input).unwrap();
    let summary = gguf_to_knot(
        &dir.path("in.gguf"),
        &dir.path("out.knot"),
        &ConvertOptions::default(),
        &|d, t| progress_calls.borrow_mut().push((d, t)),
    )
    .unwrap();
    let out = std::fs::read(dir.path("out.knot")).unwrap();
    assert_eq!(summary.n_layers, 2);
    assert_eq!(summary.n_tensors, 3 + 18);
    assert_eq!(summary.converted_tensors, 0);
    assert_eq!(summary.file_len, out.len() as u64);
    let calls = progress_calls.into_inner();
    assert_eq!(calls.first().unwrap().0, 0);
    let (done, total) = *calls.last().unwrap();
    assert_eq!(done, total);

    let knot = Knot::from_bytes(&out).unwrap();
    let c = &knot.meta.config;
    assert_eq!(
        (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim),
        (2, 32, 4, 2, 8)
    );
    assert_eq!(
        (c.ffn_dim, c.vocab_size, c.context_length, c.rope_dim),
        (64, 16, 256, 8)
    );
    assert_eq!(c.rope_theta, 100000.0);
    assert_eq!(c.rope_style, RopeStyle::Interleaved);
    assert!(!c.tie_word_embeddings);
    assert_eq!(c.bos_id, Some(13));
    assert_eq!(c.eos_ids, vec![14, 15]);
    assert!(!c.add_bos);
    assert_eq!(knot.meta.name, "tiny");
    assert!(knot
        .meta
        .chat_template
        .as_deref()
        .unwrap()
        .contains("messages"));

    let g = GgufFile::read(&mut Cursor::new(&input)).unwrap();
    for t in &g.tensors {
        let kt = knot.tensor(&t.name).unwrap();
        assert_eq!(kt.shape, t.shape(), "{}", t.name);
        let start = (g.data_offset + t.offset) as usize;
        assert_eq!(
            knot.tensor_bytes(&out, &t.name).unwrap(),
            &input[start..start + t.size as usize],
            "{}",
            t.name
        );
    }
    let range = knot.tokenizer_range();
    let tok = Knot::parse_tokenizer(&out[range.start as usize..range.end as usize]).unwrap();
    assert_eq!(tok.tokens, vocab());
    assert_eq!(tok.merges, vec!["t 1".to_string()]);
    assert_eq!(tok.pre.as_deref(), Some("smollm"));
    assert_eq!(tok.token_types[15], 3);
}

#[test]
fn tiny_gguf_requantizes_matrices_and_keeps_norms_f32() {
    let input = tiny_gguf("llama", 1, true);
    let opts = ConvertOptions {
        dtype: TargetDType::Q8_0,
        name: Some("renamed".into()),
    };
    let (summary, out) = convert_gguf_bytes(&input, &opts).unwrap();
    let knot = Knot::from_bytes(&out).unwrap();
    assert_eq!(knot.meta.name, "renamed");
    assert!(knot.meta.config.tie_word_embeddings);
    assert_eq!(
        knot.tensor("blk.0.attn_q.weight").unwrap().dtype,
        DType::Q8_0
    );
    assert_eq!(knot.tensor("token_embd.weight").unwrap().dtype, DType::Q8_0);
    assert_eq!(
        knot.tensor("blk.0.attn_norm.weight").unwrap().dtype,
        DType::F32
    );
    // 8 matrices (token_embd + 7 per layer) changed; norms were already f32.
    assert_eq!(summary.converted_tensors, 8);
    // Dequantized values stay close to the originals.
    let q = knot.tensor_bytes(&out, "blk.0.attn_q.weight").unwrap();
    let mut values = vec![0f32; (DIM * DIM) as usize];
    engine::quant::dequantize(DType::Q8_0, q, &mut values).unwrap();
    let g = GgufFile::read(&mut Cursor::new(&input)).unwrap();
    let orig = g
        .read_tensor(
            &mut Cursor::new(&input),
            g.tensor("blk.0.attn_q.weight").unwrap(),
        )
        .unwrap();
    for (a, b) in values.iter().zip(orig.chunks_exact(4)) {
        let b = f32::from_le_bytes(b.try_into().unwrap());
        assert!((a - b).abs() < 0.01, "{a} vs {b}");
    }
}

#[test]
fn conversion_is_deterministic() {
    let input = tiny_gguf("llama", 2, false);
    let (_, a) = convert_gguf_bytes(&input, &ConvertOptions::default()).unwrap();
    let (_, b) = convert_gguf_bytes(&input, &ConvertOptions::default()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn rejects_unknown_architecture_by_name() {
    let err =
        convert_gguf_bytes(&tiny_gguf("mamba", 1, false), &ConvertOptions::default()).unwrap_err();
    assert!(matches!(err, ConvertError::UnsupportedArchitecture(ref a) if a == "mamba"));
    assert!(err.to_string().contains("mamba"));
    assert!(err
        .to_string()
        .contains("(supported: llama, qwen2, qwen3, gemma3)"));
}

#[test]
fn bad_gguf_inputs_give_specific_errors() {
    let good = tiny_gguf("llama", 1, false);
    let opts = ConvertOptions::default();
    let gguf_err = |bytes: Vec<u8>| match convert_gguf_bytes(&bytes, &opts) {
        Err(ConvertError::Gguf(e)) => e,
        other => panic!("expected a GGUF error, got {other:?}"),
    };

    let mut b = good.clone();
    b[..4].copy_from_slice(b"GGJT");
    assert!(matches!(gguf_err(b), GgufError::BadMagic(_)));

    let mut b = good.clone();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(gguf_err(b), GgufError::UnsupportedVersion(1)));

    assert!(matches!(
        gguf_err(good[..100].to_vec()),
        GgufError::Truncated(_)
    ));

    let mut b = good.clone();
    b[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(
        gguf_err(b),
        GgufError::TooMany { what: "tensor", .. }
    ));

    let mut b = good.clone();
    b[24..32].copy_from_slice(&(1u64 << 50).to_le_bytes());
    assert!(matches!(gguf_err(b), GgufError::StringTooLong { .. }));

    let mut b = good.clone();
    b.truncate(b.len() - 4);
    assert!(matches!(gguf_err(b), GgufError::TensorBeyondEof { .. }));

    // Unknown ggml type: the type id of the first tensor (token_embd), found after its dims.
    let g = GgufFile::read(&mut Cursor::new(&good)).unwrap();
    let name = b"token_embd.weight";
    let at = good.windows(name.len()).position(|w| w == name).unwrap() + name.len() + 4 + 16;
    let mut b = good.clone();
    assert_eq!(u32::from_le_bytes(b[at..at + 4].try_into().unwrap()), 0);
    b[at..at + 4].copy_from_slice(&16u32.to_le_bytes());
    assert!(matches!(
        gguf_err(b),
        GgufError::UnknownGgmlType { type_id: 16, .. }
    ));
    drop(g);
}

#[test]
fn missing_hyperparameter_is_named() {
    // Rename the block_count key so it is absent.
    let mut b = tiny_gguf("llama", 1, false);
    let key = b"llama.block_count";
    let at = b.windows(key.len()).position(|w| w == key).unwrap();
    b[at..at + 5].copy_from_slice(b"xxxxx");
    let err = convert_gguf_bytes(&b, &ConvertOptions::default()).unwrap_err();
    assert!(
        matches!(err, ConvertError::MissingKey(ref k) if k == "llama.block_count"),
        "{err}"
    );
}

#[test]
fn smollm2_gguf_converts_exactly() {
    let Some(path) = require_model(SMOLLM2) else {
        return;
    };
    let input = path.as_path();
    let dir = TempDir::new("smollm2");
    let (a, b) = (dir.path("a.knot"), dir.path("b.knot"));
    let summary = gguf_to_knot(input, &a, &ConvertOptions::default(), &no_progress).unwrap();
    gguf_to_knot(input, &b, &ConvertOptions::default(), &no_progress).unwrap();
    let out = std::fs::read(&a).unwrap();
    assert!(out == std::fs::read(&b).unwrap(), "two conversions differ");
    assert_eq!(summary.n_layers, 30);
    assert_eq!(summary.n_tensors, 2 + 30 * 9);

    let knot = Knot::from_bytes(&out).unwrap();
    let c = &knot.meta.config;
    assert_eq!(
        (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim),
        (30, 576, 9, 3, 64)
    );
    assert_eq!((c.ffn_dim, c.vocab_size), (1536, 49152));
    assert!(c.tie_word_embeddings);
    assert_eq!(c.rope_style, RopeStyle::Interleaved);
    assert_eq!(knot.meta.architecture, "llama");
    assert!(knot.meta.chat_template.is_some());
    assert_eq!(knot.tensor("token_embd.weight").unwrap().dtype, DType::Q8_0);
    assert_eq!(
        knot.tensor("blk.0.attn_q.weight").unwrap().dtype,
        DType::Q4_1
    );
    assert_eq!(
        knot.tensor("blk.0.attn_q.weight").unwrap().shape,
        vec![576, 576]
    );
    assert_eq!(
        knot.tensor("blk.0.attn_k.weight").unwrap().shape,
        vec![192, 576]
    );
    assert_eq!(
        knot.tensor("blk.0.ffn_down.weight").unwrap().shape,
        vec![576, 1536]
    );

    let mut file = std::fs::File::open(input).unwrap();
    let g = GgufFile::read(&mut file).unwrap();
    for t in &g.tensors {
        let bytes = g.read_tensor(&mut file, t).unwrap();
        assert!(
            knot.tensor_bytes(&out, &t.name).unwrap() == bytes.as_slice(),
            "{}",
            t.name
        );
    }
    let range = knot.tokenizer_range();
    let tok = Knot::parse_tokenizer(&out[range.start as usize..range.end as usize]).unwrap();
    assert_eq!(tok.model, "gpt2");
    assert_eq!(tok.pre.as_deref(), Some("smollm"));
    assert_eq!(tok.tokens.len(), 49152);
    assert_eq!(tok.token_types.len(), 49152);
    assert!(tok.merges.len() > 40000, "{} merges", tok.merges.len());
    let im_end = tok.tokens.iter().position(|t| t == "<|im_end|>").unwrap() as u32;
    assert!(c.eos_ids.contains(&im_end));
    assert_eq!(c.eos_ids[0], tok.eos_id.unwrap());
    assert_eq!(c.bos_id, tok.bos_id);
}

// ---- HuggingFace ----

/// HF-named f32/bf16 tensors for a tiny llama, with their raw bytes.
fn hf_tensors(
    n_layers: u64,
    with_lm_head: bool,
) -> Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |name: String, shape: Vec<u64>, bf16: bool| {
        let n: u64 = shape.iter().product();
        let f = f32_bytes(n as usize, out.len() as f32);
        let (dtype, data) = if bf16 {
            // Truncate f32 to bf16 (upper half of each value).
            let d = f.chunks_exact(4).flat_map(|c| [c[2], c[3]]).collect();
            (safetensors::Dtype::BF16, d)
        } else {
            (safetensors::Dtype::F32, f)
        };
        out.push((
            name,
            dtype,
            shape.iter().map(|&d| d as usize).collect(),
            data,
        ));
    };
    add("model.embed_tokens.weight".into(), vec![VOCAB, DIM], true);
    add("model.norm.weight".into(), vec![DIM], false);
    if with_lm_head {
        add("lm_head.weight".into(), vec![VOCAB, DIM], true);
    }
    for l in 0..n_layers {
        let p = format!("model.layers.{l}");
        add(format!("{p}.input_layernorm.weight"), vec![DIM], false);
        add(format!("{p}.self_attn.q_proj.weight"), vec![DIM, DIM], true);
        add(
            format!("{p}.self_attn.k_proj.weight"),
            vec![KV_DIM, DIM],
            true,
        );
        add(
            format!("{p}.self_attn.v_proj.weight"),
            vec![KV_DIM, DIM],
            true,
        );
        add(format!("{p}.self_attn.o_proj.weight"), vec![DIM, DIM], true);
        add(
            format!("{p}.post_attention_layernorm.weight"),
            vec![DIM],
            false,
        );
        add(format!("{p}.mlp.gate_proj.weight"), vec![FFN, DIM], true);
        add(format!("{p}.mlp.up_proj.weight"), vec![FFN, DIM], true);
        add(format!("{p}.mlp.down_proj.weight"), vec![DIM, FFN], true);
    }
    out
}

fn write_safetensors(path: &Path, tensors: &[(String, safetensors::Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, &None, path).unwrap();
}

fn write_hf_dir(dir: &TempDir, n_layers: u64, tied: bool, sharded: bool) {
    let tensors = hf_tensors(n_layers, !tied);
    if sharded {
        let (a, b) = tensors.split_at(tensors.len() / 2);
        write_safetensors(&dir.path("model-00001-of-00002.safetensors"), a);
        write_safetensors(&dir.path("model-00002-of-00002.safetensors"), b);
        let mut map = serde_json::Map::new();
        for (t, f) in a
            .iter()
            .map(|t| (t, "model-00001-of-00002.safetensors"))
            .chain(b.iter().map(|t| (t, "model-00002-of-00002.safetensors")))
        {
            map.insert(t.0.clone(), json!(f));
        }
        let index = json!({"metadata": {}, "weight_map": map});
        std::fs::write(dir.path("model.safetensors.index.json"), index.to_string()).unwrap();
    } else {
        write_safetensors(&dir.path("model.safetensors"), &tensors);
    }
    let config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": DIM,
        "intermediate_size": FFN,
        "num_hidden_layers": n_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": VOCAB,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": null,
        "tie_word_embeddings": tied,
        "bos_token_id": 13,
        "eos_token_id": 14,
    });
    std::fs::write(dir.path("config.json"), config.to_string()).unwrap();
    // 13 byte-level tokens plus three added specials.
    let mut vocab = serde_json::Map::new();
    for i in 0..13 {
        vocab.insert(format!("t{i}"), json!(i));
    }
    let tokenizer = json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 13, "content": "<s>", "special": true},
            {"id": 14, "content": "</s>", "special": true},
            {"id": 15, "content": "<|im_end|>", "special": true},
        ],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        ]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": ["t 1", ["t1", "0"]]},
    });
    std::fs::write(dir.path("tokenizer.json"), tokenizer.to_string()).unwrap();
    let tok_config = json!({
        "add_bos_token": false,
        "chat_template": "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}",
    });
    std::fs::write(dir.path("tokenizer_config.json"), tok_config.to_string()).unwrap();
}

#[test]
fn hf_directory_converts() {
    for (tied, sharded) in [(false, false), (true, false), (false, true)] {
        let dir = TempDir::new("hf");
        write_hf_dir(&dir, 2, tied, sharded);
        let out_path = dir.path("out.knot");
        let summary =
            hf_to_knot(&dir.0, &out_path, &ConvertOptions::default(), &no_progress).unwrap();
        let out = std::fs::read(&out_path).unwrap();
        let knot = Knot::from_bytes(&out).unwrap();
        assert_eq!(summary.n_tensors, 2 + usize::from(!tied) + 18);
        let c = &knot.meta.config;
        assert_eq!(
            (c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.head_dim),
            (2, 32, 4, 2, 8)
        );
        assert_eq!((c.ffn_dim, c.vocab_size, c.context_length), (64, 16, 512));
        assert_eq!(c.rope_style, RopeStyle::Neox);
        assert_eq!(c.tie_word_embeddings, tied);
        assert_eq!(c.bos_id, Some(13));
        assert_eq!(c.eos_ids, vec![14, 15]);
        assert!(!c.add_bos);
        assert!(knot
            .meta
            .chat_template
            .as_deref()
            .unwrap()
            .contains("<|im_start|>"));
        assert_eq!(knot.tensor("output.weight").is_some(), !tied);

        for (hf_name, _, shape, bytes) in hf_tensors(2, !tied) {
            let name = super::from_hf::knot_name(&hf_name, &super::arch::spec("llama").unwrap())
                .unwrap()
                .unwrap();
            let t = knot.tensor(&name).unwrap();
            assert_eq!(
                t.shape,
                shape.iter().map(|&d| d as u64).collect::<Vec<_>>(),
                "{name}"
            );
            let expected_dtype = if shape.len() == 1 {
                DType::F32
            } else {
                DType::Bf16
            };
            assert_eq!(t.dtype, expected_dtype, "{name}");
            assert!(
                knot.tensor_bytes(&out, &name).unwrap() == bytes.as_slice(),
                "{name}"
            );
        }
        let range = knot.tokenizer_range();
        let tok = Knot::parse_tokenizer(&out[range.start as usize..range.end as usize]).unwrap();
        assert_eq!(tok.model, "gpt2");
        assert_eq!(tok.pre.as_deref(), Some("smollm"));
        assert_eq!(tok.tokens.len(), 16);
        assert_eq!(tok.tokens[15], "<|im_end|>");
        assert_eq!(&tok.token_types[12..], &[1, 3, 3, 3]);
        assert_eq!(tok.merges, vec!["t 1".to_string(), "t1 0".to_string()]);
    }
}

#[test]
fn hf_requantizes_to_f16() {
    let dir = TempDir::new("hf-f16");
    write_hf_dir(&dir, 1, true, false);
    let out_path = dir.path("out.knot");
    let opts = ConvertOptions {
        dtype: TargetDType::F16,
        name: None,
    };
    hf_to_knot(&dir.0, &out_path, &opts, &no_progress).unwrap();
    let out = std::fs::read(&out_path).unwrap();
    let knot = Knot::from_bytes(&out).unwrap();
    assert_eq!(
        knot.tensor("blk.0.ffn_up.weight").unwrap().dtype,
        DType::F16
    );
    assert_eq!(
        knot.tensor("blk.0.ffn_norm.weight").unwrap().dtype,
        DType::F32
    );
}

#[test]
fn gguf_layer_count_is_bounded_before_anything_is_allocated_per_layer() {
    // block_count = u32::MAX: before, `vec![…; n_layers]` in the plan asked for ~100 GB.
    let mut b = tiny_gguf("llama", 1, false);
    let key = b"llama.block_count";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    assert_eq!(
        &b[at..at + 8],
        [&4u32.to_le_bytes()[..], &1u32.to_le_bytes()].concat()
    );
    b[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = convert_gguf_bytes(&b, &ConvertOptions::default()).unwrap_err();
    assert!(
        matches!(&err, ConvertError::InvalidConfig(m) if m.starts_with("n_layers 4294967295")),
        "{err}"
    );
    // A float the engine would run as infinity.
    let mut b = tiny_gguf("llama", 1, false);
    let key = b"llama.rope.freq_base";
    let at = b.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    b[at..at + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let err = convert_gguf_bytes(&b, &ConvertOptions::default()).unwrap_err();
    assert!(
        matches!(&err, ConvertError::InvalidConfig(m) if m.starts_with("rope_theta inf")),
        "{err}"
    );
}

#[test]
fn hf_layer_count_and_floats_are_bounded() {
    let dir = TempDir::new("hf-bounds");
    write_hf_dir(&dir, 1, true, false);
    let cfg_path = dir.path("config.json");
    let good: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    let out = dir.path("o.knot");
    for (key, value, message) in [
        (
            "num_hidden_layers",
            json!(1u64 << 40),
            "n_layers 1099511627776",
        ),
        // Reads as an f32 infinity.
        ("rms_norm_eps", json!(1e300), "norm_eps inf"),
        ("rope_theta", json!(-1.0), "rope_theta -1"),
    ] {
        let mut cfg = good.clone();
        cfg[key] = value;
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
        assert!(
            matches!(&err, ConvertError::InvalidConfig(m) if m.starts_with(message)),
            "{key}: {err}"
        );
        assert!(!out.exists());
    }
}

#[test]
fn hf_errors_are_specific() {
    // Untied without lm_head.
    let dir = TempDir::new("hf-err");
    write_hf_dir(&dir, 1, true, false);
    let cfg_path = dir.path("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    cfg["tie_word_embeddings"] = json!(false);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let out = dir.path("o.knot");
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    assert!(
        matches!(err, ConvertError::MissingTensor(ref n) if n == "lm_head.weight"),
        "{err}"
    );

    cfg["tie_word_embeddings"] = json!(true);
    cfg["model_type"] = json!("mistral3");
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    assert!(matches!(err, ConvertError::UnsupportedArchitecture(ref a) if a == "mistral3"));

    cfg["model_type"] = json!("llama");
    cfg["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0});
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    assert!(matches!(err, ConvertError::Unsupported(_)));

    cfg["rope_scaling"] = json!(null);
    cfg["vocab_size"] = json!(17);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    assert!(matches!(err, ConvertError::InvalidConfig(_)), "{err}");

    // A safetensors header claiming more bytes than the file has.
    cfg["vocab_size"] = json!(VOCAB);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let st = dir.path("model.safetensors");
    let mut bytes = std::fs::read(&st).unwrap();
    bytes.truncate(bytes.len() - 1);
    std::fs::write(&st, &bytes).unwrap();
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    assert!(matches!(err, ConvertError::Safetensors { .. }), "{err}");
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&st, &bytes).unwrap();
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    assert!(matches!(err, ConvertError::Safetensors { .. }), "{err}");
    assert!(!dir.path("o.knot").exists());
}

/// A copy of a committed tiny HF fixture directory, to break on purpose.
fn fixture_hf_copy(name: &str) -> TempDir {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../tests/fixtures/tiny/{name}"));
    let dir = TempDir::new(name);
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.path(f)).unwrap();
    }
    dir
}

fn hf_err_with(dir: &TempDir, edit: impl FnOnce(&mut serde_json::Value)) -> ConvertError {
    let cfg_path = dir.path("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cfg_path).unwrap()).unwrap();
    let original = cfg.clone();
    edit(&mut cfg);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let out = dir.path("o.knot");
    let err = hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap_err();
    std::fs::write(&cfg_path, original.to_string()).unwrap();
    err
}

#[test]
fn gemma3_hf_config_reads_pattern_bases_and_norms() {
    let dir = fixture_hf_copy("gemma3-f32-hf");
    let out = dir.path("g.knot");
    hf_to_knot(&dir.0, &out, &ConvertOptions::default(), &no_progress).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let knot = Knot::from_bytes(&bytes).unwrap();
    let c = &knot.meta.config;
    assert_eq!(knot.meta.architecture, "gemma3");
    assert_eq!((c.sliding_window, c.sliding_window_pattern), (Some(4), 6));
    assert_eq!((c.rope_theta, c.rope_theta_local), (1e6, Some(1e4)));
    assert_eq!(c.query_pre_attn_scalar, Some(32.0));
    assert!(c.qk_norm && c.sandwich_norms && c.scale_embeddings && !c.qkv_bias);
    assert_eq!(c.ffn_activation, knot::FfnActivation::GeluTanh);
    // Norms are stored as 1 + w: the HF weights were drawn around 0.
    let t = knot.tensor("blk.0.post_ffw_norm.weight").unwrap();
    let start = (knot.payload_offset + t.offset) as usize;
    let mean = bytes[start..start + t.size as usize]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .sum::<f32>()
        / 64.0;
    assert!((mean - 1.0).abs() < 0.1, "{mean}");
}

#[test]
fn gemma3_hf_configs_the_engine_cannot_run_are_rejected() {
    let dir = fixture_hf_copy("gemma3-f32-hf");
    let unsupported = |e: ConvertError| matches!(e, ConvertError::Unsupported(_));
    assert!(unsupported(hf_err_with(&dir, |c| {
        c["final_logit_softcapping"] = json!(30.0)
    })));
    assert!(unsupported(hf_err_with(&dir, |c| {
        c["attn_logit_softcapping"] = json!(50.0)
    })));
    // Global layers that do not recur with one period.
    assert!(unsupported(hf_err_with(&dir, |c| {
        c["layer_types"][0] = json!("full_attention")
    })));
    assert!(unsupported(hf_err_with(&dir, |c| {
        c["layer_types"][1] = json!("chunked_attention")
    })));
    assert!(unsupported(hf_err_with(&dir, |c| {
        c["rope_parameters"]["sliding_attention"]["rope_type"] = json!("linear")
    })));
    let e = hf_err_with(&dir, |c| c["layer_types"] = json!(["full_attention"]));
    assert!(matches!(e, ConvertError::InvalidConfig(_)), "{e}");
    let e = hf_err_with(&dir, |c| c["sliding_window"] = json!(0));
    assert!(matches!(e, ConvertError::InvalidConfig(_)), "{e}");
    // The multimodal config names its architecture.
    let e = hf_err_with(&dir, |c| c["model_type"] = json!("gemma3"));
    assert!(matches!(e, ConvertError::UnsupportedArchitecture(ref a) if a == "gemma3"));
}

#[test]
fn qwen2_hf_sliding_window_is_rejected() {
    let dir = fixture_hf_copy("qwen2-f32-hf");
    let e = hf_err_with(&dir, |c| c["use_sliding_window"] = json!(true));
    assert!(matches!(e, ConvertError::Unsupported(_)), "{e}");
}

/// The committed gemma3 GGUF fixture rewritten with `edit` applied to its key-value pairs.
fn gemma3_gguf_with(edit: impl FnOnce(&mut Vec<(String, GgufValue)>)) -> Vec<u8> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/gemma3-f32.gguf");
    let bytes = std::fs::read(path).unwrap();
    let g = GgufFile::read(&mut Cursor::new(&bytes)).unwrap();
    let tensors: Vec<RawTensor> = g
        .tensors
        .iter()
        .map(|t| {
            assert_eq!(t.dtype, DType::F32);
            RawTensor {
                name: t.name.clone(),
                dims: t.dims.clone(),
                type_id: 0,
                data: g.read_tensor(&mut Cursor::new(&bytes), t).unwrap(),
            }
        })
        .collect();
    let mut kv = g.metadata.clone();
    edit(&mut kv);
    let kv: Vec<(&str, GgufValue)> = kv.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    gguf_file(&kv, &tensors)
}

#[test]
fn gemma3_gguf_gets_llama_cpp_layer_pattern_and_local_base() {
    let (_, out) =
        convert_gguf_bytes(&gemma3_gguf_with(|_| {}), &ConvertOptions::default()).unwrap();
    let c = Knot::from_bytes(&out).unwrap().meta.config;
    assert_eq!((c.sliding_window, c.sliding_window_pattern), (Some(4), 6));
    assert_eq!((c.rope_theta, c.rope_theta_local), (1e6, Some(1e4)));
    assert_eq!(c.query_pre_attn_scalar, None);
    assert!(c.tie_word_embeddings && c.qk_norm && c.sandwich_norms && c.scale_embeddings);

    let without = gemma3_gguf_with(|kv| kv.retain(|(k, _)| k != "gemma3.attention.sliding_window"));
    let e = convert_gguf_bytes(&without, &ConvertOptions::default()).unwrap_err();
    assert!(
        matches!(e, ConvertError::MissingKey(ref k) if k == "gemma3.attention.sliding_window"),
        "{e}"
    );
    let zero = gemma3_gguf_with(|kv| {
        for (k, v) in kv.iter_mut() {
            if k == "gemma3.attention.sliding_window" {
                *v = GgufValue::U32(0);
            }
        }
    });
    let e = convert_gguf_bytes(&zero, &ConvertOptions::default()).unwrap_err();
    assert!(matches!(e, ConvertError::InvalidConfig(_)), "{e}");
}
