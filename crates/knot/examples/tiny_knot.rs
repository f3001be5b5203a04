//! Writes a tiny, valid one-layer knot file (all-zero weights) to the path given as the first
//! argument, e.g. to look at a real header with `xxd`. Used for the dump in docs/knot-format.md.

use knot::{
    layer_tensor_name, DType, FfnActivation, KnotBuilder, ModelConfig, RopeStyle, TokenizerData,
    CANONICAL_LAYER_TENSORS,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: tiny_knot OUTPUT")?;
    let config = ModelConfig {
        n_layers: 1,
        dim: 32,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 16,
        ffn_dim: 32,
        vocab_size: 4,
        context_length: 64,
        rope_theta: 10000.0,
        rope_style: RopeStyle::Neox,
        rope_dim: 16,
        norm_eps: 1e-5,
        tie_word_embeddings: true,
        bos_id: None,
        eos_ids: vec![3],
        pad_id: None,
        add_bos: false,
        qkv_bias: false,
        qk_norm: false,
        sandwich_norms: false,
        scale_embeddings: false,
        ffn_activation: FfnActivation::Silu,
        query_pre_attn_scalar: None,
        sliding_window: None,
        sliding_window_pattern: 0,
        rope_theta_local: None,
    };
    let tokenizer = TokenizerData {
        model: "gpt2".into(),
        tokens: ["a", "b", "ab", "<eos>"].map(String::from).to_vec(),
        merges: vec!["a b".into()],
        eos_id: Some(3),
        ..Default::default()
    };
    let mut b = KnotBuilder::new("tiny", "llama", config, tokenizer);
    b.add_tensor("token_embd.weight", DType::Q8_0, vec![4, 32]);
    b.add_tensor("output_norm.weight", DType::F32, vec![32]);
    for name in CANONICAL_LAYER_TENSORS {
        let shape = match name {
            "attn_norm" | "ffn_norm" => vec![32],
            // One key/value head of 16 dims.
            "attn_k" | "attn_v" => vec![16, 32],
            _ => vec![32, 32],
        };
        let dtype = if name.ends_with("norm") {
            DType::F32
        } else {
            DType::Q8_0
        };
        b.add_tensor(layer_tensor_name(0, name), dtype, shape);
    }
    let plan = b.plan()?;
    let zeros = vec![0u8; 1 << 16];
    let sizes: std::collections::HashMap<String, usize> = plan
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.size as usize))
        .collect();
    let bytes = plan.to_bytes(|name| Some(&zeros[..sizes[name]]))?;
    std::fs::write(&path, bytes).map_err(|e| format!("{path}: {e}"))?;
    Ok(())
}
