//! SentencePiece BPE (GGUF `tokenizer.ggml.model = "llama"`), encoded as Hugging Face's
//! GGUF-built tokenizers do it.
//!
//! Spaces become `▁` (one is prepended to the input when `add_space_prefix` is on and it does not
//! start with a space), then each character is a symbol and adjacent symbols merge, best pair
//! first, while their concatenation is a vocabulary piece. A pair's priority is its result's merge rank, then the longer left half, then the
//! leftmost position. Characters outside the vocabulary become their UTF-8 bytes as `<0xNN>`
//! tokens and never merge.
//!
//! Merge rank: SentencePiece BPE vocabularies list pieces best first, with scores falling as ids
//! rise. When the normal pieces' scores do fall that way the rank is the id (what HF uses for
//! Gemma, whose whitespace-run tokens carry placeholder scores); otherwise pieces rank by score.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::token_type::{TOKEN_TYPE_BYTE, TOKEN_TYPE_NORMAL, TOKEN_TYPE_USER_DEFINED};

/// The SentencePiece space marker.
pub const SPACE_MARK: char = '\u{2581}';

/// A free hash slot.
const EMPTY: u32 = u32::MAX;
/// No neighbouring symbol.
const NONE: usize = usize::MAX;

#[derive(Debug)]
pub struct SentencePiece {
    /// Piece strings as the merge loop sees them, concatenated; piece `i` is
    /// `piece_text[piece_offsets[i]..piece_offsets[i + 1]]`.
    piece_text: Vec<u8>,
    piece_offsets: Vec<u32>,
    /// Open-addressing hash table of piece ids (EMPTY = free slot), keyed by piece string.
    slots: Vec<u32>,
    /// Merge rank of each id (lower merges first); `None` when the rank is the id.
    ranks: Option<Vec<u32>>,
    /// Id of each byte's `<0xNN>` token.
    byte_ids: [Option<u32>; 256],
    unk_id: Option<u32>,
    add_space_prefix: bool,
}

/// Whether a GGUF token made only of spaces is an ordinary piece spelled with `▁` (HF respells
/// Gemma's user-defined `"  "`.. tokens that way, so they merge rather than match literally).
pub fn is_space_run(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b == b' ')
}

/// The byte a `<0xNN>` token stands for.
pub fn byte_token_value(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn hash(bytes: &[u8]) -> u64 {
    // FNV-1a: tiny, no allocation, good enough spread for vocabulary strings.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl SentencePiece {
    pub fn new(
        tokens: &[String],
        token_types: &[i32],
        scores: &[f32],
        unk_id: Option<u32>,
        add_space_prefix: bool,
    ) -> Result<Self, TokenizerError> {
        let n = tokens.len();
        if !scores.is_empty() && scores.len() != n {
            return Err(TokenizerError::ScoreCount {
                scores: scores.len(),
                tokens: n,
            });
        }
        let token_type = |id: usize| token_types.get(id).copied().unwrap_or(TOKEN_TYPE_NORMAL);

        let mut piece_text = Vec::with_capacity(tokens.iter().map(String::len).sum::<usize>());
        let mut piece_offsets = Vec::with_capacity(n + 1);
        piece_offsets.push(0u32);
        let mut byte_ids = [None; 256];
        for (id, token) in tokens.iter().enumerate() {
            if token_type(id) == TOKEN_TYPE_BYTE || token_types.is_empty() {
                if let Some(b) = byte_token_value(token) {
                    byte_ids[b as usize] = Some(id as u32);
                }
            }
            if token_type(id) == TOKEN_TYPE_USER_DEFINED && is_space_run(token) {
                for _ in token.chars() {
                    piece_text.extend_from_slice(SPACE_MARK.encode_utf8(&mut [0; 4]).as_bytes());
                }
            } else {
                piece_text.extend_from_slice(token.as_bytes());
            }
            let end = u32::try_from(piece_text.len())
                .map_err(|_| TokenizerError::VocabularyTooLarge(n))?;
            piece_offsets.push(end);
        }

        let capacity = (n * 2).next_power_of_two().max(16);
        let mut model = Self {
            piece_text,
            piece_offsets,
            slots: vec![EMPTY; capacity],
            ranks: None,
            byte_ids,
            unk_id,
            add_space_prefix,
        };
        for id in 0..n as u32 {
            model.insert(id);
        }
        model.ranks = merge_ranks(token_types, scores, n);
        Ok(model)
    }

    fn rank(&self, id: u32) -> u32 {
        self.ranks.as_ref().map_or(id, |ranks| ranks[id as usize])
    }

    fn piece(&self, id: u32) -> &[u8] {
        let i = id as usize;
        &self.piece_text[self.piece_offsets[i] as usize..self.piece_offsets[i + 1] as usize]
    }

    /// Adds `id`; a string listed twice resolves to its last id, as a Python dict built from the
    /// list.
    fn insert(&mut self, id: u32) {
        let mask = self.slots.len() - 1;
        let mut slot = hash(self.piece(id)) as usize & mask;
        loop {
            let current = self.slots[slot];
            if current == EMPTY || self.piece(current) == self.piece(id) {
                self.slots[slot] = id;
                return;
            }
            slot = (slot + 1) & mask;
        }
    }

    fn lookup(&self, text: &[u8]) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut slot = hash(text) as usize & mask;
        loop {
            let current = self.slots[slot];
            if current == EMPTY {
                return None;
            }
            if self.piece(current) == text {
                return Some(current);
            }
            slot = (slot + 1) & mask;
        }
    }

    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    pub fn byte_ids(&self) -> &[Option<u32>; 256] {
        &self.byte_ids
    }

    /// Encodes one stretch of text holding no literal-match tokens; `first` says whether it starts
    /// the input (where the space prefix goes).
    pub fn encode_segment(
        &self,
        text: &str,
        first: bool,
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        if text.is_empty() {
            return;
        }
        let normalized = &mut scratch.normalized;
        normalized.clear();
        // As HF's Metaspace (prepend_scheme "first"): only at the start of the input, and not
        // when the text already starts with a space.
        if self.add_space_prefix && first && !text.starts_with(' ') {
            normalized.push(SPACE_MARK);
        }
        normalized.extend(text.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));

        let symbols = &mut scratch.symbols;
        symbols.clear();
        for (start, ch) in normalized.char_indices() {
            let end = start + ch.len_utf8();
            let index = symbols.len();
            symbols.push(Symbol {
                start,
                end,
                chars: 1,
                id: self.lookup(&normalized.as_bytes()[start..end]),
                prev: index.checked_sub(1).unwrap_or(NONE),
                next: index + 1,
            });
        }
        if let Some(last) = symbols.last_mut() {
            last.next = NONE;
        }

        let heap = &mut scratch.heap;
        heap.clear();
        for left in 1..symbols.len() {
            self.push_candidate(normalized.as_bytes(), symbols, left - 1, heap);
        }
        while let Some(Reverse(candidate)) = heap.pop() {
            let left = candidate.left;
            let right = symbols[left].next;
            // Stale: a neighbour merged since this pair was queued, so the pair changed.
            if symbols[left].id.is_none()
                || right == NONE
                || symbols[left].end - symbols[left].start + symbols[right].end
                    - symbols[right].start
                    != candidate.len
                || symbols[right].start != symbols[left].end
            {
                continue;
            }
            let right_symbol = symbols[right];
            let merged = &mut symbols[left];
            merged.end = right_symbol.end;
            merged.chars += right_symbol.chars;
            merged.id = Some(candidate.id);
            merged.next = right_symbol.next;
            // Dead symbols are marked by an empty span.
            symbols[right].end = symbols[right].start;
            if right_symbol.next != NONE {
                symbols[right_symbol.next].prev = left;
                self.push_candidate(normalized.as_bytes(), symbols, left, heap);
            }
            let prev = symbols[left].prev;
            if prev != NONE {
                self.push_candidate(normalized.as_bytes(), symbols, prev, heap);
            }
        }

        let mut at = if symbols.is_empty() { NONE } else { 0 };
        let mut previous_unk = false;
        while at != NONE {
            let symbol = symbols[at];
            at = symbol.next;
            if let Some(id) = symbol.id {
                out.push(id);
                previous_unk = false;
                continue;
            }
            let bytes = &normalized.as_bytes()[symbol.start..symbol.end];
            if bytes.iter().all(|&b| self.byte_ids[b as usize].is_some()) {
                out.extend(bytes.iter().filter_map(|&b| self.byte_ids[b as usize]));
                previous_unk = false;
            } else if let Some(unk) = self.unk_id {
                // Consecutive unknowns fuse into one, as HF's BPE with `fuse_unk`.
                if !previous_unk {
                    out.push(unk);
                }
                previous_unk = true;
            }
        }
    }

    /// Queues the pair starting at symbol `left` if its concatenation is a piece.
    fn push_candidate(
        &self,
        text: &[u8],
        symbols: &[Symbol],
        left: usize,
        heap: &mut BinaryHeap<Reverse<Candidate>>,
    ) {
        let l = &symbols[left];
        if l.next == NONE || l.id.is_none() {
            return;
        }
        let r = &symbols[l.next];
        if r.id.is_none() {
            return;
        }
        if let Some(id) = self.lookup(&text[l.start..r.end]) {
            heap.push(Reverse(Candidate {
                rank: self.rank(id),
                longer_left: Reverse(l.chars),
                left,
                id,
                len: r.end - l.start,
            }));
        }
    }
}

/// Merge rank of every id: `None` (the id itself) when normal pieces' scores never rise with
/// the id, otherwise the position in (score descending, id ascending) order.
fn merge_ranks(token_types: &[i32], scores: &[f32], n: usize) -> Option<Vec<u32>> {
    let is_normal = |id: usize| token_types.get(id).is_none_or(|&t| t == TOKEN_TYPE_NORMAL);
    let mut previous: Option<f32> = None;
    let mut ordered = true;
    for (id, &score) in scores.iter().enumerate() {
        if !is_normal(id) {
            continue;
        }
        if previous.is_some_and(|p| score > p) {
            ordered = false;
            break;
        }
        previous = Some(score);
    }
    if ordered {
        return None;
    }
    let mut by_score: Vec<u32> = (0..n as u32).collect();
    by_score.sort_by(|&a, &b| {
        scores[b as usize]
            .total_cmp(&scores[a as usize])
            .then(a.cmp(&b))
    });
    let mut ranks = vec![0; n];
    for (rank, &id) in by_score.iter().enumerate() {
        ranks[id as usize] = rank as u32;
    }
    Some(ranks)
}

/// Reusable buffers for [`SentencePiece::encode_segment`].
#[derive(Debug, Default)]
pub struct Scratch {
    normalized: String,
    symbols: Vec<Symbol>,
    heap: BinaryHeap<Reverse<Candidate>>,
}

#[derive(Debug, Clone, Copy)]
struct Symbol {
    /// Byte span in the normalized text; empty once merged into its left neighbour.
    start: usize,
    end: usize,
    chars: usize,
    /// `None` for a character outside the vocabulary (byte fallback, never merges).
    id: Option<u32>,
    prev: usize,
    next: usize,
}

/// A queued merge; the derived order (rank, longer left half, leftmost) is HF's merge priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    longer_left: Reverse<usize>,
    left: usize,
    id: u32,
    /// Byte length of the pair when queued, to detect stale entries.
    len: usize,
}
