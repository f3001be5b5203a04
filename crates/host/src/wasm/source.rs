//! A JS `KnotByteSource` as a [`ByteSource`]: `rangeGet(start, endInclusive)` answers copied
//! into wasm memory, or `rangeGetInto` writing straight into it; every read abandonable.

use super::errors::{invalid_argument, js_message};
use crate::source::{ByteSource, ReadFuture, SourceError};
use js_sys::{Array, Function, Promise, Reflect, Uint8Array};
use std::cell::Cell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// Whether a thrown or rejected JS value says retrying cannot help (`error.permanent === true`).
fn is_permanent(v: &JsValue) -> bool {
    v.is_object() && Reflect::get(v, &"permanent".into()).is_ok_and(|p| p.as_bool() == Some(true))
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
    pub(crate) on_progress: Option<Function>,
    progress: Rc<Cell<(u64, u64)>>,
}

impl JsSource {
    pub(crate) fn new(object: JsValue) -> Result<Self, JsValue> {
        if !object.is_object() {
            return Err(invalid_argument(
                "source must be an object with a rangeGet(start, end) method",
            ));
        }
        let range_get = Reflect::get(&object, &"rangeGet".into())?
            .dyn_into::<Function>()
            .map_err(|_| {
                invalid_argument(
                    "source.rangeGet must be a function (start, end) => Promise<Uint8Array>",
                )
            })?;
        let range_get_into = Reflect::get(&object, &"rangeGetInto".into())?;
        let range_get_into = match range_get_into.is_undefined() || range_get_into.is_null() {
            true => None,
            false => Some(range_get_into.dyn_into::<Function>().map_err(|_| {
                invalid_argument("source.rangeGetInto must be a function (start, end, target) => Promise<number> or undefined")
            })?),
        };
        let size = Reflect::get(&object, &"size".into())?;
        let size = match size.as_f64() {
            _ if size.is_undefined() || size.is_null() => None,
            Some(s) if s.is_finite() && s >= 0.0 && s.fract() == 0.0 => Some(s as u64),
            Some(s) => {
                return Err(invalid_argument(format!(
                    "source.size must be a non-negative integer or undefined, got {s}"
                )))
            }
            // A string or BigInt size would otherwise be ignored without a word.
            None => {
                return Err(invalid_argument(format!(
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
