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
use crate::pattern::Pattern;
use crate::schema::{Schema, Shape, INF};
use crate::vocab::{Trie, Vocab, SAFE_BELOW, UNSAFE_BELOW};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

/// A multiply-rotate hash (rustc's Fx) for the state index: interning hashes a whole stack of
/// frames per new state, where SipHash's cost showed; nothing here is keyed by outside input
/// an attacker could aim at one bucket, beyond what a schema already costs.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Fx {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }
    fn write_u16(&mut self, v: u16) {
        self.add(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

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
    /// One thread inside a string: its stack's height (else 0), and its pattern's state. A
    /// walk from such a state is inside the string where the height is the same.
    in_string: u32,
    re: u32,
    /// The last walk that met this state inside its string (`Dfa::walks`).
    mark: u64,
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
    index: FxMap<Arc<[Thread]>, StateId>,
    rows: Vec<Option<Box<[StateId; 256]>>>,
    row_count: usize,
    masks: FxMap<StateId, CachedMask>,
    clock: u64,
    scratch: Vec<Thread>,
    budget_buf: TokenSet,
    /// Scratch of the trie walks: the state at each depth, the free-string entries found, the
    /// safe tokens they allow.
    path: Vec<StateId>,
    free_nodes: Vec<usize>,
    free_buf: TokenSet,
    /// States inside a pattern whose masks were walked, by their thread with the pattern's
    /// state blanked (`alike`).
    walked: FxMap<Thread, Vec<Walked>>,
    /// The pattern states the last walk's live tokens went through inside the string it
    /// started in, and the walk's number (for `State::mark`).
    seen: Vec<u32>,
    walks: u64,
    /// No shortcuts (`plain_walks`).
    plain: bool,
}

/// A mask walked from a state inside a pattern: the pattern's state, the matcher state, the
/// pattern states its tokens went through (sorted).
struct Walked {
    re: u32,
    state: StateId,
    seen: Box<[u32]>,
}

/// Masks kept per place, places kept at once, pattern states kept per mask: at most 2 MiB of
/// noted pattern states beside the masks themselves.
const WALKED_PER_KEY: usize = 2;
const WALKED_KEYS: usize = 64;
const WALKED_SEEN: usize = 4096;
/// Candidates compared, and pairs of pattern states per comparison, at most.
const ALIKE_TRIES: usize = 2;
const ALIKE_PAIRS: usize = 4096;

impl Dfa {
    pub fn new(schema: Schema) -> Dfa {
        let start = vec![Thread::start(&schema)];
        let mut dfa = Dfa {
            schema,
            states: Vec::new(),
            index: FxMap::default(),
            rows: Vec::new(),
            row_count: 0,
            masks: FxMap::default(),
            clock: 0,
            scratch: Vec::new(),
            budget_buf: TokenSet::default(),
            path: Vec::new(),
            free_nodes: Vec::new(),
            free_buf: TokenSet::default(),
            walked: FxMap::default(),
            seen: Vec::new(),
            walks: 0,
            plain: false,
        };
        dfa.intern(start, None);
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

    /// The state of `threads`, whose fewest closing bytes are `close` (`None`: not known yet).
    fn intern(&mut self, mut threads: Vec<Thread>, close: Option<u32>) -> StateId {
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
        let (in_string, re) = match threads.as_ref() {
            [t] => match t.frames.last() {
                Some(&Frame::Str { re, .. }) => (t.frames.len() as u32, re),
                _ => (0, 0),
            },
            _ => (0, 0),
        };
        self.states.push(State {
            free_string,
            in_string,
            re,
            mark: 0,
            can_end: threads.iter().any(|t| t.can_end(schema)),
            close: close.unwrap_or_else(|| {
                threads
                    .iter()
                    .map(|t| t.close_bytes(schema))
                    .min()
                    .unwrap_or(INF)
            }),
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
        // The closing costs `step` computes to drop dead threads are the new state's too.
        let mut close = None;
        for t in threads.iter() {
            t.clone()
                .step_closing(&self.schema, b, &mut out, &mut close);
        }
        let next = self.intern(std::mem::take(&mut out), close);
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
                let (set, max_close) = match self.alike(s) {
                    Some(shared) => shared,
                    None => {
                        let mut set = TokenSet::empty(vocab.len());
                        let max_close = self.walk_trie(vocab, s, None, &mut set);
                        self.walked(s);
                        (set, max_close)
                    }
                };
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

    /// Inside a pattern, with the rest of the thread as it is, the place (the thread, its
    /// pattern's state blanked), the pattern and its state.
    fn in_pattern(&self, s: StateId) -> Option<(Thread, &Pattern, u32)> {
        let [t] = self.states.get(s as usize)?.threads.as_ref() else {
            return None;
        };
        let Some(&Frame::Str { node, re, .. }) = t.frames.last() else {
            return None;
        };
        let pattern = self.schema.string_rules(node).2?;
        let mut key = t.clone();
        if let Some(Frame::Str { re, .. }) = key.frames.last_mut() {
            *re = 0;
        }
        Some((key, pattern, re))
    }

    /// The cached mask of a state that differs from `s` only in its pattern's state, where the
    /// two pattern states cannot be told apart along the pattern states the other's tokens went
    /// through (`same_within`): every token then lives or dies the same from both, and ends as
    /// far from closing. A string under a `maxLength` (a `uri` of at most 200 characters) is a
    /// new state at every character, but its masks repeat.
    fn alike(&mut self, s: StateId) -> Option<(TokenSet, u32)> {
        if self.plain {
            return None;
        }
        let (key, pattern, re) = self.in_pattern(s)?;
        let candidates = self.walked.get(&key)?;
        let mut pairs = FxMap::default();
        let found = candidates.iter().rev().take(ALIKE_TRIES).find(|w| {
            self.masks.contains_key(&w.state) && same_within(pattern, w.re, re, &w.seen, &mut pairs)
        })?;
        let mask = &self.masks[&found.state];
        Some((mask.set.clone(), mask.max_close))
    }

    /// Notes a walked mask of a state inside a pattern (for `alike`).
    fn walked(&mut self, s: StateId) {
        if self.plain {
            return;
        }
        let Some((key, _, re)) = self.in_pattern(s) else {
            return;
        };
        if self.walked.len() >= WALKED_KEYS && !self.walked.contains_key(&key) {
            self.walked.clear();
        }
        if self.seen.len() > WALKED_SEEN {
            return;
        }
        self.seen.sort_unstable();
        self.seen.dedup();
        let seen = self.seen.as_slice().into();
        let list = self.walked.entry(key).or_default();
        if list.len() >= WALKED_PER_KEY {
            list.remove(0);
        }
        list.push(Walked { re, state: s, seen });
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
        let mut free = std::mem::take(&mut self.free_nodes);
        free.clear();
        let safe = vocab.string_safe();
        self.visit(vocab, s, |hit, close| {
            if limit.is_none_or(|l| close as u64 <= l) {
                match hit {
                    Hit::Tokens(ids, false) => ids.iter().for_each(|&id| out.insert(id)),
                    Hit::Tokens(ids, true) => ids
                        .iter()
                        .filter(|&&id| !safe.contains(id))
                        .for_each(|&id| out.insert(id)),
                    Hit::Free(node) => free.push(node),
                }
                max_close = max_close.max(close);
            }
        });
        self.add_free(vocab, &free, out);
        self.free_nodes = free;
        if self.can_end(s) {
            for &id in vocab.eos_ids() {
                out.insert(id);
            }
        }
        max_close
    }

    /// Adds the string-safe tokens below the trie nodes `free` (in preorder, disjoint) to
    /// `out`: one by one when they are few, else as the safe set less the tokens elsewhere.
    fn add_free(&mut self, vocab: &Vocab, free: &[usize], out: &mut TokenSet) {
        let trie = vocab.trie();
        let all = trie.tokens();
        let covered: usize = free.iter().map(|&i| trie.below(i).len()).sum();
        let safe = vocab.string_safe();
        if covered * 2 <= all.len() {
            for &i in free {
                for &id in &all[trie.below(i)] {
                    if safe.contains(id) {
                        out.insert(id);
                    }
                }
            }
            return;
        }
        let mut set = std::mem::take(&mut self.free_buf);
        if set.universe() != safe.universe() {
            set = TokenSet::empty(safe.universe());
        }
        set.copy_from(safe);
        let mut from = 0;
        for &i in free {
            let below = trie.below(i);
            all[from..below.start].iter().for_each(|&id| set.remove(id));
            from = below.end;
        }
        all[from..].iter().for_each(|&id| set.remove(id));
        out.union_with(&set);
        self.free_buf = set;
    }

    /// Calls `f(hit, closing cost)` for every trie node reachable from `s` that ends tokens.
    /// Inside a free string the string-safe tokens are known to loop back: from a free `s` they
    /// are reported at once and only the other tokens' (much smaller) trie is walked; where a
    /// token's prefix enters a free string, the safe tokens below it are reported as one
    /// `Hit::Free` and only the subtrees holding other tokens are walked on.
    fn visit(&mut self, vocab: &Vocab, s: StateId, mut f: impl FnMut(Hit<'_>, u32)) {
        self.seen.clear();
        self.walks = self.walks.wrapping_add(1);
        if let Some(st) = self.states.get_mut(s as usize) {
            st.mark = self.walks;
            self.seen.push(st.re);
        }
        let free = self.states.get(s as usize).is_some_and(|st| st.free_string);
        if free && !self.plain {
            f(Hit::Free(0), self.close(s));
            self.walk_from(vocab.string_unsafe_trie(), vocab, s, false, f);
        } else {
            let shortcut = !self.plain;
            self.walk_from(vocab.trie(), vocab, s, shortcut, f);
        }
    }

    fn walk_from(
        &mut self,
        trie: &Trie,
        vocab: &Vocab,
        s: StateId,
        shortcut: bool,
        mut f: impl FnMut(Hit<'_>, u32),
    ) {
        let mut at = std::mem::take(&mut self.path);
        at.clear();
        at.resize(vocab.max_token_len() + 1, DEAD);
        at[0] = s;
        let n = trie.len();
        // Nodes before this lie below a free string's entry: only the unsafe tokens are left.
        let mut free_until = 0;
        // The string `s` is in, if it is: the pattern states inside it are noted (for `alike`).
        let origin = self.states.get(s as usize).map_or(0, |st| st.in_string);
        let walk = self.walks;
        let mut i = 1;
        while i < n {
            if i < free_until && vocab.content_below(i) & UNSAFE_BELOW == 0 {
                i += trie.size[i] as usize;
                continue;
            }
            let d = trie.depth[i] as usize;
            let next = self.next(at[d - 1], trie.byte[i]);
            if next == DEAD {
                i += trie.size[i] as usize;
                continue;
            }
            at[d] = next;
            let state = &mut self.states[next as usize];
            if origin != 0 && state.in_string == origin && state.mark != walk {
                state.mark = walk;
                self.seen.push(state.re);
            }
            let close = state.close;
            if shortcut && i >= free_until && state.free_string {
                free_until = i + trie.size[i] as usize;
                if vocab.content_below(i) & SAFE_BELOW != 0 {
                    f(Hit::Free(i), close);
                }
            }
            let ids = trie.tokens_at(i);
            if !ids.is_empty() {
                f(Hit::Tokens(ids, i < free_until), close);
            }
            i += 1;
        }
        self.path = at;
    }

    /// Walks every token through the plain trie walk, without the free-string shortcuts (the
    /// reference the shortcuts are checked against).
    #[doc(hidden)]
    pub fn plain_walks(&mut self) {
        self.plain = true;
    }
}

/// What a trie walk reports, with the end state's closing cost.
enum Hit<'a> {
    /// These tokens end here; `true`: only those not string-safe count (the safe ones came
    /// with a `Free` above).
    Tokens(&'a [u32], bool),
    /// The string-safe tokens below this node of the vocabulary's trie all end in one free
    /// string.
    Free(usize),
}

/// Whether pattern states `a` and `b` agree on every text whose pattern states from `a` are
/// among `seen`: pairs of states with the same acceptance, closing cost and freedom, the same
/// character ranges to targets that close alike, and pairs of those targets where `seen` goes
/// on. `pairs` is scratch; past `ALIKE_PAIRS` pairs the answer is no.
fn same_within(
    p: &Pattern,
    a: u32,
    b: u32,
    seen: &[u32],
    pairs: &mut FxMap<(u32, u32), ()>,
) -> bool {
    pairs.clear();
    let mut stack = vec![(a, b)];
    while let Some((a, b)) = stack.pop() {
        if a == b || pairs.contains_key(&(a, b)) {
            continue;
        }
        if pairs.len() >= ALIKE_PAIRS
            || p.accepts(a) != p.accepts(b)
            || p.close(a) != p.close(b)
            || p.free(a) != p.free(b)
        {
            return false;
        }
        pairs.insert((a, b), ());
        let (ra, rb) = (p.row(a), p.row(b));
        if ra.len() != rb.len() {
            return false;
        }
        for (&(fa, la, ta), &(fb, lb, tb)) in ra.iter().zip(rb) {
            if (fa, la) != (fb, lb) || p.close(ta) != p.close(tb) {
                return false;
            }
            if seen.binary_search(&ta).is_ok() {
                stack.push((ta, tb));
            }
        }
    }
    true
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
mod equivalence;

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
