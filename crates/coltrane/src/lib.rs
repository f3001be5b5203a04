//! COLTRANE: a finite-state token mask inside every decode step. Three tiers:
//!
//! 1. [`Vocab`] (`vocab.rs`) — built once per tokenizer from the tokens' bytes: a byte trie,
//!    each token's pitch class (`pitch_class_table`) and fold cost (`fold_cost_table`), a bitset
//!    per class. An [`Index`] pairs it with the JSON matchers built over it (`dfa.rs`), so the
//!    vocabulary knows nothing of matchers.
//! 2. [`Coltrane`] (`sequence.rs`) — the per-sequence state machine (`compute_mask`, `accept`,
//!    `rollback`, `can_end`): folds (`fold.rs`: brackets and quotes, string-aware, with a depth
//!    bound and harmonic closure), the JSON / JSON Schema matcher (`machine/`, over a schema
//!    compiled by `schema.rs` and `narrow.rs`, as a lazy DFA in `dfa.rs`), class transitions,
//!    eddy (loop) detection (`eddy.rs`) and budget-aware closing.
//! 3. The oracle fallback (`fallback.rs`) — when the allowed tokens hold less than
//!    `fallback_mass` of the model's probability (`mass.rs`), the soft tiers relax one at a time
//!    (eddy bans, then class rules, then folds), down to the unmasked distribution; hard rules
//!    (JSON, a schema) never relax. Then terminal prosody.
//!
//! What a constraint is asked to do is a [`ColtraneConfig`] (`config.rs`); what it did,
//! [`StepReport`] and [`Metrics`] (`metrics.rs`).
//!
//! Pure Rust, no I/O, deterministic (no clock unless the caller passes one). docs/coltrane.md.

pub mod bitset;
mod config;
pub mod cost;
pub mod dfa;
pub mod eddy;
mod fallback;
pub mod fold;
pub mod format;
mod index;
pub mod machine;
mod mass;
mod metrics;
mod narrow;
pub mod number;
pub mod openai;
pub mod pattern;
pub mod schema;
mod sequence;
pub mod vocab;

pub use bitset::TokenSet;
pub use config::{ColtraneConfig, ColtraneError, Preset, ProsodyMode};
pub use eddy::EddyConfig;
pub use format::Formats;
pub use index::Index;
pub use metrics::{Metrics, StepReport};
pub use narrow::{compile_schema, compile_schema_with};
pub use schema::{Schema, SchemaError};
pub use sequence::{Coltrane, StepMark};
pub use vocab::{Pitch, TokenKind, Vocab, VocabError};

#[cfg(test)]
mod tests;
