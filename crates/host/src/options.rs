//! `HostShim.open`'s options, as the JSON the package sends: parsed and checked here (natively
//! testable), each error naming the option and the rule.

use crate::host::HostOptions;
use engine::kv::KvType;
use serde_json::{Map, Value};

/// The options, camelCase as in JS (`onProgress` and the source travel separately).
const OPEN_OPTIONS: &[&str] = &[
    "lruCapacity",
    "maxResidentBytes",
    "prefetchDepth",
    "draftMode",
    "readTimeoutMs",
    "readRetries",
    "readBackoffMs",
    "kvCache",
    "maxContext",
    "maxBatch",
    "memoryBudget",
    "prefixWindows",
    "prefixTtlMs",
    "maxReadBytes",
];

/// The most prefix windows a host keeps (each holds a whole KV cache).
pub const MAX_PREFIX_WINDOWS: u64 = 16;

/// What a JS number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

fn invalid(name: &str, rule: &str, v: &Value) -> String {
    format!("{name} must be {rule}, got {v}")
}

/// An integer in `[min, max]` (a JS number: at most 2^53), or None when absent or null.
fn integer(m: &Map<String, Value>, name: &str, min: u64, max: u64) -> Result<Option<u64>, String> {
    let Some(v) = m.get(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let rule = || match max {
        u64::MAX => format!("an integer >= {min}"),
        _ => format!("an integer in [{min}, {max}]"),
    };
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x >= min as f64 && x <= MAX_SAFE && x <= max as f64 => {
            Ok(Some(x as u64))
        }
        _ => Err(invalid(name, &rule(), v)),
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Parses the options object into [`HostOptions`] (absent keys keep their defaults).
pub fn open_options(json: &str) -> Result<HostOptions, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("options: {e}"))?;
    let m = v
        .as_object()
        .ok_or_else(|| format!("options must be an object, got {v}"))?;
    if let Some(k) = m.keys().find(|k| !OPEN_OPTIONS.contains(&k.as_str())) {
        return Err(format!("unknown option '{k}'"));
    }
    let d = HostOptions::default();
    let p = d.read_policy;
    let draft = match m.get("draftMode").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => engine::decode::draft_from_value(v).map_err(|e| e.to_string())?,
    };
    let kv_type = match m.get("kvCache").filter(|v| !v.is_null()) {
        None => d.kv_type,
        Some(Value::String(s)) => KvType::parse(s)
            .ok_or_else(|| invalid("kvCache", "'f32' or 'f16'", &Value::String(s.clone())))?,
        Some(other) => return Err(invalid("kvCache", "'f32' or 'f16'", other)),
    };
    let prefix_ttl_ms = match m.get("prefixTtlMs").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x >= 0.0 => Some(x),
            _ => return Err(invalid("prefixTtlMs", "a number >= 0", v)),
        },
    };
    let prefetch_depth = integer(m, "prefetchDepth", 0, u64::MAX)?.map(to_usize);
    Ok(HostOptions {
        lru_capacity: integer(m, "lruCapacity", 1, u64::MAX)?.map_or(d.lru_capacity, to_usize),
        max_resident_bytes: integer(m, "maxResidentBytes", 1, u64::MAX)?,
        prefetch: prefetch_depth != Some(0),
        prefetch_depth,
        max_context: integer(m, "maxContext", 1, u64::MAX)?.map_or(d.max_context, to_usize),
        read: d.read,
        read_policy: crate::reader::ReadPolicy {
            timeout_ms: integer(m, "readTimeoutMs", 0, u64::MAX)?.unwrap_or(p.timeout_ms),
            retries: integer(m, "readRetries", 0, u64::MAX)?
                .map_or(p.retries, |r| u32::try_from(r).unwrap_or(u32::MAX)),
            backoff_ms: integer(m, "readBackoffMs", 0, u64::MAX)?.unwrap_or(p.backoff_ms),
        },
        draft,
        kv_type,
        max_batch: integer(m, "maxBatch", 1, u64::MAX)?.map(to_usize),
        memory_budget: integer(m, "memoryBudget", 1, u64::MAX)?,
        prefix_windows: integer(m, "prefixWindows", 1, MAX_PREFIX_WINDOWS)?
            .map_or(d.prefix_windows, to_usize),
        prefix_ttl_ms,
        max_read_bytes: integer(m, "maxReadBytes", 1, u64::MAX)?,
    })
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
            (KvType::F32, 1, None)
        );
        let o = open_options(
            r#"{"lruCapacity": 4, "maxResidentBytes": 1000, "prefetchDepth": 0,
                "draftMode": {"maxDraft": 4}, "readTimeoutMs": 0, "readRetries": 5,
                "readBackoffMs": 7, "kvCache": "f16", "maxContext": 2048, "maxBatch": 128,
                "memoryBudget": 100663296, "prefixWindows": 3, "prefixTtlMs": 15000,
                "maxReadBytes": 4194304}"#,
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
        // null is absent.
        assert_eq!(
            open_options(r#"{"kvCache": null}"#).unwrap().kv_type,
            KvType::F32
        );
    }

    #[test]
    fn bad_values_name_the_option_and_the_rule() {
        for (json, want) in [
            ("[]", "options must be an object"),
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
                r#"{"prefixWindows": 17}"#,
                "prefixWindows must be an integer in [1, 16], got 17",
            ),
            (
                r#"{"prefixTtlMs": "x"}"#,
                "prefixTtlMs must be a number >= 0, got \"x\"",
            ),
            (r#"{"draftMode": 3}"#, "draftMode must be true, false or"),
        ] {
            let err = open_options(json).err().unwrap();
            assert!(err.contains(want), "{json}: {err}");
        }
    }
}
