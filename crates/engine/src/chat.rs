//! Chat prompts from the model's own Jinja template (GGUF `tokenizer.chat_template`), rendered
//! the way Hugging Face `apply_chat_template` does: `trim_blocks` and `lstrip_blocks` on, the
//! `raise_exception` function, Python string/dict methods (`.strip()`, `.startswith()`,
//! `.items()`, … via `minijinja_contrib::pycompat`), a `tojson` that prints like Python's
//! `json.dumps(..., ensure_ascii=False)`, and booleans/none printed as `True`/`False`/`None`.
//!
//! Known differences from Jinja2: map literals written in a template (`{'b': 1, 'a': 2}`) iterate
//! in sorted key order, and lists print as JSON-like `[1, "a"]` rather than Python's `[1, 'a']`.
//! Messages keep their field order.
//!
//! The template comes from the model file, so rendering is bounded (see [`guard`]): a template
//! that loops without end, prints more than [`MAX_PROMPT_BYTES`] or builds a huge value stops
//! with a [`ChatError`].
//!
//! A file without a template gets the one its special tokens imply, if any
//! ([`implied_template`]: Gemma turns, Llama 3 headers, ChatML), rendered here like any other.

mod guard;
mod implied;

pub use guard::{MAX_ITEMS, MAX_PROMPT_BYTES};
pub use implied::{implied_template, ImpliedTemplate};
/// A value as templates see it (a message's `tool_calls`).
pub use minijinja::Value as TemplateValue;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};

/// One message as templates see it. The tool fields follow Hugging Face's convention: an
/// assistant turn's `tool_calls` (`[{ type, function: { name, arguments } }]`, the arguments as
/// an object) and a `tool` turn's `tool_call_id`; absent fields are not shown to the template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// Kept as the template's value, so JSON objects keep their key order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            ..Self::default()
        }
    }
}

/// What a template does with tools: whether it reads a `tools` variable, and the tag its
/// model opens a call with, when the template writes one (`<tool_call>`, the convention of
/// Hermes, Qwen 2.5/3 and SmolLM3 templates).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateTools {
    pub takes_tools: bool,
    pub call_tag: Option<String>,
}

/// The tag-opened tool-call conventions this crate knows, as (open, close).
const CALL_TAGS: [(&str, &str); 1] = [("<tool_call>", "</tool_call>")];

/// How `template` handles tools (a template that does not parse takes none: rendering it
/// reports the syntax error).
pub fn template_tools(template: Option<&str>) -> TemplateTools {
    let Some(source) = template else {
        return TemplateTools {
            takes_tools: false,
            call_tag: None,
        };
    };
    let mut env = Environment::new();
    let takes_tools = env.add_template("t", source).is_ok()
        && env
            .get_template("t")
            .map(|t| t.undeclared_variables(true).contains("tools"))
            .unwrap_or(false);
    let call_tag = CALL_TAGS
        .iter()
        .find(|(open, close)| source.contains(open) && source.contains(close))
        .map(|(open, _)| open.to_string());
    TemplateTools {
        takes_tools,
        call_tag: if takes_tools { call_tag } else { None },
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
    /// The `tools` given to the template are not a JSON list.
    #[error("chat tools: {0}")]
    Tools(String),
    /// The template ran more instructions than allowed (a loop that does not end, or nearly).
    #[error("chat template ran out of fuel after {fuel} instructions (a runaway loop?)")]
    OutOfFuel { fuel: u64 },
    /// The rendered prompt grew past [`MAX_PROMPT_BYTES`].
    #[error("chat template output is over {limit} bytes")]
    OutputTooLarge { limit: usize },
    /// A filter, function or method was asked to build a value over the limits (`indent` by a
    /// huge width, `range` of a huge length, …).
    #[error("chat template asked for too much: {0}")]
    TooLarge(String),
}

/// The prompt for a chat: `messages` rendered with the model's template (`None`: the model has
/// none), ending with the opening of an assistant turn, the tokenizer's BOS/EOS spellings passed
/// in as `bos_token`/`eos_token`. Every caller (host, CLI, JS) builds chat prompts here.
pub fn chat_prompt(
    template: Option<&str>,
    tokenizer: &crate::tokenizer::Tokenizer,
    messages: &[ChatMessage],
) -> Result<String, ChatError> {
    chat_prompt_with(template, tokenizer, messages, None, true)
}

/// [`chat_prompt`] with the `tools` variable set from `tools_json` (OpenAI's `tools` list, as
/// Hugging Face passes it, for templates that take tools), and without the assistant turn's
/// opening when `add_generation_prompt` is false (a conversation so far, as a prefix of the
/// prompts that continue it).
pub fn chat_prompt_with(
    template: Option<&str>,
    tokenizer: &crate::tokenizer::Tokenizer,
    messages: &[ChatMessage],
    tools_json: Option<&str>,
    add_generation_prompt: bool,
) -> Result<String, ChatError> {
    let template = template.ok_or(ChatError::NoTemplate)?;
    let tools = tools_json.map(parse_tools).transpose()?;
    let name = |id: Option<u32>| id.and_then(|i| tokenizer.token(i)).unwrap_or("");
    render(
        template,
        messages,
        tools.as_ref(),
        add_generation_prompt,
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
    render(
        template,
        messages,
        None,
        add_generation_prompt,
        bos_token,
        eos_token,
    )
}

/// A `tools` list from JSON, its objects' keys in order.
fn parse_tools(json: &str) -> Result<Value, ChatError> {
    let tools: Value = serde_json::from_str(json).map_err(|e| ChatError::Tools(e.to_string()))?;
    if tools.kind() != ValueKind::Seq {
        return Err(ChatError::Tools("it must be a list".into()));
    }
    Ok(tools)
}

fn render(
    template: &str,
    messages: &[ChatMessage],
    tools: Option<&Value>,
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    let mut env = Environment::new();
    // Hugging Face renders with Jinja2's trim_blocks and lstrip_blocks on.
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(ChatError::Syntax)?;
    env.set_syntax(syntax);
    // Guarded builtins and pycompat methods, fuel and an output cap: the template is untrusted.
    guard::install(&mut env);
    // Tools count like messages: a template walks each one's schema.
    let tool_count = tools.and_then(|t| t.len()).unwrap_or(0);
    let fuel = guard::fuel_for(messages.len() + tool_count);
    env.set_fuel(Some(fuel));
    env.add_function("raise_exception", raise_exception);
    env.add_filter("tojson", tojson);
    env.set_formatter(python_formatter);
    env.add_template("chat_template", template)
        .map_err(ChatError::Syntax)?;
    let compiled = env
        .get_template("chat_template")
        .map_err(ChatError::Syntax)?;
    let mut output = guard::CappedOutput::new(MAX_PROMPT_BYTES);
    let rendered = compiled.render_captured_to(
        context! {
            messages => Value::from(Serde(messages)),
            // Unset (undefined, as in Hugging Face's call without tools) unless given.
            tools => tools.cloned().unwrap_or(Value::UNDEFINED),
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token,
            eos_token => eos_token,
        },
        &mut output,
    );
    match rendered {
        // The output is whole `str` writes, so valid UTF-8.
        Ok(_) => Ok(String::from_utf8(output.bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        Err(_) if output.overflowed => Err(ChatError::OutputTooLarge {
            limit: MAX_PROMPT_BYTES,
        }),
        Err(error) => Err(typed(error, fuel)),
    }
}

/// A render error as the [`ChatError`] its kind or source says it is.
fn typed(error: Error, fuel: u64) -> ChatError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = source {
        if let Some(inner) = current.downcast_ref::<Error>() {
            if inner.kind() == ErrorKind::OutOfFuel {
                return ChatError::OutOfFuel { fuel };
            }
        }
        if let Some(raised) = current.downcast_ref::<RaisedByTemplate>() {
            return ChatError::Raised(raised.0.clone());
        }
        if let Some(limit) = current.downcast_ref::<guard::TooLarge>() {
            return ChatError::TooLarge(limit.0.clone());
        }
        source = current.source();
    }
    ChatError::Render(error)
}

/// Prints `true`/`false`/`none` the way Jinja2 on Python does: `True`, `False`, `None`.
fn python_formatter(
    out: &mut minijinja::Output,
    state: &mut minijinja::State,
    value: &Value,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Bool => out.write_str(if value.is_true() { "True" } else { "False" })?,
        ValueKind::None => out.write_str("None")?,
        ValueKind::String => minijinja::escape_formatter(out, state, value)?,
        _ => {
            // A sequence or map prints whole before the output cap sees it: measure it first.
            guard::check_items(value)?;
            guard::check_size("printing a value", guard::display_len(value))?;
            minijinja::escape_formatter(out, state, value)?
        }
    }
    Ok(())
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

/// `tojson(indent=None)` printed as Python's `json.dumps(value, ensure_ascii=False,
/// indent=indent)`: `", "` and `": "` separators, keys in insertion order, no HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(width) => Some(guard::size_arg(&width).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                "tojson indent must be a non-negative integer",
            )
        })?),
    };
    kwargs.assert_all_used()?;
    if let Some(width) = indent {
        guard::check_size("tojson indent", width)?;
    }
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
    // Output past the cap stops here, before a deep indent or a long sequence is written.
    guard::check_size("tojson", out.len())?;
    guard::check_items(value)?;
    let newline = |out: &mut String, depth: usize| {
        if let Some(width) = indent {
            let spaces = width.saturating_mul(depth);
            guard::check_size("tojson indent", out.len().saturating_add(spaces))?;
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', spaces));
        }
        Ok::<(), Error>(())
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
                newline(out, depth + 1)?;
                write_json(out, item, indent, depth + 1)?;
            }
            if !items.is_empty() {
                newline(out, depth)?;
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
                newline(out, depth + 1)?;
                let key_text = match key.as_str() {
                    Some(text) => text.to_string(),
                    None => key.to_string(),
                };
                write_json(out, &Value::from(key_text), indent, depth + 1)?;
                out.push_str(": ");
                write_json(out, &value.get_item(key)?, indent, depth + 1)?;
            }
            if !keys.is_empty() {
                newline(out, depth)?;
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

    /// Reversed slices of empty values, as Qwen's templates write `messages[::-1]`: minijinja 2
    /// indexed past the end here (a panic, a trap in wasm); found by the chat_template fuzzer.
    #[test]
    fn reversed_slices_of_empty_values_render() {
        let no_messages: [ChatMessage; 0] = [];
        let text = render_chat(
            "[{{ ''[::-1] }}|{{ messages[::-1] | list | length }}|{{ 'abc'[0:2:-1] }}|{{ 'abc'[::-2] }}]",
            &no_messages,
            false,
            "",
            "",
        )
        .unwrap();
        assert_eq!(text, "[|0||ca]");
    }

    #[test]
    fn templates_that_take_tools_get_them_and_their_calls() {
        let template = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/chat/chatml-tools.jinja"
        ))
        .unwrap();
        assert_eq!(
            template_tools(Some(&template)),
            TemplateTools {
                takes_tools: true,
                call_tag: Some("<tool_call>".into())
            }
        );
        assert_eq!(
            template_tools(Some("{{ messages[0].content }}")),
            TemplateTools {
                takes_tools: false,
                call_tag: None
            }
        );
        assert!(!template_tools(None).takes_tools);
        let tools = parse_tools(
            r#"[{"type": "function", "function": {"name": "add",
            "parameters": {"type": "object"}}}]"#,
        )
        .unwrap();
        let call: Value = serde_json::from_str(
            r#"[{"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]"#,
        )
        .unwrap();
        let messages = [
            ChatMessage::new("user", "1+1?"),
            ChatMessage {
                tool_calls: Some(call),
                ..ChatMessage::new("assistant", "")
            },
            ChatMessage {
                tool_call_id: Some("c1".into()),
                ..ChatMessage::new("tool", "2")
            },
        ];
        let out = super::render(&template, &messages, Some(&tools), true, "", "").unwrap();
        assert!(
            out.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"add\""),
            "{out}"
        );
        assert!(out.contains("<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call><|im_end|>"), "{out}");
        assert!(
            out.contains("<tool_response>\n2\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            "{out}"
        );
        // Without tools, the same template renders the plain chat.
        let plain = super::render(&template, &messages[..1], None, true, "", "").unwrap();
        assert!(!plain.contains("<tools>"), "{plain}");
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

    fn render(template: &str) -> Result<String, ChatError> {
        render_chat(template, &[ChatMessage::new("user", "Hi")], false, "", "")
    }

    fn assert_too_large(template: &str) {
        match render(template) {
            Err(ChatError::TooLarge(message)) => assert!(!message.is_empty()),
            other => panic!("{template}: {other:?}"),
        }
    }

    /// minijinja's `indent` allocated `width` spaces unchecked: a panic (capacity overflow) or an
    /// abort (allocation failure).
    #[test]
    fn huge_indent_is_refused() {
        assert_too_large("{{ 'x'|indent(9223372036854775808) }}");
        assert_too_large("{{ 'a\nb'|indent(100000000000) }}");
        assert_too_large("{{ 'a\nb'|indent(width=100000000000, first=true) }}");
        assert_eq!(render("{{ 'a\nb'|indent(2) }}").unwrap(), "a\n  b");
    }

    /// Our own `tojson` multiplied the indent by the depth and allocated it unchecked.
    #[test]
    fn huge_tojson_indent_is_refused() {
        assert_too_large("{{ [1]|tojson(indent=100000000000) }}");
        assert_too_large("{{ messages|tojson(indent=9223372036854775807) }}");
        assert_too_large("{{ ([('x' * 1000000)] * 1000)|tojson }}");
        assert_eq!(render("{{ [1]|tojson(indent=2) }}").unwrap(), "[\n  1\n]");
    }

    /// Three nested loops over `range(100000)` ran 10^15 iterations.
    #[test]
    fn runaway_loops_run_out_of_fuel() {
        let template = "{% for i in range(100000) %}{% for j in range(100000) %}\
                        {% for k in range(100000) %}{% endfor %}{% endfor %}{% endfor %}";
        assert!(matches!(render(template), Err(ChatError::OutOfFuel { .. })));
    }

    /// The output grew without bound (here 10 MB; more loops, more bytes).
    #[test]
    fn output_past_the_cap_is_refused() {
        match render("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}") {
            Err(ChatError::OutputTooLarge { limit }) => assert_eq!(limit, MAX_PROMPT_BYTES),
            other => panic!("{other:?}"),
        }
        assert_too_large("{{ [('x' * 1000000)] * 1000 }}");
    }

    /// Sizes and counts that made minijinja panic, abort on allocation or spin.
    #[test]
    fn huge_ranges_repeats_and_groups_are_refused() {
        // minijinja's negative-step arithmetic overflowed (a panic).
        assert_too_large("{{ range(9223372036854775807, -9223372036854775807 - 1, -1)|length }}");
        assert_eq!(
            render("{{ range(10, 0, -9223372036854775807 - 1)|list }}").unwrap(),
            "[10]"
        );
        assert_too_large("{{ range(1000000000000)|length }}");
        assert_eq!(render("{{ range(5, 0, -2)|list }}").unwrap(), "[5, 3, 1]");
        // A lazy repeat that `list`, `sort` or `string` tried to hold whole (minijinja refuses
        // repeats past 10^8 items itself; ours stop at MAX_ITEMS).
        for filter in ["list", "sort", "last", "unique", "sum", "string", "join"] {
            assert_too_large(&format!("{{{{ ([1] * 50000000)|{filter} }}}}"));
        }
        assert_too_large("{{ ([1] * 50000000).count(1) }}");
        assert!(matches!(
            render("{{ ([1] * 4000000000)|list }}"),
            Err(ChatError::Render(_))
        ));
        // Allocated `count` groups up front.
        assert_too_large("{{ range(10)|batch(100000000000)|list }}");
        assert_too_large("{{ range(10)|slice(100000000000)|list }}");
        // minijinja's own refusal of a huge string repetition (minijinja 3 charges it as fuel).
        assert!(matches!(
            render("{{ 'x' * 1000000000000 }}"),
            Err(ChatError::Render(_) | ChatError::OutOfFuel { .. })
        ));
    }

    /// Filters and methods that build a string far larger than their arguments.
    #[test]
    fn amplifying_filters_and_methods_are_refused() {
        assert_too_large("{{ ('x' * 100000)|replace('x', 'x' * 100000) }}");
        assert_too_large("{{ ('x' * 100000).replace('x', 'x' * 100000) }}");
        assert_too_large("{{ range(100000)|join('x' * 100000) }}");
        assert_too_large("{{ ('x' * 100000).join(range(100000)) }}");
        assert_too_large("{{ '%0999999999d'|format(1) }}");
        assert_too_large("{{ '{:>9999999999}'.format(1) }}");
        assert_eq!(
            render(
                "{{ 'a-b'|replace('-', '+') }} {{ ', '.join(['a', 'b']) }} {{ '%03d'|format(7) }}"
            )
            .unwrap(),
            "a+b a, b 007"
        );
    }

    /// The budget scales with the chat: a long conversation renders.
    #[test]
    fn long_chats_render_within_the_fuel() {
        let fixture: Fixture = serde_json::from_str(&fixture("chat.json")).unwrap();
        let messages: Vec<ChatMessage> = (0..20_000)
            .map(|i| ChatMessage::new(["user", "assistant"][i % 2], "hello there"))
            .collect();
        let text = render_chat(&fixture.templates["smollm2"], &messages, true, "", "").unwrap();
        assert_eq!(text.matches("hello there").count(), 20_000);
    }
}
