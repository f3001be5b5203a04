//! Which chat template a model's chats are rendered with: the `chatTemplate` option, else the
//! file's own, else the one the vocabulary's special tokens imply
//! ([`engine::chat::implied_template`]), else none.

use engine::chat::implied_template;
use engine::tokenizer::Tokenizer;
use serde::Serialize;
use std::fmt;

/// Where a chat template came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateSource {
    /// The model file's `tokenizer.chat_template`.
    File,
    /// The host's `chatTemplate` option.
    Option,
    /// Implied by the vocabulary: the convention's name (`gemma`, `llama3`, `chatml`).
    Implied(&'static str),
}

/// The template chats are rendered with, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    pub source: TemplateSource,
    pub text: String,
}

/// Where the template came from, as `/health` and the startup lines show it:
/// `{ "source": "file" | "option" | "implied", "name": "gemma" | null }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateReport {
    pub source: &'static str,
    /// The convention of an implied template; `None` for the others.
    pub name: Option<&'static str>,
}

impl ChatTemplate {
    pub fn report(&self) -> TemplateReport {
        let (source, name) = match self.source {
            TemplateSource::File => ("file", None),
            TemplateSource::Option => ("option", None),
            TemplateSource::Implied(name) => ("implied", Some(name)),
        };
        TemplateReport { source, name }
    }
}

/// `file`, `option`, or `implied gemma`.
impl fmt::Display for TemplateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            Some(name) => write!(f, "{} {name}", self.source),
            None => f.write_str(self.source),
        }
    }
}

/// The template to render chats with: `option` (the `chatTemplate` option) over `file` (the
/// file's own) over the one `tokenizer` implies; `None` when there is none of the three.
pub fn resolve(
    file: Option<&str>,
    option: Option<&str>,
    architecture: &str,
    tokenizer: &Tokenizer,
) -> Option<ChatTemplate> {
    let given = |source, text: &str| ChatTemplate {
        source,
        text: text.to_string(),
    };
    if let Some(text) = option {
        return Some(given(TemplateSource::Option, text));
    }
    if let Some(text) = file {
        return Some(given(TemplateSource::File, text));
    }
    implied_template(architecture, tokenizer).map(|implied| ChatTemplate {
        source: TemplateSource::Implied(implied.name),
        text: implied.template.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printable ASCII (spelled as itself in the byte-level alphabet) plus `specials` as
    /// control tokens.
    fn tokenizer(specials: &[&str]) -> Tokenizer {
        let mut tokens: Vec<String> = (b'!'..=b'~').map(|b| char::from(b).to_string()).collect();
        let mut token_types = vec![1; tokens.len()];
        for special in specials {
            tokens.push(special.to_string());
            token_types.push(3);
        }
        Tokenizer::from_data(&knot::TokenizerData {
            model: "gpt2".into(),
            pre: Some("smollm".into()),
            tokens,
            token_types,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn the_option_wins_over_the_file_and_the_file_over_the_implied() {
        let gemma = tokenizer(&["<start_of_turn>", "<end_of_turn>"]);
        let resolved = |file, option| resolve(file, option, "gemma3", &gemma).unwrap();
        assert_eq!(
            resolved(Some("F"), Some("O")),
            ChatTemplate {
                source: TemplateSource::Option,
                text: "O".into()
            }
        );
        assert_eq!(resolved(None, Some("O")).source, TemplateSource::Option);
        assert_eq!(
            resolved(Some("F"), None),
            ChatTemplate {
                source: TemplateSource::File,
                text: "F".into()
            }
        );
        let implied = resolved(None, None);
        assert_eq!(implied.source, TemplateSource::Implied("gemma"));
        assert!(implied.text.contains("<start_of_turn>"), "{}", implied.text);
    }

    #[test]
    fn a_vocabulary_without_a_convention_and_no_template_has_none() {
        assert_eq!(resolve(None, None, "llama", &tokenizer(&[])), None);
        let plain = tokenizer(&[]);
        assert_eq!(
            resolve(Some("F"), None, "llama", &plain).map(|t| t.source),
            Some(TemplateSource::File)
        );
    }

    #[test]
    fn reports_say_the_source_and_the_convention() {
        let report = |source| ChatTemplate {
            source,
            text: String::new(),
        };
        let json = |source| serde_json::to_value(report(source).report()).unwrap();
        assert_eq!(
            json(TemplateSource::File),
            serde_json::json!({ "source": "file", "name": null })
        );
        assert_eq!(
            json(TemplateSource::Option),
            serde_json::json!({ "source": "option", "name": null })
        );
        assert_eq!(
            json(TemplateSource::Implied("chatml")),
            serde_json::json!({ "source": "implied", "name": "chatml" })
        );
        assert_eq!(
            report(TemplateSource::Implied("gemma"))
                .report()
                .to_string(),
            "implied gemma"
        );
        assert_eq!(report(TemplateSource::File).report().to_string(), "file");
    }
}
