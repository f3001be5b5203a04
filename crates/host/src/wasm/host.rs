//! `WasmHost`, the Rust side of the package's `HostShim` (pkg/src/shim.js): the host lent out
//! of a `RefCell` to one async call at a time (never holding a borrow across an await), the
//! queries that answer while a call runs (the tokenizer, the template, the stats the host keeps
//! current), and disposal. The shim's scheduler makes every call one at a time; this layer still
//! refuses overlapping or post-dispose calls cleanly.

use super::convert::{chat_prompt, check_index, prompt_ids, to_js};
use super::errors::{host_error, js_error};
use super::source::JsSource;
use crate::clock::epoch_ms;
use crate::error::{ErrorCode, HostError};
use crate::host::{Host, PrefillWindowInfo, SequenceEvent, Stats};
use crate::reader::Abort;
use engine::decode::GenerateOptions;
use engine::tokenizer::Tokenizer;
use js_sys::{Function, Promise, Uint32Array};
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

/// Where the host is: idle in the cell, lent out to an async call, or freed.
enum State {
    Idle(Box<Host>),
    Busy { dispose_after: bool },
    Disposed,
}

/// What the synchronous queries need, kept outside the host so that they answer while an
/// async call has it.
struct Lexicon {
    tokenizer: Rc<Tokenizer>,
    chat_template: Option<String>,
    /// `info()`'s object, as JSON.
    info: String,
    /// What `stats()` reads: the host keeps it current, and it answers during a call too.
    stats: Rc<RefCell<Stats>>,
}

/// The Rust side of the package's `HostShim` (pkg/src/shim.js).
#[wasm_bindgen]
pub struct WasmHost {
    state: Rc<RefCell<State>>,
    abort: Abort,
    lexicon: Lexicon,
    vocab_size: u32,
    layer_count: u32,
    context_length: u32,
    eos_ids: Vec<u32>,
    max_sequences: u32,
}

/// The failures of a call the host cannot take.
fn disposed() -> JsValue {
    js_error(ErrorCode::Disposed, "HostShim has been disposed")
}

fn busy() -> JsValue {
    js_error(
        ErrorCode::Busy,
        "HostShim is busy: await the previous call first",
    )
}

/// Runs a synchronous call on the idle host.
fn with_host<T>(
    state: &RefCell<State>,
    f: impl FnOnce(&mut Host) -> Result<T, JsValue>,
) -> Result<T, JsValue> {
    match &mut *state.borrow_mut() {
        State::Idle(host) => f(host),
        State::Busy {
            dispose_after: true,
        }
        | State::Disposed => Err(disposed()),
        State::Busy { .. } => Err(busy()),
    }
}

/// Fails once the host is disposed (or will be when its call ends).
fn check_live(state: &RefCell<State>) -> Result<(), JsValue> {
    match &*state.borrow() {
        State::Busy {
            dispose_after: true,
        }
        | State::Disposed => Err(disposed()),
        _ => Ok(()),
    }
}

/// The prefill windows: the host's (expired ones dropped), or during an async call those the
/// stats hold, less the expired.
fn prefill_windows(
    state: &RefCell<State>,
    stats: &RefCell<Stats>,
) -> Result<Vec<PrefillWindowInfo>, JsValue> {
    match &mut *state.borrow_mut() {
        State::Idle(host) => host.prefill_window_list().map_err(host_error),
        State::Busy {
            dispose_after: false,
        } => {
            let stats = stats.borrow();
            match stats.prefill_windows.max {
                0 => Err(host_error(HostError::PrefillWindowsDisabled)),
                _ => {
                    let now = epoch_ms();
                    let w = &stats.prefill_windows.windows;
                    Ok(w.iter().filter(|w| now < w.expires_at).cloned().collect())
                }
            }
        }
        _ => Err(disposed()),
    }
}

/// Lends the host to an async call (so no RefCell borrow is held across awaits) and puts it
/// back afterwards, freeing it instead if `dispose()` came in meanwhile.
async fn with_host_async<T, F>(state: Rc<RefCell<State>>, f: F) -> Result<T, JsValue>
where
    F: AsyncFnOnce(&mut Host) -> Result<T, JsValue>,
{
    let mut host = {
        let mut s = state.borrow_mut();
        match &*s {
            State::Idle(_) => {}
            State::Disposed => return Err(disposed()),
            State::Busy { .. } => return Err(busy()),
        }
        let lent = std::mem::replace(
            &mut *s,
            State::Busy {
                dispose_after: false,
            },
        );
        let State::Idle(host) = lent else {
            unreachable!("matched Idle above")
        };
        host
    };
    let result = f(&mut host).await;
    let mut s = state.borrow_mut();
    *s = match *s {
        State::Busy {
            dispose_after: true,
        } => State::Disposed,
        _ => State::Idle(host),
    };
    result
}

#[wasm_bindgen]
impl WasmHost {
    /// Opens a knot file through `source`. `optionsJson` is `HostShim.open`'s options object
    /// (without `onProgress`) as JSON, checked by `host::options::open_options`;
    /// `onProgress({ bytesLoaded, rangeReads })` is called after every completed read.
    pub fn open(source: JsValue, options_json: String, on_progress: Option<Function>) -> Promise {
        future_to_promise(async move {
            let opts = crate::options::open_options(&options_json).map_err(host_error)?;
            let mut source = JsSource::new(source)?;
            source.on_progress = on_progress;
            let host = Host::open(Rc::new(source), opts)
                .await
                .map_err(host_error)?;
            let cfg = host.config();
            let m = &host.knot().meta;
            let info = serde_json::json!({
                "name": m.name,
                "architecture": m.architecture,
                "config": m.config,
                "contextLength": host.context_length(),
                "maxSequences": host.max_sequences(),
                "chatTemplate": host.chat_template(),
            });
            Ok(WasmHost {
                vocab_size: cfg.vocab_size as u32,
                layer_count: cfg.n_layers as u32,
                context_length: host.context_length() as u32,
                eos_ids: cfg.eos_ids.clone(),
                max_sequences: host.max_sequences() as u32,
                abort: host.abort_handle(),
                lexicon: Lexicon {
                    tokenizer: host.tokenizer().clone(),
                    chat_template: m.chat_template.clone(),
                    info: info.to_string(),
                    stats: host.stats_handle(),
                },
                state: Rc::new(RefCell::new(State::Idle(Box::new(host)))),
            }
            .into())
        })
    }

    /// Positions a sequence's context holds (under a memory budget, what fits).
    #[wasm_bindgen(getter, js_name = contextLength)]
    pub fn context_length(&self) -> u32 {
        self.context_length
    }

    /// The most sequences `admit` holds at once (1: a batch of one).
    #[wasm_bindgen(getter, js_name = maxSequences)]
    pub fn max_sequences(&self) -> u32 {
        self.max_sequences
    }

    /// Whether an async call has the host now.
    #[wasm_bindgen(getter)]
    pub fn busy(&self) -> bool {
        matches!(&*self.state.borrow(), State::Busy { .. })
    }

    /// Forgets the reads in flight without waiting for them (see `Host::drop_reads`); for a
    /// caller taking over from a call whose request context was canceled. Returns how many.
    #[wasm_bindgen(js_name = dropReads)]
    pub fn drop_reads(&self) -> Result<u32, JsValue> {
        with_host(&self.state, |h| Ok(h.drop_reads() as u32))
    }

    #[wasm_bindgen(getter, js_name = vocabSize)]
    pub fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    #[wasm_bindgen(getter, js_name = layerCount)]
    pub fn layer_count(&self) -> u32 {
        self.layer_count
    }

    #[wasm_bindgen(getter, js_name = eosIds)]
    pub fn eos_ids(&self) -> Uint32Array {
        Uint32Array::from(self.eos_ids.as_slice())
    }

    /// Text to ids, with the model's BOS when its tokenizer adds one. Works during an async
    /// call too, as do `decode`, `chatPrompt`, `stats` and `info`.
    pub fn encode(&self, text: &str) -> Result<Uint32Array, JsValue> {
        check_live(&self.state)?;
        let ids = self
            .lexicon
            .tokenizer
            .encode_with_bos(text)
            .map_err(host_error)?;
        Ok(Uint32Array::from(ids.as_slice()))
    }

    /// Ids to text (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: Uint32Array) -> Result<String, JsValue> {
        check_live(&self.state)?;
        self.lexicon
            .tokenizer
            .decode(&ids.to_vec())
            .map_err(host_error)
    }

    /// Renders `[{ role, content }]` (as JSON) with the model's chat template, OpenAI's `tools`
    /// list (as JSON) when given, ending with the assistant turn's opening unless
    /// `addGenerationPrompt` is false.
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(
        &self,
        messages_json: &str,
        tools_json: Option<String>,
        add_generation_prompt: Option<bool>,
    ) -> Result<String, JsValue> {
        check_live(&self.state)?;
        chat_prompt(
            self.lexicon.chat_template.as_deref(),
            &self.lexicon.tokenizer,
            messages_json,
            tools_json.as_deref(),
            add_generation_prompt,
        )
    }

    /// How the chat template handles tools: `{ takesTools, callTag }`.
    #[wasm_bindgen(js_name = chatTemplateTools)]
    pub fn chat_template_tools(&self) -> Result<JsValue, JsValue> {
        to_js(&engine::chat::template_tools(
            self.lexicon.chat_template.as_deref(),
        ))
    }

    /// Forgets the conversations kept for prefix reuse and the prefill windows; cached layers
    /// and running sequences stay.
    pub fn reset(&self) -> Result<(), JsValue> {
        with_host(&self.state, |h| {
            h.reset();
            Ok(())
        })
    }

    /// The prompt as token ids, the way `admit` reads it.
    fn ids(&self, prompt: &JsValue) -> Result<Vec<u32>, JsValue> {
        check_live(&self.state)?;
        prompt_ids(
            prompt,
            self.lexicon.chat_template.as_deref(),
            &self.lexicon.tokenizer,
        )
    }

    /// How many tokens `prompt` (as `admit` takes it) is.
    #[wasm_bindgen(js_name = countTokens)]
    pub fn count_tokens(&self, prompt: JsValue) -> Result<u32, JsValue> {
        Ok(self.ids(&prompt)?.len() as u32)
    }

    /// Admits a sequence between steps: `prompt` is token ids (`Uint32Array`), text, or `{ chat:
    /// messagesJson, tools?: toolsJson, addGenerationPrompt? }` — rendered and encoded here, so
    /// a prompt crosses once —, `optionsJson` the generation options (`GenerateOptions::
    /// from_json`). Returns `{ id, promptTokens, prefix }`; the prompt runs in the next steps.
    pub fn admit(&self, prompt: JsValue, options_json: &str) -> Result<JsValue, JsValue> {
        let ids = self.ids(&prompt)?;
        let opts = GenerateOptions::from_json(options_json).map_err(host_error)?;
        let admitted = with_host(&self.state, |h| h.admit(&ids, &opts).map_err(host_error))?;
        to_js(&admitted)
    }

    /// Ends sequence `id` between steps (its conversation kept for prefix reuse); false when it
    /// is not active.
    pub fn cancel(&self, id: u32) -> Result<bool, JsValue> {
        with_host(&self.state, |h| Ok(h.cancel(id)))
    }

    /// One step of every active sequence. Resolves to one event per sequence that made a token
    /// or ended: `{ sequence, token: { id, text, finishReason, step, constraint? } | null, done,
    /// finishReason, report?, error? }` (`report` once it ended; `error`: a coded `Error`, the
    /// sequence ended by it).
    pub fn step(&self) -> Promise {
        let state = self.state.clone();
        future_to_promise(async move {
            let events = with_host_async(state, async |h: &mut Host| Ok(h.step().await)).await?;
            let out = js_sys::Array::new();
            for e in events {
                out.push(&event_to_js(e)?);
            }
            Ok(out.into())
        })
    }

    /// Prefills `prompt` (as `admit` takes it) into a new prefill window; `optionsJson` is
    /// `{ ttlMs }`. Resolves to `{ id, tokens, expiresAt, replaced }`.
    #[wasm_bindgen(js_name = createPrefillWindow)]
    pub fn create_prefill_window(&self, prompt: JsValue, options_json: String) -> Promise {
        let state = self.state.clone();
        let ids = self.ids(&prompt);
        future_to_promise(async move {
            let ids = ids?;
            let ttl = crate::options::prefill_window_options(&options_json).map_err(host_error)?;
            let created = with_host_async(state, async |h: &mut Host| {
                h.create_prefill_window(&ids, ttl).await.map_err(host_error)
            })
            .await?;
            to_js(&created)
        })
    }

    /// Extends window `id` to `prompt` (as `admit` takes it; null or undefined: none) and/or
    /// refreshes its time to live (`optionsJson`: `{ ttlMs }`). Resolves to `{ id, tokens,
    /// expiresAt }`.
    #[wasm_bindgen(js_name = updatePrefillWindow)]
    pub fn update_prefill_window(
        &self,
        id: String,
        prompt: JsValue,
        options_json: String,
    ) -> Promise {
        let state = self.state.clone();
        let ids = match prompt.is_null() || prompt.is_undefined() {
            true => Ok(None),
            false => self.ids(&prompt).map(Some),
        };
        future_to_promise(async move {
            let ids = ids?;
            let ttl = crate::options::prefill_window_options(&options_json).map_err(host_error)?;
            let window = with_host_async(state, async |h: &mut Host| {
                h.update_prefill_window(&id, ids.as_deref(), ttl)
                    .await
                    .map_err(host_error)
            })
            .await?;
            to_js(&window)
        })
    }

    /// Window `id` as `{ id, tokens, expiresAt }`, or null when there is none. Answers during
    /// an async call too.
    #[wasm_bindgen(js_name = prefillWindow)]
    pub fn prefill_window(&self, id: &str) -> Result<JsValue, JsValue> {
        if let State::Idle(host) = &mut *self.state.borrow_mut() {
            return match host.prefill_window(id) {
                Ok(w) => to_js(&w),
                Err(HostError::PrefillWindowNotFound(_)) => Ok(JsValue::NULL),
                Err(e) => Err(host_error(e)),
            };
        }
        let list = prefill_windows(&self.state, &self.lexicon.stats)?;
        match list.iter().find(|w| w.id == id) {
            Some(w) => to_js(w),
            None => Ok(JsValue::NULL),
        }
    }

    /// Every window held, oldest first.
    #[wasm_bindgen(js_name = prefillWindows)]
    pub fn prefill_window_list(&self) -> Result<JsValue, JsValue> {
        to_js(&prefill_windows(&self.state, &self.lexicon.stats)?)
    }

    /// Drops window `id`; false when there is none.
    #[wasm_bindgen(js_name = deletePrefillWindow)]
    pub fn delete_prefill_window(&self, id: &str) -> Result<bool, JsValue> {
        with_host(&self.state, |h| {
            h.delete_prefill_window(id).map_err(host_error)
        })
    }

    /// Fetches layer `layer`; resolves once it is resident.
    #[wasm_bindgen(js_name = prefetchLayer)]
    pub fn prefetch_layer(&self, layer: f64) -> Promise {
        let state = self.state.clone();
        future_to_promise(async move {
            let layer = check_index(layer, "layer")?;
            with_host_async(state, async |h: &mut Host| {
                h.load_layer(layer).await.map_err(host_error)
            })
            .await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Resolves once every read in flight has finished (see `Host::drain_reads`); the shim calls
    /// it when a generation ends, so no read outlives the request that began it.
    #[wasm_bindgen(js_name = drainReads)]
    pub fn drain_reads(&self) -> Promise {
        let state = self.state.clone();
        future_to_promise(async move {
            with_host_async(state, async |h: &mut Host| {
                h.drain_reads().await;
                Ok(())
            })
            .await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Cache and I/O counters, memory, sequences, prefix reuse and the last generation's
    /// report, as a plain object, read now (during an async call too: the host keeps them
    /// current).
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        check_live(&self.state)?;
        to_js(&*self.lexicon.stats.borrow())
    }

    /// The model's name and hyperparameters, as a plain object.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        check_live(&self.state)?;
        js_sys::JSON::parse(&self.lexicon.info)
    }

    /// Aborts the async call in flight: its reads are abandoned at once and it rejects with an
    /// `AbortError` within a layer's compute (a step aborted ends the sequences in it). No-op
    /// when idle; the next call runs normally.
    pub fn abort(&self) {
        self.abort.abort();
    }

    /// Frees the model now, or (aborting it) once the call in flight has unwound. Idempotent.
    pub fn dispose(&self) {
        let mut s = self.state.borrow_mut();
        let old = std::mem::replace(&mut *s, State::Disposed);
        if let State::Busy { .. } = old {
            *s = State::Busy {
                dispose_after: true,
            };
            drop(s);
            self.abort.abort();
        }
    }
}

/// A step's event as JS sees it.
fn event_to_js(e: SequenceEvent) -> Result<JsValue, JsValue> {
    let o = js_sys::Object::new();
    let set = |k: &str, v: &JsValue| js_sys::Reflect::set(&o, &k.into(), v).map(drop);
    set("sequence", &e.id.into())?;
    set("done", &e.done.into())?;
    set("finishReason", &to_js(&e.finish_reason)?)?;
    if let Some(r) = &e.report {
        set("report", &to_js(r)?)?;
    }
    match e.token {
        Ok(Some(mut t)) => {
            if e.done && t.constraint.is_none() {
                t.constraint = e.constraint;
            }
            set("token", &to_js(&t)?)?;
        }
        Ok(None) => set("token", &JsValue::NULL)?,
        Err(err) => {
            set("token", &JsValue::NULL)?;
            set("error", &host_error(err))?;
        }
    }
    Ok(o.into())
}
