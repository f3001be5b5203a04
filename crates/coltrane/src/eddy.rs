//! Eddies: repetition loops. When the recent tokens repeat an n-gram `repeats` times running,
//! the token that would continue the loop is banned for the next step.

/// Runs of one repeated token are natural (spaces, dashes, newlines): a period-1 loop needs
/// this many tokens before it counts.
const MIN_SPAN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EddyConfig {
    /// Longest loop period looked for, in tokens.
    pub ngram: usize,
    /// Repetitions of the period that make a loop.
    pub repeats: usize,
}

impl Default for EddyConfig {
    fn default() -> Self {
        EddyConfig {
            ngram: 32,
            repeats: 2,
        }
    }
}

/// The loops the recent tokens are in: `(period, the token that would continue it)`.
pub fn detect(history: &[u32], cfg: &EddyConfig, out: &mut Vec<(usize, u32)>) {
    out.clear();
    let len = history.len();
    for p in 1..=cfg.ngram {
        let repeats = cfg.repeats.max(MIN_SPAN.div_ceil(p)).max(2);
        let span = p * repeats;
        if span > len {
            break;
        }
        let tail = &history[len - span..];
        if (p..span).all(|i| tail[i] == tail[i - p]) {
            out.push((p, history[len - p]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_found_with_their_continuation() {
        let cfg = EddyConfig::default();
        let mut out = Vec::new();
        detect(&[9, 1, 2, 3, 1, 2, 3], &cfg, &mut out);
        assert_eq!(out, [(3, 1)]);
        detect(&[1, 2, 1, 2, 1, 2], &cfg, &mut out);
        assert_eq!(out, [(2, 1)]);
        // One token three times is not a loop yet; four times is.
        detect(&[5, 5, 5], &cfg, &mut out);
        assert!(out.is_empty());
        detect(&[5, 5, 5, 5], &cfg, &mut out);
        assert_eq!(out[0], (1, 5));
        detect(&[1, 2, 3, 4], &cfg, &mut out);
        assert!(out.is_empty());
        let strict = EddyConfig {
            ngram: 3,
            repeats: 3,
        };
        detect(&[1, 2, 1, 2], &strict, &mut out);
        assert!(out.is_empty());
        detect(&[1, 2, 1, 2, 1, 2], &strict, &mut out);
        assert_eq!(out, [(2, 1)]);
    }
}
