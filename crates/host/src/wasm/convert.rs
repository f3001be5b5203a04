//! Values across the boundary: arguments from JS checked and converted (counts and indices as
//! JS numbers, chat messages as JSON), results to JS as plain objects.

use super::errors::{invalid_argument, js_error};
use crate::error::ErrorCode;
use engine::chat::ChatMessage;
use wasm_bindgen::JsValue;

/// Any serializable result as a plain JS object.
pub(crate) fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, JsValue> {
    let json = serde_json::to_string(v).map_err(|e| js_error(ErrorCode::Internal, e))?;
    js_sys::JSON::parse(&json)
}

/// A non-negative integer option from JS: at most 2^53 (what a JS number holds exactly).
pub(crate) fn check_count(v: f64, what: &str) -> Result<u64, JsValue> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_SAFE {
        Ok(v as u64)
    } else {
        Err(invalid_argument(format!(
            "{what} must be an integer in [0, 2^53), got {v}"
        )))
    }
}

/// A count that bounds something smaller anyway (layers, attempts): larger ones mean "all".
pub(crate) fn saturating_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// `[{ role, content, tool_calls?, tool_call_id?, name? }]` from JSON: content may be null (an
/// assistant turn that only calls tools); the tool fields go to the template as they are.
pub(crate) fn parse_messages(messages_json: &str) -> Result<Vec<ChatMessage>, JsValue> {
    #[derive(serde::Deserialize)]
    struct Message {
        role: String,
        content: Option<String>,
        #[serde(default)]
        tool_calls: Option<engine::chat::TemplateValue>,
        #[serde(default)]
        tool_call_id: Option<String>,
        #[serde(default)]
        name: Option<String>,
    }
    let list: Vec<Message> = serde_json::from_str(messages_json).map_err(|e| {
        invalid_argument(format!(
            "messages must be [{{ role, content }}] of text: {e}"
        ))
    })?;
    if list.is_empty() {
        return Err(invalid_argument(
            "messages must be a non-empty list of { role, content }",
        ));
    }
    Ok(list
        .into_iter()
        .map(|m| ChatMessage {
            role: m.role,
            content: m.content.unwrap_or_default(),
            tool_calls: m.tool_calls,
            tool_call_id: m.tool_call_id,
            name: m.name,
        })
        .collect())
}

/// `chatPrompt` of the host and of the stations' coordinator: messages (JSON) rendered with
/// `template`, OpenAI's tools (JSON) when given, the assistant's opening unless asked not to.
pub(crate) fn chat_prompt(
    template: Option<&str>,
    tokenizer: &engine::tokenizer::Tokenizer,
    messages_json: &str,
    tools_json: Option<&str>,
    add_generation_prompt: Option<bool>,
) -> Result<String, JsValue> {
    let list = parse_messages(messages_json)?;
    engine::chat::chat_prompt_with(
        template,
        tokenizer,
        &list,
        tools_json,
        add_generation_prompt.unwrap_or(true),
    )
    .map_err(super::errors::host_error)
}

/// An index from JS (a layer): a non-negative integer.
pub(crate) fn check_index(v: f64, what: &str) -> Result<usize, JsValue> {
    check_count(v, what).map(saturating_usize)
}

/// A prompt from JS as token ids, the only form it takes past this point: ids as they are
/// (`Uint32Array`), text encoded (with the model's BOS), or `{ chat, tools?, addGenerationPrompt?,
/// suffix? }` (messages and tools as JSON) rendered with `template`, `suffix` appended (a call
/// phase's opening), and encoded as the template wrote it.
pub(crate) fn prompt_ids(
    prompt: &JsValue,
    template: Option<&str>,
    tokenizer: &engine::tokenizer::Tokenizer,
) -> Result<Vec<u32>, JsValue> {
    use wasm_bindgen::JsCast;
    let encode = |text: &str| {
        tokenizer
            .encode_with_bos(text)
            .map_err(super::errors::host_error)
    };
    if let Some(ids) = prompt.dyn_ref::<js_sys::Uint32Array>() {
        return Ok(ids.to_vec());
    }
    if let Some(text) = prompt.as_string() {
        return encode(&text);
    }
    let field = |name: &str| js_sys::Reflect::get(prompt, &name.into()).unwrap_or_default();
    let Some(messages) = field("chat").as_string() else {
        return Err(invalid_argument(
            "a prompt is token ids (Uint32Array), text, or { chat: messagesJson }",
        ));
    };
    let tools = field("tools").as_string();
    let add = field("addGenerationPrompt").as_bool();
    let mut text = chat_prompt(template, tokenizer, &messages, tools.as_deref(), add)?;
    if let Some(suffix) = field("suffix").as_string() {
        text.push_str(&suffix);
    }
    // A template writes the model's BOS itself, as Hugging Face's `apply_chat_template`
    // encodes it: adding one would double it.
    tokenizer.encode(&text).map_err(super::errors::host_error)
}
