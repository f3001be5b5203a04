//! A layer station: runs a contiguous range of layers on hidden states arriving on the wire,
//! keeping that range's KV cache for each conversation.

use std::collections::HashMap;
use std::ops::Range;

use engine::{EngineError, KvCache, KvType, LayerWeights, Session};
use knot::ModelConfig;

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
}

/// One station's share of a model: its layers' run state and a KV cache per conversation.
pub struct LayerStation {
    session: Session,
    /// The conversation whose KV the session holds now.
    current: Option<u64>,
    /// Other conversations' caches, with when each was last used.
    parked: HashMap<u64, (KvCache, u64)>,
    clock: u64,
    /// The ids a kept conversation's KV holds, as the coordinator said when it ended.
    kept: HashMap<u64, Vec<u32>>,
    max_conversations: usize,
    max_batch: usize,
}

impl LayerStation {
    /// A station running `layers` of `cfg`, holding up to `max_ctx` positions for each of at
    /// most `max_conversations` conversations, in batches of at most `max_batch` positions.
    pub fn new(
        cfg: &ModelConfig,
        layers: Range<usize>,
        max_ctx: usize,
        kv_type: KvType,
        max_batch: usize,
        max_conversations: usize,
    ) -> Result<Self, StationError> {
        Ok(LayerStation {
            session: Session::for_layers(cfg, layers, max_ctx, kv_type)?,
            current: None,
            parked: HashMap::new(),
            clock: 0,
            kept: HashMap::new(),
            max_conversations: max_conversations.max(1),
            max_batch: max_batch.max(1),
        })
    }

    pub fn layers(&self) -> Range<usize> {
        self.session.layers()
    }

    /// Positions held for `conversation` (0 for one it has not seen).
    pub fn position(&self, conversation: u64) -> usize {
        if self.current == Some(conversation) {
            self.session.position()
        } else {
            self.parked.get(&conversation).map_or(0, |(kv, _)| kv.len())
        }
    }

    /// Runs the batch in `msg` through this station's layers (`weights[i]` is layer
    /// `layers().start + i`) and returns the hidden states for the next station, in the element
    /// type they came in. A batch that fails leaves the conversation as it was before it.
    pub fn step(&mut self, msg: &[u8], weights: &[LayerWeights]) -> Result<Vec<u8>, StationError> {
        let layers = self.session.layers();
        if weights.len() != layers.len() {
            return Err(StationError::Weights {
                got: weights.len(),
                start: layers.start,
                end: layers.end,
            });
        }
        let dim = self.session.config().dim;
        let elem = wire::elem_of(msg)?;
        let h = wire::decode(msg, self.max_batch.saturating_mul(dim))?;
        if h.dim as usize != dim {
            return Err(StationError::Width {
                got: h.dim,
                want: dim,
            });
        }
        self.switch_to(h.conversation)?;
        let held = self.session.position();
        if held != h.pos as usize {
            return Err(StationError::Position {
                conversation: h.conversation,
                held,
                got: h.pos,
            });
        }
        let out = self
            .run(&h.values, weights, layers.start)
            .map(|values| Hidden {
                values: values.to_vec(),
                ..h
            });
        match out {
            Ok(out) => Ok(wire::encode(&out, elem)?),
            Err(e) => {
                if !self.session.abort_batch() {
                    // A long batch overwrote a sliding window's ring: the conversation is lost,
                    // and says so by holding no positions.
                    self.session.reset();
                }
                Err(e.into())
            }
        }
    }

    fn run(
        &mut self,
        hidden: &[f32],
        weights: &[LayerWeights],
        first: usize,
    ) -> Result<&[f32], EngineError> {
        self.session.begin_hidden(hidden)?;
        for (i, w) in weights.iter().enumerate() {
            self.session.run_layer(first + i, w)?;
        }
        self.session.finish_hidden()
    }

    /// Forgets `conversation`'s positions from `pos` on (a rejected draft, an edited turn).
    pub fn rewind(&mut self, conversation: u64, pos: usize) -> Result<(), StationError> {
        self.switch_to(conversation)?;
        Ok(self.session.rewind(pos)?)
    }

    /// Records that `conversation`'s KV holds the positions of `ids` (it must hold exactly
    /// that many), so that a later request sharing a prefix of them can claim it.
    pub fn keep(&mut self, conversation: u64, ids: Vec<u32>) -> Result<(), StationError> {
        let held = self.position(conversation);
        if held != ids.len() {
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
        self.switch_to(conversation)?;
        if self.session.earliest_rewind() > len || self.session.rewind(len).is_err() {
            return Ok(false);
        }
        self.kept.remove(&conversation);
        Ok(true)
    }

    /// Drops everything held for `conversation`.
    pub fn forget(&mut self, conversation: u64) {
        self.kept.remove(&conversation);
        if self.current == Some(conversation) {
            // The session keeps the emptied cache for the next conversation to take.
            self.session.reset();
            self.current = None;
        } else {
            self.parked.remove(&conversation);
        }
    }

    /// Puts `conversation`'s KV cache in the session, parking the one there. A station is a
    /// cache: when it holds its most conversations, the one used least recently makes room
    /// (the coordinator checks by claim before it counts on any, so a lost one is a miss).
    fn switch_to(&mut self, conversation: u64) -> Result<(), StationError> {
        if self.current == Some(conversation) {
            return Ok(());
        }
        let held = self.parked.len() + usize::from(self.current.is_some());
        let mut incoming = match self.parked.remove(&conversation) {
            Some((kv, _)) => kv,
            None if held >= self.max_conversations => {
                let oldest = self
                    .parked
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(&c, _)| c);
                match oldest.and_then(|c| self.parked.remove(&c).map(|(kv, _)| (c, kv))) {
                    Some((c, mut kv)) => {
                        self.kept.remove(&c);
                        kv.clear();
                        kv
                    }
                    None => {
                        // Only the one in the session: it goes.
                        if let Some(c) = self.current.take() {
                            self.kept.remove(&c);
                        }
                        self.session.reset();
                        self.session.new_kv()
                    }
                }
            }
            None => self.session.new_kv(),
        };
        self.session.swap_kv(&mut incoming)?;
        self.clock += 1;
        if let Some(previous) = self.current.replace(conversation) {
            self.parked.insert(previous, (incoming, self.clock));
        }
        Ok(())
    }
}
