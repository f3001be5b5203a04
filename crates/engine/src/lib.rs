//! The transformer runtime. No I/O, no async: callers hand it weight bytes and token ids.

pub mod chat;
pub mod quant;
pub mod tokenizer;
