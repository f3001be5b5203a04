//! Pre-tokenizers: split text into the pieces that BPE merges never cross.
//!
//! Each family is the regex its tokenizer was trained with, hand-written as a small matcher over
//! chars so the engine carries no regex engine. Every matcher mimics a backtracking regex engine
//! trying the alternatives left to right at the current position (leftmost-first, not longest).
//!
//! Character classes: `\p{L}` is [`is_letter`] (an exact table of general category L), `\p{N}` is
//! `char::is_numeric` (exactly Nd|Nl|No) and `\s` is `char::is_whitespace` (the Unicode
//! White_Space property, as Oniguruma's `\s`). The Unicode versions differ slightly between this
//! table (15.1), Rust's std and Oniguruma, so code points assigned in the newest Unicode releases
//! may classify differently.

use super::error::TokenizerError;
use super::letters::LETTER_RANGES;

/// The regex family named by GGUF `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// Every `\p{N}` char isolated first, then [`PreTokenizer::Gpt2`] on the stretches between
    /// (HF `Sequence[Digits(individual_digits), ByteLevel]`): SmolLM, StarCoder.
    DigitsGpt2,
    /// Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    Llama3,
    /// Qwen 2: the Llama 3 regex with single digits (`\p{N}` instead of `\p{N}{1,3}`).
    Qwen2,
}

impl PreTokenizer {
    /// The family for a GGUF `tokenizer.ggml.pre` value; a missing value means GPT-2.
    pub fn from_name(name: Option<&str>) -> Result<Self, TokenizerError> {
        match name {
            None | Some("default" | "gpt2" | "gpt-2") => Ok(Self::Gpt2),
            Some("smollm" | "starcoder") => Ok(Self::DigitsGpt2),
            Some("llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" | "falcon3" | "dbrx") => {
                Ok(Self::Llama3)
            }
            Some("qwen2" | "deepseek-r1-qwen") => Ok(Self::Qwen2),
            Some(other) => Err(TokenizerError::UnknownPreTokenizer(other.to_string())),
        }
    }

    /// Calls `emit` with each piece of `text`, in order; the pieces concatenate to `text`.
    pub fn split<'t>(self, text: &'t str, mut emit: impl FnMut(&'t str)) {
        let chars: Vec<Char> = text
            .char_indices()
            .map(|(offset, ch)| Char {
                offset,
                ch,
                class: Class::of(ch),
            })
            .collect();
        let piece = |start: usize, end: usize| -> &'t str {
            let from = chars[start].offset;
            let to = chars.get(end).map_or(text.len(), |c| c.offset);
            &text[from..to]
        };
        let mut emit_range =
            |start: usize, end: usize, next: fn(&[Char], usize, usize) -> usize| {
                let mut at = start;
                while at < end {
                    let stop = next(&chars, at, end);
                    emit(piece(at, stop));
                    at = stop;
                }
            };
        match self {
            Self::Gpt2 => emit_range(0, chars.len(), gpt2_match),
            Self::Llama3 => emit_range(0, chars.len(), llama3_match),
            Self::Qwen2 => emit_range(0, chars.len(), qwen2_match),
            Self::DigitsGpt2 => {
                let mut stretch_start = 0;
                for (index, c) in chars.iter().enumerate() {
                    if c.class == Class::Number {
                        emit_range(stretch_start, index, gpt2_match);
                        emit_range(index, index + 1, gpt2_match);
                        stretch_start = index + 1;
                    }
                }
                emit_range(stretch_start, chars.len(), gpt2_match);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Number,
    Space,
    /// Neither `\s`, `\p{L}` nor `\p{N}`: punctuation, symbols, marks, controls.
    Other,
}

impl Class {
    fn of(ch: char) -> Self {
        if is_letter(ch) {
            Self::Letter
        } else if ch.is_numeric() {
            Self::Number
        } else if ch.is_whitespace() {
            Self::Space
        } else {
            Self::Other
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Char {
    offset: usize,
    ch: char,
    class: Class,
}

/// `\p{L}`: Unicode general category L (Lu, Ll, Lt, Lm, Lo).
pub fn is_letter(ch: char) -> bool {
    if ch.is_ascii() {
        return ch.is_ascii_alphabetic();
    }
    let cp = ch as u32;
    LETTER_RANGES
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// End of the run of `class` chars starting at `start` (exclusive), bounded by `end`.
fn run_end(s: &[Char], start: usize, end: usize, class: Class) -> usize {
    let mut at = start;
    while at < end && s[at].class == class {
        at += 1;
    }
    at
}

/// Length of `'s|'t|'re|'ve|'m|'ll|'d` at `at` (which holds `'`), optionally case-insensitive.
fn contraction(s: &[Char], at: usize, end: usize, ignore_case: bool) -> Option<usize> {
    let fold = |i: usize| -> Option<char> {
        let ch = s.get(i).filter(|_| i < end)?.ch;
        Some(match ch {
            // Unicode simple case folding maps LATIN SMALL LETTER LONG S to `s`.
            'ſ' if ignore_case => 's',
            _ if ignore_case => ch.to_ascii_lowercase(),
            _ => ch,
        })
    };
    match (fold(at + 1)?, fold(at + 2)) {
        ('s' | 't' | 'm' | 'd', _) => Some(2),
        ('r' | 'v', Some('e')) | ('l', Some('l')) => Some(3),
        _ => None,
    }
}

/// `\s+(?!\S)|\s+` at `at`, which holds whitespace: a run that reaches the end is one piece;
/// otherwise the run gives up its last char to the next piece, or, if it is a single char, is
/// a piece of its own.
fn trailing_space_match(s: &[Char], at: usize, end: usize) -> usize {
    let run = run_end(s, at, end, Class::Space);
    if run == end {
        end
    } else if run - at >= 2 {
        run - 1
    } else {
        at + 1
    }
}

fn gpt2_match(s: &[Char], at: usize, end: usize) -> usize {
    let c = s[at];
    if c.ch == '\'' {
        if let Some(len) = contraction(s, at, end, false) {
            return at + len;
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a space joins whatever non-space follows.
    if c.ch == ' ' && at + 1 < end && s[at + 1].class != Class::Space {
        return run_end(s, at + 1, end, s[at + 1].class);
    }
    match c.class {
        Class::Space => trailing_space_match(s, at, end),
        class => run_end(s, at, end, class),
    }
}

fn llama3_match(s: &[Char], at: usize, end: usize) -> usize {
    llama3_family_match(s, at, end, 3)
}

fn qwen2_match(s: &[Char], at: usize, end: usize) -> usize {
    llama3_family_match(s, at, end, 1)
}

/// The Llama 3 regex with `\p{N}{1,max_digits}`.
fn llama3_family_match(s: &[Char], at: usize, end: usize, max_digits: usize) -> usize {
    let c = s[at];
    let is_newline = |ch: char| ch == '\r' || ch == '\n';
    if c.ch == '\'' {
        if let Some(len) = contraction(s, at, end, true) {
            return at + len;
        }
    }
    // `[^\r\n\p{L}\p{N}]?\p{L}+`
    if c.class == Class::Letter {
        return run_end(s, at, end, Class::Letter);
    }
    if c.class != Class::Number
        && !is_newline(c.ch)
        && at + 1 < end
        && s[at + 1].class == Class::Letter
    {
        return run_end(s, at + 1, end, Class::Letter);
    }
    // `\p{N}{1,n}`
    if c.class == Class::Number {
        return run_end(s, at, end.min(at + max_digits), Class::Number);
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    let symbols_start = if c.class == Class::Other {
        Some(at)
    } else if c.ch == ' ' && at + 1 < end && s[at + 1].class == Class::Other {
        Some(at + 1)
    } else {
        None
    };
    if let Some(start) = symbols_start {
        let mut stop = run_end(s, start, end, Class::Other);
        while stop < end && is_newline(s[stop].ch) {
            stop += 1;
        }
        return stop;
    }
    // Only whitespace is left. `\s*[\r\n]+`: the run up to and including its last newline.
    let run = run_end(s, at, end, Class::Space);
    if let Some(last_newline) = (at..run).rev().find(|&i| is_newline(s[i].ch)) {
        return last_newline + 1;
    }
    trailing_space_match(s, at, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(pre: PreTokenizer, text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        pre.split(text, |piece| out.push(piece));
        out
    }

    #[test]
    fn letter_table_matches_general_category() {
        for ch in ['a', 'Z', 'é', 'ß', 'Ω', 'ж', '中', 'ｱ', 'ª', 'ǅ', 'ʰ', '𝒜'] {
            assert!(is_letter(ch), "{ch:?}");
        }
        // Alphabetic but not L: a Devanagari vowel sign (Mc/Mn), a circled letter (So), a
        // roman numeral (Nl).
        for ch in [
            '\u{0947}', '\u{093E}', 'Ⓐ', 'Ⅻ', '1', ' ', '_', '\u{0301}', '😀',
        ] {
            assert!(!is_letter(ch), "{ch:?}");
        }
    }

    #[test]
    fn gpt2_splits() {
        let p = PreTokenizer::Gpt2;
        assert_eq!(pieces(p, "Hello world"), ["Hello", " world"]);
        assert_eq!(pieces(p, "a   b"), ["a", "  ", " b"]);
        assert_eq!(pieces(p, "a   "), ["a", "   "]);
        assert_eq!(pieces(p, "a\tb"), ["a", "\t", "b"]);
        assert_eq!(pieces(p, "a \n b"), ["a", " \n", " b"]);
        assert_eq!(
            pieces(p, "don't I'M they'll"),
            ["don", "'t", " I", "'", "M", " they", "'ll"]
        );
        assert_eq!(pieces(p, "x!!'s 12ab"), ["x", "!!'", "s", " 12", "ab"]);
        assert_eq!(pieces(p, ""), Vec::<&str>::new());
    }

    #[test]
    fn digits_gpt2_isolates_each_digit() {
        let p = PreTokenizer::DigitsGpt2;
        assert_eq!(pieces(p, "a 123b"), ["a", " ", "1", "2", "3", "b"]);
        assert_eq!(pieces(p, "3.14"), ["3", ".", "1", "4"]);
    }

    #[test]
    fn llama3_splits() {
        let p = PreTokenizer::Llama3;
        assert_eq!(
            pieces(p, "I'M 1234567"),
            ["I", "'M", " ", "123", "456", "7"]
        );
        assert_eq!(pieces(p, "(word\tx"), ["(word", "\tx"]);
        assert_eq!(pieces(p, "a  \n  x"), ["a", "  \n", " ", " x"]);
        assert_eq!(pieces(p, "!!\n\nx"), ["!!\n\n", "x"]);
        assert_eq!(pieces(p, "a 'sup"), ["a", " '", "sup"]);
        assert_eq!(
            pieces(PreTokenizer::Qwen2, "x 123"),
            ["x", " ", "1", "2", "3"]
        );
    }

    #[test]
    fn unknown_family_is_an_error() {
        assert!(matches!(
            PreTokenizer::from_name(Some("nope")),
            Err(TokenizerError::UnknownPreTokenizer(name)) if name == "nope"
        ));
        assert_eq!(PreTokenizer::from_name(None).unwrap(), PreTokenizer::Gpt2);
    }
}
