//! What can go wrong in a host, and the stable code each failure carries across the JS
//! boundary. A caller branches on the code (the Worker maps it to an HTTP status through one
//! table), never on the wording of a message: messages may be reworded, codes may not. The list
//! is documented in docs/errors.md, which a test keeps equal to [`ErrorCode::ALL`].

use crate::source::SourceError;
use engine::chat::ChatError;
use engine::decode::{GenerateError, OptionsError};
use engine::tokenizer::TokenizerError;
use engine::{EngineError, PipelineError};
use knot::KnotError;
use knot_convert::{ConvertError, GgufError};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("not a valid knot file: {0}")]
    Knot(#[from] KnotError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// An option of `open` or of a generation is unknown or out of range.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// A setting outside the options objects (a station's shards, sizes) is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// An argument has the wrong shape (a station's message, answers, slices).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("nothing to continue from: give a prompt first")]
    NoContext,
    #[error("the prompt is empty: give at least one token")]
    EmptyPrompt,
    #[error(
        "the prompt ({tokens} tokens with the conversation) exceeds the context length {context}"
    )]
    PromptTooLong { tokens: usize, context: usize },
    #[error("layer {0} does not exist")]
    NoSuchLayer(usize),
    #[error("{what} takes {bytes} bytes, more than the {max} this host accepts")]
    TooLarge { what: String, bytes: u64, max: u64 },
    #[error("the call was aborted")]
    Aborted,
    #[error("no prefill window {0:?} (it was deleted, replaced or expired, or never existed)")]
    PrefillWindowNotFound(String),
    #[error("prefill windows are disabled on this host (open it with prefillWindows >= 1)")]
    PrefillWindowsDisabled,
    #[error("a station failed: {0}")]
    Station(String),
    /// A GGUF → knot conversion failed (`WasmGgufConverter`).
    #[error("converting GGUF: {0}")]
    Convert(#[from] ConvertError),
    #[error(
        "generate runs one sequence alone, and {active} are running: admit it and step instead"
    )]
    NotAlone { active: usize },
    #[error("{max} sequences are running (maxSequences): wait for one to end")]
    SequencesFull { max: usize },
    /// A failure that ended several sequences at once (a joint pass), as each of the others
    /// reports it: the first's code and message.
    #[error("{message}")]
    Replica { code: ErrorCode, message: String },
    #[error("the model does not fit the memory budget of {budget} bytes ({budget_mib:.1} MiB): at {plan}")]
    OverBudget {
        budget: u64,
        budget_mib: f64,
        plan: String,
    },
}

/// The stable codes of every failure that crosses the JS boundary (`error.code` in JS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    InvalidOption,
    InvalidText,
    TokenOutOfRange,
    EmptyPrompt,
    ContextLengthExceeded,
    NoContext,
    UnsupportedSchema,
    ChatTemplate,
    Aborted,
    Busy,
    Disposed,
    ReadFailed,
    InvalidModel,
    OverBudget,
    TooLarge,
    StationFailed,
    NoCandidates,
    NotFound,
    Disabled,
    Internal,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::InvalidArgument,
        ErrorCode::InvalidOption,
        ErrorCode::InvalidText,
        ErrorCode::TokenOutOfRange,
        ErrorCode::EmptyPrompt,
        ErrorCode::ContextLengthExceeded,
        ErrorCode::NoContext,
        ErrorCode::UnsupportedSchema,
        ErrorCode::ChatTemplate,
        ErrorCode::Aborted,
        ErrorCode::Busy,
        ErrorCode::Disposed,
        ErrorCode::ReadFailed,
        ErrorCode::InvalidModel,
        ErrorCode::OverBudget,
        ErrorCode::TooLarge,
        ErrorCode::StationFailed,
        ErrorCode::NoCandidates,
        ErrorCode::NotFound,
        ErrorCode::Disabled,
        ErrorCode::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::InvalidOption => "invalid_option",
            ErrorCode::InvalidText => "invalid_text",
            ErrorCode::TokenOutOfRange => "token_out_of_range",
            ErrorCode::EmptyPrompt => "empty_prompt",
            ErrorCode::ContextLengthExceeded => "context_length_exceeded",
            ErrorCode::NoContext => "no_context",
            ErrorCode::UnsupportedSchema => "unsupported_schema",
            ErrorCode::ChatTemplate => "chat_template",
            ErrorCode::Aborted => "aborted",
            ErrorCode::Busy => "busy",
            ErrorCode::Disposed => "disposed",
            ErrorCode::ReadFailed => "read_failed",
            ErrorCode::InvalidModel => "invalid_model",
            ErrorCode::OverBudget => "over_budget",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::StationFailed => "station_failed",
            ErrorCode::NoCandidates => "no_candidates",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Disabled => "disabled",
            ErrorCode::Internal => "internal",
        }
    }
}

impl HostError {
    /// The code this failure carries across the JS boundary.
    pub fn code(&self) -> ErrorCode {
        match self {
            HostError::Source(e) => source_code(e),
            HostError::Knot(_) => ErrorCode::InvalidModel,
            HostError::Engine(e) => engine_code(e),
            HostError::Tokenizer(e) => tokenizer_code(e),
            HostError::Pipeline(e) => pipeline_code(e),
            HostError::Generate(e) => generate_code(e),
            HostError::Chat(ChatError::Syntax(_)) => ErrorCode::InvalidModel,
            HostError::Chat(ChatError::Tools(_)) => ErrorCode::InvalidArgument,
            HostError::Chat(_) => ErrorCode::ChatTemplate,
            HostError::Options(e) => options_code(e),
            HostError::InvalidOption(_) => ErrorCode::InvalidOption,
            HostError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            HostError::NoContext => ErrorCode::NoContext,
            HostError::PrefillWindowNotFound(_) => ErrorCode::NotFound,
            HostError::PrefillWindowsDisabled => ErrorCode::Disabled,
            HostError::EmptyPrompt => ErrorCode::EmptyPrompt,
            HostError::PromptTooLong { .. } => ErrorCode::ContextLengthExceeded,
            HostError::NoSuchLayer(_) => ErrorCode::InvalidArgument,
            HostError::TooLarge { .. } => ErrorCode::TooLarge,
            HostError::Aborted => ErrorCode::Aborted,
            HostError::Station(_) => ErrorCode::StationFailed,
            HostError::OverBudget { .. } => ErrorCode::OverBudget,
            HostError::Convert(e) => convert_code(e),
            HostError::NotAlone { .. } | HostError::SequencesFull { .. } => ErrorCode::Busy,
            HostError::Replica { code, .. } => *code,
        }
    }

    /// The same failure, for another sequence it ended: its code and message.
    pub fn replica(&self) -> HostError {
        HostError::Replica {
            code: self.code(),
            message: self.to_string(),
        }
    }

    /// The option an `invalid_option` failure is about (`temperature`, `moa.k`, …), when one is.
    pub fn param(&self) -> Option<&str> {
        match self {
            HostError::Options(OptionsError::Invalid { name, .. })
            | HostError::Options(OptionsError::Unknown(name)) => Some(name),
            HostError::Options(OptionsError::MoaConflict(name)) => Some(name),
            HostError::Options(OptionsError::Pipeline(PipelineError::Coltrane(_))) => {
                Some("coltrane")
            }
            HostError::Options(OptionsError::Pipeline(PipelineError::Moa(_))) => Some("moa"),
            _ => None,
        }
    }
}

/// A GGUF the converter refuses is an invalid model; a caller's bad piece index or wrong byte
/// count is an invalid argument; a header beyond the converter's cap is too large.
fn convert_code(e: &ConvertError) -> ErrorCode {
    match e {
        ConvertError::NotATensor(_) | ConvertError::Write(knot::WriteError::WrongSize { .. }) => {
            ErrorCode::InvalidArgument
        }
        ConvertError::Gguf(GgufError::PrefixTooLong { .. }) => ErrorCode::TooLarge,
        _ => ErrorCode::InvalidModel,
    }
}

fn source_code(e: &SourceError) -> ErrorCode {
    match e {
        SourceError::Aborted { .. } => ErrorCode::Aborted,
        SourceError::Exhausted { cause, .. } => source_code(cause),
        SourceError::Read { .. }
        | SourceError::Permanent { .. }
        | SourceError::Length { .. }
        | SourceError::Timeout { .. } => ErrorCode::ReadFailed,
    }
}

fn engine_code(e: &EngineError) -> ErrorCode {
    match e {
        EngineError::TokenOutOfRange { .. } => ErrorCode::TokenOutOfRange,
        EngineError::ContextFull { .. } => ErrorCode::ContextLengthExceeded,
        EngineError::EmptyBatch => ErrorCode::EmptyPrompt,
        EngineError::MissingTensor(_)
        | EngineError::BadShape { .. }
        | EngineError::UnsupportedArchitecture(_)
        | EngineError::BadConfig(_)
        | EngineError::SpanTooShort { .. }
        | EngineError::Quant(_) => ErrorCode::InvalidModel,
        EngineError::HiddenShape { .. } => ErrorCode::InvalidArgument,
        EngineError::TooLarge { .. } => ErrorCode::TooLarge,
        EngineError::LayerOrder { .. }
        | EngineError::Rewind { .. }
        | EngineError::Busy
        | EngineError::LayerRange { .. } => ErrorCode::Internal,
    }
}

fn tokenizer_code(e: &TokenizerError) -> ErrorCode {
    match e {
        TokenizerError::InputTooLong { .. } => ErrorCode::InvalidText,
        TokenizerError::IdOutOfRange { .. } => ErrorCode::TokenOutOfRange,
        _ => ErrorCode::InvalidModel,
    }
}

fn pipeline_code(e: &PipelineError) -> ErrorCode {
    use coltrane::ColtraneError as C;
    match e {
        PipelineError::Sampler(_) => ErrorCode::InvalidOption,
        PipelineError::Moa(moa::MoaError::NoCandidates) | PipelineError::NoCandidates => {
            ErrorCode::NoCandidates
        }
        PipelineError::Moa(_) => ErrorCode::InvalidOption,
        PipelineError::Coltrane(C::Schema(_)) => ErrorCode::UnsupportedSchema,
        PipelineError::Coltrane(C::Forbidden(_) | C::Rollback { .. }) => ErrorCode::Internal,
        PipelineError::Coltrane(_) => ErrorCode::InvalidOption,
        PipelineError::Vocab(_) => ErrorCode::InvalidModel,
        PipelineError::Health(_) => ErrorCode::InvalidOption,
        PipelineError::Rollback { .. } => ErrorCode::Internal,
    }
}

fn generate_code(e: &GenerateError) -> ErrorCode {
    match e {
        GenerateError::Pipeline(p) => pipeline_code(p),
        GenerateError::Tokenizer(t) => tokenizer_code(t),
        GenerateError::Finished => ErrorCode::Internal,
    }
}

fn options_code(e: &OptionsError) -> ErrorCode {
    match e {
        OptionsError::Pipeline(p) => match pipeline_code(p) {
            // A schema the subset cannot express stays itself; anything else about the options
            // is an invalid option.
            ErrorCode::UnsupportedSchema => ErrorCode::UnsupportedSchema,
            _ => ErrorCode::InvalidOption,
        },
        _ => ErrorCode::InvalidOption,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/errors.md's table: `| code | meaning | HTTP status |` rows.
    fn documented() -> Vec<(String, String)> {
        include_str!("../../../docs/errors.md")
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let code = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((code.to_string(), cells.get(3)?.to_string()))
            })
            .collect()
    }

    #[test]
    fn every_code_is_documented_once_in_order() {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        let docs: Vec<String> = documented().into_iter().map(|(c, _)| c).collect();
        assert_eq!(
            docs, codes,
            "docs/errors.md must list ErrorCode::ALL, in order"
        );
        for (code, status) in documented() {
            assert!(
                status.parse::<u16>().is_ok_and(|s| (400..600).contains(&s)),
                "{code}: HTTP status {status:?}"
            );
        }
    }

    #[test]
    fn codes_follow_the_cause_not_the_wording() {
        let read = |cause| SourceError::Exhausted {
            attempts: 3,
            cause: Box::new(cause),
        };
        let cases: Vec<(HostError, ErrorCode)> = vec![
            (
                read(SourceError::Timeout {
                    start: 0,
                    end: 1,
                    ms: 5,
                })
                .into(),
                ErrorCode::ReadFailed,
            ),
            (
                SourceError::Aborted { start: 0, end: 1 }.into(),
                ErrorCode::Aborted,
            ),
            (
                EngineError::TokenOutOfRange { id: 9, vocab: 3 }.into(),
                ErrorCode::TokenOutOfRange,
            ),
            (
                HostError::PromptTooLong {
                    tokens: 9,
                    context: 3,
                },
                ErrorCode::ContextLengthExceeded,
            ),
            (
                OptionsError::Unknown("temprature".into()).into(),
                ErrorCode::InvalidOption,
            ),
            (
                OptionsError::Pipeline(PipelineError::Coltrane(coltrane::ColtraneError::Schema(
                    coltrane::SchemaError::NoInstance,
                )))
                .into(),
                ErrorCode::UnsupportedSchema,
            ),
            (
                OptionsError::Pipeline(PipelineError::Coltrane(coltrane::ColtraneError::Schema(
                    coltrane::SchemaError::Loop {
                        path: "#/$defs/d".into(),
                    },
                )))
                .into(),
                ErrorCode::UnsupportedSchema,
            ),
            (PipelineError::NoCandidates.into(), ErrorCode::NoCandidates),
            (KnotError::EmptyMetadata.into(), ErrorCode::InvalidModel),
            (ChatError::NoTemplate.into(), ErrorCode::ChatTemplate),
        ];
        for (e, want) in cases {
            assert_eq!(e.code(), want, "{e}");
        }
        let e: HostError = OptionsError::Unknown("temprature".into()).into();
        assert_eq!(e.param(), Some("temprature"));
    }
}
