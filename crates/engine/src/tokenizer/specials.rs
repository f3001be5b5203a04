//! Literal-match tokens (control and user-defined, e.g. `<|im_start|>`) found in text: at each
//! position, the longest one starting there.
//!
//! The tokens are kept sorted, so the ones sharing a prefix are contiguous; matching narrows that
//! range along the text: a stretch all of them share is compared at once, and where they part,
//! two binary searches keep those that go on with the text's next byte. A position costs one
//! pair of searches per branching point passed plus a byte comparison per matched byte, however
//! many tokens share its first bytes (Gemma-3 has thousands of `<unused…>` tokens; comparing
//! each one at every `<` of a crafted text took seconds).

#[derive(Debug)]
pub struct Specials {
    /// (bytes, id), sorted by bytes then id.
    sorted: Vec<(Box<[u8]>, u32)>,
    /// Whether some token starts with this byte: most text bytes skip the search.
    starts: [bool; 256],
}

impl Specials {
    /// The tokens whose id passes `is_literal` (empty ones are never matched).
    pub fn new(tokens: &[String], is_literal: impl Fn(usize) -> bool) -> Self {
        let mut sorted: Vec<(Box<[u8]>, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|&(id, token)| !token.is_empty() && is_literal(id))
            .map(|(id, token)| (token.as_bytes().into(), id as u32))
            .collect();
        sorted.sort_unstable();
        let mut starts = [false; 256];
        for (bytes, _) in &sorted {
            starts[bytes[0] as usize] = true;
        }
        Self { sorted, starts }
    }

    /// The longest token that `text` starts with, as (byte length, id); of a string listed twice,
    /// the lower id.
    pub fn longest_prefix_of(&self, text: &[u8]) -> Option<(usize, u32)> {
        self.longest_prefix_counted(text, &mut 0)
    }

    /// [`Specials::longest_prefix_of`], adding the comparisons made to `comparisons`.
    fn longest_prefix_counted(&self, text: &[u8], comparisons: &mut usize) -> Option<(usize, u32)> {
        let first = *text.first()?;
        if !self.starts[first as usize] {
            return None;
        }
        let (mut lo, mut hi) = (0, self.sorted.len());
        let mut depth = 0;
        let mut best = None;
        // Invariant: every token in lo..hi starts with text[..depth].
        loop {
            // A token equal to text[..depth] sorts first in the range.
            let (head, head_id) = &self.sorted[lo];
            if head.len() == depth {
                best = Some((depth, *head_id));
            }
            // Sorted, so the whole range shares what its first and last tokens share: compare
            // that stretch at once (one long token costs a memcmp, not a search per byte).
            let last = &self.sorted[hi - 1].0;
            let shared = head[depth..]
                .iter()
                .zip(&last[depth..])
                .take_while(|(a, b)| a == b)
                .count();
            if shared > 0 {
                *comparisons += 1;
                if !text[depth..].starts_with(&head[depth..depth + shared]) {
                    break;
                }
                depth += shared;
                continue;
            }
            // The tokens part here: keep those whose byte at `depth` is the text's.
            let Some(&byte) = text.get(depth) else {
                break;
            };
            let range = &self.sorted[lo..hi];
            let mut below = |inclusive: bool| {
                range.partition_point(|(token, _)| {
                    *comparisons += 1;
                    token
                        .get(depth)
                        .is_none_or(|&b| b < byte || (inclusive && b == byte))
                })
            };
            let (start, end) = (lo + below(false), lo + below(true));
            if start == end {
                break;
            }
            (lo, hi) = (start, end);
            depth += 1;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The scan this replaces: every token, longest first, lowest id among equals.
    fn naive(tokens: &[String], text: &[u8]) -> Option<(usize, u32)> {
        tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_empty() && text.starts_with(t.as_bytes()))
            .map(|(id, t)| (t.len(), id as u32))
            .min_by_key(|&(len, id)| (std::cmp::Reverse(len), id))
    }

    proptest! {
        /// Small alphabets so tokens share prefixes, repeat, and nest.
        #[test]
        fn matches_the_naive_scan(
            tokens in proptest::collection::vec("[ab<>]{0,5}", 0..24),
            text in "[ab<>c]{0,40}",
        ) {
            let specials = Specials::new(&tokens, |_| true);
            for at in 0..=text.len() {
                let rest = &text.as_bytes()[at..];
                prop_assert_eq!(specials.longest_prefix_of(rest), naive(&tokens, rest), "at {}", at);
            }
        }
    }

    #[test]
    fn only_literal_ids_match() {
        let tokens: Vec<String> = ["<a>", "<a>", "<ab>", "<"].map(String::from).to_vec();
        let specials = Specials::new(&tokens, |id| id != 0);
        assert_eq!(specials.longest_prefix_of(b"<a>x"), Some((3, 1)));
        assert_eq!(specials.longest_prefix_of(b"<ab>"), Some((4, 2)));
        assert_eq!(specials.longest_prefix_of(b"<b"), Some((1, 3)));
        assert_eq!(specials.longest_prefix_of(b"x<a>"), None);
        assert_eq!(specials.longest_prefix_of(b""), None);
    }

    /// Thousands of tokens sharing a first byte, text made of that byte: each position costs a
    /// couple of binary searches, not one comparison per token (the old scan made 6000).
    #[test]
    fn shared_prefixes_cost_a_binary_search() {
        let tokens: Vec<String> = (0..6000).map(|i| format!("<unused{i}>")).collect();
        let specials = Specials::new(&tokens, |_| true);
        let text = "<".repeat(10_000);
        let mut comparisons = 0;
        for at in 0..text.len() {
            let found = specials.longest_prefix_counted(&text.as_bytes()[at..], &mut comparisons);
            assert_eq!(found, None);
        }
        // Two binary searches over 6000 at depth 0 and at depth 1: about 4 × 13 per position.
        assert!(comparisons <= text.len() * 60, "{comparisons} comparisons");

        let text = "<unused5999>".repeat(1000);
        let mut comparisons = 0;
        let mut at = 0;
        while at < text.len() {
            let (len, id) = specials
                .longest_prefix_counted(&text.as_bytes()[at..], &mut comparisons)
                .unwrap();
            assert_eq!(id, 5999);
            at += len;
        }
        assert!(comparisons <= 1000 * 12 * 30, "{comparisons} comparisons");
    }
}
