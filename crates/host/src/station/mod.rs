//! Stations: one model split across processes (Durable Objects behind a coordinator Worker).
//! A layer station runs a contiguous range of layers and keeps that range's KV cache per
//! conversation ([`engine::Session::for_layers`]); a head station computes the logits of a slice
//! of the vocabulary ([`engine::LmHead`] over [`engine::quant::QMatrix::rows_slice`]).
//!
//! [`LayerStation`] and [`HeadStation`] are those two, fed and answered in wire bytes. What
//! coordinator and stations share lives here too: the binary form of hidden states on the wire
//! ([`wire`]), the fold of the head shards' answers into one distribution and a three-way
//! verdict ([`gather`]), and which station runs which layers ([`placement`]).

pub mod coordinator;
pub mod gather;
pub mod head;
pub mod layers;
pub mod placement;
pub mod shard;
pub mod wire;

pub use head::HeadStation;
pub use layers::{LayerStation, StationError};
pub use shard::{open_index, EmbeddingRows, HeadShard, LayerShard};
