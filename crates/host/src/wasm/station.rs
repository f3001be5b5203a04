//! The stations' JS boundary: `WasmLayerStation` and `WasmHeadStation` (each in a Durable
//! Object of the Worker) and `WasmCoordinator` (in the Worker that serves the OpenAI routes).
//! Hidden states cross it as wire messages (`station::wire`), embedding rows and the logits they
//! ride with as rows messages (`station::rows`). Nothing here may panic: a panic aborts the wasm
//! instance, i.e. the station.

use std::cell::RefCell;
use std::rc::Rc;

use engine::decode::GenerateOptions;
use engine::KvType;
use js_sys::{Array, Promise, Uint32Array, Uint8Array};
use knot::ReadOptions;
use serde::Deserialize;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;

use super::convert::{chat_prompt, check_count, to_js};
use super::errors::{host_error, invalid_argument, js_error};
use super::source::JsSource;
use crate::error::ErrorCode;
use crate::reader::{ReadConcurrency, ReadPolicy, Reader};
use crate::station::coordinator::{
    replay_verdict, Conversation, Model, ModelOptions, Pick, PrefixTable,
};
use crate::station::embedding::{EmbeddingOptions, DEFAULT_BUDGET, DEFAULT_CACHE_BYTES};
use crate::station::gather::Answer;
use crate::station::head::MAX_BUNDLE_PARTS;
use crate::station::sequences::Sequences;
use crate::station::{
    open_index, placement, HeadShard, HeadStation, LayerShard, LayerStation, StationError,
};

/// A station's options (JSON), each with its default.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct StationOptions {
    max_context: usize,
    max_batch: usize,
    kv_cache: String,
    max_conversations: usize,
    /// Long spans are read in pieces of this many bytes (each R2 answer is a JS buffer).
    max_read_bytes: u64,
    read_timeout_ms: u64,
    head_shards: usize,
    /// Finished conversations the coordinator asks the stations to keep for prefix replay.
    kept_conversations: usize,
    /// Pieces of one long read in flight at once (1 to 6).
    read_concurrency: u64,
    /// The coordinator reads the embedding table whole at open when it is at most this many
    /// bytes; otherwise the head stations hand its rows over.
    embedding_budget: u64,
    /// Bytes of rows the coordinator keeps across requests when the table is sharded.
    row_cache_bytes: u64,
    /// Rows of its top-scoring ids each head station sends with its logits (sharded table).
    logit_rows: usize,
    /// Conversations the coordinator runs together (`admit` / `plan` / `message` / `pickStep`).
    max_sequences: usize,
}

impl Default for StationOptions {
    fn default() -> Self {
        StationOptions {
            max_context: 2048,
            max_batch: 64,
            kv_cache: "f32".into(),
            max_conversations: 4,
            max_read_bytes: 4 << 20,
            read_timeout_ms: 30_000,
            head_shards: 1,
            kept_conversations: 2,
            read_concurrency: ReadConcurrency::DEFAULT.get() as u64,
            embedding_budget: DEFAULT_BUDGET,
            row_cache_bytes: DEFAULT_CACHE_BYTES,
            logit_rows: ModelOptions::default().logit_rows,
            max_sequences: 1,
        }
    }
}

impl StationOptions {
    fn parse(json: &str) -> Result<Self, JsValue> {
        let o: StationOptions =
            serde_json::from_str(if json.trim().is_empty() { "{}" } else { json })
                .map_err(|e| js_error(ErrorCode::InvalidOption, format!("station options: {e}")))?;
        if o.max_context == 0 || o.max_batch == 0 || o.max_conversations == 0 {
            return Err(js_error(
                ErrorCode::InvalidOption,
                "station options: maxContext, maxBatch and maxConversations must be at least 1",
            ));
        }
        if !(1..=MAX_BUNDLE_PARTS).contains(&o.max_sequences) || o.max_sequences > o.max_batch {
            return Err(js_error(
                ErrorCode::InvalidOption,
                format!(
                    "station options: maxSequences must be in 1..={MAX_BUNDLE_PARTS} and at most \
                     maxBatch ({}), got {}",
                    o.max_batch, o.max_sequences
                ),
            ));
        }
        Ok(o)
    }

    fn reader(&self, source: JsValue) -> Result<Reader, JsValue> {
        let concurrency = ReadConcurrency::new(self.read_concurrency)
            .map_err(|e| js_error(ErrorCode::InvalidOption, format!("station options: {e}")))?;
        let policy = ReadPolicy {
            timeout_ms: self.read_timeout_ms,
            concurrency,
            ..ReadPolicy::default()
        };
        Ok(Reader::new(Rc::new(JsSource::new(source)?), policy))
    }

    fn kv_type(&self) -> Result<KvType, JsValue> {
        KvType::parse(&self.kv_cache).ok_or_else(|| {
            js_error(
                ErrorCode::InvalidOption,
                format!("kvCache must be f32 or f16, got {:?}", self.kv_cache),
            )
        })
    }
}

/// A station's failure: bad wire bytes or a batch the station cannot take are the caller's
/// arguments; the engine's failures keep their codes.
fn station_error(e: StationError) -> JsValue {
    match e {
        StationError::Engine(e) => host_error(e),
        StationError::Weights { .. } => js_error(ErrorCode::Internal, e),
        StationError::Wire(_)
        | StationError::Width { .. }
        | StationError::Position { .. }
        | StationError::Rows(_)
        | StationError::RowOutside { .. }
        | StationError::TooManyRows { .. }
        | StationError::Bundle(_)
        | StationError::BundleRows { .. }
        | StationError::NoLogits
        | StationError::Duplicate(_)
        | StationError::Conversations { .. } => invalid_argument(e),
    }
}

fn conversation_id(v: f64) -> Result<u64, JsValue> {
    check_count(v, "conversation")
}

fn range(start: f64, end: f64, what: &str) -> Result<std::ops::Range<usize>, JsValue> {
    let (s, e) = (check_count(start, what)?, check_count(end, what)?);
    Ok(s as usize..e as usize)
}

fn pairs(ranges: &[std::ops::Range<usize>]) -> Array {
    ranges
        .iter()
        .map(|r| Array::of2(&(r.start as f64).into(), &(r.end as f64).into()))
        .collect()
}

/// A layer station: its layers' weights, read once from the knot file, and their KV caches.
#[wasm_bindgen]
pub struct WasmLayerStation {
    shard: LayerShard,
    station: RefCell<LayerStation>,
}

#[wasm_bindgen]
impl WasmLayerStation {
    /// Opens layers `start..end` of the knot file behind `source` (a `KnotByteSource`).
    pub fn open(source: JsValue, start: f64, end: f64, options_json: String) -> Promise {
        future_to_promise(async move {
            let o = StationOptions::parse(&options_json)?;
            let layers = range(start, end, "layer")?;
            let reader = o.reader(source)?;
            let knot = open_index(&reader, &ReadOptions::default())
                .await
                .map_err(host_error)?;
            let shard = LayerShard::read(&reader, &knot, layers.clone(), Some(o.max_read_bytes))
                .await
                .map_err(host_error)?;
            let station = LayerStation::new(
                &knot.meta.config,
                layers,
                o.max_context,
                o.kv_type()?,
                o.max_batch,
                o.max_conversations,
            )
            .map_err(station_error)?;
            Ok(WasmLayerStation {
                shard,
                station: RefCell::new(station),
            }
            .into())
        })
    }

    /// Runs a message of hidden states through the layers; returns the next station's message.
    pub fn step(&self, message: Uint8Array) -> Result<Uint8Array, JsValue> {
        let weights = self.shard.weights().map_err(host_error)?;
        let out = self
            .station
            .try_borrow_mut()
            .map_err(|_| js_error(ErrorCode::Busy, "the station is busy"))?
            .step(&message.to_vec(), &weights)
            .map_err(station_error)?;
        Ok(Uint8Array::from(out.as_slice()))
    }

    /// Positions held for `conversation`.
    pub fn position(&self, conversation: f64) -> Result<f64, JsValue> {
        Ok(self
            .station
            .borrow()
            .position(conversation_id(conversation)?) as f64)
    }

    /// Forgets `conversation`'s positions from `pos` on.
    pub fn rewind(&self, conversation: f64, pos: f64) -> Result<(), JsValue> {
        let pos = check_count(pos, "pos")? as usize;
        self.station
            .borrow_mut()
            .rewind(conversation_id(conversation)?, pos)
            .map_err(station_error)
    }

    pub fn forget(&self, conversation: f64) -> Result<(), JsValue> {
        self.station
            .borrow_mut()
            .forget(conversation_id(conversation)?);
        Ok(())
    }

    /// Records that `conversation`'s KV holds the positions of `ids`, for a later claim.
    pub fn keep(&self, conversation: f64, ids: Uint32Array) -> Result<(), JsValue> {
        self.station
            .borrow_mut()
            .keep(conversation_id(conversation)?, ids.to_vec())
            .map_err(station_error)
    }

    /// Whether this station holds the first `len` positions of `conversation` with the ids of
    /// hash `hash` (16 hex digits); a hit rewinds the conversation to them.
    pub fn claim(&self, conversation: f64, len: f64, hash: &str) -> Result<bool, JsValue> {
        let hash = u64::from_str_radix(hash, 16)
            .map_err(|_| invalid_argument(format!("hash must be 16 hex digits, got {hash:?}")))?;
        let len = check_count(len, "len")? as usize;
        self.station
            .borrow_mut()
            .claim(conversation_id(conversation)?, len, hash)
            .map_err(station_error)
    }

    #[wasm_bindgen(getter, js_name = weightBytes)]
    pub fn weight_bytes(&self) -> f64 {
        self.shard.bytes() as f64
    }
}

/// A head station: its slice of the LM head and the output norm.
#[wasm_bindgen]
pub struct WasmHeadStation {
    shard: HeadShard,
    station: RefCell<HeadStation>,
}

#[wasm_bindgen]
impl WasmHeadStation {
    /// Opens rows `start..end` of the LM head of the knot file behind `source`.
    pub fn open(source: JsValue, start: f64, end: f64, options_json: String) -> Promise {
        future_to_promise(async move {
            let o = StationOptions::parse(&options_json)?;
            let slice = range(start, end, "row")?;
            let reader = o.reader(source)?;
            let knot = open_index(&reader, &ReadOptions::default())
                .await
                .map_err(host_error)?;
            let shard = HeadShard::read(&reader, &knot, slice.clone(), Some(o.max_read_bytes))
                .await
                .map_err(host_error)?;
            let cfg = &knot.meta.config;
            let station = HeadStation::new(slice, cfg.dim, cfg.norm_eps, o.max_batch);
            Ok(WasmHeadStation {
                shard,
                station: RefCell::new(station),
            }
            .into())
        })
    }

    /// The slice's logits for the last position of a message, with the embedding rows of its
    /// `top` largest (a rows message: the coordinator embeds the token it picks from them).
    pub fn logits(&self, message: Uint8Array, top: f64) -> Result<Uint8Array, JsValue> {
        let top = check_count(top, "top")?;
        let (output_norm, output) = self.shard.matrices().map_err(host_error)?;
        let head = engine::LmHead {
            output_norm: &output_norm,
            output: &output,
        };
        let mut station = self
            .station
            .try_borrow_mut()
            .map_err(|_| js_error(ErrorCode::Busy, "the station is busy"))?;
        let answer = station
            .answer(
                &message.to_vec(),
                &head,
                self.shard.embedding(),
                usize::try_from(top).unwrap_or(usize::MAX),
            )
            .map_err(station_error)?;
        Ok(Uint8Array::from(answer.as_slice()))
    }

    /// The embedding rows of `ids` (each in this station's slice), as a rows message.
    pub fn rows(&self, ids: Uint32Array) -> Result<Uint8Array, JsValue> {
        let station = self
            .station
            .try_borrow()
            .map_err(|_| js_error(ErrorCode::Busy, "the station is busy"))?;
        let answer = station
            .rows(&ids.to_vec(), self.shard.embedding())
            .map_err(station_error)?;
        Ok(Uint8Array::from(answer.as_slice()))
    }

    #[wasm_bindgen(getter, js_name = weightBytes)]
    pub fn weight_bytes(&self) -> f64 {
        self.shard.bytes() as f64
    }
}

/// The coordinator: tokenizer, chat template, decode loop, embedding rows.
#[wasm_bindgen]
pub struct WasmCoordinator {
    model: Model,
    conversation: RefCell<Option<Conversation>>,
    kept: RefCell<PrefixTable>,
    /// Conversations run together, one bundle per step (`admit` and after).
    sequences: RefCell<Sequences>,
}

#[wasm_bindgen]
impl WasmCoordinator {
    /// Reads the index and the tokenizer of the knot file behind `source`, and the embedding
    /// table when it fits `embeddingBudget`; `headShards` in the options is how many slices the
    /// vocabulary is cut into. Nothing after this reads the file.
    pub fn open(source: JsValue, options_json: String) -> Promise {
        future_to_promise(async move {
            let o = StationOptions::parse(&options_json)?;
            let reader = o.reader(source)?;
            let opts = ModelOptions {
                context: o.max_context,
                max_batch: o.max_batch,
                head_shards: o.head_shards,
                embedding: EmbeddingOptions {
                    budget: o.embedding_budget,
                    cache_bytes: o.row_cache_bytes,
                },
                logit_rows: o.logit_rows,
                piece: Some(o.max_read_bytes).filter(|&p| p > 0),
            };
            let model = Model::open(reader, &ReadOptions::default(), opts)
                .await
                .map_err(host_error)?;
            Ok(WasmCoordinator {
                model,
                conversation: RefCell::new(None),
                kept: RefCell::new(PrefixTable::new(o.kept_conversations)),
                sequences: RefCell::new(Sequences::new(o.max_sequences)),
            }
            .into())
        })
    }

    #[wasm_bindgen(getter, js_name = vocabSize)]
    pub fn vocab_size(&self) -> u32 {
        self.model.config().vocab_size as u32
    }

    #[wasm_bindgen(getter, js_name = layerCount)]
    pub fn layer_count(&self) -> u32 {
        self.model.config().n_layers as u32
    }

    #[wasm_bindgen(getter, js_name = contextLength)]
    pub fn context_length(&self) -> u32 {
        self.model.context as u32
    }

    #[wasm_bindgen(getter, js_name = eosIds)]
    pub fn eos_ids(&self) -> Uint32Array {
        Uint32Array::from(self.model.config().eos_ids.as_slice())
    }

    /// `{ name, architecture, config, contextLength, embedding }` as JSON (`embedding`:
    /// `resident` or `sharded`).
    pub fn info(&self) -> String {
        let m = &self.model.knot.meta;
        serde_json::json!({
            "name": m.name,
            "architecture": m.architecture,
            "config": m.config,
            "contextLength": self.model.context,
            "embedding": self.model.stats().embedding.mode,
        })
        .to_string()
    }

    /// Reads of the file at open and since (0 after open, on every path), the embedding's mode
    /// and rows held, and the rounds of rows fetched (since open, and for the latest generation).
    #[wasm_bindgen(unchecked_return_type = "import('../../src/types/reports.js').CoordinatorStats")]
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        to_js(&self.model.stats())
    }

    /// Rows of its top-scoring ids each head shard is to send with its logits (`?top=` of
    /// `/logits`); 0 when the embedding table is resident here.
    #[wasm_bindgen(getter, js_name = logitRows)]
    pub fn logit_rows(&self) -> u32 {
        self.model.logit_rows() as u32
    }

    /// Each layer station's `[start, end)` for `stations` stations (21 virtual shards).
    #[wasm_bindgen(js_name = layerRanges)]
    pub fn layer_ranges(&self, stations: f64) -> Result<Array, JsValue> {
        let n = check_count(stations, "stations")? as usize;
        let ranges = placement::layer_ranges(self.model.config().n_layers, n)
            .map_err(|e| js_error(ErrorCode::InvalidOption, e))?;
        Ok(pairs(&ranges))
    }

    /// Each head shard's `[start, end)` of the vocabulary.
    #[wasm_bindgen(js_name = headSlices)]
    pub fn head_slices(&self) -> Array {
        pairs(&self.model.slices)
    }

    pub fn encode(&self, text: &str) -> Result<Uint32Array, JsValue> {
        let ids = self
            .model
            .tokenizer
            .encode_with_bos(text)
            .map_err(host_error)?;
        Ok(Uint32Array::from(ids.as_slice()))
    }

    pub fn decode(&self, ids: Uint32Array) -> Result<String, JsValue> {
        self.model
            .tokenizer
            .decode(&ids.to_vec())
            .map_err(host_error)
    }

    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(
        &self,
        messages_json: &str,
        tools_json: Option<String>,
        add_generation_prompt: Option<bool>,
    ) -> Result<String, JsValue> {
        chat_prompt(
            self.model.knot.meta.chat_template.as_deref(),
            &self.model.tokenizer,
            messages_json,
            tools_json.as_deref(),
            add_generation_prompt,
        )
    }

    /// How the chat template handles tools: `{ takesTools, callTag }`.
    #[wasm_bindgen(js_name = chatTemplateTools)]
    pub fn chat_template_tools(&self) -> Result<JsValue, JsValue> {
        to_js(&engine::chat::template_tools(
            self.model.knot.meta.chat_template.as_deref(),
        ))
    }

    /// Begins generating for conversation `conversation` from `ids` (checking the options);
    /// then `rowsWanted` and `next` give the prompt's messages. `kept`: positions every station
    /// still holds of it (a replayed prefix; 0 for a new one).
    pub fn start(
        &self,
        conversation: f64,
        ids: Uint32Array,
        options_json: String,
        kept: f64,
    ) -> Result<(), JsValue> {
        let id = conversation_id(conversation)?;
        let kept = check_count(kept, "kept")? as usize;
        let opts = GenerateOptions::from_json(&options_json).map_err(host_error)?;
        let conv = Conversation::resume(&self.model, id, &ids.to_vec(), kept, &opts)
            .map_err(host_error)?;
        *self.conversation.borrow_mut() = Some(conv);
        Ok(())
    }

    /// The embedding rows the next messages need that are not here, as `[{ slot, ids }]`: ask
    /// head shard `slot` for `ids` (`/rows`), all at once, and hand each answer to `addRows`.
    /// Empty when the table is resident, the rows are cached, or they rode with the logits.
    #[wasm_bindgen(js_name = rowsWanted, unchecked_return_type = "Array<{ slot: number, ids: Uint32Array }>")]
    pub fn rows_wanted(&self) -> Result<Array, JsValue> {
        let slot = self.conversation.borrow();
        let Some(conv) = slot.as_ref() else {
            return Ok(Array::new());
        };
        wanted_array(&conv.rows_wanted(&self.model).map_err(host_error)?)
    }

    /// Keeps the rows head shard `slot` answered to `/rows`.
    #[wasm_bindgen(js_name = addRows)]
    pub fn add_rows(&self, slot: f64, message: Uint8Array) -> Result<(), JsValue> {
        let slot = check_count(slot, "slot")?;
        self.model
            .add_rows(
                usize::try_from(slot).unwrap_or(usize::MAX),
                &message.to_vec(),
            )
            .map_err(host_error)
    }

    /// The kept conversation sharing the longest prefix with `ids`, as `{ conversation, len,
    /// hash }` to claim from every layer station, or `null`. It leaves the table either way.
    #[wasm_bindgen(js_name = replayFor)]
    pub fn replay_for(&self, ids: Uint32Array) -> Result<JsValue, JsValue> {
        match self.kept.borrow_mut().take_best(&ids.to_vec()) {
            None => Ok(JsValue::NULL),
            Some(r) => {
                let o = js_sys::Object::new();
                js_sys::Reflect::set(&o, &"conversation".into(), &(r.conversation as f64).into())?;
                js_sys::Reflect::set(&o, &"len".into(), &(r.len as f64).into())?;
                js_sys::Reflect::set(&o, &"hash".into(), &format!("{:016x}", r.hash).into())?;
                Ok(o.into())
            }
        }
    }

    /// Whether the claims' answers (`true` hit, `false` miss, `null` no answer) let the prefill
    /// of the prefix be skipped: only when there are some and all are hits.
    #[wasm_bindgen(js_name = replayVerdict)]
    pub fn replay_verdict(&self, answers: Array) -> bool {
        let answers: Vec<Option<bool>> = answers.iter().map(|a| a.as_bool()).collect();
        replay_verdict(&answers)
    }

    /// Picks the next token from the head shards' answers to the last message of `positions`
    /// positions: each the `Uint8Array` a head station answered to `/logits`, `null` (no answer
    /// in time) or an error (message).
    /// Returns `{ id, text, finishReason, step }`, or `{ retry: [slots] }` to ask those again.
    pub fn pick(&self, answers: Array, positions: f64) -> Result<JsValue, JsValue> {
        let positions = check_count(positions, "positions")? as usize;
        let answers = answers
            .iter()
            .enumerate()
            .map(|(slot, a)| answer_of(&a, |b| self.model.read_answer(slot, &b)))
            .collect();
        let mut slot = self.conversation.borrow_mut();
        let conv = slot.as_mut().ok_or_else(|| {
            js_error(
                ErrorCode::NoContext,
                "no generation in progress: start one first",
            )
        })?;
        match conv
            .pick(&self.model, answers, positions)
            .map_err(host_error)?
        {
            Pick::Token(e) => to_js(&e),
            Pick::Retry(slots) => {
                let o = js_sys::Object::new();
                let list: Array = slots.iter().map(|&s| JsValue::from(s as f64)).collect();
                js_sys::Reflect::set(&o, &"retry".into(), &list)?;
                Ok(o.into())
            }
        }
    }

    /// The messages to carry next — the prompt's after `start`, then the token picked last —
    /// or `null` once the generation has ended. Every row `rowsWanted` asked for must be here.
    #[wasm_bindgen(unchecked_return_type = "Uint8Array[] | null")]
    pub fn next(&self) -> Result<JsValue, JsValue> {
        let mut slot = self.conversation.borrow_mut();
        let Some((id, pos, ids)) = slot
            .as_mut()
            .and_then(|c| c.next_ids().map(|ids| (c.id, c.pos, ids)))
        else {
            return Ok(JsValue::NULL);
        };
        match self.model.messages(id, pos, &ids) {
            Ok(messages) => Ok(messages_array(messages).into()),
            Err(e) => {
                // Nothing was carried: the generation cannot go on.
                *slot = None;
                Err(host_error(e))
            }
        }
    }

    /// Positions the stations hold for the generation in progress.
    #[wasm_bindgen(getter)]
    pub fn position(&self) -> f64 {
        self.conversation
            .borrow()
            .as_ref()
            .map_or(0.0, |c| c.pos as f64)
    }

    /// Ends the generation in progress (the caller tells the stations to forget it).
    pub fn end(&self) {
        *self.conversation.borrow_mut() = None;
    }

    /// Ends the generation in progress and keeps it for prefix replay: `{ conversation, ids,
    /// forget }` — tell every layer station to keep `conversation` holding `ids`, and to forget
    /// the conversations in `forget` (pushed out of the table). `null` when none was running.
    pub fn finish(&self) -> Result<JsValue, JsValue> {
        let Some(conv) = self.conversation.borrow_mut().take() else {
            return Ok(JsValue::NULL);
        };
        let held = conv.held().to_vec();
        let forget = self.kept.borrow_mut().remember(conv.id, held.clone());
        let o = js_sys::Object::new();
        js_sys::Reflect::set(&o, &"conversation".into(), &(conv.id as f64).into())?;
        js_sys::Reflect::set(&o, &"ids".into(), &Uint32Array::from(held.as_slice()))?;
        let forget: Array = forget.iter().map(|&c| JsValue::from(c as f64)).collect();
        js_sys::Reflect::set(&o, &"forget".into(), &forget)?;
        Ok(o.into())
    }
}

/// Conversations run together (a coordinator opened with `maxSequences`): each step one bundle
/// carrying every conversation's rows through the stations (`station::sequences`).
#[wasm_bindgen]
impl WasmCoordinator {
    /// Conversations run together at most (`maxSequences` of the options).
    #[wasm_bindgen(getter, js_name = maxSequences)]
    pub fn max_sequences(&self) -> u32 {
        self.sequences.borrow().max() as u32
    }

    /// Admits conversation `conversation` with the prompt `ids` between steps (refused `busy`
    /// past `maxSequences`, and as `start` refuses bad options).
    pub fn admit(
        &self,
        conversation: f64,
        ids: Uint32Array,
        options_json: String,
    ) -> Result<(), JsValue> {
        let id = conversation_id(conversation)?;
        let opts = GenerateOptions::from_json(&options_json).map_err(host_error)?;
        self.sequences
            .borrow_mut()
            .admit(&self.model, id, &ids.to_vec(), &opts)
            .map_err(host_error)
    }

    /// Ends `conversation` between steps (its consumer left); whether it was running. The
    /// caller tells the stations to forget it.
    pub fn cancel(&self, conversation: f64) -> Result<bool, JsValue> {
        let id = conversation_id(conversation)?;
        self.sequences.borrow_mut().cancel(id).map_err(host_error)
    }

    /// Plans the next step: the embedding rows it needs from the head shards, as `rowsWanted`
    /// gives them (each answer to `addRows`), or `null` when no conversation runs.
    #[wasm_bindgen(js_name = planStep, unchecked_return_type = "Array<{ slot: number, ids: Uint32Array }> | null")]
    pub fn plan_step(&self) -> Result<JsValue, JsValue> {
        match self
            .sequences
            .borrow_mut()
            .plan(&self.model)
            .map_err(host_error)?
        {
            None => Ok(JsValue::NULL),
            Some(wanted) => Ok(wanted_array(&wanted)?.into()),
        }
    }

    /// The planned step as one message (a bundle of every conversation's hidden states) to
    /// send through the layer stations: `{ message, logits }` — `logits`: on to the head shards.
    #[wasm_bindgen(js_name = stepMessage, unchecked_return_type = "{ message: Uint8Array, logits: boolean }")]
    pub fn step_message(&self) -> Result<JsValue, JsValue> {
        let (message, logits) = self
            .sequences
            .borrow_mut()
            .message(&self.model)
            .map_err(host_error)?;
        let o = js_sys::Object::new();
        js_sys::Reflect::set(&o, &"message".into(), &Uint8Array::from(message.as_slice()))?;
        js_sys::Reflect::set(&o, &"logits".into(), &logits.into())?;
        Ok(o.into())
    }

    /// The step's outcome from the head shards' answers (each the bundle a shard answered, an
    /// error, or `null`; `null` for all of them when the step wanted no logits): one event per
    /// conversation that picked a token or ended, `{ sequence, token, done, finishReason,
    /// error? }` as `WasmHost.step` gives them. A conversation whose answers failed ends alone.
    #[wasm_bindgen(js_name = pickStep)]
    pub fn pick_step(&self, answers: JsValue) -> Result<js_sys::Array, JsValue> {
        let answers = if answers.is_null() || answers.is_undefined() {
            None
        } else {
            let list: Array = answers
                .dyn_into()
                .map_err(|_| invalid_argument("pickStep: the answers must be an array or null"))?;
            Some(list.iter().map(|a| answer_of(&a, Answer::Value)).collect())
        };
        let events = self
            .sequences
            .borrow_mut()
            .pick(&self.model, answers)
            .map_err(host_error)?;
        let out = Array::new();
        for e in events {
            let o = js_sys::Object::new();
            let set = |k: &str, v: &JsValue| js_sys::Reflect::set(&o, &k.into(), v).map(drop);
            set("sequence", &(e.id as f64).into())?;
            set("done", &e.done.into())?;
            match e.token {
                Ok(t) => {
                    set("finishReason", &to_js(&t.finish_reason)?)?;
                    set("token", &to_js(&t)?)?;
                }
                Err(err) => {
                    set("finishReason", &JsValue::NULL)?;
                    set("token", &JsValue::NULL)?;
                    set("error", &host_error(err))?;
                }
            }
            out.push(&o);
        }
        Ok(out)
    }

    /// Ends every conversation run together (a step could not be carried): their ids, for
    /// the stations to forget.
    pub fn abandon(&self) -> Array {
        let ids = self.sequences.borrow_mut().abandon();
        ids.iter().map(|&c| JsValue::from(c as f64)).collect()
    }
}

/// One head shard's answer from JS: bytes (`value` of them), `null` (no answer in time) or an
/// error (its message).
fn answer_of<T>(a: &JsValue, value: impl FnOnce(Vec<u8>) -> Answer<T>) -> Answer<T> {
    if a.is_null() || a.is_undefined() {
        Answer::Missing
    } else if let Some(bytes) = a.dyn_ref::<Uint8Array>() {
        value(bytes.to_vec())
    } else if let Some(e) = a.dyn_ref::<js_sys::Error>() {
        Answer::Failed(String::from(e.message()))
    } else {
        Answer::Failed(a.as_string().unwrap_or_else(|| "a bad answer".into()))
    }
}

fn wanted_array(wanted: &[(usize, Vec<u32>)]) -> Result<Array, JsValue> {
    wanted
        .iter()
        .map(|(s, ids)| {
            let o = js_sys::Object::new();
            js_sys::Reflect::set(&o, &"slot".into(), &(*s as f64).into())?;
            js_sys::Reflect::set(&o, &"ids".into(), &Uint32Array::from(ids.as_slice()))?;
            Ok(JsValue::from(o))
        })
        .collect()
}

fn messages_array(messages: Vec<Vec<u8>>) -> Array {
    messages
        .iter()
        .map(|m| JsValue::from(Uint8Array::from(m.as_slice())))
        .collect()
}
