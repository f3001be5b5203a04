//! What a user can read through `stats()` (the host's cache, I/O, memory, sequences and prefix
//! reuse), and what each generation's caller gets when it ends (`SequenceReport`).

use crate::cache::CacheStats;
use crate::memory::MemoryPlan;
use crate::prefix::PrefixStatus;

/// What a user can read through `stats()`: the host's own figures, read on request (the host
/// updates them in place as it goes; nothing is copied per call).
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
    /// Bytes the KV caches have allocated: every sequence's, every window's, every explicit
    /// prefill window's.
    pub kv_cache_bytes: u64,
    /// Positions the context holds (under a memory budget, what fits).
    pub context_length: usize,
    /// The sequences run together: the most at once, active now, admitted and ended so far.
    pub sequences: SequenceCounts,
    /// How admitted prompts used the prefix windows, summed; and the windows held.
    pub prefix_reuse: PrefixCounts,
    /// The explicit prefill windows held.
    pub prefill_windows: PrefillWindowStats,
    /// The memory plan open checked, when a budget was given.
    pub memory_plan: Option<MemoryPlan>,
    pub open_ms: f64,
    /// Steps run (forward passes, each over every active sequence) and what they made.
    pub steps: StepCounts,
    /// The generation that ended last (its report, as its own caller got it).
    pub generation: Option<SequenceReport>,
}

/// The sequences a host runs together.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SequenceCounts {
    pub max: usize,
    pub active: usize,
    pub admitted: u64,
    pub ended: u64,
}

/// Prefix reuse over every admitted prompt, and the implicit windows.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefixCounts {
    pub hits: u64,
    pub misses: u64,
    pub mismatches: u64,
    pub expired: u64,
    /// Prompt tokens whose KV came from a window, and prompt tokens prefilled.
    pub reused_tokens: u64,
    pub prefilled_tokens: u64,
    /// Implicit windows (conversations kept for reuse): how many, and how many hold one.
    pub windows: usize,
    pub windows_held: usize,
}

impl PrefixCounts {
    pub(crate) fn count(&mut self, r: &PrefixReport) {
        match r.status {
            PrefixStatus::Hit => self.hits += 1,
            PrefixStatus::Mismatch => self.mismatches += 1,
            PrefixStatus::Expired => self.expired += 1,
            PrefixStatus::Miss | PrefixStatus::Disabled => self.misses += 1,
        }
        self.reused_tokens += r.reused;
        self.prefilled_tokens += r.prefilled;
    }
}

/// The host's steps.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCounts {
    /// Steps (forward passes) run.
    pub steps: u64,
    /// Tokens they made, over every sequence.
    pub tokens: u64,
    /// Positions run (prompt chunks, pending tokens, drafts), over every sequence.
    pub positions: u64,
    /// `tokens / steps`: with several sequences decoding together, above 1.
    pub tokens_per_step: f64,
}

/// What one generation (a sequence) did: its caller gets it when it ends.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SequenceReport {
    /// Tokens of the whole prompt (with `continue`, the conversation it continues included).
    pub prompt_tokens: u64,
    /// How its prompt used a prefix window (`reusePrefix`, `continue`) or an explicit prefill
    /// window (`prefillWindow`); None when it asked for neither.
    pub prefix: Option<PrefixReport>,
    /// From admission to the first token (its prompt's prefill, shared steps included).
    pub prefill_ms: f64,
    /// Prompt tokens prefilled (not served from a window).
    pub prefill_tokens: u64,
    /// Wall time of each step that made one of its tokens, after the first (a token that a
    /// verify pass made along with an earlier one costs only its delivery).
    pub token_ms: Vec<f64>,
    /// Layer range reads while it decoded (after its first token; shared with the sequences
    /// decoding beside it), and per token it made.
    pub decode_layer_reads: u64,
    pub layer_reads_per_token: f64,
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
    /// The implicit window that served it (0 for an explicit one).
    pub window: usize,
    /// Whether the prompt asked for reuse (`reusePrefix`: implicit) or named a window
    /// (`prefillWindow`: explicit), and the window it named.
    pub kind: PrefixKind,
    pub id: Option<String>,
}

/// Which prefix reuse a prompt asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixKind {
    /// `reusePrefix`: the parked conversations.
    Implicit,
    /// `prefillWindow`: a window created by `createPrefillWindow`.
    Explicit,
}

/// A generation's forward passes and drafts.
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
}

/// `a / b`, 0 when `b` is.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    match b {
        0 => 0.0,
        _ => a as f64 / b as f64,
    }
}

/// What a caller sees of an explicit prefill window.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefillWindowInfo {
    pub id: String,
    /// Tokens it holds (every one of them in its KV cache).
    pub tokens: usize,
    /// When it expires: milliseconds since the Unix epoch.
    pub expires_at: f64,
}

/// A new window, and the least recently used one it replaced when the count was full.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefillWindowCreated {
    #[serde(flatten)]
    pub window: PrefillWindowInfo,
    pub replaced: Option<String>,
}

/// The explicit windows, as `stats()` reports them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefillWindowStats {
    /// Windows held (expired ones not yet dropped included), and the most the host keeps.
    pub count: usize,
    pub max: usize,
    /// Tokens they hold, and the bytes their KV caches have allocated.
    pub tokens: u64,
    pub kv_bytes: u64,
    pub windows: Vec<PrefillWindowInfo>,
}
