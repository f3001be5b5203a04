//! The coordinator's sequences: every generation over the stations is one of them (one at a
//! time is a batch of one). Each step is one hop through the chain carrying every running
//! sequence's rows in one bundle ([`super::bundle`]) — each decoding sequence's picked token, and
//! one chunk of the oldest prompt still running, the step holding at most `max_batch` positions
//! — so the round trips per step do not grow with the number of sequences. The layer stations
//! run the bundle's rows together, the head shards answer every sequence that wants logits in
//! one matmul, and each sequence picks its token with its own decode state: what it gives
//! alone, token for token.
//!
//! Prefix replay, per sequence: a sequence that ends (run to its end, or left by its consumer
//! between steps) leaves its conversation on the layer stations, kept ([`PrefixTable`]); a
//! prompt admitted with `reusePrefix` takes the kept conversation sharing most of it, and the
//! caller asks every layer station to claim that prefix before the sequence's first step
//! ([`Sequences::claims`], [`Sequences::claimed`]): granted by all, only the rest of the prompt
//! is carried; refused by any, the stations forget the conversation and the prompt runs whole.
//! A claim changes nothing a station computes, so the tokens are those of a cold run.
//!
//! A step is [`Sequences::plan`] (the rows to fetch), [`Sequences::message`] (the bundle to
//! carry), then [`Sequences::pick`] with the head shards' answers (or [`Sequences::abandon`]
//! when the carry failed). Admissions, claims and cancellations happen between steps, and
//! [`Sequences::settle`] says what the layer stations are to keep and forget.

use engine::decode::{Emitted, GenerateOptions};
use serde::Serialize;

use super::bundle::{self, SumsAsk, EVERY_ROW, REWIND, WITH_SUMS};
use super::coordinator::{
    replay_verdict, Conversation, Model, NextRow, Pick, PrefixTable, Replay, RowsWanted,
};
use super::gather::Answer;
use super::head::{Again, LogitsAsk};
use super::rows::RowsMessage;
use crate::clock::now_ms;
use crate::error::HostError;
use crate::host::{
    DecodeStats, PrefixCounts, PrefixKind, PrefixReport, SequenceCounts, SequenceReport,
};
use crate::prefix::PrefixStatus;

/// What a step did for one sequence: the token it picked (none for a prompt chunk whose logits
/// nobody reads — no event is made for those) or the error that ended it.
#[derive(Debug)]
pub struct StepEvent {
    /// The sequence, which is the conversation the layer stations know it by.
    pub id: u64,
    pub token: Result<Box<Emitted>, HostError>,
    /// The sequence ended (its last token, or an error).
    pub done: bool,
    /// What it did, once it ended.
    pub report: Option<SequenceReport>,
}

/// A sequence admitted: its id (its conversation on the stations), its prompt's length, how the
/// prompt is to use a kept conversation, and the claim to make before its first step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admitted {
    pub id: u64,
    pub prompt_tokens: usize,
    /// None when the prompt asked for no reuse.
    pub prefix: Option<PrefixReport>,
    pub claim: Option<Claim>,
}

/// Ask every layer station to claim the first `len` positions of the sequence's conversation,
/// whose ids hash to `hash` (`super::prefix_hash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Claim {
    pub len: usize,
    #[serde(serialize_with = "hex")]
    pub hash: u64,
}

/// A hash as the stations' `claim` takes it: 16 hex digits.
fn hex<S: serde::Serializer>(h: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{h:016x}"))
}

/// What a claim's answers decided: how the prompt is served now, and whether the layer stations
/// must forget the conversation before the sequence's first step (some may hold part of it; the
/// next [`Sequences::settle`] says so too).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimOutcome {
    pub prefix: Option<PrefixReport>,
    pub forget: bool,
}

/// What the layer stations are to be told between steps: conversations to keep (with the ids
/// their KV holds, for a later claim) and conversations to forget.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Settlement {
    pub keep: Vec<KeepOrder>,
    pub forget: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeepOrder {
    pub conversation: u64,
    pub ids: Vec<u32>,
}

/// The sequences and the kept conversations, for `stats()`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SequencesStats {
    pub sequences: SequenceCounts,
    /// How admitted prompts used the kept conversations; `windows`: how many may be kept,
    /// `windowsHeld`: how many are.
    pub prefix_reuse: PrefixCounts,
}

/// One sequence's part of the step being prepared or carried: `rows` of its positions want
/// logits (1, or every one for a draft's verify pass).
#[derive(Debug, Clone, Copy)]
struct Part {
    id: u64,
    positions: usize,
    logits: bool,
    rows: usize,
}

/// A pick of the carried step that the head shards' answers did not settle (or a draft's row
/// whose pick asks anew): what it asks of which slots (`/again`).
#[derive(Debug, Clone)]
struct Unsettled {
    id: u64,
    positions: usize,
    /// Its row's place among the step's answers (a bundle's parts).
    part: usize,
    asks: Vec<(usize, LogitsAsk)>,
    /// A draft's row asking anew: what its sums are taken for, every slot answering afresh.
    fresh: Option<Option<SumsAsk>>,
}

/// One running sequence.
struct Sequence {
    conversation: Conversation,
    /// The kept prefix it resumes, until every layer station has answered the claim.
    claim: Option<Replay>,
    prompt_tokens: usize,
    prefix: Option<PrefixReport>,
    admitted_ms: f64,
    /// When it made its latest token; `prefill_ms` its first.
    last_ms: Option<f64>,
    prefill_ms: f64,
    token_ms: Vec<f64>,
    tokens: u64,
}

impl Sequence {
    fn id(&self) -> u64 {
        self.conversation.id
    }

    fn report(&self) -> SequenceReport {
        let reused = self.prefix.as_ref().map_or(0, |p| p.reused);
        let d = self.conversation.draft_counts();
        SequenceReport {
            prompt_tokens: self.prompt_tokens as u64,
            prefix: self.prefix.clone(),
            prefill_ms: self.prefill_ms,
            prefill_tokens: self.prompt_tokens as u64 - reused,
            token_ms: self.token_ms.clone(),
            // Nothing is read on the way: every layer is a station's.
            decode_layer_reads: 0,
            layer_reads_per_token: 0.0,
            decode: DecodeStats {
                decode_tokens: self.tokens,
                forward_passes: d.passes,
                verify_passes: d.verify_passes,
                drafted: d.drafted,
                accepted: d.accepted,
                tokens_per_pass: match d.passes {
                    0 => 0.0,
                    n => self.tokens as f64 / n as f64,
                },
            },
        }
    }
}

/// How a prompt of `prompt` tokens used the kept conversations.
fn prefix_report(status: PrefixStatus, reused: usize, prompt: usize) -> PrefixReport {
    PrefixReport {
        status,
        reused: reused as u64,
        prefilled: (prompt - reused) as u64,
        // The kept conversations are not numbered windows: the claim names the conversation.
        window: 0,
        kind: PrefixKind::Implicit,
        id: None,
    }
}

/// The sequences a coordinator runs, in the order they were admitted, and the conversations
/// kept on the layer stations.
pub struct Sequences {
    list: Vec<Sequence>,
    max: usize,
    /// The step planned (and, once `carried`, handed out as a message).
    parts: Vec<Part>,
    carried: bool,
    /// The step carried last (head stations keep its hidden states by this number).
    step: u64,
    /// Rows of its top ids each head shard sends with the step's logits.
    logit_rows: usize,
    /// Its picks still waiting for more of the logits.
    unsettled: Vec<Unsettled>,
    kept: PrefixTable,
    /// The id the next new conversation takes.
    next_id: u64,
    settlement: Settlement,
    counts: SequenceCounts,
    prefix_counts: PrefixCounts,
}

fn in_flight() -> HostError {
    HostError::InvalidArgument(
        "a step is in flight: hand over its answers (pick) or abandon it first".into(),
    )
}

impl Sequences {
    /// Room for `max` sequences at once (at least 1) and `kept` conversations kept for prefix
    /// replay; new conversations are numbered from `first_id` (unique among the coordinators
    /// sharing the stations).
    pub fn new(max: usize, kept: usize, first_id: u64) -> Self {
        let max = max.max(1);
        Sequences {
            list: Vec::new(),
            max,
            parts: Vec::new(),
            carried: false,
            step: 0,
            logit_rows: 0,
            unsettled: Vec::new(),
            kept: PrefixTable::new(kept),
            next_id: first_id,
            settlement: Settlement::default(),
            counts: SequenceCounts {
                max,
                ..SequenceCounts::default()
            },
            prefix_counts: PrefixCounts {
                windows: kept,
                ..PrefixCounts::default()
            },
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Sequences admitted and not ended.
    pub fn active(&self) -> usize {
        self.list.len()
    }

    /// Conversations kept on the layer stations now.
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    pub fn stats(&self) -> SequencesStats {
        SequencesStats {
            sequences: SequenceCounts {
                active: self.list.len(),
                ..self.counts.clone()
            },
            prefix_reuse: PrefixCounts {
                windows_held: self.kept.len(),
                ..self.prefix_counts.clone()
            },
        }
    }

    /// Admits a sequence with `prompt` between steps (its prompt and options checked as
    /// [`Conversation::new`] checks them; refused `busy` past the count). With `reusePrefix`,
    /// it takes the kept conversation sharing the most with the prompt, whose prefix every
    /// layer station is to claim before the sequence's first step.
    pub fn admit(
        &mut self,
        model: &Model,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Admitted, HostError> {
        if self.carried {
            return Err(in_flight());
        }
        if self.list.len() >= self.max {
            return Err(HostError::SequencesFull { max: self.max });
        }
        // The best kept prefix (put back if the prompt or the options are refused).
        let explicit = opts.prefill_window.clone();
        let replay = match (&explicit, opts.reuse_prefix) {
            (None, true) => self.kept.take_best(prompt),
            _ => None,
        };
        let (id, kept) = replay
            .as_ref()
            .map_or((self.next_id, 0), |r| (r.conversation, r.len));
        let conversation = match Conversation::new(model, id, prompt, kept, opts) {
            Ok(c) => c,
            Err(e) => {
                if let Some(r) = replay {
                    self.kept.put_back(r.kept);
                }
                return Err(e);
            }
        };
        if replay.is_none() {
            self.next_id += 1;
        }
        let prefix = match (&explicit, &replay) {
            // A split model has no explicit prefill windows: served cold, as by a host without.
            (Some(id), _) => Some(PrefixReport {
                kind: PrefixKind::Explicit,
                id: Some(id.clone()),
                ..prefix_report(PrefixStatus::Disabled, 0, prompt.len())
            }),
            (None, Some(r)) => Some(prefix_report(r.status, r.len, prompt.len())),
            (None, None) if opts.reuse_prefix => {
                Some(prefix_report(PrefixStatus::Miss, 0, prompt.len()))
            }
            (None, None) => None,
        };
        model.mark_generation();
        let claim = replay.as_ref().map(|r| Claim {
            len: r.len,
            hash: r.hash,
        });
        self.counts.admitted += 1;
        self.list.push(Sequence {
            conversation,
            claim: replay,
            prompt_tokens: prompt.len(),
            prefix: prefix.clone(),
            admitted_ms: now_ms(),
            last_ms: None,
            prefill_ms: 0.0,
            token_ms: Vec::new(),
            tokens: 0,
        });
        Ok(Admitted {
            id,
            prompt_tokens: prompt.len(),
            prefix,
            claim,
        })
    }

    /// The claims to make before the next step: `(sequence, claim)` for each sequence admitted
    /// with a kept prefix whose stations have not answered yet.
    pub fn claims(&self) -> Vec<(u64, Claim)> {
        (self.list.iter())
            .filter_map(|s| {
                let r = s.claim.as_ref()?;
                Some((
                    s.id(),
                    Claim {
                        len: r.len,
                        hash: r.hash,
                    },
                ))
            })
            .collect()
    }

    /// The layer stations' answers to sequence `id`'s claim (`Some(true)` granted, `Some(false)`
    /// refused, `None` no answer): granted by all, the sequence carries only the rest of its
    /// prompt; otherwise it runs the whole prompt, after the stations forget the conversation
    /// (settle before the next step).
    pub fn claimed(
        &mut self,
        id: u64,
        answers: &[Option<bool>],
    ) -> Result<ClaimOutcome, HostError> {
        if self.carried {
            return Err(in_flight());
        }
        let s = (self.list.iter_mut())
            .find(|s| s.id() == id && s.claim.is_some())
            .ok_or_else(|| {
                HostError::InvalidArgument(format!("sequence {id} has no claim to answer"))
            })?;
        s.claim = None;
        let granted = replay_verdict(answers);
        if !granted {
            s.conversation.start_cold();
            s.prefix = Some(prefix_report(PrefixStatus::Miss, 0, s.prompt_tokens));
            self.settlement.forget.push(id);
        }
        Ok(ClaimOutcome {
            prefix: s.prefix.clone(),
            forget: !granted,
        })
    }

    /// Ends sequence `id` between steps (its consumer left): its conversation is kept for
    /// prefix replay, the stations holding what it carried. Whether it was running.
    pub fn cancel(&mut self, id: u64) -> Result<bool, HostError> {
        if self.carried {
            return Err(in_flight());
        }
        self.parts.clear();
        let Some(at) = self.list.iter().position(|s| s.id() == id) else {
            return Ok(false);
        };
        let s = self.list.remove(at);
        self.end(s, true);
        Ok(true)
    }

    /// A sequence leaves. `consistent`: the stations hold exactly the positions it carried, so
    /// its conversation is kept (the oldest kept one forgotten when the table is full);
    /// otherwise what they hold of it is unknown, and they forget it.
    fn end(&mut self, s: Sequence, consistent: bool) {
        self.counts.ended += 1;
        if let Some(p) = &s.prefix {
            self.prefix_counts.count(p);
        }
        let id = s.id();
        if let Some(replay) = s.claim {
            // Never claimed: the stations still keep it as it was.
            let out = self.kept.put_back(replay.kept);
            self.settlement.forget.extend(out);
            return;
        }
        let held = s.conversation.held();
        if !consistent {
            self.settlement.forget.push(id);
        } else if !held.is_empty() {
            let out = self
                .kept
                .remember(id, held.to_vec(), s.prompt_tokens.min(held.len()));
            if out.contains(&id) {
                // A table of none keeps nothing.
                self.settlement.forget.push(id);
            } else {
                self.settlement.keep.push(KeepOrder {
                    conversation: id,
                    ids: held.to_vec(),
                });
            }
            self.settlement
                .forget
                .extend(out.into_iter().filter(|&c| c != id));
        }
    }

    /// What the layer stations are to be told now: the conversations to keep and to forget
    /// (each sequence that ended since the last call, and those pushed out of the table).
    pub fn settle(&mut self) -> Settlement {
        std::mem::take(&mut self.settlement)
    }

    /// A layer station did not keep `conversation` (or did not answer): no claim may count on
    /// it, and the stations forget it.
    pub fn keep_failed(&mut self, conversation: u64) {
        self.kept.remove(conversation);
        if self.list.iter().all(|s| s.id() != conversation) {
            self.settlement.forget.push(conversation);
        }
    }

    /// Plans the next step: every decoding sequence's token (and its draft, when it drafts:
    /// with a prompt waiting, drafts share half the room the tokens leave), then as much of the
    /// oldest prompt still running as the batch has room for. Returns the rows it needs that
    /// are not here (see [`Model::rows_wanted`]), or `None` when nothing runs.
    pub fn plan(&mut self, model: &Model) -> Result<Option<RowsWanted>, HostError> {
        if self.carried {
            return Err(in_flight());
        }
        if let Some(s) = self.list.iter().find(|s| s.claim.is_some()) {
            return Err(HostError::InvalidArgument(format!(
                "sequence {} waits for its claim: hand the stations' answers to claimed first",
                s.id()
            )));
        }
        self.parts.clear();
        let mut ids = Vec::new();
        let mut miss = false;
        let decoding = self
            .list
            .iter()
            .filter(|s| s.conversation.decoding())
            .count();
        let prompt_waits = self.list.iter().any(|s| !s.conversation.decoding());
        let mut spare = model.max_batch.saturating_sub(decoding);
        if prompt_waits {
            spare /= 2;
        }
        for c in self.list.iter_mut().map(|s| &mut s.conversation) {
            if !c.decoding() {
                continue;
            }
            let drafted = c.make_draft(model, spare);
            spare -= drafted;
            self.parts.push(Part {
                id: c.id,
                positions: 1 + drafted,
                logits: true,
                rows: 1 + drafted,
            });
            ids.extend_from_slice(&c.pending()[..c.pending().len().min(1 + drafted)]);
            miss = true;
        }
        let taken: usize = self.parts.iter().map(|p| p.positions).sum();
        let room = model.max_batch.saturating_sub(taken);
        if room > 0 || self.parts.is_empty() {
            let mut running = self.list.iter().map(|s| &s.conversation);
            if let Some(c) = running.find(|c| !c.decoding()) {
                let left = c.pending().len();
                let positions = left.min(room.max(1));
                self.parts.push(Part {
                    id: c.id,
                    positions,
                    logits: positions == left,
                    rows: 1,
                });
                // The rows of the whole rest of the prompt: one round for all its chunks.
                ids.extend_from_slice(c.pending());
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
        // Greedy picks take a shard's largest logit: its one row is all that can be wanted.
        let mut greedy = true;
        for p in &self.parts {
            let c = (self.list.iter_mut())
                .map(|s| &mut s.conversation)
                .find(|c| c.id == p.id)
                .ok_or(HostError::NoContext)?;
            let Some((pos, ids)) = c.take(p.positions) else {
                return Err(HostError::NoContext);
            };
            greedy &= !p.logits || c.takes_largest();
            let (mut flags, sums) = match p.logits {
                true => c.step_ask(),
                false => (0, None),
            };
            if p.rows > 1 {
                flags |= EVERY_ROW;
            }
            if c.take_rewind() {
                flags |= REWIND;
            }
            match model.message(p.id, pos, &ids) {
                Ok(m) => messages.push((
                    flags,
                    match (flags & WITH_SUMS != 0, sums) {
                        (true, Some(s)) => [s.encode(), m].concat(),
                        _ => m,
                    },
                )),
                Err(e) => {
                    // Ids were taken and nothing was carried: these sequences cannot go on.
                    model.release_rows();
                    self.carried = true;
                    self.abandon();
                    return Err(e);
                }
            }
        }
        model.release_rows();
        self.carried = true;
        self.step += 1;
        self.logit_rows = match greedy {
            true => model.logit_rows().min(1),
            false => model.logit_rows(),
        };
        let logits = self.parts.iter().any(|p| p.logits);
        let bundle = bundle::encode(
            bundle::HIDDEN,
            messages.iter().map(|(f, m)| (*f, m.as_slice())),
        );
        Ok((bundle, logits))
    }

    /// The number of the step carried last, which the head stations keep its hidden states
    /// by (the route's `step`).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Rows of its top ids each head shard sends with the step's logits (the route's `top`):
    /// the model's `logit_rows`, one when every pick of the step is greedy.
    pub fn logit_rows(&self) -> usize {
        self.logit_rows
    }

    /// The step's outcome from the head shards' answers (slot `i` answering `model.slices[i]`,
    /// each a bundle of one answer per part wanting logits; `None` when no part wanted them):
    /// one event per sequence that picked a token or ended. A sequence whose answers fail ends
    /// with that error, alone. A pick the answers do not settle waits: [`Sequences::again`]
    /// says what to ask, [`Sequences::pick_again`] takes the answers.
    pub fn pick(
        &mut self,
        model: &Model,
        answers: Option<Vec<Answer<Vec<u8>>>>,
    ) -> Result<Vec<StepEvent>, HostError> {
        if !self.carried || !self.unsettled.is_empty() {
            return Err(HostError::NoContext);
        }
        self.carried = false;
        let parts = std::mem::take(&mut self.parts);
        let wanting: usize = parts.iter().filter(|p| p.logits).map(|p| p.rows).sum();
        // Each shard's bundle, split into one answer per part wanting logits.
        let per_shard: Vec<Vec<Answer<RowsMessage>>> = match answers {
            None if wanting > 0 => {
                let lost = "no head shard answered a step that wanted logits";
                vec![vec![Answer::Failed(lost.into()); wanting]; model.slices.len()]
            }
            None => Vec::new(),
            Some(answers) => (answers.into_iter().enumerate())
                .map(|(slot, a)| split_answer(model, slot, a, wanting))
                .collect(),
        };
        let mut events = Vec::new();
        let mut k = 0;
        for p in parts {
            let Some(at) = self.list.iter().position(|s| s.id() == p.id) else {
                continue;
            };
            let s = &mut self.list[at];
            if !p.logits {
                s.conversation.advance(p.positions);
                continue;
            }
            // One answer of each shard per row; the rows after the first wait their turn.
            let mut rows =
                (k..k + p.rows).map(|r| per_shard.iter().map(|a| a[r].clone()).collect::<Vec<_>>());
            let first = rows.next().unwrap_or_default();
            s.conversation.hold_rows(rows.collect());
            let part = k;
            k += p.rows;
            // The first row's pick takes every position but the later rows'.
            let positions = p.positions - (p.rows - 1);
            let pick = s.conversation.pick(model, first, positions);
            self.walk(model, p.id, part, positions, pick, &mut events);
        }
        self.carried = !self.unsettled.is_empty();
        Ok(events)
    }

    /// Sequence `id`'s events from a pick of the row at `part` on: the token, then on through a
    /// draft's rows while each pick keeps its draft token — from the rows the first answers
    /// hold, or waiting for `/again` when a row's pick asks otherwise (or a pick is unsettled).
    fn walk(
        &mut self,
        model: &Model,
        id: u64,
        mut part: usize,
        mut positions: usize,
        mut pick: Result<Pick, HostError>,
        events: &mut Vec<StepEvent>,
    ) {
        loop {
            let Some(at) = self.list.iter().position(|s| s.id() == id) else {
                return;
            };
            let token = match pick {
                Ok(Pick::Token(e)) => Ok(e),
                Ok(Pick::Retry(slots)) => Err(HostError::Station(format!(
                    "head shards {slots:?} gave no answer"
                ))),
                Ok(Pick::More(asks)) => {
                    self.unsettled.push(Unsettled {
                        id,
                        positions,
                        part,
                        asks,
                        fresh: None,
                    });
                    return;
                }
                Err(e) => Err(e),
            };
            let event = self.picked(at, id, token);
            let done = event.done;
            events.push(event);
            if done {
                return;
            }
            let c = &mut self.list[at].conversation;
            (part, positions) = (part + 1, 1);
            pick = match c.next_row(model) {
                Ok(None) => return,
                Ok(Some(NextRow::Held(answers))) => c.pick(model, answers, 1),
                Ok(Some(NextRow::Ask { asks, sums })) => {
                    self.unsettled.push(Unsettled {
                        id,
                        positions,
                        part,
                        asks,
                        fresh: Some(sums),
                    });
                    return;
                }
                Err(e) => Err(e),
            };
        }
    }

    /// What the picks still waiting need, as one `/again` per slot: `(slot, asks)`, the
    /// answers to go to [`Sequences::pick_again`] in this order.
    pub fn again(&self) -> Vec<(usize, Vec<Again>)> {
        let mut out: Vec<(usize, Vec<Again>)> = Vec::new();
        for u in &self.unsettled {
            for &(slot, logits) in &u.asks {
                let ask = Again {
                    part: u.part,
                    logits,
                    sums: u.fresh.clone(),
                };
                match out.iter_mut().find(|(s, _)| *s == slot) {
                    Some((_, list)) => list.push(ask),
                    None => out.push((slot, vec![ask])),
                }
            }
        }
        out
    }

    /// The picks still waiting, from the slots' answers to [`Sequences::again`] (`answers[i]`
    /// the bundle of `again()[i]`'s slot): events as [`Sequences::pick`] makes them; a pick
    /// still not settled waits for another round.
    pub fn pick_again(
        &mut self,
        model: &Model,
        answers: Vec<Answer<Vec<u8>>>,
    ) -> Result<Vec<StepEvent>, HostError> {
        let asked = self.again();
        if asked.is_empty() || answers.len() != asked.len() {
            return Err(HostError::NoContext);
        }
        let per_slot: Vec<Vec<Answer<RowsMessage>>> = (asked.iter().zip(answers))
            .map(|((slot, list), a)| split_answer(model, *slot, a, list.len()))
            .collect();
        let mut events = Vec::new();
        for u in std::mem::take(&mut self.unsettled) {
            let mut slots = Vec::with_capacity(u.asks.len());
            let mut got = Vec::with_capacity(u.asks.len());
            for &(slot, _) in &u.asks {
                let i = asked.iter().position(|(s, _)| *s == slot);
                let place = i.and_then(|i| asked[i].1.iter().position(|a| a.part == u.part));
                let (Some(i), Some(place)) = (i, place) else {
                    return Err(HostError::NoContext);
                };
                slots.push(slot);
                got.push(per_slot[i][place].clone());
            }
            let Some(at) = self.list.iter().position(|s| s.id() == u.id) else {
                continue;
            };
            let c = &mut self.list[at].conversation;
            // A row asked anew was asked of every slot, in order: a first answer.
            let pick = match u.fresh {
                Some(_) => c.pick(model, got, u.positions),
                None => c.pick_again(model, &slots, got, u.positions),
            };
            self.walk(model, u.id, u.part, u.positions, pick, &mut events);
        }
        self.carried = !self.unsettled.is_empty();
        Ok(events)
    }

    /// The event of sequence `id` (at `at` in the list) picking `token`, ending it when it is
    /// the last or an error.
    fn picked(&mut self, at: usize, id: u64, token: Result<Box<Emitted>, HostError>) -> StepEvent {
        let now = now_ms();
        let s = &mut self.list[at];
        if token.is_ok() {
            match s.last_ms {
                None => s.prefill_ms = now - s.admitted_ms,
                Some(t) => s.token_ms.push(now - t),
            }
            s.last_ms = Some(now);
            s.tokens += 1;
        }
        let done = token.as_ref().map_or(true, |e| e.finish_reason.is_some());
        let report = done.then(|| s.report());
        if done {
            let s = self.list.remove(at);
            // A part whose answers failed went through the layer stations all the same: they
            // hold positions it never counted.
            self.end(s, token.is_ok());
        }
        StepEvent {
            id,
            token,
            done,
            report,
        }
    }

    /// Ends the sequences of the step planned or carried (it could not be carried, or the caller
    /// gave up on it) — every sequence when no step is planned: their ids. What the stations
    /// hold of them is unknown: they forget them.
    pub fn abandon(&mut self) -> Vec<u64> {
        let mut parts = std::mem::take(&mut self.parts);
        // Picks waiting for more of the logits are parts of the step carried.
        for u in std::mem::take(&mut self.unsettled) {
            parts.push(Part {
                id: u.id,
                positions: u.positions,
                logits: true,
                rows: 1,
            });
        }
        self.carried = false;
        let in_step = |s: &Sequence| parts.is_empty() || parts.iter().any(|p| p.id == s.id());
        let (ended, running): (Vec<Sequence>, Vec<Sequence>) =
            self.list.drain(..).partition(in_step);
        self.list = running;
        let ids = ended.iter().map(Sequence::id).collect();
        for mut s in ended {
            // A claim may have been made: not kept as it was.
            s.claim = None;
            self.end(s, false);
        }
        ids
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
