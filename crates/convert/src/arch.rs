//! Per-architecture facts the converters need: one row per architecture in [`spec`].

use knot::{FfnActivation, RopeStyle};

/// Architectures the converters accept.
pub const SUPPORTED: [&str; 4] = ["llama", "qwen2", "qwen3", "gemma3"];

#[derive(Debug, Clone, Copy)]
pub struct ArchSpec {
    /// `general.architecture` value; also the prefix of its hyperparameter keys.
    pub name: &'static str,
    /// HF `config.json` `model_type` of the text-only checkpoint.
    pub hf_model_type: &'static str,
    /// RoPE pairing of Q/K rows as stored in GGUF files of this architecture.
    pub gguf_rope_style: RopeStyle,
    /// Default RMS norm epsilon when the GGUF omits it.
    pub default_norm_eps: f32,
    /// Per-head RMSNorm of q and k before RoPE.
    pub qk_norm: bool,
    /// Gemma layout: post-attention and post-FFN norms, and HF's `post_attention_layernorm` is
    /// `post_attention_norm` (not `ffn_norm`; that is `pre_feedforward_layernorm`).
    pub sandwich_norms: bool,
    /// HF norms multiply by `1 + w`; knot (like llama.cpp's GGUF) stores `1 + w`.
    pub norm_plus_one: bool,
    pub scale_embeddings: bool,
    pub ffn_activation: FfnActivation,
    /// Sliding-window layers as llama.cpp runs this architecture from a GGUF (which has no key
    /// for the pattern or the local RoPE base): every Nth layer global, and the local base.
    pub gguf_swa: Option<GgufSwa>,
}

#[derive(Debug, Clone, Copy)]
pub struct GgufSwa {
    pub pattern: usize,
    pub rope_theta_local: f32,
}

const LLAMA: ArchSpec = ArchSpec {
    name: "llama",
    hf_model_type: "llama",
    // llama.cpp's converter permutes llama Q/K rows for interleaved pairs.
    gguf_rope_style: RopeStyle::Interleaved,
    default_norm_eps: 1e-5,
    qk_norm: false,
    sandwich_norms: false,
    norm_plus_one: false,
    scale_embeddings: false,
    ffn_activation: FfnActivation::Silu,
    gguf_swa: None,
};

/// The spec of a GGUF `general.architecture`, if it is one the converters accept.
pub fn spec(architecture: &str) -> Option<ArchSpec> {
    match architecture {
        "llama" => Some(LLAMA),
        // Q/K/V biases are detected from the tensors (`attn_q.bias`), not assumed.
        "qwen2" => Some(ArchSpec {
            name: "qwen2",
            hf_model_type: "qwen2",
            gguf_rope_style: RopeStyle::Neox,
            default_norm_eps: 1e-6,
            ..LLAMA
        }),
        "qwen3" => Some(ArchSpec {
            name: "qwen3",
            hf_model_type: "qwen3",
            gguf_rope_style: RopeStyle::Neox,
            default_norm_eps: 1e-6,
            qk_norm: true,
            ..LLAMA
        }),
        // llama.cpp (llama-model.cpp, LLM_ARCH_GEMMA3): every 6th layer global, local RoPE base
        // 10000, attention scale 1/sqrt(head_dim).
        "gemma3" => Some(ArchSpec {
            name: "gemma3",
            hf_model_type: "gemma3_text",
            gguf_rope_style: RopeStyle::Neox,
            default_norm_eps: 1e-6,
            qk_norm: true,
            sandwich_norms: true,
            norm_plus_one: true,
            scale_embeddings: true,
            ffn_activation: FfnActivation::GeluTanh,
            gguf_swa: Some(GgufSwa {
                pattern: 6,
                rope_theta_local: 10000.0,
            }),
        }),
        _ => None,
    }
}

/// The spec of an HF `model_type`.
pub fn spec_for_hf(model_type: &str) -> Option<ArchSpec> {
    SUPPORTED
        .iter()
        .copied()
        .filter_map(spec)
        .find(|s| s.hf_model_type == model_type)
}

/// Tokens that end an assistant turn in common chat formats; added to `eos_ids` when present.
pub const END_OF_TURN_TOKENS: [&str; 5] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_architecture_has_a_spec_and_the_engine_runs_it() {
        for a in SUPPORTED {
            assert_eq!(spec(a).unwrap().name, a);
            assert_eq!(spec_for_hf(spec(a).unwrap().hf_model_type).unwrap().name, a);
            engine::model::check_architecture(a).unwrap();
        }
    }

    #[test]
    fn unknown_architectures_have_no_spec() {
        for bad in ["mamba", "phi3"] {
            assert!(spec(bad).is_none(), "{bad}");
        }
        // The multimodal `gemma3` HF config is not a text checkpoint (`gemma3_text`).
        assert!(spec_for_hf("gemma3").is_none());
    }
}
