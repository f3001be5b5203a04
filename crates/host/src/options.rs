//! How a host is opened: [`HostOptions`], and `HostShim.open`'s options object (JSON, camelCase
//! as in JS) parsed into it — natively testable, each error naming the option and the rule. The
//! keys are the ones [`open_options`] reads; any other is refused.

use crate::reader::{ReadConcurrency, ReadPolicy};
use engine::decode::draft_from_value;
use engine::draft::DraftConfig;
use engine::kv::KvType;
use engine::options::{to_usize, Fields, OptionsError};
use knot::ReadOptions;
use serde_json::Value;

/// The most KV caches a host keeps beyond one per sequence (each holds a whole context).
pub const MAX_PREFIX_WINDOWS: u64 = 64;

/// The most explicit prefill windows a host keeps (each holds a KV cache of up to
/// `prefillWindowMaxTokens` positions).
pub const MAX_PREFILL_WINDOWS: u64 = 16;

/// The most sequences a host runs at once (`maxSequences`): each holds a KV cache, and a step
/// over many of them is a batch of that many rows.
pub const MAX_SEQUENCES: u64 = 64;

/// `maxSequences: 'auto'` without a memory budget, and the most it takes under one.
pub const AUTO_SEQUENCES: usize = 4;
pub const MAX_AUTO_SEQUENCES: usize = 16;

/// How many sequences a host runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCount {
    Fixed(usize),
    /// As many as the memory plan holds at the whole context (up to [`MAX_AUTO_SEQUENCES`], at
    /// least 1), [`AUTO_SEQUENCES`] without a budget.
    Auto,
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
    /// [`crate::memory::RESIDENT_PREFILL_CHUNK`] when every layer stays cached, the whole prompt
    /// at once when layers stream, or [`crate::memory::DEFAULT_BUDGET_BATCH`] under a budget or
    /// with `max_sequences` (a chunk is what a prompt delays the sequences decoding beside it by).
    pub max_batch: Option<usize>,
    /// Bytes the host may take. Open checks the plan (resident tensors, layer cache, KV cache
    /// of every window, activations) against it before reading the tensors, refuses a model
    /// that does not fit with the numbers, takes the largest context up to `max_context` that
    /// fits, and allocates the KV cache up front.
    pub memory_budget: Option<u64>,
    /// KV caches beyond one per sequence (`prefixWindows`): a sequence that ends parks its
    /// conversation in its cache for prefix reuse (`reusePrefix`) and `continue`, so with more
    /// caches than sequences more conversations keep their prefixes.
    pub prefix_windows: usize,
    /// A window not used for this long is forgotten before it would serve a prompt.
    pub prefix_ttl_ms: Option<f64>,
    /// Explicit prefill windows (`createPrefillWindow`) the host keeps; 0 disables them.
    pub prefill_windows: usize,
    /// The most tokens one explicit prefill window holds.
    pub prefill_window_max_tokens: usize,
    /// The longest single read at open: the tokenizer and resident tensors (tens of MB) are read
    /// in pieces of this many bytes (`None`: in one read).
    pub max_read_bytes: Option<u64>,
    /// Sequences run together (`maxSequences`: `Host::admit` / `Host::step`), each with a KV
    /// cache of its own counted in the memory plan. One is a batch of one.
    pub max_sequences: SequenceCount,
    /// A chat template used instead of the file's (`chatTemplate`), as llama-server's
    /// `--chat-template-file`: a model whose file has none, or a template that declares tools.
    pub chat_template: Option<String>,
    /// Threads the matmuls split their rows across (`threads`; natively: `None` keeps the
    /// process's setting, every core unless set). Process-wide: the kernels share one pool.
    /// Output is identical at every count. Builds without threads refuse more than 1.
    pub threads: Option<usize>,
}

/// The longest `chatTemplate` accepted (the templates models ship are a few KiB).
pub const MAX_CHAT_TEMPLATE_BYTES: usize = 1 << 20;

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
            prefix_windows: 0,
            prefix_ttl_ms: None,
            prefill_windows: 1,
            prefill_window_max_tokens: 512,
            max_read_bytes: None,
            chat_template: None,
            max_sequences: SequenceCount::Fixed(1),
            threads: None,
        }
    }
}

/// Parses the options object into [`HostOptions`] (absent or null keys keep their defaults).
pub fn open_options(json: &str) -> Result<HostOptions, OptionsError> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| OptionsError::NotAnObject(e.to_string()))?;
    let f = Fields::new(&v, "")?;
    let d = HostOptions::default();
    let p = d.read_policy;
    let any = u64::MAX;
    let draft = match f.get("draftMode") {
        None => None,
        Some(v) => draft_from_value(v)?,
    };
    let kv_type = kv_cache(&f, d.kv_type)?;
    let prefetch_depth = f.integer_in("prefetchDepth", 0, any)?.map(to_usize);
    let max = u64::from(ReadConcurrency::MAX);
    let concurrency = match f.integer_in("readConcurrency", 1, max)? {
        None => p.concurrency,
        // In range: the reader of the options checked it.
        Some(n) => ReadConcurrency::new(n).unwrap_or(p.concurrency),
    };
    let opts = HostOptions {
        lru_capacity: f
            .integer_in("lruCapacity", 1, any)?
            .map_or(d.lru_capacity, to_usize),
        max_resident_bytes: f.integer_in("maxResidentBytes", 1, any)?,
        prefetch: prefetch_depth != Some(0),
        prefetch_depth,
        max_context: f
            .integer_in("maxContext", 1, any)?
            .map_or(d.max_context, to_usize),
        read: d.read,
        read_policy: ReadPolicy {
            timeout_ms: f
                .integer_in("readTimeoutMs", 0, any)?
                .unwrap_or(p.timeout_ms),
            retries: f
                .integer_in("readRetries", 0, any)?
                .map_or(p.retries, |r| u32::try_from(r).unwrap_or(u32::MAX)),
            backoff_ms: f
                .integer_in("readBackoffMs", 0, any)?
                .unwrap_or(p.backoff_ms),
            concurrency,
        },
        draft,
        kv_type,
        max_batch: f.integer_in("maxBatch", 1, any)?.map(to_usize),
        memory_budget: f.integer_in("memoryBudget", 1, any)?,
        prefix_windows: f
            .integer_in("prefixWindows", 0, MAX_PREFIX_WINDOWS)?
            .map_or(d.prefix_windows, to_usize),
        prefix_ttl_ms: f.number("prefixTtlMs", "a number >= 0", |x| {
            x.is_finite() && x >= 0.0
        })?,
        prefill_windows: f
            .integer_in("prefillWindows", 0, MAX_PREFILL_WINDOWS)?
            .map_or(d.prefill_windows, to_usize),
        prefill_window_max_tokens: f
            .integer_in("prefillWindowMaxTokens", 1, any)?
            .map_or(d.prefill_window_max_tokens, to_usize),
        max_read_bytes: f.integer_in("maxReadBytes", 1, any)?,
        max_sequences: match f.get("maxSequences") {
            Some(Value::String(s)) if s == "auto" => SequenceCount::Auto,
            Some(Value::String(_)) => {
                let v = f.get("maxSequences").unwrap_or(&Value::Null);
                return Err(f.invalid(
                    "maxSequences",
                    format!("an integer in [1, {MAX_SEQUENCES}] or 'auto'"),
                    v,
                ));
            }
            _ => f
                .integer_in("maxSequences", 1, MAX_SEQUENCES)?
                .map_or(d.max_sequences, |n| SequenceCount::Fixed(to_usize(n))),
        },
        threads: f
            .integer_in("threads", 1, engine::quant::MAX_THREADS as u64)?
            .map(to_usize),
        chat_template: match f.get("chatTemplate") {
            None => None,
            Some(Value::String(t)) if t.len() <= MAX_CHAT_TEMPLATE_BYTES => Some(t.clone()),
            Some(v) => {
                return Err(f.invalid(
                    "chatTemplate",
                    format!("a string of at most {MAX_CHAT_TEMPLATE_BYTES} bytes"),
                    v,
                ))
            }
        },
    };
    f.finish()?;
    Ok(opts)
}

/// The options of a prefill window's creation or update (`{ ttlMs }`, JSON): its time to live
/// in milliseconds, None when absent.
pub fn prefill_window_options(json: &str) -> Result<Option<f64>, OptionsError> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| OptionsError::NotAnObject(e.to_string()))?;
    let f = Fields::new(&v, "")?;
    let ttl = f.number("ttlMs", "a number >= 0", |x| x.is_finite() && x >= 0.0)?;
    f.finish()?;
    Ok(ttl)
}

/// The `kvCache` option (`'f32'` | `'f16'`), or `default` when absent: the host's and the
/// station plan's.
pub fn kv_cache(f: &Fields, default: KvType) -> Result<KvType, OptionsError> {
    match f.get("kvCache") {
        None => Ok(default),
        Some(v) => v
            .as_str()
            .and_then(KvType::parse)
            .ok_or_else(|| f.invalid("kvCache", "'f32' or 'f16'", v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_and_the_defaults() {
        let d = open_options("{}").unwrap();
        assert_eq!(d.lru_capacity, usize::MAX);
        assert_eq!(
            (d.kv_type, d.prefix_windows, d.memory_budget),
            (KvType::F32, 0, None)
        );
        let o = open_options(
            r#"{"lruCapacity": 4, "maxResidentBytes": 1000, "prefetchDepth": 0,
                "draftMode": {"maxDraft": 4}, "readTimeoutMs": 0, "readRetries": 5,
                "readBackoffMs": 7, "kvCache": "f16", "maxContext": 2048, "maxBatch": 128,
                "memoryBudget": 100663296, "prefixWindows": 3, "prefixTtlMs": 15000,
                "maxReadBytes": 4194304, "readConcurrency": 6, "prefillWindows": 0,
                "prefillWindowMaxTokens": 64, "maxSequences": 4}"#,
        )
        .unwrap();
        assert_eq!((o.lru_capacity, o.max_resident_bytes), (4, Some(1000)));
        assert!(!o.prefetch);
        assert_eq!(o.draft.unwrap().max_draft, 4);
        assert_eq!(
            (
                o.read_policy.timeout_ms,
                o.read_policy.retries,
                o.read_policy.backoff_ms
            ),
            (0, 5, 7)
        );
        assert_eq!(o.kv_type, KvType::F16);
        assert_eq!((o.max_context, o.max_batch), (2048, Some(128)));
        assert_eq!(o.memory_budget, Some(96 << 20));
        assert_eq!((o.prefix_windows, o.prefix_ttl_ms), (3, Some(15000.0)));
        assert_eq!(o.max_read_bytes, Some(4 << 20));
        assert_eq!((o.prefill_windows, o.prefill_window_max_tokens), (0, 64));
        assert_eq!((d.prefill_windows, d.prefill_window_max_tokens), (1, 512));
        assert_eq!(o.read_policy.concurrency.get(), 6);
        assert_eq!(
            (o.max_sequences, d.max_sequences),
            (SequenceCount::Fixed(4), SequenceCount::Fixed(1))
        );
        let auto = open_options(r#"{"maxSequences": "auto"}"#).unwrap();
        assert_eq!(auto.max_sequences, SequenceCount::Auto);
        assert_eq!(d.read_policy.concurrency.get(), 4);
        // null is absent.
        assert_eq!(
            open_options(r#"{"kvCache": null}"#).unwrap().kv_type,
            KvType::F32
        );
    }

    #[test]
    fn prefill_window_options_are_a_time_to_live() {
        assert_eq!(prefill_window_options("{}").unwrap(), None);
        assert_eq!(
            prefill_window_options(r#"{"ttlMs": 250}"#).unwrap(),
            Some(250.0)
        );
        for (json, want) in [
            (r#"{"ttlMs": -1}"#, "ttlMs must be a number >= 0, got -1"),
            (r#"{"ttl": 1}"#, "unknown option 'ttl'"),
        ] {
            let err = prefill_window_options(json).unwrap_err().to_string();
            assert!(err.contains(want), "{json}: {err}");
        }
    }

    #[test]
    fn bad_values_name_the_option_and_the_rule() {
        for (json, want) in [
            ("[]", "options must be a JSON object"),
            (r#"{"lru": 1}"#, "unknown option 'lru'"),
            (
                r#"{"lruCapacity": 0}"#,
                "lruCapacity must be an integer >= 1, got 0",
            ),
            (
                r#"{"maxContext": 1.5}"#,
                "maxContext must be an integer >= 1, got 1.5",
            ),
            (
                r#"{"kvCache": "q8"}"#,
                "kvCache must be 'f32' or 'f16', got \"q8\"",
            ),
            (
                r#"{"kvCache": 16}"#,
                "kvCache must be 'f32' or 'f16', got 16",
            ),
            (
                r#"{"memoryBudget": -1}"#,
                "memoryBudget must be an integer >= 1, got -1",
            ),
            (
                r#"{"memoryBudget": 1e300}"#,
                "memoryBudget must be an integer >= 1",
            ),
            (
                r#"{"prefixWindows": 65}"#,
                "prefixWindows must be an integer in [0, 64], got 65",
            ),
            (
                r#"{"prefixTtlMs": "x"}"#,
                "prefixTtlMs must be a number >= 0, got \"x\"",
            ),
            (
                r#"{"prefillWindows": 17}"#,
                "prefillWindows must be an integer in [0, 16], got 17",
            ),
            (
                r#"{"prefillWindowMaxTokens": 0}"#,
                "prefillWindowMaxTokens must be an integer >= 1, got 0",
            ),
            (r#"{"draftMode": 3}"#, "draftMode must be true, false or"),
            (
                r#"{"maxSequences": 65}"#,
                "maxSequences must be an integer in [1, 64], got 65",
            ),
            (
                r#"{"maxSequences": "all"}"#,
                "maxSequences must be an integer in [1, 64] or 'auto', got \"all\"",
            ),
            (
                r#"{"readConcurrency": 7}"#,
                "readConcurrency must be an integer in [1, 6], got 7",
            ),
            (
                r#"{"readConcurrency": 0}"#,
                "readConcurrency must be an integer in [1, 6], got 0",
            ),
        ] {
            let err = open_options(json).err().unwrap().to_string();
            assert!(err.contains(want), "{json}: {err}");
        }
    }
}
