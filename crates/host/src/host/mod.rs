//! The host: opens a knot file through a [`ByteSource`] with a handful of range reads, keeps the
//! resident tensors, streams layers through the layer cache with prefetch, and runs sequences —
//! `admit` (a prompt) then `step` (one forward pass for every sequence) — through the one decode
//! loop. One sequence is a batch of one; there is no other mode.
//!
//! - `open.rs` — the reads at open and the memory plan;
//! - `layers.rs` — the resident tensors, the layer store, and the joint pass;
//! - `sequences.rs` — the sequences run together and their steps;
//! - `windows.rs` — the conversations kept for prefix reuse; `prefill_windows.rs` — the explicit
//!   prefill windows, pinned by id;
//! - `stats.rs` — what `stats()` reports and what each sequence's caller gets.

mod layers;
mod open;
mod prefill_windows;
mod sequences;
mod stats;
mod windows;

pub use prefill_windows::DEFAULT_TTL_MS;
pub use sequences::{SequenceEvent, SequenceId};
pub use stats::{
    DecodeStats, PrefillWindowCreated, PrefillWindowInfo, PrefillWindowStats, PrefixCounts,
    PrefixKind, PrefixReport, SequenceCounts, SequenceReport, Stats, StepCounts,
};

use crate::chat_template::{self, ChatTemplate, TemplateReport};
use crate::clock::{epoch_ms, now_ms};
use crate::error::HostError;
use crate::options::HostOptions;
use crate::reader::Abort;
use crate::source::ByteSource;
use engine::chat::ChatMessage;
use engine::decode::{Emitted, FinishReason, GenerateOptions, Generation};
use engine::draft::{Drafter, Speculation};
use engine::model::ConfigExt;
use engine::options::OptionsError;
use engine::tokenizer::Tokenizer;
use engine::{Session, StepInfo};
use knot::{Knot, ModelConfig};
use layers::{LayerStore, Logits, Resident};
use open::PassLimits;
use prefill_windows::{Lent, PrefillWindows};
use sequences::{Sequence, Sequences, StepContext};
use std::cell::RefCell;
use std::rc::Rc;
use windows::Windows;

/// What a finished [`Host::generate`] produced.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Generated {
    /// Every token, an end-of-text one included.
    pub ids: Vec<u32>,
    /// Their text (an end-of-text token adds none).
    pub text: String,
    /// None when the caller's `on_token` stopped it.
    pub finish_reason: Option<FinishReason>,
    pub steps: Vec<StepInfo>,
    /// What the constraint did, when one ran.
    pub constraint: Option<coltrane::Metrics>,
    /// What the health monitor saw, when one watched.
    pub health: Option<engine::health::HealthMetrics>,
    /// What the generation did (prefix reuse, prefill, passes, drafts).
    pub report: SequenceReport,
}

/// A sequence admitted: its handle, its whole prompt's length (with `continue`, the
/// conversation continued included), and how the prompt used a window.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admitted {
    pub id: SequenceId,
    pub prompt_tokens: usize,
    pub prefix: Option<PrefixReport>,
}

pub struct Host {
    knot: Knot,
    /// Where the chat template came from (the option, the file, or implied by the vocabulary);
    /// None when the model has none.
    chat_template: Option<TemplateReport>,
    tokenizer: Rc<Tokenizer>,
    resident: Resident,
    layers: LayerStore,
    limits: PassLimits,
    /// The sequences running.
    sequences: Sequences,
    /// The conversations kept for prefix reuse, and the explicit prefill windows.
    windows: Windows,
    prefill_windows: PrefillWindows,
    /// Prefills explicit windows (their KV swapped in); every session's shape.
    scratch: Session,
    /// Speculative decoding for generations that do not choose.
    draft_default: Option<engine::draft::DraftConfig>,
    /// What `stats()` reads, updated in place as the host goes (shared with the wasm boundary,
    /// which reads it on request, during a step too).
    stats: Rc<RefCell<Stats>>,
}

impl Host {
    /// Opens a knot file (see `open.rs`). Layers are read later, on demand.
    pub async fn open(source: Rc<dyn ByteSource>, opts: HostOptions) -> Result<Host, HostError> {
        for (name, value) in [
            ("lruCapacity", opts.lru_capacity),
            ("maxContext", opts.max_context),
        ] {
            if value == 0 {
                return Err(OptionsError::Invalid {
                    name: name.into(),
                    rule: "an integer >= 1".into(),
                    got: "0".into(),
                }
                .into());
            }
        }
        if let Some(n) = opts.threads {
            engine::quant::set_threads(n).map_err(|e| HostError::InvalidOption(e.to_string()))?;
        }
        let t0 = now_ms();
        let mut o = open::open(source, &opts).await?;
        let template = chat_template::resolve(
            o.knot.meta.chat_template.as_deref(),
            opts.chat_template.as_deref(),
            &o.knot.meta.architecture,
            &o.tokenizer,
        );
        let chat_template = template.as_ref().map(ChatTemplate::report);
        o.knot.meta.chat_template = template.map(|t| t.text);
        let planned = o.planned;
        let reserve = planned.plan.is_some();
        let windows = Windows::new(&o.scratch, planned.windows, opts.prefix_ttl_ms, reserve);
        // The ids' seed: the time and where the host's allocations landed.
        let seed = epoch_ms().to_bits() ^ (o.resident.bytes.as_ptr() as u64).rotate_left(32);
        let prefill_windows =
            PrefillWindows::new(opts.prefill_windows, opts.prefill_window_max_tokens, seed);
        let stats = Stats {
            resident_bytes: o.resident.bytes.len() as u64,
            open_ms: now_ms() - t0,
            memory_plan: planned.plan,
            context_length: planned.context,
            ..Stats::default()
        };
        let sequences = Sequences::new(&o.knot.meta.config, planned.sequences);
        let host = Host {
            chat_template,
            knot: o.knot,
            tokenizer: o.tokenizer,
            resident: o.resident,
            layers: o.layers,
            limits: planned.limits,
            sequences,
            windows,
            prefill_windows,
            scratch: o.scratch,
            draft_default: opts.draft,
            stats: Rc::new(RefCell::new(stats)),
        };
        host.publish();
        Ok(host)
    }

    pub fn config(&self) -> &ModelConfig {
        &self.knot.meta.config
    }

    pub fn knot(&self) -> &Knot {
        &self.knot
    }

    pub fn tokenizer(&self) -> &Rc<Tokenizer> {
        &self.tokenizer
    }

    /// The chat template chats are rendered with (`knot().meta.chat_template`), and where it
    /// came from; None when the model has no recognisable convention.
    pub fn chat_template(&self) -> Option<TemplateReport> {
        self.chat_template
    }

    /// Positions a sequence's context holds (under a memory budget, what fits).
    pub fn context_length(&self) -> usize {
        self.scratch.max_context()
    }

    /// Aborts the call in flight (`step`, a prefill window's prefill, `load_layer`): its reads
    /// are abandoned at once and its layer loop stops before the next layer. A step aborted
    /// ends the sequences in it. A call begun afterwards runs normally.
    pub fn abort_handle(&self) -> Abort {
        self.layers.reader().abort_handle().clone()
    }

    /// A new call: an abort meant for an earlier one does not apply.
    fn begin_call(&self) {
        self.layers.reader().abort_handle().clear();
    }

    /// What the host did so far (cache, I/O, memory, sequences, prefix reuse), as of now.
    pub fn stats(&self) -> Stats {
        self.stats.borrow().clone()
    }

    /// The same figures, shared: they stay current as the host goes, and reading them never
    /// waits for a call in flight.
    pub fn stats_handle(&self) -> Rc<RefCell<Stats>> {
        self.stats.clone()
    }

    /// Brings the gauges of `stats()` up to date (counters are added as they happen).
    fn publish(&self) {
        let io = &self.layers.reader().io;
        let cache = self.layers.cache_stats();
        let mut s = self.stats.borrow_mut();
        s.bytes_fetched = io.bytes.get();
        s.range_reads = io.reads.get();
        s.read_retries = io.retries.get();
        s.read_timeouts = io.timeouts.get();
        s.peak_resident_bytes = s.resident_bytes + cache.peak_layer_bytes;
        s.cache = cache;
        s.kv_cache_bytes = (self.sequences.kv_bytes()
            + self.windows.kv_bytes()
            + self.prefill_windows.kv_bytes()
            + self.scratch.kv_bytes()) as u64;
        s.sequences.max = self.sequences.max();
        s.sequences.active = self.sequences.len();
        s.prefix_reuse.windows = self.windows.count();
        s.prefix_reuse.windows_held = self.windows.in_use();
        s.prefill_windows = self.prefill_windows.stats();
        let st = &mut s.steps;
        st.positions = self.sequences.positions();
        st.tokens_per_step = stats::ratio(st.tokens, st.steps);
    }

    /// The most sequences [`Host::admit`] holds at once.
    pub fn max_sequences(&self) -> usize {
        self.sequences.max()
    }

    /// Sequences admitted and not yet ended.
    pub fn active_sequences(&self) -> usize {
        self.sequences.len()
    }

    /// Forgets every conversation kept for prefix reuse and every explicit prefill window;
    /// sequences running and cached layers stay.
    pub fn reset(&mut self) {
        self.windows.clear();
        self.prefill_windows.clear();
        self.publish();
    }

    /// Starts fetching layer `layer` in the background (no-op if cached or in flight).
    pub fn prefetch_layer(&mut self, layer: usize) -> Result<(), HostError> {
        if layer >= self.config().n_layers {
            return Err(HostError::NoSuchLayer(layer));
        }
        self.layers.prefetch(layer);
        Ok(())
    }

    /// Waits for every read still in flight (prefetches for a token that never came, e.g. after
    /// an end-of-text token) and keeps what they bring; a failed one is forgotten. A runtime
    /// whose I/O belongs to the request that started it (workerd) needs this at the end of each
    /// request: a read begun in one request can never complete inside the next.
    pub async fn drain_reads(&mut self) {
        self.layers.drain().await;
        self.publish();
    }

    /// Forgets the reads in flight without waiting for them: for a caller whose earlier call
    /// can never resume (its request context was canceled), so the next call reads afresh.
    pub fn drop_reads(&mut self) -> usize {
        self.layers.drop_reads()
    }

    /// Fetches layer `layer` now and waits until it is resident.
    pub async fn load_layer(&mut self, layer: usize) -> Result<(), HostError> {
        self.begin_call();
        if layer >= self.config().n_layers {
            return Err(HostError::NoSuchLayer(layer));
        }
        let loaded = self.layers.load(layer).await;
        self.publish();
        Ok(loaded?)
    }

    /// Admits a sequence between steps: checks the prompt and the options, loads what a window
    /// holds of the prompt into its session (`reusePrefix`: the conversation kept that shares
    /// the most; `continue`: the one that ended last, the prompt appended to it;
    /// `prefillWindow`: that explicit window), and queues the rest for the next steps (no pass
    /// runs here). Refused `busy` when `maxSequences` are active.
    pub fn admit(&mut self, prompt: &[u32], opts: &GenerateOptions) -> Result<Admitted, HostError> {
        let admitted = self.admit_inner(prompt, opts);
        self.publish();
        admitted
    }

    fn admit_inner(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Admitted, HostError> {
        self.config().check_tokens(prompt)?;
        let max = self.sequences.max();
        if self.sequences.len() >= max {
            return Err(HostError::SequencesFull { max });
        }
        // The whole prompt: with `continue`, after the conversation that ended last.
        let (whole, committed) = match opts.continue_session {
            true => {
                let before = self.windows.latest().ok_or(HostError::NoContext)?;
                ([before, prompt].concat(), before.len())
            }
            false if prompt.is_empty() => return Err(HostError::EmptyPrompt),
            false => (prompt.to_vec(), 0),
        };
        let context = self.context_length();
        if whole.len() > context {
            return Err(HostError::PromptTooLong {
                tokens: whole.len(),
                context,
            });
        }
        let eos = &self.knot.meta.config.eos_ids;
        let generation = Generation::new(opts, self.tokenizer.clone(), eos, context - whole.len())?;
        let (cfg, kv_type) = (&self.knot.meta.config, self.scratch.kv_type());
        let mut session = self
            .sequences
            .take_session(|| Ok(Session::with_kv(cfg, context, kv_type)?))?;
        // Its KV cache: a window's, loaded with what the windows hold of the prompt (or, for an
        // explicit prefill window, that window's copy).
        let explicit = opts.prefill_window.as_deref();
        let reuse = explicit.is_none() && (opts.reuse_prefix || opts.continue_session);
        let Some(lent) = self.windows.lend(&mut session, &whole, reuse, now_ms()) else {
            self.sequences.give_back(session);
            return Err(HostError::SequencesFull { max });
        };
        let (keep, prefix) = match explicit {
            Some(id) => {
                let r = self
                    .prefill_windows
                    .restore(id, &mut session, &whole, epoch_ms());
                (r.reused as usize, Some(r))
            }
            None => (lent.keep, reuse.then_some(lent.report)),
        };
        let mut spec = Speculation::new();
        spec.start(opts.draft.resolve(self.draft_default.as_ref()));
        let report = SequenceReport {
            prompt_tokens: whole.len() as u64,
            prefix: prefix.clone(),
            prefill_tokens: (whole.len() - keep) as u64,
            ..SequenceReport::default()
        };
        let prompt_tokens = whole.len();
        let id = self.sequences.push(Sequence::new(
            session,
            lent.slot,
            whole,
            (keep, committed),
            generation,
            spec,
            report,
        ));
        let mut s = self.stats.borrow_mut();
        s.sequences.admitted += 1;
        if let Some(p) = &prefix {
            s.prefix_reuse.count(p);
        }
        Ok(Admitted {
            id,
            prompt_tokens,
            prefix,
        })
    }

    /// Ends sequence `id` between steps (its conversation kept for prefix reuse, its slot
    /// freed); false when it is not active.
    pub fn cancel(&mut self, id: SequenceId) -> bool {
        let report = self
            .sequences
            .cancel(id, &mut self.windows, &self.layers.reader().io);
        let ended = report.is_some();
        if let Some(r) = report {
            self.record_end(r);
        }
        self.publish();
        ended
    }

    /// Replaces sequence `id`'s drafter (a draft model, or a test's scripted drafts); `margin`
    /// is the margin rule's τ (see [`engine::draft::DraftConfig::margin`]). False when it is
    /// not active.
    pub fn set_drafter(
        &mut self,
        id: SequenceId,
        drafter: Box<dyn Drafter>,
        margin: Option<f32>,
    ) -> bool {
        self.sequences.set_drafter(id, drafter, margin)
    }

    fn record_end(&self, report: SequenceReport) {
        let mut s = self.stats.borrow_mut();
        s.sequences.ended += 1;
        s.generation = Some(report);
    }

    /// One step for every active sequence (`sequences.rs`): one forward pass over their rows,
    /// then each picks its next token. A sequence that ends (finish, failure) is released, its
    /// conversation kept for prefix reuse. A pass that fails (a read, an abort of the call)
    /// ends every sequence in it, each event carrying the failure (the first the error itself,
    /// the others a [`HostError::Replica`] of it).
    pub async fn step(&mut self) -> Vec<SequenceEvent> {
        self.begin_call();
        let io = self.layers.reader().io.clone();
        let h = StepContext {
            layers: &mut self.layers,
            resident: &self.resident,
            limits: self.limits,
            windows: &mut self.windows,
            io: &io,
        };
        let events = self.sequences.step(h).await;
        {
            let mut s = self.stats.borrow_mut();
            s.steps.steps += 1;
            for e in &events {
                s.steps.tokens += u64::from(matches!(e.token, Ok(Some(_))));
            }
        }
        for e in &events {
            if let Some(r) = &e.report {
                self.record_end(r.as_ref().clone());
            }
        }
        self.publish();
        events
    }

    /// Runs one generation to its end (or until `on_token` returns false): admits it and steps
    /// until it ends. It needs the host to itself: refused `busy` while other sequences run.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(&Emitted) -> bool,
    ) -> Result<Generated, HostError> {
        if self.sequences.len() > 0 {
            return Err(HostError::NotAlone {
                active: self.sequences.len(),
            });
        }
        let id = self.admit(prompt, opts)?.id;
        let mut out = Generated {
            ids: Vec::new(),
            text: String::new(),
            finish_reason: None,
            steps: Vec::new(),
            constraint: None,
            health: None,
            report: SequenceReport::default(),
        };
        loop {
            for e in self.step().await {
                debug_assert_eq!(e.id, id, "generate runs one sequence");
                let mut stopped = false;
                if let Some(t) = e.token? {
                    out.ids.push(t.id);
                    out.text.push_str(&t.text);
                    stopped = !on_token(&t);
                    out.steps.push(t.step);
                }
                if e.done {
                    out.finish_reason = e.finish_reason;
                    out.constraint = e.constraint;
                    out.health = e.health;
                    out.report = e.report.map(|r| *r).unwrap_or_default();
                    return Ok(out);
                }
                if stopped {
                    self.cancel(id);
                    if let Some(r) = self.stats().generation {
                        out.report = r;
                    }
                    return Ok(out);
                }
            }
        }
    }

    /// Prefills `prompt` into a new explicit prefill window, pinned for `ttl_ms` (default
    /// [`DEFAULT_TTL_MS`]); a generation names it with `prefillWindow`. When the host already
    /// holds `prefillWindows` of them, the least recently used is replaced (and named in the
    /// result). Runs between steps; the sequences are left as they were.
    pub async fn create_prefill_window(
        &mut self,
        prompt: &[u32],
        ttl_ms: Option<f64>,
    ) -> Result<PrefillWindowCreated, HostError> {
        self.begin_call();
        check_ttl(ttl_ms)?;
        self.config().check_tokens(prompt)?;
        let (lent, replaced) = self
            .prefill_windows
            .lend_new(&self.scratch, prompt, epoch_ms())?;
        let lent = self.prefill_into(lent, prompt).await?;
        let window = self
            .prefill_windows
            .insert(lent, prompt.to_vec(), ttl_ms, epoch_ms());
        self.publish();
        Ok(PrefillWindowCreated { window, replaced })
    }

    /// Window `id` (not found once deleted, replaced or expired).
    pub fn prefill_window(&mut self, id: &str) -> Result<PrefillWindowInfo, HostError> {
        self.prefill_windows.get(id, epoch_ms())
    }

    /// The windows held, oldest first.
    pub fn prefill_window_list(&mut self) -> Result<Vec<PrefillWindowInfo>, HostError> {
        self.prefill_windows.list(epoch_ms())
    }

    /// Extends window `id` to `prompt` (which must start with its tokens: only the new ones
    /// are prefilled) and/or gives it `ttl_ms` more from now; an extension alone keeps its
    /// expiry.
    pub async fn update_prefill_window(
        &mut self,
        id: &str,
        prompt: Option<&[u32]>,
        ttl_ms: Option<f64>,
    ) -> Result<PrefillWindowInfo, HostError> {
        self.begin_call();
        check_ttl(ttl_ms)?;
        let now = epoch_ms();
        let Some(prompt) = prompt else {
            return match ttl_ms {
                Some(ttl) => self.prefill_windows.refresh(id, ttl, now),
                None => self.prefill_windows.get(id, now),
            };
        };
        self.config().check_tokens(prompt)?;
        let lent = self
            .prefill_windows
            .lend_existing(&self.scratch, id, prompt, now)?;
        let lent = self.prefill_into(lent, prompt).await?;
        let window = self
            .prefill_windows
            .insert(lent, prompt.to_vec(), ttl_ms, epoch_ms());
        self.publish();
        Ok(window)
    }

    /// Drops window `id` (its KV cache kept for the next window); false when there is none.
    pub fn delete_prefill_window(&mut self, id: &str) -> Result<bool, HostError> {
        let deleted = self.prefill_windows.delete(id, epoch_ms());
        self.publish();
        deleted
    }

    /// Runs the tokens of `prompt` that `lent` does not hold yet into its KV cache, swapped
    /// into the scratch session for the prefill (in chunks of `maxBatch`) and back out after.
    /// A failure puts the window back as it was (or drops it, if its cache was lost).
    async fn prefill_into(&mut self, mut lent: Lent, prompt: &[u32]) -> Result<Lent, HostError> {
        let new = &prompt[lent.tokens.len()..];
        if new.is_empty() {
            return Ok(lent);
        }
        if let Err(e) = self.scratch.swap_kv(&mut lent.kv) {
            self.prefill_windows.put_back(lent, false, epoch_ms());
            return Err(e.into());
        }
        let base = self.scratch.position();
        let mut ran = Ok(());
        for chunk in new.chunks(self.limits.max_batch.max(1)) {
            ran = self
                .layers
                .joint_pass(
                    self.sequences.joint(),
                    &mut [&mut self.scratch],
                    &[chunk],
                    &[Logits::None],
                    &self.resident,
                    false,
                )
                .await;
            if ran.is_err() {
                break;
            }
        }
        // A failed prefill takes its earlier chunks out again (a ring that cannot go back that
        // far loses the window).
        let lost =
            ran.is_err() && self.scratch.position() != base && self.scratch.rewind(base).is_err();
        // Between batches a swap back cannot fail: the shapes match, no batch is open.
        let swapped = self.scratch.swap_kv(&mut lent.kv);
        self.scratch.reset();
        match (ran, swapped) {
            (Ok(()), Ok(())) => Ok(lent),
            (ran, swapped) => {
                self.prefill_windows
                    .put_back(lent, lost || swapped.is_err(), epoch_ms());
                self.publish();
                Err(ran.err().unwrap_or_else(|| HostError::Aborted))
            }
        }
    }

    /// Renders chat messages with the model's template, ready to encode.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<String, HostError> {
        let template = self.knot.meta.chat_template.as_deref();
        Ok(engine::chat::chat_prompt(
            template,
            &self.tokenizer,
            messages,
        )?)
    }
}

/// A prefill window's time to live: milliseconds, finite and not negative.
fn check_ttl(ttl_ms: Option<f64>) -> Result<(), HostError> {
    match ttl_ms {
        Some(t) if !(t.is_finite() && t >= 0.0) => Err(OptionsError::Invalid {
            name: "ttlMs".into(),
            rule: "a number >= 0".into(),
            got: t.to_string(),
        }
        .into()),
        _ => Ok(()),
    }
}
