//! Prefix reuse across generations: a host keeps the KV caches of its last few conversations
//! (windows), and a prompt that starts with the tokens one of them holds prefills only what
//! follows. This module decides which window serves a prompt and how much of it; the host does
//! the swapping and rewinding.

/// How a prompt's prefill used the windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixStatus {
    /// A window held a prefix of the prompt: only the rest was prefilled.
    Hit,
    /// No window held anything.
    Miss,
    /// The best window's conversation went another way: the tokens they share (if the cache
    /// could go back that far) were kept, the rest prefilled.
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
    /// Positions in the KV cache.
    pub cached: usize,
    /// The earliest position its KV cache can be rewound to.
    pub earliest_rewind: usize,
    /// When it was last used (ms on the host's clock).
    pub last_used: f64,
}

/// Which window serves the prompt, how many of its positions are kept, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReusePlan {
    pub window: usize,
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

/// Plans the prefill of `prompt` over `windows` (index 0 is the one in use). A window unused for
/// longer than `ttl_ms` is expired. The window kept is the one sharing the most with the prompt;
/// with nothing shared, the least recently used one (an empty one first), so other
/// conversations keep theirs.
pub fn plan(windows: &[WindowView], prompt: &[u32], now: f64, ttl_ms: Option<f64>) -> ReusePlan {
    let expired: Vec<usize> = windows
        .iter()
        .enumerate()
        .filter(|(_, w)| !w.tokens.is_empty() && ttl_ms.is_some_and(|t| now - w.last_used > t))
        .map(|(i, _)| i)
        .collect();
    let live = |i: usize| !expired.contains(&i);
    let best = (0..windows.len())
        .filter(|&i| live(i))
        .map(|i| (usable(&windows[i], prompt), i))
        // The most kept; on a tie the lowest index (the window in use).
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    if let Some((keep, i)) = best.filter(|&(keep, _)| keep > 0) {
        let w = &windows[i];
        let status = match common_prefix(w.tokens, prompt) == w.tokens.len() {
            true => PrefixStatus::Hit,
            false => PrefixStatus::Mismatch,
        };
        return ReusePlan {
            window: i,
            keep,
            status,
            expired,
        };
    }
    // Nothing to keep: take an empty (or expired) window, else the least recently used.
    let window = (0..windows.len())
        .min_by(|&a, &b| {
            let key = |i: usize| {
                let empty = windows[i].tokens.is_empty() || !live(i);
                (!empty, windows[i].last_used)
            };
            let (ka, kb) = (key(a), key(b));
            ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
        })
        .unwrap_or(0);
    // Expired only when the expired window would have served the prompt.
    let would_have = expired
        .iter()
        .any(|&i| common_prefix(windows[i].tokens, prompt) > 0);
    let any_held = windows
        .iter()
        .enumerate()
        .any(|(i, w)| live(i) && !w.tokens.is_empty());
    let status = if would_have {
        PrefixStatus::Expired
    } else if any_held {
        PrefixStatus::Mismatch
    } else {
        PrefixStatus::Miss
    };
    ReusePlan {
        window,
        keep: 0,
        status,
        expired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(tokens: &[u32], last_used: f64) -> WindowView<'_> {
        WindowView {
            tokens,
            // The last token is pending, as after a generation.
            cached: tokens.len().saturating_sub(1),
            earliest_rewind: 0,
            last_used,
        }
    }

    #[test]
    fn a_conversation_that_goes_on_is_a_hit() {
        let held = [1, 2, 3, 4, 5];
        let p = plan(
            &[w(&held, 0.0)],
            &[1, 2, 3, 4, 5, 6, 7],
            10.0,
            Some(15_000.0),
        );
        assert_eq!((p.window, p.keep, p.status), (0, 4, PrefixStatus::Hit));
        // The prompt's last token always runs, even when the window holds it all.
        let p = plan(&[w(&held, 0.0)], &[1, 2, 3, 4, 5], 10.0, None);
        assert_eq!((p.keep, p.status), (4, PrefixStatus::Hit));
        // A prompt the window went past (a retry) keeps all but its last token, though the
        // window's conversation is not a prefix of it.
        let p = plan(&[w(&held, 0.0)], &[1, 2, 3], 10.0, None);
        assert_eq!((p.keep, p.status), (2, PrefixStatus::Mismatch));
    }

    #[test]
    fn a_different_conversation_is_a_mismatch_and_keeps_what_it_shares() {
        let held = [1, 2, 3, 4, 5];
        let p = plan(&[w(&held, 0.0)], &[1, 2, 9, 9], 10.0, None);
        assert_eq!((p.keep, p.status), (2, PrefixStatus::Mismatch));
        let p = plan(&[w(&held, 0.0)], &[7, 7], 10.0, None);
        assert_eq!((p.keep, p.status), (0, PrefixStatus::Mismatch));
        // A ring that cannot go back that far keeps nothing.
        let ring = WindowView {
            earliest_rewind: 3,
            ..w(&held, 0.0)
        };
        let p = plan(&[ring], &[1, 2, 9, 9], 10.0, None);
        assert_eq!((p.keep, p.status), (0, PrefixStatus::Mismatch));
    }

    #[test]
    fn nothing_held_is_a_miss_and_an_old_window_expired() {
        let p = plan(&[w(&[], 0.0)], &[1, 2, 3], 10.0, Some(1.0));
        assert_eq!((p.keep, p.status), (0, PrefixStatus::Miss));
        let held = [1, 2, 3];
        let p = plan(&[w(&held, 0.0)], &[1, 2, 3, 4], 20_000.0, Some(15_000.0));
        assert_eq!(
            (p.keep, p.status, p.expired),
            (0, PrefixStatus::Expired, vec![0])
        );
        // Within the time to live it is a hit; without one it never expires.
        let p = plan(&[w(&held, 0.0)], &[1, 2, 3, 4], 14_000.0, Some(15_000.0));
        assert_eq!(p.status, PrefixStatus::Hit);
        let p = plan(&[w(&held, 0.0)], &[1, 2, 3, 4], 1e12, None);
        assert_eq!(p.status, PrefixStatus::Hit);
    }

    #[test]
    fn several_windows_serve_several_conversations() {
        let (a, b) = ([1, 2, 3, 4], [5, 6, 7, 8]);
        let windows = [w(&a, 5.0), w(&b, 3.0), w(&[], 0.0)];
        let p = plan(&windows, &[5, 6, 7, 8, 9], 10.0, None);
        assert_eq!((p.window, p.keep, p.status), (1, 3, PrefixStatus::Hit));
        // A new conversation takes the empty window, then the least recently used one.
        let p = plan(&windows, &[9, 9], 10.0, None);
        assert_eq!((p.window, p.keep, p.status), (2, 0, PrefixStatus::Mismatch));
        let full = [w(&a, 5.0), w(&b, 3.0)];
        assert_eq!(plan(&full, &[9, 9], 10.0, None).window, 1);
        // On a tie the window in use wins.
        let same = [w(&a, 1.0), w(&a, 9.0)];
        assert_eq!(plan(&same, &[1, 2, 3, 4, 5], 10.0, None).window, 0);
    }
}
