//! The schema matcher as a lazily built DFA: each distinct matcher state (its set of threads) is
//! interned once and gets an id; transitions are computed on first use and kept in a 256-entry
//! row per state. A token mask is a walk of the vocabulary's byte trie from the current state
//! that skips every subtree whose prefix is already dead, and masks are cached per state: a
//! document revisits the same few states (inside a string, after a member, …) again and again,
//! so most steps copy a cached mask.
//!
//! Budget-aware closing: a state knows the fewest bytes that finish the document from it
//! (`Thread::close_bytes`, exact), and every byte of it can be written by a single-byte token, so
//! with `r` tokens left a token is allowed only if the document can still be finished in the
//! `r − 1` after it.

use crate::bitset::TokenSet;
use crate::machine::{Chars, Frame, Thread, DIVERGED};
use crate::schema::{Schema, Shape, INF};
use crate::vocab::{Trie, Vocab};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

pub type StateId = u32;
pub const DEAD: StateId = u32::MAX;
const UNKNOWN: StateId = u32::MAX - 1;

/// Transition rows kept at once (1 KiB each); past this the rows are dropped and rebuilt.
const MAX_ROWS: usize = 4096;
/// Bytes of cached masks kept at once (a matcher may be shared by later generations, so its
/// caches stay bounded: this plus the rows is about 12 MiB at most).
const MASK_CACHE_BYTES: usize = 8 << 20;

struct State {
    threads: Arc<[Thread]>,
    can_end: bool,
    close: u32,
    /// Inside a string whose content does not change the state (no length left to count):
    /// string-safe tokens loop back here.
    free_string: bool,
}

struct CachedMask {
    set: TokenSet,
    /// The largest closing cost among the allowed tokens' end states: with at least this many
    /// tokens left after the next one, no budget can bind.
    max_close: u32,
    /// Steps since it was last used, for eviction.
    stamp: u64,
}

/// What a mask computation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaskInfo {
    pub cached: bool,
    /// The budget bound: some tokens were dropped so the document still fits.
    pub budget_bound: bool,
    /// Even the cheapest tokens cannot finish the document within the budget.
    pub over_budget: bool,
}

pub struct Dfa {
    schema: Schema,
    states: Vec<State>,
    index: HashMap<Arc<[Thread]>, StateId>,
    rows: Vec<Option<Box<[StateId; 256]>>>,
    row_count: usize,
    masks: HashMap<StateId, CachedMask>,
    clock: u64,
    scratch: Vec<Thread>,
    budget_buf: TokenSet,
}

impl Dfa {
    pub fn new(schema: Schema) -> Dfa {
        let start = vec![Thread::start(&schema)];
        let mut dfa = Dfa {
            schema,
            states: Vec::new(),
            index: HashMap::new(),
            rows: Vec::new(),
            row_count: 0,
            masks: HashMap::new(),
            clock: 0,
            scratch: Vec::new(),
            budget_buf: TokenSet::default(),
        };
        dfa.intern(start);
        dfa
    }

    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    pub fn start(&self) -> StateId {
        0
    }

    pub fn states(&self) -> usize {
        self.states.len()
    }

    pub fn can_end(&self, s: StateId) -> bool {
        self.states.get(s as usize).is_some_and(|st| st.can_end)
    }

    /// Fewest bytes that finish the document from `s`.
    pub fn close(&self, s: StateId) -> u32 {
        self.states.get(s as usize).map_or(INF, |st| st.close)
    }

    fn intern(&mut self, mut threads: Vec<Thread>) -> StateId {
        threads.sort();
        threads.dedup();
        if threads.is_empty() {
            return DEAD;
        }
        let threads: Arc<[Thread]> = threads.into();
        if let Some(&id) = self.index.get(&threads) {
            return id;
        }
        let id = self.states.len() as StateId;
        let schema = &self.schema;
        let free_string = threads.iter().all(|t| in_free_string(schema, t));
        self.states.push(State {
            free_string,
            can_end: threads.iter().any(|t| t.can_end(schema)),
            close: threads
                .iter()
                .map(|t| t.close_bytes(schema))
                .min()
                .unwrap_or(INF),
            threads: threads.clone(),
        });
        self.rows.push(None);
        self.index.insert(threads, id);
        id
    }

    /// The state after byte `b` from `s` (`DEAD` if no thread survives).
    #[inline]
    pub fn next(&mut self, s: StateId, b: u8) -> StateId {
        if let Some(Some(row)) = self.rows.get(s as usize) {
            let t = row[b as usize];
            if t != UNKNOWN {
                return t;
            }
        }
        self.compute(s, b)
    }

    #[cold]
    fn compute(&mut self, s: StateId, b: u8) -> StateId {
        let Some(state) = self.states.get(s as usize) else {
            return DEAD;
        };
        let threads = state.threads.clone();
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        for t in threads.iter() {
            t.clone().step(&self.schema, b, &mut out);
        }
        let next = self.intern(std::mem::take(&mut out));
        self.scratch = out;
        if self.rows[s as usize].is_none() {
            if self.row_count >= MAX_ROWS {
                // Drop every row; they are rebuilt as the walk needs them.
                self.rows.iter_mut().for_each(|r| *r = None);
                self.row_count = 0;
            }
            self.rows[s as usize] = Some(Box::new([UNKNOWN; 256]));
            self.row_count += 1;
        }
        if let Some(row) = self.rows[s as usize].as_mut() {
            row[b as usize] = next;
        }
        next
    }

    /// The state after `bytes` from `s`.
    pub fn walk(&mut self, mut s: StateId, bytes: &[u8]) -> StateId {
        for &b in bytes {
            if s == DEAD {
                break;
            }
            s = self.next(s, b);
        }
        s
    }

    /// The tokens that keep the document valid from `s` (and, with `remaining` tokens left
    /// including this one, finishable in time), end-of-text when the document may end. Writes
    /// them into `out`.
    pub fn mask(
        &mut self,
        vocab: &Vocab,
        s: StateId,
        remaining: Option<usize>,
        out: &mut TokenSet,
    ) -> MaskInfo {
        let (set, info) = self.mask_ref(vocab, s, remaining);
        out.copy_from(set);
        info
    }

    /// [`Dfa::mask`] without a copy: the cached mask itself (or, when the budget binds, a
    /// buffer of the DFA's).
    pub fn mask_ref(
        &mut self,
        vocab: &Vocab,
        s: StateId,
        remaining: Option<usize>,
    ) -> (&TokenSet, MaskInfo) {
        self.clock += 1;
        let after = remaining.map(|r| r.saturating_sub(1) as u64);
        let mut info = MaskInfo::default();
        let binds = |max_close: u32| after.is_some_and(|a| (max_close as u64) > a);
        let max_close = match self.masks.get_mut(&s) {
            Some(c) => {
                c.stamp = self.clock;
                info.cached = true;
                c.max_close
            }
            None => {
                let mut set = TokenSet::empty(vocab.len());
                let max_close = self.walk_trie(vocab, s, None, &mut set);
                self.remember(s, set, max_close);
                max_close
            }
        };
        if !binds(max_close) && self.masks.contains_key(&s) {
            return (&self.masks[&s].set, info);
        }
        // The budget binds: only tokens after which the document still fits.
        info.cached = false;
        info.budget_bound = true;
        let mut out = std::mem::take(&mut self.budget_buf);
        out.clear();
        if out.universe() != vocab.len() {
            out = TokenSet::empty(vocab.len());
        }
        self.walk_trie(vocab, s, after, &mut out);
        let only_eos = out.iter().all(|id| vocab.is_eos(id));
        if out.is_empty() || (only_eos && !self.can_end(s)) {
            // The required parts do not fit: keep to the tokens that close fastest.
            info.over_budget = true;
            let fastest = self.cheapest_close(vocab, s);
            out.clear();
            self.walk_trie(vocab, s, Some(fastest), &mut out);
        }
        self.budget_buf = out;
        (&self.budget_buf, info)
    }

    /// A mask of the end-of-text tokens alone (what a dead matcher allows).
    pub fn eos_only(&mut self, vocab: &Vocab) -> &TokenSet {
        let mut out = std::mem::take(&mut self.budget_buf);
        if out.universe() != vocab.len() {
            out = TokenSet::empty(vocab.len());
        }
        out.clear();
        for &id in vocab.eos_ids() {
            out.insert(id);
        }
        self.budget_buf = out;
        &self.budget_buf
    }

    fn remember(&mut self, s: StateId, set: TokenSet, max_close: u32) {
        let per_mask = set.words().len() * 8 + 64;
        let room = (MASK_CACHE_BYTES / per_mask).max(4);
        if self.masks.len() >= room {
            // Evict the least recently used quarter.
            let mut stamps: Vec<u64> = self.masks.values().map(|c| c.stamp).collect();
            stamps.sort_unstable();
            let cut = stamps[stamps.len() / 4];
            self.masks.retain(|_, c| c.stamp > cut);
        }
        self.masks.insert(
            s,
            CachedMask {
                set,
                max_close,
                stamp: self.clock,
            },
        );
    }

    /// The lowest closing cost any single token can reach from `s`.
    fn cheapest_close(&mut self, vocab: &Vocab, s: StateId) -> u64 {
        let mut best = u64::MAX;
        self.visit(vocab, s, |_, close| best = best.min(close as u64));
        best
    }

    /// Adds the tokens allowed from `s` (their end state's closing cost within `limit`, if
    /// any) to `out`; returns the largest closing cost among them.
    fn walk_trie(
        &mut self,
        vocab: &Vocab,
        s: StateId,
        limit: Option<u64>,
        out: &mut TokenSet,
    ) -> u32 {
        let mut max_close = 0u32;
        self.visit(vocab, s, |ids, close| {
            if limit.is_none_or(|l| close as u64 <= l) {
                for &id in ids {
                    out.insert(id);
                }
                max_close = max_close.max(close);
            }
        });
        if self.can_end(s) {
            for &id in vocab.eos_ids() {
                out.insert(id);
            }
        }
        max_close
    }

    /// Calls `f(tokens, closing cost)` for every trie node reachable from `s` that ends tokens.
    /// Inside a free string the string-safe tokens are known to loop back to `s`: they are
    /// reported at once and only the other tokens' (much smaller) trie is walked.
    fn visit(&mut self, vocab: &Vocab, s: StateId, mut f: impl FnMut(&[u32], u32)) {
        if self.states.get(s as usize).is_some_and(|st| st.free_string) {
            let safe: Vec<u32> = vocab.string_safe().iter().collect();
            f(&safe, self.close(s));
            self.walk_from(vocab.string_unsafe_trie(), vocab, s, f);
        } else {
            self.walk_from(vocab.trie(), vocab, s, f);
        }
    }

    fn walk_from(
        &mut self,
        trie: &Trie,
        vocab: &Vocab,
        s: StateId,
        mut f: impl FnMut(&[u32], u32),
    ) {
        let mut at = vec![DEAD; vocab.max_token_len() + 1];
        at[0] = s;
        let n = trie.len();
        let mut i = 1;
        while i < n {
            let d = trie.depth[i] as usize;
            let next = self.next(at[d - 1], trie.byte[i]);
            if next == DEAD {
                i += trie.size[i] as usize;
                continue;
            }
            at[d] = next;
            let ids = trie.tokens_at(i);
            if !ids.is_empty() {
                f(ids, self.close(next));
            }
            i += 1;
        }
    }
}

/// Whether `t` is inside a string whose further content leaves the state as it is: a value
/// string with no length bound left to count, or a key that matches no declared property.
fn in_free_string(schema: &Schema, t: &Thread) -> bool {
    match t.frames.last() {
        Some(&Frame::Str {
            node,
            len,
            chars: Chars::Plain,
            re,
            ..
        }) => match schema.shape(node) {
            Shape::String {
                min_len,
                max_len,
                pattern,
            } => {
                *max_len == u32::MAX
                    && len >= *min_len
                    && pattern.as_ref().is_none_or(|p| p.free(re))
            }
            Shape::Any => true,
            _ => false,
        },
        Some(&Frame::Key {
            at: DIVERGED,
            chars: Chars::Plain,
            ..
        }) => true,
        _ => false,
    }
}

/// A matcher shared by every sequence constrained by the same preset over one vocabulary: its
/// interned states, transition rows and cached masks carry over from one generation to the next
/// (a server answering the same `response_format` again and again starts warm).
pub type SharedDfa = Arc<Mutex<Dfa>>;

/// Locks a shared matcher (nothing panics while holding it, but a poisoned lock is still
/// usable: the DFA only ever gains states).
pub fn lock(dfa: &SharedDfa) -> MutexGuard<'_, Dfa> {
    dfa.lock().unwrap_or_else(|e| e.into_inner())
}

/// The matchers of one vocabulary, by preset; the least recently used beyond `MAX_MATCHERS`
/// are dropped.
#[derive(Debug, Default)]
pub struct MatcherCache {
    entries: Mutex<Vec<(String, SharedDfa)>>,
}

/// Matchers kept per vocabulary (each at most ~12 MiB).
const MAX_MATCHERS: usize = 2;

impl std::fmt::Debug for Dfa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dfa")
            .field("states", &self.states.len())
            .finish()
    }
}

impl MatcherCache {
    /// The matcher for `key` (a canonical spelling of the preset), made by `make` if absent.
    pub fn get_or_make<E>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<Dfa, E>,
    ) -> Result<SharedDfa, E> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = entries.iter().position(|(k, _)| k == key) {
            let entry = entries.remove(i);
            let dfa = entry.1.clone();
            entries.push(entry);
            return Ok(dfa);
        }
        let dfa = Arc::new(Mutex::new(make()?));
        if entries.len() >= MAX_MATCHERS {
            entries.remove(0);
        }
        entries.push((key.to_string(), dfa.clone()));
        Ok(dfa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::TokenKind;
    use serde_json::json;

    fn vocab(tokens: &[&str]) -> Vocab {
        let mut all: Vec<(TokenKind, &[u8])> = tokens
            .iter()
            .map(|t| (TokenKind::Text, t.as_bytes()))
            .collect();
        all.push((TokenKind::Special, b"<eos>"));
        Vocab::new(all, &[tokens.len() as u32]).unwrap()
    }

    fn ids(v: &Vocab, set: &TokenSet) -> Vec<String> {
        set.iter()
            .map(|id| String::from_utf8_lossy(v.token_bytes(id)).into_owned())
            .map(|t| if t.is_empty() { "<eos>".into() } else { t })
            .collect()
    }

    #[test]
    fn masks_follow_the_document() {
        let v = vocab(&[
            "{", "}", "\"", "a", "\":", " 1", "1", "}\n", "{\"", "\"a\":", ",", "x",
        ]);
        let mut dfa = Dfa::new(Schema::any());
        let mut m = TokenSet::empty(v.len());
        let s = dfa.start();
        dfa.mask(&v, s, None, &mut m);
        // `":` opens a string that holds a colon.
        assert_eq!(ids(&v, &m), ["{", "\"", "\":", " 1", "1", "{\""]);
        let s = dfa.walk(s, b"{");
        dfa.mask(&v, s, None, &mut m);
        // `":` is the empty key and its colon.
        assert_eq!(ids(&v, &m), ["}", "\"", "\":", "}\n", "\"a\":"]);
        let s = dfa.walk(s, b"\"a\":1}");
        dfa.mask(&v, s, None, &mut m);
        assert_eq!(ids(&v, &m), ["<eos>"]);
        // Cached the second time.
        assert!(dfa.mask(&v, s, None, &mut m).cached);
    }

    #[test]
    fn the_budget_closes_the_document() {
        let v = vocab(&["[", "]", "1", ",", "[1", "1,", "11111"]);
        let mut dfa = Dfa::new(
            crate::compile_schema(&json!({"type": "array", "items": {"type": "integer"}})).unwrap(),
        );
        let mut m = TokenSet::empty(v.len());
        let s = dfa.walk(dfa.start(), b"[1,[");
        // Nested arrays are not integers: `[` after the comma is dead.
        assert_eq!(s, DEAD);
        let s = dfa.walk(dfa.start(), b"[1,");
        // Two tokens left: an integer, then `]`.
        let info = dfa.mask(&v, s, Some(2), &mut m);
        assert!(info.budget_bound);
        assert_eq!(ids(&v, &m), ["1", "11111"]);
        let s = dfa.walk(s, b"1");
        dfa.mask(&v, s, Some(1), &mut m);
        assert_eq!(ids(&v, &m), ["]"]);
        // Plenty left: everything valid.
        dfa.mask(&v, s, Some(100), &mut m);
        assert_eq!(ids(&v, &m), ["]", "1", ",", "1,", "11111"]);
    }

    #[test]
    fn required_parts_that_cannot_fit_are_reported() {
        let v = vocab(&["{", "}", "\"", "a", ":", "0"]);
        let schema = crate::compile_schema(
            &json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
        )
        .unwrap();
        let mut dfa = Dfa::new(schema);
        let mut m = TokenSet::empty(v.len());
        // `{"a":0}` needs 7 single-byte tokens; 3 are left.
        let info = dfa.mask(&v, dfa.start(), Some(3), &mut m);
        assert!(info.over_budget);
        assert_eq!(ids(&v, &m), ["{"]);
    }
}
