//! The stations' JS boundary: `WasmLayerStation` and `WasmHeadStation` (each in a Durable
//! Object of the Worker) and `WasmCoordinator` (under the package's stations backend, in the
//! Worker that serves the OpenAI routes).
//! Hidden states cross it as wire messages (`station::wire`), embedding rows and the logits they
//! ride with as rows messages (`station::rows`). Nothing here may panic: a panic aborts the wasm
//! instance, i.e. the station.

use std::cell::RefCell;
use std::rc::Rc;

use engine::decode::GenerateOptions;
use js_sys::{Array, Promise, Uint32Array, Uint8Array};
use knot::ReadOptions;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;

use super::convert::{chat_prompt, check_count, prompt_ids, to_js};
use super::errors::{host_error, invalid_argument, js_error};
use super::source::JsSource;
use crate::error::ErrorCode;
use crate::reader::Reader;
use crate::station::bundle::SumsAsk;
use crate::station::coordinator::Model;
use crate::station::gather::Answer;
use crate::station::head::{Again, LogitsAsk};
use crate::station::options::StationOptions;
use crate::station::sequences::{Sequences, StepEvent};
use crate::station::{
    open_index, placement, HeadShard, HeadStation, LayerShard, LayerStation, StationError,
};

/// A station's options (`station::options`), a refusal naming the option.
fn station_options(json: &str) -> Result<StationOptions, JsValue> {
    StationOptions::from_json(json).map_err(host_error)
}

/// The reader a station's open reads through: its source, with the options' read policy.
fn reader(o: &StationOptions, source: JsValue) -> Result<Reader, JsValue> {
    Ok(Reader::new(Rc::new(JsSource::new(source)?), o.read_policy))
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
        | StationError::Conversations { .. }
        | StationError::StepGone(_)
        | StationError::PartOutside { .. }
        | StationError::TooManyCandidates { .. } => invalid_argument(e),
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
            let o = station_options(&options_json)?;
            let layers = range(start, end, "layer")?;
            let reader = reader(&o, source)?;
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
                o.kv_type,
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
            let o = station_options(&options_json)?;
            let slice = range(start, end, "row")?;
            let reader = reader(&o, source)?;
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

    /// The slice's logits for the last position of a message — every one (`pick` 0) or the
    /// largest `pick` and a bound on the rest — with the embedding rows of its `top` largest (a
    /// rows message: the coordinator embeds the token it picks from them). The message's
    /// hidden states are kept as `step`'s, for `again`.
    pub fn logits(
        &self,
        message: Uint8Array,
        top: f64,
        pick: f64,
        step: f64,
    ) -> Result<Uint8Array, JsValue> {
        let top = check_count(top, "top")?;
        let ask = match check_count(pick, "pick")? {
            0 => LogitsAsk::Every,
            n => LogitsAsk::Largest(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        let step = check_count(step, "step")?;
        let top = usize::try_from(top).unwrap_or(usize::MAX);
        self.with_head(|station, head| {
            station.answer(
                &message.to_vec(),
                head,
                self.shard.embedding(),
                top,
                ask,
                step,
            )
        })
    }

    /// Parts of step `step` answered again: `asks` is the JSON of `again`'s body, `[{ part,
    /// above }]` (`above`: every logit at least this large; `null`: every logit), answered as a
    /// bundle in that order.
    pub fn again(&self, step: f64, asks: &str) -> Result<Uint8Array, JsValue> {
        let step = check_count(step, "step")?;
        let asks = parse_asks(asks)?;
        let row_bytes = self.shard.embedding().row_bytes;
        self.with_head(|station, head| station.again(step, &asks, head, row_bytes))
    }

    /// `f` on the station and its LM head (the shard's matrices), its answer as bytes.
    fn with_head(
        &self,
        f: impl FnOnce(&mut HeadStation, &engine::LmHead) -> Result<Vec<u8>, StationError>,
    ) -> Result<Uint8Array, JsValue> {
        let (output_norm, output) = self.shard.matrices().map_err(host_error)?;
        let head = engine::LmHead {
            output_norm: &output_norm,
            output: &output,
        };
        let mut station = self
            .station
            .try_borrow_mut()
            .map_err(|_| js_error(ErrorCode::Busy, "the station is busy"))?;
        let answer = f(&mut station, &head).map_err(station_error)?;
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

/// The coordinator: tokenizer, chat template, decode loop and embedding rows, and the sequences
/// it runs over the stations (`station::sequences`: one bundle per step for all of them, each
/// able to resume a conversation the layer stations kept). The package's stations backend
/// (pkg/src/stations) is what drives it: the calls to the stations are its.
#[wasm_bindgen]
pub struct WasmCoordinator {
    model: Model,
    sequences: RefCell<Sequences>,
    /// `info()`'s object, as JSON.
    info: String,
}

#[wasm_bindgen]
impl WasmCoordinator {
    /// Reads the index and the tokenizer of the knot file behind `source`, and the embedding
    /// table when it fits `embeddingBudget`; `headShards` in the options is how many slices the
    /// vocabulary is cut into. Nothing after this reads the file.
    pub fn open(source: JsValue, options_json: String) -> Promise {
        future_to_promise(async move {
            let o = station_options(&options_json)?;
            let reader = reader(&o, source)?;
            let model = Model::open(reader, &ReadOptions::default(), o.model_options())
                .await
                .map_err(host_error)?;
            let m = &model.knot.meta;
            let info = serde_json::json!({
                "name": m.name,
                "architecture": m.architecture,
                "config": m.config,
                "contextLength": model.context,
                "maxSequences": o.max_sequences,
                "chatTemplate": model.chat_template,
                "embedding": model.stats().embedding.mode,
            })
            .to_string();
            // Conversation ids unique across the coordinators sharing the stations: a random
            // base (below 2^50, which a JS number holds exactly), counted up from.
            let first = (js_sys::Math::random() * 2f64.powi(40)).floor() as u64 * 1024;
            let sequences = Sequences::new(o.max_sequences, o.kept_conversations, first);
            Ok(WasmCoordinator {
                model,
                sequences: RefCell::new(sequences),
                info,
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

    /// Sequences run together at most (`maxSequences` of the options).
    #[wasm_bindgen(getter, js_name = maxSequences)]
    pub fn max_sequences(&self) -> u32 {
        self.sequences.borrow().max() as u32
    }

    /// `{ name, architecture, config, contextLength, maxSequences, chatTemplate, embedding }`
    /// (`chatTemplate`: where the template came from, as a host reports it; `embedding`:
    /// `resident` or `sharded`).
    pub fn info(&self) -> Result<JsValue, JsValue> {
        js_sys::JSON::parse(&self.info)
    }

    /// Reads of the file at open and since (0 after open, on every path), the embedding's mode
    /// and rows held, and the rounds of rows fetched (since open, and for the latest admission).
    #[wasm_bindgen(unchecked_return_type = "import('../../src/types/reports.js').CoordinatorStats")]
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        to_js(&self.model.stats())
    }

    /// The sequences (`{ max, active, admitted, ended }`) and how prompts used the kept
    /// conversations (`prefixReuse`, as a host counts its windows).
    #[wasm_bindgen(js_name = sequenceStats, unchecked_return_type = "import('../../src/types/stations.js').SequenceStats")]
    pub fn sequence_stats(&self) -> Result<JsValue, JsValue> {
        to_js(&self.sequences.borrow().stats())
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

    /// The prompt as token ids, the way `admit` reads it.
    fn ids(&self, prompt: &JsValue) -> Result<Vec<u32>, JsValue> {
        prompt_ids(
            prompt,
            self.model.knot.meta.chat_template.as_deref(),
            &self.model.tokenizer,
        )
    }

    /// How many tokens `prompt` (as `admit` takes it) is.
    #[wasm_bindgen(js_name = countTokens)]
    pub fn count_tokens(&self, prompt: JsValue) -> Result<u32, JsValue> {
        Ok(self.ids(&prompt)?.len() as u32)
    }

    /// Admits a sequence between steps: `prompt` is token ids (`Uint32Array`), text, or `{ chat:
    /// messagesJson, tools?: toolsJson, addGenerationPrompt?, suffix? }` (rendered and encoded
    /// here, as `WasmHost.admit` does), `optionsJson` the generation options. Returns `{ id,
    /// promptTokens, prefix, claim }`: `id` is the sequence, and the conversation the layer
    /// stations know it by; `claim: { len, hash }` (or null) asks every layer station to claim
    /// that prefix of conversation `id` before the sequence's first step (`claimed`).
    #[wasm_bindgen(
        unchecked_return_type = "import('../../src/types/stations.js').CoordinatorAdmitted"
    )]
    pub fn admit(&self, prompt: JsValue, options_json: &str) -> Result<JsValue, JsValue> {
        let ids = self.ids(&prompt)?;
        let opts = GenerateOptions::from_json(options_json).map_err(host_error)?;
        let admitted = self
            .sequences
            .borrow_mut()
            .admit(&self.model, &ids, &opts)
            .map_err(host_error)?;
        to_js(&admitted)
    }

    /// The claims to make before the next step: `[{ sequence, len, hash }]`.
    #[wasm_bindgen(
        unchecked_return_type = "Array<{ sequence: number, len: number, hash: string }>"
    )]
    pub fn claims(&self) -> Result<Array, JsValue> {
        (self.sequences.borrow().claims().into_iter())
            .map(|(id, c)| {
                let o = js_sys::Object::new();
                js_sys::Reflect::set(&o, &"sequence".into(), &(id as f64).into())?;
                js_sys::Reflect::set(&o, &"len".into(), &(c.len as f64).into())?;
                js_sys::Reflect::set(&o, &"hash".into(), &format!("{:016x}", c.hash).into())?;
                Ok(JsValue::from(o))
            })
            .collect()
    }

    /// Every layer station's answer to sequence `sequence`'s claim (`true` granted, `false`
    /// refused, `null` no answer). Returns `{ prefix, forget }`: how its prompt is served now,
    /// and whether every layer station must forget the conversation before the next step (a
    /// claim not granted by all: the prompt runs whole).
    pub fn claimed(&self, sequence: f64, answers: Array) -> Result<JsValue, JsValue> {
        let id = conversation_id(sequence)?;
        let answers: Vec<Option<bool>> = answers.iter().map(|a| a.as_bool()).collect();
        let outcome = self
            .sequences
            .borrow_mut()
            .claimed(id, &answers)
            .map_err(host_error)?;
        to_js(&outcome)
    }

    /// Ends sequence `sequence` between steps (its consumer left; its conversation is kept for
    /// prefix replay); whether it was running.
    pub fn cancel(&self, sequence: f64) -> Result<bool, JsValue> {
        let id = conversation_id(sequence)?;
        self.sequences.borrow_mut().cancel(id).map_err(host_error)
    }

    /// What every layer station is to be told now, and then forgotten here: `{ keep: [{
    /// conversation, ids }], forget: [conversation] }` — keep `conversation` holding `ids`
    /// (`/keep`; one that fails goes to `keepFailed`), forget the others.
    #[wasm_bindgen(
        unchecked_return_type = "{ keep: { conversation: number, ids: Uint32Array }[], forget: number[] }"
    )]
    pub fn settle(&self) -> Result<JsValue, JsValue> {
        let s = self.sequences.borrow_mut().settle();
        let keep: Array = (s.keep.iter())
            .map(|k| {
                let o = js_sys::Object::new();
                let conversation = JsValue::from(k.conversation as f64);
                js_sys::Reflect::set(&o, &"conversation".into(), &conversation)?;
                let ids = Uint32Array::from(k.ids.as_slice());
                js_sys::Reflect::set(&o, &"ids".into(), &ids)?;
                Ok(JsValue::from(o))
            })
            .collect::<Result<_, JsValue>>()?;
        let forget: Array = s.forget.iter().map(|&c| JsValue::from(c as f64)).collect();
        let o = js_sys::Object::new();
        js_sys::Reflect::set(&o, &"keep".into(), &keep)?;
        js_sys::Reflect::set(&o, &"forget".into(), &forget)?;
        Ok(o.into())
    }

    /// A layer station did not keep `conversation`: it leaves the kept ones, and the next
    /// `settle` has every station forget it.
    #[wasm_bindgen(js_name = keepFailed)]
    pub fn keep_failed(&self, conversation: f64) -> Result<(), JsValue> {
        let id = conversation_id(conversation)?;
        self.sequences.borrow_mut().keep_failed(id);
        Ok(())
    }

    /// Plans the next step: the embedding rows it needs from the head shards, as `[{ slot, ids
    /// }]` (ask head shard `slot` for `ids` with `/rows`, all at once, and hand each answer to
    /// `addRows`), or `null` when no sequence runs.
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

    /// The planned step as one message (a bundle of every sequence's hidden states) to send
    /// through the layer stations: `{ message, logits, step, pick, top }` — `logits`: on to the
    /// head shards, which keep the step's hidden states as `step`'s, answer with their largest
    /// `pick` logits (0: every one) and send the rows of their `top` largest along.
    #[wasm_bindgen(
        js_name = stepMessage,
        unchecked_return_type = "{ message: Uint8Array, logits: boolean, step: number, pick: number, top: number }"
    )]
    pub fn step_message(&self) -> Result<JsValue, JsValue> {
        let mut sequences = self.sequences.borrow_mut();
        let (message, logits) = sequences.message(&self.model).map_err(host_error)?;
        let pick = match self.model.logits_ask() {
            LogitsAsk::Largest(n) => n as f64,
            _ => 0.0,
        };
        let o = js_sys::Object::new();
        js_sys::Reflect::set(&o, &"message".into(), &Uint8Array::from(message.as_slice()))?;
        js_sys::Reflect::set(&o, &"logits".into(), &logits.into())?;
        js_sys::Reflect::set(&o, &"step".into(), &(sequences.step() as f64).into())?;
        js_sys::Reflect::set(&o, &"pick".into(), &pick.into())?;
        let top = sequences.logit_rows() as f64;
        js_sys::Reflect::set(&o, &"top".into(), &top.into())?;
        Ok(o.into())
    }

    /// What the picks the answers did not settle need: one `/again` per head shard, `[{ slot,
    /// body }]` (`body`: the JSON to send); their answers go to `pickAgain`, in this order.
    /// Empty when every pick settled.
    #[wasm_bindgen(unchecked_return_type = "Array<{ slot: number, body: string }>")]
    pub fn again(&self) -> Result<Array, JsValue> {
        (self.sequences.borrow().again().iter())
            .map(|(slot, asks)| {
                let list: Vec<serde_json::Value> = (asks.iter())
                    .map(|a| {
                        let mut o = match a.logits {
                            LogitsAsk::Above(t) => {
                                serde_json::json!({ "part": a.part, "above": t })
                            }
                            LogitsAsk::Largest(n) => {
                                serde_json::json!({ "part": a.part, "largest": n })
                            }
                            LogitsAsk::Every => {
                                serde_json::json!({ "part": a.part, "above": null })
                            }
                        };
                        if let Some(sums) = &a.sums {
                            o["sums"] = sums.as_ref().map(SumsAsk::to_hex).into();
                        }
                        o
                    })
                    .collect();
                let o = js_sys::Object::new();
                js_sys::Reflect::set(&o, &"slot".into(), &(*slot as f64).into())?;
                let body = serde_json::Value::Array(list).to_string();
                js_sys::Reflect::set(&o, &"body".into(), &body.into())?;
                Ok(JsValue::from(o))
            })
            .collect()
    }

    /// The waiting picks from the head shards' answers to `again` (each bytes, an error or
    /// `null`, in `again`'s order): events as `pickStep` gives them.
    #[wasm_bindgen(js_name = pickAgain)]
    pub fn pick_again(&self, answers: Array) -> Result<js_sys::Array, JsValue> {
        let answers = answers
            .iter()
            .map(|a| answer_of(&a, Answer::Value))
            .collect();
        let events = self
            .sequences
            .borrow_mut()
            .pick_again(&self.model, answers)
            .map_err(host_error)?;
        events_array(events)
    }

    /// The step's outcome from the head shards' answers (each the bundle a shard answered, an
    /// error, or `null`; `null` for all of them when the step wanted no logits): one event per
    /// sequence that picked a token or ended, `{ sequence, token, done, finishReason, report?,
    /// error? }` as `WasmHost.step` gives them. A sequence whose answers failed ends alone.
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
        events_array(events)
    }

    /// Ends every sequence (a step could not be carried, or was given up): their ids. The next
    /// `settle` has the stations forget them.
    pub fn abandon(&self) -> Array {
        let ids = self.sequences.borrow_mut().abandon();
        ids.iter().map(|&c| JsValue::from(c as f64)).collect()
    }
}

/// The asks of an `/again` body: `[{ part, above } | { part, largest }]`, each with `sums`
/// when they change (what the part's sums are taken for from now on, `SumsAsk::to_hex`, or
/// null for none); at most a bundle's parts.
fn parse_asks(json: &str) -> Result<Vec<Again>, JsValue> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ask {
        part: usize,
        #[serde(default)]
        above: Option<f64>,
        #[serde(default)]
        largest: Option<usize>,
        #[serde(default, deserialize_with = "present")]
        sums: Option<Option<String>>,
    }
    /// A key given, even as null (absent: the serde default, None).
    fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
        serde::Deserialize::deserialize(d).map(Some)
    }
    let bad = |why: String| invalid_argument(format!("again: {why}"));
    let asks: Vec<Ask> = serde_json::from_str(json).map_err(|e| {
        bad(format!(
            "the body must be [{{ part, above | largest, sums? }}] ({e})"
        ))
    })?;
    if asks.len() > crate::station::head::MAX_BUNDLE_PARTS {
        return Err(bad(format!(
            "{} parts, more than a bundle holds",
            asks.len()
        )));
    }
    asks.into_iter()
        .map(|a| {
            let sums = match a.sums {
                Some(Some(hex)) => Some(Some(
                    SumsAsk::from_hex(&hex).map_err(|e| bad(e.to_string()))?,
                )),
                Some(None) => Some(None),
                None => None,
            };
            let logits = match (a.largest, a.above) {
                (Some(n), None) => LogitsAsk::Largest(n),
                (Some(_), Some(_)) => return Err(bad("above and largest, not both".into())),
                (None, None) => LogitsAsk::Every,
                (None, Some(t)) if !t.is_nan() => LogitsAsk::Above(t as f32),
                (None, Some(_)) => return Err(bad("above must be a number or null".into())),
            };
            Ok(Again {
                part: a.part,
                logits,
                sums,
            })
        })
        .collect()
}

/// Step events as JS sees them: `{ sequence, token, done, finishReason, report?, error? }`.
fn events_array(events: Vec<StepEvent>) -> Result<Array, JsValue> {
    let out = Array::new();
    for e in events {
        let o = js_sys::Object::new();
        let set = |k: &str, v: &JsValue| js_sys::Reflect::set(&o, &k.into(), v).map(drop);
        set("sequence", &(e.id as f64).into())?;
        set("done", &e.done.into())?;
        if let Some(r) = &e.report {
            set("report", &to_js(r)?)?;
        }
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
