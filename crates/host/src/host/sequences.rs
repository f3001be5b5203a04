//! The sequences a host runs (continuous batching): `Host::admit` adds one between steps, and each
//! `Host::step` runs one forward pass for all of them — every decoding sequence's pending token
//! (and draft), plus one chunk of at most `maxBatch` positions of the prompts still being
//! prefilled (oldest first), so a long prompt delays the others' next tokens by one chunk at most. Their rows
//! share each layer's matmuls ([`engine::Joint`]); RoPE, KV cache and attention stay each
//! sequence's own, so each sequence's tokens are the ones it gets alone, bit for bit. Each has its
//! own decode pipeline (sampling, MOA, COLTRANE, drafts, stop rules) and ends on its own
//! (`Host::cancel`, a finish, a failure), parking its conversation in the prefix windows and
//! freeing its slot for the next. One sequence is a batch of one: there is no other mode.

use super::layers::{LayerStore, Logits, Resident};
use super::open::PassLimits;
use super::stats::{ratio, DecodeStats, SequenceReport};
use super::windows::Windows;
use crate::clock::now_ms;
use crate::error::HostError;
use crate::reader::IoCounters;
use engine::decode::{Emitted, FinishReason, Generation};
use engine::draft::{DraftLimits, Drafter, NextPass, Speculation};
use engine::{Joint, Session};
use knot::ModelConfig;

/// A sequence's handle, unique for the host's life.
pub type SequenceId = u32;

/// What one step did for one sequence.
#[derive(Debug)]
pub struct SequenceEvent {
    pub id: SequenceId,
    /// The token it made this step (none while its prompt is being prefilled, or when it ended
    /// without one), or why it failed.
    pub token: Result<Option<Emitted>, HostError>,
    /// It ended (a finish reason, or a failure): its slot is free, its handle forgotten.
    pub done: bool,
    pub finish_reason: Option<FinishReason>,
    /// What its constraint did, once it ended with one.
    pub constraint: Option<coltrane::Metrics>,
    /// What the health monitor saw, once it ended with one watching.
    pub health: Option<engine::health::HealthMetrics>,
    /// What it did, once it ended.
    pub report: Option<Box<SequenceReport>>,
}

/// One generation: its session (KV cache), conversation, pipeline and speculation state.
pub(crate) struct Sequence {
    pub id: SequenceId,
    pub session: Session,
    /// The window whose KV cache it runs in (it parks there when it ends).
    slot: usize,
    /// The conversation: its prompt once prefilled, then every token handed out.
    tokens: Vec<u32>,
    generation: Generation,
    spec: Speculation,
    /// The whole prompt, and how much of it is in the KV cache (served from a window, or run).
    prompt: Vec<u32>,
    prefilled: usize,
    /// How much of the prompt was a conversation already (what `continue` continued): it is
    /// the conversation still if this sequence ends before its prompt has run.
    committed: usize,
    /// This step's rows (a prefill chunk, or the pending token and a draft), what it wants of
    /// their logits, and the position it began at.
    rows: Vec<u32>,
    want: Option<Logits>,
    at: usize,
    report: SequenceReport,
    admitted_at: f64,
    /// When its last token was handed out, and the layer reads when its first was.
    last_token_at: Option<f64>,
    reads_at_first: u64,
}

impl Sequence {
    /// A sequence whose session (running in window `slot`'s cache) holds the prompt's first
    /// `kept` tokens already, the first `committed` of which were a conversation before it.
    pub fn new(
        session: Session,
        slot: usize,
        prompt: Vec<u32>,
        (kept, committed): (usize, usize),
        generation: Generation,
        spec: Speculation,
        report: SequenceReport,
    ) -> Self {
        Sequence {
            id: 0,
            session,
            slot,
            tokens: Vec::new(),
            generation,
            spec,
            prompt,
            prefilled: kept,
            committed,
            rows: Vec::new(),
            want: None,
            at: 0,
            report,
            admitted_at: now_ms(),
            last_token_at: None,
            reads_at_first: 0,
        }
    }

    fn prefilling(&self) -> bool {
        self.prefilled < self.prompt.len()
    }
}

/// The sequences a host runs, and the buffers their steps share.
pub(crate) struct Sequences {
    /// Active sequences, oldest first.
    active: Vec<Sequence>,
    max: usize,
    /// Sessions of ended sequences, kept for the next (their buffers allocated; their KV caches
    /// are the windows', lent while they run).
    spare: Vec<Session>,
    joint: Joint,
    next_id: SequenceId,
    /// Positions every step so far has run (prompt chunks, pending tokens, drafts).
    positions: u64,
}

/// What a step needs of the host.
pub(crate) struct StepContext<'a> {
    pub layers: &'a mut LayerStore,
    pub resident: &'a Resident,
    pub limits: PassLimits,
    pub windows: &'a mut Windows,
    pub io: &'a IoCounters,
}

impl Sequences {
    pub fn new(cfg: &ModelConfig, max: usize) -> Self {
        Sequences {
            active: Vec::with_capacity(max),
            max,
            spare: Vec::new(),
            joint: Joint::new(cfg),
            next_id: 1,
            positions: 0,
        }
    }

    /// The most it runs at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Active sequences.
    pub fn len(&self) -> usize {
        self.active.len()
    }

    /// Positions every step so far has run.
    pub fn positions(&self) -> u64 {
        self.positions
    }

    /// The KV cache bytes every sequence (and every spare session) holds.
    pub fn kv_bytes(&self) -> usize {
        let active = self.active.iter().map(|s| s.session.kv_bytes());
        active.sum::<usize>() + self.spare.iter().map(Session::kv_bytes).sum::<usize>()
    }

    /// The joint pass's buffers (a prefill window's prefill runs through them too).
    pub fn joint(&mut self) -> &mut Joint {
        &mut self.joint
    }

    /// A session for a new sequence: a spare one, or `make()`.
    pub fn take_session(
        &mut self,
        make: impl FnOnce() -> Result<Session, HostError>,
    ) -> Result<Session, HostError> {
        match self.spare.pop() {
            Some(s) => Ok(s),
            None => make(),
        }
    }

    /// A session taken but not used (no window was free for it).
    pub fn give_back(&mut self, session: Session) {
        self.spare.push(session);
    }

    /// Adds `seq` (its slot checked by the caller); returns its id.
    pub fn push(&mut self, mut seq: Sequence) -> SequenceId {
        seq.id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let id = seq.id;
        self.active.push(seq);
        id
    }

    fn index(&self, id: SequenceId) -> Option<usize> {
        self.active.iter().position(|s| s.id == id)
    }

    /// Replaces sequence `id`'s drafter; false when it is not active.
    pub fn set_drafter(
        &mut self,
        id: SequenceId,
        drafter: Box<dyn Drafter>,
        margin: Option<f32>,
    ) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        self.active[i].spec.set_drafter(drafter, margin);
        true
    }

    /// Ends sequence `id` between steps (its conversation parked); its report, or None when it
    /// is not active.
    pub fn cancel(
        &mut self,
        id: SequenceId,
        windows: &mut Windows,
        io: &IoCounters,
    ) -> Option<SequenceReport> {
        let i = self.index(id)?;
        let (_, report) = self.release(i, windows, io);
        Some(report)
    }

    /// Ends sequence `i`: its conversation is parked in a window (the handed-out tokens, or the
    /// part of its prompt prefilled) and its session kept for the next sequence.
    fn release(
        &mut self,
        i: usize,
        windows: &mut Windows,
        io: &IoCounters,
    ) -> (Generation, SequenceReport) {
        let Sequence {
            mut session,
            slot,
            tokens,
            generation,
            prompt,
            prefilled,
            committed,
            mut report,
            reads_at_first,
            ..
        } = self.active.remove(i);
        // Ended before its first token: the conversation is what had run of the prompt, or the
        // conversation it continued (its KV holds at least all but that one's last token).
        let (held, prompt_len) = match tokens.is_empty() {
            true => {
                let n = prefilled.max(committed);
                (&prompt[..n], n)
            }
            false => (&tokens[..], prompt.len()),
        };
        windows.park(&mut session, slot, held, prompt_len, now_ms());
        self.spare.push(session);
        let d = &mut report.decode;
        d.tokens_per_pass = ratio(d.decode_tokens, d.forward_passes);
        if d.decode_tokens > 0 {
            report.decode_layer_reads = io.reads.get() - reads_at_first;
            report.layer_reads_per_token = ratio(report.decode_layer_reads, d.decode_tokens);
        }
        (generation, report)
    }

    /// See `Host::step`.
    pub async fn step(&mut self, h: StepContext<'_>) -> Vec<SequenceEvent> {
        let limits = h.limits;
        let mut events = Vec::new();
        // Plan each sequence's rows. Prompts still prefilling share one chunk of at most
        // `maxBatch` positions, oldest first: a long prompt delays the others by one chunk a
        // step, and several short ones (the new turns of chats whose prefixes were reused) run
        // in one pass.
        let mut chunk_left = limits.max_batch.max(1);
        let mut i = 0;
        while i < self.active.len() {
            let seq = &mut self.active[i];
            seq.want = None;
            seq.at = seq.session.position();
            if seq.prefilling() {
                if chunk_left > 0 {
                    let end = seq
                        .prompt
                        .len()
                        .min(seq.prefilled.saturating_add(chunk_left));
                    chunk_left -= end - seq.prefilled;
                    seq.rows.clear();
                    seq.rows.extend_from_slice(&seq.prompt[seq.prefilled..end]);
                    seq.want = Some(match end == seq.prompt.len() {
                        true => Logits::Last,
                        false => Logits::None,
                    });
                }
                i += 1;
                continue;
            }
            let draft_limits = DraftLimits {
                room: seq.session.max_context().saturating_sub(seq.at + 1),
                max_verify: limits.max_verify,
                max_batch: limits.max_batch,
            };
            let next = seq
                .spec
                .next(Some(&mut seq.generation), &seq.tokens, draft_limits);
            let ahead = match next {
                NextPass::Run {
                    batch: rows,
                    verify,
                } => {
                    seq.rows.clear();
                    seq.rows.extend_from_slice(rows);
                    seq.want = Some(if verify { Logits::All } else { Logits::Last });
                    i += 1;
                    continue;
                }
                NextPass::Ahead(e) => Ok(Some(e)),
                NextPass::Finished => Ok(None),
                NextPass::NoContext | NextPass::Pick => Err(HostError::NoContext),
            };
            if self.deliver(i, ahead, &mut events, h.windows, h.io) {
                i += 1;
            }
        }

        // The pass: every planned sequence's rows through every layer, together.
        let planned: Vec<usize> = (0..self.active.len())
            .filter(|&i| self.active[i].want.is_some())
            .collect();
        if planned.is_empty() {
            return events;
        }
        // Past the last layer, prefetch the first ones only when another step follows.
        let more_follows = self
            .active
            .iter()
            .any(|s| s.prefilling() || s.generation.more_follows());
        let t0 = now_ms();
        let mut sessions = Vec::with_capacity(planned.len());
        let mut rows = Vec::with_capacity(planned.len());
        let mut want = Vec::with_capacity(planned.len());
        for seq in self.active.iter_mut().filter(|s| s.want.is_some()) {
            self.positions += seq.rows.len() as u64;
            sessions.push(&mut seq.session);
            rows.push(&seq.rows[..]);
            want.push(seq.want.unwrap_or(Logits::None));
        }
        let ran = h
            .layers
            .joint_pass(
                &mut self.joint,
                &mut sessions,
                &rows,
                &want,
                h.resident,
                more_follows,
            )
            .await;
        drop(sessions);
        for &i in &planned {
            let seq = &mut self.active[i];
            seq.report.decode.forward_passes += u64::from(!seq.prefilling());
        }
        if let Err(failed) = ran {
            // Every sequence in the pass ends with the failure (newest first, so the indices
            // stay valid; the oldest gets the error itself).
            for (k, &i) in planned.iter().enumerate().rev() {
                let error = match k {
                    0 => break,
                    _ => failed.replica(),
                };
                let id = self.active[i].id;
                let (generation, report) = self.release(i, h.windows, h.io);
                events.push(ended(id, generation, report, Err(error)));
            }
            let id = self.active[planned[0]].id;
            let (generation, report) = self.release(planned[0], h.windows, h.io);
            events.push(ended(id, generation, report, Err(failed)));
            return events;
        }
        let ms = now_ms() - t0;

        // Each planned sequence picks from its rows (k: its place in the pass).
        for (k, &i) in planned.iter().enumerate().rev() {
            let seq = &mut self.active[i];
            let logits = self.joint.logits(k);
            let token = match seq.want {
                Some(Logits::None) => {
                    seq.prefilled += seq.rows.len();
                    continue;
                }
                _ if seq.prefilling() => {
                    // The prompt's last chunk: its logits wait for the first pick.
                    seq.prefilled = seq.prompt.len();
                    seq.spec.prefilled();
                    seq.tokens.clone_from(&seq.prompt);
                    seq.generation.accept_context(&seq.tokens);
                    seq.generation.set_clock(now_ms);
                    pick(seq, logits)
                }
                Some(Logits::All) => {
                    seq.spec.pass_done(ms);
                    verify(seq, logits)
                }
                _ => {
                    seq.spec.pass_done(ms);
                    pick(seq, logits)
                }
            };
            self.deliver(i, token, &mut events, h.windows, h.io);
        }
        events
    }

    /// Records what sequence `i` made this step as an event, releasing it when it ended.
    /// Returns whether it is still active (at index `i`).
    fn deliver(
        &mut self,
        i: usize,
        token: Result<Option<Emitted>, HostError>,
        events: &mut Vec<SequenceEvent>,
        windows: &mut Windows,
        io: &IoCounters,
    ) -> bool {
        let seq = &mut self.active[i];
        let finished = match &token {
            Ok(Some(e)) => {
                let now = now_ms();
                match seq.last_token_at {
                    None => {
                        seq.report.prefill_ms = now - seq.admitted_at;
                        seq.reads_at_first = io.reads.get();
                    }
                    Some(t) => seq.report.token_ms.push(now - t),
                }
                seq.last_token_at = Some(now);
                seq.report.decode.decode_tokens += 1;
                seq.tokens.push(e.id);
                e.finish_reason.is_some()
            }
            Ok(None) | Err(_) => true,
        };
        if !finished {
            events.push(SequenceEvent {
                id: seq.id,
                token,
                done: false,
                finish_reason: None,
                constraint: None,
                health: None,
                report: None,
            });
            return true;
        }
        let id = seq.id;
        let (generation, report) = self.release(i, windows, io);
        events.push(ended(id, generation, report, token));
        false
    }
}

/// Picks the next token of `seq` from `logits` (its last row's).
fn pick(seq: &mut Sequence, logits: &mut [f32]) -> Result<Option<Emitted>, HostError> {
    if seq.generation.finished().is_some() {
        return Ok(None);
    }
    Ok(Some(seq.spec.pick(&mut seq.generation, logits)?))
}

/// Picks from a verify pass's rows (`logits`) and rewinds the KV cache to the rows picked from.
fn verify(seq: &mut Sequence, logits: &mut [f32]) -> Result<Option<Emitted>, HostError> {
    let verified = match seq.spec.verify(&mut seq.generation, logits) {
        Ok(v) => v,
        Err(e) => {
            seq.session.rewind(seq.at)?;
            return Err(e.into());
        }
    };
    // Row j was computed after draft[..j]: keep the positions of the rows picked from.
    seq.session.rewind(seq.at + verified.keep)?;
    let d: &mut DecodeStats = &mut seq.report.decode;
    d.verify_passes += 1;
    d.drafted += verified.drafted as u64;
    d.accepted += verified.accepted as u64;
    Ok(Some(verified.first))
}

/// The event of a sequence that ended.
fn ended(
    id: SequenceId,
    generation: Generation,
    report: SequenceReport,
    token: Result<Option<Emitted>, HostError>,
) -> SequenceEvent {
    let finish_reason = match &token {
        Ok(Some(e)) => e.finish_reason,
        Ok(None) => generation.finished(),
        Err(_) => None,
    };
    SequenceEvent {
        id,
        token,
        done: true,
        finish_reason,
        constraint: generation.constraint_metrics(),
        health: generation.health_metrics(),
        report: Some(Box::new(report)),
    }
}
