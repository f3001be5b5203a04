//! The chat template a model's special tokens imply, for files that carry none (the Gemma-3-270M
//! GGUF has no `tokenizer.chat_template`): Gemma turns, Llama 3 headers or ChatML, whichever the
//! vocabulary has the control tokens of, checked in that order.
//!
//! The templates render text messages as the official ones do (Gemma 3's `tokenizer_config.json`,
//! Llama 3 Instruct's, ChatML as Qwen and SmolLM write it, without a default system prompt), and
//! write `bos_token` where those do: rendered chats are encoded without adding BOS, as Hugging
//! Face's `apply_chat_template` encodes them. They are lenient where the official ones refuse:
//! roles need not alternate, and a `tool` message is a plain turn with the role `tool`. A role
//! other than `system`, `user`, `assistant` or `tool` is refused. They take no `tools` variable.

use crate::tokenizer::Tokenizer;

/// A template implied by a vocabulary's conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImpliedTemplate {
    /// The convention: `gemma`, `llama3` or `chatml`.
    pub name: &'static str,
    /// Jinja, rendered like a file's template (see [`super::chat_prompt`]).
    pub template: &'static str,
}

/// A turn convention: the tokens that mark it, and the template that writes them.
struct Convention {
    name: &'static str,
    tokens: &'static [&'static str],
    template: &'static str,
}

/// Checked in this order: a vocabulary with the tokens of two conventions gets the first.
const CONVENTIONS: [Convention; 3] = [
    Convention {
        name: "gemma",
        tokens: &["<start_of_turn>", "<end_of_turn>"],
        template: GEMMA,
    },
    Convention {
        name: "llama3",
        tokens: &["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        template: LLAMA3,
    },
    Convention {
        name: "chatml",
        tokens: &["<|im_start|>", "<|im_end|>"],
        template: CHATML,
    },
];

/// Gemma 2/3 turns: a leading system message's text opens the first turn (Gemma has no system
/// turn), `assistant` is spelled `model`, contents are trimmed.
const GEMMA: &str = r#"{{- bos_token }}
{%- if messages and messages[0].role == 'system' %}
    {%- set preamble = messages[0].content ~ '\n\n' %}
    {%- set turns = messages[1:] %}
{%- else %}
    {%- set preamble = '' %}
    {%- set turns = messages %}
{%- endif %}
{%- for message in turns %}
    {%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}
        {{- raise_exception('Unsupported role: ' ~ message.role) }}
    {%- endif %}
    {{- '<start_of_turn>' ~ ('model' if message.role == 'assistant' else message.role) ~ '\n' }}
    {{- preamble if loop.first else '' }}
    {{- (message.content | trim) ~ '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\n' }}
{%- endif %}"#;

/// Llama 3 headers; BOS opens the first message (none without messages, as in Llama 3's own).
const LLAMA3: &str = r#"{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}
        {{- raise_exception('Unsupported role: ' ~ message.role) }}
    {%- endif %}
    {%- if loop.first %}
        {{- bos_token }}
    {%- endif %}
    {{- '<|start_header_id|>' ~ message.role ~ '<|end_header_id|>\n\n' }}
    {{- (message.content | trim) ~ '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}"#;

/// ChatML; contents as given, no BOS (ChatML templates write none).
const CHATML: &str = r#"{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}
        {{- raise_exception('Unsupported role: ' ~ message.role) }}
    {%- endif %}
    {{- '<|im_start|>' ~ message.role ~ '\n' ~ message.content ~ '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}"#;

/// The template `tokenizer`'s control tokens imply, or `None` when it has no known convention's.
/// `_architecture` (GGUF `general.architecture`) does not decide: fine-tunes keep their base
/// model's tokens whatever the architecture they are converted as.
pub fn implied_template(_architecture: &str, tokenizer: &Tokenizer) -> Option<ImpliedTemplate> {
    CONVENTIONS
        .iter()
        .find(|c| c.tokens.iter().all(|t| is_single_token(tokenizer, t)))
        .map(|c| ImpliedTemplate {
            name: c.name,
            template: c.template,
        })
}

/// Whether `text` encodes to one token spelled `text`: the template writes the token as text, so
/// a vocabulary that merely contains the spelling (as an ordinary piece the encoder never
/// produces whole) does not count.
fn is_single_token(tokenizer: &Tokenizer, text: &str) -> bool {
    match tokenizer.encode(text).as_deref() {
        Ok([id]) => tokenizer.token(*id) == Some(text),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{chat_prompt_with, render_chat, ChatError, ChatMessage};
    use crate::tokenizer::bpe::byte_to_char;
    use knot::TokenizerData;

    /// A byte-level vocabulary (the 256 byte symbols) plus `specials` as control tokens.
    fn byte_level(specials: &[&str]) -> Tokenizer {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        let mut token_types = vec![1; 256];
        for special in specials {
            tokens.push(special.to_string());
            token_types.push(3);
        }
        Tokenizer::from_data(&TokenizerData {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            tokens,
            token_types,
            ..Default::default()
        })
        .unwrap()
    }

    /// A SentencePiece vocabulary shaped like Gemma's: `<bos>` (id 2) added by the encoder,
    /// the turn tokens as control tokens, byte fallback for everything else.
    fn gemma_like() -> Tokenizer {
        let mut tokens: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>"]
            .into_iter()
            .chain(["<start_of_turn>", "<end_of_turn>"])
            .map(String::from)
            .collect();
        let mut token_types = vec![3; tokens.len()];
        tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        token_types.extend([6; 256]);
        for piece in ["▁", "user", "model", "Hi", "!"] {
            tokens.push(piece.into());
            token_types.push(1);
        }
        Tokenizer::from_data(&TokenizerData {
            model: "llama".into(),
            scores: vec![0.0; tokens.len()],
            tokens,
            token_types,
            bos_id: Some(2),
            eos_id: Some(1),
            unk_id: Some(3),
            add_bos: true,
            add_space_prefix: Some(false),
            ..Default::default()
        })
        .unwrap()
    }

    fn name(specials: &[&str]) -> Option<&'static str> {
        implied_template("llama", &byte_level(specials)).map(|t| t.name)
    }

    fn template(name: &str) -> &'static str {
        CONVENTIONS
            .iter()
            .find(|c| c.name == name)
            .unwrap()
            .template
    }

    fn conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "  Hi there\n"),
            ChatMessage::new("assistant", "Hello! "),
            ChatMessage::new("user", "What is 2+2?"),
        ]
    }

    /// The conversation rendered without and with the generation prompt.
    fn both(name: &str, bos: &str) -> [String; 2] {
        [false, true]
            .map(|open| render_chat(template(name), &conversation(), open, bos, "<eos>").unwrap())
    }

    #[test]
    fn gemma_renders_as_gemma_3_does() {
        let turns = "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n\
                     <start_of_turn>model\nHello!<end_of_turn>\n\
                     <start_of_turn>user\nWhat is 2+2?<end_of_turn>\n";
        assert_eq!(
            both("gemma", "<bos>"),
            [turns.to_string(), format!("{turns}<start_of_turn>model\n")]
        );
    }

    #[test]
    fn llama3_renders_as_llama_3_does() {
        let turns = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n\
                     Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n\
                     Hi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n\
                     Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n\
                     What is 2+2?<|eot_id|>";
        assert_eq!(
            both("llama3", "<|begin_of_text|>"),
            [
                turns.to_string(),
                format!("{turns}<|start_header_id|>assistant<|end_header_id|>\n\n")
            ]
        );
    }

    #[test]
    fn chatml_renders_contents_as_given() {
        let turns = "<|im_start|>system\nBe brief.<|im_end|>\n\
                     <|im_start|>user\n  Hi there\n<|im_end|>\n\
                     <|im_start|>assistant\nHello! <|im_end|>\n\
                     <|im_start|>user\nWhat is 2+2?<|im_end|>\n";
        assert_eq!(
            both("chatml", "<|endoftext|>"),
            [turns.to_string(), format!("{turns}<|im_start|>assistant\n")]
        );
    }

    /// Without a system message Gemma's first turn has no preamble; without messages Llama 3
    /// writes no BOS (its own template writes BOS with the first message).
    #[test]
    fn edges_of_the_conversation() {
        let hi = [ChatMessage::new("user", "Hi!")];
        assert_eq!(
            render_chat(GEMMA, &hi, true, "<bos>", "").unwrap(),
            "<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            render_chat(LLAMA3, &[], true, "<|begin_of_text|>", "").unwrap(),
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(
            render_chat(GEMMA, &[], false, "<bos>", "").unwrap(),
            "<bos>"
        );
    }

    #[test]
    fn tool_turns_are_plain_turns_and_other_roles_are_refused() {
        let messages = [
            ChatMessage::new("user", "2+2?"),
            ChatMessage::new("tool", "4"),
        ];
        let rendered = |name| render_chat(template(name), &messages, false, "<s>", "").unwrap();
        assert!(rendered("gemma").ends_with("<start_of_turn>tool\n4<end_of_turn>\n"));
        assert!(
            rendered("llama3").ends_with("<|start_header_id|>tool<|end_header_id|>\n\n4<|eot_id|>")
        );
        assert!(rendered("chatml").ends_with("<|im_start|>tool\n4<|im_end|>\n"));
        for convention in &CONVENTIONS {
            let odd = [ChatMessage::new("narrator", "Once")];
            match render_chat(convention.template, &odd, true, "", "") {
                Err(ChatError::Raised(message)) => {
                    assert_eq!(message, "Unsupported role: narrator")
                }
                other => panic!("{}: {other:?}", convention.name),
            }
            assert!(!crate::chat::template_tools(Some(convention.template)).takes_tools);
        }
    }

    /// The repo's transcription of Gemma 3's template (tests/fixtures/chat/gemma3.jinja) and
    /// SmolLM2's own ChatML template agree with ours wherever theirs render.
    #[test]
    fn agrees_with_the_fixture_templates() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/chat");
        let gemma3 = std::fs::read_to_string(format!("{root}/gemma3.jinja")).unwrap();
        let fixtures: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{root}/chat.json")).unwrap())
                .unwrap();
        let smollm2 = fixtures["templates"]["smollm2"].as_str().unwrap();
        let chats = [
            conversation(),
            conversation()[1..].to_vec(),
            vec![
                ChatMessage::new("system", "S"),
                ChatMessage::new("user", "Hi"),
            ],
            vec![ChatMessage::new("user", " café 中文 😀 ")],
        ];
        for chat in &chats {
            for open in [false, true] {
                let render = |t: &str| render_chat(t, chat, open, "<bos>", "<eos>").unwrap();
                assert_eq!(render(GEMMA), render(&gemma3), "{chat:?}");
                if chat[0].role == "system" {
                    // SmolLM2 adds a system prompt of its own when there is none.
                    assert_eq!(render(CHATML), render(smollm2), "{chat:?}");
                }
            }
        }
    }

    #[test]
    fn conventions_are_found_by_their_control_tokens() {
        assert_eq!(name(&["<start_of_turn>", "<end_of_turn>"]), Some("gemma"));
        let llama3 = [
            "<|begin_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ];
        assert_eq!(name(&llama3), Some("llama3"));
        assert_eq!(name(&["<|im_start|>", "<|im_end|>"]), Some("chatml"));
        // Gemma first, then Llama 3, then ChatML.
        let all = [
            "<|im_start|>",
            "<|im_end|>",
            "<start_of_turn>",
            "<end_of_turn>",
        ];
        assert_eq!(name(&all), Some("gemma"));
        let both = [
            "<|im_start|>",
            "<|im_end|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
        ];
        assert_eq!(name(&both), Some("llama3"));
    }

    #[test]
    fn vocabularies_without_a_whole_convention_imply_none() {
        assert_eq!(name(&[]), None);
        assert_eq!(name(&["<|im_start|>"]), None);
        assert_eq!(name(&["<start_of_turn>", "<|im_end|>"]), None);
        assert_eq!(name(&["<|start_header_id|>", "<|end_header_id|>"]), None);
        // Spelled in the vocabulary as ordinary tokens, which the encoder never produces whole.
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        tokens.extend(["<|im_start|>".into(), "<|im_end|>".into()]);
        let plain = Tokenizer::from_data(&TokenizerData {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            token_types: vec![1; tokens.len()],
            tokens,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(implied_template("qwen2", &plain), None);
    }

    /// Through `chat_prompt_with`, BOS comes from the tokenizer; encoding the prompt (without
    /// adding BOS, as chat prompts are encoded) gives one BOS and the turn tokens whole.
    #[test]
    fn gemma_prompt_encodes_with_one_bos() {
        let tok = gemma_like();
        let implied = implied_template("gemma3", &tok).unwrap();
        assert_eq!(implied.name, "gemma");
        let hi = [ChatMessage::new("user", "Hi!")];
        let prompt = chat_prompt_with(Some(implied.template), &tok, &hi, None, true).unwrap();
        assert_eq!(
            prompt,
            "<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n"
        );
        let ids = tok.encode(&prompt).unwrap();
        assert_eq!(ids.iter().filter(|&&id| id == 2).count(), 1);
        assert_eq!(ids[..2], [2, 4]);
        assert_eq!(ids.iter().filter(|&&id| id == 5).count(), 1);
    }
}
