//! Tier 1: what COLTRANE knows about a vocabulary, built once per tokenizer from the tokens'
//! bytes and kept apart from any sequence's state (as llguidance keeps `toktrie` apart from its
//! parser): a byte trie of the tokens, each token's pitch class and fold cost, and a bitset per
//! class, so that most of a mask is word-wide bit operations.

use crate::bitset::TokenSet;
use crate::fold::{fold_cost, FoldCost};

/// How a token decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// Text: its bytes are what it decodes to.
    Text,
    /// Control, user-defined and unused tokens (`<|im_start|>`, `<bos>`, …): never part of
    /// constrained text; end-of-text ids are handled apart.
    Special,
    /// A byte-fallback token (`<0xNN>`): one raw byte.
    Byte,
}

/// A token's lexical class (its "pitch").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pitch {
    Space,
    Newline,
    WordStart,
    WordContinuation,
    Digit,
    SentenceEnd,
    Punctuation,
    Open,
    Close,
    Quote,
    Special,
    ByteFallback,
}

pub const PITCHES: [Pitch; 12] = [
    Pitch::Space,
    Pitch::Newline,
    Pitch::WordStart,
    Pitch::WordContinuation,
    Pitch::Digit,
    Pitch::SentenceEnd,
    Pitch::Punctuation,
    Pitch::Open,
    Pitch::Close,
    Pitch::Quote,
    Pitch::Special,
    Pitch::ByteFallback,
];

impl Pitch {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The class of a token from its kind and bytes.
pub fn pitch_of(kind: TokenKind, bytes: &[u8]) -> Pitch {
    match kind {
        TokenKind::Special => return Pitch::Special,
        TokenKind::Byte => return Pitch::ByteFallback,
        TokenKind::Text => {}
    }
    let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    if bytes.is_empty() {
        return Pitch::Special;
    }
    if bytes.iter().all(|&b| ws(b)) {
        return match bytes.contains(&b'\n') {
            true => Pitch::Newline,
            false => Pitch::Space,
        };
    }
    let lead = bytes.iter().take_while(|&&b| ws(b)).count();
    let first = bytes[lead];
    let letter = |b: u8| b.is_ascii_alphabetic() || b >= 0x80;
    match first {
        b'0'..=b'9' => Pitch::Digit,
        b'.' | b'!' | b'?' => Pitch::SentenceEnd,
        b'(' | b'[' | b'{' => Pitch::Open,
        b')' | b']' | b'}' => Pitch::Close,
        b'"' => Pitch::Quote,
        b if letter(b) && lead > 0 => Pitch::WordStart,
        b if letter(b) => Pitch::WordContinuation,
        _ => Pitch::Punctuation,
    }
}

/// The tokens as a byte trie in preorder: node `i`'s subtree is `i..i + size[i]`, its children
/// follow it, so a walk that finds a prefix dead skips the whole subtree in one step.
#[derive(Debug)]
pub struct Trie {
    /// The byte on the edge into each node (node 0 is the root).
    pub byte: Vec<u8>,
    pub depth: Vec<u16>,
    pub size: Vec<u32>,
    /// Tokens ending at node i: `ids[first[i]..first[i + 1]]`.
    first: Vec<u32>,
    ids: Vec<u32>,
}

impl Trie {
    fn build(tokens: &[(u32, &[u8])]) -> Trie {
        let mut order: Vec<&(u32, &[u8])> = tokens.iter().filter(|t| !t.1.is_empty()).collect();
        order.sort_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(&b.0)));
        let mut t = Trie {
            byte: vec![0],
            depth: vec![0],
            size: vec![0],
            first: vec![0],
            ids: Vec::new(),
        };
        // The current path: node indices of the previous token's bytes.
        let mut path: Vec<usize> = vec![0];
        let mut prev: &[u8] = &[];
        let close = |t: &mut Trie, node: usize| t.size[node] = (t.byte.len() - node) as u32;
        for &&(id, bytes) in &order {
            let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            while path.len() > common + 1 {
                let node = path.pop().unwrap_or(0);
                close(&mut t, node);
            }
            for (d, &b) in bytes.iter().enumerate().skip(common) {
                t.byte.push(b);
                t.depth.push((d + 1).min(u16::MAX as usize) as u16);
                t.size.push(0);
                t.first.push(t.ids.len() as u32);
                path.push(t.byte.len() - 1);
            }
            // Token ids end at the last node on the path; all of a node's ids are adjacent
            // because the order is sorted.
            t.ids.push(id);
            prev = bytes;
        }
        while let Some(node) = path.pop() {
            close(&mut t, node);
        }
        t.first.push(t.ids.len() as u32);
        // `first[i]` was recorded when node i was created, before its ids were pushed: the ids
        // of node i are those pushed between its creation and the next node's creation.
        t
    }

    pub fn len(&self) -> usize {
        self.byte.len()
    }

    pub fn is_empty(&self) -> bool {
        self.byte.len() <= 1
    }

    /// The tokens whose bytes end at node `i`.
    pub fn tokens_at(&self, i: usize) -> &[u32] {
        &self.ids[self.first[i] as usize..self.first[i + 1] as usize]
    }

    /// The tokens of node `i`'s subtree (those whose bytes start with its prefix), in preorder:
    /// `below(i)` is `tokens()[below(i)]`.
    pub fn below(&self, i: usize) -> std::ops::Range<usize> {
        self.first[i] as usize..self.first[i + self.size[i] as usize] as usize
    }

    /// Every token of the trie, in preorder (by bytes).
    pub fn tokens(&self) -> &[u32] {
        &self.ids
    }
}

/// `Vocab::content_below` flags: a subtree holds a string-safe token, a string-unsafe one.
pub const SAFE_BELOW: u8 = 1;
pub const UNSAFE_BELOW: u8 = 2;

/// What COLTRANE knows about a vocabulary.
#[derive(Debug)]
pub struct Vocab {
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    kinds: Vec<TokenKind>,
    eos: Vec<u32>,
    /// pitch_class_table: each token's class.
    pitch: Vec<Pitch>,
    /// The tokens of each class, indexed by `Pitch::index`.
    classes: Vec<TokenSet>,
    /// fold_cost_table: each token's effect on brackets and quotes (identity for most).
    folds: Vec<FoldCost>,
    /// Tokens that touch no bracket, quote or backslash: their fold cost is the identity.
    neutral: TokenSet,
    /// The others (text tokens whose fold cost is not the identity), for the fold mask to check.
    structural: Vec<u32>,
    /// Text and byte tokens (what constrained output may contain), end-of-text excluded.
    text: TokenSet,
    eos_set: TokenSet,
    trie: Trie,
    /// Text tokens that are plain JSON string content wherever they fall: complete UTF-8
    /// without `"`, `\` or control characters. Inside a string they change nothing, so a
    /// string's mask is these plus a walk of `string_unsafe` (the others, a small trie).
    string_safe: TokenSet,
    string_unsafe: Trie,
    /// Per node of `trie`: whether its subtree holds string-safe tokens (`SAFE_BELOW`) and
    /// others (`UNSAFE_BELOW`), so a walk that reaches a free string inside a token can take the
    /// safe ones at once and visit only the subtrees that hold the others.
    content_below: Vec<u8>,
    max_token_len: usize,
}

/// Whether `bytes` can sit anywhere inside a JSON string without changing its state.
fn string_safe(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && std::str::from_utf8(bytes).is_ok()
        && !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VocabError {
    #[error("the vocabulary is empty")]
    Empty,
    #[error("the vocabulary has {0} tokens, more than u32 ids can name")]
    TooLarge(usize),
    #[error("end-of-text id {id} is outside the vocabulary of {size}")]
    EosOutOfRange { id: u32, size: usize },
}

impl Vocab {
    /// Indexes a vocabulary given each token's kind and bytes (what it decodes to), and the
    /// model's end-of-text ids.
    pub fn new<'a>(
        tokens: impl IntoIterator<Item = (TokenKind, &'a [u8])>,
        eos_ids: &[u32],
    ) -> Result<Vocab, VocabError> {
        let mut bytes = Vec::new();
        let mut offsets = vec![0u32];
        let mut kinds = Vec::new();
        for (kind, b) in tokens {
            bytes.extend_from_slice(b);
            offsets.push(bytes.len().min(u32::MAX as usize) as u32);
            kinds.push(kind);
        }
        let n = kinds.len();
        if n == 0 {
            return Err(VocabError::Empty);
        }
        if u32::try_from(n).is_err() || u32::try_from(bytes.len()).is_err() {
            return Err(VocabError::TooLarge(n));
        }
        if let Some(&id) = eos_ids.iter().find(|&&id| id as usize >= n) {
            return Err(VocabError::EosOutOfRange { id, size: n });
        }
        let token = |i: usize| &bytes[offsets[i] as usize..offsets[i + 1] as usize];
        let mut eos_set = TokenSet::empty(n);
        for &id in eos_ids {
            eos_set.insert(id);
        }
        let mut classes: Vec<TokenSet> = PITCHES.iter().map(|_| TokenSet::empty(n)).collect();
        let mut pitch = Vec::with_capacity(n);
        let mut folds = Vec::with_capacity(n);
        let mut neutral = TokenSet::empty(n);
        let mut structural = Vec::new();
        let mut text = TokenSet::empty(n);
        let mut trie_tokens = Vec::new();
        let mut max_token_len = 0;
        for (i, &kind) in kinds.iter().enumerate() {
            let id = i as u32;
            let b = token(i);
            let p = pitch_of(kind, b);
            pitch.push(p);
            classes[p.index()].insert(id);
            let f = match kind {
                TokenKind::Special => FoldCost::NEUTRAL,
                _ => fold_cost(b),
            };
            if f.is_neutral() {
                neutral.insert(id);
            } else {
                structural.push(id);
            }
            folds.push(f);
            if kind != TokenKind::Special && !b.is_empty() && !eos_set.contains(id) {
                text.insert(id);
                trie_tokens.push((id, b));
                max_token_len = max_token_len.max(b.len());
            }
        }
        let trie = Trie::build(&trie_tokens);
        let mut safe = TokenSet::empty(n);
        let mut unsafe_tokens = Vec::new();
        for &(id, b) in &trie_tokens {
            match string_safe(b) {
                true => safe.insert(id),
                false => unsafe_tokens.push((id, b)),
            }
        }
        let string_unsafe = Trie::build(&unsafe_tokens);
        drop(unsafe_tokens);
        drop(trie_tokens);
        let content_below = content_below(&trie, &safe);
        Ok(Vocab {
            trie,
            bytes,
            offsets,
            kinds,
            eos: eos_ids.to_vec(),
            pitch,
            classes,
            folds,
            neutral,
            structural,
            text,
            eos_set,
            string_safe: safe,
            string_unsafe,
            content_below,
            max_token_len,
        })
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    pub fn token_bytes(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match self.offsets.get(i..i + 2) {
            Some(&[a, b]) => &self.bytes[a as usize..b as usize],
            _ => &[],
        }
    }

    pub fn kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    pub fn pitch(&self, id: u32) -> Option<Pitch> {
        self.pitch.get(id as usize).copied()
    }

    pub fn pitch_class_table(&self) -> &[Pitch] {
        &self.pitch
    }

    pub fn class(&self, p: Pitch) -> &TokenSet {
        &self.classes[p.index()]
    }

    pub fn fold_cost_table(&self) -> &[FoldCost] {
        &self.folds
    }

    pub fn fold(&self, id: u32) -> FoldCost {
        self.folds
            .get(id as usize)
            .copied()
            .unwrap_or(FoldCost::NEUTRAL)
    }

    pub fn neutral(&self) -> &TokenSet {
        &self.neutral
    }

    pub fn structural(&self) -> &[u32] {
        &self.structural
    }

    pub fn text(&self) -> &TokenSet {
        &self.text
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.eos
    }

    pub fn eos(&self) -> &TokenSet {
        &self.eos_set
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_set.contains(id)
    }

    pub fn trie(&self) -> &Trie {
        &self.trie
    }

    pub fn string_safe(&self) -> &TokenSet {
        &self.string_safe
    }

    /// The trie of the text tokens that are not string-safe.
    pub fn string_unsafe_trie(&self) -> &Trie {
        &self.string_unsafe
    }

    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    /// `SAFE_BELOW` | `UNSAFE_BELOW` for node `i` of `trie()`.
    #[inline]
    pub fn content_below(&self, i: usize) -> u8 {
        self.content_below[i]
    }
}

/// Per trie node, which kinds of tokens (string-safe or not) its subtree holds: each token marks
/// its node and the ancestors not yet marked with its kind.
fn content_below(trie: &Trie, safe: &TokenSet) -> Vec<u8> {
    let mut flags = vec![0u8; trie.len()];
    let mut path = vec![
        0usize;
        trie.depth
            .iter()
            .map(|&d| d as usize + 1)
            .max()
            .unwrap_or(1)
    ];
    for i in 1..trie.len() {
        let d = trie.depth[i] as usize;
        path[d] = i;
        for &id in trie.tokens_at(i) {
            let kind = if safe.contains(id) {
                SAFE_BELOW
            } else {
                UNSAFE_BELOW
            };
            for &node in path[..=d].iter().rev() {
                if flags[node] & kind != 0 {
                    break;
                }
                flags[node] |= kind;
            }
        }
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&str]) -> Vocab {
        Vocab::new(tokens.iter().map(|t| (TokenKind::Text, t.as_bytes())), &[]).unwrap()
    }

    #[test]
    fn pitch_classes() {
        let cases = [
            (" ", Pitch::Space),
            ("\n\n", Pitch::Newline),
            (" the", Pitch::WordStart),
            ("ing", Pitch::WordContinuation),
            (" 42", Pitch::Digit),
            (".", Pitch::SentenceEnd),
            ("?\n", Pitch::SentenceEnd),
            (",", Pitch::Punctuation),
            (" (", Pitch::Open),
            ("})", Pitch::Close),
            ("\"", Pitch::Quote),
            (" é", Pitch::WordStart),
        ];
        for (t, p) in cases {
            assert_eq!(pitch_of(TokenKind::Text, t.as_bytes()), p, "{t:?}");
        }
        assert_eq!(pitch_of(TokenKind::Special, b"<s>"), Pitch::Special);
        assert_eq!(pitch_of(TokenKind::Byte, &[0xe2]), Pitch::ByteFallback);
    }

    #[test]
    fn trie_in_preorder_with_subtree_sizes() {
        let v = vocab(&["ab", "a", "b", "abc", "ab", "", "ba"]);
        let t = v.trie();
        // root, a, ab, abc, b, ba
        assert_eq!(t.byte, [0, b'a', b'b', b'c', b'b', b'a']);
        assert_eq!(t.depth, [0, 1, 2, 3, 1, 2]);
        assert_eq!(t.size, [6, 3, 2, 1, 2, 1]);
        assert_eq!(t.tokens_at(1), [1]);
        assert_eq!(t.tokens_at(2), [0, 4]);
        assert_eq!(t.tokens_at(3), [3]);
        assert_eq!(t.tokens_at(5), [6]);
        assert!(t.tokens_at(0).is_empty());
        assert_eq!(v.max_token_len(), 3);
        // The empty token is not text.
        assert!(!v.text().contains(5));
    }

    #[test]
    fn class_sets_and_eos() {
        let v = Vocab::new(
            [
                (TokenKind::Text, &b"("[..]),
                (TokenKind::Text, b" hi"),
                (TokenKind::Special, b"<eos>"),
                (TokenKind::Byte, &[0x80][..]),
            ],
            &[2],
        )
        .unwrap();
        assert!(v.class(Pitch::Open).contains(0));
        assert!(v.class(Pitch::WordStart).contains(1));
        assert!(v.is_eos(2) && !v.text().contains(2));
        assert!(v.text().contains(3));
        assert!(v.neutral().contains(1) && !v.neutral().contains(0));
        assert_eq!(
            Vocab::new([(TokenKind::Text, &b"a"[..])], &[3]).unwrap_err(),
            VocabError::EosOutOfRange { id: 3, size: 1 }
        );
        assert_eq!(
            Vocab::new(std::iter::empty(), &[]).unwrap_err(),
            VocabError::Empty
        );
    }
}
