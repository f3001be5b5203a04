//! The JS boundary: `WasmHost` (wrapped by the npm package's `HostShim`) and the adapter that
//! turns a JS `KnotByteSource` into a [`ByteSource`]. Every failure becomes a rejected promise
//! with a clear `Error`; nothing here may panic, since a panic aborts the whole wasm instance.

use crate::host::{Host, HostError, HostOptions};
use crate::source::{ByteSource, ReadFuture, SourceError};
use engine::chat::ChatMessage;
use engine::sampler::SamplerConfig;
use engine::tokenizer::StreamDecoder;
use js_sys::{Function, Promise, Reflect, Uint32Array, Uint8Array};
use std::cell::RefCell;
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

fn error(msg: impl std::fmt::Display) -> JsValue {
    js_sys::Error::new(&msg.to_string()).into()
}

/// A JS object with `rangeGet(start, endInclusive): Promise<Uint8Array>` and optionally `size`.
struct JsSource {
    object: JsValue,
    range_get: Function,
    size: Option<u64>,
}

impl JsSource {
    fn new(object: JsValue) -> Result<Self, JsValue> {
        if !object.is_object() {
            return Err(error("source must be an object with a rangeGet(start, end) method"));
        }
        let range_get = Reflect::get(&object, &"rangeGet".into())?
            .dyn_into::<Function>()
            .map_err(|_| error("source.rangeGet must be a function (start, end) => Promise<Uint8Array>"))?;
        let size = Reflect::get(&object, &"size".into())?.as_f64();
        let size = match size {
            Some(s) if s.is_finite() && s >= 0.0 && s.fract() == 0.0 => Some(s as u64),
            Some(s) => return Err(error(format!("source.size must be a non-negative integer, got {s}"))),
            None => None,
        };
        Ok(JsSource { object, range_get, size })
    }
}

impl ByteSource for JsSource {
    fn len(&self) -> Option<u64> {
        self.size
    }

    fn read(&self, start: u64, end: u64) -> ReadFuture {
        let fail = move |message: String| SourceError::Read { start, end, message };
        if end <= start {
            return Box::pin(futures::future::ready(Ok(Vec::new())));
        }
        // Called now, so the transfer starts now; `end` is inclusive on the JS side.
        let called = self.range_get.call2(
            &self.object,
            &JsValue::from_f64(start as f64),
            &JsValue::from_f64((end - 1) as f64),
        );
        let promise = match called {
            Ok(v) => Promise::resolve(&v),
            Err(e) => {
                let msg = format!("rangeGet threw: {}", js_message(&e));
                return Box::pin(futures::future::ready(Err(fail(msg))));
            }
        };
        let future = JsFuture::from(promise);
        Box::pin(async move {
            let value = future
                .await
                .map_err(|e| fail(format!("rangeGet rejected: {}", js_message(&e))))?;
            let bytes = value
                .dyn_into::<Uint8Array>()
                .map_err(|_| fail("rangeGet must resolve to a Uint8Array".into()))?;
            Ok(bytes.to_vec())
        })
    }
}

fn get(obj: &JsValue, key: &str) -> Result<Option<JsValue>, JsValue> {
    if obj.is_undefined() || obj.is_null() {
        return Ok(None);
    }
    let v = Reflect::get(obj, &key.into())?;
    Ok(if v.is_undefined() || v.is_null() { None } else { Some(v) })
}

fn number(obj: &JsValue, key: &str) -> Result<Option<f64>, JsValue> {
    match get(obj, key)? {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite())
            .map(Some)
            .ok_or_else(|| error(format!("option {key} must be a finite number"))),
    }
}

fn integer(obj: &JsValue, key: &str, min: f64) -> Result<Option<u64>, JsValue> {
    match number(obj, key)? {
        Some(f) if f.fract() != 0.0 || f < min => {
            Err(error(format!("option {key} must be an integer >= {min}, got {f}")))
        }
        other => Ok(other.map(|f| f as u64)),
    }
}

fn boolean(obj: &JsValue, key: &str) -> Result<Option<bool>, JsValue> {
    match get(obj, key)? {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| error(format!("option {key} must be a boolean"))),
    }
}

fn sampler_config(o: &JsValue) -> Result<SamplerConfig, JsValue> {
    let d = SamplerConfig::default();
    let cfg = SamplerConfig {
        temperature: number(o, "temperature")?.map_or(d.temperature, |v| v as f32),
        top_k: integer(o, "topK", 0.0)?.map_or(d.top_k, |v| v as usize),
        top_p: number(o, "topP")?.map_or(d.top_p, |v| v as f32),
        min_p: number(o, "minP")?.map_or(d.min_p, |v| v as f32),
        repeat_penalty: number(o, "repeatPenalty")?.map_or(d.repeat_penalty, |v| v as f32),
        repeat_last_n: integer(o, "repeatLastN", 0.0)?.map_or(d.repeat_last_n, |v| v as usize),
        seed: integer(o, "seed", 0.0)?.unwrap_or(d.seed),
    };
    cfg.validate().map_err(error)?;
    Ok(cfg)
}

fn host_error(e: HostError) -> JsValue {
    error(e)
}

/// The Rust side of the package's `HostShim`. All methods reject after `dispose()`.
#[wasm_bindgen]
pub struct WasmHost {
    inner: Rc<RefCell<Option<Host>>>,
}

/// Runs `f` on the host, failing clearly when disposed or when another call holds it.
fn with_host<T>(
    cell: &RefCell<Option<Host>>,
    f: impl FnOnce(&mut Host) -> Result<T, JsValue>,
) -> Result<T, JsValue> {
    let mut guard = cell
        .try_borrow_mut()
        .map_err(|_| error("HostShim is busy: await the previous call first"))?;
    let host = guard.as_mut().ok_or_else(|| error("HostShim has been disposed"))?;
    f(host)
}

#[wasm_bindgen]
impl WasmHost {
    /// `options`: `{ lruCapacity, maxResidentBytes, prefetch, maxContext }`.
    pub fn open(source: JsValue, options: JsValue) -> Promise {
        future_to_promise(async move {
            let source = JsSource::new(source)?;
            let d = HostOptions::default();
            let opts = HostOptions {
                lru_capacity: integer(&options, "lruCapacity", 1.0)?.map_or(d.lru_capacity, |v| v as usize),
                max_resident_bytes: integer(&options, "maxResidentBytes", 0.0)?,
                prefetch: boolean(&options, "prefetch")?.unwrap_or(d.prefetch),
                max_context: integer(&options, "maxContext", 1.0)?.map_or(d.max_context, |v| v as usize),
                read: d.read,
            };
            let host = Host::open(Rc::new(source), opts).await.map_err(host_error)?;
            Ok(WasmHost { inner: Rc::new(RefCell::new(Some(host))) }.into())
        })
    }

    /// Generates up to `n` tokens after `tokens`. `options`: sampling (`temperature`, `topK`,
    /// `topP`, `minP`, `repeatPenalty`, `seed`), `continue` (append to the session),
    /// `onToken(id, text)` (return `false` to stop), `signal` (an AbortSignal).
    pub fn generate(&self, tokens: Uint32Array, n: f64, options: JsValue) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            if !(n.is_finite() && n >= 0.0 && n.fract() == 0.0) {
                return Err(error(format!("n must be a non-negative integer, got {n}")));
            }
            let prompt = tokens.to_vec();
            let sampler = sampler_config(&options)?;
            let continue_session = boolean(&options, "continue")?.unwrap_or(false);
            let on_token = match get(&options, "onToken")? {
                None => None,
                Some(f) => Some(f.dyn_into::<Function>().map_err(|_| error("onToken must be a function"))?),
            };
            let signal = get(&options, "signal")?;
            let aborted = |signal: &Option<JsValue>| -> bool {
                signal
                    .as_ref()
                    .and_then(|s| Reflect::get(s, &"aborted".into()).ok())
                    .and_then(|a| a.as_bool())
                    .unwrap_or(false)
            };
            if aborted(&signal) {
                return Err(abort_error());
            }
            let mut guard = inner
                .try_borrow_mut()
                .map_err(|_| error("HostShim is busy: await the previous call first"))?;
            let host = guard.as_mut().ok_or_else(|| error("HostShim has been disposed"))?;
            host.set_sampler(sampler).map_err(host_error)?;
            let tokenizer = host.tokenizer().clone();
            let mut stream = StreamDecoder::new(&tokenizer);
            let mut callback_error: Option<JsValue> = None;
            let mut was_aborted = false;
            let mut on = |id: u32| -> bool {
                if aborted(&signal) {
                    was_aborted = true;
                    return false;
                }
                if let Some(f) = &on_token {
                    let piece = stream.push(id).unwrap_or_default();
                    match f.call2(&JsValue::NULL, &JsValue::from(id), &JsValue::from(piece)) {
                        Ok(v) if v.as_bool() == Some(false) => return false,
                        Ok(_) => {}
                        Err(e) => {
                            callback_error = Some(e);
                            return false;
                        }
                    }
                }
                true
            };
            let out = host
                .generate(&prompt, n as usize, continue_session, &mut on)
                .await
                .map_err(host_error)?;
            if let Some(e) = callback_error {
                return Err(e);
            }
            if was_aborted {
                return Err(abort_error());
            }
            Ok(Uint32Array::from(out.as_slice()).into())
        })
    }

    /// Text to ids; `addBos` prepends the model's BOS when its tokenizer asks for one.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Uint32Array, JsValue> {
        with_host(&self.inner, |h| {
            let t = h.tokenizer();
            let ids = if add_bos { t.encode_with_bos(text) } else { t.encode(text) };
            Ok(Uint32Array::from(ids.as_slice()))
        })
    }

    pub fn decode(&self, ids: Uint32Array) -> Result<String, JsValue> {
        with_host(&self.inner, |h| h.tokenizer().decode(&ids.to_vec()).map_err(error))
    }

    /// Renders `[{ role, content }]` with the model's chat template (generation prompt added).
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(&self, messages: JsValue) -> Result<String, JsValue> {
        let array = messages
            .dyn_into::<js_sys::Array>()
            .map_err(|_| error("messages must be an array of { role, content }"))?;
        let mut list = Vec::new();
        for (i, m) in array.iter().enumerate() {
            let field = |k: &str| -> Result<String, JsValue> {
                get(&m, k)?
                    .and_then(|v| v.as_string())
                    .ok_or_else(|| error(format!("messages[{i}].{k} must be a string")))
            };
            list.push(ChatMessage { role: field("role")?, content: field("content")? });
        }
        with_host(&self.inner, |h| h.chat_prompt(&list).map_err(host_error))
    }

    /// Cache and I/O counters, memory and timings, as a plain object.
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        with_host(&self.inner, |h| {
            let json = serde_json::to_string(&h.stats()).map_err(error)?;
            js_sys::JSON::parse(&json)
        })
    }

    /// The model's hyperparameters and name, as a plain object.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        with_host(&self.inner, |h| {
            let m = &h.knot().meta;
            let v = serde_json::json!({ "name": m.name, "architecture": m.architecture, "config": m.config });
            js_sys::JSON::parse(&v.to_string())
        })
    }

    /// Fetches layer `layer` and resolves once it is resident.
    #[wasm_bindgen(js_name = prefetchLayer)]
    pub fn prefetch_layer(&self, layer: f64) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            if !(layer.is_finite() && layer >= 0.0 && layer.fract() == 0.0) {
                return Err(error(format!("layer must be a non-negative integer, got {layer}")));
            }
            let mut guard = inner
                .try_borrow_mut()
                .map_err(|_| error("HostShim is busy: await the previous call first"))?;
            let host = guard.as_mut().ok_or_else(|| error("HostShim has been disposed"))?;
            host.load_layer(layer as usize).await.map_err(host_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Forgets the conversation; cached layers stay.
    pub fn reset(&self) -> Result<(), JsValue> {
        with_host(&self.inner, |h| {
            h.reset();
            Ok(())
        })
    }

    /// Frees the model. Idempotent; every later call rejects.
    pub fn dispose(&self) -> Result<(), JsValue> {
        match self.inner.try_borrow_mut() {
            Ok(mut guard) => {
                guard.take();
                Ok(())
            }
            Err(_) => Err(error("HostShim is busy: await the previous call before dispose()")),
        }
    }

    #[wasm_bindgen(getter)]
    pub fn disposed(&self) -> bool {
        self.inner.try_borrow().map(|g| g.is_none()).unwrap_or(false)
    }
}

fn abort_error() -> JsValue {
    let e = js_sys::Error::new("the operation was aborted");
    e.set_name("AbortError");
    e.into()
}
