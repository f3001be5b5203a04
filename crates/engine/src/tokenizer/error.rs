//! What building a tokenizer from a file's vocabulary, encoding or decoding can refuse.

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "unsupported tokenizer model {0:?} (supported: byte-level BPE \"gpt2\", SentencePiece \"llama\")"
    )]
    UnknownModel(String),
    #[error("unsupported pre-tokenizer {0:?}")]
    UnknownPreTokenizer(String),
    #[error("the vocabulary is empty")]
    EmptyVocabulary,
    #[error("the vocabulary has {0} tokens, more than u32 ids can address")]
    VocabularyTooLarge(usize),
    #[error("{types} token types for {tokens} tokens")]
    TokenTypeCount { types: usize, tokens: usize },
    #[error("{scores} scores for {tokens} tokens")]
    ScoreCount { scores: usize, tokens: usize },
    #[error("merge {index} ({merge:?}) is not two tokens separated by one space")]
    MalformedMerge { index: usize, merge: String },
    #[error("merge {index} ({merge:?}) uses or makes {token:?}, which is not in the vocabulary")]
    MergeTokenUnknown {
        index: usize,
        merge: String,
        token: String,
    },
    #[error("{which} token id {id} is outside the vocabulary of {vocab_size}")]
    SpecialIdOutOfRange {
        which: &'static str,
        id: u32,
        vocab_size: usize,
    },
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    IdOutOfRange { id: u32, vocab_size: usize },
    #[error("the text to encode is {len} bytes, more than the {max} a tokenizer accepts")]
    InputTooLong { len: usize, max: usize },
}
