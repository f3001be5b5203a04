//! GGUF → knot. Tensor names are already GGUF names; hyperparameters come from
//! `{arch}.*` keys, the tokenizer from `tokenizer.ggml.*`.

use knot::{ModelConfig, OUTPUT, TOKEN_EMBD};

use crate::arch::{self, ArchSpec};
use crate::gguf::{GgufFile, GgufValue};
use crate::tokenizer;
use crate::{ConvertError, ModelSource, SourceRange, SourceTensor};

/// What a GGUF holds, as a converter's [`ModelSource`]: config, tokenizer and the tensors with
/// their byte ranges. `fallback_name` names the model when the file has no `general.name`.
pub fn model_source(g: &GgufFile, fallback_name: &str) -> Result<ModelSource, ConvertError> {
    let architecture = g
        .get("general.architecture")
        .ok_or_else(|| ConvertError::MissingKey("general.architecture".into()))?;
    let architecture = architecture
        .as_str()
        .ok_or_else(|| ConvertError::WrongType {
            key: "general.architecture".into(),
            expected: "string",
            found: architecture.type_name().into(),
        })?;
    let spec = arch::spec(architecture)
        .ok_or_else(|| ConvertError::UnsupportedArchitecture(architecture.to_string()))?;

    let mut tok = tokenizer::from_gguf(g)?;
    let extra_eos = tokenizer::gguf_extra_eos(g)?;
    let eos_ids = tokenizer::eos_ids(&tok, &extra_eos);
    let config = config(g, &spec, &tok, eos_ids)?;
    // The model's vocabulary (embedding rows) is authoritative; GGUF token lists match it.
    if tok.tokens.len() > config.vocab_size {
        return Err(ConvertError::InvalidConfig(format!(
            "{} tokens but token_embd has {} rows",
            tok.tokens.len(),
            config.vocab_size
        )));
    }
    tok.add_bos = config.add_bos;

    let name = match g.get("general.name").and_then(GgufValue::as_str) {
        Some(n) => n.to_string(),
        None => fallback_name.to_string(),
    };
    let chat_template = g
        .get("tokenizer.chat_template")
        .and_then(GgufValue::as_str)
        .map(str::to_string);
    let tensors = g
        .tensors
        .iter()
        .map(|t| SourceTensor {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape(),
            // Parsing checked every tensor ends inside the file.
            range: Some(SourceRange {
                offset: g.data_offset + t.offset,
                len: t.size,
            }),
        })
        .collect();
    Ok(ModelSource {
        name,
        architecture: spec.name.to_string(),
        config,
        tokenizer: tok,
        chat_template,
        tensors,
    })
}

struct Keys<'a> {
    g: &'a GgufFile,
    prefix: &'static str,
}

impl Keys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.prefix)
    }

    fn usize_opt(&self, k: &str) -> Result<Option<usize>, ConvertError> {
        let key = self.key(k);
        self.g
            .get(&key)
            .map(|v| {
                v.as_u64()
                    .and_then(|x| usize::try_from(x).ok())
                    .ok_or_else(|| ConvertError::WrongType {
                        key: key.clone(),
                        expected: "unsigned integer",
                        found: v.type_name().into(),
                    })
            })
            .transpose()
    }

    fn usize(&self, k: &str) -> Result<usize, ConvertError> {
        self.usize_opt(k)?
            .ok_or_else(|| ConvertError::MissingKey(self.key(k)))
    }

    fn f32_opt(&self, k: &str) -> Result<Option<f32>, ConvertError> {
        let key = self.key(k);
        self.g
            .get(&key)
            .map(|v| {
                v.as_f32().ok_or_else(|| ConvertError::WrongType {
                    key: key.clone(),
                    expected: "float",
                    found: v.type_name().into(),
                })
            })
            .transpose()
    }
}

fn config(
    g: &GgufFile,
    spec: &ArchSpec,
    tok: &knot::TokenizerData,
    eos_ids: Vec<u32>,
) -> Result<ModelConfig, ConvertError> {
    let k = Keys {
        g,
        prefix: spec.name,
    };
    let dim = k.usize("embedding_length")?;
    let n_heads = k.usize("attention.head_count")?;
    let n_kv_heads = k.usize_opt("attention.head_count_kv")?.unwrap_or(n_heads);
    if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
        return Err(ConvertError::InvalidConfig(format!(
            "{n_heads} heads cannot share {n_kv_heads} key/value heads"
        )));
    }
    let head_dim = match k.usize_opt("attention.key_length")? {
        Some(h) => h,
        None if dim % n_heads == 0 => dim / n_heads,
        None => {
            return Err(ConvertError::InvalidConfig(format!(
                "embedding length {dim} is not a multiple of {n_heads} heads"
            )))
        }
    };
    let embd = g
        .tensor(TOKEN_EMBD)
        .ok_or_else(|| ConvertError::MissingTensor(TOKEN_EMBD.into()))?;
    let shape = embd.shape();
    let vocab_size = match shape.as_slice() {
        [rows, cols] if *cols as usize == dim => *rows as usize,
        _ => {
            return Err(ConvertError::InvalidConfig(format!(
                "token_embd shape {shape:?} does not match embedding length {dim}"
            )))
        }
    };
    let sliding_window = match spec.gguf_swa {
        Some(_) => Some(k.usize("attention.sliding_window")?),
        None => None,
    };
    if sliding_window == Some(0) {
        return Err(ConvertError::InvalidConfig(
            "attention.sliding_window is 0".into(),
        ));
    }
    Ok(ModelConfig {
        n_layers: k.usize("block_count")?,
        dim,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn_dim: k.usize("feed_forward_length")?,
        vocab_size,
        context_length: k.usize("context_length")?,
        rope_theta: k.f32_opt("rope.freq_base")?.unwrap_or(10000.0),
        rope_style: spec.gguf_rope_style,
        rope_dim: k.usize_opt("rope.dimension_count")?.unwrap_or(head_dim),
        norm_eps: k
            .f32_opt("attention.layer_norm_rms_epsilon")?
            .unwrap_or(spec.default_norm_eps),
        tie_word_embeddings: g.tensor(OUTPUT).is_none(),
        bos_id: tok.bos_id,
        eos_ids,
        pad_id: tok.pad_id,
        add_bos: tok.add_bos,
        qkv_bias: g.tensor("blk.0.attn_q.bias").is_some(),
        qk_norm: spec.qk_norm,
        sandwich_norms: spec.sandwich_norms,
        scale_embeddings: spec.scale_embeddings,
        ffn_activation: spec.ffn_activation,
        // The GGUF has no query_pre_attn_scalar; llama.cpp scales by 1/sqrt(head_dim) (right for
        // every Gemma 3 size but 27B), which is what `None` means.
        query_pre_attn_scalar: None,
        sliding_window,
        sliding_window_pattern: spec.gguf_swa.map_or(0, |s| s.pattern),
        rope_theta_local: spec.gguf_swa.map(|s| s.rope_theta_local),
    })
}
