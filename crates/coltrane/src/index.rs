//! What COLTRANE keeps per tokenizer: the vocabulary index (tier 1) and the JSON matchers built
//! over it (tier 2's shared cache). Two parts, so the vocabulary index knows only bytes, the trie
//! and token classes, as llguidance keeps `toktrie` apart from its parser.

use crate::dfa::MatcherCache;
use crate::vocab::Vocab;

/// A vocabulary's index and its matchers, built once per tokenizer and shared (behind an `Arc`)
/// by every sequence constrained over it.
#[derive(Debug)]
pub struct Index {
    pub vocab: Vocab,
    /// JSON matchers built over `vocab`, so a later sequence with the same preset starts warm.
    pub matchers: MatcherCache,
}

impl Index {
    /// An index with no matcher built yet.
    pub fn new(vocab: Vocab) -> Index {
        Index {
            vocab,
            matchers: MatcherCache::default(),
        }
    }
}
