//! A layer station: runs a contiguous range of layers on hidden states arriving on the wire,
//! keeping that range's KV cache for each conversation. A message carries one conversation's
//! batch; a bundle ([`super::bundle`]) carries several conversations' batches, which run through
//! the layers together (one read of each weight for all of them, [`engine::Joint`]).

use std::collections::HashMap;
use std::ops::Range;

use engine::{EngineError, Joint, KvCache, KvType, LayerWeights, Session};
use knot::ModelConfig;

use super::bundle::{self, BundleError};
use super::rows::RowsError;
use super::wire::{self, Hidden, WireError};

#[derive(Debug, thiserror::Error)]
pub enum StationError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("hidden states of width {got} for a model of width {want}")]
    Width { got: u32, want: usize },
    #[error("conversation {conversation:#x}: this station holds {held} positions, the batch starts at {got}")]
    Position {
        conversation: u64,
        held: usize,
        got: u32,
    },
    #[error("{got} layer weights for a station running layers {start}..{end}")]
    Weights {
        got: usize,
        start: usize,
        end: usize,
    },
    #[error(transparent)]
    Rows(#[from] RowsError),
    #[error("row {id} is not in this head station's slice {start}..{end}")]
    RowOutside { id: u32, start: usize, end: usize },
    #[error("{got} rows asked for at once, more than the {max} a head station answers")]
    TooManyRows { got: usize, max: usize },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("a bundle of {got} positions, more than the {max} a batch takes")]
    BundleRows { got: usize, max: usize },
    #[error("a bundle in which no conversation wants logits was sent for logits")]
    NoLogits,
    #[error("conversation {0:#x} appears twice in one bundle")]
    Duplicate(u64),
    #[error("a bundle of {got} conversations, more than the {max} this station holds")]
    Conversations { got: usize, max: usize },
    #[error("step {0} is no longer held here (a head station keeps its last few steps)")]
    StepGone(u64),
    #[error("part {part} asked for again, of a step with {parts} parts wanting logits")]
    PartOutside { part: usize, parts: usize },
    #[error("{got} candidates asked for, more than the {max} a head station sends at once")]
    TooManyCandidates { got: usize, max: usize },
}

/// One station's share of a model: its layers' run state and a KV cache per conversation.
pub struct LayerStation {
    cfg: ModelConfig,
    layers: Range<usize>,
    /// Each conversation's KV cache, with when it was last used.
    held: HashMap<u64, (KvCache, u64)>,
    /// What a batch runs in: a conversation's KV cache is swapped into one of these for the
    /// batch and back out after it (their own caches stay empty).
    sessions: Vec<Session>,
    /// The activations of a batch, shared by its conversations.
    joint: Joint,
    clock: u64,
    /// The ids a kept conversation's KV holds, as the coordinator said when it ended.
    kept: HashMap<u64, Vec<u32>>,
    max_ctx: usize,
    kv_type: KvType,
    max_conversations: usize,
    max_batch: usize,
}

impl LayerStation {
    /// A station running `layers` of `cfg`, holding up to `max_ctx` positions for each of at
    /// most `max_conversations` conversations, in batches of at most `max_batch` positions (a
    /// bundle's conversations together).
    pub fn new(
        cfg: &ModelConfig,
        layers: Range<usize>,
        max_ctx: usize,
        kv_type: KvType,
        max_batch: usize,
        max_conversations: usize,
    ) -> Result<Self, StationError> {
        let first = Session::for_layers(cfg, layers.clone(), max_ctx, kv_type)?;
        Ok(LayerStation {
            cfg: cfg.clone(),
            layers,
            held: HashMap::new(),
            sessions: vec![first],
            joint: Joint::new(cfg),
            clock: 0,
            kept: HashMap::new(),
            max_ctx,
            kv_type,
            max_conversations: max_conversations.max(1),
            max_batch: max_batch.max(1),
        })
    }

    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    /// Positions held for `conversation` (0 for one it has not seen).
    pub fn position(&self, conversation: u64) -> usize {
        self.held.get(&conversation).map_or(0, |(kv, _)| kv.len())
    }

    /// Runs the batch in `msg` through this station's layers (`weights[i]` is layer
    /// `layers().start + i`) and returns the hidden states for the next station, in the element
    /// type they came in. A bundle of several conversations' batches runs them together and
    /// answers a bundle of their outputs, in order, with the flags they came with. A batch that
    /// fails leaves every conversation in it as it was before it.
    pub fn step(&mut self, msg: &[u8], weights: &[LayerWeights]) -> Result<Vec<u8>, StationError> {
        if weights.len() != self.layers.len() {
            return Err(StationError::Weights {
                got: weights.len(),
                start: self.layers.start,
                end: self.layers.end,
            });
        }
        let max_values = self.max_batch.saturating_mul(self.cfg.dim);
        if !bundle::is(msg, bundle::HIDDEN) {
            let elem = wire::elem_of(msg)?;
            let h = wire::decode(msg, max_values)?;
            let mut out = self.run(vec![h], &[false], weights)?;
            return Ok(wire::encode(&out.remove(0), elem)?);
        }
        let parts =
            bundle::decode(msg, bundle::HIDDEN, self.max_conversations).map_err(|e| match e {
                BundleError::Parts { got, max } => StationError::Conversations {
                    got: got as usize,
                    max,
                },
                e => e.into(),
            })?;
        let (mut batch, mut elems, mut flags) = (Vec::new(), Vec::new(), Vec::new());
        // A part's sums block is the head shards' business: carried along as it came.
        let mut blocks = Vec::new();
        let mut rows = 0usize;
        for (f, bytes) in &parts {
            let (sums, bytes) = bundle::SumsAsk::split(*f, bytes)?;
            blocks.push(sums.map(|s| s.encode()).unwrap_or_default());
            let h = wire::decode(bytes, max_values)?;
            rows += h.rows();
            if rows > self.max_batch {
                return Err(StationError::BundleRows {
                    got: rows,
                    max: self.max_batch,
                });
            }
            elems.push(wire::elem_of(bytes)?);
            flags.push(*f);
            batch.push(h);
        }
        let rewinds: Vec<bool> = flags.iter().map(|f| f & bundle::REWIND != 0).collect();
        let out = self.run(batch, &rewinds, weights)?;
        let encoded = (out.iter().zip(&elems).zip(blocks))
            .map(|((h, &e), mut block)| {
                block.extend_from_slice(&wire::encode(h, e)?);
                Ok::<_, StationError>(block)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(bundle::encode(
            bundle::HIDDEN,
            flags.iter().zip(&encoded).map(|(&f, m)| (f, m.as_slice())),
        ))
    }

    /// Runs each conversation's batch (one per conversation, checked before anything changes)
    /// through the layers together. A conversation whose `rewinds` is set may be held past its
    /// batch's first position (a rejected draft's positions): they are dropped first.
    fn run(
        &mut self,
        batch: Vec<Hidden>,
        rewinds: &[bool],
        weights: &[LayerWeights],
    ) -> Result<Vec<Hidden>, StationError> {
        let dim = self.cfg.dim;
        for (i, h) in batch.iter().enumerate() {
            if h.dim as usize != dim {
                return Err(StationError::Width {
                    got: h.dim,
                    want: dim,
                });
            }
            if batch[..i].iter().any(|o| o.conversation == h.conversation) {
                return Err(StationError::Duplicate(h.conversation));
            }
            let (held, pos) = (self.position(h.conversation), h.pos as usize);
            let rewinds = rewinds.get(i).copied().unwrap_or(false) && held > pos;
            if held != pos && !rewinds {
                return Err(StationError::Position {
                    conversation: h.conversation,
                    held,
                    got: h.pos,
                });
            }
            let earliest =
                (self.held.get(&h.conversation)).map_or(0, |(kv, _)| kv.earliest_rewind());
            if rewinds && earliest > pos {
                return Err(EngineError::Rewind {
                    to: pos,
                    held,
                    earliest,
                }
                .into());
            }
        }
        // Checked above: each drop succeeds.
        for h in &batch {
            if let Some((kv, _)) = self.held.get_mut(&h.conversation) {
                if kv.len() > h.pos as usize {
                    kv.truncate(h.pos as usize);
                }
            }
        }
        while self.sessions.len() < batch.len() {
            let s =
                Session::for_layers(&self.cfg, self.layers.clone(), self.max_ctx, self.kv_type)?;
            self.sessions.push(s);
        }
        // Each conversation's cache into a session for the batch; the empty ones wait here.
        let mut empty = Vec::with_capacity(batch.len());
        for (i, h) in batch.iter().enumerate() {
            let mut kv = self.take(h.conversation, &batch);
            self.sessions[i].swap_kv(&mut kv)?;
            empty.push(kv);
        }
        let first = self.layers.start;
        let mut sessions: Vec<&mut Session> = self.sessions[..batch.len()].iter_mut().collect();
        let result = run_joint(&mut self.joint, &mut sessions, &batch, weights, first);
        if result.is_err() {
            for s in sessions.iter_mut() {
                if !s.abort_batch() {
                    // A long batch overwrote a sliding window's ring: the conversation is lost,
                    // and says so by holding no positions.
                    s.reset();
                }
            }
        }
        self.clock += 1;
        for ((s, h), mut kv) in self.sessions.iter_mut().zip(&batch).zip(empty) {
            s.swap_kv(&mut kv)?;
            self.held.insert(h.conversation, (kv, self.clock));
        }
        let values = result?;
        Ok(batch
            .into_iter()
            .zip(values)
            .map(|(h, values)| Hidden { values, ..h })
            .collect())
    }

    /// `conversation`'s KV cache, out of the table (a new one for a conversation not held). A
    /// station is a cache: when it holds its most conversations, the one used least recently
    /// outside `batch` makes room (the coordinator checks by claim before it counts on any, so
    /// a lost one is a miss).
    fn take(&mut self, conversation: u64, batch: &[Hidden]) -> KvCache {
        if let Some((kv, _)) = self.held.remove(&conversation) {
            return kv;
        }
        let in_batch = |c: &u64| batch.iter().any(|h| h.conversation == *c);
        if self.held.len() + batch.len() > self.max_conversations {
            let oldest = self
                .held
                .iter()
                .filter(|(c, _)| !in_batch(c))
                .min_by_key(|(_, (_, t))| *t)
                .map(|(&c, _)| c);
            if let Some((c, (mut kv, _))) = oldest.and_then(|c| self.held.remove_entry(&c)) {
                self.kept.remove(&c);
                kv.clear();
                return kv;
            }
        }
        self.sessions[0].new_kv()
    }

    /// Forgets `conversation`'s positions from `pos` on (a rejected draft, an edited turn).
    pub fn rewind(&mut self, conversation: u64, pos: usize) -> Result<(), StationError> {
        let held = self.position(conversation);
        let done = match self.held.get_mut(&conversation) {
            Some((kv, _)) => kv.truncate(pos),
            None => pos == 0,
        };
        if !done {
            let earliest = self
                .held
                .get(&conversation)
                .map_or(0, |(kv, _)| kv.earliest_rewind());
            return Err(EngineError::Rewind {
                to: pos,
                held,
                earliest,
            }
            .into());
        }
        Ok(())
    }

    /// Records that `conversation`'s KV holds the positions of `ids` (at least that many: the
    /// positions past them, a rejected draft's, are dropped), so that a later request sharing a
    /// prefix of them can claim it.
    pub fn keep(&mut self, conversation: u64, ids: Vec<u32>) -> Result<(), StationError> {
        let held = self.position(conversation);
        if held > ids.len() {
            self.rewind(conversation, ids.len())?;
        } else if held != ids.len() {
            return Err(StationError::Position {
                conversation,
                held,
                got: u32::try_from(ids.len()).unwrap_or(u32::MAX),
            });
        }
        self.kept.insert(conversation, ids);
        Ok(())
    }

    /// Whether this station holds the KV of the first `len` ids of `conversation` whose hash is
    /// `hash`; if so, the conversation is rewound to them and continues from there (its kept
    /// ids are dropped: they no longer describe it). A miss changes nothing.
    pub fn claim(
        &mut self,
        conversation: u64,
        len: usize,
        hash: u64,
    ) -> Result<bool, StationError> {
        let matches = self
            .kept
            .get(&conversation)
            .is_some_and(|ids| len <= ids.len() && super::prefix_hash(&ids[..len]) == hash);
        if !matches || len == 0 {
            return Ok(false);
        }
        let Some((kv, _)) = self.held.get_mut(&conversation) else {
            return Ok(false);
        };
        if kv.earliest_rewind() > len || !kv.truncate(len) {
            return Ok(false);
        }
        self.kept.remove(&conversation);
        Ok(true)
    }

    /// Drops everything held for `conversation`.
    pub fn forget(&mut self, conversation: u64) {
        self.kept.remove(&conversation);
        self.held.remove(&conversation);
    }
}

/// The batch through the layers in `sessions` (each holding its conversation's cache), the
/// rows of all of them sharing the matmuls: each conversation's output hidden states.
fn run_joint(
    joint: &mut Joint,
    sessions: &mut [&mut Session],
    batch: &[Hidden],
    weights: &[LayerWeights],
    first: usize,
) -> Result<Vec<Vec<f32>>, EngineError> {
    for (s, h) in sessions.iter_mut().zip(batch) {
        joint.begin_hidden(s, &h.values)?;
    }
    joint.prepare(sessions)?;
    for (i, w) in weights.iter().enumerate() {
        joint.run_layer(sessions, first + i, w)?;
    }
    sessions
        .iter_mut()
        .map(|s| s.finish_hidden().map(<[f32]>::to_vec))
        .collect()
}
