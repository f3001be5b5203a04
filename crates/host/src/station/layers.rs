//! A layer station: runs a contiguous range of layers on hidden states arriving on the wire,
//! keeping that range's KV cache for each conversation.

use std::collections::HashMap;
use std::ops::Range;

use engine::{EngineError, KvCache, KvType, LayerWeights, Session};
use knot::ModelConfig;

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
    #[error("this station keeps at most {max} conversations")]
    Full { max: usize },
}

/// One station's share of a model: its layers' run state and a KV cache per conversation.
pub struct LayerStation {
    session: Session,
    /// The conversation whose KV the session holds now.
    current: Option<u64>,
    parked: HashMap<u64, KvCache>,
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
            self.parked.get(&conversation).map_or(0, KvCache::len)
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

    /// Drops everything held for `conversation`.
    pub fn forget(&mut self, conversation: u64) {
        if self.current == Some(conversation) {
            // The session keeps the emptied cache for the next conversation to take.
            self.session.reset();
            self.current = None;
        } else {
            self.parked.remove(&conversation);
        }
    }

    /// Puts `conversation`'s KV cache in the session, parking the one there.
    fn switch_to(&mut self, conversation: u64) -> Result<(), StationError> {
        if self.current == Some(conversation) {
            return Ok(());
        }
        let mut incoming = match self.parked.remove(&conversation) {
            Some(kv) => kv,
            None if self.parked.len() + 1 >= self.max_conversations && self.current.is_some() => {
                return Err(StationError::Full {
                    max: self.max_conversations,
                })
            }
            None => self.session.new_kv(),
        };
        self.session.swap_kv(&mut incoming)?;
        if let Some(previous) = self.current.replace(conversation) {
            self.parked.insert(previous, incoming);
        }
        Ok(())
    }
}
