//! The KV caches of a host and the conversations they keep (prefix windows). There are
//! `maxSequences + prefixWindows` caches: each is lent to a running sequence, or parked with the
//! conversation that last ran in it, for prefix reuse (`reusePrefix`) and `continue`.
//!
//! A new sequence takes the cache of the window it continues (its conversation goes on there: the
//! cache moves, nothing is copied), else a free one or the least recently used; when another
//! window holds a prefix of its prompt (a shared system prompt, a conversation that went another
//! way), that window's KV is *copied* in and the window stays for others. A sequence that ends
//! parks its conversation in the cache it ran in. So a lone conversation needs one cache, and
//! several interleaved conversations keep their prefixes as long as there are caches for them.
//! `crate::prefix` decides which window serves a prompt; this does the lending and copying.

use super::stats::{PrefixKind, PrefixReport};
use crate::prefix::{self, PrefixStatus, ReusePlan, WindowView};
use engine::kv::KvCache;
use engine::Session;

/// One cache and the conversation parked in it (none while it is lent to a sequence).
struct Window {
    kv: KvCache,
    tokens: Vec<u32>,
    /// How many of `tokens` were its prompt.
    prompt_len: usize,
    /// When it was last lent or copied from (what the least recently used is), and when its
    /// conversation ended (what `continue` continues).
    last_used: f64,
    ended_at: f64,
    /// Lent to a running sequence (`kv` is then that session's empty placeholder).
    lent: bool,
}

impl Window {
    fn view(&self) -> WindowView<'_> {
        WindowView {
            tokens: if self.lent { &[] } else { &self.tokens },
            prompt_len: self.prompt_len,
            cached: if self.lent { 0 } else { self.kv.len() },
            earliest_rewind: self.kv.earliest_rewind(),
            last_used: self.last_used,
        }
    }

    fn forget(&mut self) {
        if !self.lent {
            self.kv.clear();
        }
        self.tokens.clear();
        self.prompt_len = 0;
    }

    fn holds(&self) -> bool {
        !self.lent && !self.tokens.is_empty() && !self.kv.is_empty()
    }
}

pub(crate) struct Windows {
    held: Vec<Window>,
    /// A window not used for this long is forgotten before it would serve a prompt.
    ttl_ms: Option<f64>,
}

/// What a sequence's session was loaded with: the window its cache came from (it parks there),
/// and how its prompt used the windows.
pub(crate) struct Lent {
    pub slot: usize,
    /// The prompt's tokens now in the session's KV cache.
    pub keep: usize,
    pub report: PrefixReport,
}

impl Windows {
    /// `count` caches of `session`'s shape (allocated as they fill, or at once when `reserve`).
    pub fn new(session: &Session, count: usize, ttl_ms: Option<f64>, reserve: bool) -> Self {
        let held = (0..count)
            .map(|_| {
                let mut kv = session.new_kv();
                if reserve {
                    kv.reserve(session.max_context());
                }
                Window {
                    kv,
                    tokens: Vec::new(),
                    prompt_len: 0,
                    last_used: 0.0,
                    ended_at: 0.0,
                    lent: false,
                }
            })
            .collect();
        Windows { held, ttl_ms }
    }

    /// Forgets every parked conversation (the caches lent to sequences stay theirs).
    pub fn clear(&mut self) {
        self.held.iter_mut().for_each(Window::forget);
    }

    /// Bytes the parked caches have allocated (a lent cache counts in its session).
    pub fn kv_bytes(&self) -> usize {
        self.held.iter().map(|w| w.kv.bytes()).sum()
    }

    /// Caches in all, and those parked with a conversation.
    pub fn count(&self) -> usize {
        self.held.len()
    }

    pub fn in_use(&self) -> usize {
        self.held.iter().filter(|w| w.holds()).count()
    }

    /// The tokens of the conversation that ended last (what `continue` continues), if any.
    pub fn latest(&self) -> Option<&[u32]> {
        let w = self
            .held
            .iter()
            .filter(|w| w.holds())
            .max_by(|a, b| a.ended_at.total_cmp(&b.ended_at))?;
        Some(&w.tokens)
    }

    /// Lends a cache to `session` (its own is an empty placeholder) for a sequence whose whole
    /// prompt is `prompt`: with `reuse`, loaded with what the windows hold of it (moved from the
    /// window it continues, else copied from the one sharing the most); without, empty. None
    /// when every cache is lent.
    pub fn lend(
        &mut self,
        session: &mut Session,
        prompt: &[u32],
        reuse: bool,
        now: f64,
    ) -> Option<Lent> {
        let plan = match reuse {
            true => {
                let views: Vec<WindowView> = self.held.iter().map(Window::view).collect();
                prefix::plan(&views, prompt, now, self.ttl_ms)
            }
            false => ReusePlan {
                window: None,
                keep: 0,
                status: PrefixStatus::Miss,
                expired: Vec::new(),
            },
        };
        for &i in &plan.expired {
            self.held[i].forget();
        }
        // The cache it runs in: the window whose whole prompt it continues (that conversation goes
        // on here, so the window is not needed any more), else a free one or the least recently
        // used — a window it only shares a part with (an earlier turn repeated, a system prompt)
        // is copied from and stays, and is taken only when there is no other.
        let source = plan.window;
        let continued = source.filter(|&w| plan.keep >= self.held[w].prompt_len.max(1));
        let slot = match continued {
            Some(w) => w,
            None => self.free_or_oldest(source)?,
        };
        let w = &mut self.held[slot];
        w.lent = true;
        w.tokens.clear();
        w.prompt_len = 0;
        w.last_used = now;
        // Between batches a swap only fails for caches of another shape, which a host never
        // makes: the sequence then runs cold.
        if session.swap_kv(&mut w.kv).is_err() {
            session.reset();
        }
        let mut keep = 0;
        let mut status = plan.status;
        if let Some(src) = source.filter(|_| plan.keep > 0) {
            let loaded = match src == slot {
                true => Ok(()),
                false => session.load_kv(&self.held[src].kv),
            };
            if loaded.is_ok() && session.rewind(plan.keep).is_ok() {
                keep = plan.keep;
                self.held[src].last_used = now;
            } else {
                status = PrefixStatus::Miss;
            }
        }
        if keep == 0 {
            session.reset();
        }
        Some(Lent {
            slot,
            keep,
            report: PrefixReport {
                status,
                reused: keep as u64,
                prefilled: (prompt.len() - keep) as u64,
                window: source.map_or(0, |i| i + 1),
                kind: PrefixKind::Implicit,
                id: None,
            },
        })
    }

    /// A cache not lent: an empty or expired one first, then the least recently used, `avoid`
    /// (a window being copied from) only when there is no other.
    fn free_or_oldest(&self, avoid: Option<usize>) -> Option<usize> {
        let now_free = |w: &Window| !w.holds();
        (0..self.held.len())
            .filter(|&i| !self.held[i].lent)
            .min_by(|&a, &b| {
                let key = |i: usize| {
                    let w = &self.held[i];
                    (Some(i) == avoid, !now_free(w), w.last_used)
                };
                let (ka, kb) = (key(a), key(b));
                ka.0.cmp(&kb.0)
                    .then(ka.1.cmp(&kb.1))
                    .then(ka.2.total_cmp(&kb.2))
            })
    }

    /// Parks an ended sequence's conversation (`tokens`, the first `prompt_len` of them its
    /// prompt) in the cache lent to it at `slot`: the cache moves back out of `session`, which
    /// gets its placeholder again. A conversation with no positions leaves the window free.
    pub fn park(
        &mut self,
        session: &mut Session,
        slot: usize,
        tokens: &[u32],
        prompt_len: usize,
        now: f64,
    ) {
        let Some(w) = self.held.get_mut(slot).filter(|w| w.lent) else {
            session.reset();
            return;
        };
        let kept = session.position() > 0 && !tokens.is_empty();
        if session.swap_kv(&mut w.kv).is_err() {
            // Only a batch left open refuses a swap: close it and swap again.
            session.reset();
            let _ = session.swap_kv(&mut w.kv);
            w.kv.clear();
        }
        session.reset();
        w.lent = false;
        w.tokens.clear();
        w.prompt_len = 0;
        if kept && !w.kv.is_empty() {
            w.tokens.extend_from_slice(tokens);
            w.prompt_len = prompt_len.min(tokens.len());
            w.last_used = now;
            w.ended_at = now;
        } else {
            w.kv.clear();
        }
    }
}
