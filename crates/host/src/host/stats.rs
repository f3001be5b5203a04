//! What a user can read through `stats()`: cache and I/O counters, memory, timings, and what the
//! current generation's passes and drafts did.

use crate::cache::CacheStats;
use crate::memory::MemoryPlan;
use crate::prefix::PrefixStatus;

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
    /// How the last prompt used the prefix windows (`reusePrefix`) or an explicit prefill
    /// window (`prefillWindow`), or None.
    pub prefix: Option<PrefixReport>,
    /// The explicit prefill windows held.
    pub prefill_windows: PrefillWindowStats,
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

/// `a / b`, 0 when `b` is.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    match b {
        0 => 0.0,
        _ => a as f64 / b as f64,
    }
}

/// What a caller sees of a window.
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
