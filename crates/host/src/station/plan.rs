//! How many stations a model needs so that every isolate fits a memory budget, worked out from
//! the knot index alone (no tensor is read): the fewest layer stations and the fewest head
//! stations such that each station's planned bytes, and the coordinator's, are within the
//! budget. Layers are dealt to stations as [`placement`](super::placement) deals them (21
//! virtual shards), the vocabulary cut as [`vocab_slices`] cuts it, so the plan is the split the
//! Worker then runs.
//!
//! Each station is counted the way [`crate::memory`] counts a whole host: the bytes of the file
//! it reads and keeps, its KV cache holding the whole context for every conversation it keeps,
//! the activations of its largest batch, its logits, the buffers a message and a read take,
//! and [`FIXED_OVERHEAD`]. Layer counts and vocabulary slices only grow a station, so the
//! smallest counts that fit are found by trying each count in turn.

use std::ops::Range;

use engine::kv::{KvShape, KvType};
use engine::model::ConfigExt;
use engine::options::{Fields, OptionsError};
use engine::{EngineError, ResidentLayout, Session};
use knot::{Knot, ModelConfig};
use serde::Serialize;
use serde_json::Value;

use super::gather::vocab_slices;
use super::options::StationOptions;
use super::placement::{layer_ranges, VIRTUAL_SHARDS};
use super::wire::HEADER_BYTES;
use crate::error::ErrorCode;
use crate::memory::{CONSTRAINT_BYTES_PER_TOKEN, FIXED_OVERHEAD, TOKENIZER_BYTES_PER_BLOB_BYTE};

/// The most head stations a plan tries: past this, each station's fixed part (overhead, the
/// output norm, a message) is what is over the budget, not its slice of the LM head.
pub const MAX_HEAD_STATIONS: usize = 64;

/// What a plan is for besides the file. The defaults are the stations' own
/// (`wasm/station.rs`): 2048 positions, an f32 KV cache, 64 positions per message, 4
/// conversations kept, 4 MiB reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StationInput {
    /// Bytes each isolate's wasm may take.
    pub budget: u64,
    /// Positions each conversation may hold (capped by the model's context length).
    pub context: usize,
    pub kv_type: KvType,
    /// Positions per message (the stations' largest batch).
    pub max_batch: usize,
    /// Conversations a layer station keeps a KV cache for.
    pub conversations: usize,
    /// The longest single read (a station's weights come in pieces of this size).
    pub max_read_bytes: u64,
    /// Pieces of a span in flight at once (each a buffer until it is copied into the span).
    pub read_concurrency: u64,
    /// The coordinator holds the embedding table whole when it is at most this many bytes, and
    /// otherwise an LRU of rows of `row_cache_bytes` (station/embedding.rs).
    pub embedding_budget: u64,
    pub row_cache_bytes: u64,
}

impl StationInput {
    /// A plan for `budget` with the stations' defaults.
    pub fn new(budget: u64) -> Self {
        Self::of(budget, &StationOptions::default())
    }

    /// A plan for `budget` of stations opened with `o`.
    pub fn of(budget: u64, o: &StationOptions) -> Self {
        StationInput {
            budget,
            context: o.max_context,
            kv_type: o.kv_type,
            max_batch: o.max_batch,
            conversations: o.max_conversations,
            max_read_bytes: o.max_read_bytes,
            read_concurrency: o.read_policy.concurrency.get() as u64,
            embedding_budget: o.embedding.budget,
            row_cache_bytes: o.embedding.cache_bytes,
        }
    }

    /// The read buffers in flight while a span of `span` bytes comes in.
    fn read_buffers(&self, span: u64) -> u64 {
        self.max_read_bytes
            .saturating_mul(self.read_concurrency)
            .min(span)
    }
}

/// Parses `planStations`' options object: `memoryBudget` (bytes, required) and the stations'
/// own options (`super::options`: `maxContext`, `kvCache`, `maxBatch`, `maxConversations`,
/// `maxReadBytes`, …), with their defaults; any other key is refused.
pub fn plan_options(json: &str) -> Result<StationInput, OptionsError> {
    let v: Value =
        serde_json::from_str(json).map_err(|e| OptionsError::NotAnObject(e.to_string()))?;
    let f = Fields::new(&v, "")?;
    let budget = f
        .integer_in("memoryBudget", 1, u64::MAX)?
        .ok_or_else(|| f.invalid("memoryBudget", "an integer >= 1 (bytes)", &Value::Null))?;
    let o = StationOptions::read(&f)?;
    f.finish()?;
    Ok(StationInput::of(budget, &o))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StationKind {
    /// The Worker serving the routes: tokenizer, decode loop, embedding rows.
    Coordinator,
    /// A contiguous range of layers and their KV caches.
    Layers,
    /// A slice of the LM head's rows.
    Head,
}

/// What one station holds at most (bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StationPlan {
    pub kind: StationKind,
    /// A layer station's layers, `[start, end)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<[usize; 2]>,
    /// A head station's rows of the vocabulary, `[start, end)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<[usize; 2]>,
    /// The file's bytes it reads and keeps (layers, or the output norm and its LM head rows).
    pub weights: u64,
    /// The tokenizer blob, the parsed tokenizer and COLTRANE's vocabulary index (coordinator).
    pub tokenizer: u64,
    /// Every kept conversation's KV cache holding the whole context (layer stations).
    pub kv_cache: u64,
    /// Activations of the largest batch, the messages in and out, one read's buffer.
    pub activations: u64,
    /// Logits: the coordinator's whole vocabulary (the answers and their join), a head's slice.
    pub logits: u64,
    pub overhead: u64,
    pub total: u64,
}

impl StationPlan {
    fn new(kind: StationKind) -> Self {
        StationPlan {
            kind,
            layers: None,
            rows: None,
            weights: 0,
            tokenizer: 0,
            kv_cache: 0,
            activations: 0,
            logits: 0,
            overhead: FIXED_OVERHEAD,
            total: 0,
        }
    }

    fn summed(mut self) -> Self {
        self.total = [
            self.weights,
            self.tokenizer,
            self.kv_cache,
            self.activations,
            self.logits,
            self.overhead,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b));
        self
    }
}

/// The smallest split whose every isolate fits the budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StationLayout {
    /// Layer stations and head stations.
    pub layers: usize,
    pub heads: usize,
    pub budget: u64,
    /// The context each station is planned for.
    pub context: usize,
    /// The layer stations in order, then the head stations, then the coordinator.
    pub stations: Vec<StationPlan>,
}

impl StationLayout {
    /// The station that takes the most.
    pub fn largest(&self) -> Option<&StationPlan> {
        self.stations.iter().max_by_key(|s| s.total)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(
        "the coordinator alone needs {} (tokenizer {}, logits {}), over the budget of {}",
        shown(.needs), shown(.tokenizer), shown(.logits), shown(.budget)
    )]
    Coordinator {
        needs: u64,
        tokenizer: u64,
        logits: u64,
        budget: u64,
    },
    #[error(
        "no split into layer stations fits the budget of {}: at {stations} stations (the most \
         for {n_layers} layers) the one running layers {start}..{end} needs {}",
        shown(.budget), shown(.needs)
    )]
    Layers {
        stations: usize,
        n_layers: usize,
        start: usize,
        end: usize,
        needs: u64,
        budget: u64,
    },
    #[error(
        "no split into head stations fits the budget of {}: at {stations} stations each \
         still needs up to {}",
        shown(.budget), shown(.needs)
    )]
    Heads {
        stations: usize,
        needs: u64,
        budget: u64,
    },
}

impl PlanError {
    /// The code this failure carries across the JS boundary.
    pub fn code(&self) -> ErrorCode {
        match self {
            PlanError::Options(_) => ErrorCode::InvalidOption,
            PlanError::Engine(_) => ErrorCode::InvalidModel,
            PlanError::Coordinator { .. } | PlanError::Layers { .. } | PlanError::Heads { .. } => {
                ErrorCode::OverBudget
            }
        }
    }
}

/// "12.3 MiB".
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// [`mib`] of a field, as an error message gets it.
fn shown(bytes: impl std::borrow::Borrow<u64>) -> String {
    mib(*bytes.borrow())
}

/// The fewest layer and head stations of `knot` whose every station (and the coordinator) fits
/// `input.budget`, with what each holds.
pub fn plan_stations(knot: &Knot, input: &StationInput) -> Result<StationLayout, PlanError> {
    let cfg = &knot.meta.config;
    cfg.validate()?;
    let context = input.context.clamp(1, cfg.context_length.max(1));
    let input = StationInput {
        context,
        max_batch: input.max_batch.clamp(1, context),
        conversations: input.conversations.max(1),
        ..*input
    };
    let budget = input.budget;

    let coordinator = coordinator_plan(knot, &input);
    if coordinator.total > budget {
        return Err(PlanError::Coordinator {
            needs: coordinator.total,
            tokenizer: coordinator.tokenizer,
            logits: coordinator.logits,
            budget,
        });
    }

    let n_layers = knot.n_layers();
    let mut layers = None;
    let mut over = None;
    for count in 1..=VIRTUAL_SHARDS.min(n_layers) {
        // A count that would leave a station without layers is no split.
        let Ok(ranges) = layer_ranges(n_layers, count) else {
            continue;
        };
        let plans: Vec<StationPlan> = ranges
            .iter()
            .map(|r| layer_plan(knot, r.clone(), &input))
            .collect();
        match plans.iter().find(|p| p.total > budget) {
            None => {
                layers = Some(plans);
                break;
            }
            Some(p) => over = Some((count, p.clone())),
        }
    }
    let layers = match (layers, over) {
        (Some(plans), _) => plans,
        (None, over) => {
            let (stations, p) = over.unwrap_or((0, StationPlan::new(StationKind::Layers)));
            let [start, end] = p.layers.unwrap_or_default();
            return Err(PlanError::Layers {
                stations,
                n_layers,
                start,
                end,
                needs: p.total,
                budget,
            });
        }
    };

    let resident = ResidentLayout::locate(cfg, &knot.resident_tensors())?;
    let vocab = resident.output.rows;
    let mut heads = None;
    let mut over = (0, 0);
    for count in 1..=MAX_HEAD_STATIONS.min(vocab) {
        let plans: Vec<StationPlan> = vocab_slices(vocab, count)
            .into_iter()
            .map(|rows| head_plan(cfg, &resident, rows, &input))
            .collect();
        let most = plans.iter().map(|p| p.total).max().unwrap_or(0);
        if most <= budget {
            heads = Some(plans);
            break;
        }
        over = (count, most);
    }
    let Some(heads) = heads else {
        return Err(PlanError::Heads {
            stations: over.0,
            needs: over.1,
            budget,
        });
    };

    let (n_layer_stations, n_head_stations) = (layers.len(), heads.len());
    let mut stations = layers;
    stations.extend(heads);
    stations.push(coordinator);
    Ok(StationLayout {
        layers: n_layer_stations,
        heads: n_head_stations,
        budget,
        context,
        stations,
    })
}

/// The bytes of one message of `rows` positions of hidden states (f32, the widest on the wire).
fn message_bytes(cfg: &ModelConfig, rows: usize) -> u64 {
    (rows as u64)
        .saturating_mul(cfg.dim as u64)
        .saturating_mul(4)
        .saturating_add(HEADER_BYTES as u64 + 4)
}

/// A layer station running `layers`: their span of the file (read in one buffer, a piece at a
/// time), a KV cache per kept conversation, the activations of a message's positions, and the
/// message coming in and going out (each as bytes and as values).
fn layer_plan(knot: &Knot, layers: Range<usize>, input: &StationInput) -> StationPlan {
    let cfg = &knot.meta.config;
    let span = match (
        knot.layer_range(layers.start),
        layers.end.checked_sub(1).and_then(|l| knot.layer_range(l)),
    ) {
        (Some(first), Some(last)) => last.end.saturating_sub(first.start),
        _ => 0,
    };
    let windows: Vec<Option<usize>> = layers
        .clone()
        .map(|l| cfg.sliding_window.filter(|_| cfg.is_local_layer(l)))
        .collect();
    let shape = KvShape {
        n_layers: layers.len(),
        kv_dim: cfg.kv_dim(),
        max_positions: input.context,
        kv_type: input.kv_type,
    };
    let kv = u64::try_from(shape.bytes_at(input.context, &windows)).unwrap_or(u64::MAX);
    let session = Session::memory(cfg, input.context, input.kv_type, input.max_batch, 1);
    let message = message_bytes(cfg, input.max_batch);
    StationPlan {
        layers: Some([layers.start, layers.end]),
        weights: span,
        kv_cache: kv.saturating_mul(input.conversations as u64),
        activations: session
            .activations
            .saturating_add(message.saturating_mul(4))
            .saturating_add(input.read_buffers(span)),
        ..StationPlan::new(StationKind::Layers)
    }
    .summed()
}

/// A head station over vocabulary rows `rows`: the output norm and those rows of the LM head,
/// the message coming in (bytes and values), the final norm's buffers and the slice's logits.
fn head_plan(
    cfg: &ModelConfig,
    resident: &ResidentLayout,
    rows: Range<usize>,
    input: &StationInput,
) -> StationPlan {
    let out = &resident.output;
    let row_bytes = ((out.bytes.end - out.bytes.start) / out.rows.max(1)) as u64;
    let norm = (resident.output_norm.bytes.end - resident.output_norm.bytes.start) as u64;
    let mut weights = row_bytes.saturating_mul(rows.len() as u64) + norm;
    // Untied embeddings: the head also holds its slice of the embedding table (it hands rows
    // to the coordinator); tied, those rows are the LM head's own.
    let embd = &resident.token_embd;
    if embd.bytes != out.bytes {
        let embd_row = ((embd.bytes.end - embd.bytes.start) / embd.rows.max(1)) as u64;
        weights = weights.saturating_add(embd_row.saturating_mul(rows.len() as u64));
    }
    let dim = cfg.dim as u64;
    // norm_w and xb (f32), and the quantized activations of one row (i16 + two f32 per 32).
    let head = dim * 4 * 2 + dim * 9 / 4;
    StationPlan {
        rows: Some([rows.start, rows.end]),
        weights,
        activations: message_bytes(cfg, input.max_batch)
            .saturating_mul(2)
            .saturating_add(head)
            .saturating_add(input.read_buffers(weights)),
        logits: rows.len() as u64 * 4,
        ..StationPlan::new(StationKind::Head)
    }
    .summed()
}

/// The coordinator: the tokenizer (blob, parsed, COLTRANE's index once a constraint is used),
/// the embedding (the table, or a cache of rows), the logits of the whole vocabulary twice (the
/// head stations' answers and their join), and a message of embedded rows.
fn coordinator_plan(knot: &Knot, input: &StationInput) -> StationPlan {
    let cfg = &knot.meta.config;
    let tok = knot.tokenizer_range();
    let blob = tok.end - tok.start;
    let tokenizer = blob
        .saturating_mul(1 + TOKENIZER_BYTES_PER_BLOB_BYTE)
        .saturating_add((cfg.vocab_size as u64).saturating_mul(CONSTRAINT_BYTES_PER_TOKEN));
    let table = ResidentLayout::locate(cfg, &knot.resident_tensors())
        .map(|r| (r.token_embd.bytes.end - r.token_embd.bytes.start) as u64)
        .unwrap_or(0);
    // The whole table when it fits the embedding budget (read at open, its pieces in flight),
    // otherwise the row cache.
    let embedding = match table <= input.embedding_budget {
        true => table.saturating_add(input.read_buffers(table)),
        false => input.row_cache_bytes,
    };
    StationPlan {
        tokenizer,
        weights: embedding,
        activations: message_bytes(cfg, input.max_batch).saturating_mul(2),
        logits: (cfg.vocab_size as u64).saturating_mul(4 * 2),
        ..StationPlan::new(StationKind::Coordinator)
    }
    .summed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use knot::ReadOptions;

    const MIB: u64 = 1 << 20;

    fn index(path: &std::path::Path) -> Knot {
        let bytes = std::fs::read(path).unwrap();
        Knot::parse_prefix(&bytes, bytes.len() as u64, &ReadOptions::default()).unwrap()
    }

    /// The index of a real model, read from its first bytes only (what a Worker reads).
    fn model_index(rel: &str) -> Option<Knot> {
        let path = knot_suite::require_model(rel)?;
        use std::io::Read;
        let mut file = std::fs::File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        let mut head = vec![0u8; knot::FIXED_HEADER_LEN];
        file.read_exact(&mut head).unwrap();
        let prefix_len = Knot::prefix_len(&head, &ReadOptions::default()).unwrap();
        let mut prefix = vec![0u8; prefix_len as usize];
        std::io::Seek::rewind(&mut file).unwrap();
        file.read_exact(&mut prefix).unwrap();
        Some(Knot::parse_prefix(&prefix, len, &ReadOptions::default()).unwrap())
    }

    fn tiny(name: &str) -> Knot {
        index(&knot_suite::fixture(&format!("tiny/{name}")))
    }

    /// The sizes of a synthetic llama-shaped model (tied embeddings).
    struct Shape {
        n_layers: usize,
        dim: usize,
        ffn: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        vocab: usize,
        dtype: knot::DType,
    }

    /// The index of a synthetic model of `shape`: laid out by the knot writer, with no tensor
    /// bytes written (the planner reads the index only).
    fn synthetic(shape: &Shape) -> Knot {
        use knot::DType;
        let bytes = std::fs::read(knot_suite::fixture("tiny/llama-tied-f32.knot")).unwrap();
        let base = Knot::from_bytes(&bytes).unwrap();
        let tok = base.tokenizer_range();
        let tokenizer =
            Knot::parse_tokenizer(&bytes[tok.start as usize..tok.end as usize]).unwrap();
        let mut config = base.meta.config.clone();
        config.n_layers = shape.n_layers;
        config.dim = shape.dim;
        config.ffn_dim = shape.ffn;
        config.n_heads = shape.n_heads;
        config.n_kv_heads = shape.n_kv_heads;
        config.head_dim = shape.head_dim;
        config.rope_dim = shape.head_dim;
        config.vocab_size = shape.vocab;
        config.context_length = 8192;
        let mut b = knot::KnotBuilder::new("synthetic", "llama", config, tokenizer);
        let (d, f) = (shape.dim as u64, shape.ffn as u64);
        let (q, kv) = (
            (shape.n_heads * shape.head_dim) as u64,
            (shape.n_kv_heads * shape.head_dim) as u64,
        );
        b.add_tensor(
            "token_embd.weight",
            shape.dtype,
            vec![shape.vocab as u64, d],
        );
        b.add_tensor("output_norm.weight", DType::F32, vec![d]);
        for l in 0..shape.n_layers {
            let t = |n: &str| format!("blk.{l}.{n}.weight");
            b.add_tensor(t("attn_norm"), DType::F32, vec![d]);
            b.add_tensor(t("attn_q"), shape.dtype, vec![q, d]);
            b.add_tensor(t("attn_k"), shape.dtype, vec![kv, d]);
            b.add_tensor(t("attn_v"), shape.dtype, vec![kv, d]);
            b.add_tensor(t("attn_output"), shape.dtype, vec![d, q]);
            b.add_tensor(t("ffn_norm"), DType::F32, vec![d]);
            b.add_tensor(t("ffn_gate"), shape.dtype, vec![f, d]);
            b.add_tensor(t("ffn_up"), shape.dtype, vec![f, d]);
            b.add_tensor(t("ffn_down"), shape.dtype, vec![d, f]);
        }
        let plan = b.plan().unwrap();
        Knot::parse_prefix(plan.prefix(), plan.file_len(), &ReadOptions::default()).unwrap()
    }

    /// Every property a layout must have: each station within the budget, the layers covered
    /// once in order as placement deals them, the vocabulary covered once, and no smaller count
    /// of either kind fitting.
    fn check(knot: &Knot, input: &StationInput, layout: &StationLayout) {
        let n = knot.n_layers();
        assert!(layout.stations.iter().all(|s| s.total <= input.budget));
        let layers: Vec<_> = layout
            .stations
            .iter()
            .filter(|s| s.kind == StationKind::Layers)
            .map(|s| s.layers.unwrap())
            .collect();
        let want: Vec<_> = layer_ranges(n, layout.layers)
            .unwrap()
            .into_iter()
            .map(|r| [r.start, r.end])
            .collect();
        assert_eq!(layers, want);
        let rows: Vec<_> = layout
            .stations
            .iter()
            .filter(|s| s.kind == StationKind::Head)
            .map(|s| s.rows.unwrap())
            .collect();
        assert_eq!(rows.len(), layout.heads);
        assert_eq!(rows[0][0], 0);
        assert_eq!(rows.last().unwrap()[1], knot.meta.config.vocab_size);
        assert_eq!(
            layout.stations.last().unwrap().kind,
            StationKind::Coordinator
        );
        // Minimal: one station fewer of either kind does not fit.
        if layout.layers > 1 {
            let fewer = (1..layout.layers).all(|c| match layer_ranges(n, c) {
                Err(_) => true,
                Ok(rs) => rs
                    .into_iter()
                    .any(|r| layer_plan(knot, r, input).total > input.budget),
            });
            assert!(fewer, "fewer layer stations would fit");
        }
        if layout.heads > 1 {
            let cfg = &knot.meta.config;
            let resident = ResidentLayout::locate(cfg, &knot.resident_tensors()).unwrap();
            let one_fewer = vocab_slices(cfg.vocab_size, layout.heads - 1)
                .into_iter()
                .any(|r| head_plan(cfg, &resident, r, input).total > input.budget);
            assert!(one_fewer, "fewer head stations would fit");
        }
    }

    #[test]
    fn the_station_kv_caches_add_up_to_the_whole_models() {
        // Per-range KV, summed over any split, is what the engine plans for the whole model
        // (gemma3's fixture has sliding-window layers, whose rings count less).
        for name in ["llama-f32.knot", "gemma3-f32.knot"] {
            let knot = tiny(name);
            let cfg = &knot.meta.config;
            for kv_type in [KvType::F32, KvType::F16] {
                let input = StationInput {
                    context: 100,
                    kv_type,
                    conversations: 1,
                    ..StationInput::new(u64::MAX)
                };
                let whole = Session::memory(cfg, 100, kv_type, 1, 1).kv_cache;
                for count in 1..=knot.n_layers() {
                    let Ok(ranges) = layer_ranges(knot.n_layers(), count) else {
                        continue;
                    };
                    let sum: u64 = ranges
                        .into_iter()
                        .map(|r| layer_plan(&knot, r, &input).kv_cache)
                        .sum();
                    assert_eq!(sum, whole, "{name} {kv_type:?} on {count} stations");
                }
                // Every kept conversation has one.
                let three = StationInput {
                    conversations: 3,
                    ..input
                };
                let r = 0..knot.n_layers();
                assert_eq!(
                    layer_plan(&knot, r.clone(), &three).kv_cache,
                    3 * layer_plan(&knot, r, &input).kv_cache
                );
            }
        }
    }

    #[test]
    fn weights_are_the_files_spans_split_without_loss() {
        let knot = tiny("llama-tied-f32.knot");
        let cfg = &knot.meta.config;
        let input = StationInput::new(u64::MAX);
        let span = |l| knot.layer_range(l).unwrap();
        let all = span(knot.n_layers() - 1).end - span(0).start;
        let resident = ResidentLayout::locate(cfg, &knot.resident_tensors()).unwrap();
        let out = resident.output.bytes.end - resident.output.bytes.start;
        let norm = resident.output_norm.bytes.end - resident.output_norm.bytes.start;
        for count in 1..=4 {
            // Two layers: one or two stations.
            if let Ok(ranges) = layer_ranges(knot.n_layers(), count) {
                let layers: u64 = ranges
                    .into_iter()
                    .map(|r| layer_plan(&knot, r, &input).weights)
                    .sum();
                assert_eq!(layers, all);
            }
            let slices = vocab_slices(cfg.vocab_size, count);
            let heads: u64 = slices
                .iter()
                .map(|r| head_plan(cfg, &resident, r.clone(), &input).weights)
                .sum();
            assert_eq!(heads, (out + count * norm) as u64);
        }
    }

    #[test]
    fn the_smallest_layout_that_fits_and_nothing_smaller() {
        let knot = tiny("gemma3-f32.knot");
        // Unbounded: one of each.
        // The fixture's whole context (128 positions).
        let input = StationInput {
            context: 128,
            ..StationInput::new(u64::MAX)
        };
        let one = plan_stations(&knot, &input).unwrap();
        assert_eq!((one.layers, one.heads, one.stations.len()), (1, 1, 3));
        check(&knot, &input, &one);
        // A budget just under the one layer station's plan: two (or more) are needed, and the
        // head still fits one.
        let whole = one.stations[0].total;
        let head = one.stations[1].total;
        let coordinator = one.stations[2].total;
        assert!(whole > head.max(coordinator), "{one:?}");
        let tight = StationInput {
            budget: whole - 1,
            ..input
        };
        let split = plan_stations(&knot, &tight).unwrap();
        assert!(split.layers >= 2, "{split:?}");
        check(&knot, &tight, &split);
        // Every budget from the coordinator's up: a layout that fits and is the smallest, or an
        // error that says which kind cannot fit.
        for budget in (coordinator..whole + 1).step_by(((whole - coordinator) / 40).max(1) as usize)
        {
            let input = StationInput { budget, ..input };
            match plan_stations(&knot, &input) {
                Ok(layout) => check(&knot, &input, &layout),
                Err(e @ (PlanError::Layers { .. } | PlanError::Heads { .. })) => {
                    assert_eq!(e.code(), ErrorCode::OverBudget);
                }
                Err(e) => panic!("{budget}: {e}"),
            }
        }
    }

    #[test]
    fn budgets_nothing_fits_say_what_is_over() {
        let knot = tiny("llama-f32.knot");
        let input = StationInput::new(1 << 20);
        let e = plan_stations(&knot, &input).unwrap_err();
        assert!(matches!(e, PlanError::Coordinator { .. }), "{e}");
        assert_eq!(e.code(), ErrorCode::OverBudget);
        assert!(e.to_string().contains("the coordinator alone needs"), "{e}");
        // The coordinator fits, a station of one layer (with 16 conversations' KV caches) does
        // not: the error names the station.
        let coordinator = coordinator_plan(&knot, &input).total;
        let input = StationInput {
            budget: coordinator,
            context: 128,
            conversations: 16,
            ..input
        };
        let e = plan_stations(&knot, &input).unwrap_err();
        assert!(matches!(e, PlanError::Layers { .. }), "{e}");
        assert!(
            e.to_string().contains("no split into layer stations"),
            "{e}"
        );
    }

    #[test]
    fn options_are_checked_and_default_to_the_stations() {
        let o = plan_options(r#"{"memoryBudget": 100663296}"#).unwrap();
        assert_eq!(o, StationInput::new(96 * MIB));
        let o = plan_options(
            r#"{"memoryBudget": 1000, "maxContext": 512, "kvCache": "f16", "maxBatch": 8,
                "maxConversations": 2, "maxReadBytes": 65536, "readConcurrency": 6,
                "embeddingBudget": 0, "rowCacheBytes": 1024}"#,
        )
        .unwrap();
        assert_eq!(
            o,
            StationInput {
                budget: 1000,
                context: 512,
                kv_type: KvType::F16,
                max_batch: 8,
                conversations: 2,
                max_read_bytes: 65536,
                read_concurrency: 6,
                embedding_budget: 0,
                row_cache_bytes: 1024,
            }
        );
        for (json, want) in [
            (
                "{}",
                "memoryBudget must be an integer >= 1 (bytes), got null",
            ),
            (
                r#"{"memoryBudget": 0}"#,
                "memoryBudget must be an integer >= 1",
            ),
            (
                r#"{"memoryBudget": 1, "kvCache": "q8"}"#,
                "kvCache must be 'f32' or 'f16'",
            ),
            (
                r#"{"memoryBudget": 1, "maxConversations": 0}"#,
                "maxConversations must be an integer in [1, 64]",
            ),
            (
                r#"{"memoryBudget": 1, "readConcurrency": 7}"#,
                "readConcurrency must be an integer in [1, 6]",
            ),
            (
                r#"{"memoryBudget": 1, "lruCapacity": 4}"#,
                "unknown option 'lruCapacity'",
            ),
            ("[1]", "options must be a JSON object"),
        ] {
            let e = PlanError::from(plan_options(json).unwrap_err());
            assert_eq!(e.code(), ErrorCode::InvalidOption);
            assert!(e.to_string().contains(want), "{json}: {e}");
        }
    }

    #[test]
    fn a_large_vocabulary_splits_across_head_stations() {
        // Gemma-3-270M's embedding (262144 × 640, q8_0: 178 MB) on four small layers.
        let knot = synthetic(&Shape {
            n_layers: 4,
            dim: 640,
            ffn: 2048,
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 256,
            vocab: 262144,
            dtype: knot::DType::Q8_0,
        });
        // One piece in flight, as the figures below count.
        let input = StationInput {
            conversations: 1,
            read_concurrency: 1,
            ..StationInput::new(72 * MIB)
        };
        let layout = plan_stations(&knot, &input).unwrap();
        check(&knot, &input, &layout);
        // 640 / 32 × 34 = 680 bytes a row, 178257920 bytes of rows: a third of them (56.7 MiB)
        // with the overhead, a read's buffer and a message fit 72 MiB, half of them do not.
        assert_eq!((layout.layers, layout.heads), (1, 3), "{layout:#?}");
        let head = &layout.stations[1];
        assert_eq!(head.rows, Some([0, 87382]));
        assert_eq!(head.weights, 87382 * 680 + 640 * 4);
        assert_eq!(head.logits, 87382 * 4);
        // Its coordinator holds COLTRANE's index of 262144 tokens (32 MiB) on its own: a budget
        // of 32 MiB fits nothing.
        let e = plan_stations(&knot, &StationInput::new(32 * MIB)).unwrap_err();
        assert!(matches!(e, PlanError::Coordinator { .. }), "{e}");
    }

    #[test]
    fn many_layers_split_across_layer_stations() {
        // A 0.6B-shaped model: 21 layers (one per virtual shard) of 2048 wide, q8_0, a
        // 32000-token vocabulary.
        let knot = synthetic(&Shape {
            n_layers: 21,
            dim: 2048,
            ffn: 4096,
            n_heads: 32,
            n_kv_heads: 4,
            head_dim: 64,
            vocab: 32000,
            dtype: knot::DType::Q8_0,
        });
        let input = StationInput {
            kv_type: KvType::F16,
            conversations: 1,
            read_concurrency: 1,
            ..StationInput::new(96 * MIB)
        };
        let layout = plan_stations(&knot, &input).unwrap();
        check(&knot, &input, &layout);
        assert_eq!(layout.heads, 1, "{layout:#?}");
        // A layer: q and o 2048 × 2048, k and v 256 × 2048, gate, up and down 4096 × 2048, all
        // q8_0 (34 bytes per 32), and two norms: 35 MiB; f16 over 2048 positions, 2 MiB of KV
        // cache. Two layers fit 96 MiB with the buffers, three do not: 11 stations (21 shards
        // dealt 2 or 1).
        assert_eq!(layout.layers, 11, "{layout:#?}");
        let layer = knot.layer_range(0).unwrap();
        let per_layer = layer.end - layer.start;
        assert!(per_layer > 34 * MIB && per_layer < 36 * MIB, "{per_layer}");
        for s in layout
            .stations
            .iter()
            .filter(|s| s.kind == StationKind::Layers)
        {
            let [a, b] = s.layers.unwrap();
            assert!(b - a <= 2, "{s:?}");
            assert_eq!(s.kv_cache, (b - a) as u64 * 2048 * 256 * 2 * 2, "{s:?}");
        }
        // A budget not even one layer fits is refused naming the station that is over.
        let e = plan_stations(
            &knot,
            &StationInput {
                budget: 40 * MIB,
                ..input
            },
        )
        .unwrap_err();
        assert!(matches!(e, PlanError::Layers { .. }), "{e}");
        assert!(
            e.to_string().contains("no split into layer stations"),
            "{e}"
        );
    }

    #[test]
    fn smollm2_splits_across_stations_at_the_workers_budget() {
        let Some(knot) = model_index("SmolLM2-135M-Instruct.Q4_1.knot") else {
            return;
        };
        // The single Worker's settings: 96 MiB, f16, 2048 positions, one conversation.
        let input = StationInput {
            kv_type: KvType::F16,
            conversations: 1,
            ..StationInput::new(96 * MIB)
        };
        let layout = plan_stations(&knot, &input).unwrap();
        check(&knot, &input, &layout);
        assert_eq!((layout.layers, layout.heads), (2, 1), "{layout:#?}");
        // 30 layers of 2216448 bytes; 16 of them on the first station.
        assert_eq!(layout.stations[0].layers, Some([0, 16]));
        assert_eq!(layout.stations[0].weights, 16 * 2216448);
        // f16, 2048 positions, 192-wide K and V, 16 layers.
        assert_eq!(layout.stations[0].kv_cache, 16 * 2048 * 192 * 2 * 2);
        // The head: the whole q8_0 embedding (tied) and the output norm.
        assert_eq!(layout.stations[2].weights, 30081024 + 2304);
        // The stations' own defaults (f16, 4 conversations) need more layer stations.
        let stations = StationInput::new(96 * MIB);
        let layout = plan_stations(&knot, &stations).unwrap();
        check(&knot, &stations, &layout);
        assert!(layout.layers > 2, "{layout:#?}");
    }

    #[test]
    fn gemma3_needs_head_stations_for_its_embedding() {
        let Some(knot) = model_index("gemma-3-270m.knot") else {
            return;
        };
        let input = StationInput::new(96 * MIB);
        let layout = plan_stations(&knot, &input).unwrap();
        check(&knot, &input, &layout);
        // 178 MB of q8_0 rows: a half (89 MB) and the 16 MiB of pieces in flight while it is
        // read (4 of 4 MiB) do not fit a 96 MiB station, a third does; 18 layers with f16 KV
        // caches for 4 conversations of 2048 positions take 2 stations (9 layers each).
        assert_eq!((layout.layers, layout.heads), (2, 3), "{layout:#?}");
        assert_eq!(layout.stations[2].rows, Some([0, 87382]));
        // One piece at a time, two halves fit.
        let one = StationInput {
            read_concurrency: 1,
            ..input
        };
        let layout = plan_stations(&knot, &one).unwrap();
        assert_eq!((layout.layers, layout.heads), (2, 2), "{layout:#?}");
    }
}
