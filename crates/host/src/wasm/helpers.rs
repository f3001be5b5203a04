//! The package's pure helpers (JSON in, values out; see `crate::helpers`, tested natively) and
//! the list of error codes.

use std::rc::Rc;

use super::convert::to_js;
use super::errors::{host_error, js_error};
use super::source::JsSource;
use crate::error::ErrorCode;
use crate::helpers::MoaApiError;
use crate::reader::{ReadPolicy, Reader};
use crate::station::open_index;
use crate::station::plan::{plan_options, plan_stations, PlanError};
use js_sys::Promise;
use knot::ReadOptions;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

/// `createMoaAgents`: the agents' temperatures for `{ k, baseTemperature, temperatureSpread,
/// minTemperature }` (JSON).
#[wasm_bindgen(js_name = moaAgents)]
pub fn moa_agents(options_json: &str) -> Result<Vec<f64>, JsValue> {
    crate::helpers::agents(options_json).map_err(helper_error)
}

/// `deficitWeightedMerge`: `{ merged, weights, deficit }` for `{ dists, strategy, useKl }`
/// (JSON).
#[wasm_bindgen(js_name = moaMerge)]
pub fn moa_merge(request_json: &str) -> Result<JsValue, JsValue> {
    to_js(&crate::helpers::merge(request_json).map_err(helper_error)?)
}

/// `coltraneFromResponseFormat`: the `coltrane` options for an OpenAI `response_format`
/// (JSON), or null for plain text.
#[wasm_bindgen(js_name = coltraneFromResponseFormat)]
pub fn coltrane_from_response_format(response_format_json: &str) -> Result<JsValue, JsValue> {
    to_js(&crate::helpers::response_format(response_format_json).map_err(helper_error)?)
}

/// `schemaProblem`: why COLTRANE cannot enforce a JSON Schema (JSON), or undefined.
#[wasm_bindgen(js_name = schemaProblem)]
pub fn schema_problem(schema_json: &str) -> Option<String> {
    crate::helpers::schema_problem(schema_json)
}

/// `planStations`: the fewest layer and head stations of the knot file behind `source` (a
/// `KnotByteSource`) whose every isolate fits `memoryBudget`, from its index alone (two reads),
/// as `{ layers, heads, budget, context, stations: [{ kind, layers?, rows?, weights, tokenizer,
/// kvCache, activations, logits, overhead, total }] }`; `over_budget` when no split fits.
#[wasm_bindgen(js_name = planStations)]
pub fn plan_stations_js(source: JsValue, options_json: String) -> Promise {
    future_to_promise(async move {
        let input = plan_options(&options_json).map_err(|e| plan_error(e.into()))?;
        let reader = Reader::new(Rc::new(JsSource::new(source)?), ReadPolicy::default());
        let knot = open_index(&reader, &ReadOptions::default())
            .await
            .map_err(host_error)?;
        to_js(&plan_stations(&knot, &input).map_err(plan_error)?)
    })
}

fn plan_error(e: PlanError) -> JsValue {
    js_error(e.code(), e)
}

fn helper_error(e: MoaApiError) -> JsValue {
    js_error(e.code(), e)
}

/// Every error code a failure may carry (docs/errors.md), in order.
#[wasm_bindgen(js_name = errorCodes)]
pub fn error_codes() -> Vec<String> {
    ErrorCode::ALL
        .iter()
        .map(|c| c.as_str().to_string())
        .collect()
}
