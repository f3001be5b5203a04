//! The host: opens a knot file through a [`ByteSource`] with a handful of range reads, keeps the
//! resident tensors, streams layers through the [`LayerCache`] with prefetch, and drives decode.

use crate::cache::{CacheStats, LayerBytes, LayerCache, LayerFetch, Lookup};
use crate::clock::now_ms;
use crate::source::{ByteSource, SourceError};
use engine::chat::{render_chat, ChatError, ChatMessage};
use engine::model::{check_architecture, LayerWeights, ResidentWeights};
use engine::sampler::{Sampler, SamplerConfig, SamplerError};
use engine::tokenizer::{Tokenizer, TokenizerError};
use engine::{EngineError, Session, TensorRef};
use futures::FutureExt;
use knot::{FixedHeader, Knot, KnotError, ModelConfig, ReadOptions, TensorInfo, FIXED_HEADER_LEN};
use std::cell::Cell;
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
    Sampler(#[from] SamplerError),
    #[error(transparent)]
    Chat(#[from] ChatError),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("nothing to continue from: give a prompt first")]
    NoContext,
    #[error("the model has no chat template")]
    NoChatTemplate,
    #[error("layer {0} does not exist")]
    NoSuchLayer(usize),
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
    pub range_reads: u64,
    /// Resident tensors (embedding, final norm, LM head) held for the whole session.
    pub resident_bytes: u64,
    /// Resident tensors plus the most layer bytes ever cached at once.
    pub peak_resident_bytes: u64,
    pub kv_cache_bytes: u64,
    pub open_ms: f64,
    pub prefill_ms: f64,
    pub prefill_tokens: u64,
    /// Wall time of each decode step since the last prompt.
    pub token_ms: Vec<f64>,
}

#[derive(Default)]
struct IoCounters {
    bytes: Cell<u64>,
    reads: Cell<u64>,
}

/// Reads `[start, end)` and checks that exactly that many bytes came back.
fn checked_read(
    source: &dyn ByteSource,
    io: &Rc<IoCounters>,
    start: u64,
    end: u64,
) -> futures::future::LocalBoxFuture<'static, Result<Vec<u8>, SourceError>> {
    io.reads.set(io.reads.get() + 1);
    let io = io.clone();
    source
        .read(start, end)
        .map(move |r| {
            let bytes = r?;
            let (got, expected) = (bytes.len() as u64, end - start);
            if got != expected {
                return Err(SourceError::Length {
                    start,
                    end,
                    got,
                    expected,
                });
            }
            io.bytes.set(io.bytes.get() + got);
            Ok(bytes)
        })
        .boxed_local()
}

/// Tensors of one span held in memory, by name.
fn span_tensors<'a>(
    infos: &'a [TensorInfo],
    bytes: &'a [u8],
) -> impl Fn(&str) -> Option<TensorRef<'a>> + 'a {
    move |name: &str| {
        let t = infos.iter().find(|t| t.name == name)?;
        let start = usize::try_from(t.offset).ok()?;
        let data = bytes.get(start..start.checked_add(usize::try_from(t.size).ok()?)?)?;
        Some(TensorRef {
            dtype: t.dtype,
            shape: &t.shape,
            data,
        })
    }
}

/// The layers: where each lives in the file, and the cache in front of the source.
struct LayerStore {
    source: Rc<dyn ByteSource>,
    io: Rc<IoCounters>,
    ranges: Vec<Range<u64>>,
    tensors: Vec<Vec<TensorInfo>>,
    cache: LayerCache,
}

enum Fetch {
    Ready(LayerBytes),
    Wait(LayerFetch),
}

impl LayerStore {
    /// Starts fetching `layer` unless it is cached or in flight. `demand` counts hits/misses.
    fn request(&mut self, layer: usize, demand: bool) -> Fetch {
        match self.cache.lookup(layer, demand) {
            Lookup::Ready(b) => Fetch::Ready(b),
            Lookup::Fetching(f) => Fetch::Wait(f),
            Lookup::Missing => {
                let r = &self.ranges[layer];
                let fut =
                    checked_read(&*self.source, &self.io, r.start, r.end).map(|r| r.map(Rc::new));
                Fetch::Wait(self.cache.start_fetch(layer, fut.boxed_local()))
            }
        }
    }

    async fn get(&mut self, layer: usize, demand: bool) -> Result<LayerBytes, SourceError> {
        match self.request(layer, demand) {
            Fetch::Ready(b) => Ok(b),
            Fetch::Wait(f) => {
                let result = f.await;
                self.cache.finish_fetch(layer, &result);
                result
            }
        }
    }
}

pub struct Host {
    knot: Knot,
    config: ModelConfig,
    tokenizer: Rc<Tokenizer>,
    resident: Rc<[u8]>,
    resident_tensors: Rc<[TensorInfo]>,
    layers: LayerStore,
    session: Session,
    sampler: Sampler,
    /// Layers fetched ahead of the one computing (0: no prefetch).
    prefetch_depth: usize,
    /// Logits of the last position run, until a token is sampled from them.
    logits: Vec<f32>,
    /// The last sampled token: it enters the KV cache at the start of the next step.
    pending: Option<u32>,
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
        let io = Rc::new(IoCounters::default());
        let read = |s: u64, e: u64| checked_read(&*source, &io, s, e);

        let mut prefix = read(0, FIXED_HEADER_LEN as u64).await?;
        let prefix_len = FixedHeader::parse(&prefix, &opts.read)?.prefix_len();
        prefix.extend(read(FIXED_HEADER_LEN as u64, prefix_len).await?);
        // Without a known length, reads past the end surface as short reads instead.
        let knot = Knot::parse_prefix(&prefix, source.len().unwrap_or(u64::MAX), &opts.read)?;
        check_architecture(&knot.meta.architecture)?;

        let (tok, res) = (knot.tokenizer_range(), knot.resident_range());
        // Writers put the resident tensors right after the tokenizer blob (plus alignment
        // padding), so one read usually fetches both.
        let adjacent = res.start >= tok.end && res.start - tok.end < knot::TENSOR_ALIGNMENT;
        let (tok_bytes, resident): (Vec<u8>, Vec<u8>) = if adjacent {
            let mut both = read(tok.start, res.end).await?;
            let resident = both.split_off((res.start - tok.start) as usize);
            both.truncate((tok.end - tok.start) as usize);
            (both, resident)
        } else {
            (
                read(tok.start, tok.end).await?,
                read(res.start, res.end).await?,
            )
        };
        let tokenizer = Rc::new(Tokenizer::from_data(&Knot::parse_tokenizer(&tok_bytes)?)?);
        drop(tok_bytes);

        let config = knot.meta.config.clone();
        let resident: Rc<[u8]> = resident.into();
        let resident_tensors: Rc<[TensorInfo]> = knot.resident_tensors().into();
        // Check the resident tensors now, so a bad file fails at open, not at the first token.
        ResidentWeights::load(&config, &span_tensors(&resident_tensors, &resident))?;

        let n = config.n_layers;
        let ranges: Vec<Range<u64>> = (0..n)
            .map(|l| knot.layer_range(l).ok_or(HostError::NoSuchLayer(l)))
            .collect::<Result<_, _>>()?;
        let tensors = (0..n)
            .map(|l| knot.layer_tensors(l).ok_or(HostError::NoSuchLayer(l)))
            .collect::<Result<Vec<_>, _>>()?;
        let spans = ranges.iter().map(|r| r.end - r.start).collect();
        let cache = LayerCache::new(spans, opts.lru_capacity, opts.max_resident_bytes);
        let session = Session::new(&config, opts.max_context)?;
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
            ..Stats::default()
        };
        Ok(Host {
            layers: LayerStore {
                source,
                io,
                ranges,
                tensors,
                cache,
            },
            sampler: Sampler::new(SamplerConfig::default())?,
            knot,
            config,
            tokenizer,
            resident,
            resident_tensors,
            session,
            logits: Vec::new(),
            pending: None,
            prefetch_depth,
            stats,
        })
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

    /// Positions in the KV cache (plus a sampled token not yet run).
    pub fn position(&self) -> usize {
        self.session.position() + self.pending.is_some() as usize
    }

    pub fn stats(&self) -> Stats {
        let cache = self.layers.cache.stats();
        let kv_per_pos =
            2 * self.config.n_layers * self.config.n_kv_heads * self.config.head_dim * 4;
        Stats {
            bytes_fetched: self.layers.io.bytes.get(),
            range_reads: self.layers.io.reads.get(),
            peak_resident_bytes: self.stats.resident_bytes + cache.peak_layer_bytes,
            kv_cache_bytes: (self.session.position() * kv_per_pos) as u64,
            cache,
            ..self.stats.clone()
        }
    }

    pub fn set_sampler(&mut self, cfg: SamplerConfig) -> Result<(), HostError> {
        self.sampler = Sampler::new(cfg)?;
        Ok(())
    }

    /// Forgets the conversation (KV cache); cached layers stay.
    pub fn reset(&mut self) {
        self.session.reset();
        self.logits.clear();
        self.pending = None;
    }

    /// Starts fetching layer `layer` in the background (no-op if cached or in flight).
    pub fn prefetch_layer(&mut self, layer: usize) -> Result<(), HostError> {
        if layer >= self.config.n_layers {
            return Err(HostError::NoSuchLayer(layer));
        }
        self.layers.request(layer, false);
        Ok(())
    }

    /// Fetches layer `layer` now and waits until it is resident.
    pub async fn load_layer(&mut self, layer: usize) -> Result<(), HostError> {
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
    async fn forward(&mut self, tokens: &[u32], more_follows: bool) -> Result<(), HostError> {
        let (resident, infos) = (self.resident.clone(), self.resident_tensors.clone());
        let resident_w = ResidentWeights::load(&self.config, &span_tensors(&infos, &resident))?;
        self.session.begin(tokens, &resident_w)?;
        match self.run_layers(more_follows).await {
            Ok(()) => {
                let logits = self.session.finish(&resident_w, false)?;
                self.logits.clear();
                self.logits.extend_from_slice(logits);
                Ok(())
            }
            Err(e) => {
                // A failed read or a bad layer leaves the conversation as it was.
                self.session.abort_batch();
                Err(e)
            }
        }
    }

    async fn run_layers(&mut self, more_follows: bool) -> Result<(), HostError> {
        let n = self.config.n_layers;
        for l in 0..n {
            let bytes = self.layers.get(l, true).await?;
            self.layers.cache.pin(l);
            // Start the next layers' reads now, so they travel while this layer computes; past
            // the last layer they are layer 0.. of the next token, when one follows.
            for ahead in 1..=self.prefetch_depth {
                if l + ahead >= n && !more_follows {
                    break;
                }
                self.layers.request((l + ahead) % n, false);
            }
            let src = span_tensors(&self.layers.tensors[l], &bytes);
            let result = LayerWeights::load(&self.config, l, &src)
                .and_then(|w| self.session.run_layer(l, &w));
            self.layers.cache.unpin(l);
            result?;
        }
        Ok(())
    }

    /// Appends `tokens` to the context (after any pending sampled token) and runs them.
    pub async fn prefill(&mut self, tokens: &[u32], more_follows: bool) -> Result<(), HostError> {
        let vocab = self.config.vocab_size;
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(EngineError::TokenOutOfRange { id, vocab }.into());
        }
        let mut batch = Vec::with_capacity(tokens.len() + 1);
        batch.extend(self.pending);
        batch.extend_from_slice(tokens);
        if batch.is_empty() {
            return Err(EngineError::EmptyBatch.into());
        }
        let t0 = now_ms();
        self.forward(&batch, more_follows).await?;
        self.pending = None;
        for &id in tokens {
            self.sampler.accept(id);
        }
        self.stats.prefill_ms = now_ms() - t0;
        self.stats.prefill_tokens = batch.len() as u64;
        self.stats.token_ms.clear();
        Ok(())
    }

    /// Produces one token: runs the previously sampled token through the model (if any), then
    /// samples the next one from the logits.
    pub async fn step(&mut self, more_follows: bool) -> Result<u32, HostError> {
        let t0 = now_ms();
        if let Some(id) = self.pending.take() {
            if let Err(e) = self.forward(&[id], more_follows).await {
                self.pending = Some(id);
                return Err(e);
            }
        } else if self.logits.is_empty() {
            return Err(HostError::NoContext);
        }
        let id = self.sampler.sample(&mut self.logits)?;
        self.logits.clear();
        self.pending = Some(id);
        self.stats.token_ms.push(now_ms() - t0);
        Ok(id)
    }

    /// Generates up to `n` tokens after `prompt` (appended to the current context when
    /// `continue_session`, else starting afresh). Stops early at an end-of-text id or when
    /// `on_token` returns false. An empty prompt continues from the last sampled token.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        n: usize,
        continue_session: bool,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Vec<u32>, HostError> {
        if !continue_session {
            self.reset();
        }
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            if !prompt.is_empty() {
                self.prefill(prompt, false).await?;
            }
            return Ok(out);
        }
        if !prompt.is_empty() {
            self.prefill(prompt, n > 1).await?;
        } else if self.pending.is_none() && self.logits.is_empty() {
            return Err(HostError::NoContext);
        }
        while out.len() < n {
            let more_follows = out.len() + 2 <= n;
            let id = self.step(more_follows).await?;
            out.push(id);
            if !on_token(id) || self.config.eos_ids.contains(&id) {
                break;
            }
        }
        Ok(out)
    }

    /// Renders chat messages with the model's template, ready to encode.
    pub fn chat_prompt(&self, messages: &[ChatMessage]) -> Result<String, HostError> {
        let template = self
            .knot
            .meta
            .chat_template
            .as_deref()
            .ok_or(HostError::NoChatTemplate)?;
        let tok = &self.tokenizer;
        let name = |id: Option<u32>| id.and_then(|i| tok.token(i)).unwrap_or("").to_string();
        Ok(render_chat(
            template,
            messages,
            true,
            &name(tok.bos_id()),
            &name(tok.eos_id()),
        )?)
    }
}
