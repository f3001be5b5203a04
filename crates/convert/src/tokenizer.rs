//! Tokenizer extraction: GGUF `tokenizer.ggml.*` keys and HF `tokenizer.json` both become a
//! knot [`TokenizerData`].

use knot::TokenizerData;
use serde_json::Value;

use crate::arch::END_OF_TURN_TOKENS;
use crate::gguf::{GgufArray, GgufFile, GgufValue};
use crate::ConvertError;

/// GGUF token types.
pub const TOKEN_NORMAL: i32 = 1;
pub const TOKEN_CONTROL: i32 = 3;
pub const TOKEN_USER_DEFINED: i32 = 4;
pub const TOKEN_UNUSED: i32 = 5;

fn wrong(key: &str, expected: &'static str, v: &GgufValue) -> ConvertError {
    ConvertError::WrongType {
        key: key.to_string(),
        expected,
        found: v.type_name().to_string(),
    }
}

fn opt_str(g: &GgufFile, key: &str) -> Result<Option<String>, ConvertError> {
    g.get(key)
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| wrong(key, "string", v))
        })
        .transpose()
}

fn opt_id(g: &GgufFile, key: &str) -> Result<Option<u32>, ConvertError> {
    g.get(key)
        .map(|v| {
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| wrong(key, "token id (u32)", v))
        })
        .transpose()
}

fn opt_bool(g: &GgufFile, key: &str) -> Result<Option<bool>, ConvertError> {
    g.get(key)
        .map(|v| v.as_bool().ok_or_else(|| wrong(key, "bool", v)))
        .transpose()
}

fn array<'a>(g: &'a GgufFile, key: &str) -> Result<Option<&'a GgufArray>, ConvertError> {
    g.get(key)
        .map(|v| v.as_array().ok_or_else(|| wrong(key, "array", v)))
        .transpose()
}

fn strings(g: &GgufFile, key: &str) -> Result<Vec<String>, ConvertError> {
    let Some(items) = array(g, key)? else {
        return Ok(Vec::new());
    };
    match (items.as_strings(), items.iter().next()) {
        (Some(strings), _) => Ok(strings.to_vec()),
        (None, None) => Ok(Vec::new()),
        (None, Some(first)) => Err(wrong(key, "array of strings", &first)),
    }
}

/// Reads the tokenizer from GGUF metadata.
pub fn from_gguf(g: &GgufFile) -> Result<TokenizerData, ConvertError> {
    let model = opt_str(g, "tokenizer.ggml.model")?
        .ok_or_else(|| ConvertError::MissingKey("tokenizer.ggml.model".into()))?;
    let tokens = strings(g, "tokenizer.ggml.tokens")?;
    if tokens.is_empty() {
        return Err(ConvertError::MissingKey("tokenizer.ggml.tokens".into()));
    }
    let token_types = match array(g, "tokenizer.ggml.token_type")? {
        Some(items) => items
            .iter()
            .map(|v| {
                v.as_i64()
                    .and_then(|x| i32::try_from(x).ok())
                    .ok_or_else(|| wrong("tokenizer.ggml.token_type", "array of i32", &v))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let scores = match array(g, "tokenizer.ggml.scores")? {
        Some(items) => items
            .iter()
            .map(|v| {
                v.as_f32()
                    .ok_or_else(|| wrong("tokenizer.ggml.scores", "array of f32", &v))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    for (what, len) in [("token_type", token_types.len()), ("scores", scores.len())] {
        if len != 0 && len != tokens.len() {
            return Err(ConvertError::Tokenizer(format!(
                "{len} {what} entries for {} tokens",
                tokens.len()
            )));
        }
    }
    let data = TokenizerData {
        add_bos: opt_bool(g, "tokenizer.ggml.add_bos_token")?
            // llama.cpp's default: SentencePiece vocabularies prepend BOS, BPE ones do not.
            .unwrap_or(model == "llama"),
        add_eos: opt_bool(g, "tokenizer.ggml.add_eos_token")?.unwrap_or(false),
        add_space_prefix: opt_bool(g, "tokenizer.ggml.add_space_prefix")?,
        pre: opt_str(g, "tokenizer.ggml.pre")?,
        merges: strings(g, "tokenizer.ggml.merges")?,
        bos_id: opt_id(g, "tokenizer.ggml.bos_token_id")?,
        eos_id: opt_id(g, "tokenizer.ggml.eos_token_id")?,
        unk_id: opt_id(g, "tokenizer.ggml.unknown_token_id")?,
        pad_id: opt_id(g, "tokenizer.ggml.padding_token_id")?,
        model,
        tokens,
        token_types,
        scores,
    };
    check_ids(&data)?;
    Ok(data)
}

/// Extra end-of-generation ids GGUF records explicitly.
pub fn gguf_extra_eos(g: &GgufFile) -> Result<Vec<u32>, ConvertError> {
    let mut ids = Vec::new();
    for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        ids.extend(opt_id(g, key)?);
    }
    Ok(ids)
}

fn check_ids(data: &TokenizerData) -> Result<(), ConvertError> {
    let n = data.tokens.len();
    for (what, id) in [
        ("bos", data.bos_id),
        ("eos", data.eos_id),
        ("unknown", data.unk_id),
        ("padding", data.pad_id),
    ] {
        if let Some(id) = id.filter(|&id| id as usize >= n) {
            return Err(ConvertError::Tokenizer(format!(
                "{what} id {id} is outside the vocabulary of {n} tokens"
            )));
        }
    }
    Ok(())
}

/// eos, then the given extras, then known end-of-turn tokens present in the vocabulary;
/// no duplicates, order stable.
pub fn eos_ids(data: &TokenizerData, extra: &[u32]) -> Vec<u32> {
    let mut ids: Vec<u32> = data
        .eos_id
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    for tok in END_OF_TURN_TOKENS {
        if let Some(i) = data.tokens.iter().position(|t| t == tok) {
            ids.push(i as u32);
        }
    }
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(*id));
    ids
}

/// Largest vocabulary accepted from tokenizer.json (ids index a dense table).
const MAX_HF_VOCAB: u64 = 1 << 22;

/// Reads a HuggingFace `tokenizer.json` holding a byte-level BPE model. `vocab_size` (from
/// config.json) pads the table when the embedding has more rows than the tokenizer has tokens.
pub fn from_hf_json(json: &Value, vocab_size: usize) -> Result<TokenizerData, ConvertError> {
    let err = |m: &str| ConvertError::Tokenizer(m.to_string());
    let model = json.get("model").ok_or_else(|| err("no \"model\""))?;
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    if kind != "BPE" {
        return Err(ConvertError::Unsupported(format!(
            "tokenizer model {kind:?} (only byte-level BPE is supported)"
        )));
    }
    if !mentions_type(json.get("pre_tokenizer"), "ByteLevel")
        && !mentions_type(json.get("decoder"), "ByteLevel")
    {
        return Err(ConvertError::Unsupported(
            "BPE tokenizer without a ByteLevel pre-tokenizer or decoder".into(),
        ));
    }
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| err("model.vocab is not an object"))?;

    let mut entries: Vec<(u64, String, i32)> = Vec::with_capacity(vocab.len());
    for (tok, id) in vocab {
        let id = id.as_u64().ok_or_else(|| {
            ConvertError::Tokenizer(format!("vocab id of {tok:?} is not an integer"))
        })?;
        entries.push((id, tok.clone(), TOKEN_NORMAL));
    }
    let added = json.get("added_tokens").and_then(Value::as_array);
    for t in added.into_iter().flatten() {
        let id = t.get("id").and_then(Value::as_u64);
        let content = t.get("content").and_then(Value::as_str);
        let (Some(id), Some(content)) = (id, content) else {
            return Err(err("added token without id or content"));
        };
        let special = t.get("special").and_then(Value::as_bool).unwrap_or(false);
        let kind = if special {
            TOKEN_CONTROL
        } else {
            TOKEN_USER_DEFINED
        };
        entries.push((id, content.to_string(), kind));
    }
    let max_id = entries.iter().map(|e| e.0).max().unwrap_or(0);
    if max_id >= MAX_HF_VOCAB {
        return Err(ConvertError::Tokenizer(format!(
            "token id {max_id} is too large"
        )));
    }
    let len = (max_id as usize + 1).max(vocab_size);
    let mut tokens: Vec<Option<String>> = vec![None; len];
    let mut types = vec![TOKEN_UNUSED; len];
    // Added tokens come last, so they win over a plain vocab entry with the same id.
    for (id, tok, kind) in entries {
        tokens[id as usize] = Some(tok);
        types[id as usize] = kind;
    }
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
        .collect();

    let merges = match model.get("merges").and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .map(|m| match m {
                Value::String(s) => Ok(s.clone()),
                // Newer tokenizers store merges as pairs.
                Value::Array(pair) => match pair.as_slice() {
                    [Value::String(a), Value::String(b)] => Ok(format!("{a} {b}")),
                    _ => Err(err("merge pair is not two strings")),
                },
                _ => Err(err("merge is neither a string nor a pair")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };

    Ok(TokenizerData {
        model: "gpt2".into(),
        pre: Some(detect_pre(json.get("pre_tokenizer")).to_string()),
        tokens,
        token_types: types,
        merges,
        ..Default::default()
    })
}

/// Whether `v` (possibly a Sequence) contains a component of type `ty`.
fn mentions_type(v: Option<&Value>, ty: &str) -> bool {
    match v {
        Some(Value::Object(o)) => {
            o.get("type").and_then(Value::as_str) == Some(ty)
                || o.values().any(|x| mentions_type(Some(x), ty))
        }
        Some(Value::Array(a)) => a.iter().any(|x| mentions_type(Some(x), ty)),
        _ => false,
    }
}

/// Names the pre-tokenizer family the way GGUF's `tokenizer.ggml.pre` does, from the split
/// regex or components; unknown shapes fall back to plain GPT-2.
fn detect_pre(pre: Option<&Value>) -> &'static str {
    let Some(pre) = pre else { return "gpt2" };
    let text = pre.to_string();
    if text.contains(r"\\p{N}{1,3}") {
        "llama-bpe"
    } else if text.contains(r"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|") {
        "qwen2"
    } else if mentions_type(Some(pre), "Digits") {
        "smollm"
    } else {
        "gpt2"
    }
}

/// Special-token settings from `tokenizer_config.json` and `config.json`.
pub struct HfSpecialTokens {
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    pub pad_id: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
}

/// Fills ids and flags into `data` and returns the end-of-generation ids.
pub fn apply_hf_specials(
    data: &mut TokenizerData,
    specials: &HfSpecialTokens,
    tokenizer_json: &Value,
) -> Result<Vec<u32>, ConvertError> {
    data.bos_id = specials.bos_id;
    data.eos_id = specials.eos_ids.first().copied();
    data.pad_id = specials.pad_id;
    data.add_bos = specials
        .add_bos
        .unwrap_or_else(|| post_processor_prepends(tokenizer_json, data));
    data.add_eos = specials.add_eos.unwrap_or(false);
    check_ids(data)?;
    let extra: Vec<u32> = specials.eos_ids.iter().skip(1).copied().collect();
    Ok(eos_ids(data, &extra))
}

/// Whether tokenizer.json's post-processor puts the BOS token in front of every sequence.
fn post_processor_prepends(json: &Value, data: &TokenizerData) -> bool {
    let Some(bos) = data.bos_id.and_then(|id| data.tokens.get(id as usize)) else {
        return false;
    };
    let first = json
        .pointer("/post_processor/single/0/SpecialToken/id")
        .or_else(|| json.pointer("/post_processor/processors/1/single/0/SpecialToken/id"));
    first.and_then(Value::as_str) == Some(bos.as_str())
}

/// Looks a token string up (for `bos_token`-style settings given as text).
pub fn token_id(data: &TokenizerData, token: &str) -> Option<u32> {
    data.tokens
        .iter()
        .position(|t| t == token)
        .map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::write;
    use std::io::Cursor;

    fn sentencepiece_gguf(extra: Vec<(&str, GgufValue)>) -> GgufFile {
        let s = |t: &str| GgufValue::String(t.into());
        let mut kv = vec![
            ("tokenizer.ggml.model", s("llama")),
            (
                "tokenizer.ggml.tokens",
                GgufValue::array(["<unk>", "<0x41>", "▁a", "  "].map(s).to_vec()).unwrap(),
            ),
            (
                "tokenizer.ggml.token_type",
                GgufValue::Array(GgufArray::I32(vec![3, 6, 1, 4])),
            ),
            (
                "tokenizer.ggml.scores",
                GgufValue::Array(GgufArray::F32(vec![0.0, 0.0, -1.5, -1000.0])),
            ),
            ("tokenizer.ggml.unknown_token_id", GgufValue::U32(0)),
        ];
        kv.extend(extra);
        GgufFile::read(&mut Cursor::new(write::file(&kv, &[]))).unwrap()
    }

    #[test]
    fn sentencepiece_metadata_is_kept() {
        let data = from_gguf(&sentencepiece_gguf(vec![(
            "tokenizer.ggml.add_space_prefix",
            GgufValue::Bool(false),
        )]))
        .unwrap();
        assert_eq!(data.model, "llama");
        assert_eq!(data.token_types, [3, 6, 1, 4]);
        assert_eq!(data.scores, [0.0, 0.0, -1.5, -1000.0]);
        assert_eq!(data.unk_id, Some(0));
        assert_eq!(data.add_space_prefix, Some(false));
        // llama.cpp's defaults when the file does not say.
        assert!(data.add_bos);
        let data = from_gguf(&sentencepiece_gguf(vec![])).unwrap();
        assert_eq!(data.add_space_prefix, None);
    }

    #[test]
    fn sentencepiece_metadata_of_the_wrong_type_is_an_error() {
        let err = from_gguf(&sentencepiece_gguf(vec![(
            "tokenizer.ggml.add_space_prefix",
            GgufValue::U32(1),
        )]))
        .unwrap_err();
        assert!(
            matches!(&err, ConvertError::WrongType { key, .. } if key == "tokenizer.ggml.add_space_prefix"),
            "{err}"
        );
    }
}
