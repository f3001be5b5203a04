//! Per-architecture facts the converters need. Adding qwen2/qwen3/gemma3 means adding a row to
//! [`spec`] (and, for HF, the extra tensor names in `from_hf`).

use knot::RopeStyle;

use super::ConvertError;

/// Architectures the converters accept.
pub const SUPPORTED: [&str; 1] = ["llama"];

#[derive(Debug, Clone, Copy)]
pub struct ArchSpec {
    /// `general.architecture` value; also the prefix of its hyperparameter keys.
    pub name: &'static str,
    /// RoPE pairing of Q/K rows as stored in GGUF files of this architecture.
    pub gguf_rope_style: RopeStyle,
    /// Default RMS norm epsilon when the GGUF omits it.
    pub default_norm_eps: f32,
}

pub fn spec(architecture: &str) -> Result<ArchSpec, ConvertError> {
    match architecture {
        // llama.cpp's converter permutes llama Q/K rows for interleaved pairs.
        "llama" => Ok(ArchSpec {
            name: "llama",
            gguf_rope_style: RopeStyle::Interleaved,
            default_norm_eps: 1e-5,
        }),
        other => Err(ConvertError::UnsupportedArchitecture(other.to_string())),
    }
}

/// Tokens that end an assistant turn in common chat formats; added to `eos_ids` when present.
pub const END_OF_TURN_TOKENS: [&str; 5] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
];
