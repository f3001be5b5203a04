//! How failures cross to JS: an `Error` whose `code` is the stable [`ErrorCode`] (the list is
//! docs/errors.md), whose `param` names the option it is about when there is one, and whose
//! `name` is `AbortError` for an aborted call, as the DOM's are.

use crate::error::{ErrorCode, HostError};
use js_sys::Reflect;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// A JS `Error` with `message` and `code`.
pub(crate) fn js_error(code: ErrorCode, message: impl std::fmt::Display) -> JsValue {
    let err = js_sys::Error::new(&message.to_string());
    let _ = Reflect::set(&err, &"code".into(), &code.as_str().into());
    if code == ErrorCode::Aborted {
        err.set_name("AbortError");
    }
    err.into()
}

/// An argument of the wrong type or shape.
pub(crate) fn invalid_argument(message: impl std::fmt::Display) -> JsValue {
    js_error(ErrorCode::InvalidArgument, message)
}

/// A host failure with its code (and `param`, for an option).
pub(crate) fn host_error(e: impl Into<HostError>) -> JsValue {
    let e = e.into();
    let err = js_error(e.code(), &e);
    if let Some(param) = e.param() {
        let _ = Reflect::set(&err, &"param".into(), &param.into());
    }
    err
}

/// What a thrown or rejected JS value says.
pub(crate) fn js_message(v: &JsValue) -> String {
    if let Some(e) = v.dyn_ref::<js_sys::Error>() {
        return String::from(e.message());
    }
    v.as_string().unwrap_or_else(|| format!("{v:?}"))
}
