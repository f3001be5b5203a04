//! The coordinator's side of a split model: it holds the tokenizer and the decode loop
//! (sampling, constraints, stop rules — the same `Generation` a whole host runs), embeds ids
//! from single rows of the embedding table, and hands the caller wire messages to carry through
//! the stations. The caller (the Worker) does the carrying: it sends each message through the
//! layer stations in order, fans the last one out to the head shards, and gives their answers
//! back to [`Coordinator::pick`].

use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;

use engine::decode::{Emitted, GenerateOptions, Generation};
use engine::tokenizer::Tokenizer;
use knot::{Knot, ModelConfig, ReadOptions};

use super::gather::{fold, join_logits, vocab_slices, Answer, Folded};
use super::shard::{open_index, EmbeddingRows};
use super::wire::{self, Elem, Hidden};
use crate::host::{HostError, MAX_TOKENIZER_BYTES};
use crate::reader::Reader;

/// What a pick says.
#[derive(Debug)]
pub enum Pick {
    /// The next token.
    Token(Box<Emitted>),
    /// Some head shards did not answer in time: ask these slots again.
    Retry(Vec<usize>),
}

/// What the coordinator reads once and shares with its async calls.
pub struct Model {
    pub reader: Reader,
    pub knot: Knot,
    pub tokenizer: Rc<Tokenizer>,
    rows: EmbeddingRows,
    /// Positions a conversation may hold (the stations are opened for as many).
    pub context: usize,
    /// Positions per message (the stations' largest batch).
    pub max_batch: usize,
    pub slices: Vec<Range<usize>>,
}

impl Model {
    /// Reads the index and the tokenizer, nothing of the weights.
    pub async fn open(
        reader: Reader,
        opts: &ReadOptions,
        context: usize,
        max_batch: usize,
        head_shards: usize,
    ) -> Result<Model, HostError> {
        let knot = open_index(&reader, opts).await?;
        let tok = knot.tokenizer_range();
        if tok.end - tok.start > MAX_TOKENIZER_BYTES {
            return Err(HostError::TooLarge {
                what: "the tokenizer blob".into(),
                bytes: tok.end - tok.start,
                max: MAX_TOKENIZER_BYTES,
            });
        }
        let blob = reader.read(tok.start, tok.end).await?;
        let tokenizer = Rc::new(Tokenizer::from_data(&Knot::parse_tokenizer(&blob)?)?);
        let cfg = &knot.meta.config;
        let slices = vocab_slices(cfg.vocab_size, head_shards);
        if slices.is_empty() {
            return Err(HostError::InvalidOption(format!(
                "{head_shards} head shards for a vocabulary of {}",
                cfg.vocab_size
            )));
        }
        if max_batch == 0 || context == 0 {
            return Err(HostError::InvalidOption(
                "maxContext and maxBatch must be at least 1".into(),
            ));
        }
        Ok(Model {
            rows: EmbeddingRows::locate(&knot)?,
            context: context.min(cfg.context_length.max(1)),
            max_batch,
            slices,
            tokenizer,
            knot,
            reader,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.knot.meta.config
    }

    /// The messages carrying `ids` into conversation `conversation` from position `pos`: one
    /// per `max_batch` positions, each embedded from the rows of its ids.
    pub async fn messages(
        &self,
        conversation: u64,
        pos: usize,
        ids: &[u32],
    ) -> Result<Vec<Vec<u8>>, HostError> {
        let cfg = self.config();
        let mut out = Vec::new();
        for (i, chunk) in ids.chunks(self.max_batch).enumerate() {
            let values = self.rows.embed(&self.reader, cfg, chunk).await?;
            let h = Hidden {
                conversation,
                pos: u32::try_from(pos + i * self.max_batch).unwrap_or(u32::MAX),
                dim: cfg.dim as u32,
                values,
            };
            out.push(
                wire::encode(&h, Elem::F32).map_err(|e| HostError::InvalidOption(e.to_string()))?,
            );
        }
        Ok(out)
    }
}

/// One conversation's decode state on the coordinator.
#[derive(Default)]
pub struct Conversation {
    pub id: u64,
    generation: Option<Generation>,
    /// The picked token not yet sent through the stations.
    pending: Option<u32>,
    /// Positions the stations hold (once the messages handed out have gone through).
    pub pos: usize,
    /// The ids of those positions, and of the messages handed out.
    ids: Vec<u32>,
}

impl Conversation {
    /// Begins a generation of conversation `id` from `prompt` (the stations hold nothing of it
    /// yet): the prompt's ids to embed and carry through, after checking the options.
    pub fn start(
        model: &Model,
        id: u64,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Conversation, HostError> {
        Self::resume(model, id, prompt, 0, opts)
    }

    /// Like [`Conversation::start`], for a conversation whose first `kept` positions (a prefix
    /// of `prompt`) every layer station still holds: only the rest of the prompt is carried.
    pub fn resume(
        model: &Model,
        id: u64,
        prompt: &[u32],
        kept: usize,
        opts: &GenerateOptions,
    ) -> Result<Conversation, HostError> {
        if kept >= prompt.len() && !prompt.is_empty() {
            return Err(HostError::InvalidOption(format!(
                "a kept prefix of {kept} positions leaves nothing of a {}-token prompt to run",
                prompt.len()
            )));
        }
        if prompt.is_empty() {
            return Err(HostError::EmptyPrompt);
        }
        if opts.draft.resolve(None).is_some() {
            return Err(HostError::InvalidOption(
                "draft does not apply to a model split across stations".into(),
            ));
        }
        if opts.continue_session || opts.reuse_prefix {
            return Err(HostError::InvalidOption(
                "continue and reusePrefix do not apply to a model split across stations".into(),
            ));
        }
        if prompt.len() >= model.context {
            return Err(HostError::PromptTooLong {
                tokens: prompt.len(),
                context: model.context,
            });
        }
        let cfg = model.config();
        let mut generation = Generation::new(
            opts,
            model.tokenizer.clone(),
            &cfg.eos_ids,
            model.context - prompt.len(),
        )?;
        generation.accept_context(prompt);
        Ok(Conversation {
            id,
            generation: Some(generation),
            pending: None,
            pos: kept,
            ids: prompt.to_vec(),
        })
    }

    /// The ids still to carry through before the first pick (the prompt after the kept prefix).
    pub fn prompt_rest(&self) -> &[u32] {
        &self.ids[self.pos..]
    }

    /// The ids whose positions the stations hold now.
    pub fn held(&self) -> &[u32] {
        &self.ids[..self.pos.min(self.ids.len())]
    }

    /// Picks the next token from the head shards' answers (slot `i` answers `model.slices[i]`)
    /// to the last message, which carried `positions` positions.
    pub fn pick(
        &mut self,
        model: &Model,
        answers: Vec<Answer<Vec<f32>>>,
        positions: usize,
    ) -> Result<Pick, HostError> {
        let generation = self
            .generation
            .as_mut()
            .filter(|g| g.finished().is_none())
            .ok_or(HostError::NoContext)?;
        if answers.len() != model.slices.len() {
            return Err(HostError::InvalidOption(format!(
                "{} answers for {} head shards",
                answers.len(),
                model.slices.len()
            )));
        }
        let parts = match fold(answers) {
            Folded::Accept(parts) => parts,
            Folded::Abstain { retry } => return Ok(Pick::Retry(retry)),
            Folded::Decline { slot, error } => {
                return Err(HostError::Station(match slot {
                    Some(s) => format!("head shard {s}: {error}"),
                    None => error,
                }))
            }
        };
        let mut logits =
            join_logits(&model.slices, &parts).map_err(|e| HostError::Station(e.to_string()))?;
        let emitted = generation.next(&mut logits)?;
        self.pos += positions;
        self.pending = Some(emitted.id);
        Ok(Pick::Token(Box::new(emitted)))
    }

    /// The token to carry through next, or `None` when the generation has ended (its last
    /// token needs no forward pass).
    pub fn next_ids(&mut self) -> Option<Vec<u32>> {
        let open = self
            .generation
            .as_ref()
            .is_some_and(|g| g.finished().is_none());
        let next = match open {
            true => self.pending.take(),
            false => None,
        };
        next.map(|id| {
            self.ids.push(id);
            vec![id]
        })
    }
}

/// The conversations the layer stations were asked to keep, newest last, with the ids their KV
/// holds: where a new prompt's prefix may already be.
#[derive(Default)]
pub struct PrefixTable {
    max: usize,
    entries: VecDeque<(u64, Vec<u32>)>,
}

/// A prefix the stations may hold: ask each for `(hash, len)` of `conversation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub conversation: u64,
    pub len: usize,
    pub hash: u64,
}

impl PrefixTable {
    /// A table of at most `max` conversations (fewer than a station keeps, so that the one
    /// generating always has room).
    pub fn new(max: usize) -> Self {
        PrefixTable {
            max,
            entries: VecDeque::new(),
        }
    }

    /// The kept conversation sharing the longest prefix with `prompt`, leaving at least one id
    /// of the prompt to run; it leaves the table (a claim either continues it or drops it).
    pub fn take_best(&mut self, prompt: &[u32]) -> Option<Replay> {
        let limit = prompt.len().saturating_sub(1);
        let (at, len) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, (_, ids))| {
                let common = ids.iter().zip(prompt).take_while(|(a, b)| a == b).count();
                (i, common.min(limit))
            })
            .filter(|&(_, len)| len > 0)
            .max_by_key(|&(i, len)| (len, i))?;
        let (conversation, _) = self.entries.remove(at)?;
        Some(Replay {
            conversation,
            len,
            hash: super::prefix_hash(&prompt[..len]),
        })
    }

    /// Records `conversation` as kept with `ids`; returns the conversations pushed out (to be
    /// forgotten by the stations).
    pub fn remember(&mut self, conversation: u64, ids: Vec<u32>) -> Vec<u64> {
        self.entries.retain(|(c, _)| *c != conversation);
        if self.max == 0 {
            return vec![conversation];
        }
        self.entries.push_back((conversation, ids));
        let mut out = Vec::new();
        while self.entries.len() > self.max {
            if let Some((c, _)) = self.entries.pop_front() {
                out.push(c);
            }
        }
        out
    }

    /// Every conversation in the table, which it forgets (to tell the stations to, too).
    pub fn drain(&mut self) -> Vec<u64> {
        self.entries.drain(..).map(|(c, _)| c).collect()
    }
}

/// Whether a prefill may be skipped: only when some stations were asked and every one answered
/// that it holds the prefix (`Some(true)`); a miss, an error or no answer (`None`) → prefill.
pub fn replay_verdict(answers: &[Option<bool>]) -> bool {
    !answers.is_empty() && answers.iter().all(|a| *a == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_verdict_list_never_skips_prefill() {
        assert!(!replay_verdict(&[]));
        assert!(replay_verdict(&[Some(true)]));
        assert!(replay_verdict(&[Some(true), Some(true), Some(true)]));
        assert!(!replay_verdict(&[Some(true), Some(false)]));
        assert!(!replay_verdict(&[Some(true), None]));
        assert!(!replay_verdict(&[None]));
    }

    #[test]
    fn the_table_finds_the_longest_shared_prefix_and_forgets_the_oldest() {
        let mut t = PrefixTable::new(2);
        assert!(t.remember(1, vec![1, 2, 3, 4]).is_empty());
        assert!(t.remember(2, vec![1, 2, 9]).is_empty());
        assert_eq!(t.remember(3, vec![5, 6]), vec![1]);
        // Conversation 1 is gone; 2 shares [1, 2] with this prompt.
        let r = t.take_best(&[1, 2, 3, 4, 5]).unwrap();
        assert_eq!((r.conversation, r.len), (2, 2));
        assert_eq!(r.hash, crate::station::prefix_hash(&[1, 2]));
        // Taken: asking again finds nothing for it.
        assert!(t.take_best(&[1, 2, 3]).is_none());
        // A prompt equal to what is kept still runs its last id.
        let r = t.take_best(&[5, 6]).unwrap();
        assert_eq!((r.conversation, r.len), (3, 1));
        assert!(t.take_best(&[7]).is_none());
        assert!(PrefixTable::new(0).remember(4, vec![1]) == vec![4]);
    }
}
