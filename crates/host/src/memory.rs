//! What a host will take in memory, worked out at open from the metadata alone (before the
//! resident tensors are read), so a model that cannot fit a budget is refused with the numbers
//! instead of running out of memory later — in wasm an allocation failure kills the instance.

use engine::kv::KvType;
use engine::Session;
use knot::{Knot, ModelConfig};

/// Positions of a prefill batch when a budget is set and `maxBatch` is not: activations scale
/// with the batch, and 256 positions keep prefill near full speed.
pub const DEFAULT_BUDGET_BATCH: usize = 256;

/// Positions of a lone sequence's prefill batch when every layer stays cached and `maxBatch` is
/// not set: a chunk then costs no reads and no speed (attention runs in key tiles, whatever the
/// batch), while a whole long prompt at once would take its activations for every position — and
/// in wasm memory never shrinks back.
pub const RESIDENT_PREFILL_CHUNK: usize = 512;

/// The fewest positions a budgeted host accepts: a context smaller than this is refused.
pub const MIN_BUDGET_CONTEXT: usize = 256;

/// Bytes beyond the tensors and buffers: the wasm module's data and stack (1.2 MiB before
/// anything is opened), the allocator's slack, the host's own tables.
pub const FIXED_OVERHEAD: u64 = 3 << 20;

/// The parsed tokenizer (strings, lookup tables, merges, specials) per byte of its blob, and the
/// vocabulary index COLTRANE builds once a constraint is used, per token. Measured in wasm on
/// SmolLM2 (1.1 MiB blob, 49k tokens: 6.5× and 80 bytes) and Gemma-3 (5.8 MiB, 262k tokens:
/// 4.8× and 100 bytes), rounded up.
pub const TOKENIZER_BYTES_PER_BLOB_BYTE: u64 = 7;
pub const CONSTRAINT_BYTES_PER_TOKEN: u64 = 128;

/// The breakdown a budget is checked against (bytes).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryPlan {
    /// Tokenizer blob and resident tensors (embedding, final norm, LM head), read in one buffer.
    pub resident: u64,
    /// The parsed tokenizer and COLTRANE's vocabulary index.
    pub tokenizer: u64,
    /// The layer cache at its bound (a layer over it while one computes).
    pub layers: u64,
    /// Every KV cache holding the whole context: one per sequence (`maxSequences`), and the
    /// extra windows (`prefixWindows`).
    pub kv_cache: u64,
    /// Every explicit prefill window's KV cache holding its most tokens.
    pub prefill_windows: u64,
    pub activations: u64,
    pub logits: u64,
    pub overhead: u64,
    /// The context the plan is for, and the batch and logits rows it allows.
    pub context: usize,
    pub max_batch: usize,
    pub logits_rows: usize,
    pub total: u64,
}

/// The inputs a plan depends on besides the file.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    pub lru_capacity: usize,
    pub max_resident_bytes: Option<u64>,
    pub kv_type: KvType,
    pub context: usize,
    pub max_batch: usize,
    pub logits_rows: usize,
    /// KV caches: one per sequence and the extra windows (conversations kept for reuse).
    pub windows: usize,
    /// Explicit prefill windows, and the most positions each holds.
    pub prefill_windows: usize,
    pub prefill_window_tokens: usize,
    /// Sequences run together (`maxSequences`).
    pub sequences: usize,
}

/// The memory a host opened on `knot` with these settings takes at most.
pub fn plan(knot: &Knot, config: &ModelConfig, input: PlanInput) -> MemoryPlan {
    let tok = knot.tokenizer_range();
    let res = knot.resident_range();
    // One buffer from the tokenizer blob's start to the resident tensors' end.
    let resident = res.end.saturating_sub(tok.start.min(res.start));
    let tokenizer = (tok.end - tok.start).saturating_mul(TOKENIZER_BYTES_PER_BLOB_BYTE)
        + (config.vocab_size as u64).saturating_mul(CONSTRAINT_BYTES_PER_TOKEN);
    let spans: Vec<u64> = (0..knot.n_layers())
        .filter_map(|l| knot.layer_range(l))
        .map(|r| r.end - r.start)
        .collect();
    let largest = spans.iter().copied().max().unwrap_or(0);
    let all: u64 = spans.iter().sum();
    // The cache holds `lru_capacity` layers (or `max_resident_bytes` worth), and a layer more
    // for a moment while one computes and the next arrives.
    let mut layers = largest.saturating_mul(input.lru_capacity.saturating_add(1) as u64);
    if let Some(max) = input.max_resident_bytes {
        layers = layers.min(max.saturating_add(largest));
    }
    let layers = layers.min(all);
    let session = Session::memory(
        config,
        input.context,
        input.kv_type,
        input.max_batch,
        input.logits_rows,
    );
    // The KV caches (each sequence's, and the windows'). A step is one batch — a prefill chunk and
    // every sequence's decode (and verify) rows — in the joint's activations, whose logits rows
    // are the only ones kept; each session keeps its residual rows (up to a prefill chunk),
    // the scratch session that prefills explicit windows too.
    let n = input.sequences.max(1);
    let kv_cache = session.kv_cache.saturating_mul(input.windows.max(n) as u64);
    let rows = match n {
        1 => input.max_batch,
        _ => input
            .max_batch
            .saturating_add(n.saturating_mul(input.logits_rows)),
    };
    let logits_rows = match n {
        1 => input.logits_rows,
        _ => n.saturating_mul(input.logits_rows).saturating_add(1),
    };
    let joint = Session::memory(config, input.context, input.kv_type, rows, logits_rows);
    let x = (input.max_batch as u64).saturating_mul(config.dim as u64 * 4);
    let residuals = (n + usize::from(input.prefill_windows > 0)) as u64;
    let activations = joint
        .activations
        .saturating_add(x.saturating_mul(residuals));
    let logits = joint.logits;
    let pinned = Session::memory(
        config,
        input.prefill_window_tokens.min(input.context),
        input.kv_type,
        1,
        1,
    );
    let prefill_windows = pinned.kv_cache.saturating_mul(input.prefill_windows as u64);
    let mut plan = MemoryPlan {
        resident,
        tokenizer,
        layers,
        kv_cache,
        prefill_windows,
        activations,
        logits,
        overhead: FIXED_OVERHEAD,
        context: input.context,
        max_batch: input.max_batch,
        logits_rows: input.logits_rows,
        total: 0,
    };
    plan.total = [
        plan.resident,
        plan.tokenizer,
        plan.layers,
        plan.kv_cache,
        plan.prefill_windows,
        plan.activations,
        plan.logits,
        plan.overhead,
    ]
    .iter()
    .fold(0u64, |a, &b| a.saturating_add(b));
    plan
}

/// The largest context up to `max_context` whose plan fits `budget`, found by bisection (the
/// plan grows with the context); `None` when not even [`MIN_BUDGET_CONTEXT`] positions (or the
/// model's whole context, if shorter) fit.
pub fn fit_context(
    knot: &Knot,
    config: &ModelConfig,
    input: PlanInput,
    budget: u64,
) -> Result<MemoryPlan, MemoryPlan> {
    let at = |context: usize| {
        plan(
            knot,
            config,
            PlanInput {
                context,
                max_batch: input.max_batch.min(context),
                ..input
            },
        )
    };
    let most = input.context.min(config.context_length.max(1));
    let least = MIN_BUDGET_CONTEXT.min(most);
    let smallest = at(least);
    if smallest.total > budget {
        return Err(smallest);
    }
    let (mut lo, mut hi) = (least, most);
    if at(hi).total <= budget {
        return Ok(at(hi));
    }
    // at(lo) fits, at(hi) does not.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if at(mid).total <= budget {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(at(lo))
}

/// "resident 30.1 MiB + tokenizer …" for error messages.
pub fn describe(p: &MemoryPlan) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    format!(
        "{} in all: resident tensors {}, tokenizer {}, layer cache {}, KV cache {} ({} positions), prefill windows {}, activations {}, logits {}, overhead {}",
        mib(p.total),
        mib(p.resident),
        mib(p.tokenizer),
        mib(p.layers),
        mib(p.kv_cache),
        p.context,
        mib(p.prefill_windows),
        mib(p.activations),
        mib(p.logits),
        mib(p.overhead)
    )
}
