//! The host: opens a knot file through a [`ByteSource`] with a handful of range reads, keeps the
//! resident tensors, streams layers through the [`LayerCache`] with prefetch, and drives decode.

use crate::cache::{CacheStats, LayerBytes, LayerCache, LayerFetch, Lookup};
use crate::clock::now_ms;
use crate::memory::{self, MemoryPlan, PlanInput};
use crate::pool::BufferPool;
use crate::prefix::{self, PrefixStatus, WindowView};
use crate::reader::{Abort, ReadPolicy, Reader};
use crate::source::{ByteSource, SourceError};
use engine::chat::{ChatError, ChatMessage};
use engine::decode::{Emitted, FinishReason, GenerateError, GenerateOptions, Generation};
use engine::draft::{DraftConfig, Drafter, PassCost, PromptLookup, MAX_DRAFT};
use engine::kv::{KvCache, KvType};
use engine::model::{check_architecture, ConfigExt};
use engine::tokenizer::{Tokenizer, TokenizerError};
use engine::{EngineError, LayerLayout, PipelineError, ResidentLayout, Session, StepInfo};
use futures::FutureExt;
use knot::{FixedHeader, Knot, KnotError, ModelConfig, ReadOptions, FIXED_HEADER_LEN};
use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("not a valid knot file: {0}")]
    Knot(#[from] KnotError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Generate(#[from] GenerateError),
    #[error(transparent)]
    Chat(#[from] ChatError),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("nothing to continue from: give a prompt first")]
    NoContext,
    #[error("the prompt is empty: give at least one token")]
    EmptyPrompt,
    #[error(
        "the prompt ({tokens} tokens with the conversation) exceeds the context length {context}"
    )]
    PromptTooLong { tokens: usize, context: usize },
    #[error("layer {0} does not exist")]
    NoSuchLayer(usize),
    #[error("{what} takes {bytes} bytes, more than the {max} this host accepts")]
    TooLarge { what: String, bytes: u64, max: u64 },
    #[error("the call was aborted")]
    Aborted,
    #[error("a station failed: {0}")]
    Station(String),
    #[error("the model does not fit the memory budget of {budget} bytes ({budget_mib:.1} MiB): at {plan}")]
    OverBudget {
        budget: u64,
        budget_mib: f64,
        plan: String,
    },
}

/// The largest tokenizer blob accepted: the biggest real ones (262k-token vocabularies) take
/// about 6 MiB.
pub const MAX_TOKENIZER_BYTES: u64 = 1 << 28;

/// Every span the host fetches lands in one buffer, so it must be addressable here (2 GiB on
/// wasm32); checked at open, before any read is sized by it.
fn fits_in_memory(
    what: impl Fn() -> String,
    range: &Range<u64>,
    max: u64,
) -> Result<(), HostError> {
    let bytes = range.end - range.start;
    let max = max.min(isize::MAX as u64);
    if bytes > max {
        return Err(HostError::TooLarge {
            what: what(),
            bytes,
            max,
        });
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Layers kept in memory (at least 1).
    pub lru_capacity: usize,
    /// Optional bound on the bytes of cached layers.
    pub max_resident_bytes: Option<u64>,
    /// Fetch the next layers while layer L computes.
    pub prefetch: bool,
    /// How many layers ahead to fetch. `None`: as many as the cache has room for
    /// (`lru_capacity - 1`, at least 1), so several reads are in flight when the cache allows
    /// and a slow source costs about `layers / depth` latencies per token instead of `layers`.
    pub prefetch_depth: Option<usize>,
    /// Positions the KV cache may hold (capped by the model's context length).
    pub max_context: usize,
    pub read: ReadOptions,
    /// Timeout, retries and backoff of every range read (default: 30 s, 2 retries, 100 ms
    /// doubling). A transient failure (a failed or timed-out transfer, a wrong length) is
    /// retried; a permanent one ([`SourceError::Permanent`]) surfaces at once.
    pub read_policy: ReadPolicy,
    /// Speculative decoding for every generation that does not say otherwise (`draftMode`).
    pub draft: Option<DraftConfig>,
    /// How the KV cache stores keys and values (f16 halves it).
    pub kv_type: KvType,
    /// The most positions one forward pass runs: a longer prompt is prefilled in chunks of it,
    /// which bounds the activations (a chunk costs a read of every layer not cached). `None`:
    /// the whole prompt at once, or [`memory::DEFAULT_BUDGET_BATCH`] under a budget.
    pub max_batch: Option<usize>,
    /// Bytes the host may take. Open checks the plan (resident tensors, layer cache, KV cache
    /// of every window, activations) against it before reading the tensors, refuses a model
    /// that does not fit with the numbers, takes the largest context up to `max_context` that
    /// fits, and allocates the KV cache up front.
    pub memory_budget: Option<u64>,
    /// Conversations whose KV caches are kept for prefix reuse (`reusePrefix`), at least 1.
    pub prefix_windows: usize,
    /// A window not used for this long is forgotten before it would serve a prompt.
    pub prefix_ttl_ms: Option<f64>,
    /// The longest single read at open: the tokenizer and resident tensors (tens of MB) are read
    /// in pieces of this many bytes (`None`: in one read).
    pub max_read_bytes: Option<u64>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            lru_capacity: usize::MAX,
            max_resident_bytes: None,
            prefetch: true,
            prefetch_depth: None,
            max_context: 4096,
            read: ReadOptions::default(),
            read_policy: ReadPolicy::default(),
            draft: None,
            kv_type: KvType::F32,
            max_batch: None,
            memory_budget: None,
            prefix_windows: 1,
            prefix_ttl_ms: None,
            max_read_bytes: None,
        }
    }
}

/// What a user can read through `stats()`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    #[serde(flatten)]
    pub cache: CacheStats,
    pub bytes_fetched: u64,
    /// Range reads issued, retries included.
    pub range_reads: u64,
    /// Reads issued again after a transient failure, and attempts that timed out.
    pub read_retries: u64,
    pub read_timeouts: u64,
    /// Resident tensors (embedding, final norm, LM head) held for the whole session.
    pub resident_bytes: u64,
    /// Resident tensors plus the most layer bytes ever cached at once.
    pub peak_resident_bytes: u64,
    /// Bytes the KV caches of every window have allocated.
    pub kv_cache_bytes: u64,
    /// Positions the context holds (under a memory budget, what fits).
    pub context_length: usize,
    /// How the last prompt used the prefix windows (`reusePrefix`), or None.
    pub prefix: Option<PrefixReport>,
    /// The memory plan open checked, when a budget was given.
    pub memory_plan: Option<MemoryPlan>,
    pub open_ms: f64,
    pub prefill_ms: f64,
    pub prefill_tokens: u64,
    /// Wall time of each decode step since the last prompt (a token that a verify pass made
    /// along with an earlier one costs only its delivery).
    pub token_ms: Vec<f64>,
    #[serde(flatten)]
    pub decode: DecodeStats,
}

/// How a prompt's prefill used the prefix windows.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefixReport {
    pub status: PrefixStatus,
    /// Prompt tokens whose KV came from the window, not from a prefill.
    pub reused: u64,
    /// Prompt tokens prefilled.
    pub prefilled: u64,
    /// The window that served it.
    pub window: usize,
}

/// A parked conversation: its KV cache and tokens, for prefix reuse.
struct Window {
    kv: KvCache,
    tokens: Vec<u32>,
    last_used: f64,
}

/// The current generation's forward passes and drafts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecodeStats {
    /// Tokens generated.
    pub decode_tokens: u64,
    /// Forward passes they took (plain steps and verify passes).
    pub forward_passes: u64,
    /// Forward passes that verified a draft.
    pub verify_passes: u64,
    /// Draft tokens verified, and how many of them were kept.
    pub drafted: u64,
    pub accepted: u64,
    /// `decode_tokens / forward_passes`.
    pub tokens_per_pass: f64,
    /// Layer range reads since the prompt, per generated token.
    pub layer_reads_per_token: f64,
    /// Layer range reads since the prompt.
    pub decode_layer_reads: u64,
}

/// The layers: where each lives in the file, and the cache in front of the source.
struct LayerStore {
    reader: Reader,
    ranges: Vec<Range<u64>>,
    /// Where each layer's tensors sit in its span, located and checked once at open.
    layouts: Vec<LayerLayout>,
    cache: LayerCache,
    /// Buffers of evicted layers, read into again (two: one evicted per fetch in a stream).
    pool: Rc<BufferPool>,
}

impl LayerStore {
    /// Starts fetching `layer` in the background unless it is cached or in flight.
    fn prefetch(&mut self, layer: usize) {
        if let Lookup::Missing = self.cache.lookup(layer, false) {
            // The cache keeps the shared fetch; whoever needs the layer awaits it there.
            drop(self.start_fetch(layer));
        }
    }

    /// Allocates, before a pass starts reading, a buffer for each layer it will read while
    /// others are in flight (the missing ones, up to `in_flight`, and never more than the cache
    /// has room for, so the layer memory stays within the plan): memory that grows while JS
    /// writes into it detaches the write's view, and that read has to be made again.
    fn stock_pool(&self, in_flight: usize) {
        if !self.reader.fills_buffers() {
            return;
        }
        let missing = (0..self.ranges.len()).filter(|&l| !self.cache.contains(l));
        let spans = missing.map(|l| self.ranges[l].end - self.ranges[l].start);
        let (count, largest) = spans.fold((0, 0), |(c, m), s| (c + 1, m.max(s)));
        let count = count.min(in_flight).min(self.cache.room(largest));
        self.pool
            .stock(count, usize::try_from(largest).unwrap_or(0));
    }

    fn start_fetch(&mut self, layer: usize) -> LayerFetch {
        let r = &self.ranges[layer];
        let fut = self
            .reader
            .read_pooled(r.start, r.end, &self.pool)
            .map(|r| r.map(Rc::new));
        self.cache.start_fetch(layer, fut.boxed_local())
    }

    async fn get(&mut self, layer: usize, demand: bool) -> Result<LayerBytes, SourceError> {
        let fetch = match self.cache.lookup(layer, demand) {
            Lookup::Ready(b) => return Ok(b),
            Lookup::Missing => self.start_fetch(layer),
            Lookup::Fetching(f) => {
                let result = f.await;
                self.cache.finish_fetch(layer, &result);
                match result {
                    // A read started earlier (a prefetch, perhaps under an abort since passed)
                    // failed: this caller gets a read of its own rather than that old failure.
                    Err(_) if !self.reader.abort_handle().is_aborted() => self.start_fetch(layer),
                    done => return done,
                }
            }
        };
        let result = fetch.await;
        self.cache.finish_fetch(layer, &result);
        result
    }
}

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
    config: ModelConfig,
    tokenizer: Rc<Tokenizer>,
    resident: Vec<u8>,
    resident_layout: ResidentLayout,
    layers: LayerStore,
    session: Session,
    /// Every token of the conversation: those in the KV cache, then `pending`.
    tokens: Vec<u32>,
    /// The generation in progress (or just finished), started by [`Host::start`].
    generation: Option<Generation>,
    /// What each step of the current generation did.
    steps: Vec<StepInfo>,
    /// Layers fetched ahead of the one computing (0: no prefetch).
    prefetch_depth: usize,
    /// Whether the session holds logits no token has been picked from yet (they stay in the
    /// session's buffer: the pipeline works on them in place, no copy).
    logits_ready: bool,
    /// The last picked token: it enters the KV cache at the start of the next step.
    pending: Option<u32>,
    /// Tokens a verify pass made beyond the one it returned, handed out by the next calls to
    /// [`Host::next`]. They are already in the KV cache (the last one pending) but not yet in
    /// `tokens`: a caller that stops early never sees them in the conversation.
    ahead: VecDeque<Emitted>,
    /// Speculative decoding for generations that do not choose.
    draft_default: Option<DraftConfig>,
    /// The current generation's drafter and margin rule, when it drafts. A prompt-lookup
    /// drafter the host built (`lookup` holds its settings) is kept for later generations with
    /// the same settings, so what it learned about acceptance carries over.
    drafter: Option<Box<dyn Drafter>>,
    lookup: Option<DraftConfig>,
    /// Whether the current generation drafts.
    drafting: bool,
    margin: Option<f32>,
    draft_buf: Vec<u32>,
    /// Layer reads when the current generation's decoding began.
    reads_at_decode: u64,
    /// Running mean wall time of a decode pass by its number of positions (0: not measured),
    /// from which drafts are sized: what a verify pass costs here, on this source and cache.
    pass_ms: [f64; MAX_DRAFT + 2],
    /// Positions per forward pass (prefill chunks, verify passes) and the most a verify pass may
    /// take (bounded under a memory budget: each row keeps a vocabulary of logits).
    max_batch: usize,
    max_verify: usize,
    /// The conversations parked for prefix reuse (the one in use is the session's), and when
    /// the one in use was last used.
    windows: Vec<Window>,
    last_used: f64,
    prefix_ttl_ms: Option<f64>,
    stats: Stats,
}

impl Host {
    /// Opens a knot file: one read for the fixed header, one for the metadata, one for the
    /// tokenizer and resident tensors (two if they are not adjacent). Layers come later.
    pub async fn open(source: Rc<dyn ByteSource>, opts: HostOptions) -> Result<Host, HostError> {
        if opts.lru_capacity == 0 {
            return Err(HostError::InvalidOption(
                "lruCapacity must be at least 1".into(),
            ));
        }
        if opts.max_context == 0 {
            return Err(HostError::InvalidOption(
                "maxContext must be at least 1".into(),
            ));
        }
        let t0 = now_ms();
        let reader = Reader::new(source, opts.read_policy);
        let knot = read_index(&reader, &opts.read).await?;

        let (tok, res) = (knot.tokenizer_range(), knot.resident_range());
        fits_in_memory(|| "the tokenizer blob".into(), &tok, MAX_TOKENIZER_BYTES)?;
        fits_in_memory(|| "the resident tensors".into(), &res, u64::MAX)?;
        for l in 0..knot.n_layers() {
            // Spans are tight (the reader checks), so this is the layer's tensors' size.
            let range = knot.layer_range(l).ok_or(HostError::NoSuchLayer(l))?;
            fits_in_memory(|| format!("layer {l}"), &range, u64::MAX)?;
        }
        let config = knot.meta.config.clone();
        // Sizes from the file are bounded before anything is located or allocated from them.
        config.validate()?;
        let (max_context, max_batch, max_verify, memory_plan) = Self::plan_memory(&knot, &opts)?;

        // Writers put the resident tensors right after the tokenizer blob (plus alignment
        // padding), so one read usually fetches both. The tokenizer is parsed from the front of
        // that buffer, then the tensors are moved down in place: no second copy of them, ever
        // (in wasm, memory taken once is never given back).
        let adjacent = res.start >= tok.end
            && res.start - tok.end < knot::TENSOR_ALIGNMENT
            && res.end - tok.start <= isize::MAX as u64;
        // A long span comes in pieces of `max_read_bytes` (see `Reader::read_span`).
        let read_span = |start: u64, end: u64| reader.read_span(start, end, opts.max_read_bytes);
        let (tokenizer, resident) = if adjacent {
            let mut both = read_span(tok.start, res.end).await?;
            let tokenizer = Tokenizer::from_data(&Knot::parse_tokenizer(
                &both[..(tok.end - tok.start) as usize],
            )?)?;
            both.drain(..(res.start - tok.start) as usize);
            (tokenizer, both)
        } else {
            let tok_bytes = read_span(tok.start, tok.end).await?;
            let tokenizer = Tokenizer::from_data(&Knot::parse_tokenizer(&tok_bytes)?)?;
            drop(tok_bytes);
            (tokenizer, read_span(res.start, res.end).await?)
        };
        let tokenizer = Rc::new(tokenizer);

        // Locate and check every tensor now, so a bad file fails at open, not at some token.
        let resident_layout = ResidentLayout::locate(&config, &knot.resident_tensors())?;
        resident_layout.view(&resident)?;

        let n = config.n_layers;
        let ranges: Vec<Range<u64>> = (0..n)
            .map(|l| knot.layer_range(l).ok_or(HostError::NoSuchLayer(l)))
            .collect::<Result<_, _>>()?;
        let layouts = (0..n)
            .map(|l| {
                let tensors = knot.layer_tensors(l).ok_or(HostError::NoSuchLayer(l))?;
                Ok(LayerLayout::locate(&config, l, &tensors)?)
            })
            .collect::<Result<Vec<_>, HostError>>()?;
        let spans = ranges.iter().map(|r| r.end - r.start).collect();
        let cache = LayerCache::new(spans, opts.lru_capacity, opts.max_resident_bytes);
        let mut session = Session::with_kv(&config, max_context, opts.kv_type)?;
        if memory_plan.is_some() {
            // Taken now, so a generation never meets an allocation the plan did not count.
            session.reserve_kv();
        }
        let prefetch_depth = match (opts.prefetch, opts.prefetch_depth) {
            (false, _) => 0,
            (true, Some(d)) => d.min(n.saturating_sub(1)),
            (true, None) => opts
                .lru_capacity
                .saturating_sub(1)
                .clamp(1, n.saturating_sub(1).max(1)),
        };
        let stats = Stats {
            resident_bytes: resident.len() as u64,
            open_ms: now_ms() - t0,
            memory_plan,
            ..Stats::default()
        };
        let windows = (1..opts.prefix_windows.max(1))
            .map(|_| Window {
                kv: session.new_kv(),
                tokens: Vec::new(),
                last_used: 0.0,
            })
            .collect();
        Ok(Host {
            layers: LayerStore {
                reader,
                ranges,
                layouts,
                cache,
                pool: BufferPool::new(2),
            },
            knot,
            config,
            tokenizer,
            resident,
            resident_layout,
            session,
            tokens: Vec::new(),
            generation: None,
            steps: Vec::new(),
            logits_ready: false,
            pending: None,
            ahead: VecDeque::new(),
            draft_default: opts.draft,
            drafter: None,
            lookup: None,
            drafting: false,
            margin: None,
            draft_buf: Vec::new(),
            reads_at_decode: 0,
            pass_ms: [0.0; MAX_DRAFT + 2],
            max_batch,
            max_verify,
            windows,
            last_used: now_ms(),
            prefix_ttl_ms: opts.prefix_ttl_ms,
            prefetch_depth,
            stats,
        })
    }

    /// The context, batch size and verify-pass size a host opened with `opts` gets, and the
    /// memory plan when a budget was given (refusing a model that does not fit it).
    fn plan_memory(
        knot: &Knot,
        opts: &HostOptions,
    ) -> Result<(usize, usize, usize, Option<MemoryPlan>), HostError> {
        let config = &knot.meta.config;
        let context = opts.max_context.min(config.context_length.max(1));
        let Some(budget) = opts.memory_budget else {
            return Ok((
                context,
                opts.max_batch.unwrap_or(usize::MAX),
                MAX_DRAFT,
                None,
            ));
        };
        // Each verify row keeps a vocabulary of logits: drafts are bounded by the default's
        // length (or the default settings') under a budget.
        let drafts = opts.draft.clone().unwrap_or_default().max_draft;
        let input = PlanInput {
            lru_capacity: opts.lru_capacity.min(config.n_layers.max(1)),
            max_resident_bytes: opts.max_resident_bytes,
            kv_type: opts.kv_type,
            context,
            max_batch: opts.max_batch.unwrap_or(memory::DEFAULT_BUDGET_BATCH),
            logits_rows: drafts + 1,
            windows: opts.prefix_windows.max(1),
        };
        match memory::fit_context(knot, config, input, budget) {
            Ok(plan) => Ok((plan.context, plan.max_batch, drafts, Some(plan))),
            Err(plan) => Err(HostError::OverBudget {
                budget,
                budget_mib: budget as f64 / (1 << 20) as f64,
                plan: format!(
                    "its smallest context of {} positions it needs {}",
                    plan.context,
                    memory::describe(&plan)
                ),
            }),
        }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
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
        self.layers.reader.abort_handle().clone()
    }

    /// A new call: an abort meant for an earlier one does not apply.
    fn begin_call(&self) {
        self.layers.reader.abort_handle().clear();
    }

    /// Positions in the conversation: those in the KV cache plus a picked token not yet run
    /// (tokens a verify pass made but [`Host::next`] has not handed out do not count).
    pub fn position(&self) -> usize {
        self.session.position() + self.pending.is_some() as usize - self.ahead.len()
    }

    pub fn stats(&self) -> Stats {
        let cache = self.layers.cache.stats();
        let d = &self.stats.decode;
        let reads = match d.decode_tokens {
            0 => 0,
            _ => self.layers.reader.io.reads.get() - self.reads_at_decode,
        };
        Stats {
            bytes_fetched: self.layers.reader.io.bytes.get(),
            range_reads: self.layers.reader.io.reads.get(),
            read_retries: self.layers.reader.io.retries.get(),
            read_timeouts: self.layers.reader.io.timeouts.get(),
            peak_resident_bytes: self.stats.resident_bytes + cache.peak_layer_bytes,
            kv_cache_bytes: (self.session.kv_bytes()
                + self.windows.iter().map(|w| w.kv.bytes()).sum::<usize>())
                as u64,
            context_length: self.session.max_context(),
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
        self.generation.as_ref().map_or(0, Generation::budget)
    }

    /// What the current generation's constraint did so far (None without one).
    pub fn constraint_metrics(&self) -> Option<coltrane::Metrics> {
        self.generation.as_ref()?.constraint_metrics()
    }

    /// Every token of the conversation so far (prompts and generated tokens).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// What each step of the current (or last) generation did.
    pub fn steps(&self) -> &[StepInfo] {
        &self.steps
    }

    /// Forgets the conversation (KV cache), and every window kept for prefix reuse; cached
    /// layers stay.
    pub fn reset(&mut self) {
        for w in &mut self.windows {
            w.kv.clear();
            w.tokens.clear();
        }
        self.forget_conversation();
    }

    /// Forgets the conversation in use (the session's KV cache and tokens).
    fn forget_conversation(&mut self) {
        self.session.reset();
        self.logits_ready = false;
        self.pending = None;
        self.ahead.clear();
        self.tokens.clear();
        self.generation = None;
        self.steps.clear();
    }

    /// Drops tokens a verify pass made that were never handed out: the KV cache goes back to
    /// where plain decoding would be after the last token handed out (that one pending).
    fn settle(&mut self) -> Result<(), HostError> {
        if self.ahead.is_empty() {
            return Ok(());
        }
        self.ahead.clear();
        self.session.rewind(self.tokens.len() - 1)?;
        self.pending = self.tokens.last().copied();
        self.logits_ready = false;
        Ok(())
    }

    /// Replaces the current generation's drafter (after [`Host::start`]): a draft model, or a
    /// test's scripted drafts. `margin` is the margin rule's τ (see [`DraftConfig::margin`]).
    pub fn set_drafter(&mut self, drafter: Box<dyn Drafter>, margin: Option<f32>) {
        self.drafter = Some(drafter);
        self.lookup = None;
        self.drafting = true;
        self.margin = margin;
    }

    /// Starts fetching layer `layer` in the background (no-op if cached or in flight).
    pub fn prefetch_layer(&mut self, layer: usize) -> Result<(), HostError> {
        if layer >= self.config.n_layers {
            return Err(HostError::NoSuchLayer(layer));
        }
        self.layers.prefetch(layer);
        Ok(())
    }

    /// Waits for every read still in flight (prefetches for a token that never came, e.g. after
    /// an end-of-text token) and keeps what they bring; a failed one is forgotten. A runtime whose
    /// I/O belongs to the request that started it (workerd) needs this at the end of each
    /// request: a read begun in one request can never complete inside the next.
    pub async fn drain_reads(&mut self) {
        for (layer, fetch) in self.layers.cache.in_flight() {
            let result = fetch.await;
            self.layers.cache.finish_fetch(layer, &result);
        }
        self.layers.cache.trim();
    }

    /// Forgets the reads in flight without waiting for them: for a caller whose earlier call
    /// can never resume (its request context was canceled), so the next call reads afresh.
    pub fn drop_reads(&mut self) -> usize {
        let dropped = self.layers.cache.drop_fetches();
        self.layers.cache.trim();
        dropped
    }

    /// Fetches layer `layer` now and waits until it is resident.
    pub async fn load_layer(&mut self, layer: usize) -> Result<(), HostError> {
        self.begin_call();
        if layer >= self.config.n_layers {
            return Err(HostError::NoSuchLayer(layer));
        }
        self.layers.get(layer, false).await?;
        Ok(())
    }

    /// Runs `tokens` through the model layer by layer: every position goes through layer L
    /// before layer L+1 is needed, so a prompt costs one read per layer at most. While layer L
    /// computes, layer L+1 is being fetched; after the last layer, layer 0 for the next token
    /// when `more_follows`.
    ///
    /// `all_positions` keeps every position's logits (a verify pass), not only the last's.
    async fn forward(
        &mut self,
        tokens: &[u32],
        more_follows: bool,
        all_positions: bool,
    ) -> Result<(), HostError> {
        let resident = self.resident_layout.view(&self.resident)?;
        self.session.begin(tokens, &resident)?;
        match self.run_layers(more_follows).await {
            Ok(()) => {
                let resident = self.resident_layout.view(&self.resident)?;
                self.session.finish(&resident, all_positions)?;
                self.logits_ready = true;
                Ok(())
            }
            Err(e) => {
                // A failed read or a bad layer leaves the conversation as it was (or, if the
                // batch overwrote a sliding window's ring, without it).
                if !self.session.abort_batch() {
                    self.forget_conversation();
                }
                Err(e)
            }
        }
    }

    async fn run_layers(&mut self, more_follows: bool) -> Result<(), HostError> {
        let n = self.config.n_layers;
        self.layers.stock_pool(self.prefetch_depth + 1);
        for l in 0..n {
            if self.layers.reader.abort_handle().is_aborted() {
                return Err(HostError::Aborted);
            }
            let bytes = self.layers.get(l, true).await?;
            self.layers.cache.pin(l);
            // Start the next layers' reads now, so they travel while this layer computes; past
            // the last layer they are layer 0.. of the next token, when one follows.
            for ahead in 1..=self.prefetch_depth {
                if l + ahead >= n && !more_follows {
                    break;
                }
                self.layers.prefetch((l + ahead) % n);
            }
            let result = self.layers.layouts[l]
                .view(&bytes)
                .and_then(|w| self.session.run_layer(l, &w));
            self.layers.cache.unpin(l);
            result?;
        }
        Ok(())
    }

    /// Appends `tokens` to the context (after any pending picked token) and runs them, in chunks
    /// of at most `max_batch` positions (only the last computes logits). A failure leaves the
    /// conversation as it was — or, when a chunk that failed overwrote a sliding window's ring
    /// (or the earlier chunks cannot be rewound), forgets it.
    async fn prefill(&mut self, tokens: &[u32], more_follows: bool) -> Result<(), HostError> {
        let mut batch = Vec::with_capacity(tokens.len() + 1);
        batch.extend(self.pending);
        batch.extend_from_slice(tokens);
        let t0 = now_ms();
        let base = self.session.position();
        let chunks = batch.len().div_ceil(self.max_batch.max(1));
        for (i, chunk) in batch.chunks(self.max_batch.max(1)).enumerate() {
            let last = i + 1 == chunks;
            let ran = match last {
                true => self.forward(chunk, more_follows, false).await,
                false => self.forward_without_logits(chunk).await,
            };
            if let Err(e) = ran {
                // Earlier chunks are in the cache: take them out again, or lose the conversation
                // if a sliding window's ring cannot go back that far.
                if self.session.position() != base && self.session.rewind(base).is_err() {
                    self.forget_conversation();
                }
                return Err(e);
            }
        }
        self.pending = None;
        self.tokens.extend_from_slice(tokens);
        self.stats.prefill_ms = now_ms() - t0;
        self.stats.prefill_tokens = batch.len() as u64;
        self.stats.token_ms.clear();
        Ok(())
    }

    /// A prompt chunk whose logits nobody reads: through every layer into the KV cache.
    async fn forward_without_logits(&mut self, tokens: &[u32]) -> Result<(), HostError> {
        let resident = self.resident_layout.view(&self.resident)?;
        self.session.begin(tokens, &resident)?;
        match self.run_layers(true).await {
            Ok(()) => Ok(self.session.finish_without_logits()?),
            Err(e) => {
                if !self.session.abort_batch() {
                    self.forget_conversation();
                }
                Err(e)
            }
        }
    }

    /// Serves `prompt` (a whole conversation) from the prefix window that holds the most of it:
    /// that window's conversation is swapped in and rewound to the tokens they share, so only
    /// the rest is prefilled. Returns how many prompt tokens are already in the KV cache.
    fn reuse_prefix(&mut self, prompt: &[u32]) -> usize {
        let now = now_ms();
        let plan = {
            let live = WindowView {
                tokens: &self.tokens,
                cached: self.session.position(),
                earliest_rewind: self.session.earliest_rewind(),
                last_used: self.last_used,
            };
            let parked = self.windows.iter().map(|w| WindowView {
                tokens: &w.tokens,
                cached: w.kv.len(),
                earliest_rewind: w.kv.earliest_rewind(),
                last_used: w.last_used,
            });
            let views: Vec<WindowView> = std::iter::once(live).chain(parked).collect();
            prefix::plan(&views, prompt, now, self.prefix_ttl_ms)
        };
        for &i in &plan.expired {
            match i {
                0 => self.forget_conversation(),
                i => {
                    let w = &mut self.windows[i - 1];
                    w.kv.clear();
                    w.tokens.clear();
                }
            }
        }
        if plan.window > 0 {
            // Park the conversation in use where the chosen one was, and take that one up.
            let w = &mut self.windows[plan.window - 1];
            let swapped = self.session.swap_kv(&mut w.kv);
            if swapped.is_ok() {
                std::mem::swap(&mut self.tokens, &mut w.tokens);
                std::mem::swap(&mut self.last_used, &mut w.last_used);
            }
        }
        let mut keep = plan.keep;
        if keep == 0 || self.session.rewind(keep).is_err() {
            keep = 0;
            self.forget_conversation();
        }
        // What the window held beyond the kept positions is gone; the prompt's rest follows.
        self.tokens.truncate(keep);
        self.pending = None;
        self.ahead.clear();
        self.logits_ready = false;
        self.generation = None;
        self.last_used = now;
        self.stats.prefix = Some(PrefixReport {
            status: plan.status,
            reused: keep as u64,
            prefilled: (prompt.len() - keep) as u64,
            window: plan.window,
        });
        keep
    }

    /// Starts a generation: checks the options and the prompt, forgets the conversation unless
    /// `continue_session`, runs the prompt through the model (appended to the conversation),
    /// and readies the pipeline. Tokens then come from [`Host::next`]. An empty prompt
    /// continues from the last picked token.
    pub async fn start(&mut self, prompt: &[u32], opts: &GenerateOptions) -> Result<(), HostError> {
        self.begin_call();
        self.settle()?;
        let vocab = self.config.vocab_size;
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(EngineError::TokenOutOfRange { id, vocab }.into());
        }
        if !opts.continue_session && prompt.is_empty() {
            return Err(HostError::EmptyPrompt);
        }
        if opts.continue_session
            && prompt.is_empty()
            && self.pending.is_none()
            && !self.logits_ready
        {
            return Err(HostError::NoContext);
        }
        // Positions the KV cache holds once the prompt (and any pending token) is in.
        let context = self.session.max_context();
        let kept = if opts.continue_session {
            self.tokens.len()
        } else {
            0
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
        let room = context - after_prompt;
        let mut generation =
            Generation::new(opts, self.tokenizer.clone(), &self.config.eos_ids, room)?;
        let mut prompt = prompt;
        self.stats.prefix = None;
        if opts.reuse_prefix {
            // The kept tokens are the prompt's first ones: only the rest is prefilled.
            let reused = self.reuse_prefix(prompt);
            prompt = &prompt[reused..];
        } else if !opts.continue_session {
            self.forget_conversation();
        }
        self.last_used = now_ms();
        self.generation = None;
        self.steps.clear();
        if !prompt.is_empty() {
            self.prefill(prompt, generation.more_follows()).await?;
        }
        self.stats.token_ms.clear();
        self.stats.decode = DecodeStats::default();
        self.reads_at_decode = self.layers.reader.io.reads.get();
        generation.accept_context(&self.tokens);
        generation.set_clock(now_ms);
        self.generation = Some(generation);
        let draft = opts.draft.resolve(self.draft_default.as_ref());
        self.margin = draft.as_ref().and_then(|c| c.margin);
        self.drafting = draft.is_some();
        if let Some(cfg) = draft {
            if self.lookup.as_ref() != Some(&cfg) || self.drafter.is_none() {
                self.drafter = Some(Box::new(PromptLookup::new(cfg.clone())));
                self.lookup = Some(cfg);
            }
        }
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
        if let Some(e) = self.ahead.pop_front() {
            self.deliver(&e, t0);
            return Ok(Some(e));
        }
        let Some(more_follows) = self
            .generation
            .as_ref()
            .filter(|g| g.finished().is_none())
            .map(Generation::more_follows)
        else {
            return Ok(None);
        };
        if let Some(id) = self.pending.take() {
            self.make_draft();
            if !self.draft_buf.is_empty() {
                return self.speculate(id, more_follows, t0).await.map(Some);
            }
            let t_pass = now_ms();
            if let Err(e) = self.forward(&[id], more_follows, false).await {
                self.pending = Some(id);
                return Err(e);
            }
            self.note_pass(1, now_ms() - t_pass);
            self.stats.decode.forward_passes += 1;
        } else if !self.logits_ready {
            return Err(HostError::NoContext);
        }
        let Some(generation) = self.generation.as_mut() else {
            return Ok(None);
        };
        let emitted = generation.next(self.session.logits_mut())?;
        self.logits_ready = false;
        self.pending = Some(emitted.id);
        self.deliver(&emitted, t0);
        Ok(Some(emitted))
    }

    /// Records how long a decode pass of `positions` took.
    fn note_pass(&mut self, positions: usize, ms: f64) {
        if let Some(mean) = self.pass_ms.get_mut(positions) {
            *mean = match *mean {
                0.0 => ms,
                m => m + 0.3 * (ms - m),
            };
        }
    }

    /// What verify passes cost as measured so far, relative to a one-position pass (the cost
    /// model's guess for sizes not timed yet).
    fn pass_cost(&self) -> PassCost {
        let mut cost = PassCost::default();
        let one = self.pass_ms[1];
        if one > 0.0 {
            for (c, &ms) in cost.measured.iter_mut().zip(&self.pass_ms).skip(2) {
                *c = (ms / one) as f32;
            }
        }
        cost
    }

    /// Records a token handed out to the caller.
    fn deliver(&mut self, e: &Emitted, t0: f64) {
        // A window's time to live runs from its last token, not from its prompt.
        self.last_used = now_ms();
        self.tokens.push(e.id);
        self.steps.push(e.step.clone());
        self.stats.token_ms.push(now_ms() - t0);
        self.stats.decode.decode_tokens += 1;
    }

    /// Asks the drafter for the tokens after the conversation (its last token pending), trimmed
    /// to what the generation could keep and the context can hold, into `draft_buf`.
    fn make_draft(&mut self) {
        self.draft_buf.clear();
        if !self.drafting {
            return;
        }
        let cost = self.pass_cost();
        let mut draft = std::mem::take(&mut self.draft_buf);
        if let (Some(drafter), Some(generation)) = (&mut self.drafter, &mut self.generation) {
            // The verify pass puts the pending token and the draft into the KV cache, and the
            // pick after the last draft token takes a step of the budget too.
            let room = (self.session.max_context()).saturating_sub(self.session.position() + 1);
            let most = room
                .min(generation.remaining().saturating_sub(1))
                .min(self.max_verify)
                .min(self.max_batch.saturating_sub(1));
            drafter.set_cost(cost);
            drafter.draft(&self.tokens, most, &mut draft);
            draft.truncate(most);
            generation.trim_draft(&mut draft);
        }
        self.draft_buf = draft;
    }

    /// The verify pass: `[pending, draft…]` through every layer at once (one read per layer),
    /// logits for every position, picks while they agree with the draft, then the KV cache
    /// rewound to the positions picked from. A failed read or pick leaves everything as before
    /// the call.
    async fn speculate(
        &mut self,
        pending: u32,
        more_follows: bool,
        t0: f64,
    ) -> Result<Emitted, HostError> {
        let draft = std::mem::take(&mut self.draft_buf);
        let base = self.session.position();
        let mut batch = Vec::with_capacity(draft.len() + 1);
        batch.push(pending);
        batch.extend_from_slice(&draft);
        let t_pass = now_ms();
        let passed = self.forward(&batch, more_follows, true).await;
        self.draft_buf = draft;
        if let Err(e) = passed {
            self.pending = Some(pending);
            return Err(e);
        }
        self.note_pass(batch.len(), now_ms() - t_pass);
        let picked = match &mut self.generation {
            Some(g) => g.verify(self.session.logits_mut(), &self.draft_buf, self.margin),
            None => Err(GenerateError::Finished),
        };
        let mut picked = match picked {
            Ok(p) if !p.is_empty() => VecDeque::from(p),
            failed => {
                self.session.rewind(base)?;
                self.pending = Some(pending);
                return Err(failed.err().unwrap_or(GenerateError::Finished).into());
            }
        };
        // Row j was computed after draft[..j]: keep the positions of the rows picked from.
        self.session.rewind(base + picked.len())?;
        let accepted = picked
            .iter()
            .zip(&self.draft_buf)
            .take_while(|(e, &d)| e.id == d)
            .count();
        if let Some(d) = &mut self.drafter {
            d.observe(self.draft_buf.len(), accepted);
        }
        let d = &mut self.stats.decode;
        d.forward_passes += 1;
        d.verify_passes += 1;
        d.drafted += self.draft_buf.len() as u64;
        d.accepted += accepted as u64;
        self.pending = picked.back().map(|e| e.id);
        self.logits_ready = false;
        let first = picked.pop_front().ok_or(HostError::NoContext)?;
        self.ahead = picked;
        self.deliver(&first, t0);
        Ok(first)
    }

    /// Starts a generation and runs it to its end, or until `on_token` returns false.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(&Emitted) -> bool,
    ) -> Result<Generated, HostError> {
        self.start(prompt, opts).await?;
        let mut out = Generated {
            ids: Vec::new(),
            text: String::new(),
            finish_reason: self.generation.as_ref().and_then(Generation::finished),
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

/// Reads and checks a knot file's index: the fixed header, then the metadata (two reads, the
/// second sized by the first and capped by `opts`). A station reads this and then only its part.
pub(crate) async fn read_index(reader: &Reader, opts: &ReadOptions) -> Result<Knot, HostError> {
    let mut prefix = reader.read(0, FIXED_HEADER_LEN as u64).await?;
    let prefix_len = FixedHeader::parse(&prefix, opts)?.prefix_len();
    prefix.extend(reader.read(FIXED_HEADER_LEN as u64, prefix_len).await?);
    // Without a known length, reads past the end surface as short reads instead.
    let knot = Knot::parse_prefix(&prefix, reader.source_len().unwrap_or(u64::MAX), opts)?;
    check_architecture(&knot.meta.architecture)?;
    Ok(knot)
}

fn ratio(a: u64, b: u64) -> f64 {
    match b {
        0 => 0.0,
        _ => a as f64 / b as f64,
    }
}
