//! The coordinator's side of a split model: it holds the tokenizer, the chat template and the
//! decode loop (sampling, constraints, stop rules — the same `Generation` a whole host runs),
//! embeds ids from rows it holds ([`super::embedding`]: the whole table, or rows the head
//! stations hand over), and makes the wire messages a step carries through the stations
//! ([`super::sequences`] plans the steps). The caller (the package's stations backend) does the
//! carrying. After open nothing here reads the file.
//!
//! [`Conversation`] is one sequence's decode state; [`PrefixTable`] the conversations kept on the
//! layer stations after they ended, where a new prompt's prefix may already be.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;

use engine::decode::{Emitted, GenerateOptions, Generation, PartialNext};
use engine::draft::{Drafter, PassTimes, PromptLookup, MAX_DRAFT};
use engine::health::HealthSums;
use engine::pipeline::LevelSums;
use engine::tokenizer::Tokenizer;
use knot::{Knot, ModelConfig, ReadOptions};
use serde::Serialize;

use crate::chat_template::{self, ChatTemplate, TemplateReport};
use crate::prefix::{self, PrefixStatus, WindowView};

use super::bundle::{
    SumsAsk, EVERY_LOGIT, MAX_RANGES, MAX_WATCHED, WANTS_LOGITS, WITH_HEALTH, WITH_SUMS,
};
use super::embedding::{EmbedCounters, Embedding};
use super::gather::{assemble_logits, fold, vocab_slices, Answer, Folded};
use super::head::{LogitsAsk, MAX_CANDIDATES, MAX_ROWS_PER_REQUEST, MAX_TOP_ROWS};
pub use super::options::ModelOptions;
use super::rows::{self, Limits, RowsMessage};
use super::shard::open_index;
use super::wire::{self, Elem, Hidden};
use crate::clock::now_ms;
use crate::error::HostError;
use crate::index::MAX_TOKENIZER_BYTES;
use crate::reader::Reader;

/// Embedding rows to fetch: `(head shard slot, ids)`, one `/rows` request each.
pub type RowsWanted = Vec<(usize, Vec<u32>)>;

/// What a pick says.
#[derive(Debug)]
pub enum Pick {
    /// The next token.
    Token(Box<Emitted>),
    /// Some head shards did not answer in time: ask these slots again.
    Retry(Vec<usize>),
    /// The answers do not settle the pick: ask these slots for more of this step's logits
    /// (`/again`), then [`Conversation::pick_again`].
    More(Vec<(usize, LogitsAsk)>),
}

/// How a pick from a verify step's next row gets its answers.
#[derive(Debug)]
pub enum NextRow {
    /// The step's first answers hold it: asked as this row's pick asks.
    Held(Vec<Answer<RowsMessage>>),
    /// The pick asks otherwise than the step did (its stages moved on with the draft): ask
    /// every slot again (`/again`) with these sums, then [`Conversation::pick`].
    Ask {
        asks: Vec<(usize, LogitsAsk)>,
        sums: Option<SumsAsk>,
    },
}

/// What the drafts of a generation over the stations did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftCounts {
    /// Steps picked from (each a pass through the stations), and those that carried a draft.
    pub passes: u64,
    pub verify_passes: u64,
    /// Draft tokens carried, and those the picks kept.
    pub drafted: u64,
    pub accepted: u64,
}

/// What the coordinator reads once and shares with its calls.
pub struct Model {
    pub reader: Reader,
    /// The file's index; its `meta.chat_template` is the template chats are rendered with.
    pub knot: Knot,
    pub tokenizer: Rc<Tokenizer>,
    /// Where that template came from (the option, the file, or implied by the vocabulary).
    pub chat_template: Option<TemplateReport>,
    embedding: RefCell<Embedding>,
    /// Positions a conversation may hold (the stations are opened for as many).
    pub context: usize,
    /// Positions per message (the stations' largest batch).
    pub max_batch: usize,
    pub slices: Vec<Range<usize>>,
    logit_rows: usize,
    /// What each head shard answers a step's logits with.
    logits_ask: LogitsAsk,
    /// Reads made by open.
    reads_at_open: u64,
    /// Reads and embedding counters when the latest generation began.
    generation_mark: Cell<Option<(u64, EmbedCounters)>>,
}

/// What the coordinator reports (`WasmCoordinator.stats()`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CoordinatorStats {
    pub embedding: EmbeddingReport,
    /// Reads of the file made by open (index, tokenizer, the table when resident).
    pub reads_at_open: u64,
    /// Reads of the file since open: 0, unless something brought a read back.
    pub reads_since_open: u64,
    /// Rounds of rows since open (see [`GenerationStats`]).
    pub rows: EmbedCounters,
    /// The latest generation's figures, once one began.
    pub generation: Option<GenerationStats>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddingReport {
    /// `resident` (the whole table here) or `sharded` (rows from the head stations).
    pub mode: &'static str,
    /// Rows held: the vocabulary when resident, the rows cached when sharded.
    pub rows: usize,
    pub bytes: usize,
    pub row_bytes: usize,
    /// Rows each head shard sends with its logits (0 when resident).
    pub logit_rows: usize,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerationStats {
    /// Reads of the file during it.
    pub reads: u64,
    /// Its rounds of `/rows` requests (the prompt's, and one per miss), misses, and rows
    /// fetched or riding with logits.
    pub rows: EmbedCounters,
}

impl Model {
    /// Reads the index and the tokenizer, and the embedding table when it fits the budget;
    /// nothing of the layers or the LM head.
    pub async fn open(
        reader: Reader,
        opts: &ReadOptions,
        o: ModelOptions,
    ) -> Result<Model, HostError> {
        if o.max_batch == 0 || o.context == 0 {
            return Err(HostError::InvalidOption(
                "maxContext and maxBatch must be at least 1".into(),
            ));
        }
        if o.logit_rows > MAX_TOP_ROWS {
            return Err(HostError::InvalidOption(format!(
                "logitRows must be at most {MAX_TOP_ROWS}, got {}",
                o.logit_rows
            )));
        }
        if o.candidates > MAX_CANDIDATES {
            return Err(HostError::InvalidOption(format!(
                "candidates must be at most {MAX_CANDIDATES}, got {}",
                o.candidates
            )));
        }
        let mut knot = open_index(&reader, opts).await?;
        let cfg = &knot.meta.config;
        let context = o.context.min(cfg.context_length.max(1));
        let slices = vocab_slices(cfg.vocab_size, o.head_shards);
        if slices.is_empty() {
            return Err(HostError::InvalidOption(format!(
                "{} head shards for a vocabulary of {}",
                o.head_shards, cfg.vocab_size
            )));
        }
        let tok = knot.tokenizer_range();
        if tok.end - tok.start > MAX_TOKENIZER_BYTES {
            return Err(HostError::TooLarge {
                what: "the tokenizer blob".into(),
                bytes: tok.end - tok.start,
                max: MAX_TOKENIZER_BYTES,
            });
        }
        let blob = reader.read(tok.start, tok.end);
        let embedding = Embedding::open(&reader, &knot, o.embedding, o.piece).await?;
        let tokenizer = Rc::new(Tokenizer::from_data(&Knot::parse_tokenizer(&blob.await?)?)?);
        let template = chat_template::resolve(
            knot.meta.chat_template.as_deref(),
            o.chat_template.as_deref(),
            &knot.meta.architecture,
            &tokenizer,
        );
        let chat_template = template.as_ref().map(ChatTemplate::report);
        knot.meta.chat_template = template.map(|t| t.text);
        Ok(Model {
            chat_template,
            logit_rows: if embedding.is_resident() {
                0
            } else {
                o.logit_rows
            },
            logits_ask: match o.candidates {
                0 => LogitsAsk::Every,
                n => LogitsAsk::Largest(n),
            },
            embedding: RefCell::new(embedding),
            context,
            max_batch: o.max_batch,
            slices,
            tokenizer,
            reads_at_open: reader.io.reads.get(),
            generation_mark: Cell::new(None),
            knot,
            reader,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.knot.meta.config
    }

    /// Whether the whole embedding table is here (else the head stations hand rows over).
    pub fn embedding_resident(&self) -> bool {
        self.embedding.borrow().is_resident()
    }

    /// Rows of its top-scoring ids each head shard is to send with its logits (0 when the
    /// table is resident).
    pub fn logit_rows(&self) -> usize {
        self.logit_rows
    }

    /// What each head shard answers a step's logits with (the route's `pick`).
    pub fn logits_ask(&self) -> LogitsAsk {
        self.logits_ask
    }

    /// The rows `ids` need that are not here, by the head shard holding them: `(slot, ids)`,
    /// one request each (of at most [`MAX_ROWS_PER_REQUEST`] ids), all at once; none when the
    /// table is resident or the rows are cached. A non-empty answer counts a round (`miss`: for
    /// a picked token).
    pub fn rows_wanted(&self, ids: &[u32], miss: bool) -> Result<RowsWanted, HostError> {
        let want = self.embedding.borrow_mut().wanted(ids, miss)?;
        let mut by_slot: Vec<(usize, Vec<u32>)> = Vec::new();
        for id in want {
            let slot = self.slices.partition_point(|r| r.end <= id as usize);
            match by_slot.last_mut() {
                Some((s, list)) if *s == slot && list.len() < MAX_ROWS_PER_REQUEST => list.push(id),
                _ => by_slot.push((slot, vec![id])),
            }
        }
        Ok(by_slot)
    }

    /// Keeps the rows head shard `slot` answered to a `/rows` request.
    pub fn add_rows(&self, slot: usize, bytes: &[u8]) -> Result<(), HostError> {
        let slice = self.slice(slot)?;
        let mut embedding = self.embedding.borrow_mut();
        let limits = Limits {
            max_logits: 0,
            max_rows: slice.len().min(MAX_ROWS_PER_REQUEST),
            row_bytes: embedding.row_bytes(),
        };
        let msg = rows::decode(bytes, limits)
            .map_err(|e| HostError::Station(format!("head shard {slot}: {e}")))?;
        Ok(embedding.add(&msg, slice, true)?)
    }

    /// Head shard `slot`'s answer to `/logits`, read: a malformed one is that slot's failure.
    pub fn read_answer(&self, slot: usize, bytes: &[u8]) -> Answer<RowsMessage> {
        let Ok(slice) = self.slice(slot) else {
            return Answer::Failed(format!("no head shard {slot}"));
        };
        let limits = Limits {
            max_logits: slice.len(),
            max_rows: MAX_TOP_ROWS,
            row_bytes: self.embedding.borrow().row_bytes(),
        };
        match rows::decode(bytes, limits) {
            Ok(m) => Answer::Value(m),
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    fn slice(&self, slot: usize) -> Result<Range<usize>, HostError> {
        self.slices.get(slot).cloned().ok_or_else(|| {
            HostError::InvalidArgument(format!("head shard {slot} of {}", self.slices.len()))
        })
    }

    /// One message carrying `ids` into `conversation` from `pos` (at most `max_batch` of them),
    /// embedded from rows held; the rows stay pinned until [`Model::release_rows`].
    pub(super) fn message(
        &self,
        conversation: u64,
        pos: usize,
        ids: &[u32],
    ) -> Result<Vec<u8>, HostError> {
        let cfg = self.config();
        let h = Hidden {
            conversation,
            pos: u32::try_from(pos).unwrap_or(u32::MAX),
            dim: cfg.dim as u32,
            values: self.embedding.borrow_mut().embed(cfg, ids)?,
        };
        wire::encode(&h, Elem::F32).map_err(|e| HostError::InvalidArgument(e.to_string()))
    }

    /// The rows a batch asked for are embedded: they may leave the cache.
    pub(super) fn release_rows(&self) {
        self.embedding.borrow_mut().release();
    }

    pub(super) fn mark_generation(&self) {
        let counters = self.embedding.borrow().counters;
        self.generation_mark
            .set(Some((self.reader.io.reads.get(), counters)));
    }

    pub fn stats(&self) -> CoordinatorStats {
        let e = self.embedding.borrow();
        let reads = self.reader.io.reads.get();
        CoordinatorStats {
            embedding: EmbeddingReport {
                mode: if e.is_resident() {
                    "resident"
                } else {
                    "sharded"
                },
                rows: e.rows(),
                bytes: e.bytes(),
                row_bytes: e.row_bytes(),
                logit_rows: self.logit_rows,
            },
            reads_at_open: self.reads_at_open,
            reads_since_open: reads - self.reads_at_open,
            rows: e.counters,
            generation: self
                .generation_mark
                .get()
                .map(|(at, counters)| GenerationStats {
                    reads: reads - at,
                    rows: e.counters.since(&counters),
                }),
        }
    }
}

/// One sequence's decode state on the coordinator: the conversation the layer stations know it
/// by, what it carried so far and what it carries next.
pub struct Conversation {
    pub id: u64,
    generation: Generation,
    /// The ids to carry through next: the prompt (after a kept prefix), then each picked token.
    pending: Vec<u32>,
    /// Whether a token was picked (rows asked for now are misses: they did not ride along).
    picked: bool,
    /// Positions the stations hold (once the messages handed out have gone through).
    pub pos: usize,
    /// The ids of those positions, and of the messages handed out.
    ids: Vec<u32>,
    /// The head shards' latest answers to the step being picked, while more are asked for.
    answers: Option<Vec<RowsMessage>>,
    /// The sums ask the step's message carried: whose watched ids its answers' values are.
    asked: Option<SumsAsk>,
    /// Speculative decoding: the drafter (None: the generation does not draft) and what
    /// steps of each size took, which sizes drafts.
    drafter: Option<Box<dyn Drafter>>,
    pass_times: PassTimes,
    /// The draft the step carries after the picked token (empty: a plain step), and when the
    /// step's message was made.
    draft: Vec<u32>,
    sent_ms: f64,
    /// What the step asked of each of its rows (flags and sums), the first answers of the rows
    /// not picked yet, and the rows picked so far.
    row_ask: (u8, Option<SumsAsk>),
    rows: VecDeque<Vec<Answer<RowsMessage>>>,
    verified: usize,
    /// The stations hold positions past `pos` (a rejected draft's): the next message drops them.
    rewind: bool,
    counts: DraftCounts,
}

impl Conversation {
    /// A generation of conversation `id` from `prompt`, after checking the prompt and the
    /// options, of which the layer stations hold the first `kept` positions already (a prefix
    /// kept from an earlier turn; 0 for a new conversation): only the rest is carried.
    pub fn new(
        model: &Model,
        id: u64,
        prompt: &[u32],
        kept: usize,
        opts: &GenerateOptions,
    ) -> Result<Conversation, HostError> {
        if prompt.is_empty() {
            return Err(HostError::EmptyPrompt);
        }
        if kept >= prompt.len() {
            return Err(HostError::InvalidArgument(format!(
                "a kept prefix of {kept} positions leaves nothing of a {}-token prompt to run",
                prompt.len()
            )));
        }
        let draft = opts.draft.resolve(None);
        if draft.as_ref().is_some_and(|d| d.margin.is_some()) {
            return Err(HostError::InvalidOption(
                "draftMode.margin does not apply to a model split across stations: its verify \
                 rows are the step-by-step rows bit for bit"
                    .into(),
            ));
        }
        if opts.continue_session {
            return Err(HostError::InvalidOption(
                "continue does not apply to a model split across stations (reusePrefix does)"
                    .into(),
            ));
        }
        if prompt.len() >= model.context {
            return Err(HostError::PromptTooLong {
                tokens: prompt.len(),
                context: model.context,
            });
        }
        let cfg = model.config();
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            let vocab = cfg.vocab_size;
            return Err(engine::EngineError::TokenOutOfRange { id, vocab }.into());
        }
        let mut generation = Generation::new(
            opts,
            model.tokenizer.clone(),
            &cfg.eos_ids,
            model.context - prompt.len(),
        )?;
        generation.accept_context(prompt);
        Ok(Conversation {
            id,
            generation,
            pending: prompt[kept..].to_vec(),
            picked: false,
            pos: kept,
            ids: prompt[..kept].to_vec(),
            answers: None,
            asked: None,
            drafter: draft.map(|d| Box::new(PromptLookup::new(d)) as Box<dyn Drafter>),
            pass_times: PassTimes::default(),
            draft: Vec::new(),
            sent_ms: 0.0,
            row_ask: (0, None),
            rows: VecDeque::new(),
            verified: 0,
            rewind: false,
            counts: DraftCounts::default(),
        })
    }

    /// The stations do not hold the kept prefix after all: the whole prompt is carried, from
    /// position 0 (before anything was carried).
    pub fn start_cold(&mut self) {
        if self.picked {
            return;
        }
        let mut prompt = std::mem::take(&mut self.ids);
        prompt.append(&mut self.pending);
        self.pending = prompt;
        self.pos = 0;
    }

    /// The ids still to carry through before the next pick.
    pub fn pending(&self) -> &[u32] {
        &self.pending
    }

    /// The ids whose positions the stations hold now.
    pub fn held(&self) -> &[u32] {
        &self.ids[..self.pos.min(self.ids.len())]
    }

    fn open(&self) -> bool {
        self.generation.finished().is_none()
    }

    /// Picks the next token from the head shards' answers (slot `i` answers `model.slices[i]`)
    /// to the last message, which carried `positions` positions; the rows riding with them are
    /// kept.
    pub fn pick(
        &mut self,
        model: &Model,
        answers: Vec<Answer<RowsMessage>>,
        positions: usize,
    ) -> Result<Pick, HostError> {
        if !self.open() {
            return Err(HostError::NoContext);
        }
        if answers.len() != model.slices.len() {
            return Err(HostError::InvalidArgument(format!(
                "{} answers for {} head shards",
                answers.len(),
                model.slices.len()
            )));
        }
        let mut parts = match fold(answers) {
            Folded::Accept(parts) => parts,
            Folded::Abstain { retry } => return Ok(Pick::Retry(retry)),
            Folded::Decline { slot, error } => {
                return Err(HostError::Station(match slot {
                    Some(s) => format!("head shard {s}: {error}"),
                    None => error,
                }))
            }
        };
        self.watch(&model.slices, parts.iter_mut().enumerate())?;
        {
            let mut embedding = model.embedding.borrow_mut();
            for (part, slice) in parts.iter().zip(&model.slices) {
                embedding.add(part, slice.clone(), false)?;
            }
        }
        self.answers = Some(parts);
        self.settle(model, positions)
    }

    /// [`Conversation::pick`] again, once the slots a [`Pick::More`] named answered `/again`:
    /// `answers[i]` is slot `slots[i]`'s.
    pub fn pick_again(
        &mut self,
        model: &Model,
        slots: &[usize],
        answers: Vec<Answer<RowsMessage>>,
        positions: usize,
    ) -> Result<Pick, HostError> {
        if !self.open() || self.answers.is_none() || slots.len() != answers.len() {
            return Err(HostError::NoContext);
        }
        let mut fresh = match fold(answers) {
            Folded::Accept(parts) => parts,
            Folded::Abstain { retry } => {
                return Ok(Pick::More(
                    retry
                        .iter()
                        .map(|&i| (slots[i], LogitsAsk::Every))
                        .collect(),
                ))
            }
            Folded::Decline { slot, error } => {
                return Err(HostError::Station(match slot {
                    Some(i) => format!("head shard {}: {error}", slots[i]),
                    None => error,
                }))
            }
        };
        self.watch(&model.slices, slots.iter().copied().zip(fresh.iter_mut()))?;
        let kept = self.answers.as_mut().ok_or(HostError::NoContext)?;
        for (&slot, part) in slots.iter().zip(fresh) {
            let old = kept.get_mut(slot).ok_or(HostError::NoContext)?;
            *old = part;
        }
        self.settle(model, positions)
    }

    /// Puts the watched ids' logits that answers with sums carry as values alone among their
    /// candidates, under the ids the step's ask named (`parts`: slot and answer).
    fn watch<'a>(
        &self,
        slices: &[Range<usize>],
        parts: impl Iterator<Item = (usize, &'a mut RowsMessage)>,
    ) -> Result<(), HostError> {
        let watched = self.asked.as_ref().map_or(&[][..], |a| &a.watched);
        for (slot, part) in parts {
            let (Some(c), Some(slice)) = (part.candidates.as_mut(), slices.get(slot)) else {
                continue;
            };
            if c.sums.is_some() {
                c.watch(&mut part.logits, watched, slice).map_err(|n| {
                    HostError::Station(format!(
                        "head shard {slot}: {n} watched logits for {} watched ids in its slice",
                        watched
                            .iter()
                            .filter(|&&id| slice.contains(&(id as usize)))
                            .count()
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// The pick from the answers held: the token, or which slots to ask for more.
    fn settle(&mut self, model: &Model, positions: usize) -> Result<Pick, HostError> {
        let answers = self.answers.as_ref().ok_or(HostError::NoContext)?;
        let summed =
            (answers.iter()).any(|p| p.candidates.as_ref().is_some_and(|c| c.sums.is_some()));
        // A slot that sent every logit is summed here, as the pick asked the shards to sum.
        let ask = match summed && answers.iter().any(|p| p.candidates.is_none()) {
            true => self.sums_ask(),
            false => None,
        };
        let parts = self.answers.as_ref().ok_or(HostError::NoContext)?;
        let refs: Vec<&RowsMessage> = parts.iter().collect();
        let (mut logits, bound) =
            assemble_logits(&model.slices, &refs).map_err(|e| HostError::Station(e.to_string()))?;
        let sums = match summed && bound != f32::NEG_INFINITY {
            true => level_sums(parts, &model.slices, ask.as_ref()),
            false => None,
        };
        let health = match self.generation.watches_health() && bound != f32::NEG_INFINITY {
            true => health_sums(parts, &model.slices, self.asked.as_ref()),
            false => None,
        };
        let emitted = match bound == f32::NEG_INFINITY {
            // Every logit: the whole pick, as a whole host makes it.
            true => self.generation.next(&mut logits)?,
            false => match (self.generation).next_partial(
                &mut logits,
                bound,
                sums.as_deref(),
                health.as_ref(),
            )? {
                PartialNext::Token(e) => *e,
                PartialNext::Above(t) => {
                    // The slots whose unsent logits may reach the threshold.
                    let asks = slot_bounds(parts)
                        .filter(|&(_, b)| b >= t)
                        .map(|(slot, _)| (slot, LogitsAsk::Above(t)))
                        .collect();
                    return Ok(Pick::More(asks));
                }
                PartialNext::Whole => {
                    let asks = slot_bounds(parts)
                        .filter(|&(_, b)| b > f32::NEG_INFINITY)
                        .map(|(slot, _)| (slot, LogitsAsk::Every))
                        .collect();
                    return Ok(Pick::More(asks));
                }
            },
        };
        self.answers = None;
        self.pos += positions;
        self.picked = true;
        self.after_pick(&emitted);
        Ok(Pick::Token(Box::new(emitted)))
    }

    /// Where a pick leaves the conversation: its token pending (carried next), or — a draft's
    /// row whose pick is the draft's token — on to the next row, that token carried already.
    /// A verify that ends before its last row leaves positions on the stations past `pos`.
    fn after_pick(&mut self, e: &Emitted) {
        let row = self.verified;
        if row == 0 {
            self.counts.passes += 1;
            if self.sent_ms > 0.0 {
                (self.pass_times).record(1 + self.draft.len(), now_ms() - self.sent_ms);
            }
        }
        if self.draft.is_empty() {
            self.pending = vec![e.id];
            return;
        }
        if e.finish_reason.is_none() && self.draft.get(row) == Some(&e.id) {
            self.verified += 1;
            self.pending.clear();
            return;
        }
        if let Some(d) = &mut self.drafter {
            d.observe(self.draft.len(), row);
        }
        self.counts.drafted += self.draft.len() as u64;
        self.counts.accepted += row as u64;
        if self.ids.len() > self.pos {
            self.ids.truncate(self.pos);
            self.rewind = true;
        }
        self.draft.clear();
        self.rows.clear();
        self.verified = 0;
        self.pending = vec![e.id];
    }

    /// Drafts up to `most` tokens to carry after the picked token, when the generation drafts
    /// and is decoding (fewer when the context or the generation has less room, or its stages
    /// allow less): how many. Planned again, the draft is made anew.
    pub fn make_draft(&mut self, model: &Model, most: usize) -> usize {
        self.draft.clear();
        let Some(drafter) = self.drafter.as_mut() else {
            return 0;
        };
        if !self.picked || self.pending.is_empty() || self.generation.finished().is_some() {
            return 0;
        }
        self.pending.truncate(1);
        let room = model.context.saturating_sub(self.ids.len() + 1);
        let most = most.min(room).min(MAX_DRAFT);
        if most == 0 {
            return 0;
        }
        // The drafter reads the whole conversation, ending with the token about to be carried.
        self.ids.push(self.pending[0]);
        drafter.set_cost(self.pass_times.cost());
        drafter.draft(&self.ids, most, &mut self.draft);
        self.ids.pop();
        self.draft.truncate(most);
        self.generation.trim_draft(&mut self.draft);
        self.pending.extend_from_slice(&self.draft);
        self.draft.len()
    }

    /// The first answers of a verify step's rows after its first, to pick from in turn.
    pub fn hold_rows(&mut self, rows: Vec<Vec<Answer<RowsMessage>>>) {
        self.rows = rows.into();
    }

    /// After a pick that kept its draft token, how the next row's pick gets its answers; None
    /// when no verify goes on.
    pub fn next_row(&mut self, model: &Model) -> Result<Option<NextRow>, HostError> {
        if self.draft.is_empty() || self.verified == 0 || !self.open() {
            return Ok(None);
        }
        let held = self.rows.pop_front().ok_or(HostError::NoContext)?;
        // The held answers are as the step asked, whatever a row before asked anew.
        let now = self.logits_ask();
        if now == self.row_ask {
            return Ok(Some(NextRow::Held(held)));
        }
        let ask = match now.0 & EVERY_LOGIT != 0 {
            true => LogitsAsk::Every,
            false => model.logits_ask(),
        };
        Ok(Some(NextRow::Ask {
            asks: (0..model.slices.len()).map(|slot| (slot, ask)).collect(),
            sums: now.1,
        }))
    }

    /// Whether the stations hold positions past `pos` (a rejected draft's), which the next
    /// message is to drop; reading it clears it.
    pub fn take_rewind(&mut self) -> bool {
        std::mem::take(&mut self.rewind)
    }

    /// What the generation's drafts did.
    pub fn draft_counts(&self) -> DraftCounts {
        self.counts
    }

    /// Whether the pick is the largest logit (greedy): one row of each head shard's rides along.
    pub fn takes_largest(&mut self) -> bool {
        self.generation.takes_largest()
    }

    /// [`Conversation::logits_ask`] for the step's message, kept as what it asked of every row
    /// (a draft's later rows are held to it).
    pub fn step_ask(&mut self) -> (u8, Option<SumsAsk>) {
        let ask = self.logits_ask();
        self.row_ask = ask.clone();
        ask
    }

    /// What the head shards are asked for at the next pick: the part's flags (wants logits,
    /// every logit, with sums and health) and its sums block.
    pub fn logits_ask(&mut self) -> (u8, Option<SumsAsk>) {
        let sums = self.ask_sums();
        let flags = match (self.reads_every_logit(), sums.is_some()) {
            // The monitor without its sums (a stage cannot name what it changes): all.
            (false, false) if self.watches_health() => WANTS_LOGITS | EVERY_LOGIT,
            (false, false) => WANTS_LOGITS,
            (false, true) if self.watches_health() => WANTS_LOGITS | WITH_SUMS | WITH_HEALTH,
            (false, true) => WANTS_LOGITS | WITH_SUMS,
            (true, _) => WANTS_LOGITS | EVERY_LOGIT,
        };
        (flags, sums)
    }

    /// [`Conversation::sums_ask`] for the step's message, kept: the answers' watched values
    /// are the logits of the ids it names.
    pub fn ask_sums(&mut self) -> Option<SumsAsk> {
        self.asked = self.sums_ask();
        self.asked.clone()
    }

    /// What the head shards' sums are asked for at the next pick, if it can use them.
    pub fn sums_ask(&mut self) -> Option<SumsAsk> {
        let (temperature, touched) = self.generation.sums_ask()?;
        Some(SumsAsk {
            temperature,
            excluded: touched.removed_ranges(),
            watched: touched.changed,
            health: self.generation.watches_health(),
        })
        .filter(|s| s.watched.len() <= MAX_WATCHED && s.excluded.len() <= MAX_RANGES)
    }

    /// Whether the health monitor watches: its sums are asked of the head shards too.
    pub fn watches_health(&self) -> bool {
        self.generation.watches_health()
    }

    /// Whether the next pick must see every logit (the head shards answer them all).
    pub fn reads_every_logit(&mut self) -> bool {
        self.generation.reads_every_logit()
    }

    /// Whether a token was picked (the conversation decodes: one id per step), rather than
    /// its prompt still running.
    pub fn decoding(&self) -> bool {
        self.picked
    }

    /// Takes the next `n` (at least 1) of the ids still to carry — a chunk of the prompt, or
    /// the picked token — with the position of the first; `None` when nothing is left or the
    /// generation has ended.
    pub fn take(&mut self, n: usize) -> Option<(usize, Vec<u32>)> {
        if !self.open() || self.pending.is_empty() {
            return None;
        }
        let n = n.clamp(1, self.pending.len());
        let at = self.ids.len();
        self.sent_ms = match self.picked {
            true => now_ms(),
            false => 0.0,
        };
        if !self.draft.is_empty() {
            self.counts.verify_passes += 1;
        }
        let chunk: Vec<u32> = self.pending.drain(..n).collect();
        self.ids.extend_from_slice(&chunk);
        Some((at, chunk))
    }

    /// The stations took `positions` more of the prompt (a chunk whose logits nobody reads).
    pub fn advance(&mut self, positions: usize) {
        self.pos += positions;
    }
}

/// Each slot's level sums: sent with its candidates, or taken of every logit it sent with what
/// `ask` asked; `None` when a slot has none.
fn level_sums(
    parts: &[RowsMessage],
    slices: &[Range<usize>],
    ask: Option<&SumsAsk>,
) -> Option<Vec<LevelSums>> {
    let mut sums = Vec::with_capacity(parts.len());
    for (p, slice) in parts.iter().zip(slices) {
        match &p.candidates {
            Some(c) => sums.push(c.sums.clone()?),
            None => {
                let ask = ask?;
                let every = &p.logits;
                sums.extend(LevelSums::of_except(
                    every,
                    slice.start,
                    ask.temperature,
                    &ask.excluded,
                ));
            }
        }
    }
    Some(sums)
}

/// The health monitor's sums of the whole vocabulary: each slot's, sent with its candidates or
/// taken of every logit it sent (the ask's removed ranges as masked); `None` when a slot sent
/// candidates without them.
fn health_sums(
    parts: &[RowsMessage],
    slices: &[Range<usize>],
    ask: Option<&SumsAsk>,
) -> Option<HealthSums> {
    let removed = ask.map_or(&[][..], |a| &a.excluded);
    let each = (parts.iter().zip(slices))
        .map(|(p, slice)| match &p.candidates {
            Some(_) => p.health.clone(),
            None => Some(HealthSums::of(&p.logits, slice.start, removed)),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(HealthSums::merge(&each))
}

/// Each slot's bound on the logits it did not send (−inf: it sent every one).
fn slot_bounds(parts: &[RowsMessage]) -> impl Iterator<Item = (usize, f32)> + '_ {
    (parts.iter().enumerate()).map(|(slot, p)| {
        (
            slot,
            p.candidates.as_ref().map_or(f32::NEG_INFINITY, |c| c.bound),
        )
    })
}

/// A conversation kept on the layer stations: the ids its KV holds, how many of them were its
/// prompt (the rest it generated), and when it was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub conversation: u64,
    pub ids: Vec<u32>,
    pub prompt_len: usize,
    kept_at: u64,
}

/// The conversations the layer stations were asked to keep, oldest first: where a new prompt's
/// prefix may already be. It holds fewer than a station keeps, so that the sequences running
/// always have room beside them.
#[derive(Default)]
pub struct PrefixTable {
    max: usize,
    entries: VecDeque<Kept>,
    clock: u64,
}

/// A prefix the stations may hold: claim `len` positions hashed `hash` of `conversation` from
/// every layer station. `status` says what a claim every station grants serves (`Hit`, or
/// `Mismatch` when the kept conversation went another way before the end of its prompt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    pub conversation: u64,
    pub len: usize,
    pub hash: u64,
    pub status: PrefixStatus,
    /// The entry it came from, for the table to take back if the claim is never made.
    pub kept: Kept,
}

impl PrefixTable {
    /// A table of at most `max` conversations.
    pub fn new(max: usize) -> Self {
        PrefixTable {
            max,
            entries: VecDeque::new(),
            clock: 0,
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The kept conversation sharing the longest prefix with `prompt` (leaving at least one id
    /// of the prompt to run), chosen as a host chooses its window (`prefix::plan`); it leaves
    /// the table (a claim either continues it or drops it).
    pub fn take_best(&mut self, prompt: &[u32]) -> Option<Replay> {
        let views: Vec<WindowView> = (self.entries.iter())
            .map(|k| WindowView {
                tokens: &k.ids,
                prompt_len: k.prompt_len,
                cached: k.ids.len(),
                // Whether a station can go back that far, its claim says.
                earliest_rewind: 0,
                last_used: k.kept_at as f64,
            })
            .collect();
        let plan = prefix::plan(&views, prompt, 0.0, None);
        let kept = self.entries.remove(plan.window?)?;
        Some(Replay {
            conversation: kept.conversation,
            len: plan.keep,
            hash: super::prefix_hash(&prompt[..plan.keep]),
            status: plan.status,
            kept,
        })
    }

    /// Records `conversation` as kept with `ids` (its first `prompt_len` its prompt); returns
    /// the conversations pushed out, oldest first (to be forgotten by the stations).
    pub fn remember(&mut self, conversation: u64, ids: Vec<u32>, prompt_len: usize) -> Vec<u64> {
        self.clock += 1;
        let kept_at = self.clock;
        self.put_back(Kept {
            conversation,
            ids,
            prompt_len,
            kept_at,
        })
    }

    /// Takes back an entry [`PrefixTable::take_best`] handed out whose claim was never made;
    /// returns the conversations pushed out.
    pub fn put_back(&mut self, kept: Kept) -> Vec<u64> {
        self.entries.retain(|k| k.conversation != kept.conversation);
        let at = self.entries.partition_point(|k| k.kept_at < kept.kept_at);
        self.entries.insert(at, kept);
        let over = self.entries.len().saturating_sub(self.max);
        self.entries.drain(..over).map(|k| k.conversation).collect()
    }

    /// Forgets `conversation` (the stations could not keep it); whether it was here.
    pub fn remove(&mut self, conversation: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|k| k.conversation != conversation);
        self.entries.len() < before
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
        assert!(t.remember(1, vec![1, 2, 3, 4], 3).is_empty());
        assert!(t.remember(2, vec![1, 2, 9], 2).is_empty());
        assert_eq!(t.remember(3, vec![5, 6], 1), vec![1]);
        // Conversation 1 is gone; 2 shares [1, 2] with this prompt: all of its prompt, a hit.
        let r = t.take_best(&[1, 2, 3, 4, 5]).unwrap();
        assert_eq!((r.conversation, r.len), (2, 2));
        assert_eq!(r.status, PrefixStatus::Hit);
        assert_eq!(r.hash, crate::station::prefix_hash(&[1, 2]));
        // Taken: asking again finds nothing for it.
        assert!(t.take_best(&[1, 2, 3]).is_none());
        // A prompt equal to what is kept still runs its last id.
        let r = t.take_best(&[5, 6]).unwrap();
        assert_eq!((r.conversation, r.len), (3, 1));
        assert!(t.take_best(&[7]).is_none());
        assert!(t.is_empty());
        // Went another way inside its prompt: a mismatch, the shared part kept.
        t.remember(4, vec![1, 2, 3, 4], 4);
        let r = t.take_best(&[1, 2, 8, 9]).unwrap();
        assert_eq!((r.len, r.status), (2, PrefixStatus::Mismatch));
        // An entry whose claim was never made goes back in its place, oldest first.
        t.remember(5, vec![7, 7], 2);
        assert_eq!(t.put_back(r.kept), Vec::<u64>::new());
        assert_eq!(t.remember(6, vec![8], 1), vec![4]);
        assert!(t.remove(5) && !t.remove(5));
        assert_eq!(PrefixTable::new(0).remember(4, vec![1], 1), vec![4]);
    }
}
