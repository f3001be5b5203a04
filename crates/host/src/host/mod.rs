//! The host: opens a knot file through a [`ByteSource`] with a handful of range reads, keeps the
//! resident tensors, streams layers through the layer cache with prefetch, and drives decode —
//! `start` (a prompt) then `next` (a token) — through the one decode loop.
//!
//! - `open.rs` — the reads at open and the memory plan;
//! - `layers.rs` — the resident tensors, the layer store, and the passes (forward, prefill);
//! - `conversation.rs` — the conversation in use; `windows.rs` — the ones parked for prefix
//!   reuse; `prefill_windows.rs` — the explicit prefill windows, pinned by id;
//! - `stats.rs` — what `stats()` reports;
//! - the speculation bookkeeping (pending token, tokens made ahead, drafts) is
//!   [`engine::draft::Speculation`], which says what each pass runs.

mod batch;
mod conversation;
mod layers;
mod open;
mod prefill_windows;
mod stats;
mod windows;

pub use batch::{SequenceEvent, SequenceId};
pub use prefill_windows::DEFAULT_TTL_MS;
pub use stats::{
    DecodeStats, PrefillWindowCreated, PrefillWindowInfo, PrefillWindowStats, PrefixKind,
    PrefixReport, Stats,
};

use crate::clock::{epoch_ms, now_ms};
use crate::error::HostError;
use crate::options::HostOptions;
use crate::reader::Abort;
use crate::source::ByteSource;
use batch::{AdmitContext, Batch, StepContext};
use conversation::Conversation;
use engine::chat::ChatMessage;
use engine::decode::{Emitted, FinishReason, GenerateOptions, Generation};
use engine::draft::{DraftConfig, DraftLimits, Drafter, NextPass, Speculation};
use engine::model::ConfigExt;
use engine::options::OptionsError;
use engine::tokenizer::Tokenizer;
use engine::StepInfo;
use knot::{Knot, ModelConfig};
use layers::{LayerStore, Logits, PassFailed, Resident};
use open::PassLimits;
use prefill_windows::{Lent, PrefillWindows};
use stats::ratio;
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
}

pub struct Host {
    knot: Knot,
    tokenizer: Rc<Tokenizer>,
    resident: Resident,
    layers: LayerStore,
    limits: PassLimits,
    /// The conversation in use, and the ones parked for prefix reuse.
    conversation: Conversation,
    windows: Windows,
    /// The explicit prefill windows, pinned by id.
    prefill_windows: PrefillWindows,
    /// What the next pass runs: the pending token, tokens made ahead, drafts.
    speculation: Speculation,
    /// Speculative decoding for generations that do not choose.
    draft_default: Option<DraftConfig>,
    stats: Stats,
    /// Layer reads when the current generation's decoding began.
    reads_at_decode: u64,
    /// The sequences run together, when opened with `maxSequences` (`batch.rs`).
    batch: Option<Batch>,
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
        let mut opts = opts;
        if opts.max_sequences.is_some() {
            // Sequences run together prefill cold; a window would need the host's own session.
            opts.prefill_windows = 0;
        }
        let t0 = now_ms();
        let mut o = open::open(source, &opts).await?;
        if let Some(t) = &opts.chat_template {
            o.knot.meta.chat_template = Some(t.clone());
        }
        let windows = Windows::new(&o.session, opts.prefix_windows, opts.prefix_ttl_ms);
        // The ids' seed: the time and where the host's allocations landed.
        let seed = epoch_ms().to_bits() ^ (o.resident.bytes.as_ptr() as u64).rotate_left(32);
        let prefill_windows =
            PrefillWindows::new(opts.prefill_windows, opts.prefill_window_max_tokens, seed);
        let stats = Stats {
            resident_bytes: o.resident.bytes.len() as u64,
            open_ms: now_ms() - t0,
            memory_plan: o.memory_plan,
            ..Stats::default()
        };
        let batch = opts
            .max_sequences
            .map(|max| Batch::new(&o.knot.meta.config, max, stats.memory_plan.is_some()));
        Ok(Host {
            batch,
            knot: o.knot,
            tokenizer: o.tokenizer,
            resident: o.resident,
            layers: o.layers,
            limits: o.limits,
            conversation: Conversation::new(o.session, now_ms()),
            windows,
            prefill_windows,
            speculation: Speculation::new(),
            draft_default: opts.draft,
            stats,
            reads_at_decode: 0,
        })
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

    /// Aborts the call in flight (`start`, `next`, `load_layer`): its reads are abandoned at
    /// once and its layer loop stops before the next layer, leaving the conversation as before
    /// the call. A call begun afterwards runs normally.
    pub fn abort_handle(&self) -> Abort {
        self.layers.reader().abort_handle().clone()
    }

    /// A new call: an abort meant for an earlier one does not apply.
    fn begin_call(&self) {
        self.layers.reader().abort_handle().clear();
    }

    /// Positions in the conversation: those in the KV cache plus a picked token not yet run
    /// (tokens a verify pass made but [`Host::next`] has not handed out do not count).
    pub fn position(&self) -> usize {
        let cached = self.conversation.session.position();
        self.speculation.position(cached)
    }

    pub fn stats(&self) -> Stats {
        let io = &self.layers.reader().io;
        let cache = self.layers.cache_stats();
        let d = &self.stats.decode;
        let reads = match d.decode_tokens {
            0 => 0,
            _ => io.reads.get() - self.reads_at_decode,
        };
        let session = &self.conversation.session;
        Stats {
            bytes_fetched: io.bytes.get(),
            range_reads: io.reads.get(),
            read_retries: io.retries.get(),
            read_timeouts: io.timeouts.get(),
            peak_resident_bytes: self.stats.resident_bytes + cache.peak_layer_bytes,
            kv_cache_bytes: (session.kv_bytes()
                + self.windows.kv_bytes()
                + self.prefill_windows.kv_bytes()
                + self.batch.as_ref().map_or(0, Batch::kv_bytes))
                as u64,
            prefill_windows: self.prefill_windows.stats(),
            context_length: session.max_context(),
            cache,
            decode: DecodeStats {
                tokens_per_pass: ratio(d.decode_tokens, d.forward_passes),
                layer_reads_per_token: ratio(reads, d.decode_tokens),
                decode_layer_reads: reads,
                ..d.clone()
            },
            ..self.stats.clone()
        }
    }

    /// The most tokens the current generation will produce (`max_tokens`, or fewer when the
    /// context fills first); 0 when none has started.
    pub fn budget(&self) -> usize {
        let g = self.conversation.generation.as_ref();
        g.map_or(0, Generation::budget)
    }

    /// What the current generation's constraint did so far (None without one).
    pub fn constraint_metrics(&self) -> Option<coltrane::Metrics> {
        self.conversation.generation.as_ref()?.constraint_metrics()
    }

    /// What the health monitor saw over the current generation, when one watches.
    pub fn health_metrics(&self) -> Option<engine::health::HealthMetrics> {
        self.conversation.generation.as_ref()?.health_metrics()
    }

    /// Every token of the conversation so far (prompts and generated tokens).
    pub fn tokens(&self) -> &[u32] {
        &self.conversation.tokens
    }

    /// What each step of the current (or last) generation did.
    pub fn steps(&self) -> &[StepInfo] {
        &self.conversation.steps
    }

    /// Forgets the conversation (KV cache), every window kept for prefix reuse and every
    /// explicit prefill window; cached layers stay.
    pub fn reset(&mut self) {
        self.windows.clear();
        self.prefill_windows.clear();
        self.forget_conversation();
    }

    /// Forgets the conversation in use.
    fn forget_conversation(&mut self) {
        self.conversation.forget();
        self.speculation.forget();
    }

    /// A failed pass: the error, after forgetting the conversation if the pass lost it.
    fn failed(&mut self, failed: PassFailed) -> HostError {
        if failed.conversation_lost {
            self.forget_conversation();
        }
        failed.error
    }

    /// Replaces the current generation's drafter (after [`Host::start`]): a draft model, or a
    /// test's scripted drafts. `margin` is the margin rule's τ (see [`DraftConfig::margin`]).
    pub fn set_drafter(&mut self, drafter: Box<dyn Drafter>, margin: Option<f32>) {
        self.speculation.set_drafter(drafter, margin);
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
        Ok(self.layers.load(layer).await?)
    }

    /// Starts a generation: checks the options and the prompt, forgets the conversation unless
    /// `continue_session`, runs the prompt through the model (appended to the conversation),
    /// and readies the pipeline. Tokens then come from [`Host::next`]. An empty prompt
    /// continues from the last picked token.
    pub async fn start(&mut self, prompt: &[u32], opts: &GenerateOptions) -> Result<(), HostError> {
        self.begin_call();
        if let Some(max) = self.max_sequences() {
            return Err(HostError::OneAtATimeDisabled { max });
        }
        self.settle()?;
        self.config().check_tokens(prompt)?;
        if !opts.continue_session && prompt.is_empty() {
            return Err(HostError::EmptyPrompt);
        }
        if opts.continue_session && prompt.is_empty() && !self.speculation.can_continue() {
            return Err(HostError::NoContext);
        }
        // Positions the KV cache holds once the prompt (and any pending token) is in.
        let conv = &mut self.conversation;
        let context = conv.session.max_context();
        let kept = match opts.continue_session {
            true => conv.tokens.len(),
            false => 0,
        };
        let after_prompt = kept + prompt.len();
        if after_prompt > context {
            return Err(HostError::PromptTooLong {
                tokens: after_prompt,
                context,
            });
        }
        // The last picked token stays pending (it enters the cache with the next prompt), so
        // each token generated needs a position.
        let eos = &self.knot.meta.config.eos_ids;
        let mut generation =
            Generation::new(opts, self.tokenizer.clone(), eos, context - after_prompt)?;
        let mut prompt = prompt;
        self.stats.prefix = None;
        if let Some(id) = &opts.prefill_window {
            // The window's KV copied in (the window kept), else a cold prefill.
            self.forget_conversation();
            let conv = &mut self.conversation;
            let report = self
                .prefill_windows
                .restore(id, &mut conv.session, prompt, epoch_ms());
            conv.tokens
                .extend_from_slice(&prompt[..report.reused as usize]);
            prompt = &prompt[report.reused as usize..];
            self.stats.prefix = Some(report);
        } else if opts.reuse_prefix {
            // The kept tokens are the prompt's first ones: only the rest is prefilled.
            let report = self.windows.reuse(&mut self.conversation, prompt, now_ms());
            self.speculation.forget();
            prompt = &prompt[report.reused as usize..];
            self.stats.prefix = Some(report);
        } else if !opts.continue_session {
            self.forget_conversation();
        }
        self.conversation.last_used = now_ms();
        self.conversation.generation = None;
        self.conversation.steps.clear();
        if !prompt.is_empty() {
            self.prefill(prompt, generation.more_follows()).await?;
        }
        self.stats.token_ms.clear();
        self.stats.decode = DecodeStats::default();
        self.reads_at_decode = self.layers.reader().io.reads.get();
        generation.accept_context(&self.conversation.tokens);
        generation.set_clock(now_ms);
        self.conversation.generation = Some(generation);
        let draft = opts.draft.resolve(self.draft_default.as_ref());
        self.speculation.start(draft);
        Ok(())
    }

    /// Drops tokens a verify pass made that were never handed out: the KV cache goes back to
    /// where plain decoding would be after the last token handed out (that one pending).
    fn settle(&mut self) -> Result<(), HostError> {
        let conv = &mut self.conversation;
        if let Some(pos) = self.speculation.settle(&conv.tokens) {
            if let Err(e) = conv.session.rewind(pos) {
                self.forget_conversation();
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Appends `tokens` to the conversation (after any pending token) and runs them, in chunks
    /// of at most `max_batch` positions. A failure leaves the conversation as it was, or
    /// forgets it when it cannot be restored.
    async fn prefill(&mut self, tokens: &[u32], more_follows: bool) -> Result<(), HostError> {
        let mut batch = Vec::with_capacity(tokens.len() + 1);
        batch.extend(self.speculation.pending());
        batch.extend_from_slice(tokens);
        let t0 = now_ms();
        let conv = &mut self.conversation;
        let ran = self
            .layers
            .prefill(
                &mut conv.session,
                &self.resident,
                &batch,
                self.limits.max_batch,
                more_follows,
                Logits::Last,
            )
            .await;
        if let Err(failed) = ran {
            return Err(self.failed(failed));
        }
        self.speculation.prefilled();
        self.conversation.tokens.extend_from_slice(tokens);
        self.stats.prefill_ms = now_ms() - t0;
        self.stats.prefill_tokens = batch.len() as u64;
        self.stats.token_ms.clear();
        Ok(())
    }

    /// The next token of the generation [`Host::start`] began: runs the previously picked
    /// token through the model (if any), then picks from the logits. `None` once it finished.
    ///
    /// With a drafter, the previously picked token and a draft of the tokens guessed to follow
    /// it run as one batch (a verify pass), and every draft token the pipeline would have picked
    /// anyway is kept: the tokens beyond the first are handed out by the next calls, no forward
    /// pass needed.
    pub async fn next(&mut self) -> Result<Option<Emitted>, HostError> {
        self.begin_call();
        let t0 = now_ms();
        let conv = &mut self.conversation;
        let position = conv.session.position();
        let limits = DraftLimits {
            room: conv.session.max_context().saturating_sub(position + 1),
            max_verify: self.limits.max_verify,
            max_batch: self.limits.max_batch,
        };
        let more_follows = conv
            .generation
            .as_ref()
            .is_some_and(Generation::more_follows);
        let next = self
            .speculation
            .next(conv.generation.as_mut(), &conv.tokens, limits);
        let verify = match next {
            NextPass::Ahead(e) => {
                self.deliver(&e, t0);
                return Ok(Some(e));
            }
            NextPass::Finished => return Ok(None),
            NextPass::NoContext => return Err(HostError::NoContext),
            NextPass::Pick => None,
            NextPass::Run { batch, verify } => {
                let logits = if verify { Logits::All } else { Logits::Last };
                let t_pass = now_ms();
                let ran = self
                    .layers
                    .pass(
                        &mut conv.session,
                        &self.resident,
                        batch,
                        more_follows,
                        logits,
                    )
                    .await;
                if let Err(failed) = ran {
                    self.speculation.pass_failed();
                    return Err(self.failed(failed));
                }
                self.speculation.pass_done(now_ms() - t_pass);
                self.stats.decode.forward_passes += 1;
                Some(verify)
            }
        };
        let conv = &mut self.conversation;
        let Some(generation) = conv.generation.as_mut() else {
            return Ok(None);
        };
        let logits = conv.session.logits_mut();
        let emitted = match verify {
            Some(true) => {
                let verified = match self.speculation.verify(generation, logits) {
                    Ok(v) => v,
                    Err(e) => {
                        conv.session.rewind(position)?;
                        return Err(e.into());
                    }
                };
                // Row j was computed after draft[..j]: keep the positions of the rows picked
                // from.
                conv.session.rewind(position + verified.keep)?;
                let d = &mut self.stats.decode;
                d.verify_passes += 1;
                d.drafted += verified.drafted as u64;
                d.accepted += verified.accepted as u64;
                verified.first
            }
            _ => self.speculation.pick(generation, logits)?,
        };
        self.deliver(&emitted, t0);
        Ok(Some(emitted))
    }

    /// Records a token handed out to the caller.
    fn deliver(&mut self, e: &Emitted, t0: f64) {
        let conv = &mut self.conversation;
        conv.last_used = now_ms();
        conv.tokens.push(e.id);
        conv.steps.push(e.step.clone());
        self.stats.token_ms.push(now_ms() - t0);
        self.stats.decode.decode_tokens += 1;
    }

    /// Starts a generation and runs it to its end, or until `on_token` returns false.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(&Emitted) -> bool,
    ) -> Result<Generated, HostError> {
        self.start(prompt, opts).await?;
        let generation = self.conversation.generation.as_ref();
        let mut out = Generated {
            ids: Vec::new(),
            text: String::new(),
            finish_reason: generation.and_then(Generation::finished),
            steps: Vec::new(),
            constraint: None,
        };
        while let Some(e) = self.next().await? {
            out.ids.push(e.id);
            out.text.push_str(&e.text);
            out.finish_reason = e.finish_reason;
            let go_on = on_token(&e);
            out.steps.push(e.step);
            if !go_on {
                break;
            }
        }
        out.constraint = self.constraint_metrics();
        Ok(out)
    }

    /// Prefills `prompt` into a new explicit prefill window, pinned for `ttl_ms` (default
    /// [`DEFAULT_TTL_MS`]); a generation names it with `prefillWindow`. When the host already
    /// holds `prefillWindows` of them, the least recently used is replaced (and named in the
    /// result). The conversation in use is left as it was.
    pub async fn create_prefill_window(
        &mut self,
        prompt: &[u32],
        ttl_ms: Option<f64>,
    ) -> Result<PrefillWindowCreated, HostError> {
        self.begin_call();
        check_ttl(ttl_ms)?;
        self.config().check_tokens(prompt)?;
        let session = &self.conversation.session;
        let (lent, replaced) = self.prefill_windows.lend_new(session, prompt, epoch_ms())?;
        let lent = self.prefill_into(lent, prompt).await?;
        let window = self
            .prefill_windows
            .insert(lent, prompt.to_vec(), ttl_ms, epoch_ms());
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
        let session = &self.conversation.session;
        let lent = self
            .prefill_windows
            .lend_existing(session, id, prompt, now)?;
        let lent = self.prefill_into(lent, prompt).await?;
        Ok(self
            .prefill_windows
            .insert(lent, prompt.to_vec(), ttl_ms, epoch_ms()))
    }

    /// Drops window `id` (its KV cache kept for the next window); false when there is none.
    pub fn delete_prefill_window(&mut self, id: &str) -> Result<bool, HostError> {
        self.prefill_windows.delete(id, epoch_ms())
    }

    /// Runs the tokens of `prompt` that `lent` does not hold yet into its KV cache: it is
    /// swapped into the session for the prefill and back out after, so the conversation in
    /// use (KV cache, pending token, logits waiting to be picked) is as it was. A failure puts
    /// the window back as it was (or drops it, if its cache could not be restored).
    async fn prefill_into(&mut self, mut lent: Lent, prompt: &[u32]) -> Result<Lent, HostError> {
        let new = &prompt[lent.tokens.len()..];
        if new.is_empty() {
            return Ok(lent);
        }
        let conv = &mut self.conversation;
        if let Err(e) = conv.session.swap_kv(&mut lent.kv) {
            self.prefill_windows.put_back(lent, false, epoch_ms());
            return Err(e.into());
        }
        let ran = self
            .layers
            .prefill(
                &mut conv.session,
                &self.resident,
                new,
                self.limits.max_batch,
                false,
                Logits::None,
            )
            .await;
        if conv.session.swap_kv(&mut lent.kv).is_err() {
            // Between batches a swap only fails for a batch left open: close it and retry.
            conv.session.reset();
            if conv.session.swap_kv(&mut lent.kv).is_err() {
                self.forget_conversation();
            }
            self.prefill_windows.put_back(lent, true, epoch_ms());
            return Err(ran.err().map_or(HostError::Aborted, |f| f.error));
        }
        match ran {
            Ok(()) => Ok(lent),
            Err(failed) => {
                let lost = failed.conversation_lost;
                self.prefill_windows.put_back(lent, lost, epoch_ms());
                Err(failed.error)
            }
        }
    }

    /// The most sequences [`Host::admit`] holds at once (None: opened without `maxSequences`).
    pub fn max_sequences(&self) -> Option<usize> {
        self.batch.as_ref().map(Batch::max)
    }

    /// Sequences admitted and not yet ended.
    pub fn active_sequences(&self) -> usize {
        self.batch.as_ref().map_or(0, Batch::len)
    }

    /// Admits a sequence (`batch.rs`): checks the prompt and the options, and queues the prompt
    /// for the next steps (no pass runs here). Refused when `maxSequences` are active (`busy`:
    /// the caller waits for one to end) or the host was opened without `maxSequences`
    /// (`disabled`). `continue` is refused (a sequence is a new conversation); `reusePrefix`
    /// and `prefillWindow` are ignored: the prompt is prefilled cold, which gives the same
    /// tokens.
    pub fn admit(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<SequenceId, HostError> {
        let Some(batch) = self.batch.as_mut() else {
            return Err(HostError::BatchingDisabled);
        };
        let session = &self.conversation.session;
        let h = AdmitContext {
            cfg: &self.knot.meta.config,
            tokenizer: &self.tokenizer,
            context: session.max_context(),
            kv_type: session.kv_type(),
            draft_default: self.draft_default.as_ref(),
        };
        batch.admit(h, prompt, opts)
    }

    /// Ends sequence `id` between steps (its slot freed); false when it is not active.
    pub fn cancel(&mut self, id: SequenceId) -> bool {
        self.batch.as_mut().is_some_and(|b| b.cancel(id))
    }

    /// One step for every active sequence (`batch.rs`): one forward pass over their rows, then
    /// each picks its next token. A sequence that ends (finish, failure) is released. A pass
    /// that fails (a read, an abort of the call) ends every sequence in it, each event carrying
    /// the failure (the first the error itself, the others a [`HostError::Replica`] of it).
    /// Fails only when the host was opened without `maxSequences`.
    pub async fn step(&mut self) -> Result<Vec<SequenceEvent>, HostError> {
        self.begin_call();
        let Some(batch) = self.batch.as_mut() else {
            return Err(HostError::BatchingDisabled);
        };
        let h = StepContext {
            layers: &mut self.layers,
            resident: &self.resident,
            limits: self.limits,
            stats: &mut self.stats.decode,
        };
        Ok(batch.step(h).await)
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
