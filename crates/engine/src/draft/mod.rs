//! Drafts for speculative decoding: tokens guessed cheaply, then checked all at once by one
//! batched forward pass of the real model (the host's verify pass). A draft never changes what
//! is generated, only how many forward passes it takes: the verifier keeps a draft token only
//! when it is the token the decode pipeline picks anyway.
//!
//! [`Drafter`] is the interface (a draft model sharing the tokenizer can implement it later);
//! [`PromptLookup`] needs no second model: it finds the most recent earlier occurrence of the
//! text's last few tokens in the conversation (prompt and generated text) and proposes what
//! followed it there. Copy-heavy work (summaries, edits, code that repeats names) drafts well;
//! open-ended prose rarely matches, and the adaptive length keeps misses from costing.
//!
//! [`Speculation`] is the bookkeeping between verify passes, apart from the passes themselves:
//! the picked token waiting to enter the KV cache, the tokens a verify pass made ahead, and
//! which positions the next pass runs.

mod config;
mod drafter;
mod lookup;
mod speculation;

pub use config::{DraftConfig, DraftError, MAX_DRAFT, MAX_NGRAM};
pub use drafter::{Drafter, PassCost, PassTimes};
pub use lookup::PromptLookup;
pub use speculation::{DraftLimits, NextPass, Speculation, Verified};
