//! A station's options (JSON, camelCase as in JS): what a layer station, a head station, the
//! coordinator and `planStations` are opened with. One parser, through `engine::options::Fields`
//! as the host's (`crate::options`), and one set of defaults, so that the stations, their
//! coordinator and the plan that sizes them agree on every value nobody set. Each error names
//! the option and the rule; an unknown key is refused.
//!
//! The stations and the coordinator must be given the same `maxContext`, `maxBatch` and
//! `maxConversations` (the coordinator plans its steps and keeps conversations for them).

use super::embedding::{EmbeddingOptions, DEFAULT_BUDGET, DEFAULT_CACHE_BYTES};
use super::head::{MAX_BUNDLE_PARTS, MAX_CANDIDATES, MAX_TOP_ROWS};
use crate::options::{kv_cache, MAX_CHAT_TEMPLATE_BYTES};
use crate::reader::{ReadConcurrency, ReadPolicy};
use engine::kv::KvType;
use engine::options::{to_usize, Fields, OptionsError};
use serde_json::Value;

/// How a coordinator is opened.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    /// Positions a conversation may hold (capped by the model's context length).
    pub context: usize,
    /// Positions per message.
    pub max_batch: usize,
    /// Slices the vocabulary is cut into, one per head station.
    pub head_shards: usize,
    pub embedding: EmbeddingOptions,
    /// Rows of its top-scoring ids each head station sends with its logits, when the embedding
    /// is sharded (at most [`MAX_TOP_ROWS`]).
    pub logit_rows: usize,
    /// Logits each head station answers a step with: its largest this many and a bound on the
    /// rest (the pick asks for more only when they do not settle it); 0: every logit.
    pub candidates: usize,
    /// Long reads at open come in pieces of this many bytes.
    pub piece: Option<u64>,
    /// A chat template used instead of the file's, resolved as a host resolves it.
    pub chat_template: Option<String>,
}

/// The stations' defaults.
impl Default for ModelOptions {
    fn default() -> Self {
        StationOptions::default().model_options()
    }
}

/// Every station's options, each with its default.
#[derive(Debug, Clone, PartialEq)]
pub struct StationOptions {
    /// Positions a conversation may hold (capped by the model's context length).
    pub max_context: usize,
    /// Positions per message: a step's bundle holds at most this many, every conversation's
    /// together.
    pub max_batch: usize,
    /// How a layer station's KV caches store keys and values: f16 (the default, as the host's
    /// servers use) halves them; the split computes what a whole host with the same KV type
    /// computes, bit for bit.
    pub kv_type: KvType,
    /// Conversations a layer station holds a KV cache for: the ones running and the ones kept
    /// for prefix replay.
    pub max_conversations: usize,
    /// Long spans (a station's part, the coordinator's table) are read in pieces of this many
    /// bytes, `read_policy.concurrency` at a time.
    pub max_read_bytes: u64,
    pub read_policy: ReadPolicy,
    /// Slices the vocabulary is cut into, one per head station (the coordinator's).
    pub head_shards: usize,
    /// Where the coordinator's embedding rows live (its table resident up to the budget).
    pub embedding: EmbeddingOptions,
    /// Rows of its top-scoring ids each head station sends with its logits, when the table is
    /// sharded.
    pub logit_rows: usize,
    /// Logits each head station answers a step with, as candidates (0: every logit).
    pub candidates: usize,
    /// Sequences the coordinator runs together, one bundle per step.
    pub max_sequences: usize,
    /// Conversations that ended which the coordinator keeps on the layer stations for prefix
    /// replay. With the ones running they must fit what a station holds, so a running one never
    /// pushes out another's KV cache.
    pub kept_conversations: usize,
    /// A chat template used instead of the file's (the coordinator's; see `chat_template`).
    pub chat_template: Option<String>,
}

/// 1: each row costs its bytes on every hop back (680 B × 5 hops for Gemma-3 on 4 + 4, with a
/// row from each shard): more rows spare a `/rows` round now and then, for far more bytes (the
/// Worker's README has the figures). More than one: a sampled part sends those of its top ids
/// within reach of its largest (`head::ROW_LEVELS`).
pub const DEFAULT_LOGIT_ROWS: usize = 1;

/// 64: greedy needs one, top-k sampling k (40 is common); sampling without top-k asks once
/// more when the first answer does not settle the softmax's sum (docs/stations.md).
pub const DEFAULT_CANDIDATES: usize = 64;

impl Default for StationOptions {
    fn default() -> Self {
        let max_conversations = 4;
        let max_sequences = auto_sequences(max_conversations, 64);
        StationOptions {
            max_context: 2048,
            max_batch: 64,
            kv_type: KvType::F16,
            max_conversations,
            max_read_bytes: 4 << 20,
            read_policy: ReadPolicy {
                timeout_ms: 30_000,
                ..ReadPolicy::default()
            },
            head_shards: 1,
            embedding: EmbeddingOptions {
                budget: DEFAULT_BUDGET,
                cache_bytes: DEFAULT_CACHE_BYTES,
            },
            logit_rows: DEFAULT_LOGIT_ROWS,
            candidates: DEFAULT_CANDIDATES,
            max_sequences,
            kept_conversations: max_conversations - max_sequences,
            chat_template: None,
        }
    }
}

/// `maxSequences: 'auto'` (the default): half of what a layer station holds, the other half
/// kept for prefix replay; at least 1, within a batch and a bundle.
fn auto_sequences(max_conversations: usize, max_batch: usize) -> usize {
    (max_conversations / 2)
        .clamp(1, MAX_BUNDLE_PARTS)
        .min(max_batch)
}

impl StationOptions {
    /// Parses a station's options object (absent or null keys keep their defaults).
    pub fn from_json(json: &str) -> Result<Self, OptionsError> {
        let json = if json.trim().is_empty() { "{}" } else { json };
        let v: Value =
            serde_json::from_str(json).map_err(|e| OptionsError::NotAnObject(e.to_string()))?;
        let f = Fields::new(&v, "")?;
        let o = Self::read(&f)?;
        f.finish()?;
        Ok(o)
    }

    /// Reads the station keys of `f` (the caller may read more, and finishes it).
    pub fn read(f: &Fields) -> Result<Self, OptionsError> {
        let d = StationOptions::default();
        let any = u64::MAX;
        let count = |name, min, default: usize| -> Result<usize, OptionsError> {
            Ok(f.integer_in(name, min, any)?.map_or(default, to_usize))
        };
        let max_context = count("maxContext", 1, d.max_context)?;
        let max_batch = count("maxBatch", 1, d.max_batch)?;
        let max_conversations = f
            .integer_in("maxConversations", 1, MAX_BUNDLE_PARTS as u64)?
            .map_or(d.max_conversations, to_usize);
        let concurrency =
            match f.integer_in("readConcurrency", 1, u64::from(ReadConcurrency::MAX))? {
                // In range: the reader of the options checked it.
                Some(n) => ReadConcurrency::new(n).unwrap_or_default(),
                None => d.read_policy.concurrency,
            };
        let max_sequences = match f.get("maxSequences") {
            None => auto_sequences(max_conversations, max_batch),
            Some(Value::String(s)) if s == "auto" => auto_sequences(max_conversations, max_batch),
            Some(v) => {
                let most = MAX_BUNDLE_PARTS.min(max_batch).min(max_conversations);
                let rule = format!(
                    "'auto' or an integer in [1, {most}] (at most maxBatch and maxConversations)"
                );
                match v.as_f64() {
                    Some(x) if x.fract() == 0.0 && x >= 1.0 && x <= most as f64 => x as usize,
                    _ => return Err(f.invalid("maxSequences", rule, v)),
                }
            }
        };
        let room = max_conversations - max_sequences;
        let kept_conversations = f
            .integer_in("keptConversations", 0, room as u64)
            .map_err(|e| match e {
                OptionsError::Invalid { name, got, .. } => OptionsError::Invalid {
                    name,
                    rule: format!("an integer in [0, {room}] (maxConversations less maxSequences)"),
                    got,
                },
                e => e,
            })?
            .map_or(room, to_usize);
        let o = StationOptions {
            max_context,
            max_batch,
            kv_type: kv_cache(f, d.kv_type)?,
            max_conversations,
            max_read_bytes: f
                .integer_in("maxReadBytes", 1, any)?
                .unwrap_or(d.max_read_bytes),
            read_policy: ReadPolicy {
                timeout_ms: f
                    .integer_in("readTimeoutMs", 0, any)?
                    .unwrap_or(d.read_policy.timeout_ms),
                concurrency,
                ..d.read_policy
            },
            head_shards: count("headShards", 1, d.head_shards)?,
            embedding: EmbeddingOptions {
                budget: f
                    .integer_in("embeddingBudget", 0, any)?
                    .unwrap_or(d.embedding.budget),
                cache_bytes: f
                    .integer_in("rowCacheBytes", 0, any)?
                    .unwrap_or(d.embedding.cache_bytes),
            },
            logit_rows: f
                .integer_in("logitRows", 0, MAX_TOP_ROWS as u64)?
                .map_or(d.logit_rows, to_usize),
            candidates: f
                .integer_in("candidates", 0, MAX_CANDIDATES as u64)?
                .map_or(d.candidates, to_usize),
            max_sequences,
            kept_conversations,
            chat_template: match f.get("chatTemplate") {
                None => None,
                Some(Value::String(t)) if t.len() <= MAX_CHAT_TEMPLATE_BYTES => Some(t.clone()),
                Some(v) => {
                    let rule = format!("a string of at most {MAX_CHAT_TEMPLATE_BYTES} bytes");
                    return Err(f.invalid("chatTemplate", rule, v));
                }
            },
        };
        Ok(o)
    }

    /// How the coordinator opens its model.
    pub fn model_options(&self) -> ModelOptions {
        ModelOptions {
            context: self.max_context,
            max_batch: self.max_batch,
            head_shards: self.head_shards,
            embedding: self.embedding,
            logit_rows: self.logit_rows,
            candidates: self.candidates,
            piece: Some(self.max_read_bytes),
            chat_template: self.chat_template.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_one_set() {
        let d = StationOptions::from_json("").unwrap();
        assert_eq!(d, StationOptions::default());
        assert_eq!(d.kv_type, KvType::F16);
        assert_eq!(
            (d.max_conversations, d.max_sequences, d.kept_conversations),
            (4, 2, 2)
        );
        assert_eq!((d.max_context, d.max_batch, d.logit_rows), (2048, 64, 1));
        let m = d.model_options();
        assert_eq!((m.context, m.max_batch, m.logit_rows), (2048, 64, 1));
        assert_eq!(ModelOptions::default().logit_rows, d.logit_rows);
    }

    #[test]
    fn every_option_is_read() {
        let o = StationOptions::from_json(
            r#"{"maxContext": 512, "maxBatch": 8, "kvCache": "f32", "maxConversations": 8,
                "maxReadBytes": 65536, "readTimeoutMs": 0, "readConcurrency": 6, "headShards": 3,
                "embeddingBudget": 0, "rowCacheBytes": 1024, "logitRows": 4, "maxSequences": 4,
                "keptConversations": 3, "chatTemplate": "T"}"#,
        )
        .unwrap();
        assert_eq!(
            (o.max_context, o.max_batch, o.kv_type),
            (512, 8, KvType::F32)
        );
        assert_eq!((o.max_conversations, o.max_read_bytes), (8, 65536));
        assert_eq!(
            (o.read_policy.timeout_ms, o.read_policy.concurrency.get()),
            (0, 6)
        );
        assert_eq!(
            (o.head_shards, o.embedding.budget, o.embedding.cache_bytes),
            (3, 0, 1024)
        );
        assert_eq!(
            (o.logit_rows, o.max_sequences, o.kept_conversations),
            (4, 4, 3)
        );
        assert_eq!(o.chat_template.as_deref(), Some("T"));
        // 'auto' and an absent count: half of what a station holds, the rest kept.
        let auto = StationOptions::from_json(r#"{"maxConversations": 8, "maxSequences": "auto"}"#)
            .unwrap();
        assert_eq!((auto.max_sequences, auto.kept_conversations), (4, 4));
        let one = StationOptions::from_json(r#"{"maxConversations": 1}"#).unwrap();
        assert_eq!((one.max_sequences, one.kept_conversations), (1, 0));
        let batch = StationOptions::from_json(r#"{"maxConversations": 8, "maxBatch": 2}"#).unwrap();
        assert_eq!((batch.max_sequences, batch.kept_conversations), (2, 6));
    }

    #[test]
    fn bad_values_name_the_option_and_the_rule() {
        for (json, want) in [
            ("[]", "options must be a JSON object"),
            (r#"{"lruCapacity": 4}"#, "unknown option 'lruCapacity'"),
            (
                r#"{"maxContext": 0}"#,
                "maxContext must be an integer >= 1, got 0",
            ),
            (
                r#"{"maxBatch": "64"}"#,
                "maxBatch must be an integer >= 1, got \"64\"",
            ),
            (
                r#"{"kvCache": "q8"}"#,
                "kvCache must be 'f32' or 'f16', got \"q8\"",
            ),
            (
                r#"{"maxConversations": 0}"#,
                "maxConversations must be an integer in [1, 64], got 0",
            ),
            (
                r#"{"readConcurrency": 7}"#,
                "readConcurrency must be an integer in [1, 6], got 7",
            ),
            (
                r#"{"headShards": 0}"#,
                "headShards must be an integer >= 1, got 0",
            ),
            (
                r#"{"logitRows": 65}"#,
                "logitRows must be an integer in [0, 64], got 65",
            ),
            (
                r#"{"maxSequences": 5}"#,
                "maxSequences must be 'auto' or an integer in [1, 4] (at most maxBatch and \
                 maxConversations), got 5",
            ),
            (
                r#"{"maxSequences": "all"}"#,
                "maxSequences must be 'auto' or an integer in [1, 4]",
            ),
            (
                r#"{"maxSequences": 3, "keptConversations": 2}"#,
                "keptConversations must be an integer in [0, 1] (maxConversations less \
                 maxSequences), got 2",
            ),
            (
                r#"{"chatTemplate": 1}"#,
                "chatTemplate must be a string of at most",
            ),
        ] {
            let e = StationOptions::from_json(json).unwrap_err();
            assert!(e.to_string().contains(want), "{json}: {e}");
            let named = crate::error::HostError::from(e).param().map(str::to_string);
            if json.starts_with("{\"") && !json.contains("lruCapacity") {
                assert!(
                    named.as_ref().is_some_and(|n| json.contains(n)),
                    "{json}: {named:?}"
                );
            }
        }
    }
}
