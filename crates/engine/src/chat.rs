//! Chat prompts from the model's own Jinja template (GGUF `tokenizer.chat_template`), rendered
//! the way Hugging Face `apply_chat_template` does: `trim_blocks` and `lstrip_blocks` on, the
//! `raise_exception` function, Python string/dict methods (`.strip()`, `.startswith()`,
//! `.items()`, … via `minijinja_contrib::pycompat`), a `tojson` that prints like Python's
//! `json.dumps(..., ensure_ascii=False)`, and booleans/none printed as `True`/`False`/`None`.
//!
//! Known differences from Jinja2: map literals written in a template (`{'b': 1, 'a': 2}`) iterate
//! in sorted key order, and lists print as JSON-like `[1, "a"]` rather than Python's `[1, 'a']`.
//! Messages keep their field order.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template does not parse.
    #[error("chat template syntax: {0:#}")]
    Syntax(#[source] Error),
    /// The template failed while rendering (unknown filter, bad operand, …).
    #[error("chat template rendering: {0:#}")]
    Render(#[source] Error),
    /// The template called `raise_exception(message)`, e.g. for an unsupported role order.
    #[error("chat template raised: {0}")]
    Raised(String),
    #[error("the model has no chat template")]
    NoTemplate,
}

/// The prompt for a chat: `messages` rendered with the model's template (`None`: the model has
/// none), ending with the opening of an assistant turn, the tokenizer's BOS/EOS spellings passed
/// in as `bos_token`/`eos_token`. Every caller (host, CLI, JS) builds chat prompts here.
pub fn chat_prompt(
    template: Option<&str>,
    tokenizer: &crate::tokenizer::Tokenizer,
    messages: &[ChatMessage],
) -> Result<String, ChatError> {
    let template = template.ok_or(ChatError::NoTemplate)?;
    let name = |id: Option<u32>| id.and_then(|i| tokenizer.token(i)).unwrap_or("");
    render_chat(
        template,
        messages,
        true,
        name(tokenizer.bos_id()),
        name(tokenizer.eos_id()),
    )
}

/// What `raise_exception` attaches to its error so [`render_chat`] can tell it apart.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RaisedByTemplate(String);

/// Renders `template` over `messages`; with `add_generation_prompt` the output ends with the
/// opening of an assistant turn.
pub fn render_chat(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_filter("tojson", tojson);
    env.set_formatter(python_formatter);
    env.add_template("chat_template", template)
        .map_err(ChatError::Syntax)?;
    let compiled = env
        .get_template("chat_template")
        .map_err(ChatError::Syntax)?;
    compiled
        .render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token,
            eos_token => eos_token,
        })
        .map_err(|error| match raised_message(&error) {
            Some(message) => ChatError::Raised(message),
            None => ChatError::Render(error),
        })
}

/// Prints `true`/`false`/`none` the way Jinja2 on Python does: `True`, `False`, `None`.
fn python_formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Bool => out.write_str(if value.is_true() { "True" } else { "False" })?,
        ValueKind::None => out.write_str("None")?,
        _ => minijinja::escape_formatter(out, state, value)?,
    }
    Ok(())
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

fn raised_message(error: &Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(raised) = current.downcast_ref::<RaisedByTemplate>() {
            return Some(raised.0.clone());
        }
        source = current.source();
    }
    None
}

/// `tojson(indent=None)` printed as Python's `json.dumps(value, ensure_ascii=False,
/// indent=indent)`: `", "` and `": "` separators, keys in insertion order, no HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&mut out, value, indent, 0)?;
    // Marked safe, as Jinja2's tojson output is not escaped again.
    Ok(Value::from_safe_string(out))
}

fn write_json(
    out: &mut String,
    value: &Value,
    indent: Option<usize>,
    depth: usize,
) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * depth));
        }
    };
    let item_separator = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            let number = serde_json::to_string(value)
                .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
            out.push_str(&number);
        }
        ValueKind::String => {
            let text = value.as_str().unwrap_or_default();
            // serde_json escapes exactly what Python's ensure_ascii=False does: `"`, `\`, and
            // control characters.
            let quoted = serde_json::to_string(text)
                .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
            out.push_str(&quoted);
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, depth + 1);
                write_json(out, item, indent, depth + 1)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = value.try_iter()?.collect();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, depth + 1);
                let key_text = match key.as_str() {
                    Some(text) => text.to_string(),
                    None => key.to_string(),
                };
                write_json(out, &Value::from(key_text), indent, depth + 1)?;
                out.push_str(": ");
                write_json(out, &value.get_item(key)?, indent, depth + 1)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson cannot print a {kind} value"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../../tests/fixtures/chat/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[derive(serde::Deserialize)]
    struct Fixture {
        templates: std::collections::HashMap<String, String>,
        cases: Vec<Case>,
    }

    #[derive(serde::Deserialize)]
    struct Case {
        template: String,
        messages: Vec<FixtureMessage>,
        add_generation_prompt: bool,
        bos_token: String,
        eos_token: String,
        #[serde(default)]
        expected: Option<String>,
        #[serde(default)]
        error: Option<String>,
    }

    #[derive(serde::Deserialize)]
    struct FixtureMessage {
        role: String,
        content: String,
    }

    /// Every case rendered by Hugging Face `apply_chat_template`
    /// (scripts/reference/gen_chat_fixtures.py).
    #[test]
    fn matches_hugging_face_apply_chat_template() {
        let fixture: Fixture = serde_json::from_str(&fixture("chat.json")).unwrap();
        assert!(fixture.templates.contains_key("smollm2"));
        assert!(fixture.cases.len() >= 8);
        for (index, case) in fixture.cases.iter().enumerate() {
            let messages: Vec<ChatMessage> = case
                .messages
                .iter()
                .map(|m| ChatMessage::new(&m.role, &m.content))
                .collect();
            let template = &fixture.templates[&case.template];
            let result = render_chat(
                template,
                &messages,
                case.add_generation_prompt,
                &case.bos_token,
                &case.eos_token,
            );
            match (&case.expected, &case.error, result) {
                (Some(expected), None, Ok(text)) => {
                    assert_eq!(&text, expected, "case {index} ({})", case.template)
                }
                (None, Some(message), Err(ChatError::Raised(raised))) => {
                    assert_eq!(&raised, message, "case {index}")
                }
                (_, _, other) => panic!("case {index} ({}): {other:?}", case.template),
            }
        }
    }

    #[test]
    fn smollm2_template_adds_default_system_prompt() {
        let fixture: Fixture = serde_json::from_str(&fixture("chat.json")).unwrap();
        let text = render_chat(
            &fixture.templates["smollm2"],
            &[ChatMessage::new("user", "Hi")],
            true,
            "<|im_start|>",
            "<|im_end|>",
        )
        .unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
             Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn template_errors_are_typed() {
        let no_messages: [ChatMessage; 0] = [];
        assert!(matches!(
            render_chat("{% for %}", &no_messages, false, "", ""),
            Err(ChatError::Syntax(_))
        ));
        assert!(matches!(
            render_chat("{{ 1 | no_such_filter }}", &no_messages, false, "", ""),
            Err(ChatError::Syntax(_) | ChatError::Render(_))
        ));
        assert!(matches!(
            render_chat("{{ messages.nope() }}", &no_messages, false, "", ""),
            Err(ChatError::Render(_))
        ));
        match render_chat(
            "{{ raise_exception('no ' ~ 'way') }}",
            &no_messages,
            false,
            "",
            "",
        ) {
            Err(ChatError::Raised(message)) => assert_eq!(message, "no way"),
            other => panic!("{other:?}"),
        }
    }
}
