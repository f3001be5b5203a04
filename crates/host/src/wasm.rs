//! The JS boundary: `WasmHost` (wrapped by the npm package's `HostShim`) and the adapter that
//! turns a JS `KnotByteSource` into a [`ByteSource`]. Every failure becomes a rejected promise
//! with a clear `Error`; nothing here may panic, since a panic aborts the whole wasm instance.

use crate::host::{Host, HostError, Stats};
use crate::reader::Abort;
use crate::source::{ByteSource, ReadFuture, SourceError};
use engine::chat::ChatMessage;
use engine::decode::GenerateOptions;
use engine::tokenizer::Tokenizer;
use js_sys::{Array, Function, Promise, Reflect, Uint32Array, Uint8Array};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

fn js_message(v: &JsValue) -> String {
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    v.as_string().unwrap_or_else(|| format!("{v:?}"))
}

pub(crate) fn error(msg: impl std::fmt::Display) -> JsValue {
    js_sys::Error::new(&msg.to_string()).into()
}

/// Whether a thrown or rejected JS value says retrying cannot help (`error.permanent === true`).
fn is_permanent(v: &JsValue) -> bool {
    v.is_object() && Reflect::get(v, &"permanent".into()).is_ok_and(|p| p.as_bool() == Some(true))
}

/// A non-negative integer option from JS: at most 2^53 (what a JS number holds exactly).
pub(crate) fn check_count(v: f64, what: &str) -> Result<u64, JsValue> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_SAFE {
        Ok(v as u64)
    } else {
        Err(error(format!(
            "{what} must be an integer in [0, 2^53), got {v}"
        )))
    }
}

/// A count that bounds something smaller anyway (layers, attempts): larger ones mean "all".
fn saturating_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Settles a JS promise the host may stop waiting for: the returned promise is the original
/// raced against a gate that [`Abandon`] rejects when dropped. A read abandoned by a timeout or
/// an abort then still settles, so the callbacks `JsFuture` hung on it run and free themselves
/// (on a promise that never settles they would leak), and what the read brings later is
/// dropped.
fn abandonable(promise: &Promise) -> (Promise, Abandon) {
    let mut gate_reject = None;
    let gate = Promise::new(&mut |_resolve, reject| gate_reject = Some(reject));
    let raced = Promise::race(&Array::of2(promise, &gate));
    (raced, Abandon(gate_reject))
}

struct Abandon(Option<Function>);

impl Abandon {
    /// The race has settled on its own.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(reject) = self.0.take() {
            let _ = reject.call1(&JsValue::NULL, &"abandoned".into());
        }
    }
}

/// A JS object with `rangeGet(start, endInclusive): Promise<Uint8Array>`, optionally
/// `rangeGetInto(start, endInclusive, target): Promise<number>` (fills `target`, a view of wasm
/// memory, and resolves to the bytes written) and `size`.
pub(crate) struct JsSource {
    object: JsValue,
    range_get: Function,
    range_get_into: Option<Function>,
    size: Option<u64>,
    on_progress: Option<Function>,
    progress: Rc<Cell<(u64, u64)>>,
}

impl JsSource {
    pub(crate) fn new(object: JsValue) -> Result<Self, JsValue> {
        if !object.is_object() {
            return Err(error(
                "source must be an object with a rangeGet(start, end) method",
            ));
        }
        let range_get = Reflect::get(&object, &"rangeGet".into())?
            .dyn_into::<Function>()
            .map_err(|_| {
                error("source.rangeGet must be a function (start, end) => Promise<Uint8Array>")
            })?;
        let range_get_into = Reflect::get(&object, &"rangeGetInto".into())?;
        let range_get_into = match range_get_into.is_undefined() || range_get_into.is_null() {
            true => None,
            false => Some(range_get_into.dyn_into::<Function>().map_err(|_| {
                error("source.rangeGetInto must be a function (start, end, target) => Promise<number> or undefined")
            })?),
        };
        let size = Reflect::get(&object, &"size".into())?;
        let size = match size.as_f64() {
            _ if size.is_undefined() || size.is_null() => None,
            Some(s) if s.is_finite() && s >= 0.0 && s.fract() == 0.0 => Some(s as u64),
            Some(s) => {
                return Err(error(format!(
                    "source.size must be a non-negative integer or undefined, got {s}"
                )))
            }
            // A string or BigInt size would otherwise be ignored without a word.
            None => {
                return Err(error(format!(
                    "source.size must be a non-negative integer or undefined, got a {}",
                    size.js_typeof().as_string().unwrap_or_default()
                )))
            }
        };
        Ok(JsSource {
            object,
            range_get,
            range_get_into,
            size,
            on_progress: None,
            progress: Rc::default(),
        })
    }

    /// Calls `method(start, endInclusive[, target])` now, so the transfer starts now.
    fn call(
        &self,
        method: &Function,
        name: &str,
        start: u64,
        end: u64,
        target: Option<&Uint8Array>,
    ) -> Result<Promise, SourceError> {
        let (s, e) = (
            JsValue::from_f64(start as f64),
            JsValue::from_f64((end - 1) as f64),
        );
        let called = match target {
            None => method.call2(&self.object, &s, &e),
            Some(t) => method.call3(&self.object, &s, &e, t),
        };
        called.map(|v| Promise::resolve(&v)).map_err(|e| {
            read_failure(
                start,
                end,
                format!("{name} threw: {}", js_message(&e)),
                is_permanent(&e),
            )
        })
    }

    /// `rangeGet`, its answer copied into `buf` (resized to the span; a recycled buffer of the
    /// right length is not reallocated).
    fn copy_in(&self, start: u64, end: u64, mut buf: Vec<u8>) -> ReadFuture {
        if end <= start {
            return Box::pin(futures::future::ready(Ok(Vec::new())));
        }
        let promise = match self.call(&self.range_get, "rangeGet", start, end, None) {
            Ok(p) => p,
            Err(e) => return Box::pin(futures::future::ready(Err(e))),
        };
        let (raced, mut abandon) = abandonable(&promise);
        let future = JsFuture::from(raced);
        let report = self.reporter();
        Box::pin(async move {
            let settled = future.await;
            abandon.disarm();
            let value = settled.map_err(|e| {
                let message = format!("rangeGet rejected: {}", js_message(&e));
                read_failure(start, end, message, is_permanent(&e))
            })?;
            let bytes = value.dyn_into::<Uint8Array>().map_err(|_| {
                read_failure(
                    start,
                    end,
                    "rangeGet must resolve to a Uint8Array".into(),
                    true,
                )
            })?;
            // The length is checked before anything is copied into wasm memory: a source
            // answering with a huge array must not make the instance allocate it. Read as a
            // number, since `length()` would wrap past 2^32.
            let got = Reflect::get(&bytes, &"length".into())
                .ok()
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0);
            let expected = check_length(start, end, got)?;
            buf.resize(expected as usize, 0);
            bytes.copy_to(&mut buf);
            report(expected);
            Ok(buf)
        })
    }

    /// Counts a finished read and tells the progress callback.
    fn reporter(&self) -> impl Fn(u64) + 'static {
        let (progress, on_progress) = (self.progress.clone(), self.on_progress.clone());
        move |len| {
            let (loaded, reads) = progress.get();
            progress.set((loaded + len, reads + 1));
            if let Some(f) = &on_progress {
                let (loaded, reads) = progress.get();
                let event = js_sys::Object::new();
                let _ = Reflect::set(&event, &"bytesLoaded".into(), &(loaded as f64).into());
                let _ = Reflect::set(&event, &"rangeReads".into(), &(reads as f64).into());
                // A throwing progress callback must not break loading.
                let _ = f.call1(&JsValue::NULL, &event);
            }
        }
    }
}

/// The span's length, or a length error when a source reports `got` bytes (a JS number) for it.
fn check_length(start: u64, end: u64, got: f64) -> Result<u64, SourceError> {
    let expected = end - start;
    match got == expected as f64 {
        true => Ok(expected),
        false => Err(SourceError::Length {
            start,
            end,
            got: got as u64,
            expected,
        }),
    }
}

fn read_failure(start: u64, end: u64, message: String, permanent: bool) -> SourceError {
    match permanent {
        true => SourceError::Permanent {
            start,
            end,
            message,
        },
        false => SourceError::Read {
            start,
            end,
            message,
        },
    }
}

impl ByteSource for JsSource {
    fn len(&self) -> Option<u64> {
        self.size
    }

    fn read(&self, start: u64, end: u64) -> ReadFuture {
        self.copy_in(start, end, Vec::new())
    }

    fn fills_buffers(&self) -> bool {
        true
    }

    /// Through `rangeGetInto` when the source has it: JS writes the span straight into `buf`
    /// in wasm memory (a file read lands there from the OS), with no JS array and no copy.
    /// Otherwise `rangeGet`'s answer is copied into `buf`.
    fn read_into(&self, start: u64, end: u64, mut buf: Vec<u8>) -> ReadFuture {
        let Some(method) = &self.range_get_into else {
            return self.copy_in(start, end, buf);
        };
        if end <= start || buf.len() as u64 != end - start {
            return self.copy_in(start, end, Vec::new());
        }
        // SAFETY: the view covers `buf`'s bytes, which stay where they are (and allocated:
        // `Lent` keeps them until the promise settles, even if this read is dropped before).
        // If wasm memory grows meanwhile the view detaches; that is checked below.
        let view = unsafe { Uint8Array::view_mut_raw(buf.as_mut_ptr(), buf.len()) };
        let promise = match self.call(method, "rangeGetInto", start, end, Some(&view)) {
            Ok(p) => p,
            Err(e) => return Box::pin(futures::future::ready(Err(e))),
        };
        let (raced, mut abandon) = abandonable(&promise);
        let future = JsFuture::from(raced);
        let mut lent = Lent {
            buf: Some(buf),
            promise,
        };
        let report = self.reporter();
        Box::pin(async move {
            let settled = future.await;
            abandon.disarm();
            // Settled on its own (the gate only fires when this future is dropped): JS is done
            // with the buffer.
            let buf = lent.buf.take().unwrap_or_default();
            let value = settled.map_err(|e| {
                let message = format!("rangeGetInto rejected: {}", js_message(&e));
                read_failure(start, end, message, is_permanent(&e))
            })?;
            let got = value.as_f64().ok_or_else(|| {
                let message = "rangeGetInto must resolve to the number of bytes written".into();
                read_failure(start, end, message, true)
            })?;
            let expected = check_length(start, end, got)?;
            // Memory that grew while the read was in flight may have moved: what was written
            // through the old view is not trusted (another attempt writes through a new one).
            if view.byte_length() == 0 {
                let message = "wasm memory grew while rangeGetInto was writing".into();
                return Err(read_failure(start, end, message, false));
            }
            report(expected);
            Ok(buf)
        })
    }
}

/// A buffer JS may be writing into. Dropped before its promise settles (a timeout, an abort),
/// it is handed to the promise's `finally`, so the memory is freed only once JS is done with it
/// and no later allocation can be overwritten by a late write.
struct Lent {
    buf: Option<Vec<u8>>,
    promise: Promise,
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        // Should the call fail, the closure is never run and `buf` is never freed: a leak
        // rather than a late write into reused memory.
        let release = Closure::once_into_js(move || drop(buf));
        if let Ok(finally) = Reflect::get(&self.promise, &"finally".into()) {
            if let Ok(finally) = finally.dyn_into::<Function>() {
                let _ = finally.call1(&self.promise, &release);
            }
        }
    }
}

/// A host error as a JS Error; an aborted call's is named `AbortError`, as the DOM's are.
/// `[{ role, content }]` from JSON.
pub(crate) fn parse_messages(messages_json: &str) -> Result<Vec<ChatMessage>, JsValue> {
    #[derive(serde::Deserialize)]
    struct Message {
        role: String,
        content: String,
    }
    let list: Vec<Message> = serde_json::from_str(messages_json)
        .map_err(|e| error(format!("messages must be [{{ role, content }}]: {e}")))?;
    Ok(list
        .into_iter()
        .map(|m| ChatMessage {
            role: m.role,
            content: m.content,
        })
        .collect())
}

pub(crate) fn host_error(e: HostError) -> JsValue {
    let aborted = matches!(
        e,
        HostError::Aborted | HostError::Source(SourceError::Aborted { .. })
    );
    let err = js_sys::Error::new(&e.to_string());
    if aborted {
        err.set_name("AbortError");
    }
    err.into()
}

/// Where the host is: idle in the cell, lent out to an async call (with its stats as the call
/// began, which `stats()` answers meanwhile), or freed.
enum State {
    Idle(Box<Host>),
    Busy {
        dispose_after: bool,
        stats: Box<Stats>,
    },
    Disposed,
}

/// What the synchronous queries need, kept outside the host so that they answer while an
/// async call has it.
struct Lexicon {
    tokenizer: Rc<Tokenizer>,
    chat_template: Option<String>,
    /// `info()`'s object, as JSON.
    info: String,
}

/// The Rust side of the package's `HostShim` (pkg/src/shim.js), which validates arguments and
/// runs calls one at a time; this layer still refuses overlapping or post-dispose calls cleanly.
#[wasm_bindgen]
pub struct WasmHost {
    state: Rc<RefCell<State>>,
    abort: Abort,
    lexicon: Lexicon,
    vocab_size: u32,
    layer_count: u32,
    context_length: u32,
    eos_ids: Vec<u32>,
}

const DISPOSED: &str = "HostShim has been disposed";

/// Runs a synchronous call on the idle host.
fn with_host<T>(
    state: &RefCell<State>,
    f: impl FnOnce(&mut Host) -> Result<T, JsValue>,
) -> Result<T, JsValue> {
    match &mut *state.borrow_mut() {
        State::Idle(host) => f(host),
        State::Busy {
            dispose_after: true,
            ..
        }
        | State::Disposed => Err(error(DISPOSED)),
        State::Busy { .. } => Err(error("HostShim is busy: await the previous call first")),
    }
}

/// Fails once the host is disposed (or will be when its call ends).
fn check_live(state: &RefCell<State>) -> Result<(), JsValue> {
    match &*state.borrow() {
        State::Busy {
            dispose_after: true,
            ..
        }
        | State::Disposed => Err(error(DISPOSED)),
        _ => Ok(()),
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
        let host = match &*s {
            State::Idle(host) => host,
            State::Disposed => return Err(error(DISPOSED)),
            State::Busy { .. } => {
                return Err(error("HostShim is busy: await the previous call first"))
            }
        };
        let stats = Box::new(host.stats());
        let State::Idle(host) = std::mem::replace(
            &mut *s,
            State::Busy {
                dispose_after: false,
                stats,
            },
        ) else {
            unreachable!("matched Idle above")
        };
        host
    };
    let result = f(&mut host).await;
    let mut s = state.borrow_mut();
    *s = match *s {
        State::Busy {
            dispose_after: true,
            ..
        } => State::Disposed,
        _ => State::Idle(host),
    };
    result
}

fn check_index(v: f64, what: &str) -> Result<usize, JsValue> {
    check_count(v, what).map(saturating_usize)
}

#[wasm_bindgen]
impl WasmHost {
    /// Opens a knot file through `source`. `optionsJson` is `HostShim.open`'s options object
    /// (without `onProgress`) as JSON, checked by `host::options::open_options`;
    /// `onProgress({ bytesLoaded, rangeReads })` is called after every completed read.
    pub fn open(source: JsValue, options_json: String, on_progress: Option<Function>) -> Promise {
        future_to_promise(async move {
            let opts = crate::options::open_options(&options_json).map_err(error)?;
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
                "contextLength": host.stats().context_length,
            });
            Ok(WasmHost {
                vocab_size: cfg.vocab_size as u32,
                layer_count: cfg.n_layers as u32,
                context_length: host.stats().context_length as u32,
                eos_ids: cfg.eos_ids.clone(),
                abort: host.abort_handle(),
                lexicon: Lexicon {
                    tokenizer: host.tokenizer().clone(),
                    chat_template: m.chat_template.clone(),
                    info: info.to_string(),
                },
                state: Rc::new(RefCell::new(State::Idle(Box::new(host)))),
            }
            .into())
        })
    }

    /// Positions the context holds (under a memory budget, what fits).
    #[wasm_bindgen(getter, js_name = contextLength)]
    pub fn context_length(&self) -> u32 {
        self.context_length
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
            .map_err(error)?;
        Ok(Uint32Array::from(ids.as_slice()))
    }

    /// Ids to text (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: Uint32Array) -> Result<String, JsValue> {
        check_live(&self.state)?;
        self.lexicon.tokenizer.decode(&ids.to_vec()).map_err(error)
    }

    /// Renders `[{ role, content }]` (as JSON) with the model's chat template.
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(&self, messages_json: &str) -> Result<String, JsValue> {
        let list = parse_messages(messages_json)?;
        check_live(&self.state)?;
        let template = self.lexicon.chat_template.as_deref();
        engine::chat::chat_prompt(template, &self.lexicon.tokenizer, &list)
            .map_err(|e| host_error(HostError::from(e)))
    }

    /// Forgets the conversation; cached layers stay.
    pub fn reset(&self) -> Result<(), JsValue> {
        with_host(&self.state, |h| {
            h.reset();
            Ok(())
        })
    }

    /// Starts a generation: `optionsJson` is the options object (`GenerateOptions::from_json`:
    /// sampling, `moa`, `maxTokens`, `continue`, `ignoreEos`), validated here; the prompt ids run
    /// through the model. Tokens then come from `next()`.
    pub fn start(&self, ids: Uint32Array, options_json: String) -> Promise {
        let state = self.state.clone();
        let ids = ids.to_vec();
        future_to_promise(async move {
            let opts = GenerateOptions::from_json(&options_json).map_err(error)?;
            with_host_async(state, async |h: &mut Host| {
                h.start(&ids, &opts).await.map_err(host_error)
            })
            .await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The next token of the generation: `{ id, text, finishReason, step }`, or null once it
    /// has finished.
    pub fn next(&self) -> Promise {
        let state = self.state.clone();
        future_to_promise(async move {
            let emitted = with_host_async(state, async |h: &mut Host| {
                h.next().await.map_err(host_error)
            })
            .await?;
            match emitted {
                None => Ok(JsValue::NULL),
                Some(e) => js_sys::JSON::parse(&serde_json::to_string(&e).map_err(error)?),
            }
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

    /// Cache and I/O counters, memory and timings, as a plain object; during an async call,
    /// as they were when it began.
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        check_live(&self.state)?;
        let json = match &*self.state.borrow() {
            State::Idle(h) => serde_json::to_string(&h.stats()),
            State::Busy { stats, .. } => serde_json::to_string(stats),
            State::Disposed => return Err(error(DISPOSED)),
        }
        .map_err(error)?;
        js_sys::JSON::parse(&json)
    }

    /// The model's name and hyperparameters, as a plain object.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        check_live(&self.state)?;
        js_sys::JSON::parse(&self.lexicon.info)
    }

    /// Aborts the async call in flight: its reads are abandoned at once and it rejects with an
    /// `AbortError` within a layer's compute; the conversation stays as before the call. No-op
    /// when idle; the next call runs normally.
    pub fn abort(&self) {
        self.abort.abort();
    }

    /// Frees the model now, or (aborting it) once the call in flight has unwound. Idempotent.
    pub fn dispose(&self) {
        let mut s = self.state.borrow_mut();
        let old = std::mem::replace(&mut *s, State::Disposed);
        if let State::Busy { stats, .. } = old {
            *s = State::Busy {
                dispose_after: true,
                stats,
            };
            drop(s);
            self.abort.abort();
        }
    }
}

/// `createMoaAgents`: the agents' temperatures for `{ k, baseTemperature, temperatureSpread,
/// minTemperature }` (JSON).
#[wasm_bindgen(js_name = moaAgents)]
pub fn moa_agents(options_json: &str) -> Result<Vec<f64>, JsValue> {
    crate::helpers::agents(options_json).map_err(error)
}

/// `deficitWeightedMerge`: `{ merged, weights, deficit }` for `{ dists, strategy, useKl }`
/// (JSON).
#[wasm_bindgen(js_name = moaMerge)]
pub fn moa_merge(request_json: &str) -> Result<JsValue, JsValue> {
    let merged = crate::helpers::merge(request_json).map_err(error)?;
    js_sys::JSON::parse(&serde_json::to_string(&merged).map_err(error)?)
}

/// `coltraneFromResponseFormat`: the `coltrane` options for an OpenAI `response_format`
/// (JSON), or null for plain text.
#[wasm_bindgen(js_name = coltraneFromResponseFormat)]
pub fn coltrane_from_response_format(response_format_json: &str) -> Result<JsValue, JsValue> {
    let v = crate::helpers::response_format(response_format_json).map_err(error)?;
    js_sys::JSON::parse(&v.to_string())
}
