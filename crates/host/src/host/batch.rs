//! Many sequences at once (continuous batching): a host opened with `maxSequences` admits
//! sequences between steps (`Host::admit`), and each `Host::step` runs one forward pass for
//! all of them — every decoding sequence's pending token (and draft), plus one chunk of at most
//! `maxBatch` positions of the oldest prompt still being prefilled, so a long prompt delays the
//! others' next tokens by one chunk at most. Their rows share each layer's matmuls
//! ([`engine::Joint`]); RoPE, KV cache and attention stay each sequence's own, so each sequence's
//! tokens are the ones it gets alone, bit for bit. Each sequence has its own decode pipeline
//! (sampling, MOA, COLTRANE, drafts, stop rules) and ends on its own (`Host::cancel`, a
//! finish, a failure of its own), freeing its slot for the next.

use super::conversation::Conversation;
use super::layers::{LayerStore, Logits, Resident};
use super::open::PassLimits;
use super::stats::DecodeStats;
use crate::clock::now_ms;
use crate::error::HostError;
use engine::decode::{Emitted, FinishReason, GenerateOptions, Generation};
use engine::draft::{DraftConfig, DraftLimits, NextPass, Speculation};
use engine::kv::KvType;
use engine::model::ConfigExt;
use engine::options::OptionsError;
use engine::tokenizer::Tokenizer;
use engine::{Joint, Session};
use knot::ModelConfig;
use std::rc::Rc;

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
}

/// The sequences a host runs together, and the buffers their steps share.
pub(crate) struct Batch {
    /// Active sequences, oldest first.
    sequences: Vec<Sequence>,
    max: usize,
    /// Sessions of ended sequences, kept for the next (their KV caches already allocated).
    spare: Vec<Session>,
    joint: Joint,
    next_id: SequenceId,
    /// Whether open planned memory (each session's KV cache is then taken at once).
    planned: bool,
}

/// One sequence: its conversation (session, tokens, generation, steps) and speculation state.
struct Sequence {
    id: SequenceId,
    conv: Conversation,
    spec: Speculation,
    /// The prompt, and how much of it has run.
    prompt: Vec<u32>,
    prefilled: usize,
    /// This step's rows (a prefill chunk, or the pending token and a draft), what it wants of
    /// their logits, and the position it began at.
    rows: Vec<u32>,
    want: Option<Logits>,
    at: usize,
}

impl Batch {
    pub fn new(cfg: &knot::ModelConfig, max: usize, planned: bool) -> Self {
        Batch {
            sequences: Vec::with_capacity(max),
            max,
            spare: Vec::new(),
            joint: Joint::new(cfg),
            next_id: 1,
            planned,
        }
    }

    /// Active sequences.
    pub fn len(&self) -> usize {
        self.sequences.len()
    }

    /// The KV cache bytes every sequence (and every spare session) holds.
    pub fn kv_bytes(&self) -> usize {
        let active = self.sequences.iter().map(|s| s.conv.session.kv_bytes());
        active.sum::<usize>() + self.spare.iter().map(Session::kv_bytes).sum::<usize>()
    }

    /// Ends sequence `i`: its session is kept for the next one. Returns its id and generation.
    fn release(&mut self, i: usize) -> (SequenceId, Option<Generation>) {
        let Sequence { id, conv, .. } = self.sequences.remove(i);
        let Conversation {
            mut session,
            generation,
            ..
        } = conv;
        session.reset();
        self.spare.push(session);
        (id, generation)
    }
}

/// What admitting a sequence needs of the host.
pub(crate) struct AdmitContext<'a> {
    pub cfg: &'a ModelConfig,
    pub tokenizer: &'a Rc<Tokenizer>,
    pub context: usize,
    pub kv_type: KvType,
    pub draft_default: Option<&'a DraftConfig>,
}

/// What a step needs of the host: the layers, the resident tensors, the pass limits.
pub(crate) struct StepContext<'a> {
    pub layers: &'a mut LayerStore,
    pub resident: &'a Resident,
    pub limits: PassLimits,
    pub stats: &'a mut DecodeStats,
}

impl Batch {
    /// The most sequences it holds at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// See `Host::admit`.
    pub fn admit(
        &mut self,
        h: AdmitContext<'_>,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<SequenceId, HostError> {
        h.cfg.check_tokens(prompt)?;
        if opts.continue_session {
            return Err(OptionsError::Invalid {
                name: "continue".into(),
                rule: "false when the host runs several sequences".into(),
                got: "true".into(),
            }
            .into());
        }
        if prompt.is_empty() {
            return Err(HostError::EmptyPrompt);
        }
        if self.sequences.len() >= self.max {
            return Err(HostError::SequencesFull { max: self.max });
        }
        if prompt.len() > h.context {
            return Err(HostError::PromptTooLong {
                tokens: prompt.len(),
                context: h.context,
            });
        }
        let generation = Generation::new(
            opts,
            h.tokenizer.clone(),
            &h.cfg.eos_ids,
            h.context - prompt.len(),
        )?;
        let session = match self.spare.pop() {
            Some(s) => s,
            None => {
                let mut s = Session::with_kv(h.cfg, h.context, h.kv_type)?;
                if self.planned {
                    s.reserve_kv();
                }
                s
            }
        };
        let mut conv = Conversation::new(session, now_ms());
        conv.generation = Some(generation);
        let mut spec = Speculation::new();
        spec.start(opts.draft.resolve(h.draft_default));
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.sequences.push(Sequence {
            id,
            conv,
            spec,
            prompt: prompt.to_vec(),
            prefilled: 0,
            rows: Vec::new(),
            want: None,
            at: 0,
        });
        Ok(id)
    }

    /// See `Host::cancel`.
    pub fn cancel(&mut self, id: SequenceId) -> bool {
        match self.sequences.iter().position(|s| s.id == id) {
            Some(i) => {
                self.release(i);
                true
            }
            None => false,
        }
    }

    /// See `Host::step`.
    pub async fn step(&mut self, h: StepContext<'_>) -> Vec<SequenceEvent> {
        let limits = h.limits;
        let batch = self;
        let mut events = Vec::new();
        // Plan each sequence's rows.
        let mut prefilling = false;
        let mut i = 0;
        while i < batch.sequences.len() {
            let seq = &mut batch.sequences[i];
            seq.want = None;
            seq.at = seq.conv.session.position();
            if seq.prefilled < seq.prompt.len() {
                if !prefilling {
                    // The oldest prompt still prefilling runs one chunk this step.
                    prefilling = true;
                    let end = seq
                        .prompt
                        .len()
                        .min(seq.prefilled + limits.max_batch.max(1));
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
            let conv = &mut seq.conv;
            let draft_limits = DraftLimits {
                room: conv.session.max_context().saturating_sub(seq.at + 1),
                max_verify: limits.max_verify,
                max_batch: limits.max_batch,
            };
            let next = seq
                .spec
                .next(conv.generation.as_mut(), &conv.tokens, draft_limits);
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
            if deliver(batch, i, ahead, &mut events) {
                i += 1;
            }
        }

        // The pass: every planned sequence's rows through every layer, together.
        let planned: Vec<usize> = (0..batch.sequences.len())
            .filter(|&i| batch.sequences[i].want.is_some())
            .collect();
        if planned.is_empty() {
            return events;
        }
        // Past the last layer, prefetch the first ones only when another step follows.
        let more_follows = batch.sequences.iter().any(|s| {
            s.prefilled < s.prompt.len()
                || s.conv
                    .generation
                    .as_ref()
                    .is_some_and(Generation::more_follows)
        });
        let t0 = now_ms();
        let mut sessions = Vec::with_capacity(planned.len());
        let mut rows = Vec::with_capacity(planned.len());
        let mut want = Vec::with_capacity(planned.len());
        for seq in batch.sequences.iter_mut().filter(|s| s.want.is_some()) {
            sessions.push(&mut seq.conv.session);
            rows.push(&seq.rows[..]);
            want.push(seq.want.unwrap_or(Logits::None));
        }
        let ran = h
            .layers
            .joint_pass(
                &mut batch.joint,
                &mut sessions,
                &rows,
                &want,
                h.resident,
                more_follows,
            )
            .await;
        drop(sessions);
        if let Err(failed) = ran {
            // Every sequence in the pass ends with the failure (newest first, so the indices
            // stay valid; the oldest gets the error itself).
            for (k, &i) in planned.iter().enumerate().rev() {
                let error = match k {
                    0 => break,
                    _ => failed.replica(),
                };
                let (id, generation) = batch.release(i);
                events.push(ended(id, generation, Err(error)));
            }
            let (id, generation) = batch.release(planned[0]);
            events.push(ended(id, generation, Err(failed)));
            h.stats.forward_passes += 1;
            return events;
        }
        let ms = now_ms() - t0;
        h.stats.forward_passes += 1;

        // Each planned sequence picks from its rows (k: its place in the pass).
        for (k, &i) in planned.iter().enumerate().rev() {
            let seq = &mut batch.sequences[i];
            let logits = batch.joint.logits(k);
            let token = match seq.want {
                Some(Logits::None) => {
                    seq.prefilled += seq.rows.len();
                    continue;
                }
                _ if seq.prefilled < seq.prompt.len() => {
                    // The prompt's last chunk: its logits wait for the first pick.
                    seq.prefilled = seq.prompt.len();
                    seq.spec.prefilled();
                    let conv = &mut seq.conv;
                    conv.tokens.extend_from_slice(&seq.prompt);
                    if let Some(g) = conv.generation.as_mut() {
                        g.accept_context(&conv.tokens);
                        g.set_clock(now_ms);
                    }
                    pick(seq, logits)
                }
                Some(Logits::All) => {
                    seq.spec.pass_done(ms);
                    verify(seq, logits, h.stats)
                }
                _ => {
                    seq.spec.pass_done(ms);
                    pick(seq, logits)
                }
            };
            deliver(batch, i, token, &mut events);
        }
        h.stats.decode_tokens += events
            .iter()
            .filter(|e| matches!(e.token, Ok(Some(_))))
            .count() as u64;
        events
    }
}

/// Picks the next token of `seq` from `logits` (its last row's).
fn pick(seq: &mut Sequence, logits: &mut [f32]) -> Result<Option<Emitted>, HostError> {
    let conv = &mut seq.conv;
    let Some(generation) = conv.generation.as_mut().filter(|g| g.finished().is_none()) else {
        return Ok(None);
    };
    Ok(Some(seq.spec.pick(generation, logits)?))
}

/// Picks from a verify pass's rows (`logits`) and rewinds the KV cache to the rows picked from.
fn verify(
    seq: &mut Sequence,
    logits: &mut [f32],
    stats: &mut DecodeStats,
) -> Result<Option<Emitted>, HostError> {
    let conv = &mut seq.conv;
    let Some(generation) = conv.generation.as_mut() else {
        return Ok(None);
    };
    let verified = match seq.spec.verify(generation, logits) {
        Ok(v) => v,
        Err(e) => {
            conv.session.rewind(seq.at)?;
            return Err(e.into());
        }
    };
    conv.session.rewind(seq.at + verified.keep)?;
    stats.verify_passes += 1;
    stats.drafted += verified.drafted as u64;
    stats.accepted += verified.accepted as u64;
    Ok(Some(verified.first))
}

/// Records what sequence `i` made this step as an event, releasing it when it ended. Returns
/// whether it is still active (at index `i`).
fn deliver(
    batch: &mut Batch,
    i: usize,
    token: Result<Option<Emitted>, HostError>,
    events: &mut Vec<SequenceEvent>,
) -> bool {
    let seq = &mut batch.sequences[i];
    let finished = match &token {
        Ok(Some(e)) => {
            seq.conv.tokens.push(e.id);
            seq.conv.steps.push(e.step.clone());
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
        });
        return true;
    }
    let (id, generation) = batch.release(i);
    events.push(ended(id, generation, token));
    false
}

/// The event of a sequence that ended.
fn ended(
    id: SequenceId,
    generation: Option<Generation>,
    token: Result<Option<Emitted>, HostError>,
) -> SequenceEvent {
    let generation = generation.as_ref();
    let finish_reason = match &token {
        Ok(Some(e)) => e.finish_reason,
        Ok(None) => generation.and_then(Generation::finished),
        Err(_) => None,
    };
    SequenceEvent {
        id,
        token,
        done: true,
        finish_reason,
        constraint: generation.and_then(Generation::constraint_metrics),
    }
}
