//! HuggingFace llama / qwen2 / qwen3 / gemma3 (text) directory → knot: `config.json`, `model.safetensors` (or sharded with
//! `model.safetensors.index.json`), `tokenizer.json`, optional `tokenizer_config.json`,
//! `generation_config.json` and `chat_template.jinja`.
//!
//! HF checkpoints pair Q/K dims as (i, i + d/2) ("rotate half"). Instead of permuting rows into
//! GGUF's interleaved order, weights are kept as they are and `rope_style = neox` is recorded:
//! the bytes stay identical to the checkpoint, and the engine needs the neox path anyway for
//! qwen2/qwen3/gemma3.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use knot::{DType, ModelConfig, RopeStyle};
use safetensors::tensor::{Metadata as StMetadata, TensorInfo as StTensorInfo};
use safetensors::Dtype as StDtype;
use serde_json::Value;

use knot_convert::ConversionPlan;

use super::tokenizer::{self, HfSpecialTokens};
use super::{
    arch, io_err, write_knot, ConvertError, ConvertOptions, ModelSource, Progress, SourceTensor,
    Summary,
};

/// Converts the HuggingFace model directory `dir` into a knot file at `output`.
pub fn hf_to_knot(
    dir: &Path,
    output: &Path,
    opts: &ConvertOptions,
    progress: Progress<'_>,
) -> Result<Summary, ConvertError> {
    let config_json = read_json(&dir.join("config.json"))?
        .ok_or_else(|| missing_file(&dir.join("config.json")))?;
    let hf = HfConfig::parse(&config_json)?;
    let shards = load_shards(dir)?;

    // Map every checkpoint tensor to its knot name; remember where its bytes are.
    let mut located: HashMap<String, (usize, StTensorInfo)> = HashMap::new();
    let mut tensors = Vec::new();
    let mut has_lm_head = false;
    for (shard_index, shard) in shards.iter().enumerate() {
        for (hf_name, info) in &shard.tensors {
            let Some(name) = knot_name(hf_name, &hf.spec)? else {
                continue;
            };
            if name == knot::OUTPUT {
                has_lm_head = true;
                if hf.tie_word_embeddings {
                    continue;
                }
            }
            let mut dtype = match info.dtype {
                StDtype::F32 => DType::F32,
                StDtype::F16 => DType::F16,
                StDtype::BF16 => DType::Bf16,
                other => {
                    return Err(ConvertError::Tensor {
                        tensor: hf_name.clone(),
                        message: format!("unsupported safetensors dtype {other:?}"),
                    })
                }
            };
            if hf.spec.norm_plus_one && is_norm(&name) {
                // Stored as f32 `1 + w` (see `fetch` below).
                dtype = DType::F32;
            }
            tensors.push(SourceTensor {
                name: name.clone(),
                dtype,
                shape: info.shape.iter().map(|&d| d as u64).collect(),
                range: None,
            });
            if located
                .insert(name.clone(), (shard_index, info.clone()))
                .is_some()
            {
                return Err(ConvertError::Tensor {
                    tensor: name,
                    message: "appears in more than one shard".into(),
                });
            }
        }
    }
    if !hf.tie_word_embeddings && !has_lm_head {
        return Err(ConvertError::MissingTensor("lm_head.weight".into()));
    }
    // Deterministic order regardless of hash-map iteration (the plan sorts too).
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let embd = tensors
        .iter()
        .find(|t| t.name == knot::TOKEN_EMBD)
        .ok_or_else(|| ConvertError::MissingTensor("model.embed_tokens.weight".into()))?;
    if embd.shape != [hf.vocab_size as u64, hf.dim as u64] {
        return Err(ConvertError::InvalidConfig(format!(
            "embed_tokens shape {:?} does not match vocab_size {} × hidden_size {}",
            embd.shape, hf.vocab_size, hf.dim
        )));
    }

    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer_json =
        read_json(&tokenizer_path)?.ok_or_else(|| missing_file(&tokenizer_path))?;
    let mut tok = tokenizer::from_hf_json(&tokenizer_json, hf.vocab_size)?;
    if tok.tokens.len() > hf.vocab_size {
        return Err(ConvertError::InvalidConfig(format!(
            "tokenizer has {} tokens but vocab_size is {}",
            tok.tokens.len(),
            hf.vocab_size
        )));
    }
    let tok_config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gen_config = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
    let specials = special_tokens(&config_json, &tok_config, &gen_config, &tok)?;
    let eos_ids = tokenizer::apply_hf_specials(&mut tok, &specials, &tokenizer_json)?;
    let chat_template = chat_template(dir, &tok_config)?;

    let config = ModelConfig {
        n_layers: hf.n_layers,
        dim: hf.dim,
        n_heads: hf.n_heads,
        n_kv_heads: hf.n_kv_heads,
        head_dim: hf.head_dim,
        ffn_dim: hf.ffn_dim,
        vocab_size: hf.vocab_size,
        context_length: hf.context_length,
        rope_theta: hf.rope_theta,
        rope_style: RopeStyle::Neox,
        rope_dim: hf.head_dim,
        norm_eps: hf.norm_eps,
        tie_word_embeddings: hf.tie_word_embeddings,
        bos_id: tok.bos_id,
        eos_ids,
        pad_id: tok.pad_id,
        add_bos: tok.add_bos,
        qkv_bias: located.contains_key("blk.0.attn_q.bias"),
        qk_norm: hf.spec.qk_norm,
        sandwich_norms: hf.spec.sandwich_norms,
        scale_embeddings: hf.spec.scale_embeddings,
        ffn_activation: hf.spec.ffn_activation,
        query_pre_attn_scalar: hf.query_pre_attn_scalar,
        sliding_window: hf.sliding_window,
        sliding_window_pattern: hf.sliding_window_pattern,
        rope_theta_local: hf.rope_theta_local,
    };
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into());
    let source = ModelSource {
        name,
        architecture: hf.spec.name.to_string(),
        config,
        tokenizer: tok,
        chat_template,
        tensors,
    };

    let plan = ConversionPlan::new(source, opts)?;
    let mut files: HashMap<usize, File> = HashMap::new();
    write_knot(&plan, output, progress, |t| {
        // Every listed tensor was located above.
        let (shard_index, info) = &located[&t.name];
        let shard = &shards[*shard_index];
        let file = match files.entry(*shard_index) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(File::open(&shard.path).map_err(io_err(&shard.path))?)
            }
        };
        let (start, end) = info.data_offsets;
        file.seek(SeekFrom::Start(shard.data_start + start as u64))
            .map_err(io_err(&shard.path))?;
        let mut buf = vec![0u8; end - start];
        file.read_exact(&mut buf).map_err(io_err(&shard.path))?;
        if hf.spec.norm_plus_one && is_norm(&t.name) {
            buf = norm_plus_one(t, info, &buf)?;
        }
        Ok(buf)
    })
}

fn is_norm(knot_name: &str) -> bool {
    knot_name.ends_with("norm.weight")
}

/// Gemma's norm weight `w` (any float dtype) as f32 bytes of `1 + w`, like llama.cpp's converter.
fn norm_plus_one(
    t: &SourceTensor,
    info: &StTensorInfo,
    raw: &[u8],
) -> Result<Vec<u8>, ConvertError> {
    let dtype = match info.dtype {
        StDtype::F32 => DType::F32,
        StDtype::F16 => DType::F16,
        _ => DType::Bf16,
    };
    let stored = SourceTensor { dtype, ..t.clone() };
    let f32_bytes = super::requant::convert(&stored, raw, DType::F32)?;
    Ok(f32_bytes
        .chunks_exact(4)
        .flat_map(|b| (f32::from_le_bytes([b[0], b[1], b[2], b[3]]) + 1.0).to_le_bytes())
        .collect())
}

/// The hyperparameters of `config.json`.
struct HfConfig {
    spec: arch::ArchSpec,
    n_layers: usize,
    dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ffn_dim: usize,
    vocab_size: usize,
    context_length: usize,
    rope_theta: f32,
    norm_eps: f32,
    tie_word_embeddings: bool,
    query_pre_attn_scalar: Option<f32>,
    sliding_window: Option<usize>,
    sliding_window_pattern: usize,
    rope_theta_local: Option<f32>,
}

impl HfConfig {
    fn parse(c: &Value) -> Result<HfConfig, ConvertError> {
        let model_type = c
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| ConvertError::MissingKey("config.json: model_type".into()))?;
        let spec = arch::spec_for_hf(model_type)
            .ok_or_else(|| ConvertError::UnsupportedArchitecture(model_type.to_string()))?;
        if c.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err(ConvertError::Unsupported(
                "config.json: rope_scaling (scaled RoPE frequencies)".into(),
            ));
        }
        for k in ["attn_logit_softcapping", "final_logit_softcapping"] {
            if c.get(k).is_some_and(|v| !v.is_null()) {
                return Err(ConvertError::Unsupported(format!("config.json: {k}")));
            }
        }
        if c.get("use_sliding_window").and_then(Value::as_bool) == Some(true) {
            return Err(ConvertError::Unsupported(
                "config.json: use_sliding_window (qwen-style sliding windows)".into(),
            ));
        }
        let usize_opt = |k: &str| -> Result<Option<usize>, ConvertError> {
            c.get(k)
                .filter(|v| !v.is_null())
                .map(|v| {
                    v.as_u64()
                        .and_then(|x| usize::try_from(x).ok())
                        .ok_or_else(|| ConvertError::WrongType {
                            key: format!("config.json: {k}"),
                            expected: "unsigned integer",
                            found: v.to_string(),
                        })
                })
                .transpose()
        };
        let usize_req = |k: &str| -> Result<usize, ConvertError> {
            usize_opt(k)?.ok_or_else(|| ConvertError::MissingKey(format!("config.json: {k}")))
        };
        let f32_opt = |k: &str| -> Result<Option<f32>, ConvertError> {
            c.get(k)
                .filter(|v| !v.is_null())
                .map(|v| {
                    v.as_f64()
                        .map(|x| x as f32)
                        .ok_or_else(|| ConvertError::WrongType {
                            key: format!("config.json: {k}"),
                            expected: "number",
                            found: v.to_string(),
                        })
                })
                .transpose()
        };
        let dim = usize_req("hidden_size")?;
        let n_heads = usize_req("num_attention_heads")?;
        let n_kv_heads = usize_opt("num_key_value_heads")?.unwrap_or(n_heads);
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(ConvertError::InvalidConfig(format!(
                "{n_heads} heads cannot share {n_kv_heads} key/value heads"
            )));
        }
        let head_dim = match usize_opt("head_dim")? {
            Some(h) => h,
            None if dim % n_heads == 0 => dim / n_heads,
            None => {
                return Err(ConvertError::InvalidConfig(format!(
                    "hidden_size {dim} is not a multiple of {n_heads} heads"
                )))
            }
        };
        let n_layers = usize_req("num_hidden_layers")?;
        let (rope_theta, rope_theta_local) = rope_bases(c, &f32_opt)?;
        // Gemma-style windows only (qwen's `use_sliding_window` is rejected above).
        let sliding_window = match spec.gguf_swa {
            Some(_) => usize_opt("sliding_window")?,
            None => None,
        };
        let sliding_window_pattern = match sliding_window {
            Some(0) => {
                return Err(ConvertError::InvalidConfig(
                    "config.json: sliding_window is 0".into(),
                ))
            }
            Some(_) => sliding_window_pattern(c, n_layers, &usize_opt)?,
            None => 0,
        };
        Ok(HfConfig {
            spec,
            n_layers,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: usize_req("intermediate_size")?,
            vocab_size: usize_req("vocab_size")?,
            // transformers' LlamaConfig defaults.
            context_length: usize_opt("max_position_embeddings")?.unwrap_or(2048),
            rope_theta: rope_theta.unwrap_or(10000.0),
            norm_eps: f32_opt("rms_norm_eps")?.unwrap_or(1e-6),
            query_pre_attn_scalar: f32_opt("query_pre_attn_scalar")?,
            sliding_window,
            sliding_window_pattern,
            // transformers' Gemma3TextConfig default.
            rope_theta_local: sliding_window.map(|_| rope_theta_local.unwrap_or(10000.0)),
            tie_word_embeddings: c
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

type F32Opt<'a> = dyn Fn(&str) -> Result<Option<f32>, ConvertError> + 'a;
type UsizeOpt<'a> = dyn Fn(&str) -> Result<Option<usize>, ConvertError> + 'a;

/// The RoPE bases of global and local layers. transformers 5 writes `rope_parameters`, either
/// `{rope_theta, rope_type}` or one such object per layer type (`full_attention`,
/// `sliding_attention`); 4.x wrote `rope_theta` and Gemma's `rope_local_base_freq`.
fn rope_bases(c: &Value, f32_opt: &F32Opt) -> Result<(Option<f32>, Option<f32>), ConvertError> {
    let Some(params) = c.get("rope_parameters").filter(|v| !v.is_null()) else {
        return Ok((f32_opt("rope_theta")?, f32_opt("rope_local_base_freq")?));
    };
    let theta = |p: &Value, what: &str| -> Result<Option<f32>, ConvertError> {
        let Some(p) = p.as_object() else {
            return Err(ConvertError::WrongType {
                key: format!("config.json: {what}"),
                expected: "object",
                found: p.to_string(),
            });
        };
        match p.get("rope_type").and_then(Value::as_str) {
            None | Some("default") => {}
            Some(other) => {
                return Err(ConvertError::Unsupported(format!(
                    "config.json: {what}.rope_type {other:?} (scaled RoPE frequencies)"
                )))
            }
        }
        Ok(p.get("rope_theta")
            .and_then(Value::as_f64)
            .map(|t| t as f32))
    };
    if params.get("full_attention").is_some() || params.get("sliding_attention").is_some() {
        let get = |k: &str| match params.get(k) {
            Some(p) => theta(p, &format!("rope_parameters.{k}")),
            None => Ok(None),
        };
        Ok((get("full_attention")?, get("sliding_attention")?))
    } else {
        Ok((theta(params, "rope_parameters")?, None))
    }
}

/// Gemma's layer pattern as "every Nth layer is global", from `layer_types` (transformers 5) or
/// `sliding_window_pattern` (4.x; default 6). Other layouts are rejected.
fn sliding_window_pattern(
    c: &Value,
    n_layers: usize,
    usize_opt: &UsizeOpt,
) -> Result<usize, ConvertError> {
    let Some(types) = c.get("layer_types").and_then(Value::as_array) else {
        let p = match usize_opt("sliding_window_pattern")? {
            Some(p) => p,
            None => usize_opt("_sliding_window_pattern")?.unwrap_or(6),
        };
        return Ok(p);
    };
    if types.len() != n_layers {
        return Err(ConvertError::InvalidConfig(format!(
            "config.json: {} layer_types for {n_layers} layers",
            types.len()
        )));
    }
    let global: Vec<bool> = types
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(true),
            Some("sliding_attention") => Ok(false),
            _ => Err(ConvertError::Unsupported(format!(
                "config.json: layer type {t}"
            ))),
        })
        .collect::<Result<_, _>>()?;
    // The first global layer fixes the period; with none, every layer is local (pattern 0).
    let pattern = global.iter().position(|&g| g).map_or(0, |i| i + 1);
    let fits = global
        .iter()
        .enumerate()
        .all(|(l, &g)| g == (pattern != 0 && (l + 1) % pattern == 0));
    if !fits {
        return Err(ConvertError::Unsupported(
            "config.json: layer_types is not \"every Nth layer global\"".into(),
        ));
    }
    Ok(pattern)
}

/// The GGUF name of a checkpoint tensor; `None` for buffers that carry no weights. Names follow
/// gguf-py's `tensor_mapping.py` (the table llama.cpp's converter and HF's GGUF loader share).
pub(super) fn knot_name(hf: &str, spec: &arch::ArchSpec) -> Result<Option<String>, ConvertError> {
    if hf.ends_with("rotary_emb.inv_freq") {
        return Ok(None);
    }
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(n) = fixed {
        return Ok(Some(n.to_string()));
    }
    let unknown = || ConvertError::Unsupported(format!("checkpoint tensor {hf} has no knot name"));
    let rest = hf.strip_prefix("model.layers.").ok_or_else(unknown)?;
    let (layer, rest) = rest.split_once('.').ok_or_else(unknown)?;
    let layer: usize = layer.parse().map_err(|_| unknown())?;
    let (module, kind) = rest.rsplit_once('.').ok_or_else(unknown)?;
    let gguf = match module {
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "input_layernorm" => "attn_norm",
        "self_attn.q_norm" if spec.qk_norm => "attn_q_norm",
        "self_attn.k_norm" if spec.qk_norm => "attn_k_norm",
        // Gemma's sandwich: its `post_attention_layernorm` normalises the attention output.
        "post_attention_layernorm" if spec.sandwich_norms => "post_attention_norm",
        "pre_feedforward_layernorm" if spec.sandwich_norms => "ffn_norm",
        "post_feedforward_layernorm" if spec.sandwich_norms => "post_ffw_norm",
        "post_attention_layernorm" => "ffn_norm",
        _ => return Err(unknown()),
    };
    if kind != "weight" && kind != "bias" {
        return Err(unknown());
    }
    Ok(Some(format!("blk.{layer}.{gguf}.{kind}")))
}

struct Shard {
    path: PathBuf,
    /// Absolute offset of the first tensor byte (after the 8-byte length and JSON header).
    data_start: u64,
    /// Sorted by name for a deterministic walk.
    tensors: Vec<(String, StTensorInfo)>,
}

/// safetensors' own cap on the JSON header.
const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

fn load_shards(dir: &Path) -> Result<Vec<Shard>, ConvertError> {
    let single = dir.join("model.safetensors");
    let index_path = dir.join("model.safetensors.index.json");
    let files: Vec<PathBuf> = if single.exists() {
        vec![single]
    } else if let Some(index) = read_json(&index_path)? {
        let map = index
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| ConvertError::Json {
                path: index_path.clone(),
                message: "no weight_map object".into(),
            })?;
        let mut names = BTreeSet::new();
        for v in map.values() {
            let f = v.as_str().ok_or_else(|| ConvertError::Json {
                path: index_path.clone(),
                message: "weight_map value is not a file name".into(),
            })?;
            // Shard names must stay inside the model directory.
            if f.contains('/') || f.contains('\\') || f == ".." {
                return Err(ConvertError::Json {
                    path: index_path.clone(),
                    message: format!("shard name {f:?} is not a plain file name"),
                });
            }
            names.insert(f.to_string());
        }
        names.into_iter().map(|n| dir.join(n)).collect()
    } else {
        return Err(missing_file(&single));
    };
    files.into_iter().map(|p| read_shard(&p)).collect()
}

fn read_shard(path: &Path) -> Result<Shard, ConvertError> {
    let bad = |message: String| ConvertError::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let mut file = File::open(path).map_err(io_err(path))?;
    let file_len = file.metadata().map_err(io_err(path))?.len();
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes)
        .map_err(|_| bad("shorter than its 8-byte header length".into()))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_SAFETENSORS_HEADER || 8 + header_len > file_len {
        return Err(bad(format!(
            "header length {header_len} is larger than the file or the {MAX_SAFETENSORS_HEADER}-byte cap"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(io_err(path))?;
    let meta: StMetadata =
        serde_json::from_slice(&header).map_err(|e| bad(format!("header JSON: {e}")))?;
    let data_start = 8 + header_len;
    let mut tensors: Vec<(String, StTensorInfo)> = meta
        .tensors()
        .into_iter()
        .map(|(n, i)| (n, i.clone()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, info) in &tensors {
        let (start, end) = info.data_offsets;
        let n = info
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(info.dtype.size()));
        if end < start || n != Some(end - start) {
            return Err(bad(format!(
                "tensor {name}: offsets do not match its shape"
            )));
        }
        if data_start + end as u64 > file_len {
            return Err(bad(format!(
                "tensor {name}: data beyond the end of the file"
            )));
        }
    }
    Ok(Shard {
        path: path.to_path_buf(),
        data_start,
        tensors,
    })
}

/// `Ok(None)` if the file does not exist.
fn read_json(path: &Path) -> Result<Option<Value>, ConvertError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ConvertError::Json {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
}

fn missing_file(path: &Path) -> ConvertError {
    ConvertError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "file not found"),
    }
}

/// An id from an integer, or the first of a list.
fn ids(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .into_iter()
            .collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect(),
        _ => Vec::new(),
    }
}

/// A token named in tokenizer_config.json, either `"<s>"` or `{"content": "<s>", …}`.
fn named_token(tok_config: &Value, key: &str, data: &knot::TokenizerData) -> Option<u32> {
    let v = tok_config.get(key)?;
    let text = v
        .as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))?;
    tokenizer::token_id(data, text)
}

fn special_tokens(
    config: &Value,
    tok_config: &Value,
    gen_config: &Value,
    data: &knot::TokenizerData,
) -> Result<HfSpecialTokens, ConvertError> {
    let bos_id = ids(config.get("bos_token_id"))
        .first()
        .copied()
        .or_else(|| named_token(tok_config, "bos_token", data));
    let mut eos_ids = ids(config.get("eos_token_id"));
    if eos_ids.is_empty() {
        eos_ids.extend(named_token(tok_config, "eos_token", data));
    }
    eos_ids.extend(ids(gen_config.get("eos_token_id")));
    let pad_id = ids(config.get("pad_token_id"))
        .first()
        .copied()
        .or_else(|| named_token(tok_config, "pad_token", data));
    Ok(HfSpecialTokens {
        bos_id,
        eos_ids,
        pad_id,
        add_bos: tok_config.get("add_bos_token").and_then(Value::as_bool),
        add_eos: tok_config.get("add_eos_token").and_then(Value::as_bool),
    })
}

fn chat_template(dir: &Path, tok_config: &Value) -> Result<Option<String>, ConvertError> {
    match tok_config.get("chat_template") {
        Some(Value::String(s)) => return Ok(Some(s.clone())),
        // A list of named templates: the default one is used for chat.
        Some(Value::Array(list)) => {
            let default = list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"));
            if let Some(t) = default
                .and_then(|t| t.get("template"))
                .and_then(Value::as_str)
            {
                return Ok(Some(t.to_string()));
            }
        }
        _ => {}
    }
    let path = dir.join("chat_template.jinja");
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_hf_names() {
        let cases = [
            ("model.embed_tokens.weight", "token_embd.weight"),
            ("model.norm.weight", "output_norm.weight"),
            ("lm_head.weight", "output.weight"),
            (
                "model.layers.3.self_attn.q_proj.weight",
                "blk.3.attn_q.weight",
            ),
            (
                "model.layers.3.self_attn.k_proj.weight",
                "blk.3.attn_k.weight",
            ),
            (
                "model.layers.3.self_attn.v_proj.weight",
                "blk.3.attn_v.weight",
            ),
            (
                "model.layers.3.self_attn.o_proj.weight",
                "blk.3.attn_output.weight",
            ),
            (
                "model.layers.12.mlp.gate_proj.weight",
                "blk.12.ffn_gate.weight",
            ),
            ("model.layers.12.mlp.up_proj.weight", "blk.12.ffn_up.weight"),
            (
                "model.layers.12.mlp.down_proj.weight",
                "blk.12.ffn_down.weight",
            ),
            (
                "model.layers.0.input_layernorm.weight",
                "blk.0.attn_norm.weight",
            ),
            (
                "model.layers.0.post_attention_layernorm.weight",
                "blk.0.ffn_norm.weight",
            ),
            ("model.layers.0.self_attn.q_proj.bias", "blk.0.attn_q.bias"),
        ];
        let llama = arch::spec("llama").unwrap();
        for (hf, gguf) in cases {
            assert_eq!(
                knot_name(hf, &llama).unwrap().as_deref(),
                Some(gguf),
                "{hf}"
            );
        }
        assert_eq!(
            knot_name("model.layers.0.self_attn.rotary_emb.inv_freq", &llama).unwrap(),
            None
        );
        let gemma = arch::spec("gemma3").unwrap();
        for (hf, gguf) in [
            ("input_layernorm", "attn_norm"),
            ("post_attention_layernorm", "post_attention_norm"),
            ("pre_feedforward_layernorm", "ffn_norm"),
            ("post_feedforward_layernorm", "post_ffw_norm"),
            ("self_attn.q_norm", "attn_q_norm"),
            ("self_attn.k_norm", "attn_k_norm"),
        ] {
            let got = knot_name(&format!("model.layers.2.{hf}.weight"), &gemma).unwrap();
            assert_eq!(got, Some(format!("blk.2.{gguf}.weight")), "{hf}");
        }
        // Norms an architecture does not have are not silently dropped.
        assert!(knot_name("model.layers.0.self_attn.q_norm.weight", &llama).is_err());
        assert!(knot_name("model.layers.0.pre_feedforward_layernorm.weight", &llama).is_err());
        for bad in [
            "model.layers.x.mlp.up_proj.weight",
            "model.layers.0.mlp.foo.weight",
            "vision.w",
        ] {
            assert!(
                matches!(knot_name(bad, &llama), Err(ConvertError::Unsupported(_))),
                "{bad}"
            );
        }
    }
}
