//! Stations: one model split across processes (Durable Objects behind a coordinator Worker).
//! A layer station runs a contiguous range of layers and keeps that range's KV cache per
//! conversation ([`engine::Session::for_layers`]); a head station computes the logits of a slice
//! of the vocabulary ([`engine::LmHead`] over [`engine::quant::QMatrix::rows_slice`]).
//!
//! [`LayerStation`] and [`HeadStation`] are those two, fed and answered in wire bytes. What
//! coordinator and stations share lives here too: the binary form of hidden states on the wire
//! ([`wire`]) and of embedding rows and logits ([`rows`]), the fold of the head shards' answers
//! into one distribution and a three-way verdict ([`gather`]), which station runs which layers
//! ([`placement`]), and how many stations a model needs for every isolate to fit a memory
//! budget ([`plan`]). The coordinator's embedding rows are [`embedding`]'s: read whole at open
//! when they fit, otherwise handed over by the head stations — never read per token. The
//! coordinator runs every generation as one of its [`sequences`], each able to resume a
//! conversation the layer stations kept; every station, the coordinator and the plan read their
//! options through [`options`].

pub mod bundle;
pub mod coordinator;
pub mod embedding;
pub mod gather;
pub mod head;
pub mod layers;
pub mod options;
pub mod placement;
pub mod plan;
pub mod rows;
pub mod sequences;
pub mod shard;
pub mod wire;

pub use head::{EmbeddingSlice, HeadStation};
pub use layers::{LayerStation, StationError};
pub use shard::{open_index, HeadShard, LayerShard};

/// The hash a prefix of a conversation is known by (FNV-1a, 64 bits, over the ids as
/// little-endian u32): the coordinator asks stations for `(hash, length)` and each checks it
/// against the ids it was told its KV cache holds.
pub fn prefix_hash(ids: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in ids.iter().flat_map(|id| id.to_le_bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefix_hashes_tell_prefixes_apart() {
        use super::prefix_hash;
        assert_eq!(prefix_hash(&[]), 0xcbf2_9ce4_8422_2325);
        assert_ne!(prefix_hash(&[1, 2]), prefix_hash(&[2, 1]));
        assert_ne!(prefix_hash(&[1]), prefix_hash(&[1, 0]));
        assert_eq!(prefix_hash(&[7, 8, 9]), prefix_hash(&[7, 8, 9]));
    }
}
