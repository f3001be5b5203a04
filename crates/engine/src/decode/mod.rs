//! The decode loop's rules, apart from how a forward pass runs: what a request may ask for
//! ([`GenerateOptions`], parsed and validated here for every surface: CLI, host, JS), and the
//! cursor that turns each step's logits into the next token and decides when generation ends
//! ([`Generation`]). The host drives it (prefill, then forward the last token, then `next`);
//! the CLI, the benchmarks and the JS package all go through the host, so there is one loop.
//!
//! The end rules: a token in the model's end-of-text set ends generation with `stop` (it is in
//! the ids, its text is not emitted); `max_tokens`, or the context filling up, ends it with
//! `length`.

mod generation;
mod options;

pub use crate::options::OptionsError;
pub use generation::{Emitted, FinishReason, GenerateError, Generation, PartialNext};
pub use options::{
    coltrane_from_value, draft_from_value, moa_from_value, DraftChoice, GenerateOptions,
};

#[cfg(test)]
mod tests;
