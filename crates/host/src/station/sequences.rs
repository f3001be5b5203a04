//! Several conversations run together over the stations: each step is one hop through the chain
//! carrying every active conversation's rows in one bundle ([`super::bundle`]) — each decoding
//! conversation's picked token, and one chunk of the oldest prompt still running, the step
//! holding at most `max_batch` positions — so the round trips per step do not grow with the
//! number of conversations. The layer stations run the bundle's rows together, the head shards
//! answer every conversation that wants logits in one matmul, and each conversation picks its
//! token with its own decode state: what it gives alone, token for token.
//!
//! A step is [`Sequences::plan`] (the rows to fetch), [`Sequences::message`] (the bundle to
//! carry), then [`Sequences::pick`] with the head shards' answers (or [`Sequences::abandon`]
//! when the carry failed). Admissions and cancellations happen between steps.

use engine::decode::{Emitted, GenerateOptions};

use super::bundle::{self, WANTS_LOGITS};
use super::coordinator::{Conversation, Model, Pick, RowsWanted};
use super::gather::Answer;
use super::rows::RowsMessage;
use crate::error::HostError;

/// What a step did for one conversation: the token it picked (none for a prompt chunk whose
/// logits nobody reads — no event is made for those) or the error that ended it.
#[derive(Debug)]
pub struct StepEvent {
    pub id: u64,
    pub token: Result<Box<Emitted>, HostError>,
    /// The conversation ended (its last token, or an error): the stations may forget it.
    pub done: bool,
}

/// One conversation's part of the step being prepared or carried.
#[derive(Debug, Clone, Copy)]
struct Part {
    id: u64,
    positions: usize,
    logits: bool,
}

/// The conversations a coordinator runs together, in the order they were admitted.
pub struct Sequences {
    list: Vec<Conversation>,
    max: usize,
    /// The step planned (and, once `carried`, handed out as a message).
    parts: Vec<Part>,
    carried: bool,
}

fn in_flight() -> HostError {
    HostError::InvalidArgument(
        "a step is in flight: hand over its answers (pick) or abandon it first".into(),
    )
}

impl Sequences {
    /// Room for `max` conversations at once (at least 1).
    pub fn new(max: usize) -> Self {
        Sequences {
            list: Vec::new(),
            max: max.max(1),
            parts: Vec::new(),
            carried: false,
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Conversations admitted and not ended.
    pub fn active(&self) -> usize {
        self.list.len()
    }

    /// Admits conversation `id` with `prompt` between steps (see [`Conversation::start`]).
    pub fn admit(
        &mut self,
        model: &Model,
        id: u64,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<(), HostError> {
        if self.carried {
            return Err(in_flight());
        }
        if self.list.len() >= self.max {
            return Err(HostError::SequencesFull { max: self.max });
        }
        if self.list.iter().any(|c| c.id == id) {
            return Err(HostError::InvalidArgument(format!(
                "conversation {id} is already running"
            )));
        }
        self.list
            .push(Conversation::start(model, id, prompt, opts)?);
        Ok(())
    }

    /// Ends conversation `id` between steps; whether it was running.
    pub fn cancel(&mut self, id: u64) -> Result<bool, HostError> {
        if self.carried {
            return Err(in_flight());
        }
        self.parts.clear();
        let before = self.list.len();
        self.list.retain(|c| c.id != id);
        Ok(self.list.len() < before)
    }

    /// Plans the next step: every decoding conversation's token, then as much of the oldest
    /// prompt still running as the batch has room for. Returns the rows it needs that are not
    /// here (see [`Model::rows_wanted`]), or `None` when nothing runs.
    pub fn plan(&mut self, model: &Model) -> Result<Option<RowsWanted>, HostError> {
        if self.carried {
            return Err(in_flight());
        }
        self.parts.clear();
        let mut ids = Vec::new();
        let mut miss = false;
        for c in self.list.iter().filter(|c| c.decoding()) {
            self.parts.push(Part {
                id: c.id,
                positions: 1,
                logits: true,
            });
            ids.extend_from_slice(&c.pending()[..c.pending().len().min(1)]);
            miss = true;
        }
        let room = model.max_batch.saturating_sub(self.parts.len());
        if room > 0 || self.parts.is_empty() {
            if let Some(c) = self.list.iter().find(|c| !c.decoding()) {
                let left = c.pending().len();
                let positions = left.min(room.max(1));
                self.parts.push(Part {
                    id: c.id,
                    positions,
                    logits: positions == left,
                });
                ids.extend_from_slice(&c.pending()[..positions]);
            }
        }
        if self.parts.is_empty() {
            return Ok(None);
        }
        model.rows_wanted(&ids, miss).map(Some)
    }

    /// The planned step as one bundle of every part's hidden states (each row embedded from
    /// rows held: every one `plan` asked for must have been added), and whether any part wants
    /// logits (the head shards are asked only then).
    pub fn message(&mut self, model: &Model) -> Result<(Vec<u8>, bool), HostError> {
        if self.carried || self.parts.is_empty() {
            return Err(HostError::NoContext);
        }
        let mut messages = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            let c = self
                .list
                .iter_mut()
                .find(|c| c.id == p.id)
                .ok_or(HostError::NoContext)?;
            let Some((pos, ids)) = c.take(p.positions) else {
                return Err(HostError::NoContext);
            };
            match model.message(p.id, pos, &ids) {
                Ok(m) => messages.push((if p.logits { WANTS_LOGITS } else { 0 }, m)),
                Err(e) => {
                    // Ids were taken and nothing was carried: these conversations cannot go on.
                    model.release_rows();
                    self.abandon();
                    return Err(e);
                }
            }
        }
        model.release_rows();
        self.carried = true;
        let logits = self.parts.iter().any(|p| p.logits);
        let bundle = bundle::encode(
            bundle::HIDDEN,
            messages.iter().map(|(f, m)| (*f, m.as_slice())),
        );
        Ok((bundle, logits))
    }

    /// The step's outcome from the head shards' answers (slot `i` answering `model.slices[i]`,
    /// each a bundle of one answer per part wanting logits; `None` when no part wanted them):
    /// one event per conversation that picked a token or ended. A conversation whose answers
    /// fail ends with that error, alone.
    pub fn pick(
        &mut self,
        model: &Model,
        answers: Option<Vec<Answer<Vec<u8>>>>,
    ) -> Result<Vec<StepEvent>, HostError> {
        if !self.carried {
            return Err(HostError::NoContext);
        }
        self.carried = false;
        let parts = std::mem::take(&mut self.parts);
        let wanting = parts.iter().filter(|p| p.logits).count();
        // Each shard's bundle, split into one answer per part wanting logits.
        let per_shard: Vec<Vec<Answer<RowsMessage>>> = match answers {
            None if wanting > 0 => {
                let lost = "no head shard answered a step that wanted logits";
                vec![vec![Answer::Failed(lost.into()); wanting]; model.slices.len()]
            }
            None => Vec::new(),
            Some(answers) => answers
                .into_iter()
                .enumerate()
                .map(|(slot, a)| split_answer(model, slot, a, wanting))
                .collect(),
        };
        let mut events = Vec::new();
        let mut k = 0;
        for p in parts {
            let Some(at) = self.list.iter().position(|c| c.id == p.id) else {
                continue;
            };
            if !p.logits {
                self.list[at].advance(p.positions);
                continue;
            }
            let answers: Vec<_> = per_shard.iter().map(|s| s[k].clone()).collect();
            k += 1;
            let token = match self.list[at].pick(model, answers, p.positions) {
                Ok(Pick::Token(e)) => Ok(e),
                Ok(Pick::Retry(slots)) => Err(HostError::Station(format!(
                    "head shards {slots:?} gave no answer"
                ))),
                Err(e) => Err(e),
            };
            let done = token.as_ref().map_or(true, |e| e.finish_reason.is_some());
            if done {
                self.list.remove(at);
            }
            events.push(StepEvent {
                id: p.id,
                token,
                done,
            });
        }
        Ok(events)
    }

    /// Ends every conversation (the step could not be carried, or the caller gives up): their
    /// ids, for the stations to forget.
    pub fn abandon(&mut self) -> Vec<u64> {
        self.parts.clear();
        self.carried = false;
        self.list.drain(..).map(|c| c.id).collect()
    }
}

/// Head shard `slot`'s answer to a bundle, as one answer per part wanting logits (`wanting`): a
/// malformed bundle, or one with another count, is that shard's failure for every part.
fn split_answer(
    model: &Model,
    slot: usize,
    answer: Answer<Vec<u8>>,
    wanting: usize,
) -> Vec<Answer<RowsMessage>> {
    let failed = |e: String| vec![Answer::Failed(e); wanting];
    match answer {
        Answer::Missing => vec![Answer::Missing; wanting],
        Answer::Failed(e) => failed(e),
        Answer::Value(bytes) => match bundle::decode(&bytes, bundle::ANSWERS, wanting) {
            Ok(parts) if parts.len() == wanting => parts
                .into_iter()
                .map(|(_, b)| model.read_answer(slot, b))
                .collect(),
            Ok(parts) => failed(format!(
                "{} answers for {wanting} conversations",
                parts.len()
            )),
            Err(e) => failed(e.to_string()),
        },
    }
}
