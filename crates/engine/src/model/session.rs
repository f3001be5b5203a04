//! The run state of one sequence and the forward pass over it. [`run_block`] comes first: one
//! transformer block, a whole layer on one screen, over the rows of one session
//! ([`Session::run_layer`]) or of several at once ([`Joint`]). Then a batch's way in and out
//! ([`Session::begin`] embeds it, [`Session::finish`] applies the final norm and the LM head),
//! then construction, memory and the KV cache's bookkeeping (rewind, swap, abort).

use super::config::ConfigExt;
use super::error::EngineError;
use super::head::{embed, load_vector, HeadBuffers, LmHead};
use super::layout::{LayerWeights, ResidentWeights};
use crate::attention::{attend_all, Attention, AttentionBuffers};
use crate::buffer::{addressable, fit};
use crate::kv::{KvCache, KvShape, KvType};
use crate::ops::{gated, gelu_tanh_gated, rmsnorm, rmsnorm_in_place, swiglu, Rope};
use crate::quant::{matmul, matmuls, MatmulScratch};
use knot::{FfnActivation, ModelConfig};
use std::ops::Range;

/// The run state of one sequence: activations for the current batch and the KV cache.
pub struct Session {
    cfg: ModelConfig,
    max_ctx: usize,
    /// The layers this session runs and keeps KV for (all of them, or a station's range).
    layers: Range<usize>,
    /// Tokens in the current batch, and the next layer it must go through.
    n: usize,
    next_layer: usize,
    kv: KvCache,
    /// The batch's residual stream, row-major [n, dim].
    x: Vec<f32>,
    logits: Vec<f32>,
    /// Everything else a layer computes (a [`Joint`] brings its own for several sessions).
    rows: Rows,
}

/// A batch's activations other than the residual stream (row-major [rows, width]) and the
/// scratch a layer needs. A session has its own; a [`Joint`] has one for the rows of several
/// sessions at once, so their matmuls read each weight once.
struct Rows {
    rope: Rope,
    /// RoPE of sliding-window layers (their base can differ from the global layers').
    rope_local: Rope,
    xb: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    hb: Vec<f32>,
    hb2: Vec<f32>,
    attn: AttentionBuffers,
    norm_w: Vec<f32>,
    scratch: MatmulScratch,
}

/// One sequence's share of a layer pass: its residual rows, its KV cache, its first position.
struct Part<'a> {
    x: &'a mut [f32],
    kv: &'a mut KvCache,
    pos: usize,
}

/// One transformer block over the rows of one or more sequences. The matmuls run over all rows
/// at once; RoPE, the KV cache and attention are each sequence's own. A row's result does not
/// depend on the rows beside it (`tests/batch_identity.rs`), so sequences run together give
/// what each gives alone, bit for bit.
fn run_block(
    c: &ModelConfig,
    r: &mut Rows,
    parts: &mut [Part<'_>],
    layer: usize,
    kv_layer: usize,
    w: &LayerWeights,
) {
    let (dim, eps) = (c.dim, c.norm_eps);
    let (hd, q_dim, kv_dim) = (c.head_dim, c.q_dim(), c.kv_dim());
    let n = parts.iter().map(|p| p.x.len() / dim).sum();

    // Attention: x += [post_norm] Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
    load_vector(&w.attn_norm, &mut r.norm_w);
    norm_parts(parts, &mut r.xb, &r.norm_w, eps);
    let qkv = [
        (&w.attn_q, &mut r.q),
        (&w.attn_k, &mut r.k),
        (&w.attn_v, &mut r.v),
    ];
    matmuls(
        &mut qkv.map(|(w, o)| (w, &mut o[..])),
        &r.xb,
        n,
        &mut r.scratch,
    );
    if let Some([bq, bk, bv]) = &w.attn_qkv_bias {
        // qwen2
        for (b, out) in [(bq, &mut r.q), (bk, &mut r.k), (bv, &mut r.v)] {
            load_vector(b, &mut r.norm_w);
            add_rows(out, &r.norm_w);
        }
    }
    if let Some([q_norm, k_norm]) = &w.attn_qk_norm {
        // qwen3, gemma3: each head normalised on its own, before RoPE.
        for (nw, buf) in [(q_norm, &mut r.q), (k_norm, &mut r.k)] {
            load_vector(nw, &mut r.norm_w);
            rmsnorm_in_place(buf, &r.norm_w, eps);
        }
    }
    let rope = match c.is_local_layer(layer) {
        true => &mut r.rope_local,
        false => &mut r.rope,
    };
    let mut at = 0;
    for p in parts.iter_mut() {
        let rows = p.x.len() / dim;
        let q = &mut r.q[at * q_dim..(at + rows) * q_dim];
        let k = &mut r.k[at * kv_dim..(at + rows) * kv_dim];
        for t in 0..rows {
            rope.apply(&mut q[t * q_dim..(t + 1) * q_dim], hd, p.pos + t);
            rope.apply(&mut k[t * kv_dim..(t + 1) * kv_dim], hd, p.pos + t);
        }
        // The batch sees its own keys and values as the cache will store them.
        p.kv.round(k);
        p.kv.round(&mut r.v[at * kv_dim..(at + rows) * kv_dim]);
        at += rows;
    }
    // Every sequence's attention in one hand-off to the threads (one sequence's as it always
    // ran); then its keys and values in.
    let (mut att, mut at) = (&mut r.att[..], 0);
    let mut jobs = Vec::with_capacity(parts.len());
    for p in parts.iter() {
        let rows = p.x.len() / dim;
        let (out, rest) = std::mem::take(&mut att).split_at_mut(rows * q_dim);
        att = rest;
        jobs.push((
            &*p.kv,
            Attention {
                q: &r.q[at * q_dim..(at + rows) * q_dim],
                k: &r.k[at * kv_dim..(at + rows) * kv_dim],
                v: &r.v[at * kv_dim..(at + rows) * kv_dim],
                out,
                n: rows,
                n_heads: c.n_heads,
                n_kv_heads: c.n_kv_heads,
                head_dim: hd,
                scale: 1.0 / c.query_pre_attn_scalar.unwrap_or(hd as f32).sqrt(),
            },
        ));
        at += rows;
    }
    attend_all(kv_layer, &mut jobs, &mut r.attn);
    let mut at = 0;
    for p in parts.iter_mut() {
        let rows = p.x.len() / dim;
        let span = at * kv_dim..(at + rows) * kv_dim;
        p.kv.append(kv_layer, &r.k[span.clone()], &r.v[span]);
        at += rows;
    }
    matmul(&w.attn_output, &r.att, n, &mut r.xb, &mut r.scratch);
    if let Some(post) = &w.post_attention_norm {
        // gemma3's sandwich norm
        load_vector(post, &mut r.norm_w);
        rmsnorm_in_place(&mut r.xb, &r.norm_w, eps);
    }
    add_parts(parts, &r.xb);

    // Feed-forward: x += [post_norm] Wdown · (act(Wgate·norm(x)) * Wup·norm(x))
    load_vector(&w.ffn_norm, &mut r.norm_w);
    norm_parts(parts, &mut r.xb, &r.norm_w, eps);
    let gate_up = [(&w.ffn_gate, &mut r.hb), (&w.ffn_up, &mut r.hb2)];
    matmuls(
        &mut gate_up.map(|(w, o)| (w, &mut o[..])),
        &r.xb,
        n,
        &mut r.scratch,
    );
    match c.ffn_activation {
        FfnActivation::Silu => gated(swiglu, &mut r.hb, &r.hb2),
        FfnActivation::GeluTanh => gated(gelu_tanh_gated, &mut r.hb, &r.hb2),
    }
    matmul(&w.ffn_down, &r.hb, n, &mut r.xb, &mut r.scratch);
    if let Some(post) = &w.post_ffw_norm {
        load_vector(post, &mut r.norm_w);
        rmsnorm_in_place(&mut r.xb, &r.norm_w, eps);
    }
    add_parts(parts, &r.xb);
}

impl Session {
    /// Runs the current batch through layer `layer` (layers must come in order).
    pub fn run_layer(&mut self, layer: usize, w: &LayerWeights) -> Result<(), EngineError> {
        self.check_next(layer)?;
        let pos = self.position();
        let part = Part {
            x: &mut self.x,
            kv: &mut self.kv,
            pos,
        };
        let kv_layer = layer - self.layers.start;
        run_block(&self.cfg, &mut self.rows, &mut [part], layer, kv_layer, w);
        self.next_layer += 1;
        Ok(())
    }

    /// Whether the batch is ready for `layer`.
    fn check_next(&self, layer: usize) -> Result<(), EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if layer != self.next_layer || layer >= self.layers.end {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: layer,
            });
        }
        Ok(())
    }
}

/// Several sessions' batches run through each layer together: their rows share the matmuls
/// (each weight read once for all of them), while RoPE, the KV cache and attention stay each
/// session's own. Each session gives exactly what it gives alone (see [`run_block`]). A caller
/// begins every session's batch ([`Joint::begin`], or [`Session::begin`]), calls
/// [`Joint::prepare`] before reading layers, runs the layers here, and ends them all with
/// [`Joint::finish`] (one LM head matmul for every row that wants logits) or each alone.
pub struct Joint {
    cfg: ModelConfig,
    rows: Rows,
    /// The final-norm input of the rows that want logits, and their logits: `[rows, vocab]`;
    /// `spans[i]`: where session i of the last finish has its rows.
    hidden: Vec<f32>,
    logits: Vec<f32>,
    spans: Vec<Range<usize>>,
}

/// Which logits the end of a batch computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitRows {
    /// None: a prompt's earlier chunks, whose logits nobody reads.
    None,
    /// The last position's: a prompt, a decode step.
    Last,
    /// Every position's: a verify pass.
    All,
}

impl LogitRows {
    /// The rows of an `n`-position batch it computes.
    fn of(self, n: usize) -> Range<usize> {
        match self {
            LogitRows::None => n..n,
            LogitRows::Last => n.saturating_sub(1)..n,
            LogitRows::All => 0..n,
        }
    }
}

impl Joint {
    pub fn new(cfg: &ModelConfig) -> Self {
        Joint {
            cfg: cfg.clone(),
            rows: Rows::new(cfg),
            hidden: Vec::new(),
            logits: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Starts `session`'s batch as [`Session::begin`] does, but without sizing the session's own
    /// activation buffers: its rows run in this joint's.
    pub fn begin(
        &self,
        session: &mut Session,
        tokens: &[u32],
        w: &ResidentWeights,
    ) -> Result<(), EngineError> {
        session.embed_batch(tokens, w, false)
    }

    /// Starts `session`'s batch from hidden states as [`Session::begin_hidden`] does, its rows
    /// running in this joint's activations (a layer station running several conversations).
    pub fn begin_hidden(&self, session: &mut Session, hidden: &[f32]) -> Result<(), EngineError> {
        session.load_hidden(hidden, false)
    }

    /// Sizes the shared rows for the sessions' current batches (each begun): everything the
    /// layers will use is taken here, before layers are read.
    pub fn prepare(&mut self, sessions: &[&mut Session]) -> Result<(), EngineError> {
        let Some(first) = sessions.first() else {
            return Err(EngineError::EmptyBatch);
        };
        let mut n = 0usize;
        for s in sessions {
            if s.cfg != self.cfg || s.layers != first.layers {
                return Err(EngineError::BadConfig(
                    "sessions run together must share their model and layer range".into(),
                ));
            }
            if s.n == 0 {
                return Err(EngineError::EmptyBatch);
            }
            n = n.saturating_add(s.n);
        }
        addressable(
            "the joint batch's activations",
            &[n, widest(&self.cfg), std::mem::size_of::<f32>()],
        )?;
        self.rows.fit(&self.cfg, n);
        Ok(())
    }

    /// Runs every session's current batch through layer `layer` (layers in order; the same
    /// sessions, prepared, for every layer).
    pub fn run_layer(
        &mut self,
        sessions: &mut [&mut Session],
        layer: usize,
        w: &LayerWeights,
    ) -> Result<(), EngineError> {
        let rows: usize = sessions.iter().map(|s| s.n).sum();
        if rows * self.cfg.dim != self.rows.xb.len() {
            return Err(EngineError::BadConfig(
                "the joint batch changed since Joint::prepare".into(),
            ));
        }
        for s in sessions.iter() {
            s.check_next(layer)?;
        }
        let kv_layer = layer - sessions[0].layers.start;
        let mut parts: Vec<Part<'_>> = sessions
            .iter_mut()
            .map(|s| {
                let pos = s.position();
                Part {
                    x: &mut s.x,
                    kv: &mut s.kv,
                    pos,
                }
            })
            .collect();
        run_block(&self.cfg, &mut self.rows, &mut parts, layer, kv_layer, w);
        for s in sessions.iter_mut() {
            s.next_layer += 1;
        }
        Ok(())
    }
}

impl Joint {
    /// Ends every session's batch (each through every layer): the rows `want` names (one entry
    /// per session) go through the final norm and the LM head in one matmul. Session i's logits
    /// — what [`Session::finish`] would give it — are then [`Joint::logits`]`(i)` until the next
    /// finish (empty for a session wanting none); nothing is copied into the sessions.
    pub fn finish(
        &mut self,
        sessions: &mut [&mut Session],
        want: &[LogitRows],
        w: &ResidentWeights,
    ) -> Result<(), EngineError> {
        if sessions.len() != want.len() {
            return Err(EngineError::BadConfig(
                "one LogitRows per session to finish".into(),
            ));
        }
        for s in sessions.iter() {
            s.check_finished()?;
        }
        let dim = self.cfg.dim;
        let m: usize = sessions
            .iter()
            .zip(want)
            .map(|(s, k)| k.of(s.n).len())
            .sum();
        if m > 0 {
            fit(&mut self.hidden, m * dim);
            let mut at = 0;
            for (s, k) in sessions.iter().zip(want) {
                let r = k.of(s.n);
                let len = r.len() * dim;
                self.hidden[at..at + len].copy_from_slice(&s.x[r.start * dim..r.end * dim]);
                at += len;
            }
            self.rows
                .lm_head(&self.cfg, w, &self.hidden, &mut self.logits)?;
        }
        let vocab = w.output.rows();
        let mut at = 0;
        self.spans.clear();
        for (s, k) in sessions.iter_mut().zip(want) {
            let len = k.of(s.n).len() * vocab;
            self.spans.push(at..at + len);
            at += len;
            s.kv.commit(s.n);
            s.n = 0;
        }
        Ok(())
    }

    /// The logits of the `i`-th session of the last [`Joint::finish`] (`[rows, vocab]`, the
    /// rows it wanted), for a caller to process in place; empty for an index it did not have.
    pub fn logits(&mut self, i: usize) -> &mut [f32] {
        match self.spans.get(i) {
            Some(r) => &mut self.logits[r.clone()],
            None => &mut [],
        }
    }
}

/// A batch's way in (token ids or a station's hidden states) and out (logits, nothing, or
/// hidden states for the next station).
impl Session {
    /// Starts a batch: checks the ids and embeds them into the residual stream.
    pub fn begin(&mut self, tokens: &[u32], w: &ResidentWeights) -> Result<(), EngineError> {
        self.embed_batch(tokens, w, true)
    }

    /// [`Session::begin`]; `own_rows`: size the session's own activation buffers (not when the
    /// batch runs in a [`Joint`]'s).
    fn embed_batch(
        &mut self,
        tokens: &[u32],
        w: &ResidentWeights,
        own_rows: bool,
    ) -> Result<(), EngineError> {
        if self.layers.start != 0 {
            return Err(self.range_error("token ids enter at layer 0; pass hidden states"));
        }
        if tokens.is_empty() {
            return Err(EngineError::EmptyBatch);
        }
        self.cfg.check_tokens(tokens)?;
        self.start_batch(tokens.len(), own_rows)?;
        let dim = self.cfg.dim;
        for (row, &id) in self.x.chunks_exact_mut(dim).zip(tokens) {
            embed(&self.cfg, &w.token_embd, id as usize, row);
        }
        Ok(())
    }

    /// Starts a batch from hidden states (`[n, dim]`, the residual stream before this session's
    /// first layer): what a station receives from the one before it.
    pub fn begin_hidden(&mut self, hidden: &[f32]) -> Result<(), EngineError> {
        self.load_hidden(hidden, true)
    }

    /// [`Session::begin_hidden`]; `own_rows` as in [`Session::embed_batch`].
    fn load_hidden(&mut self, hidden: &[f32], own_rows: bool) -> Result<(), EngineError> {
        let dim = self.cfg.dim;
        if hidden.is_empty() {
            return Err(EngineError::EmptyBatch);
        }
        if !hidden.len().is_multiple_of(dim) {
            return Err(EngineError::HiddenShape {
                got: hidden.len(),
                dim,
            });
        }
        self.start_batch(hidden.len() / dim, own_rows)?;
        self.x.copy_from_slice(hidden);
        Ok(())
    }

    fn range_error(&self, what: &'static str) -> EngineError {
        EngineError::LayerRange {
            start: self.layers.start,
            end: self.layers.end,
            what,
        }
    }

    /// Sizes the buffers for a batch of `n` positions and takes everything its layers will grow
    /// (`own_rows`: the activations too, unless a [`Joint`] brings them).
    fn start_batch(&mut self, n: usize, own_rows: bool) -> Result<(), EngineError> {
        let needed = self.position() + n;
        if needed > self.max_ctx {
            return Err(EngineError::ContextFull {
                needed,
                max: self.max_ctx,
            });
        }
        addressable(
            "the batch's activations",
            &[n, widest(&self.cfg), std::mem::size_of::<f32>()],
        )?;
        fit(&mut self.x, n * self.cfg.dim);
        // Everything the layers will grow is taken here, before the host starts reading layers:
        // an allocation while a read writes into wasm memory would detach its view.
        self.kv.reserve(needed);
        if own_rows {
            self.rows.fit(&self.cfg, n);
        }
        self.n = n;
        self.next_layer = self.layers.start;
        Ok(())
    }

    /// Ends the batch: final norm and LM head. Returns the logits of the last position, or of
    /// every position (`[n, vocab]`) when `all_positions`.
    pub fn finish(
        &mut self,
        w: &ResidentWeights,
        all_positions: bool,
    ) -> Result<&[f32], EngineError> {
        self.check_finished()?;
        let (n, dim) = (self.n, self.cfg.dim);
        let rows = if all_positions { 0..n } else { n - 1..n };
        let hidden = &self.x[rows.start * dim..rows.end * dim];
        self.rows.lm_head(&self.cfg, w, hidden, &mut self.logits)?;
        self.kv.commit(n);
        self.n = 0;
        Ok(&self.logits)
    }

    /// Ends the batch without the LM head: its positions enter the KV cache and no logits are
    /// computed (a prompt's earlier chunks, whose logits nobody reads).
    pub fn finish_without_logits(&mut self) -> Result<(), EngineError> {
        self.check_finished()?;
        self.kv.commit(self.n);
        self.n = 0;
        Ok(())
    }

    /// Ends the batch at the end of this session's layer range: its positions enter the KV
    /// cache and the residual stream (`[n, dim]`) is returned for the next station.
    pub fn finish_hidden(&mut self) -> Result<&[f32], EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if self.next_layer != self.layers.end {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: self.layers.end,
            });
        }
        let n = self.n;
        self.kv.commit(n);
        self.n = 0;
        Ok(&self.x[..n * self.cfg.dim])
    }

    /// Whether the batch went through the last layer (and can end with the LM head).
    fn check_finished(&self) -> Result<(), EngineError> {
        if self.n == 0 {
            return Err(EngineError::EmptyBatch);
        }
        if self.next_layer != self.cfg.n_layers {
            return Err(EngineError::LayerOrder {
                expected: self.next_layer,
                got: self.cfg.n_layers,
            });
        }
        Ok(())
    }

    /// The logits the last [`Session::finish`] returned, for a caller to process in place (a
    /// decode pipeline masks and penalizes them); they stay until the next `finish`.
    pub fn logits_mut(&mut self) -> &mut [f32] {
        &mut self.logits
    }
}

/// Construction, the memory a session takes, and the KV cache between batches.
impl Session {
    /// A session holding at most `max_ctx` positions (capped by the model's context length),
    /// with an f32 KV cache.
    pub fn new(cfg: &ModelConfig, max_ctx: usize) -> Result<Self, EngineError> {
        Self::with_kv(cfg, max_ctx, KvType::F32)
    }

    /// A session whose KV cache stores `kv_type`.
    pub fn with_kv(
        cfg: &ModelConfig,
        max_ctx: usize,
        kv_type: KvType,
    ) -> Result<Self, EngineError> {
        Self::for_layers(cfg, 0..cfg.n_layers, max_ctx, kv_type)
    }

    /// A session that runs only `layers` and keeps KV for those alone: a station's share of a
    /// model split across processes. Batches enter as hidden states ([`Session::begin_hidden`])
    /// unless the range starts at layer 0, and leave as hidden states
    /// ([`Session::finish_hidden`]) unless it ends at the last layer.
    pub fn for_layers(
        cfg: &ModelConfig,
        layers: Range<usize>,
        max_ctx: usize,
        kv_type: KvType,
    ) -> Result<Self, EngineError> {
        cfg.validate()?;
        if layers.is_empty() || layers.end > cfg.n_layers {
            return Err(EngineError::BadConfig(format!(
                "layer range {}..{} is not a non-empty part of 0..{}",
                layers.start, layers.end, cfg.n_layers
            )));
        }
        let max_ctx = max_ctx.min(cfg.context_length.max(1));
        // The KV cache grows with positions up to `max_ctx`: K and V, every layer it runs.
        addressable(
            "the KV cache",
            &[max_ctx, layers.len(), cfg.kv_dim(), 2, kv_type.bytes()],
        )?;
        let windows = &layer_windows(cfg)[layers.clone()];
        Ok(Session {
            rows: Rows::new(cfg),
            kv: KvCache::new(Self::kv_shape(layers.len(), cfg, max_ctx, kv_type), windows),
            cfg: cfg.clone(),
            max_ctx,
            next_layer: layers.start,
            layers,
            n: 0,
            x: Vec::new(),
            logits: Vec::new(),
        })
    }

    fn kv_shape(n_layers: usize, cfg: &ModelConfig, max_ctx: usize, kv_type: KvType) -> KvShape {
        KvShape {
            n_layers,
            kv_dim: cfg.kv_dim(),
            max_positions: max_ctx,
            kv_type,
        }
    }

    /// The most memory a session takes: its KV cache holding `max_ctx` positions (capped by the
    /// model's context length; sliding-window layers keep only their window), batches of up to
    /// `max_batch` positions, and passes keeping `logits_rows` rows of logits. `None` when it
    /// cannot be addressed.
    pub fn memory(
        cfg: &ModelConfig,
        max_ctx: usize,
        kv_type: KvType,
        max_batch: usize,
        logits_rows: usize,
    ) -> SessionMemory {
        let max_ctx = max_ctx.min(cfg.context_length.max(1));
        let kv = Self::kv_shape(cfg.n_layers, cfg, max_ctx, kv_type)
            .bytes_at(max_ctx, &layer_windows(cfg));
        let (dim, q_dim, kv_dim, ffn) = (cfg.dim, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim);
        let widest = dim.max(q_dim).max(ffn) as u128;
        let n = max_batch.clamp(1, max_ctx) as u128;
        let f32s = |k: u128| k.saturating_mul(4);
        // x, xb; q, att; k, v; hb, hb2 — then the quantized activations (i16 + two f32 per 32)
        // of the widest input, the norm weights, and each thread's attention scratch (fixed:
        // attention runs in tiles, whatever the context).
        let rows = 2 * (dim + q_dim + kv_dim + ffn) as u128;
        let activations = f32s(n.saturating_mul(rows))
            .saturating_add(n.saturating_mul(widest).saturating_mul(9) / 4)
            .saturating_add(f32s(widest))
            .saturating_add(
                crate::attention::scratch_bytes(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) as u128
                    * crate::quant::threads::threads() as u128,
            );
        let logits = f32s((logits_rows.max(1) as u128).saturating_mul(cfg.vocab_size as u128));
        let clamp = |b: u128| u64::try_from(b).unwrap_or(u64::MAX);
        SessionMemory {
            kv_cache: clamp(kv),
            activations: clamp(activations),
            logits: clamp(logits),
        }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Positions already processed (the KV cache length).
    pub fn position(&self) -> usize {
        self.kv.len()
    }

    pub fn max_context(&self) -> usize {
        self.max_ctx
    }

    /// The layers this session runs.
    pub fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    pub fn kv_type(&self) -> KvType {
        self.kv.kv_type()
    }

    /// Bytes the KV cache has allocated.
    pub fn kv_bytes(&self) -> usize {
        self.kv.bytes()
    }

    /// Allocates the KV cache for the whole context now.
    pub fn reserve_kv(&mut self) {
        self.kv.reserve(self.max_ctx);
    }

    /// An empty KV cache of this session's shape, for [`Session::swap_kv`].
    pub fn new_kv(&self) -> KvCache {
        KvCache::new(
            Self::kv_shape(
                self.layers.len(),
                &self.cfg,
                self.max_ctx,
                self.kv.kv_type(),
            ),
            &layer_windows(&self.cfg)[self.layers.clone()],
        )
    }

    /// Exchanges the session's KV cache (its conversation) with `other`, between batches; the
    /// caches must come from [`Session::new_kv`] of a session like this one.
    pub fn swap_kv(&mut self, other: &mut KvCache) -> Result<(), EngineError> {
        if self.n != 0 {
            return Err(EngineError::Busy);
        }
        if other.kv_type() != self.kv.kv_type()
            || other.max_positions() != self.max_ctx
            || other.layers() != self.layers.len()
        {
            return Err(EngineError::BadConfig(
                "a KV cache of another shape cannot be swapped in".into(),
            ));
        }
        std::mem::swap(&mut self.kv, other);
        Ok(())
    }

    /// Makes the session's KV cache a copy of `src` (from [`Session::new_kv`] of a session like
    /// this one), between batches; `src` is left as it was. A host restores a pinned prefix
    /// window this way, keeping the window for later prompts.
    pub fn load_kv(&mut self, src: &KvCache) -> Result<(), EngineError> {
        if self.n != 0 {
            return Err(EngineError::Busy);
        }
        if !self.kv.copy_from(src) {
            return Err(EngineError::BadConfig(
                "a KV cache of another shape cannot be copied in".into(),
            ));
        }
        Ok(())
    }

    /// Forgets the sequence; buffers are kept for reuse.
    pub fn reset(&mut self) {
        self.kv.clear();
        self.n = 0;
        self.next_layer = self.layers.start;
    }

    /// The earliest position [`Session::rewind`] can go back to (sliding-window layers keep
    /// only their window and a little more).
    pub fn earliest_rewind(&self) -> usize {
        self.kv.earliest_rewind()
    }

    /// Forgets every position from `pos` on, keeping the first `pos` (a verifier drops the
    /// positions of rejected draft tokens). Only between batches, only backwards, and no
    /// further back than [`Session::earliest_rewind`].
    pub fn rewind(&mut self, pos: usize) -> Result<(), EngineError> {
        if self.n != 0 || !self.kv.truncate(pos) {
            return Err(EngineError::Rewind {
                to: pos,
                held: self.kv.len(),
                earliest: self.kv.earliest_rewind(),
            });
        }
        Ok(())
    }

    /// Abandons the current batch (e.g. a layer could not be fetched): the KV cache goes back to
    /// where it was before `begin`, so the session can carry on. Returns false when that is
    /// impossible (a long batch overwrote a sliding window's ring): the conversation is then
    /// forgotten.
    pub fn abort_batch(&mut self) -> bool {
        self.n = 0;
        self.next_layer = self.layers.start;
        self.kv.abandon()
    }
}

/// What a session's buffers take at most, in bytes (see [`Session::memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMemory {
    /// The KV cache once it holds the whole context.
    pub kv_cache: u64,
    /// Activations and scratch of the largest batch.
    pub activations: u64,
    /// Logits of the most rows one pass keeps.
    pub logits: u64,
}

impl SessionMemory {
    pub fn total(&self) -> u64 {
        self.kv_cache + self.activations + self.logits
    }
}

/// Each layer's sliding window (`None`: a global layer).
fn layer_windows(cfg: &ModelConfig) -> Vec<Option<usize>> {
    (0..cfg.n_layers)
        .map(|l| cfg.sliding_window.filter(|_| cfg.is_local_layer(l)))
        .collect()
}

impl Rows {
    fn new(cfg: &ModelConfig) -> Self {
        Rows {
            rope: Rope::new(cfg.rope_style, cfg.rope_dim, cfg.rope_theta),
            rope_local: Rope::new(
                cfg.rope_style,
                cfg.rope_dim,
                cfg.rope_theta_local.unwrap_or(cfg.rope_theta),
            ),
            xb: Vec::new(),
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            att: Vec::new(),
            hb: Vec::new(),
            hb2: Vec::new(),
            attn: AttentionBuffers::default(),
            norm_w: Vec::new(),
            scratch: MatmulScratch::default(),
        }
    }

    /// The final norm and the LM head over `hidden`'s rows into `logits`, in these buffers.
    fn lm_head(
        &mut self,
        c: &ModelConfig,
        w: &ResidentWeights,
        hidden: &[f32],
        logits: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        let head = LmHead {
            output_norm: &w.output_norm,
            output: &w.output,
        };
        let bufs = HeadBuffers {
            norm_w: &mut self.norm_w,
            xb: &mut self.xb,
            logits,
            scratch: &mut self.scratch,
        };
        head.logits(c.norm_eps, hidden, bufs)
    }

    /// Sized for `n` rows.
    fn fit(&mut self, c: &ModelConfig, n: usize) {
        let (dim, q_dim, kv_dim, ffn) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim);
        for (buf, width) in [
            (&mut self.xb, dim),
            (&mut self.q, q_dim),
            (&mut self.k, kv_dim),
            (&mut self.v, kv_dim),
            (&mut self.att, q_dim),
            (&mut self.hb, ffn),
            (&mut self.hb2, ffn),
        ] {
            fit(buf, n * width);
        }
        self.scratch.reserve(n * widest(c));
        self.attn.reserve(c.n_heads, c.n_kv_heads, c.head_dim);
    }
}

/// The widest row a layer computes.
fn widest(c: &ModelConfig) -> usize {
    c.dim.max(c.q_dim()).max(c.ffn_dim)
}

/// RMSNorm of each part's residual rows into its rows of `out`.
fn norm_parts(parts: &[Part<'_>], out: &mut [f32], weight: &[f32], eps: f32) {
    let mut at = 0;
    for p in parts {
        rmsnorm(&mut out[at..at + p.x.len()], p.x, weight, eps);
        at += p.x.len();
    }
}

/// Each part's residual rows += its rows of `y`.
fn add_parts(parts: &mut [Part<'_>], y: &[f32]) {
    let mut at = 0;
    for p in parts.iter_mut() {
        add(p.x, &y[at..at + p.x.len()]);
        at += p.x.len();
    }
}

/// x += y, element by element (the residual connections).
fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Adds `row` to every `row.len()`-wide row of `x`.
fn add_rows(x: &mut [f32], row: &[f32]) {
    for r in x.chunks_exact_mut(row.len()) {
        add(r, row);
    }
}
