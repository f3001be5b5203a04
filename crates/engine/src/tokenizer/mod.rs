//! Tokenizers built from [`knot::TokenizerData`]: byte-level BPE (GGUF
//! `tokenizer.ggml.model = "gpt2"`) and SentencePiece BPE (`"llama"`, see [`sentencepiece`]).
//!
//! Encoding: control and user-defined tokens written literally in the text are matched first
//! (longest match, leftmost), as Hugging Face does for added tokens. For byte-level BPE the text
//! between them is cut by the model's [`PreTokenizer`], each piece spelled in the GPT-2 byte
//! alphabet and merged by rank; bytes whose symbol is missing from the vocabulary are dropped, as
//! HF's BPE does without an unknown token. Decoding maps tokens back to bytes; invalid UTF-8
//! becomes U+FFFD.
//!
//! Files, each using only those listed before it:
//! - `error.rs` ([`TokenizerError`]), `token_type.rs` (GGUF token types: which tokens match
//!   literally, which are never text, which are bytes), `letters.rs` (the `\p{L}` table);
//! - `pretokenize.rs` ([`PreTokenizer`]), `bpe.rs` (the GPT-2 byte alphabet and the merge loop),
//!   `sentencepiece.rs` (SentencePiece's merge loop and byte fallback), `specials.rs` (the
//!   literal-match tokens);
//! - this file, on top: [`Tokenizer`] (built from the vocabulary, `encode`, `decode`) and
//!   [`StreamDecoder`], in one file because each uses the other (`decode` of a SentencePiece
//!   text streams; the stream reads the tokenizer's tables).

pub(crate) mod bpe;
mod error;
mod letters;
mod pretokenize;
mod sentencepiece;
mod specials;
mod token_type;

use coltrane::TokenKind;
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

pub use error::TokenizerError;
pub use pretokenize::{is_letter, PreTokenizer};

use bpe::{byte_to_char, char_to_byte_table, Merges};
use sentencepiece::{byte_token_value, is_space_run, SentencePiece, SPACE_MARK};
use specials::Specials;
use token_type::{special_type, TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED};

/// Longest text [`Tokenizer::encode`] accepts, in bytes: 8 MiB, about two million tokens of
/// English, far past any model's context. Encoding keeps a few tens of bytes per character, so
/// this bounds its memory to a few hundred MB in the worst case.
pub const MAX_ENCODE_BYTES: usize = 8 << 20;

/// The encoding algorithm and its tables.
#[derive(Debug)]
enum Model {
    ByteLevelBpe { pre: PreTokenizer, merges: Merges },
    SentencePiece(Box<SentencePiece>),
}

/// A byte-level BPE or SentencePiece tokenizer.
#[derive(Debug)]
pub struct Tokenizer {
    model: Model,
    tokens: Vec<String>,
    /// The bytes of token `i` are `token_bytes[token_offsets[i]..token_offsets[i + 1]]`.
    token_bytes: Vec<u8>,
    token_offsets: Vec<u32>,
    /// Id of each byte's single-byte token (byte-level symbol or `<0xNN>`), if the vocabulary
    /// has one.
    byte_ids: [Option<u32>; 256],
    /// Literal-match tokens, found in text before the model's own encoding.
    specials: Specials,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    add_bos: bool,
    /// How each token decodes, for constraints: text, a special token, or one raw byte.
    kinds: Vec<TokenKind>,
    /// COLTRANE's index of this vocabulary, built on first use (for the end-of-text ids given).
    constraint_index: OnceLock<(Vec<u32>, Arc<coltrane::Index>)>,
}

impl Tokenizer {
    pub fn from_data(data: &knot::TokenizerData) -> Result<Self, TokenizerError> {
        if data.model != "gpt2" && data.model != "llama" {
            return Err(TokenizerError::UnknownModel(data.model.clone()));
        }
        let vocab_size = data.tokens.len();
        if vocab_size == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        if u32::try_from(vocab_size).is_err() {
            return Err(TokenizerError::VocabularyTooLarge(vocab_size));
        }
        if !data.token_types.is_empty() && data.token_types.len() != vocab_size {
            return Err(TokenizerError::TokenTypeCount {
                types: data.token_types.len(),
                tokens: vocab_size,
            });
        }
        for (which, id) in [("bos", data.bos_id), ("eos", data.eos_id)] {
            if let Some(id) = id.filter(|&id| id as usize >= vocab_size) {
                return Err(TokenizerError::SpecialIdOutOfRange {
                    which,
                    id,
                    vocab_size,
                });
            }
        }
        if data.model == "llama" {
            return Self::sentencepiece(data);
        }
        let pre = PreTokenizer::from_name(data.pre.as_deref())?;
        let is_literal = |id: usize| {
            matches!(
                data.token_types.get(id),
                Some(&(TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
            )
        };

        // A repeated token string resolves to its last id, as a Python dict built from the list.
        let ids: HashMap<&str, u32> = data
            .tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.as_str(), id as u32))
            .collect();

        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = ids
                .get(byte_to_char(b as u8).encode_utf8(&mut [0; 4]) as &str)
                .copied();
        }

        let mut merges = Merges::with_capacity(data.merges.len());
        let mut joined = String::new();
        for (index, merge) in data.merges.iter().enumerate() {
            let malformed = || TokenizerError::MalformedMerge {
                index,
                merge: merge.clone(),
            };
            let (left, right) = merge.split_once(' ').ok_or_else(malformed)?;
            if left.is_empty() || right.is_empty() || right.contains(' ') {
                return Err(malformed());
            }
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let lookup = |token: &str| {
                ids.get(token)
                    .copied()
                    .ok_or_else(|| TokenizerError::MergeTokenUnknown {
                        index,
                        merge: merge.clone(),
                        token: token.to_string(),
                    })
            };
            let rank = u32::try_from(index).map_err(|_| malformed())?;
            merges.insert(lookup(left)?, lookup(right)?, rank, lookup(&joined)?);
        }

        let char_to_byte = char_to_byte_table();
        let mut token_bytes = Vec::new();
        let mut token_offsets = Vec::with_capacity(vocab_size + 1);
        token_offsets.push(0u32);
        for (id, token) in data.tokens.iter().enumerate() {
            if is_literal(id) {
                token_bytes.extend_from_slice(token.as_bytes());
            } else {
                for ch in token.chars() {
                    match char_to_byte.get(ch as usize).copied().flatten() {
                        Some(b) => token_bytes.push(b),
                        // Not in the byte alphabet: keep the char's own UTF-8, as HF's decoder.
                        None => {
                            token_bytes.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes())
                        }
                    }
                }
            }
            let end = u32::try_from(token_bytes.len())
                .map_err(|_| TokenizerError::VocabularyTooLarge(vocab_size))?;
            token_offsets.push(end);
        }

        let kinds = (0..vocab_size)
            .map(|id| match special_type(data.token_types.get(id).copied()) {
                true => TokenKind::Special,
                false => TokenKind::Text,
            })
            .collect();
        Ok(Self {
            model: Model::ByteLevelBpe { pre, merges },
            tokens: data.tokens.clone(),
            token_bytes,
            token_offsets,
            byte_ids,
            specials: Specials::new(&data.tokens, is_literal),
            bos_id: data.bos_id,
            eos_id: data.eos_id,
            add_bos: data.add_bos,
            kinds,
            constraint_index: OnceLock::new(),
        })
    }

    fn sentencepiece(data: &knot::TokenizerData) -> Result<Self, TokenizerError> {
        let vocab_size = data.tokens.len();
        if let Some(id) = data.unk_id.filter(|&id| id as usize >= vocab_size) {
            return Err(TokenizerError::SpecialIdOutOfRange {
                which: "unknown",
                id,
                vocab_size,
            });
        }
        let model = SentencePiece::new(
            &data.tokens,
            &data.token_types,
            &data.scores,
            data.unk_id,
            // llama.cpp's default when the file does not say.
            data.add_space_prefix.unwrap_or(true),
        )?;
        let token_type = |id: usize| data.token_types.get(id).copied();
        // Runs of spaces are ordinary pieces (see sentencepiece::is_space_run), not literals.
        let is_literal = |id: usize| match token_type(id) {
            Some(TOKEN_TYPE_CONTROL) => true,
            Some(TOKEN_TYPE_USER_DEFINED) => !is_space_run(&data.tokens[id]),
            _ => false,
        };

        let mut token_bytes = Vec::new();
        let mut token_offsets = Vec::with_capacity(vocab_size + 1);
        token_offsets.push(0u32);
        let mut kinds = Vec::with_capacity(vocab_size);
        let mut space = [0; 4];
        let space_mark = SPACE_MARK.encode_utf8(&mut space);
        for (id, token) in data.tokens.iter().enumerate() {
            let byte = match token_type(id) {
                Some(TOKEN_TYPE_BYTE) | None => byte_token_value(token),
                _ => None,
            };
            kinds.push(match (byte, special_type(token_type(id))) {
                (Some(_), _) => TokenKind::Byte,
                (None, true) => TokenKind::Special,
                (None, false) => TokenKind::Text,
            });
            match byte {
                Some(b) => token_bytes.push(b),
                None => {
                    for (i, part) in token.split(&*space_mark).enumerate() {
                        if i > 0 {
                            token_bytes.push(b' ');
                        }
                        token_bytes.extend_from_slice(part.as_bytes());
                    }
                }
            }
            let end = u32::try_from(token_bytes.len())
                .map_err(|_| TokenizerError::VocabularyTooLarge(vocab_size))?;
            token_offsets.push(end);
        }

        Ok(Self {
            byte_ids: *model.byte_ids(),
            model: Model::SentencePiece(Box::new(model)),
            tokens: data.tokens.clone(),
            token_bytes,
            token_offsets,
            specials: Specials::new(&data.tokens, is_literal),
            bos_id: data.bos_id,
            eos_id: data.eos_id,
            add_bos: data.add_bos,
            kinds,
            constraint_index: OnceLock::new(),
        })
    }

    /// How token `id` decodes: text, a special token, or a raw byte.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// COLTRANE's index of this vocabulary (trie, classes, fold costs, and the JSON matchers
    /// built over it) with these end-of-text ids; built once and shared (a second set of ids
    /// builds a new one).
    pub fn constraint_index(
        &self,
        eos_ids: &[u32],
    ) -> Result<Arc<coltrane::Index>, coltrane::VocabError> {
        let build = || {
            let tokens = (0..self.vocab_size() as u32).map(|id| {
                (
                    self.kinds[id as usize],
                    self.token_bytes(id).unwrap_or_default(),
                )
            });
            coltrane::Vocab::new(tokens, eos_ids).map(|v| Arc::new(coltrane::Index::new(v)))
        };
        if let Some((ids, v)) = self.constraint_index.get() {
            return match ids.as_slice() == eos_ids {
                true => Ok(v.clone()),
                false => build(),
            };
        }
        let v = build()?;
        let _ = self.constraint_index.set((eos_ids.to_vec(), v.clone()));
        Ok(v)
    }

    /// Token ids for `text`, without BOS. Control and user-defined tokens written in the text
    /// (e.g. `<|im_start|>`) become their single ids. Text over [`MAX_ENCODE_BYTES`] is refused.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        if text.len() > MAX_ENCODE_BYTES {
            return Err(TokenizerError::InputTooLong {
                len: text.len(),
                max: MAX_ENCODE_BYTES,
            });
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut scratch = sentencepiece::Scratch::default();
        let mut plain_start = 0;
        let mut at = 0;
        let bytes = text.as_bytes();
        while at < bytes.len() {
            match self.special_at(text, at) {
                Some((len, id)) => {
                    self.encode_plain(text, plain_start..at, &mut scratch, &mut out);
                    out.push(id);
                    at += len;
                    plain_start = at;
                }
                None => at += 1,
            }
        }
        self.encode_plain(text, plain_start..text.len(), &mut scratch, &mut out);
        Ok(out)
    }

    /// [`Tokenizer::encode`] with BOS prepended when the model asks for it (GGUF
    /// `tokenizer.ggml.add_bos_token`).
    pub fn encode_with_bos(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut out = self.encode(text)?;
        if let (true, Some(bos)) = (self.add_bos, self.bos_id) {
            out.insert(0, bos);
        }
        Ok(out)
    }

    /// The text of `ids`: control tokens as their text, invalid UTF-8 as U+FFFD. With a
    /// SentencePiece space prefix, one leading space of the text is dropped (HF's `Strip`).
    ///
    /// SentencePiece byte tokens decode as HF's `ByteFallback`: a run of consecutive `<0xNN>`
    /// tokens that is not valid UTF-8 as a whole becomes one U+FFFD per token.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if matches!(self.model, Model::SentencePiece(_)) {
            let mut stream = StreamDecoder::new(self);
            let mut out = String::new();
            for &id in ids {
                stream.push_into(id, &mut out)?;
            }
            out.push_str(&stream.finish());
            return Ok(out);
        }
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.bytes_of(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Whether decoding drops the space SentencePiece prepends when encoding.
    fn strips_space_prefix(&self) -> bool {
        matches!(&self.model, Model::SentencePiece(spm) if spm.add_space_prefix())
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The token as the vocabulary spells it (byte-level alphabet, e.g. `Ġthe`, or SentencePiece's
    /// `▁the`).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The bytes token `id` stands for when decoded.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let start = *self.token_offsets.get(i)? as usize;
        let end = *self.token_offsets.get(i + 1)? as usize;
        Some(&self.token_bytes[start..end])
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The byte-level BPE pre-tokenizer; `None` for SentencePiece, which has none.
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        match self.model {
            Model::ByteLevelBpe { pre, .. } => Some(pre),
            Model::SentencePiece(_) => None,
        }
    }

    /// The byte a SentencePiece `<0xNN>` token stands for.
    fn fallback_byte(&self, id: u32) -> Option<u8> {
        if !matches!(self.model, Model::SentencePiece(_)) {
            return None;
        }
        match self.token_bytes(id)? {
            &[b] if self.byte_ids[b as usize] == Some(id) => Some(b),
            _ => None,
        }
    }

    fn bytes_of(&self, id: u32) -> Result<&[u8], TokenizerError> {
        self.token_bytes(id).ok_or(TokenizerError::IdOutOfRange {
            id,
            vocab_size: self.vocab_size(),
        })
    }

    /// The longest literal-match token starting at byte `at`, as (byte length, id).
    fn special_at(&self, text: &str, at: usize) -> Option<(usize, u32)> {
        self.specials.longest_prefix_of(&text.as_bytes()[at..])
    }

    /// Encodes `text[range]`, a stretch without literal-match tokens.
    fn encode_plain(
        &self,
        text: &str,
        range: std::ops::Range<usize>,
        scratch: &mut sentencepiece::Scratch,
        out: &mut Vec<u32>,
    ) {
        let first = range.start == 0;
        let text = &text[range];
        match &self.model {
            Model::ByteLevelBpe { pre, merges } => {
                let mut symbols = Vec::new();
                pre.split(text, |piece| {
                    symbols.clear();
                    symbols.extend(piece.bytes().filter_map(|b| self.byte_ids[b as usize]));
                    merges.apply(&mut symbols);
                    out.extend_from_slice(&symbols);
                });
            }
            Model::SentencePiece(spm) => spm.encode_segment(text, first, scratch, out),
        }
    }
}

/// Incremental decoding for streamed generation: each [`StreamDecoder::push`] returns the text
/// completed by that token, holding back a UTF-8 sequence split across tokens until it is whole.
/// The pushes plus [`StreamDecoder::finish`] concatenate to [`Tokenizer::decode`] of all ids.
///
/// For SentencePiece, a run of byte tokens is held back whole until a text token (or `finish`)
/// ends it: HF replaces every byte of a run that is invalid anywhere.
///
/// It holds its tokenizer however the caller owns it: `&Tokenizer` for a loop on the stack,
/// `Rc<Tokenizer>` for a generation kept across calls (the host's).
#[derive(Debug)]
pub struct StreamDecoder<T: Deref<Target = Tokenizer>> {
    tokenizer: T,
    pending: Vec<u8>,
    /// SentencePiece: the bytes of the current run of `<0xNN>` tokens.
    byte_run: Vec<u8>,
    /// SentencePiece: whether text has been emitted (the first may lose the space prefix).
    text_started: bool,
}

impl<T: Deref<Target = Tokenizer>> StreamDecoder<T> {
    pub fn new(tokenizer: T) -> Self {
        Self {
            tokenizer,
            pending: Vec::new(),
            byte_run: Vec::new(),
            text_started: false,
        }
    }

    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        if matches!(self.tokenizer.model, Model::SentencePiece(_)) {
            let mut out = String::new();
            self.push_into(id, &mut out)?;
            return Ok(out);
        }
        self.pending.extend_from_slice(self.tokenizer.bytes_of(id)?);
        let mut out = String::new();
        let mut consumed = 0;
        loop {
            match std::str::from_utf8(&self.pending[consumed..]) {
                Ok(valid) => {
                    out.push_str(valid);
                    consumed = self.pending.len();
                    break;
                }
                Err(error) => {
                    let valid_end = consumed + error.valid_up_to();
                    // The prefix up to `valid_up_to` is valid UTF-8 by definition.
                    out.push_str(&String::from_utf8_lossy(&self.pending[consumed..valid_end]));
                    consumed = valid_end;
                    match error.error_len() {
                        // Truncated sequence at the end: wait for the next token.
                        None => break,
                        Some(len) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            consumed += len;
                        }
                    }
                }
            }
        }
        self.pending.drain(..consumed);
        Ok(out)
    }

    /// Flushes what is held back; an unfinished UTF-8 sequence becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let mut out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.flush_byte_run(&mut out);
        out
    }

    /// SentencePiece: appends what token `id` completes to `out`.
    fn push_into(&mut self, id: u32, out: &mut String) -> Result<(), TokenizerError> {
        self.tokenizer.bytes_of(id)?;
        if let Some(b) = self.tokenizer.fallback_byte(id) {
            self.byte_run.push(b);
            return Ok(());
        }
        self.flush_byte_run(out);
        // Text tokens are valid UTF-8: their bytes come from the vocabulary's strings.
        let text = String::from_utf8_lossy(self.tokenizer.bytes_of(id)?).into_owned();
        self.emit(&text, out);
        Ok(())
    }

    fn flush_byte_run(&mut self, out: &mut String) {
        if self.byte_run.is_empty() {
            return;
        }
        let run = std::mem::take(&mut self.byte_run);
        match std::str::from_utf8(&run) {
            Ok(text) => self.emit(text, out),
            Err(_) => self.emit(
                &char::REPLACEMENT_CHARACTER.to_string().repeat(run.len()),
                out,
            ),
        }
        self.byte_run = run;
        self.byte_run.clear();
    }

    /// Appends decoded text, dropping the space prefix from the start of the whole text.
    fn emit(&mut self, text: &str, out: &mut String) {
        if self.text_started || text.is_empty() {
            out.push_str(text);
            return;
        }
        self.text_started = true;
        match text.strip_prefix(' ') {
            Some(rest) if self.tokenizer.strips_space_prefix() => out.push_str(rest),
            _ => out.push_str(text),
        }
    }
}

#[cfg(test)]
mod tests;
