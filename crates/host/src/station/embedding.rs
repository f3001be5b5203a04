//! Where the coordinator's embedding rows come from, chosen once at open, so that no token ever
//! waits for a read of the file:
//!
//! - resident: the table fits the coordinator's budget (SmolLM2's does), so it is read whole at
//!   open (its pieces in parallel) and every id is embedded locally;
//! - sharded: it does not (Gemma-3's 178 MB is larger than an isolate), so the head stations,
//!   which hold the same rows (the LM head's own when embeddings are tied), hand them over: a
//!   prompt's missing rows in one parallel round to the shards owning them, a picked token's row
//!   riding with the logits that picked it ([`super::rows`]). Rows are kept in an LRU bounded in
//!   bytes across requests.
//!
//! Either way an id is embedded from the very bytes the file stores, as a whole model does: bit
//! for bit the same residual stream.

use std::collections::{BTreeMap, HashMap, HashSet};

use engine::{EngineError, TensorSlot};
use knot::{Knot, ModelConfig};
use serde::Serialize;

use super::rows::RowsMessage;
use super::shard::{absolute, resident};
use crate::error::HostError;
use crate::reader::Reader;

/// How the embedding is held, and how much of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingOptions {
    /// The largest table read whole at open; a larger one is sharded.
    pub budget: u64,
    /// The most bytes of rows kept across requests when sharded (rows a batch needs are kept
    /// until it is embedded, even past this).
    pub cache_bytes: u64,
}

/// The default budget: 64 MiB — SmolLM2-135M's table (49152 q8_0 rows, 30 MB) is resident,
/// Gemma-3's (262144 rows, 178 MB) is not.
pub const DEFAULT_BUDGET: u64 = 64 << 20;
/// The default row cache: 4 MiB (about 6000 of Gemma-3-270M's q8_0 rows).
pub const DEFAULT_CACHE_BYTES: u64 = 4 << 20;

impl Default for EmbeddingOptions {
    fn default() -> Self {
        EmbeddingOptions {
            budget: DEFAULT_BUDGET,
            cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbeddingError {
    #[error("the row of token {id} is not at the coordinator: fetch the rows asked for first")]
    Missing { id: u32 },
    #[error("a head station sent row {id}, outside its slice {start}..{end}")]
    Outside { id: u32, start: usize, end: usize },
}

impl From<EmbeddingError> for HostError {
    fn from(e: EmbeddingError) -> Self {
        match e {
            // The caller did not bring the rows it was asked for.
            EmbeddingError::Missing { .. } => HostError::InvalidArgument(e.to_string()),
            EmbeddingError::Outside { .. } => HostError::Station(e.to_string()),
        }
    }
}

/// The coordinator's counters (since open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbedCounters {
    /// Rounds of `/rows` requests (each a parallel fan-out to the shards owning the rows).
    pub rounds: u64,
    /// Of those, rounds for a picked token whose row had not ridden with the logits.
    pub misses: u64,
    /// Rows that came by `/rows`.
    pub rows_fetched: u64,
    /// Rows that rode with logits.
    pub rows_riding: u64,
}

impl EmbedCounters {
    pub fn since(&self, earlier: &EmbedCounters) -> EmbedCounters {
        EmbedCounters {
            rounds: self.rounds - earlier.rounds,
            misses: self.misses - earlier.misses,
            rows_fetched: self.rows_fetched - earlier.rows_fetched,
            rows_riding: self.rows_riding - earlier.rows_riding,
        }
    }
}

enum Table {
    Resident(Vec<u8>),
    Sharded(RowCache),
}

/// The embedding as the coordinator holds it.
pub struct Embedding {
    /// One row's shape and format (`rows` 1, `bytes` its length).
    row: TensorSlot,
    vocab: usize,
    table: Table,
    pub counters: EmbedCounters,
}

impl Embedding {
    /// Locates the table and, when it fits `opts.budget`, reads it whole (in pieces of `piece`
    /// bytes, fetched in parallel).
    pub async fn open(
        reader: &Reader,
        knot: &Knot,
        opts: EmbeddingOptions,
        piece: Option<u64>,
    ) -> Result<Self, HostError> {
        let (base, layout) = resident(knot)?;
        let slot = layout.token_embd;
        let vocab = slot.rows;
        let row_bytes = (slot.bytes.end - slot.bytes.start) / vocab.max(1);
        let place = absolute(base, &slot);
        let table = match place.end - place.start <= opts.budget {
            true => Table::Resident(reader.read_span(place.start, place.end, piece).await?),
            false => Table::Sharded(RowCache::new(opts.cache_bytes)),
        };
        let row = TensorSlot {
            rows: 1,
            bytes: 0..row_bytes,
            ..slot
        };
        // A row's view is checked once here (its size against its format and width).
        row.view(&vec![0; row_bytes])?;
        Ok(Embedding {
            row,
            vocab,
            table,
            counters: EmbedCounters::default(),
        })
    }

    pub fn is_resident(&self) -> bool {
        matches!(self.table, Table::Resident(_))
    }

    pub fn row_bytes(&self) -> usize {
        self.row.bytes.len()
    }

    /// Bytes held: the whole table, or the rows cached.
    pub fn bytes(&self) -> usize {
        match &self.table {
            Table::Resident(t) => t.len(),
            Table::Sharded(c) => c.bytes,
        }
    }

    /// Rows held (the vocabulary when resident).
    pub fn rows(&self) -> usize {
        match &self.table {
            Table::Resident(_) => self.vocab,
            Table::Sharded(c) => c.rows.len(),
        }
    }

    fn check(&self, ids: &[u32]) -> Result<(), EngineError> {
        match ids.iter().find(|&&id| id as usize >= self.vocab) {
            Some(&id) => Err(EngineError::TokenOutOfRange {
                id,
                vocab: self.vocab,
            }),
            None => Ok(()),
        }
    }

    /// The distinct ids of `ids` whose rows are not held, ascending (none when resident). Every
    /// row `ids` needs is kept from now until [`Embedding::release`]; the rows asked
    /// for are counted as a round (`miss`: a picked token's row that did not ride along).
    pub fn wanted(&mut self, ids: &[u32], miss: bool) -> Result<Vec<u32>, EngineError> {
        self.check(ids)?;
        let Table::Sharded(cache) = &mut self.table else {
            return Ok(Vec::new());
        };
        cache.pinned = ids.iter().copied().collect();
        let mut want: Vec<u32> = cache
            .pinned
            .iter()
            .copied()
            .filter(|id| !cache.rows.contains_key(id))
            .collect();
        want.sort_unstable();
        if !want.is_empty() {
            self.counters.rounds += 1;
            self.counters.misses += u64::from(miss);
        }
        Ok(want)
    }

    /// Keeps the rows of `msg`, which came from the head station holding `slice` (by `/rows`
    /// when `fetched`, else riding with logits). Nothing to do when resident.
    pub fn add(
        &mut self,
        msg: &RowsMessage,
        slice: std::ops::Range<usize>,
        fetched: bool,
    ) -> Result<(), EmbeddingError> {
        let Table::Sharded(cache) = &mut self.table else {
            return Ok(());
        };
        if let Some(&id) = msg.ids.iter().find(|&&id| !slice.contains(&(id as usize))) {
            return Err(EmbeddingError::Outside {
                id,
                start: slice.start,
                end: slice.end,
            });
        }
        for (id, row) in msg.rows() {
            cache.insert(id, row);
        }
        let n = msg.ids.len() as u64;
        match fetched {
            true => self.counters.rows_fetched += n,
            false => self.counters.rows_riding += n,
        }
        Ok(())
    }

    /// The residual stream before layer 0 for `ids` (`[ids.len(), dim]`), from rows held.
    pub fn embed(&mut self, cfg: &ModelConfig, ids: &[u32]) -> Result<Vec<f32>, HostError> {
        self.check(ids)?;
        let (dim, n) = (cfg.dim, self.row_bytes());
        let mut out = vec![0.0f32; ids.len() * dim];
        for (&id, x) in ids.iter().zip(out.chunks_exact_mut(dim)) {
            let at = id as usize * n;
            let row = match &mut self.table {
                Table::Resident(t) => t.get(at..at + n),
                Table::Sharded(c) => c.get(id),
            };
            let row = row.ok_or(EmbeddingError::Missing { id })?;
            engine::embed(cfg, &self.row.view(row)?, 0, x);
        }
        Ok(out)
    }

    /// The batch asked for by [`Embedding::wanted`] is embedded: its rows may go.
    pub fn release(&mut self) {
        if let Table::Sharded(c) = &mut self.table {
            c.pinned.clear();
            c.trim();
        }
    }
}

/// Rows by id, the least recently used dropped first once they take more than `max_bytes`
/// (rows pinned for the batch being embedded excepted).
struct RowCache {
    max_bytes: u64,
    bytes: usize,
    tick: u64,
    rows: HashMap<u32, (Vec<u8>, u64)>,
    /// Ids by when they were last used.
    order: BTreeMap<u64, u32>,
    pinned: HashSet<u32>,
}

impl RowCache {
    fn new(max_bytes: u64) -> Self {
        RowCache {
            max_bytes,
            bytes: 0,
            tick: 0,
            rows: HashMap::new(),
            order: BTreeMap::new(),
            pinned: HashSet::new(),
        }
    }

    fn touch(&mut self, id: u32) {
        self.tick += 1;
        if let Some((_, t)) = self.rows.get_mut(&id) {
            self.order.remove(t);
            *t = self.tick;
            self.order.insert(self.tick, id);
        }
    }

    fn insert(&mut self, id: u32, row: &[u8]) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.rows.entry(id) {
            e.insert((row.to_vec(), 0));
            self.bytes += row.len();
        }
        self.touch(id);
        self.trim();
    }

    fn get(&mut self, id: u32) -> Option<&[u8]> {
        self.touch(id);
        self.rows.get(&id).map(|(r, _)| r.as_slice())
    }

    fn trim(&mut self) {
        while self.bytes as u64 > self.max_bytes {
            let Some((&t, &id)) = self.order.iter().find(|&(_, id)| !self.pinned.contains(id))
            else {
                return;
            };
            self.order.remove(&t);
            if let Some((row, _)) = self.rows.remove(&id) {
                self.bytes -= row.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ids: &[u32], row_bytes: usize) -> RowsMessage {
        RowsMessage {
            candidates: None,
            health: None,
            logits: Vec::new(),
            ids: ids.to_vec(),
            row_bytes,
            rows: ids
                .iter()
                .flat_map(|&id| vec![id as u8; row_bytes])
                .collect(),
        }
    }

    #[test]
    fn the_row_cache_keeps_the_most_recent_rows_within_its_bytes() {
        let mut c = RowCache::new(3 * 4);
        for id in 0..3 {
            c.insert(id, &[id as u8; 4]);
        }
        assert_eq!(c.bytes, 12);
        // Using 0 makes 1 the least recent: the fourth row pushes it out.
        assert!(c.get(0).is_some());
        c.insert(3, &[3; 4]);
        assert!(c.rows.contains_key(&0) && !c.rows.contains_key(&1));
        assert_eq!((c.bytes, c.rows.len(), c.order.len()), (12, 3, 3));
        // Inserting a row held already changes nothing but its recency.
        c.insert(2, &[2; 4]);
        assert_eq!(c.bytes, 12);
        // Pinned rows stay, past the bound until unpinned.
        c.pinned = [0, 2, 3].into_iter().collect();
        c.insert(5, &[5; 4]);
        assert!([0, 2, 3].iter().all(|id| c.rows.contains_key(id)));
        assert!(!c.rows.contains_key(&5), "the one row not pinned went");
        c.pinned = [0, 2, 3, 4].into_iter().collect();
        c.insert(4, &[4; 4]);
        assert_eq!(c.bytes, 16);
        c.pinned.clear();
        c.trim();
        assert_eq!(c.bytes, 12);
        assert!(!c.rows.contains_key(&0), "the least recent went");
        // A cache of 0 bytes keeps nothing once unpinned.
        let mut none = RowCache::new(0);
        none.insert(1, &[1]);
        assert!(none.rows.is_empty() && none.order.is_empty());
    }

    fn sharded(cache_bytes: u64) -> Embedding {
        Embedding {
            row: TensorSlot {
                dtype: knot::DType::F32,
                rows: 1,
                cols: 1,
                bytes: 0..4,
            },
            vocab: 10,
            table: Table::Sharded(RowCache::new(cache_bytes)),
            counters: EmbedCounters::default(),
        }
    }

    #[test]
    fn rows_asked_for_stay_until_embedded_and_are_counted() {
        let mut e = sharded(4);
        assert_eq!(e.wanted(&[3, 1, 3], false).unwrap(), [1, 3]);
        assert!(matches!(
            e.wanted(&[10], false),
            Err(EngineError::TokenOutOfRange { id: 10, vocab: 10 })
        ));
        assert_eq!(e.wanted(&[3, 1, 3], false).unwrap(), [1, 3]);
        // From a station whose slice does not hold 3: refused whole.
        assert_eq!(
            e.add(&msg(&[1, 3], 4), 0..2, true),
            Err(EmbeddingError::Outside {
                id: 3,
                start: 0,
                end: 2
            })
        );
        e.add(&msg(&[1], 4), 0..5, true).unwrap();
        e.add(&msg(&[3], 4), 0..5, true).unwrap();
        // Both kept although the cache holds one row: they are pinned for this batch.
        assert!(e.wanted(&[3, 1, 3], false).unwrap().is_empty());
        let cfg = tiny_config();
        let x = e.embed(&cfg, &[3, 1, 3]).unwrap();
        let v = |b: u8| f32::from_le_bytes([b; 4]);
        assert_eq!(x, [v(3), v(1), v(3)]);
        assert_eq!(e.rows(), 2, "pinned until released");
        e.release();
        assert_eq!(e.rows(), 1, "unpinned, trimmed to the cache's bound");
        let missing = e.embed(&cfg, &[1]).unwrap_err().to_string();
        assert!(missing.contains(&EmbeddingError::Missing { id: 1 }.to_string()));
        e.add(&msg(&[7], 4), 5..10, false).unwrap();
        assert!(e.wanted(&[7], true).unwrap().is_empty());
        assert_eq!(e.wanted(&[1], true).unwrap(), [1]);
        assert_eq!(
            e.counters,
            EmbedCounters {
                rounds: 3,
                misses: 1,
                rows_fetched: 2,
                rows_riding: 1
            }
        );
    }

    fn tiny_config() -> ModelConfig {
        serde_json::from_value(serde_json::json!({
            "n_layers": 1, "dim": 1, "n_heads": 1, "n_kv_heads": 1, "head_dim": 1,
            "ffn_dim": 1, "vocab_size": 10, "context_length": 8, "rope_theta": 10000.0,
            "rope_style": "neox", "rope_dim": 1, "norm_eps": 1e-5,
            "tie_word_embeddings": true
        }))
        .unwrap()
    }
}
