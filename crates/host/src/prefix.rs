//! Prefix reuse across generations: a host keeps the KV caches of the conversations that ended
//! last (windows), and a prompt that starts with the tokens one of them holds prefills only what
//! follows. This module decides which window serves a prompt and how much of it; the host does
//! the lending and copying.

/// How a prompt's prefill used the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixStatus {
    /// The prompt continues (or repeats) a conversation a window held: all of that window's
    /// prompt that this prompt shares was reused, only the rest prefilled.
    Hit,
    /// Nothing was reused: no window shares a token with the prompt (or none can go back to
    /// what it shares).
    Miss,
    /// The best window's conversation went another way before the end of its prompt: the
    /// tokens they share were kept, the rest prefilled.
    Mismatch,
    /// A window that would have served the prompt had outlived its time to live.
    Expired,
    /// The host keeps no explicit prefill windows (`prefillWindows: 0`), or cannot (a model
    /// split across stations).
    Disabled,
}

/// What a window holds, as the planner sees it.
#[derive(Debug, Clone, Copy)]
pub struct WindowView<'a> {
    /// The conversation's tokens (the last one may not be in the KV cache yet).
    pub tokens: &'a [u32],
    /// How many of them were its last prompt (the rest it generated).
    pub prompt_len: usize,
    /// Positions in the KV cache.
    pub cached: usize,
    /// The earliest position its KV cache can be rewound to.
    pub earliest_rewind: usize,
    /// When it was last used (ms on the host's clock).
    pub last_used: f64,
}

impl WindowView<'_> {
    fn is_empty(&self) -> bool {
        self.tokens.is_empty() || self.cached == 0
    }
}

/// Which window serves the prompt, how many of its positions are kept, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReusePlan {
    /// The window kept from (None: nothing is kept).
    pub window: Option<usize>,
    /// Positions of its KV cache kept (the prompt's first `keep` tokens); the rest is prefilled.
    pub keep: usize,
    pub status: PrefixStatus,
    /// Windows found past their time to live (forgotten before use).
    pub expired: Vec<usize>,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Positions of `w` a prompt can keep: the tokens they share, less one so the prompt's last
/// token is always run (its logits pick the next token), within what the cache holds and can
/// rewind to.
fn usable(w: &WindowView, prompt: &[u32]) -> usize {
    let keep = common_prefix(w.tokens, prompt)
        .min(prompt.len().saturating_sub(1))
        .min(w.cached);
    if keep < w.earliest_rewind {
        0
    } else {
        keep
    }
}

/// The windows unused for longer than `ttl_ms`.
fn expired_windows(windows: &[WindowView], now: f64, ttl_ms: Option<f64>) -> Vec<usize> {
    (0..windows.len())
        .filter(|&i| {
            !windows[i].is_empty() && ttl_ms.is_some_and(|t| now - windows[i].last_used > t)
        })
        .collect()
}

/// Plans the prefill of `prompt` over `windows`. A window unused for longer than `ttl_ms` is
/// expired. The window kept is the one sharing the most with the prompt (on a tie, the most
/// recently used).
pub fn plan(windows: &[WindowView], prompt: &[u32], now: f64, ttl_ms: Option<f64>) -> ReusePlan {
    let expired = expired_windows(windows, now, ttl_ms);
    let best = (0..windows.len())
        .filter(|i| !expired.contains(i))
        .map(|i| (usable(&windows[i], prompt), i))
        .filter(|&(keep, _)| keep > 0)
        .max_by(|a, b| {
            let used = |i: usize| windows[i].last_used;
            a.0.cmp(&b.0).then(used(a.1).total_cmp(&used(b.1)))
        });
    if let Some((keep, i)) = best {
        // Everything of the window's prompt this prompt could reuse was reused.
        let whole = windows[i].prompt_len.min(prompt.len() - 1);
        let status = match keep >= whole {
            true => PrefixStatus::Hit,
            false => PrefixStatus::Mismatch,
        };
        return ReusePlan {
            window: Some(i),
            keep,
            status,
            expired,
        };
    }
    // Expired only when an expired window would have served the prompt.
    let would_have = expired
        .iter()
        .any(|&i| common_prefix(windows[i].tokens, prompt) > 0);
    ReusePlan {
        window: None,
        keep: 0,
        status: match would_have {
            true => PrefixStatus::Expired,
            false => PrefixStatus::Miss,
        },
        expired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window after a generation: the prompt, then generated tokens, the last one pending.
    fn w(tokens: &[u32], prompt_len: usize, last_used: f64) -> WindowView<'_> {
        WindowView {
            tokens,
            prompt_len,
            cached: tokens.len().saturating_sub(1),
            earliest_rewind: 0,
            last_used,
        }
    }

    #[test]
    fn a_conversation_that_goes_on_is_a_hit() {
        let held = [1, 2, 3, 4, 5];
        let windows = [w(&held, 3, 0.0)];
        let p = plan(&windows, &[1, 2, 3, 4, 5, 6, 7], 10.0, Some(15_000.0));
        assert_eq!(
            (p.window, p.keep, p.status),
            (Some(0), 4, PrefixStatus::Hit)
        );
        // The prompt's last token always runs, even when the window holds it all.
        let p = plan(&windows, &[1, 2, 3, 4, 5], 10.0, None);
        assert_eq!((p.keep, p.status), (4, PrefixStatus::Hit));
        // The answer re-tokenized differently: the whole prompt reused is still a hit.
        let p = plan(&windows, &[1, 2, 3, 8, 9, 9], 10.0, None);
        assert_eq!((p.keep, p.status), (3, PrefixStatus::Hit));
        // A retry of a prompt keeps all but its last token.
        let p = plan(&windows, &[1, 2, 3], 10.0, None);
        assert_eq!((p.keep, p.status), (2, PrefixStatus::Hit));
    }

    #[test]
    fn a_conversation_that_went_another_way_is_a_mismatch_and_keeps_what_it_shares() {
        let held = [1, 2, 3, 4, 5];
        let p = plan(&[w(&held, 4, 0.0)], &[1, 2, 9, 9], 10.0, None);
        assert_eq!((p.keep, p.status), (2, PrefixStatus::Mismatch));
        let p = plan(&[w(&held, 4, 0.0)], &[7, 7], 10.0, None);
        assert_eq!((p.window, p.keep, p.status), (None, 0, PrefixStatus::Miss));
        // A ring that cannot go back that far keeps nothing.
        let ring = WindowView {
            earliest_rewind: 3,
            ..w(&held, 4, 0.0)
        };
        let p = plan(&[ring], &[1, 2, 9, 9], 10.0, None);
        assert_eq!((p.keep, p.status), (0, PrefixStatus::Miss));
    }

    #[test]
    fn nothing_held_is_a_miss_and_an_old_window_expired() {
        let p = plan(&[w(&[], 0, 0.0)], &[1, 2, 3], 10.0, Some(1.0));
        assert_eq!((p.keep, p.status), (0, PrefixStatus::Miss));
        let held = [1, 2, 3];
        let p = plan(&[w(&held, 2, 0.0)], &[1, 2, 3, 4], 20_000.0, Some(15_000.0));
        assert_eq!(
            (p.keep, p.status, p.expired),
            (0, PrefixStatus::Expired, vec![0])
        );
        // Within the time to live it is a hit; without one it never expires.
        let p = plan(&[w(&held, 2, 0.0)], &[1, 2, 3, 4], 14_000.0, Some(15_000.0));
        assert_eq!(p.status, PrefixStatus::Hit);
        let p = plan(&[w(&held, 2, 0.0)], &[1, 2, 3, 4], 1e12, None);
        assert_eq!(p.status, PrefixStatus::Hit);
    }

    #[test]
    fn several_windows_serve_several_conversations() {
        let (a, b) = ([1, 2, 3, 4], [5, 6, 7, 8]);
        let windows = [w(&a, 2, 5.0), w(&b, 2, 3.0), w(&[], 0, 0.0)];
        let p = plan(&windows, &[5, 6, 7, 8, 9], 10.0, None);
        assert_eq!(
            (p.window, p.keep, p.status),
            (Some(1), 3, PrefixStatus::Hit)
        );
        // On a tie the most recently used serves.
        let same = [w(&a, 2, 1.0), w(&a, 2, 9.0)];
        assert_eq!(plan(&same, &[1, 2, 3, 4, 5], 10.0, None).window, Some(1));
    }
}
