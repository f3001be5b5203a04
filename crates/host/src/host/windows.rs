//! Prefix windows: the conversations parked for prefix reuse (`reusePrefix`). A prompt is served
//! from the window that holds the most of it — that conversation is swapped into the session and
//! rewound to what they share — so only the rest is prefilled. `crate::prefix` decides; this
//! does the swapping.

use super::conversation::Conversation;
use super::stats::{PrefixKind, PrefixReport};
use crate::prefix::{self, WindowView};
use engine::kv::KvCache;
use engine::Session;

/// A parked conversation: its KV cache and tokens.
struct Window {
    kv: KvCache,
    tokens: Vec<u32>,
    last_used: f64,
}

pub(crate) struct Windows {
    parked: Vec<Window>,
    /// A window not used for this long is forgotten before it would serve a prompt.
    ttl_ms: Option<f64>,
}

impl Windows {
    /// `count` windows in all, the one in use (the session's) included.
    pub fn new(session: &Session, count: usize, ttl_ms: Option<f64>) -> Self {
        let parked = (1..count.max(1))
            .map(|_| Window {
                kv: session.new_kv(),
                tokens: Vec::new(),
                last_used: 0.0,
            })
            .collect();
        Windows { parked, ttl_ms }
    }

    /// Forgets every parked conversation.
    pub fn clear(&mut self) {
        for w in &mut self.parked {
            w.kv.clear();
            w.tokens.clear();
        }
    }

    /// Bytes the parked KV caches have allocated.
    pub fn kv_bytes(&self) -> usize {
        self.parked.iter().map(|w| w.kv.bytes()).sum()
    }

    /// Serves `prompt` (a whole conversation): the window sharing the most with it becomes the
    /// conversation in use, rewound to the tokens they share. The report's `reused` is how many
    /// prompt tokens are already in the KV cache.
    pub fn reuse(&mut self, conv: &mut Conversation, prompt: &[u32], now: f64) -> PrefixReport {
        let plan = {
            let live = WindowView {
                tokens: &conv.tokens,
                cached: conv.session.position(),
                earliest_rewind: conv.session.earliest_rewind(),
                last_used: conv.last_used,
            };
            let parked = self.parked.iter().map(|w| WindowView {
                tokens: &w.tokens,
                cached: w.kv.len(),
                earliest_rewind: w.kv.earliest_rewind(),
                last_used: w.last_used,
            });
            let views: Vec<WindowView> = std::iter::once(live).chain(parked).collect();
            prefix::plan(&views, prompt, now, self.ttl_ms)
        };
        for &i in &plan.expired {
            match i {
                0 => conv.forget(),
                i => {
                    let w = &mut self.parked[i - 1];
                    w.kv.clear();
                    w.tokens.clear();
                }
            }
        }
        if plan.window > 0 {
            // Park the conversation in use where the chosen one was, and take that one up.
            let w = &mut self.parked[plan.window - 1];
            if conv.session.swap_kv(&mut w.kv).is_ok() {
                std::mem::swap(&mut conv.tokens, &mut w.tokens);
                std::mem::swap(&mut conv.last_used, &mut w.last_used);
            }
        }
        let mut keep = plan.keep;
        if keep == 0 || conv.session.rewind(keep).is_err() {
            keep = 0;
            conv.forget();
        }
        // What the window held beyond the kept positions is gone; the prompt's rest follows.
        conv.tokens.truncate(keep);
        conv.generation = None;
        conv.last_used = now;
        PrefixReport {
            status: plan.status,
            reused: keep as u64,
            prefilled: (prompt.len() - keep) as u64,
            window: plan.window,
            kind: PrefixKind::Implicit,
            id: None,
        }
    }
}
